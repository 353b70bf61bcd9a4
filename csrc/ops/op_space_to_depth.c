/*
 * op_space_to_depth.c — space_to_depth: b x b spatial blocks moved into channels (TensorFlow
 * SpaceToDepth, NHWC): x (n, h, w, c), h and w divisible by b, gives y (n, h / b, w / b,
 * c * b * b) with y[n, i, j, (bi * b + bj) * c + k] = x[n, i * b + bi, j * b + bj, k].
 * Attributes block_size (required, >= 2; also positional: npu.space_to_depth(x, 2)) and
 * data_format ("NHWC" only).  Any dtype.  Gray list.
 * Kernel: x viewed as (n, h', b, w', b, c) and transposed to (n, h', w', b, b, c):
 * npuK_transpose (tiled) and npuK_transpose_ref.  depth_to_space is the inverse.
 */
#include "ops/ops.h"

static npu_status infer(npuX_infer *ic, const void *params) {
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  int64_t b;
  npu_status st = npuX_block_size_infer(ic, params, &b);
  if (st || x->ndim < 0) return st;
  char sx[96];
  for (int d = 1; d <= 2; d++)
    if (x->shape[d] >= 0 && x->shape[d] % b)
      return npuX_error(ic, NPU_ERR_SHAPE,
                        "height and width of input %s must be divisible by block_size %lld",
                        npuX_shape(sx, x), (long long)b);
  y->shape[0] = x->shape[0];
  y->shape[1] = x->shape[1] >= 0 ? x->shape[1] / b : -1;
  y->shape[2] = x->shape[2] >= 0 ? x->shape[2] / b : -1;
  y->shape[3] = x->shape[3] >= 0 ? x->shape[3] * b * b : -1;
  return NPU_OK;
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const npu_tensor *x = c->in[0];
  const int64_t b = ((const npuX_block_size_params *)c->params)->block;
  const int64_t dims[6] = {x->shape[0], x->shape[1] / b, b, x->shape[2] / b, b, x->shape[3]};
  return npuX_block_size_run(c, dims, reference);
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

const npu_op_def npuX_op_space_to_depth = {
    .name = "space_to_depth", .tf_type = "SpaceToDepth", .args = "block_size", .min_inputs = 1,
    .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_GRAY,
    .parse = npuX_block_size_parse, .infer = infer, .run = run, .run_ref = run_ref};
