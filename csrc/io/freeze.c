/*
 * freeze.c — a trained graph frozen for inference (TensorFlow's
 * graph_util.convert_variables_to_constants): a new graph holding only what the given output
 * nodes need, each chosen variable replaced by a const of the same name holding a value the
 * caller read (npu_session_freeze reads the session's).
 *
 * Why it matters here: a variable can change between runs, so a plan reads it at every run,
 * and under a reduced precision mode casts it at every run.  A const is rounded once when the
 * plan compiles, and constant filters are packed once per plan (Winograd, direct_bf16) and
 * folded into batch norms: docs/import.md, "Freezing a trained graph for deployment".
 *
 * The copy replays the kept nodes in id order through npuX_add_op (ids are a topological
 * order, so inputs always exist), which redoes parse and shape inference and registers the
 * variables that stay variables (and their "<name>/Assign" initializers) as any build does.
 * Graph-level options (set_graph_exec_config) and keep_dtype marks travel with their nodes;
 * datasets are added to the new graph in the same order, so iterator nodes' dataset ids hold.
 *
 * Control flow (npu.cond, npu.while_loop, map_fn, imported If / While): the nodes of a branch
 * or loop body live in regions of the same node array (core/npu_int.h), read the values around
 * them directly, and the cond / while node comes after its regions' nodes.  So a variable
 * read inside a branch or body, at any depth, is a top-level variable node like any other:
 * it becomes a const, and the region's nodes read the const.  What a region keeps is what the
 * session would run of it (compile/plan.c's prune walks the same edges): the ancestors of
 * the control node's inputs (its regions' results), plus every loop_var of a kept loop (the
 * while node finds variable i by its index, read or not).  The replay opens a copy of each
 * region before its first kept node and closes it before the node running it (regions were
 * opened and closed in id order, nested, so a copy once closed is never needed again); a
 * region left with no node (a branch returning an outer value as is) is copied empty.  The
 * cond / while node's region attributes are renumbered to the copies.
 *
 * What cannot be frozen (NPU_ERR_ARG): an assign the outputs need that writes a variable being
 * frozen — at top level a training step, in a loop body a training loop, whose next
 * iteration reads what the last one wrote: as a const it would read the same value every
 * time.  TensorFlow's converter leaves such an assign fed by a constant, and the frozen graph
 * fails when loaded; here the freeze fails, naming the assign and the variable.
 *
 * Invariants: g is only read; on failure nothing is left behind and *out is NULL.
 */
#include <string.h>

#include "compile/exec_config.h"
#include "io/freeze.h"
#include "ops/ops.h"

/* Marks `from` and its ancestors (inputs' producers and control dependencies). */
static npu_status mark_ancestors(npu_graph *g, int from, bool *mark, int *stack) {
  int top = 0;
  if (mark[from]) return NPU_OK;
  mark[from] = true;
  stack[top++] = from;
  while (top) { /* each node is pushed once (marked when pushed): top <= n_nodes */
    const npuG_node *n = &g->nodes[stack[--top]];
    for (int i = 0; i < n->n_inputs + n->n_controls; i++) {
      int src = i < n->n_inputs ? g->values[n->inputs[i]].node : n->controls[i - n->n_inputs];
      if (!mark[src]) {
        mark[src] = true;
        stack[top++] = src;
      }
    }
  }
  return NPU_OK;
}

/* A kept node outside `region` with a control dependency on a node inside it (-1: none),
   and in *to that node. */
static int control_into(const npu_graph *g, const bool *mark, int region, int *to) {
  for (int id = 0; id < g->n_nodes; id++) {
    const npuG_node *n = &g->nodes[id];
    if (!mark[id] || npuG_region_within(g, n->region, region)) continue;
    for (int i = 0; i < n->n_controls; i++)
      if (npuG_region_within(g, g->nodes[n->controls[i]].region, region)) {
        *to = n->controls[i];
        return id;
      }
  }
  return -1;
}

