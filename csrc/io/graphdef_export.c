/*
 * graphdef_export.c — an npu_graph out as a binary GraphDef (.pb), the inverse of the
 * importer (graphdef.c), written so that TensorFlow reads it and the bytes of a node are those
 * TensorFlow writes for the same node (its Python op wrappers, then deterministic
 * serialization):
 *   - each node is a NodeDef (name, op, inputs, attrs) of its op's TensorFlow type; pad picks
 *     Pad, PadV2 (constant_values) or MirrorPad (mode);
 *   - the attributes the op table lists in .tf_const_inputs go back to being Const inputs,
 *     named "<node>/<TensorFlow input name>", placed where TensorFlow expects them: after the
 *     data inputs, or before them for the ops flagged .tf_const_inputs_first (Split's
 *     split_dim, Fill's dims and value, Conv2DBackpropInput's input_sizes); those given to our
 *     node as inputs stay inputs in the same slots; those left at their defaults are written
 *     with the default's value (a reduction over every axis, Split along axis 0, ...), since
 *     TensorFlow has no optional inputs;
 *   - attributes TensorFlow requires or its wrappers always write (T, N, index types, window
 *     attributes as {1, h, w, 1}, data_format, ...) are added from the tables below; ours that
 *     TensorFlow does not have are left out; a NodeDef's attrs are written sorted by name (a
 *     protobuf map serialized deterministically);
 *   - constants are TensorProtos as TensorFlow makes them: one element in the typed value
 *     field (float_val, int_val, ...), more in tensor_content; the shape always present.
 * Node order is ours, already topological.
 *
 * Invariants: the graph is only read; the output is written in full or not at all (a failed
 * write removes the file); every message names the node or the file.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "io/graphdef.h"
#include "io/protobuf.h"

/* GraphDef field numbers (the .proto files of tensorflow/core/framework). */
enum { GRAPH_NODE = 1, GRAPH_LIBRARY = 2 };
/* FunctionDefLibrary: function 1; FunctionDef: signature 1 (OpDef: name 1, input_arg 2,
   output_arg 3; ArgDef: name 1, type 3), node_def 3, ret 4 (map: key 1, value 2). */
enum { LIBRARY_FUNCTION = 1, FUNCTION_SIGNATURE = 1, FUNCTION_NODE = 3, FUNCTION_RET = 4 };
enum { ATTR_FUNC = 10 };
enum { NODE_NAME = 1, NODE_OP = 2, NODE_INPUT = 3, NODE_ATTR = 5 };
enum { ATTR_LIST = 1, ATTR_S = 2, ATTR_I = 3, ATTR_F = 4, ATTR_B = 5, ATTR_TYPE = 6,
       ATTR_SHAPE = 7, ATTR_TENSOR = 8 };
enum { TENSOR_DTYPE = 1, TENSOR_SHAPE = 2, TENSOR_CONTENT = 4, TENSOR_FLOAT_VAL = 5,
       TENSOR_DOUBLE_VAL = 6, TENSOR_INT_VAL = 7, TENSOR_INT64_VAL = 10, TENSOR_BOOL_VAL = 11,
       TENSOR_HALF_VAL = 13 };

#define MAX_OPERANDS 8

/* ---- per-op rules: what TensorFlow's OpDefs say that our nodes do not ------------------ */

/* Where a dtype comes from: the node's first or second data input, its output 0, the dtype
   its operand 0 or 1 has. */
typedef enum { SRC_DATA0, SRC_DATA1, SRC_OUT0, SRC_OPERAND0, SRC_OPERAND1 } dtype_source;

/* Operands (our attributes that are TensorFlow inputs) that need more than the defaults: an
   int32 (int64 when a value needs it) Const named after the attribute, given only when set. */
typedef enum { DEF_NONE = 0, DEF_SCALAR, DEF_ALL_AXES, DEF_REVERSE_AXES, DEF_ONES_LIKE_BEGIN } operand_default;
typedef enum { OPD_INDEX = 0, OPD_VALUE, OPD_FLOAT32 } operand_kind;

static const struct operand_rule {
  const char *op, *attr;
  const char *tf_arg;   /* TensorFlow's name of the input (names the Const); NULL: attr */
  operand_kind kind;    /* INDEX: int32/int64; VALUE: the node's value dtype (`src`) */
  dtype_source src;
  operand_default def;  /* what an absent attribute means */
  double value;         /* DEF_SCALAR */
} operand_rules[] = {
    {"split", "axis", "split_dim", OPD_INDEX, 0, DEF_SCALAR, 0},
    {"split_v", "axis", "split_dim", OPD_INDEX, 0, DEF_NONE, 0},
    {"fill", "value", NULL, OPD_VALUE, SRC_OUT0, DEF_NONE, 0},
    {"pad", "constant_values", NULL, OPD_VALUE, SRC_DATA0, DEF_SCALAR, 0},
    {"reduce_sum", "axis", "reduction_indices", OPD_INDEX, 0, DEF_ALL_AXES, 0},
    {"reduce_mean", "axis", "reduction_indices", OPD_INDEX, 0, DEF_ALL_AXES, 0},
    {"reduce_max", "axis", "reduction_indices", OPD_INDEX, 0, DEF_ALL_AXES, 0},
    {"reduce_min", "axis", "reduction_indices", OPD_INDEX, 0, DEF_ALL_AXES, 0},
    {"reduce_prod", "axis", "reduction_indices", OPD_INDEX, 0, DEF_ALL_AXES, 0},
    {"reduce_all", "axis", "reduction_indices", OPD_INDEX, 0, DEF_ALL_AXES, 0},
    {"reduce_any", "axis", "reduction_indices", OPD_INDEX, 0, DEF_ALL_AXES, 0},
    {"transpose", "perm", NULL, OPD_INDEX, 0, DEF_REVERSE_AXES, 0},
    {"argmax", "axis", "dimension", OPD_INDEX, 0, DEF_SCALAR, 0},
    {"argmin", "axis", "dimension", OPD_INDEX, 0, DEF_SCALAR, 0},
    {"expand_dims", "axis", "dim", OPD_INDEX, 0, DEF_NONE, 0},
    {"gather", "axis", NULL, OPD_INDEX, 0, DEF_SCALAR, 0},
    {"strided_slice", "strides", NULL, OPD_INDEX, 0, DEF_ONES_LIKE_BEGIN, 0},
    {"one_hot", "on_value", NULL, OPD_VALUE, SRC_OUT0, DEF_SCALAR, 1},
    {"one_hot", "off_value", NULL, OPD_VALUE, SRC_OUT0, DEF_SCALAR, 0},
    {"non_max_suppression", "iou_threshold", NULL, OPD_FLOAT32, 0, DEF_SCALAR, 0.5},
    {"non_max_suppression", "score_threshold", NULL, OPD_FLOAT32, 0, DEF_SCALAR, -INFINITY},
    /* ops for TensorFlow imports and ported TF 1.15 scripts */
    {"broadcast_to", "shape", NULL, OPD_INDEX, 0, DEF_NONE, 0},
    {"sparse_to_dense", "output_shape", NULL, OPD_INDEX, 0, DEF_NONE, 0},
    {"in_top_k", "k", NULL, OPD_VALUE, SRC_DATA1, DEF_NONE, 0}, /* the targets' dtype (T) */
    {"non_max_suppression", "soft_nms_sigma", NULL, OPD_FLOAT32, 0, DEF_SCALAR, 0},
};

static const struct operand_rule *operand_rule(const char *op, const char *attr) {
  for (size_t i = 0; i < npu_countof(operand_rules); i++)
    if (strcmp(operand_rules[i].op, op) == 0 && strcmp(operand_rules[i].attr, attr) == 0)
      return &operand_rules[i];
  return NULL;
}

/* Attributes by TensorFlow type: those its OpDef has that ours lack (written with the value
   given, or the dtype from `src`), and ours it does not have (OMIT). */
typedef enum { RULE_STRING, RULE_INT, RULE_BOOL, RULE_INTS, RULE_DTYPE, RULE_N_OUTPUTS, RULE_OMIT } rule_kind;

static const int64_t ones4[4] = {1, 1, 1, 1};

