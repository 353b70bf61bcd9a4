/*
 * ops.h — what an op is.  One op = one line in ops.def + one op_<name>.c defining
 * `const npu_op_def npuX_op_<name>` (its arity, attributes, shape/dtype inference, kernel call,
 * precision list) + one spec case.
 *
 * Life of an op: at graph-build time `parse` turns attributes into the node's params and
 * `infer` computes output dtypes and shapes (with -1 for dims not known yet); at compile time
 * `infer` runs again with the concrete shapes of the feeds; at run time `run` (device) or
 * `run_ref` (host reference path, use_off_line=false) computes outputs into tensors the
 * executor allocated with the inferred shapes.
 */
#ifndef NPU_OPS_H
#define NPU_OPS_H

#include "core/npu_int.h"
#include "kernels/kernels.h"
#include "kernels/kfast.h"

#define NPUX_MAX_OUTPUTS 16
/* A record's meta row (op_record_push.c): byte offset, byte count (-1: recorded by its shape
   alone), rank, NPU_MAX_DIMS dims. */
#define NPUX_RECORD_WIDTH (3 + NPU_MAX_DIMS)
#define NPUX_MAX_READ 48 /* attribute names one op may look up (npuX_infer.read) */

/* Precision lists of the reference (002 §5.1): trust (may run in float16), block (must stay
   float32), gray (follows its upstream). */
typedef enum npuX_prec { NPUX_PREC_GRAY = 0, NPUX_PREC_TRUST, NPUX_PREC_BLOCK } npuX_prec;

/* How the executor treats the node.  Most ops are KERNEL ops; the others are the executor's
   own business (feeds, constants, session state). */
typedef enum npuX_kind {
  NPUX_KIND_KERNEL = 0,
  NPUX_KIND_PLACEHOLDER, /* output = the fed tensor */
  NPUX_KIND_CONST,       /* output = attr "value" */
  NPUX_KIND_VARIABLE,    /* output = the session's value of the variable */
  NPUX_KIND_ASSIGN,      /* copies input 1 into variable input 0; output = the variable */
  NPUX_KIND_IDENTITY,    /* output = input 0, no copy */
  NPUX_KIND_NO_OP,       /* no outputs: groups control dependencies */
  NPUX_KIND_LOOP,        /* runs its control dependencies `iterations` times per run */
  NPUX_KIND_GET_NEXT,    /* outputs = the next element of a dataset's iterator */
  NPUX_KIND_COND,        /* runs one of two regions (graph.c) by a bool scalar: op_cond.c */
  NPUX_KIND_WHILE,       /* runs a region while its condition holds: op_while.c */
  NPUX_KIND_LOOP_VAR     /* inside a while region: a loop variable's current value */
} npuX_kind;

typedef struct npuX_infer {
  npu_context *ctx;
  const npu_graph *graph;
  const npuG_node *node;      /* name, attrs; params being filled by parse */
  const char *op_name;        /* for messages */
  int n_inputs;
  const npuG_value *in;       /* n_inputs descriptors */
  const npu_tensor *const *const_in; /* inputs' values when known before running, else NULL */
  int n_outputs;              /* set by parse/infer when the op's count is variable */
  npuG_value out[NPUX_MAX_OUTPUTS];
  bool building;              /* npu_graph_add_op (the node is new, in graph->cur_region); false
                                 when a compile or a run infers again */
  /* The attribute names parse and infer looked up (npuX_attr_find and the npuX_attr_* getters,
     present or not): npu_graph_add_op refuses an attribute the op never looks up, suggesting
     the nearest of these.  n_read -1: more than NPUX_MAX_READ names (no check). */
  const char *read[NPUX_MAX_READ];
  int n_read;
} npuX_infer;

/* ---- collective communication (the hcom_* ops; csrc/dist/ implements it) ----
   The ops describe a collective and hand it to the run's communicator (npuX_call.comm), which
   the session takes from csrc/dist/ (layer 7, above the ops: hence hooks, not calls).  A
   collective's inputs are copied when it starts, so a started one may outlive its step (the
   hcom_allreduce_start / hcom_allreduce_wait pair that hcom_parallel schedules apart). */
