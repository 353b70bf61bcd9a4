/* grad.c: the elementwise and row-wise gradient kernels (activation grads, softmax and
 * log_softmax grads, bias_add's bias gradient) and a scale.
 *
 * Elementwise kernels split over elements; row kernels over rows; the bias gradient over
 * column blocks, each column summed over rows in ascending order.  So every result is bitwise
 * independent of the thread count.  Every sum (a row's sum(dy * y) or sum(dy), a column of
 * the bias gradient) accumulates in float64 (A) and is rounded once, so long rows and large
 * batches keep float32 results as good as their float64 sums.  Gradients "select" rather than multiply by a mask (as
 * TensorFlow's kernels do): a NaN upstream gradient where the mask is 0 gives 0.
 */
#include <math.h>
#include <string.h>

#include "kernels/kfast.h"
#include "kernels/kgrad.h"
#include "kernels/kutil.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* relu_grad and relu6_grad of float32: o = mask(b) ? a : +0 as a select of bits (NaN in a
   kept where the mask holds, +0 elsewhere, exactly the ternary), eight lanes through a local
   array so the compiler vectorises it at -O2: on random signs the branchy ternary mispredicts
   every other element (~2 ns each). */
static inline float select_f32(int keep, float a) {
  uint32_t bits, mask = (uint32_t)0 - (uint32_t)keep;
  memcpy(&bits, &a, sizeof bits);
  bits &= mask;
  memcpy(&a, &bits, sizeof a);
  return a;
}

#define SEL_LOOP(KEEP)                                                                             \
  do {                                                                                             \
    int64_t i = 0;                                                                                 \
    for (; i + 8 <= n; i += 8) {                                                                   \
      float r[8];                                                                                  \
      for (int l = 0; l < 8; l++) {                                                                \
        float x = b[i + l];                                                                        \
        r[l] = select_f32(KEEP, a[i + l]);                                                         \
      }                                                                                            \
      for (int l = 0; l < 8; l++) o[i + l] = r[l];                                                 \
    }                                                                                              \
    for (; i < n; i++) {                                                                           \
      float x = b[i];                                                                              \
      o[i] = select_f32(KEEP, a[i]);                                                               \
    }                                                                                              \
  } while (0)

static void relu_grad_sel_f32(int six, int64_t n, const float *a, const float *b, float *o) {
  if (six) SEL_LOOP((x > 0) & (x < 6));
  else SEL_LOOP(x > 0);
}

typedef struct ag_job {
  npuK_act_grad op;
  const void *a, *b;
  void *out;
  double s;
  int64_t rows, cols;
} ag_job;

/* relu_grad for float32, 4 lanes (one SSE register) at a time: b > 0 ? a : 0 as a select (the loop below
   does not vectorise at -O2), the same values */
typedef float ag_vec __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t ag_ivec __attribute__((vector_size(4 * sizeof(float))));

static int64_t relu_grad_lanes(const float *a, const float *b, float *o, int64_t begin,
                               int64_t end) {
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    ag_vec va, vb;
    memcpy(&va, a + i, sizeof va);
    memcpy(&vb, b + i, sizeof vb);
    va = (ag_vec)((vb > 0) & (ag_ivec)va);
    memcpy(o + i, &va, sizeof va);
  }
  return i;
}
#define RELU_LANES_f32(a, b, o, begin, end) relu_grad_lanes(a, b, o, begin, end)
#define RELU_LANES_f64(a, b, o, begin, end) (begin)

