/*
 * npu.h — the public C API of lua-npu.
 *
 * An NPU *session* in the sense of TensorFlow's Ascend adapter: build a graph, configure a
 * session with typed options, run it on a device, fetch tensors.  The device here is the
 * library's own execution engine on the CPU.
 *
 * Conventions (the header is the manual):
 *  - Every handle is opaque and reference counted.  `_new` returns an owned reference; `_retain`
 *    adds one; `_release` drops one and frees on the last; `_release(NULL)` is a no-op.
 *  - Every call that can fail returns an npu_status.  The detail is in the context's message
 *    slot (npu_context_errmsg).  A failing call changes nothing and sets its out-params to NULL
 *    (or -1 for ids).
 *  - Inputs are never consumed: a function that keeps a handle retains it.  Outputs belong to
 *    the caller.
 *  - Threads: a context and everything created from it are used by one thread at a time.
 *    Separate contexts may run in parallel.  Reference counts are atomic, so a tensor may be
 *    shared read-only between contexts.
 *  - Nothing in the library prints, exits or aborts.
 */
#ifndef NPU_H
#define NPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(NPU_BUILD) && defined(__GNUC__)
#define NPU_API __attribute__((visibility("default")))
#else
#define NPU_API
#endif

/* The library's version (semantic versioning: MAJOR changes break the ABI, and name the
   shared library's SONAME, libnpu.so.MAJOR).  npu_version() is the library's at run time; a
   host compares it with the header's NPU_VERSION_NUMBER to catch a mismatched install. */
#define NPU_VERSION_MAJOR 0
#define NPU_VERSION_MINOR 1
#define NPU_VERSION_PATCH 0
#define NPU_VERSION_NUMBER (NPU_VERSION_MAJOR * 10000 + NPU_VERSION_MINOR * 100 + NPU_VERSION_PATCH)

/* NPU_VERSION_NUMBER of the library linked in (1.2.3 is 10203). */
NPU_API int npu_version(void);
/* "0.1.0": the library's version as text; static storage. */
NPU_API const char *npu_version_string(void);

#define NPU_MAX_DIMS 8

/* ---------------------------------------------------------------- status */

typedef enum npu_status {
  NPU_OK = 0,
  NPU_ERR_NOMEM,        /* an allocation failed (or the memory pool limit was hit) */
  NPU_ERR_ARG,          /* a bad argument: NULL, out of range, malformed */
  NPU_ERR_DTYPE,        /* a dtype an op or a feed does not accept */
  NPU_ERR_SHAPE,        /* incompatible or impossible shapes */
  NPU_ERR_OPTION,       /* unknown option, wrong value type, value out of range */
  NPU_ERR_CONFLICT,     /* options that cannot be combined, or a missing companion option */
  NPU_ERR_NOT_FOUND,    /* unknown node, tensor name, op type */
  NPU_ERR_STATE,        /* use after close, uninitialised variable, wrong graph */
  NPU_ERR_IO,           /* a file could not be read or written */
  NPU_ERR_FORMAT,       /* a file's contents are not what its format requires */
  NPU_ERR_UNSUPPORTED,  /* valid request this device cannot do */
  NPU_ERR_OUT_OF_RANGE, /* end of data */
  NPU_ERR_CALLBACK,     /* a host callback failed */
  NPU_ERR_INTERNAL,     /* a bug: please report */
  NPU_ERR_CANCELLED,    /* the run was cancelled (npu_session_cancel, npu_context_cancel, the
                           host's interrupt poll) */
  NPU_ERR_TIMEOUT,      /* a deadline passed: the run's timeout_in_ms, op_execute_timeout,
                           op_wait_timeout (TensorFlow's DeadlineExceeded) */
  NPU_STATUS_COUNT
} npu_status;

/* "NPU_OK", "NPU_ERR_SHAPE", ...; static storage. */
NPU_API const char *npu_status_name(npu_status s);

/* ---------------------------------------------------------------- dtypes */

typedef enum npu_dtype {
  NPU_DTYPE_F32 = 0,
  NPU_DTYPE_F16 = 1,
  NPU_DTYPE_BF16 = 2,
  NPU_DTYPE_F64 = 3,
  NPU_DTYPE_I8 = 4,
  NPU_DTYPE_U8 = 5,
  NPU_DTYPE_I32 = 6,
  NPU_DTYPE_I64 = 7,
  NPU_DTYPE_BOOL = 8,
  NPU_DTYPE_COUNT
} npu_dtype;

/* "float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64", "bool". */
NPU_API const char *npu_dtype_name(npu_dtype t);
/* Parses the names above (and "float"/"double"/"half"); returns -1 when unknown. */
NPU_API int npu_dtype_from_name(const char *name);
NPU_API size_t npu_dtype_size(npu_dtype t);
/* Converts n elements of dtype `from` at src into dtype `to` at dst (the conversions of
   npu_tensor_cast: floats to integers truncate toward zero and saturate, anything nonzero is
   true, half types round to nearest even).  src and dst must not overlap unless equal with
   from == to.  Errors: NPU_ERR_DTYPE (a dtype out of range), NPU_ERR_ARG (n < 0, or NULL
   pointers with n > 0); nothing is written then.  Needs no context: safe from any thread. */
NPU_API npu_status npu_dtype_convert(npu_dtype from, const void *src, npu_dtype to, void *dst,
                                     int64_t n);

/* Formats a shape as "[2,3,-1]" (ndim < 0: "<unknown rank>") into buf of `size` bytes, always
   terminated (truncated when short); returns buf.  For a host's messages: the library's own
   read the same. */
NPU_API const char *npu_shape_format(char *buf, size_t size, int ndim, const int64_t *shape);

/* "Did you mean": the one rule the library uses for every unknown name (ops, options,
   attributes, node names), for hosts that check names of their own.  Feed the candidates to
   npu_nearest_try, then npu_nearest_result is the closest, or NULL when none is close.
   Close: equal ignoring case, containing the name (of 3+ characters), or at most
   max(2, strlen(name) / 2) edits away.  The struct lives on the caller's stack; it borrows
   name and the candidates (they must outlive the result's use).  No allocation, no context. */
typedef struct npu_nearest {
  const char *name;
  const char *best;
  int best_d;
} npu_nearest;
NPU_API void npu_nearest_init(npu_nearest *n, const char *name);
NPU_API void npu_nearest_try(npu_nearest *n, const char *candidate);
NPU_API const char *npu_nearest_result(const npu_nearest *n);

/* ---------------------------------------------------------------- context */

typedef struct npu_context npu_context;

/* A host allocator, with lua_Alloc's signature and contract: nsize 0 frees ptr (osize its
   size) and returns NULL; otherwise it returns a block of nsize bytes (ptr NULL: a new block;
   else ptr resized, its contents kept), or NULL when it cannot (ptr then untouched).  A host
   embedding Lua may pass the allocator of its lua_State (lua_getallocf). */
typedef void *(*npu_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);

typedef struct npu_context_config {
  int n_threads;          /* worker threads of the device pool; 0 = number of CPUs */
  int n_devices;          /* virtual devices (valid session_device_id values); 0 = 8 */
  size_t memory_limit;    /* bytes the context may hold at once; 0 = unlimited */
  /* NULL: the C library's malloc/free.  Else every byte of the context goes through
     alloc(alloc_ud, ...): the context itself, tensors, graphs, plans, run buffers.  The
     accounting (live/peak bytes, memory_limit, npu_context_fail_after) applies on top; each
     block asks the allocator for 16 bytes more than the library uses.  alloc may be called
     from any thread that uses the context or releases a tensor of it, and from the device's
     threads during a run (a dataset's producer thread never allocates): it must be
     thread-safe when the host does those things from several threads.  The device thread
     pool's own bookkeeping (threads, their stacks) is the one thing allocated outside it. */
  npu_alloc_fn alloc;
  void *alloc_ud;
} npu_context_config;

typedef void (*npu_log_fn)(void *ud, int level, const char *message);

/* Creates a context: allocator with accounting, the message slot, the device thread pool.
   cfg may be NULL for defaults.  Errors: NPU_ERR_ARG (negative counts), NPU_ERR_NOMEM (the
   allocator refused the context, or the pool's threads could not be started).  Owned by the caller.
   Process-wide effect: OpenBLAS is set to one thread (openblas_set_num_threads(1)); the device
   parallelises GEMM over its own pool, which is what makes results independent of the thread
   count.  A host that calls OpenBLAS itself and wants its threads back sets them afterwards. */
NPU_API npu_status npu_context_new(const npu_context_config *cfg, npu_context **out);
NPU_API npu_context *npu_context_retain(npu_context *ctx);
NPU_API void npu_context_release(npu_context *ctx);
/* The message of the last failing call on this context; borrowed, valid until the next call. */
NPU_API const char *npu_context_errmsg(const npu_context *ctx);
/* The node the last failing call's error is about, when that was a step of a run (a kernel
   that failed, such as an integer division by zero): its name, and in *op (op may be NULL)
   its op's name; NULL (and *op NULL) for any other error.  Borrowed, valid until the next call
   on ctx.  The Lua binding puts them in the error object's node and op fields. */
NPU_API const char *npu_context_errnode(const npu_context *ctx, const char **op);
/* Bytes currently allocated through this context (tensors, graphs, plans, ...). */
NPU_API size_t npu_context_live_bytes(const npu_context *ctx);
/* Highest value live_bytes has reached. */
NPU_API size_t npu_context_peak_bytes(const npu_context *ctx);
/* The bound on live_bytes (npu_context_config.memory_limit), in bytes; 0 = unlimited.  Set,
   it applies to the allocations from then on: one that would take live_bytes past it fails
   with NPU_ERR_NOMEM, the message naming the request, the bytes in use and the limit (a run
   needing more fails so, and the session stays usable).  A limit below the bytes in use now is
   refused (NPU_ERR_ARG, naming both; the limit is unchanged): memory already held is never
   taken back.  One thread at a time, as the context's other calls; not during a run of it. */
NPU_API npu_status npu_context_set_memory_limit(npu_context *ctx, size_t bytes);
NPU_API size_t npu_context_memory_limit(const npu_context *ctx);
/* Threads the device uses now (at most the pool's size). */
NPU_API int npu_context_n_threads(const npu_context *ctx);
/* Uses n threads from now on (1..pool size; other values: the whole pool).  Results do not
   depend on it: kernels split work only where the split cannot change a result. */
