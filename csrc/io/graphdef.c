/*
 * graphdef.c — TensorFlow graphs into npu_graphs: TensorFlow.js graph models (model.json: a
 * GraphDef in proto3 JSON form, a weights manifest and weight shards) and binary frozen
 * GraphDef `.pb` files.
 *
 * Both forms are first read into one small intermediate form (tf_node: name, op type, input
 * names, attributes, and for Const nodes the value as an npu_tensor), all of it in an arena
 * freed at the end.  Then:
 *   1. every op type is checked against the op table (npuX_find_tf) plus the alias table
 *      below (other versions of an op, converter ops); all unsupported types are reported in
 *      ONE error, each with a node using it;
 *   2. nodes are sorted topologically (a GraphDef's order is arbitrary; ours must list inputs
 *      first), "^name" inputs being control dependencies and "name:i" output i;
 *   3. each node becomes one npu node, or several where the alias table names a converter:
 *      converter-fused ops (_FusedConv2D, FusedDepthwiseConv2dNative, _FusedMatMul: the
 *      conv/matmul then each of fused_ops in order), NonMaxSuppressionV4 (its two outputs),
 *      ResizeBilinear of a non-float32 image (a cast first); the last node carries the
 *      TensorFlow name so "name:i" still finds the result; inputs TensorFlow passes as
 *      constants (op table .tf_const_inputs, the single list of them) become attributes;
 *   4. the signature (TensorFlow.js: userDefinedMetadata.signature, else signature; .pb: the
 *      Placeholders and the unconsumed outputs) becomes an npu_model_info.
 * Control flow (TF2 If / While / calls with the graph's function library, TF1 Switch / Merge /
 * Enter / Exit / NextIteration / LoopCond, TensorArrays and TensorLists) becomes our cond and
 * while nodes running regions: graphdef_control.c says how.
 *
 * Invariants: every message names the file and, where there is one, the node; a failing
 * import releases everything it made and sets its outs to NULL; all memory comes from the
 * context's allocator except cJSON's own parse tree (freed before returning).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/half.h"
#include "compile/exec_config.h"
#include "io/graphdef.h"
#include "io/graphdef_int.h"
#include "io/protobuf.h"

/* ---- dtypes and the const-input lists (shared with the exporter) ---------------------- */

static const struct {
  int tf;
  const char *name;
  int dtype; /* -1: no such dtype here */
} tf_types[] = {
    {NPUI_TF_FLOAT, "DT_FLOAT", NPU_DTYPE_F32},   {NPUI_TF_DOUBLE, "DT_DOUBLE", NPU_DTYPE_F64},
    {NPUI_TF_INT32, "DT_INT32", NPU_DTYPE_I32},   {NPUI_TF_UINT8, "DT_UINT8", NPU_DTYPE_U8},
    {NPUI_TF_INT16, "DT_INT16", -1},              {NPUI_TF_INT8, "DT_INT8", NPU_DTYPE_I8},
    {NPUI_TF_STRING, "DT_STRING", -1},            {8, "DT_COMPLEX64", -1},
    {NPUI_TF_INT64, "DT_INT64", NPU_DTYPE_I64},   {NPUI_TF_BOOL, "DT_BOOL", NPU_DTYPE_BOOL},
    {11, "DT_QINT8", -1},                         {12, "DT_QUINT8", -1},
    {13, "DT_QINT32", -1},                        {NPUI_TF_BFLOAT16, "DT_BFLOAT16", NPU_DTYPE_BF16},
    {15, "DT_QINT16", -1},                        {16, "DT_QUINT16", -1},
    {17, "DT_UINT16", -1},                        {18, "DT_COMPLEX128", -1},
    {NPUI_TF_HALF, "DT_HALF", NPU_DTYPE_F16},     {20, "DT_RESOURCE", -1},
    {21, "DT_VARIANT", -1},                       {22, "DT_UINT32", -1},
    {23, "DT_UINT64", -1},
};

int npuI_tf_to_dtype(int tf_dtype) {
  for (size_t i = 0; i < npu_countof(tf_types); i++)
    if (tf_types[i].tf == tf_dtype) return tf_types[i].dtype;
  return -1;
}

int npuI_dtype_to_tf(npu_dtype t) {
  for (size_t i = 0; i < npu_countof(tf_types); i++)
    if (tf_types[i].dtype == (int)t) return tf_types[i].tf;
  return 0;
}

int npuI_tf_dtype_from_name(const char *name) {
  for (size_t i = 0; i < npu_countof(tf_types); i++)
    if (strcmp(tf_types[i].name, name) == 0) return tf_types[i].tf;
  return -1;
}

const char *npuI_tf_dtype_name(int tf_dtype, char buf[16]) {
  for (size_t i = 0; i < npu_countof(tf_types); i++)
    if (tf_types[i].tf == tf_dtype) return tf_types[i].name;
  snprintf(buf, 16, "DT_<%d>", tf_dtype);
  return buf;
}

const char *npuI_list_item(const char *list, int i, char *buf, size_t size) {
  if (!list) return NULL;
  const char *s = list;
  for (int k = 0;; k++) {
    const char *e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (k == i) {
      if (len >= size) len = size - 1;
      memcpy(buf, s, len);
      buf[len] = 0;
      return len ? buf : NULL;
    }
    if (!e) return NULL;
    s = e + 1;
  }
}

static int list_count(const char *list) {
  char buf[64];
  int n = 0;
  while (npuI_list_item(list, n, buf, sizeof buf)) n++;
  return n;
}

static void arena_free(arena *a) {
  while (a->head) {
    arena_block *next = a->head->next;
    npuC_free(a->ctx, a->head);
    a->head = next;
  }
}

int npuI_find_tf_node(const importer *im, const char *name) {
  if (!im->n_slots) return -1;
  for (uint32_t i = npuC_hash_str(name) & (im->n_slots - 1);; i = (i + 1) & (im->n_slots - 1)) {
    int s = im->slots[i];
    if (!s) return -1;
    if (strcmp(im->nodes[s - 1].name, name) == 0) return s - 1;
  }
}

static void index_put(importer *im, int k) {
  uint32_t i = npuC_hash_str(im->nodes[k].name) & (im->n_slots - 1);
  while (im->slots[i]) i = (i + 1) & (im->n_slots - 1);
  im->slots[i] = k + 1;
  im->n_named++;
}

npu_status npuI_index_names(importer *im) {
  uint32_t n = 64;
  while (n < 4u * (uint32_t)im->n_nodes) n *= 2;
  im->slots = arena_calloc(&im->ar, n, sizeof *im->slots);
  if (!im->slots) return oom(im);
  im->n_slots = n;
  im->n_named = 0;
  for (int k = 0; k < im->n_nodes; k++) {
    const char *name = im->nodes[k].name;
    if (!*name) return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node %d has no name", im->source, k);
    if (npuI_find_tf_node(im, name) >= 0)
      return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: two nodes are named '%s'", im->source, name);
    index_put(im, k);
  }
  return NPU_OK;
}

/* Node k (just appended) into the index, which grows when half full. */
npu_status npuI_index_add(importer *im, int k) {
  if (2 * (im->n_named + 1) > im->n_slots) return npuI_index_names(im);
  index_put(im, k);
  return NPU_OK;
}

/* ---- tensors: TensorProto (binary or JSON) -> npu_tensor ------------------------------ */

/* Typed repeated values of a TensorProto: doubles for float kinds, int64 for the others
   (half_val carries float16/bfloat16 bit patterns). */
typedef struct tf_vals {
  int n;
  double *d;
  int64_t *i;
} tf_vals;

npu_status npuI_check_dtype(importer *im, const char *node, const char *what, int tf_dtype,
                              npu_dtype *out) {
  int t = npuI_tf_to_dtype(tf_dtype);
  char buf[16];
  if (t < 0) {
    bool known = false;
    for (size_t i = 0; i < npu_countof(tf_types); i++) known |= tf_types[i].tf == tf_dtype;
    return npuC_error(im->ctx, known ? NPU_ERR_UNSUPPORTED : NPU_ERR_FORMAT,
                      "%s: node '%s': %s %s %s", im->source, node, what,
                      npuI_tf_dtype_name(tf_dtype, buf),
                      known ? "is not supported on this device" : "is not a TensorFlow dtype");
  }
  *out = (npu_dtype)t;
  return NPU_OK;
}

static npu_status shape_numel(importer *im, const char *node, const tf_shape *s, int64_t *numel) {
  char buf[96];
  if (s->ndim < 0)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s': a constant needs a known shape",
                      im->source, node);
  for (int i = 0; i < s->ndim; i++)
    if (s->dims[i] < 0)
      return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s': constant shape %s is invalid",
                        im->source, node, npuC_shape_str(buf, sizeof buf, s->ndim, s->dims));
  *numel = npuT_numel(s->ndim, s->dims);
  if (*numel < 0 || *numel > ((int64_t)1 << 40))
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s': constant shape %s is too large",
                      im->source, node, npuC_shape_str(buf, sizeof buf, s->ndim, s->dims));
  return NPU_OK;
}

static void store_value(npu_tensor *t, int64_t k, const tf_vals *v, int64_t src) {
  void *p = t->data;
  double d = v->d ? v->d[src] : 0;
  int64_t i = v->i ? v->i[src] : 0;
  switch (t->dtype) {
  case NPU_DTYPE_F32: ((float *)p)[k] = (float)d; break;
  case NPU_DTYPE_F64: ((double *)p)[k] = d; break;
  case NPU_DTYPE_F16: case NPU_DTYPE_BF16: ((uint16_t *)p)[k] = (uint16_t)i; break;
  case NPU_DTYPE_I8: ((int8_t *)p)[k] = (int8_t)i; break;
  case NPU_DTYPE_U8: ((uint8_t *)p)[k] = (uint8_t)i; break;
  case NPU_DTYPE_I32: ((int32_t *)p)[k] = (int32_t)i; break;
  case NPU_DTYPE_I64: ((int64_t *)p)[k] = i; break;
  case NPU_DTYPE_BOOL: ((uint8_t *)p)[k] = i != 0; break;
  default: break;
  }
}

/* content (tensor_content) wins over vals; fewer vals than elements repeat the last one, as
   TensorFlow does; none at all is zeros. */
static npu_status build_tensor(importer *im, const char *node, int tf_dtype, const tf_shape *shape,
                               const uint8_t *content, size_t content_len, const tf_vals *vals,
                               npu_tensor **out) {
  *out = NULL;
  npu_dtype dt = NPU_DTYPE_F32;
  int64_t numel = 0;
  npu_status st = npuI_check_dtype(im, node, "constant dtype", tf_dtype, &dt);
  if (!st) st = shape_numel(im, node, shape, &numel);
  if (st) return st;
  char buf[96];
  if (content && content_len != (size_t)numel * npu_dtype_size(dt))
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: node '%s': tensor_content holds %zu bytes, shape %s of %s needs %zu",
                      im->source, node, content_len,
                      npuC_shape_str(buf, sizeof buf, shape->ndim, shape->dims), npu_dtype_name(dt),
                      (size_t)numel * npu_dtype_size(dt));
  if (!content && vals->n > numel)
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: node '%s': %d values given for shape %s (%lld elements)", im->source,
                      node, vals->n, npuC_shape_str(buf, sizeof buf, shape->ndim, shape->dims),
                      (long long)numel);
  npu_tensor *t;
  st = npu_tensor_new(im->ctx, dt, shape->ndim, shape->dims, &t);
  if (st) return st == NPU_ERR_NOMEM ? oom(im) : st;
  if (content) {
    if (content_len) memcpy(t->data, content, content_len);
    npuT_canonical_bools(t);
  } else if (vals->n > 0) {
    for (int64_t k = 0; k < numel; k++) store_value(t, k, vals, k < vals->n ? k : vals->n - 1);
  }
  *out = t;
  return NPU_OK;
}

/* ---- binary GraphDef -------------------------------------------------------------------- */

static npu_status bad_pb(importer *im, const char *what, const char *node) {
  if (node)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: corrupt GraphDef: malformed %s in node '%s'",
                      im->source, what, node);
  return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: corrupt GraphDef: malformed %s", im->source,
                    what);
}

static npu_status pb_shape(importer *im, const char *node, const uint8_t *data, size_t len,
                           tf_shape *s) {
  npuI_pb_reader r = npuI_pb_reader_of(data, len);
  npuI_pb_field f;
  int k;
  s->ndim = 0;
  bool unknown = false;
  while ((k = npuI_pb_next(&r, &f)) == 1) {
    if (f.number == 3 && f.wire == NPUI_PB_VARINT) unknown = f.u != 0;
    if (f.number != 2 || f.wire != NPUI_PB_BYTES) continue;
    if (s->ndim == NPU_MAX_DIMS)
      return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: node '%s': more than %d dimensions",
                        im->source, node, NPU_MAX_DIMS);
    int64_t size = 0;
    npuI_pb_reader dr = npuI_pb_reader_of(f.data, f.len);
    npuI_pb_field df;
    int kk;
    while ((kk = npuI_pb_next(&dr, &df)) == 1)
      if (df.number == 1 && df.wire == NPUI_PB_VARINT) size = (int64_t)df.u;
    if (kk < 0) return bad_pb(im, "TensorShapeProto.dim", node);
    s->dims[s->ndim++] = size < -1 ? -1 : size;
  }
  if (k < 0) return bad_pb(im, "TensorShapeProto", node);
  if (unknown) s->ndim = -1;
  return NPU_OK;
}

