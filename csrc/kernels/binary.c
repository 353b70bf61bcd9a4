/* binary.c: element-wise binary ops, comparisons and logical ops with NumPy broadcasting.
 *
 * out is dense with shape dims; each input comes with element strides per output dim (0 where
 * broadcast). The fast path simplifies the index space (k_geom: drops size-1 dims, merges
 * contiguous dims), which turns "same shape, dense" and "one scalar" into one long run; the
 * inner loop is specialised for stride patterns (1,1), (1,0), (0,1). Work is split over output
 * elements only. The _ref twins recompute every offset from the multi-index, one element at a
 * time. Integer arithmetic goes through unsigned types so overflow wraps without UB, and
 * division by zero yields 0 (see kernels.h).
 */
#include <math.h>

#include "core/half.h"
#include "kernels/kutil.h"

/* ---- scalar ops ------------------------------------------------------------------------- */

#define FLOAT_OPS(T, dt, POW, FLOOR, FMOD)                                                     \
  static inline T dt##_add(T a, T b) { return a + b; }                                        \
  static inline T dt##_sub(T a, T b) { return a - b; }                                        \
  static inline T dt##_mul(T a, T b) { return a * b; }                                        \
  static inline T dt##_div(T a, T b) { return a / b; }                                        \
  static inline T dt##_maximum(T a, T b) { return (a > b || a != a) ? a : b; }               \
  static inline T dt##_minimum(T a, T b) { return (a < b || a != a) ? a : b; }               \
  static inline T dt##_pow(T a, T b) { return POW(a, b); }                                    \
  static inline T dt##_squared_difference(T a, T b) { T d = a - b; return d * d; }           \
  static inline T dt##_floor_div(T a, T b) { return FLOOR(a / b); }                          \
  static inline T dt##_floor_mod(T a, T b) {                                                  \
    T r = FMOD(a, b);                                                                         \
    if (r != 0 && ((r < 0) != (b < 0))) r += b;                                               \
    return r;                                                                                 \
  }

#define INT_OPS(T, UT, dt)                                                                     \
  static inline T dt##_add(T a, T b) { return (T)((UT)a + (UT)b); }                          \
  static inline T dt##_sub(T a, T b) { return (T)((UT)a - (UT)b); }                          \
  static inline T dt##_mul(T a, T b) { return (T)((UT)a * (UT)b); }                          \
  static inline T dt##_div(T a, T b) {                                                        \
    if (b == 0) return 0;                                                                     \
    if (b == -1) return (T)((UT)0 - (UT)a);                                                   \
    return a / b;                                                                             \
  }                                                                                           \
  static inline T dt##_maximum(T a, T b) { return a > b ? a : b; }                           \
  static inline T dt##_minimum(T a, T b) { return a < b ? a : b; }                           \
  static inline T dt##_pow(T a, T b) {                                                        \
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;                          \
    UT r = 1, base = (UT)a;                                                                   \
    while (b) {                                                                               \
      if (b & 1) r *= base;                                                                   \
      base *= base;                                                                           \
      b >>= 1;                                                                                \
    }                                                                                         \
    return (T)r;                                                                              \
  }                                                                                           \
  static inline T dt##_squared_difference(T a, T b) {                                         \
    UT d = (UT)a - (UT)b;                                                                     \
    return (T)(d * d);                                                                        \
  }                                                                                           \
  static inline T dt##_floor_div(T a, T b) {                                                  \
    if (b == 0) return 0;                                                                     \
    if (b == -1) return (T)((UT)0 - (UT)a);                                                   \
    T q = a / b;                                                                              \
    if (a % b != 0 && ((a < 0) != (b < 0))) q--;                                              \
    return q;                                                                                 \
  }                                                                                           \
  static inline T dt##_floor_mod(T a, T b) {                                                  \
    if (b == 0 || b == -1) return 0;                                                          \
    T r = a % b;                                                                              \
    if (r != 0 && ((r < 0) != (b < 0))) r += b;                                               \
    return r;                                                                                 \
  }

FLOAT_OPS(float, f32, powf, floorf, fmodf)
FLOAT_OPS(double, f64, pow, floor, fmod)
INT_OPS(int32_t, uint32_t, i32)
INT_OPS(int64_t, uint64_t, i64)

