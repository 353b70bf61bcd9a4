/* unary.c: element-wise unary ops, y[i] = op(x[i]), x and y dense of n elements.
 *
 * One implementation (fast == ref), split over elements. In-place (y == x) is fine: each
 * element is read before it is written. Integer variants exist only for ops flagged in
 * NPUK_UNOP_LIST and wrap on overflow through unsigned arithmetic (neg/abs of MIN is MIN).
 */
#include <math.h>

#include "kernels/kutil.h"

static const uint8_t unop_int_ok[NPUK_UN_COUNT] = {
#define X(E, s, i) [NPUK_UN_##E] = i,
  NPUK_UNOP_LIST(X)
#undef X
};

int npuK_unary_supported(npuK_unop op, npuK_dtype dtype) {
  if ((unsigned)op >= NPUK_UN_COUNT) return 0;
  switch (dtype) {
  case NPUK_F32: case NPUK_F64: return 1;
  case NPUK_I32: case NPUK_I64: return unop_int_ok[op];
  default: return 0;
  }
}

/* ---- scalar ops ------------------------------------------------------------------------- */

#define FLOAT_UN(T, dt, EXP, LOG, TANH, SQRT, FABS)                                             \
  static inline T dt##_neg(T x) { return -x; }                                                 \
  /* NaN stays NaN; -0 gives +0 (relu) and -0 (relu6); no branches (fused.c has the same) */   \
  static inline T dt##_relu(T x) { return x <= 0 ? 0 : x; }                                    \
  static inline T dt##_relu6(T x) {                                                            \
    T r = x < 0 ? 0 : x;                                                                       \
    return r > 6 ? 6 : r;                                                                      \
  }                                                                                            \
  static inline T dt##_sigmoid(T x) {                                                          \
    if (x >= 0) return 1 / (1 + EXP(-x));                                                      \
    T e = EXP(x);                                                                              \
    return e / (1 + e);                                                                        \
  }                                                                                            \
  static inline T dt##_tanh(T x) { return TANH(x); }                                           \
  static inline T dt##_exp(T x) { return EXP(x); }                                             \
  static inline T dt##_log(T x) { return LOG(x); }                                             \
  static inline T dt##_sqrt(T x) { return SQRT(x); }                                           \
  static inline T dt##_square(T x) { return x * x; }                                           \
  static inline T dt##_abs(T x) { return FABS(x); }

#define INT_UN(T, UT, dt)                                                                       \
  static inline T dt##_neg(T x) { return (T)((UT)0 - (UT)x); }                                \
  static inline T dt##_relu(T x) { return x > 0 ? x : 0; }                                     \
  static inline T dt##_relu6(T x) { return x < 0 ? 0 : x > 6 ? 6 : x; }                        \
  static inline T dt##_square(T x) { return (T)((UT)x * (UT)x); }                              \
  static inline T dt##_abs(T x) { return x < 0 ? (T)((UT)0 - (UT)x) : x; }

FLOAT_UN(float, f32, expf, logf, tanhf, sqrtf, fabsf)
FLOAT_UN(double, f64, exp, log, tanh, sqrt, fabs)
INT_UN(int32_t, uint32_t, i32)
INT_UN(int64_t, uint64_t, i64)

typedef void (*un_run_fn)(const void *x, void *y, int64_t n);

/* Fixed 8-element bodies through a local array: the compiler vectorises them at -O2, and the
   loads of a body come before its stores, so y == x stays fine. */
#define DEFINE_UN_RUN(T, dt, s)                                                                 \
  static void un_##dt##_##s(const void *xv, void *yv, int64_t n) {                              \
    const T *x = xv;                                                                            \
    T *y = yv;                                                                                  \
    int64_t i = 0;                                                                              \
    for (; i + 8 <= n; i += 8) {                                                                \
      T r[8];                                                                                   \
      for (int j = 0; j < 8; j++) r[j] = dt##_##s(x[i + j]);                                    \
      for (int j = 0; j < 8; j++) y[i + j] = r[j];                                              \
    }                                                                                           \
    for (; i < n; i++) y[i] = dt##_##s(x[i]);                                                   \
  }

