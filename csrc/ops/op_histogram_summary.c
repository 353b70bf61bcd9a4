/*
 * op_histogram_summary.c — histogram_summary: tf.summary.histogram's op (TensorFlow
 * HistogramSummary): a Summary {value {tag, histo}} of every element of its input (any shape,
 * any numeric dtype, read as float64), with TensorFlow's default bucket limits and its
 * encoding (kernels/ksummary.h).  A NaN or infinite element fails the run with NPU_ERR_ARG
 * ("Nan in summary histogram for: <tag>"), as in TensorFlow.  Attribute tag.  Output uint8 (n)
 * (ops/summary.h).  Scratch: the values as float64 and the limits (the reference path's), the
 * counts.  No gradient.
 * Kernels: npuK_histogram (reference path: npuK_histogram_ref), npuK_summary_histogram.
 */
#include "ops/summary.h"

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  npuX_summary_output(ic);
  return NPU_OK;
}

static size_t scratch_size(const npuX_call *c) {
  return ((size_t)c->in[0]->numel + NPUK_HISTOGRAM_N_LIMITS) * sizeof(double) +
         NPUK_HISTOGRAM_N_LIMITS * sizeof(uint64_t);
}

/* The device path counts the input where it lies, in one pass; the reference path widens it
   to float64 in the scratch first and bisects. */
static npu_status run_with(const npuX_call *c, bool reference) {
  if (c->discarded) return npuX_summary_empty(c);
  const npu_tensor *x = c->in[0];
  double *values = c->scratch, *limits = values + x->numel;
  uint64_t *counts = (uint64_t *)(limits + NPUK_HISTOGRAM_N_LIMITS);
  npuK_histo h;
  const char *tag = npuX_summary_tag(c);
  int64_t bad;
  if (reference) {
    npuK_histogram_limits(limits);
    npuK_cast(c->pool, x->numel, (npuK_dtype)x->dtype, x->data, NPUK_F64, values);
    bad = npuK_histogram_ref(x->numel, values, limits, &h, counts);
  } else {
    bad = npuK_histogram(x->numel, (npuK_dtype)x->dtype, x->data, &h, counts);
  }
  if (bad >= 0)
    return npuC_error(c->ctx, NPU_ERR_ARG, "histogram_summary '%s': Nan in summary histogram for: %s",
                      c->node->name, tag);
  int64_t n = (int64_t)npuK_summary_histogram(NULL, tag, &h, counts);
  npu_status st = npuX_output(c, 0, 1, &n);
  if (!st) npuK_summary_histogram(c->out[0]->data, tag, &h, counts);
  return st;
}

static npu_status run(const npuX_call *c) { return run_with(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_with(c, true); }

const npu_op_def npuX_op_histogram_summary = {
    .name = "histogram_summary", .tf_type = "HistogramSummary", .args = "tag", .min_inputs = 1,
    .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_BLOCK, .flags = NPUX_F_DATA_SHAPE | NPUX_F_SUMMARY,
    .parse = npuX_summary_parse, .infer = infer, .scratch_size = scratch_size, .run = run,
    .run_ref = run_ref};
