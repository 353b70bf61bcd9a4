/*
 * plan.c — compiling one fetch/feed signature of a graph into a plan.
 *
 *  1. prune: mark the nodes the fetches and targets need, walking node ids downwards (ids are a
 *     topological order) and stopping at fed values;
 *  2. check: every needed placeholder is fed, feeds agree with their placeholders' dtype and
 *     shape (-1 matches any size);
 *  3. infer: run each needed op's shape inference again with the feeds' concrete shapes, so
 *     every value has a known shape and a wrong combination fails now, naming the node;
 *  4. lay out: one slot per value, constants bound once, scratch sized for the largest step;
 *  5. passes: fusion, precision, implementation modes, memory (compile/passes.h).
 */
#include <string.h>

#include "compile/passes.h"
#include "compile/precision.h"
#include "exec/exec.h"

bool npuP_matches(const npuE_plan *p, int n_feeds, const int *feeds,
                  npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                  int n_targets, const int *targets) {
  if (p->n_feeds != n_feeds || p->n_fetches != n_fetches || p->n_targets != n_targets)
    return false;
  if (n_fetches && memcmp(p->fetches, fetches, (size_t)n_fetches * sizeof *fetches)) return false;
  if (n_targets && memcmp(p->targets, targets, (size_t)n_targets * sizeof *targets)) return false;
  if (n_feeds && memcmp(p->feeds, feeds, (size_t)n_feeds * sizeof *feeds)) return false;
  for (int i = 0; i < n_feeds; i++) {
    const npu_tensor *t = feed_tensors[i];
    const int64_t *want = p->feed_shapes + i * NPU_MAX_DIMS;
    if (t->dtype != p->feed_dtypes[i] || t->ndim != p->feed_ndims[i]) return false;
    for (int k = 0; k < t->ndim; k++) /* a generic plan's -1 takes any size */
      if (want[k] != t->shape[k] && !(p->generic && want[k] < 0)) return false;
  }
  return true;
}

void npuP_steps_free(npu_context *ctx, npuE_step *steps, int n) {
  for (int i = 0; i < n; i++) {
    npuC_free(ctx, steps[i].in);
    npuC_free(ctx, steps[i].owned_params);
    npuC_free(ctx, steps[i].absorbed);
    npuC_free(ctx, steps[i].widen);
    npuP_control_free(ctx, steps[i].control);
  }
  npuC_free(ctx, steps);
}

void npuP_free(npu_context *ctx, npuE_plan *p) {
  if (!p) return;
  if (p->slots && p->owned)
    for (int v = 0; v < p->n_values; v++)
      if (p->owned[v]) npu_tensor_release(p->slots[v]);
  npuP_steps_free(ctx, p->steps, p->n_steps);
  npuC_free(ctx, p->folded);
  npuC_free(ctx, p->next_nodes);
  npuC_free(ctx, p->feeds);
  npuC_free(ctx, p->fetches);
  npuC_free(ctx, p->targets);
  npuC_free(ctx, p->feed_dtypes);
  npuC_free(ctx, p->feed_ndims);
  npuC_free(ctx, p->feed_shapes);
  npuC_free(ctx, p->values);
  npuC_free(ctx, p->slots);
  npuC_free(ctx, p->owned);
  npuC_free(ctx, p->borrowed);
  npuC_free(ctx, p->scratch);
  npuC_free(ctx, p->dyn_scratch);
  npuC_free(ctx, p->round_buf);
  npuC_free(ctx, p->in_buf);
  npuC_free(ctx, p->round_meta);
  npu_tensor_release(p->memory.arena); /* after the views in the slots: they retain it too */
  npuC_free(ctx, p->memory.offset);
  npuC_free(ctx, p->memory.step_offset);
  npuC_free(ctx, p);
}

static void *dup_ints(npu_context *ctx, const int *src, int n, bool *ok) {
  if (n == 0) return NULL;
  int *d = npuC_alloc(ctx, (size_t)n * sizeof *d);
  if (!d) *ok = false;
  else memcpy(d, src, (size_t)n * sizeof *d);
  return d;
}

/* A feed must agree with the value it replaces: same dtype, same rank, each known dim equal —
   unless any_dims (compile_dynamic_mode: "all input shapes are generalised to -1", 000) and
   it is a placeholder's: then any dims of its rank.  Shape inference then runs on the fed
   shapes, so an op that cannot take them fails the compile, naming itself. */
