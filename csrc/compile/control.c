/*
 * control.c — compiling cond and while nodes: each region they run becomes a block of steps
 * nested in the control step (exec.h: npuE_control).
 *
 * A region's nodes were built between npu_graph_region_begin and _end (core/graph.c) and
 * read values of their own region or of the regions around it.  Nested steps share the plan's
 * value slots, so a branch reads an outer value by its id; the control step lists those outer
 * values (the captures) among its inputs, so the passes over the top-level steps (memory
 * planning, the verifier) see them read there.  A step inside a region runs as a static
 * step (its shapes fixed at compile time, its buffers kept between runs, the plan's scratch)
 * unless a shape it reads or writes is known only when it runs (a loop variable whose
 * invariant has -1 dims, a cond result whose branches differ): then it is dynamic (exec.c).
 * Nested values stay out of the memory arena: they live across the loop's iterations.
 *
 * A while loop's region holds its condition and its body: the condition's block is what the
 * condition value needs, the body's block the rest of what the results need; both run every
 * iteration, so nothing is computed twice.
 */
#include <string.h>

#include "compile/passes.h"

void npuP_control_free(npu_context *ctx, npuE_control *c) {
  if (!c) return;
  for (int k = 0; k < 2; k++) {
    npuP_steps_free(ctx, c->block[k].steps, c->block[k].n_steps);
    npuC_free(ctx, c->result[k]);
  }
  npuC_free(ctx, c->args);
  if (c->held)
    for (int i = 0; i < c->n_results; i++) npu_tensor_release(c->held[i]);
  npuC_free(ctx, c->held);
  npuC_free(ctx, c);
}

typedef struct ctl {
  npuP_build *b;
  const npu_graph *g;
  int id;          /* the control node */
  int regions[2];  /* the regions it runs (while: one, regions[1] = 0) */
  uint8_t *mark;   /* scratch, by node id */
} ctl;

static bool in_regions(const ctl *c, int region) {
  return npuX_within_control_regions(c->g, c->regions, region);
}

/* The values the control node reads from around it: its own inputs that are not its
   regions' values, and what its regions' nodes (at any depth) read from outside them.  A
   while's initial values come first, one per loop variable even when two are the same value
   (run_while takes variable i from entry i).  With list NULL, only counts. */
static int captures(const ctl *c, int *list, uint8_t *seen) {
  const npu_graph *g = c->g;
  const npuG_node *node = &g->nodes[c->id];
  int n = 0, n_inits = npuX_op(node->op)->kind == NPUX_KIND_WHILE ? (node->n_inputs - 1) / 2 : 0;
  memset(seen, 0, (size_t)g->n_values);
  for (int i = 0; i < node->n_inputs; i++) {
    int v = node->inputs[i];
    if (in_regions(c, g->nodes[g->values[v].node].region) || (seen[v] && i >= n_inits)) continue;
    seen[v] = 1;
    if (list) list[n] = v;
    n++;
  }
  for (int id = 0; id < c->id; id++) {
    const npuG_node *m = &g->nodes[id];
    if (!c->b->need[id] || !m->region || !in_regions(c, m->region)) continue;
    for (int i = 0; i < m->n_inputs; i++) {
      int v = m->inputs[i];
      if (in_regions(c, g->nodes[g->values[v].node].region) || seen[v]) continue;
      seen[v] = 1;
      if (list) list[n] = v;
      n++;
    }
  }
  return n;
}

/* The node running the region that holds nested region r directly inside `region`. */
static int owner_in(const npu_graph *g, int r, int region) {
  while (g->regions[r - 1].parent != region) r = g->regions[r - 1].parent;
  return g->regions[r - 1].owner;
}

/* Marks (in c->mark) the nodes of `region` that value `root` needs: through the inputs of the
   region's marked nodes, and of the nodes nested in the regions of its marked control nodes
   (a control node comes after its regions' nodes, so it is marked before they are seen). */
static void mark_needed(const ctl *c, int region, int root) {
  const npu_graph *g = c->g;
  int r = g->values[root].node;
  if (g->nodes[r].region != region) return;
  c->mark[r] = 1;
  for (int id = r; id >= 0; id--) {
    const npuG_node *m = &g->nodes[id];
    bool reads = m->region == region ? c->mark[id]
                 : c->b->need[id] && m->region && npuG_region_within(g, m->region, region) &&
                       m->region != region && owner_in(g, m->region, region) >= 0 &&
                       c->mark[owner_in(g, m->region, region)];
    if (!reads) continue;
    for (int i = 0; i < m->n_inputs; i++) {
      int src = g->values[m->inputs[i]].node;
      if (g->nodes[src].region == region) c->mark[src] = 1;
    }
  }
}

