/*
 * grad.c — npu_graph_gradients (reverse mode, as graph nodes) and the helpers grad functions
 * build their nodes with (ops/grad.h).
 *
 * The walk: mark the values that depend on an x through float values and differentiable ops
 * (forward, ascending ids; stop_gradient cuts), and those the ys depend on (backward); a value
 * in both is on the path.  Then, in reverse id order, each node with a path output sums the
 * gradients flowing into each output (from all consumers: add, or add_n when the op table has
 * it) and calls its op's `.grad`, which adds nodes and names the gradients of its inputs;
 * those flowing into path inputs are recorded for the inputs' producers.  Integer inputs
 * never receive gradients.  A failure removes every node (and region) the call added (the
 * graph is as it was), sets the message and the outs to -1.
 *
 * Regions: the walk differentiates the nodes of the current region and of the regions around
 * it; a node inside a cond branch or a loop body contributes through its control node, whose
 * inputs for the walk are the values it reads from around it and whose gradient
 * (grad_control.c) builds new control nodes, walking clones of its regions with
 * npuX_gradients_in (the nodes of one region only, the xs as leaves).
 */
#include <stdio.h>
#include <string.h>

#include "ops/grad.h"

bool npuX_is_float(npu_dtype t) {
  return t == NPU_DTYPE_F32 || t == NPU_DTYPE_F64 || t == NPU_DTYPE_F16 || t == NPU_DTYPE_BF16;
}

npuG_value npuX_gvalue(const npuX_grad *gc, int v) { return gc->graph->values[v]; }

npu_status npuX_gerror(npuX_grad *gc, npu_status st, const char *fmt, ...) {
  if (gc->status) return gc->status;
  char msg[NPU_ERRMSG_SIZE];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const npuG_node *n = &gc->graph->nodes[gc->node];
  gc->status = npuC_error(gc->graph->ctx, st, "gradient of %s '%s': %s", npuX_op(n->op)->name,
                          n->name, msg);
  return gc->status;
}

int npuX_gadd(npuX_grad *gc, const char *op, int n_in, const int *in, int n_attrs,
              const npu_attr *attrs) {
  if (gc->status) return -1;
  for (int i = 0; i < n_in; i++)
    if (in[i] < 0) {
      npuX_gerror(gc, NPU_ERR_INTERNAL, "input %d of a '%s' gradient node is missing", i + 1, op);
      return -1;
    }
  int id = npuX_find(op);
  char name[256];
  snprintf(name, sizeof name, "%s/%s", gc->scope, id >= 0 ? npuX_op(id)->tf_type : op);
  int node;
  npu_status st = npu_graph_add_op(gc->graph, op, name, n_in, in, n_attrs, attrs, &node);
  if (st) {
    gc->status = npuC_error_prefix(gc->graph->ctx, st, "while adding the gradient of '%s'",
                                   gc->graph->nodes[gc->node].name);
    return -1;
  }
  return npu_graph_output(gc->graph, node, 0);
}

int npuX_g1(npuX_grad *gc, const char *op, int a) { return npuX_gadd(gc, op, 1, &a, 0, NULL); }

int npuX_g2(npuX_grad *gc, const char *op, int a, int b) {
  int in[2] = {a, b};
  return npuX_gadd(gc, op, 2, in, 0, NULL);
}

int npuX_gconst(npuX_grad *gc, double v, npu_dtype dtype) {
  if (gc->status) return -1;
  npu_tensor *t;
  npu_status st = npu_tensor_new(gc->graph->ctx, dtype, 0, NULL, &t);
  if (st) {
    gc->status = st;
    return -1;
  }
  npuK_cast(NULL, 1, NPUK_F64, &v, (npuK_dtype)dtype, t->data);
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  int r = npuX_gadd(gc, "const", 0, NULL, 1, &a);
  npu_tensor_release(t);
  return r;
}

static bool same_known_shape(const npuG_value *a, const npuG_value *b) {
  if (a->ndim < 0 || a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] < 0 || a->shape[i] != b->shape[i]) return false;
  return true;
}

