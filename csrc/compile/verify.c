/*
 * verify.c — checks a plan's invariants after each pass (compile/passes.h), so a pass that
 * breaks the plan fails at compile time naming itself, not later as wrong numbers.
 *
 * Runs when the session's compile config says so (cfg->verify: the environment variable
 * NPU_VERIFY_PLANS=1, which `make test` sets); it costs one pass over the steps.
 *
 * Invariants: every value a step reads is available before the step (fed, bound at compile
 * time, or written by an earlier step); each value is written by one step at most; every
 * fetch is available at the end; a kernel step's outputs have concrete shapes and a real
 * dtype (but a dynamic step's, shaped when it runs); its scratch fits the plan's scratch; its inputs fit the executor's input array.
 */
#include <stdio.h>
#include <string.h>

#include "compile/passes.h"

/* "invalid plan after <pass>: step k (op 'node'): value v ('name:i') <what>"; k < 0: the fetches. */
static npu_status broken(npuP_build *b, const char *after, int k, const char *what, int v) {
  const npuE_plan *p = b->plan;
  const npu_graph *g = b->graph;
  char where[160] = "the fetches", value[160] = "";
  if (k >= 0) {
    const npuE_step *st = &p->steps[k];
    const char *node = st->node >= 0 && st->node < g->n_nodes ? g->nodes[st->node].name : "?";
    snprintf(where, sizeof where, "step %d (%s '%s')", k, st->def->name, node);
  }
  if (v >= 0 && v < p->n_values) {
    int n = p->values[v].node;
    snprintf(value, sizeof value, "value %d ('%s:%d') ", v,
             n >= 0 && n < g->n_nodes ? g->nodes[n].name : "?", p->values[v].index);
  } else if (v >= 0) {
    snprintf(value, sizeof value, "value %d ", v);
  }
  return npuC_error(b->ctx, NPU_ERR_INTERNAL, "invalid plan after %s: %s: %s%s", after, where,
                    value, what);
}

npu_status npuP_verify(npuP_build *b, const char *after) {
  const npuE_plan *p = b->plan;
  /* state[v]: 0 not yet available, 1 available, 2 available and written by a step */
  uint8_t *state = npuC_calloc(b->ctx, (size_t)(p->n_values ? p->n_values : 1), 1);
  if (!state) return NPU_ERR_NOMEM;
  npu_status s = NPU_OK;
  for (int i = 0; i < p->n_feeds; i++) state[p->feeds[i]] = 1;
  for (int v = 0; v < p->n_values; v++) /* constants and folded values; an arena view (memory
                                           planning) is bound early but written by its step */
    if (p->slots[v] && !(p->memory.offset && p->memory.offset[v] >= 0)) state[v] = 1;
  for (int k = 0; k < p->n_steps && !s; k++) {
    const npuE_step *st = &p->steps[k];
    if (st->n_in > p->max_in) s = broken(b, after, k, "has more inputs than the plan's widest step", -1);
    for (int i = 0; i < st->n_in && !s; i++) {
      int v = st->in[i];
      if (v < 0 || v >= p->n_values) s = broken(b, after, k, "is out of range", v);
      else if (!state[v]) s = broken(b, after, k, "is read before anything writes it", v);
    }
    for (int i = 0; i < st->n_out && !s; i++) {
      int v = st->out[i];
      if (v < 0 || v >= p->n_values) {
        s = broken(b, after, k, "is out of range", v);
      } else if (state[v] == 2) {
        s = broken(b, after, k, "is written by two steps", v);
      } else if (st->def->kind == NPUX_KIND_KERNEL && !st->dynamic) {
        const npuG_value *d = &p->values[v];
        bool ok = d->ndim >= 0 && (unsigned)d->dtype < NPU_DTYPE_COUNT;
        for (int j = 0; ok && j < d->ndim; j++) ok = d->shape[j] >= 0;
        if (!ok) s = broken(b, after, k, "has no concrete shape or dtype", v);
      }
      if (!s) state[v] = 2;
    }
    if (!s && st->scratch_size > p->scratch_size)
      s = broken(b, after, k, "needs more scratch than the plan has", -1);
  }
  for (int i = 0; i < p->n_fetches && !s; i++)
    if (!state[p->fetches[i]]) s = broken(b, after, -1, "is fetched but never written", p->fetches[i]);
  npuC_free(b->ctx, state);
  return s;
}
