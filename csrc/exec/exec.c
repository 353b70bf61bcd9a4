/*
 * exec.c — the device: runs a plan's steps in order.
 *
 * Steady state does no allocation and no string work: each kernel output slot keeps its tensor
 * from the previous run and is written in place, unless the previous result is still held
 * elsewhere (a fetched tensor, refcount > 1), in which case the slot gets a fresh tensor and
 * the old one stays untouched with its holder.
 */
#include <stdio.h>
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

/* Every write of a variable's storage counts here, before the write (a kernel that fails
   halfway has changed it too): the plans' reduced copies of it (npuE_step.copy_of) are stale
   from now on.  Only the two assign paths below write variables. */
static void variable_written(npuE_state *st, int var_node) { st->var_versions[var_node]++; }

/* A Cast step of a variable whose output already holds the copy of the variable's current
   value: nothing to do.  The slot is the plan's own (memory.c keeps it out of the arena), so
   nothing else wrote it since; a version of 0 (never written: uninitialised) never matches. */
static uint64_t copy_source_version(const npuE_state *st, const npuE_step *step) {
  int var_node = step->copy_of - 1;
  return var_node < st->n_variables ? st->var_versions[var_node] : 0;
}

static bool copy_current(const npuE_state *st, const npuE_plan *p, const npuE_step *step) {
  uint64_t ver = copy_source_version(st, step);
  return ver && step->copy_version == ver && p->slots[step->out[0]] && p->owned[step->out[0]];
}

/* assign: the variable's storage takes the value, copy-on-write if a fetched result or an
   earlier read still shares it. */