typedef enum npuX_coll_kind {
  NPUX_COLL_ALLREDUCE, NPUX_COLL_BROADCAST, NPUX_COLL_ALLGATHER, NPUX_COLL_REDUCE_SCATTER,
  NPUX_COLL_SEND, NPUX_COLL_RECV /* point to point: hcom_send, hcom_receive */
} npuX_coll_kind;
typedef enum npuX_reduction {
  NPUX_RED_SUM, NPUX_RED_PROD, NPUX_RED_MAX, NPUX_RED_MIN, NPUX_RED_COUNT
} npuX_reduction;
typedef struct npuX_coll {
  npuX_coll_kind kind;
  npuX_reduction reduction; /* allreduce, reduce_scatter */
  int root;                 /* broadcast */
  int rank_size;            /* allgather, reduce_scatter: the op's attribute (checked); else 0 */
  int n;                    /* tensors, all of one dtype, sent as one buffer in order */
  const npu_tensor *const *in; /* receive: its output, read for the declared dtype and shape */
  const char *op, *node;    /* for messages */
  const char *group;        /* the group's name; NULL or "hccl_world_group": every rank */
  int peer;                 /* send: dest_rank, receive: src_rank (ranks of the group) */
  int tag;                  /* send, receive: sr_tag */
} npuX_coll;
typedef struct npuX_comm {
  /* Starts collective c (its inputs copied): *ticket names it for finish. */
  npu_status (*start)(const struct npuX_comm *comm, npu_context *ctx, const npuX_coll *c,
                      int64_t *ticket);
  /* Waits for ticket's collective and writes its result into out[0..n) (sized by the op); a
     pool that stops (npuK_stopped) ends the wait with NPU_ERR_CANCELLED.  The ticket is used
     up whatever the outcome. */
  npu_status (*finish)(const struct npuX_comm *comm, npu_context *ctx, int64_t ticket,
                       const npuK_pool *pool, int n, npu_tensor *const *out);
  int64_t timeout_ms; /* hccl_timeout in ms; 0: wait for ever */
  void *ud;
} npuX_comm;

typedef struct npuX_call npuX_call;
struct npuX_call {
  npu_context *ctx;
  const npuK_pool *pool; /* NULL = serial */
  int n_threads;         /* the pool's thread count, for scratch slots */
  const npuG_node *node;
  const void *params;
  int n_inputs;
  npu_tensor *const *in;
  int n_outputs;
  npu_tensor *const *out; /* allocated by the executor with the inferred shapes */
  void *scratch;          /* scratch_size() bytes */
  uint64_t step;          /* iterations the session ran before this one (random ops' draw) */
  int impl;               /* implementation mode (compile/implmode.c): 0 high_precision, 1
                             high_performance (the float32 kernels of kernels/kfast.h) */
  int algo;               /* the step's algorithm where its op has several (conv2d:
                             npuK_conv_algo), 0 the default (compile.h, npuE_step.algo) */
  /* Ops flagged NPUX_F_DATA_SHAPE size their outputs through npuX_output, which calls this
     (the executor's; NULL where no output may be resized). */
  npu_status (*resize)(const npuX_call *c, int i, int ndim, const int64_t *shape);
  void *exec; /* the executor's state for resize */
  /* An iteration of an iterations_per_loop run other than the last: its fetched values are
     dropped, so ops whose outputs only go to fetches (the summary ops, ops/summary.h) may skip
     their work.  false everywhere else (compile-time folding, single runs, the last one). */
  bool discarded;
  /* The run's options (npu_session_run_with_options), NULL outside runs: host_func calls
     run->host_op (op_host_func.c). */
  const npu_run_options *run;
  /* The session's communicator (the hcom_* ops), NULL where there is none. */
  const npuX_comm *comm;
  /* An operand the compiler transformed once for the step's algorithm (npuE_step.prepared:
     a Winograd step's constant filter as U, npuK_conv2d_winograd_filter; a direct_bf16
     step's packed, npuK_conv2d_bf16_filter_pack), or NULL: the kernel transforms its input
     itself each call.  Set, it replaces input 1, whose data the kernel then never reads (it
     may be the reduced stored filter: NPUX_F_PREPARED_FILTER); scratch_size sees it too. */
  const void *prepared;
};

struct npuX_grad; /* the gradient builder's context: ops/grad.h */

