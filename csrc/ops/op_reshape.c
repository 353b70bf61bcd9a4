/*
 * op_reshape.c — reshape: the same elements in row-major order under another shape
 * (TensorFlow Reshape).  The shape comes from the attribute shape (ints, also positional:
 * npu.reshape(x, {2, 3})) or, as in TF graphs that compute it at run time (Shape ->
 * StridedSlice -> Pack -> Reshape), from an optional second input: an int32/int64 rank-1
 * tensor; never both.  At most one -1, inferred from the element count, which must match the
 * input's.  A shape input known before running (a constant, or folded at compile time:
 * ic->const_in[1]) is used exactly like the attribute; unknown, it leaves every output dim
 * -1 (the rank is its length when that is known), and the compile step must know it, since
 * the executor allocates the output from the inferred shape; the run checks that the tensor
 * it gets still says the same.  Any dtype.  Gray list: moves data, never rounds.
 * Kernel: a copy of nbytes, skipped when memory planning
 * gave y x's arena block (compile/memory.c: alias groups).
 * Gradient: dy reshaped to the input's shape (none for the shape input).
 */
#include <string.h>

#include "ops/grad.h"

typedef struct reshape_params {
  bool from_input; /* the shape is input 2 */
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
} reshape_params;
_Static_assert(sizeof(reshape_params) <= sizeof(npuG_params), "params too big");

/* Entries >= -1, at most one -1. */
static npu_status check_shape(npuX_infer *ic, int ndim, const int64_t *shape) {
  int n_unknown = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < -1)
      return npuX_error(ic, NPU_ERR_SHAPE, "shape entry %d is %lld (use -1 to infer one)", i + 1,
                        (long long)shape[i]);
    n_unknown += shape[i] == -1;
  }
  if (n_unknown > 1) {
    char s[96];
    return npuX_error(ic, NPU_ERR_SHAPE, "shape %s has more than one -1",
                      npuC_shape_str(s, sizeof s, ndim, shape));
  }
  return NPU_OK;
}

static npu_status parse(npuX_infer *ic, void *params) {
  reshape_params *p = params;
  const bool attr = npuX_attr_find(ic, "shape") != NULL;
  if (ic->n_inputs == 2) {
    if (attr)
      return npuX_error(ic, NPU_ERR_ARG,
                        "the shape is given twice: as attribute 'shape' and as input 2");
    p->from_input = true;
    return NPU_OK;
  }
  if (!attr)
    return npuX_error(ic, NPU_ERR_ARG,
                      "attribute 'shape' is required (or the shape tensor as input 2)");
  npu_status st = npuX_attr_ints(ic, "shape", p->shape, NPU_MAX_DIMS, &p->ndim);
  return st ? st : check_shape(ic, p->ndim, p->shape);
}

/* The shape held by an int32/int64 rank-1 tensor; -1 when it has too many entries. */
static int read_shape(const npu_tensor *t, int64_t *shape) {
  if (t->numel > NPU_MAX_DIMS) return -1;
  for (int64_t i = 0; i < t->numel; i++)
    shape[i] = t->dtype == NPU_DTYPE_I32 ? ((const int32_t *)t->data)[i]
                                         : ((const int64_t *)t->data)[i];
  return (int)t->numel;
}

/* Product of the known dims of a shape (saturating at INT64_MAX), and how many are unknown. */
static int64_t known_product(int ndim, const int64_t *shape, int *n_unknown) {
  int64_t n = 1;
  *n_unknown = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) ++*n_unknown;
    else if (shape[i] && n > INT64_MAX / shape[i]) n = INT64_MAX;
    else n *= shape[i];
  }
  return n;
}

