/*
 * savedmodel.c — TensorFlow SavedModel directories in and out, read from the format's
 * definition (saved_model.proto, meta_graph.proto):
 *
 *   dir/saved_model.pb     SavedModel { meta_graphs = 2: MetaGraphDef }
 *                          MetaGraphDef { meta_info_def = 1 { tags = 4 }, graph_def = 2,
 *                                         signature_def = 5: map<string, SignatureDef> }
 *                          SignatureDef { inputs = 1, outputs = 2: map<string, TensorInfo>,
 *                                         method_name = 3 }
 *                          TensorInfo { name = 1, dtype = 2, tensor_shape = 3 }
 *   dir/variables/variables.index + .data-*   the variables, a tensor bundle (io/bundle.c)
 *
 * Import picks the meta graph whose tag set is the one asked for ("serve") and one of its
 * signatures, then writes a new GraphDef holding only what that signature needs — the
 * ancestors of its outputs, stopping at its inputs — with
 *   - each signature input's node made a Placeholder of the TensorInfo's dtype and shape (a
 *     signature may feed an interior tensor: half_plus_two's "x:0" is an Identity of a
 *     ParseExample, which TensorFlow never runs when x is fed);
 *   - each variable (VariableV2, Variable, VarHandleOp) made a Const holding its value from
 *     the bundle (key: the node's name, or a VarHandleOp's shared_name), and ReadVariableOp an
 *     Identity — so a served model is frozen: nothing to initialise, nothing to assign;
 * and hands that GraphDef, with the library functions the kept nodes reach, to the binary
 * importer (graphdef.c), which inlines TF2's StatefulPartitionedCalls.  A TF2 signature's call
 * takes the variables it captured as VarHandleOps of the graph; their values are found via
 * the object graph (MetaGraphDef.object_graph_def = 7: SavedObjectGraph, whose
 * concrete_functions list each function's bound_inputs, object node ids) and the
 * checkpoint's object graph (the bundle's "_CHECKPOINTABLE_OBJECT_GRAPH" string, a
 * TrackableObjectGraph with the same node ids, giving "a/.ATTRIBUTES/VARIABLE_VALUE").
 * Save/restore/initialiser nodes are never reached.
 *
 * Export writes the reverse: the binary GraphDef of npu_graph_serialize_graphdef with the
 * Consts named as variables turned into VariableV2 nodes whose values go to the bundle, one
 * meta graph tagged "serve", and one signature.
 *
 * Invariants: every message names the file (and the node or signature); memory comes from
 * the context's allocator; a failed import leaves nothing behind.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/bundle.h"
#include "io/graphdef.h"
#include "io/protobuf.h"

int npuI_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- the info's SavedModel fields -------------------------------------------------------- */

void npuI_model_info_free_signatures(npu_model_info *info) {
  npuC_free(info->ctx, info->signature_key);
  npuC_free(info->ctx, info->method_name);
  for (int i = 0; i < info->n_signatures; i++) npuC_free(info->ctx, info->signatures[i]);
  npuC_free(info->ctx, info->signatures);
}

const char *npu_model_info_signature_key(const npu_model_info *info) {
  return info ? info->signature_key : NULL;
}
const char *npu_model_info_method_name(const npu_model_info *info) {
  return info ? info->method_name : NULL;
}
int npu_model_info_n_signatures(const npu_model_info *info) { return info ? info->n_signatures : 0; }
const char *npu_model_info_signature_at(const npu_model_info *info, int i) {
  return info && i >= 0 && i < info->n_signatures ? info->signatures[i] : NULL;
}

/* ---- reading the protos -------------------------------------------------------------------- */

typedef struct bytes {
  const uint8_t *p;
  size_t n;
} bytes;

static bool bytes_eq(bytes b, const char *s) { return b.n == strlen(s) && memcmp(b.p, s, b.n) == 0; }

typedef struct tensor_info {
  bytes key, name;
  int tf_dtype;
  bytes shape; /* TensorShapeProto, or n == 0 */
  bool has_shape, composite;
} tensor_info;

typedef struct signature {
  bytes key, method;
  int n_in, n_out;
  tensor_info *io; /* inputs then outputs */
} signature;

typedef struct sm_node {
  bytes raw, name, op;
  int n_inputs;
  bytes *inputs;
  bytes shared_name;
  int dtype;         /* attr dtype (variables, ReadVariableOp) */
  bytes shape_attr;  /* attr shape (variables) */
  bytes func;        /* attr f (PartitionedCall): the function's name */
  int keep;          /* 0 no, 1 yes, 2 fed by the signature */
  int fed_info;      /* the signature input feeding it (keep == 2) */
  int object_id;     /* a captured VarHandleOp: its object graph node id + 1 (0: none) */
} sm_node;

typedef struct loader {
  npu_context *ctx;
  const char *path; /* dir/saved_model.pb */
  const char *dir;
  int n_nodes;
  sm_node *nodes;
  bytes graph_versions;
  bytes library;      /* GraphDef.library: TF2's functions, passed on to the importer */
  bytes object_graph; /* MetaGraphDef.object_graph_def (TF2), or n == 0 */
  char *checkpoint;   /* the bundle's _CHECKPOINTABLE_OBJECT_GRAPH, read when first needed */
  size_t checkpoint_len;
  signature sig;
  bool variables;     /* keep variables as variables (npu_savedmodel_options.variables) */
} loader;

static npu_status bad(loader *l, const char *what) {
  return npuC_error(l->ctx, NPU_ERR_FORMAT, "%s: corrupt SavedModel (%s)", l->path, what);
}

static npu_status oom(loader *l) {
  return npuC_error(l->ctx, NPU_ERR_NOMEM, "%s: out of memory", l->path);
}

/* A map entry: key = 1 (string), value = 2 (message). */
static int map_entry(bytes e, bytes *key, bytes *value) {
  npuI_pb_reader r = npuI_pb_reader_of(e.p, e.n);
  npuI_pb_field f;
  int k;
  *key = (bytes){NULL, 0}, *value = (bytes){NULL, 0};
  while ((k = npuI_pb_next(&r, &f)) == 1) {
    if (f.wire != NPUI_PB_BYTES) continue;
    if (f.number == 1) *key = (bytes){f.data, f.len};
    if (f.number == 2) *value = (bytes){f.data, f.len};
  }
  return k;
}

static int parse_tensor_info(bytes b, tensor_info *ti) {
  npuI_pb_reader r = npuI_pb_reader_of(b.p, b.n);
  npuI_pb_field f;
  int k;
  while ((k = npuI_pb_next(&r, &f)) == 1) {
    if (f.number == 1 && f.wire == NPUI_PB_BYTES) ti->name = (bytes){f.data, f.len};
    else if (f.number == 2 && f.wire == NPUI_PB_VARINT) ti->tf_dtype = (int)f.u;
    else if (f.number == 3 && f.wire == NPUI_PB_BYTES) ti->shape = (bytes){f.data, f.len}, ti->has_shape = true;
    else if (f.number == 4 || f.number == 5) ti->composite = true;
  }
  return k;
}

