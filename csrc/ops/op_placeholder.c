/*
 * op_placeholder.c — placeholder: a value the caller feeds at run time (TensorFlow
 * Placeholder).  Attributes: dtype (required), shape (ints, -1 = any size; absent = any
 * rank).  The executor binds the fed tensor; there is no kernel.
 */
#include "ops/ops.h"

static npu_status parse(npuX_infer *ic, void *params) {
  (void)params;
  npuG_value *v = &ic->out[0];
  *v = (npuG_value){.dtype = NPU_DTYPE_COUNT, .ndim = -1};
  npu_status st = npuX_attr_dtype(ic, "dtype", &v->dtype);
  if (st) return st;
  if (v->dtype == NPU_DTYPE_COUNT) return npuX_error(ic, NPU_ERR_ARG, "attribute 'dtype' is required");
  if (npuX_attr_find(ic, "shape")) {
    st = npuX_attr_ints(ic, "shape", v->shape, NPU_MAX_DIMS, &v->ndim);
    if (st) return st;
    for (int i = 0; i < v->ndim; i++)
      if (v->shape[i] < -1)
        return npuX_error(ic, NPU_ERR_SHAPE, "dimension %d is %lld (use -1 for unknown)", i,
                          (long long)v->shape[i]);
  }
  ic->n_outputs = 1;
  return NPU_OK;
}

const npu_op_def npuX_op_placeholder = {
    .name = "placeholder", .tf_type = "Placeholder", .min_inputs = 0, .max_inputs = 0,
    .n_outputs = 1, .kind = NPUX_KIND_PLACEHOLDER, .parse = parse};
