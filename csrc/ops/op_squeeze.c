/*
 * op_squeeze.c — squeeze: x without axes of size 1 (TensorFlow Squeeze).  Attribute
 * squeeze_dims (TensorFlow's name) or axis (tf.squeeze's; also positional: npu.squeeze(x,
 * {1})): the axes to remove, negative from the end, each of size 1; absent or empty: every
 * axis of size 1 (then a -1 dim leaves the rank unknown until the compile).  Any dtype.  Gray
 * list.  Kernel: a copy of nbytes (none when memory planning aliased y
 * to x: compile/memory.c).  Gradient: dy reshaped to x's shape.
 */
#include "ops/grad.h"

typedef struct squeeze_params {
  int n;
  int64_t axes[NPU_MAX_DIMS];
} squeeze_params;
_Static_assert(sizeof(squeeze_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  squeeze_params *p = params;
  bool a = npuX_attr_find(ic, "axis") != NULL;
  if (a && npuX_attr_find(ic, "squeeze_dims"))
    return npuX_error(ic, NPU_ERR_ARG, "give 'axis' or 'squeeze_dims', not both");
  return npuX_attr_ints(ic, a ? "axis" : "squeeze_dims", p->axes, NPU_MAX_DIMS, &p->n);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const squeeze_params *p = params;
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = x->dtype, .ndim = -1};
  if (x->ndim < 0) return NPU_OK;
  uint32_t mask = 0;
  char sx[96];
  if (p->n == 0) {
    for (int d = 0; d < x->ndim; d++) {
      if (x->shape[d] < 0) return NPU_OK; /* may or may not be 1: rank unknown */
      if (x->shape[d] == 1) mask |= 1u << d;
    }
  } else {
    npu_status st = npuX_axes_mask(ic, p->n, p->axes, false, x->ndim, &mask);
    if (st) return st;
    for (int d = 0; d < x->ndim; d++)
      if ((mask >> d & 1) && x->shape[d] >= 0 && x->shape[d] != 1)
        return npuX_error(ic, NPU_ERR_SHAPE, "cannot squeeze axis %d of size %lld (input %s)",
                          d, (long long)x->shape[d], npuX_shape(sx, x));
  }
  y->ndim = 0;
  for (int d = 0; d < x->ndim; d++)
    if (!(mask >> d & 1)) y->shape[y->ndim++] = x->shape[d];
  return NPU_OK;
}

const npu_op_def npuX_op_squeeze = {
    .name = "squeeze", .tf_type = "Squeeze", .args = "axis", .min_inputs = 1, .max_inputs = 1,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer, .run = npuX_copy_run,
    .grad = npuX_reshape_grad, .flags = NPUX_F_MOVES};
