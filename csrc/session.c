/*
 * session.c — sessions: a graph, a checked copy of the options, the variables, and a cache
 * of plans keyed by the fetch/feed signature.  Ties the layers together.
 */
#include <stdlib.h>
#include <string.h>

#include "compile/precision.h"
#include "exec/exec.h"
#include "options/options_int.h"

#define MAX_PLANS 64 /* beyond this the least recently compiled plan is dropped */

/* accelerate_train_mode (004; experimental_accelerate_train_mode in 000): "fast|step|0.9" runs
   the steps before 90 % of the total in reduced precision (fast: float16, fast1: bfloat16, for
   the trust-list ops as allow_mix_precision does) and the rest in the session's own precision;
   "fast|loss|1.05" stays reduced while the loss is above 1.05 x the target.  The progress comes
   from npu_session_set_progress (the Lua hook) or else from the environment variables 000
   names: STEP_NOW and TOTAL_STEP, LOSS_NOW and TARGET_LOSS, read at each run. */
typedef struct accelerate {
  bool on, by_loss, has_progress;
  int reduced;       /* npuP_precision while reduced */
  int original;      /* the session's own */
  double ratio;
  double now, total; /* from the hook, when has_progress */
} accelerate;

struct npu_session {
  atomic_int refcount;
  npu_context *ctx;
  npu_options *options;
  npuE_state state;
  bool closed;
  npuP_config compile; /* reference path, precision mode */
  int device_id;
  npuE_plan *plans[MAX_PLANS];
  int n_plans;
  int last_plan; /* index tried first: a loop runs the same signature */
  accelerate accel;
};

npu_status npu_session_new(npu_context *ctx, npu_graph *g, const npu_options *opts,
                           npu_session **out) {
  if (!out || !g) return npuC_error(ctx, NPU_ERR_ARG, "npu_session_new: NULL argument");
  *out = NULL;
  npu_options *o = NULL;
  npu_status s = opts ? npu_options_copy(opts, &o) : npu_options_new(ctx, &o);
  if (s) return s;
  /* explicit option > environment > default; then the cross-option rules and the device id */
  s = npu_options_apply_env(o, NULL, NULL);
  if (!s) s = npu_options_check(o);
  if (s) {
    npu_options_release(o);
    return s;
  }
  npu_session *sess = npuC_calloc(ctx, 1, sizeof *sess);
  if (!sess) {
    npu_options_release(o);
    return NPU_ERR_NOMEM;
  }
  atomic_init(&sess->refcount, 1);
  sess->ctx = npu_context_retain(ctx);
  sess->options = o;
  sess->state.ctx = ctx;
  sess->state.graph = npu_graph_retain(g);
  s = npuP_config_init(ctx, o, &sess->compile);
  if (s) {
    npu_graph_release(sess->state.graph);
    npuC_free(ctx, sess);
    npu_options_release(o);
    npu_context_release(ctx);
    return s;
  }
  const char *accel = npuO_is_set(o, NPUO_accelerate_train_mode)
                          ? npuO_string(o, NPUO_accelerate_train_mode)
                          : npuO_string(o, NPUO_experimental_accelerate_train_mode);
  if (*accel) { /* validated by the option table: "fast|step|0.9" */
    sess->accel.on = true;
    sess->accel.reduced = strncmp(accel, "fast1|", 6) == 0 ? NPUP_MIX_BF16 : NPUP_MIX_FP16;
    sess->accel.by_loss = strstr(accel, "|loss|") != NULL;
    sess->accel.ratio = strtod(strrchr(accel, '|') + 1, NULL);
    sess->accel.original = sess->compile.precision;
  }
  sess->device_id = npuO_device_id(o);
  *out = sess;
  return NPU_OK;
}

void npu_session_close(npu_session *s) {
  if (!s || s->closed) return;
  npu_context *ctx = s->ctx;
  for (int i = 0; i < s->n_plans; i++) npuP_free(ctx, s->plans[i]);
  s->n_plans = 0;
  npuE_iterators_free(ctx, &s->state.iterators);
  for (int i = 0; i < s->state.n_variables; i++) npu_tensor_release(s->state.variables[i]);
  npuC_free(ctx, s->state.variables);
  s->state.variables = NULL;
  s->state.n_variables = 0;
  s->closed = true;
}

int npu_session_is_closed(const npu_session *s) { return s->closed; }

npu_session *npu_session_retain(npu_session *s) {
  if (s) atomic_fetch_add(&s->refcount, 1);
  return s;
}

void npu_session_release(npu_session *s) {
  if (!s || atomic_fetch_sub(&s->refcount, 1) != 1) return;
  npu_context *ctx = s->ctx;
  npu_session_close(s);
  npu_graph_release(s->state.graph);
  npuP_config_free(ctx, &s->compile);
  npu_options_release(s->options);
  npuC_free(ctx, s);
  npu_context_release(ctx);
}

