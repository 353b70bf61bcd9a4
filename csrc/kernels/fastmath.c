/* fastmath.c: the high_performance float32 kernels (kfast.h): exp, log, tanh, sigmoid, gelu,
 * softmax and log_softmax.
 *
 * Each function is a branch-free scalar formula (range reduction, a polynomial, the exponent
 * put together from bits; special values chosen with ?: selects) applied to blocks of
 * NPUK_FAST_BLOCK elements, each written to a local array first: the block loops have a fixed
 * trip count and no aliasing (in place works: a block is read whole before it is stored), so
 * the compiler turns them into vector code at -O2, and the last, partial block is padded and
 * goes through the same code, so an element's result never depends on where a thread's range
 * starts.  No FMA contraction (ISO C mode), so vector and scalar code agree: SSE2, AVX2,
 * AVX-512 and unvectorised builds give the same bits (NaN payloads included).
 *
 * The polynomial coefficients are weighted minimax fits (Remez exchange, relative error) made
 * for this file; kfast.h states the errors they give, tests/test_fastmath.c measures them.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/kfast.h"
#include "kernels/kutil.h"

/* The selects (?:) below compare floats; under GCC's default -ftrapping-math the vectoriser
   will not if-convert them.  Traps are never enabled here and no result changes (no
   reassociation, no contraction), so this file is built without it.  Clang if-converts as is. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#define B NPUK_FAST_BLOCK

/* On x86-64 the block loops are also built for AVX2 (8 lanes instead of SSE2's 4), picked
   once at load time by the CPU (GCC's target_clones, an ifunc).  AVX2 does not bring FMA,
   and there is no contraction anyway, so both clones compute the same bits.  Not under
   ThreadSanitizer: an ifunc resolver runs before its runtime is up (make tsan). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(__SANITIZE_THREAD__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

static inline uint32_t f2u(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
static inline float u2f(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* ---- e^(hi + lo) ---------------------------------------------------------------------------
 * n = round(hi / ln2) (the 1.5 * 2^23 trick: the sum's low bits hold n), r = hi - n ln2 in two
 * steps (ln2_hi has 16 significant bits, so n * ln2_hi is exact) plus lo, a small correction
 * the caller knows exactly (gelu's -x^2/2); e^r = 1 + r + r^2 P(r) on |r| <= ln2/2 (relative
 * error 3e-9); 2^n applied as two factors 2^(n/2) 2^(n - n/2) so that n from -150 to 128 needs
 * no special case: overflow gives inf, underflow rounds once into the subnormals.  hi is
 * clamped to [-104, 89] first (e^-104 rounds to 0, e^89 overflows). */
#define LOG2E 0x1.715476p+0f
#define LN2_HI 0x1.62e4p-1f /* 0.693145751953125 */
#define LN2_LO 0x1.7f7d1cp-20f
#define ROUND_MAGIC 0x1.8p+23f

static inline float exp_parts(float hi, float lo) {
  float xc = hi < -104.0f ? -104.0f : hi; /* NaN fails both tests and stays NaN */
  xc = xc > 89.0f ? 89.0f : xc;
  float big = xc * LOG2E + ROUND_MAGIC;
  float nf = big - ROUND_MAGIC;
  int32_t n = (int32_t)(f2u(big) - f2u(ROUND_MAGIC));
  float r = (xc - nf * LN2_HI) - nf * LN2_LO + lo;
  float q = 0x1.6a23dp-10f;
  q = q * r + 0x1.123a2p-7f;
  q = q * r + 0x1.5558f2p-5f;
  q = q * r + 0x1.555492p-3f;
  q = q * r + 0x1.fffffcp-2f;
  float p = 1.0f + (r + r * r * q);
  int32_t n1 = n >> 1, n2 = n - n1; /* GCC: >> of a negative int is arithmetic */
  float s1 = u2f((uint32_t)(n1 + 127) << 23), s2 = u2f((uint32_t)(n2 + 127) << 23);
  float y = (p * s1) * s2;
  return hi != hi ? hi : y;
}

static inline float f_exp(float x) { return exp_parts(x, 0.0f); }

/* ---- log ---------------------------------------------------------------------------------
 * x = 2^e m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^23 first); f = m - 1 is
 * exact; log(1 + f) = f - f^2/2 + f^3 P(f) (relative error 3e-8); e ln2 added in two parts. */
#define LOG_LN2_HI 0x1.63p-1f /* 0.693359375: 10 significant bits, e * LOG_LN2_HI is exact */
#define LOG_LN2_LO (-0x1.bd0106p-13f)

