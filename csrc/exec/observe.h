/*
 * observe.h — what watches a run: the data dump (exec/dump.c: enable_dump, enable_dump_debug)
 * and the profiler (exec/profile.c: profiling_mode).  A session makes each from its checked
 * options when it is created (NULL when the options leave it off, so an unobserved run pays a
 * pointer test a step); npuE_run reports events to them; the session frees them when it
 * closes, which writes what they still hold.
 */
#ifndef NPU_OBSERVE_H
#define NPU_OBSERVE_H

#include "exec/exec.h"

typedef enum npuE_event {
  NPUE_RUN_BEGIN,  /* a call of npuE_run (k = -1) */
  NPUE_ITER_BEGIN, /* an iteration of the plan, st->n_iterations its index (k = -1);
                      iterations_per_loop runs several in one call */
  NPUE_STEP_BEGIN, /* step k (p->all_steps[k]) is about to run: its inputs are in p->slots, as
                      stored; a nested step's nesting and loop iterations are in st->nest */
  NPUE_STEP_END,   /* step k ran: its outputs are in p->slots, as stored; a control step's
                      END follows its nested steps' events */
  NPUE_ITER_END,   /* the iteration ended (k = -1) */
  NPUE_RUN_END     /* the call ends, also when it failed (k = -1) */
} npuE_event;

/* exec/exec.c: tells the observers of event e (dump before the profiler's clock, after it
   on the way out).  Called by npuE_run for top-level steps and by exec/control.c for nested
   ones, only when st->dump or st->profile is set: an unobserved run pays one test a block. */
npu_status npuE_observe(npuE_state *st, const npuE_plan *p, npuE_event e, int k);

/* Who a session is, for the names of the files observers write. */
typedef struct npuE_observed {
  int session_id; /* the context's sessions counted from 0 */
  int device_id;  /* session_device_id */
} npuE_observed;

/* exec/dump.c.  new: *out NULL when neither enable_dump nor enable_dump_debug is on.  event:
   writes what the options ask at that point; an error (a file that cannot be written) fails
   the run.  free: cannot fail. */
typedef struct npuE_dump npuE_dump;
npu_status npuE_dump_new(npu_context *ctx, const npu_options *o, const npuE_observed *who,
                         npuE_dump **out);
npu_status npuE_dump_event(npuE_dump *d, npuE_state *st, const npuE_plan *p, npuE_event e,
                           int k);
void npuE_dump_free(npu_context *ctx, npuE_dump *d);
/* Shared with exception_dump.c: t as stored in a .npy file (bfloat16 widened to float32,
   exactly; npu_tensor_save_npy's errors, unprefixed); a name for a path ('.', '/', '\\', ' '
   become '_'; cut to n - 1 bytes); the node a step is named after (the one whose value it
   outputs: a fused step's last absorbed node; else its own); the microseconds since the Unix
   epoch a file name holds; a file's path, {dir}/{type}.{name}.{task}.{us}.{kind}.{index}.npy,
   or {dir}/{type}.{name}.{task}.{us}.{kind} when index < 0 (snprintf's result: n or more
   when it does not fit). */
npu_status npuE_dump_write_npy(npu_context *ctx, const npu_tensor *t, const char *path);
void npuE_dump_sanitise(char *dst, size_t n, const char *src);
int npuE_dump_step_node(const npuE_plan *p, const npuE_step *step);
/* The step's name for a file name: its node's (npuE_dump_step_node), sanitised, then, inside
   while loops, ".iter<i>" with the loops' current iterations joined by '_', outermost first
   (".iter2_0": iteration 2 of the outer loop, 0 of the inner). */
void npuE_dump_step_name(char *dst, size_t n, const npu_graph *g, const npuE_plan *p,
                         const npuE_step *step, const npuE_nest *nest);
int64_t npuE_dump_now_us(void);
int npuE_dump_file_path(char *buf, size_t n, const char *dir, const char *type, const char *name,
                        int task, int64_t us, const char *kind, int index);

/* exec/exception_dump.c: enable_exception_dump.  Called by npuE_run_step when the kernel of
   step k (p->all_steps[k], nested ones too: st->nest says in which loop iteration) failed with status s (the context's message says why): unless the option is 0, writes the
   step's inputs (.npy) and a JSON description into the exception-dump directory.  Cannot fail
   and leaves the context's message as it found it: a file that cannot be written is reported
   through the log hook. */
void npuE_exception_dump(npuE_state *st, const npuE_plan *p, int k, npu_status s);

/* exec/profile.c.  new: *out NULL when profiling is off (profiling_mode, else PROFILING_MODE);
   makes the session's output directory (NPU_ERR_IO naming it).  event: records the time;
   only RUN_BEGIN can fail, and only for a plan it has not seen: fp_point / bp_point naming no
   node of the graph (NPU_ERR_NOT_FOUND), trace.json that cannot be created (NPU_ERR_IO).
   Memory for a new plan's statistics that cannot be had marks the profile truncated instead
   of failing the run.  free: writes the summaries; a file that cannot be written is reported
   through the context's log hook (a closing session has no caller to fail). */
typedef struct npuE_profile npuE_profile;
npu_status npuE_profile_new(npu_context *ctx, const npu_options *o, const npuE_observed *who,
                            npuE_profile **out);
npu_status npuE_profile_event(npuE_profile *pr, npuE_state *st, const npuE_plan *p,
                              npuE_event e, int k);
void npuE_profile_free(npu_context *ctx, npuE_profile *pr);

#endif
