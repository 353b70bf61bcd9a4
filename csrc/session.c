/*
 * session.c — sessions: a graph, a checked copy of the options, the variables, and a cache
 * of plans keyed by the fetch/feed signature (and, for a dataset whose element shape varies,
 * by the shapes of the elements its iterators deliver next).  A dynamic-shape plan, compiled
 * from feeds with -1 dims (compile_hybrid_mode, compile_dynamic_mode,
 * shape_generalization_mode), takes any size there; a static plan of the exact shapes wins.
 * Ties the layers together.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "compile/dims_profiles.h"
#include "compile/exec_config.h"
#include "compile/generalize.h"
#include "compile/precision.h"
#include "core/pool.h"
#include "dist/dist.h"
#include "exec/observe.h"
#include "io/freeze.h"
#include "options/options_int.h"

#define MAX_PLANS 64 /* beyond this the least recently compiled plan is dropped */

/* accelerate_train_mode (004; experimental_accelerate_train_mode in 000): each compile config
   (the session's, and a graph's from set_graph_exec_config) says how it reduces precision
   (npuP_config.accel, compile/config.c); the session holds the training progress, from
   npu_session_set_progress (the Lua hook) or else from the environment variables 000 names:
   STEP_NOW and TOTAL_STEP, LOSS_NOW and TARGET_LOSS, read at each run. */
typedef struct accelerate {
  bool has_progress;
  double now, total; /* from the hook, when has_progress */
} accelerate;

/* graph_max_parallel_model_num = n: n runs of the session at once, from n threads.  What a
   run changes lives in a lane: the executor's state (counters, the watch), the plan cache and
   its plans' slots and buffers, the shared arena of static_memory_policy 2/4.  What lanes
   share is read-only while runs go on: the graph, the options and compile configs, the
   variables (read; a run that writes them takes the session alone, below).  Lane 0 is the
   session's own: runs that are not "pure" (they assign variables, read datasets, draw random
   numbers, loop iterations_per_loop times, or the session dumps or profiles) take the whole
   session, on lane 0, once every other run has finished; pure runs take any free lane.  Plans
   are compiled (and looked up) under the session's lock, one at a time; they run outside it. */
typedef struct lane {
  npuE_state state;
  npuE_plan *plans[MAX_PLANS];
  int n_plans;
  int last_plan; /* index tried first: a loop runs the same signature */
  npu_tensor *arena; /* static_memory_policy 2/4: the arena all plans share (compile/memory.c) */
  npuC_watch watch;  /* armed while a run is in progress */
  bool busy;         /* a run is in progress on it */
  pthread_t owner;   /* the thread running on it (a host op calling back into the session) */
} lane;

struct npu_session {
  atomic_int refcount;
  npu_context *ctx;
  npu_options *options;
  bool closed;
  bool close_pending; /* closed during a run: the last run to end frees (under lock) */
  npuP_config compile; /* reference path, precision mode */
  int device_id;
  accelerate accel;
  npuP_graph_configs graph_configs; /* set_graph_exec_config (compile/exec_config.c) */
  int n_compiled;    /* plans compiled so far: the next plan's id */
  npuP_dims *dims;   /* input_shape + dynamic_dims (compile/dims_profiles.c), from the 1st run */
  npuP_weights *weights; /* external_weight: its weight files (compile/external_weight.c) */
  npuP_generic generic;  /* stand-in feeds of dynamic-shape plans (compile/generalize.c) */
  atomic_uint cancel_epoch; /* npu_session_cancel bumps it (core/watch.c) */
  /* lanes (above): n_lanes = graph_max_parallel_model_num; cur is the lane the session's
     helpers work on (lane 0 outside runs; under `lock`, the run's) */
  lane *lanes, *cur;
  int n_lanes, n_busy;
  int n_whole_waiting;     /* runs waiting to take the session whole: new runs wait behind */
  bool exclusive;          /* a run holds the whole session: no other may start */
  pthread_mutex_t lock;    /* lanes, the plan caches, compilation */
  pthread_cond_t changed;  /* a lane was freed, or exclusive dropped */
  npuX_comm comm;          /* the hcom_* ops' communicator (dist/dist.h), hccl_timeout */
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
  /* local_rank_id and local_device_list against this process's ranks (dist/dist.h) */
  if (!s)
    s = npuD_check_local(ctx, npuO_is_set(o, NPUO_local_rank_id), npuO_int(o, NPUO_local_rank_id),
                         npuO_string(o, NPUO_local_device_list), npuO_device_id(o));
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
  int n_lanes = (int)npuO_int(o, NPUO_graph_max_parallel_model_num);
  if (n_lanes < 1 || n_lanes > 1024) n_lanes = n_lanes < 1 ? 1 : 1024;
  sess->lanes = npuC_calloc(ctx, (size_t)n_lanes, sizeof *sess->lanes);
  if (!sess->lanes) {
    npuC_free(ctx, sess);
    npu_options_release(o);
    return NPU_ERR_NOMEM;
  }
  sess->n_lanes = n_lanes;
  sess->cur = &sess->lanes[0];
  pthread_mutex_init(&sess->lock, NULL);
  pthread_cond_init(&sess->changed, NULL);
  sess->ctx = npu_context_retain(ctx);
  sess->options = o;
  sess->cur->state.ctx = ctx;
  sess->cur->state.graph = npu_graph_retain(g);
  s = npuP_config_init(ctx, o, &sess->compile);
  if (s) {
    npu_graph_release(sess->cur->state.graph);
    pthread_mutex_destroy(&sess->lock);
    pthread_cond_destroy(&sess->changed);
    npuC_free(ctx, sess->lanes);
    npuC_free(ctx, sess);
    npu_options_release(o);
    npu_context_release(ctx);
    return s;
  }
  sess->graph_configs.epoch = g->exec_config_epoch;
  /* op_execute_timeout bounds each step's time, op_wait_timeout each wait for a dataset
     element (both in seconds; op_wait_timeout 0: no limit) */
  if (npuO_is_set(o, NPUO_op_execute_timeout))
    sess->cur->state.op_execute_ns = npuO_int(o, NPUO_op_execute_timeout) * 1000000000;
  sess->cur->state.op_wait_ms = npuO_int(o, NPUO_op_wait_timeout) * 1000;
  /* hccl_timeout (or HCCL_EXEC_TIMEOUT) bounds each collective's wait for the other ranks, in
     seconds; 0: no limit.  Every lane's state points at it (copied from lane 0 below). */
  npuD_comm_init(&sess->comm, npuO_int(o, NPUO_hccl_timeout) * 1000);
  sess->cur->state.comm = &sess->comm;
  sess->device_id = npuO_device_id(o);
  /* the data dump and the profiler (exec/observe.h), NULL when the options leave them off;
     external_weight's state first: it makes nothing yet, so when it fails (memory) the
     profiler has left no PROF_ directory behind */
  npuE_observed who = {.session_id = ctx->n_sessions++, .device_id = sess->device_id};
  s = npuP_weights_new(ctx, o, who.session_id, &sess->weights);
  if (!s) s = npuE_dump_new(ctx, o, &who, &sess->cur->state.dump);
  if (!s) s = npuE_profile_new(ctx, o, &who, &sess->cur->state.profile);
  if (s) {
    npu_session_release(sess);
    return s;
  }
  /* the other lanes: the same state, with counters and iterators of their own (they never
     run get_next: those runs take lane 0) */
  for (int i = 1; i < n_lanes; i++) {
    sess->lanes[i].state = sess->lanes[0].state;
    sess->lanes[i].state.iterators = (npuE_iterators){0};
  }
  *out = sess;
  return NPU_OK;
}

