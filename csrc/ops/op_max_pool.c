/*
 * op_max_pool.c — max_pool: the maximum over each k_h x k_w window (TensorFlow MaxPool).
 * x and y are NHWC: (n, h, w, c) -> (n, out_h, out_w, c), out_* by TF's SAME/VALID rule;
 * padded positions are ignored (never win), NaN propagates.
 * Attributes: ksize (required) and strides (default 1), each {1, kh, kw, 1} as TF, {kh, kw}
 * or one int; padding ("SAME" or "VALID", required); data_format ("NHWC" only).  f32 only
 * (under the precision pass x and y may be stored float16 / bfloat16: widened by bands of rows
 * and narrowed by rows in the kernel, NPUX_F_HALF_XY).
 * Gray list: exact (it selects, never rounds), so it follows its upstream.
 * Gradient: max_pool_grad(x, y, dy) (each dy to its window's first maximum).
 */
#include "ops/grad.h"

static npu_status run(const npuX_call *c) { return npuX_pool_run_half(c, npuK_max_pool_half); }
static npu_status run_ref(const npuX_call *c) { return npuX_pool_run(c, npuK_max_pool_f32_ref); }

static npu_status grad(npuX_grad *gc) {
  npu_attr a[5];
  int64_t buf[16];
  int n = npuX_window_attrs((const npuX_window_params *)gc->params.bytes, true, a, buf);
  int in[3] = {gc->x[0], gc->y[0], gc->dy[0]};
  gc->dx[0] = npuX_gadd(gc, "max_pool_grad", 3, in, n, a);
  return gc->status;
}

const npu_op_def npuX_op_max_pool = {
    .name = "max_pool", .tf_type = "MaxPool",
    .args = "ksize,strides,padding,data_format", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .prec = NPUX_PREC_GRAY, .flags = NPUX_F_HALF_XY, .tune = NPUX_TUNE_THREADS,
    .parse = npuX_pool_parse, .infer = npuX_pool_infer, .scratch_size = npuX_pool_scratch,
    .run = run, .run_ref = run_ref, .grad = grad};
