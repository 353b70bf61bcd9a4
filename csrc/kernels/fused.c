/* fused.c: what the fusion passes' steps run (kernels.h, "fused steps"): the epilogue a fused
 * GEMM or convolution applies to a block of its output, and elementwise chains run as one
 * program over blocks.
 *
 * Each op computes exactly the expression of the kernel that runs it unfused (unary.c,
 * binary.c, kmath.h's leaky_relu), so a fused step has the bits of the ops it replaces; fusion
 * only changes when each element is touched.  The common ops (add, sub, mul, div, maximum,
 * minimum, squared_difference; neg, relu, relu6, square, abs, leaky_relu, prelu) run here in loops
 * the compiler vectorises at -O2 (fixed 8-lane bodies through a local array: the loads come
 * before the stores, so a block may be updated in place); the others call their kernel
 * serially on the block.  relu and relu6 are written as `x <= 0 ? 0 : x` and
 * `min(max(x, 0), 6)` in the form that keeps NaN and gives +0 for -0 exactly as unary.c's
 * branches do, without the branches (on random signs those cost ~20x a memory pass).
 * Blocks have sizes fixed by the shapes and are split over the pool whole: results never
 * depend on threads.
 */
#include <math.h>
#include <string.h>

#include "kernels/kfast.h"
#include "kernels/kmath.h"
#include "kernels/kutil.h"

/* ---- vectorisable loops over one block ---- */

#define LANES 8
/* y[k] = EXPR for k < n, LANES at a time (reads before writes: y may alias the inputs). */
#define EW_LOOP(n, EXPR)                                                                         \
  do {                                                                                           \
    int64_t i_ = 0;                                                                              \
    for (; i_ + LANES <= (n); i_ += LANES) {                                                     \
      float r_[LANES];                                                                           \
      for (int j_ = 0; j_ < LANES; j_++) {                                                       \
        int64_t k = i_ + j_;                                                                     \
        r_[j_] = (EXPR);                                                                         \
      }                                                                                          \
      for (int j_ = 0; j_ < LANES; j_++) y[i_ + j_] = r_[j_];                                    \
    }                                                                                            \
    for (; i_ < (n); i_++) {                                                                     \
      int64_t k = i_;                                                                            \
      y[k] = (EXPR);                                                                             \
    }                                                                                            \
  } while (0)

/* The scalar semantics of binary.c and unary.c (see kernels.h). */
static inline float f_add(float a, float b) { return a + b; }
static inline float f_sub(float a, float b) { return a - b; }
static inline float f_mul(float a, float b) { return a * b; }
static inline float f_div(float a, float b) { return a / b; }
static inline float f_max(float a, float b) { return (a > b || a != a) ? a : b; }
static inline float f_min(float a, float b) { return (a < b || a != a) ? a : b; }
static inline float f_sqd(float a, float b) { float d = a - b; return d * d; }
static inline float f_relu(float x) { return x <= 0 ? 0.0f : x; }
static inline float f_relu6(float x) { float r = x < 0 ? 0.0f : x; return r > 6 ? 6.0f : r; }

/* y = v OP o (o OP v when swap), v dense, o dense or one element; 0, or -1 when op has no
   loop here. */
#define BIN_CASES(F)                                                                             \
  do {                                                                                           \
    if (!o_scalar && !swap) EW_LOOP(n, F(v[k], o[k]));                                          \
    else if (!o_scalar) EW_LOOP(n, F(o[k], v[k]));                                              \
    else if (!swap) EW_LOOP(n, F(v[k], o0));                                                    \
    else EW_LOOP(n, F(o0, v[k]));                                                               \
  } while (0)

static int bin_fast(npuK_binop op, int64_t n, const float *v, const float *o, int o_scalar,
                    int swap, float *y) {
  float o0 = o_scalar ? o[0] : 0;
  switch (op) {
  case NPUK_BIN_ADD: BIN_CASES(f_add); return 0;
  case NPUK_BIN_SUB: BIN_CASES(f_sub); return 0;
  case NPUK_BIN_MUL: BIN_CASES(f_mul); return 0;
  case NPUK_BIN_DIV: BIN_CASES(f_div); return 0;
  case NPUK_BIN_MAXIMUM: BIN_CASES(f_max); return 0;
  case NPUK_BIN_MINIMUM: BIN_CASES(f_min); return 0;
  case NPUK_BIN_SQUARED_DIFFERENCE: BIN_CASES(f_sqd); return 0;
  default: return -1;
  }
}

