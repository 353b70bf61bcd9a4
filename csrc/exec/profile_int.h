/*
 * profile_int.h — the profiler's records, shared by exec/profile.c (collecting, the CSVs and
 * trace.json) and exec/profile_html.c (report.html).  Not part of any other layer's view.
 */
#ifndef NPU_EXEC_PROFILE_INT_H
#define NPU_EXEC_PROFILE_INT_H

#include <stdio.h>
#include <sys/resource.h>

#include "exec/observe.h"

enum {
  TRACE_CAP = 4096,   /* step events buffered before they are written to trace.json */
  ITER_CAP = 1024,    /* iteration rows buffered */
  TAIL_RESERVE = 4096, /* bytes of trace.json kept for its closing metadata */
  NOMEM_IDS = 16,      /* plans whose record could not be allocated, remembered by id */
  LAST_CAP = 2048,     /* step events of the last iteration kept for report.html's timeline */
  SLOW_N = 10          /* the slowest step executions kept for report.html */
};

typedef enum task_level { TASK_OFF, TASK_L0, TASK_L1 } task_level;

typedef struct step_rec {
  uint64_t count;
  int64_t total_ns, min_ns, max_ns;
  const char *name; /* the node's name (in the plan record's text) */
  const char *op;   /* op table name (static) */
  const char *pass; /* the pass that made the step (static), or NULL */
  /* l1: "[2,3];[3]" and "float32;float32" (in the record's text); l0: "" */
  const char *in_shapes, *in_dtypes, *out_shapes, *out_dtypes;
} step_rec;

typedef struct plan_rec {
  int id, n_steps;
  int fp_step, bp_step; /* -1: the fp_point / bp_point node does not run in this plan */
  uint64_t iterations; /* completed */
  step_rec *steps; /* n_steps, in the same block, then the text */
} plan_rec;

typedef struct trace_ev {
  int64_t start_ns, dur_ns;
  uint64_t iteration;
  int64_t loop_iteration; /* a step inside while loops: the innermost one's iteration, else -1 */
  const plan_rec *plan;
  int step;
  int level; /* nesting: 0 a top-level step, 1 a step in a cond branch or loop body, ... */
} trace_ev;

typedef struct iter_ev {
  uint64_t iteration;
  int plan_id;
  int64_t start_ns, end_ns, fp_ns, bp_ns, gap_ns; /* fp, bp, gap: -1 = none */
} iter_ev;

struct npuE_profile {
  npu_context *ctx;
  int session_id, device_id;
  long pid;
  char *dir; /* the session's directory (owned) */
  task_level task;
  bool training_trace, host_cpu, host_mem;
  char *fp_point, *bp_point;      /* node names, "" = the plan's first / last step (owned) */
  const char *fp_from, *bp_from;  /* "profiling_options field" or "option", for messages */
  uint64_t storage_limit;         /* bytes trace.json may take */
  char started[32];               /* local time at creation, for info.json */
  int64_t t0;                     /* CLOCK_MONOTONIC at creation: trace times count from it */
  int64_t wall0;
  struct rusage ru0;
  /* the plans seen */
  plan_rec **plans;
  int n_plans, cap_plans;
  plan_rec *cur; /* the running plan's record; NULL: this run is not profiled */
  plan_rec *last; /* the last run's record: a session usually runs one plan again and again */
  uint64_t runs;
  /* the running steps (by nesting level: a control step runs while its nested steps do) and
     iteration */
  int64_t step_start[NPUE_MAX_LOOPS + 1];
  int64_t iter_start, iter_fp, iter_bp, last_iter_end;
  uint64_t iteration;
  /* trace.json, streamed */
  FILE *trace;
  uint64_t trace_bytes, n_events, n_dropped;
  trace_ev *evs;
  int n_evs;
  /* iteration_trace.csv, streamed */
  FILE *iter_csv;
  iter_ev *iters;
  int n_iters;
  /* what went wrong on the way (reported at close): runs whose new plan's record could not be
     allocated (the next run of that plan tries again), and the distinct plans among them (their
     ids, up to NOMEM_IDS; more are counted in n_nomem_plans without being told apart) */
  uint64_t n_nomem_runs;
  int n_nomem_plans;
  int nomem_ids[NOMEM_IDS];
  int write_errno;
  const char *write_file;
  /* report.html: the last iteration's step events (copied out of evs when they are written to
     trace.json; iter_first: where the current iteration's events begin in evs, -1 when they
     began before the last write), and the slowest step executions, longest first */
  trace_ev *last_evs;
  int n_last, iter_first;
  uint64_t n_last_total; /* the last iteration's events, also those past LAST_CAP */
  trace_ev slow[SLOW_N];
  int n_slow;
  /* after runs (profile.c, checkpoint): the end of the summaries' last rewrite and its cost;
     off after a failure.  trace_end: trace.json's length after its last end was written */
  int64_t checkpoint_end_ns, checkpoint_cost_ns;
  bool checkpoint_off;
  long trace_end;
};

/* profile.c: ns as microseconds with 3 decimals, exactly (the CSVs' and the report's form). */
const char *npuE_profile_us(char *buf, size_t n, int64_t ns);

/* profile.c: the step statistics summed per op type, largest total first (op_statistic.csv):
   *out (n entries, npuC_free) and the sum of all step time.  NPU_ERR_NOMEM. */
typedef struct npuE_op_total {
  const char *op;
  uint64_t count;
  int64_t total_ns, min_ns, max_ns;
} npuE_op_total;
npu_status npuE_profile_op_totals(npuE_profile *pr, npuE_op_total **out, size_t *n, int64_t *all);

/* profile_html.c: report.html in the session's directory (docs/profiling.md).  NPU_ERR_IO or
   NPU_ERR_NOMEM with the message set; the other files do not depend on it. */
npu_status npuE_profile_write_html(npuE_profile *pr);

#endif
