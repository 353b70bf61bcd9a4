/*
 * grad_control.c — gradients through cond and while nodes (called by the walk in grad.c).
 *
 * A control node's inputs, for the walk, are the values it reads from around it (its
 * "captures": npuX_control_inputs): its own inputs outside its regions (a while loop's initial
 * values, a branch result returned as is) and what its regions' nodes, at any depth, read from
 * outside them.  Gradients flow to those, never into a region's values.
 *
 * Both gradients RECOMPUTE the forward region instead of keeping its intermediates: the
 * region's nodes (those the results need, nested regions included) are cloned into a new
 * region, and the ordinary reverse walk runs over the clones, restricted to that region
 * (npuX_gradients_in).  So no node of the forward region is read from outside it, and a
 * region stays owned by one node.
 *
 * cond (TensorFlow's cond gradient): a new cond with the same pred whose branch b clones branch
 * b and returns the gradient of its results (weighted by the incoming gradients) with respect
 * to every float capture on the path: zeros_like(c) where branch b does not depend on c.
 *
 * while: the forward loop is rebuilt once more as a RECORDING loop: the same condition and
 * body (cloned), plus a counter k and a record (record_push: a uint8 buffer of bytes and an
 * int64 table of offsets and shapes) to which every loop variable's value at the start of
 * each iteration is appended, whatever its shape that iteration.  Its outputs: the iteration
 * count N and the record.  Then a BACKWARD loop runs k = N .. 1: it reads v_i back
 * (record_read, row (k - 1) * nv + i), clones the body with v_i standing in for the loop
 * variables, and applies the body's gradient: the gradients of the variables (its loop
 * variables, started at the final values' gradients; of changing shape where the variable's
 * shape changes) become those of v_i, and the gradient of each float capture accumulates in
 * a loop variable of its own (started at zeros).  After it, the variables' gradients are the
 * initial values'.  A variable whose contents the body never reads (a TensorArray it only
 * writes into: reads_contents) is recorded by its shape alone (record_read gives zeros of
 * it), which is all tensor_array_write's gradient needs.  The loop's outputs limit it to
 * NPUX_MAX_OUTPUTS - 3 loop variables.
 *
 * Nodes that cannot be recomputed are refused, naming them: placeholders, variables, assigns,
 * iterator reads, loops, random ops.
 */
#include <stdio.h>
#include <string.h>

#include "ops/grad.h"

/* ---- captures ---- */

typedef struct ilist {
  int *v;
  int n, cap;
} ilist;

static npu_status ilist_add(npu_context *ctx, ilist *l, int v, bool unique) {
  for (int i = 0; unique && i < l->n; i++)
    if (l->v[i] == v) return NPU_OK;
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    int *p = npuC_realloc(ctx, l->v, (size_t)cap * sizeof *p);
    if (!p) return NPU_ERR_NOMEM;
    l->v = p;
    l->cap = cap;
  }
  l->v[l->n++] = v;
  return NPU_OK;
}

/* Adds to l what the nodes of regions r (any depth) read from outside them. */
static npu_status region_reads(const npu_graph *g, const int r[2], int before, ilist *l) {
  npu_status st = NPU_OK;
  for (int id = 0; id < before && !st; id++) {
    const npuG_node *m = &g->nodes[id];
    if (!m->region || !npuX_within_control_regions(g, r, m->region)) continue;
    for (int i = 0; i < m->n_inputs && !st; i++) {
      int v = m->inputs[i];
      if (!npuX_within_control_regions(g, r, g->nodes[g->values[v].node].region))
        st = ilist_add(g->ctx, l, v, true);
    }
  }
  return st;
}

npu_status npuX_control_inputs(const npu_graph *g, int node, int **list, int *n) {
  *list = NULL;
  *n = 0;
  const npuG_node *c = &g->nodes[node];
  int r[2];
  npuX_control_regions(c, r);
  ilist l = {0};
  npu_status st = NPU_OK;
  for (int i = 0; i < c->n_inputs && !st; i++) {
    int v = c->inputs[i];
    if (!npuX_within_control_regions(g, r, g->nodes[g->values[v].node].region)) st = ilist_add(g->ctx, &l, v, true);
  }
  if (!st) st = region_reads(g, r, node, &l);
  if (st) {
    npuC_free(g->ctx, l.v);
    return st;
  }
  *list = l.v;
  *n = l.n;
  return NPU_OK;
}

