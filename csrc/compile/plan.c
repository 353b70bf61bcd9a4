/*
 * plan.c — compiling one fetch/feed signature of a graph into a plan.
 *
 * npuP_compile is a list of stages, each a static function below:
 *  check     the signature names values and nodes of the graph, feeds agree with their
 *            placeholders' dtype and shape (-1 matches any size);
 *  new_plan  the plan's signature and one slot and descriptor per value;
 *  prune     mark the nodes the fetches and targets need, walking node ids downwards (ids are
 *            a topological order) and stopping at fed values;
 *  emit      per needed node in id order: infer (the op's shape inference again with the
 *            feeds' concrete shapes, so a wrong combination fails now, naming the node), fold
 *            (constant subgraphs evaluated now) or emit its step; every needed placeholder is
 *            fed; constants bound once; cond / while nodes compile their regions (control.c);
 *  passes    fusion, precision, implementation modes, memory (compile/passes.h);
 *  allocate  the run's buffers, scratch sized for the largest step; every step numbered.
 */
#include <string.h>

#include "compile/fused_ops.h"
#include "compile/generalize.h"
#include "compile/passes.h"
#include "compile/precision.h"
#include "compile/tuning.h"
#include "exec/exec.h"

bool npuP_matches(const npuE_plan *p, int n_feeds, const int *feeds,
                  npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                  int n_targets, const int *targets) {
  if (!npuP_same_signature(p, n_feeds, feeds, feed_tensors, n_fetches, fetches, n_targets, targets))
    return false;
  for (int i = 0; i < n_feeds; i++) {
    const npu_tensor *t = feed_tensors[i];
    const int64_t *want = p->feed_shapes + i * NPU_MAX_DIMS;
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
    npuC_free(ctx, steps[i].prepared);
    npuP_control_free(ctx, steps[i].control);
  }
  npuC_free(ctx, steps);
}

void npuP_walk_steps(const npuE_step *steps, int n, int depth, const npuE_step *parent, int b,
                     npuP_step_visit fn, void *ud) {
  for (int k = 0; k < n; k++) {
    const npuE_step *step = &steps[k];
    fn(ud, step, depth, parent, b);
    for (int j = 0; step->control && j < 2; j++)
      npuP_walk_steps(step->control->block[j].steps, step->control->block[j].n_steps, depth + 1,
                      step, j, fn, ud);
  }
}