static const struct attr_rule {
  const char *tf, *attr;
  rule_kind kind;
  const char *s;         /* STRING */
  int64_t i;             /* INT, BOOL */
  const int64_t *ints;   /* INTS (n entries) */
  int n;
  dtype_source src;      /* DTYPE */
} attr_rules[] = {
#define CONV_DEFAULTS(tf)                                                                      \
  {tf, "strides", RULE_INTS, NULL, 0, ones4, 4, 0},                                            \
  {tf, "data_format", RULE_STRING, "NHWC", 0, NULL, 0, 0},                                     \
  {tf, "dilations", RULE_INTS, NULL, 0, ones4, 4, 0},                                          \
  {tf, "explicit_paddings", RULE_INTS, NULL, 0, NULL, 0, 0}
    CONV_DEFAULTS("Conv2D"), {"Conv2D", "use_cudnn_on_gpu", RULE_BOOL, NULL, 1, NULL, 0, 0},
    CONV_DEFAULTS("Conv2DBackpropInput"),
    {"Conv2DBackpropInput", "use_cudnn_on_gpu", RULE_BOOL, NULL, 1, NULL, 0, 0},
    CONV_DEFAULTS("DepthwiseConv2dNative"),
#undef CONV_DEFAULTS
    {"MaxPool", "strides", RULE_INTS, NULL, 0, ones4, 4, 0},
    {"MaxPool", "data_format", RULE_STRING, "NHWC", 0, NULL, 0, 0},
    {"MaxPool", "explicit_paddings", RULE_INTS, NULL, 0, NULL, 0, 0},
    {"AvgPool", "strides", RULE_INTS, NULL, 0, ones4, 4, 0},
    {"AvgPool", "data_format", RULE_STRING, "NHWC", 0, NULL, 0, 0},
    {"MatMul", "transpose_a", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"MatMul", "transpose_b", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"BatchMatMulV2", "adj_x", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"BatchMatMulV2", "adj_y", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"Split", "num_split", RULE_N_OUTPUTS, NULL, 0, NULL, 0, 0},
    {"SplitV", "num_split", RULE_N_OUTPUTS, NULL, 0, NULL, 0, 0},
    {"SplitV", "Tlen", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Pack", "axis", RULE_INT, NULL, 0, NULL, 0, 0},
    {"Unpack", "axis", RULE_INT, NULL, 0, NULL, 0, 0},
    {"Unpack", "num", RULE_N_OUTPUTS, NULL, 0, NULL, 0, 0},
    {"Squeeze", "squeeze_dims", RULE_INTS, NULL, 0, NULL, 0, 0},
    {"BiasAdd", "data_format", RULE_STRING, "NHWC", 0, NULL, 0, 0},
    {"Fill", "index_type", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Pad", "Tpaddings", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Pad", "mode", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"PadV2", "Tpaddings", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"PadV2", "mode", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"MirrorPad", "Tpaddings", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Reshape", "Tshape", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Transpose", "Tperm", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Tile", "Tmultiples", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"ConcatV2", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"ExpandDims", "Tdim", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Slice", "Index", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"StridedSlice", "Index", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"ArgMax", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"ArgMax", "output_type", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OUT0},
    {"ArgMin", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"ArgMin", "output_type", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OUT0},
    {"Sum", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Sum", "keep_dims", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"Mean", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Mean", "keep_dims", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"Max", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Max", "keep_dims", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"Min", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Min", "keep_dims", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"Prod", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"Prod", "keep_dims", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"GatherV2", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"GatherV2", "Tparams", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA0},
    {"GatherV2", "Tindices", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA1},
    {"GatherV2", "Taxis", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"GatherV2", "batch_dims", RULE_INT, NULL, 0, NULL, 0, 0},
    {"GatherNd", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"GatherNd", "Tparams", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA0},
    {"GatherNd", "Tindices", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA1},
    {"Select", "T", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA1},
    {"SelectV2", "T", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA1},
    {"Cast", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"Cast", "SrcT", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA0},
    {"Cast", "DstT", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OUT0},
    {"Cast", "Truncate", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"Range", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"Range", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OUT0},
    {"IdentityN", "N", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"NonMaxSuppressionV5", "pad_to_max_output_size", RULE_BOOL, NULL, 0, NULL, 0, 0},
    {"Fill", "dtype", RULE_OMIT, NULL, 0, NULL, 0, 0}, /* T says it */
    {"OneHot", "dtype", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"OneHot", "T", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OUT0},
    {"OneHot", "TI", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA0},
    {"Softmax", "axis", RULE_OMIT, NULL, 0, NULL, 0, 0}, /* the last axis only, here as there */
    {"LogSoftmax", "axis", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"LogicalAnd", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"LogicalOr", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"LogicalNot", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"Const", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"Placeholder", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    {"NoOp", "T", RULE_OMIT, NULL, 0, NULL, 0, 0},
    /* ops for TensorFlow imports and ported TF 1.15 scripts */
    {"BroadcastTo", "Tidx", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OPERAND0},
    {"SparseToDense", "T", RULE_DTYPE, NULL, 0, NULL, 0, SRC_OUT0},
    {"SparseToDense", "Tindices", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA0},
    {"SparseToDense", "validate_indices", RULE_BOOL, NULL, 1, NULL, 0, 0},
    {"InTopKV2", "T", RULE_DTYPE, NULL, 0, NULL, 0, SRC_DATA1},
};

static const struct attr_rule *attr_rule(const char *tf, const char *attr) {
  for (size_t i = 0; i < npu_countof(attr_rules); i++)
    if (strcmp(attr_rules[i].tf, tf) == 0 && strcmp(attr_rules[i].attr, attr) == 0)
      return &attr_rules[i];
  return NULL;
}

/* Our attribute names that TensorFlow spells otherwise. */
static const char *tf_attr_name(const char *tf, const char *name) {
  if (strcmp(name, "keepdims") == 0) return "keep_dims";
  if (strcmp(tf, "Squeeze") == 0 && strcmp(name, "axis") == 0) return "squeeze_dims";
  if (strcmp(tf, "Cast") == 0 && strcmp(name, "dtype") == 0) return "DstT";
  return name;
}

/* Window attributes, which TensorFlow wants as {1, h, w, 1} where we also take {h, w} or h. */
/* TensorFlow attributes of AttrValue type `type`. */
static bool is_dtype_attr(const char *name) {
  static const char *const names[] = {"dtype", "DstT", "SrcT", "T", "Tidx", "Tindices",
                                      "out_type", "output_type", "index_type", "Tout"};
  for (size_t i = 0; i < npu_countof(names); i++)
    if (strcmp(name, names[i]) == 0) return true;
  return false;
}

static bool is_window_attr(const char *tf, const char *name) {
  static const char *const types[] = {"Conv2D", "DepthwiseConv2dNative", "MaxPool", "AvgPool",
                                      "Conv2DBackpropInput", "Conv2DBackpropFilter",
                                      "DepthwiseConv2dNativeBackpropInput",
                                      "DepthwiseConv2dNativeBackpropFilter", "MaxPoolGrad",
                                      "AvgPoolGrad"};
  if (strcmp(name, "strides") != 0 && strcmp(name, "dilations") != 0 &&
      strcmp(name, "ksize") != 0)
    return false;
  for (size_t i = 0; i < npu_countof(types); i++)
    if (strcmp(types[i], tf) == 0) return true;
  return false;
}

/* pad: Pad, PadV2 when constant_values is set and not 0 or an input, MirrorPad for REFLECT /
   SYMMETRIC; *n_operands: how many of pad's operands (paddings, constant_values) the type
   takes. */
static const char *pad_type(const npuG_node *node, int *n_operands) {
  const npuG_attr *mode = npuG_attr_find(node, "mode");
  const npuG_attr *cv = npuG_attr_find(node, "constant_values");
  /* constant_values an input: one after x and paddings (an input too, unless an attribute) */
  bool cv_input = !cv && node->n_inputs > (npuG_attr_find(node, "paddings") ? 1 : 2);
  *n_operands = 1;
  if (mode && mode->type == NPU_ATTR_STRING && strcmp(mode->u.s, "CONSTANT") != 0)
    return "MirrorPad";
  if ((cv && ((cv->type == NPU_ATTR_FLOAT && cv->u.f != 0) || (cv->type == NPU_ATTR_INT && cv->u.i != 0))) ||
      cv_input) {
    *n_operands = 2;
    return "PadV2";
  }
  return "Pad";
}

/* ---- protobuf pieces -------------------------------------------------------------------- */

static void put_shape(npuI_pb_writer *w, uint32_t field, int ndim, const int64_t *dims) {
  size_t m = npuI_pb_begin(w, field);
  if (ndim < 0) npuI_pb_put_varint(w, 3, 1); /* unknown_rank */
  for (int i = 0; i < ndim; i++) {
    size_t d = npuI_pb_begin(w, 2);
    npuI_pb_put_varint(w, 1, (uint64_t)dims[i]);
    npuI_pb_end(w, d);
  }
  npuI_pb_end(w, m);
}

/* A TensorProto as TensorFlow's make_tensor_proto writes one: dtype, shape (always, empty for
   a scalar), then one element in its typed value field, or several as tensor_content. */
static void put_tensor_proto(npuI_pb_writer *w, uint32_t field, npu_dtype dtype, int ndim,
                             const int64_t *dims, const void *data, int64_t numel) {
  size_t m = npuI_pb_begin(w, field);
  npuI_pb_put_varint(w, TENSOR_DTYPE, (uint64_t)npuI_dtype_to_tf(dtype));
  put_shape(w, TENSOR_SHAPE, ndim, dims);
  if (numel > 1) {
    npuI_pb_put_bytes(w, TENSOR_CONTENT, data, (size_t)numel * npu_dtype_size(dtype));
  } else if (numel == 1) {
    const uint8_t *p = data;
    size_t v;
    switch (dtype) {
    case NPU_DTYPE_F32: v = npuI_pb_begin(w, TENSOR_FLOAT_VAL), npuI_pb_put_raw(w, p, 4); break;
    case NPU_DTYPE_F64: v = npuI_pb_begin(w, TENSOR_DOUBLE_VAL), npuI_pb_put_raw(w, p, 8); break;
    case NPU_DTYPE_I64: {
      int64_t x;
      memcpy(&x, p, 8);
      v = npuI_pb_begin(w, TENSOR_INT64_VAL), npuI_pb_put_raw_varint(w, (uint64_t)x);
      break;
    }
    case NPU_DTYPE_F16: case NPU_DTYPE_BF16: {
      uint16_t x;
      memcpy(&x, p, 2);
      v = npuI_pb_begin(w, TENSOR_HALF_VAL), npuI_pb_put_raw_varint(w, x);
      break;
    }
    case NPU_DTYPE_BOOL: v = npuI_pb_begin(w, TENSOR_BOOL_VAL), npuI_pb_put_raw_varint(w, p[0] != 0); break;
    default: { /* int32, int8, uint8: int_val, sign-extended as protobuf int32 */
      int64_t x = dtype == NPU_DTYPE_I8 ? (int8_t)p[0] : dtype == NPU_DTYPE_U8 ? p[0] : 0;
      if (dtype == NPU_DTYPE_I32) {
        int32_t y;
        memcpy(&y, p, 4);
        x = y;
      }
      v = npuI_pb_begin(w, TENSOR_INT_VAL), npuI_pb_put_raw_varint(w, (uint64_t)x);
      break;
    }
    }
    npuI_pb_end(w, v);
  }
  npuI_pb_end(w, m);
}

static uint32_t float_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

/* One NodeDef attr entry, the value in the public attribute form; INTS as a shape when
   as_shape, DTYPE values are ours. */
static void put_attr(npuI_pb_writer *w, const char *name, const npu_attr *a, bool as_shape) {
  size_t m = npuI_pb_begin(w, NODE_ATTR);
  npuI_pb_put_string(w, 1, name);
  size_t v = npuI_pb_begin(w, 2);
  switch (a->type) {
  case NPU_ATTR_INT: npuI_pb_put_varint(w, ATTR_I, (uint64_t)a->u.i); break;
  case NPU_ATTR_BOOL: npuI_pb_put_varint(w, ATTR_B, a->u.i != 0); break;
  case NPU_ATTR_FLOAT: npuI_pb_put_fixed32(w, ATTR_F, float_bits((float)a->u.f)); break;
  case NPU_ATTR_STRING: npuI_pb_put_string(w, ATTR_S, a->u.s); break;
  case NPU_ATTR_DTYPE:
    npuI_pb_put_varint(w, ATTR_TYPE, (uint64_t)npuI_dtype_to_tf((npu_dtype)a->u.i));
    break;
  case NPU_ATTR_INTS:
    if (as_shape) {
      put_shape(w, ATTR_SHAPE, a->u.ints.n, a->u.ints.v);
    } else {
      size_t l = npuI_pb_begin(w, ATTR_LIST);
      if (a->u.ints.n) {
        size_t p = npuI_pb_begin(w, 3);
        for (int i = 0; i < a->u.ints.n; i++) npuI_pb_put_raw_varint(w, (uint64_t)a->u.ints.v[i]);
        npuI_pb_end(w, p);
      }
      npuI_pb_end(w, l);
    }
    break;
  case NPU_ATTR_FLOATS: {
    size_t l = npuI_pb_begin(w, ATTR_LIST);
    if (a->u.floats.n) {
      size_t p = npuI_pb_begin(w, 4);
      for (int i = 0; i < a->u.floats.n; i++) {
        uint32_t b = float_bits((float)a->u.floats.v[i]);
        uint8_t le[4] = {(uint8_t)b, (uint8_t)(b >> 8), (uint8_t)(b >> 16), (uint8_t)(b >> 24)};
        npuI_pb_put_raw(w, le, 4);
      }
      npuI_pb_end(w, p);
    }
    npuI_pb_end(w, l);
    break;
  }
  case NPU_ATTR_TENSOR: {
    const npu_tensor *t = a->u.tensor;
    put_tensor_proto(w, ATTR_TENSOR, t->dtype, t->ndim, t->shape, t->data, t->numel);
    break;
  }
  }
  npuI_pb_end(w, v);
  npuI_pb_end(w, m);
}

/* IdentityN's T: the list of its inputs' dtypes. */
static void put_type_list(npuI_pb_writer *w, const char *name, const npu_graph *g,
                          const npuG_node *node) {
  size_t m = npuI_pb_begin(w, NODE_ATTR);
  npuI_pb_put_string(w, 1, name);
  size_t v = npuI_pb_begin(w, 2);
  size_t l = npuI_pb_begin(w, ATTR_LIST);
  size_t p = npuI_pb_begin(w, 6);
  for (int i = 0; i < node->n_inputs; i++)
    npuI_pb_put_raw_varint(w, (uint64_t)npuI_dtype_to_tf(g->values[node->inputs[i]].dtype));
  npuI_pb_end(w, p);
  npuI_pb_end(w, l);
  npuI_pb_end(w, v);
  npuI_pb_end(w, m);
}

/* ---- functions: where a node is written and how it names values -------------------------- */

/* A FunctionDef being written (NULL: the graph itself): its arguments are values of the graph
   around it (args[i], named "a<i>") and, for a loop, its variables (the loop_var nodes of
   `loop_region`, named "v<index>"); any other value is a node of the function,
   "node:<output arg>:<index>" as TensorFlow names outputs inside functions. */
typedef struct fn_scope {
  int n_args;
  const int *args;
  int loop_region; /* 0: not a loop's */
} fn_scope;

/* TensorFlow's name of the output argument of type tf holding output `index` (in buf); *sub:
   the index in that argument.  Most ops have one output argument; a list (Split, Unpack,
   IdentityN, If, While) holds them all. */
static const char *output_arg(const char *tf, int index, int *sub, char *buf, size_t size) {
  static const struct {
    const char *tf, *args;
  } multi[] = {{"TopKV2", "values,indices"},
               {"NonMaxSuppressionV4", "selected_indices,valid_outputs"},
               {"NonMaxSuppressionV5", "selected_indices,selected_scores,valid_outputs"}};
  static const char *const z_ops[] = {"Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum",
                                      "Minimum", "Less", "LessEqual", "Greater", "GreaterEqual",
                                      "Equal", "NotEqual", "LogicalAnd", "LogicalOr", "FloorDiv",
                                      "FloorMod", "Pow", "SquaredDifference", "Atan2"};
  static const char *const y_ops[] = {"Neg", "Abs", "Exp", "Log", "Sqrt", "Rsqrt", "Square",
                                      "Sigmoid", "Tanh", "Sin", "Cos", "Floor", "Ceil",
                                      "Reciprocal", "Sign", "Cast", "LogicalNot", "IsFinite"};
  *sub = index;
  for (size_t i = 0; i < npu_countof(multi); i++)
    if (strcmp(multi[i].tf, tf) == 0 && npuI_list_item(multi[i].args, index, buf, size)) {
      *sub = 0;
      return buf;
    }
  for (size_t i = 0; i < npu_countof(z_ops); i++)
    if (strcmp(z_ops[i], tf) == 0) return "z";
  for (size_t i = 0; i < npu_countof(y_ops); i++)
    if (strcmp(y_ops[i], tf) == 0) return "y";
  if (strcmp(tf, "Relu") == 0 || strcmp(tf, "Relu6") == 0 || strcmp(tf, "LeakyRelu") == 0)
    return "activations";
  if (strcmp(tf, "Softmax") == 0) return "softmax";
  if (strcmp(tf, "MatMul") == 0) return "product";
  return "output";
}

static const char *export_type(const npuG_node *node);

/* The name a value has where fs writes (a graph input name, or a function's). */
static void value_name(const npu_graph *g, const fn_scope *fs, int value, char *buf, size_t size) {
  const npuG_value *v = &g->values[value];
  const npuG_node *src = &g->nodes[v->node];
  if (fs) {
    for (int i = 0; i < fs->n_args; i++)
      if (fs->args[i] == value) {
        snprintf(buf, size, "a%d", i);
        return;
      }
    if (fs->loop_region && src->region == fs->loop_region &&
        npuX_op(src->op)->kind == NPUX_KIND_LOOP_VAR) {
      snprintf(buf, size, "v%d", npuX_loop_var_index(src));
      return;
    }
    int sub;
    char abuf[64];
    const char *arg = output_arg(export_type(src), v->index, &sub, abuf, sizeof abuf);
    snprintf(buf, size, "%.1000s:%s:%d", src->name, arg, sub);
    return;
  }
  if (v->index == 0) snprintf(buf, size, "%.1000s", src->name);
  else snprintf(buf, size, "%.1000s:%d", src->name, v->index);
}

/* ---- operands ----------------------------------------------------------------------------- */

/* One TensorFlow input standing for one of our const-input attributes: a Const this exporter
   writes (name), or one of the node's inputs (value). */
typedef struct operand {
  bool is_input;
  int value;
  npu_dtype dtype; /* of the Const */
  char name[1100];  /* TensorFlow names can be long (rvm's reach 250): never cut */
} operand;

/* Writes the Const for operand `attr` of node (its attribute, or the default rule's value)
   and fills op; 0 when there is nothing to write (absent with no default), -1 when the
   attribute has no constant form. */
static int put_operand_const(npuI_pb_writer *w, const npu_graph *g, const npuG_node *node,
                             const npu_op_def *def, const char *attr, npu_dtype value_dtype,
                             operand *op, uint32_t field) {
  const struct operand_rule *rule = operand_rule(def->name, attr);
  const npuG_attr *a = npuG_attr_find(node, attr);
  int64_t ints[2 * NPU_MAX_DIMS];
  double f = 0;
  int n = 0;
  bool scalar = false, is_float = false;
  int rank = node->n_inputs ? g->values[node->inputs[0]].ndim : -1;
  if (a && (a->type == NPU_ATTR_INT || a->type == NPU_ATTR_BOOL)) {
    ints[0] = a->u.i, f = (double)a->u.i, n = 1, scalar = true;
  } else if (a && a->type == NPU_ATTR_FLOAT) {
    f = a->u.f, n = 1, scalar = true, is_float = true;
  } else if (a && a->type == NPU_ATTR_INTS) {
    if (a->u.ints.n > (int)npu_countof(ints)) return -1;
    n = a->u.ints.n;
    memcpy(ints, a->u.ints.v, (size_t)n * sizeof *ints);
  } else if (a) {
    return -1;
  } else if (!rule || rule->def == DEF_NONE) {
    return 0;
  } else if (rule->def == DEF_SCALAR) {
    f = rule->value, ints[0] = (int64_t)rule->value, n = 1, scalar = true;
    is_float = rule->value != (double)(int64_t)rule->value || isinf(rule->value);
  } else if (rule->def == DEF_ALL_AXES || rule->def == DEF_REVERSE_AXES) {
    if (rank < 0) return 0;
    for (int i = 0; i < rank; i++) ints[i] = rule->def == DEF_ALL_AXES ? i : rank - 1 - i;
    n = rank;
  } else { /* DEF_ONES_LIKE_BEGIN */
    const npuG_attr *begin = npuG_attr_find(node, "begin");
    if (!begin || begin->type != NPU_ATTR_INTS) return 0;
    n = begin->u.ints.n;
    for (int i = 0; i < n; i++) ints[i] = 1;
  }
  /* the Const's dtype */
  npu_dtype dt = NPU_DTYPE_I32;
  operand_kind kind = rule ? rule->kind : OPD_INDEX;
  if (kind == OPD_VALUE) dt = value_dtype;
  else if (kind == OPD_FLOAT32 || is_float) dt = NPU_DTYPE_F32;
  else
    for (int i = 0; i < n; i++)
      if (ints[i] != (int32_t)ints[i]) dt = NPU_DTYPE_I64;
  uint8_t data[8 * 2 * NPU_MAX_DIMS];
  if (scalar) {
    /* one number converted to dt as a cast would */
    if (is_float || kind != OPD_INDEX) {
      if (npuK_cast(NULL, 1, NPUK_F64, &f, (npuK_dtype)dt, data)) return -1;
    } else if (npuK_cast(NULL, 1, NPUK_I64, &ints[0], (npuK_dtype)dt, data)) {
      return -1;
    }
  } else if (npuK_cast(NULL, n, NPUK_I64, ints, (npuK_dtype)dt, data)) {
    return -1;
  }
  int64_t dims[2] = {n, 2};
  int ndim = scalar ? 0 : 1;
  if (strcmp(attr, "paddings") == 0 || strcmp(attr, "crops") == 0) {
    if (n % 2) return -1;
    dims[0] = n / 2, ndim = 2; /* (rank, 2) pairs */
  }
  const char *tf_arg = rule && rule->tf_arg ? rule->tf_arg : attr;
  snprintf(op->name, sizeof op->name, "%.1000s/%s", node->name, tf_arg);
  for (int k = 1; npuG_find_node(g, op->name) >= 0; k++)
    snprintf(op->name, sizeof op->name, "%.1000s/%s_%d", node->name, tf_arg, k);
  op->is_input = false;
  op->dtype = dt;
  size_t m = npuI_pb_begin(w, field);
  npuI_pb_put_string(w, NODE_NAME, op->name);
  npuI_pb_put_string(w, NODE_OP, "Const");
  npu_attr da = {.type = NPU_ATTR_DTYPE, .u.i = dt};
  put_attr(w, "dtype", &da, false);
  size_t am = npuI_pb_begin(w, NODE_ATTR);
  npuI_pb_put_string(w, 1, "value");
  size_t v = npuI_pb_begin(w, 2);
  put_tensor_proto(w, ATTR_TENSOR, dt, ndim, dims, data, n);
  npuI_pb_end(w, v);
  npuI_pb_end(w, am);
  npuI_pb_end(w, m);
  return 1;
}

static void put_input_name(npuI_pb_writer *w, const npu_graph *g, const fn_scope *fs, int value) {
  char buf[1200];
  value_name(g, fs, value, buf, sizeof buf);
  npuI_pb_put_string(w, NODE_INPUT, buf);
}

static bool in_list(const char *list, const char *name) {
  char buf[64];
  for (int i = 0; npuI_list_item(list, i, buf, sizeof buf); i++)
    if (strcmp(buf, name) == 0) return true;
  return false;
}

/* ---- nodes -------------------------------------------------------------------------------- */

/* An attribute to write: its TensorFlow name and value. */
typedef struct out_attr {
  const char *name;
  npu_attr a;
  bool as_shape;
  bool type_list; /* IdentityN's T */
} out_attr;

static int cmp_attr(const void *a, const void *b) {
  return strcmp(((const out_attr *)a)->name, ((const out_attr *)b)->name);
}

static bool has_attr(const out_attr *attrs, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(attrs[i].name, name) == 0) return true;
  return false;
}

static npu_status put_node(npu_graph *g, npuI_pb_writer *w, const npuG_node *node,
                           const fn_scope *fs) {
  uint32_t field = fs ? FUNCTION_NODE : GRAPH_NODE;
  npu_context *ctx = g->ctx;
  const npu_op_def *def = npuX_op(node->op);
  if (def->kind == NPUX_KIND_VARIABLE || def->kind == NPUX_KIND_ASSIGN)
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED,
                      "node '%s' is a %s: export a frozen graph (variables replaced by "
                      "constants)",
                      node->name, def->name);
  const char *tf = def->tf_type;
  const char *names = def->tf_const_inputs;
  int n_names = 0;
  char attr[64];
  while (npuI_list_item(names, n_names, attr, sizeof attr)) n_names++;
  if (strcmp(def->name, "pad") == 0) tf = pad_type(node, &n_names);
  if (n_names > MAX_OPERANDS)
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "node '%s': %s has more than %d const inputs",
                      node->name, def->name, MAX_OPERANDS);
  /* Which of the node's inputs are data and which are operands given at run time: the first
     ops take (operands..., data), the others (data..., operands) with min_inputs data inputs
     (variadic ops: all but the operands not given as attributes). */
  int n_unset = 0; /* operands not given as attributes */
  for (int i = 0; i < n_names; i++)
    n_unset += npuI_list_item(names, i, attr, sizeof attr) && !npuG_attr_find(node, attr);
  int n_data;
  if (def->tf_const_inputs_first) n_data = def->max_inputs - (def->tf_const_inputs ? n_names : 0);
  else if (def->max_inputs >= 0) n_data = def->min_inputs;
  else n_data = node->n_inputs - (n_unset < node->n_inputs ? n_unset : 0);
  if (n_data > node->n_inputs) n_data = node->n_inputs;
  if (n_data < 0) n_data = 0;
  int n_given = node->n_inputs - n_data; /* operand inputs */
  /* a node without inputs has inputs NULL: no offset from it (UB, even of 0) */
  const int *data = def->tf_const_inputs_first && n_given ? node->inputs + n_given : node->inputs;
  const int *given = !def->tf_const_inputs_first && n_data ? node->inputs + n_data : node->inputs;
  npu_dtype data0 = n_data > 0 ? g->values[data[0]].dtype
                    : node->n_outputs ? g->values[node->first_output].dtype : NPU_DTYPE_F32;
  npu_dtype out0 = node->n_outputs ? g->values[node->first_output].dtype : data0;
  /* operands: Consts first, so the file reads in order */
  operand ops[MAX_OPERANDS];
  int n_ops = 0, next_given = 0;
  for (int i = 0; i < n_names && npuI_list_item(names, i, attr, sizeof attr); i++) {
    operand *op = &ops[n_ops];
    if (!npuG_attr_find(node, attr) && next_given < n_given) {
      op->is_input = true;
      op->value = given[next_given++];
      op->dtype = g->values[op->value].dtype;
      n_ops++;
      continue;
    }
    const struct operand_rule *rule = operand_rule(def->name, attr);
    npu_dtype vdt = rule && rule->src == SRC_OUT0                  ? out0
                    : rule && rule->src == SRC_DATA1 && n_data > 1 ? g->values[data[1]].dtype
                                                                   : data0;
    int r = put_operand_const(w, g, node, def, attr, vdt, op, field);
    if (r < 0)
      return npuC_error(ctx, NPU_ERR_UNSUPPORTED,
                        "node '%s': attribute '%s' cannot be written as a constant input",
                        node->name, attr);
    if (r == 0) break; /* absent, no default: the operands after it are absent too */
    n_ops++;
  }
  for (; next_given < n_given; next_given++) { /* inputs past the list stay inputs */
    if (n_ops == MAX_OPERANDS) break;
    ops[n_ops++] = (operand){.is_input = true, .value = given[next_given]};
  }
  size_t m = npuI_pb_begin(w, field);
  npuI_pb_put_string(w, NODE_NAME, node->name);
  npuI_pb_put_string(w, NODE_OP, tf);
  if (!def->tf_const_inputs_first)
    for (int i = 0; i < n_data; i++) put_input_name(w, g, fs, data[i]);
  for (int i = 0; i < n_ops; i++) {
    char buf[1200];
    if (ops[i].is_input) put_input_name(w, g, fs, ops[i].value);
    else if (fs) { /* a Const of the function: its output "output:0" */
      snprintf(buf, sizeof buf, "%s:output:0", ops[i].name);
      npuI_pb_put_string(w, NODE_INPUT, buf);
    } else npuI_pb_put_string(w, NODE_INPUT, ops[i].name);
  }
  if (def->tf_const_inputs_first)
    for (int i = 0; i < n_data; i++) put_input_name(w, g, fs, data[i]);
  for (int i = 0; i < node->n_controls; i++) {
    char buf[1100];
    const npuG_node *dep = &g->nodes[node->controls[i]];
    /* inside another function, or a loop variable (an argument, there from the start):
       dropped */
    if (dep->region != node->region || npuX_op(dep->op)->kind == NPUX_KIND_LOOP_VAR) continue;
    snprintf(buf, sizeof buf, "^%.1000s", dep->name);
    npuI_pb_put_string(w, NODE_INPUT, buf);
  }
  /* attributes: ours (renamed, window ones widened), then the rules', sorted */
  int cap = node->n_attrs + (int)npu_countof(attr_rules) + 4;
  out_attr *out = npuC_calloc(ctx, (size_t)cap, sizeof *out);
  int64_t (*wide)[4] = npuC_calloc(ctx, (size_t)node->n_attrs + 1, sizeof *wide);
  if (!out || !wide) {
    npuC_free(ctx, out);
    npuC_free(ctx, wide);
    return npuC_error(ctx, NPU_ERR_NOMEM, "export: out of memory");
  }
  int n_out = 0;
  npu_status st = NPU_OK;
  for (int i = 0; i < node->n_attrs && !st; i++) {
    const npuG_attr *a = &node->attrs[i];
    if (names && in_list(names, a->name)) continue;
    const char *name = tf_attr_name(tf, a->name);
    const struct attr_rule *rule = attr_rule(tf, name);
    if (rule && rule->kind == RULE_OMIT) continue;
    if (has_attr(out, n_out, name)) continue;
    if (a->type > NPU_ATTR_DTYPE) {
      st = npuC_error(ctx, NPU_ERR_UNSUPPORTED, "node '%s': attribute '%s' has no GraphDef form",
                      node->name, a->name);
      break;
    }
    out_attr *o = &out[n_out++];
    o->name = name;
    memcpy(&o->a.u, &a->u, sizeof o->a.u);
    o->a.type = a->type;
    o->as_shape = def->kind == NPUX_KIND_PLACEHOLDER && strcmp(name, "shape") == 0;
    /* a graph built in Lua gives dtypes as names ({dtype = "float32"}): TensorFlow reads an
       AttrValue `type` (DT_FLOAT) there, never a string */
    int dt = a->type == NPU_ATTR_STRING && is_dtype_attr(name) ? npu_dtype_from_name(a->u.s) : -1;
    if (dt >= 0) o->a.type = NPU_ATTR_DTYPE, o->a.u.i = dt;
    if (is_window_attr(tf, name) && (a->type == NPU_ATTR_INT ||
                                     (a->type == NPU_ATTR_INTS && a->u.ints.n <= 2))) {
      int64_t h = a->type == NPU_ATTR_INT ? a->u.i : a->u.ints.n ? a->u.ints.v[0] : 1;
      int64_t wd = a->type == NPU_ATTR_INT ? a->u.i : a->u.ints.n == 2 ? a->u.ints.v[1] : h;
      wide[i][0] = 1, wide[i][1] = h, wide[i][2] = wd, wide[i][3] = 1;
      o->a.type = NPU_ATTR_INTS;
      o->a.u.ints.v = wide[i];
      o->a.u.ints.n = 4;
    }
  }
  /* the rules of this type, then T and N where TensorFlow has them */
  npu_dtype operand0 = n_ops ? ops[0].dtype : NPU_DTYPE_I32;
  npu_dtype operand1 = n_ops > 1 ? ops[1].dtype : NPU_DTYPE_F32;
  for (size_t r = 0; r < npu_countof(attr_rules) && !st; r++) {
    const struct attr_rule *rule = &attr_rules[r];
    if (strcmp(rule->tf, tf) != 0 || rule->kind == RULE_OMIT || has_attr(out, n_out, rule->attr))
      continue;
    out_attr *o = &out[n_out++];
    o->name = rule->attr;
    switch (rule->kind) {
    case RULE_STRING: o->a.type = NPU_ATTR_STRING, o->a.u.s = rule->s; break;
    case RULE_INT: o->a.type = NPU_ATTR_INT, o->a.u.i = rule->i; break;
    case RULE_BOOL: o->a.type = NPU_ATTR_BOOL, o->a.u.i = rule->i; break;
    case RULE_INTS: o->a.type = NPU_ATTR_INTS, o->a.u.ints.v = rule->ints, o->a.u.ints.n = rule->n; break;
    case RULE_N_OUTPUTS: o->a.type = NPU_ATTR_INT, o->a.u.i = node->n_outputs; break;
    default: {
      npu_dtype t = rule->src == SRC_OPERAND0 ? operand0
                    : rule->src == SRC_OPERAND1 ? operand1
                    : rule->src == SRC_OUT0   ? out0
                    : rule->src == SRC_DATA1  ? (n_data > 1 ? g->values[data[1]].dtype : data0)
                                              : data0;
      o->a.type = NPU_ATTR_DTYPE, o->a.u.i = t;
      break;
    }
    }
  }
  const struct attr_rule *t_rule = attr_rule(tf, "T");
  if (!has_attr(out, n_out, "T") && !(t_rule && t_rule->kind == RULE_OMIT) &&
      def->kind != NPUX_KIND_CONST && def->kind != NPUX_KIND_PLACEHOLDER &&
      def->kind != NPUX_KIND_NO_OP) {
    out_attr *o = &out[n_out++];
    o->name = "T";
    if (strcmp(tf, "IdentityN") == 0) o->type_list = true;
    else o->a.type = NPU_ATTR_DTYPE, o->a.u.i = data0;
  }
  if (def->kind == NPUX_KIND_CONST && !has_attr(out, n_out, "dtype")) {
    const npuG_attr *v = npuG_attr_find(node, "value");
    if (v && v->type == NPU_ATTR_TENSOR)
      out[n_out++] = (out_attr){.name = "dtype", .a = {.type = NPU_ATTR_DTYPE, .u.i = v->u.tensor->dtype}};
  }
  const struct attr_rule *n_rule = attr_rule(tf, "N");
  if (def->max_inputs < 0 && !has_attr(out, n_out, "N") && !(n_rule && n_rule->kind == RULE_OMIT))
    out[n_out++] = (out_attr){.name = "N", .a = {.type = NPU_ATTR_INT, .u.i = n_data}};
  if (!st) {
    qsort(out, (size_t)n_out, sizeof *out, cmp_attr);
    for (int i = 0; i < n_out; i++) {
      if (out[i].type_list) put_type_list(w, out[i].name, g, node);
      else put_attr(w, out[i].name, &out[i].a, out[i].as_shape);
    }
  }
  npuC_free(ctx, out);
  npuC_free(ctx, wide);
  npuI_pb_end(w, m);
  return st;
}