/* ---- cloning a region's nodes into the current region ---- */

typedef struct cloner {
  npu_graph *g;
  int *map;      /* value id -> its clone (-1: itself); for the values that existed at the start */
  int n_map;
  int n_nodes;   /* nodes that existed at the start (the ones cloned from) */
  int ctl;       /* the control node being differentiated (messages) */
  char scope[200];
} cloner;

static int mapped(const cloner *c, int v) { return v < c->n_map && c->map[v] >= 0 ? c->map[v] : v; }

static npu_status refuse(cloner *c, const npuG_node *m, const char *why) {
  const npuG_node *ctl = &c->g->nodes[c->ctl];
  return npuC_error(c->g->ctx, NPU_ERR_UNSUPPORTED,
                    "gradient of %s '%s': node '%s' (%s) %s (gradients recompute a branch or loop "
                    "body, so its nodes must be pure)", npuX_op(ctl->op)->name, ctl->name, m->name,
                    npuX_op(m->op)->name, why);
}

static npu_status clone_region(cloner *c, int src, int n_res, const int *res);

static npu_attr to_attr(const npuG_attr *a) {
  npu_attr r = {.name = a->name, .type = a->type};
  switch (a->type) {
  case NPU_ATTR_FLOAT: r.u.f = a->u.f; break;
  case NPU_ATTR_STRING: r.u.s = a->u.s; break;
  case NPU_ATTR_INTS: r.u.ints.v = a->u.ints.v, r.u.ints.n = a->u.ints.n; break;
  case NPU_ATTR_FLOATS: r.u.floats.v = a->u.floats.v, r.u.floats.n = a->u.floats.n; break;
  case NPU_ATTR_TENSOR: r.u.tensor = a->u.tensor; break;
  default: r.u.i = a->u.i; break;
  }
  return r;
}

/* Clones node id (its regions first, when it is a control node). */
static npu_status clone_node(cloner *c, int id) {
  npu_graph *g = c->g;
  const npuG_node *m = &g->nodes[id];
  bool all = true;
  for (int i = 0; i < m->n_outputs; i++) all &= c->map[m->first_output + i] >= 0;
  if (all && m->n_outputs) return NPU_OK; /* stood in for (a loop variable) */
  const npu_op_def *def = npuX_op(m->op);
  switch (def->kind) {
  case NPUX_KIND_PLACEHOLDER: return refuse(c, m, "is a placeholder inside the region");
  case NPUX_KIND_VARIABLE: return refuse(c, m, "creates a variable");
  case NPUX_KIND_ASSIGN: return refuse(c, m, "writes a variable");
  case NPUX_KIND_GET_NEXT: return refuse(c, m, "reads an iterator");
  case NPUX_KIND_LOOP: return refuse(c, m, "runs a loop of steps");
  default: break;
  }
  if (strncmp(def->name, "random", 6) == 0) return refuse(c, m, "would draw new numbers");
  int r[2];
  npuX_control_regions(m, r);
  int nr[2] = {0, 0};
  npu_status st = NPU_OK;
  for (int k = 0; k < 2 && r[k] && !st; k++) {
    /* the region's results among the node's inputs: cond: branch k's; while: pred, bodies */
    m = &g->nodes[id];
    int n = def->kind == NPUX_KIND_COND ? (m->n_inputs - 1) / 2 : m->n_outputs + 1;
    int first = def->kind == NPUX_KIND_COND ? 1 + k * n : m->n_outputs;
    int res[2 * NPUX_MAX_OUTPUTS + 1];
    memcpy(res, m->inputs + first, (size_t)n * sizeof *res);
    st = npu_graph_region_begin(g, &nr[k]);
    if (st) break;
    st = clone_region(c, r[k], n, res);
    npu_status st2 = npu_graph_region_end(g, nr[k]);
    if (!st) st = st2;
  }
  if (st) return st;
  m = &g->nodes[id];
  int n_in = m->n_inputs, n_attrs = m->n_attrs;
  int *in = npuC_alloc(g->ctx, (size_t)(n_in + 1) * sizeof *in);
  npu_attr *attrs = npuC_alloc(g->ctx, (size_t)(n_attrs + 1) * sizeof *attrs);
  if (!in || !attrs) {
    npuC_free(g->ctx, in);
    npuC_free(g->ctx, attrs);
    return NPU_ERR_NOMEM;
  }
  for (int i = 0; i < n_in; i++) in[i] = mapped(c, m->inputs[i]);
  for (int i = 0; i < n_attrs; i++) {
    attrs[i] = to_attr(&m->attrs[i]);
    const char *name = m->attrs[i].name;
    if (!strcmp(name, "then_region") || !strcmp(name, "region")) attrs[i].u.i = nr[0];
    else if (!strcmp(name, "else_region")) attrs[i].u.i = nr[1];
  }
  char name[256];
  snprintf(name, sizeof name, "%s/%s", c->scope, m->name);
  int node;
  st = npu_graph_add_op(g, def->name, name, n_in, in, n_attrs, attrs, &node);
  npuC_free(g->ctx, in);
  npuC_free(g->ctx, attrs);
  if (st) return st;
  m = &g->nodes[id];
  for (int i = 0; i < m->n_outputs; i++) c->map[m->first_output + i] = npu_graph_output(g, node, i);
  return NPU_OK;
}

