/*
 * op_merge_summary.c — merge_summary: tf.summary.merge's op (TensorFlow MergeSummary): one
 * Summary holding the values of its inputs (1 or more serialized Summaries, uint8 vectors as
 * the summary ops make them), in input order.  A Summary is a sequence of value fields, so the
 * merge is the inputs' concatenation; a tag found twice fails the run with NPU_ERR_ARG
 * ("Duplicate tag <tag> found in summary inputs"), bytes that are not a Summary with
 * NPU_ERR_FORMAT.  Output uint8 (n) (ops/summary.h).  No gradient.
 * Kernel: npuK_summary_next_tag (the check); the copy is memcpy.
 */
#include <string.h>

#include "ops/summary.h"

static npu_status parse(npuX_infer *ic, void *params) {
  (void)params;
  if (ic->n_inputs < 1) return npuX_error(ic, NPU_ERR_ARG, "needs at least one summary");
  return NPU_OK;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  npuX_summary_output(ic);
  char sx[96];
  for (int i = 0; i < ic->n_inputs; i++)
    if (ic->in[i].dtype != NPU_DTYPE_U8 || (ic->in[i].ndim >= 0 && ic->in[i].ndim != 1))
      return npuX_error(ic, ic->in[i].dtype != NPU_DTYPE_U8 ? NPU_ERR_DTYPE : NPU_ERR_SHAPE,
                        "input %d must be a serialized Summary (uint8 vector), got %s %s", i,
                        npu_dtype_name(ic->in[i].dtype), npuX_shape(sx, &ic->in[i]));
  return NPU_OK;
}

/* Whether the tag (t, n) appears among the values of the inputs from (input i, offset pos). */
static int seen_later(const npuX_call *c, int i, size_t pos, const uint8_t *t, size_t n) {
  for (; i < c->n_inputs; i++, pos = 0) {
    const uint8_t *tag;
    size_t len;
    int r;
    while ((r = npuK_summary_next_tag(c->in[i]->data, (size_t)c->in[i]->numel, &pos, &tag, &len)) == 1)
      if (len == n && (!n || memcmp(tag, t, n) == 0)) return 1;
    if (r < 0) return -1;
  }
  return 0;
}

static npu_status run(const npuX_call *c) {
  int64_t total = 0;
  for (int i = 0; i < c->n_inputs; i++) total += c->in[i]->numel;
  if (c->discarded || total == 0) return npuX_summary_empty(c);
  for (int i = 0; i < c->n_inputs; i++) {
    size_t pos = 0, len;
    const uint8_t *tag;
    int r;
    while ((r = npuK_summary_next_tag(c->in[i]->data, (size_t)c->in[i]->numel, &pos, &tag, &len)) == 1) {
      int dup = seen_later(c, i, pos, tag, len);
      if (dup > 0)
        return npuC_error(c->ctx, NPU_ERR_ARG, "merge_summary '%s': Duplicate tag %.*s found in "
                          "summary inputs", c->node->name, (int)(len > 200 ? 200 : len), tag);
      if (dup < 0) r = -1;
      if (r < 0) break;
    }
    if (r < 0)
      return npuC_error(c->ctx, NPU_ERR_FORMAT, "merge_summary '%s': input %d is not a "
                        "serialized Summary", c->node->name, i);
  }
  npu_status st = npuX_output(c, 0, 1, &total);
  uint8_t *out = st ? NULL : c->out[0]->data;
  for (int i = 0; out && i < c->n_inputs; i++) {
    if (c->in[i]->numel) memcpy(out, c->in[i]->data, (size_t)c->in[i]->numel);
    out += c->in[i]->numel;
  }
  return st;
}

const npu_op_def npuX_op_merge_summary = {
    .name = "merge_summary", .tf_type = "MergeSummary", .min_inputs = 1, .max_inputs = -1,
    .n_outputs = 1, .prec = NPUX_PREC_BLOCK, .flags = NPUX_F_DATA_SHAPE | NPUX_F_SUMMARY, .parse = parse,
    .infer = infer, .run = run};
