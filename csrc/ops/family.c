/*
 * family.c — shape rules and kernel entries shared by op families: elementwise binary ops
 * with NumPy broadcasting (add, sub, mul, ...), elementwise unary ops (relu, exp, ...),
 * reductions over axes (reduce_sum, reduce_mean, reduce_max; argmax borrows the axis rules)
 * and row-wise normalisations (softmax, log_softmax).  Each op still has its own op_<name>.c
 * with its table entry (a NPUX_*_OP macro line) and its comment; this file holds what they
 * have in common.
 */
#include <string.h>

#include "ops/grad.h"

static const npu_dtype numeric[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_I32, NPU_DTYPE_I64,
                                    NPU_DTYPE_COUNT};
static const npu_dtype floating[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_COUNT};

npu_status npuX_binary_infer(npuX_infer *ic, const void *params) {
  (void)params;
  npu_status st = npuX_check_dtype(ic, 0, numeric);
  if (!st) st = npuX_check_same_dtype(ic, 0);
  if (!st) st = npuX_broadcast(ic, &ic->in[0], &ic->in[1], &ic->out[0]);
  ic->n_outputs = 1;
  return st;
}

/* Integer div, floor_div and floor_mod fail, as TensorFlow's do, when a divisor they use is
   zero (the kernels alone would give 0: they never trap).  Broadcasting uses every element of
   the divisor unless the output is empty. */
static npu_status check_int_divisor(const npuX_call *c, npuK_binop op) {
  const npu_tensor *b = c->in[1];
  if ((op != NPUK_BIN_DIV && op != NPUK_BIN_FLOOR_DIV && op != NPUK_BIN_FLOOR_MOD) ||
      c->out[0]->numel == 0)
    return NPU_OK;
  bool zero = false;
  if (b->dtype == NPU_DTYPE_I32) {
    const int32_t *d = b->data;
    for (int64_t i = 0; i < b->numel; i++) zero |= d[i] == 0;
  } else if (b->dtype == NPU_DTYPE_I64) {
    const int64_t *d = b->data;
    for (int64_t i = 0; i < b->numel; i++) zero |= d[i] == 0;
  }
  if (!zero) return NPU_OK;
  return npuC_error(c->ctx, NPU_ERR_ARG, "%s '%s': Integer division by zero (%s divisor)",
                    c->node ? npuX_op(c->node->op)->name : "div", c->node ? c->node->name : "?",
                    npu_dtype_name(b->dtype));
}

npu_status npuX_binary_run(const npuX_call *c, npuK_binop op, bool reference) {
  const npu_tensor *a = c->in[0], *b = c->in[1];
  npu_tensor *y = c->out[0];
  npu_status zero = check_int_divisor(c, op);
  if (zero) return zero;
  int64_t sa[NPU_MAX_DIMS], sb[NPU_MAX_DIMS];
  npuX_broadcast_strides(a, y->ndim, y->shape, sa);
  npuX_broadcast_strides(b, y->ndim, y->shape, sb);
  if (!reference && (npuX_is_half(a->dtype) || npuX_is_half(b->dtype) || npuX_is_half(y->dtype))) {
    /* stored at half size by the precision pass (NPUX_F_HALF_IO): widened by blocks inside
       the float32 kernel */
    if (npuK_binary_mixed(c->pool, op, y->ndim, y->shape, a->data, (npuK_dtype)a->dtype, sa,
                          b->data, (npuK_dtype)b->dtype, sb, y->data, (npuK_dtype)y->dtype) == 0)
      return NPU_OK;
  }
#define BINARY_CASE(T, dt)                                                                     \
  if (reference)                                                                               \
    npuK_binary_##dt##_ref(c->pool, op, y->ndim, y->shape, a->data, sa, b->data, sb, y->data); \
  else                                                                                         \
    npuK_binary_##dt(c->pool, op, y->ndim, y->shape, a->data, sa, b->data, sb, y->data);       \
  return NPU_OK;
  switch (y->dtype) {
  case NPU_DTYPE_F32: BINARY_CASE(float, f32)
  case NPU_DTYPE_F64: BINARY_CASE(double, f64)
  case NPU_DTYPE_I32: BINARY_CASE(int32_t, i32)
  case NPU_DTYPE_I64: BINARY_CASE(int64_t, i64)
  default: break;
  }
#undef BINARY_CASE
  return npuC_error(c->ctx, NPU_ERR_DTYPE, "'%s': no kernel for %s", c->node->name,
                    npu_dtype_name(y->dtype));
}

