/*
 * op_hcom_receive.c — hcom_receive: the tensor rank src_rank of group sends with sr_tag
 * (HCCL's HcomReceive, hccl_ops.receive(shape, dtype, sr_tag, src_rank, group)).  No inputs;
 * attributes shape (every dimension known), dtype (float32, float16 or int32), sr_tag,
 * src_rank.  The sender's tensor must have exactly this shape and dtype: a mismatch fails on
 * both ranks naming both, before any data moves.  Waits at most hccl_timeout for the sender.
 */
#include "ops/hcom.h"

static npu_status parse(npuX_infer *ic, void *params) {
  npuG_value *v = &ic->out[0];
  *v = (npuG_value){.node = -1, .dtype = NPU_DTYPE_COUNT, .ndim = -1};
  ic->n_outputs = 1;
  npu_status st = npuX_hcom_parse(ic, params, NPUX_HCOM_SRC);
  if (!st) st = npuX_attr_dtype(ic, "dtype", &v->dtype);
  if (!st && v->dtype != NPU_DTYPE_F32 && v->dtype != NPU_DTYPE_F16 && v->dtype != NPU_DTYPE_I32)
    st = npuX_error(ic, v->dtype == NPU_DTYPE_COUNT ? NPU_ERR_ARG : NPU_ERR_DTYPE,
                    v->dtype == NPU_DTYPE_COUNT ? "attribute 'dtype' is required"
                                                : "dtype %s: float32, float16 or int32",
                    npu_dtype_name(v->dtype));
  if (!st && !npuX_attr_find(ic, "shape"))
    st = npuX_error(ic, NPU_ERR_ARG, "attribute 'shape' is required");
  if (!st) st = npuX_attr_ints(ic, "shape", v->shape, NPU_MAX_DIMS, &v->ndim);
  for (int i = 0; !st && i < v->ndim; i++)
    if (v->shape[i] < 0)
      st = npuX_error(ic, NPU_ERR_SHAPE, "dimension %d is %lld: a receive declares its whole "
                      "shape", i, (long long)v->shape[i]);
  return st;
}

static npu_status run(const npuX_call *c) { return npuX_hcom_run(c, NPUX_COLL_RECV, 0); }

const npu_op_def npuX_op_hcom_receive = {
    .name = "hcom_receive", .tf_type = "HcomReceive", .args = "shape,dtype,sr_tag,src_rank",
    .min_inputs = 0, .max_inputs = 0, .n_outputs = 1, .prec = NPUX_PREC_GRAY,
    .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED, .parse = parse, .run = run}; /* its output is parse's */