NPU_API void npu_context_set_n_threads(npu_context *ctx, int n);
NPU_API int npu_context_n_devices(const npu_context *ctx);
/* Log hook (level: 0 debug, 1 info, 2 warning, 3 error); fn NULL removes it. */
NPU_API void npu_context_set_log(npu_context *ctx, npu_log_fn fn, void *ud);
/* Cancels the run in progress of every session of ctx (see npu_session_cancel).  Callable from
   any thread, also while ctx is in use by another; the caller must hold a reference to ctx. */
NPU_API void npu_context_cancel(npu_context *ctx);
/* Test hook: make the n-th allocation from now fail (1 = the next one); 0 disables. */
NPU_API void npu_context_fail_after(npu_context *ctx, long n);
/* Frees memory the library handed to the caller (npu_session_explain's text) on ctx, the
   context it came from; p NULL is a no-op. */
NPU_API void npu_free(npu_context *ctx, void *p);

/* ---------------------------------------------------------------- tensors */

typedef struct npu_tensor npu_tensor;

/* A new zero-filled tensor.  ndim in [0, NPU_MAX_DIMS], dims >= 0.  Owned by the caller. */
NPU_API npu_status npu_tensor_new(npu_context *ctx, npu_dtype dtype, int ndim,
                                  const int64_t *shape, npu_tensor **out);
/* A new tensor holding a copy of `nbytes` bytes of data (nbytes must match the shape). */
NPU_API npu_status npu_tensor_from_data(npu_context *ctx, npu_dtype dtype, int ndim,
                                        const int64_t *shape, const void *data, size_t nbytes,
                                        npu_tensor **out);
/* A new tensor converting src to dtype (floats to ints truncate toward zero). */
NPU_API npu_status npu_tensor_cast(npu_context *ctx, const npu_tensor *src, npu_dtype dtype,
                                   npu_tensor **out);
/* A new tensor sharing src's data with another shape of the same element count. */
NPU_API npu_status npu_tensor_reshape(npu_context *ctx, npu_tensor *src, int ndim,
                                      const int64_t *shape, npu_tensor **out);
NPU_API npu_tensor *npu_tensor_retain(npu_tensor *t);
NPU_API void npu_tensor_release(npu_tensor *t);
NPU_API npu_dtype npu_tensor_dtype(const npu_tensor *t);
NPU_API int npu_tensor_ndim(const npu_tensor *t);
/* Borrowed, valid while t lives. */
NPU_API const int64_t *npu_tensor_shape(const npu_tensor *t);
NPU_API int64_t npu_tensor_numel(const npu_tensor *t);
NPU_API size_t npu_tensor_nbytes(const npu_tensor *t);
/* Borrowed pointer to the row-major element data, valid while t lives.  Tensors handed out by
   the library may be shared: write only into tensors you created and have not shared. */
NPU_API void *npu_tensor_data(const npu_tensor *t);
/* Element i (row-major) converted to double. */
NPU_API double npu_tensor_get(const npu_tensor *t, int64_t i);

/* Seeded random tensors (float dtypes).  The generator is specified exactly (SplitMix64 seeding
   a xoshiro256** stream; uniform doubles from the top 53 bits; normals by the Box-Muller
   transform in double precision), so a seed gives the same values on every machine. */
NPU_API npu_status npu_tensor_random_uniform(npu_context *ctx, npu_dtype dtype, int ndim,
                                             const int64_t *shape, double low, double high,
                                             uint64_t seed, npu_tensor **out);
NPU_API npu_status npu_tensor_random_normal(npu_context *ctx, npu_dtype dtype, int ndim,
                                            const int64_t *shape, double mean, double stddev,
                                            uint64_t seed, npu_tensor **out);

/* .npy files (NumPy format 1.0/2.0, little-endian, C order; float16 included). */
NPU_API npu_status npu_tensor_load_npy(npu_context *ctx, const char *path, npu_tensor **out);
NPU_API npu_status npu_tensor_save_npy(npu_context *ctx, const npu_tensor *t, const char *path);

/* ---------------------------------------------------------------- options */

typedef struct npu_options npu_options;

typedef enum npu_option_type {
  NPU_OPTION_INT = 0,    /* parameter_map[...].i */
  NPU_OPTION_STRING = 1, /* parameter_map[...].s */
  NPU_OPTION_BOOL = 2,   /* parameter_map[...].b */
  NPU_OPTION_FLOAT = 3   /* parameter_map[...].f */
} npu_option_type;

typedef struct npu_option_info {
  const char *name;
  npu_option_type type;
  const char *default_value; /* as text; "" when the option has no default */
  const char *allowed;       /* allowed values ("0|1|2"), a range ("[0, 7]") or "any" */
  const char *scenario;      /* "Training", "Online inference", "Training/Online inference" */
  const char *section;       /* the section of the reference option list */
  const char *effect;        /* what setting it does in this implementation */
  int deprecated;
  const char *example;       /* a valid value (the reference's configuration example) */
} npu_option_info;

/* Every option the reference defines, in table order; static storage. */
NPU_API int npu_option_count(void);
NPU_API const npu_option_info *npu_option_at(int i);
/* NULL when unknown. */
NPU_API const npu_option_info *npu_option_find(const char *name);
/* The known option name nearest to `name` (for "did you mean"), or NULL when none is close.
   Static storage. */
NPU_API const char *npu_option_suggest(const char *name);

/* The environment variables npu_options_apply_env reads, in table order; static storage.
   `option` is the option the variable stands for, or NULL for an environment-only setting
   (kept beside the options, never settable through a setter). */
typedef struct npu_option_env_info {
  const char *variable; /* "ASCEND_DEVICE_ID" */
  const char *option;   /* "session_device_id", or NULL */
  npu_option_type type; /* how the value is parsed (a BOOL reads "true"/"false") */
  const char *allowed;
  const char *effect;
} npu_option_env_info;
NPU_API int npu_option_env_count(void);
NPU_API const npu_option_env_info *npu_option_env_at(int i);

/* The cross-option rules npu_options_check applies, in table order; static storage.
   kind: "exclusive" (a and b cannot be used together), "requires" (a needs b), "together"
   (a and b must be set together), "match" (a and b must agree), "env-exclusive" (variable a
   cannot be used with option b), "precedence" (not an error: a wins and b is ignored) and
   "note" (stated by the reference, not checkable here; documented only).
   Each side is an option (or variable) name, a condition ("set", "set explicitly", "true",
   "in", "not in", "effective in" (the default counts), "json field") and the condition's values ("a|b";
   for "json field", "field=value").  `guard` (NULL when none) limits the rule to sessions
   where the guard condition holds. */
typedef struct npu_option_rule_info {
  const char *kind;
  const char *a, *a_when, *a_values;
  const char *b, *b_when, *b_values;
  const char *guard, *guard_when, *guard_values;
  const char *reason; /* what the reference says */
} npu_option_rule_info;
NPU_API int npu_option_rule_count(void);
NPU_API const npu_option_rule_info *npu_option_rule_at(int i);

/* A set of option values (all unset: defaults apply).  Owned by the caller. */
NPU_API npu_status npu_options_new(npu_context *ctx, npu_options **out);
NPU_API npu_status npu_options_copy(const npu_options *src, npu_options **out);
NPU_API void npu_options_release(npu_options *o);
/* Typed setters: the wrong setter for the option's type, an unknown name (the message suggests
   the nearest known one) or a value outside the allowed set fail with NPU_ERR_OPTION and leave
   the set unchanged. */
NPU_API npu_status npu_options_set_int(npu_options *o, const char *name, int64_t v);
NPU_API npu_status npu_options_set_string(npu_options *o, const char *name, const char *v);
NPU_API npu_status npu_options_set_bool(npu_options *o, const char *name, int v);
NPU_API npu_status npu_options_set_float(npu_options *o, const char *name, double v);
/* 1 when the option was set explicitly (by a setter or the environment). */
NPU_API int npu_options_is_set(const npu_options *o, const char *name);
/* Typed getters: the value set, else the default.  Strings are borrowed, valid until the next
   set of that option.  Fail with NPU_ERR_OPTION for an unknown name or the wrong type. */
NPU_API npu_status npu_options_get_int(const npu_options *o, const char *name, int64_t *v);
NPU_API npu_status npu_options_get_string(const npu_options *o, const char *name,
                                          const char **v);
NPU_API npu_status npu_options_get_bool(const npu_options *o, const char *name, int *v);
NPU_API npu_status npu_options_get_float(const npu_options *o, const char *name, double *v);
/* Overlay the environment variables that stand for options (ASCEND_DEVICE_ID, PROFILING_MODE,
   ...), with the reference's precedence: an option set explicitly wins over its variable.
   getenv_fn(name, ud) returns the variable's value or NULL; pass NULL to use getenv().  An
   empty value counts as unset.  An invalid value fails with NPU_ERR_OPTION naming the variable
   and changes nothing.  Each call replaces what an earlier call took from the environment.
   The environment-only variables (npu_option_env_at(i)->option == NULL) are kept too. */
NPU_API npu_status npu_options_apply_env(npu_options *o,
                                         const char *(*getenv_fn)(const char *, void *),
                                         void *ud);
/* Cross-option rules ("cannot be used together", "requires", ...): NPU_ERR_CONFLICT naming
   both options.  Also checks session_device_id (set or from ASCEND_DEVICE_ID) against
   npu_context_n_devices of the options' context: NPU_ERR_OPTION.  Rules of precedence are
   not errors: they send a warning to the context's log hook.  Run when a session is created,
   after npu_options_apply_env. */
NPU_API npu_status npu_options_check(const npu_options *o);

/* ---------------------------------------------------------------- graphs */

typedef struct npu_graph npu_graph;

/* Values (op outputs) and nodes are small integers, stable for the life of the graph. */
typedef enum npu_attr_type {
  NPU_ATTR_INT, NPU_ATTR_FLOAT, NPU_ATTR_BOOL, NPU_ATTR_STRING,
  NPU_ATTR_INTS, NPU_ATTR_FLOATS, NPU_ATTR_TENSOR, NPU_ATTR_DTYPE
} npu_attr_type;