npu_status npuX_unary_infer_float(npuX_infer *ic, const void *params) {
  (void)params;
  npuX_same_as_input(ic, 0);
  return npuX_check_dtype(ic, 0, floating);
}

npu_status npuX_unary_infer_numeric(npuX_infer *ic, const void *params) {
  (void)params;
  npuX_same_as_input(ic, 0);
  return npuX_check_dtype(ic, 0, numeric);
}

npu_status npuX_unary_run(const npuX_call *c, npuK_unop op) {
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  int rc = -1;
  if (npuX_is_half(x->dtype) || npuX_is_half(y->dtype)) {
    /* stored at half size by the precision pass (NPUX_F_HALF_IO): widened by blocks inside
       the kernel, computed by the float32 kernel this op runs otherwise */
    npuK_unary_f32_fn f32 = c->impl && npuK_unary_has_fast(op) ? npuK_unary_f32_fast
                                                                : npuK_unary_f32;
    rc = npuK_unary_mixed(c->pool, f32, op, x->numel, x->data, (npuK_dtype)x->dtype, y->data,
                          (npuK_dtype)y->dtype);
  } else switch (x->dtype) {
  case NPU_DTYPE_F32: /* high_performance: the fast twin where the op has one */
    if (c->impl && npuK_unary_f32_fast(c->pool, op, x->numel, x->data, y->data) == 0) return NPU_OK;
    rc = npuK_unary_f32(c->pool, op, x->numel, x->data, y->data);
    break;
  case NPU_DTYPE_F64: rc = npuK_unary_f64(c->pool, op, x->numel, x->data, y->data); break;
  case NPU_DTYPE_I32: rc = npuK_unary_i32(c->pool, op, x->numel, x->data, y->data); break;
  case NPU_DTYPE_I64: rc = npuK_unary_i64(c->pool, op, x->numel, x->data, y->data); break;
  default: break;
  }
  if (rc != 0)
    return npuC_error(c->ctx, NPU_ERR_DTYPE, "'%s': no kernel for %s", c->node->name,
                      npu_dtype_name(x->dtype));
  return NPU_OK;
}

/* ---- reductions over a set of axes: reduce_sum, reduce_mean, reduce_max ---- */

typedef struct reduce_params {
  bool all_axes, keepdims;
  int n_axes;
  int64_t axes[NPU_MAX_DIMS];
} reduce_params;
_Static_assert(sizeof(reduce_params) <= sizeof(npuG_params), "params too big");

npu_status npuX_reduce_parse(npuX_infer *ic, void *params) {
  reduce_params *p = params;
  p->all_axes = npuX_attr_find(ic, "axis") == NULL;
  npu_status st = npuX_attr_ints(ic, "axis", p->axes, NPU_MAX_DIMS, &p->n_axes);
  if (!st) st = npuX_attr_bool(ic, "keepdims", &p->keepdims);
  return st;
}

npu_status npuX_axes_mask(npuX_infer *ic, int n_axes, const int64_t *axes, bool all, int ndim,
                          uint32_t *mask) {
  *mask = all ? (uint32_t)((1u << ndim) - 1) : 0;
  for (int i = 0; i < n_axes; i++) {
    int a;
    npu_status st = npuX_axis(ic, axes[i], ndim, &a);
    if (st) return st;
    if (*mask & (1u << a)) {
      char s[96];
      return npuX_error(ic, NPU_ERR_ARG, "axis %s names axis %d twice",
                        npuC_shape_str(s, sizeof s, n_axes, axes), a);
    }
    *mask |= 1u << a;
  }
  return NPU_OK;
}