int npuX_greshape_to(npuX_grad *gc, int d, int like) {
  if (gc->status) return -1;
  npuG_value vd = npuX_gvalue(gc, d), vl = npuX_gvalue(gc, like);
  if (same_known_shape(&vd, &vl)) return d;
  int unknown = 0;
  for (int i = 0; i < vl.ndim; i++) unknown += vl.shape[i] < 0;
  if (vl.ndim >= 0 && unknown <= 1) {
    npu_attr a = npuX_aints("shape", vl.shape, vl.ndim);
    return npuX_gadd(gc, "reshape", 1, &d, 1, &a);
  }
  /* known at run time only: the shape of `like`, which the compiler folds from the feeds */
  int s = npuX_g1(gc, "shape", like);
  return npuX_g2(gc, "reshape", d, s);
}

/* d summed (reduce_sum) or averaged (reduce_mean) over the axes where x was broadcast. */
static int reduce_to(npuX_grad *gc, int d, int x, const char *op) {
  if (gc->status) return -1;
  npuG_value vd = npuX_gvalue(gc, d), vx = npuX_gvalue(gc, x);
  if (same_known_shape(&vd, &vx)) return d;
  if (vd.ndim < 0 || vx.ndim < 0) {
    /* rank unknown: only "nothing to undo" is decidable, when both are the same value shape,
       and a scalar x, which every element of d comes from */
    if (vd.ndim == vx.ndim) return d;
    if (vx.ndim == 0) return npuX_gadd(gc, op, 1, &d, 0, NULL);
    npuX_gerror(gc, NPU_ERR_UNSUPPORTED,
                "cannot undo broadcasting with an unknown rank (give the inputs a rank)");
    return -1;
  }
  if (vx.ndim > vd.ndim) {
    npuX_gerror(gc, NPU_ERR_INTERNAL, "the gradient has a lower rank than the input");
    return -1;
  }
  const int lead = vd.ndim - vx.ndim;
  int64_t axes[NPU_MAX_DIMS];
  int n = 0;
  bool inner = false; /* an axis kept by x (with size 1) is summed */
  for (int i = 0; i < vd.ndim; i++) {
    if (i < lead) axes[n++] = i;
    else if (vx.shape[i - lead] == 1 && vd.shape[i] != 1) axes[n++] = i, inner = true;
  }
  if (n == 0) return npuX_greshape_to(gc, d, x);
  npu_attr a[2] = {npuX_aints("axis", axes, n), npuX_abool("keepdims", inner)};
  int s = npuX_gadd(gc, op, 1, &d, 2, a);
  return npuX_greshape_to(gc, s, x);
}

int npuX_greduce_to(npuX_grad *gc, int d, int x) { return reduce_to(gc, d, x, "reduce_sum"); }
int npuX_greduce_mean_to(npuX_grad *gc, int d, int x) {
  return reduce_to(gc, d, x, "reduce_mean");
}

int npuX_gbroadcast(npuX_grad *gc, int d, int like, int n_axes, const int64_t *axes, bool mean) {
  int in[2] = {d, like};
  npu_attr a[2];
  int n = 0;
  if (n_axes >= 0) a[n++] = npuX_aints("axes", axes, n_axes);
  if (mean) a[n++] = npuX_abool("mean", true);
  return npuX_gadd(gc, "broadcast_like", 2, in, n, a);
}

int npuX_gsum(npuX_grad *gc, int n, const int *v) {
  if (gc->status) return -1;
  if (n == 1) return v[0];
  if (n > 2 && npuX_find("add_n") >= 0) return npuX_gadd(gc, "add_n", n, v, 0, NULL);
  int s = v[0];
  for (int i = 1; i < n; i++) s = npuX_g2(gc, "add", s, v[i]);
  return s;
}

/* ---- shared infer of the gradient ops taking two same-shape float tensors ---- */

npu_status npuX_pair_infer(npuX_infer *ic, const void *params) {
  (void)params;
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_COUNT};
  npu_status st = npuX_check_dtype(ic, 0, ok);
  if (!st) st = npuX_check_same_dtype(ic, 0);
  if (st) return st;
  const npuG_value *a = &ic->in[0], *b = &ic->in[1];
  npuX_same_as_input(ic, 0);
  if (a->ndim < 0) ic->out[0] = *b;
  if (a->ndim >= 0 && b->ndim >= 0) {
    bool ok_shape = a->ndim == b->ndim;
    for (int i = 0; ok_shape && i < a->ndim; i++) {
      if (a->shape[i] >= 0 && b->shape[i] >= 0 && a->shape[i] != b->shape[i]) ok_shape = false;
      if (a->shape[i] < 0) ic->out[0].shape[i] = b->shape[i];
    }
    if (!ok_shape) {
      char sa[96], sb[96];
      return npuX_error(ic, NPU_ERR_SHAPE, "inputs must have the same shape, got %s and %s",
                        npuX_shape(sa, a), npuX_shape(sb, b));
    }
  }
  return NPU_OK;
}