/* Counts (pass 0) or stores (pass 1) the values of one repeated numeric field. */
static int pb_vals(const npuI_pb_field *f, int kind, tf_vals *v, int pass) {
  /* kind: 0 float (fixed32), 1 double (fixed64), 2 varint */
  npuI_pb_reader r;
  if (f->wire == NPUI_PB_BYTES) r = npuI_pb_reader_of(f->data, f->len);
  else {
    /* an unpacked element: the field's own value */
    if ((kind == 0 && f->wire != NPUI_PB_FIXED32) || (kind == 1 && f->wire != NPUI_PB_FIXED64) ||
        (kind == 2 && f->wire != NPUI_PB_VARINT))
      return -1;
    if (pass) {
      if (kind == 0) {
        uint32_t b = (uint32_t)f->u;
        float x;
        memcpy(&x, &b, 4);
        v->d[v->n] = x;
      } else if (kind == 1) {
        double x;
        memcpy(&x, &f->u, 8);
        v->d[v->n] = x;
      } else
        v->i[v->n] = (int64_t)f->u;
    }
    v->n++;
    return 0;
  }
  for (;;) {
    int k;
    if (kind == 0) {
      uint32_t b;
      if ((k = npuI_pb_read_fixed32(&r, &b)) != 1) return k;
      if (pass) {
        float x;
        memcpy(&x, &b, 4);
        v->d[v->n] = x;
      }
    } else if (kind == 1) {
      uint64_t b;
      if ((k = npuI_pb_read_fixed64(&r, &b)) != 1) return k;
      if (pass) {
        double x;
        memcpy(&x, &b, 8);
        v->d[v->n] = x;
      }
    } else {
      uint64_t b;
      if ((k = npuI_pb_read_varint(&r, &b)) != 1) return k;
      if (pass) v->i[v->n] = (int64_t)b;
    }
    v->n++;
  }
}

static npu_status pb_tensor(importer *im, const char *node, const uint8_t *data, size_t len,
                            npu_tensor **out) {
  int tf_dtype = 0;
  tf_shape shape = {.ndim = 0};
  const uint8_t *content = NULL;
  size_t content_len = 0;
  tf_vals v = {0};
  npu_status st;
  for (int pass = 0; pass < 2; pass++) {
    npuI_pb_reader r = npuI_pb_reader_of(data, len);
    npuI_pb_field f;
    int k;
    v.n = 0;
    while ((k = npuI_pb_next(&r, &f)) == 1) {
      int kind = -1;
      switch (f.number) {
      case 1: if (!pass) tf_dtype = (int)f.u; break;
      case 2:
        if (!pass && f.wire == NPUI_PB_BYTES && (st = pb_shape(im, node, f.data, f.len, &shape)))
          return st;
        break;
      case 4:
        if (f.wire == NPUI_PB_BYTES) content = f.data, content_len = f.len;
        break;
      case 5: kind = 0; break;                         /* float_val */
      case 6: kind = 1; break;                         /* double_val */
      case 7: case 10: case 11: case 13: kind = 2; break; /* int, int64, bool, half */
      default: break;
      }
      if (kind >= 0 && pb_vals(&f, kind, &v, pass) < 0) return bad_pb(im, "TensorProto values", node);
    }
    if (k < 0) return bad_pb(im, "TensorProto", node);
    if (!pass && v.n) {
      v.d = arena_calloc(&im->ar, (size_t)v.n, sizeof *v.d);
      v.i = arena_calloc(&im->ar, (size_t)v.n, sizeof *v.i);
      if (!v.d || !v.i) return oom(im);
    }
    if (!pass && !v.n) break;
  }
  return build_tensor(im, node, tf_dtype, &shape, content, content_len, &v, out);
}

static npu_status pb_list(importer *im, const char *node, tf_attr *a, const uint8_t *data,
                          size_t len) {
  /* ListValue: s = 2, i = 3, f = 4, b = 5, type = 6, shape = 7, tensor = 8, func = 9 */
  int n_i = 0, n_f = 0, n_s = 0, n_sh = 0, n_other = 0;
  tf_vals vi = {0}, vf = {0};
  for (int pass = 0; pass < 2; pass++) {
    npuI_pb_reader r = npuI_pb_reader_of(data, len);
    npuI_pb_field f;
    int k;
    vi.n = vf.n = 0;
    n_s = n_sh = 0;
    while ((k = npuI_pb_next(&r, &f)) == 1) {
      int rc = 0;
      if (f.number == 3 || f.number == 5 || f.number == 6) rc = pb_vals(&f, 2, &vi, pass);
      else if (f.number == 4) rc = pb_vals(&f, 0, &vf, pass);
      else if (f.number == 2 && f.wire == NPUI_PB_BYTES) {
        if (pass && !(a->strs[n_s] = arena_strndup(&im->ar, (const char *)f.data, f.len)))
          return oom(im);
        n_s++;
      } else if (f.number == 7 && f.wire == NPUI_PB_BYTES) {
        npu_status st = pass ? pb_shape(im, node, f.data, f.len, &a->shapes[n_sh]) : NPU_OK;
        if (st) return st;
        n_sh++;
      } else if (!pass) n_other++;
      if (rc < 0) return bad_pb(im, "AttrValue.list", node);
    }
    if (k < 0) return bad_pb(im, "AttrValue.list", node);
    if (!pass) {
      n_i = vi.n, n_f = vf.n;
      if (n_i && !(vi.i = arena_calloc(&im->ar, (size_t)n_i, sizeof *vi.i))) return oom(im);
      if (n_f && !(vf.d = arena_calloc(&im->ar, (size_t)n_f, sizeof *vf.d))) return oom(im);
      if (n_s && !(a->strs = arena_calloc(&im->ar, (size_t)n_s, sizeof *a->strs))) return oom(im);
      if (n_sh && !(a->shapes = arena_calloc(&im->ar, (size_t)n_sh, sizeof *a->shapes)))
        return oom(im);
    }
  }
  if (n_i) a->kind = TA_LIST_I, a->n = n_i, a->ints = vi.i;
  else if (n_sh) a->kind = TA_LIST_SHAPE, a->n = n_sh;
  else if (n_f) a->kind = TA_LIST_F, a->n = n_f, a->floats = vf.d;
  else if (n_s) a->kind = TA_LIST_S, a->n = n_s;
  else a->kind = n_other ? TA_OTHER : TA_LIST_EMPTY;
  return NPU_OK;
}

static npu_status pb_attr(importer *im, const char *node, tf_attr *a, const uint8_t *data,
                          size_t len) {
  npuI_pb_reader r = npuI_pb_reader_of(data, len);
  npuI_pb_field f;
  int k;
  npu_status st;
  a->kind = TA_OTHER;
  while ((k = npuI_pb_next(&r, &f)) == 1) {
    switch (f.number) {
    case 1:
      if (f.wire == NPUI_PB_BYTES && (st = pb_list(im, node, a, f.data, f.len))) return st;
      break;
    case 2:
      if (f.wire != NPUI_PB_BYTES) return bad_pb(im, "AttrValue.s", node);
      if (!(a->s = arena_strndup(&im->ar, (const char *)f.data, f.len))) return oom(im);
      a->s_len = f.len;
      a->kind = TA_S;
      break;
    case 3: a->kind = TA_I, a->i = (int64_t)f.u; break;
    case 4: {
      uint32_t b = (uint32_t)f.u;
      float x;
      memcpy(&x, &b, 4);
      a->kind = TA_F, a->f = x;
      break;
    }
    case 5: a->kind = TA_B, a->i = f.u != 0; break;
    case 6: a->kind = TA_TYPE, a->i = (int64_t)f.u; break;
    case 7:
      if (f.wire == NPUI_PB_BYTES && (st = pb_shape(im, node, f.data, f.len, &a->shape))) return st;
      a->kind = TA_SHAPE;
      break;
    case 8:
      if (f.wire != NPUI_PB_BYTES) return bad_pb(im, "AttrValue.tensor", node);
      npu_tensor_release(a->tensor); /* a repeated field: the last one wins */
      a->tensor = NULL;
      if ((st = pb_tensor(im, node, f.data, f.len, &a->tensor))) return st;
      a->kind = TA_TENSOR;
      break;
    case 10: { /* func: NameAttrList, name = 1 */
      if (f.wire != NPUI_PB_BYTES) return bad_pb(im, "AttrValue.func", node);
      npuI_pb_reader fr = npuI_pb_reader_of(f.data, f.len);
      npuI_pb_field ff;
      int kk;
      a->s = NULL;
      while ((kk = npuI_pb_next(&fr, &ff)) == 1)
        if (ff.number == 1 && ff.wire == NPUI_PB_BYTES &&
            !(a->s = arena_strndup(&im->ar, (const char *)ff.data, ff.len)))
          return oom(im);
      if (kk < 0 || !a->s) return bad_pb(im, "AttrValue.func", node);
      a->s_len = strlen(a->s);
      a->kind = TA_FUNC;
      break;
    }
    default: a->kind = TA_OTHER; break;
    }
  }
  return k < 0 ? bad_pb(im, "AttrValue", node) : NPU_OK;
}

static npu_status pb_node(importer *im, tf_node *n, const uint8_t *data, size_t len) {
  npu_status st;
  for (int pass = 0; pass < 2; pass++) {
    npuI_pb_reader r = npuI_pb_reader_of(data, len);
    npuI_pb_field f;
    int k, n_in = 0, n_attr = 0;
    while ((k = npuI_pb_next(&r, &f)) == 1) {
      if (f.wire != NPUI_PB_BYTES) continue;
      if (!pass && f.number == 1 && !(n->name = arena_strndup(&im->ar, (const char *)f.data, f.len)))
        return oom(im);
      if (!pass && f.number == 2 && !(n->op = arena_strndup(&im->ar, (const char *)f.data, f.len)))
        return oom(im);
      if (f.number == 3) {
        if (pass && !(n->inputs[n_in] = arena_strndup(&im->ar, (const char *)f.data, f.len)))
          return oom(im);
        n_in++;
      }
      if (f.number == 5) {
        if (pass) {
          /* map entry: key = 1, value = 2 */
          tf_attr *a = &n->attrs[n_attr];
          npuI_pb_reader er = npuI_pb_reader_of(f.data, f.len);
          npuI_pb_field ef;
          int kk;
          const uint8_t *val = NULL;
          size_t val_len = 0;
          while ((kk = npuI_pb_next(&er, &ef)) == 1) {
            if (ef.number == 1 && ef.wire == NPUI_PB_BYTES &&
                !(a->name = arena_strndup(&im->ar, (const char *)ef.data, ef.len)))
              return oom(im);
            if (ef.number == 2 && ef.wire == NPUI_PB_BYTES) val = ef.data, val_len = ef.len;
          }
          if (kk < 0 || !a->name) return bad_pb(im, "NodeDef.attr", n->name);
          if ((st = pb_attr(im, n->name ? n->name : "?", a, val ? val : f.data, val ? val_len : 0)))
            return st;
        }
        n_attr++;
      }
    }
    if (k < 0) return bad_pb(im, "NodeDef", n->name);
    if (!pass) {
      if (!n->name || !n->op)
        return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: corrupt GraphDef: a node without %s",
                          im->source, n->name ? "an op" : "a name");
      n->n_inputs = n_in;
      n->n_attrs = n_attr;
      n->inputs = arena_calloc(&im->ar, (size_t)n_in + 1, sizeof *n->inputs);
      n->attrs = arena_calloc(&im->ar, (size_t)n_attr + 1, sizeof *n->attrs);
      if (!n->inputs || !n->attrs) return oom(im);
    }
  }
  return NPU_OK;
}

/* The names of an OpDef's ArgDefs (field `number`: input_arg 2, output_arg 3; name = 1). */
static npu_status pb_arg_names(importer *im, const uint8_t *data, size_t len, uint32_t number,
                               int *n, const char ***out) {
  for (int pass = 0; pass < 2; pass++) {
    npuI_pb_reader r = npuI_pb_reader_of(data, len);
    npuI_pb_field f;
    int k, count = 0;
    while ((k = npuI_pb_next(&r, &f)) == 1) {
      if (f.number != number || f.wire != NPUI_PB_BYTES) continue;
      if (pass) {
        npuI_pb_reader ar = npuI_pb_reader_of(f.data, f.len);
        npuI_pb_field af;
        int kk;
        while ((kk = npuI_pb_next(&ar, &af)) == 1)
          if (af.number == 1 && af.wire == NPUI_PB_BYTES &&
              !((*out)[count] = arena_strndup(&im->ar, (const char *)af.data, af.len)))
            return oom(im);
        if (kk < 0 || !(*out)[count]) return bad_pb(im, "ArgDef", NULL);
      }
      count++;
    }
    if (k < 0) return bad_pb(im, "OpDef", NULL);
    if (!pass && !(*out = arena_calloc(&im->ar, (size_t)count + 1, sizeof **out))) return oom(im);
    *n = count;
  }
  return NPU_OK;
}

/* A FunctionDef: signature = 1 (OpDef: name = 1, input_arg = 2, output_arg = 3), node_def = 3,
   ret = 4 (map entries key = 1, value = 2). */
static npu_status pb_function(importer *im, tf_function *fn, const uint8_t *data, size_t len) {
  npu_status st;
  for (int pass = 0; pass < 2; pass++) {
    npuI_pb_reader r = npuI_pb_reader_of(data, len);
    npuI_pb_field f;
    int k, n_nodes = 0, n_ret = 0;
    while ((k = npuI_pb_next(&r, &f)) == 1) {
      if (f.wire != NPUI_PB_BYTES) continue;
      if (f.number == 1 && !pass) {
        npuI_pb_reader sr = npuI_pb_reader_of(f.data, f.len);
        npuI_pb_field sf;
        int kk;
        while ((kk = npuI_pb_next(&sr, &sf)) == 1)
          if (sf.number == 1 && sf.wire == NPUI_PB_BYTES &&
              !(fn->name = arena_strndup(&im->ar, (const char *)sf.data, sf.len)))
            return oom(im);
        if (kk < 0) return bad_pb(im, "OpDef", NULL);
        if ((st = pb_arg_names(im, f.data, f.len, 2, &fn->n_args, &fn->args)) ||
            (st = pb_arg_names(im, f.data, f.len, 3, &fn->n_outs, &fn->outs)))
          return st;
      } else if (f.number == 3) {
        if (pass && (st = pb_node(im, &fn->nodes[n_nodes], f.data, f.len))) return st;
        n_nodes++;
      } else if (f.number == 4) {
        if (pass) {
          npuI_pb_reader er = npuI_pb_reader_of(f.data, f.len);
          npuI_pb_field ef;
          int kk;
          while ((kk = npuI_pb_next(&er, &ef)) == 1) {
            const char **slot = ef.number == 1 ? &fn->ret_keys[n_ret] : ef.number == 2 ? &fn->ret_vals[n_ret] : NULL;
            if (slot && ef.wire == NPUI_PB_BYTES && !(*slot = arena_strndup(&im->ar, (const char *)ef.data, ef.len)))
              return oom(im);
          }
          if (kk < 0 || !fn->ret_keys[n_ret] || !fn->ret_vals[n_ret]) return bad_pb(im, "FunctionDef.ret", NULL);
        }
        n_ret++;
      }
    }
    if (k < 0) return bad_pb(im, "FunctionDef", NULL);
    if (!pass) {
      if (!fn->name) return bad_pb(im, "FunctionDef (no name)", NULL);
      fn->nodes = arena_calloc(&im->ar, (size_t)n_nodes + 1, sizeof *fn->nodes);
      fn->ret_keys = arena_calloc(&im->ar, (size_t)n_ret + 1, sizeof *fn->ret_keys);
      fn->ret_vals = arena_calloc(&im->ar, (size_t)n_ret + 1, sizeof *fn->ret_vals);
      if (!fn->nodes || !fn->ret_keys || !fn->ret_vals) return oom(im);
    }
    fn->n_nodes = n_nodes;
    fn->n_ret = n_ret;
  }
  return NPU_OK;
}