static npu_status compile_block(npuP_build *b, int region, const uint8_t *mark, uint8_t want,
                                npuE_block *blk);

/* The nodes of `region` marked `want` (mark[id] == want; mark NULL: every needed node of the
   region) laid out as blk's steps, in id order. */
static npu_status compile_block(npuP_build *b, int region, const uint8_t *mark, uint8_t want,
                                npuE_block *blk) {
  npu_context *ctx = b->ctx;
  const npu_graph *g = b->graph;
  npuE_plan *p = b->plan;
  int n = 0;
  for (int id = 0; id < g->n_nodes; id++)
    if (b->need[id] && g->nodes[id].region == region && (!mark || mark[id] == want)) n++;
  blk->steps = npuC_calloc(ctx, (size_t)(n ? n : 1), sizeof *blk->steps);
  if (!blk->steps) return NPU_ERR_NOMEM;
  for (int id = 0; id < g->n_nodes; id++) {
    const npuG_node *node = &g->nodes[id];
    if (!b->need[id] || node->region != region || (mark && mark[id] != want)) continue;
    const npu_op_def *def = npuX_op(node->op);
    npu_status s = NPU_OK;
    switch (def->kind) {
    case NPUX_KIND_LOOP_VAR: continue; /* set by the loop (exec/control.c) */
    case NPUX_KIND_CONST:
      p->slots[node->first_output] = npu_tensor_retain(npuG_attr_find(node, "value")->u.tensor);
      p->owned[node->first_output] = 1;
      continue;
    case NPUX_KIND_PLACEHOLDER:
    case NPUX_KIND_LOOP:
      return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s '%s' cannot be inside a cond branch or "
                        "while loop: build it outside and use its value inside", def->name,
                        node->name);
    case NPUX_KIND_COND:
    case NPUX_KIND_WHILE: s = npuP_emit_control(b, id, &blk->steps[blk->n_steps]); break;
    default:
      s = npuP_infer_node(ctx, g, p, node, b->known);
      if (!s) s = npuP_emit_step(ctx, p, b->cfg, id, node, true, &blk->steps[blk->n_steps]);
      if (!s && blk->steps[blk->n_steps].scratch_size) p->nested_scratch = true;
      break;
    }
    blk->n_steps++; /* counted even on failure: its fields are freed with the block */
    if (s) return s;
  }
  return NPU_OK;
}

static npu_status compile_cond(ctl *c, npuE_control *pc) {
  const npuG_node *node = &c->g->nodes[c->id];
  int n = (node->n_inputs - 1) / 2;
  pc->n_results = n;
  for (int k = 0; k < 2; k++) {
    pc->result[k] = npuC_alloc(c->b->ctx, (size_t)(n ? n : 1) * sizeof(int));
    if (!pc->result[k]) return NPU_ERR_NOMEM;
    memcpy(pc->result[k], node->inputs + 1 + k * n, (size_t)n * sizeof(int));
    npu_status s = compile_block(c->b, c->regions[k], NULL, 0, &pc->block[k]);
    if (s) return s;
  }
  return NPU_OK;
}

/* Whether a while's results fit its variables' shape invariants whatever the iteration: no
   step of its region is dynamic, so each result has the shape inferred now, and that shape
   fits.  A result that may not fit keeps the check, and its error, at run time. */
static bool while_shapes_fixed(const npuE_plan *p, const npuE_control *pc) {
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < pc->block[k].n_steps; j++)
      if (pc->block[k].steps[j].dynamic) return false;
  for (int i = 0; i < pc->n_results; i++) {
    const npuG_value *r = &p->values[pc->result[1][i]];
    if (!npuG_value_known(r) || !npuG_shape_fits(&p->values[pc->args[i]], r->ndim, r->shape))
      return false;
  }
  return true;
}

