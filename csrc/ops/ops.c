/*
 * ops.c — the op table and npu_graph_add_op: validate arity, copy attributes, parse them into
 * params, infer output dtypes and shapes, append the node.  A failing add changes nothing.
 */
#include <string.h>

#include "ops/grad.h"
#include "ops/ops.h"

static const npu_op_def *const op_table[] = {
#define NPU_OP(name) &npuX_op_##name,
#include "ops/ops.def"
#undef NPU_OP
};
_Static_assert(npu_countof(op_table) == NPUX_OP_COUNT, "op table and enum disagree");

const npu_op_def *npuX_op(int id) {
  return id >= 0 && id < NPUX_OP_COUNT ? op_table[id] : NULL;
}

int npuX_find(const char *name) {
  for (int i = 0; i < NPUX_OP_COUNT; i++)
    if (strcmp(op_table[i]->name, name) == 0) return i;
  return -1;
}

int npuX_find_tf(const char *tf_type) {
  for (int i = 0; i < NPUX_OP_COUNT; i++)
    if (strcmp(op_table[i]->tf_type, tf_type) == 0) return i;
  return -1;
}

int npu_op_count(void) { return NPUX_OP_COUNT; }
const char *npu_op_name(int i) { return i >= 0 && i < NPUX_OP_COUNT ? op_table[i]->name : NULL; }

/* The public kinds and precision lists are the internal ones, value for value. */
_Static_assert((int)NPU_OP_KIND_LOOP_VAR == (int)NPUX_KIND_LOOP_VAR &&
                   (int)NPU_OP_KIND_VARIABLE == (int)NPUX_KIND_VARIABLE &&
                   (int)NPU_OP_PRECISION_BLOCK == (int)NPUX_PREC_BLOCK,
               "npu_op_kind / npu_op_precision and npuX_kind / npuX_prec disagree");

npu_status npu_op_get_info(int i, npu_op_info *out) {
  static const char *const kinds[] = {
      [NPUX_KIND_KERNEL] = "kernel",     [NPUX_KIND_PLACEHOLDER] = "placeholder",
      [NPUX_KIND_CONST] = "const",       [NPUX_KIND_VARIABLE] = "variable",
      [NPUX_KIND_ASSIGN] = "assign",     [NPUX_KIND_IDENTITY] = "identity",
      [NPUX_KIND_NO_OP] = "no_op",       [NPUX_KIND_LOOP] = "loop",
      [NPUX_KIND_GET_NEXT] = "get_next", [NPUX_KIND_COND] = "cond",
      [NPUX_KIND_WHILE] = "while",       [NPUX_KIND_LOOP_VAR] = "loop_var"};
  _Static_assert(npu_countof(kinds) == NPU_OP_KIND_COUNT, "a kind without a name");
  static const char *const precs[] = {"gray", "trust", "block"};
  if (!out) return NPU_ERR_ARG;
  memset(out, 0, sizeof *out);
  const npu_op_def *d = npuX_op(i);
  if (!d) return NPU_ERR_ARG;
  out->name = d->name;
  out->tf_type = d->tf_type;
  out->args = d->args;
  out->min_inputs = d->min_inputs;
  out->max_inputs = d->max_inputs;
  out->n_outputs = d->n_outputs;
  out->kind = (npu_op_kind)d->kind;
  out->kind_name = kinds[d->kind];
  out->precision = (npu_op_precision)d->prec;
  out->precision_name = precs[d->prec];
  out->differentiable = d->grad != NULL;
  out->stateful = (d->flags & NPUX_F_NO_FOLD) != 0;
  return NPU_OK;
}

int npu_op_find(const char *name) {
  if (!name) return -1;
  int i = npuX_find(name);
  return i >= 0 ? i : npuX_find_tf(name);
}

const char *npu_graph_node_op(const npu_graph *g, int node) {
  if (node < 0 || node >= g->n_nodes) return NULL;
  return op_table[g->nodes[node].op]->name;
}