#define FLOAT_RUNS(T, dt)                                                                       \
  DEFINE_UN_RUN(T, dt, neg) DEFINE_UN_RUN(T, dt, relu) DEFINE_UN_RUN(T, dt, relu6)              \
  DEFINE_UN_RUN(T, dt, sigmoid) DEFINE_UN_RUN(T, dt, tanh) DEFINE_UN_RUN(T, dt, exp)            \
  DEFINE_UN_RUN(T, dt, log) DEFINE_UN_RUN(T, dt, sqrt) DEFINE_UN_RUN(T, dt, square)             \
  DEFINE_UN_RUN(T, dt, abs)                                                                     \
  static const un_run_fn un_##dt[NPUK_UN_COUNT] = {                                             \
    [NPUK_UN_NEG] = un_##dt##_neg, [NPUK_UN_RELU] = un_##dt##_relu,                             \
    [NPUK_UN_RELU6] = un_##dt##_relu6, [NPUK_UN_SIGMOID] = un_##dt##_sigmoid,                   \
    [NPUK_UN_TANH] = un_##dt##_tanh, [NPUK_UN_EXP] = un_##dt##_exp,                             \
    [NPUK_UN_LOG] = un_##dt##_log, [NPUK_UN_SQRT] = un_##dt##_sqrt,                             \
    [NPUK_UN_SQUARE] = un_##dt##_square, [NPUK_UN_ABS] = un_##dt##_abs,                         \
  };

#define INT_RUNS(T, dt)                                                                         \
  DEFINE_UN_RUN(T, dt, neg) DEFINE_UN_RUN(T, dt, relu) DEFINE_UN_RUN(T, dt, relu6)              \
  DEFINE_UN_RUN(T, dt, square) DEFINE_UN_RUN(T, dt, abs)                                        \
  static const un_run_fn un_##dt[NPUK_UN_COUNT] = {                                             \
    [NPUK_UN_NEG] = un_##dt##_neg, [NPUK_UN_RELU] = un_##dt##_relu,                             \
    [NPUK_UN_RELU6] = un_##dt##_relu6, [NPUK_UN_SQUARE] = un_##dt##_square,                     \
    [NPUK_UN_ABS] = un_##dt##_abs,                                                              \
  };

FLOAT_RUNS(float, f32)
FLOAT_RUNS(double, f64)
INT_RUNS(int32_t, i32)
INT_RUNS(int64_t, i64)

typedef struct un_job {
  un_run_fn run;
  const char *x;
  char *y;
  int64_t elem_size;
} un_job;

static void un_range(void *arg, int64_t begin, int64_t end) {
  const un_job *j = arg;
  j->run(j->x + begin * j->elem_size, j->y + begin * j->elem_size, end - begin);
}

static int un_drive(const npuK_pool *pool, const un_run_fn *table, npuK_unop op, int64_t n,
                    const void *x, void *y, int64_t elem_size) {
  if ((unsigned)op >= NPUK_UN_COUNT || table[op] == NULL) return -1;
  un_job j = {table[op], x, y, elem_size};
  npuK_parallel_for(pool, n, K_GRAIN_ELEMS, un_range, &j);
  return 0;
}

int npuK_unary_f32(const npuK_pool *pool, npuK_unop op, int64_t n, const float *x, float *y) {
  return un_drive(pool, un_f32, op, n, x, y, sizeof *x);
}
int npuK_unary_f64(const npuK_pool *pool, npuK_unop op, int64_t n, const double *x, double *y) {
  return un_drive(pool, un_f64, op, n, x, y, sizeof *x);
}
int npuK_unary_i32(const npuK_pool *pool, npuK_unop op, int64_t n, const int32_t *x, int32_t *y) {
  return un_drive(pool, un_i32, op, n, x, y, sizeof *x);
}
int npuK_unary_i64(const npuK_pool *pool, npuK_unop op, int64_t n, const int64_t *x, int64_t *y) {
  return un_drive(pool, un_i64, op, n, x, y, sizeof *x);
}

/* ---- float16 / bfloat16 operands ---------------------------------------------------------
 * The precision modes store values at half size while kernels compute in float32.  Rather
 * than widening whole tensors first, each block of UN_BLOCK elements is widened into a stack
 * buffer, computed by the float32 kernel and narrowed (npuK_cast's conversions, the ones the
 * executor uses for whole tensors): the same bits, no full-size copies.  Elementwise, so where
 * the blocks fall cannot change a result. */
