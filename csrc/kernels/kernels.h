/* kernels.h: the pure kernel layer (npuK_).
 *
 * A kernel is a pure function: pointers and shapes in, outputs preallocated by the caller. No
 * allocation (conv2d takes caller scratch, sized by npuK_conv2d_f32_scratch_size), no mutable
 * globals, no printing, no exit/abort. The caller validates shapes; kernels trust them, except
 * where a function returns int (nonzero = arguments rejected, nothing written).
 *
 * Conventions for every kernel below:
 *  - Argument order: pool, op selector, geometry, inputs, outputs, scratch.
 *  - All tensors are dense row-major unless strides are passed. Sizes and strides are int64_t and
 *    count ELEMENTS, never bytes.
 *  - pool may be NULL (serial). Work is split only over independent output elements/rows, never
 *    inside a reduction, so every result is bitwise identical whatever the thread count.
 *  - An optimised kernel `npuK_x_<dt>` has a naive twin `npuK_x_<dt>_ref` with the SAME signature
 *    (the ref ignores pool/scratch): the test oracle and the slow host reference path. Where
 *    there is nothing to optimise, one function serves both (marked "single implementation").
 *  - Outputs must not overlap inputs unless a comment says in-place is allowed.
 *  - Shapes with a zero dimension are allowed everywhere and write nothing (or the documented
 *    identity for reductions).
 */
#ifndef NPU_KERNELS_H
#define NPU_KERNELS_H

#include <stdint.h>
#include <stddef.h>

#define NPUK_MAX_DIMS 8

/* dtypes: the numeric values MUST match the public NPU_DTYPE_* enum. */
typedef enum {
  NPUK_F32 = 0, NPUK_F16 = 1, NPUK_BF16 = 2, NPUK_F64 = 3, NPUK_I8 = 4, NPUK_U8 = 5,
  NPUK_I32 = 6, NPUK_I64 = 7, NPUK_BOOL = 8, NPUK_DTYPE_COUNT = 9
} npuK_dtype;

/* Bytes per element (bool is one byte holding 0 or 1; f16/bf16 are uint16_t bit patterns).
   0 for an invalid dtype. */
size_t npuK_dtype_size(npuK_dtype t);

/* Parallel-for supplied by the executor's thread pool. fn(arg, begin, end) processes items
   [begin, end); every item in [0, n_items) is processed exactly once; chunks may run
   concurrently. grain is a hint (minimum items per chunk). */
typedef void (*npuK_range_fn)(void *arg, int64_t begin, int64_t end);
typedef struct npuK_pool {
  void (*parallel_for)(void *self, int64_t n_items, int64_t grain, npuK_range_fn fn, void *arg);
  void *self;
  /* NULL, or nonzero when the run was cancelled or is past a deadline (any thread).  A long
     kernel may poll it between blocks (npuK_stopped) and return early: its outputs are then
     unspecified, and the executor discards them.  Only kernels whose blocks write disjoint
     parts of their outputs, and never read them back, may stop early. */
  int (*stopped)(void *self);
} npuK_pool;

static inline int npuK_stopped(const npuK_pool *pool) {
  return pool && pool->stopped && pool->stopped(pool->self);
}

/* Calls fn(arg, 0, n) directly when pool is NULL (or has no parallel_for) or n <= grain;
   otherwise hands the range to the pool. n <= 0 does nothing. */
void npuK_parallel_for(const npuK_pool *pool, int64_t n, int64_t grain, npuK_range_fn fn,
                       void *arg);

/* ---------------------------------------------------------------- matmul (blas.c, matmul.c)
 * C = op(A) op(B). op(A) is (m, k), op(B) is (k, n), C is (m, n); all row-major, contiguous.
 * A is stored (m, k), or (k, m) when trans_a != 0; B is stored (k, n), or (n, k) when trans_b.
 * k == 0 writes zeros. _blas uses OpenBLAS (its own threads; pool unused) and falls back to the
 * ref loop when a dimension does not fit in int. _ref: i, j, then k ascending, accumulating in
 * the element type. */
void npuK_matmul_f32_blas(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                          int64_t k, const float *a, const float *b, float *c);
void npuK_matmul_f32_ref(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                         int64_t k, const float *a, const float *b, float *c);
void npuK_matmul_f64_blas(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                          int64_t k, const double *a, const double *b, double *c);
void npuK_matmul_f64_ref(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                         int64_t k, const double *a, const double *b, double *c);

/* The ONE place where OpenBLAS's process-wide thread count is set/read. n < 1 is treated as 1. */
void npuK_blas_set_threads(int n);
int npuK_blas_get_threads(void);
/* OpenBLAS's build description (version, target, threading): part of the tuning records'
   fingerprint (compile/tuning.c).  Static storage. */
const char *npuK_blas_config(void);

/* ---------------------------------------------------------------- binary (binary.c)
 * out = a OP b with NumPy broadcasting, computed by the caller as strides:
 *   out is dense (dims[0..ndim)), row-major. a_strides[i] / b_strides[i] are element strides of
 *   each input along output dim i: the input's natural row-major stride, or 0 where the input
 *   is broadcast (its size there is 1, or the dim is missing). ndim == 0 means one element
 *   (strides may then be NULL). Strides must be >= 0.
 * Fast paths: both inputs dense with the output's shape; one input a scalar (all strides 0);
 * otherwise dims are simplified (size-1 dims dropped, mergeable dims coalesced) and walked with
 * a strided inner loop. In-place: out may equal a (or b) only if that input is dense with the
 * output's shape.
 *
 * Semantics:
 *  floats: IEEE; maximum/minimum propagate NaN; floor_div = floor(a / b);
 *          floor_mod = fmod(a, b) moved to b's sign (TF FloorMod); pow = pow().
 *  ints  : add/sub/mul/squared_difference wrap (two's complement, no UB).
 *          div truncates toward zero (like C and TF's Div/TruncateDiv on ints).
 *          floor_div rounds toward -inf; floor_mod has the sign of b.
 *          Division by zero never traps: div, floor_div, floor_mod by 0 give 0 (the ops refuse
 *          a zero divisor before calling the kernel, as TensorFlow does). MIN / -1 gives
 *          MIN (wraps); MIN floor_mod -1 gives 0.
 *          pow: b < 0 gives 1 if a == 1, +-1 if a == -1, else 0 (truncated value); wraps.
 * _ref twins walk every output element with full index arithmetic (no fast path). */
#define NPUK_BINOP_LIST(X) \
  X(ADD, add) X(SUB, sub) X(MUL, mul) X(DIV, div) X(MAXIMUM, maximum) X(MINIMUM, minimum) \
  X(POW, pow) X(SQUARED_DIFFERENCE, squared_difference) X(FLOOR_DIV, floor_div)           \
  X(FLOOR_MOD, floor_mod)
typedef enum {
#define NPUK_X_(E, s) NPUK_BIN_##E,
  NPUK_BINOP_LIST(NPUK_X_)
#undef NPUK_X_
  NPUK_BIN_COUNT
} npuK_binop;

void npuK_binary_f32(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                  const float *a, const int64_t *a_strides, const float *b,
                  const int64_t *b_strides, float *out);
void npuK_binary_f32_ref(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                  const float *a, const int64_t *a_strides, const float *b,
                  const int64_t *b_strides, float *out);
void npuK_binary_f64(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                  const double *a, const int64_t *a_strides, const double *b,
                  const int64_t *b_strides, double *out);
void npuK_binary_f64_ref(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                  const double *a, const int64_t *a_strides, const double *b,
                  const int64_t *b_strides, double *out);
void npuK_binary_i32(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                  const int32_t *a, const int64_t *a_strides, const int32_t *b,
                  const int64_t *b_strides, int32_t *out);
void npuK_binary_i32_ref(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                  const int32_t *a, const int64_t *a_strides, const int32_t *b,
                  const int64_t *b_strides, int32_t *out);
void npuK_binary_i64(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                  const int64_t *a, const int64_t *a_strides, const int64_t *b,
                  const int64_t *b_strides, int64_t *out);
void npuK_binary_i64_ref(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                  const int64_t *a, const int64_t *a_strides, const int64_t *b,
                  const int64_t *b_strides, int64_t *out);
/* npuK_binary_f32 on a, b and out each stored as float32, float16 or bfloat16: each run of
   the output is widened / computed / narrowed a block at a time (npuK_cast's conversions), the
   bits of widening a and b in full first, without the full-size copies.  -1 (nothing
   written) for another dtype or an unknown op. */
int npuK_binary_mixed(const npuK_pool *pool, npuK_binop op, int ndim, const int64_t *dims,
                      const void *a, npuK_dtype a_dtype, const int64_t *a_strides, const void *b,
                      npuK_dtype b_dtype, const int64_t *b_strides, void *out,
                      npuK_dtype out_dtype);

/* Comparisons and logical ops: same broadcasting interface, output is bool (uint8_t 0/1).
 * Floats: IEEE (any comparison with NaN is false except not_equal). Single implementation.
 * npuK_logical_bool: and/or/xor on bool inputs (nonzero = true). */
#define NPUK_CMPOP_LIST(X) \
  X(EQUAL, equal) X(NOT_EQUAL, not_equal) X(LESS, less) X(LESS_EQUAL, less_equal) \
  X(GREATER, greater) X(GREATER_EQUAL, greater_equal)
