/*
 * op_tensor_array_write_grad.c — tensor_array_write_grad: the gradient of tensor_array_write
 * (op_tensor_array_write.c) with respect to the buffer written into.  Inputs dy (the gradient
 * of the written buffer, [n, element...]), index (the write's int32/int64 scalar or vector)
 * and buffer (the buffer before the write, for its shape: [m, element...] with m <= n, or [0]
 * when nothing was written yet).  y has buffer's shape and dy's dtype: dy's first m rows with
 * the rows written zeroed (what was there is overwritten, so it does not reach the result);
 * the rows the write added to a growing array are dropped.  An empty [0] buffer gives [0].
 */
#include <string.h>

#include "ops/ops.h"

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  const npuG_value *dy = &ic->in[0], *idx = &ic->in[1], *buf = &ic->in[2];
  char a[96];
  if (idx->dtype != NPU_DTYPE_I32 && idx->dtype != NPU_DTYPE_I64)
    return npuX_error(ic, NPU_ERR_DTYPE, "index must be int32 or int64, got %s",
                      npu_dtype_name(idx->dtype));
  if (idx->ndim > 1)
    return npuX_error(ic, NPU_ERR_SHAPE, "index must be a scalar or a vector, got %s",
                      npuX_shape(a, idx));
  ic->out[0] = *buf;
  ic->out[0].dtype = dy->dtype;
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *dy = c->in[0], *idx = c->in[1], *buf = c->in[2];
  npu_tensor *y = c->out[0];
  if (y->nbytes == 0) return NPU_OK;
  char sd[96], sb[96];
  int64_t rows = buf->shape[0];
  size_t row = y->nbytes / (size_t)rows;
  if (dy->ndim != buf->ndim || dy->shape[0] < rows || dy->nbytes / (size_t)dy->shape[0] != row)
    return npuC_error(c->ctx, NPU_ERR_SHAPE, "tensor_array_write_grad '%s': the gradient %s does "
                      "not cover the buffer %s", c->node->name,
                      npuC_shape_str(sd, sizeof sd, dy->ndim, dy->shape),
                      npuC_shape_str(sb, sizeof sb, buf->ndim, buf->shape));
  memcpy(y->data, dy->data, y->nbytes);
  for (int64_t i = 0; i < idx->numel; i++) {
    int64_t at = idx->dtype == NPU_DTYPE_I32 ? ((const int32_t *)idx->data)[i]
                                             : ((const int64_t *)idx->data)[i];
    if (at >= 0 && at < rows) memset((char *)y->data + (size_t)at * row, 0, row);
  }
  return NPU_OK;
}

const npu_op_def npuX_op_tensor_array_write_grad = {
    .name = "tensor_array_write_grad", .tf_type = "NpuTensorArrayWriteGrad", .min_inputs = 3,
    .max_inputs = 3, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .infer = infer, .run = run};
