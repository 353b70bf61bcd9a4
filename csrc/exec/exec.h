/*
 * exec.h — the device that runs plans (csrc/exec/).  The plan structures come from the
 * compiler (compile/compile.h); this header adds the session state a plan runs against and the
 * executor's entry points.
 */
#ifndef NPU_EXEC_H
#define NPU_EXEC_H

#include "compile/compile.h"
#include "exec/dataset.h"

/* Where the running step is nested (exec/control.c keeps it up to date; the observers read it
   to name what they write): the control steps around it and, among them, the while loops and
   their current iterations, outermost first (those past NPUE_MAX_LOOPS are not recorded). */
#define NPUE_MAX_LOOPS 8
typedef struct npuE_nest {
  int level; /* control steps around the running step: 0 for a top-level step */
  int depth; /* while loops among them */
  int64_t iteration[NPUE_MAX_LOOPS];
} npuE_nest;

/* The session state a plan runs against. */
typedef struct npuE_state {
  npu_context *ctx;
  npu_graph *graph;
  npu_tensor **variables; /* by node id; NULL = uninitialised */
  /* by node id, as many: each variable's writes counted (run_assign, run_update; 0: never
     written), so a plan's reduced copy of a variable (npuE_step.copy_of) knows whether the
     value it was made from is still current.  Shared by the lanes, like variables. */
  uint64_t *var_versions;
  int n_variables;        /* capacity */
  uint64_t n_iterations;  /* plan iterations run so far (npuX_call.step) */
  npuE_iterators iterators; /* one per iterator_get_next node, made on first use */
  /* iterations_per_loop across plans: in, the iterations npuE_run is to do (0: the plan's
     own count); out, those it left (0 when it ran them all) because a dataset's next element
     has another shape than the plan's: the session goes on with the plan of that shape */
  int64_t loop_left;
  /* true during an iterations_per_loop iteration whose fetches are dropped (all but the last):
     npuX_call.discarded */
  bool discarded;
  /* exec/observe.h: the data dump and the profiler, NULL when off (owned by the session) */
  struct npuE_dump *dump;
  struct npuE_profile *profile;
  npuE_nest nest;
  int64_t n_empty_skips; /* dynamic steps whose kernel was skipped: all outputs empty */
  int64_t n_copy_reuses; /* Cast steps of variables skipped: their copy was current */
  /* the run's cancellation and deadlines (core/watch.c), armed by the session for a run;
     op_execute_ns: op_execute_timeout in ns (0: none), op_wait_ms: op_wait_timeout in ms
     (0: none), both from the session's options */
  npuC_watch *watch;
  int64_t op_execute_ns, op_wait_ms;
  int64_t timeout_ms; /* the run's timeout_in_ms, for messages */
  const npu_run_options *run_options; /* the run's (host ops), NULL outside runs */
  /* the run's iterations done and total, for run_options->progress (exec.c) */
  int64_t progress_done, progress_total;
  int64_t progress_every; /* report every this many iterations: set at the run's start */
  /* the run computes on its own thread alone: another run of the context holds the device's
     thread pool (graph_max_parallel_model_num, session.c) */
  bool serial;
  const npuX_comm *comm; /* the session's communicator (hcom_* ops: csrc/dist/), or NULL */
} npuE_state;

/* exec/exec.c: whether the run must stop before `step` (NULL: between iterations); sets the
   message (naming the step) and returns NPU_ERR_CANCELLED / NPU_ERR_TIMEOUT, else NPU_OK.
   `why` is the reason already latched, or NPUC_GO to check now (on the running thread). */
npu_status npuE_stop(npuE_state *st, const npuE_step *step, npuC_stop why);
static inline npu_status npuE_check(npuE_state *st, const npuE_step *step) {
  npuC_stop why = npuC_watch_check(st->watch);
  return why ? npuE_stop(st, step, why) : NPU_OK;
}

/* exec/exec.c: runs one step of plan p (a top-level one or a nested one). */
npu_status npuE_run_step(npuE_state *st, npuE_plan *p, const npuE_step *step);
/* exec/control.c: a cond or while step. */
npu_status npuE_run_control(npuE_state *st, npuE_plan *p, const npuE_step *step);

/* exec/iterators.c: elements whose shape varies.  npuE_next_bind (while compiling p): when
   get_next node's outputs have -1 dims, gives them the shapes of the element it delivers next
   (peeked, not taken) and records the node in p->next_nodes; NPU_ERR_OUT_OF_RANGE at the end
   of the data.  npuE_next_matches: whether p's recorded nodes' next elements have p's
   shapes (true at the end of the data: the get_next step reports it). */
npu_status npuE_next_bind(npuE_state *st, npuE_plan *p, int node);
npu_status npuE_next_matches(npuE_state *st, const npuE_plan *p, bool *match);

/* exec/exec.c: runs the plan; fetch_out[i] receives new references, except when it returns
   early with st->loop_left set (fetch_out untouched: the session finishes the loop). */
npu_status npuE_run(npuE_state *st, npuE_plan *p, npu_tensor *const *feed_tensors,
                    npu_tensor **fetch_out);

#endif
