/*
 * op_expand_dims.c — expand_dims: x with a new axis of size 1 inserted at position axis
 * (TensorFlow ExpandDims).  Operand axis (in [-(rank + 1), rank], negative from the end):
 * attribute (also positional: npu.expand_dims(x, 0)) or TF's trailing input 2 ("dim" there;
 * operands.h).  Any dtype.  Gray list.  Kernel: a copy of nbytes (the same elements; none
 * when memory planning aliased y to x: compile/memory.c).
 * Gradient: dy reshaped to x's shape.
 */
#include "ops/grad.h"
#include "ops/operands.h"

static const char *const operand_names[] = {"axis"};

typedef struct expand_dims_params {
  npuX_operands o;
} expand_dims_params;
_Static_assert(sizeof(expand_dims_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  expand_dims_params *p = params;
  npu_status st = npuX_operands_bind(ic, operand_names, 1, 1, 0, &p->o);
  if (!st && p->o.slot[0] == NPUX_OPERAND_ABSENT)
    st = npuX_error(ic, NPU_ERR_ARG, "axis is required (attribute or input 2)");
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const expand_dims_params *p = params;
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = x->dtype, .ndim = x->ndim < 0 ? -1 : x->ndim + 1};
  int64_t axis = 0;
  double v;
  bool known, is_int = true;
  npu_status st = npuX_operand_scalar(ic, &p->o, operand_names, 0, &v, &axis, &is_int, &known);
  if (st) return st;
  if (!is_int) return npuX_error(ic, NPU_ERR_DTYPE, "axis must be an integer");
  if (x->ndim < 0) return NPU_OK;
  char sx[96];
  if (x->ndim + 1 > NPU_MAX_DIMS)
    return npuX_error(ic, NPU_ERR_SHAPE, "input %s: the result would exceed %d dims",
                      npuX_shape(sx, x), NPU_MAX_DIMS);
  if (!known) {
    for (int d = 0; d < y->ndim; d++) y->shape[d] = -1;
    return NPU_OK;
  }
  int a;
  if ((st = npuX_axis(ic, axis, x->ndim + 1, &a))) return st;
  for (int d = 0, k = 0; d < y->ndim; d++) y->shape[d] = d == a ? 1 : x->shape[k++];
  return NPU_OK;
}

const npu_op_def npuX_op_expand_dims = {
    .name = "expand_dims", .tf_type = "ExpandDims", .args = "axis", .min_inputs = 1,
    .max_inputs = 2, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer,
    .run = npuX_copy_run, .grad = npuX_reshape_grad, .tf_const_inputs = "axis",
    .flags = NPUX_F_MOVES};