/* ---- control flow: If / While with a function library -------------------------------------
 * A cond is written as TensorFlow's If and a while as its While (TF2's functional control
 * flow), the regions as FunctionDefs of the graph's library:
 *   - every value a control node's regions read from around them (at any depth), and the
 *     results that are such values, is *captured*: an argument of its functions, passed by
 *     the If after pred, by the While after the loop variables (as more loop variables the body
 *     returns unchanged, as TensorFlow's while_v2 does);
 *   - an If's branches are "<fn>_then" / "<fn>_else" (args: the captures; rets: the results);
 *     a While's "<fn>_cond" (the region's nodes its condition needs) and "<fn>_body" (args: the
 *     loop variables, then the captures; rets: the next values, then the captures);
 *   - nodes inside a function name their inputs "node:<output arg>:<index>"; nested control
 *     nodes are If / While nodes of the function, with their own functions in the library.
 * The importer reads these back into the same cond and while nodes (graphdef.c). */

static bool is_control(const npuG_node *node) {
  int kind = npuX_op(node->op)->kind;
  return kind == NPUX_KIND_COND || kind == NPUX_KIND_WHILE;
}

static const char *export_type(const npuG_node *node) {
  const npu_op_def *def = npuX_op(node->op);
  int unused;
  if (def->kind == NPUX_KIND_COND) return "If";
  if (def->kind == NPUX_KIND_WHILE) return "While";
  if (strcmp(def->name, "pad") == 0) return pad_type(node, &unused);
  if (strcmp(def->name, "non_max_suppression") == 0) return "NonMaxSuppressionV4";
  return def->tf_type ? def->tf_type : def->name;
}

