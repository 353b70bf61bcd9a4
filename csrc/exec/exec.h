/*
 * exec.h — plans and the device that runs them.
 *
 * A plan is what compiling one fetch/feed signature of a graph yields: the nodes to run in
 * order, the concrete shape of every value, and one slot per value holding its tensor.  Slots
 * of kernel outputs own their tensor and keep it between runs (no allocation in steady state);
 * a slot's tensor is replaced only when someone else still holds it (a fetched result), so a
 * tensor handed out is never written again.  Slots of feeds, constants, variables and
 * identities borrow.
 */
#ifndef NPU_EXEC_H
#define NPU_EXEC_H

#include "exec/dataset.h"
#include "ops/ops.h"

typedef struct npuE_step {
  int node;
  const npu_op_def *def;
  const void *params;  /* the op's params: the node's, or a pass's (owned_params) */
  void *owned_params;  /* params a pass built for this step (freed with the plan), or NULL */
  const char *pass;    /* the pass that made this step (fusion), NULL for a node's own step */
  int *absorbed;       /* node ids a pass folded into this step (owned), n_absorbed of them */
  int n_absorbed;
  int n_in, n_out;
  int *in;  /* value ids */
  int *out; /* value ids */
  size_t scratch_size;
  bool reads_variable; /* a VARIABLE step whose value something reads (not only assigns) */
  int round_in, round_out; /* npuK dtype float32 inputs/outputs are rounded to, or -1 */
} npuE_step;

typedef struct npuE_plan {
  /* the signature this plan was compiled for */
  int n_feeds, n_fetches, n_targets;
  int *feeds, *fetches, *targets;
  npu_dtype *feed_dtypes;
  int *feed_ndims;
  int64_t *feed_shapes; /* n_feeds x NPU_MAX_DIMS */
  /* the program */
  int n_values;         /* graph values when compiled */
  npuG_value *values;   /* concrete descriptors */
  npu_tensor **slots;   /* n_values */
  uint8_t *owned;       /* slot holds a reference of the plan's */
  int n_steps;
  npuE_step *steps;
  int *borrowed;        /* slots to clear after each run (feeds, variables, identities) */
  npu_tensor **in_buf;  /* a step's input tensors, as many as the widest step has */
  int max_in;
  int n_borrowed;
  void *scratch;
  size_t scratch_size;
  float *round_buf;     /* rounded copies of a step's float32 inputs (precision modes) */
  size_t round_size;
  npu_tensor *round_meta; /* stand-ins describing them, one per input of the widest step */
  int n_round_meta;
  bool reference;       /* host reference kernels, serial */
  int n_threads;        /* threads the scratch was sized for (scratch slots per thread) */
  bool fold;            /* compiled with constant folding */
  int n_folded;         /* nodes evaluated at compile time */
  int64_t iterations;   /* times the steps run per call (a loop target), 1 otherwise */
  unsigned long uses;
} npuE_plan;

/* The session state a plan runs against. */
typedef struct npuE_state {
  npu_context *ctx;
  npu_graph *graph;
  npu_tensor **variables; /* by node id; NULL = uninitialised */
  int n_variables;        /* capacity */
  uint64_t n_iterations;  /* plan iterations run so far (npuX_call.step) */
  npuE_iterators iterators; /* one per iterator_get_next node, made on first use */
} npuE_state;

/* compile/plan.c */
/* How a plan is built: the host reference path, or the device with a precision mode.  Made
   from a checked set of options by npuP_config_init (compile/config.c); the parsed files
   (fusion switches, mix lists, implementation modes) live behind the pointers, owned. */
struct npuP_fusion_config; /* compile/fusion.c */
struct npuP_mix_config;    /* compile/precision.c */
struct npuP_impl_config;   /* compile/implmode.c */
typedef struct npuP_config {
  bool reference; /* use_off_line = false: reference kernels, serial, no precision changes */
  bool fold;      /* oo_constant_folding: evaluate constant subgraphs at compile time */
  bool training;  /* graph_run_mode 1 */
  int64_t iterations_per_loop; /* the session option, checked against loop nodes */
  int precision;  /* npuP_precision */
  bool verify;    /* check the plan after each pass (NPU_VERIFY_PLANS=1; make test sets it) */
  const npu_options *options; /* borrowed: what the config was made from */
  struct npuP_fusion_config *fusion;
  struct npuP_mix_config *mix;
  struct npuP_impl_config *impl;
} npuP_config;

/* Reads everything compilation needs from checked options o (borrowed for the config's life);
   files named by options are parsed here, so a bad file fails the session's creation. */
npu_status npuP_config_init(npu_context *ctx, const npu_options *o, npuP_config *cfg);
void npuP_config_free(npu_context *ctx, npuP_config *cfg);
/* Each pass's part of the config (NULL out when the options ask nothing of it). */
npu_status npuP_fusion_config_new(npu_context *ctx, const npu_options *o,
                                  struct npuP_fusion_config **out);
void npuP_fusion_config_free(npu_context *ctx, struct npuP_fusion_config *c);
npu_status npuP_mix_config_new(npu_context *ctx, const npu_options *o,
                               struct npuP_mix_config **out);
void npuP_mix_config_free(npu_context *ctx, struct npuP_mix_config *c);
npu_status npuP_impl_config_new(npu_context *ctx, const npu_options *o,
                                struct npuP_impl_config **out);
void npuP_impl_config_free(npu_context *ctx, struct npuP_impl_config *c);

npu_status npuP_compile(npuE_state *st, int n_feeds, const int *feeds,
                        npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                        int n_targets, const int *targets, const npuP_config *cfg,
                        npuE_plan **out);
/* Whether plan p was compiled for exactly this signature. */
bool npuP_matches(const npuE_plan *p, int n_feeds, const int *feeds,
                  npu_tensor *const *feed_tensors, int n_fetches, const int *fetches,
                  int n_targets, const int *targets);
void npuP_free(npu_context *ctx, npuE_plan *p);

/* exec/exec.c: runs the plan; fetch_out[i] receives new references. */
npu_status npuE_run(npuE_state *st, npuE_plan *p, npu_tensor *const *feed_tensors,
                    npu_tensor **fetch_out);

#endif