void npuX_reduced_shape(const npuG_value *x, uint32_t mask, bool keepdims, npuG_value *y) {
  y->ndim = 0;
  for (int i = 0; i < x->ndim; i++) {
    if (!(mask & (1u << i))) y->shape[y->ndim++] = x->shape[i];
    else if (keepdims) y->shape[y->ndim++] = 1;
  }
}

static npu_status reduce_infer(npuX_infer *ic, const reduce_params *p, const npu_dtype *allowed) {
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  npu_status st = npuX_check_dtype(ic, 0, allowed);
  if (st) return st;
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = x->dtype, .ndim = -1};
  if (x->ndim < 0) { /* rank unknown: only "everything, dropped" has a known shape */
    if (p->all_axes && !p->keepdims) y->ndim = 0;
    return NPU_OK;
  }
  uint32_t mask;
  st = npuX_axes_mask(ic, p->n_axes, p->axes, p->all_axes, x->ndim, &mask);
  if (!st) npuX_reduced_shape(x, mask, p->keepdims, y);
  return st;
}

npu_status npuX_reduce_infer(npuX_infer *ic, const void *params) {
  return reduce_infer(ic, params, numeric);
}

npu_status npuX_reduce_infer_bool(npuX_infer *ic, const void *params) {
  static const npu_dtype bools[] = {NPU_DTYPE_BOOL, NPU_DTYPE_COUNT};
  return reduce_infer(ic, params, bools);
}

uint32_t npuX_reduce_mask(const void *params, int ndim) {
  const reduce_params *p = params;
  uint32_t mask = p->all_axes ? (uint32_t)((1u << ndim) - 1) : 0; /* checked by infer */
  for (int i = 0; i < p->n_axes; i++)
    mask |= 1u << (p->axes[i] < 0 ? p->axes[i] + ndim : p->axes[i]);
  return mask;
}

npu_status npuX_reduce_run(const npuX_call *c, npuK_redop op, bool reference) {
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  uint32_t mask = npuX_reduce_mask(c->params, x->ndim);
#define REDUCE_CASE(dt)                                                                        \
  (reference ? npuK_reduce_##dt##_ref : npuK_reduce_##dt)(c->pool, op, x->ndim, x->shape, mask, \
                                                          x->data, y->data);                    \
  return NPU_OK;
  switch (x->dtype) {
  case NPU_DTYPE_F32: REDUCE_CASE(f32)
  case NPU_DTYPE_F64: REDUCE_CASE(f64)
  case NPU_DTYPE_I32: REDUCE_CASE(i32)
  case NPU_DTYPE_I64: REDUCE_CASE(i64)
  default: break;
  }
#undef REDUCE_CASE
  return npuC_error(c->ctx, NPU_ERR_DTYPE, "%s '%s': no kernel for %s",
                    npuX_op(c->node->op)->name, c->node->name, npu_dtype_name(x->dtype));
}

/* ---- row-wise normalisations over the last axis: softmax, log_softmax ---- */

typedef struct last_axis_params {
  int64_t axis;
} last_axis_params;
_Static_assert(sizeof(last_axis_params) <= sizeof(npuG_params), "params too big");

npu_status npuX_last_axis_parse(npuX_infer *ic, void *params) {
  last_axis_params *p = params;
  p->axis = -1;
  return npuX_attr_int(ic, "axis", &p->axis);
}