static inline float f_log(float x) {
  int sub = x < FLT_MIN;
  float xs = sub ? x * 0x1p23f : x;
  uint32_t u = f2u(xs);
  int32_t e = (int32_t)((u >> 23) & 0xffu) - 127 - (sub ? 23 : 0);
  uint32_t mant = u & 0x7fffffu;
  int up = mant > 0x3504f3u; /* m > sqrt(2): use m / 2 */
  float m = u2f(mant | (up ? 0x3f000000u : 0x3f800000u));
  e += up;
  float f = m - 1.0f, f2 = f * f;
  float q = 0x1.646a24p-4f;
  q = q * f - 0x1.243b6ap-3f;
  q = q * f + 0x1.31764p-3f;
  q = q * f - 0x1.53816p-3f;
  q = q * f + 0x1.98d7b4p-3f;
  q = q * f - 0x1.000384p-2f;
  q = q * f + 0x1.5556dap-2f;
  float lp = f + f2 * (f * q - 0.5f);
  float ef = (float)e;
  float y = ef * LOG_LN2_HI + (lp + ef * LOG_LN2_LO);
  y = x == INFINITY ? x : y;
  y = x == 0.0f ? -INFINITY : y;
  return x < 0.0f || x != x ? NAN : y;
}

/* ---- tanh --------------------------------------------------------------------------------
 * |x| < 0.625: x + x^3 P(x^2) (relative error 5e-9); otherwise 1 - 2 / (e^(2|x|) + 1) with x's
 * sign (|x| clamped to 9.1, where tanh is 1 in float32). */
static inline float f_tanh(float x) {
  float a = fabsf(x), x2 = x * x;
  float q = -0x1.75e1cep-8f;
  q = q * x2 + 0x1.52269cp-6f;
  q = q * x2 - 0x1.b83c5ap-5f;
  q = q * x2 + 0x1.110726p-3f;
  q = q * x2 - 0x1.555532p-2f;
  float small = x + x * x2 * q;
  float ac = a > 9.1f ? 9.1f : a;
  float big = copysignf(1.0f - 2.0f / (f_exp(2.0f * ac) + 1.0f), x);
  float y = a < 0.625f ? small : big;
  return x == 0.0f ? x : y; /* keeps the sign of zero */
}

/* ---- sigmoid -----------------------------------------------------------------------------
 * e = e^-|x|; 1 / (1 + e) for x >= 0, e / (1 + e) below (no cancellation either side). */
static inline float f_sigmoid(float x) {
  float e = f_exp(-fabsf(x));
  return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

/* ---- gelu --------------------------------------------------------------------------------
 * Exact form: Phi(x) for a = |x| as T = e^(-a^2/2) t Q(t), t = 1 / (1 + a 5/16), Q of degree 9
 * (fitted to 0.5 erfc(a / sqrt 2) e^(a^2/2), relative error 1.4e-8 on [0, 20]); Phi = T for
 * x < 0, 1 - T otherwise.  -a^2/2 is passed to exp_parts exactly as hi + lo (a split into 12
 * high bits, whose square is exact, and the rest), so the tail keeps its relative accuracy.
 * tanh form: x * sigmoid(x (k1 + k2 x^2)). */
#define GELU_K1 0x1.988454p+0f /* 2 sqrt(2 / pi) */
#define GELU_K2 0x1.2444f2p-4f /* 0.044715 * GELU_K1 */

static inline float f_gelu_exact(float x) {
  float a = fabsf(x);
  a = a > 20.0f ? 20.0f : a;
  float t = 1.0f / (1.0f + 0.3125f * a);
  float q = -0x1.4cd4dep-6f;
  q = q * t + 0x1.92db96p-4f;
  q = q * t - 0x1.5645d4p-3f;
  q = q * t + 0x1.864db4p-4f;
  q = q * t - 0x1.414e3cp-6f;
  q = q * t + 0x1.07fb8cp-4f;
  q = q * t + 0x1.64d30ap-4f;
  q = q * t + 0x1.ccc6eap-4f;
  q = q * t + 0x1.feb1p-4f;
  q = q * t + 0x1.fea4a6p-4f;
  float ah = u2f(f2u(a) & 0xfffff000u), al = a - ah;
  float tail = t * q * exp_parts(-0.5f * (ah * ah), -0.5f * (al * (a + ah)));
  float y = x * (x < 0.0f ? tail : 1.0f - tail);
  y = x == -INFINITY ? -0.0f : y; /* the limit, not -inf * 0 */
  return x != x ? x : y;          /* NaN as given (the clones would differ in its payload) */
}

static inline float f_gelu_tanh(float x) {
  float y = x * f_sigmoid(x * (GELU_K1 + GELU_K2 * (x * x)));
  y = x == -INFINITY ? -0.0f : y;
  return x != x ? x : y;
}

/* ---- blocked drivers ----------------------------------------------------------------------- */

#define DEFINE_BLOCKED(name, fn)                                                                \
  CLONES static void name##_run(const float *x, float *y, int64_t n) {                          \
    float in[B], out[B];                                                                        \
    int64_t i = 0;                                                                              \
    for (; i + B <= n; i += B) { /* all of x's block is read before y's is written */          \
      for (int j = 0; j < B; j++) out[j] = fn(x[i + j]);                                        \
      memcpy(y + i, out, sizeof out);                                                           \
    }                                                                                           \
    if (i < n) { /* the same code on a padded block */                                          \
      size_t rest = (size_t)(n - i) * sizeof *x;                                                \
      memset(in, 0, sizeof in);                                                                 \
      memcpy(in, x + i, rest);                                                                  \
      for (int j = 0; j < B; j++) out[j] = fn(in[j]);                                           \
      memcpy(y + i, out, rest);                                                                 \
    }                                                                                           \
  }
