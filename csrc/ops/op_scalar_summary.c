/*
 * op_scalar_summary.c — scalar_summary: tf.summary.scalar's op (TensorFlow ScalarSummary with
 * one tag): a Summary {value {tag, simple_value}} of its input, one number of any numeric
 * dtype, converted to float32 (NaN and infinities are kept, as TensorFlow keeps them).
 * Attribute tag.  Output uint8 (n), the serialized Summary (ops/summary.h: strings, loops).
 * No gradient.  Kernel: npuK_summary_scalar.
 */
#include "ops/summary.h"

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  npuX_summary_output(ic);
  const npuG_value *x = &ic->in[0];
  char sx[96];
  if (x->ndim > 0) {
    for (int i = 0; i < x->ndim; i++)
      if (x->shape[i] != 1 && x->shape[i] >= 0)
        return npuX_error(ic, NPU_ERR_SHAPE, "needs one value (a scalar), got %s", npuX_shape(sx, x));
  }
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  if (c->discarded) return npuX_summary_empty(c);
  const npu_tensor *x = c->in[0];
  if (x->numel != 1)
    return npuC_error(c->ctx, NPU_ERR_SHAPE, "scalar_summary '%s': needs one value, got %lld",
                      c->node->name, (long long)x->numel);
  double v;
  npuK_cast(NULL, 1, (npuK_dtype)x->dtype, x->data, NPUK_F64, &v);
  const char *tag = npuX_summary_tag(c);
  int64_t n = (int64_t)npuK_summary_scalar(NULL, tag, (float)v);
  npu_status st = npuX_output(c, 0, 1, &n);
  if (!st) npuK_summary_scalar(c->out[0]->data, tag, (float)v);
  return st;
}

const npu_op_def npuX_op_scalar_summary = {
    .name = "scalar_summary", .tf_type = "ScalarSummary", .args = "tag", .min_inputs = 1,
    .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_BLOCK, .flags = NPUX_F_DATA_SHAPE | NPUX_F_SUMMARY,
    .parse = npuX_summary_parse, .infer = infer, .run = run};
