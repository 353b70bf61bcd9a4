/*
 * op_loop_var.c — loop_var: inside a while loop's region, the current value of loop variable
 * `index` (0-based).  Attributes dtype (required), index (required, >= 0) and shape: the
 * variable's shape invariant, -1 for a dimension that may change between iterations; absent,
 * the variable keeps its initial value's shape (TensorFlow's default), which the compiler
 * reads from the value the loop starts with.  any_shape = true: rank and dims may change (a
 * TensorArray's buffer, which its first write shapes).  No inputs; the executor sets it (exec/control.c).
 */
#include "ops/ops.h"

typedef struct loop_var_params {
  int64_t index;
  bool has_shape; /* shape invariant given */
} loop_var_params;
_Static_assert(sizeof(loop_var_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  loop_var_params *p = params;
  p->index = -1;
  npu_status st = npuX_attr_int(ic, "index", &p->index);
  if (!st && p->index < 0)
    st = npuX_error(ic, NPU_ERR_ARG, "attribute 'index' (the loop variable's position) must be "
                                     "given, an integer >= 0");
  bool any = false;
  if (!st) st = npuX_attr_bool(ic, "any_shape", &any);
  p->has_shape = any || npuX_attr_find(ic, "shape") != NULL;
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const loop_var_params *p = params;
  npuG_value *y = &ic->out[0];
  y->dtype = NPU_DTYPE_COUNT;
  npu_status st = npuX_attr_dtype(ic, "dtype", &y->dtype);
  if (!st && y->dtype == NPU_DTYPE_COUNT)
    st = npuX_error(ic, NPU_ERR_ARG, "attribute 'dtype' is required");
  y->ndim = -1;
  if (!st && p->has_shape && npuX_attr_find(ic, "shape")) {
    int n = 0;
    st = npuX_attr_ints(ic, "shape", y->shape, NPU_MAX_DIMS, &n);
    y->ndim = n;
    for (int i = 0; !st && i < n; i++)
      if (y->shape[i] < -1)
        st = npuX_error(ic, NPU_ERR_ARG, "attribute 'shape': dimension %d is %lld (-1 = any)", i,
                        (long long)y->shape[i]);
  }
  return st;
}

const npu_op_def npuX_op_loop_var = {.name = "loop_var", .tf_type = "NpuLoopVar",
                                     .min_inputs = 0, .max_inputs = 0, .n_outputs = 1,
                                     .kind = NPUX_KIND_LOOP_VAR, .flags = NPUX_F_NO_FOLD,
                                     .parse = parse, .infer = infer};

int npuX_loop_var_index(const npuG_node *node) {
  return (int)((const loop_var_params *)node->params.bytes)->index;
}
bool npuX_loop_var_has_shape(const npuG_node *node) {
  return ((const loop_var_params *)node->params.bytes)->has_shape;
}
