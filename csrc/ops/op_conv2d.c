/*
 * op_conv2d.c — conv2d: 2-D convolution (TensorFlow Conv2D; strictly a cross-correlation).
 * input x is NHWC (n, h, w, c), filter is HWIO (k_h, k_w, c, out_c); y is (n, out_h, out_w,
 * out_c) with out_* from TF's SAME/VALID rule or explicit padding.
 * Attributes: strides and dilations ({1, sh, sw, 1} as TF, {sh, sw}, or one int; default 1),
 * padding ("SAME", "VALID" or "EXPLICIT"; required), explicit_paddings (8 ints in NHWC order,
 * {0, 0, top, bottom, left, right, 0, 0}; with EXPLICIT only), data_format ("NHWC" only).
 * f32 only (the GEMM path is sgemm); under the precision pass x and y may be stored float16 /
 * bfloat16, widened and narrowed a block at a time by the kernel (NPUX_F_HALF_XY).
 * Trust list: a cube op whose products accumulate well in float16 on the reference device.
 * Device: im2col blocks + sgemm with per-thread scratch, or, where the compiler chose it
 * (npuX_call.algo; op_select_implmode high_performance), Winograd F(2x2, 3x3): other rounding,
 * bound in docs/numerics.md; or the direct kernel (the default where it fits; x and y as
 * stored too); or, for a bfloat16 x and filter where the CPU has AVX512_BF16, the direct
 * kernel computing on bfloat16 by VDPBF16PS (NPUK_CONV_DIRECT_BF16, kernels/conv_bf16.c:
 * other rounding, bound in docs/numerics.md).  A constant filter is transformed once for
 * the last two (npuX_call.prepared: U, the packed filter; NPUX_F_PREPARED_FILTER), the
 * stored filter then unread; a variable's filter (a training graph's) stored bfloat16 is read
 * as stored by direct_bf16, not widened by the executor (plan.c: prepare_steps).  Reference: naive loops.
 * Gradient: conv2d_backprop_input(filter, dy) and conv2d_backprop_filter(x, dy).
 */
#include "ops/grad.h"

static npu_status infer(npuX_infer *ic, const void *params) {
  npu_status st = npuX_conv_infer(ic, params, "HWIO");
  if (!st && ic->in[1].ndim == 4) ic->out[0].shape[3] = ic->in[1].shape[3]; /* out_c */
  return st;
}