static npu_status check_feed(npu_context *ctx, const npu_graph *g, int v, const npu_tensor *t,
                             bool any_dims) {
  const npuG_value *want = &g->values[v];
  const npuG_node *node = &g->nodes[want->node];
  char a[96], b[96];
  bool is_ph = npuX_op(node->op)->kind == NPUX_KIND_PLACEHOLDER;
  const char *what = is_ph ? "placeholder" : "fed tensor";
  if (t->dtype != want->dtype)
    return npuC_error(ctx, NPU_ERR_DTYPE, "%s '%s' expects %s, got %s", what, node->name,
                      npu_dtype_name(want->dtype), npu_dtype_name(t->dtype));
  bool ok = want->ndim < 0 || want->ndim == t->ndim;
  for (int i = 0; ok && want->ndim >= 0 && !(any_dims && is_ph) && i < t->ndim; i++)
    ok = want->shape[i] < 0 || want->shape[i] == t->shape[i];
  if (!ok)
    return npuC_error(ctx, NPU_ERR_SHAPE, "%s '%s' expects %s, got %s", what, node->name,
                      npuC_shape_str(a, sizeof a, want->ndim, want->shape),
                      npuC_shape_str(b, sizeof b, t->ndim, t->shape));
  return NPU_OK;
}

static void meta_tensor(npu_tensor *t, const npuG_value *v) {
  *t = (npu_tensor){.dtype = v->dtype, .ndim = v->ndim};
  memcpy(t->shape, v->shape, sizeof v->shape);
  t->numel = npuT_numel(v->ndim, v->shape);
  t->nbytes = (size_t)t->numel * npu_dtype_size(v->dtype);
}

/* Asks the op how much scratch the step needs, with stand-in tensors for its inputs and
   outputs; the plan keeps the largest. */
npu_status npuP_step_scratch(npu_context *ctx, npuE_plan *p, npuE_step *step,
                              const npuG_node *node, bool reference) {
  int n = step->n_in + step->n_out;
  npu_tensor meta_stack[16];
  npu_tensor *ptr_stack[16];
  npu_tensor *meta = meta_stack;
  npu_tensor **ptr = ptr_stack;
  if (n > 16) {
    meta = npuC_alloc(ctx, (size_t)n * sizeof *meta);
    ptr = npuC_alloc(ctx, (size_t)n * sizeof *ptr);
    if (!meta || !ptr) {
      npuC_free(ctx, meta);
      npuC_free(ctx, ptr);
      return NPU_ERR_NOMEM;
    }
  }
  for (int i = 0; i < n; i++) {
    int v = i < step->n_in ? step->in[i] : step->out[i - step->n_in];
    meta_tensor(&meta[i], &p->values[v]);
    ptr[i] = &meta[i];
  }
  npuX_call call = {.ctx = ctx, .n_threads = reference ? 1 : p->n_threads, .node = node,
                    .params = step->params, .n_inputs = step->n_in, .in = ptr,
                    .n_outputs = step->n_out, .out = ptr + step->n_in};
  step->scratch_size = step->def->scratch_size(&call);
  if (step->scratch_size > p->scratch_size) p->scratch_size = step->scratch_size;
  if (meta != meta_stack) {
    npuC_free(ctx, meta);
    npuC_free(ctx, ptr);
  }
  return NPU_OK;
}

bool npuP_fully_known(const npuG_value *v) {
  if (v->ndim < 0) return false;
  for (int i = 0; i < v->ndim; i++)
    if (v->shape[i] < 0) return false;
  return true;
}

/* Runs the op's shape inference with the concrete input shapes (and the inputs' values where
   they are known at compile time); stores the outputs' descriptors in p->values. */