typedef enum {
#define NPUK_X_(E, s) NPUK_CMP_##E,
  NPUK_CMPOP_LIST(NPUK_X_)
#undef NPUK_X_
  NPUK_CMP_COUNT
} npuK_cmpop;

void npuK_compare_f32(const npuK_pool *pool, npuK_cmpop op, int ndim, const int64_t *dims,
                  const float *a, const int64_t *a_strides, const float *b,
                  const int64_t *b_strides, uint8_t *out);
void npuK_compare_f64(const npuK_pool *pool, npuK_cmpop op, int ndim, const int64_t *dims,
                  const double *a, const int64_t *a_strides, const double *b,
                  const int64_t *b_strides, uint8_t *out);
void npuK_compare_i32(const npuK_pool *pool, npuK_cmpop op, int ndim, const int64_t *dims,
                  const int32_t *a, const int64_t *a_strides, const int32_t *b,
                  const int64_t *b_strides, uint8_t *out);
void npuK_compare_i64(const npuK_pool *pool, npuK_cmpop op, int ndim, const int64_t *dims,
                  const int64_t *a, const int64_t *a_strides, const int64_t *b,
                  const int64_t *b_strides, uint8_t *out);

typedef enum { NPUK_LOGICAL_AND, NPUK_LOGICAL_OR, NPUK_LOGICAL_XOR, NPUK_LOGICAL_COUNT } npuK_logop;
void npuK_logical_bool(const npuK_pool *pool, npuK_logop op, int ndim, const int64_t *dims,
                       const uint8_t *a, const int64_t *a_strides, const uint8_t *b,
                       const int64_t *b_strides, uint8_t *out);

/* ---------------------------------------------------------------- unary (unary.c)
 * y[i] = OP(x[i]) for i < n; x and y dense; in-place (y == x) allowed. Single implementation
 * (parallel over elements). Returns 0, or -1 (nothing written) when the op is not defined for
 * the dtype: integer dtypes support only the ops flagged 1 in the list (neg, relu, relu6,
 * square, abs); integer neg/abs/square wrap (abs(MIN) == MIN).
 * sigmoid is computed as 1/(1+exp(-x)) for x >= 0 and e/(1+e), e = exp(x), for x < 0: no
 * overflow, full accuracy for large |x|. */
#define NPUK_UNOP_LIST(X) /* X(ENUM, name, defined_for_ints) */                         \
  X(NEG, neg, 1) X(RELU, relu, 1) X(RELU6, relu6, 1) X(SIGMOID, sigmoid, 0)              \
  X(TANH, tanh, 0) X(EXP, exp, 0) X(LOG, log, 0) X(SQRT, sqrt, 0) X(SQUARE, square, 1)   \
  X(ABS, abs, 1)
typedef enum {
#define NPUK_X_(E, s, i) NPUK_UN_##E,
  NPUK_UNOP_LIST(NPUK_X_)
#undef NPUK_X_
  NPUK_UN_COUNT
} npuK_unop;

/* 1 when op is implemented for dtype (f32, f64: all; i32, i64: flagged ops), else 0. */
int npuK_unary_supported(npuK_unop op, npuK_dtype dtype);
int npuK_unary_f32(const npuK_pool *pool, npuK_unop op, int64_t n, const float *x, float *y);
int npuK_unary_f64(const npuK_pool *pool, npuK_unop op, int64_t n, const double *x, double *y);
int npuK_unary_i32(const npuK_pool *pool, npuK_unop op, int64_t n, const int32_t *x, int32_t *y);
int npuK_unary_i64(const npuK_pool *pool, npuK_unop op, int64_t n, const int64_t *x, int64_t *y);
/* x and y each float32, float16 or bfloat16 (the precision modes' half-size storage): a block
   at a time widened into float32, computed by f32 (npuK_unary_f32, or a high_performance
   twin), narrowed into y — the bits of widening x in full, f32 and narrowing, without the
   full-size copies.  -1 (nothing written) for another dtype or an unknown op; f32 must
   support op. */
typedef int (*npuK_unary_f32_fn)(const npuK_pool *pool, npuK_unop op, int64_t n, const float *x,
                                 float *y);
int npuK_unary_mixed(const npuK_pool *pool, npuK_unary_f32_fn f32, npuK_unop op, int64_t n,
                     const void *x, npuK_dtype x_dtype, void *y, npuK_dtype y_dtype);

/* ---------------------------------------------------------------- bias_add, softmax (nn.c)
 * bias_add: x is (rows, cols), bias is (cols), y = x + bias broadcast over rows; in-place ok.
 * softmax / log_softmax over the last axis: x, y are (rows, cols); per row: m = max, sum of
 * exp(x - m) accumulated in float64 in ascending column order, y = exp(x - m) / sum,
 * log_softmax y = x - m - log(sum). In-place ok. Single implementations (parallel over rows). */
void npuK_bias_add_f32(const npuK_pool *pool, int64_t rows, int64_t cols, const float *x,
                       const float *bias, float *y);
void npuK_bias_add_f64(const npuK_pool *pool, int64_t rows, int64_t cols, const double *x,
                       const double *bias, double *y);
void npuK_softmax_f32(const npuK_pool *pool, int64_t rows, int64_t cols, const float *x, float *y);
void npuK_softmax_f64(const npuK_pool *pool, int64_t rows, int64_t cols, const double *x,
                      double *y);
void npuK_log_softmax_f32(const npuK_pool *pool, int64_t rows, int64_t cols, const float *x,
                          float *y);
void npuK_log_softmax_f64(const npuK_pool *pool, int64_t rows, int64_t cols, const double *x,
                          double *y);

/* ---------------------------------------------------------------- reductions (reduce.c)
 * x is dense (dims[0..ndim)); bit i of axes_mask set = axis i reduced (bits >= ndim ignored).
 * out holds the reduced elements in row-major order of the kept axes (keepdims is the caller's
 * business: the data is the same). axes_mask == 0 copies x.
 * Accuracy: f32 sum, mean and prod accumulate in float64 and round to float32 once, so
 * |sum - exact| <= 2^-24 |exact| + n 2^-53 sum|x| (the second term is below float32's
 * resolution until n nears 2^29); f64 sums accumulate in float64, ints wrap; max and min
 * combine in the element type.
 * Order: fixed by the shape alone, never by the thread count: fast f32 sums take contiguous
 * runs in 16 float64 lanes added pairwise, kept-inner (column) reductions add rows four at a
 * time, and few long outputs are cut into shape-fixed pieces added in ascending order;
 * everything else ascends input index.  ref: each output folds its inputs in ascending
 * index order, one at a time (f32 sum/mean/prod in float64), so fast and ref agree bitwise
 * for f64, ints, max and min, and f32 sums to one ulp (two float64 sums rounded to float32;
 * docs/numerics.md).
 * mean = sum / count (in float64 for f32; integer division truncating toward zero for ints).
 * Empty reductions (a reduced dim of size 0): sum 0, prod 1, mean NaN (ints: 0),
 * max -inf (ints: MIN), min +inf (ints: MAX). max/min propagate NaN. Integer sum/prod wrap. */
#define NPUK_REDOP_LIST(X) X(SUM, sum) X(MEAN, mean) X(MAX, max) X(MIN, min) X(PROD, prod)
typedef enum {
#define NPUK_X_(E, s) NPUK_RED_##E,
  NPUK_REDOP_LIST(NPUK_X_)
#undef NPUK_X_
  NPUK_RED_COUNT
} npuK_redop;

void npuK_reduce_f32(const npuK_pool *pool, npuK_redop op, int ndim, const int64_t *dims,
                  uint32_t axes_mask, const float *x, float *out);
void npuK_reduce_f32_ref(const npuK_pool *pool, npuK_redop op, int ndim, const int64_t *dims,
                  uint32_t axes_mask, const float *x, float *out);
void npuK_reduce_f64(const npuK_pool *pool, npuK_redop op, int ndim, const int64_t *dims,
                  uint32_t axes_mask, const double *x, double *out);
void npuK_reduce_f64_ref(const npuK_pool *pool, npuK_redop op, int ndim, const int64_t *dims,
                  uint32_t axes_mask, const double *x, double *out);
void npuK_reduce_i32(const npuK_pool *pool, npuK_redop op, int ndim, const int64_t *dims,
                  uint32_t axes_mask, const int32_t *x, int32_t *out);
void npuK_reduce_i32_ref(const npuK_pool *pool, npuK_redop op, int ndim, const int64_t *dims,
                  uint32_t axes_mask, const int32_t *x, int32_t *out);
void npuK_reduce_i64(const npuK_pool *pool, npuK_redop op, int ndim, const int64_t *dims,
                  uint32_t axes_mask, const int64_t *x, int64_t *out);
void npuK_reduce_i64_ref(const npuK_pool *pool, npuK_redop op, int ndim, const int64_t *dims,
                  uint32_t axes_mask, const int64_t *x, int64_t *out);

