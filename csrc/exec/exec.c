/*
 * exec.c — the device: runs a plan's steps in order.
 *
 * Steady state does no allocation and no string work: each kernel output slot keeps its tensor
 * from the previous run and is written in place, unless the previous result is still held
 * elsewhere (a fetched tensor, refcount > 1), in which case the slot gets a fresh tensor and
 * the old one stays untouched with its holder.
 */
#include <string.h>

#include "core/pool.h"
#include "exec/observe.h"

/* Makes slot v own a tensor of its planned dtype and shape that nobody else holds. */
static npu_status prepare_output(npu_context *ctx, npuE_plan *p, int v) {
  npu_tensor *t = p->slots[v];
  const npuG_value *want = &p->values[v];
  if (t && p->owned[v] && atomic_load(&t->refcount) == 1) return NPU_OK; /* shapes are fixed per plan */
  if (p->owned[v]) npu_tensor_release(t);
  p->slots[v] = NULL;
  p->owned[v] = 0;
  npu_status s = npu_tensor_new(ctx, want->dtype, want->ndim, want->shape, &p->slots[v]);
  if (s) return s;
  p->owned[v] = 1;
  return NPU_OK;
}

/* assign: the variable's storage takes the value, copy-on-write if a fetched result or an
   earlier read still shares it. */
static npu_status run_assign(npuE_state *st, npuE_plan *p, const npuE_step *step) {
  const npu_graph *g = st->graph;
  int var_node = g->values[step->in[0]].node;
  const npu_tensor *value = p->slots[step->in[1]];
  npu_tensor *cur = st->variables[var_node];
  if (!cur || atomic_load(&cur->refcount) != 1) {
    npu_tensor *fresh;
    npu_status s = npu_tensor_new(st->ctx, value->dtype, value->ndim, value->shape, &fresh);
    if (s) return s;
    npu_tensor_release(cur);
    st->variables[var_node] = cur = fresh;
  }
  memcpy(cur->data, value->data, value->nbytes);
  p->slots[step->out[0]] = cur;
  return NPU_OK;
}

/* GET_NEXT: the next element of the node's dataset, through the session's iterator for it (a
   producer thread keeps its queue ahead of the device).  The plan was chosen for the shape of
   this element (exec/iterators.c: npuE_next_matches), so another shape is a broken promise. */
static npu_status run_get_next(npuE_state *st, npuE_plan *p, const npuE_step *step,
                               const npuG_node *node) {
  npu_context *ctx = st->ctx;
  /* the previous element goes back to the iterator first, so it reuses that buffer */
  for (int i = 0; i < step->n_out; i++) {
    int v = step->out[i];
    if (p->owned[v]) npu_tensor_release(p->slots[v]);
    p->slots[v] = NULL;
    p->owned[v] = 0;
  }
  npu_tensor *outs[NPUX_MAX_OUTPUTS] = {0};
  npu_status s = npuE_iterators_next(ctx, &st->iterators, st->graph, step->node, outs);
  if (s) return s;
  for (int i = 0; i < step->n_out; i++) {
    int v = step->out[i];
    const npuG_value *want = &p->values[v];
    if (!s && !npuT_same_shape(want->ndim, want->shape, outs[i]->ndim, outs[i]->shape)) {
      char a[96], b[96];
      s = npuC_error(ctx, NPU_ERR_SHAPE,
                     "iterator '%s': component %d is %s, the plan expects %s",
                     node->name, i, npuC_shape_str(a, sizeof a, outs[i]->ndim, outs[i]->shape),
                     npuC_shape_str(b, sizeof b, want->ndim, want->shape));
    }
    p->slots[v] = outs[i];
    p->owned[v] = 1;
  }
  return s;
}

/* Precision (compile/precision.c): a step whose operands are stored in float16 or bfloat16
   still computes in float32.  Its flagged inputs are widened into p->round_buf and the kernel
   reads those copies; its flagged outputs are written there by the kernel, then narrowed into
   their slots (narrow_outputs).  The buffer and the stand-in tensors were sized at compile
   time for the widest step, so nothing is allocated here. */
static void widen_operands(const npuK_pool *pool, npuE_plan *p, const npuE_step *step,
                           npu_tensor **in, npu_tensor **out) {
  float *buf = step->round_at ? step->round_at : p->round_buf;
  npu_tensor *meta = p->round_meta;
  for (int i = 0; i < step->n_in + step->n_out; i++) {
    if (!step->widen[i]) continue;
    npu_tensor **t = i < step->n_in ? &in[i] : &out[i - step->n_in];
    const npu_tensor *stored = *t;
    *meta = *stored;
    meta->dtype = NPU_DTYPE_F32;
    meta->nbytes = (size_t)stored->numel * sizeof(float);
    meta->data = buf;
    if (i < step->n_in)
      npuK_cast(pool, stored->numel, (npuK_dtype)stored->dtype, stored->data, NPUK_F32, buf);
    buf += stored->numel;
    *t = meta++;
  }
}

static void narrow_outputs(const npuK_pool *pool, npuE_plan *p, const npuE_step *step,
                           npu_tensor **out) {
  for (int i = 0; i < step->n_out; i++) {
    if (!step->widen[step->n_in + i]) continue;
    const npu_tensor *stored = p->slots[step->out[i]];
    npuK_cast(pool, stored->numel, NPUK_F32, out[i]->data, (npuK_dtype)stored->dtype,
              stored->data);
  }
}

/* Tells the observers (exec/observe.h) of event e: the dump sees a step's inputs before the
   profiler starts its clock, and its outputs after the clock stopped, so dumping does not
   count as the step's time. */
