/*
 * op_while.c — while: TensorFlow's tf.while_loop as one node.  Inputs {x_1..x_n, pred,
 * r_1..r_n}: x_i the loop variables' initial values; pred (a bool scalar) and r_i (the body's
 * results, the variables' next values) are values of the loop's region (attribute region),
 * computed from its loop_var nodes (op_loop_var.c).  Runs: v = x; while pred(v) and fewer than
 * maximum_iterations (attribute, default -1: no bound) iterations ran: v = r(v); outputs v.
 * Output i has x_i's dtype and its loop variable's shape (the shape invariant).  The body must
 * keep each variable's dtype, and its shape where the invariant fixes a dimension.
 */
#include <string.h>

#include "ops/ops.h"

typedef struct while_params {
  int64_t region;
  int64_t max_iterations;
} while_params;
_Static_assert(sizeof(while_params) <= sizeof(npuG_params), "params too big");

int npuX_find_loop_var(const npu_graph *g, int region, int before, int i) {
  for (int id = 0; id < before && id < g->n_nodes; id++) {
    const npuG_node *n = &g->nodes[id];
    if (n->region == region && npuX_op(n->op)->kind == NPUX_KIND_LOOP_VAR &&
        npuX_loop_var_index(n) == i)
      return id;
  }
  return -1;
}

static npu_status parse(npuX_infer *ic, void *params) {
  while_params *p = params;
  p->region = 0;
  p->max_iterations = -1;
  npu_status st = npuX_attr_int(ic, "region", &p->region);
  if (!st) st = npuX_attr_int(ic, "maximum_iterations", &p->max_iterations);
  if (!st && p->max_iterations < -1)
    st = npuX_error(ic, NPU_ERR_ARG, "attribute 'maximum_iterations' must be >= 0 (or -1: no "
                    "bound), got %lld", (long long)p->max_iterations);
  if (!st && ic->n_inputs % 2 == 0)
    st = npuX_error(ic, NPU_ERR_ARG, "takes the initial values, pred and as many body results "
                    "(an odd number of inputs), got %d", ic->n_inputs);
  if (!st && (ic->n_inputs - 1) / 2 > NPUX_MAX_OUTPUTS)
    st = npuX_error(ic, NPU_ERR_ARG, "at most %d loop variables, got %d", NPUX_MAX_OUTPUTS,
                    (ic->n_inputs - 1) / 2);
  if (!st) st = npuX_check_region(ic, "region", p->region);
  ic->n_outputs = (ic->n_inputs - 1) / 2;
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const while_params *p = params;
  const npu_graph *g = ic->graph;
  int n = ic->n_outputs;
  const npuG_value *pred = &ic->in[n];
  char a[96], b[96];
  if (pred->dtype != NPU_DTYPE_BOOL || pred->ndim > 0)
    return npuX_error(ic, NPU_ERR_DTYPE, "the loop condition must be a bool scalar, got %s %s",
                      npu_dtype_name(pred->dtype), npuX_shape(a, pred));
  if (ic->building) {
    npu_status st = npuX_check_result(ic, n, p->region, "the loop condition");
    for (int i = 0; !st && i < n; i++) st = npuX_check_result(ic, n + 1 + i, p->region, "a body result");
    if (st) return st;
  }
  for (int i = 0; i < n; i++) {
    const npuG_value *x = &ic->in[i], *r = &ic->in[n + 1 + i];
    int var = npuX_find_loop_var(g, (int)p->region, g->n_nodes, i);
    if (var < 0)
      return npuX_error(ic, NPU_ERR_ARG, "the loop region has no loop_var with index %d", i);
    const npuG_node *vn = &g->nodes[var];
    npuG_value want = g->values[vn->first_output];
    if (!npuX_loop_var_has_shape(vn)) { /* no invariant: the initial value's shape */
      want.ndim = x->ndim;
      memcpy(want.shape, x->shape, sizeof want.shape);
    }
    if (x->dtype != want.dtype || r->dtype != want.dtype)
      return npuX_error(ic, NPU_ERR_DTYPE, "loop variable %d ('%s') is %s, but its initial value "
                        "is %s and the body returns %s", i + 1, vn->name,
                        npu_dtype_name(want.dtype), npu_dtype_name(x->dtype),
                        npu_dtype_name(r->dtype));
    if (!npuG_shape_fits(&want, x->ndim, x->shape))
      return npuX_error(ic, NPU_ERR_SHAPE, "loop variable %d ('%s'): the initial value %s does not "
                        "fit the shape invariant %s", i + 1, vn->name, npuX_shape(a, x),
                        npuX_shape(b, &want));
    if (!npuG_shape_fits(&want, r->ndim, r->shape))
      return npuX_error(ic, NPU_ERR_SHAPE, "loop variable %d ('%s') enters the body as %s but "
                        "the body returns %s (give shape_invariants with -1 where it may change)",
                        i + 1, vn->name, npuX_shape(a, &want), npuX_shape(b, r));
    ic->out[i] = want;
  }
  return NPU_OK;
}

const npu_op_def npuX_op_while = {.name = "while", .tf_type = "NpuWhile", .min_inputs = 1,
                                  .max_inputs = -1, .n_outputs = -1, .kind = NPUX_KIND_WHILE,
                                  .prec = NPUX_PREC_BLOCK, .flags = NPUX_F_NO_FOLD,
                                  .parse = parse, .infer = infer};

int npuX_while_region(const npuG_node *node) {
  return (int)((const while_params *)node->params.bytes)->region;
}
int64_t npuX_while_max_iterations(const npuG_node *node) {
  return ((const while_params *)node->params.bytes)->max_iterations;
}