/* The same loops with a dense float16 operand read as stored (CPUs with F16C, cast.c's
   npuK_f16c): 8 halves widened in registers per 8 lanes instead of a pass over the block into
   a buffer and another reading it back.  The hardware widening is exact, so the op sees the
   float32 values widening first gives.  A group of 8 whose operand holds a NaN, and the last
   n % 8 elements, are widened by half.h (the hardware would quiet a signalling NaN) and run
   through bin_fast itself: where both inputs are NaN, which payload an op returns is up to the
   compiler's operand order, so those lanes take the very instructions the buffered path takes.
   Elsewhere at most the value is a NaN, which every op returns (quieted) whatever the order. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include "core/half.h"
#define EW_F16C 1
#define EWH_LOOP(EXPR)                                                                           \
  do {                                                                                           \
    for (; i + LANES <= n; i += LANES) {                                                         \
      float r_[LANES], w_[LANES];                                                                \
      __m128i h_ = _mm_loadu_si128((const __m128i *)(o + i));                                    \
      if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h_, _mm_set1_epi16(0x7fff)),          \
                                            _mm_set1_epi16(0x7c00)))) {                          \
        for (int j_ = 0; j_ < LANES; j_++) w_[j_] = npu_f16_to_f32(o[i + j_]);                   \
        bin_fast(op, LANES, v + i, w_, 0, swap, y + i);                                          \
        continue;                                                                                \
      }                                                                                          \
      _mm256_storeu_ps(w_, _mm256_cvtph_ps(h_));                                                 \
      for (int j_ = 0; j_ < LANES; j_++) {                                                       \
        float a = v[i + j_], ow = w_[j_];                                                        \
        r_[j_] = (EXPR);                                                                         \
      }                                                                                          \
      for (int j_ = 0; j_ < LANES; j_++) y[i + j_] = r_[j_];                                     \
    }                                                                                            \
  } while (0)

#define BIN_CASES_H(F)                                                                           \
  do {                                                                                           \
    if (!swap) EWH_LOOP(F(a, ow));                                                               \
    else EWH_LOOP(F(ow, a));                                                                     \
  } while (0)

/* y = v OP o (o OP v when swap), o n dense float16 values; 0, or -1 when op has no loop here. */
__attribute__((target("avx2,f16c"))) static int bin_fast_f16(npuK_binop op, int64_t n,
                                                             const float *v, const uint16_t *o,
                                                             int swap, float *y) {
  int64_t i = 0;
  switch (op) {
  case NPUK_BIN_ADD: BIN_CASES_H(f_add); break;
  case NPUK_BIN_SUB: BIN_CASES_H(f_sub); break;
  case NPUK_BIN_MUL: BIN_CASES_H(f_mul); break;
  case NPUK_BIN_DIV: BIN_CASES_H(f_div); break;
  case NPUK_BIN_MAXIMUM: BIN_CASES_H(f_max); break;
  case NPUK_BIN_MINIMUM: BIN_CASES_H(f_min); break;
  case NPUK_BIN_SQUARED_DIFFERENCE: BIN_CASES_H(f_sqd); break;
  default: return -1;
  }
  if (i < n) { /* the tail, as bin_fast runs it */
    float w[LANES];
    for (int64_t k = i; k < n; k++) w[k - i] = npu_f16_to_f32(o[k]);
    bin_fast(op, n - i, v + i, w, 0, swap, y + i);
  }
  return 0;
}
#else
#define EW_F16C 0
#endif

/* y = op(x); 0, or -1 when op has no loop here. */
static int un_fast(npuK_unop op, int64_t n, const float *x, float *y) {
  switch (op) {
  case NPUK_UN_NEG: EW_LOOP(n, -x[k]); return 0;
  case NPUK_UN_RELU: EW_LOOP(n, f_relu(x[k])); return 0;
  case NPUK_UN_RELU6: EW_LOOP(n, f_relu6(x[k])); return 0;
  case NPUK_UN_SQUARE: EW_LOOP(n, x[k] * x[k]); return 0;
  case NPUK_UN_ABS: EW_LOOP(n, fabsf(x[k])); return 0;
  default: return -1;
  }
}

static void unary_block(npuK_unop op, int64_t n, const float *x, float *y) {
  if (un_fast(op, n, x, y)) npuK_unary_f32(NULL, op, n, x, y);
}

/* leaky_relu and prelu as kmath.h computes them; prelu's slope dense or one element */
/* x > 0 ? x : a * x as a select of bits: the compiler keeps the ?: form (whose product may
   trap) scalar and branchy, this one it vectorises; same value, NaN and -0 included. */