void npuP_free(npu_context *ctx, npuE_plan *p) {
  if (!p) return;
  if (p->slots && p->owned)
    for (int v = 0; v < p->n_values; v++)
      if (p->owned[v]) npu_tensor_release(p->slots[v]);
  npuP_steps_free(ctx, p->steps, p->n_steps);
  npuC_free(ctx, (void *)p->all_steps);
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
  npuC_free(ctx, p->on_host);
  npuC_free(ctx, p->borrowed);
  npuC_free(ctx, p->scratch);
  npuC_free(ctx, p->dyn_scratch);
  npuC_free(ctx, p->round_buf);
  npuC_free(ctx, p->in_buf);
  npuC_free(ctx, p->in_desc);
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
                    .impl = step->impl, .algo = step->algo, .params = step->params, .n_inputs = step->n_in, .in = ptr,
                    .n_outputs = step->n_out, .out = ptr + step->n_in,
                    .prepared = step->prepared};
  step->scratch_size = step->def->scratch_size(&call);
  if (step->scratch_size > p->scratch_size) p->scratch_size = step->scratch_size;
  if (meta != meta_stack) {
    npuC_free(ctx, meta);
    npuC_free(ctx, ptr);
  }
  return NPU_OK;
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
    if (!npuG_value_known(&p->values[node->first_output + i])) return false;
  for (int i = 0; i < node->n_inputs; i++) /* a shape-only op needs its inputs' shapes */
    if (!npuG_value_known(&p->values[node->inputs[i]])) return false;
  if (def->flags & NPUX_F_SHAPE_ONLY) return true;
  if (!cfg->fold) return false;
  for (int i = 0; i < node->n_inputs; i++) /* a "like" input lends only its (known) shape */
    if (!known[node->inputs[i]] && !((def->flags & NPUX_F_LIKE_LAST) && i == node->n_inputs - 1))
      return false;
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
    } else { /* shape-only op or a "like" input: a stand-in carrying the shape */
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
  npu_status mixed = npuP_mixed_check(ctx, cfg, node);
  if (mixed) return mixed;
  step->host = def->kind == NPUX_KIND_KERNEL &&
               (npuG_attr_find(node, "_tf_type") || (p->on_host && p->on_host[id]));
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
  step->dynamic = def->kind == NPUX_KIND_KERNEL && (def->flags & NPUX_F_DATA_SHAPE);
  for (int i = 0; i < step->n_in && def->kind == NPUX_KIND_KERNEL; i++)
    step->dynamic |= !npuG_value_known(&p->values[step->in[i]]);
  for (int i = 0; i < step->n_out; i++) {
    int v = node->first_output + i;
    step->out[i] = v;
    if (def->kind == NPUX_KIND_KERNEL) step->dynamic |= !npuG_value_known(&p->values[v]);
    if (def->kind == NPUX_KIND_VARIABLE || def->kind == NPUX_KIND_ASSIGN ||
        def->kind == NPUX_KIND_IDENTITY)
      p->borrowed[p->n_borrowed++] = v;
  }
  if (!(def->flags & NPUX_F_SUMMARY)) p->dynamic |= step->dynamic; /* ops.h */
  if (def->kind == NPUX_KIND_KERNEL && def->scratch_size && !step->dynamic)
    return npuP_step_scratch(ctx, p, step, node, cfg->reference || step->host);
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

/* ---- npuP_compile's stages ---- */

/* One compilation under way: the signature, the build the passes share, and what the stages
   hand on (prune's counts, the graph dump's number, the iterations_per_loop node). */
typedef struct compiling {
  npuE_state *st;
  int n_feeds, n_fetches, n_targets;
  const int *feeds, *fetches, *targets;
  npu_tensor *const *feed_tensors;
  npuP_build b;  /* ctx, graph, cfg; plan, need (nodes), known (values) as the stages make them */
  int n_steps;   /* prune: steps at most (folded nodes count: they bound n_folded too) */
  int n_borrowed; /* prune: borrowed slots at most */
  int dump;      /* DUMP_GE_GRAPH: this compilation's number in the dump files, -1 off */
  const npuG_node *loop; /* the iterations_per_loop node, NULL when none */
  char *key;     /* subgraph tuning: the signature's description (NULL: not wanted) */
  size_t key_size;
} compiling;

/* check: the signature names values and nodes of the graph, fetches and targets are outside
   every region, and each feed agrees with the value it replaces. */
static npu_status check(const compiling *c) {
  npu_context *ctx = c->b.ctx;
  const npu_graph *g = c->b.graph;
  for (int i = 0; i < c->n_feeds; i++)
    if (c->feeds[i] < 0 || c->feeds[i] >= g->n_values)
      return npuC_error(ctx, NPU_ERR_ARG, "feed %d is not a value of this graph", i + 1);
  for (int i = 0; i < c->n_fetches; i++)
    if (c->fetches[i] < 0 || c->fetches[i] >= g->n_values)
      return npuC_error(ctx, NPU_ERR_ARG, "fetch %d is not a value of this graph", i + 1);
  for (int i = 0; i < c->n_targets; i++)
    if (c->targets[i] < 0 || c->targets[i] >= g->n_nodes)
      return npuC_error(ctx, NPU_ERR_ARG, "target %d is not a node of this graph", i + 1);
  for (int i = 0; i < c->n_fetches + c->n_targets; i++) {
    bool fetch = i < c->n_fetches;
    int node = fetch ? g->values[c->fetches[i]].node : c->targets[i - c->n_fetches];
    if (g->nodes[node].region)
      return npuC_error(ctx, NPU_ERR_ARG, "%s '%s' was built inside a cond branch or while "
                        "loop: return it from there and fetch the result",
                        fetch ? "fetch" : "target", g->nodes[node].name);
  }
  for (int i = 0; i < c->n_feeds; i++) {
    npu_status s = check_feed(ctx, g, c->feeds[i], c->feed_tensors[i], c->b.cfg->any_feed_dims);
    if (s) return s;
  }
  return NPU_OK;
}

/* The plan's signature and its per-value arrays (the graph's descriptors, feeds' shapes put
   in by infer), and the prune marks.  The plan is c->b.plan even on failure (npuP_free). */
static npu_status new_plan(compiling *c) {
  npu_context *ctx = c->b.ctx;
  const npu_graph *g = c->b.graph;
  const npuP_config *cfg = c->b.cfg;
  int n_feeds = c->n_feeds, n_values = g->n_values;
  npuE_plan *p = c->b.plan = npuC_calloc(ctx, 1, sizeof *p);
  /* need[id]: bit 0 the node runs, bit 1 its value is read (for variables: an assign's
     target input is a write, not a read). */
  uint8_t *need = npuC_calloc(ctx, (size_t)g->n_nodes + 1, 1);
  c->b.need = need;
  if (!p || !need) return NPU_ERR_NOMEM;
  bool ok = true;
  p->reference = cfg->reference;
  p->fold = cfg->fold;
  p->config = cfg;
  p->iterations = 1;
  p->n_threads = npu_context_n_threads(ctx);
  p->n_feeds = n_feeds;
  p->n_fetches = c->n_fetches;
  p->n_targets = c->n_targets;
  p->feeds = dup_ints(ctx, c->feeds, n_feeds, &ok);
  p->fetches = dup_ints(ctx, c->fetches, c->n_fetches, &ok);
  p->targets = dup_ints(ctx, c->targets, c->n_targets, &ok);
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
  if (!ok || !p->values || !p->slots || !p->owned) return NPU_ERR_NOMEM;
  for (int i = 0; i < n_feeds; i++) {
    const npu_tensor *t = c->feed_tensors[i];
    p->feed_dtypes[i] = t->dtype;
    p->feed_ndims[i] = t->ndim;
    memcpy(p->feed_shapes + i * NPU_MAX_DIMS, t->shape, sizeof t->shape);
    for (int k = 0; k < t->ndim; k++) p->generic |= t->shape[k] < 0; /* compile/generalize.c */
  }
  if (n_values) memcpy(p->values, g->values, (size_t)n_values * sizeof *p->values);
  return npuP_mixed_placement(ctx, g, cfg, &p->on_host);
}

/* prune: marks the nodes the fetches and targets need, walking node ids downwards (ids are a
   topological order) and stopping at fed values; counts the steps and borrowed slots. */
static void prune(compiling *c) {
  const npu_graph *g = c->b.graph;
  uint8_t *need = (uint8_t *)c->b.need;
  int n_feeds = c->n_feeds;
  const int *feeds = c->feeds;
  for (int i = 0; i < c->n_fetches; i++)
    if (!npuP_is_fed(n_feeds, feeds, c->fetches[i])) need[g->values[c->fetches[i]].node] = 3;
  for (int i = 0; i < c->n_targets; i++) need[c->targets[i]] = 1;
  c->n_borrowed = n_feeds;
  for (int id = g->n_nodes - 1; id >= 0; id--) {
    if (!need[id]) continue;
    const npuG_node *node = &g->nodes[id];
    npuX_kind kind = npuX_op(node->op)->kind;
    for (int i = 0; i < node->n_inputs; i++)
      if (!npuP_is_fed(n_feeds, feeds, node->inputs[i]))
        need[g->values[node->inputs[i]].node] |= kind == NPUX_KIND_ASSIGN && i == 0 ? 1 : 3;
    for (int i = 0; i < node->n_controls; i++) need[node->controls[i]] |= 1;
    if (kind != NPUX_KIND_CONST && kind != NPUX_KIND_PLACEHOLDER) c->n_steps++;
    if (kind == NPUX_KIND_VARIABLE || kind == NPUX_KIND_ASSIGN || kind == NPUX_KIND_IDENTITY ||
        kind == NPUX_KIND_COND)
      c->n_borrowed += node->n_outputs;
    /* a while borrows each loop variable's slot (compile/control.c), read in its region or
       not: counted by the loop, not by the loop_var nodes prune reaches */
    if (kind == NPUX_KIND_WHILE) c->n_borrowed += (node->n_inputs - 1) / 2;
  }
}

/* DUMP_GE_GRAPH: the graph as given (stage 0), after prune. */
static npu_status dump_given(compiling *c) {
  if (c->b.trial) return NPU_OK;
  npu_status s = npuP_graph_dump_begin(c->b.ctx, c->b.cfg, &c->dump);
  if (!s && c->dump >= 0) s = npuP_graph_dump(&c->b, c->dump, 0, "PreRunBegin", false);
  return s;
}

/* The arrays emit fills: the steps, the folded nodes, the borrowed slots (the feeds first),
   and known[v], the value of v when it is fixed at compile time (constants, folded nodes);
   the feeds' values take the fed shapes, so inference runs on them. */
static npu_status start_layout(compiling *c) {
  npu_context *ctx = c->b.ctx;
  npuE_plan *p = c->b.plan;
  int n_steps = c->n_steps, n_values = c->b.graph->n_values;
  for (int i = 0; i < c->n_feeds; i++) {
    npuG_value *v = &p->values[c->feeds[i]];
    const npu_tensor *t = c->feed_tensors[i];
    v->ndim = t->ndim;
    memcpy(v->shape, t->shape, sizeof t->shape);
  }
  p->steps = npuC_calloc(ctx, (size_t)(n_steps ? n_steps : 1), sizeof *p->steps);
  p->folded = npuC_alloc(ctx, (size_t)(n_steps ? n_steps : 1) * sizeof *p->folded);
  p->borrowed = npuC_alloc(ctx, (size_t)(c->n_borrowed ? c->n_borrowed : 1) * sizeof *p->borrowed);
  c->b.known = npuC_calloc(ctx, (size_t)(n_values ? n_values : 1), sizeof *c->b.known);
  if (!p->steps || !p->borrowed || !p->folded || !c->b.known) return NPU_ERR_NOMEM;
  for (int i = 0; i < c->n_feeds; i++) p->borrowed[p->n_borrowed++] = c->feeds[i];
  return NPU_OK;
}

/* A placeholder must be fed: a value for it is missing otherwise. */
static npu_status check_fed(const compiling *c, const npuG_node *node) {
  if (npuP_is_fed(c->n_feeds, c->feeds, node->first_output)) return NPU_OK;
  char sh[96];
  const npuG_value *v = &c->b.graph->values[node->first_output];
  return npuC_error(c->b.ctx, NPU_ERR_ARG,
                    "placeholder '%s' (%s %s) must be fed: a value for it is missing",
                    node->name, npu_dtype_name(v->dtype),
                    npuC_shape_str(sh, sizeof sh, v->ndim, v->shape));
}

/* A Const's slot holds a reference: the graph's Const value may be replaced while this plan
   lives (by a file-backed twin, compile/external_weight.c).  A fed Const has no slot of its
   own. */
static void bind_const(compiling *c, const npuG_node *node) {
  npuE_plan *p = c->b.plan;
  int v = node->first_output;
  if (npuP_is_fed(c->n_feeds, c->feeds, v)) return;
  p->slots[v] = c->b.known[v] = npu_tensor_retain(npuG_attr_find(node, "value")->u.tensor);
  p->owned[v] = 1;
}

/* An iterations_per_loop node: the plan runs its steps that many times per call. */
static npu_status take_loop(compiling *c, const npuG_node *node) {
  const npuG_node *loop = c->loop;
  if (loop && npuX_loop_iterations(loop) != npuX_loop_iterations(node))
    return npuC_error(c->b.ctx, NPU_ERR_ARG, "loops '%s' (%lld iterations) and '%s' (%lld) "
                      "cannot run in one call", loop->name, (long long)npuX_loop_iterations(loop),
                      node->name, (long long)npuX_loop_iterations(node));
  c->loop = node;
  c->b.plan->iterations = npuX_loop_iterations(node);
  return NPU_OK;
}

/* A kernel-like node: infer its concrete shapes (get_next: the dataset's element spec, its -1
   dims those of the next element), then fold it to a constant or emit its step. */
static npu_status infer_fold_emit(compiling *c, int id, const npuG_node *node,
                                  const npu_op_def *def) {
  npu_context *ctx = c->b.ctx;
  npuE_plan *p = c->b.plan;
  npu_status s = def->kind == NPUX_KIND_GET_NEXT
                     ? npuE_next_bind(c->st, p, id)
                     : npuP_infer_node(ctx, c->b.graph, p, node, c->b.known);
  if (s) return s;
  if (can_fold(c->b.cfg, p, def, node, c->b.known)) {
    s = fold_node(ctx, p, node, c->b.known, c->b.cfg->reference);
    if (!s) p->folded[p->n_folded++] = id;
    return s;
  }
  /* counted even on failure: its fields are freed with the plan */
  return npuP_emit_step(ctx, p, c->b.cfg, id, node, (c->b.need[id] & 2) != 0,
                        &p->steps[p->n_steps++]);
}

/* emit: each needed node outside regions in id order (a region's nodes are compiled with the
   cond / while running it, compile/control.c). */
static npu_status emit(compiling *c) {
  const npu_graph *g = c->b.graph;
  npuE_plan *p = c->b.plan;
  for (int id = 0; id < g->n_nodes; id++) {
    const npuG_node *node = &g->nodes[id];
    if (!c->b.need[id] || node->region) continue;
    const npu_op_def *def = npuX_op(node->op);
    npu_status s = NPU_OK;
    switch (def->kind) {
    case NPUX_KIND_COND:
    case NPUX_KIND_WHILE:
      s = npuP_emit_control(&c->b, id, &p->steps[p->n_steps++]); /* counted, as above */
      p->dynamic = true;
      break;
    case NPUX_KIND_PLACEHOLDER: s = check_fed(c, node); break;
    case NPUX_KIND_CONST: bind_const(c, node); break;
    case NPUX_KIND_LOOP: s = take_loop(c, node); break;
    default: s = infer_fold_emit(c, id, node, def); break;
    }
    if (s) return s;
  }
  return c->loop ? check_loop(c->b.ctx, p, c->b.cfg, c->loop) : NPU_OK;
}

/* passes (compile/passes.h), each verified (NPU_VERIFY_PLANS) and dumped (DUMP_GE_GRAPH). */
/* Tuning records and aoe_mode 2 choose among the implementations selection allows. */
static npu_status prepare_plan(npuP_build *b);

/* Implementation selection, tuning, then the prepared filters of the algorithms chosen. */
static npu_status select_and_tune(npuP_build *b) {
  npu_status s = npuP_select_impl(b);
  if (!s) s = npuP_tune_steps(b);
  return s ? s : prepare_plan(b);
}

/* The signature's description for subgraph tuning, once the steps are laid out (before the
   passes): each step's op, node and outputs (those nested in cond / while steps too, depth
   first), the feeds' shapes, the threads. */
typedef struct key_hash {
  uint64_t h;
  const npuE_plan *p;
  const npu_graph *g;
} key_hash;

static void hash_step(void *ud, const npuE_step *s, int depth, const npuE_step *parent, int b) {
  key_hash *k = ud;
  uint64_t h = k->h;
  if (depth) h = (h ^ (uint64_t)depth) * 1099511628211ull; /* a top-level step's as before */
  (void)parent, (void)b;
  const char *parts[2] = {s->def->name, npuP_node_name(k->g, s->node)};
  for (int j = 0; j < 2; j++) {
    for (const char *q = parts[j]; *q; q++) h = (h ^ (unsigned char)*q) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  }
  for (int i = 0; i < s->n_out; i++) {
    const npuG_value *v = &k->p->values[s->out[i]];
    h = (h ^ (uint64_t)v->dtype) * 1099511628211ull;
    for (int d = 0; d < v->ndim; d++) h = (h ^ (uint64_t)v->shape[d]) * 1099511628211ull;
  }
  k->h = h;
}

static void subgraph_key(compiling *c) {
  const npuE_plan *p = c->b.plan;
  key_hash k = {.h = 14695981039346656037ull, .p = p, .g = c->b.graph};
  npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, hash_step, &k);
  uint64_t h = k.h;
  int n = snprintf(c->key, c->key_size, "subgraph %016llx steps %d threads %d feeds",
                   (unsigned long long)h, p->n_steps, npu_context_n_threads(c->b.ctx));
  for (int i = 0; i < c->n_feeds && n > 0 && (size_t)n < c->key_size; i++) {
    const npu_tensor *t = c->feed_tensors[i];
    n += snprintf(c->key + n, c->key_size - (size_t)n, " %s[", npu_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && (size_t)n < c->key_size; d++)
      n += snprintf(c->key + n, c->key_size - (size_t)n, "%s%lld", d ? "," : "",
                    (long long)t->shape[d]);
    if ((size_t)n < c->key_size) n += snprintf(c->key + n, c->key_size - (size_t)n, "]");
  }
}

