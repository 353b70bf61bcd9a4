/*
 * op_text_summary.c — text_summary: tf.summary.text's op (TensorFlow TensorSummaryV2 with the
 * text plugin's metadata): a Summary {value {tag, tensor {DT_STRING scalar}, metadata
 * {plugin_data {plugin_name "text"}}}}, what TensorBoard's text plugin reads (Markdown).
 * Input: the string as a uint8 vector of its bytes (or a uint8 scalar: one byte), UTF-8 in
 * TensorBoard's eyes; the library has no string dtype (ops/summary.h).  Attribute tag.
 * Output uint8 (n).  No gradient.  Kernel: npuK_summary_text.
 */
#include "ops/summary.h"

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  npuX_summary_output(ic);
  const npuG_value *x = &ic->in[0];
  char sx[96];
  if (x->dtype != NPU_DTYPE_U8 || x->ndim > 1)
    return npuX_error(ic, x->dtype != NPU_DTYPE_U8 ? NPU_ERR_DTYPE : NPU_ERR_SHAPE,
                      "needs a string: a uint8 vector of its bytes, got %s %s",
                      npu_dtype_name(x->dtype), npuX_shape(sx, x));
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  if (c->discarded) return npuX_summary_empty(c);
  const npu_tensor *x = c->in[0];
  const char *tag = npuX_summary_tag(c);
  int64_t n = (int64_t)npuK_summary_text(NULL, tag, NULL, (size_t)x->numel);
  npu_status st = npuX_output(c, 0, 1, &n);
  if (!st) npuK_summary_text(c->out[0]->data, tag, x->data, (size_t)x->numel);
  return st;
}

const npu_op_def npuX_op_text_summary = {
    .name = "text_summary", .tf_type = "TensorSummaryV2", .args = "tag", .min_inputs = 1,
    .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_BLOCK, .flags = NPUX_F_DATA_SHAPE | NPUX_F_SUMMARY,
    .parse = npuX_summary_parse, .infer = infer, .run = run};