npu_status npuI_freeze_reach(npu_graph *g, int n_outputs, const int *output_nodes,
                             const bool *frozen, bool *mark) {
  if (n_outputs < 1 || !output_nodes)
    return npuC_error(g->ctx, NPU_ERR_ARG, "freezing a graph: no output nodes given");
  for (int i = 0; i < n_outputs; i++)
    if (output_nodes[i] < 0 || output_nodes[i] >= g->n_nodes)
      return npuC_error(g->ctx, NPU_ERR_ARG, "freezing a graph: output %d is not a node of the graph",
                        i + 1);
  for (int i = 0; i < n_outputs; i++)
    if (g->nodes[output_nodes[i]].region) {
      const npuG_node *n = &g->nodes[output_nodes[i]];
      int owner = g->regions[n->region - 1].owner;
      return npuC_error(g->ctx, NPU_ERR_ARG, "freezing a graph: output %d ('%s') is inside a cond "
                        "branch or while loop%s%s%s, not visible outside it: name the cond or "
                        "while (or a node reading its outputs) instead", i + 1, n->name,
                        owner >= 0 ? " ('" : "", owner >= 0 ? g->nodes[owner].name : "",
                        owner >= 0 ? "')" : "");
    }
  int *stack = npuC_alloc(g->ctx, (size_t)g->n_nodes * sizeof *stack);
  if (!stack) return NPU_ERR_NOMEM;
  npu_status st = NPU_OK;
  for (int i = 0; i < n_outputs && !st; i++) st = mark_ancestors(g, output_nodes[i], mark, stack);
  /* a variable that stays one must be initialisable in a new session: keep its initializer
     (which may read further variables, hence the loop until nothing changes) */
  for (bool grew = true; grew && !st;) {
    grew = false;
    for (int v = 0; v < g->n_variables && !st; v++) {
      const npuG_variable *var = &g->variables[v];
      if (frozen[v] || !mark[var->node] || var->initializer < 0 || mark[var->initializer]) continue;
      st = mark_ancestors(g, var->initializer, mark, stack);
      grew = true;
    }
  }
  /* a kept loop keeps all its loop variables; loop_var nodes read nothing */
  for (int id = 0; id < g->n_nodes && !st; id++) {
    const npuG_node *n = &g->nodes[id];
    if (!mark[id] && n->region && npuX_op(n->op)->kind == NPUX_KIND_LOOP_VAR &&
        g->regions[n->region - 1].owner >= 0 && mark[g->regions[n->region - 1].owner])
      st = mark_ancestors(g, id, mark, stack);
  }
  npuC_free(g->ctx, stack);
  /* a kept node of a region whose cond / while is not kept: reached through a control
     dependency from outside the region (or an initializer), where a session would not run it */
  for (int id = 0; id < g->n_nodes && !st; id++) {
    const npuG_node *n = &g->nodes[id];
    if (!mark[id] || !n->region) continue;
    int owner = g->regions[n->region - 1].owner;
    if (owner >= 0 && mark[owner]) continue;
    int to = id, from = control_into(g, mark, n->region, &to);
    st = npuC_error(g->ctx, NPU_ERR_ARG, "freezing a graph: %s%s%s reaches '%s', inside a cond "
                    "branch or while loop%s%s%s that the outputs do not run", from >= 0 ? "the "
                    "control dependency of '" : "an initializer", from >= 0 ? g->nodes[from].name : "",
                    from >= 0 ? "'" : "", g->nodes[to].name, owner >= 0 ? " ('" : "",
                    owner >= 0 ? g->nodes[owner].name : "", owner >= 0 ? "')" : "");
  }
  return st;
}

/* The node's attributes as npu_attr (borrowing its strings and tensors), without the
   graph-level option attributes, which npu_graph_set_exec_config puts back. */
static int public_attrs(const npuG_node *n, npu_attr *attrs) {
  int k = 0;
  for (int i = 0; i < n->n_attrs; i++) {
    const npuG_attr *a = &n->attrs[i];
    if (npuP_is_exec_config_attr(a->name)) continue;
    npu_attr *o = &attrs[k++];
    o->name = a->name;
    o->type = a->type;
    switch (a->type) {
    case NPU_ATTR_STRING: o->u.s = a->u.s; break;
    case NPU_ATTR_INTS: o->u.ints.v = a->u.ints.v, o->u.ints.n = a->u.ints.n; break;
    case NPU_ATTR_FLOATS: o->u.floats.v = a->u.floats.v, o->u.floats.n = a->u.floats.n; break;
    case NPU_ATTR_TENSOR: o->u.tensor = a->u.tensor; break;
    case NPU_ATTR_FLOAT: o->u.f = a->u.f; break;
    default: o->u.i = a->u.i; break;
    }
  }
  return k;
}

/* What one node carries beside its op: graph-level options, keep_dtype, trainable. */
static npu_status copy_marks(npu_graph *g, int id, npu_graph *ng, int nid) {
  const npuG_node *n = &g->nodes[id];
  npu_options *cfg = NULL;
  npu_status st = npu_graph_get_exec_config(g, id, &cfg);
  if (!st && cfg) st = npu_graph_set_exec_config(ng, nid, cfg);
  npu_options_release(cfg);
  if (!st && n->keep_dtype && n->n_outputs > 0) st = npu_graph_keep_dtype(ng, ng->nodes[nid].first_output);
  int v = npu_graph_find_variable(g, id);
  if (!st && v >= 0) st = npu_graph_set_variable_trainable(ng, npu_graph_find_variable(ng, nid),
                                                           g->variables[v].trainable);
  return st;
}