/* What a closed session no longer needs: its plans, variables, weights, dumps.  Only when no
   run is in progress (npu_session_close, or the last run to end after a close). */
static void free_run_state(npu_session *s) {
  npu_context *ctx = s->ctx;
  for (int k = 0; k < s->n_lanes; k++) {
    lane *ln = &s->lanes[k];
    for (int i = 0; i < ln->n_plans; i++) npuP_free(ctx, ln->plans[i]);
    ln->n_plans = 0;
    npu_tensor_release(ln->arena);
    ln->arena = NULL;
  }
  npuP_weights_free(ctx, s->weights); /* unlinks the weight files, removes their directory */
  s->weights = NULL;
  npuE_iterators_free(ctx, &s->cur->state.iterators);
  for (int i = 0; i < s->cur->state.n_variables; i++) npu_tensor_release(s->cur->state.variables[i]);
  npuC_free(ctx, s->cur->state.variables);
  npuC_free(ctx, s->cur->state.var_versions);
  for (int k = 0; k < s->n_lanes; k++) {
    s->lanes[k].state.variables = NULL;
    s->lanes[k].state.var_versions = NULL;
    s->lanes[k].state.n_variables = 0;
  }
  npuP_fusion_session_end(ctx, s->compile.fusion); /* export_compile_stat 1: fusion_result.json */
  npuE_dump_free(ctx, s->cur->state.dump);
  s->cur->state.dump = NULL;
  npuE_profile_free(ctx, s->cur->state.profile); /* writes the profile's summaries */
  s->cur->state.profile = NULL;
  npuD_comm_close(ctx); /* the collectives' staging buffers kept for the next steps */
}

static bool runs_here(const npu_session *s) {
  pthread_t me = pthread_self();
  for (int k = 0; k < s->n_lanes; k++)
    if (s->lanes[k].busy && pthread_equal(s->lanes[k].owner, me)) return true;
  return false;
}

/* A close while runs are in progress (a progress or host callback closing its own session,
   or another thread) must not free what they use: no run starts after it, and the last run
   to end frees.  A callback's close returns at once (its run is below it on this thread);
   another thread's waits until the runs have ended. */
void npu_session_close(npu_session *s) {
  if (!s) return;
  pthread_mutex_lock(&s->lock);
  if (!s->closed) {
    s->closed = true;
    if (s->n_busy == 0) free_run_state(s);
    else s->close_pending = true;
  }
  if (!runs_here(s))
    while (s->close_pending) pthread_cond_wait(&s->changed, &s->lock);
  pthread_mutex_unlock(&s->lock);
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
  npu_graph_release(s->cur->state.graph);
  npuP_config_free(ctx, &s->compile);
  npuP_graph_configs_free(ctx, &s->graph_configs, NULL);
  npuP_dims_free(ctx, s->dims);
  npuP_generic_free(ctx, &s->generic);
  npu_options_release(s->options);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->changed);
  npuC_free(ctx, s->lanes);
  npuC_free(ctx, s);
  npu_context_release(ctx);
}

const npu_options *npu_session_options(const npu_session *s) { return s->options; }
int npu_session_n_plans(const npu_session *s) { return s->cur->n_plans; }

