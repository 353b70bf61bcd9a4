/*
 * mixed.c — mixed computing (the Mixed Computing options of the option list): which steps of
 * a plan run on the host rather than on the device.
 *
 * Here the device is the engine's pool of threads running the optimised kernels; the host is
 * the thread that called npu_session_run, running the framework's own kernels (each op's
 * reference twin: serial, float64 sums).  Two things put a step on the host:
 *
 *  - a node of op host_func made by an import for a TensorFlow op type the device lacks and
 *    the host implements (npu_context_register_host_op; the node carries "_tf_type"): always
 *    the host, and only under mix_compile_mode = True (without it the run fails with
 *    NPU_ERR_UNSUPPORTED, as full offload would);
 *  - in_out_pair = "[[in_nodes, out_nodes], ...]" (needs mix_compile_mode): for each pair, the
 *    nodes on a path from one of in_nodes to one of out_nodes, both ends included, form its
 *    range.  in_out_pair_flag True (the default): the ranges run on the device and every other
 *    kernel step on the host; False: the ranges run on the host, the rest on the device.
 *
 * Placement changes where and how a step computes, never what it computes beyond the
 * reference kernels' rounding.  Steps without a reference twin run their device kernel,
 * serially, on the host thread.  A fused step (fusion passes) goes where its own node goes.
 */
#include <ctype.h>
#include <string.h>

#include "compile/compile.h"
#include "compile/passes.h"
#include "options/options_int.h"

/* Node names of in_out_pair, str() of a Python list: depth 1 the list, 2 a pair, 3 in_nodes
   (the pair's first list) or out_nodes (its second).  Calls fn for each name. */
typedef npu_status (*pair_name_fn)(void *ud, int pair, int side, const char *name, size_t len);

static npu_status each_pair_name(const char *s, pair_name_fn fn, void *ud) {
  int depth = 0, pair = -1, side = -1;
  for (const char *q = s; *q; q++) {
    if (*q == '[') {
      depth++;
      if (depth == 2) pair++, side = -1;
      if (depth == 3) side++;
    } else if (*q == ']') {
      depth--;
    } else if (*q == '\'' || *q == '"') {
      const char *close = strchr(q + 1, *q);
      if (!close) break; /* the option's check refuses it */
      if (depth == 3 && side <= 1) {
        npu_status st = fn(ud, pair, side, q + 1, (size_t)(close - q - 1));
        if (st) return st;
      }
      q = close;
    }
  }
  return NPU_OK;
}

typedef struct marking {
  npu_context *ctx;
  const npu_graph *g;
  uint8_t *from, *to; /* per node: bit p, an in_node / out_node of pair p (p < 8) */
} marking;

static npu_status mark_name(void *ud, int pair, int side, const char *name, size_t len) {
  marking *m = ud;
  char buf[256];
  if (len >= sizeof buf) len = sizeof buf - 1;
  memcpy(buf, name, len);
  buf[len] = 0;
  int id = npu_graph_find_node(m->g, buf);
  if (id < 0)
    return npuC_error(m->ctx, NPU_ERR_NOT_FOUND, "in_out_pair: no node '%s' in the graph (pair "
                      "%d, %s)", buf, pair + 1, side ? "out_nodes" : "in_nodes");
  if (pair >= 8)
    return npuC_error(m->ctx, NPU_ERR_OPTION, "in_out_pair: at most 8 [in_nodes, out_nodes] "
                      "pairs here");
  (side ? m->to : m->from)[id] |= (uint8_t)(1u << pair);
  return NPU_OK;
}

npu_status npuP_mixed_placement(npu_context *ctx, const npu_graph *g, const npuP_config *cfg,
                                uint8_t **on_host) {
  *on_host = NULL;
  if (!cfg->mix_compile || !cfg->in_out_pair || !*cfg->in_out_pair) return NPU_OK;
  int n = g->n_nodes;
  uint8_t *from = npuC_calloc(ctx, (size_t)n + 1, 1), *to = npuC_calloc(ctx, (size_t)n + 1, 1);
  npu_status st = from && to ? NPU_OK : NPU_ERR_NOMEM;
  marking m = {ctx, g, from, to};
  if (!st) st = each_pair_name(cfg->in_out_pair, mark_name, &m);
  if (!st) {
    /* Node ids are a topological order: descendants of the in_nodes going up, ancestors of
       the out_nodes going down (per pair, as bits). */
    for (int id = 0; id < n; id++) {
      const npuG_node *node = &g->nodes[id];
      for (int i = 0; i < node->n_inputs; i++) from[id] |= from[g->values[node->inputs[i]].node];
    }
    for (int id = n - 1; id >= 0; id--) {
      const npuG_node *node = &g->nodes[id];
      for (int i = 0; i < node->n_inputs; i++) to[g->values[node->inputs[i]].node] |= to[id];
    }
    for (int id = 0; id < n; id++) {
      bool in_range = (from[id] & to[id]) != 0;
      from[id] = in_range != cfg->in_out_pair_device; /* reused: 1 = on the host */
    }
    *on_host = from;
    from = NULL;
  }
  npuC_free(ctx, from);
  npuC_free(ctx, to);
  return st;
}

npu_status npuP_mixed_check(npu_context *ctx, const npuP_config *cfg, const npuG_node *node) {
  const npuG_attr *a = npuG_attr_find(node, "_tf_type");
  if (!a || cfg->mix_compile) return NPU_OK;
  return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "node '%s': op type %s has no device kernel, only "
                    "a host implementation: set mix_compile_mode = True to run it on the host",
                    node->name, a->type == NPU_ATTR_STRING ? a->u.s : "?");
}

npu_status npuP_mixed_mark(npuP_build *b) {
  npuE_plan *p = b->plan;
  for (int k = 0; k < p->n_steps; k++) {
    npuE_step *step = &p->steps[k];
    const npuG_node *node = &b->graph->nodes[step->node];
    step->host = step->def->kind == NPUX_KIND_KERNEL &&
                 (npuG_attr_find(node, "_tf_type") || (p->on_host && p->on_host[step->node]));
  }
  return NPU_OK;
}
