/*
 * op_identity_n.c — identity_n: its N inputs, unchanged, as N outputs (TensorFlow IdentityN,
 * 1..16 values of any dtypes).  Graphs use it to give several values one node name; the
 * GraphDef importer also builds one for NonMaxSuppressionV5, whose three outputs come from
 * different nodes here (io/graphdef.c).  Lua: a list of inputs, a list of outputs.
 * Gray list.  Device: a copy per input (the executor's no-copy identity passes one value).
 * Gradient: each dy to its input.
 */
#include <string.h>

#include "ops/grad.h"

static npu_status parse(npuX_infer *ic, void *params) {
  (void)params;
  if (ic->n_inputs < 1 || ic->n_inputs > NPUX_MAX_OUTPUTS)
    return npuX_error(ic, ic->n_inputs < 1 ? NPU_ERR_ARG : NPU_ERR_UNSUPPORTED,
                      "takes 1..%d inputs, got %d", NPUX_MAX_OUTPUTS, ic->n_inputs);
  ic->n_outputs = ic->n_inputs;
  return NPU_OK;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  ic->n_outputs = ic->n_inputs;
  for (int i = 0; i < ic->n_inputs; i++) ic->out[i] = ic->in[i];
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  for (int i = 0; i < c->n_inputs; i++)
    if (c->in[i]->nbytes) memcpy(c->out[i]->data, c->in[i]->data, c->in[i]->nbytes);
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  for (int i = 0; i < gc->n_inputs; i++) gc->dx[i] = gc->dy[i];
  return NPU_OK;
}

const npu_op_def npuX_op_identity_n = {
    .name = "identity_n", .tf_type = "IdentityN", .min_inputs = 1, .max_inputs = -1,
    .n_outputs = -1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer, .run = run,
    .grad = grad};
