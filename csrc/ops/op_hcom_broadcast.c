/*
 * op_hcom_broadcast.c — hcom_broadcast: outputs = root_rank's inputs, on every rank (HCCL's
 * HcomBroadcast, hccl_ops.broadcast(tensors, root_rank, fusion, fusion_id, group)).  Any number
 * of tensors of one dtype (float32, float16, int32); output i has input i's shape.
 */
#include "ops/hcom.h"

static npu_status parse(npuX_infer *ic, void *params) {
  ic->n_outputs = ic->n_inputs;
  return npuX_hcom_parse(ic, params, NPUX_HCOM_ROOT);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  if (ic->n_inputs > NPUX_MAX_OUTPUTS)
    return npuX_error(ic, NPU_ERR_ARG, "at most %d tensors, got %d", NPUX_MAX_OUTPUTS,
                      ic->n_inputs);
  npu_status st = npuX_hcom_check_dtypes(ic, 0);
  ic->n_outputs = ic->n_inputs;
  for (int i = 0; !st && i < ic->n_inputs; i++) ic->out[i] = ic->in[i];
  for (int i = 0; !st && i < ic->n_inputs; i++) ic->out[i].node = -1;
  return st;
}

static npu_status run(const npuX_call *c) { return npuX_hcom_run(c, NPUX_COLL_BROADCAST, 0); }

const npu_op_def npuX_op_hcom_broadcast = {
    .name = "hcom_broadcast", .tf_type = "HcomBroadcast", .args = "root_rank", .min_inputs = 1,
    .max_inputs = -1, .n_outputs = -1, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED,
    .parse = parse, .infer = infer, .run = run};
