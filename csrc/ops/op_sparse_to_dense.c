/*
 * op_sparse_to_dense.c — sparse_to_dense: a dense tensor of `output_shape` holding
 * default_value everywhere except at sparse_indices, which get sparse_values (TensorFlow
 * SparseToDense, tf.sparse_to_dense).  Inputs in TensorFlow's order: sparse_indices (int32 or
 * int64; rank 0: one index, rank 1 (N): N indices, both into a vector; rank 2 (N, D): N index
 * tuples into a rank-D output), then the operand output_shape (D ints >= 0: attribute, also
 * positional, or an input, operands.h: known by compile time), then sparse_values (a scalar
 * for every index, or N values) and default_value (a scalar), of one dtype, the output's.
 * Attribute validate_indices (default true): indices must be in strictly increasing row-major
 * order (no repeats), as TensorFlow checks; without it a repeated index keeps its last value.
 * An index outside output_shape is NPU_ERR_ARG at run time naming the node, the index and the
 * shape (TensorFlow's CPU kernel refuses it too).  Any dtype.  Gray list: moves data.
 * Kernel: npuK_sparse_to_dense (kernels/kimport.h; checks every index before writing).
 * No gradient (TensorFlow has none for the indices; values' is a gather: not needed yet).
 */
#include "kernels/kimport.h"
#include "ops/operands.h"

static const char *const operand_names[] = {"output_shape"};

typedef struct sparse_to_dense_params {
  npuX_operands o;
  bool validate;
  int n;
  int64_t shape[NPU_MAX_DIMS];
} sparse_to_dense_params;
_Static_assert(sizeof(sparse_to_dense_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  sparse_to_dense_params *p = params;
  p->validate = true;
  npu_status st = npuX_attr_bool(ic, "validate_indices", &p->validate);
  if (st) return st;
  if (ic->n_inputs < 3)
    return npuX_error(ic, NPU_ERR_ARG, "needs sparse_indices, sparse_values and default_value "
                                       "(and output_shape as an attribute or input 2), got %d "
                                       "input(s)", ic->n_inputs);
  if ((st = npuX_operands_bind(ic, operand_names, 1, 1, 2, &p->o))) return st;
  if (p->o.slot[0] == NPUX_OPERAND_ABSENT)
    return npuX_error(ic, NPU_ERR_ARG, "output_shape is required (attribute or input 2)");
  if (p->o.slot[0] == NPUX_OPERAND_ATTR)
    st = npuX_attr_ints(ic, "output_shape", p->shape, NPU_MAX_DIMS, &p->n);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype ints[] = {NPU_DTYPE_I32, NPU_DTYPE_I64, NPU_DTYPE_COUNT};
  const sparse_to_dense_params *p = params;
  const npuG_value *idx = &ic->in[0], *val = &ic->in[ic->n_inputs - 2],
                   *def = &ic->in[ic->n_inputs - 1];
  npu_status st = npuX_check_dtype(ic, 0, ints);
  if (st) return st;
  if (val->dtype != def->dtype)
    return npuX_error(ic, NPU_ERR_DTYPE, "sparse_values are %s, default_value is %s",
                      npu_dtype_name(val->dtype), npu_dtype_name(def->dtype));
  char si[96], sv[96], ss[96];
  if (idx->ndim > 2 || val->ndim > 1 || def->ndim > 0)
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "sparse_indices %s must have rank <= 2, sparse_values %s rank <= 1, "
                      "default_value %s rank 0",
                      npuX_shape(si, idx), npuX_shape(sv, val), npuX_shape(ss, def));
  int64_t s[NPU_MAX_DIMS];
  int n;
  bool known;
  if ((st = npuX_operand_ints(ic, &p->o, operand_names, 0, s, NPU_MAX_DIMS, &n, &known)))
    return st;
  ic->n_outputs = 1;
  npuG_value *y = &ic->out[0];
  *y = (npuG_value){.dtype = val->dtype, .ndim = n};
  for (int i = 0; i < n; i++) y->shape[i] = known ? s[i] : -1;
  if (!known) return NPU_OK;
  for (int i = 0; i < n; i++)
    if (s[i] < 0)
      return npuX_error(ic, NPU_ERR_ARG, "output_shape %s must be >= 0",
                        npuC_shape_str(ss, sizeof ss, n, s));
  /* the index tuples' length and count, where known */
  int64_t depth = idx->ndim == 2 ? idx->shape[1] : idx->ndim >= 0 ? 1 : -1;
  int64_t count = idx->ndim == 2 ? idx->shape[0] : idx->ndim == 1 ? idx->shape[0] : 1;
  if (depth >= 0 && depth != n)
    return npuX_error(ic, NPU_ERR_SHAPE, "sparse_indices %s index %lld dim(s), output_shape %s "
                                         "has %d",
                      npuX_shape(si, idx), (long long)depth, npuC_shape_str(ss, sizeof ss, n, s), n);
  if (val->ndim == 1 && val->shape[0] >= 0 && idx->ndim >= 0 && count >= 0 && val->shape[0] != count)
    return npuX_error(ic, NPU_ERR_SHAPE, "sparse_values %s: one value per index (%lld) or a "
                                         "scalar",
                      npuX_shape(sv, val), (long long)count);
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const sparse_to_dense_params *p = c->params;
  const npu_tensor *idx = c->in[0], *val = c->in[c->n_inputs - 2], *def = c->in[c->n_inputs - 1];
  npu_tensor *y = c->out[0];
  int64_t depth = idx->ndim == 2 ? idx->shape[1] : 1;
  int64_t n = depth ? idx->numel / depth : 0;
  if (val->ndim == 1 && val->numel != n)
    return npuC_error(c->ctx, NPU_ERR_SHAPE,
                      "sparse_to_dense '%s': %lld sparse_values for %lld indices", c->node->name,
                      (long long)val->numel, (long long)n);
  int why;
  bool i64 = idx->dtype == NPU_DTYPE_I64;
  int64_t bad = npuK_sparse_to_dense(npu_dtype_size(y->dtype), y->ndim, y->shape, n, idx->data,
                                     i64, val->data, val->ndim == 1 ? 1 : 0, def->data,
                                     p->validate, y->data, &why);
  if (bad < 0) return NPU_OK;
  int64_t tuple[NPU_MAX_DIMS];
  for (int d = 0; d < depth && d < NPU_MAX_DIMS; d++)
    tuple[d] = i64 ? ((const int64_t *)idx->data)[bad * depth + d]
                   : ((const int32_t *)idx->data)[bad * depth + d];
  char st[96], sy[96];
  if (why == 1)
    return npuC_error(c->ctx, NPU_ERR_ARG,
                      "sparse_to_dense '%s': index %lld, %s, is outside the output shape %s",
                      c->node->name, (long long)bad,
                      npuC_shape_str(st, sizeof st, (int)depth, tuple),
                      npuC_shape_str(sy, sizeof sy, y->ndim, y->shape));
  return npuC_error(c->ctx, NPU_ERR_ARG,
                    "sparse_to_dense '%s': index %lld, %s, %s (validate_indices=false allows "
                    "it)",
                    c->node->name, (long long)bad, npuC_shape_str(st, sizeof st, (int)depth, tuple),
                    why == 2 ? "repeats the index before it"
                             : "is out of order (indices must increase, row-major)");
}

const npu_op_def npuX_op_sparse_to_dense = {
    .name = "sparse_to_dense", .tf_type = "SparseToDense", .args = "output_shape",
    .min_inputs = 1, .max_inputs = 4, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse,
    .infer = infer, .run = run, .tf_const_inputs = "output_shape"};
