/*
 * op_unpack.c — unpack: x cut along one axis into its slices, that axis removed (TensorFlow
 * Unpack, tf.unstack).  Attributes axis (default 0; also positional: npu.unpack(x, 1)), in
 * [-rank, rank), and num (optional: the number of outputs, x's size along the axis; required
 * when that size is not known when the graph is built, since a node's output count is fixed
 * then).  At most 16 outputs (NPUX_MAX_OUTPUTS).  Lua: a list of outputs.  Any dtype.  Gray
 * list.  Kernel: npuK_split with sizes 1 (output pointers in scratch).
 * Gradient: the dys packed along the axis (zeros for outputs without one).
 */
#include "ops/grad.h"

typedef struct unpack_params {
  int64_t axis, num; /* num -1: x's dim */
} unpack_params;
_Static_assert(sizeof(unpack_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  unpack_params *p = params;
  p->num = -1;
  npu_status st = npuX_attr_int(ic, "axis", &p->axis);
  if (!st) st = npuX_attr_int(ic, "num", &p->num);
  if (st) return st;
  if (npuX_attr_find(ic, "num") && p->num < 0)
    return npuX_error(ic, NPU_ERR_ARG, "num %lld must be >= 0", (long long)p->num);
  if (p->num > NPUX_MAX_OUTPUTS)
    return npuX_error(ic, NPU_ERR_UNSUPPORTED, "num %lld: at most %d outputs are supported",
                      (long long)p->num, NPUX_MAX_OUTPUTS);
  return NPU_OK;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const unpack_params *p = params;
  const npuG_value *x = &ic->in[0];
  char sx[96];
  int64_t num = p->num;
  npuG_value part = {.dtype = x->dtype, .ndim = -1};
  if (x->ndim == 0)
    return npuX_error(ic, NPU_ERR_SHAPE, "cannot unpack a scalar (input %s)", npuX_shape(sx, x));
  if (x->ndim > 0) {
    int axis;
    npu_status st = npuX_axis(ic, p->axis, x->ndim, &axis);
    if (st) return st;
    int64_t dim = x->shape[axis];
    if (num >= 0 && dim >= 0 && num != dim)
      return npuX_error(ic, NPU_ERR_SHAPE, "num %lld does not match dimension %d of input %s",
                        (long long)num, axis, npuX_shape(sx, x));
    if (num < 0) num = dim;
    part.ndim = x->ndim - 1;
    for (int d = 0, k = 0; d < x->ndim; d++)
      if (d != axis) part.shape[k++] = x->shape[d];
  }
  if (num < 0)
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "the size along axis %lld of input %s is unknown: give attribute 'num' "
                      "(the number of outputs)",
                      (long long)p->axis, npuX_shape(sx, x));
  if (num > NPUX_MAX_OUTPUTS)
    return npuX_error(ic, NPU_ERR_UNSUPPORTED,
                      "input %s has %lld slices along axis %lld: at most %d outputs are "
                      "supported",
                      npuX_shape(sx, x), (long long)num, (long long)p->axis, NPUX_MAX_OUTPUTS);
  ic->n_outputs = (int)num;
  for (int i = 0; i < ic->n_outputs; i++) ic->out[i] = part;
  return NPU_OK;
}

static size_t scratch_size(const npuX_call *c) {
  return (size_t)c->node->n_outputs * (sizeof(int64_t) + sizeof(void *)) + 1;
}

static npu_status run(const npuX_call *c) {
  const unpack_params *p = c->params;
  const npu_tensor *x = c->in[0];
  int axis = (int)(p->axis < 0 ? p->axis + x->ndim : p->axis);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= x->shape[d];
  for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
  int64_t *ones = c->scratch;
  void **ys = (void **)(ones + c->n_outputs);
  for (int i = 0; i < c->n_outputs; i++) {
    ones[i] = 1;
    ys[i] = c->out[i]->data;
  }
  npuK_split(c->pool, npu_dtype_size(x->dtype), c->n_outputs, outer, ones, inner, x->data, ys);
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  const unpack_params *p = (const unpack_params *)gc->params.bytes;
  int parts[NPUX_MAX_OUTPUTS];
  for (int i = 0; i < gc->n_outputs; i++)
    parts[i] = gc->dy[i] >= 0 ? gc->dy[i] : npuX_g1(gc, "zeros_like", gc->y[i]);
  npu_attr a = npuX_aint("axis", p->axis);
  gc->dx[0] = npuX_gadd(gc, "pack", gc->n_outputs, parts, 1, &a);
  return gc->status;
}

const npu_op_def npuX_op_unpack = {
    .name = "unpack", .tf_type = "Unpack", .args = "axis", .min_inputs = 1, .max_inputs = 1,
    .n_outputs = -1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer,
    .scratch_size = scratch_size, .run = run, .grad = grad};
