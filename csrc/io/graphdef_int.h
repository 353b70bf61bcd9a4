/*
 * graphdef_int.h — the GraphDef importer's internals, shared by graphdef.c (reading the
 * forms, tensors and weights, op mapping, converting plain nodes, the signature) and
 * graphdef_control.c (control flow: functions, TF1 frames, TensorArrays, building scopes):
 * the arena, the intermediate form (tf_node, tf_function, tf_construct, tf_scope, importer)
 * and the functions each file gives the other.  Not for the exporter, which needs only
 * graphdef.h.
 */
#ifndef NPU_IO_GRAPHDEF_INT_H
#define NPU_IO_GRAPHDEF_INT_H

#include <stdint.h>
#include <string.h>

#include "io/graphdef.h"

/* ---- arena: the intermediate form's memory, freed at once ----------------------------- */

typedef struct arena_block {
  struct arena_block *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} arena_block;

typedef struct arena {
  npu_context *ctx;
  arena_block *head;
} arena;

static inline void *arena_alloc(arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!a->head || a->head->cap - a->head->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    arena_block *b = npuC_alloc(a->ctx, sizeof *b + cap);
    if (!b) return NULL;
    b->next = a->head;
    b->used = 0;
    b->cap = cap;
    a->head = b;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += n;
  return p;
}

static inline void *arena_calloc(arena *a, size_t count, size_t size) {
  if (size && count > SIZE_MAX / size) return NULL;
  size_t n = count * size;
  void *p = arena_alloc(a, n ? n : 1);
  if (p) memset(p, 0, n);
  return p;
}