static npu_status run_assign(npuE_state *st, npuE_plan *p, const npuE_step *step) {
  const npu_graph *g = st->graph;
  int var_node = g->values[step->in[0]].node;
  const npu_tensor *value = p->slots[step->in[1]];
  npu_tensor *cur = st->variables[var_node];
  variable_written(st, var_node);
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

/* An assign step with a kernel (a fused update, compile/fused_ops.c): the kernel updates the
   variable's storage in place, handed to it as input 0 and output 0.  The storage is made
   exclusive first, as run_assign does, but keeping its value: a fetched tensor or an earlier
   result still sharing it keeps the old value. */
static npu_status run_update(npuE_state *st, npuE_plan *p, const npuE_step *step,
                             const npuG_node *node, const npuK_pool *pool, int n_threads) {
  int var_node = st->graph->values[step->in[0]].node;
  npu_tensor *cur = st->variables[var_node];
  if (!cur)
    return npuC_error(st->ctx, NPU_ERR_STATE, "variable '%s' is not initialised: run the "
                      "initializer (g:global_variables_initializer()) or an assign to it first",
                      st->graph->nodes[var_node].name);
  variable_written(st, var_node);
  if (atomic_load(&cur->refcount) != 1) {
    npu_tensor *fresh;
    npu_status s = npu_tensor_new(st->ctx, cur->dtype, cur->ndim, cur->shape, &fresh);
    if (s) return s;
    memcpy(fresh->data, cur->data, cur->nbytes);
    npu_tensor_release(cur);
    st->variables[var_node] = cur = fresh;
  }
  npu_tensor **in = p->in_buf;
  for (int i = 0; i < step->n_in; i++) in[i] = p->slots[step->in[i]];
  in[0] = cur;
  npu_tensor *out[1] = {cur};
  npuX_call call = {.ctx = st->ctx, .pool = pool, .n_threads = n_threads, .node = node,
                    .params = npuE_step_params(step, node), .n_inputs = step->n_in, .in = in,
                    .n_outputs = 1, .out = out,
                    .scratch = step->scratch_at ? step->scratch_at : p->scratch,
                    .step = st->n_iterations, .impl = step->impl, .algo = step->algo,
                    .comm = st->comm, .prepared = step->prepared};
  npu_status s = step->def->run(&call);
  p->slots[step->out[0]] = cur;
  return s;
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
npu_status npuE_observe(npuE_state *st, const npuE_plan *p, npuE_event e, int k) {
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

/* ---- dynamic steps: shapes known only when the step runs ---------------------------------- */

/* Slot v: a buffer of its own of exactly this dtype and shape that nobody else holds (kept
   from the last run when it fits, so a loop whose shapes settle allocates nothing more). */
static npu_status size_slot(npu_context *ctx, npuE_plan *p, int v, npu_dtype dtype, int ndim,
                            const int64_t *shape) {
  npu_tensor *t = p->slots[v];
  if (t && p->owned[v] && atomic_load(&t->refcount) == 1 && t->dtype == dtype && !t->base &&
      npuT_same_shape(t->ndim, t->shape, ndim, shape))
    return NPU_OK;
  if (p->owned[v]) npu_tensor_release(t);
  p->slots[v] = NULL;
  p->owned[v] = 0;
  npu_status s = npu_tensor_new(ctx, dtype, ndim, shape, &p->slots[v]);
  if (!s) p->owned[v] = 1;
  return s;
}

typedef struct dyn_call {
  npuE_plan *p;
  const npuE_step *step;
  npu_tensor **out;      /* the call's output array */
  npu_dtype dtype[NPUX_MAX_OUTPUTS];
} dyn_call;

/* npuX_output for NPUX_F_DATA_SHAPE ops. */
static npu_status resize_output(const npuX_call *c, int i, int ndim, const int64_t *shape) {
  dyn_call *d = c->exec;
  npu_status s = npuT_check_shape(c->ctx, c->node->name, ndim, shape);
  if (!s) s = size_slot(c->ctx, d->p, d->step->out[i], d->dtype[i], ndim, shape);
  if (!s) d->out[i] = d->p->slots[d->step->out[i]];
  return s;
}

/* A dynamic step is run in named stages: describe its inputs, infer and size its outputs, skip
   it when all of them are empty, size its scratch, call its kernel.  Each returns a status. */

/* The step's input tensors into p->in_buf, their descriptors (shapes as they came) into
   p->in_desc: both sized at compile for the widest step. */
static void dyn_inputs(npuE_plan *p, const npuE_step *step) {
  for (int i = 0; i < step->n_in; i++) {
    const npu_tensor *t = p->in_buf[i] = p->slots[step->in[i]];
    p->in_desc[i] = (npuG_value){.node = -1, .dtype = t->dtype, .ndim = t->ndim};
    memcpy(p->in_desc[i].shape, t->shape, sizeof t->shape);
  }
}

/* Output i from its inferred descriptor o: a slot of that shape when o is known; for an op
   sized by its kernel (NPUX_F_DATA_SHAPE), a stand-in meta until npuX_output sizes it.  Any
   other unknown output is a broken op definition (its infer promised a shape), not a user
   error: the API cannot reach it, a C test (tests/test_exec.c) does with a hand-built one. */
static npu_status dyn_output(npu_context *ctx, npuE_plan *p, const npuE_step *step,
                             const npuG_node *node, int i, const npuG_value *o, dyn_call *d,
                             npu_tensor *meta) {
  d->dtype[i] = o->dtype;
  if (npuG_value_known(o)) {
    npu_status s = size_slot(ctx, p, step->out[i], o->dtype, o->ndim, o->shape);
    d->out[i] = p->slots[step->out[i]];
    return s;
  }
  if (step->def->flags & NPUX_F_DATA_SHAPE) {
    *meta = (npu_tensor){.dtype = o->dtype, .ndim = o->ndim < 0 ? 0 : o->ndim};
    memcpy(meta->shape, o->shape, sizeof o->shape);
    d->out[i] = meta;
    return NPU_OK;
  }
  char sh[96];
  return npuC_error(ctx, NPU_ERR_SHAPE, "%s '%s': cannot determine the shape of output %d "
                    "(%s) from its inputs", step->def->name, node->name, i,
                    npuC_shape_str(sh, sizeof sh, o->ndim, o->shape));
}

/* Runs the op's shape inference on the tensors the step gets (their values known, so shapes
   read from data — a reshape's computed shape — work too) and sizes its outputs. */
static npu_status dyn_infer_outputs(npuE_state *st, npuE_plan *p, const npuE_step *step,
                                    const npuG_node *node, const void *params, dyn_call *d,
                                    npu_tensor *meta) {
  const npu_op_def *def = step->def;
  npuX_infer ic = {.ctx = st->ctx, .graph = st->graph, .node = node, .op_name = def->name,
                   .n_inputs = step->n_in, .in = p->in_desc,
                   .const_in = (const npu_tensor *const *)p->in_buf, .n_outputs = step->n_out};
  npu_status s = def->infer ? def->infer(&ic, params) : NPU_OK;
  for (int i = 0; i < step->n_out && !s; i++)
    s = dyn_output(st->ctx, p, step, node, i, &ic.out[i], d, &meta[i]);
  return s;
}

/* all_tensor_not_empty False (the default): the empty-tensor check.  A step whose outputs are
   all sized and all empty has nothing to compute, so its kernel is not called (an op sized by
   its kernel, NPUX_F_DATA_SHAPE, is not known empty before it runs).  True: the kernel runs
   whatever the sizes, as 000 says of removing the check nodes. */
static bool dyn_skip_empty(const npuE_plan *p, const npuE_step *step, npu_tensor *const *out,
                           const npu_tensor *meta) {
  if (!p->config || !p->config->skip_empty || !step->n_out) return false;
  for (int i = 0; i < step->n_out; i++)
    if (out[i] == &meta[i] || out[i]->numel != 0) return false;
  return true;
}

/* The step's scratch, sized for these shapes: p->dyn_scratch, grown when a step needs more. */
static npu_status dyn_scratch(npuE_plan *p, const npu_op_def *def, npuX_call *call) {
  if (!def->scratch_size) return NPU_OK;
  size_t bytes = def->scratch_size(call);
  if (bytes > p->dyn_scratch_size) {
    npuC_free(call->ctx, p->dyn_scratch);
    p->dyn_scratch_size = 0;
    if (!(p->dyn_scratch = npuC_alloc(call->ctx, bytes))) return NPU_ERR_NOMEM;
    p->dyn_scratch_size = bytes;
  }
  call->scratch = p->dyn_scratch;
  return NPU_OK;
}

/* Calls the kernel (the reference one on the reference path and for host steps); a kernel of a
   NPUX_F_DATA_SHAPE op must have sized every output (npuX_output): one that did not is, like
   dyn_output's refusal, a broken op definition reached only from a C test. */
static npu_status dyn_kernel(npuE_plan *p, const npuE_step *step, const npuX_call *call,
                             const npu_tensor *meta) {
  const npu_op_def *def = step->def;
  npu_status (*fn)(const npuX_call *) =
      (p->reference || step->host) && def->run_ref ? def->run_ref : def->run;
  if (!fn)
    return npuC_error(call->ctx, NPU_ERR_UNSUPPORTED, "%s '%s': no kernel", def->name,
                      call->node->name);
  npu_status s = fn(call);
  for (int i = 0; !s && call->resize && i < step->n_out; i++)
    if (call->out[i] == &meta[i])
      s = npuC_error(call->ctx, NPU_ERR_INTERNAL, "%s '%s': output %d was never sized",
                     def->name, call->node->name, i);
  return s;
}

/* A step whose shapes are known only when it runs. */
static npu_status run_dynamic(npuE_state *st, npuE_plan *p, const npuE_step *step,
                              const npuG_node *node, const npuK_pool *pool, int n_threads) {
  const npu_op_def *def = step->def;
  const void *params = npuE_step_params(step, node);
  npu_tensor *out[NPUX_MAX_OUTPUTS];
  npu_tensor meta[NPUX_MAX_OUTPUTS];
  dyn_call d = {.p = p, .step = step, .out = out};
  dyn_inputs(p, step);
  npu_status s = dyn_infer_outputs(st, p, step, node, params, &d, meta);
  if (s) return s;
  if (dyn_skip_empty(p, step, out, meta)) {
    st->n_empty_skips++;
    return NPU_OK;
  }
  bool data_shape = (def->flags & NPUX_F_DATA_SHAPE) != 0;
  npuX_call call = {.ctx = st->ctx, .pool = pool, .n_threads = n_threads, .node = node,
                    .params = params, .n_inputs = step->n_in, .in = p->in_buf,
                    .n_outputs = step->n_out, .out = out, .step = st->n_iterations,
                    .impl = step->impl, .algo = step->algo,
                    .resize = data_shape ? resize_output : NULL, .exec = &d,
                    .discarded = st->discarded, .run = st->run_options, .comm = st->comm};
  s = dyn_scratch(p, def, &call);
  return s ? s : dyn_kernel(p, step, &call, meta);
}

/* ---- cancellation and deadlines (core/watch.c) --------------------------------------------- */

npu_status npuE_stop(npuE_state *st, const npuE_step *step, npuC_stop why) {
  npu_context *ctx = st->ctx;
  char at[200] = "between steps";
  if (step)
    snprintf(at, sizeof at, "at step '%.100s' (%s)", st->graph->nodes[step->node].name,
             step->def->name);
  switch (why) {
  case NPUC_STOP_SESSION:
    return npuC_error(ctx, NPU_ERR_CANCELLED, "the run was cancelled (npu_session_cancel) %s", at);
  case NPUC_STOP_CONTEXT:
    return npuC_error(ctx, NPU_ERR_CANCELLED, "the run was cancelled (npu_context_cancel) %s", at);
  case NPUC_STOP_HOST:
    return npuC_error(ctx, NPU_ERR_CANCELLED, "the run was interrupted %s", at);
  case NPUC_STOP_DEADLINE:
    return npuC_error(ctx, NPU_ERR_TIMEOUT, "the run passed its timeout (timeout_in_ms = %lld) %s",
                      (long long)st->timeout_ms, at);
  case NPUC_STOP_OP:
    return npuC_error(ctx, NPU_ERR_TIMEOUT, "%s: ran longer than op_execute_timeout (%lld s)",
                      at + 3, (long long)(st->op_execute_ns / 1000000000));
  case NPUC_GO: break;
  }
  return NPU_OK;
}

/* After a step: a kernel that polls npuK_stopped may have returned early (its outputs are then
   unspecified, so the run fails here); op_execute_timeout is checked against the step's time. */
static npu_status step_finished(npuE_state *st, const npuE_step *step, npu_status s) {
  npuC_watch *w = st->watch;
  npuC_stop why = (npuC_stop)atomic_load_explicit(&w->stopped, memory_order_relaxed);
  if (w->op_deadline_ns) {
    if (!why && npuC_now_ns() >= w->op_deadline_ns) {
      int expected = NPUC_GO;
      atomic_compare_exchange_strong(&w->stopped, &expected, NPUC_STOP_OP);
      why = (npuC_stop)atomic_load(&w->stopped);
    }
    w->op_deadline_ns = 0;
  }
  /* a dataset wait that stopped returns the status with no message: named here */
  return why && (!s || s == NPU_ERR_CANCELLED || s == NPU_ERR_TIMEOUT) ? npuE_stop(st, step, why)
                                                                      : s;
}

static npu_status run_kernel_step(npuE_state *st, npuE_plan *p, const npuE_step *step);

npu_status npuE_run_step(npuE_state *st, npuE_plan *p, const npuE_step *step) {
  if (!st->watch) return run_kernel_step(st, p, step);
  npu_status s = npuE_check(st, step);
  if (s) return s;
  npuX_kind kind = step->def->kind;
  if (kind == NPUX_KIND_COND || kind == NPUX_KIND_WHILE) return run_kernel_step(st, p, step);
  bool timed = st->op_execute_ns && kind != NPUX_KIND_GET_NEXT;
  if (timed) st->watch->op_deadline_ns = npuC_now_ns() + st->op_execute_ns;
  if (kind == NPUX_KIND_ASSIGN) st->watch->hold++; /* variables are never left half written */
  s = run_kernel_step(st, p, step);
  if (kind == NPUX_KIND_ASSIGN) st->watch->hold--;
  return step_finished(st, step, s);
}

static npu_status run_kernel_step_on(npuE_state *st, npuE_plan *p, const npuE_step *step);

/* A tuned step (compile/tuning.c) may run on fewer threads than the context's: the pool is
   narrowed for it (the kernels give the same bits at any thread count). */
static npu_status run_kernel_step(npuE_state *st, npuE_plan *p, const npuE_step *step) {
  npuC_pool *pool = st->ctx->pool;
  int was = step->threads && !p->reference ? npuC_pool_active(pool) : 0;
  if (step->threads >= was) return run_kernel_step_on(st, p, step);
  npuC_pool_set_active(pool, step->threads);
  npu_status s = run_kernel_step_on(st, p, step);
  npuC_pool_set_active(pool, was);
  return s;
}

/* A kernel's failure: the exception dump, and its node for the host (npu_context_errnode)
   once the dump has written its files.  Only failing steps come here: the run path pays
   nothing for it. */
static void kernel_failed(npuE_state *st, npuE_plan *p, const npuE_step *step, npu_status s) {
  npuE_exception_dump(st, p, step->index, s); /* exec/exception_dump.c */
  npuC_error_node(st->ctx, st->graph->nodes[step->node].name, step->def->name);
}

static npu_status run_kernel_step_on(npuE_state *st, npuE_plan *p, const npuE_step *step) {
  npu_context *ctx = st->ctx;
  const npuG_node *node = &st->graph->nodes[step->node];
  /* the reference path and host steps (mixed computing) run the reference kernels, serially
     on this thread; a run beside another that holds the pool (st->serial) runs the device's
     kernels on this thread alone (same bits: kernels split work only where it cannot matter) */
  bool ref = p->reference || step->host;
  bool serial = ref || st->serial;
  const npuK_pool *pool = serial ? NULL : npuC_kernel_pool(ctx);
  /* Scratch was sized for p->n_threads slots: never hand a kernel more. */
  int n_threads = serial ? 1 : npu_context_n_threads(ctx);
  if (n_threads > p->n_threads) n_threads = p->n_threads;
  npu_status s = NPU_OK;
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
  case NPUX_KIND_ASSIGN:
    s = step->def->run ? run_update(st, p, step, node, pool, n_threads) : run_assign(st, p, step);
    break;
  case NPUX_KIND_IDENTITY: p->slots[step->out[0]] = p->slots[step->in[0]]; break;
  case NPUX_KIND_NO_OP: break;
  case NPUX_KIND_GET_NEXT: s = run_get_next(st, p, step, node); break;
  case NPUX_KIND_COND:
  case NPUX_KIND_WHILE: s = npuE_run_control(st, p, step); break;
  default: {
    if (step->dynamic) {
      s = run_dynamic(st, p, step, node, pool, n_threads);
      if (s) kernel_failed(st, p, step, s);
      break;
    }
    if (step->copy_of && copy_current(st, p, step)) {
      st->n_copy_reuses++;
      break;
    }
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
                        .step = st->n_iterations, .impl = step->impl, .algo = step->algo,
                        .discarded = st->discarded, .comm = st->comm, .prepared = step->prepared};
      npu_status (*fn)(const npuX_call *) =
          ref && step->def->run_ref ? step->def->run_ref : step->def->run;
      s = fn ? fn(&call)
             : npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s '%s': no kernel", step->def->name,
                          node->name);
      if (s && fn) kernel_failed(st, p, step, s);
      if (!s && step->widen) narrow_outputs(pool, p, step, out_stack);
      /* the plan's own step (plans run on one lane at a time): a copy made is remembered */
      if (step->copy_of)
        ((npuE_step *)step)->copy_version = s ? 0 : copy_source_version(st, step);
    }
    break;
  }
  }
  return s;
}

