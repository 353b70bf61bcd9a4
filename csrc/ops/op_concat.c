/*
 * op_concat.c — concat: the inputs joined along one axis (TensorFlow ConcatV2, whose axis
 * input is an attribute here).  One or more inputs (Lua: a list) of one dtype and rank, equal
 * in every dim but the axis.  Attribute axis (required; also positional: npu.concat({a, b},
 * 1); negative counts from the end).  Any dtype.  Gray list: moves data, never rounds.
 * Kernel: each input viewed as (outer, axis_dim_i, inner), y as (outer, sum, inner); the
 * per-input sizes and pointers live in scratch so the run does not allocate.
 * Gradient: each input's block of dy (slice); where an input's size along the axis is known
 * only when it runs, split_v of dy by the sizes read from the inputs' shapes then.
 */
#include "ops/grad.h"

typedef struct concat_params {
  int64_t axis;
} concat_params;
_Static_assert(sizeof(concat_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  concat_params *p = params;
  if (!npuX_attr_find(ic, "axis"))
    return npuX_error(ic, NPU_ERR_ARG, "attribute 'axis' is required");
  return npuX_attr_int(ic, "axis", &p->axis);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const concat_params *p = params;
  npu_status st = npuX_check_same_dtype(ic, 0);
  if (st) return st;
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  int first = -1; /* the first input of known rank */
  for (int i = 0; i < ic->n_inputs && first < 0; i++)
    if (ic->in[i].ndim >= 0) first = i;
  *y = (npuG_value){.dtype = ic->in[0].dtype, .ndim = -1};
  if (first < 0) return NPU_OK; /* no rank known: nothing to check yet */
  const int ndim = ic->in[first].ndim;
  char sa[96], sb[96];
  int axis;
  if (ndim == 0)
    return npuX_error(ic, NPU_ERR_SHAPE, "cannot concatenate scalars (input %d is %s)",
                      first + 1, npuX_shape(sa, &ic->in[first]));
  st = npuX_axis(ic, p->axis, ndim, &axis);
  if (st) return st;
  y->ndim = ndim;
  for (int d = 0; d < ndim; d++) y->shape[d] = d == axis ? 0 : -1;
  const npuG_value *owner[NPU_MAX_DIMS] = {NULL}; /* the input that fixed each known dim */
  for (int i = 0; i < ic->n_inputs; i++) {
    const npuG_value *v = &ic->in[i];
    if (v->ndim < 0) {
      y->shape[axis] = -1;
      continue;
    }
    if (v->ndim != ndim)
      return npuX_error(ic, NPU_ERR_SHAPE, "inputs %d and %d have different ranks: %s and %s",
                        first + 1, i + 1, npuX_shape(sa, &ic->in[first]), npuX_shape(sb, v));
    for (int d = 0; d < ndim; d++) {
      int64_t n = v->shape[d];
      if (d == axis) {
        y->shape[d] = n < 0 || y->shape[d] < 0 ? -1 : y->shape[d] + n;
      } else if (n >= 0) {
        if (y->shape[d] >= 0 && y->shape[d] != n)
          return npuX_error(ic, NPU_ERR_SHAPE,
                            "inputs %d and %d differ in dimension %d (not the concat axis %d): "
                            "%s and %s",
                            (int)(owner[d] - ic->in) + 1, i + 1, d, axis,
                            npuX_shape(sa, owner[d]), npuX_shape(sb, v));
        y->shape[d] = n;
        owner[d] = v;
      }
    }
  }
  return NPU_OK;
}

/* Sized from the node: the planner may describe only the first inputs in c->in. */
static size_t scratch_size(const npuX_call *c) {
  return (size_t)c->node->n_inputs * (sizeof(int64_t) + sizeof(void *));
}

static npu_status run(const npuX_call *c) {
  const concat_params *p = c->params;
  npu_tensor *y = c->out[0];
  int axis = (int)(p->axis < 0 ? p->axis + y->ndim : p->axis);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= y->shape[d];
  for (int d = axis + 1; d < y->ndim; d++) inner *= y->shape[d];
  int64_t *axis_dims = c->scratch;
  const void **xs = (const void **)(axis_dims + c->n_inputs);
  for (int i = 0; i < c->n_inputs; i++) {
    axis_dims[i] = c->in[i]->shape[axis];
    xs[i] = c->in[i]->data;
  }
  npuK_concat(c->pool, npu_dtype_size(y->dtype), c->n_inputs, outer, axis_dims, inner, xs,
              y->data);
  return NPU_OK;
}

/* The gradient when an input's size along the axis is known only when it runs: split_v of dy
   by the sizes read from the inputs' shapes. */
static npu_status grad_sized_at_run(npuX_grad *gc, int axis) {
  if (gc->n_inputs > NPUX_MAX_OUTPUTS)
    return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "more than %d inputs of sizes known only when "
                       "it runs", NPUX_MAX_OUTPUTS);
  int sizes[NPUX_MAX_OUTPUTS];
  int at = npuX_gconst(gc, axis, NPU_DTYPE_I32);
  for (int i = 0; i < gc->n_inputs; i++) {
    npu_attr t = npuX_adtype("out_type", NPU_DTYPE_I64);
    sizes[i] = npuX_g2(gc, "gather", npuX_gadd(gc, "shape", 1, &gc->x[i], 1, &t), at);
  }
  npu_attr pa = npuX_aint("axis", 0);
  int in[2] = {gc->dy[0], npuX_gadd(gc, "pack", gc->n_inputs, sizes, 1, &pa)};
  npu_attr a[2] = {npuX_aint("axis", axis), npuX_aint("num_split", gc->n_inputs)};
  int first = npuX_gadd(gc, "split_v", 2, in, 2, a);
  if (first < 0) return gc->status;
  for (int i = 0; i < gc->n_inputs; i++)
    if (npuX_is_float(npuX_gvalue(gc, gc->x[i]).dtype))
      gc->dx[i] = npu_graph_output(gc->graph, gc->graph->values[first].node, i);
  return gc->status;
}

