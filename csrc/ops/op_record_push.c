/*
 * op_record_push.c — record_push: appends values of any dtypes and shapes to a record, the
 * per-iteration memory of a while loop's gradient (ops/grad_control.c: the recording loop
 * pushes its loop variables' values at the start of every iteration, the backward loop reads
 * them back with record_read, op_record_read.c).  Unlike a TensorArray's dense buffer, a
 * record holds values whose shapes (and ranks) differ from one push to the next.
 * Inputs data (uint8 [bytes]: the values' bytes end to end), meta (int64 [rows,
 * NPUX_RECORD_WIDTH]: per value pushed, its byte offset in data, its byte count (-1: by its
 * shape alone), its rank and its dims, -1 past the rank) and the values v_1 .. v_k (k >= 1).  Outputs data and meta with the k values
 * appended, in order.  Attribute shape_only (ints: positions among the values, 0-based): those
 * are recorded by their shape alone (no bytes; record_read gives zeros of that shape), for a
 * value whose gradient needs only its shape (a TensorArray buffer that the body only writes).
 */
#include <string.h>

#include "ops/ops.h"

typedef struct push_params {
  uint32_t shape_only; /* bit i: value i recorded by its shape alone */
} push_params;
_Static_assert(sizeof(push_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  push_params *p = params;
  int64_t pos[32];
  int n = 0;
  npu_status st = npuX_attr_ints(ic, "shape_only", pos, 32, &n);
  for (int i = 0; i < n && !st; i++) {
    if (pos[i] < 0 || pos[i] >= ic->n_inputs - 2)
      return npuX_error(ic, NPU_ERR_ARG, "shape_only[%d] = %lld is not a value's position", i,
                        (long long)pos[i]);
    p->shape_only |= 1u << pos[i];
  }
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const push_params *p = params;
  const npuG_value *data = &ic->in[0], *meta = &ic->in[1];
  char a[96];
  if (data->dtype != NPU_DTYPE_U8 || (data->ndim >= 0 && data->ndim != 1))
    return npuX_error(ic, NPU_ERR_SHAPE, "data must be a uint8 vector, got %s %s",
                      npu_dtype_name(data->dtype), npuX_shape(a, data));
  if (meta->dtype != NPU_DTYPE_I64 || (meta->ndim >= 0 && (meta->ndim != 2 ||
      (meta->shape[1] >= 0 && meta->shape[1] != NPUX_RECORD_WIDTH))))
    return npuX_error(ic, NPU_ERR_SHAPE, "meta must be int64 [rows, %d], got %s %s",
                      NPUX_RECORD_WIDTH, npu_dtype_name(meta->dtype), npuX_shape(a, meta));
  int k = ic->n_inputs - 2;
  int64_t bytes = data->ndim == 1 ? data->shape[0] : -1;
  for (int i = 0; i < k && bytes >= 0; i++) {
    const npuG_value *v = &ic->in[2 + i];
    if (p->shape_only >> i & 1) continue;
    int64_t n = v->ndim < 0 ? -1 : 1;
    for (int d = 0; d < v->ndim && n >= 0; d++) n = v->shape[d] < 0 ? -1 : n * v->shape[d];
    bytes = n < 0 ? -1 : bytes + n * (int64_t)npu_dtype_size(v->dtype);
  }
  ic->n_outputs = 2;
  ic->out[0] = (npuG_value){.dtype = NPU_DTYPE_U8, .ndim = 1, .shape = {bytes}};
  int64_t rows = meta->ndim == 2 && meta->shape[0] >= 0 ? meta->shape[0] + k : -1;
  ic->out[1] = (npuG_value){.dtype = NPU_DTYPE_I64, .ndim = 2, .shape = {rows, NPUX_RECORD_WIDTH}};
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const push_params *p = c->params;
  const npu_tensor *data = c->in[0], *meta = c->in[1];
  npu_tensor *d = c->out[0], *m = c->out[1];
  if (data->data != d->data && data->nbytes) memcpy(d->data, data->data, data->nbytes);
  if (meta->data != m->data && meta->nbytes) memcpy(m->data, meta->data, meta->nbytes);
  size_t at = data->nbytes;
  int64_t *row = (int64_t *)m->data + meta->numel;
  for (int i = 0; i + 2 < c->n_inputs; i++, row += NPUX_RECORD_WIDTH) {
    const npu_tensor *v = c->in[2 + i];
    bool shape_only = p->shape_only >> i & 1;
    row[0] = (int64_t)at;
    row[1] = shape_only ? -1 : (int64_t)v->nbytes;
    row[2] = v->ndim;
    for (int k = 0; k < NPU_MAX_DIMS; k++) row[3 + k] = k < v->ndim ? v->shape[k] : -1;
    if (shape_only) continue;
    if (v->nbytes) memcpy((char *)d->data + at, v->data, v->nbytes);
    at += v->nbytes;
  }
  return NPU_OK;
}

const npu_op_def npuX_op_record_push = {
    .name = "record_push", .tf_type = "NpuRecordPush", .min_inputs = 3, .max_inputs = -1,
    .n_outputs = 2, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED, .parse = parse,
    .infer = infer, .run = run};