/* argmax / argmin along one axis: x viewed as (outer, axis_len, inner); out is (outer, inner).
 * Ties -> the first (lowest) index, like TF. NaN (floats): the first NaN wins (NumPy semantics:
 * NaN counts as the extreme for both argmax and argmin). axis_len == 0 writes 0.
 * Suffix-free variants write int64_t, `_i32` variants write int32_t. Single implementation. */
void npuK_argmax_f32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const float *x, int64_t *out);
void npuK_argmax_f32_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const float *x, int32_t *out);
void npuK_argmin_f32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const float *x, int64_t *out);
void npuK_argmin_f32_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const float *x, int32_t *out);
void npuK_argmax_f64(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const double *x, int64_t *out);
void npuK_argmax_f64_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const double *x, int32_t *out);
void npuK_argmin_f64(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const double *x, int64_t *out);
void npuK_argmin_f64_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const double *x, int32_t *out);
void npuK_argmax_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const int32_t *x, int64_t *out);
void npuK_argmax_i32_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const int32_t *x, int32_t *out);
void npuK_argmin_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const int32_t *x, int64_t *out);
void npuK_argmin_i32_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const int32_t *x, int32_t *out);
void npuK_argmax_i64(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const int64_t *x, int64_t *out);
void npuK_argmax_i64_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const int64_t *x, int32_t *out);
void npuK_argmin_i64(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const int64_t *x, int64_t *out);
void npuK_argmin_i64_i32(const npuK_pool *pool, int64_t outer, int64_t axis_len,
                  int64_t inner, const int64_t *x, int32_t *out);

/* ---------------------------------------------------------------- data movement (movement.c)
 * Dtype-agnostic: elem_size is the element size in bytes (1, 2, 4, 8 take typed fast paths;
 * any other size works through memcpy). ndim <= NPUK_MAX_DIMS.
 *
 * transpose: x is (in_dims), y is (in_dims[perm[0]], ..., in_dims[perm[ndim-1]]); y's axis i
 *   is x's axis perm[i]. The fast version tiles the two axes that are innermost in x and y.
 * concat: x_i viewed as (outer, axis_dims[i], inner); y is (outer, sum axis_dims, inner).
 *   Single implementation.
 * slice: y is (size), y[i...] = x[begin + i...]; x is (in_dims); caller checks bounds.
 *   Single implementation.
 * pad: y is (in_dims[i] + paddings[2i] + paddings[2i+1]); paddings is (ndim, 2) = (before,
 *   after) per dim. CONSTANT fills with *value (one element's bytes; NULL means zero bytes);
 *   REFLECT mirrors without the edge (needs paddings <= dim - 1), SYMMETRIC with the edge
 *   (needs paddings <= dim), as tf.pad. Returns 0, or -1 (nothing written) for a negative or
 *   too large padding. Single implementation.
 * tile: y is (in_dims[i] * multiples[i]). Single implementation.
 * broadcast_to: y is dense (out_dims); in_strides are x's element strides per output dim, 0
 *   where broadcast (the same convention as npuK_binary_*). Single implementation. */
typedef enum { NPUK_PAD_CONSTANT = 0, NPUK_PAD_REFLECT = 1, NPUK_PAD_SYMMETRIC = 2 } npuK_pad_mode;

void npuK_transpose(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
                    const int *perm, const void *x, void *y);
void npuK_transpose_ref(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
                        const int *perm, const void *x, void *y);
void npuK_concat(const npuK_pool *pool, size_t elem_size, int n_inputs, int64_t outer,
                 const int64_t *axis_dims, int64_t inner, const void *const *xs, void *y);
void npuK_slice(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
                const int64_t *begin, const int64_t *size, const void *x, void *y);
int npuK_pad(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
             const int64_t *paddings, npuK_pad_mode mode, const void *value, const void *x,
             void *y);
void npuK_tile(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
               const int64_t *multiples, const void *x, void *y);
void npuK_broadcast_to(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *out_dims,
                       const int64_t *in_strides, const void *x, void *y);

/* ---------------------------------------------------------------- cast (cast.c)
 * y[i] = (to) x[i] for i < n, any pair of the 9 dtypes; from == to copies. Single
 * implementation. Every conversion is correctly rounded (one rounding, to nearest even):
 *  - float -> float: IEEE; f16/bf16 via half.h; f64 -> f16/bf16 and int -> f16/bf16 use a
 *    round-to-odd intermediate so there is no double rounding. NaN stays NaN, overflow -> inf.
 *  - float -> int: truncates toward zero; NaN -> 0; out of range saturates to the target's
 *    MIN/MAX (u8: [0, 255], so -1.5 -> 0).
 *  - int -> int: wraps modulo 2^bits (two's complement), like NumPy astype.
 *  - anything -> bool: (x != 0) (NaN -> 1); bool -> anything: 0 or 1 (a nonzero byte is 1).
 * Returns 0, or -1 for an invalid dtype. */
int npuK_cast(const npuK_pool *pool, int64_t n, npuK_dtype from, const void *x, npuK_dtype to,
              void *y);
/* The precision modes' conversions for the kernels' blocks, serial: n elements of x stored as
 * dt (float16, bfloat16 or float32) widened into float32 y, and n float32 elements narrowed
 * into y stored as dt (round to nearest even).  The bits of npuK_cast, which uses them; F16C
 * (AVX2 CPUs) when there, unless the environment sets NPU_NO_F16C=1. */
void npuK_half_widen(npuK_dtype dt, const void *x, float *y, int64_t n);
void npuK_half_narrow(const float *x, npuK_dtype dt, void *y, int64_t n);
/* 1 when the float16 conversions above go through F16C (x86-64 with AVX2, NPU_NO_F16C unset):
 * kernels with their own F16C loops (fused.c) use them only then. */
int npuK_f16c(void);
/* 1 when the CPU has native bfloat16 dot products (AVX512_BF16) and NPU_NO_AVX512BF16 is
 * unset: the kernels that compute on bfloat16 operands as stored (rather than widening them
 * to float32) run only then.  A fact of the process, looked up once. */
int npuK_bf16dot(void);
/* 1 when the CPU has AVX-512F and NPU_NO_AVX512 is unset (or "0"): the float32 GEMM's tiles
 * (gemm_f32.c, algorithm F32TILE) run only then; the switch lets tests and benchmarks run
 * OpenBLAS's path on the same CPU.  A fact of the process, looked up once. */
int npuK_avx512f(void);

/* ---------------------------------------------------------------- convolution (conv.c)
 * Window geometry shared by conv2d, depthwise_conv2d and the pools. Input x is NHWC
 * (n, in_h, in_w, c); output is (n, out_h, out_w, channels_out). Output pixel (oh, ow) reads
 * input rows ih = oh*stride_h - pad_top + kh*dilation_h (kh < k_h), and likewise for columns;
 * positions outside the input are padding (zero for convs). Padding after (bottom/right) is
 * implied by out_h/out_w. Get out_* and pad_* from npuK_conv_output_dim or the caller's
 * explicit padding. */
typedef struct npuK_window2d {
  int64_t n, in_h, in_w, c;          /* input (n, in_h, in_w, c) */
  int64_t k_h, k_w;                  /* window / filter spatial size */
  int64_t stride_h, stride_w;        /* >= 1 */
  int64_t dilation_h, dilation_w;    /* >= 1 */
  int64_t pad_top, pad_left;         /* >= 0 */
  int64_t out_h, out_w;              /* output spatial size */
} npuK_window2d;

/* TensorFlow's SAME/VALID rule for one spatial dim. eff = (k - 1) * dilation + 1.
 * SAME: out = ceil(in / stride), pad_total = max((out - 1) * stride + eff - in, 0),
 *       pad_before = pad_total / 2 (the extra one goes after).
 * VALID: out = ceil((in - eff + 1) / stride), pad_before = 0.
 * Returns 0, or -1 when out would be < 1 or an argument is out of range (k, stride, dilation
 * < 1, in < 0); then *out = *pad_before = 0. */
int npuK_conv_output_dim(int64_t in, int64_t k, int64_t stride, int64_t dilation,
                         int same_padding, int64_t *out, int64_t *pad_before);

/* conv2d: filter is HWIO (k_h, k_w, c, out_c); y is (n, out_h, out_w, out_c).
 * Fast version: output pixels (rows of the GEMM, M = n*out_h*out_w) are cut into fixed blocks
 * whose size depends only on the shapes; each block is im2col'ed into (block, k_h*k_w*c) scratch
 * and multiplied by the filter (k_h*k_w*c, out_c) with sgemm. Blocks are spread over n_slots
 * scratch slots run through the pool, so results do not depend on the pool or n_slots.
 * 1x1 filter, stride 1, no padding, out == in: straight GEMM, no scratch needed.
 * scratch: at least npuK_conv2d_f32_scratch_size(w, out_c, n_slots) bytes, float-aligned
 * (may be NULL when that size is 0). n_slots < 1 counts as 1; use the pool's thread count.
 * _ref: naive loops, sum over (kh, kw, ci) in that order in float. */
size_t npuK_conv2d_f32_scratch_size(const npuK_window2d *w, int64_t out_c, int n_slots);
void npuK_conv2d_f32(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                     const float *x, const float *filter, float *y, float *scratch, int n_slots);
void npuK_conv2d_f32_ref(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                         const float *x, const float *filter, float *y, float *scratch,
                         int n_slots);
