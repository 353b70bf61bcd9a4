/*
 * op_where.c — where: the coordinates of the true (nonzero) elements of its input
 * (TensorFlow Where with one input; tf.where(cond, x, y) is select_v2).  Input cond of any
 * dtype and known rank r: bool, or numbers (x != 0: -0.0 is false, NaN true).  Output int64
 * (n, r), the coordinates in row-major order; n, the count, depends on the data
 * (NPUX_F_DATA_SHAPE): the step sizes it when it runs, and the ops it feeds are sized then
 * too.  A scalar input gives (0 or 1, 0).  Gray list; no gradient (integer output).
 * Kernels: npuK_count_nonzero, npuK_where (one implementation for both paths).
 */
#include "ops/ops.h"

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  const npuG_value *x = &ic->in[0];
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = NPU_DTYPE_I64, .ndim = 2, .shape = {-1, x->ndim}};
  if (x->ndim < 0) {
    char sx[96];
    return npuX_error(ic, NPU_ERR_SHAPE, "needs an input of known rank, got %s",
                      npuX_shape(sx, x));
  }
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *x = c->in[0];
  int64_t n = npuK_count_nonzero(x->numel, x->data, (npuK_dtype)x->dtype);
  int64_t shape[2] = {n, x->ndim};
  npu_status st = npuX_output(c, 0, 2, shape);
  if (!st) npuK_where(x->ndim, x->shape, x->data, (npuK_dtype)x->dtype, c->out[0]->data);
  return st;
}

const npu_op_def npuX_op_where = {
    .name = "where", .tf_type = "Where", .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,
    .prec = NPUX_PREC_GRAY, .flags = NPUX_F_DATA_SHAPE, .infer = infer, .run = run};
