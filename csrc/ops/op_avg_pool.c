/*
 * op_avg_pool.c — avg_pool: the mean over each k_h x k_w window (TensorFlow AvgPool).
 * x and y are NHWC: (n, h, w, c) -> (n, out_h, out_w, c), out_* by TF's SAME/VALID rule;
 * the sum is divided by the number of non-padded positions, as TF does.
 * Attributes: ksize (required) and strides (default 1), each {1, kh, kw, 1} as TF, {kh, kw}
 * or one int; padding ("SAME" or "VALID", required); data_format ("NHWC" only).  f32 only
 * (under the precision pass x and y may be stored float16 / bfloat16: widened by bands of rows
 * and narrowed by rows in the kernel, NPUX_F_HALF_XY).
 * Gray list: a short sum (k_h * k_w terms) scaled once, so it follows its upstream.
 * Gradient: avg_pool_grad(x, dy) (each dy shared by its window's non-padded positions).
 */
#include "ops/grad.h"

static npu_status run(const npuX_call *c) { return npuX_pool_run_half(c, npuK_avg_pool_half); }
static npu_status run_ref(const npuX_call *c) { return npuX_pool_run(c, npuK_avg_pool_f32_ref); }

static npu_status grad(npuX_grad *gc) {
  npu_attr a[5];
  int64_t buf[16];
  int n = npuX_window_attrs((const npuX_window_params *)gc->params.bytes, true, a, buf);
  int in[2] = {gc->x[0], gc->dy[0]};
  gc->dx[0] = npuX_gadd(gc, "avg_pool_grad", 2, in, n, a);
  return gc->status;
}

const npu_op_def npuX_op_avg_pool = {
    .name = "avg_pool", .tf_type = "AvgPool",
    .args = "ksize,strides,padding,data_format", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .prec = NPUX_PREC_GRAY, .flags = NPUX_F_HALF_XY, .tune = NPUX_TUNE_THREADS,
    .parse = npuX_pool_parse, .infer = npuX_pool_infer, .scratch_size = npuX_pool_scratch,
    .run = run, .run_ref = run_ref, .grad = grad};
