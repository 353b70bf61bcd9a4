/* pooling.c: max_pool and avg_pool, NHWC.
 *
 * x is (n, in_h, in_w, c), y is (n, out_h, out_w, c). Window positions outside the input are
 * skipped: max ignores them, avg divides by the count of valid positions (TF). Both versions
 * visit valid positions in (kh, kw) ascending order, so fast == ref bitwise. The fast version
 * works per output row (split over rows) with vector loops over channels.
 */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

#define PMAX(m, v) (((v) > (m) || (v) != (v)) ? (v) : (m))

typedef struct pool_job {
  const npuK_window2d *w;
  const float *x;
  float *y;
  /* x holds input rows from row x_row0 (image * in_h + ih) on, y output rows from y_row0
     (image * out_h + oh): both 0 for whole tensors; a band of widened rows and a one-row
     float32 buffer for reduced x and y (pool_half) */
  int64_t x_row0, y_row0;
} pool_job;

/* The fast range: per output pixel the valid window is found once (rows and columns are each a
   contiguous range), then the channels go POOL_VL at a time through a vector accumulator held
   in registers (VACCUM, the lane-wise twin of ACCUM), the last c % POOL_VL one at a time. Same
   positions in the same order as the ref, so the same bits. */
#define POOL_VL 4 /* one SSE register: wider vectors' compares get split into scalars there */
typedef float pool_vec __attribute__((vector_size(POOL_VL * sizeof(float))));
typedef int32_t pool_ivec __attribute__((vector_size(POOL_VL * sizeof(float))));
/* (v > m || v is NaN) ? v : m per lane, as PMAX */
#define VMAX(m, v) VSEL(((v) > (m)) | ((v) != (v)), (v), (m))
#define VSEL(mask, a, b) ((pool_vec)(((mask) & (pool_ivec)(a)) | (~(mask) & (pool_ivec)(b))))
#define VSUM(a, v) ((a) + (v))

static void pool_range_1d(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t dil,
                          int64_t in, int64_t *k0, int64_t *k1) {
  int64_t i0 = o * stride - pad, a = 0, b = k;
  while (a < b && i0 + a * dil < 0) a++;
  while (b > a && i0 + (b - 1) * dil >= in) b--;
  *k0 = a;
  *k1 = b;
}

/* Reduced x or y (float16 / bfloat16): one item = one slot of scratch, which takes output rows
   [slot * R / n_slots, (slot + 1) * R / n_slots) of the R = n * out_h in bands of K_BAND
   rows of one image (kutil.h).  A band's input rows (contiguous in x) are widened into the
   slot in one conversion, and each output row is pooled by the float32 range into the slot's
   row buffer and narrowed (reduced y), or straight into y.  The same range on the same float32 values:
   the bits of widening x in full, the float32 kernel and narrowing y. */
static int64_t slot_floats(const npuK_window2d *w, npuK_dtype x_dtype, npuK_dtype y_dtype) {
  return (x_dtype != NPUK_F32 ? k_band_in_rows(w) * w->in_w * w->c : 0) +
         (y_dtype != NPUK_F32 ? w->out_w * w->c : 0);
}

static int64_t pool_slots(const npuK_window2d *w, int n_slots) {
  int64_t rows = w->n * w->out_h, n = n_slots < 1 ? 1 : n_slots;
  return n < rows ? n : rows;
}

size_t npuK_pool_half_scratch_size(const npuK_window2d *w, int n_slots, npuK_dtype x_dtype,
                                   npuK_dtype y_dtype) {
  if (x_dtype == NPUK_F32 && y_dtype == NPUK_F32) return 0;
  return (size_t)(pool_slots(w, n_slots) * slot_floats(w, x_dtype, y_dtype)) * sizeof(float);
}

typedef struct pool_half_job {
  const npuK_window2d *w;
  const void *x;
  void *y;
  npuK_dtype x_dtype, y_dtype;
  float *scratch;
  int64_t n_slots, slot_floats;
  npuK_range_fn range;
} pool_half_job;