/* The captures of control node `id` (see above), in first-use order; their count.  list NULL:
   only counts.  seen: scratch of n_values bytes. */
static int captures_of(const npu_graph *g, int id, int *list, uint8_t *seen) {
  const npuG_node *node = &g->nodes[id];
  int r[2], n = 0;
  npuX_control_regions(node, r);
  memset(seen, 0, (size_t)g->n_values);
  bool is_while = npuX_op(node->op)->kind == NPUX_KIND_WHILE;
  int first = is_while ? (node->n_inputs - 1) / 2 : 1; /* results (and a while's pred) */
  for (int k = 0; k < g->n_nodes; k++) {
    const npuG_node *m = &g->nodes[k];
    bool mine = m->region && npuX_within_control_regions(g, r, m->region);
    if (!mine && k != id) continue;
    for (int i = k == id ? first : 0; i < m->n_inputs; i++) {
      int v = m->inputs[i];
      if (npuX_within_control_regions(g, r, g->nodes[g->values[v].node].region) || seen[v]) continue;
      seen[v] = 1;
      if (list) list[n] = v;
      n++;
    }
  }
  return n;
}

static void put_func_attr(npuI_pb_writer *w, const char *name, const char *fn) {
  size_t m = npuI_pb_begin(w, NODE_ATTR);
  npuI_pb_put_string(w, 1, name);
  size_t v = npuI_pb_begin(w, 2);
  size_t f = npuI_pb_begin(w, ATTR_FUNC);
  npuI_pb_put_string(w, 1, fn);
  npuI_pb_end(w, f);
  npuI_pb_end(w, v);
  npuI_pb_end(w, m);
}