/* FunctionDefLibrary: function = 1. */
static npu_status pb_library(importer *im, const uint8_t *data, size_t len) {
  npuI_pb_reader r = npuI_pb_reader_of(data, len);
  npuI_pb_field f;
  int k, n = 0;
  while ((k = npuI_pb_next(&r, &f)) == 1) n += f.number == 1 && f.wire == NPUI_PB_BYTES;
  if (k < 0) return bad_pb(im, "FunctionDefLibrary", NULL);
  tf_function *fns = arena_calloc(&im->ar, (size_t)(im->n_functions + n) + 1, sizeof *fns);
  if (!fns) return oom(im);
  if (im->n_functions) memcpy(fns, im->functions, (size_t)im->n_functions * sizeof *fns);
  im->functions = fns;
  r = npuI_pb_reader_of(data, len);
  while (npuI_pb_next(&r, &f) == 1) {
    if (f.number != 1 || f.wire != NPUI_PB_BYTES) continue;
    npu_status st = pb_function(im, &im->functions[im->n_functions++], f.data, f.len);
    if (st) return st;
  }
  return NPU_OK;
}

static npu_status parse_pb(importer *im, const uint8_t *data, size_t len) {
  npuI_pb_reader r = npuI_pb_reader_of(data, len);
  npuI_pb_field f;
  int k, n = 0;
  while ((k = npuI_pb_next(&r, &f)) == 1) n += f.number == 1 && f.wire == NPUI_PB_BYTES;
  if (k < 0) return bad_pb(im, "GraphDef", NULL);
  if (n == 0)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: corrupt GraphDef: no nodes", im->source);
  im->nodes = arena_calloc(&im->ar, (size_t)n, sizeof *im->nodes);
  if (!im->nodes) return oom(im);
  im->cap_nodes = n;
  r = npuI_pb_reader_of(data, len);
  while (npuI_pb_next(&r, &f) == 1) {
    npu_status st = NPU_OK;
    if (f.number == 2 && f.wire == NPUI_PB_BYTES) st = pb_library(im, f.data, f.len);
    if (f.number == 1 && f.wire == NPUI_PB_BYTES) st = pb_node(im, &im->nodes[im->n_nodes++], f.data, f.len);
    if (st) return st;
  }
  return NPU_OK;
}

/* ---- proto3 JSON GraphDef (TensorFlow.js) -------------------------------------------- */

static npu_status bad_json(importer *im, const char *node, const char *what) {
  if (node)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s': %s", im->source, node, what);
  return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: %s", im->source, what);
}

static int b64_value(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

/* Base64 (standard or URL alphabet, padding optional) into an arena buffer (NUL-terminated). */
static int b64_decode(arena *a, const char *s, uint8_t **out, size_t *out_len) {
  size_t n = strlen(s);
  uint8_t *d = arena_alloc(a, n / 4 * 3 + 4);
  if (!d) return -2;
  size_t k = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '=') break;
    int v = b64_value((unsigned char)s[i]);
    if (v < 0) return -1;
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      d[k++] = (uint8_t)(acc >> bits);
    }
  }
  d[k] = 0;
  *out = d;
  *out_len = k;
  return 0;
}

/* proto3 JSON int64: a decimal string or a number. */
static int json_int(const cJSON *j, int64_t *v) {
  if (cJSON_IsNumber(j)) {
    double d = j->valuedouble; /* out of range (or NaN), the cast would be undefined */
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return -1;
    *v = (int64_t)d;
    return (double)*v == d ? 0 : -1;
  }
  if (!cJSON_IsString(j) || !*j->valuestring) return -1;
  char *end;
  errno = 0;
  long long x = strtoll(j->valuestring, &end, 10);
  if (*end || errno) return -1;
  *v = x;
  return 0;
}

static int json_float(const cJSON *j, double *v) {
  if (cJSON_IsNumber(j)) return *v = j->valuedouble, 0;
  if (!cJSON_IsString(j)) return -1;
  if (strcmp(j->valuestring, "NaN") == 0) return *v = NAN, 0;
  if (strcmp(j->valuestring, "Infinity") == 0) return *v = INFINITY, 0;
  if (strcmp(j->valuestring, "-Infinity") == 0) return *v = -INFINITY, 0;
  char *end;
  *v = strtod(j->valuestring, &end);
  return *end ? -1 : 0;
}

/* A DataType: "DT_FLOAT" or its number.  -1 when malformed, -2 when unknown. */
static int json_dtype(const cJSON *j) {
  if (cJSON_IsString(j)) return npuI_tf_dtype_from_name(j->valuestring) < 0 ? -2 : npuI_tf_dtype_from_name(j->valuestring);
  int64_t v;
  return json_int(j, &v) == 0 && v >= 0 && v < 1000 ? (int)v : -1;
}

/* TensorFlow.js has no 64-bit dtypes: its converter writes DT_DOUBLE and DT_INT64 Consts as
   float32 and int32 weights, and TensorFlow.js reads every DT_DOUBLE / DT_INT64 in the graph
   (a Cast's DstT, a Placeholder's dtype, an op's T) as float32 / int32 (parseDtypeParam in
   tfjs-converter), so a model computes in 32 bits there.  The JSON form is TensorFlow.js's,
   so it is read the same way: every dtype in it goes through this.  (Its other mappings,
   DT_HALF to float32 and DT_INT8 / DT_UINT8 to int32, are not made: those dtypes exist here.) */
static int tfjs_dtype(int tf_dtype) {
  return tf_dtype == NPUI_TF_DOUBLE ? NPUI_TF_FLOAT
         : tf_dtype == NPUI_TF_INT64 ? NPUI_TF_INT32
                                     : tf_dtype;
}

static npu_status json_dtype_checked(importer *im, const char *node, const cJSON *j, int *out) {
  int t = json_dtype(j);
  if (t == -2)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s': unknown dtype '%s'", im->source,
                      node, j->valuestring);
  if (t < 0) return bad_json(im, node, "malformed dtype");
  *out = tfjs_dtype(t);
  return NPU_OK;
}

/* An inline constant of a 64-bit dtype as TensorFlow.js holds it (tfjs_dtype). */
static npu_status narrow_tensor(importer *im, npu_tensor **t) {
  npu_tensor *w = *t;
  if (w->dtype != NPU_DTYPE_F64 && w->dtype != NPU_DTYPE_I64) return NPU_OK;
  npu_tensor *n;
  npu_status st = npu_tensor_new(im->ctx, w->dtype == NPU_DTYPE_F64 ? NPU_DTYPE_F32 : NPU_DTYPE_I32,
                                 w->ndim, w->shape, &n);
  if (st) return st == NPU_ERR_NOMEM ? oom(im) : st;
  for (int64_t k = 0; k < w->numel; k++)
    if (w->dtype == NPU_DTYPE_F64) ((float *)n->data)[k] = (float)((const double *)w->data)[k];
    else ((int32_t *)n->data)[k] = (int32_t)(uint32_t)((const int64_t *)w->data)[k];
  npu_tensor_release(w);
  *t = n;
  return NPU_OK;
}

static npu_status json_shape(importer *im, const char *node, const cJSON *j, tf_shape *s) {
  s->ndim = 0;
  if (!j) return NPU_OK;
  if (!cJSON_IsObject(j)) return bad_json(im, node, "malformed tensorShape");
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "unknownRank"))) {
    s->ndim = -1;
    return NPU_OK;
  }
  const cJSON *dims = cJSON_GetObjectItemCaseSensitive(j, "dim"), *d;
  if (dims && !cJSON_IsArray(dims)) return bad_json(im, node, "malformed tensorShape.dim");
  cJSON_ArrayForEach(d, dims) {
    if (s->ndim == NPU_MAX_DIMS)
      return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: node '%s': more than %d dimensions",
                        im->source, node, NPU_MAX_DIMS);
    int64_t size = 0;
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(d, "size");
    if (sz && json_int(sz, &size)) return bad_json(im, node, "malformed dimension size");
    s->dims[s->ndim++] = size < -1 ? -1 : size;
  }
  return NPU_OK;
}

static npu_status json_vals(importer *im, const char *node, const cJSON *arr, bool as_float,
                            bool as_bool, tf_vals *v) {
  int n = cJSON_GetArraySize(arr);
  if (!cJSON_IsArray(arr)) return bad_json(im, node, "malformed tensor values");
  v->n = 0;
  v->d = arena_calloc(&im->ar, (size_t)n + 1, sizeof *v->d);
  v->i = arena_calloc(&im->ar, (size_t)n + 1, sizeof *v->i);
  if (!v->d || !v->i) return oom(im);
  const cJSON *e;
  cJSON_ArrayForEach(e, arr) {
    int bad;
    if (as_bool) bad = !cJSON_IsBool(e), v->i[v->n] = cJSON_IsTrue(e);
    else if (as_float) bad = json_float(e, &v->d[v->n]);
    else bad = json_int(e, &v->i[v->n]);
    if (bad) return bad_json(im, node, "malformed tensor value");
    v->n++;
  }
  return NPU_OK;
}

/* A TensorProto in JSON; a TensorFlow.js Const has only dtype and shape (the value comes from
   the weights): then *out stays NULL. */
static npu_status json_tensor(importer *im, const char *node, const cJSON *j, npu_tensor **out) {
  *out = NULL;
  if (!cJSON_IsObject(j)) return bad_json(im, node, "malformed tensor");
  int tf_dtype = NPUI_TF_FLOAT;
  tf_shape shape;
  npu_status st;
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  if (dt && (tf_dtype = json_dtype(dt)) < 0) /* as written: tensorContent has its width */
    return json_dtype_checked(im, node, dt, &tf_dtype);
  if ((st = json_shape(im, node, cJSON_GetObjectItemCaseSensitive(j, "tensorShape"), &shape)))
    return st;
  const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "tensorContent");
  static const struct {
    const char *key;
    bool as_float, as_bool;
  } fields[] = {{"floatVal", true, false}, {"doubleVal", true, false}, {"intVal", false, false},
                {"int64Val", false, false}, {"boolVal", false, true}, {"halfVal", false, false}};
  tf_vals v = {0};
  bool any = content != NULL;
  for (size_t i = 0; i < npu_countof(fields) && !content; i++) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, fields[i].key);
    if (!arr) continue;
    if ((st = json_vals(im, node, arr, fields[i].as_float, fields[i].as_bool, &v))) return st;
    any = true;
    break;
  }
  if (!any) {
    /* TensorFlow.js: the value is in the weights; still check the dtype is one we have */
    npu_dtype unused;
    return npuI_check_dtype(im, node, "constant dtype", tfjs_dtype(tf_dtype), &unused);
  }
  uint8_t *bytes = NULL;
  size_t n_bytes = 0;
  if (content) {
    if (!cJSON_IsString(content)) return bad_json(im, node, "malformed tensorContent");
    int rc = b64_decode(&im->ar, content->valuestring, &bytes, &n_bytes);
    if (rc == -2) return oom(im);
    if (rc) return bad_json(im, node, "tensorContent is not base64");
  }
  if ((st = build_tensor(im, node, tf_dtype, &shape, bytes, n_bytes, &v, out))) return st;
  return narrow_tensor(im, out);
}

static npu_status json_list(importer *im, const char *node, tf_attr *a, const cJSON *list) {
  a->kind = TA_LIST_EMPTY;
  if (!cJSON_IsObject(list)) return bad_json(im, node, "malformed attribute list");
  const cJSON *e, *arr;
  if ((arr = cJSON_GetObjectItemCaseSensitive(list, "i")) ||
      (arr = cJSON_GetObjectItemCaseSensitive(list, "b")) ||
      (arr = cJSON_GetObjectItemCaseSensitive(list, "type"))) {
    int n = cJSON_GetArraySize(arr);
    if (!cJSON_IsArray(arr)) return bad_json(im, node, "malformed attribute list");
    if (!(a->ints = arena_calloc(&im->ar, (size_t)n + 1, sizeof *a->ints))) return oom(im);
    bool is_type = strcmp(arr->string, "type") == 0, is_bool = strcmp(arr->string, "b") == 0;
    cJSON_ArrayForEach(e, arr) {
      int64_t v;
      if (is_bool) v = cJSON_IsTrue(e);
      else if (is_type) v = tfjs_dtype(json_dtype(e));
      else if (json_int(e, &v)) return bad_json(im, node, "malformed integer in attribute list");
      a->ints[a->n++] = v;
    }
    if (a->n) a->kind = TA_LIST_I;
  } else if ((arr = cJSON_GetObjectItemCaseSensitive(list, "f"))) {
    int n = cJSON_GetArraySize(arr);
    if (!cJSON_IsArray(arr)) return bad_json(im, node, "malformed attribute list");
    if (!(a->floats = arena_calloc(&im->ar, (size_t)n + 1, sizeof *a->floats))) return oom(im);
    cJSON_ArrayForEach(e, arr) {
      if (json_float(e, &a->floats[a->n])) return bad_json(im, node, "malformed number in list");
      a->n++;
    }
    if (a->n) a->kind = TA_LIST_F;
  } else if ((arr = cJSON_GetObjectItemCaseSensitive(list, "s"))) {
    int n = cJSON_GetArraySize(arr);
    if (!cJSON_IsArray(arr)) return bad_json(im, node, "malformed attribute list");
    if (!(a->strs = arena_calloc(&im->ar, (size_t)n + 1, sizeof *a->strs))) return oom(im);
    cJSON_ArrayForEach(e, arr) {
      uint8_t *b;
      size_t len;
      if (!cJSON_IsString(e)) return bad_json(im, node, "malformed string in list");
      int rc = b64_decode(&im->ar, e->valuestring, &b, &len);
      if (rc == -2) return oom(im);
      if (rc) return bad_json(im, node, "a list string is not base64");
      a->strs[a->n++] = (const char *)b;
    }
    if (a->n) a->kind = TA_LIST_S;
  } else if ((arr = cJSON_GetObjectItemCaseSensitive(list, "shape"))) {
    int n = cJSON_GetArraySize(arr);
    if (!cJSON_IsArray(arr)) return bad_json(im, node, "malformed attribute list");
    if (!(a->shapes = arena_calloc(&im->ar, (size_t)n + 1, sizeof *a->shapes))) return oom(im);
    cJSON_ArrayForEach(e, arr) {
      npu_status st = json_shape(im, node, e, &a->shapes[a->n]);
      if (st) return st;
      a->n++;
    }
    if (a->n) a->kind = TA_LIST_SHAPE;
  } else if (list->child)
    a->kind = TA_OTHER; /* shapes, tensors, funcs */
  return NPU_OK;
}