/* A nested block's constants are bound in their slots only (compile/control.c): known[] gets
   them too, once, so every pass reads them as it reads the top level's (fusion folds them:
   batch norm; implementation selection, tuning and prepare_steps find a constant filter for
   Winograd's U).  Before the passes the only tensors in the slots are constants and folded
   values.  Control steps make a plan dynamic; the reference path runs none of those passes. */
static void know_nested_constants(npuP_build *b) {
  const npuE_plan *p = b->plan;
  if (!p->dynamic || b->cfg->reference) return;
  for (int v = 0; v < p->n_values; v++)
    if (!b->known[v] && p->owned[v]) b->known[v] = p->slots[v];
}

static npu_status passes(compiling *c) {
  static const struct {
    const char *name;
    npu_status (*run)(npuP_build *);
  } list[] = {{"fusion", npuP_fuse},
              {"precision assignment", npuP_assign_precision},
              {"implementation selection", select_and_tune},
              {"memory planning", npuP_plan_memory}};
  npuP_build *b = &c->b;
  bool verify = b->cfg->verify;
  know_nested_constants(b);
  npu_status s = verify ? npuP_verify(b, "layout") : NPU_OK;
  if (!s && c->dump >= 0) s = npuP_graph_dump(b, c->dump, 1, "constant folding", false);
  for (size_t i = 0; i < npu_countof(list) && !s; i++) {
    /* hcom_parallel's reordering (compile/schedule.c) goes just before memory planning, which
       must see the final order; it is not a dumped stage of its own */
    if (list[i].run == npuP_plan_memory && !(s = npuP_schedule_comm(b)) && verify)
      s = npuP_verify(b, "collective scheduling");
    if (s) break;
    s = list[i].run(b);
    if (!s && list[i].run == npuP_fuse) s = npuP_mixed_mark(b); /* placement of fused steps */
    if (!s && verify) s = npuP_verify(b, list[i].name);
    if (!s && c->dump >= 0)
      s = npuP_graph_dump(b, c->dump, (int)i + 2, list[i].name, i + 1 == npu_countof(list));
  }
  return s;
}