npu_status npuX_rows2_infer(npuX_infer *ic, const void *params) {
  npu_status st = npuX_pair_infer(ic, params);
  char s[96];
  if (!st && ic->out[0].ndim == 0)
    st = npuX_error(ic, NPU_ERR_SHAPE, "inputs must have rank >= 1, got %s",
                    npuX_shape(s, &ic->out[0]));
  return st;
}

npu_status npuX_act_grad_run(const npuX_call *c, npuK_act_grad op) {
  const npu_tensor *a = c->in[0], *b = c->in[1];
  npu_tensor *y = c->out[0];
  if (y->dtype == NPU_DTYPE_F64) npuK_act_grad_f64(c->pool, op, y->numel, a->data, b->data, y->data);
  else npuK_act_grad_f32(c->pool, op, y->numel, a->data, b->data, y->data);
  return NPU_OK;
}

npu_status npuX_rows2_run(const npuX_call *c, npuX_rows2_f32 f32, npuX_rows2_f64 f64) {
  const npu_tensor *a = c->in[0], *b = c->in[1];
  npu_tensor *y = c->out[0];
  int64_t cols = y->ndim ? y->shape[y->ndim - 1] : 1;
  int64_t rows = cols ? y->numel / cols : 0;
  if (y->dtype == NPU_DTYPE_F64) f64(c->pool, rows, cols, a->data, b->data, y->data);
  else f32(c->pool, rows, cols, a->data, b->data, y->data);
  return NPU_OK;
}

int npuX_window_attrs(const npuX_window_params *p, bool pool, npu_attr *attrs, int64_t *buf) {
  int n = 0;
  if (pool) {
    buf[0] = p->ksize[0], buf[1] = p->ksize[1];
    attrs[n++] = npuX_aints("ksize", buf, 2);
  }
  buf[2] = p->stride[0], buf[3] = p->stride[1];
  attrs[n++] = npuX_aints("strides", buf + 2, 2);
  if (!pool) {
    buf[4] = p->dilation[0], buf[5] = p->dilation[1];
    attrs[n++] = npuX_aints("dilations", buf + 4, 2);
  }
  attrs[n++] = npuX_astr("padding", npuX_padding_name(p->padding));
  if (p->padding == NPUX_PAD_EXPLICIT) {
    int64_t *e = buf + 6;
    e[0] = e[1] = e[6] = e[7] = 0;
    for (int i = 0; i < 4; i++) e[2 + i] = p->explicit_pad[i];
    attrs[n++] = npuX_aints("explicit_paddings", e, 8);
  }
  return n;
}

npu_status npuX_window_grad_parse(npuX_infer *ic, npuX_window_grad_params *p, bool pool,
                                  const char *sizes) {
  npu_status st = pool ? npuX_pool_parse(ic, &p->win) : npuX_conv_parse(ic, &p->win);
  if (st) return st;
  int n = 0;
  st = npuX_attr_ints(ic, sizes, p->sizes, 4, &n);
  if (st) return st;
  if (n != 4) return npuX_error(ic, NPU_ERR_ARG, "attribute '%s' (4 ints) is required", sizes);
  for (int i = 0; i < 4; i++)
    if (p->sizes[i] < (i == 0 ? -1 : 0))
      return npuX_error(ic, NPU_ERR_ARG, "attribute '%s' has a negative entry", sizes);
  return NPU_OK;
}

npu_status npuX_window_grad_check(npuX_infer *ic, const npuX_window_params *p,
                                  const int64_t in_hw[2], const int64_t k[2], int dy_input) {
  const npuG_value *dy = &ic->in[dy_input];
  char s[96];
  if (dy->ndim >= 0 && dy->ndim != 4)
    return npuX_error(ic, NPU_ERR_SHAPE, "the gradient (input %d) must be NHWC (rank 4), got %s",
                      dy_input + 1, npuX_shape(s, dy));
  int64_t out[2];
  if (npuX_window_out_hw(p, in_hw, k, out) >= 0)
    return npuX_error(ic, NPU_ERR_SHAPE, "the window does not fit the input");
  for (int a = 0; a < 2 && dy->ndim == 4; a++)
    if (out[a] >= 0 && dy->shape[1 + a] >= 0 && out[a] != dy->shape[1 + a])
      return npuX_error(ic, NPU_ERR_SHAPE,
                        "the gradient %s does not have the forward output's size %lldx%lld",
                        npuX_shape(s, dy), (long long)out[0], (long long)out[1]);
  return NPU_OK;
}

