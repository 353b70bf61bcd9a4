/*
 * graphdef.h — what the GraphDef importer (graphdef.c) and exporter (graphdef_export.c)
 * share: TensorFlow's DataType enum against ours, and reading the op table's lists of the
 * attributes that TensorFlow passes as constant inputs (.tf_const_inputs).
 */
#ifndef NPU_IO_GRAPHDEF_H
#define NPU_IO_GRAPHDEF_H

#include "ops/ops.h"

/* TensorFlow DataType values (tensorflow/core/framework/types.proto). */
enum {
  NPUI_TF_FLOAT = 1, NPUI_TF_DOUBLE = 2, NPUI_TF_INT32 = 3, NPUI_TF_UINT8 = 4,
  NPUI_TF_INT16 = 5, NPUI_TF_INT8 = 6, NPUI_TF_STRING = 7, NPUI_TF_INT64 = 9,
  NPUI_TF_BOOL = 10, NPUI_TF_BFLOAT16 = 14, NPUI_TF_HALF = 19
};

/* Our dtype for a TensorFlow DataType, or -1 when this device has none. */
int npuI_tf_to_dtype(int tf_dtype);
int npuI_dtype_to_tf(npu_dtype t);
/* "DT_FLOAT" -> 1 ... (every name of types.proto that has a value here); -1 when unknown. */
int npuI_tf_dtype_from_name(const char *name);
/* "DT_FLOAT" for messages; "DT_<n>" for values without a name (buf of 16 bytes). */
const char *npuI_tf_dtype_name(int tf_dtype, char buf[16]);

/* Entry i of the importer's alias table (TensorFlow types that are not an op's .tf_type):
   the type, our op name, and whether a converter makes more than one node of it; false past
   the end.  For the generated op reference (tools/gen_ops_doc.c). */
bool npuI_tf_alias(int i, const char **tf_type, const char **op, bool *converts);

/* The i-th comma-separated entry of list (copied into buf), or NULL past the end. */
const char *npuI_list_item(const char *list, int i, char *buf, size_t size);

/* A model's signature (npu.h).  The SavedModel fields are NULL / 0 for the other formats. */
struct npu_model_info {
  npu_context *ctx;
  const char *format, *signature_source;
  int n_inputs, n_outputs;
  int n_io;         /* entries allocated (zeroed): a failed build frees them all */
  npu_model_io *io; /* inputs, then outputs */
  char *signature_key, *method_name; /* SavedModel: this signature's */
  int n_signatures;                  /* SavedModel: every signature key of the meta graph */
  char **signatures;
};

/* Binary GraphDef bytes into a graph, messages naming `path` (graphdef.c). */
npu_status npuI_import_pb_named(npu_context *ctx, const char *path, const uint8_t *data,
                                size_t size, npu_graph **graph_out, npu_model_info **info_out);
/* io/savedmodel.c: 1 when path is a directory; a directory's model (a SavedModel, a
   TensorFlow.js model.json, a single .pb); freeing the SavedModel fields of an info. */
int npuI_is_dir(const char *path);
npu_status npuI_import_dir(npu_context *ctx, const char *dir, npu_graph **graph_out,
                           npu_model_info **info_out);
void npuI_model_info_free_signatures(npu_model_info *info);

/* graphdef_export.c: g as a GraphDef for drawing (TensorBoard's graph tab): nodes TensorFlow
   could not load (variables, assigns, ops without a GraphDef form) are written as their name,
   TensorFlow type and inputs instead of failing the export.  *out: uint8 bytes, owned. */
npu_status npuI_graph_serialize_for_drawing(npu_graph *g, npu_tensor **out);

#endif