int64_t npu_session_stat(const npu_session *s, npu_session_stat_kind which) {
  int64_t n = 0;
  switch (which) {
  case NPU_SESSION_STAT_PLANS: return s->cur->n_plans;
  case NPU_SESSION_STAT_COMPILED: return s->n_compiled;
  case NPU_SESSION_STAT_DYNAMIC_PLANS:
    for (int i = 0; i < s->cur->n_plans; i++) n += s->cur->plans[i]->generic;
    return n;
  case NPU_SESSION_STAT_EMPTY_SKIPS: return s->cur->state.n_empty_skips;
  case NPU_SESSION_STAT_COPY_REUSES: return s->cur->state.n_copy_reuses;
  }
  return -1;
}

/* Variables are stored by node id; the graph may have grown since the last run. */
static npu_status reserve_variables(npu_session *s) {
  int n = s->cur->state.graph->n_nodes, had = s->cur->state.n_variables;
  if (n <= had) return NPU_OK;
  /* the versions first: should the variables' array fail, the capacity stays `had` and the
     larger versions' array is merely roomier than needed */
  uint64_t *ver = npuC_realloc(s->ctx, s->cur->state.var_versions, (size_t)n * sizeof *ver);
  if (ver) {
    memset(ver + had, 0, (size_t)(n - had) * sizeof *ver);
    for (int k = 0; k < s->n_lanes; k++) s->lanes[k].state.var_versions = ver;
  }
  npu_tensor **v = ver ? npuC_realloc(s->ctx, s->cur->state.variables, (size_t)n * sizeof *v)
                       : NULL;
  if (!v) return NPU_ERR_NOMEM;
  memset(v + had, 0, (size_t)(n - had) * sizeof *v);
  for (int k = 0; k < s->n_lanes; k++) { /* the lanes share them */
    s->lanes[k].state.variables = v;
    s->lanes[k].state.n_variables = n;
  }
  return NPU_OK;
}

/* Every lane's plans, but those of runs in progress on other lanes (a config change comes
   from the graph or the training progress, which change between runs, not during them). */
static void drop_plans(npu_session *s) {
  for (int k = 0; k < s->n_lanes; k++) {
    lane *ln = &s->lanes[k];
    if (ln->busy && ln != s->cur) continue; /* its run's plan; recompiled at its next run */
    for (int i = 0; i < ln->n_plans; i++) npuP_free(s->ctx, ln->plans[i]);
    ln->n_plans = 0;
    ln->last_plan = 0;
  }
}

/* The precision cfg should compile with now, from the training progress; cfg->precision when
   none is known. */
static int accelerate_precision(const npu_session *s, const npuP_config *cfg) {
  const accelerate *a = &s->accel;
  double now = a->now, total = a->total;
  if (!a->has_progress) {
    const char *vn = getenv(cfg->accel.by_loss ? "LOSS_NOW" : "STEP_NOW");
    const char *vt = getenv(cfg->accel.by_loss ? "TARGET_LOSS" : "TOTAL_STEP");
    if (!vn || !vt) return cfg->precision; /* no progress known: as compiled */
    now = strtod(vn, NULL);
    total = strtod(vt, NULL);
  }
  double at = cfg->accel.ratio * total;
  bool reduced = cfg->accel.by_loss ? now > at : now < at;
  return reduced ? cfg->accel.reduced : cfg->accel.original;
}

/* Picks the precision of this run for every config that accelerates; a change recompiles
   (once). */
static void update_accelerate(npu_session *s) {
  bool changed = false;
  for (int i = -1; i < s->graph_configs.n; i++) {
    npuP_config *cfg = i < 0 ? &s->compile : &s->graph_configs.items[i]->compile;
    if (!cfg->accel.on) continue;
    int want = accelerate_precision(s, cfg);
    changed |= want != cfg->precision;
    cfg->precision = want;
  }
  if (changed) drop_plans(s);
}

npu_status npu_session_set_progress(npu_session *s, double now, double total) {
  if (!s->compile.accel.on && !npuP_graph_configs_accelerate(&s->graph_configs, s->cur->state.graph))
    return npuC_error(s->ctx, NPU_ERR_STATE,
                      "npu_session_set_progress: accelerate_train_mode is not set on this session "
                      "nor on a graph-level config of its graph");
  s->accel.has_progress = true;
  s->accel.now = now;
  s->accel.total = total;
  return NPU_OK;
}

int npu_session_reduced_precision(const npu_session *s) {
  for (int i = -1; i < s->graph_configs.n; i++) {
    const npuP_config *cfg = i < 0 ? &s->compile : &s->graph_configs.items[i]->compile;
    if (cfg->accel.on && cfg->precision != cfg->accel.original) return 1;
  }
  return 0;
}

/* static_memory_policy 2/4: a new plan takes its place in the session's arena, which grows to
   the largest plan's need (every plan re-pointed, the old arena freed with its last view). */
static npu_status share_arena(npu_session *s, npuE_plan *plan) {
  if (!plan->memory.shared || !plan->memory.arena_bytes) return NPU_OK;
  if (plan->memory.arena_bytes > npuP_memory_arena_size(s->cur->arena)) {
    npu_tensor *grown;
    npu_status st = npuP_memory_arena_new(s->ctx, plan->memory.arena_bytes, &grown);
    if (st) return st;
    for (int i = 0; i < s->cur->n_plans; i++) npuP_memory_bind(s->cur->plans[i], grown);
    npu_tensor_release(s->cur->arena);
    s->cur->arena = grown;
  }
  npuP_memory_bind(plan, s->cur->arena);
  return NPU_OK;
}

/* A run's signature, for the helpers below. */
typedef struct run_sig {
  int n_feeds;
  const int *feeds;
  int n_fetches;
  const int *fetches;
  int n_targets;
  const int *targets;
} run_sig;