npu_status npuX_window_grad_geometry(const npuX_call *c, int64_t n, const int64_t sizes[4],
                                     int64_t k_h, int64_t k_w, npuK_window2d *w) {
  const npuX_window_grad_params *p = c->params;
  npu_tensor meta = {.ndim = 4, .shape = {n, sizes[1], sizes[2], sizes[3]}};
  if (npuX_window_geometry(&p->win, &meta, k_h, k_w, w) == 0) return NPU_OK;
  return npuC_error(c->ctx, NPU_ERR_SHAPE, "%s '%s': the window does not fit the input",
                    npuX_op(c->node->op)->name, c->node->name);
}

npu_status npuX_pool_grad_infer(npuX_infer *ic, const void *params, int dy_input) {
  const npuX_window_params *p = params;
  npu_status st = npuX_pool_infer(ic, params); /* checks x; out = the pool's output */
  if (!st) st = npuX_check_same_dtype(ic, 0);
  const npuG_value *x = &ic->in[0];
  if (!st && x->ndim == 4) {
    const int64_t in[2] = {x->shape[1], x->shape[2]};
    st = npuX_window_grad_check(ic, p, in, p->ksize, dy_input);
  }
  npuX_same_as_input(ic, 0);
  return st;
}

npu_status npuX_filter_grad_infer(npuX_infer *ic, const void *params, bool depthwise) {
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_COUNT};
  const npuX_window_grad_params *p = params;
  const int64_t *sizes = p->sizes;
  const int64_t dy_channels = depthwise ? sizes[2] * sizes[3] : sizes[3];
  const npuG_value *x = &ic->in[0], *dy = &ic->in[1];
  npu_status st = npuX_check_dtype(ic, 0, ok);
  if (!st) st = npuX_check_same_dtype(ic, 0);
  if (st) return st;
  char sx[96], sd[96];
  if (x->ndim >= 0 && x->ndim != 4)
    return npuX_error(ic, NPU_ERR_SHAPE, "needs an NHWC input (rank 4), got %s", npuX_shape(sx, x));
  const int64_t in[2] = {x->ndim == 4 ? x->shape[1] : -1, x->ndim == 4 ? x->shape[2] : -1};
  st = npuX_window_grad_check(ic, &p->win, in, sizes, 1);
  if (st) return st;
  if (x->ndim == 4 && x->shape[3] >= 0 && x->shape[3] != sizes[2])
    return npuX_error(ic, NPU_ERR_SHAPE, "input %s has %lld channels, filter_sizes say %lld",
                      npuX_shape(sx, x), (long long)x->shape[3], (long long)sizes[2]);
  if (dy->ndim == 4 && dy->shape[3] >= 0 && dy->shape[3] != dy_channels)
    return npuX_error(ic, NPU_ERR_SHAPE, "the gradient %s has %lld channels, the filter gives %lld",
                      npuX_shape(sd, dy), (long long)dy->shape[3], (long long)dy_channels);
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = x->dtype, .ndim = 4,
                            .shape = {sizes[0], sizes[1], sizes[2], sizes[3]}};
  return NPU_OK;
}

size_t npuX_split_scratch_size(const npuX_call *c) {
  return (size_t)c->node->n_outputs * (sizeof(int64_t) + sizeof(void *)) + 1;
}

npu_status npuX_split_grad(npuX_grad *gc, bool axis_is_input, int64_t axis, int dx_input) {
  if (axis_is_input)
    return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "the axis must be an attribute");
  int parts[NPUX_MAX_OUTPUTS];
  for (int i = 0; i < gc->n_outputs; i++)
    parts[i] = gc->dy[i] >= 0 ? gc->dy[i] : npuX_g1(gc, "zeros_like", gc->y[i]);
  npu_attr a = npuX_aint("axis", axis);
  gc->dx[dx_input] = npuX_gadd(gc, "concat", gc->n_outputs, parts, 1, &a);
  return gc->status;
}

