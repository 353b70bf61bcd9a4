/*
 * op_range.c — range: start, start + delta, ... up to but not including limit (TensorFlow
 * Range, tf.range).  Operands start (default 0), limit (required) and delta (default 1), in
 * TensorFlow's order, each an attribute or an input (operands.h: no data inputs, so the
 * inputs give, in order, those not given as attributes: TF's Range(start, limit, delta)
 * imports as is).  Lua: g:op("range", {}, {limit = 5}) (npu.range is the tensor
 * constructor).  Inputs are scalars known by compile time: the length is their function.
 * dtype: attribute dtype (or TF's Tidx); else the inputs'; else int32 when every operand is
 * an integer, float32 otherwise.  float32, float64, int32, int64.
 * As TensorFlow: delta 0, or a delta pointing away from limit, is an error; the length is
 * ceil(|limit - start| / |delta|) (computed in the dtype); values accumulate (v += delta).
 * Gray list.  Kernel: npuK_range_<dtype>.
 */
#include <math.h>
#include <stdio.h>

#include "ops/operands.h"

static const char *const operand_names[] = {"start", "limit", "delta"};

/* The operands' values: doubles (and exact ints for integer dtypes). */
typedef struct range_values {
  double v[3];
  int64_t iv[3];
} range_values;

typedef struct range_params {
  npuX_operands o;
  npu_dtype dtype;
  range_values attr; /* the attributes' values and the defaults (start 0, delta 1) */
} range_params;
_Static_assert(sizeof(range_params) <= sizeof(npuG_params), "params too big");

static bool is_int(npu_dtype t) { return t == NPU_DTYPE_I32 || t == NPU_DTYPE_I64; }

/* The length, or -1 with err set. */
static int64_t range_length(npu_dtype t, const range_values *r, char *err, size_t size) {
  if (is_int(t)) {
    int64_t s = r->iv[0], l = r->iv[1], d = r->iv[2];
    if (d == 0 || (d > 0 && s > l) || (d < 0 && s < l)) goto bad;
    /* |l - s| without overflow: both in int64 */
    uint64_t span = d > 0 ? (uint64_t)l - (uint64_t)s : (uint64_t)s - (uint64_t)l;
    uint64_t step = d > 0 ? (uint64_t)d : (uint64_t)0 - (uint64_t)d;
    return (int64_t)(span / step + (span % step != 0));
  }
  double s = r->v[0], l = r->v[1], d = r->v[2], n;
  if (!(d != 0) || (d > 0 && s > l) || (d < 0 && s < l) || s != s || l != l) goto bad;
  if (t == NPU_DTYPE_F32) n = ceilf(fabsf(((float)l - (float)s) / (float)d));
  else n = ceil(fabs((l - s) / d));
  if (!(n < 9.0e18)) {
    snprintf(err, size, "the range is too long");
    return -1;
  }
  return (int64_t)n;
bad:
  snprintf(err, size, "start %g, limit %g, delta %g: delta must be nonzero and point from "
                      "start towards limit",
           r->v[0], r->v[1], r->v[2]);
  return -1;
}

static npu_status parse(npuX_infer *ic, void *params) {
  range_params *p = params;
  npu_status st = npuX_operands_bind(ic, operand_names, 3, 0, 0, &p->o);
  if (st) return st;
  if (p->o.slot[1] == NPUX_OPERAND_ABSENT)
    return npuX_error(ic, NPU_ERR_ARG, "limit is required (attribute or input)");
  p->dtype = NPU_DTYPE_COUNT;
  const npuG_attr *given = npuX_attr_find(ic, "dtype");
  if ((st = npuX_attr_dtype(ic, given ? "dtype" : "Tidx", &p->dtype))) return st;
  bool all_int = true;
  npu_dtype in_type = NPU_DTYPE_COUNT;
  p->attr = (range_values){.v = {0, 0, 1}, .iv = {0, 0, 1}};
  for (int k = 0; k < 3; k++) {
    int slot = p->o.slot[k];
    bool known, integral;
    if (slot == NPUX_OPERAND_ATTR &&
        (st = npuX_operand_scalar(ic, &p->o, operand_names, k, &p->attr.v[k], &p->attr.iv[k],
                                  &integral, &known)))
      return st;
    if (slot >= 0) {
      npu_dtype t = ic->in[slot].dtype;
      if (in_type != NPU_DTYPE_COUNT && t != in_type)
        return npuX_error(ic, NPU_ERR_DTYPE, "the inputs have different dtypes (%s and %s)",
                          npu_dtype_name(in_type), npu_dtype_name(t));
      in_type = t;
    } else if (slot == NPUX_OPERAND_ATTR) {
      all_int = all_int && npuX_attr_find(ic, operand_names[k])->type == NPU_ATTR_INT;
    }
  }
  if (p->dtype == NPU_DTYPE_COUNT)
    p->dtype = in_type != NPU_DTYPE_COUNT ? in_type : all_int ? NPU_DTYPE_I32 : NPU_DTYPE_F32;
  if (p->dtype != NPU_DTYPE_F32 && p->dtype != NPU_DTYPE_F64 && !is_int(p->dtype))
    return npuX_error(ic, NPU_ERR_DTYPE, "dtype %s: float32, float64, int32 or int64 only",
                      npu_dtype_name(p->dtype));
  return NPU_OK;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const range_params *p = params;
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = p->dtype, .ndim = 1, .shape = {-1}};
  range_values r = {.v = {0, 0, 1}, .iv = {0, 0, 1}};
  bool all_known = true;
  for (int k = 0; k < 3; k++) {
    bool known, integral;
    npu_status st = npuX_operand_scalar(ic, &p->o, operand_names, k, &r.v[k], &r.iv[k],
                                        &integral, &known);
    if (st) return st;
    all_known = all_known && known;
  }
  if (!all_known) return NPU_OK;
  char err[160];
  int64_t n = range_length(p->dtype, &r, err, sizeof err);
  if (n < 0) return npuX_error(ic, NPU_ERR_ARG, "%s", err);
  y->shape[0] = n;
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const range_params *p = c->params;
  npu_tensor *y = c->out[0];
  range_values r = p->attr;
  for (int k = 0; k < 3; k++)
    if (p->o.slot[k] >= 0) npuX_tensor_scalar(c->in[p->o.slot[k]], &r.v[k], &r.iv[k]);
  char err[160] = "";
  int64_t n = range_length(y->dtype, &r, err, sizeof err);
  if (n != y->numel)
    return npuC_error(c->ctx, NPU_ERR_SHAPE, "range '%s': %s", c->node->name,
                      n < 0 ? err : "the length changed since the compile");
  switch (y->dtype) {
  case NPU_DTYPE_F32: npuK_range_f32(n, (float)r.v[0], (float)r.v[2], y->data); break;
  case NPU_DTYPE_F64: npuK_range_f64(n, r.v[0], r.v[2], y->data); break;
  case NPU_DTYPE_I32: npuK_range_i32(n, (int32_t)r.iv[0], (int32_t)r.iv[2], y->data); break;
  default: npuK_range_i64(n, r.iv[0], r.iv[2], y->data); break;
  }
  return NPU_OK;
}

const npu_op_def npuX_op_range = {
    .name = "range", .tf_type = "Range", .args = "start,limit,delta", .min_inputs = 0,
    .max_inputs = 3, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer,
    .run = run, .tf_const_inputs = "start,limit,delta"};
