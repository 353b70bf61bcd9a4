/*
 * compile.h — the compiler (csrc/compile/): a graph and one fetch/feed signature in, a plan
 * out.  The plan (npuE_plan and its steps) is the compiler's product and the executor's input:
 * it is declared here, below the executor (DESIGN.md's layers: compile/ comes before exec/),
 * and exec/exec.h builds on this header.
 *
 * A plan is what compiling one fetch/feed signature of a graph yields: the nodes to run in
 * order, the concrete shape of every value, and one slot per value holding its tensor.  Slots
 * of kernel outputs own their tensor and keep it between runs (no allocation in steady state);
 * a slot's tensor is replaced only when someone else still holds it (a fetched result), so a
 * tensor handed out is never written again.  Slots of constants hold a reference (the graph
 * may swap a Const's tensor for a file-backed twin: external_weight); slots of feeds,
 * variables and identities borrow.
 *
 * Stages of npuP_compile (compile/plan.c): prune, check, infer + fold + emit (one walk over
 * the nodes), the passes (compile/passes.h), allocate.
 */
#ifndef NPU_COMPILE_H
#define NPU_COMPILE_H

#include "ops/ops.h"

struct npuE_state; /* exec/exec.h: the session state a plan runs against */

struct npuE_control; /* a cond or while step's program (compile/control.c) */

typedef struct npuE_step {
  int node;
  const npu_op_def *def;
  /* The op's params: the node's, or a pass's (owned_params).  Only for use while compiling:
     the graph may grow after (training adds nodes), moving its node array and the params
     inside it, so at run time npuE_step_params reads them afresh. */
  const void *params;
  void *owned_params;  /* params a pass built for this step (freed with the plan), or NULL */
  const char *pass;    /* the pass that made this step (fusion), NULL for a node's own step */
  int *absorbed;       /* node ids a pass folded into this step (owned), n_absorbed of them */
  int n_absorbed;
  int n_in, n_out;
  int *in;  /* value ids */
  int *out; /* value ids */
  size_t scratch_size;
  bool reads_variable; /* a VARIABLE step whose value something reads (not only assigns) */
  /* A Cast step the precision pass made of a variable's value (through identities), in a
     plan that writes no variable (compile/precision.c: mark_variable_copies): the variable's
     node id + 1, else 0.  Its output keeps a buffer of its own (not the arena, memory.c), and
     the executor runs it only when the variable was written since it last did
     (npuE_state.var_versions; copy_version, run-time state of this plan's own step: the
     version the copy was made from, 0 none yet).  A game's per-frame run with variable weights
     then converts them once per change, not once per run. */
  int copy_of;
  uint64_t copy_version;
  /* Precision (compile/precision.c): the reduced dtype (float16, bfloat16) this step's graph
     float32 inputs / outputs are stored in, or -1; the kernel still computes in float32. */
  int round_in, round_out;
  /* n_in + n_out flags (inputs, then outputs; owned), NULL when none is set: the operand is
     stored reduced and the kernel reads / writes it as float32 through p->round_buf. */
  uint8_t *widen;
  /* Memory planning: this step's scratch and widening buffer inside the plan's arena (live for
     this step only), or NULL: the plan's own p->scratch / p->round_buf. */
  void *scratch_at;
  float *round_at;
  /* Implementation mode (compile/implmode.c): 0 high_precision, 1 high_performance (npuX_call
     .impl); always 0 on the reference path. */
  uint8_t impl;
  /* The algorithm of a step whose op has several (conv2d, fused_conv2d: npuK_conv_algo), as
     npuX_call.algo; 0, the default, unless npuP_select_impl (compile/implmode.c) chose
     another.  Always 0 on the reference path. */
  uint8_t algo;
  /* A Winograd conv2d / fused_conv2d step whose filter is a constant: its U (16, c, out_c,
     float32); a direct_bf16 one's: the filter packed (npuK_conv2d_bf16_filter_pack, bfloat16).
     Computed once after tuning, before memory planning (plan.c: prepare_plan), and handed to
     the kernel as npuX_call.prepared instead of transforming the filter each run (owned;
     prepared_bytes of it), else NULL.  It replaces input 1 (NPUX_F_PREPARED_FILTER): that
     input is then never widened (widen[1] cleared) and the scratch has no room for the
     per-call transform. */
  void *prepared;
  size_t prepared_bytes;
  /* Tuning (compile/tuning.c: aoe_mode, the tuning records): the threads this step runs on
     (0: the context's), and where its algorithm and threads come from (NPUP_TUNED_*: 0 the
     compiler's rules, 1 timed by this compilation, 2 a tuning record). */
  uint8_t threads;
  uint8_t tuned;
  /* Mixed computing (compile/mixed.c): the step runs on the host, the calling thread, with the
     op's reference kernel (serial), not on the device's pool. */
  bool host;
  /* Shapes known only when the step runs (an input or output whose shape the compile could
     not fix, or an NPUX_F_DATA_SHAPE op): the executor infers the outputs' shapes from the
     actual inputs, gives them buffers of their own and sizes the scratch then. */
  bool dynamic;
  /* A kernel step (not stateful: no NPUX_F_NO_FOLD) whose outputs reach nothing but the
     fetches: an iterations_per_loop iteration whose fetches are dropped skips it (exec.c;
     an accuracy computed only for a summary).  Set by allocate (plan.c), top-level steps of
     plans without control steps. */
  bool fetch_only;
  struct npuE_control *control; /* cond / while steps: their blocks (owned), else NULL */
  /* The step's number in the plan (npuE_plan.all_steps): a top-level step's is its position in
     p->steps, nested steps follow in a depth-first walk.  Names the step to the observers
     (the dump's task id, the profile's step). */
  int index;
} npuE_step;