static npu_status grad(npuX_grad *gc) {
  const concat_params *p = (const concat_params *)gc->params.bytes;
  npuG_value d = npuX_gvalue(gc, gc->dy[0]);
  if (d.ndim < 0)
    return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "the rank of the inputs must be known");
  int axis = (int)(p->axis < 0 ? p->axis + d.ndim : p->axis);
  for (int i = 0; i < gc->n_inputs; i++) {
    npuG_value x = npuX_gvalue(gc, gc->x[i]);
    if (x.ndim < 0 || x.shape[axis] < 0) return grad_sized_at_run(gc, axis);
  }
  int64_t begin[NPU_MAX_DIMS] = {0}, size[NPU_MAX_DIMS];
  for (int i = 0; i < gc->n_inputs && !gc->status; i++) {
    npuG_value x = npuX_gvalue(gc, gc->x[i]);
    for (int k = 0; k < d.ndim; k++) size[k] = k == axis ? x.shape[axis] : -1;
    if (npuX_is_float(x.dtype)) {
      npu_attr a[2] = {npuX_aints("begin", begin, d.ndim), npuX_aints("size", size, d.ndim)};
      gc->dx[i] = npuX_gadd(gc, "slice", 1, &gc->dy[0], 2, a);
    }
    begin[axis] += x.shape[axis];
  }
  return gc->status;
}

const npu_op_def npuX_op_concat = {
    .name = "concat", .tf_type = "ConcatV2", .args = "axis", .min_inputs = 1, .max_inputs = -1,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer,
    .scratch_size = scratch_size, .run = run, .grad = grad, .flags = NPUX_F_MOVES,
    .tf_const_inputs = "axis"}; /* ConcatV2: the N values, then axis */