npu_status npuX_conv_grad(npuX_grad *gc, const char *input_op, const char *filter_op) {
  const npuX_window_params *p = (const npuX_window_params *)gc->params.bytes;
  npuG_value x = npuX_gvalue(gc, gc->x[0]), f = npuX_gvalue(gc, gc->x[1]);
  npu_attr a[6];
  int64_t buf[16];
  int n = npuX_window_attrs(p, false, a, buf);
  if (gc->wanted[0]) {
    if (x.ndim != 4 || x.shape[1] < 0 || x.shape[2] < 0 || x.shape[3] < 0)
      return npuX_gerror(gc, NPU_ERR_UNSUPPORTED,
                         "the input's height, width and channels must be known");
    if (npuX_find(input_op) < 0)
      return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "the input gradient needs op %s", input_op);
    a[n] = npuX_aints("input_sizes", x.shape, 4);
    int in[2] = {gc->x[1], gc->dy[0]};
    gc->dx[0] = npuX_gadd(gc, input_op, 2, in, n + 1, a);
  }
  if (gc->wanted[1]) {
    if (f.ndim != 4 || f.shape[0] < 0 || f.shape[1] < 0 || f.shape[2] < 0 || f.shape[3] < 0)
      return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "the filter's shape must be known");
    a[n] = npuX_aints("filter_sizes", f.shape, 4);
    int in[2] = {gc->x[0], gc->dy[0]};
    gc->dx[1] = npuX_gadd(gc, filter_op, 2, in, n + 1, a);
  }
  return gc->status;
}

/* ---- the walk ---- */

typedef struct contrib {
  int value, next;
} contrib;

typedef struct walk {
  npu_graph *g;
  int n_values;   /* values that existed before the call */
  uint8_t *flags; /* per value: REACH | NEED */
  int *head;      /* per value: its first contribution, -1 */
  int *summed;    /* per value: the summed gradient; -1 not yet summed, -2 none */
  contrib *c;
  int n_c, cap_c;
  int region;     /* the nodes walked: those of this region, */
  bool strict;    /* only (gradients of a control node's region), else those around it too */
} walk;

enum { REACH = 1, NEED = 2, PATH = REACH | NEED };

static bool on_path(const walk *w, int v) { return v < w->n_values && (w->flags[v] & PATH) == PATH; }

static npu_status push(walk *w, int v, int grad) {
  if (w->n_c == w->cap_c) {
    int cap = w->cap_c ? 2 * w->cap_c : 64;
    contrib *c = npuC_realloc(w->g->ctx, w->c, (size_t)cap * sizeof *c);
    if (!c) return NPU_ERR_NOMEM;
    w->c = c;
    w->cap_c = cap;
  }
  w->c[w->n_c] = (contrib){grad, w->head[v]};
  w->head[v] = w->n_c++;
  return NPU_OK;
}

/* The gradient flowing into value v: its contributions summed (once); -1 when none. */
static int sum_into(walk *w, int v, npu_status *st) {
  if (w->summed[v] != -1) return w->summed[v] < 0 ? -1 : w->summed[v];
  int n = 0;
  for (int k = w->head[v]; k >= 0; k = w->c[k].next) n++;
  if (n == 0) {
    w->summed[v] = -2;
    return -1;
  }
  int stack[16];
  int *list = n <= 16 ? stack : npuC_alloc(w->g->ctx, (size_t)n * sizeof *list);
  if (!list) {
    *st = NPU_ERR_NOMEM;
    return -1;
  }
  /* contributions were pushed in reverse consumer order: sum them in consumer order */
  int i = n;
  for (int k = w->head[v]; k >= 0; k = w->c[k].next) list[--i] = w->c[k].value;
  npuX_grad gc = {.graph = w->g, .node = w->g->values[v].node};
  snprintf(gc.scope, sizeof gc.scope, "gradients");
  int r = npuX_gsum(&gc, n, list);
  if (list != stack) npuC_free(w->g->ctx, list);
  if (gc.status) *st = gc.status;
  else w->summed[v] = r;
  return gc.status ? -1 : r;
}