DEFINE_BLOCKED(exp, f_exp)
DEFINE_BLOCKED(log, f_log)
DEFINE_BLOCKED(tanh, f_tanh)
DEFINE_BLOCKED(sigmoid, f_sigmoid)
DEFINE_BLOCKED(gelu_exact, f_gelu_exact)
DEFINE_BLOCKED(gelu_tanh, f_gelu_tanh)

typedef void (*fast_run_fn)(const float *x, float *y, int64_t n);

static const fast_run_fn unary_fast[NPUK_UN_COUNT] = {
    [NPUK_UN_EXP] = exp_run, [NPUK_UN_LOG] = log_run, [NPUK_UN_TANH] = tanh_run,
    [NPUK_UN_SIGMOID] = sigmoid_run,
};

typedef struct fast_job {
  fast_run_fn run;
  const float *x;
  float *y;
} fast_job;

static void fast_range(void *arg, int64_t begin, int64_t end) {
  const fast_job *j = arg;
  j->run(j->x + begin, j->y + begin, end - begin);
}

static void fast_drive(const npuK_pool *pool, fast_run_fn run, int64_t n, const float *x,
                       float *y) {
  fast_job j = {run, x, y};
  npuK_parallel_for(pool, n, K_GRAIN_ELEMS, fast_range, &j);
}

int npuK_unary_has_fast(npuK_unop op) {
  return (unsigned)op < NPUK_UN_COUNT && unary_fast[op] != NULL;
}

int npuK_unary_f32_fast(const npuK_pool *pool, npuK_unop op, int64_t n, const float *x,
                        float *y) {
  if (!npuK_unary_has_fast(op)) return -1;
  fast_drive(pool, unary_fast[op], n, x, y);
  return 0;
}

void npuK_gelu_f32_fast(const npuK_pool *pool, int approximate, int64_t n, const float *x,
                        float *y) {
  fast_drive(pool, approximate ? gelu_tanh_run : gelu_exact_run, n, x, y);
}

/* ---- softmax, log_softmax ------------------------------------------------------------------
 * Per row: the max (NaN anywhere makes every output NaN through x - max, as in nn.c), then
 * e^(x - max) by blocks, summed in B float32 lanes over 16 blocks at a time and then in B
 * float64 lanes (so a long row's denominator keeps float32 rounding to 16 terms), added
 * pairwise in a fixed order at the end. */
typedef struct rows_job {
  int64_t cols;
  const float *x;
  float *y;
} rows_job;

static int64_t rows_grain(int64_t cols) {
  int64_t g = K_GRAIN_ELEMS / (cols > 0 ? cols : 1);
  return g < 1 ? 1 : g;
}

static inline double lanes_sum(double *lane) {
  for (int w = B / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) lane[j] += lane[j + w];
  return lane[0];
}