typedef struct npu_attr {
  const char *name;
  npu_attr_type type;
  union {
    int64_t i;                                     /* INT, BOOL (0/1), DTYPE */
    double f;                                      /* FLOAT */
    const char *s;                                 /* STRING */
    struct { const int64_t *v; int n; } ints;      /* INTS */
    struct { const double *v; int n; } floats;    /* FLOATS */
    npu_tensor *tensor;                            /* TENSOR (retained by the graph) */
  } u;
} npu_attr;

NPU_API npu_status npu_graph_new(npu_context *ctx, npu_graph **out);
NPU_API npu_graph *npu_graph_retain(npu_graph *g);
NPU_API void npu_graph_release(npu_graph *g);

/* Adds a node running `op` (an op table name: "matmul", "placeholder", ...).  name NULL gives
   the op's TensorFlow-style default ("MatMul", then "MatMul_1", ...); a taken name is made
   unique the same way.  Shapes and dtypes are inferred now: an impossible op fails with
   NPU_ERR_SHAPE/NPU_ERR_DTYPE naming the op and the shapes, and adds nothing.
   On success *node_out is the node id and its outputs are npu_graph_output(g, node, i).
   While a session's run executes on g (a host op or progress callback calling back), nodes,
   control edges and datasets cannot be added: NPU_ERR_STATE. */
NPU_API npu_status npu_graph_add_op(npu_graph *g, const char *op, const char *name,
                                    int n_inputs, const int *inputs, int n_attrs,
                                    const npu_attr *attrs, int *node_out);
/* Makes `node` run after `dep` (a control dependency, TensorFlow's ^dep). */
NPU_API npu_status npu_graph_add_control(npu_graph *g, int node, int dep);
/* Control flow: the nodes of a cond branch, or of a while loop's condition and body, are built
   inside a region.  _begin opens a region nested in the current one (*region its id, > 0) and
   makes it current: nodes added until the matching _end belong to it.  They may read values
   of their own region and of the regions around it (a branch reads outer tensors directly).
   The cond / while node that runs the region is added after _end, in the parent region, with
   the region ids as attributes (docs/dynamic.md).  NPU_ERR_STATE when `region` is not the
   current one; NPU_ERR_NOMEM.  npu_graph_region: the current region (0: top level);
   npu_graph_node_region: the node's, -1 for no such node. */
NPU_API npu_status npu_graph_region_begin(npu_graph *g, int *region);
NPU_API npu_status npu_graph_region_end(npu_graph *g, int region);
NPU_API int npu_graph_region(const npu_graph *g);
NPU_API int npu_graph_node_region(const npu_graph *g, int node);

/* Graph-level options (set_graph_exec_config, 002 §7.3; ExperimentalConfig, 004): node carries
   the options set in overlay (those set by a setter; NULL clears), replacing what it carried.
   A session run whose nodes (fetches, targets and what they depend on, up to the feeds)
   include it compiles with the session's options with these on top (graph level wins),
   checked by npu_options_check's rules when that run is first compiled; two nodes of one run
   with different configs fail that run with NPU_ERR_CONFLICT naming both.  Only these options
   may be set per graph: graph_run_mode (is_train_graph: 1 training, 0 inference),
   dynamic_input, dynamic_graph_execute_mode, dynamic_inputs_shape_range,
   graph_compiler_cache_dir, accelerate_train_mode; another is NPU_ERR_OPTION naming it.  They
   are kept as node attributes "_is_train_graph" (bool) and "_graph_<option>", which
   npu_graph_export_graphdef writes and the importer reads back.  Sessions over g recompile
   after a change.  Errors: NPU_ERR_ARG (no such node), NPU_ERR_OPTION, NPU_ERR_NOMEM (g
   unchanged).  overlay is only read. */
NPU_API npu_status npu_graph_set_exec_config(npu_graph *g, int node, const npu_options *overlay);
/* A new set of options (owned by the caller) holding node's graph-level options, or *out NULL
   when it carries none.  Errors: NPU_ERR_ARG, NPU_ERR_NOMEM. */
NPU_API npu_status npu_graph_get_exec_config(const npu_graph *g, int node, npu_options **out);

/* keep_tensors_dtypes (002 §7.2): the node producing `value` keeps the dtypes of the graph
   under every precision mode (it computes as under must_keep_origin_dtype; gray-list ops fed
   by it in the mixed modes stay float32 too, as after a block-list op).  Mark before the first
   run: a plan a session compiled earlier keeps its dtypes.  Marking twice is harmless.
   Errors: NPU_ERR_ARG (NULL graph, value not in g). */
NPU_API npu_status npu_graph_keep_dtype(npu_graph *g, int value);
/* 1 when the node was marked by npu_graph_keep_dtype, 0 otherwise (or no such node). */
NPU_API int npu_graph_keeps_dtype(const npu_graph *g, int node);

NPU_API int npu_graph_n_nodes(const npu_graph *g);
NPU_API int npu_graph_n_values(const npu_graph *g);
/* Value id of output i of node, or -1. */
NPU_API int npu_graph_output(const npu_graph *g, int node, int i);
NPU_API int npu_graph_n_outputs(const npu_graph *g, int node);
NPU_API int npu_graph_n_inputs(const npu_graph *g, int node);
NPU_API int npu_graph_input(const npu_graph *g, int node, int i);
/* Borrowed strings, valid while g lives. */
NPU_API const char *npu_graph_node_name(const npu_graph *g, int node);
NPU_API const char *npu_graph_node_op(const npu_graph *g, int node);
/* Node id by name, or -1. */
NPU_API int npu_graph_find_node(const npu_graph *g, const char *name);
/* Value id for "name:i" (or "name", meaning output 0); NPU_ERR_NOT_FOUND otherwise. */
NPU_API npu_status npu_graph_find_value(const npu_graph *g, const char *tensor_name, int *value);
NPU_API int npu_graph_value_node(const npu_graph *g, int value);
NPU_API int npu_graph_value_index(const npu_graph *g, int value);
NPU_API npu_dtype npu_graph_value_dtype(const npu_graph *g, int value);
/* Shape with -1 for unknown dims; ndim -1 when even the rank is unknown.  Borrowed. */
NPU_API int npu_graph_value_ndim(const npu_graph *g, int value);
NPU_API const int64_t *npu_graph_value_shape(const npu_graph *g, int value);

/* Reverse-mode gradients as new nodes of g (tf.gradients): dx_out[i] receives the value id of
   d(sum of ys)/d(xs[i]), or -1 when xs[i] does not affect the ys (or is not a float value).
   grad_ys (NULL: ones of each y's shape; an entry -1: ones for that y) are the upstream
   gradients, of the ys' dtypes and shapes.  Gradients reaching a value from several consumers
   are summed; integer values carry no gradient; stop_gradient stops it.  Nodes are named
   "gradients/<node>_grad/<Op>".  Gradients flow through cond and while nodes (to the values
   their regions read from around them and a loop's initial values): the gradient of a cond
   is a cond over the same pred; that of a while loop a recording loop (the forward loop again,
   stacking the variables' values per iteration) and a backward loop over the iterations in
   reverse; both recompute the region's nodes in regions of their own (docs/dynamic.md,
   "Gradients").  The walk covers the nodes of the current region and of the regions around
   it.  Errors: NPU_ERR_ARG (ids not of g), NPU_ERR_DTYPE / NPU_ERR_SHAPE (a grad_ys entry not
   matching its y), NPU_ERR_UNSUPPORTED (an op on the path without a gradient, naming it, inside
   a region too; a broadcast that cannot be undone for lack of a rank; a node of a region that
   cannot be recomputed (placeholder, variable, assign, iterator, random op); a loop variable
   that is a TensorArray), NPU_ERR_NOMEM.  On failure g is left exactly as it was and every dx_out[i] is -1.
   Thread rules: those of g's context. */
NPU_API npu_status npu_graph_gradients(npu_graph *g, int n_ys, const int *ys, const int *grad_ys,
                                       int n_xs, const int *xs, int *dx_out);

/* ---------------------------------------------------------------- variables */

/* Variables are graph state (TensorFlow's VariableV2): a "variable" node whose value lives in
   each session, set by its initializer (an "assign" node).  The graph keeps the list of its
   variables, in creation order, whoever built them: every "variable" node added (by
   npu_graph_add_op, npu_graph_add_variable, the Lua binding or an importer reading VariableV2
   nodes) is registered, and an "assign" node named "<variable's name>/Assign" writing it
   becomes its initializer (TensorFlow's naming, so imported .pb graphs find theirs).  A graph
   built in C, imported or built in Lua therefore lists the same variables.  SavedModel import
   freezes variables into constants by default (such graphs have none); with
   npu_savedmodel_options.variables it keeps them variables, registered the same way.
   Trainable: float variables are by default (optimizers' default var_list), others not;
   npu_graph_set_variable_trainable changes it (optimizer slots, moving statistics).
   Thread rules: those of g's context; the info is borrowed, valid until g changes. */
typedef struct npu_variable_info {
  int node;        /* the variable node */
  int value;       /* its value id (what sessions fetch and assigns write) */
  int initializer; /* the initializer node (assign), -1 when it has none */
  int trainable;   /* 1 or 0 */
  const char *name;     /* the node's name, borrowed */
  npu_dtype dtype;
  int ndim;
  const int64_t *shape; /* borrowed */
} npu_variable_info;
/* A variable named `name` (NULL: "Variable"; made unique as every node name) of the dtype and
   fully known shape of value `initial_value`, and its initializer "<name>/Assign" writing that
   value into it.  *value_out receives the variable's value id.  Errors: NPU_ERR_ARG (a bad
   id, an invalid name, an initial value whose shape is not fully known: named, with its
   shape), NPU_ERR_NOMEM; on failure g is unchanged and *value_out is -1. */
NPU_API npu_status npu_graph_add_variable(npu_graph *g, const char *name, int initial_value,
                                          int *value_out);
/* How many variables g has (0 for NULL). */
NPU_API int npu_graph_n_variables(const npu_graph *g);
/* Variable i (creation order, 0 <= i < npu_graph_n_variables).  Errors: NPU_ERR_ARG (i out of
   range, NULL; *out is zeroed, its ids -1). */