/* y from x and a requested shape (checked by check_shape). */
static npu_status infer_shape(npuX_infer *ic, int ndim, const int64_t *shape) {
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  *y = (npuG_value){.dtype = x->dtype, .ndim = ndim};
  memcpy(y->shape, shape, (size_t)ndim * sizeof *shape);
  ic->n_outputs = 1;
  int y_unknown, x_unknown = 1;
  int64_t y_known = known_product(ndim, shape, &y_unknown);
  int64_t x_known = x->ndim >= 0 ? known_product(x->ndim, x->shape, &x_unknown) : 1;
  char sx[96], sy[96];
  if (x->ndim >= 0 && x_unknown == 0) { /* the input's element count is known */
    if (y_unknown == 0 ? x_known != y_known
                       : (y_known == 0 ? x_known != 0 : x_known % y_known != 0))
      return npuX_error(ic, NPU_ERR_SHAPE,
                        "cannot reshape %s (%lld elements) to %s", npuX_shape(sx, x),
                        (long long)x_known, npuX_shape(sy, y));
    if (y_unknown)
      for (int i = 0; i < ndim; i++)
        if (y->shape[i] < 0) y->shape[i] = y_known ? x_known / y_known : 0;
    return NPU_OK;
  }
  /* Unknown input dims: a fully given output must still hold a multiple of the known part. */
  if (y_unknown == 0 && x->ndim >= 0 && x_known != 0 && y_known % x_known != 0)
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "cannot reshape %s to %s: %lld elements are not a multiple of %lld",
                      npuX_shape(sx, x), npuX_shape(sy, y), (long long)y_known,
                      (long long)x_known);
  return NPU_OK;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype ints[] = {NPU_DTYPE_I32, NPU_DTYPE_I64, NPU_DTYPE_COUNT};
  const reshape_params *p = params;
  if (!p->from_input) return infer_shape(ic, p->ndim, p->shape);
  const npuG_value *s = &ic->in[1];
  npu_status st = npuX_check_dtype(ic, 1, ints);
  if (st) return st;
  char ss[96];
  if (s->ndim >= 0 && (s->ndim != 1 || s->shape[0] > NPU_MAX_DIMS))
    return npuX_error(ic, NPU_ERR_SHAPE, "the shape input must be a list of at most %d dims "
                                         "(rank 1), got %s",
                      NPU_MAX_DIMS, npuX_shape(ss, s));
  if (ic->const_in && ic->const_in[1]) { /* known now: exactly as the attribute */
    int64_t shape[NPU_MAX_DIMS];
    int ndim = read_shape(ic->const_in[1], shape); /* >= 0: its rank and length are checked */
    st = ndim < 0 ? npuX_error(ic, NPU_ERR_SHAPE, "the shape input has too many entries")
                  : check_shape(ic, ndim, shape);
    return st ? st : infer_shape(ic, ndim, shape);
  }
  ic->n_outputs = 1; /* known at run time only: every dim -1, the rank its length if known */
  npuG_value *y = &ic->out[0];
  *y = (npuG_value){.dtype = ic->in[0].dtype, .ndim = s->ndim == 1 ? (int)s->shape[0] : -1};
  for (int i = 0; i < y->ndim; i++) y->shape[i] = -1;
  return NPU_OK;
}

/* A shape input read at run time must agree with the shape the output was allocated with
   (the one compiled from its value then). */
static npu_status check_run_shape(const npuX_call *c) {
  const npu_tensor *x = c->in[0], *y = c->out[0];
  int64_t shape[NPU_MAX_DIMS];
  int ndim = read_shape(c->in[1], shape);
  bool ok = ndim == y->ndim && y->numel == x->numel;
  for (int i = 0; ok && i < ndim; i++) ok = shape[i] == -1 || shape[i] == y->shape[i];
  if (ok) return NPU_OK;
  char sg[96] = "(too many dims)", sy[96];
  if (ndim >= 0) npuC_shape_str(sg, sizeof sg, ndim, shape);
  return npuC_error(c->ctx, NPU_ERR_SHAPE,
                    "reshape '%s': the shape input is %s at run time, but the output was "
                    "compiled as %s",
                    c->node->name, sg, npuC_shape_str(sy, sizeof sy, y->ndim, y->shape));
}

static npu_status run(const npuX_call *c) {
  if (c->n_inputs == 2) {
    npu_status st = check_run_shape(c);
    if (st) return st;
  }
  return npuX_copy_run(c);
}

const npu_op_def npuX_op_reshape = {
    .name = "reshape", .tf_type = "Reshape", .args = "shape", .min_inputs = 1, .max_inputs = 2,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer, .run = run,
    .grad = npuX_reshape_grad, .tf_const_inputs = "shape", .flags = NPUX_F_MOVES};