static void count_step(void *ud, const npuE_step *step, int depth, const npuE_step *parent,
                       int b) {
  (void)step, (void)depth, (void)parent, (void)b;
  ((npuE_plan *)ud)->n_all_steps++;
}

/* The top-level steps keep their positions as numbers; nested ones are numbered after them. */
static void number_step(void *ud, const npuE_step *step, int depth, const npuE_step *parent,
                        int b) {
  (void)parent, (void)b;
  npuE_plan *p = ud;
  npuE_step *mut = (npuE_step *)step; /* the plan's own step, walked through const */
  mut->index = depth ? p->n_all_steps++ : (int)(step - p->steps);
  p->all_steps[mut->index] = step;
}

/* Steps whose outputs reach only the fetches (npuE_step.fetch_only), walking back from the
   last step: a step is kept when it is not a plain kernel or something kept reads an output. */
static npu_status mark_fetch_only(npu_context *ctx, npuE_plan *p) {
  for (int k = 0; k < p->n_steps; k++)
    if (p->steps[k].control) return NPU_OK; /* regions read outer values of their own accord */
  uint8_t *needed = npuC_calloc(ctx, (size_t)(p->n_values ? p->n_values : 1), 1);
  if (!needed) return NPU_ERR_NOMEM;
  for (int k = p->n_steps - 1; k >= 0; k--) {
    npuE_step *step = &p->steps[k];
    bool skip = step->def->kind == NPUX_KIND_KERNEL && !(step->def->flags & NPUX_F_NO_FOLD);
    for (int i = 0; i < step->n_out && skip; i++) skip = !needed[step->out[i]];
    step->fetch_only = skip;
    for (int i = 0; i < step->n_in && !skip; i++) needed[step->in[i]] = 1;
  }
  npuC_free(ctx, needed);
  return NPU_OK;
}