const npu_options *npu_session_options(const npu_session *s) { return s->options; }
int npu_session_n_plans(const npu_session *s) { return s->n_plans; }

/* Variables are stored by node id; the graph may have grown since the last run. */
static npu_status reserve_variables(npu_session *s) {
  int n = s->state.graph->n_nodes;
  if (n <= s->state.n_variables) return NPU_OK;
  npu_tensor **v = npuC_realloc(s->ctx, s->state.variables, (size_t)n * sizeof *v);
  if (!v) return NPU_ERR_NOMEM;
  memset(v + s->state.n_variables, 0, (size_t)(n - s->state.n_variables) * sizeof *v);
  s->state.variables = v;
  s->state.n_variables = n;
  return NPU_OK;
}

/* Picks the precision of this run from the training progress; a change recompiles (once). */
static void update_accelerate(npu_session *s) {
  accelerate *a = &s->accel;
  double now = a->now, total = a->total;
  if (!a->has_progress) {
    const char *vn = getenv(a->by_loss ? "LOSS_NOW" : "STEP_NOW");
    const char *vt = getenv(a->by_loss ? "TARGET_LOSS" : "TOTAL_STEP");
    if (!vn || !vt) return; /* no progress known: the session's own precision */
    now = strtod(vn, NULL);
    total = strtod(vt, NULL);
  }
  bool reduced = a->by_loss ? now > a->ratio * total : now < a->ratio * total;
  int want = reduced ? a->reduced : a->original;
  if (want == s->compile.precision) return;
  s->compile.precision = want;
  for (int i = 0; i < s->n_plans; i++) npuP_free(s->ctx, s->plans[i]);
  s->n_plans = 0;
  s->last_plan = 0;
}

npu_status npu_session_set_progress(npu_session *s, double now, double total) {
  if (!s->accel.on)
    return npuC_error(s->ctx, NPU_ERR_STATE,
                      "npu_session_set_progress: accelerate_train_mode is not set on this session");
  s->accel.has_progress = true;
  s->accel.now = now;
  s->accel.total = total;
  return NPU_OK;
}

int npu_session_reduced_precision(const npu_session *s) {
  return s->accel.on && s->compile.precision != s->accel.original;
}

npu_status npu_session_run(npu_session *s, int n_feeds, const int *feed_values,
                           npu_tensor *const *feed_tensors, int n_fetches,
                           const int *fetch_values, npu_tensor **fetch_out, int n_targets,
                           const int *target_nodes) {
  if (!s) return NPU_ERR_ARG;
  npu_context *ctx = s->ctx;
  for (int i = 0; i < n_fetches; i++) fetch_out[i] = NULL;
  if (s->closed)
    return npuC_error(ctx, NPU_ERR_STATE, "the session is closed");
  if (n_feeds < 0 || n_fetches < 0 || n_targets < 0 || (n_feeds && (!feed_values || !feed_tensors)) ||
      (n_fetches && (!fetch_values || !fetch_out)) || (n_targets && !target_nodes))
    return npuC_error(ctx, NPU_ERR_ARG, "npu_session_run: bad argument arrays");
  for (int i = 0; i < n_feeds; i++)
    if (!feed_tensors[i]) return npuC_error(ctx, NPU_ERR_ARG, "feed %d is NULL", i + 1);
  npu_status st = reserve_variables(s);
  if (st) return st;
  if (s->accel.on) update_accelerate(s);

  npuE_plan *plan = NULL;
  if (s->n_plans && npuP_matches(s->plans[s->last_plan], n_feeds, feed_values, feed_tensors,
                                 n_fetches, fetch_values, n_targets, target_nodes)) {
    plan = s->plans[s->last_plan];
  } else {
    for (int i = 0; i < s->n_plans && !plan; i++)
      if (npuP_matches(s->plans[i], n_feeds, feed_values, feed_tensors, n_fetches, fetch_values,
                       n_targets, target_nodes)) {
        plan = s->plans[i];
        s->last_plan = i;
      }
  }
  if (!plan) {
    st = npuP_compile(&s->state, n_feeds, feed_values, feed_tensors, n_fetches, fetch_values,
                      n_targets, target_nodes, &s->compile, &plan);
    if (st) return st;
    if (s->n_plans == MAX_PLANS) {
      npuP_free(ctx, s->plans[0]);
      memmove(s->plans, s->plans + 1, (MAX_PLANS - 1) * sizeof s->plans[0]);
      s->n_plans--;
    }
    s->plans[s->n_plans] = plan;
    s->last_plan = s->n_plans++;
  }
  return npuE_run(&s->state, plan, feed_tensors, fetch_out);
}

npu_status npu_session_last_plan(const npu_session *s, int *n_steps, int *n_folded) {
  if (!s->n_plans) return npuC_error(s->ctx, NPU_ERR_STATE, "the session has not run yet");
  const npuE_plan *p = s->plans[s->last_plan];
  *n_steps = p->n_steps;
  *n_folded = p->n_folded;
  return NPU_OK;
}
