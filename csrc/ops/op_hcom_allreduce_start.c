/*
 * op_hcom_allreduce_start.c — hcom_allreduce_start: starts one allreduce of a bucket of
 * tensors (any number, one dtype: float32, float16, int32) sent as one buffer, and returns its
 * ticket (an int64 scalar) for hcom_allreduce_wait.  The inputs are copied when it starts, so
 * the allreduce runs on the communicator's thread while the device goes on with other steps:
 * npu.train's distributed optimizer puts one pair per gradient bucket, and hcom_parallel
 * (NPUX_F_EARLY) moves each start up to just after the step making its last gradient.
 * Attribute reduction as hcom_allreduce's.
 */
#include <string.h>

#include "ops/hcom.h"

static npu_status parse(npuX_infer *ic, void *params) {
  return npuX_hcom_parse(ic, params, NPUX_HCOM_REDUCTION);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  npu_status st = npuX_hcom_check_dtypes(ic, 0);
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.node = -1, .dtype = NPU_DTYPE_I64, .ndim = 0};
  return st;
}

static npu_status run(const npuX_call *c) {
  const npuX_hcom_params *p = c->params;
  const char *op = npuX_op(c->node->op)->name;
  if (!c->comm)
    return npuC_error(c->ctx, NPU_ERR_STATE, "%s '%s': no communicator (collectives run in a "
                      "session)", op, c->node->name);
  npuX_coll coll = {.kind = NPUX_COLL_ALLREDUCE, .reduction = p->reduction, .n = c->n_inputs,
                    .in = (const npu_tensor *const *)c->in, .op = op, .node = c->node->name,
                    .group = p->group[0] ? p->group : NULL};
  int64_t ticket = 0;
  npu_status st = c->comm->start(c->comm, c->ctx, &coll, &ticket);
  if (!st) memcpy(c->out[0]->data, &ticket, sizeof ticket);
  return st;
}

const npu_op_def npuX_op_hcom_allreduce_start = {
    .name = "hcom_allreduce_start", .tf_type = "HcomAllReduceStart", .args = "reduction",
    .min_inputs = 1, .max_inputs = -1, .n_outputs = 1, .prec = NPUX_PREC_GRAY,
    .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED | NPUX_F_EARLY, .parse = parse, .infer = infer, .run = run};