#define UN_BLOCK 1024

typedef struct un_mixed_job {
  npuK_unary_f32_fn f32;
  npuK_unop op;
  const char *x;
  char *y;
  npuK_dtype x_dtype, y_dtype;
  int64_t n;
} un_mixed_job;

/* relu from float16 to float16 on the stored bits (antispoof's relus after its pools): a NaN
   (either sign) and a positive value are kept, anything else (negatives, -0) becomes +0 —
   what widening (exact, NaN payloads kept), x <= 0 ? 0 : x (which returns x itself, no
   arithmetic) and narrowing (exact on a widened value) give, without the two conversions.
   Not bfloat16: its narrowing sets a NaN's quiet bit. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* 16 lanes: kept where |h| > inf (NaN) or h > 0 as a signed 16-bit value (positive, not 0). */
__attribute__((target("avx2"))) static int64_t relu_f16_bits_avx2(const uint16_t *x,
                                                                   uint16_t *y, int64_t n) {
  const __m256i mag = _mm256_set1_epi16(0x7fff), inf = _mm256_set1_epi16(0x7c00),
                zero = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(x + i));
    __m256i keep = _mm256_or_si256(_mm256_cmpgt_epi16(_mm256_and_si256(h, mag), inf),
                                   _mm256_cmpgt_epi16(h, zero));
    _mm256_storeu_si256((__m256i *)(y + i), _mm256_and_si256(h, keep));
  }
  return i;
}
#endif

static void relu_f16_bits(const uint16_t *x, uint16_t *y, int64_t n) {
  int64_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (npuK_f16c()) i = relu_f16_bits_avx2(x, y, n); /* AVX2 is what npuK_f16c asks */
#endif
  for (; i < n; i++) {
    uint16_t h = x[i];
    int keep = (h & 0x7fff) > 0x7c00 || (h < 0x8000 && h != 0);
    y[i] = keep ? h : 0;
  }
}

static void un_mixed_range(void *arg, int64_t begin, int64_t end) {
  const un_mixed_job *j = arg;
  float xbuf[UN_BLOCK], ybuf[UN_BLOCK];
  size_t xs = npuK_dtype_size(j->x_dtype), ys = npuK_dtype_size(j->y_dtype);
  int64_t stop = end * UN_BLOCK < j->n ? end * UN_BLOCK : j->n; /* the last block is short */
  for (int64_t i = begin * UN_BLOCK; i < stop; i += UN_BLOCK) {
    int64_t n = stop - i < UN_BLOCK ? stop - i : UN_BLOCK;
    if (j->op == NPUK_UN_RELU && j->x_dtype == NPUK_F16 && j->y_dtype == NPUK_F16) {
      relu_f16_bits((const uint16_t *)j->x + i, (uint16_t *)j->y + i, n);
      continue;
    }
    const float *x = (const float *)(j->x + i * (int64_t)xs);
    float *y = j->y_dtype == NPUK_F32 ? (float *)(j->y + i * (int64_t)ys) : ybuf;
    if (j->x_dtype != NPUK_F32) {
      npuK_cast(NULL, n, j->x_dtype, x, NPUK_F32, xbuf);
      x = xbuf;
    }
    j->f32(NULL, j->op, n, x, y);
    if (y == ybuf) npuK_cast(NULL, n, NPUK_F32, ybuf, j->y_dtype, j->y + i * (int64_t)ys);
  }
}

static int f32_or_half(npuK_dtype t) { return t == NPUK_F32 || t == NPUK_F16 || t == NPUK_BF16; }

int npuK_unary_mixed(const npuK_pool *pool, npuK_unary_f32_fn f32, npuK_unop op, int64_t n,
                     const void *x, npuK_dtype x_dtype, void *y, npuK_dtype y_dtype) {
  if ((unsigned)op >= NPUK_UN_COUNT || !f32_or_half(x_dtype) || !f32_or_half(y_dtype)) return -1;
  if (n <= 0) return 0;
  un_mixed_job j = {f32, op, x, y, x_dtype, y_dtype, n};
  int64_t n_blocks = (n + UN_BLOCK - 1) / UN_BLOCK;
  npuK_parallel_for(pool, n_blocks, K_GRAIN_ELEMS / UN_BLOCK, un_mixed_range, &j);
  return 0;
}
