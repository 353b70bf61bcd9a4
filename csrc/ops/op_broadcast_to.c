/*
 * op_broadcast_to.c — broadcast_to: x broadcast to `shape` (TensorFlow BroadcastTo,
 * tf.broadcast_to).  Operand shape (ints >= 0): attribute (also positional:
 * npu.broadcast_to(x, {2, 3})) or TF's trailing input 2 (operands.h; known by compile time).
 * NumPy's rule one way: x's dims aligned to the right of shape, each 1 or equal to shape's;
 * x's rank at most shape's.  y has exactly `shape`.  Any dtype.  Gray list: moves data.
 * Kernel: npuK_broadcast_to (movement.c), x read with stride 0 along the broadcast axes.
 * Gradient (TensorFlow's _BroadcastToGrad): dy summed over the broadcast axes, back to x's
 * shape (npuX_greduce_to); none for a shape input.
 */
#include "ops/grad.h"
#include "ops/operands.h"

static const char *const operand_names[] = {"shape"};

typedef struct broadcast_to_params {
  npuX_operands o;
  int n;
  int64_t shape[NPU_MAX_DIMS];
} broadcast_to_params;
_Static_assert(sizeof(broadcast_to_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  broadcast_to_params *p = params;
  npu_status st = npuX_operands_bind(ic, operand_names, 1, 1, 0, &p->o);
  if (st) return st;
  if (p->o.slot[0] == NPUX_OPERAND_ABSENT)
    return npuX_error(ic, NPU_ERR_ARG, "shape is required (attribute or input 2)");
  if (p->o.slot[0] == NPUX_OPERAND_ATTR)
    st = npuX_attr_ints(ic, "shape", p->shape, NPU_MAX_DIMS, &p->n);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const broadcast_to_params *p = params;
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = x->dtype, .ndim = -1};
  int64_t s[NPU_MAX_DIMS];
  int n;
  bool known;
  npu_status st = npuX_operand_ints(ic, &p->o, operand_names, 0, s, NPU_MAX_DIMS, &n, &known);
  if (st) return st;
  y->ndim = n;
  for (int i = 0; i < n; i++) y->shape[i] = known ? s[i] : -1;
  if (!known) return NPU_OK;
  char sx[96], ss[96];
  for (int i = 0; i < n; i++)
    if (s[i] < 0)
      return npuX_error(ic, NPU_ERR_ARG, "shape %s must be >= 0", npuC_shape_str(ss, sizeof ss, n, s));
  if (x->ndim < 0) return NPU_OK;
  bool ok = x->ndim <= n;
  for (int i = 0; ok && i < x->ndim; i++) {
    int64_t d = x->shape[x->ndim - 1 - i], t = s[n - 1 - i];
    ok = d < 0 || d == 1 || d == t;
  }
  if (!ok)
    return npuX_error(ic, NPU_ERR_SHAPE, "%s cannot be broadcast to %s", npuX_shape(sx, x),
                      npuC_shape_str(ss, sizeof ss, n, s));
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  int64_t strides[NPU_MAX_DIMS], s = 1;
  for (int i = y->ndim - 1; i >= 0; i--) {
    int j = i - (y->ndim - x->ndim);
    int64_t d = j >= 0 ? x->shape[j] : 1;
    if (d != 1 && d != y->shape[i])
      return npuC_error(c->ctx, NPU_ERR_SHAPE, "broadcast_to '%s': input does not fit",
                        c->node->name);
    strides[i] = d == 1 ? 0 : s;
    s *= d;
  }
  if (y->numel)
    npuK_broadcast_to(c->pool, npu_dtype_size(y->dtype), y->ndim, y->shape, strides, x->data,
                      y->data);
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  gc->dx[0] = npuX_greduce_to(gc, gc->dy[0], gc->x[0]);
  return gc->status;
}

const npu_op_def npuX_op_broadcast_to = {
    .name = "broadcast_to", .tf_type = "BroadcastTo", .args = "shape", .min_inputs = 1,
    .max_inputs = 2, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_MOVES,
    .parse = parse, .infer = infer, .run = run, .grad = grad, .tf_const_inputs = "shape"};
