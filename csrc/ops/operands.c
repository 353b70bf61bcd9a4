/*
 * operands.c — attributes or constant inputs (operands.h): binding operands to attributes
 * or inputs, and reading their values at build, compile and run time.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/operands.h"

static bool is_int_dtype(npu_dtype t) {
  return t == NPU_DTYPE_I32 || t == NPU_DTYPE_I64 || t == NPU_DTYPE_I8 || t == NPU_DTYPE_U8;
}

/* Truncation without undefined behaviour for NaN and out-of-range values. */
static int64_t to_int(double v) {
  if (!(v > -9.2e18 && v < 9.2e18)) return 0;
  return (int64_t)v;
}

npu_status npuX_operands_bind(npuX_infer *ic, const char *const *names, int n, int first,
                              int n_data_after, npuX_operands *o) {
  int avail = ic->n_inputs - first - n_data_after, used = 0;
  for (int k = 0; k < NPUX_MAX_OPERANDS; k++) o->slot[k] = NPUX_OPERAND_ABSENT;
  for (int k = 0; k < n; k++) {
    if (npuX_attr_find(ic, names[k])) o->slot[k] = NPUX_OPERAND_ATTR;
    else if (used < avail) o->slot[k] = (int8_t)(first + used++);
  }
  if (used < avail) {
    char list[96] = "";
    size_t len = 0;
    for (int k = 0; k < n && len < sizeof list; k++)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", k ? ", " : "", names[k]);
    return npuX_error(ic, NPU_ERR_ARG,
                      "%d input(s) too many: after the data input(s), inputs give the operands "
                      "(%s) that are not attributes, in that order",
                      avail - used, list);
  }
  return NPU_OK;
}

npu_status npuX_operand_ints(npuX_infer *ic, const npuX_operands *o, const char *const *names,
                             int k, int64_t *v, int max, int *n, bool *known) {
  int slot = o->slot[k];
  *known = true;
  *n = 0;
  if (slot == NPUX_OPERAND_ABSENT) return NPU_OK;
  if (slot == NPUX_OPERAND_ATTR) return npuX_attr_ints(ic, names[k], v, max, n);
  const npuG_value *in = &ic->in[slot];
  char s[96];
  if (in->dtype != NPU_DTYPE_I32 && in->dtype != NPU_DTYPE_I64)
    return npuX_error(ic, NPU_ERR_DTYPE, "%s (input %d) must be int32 or int64, got %s",
                      names[k], slot + 1, npu_dtype_name(in->dtype));
  if (in->ndim > 2)
    return npuX_error(ic, NPU_ERR_SHAPE, "%s (input %d) must be a scalar, a list or a matrix, "
                      "got shape %s", names[k], slot + 1, npuX_shape(s, in));
  int64_t len = in->ndim < 0 ? -1 : npuT_numel(in->ndim, in->shape);
  for (int d = 0; d < in->ndim; d++)
    if (in->shape[d] < 0) len = -1;
  if (len > max)
    return npuX_error(ic, NPU_ERR_SHAPE, "%s (input %d) has %lld entries, at most %d allowed",
                      names[k], slot + 1, (long long)len, max);
  const npu_tensor *t = ic->const_in ? ic->const_in[slot] : NULL;
  if (!t) {
    *known = false;
    *n = (int)len;
    return NPU_OK;
  }
  *n = npuX_tensor_ints(t, v, max); /* its shape is the one checked above */
  return NPU_OK;
}

npu_status npuX_operand_scalar(npuX_infer *ic, const npuX_operands *o, const char *const *names,
                               int k, double *v, int64_t *iv, bool *is_int, bool *known) {
  int slot = o->slot[k];
  *known = true;
  if (slot == NPUX_OPERAND_ABSENT) return NPU_OK;
  if (slot == NPUX_OPERAND_ATTR) {
    const npuG_attr *a = npuX_attr_find(ic, names[k]);
    if (a->type == NPU_ATTR_INT || a->type == NPU_ATTR_BOOL) {
      *iv = a->u.i;
      *v = (double)a->u.i;
      *is_int = true;
      return NPU_OK;
    }
    if (a->type == NPU_ATTR_FLOAT) {
      *v = a->u.f;
      *iv = to_int(a->u.f);
      *is_int = false;
      return NPU_OK;
    }
    return npuX_error(ic, NPU_ERR_ARG, "attribute '%s' must be a number", names[k]);
  }
  const npuG_value *in = &ic->in[slot];
  char s[96];
  if (in->ndim > 1 || (in->ndim == 1 && in->shape[0] >= 0 && in->shape[0] != 1))
    return npuX_error(ic, NPU_ERR_SHAPE, "%s (input %d) must be a scalar, got shape %s",
                      names[k], slot + 1, npuX_shape(s, in));
  *is_int = is_int_dtype(in->dtype);
  const npu_tensor *t = ic->const_in ? ic->const_in[slot] : NULL;
  if (!t) {
    *known = false;
    return NPU_OK;
  }
  npuX_tensor_scalar(t, v, iv);
  return NPU_OK;
}

int npuX_tensor_ints(const npu_tensor *t, int64_t *v, int max) {
  if (t->numel > max) return -1;
  for (int64_t i = 0; i < t->numel; i++)
    v[i] = t->dtype == NPU_DTYPE_I64 ? ((const int64_t *)t->data)[i]
                                     : (int64_t)((const int32_t *)t->data)[i];
  return (int)t->numel;
}

