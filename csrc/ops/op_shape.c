/*
 * op_shape.c — shape: the shape of its input as a rank-1 int32 (or int64, attribute
 * out_type) tensor (TensorFlow Shape).  Its value depends only on the input's shape, so the
 * compiler knows it as soon as the feeds' shapes are known (NPUX_F_SHAPE_ONLY): that is what
 * lets Shape -> StridedSlice -> Pack -> Reshape chains fold to constants at compile time.
 */
#include "ops/ops.h"

typedef struct shape_params {
  npu_dtype out_type;
} shape_params;
_Static_assert(sizeof(shape_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  shape_params *p = params;
  p->out_type = NPU_DTYPE_I32;
  npu_status st = npuX_attr_index_dtype(ic, "out_type", &p->out_type);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const shape_params *p = params;
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = p->out_type, .ndim = 1, .shape = {ic->in[0].ndim}};
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  for (int i = 0; i < x->ndim; i++) {
    if (y->dtype == NPU_DTYPE_I64) ((int64_t *)y->data)[i] = x->shape[i];
    else ((int32_t *)y->data)[i] = (int32_t)x->shape[i];
  }
  return NPU_OK;
}

const npu_op_def npuX_op_shape = {
    .name = "shape", .tf_type = "Shape", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .flags = NPUX_F_SHAPE_ONLY, .parse = parse, .infer = infer, .run = run};