npu_status npuP_infer_node(npu_context *ctx, const npu_graph *g, npuE_plan *p,
                             const npuG_node *node, npu_tensor **known) {
  const npu_op_def *def = npuX_op(node->op);
  npuG_value in_stack[16];
  const npu_tensor *const_stack[16];
  npuG_value *in = in_stack;
  const npu_tensor **const_in = const_stack;
  if (node->n_inputs > 16) {
    in = npuC_alloc(ctx, (size_t)node->n_inputs * sizeof *in);
    const_in = npuC_alloc(ctx, (size_t)node->n_inputs * sizeof *const_in);
    if (!in || !const_in) {
      if (in != in_stack) npuC_free(ctx, in);
      if (const_in != const_stack) npuC_free(ctx, (void *)const_in);
      return NPU_ERR_NOMEM;
    }
  }
  for (int i = 0; i < node->n_inputs; i++) {
    in[i] = p->values[node->inputs[i]];
    const_in[i] = known[node->inputs[i]];
  }
  npuX_infer ic = {.ctx = ctx, .graph = g, .node = node, .op_name = def->name,
                   .n_inputs = node->n_inputs, .in = in, .const_in = const_in,
                   .n_outputs = node->n_outputs};
  npu_status s = def->infer ? def->infer(&ic, node->params.bytes) : NPU_OK;
  if (in != in_stack) {
    npuC_free(ctx, in);
    npuC_free(ctx, (void *)const_in);
  }
  if (s) return s;
  /* An output whose shape is still not fully known (it depends on data, or on a shape only
     a run gives) makes its step dynamic (npuP_emit_step): shaped when it runs. */
  for (int i = 0; i < node->n_outputs && def->infer; i++) {
    npuG_value nv = ic.out[i];
    nv.node = node - g->nodes;
    nv.index = i;
    p->values[node->first_output + i] = nv;
  }
  return NPU_OK;
}

/* Constant folding: a kernel op whose inputs are all known is evaluated now (with
   oo_constant_folding on); an op whose value depends only on shapes (Shape) always is, since
   the shapes are concrete here.  Stateful and random ops never are. */
static bool can_fold(const npuP_config *cfg, const npuE_plan *p, const npu_op_def *def,
                     const npuG_node *node, npu_tensor **known) {
  if (def->kind != NPUX_KIND_KERNEL || (def->flags & (NPUX_F_NO_FOLD | NPUX_F_DATA_SHAPE)) ||
      !def->run || node->region)
    return false;
  for (int i = 0; i < node->n_outputs; i++)
    if (!npuP_fully_known(&p->values[node->first_output + i])) return false;
  for (int i = 0; i < node->n_inputs; i++) /* a shape-only op needs its inputs' shapes */
    if (!npuP_fully_known(&p->values[node->inputs[i]])) return false;
  if (def->flags & NPUX_F_SHAPE_ONLY) return true;
  if (!cfg->fold) return false;
  for (int i = 0; i < node->n_inputs; i++)
    if (!known[node->inputs[i]]) return false;
  return true;
}

/* Evaluates node now; its outputs become plan-owned constants. */
static npu_status fold_node(npu_context *ctx, npuE_plan *p, const npuG_node *node,
                            npu_tensor **known, bool reference) {
  const npu_op_def *def = npuX_op(node->op);
  int n_in = node->n_inputs, n_out = node->n_outputs;
  npu_tensor *meta = npuC_alloc(ctx, (size_t)(n_in ? n_in : 1) * sizeof *meta);
  npu_tensor **ptr = npuC_alloc(ctx, (size_t)(n_in + n_out + 1) * sizeof *ptr);
  npu_status s = meta && ptr ? NPU_OK : NPU_ERR_NOMEM;
  for (int i = 0; !s && i < n_in; i++) {
    int v = node->inputs[i];
    if (known[v]) {
      ptr[i] = known[v];
    } else { /* shape-only op: a stand-in carrying the shape */
      meta_tensor(&meta[i], &p->values[v]);
      ptr[i] = &meta[i];
    }
  }
  for (int i = 0; !s && i < n_out; i++) {
    int v = node->first_output + i;
    const npuG_value *d = &p->values[v];
    s = npu_tensor_new(ctx, d->dtype, d->ndim, d->shape, &ptr[n_in + i]);
    if (!s) {
      p->slots[v] = known[v] = ptr[n_in + i];
      p->owned[v] = 1;
    }
  }
  void *scratch = NULL;
  npuX_call call = {.ctx = ctx, .n_threads = 1, .node = node, .params = node->params.bytes,
                    .n_inputs = n_in, .in = ptr, .n_outputs = n_out, .out = ptr + n_in};
  if (!s && def->scratch_size) {
    size_t bytes = def->scratch_size(&call);
    if (bytes && !(scratch = call.scratch = npuC_alloc(ctx, bytes))) s = NPU_ERR_NOMEM;
  }
  if (!s) {
    npu_status (*fn)(const npuX_call *) = reference && def->run_ref ? def->run_ref : def->run;
    s = fn(&call);
    if (s) npuC_error_prefix(ctx, s, "while folding constant '%s'", node->name);
  }
  npuC_free(ctx, scratch);
  npuC_free(ctx, meta);
  npuC_free(ctx, ptr);
  return s;
}

