/* window_grad.c: gradients of the sliding-window ops (max_pool, avg_pool, conv2d,
 * depthwise_conv2d), float32, NHWC.  Layouts and the split of work: kgrad.h.
 *
 * Input row ih of output row oh and window row kh: ih = oh * stride_h - pad_top +
 * kh * dilation_h (likewise for columns); rows outside [0, in_h) are padding.  Direct loops,
 * vectorised over the innermost (channel) dimension where the layout allows.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kgrad.h"
#include "kernels/kutil.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

typedef struct wg_job {
  const npuK_window2d *w;
  int64_t out_c;  /* conv2d: output channels; depthwise: the multiplier */
  bool depthwise; /* dy rows hold c * multiplier values, channel ci's from ci * multiplier */
  const float *a, *b;
  float *out;
  double *acc;    /* filter gradients: float64 accumulators, one per filter element (or NULL) */
  const float *relu; /* max_pool_grad: relu_grad's features (x's shape), or NULL */
  double *bias;      /* max_pool_grad: dx's column sums per image (n, c), or NULL */
  /* max_pool_grad: x, dy, the relu features (or NULL) and dx as stored, their dtypes, and
     dx's float32 copy (overlapping windows, dx stored reduced) */
  const void *xv, *dyv, *reluv;
  void *dxv;
  float *dxf;
  struct mpg_types {
    npuK_dtype x, dy, relu, dx;
  } types;
} wg_job;

static inline int64_t in_row(const npuK_window2d *w, int64_t oh, int64_t kh) {
  return oh * w->stride_h - w->pad_top + kh * w->dilation_h;
}
static inline int64_t in_col(const npuK_window2d *w, int64_t ow, int64_t kw) {
  return ow * w->stride_w - w->pad_left + kw * w->dilation_w;
}

/* ---- pools ---- */

/* max_pool_grad, items (n, a block of MPG_CB channels): each owns its dx elements.  Per
   output pixel the valid window (a rectangle) is found once; MPG_VL channels at a time keep
   the running maximum and its position in registers, in the window's row-major order with
   the scalar rule (the first valid tap starts it; a later one wins if greater, or if NaN
   over a number), then each dy goes to its position.  The windows of a channel are visited
   in (oh, ow) order, as (n, channel) items did: the same dx at any thread count.
   Windows that cannot overlap (k <= stride, dilation 1: the 2x2 stride-2 pool of a CNN) own
   their taps, so each tap is stored once, dy + 0 at the winner and 0 elsewhere, a vector at
   a time — the value 0 + dy the scattered add gives, without the memset of dx (skipped when
   the windows tile the input exactly) and the lane-by-lane read-modify-writes.
   With relu features (max_pool_grad then relu_grad, fused: fused_ops.c) dx keeps a value
   only where the feature is > 0, +0 elsewhere: relu_grad's select of bits, so the bits of
   the two ops.  Disjoint windows select as they store; otherwise the item's dx is masked
   once its windows are done, while it is still in cache. */
#define MPG_VL 8
#define MPG_CB 64
typedef float mpg_vec __attribute__((vector_size(MPG_VL * sizeof(float))));
typedef int32_t mpg_ivec __attribute__((vector_size(MPG_VL * sizeof(float))));
typedef uint32_t mpg_uvec __attribute__((vector_size(MPG_VL * sizeof(float))));
typedef uint16_t mpg_hvec __attribute__((vector_size(MPG_VL * sizeof(uint16_t))));
typedef int16_t mpg_shvec __attribute__((vector_size(MPG_VL * sizeof(uint16_t))));

/* Operands stored float16 / bfloat16 (the precision pass's, read as stored: fused_ops.c) are
   widened exactly as they are loaded and dx narrowed as it is stored, with half.h's rounding
   (the executor's widen and narrow: kernels/cast.c gives the same bits), so the float32 code
   below computes on the values it computed on from widened copies.  bfloat16 converts a vector
   at a time (a shift; the round-to-nearest-even add, NaN kept quiet as npu_f32_to_bf16 does),
   float16 a lane at a time (slow: the precision pass has the executor widen float16 for the
   fused step instead, precision.c; here it only has to be right).  dt is a
   constant in each instantiation below, so the float32 one compiles to the code it was. */