static inline char *arena_strndup(arena *a, const char *s, size_t n) {
  char *d = arena_alloc(a, n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

/* ---- the intermediate form ----------------------------------------------------------- */

typedef enum {
  TA_OTHER = 0, /* placeholder, list of tensors / funcs, empty AttrValue: ignored */
  TA_S, TA_I, TA_F, TA_B, TA_TYPE, TA_SHAPE, TA_TENSOR,
  TA_LIST_I, TA_LIST_F, TA_LIST_S, TA_LIST_EMPTY,
  TA_FUNC, /* a function of the library: its name in s */
  TA_LIST_SHAPE /* shapes (a While's output_shapes) */
} tf_attr_kind;

typedef struct tf_shape {
  int ndim; /* -1: unknown rank */
  int64_t dims[NPU_MAX_DIMS];
} tf_shape;

typedef struct tf_attr {
  const char *name;
  tf_attr_kind kind;
  int64_t i;       /* I, B, TYPE */
  double f;        /* F */
  const char *s;   /* S (NUL-terminated copy) */
  size_t s_len;
  tf_shape shape;  /* SHAPE */
  npu_tensor *tensor; /* TENSOR (owned by the importer until the end) */
  int n;           /* LIST_* */
  int64_t *ints;
  double *floats;
  const char **strs;
  tf_shape *shapes; /* LIST_SHAPE */
} tf_attr;

/* What a node is for control flow: most become npu nodes (ROLE_NODE); the others make none
   or stand for another value. */
typedef enum {
  ROLE_NODE = 0,  /* converted into npu nodes */
  ROLE_PASS,      /* every output is its input 0 (Switch, Enter, LoopCond) */
  ROLE_ALIAS,     /* output i is ret[i] (an inlined PartitionedCall) */
  ROLE_CONSTRUCT, /* a cond / while node running its scopes (If, While, TF1 conds and frames) */
  ROLE_OUT,       /* output 0 is output out_index of its construct (Merge, Exit) */
  ROLE_LOOP_VAR,  /* loop variable out_index of its (while) construct */
  ROLE_NONE       /* makes nothing (NextIteration, TensorArrayCloseV3) */
} tf_role;

typedef struct tf_ref {
  int node, index;
} tf_ref;

typedef struct tf_node {
  const char *name, *op;
  int n_inputs;
  const char **inputs;
  int n_attrs;
  tf_attr *attrs;
  /* resolved */
  int *in_node;  /* per input: index of the source tf_node */
  int *in_index; /* per input: output index, -1 for a control input */
  npu_tensor *weight; /* TensorFlow.js: the value read from the weight files */
  int state;          /* topological sort: 0 new, 1 on the stack, 2 done */
  int first_node, last_node; /* npu node ids of its expansion */
  bool consumed;      /* some node reads one of its outputs */
  /* control flow (graphdef_control.c) */
  tf_role role;
  int scope;          /* the scope (branch, loop body) it is built in; 0: the top level */
  int construct;      /* ROLE_CONSTRUCT, _OUT, _LOOP_VAR: its construct */
  int out_index;      /* ROLE_OUT, _LOOP_VAR: the construct's output / variable */
  int depth;          /* function instances: how deep in calls */
  bool collapse;      /* every output is output 0 (a TensorArray's handle and flow) */
  bool shared_attrs;  /* attrs belong to a library function (an instance of it) */
  int n_rets;         /* ROLE_ALIAS: output i is rets[i] */
  const char **rets;
  tf_ref *ret;
  struct tf_dep *deps, *deps_tail, *next_dep; /* what is built before it, in its scope */
  int next_in_scope;  /* the scope's members, in node order (-1 ends) */
} tf_node;

/* A TensorFlow function (FunctionDef of the graph's library): its arguments and outputs by
   name, its nodes (instantiated for each call), and ret: output name -> "node:arg:index". */
typedef struct tf_function {
  const char *name;
  int n_args, n_outs, n_nodes, n_ret;
  const char **args, **outs, **ret_keys, **ret_vals;
  tf_node *nodes;
} tf_function;

/* A cond or while node built from TensorFlow control flow: its scopes (then and else; the
   loop's body) and the values it joins.  cond: pred, a = then results, b = else results;
   while: a = initial values, pred = the condition, b = the body's results. */
typedef struct tf_construct {
  bool is_while;
  int node;     /* its tf_node (ROLE_CONSTRUCT) */
  int scope[2]; /* then, else; body, -1 */
  int n;        /* outputs (loop variables) */
  const char *pred_s; /* TF2 names, resolved into the refs */
  const char **a_s, **b_s;
  tf_ref pred;
  tf_ref *a, *b;
} tf_construct;

/* A scope: branch `branch` of construct `construct`; scope 0, the top level, has none. */
typedef struct tf_scope {
  int construct, branch;
  int first; /* its first member (-1: none) */
} tf_scope;

typedef struct tf_dep {
  int node;
  struct tf_dep *next;
} tf_dep;

typedef struct importer {
  npu_context *ctx;
  arena ar;
  const char *source; /* the file (or "GraphDef bytes") for messages */
  tf_node *nodes;
  int n_nodes;
  int *slots; /* name hash: index + 1 */
  uint32_t n_slots, n_named;
  npu_graph *g;
  int cap_nodes;
  tf_function *functions; /* the library */
  int n_functions;
  tf_construct *constructs;
  int n_constructs, cap_constructs;
  tf_scope *scopes;
  int n_scopes, cap_scopes;
} importer;

static inline npu_status oom(importer *im) {
  return npuC_error(im->ctx, NPU_ERR_NOMEM, "%s: out of memory while importing", im->source);
}

static inline const tf_attr *node_attr(const tf_node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

/* ---- graphdef.c ------------------------------------------------------------------------ */

/* The node named `name` (-1: none); the name index (built, or grown by one appended node). */
int npuI_find_tf_node(const importer *im, const char *name);
npu_status npuI_index_names(importer *im);
npu_status npuI_index_add(importer *im, int k);
/* Our dtype for a TensorFlow one, or an error naming the node and `what`. */
npu_status npuI_check_dtype(importer *im, const char *node, const char *what, int tf_dtype,
                            npu_dtype *out);
/* One error listing every unsupported op type and a node of each. */
npu_status npuI_check_supported(importer *im);
/* Inputs of every node; the results of calls and constructs. */
npu_status npuI_resolve_inputs(importer *im);
/* One npu node of tf node n (its first / last node ids updated). */
npu_status npuI_emit(importer *im, tf_node *n, const char *op, const char *name, int n_in,
                     const int *in, int n_attrs, const npu_attr *attrs);
/* A name no TensorFlow node and no node of the graph has: "<base>/<suffix>[_k]". */
const char *npuI_fresh_name(importer *im, const char *base, const char *suffix);
/* The constant behind a value (through Identity nodes), or NULL. */
const npu_tensor *npuI_const_value(const npu_graph *g, int value);
/* A ROLE_NODE tf node as npu nodes. */
npu_status npuI_convert_node(importer *im, tf_node *n);

/* ---- graphdef_control.c ------------------------------------------------------------------ */

/* The types the control-flow import turns into constructs (check_supported lets them by). */
bool npuI_is_flow_type(const char *op);
/* The value of output `index` of tf node `node`: its npu output, or what it stands for. */
npu_status npuI_resolve(importer *im, int node, int index, int *value);
/* Functions, TF1 functionalization, TensorArrays, then every scope built: the npu graph. */
npu_status npuI_build_graph(importer *im);
/* TensorArray / TensorList converters (the alias table's convert_fn). */
#define NPUI_TA_CONVERTER(name)                                                              \
  npu_status name(importer *im, tf_node *n, const npu_op_def *def, int *in, int n_data,      \
                  npu_attr *attrs, int n_attrs)
NPUI_TA_CONVERTER(npuI_convert_ta_new);
NPUI_TA_CONVERTER(npuI_convert_ta_write);
NPUI_TA_CONVERTER(npuI_convert_ta_read);
NPUI_TA_CONVERTER(npuI_convert_ta_size);
NPUI_TA_CONVERTER(npuI_convert_ta_stack);
NPUI_TA_CONVERTER(npuI_convert_ta_element_shape);
NPUI_TA_CONVERTER(npuI_convert_ta_concat);
NPUI_TA_CONVERTER(npuI_convert_ta_split);
NPUI_TA_CONVERTER(npuI_convert_ta_push_back);

#endif
