/*
 * op_batch_to_space_nd.c — batch_to_space_nd: the inverse of space_to_batch_nd (TensorFlow
 * BatchToSpaceND): the batch's block positions move back into the M spatial dims after the
 * batch, then crops are cut off.  x is (batch * prod(block_shape), spatial[0..M), rest...);
 * y is (batch, spatial[i] * block_shape[i] - crop_before_i - crop_after_i ..., rest...).
 * Operands block_shape (M ints >= 1) and crops (M (before, after) pairs >= 0, at most the
 * block-expanded dim; Lua may nest them): attributes (also positional:
 * npu.batch_to_space_nd(x, {2, 2}, {0, 0, 1, 1})) or TF's trailing inputs 2, 3 (operands.h;
 * known by compile time).  x's batch must be divisible by prod(block_shape).  Any dtype.
 * Gray list.  Kernel: npuK_batch_to_space (row copies).
 */
#include "ops/operands.h"

static const char *const operand_names[] = {"block_shape", "crops"};
#define M_MAX NPUX_BLOCK_M_MAX

static npu_status parse(npuX_infer *ic, void *params) {
  return npuX_block_parse(ic, operand_names, params);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  int64_t block[M_MAX], pads[2 * M_MAX], prod;
  int m;
  npu_status st = npuX_block_infer(ic, operand_names, params, block, pads, &m, &prod);
  if (st || m < 0) return st;
  char sx[96], sb[96], sp[96];
  for (int i = 0; i < m; i++) {
    int64_t dim = x->shape[i + 1];
    if (dim < 0) continue;
    int64_t full = dim * block[i], out = full - pads[2 * i] - pads[2 * i + 1];
    if (out < 0)
      return npuX_error(ic, NPU_ERR_SHAPE,
                        "crops %s remove more than spatial dim %d of input %s times block_shape "
                        "%s holds",
                        npuC_shape_str(sp, sizeof sp, 2 * m, pads), i, npuX_shape(sx, x),
                        npuC_shape_str(sb, sizeof sb, m, block));
    y->shape[i + 1] = out;
  }
  if (x->shape[0] >= 0 && x->shape[0] % prod)
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "the batch of input %s is not divisible by the product of block_shape %s",
                      npuX_shape(sx, x), npuC_shape_str(sb, sizeof sb, m, block));
  y->shape[0] = x->shape[0] >= 0 ? x->shape[0] / prod : -1;
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *x = c->in[0];
  int64_t block[M_MAX], pads[2 * M_MAX], inner;
  int m = npuX_block_values(c, c->params, block, pads, &inner);
  npuK_batch_to_space(c->pool, npu_dtype_size(x->dtype), m, c->out[0]->shape[0], x->shape + 1,
                      block, pads, inner, x->data, c->out[0]->data);
  return NPU_OK;
}

const npu_op_def npuX_op_batch_to_space_nd = {
    .name = "batch_to_space_nd", .tf_type = "BatchToSpaceND", .args = "block_shape,crops",
    .min_inputs = 1, .max_inputs = 3, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse,
    .infer = infer, .run = run, .tf_const_inputs = "block_shape,crops"};