/* dtype and shape of a given upstream gradient against its y. */
static npu_status check_grad_y(npu_graph *g, int y, int gy) {
  const npuG_value *a = &g->values[y], *b = &g->values[gy];
  char sa[96], sb[96];
  if (a->dtype != b->dtype)
    return npuC_error(g->ctx, NPU_ERR_DTYPE,
                      "npu_graph_gradients: grad_ys for '%s' is %s, the value is %s",
                      g->nodes[a->node].name, npu_dtype_name(b->dtype), npu_dtype_name(a->dtype));
  bool ok = a->ndim < 0 || b->ndim < 0 || a->ndim == b->ndim;
  for (int i = 0; ok && a->ndim >= 0 && i < a->ndim && i < b->ndim; i++)
    ok = a->shape[i] < 0 || b->shape[i] < 0 || a->shape[i] == b->shape[i];
  if (!ok)
    return npuC_error(g->ctx, NPU_ERR_SHAPE,
                      "npu_graph_gradients: grad_ys for '%s' has shape %s, the value %s",
                      g->nodes[a->node].name, npuC_shape_str(sb, sizeof sb, b->ndim, b->shape),
                      npuC_shape_str(sa, sizeof sa, a->ndim, a->shape));
  return NPU_OK;
}

/* The upstream gradient of y when none is given: ones of y's shape. */
static int ones_like(npu_graph *g, int y, npu_status *st) {
  npuX_grad gc = {.graph = g, .node = g->values[y].node};
  snprintf(gc.scope, sizeof gc.scope, "gradients");
  const npuG_value v = g->values[y]; /* a copy: adding nodes moves the value array */
  int one = npuX_gconst(&gc, 1.0, v.dtype);
  int r = v.ndim == 0 ? one : npuX_gbroadcast(&gc, one, y, 0, NULL, false);
  if (gc.status) *st = gc.status;
  return r;
}

/* Whether the walk differentiates node n (a node of a region nested deeper contributes
   through its control node). */
static bool in_walk(const walk *w, int n) {
  int r = w->g->nodes[n].region;
  return w->strict ? r == w->region : npuG_region_within(w->g, w->region, r);
}

static bool is_control(const npu_graph *g, int n) {
  npuX_kind k = npuX_op(g->nodes[n].op)->kind;
  return k == NPUX_KIND_COND || k == NPUX_KIND_WHILE;
}

/* The inputs of node n for the walk: its own, or a control node's npuX_control_inputs (then
   *owned is the list to free). */
static npu_status walk_inputs(const walk *w, int n, const int **in, int *n_in, int **owned) {
  *owned = NULL;
  if (!is_control(w->g, n)) {
    *in = w->g->nodes[n].inputs;
    *n_in = w->g->nodes[n].n_inputs;
    return NPU_OK;
  }
  npu_status st = npuX_control_inputs(w->g, n, owned, n_in);
  *in = *owned;
  return st;
}

static bool is_stop_gradient(const npu_graph *g, int node) {
  return strcmp(npuX_op(g->nodes[node].op)->name, "stop_gradient") == 0;
}

/* Calls the grad of node n with the summed gradients of its outputs. */
static npu_status control_node(walk *w, int n, const int *dy) {
  npu_graph *g = w->g;
  const int *in;
  int n_in, *owned;
  npu_status st = walk_inputs(w, n, &in, &n_in, &owned);
  bool *wanted = st ? NULL : npuC_alloc(g->ctx, (size_t)(n_in + 1) * sizeof *wanted);
  int *din = wanted ? npuC_alloc(g->ctx, (size_t)(n_in + 1) * sizeof *din) : NULL;
  if (!st && !din) st = NPU_ERR_NOMEM;
  if (!st) {
    for (int i = 0; i < n_in; i++) wanted[i] = on_path(w, in[i]);
    st = npuX_control_grad(g, n, dy, n_in, in, wanted, din);
  }
  for (int i = 0; i < n_in && !st; i++)
    if (din[i] >= 0 && wanted[i]) st = push(w, in[i], din[i]);
  npuC_free(g->ctx, owned);
  npuC_free(g->ctx, wanted);
  npuC_free(g->ctx, din);
  return st;
}