static inline float f_leaky(float x, float a) {
  float p = a * x, r;
  uint32_t xi, pi, keep_x = (uint32_t)0 - (uint32_t)(x > 0), ri;
  memcpy(&xi, &x, sizeof xi);
  memcpy(&pi, &p, sizeof pi);
  ri = (xi & keep_x) | (pi & ~keep_x);
  memcpy(&r, &ri, sizeof r);
  return r;
}

static void leaky_block(float alpha, int64_t n, const float *x, float *y) {
  EW_LOOP(n, f_leaky(x[k], alpha));
}

static void prelu_block(int64_t n, const float *x, const float *slope, int slope_scalar, float *y) {
  if (slope_scalar) {
    float a = slope[0];
    EW_LOOP(n, f_leaky(x[k], a));
  } else {
    EW_LOOP(n, f_leaky(x[k], slope[k]));
  }
}

/* y (rows, cols, row stride ld) += bias, then the activation, in place. */
void npuK_epilogue_f32(const npuK_epilogue *e, int64_t rows, int64_t cols, int64_t ld, float *y) {
  static const int8_t unop_of[NPUK_ACT_COUNT] = {
      [NPUK_ACT_NONE] = -1,       [NPUK_ACT_RELU] = NPUK_UN_RELU,
      [NPUK_ACT_RELU6] = NPUK_UN_RELU6, [NPUK_ACT_LEAKY_RELU] = -1,
      [NPUK_ACT_SIGMOID] = NPUK_UN_SIGMOID, [NPUK_ACT_TANH] = NPUK_UN_TANH,
      [NPUK_ACT_PRELU] = -1};
  if (rows <= 0 || cols <= 0) return;
  /* a dense block is one run for the activation; a column slab of a GEMM is one per row */
  int64_t runs = ld == cols ? 1 : rows, run_len = ld == cols ? rows * cols : cols;
  if (e->bias)
    for (int64_t r = 0; r < rows; r++) bin_fast(NPUK_BIN_ADD, cols, y + r * ld, e->bias, 0, 0, y + r * ld);
  if (e->act == NPUK_ACT_PRELU) { /* one slope per column: row by row */
    for (int64_t r = 0; r < rows; r++) prelu_block(cols, y + r * ld, e->slope, 0, y + r * ld);
    return;
  }
  for (int64_t r = 0; r < runs && e->act != NPUK_ACT_NONE; r++) {
    float *run = y + r * ld;
    npuK_unop op = (npuK_unop)unop_of[e->act];
    if (e->act == NPUK_ACT_LEAKY_RELU) leaky_block(e->alpha, run_len, run, run);
    else if (!e->fast || npuK_unary_f32_fast(NULL, op, run_len, run, run) != 0)
      unary_block(op, run_len, run, run);
  }
}

void npuK_matmul_f32_ref_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                            int64_t n, int64_t k, const float *a, const float *b,
                            const npuK_epilogue *ep, float *c) {
  npuK_matmul_f32_ref(pool, trans_a, trans_b, m, n, k, a, b, c);
  if (ep) npuK_epilogue_f32(ep, m, n, n, c);
}

/* ---- elementwise programs ----------------------------------------------------------------- */

typedef struct ew_job {
  int n_instr;
  const npuK_ew_instr *prog;
  int64_t rows, cols;
  int64_t rows_per_block; /* rows of one block when a row fits in a block, else 1 */
  int64_t col_blocks;     /* blocks per row when it does not, else 1 */
  const void *const *operands;
  const npuK_dtype *dtypes; /* by operand, NULL when all are float32 */
  void *y;
  npuK_dtype y_dtype;
  int reference;
  int f16c; /* float16 operands of the common binary ops read as stored (bin_fast_f16) */
  int regs;    /* the whole program runs in registers (ewr_run) */
  int has_row; /* it reads a ROW operand */
} ew_job;

/* Operand k's elements [at, at + n) as float32: in place when it is float32, else widened
   into buf (npuK_cast's conversion, as exec.c's whole-tensor widening uses). */
static const float *ew_operand(const ew_job *j, int k, int64_t at, int64_t n, float *buf) {
  npuK_dtype dt = j->dtypes ? j->dtypes[k] : NPUK_F32;
  if (dt == NPUK_F32) return (const float *)j->operands[k] + at;
  npuK_cast(NULL, n, dt, (const char *)j->operands[k] + at * (int64_t)npuK_dtype_size(dt),
            NPUK_F32, buf);
  return buf;
}