/* The index of the cached plan of this signature and feed shapes (a static plan, or a
   dynamic-shape one when generic), -1 for none. */
static int cached_plan(const npu_session *s, const run_sig *r, npu_tensor *const *feed_tensors,
                       bool generic) {
  for (int i = 0; i < s->cur->n_plans; i++)
    if (s->cur->plans[i]->generic == generic &&
        npuP_matches(s->cur->plans[i], r->n_feeds, r->feeds, feed_tensors, r->n_fetches, r->fetches,
                     r->n_targets, r->targets))
      return i;
  return -1;
}

/* Whether cached plan i is the one for this run: a static plan (a dynamic-shape one when
   generic) compiled for its signature and feed shapes, and for the shapes of the elements its
   get_next nodes deliver next when they vary (exec/iterators.c: a short last batch has a plan
   of its own). */
static npu_status plan_fits(npu_session *s, int i, const run_sig *r,
                            npu_tensor *const *feed_tensors, bool generic, bool *fits) {
  *fits = s->cur->plans[i]->generic == generic &&
          npuP_matches(s->cur->plans[i], r->n_feeds, r->feeds, feed_tensors, r->n_fetches,
                       r->fetches, r->n_targets, r->targets);
  return *fits && s->cur->plans[i]->n_next ? npuE_next_matches(&s->cur->state, s->cur->plans[i], fits)
                                      : NPU_OK;
}

/* The cached plan for this run, the last one used first (a loop runs the same signature);
   NULL when none fits.  Static plans and dynamic-shape ones are looked up apart: a plan
   compiled for exactly these shapes wins over one that takes any size. */
static npu_status lookup(npu_session *s, const run_sig *r, npu_tensor *const *feed_tensors,
                         bool generic, npuE_plan **out) {
  bool fits = false;
  npu_status st = NPU_OK;
  *out = NULL;
  if (s->cur->n_plans && (st = plan_fits(s, s->cur->last_plan, r, feed_tensors, generic, &fits))) return st;
  if (fits) {
    *out = s->cur->plans[s->cur->last_plan];
    return NPU_OK;
  }
  for (int i = 0; i < s->cur->n_plans; i++) {
    if ((st = plan_fits(s, i, r, feed_tensors, generic, &fits))) return st;
    if (fits) {
      *out = s->cur->plans[s->cur->last_plan = i];
      return NPU_OK;
    }
  }
  return NPU_OK;
}

/* compile_dynamic_mode / shape_generalization_mode: the feeds to compile a new plan of this
   run from (compile/generalize.c), from the signature's last plan; the run's own when no dim
   is generalised. */
static npu_status generalized_feeds(npu_session *s, const npuP_config *cfg, const run_sig *r,
                                    npu_tensor *const *feed_tensors, npu_tensor *const **in) {
  const npuE_plan *prev = NULL;
  for (int i = s->cur->n_plans - 1; i >= 0 && !prev && cfg->generalize != NPUP_GEN_STRICT; i--)
    if (npuP_same_signature(s->cur->plans[i], r->n_feeds, r->feeds, feed_tensors, r->n_fetches,
                            r->fetches, r->n_targets, r->targets))
      prev = s->cur->plans[i];
  npu_tensor *const *key;
  npu_status st = npuP_generalize(&s->generic, s->ctx, s->cur->state.graph, cfg->generalize,
                                  cfg->any_feed_dims, r->n_feeds, r->feeds, feed_tensors, prev,
                                  &key);
  *in = key ? key : feed_tensors;
  return st;
}

/* Whether plan p must run alone, never beside other runs of the session (the lanes, above):
   decided once, when the plan is cached. */
static void impure_step(void *ud, const npuE_step *step, int depth, const npuE_step *parent,
                        int b) {
  (void)depth, (void)parent, (void)b;
  npuX_kind k = step->def->kind;
  if (k == NPUX_KIND_ASSIGN || k == NPUX_KIND_GET_NEXT || (step->def->flags & NPUX_F_SHARED))
    *(bool *)ud = true;
}

static bool plan_runs_alone(const npu_session *s, const npuE_plan *p) {
  bool alone = p->iterations > 1 || s->lanes[0].state.dump || s->lanes[0].state.profile;
  if (!alone) npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, impure_step, &alone);
  return alone;
}

/* Compiles the plan of a signature and caches it (the oldest plan goes beyond MAX_PLANS). */
static npu_status compile_plan(npu_session *s, npuP_config *cfg, const run_sig *r,
                               npu_tensor *const *feed_tensors, npuE_plan **out) {
  npu_context *ctx = s->ctx;
  npuE_plan *plan = NULL;
  npu_status st = npuP_compile(&s->cur->state, r->n_feeds, r->feeds, feed_tensors, r->n_fetches,
                               r->fetches, r->n_targets, r->targets, cfg, &plan);
  if (!st) st = npuP_weights_externalize(s->weights, s->cur->state.graph, plan);
  if (!st) st = share_arena(s, plan);
  if (!st) {
    plan->id = s->n_compiled++;
    plan->runs_alone = plan_runs_alone(s, plan);
  }
  if (st) {
    npuP_free(ctx, plan);
    return st;
  }
  if (s->cur->n_plans == MAX_PLANS) {
    npuP_free(ctx, s->cur->plans[0]);
    memmove(s->cur->plans, s->cur->plans + 1, (MAX_PLANS - 1) * sizeof s->cur->plans[0]);
    s->cur->n_plans--;
  }
  s->cur->plans[s->cur->n_plans] = plan;
  s->cur->last_plan = s->cur->n_plans++;
  *out = plan;
  return NPU_OK;
}