NPU_API npu_status npu_graph_variable_info(const npu_graph *g, int i, npu_variable_info *out);
/* The index of the variable whose node is `node`, or -1 when it is none. */
NPU_API int npu_graph_find_variable(const npu_graph *g, int node);
/* Marks variable i trainable (1) or not (0).  Errors: NPU_ERR_ARG (i out of range). */
NPU_API npu_status npu_graph_set_variable_trainable(npu_graph *g, int i, int trainable);
/* A "no_op" node named `name` (NULL: "init") with a control dependency on every variable's
   initializer (tf.global_variables_initializer): run it as a target once per session before
   reading the variables.  Errors: NPU_ERR_ARG (invalid name), NPU_ERR_NOMEM; on failure g is
   unchanged and *node_out is -1. */
NPU_API npu_status npu_graph_add_variables_initializer(npu_graph *g, const char *name,
                                                       int *node_out);

/* Ops of the op table, for tools and documentation; static storage. */
NPU_API int npu_op_count(void);
NPU_API const char *npu_op_name(int i);

/* What the op table says of op i (0 <= i < npu_op_count()), for hosts that build graphs
   generically as the Lua binding does (its convenience methods are made from this table). */
typedef enum npu_op_kind {
  NPU_OP_KIND_KERNEL = 0, /* computed by a kernel from its inputs */
  NPU_OP_KIND_PLACEHOLDER, /* output = the fed tensor */
  NPU_OP_KIND_CONST,       /* output = attribute "value" */
  NPU_OP_KIND_VARIABLE,    /* output = the session's value of the variable */
  NPU_OP_KIND_ASSIGN,      /* copies input 1 into variable input 0 */
  NPU_OP_KIND_IDENTITY,    /* output = input 0 */
  NPU_OP_KIND_NO_OP,       /* no outputs: groups control dependencies */
  NPU_OP_KIND_LOOP,        /* runs its control dependencies `iterations` times */
  NPU_OP_KIND_GET_NEXT,    /* outputs = the next element of a dataset */
  NPU_OP_KIND_COND,        /* runs one of two regions */
  NPU_OP_KIND_WHILE,       /* runs a region while its condition holds */
  NPU_OP_KIND_LOOP_VAR,    /* inside a while region: a loop variable's value */
  NPU_OP_KIND_COUNT
} npu_op_kind;
/* Precision lists (precision_mode allow_mix_precision): TRUST may run in float16, BLOCK stays
   float32, GRAY follows its upstream. */
typedef enum npu_op_precision {
  NPU_OP_PRECISION_GRAY = 0, NPU_OP_PRECISION_TRUST, NPU_OP_PRECISION_BLOCK
} npu_op_precision;
typedef struct npu_op_info {
  const char *name;    /* the op table name: npu_graph_add_op's op, "matmul" */
  const char *tf_type; /* TensorFlow's type: the default node name, the import key, "MatMul" */
  /* Attribute names a generic front end takes as positional arguments after the inputs,
     comma separated ("shape" for reshape); NULL: none. */
  const char *args;
  int min_inputs, max_inputs; /* max_inputs -1: any number */
  int n_outputs;              /* -1: set by the attributes (split's num_split, ...) */
  npu_op_kind kind;
  const char *kind_name;      /* "kernel", "placeholder", ... "loop_var" */
  npu_op_precision precision;
  const char *precision_name; /* "gray", "trust", "block" */
  int differentiable;         /* 1 when npu_graph_gradients passes through it */
  int stateful;               /* 1 when never evaluated at compile time (random, stateful and
                                 collective ops) */
} npu_op_info;
/* Fills *out for op i (every string static).  Errors: NPU_ERR_ARG (i out of range; *out is
   zeroed).  No context, no allocation: safe from any thread. */
NPU_API npu_status npu_op_get_info(int i, npu_op_info *out);
/* The index of the op named `name` (table name first, then TensorFlow type), or -1. */
NPU_API int npu_op_find(const char *name);

/* ---------------------------------------------------------------- model import */

/* TensorFlow graphs in: TensorFlow.js graph models (model.json: a GraphDef in proto3 JSON
   form with a weightsManifest; weight files float32/int32/bool, float16 and uint8/uint16
   quantized) and binary frozen GraphDef (.pb) files.  The graph keeps the model's node names:
   npu_graph_find_value(g, "input:0").  What the import does:
    - nodes are sorted so inputs come first (a GraphDef's order is arbitrary); "^name" inputs
      become control dependencies;
    - TensorFlow op types map to the op table's (npu_op_name; AddV2 -> add, ...); inputs that
      TensorFlow passes as trailing constants (Reshape's shape, Mean's axes, Pad's paddings,
      ...) become the op's attributes;
    - converter-fused ops (_FusedConv2D, FusedDepthwiseConv2dNative, _FusedMatMul) become the
      convolution or product followed by each of their fused_ops; the last node has the fused
      node's name, the others "<name>/<op>" (e.g. "conv1/conv2d", "conv1/bias_add").
   Errors: NPU_ERR_IO (a file cannot be read: the model or a weight file, named),
   NPU_ERR_FORMAT (corrupt JSON or protobuf, a truncated weight file, weights that do not match
   their Const's shape or dtype, dangling inputs; the message names the file and the node),
   NPU_ERR_UNSUPPORTED (op types this library lacks — ONE error listing every such type and a
   node of each —, dtypes it lacks, control-flow cycles), NPU_ERR_NOMEM. */

typedef struct npu_model_info npu_model_info;

/* One input or output of a model's signature. */
typedef struct npu_model_io {
  const char *key;  /* the signature's key ("activation_4"); the node name without one */
  const char *name; /* the tensor ("Identity:0"), for npu_graph_find_value */
  npu_dtype dtype;
  int ndim;         /* -1: unknown rank */
  int64_t shape[NPU_MAX_DIMS]; /* -1 for unknown dims (the batch, usually) */
} npu_model_io;

/* Imports path: a TensorFlow.js model.json (weights read from the paths its manifest gives,
   relative to the file's directory) or a binary GraphDef (.pb); other extensions are told
   apart by their first byte.  *graph_out is a new graph owned by the caller.  info_out may be
   NULL; else *info_out receives the signature (owned, npu_model_info_release).  Outs are NULL
   on failure.  Thread rules: those of ctx. */
NPU_API npu_status npu_graph_import_file(npu_context *ctx, const char *path,
                                         npu_graph **graph_out, npu_model_info **info_out);
/* The same from a binary GraphDef in memory (data borrowed for the call only). */
NPU_API npu_status npu_graph_import_graphdef(npu_context *ctx, const void *data, size_t size,
                                             npu_graph **graph_out, npu_model_info **info_out);
/* The same from a TensorFlow.js model.json text in memory; weight paths are relative to
   weights_dir (NULL: the current directory). */
NPU_API npu_status npu_graph_import_tfjs(npu_context *ctx, const char *json, size_t size,
                                         const char *weights_dir, npu_graph **graph_out,
                                         npu_model_info **info_out);

/* Mixed computing (mix_compile_mode): the host implements TensorFlow op type tf_type, one the
   device lacks.  Imports on ctx (npu_graph_import_*, after this call) then turn each node of
   that type into a node of op "host_func" (see npu_run_options.host_op) with attributes
     key       this key, handed to the run's host_op callback;
     Tout      the node's output dtypes: its attribute Tout (a list), else out_type, dtype or T,
               else the dtype of its first input, else float32; as many outputs as its
               consumers read ("name:1" makes two);
     _tf_type  tf_type, which marks the node as mixed computing;
   and every data input of the TensorFlow node as an input, constant ones included, in order.
   A session compiling a run that reaches such a node needs mix_compile_mode = True, else the
   run fails with NPU_ERR_UNSUPPORTED naming the node and its type.  Registering a type again
   replaces its key.  Errors: NPU_ERR_ARG (NULL, an empty name or one of 64 characters or
   more, a type this device has, naming the op it maps to), NPU_ERR_NOMEM (64 types already).
   Thread rules: those of ctx. */
NPU_API npu_status npu_context_register_host_op(npu_context *ctx, const char *tf_type,
                                                int64_t key);

/* The signature: TensorFlow.js userDefinedMetadata.signature, else signature; without one
   (and for .pb files) the Placeholders in file order and the outputs no node consumes.
   Strings and entries are borrowed, valid while info lives; i out of range gives NULL. */
NPU_API int npu_model_info_n_inputs(const npu_model_info *info);
NPU_API int npu_model_info_n_outputs(const npu_model_info *info);
NPU_API const npu_model_io *npu_model_info_input(const npu_model_info *info, int i);
NPU_API const npu_model_io *npu_model_info_output(const npu_model_info *info, int i);
/* "tfjs", "graphdef" or "savedmodel"; and where the signature came from:
   "userDefinedMetadata.signature", "signature", "signature_def" or "graph".  Static storage. */
NPU_API const char *npu_model_info_format(const npu_model_info *info);
NPU_API const char *npu_model_info_signature_source(const npu_model_info *info);
NPU_API void npu_model_info_release(npu_model_info *info);

/* SavedModel directories (dir/saved_model.pb, dir/variables/variables.index + .data-*):
   the meta graph whose tag set is exactly `tags` (comma-separated; NULL: "serve"), and its
   signature `signature_key` (NULL: "serving_default", else the first key in sorted order).
   The graph holds what that signature needs: its outputs' ancestors up to its inputs (each
   input's node becomes a Placeholder of the TensorInfo's dtype and shape); variables
   (VariableV2, VarHandleOp) become Consts holding their values from the tensor bundle (every
   block and tensor CRC-32C checked), ReadVariableOp an Identity: the model is frozen, nothing
   to initialise (npu_graph_import_savedmodel_with_options can keep them variables).  TF2 SavedModels: the signature's StatefulPartitionedCall is inlined from
   the function library (only the functions it reaches are imported), and the variables it
   captured are found in the bundle through the object graph (bound_inputs, then the
   checkpoint's "_CHECKPOINTABLE_OBJECT_GRAPH": "dense/kernel/.ATTRIBUTES/VARIABLE_VALUE").  info: the signature's inputs and outputs with their keys, format
   "savedmodel", signature_source "signature_def", plus npu_model_info_signature_key & co.
   npu_graph_import_file on a directory does this with the defaults (or, without a
   saved_model.pb, reads its model.json or its one .pb).
   Errors: NPU_ERR_IO (a file, named), NPU_ERR_NOT_FOUND (no meta graph with those tags, no
   such signature: the message lists those there are), NPU_ERR_FORMAT (corrupt protos, a
   corrupt index, a checksum mismatch, a variable missing from the bundle, a signature
   naming a tensor the graph lacks), NPU_ERR_UNSUPPORTED (text-format saved_model.pbtxt, the
   signature "__saved_model_init_op", sparse signature tensors, and what the GraphDef import
   refuses), NPU_ERR_NOMEM.  Outs NULL on failure. */