static inline float row_max(const float *x, int64_t cols) {
  float lane[B], in[B];
  int nan[B];
  for (int j = 0; j < B; j++) lane[j] = -INFINITY, nan[j] = 0;
  int64_t c = 0;
  for (; c + B <= cols; c += B)
    for (int j = 0; j < B; j++) {
      lane[j] = x[c + j] > lane[j] ? x[c + j] : lane[j];
      nan[j] |= x[c + j] != x[c + j];
    }
  if (c < cols) {
    for (int j = 0; j < B; j++) in[j] = -INFINITY; /* padding never wins */
    memcpy(in, x + c, (size_t)(cols - c) * sizeof *x);
    for (int j = 0; j < B; j++) {
      lane[j] = in[j] > lane[j] ? in[j] : lane[j];
      nan[j] |= in[j] != in[j];
    }
  }
  float m = lane[0];
  int any_nan = nan[0];
  for (int j = 1; j < B; j++) m = lane[j] > m ? lane[j] : m, any_nan |= nan[j];
  /* NaN never wins a comparison: a row holding one is NaN throughout, as in nn.c */
  return any_nan ? NAN : m;
}

/* e^(x - m) into y (when y is not NULL; y may be x); returns the sum: float32 lanes over up
   to EXP_FLUSH blocks (each lane adds at most EXP_FLUSH terms, all in (0, 1]), then added into
   float64 lanes; the flush points depend only on cols. */
#define EXP_FLUSH 16
static inline double row_exp_sum(const float *x, float *y, int64_t cols, float m) {
  float in[B], out[B], part[B];
  double lane[B];
  for (int j = 0; j < B; j++) lane[j] = 0.0, part[j] = 0.0f;
  int64_t c = 0;
  for (int blocks = 0; c + B <= cols; c += B) {
    for (int j = 0; j < B; j++) out[j] = f_exp(x[c + j] - m);
    for (int j = 0; j < B; j++) part[j] += out[j];
    if (y) memcpy(y + c, out, sizeof out);
    if (++blocks == EXP_FLUSH) {
      for (int j = 0; j < B; j++) lane[j] += (double)part[j], part[j] = 0.0f;
      blocks = 0;
    }
  }
  for (int j = 0; j < B; j++) lane[j] += (double)part[j];
  if (c < cols) {
    size_t rest = (size_t)(cols - c) * sizeof *x;
    for (int j = 0; j < B; j++) in[j] = m; /* padding: e^0, not added */
    memcpy(in, x + c, rest);
    for (int j = 0; j < B; j++) out[j] = f_exp(in[j] - m);
    for (int j = 0; j < B; j++) lane[j] += j < cols - c ? (double)out[j] : 0.0;
    if (y) memcpy(y + c, out, rest);
  }
  return lanes_sum(lane);
}

static inline void scale_row(float *y, int64_t cols, float s) {
  int64_t c = 0;
  for (; c + B <= cols; c += B)
    for (int j = 0; j < B; j++) y[c + j] *= s;
  for (; c < cols; c++) y[c] *= s;
}

CLONES static void softmax_range(void *arg, int64_t begin, int64_t end) {
  const rows_job *j = arg;
  for (int64_t r = begin; r < end; r++) {
    const float *x = j->x + r * j->cols;
    float *y = j->y + r * j->cols;
    float m = row_max(x, j->cols);
    float sum = (float)row_exp_sum(x, y, j->cols, m);
    scale_row(y, j->cols, 1.0f / sum);
  }
}

void npuK_log_softmax_row_f32_fast(const float *x, int64_t cols, float *max, float *log_sum) {
  float m = row_max(x, cols);
  *max = m;
  *log_sum = logf((float)row_exp_sum(x, NULL, cols, m));
}

CLONES static void log_softmax_range(void *arg, int64_t begin, int64_t end) {
  const rows_job *j = arg;
  for (int64_t r = begin; r < end; r++) {
    const float *x = j->x + r * j->cols;
    float *y = j->y + r * j->cols;
    float m = row_max(x, j->cols);
    float ls = logf((float)row_exp_sum(x, NULL, j->cols, m)), v[B];
    int64_t c = 0;
    for (; c + B <= j->cols; c += B) {
      for (int k = 0; k < B; k++) v[k] = (x[c + k] - m) - ls;
      memcpy(y + c, v, sizeof v);
    }
    for (; c < j->cols; c++) y[c] = (x[c] - m) - ls;
  }
}

void npuK_softmax_f32_fast(const npuK_pool *pool, int64_t rows, int64_t cols, const float *x,
                           float *y) {
  rows_job j = {cols, x, y};
  npuK_parallel_for(pool, rows, rows_grain(cols), softmax_range, &j);
}

void npuK_log_softmax_f32_fast(const npuK_pool *pool, int64_t rows, int64_t cols,
                               const float *x, float *y) {
  rows_job j = {cols, x, y};
  npuK_parallel_for(pool, rows, rows_grain(cols), log_softmax_range, &j);
}