/* dynamic_dims (compile/dims_profiles.c): the first run of a signature (no plan of it cached
   for any other profile) also compiles the other profiles' plans, from stand-in feeds of their
   shapes: profiles 0 .. PROFILE_PLANS-1 (the others compile at their own first run, so that
   one signature's profiles cannot flush the cache).  A profile that fails to compile fails
   the run, named, and takes this run's new plans out of the cache with it. */
#define PROFILE_PLANS (MAX_PLANS / 2)

static npu_status signature_seen(npu_session *s, int profile, const run_sig *r,
                                 npu_tensor *const *feed_tensors, bool *seen) {
  *seen = false;
  for (int k = 0; k < npuP_dims_n_profiles(s->dims) && !*seen; k++) {
    npu_tensor *const *in;
    if (k == profile) continue;
    npu_status st = npuP_dims_feeds(s->dims, s->ctx, k, r->n_feeds, r->feeds, feed_tensors, &in);
    if (st) return st;
    *seen = cached_plan(s, r, in, false) >= 0;
  }
  return NPU_OK;
}

static npu_status compile_profiles(npu_session *s, npuP_config *cfg, int profile,
                                   const run_sig *r, npu_tensor *const *feed_tensors) {
  npu_status st = NPU_OK;
  int n_new = 1; /* own, the last plan cached */
  for (int k = 0; k < npuP_dims_n_profiles(s->dims) && k < PROFILE_PLANS && !st; k++) {
    npu_tensor *const *in;
    npuE_plan *plan;
    if (k == profile) continue;
    st = npuP_dims_feeds(s->dims, s->ctx, k, r->n_feeds, r->feeds, feed_tensors, &in);
    if (st || cached_plan(s, r, in, false) >= 0) continue; /* (two profiles alike here) */
    st = compile_plan(s, cfg, r, in, &plan);
    if (st) st = npuC_error_prefix(s->ctx, st, "dynamic_dims profile %d", k);
    else n_new++;
  }
  /* compile_hybrid_mode: and the dynamic-shape plan, for the feeds outside the profiles */
  if (!st && profile != NPUP_DIMS_OUTSIDE && npuP_dims_hybrid(s->dims)) {
    npu_tensor *const *in;
    npuE_plan *plan;
    st = npuP_dims_feeds(s->dims, s->ctx, -1, r->n_feeds, r->feeds, feed_tensors, &in);
    if (!st && cached_plan(s, r, in, true) < 0) {
      st = compile_plan(s, cfg, r, in, &plan);
      if (st) st = npuC_error_prefix(s->ctx, st, "compile_hybrid_mode's dynamic-shape plan");
      else n_new++;
    }
  }
  if (st) {
    for (int i = s->cur->n_plans - n_new; i < s->cur->n_plans; i++) npuP_free(s->ctx, s->cur->plans[i]);
    s->cur->n_plans -= n_new;
    s->cur->last_plan = 0;
    return st;
  }
  /* own stays where it was cached, before the new ones (PROFILE_PLANS < MAX_PLANS: the cache
     drops older plans first) */
  s->cur->last_plan = s->cur->n_plans - n_new;
  return NPU_OK;
}

/* The plan for this signature: the cached one, else compiled now and cached.  Run and explain
   share it, so explain describes exactly what a run would execute. */
static npu_status find_plan(npu_session *s, const char *fn, int n_feeds, const int *feed_values,
                            npu_tensor *const *feed_tensors, int n_fetches,
                            const int *fetch_values, int n_targets, const int *target_nodes,
                            npuE_plan **out) {
  npu_context *ctx = s->ctx;
  *out = NULL;
  if (s->closed)
    return npuC_error(ctx, NPU_ERR_STATE, "the session is closed");
  if (n_feeds < 0 || n_fetches < 0 || n_targets < 0 || (n_feeds && (!feed_values || !feed_tensors)) ||
      (n_fetches && !fetch_values) || (n_targets && !target_nodes))
    return npuC_error(ctx, NPU_ERR_ARG, "%s: bad argument arrays", fn);
  for (int i = 0; i < n_feeds; i++)
    if (!feed_tensors[i]) return npuC_error(ctx, NPU_ERR_ARG, "feed %d is NULL", i + 1);
  npu_status st = reserve_variables(s);
  if (st) return st;
  if (npuP_graph_configs_stale(&s->graph_configs, s->cur->state.graph)) {
    drop_plans(s); /* a node's graph-level config changed: plans borrow the old configs */
    npuP_graph_configs_free(ctx, &s->graph_configs, s->cur->state.graph);
  }
  if (s->compile.accel.on || s->graph_configs.n) update_accelerate(s);

  run_sig r = {n_feeds, feed_values, n_fetches, fetch_values, n_targets, target_nodes};
  npuE_plan *plan = NULL;
  int profile = -1;
  if ((st = lookup(s, &r, feed_tensors, false, &plan))) return st;
  if (!plan) {
    /* dynamic_dims: the profile of the feeds, -1 for none, NPUP_DIMS_OUTSIDE (hybrid) for the
       dynamic-shape plan (a cached static plan was compiled for feeds that passed this check:
       its shapes are the run's) */
    st = npuP_dims_match(&s->dims, ctx, s->options, s->cur->state.graph, n_feeds, feed_values,
                         feed_tensors, &profile);
    if (st) return st;
    /* a dynamic-shape plan that takes these feeds (never for a profile's: its static plan) */
    if (profile < 0 && (st = lookup(s, &r, feed_tensors, true, &plan))) return st;
  }
  if (!plan) {
    /* the session's config, or a graph-level one (set_graph_exec_config) the run reaches */
    npuP_config *cfg;
    bool made;
    st = npuP_config_for_run(&s->graph_configs, ctx, s->cur->state.graph, s->options, &s->compile,
                             n_feeds, feed_values, feed_tensors, n_fetches, fetch_values,
                             n_targets, target_nodes, &cfg, &made);
    if (st) return st;
    if (made && cfg->accel.on) cfg->precision = accelerate_precision(s, cfg);
    bool seen = true;
    if (profile != -1) st = signature_seen(s, profile, &r, feed_tensors, &seen);
    /* what the plan is compiled from: the feeds, or stand-ins with some dims -1 */
    npu_tensor *const *in = feed_tensors;
    if (st) return st;
    if (profile == NPUP_DIMS_OUTSIDE)
      st = npuP_dims_feeds(s->dims, ctx, -1, n_feeds, feed_values, feed_tensors, &in);
    else if (profile == -1)
      st = generalized_feeds(s, cfg, &r, feed_tensors, &in);
    if (!st) st = compile_plan(s, cfg, &r, in, &plan);
    if (!st && !seen) st = compile_profiles(s, cfg, profile, &r, feed_tensors);
    if (st) return st;
  }
  *out = plan;
  return NPU_OK;
}

