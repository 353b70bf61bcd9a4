/*
 * op_bias_add.c — bias_add: y = x + bias, bias added along x's last (channel) axis
 * (TensorFlow BiasAdd).  x has rank >= 2 as TF requires; bias is rank 1 with x's last dim.
 * Attribute data_format: "NHWC" (default; channels last) — "NCHW" is valid TF but this device
 * keeps every activation channels-last, so it is NPU_ERR_UNSUPPORTED.  f32, f64.
 * Gray list: one rounding per element, no accumulation, so it follows its upstream.
 * Kernel view: x is (rows, cols) with cols = the last dim.
 * Gradient: dx = dy, dbias = bias_add_grad(dy) (the sum over every axis but the last).
 */
#include "ops/grad.h"

static npu_status parse(npuX_infer *ic, void *params) {
  (void)params;
  return npuX_check_nhwc(ic); /* shared with the window ops (window.c) */
}

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_COUNT};
  const npuG_value *x = &ic->in[0], *b = &ic->in[1];
  npu_status st = npuX_check_dtype(ic, 0, ok);
  if (!st) st = npuX_check_same_dtype(ic, 0);
  if (st) return st;
  npuX_same_as_input(ic, 0);
  char sx[96], sb[96];
  if (x->ndim >= 0 && x->ndim < 2)
    return npuX_error(ic, NPU_ERR_SHAPE, "input must have rank >= 2, got %s", npuX_shape(sx, x));
  if (b->ndim >= 0 && b->ndim != 1)
    return npuX_error(ic, NPU_ERR_SHAPE, "bias must have rank 1, got %s (input %s)",
                      npuX_shape(sb, b), npuX_shape(sx, x));
  if (x->ndim >= 2 && b->ndim == 1) {
    int64_t c = x->shape[x->ndim - 1], n = b->shape[0];
    if (c >= 0 && n >= 0 && c != n)
      return npuX_error(ic, NPU_ERR_SHAPE,
                        "bias %s must match the last dimension of input %s (%lld vs %lld)",
                        npuX_shape(sb, b), npuX_shape(sx, x), (long long)n, (long long)c);
    if (c < 0) ic->out[0].shape[x->ndim - 1] = n; /* the bias tells the channel count */
  }
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *x = c->in[0], *b = c->in[1];
  npu_tensor *y = c->out[0];
  int64_t cols = x->shape[x->ndim - 1];
  int64_t rows = cols ? x->numel / cols : 0;
  if (x->dtype == NPU_DTYPE_F64) npuK_bias_add_f64(c->pool, rows, cols, x->data, b->data, y->data);
  else npuK_bias_add_f32(c->pool, rows, cols, x->data, b->data, y->data);
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  gc->dx[0] = gc->dy[0];
  gc->dx[1] = npuX_g1(gc, "bias_add_grad", gc->dy[0]);
  return gc->status;
}

const npu_op_def npuX_op_bias_add = {
    .name = "bias_add", .tf_type = "BiasAdd", .args = "data_format",
    .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
    .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer, .run = run, .grad = grad};