/* A direct_bf16 conv2d / fused conv2d step whose filter is a constant (stored bfloat16, or a
   float32 one whose values all are bfloat16) gets it packed once (kernels/conv_bf16.c's
   layout): a 3x3x256x256 filter costs ~0.2 ms to pack, beside ~1.2 ms for the convolution on
   14x14 pixels.  A filter that is not bfloat16 after all is left to the per-call path (which
   widens then): *packed stays NULL. */
static npu_status prepare_bf16(const npuP_build *b, const npuE_step *s, void **packed,
                               size_t *packed_bytes) {
  const npu_tensor *f = s->n_in >= 2 && !s->host && !s->dynamic ? b->known[s->in[1]] : NULL;
  if (!f || f->ndim != 4 || (f->dtype != NPU_DTYPE_F32 && f->dtype != NPU_DTYPE_BF16))
    return NPU_OK;
  npu_context *ctx = b->ctx;
  const npuK_window2d w = {.k_h = f->shape[0], .k_w = f->shape[1], .c = f->shape[2]};
  const int64_t oc = f->shape[3];
  size_t bytes = npuK_conv2d_bf16_filter_size(&w, oc);
  float *wide = NULL;
  if (f->dtype == NPU_DTYPE_BF16) { /* the values the executor's widening would give */
    if (!(wide = npuC_alloc(ctx, (size_t)f->numel * sizeof *wide))) return NPU_ERR_NOMEM;
    npuK_cast(NULL, f->numel, NPUK_BF16, f->data, NPUK_F32, wide);
  }
  uint16_t *out = bytes ? npuC_alloc(ctx, bytes) : NULL;
  if (bytes && !out) {
    npuC_free(ctx, wide);
    return NPU_ERR_NOMEM;
  }
  if (out && npuK_conv2d_bf16_filter_pack(&w, oc, wide ? wide : f->data, out) == 0) {
    *packed = out;
    *packed_bytes = bytes;
  } else {
    npuC_free(ctx, out);
  }
  npuC_free(ctx, wide);
  return NPU_OK;
}

/* A matmul / fused_matmul step's B when it is a 2-D constant known now (its value in
   b->known), with *tb its transpose_b and (*n, *k) the product's columns and depth; else NULL.
   The two GEMM packers below start from it. */