/* Clones the nodes of region src that results res need (and a while region's loop variables)
   into the current region. */
static npu_status clone_region(cloner *c, int src, int n_res, const int *res) {
  npu_graph *g = c->g;
  uint8_t *need = npuC_calloc(g->ctx, (size_t)c->n_nodes, 1);
  if (!need) return NPU_ERR_NOMEM;
  for (int i = 0; i < n_res; i++) {
    int p = g->values[res[i]].node;
    if (p < c->n_nodes && g->nodes[p].region == src) need[p] = 1;
  }
  npu_status st = NPU_OK;
  for (int id = c->n_nodes - 1; id >= 0 && !st; id--) {
    const npuG_node *m = &g->nodes[id];
    if (m->region != src) continue;
    if (npuX_op(m->op)->kind == NPUX_KIND_LOOP_VAR) need[id] = 1;
    if (!need[id]) continue;
    int *in = m->inputs, n_in = m->n_inputs, *owned = NULL;
    int r[2];
    npuX_control_regions(m, r);
    if (r[0]) {
      st = npuX_control_inputs(g, id, &owned, &n_in);
      in = owned;
    }
    for (int i = 0; i < n_in && !st; i++) {
      int p = g->values[in[i]].node;
      if (g->nodes[p].region == src) need[p] = 1;
    }
    npuC_free(g->ctx, owned);
  }
  for (int id = 0; id < c->n_nodes && !st; id++)
    if (need[id] && g->nodes[id].region == src) st = clone_node(c, id);
  npuC_free(g->ctx, need);
  return st;
}

static npu_status cloner_init(cloner *c, npu_graph *g, int ctl, const char *what) {
  *c = (cloner){.g = g, .n_map = g->n_values, .n_nodes = g->n_nodes, .ctl = ctl};
  snprintf(c->scope, sizeof c->scope, "gradients/%s_grad/%s", g->nodes[ctl].name, what);
  c->map = npuC_alloc(g->ctx, (size_t)c->n_map * sizeof *c->map);
  if (!c->map) return NPU_ERR_NOMEM;
  for (int v = 0; v < c->n_map; v++) c->map[v] = -1;
  return NPU_OK;
}

/* ---- node helpers (multi-output nodes, loop variables) ---- */

static npu_status add_node(npu_graph *g, const char *op, const char *name, int n_in, const int *in,
                           int n_attrs, const npu_attr *attrs, int *node) {
  return npu_graph_add_op(g, op, name, n_in, in, n_attrs, attrs, node);
}

/* A loop variable of the current region: dtype, index and shape (ndim -1: any_shape, its
   rank and dims may change between iterations). */
