/*
 * npu_int.h — the internal umbrella header.  Every .c file of the library includes it (the
 * Lua binding includes npu.h and this, nothing else of ours).
 *
 * Internal externs carry one capital letter per subsystem, as Lua's luaH_/luaV_ do:
 *   npuC_  core context: allocator with accounting, error slot, log, thread pool
 *   npuT_  tensors          npuG_  graphs          npuO_  options
 *   npuP_  compile passes   npuE_  executor        npuK_  kernels
 *   npuI_  file formats     npuS_  sessions        npuB_  Lua binding
 */
#ifndef NPU_INT_H
#define NPU_INT_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "include/npu.h"

#if defined(__GNUC__)
#define NPU_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define NPU_PRINTF(f, a)
#endif

#define NPU_ERRMSG_SIZE 512
#define npu_countof(a) (sizeof(a) / sizeof((a)[0]))

/* ---- context ---------------------------------------------------------- */

typedef struct npuC_pool npuC_pool; /* the device thread pool (core/pool.c) */

/* What a run watches to know it must stop (core/watch.c): the cancel counters of its session
   and context (npu_session_cancel / npu_context_cancel bump them: a run is cancelled when one
   differs from the value it had when the run began, so a cancel never outlives the run it was
   aimed at), deadlines and the host's interrupt poll.  One per session, armed for the duration
   of a run by the thread that runs; the pool's workers read it (deadlines and counters only,
   never the poll) through npuC_pool_set_watch. */
typedef enum npuC_stop {
  NPUC_GO = 0,
  NPUC_STOP_SESSION,  /* npu_session_cancel */
  NPUC_STOP_CONTEXT,  /* npu_context_cancel */
  NPUC_STOP_HOST,     /* the run options' interrupt poll */
  NPUC_STOP_DEADLINE, /* the run's timeout_in_ms */
  NPUC_STOP_OP        /* op_execute_timeout: the step running took too long */
} npuC_stop;

typedef struct npuC_watch {
  const atomic_uint *session_epoch, *context_epoch;
  unsigned session_start, context_start;
  int64_t deadline_ns;    /* CLOCK_MONOTONIC (npuC_now_ns); 0: none */
  int64_t op_deadline_ns; /* the running step's op_execute_timeout deadline; 0: none */
  int (*interrupt)(void *ud);
  void *interrupt_ud;
  int hold;               /* > 0: a step writing a variable runs; kernels finish it */
  atomic_int stopped;     /* npuC_stop, latched: the first reason wins */
} npuC_watch;

/* Monotonic time in nanoseconds. */
int64_t npuC_now_ns(void);
/* Whether the run must stop, from any thread (counters and deadlines; the latched reason is
   returned first).  NPUC_GO when w is NULL. */
npuC_stop npuC_watch_stopped(npuC_watch *w);
/* The same on the running thread, which also polls the host's interrupt. */
npuC_stop npuC_watch_check(npuC_watch *w);

/* Mixed computing: a TensorFlow op type the host implements (npu_context_register_host_op,
   io/graphdef.c) and the key its host_func nodes carry. */
#define NPUC_MAX_HOST_OPS 64
typedef struct npuC_host_op {
  char tf_type[64];
  int64_t key;
} npuC_host_op;

struct npu_context {
  atomic_int refcount;
  atomic_size_t live_bytes; /* atomic: tensors may be released from another thread */
  atomic_size_t peak_bytes;
  size_t memory_limit;
  atomic_long fail_after; /* test hook: >0 counts down to a failing allocation */
  npu_alloc_fn alloc;     /* the host's allocator (npu_context_config.alloc), or malloc's */
  void *alloc_ud;
  int n_devices;
  npu_log_fn log_fn;
  void *log_ud;
  npuC_pool *pool;
  int n_sessions;        /* sessions made so far: their ids in dumps and profiles (session.c) */
  int n_fusion_sessions; /* compile/fusion.c: sessions made so far, their ids in fusion_result.json */
  int n_graph_dumps;     /* compile/graph_dump.c: compilations dumped (DUMP_GE_GRAPH), their numbers */
  atomic_uint cancel_epoch; /* npu_context_cancel: see npuC_watch */
  atomic_bool pool_busy;    /* a run holds the pool (session.c: runs beside it go serial) */
  int n_host_ops;
  npuC_host_op host_ops[NPUC_MAX_HOST_OPS];
  char errmsg[NPU_ERRMSG_SIZE];
  /* the node the message is about when a run's step failed (npuC_error_node; npuC_error
     clears it), and its op's (static) name */
  char errnode[128];
  const char *errop;
};

