/*
 * op_hcom_reduce_scatter.c — hcom_reduce_scatter: x reduced over every rank, then split along
 * dim 0 into rank_size equal parts, rank r keeping part r (HCCL's HcomReduceScatter,
 * hccl_ops.reduce_scatter(tensor, reduction, rank_size, group)).  x (n, ...) -> y
 * (n / rank_size, ...); n must divide evenly; rank_size must be the number of ranks.
 */
#include "ops/hcom.h"

static npu_status parse(npuX_infer *ic, void *params) {
  return npuX_hcom_parse(ic, params, NPUX_HCOM_REDUCTION | NPUX_HCOM_RANK_SIZE);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const npuX_hcom_params *p = params;
  npu_status st = npuX_hcom_check_dtypes(ic, 0);
  if (st) return st;
  char sh[96];
  const npuG_value *x = &ic->in[0];
  if (x->ndim == 0)
    return npuX_error(ic, NPU_ERR_SHAPE, "needs a tensor of rank >= 1, got %s",
                      npuX_shape(sh, x));
  if (x->ndim > 0 && x->shape[0] >= 0 && x->shape[0] % p->rank_size)
    return npuX_error(ic, NPU_ERR_SHAPE, "dim 0 of %s does not split into rank_size = %lld "
                      "equal parts", npuX_shape(sh, x), (long long)p->rank_size);
  npuX_same_as_input(ic, 0);
  if (ic->out[0].ndim > 0 && ic->out[0].shape[0] >= 0) ic->out[0].shape[0] /= p->rank_size;
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  return npuX_hcom_run(c, NPUX_COLL_REDUCE_SCATTER, 0);
}

const npu_op_def npuX_op_hcom_reduce_scatter = {
    .name = "hcom_reduce_scatter", .tf_type = "HcomReduceScatter", .args = "reduction,rank_size",
    .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_GRAY,
    .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED, .parse = parse, .infer = infer, .run = run};