static const npu_tensor *constant_b(const npuP_build *b, const npuE_step *s, bool *tb,
                                    int64_t *n, int64_t *k) {
  const npu_tensor *bt = s->n_in >= 2 && !s->host && !s->dynamic ? b->known[s->in[1]] : NULL;
  if (!bt || bt->ndim != 2) return NULL;
  const void *params = s->owned_params ? s->owned_params : s->params;
  *tb = s->def == &npuP_op_fused_matmul ? ((const npuP_fused_matmul *)params)->transpose_b
                                        : npuX_matmul_transpose_b(params);
  *n = bt->shape[*tb ? 0 : 1];
  *k = bt->shape[*tb ? 1 : 0];
  return bt;
}

/* A bf16dot matmul / fused_matmul step whose B is a constant stored bfloat16 (a frozen
   graph's weights under a bfloat16 mode, cast once at compile time) gets B's panels packed
   once (kernels/gemm_bf16.c's layout): the kernel packed them on every call before, ~1/3 of
   the MLP's time at batch 1.  A's dtype and the CPU must be what the kernel takes
   (npuK_gemm_bf16_takes), else the step runs another path and *packed stays NULL. */
static npu_status prepare_bf16_b(const npuP_build *b, const npuE_step *s, void **packed,
                                 size_t *packed_bytes) {
  bool tb;
  int64_t n, k;
  const npu_tensor *bt = constant_b(b, s, &tb, &n, &k);
  if (!bt || bt->dtype != NPU_DTYPE_BF16 || (s->widen && s->widen[1]) ||
      !npuK_gemm_bf16_takes(NPUK_GEMM_BF16DOT, (npuK_dtype)b->plan->values[s->in[0]].dtype,
                            NPUK_BF16))
    return NPU_OK;
  /* the panels' width follows the product's rows (shapes are static here: not s->dynamic) */
  const npuG_value *y = &b->plan->values[s->out[0]];
  int64_t m = y->ndim == 2 ? y->shape[0] : 0;
  size_t bytes = npuK_gemm_bf16_packed_size(m, n, k);
  if (!bytes) return NPU_OK; /* an empty B: the per-call path has nothing to pack either */
  uint32_t *out = npuC_alloc(b->ctx, bytes);
  if (!out) return NPU_ERR_NOMEM;
  npuK_gemm_bf16_pack_b(tb, m, n, k, bt->data, out);
  *packed = out;
  *packed_bytes = bytes;
  return NPU_OK;
}

/* An f32tile matmul / fused_matmul step whose B is a float32 constant (a frozen graph's
   weights) gets B's panels packed once (kernels/gemm_f32.c's layout): a transposed B was
   packed on every call, and the step needs no scratch.  A, B and C must be what the kernel
   takes (npuK_gemm_f32_takes), else *packed stays NULL. */
static npu_status prepare_f32_b(const npuP_build *b, const npuE_step *s, void **packed,
                                size_t *packed_bytes) {
  bool tb;
  int64_t n, k;
  const npu_tensor *bt = constant_b(b, s, &tb, &n, &k);
  if (!bt || s->widen ||
      !npuK_gemm_f32_takes(NPUK_GEMM_F32TILE, (npuK_dtype)b->plan->values[s->in[0]].dtype,
                           (npuK_dtype)bt->dtype, (npuK_dtype)b->plan->values[s->out[0]].dtype))
    return NPU_OK;
  size_t bytes = npuK_gemm_f32_packed_size(n, k);
  if (!bytes) return NPU_OK; /* an empty B: nothing to pack */
  float *out = npuC_alloc(b->ctx, bytes);
  if (!out) return NPU_ERR_NOMEM;
  npuK_gemm_f32_pack_b(tb, n, k, bt->data, out);
  *packed = out;
  *packed_bytes = bytes;
  return NPU_OK;
}

npu_status npuP_prepare_filter(const npuP_build *b, const npuE_step *s, int algo, void **data,
                               size_t *bytes) {
  *data = NULL;
  *bytes = 0;
  if (!(s->def->flags & NPUX_F_PREPARED_FILTER) || b->cfg->reference) return NPU_OK;
  if (s->def->tune == NPUX_TUNE_GEMM) /* matmul, fused_matmul: B; their own algorithms */
    return algo == NPUK_GEMM_BF16DOT   ? prepare_bf16_b(b, s, data, bytes)
           : algo == NPUK_GEMM_F32TILE ? prepare_f32_b(b, s, data, bytes)
                                       : NPU_OK;
  if (algo == NPUK_CONV_DIRECT_BF16) return prepare_bf16(b, s, data, bytes);
  const npu_tensor *f =
      algo == NPUK_CONV_WINOGRAD_2X3 ? npuP_winograd_constant_filter(b, s) : NULL;
  size_t n = f ? npuK_conv2d_winograd_filter_size(f->shape[2], f->shape[3]) : 0;
  if (!n) return NPU_OK;
  if (!(*data = npuC_alloc(b->ctx, n))) return NPU_ERR_NOMEM;
  *bytes = n;
  npuK_conv2d_winograd_filter(NULL, f->shape[2], f->shape[3], f->data, *data);
  return NPU_OK;
}

/* Whether direct_bf16 step s reads its filter stored bfloat16 as it is: a variable's (a
   training graph's), which the precision pass's Cast wrote bfloat16 and the executor would
   widen each run only for the kernel to check its values and pack them again
   (kernels/conv_bf16.c: npuK_conv2d_bf16_direct_stored_ep packs the same words from the
   bfloat16).  The algorithm is final only here, after tuning, so the precision pass leaves the
   widen flag for this pass to drop.  x must be bfloat16 too (the ops run the stored-filter
   kernel only then) and the step on the device. */