static npu_status json_attr(importer *im, const char *node, tf_attr *a, const cJSON *v) {
  a->kind = TA_OTHER;
  if (!cJSON_IsObject(v)) return bad_json(im, node, "malformed attribute value");
  const cJSON *x;
  npu_status st;
  if ((x = cJSON_GetObjectItemCaseSensitive(v, "s"))) {
    uint8_t *b;
    if (!cJSON_IsString(x)) return bad_json(im, node, "malformed bytes attribute");
    int rc = b64_decode(&im->ar, x->valuestring, &b, &a->s_len);
    if (rc == -2) return oom(im);
    if (rc) return bad_json(im, node, "a bytes attribute is not base64");
    a->s = (const char *)b;
    a->kind = TA_S;
  } else if ((x = cJSON_GetObjectItemCaseSensitive(v, "i"))) {
    if (json_int(x, &a->i)) return bad_json(im, node, "malformed integer attribute");
    a->kind = TA_I;
  } else if ((x = cJSON_GetObjectItemCaseSensitive(v, "f"))) {
    if (json_float(x, &a->f)) return bad_json(im, node, "malformed float attribute");
    a->kind = TA_F;
  } else if ((x = cJSON_GetObjectItemCaseSensitive(v, "b"))) {
    a->kind = TA_B, a->i = cJSON_IsTrue(x);
  } else if ((x = cJSON_GetObjectItemCaseSensitive(v, "type"))) {
    int t;
    if ((st = json_dtype_checked(im, node, x, &t))) return st;
    a->kind = TA_TYPE, a->i = t;
  } else if ((x = cJSON_GetObjectItemCaseSensitive(v, "shape"))) {
    if ((st = json_shape(im, node, x, &a->shape))) return st;
    a->kind = TA_SHAPE;
  } else if ((x = cJSON_GetObjectItemCaseSensitive(v, "tensor"))) {
    /* the declared shape is kept: TensorFlow.js weights are checked against it */
    if (cJSON_IsObject(x) &&
        (st = json_shape(im, node, cJSON_GetObjectItemCaseSensitive(x, "tensorShape"), &a->shape)))
      return st;
    if ((st = json_tensor(im, node, x, &a->tensor))) return st;
    a->kind = TA_TENSOR;
  } else if ((x = cJSON_GetObjectItemCaseSensitive(v, "list"))) {
    return json_list(im, node, a, x);
  } else if ((x = cJSON_GetObjectItemCaseSensitive(v, "func"))) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(x, "name");
    if (!cJSON_IsString(nm)) return bad_json(im, node, "malformed func attribute");
    a->s = nm->valuestring;
    a->s_len = strlen(a->s);
    a->kind = TA_FUNC;
  }
  return NPU_OK;
}

static npu_status json_node(importer *im, const cJSON *jn, int index, tf_node *node) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(jn, "name");
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(jn, "op");
  if (!cJSON_IsString(name) || !cJSON_IsString(op)) {
    char what[64];
    snprintf(what, sizeof what, "node %d has no %s", index, cJSON_IsString(name) ? "op" : "name");
    return bad_json(im, NULL, what);
  }
  node->name = name->valuestring;
  node->op = op->valuestring;
  const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(jn, "input"), *e;
  const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(jn, "attr");
  if ((inputs && !cJSON_IsArray(inputs)) || (attrs && !cJSON_IsObject(attrs)))
    return bad_json(im, node->name, "malformed input or attr");
  node->inputs = arena_calloc(&im->ar, (size_t)cJSON_GetArraySize(inputs) + 1, sizeof *node->inputs);
  node->attrs = arena_calloc(&im->ar, (size_t)cJSON_GetArraySize(attrs) + 1, sizeof *node->attrs);
  if (!node->inputs || !node->attrs) return oom(im);
  cJSON_ArrayForEach(e, inputs) {
    if (!cJSON_IsString(e)) return bad_json(im, node->name, "an input is not a string");
    node->inputs[node->n_inputs++] = e->valuestring;
  }
  cJSON_ArrayForEach(e, attrs) {
    tf_attr *a = &node->attrs[node->n_attrs++];
    a->name = e->string;
    npu_status st = json_attr(im, node->name, a, e);
    if (st) return st;
  }
  return NPU_OK;
}

/* The names of a list of ArgDefs ({"name": ...}). */
static npu_status json_arg_names(importer *im, const char *fn, const cJSON *list, int *n,
                                 const char ***out) {
  const cJSON *e;
  *n = 0;
  if (list && !cJSON_IsArray(list)) return bad_json(im, fn, "malformed function signature");
  if (!(*out = arena_calloc(&im->ar, (size_t)cJSON_GetArraySize(list) + 1, sizeof **out)))
    return oom(im);
  cJSON_ArrayForEach(e, list) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(nm)) return bad_json(im, fn, "a function argument has no name");
    (*out)[(*n)++] = nm->valuestring;
  }
  return NPU_OK;
}

/* library.function: the FunctionDefs (signature, nodeDef, ret) If, While and the calls name. */
static npu_status parse_json_library(importer *im, const cJSON *lib) {
  const cJSON *fns = lib ? cJSON_GetObjectItemCaseSensitive(lib, "function") : NULL, *jf, *e;
  if (!fns) return NPU_OK;
  if (!cJSON_IsArray(fns)) return bad_json(im, NULL, "malformed library");
  im->functions = arena_calloc(&im->ar, (size_t)cJSON_GetArraySize(fns) + 1, sizeof *im->functions);
  if (!im->functions) return oom(im);
  cJSON_ArrayForEach(jf, fns) {
    tf_function *f = &im->functions[im->n_functions++];
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(jf, "signature");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(sig, "name");
    if (!cJSON_IsString(name)) return bad_json(im, NULL, "a library function has no name");
    f->name = name->valuestring;
    npu_status st = json_arg_names(im, f->name, cJSON_GetObjectItemCaseSensitive(sig, "inputArg"),
                                   &f->n_args, &f->args);
    if (!st) st = json_arg_names(im, f->name, cJSON_GetObjectItemCaseSensitive(sig, "outputArg"),
                                 &f->n_outs, &f->outs);
    if (st) return st;
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(jf, "nodeDef");
    const cJSON *ret = cJSON_GetObjectItemCaseSensitive(jf, "ret");
    if ((nodes && !cJSON_IsArray(nodes)) || (ret && !cJSON_IsObject(ret)))
      return bad_json(im, f->name, "malformed function");
    f->nodes = arena_calloc(&im->ar, (size_t)cJSON_GetArraySize(nodes) + 1, sizeof *f->nodes);
    f->ret_keys = arena_calloc(&im->ar, (size_t)cJSON_GetArraySize(ret) + 1, sizeof *f->ret_keys);
    f->ret_vals = arena_calloc(&im->ar, (size_t)cJSON_GetArraySize(ret) + 1, sizeof *f->ret_vals);
    if (!f->nodes || !f->ret_keys || !f->ret_vals) return oom(im);
    cJSON_ArrayForEach(e, nodes) {
      st = json_node(im, e, f->n_nodes, &f->nodes[f->n_nodes]);
      f->n_nodes++; /* a half-parsed node's tensors are released too */
      if (st) return st;
    }
    cJSON_ArrayForEach(e, ret) {
      if (!cJSON_IsString(e)) return bad_json(im, f->name, "malformed function ret");
      f->ret_keys[f->n_ret] = e->string;
      f->ret_vals[f->n_ret++] = e->valuestring;
    }
  }
  return NPU_OK;
}

static npu_status parse_json_graph(importer *im, const cJSON *topology) {
  const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(topology, "node"), *jn;
  if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) == 0)
    return bad_json(im, NULL, "modelTopology has no node list");
  int n = cJSON_GetArraySize(nodes);
  im->nodes = arena_calloc(&im->ar, (size_t)n, sizeof *im->nodes);
  if (!im->nodes) return oom(im);
  im->cap_nodes = n;
  cJSON_ArrayForEach(jn, nodes) {
    tf_node *node = &im->nodes[im->n_nodes];
    npu_status st = json_node(im, jn, im->n_nodes, node);
    im->n_nodes++;
    if (st) return st;
  }
  return parse_json_library(im, cJSON_GetObjectItemCaseSensitive(topology, "library"));
}

/* ---- files ---------------------------------------------------------------------------- */

/* All of path in a new NUL-terminated block (core/file.c); the caller frees it with npuC_free. */
static npu_status read_file(npu_context *ctx, const char *path, const char *what, uint8_t **out,
                            size_t *len) {
  char *text;
  npu_status st = npuC_read_file(ctx, path, what, &text, len);
  *out = (uint8_t *)text;
  return st;
}

/* ---- TensorFlow.js weights ------------------------------------------------------------ */

static const struct {
  const char *name;
  npu_dtype dtype;
  size_t size;
} weight_dtypes[] = {
    {"float32", NPU_DTYPE_F32, 4}, {"int32", NPU_DTYPE_I32, 4}, {"bool", NPU_DTYPE_BOOL, 1},
};

typedef struct weight_group {
  uint8_t *data; /* the group's shards concatenated */
  size_t len;
  char shards[256]; /* names for messages */
} weight_group;

/* A weightsManifest path names a file at or below the model's directory (TF.js writes bare
   shard names): not absolute, no ".." part.  A model file from elsewhere must not make the
   reader open any file the process can read. */
static bool inside_model_dir(const char *rel) {
  if (rel[0] == '/' || rel[0] == 0) return false;
  for (const char *p = rel; *p;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.') return false;
    p += n + (e != NULL);
  }
  return true;
}

static npu_status load_group(importer *im, const char *dir, const cJSON *paths, weight_group *wg) {
  const cJSON *p;
  size_t total = 0;
  wg->shards[0] = 0;
  /* first pass: sizes; second: read (files are read once each into the final buffer) */
  int n = cJSON_GetArraySize(paths);
  if (!cJSON_IsArray(paths) || n == 0)
    return bad_json(im, NULL, "weightsManifest: a group has no paths");
  char path[4096];
  uint8_t **parts = arena_calloc(&im->ar, (size_t)n, sizeof *parts);
  size_t *sizes = arena_calloc(&im->ar, (size_t)n, sizeof *sizes);
  if (!parts || !sizes) return oom(im);
  int k = 0;
  npu_status st = NPU_OK;
  cJSON_ArrayForEach(p, paths) {
    if (!cJSON_IsString(p)) {
      st = bad_json(im, NULL, "weightsManifest: a path is not a string");
      break;
    }
    if (!inside_model_dir(p->valuestring)) {
      st = npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: weightsManifest: path '%s' leaves the model's directory (absolute, or "
                      "with a '..' part): weight shards are read beside model.json only",
                      im->source, p->valuestring);
      break;
    }
    snprintf(path, sizeof path, "%s%s", dir, p->valuestring);
    if (strlen(wg->shards) + strlen(p->valuestring) + 3 < sizeof wg->shards)
      snprintf(wg->shards + strlen(wg->shards), sizeof wg->shards - strlen(wg->shards), "%s%s",
               k ? ", " : "", p->valuestring);
    st = read_file(im->ctx, path, "weight file", &parts[k], &sizes[k]);
    if (st) {
      if (st == NPU_ERR_IO)
        npuC_error_prefix(im->ctx, st, "%s: weightsManifest", im->source);
      break;
    }
    total += sizes[k++];
  }
  if (!st) {
    wg->data = npuC_alloc(im->ctx, total + 1);
    if (!wg->data) st = oom(im);
    else {
      size_t off = 0;
      for (int i = 0; i < k; i++) {
        if (sizes[i]) memcpy(wg->data + off, parts[i], sizes[i]);
        off += sizes[i];
      }
      wg->len = total;
    }
  }
  for (int i = 0; i < k; i++) npuC_free(im->ctx, parts[i]);
  return st;
}