static size_t scratch_size(const npuX_call *c) {
  const npu_tensor *f = c->in[1];
  npuK_window2d w;
  if (npuX_window_geometry(c->params, c->in[0], f->shape[0], f->shape[1], &w)) return 0;
  /* a prepared filter (NPUX_F_PREPARED_FILTER) needs no room for its per-call transform */
  if (c->algo == NPUK_CONV_WINOGRAD_2X3 && c->prepared)
    return npuK_conv2d_winograd_u_scratch_size(&w, f->shape[3], NULL, c->n_threads);
  if (c->algo == NPUK_CONV_WINOGRAD_2X3)
    return npuK_conv2d_winograd_scratch_size(&w, f->shape[3], NULL, c->n_threads);
  if (c->algo == NPUK_CONV_DIRECT_BF16 && c->prepared && c->in[0]->dtype == NPU_DTYPE_BF16)
    return npuK_conv2d_bf16_direct_packed_scratch_size(&w, f->shape[3], NULL, c->n_threads,
                                                       (npuK_dtype)c->out[0]->dtype);
  if (c->algo == NPUK_CONV_DIRECT_BF16 && f->dtype == NPU_DTYPE_BF16 &&
      c->in[0]->dtype == NPU_DTYPE_BF16) /* a variable's filter read as stored (plan.c) */
    return npuK_conv2d_bf16_direct_stored_scratch_size(&w, f->shape[3], NULL, c->n_threads,
                                                       (npuK_dtype)c->out[0]->dtype);
  if (c->algo == NPUK_CONV_DIRECT_BF16)
    return npuK_conv2d_bf16_direct_scratch_size(&w, f->shape[3], NULL, c->n_threads,
                                                (npuK_dtype)c->out[0]->dtype);
  if (c->algo == NPUK_CONV_DIRECT)
    return npuK_conv2d_direct_half_scratch_size(&w, f->shape[3], NULL, c->n_threads,
                                                (npuK_dtype)c->in[0]->dtype,
                                                (npuK_dtype)c->out[0]->dtype);
  return npuK_conv2d_half_scratch_size(&w, f->shape[3], c->n_threads,
                                       (npuK_dtype)c->in[0]->dtype, (npuK_dtype)c->out[0]->dtype);
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const npu_tensor *x = c->in[0], *f = c->in[1];
  npuK_window2d w;
  npu_status st = npuX_window_call(c, f->shape[0], f->shape[1], &w);
  if (st) return st;
  if (reference)
    npuK_conv2d_f32_ref(c->pool, &w, f->shape[3], x->data, f->data, c->out[0]->data, c->scratch,
                        c->n_threads);
  else if (c->algo == NPUK_CONV_WINOGRAD_2X3 && c->prepared) /* U of a constant filter */
    npuK_conv2d_f32_winograd_u_ep(c->pool, &w, f->shape[3], x->data, c->prepared, NULL, NULL,
                                  c->out[0]->data, c->scratch, c->n_threads);
  else if (c->algo == NPUK_CONV_WINOGRAD_2X3) /* float32 x and y only (compile/implmode.c) */
    npuK_conv2d_f32_winograd_ep(c->pool, &w, f->shape[3], x->data, f->data, NULL, NULL,
                                c->out[0]->data, c->scratch, c->n_threads);
  else if (c->algo == NPUK_CONV_DIRECT_BF16 && x->dtype == NPU_DTYPE_BF16 && c->prepared)
    /* a constant filter packed once (compile/plan.c) */
    npuK_conv2d_bf16_direct_packed_ep(c->pool, &w, f->shape[3], x->data, c->prepared, NULL, NULL,
                                      c->out[0]->data, (npuK_dtype)c->out[0]->dtype, c->scratch,
                                      c->n_threads);
  else if (c->algo == NPUK_CONV_DIRECT_BF16 && x->dtype == NPU_DTYPE_BF16 &&
           f->dtype == NPU_DTYPE_BF16)
    /* a variable's filter stored bfloat16 by its Cast, read as stored (plan.c: prepare_steps
       leaves it unwidened under this algorithm), packed per call */
    npuK_conv2d_bf16_direct_stored_ep(c->pool, &w, f->shape[3], x->data, f->data, NULL, NULL,
                                      c->out[0]->data, (npuK_dtype)c->out[0]->dtype, c->scratch,
                                      c->n_threads);
  else if (c->algo == NPUK_CONV_DIRECT_BF16 && x->dtype == NPU_DTYPE_BF16)
    /* x bfloat16 as stored; the filter widened from bfloat16 (compile/implmode.c): packed
       per call, or the widening kernel where its values are not bfloat16 */
    npuK_conv2d_bf16_direct_ep(c->pool, &w, f->shape[3], x->data, f->data, NULL, NULL,
                               c->out[0]->data, (npuK_dtype)c->out[0]->dtype, c->scratch,
                               c->n_threads);
  else if (c->algo == NPUK_CONV_DIRECT || c->algo == NPUK_CONV_DIRECT_BF16)
    npuK_conv2d_direct_half_ep(c->pool, &w, f->shape[3], x->data, (npuK_dtype)x->dtype, f->data,
                               NULL, NULL, c->out[0]->data, (npuK_dtype)c->out[0]->dtype,
                               c->scratch, c->n_threads);
  else /* x and y as stored (NPUX_F_HALF_XY): float32, or float16 / bfloat16 */
    npuK_conv2d_half_ep(c->pool, &w, f->shape[3], x->data, (npuK_dtype)x->dtype, f->data, NULL,
                        c->out[0]->data, (npuK_dtype)c->out[0]->dtype, c->scratch, c->n_threads);
  return NPU_OK;
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

static npu_status grad(npuX_grad *gc) {
  return npuX_conv_grad(gc, "conv2d_backprop_input", "conv2d_backprop_filter");
}

const npu_op_def npuX_op_conv2d = {
    .name = "conv2d", .tf_type = "Conv2D",
    .args = "strides,padding,data_format,dilations", .min_inputs = 2, .max_inputs = 2, .n_outputs = 1,
    .prec = NPUX_PREC_TRUST, .flags = NPUX_F_HALF_XY | NPUX_F_PREPARED_FILTER, .tune = NPUX_TUNE_CONV, .parse = npuX_conv_parse, .infer = infer,
    .scratch_size = scratch_size, .run = run, .run_ref = run_ref, .grad = grad};