/* Op flags. */
enum {
  NPUX_F_SHAPE_ONLY = 1u << 0, /* the value depends only on the inputs' shapes (Shape, Size):
                                  known at compile time even when the inputs' data is not */
  NPUX_F_NO_FOLD = 1u << 1,    /* never evaluated at compile time (random, stateful) */
  NPUX_F_HALF_IO = 1u << 2,    /* the (non-reference) kernel reads and writes float16 /
                                  bfloat16 operands itself, widening by blocks: the precision
                                  pass plans no full-size float32 copies for its operands */
  NPUX_F_MOVES = 1u << 3,      /* the output's elements are the input's, moved (reshape, pad
                                  with 0, transpose, concat): float16 / bfloat16 operands of one
                                  dtype move as they are, with no widening (precision.c) */
  NPUX_F_HALF_XY = 1u << 4     /* the (non-reference) kernel reads input 0 and writes output 0
                                  as stored (float16 / bfloat16), widening and narrowing a block
                                  at a time in its scratch (convolution, matmul): the executor
                                  widens only the other reduced operands (weights, bias), and
                                  the op's scratch_size sees the stored dtypes (precision.c) */,
  NPUX_F_DATA_SHAPE = 1u << 5  /* some output dims depend on the input DATA (where, unique,
                                  non-max suppression): infer leaves them -1 even when every
                                  input is known, the value is sized when the step runs (its
                                  buffer allocated then), and run sizes each output with
                                  npuX_output before writing it.  Never folded. */,
  NPUX_F_EARLY = 1u << 7       /* hcom_parallel (compile/plan.c): the step moves up to just
                                  after the steps making its inputs (a collective's start, so
                                  that it overlaps the rest of the backward pass) */,
  NPUX_F_SUMMARY = 1u << 6     /* with DATA_SHAPE: outputs bytes for the host (the summary ops,
                                  ops/summary.h) and reads its inputs as stored, whatever their
                                  dtype: its step, shaped when it runs, does not turn the plan's
                                  fusion and precision passes off (a step reading its output has
                                  an input of unknown shape, and that one does) */,
  NPUX_F_HALF_B = 1u << 9      /* with NPUX_F_HALF_XY: the kernel reads input 1 (matmul's B, the
                                  weights) as stored too, widening it by panels in its scratch
                                  instead of the executor widening it whole each run */,
  NPUX_F_SHARED = 1u << 8      /* the step reads or writes state the session's runs share
                                  beyond variables (the random draw counter, records, a
                                  collective every rank must meet in one order): a plan with
                                  one runs alone, never beside another run (session.c) */,
  NPUX_F_LIKE_LAST = 1u << 10  /* the last input's values are never read, only its shape
                                  (broadcast_like's `like`): the op folds to a constant when
                                  the other inputs are constants and that shape is known */,
  NPUX_F_BF16_DOT = 1u << 13   /* the (non-reference) kernel reads its last two inputs and
                                  writes output 0 as stored when the precision pass stores those
                                  inputs in bfloat16 and the CPU has native bfloat16 dot
                                  products (npuK_bf16dot(): AVX512_BF16's VDPBF16PS), computing
                                  on them instead of on float32 copies: conv2d_backprop_filter
                                  and conv2d_backprop_input (precision.c; otherwise the
                                  executor widens them as usual) */,
  NPUX_F_PREPARED_FILTER = 1u << 14 /* a step of the op may be given npuX_call.prepared (a
                                  constant filter, or a GEMM's constant B (matmul,
                                  fused_matmul: bf16dot's panels), transformed once for its
                                  algorithm by compile/plan.c), which then replaces input 1:
                                  the kernel reads only that input's shape.  So the executor
                                  does not widen a reduced filter for a prepared step (plan.c
                                  clears its widen flag before memory planning sizes the
                                  widening buffer), and the op's scratch_size sees .prepared
                                  (no room for a per-call transform) */
};

/* What AOE tuning (compile/tuning.c) may choose for a step of the op, and so which of the
   kernel's choices it times.  Set in the op's definition, so tuning asks the op table instead
   of listing ops. */
typedef enum npuX_tune {
  NPUX_TUNE_NONE = 0, /* not tuned */
  NPUX_TUNE_CONV,     /* convolution algorithm (im2col, Winograd) and threads */
  NPUX_TUNE_GEMM,     /* GEMM algorithm (sgemm, sgemv by rows) and threads */
  NPUX_TUNE_THREADS,  /* threads only (depthwise convolution, pooling) */
  NPUX_TUNE_CONV_INPUT /* conv2d_backprop_input: its default kernel or Winograd, and threads */
} npuX_tune;

/* float16 or bfloat16: a value the precision pass stores at half size. */
static inline bool npuX_is_half(npu_dtype t) { return t == NPU_DTYPE_F16 || t == NPU_DTYPE_BF16; }