/* Few taps (k = k_h*k_w*c <= 16, out_c >= 8: a first layer on a 1-channel image), float32 x
 * and y, x86-64 with AVX2 + FMA: each block's product is npuK_conv_small_k instead of sgemm
 * (no packing).  npuK_conv_small_k: y (rows, oc) = col (rows, k) . filter (k, oc), each output
 * fmaf(col[t], filter[t], s) over t ascending from s = +0 — the FMA sgemm kernels' chain, so
 * their bits (the sgemm where AVX2 + FMA is missing). */
int npuK_conv_uses_small_k(const npuK_window2d *w, int64_t out_c);
void npuK_conv_small_k(int64_t rows, int64_t oc, int64_t k, const float *col,
                       const float *filter, float *y);

/* depthwise_conv2d: filter is (k_h, k_w, c, multiplier); y is (n, out_h, out_w, c*multiplier),
 * output channel ci*multiplier + m uses input channel ci. Fast version: direct, parallel over
 * output rows, vectorised over channels; both sum over (kh, kw) ascending in float. */
void npuK_depthwise_conv2d_f32(const npuK_pool *pool, const npuK_window2d *w, int64_t multiplier,
                               const float *x, const float *filter, float *y);
void npuK_depthwise_conv2d_f32_ref(const npuK_pool *pool, const npuK_window2d *w,
                                   int64_t multiplier, const float *x, const float *filter,
                                   float *y);

/* ---------------------------------------------------------------- pooling (pooling.c)
 * x is (n, in_h, in_w, c), y is (n, out_h, out_w, c); window k_h x k_w (dilation honoured,
 * normally 1). max_pool ignores padded positions, propagates NaN; a window with no valid
 * position gives -inf. avg_pool divides the sum (kh, kw ascending, in float) by the number of
 * NON-padded positions (TF semantics); an empty window gives 0. */
/* max_pool / avg_pool whose x and y may be stored as float16 / bfloat16 (F32 too: then the
 * _f32 kernels, no scratch): output rows in bands whose input rows are widened at once, each
 * row pooled in float32 and narrowed — the bits of widening x in full, the _f32 kernel and
 * narrowing y.  scratch: npuK_pool_half_scratch_size bytes. */
size_t npuK_pool_half_scratch_size(const npuK_window2d *w, int n_slots, npuK_dtype x_dtype,
                                   npuK_dtype y_dtype);
void npuK_max_pool_half(const npuK_pool *pool, const npuK_window2d *w, const void *x,
                        npuK_dtype x_dtype, void *y, npuK_dtype y_dtype, float *scratch,
                        int n_slots);
void npuK_avg_pool_half(const npuK_pool *pool, const npuK_window2d *w, const void *x,
                        npuK_dtype x_dtype, void *y, npuK_dtype y_dtype, float *scratch,
                        int n_slots);
void npuK_max_pool_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x, float *y);
void npuK_max_pool_f32_ref(const npuK_pool *pool, const npuK_window2d *w, const float *x,
                           float *y);
void npuK_avg_pool_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x, float *y);
void npuK_avg_pool_f32_ref(const npuK_pool *pool, const npuK_window2d *w, const float *x,
                           float *y);

/* ---------------------------------------------------------------- indexing (indexing.c)
 * Dtype-agnostic (elem_size bytes per element, like data movement); ndim <= NPUK_MAX_DIMS.
 * strided_slice: y is dense (out_dims); y[i...] = x[begin[d] + i[d] * strides[d] ...]; x is
 *   (in_dims); strides may be negative.  The caller resolved TensorFlow's masks and negative
 *   indices and checked every index read is inside x.  Fast: strided runs, parallel;
 *   _ref: full index arithmetic per element.
 * split: x viewed as (outer, sum axis_dims, inner), ys[i] as (outer, axis_dims[i], inner): the
 *   inverse of npuK_concat.  Single implementation.
 * gather: x viewed as (outer, axis_dim, inner), y as (outer, n_indices, inner), y[o, j, :] =
 *   x[o, indices[j], :]; indices int32 (index_size 4) or int64 (8).  Returns -1, or the
 *   position of the first index outside [0, axis_dim) (then nothing is written).  Fast: row
 *   copies, parallel; _ref: per element.
 * gather_nd: x is (in_dims); indices (n_indices, index_depth), index_depth <= ndim; y is
 *   (n_indices, inner), inner = the product of in_dims[index_depth..]; row r is the block of x
 *   at the index tuple r.  Returns -1 or the first row whose tuple is out of range (nothing
 *   written).  Single implementation.
 * space_to_batch: x is (batch, spatial[0..m), inner), y is (prod(block) * batch,
 *   (spatial[i] + pad_before_i + pad_after_i) / block[i] ..., inner); y[(b_0 * block[1] + b_1
 *   ...) * batch + n, o...] = x[n, o_i * block[i] + b_i - pad_before_i ...], zero in the
 *   padding (TensorFlow SpaceToBatchND); paddings is (m, 2).  batch_to_space: the inverse;
 *   x is (prod(block) * batch, spatial[0..m), inner), crops (m, 2), y is (batch,
 *   spatial[i] * block[i] - crop_before_i - crop_after_i ..., inner).  Single implementations.
 * range: y[i] = start + delta + ... (i additions, TensorFlow's accumulation) for i < n;
 *   integers wrap.  Single implementation. */
void npuK_strided_slice(const npuK_pool *pool, size_t elem_size, int ndim,
                        const int64_t *in_dims, const int64_t *begin, const int64_t *strides,
                        const int64_t *out_dims, const void *x, void *y);
void npuK_strided_slice_ref(const npuK_pool *pool, size_t elem_size, int ndim,
                            const int64_t *in_dims, const int64_t *begin,
                            const int64_t *strides, const int64_t *out_dims, const void *x,
                            void *y);
void npuK_split(const npuK_pool *pool, size_t elem_size, int n_outputs, int64_t outer,
                const int64_t *axis_dims, int64_t inner, const void *x, void *const *ys);
int64_t npuK_gather(const npuK_pool *pool, size_t elem_size, int64_t outer, int64_t axis_dim,
                    int64_t inner, int64_t n_indices, const void *indices, size_t index_size,
                    const void *x, void *y);
int64_t npuK_gather_ref(const npuK_pool *pool, size_t elem_size, int64_t outer,
                        int64_t axis_dim, int64_t inner, int64_t n_indices, const void *indices,
                        size_t index_size, const void *x, void *y);
int64_t npuK_gather_nd(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
                       int64_t n_indices, int index_depth, const void *indices,
                       size_t index_size, const void *x, void *y);
void npuK_space_to_batch(const npuK_pool *pool, size_t elem_size, int m, int64_t batch,
                         const int64_t *spatial, const int64_t *block, const int64_t *paddings,
                         int64_t inner, const void *x, void *y);
void npuK_batch_to_space(const npuK_pool *pool, size_t elem_size, int m, int64_t batch,
                         const int64_t *spatial, const int64_t *block, const int64_t *crops,
                         int64_t inner, const void *x, void *y);
void npuK_range_f32(int64_t n, float start, float delta, float *y);
void npuK_range_f64(int64_t n, double start, double delta, double *y);
void npuK_range_i32(int64_t n, int32_t start, int32_t delta, int32_t *y);
void npuK_range_i64(int64_t n, int64_t start, int64_t delta, int64_t *y);

/* ---------------------------------------------------------------- selection (select.c)
 * top_k: x is (rows, cols); values and indices are (rows, k), k <= cols <= INT32_MAX: per row
 *   the k largest in descending order, equal values by ascending index (TensorFlow TopKV2); a
 *   NaN ranks above every number.  Fast: a k-entry heap kept in the output row (cols log k),
 *   parallel over rows; _ref: k passes over the row.
 * non_max_suppression: boxes (n, 4) as (y1, x1, y2, x2), corners in either order; scores (n).
 *   Candidates are the boxes with score > score_threshold (NaN never), by descending score
 *   (ties: lower index); each is kept unless its IoU with a box kept before is >
 *   iou_threshold; at most max_output are kept (TensorFlow NonMaxSuppressionV5).  With
 *   soft_nms_sigma > 0 (soft NMS) overlap lowers a candidate's score by exp(-iou^2 / (2 sigma))
 *   instead (to 0 past iou_threshold), and it competes again while above score_threshold.
 *   Writes the indices and final scores to selected / selected_scores[0..count) (room for
 *   min(n, max_output)) and returns count.  scratch: npuK_nms_scratch_size(n) bytes.  Single
 *   implementation. */
