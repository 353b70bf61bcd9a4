/*
 * op_tensor_array_write.c — tensor_array_write: a TensorArray's write and scatter on its dense
 * buffer (lua/npu/control.lua keeps a TensorArray as one tensor, element i its row i).
 * Inputs buffer, index (int32/int64 scalar: write; vector of k: scatter), value (the element,
 * or k elements stacked).  Attribute size: the array's size, -1 when it grows (dynamic_size).
 * y is the buffer with the rows written: shape [n, element...] where element is value's
 * shape (less its leading k for a scatter) and n the size, or for a growing array the larger
 * of the buffer's rows and the highest index + 1 (known when it runs).  A buffer of shape [0]
 * is an array nothing was written to yet: its element shape comes from this write; otherwise
 * the buffer's rows must have the element's shape and dtype.  Rows not written are the
 * buffer's, or zero.  An index < 0, or >= size for a fixed-size array, is NPU_ERR_ARG naming
 * the index and the size.
 * Gradient: the buffer's is dy with the rows written zeroed, cut to the buffer's rows
 * (tensor_array_write_grad); the value's is the rows written, gather(dy, index), in the
 * value's shape; the index has none.  (A scatter naming one row twice keeps the last value,
 * but both get the row's gradient.)
 */
#include <string.h>

#include "ops/grad.h"

typedef struct ta_params {
  int64_t size;
} ta_params;
_Static_assert(sizeof(ta_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  ta_params *p = params;
  p->size = -1;
  npu_status st = npuX_attr_int(ic, "size", &p->size);
  if (!st && p->size < -1)
    st = npuX_error(ic, NPU_ERR_ARG, "attribute 'size' must be >= 0 (or -1: it grows), got %lld",
                    (long long)p->size);
  return st;
}

/* The highest index in idx + 1 (0 for none), when its values are known. */
static int64_t rows_needed(const npu_tensor *idx) {
  int64_t top = 0;
  for (int64_t i = 0; i < idx->numel; i++) {
    int64_t v = idx->dtype == NPU_DTYPE_I32 ? ((const int32_t *)idx->data)[i]
                                            : ((const int64_t *)idx->data)[i];
    if (v + 1 > top) top = v + 1;
  }
  return top;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const ta_params *p = params;
  const npuG_value *buf = &ic->in[0], *idx = &ic->in[1], *val = &ic->in[2];
  char a[96], b[96];
  if (idx->dtype != NPU_DTYPE_I32 && idx->dtype != NPU_DTYPE_I64)
    return npuX_error(ic, NPU_ERR_DTYPE, "index must be int32 or int64, got %s",
                      npu_dtype_name(idx->dtype));
  if (idx->ndim > 1)
    return npuX_error(ic, NPU_ERR_SHAPE, "index must be a scalar (write) or a vector (scatter), "
                      "got %s", npuX_shape(a, idx));
  bool scatter = idx->ndim == 1;
  if (val->ndim < 0) {
    ic->out[0] = (npuG_value){.dtype = val->dtype, .ndim = -1};
    return NPU_OK;
  }
  if (scatter && (val->ndim < 1 || (idx->shape[0] >= 0 && val->shape[0] >= 0 &&
                                    idx->shape[0] != val->shape[0])))
    return npuX_error(ic, NPU_ERR_SHAPE, "a scatter of %s indices needs as many values stacked, "
                      "got %s", npuX_shape(a, idx), npuX_shape(b, val));
  int elem_ndim = val->ndim - (scatter ? 1 : 0);
  if (elem_ndim + 1 > NPU_MAX_DIMS)
    return npuX_error(ic, NPU_ERR_SHAPE, "element rank %d is too large", elem_ndim);
  const int64_t *elem = val->shape + (scatter ? 1 : 0);
  bool empty = buf->ndim == 1 && buf->shape[0] == 0;
  if (!empty && buf->ndim >= 0) {
    bool ok = buf->dtype == val->dtype && buf->ndim == elem_ndim + 1;
    for (int d = 0; ok && d < elem_ndim; d++)
      ok = buf->shape[d + 1] < 0 || elem[d] < 0 || buf->shape[d + 1] == elem[d];
    if (!ok) {
      char e[96];
      return npuX_error(ic, NPU_ERR_SHAPE, "the array holds %s elements of %s (buffer %s), the "
                        "value written is %s %s", npu_dtype_name(buf->dtype),
                        npuC_shape_str(e, sizeof e, buf->ndim - 1, buf->shape + 1),
                        npuX_shape(a, buf), npu_dtype_name(val->dtype), npuX_shape(b, val));
    }
  }
  npuG_value *y = &ic->out[0];
  y->dtype = val->dtype;
  y->ndim = elem_ndim + 1;
  memcpy(y->shape + 1, elem, (size_t)elem_ndim * sizeof *elem);
  if (p->size >= 0) {
    y->shape[0] = p->size;
  } else {
    const npu_tensor *known = ic->const_in ? ic->const_in[1] : NULL;
    int64_t have = empty ? 0 : buf->ndim >= 1 ? buf->shape[0] : -1;
    int64_t need = known ? rows_needed(known) : -1;
    y->shape[0] = have < 0 || need < 0 ? -1 : have > need ? have : need;
  }
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *buf = c->in[0], *idx = c->in[1], *val = c->in[2];
  npu_tensor *y = c->out[0];
  bool scatter = idx->ndim == 1;
  int64_t n_rows = y->shape[0];
  size_t row = n_rows ? y->nbytes / (size_t)n_rows : 0;
  bool empty = buf->ndim == 1 && buf->shape[0] == 0;
  size_t keep = empty ? 0 : buf->nbytes < y->nbytes ? buf->nbytes : y->nbytes;
  if (keep && buf->data != y->data) memcpy(y->data, buf->data, keep);
  memset((char *)y->data + keep, 0, y->nbytes - keep);
  int64_t k = scatter ? idx->shape[0] : 1;
  for (int64_t i = 0; i < k; i++) {
    int64_t at = idx->dtype == NPU_DTYPE_I32 ? ((const int32_t *)idx->data)[i]
                                             : ((const int64_t *)idx->data)[i];
    if (at < 0 || at >= n_rows)
      return npuC_error(c->ctx, NPU_ERR_ARG, "tensor_array_write '%s': index %lld is outside the "
                        "array of size %lld", c->node->name, (long long)at, (long long)n_rows);
    memcpy((char *)y->data + (size_t)at * row, (const char *)val->data + (size_t)i * row, row);
  }
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  if (gc->wanted[0]) {
    int in[3] = {gc->dy[0], gc->x[1], gc->x[0]};
    gc->dx[0] = npuX_gadd(gc, "tensor_array_write_grad", 3, in, 0, NULL);
  }
  if (gc->wanted[2])
    gc->dx[2] = npuX_greshape_to(gc, npuX_g2(gc, "gather", gc->dy[0], gc->x[1]), gc->x[2]);
  return gc->status;
}

const npu_op_def npuX_op_tensor_array_write = {
    .name = "tensor_array_write", .tf_type = "NpuTensorArrayWrite", .min_inputs = 3,
    .max_inputs = 3, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_NO_FOLD,
    .parse = parse, .infer = infer, .run = run, .grad = grad};