static void pool_half_range(void *arg, int64_t s0, int64_t s1) {
  const pool_half_job *h = arg;
  const npuK_window2d *w = h->w;
  const int64_t len = w->in_w * w->c, ylen = w->out_w * w->c, n_rows = w->n * w->out_h;
  for (int64_t s = s0; s < s1; s++) {
    float *band = h->scratch + s * h->slot_floats;
    float *ybuf = band + (h->x_dtype != NPUK_F32 ? k_band_in_rows(w) * len : 0);
    int64_t r0 = s * n_rows / h->n_slots, r1 = (s + 1) * n_rows / h->n_slots;
    while (r0 < r1) {
      k_band b = k_band_at(w, r0, r1);
      pool_job j = {w, h->x, h->y, 0, 0};
      if (h->x_dtype != NPUK_F32) { /* the band's input rows */
        if (b.hi > b.lo)
          npuK_cast(NULL, (b.hi - b.lo) * len, h->x_dtype,
                    (const uint16_t *)h->x + (b.image * w->in_h + b.lo) * len, NPUK_F32, band);
        j.x = band;
        j.x_row0 = b.image * w->in_h + b.lo;
      }
      if (h->y_dtype == NPUK_F32) {
        h->range(&j, r0, b.r_end);
      } else {
        j.y = ybuf;
        for (int64_t row = r0; row < b.r_end; row++) {
          j.y_row0 = row;
          h->range(&j, row, row + 1);
          npuK_cast(NULL, ylen, NPUK_F32, ybuf, h->y_dtype, (uint16_t *)h->y + row * ylen);
        }
      }
      r0 = b.r_end;
    }
  }
}

static void pool_half(const npuK_pool *pool, const npuK_window2d *w, const void *x,
                      npuK_dtype x_dtype, void *y, npuK_dtype y_dtype, float *scratch,
                      int n_slots, npuK_range_fn range) {
  int64_t slots = pool_slots(w, n_slots);
  if (slots <= 0 || w->out_w * w->c == 0) return;
  pool_half_job h = {w, x, y, x_dtype, y_dtype, scratch, slots,
                     slot_floats(w, x_dtype, y_dtype), range};
  npuK_parallel_for(pool, slots, 1, pool_half_range, &h);
}

