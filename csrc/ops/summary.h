/*
 * summary.h — what the summary ops share (op_scalar_summary.c, op_histogram_summary.c,
 * op_image_summary.c, op_text_summary.c, op_merge_summary.c; docs/summaries.md).
 *
 * A summary op outputs a serialized Summary protocol buffer (kernels/ksummary.h).  The library
 * has no string dtype, so a string is a uint8 vector of its bytes: the output is uint8 (n), n
 * known only when the op runs (NPUX_F_DATA_SHAPE).  Inside an iterations_per_loop run only the
 * last iteration's fetches come back, so the other iterations (npuX_call.discarded) output 0
 * bytes without computing anything: a summary fetched with the training loop costs one encoding
 * per sess:run, not one per step.  Flagged NPUX_F_SUMMARY too, so that such a step leaves the
 * rest of the plan fused and in its precision mode (ops.h), the kernels read their inputs in
 * the dtype they are stored in (float16 under a reduced precision mode).  The tag is the node's string attribute "tag" (required,
 * non-empty), read when the op runs.
 */
#ifndef NPU_OPS_SUMMARY_H
#define NPU_OPS_SUMMARY_H

#include "kernels/ksummary.h"
#include "ops/ops.h"

static inline npu_status npuX_summary_parse(npuX_infer *ic, void *params) {
  (void)params;
  const char *tag = NULL;
  npu_status st = npuX_attr_string(ic, "tag", &tag);
  if (!st && (!tag || !*tag)) st = npuX_error(ic, NPU_ERR_ARG, "needs a non-empty string attribute 'tag'");
  return st;
}

static inline void npuX_summary_output(npuX_infer *ic) {
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = NPU_DTYPE_U8, .ndim = 1, .shape = {-1}};
}

static inline const char *npuX_summary_tag(const npuX_call *c) {
  const npuG_attr *a = npuG_attr_find(c->node, "tag");
  return a && a->type == NPU_ATTR_STRING ? a->u.s : "";
}

/* Output 0 sized n bytes and filled by the encoder's second call (the caller passes its
   result for out NULL as n). */
static inline npu_status npuX_summary_empty(const npuX_call *c) {
  int64_t zero = 0;
  return npuX_output(c, 0, 1, &zero);
}

#endif