typedef struct npu_op_def {
  const char *name;       /* snake_case: the op table name, file name, Lua method */
  const char *tf_type;    /* TensorFlow op type ("MatMul"): default node name, import key */
  /* Attribute names that follow the inputs as positional arguments in the Lua API, comma
     separated ("shape" for reshape: npu.reshape(x, {2, 3})); NULL: options table only. */
  const char *args;
  int min_inputs, max_inputs; /* max -1: any number (Lua: the inputs are given as a list) */
  int n_outputs;          /* fixed count, or -1 when parse sets ic->n_outputs */
  npuX_kind kind;
  npuX_prec prec;
  unsigned flags; /* NPUX_F_* */
  npuX_tune tune; /* what tuning may choose (NPUX_TUNE_NONE: nothing) */
  /* Made by a fusion pass (compile/fused_ops.c): its params are its npuP_fused_* struct, and
     it is NO_FOLD only so that nothing folds it, not for being stateful. */
  bool fused;
  /* attrs -> params (zeroed before); NULL when the op has no attributes. */
  npu_status (*parse)(npuX_infer *ic, void *params);
  /* input descriptors -> ic->out[]; messages name the node and the shapes. */
  npu_status (*infer)(npuX_infer *ic, const void *params);
  /* bytes of scratch the run needs (NULL: none). */
  size_t (*scratch_size)(const npuX_call *c);
  npu_status (*run)(const npuX_call *c);     /* the device kernel */
  npu_status (*run_ref)(const npuX_call *c); /* the host reference; NULL: run serves both */
  /* Adds the nodes computing the gradients of the inputs from those of the outputs (reverse
     mode, ops/grad.h); NULL: not differentiable. */
  npu_status (*grad)(struct npuX_grad *gc);
  /* TensorFlow passes some of our attributes as trailing constant INPUTS (Reshape's shape,
     ConcatV2's axis, Sum's reduction indices): their attribute names, comma separated, in TF
     input order.  The GraphDef importer turns those const inputs into attributes; the exporter
     does the reverse.  NULL: none. */
  const char *tf_const_inputs;
  /* TensorFlow passes those const inputs BEFORE the data inputs (Split(split_dim, value),
     Fill(dims, value)).  Such ops set min_inputs to 0 and take the operands not given as
     attributes first, in TF order (ops/operands.h), so the importer's rule above still reads
     them; the exporter writes the constants ahead of the node's inputs. */
  bool tf_const_inputs_first;
} npu_op_def;

/* The op table (ops.def order). */
enum {
#define NPU_OP(name) NPUX_OP_##name,
#include "ops/ops.def"
#undef NPU_OP
  NPUX_OP_COUNT
};
/* A matmul step's transpose_b (its params; compile/plan.c packs a constant B by it). */
bool npuX_matmul_transpose_b(const void *params);
/* The scratch bytes of a matmul step (the matmul op's or a fused matmul's) whose inputs 0 and 1
   are A and B and output 0 is C, for the kernel the step will run: the native bfloat16 GEMM's
   (with B packed once by the plan when c->prepared) or the widening path's. */
size_t npuX_matmul_scratch(const npuX_call *c, bool transpose_a, bool transpose_b);

#define NPU_OP(name) extern const npu_op_def npuX_op_##name;
#include "ops/ops.def"
#undef NPU_OP

const npu_op_def *npuX_op(int id);
/* npu_graph_add_op, which is npuX_add_op(..., strict = true): an attribute the op does not read
   is an error.  The GraphDef importer passes strict = false: TensorFlow's own attributes ("T",
   "data_format" defaults, ...) come along and are ignored. */
npu_status npuX_add_op(npu_graph *g, const char *op, const char *name, int n_inputs,
                       const int *inputs, int n_attrs, const npu_attr *attrs, int *node_out,
                       bool strict);