static void put_dtypes_attr(npuI_pb_writer *w, const char *name, const npu_graph *g, int n1,
                            const int *v1, int n2, const int *v2) {
  size_t m = npuI_pb_begin(w, NODE_ATTR);
  npuI_pb_put_string(w, 1, name);
  size_t v = npuI_pb_begin(w, 2);
  size_t l = npuI_pb_begin(w, ATTR_LIST);
  size_t p = npuI_pb_begin(w, 6);
  for (int i = 0; i < n1 + n2; i++)
    npuI_pb_put_raw_varint(w, (uint64_t)npuI_dtype_to_tf(g->values[i < n1 ? v1[i] : v2[i - n1]].dtype));
  npuI_pb_end(w, p);
  npuI_pb_end(w, l);
  npuI_pb_end(w, v);
  npuI_pb_end(w, m);
}

/* A While's output_shapes: each loop variable's shape invariant (its loop_var's shape; any
   shape: an unknown rank; none given: the initial value's shape), then the captures' shapes
   (passed through unchanged). */
static void put_loop_shapes_attr(npuI_pb_writer *w, const npu_graph *g, int region, int n,
                                 const int *init, int n_caps, const int *caps) {
  size_t m = npuI_pb_begin(w, NODE_ATTR);
  npuI_pb_put_string(w, 1, "output_shapes");
  size_t v = npuI_pb_begin(w, 2);
  size_t l = npuI_pb_begin(w, ATTR_LIST);
  for (int i = 0; i < n; i++) {
    int ndim = g->values[init[i]].ndim;
    const int64_t *dims = g->values[init[i]].shape;
    for (int k = 0; k < g->n_nodes; k++) {
      const npuG_node *lv = &g->nodes[k];
      const npuG_attr *index = npuG_attr_find(lv, "index");
      if (lv->region != region || npuX_op(lv->op)->kind != NPUX_KIND_LOOP_VAR || !index ||
          index->u.i != i)
        continue;
      const npuG_attr *any = npuG_attr_find(lv, "any_shape");
      const npuG_attr *shape = npuG_attr_find(lv, "shape");
      if (any && any->u.i) ndim = -1;
      else if (shape && shape->type == NPU_ATTR_INTS) ndim = shape->u.ints.n, dims = shape->u.ints.v;
      break;
    }
    put_shape(w, 7, ndim, dims);
  }
  for (int i = 0; i < n_caps; i++) put_shape(w, 7, g->values[caps[i]].ndim, g->values[caps[i]].shape);
  npuI_pb_end(w, l);
  npuI_pb_end(w, v);
  npuI_pb_end(w, m);
}