static bool reads_stored_filter(const npuE_plan *p, const npuE_step *s) {
  return s->algo == NPUK_CONV_DIRECT_BF16 && s->def->tune == NPUX_TUNE_CONV && !s->prepared &&
         !s->host && !s->dynamic && s->n_in >= 2 && s->widen && s->widen[1] &&
         !s->widen[0] && p->values[s->in[0]].dtype == NPU_DTYPE_BF16 &&
         p->values[s->in[1]].dtype == NPU_DTYPE_BF16;
}

/* Each step's prepared filter (npuP_prepare_filter for its algorithm), kept with the step
   (npuE_step.prepared); nested blocks too: their constants are the plan's.  The op's
   NPUX_F_PREPARED_FILTER says the prepared data replaces input 1, so a reduced filter's widen
   flag goes (the executor widened it each run for nothing: arena traffic, and its float32
   copy's bytes in the widening buffer), and the step's scratch is asked for again with
   .prepared (no room for a per-call transform).  So for a filter the kernel reads as stored
   (reads_stored_filter): no widening, its scratch the stored-filter kernel's.  *changed: some
   step's buffers changed. */
static npu_status prepare_steps(npuP_build *b, npuE_step *steps, int n, bool *changed) {
  for (int k = 0; k < n; k++) {
    npuE_step *s = &steps[k];
    for (int j = 0; s->control && j < 2; j++) {
      npu_status st = prepare_steps(b, s->control->block[j].steps,
                                    s->control->block[j].n_steps, changed);
      if (st) return st;
    }
    npu_status st = npuP_prepare_filter(b, s, s->algo, &s->prepared, &s->prepared_bytes);
    if (st) return st;
    if (!s->prepared && !reads_stored_filter(b->plan, s)) continue;
    *changed = true;
    if (s->widen && s->widen[1]) {
      s->widen[1] = 0;
      bool any = false;
      for (int i = 0; i < s->n_in + s->n_out; i++) any |= s->widen[i] != 0;
      if (!any) {
        npuC_free(b->ctx, s->widen);
        s->widen = NULL;
      }
    }
    if (s->def->scratch_size) {
      size_t keep = b->plan->scratch_size;
      st = npuP_step_scratch(b->ctx, b->plan, s, &b->graph->nodes[s->node], false);
      b->plan->scratch_size = keep;
      if (st) return st;
    }
  }
  return NPU_OK;
}

/* The plan's widening buffer, its stand-ins and its scratch: the largest step's again, after
   prepare_steps shrank some. */
typedef struct buffer_max {
  const npuE_plan *p;
  size_t round, scratch;
  int meta;
} buffer_max;

static void step_buffers(void *ud, const npuE_step *s, int depth, const npuE_step *parent,
                         int b) {
  (void)depth, (void)parent, (void)b;
  buffer_max *m = ud;
  size_t round = 0;
  int meta = 0;
  for (int i = 0; s->widen && i < s->n_in + s->n_out; i++) {
    if (!s->widen[i]) continue;
    const npuG_value *d = &m->p->values[i < s->n_in ? s->in[i] : s->out[i - s->n_in]];
    round += (size_t)npuT_numel(d->ndim, d->shape) * sizeof(float);
    meta++;
  }
  if (round > m->round) m->round = round;
  if (meta > m->meta) m->meta = meta;
  if (s->scratch_size > m->scratch) m->scratch = s->scratch_size;
}

/* After implementation selection and tuning (the algorithms are final), before memory
   planning (which places the steps' scratch and widening buffers by the sizes left here). */
static npu_status prepare_plan(npuP_build *b) {
  npuE_plan *p = b->plan;
  bool changed = false;
  npu_status s = b->cfg->reference ? NPU_OK : prepare_steps(b, p->steps, p->n_steps, &changed);
  if (s || !changed) return s;
  buffer_max m = {.p = p};
  npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, step_buffers, &m);
  p->round_size = m.round;
  p->n_round_meta = m.meta;
  p->scratch_size = m.scratch;
  return NPU_OK;
}

/* allocate: the run's buffers, sized by the passes: the widest step's input arrays, the
   widening buffer and its stand-ins, the scratch (unless memory planning put the buffers in
   its arena). */
static npu_status allocate(compiling *c) {
  npu_context *ctx = c->b.ctx;
  npuE_plan *p = c->b.plan;
  p->in_buf = npuC_alloc(ctx, (size_t)(p->max_in ? p->max_in : 1) * sizeof *p->in_buf);
  p->in_desc = npuC_alloc(ctx, (size_t)(p->max_in ? p->max_in : 1) * sizeof *p->in_desc);
  if (!p->in_buf || !p->in_desc) return NPU_ERR_NOMEM;
  if (p->round_size) {
    if (!p->memory.buffers && !(p->round_buf = npuC_alloc(ctx, p->round_size)))
      return NPU_ERR_NOMEM;
    p->round_meta = npuC_alloc(ctx, (size_t)p->n_round_meta * sizeof *p->round_meta);
    if (!p->round_meta) return NPU_ERR_NOMEM;
  }
  /* nested steps (compile/control.c) use the plan's own scratch, even when memory planning
     put the top-level steps' scratch in its arena */
  if (p->scratch_size && (!p->memory.buffers || p->nested_scratch) &&
      !(p->scratch = npuC_alloc(ctx, p->scratch_size)))
    return NPU_ERR_NOMEM;
  /* every step by its number, for the observers */
  npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, count_step, p);
  p->all_steps = npuC_alloc(ctx, (size_t)(p->n_all_steps ? p->n_all_steps : 1) *
                                     sizeof *p->all_steps);
  if (!p->all_steps) return NPU_ERR_NOMEM;
  p->n_all_steps = p->n_steps;
  npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, number_step, p);
  return p->iterations > 1 ? mark_fetch_only(ctx, p) : NPU_OK;
}