#define DEFINE_GRAD(T, A, dt, EXP)                                                                 \
  static void ag_range_##dt(void *arg, int64_t begin, int64_t end) {                            \
    const ag_job *j = arg;                                                                      \
    const T *a = j->a, *b = j->b;                                                               \
    T *o = j->out;                                                                              \
    switch (j->op) {                                                                            \
    case NPUK_AG_RELU:                                                                          \
      for (int64_t i = RELU_LANES_##dt(a, b, o, begin, end); i < end; i++)                      \
        o[i] = b[i] > 0 ? a[i] : (T)0;                                                          \
      break;                                                                                    \
    case NPUK_AG_RELU6:                                                                         \
      if (sizeof(T) == sizeof(float)) {                                                         \
        relu_grad_sel_f32(1, end - begin, (const float *)a + begin, (const float *)b + begin,   \
                          (float *)o + begin);                                                  \
        break;                                                                                  \
      }                                                                                         \
      for (int64_t i = begin; i < end; i++) o[i] = b[i] > 0 && b[i] < 6 ? a[i] : (T)0;          \
      break;                                                                                    \
    case NPUK_AG_SIGMOID:                                                                       \
      for (int64_t i = begin; i < end; i++) o[i] = b[i] * (a[i] * ((T)1 - a[i]));               \
      break;                                                                                    \
    case NPUK_AG_TANH:                                                                          \
      for (int64_t i = begin; i < end; i++) o[i] = b[i] * ((T)1 - a[i] * a[i]);                 \
      break;                                                                                    \
    case NPUK_AG_SQRT:                                                                          \
      for (int64_t i = begin; i < end; i++) o[i] = b[i] * (T)0.5 / a[i];                        \
      break;                                                                                    \
    default: break;                                                                             \
    }                                                                                           \
  }                                                                                             \
  void npuK_act_grad_##dt(const npuK_pool *pool, npuK_act_grad op, int64_t n, const T *a,      \
                          const T *b, T *out) {                                                 \
    ag_job j = {.op = op, .a = a, .b = b, .out = out};                                          \
    npuK_parallel_for(pool, n, K_GRAIN_ELEMS, ag_range_##dt, &j);                               \
  }                                                                                             \
  static void scale_range_##dt(void *arg, int64_t begin, int64_t end) {                         \
    const ag_job *j = arg;                                                                      \
    const T *x = j->a;                                                                          \
    T *y = j->out, s = (T)j->s;                                                                 \
    for (int64_t i = begin; i < end; i++) y[i] = x[i] * s;                                      \
  }                                                                                             \
  void npuK_scale_##dt(const npuK_pool *pool, int64_t n, double s, const T *x, T *y) {          \
    ag_job j = {.a = x, .out = y, .s = s};                                                      \
    npuK_parallel_for(pool, n, K_GRAIN_ELEMS, scale_range_##dt, &j);                            \
  }                                                                                             \
  static void softmax_grad_range_##dt(void *arg, int64_t begin, int64_t end) {                  \
    const ag_job *j = arg;                                                                      \
    for (int64_t r = begin; r < end; r++) {                                                     \
      const T *y = (const T *)j->a + r * j->cols, *dy = (const T *)j->b + r * j->cols;          \
      T *dx = (T *)j->out + r * j->cols;                                                        \
      A acc = 0;                                                                                \
      for (int64_t c = 0; c < j->cols; c++) acc += (A)dy[c] * (A)y[c];                          \
      T s = (T)acc;                                                                             \
      for (int64_t c = 0; c < j->cols; c++) dx[c] = (dy[c] - s) * y[c];                         \
    }                                                                                           \
  }                                                                                             \
  static void log_softmax_grad_range_##dt(void *arg, int64_t begin, int64_t end) {              \
    const ag_job *j = arg;                                                                      \
    for (int64_t r = begin; r < end; r++) {                                                     \
      const T *y = (const T *)j->a + r * j->cols, *dy = (const T *)j->b + r * j->cols;          \
      T *dx = (T *)j->out + r * j->cols;                                                        \
      A acc = 0;                                                                                \
      for (int64_t c = 0; c < j->cols; c++) acc += (A)dy[c];                                    \
      T s = (T)acc;                                                                             \
      for (int64_t c = 0; c < j->cols; c++) dx[c] = dy[c] - EXP(y[c]) * s;                      \
    }                                                                                           \
  }                                                                                             \
  void npuK_softmax_grad_##dt(const npuK_pool *pool, int64_t rows, int64_t cols, const T *y,    \
                              const T *dy, T *dx) {                                             \
    ag_job j = {.a = y, .b = dy, .out = dx, .cols = cols};                                      \
    npuK_parallel_for(pool, rows, row_grain(cols), softmax_grad_range_##dt, &j);                \
  }                                                                                             \
  void npuK_log_softmax_grad_##dt(const npuK_pool *pool, int64_t rows, int64_t cols,            \
                                  const T *y, const T *dy, T *dx) {                             \
    ag_job j = {.a = y, .b = dy, .out = dx, .cols = cols};                                      \
    npuK_parallel_for(pool, rows, row_grain(cols), log_softmax_grad_range_##dt, &j);            \
  }                                                                                             \
  /* columns [begin, end): db[c] = sum over rows of dy[r][c], rows ascending, in A; taken   \
     BG_CHUNK columns at a time so the accumulators live on the stack */                       \
  static void bias_grad_range_##dt(void *arg, int64_t begin, int64_t end) {                     \
    const ag_job *j = arg;                                                                      \
    const T *dy = j->a;                                                                         \
    T *db = j->out;                                                                             \
    A acc[BG_CHUNK];                                                                            \
    for (int64_t c0 = begin; c0 < end; c0 += BG_CHUNK) {                                        \
      int64_t n = end - c0 < BG_CHUNK ? end - c0 : BG_CHUNK;                                    \
      for (int64_t c = 0; c < n; c++) acc[c] = 0;                                               \
      for (int64_t r = 0; r < j->rows; r++) {                                                   \
        const T *row = dy + r * j->cols + c0;                                                   \
        int64_t c = 0;                                                                          \
        for (; c + 16 <= n; c += 16)                                                            \
          for (int k = 0; k < 16; k++) acc[c + k] += (A)row[c + k];                             \
        for (; c < n; c++) acc[c] += (A)row[c];                                                 \
      }                                                                                         \
      for (int64_t c = 0; c < n; c++) db[c0 + c] = (T)acc[c];                                   \
    }                                                                                           \
  }                                                                                             \
  void npuK_bias_add_grad_##dt(const npuK_pool *pool, int64_t rows, int64_t cols, const T *dy, \
                               T *db) {                                                         \
    ag_job j = {.a = dy, .out = db, .rows = rows, .cols = cols};                                \
    int64_t grain = K_GRAIN_ELEMS / (rows > 0 ? rows : 1);                                      \
    npuK_parallel_for(pool, cols, grain < 16 ? 16 : grain, bias_grad_range_##dt, &j);           \
  }

static int64_t row_grain(int64_t cols) {
  int64_t g = K_GRAIN_ELEMS / (cols > 0 ? cols : 1);
  return g < 1 ? 1 : g;
}

#define BG_CHUNK 512

DEFINE_GRAD(float, double, f32, expf)
DEFINE_GRAD(double, double, f64, exp)

/* ---- relu_grad then bias_add_grad of its output, one pass (kgrad.h) ---- */

typedef struct rbg_job {
  const float *dy, *x;
  float *g, *db;
  int64_t rows, cols;
} rbg_job;

/* Columns [begin, end), 16 at a time down all the rows (SSE2), their float64 sums held in
   registers, the rest one at a time: each element masked (relu_grad's select: x > 0 ? dy :
   +0), stored, and added to its column's sum; rows ascending, so the bits of relu_grad then
   bias_add_grad (whose accumulators live in memory, BG_CHUNK columns at a time). */
#if defined(__SSE2__)
/* 4 columns of a row: masked (x > 0 is false for NaN: +0 there, as the select), stored, and
   widened exactly into the two float64 sums lo (columns 0, 1) and hi (2, 3). */
#define RBG_QUAD(q, lo, hi)                                                                      \
  do {                                                                                           \
    __m128 m_ = _mm_cmpgt_ps(_mm_loadu_ps(x + 4 * (q)), zero);                                   \
    __m128 v_ = _mm_and_ps(m_, _mm_loadu_ps(dy + 4 * (q)));                                      \
    _mm_storeu_ps(g + 4 * (q), v_);                                                              \
    lo = _mm_add_pd(lo, _mm_cvtps_pd(v_));                                                       \
    hi = _mm_add_pd(hi, _mm_cvtps_pd(_mm_movehl_ps(v_, v_)));                                    \
  } while (0)

/* Columns [c0, c0 + 16): their 16 sums in 8 registers down all the rows. */
static void relu_bias_grad_16(const rbg_job *j, int64_t c0) {
  const __m128 zero = _mm_setzero_ps();
  __m128d s0 = _mm_setzero_pd(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  for (int64_t r = 0; r < j->rows; r++) {
    const float *dy = j->dy + r * j->cols + c0, *x = j->x + r * j->cols + c0;
    float *g = j->g + r * j->cols + c0;
    RBG_QUAD(0, s0, s1);
    RBG_QUAD(1, s2, s3);
    RBG_QUAD(2, s4, s5);
    RBG_QUAD(3, s6, s7);
  }
  double acc[16];
  _mm_storeu_pd(acc, s0), _mm_storeu_pd(acc + 2, s1), _mm_storeu_pd(acc + 4, s2);
  _mm_storeu_pd(acc + 6, s3), _mm_storeu_pd(acc + 8, s4), _mm_storeu_pd(acc + 10, s5);
  _mm_storeu_pd(acc + 12, s6), _mm_storeu_pd(acc + 14, s7);
  for (int k = 0; k < 16; k++) j->db[c0 + k] = (float)acc[k];
}
#endif

static void relu_bias_grad_range(void *arg, int64_t begin, int64_t end) {
  const rbg_job *j = arg;
  const int64_t cols = j->cols;
  int64_t c0 = begin;
#if defined(__SSE2__)
  for (; c0 + 16 <= end; c0 += 16) relu_bias_grad_16(j, c0);
#endif
  for (int64_t c = c0; c < end; c++) { /* the last columns, one at a time */
    double acc = 0;
    for (int64_t r = 0; r < j->rows; r++) {
      float v = j->x[r * cols + c] > 0 ? j->dy[r * cols + c] : 0.0f;
      j->g[r * cols + c] = v;
      acc += (double)v;
    }
    j->db[c] = (float)acc;
  }
}

void npuK_relu_grad_bias_grad_f32(const npuK_pool *pool, int64_t rows, int64_t cols,
                                  const float *dy, const float *x, float *g, float *db) {
  rbg_job j = {.dy = dy, .x = x, .g = g, .db = db, .rows = rows, .cols = cols};
  int64_t grain = K_GRAIN_ELEMS / (rows > 0 ? rows : 1); /* npuK_bias_add_grad's split */
  npuK_parallel_for(pool, cols, grain < 16 ? 16 : grain, relu_bias_grad_range, &j);
}

/* ---- log_softmax, the loss's mul and log_softmax_grad in one row pass (kgrad.h) ---- */

typedef struct lsx_job {
  const float *z, *a, *b;
  int a_one, b_one; /* a (b) is one element */
  int fast;         /* log_softmax's high_performance kernel (kfast.h) */
  float *d;
  int64_t cols;
} lsx_job;

/* Row by row: nn.c's log_softmax (the maximum, the float64 sum of expf(z - m), logf of it
   rounded), the elementwise mul, then log_softmax_grad (the float64 sum of dy, rounded, and
   dy - expf(y) * s) as those kernels write them, y and dy recomputed where they are needed
   instead of stored: the same expressions, so the same bits. */
static void lsx_range(void *arg, int64_t begin, int64_t end) {
  const lsx_job *j = arg;
  const int64_t cols = j->cols;
  for (int64_t r = begin; r < end; r++) {
    const float *z = j->z + r * cols, *a = j->a_one ? j->a : j->a + r * cols;
    const float *b = j->b_one ? j->b : j->b + r * cols;
    const int64_t ai = j->a_one ? 0 : 1, bi = j->b_one ? 0 : 1;
    float *d = j->d + r * cols, m = -INFINITY, ls;
    double dsum = 0;
    if (j->fast) {
      npuK_log_softmax_row_f32_fast(z, cols, &m, &ls);
    } else {
      for (int64_t c = 0; c < cols; c++)
        if (z[c] > m || z[c] != z[c]) m = z[c];
      double sum = 0;
      for (int64_t c = 0; c < cols; c++) sum += (double)expf(z[c] - m);
      ls = logf((float)sum);
    }
    for (int64_t c = 0; c < cols; c++) dsum += (double)(a[c * ai] * b[c * bi]);
    float s = (float)dsum;
    for (int64_t c = 0; c < cols; c++) {
      float y = (z[c] - m) - ls, dy = a[c * ai] * b[c * bi];
      d[c] = dy - expf(y) * s;
    }
  }
}

void npuK_log_softmax_xent_grad_f32(const npuK_pool *pool, int fast, int64_t rows, int64_t cols,
                                    const float *z, const float *a, int a_one, const float *b,
                                    int b_one, float *d, float *db) {
  lsx_job j = {.z = z, .a = a, .b = b, .a_one = a_one, .b_one = b_one, .fast = fast, .d = d,
               .cols = cols};
  npuK_parallel_for(pool, rows, row_grain(cols), lsx_range, &j);
  if (db) npuK_bias_add_grad_f32(pool, rows, cols, d, db);
}