static void fn_name(const npuG_node *node, int id, const char *part, char *buf, size_t size) {
  snprintf(buf, size, "%.200s_%d_%s", node->name, id, part);
  for (char *c = buf; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_' || *c == '.' || *c == '-'))
      *c = '_';
}

/* The If / While node of control node id (attributes sorted by name). */
static npu_status put_control(npu_graph *g, npuI_pb_writer *w, int id, const fn_scope *fs) {
  const npuG_node *node = &g->nodes[id];
  bool is_while = npuX_op(node->op)->kind == NPUX_KIND_WHILE;
  uint8_t *seen = npuC_alloc(g->ctx, (size_t)g->n_values + 1);
  int *caps = seen ? npuC_alloc(g->ctx, (size_t)g->n_values * sizeof *caps + 1) : NULL;
  if (!caps) {
    npuC_free(g->ctx, seen);
    return npuC_error(g->ctx, NPU_ERR_NOMEM, "export: out of memory");
  }
  int n_caps = captures_of(g, id, caps, seen);
  int n = (node->n_inputs - 1) / 2;
  char a[300], b[300];
  size_t m = npuI_pb_begin(w, fs ? FUNCTION_NODE : GRAPH_NODE);
  npuI_pb_put_string(w, NODE_NAME, node->name);
  npuI_pb_put_string(w, NODE_OP, is_while ? "While" : "If");
  if (is_while)
    for (int i = 0; i < n; i++) put_input_name(w, g, fs, node->inputs[i]);
  else put_input_name(w, g, fs, node->inputs[0]);
  for (int i = 0; i < n_caps; i++) put_input_name(w, g, fs, caps[i]);
  if (is_while) {
    int outs[NPUX_MAX_OUTPUTS] = {0}; /* n <= NPUX_MAX_OUTPUTS; gcc cannot see it (-Werror) */
    for (int i = 0; i < n; i++) outs[i] = node->first_output + i;
    put_dtypes_attr(w, "T", g, n, outs, n_caps, caps);
    fn_name(node, id, "body", a, sizeof a);
    put_func_attr(w, "body", a);
    fn_name(node, id, "cond", b, sizeof b);
    put_func_attr(w, "cond", b);
    int r[2];
    npuX_control_regions(node, r);
    put_loop_shapes_attr(w, g, r[0], n, node->inputs, n_caps, caps);
    npu_attr pi = {.type = NPU_ATTR_INT, .u.i = 10};
    put_attr(w, "parallel_iterations", &pi, false);
  } else {
    npu_attr tc = {.type = NPU_ATTR_DTYPE, .u.i = g->values[node->inputs[0]].dtype};
    put_attr(w, "Tcond", &tc, false);
    put_dtypes_attr(w, "Tin", g, n_caps, caps, 0, NULL);
    int outs[NPUX_MAX_OUTPUTS] = {0}; /* n <= NPUX_MAX_OUTPUTS; gcc cannot see it (-Werror) */
    for (int i = 0; i < n; i++) outs[i] = node->first_output + i;
    put_dtypes_attr(w, "Tout", g, n, outs, 0, NULL);
    fn_name(node, id, "else", a, sizeof a);
    put_func_attr(w, "else_branch", a);
    fn_name(node, id, "then", b, sizeof b);
    put_func_attr(w, "then_branch", b);
  }
  npuI_pb_end(w, m);
  npuC_free(g->ctx, caps);
  npuC_free(g->ctx, seen);
  return NPU_OK;
}

static void put_arg(npuI_pb_writer *w, uint32_t field, const char *name, npu_dtype dt) {
  size_t m = npuI_pb_begin(w, field);
  npuI_pb_put_string(w, 1, name);
  npuI_pb_put_varint(w, 3, (uint64_t)npuI_dtype_to_tf(dt));
  npuI_pb_end(w, m);
}

/* The nodes of `region` (those marked in need, when need is given) as the function's nodes. */
static npu_status put_region_nodes(npu_graph *g, npuI_pb_writer *w, int region, const uint8_t *need,
                                   const fn_scope *fs) {
  for (int k = 0; k < g->n_nodes; k++) {
    const npuG_node *m = &g->nodes[k];
    if (m->region != region || (need && !need[k]) || npuX_op(m->op)->kind == NPUX_KIND_LOOP_VAR)
      continue;
    npu_status st = is_control(m) ? put_control(g, w, k, fs) : put_node(g, w, m, fs);
    if (st) return st;
  }
  return NPU_OK;
}

/* One FunctionDef: args (n_vars loop variables v<i>, then the captures a<i>), the nodes of
   region, rets r<i> = results. */
static npu_status put_function(npu_graph *g, npuI_pb_writer *w, const char *name, int region,
                               const uint8_t *need, int n_vars, const int *var_values,
                               const fn_scope *fs, int n_res, const int *res) {
  char buf[1200], key[32];
  size_t f = npuI_pb_begin(w, LIBRARY_FUNCTION);
  size_t sig = npuI_pb_begin(w, FUNCTION_SIGNATURE);
  npuI_pb_put_string(w, 1, name);
  for (int i = 0; i < n_vars; i++) {
    snprintf(key, sizeof key, "v%d", i);
    put_arg(w, 2, key, g->values[var_values[i]].dtype);
  }
  for (int i = 0; i < fs->n_args; i++) {
    snprintf(key, sizeof key, "a%d", i);
    put_arg(w, 2, key, g->values[fs->args[i]].dtype);
  }
  for (int i = 0; i < n_res; i++) {
    snprintf(key, sizeof key, "r%d", i);
    put_arg(w, 3, key, g->values[res[i]].dtype);
  }
  npuI_pb_end(w, sig);
  npu_status st = put_region_nodes(g, w, region, need, fs);
  for (int i = 0; i < n_res && !st; i++) {
    size_t r = npuI_pb_begin(w, FUNCTION_RET);
    snprintf(key, sizeof key, "r%d", i);
    npuI_pb_put_string(w, 1, key);
    value_name(g, fs, res[i], buf, sizeof buf);
    npuI_pb_put_string(w, 2, buf);
    npuI_pb_end(w, r);
  }
  npuI_pb_end(w, f);
  return st;
}

/* Marks the nodes of `region` that value `root` needs (through nested control nodes). */
static void mark_needs(const npu_graph *g, int region, int root, uint8_t *need) {
  int r = g->values[root].node;
  if (g->nodes[r].region != region) return;
  need[r] = 1;
  for (int k = r; k >= 0; k--) {
    const npuG_node *m = &g->nodes[k];
    if (!need[k]) continue;
    for (int i = 0; i < m->n_controls; i++) /* written as "^dep": the function has it */
      if (g->nodes[m->controls[i]].region == region) need[m->controls[i]] = 1;
    for (int i = 0; i < m->n_inputs; i++) {
      int src = g->values[m->inputs[i]].node;
      if (g->nodes[src].region == region) need[src] = 1;
      else if (is_control(m)) { /* values its regions read from this region */
        for (int j = src; j >= 0; j = g->regions[g->nodes[j].region - 1].owner) {
          if (g->nodes[j].region == region) {
            need[j] = 1;
            break;
          }
          if (!g->nodes[j].region) break;
        }
      }
    }
    if (is_control(m)) {
      int rr[2];
      npuX_control_regions(m, rr);
      for (int j = 0; j < k; j++) {
        const npuG_node *x = &g->nodes[j];
        if (!x->region || !npuX_within_control_regions(g, rr, x->region)) continue;
        for (int i = 0; i < x->n_inputs; i++) {
          int src = g->values[x->inputs[i]].node;
          if (g->nodes[src].region == region) need[src] = 1;
        }
      }
    }
  }
}

/* The functions of control node id. */
static npu_status put_functions(npu_graph *g, npuI_pb_writer *w, int id) {
  const npuG_node *node = &g->nodes[id];
  bool is_while = npuX_op(node->op)->kind == NPUX_KIND_WHILE;
  uint8_t *seen = npuC_alloc(g->ctx, (size_t)g->n_values + (size_t)g->n_nodes + 1);
  int *caps = seen ? npuC_alloc(g->ctx, ((size_t)g->n_values + 2 * NPUX_MAX_OUTPUTS + 1) * sizeof *caps) : NULL;
  if (!caps) {
    npuC_free(g->ctx, seen);
    return npuC_error(g->ctx, NPU_ERR_NOMEM, "export: out of memory");
  }
  int n_caps = captures_of(g, id, caps, seen);
  int n = (node->n_inputs - 1) / 2, r[2];
  npuX_control_regions(node, r);
  char name[300];
  npu_status st = NPU_OK;
  if (!is_while) {
    fn_scope fs = {.n_args = n_caps, .args = caps};
    for (int b = 0; b < 2 && !st; b++) {
      fn_name(node, id, b ? "else" : "then", name, sizeof name);
      st = put_function(g, w, name, r[b], NULL, 0, NULL, &fs, n, node->inputs + 1 + b * n);
    }
  } else {
    fn_scope fs = {.n_args = n_caps, .args = caps, .loop_region = r[0]};
    int outs[NPUX_MAX_OUTPUTS] = {0}; /* n <= NPUX_MAX_OUTPUTS; gcc cannot see it (-Werror) */
    for (int i = 0; i < n; i++) outs[i] = node->first_output + i;
    uint8_t *need = seen + g->n_values;
    memset(need, 0, (size_t)g->n_nodes);
    mark_needs(g, r[0], node->inputs[n], need);
    fn_name(node, id, "cond", name, sizeof name);
    st = put_function(g, w, name, r[0], need, n, outs, &fs, 1, node->inputs + n);
    int *res = caps + n_caps; /* the next values, then the captures unchanged */
    for (int i = 0; i < n; i++) res[i] = node->inputs[n + 1 + i];
    for (int i = 0; i < n_caps; i++) res[n + i] = caps[i];
    fn_name(node, id, "body", name, sizeof name);
    if (!st) st = put_function(g, w, name, r[0], NULL, n, outs, &fs, n + n_caps, res);
  }
  npuC_free(g->ctx, caps);
  npuC_free(g->ctx, seen);
  return st;
}

/* For drawing (TensorBoard's graph tab): a node as name, TensorFlow type (VariableV2 and
   Assign for variables) and inputs, control inputs as "^name". */
static void put_sketch(npu_graph *g, npuI_pb_writer *w, const npuG_node *node) {
  const npu_op_def *def = npuX_op(node->op);
  size_t m = npuI_pb_begin(w, GRAPH_NODE);
  npuI_pb_put_string(w, NODE_NAME, node->name);
  npuI_pb_put_string(w, NODE_OP, def->kind == NPUX_KIND_VARIABLE ? "VariableV2"
                                 : def->kind == NPUX_KIND_ASSIGN ? "Assign"
                                 : def->tf_type ? def->tf_type : def->name);
  for (int i = 0; i < node->n_inputs; i++) put_input_name(w, g, NULL, node->inputs[i]);
  for (int i = 0; i < node->n_controls; i++) {
    char buf[1100];
    snprintf(buf, sizeof buf, "^%.1000s", g->nodes[node->controls[i]].name);
    npuI_pb_put_string(w, NODE_INPUT, buf);
  }
  npuI_pb_end(w, m);
}

/* sketch: a node TensorFlow could not load is written as put_sketch draws it instead of
   failing the export (npuI_graph_serialize_for_drawing). */
static npu_status serialize_mode(npu_graph *g, npuI_pb_writer *w, bool sketch) {
  bool any = false;
  for (int k = 0; k < g->n_nodes; k++) {
    const npuG_node *node = &g->nodes[k];
    any |= is_control(node);
    if (node->region) continue; /* written in its function */
    size_t mark = w->n;
    npu_status st = is_control(node) ? put_control(g, w, k, NULL) : put_node(g, w, node, NULL);
    if (st && sketch && st != NPU_ERR_NOMEM && !w->failed) {
      w->n = mark;
      put_sketch(g, w, node);
      st = NPU_OK;
    }
    if (st) return st;
  }
  if (any) {
    size_t lib = npuI_pb_begin(w, GRAPH_LIBRARY);
    for (int k = 0; k < g->n_nodes; k++) {
      npu_status st = is_control(&g->nodes[k]) ? put_functions(g, w, k) : NPU_OK;
      if (st) return st;
    }
    npuI_pb_end(w, lib);
  }
  if (w->failed) return npuC_error(g->ctx, NPU_ERR_NOMEM, "export: out of memory");
  return NPU_OK;
}

static npu_status serialize(npu_graph *g, npuI_pb_writer *w) { return serialize_mode(g, w, false); }

static npu_status serialize_to_tensor(npu_graph *g, bool sketch, npu_tensor **out) {
  if (out) *out = NULL;
  if (!g || !out) return NPU_ERR_ARG;
  npuI_pb_writer w = {.ctx = g->ctx};
  npu_status st = serialize_mode(g, &w, sketch);
  if (!st) {
    int64_t n = (int64_t)w.n;
    st = npu_tensor_from_data(g->ctx, NPU_DTYPE_U8, 1, &n, w.buf, w.n, out);
  }
  npuI_pb_writer_free(&w);
  return st;
}

npu_status npu_graph_serialize_graphdef(npu_graph *g, npu_tensor **out) {
  return serialize_to_tensor(g, false, out);
}

npu_status npuI_graph_serialize_for_drawing(npu_graph *g, npu_tensor **out) {
  return serialize_to_tensor(g, true, out);
}

npu_status npu_graph_export_graphdef(npu_graph *g, const char *path) {
  if (!g) return NPU_ERR_ARG;
  if (!path) return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_export_graphdef: path is NULL");
  npuI_pb_writer w = {.ctx = g->ctx};
  npu_status st = serialize(g, &w);
  if (st) {
    npuI_pb_writer_free(&w);
    return npuC_error_prefix(g->ctx, st, "exporting '%s'", path);
  }
  FILE *f = fopen(path, "wb");
  if (!f) {
    int err = errno;
    npuI_pb_writer_free(&w);
    return npuC_error(g->ctx, NPU_ERR_IO, "cannot write '%s': %s", path, strerror(err));
  }
  size_t put = w.n ? fwrite(w.buf, 1, w.n, f) : 0;
  int err = put != w.n ? errno : 0;
  if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
  if (put != w.n && !err) err = EIO;
  npuI_pb_writer_free(&w);
  if (err) {
    remove(path);
    return npuC_error(g->ctx, NPU_ERR_IO, "cannot write '%s': %s", path, strerror(err));
  }
  return NPU_OK;
}
