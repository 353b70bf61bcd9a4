/*
 * generalize.c — which feed dims a plan leaves unknown (-1), for compile_dynamic_mode and
 * shape_generalization_mode (generalize.h).  The session (session.c find_plan) compiles a
 * plan from the stand-in feeds made here; plan.c marks it generic, and npuP_matches then takes
 * any size at its -1 dims.  A dim the graph fixes is never generalised (a feed of another
 * size fails its check, naming the placeholder, as in a static plan), so a generic plan is
 * never chosen for a feed its placeholder refuses.
 */
#include <string.h>

#include "compile/generalize.h"
#include "ops/ops.h"

bool npuP_same_signature(const npuE_plan *p, int n_feeds, const int *feeds,
                         npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                         int n_targets, const int *targets) {
  if (p->n_feeds != n_feeds || p->n_fetches != n_fetches || p->n_targets != n_targets)
    return false;
  if (n_fetches && memcmp(p->fetches, fetches, (size_t)n_fetches * sizeof *fetches)) return false;
  if (n_targets && memcmp(p->targets, targets, (size_t)n_targets * sizeof *targets)) return false;
  if (n_feeds && memcmp(p->feeds, feeds, (size_t)n_feeds * sizeof *feeds)) return false;
  for (int i = 0; i < n_feeds; i++)
    if (feed_tensors[i]->dtype != p->feed_dtypes[i] || feed_tensors[i]->ndim != p->feed_ndims[i])
      return false;
  return true;
}

/* Whether dim k of a feed of rank ndim for value v may be generalised: the graph leaves it
   unknown.  A feed of another rank than the value's keeps its shape, so that the compile's
   refusal names the shape fed. */
static bool free_dim(const npu_graph *g, int v, int ndim, int k, bool any_dims) {
  const npuG_value *want = &g->values[v];
  if (want->ndim < 0) return true;
  if (want->ndim != ndim) return false;
  if (want->shape[k] < 0) return true;
  return any_dims && npuX_op(g->nodes[want->node].op)->kind == NPUX_KIND_PLACEHOLDER;
}

npu_status npuP_generalize(npuP_generic *gz, npu_context *ctx, const npu_graph *g, int mode,
                           bool any_dims, int n_feeds, const int *feeds,
                           npu_tensor *const *feed_tensors, const npuE_plan *prev,
                           npu_tensor *const **out) {
  *out = NULL;
  if (mode == NPUP_GEN_STRICT || (mode != NPUP_GEN_ALL && !prev) || !n_feeds) return NPU_OK;
  npu_status s = npuP_generic_reserve(gz, ctx, n_feeds);
  if (s) return s;
  bool any = false;
  for (int f = 0; f < n_feeds; f++) {
    const npu_tensor *t = feed_tensors[f];
    npu_tensor *m = &gz->meta[f]; /* shape only: compiling reads no data */
    *m = (npu_tensor){.dtype = t->dtype, .ndim = t->ndim};
    memcpy(m->shape, t->shape, sizeof t->shape);
    const int64_t *was = prev ? prev->feed_shapes + f * NPU_MAX_DIMS : NULL;
    for (int k = 0; k < t->ndim; k++) {
      if (!free_dim(g, feeds[f], t->ndim, k, any_dims)) continue;
      bool unknown = mode == NPUP_GEN_ALL || mode == NPUP_GEN_FULL ||
                     (mode == NPUP_GEN_ADAPTIVE && (was[k] < 0 || was[k] != t->shape[k]));
      if (unknown) m->shape[k] = -1;
      any |= unknown;
    }
    gz->ptrs[f] = m;
  }
  /* FULL: all dims, but only once some shape changed (prev differs somewhere) */
  if (mode == NPUP_GEN_FULL) {
    bool changed = false;
    for (int f = 0; f < n_feeds && !changed; f++)
      for (int k = 0; k < feed_tensors[f]->ndim && !changed; k++)
        changed = prev->feed_shapes[f * NPU_MAX_DIMS + k] != feed_tensors[f]->shape[k];
    any &= changed;
  }
  if (any) *out = gz->ptrs;
  return NPU_OK;
}

npu_status npuP_generic_reserve(npuP_generic *gz, npu_context *ctx, int n) {
  if (n <= gz->cap) return NPU_OK;
  npu_tensor *meta = npuC_alloc(ctx, (size_t)n * sizeof *meta);
  npu_tensor **ptrs = npuC_alloc(ctx, (size_t)n * sizeof *ptrs);
  if (!meta || !ptrs) {
    npuC_free(ctx, meta);
    npuC_free(ctx, ptrs);
    return NPU_ERR_NOMEM;
  }
  npuP_generic_free(ctx, gz); /* nothing to keep: every caller rewrites all n entries */
  gz->meta = meta;
  gz->ptrs = ptrs;
  gz->cap = n;
  return NPU_OK;
}

void npuP_generic_free(npu_context *ctx, npuP_generic *gz) {
  npuC_free(ctx, gz->meta);
  npuC_free(ctx, gz->ptrs);
  *gz = (npuP_generic){0};
}
