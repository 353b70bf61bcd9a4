/*
 * op_depth_to_space.c — depth_to_space: channel blocks moved into b x b spatial blocks
 * (TensorFlow DepthToSpace, NHWC): x (n, h, w, c), c divisible by b * b, gives y (n, h * b,
 * w * b, c / (b * b)) with y[n, h * b + i, w * b + j, k] = x[n, h, w, (i * b + j) * c' + k].
 * Attributes block_size (required, >= 2; also positional: npu.depth_to_space(x, 2)) and
 * data_format ("NHWC" only).  Any dtype.  Gray list.
 * Kernel: x viewed as (n, h, w, b, b, c') and transposed to (n, h, b, w, b, c'):
 * npuK_transpose (tiled) and npuK_transpose_ref.  space_to_depth is the inverse.
 */
#include "ops/ops.h"

static npu_status infer(npuX_infer *ic, const void *params) {
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  int64_t b;
  npu_status st = npuX_block_size_infer(ic, params, &b);
  if (st || x->ndim < 0) return st;
  char sx[96];
  if (x->shape[3] >= 0 && x->shape[3] % (b * b))
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "channels of input %s are not divisible by block_size^2 = %lld",
                      npuX_shape(sx, x), (long long)(b * b));
  y->shape[0] = x->shape[0];
  y->shape[1] = x->shape[1] >= 0 ? x->shape[1] * b : -1;
  y->shape[2] = x->shape[2] >= 0 ? x->shape[2] * b : -1;
  y->shape[3] = x->shape[3] >= 0 ? x->shape[3] / (b * b) : -1;
  return NPU_OK;
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const npu_tensor *x = c->in[0];
  const int64_t b = ((const npuX_block_size_params *)c->params)->block;
  const int64_t dims[6] = {x->shape[0], x->shape[1], x->shape[2], b, b, x->shape[3] / (b * b)};
  return npuX_block_size_run(c, dims, reference);
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

const npu_op_def npuX_op_depth_to_space = {
    .name = "depth_to_space", .tf_type = "DepthToSpace", .args = "block_size", .min_inputs = 1,
    .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_GRAY,
    .parse = npuX_block_size_parse, .infer = infer, .run = run, .run_ref = run_ref};
