/*
 * helpers.c — what op files share: attribute getters, messages that name the node, dtype and
 * axis checks, NumPy broadcasting.
 */
#include <stdio.h>
#include <string.h>

#include "ops/ops.h"

npu_status npuX_output(const npuX_call *c, int i, int ndim, const int64_t *shape) {
  if (!c->resize || i < 0 || i >= c->n_outputs)
    return npuC_error(c->ctx, NPU_ERR_INTERNAL, "'%s': output %d cannot be sized at run time",
                      c->node ? c->node->name : "?", i);
  return c->resize(c, i, ndim, shape);
}

npu_status npuX_error(npuX_infer *ic, npu_status st, const char *fmt, ...) {
  char msg[NPU_ERRMSG_SIZE];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return npuC_error(ic->ctx, st, "%s '%s': %s", ic->op_name,
                    ic->node->name ? ic->node->name : "?", msg);
}

static const char *const attr_type_names[] = {
    [NPU_ATTR_INT] = "an integer",  [NPU_ATTR_FLOAT] = "a number",
    [NPU_ATTR_BOOL] = "a boolean",  [NPU_ATTR_STRING] = "a string",
    [NPU_ATTR_INTS] = "a list of integers", [NPU_ATTR_FLOATS] = "a list of numbers",
    [NPU_ATTR_TENSOR] = "a tensor", [NPU_ATTR_DTYPE] = "a dtype",
};

const npuG_attr *npuX_attr_find(npuX_infer *ic, const char *name) {
  if (ic->n_read >= 0) {
    int i = 0;
    while (i < ic->n_read && strcmp(ic->read[i], name) != 0) i++;
    if (i == ic->n_read) {
      if (ic->n_read < NPUX_MAX_READ) ic->read[ic->n_read++] = name;
      else ic->n_read = -1;
    }
  }
  return npuG_attr_find(ic->node, name);
}

static npu_status wrong_type(npuX_infer *ic, const npuG_attr *a, npu_attr_type want) {
  return npuX_error(ic, NPU_ERR_ARG, "attribute '%s' must be %s, got %s", a->name,
                    attr_type_names[want], attr_type_names[a->type]);
}

npu_status npuX_attr_int(npuX_infer *ic, const char *name, int64_t *v) {
  const npuG_attr *a = npuX_attr_find(ic, name);
  if (!a) return NPU_OK;
  if (a->type == NPU_ATTR_INT || a->type == NPU_ATTR_BOOL) *v = a->u.i;
  else if (a->type == NPU_ATTR_FLOAT && a->u.f == (double)(int64_t)a->u.f) *v = (int64_t)a->u.f;
  else return wrong_type(ic, a, NPU_ATTR_INT);
  return NPU_OK;
}

npu_status npuX_attr_bool(npuX_infer *ic, const char *name, bool *v) {
  const npuG_attr *a = npuX_attr_find(ic, name);
  if (!a) return NPU_OK;
  if (a->type != NPU_ATTR_BOOL && a->type != NPU_ATTR_INT) return wrong_type(ic, a, NPU_ATTR_BOOL);
  *v = a->u.i != 0;
  return NPU_OK;
}

npu_status npuX_attr_float(npuX_infer *ic, const char *name, double *v) {
  const npuG_attr *a = npuX_attr_find(ic, name);
  if (!a) return NPU_OK;
  if (a->type == NPU_ATTR_FLOAT) *v = a->u.f;
  else if (a->type == NPU_ATTR_INT) *v = (double)a->u.i;
  else return wrong_type(ic, a, NPU_ATTR_FLOAT);
  return NPU_OK;
}

npu_status npuX_attr_string(npuX_infer *ic, const char *name, const char **v) {
  const npuG_attr *a = npuX_attr_find(ic, name);
  if (!a) return NPU_OK;
  if (a->type != NPU_ATTR_STRING) return wrong_type(ic, a, NPU_ATTR_STRING);
  *v = a->u.s;
  return NPU_OK;
}

npu_status npuX_attr_dtype(npuX_infer *ic, const char *name, npu_dtype *v) {
  const npuG_attr *a = npuX_attr_find(ic, name);
  if (!a) return NPU_OK;
  int t = -1;
  if (a->type == NPU_ATTR_DTYPE || a->type == NPU_ATTR_INT) t = (int)a->u.i;
  else if (a->type == NPU_ATTR_STRING) {
    t = npu_dtype_from_name(a->u.s);
    if (t < 0) return npuX_error(ic, NPU_ERR_DTYPE, "unknown dtype '%s'", a->u.s);
  } else
    return wrong_type(ic, a, NPU_ATTR_DTYPE);
  if (t < 0 || t >= NPU_DTYPE_COUNT) return npuX_error(ic, NPU_ERR_DTYPE, "invalid dtype %d", t);
  *v = (npu_dtype)t;
  return NPU_OK;
}