/* A list of steps run in order: a plan's own, or a cond branch's, a while loop's condition or
   body (nested in a control step). */
typedef struct npuE_block {
  int n_steps;
  npuE_step *steps;
} npuE_block;

/* The program of a control step (compile/control.c).  Nested steps share the plan's value
   slots (a branch reads outer values directly, by their ids); only the top-level steps see the
   passes, so nested values own their buffers and compute in their graph dtypes.
     cond:  in = {pred, captured outer values}; block[0] then, block[1] else; out[i] = the
            taken branch's result[b][i] (borrowed, like an identity).
     while: in = {initial values, captured outer values}; block[0] computes the condition
            (result[0][0], a bool scalar) from the loop variables args[], block[1] the body's
            results (result[1][]); the loop holds each variable's current tensor in held[]. */
typedef struct npuE_control {
  npuE_block block[2];
  int n_results;      /* per branch (cond), loop variables (while) */
  int *result[2];     /* value ids (owned) */
  int *args;          /* while: the loop_var values, n_results of them (owned) */
  int64_t max_iterations; /* while: maximum_iterations, -1 = no bound */
  npu_tensor **held;  /* while: the variables' tensors between iterations (owned refs) */
  /* while: every iteration's results are sure to fit the loop variables' shape invariants
     (decided when compiling: no dynamic step in the region, each result's shape fixed and
     fitting), so the executor skips the per-iteration check (exec/control.c: next_values) */
  bool shapes_fixed;
} npuE_control;

/* Memory planning (compile/memory.c): the outputs of kernel steps that nothing reads after
   the run share one arena, placed by their lifetimes within one iteration. */
typedef struct npuE_memory {
  npu_tensor *arena;      /* the block planned values are views into (retained), or NULL */
  size_t arena_bytes;     /* its usable size */
  size_t planned_bytes;   /* the planned values' sizes summed: their cost without planning */
  size_t live_peak_bytes; /* the most planned bytes live at one step: no arena can be smaller */
  int n_planned;
  int n_aliased;          /* planned values that share their input's block (reshapes) */
  int64_t *offset;        /* by value id: byte offset in the arena, -1 = a buffer of its own */
  bool enabled;           /* false: every value has its own buffer (NPU_MEMORY_PLAN=0) */
  bool shared;            /* static_memory_policy 2/4: the arena is the session's, for all plans */
  bool buffers;           /* the steps' scratch and widening buffers are in the arena too */
  int64_t *step_offset;   /* 2 per step: scratch, widening buffer offsets (-1 = none) */
} npuE_memory;