static npu_status decode_weight(importer *im, const weight_group *wg, size_t *offset,
                                const cJSON *w) {
  const cJSON *jname = cJSON_GetObjectItemCaseSensitive(w, "name");
  const cJSON *jshape = cJSON_GetObjectItemCaseSensitive(w, "shape");
  const cJSON *jdtype = cJSON_GetObjectItemCaseSensitive(w, "dtype");
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(w, "quantization");
  if (!cJSON_IsString(jname) || !cJSON_IsArray(jshape) || !cJSON_IsString(jdtype))
    return bad_json(im, NULL, "weightsManifest: an entry lacks name, shape or dtype");
  const char *name = jname->valuestring;
  tf_shape shape = {0};
  const cJSON *d;
  cJSON_ArrayForEach(d, jshape) {
    int64_t v;
    if (shape.ndim == NPU_MAX_DIMS || json_int(d, &v) || v < 0)
      return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: weight '%s': invalid shape", im->source, name);
    shape.dims[shape.ndim++] = v;
  }
  int di = -1;
  for (size_t i = 0; i < npu_countof(weight_dtypes); i++)
    if (strcmp(weight_dtypes[i].name, jdtype->valuestring) == 0) di = (int)i;
  if (di < 0)
    return npuC_error(im->ctx, strcmp(jdtype->valuestring, "string") == 0 ||
                                       strcmp(jdtype->valuestring, "complex64") == 0
                                   ? NPU_ERR_UNSUPPORTED
                                   : NPU_ERR_FORMAT,
                      "%s: weight '%s': dtype '%s' is %s", im->source, name, jdtype->valuestring,
                      strcmp(jdtype->valuestring, "string") == 0 ||
                              strcmp(jdtype->valuestring, "complex64") == 0
                          ? "not supported on this device"
                          : "unknown (expected float32, int32 or bool)");
  int64_t numel;
  npu_status st = shape_numel(im, name, &shape, &numel);
  if (st) return st;
  /* storage: the dtype itself, or a quantization */
  size_t esize = weight_dtypes[di].size;
  int qkind = 0; /* 0 none, 1 float16, 2 uint8, 3 uint16 */
  double scale = 1, qmin = 0;
  if (q) {
    const cJSON *qd = cJSON_GetObjectItemCaseSensitive(q, "dtype");
    if (!cJSON_IsString(qd))
      return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: weight '%s': quantization without dtype",
                        im->source, name);
    if (strcmp(qd->valuestring, "float16") == 0) qkind = 1, esize = 2;
    else if (strcmp(qd->valuestring, "uint8") == 0) qkind = 2, esize = 1;
    else if (strcmp(qd->valuestring, "uint16") == 0) qkind = 3, esize = 2;
    else
      return npuC_error(im->ctx, NPU_ERR_FORMAT,
                        "%s: weight '%s': unknown quantization dtype '%s' (expected float16, "
                        "uint8 or uint16)",
                        im->source, name, qd->valuestring);
    if (qkind >= 2) {
      const cJSON *js = cJSON_GetObjectItemCaseSensitive(q, "scale");
      const cJSON *jm = cJSON_GetObjectItemCaseSensitive(q, "min");
      if (!cJSON_IsNumber(js) || !cJSON_IsNumber(jm))
        return npuC_error(im->ctx, NPU_ERR_FORMAT,
                          "%s: weight '%s': %s quantization needs scale and min", im->source, name,
                          qd->valuestring);
      scale = js->valuedouble, qmin = jm->valuedouble;
    }
    if (weight_dtypes[di].dtype == NPU_DTYPE_BOOL)
      return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: weight '%s': a bool weight cannot be quantized",
                        im->source, name);
  }
  size_t need = (size_t)numel * esize;
  if (wg->len - *offset < need) {
    char buf[96];
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: weight file(s) %s hold %zu bytes; weight '%s' (%s %s) needs bytes "
                      "%zu..%zu (truncated file?)",
                      im->source, wg->shards, wg->len, name, jdtype->valuestring,
                      npuC_shape_str(buf, sizeof buf, shape.ndim, shape.dims), *offset,
                      *offset + need);
  }
  const uint8_t *src = wg->data + *offset;
  *offset += need;
  int ni = npuI_find_tf_node(im, name);
  if (ni < 0) return NPU_OK; /* a weight no node uses: TensorFlow.js ignores it too */
  tf_node *node = &im->nodes[ni];
  char b1[96], b2[96];
  if (strcmp(node->op, "Const") != 0)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: weight '%s' names a %s node, not a Const",
                      im->source, name, node->op);
  /* the Const's declared dtype and shape must agree with the manifest */
  const tf_attr *va = node_attr(node, "value"), *da = node_attr(node, "dtype");
  npu_dtype dt = weight_dtypes[di].dtype;
  /* (a DT_DOUBLE / DT_INT64 Const's dtype already reads float32 / int32: tfjs_dtype) */
  if (da && da->kind == TA_TYPE && npuI_tf_to_dtype((int)da->i) != (int)dt) {
    char tb[16];
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: weight '%s' is %s but its Const node declares %s", im->source, name,
                      jdtype->valuestring, npuI_tf_dtype_name((int)da->i, tb));
  }
  if (va && va->kind == TA_TENSOR && va->tensor) /* both a value and a weight: keep the node's */
    return NPU_OK;
  if (va && va->kind == TA_TENSOR && !npuT_same_shape(va->shape.ndim, va->shape.dims, shape.ndim,
                                                      shape.dims))
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: weight '%s' has shape %s in weightsManifest but its Const node "
                      "declares %s",
                      im->source, name, npuC_shape_str(b1, sizeof b1, shape.ndim, shape.dims),
                      npuC_shape_str(b2, sizeof b2, va->shape.ndim, va->shape.dims));
  npu_tensor *t;
  st = npu_tensor_new(im->ctx, dt, shape.ndim, shape.dims, &t);
  if (st) return st == NPU_ERR_NOMEM ? oom(im) : st;
  if (qkind == 0 && need) memcpy(t->data, src, need); /* little-endian, as the host */
  for (int64_t k = 0; qkind && k < numel; k++) {
    double v; /* q * scale + min in double, then rounded once (README of the models) */
    if (qkind == 1) v = npu_f16_to_f32((uint16_t)(src[2 * k] | src[2 * k + 1] << 8));
    else if (qkind == 2) v = src[k] * scale + qmin;
    else v = (uint16_t)(src[2 * k] | src[2 * k + 1] << 8) * scale + qmin;
    if (dt == NPU_DTYPE_F32) ((float *)t->data)[k] = (float)v;
    else ((int32_t *)t->data)[k] = (int32_t)lround(v);
  }
  if (qkind == 0) npuT_canonical_bools(t);
  npu_tensor_release(node->weight);
  node->weight = t;
  return NPU_OK;
}

static npu_status load_weights(importer *im, const cJSON *manifest, const char *dir) {
  if (!manifest) return NPU_OK;
  if (!cJSON_IsArray(manifest)) return bad_json(im, NULL, "weightsManifest is not a list");
  const cJSON *group;
  cJSON_ArrayForEach(group, manifest) {
    weight_group wg = {0};
    npu_status st = load_group(im, dir, cJSON_GetObjectItemCaseSensitive(group, "paths"), &wg);
    if (st) return st;
    const cJSON *weights = cJSON_GetObjectItemCaseSensitive(group, "weights"), *w;
    size_t offset = 0;
    if (!cJSON_IsArray(weights)) st = bad_json(im, NULL, "weightsManifest: a group has no weights");
    cJSON_ArrayForEach(w, weights) {
      if (st) break;
      st = decode_weight(im, &wg, &offset, w);
    }
    npuC_free(im->ctx, wg.data);
    if (st) return st;
  }
  return NPU_OK;
}

/* ---- op mapping ------------------------------------------------------------------------ */

/* How a TensorFlow node becomes ours when it is not one node of one op (convert_node): the
   node, its data inputs' values and its converted attributes (room for 4 more). */
typedef npu_status (*convert_fn)(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                 int n_data, npu_attr *attrs, int n_attrs);
static npu_status convert_fused(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                int n_data, npu_attr *attrs, int n_attrs);
static npu_status convert_nms(importer *im, tf_node *n, const npu_op_def *def, int *in,
                              int n_data, npu_attr *attrs, int n_attrs);
static npu_status convert_resize(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                 int n_data, npu_attr *attrs, int n_attrs);
static npu_status convert_clip(importer *im, tf_node *n, const npu_op_def *def, int *in,
                               int n_data, npu_attr *attrs, int n_attrs);
static npu_status convert_assign_op(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                    int n_data, npu_attr *attrs, int n_attrs);

/* TensorFlow types that are not an op's .tf_type (other versions of the same op, converter
   ops) or that need more than one node.  Everything else is the op table's .tf_type: an
   entry here never repeats one. */
static const struct {
  const char *tf, *op;
  convert_fn convert; /* NULL: one node of op, const inputs as attributes */
} aliases[] = {
    {"AddV2", "add", NULL},
    {"BiasAddV1", "bias_add", NULL},
    {"Div", "div", NULL},
    {"Snapshot", "identity", NULL},
    {"PreventGradient", "identity", NULL},
    {"ReadVariableOp", "identity", NULL}, /* of a variable a SavedModel import made a Const */
    {"PadV2", "pad", NULL},      /* constant_values: the op's second const input */
    {"MirrorPad", "pad", NULL},  /* mode REFLECT / SYMMETRIC: an attribute of both */
    {"Inv", "reciprocal", NULL}, /* the old name of Reciprocal */
    {"BatchMatMul", "batch_matmul", NULL},   /* V1: no broadcasting, a special case of V2 */
    {"BatchMatMulV3", "batch_matmul", NULL}, /* V3: Ta, Tb, Tout; one dtype here */
    {"NonMaxSuppressionV2", "non_max_suppression", NULL}, /* output 0 only, unpadded */
    {"NonMaxSuppressionV3", "non_max_suppression", NULL},
    {"NonMaxSuppressionV4", "non_max_suppression", convert_nms},
    {"ResizeBilinear", "resize_bilinear", convert_resize},
    {"UniqueV2", "unique", NULL}, /* axis: a const input, [0] for the 1-D inputs we take */
    {"_FusedConv2D", "conv2d", convert_fused},
    {"FusedDepthwiseConv2dNative", "depthwise_conv2d", convert_fused},
    {"_FusedDepthwiseConv2dNative", "depthwise_conv2d", convert_fused},
    {"_FusedMatMul", "matmul", convert_fused},
    /* ops for TensorFlow imports and ported TF 1.15 scripts */
    {"InTopK", "in_top_k", NULL},             /* V1: k an attribute */
    {"ClipByValue", "minimum", convert_clip}, /* minimum(maximum(t, min), max) */
    {"AssignAdd", "assign", convert_assign_op}, /* assign(var, var + value) */
    {"AssignSub", "assign", convert_assign_op}, /* assign(var, var - value) */
    /* TensorArrays and TensorLists: one dense buffer ("TensorArrays and TensorLists") */
    {"TensorArrayV3", "tensor_array_write", npuI_convert_ta_new},
    {"TensorArrayWriteV3", "tensor_array_write", npuI_convert_ta_write},
    {"TensorArrayScatterV3", "tensor_array_write", npuI_convert_ta_write},
    {"TensorArrayReadV3", "gather", npuI_convert_ta_read},
    {"TensorArrayGatherV3", "gather", npuI_convert_ta_read},
    {"TensorArraySizeV3", "shape", npuI_convert_ta_size},
    {"TensorArrayConcatV3", "reshape", npuI_convert_ta_concat},
    {"TensorArraySplitV3", "tensor_array_write", npuI_convert_ta_split},
    {"TensorArrayCloseV3", "no_op", NULL},
    {"TensorListReserve", "tensor_array_write", npuI_convert_ta_new},
    {"EmptyTensorList", "tensor_array_write", npuI_convert_ta_new},
    {"TensorListFromTensor", "identity", npuI_convert_ta_stack},
    {"TensorListSetItem", "tensor_array_write", npuI_convert_ta_write},
    {"TensorListPushBack", "tensor_array_write", npuI_convert_ta_push_back},
    {"TensorListGetItem", "gather", npuI_convert_ta_read},
    {"TensorListGather", "gather", npuI_convert_ta_read},
    {"TensorListStack", "identity", npuI_convert_ta_stack},
    {"TensorListLength", "shape", npuI_convert_ta_size},
    {"TensorListElementShape", "shape", npuI_convert_ta_element_shape},
};

bool npuI_tf_alias(int i, const char **tf_type, const char **op, bool *converts) {
  if (i < 0 || (size_t)i >= npu_countof(aliases)) return false;
  *tf_type = aliases[i].tf;
  *op = aliases[i].op;
  *converts = aliases[i].convert != NULL;
  return true;
}

/* Our op id for a TensorFlow type (-1: none) and its converter (NULL: one plain node). */
static int map_op(const char *tf_type, convert_fn *convert) {
  *convert = NULL;
  for (size_t i = 0; i < npu_countof(aliases); i++)
    if (strcmp(aliases[i].tf, tf_type) == 0) {
      *convert = aliases[i].convert;
      return npuX_find(aliases[i].op);
    }
  return npuX_find_tf(tf_type);
}

/* ---- mixed computing: op types the host implements ------------------------------------ */

npu_status npu_context_register_host_op(npu_context *ctx, const char *tf_type, int64_t key) {
  if (!ctx) return NPU_ERR_ARG;
  size_t len = tf_type ? strlen(tf_type) : 0;
  if (len == 0 || len >= sizeof ctx->host_ops[0].tf_type)
    return npuC_error(ctx, NPU_ERR_ARG, "npu_context_register_host_op: the op type must be 1 to "
                      "%zu characters", sizeof ctx->host_ops[0].tf_type - 1);
  convert_fn convert;
  int op = map_op(tf_type, &convert);
  if (op >= 0)
    return npuC_error(ctx, NPU_ERR_ARG, "npu_context_register_host_op: the device has op type "
                      "'%s' (op %s): a host implementation is used only for types it lacks",
                      tf_type, npuX_op(op)->name);
  int i = 0;
  while (i < ctx->n_host_ops && strcmp(ctx->host_ops[i].tf_type, tf_type) != 0) i++;
  if (i == NPUC_MAX_HOST_OPS)
    return npuC_error(ctx, NPU_ERR_NOMEM, "npu_context_register_host_op: %d op types are "
                      "registered already", NPUC_MAX_HOST_OPS);
  memcpy(ctx->host_ops[i].tf_type, tf_type, len + 1);
  ctx->host_ops[i].key = key;
  if (i == ctx->n_host_ops) ctx->n_host_ops++;
  return NPU_OK;
}

static const npuC_host_op *host_op_of(const importer *im, const char *tf_type) {
  for (int i = 0; i < im->ctx->n_host_ops; i++)
    if (strcmp(im->ctx->host_ops[i].tf_type, tf_type) == 0) return &im->ctx->host_ops[i];
  return NULL;
}

/* Output dtype i of a node of a host-implemented type (npu_context_register_host_op says how it
   is chosen). */