static int loop_var_shaped(npuX_grad *gc, npu_dtype dtype, int index, int ndim,
                           const int64_t *shape, const char *what) {
  if (gc->status) return -1;
  npu_attr a[3] = {npuX_adtype("dtype", dtype), npuX_aint("index", index)};
  a[2] = ndim >= 0 ? npuX_aints("shape", shape, ndim) : npuX_abool("any_shape", true);
  char name[256];
  snprintf(name, sizeof name, "%s/%s", gc->scope, what);
  int node;
  npu_status st = add_node(gc->graph, "loop_var", name, 0, NULL, 3, a, &node);
  if (st) {
    gc->status = st;
    return -1;
  }
  return npu_graph_output(gc->graph, node, 0);
}

/* The same with the static shape of value `like` (any_shape when its rank is unknown, or
   when any is set). */
static int loop_var(npuX_grad *gc, npu_dtype dtype, int index, int like, bool any,
                    const char *what) {
  if (gc->status) return -1;
  npuG_value v = npuX_gvalue(gc, like);
  return loop_var_shaped(gc, dtype, index, any ? -1 : v.ndim, v.shape, what);
}

/* A constant with no elements of dtype and shape. */
static int empty_const(npuX_grad *gc, npu_dtype dtype, int ndim, const int64_t *shape) {
  if (gc->status) return -1;
  npu_tensor *t;
  npu_status st = npu_tensor_new(gc->graph->ctx, dtype, ndim, shape, &t);
  if (st) {
    gc->status = st;
    return -1;
  }
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  int r = npuX_gadd(gc, "const", 0, NULL, 1, &a);
  npu_tensor_release(t);
  return r;
}

/* ---- cond ---- */

static npu_status cond_grad(npu_graph *g, int n, const int *dy, int n_in, const int *in,
                            const bool *wanted, int *din) {
  npu_context *ctx = g->ctx;
  const npuG_node *node = &g->nodes[n];
  const int n_out = node->n_outputs, pred = node->inputs[0];
  int regions[2];
  npuX_cond_regions(node, &regions[0], &regions[1]);
  int xs[2 * NPUX_MAX_OUTPUTS + 1], slot[2 * NPUX_MAX_OUTPUTS + 1], k = 0;
  for (int i = 0; i < n_in; i++)
    if (wanted[i] && npuX_is_float(g->values[in[i]].dtype)) {
      if (k == NPUX_MAX_OUTPUTS)
        return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "gradient of cond '%s': more than %d float "
                          "values read from around it need gradients", node->name, NPUX_MAX_OUTPUTS);
      slot[k] = i, xs[k++] = in[i];
    }
  if (k == 0) return NPU_OK;
  npuX_grad gc = {.graph = g, .node = n};
  snprintf(gc.scope, sizeof gc.scope, "gradients/%s_grad", node->name);
  int br[2], d[2][NPUX_MAX_OUTPUTS];
  npu_status st = NPU_OK;
  for (int b = 0; b < 2 && !st; b++) {
    cloner c;
    st = cloner_init(&c, g, n, b ? "else" : "then");
    if (st) break;
    st = npu_graph_region_begin(g, &br[b]);
    if (!st) {
      int res[NPUX_MAX_OUTPUTS], ys[NPUX_MAX_OUTPUTS], gys[NPUX_MAX_OUTPUTS], n_ys = 0;
      memcpy(res, g->nodes[n].inputs + 1 + b * n_out, (size_t)n_out * sizeof *res);
      st = clone_region(&c, regions[b], n_out, res);
      for (int i = 0; i < n_out && !st; i++)
        if (dy[i] >= 0) ys[n_ys] = mapped(&c, res[i]), gys[n_ys++] = dy[i];
      if (!st && n_ys) st = npuX_gradients_in(g, n_ys, ys, gys, k, xs, d[b]);
      else for (int j = 0; j < k; j++) d[b][j] = -1;
      for (int j = 0; j < k && !st; j++)
        if (d[b][j] < 0) d[b][j] = npuX_g1(&gc, "zeros_like", xs[j]), st = gc.status;
      npu_status st2 = npu_graph_region_end(g, br[b]);
      if (!st) st = st2;
    }
    npuC_free(ctx, c.map);
  }
  if (st) return npuC_error_prefix(ctx, st, "gradient of cond '%s'", g->nodes[n].name);
  int cin[2 * NPUX_MAX_OUTPUTS + 1];
  cin[0] = pred;
  for (int j = 0; j < k; j++) cin[1 + j] = d[0][j], cin[1 + k + j] = d[1][j];
  npu_attr a[2] = {npuX_aint("then_region", br[0]), npuX_aint("else_region", br[1])};
  char name[256];
  snprintf(name, sizeof name, "%s/cond", gc.scope);
  int cn;
  st = add_node(g, "cond", name, 1 + 2 * k, cin, 2, a, &cn);
  if (st) return npuC_error_prefix(ctx, st, "gradient of cond '%s'", g->nodes[n].name);
  for (int j = 0; j < k; j++) din[slot[j]] = npu_graph_output(g, cn, j);
  return NPU_OK;
}