NPU_API npu_status npu_graph_import_savedmodel(npu_context *ctx, const char *dir, const char *tags,
                                               const char *signature_key, npu_graph **graph_out,
                                               npu_model_info **info_out);
/* How npu_graph_import_savedmodel_with_options reads a SavedModel; zero-initialise it (a
   member added later keeps its zero meaning, today's behaviour).  NULL: all defaults. */
typedef struct npu_savedmodel_options {
  const char *tags;          /* NULL: "serve" (as npu_graph_import_savedmodel's tags) */
  const char *signature_key; /* NULL: "serving_default", else the first key */
  /* 0 (default, for serving): variables become Consts, frozen (constant folding applies).
     1: each variable the signature reads (VariableV2, Variable, VarHandleOp; a
     ReadVariableOp stays an Identity of it) becomes a "variable" node of the same name,
     registered as npu_graph_add_variable registers one: its initializer an "assign" named
     "<name>/Assign" of a const "<name>/initial_value" holding the bundle's value, trainable
     when it is float.  The graph lists them in the bundle's order (sorted by bundle key);
     run npu_graph_add_variables_initializer's node once per session before the model. */
  int variables;
} npu_savedmodel_options;
/* npu_graph_import_savedmodel with options (above).  Errors: those of
   npu_graph_import_savedmodel; with variables, also NPU_ERR_UNSUPPORTED when the signature
   needs a node already named "<variable>/Assign" or "<variable>/initial_value".  Outs NULL
   on failure. */
NPU_API npu_status npu_graph_import_savedmodel_with_options(npu_context *ctx, const char *dir,
                                                            const npu_savedmodel_options *opts,
                                                            npu_graph **graph_out,
                                                            npu_model_info **info_out);
/* SavedModel only (NULL / 0 otherwise): the signature's key and method name
   ("tensorflow/serving/predict"), and every signature key of the meta graph, sorted.
   Borrowed, valid while info lives. */
NPU_API const char *npu_model_info_signature_key(const npu_model_info *info);
NPU_API const char *npu_model_info_method_name(const npu_model_info *info);
NPU_API int npu_model_info_n_signatures(const npu_model_info *info);
NPU_API const char *npu_model_info_signature_at(const npu_model_info *info, int i);
/* Writes g as a SavedModel directory (created as needed): one meta graph tagged "serve", the
   GraphDef of npu_graph_export_graphdef with the const nodes named in `variables` written as
   VariableV2 nodes whose values go to variables/variables.{index,data-00000-of-00001}, and
   one signature (signature_key, NULL: "serving_default"; method
   "tensorflow/serving/predict") of the tensors named (input_names[i] under input_keys[i],
   ...; at least one output, at most 128 in all).  The saved_model.pb has no saver_def and no
   restore ops: npu_graph_import_savedmodel reads it back; TensorFlow's loader would leave
   the variables uninitialised.  Errors: NPU_ERR_ARG (a variable that is not a const node),
   NPU_ERR_NOT_FOUND (a signature tensor not in g), NPU_ERR_IO, NPU_ERR_UNSUPPORTED (what the
   GraphDef export refuses), NPU_ERR_NOMEM. */
NPU_API npu_status npu_graph_export_savedmodel(npu_graph *g, const char *dir,
                                               const char *signature_key, int n_inputs,
                                               const char *const *input_keys,
                                               const char *const *input_names, int n_outputs,
                                               const char *const *output_keys,
                                               const char *const *output_names, int n_variables,
                                               const char *const *variables);

/* Writes g as a binary GraphDef (.pb): every node with its TensorFlow type and attributes
   (keepdims -> keep_dims, dtypes as DataType, "T" added), attributes TensorFlow takes as
   trailing constant inputs written back as Const nodes named "<node>/<attribute>", constants
   as TensorProto tensor_content.  npu_graph_import_file reads it back to the same graph.
   Errors: NPU_ERR_IO (the file, named; a partial file is removed), NPU_ERR_UNSUPPORTED (a
   variable, or an attribute with no TensorFlow form), NPU_ERR_NOMEM.  g is only read. */
NPU_API npu_status npu_graph_export_graphdef(npu_graph *g, const char *path);
/* The same bytes as a new 1-D uint8 tensor (owned by the caller; NULL on failure). */
NPU_API npu_status npu_graph_serialize_graphdef(npu_graph *g, npu_tensor **out);

/* A new graph (owned by the caller) holding what the output nodes need, frozen for inference
   (TensorFlow's graph_util.convert_variables_to_constants): the outputs' ancestors through
   inputs and control dependencies, in g's order and under g's node names, with each variable
   variables[i] (an index, 0 <= variables[i] < npu_graph_n_variables(g)) replaced by a "const"
   node of the variable's name holding values[i] (retained; of the variable's dtype and shape).
   Placeholders stay; initializers, assigns and optimizer nodes the outputs do not need are
   left out.  A variable the outputs need that is not in the list stays a variable, with its
   initializer (and what that reads), so npu_graph_add_variables_initializer on the new graph
   initialises it.  Graph-level options, keep_dtype marks, trainable flags and datasets come
   along.  Why freeze: a const is rounded once when a plan compiles under a reduced precision
   mode, and constant filters are packed once per plan; a variable is read (and cast) at every
   run (docs/import.md, "Freezing a trained graph").  Control flow is copied: a kept cond /
   while keeps its regions (renumbered in the new graph; of each, what its results need and a
   loop's every loop_var), and a frozen variable read inside a region, at any depth, becomes a
   const the region reads.  Errors: NPU_ERR_ARG (no outputs, an id or index out of range, a
   value NULL or of another dtype or shape: the variable named; a kept assign writing a
   frozen variable, at the top level or in a region: the assign and the variable named; an
   output inside a region, or a control dependency into a region not kept: the node and its
   cond / while named), NPU_ERR_NOMEM.  g is only read; *out is NULL on failure.  Thread rules: those of g's context. */
NPU_API npu_status npu_graph_freeze(npu_graph *g, int n_outputs, const int *output_nodes,
                                    int n_frozen, const int *variables,
                                    npu_tensor *const *values, npu_graph **out);

/* ---------------------------------------------------------------- datasets */

/* Input pipelines as tf.data describes them: an immutable, reference-counted description
   (source, then any chain of shuffle / batch / repeat / prefetch / shard), and iterators that
   produce its elements on a producer thread while the caller computes.
   An element is n_components tensors (1..16).  Element shapes: the source's slices (its
   components' shapes without dim 0), each batch prepending a dim of batch_size, or -1 when a
   last partial batch may come (drop_remainder false).
   Ownership: constructors return a new reference owned by the caller and retain their input;
   the source retains its component tensors, which must not be written while it lives.
   Threads: a dataset is immutable, so it may be shared between threads and contexts; its
   constructors' error messages go to the context of the source (npu_dataset_from_tensors). */
typedef struct npu_dataset npu_dataset;

/* The slices of components along dim 0 (tf.data.Dataset.from_tensor_slices): element i is
   (components[0][i], components[1][i], ...).  All components have rank >= 1 and the same
   dim 0 (0 gives an empty dataset).  Errors: NPU_ERR_ARG (NULLs, n_components outside 1..16),
   NPU_ERR_SHAPE (a scalar, dims 0 that differ; named), NPU_ERR_NOMEM. */
NPU_API npu_status npu_dataset_from_tensors(npu_context *ctx, int n_components,
                                            npu_tensor *const *components, npu_dataset **out);
/* Shuffles with a buffer of buffer_size elements (>= 1; 1 keeps the order): the buffer is
   filled from the input, then each element out is buffer[j], j = r % count (r the next number
   of the generator of npu_tensor_random_uniform seeded with the epoch's seed, count the
   elements in the buffer), and slot j is refilled from the input (or, once the input is done,
   takes the buffer's last element).  Epoch e (e-th pass through the input under a repeat;
   every new iterator starts at 0) uses seed itself when reshuffle_each_iteration is 0, else
   the seed of draw e of a stateful random op (seed for e = 0, then seed ^ splitmix64(e)).  So
   a seed gives the same order on every machine.  A buffer larger than the input is cut to
   the input's size.  Errors: NPU_ERR_ARG, NPU_ERR_NOMEM. */
NPU_API npu_status npu_dataset_shuffle(const npu_dataset *in, int64_t buffer_size,
                                       uint64_t seed, int reshuffle_each_iteration,
                                       npu_dataset **out);
/* Stacks batch_size (>= 1) consecutive elements into one, with a new leading dim; the last,
   partial batch is kept unless drop_remainder.  Batching elements of different shapes (a
   partial inner batch under another batch) makes the iterator fail with NPU_ERR_SHAPE.
   Errors: NPU_ERR_ARG, NPU_ERR_SHAPE (more than NPU_MAX_DIMS dims), NPU_ERR_NOMEM. */
NPU_API npu_status npu_dataset_batch(const npu_dataset *in, int64_t batch_size,
                                     int drop_remainder, npu_dataset **out);
/* The input count times over (count -1: forever; 0: empty).  A pass that yields nothing ends
   the repetition (an empty dataset repeated forever is empty).  Errors: NPU_ERR_ARG,
   NPU_ERR_NOMEM. */
NPU_API npu_status npu_dataset_repeat(const npu_dataset *in, int64_t count, npu_dataset **out);
/* Elements produced ahead of the consumer: the capacity of the iterator's queue (the
   outermost prefetch counts).  buffer_size >= 1, or -1 (TensorFlow's AUTOTUNE); without a
   prefetch, and with AUTOTUNE, the queue holds about 4 MiB of elements (2 to 1024).  Errors: NPU_ERR_ARG, NPU_ERR_NOMEM. */