void npuK_top_k_f32(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                    const float *x, float *values, int32_t *indices);
void npuK_top_k_f32_ref(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                        const float *x, float *values, int32_t *indices);
void npuK_top_k_f64(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                    const double *x, double *values, int32_t *indices);
void npuK_top_k_f64_ref(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                        const double *x, double *values, int32_t *indices);
void npuK_top_k_i32(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                    const int32_t *x, int32_t *values, int32_t *indices);
void npuK_top_k_i32_ref(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                        const int32_t *x, int32_t *values, int32_t *indices);
void npuK_top_k_i64(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                    const int64_t *x, int64_t *values, int32_t *indices);
void npuK_top_k_i64_ref(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                        const int64_t *x, int64_t *values, int32_t *indices);
/* where: the coordinates of x's nonzero elements (x != 0: -0.0 is zero, NaN is not; f16/bf16
 *   as bit patterns) in row-major order.  npuK_count_nonzero counts them over n elements;
 *   npuK_where writes count * ndim int64 coordinates for x of dims[ndim].
 * unique: x (n) of dtype; ids[k] (n) = the number of the value of x[k], values numbered by
 *   first occurrence (floats compared as numbers: -0.0 == 0.0, a NaN equals nothing); returns
 *   the count.  npuK_unique_values writes each value once, at its number, to y.  scratch:
 *   npuK_unique_scratch_size(n) bytes.  Single implementations. */
int64_t npuK_count_nonzero(int64_t n, const void *x, npuK_dtype dtype);
void npuK_where(int ndim, const int64_t *dims, const void *x, npuK_dtype dtype,
                int64_t *coords);
size_t npuK_unique_scratch_size(int64_t n);
int64_t npuK_unique_ids(int64_t n, const void *x, npuK_dtype dtype, int64_t *ids,
                        void *scratch);
void npuK_unique_values(int64_t n, const void *x, size_t elem_size, const int64_t *ids,
                        void *y);
size_t npuK_nms_scratch_size(int64_t n);
int64_t npuK_non_max_suppression_f32(int64_t n, const float *boxes, const float *scores,
                                     int64_t max_output, float iou_threshold,
                                     float score_threshold, float soft_nms_sigma,
                                     int32_t *selected, float *selected_scores, void *scratch);

/* ---------------------------------------------------------------- fused steps (fused.c)
 * What the fusion passes (compile/fusion.c) run.  An epilogue is applied in place to a block
 * of output while it is still in cache: y (rows, cols, row stride ld) += bias (cols) when bias
 * is not NULL, then the activation.  Activations compute exactly what the unary kernels do
 * (relu, relu6, sigmoid, tanh: unary.c; leaky_relu, prelu: kmath.h), so an epilogue gives the
 * bits the separate ops give.  Single implementation. */
typedef enum npuK_act {
  NPUK_ACT_NONE = 0, NPUK_ACT_RELU, NPUK_ACT_RELU6, NPUK_ACT_LEAKY_RELU, NPUK_ACT_SIGMOID,
  NPUK_ACT_TANH, NPUK_ACT_PRELU, NPUK_ACT_COUNT
} npuK_act;
typedef struct npuK_epilogue {
  const float *bias;  /* (cols), or NULL */
  npuK_act act;
  float alpha;        /* leaky_relu's slope */
  const float *slope; /* prelu's slopes (cols) */
  int fast;           /* sigmoid, tanh: their high_performance kernels (kfast.h), the bits of
                         the unfused fast step (each element's result is position-free) */
} npuK_epilogue;
void npuK_epilogue_f32(const npuK_epilogue *e, int64_t rows, int64_t cols, int64_t ld, float *y);

/* matmul with an epilogue (ep NULL: plain matmul).  _blas: each block of C is first filled
 * with the bias and the GEMM accumulates onto it (beta = 1), then the activation runs on the
 * block; the bias therefore enters the sum first, where the unfused ops add it last (a
 * difference of rounding only: OpenBLAS adds a block's k-sum to C in one step when k fits its
 * k-panel, so then the bits agree).  _ref: the ref product, then the epilogue. */
void npuK_matmul_f32_blas_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                             int64_t n, int64_t k, const float *a, const float *b,
                             const npuK_epilogue *ep, float *c);
/* matmul whose A and C may be stored as float16 / bfloat16 (a_dtype, c_dtype; F32 too: then
 * the _blas kernels and no scratch), B float32: the _blas GEMM's blocks, each widening its rows
 * of op(A) (all of A once per slot when the blocks are columns) and computing its block of C
 * in scratch, epilogue included, then narrowing it — the bits of widening A in full,
 * npuK_matmul_f32_blas(_ep) and narrowing C.  scratch: npuK_matmul_half_scratch_size bytes. */
size_t npuK_matmul_half_scratch_size(int64_t m, int64_t n, int64_t k, int n_slots,
                                     npuK_dtype a_dtype, npuK_dtype c_dtype);
void npuK_matmul_half_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                         int64_t k, const void *a, npuK_dtype a_dtype, const float *b,
                         const npuK_epilogue *ep, void *c, npuK_dtype c_dtype, float *scratch,
                         int n_slots);
void npuK_matmul_f32_ref_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                            int64_t n, int64_t k, const float *a, const float *b,
                            const npuK_epilogue *ep, float *c);
/* GEMM algorithms (a matmul step's npuE_step.algo, npuX_call.algo): AUTO (0) the shape rule of
 * blas.c (rows as sgemv for few rows, else sgemm), SGEMM / GEMV forcing one: chosen by the
 * tuner (compile/tuning.c).  Every one is a float32 sum over k (|c - exact| <= k 2^-23
 * sum|a b|), in other orders; the block plan, so thread independence, is the same.
 * BF16DOT: A and B stored bfloat16 and computed as stored (npuK_gemm_bf16_ep, VDPBF16PS),
 * where npuK_gemm_bf16_takes; elsewhere it runs as AUTO.  The compiler picks it for such
 * steps when npuK_bf16dot() (compile/implmode.c).
 * F32TILE: A, B and C float32, computed by our own AVX-512F tiles (npuK_gemm_f32_ep) where
 * npuK_gemm_f32_takes and the call has its scratch; elsewhere it runs as AUTO.  The compiler picks it for float32 GEMM
 * steps of npuK_gemm_f32_wins's shapes (compile/implmode.c), the tuner times it.
 * npuK_matmul_half_algo_ep is npuK_matmul_half_ep with the algorithm; npuK_gemm_uses_gemv
 * says what a shape runs under an algorithm. */
typedef enum npuK_gemm_algo {
  NPUK_GEMM_AUTO = 0, NPUK_GEMM_SGEMM = 1, NPUK_GEMM_GEMV = 2, NPUK_GEMM_BF16DOT = 3,
  NPUK_GEMM_F32TILE = 4, NPUK_GEMM_ALGO_COUNT
} npuK_gemm_algo;
/* Float32 GEMM by AVX-512F register tiles (gemm_f32.c): C (m, n) = op(A) op(B), A stored
 * (m, k) or (k, m) if trans_a, B (k, n) or (n, k) if trans_b, all float32; the epilogue (NULL:
 * none) on the stored sums.  Each output is one float32 chain of fmas over k, ascending:
 * |c - exact| <= k 2^-24 sum|a b|, (k + 1) 2^-24 (|bias| + sum|a b|) with a bias (added after
 * the sum); NaN / Inf propagate.  The same bits at any thread count and tiling.  _level: 1 the
 * AVX-512F tiles (where the CPU has them, whatever NPU_NO_AVX512 says), 0 the portable twin
 * (fmaf: the same chains; tests).  _ep is level 1.  scratch: npuK_gemm_f32_scratch_size bytes
 * (B's panels, one per slot; level 0 reads none), 0 where B is read in place (a B stored
 * (k, n) that fits L2, or m <= 8): scratch may then be NULL. */
size_t npuK_gemm_f32_scratch_size(int trans_b, int64_t m, int64_t n, int64_t k, int n_slots);
void npuK_gemm_f32_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                      int64_t k, const float *a, const float *b, const npuK_epilogue *ep,
                      float *c, void *scratch, int n_slots);
void npuK_gemm_f32_level_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                            int64_t n, int64_t k, const float *a, const float *b,
                            const npuK_epilogue *ep, float *c, void *scratch, int n_slots,
                            int level);
/* B packed once (a constant B: compile/plan.c, once per plan; "f32_weights" in explain):
 * npuK_gemm_f32_packed_size bytes (panels of 32 columns), filled from B (k, n), or (n, k) if
 * trans_b, by npuK_gemm_f32_pack_b (portable: any CPU).  _packed_level_ep reads it in place
 * of B: the same chains, so the bits of npuK_gemm_f32_level_ep at the same level; no scratch. */
size_t npuK_gemm_f32_packed_size(int64_t n, int64_t k);
void npuK_gemm_f32_pack_b(int trans_b, int64_t n, int64_t k, const float *b, float *dst);
void npuK_gemm_f32_packed_level_ep(const npuK_pool *pool, int trans_a, int64_t m, int64_t n,
                                   int64_t k, const float *a, const float *packed_b,
                                   const npuK_epilogue *ep, float *c, int n_slots, int level);
/* Gradient descent on it (fused_apply_gradient_descent's F32TILE path): each tile's sums d update
 * w (m, n) as w = w - lr * d (npuK_sgd_update_f32: multiply, then subtract) while in
 * registers; C is never stored.  The bits of npuK_gemm_f32_level_ep then that update, at any
 * thread count.  Scratch: npuK_gemm_f32_scratch_size's. */
void npuK_gemm_f32_sgd_level(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                             int64_t n, int64_t k, const float *a, const float *b, float lr,
                             float *w, void *scratch, int n_slots, int level);
/* 1 when a step of this algorithm and these dtypes runs npuK_gemm_f32_ep: algo F32TILE, A, B
 * and C float32, npuK_avx512f(). */
