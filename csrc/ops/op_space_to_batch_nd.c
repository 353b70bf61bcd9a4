/*
 * op_space_to_batch_nd.c — space_to_batch_nd: the M spatial dims after the batch padded,
 * then cut into block_shape blocks whose positions move into the batch (TensorFlow
 * SpaceToBatchND; with batch_to_space_nd it is how TF expresses dilated convolutions).
 * x is (batch, spatial[0..M), rest...); y is (batch * prod(block_shape),
 * (spatial[i] + pad_before_i + pad_after_i) / block_shape[i] ..., rest...), zeros where the
 * padding is read.  Operands block_shape (M ints >= 1) and paddings (M (before, after) pairs
 * >= 0; Lua may nest them: {{0, 0}, {1, 1}}): attributes (also positional:
 * npu.space_to_batch_nd(x, {2, 2}, {0, 0, 1, 1})) or TF's trailing inputs 2, 3 (operands.h;
 * known by compile time).  Each padded spatial dim must be divisible by its block.  Any dtype.
 * Gray list.  Kernel: npuK_space_to_batch (row copies).
 */
#include "ops/operands.h"

static const char *const operand_names[] = {"block_shape", "paddings"};
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
    int64_t padded = dim + pads[2 * i] + pads[2 * i + 1];
    if (padded % block[i])
      return npuX_error(ic, NPU_ERR_SHAPE,
                        "spatial dim %d of input %s, padded by paddings %s, is not divisible by "
                        "block_shape %s",
                        i, npuX_shape(sx, x), npuC_shape_str(sp, sizeof sp, 2 * m, pads),
                        npuC_shape_str(sb, sizeof sb, m, block));
    y->shape[i + 1] = padded / block[i];
  }
  y->shape[0] = x->shape[0] >= 0 ? x->shape[0] * prod : -1;
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *x = c->in[0];
  int64_t block[M_MAX], pads[2 * M_MAX], inner;
  int m = npuX_block_values(c, c->params, block, pads, &inner);
  npuK_space_to_batch(c->pool, npu_dtype_size(x->dtype), m, x->shape[0], x->shape + 1, block,
                      pads, inner, x->data, c->out[0]->data);
  return NPU_OK;
}

const npu_op_def npuX_op_space_to_batch_nd = {
    .name = "space_to_batch_nd", .tf_type = "SpaceToBatchND", .args = "block_shape,paddings",
    .min_inputs = 1, .max_inputs = 3, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse,
    .infer = infer, .run = run, .tf_const_inputs = "block_shape,paddings"};