/* The iteration count of a loop node (op_loop.c). */
int64_t npuX_loop_iterations(const npuG_node *node);
/* loop_var (op_loop_var.c): the variable's position, whether a shape invariant was given. */
int npuX_loop_var_index(const npuG_node *node);
bool npuX_loop_var_has_shape(const npuG_node *node);
/* cond / while (op_cond.c, op_while.c): region ids; a while's maximum_iterations (-1: none). */
void npuX_cond_regions(const npuG_node *node, int *then_region, int *else_region);
int npuX_while_region(const npuG_node *node);
/* The regions a cond (then, else) or while (its region, 0) node runs; 0, 0 for any other node. */
void npuX_control_regions(const npuG_node *node, int r[2]);
/* Whether region lies within one of those regions (r from npuX_control_regions; 0: none). */
bool npuX_within_control_regions(const npu_graph *g, const int r[2], int region);
int64_t npuX_while_max_iterations(const npuG_node *node);
/* Build-time checks of control nodes (op_cond.c): region (attribute attr) can be run by the
   node being built; input i, a result of region, is visible inside it (what names it). */
npu_status npuX_check_region(npuX_infer *ic, const char *attr, int64_t region);
npu_status npuX_check_result(npuX_infer *ic, int i, int64_t region, const char *what);
/* The loop_var node of `region` with index i, -1 when there is none (op_while.c). */
int npuX_find_loop_var(const npu_graph *g, int region, int before, int i);
/* The dataset id (npu_graph_dataset) of an iterator_get_next node (op_iterator_get_next.c). */
int npuX_get_next_dataset(const npuG_node *node);
/* Op id by table name or TensorFlow type; -1 when unknown. */
int npuX_find(const char *name);
int npuX_find_tf(const char *tf_type);

/* ---- helpers for op files (ops/helpers.c) ---- */

/* Attribute getters: return NPU_OK and set *v when present, leave *v when absent; a present
   attribute of the wrong type or a bad value is NPU_ERR_ARG naming the node and attribute. */
npu_status npuX_attr_int(npuX_infer *ic, const char *name, int64_t *v);
npu_status npuX_attr_bool(npuX_infer *ic, const char *name, bool *v);
npu_status npuX_attr_float(npuX_infer *ic, const char *name, double *v);
npu_status npuX_attr_string(npuX_infer *ic, const char *name, const char **v);
npu_status npuX_attr_dtype(npuX_infer *ic, const char *name, npu_dtype *v);
/* The dtype of an index output (Shape's out_type, Unique's out_idx, ArgMax's output_type):
   int32 or int64 (NPU_ERR_DTYPE naming the attribute otherwise), *v when it is absent. */
npu_status npuX_attr_index_dtype(npuX_infer *ic, const char *name, npu_dtype *v);
/* Int list of at most `max` entries: *n is set to the count. */
npu_status npuX_attr_ints(npuX_infer *ic, const char *name, int64_t *v, int max, int *n);
const npu_tensor *npuX_attr_tensor(npuX_infer *ic, const char *name);
/* The attribute `name` of the node being parsed, or NULL; records the name as one the op
   reads (see npuX_infer.read).  Op files look attributes up through it or the getters. */
const npuG_attr *npuX_attr_find(npuX_infer *ic, const char *name);

/* NPUX_F_DATA_SHAPE ops: gives output i of the running call shape (ndim, shape) (dtype as
   inferred); c->out[i] then describes a buffer of that shape.  NPU_ERR_NOMEM; NPU_ERR_INTERNAL
   when the caller cannot resize (an op without the flag). */
npu_status npuX_output(const npuX_call *c, int i, int ndim, const int64_t *shape);
/* Error about this node: "<op> '<node>': <message>". */
npu_status npuX_error(npuX_infer *ic, npu_status st, const char *fmt, ...) NPU_PRINTF(3, 4);
/* Output 0 = dtype and shape of input i. */
void npuX_same_as_input(npuX_infer *ic, int i);
/* Checks input i's dtype is one of the listed (terminated by NPU_DTYPE_COUNT). */
npu_status npuX_check_dtype(npuX_infer *ic, int i, const npu_dtype *allowed);
/* All inputs in [first, n_inputs) share input first's dtype. */
npu_status npuX_check_same_dtype(npuX_infer *ic, int first);
/* Normalises axis in [-rank, rank) to [0, rank). */
npu_status npuX_axis(npuX_infer *ic, int64_t axis, int rank, int *out);
/* Shape as text for messages; buf of 96 bytes. */
const char *npuX_shape(char buf[96], const npuG_value *v);

/* NumPy broadcasting of two shapes with -1 unknowns; NPU_ERR_SHAPE names both shapes. */
npu_status npuX_broadcast(npuX_infer *ic, const npuG_value *a, const npuG_value *b,
                          npuG_value *out);