/* Fills *step, the step that runs node on the device (in the plan's list or a nested block). */
npu_status npuP_emit_step(npu_context *ctx, npuE_plan *p, const npuP_config *cfg, int id,
                          const npuG_node *node, bool read, npuE_step *step) {
  const npu_op_def *def = npuX_op(node->op);
  step->node = id;
  step->def = def;
  step->params = node->params.bytes;
  step->reads_variable = read;
  step->round_in = step->round_out = -1; /* the precision pass sets them */
  step->n_in = node->n_inputs;
  step->n_out = node->n_outputs;
  if (step->n_in > p->max_in) p->max_in = step->n_in;
  step->in = npuC_alloc(ctx, (size_t)(step->n_in + step->n_out + 1) * sizeof(int));
  if (!step->in) return NPU_ERR_NOMEM;
  step->out = step->in + step->n_in;
  if (step->n_in) memcpy(step->in, node->inputs, (size_t)step->n_in * sizeof(int));
  /* shapes known only at run time: the step sizes its outputs and scratch then */
  step->dynamic = def->kind == NPUX_KIND_KERNEL &&
                  ((def->flags & NPUX_F_DATA_SHAPE) || node->region);
  for (int i = 0; i < step->n_in && def->kind == NPUX_KIND_KERNEL; i++)
    step->dynamic |= !npuP_fully_known(&p->values[step->in[i]]);
  for (int i = 0; i < step->n_out; i++) {
    int v = node->first_output + i;
    step->out[i] = v;
    if (def->kind == NPUX_KIND_KERNEL) step->dynamic |= !npuP_fully_known(&p->values[v]);
    if (def->kind == NPUX_KIND_VARIABLE || def->kind == NPUX_KIND_ASSIGN ||
        def->kind == NPUX_KIND_IDENTITY || def->kind == NPUX_KIND_COND)
      p->borrowed[p->n_borrowed++] = v;
  }
  p->dynamic |= step->dynamic;
  if (def->kind == NPUX_KIND_KERNEL && def->scratch_size && !step->dynamic)
    return npuP_step_scratch(ctx, p, step, node, cfg->reference);
  return NPU_OK;
}

/* The rules of iterations_per_loop (000, 003): the loop's count equals the session option,
   the graph takes its data from a dataset on the device, the session trains. */
static npu_status check_loop(npu_context *ctx, const npuE_plan *p, const npuP_config *cfg,
                             const npuG_node *loop) {
  int64_t n = npuX_loop_iterations(loop);
  if (n != cfg->iterations_per_loop)
    return npuC_error(ctx, NPU_ERR_CONFLICT,
                      "loop '%s' runs %lld iterations but the session option iterations_per_loop "
                      "is %lld: set_iteration_per_loop and parameter_map[\"iterations_per_loop\"] "
                      "must be equal",
                      loop->name, (long long)n, (long long)cfg->iterations_per_loop);
  if (!cfg->training)
    return npuC_error(ctx, NPU_ERR_CONFLICT,
                      "loop '%s': iterations_per_loop loops need graph_run_mode 1 (training)",
                      loop->name);
  bool has_data = false;
  for (int i = 0; i < p->n_steps; i++) has_data |= p->steps[i].def->kind == NPUX_KIND_GET_NEXT;
  if (!has_data)
    return npuC_error(ctx, NPU_ERR_CONFLICT,
                      "loop '%s': the graph must take its data from a dataset on the device "
                      "(an iterator's get_next), not from feeds, to run %lld iterations per call",
                      loop->name, (long long)n);
  return NPU_OK;
}

