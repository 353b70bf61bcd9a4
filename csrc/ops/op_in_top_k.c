/*
 * op_in_top_k.c — in_top_k: y[b] = whether targets[b] is among the k largest of
 * predictions[b, :] (TensorFlow InTopKV2, and InTopK whose k is an attribute).
 * predictions (batch, classes) float32; targets (batch) int32 or int64; y (batch) bool.
 * Operand k (an int): attribute (also positional: npu.in_top_k(p, t, 5)) or TF's trailing
 * input 3 (operands.h; read when the graph runs, so it may be any int32/int64 scalar).
 * Ties as TensorFlow: a target is in when FEWER than k classes score strictly more than it
 * (so with ties more than k classes can be "in"); a non-finite prediction for the target, or a
 * target outside [0, classes), gives false.  Block list (compares floats).  No gradient.
 * Kernel: npuK_in_top_k_f32 (kernels/kimport.h).
 */
#include "kernels/kimport.h"
#include "ops/operands.h"

static const char *const operand_names[] = {"k"};

typedef struct in_top_k_params {
  npuX_operands o;
  int64_t k;
} in_top_k_params;
_Static_assert(sizeof(in_top_k_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  in_top_k_params *p = params;
  npu_status st = npuX_operands_bind(ic, operand_names, 1, 2, 0, &p->o);
  if (st) return st;
  if (p->o.slot[0] == NPUX_OPERAND_ABSENT)
    return npuX_error(ic, NPU_ERR_ARG, "k is required (attribute or input 3)");
  if (p->o.slot[0] == NPUX_OPERAND_ATTR) st = npuX_attr_int(ic, "k", &p->k);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype preds[] = {NPU_DTYPE_F32, NPU_DTYPE_COUNT};
  static const npu_dtype idx[] = {NPU_DTYPE_I32, NPU_DTYPE_I64, NPU_DTYPE_COUNT};
  const in_top_k_params *p = params;
  const npuG_value *x = &ic->in[0], *t = &ic->in[1];
  npu_status st = npuX_check_dtype(ic, 0, preds);
  if (!st) st = npuX_check_dtype(ic, 1, idx);
  if (st) return st;
  if (p->o.slot[0] >= 0) {
    const npuG_value *k = &ic->in[p->o.slot[0]];
    if (k->dtype != NPU_DTYPE_I32 && k->dtype != NPU_DTYPE_I64)
      return npuX_error(ic, NPU_ERR_DTYPE, "k is %s: int32 or int64", npu_dtype_name(k->dtype));
    if (k->ndim > 0 && !(k->ndim == 1 && k->shape[0] == 1))
      return npuX_error(ic, NPU_ERR_SHAPE, "k must be a scalar");
  }
  char sx[96], st_[96];
  if ((x->ndim >= 0 && x->ndim != 2) || (t->ndim >= 0 && t->ndim != 1) ||
      (x->ndim == 2 && t->ndim == 1 && x->shape[0] >= 0 && t->shape[0] >= 0 &&
       x->shape[0] != t->shape[0]))
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "predictions must be (batch, classes) and targets (batch), got %s and %s",
                      npuX_shape(sx, x), npuX_shape(st_, t));
  ic->n_outputs = 1;
  int64_t batch = x->ndim == 2 && x->shape[0] >= 0 ? x->shape[0] : t->ndim == 1 ? t->shape[0] : -1;
  ic->out[0] = (npuG_value){.dtype = NPU_DTYPE_BOOL, .ndim = 1, .shape = {batch}};
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const in_top_k_params *p = c->params;
  const npu_tensor *x = c->in[0], *t = c->in[1];
  int64_t k = p->k;
  if (p->o.slot[0] >= 0) {
    double unused;
    npuX_tensor_scalar(c->in[p->o.slot[0]], &unused, &k);
  }
  npuK_in_top_k_f32(c->pool, x->shape[0], x->shape[1], k, x->data, t->data,
                    t->dtype == NPU_DTYPE_I64, c->out[0]->data);
  return NPU_OK;
}

const npu_op_def npuX_op_in_top_k = {
    .name = "in_top_k", .tf_type = "InTopKV2", .args = "k", .min_inputs = 2, .max_inputs = 3,
    .n_outputs = 1, .prec = NPUX_PREC_BLOCK, .parse = parse, .infer = infer, .run = run,
    .tf_const_inputs = "k"};