static npu_status grad_node(walk *w, int n) {
  npu_graph *g = w->g;
  if (!in_walk(w, n)) return NPU_OK;
  npu_context *ctx = g->ctx;
  const npuG_node *node = &g->nodes[n];
  const npu_op_def *def = npuX_op(node->op);
  int n_in = node->n_inputs, n_out = node->n_outputs;
  const int *ins;
  int n_ins, *owned;
  npu_status st = walk_inputs(w, n, &ins, &n_ins, &owned);
  bool any_in = false;
  for (int i = 0; i < n_ins && !st; i++) any_in |= on_path(w, ins[i]);
  npuC_free(ctx, owned);
  if (st || !any_in || is_stop_gradient(g, n)) return st;
  node = &g->nodes[n];
  int dy[NPUX_MAX_OUTPUTS], y[NPUX_MAX_OUTPUTS];
  bool any_dy = false;
  for (int i = 0; i < n_out; i++) {
    y[i] = node->first_output + i;
    dy[i] = on_path(w, y[i]) ? sum_into(w, y[i], &st) : -1;
    if (st) return st;
    any_dy |= dy[i] >= 0;
    node = &g->nodes[n]; /* summing may have grown the node array */
  }
  if (!any_dy) return NPU_OK;
  if (is_control(g, n)) return control_node(w, n, dy);
  if (!def->grad)
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED,
                      "npu_graph_gradients: no gradient is defined for op %s (node '%s')",
                      def->name, node->name);
  int stack_x[16], stack_dx[16];
  bool stack_w[16];
  int *x = n_in <= 16 ? stack_x : npuC_alloc(ctx, (size_t)n_in * sizeof *x);
  int *dx = n_in <= 16 ? stack_dx : npuC_alloc(ctx, (size_t)n_in * sizeof *dx);
  bool *wanted = n_in <= 16 ? stack_w : npuC_alloc(ctx, (size_t)n_in * sizeof *wanted);
  if (!x || !dx || !wanted) {
    if (x != stack_x) npuC_free(ctx, x);
    if (dx != stack_dx) npuC_free(ctx, dx);
    if (wanted != stack_w) npuC_free(ctx, wanted);
    return NPU_ERR_NOMEM;
  }
  for (int i = 0; i < n_in; i++)
    x[i] = node->inputs[i], dx[i] = -1, wanted[i] = on_path(w, node->inputs[i]);
  npuX_grad gc = {.graph = g, .node = n, .params = node->params, .n_inputs = n_in,
                  .n_outputs = n_out, .x = x, .y = y, .dy = dy, .dx = dx, .wanted = wanted};
  snprintf(gc.scope, sizeof gc.scope, "gradients/%s_grad", node->name);
  st = def->grad(&gc);
  if (!st) st = gc.status;
  for (int i = 0; i < n_in && !st; i++)
    if (dx[i] >= 0 && on_path(w, x[i])) st = push(w, x[i], dx[i]);
  if (x != stack_x) npuC_free(ctx, x);
  if (dx != stack_dx) npuC_free(ctx, dx);
  if (wanted != stack_w) npuC_free(ctx, wanted);
  return st;
}

static npu_status check_ids(npu_graph *g, const char *what, int n, const int *ids, bool allow_none) {
  for (int i = 0; i < n; i++)
    if ((ids[i] < 0 && !(allow_none && ids[i] == -1)) || ids[i] >= g->n_values)
      return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_gradients: %s[%d] = %d is not a value of "
                        "this graph", what, i, ids[i]);
  return NPU_OK;
}

static npu_status gradients(walk *w, int n_ys, const int *ys, const int *grad_ys, int n_xs,
                            const int *xs, int *dx_out) {
  npu_graph *g = w->g;
  const int nn = g->n_nodes;
  npu_status st = NPU_OK;
  /* forward: values that depend on an x through floats and differentiable ops */
  int first = nn;
  for (int i = 0; i < n_xs; i++) {
    if (npuX_is_float(g->values[xs[i]].dtype)) w->flags[xs[i]] |= REACH;
    if (g->values[xs[i]].node < first) first = g->values[xs[i]].node;
  }
  for (int n = first; n < nn && !st; n++) {
    if (!in_walk(w, n) || is_stop_gradient(g, n)) continue;
    const int *in;
    int n_in, *owned;
    st = walk_inputs(w, n, &in, &n_in, &owned);
    bool any = false;
    for (int i = 0; i < n_in && !any && !st; i++) any = w->flags[in[i]] & REACH;
    npuC_free(g->ctx, owned);
    if (!any) continue;
    const npuG_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_outputs; i++) {
      int v = node->first_output + i;
      if (npuX_is_float(g->values[v].dtype)) w->flags[v] |= REACH;
    }
  }
  /* backward: values the ys depend on */
  int last = -1;
  for (int i = 0; i < n_ys; i++) {
    w->flags[ys[i]] |= NEED;
    if (g->values[ys[i]].node > last) last = g->values[ys[i]].node;
  }
  for (int n = last; n >= 0 && !st; n--) {
    if (!in_walk(w, n)) continue;
    const npuG_node *node = &g->nodes[n];
    bool any = false;
    for (int i = 0; i < node->n_outputs && !any; i++) any = w->flags[node->first_output + i] & NEED;
    if (!any) continue;
    const int *in;
    int n_in, *owned;
    st = walk_inputs(w, n, &in, &n_in, &owned);
    for (int i = 0; i < n_in && !st; i++) w->flags[in[i]] |= NEED;
    npuC_free(g->ctx, owned);
  }
  /* seeds */
  for (int i = 0; i < n_ys && !st; i++) {
    int y = ys[i];
    if (!(w->flags[y] & REACH)) continue;
    int gy = grad_ys && grad_ys[i] >= 0 ? grad_ys[i] : ones_like(g, y, &st);
    if (!st) st = push(w, y, gy);
  }
  /* reverse sweep */
  for (int n = last; n >= first && !st; n--) st = grad_node(w, n);
  for (int i = 0; i < n_xs && !st; i++)
    dx_out[i] = on_path(w, xs[i]) ? sum_into(w, xs[i], &st) : -1;
  return st;
}

