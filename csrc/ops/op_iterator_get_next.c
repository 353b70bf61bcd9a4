/*
 * op_iterator_get_next.c — iterator_get_next: the next element of a dataset, one output per
 * component (TensorFlow IteratorGetNext; GetNext offload, enable_data_pre_proc).  No inputs.
 * Attribute dataset (required): the id npu_graph_add_dataset gave the dataset in this graph
 * (graphs hold datasets in a list, attributes being plain values).  Outputs: the dataset's
 * element spec (npu_dataset_dtype/ndim/shape: -1 for a batch dim that may be partial).
 * The executor keeps one iterator per session and node and binds its next element (kind
 * GET_NEXT); there is no kernel, and it is never folded.  The element spec is read through
 * the public accessors, so this layer needs nothing of the exec layer's dataset internals.
 */
#include "ops/ops.h"

typedef struct get_next_params {
  int64_t dataset;
} get_next_params;
_Static_assert(sizeof(get_next_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  get_next_params *p = params;
  p->dataset = -1;
  npu_status st = npuX_attr_int(ic, "dataset", &p->dataset);
  if (st) return st;
  if (!npuX_attr_find(ic, "dataset"))
    return npuX_error(ic, NPU_ERR_ARG, "attribute 'dataset' (a dataset id of the graph) is "
                      "required");
  const npu_dataset *ds = npu_graph_dataset(ic->graph, p->dataset < INT32_MAX ? (int)p->dataset : -1);
  if (!ds)
    return npuX_error(ic, NPU_ERR_ARG, "attribute 'dataset' is %lld: the graph has %d "
                      "dataset(s) (npu_graph_add_dataset gives the ids)",
                      (long long)p->dataset, ic->graph->n_datasets);
  int n = npu_dataset_n_components(ds);
  if (n > NPUX_MAX_OUTPUTS)
    return npuX_error(ic, NPU_ERR_UNSUPPORTED, "the dataset has %d components: at most %d "
                      "outputs are supported", n, NPUX_MAX_OUTPUTS);
  ic->n_outputs = n;
  return NPU_OK;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const get_next_params *p = params;
  const npu_dataset *ds = npu_graph_dataset(ic->graph, (int)p->dataset);
  for (int i = 0; i < ic->n_outputs; i++) {
    npuG_value *v = &ic->out[i];
    *v = (npuG_value){.dtype = npu_dataset_dtype(ds, i), .ndim = npu_dataset_ndim(ds, i)};
    for (int d = 0; d < v->ndim; d++) v->shape[d] = npu_dataset_shape(ds, i)[d];
  }
  return NPU_OK;
}

const npu_op_def npuX_op_iterator_get_next = {
    .name = "iterator_get_next", .tf_type = "IteratorGetNext", .min_inputs = 0,
    .max_inputs = 0, .n_outputs = -1, .kind = NPUX_KIND_GET_NEXT, .flags = NPUX_F_NO_FOLD,
    .parse = parse, .infer = infer};

int npuX_get_next_dataset(const npuG_node *node) {
  return (int)((const get_next_params *)node->params.bytes)->dataset;
}