#define DEFINE_POOL_FAST(name, INIT, ACCUM, VACCUM, FINISH)                                    \
  static void name##_range(void *arg, int64_t begin, int64_t end) {                            \
    const pool_job *j = arg;                                                                   \
    const npuK_window2d *w = j->w;                                                             \
    int64_t c = w->c;                                                                          \
    for (int64_t row = begin; row < end; row++) {                                              \
      int64_t nb = row / w->out_h, oh = row % w->out_h, kh0, kh1, kw0, kw1;                    \
      pool_range_1d(oh, w->stride_h, w->pad_top, w->k_h, w->dilation_h, w->in_h, &kh0, &kh1); \
      int64_t ih0 = oh * w->stride_h - w->pad_top;                                             \
      for (int64_t ow = 0; ow < w->out_w; ow++) {                                              \
        float *o = j->y + ((row - j->y_row0) * w->out_w + ow) * c;                             \
        pool_range_1d(ow, w->stride_w, w->pad_left, w->k_w, w->dilation_w, w->in_w, &kw0,      \
                      &kw1);                                                                   \
        int64_t count = (kh1 - kh0) * (kw1 - kw0), iw0 = ow * w->stride_w - w->pad_left, ci = 0; \
        const float *xb = j->x + ((nb * w->in_h - j->x_row0) * w->in_w + iw0) * c;            \
        for (; ci + POOL_VL <= c; ci += POOL_VL) {                                             \
          pool_vec acc = (pool_vec){0} + (INIT);                                               \
          for (int64_t kh = kh0; kh < kh1; kh++)                                               \
            for (int64_t kw = kw0; kw < kw1; kw++) {                                           \
              pool_vec v;                                                                      \
              memcpy(&v,                                                                       \
                     xb + ((ih0 + kh * w->dilation_h) * w->in_w + kw * w->dilation_w) * c + ci, \
                     sizeof v);                                                                \
              acc = VACCUM(acc, v);                                                            \
            }                                                                                  \
          for (int l = 0; l < POOL_VL; l++) o[ci + l] = FINISH(acc[l], count);                 \
        }                                                                                      \
        for (; ci < c; ci++) {                                                                 \
          float acc = INIT;                                                                    \
          for (int64_t kh = kh0; kh < kh1; kh++)                                               \
            for (int64_t kw = kw0; kw < kw1; kw++)                                             \
              acc = ACCUM(acc, xb[((ih0 + kh * w->dilation_h) * w->in_w + kw * w->dilation_w) * \
                                     c + ci]);                                                 \
          o[ci] = FINISH(acc, count);                                                          \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  void npuK_##name##_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x,        \
                         float *y) {                                                           \
    pool_job j = {w, x, y, 0, 0};                                                              \
    int64_t per_row = w->out_w * w->c * w->k_h * w->k_w;                                       \
    npuK_parallel_for(pool, w->n * w->out_h, 1 + K_GRAIN_ELEMS / (per_row > 0 ? per_row : 1),  \
                      name##_range, &j);                                                       \
  }                                                                                            \
  void npuK_##name##_half(const npuK_pool *pool, const npuK_window2d *w, const void *x,        \
                          npuK_dtype x_dtype, void *y, npuK_dtype y_dtype, float *scratch,     \
                          int n_slots) {                                                       \
    if (x_dtype == NPUK_F32 && y_dtype == NPUK_F32) npuK_##name##_f32(pool, w, x, y);          \
    else pool_half(pool, w, x, x_dtype, y, y_dtype, scratch, n_slots, name##_range);           \
  }                                                                                            \
  void npuK_##name##_f32_ref(const npuK_pool *pool, const npuK_window2d *w, const float *x,    \
                             float *y) {                                                       \
    (void)pool;                                                                                \
    int64_t c = w->c;                                                                          \
    for (int64_t nb = 0; nb < w->n; nb++)                                                      \
      for (int64_t oh = 0; oh < w->out_h; oh++)                                                \
        for (int64_t ow = 0; ow < w->out_w; ow++)                                              \
          for (int64_t ci = 0; ci < c; ci++) {                                                 \
            float acc = INIT;                                                                  \
            int64_t count = 0;                                                                 \
            for (int64_t kh = 0; kh < w->k_h; kh++) {                                          \
              int64_t ih = oh * w->stride_h - w->pad_top + kh * w->dilation_h;                 \
              for (int64_t kw = 0; kw < w->k_w; kw++) {                                        \
                int64_t iw = ow * w->stride_w - w->pad_left + kw * w->dilation_w;              \
                if (ih < 0 || ih >= w->in_h || iw < 0 || iw >= w->in_w) continue;              \
                count++;                                                                       \
                acc = ACCUM(acc, x[((nb * w->in_h + ih) * w->in_w + iw) * c + ci]);            \
              }                                                                                \
            }                                                                                  \
            y[((nb * w->out_h + oh) * w->out_w + ow) * c + ci] = FINISH(acc, count);           \
          }                                                                                    \
  }

#define PSUM(a, v) ((a) + (v))
#define MAX_FINISH(v, count) ((void)(count), (v))
#define AVG_FINISH(v, count) ((count) > 0 ? (v) / (float)(count) : 0.0f)

DEFINE_POOL_FAST(max_pool, -INFINITY, PMAX, VMAX, MAX_FINISH)
DEFINE_POOL_FAST(avg_pool, 0.0f, PSUM, VSUM, AVG_FINISH)
