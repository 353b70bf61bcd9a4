/*
 * op_size.c — size: the number of elements of its input as an int32 (or int64, attribute
 * out_type) scalar (TensorFlow Size).  Like shape, its value depends only on the input's
 * shape (NPUX_F_SHAPE_ONLY), so the compiler knows it once the feeds' shapes are known.
 * Any input dtype.  Gray list.
 */
#include "ops/ops.h"

typedef struct size_params {
  npu_dtype out_type;
} size_params;
_Static_assert(sizeof(size_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  size_params *p = params;
  p->out_type = NPU_DTYPE_I32;
  npu_status st = npuX_attr_index_dtype(ic, "out_type", &p->out_type);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const size_params *p = params;
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = p->out_type, .ndim = 0};
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  if (y->dtype == NPU_DTYPE_I64) *(int64_t *)y->data = x->numel;
  else if (x->numel > INT32_MAX)
    return npuC_error(c->ctx, NPU_ERR_SHAPE, "size '%s': %lld elements do not fit int32 (set "
                      "out_type to int64)", c->node->name, (long long)x->numel);
  else *(int32_t *)y->data = (int32_t)x->numel;
  return NPU_OK;
}

const npu_op_def npuX_op_size = {
    .name = "size", .tf_type = "Size", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .prec = NPUX_PREC_GRAY, .flags = NPUX_F_SHAPE_ONLY, .parse = parse, .infer = infer,
    .run = run};