void npuX_tensor_scalar(const npu_tensor *t, double *v, int64_t *iv) {
  if (t->dtype == NPU_DTYPE_I64) {
    *iv = ((const int64_t *)t->data)[0];
    *v = (double)*iv;
  } else {
    *v = npu_tensor_get(t, 0);
    *iv = to_int(*v);
  }
}

int64_t npuX_run_axis(const npuX_call *c, const npuX_operands *o, int k, int64_t attr,
                      const npu_tensor *x, int64_t *outer, int64_t *inner) {
  int64_t axis = attr;
  if (o->slot[k] >= 0) {
    double v;
    npuX_tensor_scalar(c->in[o->slot[k]], &v, &axis);
  }
  if (axis < 0) axis += x->ndim;
  *outer = 1, *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= x->shape[d];
  for (int d = (int)axis + 1; d < x->ndim; d++) *inner *= x->shape[d];
  return axis;
}

/* ---- block_shape + (before, after) pairs: space_to_batch_nd, batch_to_space_nd ---- */

#define M_MAX NPUX_BLOCK_M_MAX
_Static_assert(sizeof(npuX_block_params) <= sizeof(npuG_params), "params too big");

npu_status npuX_block_parse(npuX_infer *ic, const char *const names[2], npuX_block_params *p) {
  npu_status st = npuX_operands_bind(ic, names, 2, 1, 0, &p->o);
  if (!st && (p->o.slot[0] == NPUX_OPERAND_ABSENT || p->o.slot[1] == NPUX_OPERAND_ABSENT))
    st = npuX_error(ic, NPU_ERR_ARG, "block_shape and %s are required", names[1]);
  if (!st && p->o.slot[0] == NPUX_OPERAND_ATTR)
    st = npuX_attr_ints(ic, names[0], p->block, M_MAX, &p->n_block);
  if (!st && p->o.slot[1] == NPUX_OPERAND_ATTR)
    st = npuX_attr_ints(ic, names[1], p->pads, 2 * M_MAX, &p->n_pads);
  return st;
}

/* The operands' values; *m the number of spatial dims (-1 unknown), *known both values. */
static npu_status block_operands(npuX_infer *ic, const char *const names[2],
                                 const npuX_block_params *p, int64_t *block, int64_t *pads,
                                 int *m, bool *known) {
  int nb, np;
  bool kb, kp;
  npu_status st = npuX_operand_ints(ic, &p->o, names, 0, block, M_MAX, &nb, &kb);
  if (!st) st = npuX_operand_ints(ic, &p->o, names, 1, pads, 2 * M_MAX, &np, &kp);
  if (st) return st;
  char sb[96], sp[96];
  *known = kb && kp;
  *m = nb >= 0 ? nb : np >= 0 ? np / 2 : -1;
  if (nb >= 0 && np >= 0 && np != 2 * nb)
    return npuX_error(ic, NPU_ERR_ARG, "block_shape %s needs %d %s (before, after per "
                                       "dim), got %s",
                      kb ? npuC_shape_str(sb, sizeof sb, nb, block) : "(input)", 2 * nb, names[1],
                      kp ? npuC_shape_str(sp, sizeof sp, np, pads) : "(input)");
  for (int i = 0; kb && i < nb; i++)
    if (block[i] < 1)
      return npuX_error(ic, NPU_ERR_ARG, "block_shape %s must be >= 1",
                        npuC_shape_str(sb, sizeof sb, nb, block));
  for (int i = 0; kp && i < np; i++)
    if (pads[i] < 0)
      return npuX_error(ic, NPU_ERR_ARG, "%s %s must be >= 0", names[1],
                        npuC_shape_str(sp, sizeof sp, np, pads));
  return NPU_OK;
}

npu_status npuX_block_infer(npuX_infer *ic, const char *const names[2],
                            const npuX_block_params *p, int64_t *block, int64_t *pads, int *m,
                            int64_t *prod) {
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = x->dtype, .ndim = x->ndim};
  bool known;
  npu_status st = block_operands(ic, names, p, block, pads, m, &known);
  if (st || x->ndim < 0) {
    *m = -1;
    return st;
  }
  char sx[96];
  if (*m >= 0 && x->ndim < *m + 1)
    return npuX_error(ic, NPU_ERR_SHAPE, "input %s needs a batch dim and %d spatial dims",
                      npuX_shape(sx, x), *m);
  for (int d = 0; d < x->ndim; d++) y->shape[d] = d > *m ? x->shape[d] : -1;
  if (!known) *m = -1;
  *prod = 1;
  for (int i = 0; i < *m; i++) *prod *= block[i];
  return NPU_OK;
}

int npuX_block_values(const npuX_call *c, const npuX_block_params *p, int64_t *block,
                      int64_t *pads, int64_t *inner) {
  const npu_tensor *x = c->in[0];
  int m = p->n_block;
  if (p->o.slot[0] >= 0) m = npuX_tensor_ints(c->in[p->o.slot[0]], block, M_MAX);
  else memcpy(block, p->block, sizeof p->block);
  if (p->o.slot[1] >= 0) npuX_tensor_ints(c->in[p->o.slot[1]], pads, 2 * M_MAX);
  else memcpy(pads, p->pads, sizeof p->pads);
  *inner = 1;
  for (int d = m + 1; d < x->ndim; d++) *inner *= x->shape[d];
  return m;
}