static npu_status host_op_dtype(importer *im, const tf_node *n, int i, const int *in, int n_in,
                                int64_t *dtype) {
  const tf_attr *a = node_attr(n, "Tout");
  int tf = -1;
  if (a && a->kind == TA_LIST_I && a->n > 0) tf = (int)a->ints[i < a->n ? i : a->n - 1];
  static const char *const single[] = {"out_type", "dtype", "T"};
  for (size_t k = 0; k < npu_countof(single) && tf < 0; k++)
    if ((a = node_attr(n, single[k])) && a->kind == TA_TYPE) tf = (int)a->i;
  if (tf >= 0) {
    npu_dtype t;
    npu_status st = npuI_check_dtype(im, n->name, "output dtype", tf, &t);
    *dtype = t;
    return st;
  }
  *dtype = n_in > 0 ? npu_graph_value_dtype(im->g, in[0]) : NPU_DTYPE_F32;
  return NPU_OK;
}

/* A node of a type the host implements: one host_func node over all its data inputs. */
static npu_status convert_host_op(importer *im, tf_node *n, const npuC_host_op *h, int *in,
                                  int n_data) {
  int self = (int)(n - im->nodes), n_out = 1;
  for (int k = 0; k < im->n_nodes; k++)
    for (int i = 0; i < im->nodes[k].n_inputs; i++)
      if (im->nodes[k].in_node[i] == self && im->nodes[k].in_index[i] >= n_out)
        n_out = im->nodes[k].in_index[i] + 1;
  if (n_out > NPUX_MAX_OUTPUTS)
    return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: node '%s' (%s, on the host): more than "
                      "%d outputs", im->source, n->name, n->op, NPUX_MAX_OUTPUTS);
  int64_t tout[NPUX_MAX_OUTPUTS];
  for (int i = 0; i < n_out; i++) {
    npu_status st = host_op_dtype(im, n, i, in, n_data, &tout[i]);
    if (st) return st;
  }
  npu_attr attrs[] = {{.name = "key", .type = NPU_ATTR_INT, .u.i = h->key},
                      {.name = "Tout", .type = NPU_ATTR_INTS, .u.ints = {tout, n_out}},
                      {.name = "_tf_type", .type = NPU_ATTR_STRING, .u.s = n->op}};
  return npuI_emit(im, n, "host_func", n->name, n_data, in, 3, attrs);
}

/* A fused_ops entry: our op id (-1 when unsupported) and how many extra inputs it takes. */
static int fused_step(const char *tf_type, int *n_args) {
  *n_args = 0;
  if (strcmp(tf_type, "BiasAdd") == 0 || strcmp(tf_type, "Add") == 0 ||
      strcmp(tf_type, "AddV2") == 0 || strcmp(tf_type, "Prelu") == 0)
    *n_args = 1;
  if (strcmp(tf_type, "FusedBatchNorm") == 0) return -1;
  convert_fn convert;
  int id = map_op(tf_type, &convert);
  return convert ? -1 : id; /* a fused step is one plain node */
}

static const tf_attr *fused_ops_of(const tf_node *n) {
  const tf_attr *a = node_attr(n, "fused_ops");
  return a && a->kind == TA_LIST_S ? a : NULL;
}

/* One error listing every unsupported op type and a node of each. */
npu_status npuI_check_supported(importer *im) {
  enum { MAX_LISTED = 64 };
  typedef struct unsupported { const char *type, *node, *in; } unsupported;
  unsupported bad[MAX_LISTED];
  int n_bad = 0, n_more = 0;
  for (int k = 0; k < im->n_nodes; k++) {
    const tf_node *n = &im->nodes[k];
    convert_fn convert;
    const char *types[65], *in = NULL;
    int n_types = 0;
    if (npuI_is_flow_type(n->op)) continue; /* functionalized (graphdef_control.c) */
    if (map_op(n->op, &convert) < 0 && !host_op_of(im, n->op)) types[n_types++] = n->op;
    else if (convert == convert_fused) {
      const tf_attr *f = fused_ops_of(n);
      for (int s = 0; f && s < f->n && n_types < 64; s++) {
        int n_args;
        if (fused_step(f->strs[s], &n_args) < 0) types[n_types++] = f->strs[s], in = n->op;
      }
    }
    for (int t = 0; t < n_types; t++) {
      bool seen = false;
      for (int i = 0; i < n_bad && !seen; i++) seen = strcmp(bad[i].type, types[t]) == 0;
      if (seen) continue;
      if (n_bad == MAX_LISTED) n_more++;
      else bad[n_bad++] = (unsupported){types[t], n->name, in};
    }
  }
  if (!n_bad) return NPU_OK;
  char msg[NPU_ERRMSG_SIZE];
  size_t len = (size_t)snprintf(msg, sizeof msg, "%d unsupported op type%s:", n_bad + n_more,
                                n_bad + n_more > 1 ? "s" : "");
  /* types first (always fit), then as many example nodes as the message holds */
  for (int i = 0; i < n_bad && len < sizeof msg; i++)
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s %s%s%s%s", i ? "," : "", bad[i].type,
                            bad[i].in ? " (fused into " : "", bad[i].in ? bad[i].in : "",
                            bad[i].in ? ")" : "");
  for (int i = 0; i < n_bad && len + 80 < sizeof msg; i++)
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s %s at node '%.60s'",
                            i ? ";" : ". Nodes:", bad[i].type, bad[i].node);
  return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED, "%s: %s", im->source, msg);
}

/* ---- inputs and order ------------------------------------------------------------------ */

/* "^name" (control), "name:i", "name" (output 0) of node `owner` (for messages). */
static npu_status parse_ref(importer *im, const char *owner, const char *str, tf_ref *ref,
                            bool *control_out) {
  const char *s = str;
  bool control = s[0] == '^';
  if (control) s++;
  const char *colon = strrchr(s, ':');
  long index = 0;
  size_t len = strlen(s);
  if (colon && !control) {
    char *end;
    index = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || index < 0 || index > 1000000)
      return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s': input '%s' is malformed",
                        im->source, owner, str);
    len = (size_t)(colon - s);
  }
  char *src = arena_strndup(&im->ar, s, len);
  if (!src) return oom(im);
  int j = npuI_find_tf_node(im, src);
  if (j < 0)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s': input '%s' names no node",
                      im->source, owner, str);
  ref->node = j;
  ref->index = control ? -1 : (int)index;
  if (!control) im->nodes[j].consumed = true;
  if (control_out) *control_out = control;
  return NPU_OK;
}

static npu_status parse_refs(importer *im, const char *owner, int n, const char **names,
                             tf_ref **out) {
  if (!(*out = arena_calloc(&im->ar, (size_t)n + 1, sizeof **out))) return oom(im);
  for (int i = 0; i < n; i++) {
    npu_status st = parse_ref(im, owner, names[i], &(*out)[i], NULL);
    if (st) return st;
  }
  return NPU_OK;
}

/* Inputs of every node; the results of calls and constructs. */
npu_status npuI_resolve_inputs(importer *im) {
  for (int k = 0; k < im->n_nodes; k++) {
    tf_node *n = &im->nodes[k];
    n->in_node = arena_calloc(&im->ar, (size_t)n->n_inputs + 1, sizeof *n->in_node);
    n->in_index = arena_calloc(&im->ar, (size_t)n->n_inputs + 1, sizeof *n->in_index);
    if (!n->in_node || !n->in_index) return oom(im);
    bool seen_control = false;
    for (int i = 0; i < n->n_inputs; i++) {
      tf_ref r;
      bool control;
      npu_status st = parse_ref(im, n->name, n->inputs[i], &r, &control);
      if (st) return st;
      if (!control && seen_control)
        return npuC_error(im->ctx, NPU_ERR_FORMAT,
                          "%s: node '%s': data input '%s' follows a control input", im->source,
                          n->name, n->inputs[i]);
      seen_control |= control;
      n->in_node[i] = r.node;
      n->in_index[i] = r.index;
    }
    if (n->role == ROLE_ALIAS) {
      npu_status st = parse_refs(im, n->name, n->n_rets, n->rets, &im->nodes[k].ret);
      if (st) return st;
    }
  }
  for (int c = 0; c < im->n_constructs; c++) {
    tf_construct *cs = &im->constructs[c];
    if (!cs->pred_s) continue; /* TF1: refs set by the functionalization */
    const char *owner = im->nodes[cs->node].name;
    npu_status st = parse_ref(im, owner, cs->pred_s, &cs->pred, NULL);
    if (!st) st = parse_refs(im, owner, cs->n, cs->a_s, &cs->a);
    if (!st) st = parse_refs(im, owner, cs->n, cs->b_s, &cs->b);
    if (st) return st;
  }
  return NPU_OK;
}

/* ---- conversion ------------------------------------------------------------------------ */

/* Graph-level options (set_graph_exec_config) the exporter wrote as "_is_train_graph" and
   "_graph_<option>" attributes go back onto the node (compile/exec_config.c). */
static npu_status import_exec_config(importer *im, const tf_node *n, int node) {
  npu_attr cfg[16];
  int k = 0;
  for (int i = 0; i < n->n_attrs && k < 16; i++) {
    const tf_attr *a = &n->attrs[i];
    if (!npuP_is_exec_config_attr(a->name)) continue;
    if (a->kind == TA_B) cfg[k++] = (npu_attr){.name = a->name, .type = NPU_ATTR_BOOL, .u.i = a->i};
    else if (a->kind == TA_S && strlen(a->s) == a->s_len)
      cfg[k++] = (npu_attr){.name = a->name, .type = NPU_ATTR_STRING, .u.s = a->s};
    else
      cfg[k++] = (npu_attr){.name = a->name, .type = NPU_ATTR_INT}; /* refused, named */
  }
  npu_status st = k ? npuP_exec_config_import(im->g, node, k, cfg) : NPU_OK;
  if (st == NPU_ERR_NOMEM) return oom(im);
  return st ? npuC_error_prefix(im->ctx, NPU_ERR_FORMAT, "%s: node '%s'", im->source, n->name)
            : NPU_OK;
}

npu_status npuI_emit(importer *im, tf_node *n, const char *op, const char *name, int n_in,
                       const int *in, int n_attrs, const npu_attr *attrs) {
  int node;
  npu_status st = npuX_add_op(im->g, op, name, n_in, in, n_attrs, attrs, &node, false);
  if (st) {
    if (st == NPU_ERR_NOMEM) return oom(im);
    return npuC_error_prefix(im->ctx, st, "%s: node '%s' (%s)", im->source, n->name, n->op);
  }
  if ((st = import_exec_config(im, n, node))) return st;
  if (n->first_node < 0) n->first_node = node;
  n->last_node = node;
  return NPU_OK;
}

/* A name for an intermediate node of an expansion that no TensorFlow node and no node of the
   graph has. */
const char *npuI_fresh_name(importer *im, const char *base, const char *suffix) {
  size_t size = strlen(base) + strlen(suffix) + 24;
  char *buf = arena_alloc(&im->ar, size);
  if (!buf) return NULL;
  snprintf(buf, size, "%s/%s", base, suffix);
  for (int k = 1; npuI_find_tf_node(im, buf) >= 0 || npu_graph_find_node(im->g, buf) >= 0; k++)
    snprintf(buf, size, "%s/%s_%d", base, suffix, k);
  return buf;
}

static npu_status input_value(importer *im, const tf_node *n, int i, int *value) {
  const tf_node *src = &im->nodes[n->in_node[i]];
  if (src->role == ROLE_NODE && !src->collapse) {
    *value = npu_graph_output(im->g, src->last_node, n->in_index[i]);
    if (*value < 0)
      return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s': input '%s': node '%s' has %d output(s)",
                        im->source, n->name, n->inputs[i], src->name,
                        npu_graph_n_outputs(im->g, src->last_node));
    return NPU_OK;
  }
  return npuI_resolve(im, n->in_node[i], n->in_index[i], value);
}

/* The constant behind a value (through Identity nodes), or NULL. */
const npu_tensor *npuI_const_value(const npu_graph *g, int value) {
  for (int hops = 0; hops < 64; hops++) {
    const npuG_node *node = &g->nodes[g->values[value].node];
    const npu_op_def *def = npuX_op(node->op);
    if (def->kind == NPUX_KIND_CONST) {
      const npuG_attr *a = npuG_attr_find(node, "value");
      return a && a->type == NPU_ATTR_TENSOR ? a->u.tensor : NULL;
    }
    if (def->kind != NPUX_KIND_IDENTITY || node->n_inputs != 1) return NULL;
    value = node->inputs[0];
  }
  return NULL;
}

/* A constant input as an attribute: integers -> INT / INTS, floats -> FLOAT / FLOATS (scalars
   as single values, anything else flattened row by row). */
static npu_status tensor_attr(importer *im, const npu_tensor *t, const char *name, npu_attr *a) {
  bool is_float = t->dtype == NPU_DTYPE_F32 || t->dtype == NPU_DTYPE_F64 ||
                  t->dtype == NPU_DTYPE_F16 || t->dtype == NPU_DTYPE_BF16;
  a->name = name;
  if (t->ndim == 0) {
    if (is_float) a->type = NPU_ATTR_FLOAT, a->u.f = npu_tensor_get(t, 0);
    else if (t->dtype == NPU_DTYPE_BOOL) a->type = NPU_ATTR_BOOL, a->u.i = npu_tensor_get(t, 0) != 0;
    else a->type = NPU_ATTR_INT, a->u.i = (int64_t)npu_tensor_get(t, 0);
    return NPU_OK;
  }
  int n = (int)t->numel;
  if (is_float) {
    double *v = arena_calloc(&im->ar, (size_t)n + 1, sizeof *v);
    if (!v) return oom(im);
    for (int i = 0; i < n; i++) v[i] = npu_tensor_get(t, i);
    a->type = NPU_ATTR_FLOATS, a->u.floats.v = v, a->u.floats.n = n;
  } else {
    int64_t *v = arena_calloc(&im->ar, (size_t)n + 1, sizeof *v);
    if (!v) return oom(im);
    for (int i = 0; i < n; i++)
      v[i] = t->dtype == NPU_DTYPE_I64 ? ((const int64_t *)t->data)[i] : (int64_t)npu_tensor_get(t, i);
    a->type = NPU_ATTR_INTS, a->u.ints.v = v, a->u.ints.n = n;
  }
  return NPU_OK;
}