int npuK_gemm_f32_takes(int algo, npuK_dtype a_dtype, npuK_dtype b_dtype, npuK_dtype c_dtype);
/* The shapes the compiler gives F32TILE (measured on Zen 4 against OpenBLAS: kernels/blas.c,
 * docs/training.md "The floor"); 0 where npuK_avx512f() is 0. */
int npuK_gemm_f32_wins(int64_t m, int64_t n, int64_t k);
/* Native bfloat16 GEMM (gemm_bf16.c): C (m, n) = op(A) op(B), A stored (m, k) or (k, m) if
 * trans_a, B (k, n) or (n, k) if trans_b, both bfloat16; the epilogue (NULL: none) on the
 * float32 sums; C stored float32, bfloat16 or float16 (narrowed as the Cast op narrows).
 * Each output is one float32 chain over k in pairs, ascending, as VDPBF16PS computes it
 * (products exact, sums rounded to nearest even, subnormal inputs read as zero and subnormal
 * sums flushed): |c - exact| <= k 2^-24 sum|a b| + k 2^-126 for the operands with subnormals
 * taken as zero, (k + 1) 2^-24 (|bias| + sum|a b|) + k 2^-126 with a bias (added after the
 * sum); NaN / Inf propagate.  The same bits at any thread count and blocking.  _level: 1 the
 * AVX512_BF16 tiles (where the CPU has them, whatever NPU_NO_AVX512BF16 says), 0 the portable
 * twin emulating the instruction lane by lane (the same chains; tests).  _ep is level 1.
 * scratch: npuK_gemm_bf16_scratch_size bytes (a transposed A packed, B's panels per slot). */
size_t npuK_gemm_bf16_scratch_size(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                   int n_slots);
/* Gradient descent on it (npuK_matmul_half_sgd's BF16DOT path): each tile's float32 sums, the
 * product d, rounded to d_dtype as C of that dtype would be stored (npuK_half_narrow), widened
 * and applied to w (m, n) as w = w - lr * d (npuK_sgd_update_f32: multiply, then subtract)
 * while in cache; C is never stored.  The bits of npuK_gemm_bf16_level_ep into a d_dtype C, a
 * Cast to float32 and that update; each element of w is one tile's, so any thread count gives
 * them.  k > 0.  Scratch: npuK_gemm_bf16_scratch_size's. */
void npuK_gemm_bf16_sgd_level(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                              int64_t n, int64_t k, const uint16_t *a, const uint16_t *b,
                              npuK_dtype d_dtype, float lr, float *w, void *scratch,
                              int n_slots, int level);
void npuK_gemm_bf16_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                       int64_t k, const uint16_t *a, const uint16_t *b, const npuK_epilogue *ep,
                       void *c, npuK_dtype c_dtype, void *scratch, int n_slots);
void npuK_gemm_bf16_level_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                             int64_t n, int64_t k, const uint16_t *a, const uint16_t *b,
                             const npuK_epilogue *ep, void *c, npuK_dtype c_dtype,
                             void *scratch, int n_slots, int level);
/* B packed once (a constant B: compile/plan.c, once per plan; "bf16_weights" in explain)
 * for products of m rows: npuK_gemm_bf16_packed_size bytes (uint32 panels of 32 to 128
 * columns as m decides, k in pairs), filled from B (k, n), or (n, k) if trans_b, by
 * npuK_gemm_bf16_pack_b (portable: any CPU).  The _packed entries, given the same m, read it
 * in place of B: the same chains, so the bits of npuK_gemm_bf16_level_ep at the same level,
 * with no per-call packing; scratch: npuK_gemm_bf16_packed_scratch_size bytes (a transposed
 * A packed, nothing for B). */
size_t npuK_gemm_bf16_packed_size(int64_t m, int64_t n, int64_t k);
void npuK_gemm_bf16_pack_b(int trans_b, int64_t m, int64_t n, int64_t k, const uint16_t *b,
                           uint32_t *dst);
size_t npuK_gemm_bf16_packed_scratch_size(int trans_a, int64_t m, int64_t k);
void npuK_gemm_bf16_packed_ep(const npuK_pool *pool, int trans_a, int64_t m, int64_t n,
                              int64_t k, const uint16_t *a, const uint32_t *packed_b,
                              const npuK_epilogue *ep, void *c, npuK_dtype c_dtype,
                              void *scratch, int n_slots);
void npuK_gemm_bf16_packed_level_ep(const npuK_pool *pool, int trans_a, int64_t m, int64_t n,
                                    int64_t k, const uint16_t *a, const uint32_t *packed_b,
                                    const npuK_epilogue *ep, void *c, npuK_dtype c_dtype,
                                    void *scratch, int n_slots, int level);
/* 1 when a step of this algorithm and these operand dtypes runs npuK_gemm_bf16_ep: algo
 * BF16DOT, A and B bfloat16, npuK_bf16dot(). */
int npuK_gemm_bf16_takes(int algo, npuK_dtype a_dtype, npuK_dtype b_dtype);
void npuK_matmul_half_algo_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                              int64_t n, int64_t k, const void *a, npuK_dtype a_dtype,
                              const float *b, const npuK_epilogue *ep, void *c,
                              npuK_dtype c_dtype, float *scratch, int n_slots, int algo);
/* The same with B stored as float16 / bfloat16 too (b_dtype; NPUK_F32: the functions above).
 * Rows run as sgemv (few rows, or algo GEMV) on a float16 B, with F16C: matrix-vector
 * products reading B as stored, a float32 sum over k in their own order (|c - exact| <=
 * (k + 1) 2^-23 (|bias| + sum |a b|); B's bytes, read once, are what such a product costs).
 * Otherwise B is widened by each column block's panel (all of B once per slot when the blocks
 * are rows) in scratch for the same sgemm / sgemv calls, so the bits of widening B in full.
 * scratch: npuK_matmul_half_b_scratch_size bytes, for the algorithm the call will run. */
size_t npuK_matmul_half_b_scratch_size(int64_t m, int64_t n, int64_t k, int n_slots,
                                       npuK_dtype a_dtype, npuK_dtype b_dtype,
                                       npuK_dtype c_dtype, int algo);
void npuK_matmul_half_b_algo_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                                int64_t n, int64_t k, const void *a, npuK_dtype a_dtype,
                                const void *b, npuK_dtype b_dtype, const npuK_epilogue *ep,
                                void *c, npuK_dtype c_dtype, float *scratch, int n_slots,
                                int algo);
int npuK_gemm_uses_gemv(int algo, int64_t m, int64_t n, int64_t k);
/* Gradient descent through a GEMM: w (m, n) = w - lr * (op(A) op(B)), the product never
 * stored whole: each block of npuK_matmul_f32_blas's plan (the same sgemm / sgemv calls, so
 * the same product bits) is computed into the slot's scratch and w's block updated from it
 * while it is in cache, as a multiply then a subtract (two roundings): the bits of the matmul,
 * mul and sub ops one after the other.  Needs 0 < m, n, k <= INT_MAX.  Slot s takes blocks
 * [s nb / slots, (s + 1) nb / slots); scratch: npuK_matmul_sgd_scratch_size bytes. */
size_t npuK_matmul_sgd_scratch_size(int64_t m, int64_t n, int64_t k, int n_slots);
void npuK_matmul_f32_sgd(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                         int64_t k, const float *a, const float *b, float lr, float *w,
                         float *scratch, int n_slots);
/* The same with the GEMM's rows as sgemm or sgemv calls by algo (npuK_gemm_algo: SGEMM, GEMV,
 * or AUTO: the rule, which npuK_matmul_f32_sgd follows), as a tuned matmul step runs them
 * (compile/tuning.c times the fused step's choices itself); the same scratch. */
void npuK_matmul_f32_sgd_algo(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                              int64_t n, int64_t k, const float *a, const float *b, float lr,
                              float *w, float *scratch, int n_slots, int algo);
/* The same under a reduced precision mode (ApplyGradientDescentFusionPass under mixed
 * precision): A and B stored as a_dtype / b_dtype (float32, float16, bfloat16), the product
 * stored as d_dtype.  The product is the matmul op's on those operands with algo (the compiler
 * gives the step BF16DOT where it would give the matmul BF16DOT: compile/implmode.c): under
 * BF16DOT each tile of the native GEMM updates w while in cache (npuK_gemm_bf16_sgd_level),
 * else the matmul's own call writes the product whole into scratch as d_dtype and w = w - lr
 * * d is applied widened (npuK_sgd_update_half): the bits of matmul, Cast to float32, mul and
 * sub either way, without the float32 gradient, the new value and the assign's copy.  Bound: the GEMM's (above, and
 * npuK_gemm_bf16_ep's with its subnormal flush), then d's rounding, then the two roundings
 * of mul and sub.  scratch: npuK_matmul_half_sgd_scratch_size bytes. */
size_t npuK_matmul_half_sgd_scratch_size(int64_t m, int64_t n, int64_t k, int n_slots,
                                         npuK_dtype a_dtype, npuK_dtype b_dtype,
                                         npuK_dtype d_dtype, int algo);