NPU_API npu_status npu_dataset_prefetch(const npu_dataset *in, int64_t buffer_size,
                                        npu_dataset **out);
/* The input's elements i (counted from 0 in each pass) with i % num_shards == index
   (tf.data shard: one worker's part).  Errors: NPU_ERR_ARG (num_shards < 1, index outside
   [0, num_shards), both named), NPU_ERR_NOMEM. */
NPU_API npu_status npu_dataset_shard(const npu_dataset *in, int64_t num_shards, int64_t index,
                                     npu_dataset **out);
NPU_API npu_dataset *npu_dataset_retain(npu_dataset *ds);
NPU_API void npu_dataset_release(npu_dataset *ds);
/* The element spec.  i out of range: dtype NPU_DTYPE_COUNT, ndim -1, shape NULL.  The shape
   is borrowed, valid while ds lives; -1 marks a batch dim that may be partial. */
NPU_API int npu_dataset_n_components(const npu_dataset *ds);
NPU_API npu_dtype npu_dataset_dtype(const npu_dataset *ds, int i);
NPU_API int npu_dataset_ndim(const npu_dataset *ds, int i);
NPU_API const int64_t *npu_dataset_shape(const npu_dataset *ds, int i);
/* Elements per pass: -1 when infinite (repeat forever). */
NPU_API int64_t npu_dataset_cardinality(const npu_dataset *ds);

/* Adds ds (retained until g is released) to the datasets g's iterator_get_next nodes read;
   *dataset_id (-1 on failure) is the value of their attribute "dataset".  Adding the same
   dataset twice gives two ids.  Errors: NPU_ERR_ARG, NPU_ERR_NOMEM. */
NPU_API npu_status npu_graph_add_dataset(npu_graph *g, npu_dataset *ds, int *dataset_id);
/* The dataset of id (borrowed, valid while g lives), or NULL. */
NPU_API npu_dataset *npu_graph_dataset(const npu_graph *g, int dataset_id);

typedef struct npu_iterator npu_iterator;

/* A new iterator over ds (retained), at the start of its first pass, owned by the caller.
   It allocates everything it needs here (the pipeline's state and capacity + 1 element
   buffers, through ctx) and starts a producer thread that fills a queue of capacity elements;
   the producer allocates nothing and never touches ctx.  Errors: NPU_ERR_ARG, NPU_ERR_NOMEM
   (also when the thread cannot be started). */
NPU_API npu_status npu_iterator_new(npu_context *ctx, const npu_dataset *ds,
                                    npu_iterator **out);
/* The next element: components_out[0 .. n_components-1] receive new references (the caller
   releases them; NULL on failure).  Waits while the producer is behind.  Errors:
   NPU_ERR_OUT_OF_RANGE "end of data" once the dataset is exhausted (and on every later
   call), NPU_ERR_SHAPE (a batch of elements of different shapes, from the producer; sticky),
   NPU_ERR_NOMEM (nothing consumed: the call may be retried).  Element buffers are reused when
   the caller has released the tensors of the previous element before this call, so a
   consumer that does so allocates nothing in steady state (except for partial batches).
   Threads: one thread at a time, the one that uses ctx. */
NPU_API npu_status npu_iterator_next(npu_iterator *it, npu_tensor **components_out);
NPU_API int npu_iterator_n_components(const npu_iterator *it);
/* Stops the producer (also while it waits on a full queue), joins it and frees the iterator;
   tensors handed out stay valid.  NULL is a no-op. */
NPU_API void npu_iterator_release(npu_iterator *it);

/* ---------------------------------------------------------------- checkpoints */

/* safetensors files (what Python's `safetensors` reads and writes): an 8-byte little-endian
   header length N, N bytes of JSON {"<name>": {"dtype": "F32", "shape": [..],
   "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value", ...}} padded with
   spaces to a multiple of 8, then the tensors' little-endian bytes, offsets relative to the
   byte after the header.  dtypes: F32 F16 BF16 F64 I8 U8 I32 I64 BOOL. */
typedef struct npu_safetensors npu_safetensors;

/* Writes n tensors (borrowed) under names (distinct, non-empty, not "__metadata__"), in that
   order.  metadata_json: NULL or a JSON object of string values, written as __metadata__.
   Errors: NPU_ERR_ARG (names, metadata), NPU_ERR_IO (the file, named; a partial file is
   removed), NPU_ERR_NOMEM. */
NPU_API npu_status npu_safetensors_save(npu_context *ctx, const char *path, int n,
                                        const char *const *names,
                                        npu_tensor *const *tensors,
                                        const char *metadata_json);
/* Reads a whole file: *out (owned by the caller) holds its tensors, in data-offset order.
   Errors: NPU_ERR_IO (cannot be read, named), NPU_ERR_FORMAT (a header length beyond the
   file, bad JSON, an unknown dtype, offsets out of range, overlapping or leaving gaps, a size
   that does not match dtype and shape; the message names the file and the tensor),
   NPU_ERR_NOMEM. */
NPU_API npu_status npu_safetensors_load(npu_context *ctx, const char *path,
                                        npu_safetensors **out);
NPU_API int npu_safetensors_count(const npu_safetensors *st);
/* Borrowed, valid while st lives; NULL when i is out of range. */
NPU_API const char *npu_safetensors_name(const npu_safetensors *st, int i);
NPU_API npu_tensor *npu_safetensors_tensor(const npu_safetensors *st, int i);
/* Index of the tensor named name, or -1. */
NPU_API int npu_safetensors_find(const npu_safetensors *st, const char *name);
/* The __metadata__ object as JSON text, or NULL when the file has none.  Borrowed. */
NPU_API const char *npu_safetensors_metadata(const npu_safetensors *st);
NPU_API void npu_safetensors_release(npu_safetensors *st);

/* ---------------------------------------------------------------- sessions */

typedef struct npu_session npu_session;

/* Creates a session over g (retained) with a copy of opts (NULL = all defaults).  The
   environment overlay and the cross-option rules are applied here.
   Threads: a session is used by one thread at a time, except npu_session_run(_with_options)
   under graph_max_parallel_model_num = n: then up to n threads may run it at once (more wait
   for a free lane).  Runs that only read (no assign, dataset, random op, iterations_per_loop
   loop, dump or profile) go on side by side and return the same bits as serial runs; a run
   that writes waits until the runs in progress finish and holds the session alone (new ones
   wait).  Meanwhile no thread may change g, and the context's other calls, errmsg included,
   stay one thread at a time: a failing parallel run returns its exact status, but its message
   may be overwritten by another's.  docs/embedding.md, "Parallel runs". */
NPU_API npu_status npu_session_new(npu_context *ctx, npu_graph *g, const npu_options *opts,
                                   npu_session **out);
/* Runs the graph: feeds (value ids and tensors, borrowed), computes the fetches (value ids) and
   runs the targets (node ids, e.g. an initializer), storing new references in fetch_out[i] (the
   caller releases them).  The first run with a given fetch/feed signature compiles a plan and
   caches it.  On failure every fetch_out[i] is NULL. */
NPU_API npu_status npu_session_run(npu_session *s, int n_feeds, const int *feed_values,
                                   npu_tensor *const *feed_tensors, int n_fetches,
                                   const int *fetch_values, npu_tensor **fetch_out,
                                   int n_targets, const int *target_nodes);
/* What one run may be given besides its fetches (TensorFlow's RunOptions). */
typedef struct npu_run_options {
  /* > 0: the run fails with NPU_ERR_TIMEOUT once it has taken this long (compilation
     included); 0: no limit. */
  int64_t timeout_in_ms;
  /* NULL, or called on the thread that runs, between steps and while a step waits (dataset
     queues), with interrupt_ud: nonzero cancels the run (NPU_ERR_CANCELLED).  It must be
     cheap (it runs at every step) and must not call into this library.  The Lua binding uses
     it to notice the interpreter's Ctrl-C hook. */
  int (*interrupt)(void *ud);
  void *interrupt_ud;
  /* Host ops: a node of op "host_func" (attributes "key", an int naming the host's function,
     and "Tout", the dtypes of its outputs as a list of npu_dtype values) runs this callback, on
     the thread that runs, with host_ud, its key and its inputs (borrowed, as stored: a float16
     value stays float16).  It stores one new tensor per output in outputs[i] (any shape; the
     dtype Tout[i]); the run takes them over (copies and releases them).  It returns NPU_OK, or
     a failing status with a message in why (why_size bytes), which fails the run with
     NPU_ERR_CALLBACK: "host_func '<node>': <why>".  It may run other sessions, but not this
     one (NPU_ERR_STATE).  NULL: a run reaching a host_func step fails with NPU_ERR_STATE.
     Host ops may sit inside cond branches and while loops. */
  npu_status (*host_op)(void *host_ud, int64_t key, int n_inputs, npu_tensor *const *inputs,
                        int n_outputs, const npu_dtype *output_dtypes, npu_tensor **outputs,
                        char *why, size_t why_size);
  void *host_ud;
  /* Progress of a loop: NULL, or called on the thread that runs, with progress_ud, after
     iterations progress_every, 2 * progress_every, ... of the run and after its last one, with
     step (the iterations done) and total (the run's iterations: iterations_per_loop for a loop
     run, 1 for any other run).  A loop fed by a dataset whose elements change shape counts on
     across the plans that run it, to the same total.  Nonzero cancels the run: it fails with
     NPU_ERR_CANCELLED ("cancelled by its progress callback after iteration <step> of
     <total>"); the iterations done stay done (their variable updates kept), as with any cancel
     between steps.  It may run other sessions, but not this one (NPU_ERR_STATE).  Unset, the
     loop pays one NULL test per iteration. */
  int (*progress)(void *progress_ud, int64_t step, int64_t total);
  void *progress_ud;
  /* Iterations between progress calls, >= 0; 0: total / 100 (at least 1), about a hundred
     calls per run.  Negative: NPU_ERR_ARG. */
  int64_t progress_every;
} npu_run_options;