/* npu_run_options.progress after an iteration: every st->progress_every iterations (fixed at
   the run's start) and after the last; a nonzero answer cancels the run. */
static npu_status report_progress(npuE_state *st) {
  const npu_run_options *ro = st->run_options;
  int64_t done = ++st->progress_done, total = st->progress_total;
  if (done % st->progress_every != 0 && done != total) return NPU_OK;
  if (!ro->progress(ro->progress_ud, done, total)) return NPU_OK;
  return npuC_error(st->ctx, NPU_ERR_CANCELLED,
                    "the run was cancelled by its progress callback after iteration %lld of %lld",
                    (long long)done, (long long)total);
}

npu_status npuE_run(npuE_state *st, npuE_plan *p, npu_tensor *const *feed_tensors,
                    npu_tensor **fetch_out) {
  npu_status s = NPU_OK;
  for (int i = 0; i < p->n_feeds; i++) p->slots[p->feeds[i]] = feed_tensors[i];

  bool observed = st->dump || st->profile;
  st->nest = (npuE_nest){0};
  if (observed) s = npuE_observe(st, p, NPUE_RUN_BEGIN, -1);
  int64_t iteration = 0, iterations = st->loop_left > 0 ? st->loop_left : p->iterations;
  /* progress counts the whole run: a plan taking over a loop (loop_left) goes on counting */
  bool progress = st->run_options && st->run_options->progress;
  if (progress && !st->loop_left) {
    const npu_run_options *ro = st->run_options;
    st->progress_done = 0;
    st->progress_total = iterations;
    st->progress_every = ro->progress_every > 0 ? ro->progress_every : iterations / 100;
    if (st->progress_every < 1) st->progress_every = 1;
  }
  st->loop_left = 0;
again:
  st->discarded = iteration + 1 < iterations;
  if (observed && !s) s = npuE_observe(st, p, NPUE_ITER_BEGIN, -1);
  for (int k = 0; k < p->n_steps && !s; k++) {
    /* an iteration whose fetches are dropped skips what only they need (compile.h); the
       observers see every step */
    if (st->discarded && p->steps[k].fetch_only && !observed) continue;
    if (observed && (s = npuE_observe(st, p, NPUE_STEP_BEGIN, k))) break;
    s = npuE_run_step(st, p, &p->steps[k]);
    if (observed && !s) s = npuE_observe(st, p, NPUE_STEP_END, k);
  }
  if (observed && !s) s = npuE_observe(st, p, NPUE_ITER_END, -1);
  /* iterations_per_loop: the whole plan again, without returning to the caller */
  if (!s) st->n_iterations++;
  if (progress && !s) s = report_progress(st); /* unset: this test alone */
  st->discarded = false;
  if (!s && ++iteration < iterations) {
    /* a dataset's next element of another shape: the session runs the remaining iterations
       with the plan of that shape (the fetches are then that plan's last step's) */
    bool same = true;
    if (p->n_next) s = npuE_next_matches(st, p, &same);
    if (!s && same) goto again;
    if (!s) st->loop_left = iterations - iteration;
  }
  if (observed) { /* before the fetches are handed out: a failing dump fails the run */
    npu_status end = npuE_observe(st, p, NPUE_RUN_END, -1);
    if (!s) s = end;
  }
  if (!s && !st->loop_left)
    for (int i = 0; i < p->n_fetches; i++) fetch_out[i] = npu_tensor_retain(p->slots[p->fetches[i]]);
  /* Borrowed slots must not outlive this call: feeds belong to the caller. */
  for (int i = 0; i < p->n_borrowed; i++) p->slots[p->borrowed[i]] = NULL;
  p->uses++;
  return s;
}
