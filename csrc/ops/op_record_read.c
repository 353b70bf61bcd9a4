/*
 * op_record_read.c — record_read: one value back from a record (op_record_push.c).  Inputs
 * data, meta and iteration (an int32/int64 scalar); attributes dtype (required: the value's),
 * count (values pushed per iteration, >= 1), slot (this value's position among them) and
 * shape (optional: what is known of its shape before the run, -1 for a dim that may vary;
 * absent: rank and dims unknown, the step is shaped when it runs).  y is the value of meta row
 * iteration * count + slot, in the shape recorded there; zeros of that shape when it was
 * recorded by its shape alone.  A row outside meta, or a recorded shape that contradicts the
 * shape attribute, is NPU_ERR_ARG / NPU_ERR_SHAPE naming the node.
 */
#include <string.h>

#include "ops/ops.h"

typedef struct read_params {
  int64_t count, slot;
  int ndim; /* -1: no shape attribute */
  int64_t shape[NPU_MAX_DIMS];
  npu_dtype dtype;
} read_params;
_Static_assert(sizeof(read_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  read_params *p = params;
  p->count = 1, p->ndim = -1, p->dtype = NPU_DTYPE_COUNT;
  npu_status st = npuX_attr_int(ic, "count", &p->count);
  if (!st) st = npuX_attr_int(ic, "slot", &p->slot);
  if (!st) st = npuX_attr_dtype(ic, "dtype", &p->dtype);
  if (!st && npuG_attr_find(ic->node, "shape")) {
    int n = 0;
    st = npuX_attr_ints(ic, "shape", p->shape, NPU_MAX_DIMS, &n);
    p->ndim = n;
  }
  if (!st && p->dtype == NPU_DTYPE_COUNT)
    st = npuX_error(ic, NPU_ERR_ARG, "attribute 'dtype' is required");
  if (!st && (p->count < 1 || p->slot < 0 || p->slot >= p->count))
    st = npuX_error(ic, NPU_ERR_ARG, "need count >= 1 and 0 <= slot < count, got count %lld, "
                    "slot %lld", (long long)p->count, (long long)p->slot);
  return st;
}

static int64_t int_at(const npu_tensor *t) {
  return t->dtype == NPU_DTYPE_I64 ? *(const int64_t *)t->data : *(const int32_t *)t->data;
}

/* The meta row the node reads, NULL (and an error) when it is outside. */
static const int64_t *row_of(npu_context *ctx, const npuG_node *node, const read_params *p,
                             const npu_tensor *meta, const npu_tensor *it, npu_status *st) {
  int64_t r = int_at(it) * p->count + p->slot, rows = meta->ndim == 2 ? meta->shape[0] : 0;
  if (r >= 0 && r < rows) return (const int64_t *)meta->data + r * NPUX_RECORD_WIDTH;
  *st = npuC_error(ctx, NPU_ERR_ARG, "record_read '%s': row %lld is outside the record of %lld "
                   "rows", node->name, (long long)r, (long long)rows);
  return NULL;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const read_params *p = params;
  const npuG_value *it = &ic->in[2];
  if ((it->dtype != NPU_DTYPE_I32 && it->dtype != NPU_DTYPE_I64) || it->ndim > 0)
    return npuX_error(ic, NPU_ERR_ARG, "iteration must be an int32 or int64 scalar");
  npuG_value *y = &ic->out[0];
  *y = (npuG_value){.dtype = p->dtype, .ndim = p->ndim};
  if (p->ndim > 0) memcpy(y->shape, p->shape, (size_t)p->ndim * sizeof *p->shape);
  const npu_tensor *meta = ic->const_in ? ic->const_in[1] : NULL;
  const npu_tensor *k = ic->const_in ? ic->const_in[2] : NULL;
  if (!meta || !k || ic->building) return NPU_OK;
  npu_status st = NPU_OK;
  const int64_t *row = row_of(ic->ctx, ic->node, p, meta, k, &st);
  if (!row) return st;
  y->ndim = (int)row[2];
  memcpy(y->shape, row + 3, (size_t)y->ndim * sizeof *y->shape);
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const read_params *p = c->params;
  const npu_tensor *data = c->in[0], *meta = c->in[1];
  npu_tensor *y = c->out[0];
  npu_status st = NPU_OK;
  const int64_t *row = row_of(c->ctx, c->node, p, meta, c->in[2], &st);
  if (!row) return st;
  bool same = row[2] == y->ndim;
  for (int d = 0; same && d < y->ndim; d++) same = row[3 + d] == y->shape[d];
  if (!same || (row[1] >= 0 && (size_t)row[1] != y->nbytes)) {
    char sy[96], sr[96];
    return npuC_error(c->ctx, NPU_ERR_SHAPE, "record_read '%s': the value recorded is %s, not "
                      "the %s expected", c->node->name,
                      npuC_shape_str(sr, sizeof sr, (int)row[2], row + 3),
                      npuC_shape_str(sy, sizeof sy, y->ndim, y->shape));
  }
  if (row[1] < 0) memset(y->data, 0, y->nbytes); /* recorded by its shape alone */
  else if (y->nbytes) memcpy(y->data, (const char *)data->data + row[0], y->nbytes);
  return NPU_OK;
}

const npu_op_def npuX_op_record_read = {
    .name = "record_read", .tf_type = "NpuRecordRead", .min_inputs = 3, .max_inputs = 3,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .flags = NPUX_F_NO_FOLD | NPUX_F_SHARED, .parse = parse,
    .infer = infer, .run = run};