void npu_session_cancel(npu_session *s) {
  if (s) atomic_fetch_add(&s->cancel_epoch, 1);
}

/* Arms the lane's watch for a run (core/watch.c): the cancel counters as they are now, the
   run's deadline, the host's poll; the pool (when the run has it) and the iterators poll it
   too. */
static void arm_watch(npu_session *s, lane *ln, const npu_run_options *ro) {
  npuC_watch *w = &ln->watch;
  npuE_state *st = &ln->state;
  w->session_epoch = &s->cancel_epoch;
  w->context_epoch = &s->ctx->cancel_epoch;
  w->session_start = atomic_load(&s->cancel_epoch);
  w->context_start = atomic_load(&s->ctx->cancel_epoch);
  st->timeout_ms = ro && ro->timeout_in_ms > 0 ? ro->timeout_in_ms : 0;
  w->deadline_ns = st->timeout_ms ? npuC_now_ns() + st->timeout_ms * 1000000 : 0;
  w->op_deadline_ns = 0;
  w->interrupt = ro ? ro->interrupt : NULL;
  w->interrupt_ud = ro ? ro->interrupt_ud : NULL;
  w->hold = 0;
  atomic_store(&w->stopped, NPUC_GO);
  st->watch = w;
  st->run_options = ro;
  st->iterators.watch = w;
  st->iterators.wait_ms = st->op_wait_ms;
}

static void disarm_watch(lane *ln) {
  ln->state.watch = NULL;
  ln->state.run_options = NULL;
  ln->state.iterators.watch = NULL;
  ln->state.iterators.wait_ms = 0;
}

/* Takes a lane for a run on this thread, with s->lock held: `whole`, lane 0 and the session
   alone (once the runs in progress have finished; no run starts meanwhile); else any free
   lane, lane 0 first, waiting for one.  NPU_ERR_STATE when this thread is running s already
   (a host op calling back into it). */
static npu_status lane_enter(npu_session *s, bool whole, lane **out) {
  pthread_t me = pthread_self();
  if (runs_here(s))
    return npuC_error(s->ctx, NPU_ERR_STATE, "npu_session_run: the session is already "
                      "running on this thread (a host op called back into it)");
  if (whole) s->n_whole_waiting++;
  for (;;) {
    lane *ln = NULL;
    if (!s->exclusive && whole && s->n_busy == 0) {
      s->exclusive = true;
      s->n_whole_waiting--;
      ln = &s->lanes[0];
    }
    for (int k = 0; !ln && !whole && !s->exclusive && !s->n_whole_waiting && k < s->n_lanes; k++)
      if (!s->lanes[k].busy) ln = &s->lanes[k];
    if (ln) {
      ln->busy = true;
      ln->owner = me;
      s->n_busy++;
      *out = ln;
      return NPU_OK;
    }
    pthread_cond_wait(&s->changed, &s->lock);
  }
}

static void lane_leave(npu_session *s, lane *ln) {
  ln->busy = false;
  s->n_busy--;
  if (ln == &s->lanes[0]) s->exclusive = false;
  if (s->close_pending && s->n_busy == 0) { /* closed during the runs: the last one frees */
    free_run_state(s);
    s->close_pending = false;
  }
  pthread_cond_broadcast(&s->changed);
}

/* The plan of this run on a lane of its own (taken here, with the lock held: the session's
   caches and compilation are shared); the lane is given back by the caller. */
static npu_status enter_and_find(npu_session *s, int n_feeds, const int *feed_values,
                                 npu_tensor *const *feed_tensors, int n_fetches,
                                 const int *fetch_values, int n_targets,
                                 const int *target_nodes, lane **ln_out, npuE_plan **plan) {
  lane *ln = NULL;
  *plan = NULL;
  /* one lane: every run takes the session whole, as a session always did */
  npu_status st = lane_enter(s, s->n_lanes == 1, &ln);
  for (int attempt = 0; !st; attempt++) {
    s->cur = ln;
    st = find_plan(s, "npu_session_run", n_feeds, feed_values, feed_tensors, n_fetches,
                   fetch_values, n_targets, target_nodes, plan);
    s->cur = &s->lanes[0];
    if (st || s->exclusive || !(*plan)->runs_alone || attempt) break;
    /* it writes what other runs read: again, on lane 0, alone */
    lane_leave(s, ln);
    ln = NULL;
    *plan = NULL;
    st = lane_enter(s, true, &ln);
  }
  *ln_out = ln;
  return st;
}