static npu_status parse_signature(loader *l, bytes key, bytes b) {
  signature *s = &l->sig;
  s->key = key;
  for (int pass = 0; pass < 2; pass++) {
    npuI_pb_reader r = npuI_pb_reader_of(b.p, b.n);
    npuI_pb_field f;
    int k, n_in = 0, n_out = 0;
    while ((k = npuI_pb_next(&r, &f)) == 1) {
      if (f.wire != NPUI_PB_BYTES) continue;
      if (f.number == 3) s->method = (bytes){f.data, f.len};
      if (f.number != 1 && f.number != 2) continue;
      if (pass) {
        tensor_info *ti = &s->io[f.number == 1 ? n_in : s->n_in + n_out];
        bytes v;
        if (map_entry((bytes){f.data, f.len}, &ti->key, &v) < 0 || parse_tensor_info(v, ti) < 0)
          return bad(l, "SignatureDef");
      }
      if (f.number == 1) n_in++;
      else n_out++;
    }
    if (k < 0) return bad(l, "SignatureDef");
    if (!pass) {
      s->n_in = n_in, s->n_out = n_out;
      s->io = npuC_calloc(l->ctx, (size_t)(n_in + n_out) + 1, sizeof *s->io);
      if (!s->io) return oom(l);
    }
  }
  return NPU_OK;
}

static int parse_attr_value(bytes v, int *type, bytes *s, bytes *shape, bytes *func) {
  npuI_pb_reader r = npuI_pb_reader_of(v.p, v.n);
  npuI_pb_field f;
  int k;
  while ((k = npuI_pb_next(&r, &f)) == 1) {
    if (f.number == 6 && f.wire == NPUI_PB_VARINT) *type = (int)f.u;
    if (f.number == 2 && f.wire == NPUI_PB_BYTES && s) *s = (bytes){f.data, f.len};
    if (f.number == 7 && f.wire == NPUI_PB_BYTES && shape) *shape = (bytes){f.data, f.len};
    if (f.number == 10 && f.wire == NPUI_PB_BYTES && func) { /* NameAttrList { name = 1 } */
      bytes fk, unused;
      npuI_pb_reader fr = npuI_pb_reader_of(f.data, f.len);
      npuI_pb_field ff;
      while (npuI_pb_next(&fr, &ff) == 1)
        if (ff.number == 1 && ff.wire == NPUI_PB_BYTES) *func = (bytes){ff.data, ff.len};
      (void)fk, (void)unused;
    }
  }
  return k;
}

static npu_status parse_node(loader *l, sm_node *n, bytes raw) {
  n->raw = raw;
  for (int pass = 0; pass < 2; pass++) {
    npuI_pb_reader r = npuI_pb_reader_of(raw.p, raw.n);
    npuI_pb_field f;
    int k, n_in = 0;
    while ((k = npuI_pb_next(&r, &f)) == 1) {
      if (f.wire != NPUI_PB_BYTES) continue;
      if (f.number == 1) n->name = (bytes){f.data, f.len};
      if (f.number == 2) n->op = (bytes){f.data, f.len};
      if (f.number == 3) {
        if (pass) n->inputs[n_in] = (bytes){f.data, f.len};
        n_in++;
      }
      if (f.number == 5 && !pass) {
        bytes key, v;
        if (map_entry((bytes){f.data, f.len}, &key, &v) < 0) return bad(l, "NodeDef.attr");
        int type = 0;
        bytes s = {0}, shape = {0}, func = {0};
        if (parse_attr_value(v, &type, &s, &shape, &func) < 0) return bad(l, "AttrValue");
        if (bytes_eq(key, "shared_name")) n->shared_name = s;
        if (bytes_eq(key, "dtype")) n->dtype = type;
        if (bytes_eq(key, "shape")) n->shape_attr = shape;
        if (bytes_eq(key, "f")) n->func = func;
      }
    }
    if (k < 0) return bad(l, "NodeDef");
    if (!pass) {
      n->n_inputs = n_in;
      n->inputs = npuC_calloc(l->ctx, (size_t)n_in + 1, sizeof *n->inputs);
      if (!n->inputs) return oom(l);
    }
  }
  if (!n->name.n || !n->op.n) return bad(l, "a node without a name or an op");
  return NPU_OK;
}

static npu_status parse_graph(loader *l, bytes g) {
  npuI_pb_reader r = npuI_pb_reader_of(g.p, g.n);
  npuI_pb_field f;
  int k, n = 0;
  while ((k = npuI_pb_next(&r, &f)) == 1) {
    if (f.number == 1 && f.wire == NPUI_PB_BYTES) n++;
    if (f.number == 4 && f.wire == NPUI_PB_BYTES) l->graph_versions = (bytes){f.data, f.len};
    if (f.number == 2 && f.wire == NPUI_PB_BYTES) l->library = (bytes){f.data, f.len};
  }
  if (k < 0) return bad(l, "GraphDef");
  l->nodes = npuC_calloc(l->ctx, (size_t)n + 1, sizeof *l->nodes);
  if (!l->nodes) return oom(l);
  r = npuI_pb_reader_of(g.p, g.n);
  while (npuI_pb_next(&r, &f) == 1) {
    if (f.number != 1 || f.wire != NPUI_PB_BYTES) continue;
    npu_status st = parse_node(l, &l->nodes[l->n_nodes++], (bytes){f.data, f.len});
    if (st) return st;
  }
  return NPU_OK;
}

static void free_loader(loader *l) {
  for (int i = 0; i < l->n_nodes; i++) npuC_free(l->ctx, l->nodes[i].inputs);
  npuC_free(l->ctx, l->nodes);
  npuC_free(l->ctx, l->sig.io);
  npuC_free(l->ctx, l->checkpoint);
}

/* ---- choosing the meta graph and the signature ------------------------------------------ */

/* 1 when the MetaInfoDef's tags are exactly the comma-separated set `want`. */
static bool tags_match(bytes meta_info, const char *want) {
  npuI_pb_reader r = npuI_pb_reader_of(meta_info.p, meta_info.n);
  npuI_pb_field f;
  int n_have = 0, n_want = 0;
  for (const char *p = want; *p;) {
    const char *c = strchr(p, ',');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len) n_want++;
    p += len + (c != NULL);
  }
  while (npuI_pb_next(&r, &f) == 1) {
    if (f.number != 4 || f.wire != NPUI_PB_BYTES) continue;
    n_have++;
    bool found = false;
    for (const char *p = want; *p && !found;) {
      const char *c = strchr(p, ',');
      size_t len = c ? (size_t)(c - p) : strlen(p);
      found = len == f.len && memcmp(p, f.data, len) == 0;
      p += len + (c != NULL);
    }
    if (!found) return false;
  }
  return n_have == n_want;
}