/* Makes ng's current region the copy of g's region r (0: the top level): closes the copies
   nested deeper, and opens the copies of r and of the regions around it not made yet
   (region_map[r]: r's copy, 0 until made).  g's regions opened and closed nested, in node id
   order, so the copy of r, once made, is open or is never wanted again. */
static npu_status enter_region(npu_graph *g, npu_graph *ng, int r, int *region_map) {
  npu_status st = NPU_OK;
  int want = r ? region_map[r] : 0;
  if (r && !want) {
    st = enter_region(g, ng, g->regions[r - 1].parent, region_map);
    if (!st) st = npu_graph_region_begin(ng, &region_map[r]);
    return st;
  }
  while (!st && npu_graph_region(ng) != want) {
    if (npu_graph_region(ng) == 0)
      return npuC_error(g->ctx, NPU_ERR_INTERNAL, "freezing a graph: region %d is needed after "
                        "it was closed", r);
    st = npu_graph_region_end(ng, npu_graph_region(ng));
  }
  return st;
}

/* Before a cond / while node: its regions' copies (an empty one for a region that kept no
   node), closed, and its region attributes renumbered to them. */
static npu_status copy_control(npu_graph *g, npu_graph *ng, const npuG_node *n, int *region_map,
                               npu_attr *attrs, int n_attrs) {
  int r[2];
  npuX_control_regions(n, r);
  npu_status st = enter_region(g, ng, n->region, region_map);
  for (int k = 0; k < 2 && r[k] && !st; k++)
    if (!region_map[r[k]] && !(st = npu_graph_region_begin(ng, &region_map[r[k]])))
      st = npu_graph_region_end(ng, region_map[r[k]]);
  for (int i = 0; i < n_attrs && !st; i++) {
    if (!strcmp(attrs[i].name, "then_region") || !strcmp(attrs[i].name, "region"))
      attrs[i].u.i = region_map[r[0]];
    else if (!strcmp(attrs[i].name, "else_region"))
      attrs[i].u.i = region_map[r[1]];
  }
  return st;
}

/* Replays the marked nodes of g into ng; const_of[node] >= 0: that variable node becomes a
   const holding values[const_of[node]]. */
static npu_status replay(npu_graph *g, const bool *mark, const int *const_of,
                         npu_tensor *const *values, npu_graph *ng, int *node_map, int *value_map,
                         int *region_map, int *inputs, npu_attr *attrs) {
  npu_status st = NPU_OK;
  for (int d = 0; d < g->n_datasets && !st; d++) {
    int id;
    st = npu_graph_add_dataset(ng, g->datasets[d], &id);
  }
  for (int id = 0; id < g->n_nodes && !st; id++) {
    if (!mark[id]) continue;
    const npuG_node *n = &g->nodes[id];
    int nid = -1;
    if ((st = enter_region(g, ng, n->region, region_map))) break;
    if (const_of[id] >= 0) {
      npu_attr value = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = values[const_of[id]]};
      st = npu_graph_add_op(ng, "const", n->name, 0, NULL, 1, &value, &nid);
    } else {
      for (int i = 0; i < n->n_inputs; i++) inputs[i] = value_map[n->inputs[i]];
      int n_attrs = public_attrs(n, attrs);
      npuX_kind kind = npuX_op(n->op)->kind;
      if (kind == NPUX_KIND_COND || kind == NPUX_KIND_WHILE)
        st = copy_control(g, ng, n, region_map, attrs, n_attrs);
      if (!st) st = npuX_add_op(ng, npuX_op(n->op)->name, n->name, n->n_inputs, inputs, n_attrs, attrs,
                       &nid, false);
      for (int i = 0; !st && i < n->n_controls; i++)
        st = npu_graph_add_control(ng, nid, node_map[n->controls[i]]);
      if (!st) st = copy_marks(g, id, ng, nid);
    }
    if (st) break;
    if (ng->nodes[nid].n_outputs != n->n_outputs)
      return npuC_error(g->ctx, NPU_ERR_INTERNAL, "freezing a graph: node '%s' has %d outputs, "
                        "its copy %d", n->name, n->n_outputs, ng->nodes[nid].n_outputs);
    node_map[id] = nid;
    for (int i = 0; i < n->n_outputs; i++) value_map[n->first_output + i] = ng->nodes[nid].first_output + i;
  }
  return st ? st : enter_region(g, ng, 0, region_map);
}

/* Each frozen variable's value fits it, and no kept assign writes a frozen variable (the
   assign would write a const: a training node reached from the outputs). */