/* A step's params at run time (see npuE_step.params). */
static inline const void *npuE_step_params(const npuE_step *step, const npuG_node *node) {
  return step->owned_params ? step->owned_params : node->params.bytes;
}

typedef struct npuE_plan {
  /* the signature this plan was compiled for */
  int n_feeds, n_fetches, n_targets;
  int *feeds, *fetches, *targets;
  npu_dtype *feed_dtypes;
  int *feed_ndims;
  int64_t *feed_shapes; /* n_feeds x NPU_MAX_DIMS */
  /* the program */
  int n_values;         /* the graph's values when compiled, then those passes add (casts) */
  npuG_value *values;   /* concrete descriptors */
  npu_tensor **slots;   /* n_values */
  uint8_t *owned;       /* slot holds a reference of the plan's */
  int n_steps;
  npuE_step *steps;
  int n_all_steps;      /* the top-level steps and those nested in control steps, */
  const npuE_step **all_steps; /* by npuE_step.index (owned array; the steps are the plan's) */
  int *borrowed;        /* slots to clear after each run (feeds, variables, identities) */
  npu_tensor **in_buf;  /* a step's input tensors, as many as the widest step has */
  npuG_value *in_desc;  /* a dynamic step's input descriptors (exec.c: run_dynamic), as many */
  int max_in;
  int n_borrowed;
  void *scratch;
  size_t scratch_size;
  bool nested_scratch;  /* a step inside a cond / while needs p->scratch */
  void *dyn_scratch;    /* dynamic steps' scratch, grown when a run needs more */
  size_t dyn_scratch_size;
  bool dynamic;         /* some step is dynamic or a control step: the passes that need fixed
                           shapes (fusion, precision) leave the plan as it is */
  float *round_buf;     /* float32 copies of a step's widened operands (npuE_step.widen) */
  size_t round_size;
  npu_tensor *round_meta; /* stand-ins describing them, one per widened operand */
  int n_round_meta;
  bool reference;       /* host reference kernels, serial */
  uint8_t *on_host;     /* mixed computing (compile/mixed.c): by node id, 1 = placed on the
                           host by in_out_pair; NULL when nothing is (owned) */
  int n_threads;        /* threads the scratch was sized for (scratch slots per thread) */
  bool fold;            /* compiled with constant folding */
  int n_folded;         /* nodes evaluated at compile time, */
  int *folded;          /* their ids, in graph order */
  int64_t iterations;   /* times the steps run per call (a loop target), 1 otherwise */
  /* get_next nodes whose element shape varies (a batch that keeps its short last batch):
     the plan is compiled for the shapes of their next elements when it was made, found in
     p->values (exec/iterators.c) */
  int n_next;
  int *next_nodes;      /* node ids, n_next (owned) */
  npuE_memory memory;   /* compile/memory.c */
  const struct npuP_config *config; /* compiled with (borrowed: outlives the plan) */
  unsigned long uses;
  int id;               /* the session's compilations counted from 0 when this one was made:
                           names the plan in dumps and profiles */
  bool generic;         /* compiled for feeds with unknown (-1) dims: a dynamic-shape plan that
                           npuP_matches takes for any size there */
  bool runs_alone;      /* set by the session when it caches the plan (session.c): the plan
                           writes what other runs read, so it never runs beside them */
  /* compile/tuning.c: steps timed by this compilation, steps given a record's choice; the
     whole-plan choice (NPUP_TUNED_*) and the fusion passes it turned off (bit i: pass i of
     passes.def) */
  struct { int timed, reused, subgraph; unsigned fusion_off; } tuning;
} npuE_plan;

/* compile/plan.c */
/* How a plan is built: the host reference path, or the device with a precision mode.  Made
   from a checked set of options by npuP_config_init (compile/config.c); the parsed files
   (fusion switches, mix lists, implementation modes) live behind the pointers, owned. */