/* Accounted allocation.  Each block carries its size in a small header, so npuC_free needs no
   size.  On failure the context's message says how many bytes were asked for. */
void *npuC_alloc(npu_context *ctx, size_t n);
void *npuC_calloc(npu_context *ctx, size_t count, size_t size);
/* Like realloc; on failure the old block is untouched and NULL is returned. */
void *npuC_realloc(npu_context *ctx, void *p, size_t n);
void npuC_free(npu_context *ctx, void *p);
char *npuC_strdup(npu_context *ctx, const char *s);

/* Sets the message (printf style) and returns `status`, so errors read
   `return npuC_error(ctx, NPU_ERR_SHAPE, "...", ...);`.  ctx may be NULL. */
npu_status npuC_error(npu_context *ctx, npu_status status, const char *fmt, ...) NPU_PRINTF(3, 4);
/* core/file.c: all of path in a new NUL-terminated block from ctx's allocator (*len bytes,
   len may be NULL); NPU_ERR_IO "cannot open <what> '<path>': <reason>" (what NULL: no message,
   for a file that may well be absent). */
npu_status npuC_read_file(npu_context *ctx, const char *path, const char *what, char **out,
                          size_t *len);
/* Opens path for reading when it is a regular file.  Model, weight and option files come from
   users: a FIFO must not block the host (opened non-blocking, checked before any read), a
   directory or a device is refused.  NULL on failure with *why the reason (strerror, or
   "not a regular file"). */
FILE *npuC_fopen_regular(const char *path, const char **why);
/* The start of a public loader fn (npu_tensor_load_npy, npu_safetensors_load) once its out-param
   is cleared: NPU_ERR_ARG for a NULL ctx or path, else path opened by npuC_fopen_regular into *f
   (NULL on failure), NPU_ERR_IO "<fn>: '<path>': <reason>" when it cannot be.  npuC_io_error
   sets that message for a later read's errno err. */
npu_status npuC_open_input(npu_context *ctx, const char *fn, const char *path, FILE **f);
npu_status npuC_io_error(npu_context *ctx, const char *fn, const char *path, int err);
/* core/file.c: creates the directories leading to path (mkdir -p of its dirname) /
   directory dir itself and those leading to it; NPU_ERR_IO "<what>: cannot create directory
   '<dir>': <reason>". */
npu_status npuC_make_parent_dirs(npu_context *ctx, const char *path, const char *what);
npu_status npuC_make_dirs(npu_context *ctx, const char *dir, const char *what);
/* A directory of this caller's alone: path itself when mkdir makes it, else path_1, path_2, ...
   (another session, context or process made the others); the one made in out (size bytes).
   The directories leading to path are made as needed. */
npu_status npuC_make_unique_dir(npu_context *ctx, const char *path, const char *what, char *out,
                                size_t size);
/* core/file.c: s as one CSV field (RFC 4180: quoted, quotes doubled, when it holds a comma,
   a quote or a line break) for the CSV files written (profiles, dump statistics). */
void npuC_csv_field(FILE *f, const char *s);
/* Records that the current error is about node `node` of op `op` (a static name), for
   npu_context_errnode; the message is unchanged.  The first one recorded since the message was
   set stays (the innermost step of a nested run). */
void npuC_error_node(npu_context *ctx, const char *node, const char *op);
/* Prefixes the current message: "while compiling 'x': <old message>". */
npu_status npuC_error_prefix(npu_context *ctx, npu_status status, const char *fmt, ...)
    NPU_PRINTF(3, 4);
void npuC_log(npu_context *ctx, int level, const char *fmt, ...) NPU_PRINTF(3, 4);

/* The pool as kernels see it (kernels/kernels.h: npuK_pool). */
struct npuK_pool;
const struct npuK_pool *npuC_kernel_pool(npu_context *ctx);

/* ---- tensors ----------------------------------------------------------- */

struct npu_tensor {
  atomic_int refcount;
  npu_dtype dtype;
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
  int64_t numel;
  size_t nbytes;
  void *data;        /* row-major elements; inside this block unless `base` is set */
  npu_context *ctx;  /* retained: the block is freed through it */
  npu_tensor *base;  /* retained owner of `data` for views made by npu_tensor_reshape */
  size_t mapped_bytes; /* > 0: `data` is a read-only file mapping of this length (npuT_map_file),
                          unmapped when the tensor dies; never written (a kernel never writes a
                          constant) */
};