static npu_status observe(npuE_state *st, const npuE_plan *p, npuE_event e, int k) {
  bool before = e == NPUE_RUN_BEGIN || e == NPUE_ITER_BEGIN || e == NPUE_STEP_BEGIN;
  npu_status s = NPU_OK;
  if (st->dump && before) s = npuE_dump_event(st->dump, st, p, e, k);
  if (st->profile) { /* fails only on RUN_BEGIN (fp_point/bp_point naming no node) */
    npu_status ps = npuE_profile_event(st->profile, st, p, e, k);
    if (!s) s = ps;
  }
  if (st->dump && !before) s = npuE_dump_event(st->dump, st, p, e, k);
  return s;
}

npu_status npuE_run(npuE_state *st, npuE_plan *p, npu_tensor *const *feed_tensors,
                    npu_tensor **fetch_out) {
  npu_context *ctx = st->ctx;
  const npu_graph *g = st->graph;
  npu_status s = NPU_OK;
  const npuK_pool *pool = p->reference ? NULL : npuC_kernel_pool(ctx);
  /* Scratch was sized for p->n_threads slots: never hand a kernel more. */
  int n_threads = p->reference ? 1 : npu_context_n_threads(ctx);
  if (n_threads > p->n_threads) n_threads = p->n_threads;
  for (int i = 0; i < p->n_feeds; i++) p->slots[p->feeds[i]] = feed_tensors[i];

  bool observed = st->dump || st->profile;
  if (observed) s = observe(st, p, NPUE_RUN_BEGIN, -1);
  int64_t iteration = 0, iterations = st->loop_left > 0 ? st->loop_left : p->iterations;
  st->loop_left = 0;
again:
  if (observed && !s) s = observe(st, p, NPUE_ITER_BEGIN, -1);
  for (int k = 0; k < p->n_steps && !s; k++) {
    const npuE_step *step = &p->steps[k];
    const npuG_node *node = &g->nodes[step->node];
    if (observed && (s = observe(st, p, NPUE_STEP_BEGIN, k))) break;
    switch (step->def->kind) {
    case NPUX_KIND_VARIABLE: {
      npu_tensor *var = step->node < st->n_variables ? st->variables[step->node] : NULL;
      if (!var && step->reads_variable)
        s = npuC_error(ctx, NPU_ERR_STATE,
                       "variable '%s' is not initialised: run the initializer "
                       "(g:global_variables_initializer()) or an assign to it first",
                       node->name);
      p->slots[step->out[0]] = var;
      break;
    }
    case NPUX_KIND_ASSIGN: s = run_assign(st, p, step); break;
    case NPUX_KIND_IDENTITY: p->slots[step->out[0]] = p->slots[step->in[0]]; break;
    case NPUX_KIND_NO_OP: break;
    case NPUX_KIND_GET_NEXT: s = run_get_next(st, p, step, node); break;
    default: {
      npu_tensor *out_stack[NPUX_MAX_OUTPUTS];
      npu_tensor **in = p->in_buf; /* sized at compile for the widest step: no allocation */
      for (int i = 0; i < step->n_in; i++) in[i] = p->slots[step->in[i]];
      for (int i = 0; i < step->n_out && !s; i++) {
        s = prepare_output(ctx, p, step->out[i]);
        out_stack[i] = p->slots[step->out[i]];
      }
      if (!s && step->widen) widen_operands(pool, p, step, in, out_stack);
      if (!s) {
        npuX_call call = {.ctx = ctx, .pool = pool, .n_threads = n_threads, .node = node,
                          .params = npuE_step_params(step, node), .n_inputs = step->n_in,
                          .in = in, .n_outputs = step->n_out, .out = out_stack,
                          .scratch = step->scratch_at ? step->scratch_at : p->scratch,
                          .step = st->n_iterations, .impl = step->impl};
        npu_status (*fn)(const npuX_call *) =
            p->reference && step->def->run_ref ? step->def->run_ref : step->def->run;
        s = fn ? fn(&call)
               : npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s '%s': no kernel", step->def->name,
                            node->name);
        if (s && fn) npuE_exception_dump(st, p, k, s); /* exec/exception_dump.c */
        if (!s && step->widen) narrow_outputs(pool, p, step, out_stack);
      }
      break;
    }
    }
    if (observed && !s) s = observe(st, p, NPUE_STEP_END, k);
  }
  if (observed && !s) s = observe(st, p, NPUE_ITER_END, -1);
  /* iterations_per_loop: the whole plan again, without returning to the caller */
  if (!s) st->n_iterations++;
  if (!s && ++iteration < iterations) {
    /* a dataset's next element of another shape: the session runs the remaining iterations
       with the plan of that shape (the fetches are then that plan's last step's) */
    bool same = true;
    if (p->n_next) s = npuE_next_matches(st, p, &same);
    if (!s && same) goto again;
    if (!s) st->loop_left = iterations - iteration;
  }
  if (observed) { /* before the fetches are handed out: a failing dump fails the run */
    npu_status end = observe(st, p, NPUE_RUN_END, -1);
    if (!s) s = end;
  }
  if (!s && !st->loop_left)
    for (int i = 0; i < p->n_fetches; i++) fetch_out[i] = npu_tensor_retain(p->slots[p->fetches[i]]);
  /* Borrowed slots must not outlive this call: feeds belong to the caller. */
  for (int i = 0; i < p->n_borrowed; i++) p->slots[p->borrowed[i]] = NULL;
  p->uses++;
  return s;
}
