/*
 * generalize.h — dynamic-shape plans for changing feed shapes (compile/generalize.c):
 * compile_dynamic_mode and shape_generalization_mode say which feed dims a plan leaves
 * unknown (-1), so that one plan, whose affected steps are shaped when they run
 * (docs/dynamic.md), serves every feed of those shapes instead of a plan per shape.
 */
#ifndef NPU_GENERALIZE_H
#define NPU_GENERALIZE_H

#include "exec/exec.h"

/* Stand-in feeds (shape only, no data), reused from call to call: meta[i] a tensor header
   without data, ptrs[i] the feed a compile reads (meta[i], or the run's own feed tensor).
   Here and in the dims profiles (compile/dims_profiles.c: npuP_dims_feeds). */
typedef struct npuP_generic {
  int cap;
  npu_tensor *meta;
  npu_tensor **ptrs;
} npuP_generic;

/* Whether plan p was compiled for this run's feed, fetch and target ids with feeds of the same
   dtypes and ranks (their dims may differ): the plan a changed shape generalises from. */
bool npuP_same_signature(const npuE_plan *p, int n_feeds, const int *feeds,
                         npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                         int n_targets, const int *targets);

/* The feeds to compile this run's plan from under mode (npuP_generalize_mode), the run's feeds
   with some dims made -1: a dim the graph leaves unknown (-1 in the fed value, or any dim of a
   placeholder when any_dims: compile_dynamic_mode) becomes -1 — under ALL always, under FULL
   when prev (the signature's last plan, npuP_same_signature; NULL: none) had other dims, under
   ADAPTIVE where prev's dim differs or was -1.  *out is NULL when no dim becomes -1 (STRICT, or
   the first shape of a signature): compile from the feeds themselves.  *out is borrowed, valid
   until the next call or npuP_generic_free.  Errors: NPU_ERR_NOMEM. */
npu_status npuP_generalize(npuP_generic *gz, npu_context *ctx, const npu_graph *g, int mode,
                           bool any_dims, int n_feeds, const int *feeds,
                           npu_tensor *const *feed_tensors, const npuE_plan *prev,
                           npu_tensor *const **out);
/* Room for n stand-ins, kept while it suffices; contents are not kept when it grows (callers
   rewrite all n).  Errors: NPU_ERR_NOMEM, gz unchanged. */
npu_status npuP_generic_reserve(npuP_generic *gz, npu_context *ctx, int n);
void npuP_generic_free(npu_context *ctx, npuP_generic *gz);

#endif