#define CMP_OPS(T, dt)                                                                         \
  static inline uint8_t dt##_equal(T a, T b) { return a == b; }                               \
  static inline uint8_t dt##_not_equal(T a, T b) { return a != b; }                           \
  static inline uint8_t dt##_less(T a, T b) { return a < b; }                                 \
  static inline uint8_t dt##_less_equal(T a, T b) { return a <= b; }                          \
  static inline uint8_t dt##_greater(T a, T b) { return a > b; }                              \
  static inline uint8_t dt##_greater_equal(T a, T b) { return a >= b; }

CMP_OPS(float, f32)
CMP_OPS(double, f64)
CMP_OPS(int32_t, i32)
CMP_OPS(int64_t, i64)

static inline uint8_t bool_and(uint8_t a, uint8_t b) { return (a != 0) & (b != 0); }
static inline uint8_t bool_or(uint8_t a, uint8_t b) { return (a != 0) | (b != 0); }
static inline uint8_t bool_xor(uint8_t a, uint8_t b) { return (a != 0) ^ (b != 0); }

/* ---- inner runs: o[i] = f(a[i*sa], b[i*sb]) for i < n, o dense --------------------------- */

typedef void (*run_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *o, int64_t n);

/* o[i] = EXPR for i < n in fixed 8-element bodies through a local array, which the compiler
   vectorises at -O2 (the selects of maximum/minimum and the comparisons included); a body's
   loads come before its stores, so o may be a or b. */
#define RUN8(OT, n, EXPR)                                                                      \
  do {                                                                                         \
    int64_t i = 0;                                                                             \
    for (; i + 8 <= (n); i += 8) {                                                             \
      OT r_[8];                                                                                \
      for (int j_ = 0; j_ < 8; j_++) {                                                         \
        int64_t k = i + j_;                                                                    \
        r_[j_] = (EXPR);                                                                       \
      }                                                                                        \
      for (int j_ = 0; j_ < 8; j_++) o[i + j_] = r_[j_];                                       \
    }                                                                                          \
    for (; i < (n); i++) {                                                                     \
      int64_t k = i;                                                                           \
      o[k] = (EXPR);                                                                           \
    }                                                                                          \
  } while (0)

#define DEFINE_RUN(name, T, OT, FN)                                                            \
  static void name(const void *av, int64_t sa, const void *bv, int64_t sb, void *ov,           \
                   int64_t n) {                                                                \
    const T *a = av, *b = bv;                                                                  \
    OT *o = ov;                                                                                \
    if (sa == 1 && sb == 1) {                                                                  \
      RUN8(OT, n, FN(a[k], b[k]));                                                             \
    } else if (sa == 1 && sb == 0) {                                                           \
      T bs = b[0];                                                                             \
      RUN8(OT, n, FN(a[k], bs));                                                               \
    } else if (sa == 0 && sb == 1) {                                                           \
      T as = a[0];                                                                             \
      RUN8(OT, n, FN(as, b[k]));                                                               \
    } else {                                                                                   \
      for (int64_t i = 0; i < n; i++) o[i] = FN(a[i * sa], b[i * sb]);                         \
    }                                                                                          \
  }


