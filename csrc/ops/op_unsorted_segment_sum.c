/*
 * op_unsorted_segment_sum.c — unsorted_segment_sum: the rows of data added into the segments
 * their ids name (TensorFlow UnsortedSegmentSum), the scatter-add that is gather's gradient.
 * Inputs data (float) and segment_ids (int32/int64, shape a prefix of data's); operand
 * num_segments (an integer >= 0): attribute, or TensorFlow's input 3 (operands.h), known by
 * the time the step runs (a value fed or computed works: the step is then shaped when it runs).
 * y is [num_segments] + data.shape[rank(segment_ids):]: y[s] = the sum of the data rows whose
 * id is s (ascending row order), zero for a segment no row names; a negative id drops its row,
 * an id >= num_segments is NPU_ERR_ARG naming the position.  float16 / bfloat16 sum in float32.
 * Gradient: d data = gather(dy, segment_ids).  Kernel: npuK_unsorted_segment_sum (kgrad.h).
 */
#include "ops/grad.h"
#include "ops/operands.h"

static const char *const operand_names[] = {"num_segments"};

typedef struct uss_params {
  npuX_operands o;
} uss_params;
_Static_assert(sizeof(uss_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  uss_params *p = params;
  return npuX_operands_bind(ic, operand_names, 1, 2, 0, &p->o);
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype floats[] = {NPU_DTYPE_F32, NPU_DTYPE_F64, NPU_DTYPE_F16, NPU_DTYPE_BF16,
                                     NPU_DTYPE_COUNT};
  static const npu_dtype ints[] = {NPU_DTYPE_I32, NPU_DTYPE_I64, NPU_DTYPE_COUNT};
  const uss_params *p = params;
  const npuG_value *x = &ic->in[0], *ids = &ic->in[1];
  npuG_value *y = &ic->out[0];
  *y = (npuG_value){.dtype = x->dtype, .ndim = -1};
  npu_status st = npuX_check_dtype(ic, 0, floats);
  if (!st) st = npuX_check_dtype(ic, 1, ints);
  double v;
  int64_t n = -1;
  bool is_int = true, known = true;
  if (!st && p->o.slot[0] == NPUX_OPERAND_ABSENT)
    st = npuX_error(ic, NPU_ERR_ARG, "num_segments is required (attribute or input 3)");
  if (!st) st = npuX_operand_scalar(ic, &p->o, operand_names, 0, &v, &n, &is_int, &known);
  if (st) return st;
  if (!is_int || (known && n < 0))
    return npuX_error(ic, NPU_ERR_ARG, "num_segments must be an integer >= 0, got %g", v);
  if (!known) n = -1;
  char sx[96], si[96];
  if (x->ndim < 0 || ids->ndim < 0) return NPU_OK;
  bool prefix = ids->ndim <= x->ndim;
  for (int d = 0; prefix && d < ids->ndim; d++)
    prefix = x->shape[d] < 0 || ids->shape[d] < 0 || x->shape[d] == ids->shape[d];
  if (!prefix)
    return npuX_error(ic, NPU_ERR_SHAPE, "segment_ids %s must be a prefix of data's shape %s",
                      npuX_shape(si, ids), npuX_shape(sx, x));
  y->ndim = 1 + x->ndim - ids->ndim;
  y->shape[0] = n;
  for (int d = ids->ndim; d < x->ndim; d++) y->shape[1 + d - ids->ndim] = x->shape[d];
  return NPU_OK;
}

static size_t scratch_size(const npuX_call *c) {
  if (!npuX_is_half(c->in[0]->dtype)) return 0;
  return (size_t)(c->in[0]->numel + c->out[0]->numel) * sizeof(float);
}

static npu_status run(const npuX_call *c) {
  const npu_tensor *x = c->in[0], *ids = c->in[1];
  npu_tensor *y = c->out[0];
  int64_t rows = ids->numel, inner = 1;
  for (int d = ids->ndim; d < x->ndim; d++) inner *= x->shape[d];
  npuK_dtype t = (npuK_dtype)x->dtype;
  const void *xs = x->data;
  void *ys = y->data;
  if (npuX_is_half(x->dtype)) { /* widen, sum in float32, narrow */
    float *wx = c->scratch, *wy = wx + x->numel;
    npuK_cast(c->pool, x->numel, t, x->data, NPUK_F32, wx);
    xs = wx, ys = wy, t = NPUK_F32;
  }
  int64_t bad = npuK_unsorted_segment_sum(c->pool, t, rows, inner, y->shape[0], ids->data,
                                          npu_dtype_size(ids->dtype), xs, ys);
  if (bad >= 0) {
    int64_t id = ids->dtype == NPU_DTYPE_I64 ? ((const int64_t *)ids->data)[bad]
                                             : ((const int32_t *)ids->data)[bad];
    return npuC_error(c->ctx, NPU_ERR_ARG, "unsorted_segment_sum '%s': segment_ids[%lld] = %lld "
                      "is not below num_segments %lld", c->node->name, (long long)bad,
                      (long long)id, (long long)y->shape[0]);
  }
  if (ys != y->data) npuK_cast(c->pool, y->numel, NPUK_F32, ys, (npuK_dtype)y->dtype, y->data);
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  gc->dx[0] = npuX_g2(gc, "gather", gc->dy[0], gc->x[1]);
  return gc->status;
}

const npu_op_def npuX_op_unsorted_segment_sum = {
    .name = "unsorted_segment_sum", .tf_type = "UnsortedSegmentSum", .args = "num_segments",
    .min_inputs = 2, .max_inputs = 3, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse,
    .infer = infer, .scratch_size = scratch_size, .run = run, .grad = grad,
    .tf_const_inputs = "num_segments"};
