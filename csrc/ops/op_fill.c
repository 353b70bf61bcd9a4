/*
 * op_fill.c — fill: a tensor of shape dims, every element value (TensorFlow Fill).
 * Operands, in TensorFlow's order: dims (ints >= 0) and value (a number); each an attribute
 * or an input (operands.h: no data inputs, so the inputs give, in order, those not given as
 * attributes: TF's Fill(dims, value) imports as is).  Lua: g:op("fill", {}, {dims = {2, 3},
 * value = 1.5}), or the value as an input: g:op("fill", {v}, {dims = {2, 3}}) (npu.fill is
 * the tensor constructor).  A dims input must be int32/int64 and known by compile time.
 * dtype: the value input's; else attribute dtype (or TF's T); else int32 for an integer
 * value, bool for a boolean, float32 otherwise.  Gray list.
 * Kernel: the value converted once (npuK_cast), then npuK_broadcast_to with zero strides.
 */
#include "ops/operands.h"

static const char *const operand_names[] = {"dims", "value"};

typedef struct fill_params {
  npuX_operands o;
  npu_dtype dtype;
  bool is_int;
  int64_t ivalue;
  double value;
  int n;
  int64_t dims[NPU_MAX_DIMS];
} fill_params;
_Static_assert(sizeof(fill_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  fill_params *p = params;
  npu_status st = npuX_operands_bind(ic, operand_names, 2, 0, 0, &p->o);
  if (st) return st;
  if (p->o.slot[0] == NPUX_OPERAND_ABSENT || p->o.slot[1] == NPUX_OPERAND_ABSENT)
    return npuX_error(ic, NPU_ERR_ARG, "dims and value are required (attributes or inputs)");
  if (p->o.slot[0] == NPUX_OPERAND_ATTR &&
      (st = npuX_attr_ints(ic, "dims", p->dims, NPU_MAX_DIMS, &p->n)))
    return st;
  bool known;
  p->dtype = NPU_DTYPE_COUNT;
  if ((st = npuX_operand_scalar(ic, &p->o, operand_names, 1, &p->value, &p->ivalue, &p->is_int,
                                &known)))
    return st;
  const npuG_attr *given = npuX_attr_find(ic, "dtype");
  st = npuX_attr_dtype(ic, given ? "dtype" : "T", &p->dtype);
  if (st) return st;
  if (p->o.slot[1] >= 0) {
    npu_dtype t = ic->in[p->o.slot[1]].dtype;
    if (p->dtype != NPU_DTYPE_COUNT && p->dtype != t)
      return npuX_error(ic, NPU_ERR_DTYPE, "dtype %s differs from the value input's %s",
                        npu_dtype_name(p->dtype), npu_dtype_name(t));
    p->dtype = t;
  } else if (p->dtype == NPU_DTYPE_COUNT) {
    const npuG_attr *a = npuX_attr_find(ic, "value");
    p->dtype = a->type == NPU_ATTR_BOOL ? NPU_DTYPE_BOOL
               : p->is_int          ? NPU_DTYPE_I32
                                    : NPU_DTYPE_F32;
  }
  return NPU_OK;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const fill_params *p = params;
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = p->dtype, .ndim = -1};
  int64_t dims[NPU_MAX_DIMS];
  int n;
  bool known;
  npu_status st = npuX_operand_ints(ic, &p->o, operand_names, 0, dims, NPU_MAX_DIMS, &n, &known);
  if (st) return st;
  if (p->o.slot[1] >= 0) { /* the value input: a scalar (checked by the getter) */
    double v;
    int64_t iv;
    bool is_int, k;
    if ((st = npuX_operand_scalar(ic, &p->o, operand_names, 1, &v, &iv, &is_int, &k))) return st;
  }
  y->ndim = n;
  char sd[96];
  for (int i = 0; i < n; i++) {
    y->shape[i] = known ? dims[i] : -1;
    if (known && dims[i] < 0)
      return npuX_error(ic, NPU_ERR_SHAPE, "dims %s must be >= 0",
                        npuC_shape_str(sd, sizeof sd, n, dims));
  }
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const fill_params *p = c->params;
  npu_tensor *y = c->out[0];
  _Alignas(16) unsigned char one[16];
  int rc;
  if (p->o.slot[1] >= 0) {
    const npu_tensor *v = c->in[p->o.slot[1]];
    rc = npuK_cast(NULL, 1, (npuK_dtype)v->dtype, v->data, (npuK_dtype)y->dtype, one);
  } else if (p->is_int) {
    rc = npuK_cast(NULL, 1, NPUK_I64, &p->ivalue, (npuK_dtype)y->dtype, one);
  } else {
    rc = npuK_cast(NULL, 1, NPUK_F64, &p->value, (npuK_dtype)y->dtype, one);
  }
  if (rc)
    return npuC_error(c->ctx, NPU_ERR_DTYPE, "fill '%s': no conversion to %s", c->node->name,
                      npu_dtype_name(y->dtype));
  int64_t zero[NPU_MAX_DIMS] = {0};
  npuK_broadcast_to(c->pool, npu_dtype_size(y->dtype), y->ndim, y->shape, zero, one, y->data);
  return NPU_OK;
}

const npu_op_def npuX_op_fill = {
    .name = "fill", .tf_type = "Fill", .args = "dims,value", .min_inputs = 0, .max_inputs = 2,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer, .run = run,
    .tf_const_inputs = "dims,value", .tf_const_inputs_first = true};
