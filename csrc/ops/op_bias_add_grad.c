/*
 * op_bias_add_grad.c — bias_add_grad: the gradient of bias_add's bias, the sum of dy over
 * every axis but the last (TensorFlow BiasAddGrad).  dy has rank >= 2; the output is
 * (channels).  Attribute data_format ("NHWC" only, as bias_add).  f32, f64.
 * Block list: a long accumulation.  Kernel view: dy is (rows, cols) with cols = the last dim,
 * each column summed in ascending row order in float64, rounded once.
 */
#include "ops/grad.h"

static npu_status parse(npuX_infer *ic, void *params) {
  (void)params;
  return npuX_check_nhwc(ic);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_COUNT};
  const npuG_value *d = &ic->in[0];
  npu_status st = npuX_check_dtype(ic, 0, ok);
  if (st) return st;
  char s[96];
  if (d->ndim >= 0 && d->ndim < 2)
    return npuX_error(ic, NPU_ERR_SHAPE, "input must have rank >= 2, got %s", npuX_shape(s, d));
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = d->dtype, .ndim = 1,
                            .shape = {d->ndim > 0 ? d->shape[d->ndim - 1] : -1}};
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *d = c->in[0];
  int64_t cols = d->shape[d->ndim - 1];
  int64_t rows = cols ? d->numel / cols : 0;
  if (d->dtype == NPU_DTYPE_F64) npuK_bias_add_grad_f64(c->pool, rows, cols, d->data, c->out[0]->data);
  else npuK_bias_add_grad_f32(c->pool, rows, cols, d->data, c->out[0]->data);
  return NPU_OK;
}

const npu_op_def npuX_op_bias_add_grad = {
    .name = "bias_add_grad", .tf_type = "BiasAddGrad", .min_inputs = 1, .max_inputs = 1,
    .n_outputs = 1, .prec = NPUX_PREC_BLOCK, .parse = parse, .infer = infer, .run = run};
