/*
 * op_conv2d_backprop_filter.c — conv2d_backprop_filter: conv2d's filter gradient
 * (TensorFlow Conv2DBackpropFilter, whose filter_sizes input is an attribute here): inputs
 * (x, dy) — the convolution's NHWC input and its output's gradient; attribute filter_sizes
 * (the filter's shape, HWIO (k_h, k_w, c, out_c)) and conv2d's window attributes (strides,
 * dilations, padding, explicit_paddings, data_format).  f32.
 * Trust list, as its forward op: sums of products.  Kernel: register tiles (conv_bwd.c);
 * reference: the direct loops of window_grad.c, bit for bit the same (kgrad.h).
 * Under mixed bfloat16 (allow_mix_precision_bf16, mixed_bfloat16) on a CPU with AVX512_BF16
 * (npuK_bf16dot()), x and dy reach the kernel as stored, bfloat16, and df is written as
 * stored (NPUX_F_BF16_DOT, compile/precision.c): VDPBF16PS over pairs of pixels
 * (conv_bwd_bf16.c), |df - exact| <= 129 2^-24 sum|x dy| + 2 n out_h out_w 2^-126 (kgrad.h,
 * docs/numerics.md); explain shows algo "bf16dot".  Elsewhere, or with NPU_NO_AVX512BF16=1,
 * the executor widens them into float32 for the kernel above and narrows df.
 */
#include "ops/grad.h"

static npu_status parse(npuX_infer *ic, void *params) {
  return npuX_window_grad_parse(ic, params, false, "filter_sizes");
}

static npu_status infer(npuX_infer *ic, const void *params) {
  return npuX_filter_grad_infer(ic, params, false);
}

/* x and dy stored bfloat16 by the precision pass, which does that only where npuK_bf16dot()
   (NPUX_F_BF16_DOT): the bfloat16 kernel's; decided alike for the scratch and the run */
static bool bf16_operands(const npuX_call *c) {
  return c->in[0]->dtype == NPU_DTYPE_BF16 && c->in[1]->dtype == NPU_DTYPE_BF16;
}

/* float64 accumulators, one per filter element (kgrad.h), and for bfloat16 operands dy's
   pairs too; none when the window does not fit (run reports that) */
static size_t scratch_size(const npuX_call *c) {
  const npuX_window_grad_params *p = c->params;
  const npu_tensor *x = c->in[0], *f = c->out[0];
  npuK_window2d w;
  if (npuX_window_geometry(&p->win, x, f->shape[0], f->shape[1], &w)) return 0;
  if (bf16_operands(c)) return npuK_conv2d_backprop_filter_bf16_scratch_size(&w, f->shape[3]);
  return npuK_filter_grad_f32_scratch_size(&w, f->shape[3]);
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const npu_tensor *x = c->in[0], *f = c->out[0];
  npuK_window2d w;
  npu_status st = npuX_window_grad_geometry(c, x->shape[0], x->shape, f->shape[0], f->shape[1], &w);
  if (st) return st;
  if (!reference && bf16_operands(c)) /* as stored (NPUX_F_BF16_DOT): df float32 or reduced */
    npuK_conv2d_backprop_filter_bf16(c->pool, &w, f->shape[3], x->data, c->in[1]->data,
                                     f->data, (npuK_dtype)f->dtype, c->scratch);
  else
    (reference ? npuK_conv2d_backprop_filter_f32_ref : npuK_conv2d_backprop_filter_f32)(
        c->pool, &w, f->shape[3], x->data, c->in[1]->data, c->out[0]->data, c->scratch);
  return NPU_OK;
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

const npu_op_def npuX_op_conv2d_backprop_filter = {
    .name = "conv2d_backprop_filter", .tf_type = "Conv2DBackpropFilter", .min_inputs = 2,
    .max_inputs = 2, .n_outputs = 1, .prec = NPUX_PREC_TRUST, .flags = NPUX_F_BF16_DOT,
    .parse = parse, .infer = infer,
    .scratch_size = scratch_size, .run = run, .run_ref = run_ref};