/* Element strides of tensor t broadcast against out dims (0 where broadcast). */
void npuX_broadcast_strides(const npu_tensor *t, int out_ndim, const int64_t *out_dims,
                            int64_t *strides);

/* Families sharing one shape rule and one kernel entry (ops/family.c). */
npu_status npuX_binary_infer(npuX_infer *ic, const void *params);
npu_status npuX_binary_run(const npuX_call *c, npuK_binop op, bool reference);
npu_status npuX_unary_infer_float(npuX_infer *ic, const void *params);
npu_status npuX_unary_infer_numeric(npuX_infer *ic, const void *params);
npu_status npuX_unary_run(const npuX_call *c, npuK_unop op);

/* Reductions over a set of axes (reduce_sum, reduce_mean, reduce_max): attributes axis (an
   int or a list, negative from the end, no repeats; absent: every axis) and keepdims. */
npu_status npuX_reduce_parse(npuX_infer *ic, void *params);
npu_status npuX_reduce_infer(npuX_infer *ic, const void *params);
npu_status npuX_reduce_run(const npuX_call *c, npuK_redop op, bool reference);
/* The same for bool inputs (reduce_all, reduce_any), and the axes as a bit mask at run time. */
npu_status npuX_reduce_infer_bool(npuX_infer *ic, const void *params);
uint32_t npuX_reduce_mask(const void *params, int ndim);
/* argmax / argmin (family.c): shared parse, infer and run (max: argmax, else argmin). */
npu_status npuX_arg_parse(npuX_infer *ic, void *params);
npu_status npuX_arg_infer(npuX_infer *ic, const void *params);
npu_status npuX_arg_run(const npuX_call *c, bool max);
/* Bit i of *mask set = axis i of a rank-ndim input named by axes (validated: in range, no
   repeats; errors name the node); all: every axis. */
npu_status npuX_axes_mask(npuX_infer *ic, int n_axes, const int64_t *axes, bool all, int ndim,
                          uint32_t *mask);
/* y's rank and dims: x's without the masked axes (keepdims: kept with size 1); x rank known. */
void npuX_reduced_shape(const npuG_value *x, uint32_t mask, bool keepdims, npuG_value *y);

/* Row-wise normalisations over the last axis (softmax, log_softmax): attribute axis (default
   -1; only the last axis is supported).  Kernel view: x is (rows, cols), cols = last dim. */
typedef void (*npuX_rows_f32)(const npuK_pool *, int64_t rows, int64_t cols, const float *x,
                              float *y);
typedef void (*npuX_rows_f64)(const npuK_pool *, int64_t rows, int64_t cols, const double *x,
                              double *y);
npu_status npuX_last_axis_parse(npuX_infer *ic, void *params);
npu_status npuX_last_axis_infer(npuX_infer *ic, const void *params);
/* fast: the float32 high_performance twin, run when c->impl is set (NULL: none). */
npu_status npuX_rows_run(const npuX_call *c, npuX_rows_f32 f32, npuX_rows_f64 f64,
                         npuX_rows_f32 fast);

/* An elementwise op's whole table entry, for op files of the families. */
#define NPUX_BINARY_OP(opname, tf, kop, precision)                                           \
  static npu_status run_##opname(const npuX_call *c) { return npuX_binary_run(c, kop, false); } \
  static npu_status ref_##opname(const npuX_call *c) { return npuX_binary_run(c, kop, true); }  \
  const npu_op_def npuX_op_##opname = {.name = #opname, .tf_type = tf, .min_inputs = 2,         \
                                       .max_inputs = 2, .n_outputs = 1, .prec = precision,      \
                                       .infer = npuX_binary_infer, .run = run_##opname,         \
                                       .run_ref = ref_##opname,                                 \
                                       .flags = NPUX_F_HALF_IO};
#define NPUX_UNARY_OP(opname, tf, kop, precision, infer_fn)                                  \
  static npu_status run_##opname(const npuX_call *c) { return npuX_unary_run(c, kop); }         \
  const npu_op_def npuX_op_##opname = {.name = #opname, .tf_type = tf, .min_inputs = 1,         \
                                       .max_inputs = 1, .n_outputs = 1, .prec = precision,      \
                                       .infer = infer_fn, .run = run_##opname,                  \
                                       .flags = NPUX_F_HALF_IO};
