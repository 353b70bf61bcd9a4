/*
 * op_depthwise_conv2d.c — depthwise_conv2d: each input channel convolved with its own
 * multiplier filters (TensorFlow DepthwiseConv2dNative).  x is NHWC (n, h, w, c), filter is
 * (k_h, k_w, c, m); y is (n, out_h, out_w, c * m), output channel ci * m + j from input channel
 * ci, out_* from TF's SAME/VALID rule or explicit padding.
 * Attributes: strides and dilations ({1, sh, sw, 1} as TF, {sh, sw}, or one int; default 1),
 * padding ("SAME", "VALID" or "EXPLICIT"; required), explicit_paddings (8 ints in NHWC order,
 * {0, 0, top, bottom, left, right, 0, 0}; with EXPLICIT only), data_format ("NHWC" only).
 * f32 only (the kernels are float); under the precision pass x and y may be stored float16 /
 * bfloat16, widened by bands of rows and narrowed by rows in the kernel (NPUX_F_HALF_XY).
 * Trust list: convolutions are the reference device's float16 cube work, and each output is a
 * short sum of k_h * k_w products.  Device: direct loops vectorised over channels.
 * Reference: naive loops.
 * Gradient: depthwise_conv2d_backprop_input(filter, dy) and
 * depthwise_conv2d_backprop_filter(x, dy).
 */
#include "ops/grad.h"

/* Output channels c * m, c from the filter or else from the input. */
static npu_status infer(npuX_infer *ic, const void *params) {
  npu_status st = npuX_conv_infer(ic, params, "(k_h, k_w, c, m)");
  const npuG_value *x = &ic->in[0], *f = &ic->in[1];
  if (!st && f->ndim == 4) {
    int64_t c = f->shape[2] >= 0 ? f->shape[2] : x->ndim == 4 ? x->shape[3] : -1;
    ic->out[0].shape[3] = c >= 0 && f->shape[3] >= 0 ? c * f->shape[3] : -1;
  }
  return st;
}

/* Scratch only for x or y stored float16 / bfloat16 (NPUX_F_HALF_XY): bands of widened rows. */
static size_t scratch_size(const npuX_call *c) {
  const npu_tensor *f = c->in[1];
  npuK_window2d w;
  if (npuX_window_geometry(c->params, c->in[0], f->shape[0], f->shape[1], &w)) return 0;
  return npuK_depthwise_conv2d_half_scratch_size(&w, f->shape[3], c->n_threads,
                                                 (npuK_dtype)c->in[0]->dtype,
                                                 (npuK_dtype)c->out[0]->dtype);
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const npu_tensor *x = c->in[0], *f = c->in[1];
  npuK_window2d w;
  npu_status st = npuX_window_call(c, f->shape[0], f->shape[1], &w);
  if (st) return st;
  if (reference)
    npuK_depthwise_conv2d_f32_ref(c->pool, &w, f->shape[3], x->data, f->data, c->out[0]->data);
  else /* x and y as stored (NPUX_F_HALF_XY) */
    npuK_depthwise_conv2d_half_ep(c->pool, &w, f->shape[3], x->data, (npuK_dtype)x->dtype,
                                  f->data, NULL, c->out[0]->data, (npuK_dtype)c->out[0]->dtype,
                                  c->scratch, c->n_threads);
  return NPU_OK;
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

static npu_status grad(npuX_grad *gc) {
  return npuX_conv_grad(gc, "depthwise_conv2d_backprop_input", "depthwise_conv2d_backprop_filter");
}

const npu_op_def npuX_op_depthwise_conv2d = {
    .name = "depthwise_conv2d", .tf_type = "DepthwiseConv2dNative",
    .args = "strides,padding,data_format,dilations", .min_inputs = 2,
    .max_inputs = 2, .n_outputs = 1, .prec = NPUX_PREC_TRUST, .flags = NPUX_F_HALF_XY, .tune = NPUX_TUNE_THREADS,
    .parse = npuX_conv_parse, .infer = infer, .scratch_size = scratch_size, .run = run,
    .run_ref = run_ref, .grad = grad};
