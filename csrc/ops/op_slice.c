/*
 * op_slice.c — slice: the block y[i...] = x[begin + i...] of extent size (TensorFlow Slice,
 * whose begin and size inputs are attributes here).  Attributes begin and size (ints, one per
 * axis; also positional: npu.slice(x, {0, 1}, {2, -1})); size -1 means "to the end".  Bounds
 * are checked as soon as the dims are known.  Any dtype.  Gray list: moves data, never rounds.
 * Gradient: dy padded with zeros back to the input's shape (its dims must be known where the
 * size is not -1).
 */
#include "ops/grad.h"

typedef struct slice_params {
  int n_begin, n_size;
  int64_t begin[NPU_MAX_DIMS], size[NPU_MAX_DIMS];
} slice_params;
_Static_assert(sizeof(slice_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  slice_params *p = params;
  if (!npuX_attr_find(ic, "begin") || !npuX_attr_find(ic, "size"))
    return npuX_error(ic, NPU_ERR_ARG, "attributes 'begin' and 'size' are required");
  npu_status st = npuX_attr_ints(ic, "begin", p->begin, NPU_MAX_DIMS, &p->n_begin);
  if (!st) st = npuX_attr_ints(ic, "size", p->size, NPU_MAX_DIMS, &p->n_size);
  if (st) return st;
  char sb[96], ss[96];
  if (p->n_begin != p->n_size)
    return npuX_error(ic, NPU_ERR_ARG, "begin %s and size %s have different lengths",
                      npuC_shape_str(sb, sizeof sb, p->n_begin, p->begin),
                      npuC_shape_str(ss, sizeof ss, p->n_size, p->size));
  for (int i = 0; i < p->n_begin; i++)
    if (p->begin[i] < 0 || p->size[i] < -1)
      return npuX_error(ic, NPU_ERR_ARG,
                        "begin %s must be >= 0 and size %s >= -1 (axis %d)",
                        npuC_shape_str(sb, sizeof sb, p->n_begin, p->begin),
                        npuC_shape_str(ss, sizeof ss, p->n_size, p->size), i);
  return NPU_OK;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const slice_params *p = params;
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = x->dtype, .ndim = p->n_begin};
  char sx[96], sb[96], ss[96];
  if (x->ndim >= 0 && x->ndim != p->n_begin)
    return npuX_error(ic, NPU_ERR_SHAPE, "begin %s and size %s need %d entries for input %s",
                      npuC_shape_str(sb, sizeof sb, p->n_begin, p->begin),
                      npuC_shape_str(ss, sizeof ss, p->n_size, p->size), x->ndim,
                      npuX_shape(sx, x));
  for (int i = 0; i < p->n_begin; i++) {
    int64_t dim = x->ndim >= 0 ? x->shape[i] : -1, b = p->begin[i], n = p->size[i];
    y->shape[i] = n >= 0 ? n : dim >= 0 ? dim - b : -1;
    if (dim >= 0 && (b > dim || (n >= 0 && n > dim - b)))
      return npuX_error(ic, NPU_ERR_SHAPE,
                        "begin %s, size %s is out of bounds for input %s (axis %d)",
                        npuC_shape_str(sb, sizeof sb, p->n_begin, p->begin),
                        npuC_shape_str(ss, sizeof ss, p->n_size, p->size), npuX_shape(sx, x), i);
  }
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const slice_params *p = c->params;
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  /* The executor allocated y with the resolved sizes: they are the extents. */
  npuK_slice(c->pool, npu_dtype_size(x->dtype), x->ndim, x->shape, p->begin, y->shape, x->data,
             y->data);
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  const slice_params *p = (const slice_params *)gc->params.bytes;
  npuG_value x = npuX_gvalue(gc, gc->x[0]);
  int64_t pads[2 * NPU_MAX_DIMS];
  for (int i = 0; i < p->n_begin; i++) {
    pads[2 * i] = p->begin[i];
    if (p->size[i] < 0) pads[2 * i + 1] = 0;
    else if (x.ndim > i && x.shape[i] >= 0) pads[2 * i + 1] = x.shape[i] - p->begin[i] - p->size[i];
    else
      return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "dimension %d of the input must be known", i);
  }
  npu_attr a = npuX_aints("paddings", pads, 2 * p->n_begin);
  gc->dx[0] = npuX_gadd(gc, "pad", 1, &gc->dy[0], 1, &a);
  return gc->status;
}

const npu_op_def npuX_op_slice = {
    .name = "slice", .tf_type = "Slice", .args = "begin,size", .min_inputs = 1, .max_inputs = 1,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer, .run = run,
    .grad = grad, .tf_const_inputs = "begin,size"};