/* npu_session_run with run options (ro NULL: none).
   Cancellation: the run checks, before every step (top-level, and inside cond branches and
   every while iteration), inside convolution and matrix-multiply kernels between blocks of
   rows, and every millisecond while it waits for a dataset element, whether it was cancelled
   (npu_session_cancel, npu_context_cancel, ro->interrupt) or is past a deadline
   (ro->timeout_in_ms, op_execute_timeout, op_wait_timeout); then it fails with
   NPU_ERR_CANCELLED or NPU_ERR_TIMEOUT, the message naming the step it stopped at.  A step that
   writes a variable (an assign, a fused update) either completes or has not begun: variables
   are never left half written.  What the run allocated is freed or kept by the plan for the
   next run, as after any failing run; the session stays usable. */
NPU_API npu_status npu_session_run_with_options(npu_session *s, const npu_run_options *ro,
                                                int n_feeds, const int *feed_values,
                                                npu_tensor *const *feed_tensors, int n_fetches,
                                                const int *fetch_values, npu_tensor **fetch_out,
                                                int n_targets, const int *target_nodes);
/* Makes the run of s in progress (if any) fail with NPU_ERR_CANCELLED within a few
   milliseconds (see npu_session_run_with_options for where it checks).  A cancel arriving
   when no run is in progress does nothing: it never cancels a later run.  Callable from any
   thread; the caller must hold a reference to s (npu_session_retain) for the call. */
NPU_API void npu_session_cancel(npu_session *s);

/* ---- ranks (data-parallel training over MPI: docs/distributed.md) ----
   A process started by `mpirun -np N` is rank *rank_id of *rank_size (MPI_COMM_WORLD), rank
   *local_rank_id of *local_rank_size on its machine; any other process is rank 0 of 1.  The
   first call under mpirun initialises MPI (on a communication thread the library owns, which
   finalises MPI at exit).  The collectives are graph ops (hcom_allreduce, hcom_broadcast,
   hcom_all_gather, hcom_reduce_scatter, hcom_allreduce_start / _wait; point to point
   hcom_send, hcom_receive) run by sessions; each
   waits at most the session's hccl_timeout for the other ranks (NPU_ERR_TIMEOUT naming them).
   Errors: NPU_ERR_CONFLICT when the environment's RANK_SIZE or RANK_ID disagree with the
   launcher's; NPU_ERR_INTERNAL when MPI cannot start.  Outs are 0 on failure; any may be NULL.
   Callable from any thread. */
NPU_API npu_status npu_dist_ranks(npu_context *ctx, int *rank_id, int *rank_size,
                                  int *local_rank_id, int *local_rank_size);
/* 1 when the library was built with MPI (collectives work across processes), else 0: then
   every collective fails with NPU_ERR_UNSUPPORTED saying so. */
NPU_API int npu_dist_available(void);
/* Groups (HCCL's create_group): a named subset of the world's ranks, in the order given (the
   group's rank i is world rank ranks[i]), which collectives, hcom_send and hcom_receive name
   with their `group` attribute ("hccl_world_group", the default, is every rank).  Every
   member calls npu_dist_create_group with the same name and ranks, in the same order as its
   other group creations; it returns when all members have (at most timeout_ms; 0: for ever,
   else NPU_ERR_TIMEOUT naming the missing ranks).  A process outside the group may call it
   too: the group is then known to it (its size and rank translations) but not usable.
   Errors (NPU_ERR_ARG): an empty name or one of 128 characters or more, hccl_world_group, a
   name already created (destroy it first), a rank out of range or listed twice, n_ranks < 1;
   NPU_ERR_UNSUPPORTED for a multi-rank group without MPI.  Destroy: NPU_ERR_ARG for an
   unknown group or hccl_world_group; collectives started before it complete first. */
NPU_API npu_status npu_dist_create_group(npu_context *ctx, const char *name, int n_ranks,
                                         const int *ranks, int64_t timeout_ms);
NPU_API npu_status npu_dist_destroy_group(npu_context *ctx, const char *name);
/* This process's rank in group (NULL: the world), the group's size, and the rank among the
   group's ranks on this machine and their count; NPU_ERR_ARG for an unknown group, and
   (except for *rank_size alone) when this process is not a member.  Outs may be NULL. */
NPU_API npu_status npu_dist_group_ranks(npu_context *ctx, const char *group, int *rank_id,
                                        int *rank_size, int *local_rank_id,
                                        int *local_rank_size);
/* The world rank of group's rank group_rank, and the group rank of world rank world_rank;
   NPU_ERR_ARG for an unknown group, a rank out of range or not in the group (out: -1), or a
   NULL out. */
NPU_API npu_status npu_dist_world_rank(npu_context *ctx, const char *group, int group_rank,
                                       int *world_rank);
NPU_API npu_status npu_dist_group_rank(npu_context *ctx, int world_rank, const char *group,
                                       int *group_rank);
/* Frees the session's variables and plans; later calls fail with NPU_ERR_STATE.  Safe during
   a run: called from the run's own progress or host callback it returns at once and the run
   finishes (the freeing waits for its end); called from another thread it waits for the runs
   in progress to end. */
NPU_API void npu_session_close(npu_session *s);
NPU_API int npu_session_is_closed(const npu_session *s);
NPU_API npu_session *npu_session_retain(npu_session *s);
NPU_API void npu_session_release(npu_session *s);
/* The session's options (borrowed, read-only, valid while s lives). */
NPU_API const npu_options *npu_session_options(const npu_session *s);
/* Number of plans compiled so far (the plan cache's size). */
NPU_API int npu_session_n_plans(const npu_session *s);
/* A session's counters, for npu_session_stat. */
typedef enum npu_session_stat_kind {
  NPU_SESSION_STAT_PLANS,         /* plans in the cache now (npu_session_n_plans) */
  NPU_SESSION_STAT_COMPILED,      /* plans compiled since the session was made */
  NPU_SESSION_STAT_DYNAMIC_PLANS, /* cached plans compiled for feeds with unknown (-1) dims,
                                     which take any size there (compile_hybrid_mode,
                                     compile_dynamic_mode, shape_generalization_mode) */
  NPU_SESSION_STAT_EMPTY_SKIPS,   /* dynamic steps whose kernel was not called because all
                                     their outputs were empty (all_tensor_not_empty False) */
  NPU_SESSION_STAT_COPY_REUSES    /* Cast steps of a variable (a reduced-precision copy the
                                     precision mode makes) not run because the copy the plan
                                     kept was made from the variable's current value */
} npu_session_stat_kind;
/* The counter which of s; -1 for an unknown kind.  Thread rules: those of s. */
NPU_API int64_t npu_session_stat(const npu_session *s, npu_session_stat_kind which);
/* accelerate_train_mode: the training progress, as TellMeStepOrLossHook tells it — the current
   step and the total steps ("...|step|r"), or the current loss and the target loss
   ("...|loss|r").  Without it the session reads STEP_NOW/TOTAL_STEP or LOSS_NOW/TARGET_LOSS
   from the environment at each run.  NPU_ERR_STATE when the option is not set. */
NPU_API npu_status npu_session_set_progress(npu_session *s, double now, double total);
/* 1 while accelerate_train_mode runs the session in reduced precision. */
NPU_API int npu_session_reduced_precision(const npu_session *s);
/* The plan the last run (or explain) used: steps run per call and nodes folded to constants
   at compile time.  NPU_ERR_STATE when nothing has run yet. */
NPU_API npu_status npu_session_last_plan(const npu_session *s, int *n_steps, int *n_folded);
/* npu_graph_freeze with the session's values: g must be s's graph (else NPU_ERR_STATE); each
   variable the output nodes need whose keep[variable index] is 0 (keep NULL: every one) is
   read by one run of s fetching them, as npu_session_run would, and frozen to that value.
   Errors: those of npu_graph_freeze and of that run (an uninitialised variable: NPU_ERR_STATE
   naming it); *out is NULL on failure.  Thread rules: those of s. */
NPU_API npu_status npu_session_freeze(npu_session *s, npu_graph *g, int n_outputs,
                                      const int *output_nodes, const unsigned char *keep,
                                      npu_graph **out);
/* Describes the plan npu_session_run would execute for this signature (same arguments, less
   fetch_out), without running it: the cached plan, or one compiled and cached now exactly as a
   run would.  *json_out receives JSON text owned by the caller, freed with npu_free on the
   session's context; NULL on failure (the errors of npu_session_run's compilation, plus
   NPU_ERR_STATE on a closed session and NPU_ERR_NOMEM).  Layout:
     {"precision_mode": "force_fp16", "reference": false, "n_steps": 3, "folded": 1,
      "iterations": 1, "feeds": [V...], "fetches": [V...],
      "steps": [{"op": "matmul", "node": "MatMul", "pass": null or "...FusionPass",
                 "absorbed": ["node", ...], "inputs": [V...], "outputs": [V...],
                 "round_in": null or "float16", "round_out": ...,
                 "widened": [1, ...] (the inputs, numbered from 0, the executor widens from
                 their stored float16 / bfloat16 into float32 copies for the kernel; [] when
                 the kernel reads every input as stored), "scratch_bytes": 0,
                 "impl": "high_precision" or "high_performance",
                 "algo": "direct", "im2col", "winograd_2x3" or "direct_bf16" (conv2d steps),
                 "sgemm" or "gemv" (matmul steps tuning forced), "bf16dot" (matmul, fused
                 matmul and fused_apply_gradient_descent steps on the native bfloat16 GEMM;
                 conv2d_backprop_filter / _input reading bfloat16 operands as stored),
                 "f32tile" (float32 matmul, fused matmul and fused_apply_gradient_descent
                 steps on our AVX-512F GEMM tiles), else null, "index": k,
                 "prepared": "winograd_filter" (a Winograd step whose constant filter was
                 transformed once, at compile time), "bf16_filter" (a direct_bf16 step's
                 constant filter packed once; the stored filter is then not widened per run),
                 "bf16_weights" (a bf16dot matmul / fused matmul step's constant B, stored
                 bfloat16, packed once into the native GEMM's panels instead of per call),
                 "f32_weights" (an f32tile matmul / fused matmul step's constant float32 B,
                 packed once into the tiles' panels) or null, "copy_of": "w" (a precision
                 Cast of variable w whose output the plan keeps between runs and makes again
                 only after w is written) or null, "dynamic": false, "placement": "device" or
                 "host"}, ...],
      "memory": {"planning": true, "arena_bytes": n, "arena_shared": false,
                 "planned_values": n, "planned_bytes": n, "aliased_values": n,
                 "live_peak_bytes": n, "own_bytes": n, "variable_copy_bytes": n,
                 "fetched_bytes": n, "constant_bytes": n, "prepared_bytes": n, "variable_bytes": n,
                 "scratch_bytes": n, "round_bytes": n, "buffers_in_arena": true,
                 "total_bytes": n}}
   where V = {"name": "MatMul:0", "dtype": "float32", "shape": [2, 3], "bytes": 24,
              "memory": "arena" | "own" | "feed" | "constant" | "variable" | "alias" |
                        "iterator" | "none", "offset": n (arena only),
              "alias_of": "a:0" (arena only: a reshape, squeeze or expand_dims output sharing
              its input's block, so the step copies nothing)}.
   memory: the arena holds the planned values (kernel outputs nothing keeps past the run) and,
   with buffers_in_arena, the steps' scratch and float32 widening buffers, each live only
   during its step; planned_bytes is what those values take without planning, live_peak_bytes
   the most bytes live at one step (no arena can be smaller); own_bytes are kernel outputs with
   buffers of their own (fetched, OP_NO_REUSE_MEM, or variables' kept reduced copies:
   variable_copy_bytes of them, the steps with copy_of); total_bytes = arena + own + the
   constants the steps read (constant_bytes, which counts prepared_bytes: the Winograd filters
   transformed once from constant ones, direct_bf16's packed filters, bf16dot's packed B) + scratch and widening buffers when not in the arena.
   arena_shared: static_memory_policy 2/4, the arena is the session's (arena_bytes is this
   plan's need).  NPU_MEMORY_PLAN=0 turns planning off (planning false, arena 0).
   placement: mixed computing (mix_compile_mode): "host" for a step that runs on the calling
   thread with the op's reference kernel, serially — an imported op type the host implements
   (npu_context_register_host_op), or a step in_out_pair places there (docs/embedding.md).
   index: the step's number in the plan (top-level steps by position, then nested ones), as
   dumps and profiles name it; dynamic: shaped when it runs.  A cond or while step also has
   "blocks": [{"name": "then"|"else" (cond), "cond"|"body" (while), "steps": [...]}, ...]
   and a while step "max_iterations" (null: no bound).
   Passes may add fields; none is removed.  Same thread rules as npu_session_run. */