struct npuP_fusion_config; /* compile/fusion.c */
struct npuP_mix_config;    /* compile/precision.c */
struct npuP_impl_config;   /* compile/implmode.c */
struct npuP_tune_config;   /* compile/tuning.c */
/* Which feed dims a plan leaves unknown (-1), so that one dynamic-shape plan serves many feed
   shapes (compile/generalize.c): STRICT none (a plan per shape); FULL every dim the graph leaves
   unknown, once a feed's shape changed between runs (shape_generalization_mode FULL); ADAPTIVE
   the dims that changed; ALL every dim from the first run (compile_dynamic_mode). */
typedef enum {
  NPUP_GEN_STRICT,
  NPUP_GEN_FULL,
  NPUP_GEN_ADAPTIVE,
  NPUP_GEN_ALL
} npuP_generalize_mode;

typedef struct npuP_config {
  bool reference; /* use_off_line = false: reference kernels, serial, no precision changes */
  bool fold;      /* oo_constant_folding: evaluate constant subgraphs at compile time */
  bool any_feed_dims; /* compile_dynamic_mode: placeholders' declared dims read as -1 */
  int generalize; /* npuP_generalize_mode: when a run's feed shapes become -1 (session.c) */
  bool skip_empty; /* all_tensor_not_empty False: a dynamic step whose outputs are all empty
                      skips its kernel (exec.c run_dynamic) */
  bool training;  /* graph_run_mode 1 */
  bool hcom_parallel; /* collectives' starts (NPUX_F_EARLY) move up (compile/schedule.c) */
  int64_t iterations_per_loop; /* the session option, checked against loop nodes */
  int precision;  /* npuP_precision */
  bool verify;    /* check the plan after each pass (NPU_VERIFY_PLANS=1; make test sets it) */
  const npu_options *options; /* borrowed: what the config was made from */
  /* Mixed computing (compile/mixed.c): mix_compile_mode, in_out_pair (borrowed from options;
     "" when unset) and in_out_pair_flag (true: the pairs' ranges on the device) */
  bool mix_compile, in_out_pair_device;
  const char *in_out_pair;
  struct npuP_fusion_config *fusion;
  struct npuP_mix_config *mix;
  struct npuP_impl_config *impl;
  struct npuP_tune_config *tune; /* AOE and the operator cache (compile/tuning.h), or NULL */
  /* accelerate_train_mode (004; experimental_accelerate_train_mode in 000), "fast|step|0.9":
     the session switches precision between reduced (while the progress says so) and
     original (the mode's own) and recompiles; on = false when the option is not set. */
  struct { bool on, by_loss; int reduced, original; double ratio; } accel;
} npuP_config;

/* Reads everything compilation needs from checked options o (borrowed for the config's life);
   files named by options are parsed here, so a bad file fails the session's creation. */
npu_status npuP_config_init(npu_context *ctx, const npu_options *o, npuP_config *cfg);
void npuP_config_free(npu_context *ctx, npuP_config *cfg);
/* Each pass's part of the config (NULL out when the options ask nothing of it). */
npu_status npuP_fusion_config_new(npu_context *ctx, const npu_options *o,
                                  struct npuP_fusion_config **out);
void npuP_fusion_config_free(npu_context *ctx, struct npuP_fusion_config *c);
/* export_compile_stat 1: writes the fusion statistics not yet written (fusion_result.json) when
   some pass matched; called when the session closes (and by npuP_fusion_config_free).  Cannot
   fail: a file that cannot be written is reported through the context's log hook. */
void npuP_fusion_session_end(npu_context *ctx, struct npuP_fusion_config *c);
npu_status npuP_mix_config_new(npu_context *ctx, const npu_options *o,
                               struct npuP_mix_config **out);
void npuP_mix_config_free(npu_context *ctx, struct npuP_mix_config *c);
npu_status npuP_impl_config_new(npu_context *ctx, const npu_options *o,
                                struct npuP_impl_config **out);
void npuP_impl_config_free(npu_context *ctx, struct npuP_impl_config *c);

npu_status npuP_compile(struct npuE_state *st, int n_feeds, const int *feeds,
                        npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                        int n_targets, const int *targets, const npuP_config *cfg,
                        npuE_plan **out);
/* Whether plan p was compiled for this signature: same feed, fetch and target ids, feed dtypes
   and ranks, and equal feed dims (any size where a generic plan has -1). */