static npu_status check_frozen(npu_graph *g, const bool *mark, const int *const_of,
                               npu_tensor *const *values) {
  for (int id = 0; id < g->n_nodes; id++) {
    const npuG_node *n = &g->nodes[id];
    if (const_of[id] >= 0) {
      const npu_tensor *t = values[const_of[id]];
      const npuG_value *v = &g->values[n->first_output];
      if (!t || npu_tensor_dtype(t) != v->dtype || !npuG_shape_fits(v, npu_tensor_ndim(t), npu_tensor_shape(t)))
        return npuC_error(g->ctx, NPU_ERR_ARG, "freezing variable '%s': its value is %s, not "
                          "a tensor of the variable's dtype and shape", n->name,
                          t ? "of another dtype or shape" : "NULL");
    }
    if (mark[id] && npuX_op(n->op)->kind == NPUX_KIND_ASSIGN && n->n_inputs > 0 &&
        const_of[g->values[n->inputs[0]].node] >= 0)
      return npuC_error(g->ctx, NPU_ERR_ARG, "freezing a graph: the outputs need '%s', which "
                        "writes variable '%s'%s: a frozen graph holds inference only, and a const "
                        "cannot change (name the model's outputs, or keep that variable a "
                        "variable)", n->name, g->nodes[g->values[n->inputs[0]].node].name,
                        n->region ? " inside a cond branch or while loop" : "");
  }
  return NPU_OK;
}

npu_status npu_graph_freeze(npu_graph *g, int n_outputs, const int *output_nodes, int n_frozen,
                            const int *variables, npu_tensor *const *values, npu_graph **out) {
  if (out) *out = NULL;
  if (!g || !out || n_frozen < 0 || (n_frozen > 0 && (!variables || !values)))
    return npuC_error(g ? g->ctx : NULL, NPU_ERR_ARG, "npu_graph_freeze: NULL or negative argument");
  npu_context *ctx = g->ctx;
  int max_in = 0, max_attrs = 0;
  for (int id = 0; id < g->n_nodes; id++) {
    if (g->nodes[id].n_inputs > max_in) max_in = g->nodes[id].n_inputs;
    if (g->nodes[id].n_attrs > max_attrs) max_attrs = g->nodes[id].n_attrs;
  }
  size_t n = (size_t)g->n_nodes;
  bool *frozen = npuC_alloc(ctx, ((size_t)g->n_variables + 1) * sizeof *frozen);
  bool *mark = npuC_alloc(ctx, (n + 1) * sizeof *mark);
  int *const_of = npuC_alloc(ctx, (n + 1) * sizeof *const_of);
  int *node_map = npuC_alloc(ctx, (n + 1) * sizeof *node_map);
  int *value_map = npuC_alloc(ctx, ((size_t)g->n_values + 1) * sizeof *value_map);
  int *region_map = npuC_calloc(ctx, (size_t)g->n_regions + 1, sizeof *region_map);
  int *inputs = npuC_alloc(ctx, ((size_t)max_in + 1) * sizeof *inputs);
  npu_attr *attrs = npuC_alloc(ctx, ((size_t)max_attrs + 1) * sizeof *attrs);
  npu_graph *ng = NULL;
  npu_status st = NPU_OK;
  if (!frozen || !mark || !const_of || !node_map || !value_map || !region_map || !inputs || !attrs) {
    st = NPU_ERR_NOMEM;
    goto done;
  }
  memset(frozen, 0, ((size_t)g->n_variables + 1) * sizeof *frozen);
  memset(mark, 0, (n + 1) * sizeof *mark);
  for (size_t i = 0; i < n; i++) const_of[i] = node_map[i] = -1;
  for (int i = 0; i < g->n_values; i++) value_map[i] = -1;
  for (int i = 0; i < n_frozen; i++) {
    if (variables[i] < 0 || variables[i] >= g->n_variables) {
      st = npuC_error(ctx, NPU_ERR_ARG, "npu_graph_freeze: variables[%d] = %d is not a variable "
                      "index of the graph (it has %d)", i, variables[i], g->n_variables);
      goto done;
    }
    frozen[variables[i]] = true;
    const_of[g->variables[variables[i]].node] = i;
  }
  if ((st = npuI_freeze_reach(g, n_outputs, output_nodes, frozen, mark))) goto done;
  if ((st = check_frozen(g, mark, const_of, values))) goto done;
  if ((st = npu_graph_new(ctx, &ng))) goto done;
  st = replay(g, mark, const_of, values, ng, node_map, value_map, region_map, inputs,
              attrs);
done:
  if (st) npu_graph_release(ng);
  else *out = ng;
  npuC_free(ctx, frozen);
  npuC_free(ctx, mark);
  npuC_free(ctx, const_of);
  npuC_free(ctx, node_map);
  npuC_free(ctx, value_map);
  npuC_free(ctx, region_map);
  npuC_free(ctx, inputs);
  npuC_free(ctx, attrs);
  return st;
}