/* Runs the program over elements [e0, e0 + nr * nc) of y: nr rows of nc columns starting at
   column c0 (nr > 1 only with whole rows, so the range is contiguous). */
static void ew_block(const ew_job *j, int64_t e0, int64_t nr, int64_t c0, int64_t nc) {
  int64_t n = nr * nc;
  /* Reduced operands are widened a block at a time into these (a block holds at most
     NPUK_EW_BLOCK elements, see npuK_eltwise_f32) and a reduced output is computed in ybuf,
     then narrowed: the same float32 values as widening whole tensors first, without the
     whole-tensor copies.  Three buffers: the loaded value, an operand and the result. */
  float load_buf[NPUK_EW_BLOCK], op_buf[NPUK_EW_BLOCK], ybuf[NPUK_EW_BLOCK];
  float *y = j->y_dtype == NPUK_F32 ? (float *)j->y + e0 : ybuf;
  const float *v = y; /* where the running value is: an operand until the first op writes y */
  for (int i = 0; i < j->n_instr; i++) {
    const npuK_ew_instr *in = &j->prog[i];
    int k = in->operand < 0 ? 0 : in->operand;
    const float *o = NULL;
#if EW_F16C
    if (j->f16c && in->kind == NPUK_EW_BINARY && in->bcast == NPUK_EW_FULL &&
        j->dtypes[k] == NPUK_F16) {
      const uint16_t *oh = (const uint16_t *)j->operands[k] + e0;
      if (bin_fast_f16((npuK_binop)in->op, n, v, oh, in->swap, y) == 0) {
        v = y;
        continue;
      }
    }
#endif
    if (in->kind == NPUK_EW_BINARY || in->kind == NPUK_EW_PRELU) {
      /* the part of the operand this block reads, as it broadcasts (o points at it) */
      int64_t at = in->bcast == NPUK_EW_FULL ? e0 : in->bcast == NPUK_EW_ROW ? c0 : 0;
      int64_t cnt = in->bcast == NPUK_EW_FULL ? n : in->bcast == NPUK_EW_ROW ? nc : 1;
      o = ew_operand(j, k, at, cnt, op_buf);
    }
    switch ((npuK_ew_kind)in->kind) {
    case NPUK_EW_LOAD: v = ew_operand(j, k, e0, n, load_buf); continue;
    case NPUK_EW_UNARY:
      if (j->reference) npuK_unary_f32(NULL, (npuK_unop)in->op, n, v, y);
      else unary_block((npuK_unop)in->op, n, v, y);
      break;
    case NPUK_EW_UNARY_FAST:
      if (j->reference) npuK_unary_f32(NULL, (npuK_unop)in->op, n, v, y);
      else if (npuK_unary_f32_fast(NULL, (npuK_unop)in->op, n, v, y) != 0)
        unary_block((npuK_unop)in->op, n, v, y); /* no fast twin: never made so by fusion.c */
      break;
    case NPUK_EW_LEAKY_RELU:
      if (j->reference) npuK_leaky_relu_f32(NULL, n, in->alpha, v, y);
      else leaky_block(in->alpha, n, v, y);
      break;
    case NPUK_EW_PRELU: /* the slope as it broadcasts; rows of a block one at a time for ROW */
      if (j->reference) {
        int64_t dims[2] = {nr, nc}, so[2] = {in->bcast == NPUK_EW_FULL ? nc : 0,
                                             in->bcast == NPUK_EW_SCALAR ? 0 : 1};
        npuK_prelu_f32(NULL, 2, dims, v, o, so, y);
      } else if (in->bcast == NPUK_EW_ROW) {
        for (int64_t r = 0; r < nr; r++) prelu_block(nc, v + r * nc, o, 0, y + r * nc);
      } else {
        prelu_block(n, v, o, in->bcast == NPUK_EW_SCALAR, y);
      }
      break;
    case NPUK_EW_BINARY: {
      npuK_binop op = (npuK_binop)in->op;
      int fast = -1;
      if (!j->reference && in->bcast != NPUK_EW_ROW) {
        fast = bin_fast(op, n, v, o, in->bcast == NPUK_EW_SCALAR, in->swap, y);
      } else if (!j->reference) { /* one row of the block at a time against the vector */
        fast = 0;
        for (int64_t r = 0; r < nr && !fast; r++)
          fast = bin_fast(op, nc, v + r * nc, o, 0, in->swap, y + r * nc);
      }
      if (fast) { /* the binary kernel: the value dense (nr, nc), the operand as it broadcasts */
        int64_t dims[2] = {nr, nc}, sv[2] = {nc, 1}, so[2] = {nc, 1};
        if (in->bcast == NPUK_EW_ROW) so[0] = 0;
        else if (in->bcast == NPUK_EW_SCALAR) so[0] = so[1] = 0;
        const float *a = in->swap ? o : v, *b = in->swap ? v : o;
        const int64_t *sa = in->swap ? so : sv, *sb = in->swap ? sv : so;
        (j->reference ? npuK_binary_f32_ref : npuK_binary_f32)(NULL, op, 2, dims, a, sa, b, sb, y);
      }
      break;
    }
    }
    v = y;
  }
  if (v != y) memcpy(y, v, (size_t)n * sizeof *y); /* a program of a LOAD alone */
  if (y == ybuf)
    npuK_cast(NULL, n, NPUK_F32, ybuf, j->y_dtype,
              (char *)j->y + e0 * (int64_t)npuK_dtype_size(j->y_dtype));
}