/* ---- while ---- */

typedef struct wgrad {
  npu_graph *g;
  int n;               /* the while node */
  int nv;              /* its loop variables */
  int region;
  int64_t max_it;
  int x[NPUX_MAX_OUTPUTS], r[NPUX_MAX_OUTPUTS], y[NPUX_MAX_OUTPUTS], lv[NPUX_MAX_OUTPUTS];
  bool any[NPUX_MAX_OUTPUTS];        /* loop variable i may change rank (a TensorArray) */
  bool shape_only[NPUX_MAX_OUTPUTS]; /* recorded by its shape alone */
  int pred;
  int count, data, meta; /* the recording loop's outputs: N and the record */
  npuX_grad gc;
} wgrad;

/* Whether the nodes of region `region` read value v's contents, not only its shape: v, or a
   tensor_array_write into it (transitively), is read by anything but the buffer input of a
   tensor_array_write or a shape-only op (shape, size), or from a nested region.  A loop
   variable they do not read (a TensorArray the body only writes, as map_fn's) is recorded by
   its shape alone: its gradient (tensor_array_write_grad) needs no more. */
static npu_status reads_contents(const npu_graph *g, int region, int before, int v, bool *reads) {
  *reads = false;
  uint8_t *seen = npuC_calloc(g->ctx, (size_t)g->n_values, 1);
  if (!seen) return NPU_ERR_NOMEM;
  seen[v] = 1;
  for (int id = 0; id < before && !*reads; id++) {
    const npuG_node *m = &g->nodes[id];
    if (!npuG_region_within(g, m->region, region)) continue;
    const npu_op_def *def = npuX_op(m->op);
    bool write = m->region == region && !strcmp(def->name, "tensor_array_write");
    bool shape = m->region == region && (def->flags & NPUX_F_SHAPE_ONLY);
    bool into = false;
    for (int i = 0; i < m->n_inputs; i++) {
      if (!seen[m->inputs[i]]) continue;
      if (write && i == 0) into = true;
      else if (!shape) *reads = true;
    }
    if (into) seen[m->first_output] = 1;
  }
  npuC_free(g->ctx, seen);
  return NPU_OK;
}

/* The recording loop: the forward loop again, with a counter and each variable's value at the
   start of each iteration pushed to a record (record_push: any shape, iteration by
   iteration). */
