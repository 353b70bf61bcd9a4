/*
 * schedule.c — hcom_parallel: the steps that start a collective (ops flagged NPUX_F_EARLY:
 * hcom_allreduce_start) move up the plan to just after the last step writing one of their
 * inputs, so that a bucket of gradients is on the wire while the backward pass computes the
 * next ones (the collective runs on the communicator's thread; its hcom_allreduce_wait stays
 * where the update reads it).  Nodes are laid out in id order, and the distributed optimizer
 * builds its starts after every gradient: without this pass every allreduce starts after the
 * whole backward pass.
 *
 * A start never moves past another collective or stateful step (NPUX_F_NO_FOLD: the ranks must
 * start their collectives in one order, and a host op may read anything), an assign (which
 * writes a variable in place: a start reading that variable must see the same value), or a
 * control step.  Top-level steps only; runs before memory planning, which sees the new order.
 */
#include <string.h>

#include "compile/passes.h"

static bool writes_any(const npuE_step *prev, const npuE_step *step) {
  for (int o = 0; o < prev->n_out; o++)
    for (int i = 0; i < step->n_in; i++)
      if (prev->out[o] == step->in[i]) return true;
  return false;
}

static bool barrier(const npuE_step *prev) {
  return prev->control || prev->def->kind != NPUX_KIND_KERNEL ||
         (prev->def->flags & NPUX_F_NO_FOLD);
}

npu_status npuP_schedule_comm(npuP_build *b) {
  npuE_plan *p = b->plan;
  if (!b->cfg->hcom_parallel || b->cfg->reference) return NPU_OK;
  for (int k = 1; k < p->n_steps; k++) {
    if (!(p->steps[k].def->flags & NPUX_F_EARLY) || p->steps[k].control) continue;
    int j = k;
    while (j > 0 && !writes_any(&p->steps[j - 1], &p->steps[k]) && !barrier(&p->steps[j - 1]))
      j--;
    if (j == k) continue;
    npuE_step moving = p->steps[k];
    memmove(&p->steps[j + 1], &p->steps[j], (size_t)(k - j) * sizeof *p->steps);
    p->steps[j] = moving;
  }
  return NPU_OK;
}
