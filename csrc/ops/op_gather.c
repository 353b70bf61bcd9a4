/*
 * op_gather.c — gather: slices of params picked by indices along one axis (TensorFlow
 * GatherV2, tf.gather).  Inputs params (any dtype) and indices (int32 or int64, any shape);
 * operand axis (default 0, negative from the end): attribute (also positional:
 * npu.gather(params, indices, 1)) or TF's trailing input 3 (operands.h).  Attribute
 * batch_dims: only 0 is supported.  y's shape is params.shape[:axis] + indices.shape +
 * params.shape[axis + 1:].  An index outside [0, params.shape[axis]) is an error at run time
 * (NPU_ERR_ARG naming the index and its position), as on TensorFlow's CPU.  Gray list.
 * Kernels: npuK_gather (row copies) and npuK_gather_ref (per element).
 * Gradient (params): unsorted_segment_sum of dy over the indices into params.shape[axis]
 * segments (that size read from shape(params) when it is not known before the run), axis 0;
 * for another axis dy is transposed to bring the indices' dims first and the sum back (the
 * ranks must be known, and the axis an attribute).
 */
#include "ops/grad.h"
#include "ops/operands.h"

static const char *const operand_names[] = {"axis"};

typedef struct gather_params {
  npuX_operands o;
  int64_t axis;
} gather_params;
_Static_assert(sizeof(gather_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  gather_params *p = params;
  int64_t batch_dims = 0;
  npu_status st = npuX_operands_bind(ic, operand_names, 1, 2, 0, &p->o);
  if (!st) st = npuX_attr_int(ic, "axis", &p->axis);
  if (!st) st = npuX_attr_int(ic, "batch_dims", &batch_dims);
  if (!st && batch_dims != 0)
    st = npuX_error(ic, NPU_ERR_UNSUPPORTED, "batch_dims %lld: only 0 is supported",
                    (long long)batch_dims);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype ints[] = {NPU_DTYPE_I32, NPU_DTYPE_I64, NPU_DTYPE_COUNT};
  const gather_params *p = params;
  const npuG_value *x = &ic->in[0], *idx = &ic->in[1];
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = x->dtype, .ndim = -1};
  npu_status st = npuX_check_dtype(ic, 1, ints);
  if (st) return st;
  int64_t axis = p->axis, iv = 0;
  double v;
  bool known, is_int = true;
  if ((st = npuX_operand_scalar(ic, &p->o, operand_names, 0, &v, &iv, &is_int, &known))) return st;
  if (!is_int) return npuX_error(ic, NPU_ERR_DTYPE, "axis must be an integer");
  if (p->o.slot[0] >= 0) axis = iv;
  char sx[96], si[96];
  if (x->ndim == 0)
    return npuX_error(ic, NPU_ERR_SHAPE, "params must have rank >= 1, got %s", npuX_shape(sx, x));
  if (x->ndim < 0 || idx->ndim < 0 || !known) return NPU_OK;
  int a;
  if ((st = npuX_axis(ic, axis, x->ndim, &a))) return st;
  if (x->ndim - 1 + idx->ndim > NPU_MAX_DIMS)
    return npuX_error(ic, NPU_ERR_SHAPE, "params %s and indices %s: the result would exceed %d "
                                         "dims",
                      npuX_shape(sx, x), npuX_shape(si, idx), NPU_MAX_DIMS);
  y->ndim = 0;
  for (int d = 0; d < a; d++) y->shape[y->ndim++] = x->shape[d];
  for (int d = 0; d < idx->ndim; d++) y->shape[y->ndim++] = idx->shape[d];
  for (int d = a + 1; d < x->ndim; d++) y->shape[y->ndim++] = x->shape[d];
  return NPU_OK;
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const gather_params *p = c->params;
  const npu_tensor *x = c->in[0], *idx = c->in[1];
  int64_t outer, inner;
  int64_t axis = npuX_run_axis(c, &p->o, 0, p->axis, x, &outer, &inner);
  size_t isz = npu_dtype_size(idx->dtype);
  int64_t bad = (reference ? npuK_gather_ref : npuK_gather)(
      c->pool, npu_dtype_size(x->dtype), outer, x->shape[axis], inner, idx->numel, idx->data, isz,
      x->data, c->out[0]->data);
  if (bad < 0) return NPU_OK;
  int64_t value = isz == 8 ? ((const int64_t *)idx->data)[bad] : ((const int32_t *)idx->data)[bad];
  char sx[96];
  return npuC_error(c->ctx, NPU_ERR_ARG,
                    "gather '%s': indices[%lld] = %lld is not in [0, %lld) (params %s, axis %lld)",
                    c->node->name, (long long)bad, (long long)value, (long long)x->shape[axis],
                    npuC_shape_str(sx, sizeof sx, x->ndim, x->shape), (long long)axis);
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

/* The number of segments: params.shape[axis], a constant when known, else from shape(params). */
static int segments(npuX_grad *gc, const npuG_value *x, int a) {
  if (x->shape[a] >= 0) return npuX_gconst(gc, (double)x->shape[a], NPU_DTYPE_I64);
  int s = npuX_gadd(gc, "shape", 1, &gc->x[0], 1, (npu_attr[]){npuX_adtype("out_type", NPU_DTYPE_I64)});
  return npuX_g2(gc, "gather", s, npuX_gconst(gc, a, NPU_DTYPE_I32));
}

static npu_status grad(npuX_grad *gc) {
  const gather_params *p = (const gather_params *)gc->params.bytes;
  if (!gc->wanted[0]) return NPU_OK;
  if (p->o.slot[0] >= 0) return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "the axis must be an attribute");
  npuG_value x = npuX_gvalue(gc, gc->x[0]), idx = npuX_gvalue(gc, gc->x[1]);
  int64_t axis = p->axis;
  if (axis < 0 && x.ndim > 0) axis += x.ndim;
  if (axis != 0 && (x.ndim < 0 || idx.ndim < 0))
    return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "gathering along axis %lld needs params and "
                       "indices of known rank", (long long)p->axis);
  int a = (int)axis;
  if (a == 0) {
    if (x.ndim < 0) {
      /* rank unknown: axis 0's size from shape(params) at run time */
      x.ndim = 1, x.shape[0] = -1;
    }
    int in[3] = {gc->dy[0], gc->x[1], segments(gc, &x, 0)};
    gc->dx[0] = npuX_gadd(gc, "unsorted_segment_sum", 3, in, 0, NULL);
    return gc->status;
  }
  /* dy is x[:a] + idx + x[a+1:]: bring idx's dims first, sum, put axis a back */
  int ni = idx.ndim, ry = x.ndim - 1 + ni, k = 0;
  int64_t perm[NPU_MAX_DIMS], back[NPU_MAX_DIMS];
  for (int d = 0; d < ni; d++) perm[k++] = a + d;
  for (int d = 0; d < a; d++) perm[k++] = d;
  for (int d = a + ni; d < ry; d++) perm[k++] = d;
  k = 0;
  for (int d = 1; d <= a; d++) back[k++] = d;
  back[k++] = 0;
  for (int d = a + 1; d < x.ndim; d++) back[k++] = d;
  npu_attr pa = npuX_aints("perm", perm, ry);
  int t = npuX_gadd(gc, "transpose", 1, &gc->dy[0], 1, &pa);
  int in[3] = {t, gc->x[1], segments(gc, &x, a)};
  int u = npuX_gadd(gc, "unsorted_segment_sum", 3, in, 0, NULL);
  npu_attr pb = npuX_aints("perm", back, x.ndim);
  gc->dx[0] = npuX_gadd(gc, "transpose", 1, &u, 1, &pb);
  return gc->status;
}

const npu_op_def npuX_op_gather = {
    .name = "gather", .tf_type = "GatherV2", .args = "axis", .min_inputs = 2, .max_inputs = 3,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer, .run = run,
    .run_ref = run_ref, .grad = grad, .tf_const_inputs = "axis"};