static npu_status copy_attrs(npu_context *ctx, int n, const npu_attr *src, npuG_attr **out) {
  *out = NULL;
  if (n == 0) return NPU_OK;
  npuG_attr *a = npuC_calloc(ctx, (size_t)n, sizeof *a);
  if (!a) return NPU_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    const npu_attr *s = &src[i];
    npuG_attr *d = &a[i];
    d->type = s->type;
    bool ok = s->name && (d->name = npuC_strdup(ctx, s->name));
    if (!s->name) {
      npuG_free_attrs(ctx, a, n);
      return npuC_error(ctx, NPU_ERR_ARG, "attribute %d has no name", i);
    }
    switch (s->type) {
    case NPU_ATTR_INT: case NPU_ATTR_BOOL: case NPU_ATTR_DTYPE: d->u.i = s->u.i; break;
    case NPU_ATTR_FLOAT: d->u.f = s->u.f; break;
    case NPU_ATTR_STRING: ok = ok && s->u.s && (d->u.s = npuC_strdup(ctx, s->u.s)); break;
    case NPU_ATTR_INTS:
      if (s->u.ints.n < 0 || (s->u.ints.n && !s->u.ints.v)) ok = false;
      else if (s->u.ints.n) {
        ok = ok && (d->u.ints.v = npuC_alloc(ctx, (size_t)s->u.ints.n * sizeof(int64_t)));
        if (ok) memcpy(d->u.ints.v, s->u.ints.v, (size_t)s->u.ints.n * sizeof(int64_t));
      }
      d->u.ints.n = ok ? s->u.ints.n : 0;
      break;
    case NPU_ATTR_FLOATS:
      if (s->u.floats.n < 0 || (s->u.floats.n && !s->u.floats.v)) ok = false;
      else if (s->u.floats.n) {
        ok = ok && (d->u.floats.v = npuC_alloc(ctx, (size_t)s->u.floats.n * sizeof(double)));
        if (ok) memcpy(d->u.floats.v, s->u.floats.v, (size_t)s->u.floats.n * sizeof(double));
      }
      d->u.floats.n = ok ? s->u.floats.n : 0;
      break;
    case NPU_ATTR_TENSOR:
      if (!s->u.tensor) ok = false;
      else d->u.tensor = npu_tensor_retain(s->u.tensor);
      break;
    default: ok = false; break;
    }
    if (!ok) {
      npu_status st = ctx->errmsg[0] && strstr(ctx->errmsg, "out of memory") ? NPU_ERR_NOMEM
                                                                                : NPU_ERR_ARG;
      npuG_free_attrs(ctx, a, n);
      return st == NPU_ERR_NOMEM ? st
                                 : npuC_error(ctx, NPU_ERR_ARG, "attribute '%s' is malformed",
                                              s->name ? s->name : "?");
    }
  }
  *out = a;
  return NPU_OK;
}

/* Every attribute given must be one the op looked up while parsing and inferring: a misspelt
   one ("strdes") would otherwise be ignored.  Names starting with '_' are the graph's own
   (TensorFlow's convention for internal attributes) and pass. */
static npu_status check_attrs_read(npuX_infer *ic, int n_attrs, const npu_attr *attrs,
                                   bool only_misspelt) {
  if (ic->n_read < 0) return NPU_OK;
  for (int i = 0; i < n_attrs; i++) {
    const char *name = attrs[i].name;
    if (!name || name[0] == '_') continue;
    npuC_nearest near;
    npuC_nearest_init(&near, name);
    bool known = false;
    for (int k = 0; k < ic->n_read && !known; k++) {
      known = strcmp(ic->read[k], name) == 0;
      npuC_nearest_try(&near, ic->read[k]);
    }
    if (known) continue;
    const char *best = npuC_nearest_result(&near);
    if (best) return npuX_error(ic, NPU_ERR_ARG, "unknown attribute '%s' (did you mean '%s'?)", name, best);
    if (only_misspelt) continue;
    if (ic->n_read == 0) return npuX_error(ic, NPU_ERR_ARG, "unknown attribute '%s' (%s takes none)", name, ic->op_name);
    char list[256];
    size_t len = 0;
    list[0] = 0;
    for (int k = 0; k < ic->n_read && len < sizeof list; k++)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", k ? ", " : "", ic->read[k]);
    return npuX_error(ic, NPU_ERR_ARG, "unknown attribute '%s' (%s takes %s)", name, ic->op_name, list);
  }
  return NPU_OK;
}

