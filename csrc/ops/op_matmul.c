/*
 * op_matmul.c — matmul: C = op(A) op(B) for rank-2 A and B (TensorFlow MatMul with its
 * transpose_a / transpose_b attributes).  Trust list: a cube op, may run in float16.
 * Device: OpenBLAS sgemm/dgemm; under the precision pass A, B and C may be stored float16 /
 * bfloat16, widened and narrowed a GEMM block at a time (NPUX_F_HALF_XY, NPUX_F_HALF_B); A and
 * B both bfloat16 on a CPU with AVX512_BF16: algorithm BF16DOT, the native bfloat16 GEMM on them
 * as stored (kernels/gemm_bf16.c; chosen by compile/implmode.c).  Float32 of the shapes where
 * it wins: algorithm F32TILE, our AVX-512F tiles (kernels/gemm_f32.c), a constant B packed
 * once by the plan.
 * Reference: the naive triple loop.  int32 (TensorFlow's int32 MatMul, e.g. in TF.js models): the
 * plain triple loop npuK_matmul_i32 on both paths, wrapping modulo 2^32 as TensorFlow; never
 * reduced.
 * Gradient (TensorFlow's _MatMulGrad): two products with the transposes folded into the
 * attributes, e.g. dA = dC B^T, dB = A^T dC.
 */
#include "kernels/kimport.h"
#include "ops/grad.h"

typedef struct matmul_params {
  bool transpose_a, transpose_b;
} matmul_params;
_Static_assert(sizeof(matmul_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  matmul_params *p = params;
  npu_status st = npuX_attr_bool(ic, "transpose_a", &p->transpose_a);
  if (!st) st = npuX_attr_bool(ic, "transpose_b", &p->transpose_b);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_I32, NPU_DTYPE_COUNT};
  const matmul_params *p = params;
  const npuG_value *a = &ic->in[0], *b = &ic->in[1];
  npu_status st = npuX_check_dtype(ic, 0, ok);
  if (!st) st = npuX_check_same_dtype(ic, 0);
  if (st) return st;
  char sa[96], sb[96];
  /* an unknown rank (a host_func's output: its shape is known only when it runs) is taken as
     a matrix of unknown dimensions; the step is shaped, and checked again, when it runs */
  static const npuG_value any_matrix = {.ndim = 2, .shape = {-1, -1}};
  if (a->ndim < 0) a = &any_matrix;
  if (b->ndim < 0) b = &any_matrix;
  if (a->ndim != 2 || b->ndim != 2)
    return npuX_error(ic, NPU_ERR_SHAPE, "needs two matrices, got shapes %s and %s",
                      npuX_shape(sa, a), npuX_shape(sb, b));
  int64_t m = a->shape[p->transpose_a ? 1 : 0], ka = a->shape[p->transpose_a ? 0 : 1];
  int64_t kb = b->shape[p->transpose_b ? 1 : 0], n = b->shape[p->transpose_b ? 0 : 1];
  if (ka >= 0 && kb >= 0 && ka != kb)
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "inner dimensions differ: %s x %s%s%s (%lld vs %lld)", npuX_shape(sa, a),
                      npuX_shape(sb, b), p->transpose_a ? " (transpose_a)" : "",
                      p->transpose_b ? " (transpose_b)" : "", (long long)ka, (long long)kb);
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = ic->in[0].dtype, .ndim = 2, .shape = {m, n}};
  return NPU_OK;
}