static void tags_text(bytes meta_info, char *buf, size_t size) {
  npuI_pb_reader r = npuI_pb_reader_of(meta_info.p, meta_info.n);
  npuI_pb_field f;
  size_t at = 0;
  buf[0] = 0;
  at += (size_t)snprintf(buf, size, "{");
  while (npuI_pb_next(&r, &f) == 1 && at < size)
    if (f.number == 4 && f.wire == NPUI_PB_BYTES)
      at += (size_t)snprintf(buf + at, size - at, "%s\"%.*s\"", at > 1 ? ", " : "", (int)f.len,
                             (const char *)f.data);
  if (at < size) snprintf(buf + at, size - at, "}");
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Finds the meta graph, its GraphDef and the signature `want` (NULL: serving_default, else
   the first key in sorted order); *keys receives every signature key, sorted. */
static npu_status choose(loader *l, const uint8_t *data, size_t len, const char *tags,
                         const char *want, bytes *graph, char ***keys, int *n_keys) {
  npuI_pb_reader r = npuI_pb_reader_of(data, len);
  npuI_pb_field f;
  int k;
  bytes meta = {0};
  char seen[512] = "";
  size_t at = 0;
  while ((k = npuI_pb_next(&r, &f)) == 1) {
    if (f.number != 2 || f.wire != NPUI_PB_BYTES) continue;
    npuI_pb_reader mr = npuI_pb_reader_of(f.data, f.len);
    npuI_pb_field mf;
    bytes info = {0};
    while (npuI_pb_next(&mr, &mf) == 1)
      if (mf.number == 1 && mf.wire == NPUI_PB_BYTES) info = (bytes){mf.data, mf.len};
    if (tags_match(info, tags)) {
      meta = (bytes){f.data, f.len};
      break;
    }
    char t[200];
    tags_text(info, t, sizeof t);
    if (at < sizeof seen) at += (size_t)snprintf(seen + at, sizeof seen - at, "%s%s", at ? ", " : "", t);
  }
  if (k < 0) return bad(l, "SavedModel");
  if (!meta.p)
    return npuC_error(l->ctx, NPU_ERR_NOT_FOUND,
                      "%s: no meta graph is tagged \"%s\" (the tag sets are: %s)", l->path, tags,
                      at ? seen : "none");
  /* the GraphDef and the signature keys */
  npuI_pb_reader mr = npuI_pb_reader_of(meta.p, meta.n);
  int n = 0;
  *graph = (bytes){0};
  while ((k = npuI_pb_next(&mr, &f)) == 1) {
    if (f.number == 2 && f.wire == NPUI_PB_BYTES) *graph = (bytes){f.data, f.len};
    if (f.number == 7 && f.wire == NPUI_PB_BYTES) l->object_graph = (bytes){f.data, f.len};
    n += f.number == 5 && f.wire == NPUI_PB_BYTES;
  }
  if (k < 0) return bad(l, "MetaGraphDef");
  if (!graph->p) return bad(l, "the meta graph has no GraphDef");
  if (n == 0)
    return npuC_error(l->ctx, NPU_ERR_FORMAT, "%s: the meta graph tagged \"%s\" has no signature",
                      l->path, tags);
  *keys = npuC_calloc(l->ctx, (size_t)n, sizeof **keys);
  if (!*keys) return oom(l);
  mr = npuI_pb_reader_of(meta.p, meta.n);
  bytes chosen = {0}, chosen_key = {0};
  while (npuI_pb_next(&mr, &f) == 1) {
    if (f.number != 5 || f.wire != NPUI_PB_BYTES) continue;
    bytes key, v;
    if (map_entry((bytes){f.data, f.len}, &key, &v) < 0) return bad(l, "signature_def");
    char *s = npuC_alloc(l->ctx, key.n + 1);
    if (!s) return oom(l);
    memcpy(s, key.p, key.n);
    s[key.n] = 0;
    (*keys)[(*n_keys)++] = s;
    if (want ? bytes_eq(key, want) : bytes_eq(key, "serving_default")) chosen = v, chosen_key = key;
  }
  qsort(*keys, (size_t)*n_keys, sizeof **keys, cmp_str);
  if (!chosen_key.p && !want) { /* no serving_default: the first key */
    mr = npuI_pb_reader_of(meta.p, meta.n);
    while (npuI_pb_next(&mr, &f) == 1) {
      bytes key, v;
      if (f.number == 5 && f.wire == NPUI_PB_BYTES && map_entry((bytes){f.data, f.len}, &key, &v) >= 0 &&
          bytes_eq(key, (*keys)[0]))
        chosen = v, chosen_key = key;
    }
  }
  if (!chosen_key.p) {
    char list[512];
    size_t la = 0;
    list[0] = 0;
    for (int i = 0; i < *n_keys && la < sizeof list; i++)
      la += (size_t)snprintf(list + la, sizeof list - la, "%s'%s'", i ? ", " : "", (*keys)[i]);
    return npuC_error(l->ctx, NPU_ERR_NOT_FOUND, "%s: no signature '%s' (it has %s)", l->path,
                      want, list);
  }
  if (bytes_eq(chosen_key, "__saved_model_init_op"))
    return npuC_error(l->ctx, NPU_ERR_UNSUPPORTED,
                      "%s: signature '__saved_model_init_op' is TensorFlow 2's initialisation op "
                      "(it restores variables and assets), not a model to run: a loaded "
                      "SavedModel is frozen, nothing to initialise", l->path);
  return parse_signature(l, chosen_key, chosen);
}

/* ---- pruning and rewriting the graph ------------------------------------------------------ */

static int find_node(const loader *l, const uint8_t *name, size_t len) {
  for (int i = 0; i < l->n_nodes; i++)
    if (l->nodes[i].name.n == len && memcmp(l->nodes[i].name.p, name, len) == 0) return i;
  return -1;
}

/* "^name", "name:i", "name" -> the node's index (-1 when dangling); *index the output. */
static int input_node(const loader *l, bytes in, int *index) {
  const uint8_t *p = in.p;
  size_t n = in.n;
  *index = 0;
  if (n && p[0] == '^') p++, n--, *index = -1;
  size_t colon = n;
  while (colon > 0 && p[colon - 1] >= '0' && p[colon - 1] <= '9') colon--;
  if (colon > 0 && colon < n && p[colon - 1] == ':') {
    if (*index == 0) *index = atoi((const char *)p + colon) ; /* digits only: atoi stops at ':' */
    n = colon - 1;
  }
  return find_node(l, p, n);
}

static bool is_variable(bytes op) {
  return bytes_eq(op, "VariableV2") || bytes_eq(op, "Variable") || bytes_eq(op, "VarHandleOp");
}

static bool is_call(bytes op) {
  return bytes_eq(op, "StatefulPartitionedCall") || bytes_eq(op, "PartitionedCall");
}

/* The SavedConcreteFunction of function `name` in the object graph (SavedObjectGraph {
   concrete_functions = 2: map<string, SavedConcreteFunction> }), or n == 0. */
static bytes concrete_function(const loader *l, bytes name) {
  npuI_pb_reader r = npuI_pb_reader_of(l->object_graph.p, l->object_graph.n);
  npuI_pb_field f;
  while (npuI_pb_next(&r, &f) == 1) {
    bytes key, v;
    if (f.number == 2 && f.wire == NPUI_PB_BYTES && map_entry((bytes){f.data, f.len}, &key, &v) >= 0 &&
        key.n == name.n && memcmp(key.p, name.p, name.n) == 0)
      return v;
  }
  return (bytes){NULL, 0};
}

/* TF2: a signature calls a function (StatefulPartitionedCall) whose last inputs are the
   resources it captured, VarHandleOps of the graph; the function's SavedConcreteFunction
   lists them as bound_inputs (= 2, object graph node ids), in the same order.  Each such
   VarHandleOp gets its node id, through which the checkpoint names its value. */
static npu_status bind_captures(loader *l) {
  if (!l->object_graph.p) return NPU_OK;
  for (int i = 0; i < l->n_nodes; i++) {
    sm_node *n = &l->nodes[i];
    if (n->keep != 1 || !is_call(n->op) || !n->func.n) continue;
    bytes cf = concrete_function(l, n->func);
    if (!cf.p) continue;
    int n_data = 0;
    while (n_data < n->n_inputs && !(n->inputs[n_data].n && n->inputs[n_data].p[0] == '^')) n_data++;
    int ids[256], n_bound = 0;
    npuI_pb_reader r = npuI_pb_reader_of(cf.p, cf.n);
    npuI_pb_field f;
    int k;
    while ((k = npuI_pb_next(&r, &f)) == 1 && n_bound < 256) {
      if (f.number != 2) continue;
      if (f.wire == NPUI_PB_VARINT) {
        ids[n_bound++] = (int)f.u;
        continue;
      }
      if (f.wire != NPUI_PB_BYTES) continue;
      npuI_pb_reader pr = npuI_pb_reader_of(f.data, f.len); /* packed */
      uint64_t v;
      int kk;
      while (n_bound < 256 && (kk = npuI_pb_read_varint(&pr, &v)) == 1) ids[n_bound++] = (int)v;
      if (kk < 0) k = -1;
    }
    if (k < 0) return bad(l, "SavedConcreteFunction");
    if (n_bound > n_data)
      return npuC_error(l->ctx, NPU_ERR_FORMAT,
                        "%s: node '%.*s' calls '%.*s' with %d input(s), but the function "
                        "captured %d", l->path, (int)n->name.n, (const char *)n->name.p,
                        (int)n->func.n, (const char *)n->func.p, n_data, n_bound);
    for (int j = 0; j < n_bound; j++) {
      int index, src = input_node(l, n->inputs[n_data - n_bound + j], &index);
      if (src >= 0 && bytes_eq(l->nodes[src].op, "VarHandleOp") && ids[j] >= 0)
        l->nodes[src].object_id = ids[j] + 1;
    }
  }
  return NPU_OK;
}

static npu_status mark(loader *l) {
  signature *s = &l->sig;
  int *stack = npuC_alloc(l->ctx, ((size_t)l->n_nodes + 1) * sizeof *stack);
  if (!stack) return oom(l);
  int sp = 0;
  npu_status st = NPU_OK;
  for (int i = 0; i < s->n_in + s->n_out && !st; i++) {
    tensor_info *ti = &s->io[i];
    const char *what = i < s->n_in ? "input" : "output";
    if (ti->composite)
      st = npuC_error(l->ctx, NPU_ERR_UNSUPPORTED,
                      "%s: signature '%.*s' %s '%.*s' is sparse or composite", l->path,
                      (int)s->key.n, (const char *)s->key.p, what, (int)ti->key.n,
                      (const char *)ti->key.p);
    int index, node = ti->name.n ? input_node(l, ti->name, &index) : -1;
    if (!st && node < 0)
      st = npuC_error(l->ctx, NPU_ERR_FORMAT,
                      "%s: signature '%.*s' %s '%.*s' names tensor '%.*s', which the graph does "
                      "not have",
                      l->path, (int)s->key.n, (const char *)s->key.p, what, (int)ti->key.n,
                      (const char *)ti->key.p, (int)ti->name.n, (const char *)ti->name.p);
    if (st) break;
    if (i < s->n_in) {
      if (index != 0 && !bytes_eq(l->nodes[node].op, "Placeholder"))
        st = npuC_error(l->ctx, NPU_ERR_UNSUPPORTED,
                        "%s: signature input '%.*s' feeds output %d of node '%.*s'; only output "
                        "0 of a node can be fed here",
                        l->path, (int)ti->key.n, (const char *)ti->key.p, index,
                        (int)l->nodes[node].name.n, (const char *)l->nodes[node].name.p);
      l->nodes[node].keep = 2;
      l->nodes[node].fed_info = i;
    } else if (!l->nodes[node].keep) {
      l->nodes[node].keep = 1;
      stack[sp++] = node;
    }
  }
  while (sp > 0 && !st) {
    sm_node *n = &l->nodes[stack[--sp]];
    for (int i = 0; i < n->n_inputs; i++) {
      int index, src = input_node(l, n->inputs[i], &index);
      if (src < 0) {
        st = npuC_error(l->ctx, NPU_ERR_FORMAT, "%s: node '%.*s' reads '%.*s', which the graph "
                        "does not have", l->path, (int)n->name.n, (const char *)n->name.p,
                        (int)n->inputs[i].n, (const char *)n->inputs[i].p);
        break;
      }
      if (l->nodes[src].keep) continue;
      l->nodes[src].keep = 1;
      stack[sp++] = src;
    }
  }
  npuC_free(l->ctx, stack);
  if (!st) st = bind_captures(l);
  return st;
}

static void put_shape(npuI_pb_writer *w, uint32_t field, const npu_tensor *t);
static char *dup_bytes(npu_context *ctx, bytes b);

static void put_attr_type(npuI_pb_writer *w, const char *name, int type) {
  size_t m = npuI_pb_begin(w, 5);
  npuI_pb_put_string(w, 1, name);
  size_t v = npuI_pb_begin(w, 2);
  npuI_pb_put_varint(w, 6, (uint64_t)type);
  npuI_pb_end(w, v);
  npuI_pb_end(w, m);
}

static void put_attr_shape(npuI_pb_writer *w, const char *name, bytes shape) {
  size_t m = npuI_pb_begin(w, 5);
  npuI_pb_put_string(w, 1, name);
  size_t v = npuI_pb_begin(w, 2);
  npuI_pb_put_bytes(w, 7, shape.p, shape.n);
  npuI_pb_end(w, v);
  npuI_pb_end(w, m);
}

/* A Const NodeDef holding t. */
static void put_const(npuI_pb_writer *w, bytes name, const npu_tensor *t) {
  int tf = npuI_dtype_to_tf(npu_tensor_dtype(t));
  size_t m = npuI_pb_begin(w, 1);
  npuI_pb_put_bytes(w, 1, name.p, name.n);
  npuI_pb_put_string(w, 2, "Const");
  put_attr_type(w, "dtype", tf);
  size_t a = npuI_pb_begin(w, 5);
  npuI_pb_put_string(w, 1, "value");
  size_t v = npuI_pb_begin(w, 2);
  size_t tp = npuI_pb_begin(w, 8);
  npuI_pb_put_varint(w, 1, (uint64_t)tf);
  put_shape(w, 2, t);
  npuI_pb_put_bytes(w, 4, npu_tensor_data(t), npu_tensor_nbytes(t));
  npuI_pb_end(w, tp);
  npuI_pb_end(w, v);
  npuI_pb_end(w, a);
  npuI_pb_end(w, m);
}

/* The bundle key of variable node n.  A variable a TF2 function captured (n->object_id): the
   checkpoint_key of its object's VARIABLE_VALUE in the checkpoint's object graph
   (TrackableObjectGraph { nodes = 1: TrackableObject { attributes = 2: SerializedTensor {
   name = 1, checkpoint_key = 3 } } }, whose node ids are the SavedObjectGraph's), such as
   "layer/kernel/.ATTRIBUTES/VARIABLE_VALUE".  Otherwise (TF1) a VarHandleOp's shared_name,
   else the node's name. */
static npu_status variable_key(loader *l, npuI_bundle *b, const sm_node *n, char *key, size_t size) {
  bytes kb = bytes_eq(n->op, "VarHandleOp") && n->shared_name.n ? n->shared_name : n->name;
  if (!n->object_id) {
    snprintf(key, size, "%.*s", (int)(kb.n < size - 1 ? kb.n : size - 1), (const char *)kb.p);
    return NPU_OK;
  }
  const char *what = "_CHECKPOINTABLE_OBJECT_GRAPH";
  if (!l->checkpoint) {
    npu_status st = npuI_bundle_read_string(b, what, &l->checkpoint, &l->checkpoint_len);
    if (st == NPU_ERR_NOT_FOUND)
      return npuC_error(l->ctx, NPU_ERR_FORMAT,
                        "%s: variable '%.*s' is captured by a TF2 function, but %s/variables "
                        "has no object graph (%s)", l->path, (int)n->name.n,
                        (const char *)n->name.p, l->dir, what);
    if (st) return st;
  }
  npuI_pb_reader r = npuI_pb_reader_of(l->checkpoint, l->checkpoint_len);
  npuI_pb_field f;
  int k, id = 0;
  bytes found = {0};
  while ((k = npuI_pb_next(&r, &f)) == 1 && !found.p) {
    if (f.number != 1 || f.wire != NPUI_PB_BYTES || id++ != n->object_id - 1) continue;
    npuI_pb_reader tr = npuI_pb_reader_of(f.data, f.len);
    npuI_pb_field tf;
    while ((k = npuI_pb_next(&tr, &tf)) == 1 && !found.p) {
      if (tf.number != 2 || tf.wire != NPUI_PB_BYTES) continue;
      npuI_pb_reader ar = npuI_pb_reader_of(tf.data, tf.len);
      npuI_pb_field af;
      bytes name = {0}, ck = {0};
      while ((k = npuI_pb_next(&ar, &af)) == 1) {
        if (af.number == 1 && af.wire == NPUI_PB_BYTES) name = (bytes){af.data, af.len};
        if (af.number == 3 && af.wire == NPUI_PB_BYTES) ck = (bytes){af.data, af.len};
      }
      if (k >= 0 && bytes_eq(name, "VARIABLE_VALUE") && ck.n) found = ck;
    }
    if (k < 0) break;
  }
  if (k < 0)
    return npuC_error(l->ctx, NPU_ERR_FORMAT, "%s/variables: corrupt object graph (%s)", l->dir, what);
  if (!found.p || found.n >= size)
    return npuC_error(l->ctx, NPU_ERR_FORMAT,
                      "%s: variable '%.*s' is object %d of the object graph, which the "
                      "checkpoint's object graph gives no value%s", l->path, (int)n->name.n,
                      (const char *)n->name.p, n->object_id - 1, found.p ? " (a key too long)" : "");
  memcpy(key, found.p, found.n);
  key[found.n] = 0;
  return NPU_OK;
}

/* ---- the function library: only what the kept nodes call ---------------------------------- */

/* FunctionDefLibrary { function = 1: FunctionDef { signature = 1: OpDef { name = 1 },
   node_def = 3 } }.  A TF2 SavedModel's library holds every function of every signature and
   of saving and restoring (string ops among them); the importer gets only those the kept
   nodes reach, through any attribute naming a function (AttrValue func = 10, or list = 1
   { func = 9 }). */
typedef struct library {
  int n;
  bytes *defs, *names;
  bool *used;
} library;

static bytes function_name(bytes def) {
  npuI_pb_reader r = npuI_pb_reader_of(def.p, def.n);
  npuI_pb_field f;
  while (npuI_pb_next(&r, &f) == 1)
    if (f.number == 1 && f.wire == NPUI_PB_BYTES) {
      npuI_pb_reader sr = npuI_pb_reader_of(f.data, f.len);
      npuI_pb_field sf;
      while (npuI_pb_next(&sr, &sf) == 1)
        if (sf.number == 1 && sf.wire == NPUI_PB_BYTES) return (bytes){sf.data, sf.len};
    }
  return (bytes){NULL, 0};
}

static void use_function(library *lib, bytes name, int *stack, int *sp) {
  for (int i = 0; i < lib->n; i++)
    if (!lib->used[i] && lib->names[i].n == name.n && memcmp(lib->names[i].p, name.p, name.n) == 0) {
      lib->used[i] = true;
      stack[(*sp)++] = i;
    }
}

/* Every function a NodeDef's attributes name. */
static void use_node_functions(library *lib, bytes node, int *stack, int *sp) {
  npuI_pb_reader r = npuI_pb_reader_of(node.p, node.n);
  npuI_pb_field f;
  while (npuI_pb_next(&r, &f) == 1) {
    bytes key, v;
    if (f.number != 5 || f.wire != NPUI_PB_BYTES || map_entry((bytes){f.data, f.len}, &key, &v) < 0)
      continue;
    npuI_pb_reader ar = npuI_pb_reader_of(v.p, v.n);
    npuI_pb_field af;
    while (npuI_pb_next(&ar, &af) == 1) {
      if (af.wire != NPUI_PB_BYTES || (af.number != 10 && af.number != 1)) continue;
      npuI_pb_reader lr = npuI_pb_reader_of(af.data, af.len);
      npuI_pb_field lf;
      if (af.number == 10) { /* NameAttrList { name = 1 } */
        while (npuI_pb_next(&lr, &lf) == 1)
          if (lf.number == 1 && lf.wire == NPUI_PB_BYTES) use_function(lib, (bytes){lf.data, lf.len}, stack, sp);
        continue;
      }
      while (npuI_pb_next(&lr, &lf) == 1) { /* ListValue { func = 9: NameAttrList } */
        if (lf.number != 9 || lf.wire != NPUI_PB_BYTES) continue;
        npuI_pb_reader nr = npuI_pb_reader_of(lf.data, lf.len);
        npuI_pb_field nf;
        while (npuI_pb_next(&nr, &nf) == 1)
          if (nf.number == 1 && nf.wire == NPUI_PB_BYTES) use_function(lib, (bytes){nf.data, nf.len}, stack, sp);
      }
    }
  }
}

static npu_status write_library(loader *l, npuI_pb_writer *w) {
  if (!l->library.p) return NPU_OK;
  library lib = {0};
  npuI_pb_reader r = npuI_pb_reader_of(l->library.p, l->library.n);
  npuI_pb_field f;
  int k;
  while ((k = npuI_pb_next(&r, &f)) == 1) lib.n += f.number == 1 && f.wire == NPUI_PB_BYTES;
  if (k < 0) return bad(l, "FunctionDefLibrary");
  lib.defs = npuC_calloc(l->ctx, (size_t)lib.n + 1, sizeof *lib.defs);
  lib.names = npuC_calloc(l->ctx, (size_t)lib.n + 1, sizeof *lib.names);
  lib.used = npuC_calloc(l->ctx, (size_t)lib.n + 1, sizeof *lib.used);
  int *stack = npuC_calloc(l->ctx, (size_t)lib.n + 1, sizeof *stack), sp = 0;
  npu_status st = !lib.defs || !lib.names || !lib.used || !stack ? oom(l) : NPU_OK;
  r = npuI_pb_reader_of(l->library.p, l->library.n);
  for (int i = 0; !st && npuI_pb_next(&r, &f) == 1;)
    if (f.number == 1 && f.wire == NPUI_PB_BYTES) {
      lib.defs[i] = (bytes){f.data, f.len};
      lib.names[i++] = function_name((bytes){f.data, f.len});
    }
  for (int i = 0; i < l->n_nodes && !st; i++)
    if (l->nodes[i].keep == 1) use_node_functions(&lib, l->nodes[i].raw, stack, &sp);
  while (sp > 0 && !st) {
    bytes def = lib.defs[stack[--sp]];
    npuI_pb_reader dr = npuI_pb_reader_of(def.p, def.n);
    while ((k = npuI_pb_next(&dr, &f)) == 1)
      if (f.number == 3 && f.wire == NPUI_PB_BYTES) use_node_functions(&lib, (bytes){f.data, f.len}, stack, &sp);
    if (k < 0) st = bad(l, "FunctionDef");
  }
  if (!st) {
    size_t m = npuI_pb_begin(w, 2);
    for (int i = 0; i < lib.n; i++)
      if (lib.used[i]) npuI_pb_put_bytes(w, 1, lib.defs[i].p, lib.defs[i].n);
    npuI_pb_end(w, m);
  }
  npuC_free(l->ctx, lib.defs);
  npuC_free(l->ctx, lib.names);
  npuC_free(l->ctx, lib.used);
  npuC_free(l->ctx, stack);
  return st;
}

static npu_status open_bundle(loader *l, npuI_bundle **bundle) {
  if (*bundle) return NPU_OK;
  char prefix[4200];
  snprintf(prefix, sizeof prefix, "%.4096s/variables/variables", l->dir);
  return npuI_bundle_open(l->ctx, prefix, bundle);
}

/* The value of variable node n, bundle key `key`: a key the bundle lacks is NPU_ERR_FORMAT
   naming both. */
static npu_status read_variable(loader *l, npuI_bundle *bundle, const sm_node *n,
                                const char *key, npu_tensor **out) {
  npu_status st = npuI_bundle_read(bundle, key, out);
  if (st == NPU_ERR_NOT_FOUND)
    st = npuC_error(l->ctx, NPU_ERR_FORMAT,
                    "%s: variable '%.*s' has no value in %s/variables (no tensor '%s')", l->path,
                    (int)n->name.n, (const char *)n->name.p, l->dir, key);
  return st;
}

/* A VariableV2 NodeDef of t's dtype and shape (what import reads and export writes). */
static void put_variable_def(npuI_pb_writer *w, bytes name, const npu_tensor *t) {
  size_t m = npuI_pb_begin(w, 1);
  npuI_pb_put_bytes(w, 1, name.p, name.n);
  npuI_pb_put_string(w, 2, "VariableV2");
  put_attr_type(w, "dtype", npuI_dtype_to_tf(npu_tensor_dtype(t)));
  size_t am = npuI_pb_begin(w, 5);
  npuI_pb_put_string(w, 1, "shape");
  size_t av = npuI_pb_begin(w, 2);
  put_shape(w, 7, t);
  npuI_pb_end(w, av);
  npuI_pb_end(w, am);
  npuI_pb_end(w, m);
}

typedef struct kept_variable {
  int node;
  char *key;
} kept_variable;

static int cmp_key(const void *a, const void *b) {
  return strcmp(((const kept_variable *)a)->key, ((const kept_variable *)b)->key);
}

/* variables = true: each kept variable as TensorFlow writes one — VariableV2, a Const
   "<name>/initial_value" holding the bundle's value, and an Assign "<name>/Assign", which
   the importer makes its initializer — ahead of every other node and in the bundle's
   (sorted) key order, so that the imported graph lists its variables in that order. */
static npu_status write_variables(loader *l, npuI_pb_writer *w, npuI_bundle **bundle) {
  int n_vars = 0;
  for (int i = 0; i < l->n_nodes; i++) n_vars += l->nodes[i].keep == 1 && is_variable(l->nodes[i].op);
  if (!n_vars) return NPU_OK;
  npu_status st = open_bundle(l, bundle);
  if (st) return st;
  kept_variable *v = npuC_calloc(l->ctx, (size_t)n_vars, sizeof *v);
  if (!v) return oom(l);
  int n = 0;
  for (int i = 0; i < l->n_nodes && !st; i++) {
    if (l->nodes[i].keep != 1 || !is_variable(l->nodes[i].op)) continue;
    char key[1024];
    st = variable_key(l, *bundle, &l->nodes[i], key, sizeof key);
    if (!st && !(v[n].key = dup_bytes(l->ctx, (bytes){(const uint8_t *)key, strlen(key)})))
      st = oom(l);
    if (!st) v[n++].node = i;
  }
  if (!st) qsort(v, (size_t)n, sizeof *v, cmp_key);
  for (int j = 0; j < n && !st; j++) {
    const sm_node *var = &l->nodes[v[j].node];
    size_t size = var->name.n + sizeof "/initial_value";
    char *init = npuC_alloc(l->ctx, 2 * size), *assign = init + size;
    if (!init) {
      st = oom(l);
      break;
    }
    snprintf(init, size, "%.*s/initial_value", (int)var->name.n, (const char *)var->name.p);
    snprintf(assign, size, "%.*s/Assign", (int)var->name.n, (const char *)var->name.p);
    for (int k = 0; k < 2 && !st; k++) { /* kept nodes already so named would clash */
      const char *name = k ? assign : init;
      int other = find_node(l, (const uint8_t *)name, strlen(name));
      if (other >= 0 && l->nodes[other].keep)
        st = npuC_error(l->ctx, NPU_ERR_UNSUPPORTED, "%s: variable '%.*s' cannot be kept a "
                        "variable: the signature needs a node named '%s', the name its %s "
                        "would take", l->path, (int)var->name.n, (const char *)var->name.p,
                        name, k ? "initializer" : "initial value");
    }
    npu_tensor *t = NULL;
    if (!st) st = read_variable(l, *bundle, var, v[j].key, &t);
    if (st) {
      npuC_free(l->ctx, init);
      break;
    }
    int tf = npuI_dtype_to_tf(npu_tensor_dtype(t));
    put_variable_def(w, var->name, t);
    put_const(w, (bytes){(const uint8_t *)init, strlen(init)}, t);
    size_t m = npuI_pb_begin(w, 1);
    npuI_pb_put_string(w, 1, assign);
    npuI_pb_put_string(w, 2, "Assign");
    npuI_pb_put_bytes(w, 3, var->name.p, var->name.n);
    npuI_pb_put_string(w, 3, init);
    put_attr_type(w, "T", tf);
    npuI_pb_end(w, m);
    npu_tensor_release(t);
    npuC_free(l->ctx, init);
  }
  for (int j = 0; j < n; j++) npuC_free(l->ctx, v[j].key);
  npuC_free(l->ctx, v);
  return st;
}

static npu_status write_graph(loader *l, npuI_pb_writer *w) {
  npuI_bundle *bundle = NULL;
  npu_status st = l->variables ? write_variables(l, w, &bundle) : NPU_OK;
  for (int i = 0; i < l->n_nodes && !st; i++) {
    sm_node *n = &l->nodes[i];
    if (!n->keep) continue;
    if (n->keep == 2) { /* fed by the signature: a Placeholder */
      tensor_info *ti = &l->sig.io[n->fed_info];
      size_t m = npuI_pb_begin(w, 1);
      npuI_pb_put_bytes(w, 1, n->name.p, n->name.n);
      npuI_pb_put_string(w, 2, "Placeholder");
      put_attr_type(w, "dtype", ti->tf_dtype);
      if (ti->has_shape) put_attr_shape(w, "shape", ti->shape);
      npuI_pb_end(w, m);
    } else if (is_variable(n->op)) {
      if (l->variables) continue; /* written by write_variables */
      char key[1024];
      npu_tensor *t;
      if ((st = open_bundle(l, &bundle)) || (st = variable_key(l, bundle, n, key, sizeof key)) ||
          (st = read_variable(l, bundle, n, key, &t)))
        break;
      put_const(w, n->name, t);
      npu_tensor_release(t);
    } else if (bytes_eq(n->op, "ReadVariableOp")) {
      size_t m = npuI_pb_begin(w, 1);
      npuI_pb_put_bytes(w, 1, n->name.p, n->name.n);
      npuI_pb_put_string(w, 2, "Identity");
      for (int k = 0; k < n->n_inputs; k++) npuI_pb_put_bytes(w, 3, n->inputs[k].p, n->inputs[k].n);
      put_attr_type(w, "T", n->dtype);
      npuI_pb_end(w, m);
    } else {
      npuI_pb_put_bytes(w, 1, n->raw.p, n->raw.n);
    }
  }
  if (!st) st = write_library(l, w);
  if (!st && l->graph_versions.p) npuI_pb_put_bytes(w, 4, l->graph_versions.p, l->graph_versions.n);
  npuI_bundle_close(bundle);
  if (!st && w->failed) st = oom(l);
  return st;
}

/* ---- the info ----------------------------------------------------------------------------- */

static char *dup_bytes(npu_context *ctx, bytes b) {
  char *s = npuC_alloc(ctx, b.n + 1);
  if (s) {
    memcpy(s, b.p, b.n);
    s[b.n] = 0;
  }
  return s;
}

static npu_status build_info(loader *l, npu_graph *g, char **keys, int n_keys, npu_model_info **out) {
  npu_context *ctx = l->ctx;
  signature *s = &l->sig;
  npu_model_info *info = npuC_calloc(ctx, 1, sizeof *info);
  if (!info) { /* keys are ours to free, whatever happens */
    for (int i = 0; i < n_keys; i++) npuC_free(ctx, keys[i]);
    npuC_free(ctx, keys);
    return oom(l);
  }
  info->ctx = npu_context_retain(ctx);
  info->format = "savedmodel";
  info->signature_source = "signature_def";
  info->signatures = keys;
  info->n_signatures = n_keys;
  info->io = npuC_calloc(ctx, (size_t)(s->n_in + s->n_out) + 1, sizeof *info->io);
  info->signature_key = dup_bytes(ctx, s->key);
  info->method_name = dup_bytes(ctx, s->method);
  npu_status st = !info->io || !info->signature_key || !info->method_name ? oom(l) : NPU_OK;
  if (info->io) info->n_io = s->n_in + s->n_out;
  for (int i = 0; i < s->n_in + s->n_out && !st; i++) {
    tensor_info *ti = &s->io[i];
    npu_model_io *e = &info->io[i];
    bool indexed = memchr(ti->name.p, ':', ti->name.n) != NULL;
    char *name = npuC_alloc(ctx, ti->name.n + 3);
    if (name) snprintf(name, ti->name.n + 3, "%.*s%s", (int)ti->name.n, (const char *)ti->name.p, indexed ? "" : ":0");
    e->name = name;
    e->key = dup_bytes(ctx, ti->key);
    if (!e->name || !e->key) {
      st = oom(l);
      break;
    }
    int v;
    if (npu_graph_find_value(g, e->name, &v)) {
      st = npuC_error(ctx, NPU_ERR_FORMAT, "%s: signature tensor '%s' is not in the graph", l->path, e->name);
      break;
    }
    e->dtype = npu_graph_value_dtype(g, v);
    e->ndim = npu_graph_value_ndim(g, v);
    for (int d = 0; d < e->ndim && d < NPU_MAX_DIMS; d++) e->shape[d] = npu_graph_value_shape(g, v)[d];
    if (i < s->n_in) info->n_inputs++;
    else info->n_outputs++;
  }
  if (st) {
    npu_model_info_release(info); /* frees the keys too */
    return st;
  }
  *out = info;
  return NPU_OK;
}

/* ---- entry points --------------------------------------------------------------------------- */

npu_status npu_graph_import_savedmodel(npu_context *ctx, const char *dir, const char *tags,
                                       const char *signature_key, npu_graph **graph_out,
                                       npu_model_info **info_out) {
  npu_savedmodel_options o = {.tags = tags, .signature_key = signature_key};
  return npu_graph_import_savedmodel_with_options(ctx, dir, &o, graph_out, info_out);
}

npu_status npu_graph_import_savedmodel_with_options(npu_context *ctx, const char *dir,
                                                    const npu_savedmodel_options *opts,
                                                    npu_graph **graph_out,
                                                    npu_model_info **info_out) {
  if (graph_out) *graph_out = NULL;
  if (info_out) *info_out = NULL;
  if (!ctx || !dir || !graph_out)
    return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_import_savedmodel: NULL argument");
  static const npu_savedmodel_options defaults = {0};
  if (!opts) opts = &defaults;
  const char *tags = opts->tags, *signature_key = opts->signature_key;
  char path[4200];
  snprintf(path, sizeof path, "%.4096s/saved_model.pb", dir);
  if (!is_file(path)) {
    char txt[4200];
    snprintf(txt, sizeof txt, "%.4096s/saved_model.pbtxt", dir);
    if (is_file(txt))
      return npuC_error(ctx, NPU_ERR_UNSUPPORTED,
                        "%s: text-format SavedModels are not supported (save a binary "
                        "saved_model.pb)", txt);
  }
  char *data;
  size_t len;
  npu_status st = npuC_read_file(ctx, path, "SavedModel", &data, &len);
  if (st) return st;
  loader l = {.ctx = ctx, .path = path, .dir = dir, .variables = opts->variables != 0};
  bytes graph = {0};
  char **keys = NULL;
  int n_keys = 0;
  npuI_pb_writer w = {.ctx = ctx};
  npu_graph *g = NULL;
  st = choose(&l, (const uint8_t *)data, len, tags && *tags ? tags : "serve", signature_key,
              &graph, &keys, &n_keys);
  if (!st) st = parse_graph(&l, graph);
  if (!st) st = mark(&l);
  if (!st) st = write_graph(&l, &w);
  if (!st) st = npuI_import_pb_named(ctx, path, w.buf, w.n, &g, NULL);
  npu_model_info *info = NULL;
  if (!st && info_out) {
    st = build_info(&l, g, keys, n_keys, &info);
    keys = NULL; /* the info owns them now, or freed them */
  }
  if (keys) {
    for (int i = 0; i < n_keys; i++) npuC_free(ctx, keys[i]);
    npuC_free(ctx, keys);
  }
  npuI_pb_writer_free(&w);
  free_loader(&l);
  npuC_free(ctx, data);
  if (st) {
    npu_graph_release(g);
    return st;
  }
  *graph_out = g;
  if (info_out) *info_out = info;
  return NPU_OK;
}

/* A directory: a SavedModel (saved_model.pb), else a TensorFlow.js model.json, else its one
   .pb file. */
npu_status npuI_import_dir(npu_context *ctx, const char *dir, npu_graph **graph_out,
                           npu_model_info **info_out) {
  char path[4200];
  snprintf(path, sizeof path, "%.4096s/saved_model.pb", dir);
  if (is_file(path)) return npu_graph_import_savedmodel(ctx, dir, NULL, NULL, graph_out, info_out);
  snprintf(path, sizeof path, "%.4096s/saved_model.pbtxt", dir);
  if (is_file(path)) return npu_graph_import_savedmodel(ctx, dir, NULL, NULL, graph_out, info_out);
  snprintf(path, sizeof path, "%.4096s/model.json", dir);
  if (is_file(path)) return npu_graph_import_file(ctx, path, graph_out, info_out);
  DIR *d = opendir(dir);
  if (!d) return npuC_error(ctx, NPU_ERR_IO, "cannot open model directory '%s'", dir);
  int n = 0;
  char found[4200] = "";
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len > 3 && strcmp(e->d_name + len - 3, ".pb") == 0) {
      snprintf(found, sizeof found, "%.4096s/%.100s", dir, e->d_name);
      n += is_file(found);
    }
  }
  closedir(d);
  if (n != 1)
    return npuC_error(ctx, NPU_ERR_NOT_FOUND,
                      "model directory '%s' has no saved_model.pb, no model.json and %s .pb file",
                      dir, n ? "more than one" : "no");
  return npu_graph_import_file(ctx, found, graph_out, info_out);
}