/* One walk over the nodes of the current region (strict) or of it and the regions around it. */
static npu_status run_walk(npu_graph *g, bool strict, int n_ys, const int *ys, const int *grad_ys,
                           int n_xs, const int *xs, int *dx_out) {
  npu_context *ctx = g->ctx;
  const int nv = g->n_values;
  npu_status st = NPU_OK;
  walk w = {.g = g, .n_values = nv, .region = g->cur_region, .strict = strict};
  w.flags = npuC_calloc(ctx, (size_t)nv, 1);
  w.head = npuC_alloc(ctx, (size_t)nv * sizeof *w.head);
  w.summed = npuC_alloc(ctx, (size_t)nv * sizeof *w.summed);
  if (!w.flags || !w.head || !w.summed) st = NPU_ERR_NOMEM;
  else {
    for (int v = 0; v < nv; v++) w.head[v] = w.summed[v] = -1;
    st = gradients(&w, n_ys, ys, grad_ys, n_xs, xs, dx_out);
  }
  npuC_free(ctx, w.flags);
  npuC_free(ctx, w.head);
  npuC_free(ctx, w.summed);
  npuC_free(ctx, w.c);
  return st;
}

npu_status npuX_gradients_in(npu_graph *g, int n_ys, const int *ys, const int *grad_ys, int n_xs,
                             const int *xs, int *dx) {
  for (int i = 0; i < n_xs; i++) dx[i] = -1;
  return run_walk(g, true, n_ys, ys, grad_ys, n_xs, xs, dx);
}

npu_status npu_graph_gradients(npu_graph *g, int n_ys, const int *ys, const int *grad_ys,
                               int n_xs, const int *xs, int *dx_out) {
  if (!g) return NPU_ERR_ARG;
  npu_context *ctx = g->ctx;
  for (int i = 0; dx_out && i < n_xs; i++) dx_out[i] = -1;
  if (n_ys < 1 || !ys || n_xs < 0 || (n_xs && (!xs || !dx_out)))
    return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_gradients: bad argument arrays");
  npu_status st = check_ids(g, "ys", n_ys, ys, false);
  if (!st) st = check_ids(g, "xs", n_xs, xs, false);
  if (!st && grad_ys) st = check_ids(g, "grad_ys", n_ys, grad_ys, true);
  for (int i = 0; !st && grad_ys && i < n_ys; i++)
    if (grad_ys[i] >= 0) st = check_grad_y(g, ys[i], grad_ys[i]);
  if (st) return st;
  if (n_xs == 0) return NPU_OK;

  const int n_nodes0 = g->n_nodes, n_regions0 = g->n_regions, region0 = g->cur_region;
  st = run_walk(g, false, n_ys, ys, grad_ys, n_xs, xs, dx_out);
  if (st) { /* undo: the nodes and the regions (the gradients of control nodes) it added */
    npuG_truncate(g, n_nodes0);
    g->n_regions = n_regions0;
    g->cur_region = region0;
    for (int i = 0; i < n_xs; i++) dx_out[i] = -1;
  }
  return st;
}
