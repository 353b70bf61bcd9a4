/*
 * op_hcom_allreduce.c — hcom_allreduce: y = x reduced elementwise over every rank (HCCL's
 * HcomAllReduce, hccl_ops.allreduce(tensor, reduction, fusion, fusion_id, group)); every rank
 * gets the same y.  reduction "sum" | "prod" | "max" | "min"; y has x's shape and dtype
 * (float32, float16, int32).  Under one process (rank size 1) y = x.
 */
#include "ops/hcom.h"

static npu_status parse(npuX_infer *ic, void *params) {
  return npuX_hcom_parse(ic, params, NPUX_HCOM_REDUCTION);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  npu_status st = npuX_hcom_check_dtypes(ic, 0);
  if (!st) npuX_same_as_input(ic, 0);
  return st;
}

static npu_status run(const npuX_call *c) { return npuX_hcom_run(c, NPUX_COLL_ALLREDUCE, 0); }

const npu_op_def npuX_op_hcom_allreduce = {
    .name = "hcom_allreduce", .tf_type = "HcomAllReduce", .args = "reduction", .min_inputs = 1,
    .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED,
    .parse = parse, .infer = infer, .run = run};