static npu_status record(wgrad *w) {
  npu_graph *g = w->g;
  npuX_grad *gc = &w->gc;
  const int nv = w->nv;
  if (nv + 3 > NPUX_MAX_OUTPUTS)
    return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "at most %d loop variables (the recording loop "
                       "adds a counter and a record's two buffers, and a node has at most %d "
                       "outputs), got %d", NPUX_MAX_OUTPUTS - 3, NPUX_MAX_OUTPUTS, nv);
  int in[2 * NPUX_MAX_OUTPUTS + 2];
  int m = 0;
  for (int i = 0; i < nv; i++) in[m++] = w->x[i];
  int zero = npuX_gconst(gc, 0, NPU_DTYPE_I32);
  in[m++] = zero;
  in[m++] = empty_const(gc, NPU_DTYPE_U8, 1, (int64_t[]){0});
  in[m++] = empty_const(gc, NPU_DTYPE_I64, 2, (int64_t[]){0, NPUX_RECORD_WIDTH});
  if (gc->status) return gc->status;
  cloner c;
  npu_status st = cloner_init(&c, g, w->n, "record");
  if (st) return gc->status = st;
  int region;
  st = npu_graph_region_begin(g, &region);
  if (st) {
    npuC_free(g->ctx, c.map);
    return gc->status = st;
  }
  int vars[NPUX_MAX_OUTPUTS];
  for (int i = 0; i < nv && !st; i++) {
    const npuG_node *lv = &g->nodes[w->lv[i]];
    npu_attr a[8];
    int na = lv->n_attrs < 8 ? lv->n_attrs : 8;
    for (int j = 0; j < na; j++) a[j] = to_attr(&lv->attrs[j]);
    char name[256];
    snprintf(name, sizeof name, "%s/%s", c.scope, lv->name);
    int node;
    st = add_node(g, "loop_var", name, 0, NULL, na, a, &node);
    if (!st) vars[i] = c.map[g->nodes[w->lv[i]].first_output] = npu_graph_output(g, node, 0);
  }
  if (!st) {
    char scope[160];
    memcpy(scope, gc->scope, sizeof scope);
    snprintf(gc->scope, sizeof gc->scope, "%.150s", c.scope);
    int k = loop_var(gc, NPU_DTYPE_I32, nv, zero, false, "count");
    int data = loop_var_shaped(gc, NPU_DTYPE_U8, nv + 1, 1, (int64_t[]){-1}, "data");
    int meta = loop_var_shaped(gc, NPU_DTYPE_I64, nv + 2, 2, (int64_t[]){-1, NPUX_RECORD_WIDTH},
                               "meta");
    int res[NPUX_MAX_OUTPUTS + 1];
    res[0] = w->pred;
    memcpy(res + 1, w->r, (size_t)nv * sizeof *res);
    st = gc->status ? gc->status : clone_region(&c, w->region, nv + 1, res);
    if (!st) {
      in[m++] = mapped(&c, w->pred);
      for (int i = 0; i < nv; i++) in[m++] = mapped(&c, w->r[i]);
      in[m++] = npuX_g2(gc, "add", k, npuX_gconst(gc, 1, NPU_DTYPE_I32));
      int pin[NPUX_MAX_OUTPUTS + 2] = {data, meta};
      int64_t only[NPUX_MAX_OUTPUTS];
      int n_only = 0;
      for (int i = 0; i < nv; i++) {
        pin[2 + i] = vars[i];
        if (w->shape_only[i]) only[n_only++] = i;
      }
      npu_attr a = npuX_aints("shape_only", only, n_only);
      char name[256];
      snprintf(name, sizeof name, "%s/RecordPush", c.scope);
      int node;
      st = gc->status ? gc->status : add_node(g, "record_push", name, nv + 2, pin, 1, &a, &node);
      if (!st) {
        in[m++] = npu_graph_output(g, node, 0);
        in[m++] = npu_graph_output(g, node, 1);
      }
    }
    memcpy(gc->scope, scope, sizeof scope);
  }
  npu_status st2 = npu_graph_region_end(g, region);
  if (!st) st = st2;
  npuC_free(g->ctx, c.map);
  if (st) return gc->status ? gc->status : (gc->status = st);
  npu_attr a[2] = {npuX_aint("region", region), npuX_aint("maximum_iterations", w->max_it)};
  char name[256];
  snprintf(name, sizeof name, "%s/record", gc->scope);
  int node;
  st = add_node(g, "while", name, m, in, 2, a, &node);
  if (st) return gc->status = st;
  w->count = npu_graph_output(g, node, nv);
  w->data = npu_graph_output(g, node, nv + 1);
  w->meta = npu_graph_output(g, node, nv + 2);
  return NPU_OK;
}

/* Loop variable i's value at the start of iteration `it`, read back from the record (its
   static shape when the loop keeps one). */
static int recorded(wgrad *w, int i, int it) {
  npuX_grad *gc = &w->gc;
  const npuG_node *lv = &w->g->nodes[w->lv[i]];
  npuG_value v = npuX_gvalue(gc, lv->first_output);
  if (v.ndim < 0 && !w->any[i] && !npuX_loop_var_has_shape(lv)) v = npuX_gvalue(gc, w->x[i]);
  npu_attr a[4] = {npuX_adtype("dtype", v.dtype), npuX_aint("count", w->nv), npuX_aint("slot", i)};
  int n = 3;
  if (v.ndim >= 0 && !w->any[i]) a[n++] = npuX_aints("shape", v.shape, v.ndim);
  int in[3] = {w->data, w->meta, it};
  return npuX_gadd(gc, "record_read", 3, in, n, a);
}