npu_status npu_graph_add_op(npu_graph *g, const char *op, const char *name, int n_inputs,
                            const int *inputs, int n_attrs, const npu_attr *attrs,
                            int *node_out) {
  return npuX_add_op(g, op, name, n_inputs, inputs, n_attrs, attrs, node_out, true);
}

npu_status npuX_add_op(npu_graph *g, const char *op, const char *name, int n_inputs,
                       const int *inputs, int n_attrs, const npu_attr *attrs, int *node_out,
                       bool strict) {
  if (node_out) *node_out = -1;
  if (!g) return NPU_ERR_ARG;
  npu_context *ctx = g->ctx;
  if (!op || !node_out) return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_add_op: NULL argument");
  int id = npuX_find(op);
  if (id < 0) {
    npuC_nearest near;
    npuC_nearest_init(&near, op);
    for (int i = 0; i < NPUX_OP_COUNT; i++) npuC_nearest_try(&near, op_table[i]->name);
    const char *best = npuC_nearest_result(&near);
    return best ? npuC_error(ctx, NPU_ERR_NOT_FOUND, "unknown op '%s' (did you mean '%s'?)", op, best)
                : npuC_error(ctx, NPU_ERR_NOT_FOUND, "unknown op '%s'", op);
  }
  const npu_op_def *def = op_table[id];
  if (n_inputs < def->min_inputs || (def->max_inputs >= 0 && n_inputs > def->max_inputs)) {
    if (def->min_inputs == def->max_inputs)
      return npuC_error(ctx, NPU_ERR_ARG, "%s takes %d input(s), got %d", def->name,
                        def->min_inputs, n_inputs);
    return npuC_error(ctx, NPU_ERR_ARG, "%s takes at least %d input(s), got %d", def->name,
                      def->min_inputs, n_inputs);
  }
  if (n_inputs > 0 && !inputs) return npuC_error(ctx, NPU_ERR_ARG, "%s: inputs is NULL", def->name);
  if (n_attrs < 0 || (n_attrs > 0 && !attrs))
    return npuC_error(ctx, NPU_ERR_ARG, "%s: bad attribute list", def->name);
  for (int i = 0; i < n_inputs; i++)
    if (inputs[i] < 0 || inputs[i] >= g->n_values)
      return npuC_error(ctx, NPU_ERR_ARG, "%s: input %d is not a value of this graph",
                        def->name, i + 1);
  /* A value built inside a region (a cond branch, a loop) is not visible outside it; the
     control node's own inputs are checked by its infer (they include its regions' results). */
  bool control = def->kind == NPUX_KIND_COND || def->kind == NPUX_KIND_WHILE;
  for (int i = 0; i < n_inputs && !control; i++) {
    const npuG_node *src = &g->nodes[g->values[inputs[i]].node];
    if (!npuG_region_within(g, g->cur_region, src->region))
      return npuC_error(ctx, NPU_ERR_ARG,
                        "%s: input %d ('%s') was built inside a cond branch or while loop and "
                        "is not visible here: return it from the branch or loop body instead",
                        def->name, i + 1, src->name);
  }

  npuG_node node = {.op = id, .n_inputs = n_inputs, .n_attrs = n_attrs};
  npu_status st = copy_attrs(ctx, n_attrs, attrs, &node.attrs);
  if (st) return st;
  if (n_inputs) {
    node.inputs = npuC_alloc(ctx, (size_t)n_inputs * sizeof *node.inputs);
    if (!node.inputs) {
      npuG_free_attrs(ctx, node.attrs, n_attrs);
      return NPU_ERR_NOMEM;
    }
    memcpy(node.inputs, inputs, (size_t)n_inputs * sizeof *inputs);
  }
  /* Input descriptors and build-time constants for parse/infer.  Bounded by a stack buffer:
     ops with more inputs (concat of many) take the slow path through the heap. */
  npuG_value in_stack[16];
  const npu_tensor *const_stack[16];
  npuG_value *in = in_stack;
  const npu_tensor **const_in = const_stack;
  if (n_inputs > 16) {
    in = npuC_alloc(ctx, (size_t)n_inputs * sizeof *in);
    const_in = npuC_alloc(ctx, (size_t)n_inputs * sizeof *const_in);
    if (!in || !const_in) {
      st = NPU_ERR_NOMEM;
      goto fail;
    }
  }
  for (int i = 0; i < n_inputs; i++) {
    in[i] = g->values[inputs[i]];
    const npuG_node *src = &g->nodes[in[i].node];
    const npuG_attr *v = op_table[src->op]->kind == NPUX_KIND_CONST ? npuG_attr_find(src, "value")
                                                                    : NULL;
    const_in[i] = v && v->type == NPU_ATTR_TENSOR ? v->u.tensor : NULL;
  }
  npuX_infer ic = {.ctx = ctx, .graph = g, .node = &node, .op_name = def->name, .n_inputs = n_inputs,
                   .in = in, .const_in = const_in, .n_outputs = def->n_outputs,
                   .building = true};
  /* Messages during parse/infer name the node by the name it will most likely get. */
  node.name = (char *)(name ? name : def->tf_type);
  if (def->parse) st = def->parse(&ic, node.params.bytes);
  bool parsed = !st;
  if (!st && def->infer) st = def->infer(&ic, node.params.bytes);
  /* a misspelt attribute explains an inference error better than the error itself
     ({tranpose_b = true}: "inner dimensions differ"), so it is reported first */
  if (strict) {
    /* when parse failed it may not have looked everything up yet: then only a misspelling
       of a name it did look up is reported ({ksizes = ...}: "'ksize' is required") */
    npu_status unknown = check_attrs_read(&ic, n_attrs, attrs, !parsed);
    if (unknown) st = unknown;
  }
  node.name = NULL;
  if (!st && (ic.n_outputs < 0 || ic.n_outputs > NPUX_MAX_OUTPUTS))
    st = npuC_error(ctx, NPU_ERR_INTERNAL, "%s: output count %d out of range", def->name,
                    ic.n_outputs);
  if (st) goto fail;
  node.n_outputs = ic.n_outputs;
  if (def->kind == NPUX_KIND_VARIABLE) st = npuG_reserve_variable(g);
  if (!st) st = npuG_append(g, &node, name, def->tf_type, ic.out);
  if (st) goto fail;
  if (in != in_stack) {
    npuC_free(ctx, in);
    npuC_free(ctx, (void *)const_in);
  }
  *node_out = g->n_nodes - 1;
  if (def->kind == NPUX_KIND_COND) { /* its regions now belong to it */
    int t, e;
    npuX_cond_regions(&g->nodes[*node_out], &t, &e);
    g->regions[t - 1].owner = g->regions[e - 1].owner = *node_out;
  } else if (def->kind == NPUX_KIND_WHILE) {
    g->regions[npuX_while_region(&g->nodes[*node_out]) - 1].owner = *node_out;
  } else if (def->kind == NPUX_KIND_VARIABLE) { /* graph state, whoever built it */
    npuG_register_variable(g, *node_out, npuX_is_float(ic.out[0].dtype));
  } else if (def->kind == NPUX_KIND_ASSIGN) {
    npuG_note_assign(g, *node_out);
  }
  return NPU_OK;
fail:
  if (in != in_stack) {
    npuC_free(ctx, in);
    npuC_free(ctx, (void *)const_in);
  }
  npuC_free(ctx, node.inputs);
  npuG_free_attrs(ctx, node.attrs, n_attrs);
  return st;
}
