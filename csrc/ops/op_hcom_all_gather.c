/*
 * op_hcom_all_gather.c — hcom_all_gather: y = the ranks' x concatenated along dim 0 in rank
 * order (HCCL's HcomAllGather, hccl_ops.allgather(tensor, rank_size, group)).  x (n, ...) ->
 * y (n * rank_size, ...); rank_size must be the number of ranks (checked when it runs).
 */
#include "ops/hcom.h"

static npu_status parse(npuX_infer *ic, void *params) {
  return npuX_hcom_parse(ic, params, NPUX_HCOM_RANK_SIZE);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const npuX_hcom_params *p = params;
  npu_status st = npuX_hcom_check_dtypes(ic, 0);
  if (st) return st;
  char sh[96];
  if (ic->in[0].ndim == 0)
    return npuX_error(ic, NPU_ERR_SHAPE, "needs a tensor of rank >= 1, got %s",
                      npuX_shape(sh, &ic->in[0]));
  npuX_same_as_input(ic, 0);
  if (ic->out[0].ndim > 0 && ic->out[0].shape[0] >= 0) ic->out[0].shape[0] *= p->rank_size;
  return NPU_OK;
}

static npu_status run(const npuX_call *c) { return npuX_hcom_run(c, NPUX_COLL_ALLGATHER, 0); }

const npu_op_def npuX_op_hcom_all_gather = {
    .name = "hcom_all_gather", .tf_type = "HcomAllGather", .args = "rank_size",
    .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_GRAY,
    .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED, .parse = parse, .infer = infer, .run = run};