npu_status npuP_compile(npuE_state *st, int n_feeds, const int *feeds,
                        npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                        int n_targets, const int *targets, const npuP_config *cfg,
                        npuE_plan **out) {
  npu_context *ctx = st->ctx;
  bool reference = cfg->reference;
  const npu_graph *g = st->graph;
  *out = NULL;
  int n_nodes = g->n_nodes, n_values = g->n_values;
  for (int i = 0; i < n_feeds; i++)
    if (feeds[i] < 0 || feeds[i] >= n_values)
      return npuC_error(ctx, NPU_ERR_ARG, "feed %d is not a value of this graph", i + 1);
  for (int i = 0; i < n_fetches; i++)
    if (fetches[i] < 0 || fetches[i] >= n_values)
      return npuC_error(ctx, NPU_ERR_ARG, "fetch %d is not a value of this graph", i + 1);
  for (int i = 0; i < n_targets; i++)
    if (targets[i] < 0 || targets[i] >= n_nodes)
      return npuC_error(ctx, NPU_ERR_ARG, "target %d is not a node of this graph", i + 1);
  for (int i = 0; i < n_fetches + n_targets; i++) {
    int node = i < n_fetches ? g->values[fetches[i]].node : targets[i - n_fetches];
    if (g->nodes[node].region)
      return npuC_error(ctx, NPU_ERR_ARG, "%s '%s' was built inside a cond branch or while "
                        "loop: return it from there and fetch the result",
                        i < n_fetches ? "fetch" : "target", g->nodes[node].name);
  }
  for (int i = 0; i < n_feeds; i++) {
    npu_status s = check_feed(ctx, g, feeds[i], feed_tensors[i], cfg->any_feed_dims);
    if (s) return s;
  }

  npuE_plan *p = npuC_calloc(ctx, 1, sizeof *p);
  /* need[id]: bit 0 the node runs, bit 1 its value is read (for variables: an assign's
     target input is a write, not a read). */
  uint8_t *need = npuC_calloc(ctx, (size_t)n_nodes + 1, 1);
  if (!p || !need) {
    npuC_free(ctx, p);
    npuC_free(ctx, need);
    return NPU_ERR_NOMEM;
  }
  npu_status s = NPU_OK;
  bool ok = true;
  npu_tensor **known = NULL;
  int dump = -1; /* DUMP_GE_GRAPH: this compilation's number in the dump files, -1 off */
  p->reference = reference;
  p->fold = cfg->fold;
  p->config = cfg;
  p->iterations = 1;
  const npuG_node *loop = NULL;
  p->n_threads = npu_context_n_threads(ctx);
  p->n_feeds = n_feeds;
  p->n_fetches = n_fetches;
  p->n_targets = n_targets;
  p->feeds = dup_ints(ctx, feeds, n_feeds, &ok);
  p->fetches = dup_ints(ctx, fetches, n_fetches, &ok);
  p->targets = dup_ints(ctx, targets, n_targets, &ok);
  p->n_values = n_values;
  if (n_feeds) {
    p->feed_dtypes = npuC_alloc(ctx, (size_t)n_feeds * sizeof *p->feed_dtypes);
    p->feed_ndims = npuC_alloc(ctx, (size_t)n_feeds * sizeof *p->feed_ndims);
    p->feed_shapes = npuC_calloc(ctx, (size_t)n_feeds * NPU_MAX_DIMS, sizeof(int64_t));
    ok = ok && p->feed_dtypes && p->feed_ndims && p->feed_shapes;
  }
  p->values = npuC_alloc(ctx, (size_t)(n_values ? n_values : 1) * sizeof *p->values);
  p->slots = npuC_calloc(ctx, (size_t)(n_values ? n_values : 1), sizeof *p->slots);
  p->owned = npuC_calloc(ctx, (size_t)(n_values ? n_values : 1), 1);
  if (!ok || !p->values || !p->slots || !p->owned) {
    s = NPU_ERR_NOMEM;
    goto fail;
  }
  for (int i = 0; i < n_feeds; i++) {
    const npu_tensor *t = feed_tensors[i];
    p->feed_dtypes[i] = t->dtype;
    p->feed_ndims[i] = t->ndim;
    memcpy(p->feed_shapes + i * NPU_MAX_DIMS, t->shape, sizeof t->shape);
    for (int k = 0; k < t->ndim; k++) p->generic |= t->shape[k] < 0; /* compile/generalize.c */
  }
  if (n_values) memcpy(p->values, g->values, (size_t)n_values * sizeof *p->values);

  /* 1. prune */
  for (int i = 0; i < n_fetches; i++)
    if (!npuP_is_fed(n_feeds, feeds, fetches[i])) need[g->values[fetches[i]].node] = 3;
  for (int i = 0; i < n_targets; i++) need[targets[i]] = 1;
  int n_steps = 0, n_borrowed = n_feeds;
  for (int id = n_nodes - 1; id >= 0; id--) {
    if (!need[id]) continue;
    const npuG_node *node = &g->nodes[id];
    npuX_kind kind = npuX_op(node->op)->kind;
    for (int i = 0; i < node->n_inputs; i++)
      if (!npuP_is_fed(n_feeds, feeds, node->inputs[i]))
        need[g->values[node->inputs[i]].node] |= kind == NPUX_KIND_ASSIGN && i == 0 ? 1 : 3;
    for (int i = 0; i < node->n_controls; i++) need[node->controls[i]] |= 1;
    if (kind != NPUX_KIND_CONST && kind != NPUX_KIND_PLACEHOLDER) n_steps++;
    if (kind == NPUX_KIND_VARIABLE || kind == NPUX_KIND_ASSIGN || kind == NPUX_KIND_IDENTITY ||
        kind == NPUX_KIND_COND || kind == NPUX_KIND_LOOP_VAR)
      n_borrowed += node->n_outputs;
  }

  if ((s = npuP_graph_dump_begin(ctx, cfg, &dump))) goto fail;
  if (dump >= 0) {
    npuP_build given = {.ctx = ctx, .graph = g, .plan = p, .cfg = cfg, .need = need};
    if ((s = npuP_graph_dump(&given, dump, 0, "PreRunBegin", false))) goto fail;
  }

  /* 2 + 3. check feeds, infer concrete shapes, lay out steps */
  for (int i = 0; i < n_feeds; i++) {
    npuG_value *v = &p->values[feeds[i]];
    const npu_tensor *t = feed_tensors[i];
    v->ndim = t->ndim;
    memcpy(v->shape, t->shape, sizeof t->shape);
  }
  p->steps = npuC_calloc(ctx, (size_t)(n_steps ? n_steps : 1), sizeof *p->steps);
  /* folded nodes were counted as steps: n_steps bounds them too */
  p->folded = npuC_alloc(ctx, (size_t)(n_steps ? n_steps : 1) * sizeof *p->folded);
  p->borrowed = npuC_alloc(ctx, (size_t)(n_borrowed ? n_borrowed : 1) * sizeof *p->borrowed);
  if (!p->steps || !p->borrowed || !p->folded) {
    s = NPU_ERR_NOMEM;
    goto fail;
  }
  for (int i = 0; i < n_feeds; i++) p->borrowed[p->n_borrowed++] = feeds[i];
  /* known[v]: the value of v when it is fixed at compile time (constants, folded nodes) */
  known = npuC_calloc(ctx, (size_t)(n_values ? n_values : 1), sizeof *known);
  if (!known) {
    s = NPU_ERR_NOMEM;
    goto fail;
  }
  for (int id = 0; id < n_nodes; id++) {
    if (!need[id]) continue;
    const npuG_node *node = &g->nodes[id];
    const npu_op_def *def = npuX_op(node->op);
    if (node->region) continue; /* compiled with the cond / while running it (control.c) */
    if (def->kind == NPUX_KIND_COND || def->kind == NPUX_KIND_WHILE) {
      npuP_build b = {.ctx = ctx, .graph = g, .plan = p, .cfg = cfg, .known = known, .need = need};
      if ((s = npuP_emit_control(&b, id, &p->steps[p->n_steps]))) goto fail;
      p->n_steps++;
      p->dynamic = true;
      continue;
    }
    if (def->kind == NPUX_KIND_PLACEHOLDER) {
      if (!npuP_is_fed(n_feeds, feeds, node->first_output)) {
        char sh[96];
        const npuG_value *v = &g->values[node->first_output];
        s = npuC_error(ctx, NPU_ERR_ARG,
                       "placeholder '%s' (%s %s) must be fed: a value for it is missing",
                       node->name, npu_dtype_name(v->dtype),
                       npuC_shape_str(sh, sizeof sh, v->ndim, v->shape));
        goto fail;
      }
      continue;
    }
    if (def->kind == NPUX_KIND_CONST) {
      /* retained: the graph's Const value may be replaced while this plan lives (by a file-
         backed twin, compile/external_weight.c) */
      if (!npuP_is_fed(n_feeds, feeds, node->first_output)) {
        p->slots[node->first_output] = known[node->first_output] =
            npu_tensor_retain(npuG_attr_find(node, "value")->u.tensor);
        p->owned[node->first_output] = 1;
      }
      continue;
    }
    if (def->kind == NPUX_KIND_LOOP) {
      if (loop && npuX_loop_iterations(loop) != npuX_loop_iterations(node)) {
        s = npuC_error(ctx, NPU_ERR_ARG, "loops '%s' (%lld iterations) and '%s' (%lld) cannot run "
                       "in one call", loop->name, (long long)npuX_loop_iterations(loop), node->name,
                       (long long)npuX_loop_iterations(node));
        goto fail;
      }
      loop = node;
      p->iterations = npuX_loop_iterations(node);
      continue;
    }
    /* get_next: the dataset's element spec, its -1 dims those of the next element */
    s = def->kind == NPUX_KIND_GET_NEXT ? npuE_next_bind(st, p, id)
                                        : npuP_infer_node(ctx, g, p, node, known);
    if (s) goto fail;
    if (can_fold(cfg, p, def, node, known)) {
      s = fold_node(ctx, p, node, known, reference);
      if (s) goto fail;
      p->folded[p->n_folded++] = id;
      continue;
    }
    s = npuP_emit_step(ctx, p, cfg, id, node, (need[id] & 2) != 0, &p->steps[p->n_steps++]);
    if (s) goto fail;
  }
  if (loop && (s = check_loop(ctx, p, cfg, loop))) goto fail;
  /* 5. passes (compile/passes.h) */
  {
    npuP_build b = {.ctx = ctx, .graph = g, .plan = p, .cfg = cfg, .known = known, .need = need};
    static const struct {
      const char *name;
      npu_status (*run)(npuP_build *);
    } passes[] = {{"fusion", npuP_fuse},
                  {"precision assignment", npuP_assign_precision},
                  {"implementation selection", npuP_select_impl},
                  {"memory planning", npuP_plan_memory}};
    if (cfg->verify && (s = npuP_verify(&b, "layout"))) goto fail;
    if (dump >= 0 && (s = npuP_graph_dump(&b, dump, 1, "constant folding", false))) goto fail;
    for (size_t i = 0; i < npu_countof(passes) && !s; i++) {
      if (!(s = passes[i].run(&b)) && cfg->verify) s = npuP_verify(&b, passes[i].name);
      if (!s && dump >= 0)
        s = npuP_graph_dump(&b, dump, (int)i + 2, passes[i].name, i + 1 == npu_countof(passes));
    }
    known = b.known; /* a pass that adds values (precision: casts) grows it */
    if (s) goto fail;
  }
  p->in_buf = npuC_alloc(ctx, (size_t)(p->max_in ? p->max_in : 1) * sizeof *p->in_buf);
  if (!p->in_buf) {
    s = NPU_ERR_NOMEM;
    goto fail;
  }
  if (p->round_size) { /* (memory planning may have put the buffers in its arena) */
    if (!p->memory.buffers) p->round_buf = npuC_alloc(ctx, p->round_size);
    p->round_meta = npuC_alloc(ctx, (size_t)p->n_round_meta * sizeof *p->round_meta);
    if ((!p->round_buf && !p->memory.buffers) || !p->round_meta) {
      s = NPU_ERR_NOMEM;
      goto fail;
    }
  }
  if (p->scratch_size && !p->memory.buffers) {
    p->scratch = npuC_alloc(ctx, p->scratch_size);
    if (!p->scratch) {
      s = NPU_ERR_NOMEM;
      goto fail;
    }
  }
  npuC_free(ctx, need);
  npuC_free(ctx, known);
  *out = p;
  return NPU_OK;
fail:
  npuC_free(ctx, need);
  npuC_free(ctx, known);
  npuP_free(ctx, p);
  return s;
}