/* ---- float16 programs in registers ----
   A program whose every instruction is one of the common ops (the binary ones of bin_fast, neg,
   relu, relu6, square, abs, leaky_relu, prelu) on float32 or float16 operands, in a plan that
   stores something in float16, runs 64 lanes (8 vectors) at a time in AVX registers: each operand
   widened by F16C as it is loaded, the ops applied, the result narrowed as it is stored.  No
   buffer is written and read back, so a float16 step moves 2 bytes an element where float32 moves
   4, with about the float32 program's instruction count.  Same bits as ew_block: each op is the
   float32 operation bin_fast / un_fast computes, written with the same selects (f_max's `a > b ||
   a != a`, relu's `x <= 0`, ...), so a NaN the program makes (inf - inf) gives what the scalar
   forms give, and narrowing a quiet NaN in hardware keeps what half.h keeps.  A NaN loaded from
   an operand could be signalling, which the hardware would quiet where half.h keeps it, and which
   payload a two-NaN op returns is the compiler's choice in ew_block: a group of lanes that loaded
   one is discarded and run again through ew_block itself, as are the last (< 8) elements of a
   run. */
#if EW_F16C
enum { EWR_V = 8 }; /* vectors a group holds: 64 lanes per instruction dispatched */

static int ewr_unop_ok(int op) {
  return op == NPUK_UN_NEG || op == NPUK_UN_RELU || op == NPUK_UN_RELU6 ||
         op == NPUK_UN_SQUARE || op == NPUK_UN_ABS;
}

/* Whether the job's program can run in registers (its operands float32 or float16, at least
   one of them or y float16, ops the loop below has, no scalar operand that is a NaN). */
static int ewr_eligible(const ew_job *j) {
  int half = j->y_dtype == NPUK_F16;
  if (!j->f16c || j->reference || !j->dtypes || j->n_instr < 1) return 0;
  if (j->prog[0].kind != NPUK_EW_LOAD || (j->y_dtype != NPUK_F32 && !half)) return 0;
  for (int i = 0; i < j->n_instr; i++) {
    const npuK_ew_instr *in = &j->prog[i];
    switch ((npuK_ew_kind)in->kind) {
    case NPUK_EW_UNARY:
      if (!ewr_unop_ok(in->op)) return 0;
      continue;
    case NPUK_EW_LEAKY_RELU: continue;
    case NPUK_EW_BINARY:
      if (in->op > NPUK_BIN_MINIMUM && in->op != NPUK_BIN_SQUARED_DIFFERENCE) return 0;
      break;
    case NPUK_EW_LOAD:
      if (in->bcast != NPUK_EW_FULL) return 0;
      break;
    case NPUK_EW_PRELU: break;
    default: return 0;
    }
    npuK_dtype dt = j->dtypes[in->operand];
    if (dt != NPUK_F32 && dt != NPUK_F16) return 0;
    half |= dt == NPUK_F16;
    if (in->bcast == NPUK_EW_SCALAR) {
      float v = dt == NPUK_F16 ? npu_f16_to_f32(*(const uint16_t *)j->operands[in->operand])
                               : *(const float *)j->operands[in->operand];
      if (v != v) return 0;
    }
  }
  return half;
}

/* v[q] = EXPR(a, b) for the group's vectors, a the running value, b the operand (swapped
   when the instruction says so); one loop per op, so the dispatch is per instruction. */