void npuK_matmul_half_sgd(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                          int64_t k, const void *a, npuK_dtype a_dtype, const void *b,
                          npuK_dtype b_dtype, npuK_dtype d_dtype, float lr, float *w,
                          void *scratch, int n_slots, int algo);
/* conv2d / depthwise_conv2d with an epilogue applied to each block of output pixels right
 * after it is computed (cols = output channels); same arguments and scratch as the plain
 * kernels, same bits as the plain kernel followed by bias_add and the activation. */
void npuK_conv2d_f32_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                        const float *x, const float *filter, const npuK_epilogue *ep, float *y,
                        float *scratch, int n_slots);
void npuK_conv2d_f32_ref_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                            const float *x, const float *filter, const npuK_epilogue *ep,
                            float *y, float *scratch, int n_slots);
/* conv2d whose x and y may be stored as float16 / bfloat16 (x_dtype, y_dtype; F32 too): each
 * block's columns are widened from x as im2col builds them (a pointwise convolution widens
 * its block of rows), and a reduced y is computed a block at a time in scratch, the epilogue
 * applied, then narrowed — the bits of widening x in full, npuK_conv2d_f32_ep and narrowing y,
 * without the full-size float32 copies.  scratch: npuK_conv2d_half_scratch_size bytes. */
size_t npuK_conv2d_half_scratch_size(const npuK_window2d *w, int64_t out_c, int n_slots,
                                     npuK_dtype x_dtype, npuK_dtype y_dtype);
void npuK_conv2d_half_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                         const void *x, npuK_dtype x_dtype, const float *filter,
                         const npuK_epilogue *ep, void *y, npuK_dtype y_dtype, float *scratch,
                         int n_slots);
/* conv2d algorithms: which kernel a conv2d step runs (npuE_step.algo, npuX_call.algo), chosen
 * by the compiler (compile/implmode.c: op_select_implmode / op_precision_mode high_performance)
 * and open to tuning.  IM2COL (the default, 0): npuK_conv2d_half_ep, above.  WINOGRAD_2X3:
 * F(2x2, 3x3) (winograd.c), 3x3 filters at stride 1 and dilation 1, float32 x and y; 2.25x
 * fewer multiplies, other rounding: |y - exact| <= gamma(c + 7) W per output, W the algorithm
 * run on absolute values (docs/numerics.md, "Winograd"), and no twin that gives its bits.
 * DIRECT: npuK_conv2d_direct_half_ep, below.  DIRECT_BF16: bfloat16 x and filter values by
 * VDPBF16PS (npuK_conv2d_bf16_direct_ep, below), where npuK_bf16dot(); its own bound. */
typedef enum npuK_conv_algo {
  NPUK_CONV_IM2COL = 0, NPUK_CONV_WINOGRAD_2X3 = 1, NPUK_CONV_DIRECT = 2,
  NPUK_CONV_DIRECT_BF16 = 3, NPUK_CONV_ALGO_COUNT
} npuK_conv_algo;
/* conv2d with a max pool fused after the epilogue: y is the pool's output (n, pool->out_h,
 * pool->out_w, out_c), pool the pool's window over the convolution's output (pool->in_h ==
 * w->out_h, pool->in_w == w->out_w, pool->c == out_c).  The convolution's output is never
 * stored: blocks of whole pool rows compute the rows their windows read, epilogue included,
 * into scratch and pool them there.  Windows must not overlap (k <= stride, dilation 1):
 * npuK_conv2d_pool_fits.  The convolution's bits (the same sgemm over the same rows, shapes
 * allowing), and max_pool's (valid positions in (kh, kw) order, NaN kept): the bits of conv2d,
 * bias_add, the activation and max_pool one after the other.  scratch:
 * npuK_conv2d_pool_scratch_size bytes. */
int npuK_conv2d_pool_fits(const npuK_window2d *w, const npuK_window2d *pool);
size_t npuK_conv2d_pool_scratch_size(const npuK_window2d *w, int64_t out_c,
                                     const npuK_window2d *pool, int n_slots);
void npuK_conv2d_f32_pool_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                             const float *x, const float *filter, const npuK_epilogue *ep,
                             const npuK_window2d *pool_window, float *y, float *scratch,
                             int n_slots);
/* WINOGRAD_2X3: whether it takes the geometry w (and, when pool is not NULL, the fused max
 * pool: 2x2 windows at stride 2 from the first row and column, the tiles); its scratch; the
 * kernel (pool_window NULL: y is the convolution's output).  Tiles are cut into blocks whose
 * size depends only on the shapes, spread over n_slots slots: the same bits at any thread
 * count. */
int npuK_conv2d_winograd_fits(const npuK_window2d *w, const npuK_window2d *pool);
size_t npuK_conv2d_winograd_scratch_size(const npuK_window2d *w, int64_t out_c,
                                         const npuK_window2d *pool, int n_slots);
void npuK_conv2d_f32_winograd_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                                 const float *x, const float *filter, const npuK_epilogue *ep,
                                 const npuK_window2d *pool_window, float *y, float *scratch,
                                 int n_slots);
/* Winograd's filter transform U = G g G^T (16, c, out_c), of filter (3, 3, c, out_c), as the
 * kernel computes it (the same floats): a constant filter's U computed once (compile/plan.c)
 * for the _u_ep form, which takes U instead of the filter and skips the transform each call
 * (its scratch: npuK_conv2d_winograd_u_scratch_size, the other's less U's 16 c out_c
 * floats).  _filter_size: U's bytes. */
size_t npuK_conv2d_winograd_filter_size(int64_t c, int64_t out_c);
size_t npuK_conv2d_winograd_u_scratch_size(const npuK_window2d *w, int64_t out_c,
                                           const npuK_window2d *pool, int n_slots);
void npuK_conv2d_winograd_filter(const npuK_pool *pool, int64_t c, int64_t out_c,
                                 const float *filter, float *u);
void npuK_conv2d_f32_winograd_u_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                                   const float *x, const float *u, const npuK_epilogue *ep,
                                   const npuK_window2d *pool_window, float *y, float *scratch,
                                   int n_slots);
/* DIRECT (conv_direct.c): register tiles of output pixels x 16 channels over taps read
 * straight from x, no column buffer; dilation 1, out_c a multiple of 8, float32 x and y (the
 * _half form below: float16 / bfloat16 too).  Each
 * output is one float32 FMA chain over its valid taps in (kh, kw, ci) order from +0: the ref
 * kernel's order, |y - exact| <= gamma(k_h k_w c) sum|x f| as im2col's sgemm (docs/numerics.md,
 * "Direct convolution").  pool_window as Winograd's (npuK_conv2d_pool_fits), NULL for none;
 * scratch: npuK_conv2d_direct_scratch_size bytes (padded image copies, pooled rows).  The
 * _level form caps the instruction set (tests): 0 the portable twin, the same chains by fmaf
 * (the same bits), 1 AVX2 + FMA tiles where the CPU has them, 2 (the plain form) AVX-512
 * tiles where it has those. */
int npuK_conv2d_direct_fits(const npuK_window2d *w, int64_t out_c, const npuK_window2d *pool);
size_t npuK_conv2d_direct_scratch_size(const npuK_window2d *w, int64_t out_c,
                                       const npuK_window2d *pool, int n_slots);
void npuK_conv2d_f32_direct_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                               const float *x, const float *filter, const npuK_epilogue *ep,
                               const npuK_window2d *pool_window, float *y, float *scratch,
                               int n_slots);
void npuK_conv2d_f32_direct_level_ep(const npuK_pool *pool, const npuK_window2d *w,
                                     int64_t out_c, const float *x, const float *filter,
                                     const npuK_epilogue *ep, const npuK_window2d *pool_window,
                                     float *y, float *scratch, int n_slots, int level);
/* DIRECT with x and y stored as float16 / bfloat16 (x_dtype, y_dtype; F32 too), filter and
 * epilogue float32: the same row kernels on float32 values — each image (or band of rows, when
 * large) widened once into the slot's copy (with its padding), a call's output rows computed,
 * epilogue and pool included, into the slot's float32 rows and narrowed there — so the bits of
 * widening x in full, npuK_conv2d_f32_direct_ep and narrowing y.  scratch:
 * npuK_conv2d_direct_half_scratch_size bytes; _level as above. */
size_t npuK_conv2d_direct_half_scratch_size(const npuK_window2d *w, int64_t out_c,
                                            const npuK_window2d *pool, int n_slots,
                                            npuK_dtype x_dtype, npuK_dtype y_dtype);
void npuK_conv2d_direct_half_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                                const void *x, npuK_dtype x_dtype, const float *filter,
                                const npuK_epilogue *ep, const npuK_window2d *pool_window,
                                void *y, npuK_dtype y_dtype, float *scratch, int n_slots);
void npuK_conv2d_direct_half_level_ep(const npuK_pool *pool, const npuK_window2d *w,
                                      int64_t out_c, const void *x, npuK_dtype x_dtype,
                                      const float *filter, const npuK_epilogue *ep,
                                      const npuK_window2d *pool_window, void *y,
                                      npuK_dtype y_dtype, float *scratch, int n_slots,
                                      int level);