/* Element count of a shape (dims already checked >= 0); -1 on overflow. */
int64_t npuT_numel(int ndim, const int64_t *shape);
/* Checks ndim and dims, naming `what` in the message. */
npu_status npuT_check_shape(npu_context *ctx, const char *what, int ndim, const int64_t *shape);
bool npuT_same_shape(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b);
/* Bool bytes read from a file as 0/1 (a file may hold any nonzero byte for true; kernels
   assume 0/1).  No-op for other dtypes. */
void npuT_canonical_bools(npu_tensor *t);
/* A tensor of dtype and shape whose elements are the first nbytes of the open file fd (path
   names it in messages), mapped read-only and shared (PROT_READ, MAP_SHARED): page-aligned,
   file-backed pages outside the context's accounted memory (only the tensor's header is
   accounted).  The mapping stays valid after fd is closed and the file unlinked, until the
   tensor's last release unmaps it.  NPU_ERR_IO "cannot map '<path>': <reason>"; nbytes 0 is
   NPU_ERR_ARG (there is nothing to map). */
npu_status npuT_map_file(npu_context *ctx, npu_dtype dtype, int ndim, const int64_t *shape,
                         int fd, const char *path, npu_tensor **out);

/* ---- graphs ------------------------------------------------------------- */

typedef struct npuG_attr {
  char *name;
  npu_attr_type type;
  union {
    int64_t i;
    double f;
    char *s;
    struct { int64_t *v; int n; } ints;
    struct { double *v; int n; } floats;
    npu_tensor *tensor;
  } u;
} npuG_attr;

/* What is known of a value: dtype and shape (-1 = unknown dim, ndim -1 = unknown rank). */
typedef struct npuG_value {
  int node, index;
  npu_dtype dtype;
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
} npuG_value;

/* Whether v's rank and every dimension are known (none is -1): its shape is fixed when the
   plan is compiled, not only when a step runs. */
bool npuG_value_known(const npuG_value *v);
/* Whether a shape of rank ndim fits `want`, a shape with -1 for what may vary (a while loop's
   shape invariant): a -1 dim on either side fits any, and so does a rank of -1. */
bool npuG_shape_fits(const npuG_value *want, int ndim, const int64_t *shape);

/* Parsed attributes, filled by the op's parse function; each op file asserts its params
   struct fits.  Plain bytes, so nodes copy with memcpy and need no per-op destructor. */
typedef union npuG_params {
  unsigned char bytes[256];
  int64_t align_i;
  double align_d;
  void *align_p;
} npuG_params;

typedef struct npuG_node {
  int op;   /* index into the op table */
  char *name;
  int n_inputs;
  int *inputs;   /* value ids, all produced by earlier nodes */
  int n_controls;
  int *controls; /* node ids of control dependencies, all earlier nodes */
  int n_outputs;
  int first_output; /* value ids first_output .. first_output + n_outputs - 1 */
  int n_attrs;
  npuG_attr *attrs;
  npuG_params params;
  bool keep_dtype; /* npu_graph_keep_dtype: precision modes leave the node in its graph dtypes */
  int region;      /* the region the node was built in (0: the graph's top level) */
} npuG_node;

/* Regions hold the nodes of a cond branch or a while loop's condition and body, built between
   npu_graph_region_begin and _end; the control node that runs them (op cond / while) names
   them in its attributes and is built after, in the parent region.  A node may read values of
   its own region and of the regions around it, never of one nested inside (except the control
   node, reading its regions' results) or of a sibling.  Ids start at 1; regions[id - 1]. */
typedef struct npuG_region {
  int parent; /* 0 = top level */
  int owner;  /* the control node running it, -1 until it is built */
  bool open;  /* between _begin and _end */
} npuG_region;

/* A variable of the graph: its node, its initializer node (-1: none yet), trainable. */
typedef struct npuG_variable {
  int node;
  int initializer;
  bool trainable;
} npuG_variable;

/* Node ids are a topological order: inputs and control dependencies always name earlier
   nodes.  Importers sort before adding. */
struct npu_graph {
  atomic_int refcount;
  npu_context *ctx;
  npuG_node *nodes;
  int n_nodes, cap_nodes;
  npuG_value *values;
  int n_values, cap_values;
  int *name_slots; /* open-addressing hash of node names -> node id + 1 (0 = empty) */
  int n_name_slots;
  /* The variables (npu_graph_variable_info), in creation order: registered by npuX_add_op
     when a variable node is appended, their initializer when its assign is. */
  npuG_variable *variables;
  int n_variables, cap_variables;
  /* Datasets the graph's iterator_get_next nodes read (attribute dataset = index here):
     npu_dataset handles, retained by npu_graph_add_dataset (exec/dataset.c) and dropped on the
     graph's release through dataset_release, so this layer needs nothing of the exec layer. */
  void **datasets;
  int n_datasets;
  void (*dataset_release)(void *dataset);
  /* set_graph_exec_config (compile/exec_config.c): how many nodes carry a graph-level config
     (0 lets a compile skip looking), and a count of changes, so a session sees its plans and
     configs are stale with one comparison per run. */
  int n_exec_configs;
  unsigned exec_config_epoch;
  npuG_region *regions;
  int n_regions, cap_regions;
  int cur_region; /* where npuG_append puts new nodes */
  /* Runs executing on the graph now (npuE_run, counted by the session): while any is, nodes,
     control edges and datasets cannot be added — a host or progress function doing so would
     move the arrays the run is reading (npuG_check_growable refuses). */
  atomic_int n_running;
};