#define EWR_EACH(EXPR)                                                                           \
  do {                                                                                           \
    if (in->swap) {                                                                              \
      _Pragma("GCC unroll 8") for (int q = 0; q < nv; q++) {                                     \
        __m256 a = o[q], b = v[q];                                                               \
        v[q] = (EXPR);                                                                           \
      }                                                                                          \
    } else {                                                                                     \
      _Pragma("GCC unroll 8") for (int q = 0; q < nv; q++) {                                     \
        __m256 a = v[q], b = o[q];                                                               \
        v[q] = (EXPR);                                                                           \
      }                                                                                          \
    }                                                                                            \
  } while (0)
#define EWR_UN(EXPR)                                                                             \
  do {                                                                                           \
    _Pragma("GCC unroll 8") for (int q = 0; q < nv; q++) {                                       \
      __m256 x = v[q];                                                                           \
      v[q] = (EXPR);                                                                             \
    }                                                                                            \
  } while (0)
/* (a > b || a != a) ? a : b, and the minimum's twin */
#define EWR_MAX(a, b) _mm256_blendv_ps(b, a, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ),       \
                                                          _mm256_cmp_ps(a, a, _CMP_UNORD_Q)))
#define EWR_MIN(a, b) _mm256_blendv_ps(b, a, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ),       \
                                                          _mm256_cmp_ps(a, a, _CMP_UNORD_Q)))

/* nv vectors of 8 lanes: elements [e, e + 8 nv) of y, whose first column is c (ROW operands
   are read from there, wrapping at cols).  0, or -1 when a loaded value was a NaN (nothing
   written). */
__attribute__((target("avx2,f16c"))) static inline __attribute__((always_inline)) int
ewr_group(const ew_job *j, int64_t e, int64_t c, const int nv, const int rows) {
  __m256 v[EWR_V], bad = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int q = 0; q < EWR_V; q++) v[q] = bad; /* prog[0], a LOAD, sets them */
  for (int i = 0; i < j->n_instr; i++) {
    const npuK_ew_instr *in = &j->prog[i];
    const __m256 zero = _mm256_setzero_ps(), six = _mm256_set1_ps(6.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    if (in->kind == NPUK_EW_LEAKY_RELU) { /* x > 0 ? x : alpha * x */
      const __m256 alpha = _mm256_set1_ps(in->alpha);
      EWR_UN(_mm256_blendv_ps(_mm256_mul_ps(alpha, x), x, _mm256_cmp_ps(x, zero, _CMP_GT_OQ)));
      continue;
    }
    if (in->kind == NPUK_EW_UNARY) {
      switch (in->op) {
      case NPUK_UN_NEG: EWR_UN(_mm256_xor_ps(x, sign)); break;
      case NPUK_UN_RELU:
        EWR_UN(_mm256_blendv_ps(x, zero, _mm256_cmp_ps(x, zero, _CMP_LE_OQ)));
        break;
      case NPUK_UN_RELU6: /* r = x < 0 ? 0 : x; r > 6 ? 6 : r */
        EWR_UN(_mm256_blendv_ps(x, zero, _mm256_cmp_ps(x, zero, _CMP_LT_OQ)));
        EWR_UN(_mm256_blendv_ps(x, six, _mm256_cmp_ps(x, six, _CMP_GT_OQ)));
        break;
      case NPUK_UN_SQUARE: EWR_UN(_mm256_mul_ps(x, x)); break;
      default: EWR_UN(_mm256_andnot_ps(sign, x)); break; /* abs */
      }
      continue;
    }
    __m256 o[EWR_V];
    if (in->bcast == NPUK_EW_SCALAR) {
      o[0] = _mm256_set1_ps(j->dtypes[in->operand] == NPUK_F16
                                ? npu_f16_to_f32(*(const uint16_t *)j->operands[in->operand])
                                : *(const float *)j->operands[in->operand]);
      for (int q = 1; q < nv; q++) o[q] = o[0];
    } else {
      /* vector q's first element: e + 8q in a FULL operand; in a ROW one its column, which
         restarts at 0 every cols elements (cols is a multiple of 8: a vector never crosses) */
      const int f16 = j->dtypes[in->operand] == NPUK_F16;
      const uint16_t *h = j->operands[in->operand];
      const float *f = j->operands[in->operand];
      if (rows && in->bcast == NPUK_EW_ROW) {
        int64_t col = c;
#pragma GCC unroll 8
        for (int q = 0; q < nv; q++, col += 8) {
          if (col >= j->cols) col -= j->cols;
          o[q] = f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + col)))
                     : _mm256_loadu_ps(f + col);
        }
      } else if (f16) {
#pragma GCC unroll 8
        for (int q = 0; q < nv; q++)
          o[q] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + e + 8 * q)));
      } else {
#pragma GCC unroll 8
        for (int q = 0; q < nv; q++) o[q] = _mm256_loadu_ps(f + e + 8 * q);
      }