/* A reduction's whole table entry (TF passes the axes as a const input: reduction_indices). */
#define NPUX_REDUCE_OP(opname, tf, kop, precision)                                           \
  static npu_status run_##opname(const npuX_call *c) { return npuX_reduce_run(c, kop, false); } \
  static npu_status ref_##opname(const npuX_call *c) { return npuX_reduce_run(c, kop, true); }  \
  const npu_op_def npuX_op_##opname = {.name = #opname, .tf_type = tf, .args = "axis,keepdims", \
                                       .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,        \
                                       .prec = precision, .parse = npuX_reduce_parse,           \
                                       .infer = npuX_reduce_infer, .run = run_##opname,         \
                                       .run_ref = ref_##opname, .tf_const_inputs = "axis"};
/* A row-wise normalisation's whole table entry; kernel: npuK_<kernel>_f32 / _f64. */
#define NPUX_ROWS_OP(opname, tf, kernel, precision)                                          \
  static npu_status run_##opname(const npuX_call *c) {                                         \
    return npuX_rows_run(c, npuK_##kernel##_f32, npuK_##kernel##_f64,                          \
                         npuK_##kernel##_f32_fast);                                            \
  }                                                                                            \
  const npu_op_def npuX_op_##opname = {.name = #opname, .tf_type = tf, .min_inputs = 1,         \
                                       .max_inputs = 1, .n_outputs = 1, .prec = precision,      \
                                       .parse = npuX_last_axis_parse,                           \
                                       .infer = npuX_last_axis_infer, .run = run_##opname};
/* The same entries with a gradient function (`npu_status grad_fn(struct npuX_grad *)`,
   ops/grad.h), for the family ops that are differentiable. */
#define NPUX_BINARY_OP_G(opname, tf, kop, precision, grad_fn)                                \
  static npu_status run_##opname(const npuX_call *c) { return npuX_binary_run(c, kop, false); } \
  static npu_status ref_##opname(const npuX_call *c) { return npuX_binary_run(c, kop, true); }  \
  const npu_op_def npuX_op_##opname = {.name = #opname, .tf_type = tf, .min_inputs = 2,         \
                                       .max_inputs = 2, .n_outputs = 1, .prec = precision,      \
                                       .infer = npuX_binary_infer, .run = run_##opname,         \
                                       .run_ref = ref_##opname, .grad = grad_fn,                \
                                       .flags = NPUX_F_HALF_IO};
#define NPUX_UNARY_OP_G(opname, tf, kop, precision, infer_fn, grad_fn)                       \
  static npu_status run_##opname(const npuX_call *c) { return npuX_unary_run(c, kop); }         \
  const npu_op_def npuX_op_##opname = {.name = #opname, .tf_type = tf, .min_inputs = 1,         \
                                       .max_inputs = 1, .n_outputs = 1, .prec = precision,      \
                                       .infer = infer_fn, .run = run_##opname, .grad = grad_fn, \
                                       .flags = NPUX_F_HALF_IO};
#define NPUX_REDUCE_OP_G(opname, tf, kop, precision, grad_fn)                                \
  static npu_status run_##opname(const npuX_call *c) { return npuX_reduce_run(c, kop, false); } \
  static npu_status ref_##opname(const npuX_call *c) { return npuX_reduce_run(c, kop, true); }  \
  const npu_op_def npuX_op_##opname = {.name = #opname, .tf_type = tf, .args = "axis,keepdims", \
                                       .min_inputs = 1, .max_inputs = 1, .n_outputs = 1,        \
                                       .prec = precision, .parse = npuX_reduce_parse,           \
                                       .infer = npuX_reduce_infer, .run = run_##opname,         \
                                       .run_ref = ref_##opname, .grad = grad_fn,                \
                                       .tf_const_inputs = "axis"};
#define NPUX_ROWS_OP_G(opname, tf, kernel, precision, grad_fn)                               \
  static npu_status run_##opname(const npuX_call *c) {                                         \
    return npuX_rows_run(c, npuK_##kernel##_f32, npuK_##kernel##_f64,                          \
                         npuK_##kernel##_f32_fast);                                            \
  }                                                                                            \
  const npu_op_def npuX_op_##opname = {.name = #opname, .tf_type = tf, .min_inputs = 1,         \
                                       .max_inputs = 1, .n_outputs = 1, .prec = precision,      \
                                       .parse = npuX_last_axis_parse,                           \
                                       .infer = npuX_last_axis_infer, .run = run_##opname,      \
                                       .grad = grad_fn};

/* ---- sliding windows: conv2d, depthwise_conv2d, max_pool, avg_pool (ops/window.c) ---- */

