/*
 * op_broadcast_like.c — broadcast_like: x broadcast to the shape of `like` (input 2, whose
 * values are not read), the step gradients take to undo a reduction or to make "ones like y".
 * Attributes: axes (ints, negative from the end; absent: every axis) — the axes of `like`
 * that x is a reduction over: x has like's rank minus those axes (dims dropped), or like's rank
 * with size 1 there (kept); an empty list means plain NumPy broadcasting (x's dims aligned to
 * the right); mean (bool, default false): divide by the number of elements reduced
 * (numel(like) / numel(x)), reduce_mean's gradient.  Any dtype (mean: f32, f64).
 * Gray list: moves data (mean: one rounding per element).
 * Gradient: dy summed (mean: averaged) over the broadcast axes, back to x's shape; none for
 * `like`, whose values are not read.
 */
#include "ops/grad.h"

typedef struct broadcast_params {
  bool all_axes, mean;
  int n_axes;
  int64_t axes[NPU_MAX_DIMS];
} broadcast_params;
_Static_assert(sizeof(broadcast_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  broadcast_params *p = params;
  p->all_axes = npuX_attr_find(ic, "axes") == NULL;
  npu_status st = npuX_attr_ints(ic, "axes", p->axes, NPU_MAX_DIMS, &p->n_axes);
  if (!st) st = npuX_attr_bool(ic, "mean", &p->mean);
  return st;
}

/* x's dims laid out in like's rank (1 where x lacks an axis); -1 when x does not fit. */
static int view_of(const broadcast_params *p, uint32_t mask, int x_ndim, const int64_t *x_shape,
                   int like_ndim, int64_t *view) {
  int n_masked = 0;
  for (int i = 0; i < like_ndim; i++) n_masked += (mask >> i) & 1;
  if (x_ndim == like_ndim) {
    for (int i = 0; i < x_ndim; i++) view[i] = x_shape[i];
  } else if (!p->all_axes && p->n_axes == 0 && x_ndim < like_ndim) {
    for (int i = 0; i < like_ndim; i++) {
      int j = i - (like_ndim - x_ndim);
      view[i] = j >= 0 ? x_shape[j] : 1;
    }
  } else if (x_ndim == like_ndim - n_masked) {
    for (int i = 0, j = 0; i < like_ndim; i++) view[i] = (mask >> i) & 1 ? 1 : x_shape[j++];
  } else
    return -1;
  return 0;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype floats[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_COUNT};
  const broadcast_params *p = params;
  const npuG_value *x = &ic->in[0], *like = &ic->in[1];
  if (p->mean) {
    npu_status st = npuX_check_dtype(ic, 0, floats);
    if (st) return st;
  }
  ic->n_outputs = 1;
  ic->out[0] = *like;
  ic->out[0].dtype = x->dtype;
  if (x->ndim < 0 || like->ndim < 0) return NPU_OK;
  uint32_t mask;
  npu_status st = npuX_axes_mask(ic, p->n_axes, p->axes, p->all_axes, like->ndim, &mask);
  if (st) return st;
  int64_t view[NPU_MAX_DIMS];
  char sx[96], sl[96];
  bool ok = view_of(p, mask, x->ndim, x->shape, like->ndim, view) == 0;
  for (int i = 0; ok && i < like->ndim; i++)
    ok = view[i] == 1 || view[i] < 0 || like->shape[i] < 0 || view[i] == like->shape[i];
  if (!ok)
    return npuX_error(ic, NPU_ERR_SHAPE, "%s cannot be broadcast to %s", npuX_shape(sx, x),
                      npuX_shape(sl, like));
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const broadcast_params *p = c->params;
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  uint32_t mask = p->all_axes ? (uint32_t)((1u << y->ndim) - 1) : 0; /* checked by infer */
  for (int i = 0; i < p->n_axes; i++) mask |= 1u << (p->axes[i] < 0 ? p->axes[i] + y->ndim : p->axes[i]);
  int64_t view[NPU_MAX_DIMS], strides[NPU_MAX_DIMS], s = 1;
  if (view_of(p, mask, x->ndim, x->shape, y->ndim, view))
    return npuC_error(c->ctx, NPU_ERR_SHAPE, "broadcast_like '%s': input does not fit",
                      c->node->name);
  for (int i = y->ndim - 1; i >= 0; i--) {
    strides[i] = view[i] == 1 && y->shape[i] != 1 ? 0 : s;
    s *= view[i];
  }
  if (y->numel) npuK_broadcast_to(c->pool, npu_dtype_size(y->dtype), y->ndim, y->shape, strides, x->data, y->data);
  if (p->mean && y->numel && x->numel) {
    double scale = (double)x->numel / (double)y->numel;
    if (y->dtype == NPU_DTYPE_F64) npuK_scale_f64(c->pool, y->numel, scale, y->data, y->data);
    else npuK_scale_f32(c->pool, y->numel, scale, y->data, y->data);
  }
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  const broadcast_params *p = (const broadcast_params *)gc->params.bytes;
  const char *op = p->mean ? "reduce_mean" : "reduce_sum";
  if (!p->all_axes && p->n_axes == 0) { /* plain NumPy broadcasting */
    gc->dx[0] = p->mean ? npuX_greduce_mean_to(gc, gc->dy[0], gc->x[0])
                        : npuX_greduce_to(gc, gc->dy[0], gc->x[0]);
    return gc->status;
  }
  npu_attr a = npuX_aints("axis", p->axes, p->n_axes);
  int r = npuX_gadd(gc, op, 1, &gc->dy[0], p->all_axes ? 0 : 1, &a);
  gc->dx[0] = npuX_greshape_to(gc, r, gc->x[0]);
  return gc->status;
}

const npu_op_def npuX_op_broadcast_like = {
    .name = "broadcast_like", .tf_type = "BroadcastLike", .min_inputs = 2, .max_inputs = 2,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_LIKE_LAST, .parse = parse,
    .infer = infer, .run = run, .grad = grad};