bool npuP_matches(const npuE_plan *p, int n_feeds, const int *feeds,
                  npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                  int n_targets, const int *targets);
void npuP_free(npu_context *ctx, npuE_plan *p);
/* compile/memory.c: static_memory_policy 2/4 — a session's plans share one arena.  Such a
   plan compiles with views but no arena; bind it (and rebind every plan when the session's
   arena grows) before it runs.  Binding allocates nothing and cannot fail. */
bool npuP_memory_shared(const npu_options *o);
npu_status npuP_memory_arena_new(npu_context *ctx, size_t bytes, npu_tensor **out);
size_t npuP_memory_arena_size(const npu_tensor *arena); /* usable bytes; 0 for NULL */
void npuP_memory_bind(npuE_plan *p, npu_tensor *arena);
/* Whether the step's output may share its input's arena block (reshape, squeeze, expand_dims). */
bool npuP_memory_may_alias(const npuE_step *st);
/* compile/explain.c: plan p (compiled with cfg) described as JSON text, allocated from ctx
   (npu_free); *out NULL on failure. */
npu_status npuP_explain(npu_context *ctx, const npu_graph *g, const npuP_config *cfg,
                        const npuE_plan *p, char **out);
/* compile/graph_dump.c: the DOT (Graphviz) text DUMP_GE_GRAPH writes, in memory, allocated
   from ctx (npu_free); *out NULL on failure.  plan: plan p as compiled (the dump's last
   stage); graph: every node of g as given (the dump's stage 0, placeholders drawn as feeds). */
npu_status npuP_plan_dot(npu_context *ctx, const npu_graph *g, const npuE_plan *p, char **out);
npu_status npuP_graph_dot(npu_context *ctx, const npu_graph *g, char **out);

/* compile/external_weight.c: external_weight (000).  A session with the option on holds a
   store (NULL out when the option is off): npuP_weights_externalize writes each constant of
   plan p of at least NPUP_EXTERNAL_MIN_BYTES (graph Const values, folded and converted ones) to
   weight_<hash> in $ASCEND_WORK_PATH (else .)/tmp_weight_<pid>_<session_id>, once per content,
   and puts a read-only mapping of the file in the plan's slot and in the Const node of g
   (identical constants share one file and one mapping).  NPU_ERR_IO naming a directory or
   file that cannot be written.  npuP_weights_free unlinks the files and removes the directory;
   the mappings stay valid with their tensors. */
#define NPUP_EXTERNAL_MIN_BYTES 4096
typedef struct npuP_weights npuP_weights;
npu_status npuP_weights_new(npu_context *ctx, const npu_options *o, int session_id,
                            npuP_weights **out);
npu_status npuP_weights_externalize(npuP_weights *w, npu_graph *g, npuE_plan *p);
void npuP_weights_free(npu_context *ctx, npuP_weights *w);

/* compile/control.c: frees a control step's program. */
void npuP_control_free(npu_context *ctx, npuE_control *c);
void npuP_steps_free(npu_context *ctx, npuE_step *steps, int n);
/* compile/plan.c: calls fn on each step of the n in steps and, depth first, on the steps nested
   in their control steps, with the nesting depth (0 for the given steps) and the control step
   holding it (NULL at depth 0) and that step's block b. */
typedef void (*npuP_step_visit)(void *ud, const npuE_step *step, int depth,
                                const npuE_step *parent, int b);
void npuP_walk_steps(const npuE_step *steps, int n, int depth, const npuE_step *parent, int b,
                     npuP_step_visit fn, void *ud);

/* compile/mixed.c: the nodes in_out_pair puts on the host (*on_host NULL when none: no
   in_out_pair, or mix_compile_mode off); NPU_ERR_NOT_FOUND for a name not in g.  And whether
   node, when it is a host implementation of a TensorFlow type (its "_tf_type"), may run:
   NPU_ERR_UNSUPPORTED without mix_compile_mode. */
npu_status npuP_mixed_placement(npu_context *ctx, const npu_graph *g, const npuP_config *cfg,
                                uint8_t **on_host);
npu_status npuP_mixed_check(npu_context *ctx, const npuP_config *cfg, const npuG_node *node);

#endif
