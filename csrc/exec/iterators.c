/*
 * iterators.c — a session's dataset iterators: one per iterator_get_next node, created the
 * first time the node runs (TensorFlow's one-shot iterator, whose state lives in the session),
 * so each step of a plan — and each of the iterations_per_loop steps of a loop — takes the
 * next element.  The executor calls npuE_iterators_next for a GET_NEXT step and
 * npuE_iterators_free when the session closes.
 *
 * Element shapes that vary (a batch without drop_remainder: its last batch is short).  A plan
 * is compiled for the concrete shapes of the element each of its get_next nodes delivers next
 * (npuE_next_bind peeks at it, taking nothing), and records those nodes; the session picks, or
 * compiles, the plan whose shapes are those of the next elements (npuE_next_matches), as it
 * picks one by its feeds' shapes; so each shape compiles once and the element is never lost
 * or read twice.  Inside an iterations_per_loop loop the executor checks before each
 * iteration and hands the remaining iterations back to the session when the shape changes.
 */
#include <stdio.h>
#include <string.h>

#include "exec/exec.h"

/* The node's iterator, created on first use. */
static npu_status iterator_for(npu_context *ctx, npuE_iterators *its, const npu_graph *g,
                               int node, npu_iterator **out) {
  *out = NULL;
  if (node < 0 || node >= g->n_nodes || g->nodes[node].op != NPUX_OP_iterator_get_next)
    return npuC_error(ctx, NPU_ERR_ARG, "npuE_iterators_next: node %d is not an "
                      "iterator_get_next node", node);
  const npuG_node *n = &g->nodes[node];
  if (node >= its->n) {
    int cap = g->n_nodes;
    npu_iterator **grown = npuC_realloc(ctx, its->by_node, (size_t)cap * sizeof *grown);
    if (!grown) return NPU_ERR_NOMEM;
    memset(grown + its->n, 0, (size_t)(cap - its->n) * sizeof *grown);
    its->by_node = grown;
    its->n = cap;
  }
  if (!its->by_node[node]) {
    const npu_dataset *ds = npu_graph_dataset(g, npuX_get_next_dataset(n));
    if (!ds)
      return npuC_error(ctx, NPU_ERR_INTERNAL, "iterator_get_next '%s': no dataset", n->name);
    npu_status st = npu_iterator_new(ctx, ds, &its->by_node[node]);
    if (st) return npuC_error_prefix(ctx, st, "iterator_get_next '%s'", n->name);
  }
  *out = its->by_node[node];
  return NPU_OK;
}

/* The iterator's message, named after the node. */
static npu_status node_error(npu_context *ctx, npu_status st, const npuG_node *n) {
  char msg[NPU_ERRMSG_SIZE];
  snprintf(msg, sizeof msg, "%s", npu_context_errmsg(ctx));
  return npuC_error(ctx, st, "%.400s (iterator_get_next '%.80s')", msg, n->name);
}

npu_status npuE_iterators_next(npu_context *ctx, npuE_iterators *its, const npu_graph *g,
                               int node, npu_tensor **out) {
  npu_iterator *it;
  npu_status st = iterator_for(ctx, its, g, node, &it);
  if (st) return st;
  const npuG_node *n = &g->nodes[node];
  for (int i = 0; i < n->n_outputs; i++) out[i] = NULL;
  st = npuE_iterator_next(it, out, its->watch, its->wait_ms);
  if (st && its->watch && atomic_load(&its->watch->stopped)) return st; /* the step names it */
  return st ? node_error(ctx, st, n) : NPU_OK;
}

npu_status npuE_iterators_peek(npu_context *ctx, npuE_iterators *its, const npu_graph *g,
                               int node, int *ndims, int64_t (*shapes)[NPU_MAX_DIMS], bool *has) {
  *has = false;
  npu_iterator *it;
  npu_status st = iterator_for(ctx, its, g, node, &it);
  if (!st) st = npuE_iterator_peek(it, ndims, shapes, has, its->watch, its->wait_ms);
  if (st && its->watch && atomic_load(&its->watch->stopped)) return st; /* the caller names it */
  return st && st != NPU_ERR_NOMEM ? node_error(ctx, st, &g->nodes[node]) : st;
}

void npuE_iterators_free(npu_context *ctx, npuE_iterators *its) {
  for (int i = 0; i < its->n; i++) npu_iterator_release(its->by_node[i]);
  npuC_free(ctx, its->by_node);
  its->by_node = NULL;
  its->n = 0;
}

/* ---- plans of varying element shapes ---- */

static bool varies(const npuG_value *v) {
  for (int d = 0; d < v->ndim; d++)
    if (v->shape[d] < 0) return true;
  return false;
}

npu_status npuE_next_bind(npuE_state *st, npuE_plan *p, int node) {
  npu_context *ctx = st->ctx;
  const npuG_node *n = &st->graph->nodes[node];
  npuG_value *out = &p->values[n->first_output];
  bool any = false;
  for (int i = 0; i < n->n_outputs; i++) any |= varies(&out[i]);
  if (!any) return NPU_OK; /* one shape: the plan's, checked as each element is bound */
  int ndims[NPUX_MAX_OUTPUTS];
  int64_t shapes[NPUX_MAX_OUTPUTS][NPU_MAX_DIMS];
  bool has;
  npu_status s = npuE_iterators_peek(ctx, &st->iterators, st->graph, node, ndims, shapes, &has);
  if (s) return s;
  if (!has) /* what the get_next step would say */
    return npuC_error(ctx, NPU_ERR_OUT_OF_RANGE, "end of data (iterator_get_next '%s')",
                      n->name);
  int *grown = npuC_realloc(ctx, p->next_nodes, (size_t)(p->n_next + 1) * sizeof *grown);
  if (!grown) return NPU_ERR_NOMEM;
  p->next_nodes = grown;
  p->next_nodes[p->n_next++] = node;
  for (int i = 0; i < n->n_outputs; i++) {
    out[i].ndim = ndims[i];
    memcpy(out[i].shape, shapes[i], (size_t)ndims[i] * sizeof(int64_t));
  }
  return NPU_OK;
}

npu_status npuE_next_matches(npuE_state *st, const npuE_plan *p, bool *match) {
  *match = true;
  for (int k = 0; k < p->n_next && *match; k++) {
    const npuG_node *n = &st->graph->nodes[p->next_nodes[k]];
    int ndims[NPUX_MAX_OUTPUTS];
    int64_t shapes[NPUX_MAX_OUTPUTS][NPU_MAX_DIMS];
    bool has;
    npu_status s = npuE_iterators_peek(st->ctx, &st->iterators, st->graph, p->next_nodes[k],
                                       ndims, shapes, &has);
    if (s) return s;
    if (!has) continue; /* the end of the data: the get_next step reports it */
    for (int i = 0; i < n->n_outputs && *match; i++) {
      const npuG_value *v = &p->values[n->first_output + i];
      *match = npuT_same_shape(v->ndim, v->shape, ndims[i], shapes[i]);
    }
  }
  return NPU_OK;
}