/* DIRECT_BF16 (conv_bf16.c): the direct convolution computing on bfloat16 operands as stored,
 * by VDPBF16PS (AVX512_BF16; npuK_bf16dot): x stored bfloat16, the filter's values bfloat16
 * (float32 with the low 16 bits zero, as the executor widens a bfloat16 filter), y float32 or
 * narrowed to y_dtype by npuK_half_narrow.  Taps in pairs of the flattened (kw, ci) index of
 * each filter row; each output one float32 sum of exact products from +0, rounded to nearest
 * even at each step, bfloat16 subnormal inputs read as zero and subnormal sums flushed:
 * |y - exact| <= k 2^-23 sum|x f| + k 2^-126 + sum of the |x f| with a subnormal factor,
 * k = k_h k_w c (docs/numerics.md, "Direct convolution").  Then the epilogue and the fused
 * pool as DIRECT's rows path: the bits of these sums, npuK_conv_epilogue_f32 and max_pool.
 * The same bits at any thread count.  Takes what DIRECT takes (npuK_conv2d_direct_fits).
 *  _filter_pack: the filter (k_h, k_w, c, out_c) into the packed layout
 *  [k_h][(k_w c + 1) / 2][out_c rounded up to 16][2] (npuK_conv2d_bf16_filter_size bytes),
 *  zeros where no tap or channel is; -1 when some value is not bfloat16 (low bits set).
 *  _packed_ep: the kernel on a packed filter; scratch _packed_scratch_size bytes.  _twin_ep:
 *  the same sums in portable C (VDPBF16PS's arithmetic, flushes included), the CPU's
 *  instructions unused: the test oracle, and what _packed_ep runs where npuK_bf16dot() is 0.
 *  _ep: packs filter into scratch per call, or, where npuK_bf16dot() is 0 or the filter is
 *  not bfloat16, runs npuK_conv2d_direct_half_ep (widening); scratch _scratch_size bytes.
 *  _stored_ep: the filter stored bfloat16 (HWIO, a variable's Cast read as stored: no float32
 *  copy, no check), packed into scratch per call into the words _filter_pack makes of its
 *  widened values, so the bits of _ep on that widening; scratch _stored_scratch_size bytes. */
int npuK_conv2d_bf16_direct_fits(const npuK_window2d *w, int64_t out_c,
                                 const npuK_window2d *pool);
size_t npuK_conv2d_bf16_filter_size(const npuK_window2d *w, int64_t out_c);
int npuK_conv2d_bf16_filter_pack(const npuK_window2d *w, int64_t out_c, const float *filter,
                                 uint16_t *packed);
size_t npuK_conv2d_bf16_direct_packed_scratch_size(const npuK_window2d *w, int64_t out_c,
                                                   const npuK_window2d *pool, int n_slots,
                                                   npuK_dtype y_dtype);
void npuK_conv2d_bf16_direct_packed_ep(const npuK_pool *pool, const npuK_window2d *w,
                                       int64_t out_c, const uint16_t *x, const uint16_t *packed,
                                       const npuK_epilogue *ep,
                                       const npuK_window2d *pool_window, void *y,
                                       npuK_dtype y_dtype, float *scratch, int n_slots);
void npuK_conv2d_bf16_direct_twin_ep(const npuK_pool *pool, const npuK_window2d *w,
                                     int64_t out_c, const uint16_t *x, const uint16_t *packed,
                                     const npuK_epilogue *ep, const npuK_window2d *pool_window,
                                     void *y, npuK_dtype y_dtype, float *scratch, int n_slots);
size_t npuK_conv2d_bf16_direct_scratch_size(const npuK_window2d *w, int64_t out_c,
                                            const npuK_window2d *pool, int n_slots,
                                            npuK_dtype y_dtype);
void npuK_conv2d_bf16_direct_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                                const uint16_t *x, const float *filter, const npuK_epilogue *ep,
                                const npuK_window2d *pool_window, void *y, npuK_dtype y_dtype,
                                float *scratch, int n_slots);
size_t npuK_conv2d_bf16_direct_stored_scratch_size(const npuK_window2d *w, int64_t out_c,
                                                   const npuK_window2d *pool, int n_slots,
                                                   npuK_dtype y_dtype);
void npuK_conv2d_bf16_direct_stored_ep(const npuK_pool *pool, const npuK_window2d *w,
                                       int64_t out_c, const uint16_t *x, const uint16_t *filter,
                                       const npuK_epilogue *ep,
                                       const npuK_window2d *pool_window, void *y,
                                       npuK_dtype y_dtype, float *scratch, int n_slots);
/* depthwise_conv2d likewise (x_dtype, y_dtype F32 too: then npuK_depthwise_conv2d_f32_ep and
 * no scratch): each slot's output rows go in bands whose input rows are widened at once, and
 * each output row is computed (epilogue included) in float32 and narrowed.  scratch:
 * npuK_depthwise_conv2d_half_scratch_size bytes. */
size_t npuK_depthwise_conv2d_half_scratch_size(const npuK_window2d *w, int64_t multiplier,
                                               int n_slots, npuK_dtype x_dtype,
                                               npuK_dtype y_dtype);
void npuK_depthwise_conv2d_half_ep(const npuK_pool *pool, const npuK_window2d *w,
                                   int64_t multiplier, const void *x, npuK_dtype x_dtype,
                                   const float *filter, const npuK_epilogue *ep, void *y,
                                   npuK_dtype y_dtype, float *scratch, int n_slots);
void npuK_depthwise_conv2d_f32_ep(const npuK_pool *pool, const npuK_window2d *w,
                                  int64_t multiplier, const float *x, const float *filter,
                                  const npuK_epilogue *ep, float *y);
void npuK_depthwise_conv2d_f32_ref_ep(const npuK_pool *pool, const npuK_window2d *w,
                                      int64_t multiplier, const float *x, const float *filter,
                                      const npuK_epilogue *ep, float *y);
/* The fast depthwise kernel without its AVX2 clone (what CPUs without AVX2 run), so that the
   tests check both builds of it on any machine; same bits. */
void npuK_depthwise_conv2d_f32_portable_ep(const npuK_pool *pool, const npuK_window2d *w,
                                           int64_t multiplier, const float *x,
                                           const float *filter, const npuK_epilogue *ep,
                                           float *y);

/* A chain of elementwise ops run as one program over y, viewed as (rows, cols) with cols the
 * last dim.  prog[0] is NPUK_EW_LOAD of a FULL operand; each later instruction combines the
 * running value with nothing (UNARY, LEAKY_RELU) or with an operand (BINARY: value OP operand,
 * or operand OP value when swap; PRELU: the operand is the slope, value > 0 ? value : slope *
 * value), the operand being FULL (rows, cols), ROW (cols) or SCALAR (one element).  Ops are the npuK_unop / npuK_binop of the unary and binary kernels, which
 * compute each step, so the result has the bits of the separate ops.  Fast: blocks of about
 * NPUK_EW_BLOCK elements (whole rows when a row is shorter), each block run through the whole
 * program while it is in cache, blocks split over the pool.  _ref: one instruction at a time
 * over the whole tensor with the _ref binary kernels.  operands must not overlap y. */
#define NPUK_EW_BLOCK 1024
/* UNARY_FAST: UNARY by its high_performance kernel (kfast.h: exp, log, tanh, sigmoid), the
   bits of the unfused fast step (each element's result is position-free); _ref runs UNARY. */
typedef enum npuK_ew_kind {
  NPUK_EW_LOAD, NPUK_EW_UNARY, NPUK_EW_LEAKY_RELU, NPUK_EW_BINARY, NPUK_EW_PRELU,
  NPUK_EW_UNARY_FAST
} npuK_ew_kind;
typedef enum npuK_ew_bcast { NPUK_EW_FULL, NPUK_EW_ROW, NPUK_EW_SCALAR } npuK_ew_bcast;
typedef struct npuK_ew_instr {
  uint8_t kind;  /* npuK_ew_kind */
  uint8_t op;    /* npuK_unop or npuK_binop */
  uint8_t bcast; /* npuK_ew_bcast of the operand */
  uint8_t swap;  /* BINARY: operand OP value */
  int16_t operand; /* LOAD, BINARY: index into operands */
  float alpha;     /* LEAKY_RELU */
} npuK_ew_instr;
void npuK_eltwise_f32(const npuK_pool *pool, int n_instr, const npuK_ew_instr *prog, int64_t rows,
                      int64_t cols, const float *const *operands, float *y);
void npuK_eltwise_f32_ref(const npuK_pool *pool, int n_instr, const npuK_ew_instr *prog,
                          int64_t rows, int64_t cols, const float *const *operands, float *y);
/* The same program on operands and an output each stored as float32, float16 or bfloat16
 * (dtypes[k] for operand k): reduced ones are widened and narrowed a block at a time inside
 * the kernel (npuK_cast's conversions), so the result has the bits of widening every operand
 * in full, running npuK_eltwise_f32 and narrowing y, without the full-size float32 copies.
 * -1 (nothing written) when a dtype is none of those three. */
int npuK_eltwise_mixed(const npuK_pool *pool, int n_instr, const npuK_ew_instr *prog,
                       int64_t rows, int64_t cols, const void *const *operands,
                       const npuK_dtype *dtypes, void *y, npuK_dtype y_dtype);

#endif