NPU_API npu_status npu_session_explain(npu_session *s, int n_feeds, const int *feed_values,
                                       npu_tensor *const *feed_tensors, int n_fetches,
                                       const int *fetch_values, int n_targets,
                                       const int *target_nodes, char **json_out);

/* The plan npu_session_explain describes (same arguments, same compilation and cache), drawn
   as Graphviz DOT text: the drawing DUMP_GE_GRAPH writes for a compilation's last stage
   (docs/debugging.md), without environment variables or files.  A node per step (op, node,
   fused nodes, pass, output shapes), a node per value existing before the run (feeds as
   ellipses, constants and folded values as notes), an edge per step input labelled with its
   shape, fetches drawn with a double border, and each cond branch or loop body a cluster
   ("subgraph cluster_r<region>") labelled with the node running it.  *dot_out is owned by the
   caller, freed with npu_free on the session's context; NULL on failure (npu_session_explain's
   errors).  Same thread rules as npu_session_run. */
NPU_API npu_status npu_session_explain_dot(npu_session *s, int n_feeds, const int *feed_values,
                                           npu_tensor *const *feed_tensors, int n_fetches,
                                           const int *fetch_values, int n_targets,
                                           const int *target_nodes, char **dot_out);
/* Graph g as given drawn as Graphviz DOT text (the drawing of DUMP_GE_GRAPH's stage 0, for
   every node rather than those a run needs): a node per op (placeholders as ellipses,
   constants as notes), an edge per input labelled with its dtype and shape, cond branches and
   loop bodies as clusters.  *dot_out is owned by the caller, freed with npu_free on g's
   context; NULL on failure (NPU_ERR_ARG for a NULL g or dot_out, NPU_ERR_NOMEM).  Reads g:
   no other thread may change it meanwhile. */
NPU_API npu_status npu_graph_to_dot(const npu_graph *g, char **dot_out);

/* ---------------------------------------------------------------- event files (TensorBoard) */

/* TensorBoard event files (docs/summaries.md): TFRecords (length, masked CRC-32C of it, data,
   masked CRC-32C of the data) holding Event protos (tensorflow/core/util/event.proto), the first
   one file_version "brain.Event:2".  The summary ops (scalar_summary, histogram_summary,
   image_summary, text_summary, merge_summary) make the serialized Summary protos written here. */
typedef struct npu_event_writer npu_event_writer;

typedef struct npu_event_writer_config {
  int max_queue;               /* events buffered before the writer thread is woken (0: 10) */
  double flush_secs;           /* the writer thread writes what is buffered at least this often,
                                  in seconds (0: 120) */
  const char *filename_suffix; /* appended to the file's name (NULL: nothing) */
  const char *path;            /* NULL, or the exact file to write instead of one in logdir
                                  (tools, and tests: "/dev/full" is a full disk) */
} npu_event_writer_config;

/* Creates <logdir>/events.out.tfevents.<Unix time, 10 digits>.<host name><suffix> (logdir and
   its parents made when missing), queues the file_version event and starts the writer's own
   thread, which does the writing: the add calls only encode and append to a buffer, so the
   training thread never waits on the disk.  cfg may be NULL.  Owned by the caller
   (npu_event_writer_release).  Errors: NPU_ERR_ARG, NPU_ERR_IO (logdir or the file cannot be
   made, named), NPU_ERR_NOMEM.  Threads: the writer is used by one thread at a time, the one
   using ctx; its thread allocates nothing and never touches ctx. */
NPU_API npu_status npu_event_writer_new(npu_context *ctx, const char *logdir,
                                        const npu_event_writer_config *cfg,
                                        npu_event_writer **out);
/* The file's path; borrowed, valid while w lives. */
NPU_API const char *npu_event_writer_path(const npu_event_writer *w);
/* Queues Event {wall_time, step, summary} with summary the n bytes of a serialized Summary
   (a summary op's output; several values, merged, are one Summary).  wall_time < 0: now.
   Errors: NPU_ERR_STATE (closed), NPU_ERR_NOMEM.  A failed write is not reported here but by
   the next flush or close. */
NPU_API npu_status npu_event_writer_add_summary(npu_event_writer *w, const void *summary,
                                                size_t n, int64_t step, double wall_time);
/* Queues Event {wall_time, step, graph_def} with g as npu_graph_serialize_graphdef writes it
   (TensorBoard's graph tab), except that nodes a TensorFlow reader could not load (variables,
   assigns, ops with attributes that have no GraphDef form) are drawn from their name,
   TensorFlow type and inputs instead of failing.  Errors: NPU_ERR_NOMEM, NPU_ERR_STATE. */
NPU_API npu_status npu_event_writer_add_graph(npu_event_writer *w, npu_graph *g, int64_t step,
                                              double wall_time);
/* Waits until everything queued is written.  NPU_ERR_IO when a write failed since the last
   report (a full disk: the file is cut back to its last whole record, so it stays readable;
   the message counts the events lost; later events are written when there is room again) or
   when the file has disappeared (its logdir removed); the error is reported once.
   NPU_ERR_STATE when closed. */
NPU_API npu_status npu_event_writer_flush(npu_event_writer *w);
/* Writes what is queued, stops the thread and closes the file; reports as flush does.  A
   second close does nothing. */
NPU_API npu_status npu_event_writer_close(npu_event_writer *w);
/* Closes when still open (an error is then dropped) and frees.  NULL is a no-op. */
NPU_API void npu_event_writer_release(npu_event_writer *w);

typedef struct npu_event_reader npu_event_reader;

typedef enum npu_event_kind {
  NPU_EVENT_FILE_VERSION, /* data: "brain.Event:2" */
  NPU_EVENT_GRAPH,        /* data: a GraphDef */
  NPU_EVENT_SCALAR,       /* simple_value */
  NPU_EVENT_HISTOGRAM,    /* min .. buckets */
  NPU_EVENT_IMAGE,        /* height, width, colorspace; data: the encoded image (PNG) */
  NPU_EVENT_TENSOR,       /* tensor_dtype; data: its first string_val (text summaries) */
  NPU_EVENT_OTHER         /* an Event or a value of another kind (log message, audio, ...) */
} npu_event_kind;

/* One item of an event file: an Event, or one value of an Event's summary.  Pointers are
   borrowed from the reader, valid until its next call; strings are not NUL-terminated. */
typedef struct npu_event_value {
  int64_t step;
  double wall_time;
  int64_t offset;          /* the record's byte offset in the file */
  npu_event_kind kind;
  const char *tag;
  size_t tag_len;
  double simple_value;
  double min, max, num, sum, sum_squares;
  int n_buckets;
  const uint8_t *bucket_limits, *buckets; /* n_buckets little-endian doubles each */
  int64_t height, width, colorspace;
  int tensor_dtype;        /* TensorFlow's DataType number (7: DT_STRING) */
  const uint8_t *data;
  size_t n_data;
  const char *plugin_name; /* the value's metadata.plugin_data.plugin_name, or NULL */
  size_t plugin_name_len;
} npu_event_value;

/* Reads the file at path (whole) for npu_event_reader_next.  Errors: NPU_ERR_IO (named),
   NPU_ERR_NOMEM. */
NPU_API npu_status npu_event_reader_open(npu_context *ctx, const char *path,
                                         npu_event_reader **out);
/* The next item.  NPU_ERR_OUT_OF_RANGE at the end, also when the last record is incomplete (a
   writer killed while writing: skipped as TensorBoard skips it, npu_event_reader_truncated
   says how many bytes); NPU_ERR_FORMAT naming the file and the record's offset when a CRC does
   not match or a record is not an Event. */
NPU_API npu_status npu_event_reader_next(npu_event_reader *r, npu_event_value *out);
/* Bytes of an incomplete last record skipped; 0 when none (so far). */
NPU_API size_t npu_event_reader_truncated(const npu_event_reader *r);
NPU_API void npu_event_reader_release(npu_event_reader *r);

#ifdef __cplusplus
}
#endif
#endif /* NPU_H */