#pragma GCC unroll 8
      for (int q = 0; q < nv; q++) bad = _mm256_or_ps(bad, _mm256_cmp_ps(o[q], o[q], _CMP_UNORD_Q));
    }
    if (in->kind == NPUK_EW_LOAD) {
#pragma GCC unroll 8
      for (int q = 0; q < nv; q++) v[q] = o[q];
      continue;
    }
    if (in->kind == NPUK_EW_PRELU) { /* x > 0 ? x : slope * x, f_leaky's form */
#pragma GCC unroll 8
      for (int q = 0; q < nv; q++)
        v[q] = _mm256_blendv_ps(_mm256_mul_ps(o[q], v[q]), v[q],
                                _mm256_cmp_ps(v[q], zero, _CMP_GT_OQ));
      continue;
    }
    switch (in->op) {
    case NPUK_BIN_ADD: EWR_EACH(_mm256_add_ps(a, b)); break;
    case NPUK_BIN_SUB: EWR_EACH(_mm256_sub_ps(a, b)); break;
    case NPUK_BIN_MUL: EWR_EACH(_mm256_mul_ps(a, b)); break;
    case NPUK_BIN_DIV: EWR_EACH(_mm256_div_ps(a, b)); break;
    case NPUK_BIN_MAXIMUM: EWR_EACH(EWR_MAX(a, b)); break;
    case NPUK_BIN_MINIMUM: EWR_EACH(EWR_MIN(a, b)); break;
    default: EWR_EACH(_mm256_mul_ps(_mm256_sub_ps(a, b), _mm256_sub_ps(a, b))); break;
    }
  }
  if (_mm256_movemask_ps(bad)) return -1;
  if (j->y_dtype == NPUK_F16) {
    uint16_t *y = (uint16_t *)j->y + e;
#pragma GCC unroll 8
    for (int q = 0; q < nv; q++)
      _mm_storeu_si128((__m128i *)(y + 8 * q), _mm256_cvtps_ph(v[q], _MM_FROUND_TO_NEAREST_INT));
  } else {
#pragma GCC unroll 8
    for (int q = 0; q < nv; q++) _mm256_storeu_ps((float *)j->y + e + 8 * q, v[q]);
  }
  return 0;
}

/* Elements [e, e + n) of y, columns from c on (within one row when the program reads a ROW
   operand, else any contiguous run). */
/* Elements [e, e + n) of y through ew_block, one row's part at a time (c: e's column). */
static void ewr_buffered(const ew_job *j, int64_t e, int64_t c, int64_t n) {
  while (n > 0) {
    int64_t len = j->cols - c < n ? j->cols - c : n;
    ew_block(j, e, 1, c, len);
    e += len, n -= len, c = 0;
  }
}

/* Elements [e, e + n) of y, e in column c (runs may cross rows: ROW operands wrap); rows: the
   program reads a ROW operand (a constant after inlining: two copies of the loop). */
__attribute__((target("avx2,f16c"))) static inline __attribute__((always_inline)) void
ewr_run_as(const ew_job *j, int64_t e, int64_t c, int64_t n, const int rows) {
  int64_t i = 0;
  for (; i + 8 * EWR_V <= n; i += 8 * EWR_V) {
    if (ewr_group(j, e + i, c, EWR_V, rows))
      ewr_buffered(j, e + i, rows ? c : (e + i) % j->cols, 8 * EWR_V);
    if (rows)
      for (c += 8 * EWR_V; c >= j->cols;) c -= j->cols;
  }
  for (; i + 8 <= n; i += 8) {
    if (ewr_group(j, e + i, c, 1, rows)) ewr_buffered(j, e + i, rows ? c : (e + i) % j->cols, 8);
    if (rows)
      for (c += 8; c >= j->cols;) c -= j->cols;
  }
  if (i < n) ewr_buffered(j, e + i, rows ? c : (e + i) % j->cols, n - i);
}

