/*
 * op_unique.c — unique: the distinct values of a 1-D input in order of first occurrence,
 * and for each element the position of its value among them (TensorFlow Unique, and
 * UniqueV2 with axis [0] or 0).  Input x (any dtype, rank 1).
 * Outputs y (x's dtype, (n): n depends on the data, NPUX_F_DATA_SHAPE) and idx (x's shape,
 * int32, or int64 by attribute out_idx) with y[idx[k]] == x[k].  Floats compare as numbers
 * (-0.0 equals 0.0, the first one met is kept; every NaN is a value of its own).  Attribute
 * axis (also TF's const input of UniqueV2): an int or a one-element list, 0 or -1 only.
 * Gray list; no gradient.  Kernels: npuK_unique_ids, npuK_unique_values.
 */
#include "ops/ops.h"

typedef struct unique_params {
  npu_dtype out_idx;
} unique_params;
_Static_assert(sizeof(unique_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  unique_params *p = params;
  p->out_idx = NPU_DTYPE_I32;
  npu_status st = npuX_attr_index_dtype(ic, "out_idx", &p->out_idx);
  int64_t axis[2] = {0, 0};
  int n_axis = 0;
  if (!st) st = npuX_attr_ints(ic, "axis", axis, 2, &n_axis);
  if (!st && (n_axis > 1 || (n_axis == 1 && axis[0] != 0 && axis[0] != -1)))
    st = npuX_error(ic, NPU_ERR_UNSUPPORTED, "axis must be 0 (a 1-D input), got %s%lld",
                    n_axis > 1 ? "a list of " : "", (long long)(n_axis > 1 ? n_axis : axis[0]));
  ic->n_outputs = 2;
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const unique_params *p = params;
  const npuG_value *x = &ic->in[0];
  ic->n_outputs = 2;
  ic->out[0] = (npuG_value){.dtype = x->dtype, .ndim = 1, .shape = {-1}};
  ic->out[1] = (npuG_value){.dtype = p->out_idx, .ndim = 1, .shape = {x->ndim == 1 ? x->shape[0] : -1}};
  char sx[96];
  if (x->ndim >= 0 && x->ndim != 1)
    return npuX_error(ic, NPU_ERR_SHAPE, "needs a 1-D input, got %s", npuX_shape(sx, x));
  if (p->out_idx == NPU_DTYPE_I32 && x->ndim == 1 && x->shape[0] > INT32_MAX)
    return npuX_error(ic, NPU_ERR_SHAPE, "input %s has too many elements for int32 out_idx",
                      npuX_shape(sx, x));
  return NPU_OK;
}

/* ids (n int64), then the kernel's sort entries. */
static size_t scratch_size(const npuX_call *c) {
  int64_t n = c->in[0]->numel;
  return (size_t)(n > 0 ? n : 1) * sizeof(int64_t) + npuK_unique_scratch_size(n);
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *x = c->in[0];
  int64_t n = x->numel, *ids = c->scratch;
  void *sort = (char *)c->scratch + (size_t)(n > 0 ? n : 1) * sizeof(int64_t);
  int64_t count = npuK_unique_ids(n, x->data, (npuK_dtype)x->dtype, ids, sort);
  npu_status st = npuX_output(c, 0, 1, &count);
  if (st) return st;
  npuK_unique_values(n, x->data, npuK_dtype_size((npuK_dtype)x->dtype), ids, c->out[0]->data);
  npu_tensor *idx = c->out[1];
  for (int64_t k = 0; k < n; k++) {
    if (idx->dtype == NPU_DTYPE_I64) ((int64_t *)idx->data)[k] = ids[k];
    else ((int32_t *)idx->data)[k] = (int32_t)ids[k];
  }
  return NPU_OK;
}

const npu_op_def npuX_op_unique = {
    .name = "unique", .tf_type = "Unique", .args = "out_idx", .min_inputs = 1, .max_inputs = 1,
    .n_outputs = 2, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_DATA_SHAPE, .parse = parse,
    .infer = infer, .scratch_size = scratch_size, .run = run, .tf_const_inputs = "axis"};