npu_status npu_session_run_with_options(npu_session *s, const npu_run_options *ro, int n_feeds,
                                        const int *feed_values, npu_tensor *const *feed_tensors,
                                        int n_fetches, const int *fetch_values,
                                        npu_tensor **fetch_out, int n_targets,
                                        const int *target_nodes) {
  if (!s) return NPU_ERR_ARG;
  for (int i = 0; fetch_out && i < n_fetches; i++) fetch_out[i] = NULL;
  if (n_fetches > 0 && !fetch_out)
    return npuC_error(s->ctx, NPU_ERR_ARG, "npu_session_run: bad argument arrays");
  if (ro && ro->timeout_in_ms < 0)
    return npuC_error(s->ctx, NPU_ERR_ARG, "npu_session_run: timeout_in_ms must be >= 0, got %lld",
                      (long long)ro->timeout_in_ms);
  if (ro && ro->progress_every < 0)
    return npuC_error(s->ctx, NPU_ERR_ARG, "npu_session_run: progress_every must be >= 0 "
                      "(0: about a hundred calls), got %lld", (long long)ro->progress_every);
  lane *ln = NULL;
  npuE_plan *plan = NULL;
  pthread_mutex_lock(&s->lock);
  npu_status st = enter_and_find(s, n_feeds, feed_values, feed_tensors, n_fetches, fetch_values,
                                 n_targets, target_nodes, &ln, &plan);
  pthread_mutex_unlock(&s->lock);
  if (!ln) return st;
  npuE_state *state = &ln->state;
  arm_watch(s, ln, ro);
  /* The device's thread pool serves one run at a time: the first takes it, runs beside it
     compute on their own threads (kernels give the same bits at any thread count). */
  bool expected = false;
  bool pooled = atomic_compare_exchange_strong(&s->ctx->pool_busy, &expected, true);
  state->serial = !pooled;
  npuC_watch *pool_watch = pooled ? npuC_pool_set_watch(s->ctx->pool, &ln->watch) : NULL;
  if (st) { /* the plan lookup failed (a wait to pick a plan stopped: named here) */
    npuC_stop why = (npuC_stop)atomic_load(&ln->watch.stopped);
    if (why && (st == NPU_ERR_CANCELLED || st == NPU_ERR_TIMEOUT)) st = npuE_stop(state, NULL, why);
  }
  /* A loop whose dataset's element changes shape returns early (state.loop_left): the plan
     of the new shape runs the remaining iterations, and its last step gives the fetches. */
  state->loop_left = 0;
  npu_graph *graph = state->graph;
  while (!st) {
    atomic_fetch_add(&graph->n_running, 1); /* no node added while it runs (core/graph.c) */
    st = npuE_run(state, plan, feed_tensors, fetch_out);
    atomic_fetch_sub(&graph->n_running, 1);
    if (st || !state->loop_left) break;
    pthread_mutex_lock(&s->lock);
    s->cur = ln;
    st = find_plan(s, "npu_session_run", n_feeds, feed_values, feed_tensors, n_fetches,
                   fetch_values, n_targets, target_nodes, &plan);
    s->cur = &s->lanes[0];
    pthread_mutex_unlock(&s->lock);
    npuC_stop why = (npuC_stop)atomic_load(&ln->watch.stopped);
    if (why && (st == NPU_ERR_CANCELLED || st == NPU_ERR_TIMEOUT)) st = npuE_stop(state, NULL, why);
  }
  state->loop_left = 0;
  disarm_watch(ln);
  if (pooled) {
    npuC_pool_set_watch(s->ctx->pool, pool_watch);
    atomic_store(&s->ctx->pool_busy, false);
  }
  pthread_mutex_lock(&s->lock);
  lane_leave(s, ln);
  pthread_mutex_unlock(&s->lock);
  return st;
}

npu_status npu_session_run(npu_session *s, int n_feeds, const int *feed_values,
                           npu_tensor *const *feed_tensors, int n_fetches,
                           const int *fetch_values, npu_tensor **fetch_out, int n_targets,
                           const int *target_nodes) {
  return npu_session_run_with_options(s, NULL, n_feeds, feed_values, feed_tensors, n_fetches,
                                      fetch_values, fetch_out, n_targets, target_nodes);
}

/* npu_session_explain and npu_session_explain_dot: the plan these feeds, fetches and targets
   run (compiled when none is cached), as JSON (dot false) or Graphviz text, into *text_out. */
