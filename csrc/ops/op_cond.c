/*
 * op_cond.c — cond: TensorFlow's tf.cond as one node.  Inputs {pred, t_1..t_n, e_1..e_n}:
 * pred a bool scalar, t_i the results of the then region, e_i those of the else region
 * (attributes then_region, else_region: ids from npu_graph_region_begin).  Output i is t_i when
 * pred is true, else e_i; only the taken region runs (exec/control.c).  The branches must
 * agree on dtypes; where their shapes differ the output's dimension is -1 (known when it runs).
 * A result may be a value of the region or one from around it (a branch returning x as is).
 */
#include "ops/ops.h"

typedef struct cond_params {
  int64_t region[2];
} cond_params;
_Static_assert(sizeof(cond_params) <= sizeof(npuG_params), "params too big");

/* Build-time checks of a region a control node runs: it exists, was opened inside the region
   the node is built in, is closed, and no other node runs it. */
npu_status npuX_check_region(npuX_infer *ic, const char *attr, int64_t region) {
  const npu_graph *g = ic->graph;
  if (region < 1 || region > g->n_regions)
    return npuX_error(ic, NPU_ERR_ARG, "attribute '%s': %lld is not a region of this graph",
                      attr, (long long)region);
  const npuG_region *r = &g->regions[region - 1];
  if (!ic->building) return NPU_OK;
  if (r->open)
    return npuX_error(ic, NPU_ERR_STATE, "attribute '%s': region %lld is still open (end it "
                      "before building the node that runs it)", attr, (long long)region);
  if (r->parent != g->cur_region)
    return npuX_error(ic, NPU_ERR_ARG, "attribute '%s': region %lld was not opened in the "
                      "region this node is built in", attr, (long long)region);
  if (r->owner >= 0)
    return npuX_error(ic, NPU_ERR_ARG, "attribute '%s': region %lld already runs in '%s'", attr,
                      (long long)region, g->nodes[r->owner].name);
  return NPU_OK;
}

/* Input i, a result of `region`, must be visible from inside it. */
npu_status npuX_check_result(npuX_infer *ic, int i, int64_t region, const char *what) {
  const npu_graph *g = ic->graph;
  int v = ic->node->inputs[i];
  const npuG_node *src = &g->nodes[g->values[v].node];
  if (!npuG_region_within(g, (int)region, src->region))
    return npuX_error(ic, NPU_ERR_ARG, "%s ('%s') is not visible in the region that returns it",
                      what, src->name);
  return NPU_OK;
}

static npu_status parse(npuX_infer *ic, void *params) {
  cond_params *p = params;
  p->region[0] = p->region[1] = 0;
  npu_status st = npuX_attr_int(ic, "then_region", &p->region[0]);
  if (!st) st = npuX_attr_int(ic, "else_region", &p->region[1]);
  if (!st && ic->n_inputs % 2 == 0)
    st = npuX_error(ic, NPU_ERR_ARG, "takes pred and as many then results as else results "
                    "(an odd number of inputs), got %d", ic->n_inputs);
  if (!st && (ic->n_inputs - 1) / 2 > NPUX_MAX_OUTPUTS)
    st = npuX_error(ic, NPU_ERR_ARG, "at most %d results per branch, got %d", NPUX_MAX_OUTPUTS,
                    (ic->n_inputs - 1) / 2);
  if (!st) st = npuX_check_region(ic, "then_region", p->region[0]);
  if (!st) st = npuX_check_region(ic, "else_region", p->region[1]);
  if (!st && p->region[0] == p->region[1])
    st = npuX_error(ic, NPU_ERR_ARG, "then_region and else_region are the same region");
  ic->n_outputs = (ic->n_inputs - 1) / 2;
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const cond_params *p = params;
  const npuG_value *pred = &ic->in[0];
  char sh[96];
  if (pred->dtype != NPU_DTYPE_BOOL || pred->ndim > 0) /* an unknown rank is checked when it runs */
    return npuX_error(ic, NPU_ERR_DTYPE, "pred must be a bool scalar, got %s %s",
                      npu_dtype_name(pred->dtype), npuX_shape(sh, pred));
  int n = ic->n_outputs;
  for (int i = 0; i < n; i++) {
    const npuG_value *t = &ic->in[1 + i], *e = &ic->in[1 + n + i];
    if (ic->building) {
      npu_status st = npuX_check_result(ic, 1 + i, p->region[0], "a then result");
      if (!st) st = npuX_check_result(ic, 1 + n + i, p->region[1], "an else result");
      if (st) return st;
    }
    if (t->dtype != e->dtype)
      return npuX_error(ic, NPU_ERR_DTYPE, "result %d is %s in the then branch but %s in the "
                        "else branch", i + 1, npu_dtype_name(t->dtype), npu_dtype_name(e->dtype));
    npuG_value *y = &ic->out[i];
    y->dtype = t->dtype;
    if (t->ndim != e->ndim || t->ndim < 0) {
      y->ndim = -1; /* even the rank differs: known when a branch has run */
      continue;
    }
    y->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) y->shape[d] = t->shape[d] == e->shape[d] ? t->shape[d] : -1;
  }
  return NPU_OK;
}

const npu_op_def npuX_op_cond = {.name = "cond", .tf_type = "NpuCond", .min_inputs = 1,
                                 .max_inputs = -1, .n_outputs = -1, .kind = NPUX_KIND_COND,
                                 .prec = NPUX_PREC_BLOCK, .flags = NPUX_F_NO_FOLD,
                                 .parse = parse, .infer = infer};

void npuX_cond_regions(const npuG_node *node, int *then_region, int *else_region) {
  const cond_params *p = (const cond_params *)node->params.bytes;
  *then_region = (int)p->region[0];
  *else_region = (int)p->region[1];
}

void npuX_control_regions(const npuG_node *node, int r[2]) {
  r[0] = r[1] = 0;
  const npu_op_def *def = npuX_op(node->op);
  if (def->kind == NPUX_KIND_COND) npuX_cond_regions(node, &r[0], &r[1]);
  else if (def->kind == NPUX_KIND_WHILE) r[0] = npuX_while_region(node);
}

bool npuX_within_control_regions(const npu_graph *g, const int r[2], int region) {
  for (int k = 0; k < 2; k++)
    if (r[k] && npuG_region_within(g, region, r[k])) return true;
  return false;
}