npu_status npuX_attr_index_dtype(npuX_infer *ic, const char *name, npu_dtype *v) {
  npu_status st = npuX_attr_dtype(ic, name, v);
  if (!st && *v != NPU_DTYPE_I32 && *v != NPU_DTYPE_I64)
    st = npuX_error(ic, NPU_ERR_DTYPE, "%s must be int32 or int64, got %s", name,
                    npu_dtype_name(*v));
  return st;
}

npu_status npuX_attr_ints(npuX_infer *ic, const char *name, int64_t *v, int max, int *n) {
  const npuG_attr *a = npuX_attr_find(ic, name);
  if (!a) return NPU_OK;
  if (a->type == NPU_ATTR_INT) {
    if (max < 1) return npuX_error(ic, NPU_ERR_ARG, "attribute '%s' has too many entries", name);
    v[0] = a->u.i;
    *n = 1;
    return NPU_OK;
  }
  if (a->type != NPU_ATTR_INTS) return wrong_type(ic, a, NPU_ATTR_INTS);
  if (a->u.ints.n > max)
    return npuX_error(ic, NPU_ERR_ARG, "attribute '%s' has %d entries, at most %d allowed", name,
                      a->u.ints.n, max);
  if (a->u.ints.n) memcpy(v, a->u.ints.v, (size_t)a->u.ints.n * sizeof *v);
  *n = a->u.ints.n;
  return NPU_OK;
}

const npu_tensor *npuX_attr_tensor(npuX_infer *ic, const char *name) {
  const npuG_attr *a = npuX_attr_find(ic, name);
  return a && a->type == NPU_ATTR_TENSOR ? a->u.tensor : NULL;
}

const char *npuX_shape(char buf[96], const npuG_value *v) {
  return npuC_shape_str(buf, 96, v->ndim, v->shape);
}

void npuX_same_as_input(npuX_infer *ic, int i) {
  ic->out[0] = ic->in[i];
  ic->n_outputs = 1;
}

npu_status npuX_check_dtype(npuX_infer *ic, int i, const npu_dtype *allowed) {
  char list[128] = "";
  size_t used = 0;
  for (const npu_dtype *t = allowed; *t != NPU_DTYPE_COUNT; t++) {
    if (*t == ic->in[i].dtype) return NPU_OK;
    used += (size_t)snprintf(list + used, used < sizeof list ? sizeof list - used : 0, "%s%s",
                             used ? ", " : "", npu_dtype_name(*t));
  }
  return npuX_error(ic, NPU_ERR_DTYPE, "input %d has dtype %s; supported: %s", i + 1,
                    npu_dtype_name(ic->in[i].dtype), list);
}

npu_status npuX_check_same_dtype(npuX_infer *ic, int first) {
  for (int i = first + 1; i < ic->n_inputs; i++)
    if (ic->in[i].dtype != ic->in[first].dtype)
      return npuX_error(ic, NPU_ERR_DTYPE, "inputs %d and %d have different dtypes (%s and %s)",
                        first + 1, i + 1, npu_dtype_name(ic->in[first].dtype),
                        npu_dtype_name(ic->in[i].dtype));
  return NPU_OK;
}

npu_status npuX_axis(npuX_infer *ic, int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= rank)
    return npuX_error(ic, NPU_ERR_ARG, "axis %lld is out of range for rank %d",
                      (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return NPU_OK;
}

npu_status npuX_broadcast(npuX_infer *ic, const npuG_value *a, const npuG_value *b,
                          npuG_value *out) {
  out->dtype = a->dtype;
  if (a->ndim < 0 || b->ndim < 0) {
    out->ndim = -1;
    return NPU_OK;
  }
  int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  out->ndim = nd;
  for (int i = 0; i < nd; i++) {
    int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
    int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
    int64_t d;
    if (da == db) d = da;
    else if (da == 1) d = db;
    else if (db == 1) d = da;
    else if (da == -1) d = db; /* unknown against known: the known one, checked at compile */
    else if (db == -1) d = da;
    else {
      char sa[96], sb[96];
      return npuX_error(ic, NPU_ERR_SHAPE, "shapes %s and %s cannot be broadcast together",
                        npuX_shape(sa, a), npuX_shape(sb, b));
    }
    out->shape[i] = d;
  }
  return NPU_OK;
}

void npuX_broadcast_strides(const npu_tensor *t, int out_ndim, const int64_t *out_dims,
                            int64_t *strides) {
  int64_t stride = 1;
  for (int i = out_ndim - 1; i >= 0; i--) {
    int it = i - (out_ndim - t->ndim);
    if (it < 0) {
      strides[i] = 0;
      continue;
    }
    strides[i] = t->shape[it] == 1 && out_dims[i] != 1 ? 0 : stride;
    stride *= t->shape[it];
  }
}