typedef enum npuX_padding { NPUX_PAD_VALID, NPUX_PAD_SAME, NPUX_PAD_EXPLICIT } npuX_padding;
typedef enum npuX_window_kind {
  NPUX_WINDOW_CONV, /* strides, dilations, padding SAME/VALID/EXPLICIT (+ explicit_paddings) */
  NPUX_WINDOW_POOL  /* ksize (required), strides, padding SAME/VALID */
} npuX_window_kind;

/* The params of every window op (the whole of their npuG_params).  (h, w) pairs. */
typedef struct npuX_window_params {
  int64_t ksize[2];            /* pools; convolutions take it from the filter (0 here) */
  int64_t stride[2], dilation[2]; /* default 1; pools: dilation 1 */
  npuX_padding padding;
  int64_t explicit_pad[4];     /* top, bottom, left, right (EXPLICIT only) */
} npuX_window_params;

/* parse: the window attributes of `kind`, then data_format.  Errors name the attribute. */
npu_status npuX_window_parse(npuX_infer *ic, npuX_window_kind kind, npuX_window_params *p);
/* data_format: "NHWC" (default) only; "NCHW" is NPU_ERR_UNSUPPORTED (bias_add shares it). */
npu_status npuX_check_nhwc(npuX_infer *ic);
/* depth_to_space / space_to_depth (params: npuX_block_size_params): parse; the start of
   infer (output NHWC, dims -1; x rank-4 checked when known; *block the block size); run: x
   viewed as dims[6], transposed by (0, 1, 3, 2, 4, 5). */
typedef struct npuX_block_size_params {
  int64_t block;
} npuX_block_size_params;
npu_status npuX_block_size_parse(npuX_infer *ic, void *params);
npu_status npuX_block_size_infer(npuX_infer *ic, const void *params, int64_t *block);
npu_status npuX_block_size_run(const npuX_call *c, const int64_t dims[6], bool reference);
const char *npuX_padding_name(npuX_padding mode);
/* Output size and padding before along spatial axis a (0 = h, 1 = w); -1 when the window
   does not fit. */
int npuX_window_dim(const npuX_window_params *p, int a, int64_t in, int64_t k, int64_t *out,
                    int64_t *pad_before);
/* infer: out = output (h, w) from input (h, w) and window (k_h, k_w), -1 where either is
   unknown; returns the axis (0 = rows, 1 = columns) where the window does not fit, else -1. */
int npuX_window_out_hw(const npuX_window_params *p, const int64_t in[2], const int64_t k[2],
                       int64_t out[2]);
/* scratch_size, run: the kernels' geometry for NHWC x (concrete) and a k_h x k_w window;
   -1 when it does not fit. */
int npuX_window_geometry(const npuX_window_params *p, const npu_tensor *x, int64_t k_h,
                         int64_t k_w, npuK_window2d *w);
/* run: the same from c->params and c->in[0]; NPU_ERR_SHAPE naming the op and node. */
npu_status npuX_window_call(const npuX_call *c, int64_t k_h, int64_t k_w, npuK_window2d *w);
/* Table entries: parse for each kind; infer of a convolution (x NHWC, filter input 1 of
   rank 4 with in-channels at dim 2; `filter` names its layout in messages; y's channel dim is
   left -1 for the op to fill) and of a pool (the whole infer). */
npu_status npuX_conv_parse(npuX_infer *ic, void *params);
npu_status npuX_pool_parse(npuX_infer *ic, void *params);
npu_status npuX_conv_infer(npuX_infer *ic, const npuX_window_params *p, const char *filter);
npu_status npuX_pool_infer(npuX_infer *ic, const void *params);
/* A pool's run with its device or reference kernel. */
typedef void (*npuX_pool_f32)(const npuK_pool *, const npuK_window2d *w, const float *x,
                              float *y);
npu_status npuX_pool_run(const npuX_call *c, npuX_pool_f32 kernel);
/* The device kernels, x and y as stored (NPUX_F_HALF_XY), and their scratch. */
typedef void (*npuX_pool_half)(const npuK_pool *, const npuK_window2d *w, const void *x,
                               npuK_dtype x_dtype, void *y, npuK_dtype y_dtype, float *scratch,
                               int n_slots);
npu_status npuX_pool_run_half(const npuX_call *c, npuX_pool_half kernel);
size_t npuX_pool_scratch(const npuX_call *c);

#endif