static npu_status compile_while(ctl *c, npuE_control *pc) {
  npu_context *ctx = c->b->ctx;
  const npu_graph *g = c->g;
  npuE_plan *p = c->b->plan;
  const npuG_node *node = &g->nodes[c->id];
  int n = (node->n_inputs - 1) / 2, region = c->regions[0];
  pc->n_results = n;
  pc->max_iterations = npuX_while_max_iterations(node);
  pc->args = npuC_alloc(ctx, (size_t)(n ? n : 1) * sizeof(int));
  pc->held = npuC_calloc(ctx, (size_t)(n ? n : 1), sizeof *pc->held);
  pc->result[0] = npuC_alloc(ctx, sizeof(int));
  pc->result[1] = npuC_alloc(ctx, (size_t)(n ? n : 1) * sizeof(int));
  if (!pc->args || !pc->held || !pc->result[0] || !pc->result[1]) return NPU_ERR_NOMEM;
  pc->result[0][0] = node->inputs[n];
  memcpy(pc->result[1], node->inputs + n + 1, (size_t)n * sizeof(int));
  for (int i = 0; i < n; i++) {
    int var = npuX_find_loop_var(g, region, c->id, i);
    if (var < 0)
      return npuC_error(ctx, NPU_ERR_ARG, "while '%s': its region has no loop_var %d",
                        node->name, i);
    int v = pc->args[i] = g->nodes[var].first_output;
    if (!npuX_loop_var_has_shape(&g->nodes[var])) { /* the initial value's shape, as fed */
      npuG_value *d = &p->values[v];
      d->ndim = p->values[node->inputs[i]].ndim;
      memcpy(d->shape, p->values[node->inputs[i]].shape, sizeof d->shape);
    }
  }
  /* the condition's part of the region (mark 1), then the body's (the rest, mark 0) */
  memset(c->mark, 0, (size_t)g->n_nodes);
  mark_needed(c, region, pc->result[0][0]);
  npu_status s = compile_block(c->b, region, c->mark, 1, &pc->block[0]);
  if (!s) s = compile_block(c->b, region, c->mark, 0, &pc->block[1]);
  if (!s) pc->shapes_fixed = while_shapes_fixed(p, pc);
  return s;
}

npu_status npuP_emit_control(npuP_build *b, int id, npuE_step *step) {
  npu_context *ctx = b->ctx;
  const npu_graph *g = b->graph;
  npuE_plan *p = b->plan;
  const npuG_node *node = &g->nodes[id];
  const npu_op_def *def = npuX_op(node->op);
  ctl c = {.b = b, .g = g, .id = id};
  npuX_control_regions(node, c.regions);
  step->node = id;
  step->def = def;
  step->params = node->params.bytes;
  step->round_in = step->round_out = -1;
  step->control = npuC_calloc(ctx, 1, sizeof *step->control);
  c.mark = npuC_calloc(ctx, (size_t)g->n_nodes + (size_t)g->n_values + 1, 1);
  if (!step->control || !c.mark) {
    npuC_free(ctx, c.mark);
    return NPU_ERR_NOMEM;
  }
  uint8_t *seen = c.mark + g->n_nodes;
  int n_cap = captures(&c, NULL, seen);
  step->n_in = n_cap;
  step->n_out = node->n_outputs;
  step->in = npuC_alloc(ctx, (size_t)(n_cap + node->n_outputs + 1) * sizeof(int));
  npu_status s = step->in ? NPU_OK : NPU_ERR_NOMEM;
  if (!s) {
    captures(&c, step->in, seen);
    step->out = step->in + n_cap;
    for (int i = 0; i < node->n_outputs; i++) step->out[i] = node->first_output + i;
    if (step->n_in > p->max_in) p->max_in = step->n_in;
    s = def->kind == NPUX_KIND_COND ? compile_cond(&c, step->control)
                                    : compile_while(&c, step->control);
  }
  /* the outputs' shapes from what the regions give, now that they are inferred */
  if (!s) s = npuP_infer_node(ctx, g, p, node, b->known);
  if (!s && def->kind == NPUX_KIND_COND)
    for (int i = 0; i < node->n_outputs; i++) p->borrowed[p->n_borrowed++] = step->out[i];
  if (!s && def->kind == NPUX_KIND_WHILE)
    for (int i = 0; i < step->control->n_results; i++)
      p->borrowed[p->n_borrowed++] = step->control->args[i];
  npuC_free(ctx, c.mark);
  return s;
}