npu_status npuX_last_axis_infer(npuX_infer *ic, const void *params) {
  const last_axis_params *p = params;
  const npuG_value *x = &ic->in[0];
  npu_status st = npuX_check_dtype(ic, 0, floating);
  if (st) return st;
  npuX_same_as_input(ic, 0);
  char sx[96];
  if (x->ndim == 0)
    return npuX_error(ic, NPU_ERR_SHAPE, "input must have rank >= 1, got %s", npuX_shape(sx, x));
  if (x->ndim < 0) { /* rank unknown: only a negative axis other than -1 is surely wrong */
    if (p->axis < -1)
      return npuX_error(ic, NPU_ERR_UNSUPPORTED,
                        "axis %lld: only the last axis (-1) is supported", (long long)p->axis);
    return NPU_OK;
  }
  int axis;
  st = npuX_axis(ic, p->axis, x->ndim, &axis);
  if (st) return st;
  if (axis != x->ndim - 1)
    return npuX_error(ic, NPU_ERR_UNSUPPORTED,
                      "axis %lld of input %s: only the last axis is supported (transpose first)",
                      (long long)p->axis, npuX_shape(sx, x));
  return NPU_OK;
}

npu_status npuX_rows_run(const npuX_call *c, npuX_rows_f32 f32, npuX_rows_f64 f64,
                         npuX_rows_f32 fast) {
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  int64_t cols = x->shape[x->ndim - 1];
  int64_t rows = cols ? x->numel / cols : 0;
  if (x->dtype == NPU_DTYPE_F64) f64(c->pool, rows, cols, x->data, y->data);
  else (c->impl && fast ? fast : f32)(c->pool, rows, cols, x->data, y->data);
  return NPU_OK;
}

/* ---- gradients of the reductions and of the row-wise normalisations (ops/grad.h) ---- */

static int n_reduced_axes(const reduce_params *p) { return p->all_axes ? -1 : p->n_axes; }

npu_status npuX_reduce_sum_grad(npuX_grad *gc) {
  const reduce_params *p = (const reduce_params *)gc->params.bytes;
  gc->dx[0] = npuX_gbroadcast(gc, gc->dy[0], gc->x[0], n_reduced_axes(p), p->axes, false);
  return gc->status;
}

npu_status npuX_reduce_mean_grad(npuX_grad *gc) {
  const reduce_params *p = (const reduce_params *)gc->params.bytes;
  gc->dx[0] = npuX_gbroadcast(gc, gc->dy[0], gc->x[0], n_reduced_axes(p), p->axes, true);
  return gc->status;
}

/* TensorFlow's _MinOrMaxGrad: indicators = (x == max broadcast), dx = indicators * dy / (the
   number of ties).  The indicator is built as 1 - relu_grad(1, max - x) (x < max: 0). */
npu_status npuX_reduce_max_grad(npuX_grad *gc) {
  const reduce_params *p = (const reduce_params *)gc->params.bytes;
  int x = gc->x[0], n = n_reduced_axes(p);
  int ymax = npuX_gbroadcast(gc, gc->y[0], x, n, p->axes, false);
  int ones = npuX_gbroadcast(gc, npuX_gconst(gc, 1.0, npuX_gvalue(gc, x).dtype), x, 0, NULL, false);
  int below = npuX_g2(gc, "relu_grad", ones, npuX_g2(gc, "sub", ymax, x));
  int ind = npuX_g2(gc, "sub", ones, below);
  npu_attr a[2] = {npuX_abool("keepdims", p->keepdims), npuX_aints("axis", p->axes, p->n_axes)};
  int ties = npuX_gadd(gc, "reduce_sum", 1, &ind, p->all_axes ? 1 : 2, a);
  int share = npuX_g2(gc, "div", gc->dy[0], ties);
  gc->dx[0] = npuX_g2(gc, "mul", ind, npuX_gbroadcast(gc, share, x, n, p->axes, false));
  return gc->status;
}

npu_status npuX_softmax_grad(npuX_grad *gc) {
  gc->dx[0] = npuX_g2(gc, "softmax_grad", gc->y[0], gc->dy[0]);
  return gc->status;
}

