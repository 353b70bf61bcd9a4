/*
 * op_batch_matmul.c — batch_matmul: matrix products over batch dims (TensorFlow BatchMatMulV2,
 * also V3 with one dtype).  Inputs x (..., m, k) and y (..., k, n), ranks >= 2; attributes
 * adj_x / adj_y (default false: transpose the last two dims of x / y first; real dtypes, so
 * the adjoint is the transpose).  The batch dims (all but the last two) broadcast by NumPy's
 * rules; the output is (broadcast batch..., m, n).  f32, f64, i32.
 * Trust list: a cube op, as matmul.
 * Device: one sgemm/dgemm per batch (npuK_batch_matmul_*: one for all when y is shared and x
 * dense).  Reference: the naive matmul loop per batch.  int32: the plain triple loop per
 * batch on both paths (npuK_batch_matmul_i32), wrapping modulo 2^32 as TensorFlow.
 */
#include "kernels/kimport.h"
#include "kernels/kmath.h"
#include "ops/opmath.h"

typedef struct bmm_params {
  bool adj_x, adj_y;
} bmm_params;
_Static_assert(sizeof(bmm_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  bmm_params *p = params;
  npu_status st = npuX_attr_bool(ic, "adj_x", &p->adj_x);
  if (!st) st = npuX_attr_bool(ic, "adj_y", &p->adj_y);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_I32, NPU_DTYPE_COUNT};
  const bmm_params *p = params;
  const npuG_value *a = &ic->in[0], *b = &ic->in[1];
  npu_status st = npuX_check_dtype(ic, 0, ok);
  if (!st) st = npuX_check_same_dtype(ic, 0);
  if (st) return st;
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = a->dtype, .ndim = -1};
  char sa[96], sb[96];
  if ((a->ndim >= 0 && a->ndim < 2) || (b->ndim >= 0 && b->ndim < 2))
    return npuX_error(ic, NPU_ERR_SHAPE, "needs inputs of rank >= 2, got shapes %s and %s",
                      npuX_shape(sa, a), npuX_shape(sb, b));
  if (a->ndim < 0 || b->ndim < 0) return NPU_OK;
  int ra = a->ndim, rb = b->ndim;
  int64_t m = a->shape[ra - (p->adj_x ? 1 : 2)], ka = a->shape[ra - (p->adj_x ? 2 : 1)];
  int64_t kb = b->shape[rb - (p->adj_y ? 1 : 2)], n = b->shape[rb - (p->adj_y ? 2 : 1)];
  if (ka >= 0 && kb >= 0 && ka != kb)
    return npuX_error(ic, NPU_ERR_SHAPE, "inner dimensions differ: %s x %s%s%s (%lld vs %lld)",
                      npuX_shape(sa, a), npuX_shape(sb, b), p->adj_x ? " (adj_x)" : "",
                      p->adj_y ? " (adj_y)" : "", (long long)ka, (long long)kb);
  npuG_value ba = {.dtype = a->dtype, .ndim = ra - 2}, bb = {.dtype = a->dtype, .ndim = rb - 2};
  for (int d = 0; d < ra - 2; d++) ba.shape[d] = a->shape[d];
  for (int d = 0; d < rb - 2; d++) bb.shape[d] = b->shape[d];
  npuG_value batch;
  if (npuX_broadcast(ic, &ba, &bb, &batch) != NPU_OK)
    return npuX_error(ic, NPU_ERR_SHAPE, "batch dimensions of %s and %s cannot be broadcast",
                      npuX_shape(sa, a), npuX_shape(sb, b));
  if (batch.ndim + 2 > NPU_MAX_DIMS)
    return npuX_error(ic, NPU_ERR_SHAPE, "the output would have rank %d, at most %d",
                      batch.ndim + 2, NPU_MAX_DIMS);
  ic->out[0] = batch;
  ic->out[0].ndim = batch.ndim + 2;
  ic->out[0].shape[batch.ndim] = m;
  ic->out[0].shape[batch.ndim + 1] = n;
  return NPU_OK;
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const bmm_params *p = c->params;
  const npu_tensor *a = c->in[0], *b = c->in[1];
  npu_tensor *y = c->out[0];
  int bn = y->ndim - 2;
  int64_t m = y->shape[bn], n = y->shape[bn + 1], k = a->shape[a->ndim - (p->adj_x ? 2 : 1)];
  int64_t sa[NPU_MAX_DIMS], sb[NPU_MAX_DIMS];
  npuX_strides_of(a->ndim - 2, a->shape, bn, y->shape, sa);
  npuX_strides_of(b->ndim - 2, b->shape, bn, y->shape, sb);
  if (y->dtype == NPU_DTYPE_I32)
    npuK_batch_matmul_i32(c->pool, p->adj_x, p->adj_y, bn, y->shape, sa, sb, m, n, k, a->data,
                          b->data, y->data);
  else if (y->dtype == NPU_DTYPE_F64)
    (reference ? npuK_batch_matmul_f64_ref : npuK_batch_matmul_f64)(
        c->pool, p->adj_x, p->adj_y, bn, y->shape, sa, sb, m, n, k, a->data, b->data, y->data);
  else
    (reference ? npuK_batch_matmul_f32_ref : npuK_batch_matmul_f32)(
        c->pool, p->adj_x, p->adj_y, bn, y->shape, sa, sb, m, n, k, a->data, b->data, y->data);
  return NPU_OK;
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

const npu_op_def npuX_op_batch_matmul = {
    .name = "batch_matmul", .tf_type = "BatchMatMulV2", .args = "adj_x,adj_y", .min_inputs = 2, .max_inputs = 2,
    .n_outputs = 1, .prec = NPUX_PREC_TRUST, .parse = parse, .infer = infer, .run = run,
    .run_ref = run_ref};