/* One table per dtype, indexed by op enum. */
#define DEFINE_TABLES(T, dt)                                                                   \
  DEFINE_RUN(run_##dt##_add, T, T, dt##_add)                                                  \
  DEFINE_RUN(run_##dt##_sub, T, T, dt##_sub)                                                  \
  DEFINE_RUN(run_##dt##_mul, T, T, dt##_mul)                                                  \
  DEFINE_RUN(run_##dt##_div, T, T, dt##_div)                                                  \
  DEFINE_RUN(run_##dt##_maximum, T, T, dt##_maximum)                                          \
  DEFINE_RUN(run_##dt##_minimum, T, T, dt##_minimum)                                          \
  DEFINE_RUN(run_##dt##_pow, T, T, dt##_pow)                                                  \
  DEFINE_RUN(run_##dt##_squared_difference, T, T, dt##_squared_difference)                    \
  DEFINE_RUN(run_##dt##_floor_div, T, T, dt##_floor_div)                                      \
  DEFINE_RUN(run_##dt##_floor_mod, T, T, dt##_floor_mod)                                      \
  DEFINE_RUN(run_##dt##_equal, T, uint8_t, dt##_equal)                                        \
  DEFINE_RUN(run_##dt##_not_equal, T, uint8_t, dt##_not_equal)                                \
  DEFINE_RUN(run_##dt##_less, T, uint8_t, dt##_less)                                          \
  DEFINE_RUN(run_##dt##_less_equal, T, uint8_t, dt##_less_equal)                              \
  DEFINE_RUN(run_##dt##_greater, T, uint8_t, dt##_greater)                                    \
  DEFINE_RUN(run_##dt##_greater_equal, T, uint8_t, dt##_greater_equal)                        \
  static const run_fn bin_##dt[NPUK_BIN_COUNT] = {                                             \
    NPUK_BINOP_LIST(TABLE_BIN_##dt)                                                            \
  };                                                                                           \
  static const run_fn cmp_##dt[NPUK_CMP_COUNT] = {                                             \
    NPUK_CMPOP_LIST(TABLE_CMP_##dt)                                                            \
  };

#define TABLE_BIN_f32(E, s) [NPUK_BIN_##E] = run_f32_##s,
#define TABLE_BIN_f64(E, s) [NPUK_BIN_##E] = run_f64_##s,
#define TABLE_BIN_i32(E, s) [NPUK_BIN_##E] = run_i32_##s,
#define TABLE_BIN_i64(E, s) [NPUK_BIN_##E] = run_i64_##s,
#define TABLE_CMP_f32(E, s) [NPUK_CMP_##E] = run_f32_##s,
#define TABLE_CMP_f64(E, s) [NPUK_CMP_##E] = run_f64_##s,
#define TABLE_CMP_i32(E, s) [NPUK_CMP_##E] = run_i32_##s,
#define TABLE_CMP_i64(E, s) [NPUK_CMP_##E] = run_i64_##s,

DEFINE_TABLES(float, f32)
DEFINE_TABLES(double, f64)
DEFINE_TABLES(int32_t, i32)
DEFINE_TABLES(int64_t, i64)

DEFINE_RUN(run_bool_and, uint8_t, uint8_t, bool_and)
DEFINE_RUN(run_bool_or, uint8_t, uint8_t, bool_or)
DEFINE_RUN(run_bool_xor, uint8_t, uint8_t, bool_xor)
static const run_fn log_bool[NPUK_LOGICAL_COUNT] = {
  [NPUK_LOGICAL_AND] = run_bool_and, [NPUK_LOGICAL_OR] = run_bool_or,
  [NPUK_LOGICAL_XOR] = run_bool_xor,
};

/* ---- drivers ---------------------------------------------------------------------------- */

typedef struct bin_job {
  k_geom g;
  run_fn run;
  const char *a, *b;
  char *o;
  size_t in_size, out_size; /* bytes per input / output element */
} bin_job;

static void bin_range(void *arg, int64_t begin, int64_t end) {
  const bin_job *j = arg;
  int64_t coord[K_GEOM_MAX_DIMS], off[K_MAX_OPS];
  int last = j->g.ndim - 1;
  k_geom_seek(&j->g, begin, coord, off);
  for (int64_t i = begin; i < end;) {
    int64_t run = k_geom_run(&j->g, coord, end - i);
    j->run(j->a + off[0] * (int64_t)j->in_size, j->g.s[0][last],
           j->b + off[1] * (int64_t)j->in_size, j->g.s[1][last], j->o + i * (int64_t)j->out_size,
           run);
    i += run;
    k_geom_advance(&j->g, coord, off, run);
  }
}

static void bin_drive(const npuK_pool *pool, run_fn run, size_t in_size, size_t out_size, int ndim,
                      const int64_t *dims, const void *a, const int64_t *a_strides, const void *b,
                      const int64_t *b_strides, void *out) {
  bin_job j;
  const int64_t *strides[2] = {a_strides, b_strides};
  int64_t total = k_geom_init(&j.g, ndim, dims, 2, strides);
  j.run = run;
  j.a = a;
  j.b = b;
  j.o = out;
  j.in_size = in_size;
  j.out_size = out_size;
  npuK_parallel_for(pool, total, K_GRAIN_ELEMS, bin_range, &j);
}

/* Reference: every element from its multi-index, serial. */
static void bin_drive_ref(run_fn run, size_t in_size, size_t out_size, int ndim,
                          const int64_t *dims, const void *a, const int64_t *a_strides,
                          const void *b, const int64_t *b_strides, void *out) {
  int64_t total = k_prod(ndim, dims);
  for (int64_t i = 0; i < total; i++) {
    int64_t rest = i, oa = 0, ob = 0;
    for (int d = ndim - 1; d >= 0; d--) {
      int64_t c = rest % dims[d];
      rest /= dims[d];
      oa += c * a_strides[d];
      ob += c * b_strides[d];
    }
    run((const char *)a + oa * (int64_t)in_size, 0, (const char *)b + ob * (int64_t)in_size, 0,
        (char *)out + i * (int64_t)out_size, 1);
  }
}

#define DEFINE_BINARY(T, dt)                                                                   \
  void npuK_binary_##dt(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,   \
                        const T *a, const int64_t *a_strides, const T *b,                      \
                        const int64_t *b_strides, T *out) {                                    \
    if ((unsigned)op >= NPUK_BIN_COUNT) return;                                                \
    bin_drive(pool, bin_##dt[op], sizeof(T), sizeof(T), ndim, dims, a, a_strides, b,           \
              b_strides, out);                                                                 \
  }                                                                                            \
  void npuK_binary_##dt##_ref(const npuK_pool *pool, npuK_binop op, int ndim,                  \
                              const int64_t *dims, const T *a, const int64_t *a_strides,       \
                              const T *b, const int64_t *b_strides, T *out) {                  \
    (void)pool;                                                                                \
    if ((unsigned)op >= NPUK_BIN_COUNT) return;                                                \
    bin_drive_ref(bin_##dt[op], sizeof(T), sizeof(T), ndim, dims, a, a_strides, b, b_strides,  \
                  out);                                                                        \
  }                                                                                            \
  void npuK_compare_##dt(const npuK_pool *pool, npuK_cmpop op, int ndim, const int64_t *dims,  \
                         const T *a, const int64_t *a_strides, const T *b,                     \
                         const int64_t *b_strides, uint8_t *out) {                             \
    if ((unsigned)op >= NPUK_CMP_COUNT) return;                                                \
    bin_drive(pool, cmp_##dt[op], sizeof(T), 1, ndim, dims, a, a_strides, b, b_strides, out);  \
  }

DEFINE_BINARY(float, f32)
DEFINE_BINARY(double, f64)
DEFINE_BINARY(int32_t, i32)
DEFINE_BINARY(int64_t, i64)

void npuK_logical_bool(const npuK_pool *pool, npuK_logop op, int ndim, const int64_t *dims,
                       const uint8_t *a, const int64_t *a_strides, const uint8_t *b,
                       const int64_t *b_strides, uint8_t *out) {
  if ((unsigned)op >= NPUK_LOGICAL_COUNT) return;
  bin_drive(pool, log_bool[op], 1, 1, ndim, dims, a, a_strides, b, b_strides, out);
}

/* ---- float16 / bfloat16 operands ---------------------------------------------------------
 * The precision modes store values at half size while kernels compute in float32: each run of
 * the output (bin_range's) is cut into blocks of BIN_BLOCK elements, the inputs' elements for
 * a block widened into stack buffers (a broadcast one just once), the float32 run computes
 * the block and a reduced output is narrowed — npuK_cast's conversions, as the executor's
 * whole-tensor widening: the same bits without the full-size copies. */
#define BIN_BLOCK 1024

typedef struct bin_mixed_job {
  bin_job b;
  npuK_dtype dt[3]; /* a, b, out */
  npuK_binop op;
  int regs; /* bin_f16_regs takes the dense runs */
} bin_mixed_job;

/* Input elements at offsets off, off + stride, ... (n of them) as float32: in place when
   float32 (*st = stride), else widened into buf (*st = 1, or 0 for a broadcast element). */
static const float *bin_widen(const char *base, npuK_dtype dt, int64_t off, int64_t stride,
                              int64_t n, float *buf, int64_t *st) {
  *st = stride;
  if (dt == NPUK_F32) return (const float *)base + off;
  const uint16_t *h = (const uint16_t *)base + off;
  if (stride == 0 || stride == 1) {
    npuK_cast(NULL, stride ? n : 1, dt, h, NPUK_F32, buf);
    return buf;
  }
  *st = 1; /* strided: gathered one at a time (dense inner dims were merged by k_geom) */
  for (int64_t i = 0; i < n; i++)
    buf[i] = dt == NPUK_F16 ? npu_f16_to_f32(h[i * stride]) : npu_bf16_to_f32(h[i * stride]);
  return buf;
}

/* A float16 output of add, sub, mul or div, its operands float16 or float32, each dense or one
   element broadcast (stride 1 or 0), on F16C: 8 lanes at a time in registers (widened as they
   are loaded, narrowed as stored) instead of three block buffers written and reread — blazeface's
   and gender's residual adds.  The same bits as the buffered path: the lanes compute the float32
   op the block would, exact widening, and a result NaN is quiet (a result of arithmetic), which
   vcvtps2ph narrows as half.h does; a group whose operands hold a NaN (possibly signalling,
   which the hardware widening would quiet, or two NaNs, whose payloads the compiled float32 op
   may pick in another operand order) ends the run here, and the buffered path does the rest
   of the block.  Returns how many of the n elements were done (a multiple of 8). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BIN_F16C 1

__attribute__((target("avx2,f16c"))) static inline __m256 bin_load8(const char *base,
                                                                    npuK_dtype dt, int64_t off,
                                                                    int64_t st, int *nan) {
  __m256 v;
  if (dt == NPUK_F32) {
    const float *f = (const float *)base + off;
    v = st ? _mm256_loadu_ps(f) : _mm256_set1_ps(*f);
  } else {
    const uint16_t *h = (const uint16_t *)base + off;
    v = _mm256_cvtph_ps(st ? _mm_loadu_si128((const __m128i *)h) : _mm_set1_epi16((short)*h));
  }
  *nan |= _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return v;
}

/* Lanes of 16 float16 values holding a NaN: |h| > inf as signed 16-bit compares. */
__attribute__((target("avx2,f16c"))) static inline __m256i bin_f16_nan(__m256i h) {
  return _mm256_cmpgt_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)),
                            _mm256_set1_epi16(0x7c00));
}

/* Both operands float16 and dense, 16 lanes an iteration, the NaN test on the stored bits: the
   residual adds' case, about 1.5 instructions an element (the 8-lane loop below takes ~5). */
#define BIN_F16_DENSE(OP)                                                                      \
  for (; i + 16 <= n; i += 16) {                                                               \
    __m256i ha = _mm256_loadu_si256((const __m256i *)(ah + i));                                \
    __m256i hb = _mm256_loadu_si256((const __m256i *)(bh + i));                                \
    __m256i nan = _mm256_or_si256(bin_f16_nan(ha), bin_f16_nan(hb));                           \
    if (!_mm256_testz_si256(nan, nan)) break;                                                  \
    __m256 r0 = OP(_mm256_cvtph_ps(_mm256_castsi256_si128(ha)),                                \
                   _mm256_cvtph_ps(_mm256_castsi256_si128(hb)));                               \
    __m256 r1 = OP(_mm256_cvtph_ps(_mm256_extracti128_si256(ha, 1)),                           \
                   _mm256_cvtph_ps(_mm256_extracti128_si256(hb, 1)));                          \
    _mm256_storeu_si256((__m256i *)(o + i),                                                    \
                        _mm256_set_m128i(_mm256_cvtps_ph(r1, _MM_FROUND_TO_NEAREST_INT),       \
                                         _mm256_cvtps_ph(r0, _MM_FROUND_TO_NEAREST_INT)));     \
  }

__attribute__((target("avx2,f16c"))) static int64_t bin_f16_regs(const bin_mixed_job *m,
                                                                  npuK_binop op, int64_t oa,
                                                                  int64_t sa, int64_t ob,
                                                                  int64_t sb, uint16_t *o,
                                                                  int64_t n) {
  int64_t i = 0;
  if (m->dt[0] == NPUK_F16 && m->dt[1] == NPUK_F16 && sa == 1 && sb == 1) {
    const uint16_t *ah = (const uint16_t *)m->b.a + oa, *bh = (const uint16_t *)m->b.b + ob;
    switch (op) {
    case NPUK_BIN_ADD: BIN_F16_DENSE(_mm256_add_ps) break;
    case NPUK_BIN_SUB: BIN_F16_DENSE(_mm256_sub_ps) break;
    case NPUK_BIN_MUL: BIN_F16_DENSE(_mm256_mul_ps) break;
    default: BIN_F16_DENSE(_mm256_div_ps) break;
    }
  }
  for (; i + 8 <= n; i += 8) {
    int nan = 0;
    __m256 a = bin_load8(m->b.a, m->dt[0], oa + i * sa, sa, &nan);
    __m256 b = bin_load8(m->b.b, m->dt[1], ob + i * sb, sb, &nan);
    if (nan) break;
    __m256 r = op == NPUK_BIN_ADD   ? _mm256_add_ps(a, b)
               : op == NPUK_BIN_SUB ? _mm256_sub_ps(a, b)
               : op == NPUK_BIN_MUL ? _mm256_mul_ps(a, b)
                                    : _mm256_div_ps(a, b);
    _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#else
#define BIN_F16C 0
#endif

static void bin_mixed_range(void *arg, int64_t begin, int64_t end) {
  const bin_mixed_job *m = arg;
  const bin_job *j = &m->b;
  float abuf[BIN_BLOCK], bbuf[BIN_BLOCK], obuf[BIN_BLOCK];
  int64_t coord[K_GEOM_MAX_DIMS], off[K_MAX_OPS];
  int last = j->g.ndim - 1;
  size_t os = npuK_dtype_size(m->dt[2]);
  k_geom_seek(&j->g, begin, coord, off);
  for (int64_t i = begin; i < end;) {
    int64_t run = k_geom_run(&j->g, coord, end - i), sa = j->g.s[0][last], sb = j->g.s[1][last];
    int64_t done = 0;
#if BIN_F16C
    if (m->regs && (sa == 0 || sa == 1) && (sb == 0 || sb == 1))
      done = bin_f16_regs(m, m->op, off[0], sa, off[1], sb, (uint16_t *)j->o + i, run);
#endif
    for (; done < run; done += BIN_BLOCK) {
      int64_t n = run - done < BIN_BLOCK ? run - done : BIN_BLOCK, sa2, sb2;
      const float *a = bin_widen(j->a, m->dt[0], off[0] + done * sa, sa, n, abuf, &sa2);
      const float *b = bin_widen(j->b, m->dt[1], off[1] + done * sb, sb, n, bbuf, &sb2);
      char *o = j->o + (i + done) * (int64_t)os;
      j->run(a, sa2, b, sb2, m->dt[2] == NPUK_F32 ? (void *)o : obuf, n);
      if (m->dt[2] != NPUK_F32) npuK_cast(NULL, n, NPUK_F32, obuf, m->dt[2], o);
    }
    i += run;
    k_geom_advance(&j->g, coord, off, run);
  }
}

static int f32_or_half(npuK_dtype t) { return t == NPUK_F32 || t == NPUK_F16 || t == NPUK_BF16; }

int npuK_binary_mixed(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                      const void *a, npuK_dtype a_dtype, const int64_t *a_strides, const void *b,
                      npuK_dtype b_dtype, const int64_t *b_strides, void *out,
                      npuK_dtype out_dtype) {
  if ((unsigned)op >= NPUK_BIN_COUNT || !f32_or_half(a_dtype) || !f32_or_half(b_dtype) ||
      !f32_or_half(out_dtype))
    return -1;
  bin_mixed_job m = {.dt = {a_dtype, b_dtype, out_dtype}, .op = op};
  m.regs = out_dtype == NPUK_F16 && a_dtype != NPUK_BF16 && b_dtype != NPUK_BF16 &&
           (op == NPUK_BIN_ADD || op == NPUK_BIN_SUB || op == NPUK_BIN_MUL ||
            op == NPUK_BIN_DIV) &&
           npuK_f16c();
  const int64_t *strides[2] = {a_strides, b_strides};
  int64_t total = k_geom_init(&m.b.g, ndim, dims, 2, strides);
  m.b.run = bin_f32[op];
  m.b.a = a;
  m.b.b = b;
  m.b.o = out;
  npuK_parallel_for(pool, total, K_GRAIN_ELEMS, bin_mixed_range, &m);
  return 0;
}