/* NPU_ERR_STATE naming `what` (the node or edge being added) while a run executes on g. */
npu_status npuG_check_growable(npu_graph *g, const char *what);

/* Whether region `inner` is `outer` or nested in it (any depth). */
bool npuG_region_within(const npu_graph *g, int inner, int outer);

int npuG_find_node(const npu_graph *g, const char *name);
/* Variables (graph.c).  npuX_add_op reserves room before appending a variable node (so the
   registration after the append cannot fail), then registers it; an assign node is offered
   to npuG_note_assign, which makes it the initializer of the variable it writes when it is
   named "<variable>/Assign" and the variable has none. */
npu_status npuG_reserve_variable(npu_graph *g);
void npuG_register_variable(npu_graph *g, int node, bool trainable);
void npuG_note_assign(npu_graph *g, int node);
/* Appends a node whose fields (except name, which is copied and uniquified) were prepared by
   the caller; takes ownership of node->inputs/controls/attrs on success only. */
npu_status npuG_append(npu_graph *g, npuG_node *node, const char *name, const char *default_name,
                       const npuG_value *outputs);
void npuG_free_attrs(npu_context *ctx, npuG_attr *attrs, int n);
/* Removes the nodes with ids >= n_nodes and their values (undoing a failed multi-node build,
   e.g. npu_graph_gradients); nothing earlier may refer to them. */
void npuG_truncate(npu_graph *g, int n_nodes);
/* Attribute access for op parse functions: return 1 and set *v when present with that type,
   0 when absent; -1 (with the message set) when present with another type. */
const npuG_attr *npuG_attr_find(const npuG_node *node, const char *name);

/* ---- random (core/random.c) ---------------------------------------------- */

/* n elements of float dtype at data from the generator of npu_tensor_random_uniform (normal
   false: uniform in [a, b)) or npu_tensor_random_normal (normal: mean a, stddev b), seeded by
   seed: the same values those functions give. */
void npuC_random_fill(bool normal, npu_dtype dtype, int64_t n, double a, double b,
                      uint64_t seed, void *data);
/* The seed of draw number `counter` of a stateful random op seeded by seed: seed itself for
   draw 0, else seed ^ splitmix64(counter) (the SplitMix64 step of the header of random.c
   applied once to x = counter). */
uint64_t npuC_random_stream_seed(uint64_t seed, uint64_t counter);
/* The generator itself (SplitMix64 seeding a xoshiro256** stream, as the header of random.c
   specifies), for other seeded consumers (dataset shuffles): the same numbers on every
   machine. */
typedef struct npuC_rng {
  uint64_t s[4];
} npuC_rng;
void npuC_rng_seed(npuC_rng *r, uint64_t seed);
uint64_t npuC_rng_next(npuC_rng *r);

/* ---- small helpers ---------------------------------------------------- */

/* Levenshtein distance, for "did you mean" suggestions. */
int npuC_edit_distance(const char *a, const char *b);
/* THE "did you mean" rule, used for every unknown name (ops, options, attributes, fields,
   passes, node names): feed the candidates to npuC_nearest_try, then npuC_nearest_result is
   the closest one, or NULL when none is close.  Close: equal ignoring case, containing the
   name (of 3+ characters: "cache_dir" -> "graph_compiler_cache_dir"), or at most
   max(2, strlen(name) / 2) edits away.  The Lua side uses the same rule (core.nearest).
   The rule is public (npu_nearest in npu.h, for hosts); these names are the core's. */
typedef npu_nearest npuC_nearest;
#define npuC_nearest_init npu_nearest_init
#define npuC_nearest_try npu_nearest_try
#define npuC_nearest_result npu_nearest_result
/* FNV-1a of a string, for open-addressing name indexes (graphs, the readers of option files). */
static inline uint32_t npuC_hash_str(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}
/* Formats a shape as "[2,3,-1]" into buf (always terminated). */
const char *npuC_shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

#endif