/* (vectors by pointer: a 32-byte vector passed by value changes the ABI without AVX) */
static inline __attribute__((always_inline)) void mpg_load(mpg_vec *v, const void *p, int64_t i,
                                                           npuK_dtype dt) {
  if (dt == NPUK_F32) {
    memcpy(v, (const float *)p + i, sizeof *v);
  } else if (dt == NPUK_BF16) {
    mpg_hvec h;
    memcpy(&h, (const uint16_t *)p + i, sizeof h);
    *v = (mpg_vec)(__builtin_convertvector(h, mpg_uvec) << 16);
  } else {
    for (int l = 0; l < MPG_VL; l++) (*v)[l] = npu_f16_to_f32(((const uint16_t *)p)[i + l]);
  }
}
static inline __attribute__((always_inline)) void mpg_store(void *p, int64_t i,
                                                            const mpg_vec *vp, npuK_dtype dt) {
  const mpg_vec v = *vp;
  if (dt == NPUK_F32) {
    memcpy((float *)p + i, &v, sizeof v);
  } else if (dt == NPUK_BF16) {
    mpg_uvec u = (mpg_uvec)v, nan = (u & 0x7fffffffu) > 0x7f800000u;
    mpg_uvec r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    r = (nan & ((u >> 16) | 0x40u)) | (~nan & r);
    mpg_hvec h = __builtin_convertvector(r, mpg_hvec);
    memcpy((uint16_t *)p + i, &h, sizeof h);
  } else {
    for (int l = 0; l < MPG_VL; l++) ((uint16_t *)p)[i + l] = npu_f32_to_f16(v[l]);
  }
}
static inline __attribute__((always_inline)) float mpg_load1(const void *p, int64_t i,
                                                             npuK_dtype dt) {
  return dt == NPUK_F32    ? ((const float *)p)[i]
         : dt == NPUK_BF16 ? npu_bf16_to_f32(((const uint16_t *)p)[i])
                           : npu_f16_to_f32(((const uint16_t *)p)[i]);
}
static inline __attribute__((always_inline)) void mpg_store1(void *p, int64_t i, float v,
                                                             npuK_dtype dt) {
  if (dt == NPUK_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = dt == NPUK_BF16 ? npu_f32_to_bf16(v) : npu_f32_to_f16(v);
}

static void window_range_1d(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t dil,
                            int64_t in, int64_t *k0, int64_t *k1) {
  int64_t i0 = o * stride - pad, a = 0, b = k;
  while (a < b && i0 + a * dil < 0) a++;
  while (b > a && i0 + (b - 1) * dil >= in) b--;
  *k0 = a;
  *k1 = b;
}

/* No two windows share a tap (dilation 1, a window no larger than its stride): the gradient
   is stored rather than added, and dx stored reduced needs no float32 copy (the kernel and its
   scratch size decide with this one test). */
static inline bool windows_disjoint(const npuK_window2d *w) {
  return w->k_h <= w->stride_h && w->k_w <= w->stride_w && w->dilation_h == 1 &&
         w->dilation_w == 1;
}

/* The lanes whose window's maximum is the tap at (best == at) and, with relu_grad's features
   (stored as dt, element i the tap's), whose feature is > 0: where a disjoint window's dy
   lands. */
static inline __attribute__((always_inline)) void mpg_hit(mpg_ivec *hit, const mpg_ivec *best,
                                                          int32_t at, const void *reluv,
                                                          int64_t i, npuK_dtype dt) {
  *hit = *best == at;
  if (reluv) {
    mpg_vec f;
    mpg_load(&f, reluv, i, dt);
    *hit &= f > 0;
  }
}

/* p (stored as dt) advanced by i elements. */
static inline __attribute__((always_inline)) const void *mpg_at(const void *p, int64_t i,
                                                                npuK_dtype dt) {
  return dt == NPUK_F32 ? (const void *)((const float *)p + i)
                        : (const void *)((const uint16_t *)p + i);
}

/* The dtypes of x, dy, the relu features and dx (npuK_max_pool_grad_relu_bias). */
typedef struct mpg_types mpg_types;

/* part[ci] (c0 <= ci < c1) = the float64 sum of dx's channel ci over the image's pixels, in
   pixel order (dx as stored, widened exactly).  Vectors across channels keep each lane's
   order, so any split gives these bits. */
static inline __attribute__((always_inline)) void mpg_image_sums(double *part, const void *dx,
                                                                 int64_t pixels, int64_t c,
                                                                 int64_t c0, int64_t c1,
                                                                 npuK_dtype dt) {
  for (int64_t ci = c0; ci < c1; ci++) part[ci] = 0;
  for (int64_t p = 0; p < pixels; p++)
    for (int64_t ci = c0; ci < c1; ci++) part[ci] += (double)mpg_load1(dx, p * c + ci, dt);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same for float32 or bfloat16 dx with AVX2 vectors: 32 channels at a time in eight
   independent float64 accumulators (the adds' latency hidden), then 8, then one. */
static inline __attribute__((target("avx2"))) __m256 mpg_load8_avx2(const void *dx, int64_t i,
                                                                    int bf16) {
  if (!bf16) return _mm256_loadu_ps((const float *)dx + i);
  __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)dx + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
__attribute__((target("avx2"))) static void mpg_image_sums_avx2(double *part, const void *dx,
                                                                int64_t pixels, int64_t c,
                                                                int64_t c0, int64_t c1,
                                                                int bf16) {
  int64_t ci = c0;
  for (; ci + 32 <= c1; ci += 32) {
    __m256d acc[8];
    for (int k = 0; k < 8; k++) acc[k] = _mm256_setzero_pd();
    for (int64_t p = 0; p < pixels; p++)
      for (int q = 0; q < 4; q++) {
        __m256 v = mpg_load8_avx2(dx, p * c + ci + 8 * q, bf16);
        acc[2 * q] = _mm256_add_pd(acc[2 * q], _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        acc[2 * q + 1] = _mm256_add_pd(acc[2 * q + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
      }
    for (int k = 0; k < 8; k++) _mm256_storeu_pd(part + ci + 4 * k, acc[k]);
  }
  for (; ci + 8 <= c1; ci += 8) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t p = 0; p < pixels; p++) {
      __m256 v = mpg_load8_avx2(dx, p * c + ci, bf16);
      lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
      hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    _mm256_storeu_pd(part + ci, lo);
    _mm256_storeu_pd(part + ci + 4, hi);
  }
  mpg_image_sums(part, dx, pixels, c, ci, c1, bf16 ? NPUK_BF16 : NPUK_F32);
}
#endif

/* Windows that overlap add into dx: with dx stored reduced they add into a float32 copy of the
   item's dx (j->dxf, the same offsets), narrowed once the item is done, as the executor
   narrowed the float32 dx it let the kernel write. */
static inline __attribute__((always_inline)) void max_pool_grad_items(const wg_job *j,
                                                                       int64_t begin,
                                                                       int64_t end,
                                                                       mpg_types t, int avx2) {
  const npuK_window2d *w = j->w;
  (void)avx2; /* (the AVX2 sums: x86-64 only) */
  const int64_t c = w->c, n_cb = (c + MPG_CB - 1) / MPG_CB, pixels = w->in_h * w->in_w;
  /* tiled: disjoint windows, and every pixel is some window's tap */
  const int disjoint = windows_disjoint(w);
  const int tiled = disjoint && w->k_h == w->stride_h && w->k_w == w->stride_w &&
                    w->pad_top == 0 && w->pad_left == 0 && w->out_h * w->stride_h == w->in_h &&
                    w->out_w * w->stride_w == w->in_w;
  /* where the scattered adds go: dx itself, or its float32 copy (dx stored reduced) */
  const npuK_dtype at_t = disjoint || t.dx == NPUK_F32 ? t.dx : NPUK_F32;
  for (int64_t item = begin; item < end; item++) {
    int64_t n = item / n_cb, c0 = item % n_cb * MPG_CB, c1 = c0 + MPG_CB < c ? c0 + MPG_CB : c;
    const int64_t xo = n * pixels * c, dyo = n * w->out_h * w->out_w * c; /* the image's */
    /* the operands in locals: a store through memcpy may alias *j as far as the compiler knows */
    const void *const xv = mpg_at(j->xv, xo, t.x), *const dyv = mpg_at(j->dyv, dyo, t.dy);
    const void *const reluv = j->reluv ? mpg_at(j->reluv, xo, t.relu) : NULL;
    void *const dxv = (void *)mpg_at(j->dxv, xo, t.dx);
    void *dx = at_t == t.dx ? dxv : (void *)(j->dxf + xo);
    const size_t esize = at_t == NPUK_F32 ? sizeof(float) : sizeof(uint16_t);
    if (!tiled)
      for (int64_t p = 0; p < pixels; p++)
        memset((char *)dx + (size_t)(p * c + c0) * esize, 0, (size_t)(c1 - c0) * esize);
    for (int64_t oh = 0; oh < w->out_h; oh++)
      for (int64_t ow = 0; ow < w->out_w; ow++) {
        int64_t kh0, kh1, kw0, kw1;
        window_range_1d(oh, w->stride_h, w->pad_top, w->k_h, w->dilation_h, w->in_h, &kh0, &kh1);
        window_range_1d(ow, w->stride_w, w->pad_left, w->k_w, w->dilation_w, w->in_w, &kw0, &kw1);
        if (kh0 >= kh1 || kw0 >= kw1) continue;
        const int64_t ih0 = oh * w->stride_h - w->pad_top, iw0 = ow * w->stride_w - w->pad_left;
        const int64_t dyp = (oh * w->out_w + ow) * c;
        int64_t ci = c0;
        for (; ci + MPG_VL <= c1; ci += MPG_VL) {
          int32_t first = (int32_t)((ih0 + kh0 * w->dilation_h) * w->in_w + iw0 + kw0 * w->dilation_w);
          mpg_vec m;
          mpg_load(&m, xv, first * c + ci, t.x);
          mpg_ivec best = (mpg_ivec){0} + first;
          for (int64_t kh = kh0; kh < kh1; kh++)
            for (int64_t kw = kh == kh0 ? kw0 + 1 : kw0; kw < kw1; kw++) {
              int32_t at = (int32_t)((ih0 + kh * w->dilation_h) * w->in_w + iw0 + kw * w->dilation_w);
              mpg_vec v;
              mpg_load(&v, xv, at * c + ci, t.x);
              mpg_ivec take = (v > m) | ((v != v) & (m == m));
              m = (mpg_vec)((take & (mpg_ivec)v) | (~take & (mpg_ivec)m));
              best = (take & ((mpg_ivec){0} + at)) | (~take & best);
            }
          if (disjoint && t.dy == NPUK_BF16 && t.dx == NPUK_BF16) {
            /* dy's bits go to dx as they are, so they are selected as stored: the value the
               float32 path stores (0 + dy narrowed: exact) is dy's pattern with -0 made +0 and
               a NaN's quiet bit set, as the add and npu_f32_to_bf16 do */
            mpg_hvec g, nan;
            memcpy(&g, (const uint16_t *)dyv + dyp + ci, sizeof g);
            nan = (mpg_hvec)((g & 0x7fffu) > 0x7f80u);
            g = (g & (mpg_hvec)(g != 0x8000u)) | (nan & 0x40u);
            for (int64_t kh = kh0; kh < kh1; kh++)
              for (int64_t kw = kw0; kw < kw1; kw++) {
                int32_t at = (int32_t)((ih0 + kh) * w->in_w + iw0 + kw);
                mpg_ivec hit;
                mpg_hit(&hit, &best, at, reluv, at * c + ci, t.relu);
                mpg_hvec v = (mpg_hvec)__builtin_convertvector(hit, mpg_shvec) & g;
                memcpy((uint16_t *)dx + at * c + ci, &v, sizeof v);
              }
            continue;
          }
          if (disjoint) {
            mpg_vec g;
            mpg_load(&g, dyv, dyp + ci, t.dy);
            g = g + 0.0f; /* 0 + dy, as the add onto the zeroed dx: -0 stores +0 */
            for (int64_t kh = kh0; kh < kh1; kh++)
              for (int64_t kw = kw0; kw < kw1; kw++) {
                int32_t at = (int32_t)((ih0 + kh) * w->in_w + iw0 + kw);
                mpg_ivec hit;
                mpg_hit(&hit, &best, at, reluv, at * c + ci, t.relu);
                mpg_vec v = (mpg_vec)(hit & (mpg_ivec)g);
                mpg_store(dx, at * c + ci, &v, t.dx);
              }
            continue;
          }
          float *dxf = dx;
          for (int l = 0; l < MPG_VL; l++)
            dxf[best[l] * c + ci + l] += mpg_load1(dyv, dyp + ci + l, t.dy);
        }
        for (; ci < c1; ci++) {
          int64_t best = -1;
          float m = 0;
          for (int64_t kh = kh0; kh < kh1; kh++)
            for (int64_t kw = kw0; kw < kw1; kw++) {
              int64_t at = (ih0 + kh * w->dilation_h) * w->in_w + iw0 + kw * w->dilation_w;
              float v = mpg_load1(xv, at * c + ci, t.x);
              if (best < 0 || v > m || (v != v && m == m)) best = at, m = v;
              if (tiled) mpg_store1(dx, at * c + ci, 0, at_t); /* this window owns it */
            }
          int64_t o = best * c + ci;
          mpg_store1(dx, o, mpg_load1(dx, o, at_t) + mpg_load1(dyv, dyp + ci, t.dy), at_t);
        }
      }
    /* the lanes added by scatter: all of them unless disjoint, else the channel tail; dx
       narrowed from its float32 copy as they are masked */
    if (reluv || at_t != t.dx)
      for (int64_t p = 0; p < pixels; p++)
        for (int64_t ci = disjoint ? c0 + (c1 - c0) / MPG_VL * MPG_VL : c0; ci < c1; ci++) {
          int64_t o = p * c + ci;
          float v = mpg_load1(dx, o, at_t);
          if (reluv) v = mpg_load1(reluv, o, t.relu) > 0 ? v : 0.0f;
          mpg_store1(dxv, o, v, t.dx);
        }
    if (j->bias) { /* the item's channels (dx as stored) summed over its image while in cache */
#if defined(__x86_64__) && defined(__GNUC__)
      if (avx2)
        mpg_image_sums_avx2(j->bias + n * c, dxv, pixels, c, c0, c1, t.dx == NPUK_BF16);
      else
#endif
        mpg_image_sums(j->bias + n * c, dxv, pixels, c, c0, c1, t.dx);
    }
  }
}

#define MPG_F32 ((mpg_types){NPUK_F32, NPUK_F32, NPUK_F32, NPUK_F32})
#define MPG_BF16 ((mpg_types){NPUK_BF16, NPUK_BF16, NPUK_BF16, NPUK_BF16})

static void max_pool_grad_range(void *arg, int64_t begin, int64_t end) {
  max_pool_grad_items(arg, begin, end, MPG_F32, 0);
}
/* bfloat16 throughout (a mixed-precision CNN's backward pass); other mixes: the dtypes read
   at run time, the same arithmetic */
static void max_pool_grad_range_bf16(void *arg, int64_t begin, int64_t end) {
  max_pool_grad_items(arg, begin, end, MPG_BF16, 0);
}
static void max_pool_grad_range_any(void *arg, int64_t begin, int64_t end) {
  const wg_job *j = arg;
  max_pool_grad_items(arg, begin, end, j->types, 0);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same code with 256-bit vectors: compares, selects and integer conversions only, so the
   same bits. */
__attribute__((target("avx2"))) static void max_pool_grad_range_avx2(void *arg, int64_t begin,
                                                                     int64_t end) {
  max_pool_grad_items(arg, begin, end, MPG_F32, 1);
}
__attribute__((target("avx2"))) static void max_pool_grad_range_bf16_avx2(void *arg,
                                                                          int64_t begin,
                                                                          int64_t end) {
  max_pool_grad_items(arg, begin, end, MPG_BF16, 1);
}
#endif

void npuK_max_pool_grad_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x,
                            const float *dy, float *dx) {
  npuK_max_pool_grad_relu_f32(pool, w, x, dy, NULL, dx);
}

void npuK_max_pool_grad_relu_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x,
                                 const float *dy, const float *relu, float *dx) {
  npuK_max_pool_grad_relu_bias_f32(pool, w, x, dy, relu, dx, NULL, NULL);
}

void npuK_max_pool_grad_relu_bias_f32(const npuK_pool *pool, const npuK_window2d *w,
                                      const float *x, const float *dy, const float *relu,
                                      float *dx, float *db, double *scratch) {
  npuK_max_pool_grad_relu_bias(pool, w, NPUK_F32, x, NPUK_F32, dy, NPUK_F32, relu, NPUK_F32,
                               dx, db, scratch);
}

size_t npuK_max_pool_grad_relu_bias_scratch(const npuK_window2d *w, npuK_dtype dx_dtype,
                                            int db) {
  size_t bytes = db ? (size_t)(w->n * w->c) * sizeof(double) : 0;
  if (!windows_disjoint(w) && dx_dtype != NPUK_F32)
    bytes += (size_t)(w->n * w->in_h * w->in_w * w->c) * sizeof(float);
  return bytes;
}

void npuK_max_pool_grad_relu_bias(const npuK_pool *pool, const npuK_window2d *w,
                                  npuK_dtype x_dtype, const void *x, npuK_dtype dy_dtype,
                                  const void *dy, npuK_dtype relu_dtype, const void *relu,
                                  npuK_dtype dx_dtype, void *dx, float *db, void *scratch) {
  wg_job j = {.w = w, .xv = x, .dyv = dy, .reluv = relu, .dxv = dx,
              .types = {x_dtype, dy_dtype, relu ? relu_dtype : x_dtype, dx_dtype}};
  char *s = scratch;
  if (db) j.bias = (double *)s, s += (size_t)(w->n * w->c) * sizeof(double);
  j.dxf = (float *)s; /* used only when windows overlap and dx is reduced (the scratch above) */
  bool f32 = x_dtype == NPUK_F32 && dy_dtype == NPUK_F32 && dx_dtype == NPUK_F32 &&
             (!relu || relu_dtype == NPUK_F32);
  bool bf16 = x_dtype == NPUK_BF16 && dy_dtype == NPUK_BF16 && dx_dtype == NPUK_BF16 &&
              (!relu || relu_dtype == NPUK_BF16);
  void (*range)(void *, int64_t, int64_t) =
      f32 ? max_pool_grad_range : bf16 ? max_pool_grad_range_bf16 : max_pool_grad_range_any;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && (f32 || bf16))
    range = f32 ? max_pool_grad_range_avx2 : max_pool_grad_range_bf16_avx2;
#endif
  npuK_parallel_for(pool, w->n * ((w->c + MPG_CB - 1) / MPG_CB), 1, range, &j);
  for (int64_t ci = 0; db && ci < w->c; ci++) { /* the images' sums in order, then rounded */
    double sum = 0;
    for (int64_t n = 0; n < w->n; n++) sum += j.bias[n * w->c + ci];
    db[ci] = (float)sum;
  }
}

static void avg_pool_grad_range(void *arg, int64_t begin, int64_t end) {
  const wg_job *j = arg;
  const npuK_window2d *w = j->w;
  const int64_t c = w->c;
  for (int64_t item = begin; item < end; item++) {
    int64_t n = item / c, ci = item % c;
    const float *dy = j->b + n * w->out_h * w->out_w * c + ci;
    float *dx = j->out + n * w->in_h * w->in_w * c + ci;
    for (int64_t p = 0; p < w->in_h * w->in_w; p++) dx[p * c] = 0;
    for (int64_t oh = 0; oh < w->out_h; oh++)
      for (int64_t ow = 0; ow < w->out_w; ow++) {
        int64_t count = 0;
        for (int64_t kh = 0; kh < w->k_h; kh++) {
          int64_t ih = in_row(w, oh, kh);
          if (ih < 0 || ih >= w->in_h) continue;
          for (int64_t kw = 0; kw < w->k_w; kw++) {
            int64_t iw = in_col(w, ow, kw);
            count += iw >= 0 && iw < w->in_w;
          }
        }
        if (!count) continue;
        float g = dy[(oh * w->out_w + ow) * c] / (float)count;
        for (int64_t kh = 0; kh < w->k_h; kh++) {
          int64_t ih = in_row(w, oh, kh);
          if (ih < 0 || ih >= w->in_h) continue;
          for (int64_t kw = 0; kw < w->k_w; kw++) {
            int64_t iw = in_col(w, ow, kw);
            if (iw >= 0 && iw < w->in_w) dx[(ih * w->in_w + iw) * c] += g;
          }
        }
      }
  }
}

void npuK_avg_pool_grad_f32(const npuK_pool *pool, const npuK_window2d *w, const float *dy,
                            float *dx) {
  wg_job j = {.w = w, .b = dy, .out = dx};
  npuK_parallel_for(pool, w->n * w->c, 1, avg_pool_grad_range, &j);
}

/* ---- convolutions ----
   conv2d and depthwise_conv2d share the loops: a filter row (kh, kw, ci) holds out_c values
   in both layouts ([k_h, k_w, c, out_c] and [k_h, k_w, c, multiplier]); what differs is the
   slice of a dy row it meets: the whole row (out_c values) for conv2d, the channel's
   `multiplier` values starting at ci * multiplier for depthwise.  dy_ci_step says which. */

static inline int64_t dy_row_size(const wg_job *j) {
  return j->depthwise ? j->w->c * j->out_c : j->out_c;
}

/* acc += df, df = 0: the float32 partial sums of FG_BLOCK positions go into float64. */
#define FG_BLOCK 64
static void flush(float *df, double *acc, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    acc[i] += (double)df[i];
    df[i] = 0;
  }
}

/* Filter gradient, items (kh, kw): a (c, out_c) block of rank-1 updates, one per position
   (n, oh, ow), each term one fused multiply-add for conv2d (fmaf: correctly rounded whatever
   the CPU, so the bits of conv_bwd.c's FMA tiles), a multiply then an add for depthwise.  The updates go into df in float32 (the fast inner loop); every FG_BLOCK
   positions df is added into the item's float64 accumulators and cleared, so a sum over many
   positions is float32-rounded over 64 terms at most and float64 beyond; df = acc at the end.
   The blocks are counted within the item: fixed by the shape, not the threads. */
static void filter_grad_range(void *arg, int64_t begin, int64_t end) {
  const wg_job *j = arg;
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, oc = j->out_c, dy_row = dy_row_size(j);
  const int64_t dy_ci_step = j->depthwise ? oc : 0;
  for (int64_t item = begin; item < end; item++) {
    int64_t kh = item / w->k_w, kw = item % w->k_w, since = 0;
    float *df = j->out + item * c * oc;
    double *acc = j->acc ? j->acc + item * c * oc : NULL;
    memset(df, 0, (size_t)(c * oc) * sizeof *df);
    if (acc) memset(acc, 0, (size_t)(c * oc) * sizeof *acc);
    for (int64_t n = 0; n < w->n; n++)
      for (int64_t oh = 0; oh < w->out_h; oh++) {
        int64_t ih = in_row(w, oh, kh);
        if (ih < 0 || ih >= w->in_h) continue;
        for (int64_t ow = 0; ow < w->out_w; ow++) {
          int64_t iw = in_col(w, ow, kw);
          if (iw < 0 || iw >= w->in_w) continue;
          const float *xr = j->a + ((n * w->in_h + ih) * w->in_w + iw) * c;
          const float *dyr = j->b + ((n * w->out_h + oh) * w->out_w + ow) * dy_row;
          for (int64_t ci = 0; ci < c; ci++) {
            const float xv = xr[ci];
            const float *dyc = dyr + ci * dy_ci_step;
            float *row = df + ci * oc;
            if (j->depthwise) /* its only kernel: the vectorised multiply and add */
              for (int64_t co = 0; co < oc; co++) row[co] += xv * dyc[co];
            else /* conv2d's twin: fused, as the register tiles of conv_bwd.c */
              for (int64_t co = 0; co < oc; co++) row[co] = fmaf(xv, dyc[co], row[co]);
          }
          if (acc && ++since == FG_BLOCK) {
            flush(df, acc, c * oc);
            since = 0;
          }
        }
      }
    if (acc) {
      flush(df, acc, c * oc);
      for (int64_t i = 0; i < c * oc; i++) df[i] = (float)acc[i];
    }
  }
}

/* Input gradient, items: the batch. */
static void input_grad_range(void *arg, int64_t begin, int64_t end) {
  const wg_job *j = arg;
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, oc = j->out_c, dy_row = dy_row_size(j);
  const int64_t dy_ci_step = j->depthwise ? oc : 0;
  for (int64_t n = begin; n < end; n++) {
    float *dx = j->out + n * w->in_h * w->in_w * c;
    memset(dx, 0, (size_t)(w->in_h * w->in_w * c) * sizeof *dx);
    for (int64_t oh = 0; oh < w->out_h; oh++)
      for (int64_t ow = 0; ow < w->out_w; ow++) {
        const float *dyr = j->a + ((n * w->out_h + oh) * w->out_w + ow) * dy_row;
        for (int64_t kh = 0; kh < w->k_h; kh++) {
          int64_t ih = in_row(w, oh, kh);
          if (ih < 0 || ih >= w->in_h) continue;
          for (int64_t kw = 0; kw < w->k_w; kw++) {
            int64_t iw = in_col(w, ow, kw);
            if (iw < 0 || iw >= w->in_w) continue;
            float *dxr = dx + (ih * w->in_w + iw) * c;
            const float *f = j->b + (kh * w->k_w + kw) * c * oc;
            for (int64_t ci = 0; ci < c; ci++) {
              const float *fr = f + ci * oc, *dyc = dyr + ci * dy_ci_step;
              float s = 0;
              for (int64_t co = 0; co < oc; co++) s += dyc[co] * fr[co];
              dxr[ci] += s;
            }
          }
        }
      }
  }
}

size_t npuK_filter_grad_f32_scratch_size(const npuK_window2d *w, int64_t out_c) {
  return (size_t)(w->k_h * w->k_w * w->c * out_c) * sizeof(double);
}

void npuK_conv2d_backprop_filter_f32_ref(const npuK_pool *pool, const npuK_window2d *w,
                                         int64_t out_c, const float *x, const float *dy,
                                         float *df, double *scratch) {
  wg_job j = {.w = w, .out_c = out_c, .a = x, .b = dy, .out = df, .acc = scratch};
  npuK_parallel_for(pool, w->k_h * w->k_w, 1, filter_grad_range, &j);
}

void npuK_conv2d_backprop_input_f32(const npuK_pool *pool, const npuK_window2d *w,
                                    int64_t out_c, const float *dy, const float *filter,
                                    float *dx) {
  wg_job j = {.w = w, .out_c = out_c, .a = dy, .b = filter, .out = dx};
  npuK_parallel_for(pool, w->n, 1, input_grad_range, &j);
}

void npuK_depthwise_conv2d_backprop_input_f32(const npuK_pool *pool, const npuK_window2d *w,
                                              int64_t multiplier, const float *dy,
                                              const float *filter, float *dx) {
  wg_job j = {.w = w, .out_c = multiplier, .depthwise = true, .a = dy, .b = filter, .out = dx};
  npuK_parallel_for(pool, w->n, 1, input_grad_range, &j);
}

void npuK_depthwise_conv2d_backprop_filter_f32(const npuK_pool *pool, const npuK_window2d *w,
                                               int64_t multiplier, const float *x,
                                               const float *dy, float *df, double *scratch) {
  wg_job j = {.w = w, .out_c = multiplier, .depthwise = true, .a = x, .b = dy, .out = df,
              .acc = scratch};
  npuK_parallel_for(pool, w->k_h * w->k_w, 1, filter_grad_range, &j);
}