/* One signature's request, kept for the variants subgraph tuning compiles. */
typedef struct request {
  npuE_state *st;
  int n_feeds, n_fetches, n_targets;
  const int *feeds, *fetches, *targets;
  npu_tensor *const *feed_tensors;
  const npuP_config *cfg;
} request;

static npu_status compile_variant(const request *r, unsigned fusion_off, bool trial, char *key,
                                  size_t key_size, npuE_plan **out) {
  *out = NULL;
  npuE_state *st = r->st;
  compiling c = {.st = st, .n_feeds = r->n_feeds, .n_fetches = r->n_fetches,
                 .n_targets = r->n_targets, .feeds = r->feeds, .fetches = r->fetches,
                 .targets = r->targets, .feed_tensors = r->feed_tensors, .dump = -1,
                 .key = key, .key_size = key_size,
                 .b = {.ctx = st->ctx, .graph = st->graph, .cfg = r->cfg,
                       .fusion_off = fusion_off, .trial = trial}};
  npu_status s = check(&c);
  if (s) return s;
  if (!(s = new_plan(&c))) {
    prune(&c);
    s = dump_given(&c);
  }
  if (!s) s = start_layout(&c);
  if (!s) s = emit(&c);
  if (!s && key) subgraph_key(&c);
  if (!s) s = passes(&c);
  if (!s) s = allocate(&c);
  npu_context *ctx = st->ctx;
  npuC_free(ctx, (void *)c.b.need);
  npuC_free(ctx, c.b.known); /* a pass that adds values (precision: casts) may have grown it */
  if (s) {
    npuP_free(ctx, c.b.plan);
    return s;
  }
  *out = c.b.plan;
  return NPU_OK;
}

/* Bit i set for each fusion pass that made a step of p, at any depth (the gradient-descent
   pass excepted: its step is an assign, which subgraph timing cannot run). */
static unsigned passes_used(const npuE_plan *p) {
  unsigned used = 0;
  int sgd = npuP_fusion_pass_index("ApplyGradientDescentFusionPass");
  for (int k = 0; k < p->n_all_steps; k++) {
    int i = p->all_steps[k]->pass ? npuP_fusion_pass_index(p->all_steps[k]->pass) : -1;
    if (i >= 0 && i != sgd) used |= 1u << i;
  }
  return used;
}

/* aoe_mode 1: the plan with the session's passes, and with each pass it used turned off in
   turn, timed; the winner is kept (*p replaced) and recorded. */
static npu_status tune_subgraph(const request *r, const char *key, npuE_plan **p) {
  unsigned used = passes_used(*p), offs[33] = {0};
  npuE_plan *plans[33] = {*p};
  int n = 1, best = 0;
  npu_status s = NPU_OK;
  for (int i = 0; i < npuP_fusion_pass_count() && !s; i++) {
    if (!(used & (1u << i))) continue;
    offs[n] = 1u << i;
    s = compile_variant(r, offs[n], true, NULL, 0, &plans[n]);
    if (!s) n++;
  }
  npuP_build b = {.ctx = r->st->ctx, .graph = r->st->graph, .plan = *p, .cfg = r->cfg};
  if (!s) s = npuP_tune_subgraph_time(&b, key, plans, offs, n, &best);
  if (s) best = 0;
  for (int i = 0; i < n; i++)
    if (i != best) npuP_free(r->st->ctx, plans[i]);
  *p = plans[best];
  (*p)->tuning.subgraph = NPUP_TUNED_TIMED;
  (*p)->tuning.fusion_off = offs[best];
  return s;
}

npu_status npuP_compile(npuE_state *st, int n_feeds, const int *feeds,
                        npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                        int n_targets, const int *targets, const npuP_config *cfg,
                        npuE_plan **out) {
  request r = {.st = st, .n_feeds = n_feeds, .n_fetches = n_fetches, .n_targets = n_targets,
               .feeds = feeds, .fetches = fetches, .targets = targets,
               .feed_tensors = feed_tensors, .cfg = cfg};
  char key[512] = "";
  bool records = npuP_tune_records_on(cfg);
  npu_status s = compile_variant(&r, 0, false, records ? key : NULL, sizeof key, out);
  if (s || !records || !key[0]) return s;
  npuP_build b = {.ctx = st->ctx, .graph = st->graph, .plan = *out, .cfg = cfg};
  unsigned off;
  bool found;
  s = npuP_tune_subgraph_lookup(&b, key, &off, &found);
  if (!s && found && off) { /* the record's passes off: that plan instead */
    npuE_plan *q;
    s = compile_variant(&r, off, true, NULL, 0, &q);
    if (!s) {
      npuP_free(st->ctx, *out);
      *out = q;
    }
  }
  if (!s && found) {
    (*out)->tuning.subgraph = NPUP_TUNED_RECORD;
    (*out)->tuning.fusion_off = off;
  } else if (!s && npuP_tune_subgraph_on(cfg)) {
    s = tune_subgraph(&r, key, out);
  }
  if (s) {
    npuP_free(st->ctx, *out);
    *out = NULL;
  }
  return s;
}