/* Scratch only for A or C stored float16 / bfloat16 (NPUX_F_HALF_XY): their blocks in float32. */
static size_t scratch_size(const npuX_call *c) {
  const matmul_params *p = c->params;
  if (c->in[0]->dtype == NPU_DTYPE_I32) return 0;
  return npuX_matmul_scratch(c, p->transpose_a, p->transpose_b);
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const matmul_params *p = c->params;
  const npu_tensor *a = c->in[0], *b = c->in[1];
  npu_tensor *y = c->out[0];
  int64_t m = y->shape[0], n = y->shape[1], k = a->shape[p->transpose_a ? 0 : 1];
  if (a->dtype == NPU_DTYPE_I32) {
    npuK_matmul_i32(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data, b->data, y->data);
  } else if (a->dtype == NPU_DTYPE_F64) {
    (reference ? npuK_matmul_f64_ref : npuK_matmul_f64_blas)(
        c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data, b->data, y->data);
  } else if (reference) {
    npuK_matmul_f32_ref(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data, b->data,
                        y->data);
  } else if (c->prepared && npuK_gemm_f32_takes(c->algo, (npuK_dtype)a->dtype,
                                                (npuK_dtype)b->dtype, (npuK_dtype)y->dtype)) {
    /* a constant B packed once by the plan (plan.c): B itself is not read */
    npuK_gemm_f32_packed_level_ep(c->pool, p->transpose_a, m, n, k, a->data, c->prepared, NULL,
                                  y->data, c->n_threads, 1);
  } else if (npuK_gemm_f32_takes(c->algo, (npuK_dtype)a->dtype, (npuK_dtype)b->dtype,
                                 (npuK_dtype)y->dtype)) {
    /* B read in place (no scratch sized: c->scratch may be NULL) or packed into c->scratch */
    npuK_gemm_f32_ep(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data, b->data, NULL,
                     y->data, c->scratch, c->n_threads);
  } else if (c->prepared &&
             npuK_gemm_bf16_takes(c->algo, (npuK_dtype)a->dtype, (npuK_dtype)b->dtype)) {
    /* a constant B packed once by the plan (plan.c): B itself is not read */
    npuK_gemm_bf16_packed_ep(c->pool, p->transpose_a, m, n, k, a->data, c->prepared, NULL,
                             y->data, (npuK_dtype)y->dtype, c->scratch, c->n_threads);
  } else { /* A, B and C as stored (NPUX_F_HALF_XY, _HALF_B): float32, or float16 / bfloat16 */
    npuK_matmul_half_b_algo_ep(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data,
                               (npuK_dtype)a->dtype, b->data, (npuK_dtype)b->dtype, NULL,
                               y->data, (npuK_dtype)y->dtype, c->scratch, c->n_threads, c->algo);
  }
  return NPU_OK;
}

/* m(p, q, ta, tb) = op(p) op(q). */
static int mm(npuX_grad *gc, int p, int q, bool ta, bool tb) {
  int in[2] = {p, q};
  npu_attr a[2] = {npuX_abool("transpose_a", ta), npuX_abool("transpose_b", tb)};
  return npuX_gadd(gc, "matmul", 2, in, 2, a);
}

static npu_status grad(npuX_grad *gc) {
  const matmul_params *p = (const matmul_params *)gc->params.bytes;
  int a = gc->x[0], b = gc->x[1], d = gc->dy[0];
  if (!p->transpose_a && !p->transpose_b) {
    gc->dx[0] = mm(gc, d, b, false, true);
    gc->dx[1] = mm(gc, a, d, true, false);
  } else if (!p->transpose_a && p->transpose_b) {
    gc->dx[0] = mm(gc, d, b, false, false);
    gc->dx[1] = mm(gc, d, a, true, false);
  } else if (p->transpose_a && !p->transpose_b) {
    gc->dx[0] = mm(gc, b, d, false, true);
    gc->dx[1] = mm(gc, a, d, false, false);
  } else {
    gc->dx[0] = mm(gc, b, d, true, true);
    gc->dx[1] = mm(gc, d, a, true, true);
  }
  return gc->status;
}

bool npuX_matmul_transpose_b(const void *params) {
  return ((const matmul_params *)params)->transpose_b;
}

size_t npuX_matmul_scratch(const npuX_call *c, bool transpose_a, bool transpose_b) {
  const npu_tensor *a = c->in[0], *y = c->out[0];
  if (a->ndim != 2 || y->ndim != 2) return 0;
  npuK_dtype a_dtype = (npuK_dtype)a->dtype, b_dtype = (npuK_dtype)c->in[1]->dtype;
  int64_t m = y->shape[0], n = y->shape[1], k = a->shape[transpose_a ? 0 : 1];
  if (npuK_gemm_f32_takes(c->algo, a_dtype, b_dtype, (npuK_dtype)y->dtype))
    return c->prepared ? 0 /* f32tile on B packed once: no scratch */
                       : npuK_gemm_f32_scratch_size(transpose_b, m, n, k, c->n_threads);
  if (npuK_gemm_bf16_takes(c->algo, a_dtype, b_dtype))
    return c->prepared /* B packed once (NPUX_F_PREPARED_FILTER): room for a transposed A only */
               ? npuK_gemm_bf16_packed_scratch_size(transpose_a, m, k)
               : npuK_gemm_bf16_scratch_size(transpose_a, transpose_b, m, n, k, c->n_threads);
  return npuK_matmul_half_b_scratch_size(m, n, k, c->n_threads, a_dtype, b_dtype,
                                         (npuK_dtype)y->dtype, c->algo);
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

const npu_op_def npuX_op_matmul = {
    .name = "matmul", .tf_type = "MatMul", .args = "transpose_a,transpose_b",
    .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
    .prec = NPUX_PREC_TRUST, .flags = NPUX_F_HALF_XY | NPUX_F_HALF_B | NPUX_F_PREPARED_FILTER, .tune = NPUX_TUNE_GEMM,
    .parse = parse, .infer = infer,
    .scratch_size = scratch_size, .run = run, .run_ref = run_ref, .grad = grad};
