/*
 * op_random_uniform.c — random_uniform: a tensor of uniform values in [minval, maxval)
 * (TensorFlow RandomUniform, plus its minval/maxval scaling).  The shape is the attribute
 * shape (ints >= 0) or input 1 (an int32/int64 rank-1 tensor that must be known when the
 * graph is compiled, e.g. shape(x): dropout's masks).  Attributes: dtype (a float dtype,
 * default float32), minval (0), maxval (1), seed (default 0).
 * Stateful: draw k of a session (k = the number of plan iterations that session ran before,
 * npuX_call.step) uses the generator of npu.random.uniform (core/random.c) seeded with
 * npuC_random_stream_seed(seed, k); so the first run of a new session gives exactly
 * npu.random.uniform(shape, {seed = seed}), and every session replays the same sequence.
 * Never folded at compile time (NPUX_F_NO_FOLD).  Gray list.  No gradient (no float input).
 */
#include <math.h>

#include "ops/ops.h"

typedef struct random_params {
  bool from_input;
  int ndim;
  npu_dtype dtype;
  double minval, maxval;
  int64_t seed;
  int64_t shape[NPU_MAX_DIMS];
} random_params;
_Static_assert(sizeof(random_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  random_params *p = params;
  p->dtype = NPU_DTYPE_F32;
  p->maxval = 1;
  npu_status st = npuX_attr_dtype(ic, "dtype", &p->dtype);
  if (!st) st = npuX_attr_float(ic, "minval", &p->minval);
  if (!st) st = npuX_attr_float(ic, "maxval", &p->maxval);
  if (!st) st = npuX_attr_int(ic, "seed", &p->seed);
  if (st) return st;
  if (p->dtype != NPU_DTYPE_F32 && p->dtype != NPU_DTYPE_F64 && p->dtype != NPU_DTYPE_F16 &&
      p->dtype != NPU_DTYPE_BF16)
    return npuX_error(ic, NPU_ERR_DTYPE, "dtype %s is not a float dtype", npu_dtype_name(p->dtype));
  if (!(isfinite(p->minval) && isfinite(p->maxval) && p->minval <= p->maxval))
    return npuX_error(ic, NPU_ERR_ARG, "need finite minval <= maxval, got %g and %g", p->minval,
                      p->maxval);
  const bool attr = npuX_attr_find(ic, "shape") != NULL;
  p->from_input = ic->n_inputs == 1;
  if (p->from_input == attr)
    return npuX_error(ic, NPU_ERR_ARG, "give the shape either as attribute 'shape' or as input 1");
  if (attr) {
    st = npuX_attr_ints(ic, "shape", p->shape, NPU_MAX_DIMS, &p->ndim);
    for (int i = 0; !st && i < p->ndim; i++)
      if (p->shape[i] < 0) st = npuX_error(ic, NPU_ERR_SHAPE, "shape entries must be >= 0");
  }
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype ints[] = {NPU_DTYPE_I32, NPU_DTYPE_I64, NPU_DTYPE_COUNT};
  const random_params *p = params;
  npuG_value *y = &ic->out[0];
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = p->dtype, .ndim = p->ndim};
  if (!p->from_input) {
    for (int i = 0; i < p->ndim; i++) y->shape[i] = p->shape[i];
    return NPU_OK;
  }
  npu_status st = npuX_check_dtype(ic, 0, ints);
  if (st) return st;
  const npuG_value *s = &ic->in[0];
  char ss[96];
  if (s->ndim >= 0 && (s->ndim != 1 || s->shape[0] > NPU_MAX_DIMS))
    return npuX_error(ic, NPU_ERR_SHAPE, "the shape input must be rank 1 with at most %d "
                      "entries, got %s", NPU_MAX_DIMS, npuX_shape(ss, s));
  y->ndim = s->ndim == 1 ? (int)s->shape[0] : -1;
  for (int i = 0; i < y->ndim; i++) y->shape[i] = -1;
  const npu_tensor *t = ic->const_in ? ic->const_in[0] : NULL;
  if (t) {
    y->ndim = (int)t->numel;
    for (int i = 0; i < y->ndim; i++) {
      y->shape[i] = (int64_t)npu_tensor_get(t, i);
      if (y->shape[i] < 0) return npuX_error(ic, NPU_ERR_SHAPE, "shape entries must be >= 0");
    }
  }
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const random_params *p = c->params;
  npu_tensor *y = c->out[0];
  npuC_random_fill(false, y->dtype, y->numel, p->minval, p->maxval,
                   npuC_random_stream_seed((uint64_t)p->seed, c->step), y->data);
  return NPU_OK;
}

const npu_op_def npuX_op_random_uniform = {
    .name = "random_uniform", .tf_type = "RandomUniform", .min_inputs = 0, .max_inputs = 1,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED, .parse = parse,
    .infer = infer, .run = run, .tf_const_inputs = "shape"};