npu_status npuX_log_softmax_grad(npuX_grad *gc) {
  gc->dx[0] = npuX_g2(gc, "log_softmax_grad", gc->y[0], gc->dy[0]);
  return gc->status;
}

/* ---- the reshape family: y holds x's bytes under another shape ---- */

npu_status npuX_copy_run(const npuX_call *c) {
  if (c->out[0]->data != c->in[0]->data && c->in[0]->nbytes)
    memcpy(c->out[0]->data, c->in[0]->data, c->in[0]->nbytes);
  return NPU_OK;
}

npu_status npuX_reshape_grad(npuX_grad *gc) {
  gc->dx[0] = npuX_greshape_to(gc, gc->dy[0], gc->x[0]);
  return gc->status;
}

/* ---- argmax / argmin: the index of the extreme element along one axis ----
   Attributes: axis (default 0), output_type (int64 or int32).  Kernel view: x is
   (outer, axis_len, inner), y is (outer, inner). */
typedef struct arg_params {
  int64_t axis;
  npu_dtype output_type;
} arg_params;
_Static_assert(sizeof(arg_params) <= sizeof(npuG_params), "params too big");

npu_status npuX_arg_parse(npuX_infer *ic, void *params) {
  arg_params *p = params;
  p->axis = 0;
  p->output_type = NPU_DTYPE_I64;
  npu_status st = npuX_attr_int(ic, "axis", &p->axis);
  if (!st) st = npuX_attr_index_dtype(ic, "output_type", &p->output_type);
  return st;
}

npu_status npuX_arg_infer(npuX_infer *ic, const void *params) {
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_I32, NPU_DTYPE_I64,
                                 NPU_DTYPE_COUNT};
  const arg_params *p = params;
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  npu_status st = npuX_check_dtype(ic, 0, ok);
  if (st) return st;
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = p->output_type, .ndim = -1};
  if (x->ndim < 0) return NPU_OK;
  int axis;
  st = npuX_axis(ic, p->axis, x->ndim, &axis);
  if (st) return st;
  char sx[96];
  if (x->shape[axis] == 0)
    return npuX_error(ic, NPU_ERR_SHAPE, "axis %d of input %s is empty: no index to return",
                      axis, npuX_shape(sx, x));
  npuX_reduced_shape(x, 1u << axis, false, y); /* the reductions' rule (family.c) */
  return NPU_OK;
}

npu_status npuX_arg_run(const npuX_call *c, bool max) {
  const arg_params *p = c->params;
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  int axis = (int)(p->axis < 0 ? p->axis + x->ndim : p->axis);
  int64_t outer = 1, inner = 1, len = x->shape[axis];
  for (int i = 0; i < axis; i++) outer *= x->shape[i];
  for (int i = axis + 1; i < x->ndim; i++) inner *= x->shape[i];
  const bool i32 = y->dtype == NPU_DTYPE_I32;
#define ARG_CASE(dt)                                                                          \
  if (i32) (max ? npuK_argmax_##dt##_i32 : npuK_argmin_##dt##_i32)(c->pool, outer, len, inner,  \
                                                                  x->data, y->data);          \
  else (max ? npuK_argmax_##dt : npuK_argmin_##dt)(c->pool, outer, len, inner, x->data,         \
                                                   y->data);                                   \
  return NPU_OK;
  switch (x->dtype) {
  case NPU_DTYPE_F32: ARG_CASE(f32)
  case NPU_DTYPE_F64: ARG_CASE(f64)
  case NPU_DTYPE_I32: ARG_CASE(i32)
  case NPU_DTYPE_I64: ARG_CASE(i64)
  default: break;
  }
#undef ARG_CASE
  return npuC_error(c->ctx, NPU_ERR_DTYPE, "%s '%s': no kernel for %s", max ? "argmax" : "argmin",
                    c->node->name,
                    npu_dtype_name(x->dtype));
}