/* ---- export --------------------------------------------------------------------------------- */

static bool listed(const char *const *names, int n, bytes name) {
  for (int i = 0; i < n; i++)
    if (bytes_eq(name, names[i])) return true;
  return false;
}

/* The value of const node `name` of g (retained), or NULL. */
static npu_tensor *const_value(const npu_graph *g, bytes name) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%.*s", (int)(name.n < 1000 ? name.n : 1000), (const char *)name.p);
  int node = npu_graph_find_node(g, buf);
  if (node < 0) return NULL;
  const npuG_node *n = &g->nodes[node];
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, "value") == 0 && n->attrs[i].type == NPU_ATTR_TENSOR)
      return npu_tensor_retain(n->attrs[i].u.tensor);
  return NULL;
}

static void put_shape(npuI_pb_writer *w, uint32_t field, const npu_tensor *t) {
  size_t sh = npuI_pb_begin(w, field);
  for (int d = 0; d < npu_tensor_ndim(t); d++) {
    size_t dm = npuI_pb_begin(w, 2);
    npuI_pb_put_varint(w, 1, (uint64_t)npu_tensor_shape(t)[d]);
    npuI_pb_end(w, dm);
  }
  npuI_pb_end(w, sh);
}

static void put_tensor_info(npuI_pb_writer *w, int field, const char *key, const npu_graph *g,
                            const char *name, int v) {
  size_t m = npuI_pb_begin(w, (uint32_t)field);
  npuI_pb_put_string(w, 1, key);
  size_t ti = npuI_pb_begin(w, 2);
  npuI_pb_put_string(w, 1, name);
  npuI_pb_put_varint(w, 2, (uint64_t)npuI_dtype_to_tf(npu_graph_value_dtype(g, v)));
  size_t sh = npuI_pb_begin(w, 3);
  int nd = npu_graph_value_ndim(g, v);
  for (int d = 0; d < nd; d++) {
    size_t dm = npuI_pb_begin(w, 2);
    npuI_pb_put_varint(w, 1, (uint64_t)npu_graph_value_shape(g, v)[d]);
    npuI_pb_end(w, dm);
  }
  if (nd < 0) npuI_pb_put_varint(w, 3, 1);
  npuI_pb_end(w, sh);
  npuI_pb_end(w, ti);
  npuI_pb_end(w, m);
}