static npu_status explain_plan(npu_session *s, const char *fn, bool dot, int n_feeds,
                               const int *feed_values, npu_tensor *const *feed_tensors,
                               int n_fetches, const int *fetch_values, int n_targets,
                               const int *target_nodes, char **text_out) {
  if (!s) return NPU_ERR_ARG;
  if (!text_out)
    return npuC_error(s->ctx, NPU_ERR_ARG, "%s: %s is NULL", fn, dot ? "dot_out" : "json_out");
  *text_out = NULL;
  npuE_plan *plan;
  lane *ln;
  pthread_mutex_lock(&s->lock);
  npu_status st = lane_enter(s, true, &ln);
  if (!st) {
    st = find_plan(s, fn, n_feeds, feed_values, feed_tensors, n_fetches, fetch_values,
                   n_targets, target_nodes, &plan);
    const npu_graph *g = s->cur->state.graph;
    if (!st)
      st = dot ? npuP_plan_dot(s->ctx, g, plan, text_out)
               : npuP_explain(s->ctx, g, plan->config, plan, text_out);
    lane_leave(s, ln);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

npu_status npu_session_explain(npu_session *s, int n_feeds, const int *feed_values,
                               npu_tensor *const *feed_tensors, int n_fetches,
                               const int *fetch_values, int n_targets, const int *target_nodes,
                               char **json_out) {
  return explain_plan(s, "npu_session_explain", false, n_feeds, feed_values, feed_tensors,
                      n_fetches, fetch_values, n_targets, target_nodes, json_out);
}

npu_status npu_session_explain_dot(npu_session *s, int n_feeds, const int *feed_values,
                                   npu_tensor *const *feed_tensors, int n_fetches,
                                   const int *fetch_values, int n_targets, const int *target_nodes,
                                   char **dot_out) {
  return explain_plan(s, "npu_session_explain_dot", true, n_feeds, feed_values, feed_tensors,
                      n_fetches, fetch_values, n_targets, target_nodes, dot_out);
}

npu_status npu_graph_to_dot(const npu_graph *g, char **dot_out) {
  if (!g) return NPU_ERR_ARG;
  if (!dot_out) return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_to_dot: dot_out is NULL");
  return npuP_graph_dot(g->ctx, g, dot_out);
}

npu_status npu_session_last_plan(const npu_session *s, int *n_steps, int *n_folded) {
  if (!s->cur->n_plans) return npuC_error(s->ctx, NPU_ERR_STATE, "the session has not run yet");
  const npuE_plan *p = s->cur->plans[s->cur->last_plan];
  *n_steps = p->n_steps;
  *n_folded = p->n_folded;
  return NPU_OK;
}

/* ---- freezing (io/freeze.c) ---- */

/* Which variables the outputs need and are to freeze: their indices (n_variables entries). */
static npu_status freeze_list(npu_graph *g, int n_outputs, const int *output_nodes,
                              const unsigned char *keep, int *vars, int *n_vars) {
  npu_context *ctx = g->ctx;
  bool *frozen = npuC_alloc(ctx, ((size_t)g->n_variables + 1) * sizeof *frozen);
  bool *mark = npuC_alloc(ctx, ((size_t)g->n_nodes + 1) * sizeof *mark);
  npu_status st = frozen && mark ? NPU_OK : NPU_ERR_NOMEM;
  if (!st) {
    for (int v = 0; v < g->n_variables; v++) frozen[v] = !(keep && keep[v]);
    memset(mark, 0, ((size_t)g->n_nodes + 1) * sizeof *mark);
    st = npuI_freeze_reach(g, n_outputs, output_nodes, frozen, mark);
  }
  *n_vars = 0;
  for (int v = 0; !st && v < g->n_variables; v++)
    if (frozen[v] && mark[g->variables[v].node]) vars[(*n_vars)++] = v;
  npuC_free(ctx, frozen);
  npuC_free(ctx, mark);
  return st;
}

npu_status npu_session_freeze(npu_session *s, npu_graph *g, int n_outputs,
                              const int *output_nodes, const unsigned char *keep,
                              npu_graph **out) {
  if (out) *out = NULL;
  if (!s || !g || !out) return npuC_error(s ? s->ctx : NULL, NPU_ERR_ARG, "npu_session_freeze: NULL argument");
  if (s->closed) return npuC_error(s->ctx, NPU_ERR_STATE, "npu_session_freeze: the session is closed");
  if (g != s->cur->state.graph)
    return npuC_error(s->ctx, NPU_ERR_STATE, "freezing a graph: the graph is not the session's "
                      "(the values are read from the session running it)");
  npu_context *ctx = s->ctx;
  size_t nv = (size_t)g->n_variables + 1;
  int *vars = npuC_alloc(ctx, nv * sizeof *vars);
  int *fetch = npuC_alloc(ctx, nv * sizeof *fetch);
  npu_tensor **values = npuC_alloc(ctx, nv * sizeof *values);
  int n = 0;
  npu_status st = vars && fetch && values ? NPU_OK : NPU_ERR_NOMEM;
  if (!st) st = freeze_list(g, n_outputs, output_nodes, keep, vars, &n);
  for (int i = 0; !st && i < n; i++) fetch[i] = npu_graph_output(g, g->variables[vars[i]].node, 0);
  /* read as a script's sess:run(variables) would: one run, the values of now */
  bool fetched = false;
  if (!st && n > 0) fetched = !(st = npu_session_run(s, 0, NULL, NULL, n, fetch, values, 0, NULL));
  if (!st) st = npu_graph_freeze(g, n_outputs, output_nodes, n, vars, values, out);
  for (int i = 0; fetched && i < n; i++) npu_tensor_release(values[i]); /* the consts hold theirs */
  npuC_free(ctx, vars);
  npuC_free(ctx, fetch);
  npuC_free(ctx, values);
  return st;
}

/* ---- ranks (dist/dist.h) ---- */

npu_status npu_dist_ranks(npu_context *ctx, int *rank_id, int *rank_size, int *local_rank_id,
                          int *local_rank_size) {
  npuD_ranks r;
  npu_status st = npuD_get_ranks(ctx, &r);
  if (rank_id) *rank_id = r.rank;
  if (rank_size) *rank_size = r.size;
  if (local_rank_id) *local_rank_id = r.local_rank;
  if (local_rank_size) *local_rank_size = r.local_size;
  return st;
}

int npu_dist_available(void) { return npuD_built_with_mpi(); }
