/*
 * op_hcom_allreduce_wait.c — hcom_allreduce_wait(ticket, x1, ..., xn): waits for the
 * allreduce hcom_allreduce_start began (its ticket) and returns its results, y_i of x_i's
 * shape and dtype.  The x_i are the tensors given to the start (read for their shapes only).
 */
#include <string.h>

#include "ops/hcom.h"

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  if (ic->n_inputs < 2 || ic->n_inputs - 1 > NPUX_MAX_OUTPUTS)
    return npuX_error(ic, NPU_ERR_ARG, "takes a ticket and 1 to %d tensors, got %d inputs",
                      NPUX_MAX_OUTPUTS, ic->n_inputs);
  if (ic->in[0].dtype != NPU_DTYPE_I64 || ic->in[0].ndim != 0)
    return npuX_error(ic, NPU_ERR_ARG, "input 0 must be the int64 ticket of "
                      "hcom_allreduce_start");
  npu_status st = npuX_hcom_check_dtypes(ic, 1);
  ic->n_outputs = ic->n_inputs - 1;
  for (int i = 1; !st && i < ic->n_inputs; i++) {
    ic->out[i - 1] = ic->in[i];
    ic->out[i - 1].node = -1;
  }
  return st;
}

static npu_status parse(npuX_infer *ic, void *params) {
  (void)params;
  ic->n_outputs = ic->n_inputs > 1 ? ic->n_inputs - 1 : 1;
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  if (!c->comm)
    return npuC_error(c->ctx, NPU_ERR_STATE, "hcom_allreduce_wait '%s': no communicator "
                      "(collectives run in a session)", c->node->name);
  int64_t ticket;
  memcpy(&ticket, c->in[0]->data, sizeof ticket);
  return c->comm->finish(c->comm, c->ctx, ticket, c->pool, c->n_outputs, c->out);
}

const npu_op_def npuX_op_hcom_allreduce_wait = {
    .name = "hcom_allreduce_wait", .tf_type = "HcomAllReduceWait", .min_inputs = 2,
    .max_inputs = -1, .n_outputs = -1, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED,
    .parse = parse, .infer = infer, .run = run};