npu_status npu_graph_export_savedmodel(npu_graph *g, const char *dir, const char *signature_key,
                                       int n_inputs, const char *const *input_keys,
                                       const char *const *input_names, int n_outputs,
                                       const char *const *output_keys,
                                       const char *const *output_names, int n_variables,
                                       const char *const *variables) {
  npu_context *ctx = g ? g->ctx : NULL;
  if (!g || !dir || n_inputs < 0 || n_outputs < 1 || n_variables < 0 ||
      (n_inputs && (!input_keys || !input_names)) || !output_keys || !output_names ||
      (n_variables && !variables))
    return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_export_savedmodel: NULL argument or no output");
  int vals[2 * 64];
  if (n_inputs + n_outputs > 128)
    return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_export_savedmodel: more than 128 signature tensors");
  for (int i = 0; i < n_inputs + n_outputs; i++) {
    const char *name = i < n_inputs ? input_names[i] : output_names[i - n_inputs];
    const char *key = i < n_inputs ? input_keys[i] : output_keys[i - n_inputs];
    if (!name || !key || npu_graph_find_value(g, name, &vals[i]))
      return npuC_error(ctx, NPU_ERR_NOT_FOUND,
                        "npu_graph_export_savedmodel: signature tensor '%s' is not in the graph",
                        name ? name : "(null)");
  }
  for (int i = 0; i < n_variables; i++) {
    int node = variables[i] ? npu_graph_find_node(g, variables[i]) : -1;
    if (node < 0 || strcmp(npu_graph_node_op(g, node), "const") != 0)
      return npuC_error(ctx, NPU_ERR_ARG,
                        "npu_graph_export_savedmodel: variable '%s' is not a const node of the graph",
                        variables[i] ? variables[i] : "(null)");
  }
  npu_tensor *gd;
  npu_status st = npu_graph_serialize_graphdef(g, &gd);
  if (st) return st;
  npu_tensor **vt = npuC_calloc(ctx, (size_t)n_variables + 1, sizeof *vt);
  const char **vkeys = npuC_calloc(ctx, (size_t)n_variables + 1, sizeof *vkeys);
  npuI_pb_writer gw = {.ctx = ctx}, w = {.ctx = ctx};
  int nv = 0;
  if (!vt || !vkeys) st = npuC_error(ctx, NPU_ERR_NOMEM, "export_savedmodel: out of memory");
  /* the GraphDef, variables turned into VariableV2 */
  npuI_pb_reader r = npuI_pb_reader_of(npu_tensor_data(gd), npu_tensor_nbytes(gd));
  npuI_pb_field f;
  while (!st && npuI_pb_next(&r, &f) == 1) {
    if (f.number != 1 || f.wire != NPUI_PB_BYTES) {
      if (f.wire == NPUI_PB_BYTES) npuI_pb_put_bytes(&gw, f.number, f.data, f.len);
      continue;
    }
    bytes node = {f.data, f.len}, name = {0};
    npuI_pb_reader nr = npuI_pb_reader_of(f.data, f.len);
    npuI_pb_field nf;
    while (npuI_pb_next(&nr, &nf) == 1)
      if (nf.number == 1 && nf.wire == NPUI_PB_BYTES) name = (bytes){nf.data, nf.len};
    if (!listed(variables, n_variables, name)) {
      npuI_pb_put_bytes(&gw, 1, node.p, node.n);
      continue;
    }
    if (!(vt[nv] = const_value(g, name))) {
      st = npuC_error(ctx, NPU_ERR_INTERNAL, "export_savedmodel: const '%.*s' has no value",
                      (int)name.n, (const char *)name.p);
      break;
    }
    for (int i = 0; i < n_variables; i++)
      if (bytes_eq(name, variables[i])) vkeys[nv] = variables[i];
    put_variable_def(&gw, name, vt[nv]);
    nv++;
  }
  /* SavedModel { schema 1, MetaGraphDef { MetaInfoDef {tags}, GraphDef, SignatureDef } } */
  if (!st) {
    npuI_pb_put_varint(&w, 1, 1);
    size_t mg = npuI_pb_begin(&w, 2);
    size_t mi = npuI_pb_begin(&w, 1);
    npuI_pb_put_string(&w, 4, "serve");
    npuI_pb_put_string(&w, 7, "lua-npu"); /* tensorflow_git_version: who wrote it */
    npuI_pb_end(&w, mi);
    npuI_pb_put_bytes(&w, 2, gw.buf, gw.n);
    size_t sd = npuI_pb_begin(&w, 5);
    npuI_pb_put_string(&w, 1, signature_key ? signature_key : "serving_default");
    size_t sv = npuI_pb_begin(&w, 2);
    for (int i = 0; i < n_inputs; i++) put_tensor_info(&w, 1, input_keys[i], g, input_names[i], vals[i]);
    for (int i = 0; i < n_outputs; i++)
      put_tensor_info(&w, 2, output_keys[i], g, output_names[i], vals[n_inputs + i]);
    npuI_pb_put_string(&w, 3, "tensorflow/serving/predict");
    npuI_pb_end(&w, sv);
    npuI_pb_end(&w, sd);
    npuI_pb_end(&w, mg);
    if (w.failed || gw.failed) st = npuC_error(ctx, NPU_ERR_NOMEM, "export_savedmodel: out of memory");
  }
  char path[4200];
  if (!st) {
    snprintf(path, sizeof path, "%.4096s/variables", dir);
    st = npuC_make_dirs(ctx, path, "SavedModel directory");
  }
  if (!st) {
    snprintf(path, sizeof path, "%.4096s/variables/variables", dir);
    st = npuI_bundle_write(ctx, path, nv, vkeys, vt);
  }
  if (!st) {
    snprintf(path, sizeof path, "%.4096s/saved_model.pb", dir);
    FILE *out = fopen(path, "wb");
    bool ok = out && fwrite(w.buf, 1, w.n, out) == w.n;
    if (out) ok = fclose(out) == 0 && ok;
    if (!ok) {
      remove(path);
      st = npuC_error(ctx, NPU_ERR_IO, "cannot write SavedModel '%s'", path);
    }
  }
  for (int i = 0; i < nv; i++) npu_tensor_release(vt[i]);
  npuC_free(ctx, vt);
  npuC_free(ctx, vkeys);
  npuI_pb_writer_free(&gw);
  npuI_pb_writer_free(&w);
  npu_tensor_release(gd);
  return st;
}