/* Attributes that only say something to TensorFlow's fused kernels. */
static bool fused_only(const char *name) {
  return strcmp(name, "fused_ops") == 0 || strcmp(name, "num_args") == 0 ||
         strcmp(name, "epsilon") == 0 || strcmp(name, "leakyrelu_alpha") == 0;
}

/* One TensorFlow attribute as ours: 1 when *out was filled, 0 when it means nothing here. */
static int convert_attr(importer *im, const tf_node *n, const tf_attr *a, npu_attr *out,
                        npu_status *st) {
  *st = NPU_OK;
  const char *name = a->name;
  if (name[0] == '_') return 0; /* _output_shapes, _class, _cloned: bookkeeping (the graph-level
                                   exec config ones are read by import_exec_config) */
  if (strcmp(name, "keep_dims") == 0) name = "keepdims";
  if (strcmp(name, "DstT") == 0) name = "dtype";
  out->name = name;
  switch (a->kind) {
  case TA_S:
    if (strlen(a->s) != a->s_len) return 0; /* binary bytes: no string attribute of ours */
    out->type = NPU_ATTR_STRING, out->u.s = a->s;
    return 1;
  case TA_I: out->type = NPU_ATTR_INT, out->u.i = a->i; return 1;
  case TA_F: out->type = NPU_ATTR_FLOAT, out->u.f = a->f; return 1;
  case TA_B: out->type = NPU_ATTR_BOOL, out->u.i = a->i; return 1;
  case TA_TYPE: {
    int t = npuI_tf_to_dtype((int)a->i);
    if (t < 0) {
      /* the dtype of a value this node makes: an error; type parameters (T, Tidx): ignored
         here, the inputs' dtypes decide */
      if (strcmp(name, "dtype") == 0 || strcmp(name, "out_type") == 0 ||
          strcmp(name, "output_type") == 0) {
        npu_dtype unused;
        *st = npuI_check_dtype(im, n->name, name, (int)a->i, &unused);
      }
      return 0;
    }
    out->type = NPU_ATTR_DTYPE, out->u.i = t;
    return 1;
  }
  case TA_SHAPE:
    if (a->shape.ndim < 0) return 0;
    out->type = NPU_ATTR_INTS, out->u.ints.v = a->shape.dims, out->u.ints.n = a->shape.ndim;
    return 1;
  case TA_TENSOR:
    if (!a->tensor) return 0;
    out->type = NPU_ATTR_TENSOR, out->u.tensor = a->tensor;
    return 1;
  case TA_LIST_I: out->type = NPU_ATTR_INTS, out->u.ints.v = a->ints, out->u.ints.n = a->n; return 1;
  case TA_LIST_F:
    out->type = NPU_ATTR_FLOATS, out->u.floats.v = a->floats, out->u.floats.n = a->n;
    return 1;
  default: return 0; /* empty lists (explicit_paddings = []), strings lists, funcs */
  }
}

static npu_status convert_const(importer *im, tf_node *n) {
  const tf_attr *va = node_attr(n, "value");
  npu_tensor *t = n->weight ? n->weight : va && va->kind == TA_TENSOR ? va->tensor : NULL;
  if (!t)
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: Const node '%s' has no value (none in the graph%s)", im->source, n->name,
                      strstr(im->source, ".json") ? " and none in weightsManifest" : "");
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  return npuI_emit(im, n, "const", n->name, 0, NULL, 1, &a);
}

/* One plain node named `name`: TensorFlow's constant inputs as attributes.  For a
   fixed-arity op they follow its min_inputs data inputs in .tf_const_inputs order (Pad: x,
   paddings; Split, whose min_inputs is 0: split_dim, then x); for a variadic op they are the
   last ones (ConcatV2: values..., axis).  A const input that is not a constant stays an input
   when the op takes one there; inputs past the list stay inputs. */
static npu_status emit_plain(importer *im, tf_node *n, const npu_op_def *def, const char *name,
                             int *in, int n_data, npu_attr *attrs, int n_attrs) {
  const char *names = def->tf_const_inputs;
  int n_names = names ? list_count(names) : 0;
  int first = def->max_inputs >= 0 ? def->min_inputs : n_data - n_names;
  if (first < def->min_inputs) first = def->min_inputs;
  if (first > n_data) first = n_data;
  int n_const = n_data - first < n_names ? n_data - first : n_names;
  int n_in = first;
  for (int c = 0; c < n_const; c++) {
    int k = first + c;
    char buf[64];
    const char *attr = npuI_list_item(names, c, buf, sizeof buf);
    const npu_tensor *t = npuI_const_value(im->g, in[k]);
    if (t) {
      char *aname = arena_strndup(&im->ar, attr, strlen(attr));
      if (!aname) return oom(im);
      npu_status st = tensor_attr(im, t, aname, &attrs[n_attrs++]);
      if (st) return st;
    } else if (def->max_inputs < 0 || n_in < def->max_inputs) {
      in[n_in++] = in[k]; /* the op takes it at run time */
    } else {
      return npuC_error(im->ctx, NPU_ERR_UNSUPPORTED,
                        "%s: node '%s' (%s): input %d ('%s', the %s) is not a constant; %s "
                        "needs it when the graph is built",
                        im->source, n->name, n->op, k + 1, n->inputs[k], attr, def->name);
    }
  }
  for (int k = first + n_const; k < n_data; k++) in[n_in++] = in[k];
  return npuI_emit(im, n, def->name, name, n_in, in, n_attrs, attrs);
}

/* Converter-fused (_FusedConv2D, FusedDepthwiseConv2dNative, _FusedMatMul): the base op on
   the first two inputs, then each of fused_ops in order, the extra inputs consumed in order;
   the last node carries the TensorFlow name. */
static npu_status convert_fused(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                int n_data, npu_attr *attrs, int n_attrs) {
  const tf_attr *steps = fused_ops_of(n);
  int n_steps = steps ? steps->n : 0;
  if (n_data < 2)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s' (%s) has %d input(s), needs 2",
                      im->source, n->name, n->op, n_data);
  const char *name = n_steps ? npuI_fresh_name(im, n->name, def->name) : n->name;
  if (!name) return oom(im);
  npu_status st = npuI_emit(im, n, def->name, name, 2, in, n_attrs, attrs);
  if (st) return st;
  int arg = 2;
  for (int s = 0; s < n_steps; s++) {
    int n_args;
    int sop = fused_step(steps->strs[s], &n_args);
    const npu_op_def *sdef = npuX_op(sop);
    if (arg + n_args > n_data)
      return npuC_error(im->ctx, NPU_ERR_FORMAT,
                        "%s: node '%s' (%s): fused op %s needs an extra input, the node has %d",
                        im->source, n->name, n->op, steps->strs[s], n_data - 2);
    int sin[2] = {npu_graph_output(im->g, n->last_node, 0), n_args ? in[arg] : -1};
    arg += n_args;
    npu_attr sattr[1];
    int n_sattr = 0;
    const tf_attr *alpha = node_attr(n, "leakyrelu_alpha");
    if (strcmp(steps->strs[s], "LeakyRelu") == 0 && alpha && alpha->kind == TA_F)
      sattr[n_sattr++] = (npu_attr){.name = "alpha", .type = NPU_ATTR_FLOAT, .u.f = alpha->f};
    name = s == n_steps - 1 ? n->name : npuI_fresh_name(im, n->name, sdef->name);
    if (!name) return oom(im);
    if ((st = npuI_emit(im, n, sdef->name, name, 1 + n_args, sin, n_sattr, sattr))) return st;
  }
  if (arg != n_data)
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: node '%s' (%s): %d extra input(s) but fused_ops use %d", im->source,
                      n->name, n->op, n_data - 2, arg - 2);
  return NPU_OK;
}

/* Removes attribute `name` from attrs; its bool value (false when absent). */
/* NonMaxSuppressionV4: outputs selected_indices and valid_outputs, which are our op's
   (NonMaxSuppressionV5's) outputs 0 and 2: the op under a fresh name, then an identity_n of
   those two carrying the TensorFlow name, so "name:1" is the count as in TensorFlow. */
static npu_status convert_nms(importer *im, tf_node *n, const npu_op_def *def, int *in,
                              int n_data, npu_attr *attrs, int n_attrs) {
  if (n_data != 5)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s' (%s) has %d input(s), needs 5",
                      im->source, n->name, n->op, n_data);
  const char *name = npuI_fresh_name(im, n->name, def->name);
  if (!name) return oom(im);
  npu_status st = emit_plain(im, n, def, name, in, n_data, attrs, n_attrs);
  if (st) return st;
  int nms = n->last_node;
  int outs[2] = {npu_graph_output(im->g, nms, 0), npu_graph_output(im->g, nms, 2)};
  return npuI_emit(im, n, "identity_n", n->name, 2, outs, 0, NULL);
}

/* ResizeBilinear: TensorFlow takes integer (and half, double) images and always returns
   float32; our op computes in float32, so another dtype is cast to float32 first. */
static npu_status convert_resize(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                 int n_data, npu_attr *attrs, int n_attrs) {
  if (n_data >= 1 && npu_graph_value_dtype(im->g, in[0]) != NPU_DTYPE_F32) {
    const char *name = npuI_fresh_name(im, n->name, "cast");
    if (!name) return oom(im);
    npu_attr a = {.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32};
    npu_status st = npuI_emit(im, n, "cast", name, 1, in, 1, &a);
    if (st) return st;
    in[0] = npu_graph_output(im->g, n->last_node, 0);
  }
  return emit_plain(im, n, def, n->name, in, n_data, attrs, n_attrs);
}

/* ClipByValue(t, clip_value_min, clip_value_max): maximum(t, min) as "<node>/maximum", then
   minimum(that, max) named after the node — tf.clip_by_value's own composite, so values and
   gradients (passing where min <= t <= max) are TensorFlow's. */
static npu_status convert_clip(importer *im, tf_node *n, const npu_op_def *def, int *in,
                               int n_data, npu_attr *attrs, int n_attrs) {
  (void)def, (void)attrs, (void)n_attrs;
  if (n_data != 3)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s' (%s) has %d input(s), needs 3",
                      im->source, n->name, n->op, n_data);
  const char *name = npuI_fresh_name(im, n->name, "maximum");
  if (!name) return oom(im);
  npu_status st = npuI_emit(im, n, "maximum", name, 2, in, 0, NULL);
  if (st) return st;
  int lo[2] = {npu_graph_output(im->g, n->last_node, 0), in[2]};
  return npuI_emit(im, n, "minimum", n->name, 2, lo, 0, NULL);
}

/* AssignAdd / AssignSub(ref, value): add / sub of the variable's value and `value` as
   "<node>/add" ("/sub"), then assign(ref, that) named after the node (the executor's assign
   reads the variable's value of this run: op_assign.c). */
static npu_status convert_assign_op(importer *im, tf_node *n, const npu_op_def *def, int *in,
                                    int n_data, npu_attr *attrs, int n_attrs) {
  (void)attrs, (void)n_attrs;
  if (n_data != 2)
    return npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: node '%s' (%s) has %d input(s), needs 2",
                      im->source, n->name, n->op, n_data);
  const char *op = strcmp(n->op, "AssignSub") == 0 ? "sub" : "add";
  const char *name = npuI_fresh_name(im, n->name, op);
  if (!name) return oom(im);
  npu_status st = npuI_emit(im, n, op, name, 2, in, 0, NULL);
  if (st) return st;
  int a[2] = {in[0], npu_graph_output(im->g, n->last_node, 0)};
  return npuI_emit(im, n, def->name, n->name, 2, a, 0, NULL);
}

/* Slice(x, begin, size) whose begin or size is known only when it runs (a crop computed from
   a fed image's shape): strided_slice(x, begin, end), end = begin + size, or past the end
   where size is -1 (strided_slice clamps it, as TensorFlow). */
static npu_status convert_dynamic_slice(importer *im, tf_node *n, int *in) {
  npu_dtype dt = npu_graph_value_dtype(im->g, in[2]);
  npu_tensor *zero, *big;
  npu_status st = npu_tensor_new(im->ctx, dt, 0, NULL, &zero);
  if (!st && (st = npu_tensor_new(im->ctx, dt, 0, NULL, &big))) npu_tensor_release(zero);
  if (st) return st == NPU_ERR_NOMEM ? oom(im) : st;
  if (dt == NPU_DTYPE_I64) ((int64_t *)big->data)[0] = INT64_MAX / 2;
  else ((int32_t *)big->data)[0] = INT32_MAX / 2;
  static const char *const parts[] = {"zero", "to_end", "past_end", "sum", "end"};
  const char *names[5];
  for (int i = 0; i < 5; i++) names[i] = npuI_fresh_name(im, n->name, parts[i]);
  npu_attr a_zero = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = zero};
  npu_attr a_big = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = big};
  int v[5];
  st = names[0] && names[1] && names[2] && names[3] && names[4] ? NPU_OK : oom(im);
  if (!st) st = npuI_emit(im, n, "const", names[0], 0, NULL, 1, &a_zero);
  if (!st) v[0] = npu_graph_output(im->g, n->last_node, 0);
  if (!st) st = npuI_emit(im, n, "less", names[1], 2, (int[]){in[2], v[0]}, 0, NULL);
  if (!st) v[1] = npu_graph_output(im->g, n->last_node, 0);
  if (!st) st = npuI_emit(im, n, "const", names[2], 0, NULL, 1, &a_big);
  if (!st) v[2] = npu_graph_output(im->g, n->last_node, 0);
  if (!st) st = npuI_emit(im, n, "add", names[3], 2, (int[]){in[1], in[2]}, 0, NULL);
  if (!st) v[3] = npu_graph_output(im->g, n->last_node, 0);
  if (!st) st = npuI_emit(im, n, "select_v2", names[4], 3, (int[]){v[1], v[2], v[3]}, 0, NULL);
  if (!st) v[4] = npu_graph_output(im->g, n->last_node, 0);
  npu_tensor_release(zero);
  npu_tensor_release(big);
  if (st) return st;
  return npuI_emit(im, n, "strided_slice", n->name, 3, (int[]){in[0], in[1], v[4]}, 0, NULL);
}