/* The backward loop; din as in npuX_control_grad. */
static npu_status backward(wgrad *w, const int *dy, int n_in, const int *in, const bool *wanted,
                           int *din) {
  npu_graph *g = w->g;
  npuX_grad *gc = &w->gc;
  const int nv = w->nv;
  /* float variables and float captures on the path */
  int fv[NPUX_MAX_OUTPUTS], nf = 0, caps[NPUX_MAX_OUTPUTS], nc = 0;
  for (int i = 0; i < nv; i++)
    if (npuX_is_float(npuX_gvalue(gc, w->y[i]).dtype)) fv[nf++] = i;
  ilist reads = {0};
  int r[2] = {w->region, 0};
  npu_status st = region_reads(g, r, w->n, &reads);
  for (int i = 0; i < nv && !st; i++)
    if (!npuG_region_within(g, g->nodes[g->values[w->r[i]].node].region, w->region))
      st = ilist_add(g->ctx, &reads, w->r[i], true);
  for (int i = 0; i < reads.n && !st; i++) {
    int v = reads.v[i];
    bool on = false;
    for (int j = 0; j < n_in; j++) on |= in[j] == v && wanted[j];
    if (!on || !npuX_is_float(g->values[v].dtype)) continue;
    if (nc == NPUX_MAX_OUTPUTS - 1 - nf) {
      st = npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "too many loop variables and values read from "
                       "around the loop need gradients (at most %d together)", NPUX_MAX_OUTPUTS - 1);
      break;
    }
    caps[nc++] = v;
  }
  npuC_free(g->ctx, reads.v);
  if (st) return gc->status ? gc->status : (gc->status = st);
  if (nf == 0 && nc == 0) return NPU_OK;
  /* initial values: N, the final values' gradients, zeros for the captures */
  int init[NPUX_MAX_OUTPUTS], m = 0;
  init[m++] = w->count;
  for (int i = 0; i < nf; i++)
    init[m++] = dy[fv[i]] >= 0 ? dy[fv[i]] : npuX_g1(gc, "zeros_like", w->y[fv[i]]);
  for (int j = 0; j < nc; j++) init[m++] = npuX_g1(gc, "zeros_like", caps[j]);
  if (gc->status) return gc->status;
  cloner c;
  if ((st = cloner_init(&c, g, w->n, "body"))) return gc->status = st;
  int region;
  if ((st = npu_graph_region_begin(g, &region))) {
    npuC_free(g->ctx, c.map);
    return gc->status = st;
  }
  int next[NPUX_MAX_OUTPUTS], pred = -1;
  {
    int kv = loop_var(gc, NPU_DTYPE_I32, 0, w->count, false, "count");
    int gv[NPUX_MAX_OUTPUTS], cv[NPUX_MAX_OUTPUTS];
    for (int i = 0; i < nf; i++)
      gv[i] = loop_var(gc, npuX_gvalue(gc, w->y[fv[i]]).dtype, 1 + i, w->y[fv[i]], w->any[fv[i]],
                       "grad");
    for (int j = 0; j < nc; j++) cv[j] = loop_var(gc, npuX_gvalue(gc, caps[j]).dtype, 1 + nf + j, caps[j], false, "grad_capture");
    pred = npuX_g2(gc, "greater", kv, npuX_gconst(gc, 0, NPU_DTYPE_I32));
    int km1 = npuX_g2(gc, "sub", kv, npuX_gconst(gc, 1, NPU_DTYPE_I32));
    /* the values at the start of iteration k - 1 stand in for the loop variables */
    int v[NPUX_MAX_OUTPUTS];
    for (int i = 0; i < nv && !gc->status; i++) {
      v[i] = recorded(w, i, km1);
      if (v[i] >= 0) c.map[g->nodes[w->lv[i]].first_output] = v[i];
    }
    st = gc->status ? gc->status : clone_region(&c, w->region, nv, w->r);
    int ys[NPUX_MAX_OUTPUTS], xs[2 * NPUX_MAX_OUTPUTS], d[2 * NPUX_MAX_OUTPUTS];
    for (int i = 0; i < nf; i++) ys[i] = mapped(&c, w->r[fv[i]]), xs[i] = v[fv[i]];
    for (int j = 0; j < nc; j++) xs[nf + j] = caps[j];
    if (!st && nf) st = npuX_gradients_in(g, nf, ys, gv, nf + nc, xs, d);
    else for (int i = 0; i < nf + nc; i++) d[i] = -1;
    if (st) gc->status = st;
    int q = 0;
    next[q++] = km1;
    for (int i = 0; i < nf; i++) next[q++] = d[i] >= 0 ? d[i] : npuX_g1(gc, "zeros_like", xs[i]);
    for (int j = 0; j < nc; j++) next[q++] = d[nf + j] >= 0 ? npuX_g2(gc, "add", cv[j], d[nf + j]) : cv[j];
    st = gc->status;
  }
  npu_status st2 = npu_graph_region_end(g, region);
  if (!st) st = st2;
  npuC_free(g->ctx, c.map);
  if (st) return gc->status ? gc->status : (gc->status = st);
  int bin[2 * NPUX_MAX_OUTPUTS + 1];
  memcpy(bin, init, (size_t)m * sizeof *bin);
  bin[m] = pred;
  memcpy(bin + m + 1, next, (size_t)m * sizeof *bin);
  npu_attr a[2] = {npuX_aint("region", region), npuX_aint("maximum_iterations", -1)};
  char name[256];
  snprintf(name, sizeof name, "%s/backward", gc->scope);
  int node;
  if ((st = add_node(g, "while", name, 2 * m + 1, bin, 2, a, &node))) return gc->status = st;
  /* the initial values' gradients, and the captures' (summed where a value is both) */
  for (int j = 0; j < n_in; j++) {
    if (!wanted[j]) continue;
    int parts[2], np = 0;
    for (int i = 0; i < nf; i++)
      if (w->x[fv[i]] == in[j]) parts[np++] = npu_graph_output(g, node, 1 + i);
    for (int i = 0; i < nc && np < 2; i++)
      if (caps[i] == in[j]) parts[np++] = npu_graph_output(g, node, 1 + nf + i);
    if (np) din[j] = npuX_gsum(gc, np, parts);
  }
  return gc->status;
}

