/*
 * op_host_func.c — host_func: a function of the host (a Lua function, a C callback) as a step
 * of the graph, as tf.numpy_function puts Python into one.  Inputs: any number of values;
 * outputs: one per dtype of attribute Tout (a list of npu_dtype values, 1..16), of shapes known
 * only when the step runs (unknown rank at compile time: NPUX_F_DATA_SHAPE, never folded).
 * Attribute key (int): the host's name for the function, handed back to it.
 *
 * The step calls npu_run_options.host_op of the run (npuX_call.run) on the thread that runs,
 * with the inputs as they are (borrowed); the host returns new tensors, whose dtypes must be
 * Tout's, copied into the step's outputs.  A host error fails the run with NPU_ERR_CALLBACK
 * naming the node and carrying the host's message.  No gradient; gray list, but the precision
 * pass leaves its operands in the graph's dtypes: the host sees and returns what the graph
 * says, whatever the precision mode (float16 inputs are cast back for it).
 */
#include <string.h>

#include "ops/ops.h"

typedef struct host_params {
  int64_t key;
  int n_out;
  npu_dtype tout[NPUX_MAX_OUTPUTS];
} host_params;
_Static_assert(sizeof(host_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  host_params *p = params;
  if (!npuG_attr_find(ic->node, "key"))
    return npuX_error(ic, NPU_ERR_ARG, "attribute 'key' (the host's function) is required");
  npu_status st = npuX_attr_int(ic, "key", &p->key);
  int64_t tout[NPUX_MAX_OUTPUTS];
  int n = 0;
  if (!st) st = npuX_attr_ints(ic, "Tout", tout, NPUX_MAX_OUTPUTS, &n);
  if (!st && n < 1)
    st = npuX_error(ic, NPU_ERR_ARG, "attribute 'Tout' must list 1 to %d output dtypes",
                    NPUX_MAX_OUTPUTS);
  for (int i = 0; !st && i < n; i++) {
    if (tout[i] < 0 || tout[i] >= NPU_DTYPE_COUNT)
      st = npuX_error(ic, NPU_ERR_DTYPE, "Tout[%d] = %lld is not a dtype", i + 1,
                      (long long)tout[i]);
    p->tout[i] = (npu_dtype)tout[i];
  }
  p->n_out = n;
  ic->n_outputs = n > 0 ? n : 1;
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const host_params *p = params;
  ic->n_outputs = p->n_out;
  for (int i = 0; i < p->n_out; i++) ic->out[i] = (npuG_value){.dtype = p->tout[i], .ndim = -1};
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const host_params *p = c->params;
  const char *name = c->node->name;
  if (!c->run || !c->run->host_op)
    return npuC_error(c->ctx, NPU_ERR_STATE, "host_func '%s': this run has no host callback "
                      "(npu_run_options.host_op)", name);
  /* Only what is read back is cleared: the outputs the callback may leave unset, and the
     message's first byte (it writes a NUL-terminated reason or nothing).  An initializer would
     zero-fill the whole ~1 KB message buffer on every call, inside loops too. */
  npu_tensor *got[NPUX_MAX_OUTPUTS];
  for (int i = 0; i < p->n_out; i++) got[i] = NULL;
  char why[NPU_ERRMSG_SIZE - 64];
  why[0] = 0;
  npu_status st = c->run->host_op(c->run->host_ud, p->key, c->n_inputs, c->in, p->n_out,
                                  p->tout, got, why, sizeof why);
  why[sizeof why - 1] = 0; /* a callback that filled it to the brim still ends here */
  if (st)
    st = npuC_error(c->ctx, NPU_ERR_CALLBACK, "host_func '%s': %s", name,
                    *why ? why : npu_status_name(st));
  for (int i = 0; !st && i < p->n_out; i++) {
    if (!got[i])
      st = npuC_error(c->ctx, NPU_ERR_CALLBACK, "host_func '%s': no output %d", name, i + 1);
    else if (got[i]->dtype != p->tout[i])
      st = npuC_error(c->ctx, NPU_ERR_DTYPE, "host_func '%s': output %d is %s, Tout says %s",
                      name, i + 1, npu_dtype_name(got[i]->dtype), npu_dtype_name(p->tout[i]));
    if (!st) st = npuX_output(c, i, got[i]->ndim, got[i]->shape);
    if (!st && c->out[i]->nbytes != got[i]->nbytes) /* the plan stores outputs as Tout says */
      st = npuC_error(c->ctx, NPU_ERR_INTERNAL, "host_func '%s': output %d is stored as %s, "
                      "not %s", name, i + 1, npu_dtype_name(c->out[i]->dtype),
                      npu_dtype_name(got[i]->dtype));
    if (!st && got[i]->nbytes) memcpy(c->out[i]->data, got[i]->data, got[i]->nbytes);
  }
  for (int i = 0; i < p->n_out; i++) npu_tensor_release(got[i]);
  return st;
}

const npu_op_def npuX_op_host_func = {
    .name = "host_func", .tf_type = "HostFunc", .min_inputs = 0, .max_inputs = -1,
    .n_outputs = -1, .prec = NPUX_PREC_GRAY,
    .flags = NPUX_F_DATA_SHAPE | NPUX_F_NO_FOLD | NPUX_F_SUMMARY, .parse = parse, .infer = infer,
    .run = run};