npu_status npuI_convert_node(importer *im, tf_node *n) {
  convert_fn convert;
  int op = map_op(n->op, &convert);
  const npuC_host_op *host = op < 0 ? host_op_of(im, n->op) : NULL;
  const npu_op_def *def = host ? NULL : npuX_op(op);
  if (def && def->kind == NPUX_KIND_CONST) return convert_const(im, n);
  npu_status st;
  /* data inputs */
  int n_data = 0;
  while (n_data < n->n_inputs && n->in_index[n_data] >= 0) n_data++;
  int *in = arena_calloc(&im->ar, (size_t)n_data + 1, sizeof *in);
  npu_attr *attrs = arena_calloc(&im->ar, (size_t)n->n_attrs + 8, sizeof *attrs);
  if (!in || !attrs) return oom(im);
  for (int i = 0; i < n_data; i++)
    if ((st = input_value(im, n, i, &in[i]))) return st;
  if (host) return convert_host_op(im, n, host, in, n_data);
  int n_attrs = 0;
  for (int i = 0; i < n->n_attrs; i++) {
    if (convert == convert_fused && fused_only(n->attrs[i].name)) continue;
    n_attrs += convert_attr(im, n, &n->attrs[i], &attrs[n_attrs], &st);
    if (st) return st;
  }
  if (convert) return convert(im, n, def, in, n_data, attrs, n_attrs);
  if (strcmp(def->name, "slice") == 0 && n_data == 3 &&
      (!npuI_const_value(im->g, in[1]) || !npuI_const_value(im->g, in[2])))
    return convert_dynamic_slice(im, n, in);
  return emit_plain(im, n, def, n->name, in, n_data, attrs, n_attrs);
}

/* ---- signature ------------------------------------------------------------------------- */

void npu_model_info_release(npu_model_info *info) {
  if (!info) return;
  npu_context *ctx = info->ctx;
  for (int i = 0; i < info->n_io; i++) {
    npuC_free(ctx, (char *)info->io[i].key);
    npuC_free(ctx, (char *)info->io[i].name);
  }
  npuC_free(ctx, info->io);
  npuI_model_info_free_signatures(info); /* io/savedmodel.c */
  npuC_free(ctx, info);
  npu_context_release(ctx);
}

int npu_model_info_n_inputs(const npu_model_info *info) { return info ? info->n_inputs : 0; }
int npu_model_info_n_outputs(const npu_model_info *info) { return info ? info->n_outputs : 0; }
const npu_model_io *npu_model_info_input(const npu_model_info *info, int i) {
  return info && i >= 0 && i < info->n_inputs ? &info->io[i] : NULL;
}
const npu_model_io *npu_model_info_output(const npu_model_info *info, int i) {
  return info && i >= 0 && i < info->n_outputs ? &info->io[info->n_inputs + i] : NULL;
}
const char *npu_model_info_format(const npu_model_info *info) { return info ? info->format : NULL; }
const char *npu_model_info_signature_source(const npu_model_info *info) {
  return info ? info->signature_source : NULL;
}

/* Fills entry e from the graph's value for tensor name.  A name without ":i" (signatures
   have some: "global_pooling/Mean") is output 0, and the entry says so ("...:0"), since a
   fetch without an index would ask for the operation, not its value. */
static npu_status set_io(importer *im, npu_model_io *e, const char *key, const char *name,
                         const char *what) {
  int v;
  if (npu_graph_find_value(im->g, name, &v))
    return npuC_error(im->ctx, NPU_ERR_FORMAT,
                      "%s: signature %s '%s' names tensor '%s', which the graph does not have",
                      im->source, what, key, name);
  const char *colon = strrchr(name, ':');
  bool indexed = colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1);
  e->key = npuC_strdup(im->ctx, key);
  size_t len = strlen(name);
  char *full = npuC_alloc(im->ctx, len + 3);
  if (full) snprintf(full, len + 3, "%s%s", name, indexed ? "" : ":0");
  e->name = full;
  if (!e->key || !e->name) return oom(im);
  e->dtype = npu_graph_value_dtype(im->g, v);
  e->ndim = npu_graph_value_ndim(im->g, v);
  for (int i = 0; i < e->ndim && i < NPU_MAX_DIMS; i++) e->shape[i] = npu_graph_value_shape(im->g, v)[i];
  return NPU_OK;
}

static bool is_sink_candidate(const tf_node *n) {
  return strcmp(n->op, "Const") != 0 && strcmp(n->op, "NoOp") != 0 &&
         strcmp(n->op, "Placeholder") != 0 && n->scope == 0 && n->last_node >= 0;
}

static npu_status build_info(importer *im, const cJSON *signature, const char *source,
                             npu_model_info **out) {
  npu_model_info *info = npuC_calloc(im->ctx, 1, sizeof *info);
  if (!info) return oom(im);
  info->ctx = npu_context_retain(im->ctx);
  info->format = signature || source ? "tfjs" : "graphdef";
  info->signature_source = signature ? source : "graph";
  /* each side from the signature when it lists some (faceres-deep's lists outputs only),
     else from the graph: the Placeholders, the outputs nothing consumes */
  const cJSON *ins = signature ? cJSON_GetObjectItemCaseSensitive(signature, "inputs") : NULL;
  const cJSON *outs = signature ? cJSON_GetObjectItemCaseSensitive(signature, "outputs") : NULL;
  if (cJSON_GetArraySize(ins) == 0) ins = NULL;
  if (cJSON_GetArraySize(outs) == 0) outs = NULL;
  if (!ins && !outs) info->signature_source = "graph";
  int n_in = cJSON_GetArraySize(ins), n_out = cJSON_GetArraySize(outs);
  for (int k = 0; k < im->n_nodes; k++) {
    const tf_node *n = &im->nodes[k];
    if (strcmp(n->op, "Placeholder") == 0) n_in += !ins;
    else if (!n->consumed && is_sink_candidate(n) && !outs)
      n_out += npu_graph_n_outputs(im->g, n->last_node);
  }
  npu_status st = NPU_OK;
  info->io = npuC_calloc(im->ctx, (size_t)(n_in + n_out) + 1, sizeof *info->io);
  if (!info->io) st = oom(im);
  else info->n_io = n_in + n_out + 1;
  /* inputs first, then outputs: the entries are in that order */
  char name[1100];
  const cJSON *lists[2] = {ins, outs}, *e;
  for (int l = 0; l < 2 && !st; l++) {
    const char *what = l ? "output" : "input";
    cJSON_ArrayForEach(e, lists[l]) { /* the signature's */
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
      if (!cJSON_IsString(nm)) {
        st = npuC_error(im->ctx, NPU_ERR_FORMAT, "%s: signature %s '%s' has no tensor name",
                        im->source, what, e->string ? e->string : "?");
        break;
      }
      int idx = info->n_inputs + info->n_outputs;
      if ((st = set_io(im, &info->io[idx], e->string ? e->string : nm->valuestring,
                       nm->valuestring, what)))
        break;
      if (l) info->n_outputs++;
      else info->n_inputs++;
    }
    for (int k = 0; k < im->n_nodes && !st && !lists[l]; k++) { /* the graph's */
      const tf_node *n = &im->nodes[k];
      bool placeholder = strcmp(n->op, "Placeholder") == 0;
      if (l ? n->consumed || !is_sink_candidate(n) : !placeholder) continue;
      int m = l ? npu_graph_n_outputs(im->g, n->last_node) : 1;
      for (int i = 0; i < m && !st; i++) {
        snprintf(name, sizeof name, "%.1000s:%d", n->name, i);
        npu_model_io *entry = &info->io[info->n_inputs + info->n_outputs];
        if ((st = set_io(im, entry, m == 1 ? n->name : name, name, what))) break;
        if (l) info->n_outputs++;
        else info->n_inputs++;
      }
    }
  }
  if (st) {
    npu_model_info_release(info); /* entries filled so far, a half-filled one included */
    return st;
  }
  *out = info;
  return NPU_OK;
}

/* ---- entry points ---------------------------------------------------------------------- */

static void release_node(tf_node *n) {
  npu_tensor_release(n->weight);
  for (int i = 0; i < n->n_attrs && !n->shared_attrs; i++) /* whatever the kind: a later field may change it */
    npu_tensor_release(n->attrs[i].tensor);
}

static void importer_free(importer *im) {
  for (int k = 0; k < im->n_nodes; k++) release_node(&im->nodes[k]);
  for (int f = 0; f < im->n_functions; f++)
    for (int k = 0; k < im->functions[f].n_nodes; k++) release_node(&im->functions[f].nodes[k]);
  arena_free(&im->ar);
}

/* Common tail: graph, then info; on failure everything goes. */
static npu_status finish(importer *im, npu_status st, const cJSON *signature, const char *sig_source,
                         bool tfjs, npu_graph **graph_out, npu_model_info **info_out) {
  if (!st) st = npuI_build_graph(im);
  npu_model_info *info = NULL;
  if (!st && info_out) st = build_info(im, signature, tfjs ? sig_source : NULL, &info);
  if (!st && info && tfjs && !signature) info->format = "tfjs";
  importer_free(im);
  if (st) {
    npu_graph_release(im->g);
    return st;
  }
  *graph_out = im->g;
  if (info_out) *info_out = info;
  return NPU_OK;
}

npu_status npu_graph_import_graphdef(npu_context *ctx, const void *data, size_t size,
                                     npu_graph **graph_out, npu_model_info **info_out) {
  if (graph_out) *graph_out = NULL;
  if (info_out) *info_out = NULL;
  if (!ctx || !graph_out || (!data && size))
    return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_import_graphdef: NULL argument");
  importer im = {.ctx = ctx, .ar = {.ctx = ctx}, .source = "GraphDef"};
  npu_status st = parse_pb(&im, data, size);
  return finish(&im, st, NULL, NULL, false, graph_out, info_out);
}

npu_status npuI_import_pb_named(npu_context *ctx, const char *path, const uint8_t *data,
                                size_t size, npu_graph **graph_out, npu_model_info **info_out) {
  importer im = {.ctx = ctx, .ar = {.ctx = ctx}, .source = path};
  npu_status st = parse_pb(&im, data, size);
  return finish(&im, st, NULL, NULL, false, graph_out, info_out);
}

static npu_status import_json_named(npu_context *ctx, const char *source, const char *text,
                                    size_t size, const char *dir, npu_graph **graph_out,
                                    npu_model_info **info_out) {
  importer im = {.ctx = ctx, .ar = {.ctx = ctx}, .source = source};
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, size, &end, 0);
  if (!root) {
    size_t at = end && end >= text ? (size_t)(end - text) : 0;
    /* text need not be NUL-terminated: quote at most the bytes left */
    int near = at < size ? (int)(size - at < 16 ? size - at : 16) : 0;
    return npuC_error(ctx, NPU_ERR_FORMAT, "%s: corrupt JSON at byte %zu (near \"%.*s\")",
                      source, at, near, at < size ? text + at : "");
  }
  npu_status st = NPU_OK;
  const cJSON *topology = cJSON_GetObjectItemCaseSensitive(root, "modelTopology");
  if (!topology && cJSON_GetObjectItemCaseSensitive(root, "node")) topology = root; /* a bare GraphDef */
  const cJSON *udm = cJSON_GetObjectItemCaseSensitive(root, "userDefinedMetadata");
  const cJSON *signature = cJSON_GetObjectItemCaseSensitive(udm, "signature");
  const char *sig_source = "userDefinedMetadata.signature";
  if (!signature) {
    signature = cJSON_GetObjectItemCaseSensitive(root, "signature");
    sig_source = "signature";
  }
  if (!cJSON_IsObject(topology))
    st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: not a TensorFlow.js graph model (no modelTopology)",
                    source);
  if (!st) st = parse_json_graph(&im, topology);
  if (!st) st = npuI_index_names(&im);
  if (!st) st = load_weights(&im, cJSON_GetObjectItemCaseSensitive(root, "weightsManifest"), dir);
  if (!st) im.n_slots = 0, im.slots = NULL; /* build_graph indexes again */
  st = finish(&im, st, cJSON_IsObject(signature) ? signature : NULL, sig_source, true, graph_out,
              info_out);
  cJSON_Delete(root);
  return st;
}

npu_status npu_graph_import_tfjs(npu_context *ctx, const char *json, size_t size,
                                 const char *weights_dir, npu_graph **graph_out,
                                 npu_model_info **info_out) {
  if (graph_out) *graph_out = NULL;
  if (info_out) *info_out = NULL;
  if (!ctx || !graph_out || !json)
    return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_import_tfjs: NULL argument");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s%s", weights_dir ? weights_dir : "",
           weights_dir && *weights_dir && weights_dir[strlen(weights_dir) - 1] != '/' ? "/" : "");
  return import_json_named(ctx, "model.json", json, size, dir, graph_out, info_out);
}

npu_status npu_graph_import_file(npu_context *ctx, const char *path, npu_graph **graph_out,
                                 npu_model_info **info_out) {
  if (graph_out) *graph_out = NULL;
  if (info_out) *info_out = NULL;
  if (!ctx || !path || !graph_out)
    return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_import_file: NULL argument");
  if (npuI_is_dir(path)) /* a SavedModel, or a version directory (io/savedmodel.c) */
    return npuI_import_dir(ctx, path, graph_out, info_out);
  uint8_t *data;
  size_t size;
  npu_status st = read_file(ctx, path, "model file", &data, &size);
  if (st) return st;
  const char *ext = strrchr(path, '.');
  bool json;
  if (ext && strcmp(ext, ".json") == 0) json = true;
  else if (ext && strcmp(ext, ".pb") == 0) json = false;
  else if (ext && strcmp(ext, ".pbtxt") == 0) {
    npuC_free(ctx, data);
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED,
                      "%s: text-format GraphDef is not supported (use a binary .pb or a "
                      "TensorFlow.js model.json)",
                      path);
  } else {
    size_t i = 0;
    while (i < size && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t')) i++;
    json = i < size && data[i] == '{';
  }
  if (json) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) + 1 : 0;
    if (len >= sizeof dir) len = 0;
    memcpy(dir, path, len);
    dir[len] = 0;
    st = import_json_named(ctx, path, (const char *)data, size, dir, graph_out, info_out);
  } else {
    st = npuI_import_pb_named(ctx, path, data, size, graph_out, info_out);
  }
  npuC_free(ctx, data);
  return st;
}
