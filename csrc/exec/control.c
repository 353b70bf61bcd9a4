/*
 * control.c — the device running cond and while steps (compile/control.c builds them).
 *
 * cond: the taken branch's block runs, the outputs borrow its results (as an identity does).
 * while: the loop holds each variable's current tensor (held[], one reference each); the loop
 * variables' slots point at them while the condition and body blocks run.  After the body,
 * held[] takes the results; the tensor a variable leaves behind goes back to the body's result
 * slot when it fits, so the next iteration writes there and a loop whose shapes settle
 * allocates nothing.  The outputs take the final tensors.
 */
#include "exec/observe.h"

/* The observers see nested steps as they see top-level ones (exec/observe.h), by their
   numbers (npuE_step.index), st->nest saying where they are; unobserved, a block costs one
   test more than its steps. */
static npu_status run_block(npuE_state *st, npuE_plan *p, const npuE_block *b) {
  npu_status s = NPU_OK;
  if (!st->dump && !st->profile) {
    for (int k = 0; k < b->n_steps && !s; k++) s = npuE_run_step(st, p, &b->steps[k]);
    return s;
  }
  for (int k = 0; k < b->n_steps && !s; k++) {
    const npuE_step *step = &b->steps[k];
    if ((s = npuE_observe(st, p, NPUE_STEP_BEGIN, step->index))) break;
    s = npuE_run_step(st, p, step);
    if (!s) s = npuE_observe(st, p, NPUE_STEP_END, step->index);
  }
  return s;
}

static bool truth(const npu_tensor *t) { return t && t->numel > 0 && *(const uint8_t *)t->data; }

static npu_status run_cond(npuE_state *st, npuE_plan *p, const npuE_step *step) {
  const npuE_control *c = step->control;
  int k = truth(p->slots[step->in[0]]) ? 0 : 1;
  npu_status s = run_block(st, p, &c->block[k]);
  for (int i = 0; !s && i < c->n_results; i++) p->slots[step->out[i]] = p->slots[c->result[k][i]];
  return s;
}

/* held[] takes the body's results, checked against the shape invariants unless the compiler
   found that they always fit (npuE_control.shapes_fixed). */
static npu_status next_values(npuE_state *st, npuE_plan *p, const npuE_step *step, int64_t it) {
  npuE_control *c = step->control;
  int n = c->n_results;
  npu_tensor *next[NPUX_MAX_OUTPUTS];
  for (int i = 0; i < n && !c->shapes_fixed; i++) {
    const npu_tensor *t = p->slots[c->result[1][i]];
    const npuG_value *want = &p->values[c->args[i]];
    if (!npuG_shape_fits(want, t->ndim, t->shape)) {
      char a[96], b[96];
      const npu_graph *g = st->graph;
      return npuC_error(st->ctx, NPU_ERR_SHAPE,
                        "while '%s': loop variable %d ('%s') became %s in iteration %lld, but "
                        "its shape invariant is %s (give shape_invariants with -1 where it may "
                        "change)", g->nodes[step->node].name, i + 1,
                        g->nodes[want->node].name, npuC_shape_str(a, sizeof a, t->ndim, t->shape),
                        (long long)it + 1, npuC_shape_str(b, sizeof b, want->ndim, want->shape));
    }
  }
  for (int i = 0; i < n; i++) next[i] = npu_tensor_retain(p->slots[c->result[1][i]]);
  for (int i = 0; i < n; i++) {
    npu_tensor *old = c->held[i];
    int r = c->result[1][i];
    c->held[i] = next[i];
    p->slots[c->args[i]] = next[i];
    /* the result slot gets the variable's old buffer back when only we hold it */
    if (old && old != next[i] && p->owned[r] && p->slots[r] == next[i] &&
        atomic_load(&old->refcount) == 1 && !old->base && old->dtype == next[i]->dtype &&
        npuT_same_shape(old->ndim, old->shape, next[i]->ndim, next[i]->shape)) {
      npu_tensor_release(p->slots[r]);
      p->slots[r] = old;
    } else {
      npu_tensor_release(old);
    }
  }
  return NPU_OK;
}

static npu_status run_while(npuE_state *st, npuE_plan *p, const npuE_step *step) {
  npuE_control *c = step->control;
  int n = c->n_results;
  for (int i = 0; i < n; i++) {
    c->held[i] = npu_tensor_retain(p->slots[step->in[i]]);
    p->slots[c->args[i]] = c->held[i];
  }
  npu_status s = NPU_OK;
  int depth = st->nest.depth++;
  for (int64_t it = 0; c->max_iterations < 0 || it < c->max_iterations; it++) {
    if (depth < NPUE_MAX_LOOPS) st->nest.iteration[depth] = it;
    if (st->watch && (s = npuE_check(st, step))) break; /* even a loop of no steps stops */
    if ((s = run_block(st, p, &c->block[0]))) break;
    if (!truth(p->slots[c->result[0][0]])) break;
    if ((s = run_block(st, p, &c->block[1]))) break;
    if ((s = next_values(st, p, step, it))) break;
  }
  st->nest.depth--;
  for (int i = 0; i < n; i++) {
    int v = step->out[i];
    if (p->owned[v]) npu_tensor_release(p->slots[v]);
    p->slots[v] = s ? NULL : c->held[i];
    p->owned[v] = !s;
    if (s) npu_tensor_release(c->held[i]);
    c->held[i] = NULL;
  }
  return s;
}

npu_status npuE_run_control(npuE_state *st, npuE_plan *p, const npuE_step *step) {
  st->nest.level++;
  npu_status s = step->def->kind == NPUX_KIND_COND ? run_cond(st, p, step) : run_while(st, p, step);
  st->nest.level--;
  return s;
}