__attribute__((target("avx2,f16c"))) static void ewr_run(const ew_job *j, int64_t e, int64_t c,
                                                         int64_t n) {
  if (j->has_row) ewr_run_as(j, e, c, n, 1);
  else ewr_run_as(j, e, c, n, 0);
}
#endif

static void ew_range(void *arg, int64_t begin, int64_t end) {
  const ew_job *j = arg;
  for (int64_t blk = begin; blk < end; blk++) {
    int64_t r0, nr, c0, nc;
    if (j->col_blocks == 1) {
      r0 = blk * j->rows_per_block;
      nr = j->rows - r0 < j->rows_per_block ? j->rows - r0 : j->rows_per_block;
      c0 = 0;
      nc = j->cols;
    } else {
      r0 = blk / j->col_blocks;
      nr = 1;
      c0 = (blk % j->col_blocks) * NPUK_EW_BLOCK;
      nc = j->cols - c0 < NPUK_EW_BLOCK ? j->cols - c0 : NPUK_EW_BLOCK;
    }
#if EW_F16C
    if (j->regs) {
      ewr_run(j, r0 * j->cols + c0, c0, nr * nc); /* nr > 1: whole rows, c0 = 0 */
      continue;
    }
#endif
    ew_block(j, r0 * j->cols + c0, nr, c0, nc);
  }
}

static int f32_or_half(npuK_dtype t) { return t == NPUK_F32 || t == NPUK_F16 || t == NPUK_BF16; }

static void ew_drive(const npuK_pool *pool, ew_job *j) {
  if (j->cols <= NPUK_EW_BLOCK) {
    j->rows_per_block = NPUK_EW_BLOCK / j->cols;
    j->col_blocks = 1;
  } else {
    j->rows_per_block = 1;
    j->col_blocks = (j->cols + NPUK_EW_BLOCK - 1) / NPUK_EW_BLOCK;
  }
  int64_t n_blocks = j->col_blocks == 1 ? (j->rows + j->rows_per_block - 1) / j->rows_per_block
                                        : j->rows * j->col_blocks;
  npuK_parallel_for(pool, n_blocks, K_GRAIN_ELEMS / NPUK_EW_BLOCK, ew_range, j);
}

void npuK_eltwise_f32(const npuK_pool *pool, int n_instr, const npuK_ew_instr *prog, int64_t rows,
                      int64_t cols, const float *const *operands, float *y) {
  if (rows <= 0 || cols <= 0) return;
  ew_job j = {.n_instr = n_instr, .prog = prog, .rows = rows, .cols = cols,
              .operands = (const void *const *)operands, .y = y, .y_dtype = NPUK_F32};
  ew_drive(pool, &j);
}

int npuK_eltwise_mixed(const npuK_pool *pool, int n_instr, const npuK_ew_instr *prog,
                       int64_t rows, int64_t cols, const void *const *operands,
                       const npuK_dtype *dtypes, void *y, npuK_dtype y_dtype) {
  for (int i = 0; i < n_instr; i++) {
    int k = prog[i].operand;
    int reads = prog[i].kind == NPUK_EW_LOAD || prog[i].kind == NPUK_EW_BINARY ||
                prog[i].kind == NPUK_EW_PRELU;
    if (reads && k >= 0 && !f32_or_half(dtypes[k])) return -1;
  }
  if (!f32_or_half(y_dtype)) return -1;
  if (rows <= 0 || cols <= 0) return 0;
  ew_job j = {.n_instr = n_instr, .prog = prog, .rows = rows, .cols = cols,
              .operands = operands, .dtypes = dtypes, .y = y, .y_dtype = y_dtype,
              .f16c = npuK_f16c()};
#if EW_F16C
  for (int i = 0; i < n_instr; i++) j.has_row |= prog[i].bcast == NPUK_EW_ROW;
  /* a ROW operand's vectors must not cross a row: rows of a multiple of 8 */
  j.regs = ewr_eligible(&j) && (!j.has_row || cols % 8 == 0);
#endif
  ew_drive(pool, &j);
  return 0;
}

void npuK_eltwise_f32_ref(const npuK_pool *pool, int n_instr, const npuK_ew_instr *prog,
                          int64_t rows, int64_t cols, const float *const *operands, float *y) {
  (void)pool;
  if (rows <= 0 || cols <= 0) return;
  ew_job j = {.n_instr = n_instr, .prog = prog, .rows = rows, .cols = cols,
              .operands = (const void *const *)operands, .y = y, .y_dtype = NPUK_F32,
              .reference = 1};
  ew_block(&j, 0, rows, 0, cols); /* the whole tensor as one block */
}