static npu_status while_grad(npu_graph *g, int n, const int *dy, int n_in, const int *in,
                             const bool *wanted, int *din) {
  const npuG_node *node = &g->nodes[n];
  wgrad w = {.g = g, .n = n, .nv = node->n_outputs, .region = npuX_while_region(node),
             .max_it = npuX_while_max_iterations(node)};
  w.gc = (npuX_grad){.graph = g, .node = n};
  snprintf(w.gc.scope, sizeof w.gc.scope, "gradients/%s_grad", node->name);
  w.pred = node->inputs[w.nv];
  npu_status st = NPU_OK;
  for (int i = 0; i < w.nv && !st; i++) {
    w.x[i] = node->inputs[i];
    w.r[i] = node->inputs[w.nv + 1 + i];
    w.y[i] = node->first_output + i;
    w.lv[i] = npuX_find_loop_var(g, w.region, n, i);
    const npuG_attr *a = npuG_attr_find(&g->nodes[w.lv[i]], "any_shape");
    w.any[i] = a && a->u.i != 0;
    bool reads = true;
    st = reads_contents(g, w.region, n, g->nodes[w.lv[i]].first_output, &reads);
    w.shape_only[i] = !reads;
  }
  if (!st) st = record(&w);
  if (!st) st = backward(&w, dy, n_in, in, wanted, din);
  return st;
}

npu_status npuX_control_grad(npu_graph *g, int n, const int *dy, int n_in, const int *in,
                             const bool *wanted, int *din) {
  for (int i = 0; i < n_in; i++) din[i] = -1;
  if (npuX_op(g->nodes[n].op)->kind == NPUX_KIND_COND)
    return cond_grad(g, n, dy, n_in, in, wanted, din);
  return while_grad(g, n, dy, n_in, in, wanted, din);
}
