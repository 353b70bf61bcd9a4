/*
 * dump.c — the data dump (enable_dump) and overflow detection (enable_dump_debug), as the
 * executor's observer (exec/observe.h).  docs/debugging.md is the user's side of this file.
 *
 * Layout (seeds/002 §5.4): {dump_path}/{time}/{deviceid}/{model_name}/{model_id}/{data_index}/
 *   time        the session's creation time, YYYYMMDDhhmmss (local time).  The directory is
 *               made exclusively (mkdir, not "exists is fine") when the session first writes:
 *               if another session (of this process or another) already has that name, _1,
 *               _2, ... is appended, so two sessions never share one.
 *   deviceid    session_device_id.
 *   model_name  the node of the plan's first fetch (else of its first target), sanitised;
 *   model_id    npuE_plan.id — a plan is one fetch/feed signature, the reference's model.
 *   data_index  enable_dump: the plan's iteration when dump_step is set, else the number of
 *               iterations of the plan dumped before (from 0); enable_dump_debug: always the
 *               plan's iteration.  A plan counts its own iterations from 0
 *               (iterations_per_loop runs several per call), as a model does.
 * Files: {op_type}.{op_name}.{taskid}.{timestamp}.{input|output}.{i}.npy — taskid the step's
 * number in the plan (npuE_step.index: top-level steps by position, the steps nested in cond
 * branches and loop bodies after them), op_name followed, for a step inside while loops, by
 * .iter<i> (nested loops: .iter<outer>_<inner>) so each iteration's files are apart; timestamp the microseconds since the Unix epoch when the step began (one
 * per step: its input and output files share it).  dump_data=stats writes stats.csv in the
 * iteration's directory instead, one row per tensor.  '.', '/', '\\' and ' ' in names
 * become '_'.
 *
 * What is dumped: the steps that compute (kernel steps: an op, a fused op, a precision cast)
 * and the data operators (fed values, iterator elements: their output, whatever dump_mode).
 * A step is named after the node whose value it outputs, so a fused step is named after the
 * last node it absorbed; dump_layer selects it by that name, its own node's or any absorbed
 * node's.  Variables, assignments, identities and constants are not dumped.
 *
 * Invariants: the schedule (which steps of a plan dump what) is computed once per plan, at its
 * first run, which is also when dump_layer's names are checked against the graph; a failing
 * event leaves no file open (RUN_END closes the stats file of an unfinished iteration); the
 * directories are made only when a file goes into them.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/half.h"
#include "exec/observe.h"
#include "ops/grad.h"
#include "options/options_int.h"

#define DUMP_PATH_MAX 4096
#define DUMP_NAME_MAX 256
#define F16_MAX_BITS 0x7bffu /* 65504, the largest float16: where float16 saturates */

/* What a step does for the dump (plan_dump.flags). */
enum {
  STEP_IN = 1,    /* dump its inputs (before it runs) */
  STEP_OUT = 2,   /* dump its outputs (after) */
  STEP_DATA = 4,  /* a data operator (iterator element): its outputs, whatever dump_mode */
  STEP_CHECK = 8  /* enable_dump_debug: check it for overflow */
};

/* A fed value dumped as a data operator at the start of each dumped iteration. */
typedef struct feed_dump {
  int value;
  int task; /* the first step that reads it: data operators have no task of their own */
} feed_dump;

/* A plan's schedule and counters, kept for the session's life (keyed by npuE_plan.id: plans
   may be dropped from the session's cache and their memory reused). */
typedef struct plan_dump {
  int id;
  uint64_t n_iterations; /* the plan's iterations run so far */
  uint64_t n_dumped;     /* its iterations that wrote something */
  uint8_t *flags;        /* one per step of the plan */
  int n_feeds;
  feed_dump *feeds;
  char model[DUMP_NAME_MAX + 24]; /* "{model_name}/{model_id}" */
} plan_dump;

struct npuE_dump {
  npu_context *ctx;
  const char *what;       /* "enable_dump" or "enable_dump_debug", for messages */
  bool dump, check;       /* enable_dump; enable_dump_debug with a check to do */
  bool in, out, stats;    /* dump_mode, dump_data */
  char path[DUMP_PATH_MAX]; /* dump_path, trailing slashes dropped */
  char stamp[32];         /* the session's creation time */
  int device_id;
  int n_ranges;           /* dump_step: 0 = every iteration */
  int64_t (*ranges)[2];
  int n_layers;           /* dump_layer: 0 = every operator */
  char **layers;          /* pointers into layer_text */
  char *layer_text;
  plan_dump *plans;
  int n_plans, cap_plans;
  /* the session's directory {dump_path}/{time}/{deviceid}, "" until made */
  char root[DUMP_PATH_MAX];
  /* the current run and iteration */
  plan_dump *cur;
  bool in_iteration, selected, wrote;
  uint64_t iteration, data_index;
  char dir[DUMP_PATH_MAX]; /* the iteration's directory, "" until made */
  FILE *stats_file;
  int64_t step_us;         /* when the current step began */
  const npuE_nest *nest;   /* where the current step is nested (the run's npuE_state) */
};

/* ---- small helpers ---- */

/* Microseconds since the Unix epoch, for file names (observe.h). */
int64_t npuE_dump_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The reference's rule for names in paths: '.', '/', '\\' and ' ' become '_' (observe.h;
   exception_dump.c names its files the same way). */
void npuE_dump_sanitise(char *dst, size_t n, const char *src) {
  size_t i = 0;
  for (; src[i] && i + 1 < n; i++) {
    char c = src[i];
    dst[i] = c == '.' || c == '/' || c == '\\' || c == ' ' ? '_' : c;
  }
  dst[i] = 0;
}

static npu_status too_long(npuE_dump *d, const char *start) {
  return npuC_error(d->ctx, NPU_ERR_IO, "%s: a path under '%s' is too long", d->what, start);
}

/* {dir}/{type}.{name}.{task}.{us}.{kind}.{index}.npy, or {...}.{us}.{kind} when index < 0
   (observe.h): snprintf's result. */
int npuE_dump_file_path(char *buf, size_t n, const char *dir, const char *type, const char *name,
                        int task, int64_t us, const char *kind, int index) {
  return index < 0 ? snprintf(buf, n, "%s/%s.%s.%d.%" PRId64 ".%s", dir, type, name, task, us,
                              kind)
                   : snprintf(buf, n, "%s/%s.%s.%d.%" PRId64 ".%s.%d.npy", dir, type, name, task,
                              us, kind, index);
}

/* ---- options ---- */

/* One piece of dump_step, "n" or "a-b", read with the splitters options.c's check uses (blanks
   around the numbers, tabs included, are trimmed the same way). */
static int piece_step(const char *p, const char *e, void *ud, char *why, size_t n) {
  npuE_dump *d = ud;
  const char *dash = memchr(p, '-', (size_t)(e - p));
  int64_t a, b;
  if (dash ? npuO_span_int(p, dash, &a) || npuO_span_int(dash + 1, e, &b)
           : npuO_span_int(p, e, &a)) {
    snprintf(why, n, "cannot read '%.*s'", (int)(e - p), p);
    return -1;
  }
  d->ranges[d->n_ranges][0] = a;
  d->ranges[d->n_ranges][1] = dash ? b : a;
  d->n_ranges++;
  return 0;
}

/* dump_step "0|3-5|10" (validated by options.c) into ranges. */
static npu_status parse_steps(npuE_dump *d, const char *s) {
  int n = 1;
  for (const char *q = s; *q; q++) n += *q == '|';
  d->ranges = npuC_alloc(d->ctx, (size_t)n * sizeof *d->ranges);
  if (!d->ranges) return NPU_ERR_NOMEM;
  char why[128];
  if (npuO_for_pieces(s, s + strlen(s), '|', piece_step, d, why, sizeof why))
    return npuC_error(d->ctx, NPU_ERR_OPTION, "dump_step '%s': %s", s, why);
  return NPU_OK;
}

/* dump_layer: names separated by white space. */
static npu_status parse_layers(npuE_dump *d, const char *s) {
  if (!(d->layer_text = npuC_strdup(d->ctx, s))) return NPU_ERR_NOMEM;
  int n = 0;
  for (const char *q = s; *q; q++)
    n += !isspace((unsigned char)*q) && (q == s || isspace((unsigned char)q[-1]));
  if (!(d->layers = npuC_alloc(d->ctx, (size_t)(n ? n : 1) * sizeof *d->layers)))
    return NPU_ERR_NOMEM;
  for (char *q = d->layer_text; *q;) {
    while (*q && isspace((unsigned char)*q)) *q++ = 0;
    if (!*q) break;
    d->layers[d->n_layers++] = q;
    while (*q && !isspace((unsigned char)*q)) q++;
  }
  return NPU_OK;
}

void npuE_dump_free(npu_context *ctx, npuE_dump *d) {
  if (!d) return;
  if (d->stats_file) fclose(d->stats_file);
  for (int i = 0; i < d->n_plans; i++) {
    npuC_free(ctx, d->plans[i].flags);
    npuC_free(ctx, d->plans[i].feeds);
  }
  npuC_free(ctx, d->plans);
  npuC_free(ctx, d->ranges);
  npuC_free(ctx, d->layers);
  npuC_free(ctx, d->layer_text);
  npuC_free(ctx, d);
}

npu_status npuE_dump_new(npu_context *ctx, const npu_options *o, const npuE_observed *who,
                         npuE_dump **out) {
  *out = NULL;
  bool dump = npuO_bool(o, NPUO_enable_dump), debug = npuO_bool(o, NPUO_enable_dump_debug);
  bool check = debug && strcmp(npuO_string(o, NPUO_dump_debug_mode), "atomic_overflow") != 0;
  if (debug && !check)
    npuC_log(ctx, 1, "enable_dump_debug: dump_debug_mode atomic_overflow has nothing to detect "
             "on the CPU device (no Atomic Add from a unified buffer); nothing is checked");
  if (!dump && !check) return NPU_OK;
  npuE_dump *d = npuC_calloc(ctx, 1, sizeof *d);
  if (!d) return NPU_ERR_NOMEM;
  d->ctx = ctx;
  d->what = dump ? "enable_dump" : "enable_dump_debug";
  d->dump = dump;
  d->check = check;
  const char *mode = npuO_string(o, NPUO_dump_mode);
  d->in = strcmp(mode, "output") != 0;
  d->out = strcmp(mode, "input") != 0;
  d->stats = strcmp(npuO_string(o, NPUO_dump_data), "stats") == 0;
  d->device_id = who->device_id;
  const char *path = npuO_string(o, NPUO_dump_path);
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  npu_status s = NPU_OK;
  if (len >= sizeof d->path)
    s = npuC_error(ctx, NPU_ERR_OPTION, "dump_path '%s' is too long", path);
  else
    memcpy(d->path, path, len);
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(d->stamp, sizeof d->stamp, "%Y%m%d%H%M%S", &tm);
  if (!s && npuO_is_set(o, NPUO_dump_step)) s = parse_steps(d, npuO_string(o, NPUO_dump_step));
  if (!s && dump && npuO_is_set(o, NPUO_dump_layer))
    s = parse_layers(d, npuO_string(o, NPUO_dump_layer));
  if (s) {
    npuE_dump_free(ctx, d);
    return s;
  }
  *out = d;
  return NPU_OK;
}

/* ---- the schedule of a plan ---- */

static bool named(const npuE_dump *d, const char *name) {
  for (int i = 0; i < d->n_layers; i++)
    if (strcmp(d->layers[i], name) == 0) return true;
  return false;
}

/* The node a step is named after: the one whose value it outputs (a fused step outputs its
   last absorbed node's value), else its own. */
int npuE_dump_step_node(const npuE_plan *p, const npuE_step *step) {
  return step->n_out ? p->values[step->out[0]].node : step->node;
}

void npuE_dump_step_name(char *dst, size_t n, const npu_graph *g, const npuE_plan *p,
                         const npuE_step *step, const npuE_nest *nest) {
  npuE_dump_sanitise(dst, n, g->nodes[npuE_dump_step_node(p, step)].name);
  int depth = nest->depth < NPUE_MAX_LOOPS ? nest->depth : NPUE_MAX_LOOPS;
  size_t len = strlen(dst);
  for (int i = 0; i < depth && len + 1 < n; i++) {
    int w = snprintf(dst + len, n - len, "%s%" PRId64, i ? "_" : ".iter", nest->iteration[i]);
    if (w < 0 || (size_t)w >= n - len) break; /* cut: snprintf left it terminated */
    len += (size_t)w;
  }
}

static bool layer_selects(const npuE_dump *d, const npu_graph *g, const npuE_plan *p,
                          const npuE_step *step) {
  if (!d->n_layers) return true;
  if (named(d, g->nodes[npuE_dump_step_node(p, step)].name) ||
      named(d, g->nodes[step->node].name))
    return true;
  for (int i = 0; i < step->n_absorbed; i++)
    if (named(d, g->nodes[step->absorbed[i]].name)) return true;
  return false;
}

static int feed_index(const npuE_plan *p, int v) {
  for (int i = 0; i < p->n_feeds; i++)
    if (p->feeds[i] == v) return i;
  return -1;
}

/* dump_layer's names must be nodes of the graph (those the plan pruned or folded are fine:
   there is nothing to dump of them in this plan). */
static npu_status check_layers(npuE_dump *d, const npu_graph *g) {
  for (int i = 0; i < d->n_layers; i++) {
    if (npuG_find_node(g, d->layers[i]) >= 0) continue;
    npuC_nearest near;
    npuC_nearest_init(&near, d->layers[i]);
    for (int n = 0; n < g->n_nodes; n++) npuC_nearest_try(&near, g->nodes[n].name);
    const char *best = npuC_nearest_result(&near);
    return npuC_error(d->ctx, NPU_ERR_NOT_FOUND, "dump_layer: the graph has no node '%s'%s%s%s",
                      d->layers[i], best ? " (did you mean '" : "", best ? best : "",
                      best ? "'?)" : "");
  }
  return NPU_OK;
}

/* Marks the data operators step k's input v comes from (through identities): a fed value, or
   an iterator element. */
static void mark_data(const npuE_plan *p, const int *producer, uint8_t *flags, bool *fed,
                      int v) {
  for (;;) {
    int f = feed_index(p, v);
    if (f >= 0) {
      fed[f] = true;
      return;
    }
    int k = producer[v];
    if (k < 0) return; /* a constant, a folded value */
    const npuE_step *s = p->all_steps[k];
    if (s->def->kind == NPUX_KIND_GET_NEXT) flags[k] |= STEP_DATA;
    if (s->def->kind != NPUX_KIND_IDENTITY || s->n_in < 1) return;
    v = s->in[0];
  }
}

static npu_status make_schedule(npuE_dump *d, const npu_graph *g, const npuE_plan *p,
                                plan_dump *pd) {
  npu_context *ctx = d->ctx;
  npu_status s = check_layers(d, g);
  if (s) return s;
  pd->id = p->id;
  pd->flags = npuC_calloc(ctx, (size_t)(p->n_all_steps ? p->n_all_steps : 1), 1);
  int *producer = npuC_alloc(ctx, (size_t)(p->n_values ? p->n_values : 1) * sizeof *producer);
  bool *fed = npuC_calloc(ctx, (size_t)(p->n_feeds ? p->n_feeds : 1), sizeof *fed);
  if (!pd->flags || !producer || !fed) {
    s = NPU_ERR_NOMEM;
    goto done;
  }
  for (int v = 0; v < p->n_values; v++) producer[v] = -1;
  for (int k = 0; k < p->n_all_steps; k++)
    for (int i = 0; i < p->all_steps[k]->n_out; i++) producer[p->all_steps[k]->out[i]] = k;
  for (int k = 0; k < p->n_all_steps; k++) {
    const npuE_step *step = p->all_steps[k];
    npuX_kind kind = step->def->kind;
    if (kind == NPUX_KIND_KERNEL && d->check) pd->flags[k] |= STEP_CHECK;
    if (!d->dump) continue;
    if (kind == NPUX_KIND_GET_NEXT && layer_selects(d, g, p, step)) pd->flags[k] |= STEP_DATA;
    if (kind != NPUX_KIND_KERNEL || !layer_selects(d, g, p, step)) continue;
    pd->flags[k] |= (d->in ? STEP_IN : 0) | (d->out ? STEP_OUT : 0);
    for (int i = 0; i < step->n_in; i++) mark_data(p, producer, pd->flags, fed, step->in[i]);
  }
  /* fed values: every one some step reads when dump_layer is unset, else those marked and
     those named */
  if (d->dump) {
    pd->feeds = npuC_alloc(ctx, (size_t)(p->n_feeds ? p->n_feeds : 1) * sizeof *pd->feeds);
    if (!pd->feeds) {
      s = NPU_ERR_NOMEM;
      goto done;
    }
    for (int f = 0; f < p->n_feeds; f++) {
      int v = p->feeds[f], task = -1;
      for (int k = 0; k < p->n_all_steps && task < 0; k++)
        for (int i = 0; i < p->all_steps[k]->n_in; i++)
          if (p->all_steps[k]->in[i] == v) task = k;
      if (task < 0) continue; /* fed and fetched, or read by nothing */
      if (d->n_layers && !fed[f] && !named(d, g->nodes[p->values[v].node].name)) continue;
      bool twice = false; /* one value fed twice in one signature: dump it once */
      for (int j = 0; j < pd->n_feeds; j++) twice |= pd->feeds[j].value == v;
      if (!twice) pd->feeds[pd->n_feeds++] = (feed_dump){.value = v, .task = task};
    }
  }
  /* the model's name: its first fetch's node, else its first target */
  const char *model = "graph";
  if (p->n_fetches) model = g->nodes[p->values[p->fetches[0]].node].name;
  else if (p->n_targets) model = g->nodes[p->targets[0]].name;
  char name[DUMP_NAME_MAX];
  npuE_dump_sanitise(name, sizeof name, model);
  snprintf(pd->model, sizeof pd->model, "%s/%d", name, p->id);
done:
  npuC_free(ctx, producer);
  npuC_free(ctx, fed);
  return s;
}

/* The plan's record, made (and the names checked) at its first run. */
static npu_status find_plan(npuE_dump *d, const npu_graph *g, const npuE_plan *p,
                            plan_dump **out) {
  for (int i = 0; i < d->n_plans; i++)
    if (d->plans[i].id == p->id) {
      *out = &d->plans[i];
      return NPU_OK;
    }
  if (d->n_plans == d->cap_plans) {
    int cap = d->cap_plans ? 2 * d->cap_plans : 4;
    plan_dump *grown = npuC_realloc(d->ctx, d->plans, (size_t)cap * sizeof *grown);
    if (!grown) return NPU_ERR_NOMEM;
    d->plans = grown;
    d->cap_plans = cap;
  }
  plan_dump *pd = &d->plans[d->n_plans];
  memset(pd, 0, sizeof *pd);
  npu_status s = make_schedule(d, g, p, pd);
  if (s) {
    npuC_free(d->ctx, pd->flags);
    npuC_free(d->ctx, pd->feeds);
    return s;
  }
  d->n_plans++;
  *out = pd;
  return NPU_OK;
}

/* ---- directories and files ---- */

/* {dump_path}/{time}[_n]/{deviceid}: the time directory is made exclusively, so it is this
   session's alone. */
static npu_status make_root(npuE_dump *d) {
  char stamp[DUMP_PATH_MAX], dir[DUMP_PATH_MAX];
  if (snprintf(stamp, sizeof stamp, "%s/%s", d->path, d->stamp) >= (int)sizeof stamp)
    return too_long(d, d->path);
  npu_status s = npuC_make_unique_dir(d->ctx, stamp, d->what, dir, sizeof dir);
  if (s) return s;
  if (snprintf(d->root, sizeof d->root, "%s/%d", dir, d->device_id) >= (int)sizeof d->root) {
    d->root[0] = 0;
    return too_long(d, dir);
  }
  return NPU_OK;
}

/* The current iteration's directory, made at its first file. */
static npu_status iteration_dir(npuE_dump *d) {
  if (d->dir[0]) return NPU_OK;
  npu_status s = d->root[0] ? NPU_OK : make_root(d);
  if (s) return s;
  if (snprintf(d->dir, sizeof d->dir, "%s/%s/%" PRIu64, d->root, d->cur->model, d->data_index) >=
      (int)sizeof d->dir) {
    d->dir[0] = 0;
    return too_long(d, d->root);
  }
  /* usually only the last level is new: one mkdir, the walk from the root when it is not */
  if (mkdir(d->dir, 0777) != 0 && errno != EEXIST &&
      (s = npuC_make_dirs(d->ctx, d->dir, d->what))) {
    d->dir[0] = 0;
    return s;
  }
  d->wrote = true;
  return NPU_OK;
}

/* Who a file is about: op type, op name (sanitised, for paths), the node's own name (for
   stats.csv, whose quoting keeps any name whole), task, timestamp. */
typedef struct dump_op {
  char type[DUMP_NAME_MAX], name[DUMP_NAME_MAX];
  const char *node_name;
  int task;
  int64_t us;
} dump_op;

/* type: the op type named (the node's own op's for a data operator; a step's, which may be a
   fused op or a cast, for a step). */
static void op_of_node(dump_op *op, const npu_graph *g, const char *type, int node, int task,
                       int64_t us) {
  npuE_dump_sanitise(op->type, sizeof op->type, type);
  npuE_dump_sanitise(op->name, sizeof op->name, g->nodes[node].name);
  op->node_name = g->nodes[node].name;
  op->task = task;
  op->us = us;
}

/* A step's files carry its loop iterations in the name (npuE_dump_step_name). */
static void op_of_step(dump_op *op, const npu_graph *g, const npuE_plan *p, int k,
                       const npuE_nest *nest, int64_t us) {
  const npuE_step *step = p->all_steps[k];
  op_of_node(op, g, step->def->name, npuE_dump_step_node(p, step), k, us);
  npuE_dump_step_name(op->name, sizeof op->name, g, p, step, nest);
}

/* The tensor as stored, in .npy; bfloat16 (no NumPy dtype) as float32, exactly (observe.h). */
npu_status npuE_dump_write_npy(npu_context *ctx, const npu_tensor *t, const char *path) {
  if (t->dtype != NPU_DTYPE_BF16) return npu_tensor_save_npy(ctx, t, path);
  npu_tensor *wide;
  npu_status s = npu_tensor_new(ctx, NPU_DTYPE_F32, t->ndim, t->shape, &wide);
  if (s) return s;
  const uint16_t *src = t->data;
  float *dst = wide->data;
  for (int64_t i = 0; i < t->numel; i++) dst[i] = npu_bf16_to_f32(src[i]);
  s = npu_tensor_save_npy(ctx, wide, path);
  npu_tensor_release(wide);
  return s;
}

static npu_status write_npy(npuE_dump *d, const npu_tensor *t, const char *path) {
  npu_status s = npuE_dump_write_npy(d->ctx, t, path);
  return s ? npuC_error_prefix(d->ctx, s, "%s", d->what) : NPU_OK;
}

/* ---- statistics ---- */

typedef struct tstats {
  int64_t n_finite, nan, pos_inf, neg_inf, zero;
  double min, max, sum;
} tstats;

static inline void accumulate(tstats *s, double x) {
  if (x != x) {
    s->nan++;
  } else if (isinf(x)) {
    if (x > 0) s->pos_inf++;
    else s->neg_inf++;
  } else {
    if (x == 0) s->zero++;
    if (!s->n_finite || x < s->min) s->min = x;
    if (!s->n_finite || x > s->max) s->max = x;
    s->n_finite++;
    s->sum += x;
  }
}

static void tensor_stats(const npu_tensor *t, tstats *s) {
  memset(s, 0, sizeof *s);
  int64_t n = t->numel;
#define STATS_LOOP(T, CONV)                                                                    \
  do {                                                                                         \
    const T *q = t->data;                                                                      \
    for (int64_t i = 0; i < n; i++) accumulate(s, (double)CONV(q[i]));                         \
  } while (0)
#define AS_IS(x) (x)
  switch (t->dtype) {
  case NPU_DTYPE_F32: STATS_LOOP(float, AS_IS); break;
  case NPU_DTYPE_F16: STATS_LOOP(uint16_t, npu_f16_to_f32); break;
  case NPU_DTYPE_BF16: STATS_LOOP(uint16_t, npu_bf16_to_f32); break;
  case NPU_DTYPE_F64: STATS_LOOP(double, AS_IS); break;
  case NPU_DTYPE_I8: STATS_LOOP(int8_t, AS_IS); break;
  case NPU_DTYPE_U8: STATS_LOOP(uint8_t, AS_IS); break;
  case NPU_DTYPE_I32: STATS_LOOP(int32_t, AS_IS); break;
  case NPU_DTYPE_I64: STATS_LOOP(int64_t, AS_IS); break;
  case NPU_DTYPE_BOOL: STATS_LOOP(uint8_t, AS_IS); break;
  default: break;
  }
#undef STATS_LOOP
#undef AS_IS
}

static const char stats_header[] = "op_type,op_name,task_id,timestamp_us,io,index,dtype,shape,"
                                   "count,min,max,mean,nan,pos_inf,neg_inf,zero\n";

static npu_status stats_row(npuE_dump *d, const dump_op *op, const char *io, int index,
                            const npu_tensor *t) {
  char path[DUMP_PATH_MAX];
  npu_status s = iteration_dir(d);
  if (s) return s;
  if (snprintf(path, sizeof path, "%s/stats.csv", d->dir) >= (int)sizeof path)
    return too_long(d, d->dir);
  if (!d->stats_file) {
    if (!(d->stats_file = fopen(path, "w")))
      return npuC_error(d->ctx, NPU_ERR_IO, "%s: cannot create '%s': %s", d->what, path,
                        strerror(errno));
    fputs(stats_header, d->stats_file);
  }
  FILE *f = d->stats_file;
  tstats st;
  tensor_stats(t, &st);
  npuC_csv_field(f, op->type);
  fputc(',', f);
  npuC_csv_field(f, op->node_name);
  fprintf(f, ",%d,%" PRId64 ",%s,%d,%s,", op->task, op->us, io, index, npu_dtype_name(t->dtype));
  for (int i = 0; i < t->ndim; i++) fprintf(f, i ? "x%" PRId64 : "%" PRId64, t->shape[i]);
  fprintf(f, ",%" PRId64 ",", t->numel);
  if (st.n_finite) {
    /* %.9g is exact for float32 and narrower; wider types get all of a double's digits */
    bool wide = t->dtype == NPU_DTYPE_F64 || !npuX_is_float(t->dtype);
    fprintf(f, wide ? "%.17g,%.17g,%.17g" : "%.9g,%.9g,%.9g", st.min, st.max,
            st.sum / (double)st.n_finite);
  } else {
    fputs(",,", f);
  }
  fprintf(f, ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "\n", st.nan, st.pos_inf,
          st.neg_inf, st.zero);
  if (ferror(f))
    return npuC_error(d->ctx, NPU_ERR_IO, "%s: cannot write '%s': %s", d->what, path,
                      strerror(errno));
  return NPU_OK;
}

static npu_status close_stats(npuE_dump *d) {
  if (!d->stats_file) return NPU_OK;
  int bad = ferror(d->stats_file);
  bad |= fclose(d->stats_file);
  d->stats_file = NULL;
  if (bad)
    return npuC_error(d->ctx, NPU_ERR_IO, "%s: cannot write '%s/stats.csv': %s", d->what, d->dir,
                      strerror(errno));
  return NPU_OK;
}

/* One tensor of op, as dump_data asks (npy always for the overflow dump). */
static npu_status dump_tensor(npuE_dump *d, const dump_op *op, bool input, int index,
                              const npu_tensor *t, bool npy) {
  if (!t) return NPU_OK;
  const char *io = input ? "input" : "output";
  if (!npy) return stats_row(d, op, io, index, t);
  npu_status s = iteration_dir(d);
  if (s) return s;
  char path[DUMP_PATH_MAX];
  if (npuE_dump_file_path(path, sizeof path, d->dir, op->type, op->name, op->task, op->us, io,
                          index) >= (int)sizeof path)
    return too_long(d, d->dir);
  return write_npy(d, t, path);
}

static npu_status dump_step_io(npuE_dump *d, const npu_graph *g, const npuE_plan *p, int k,
                               bool input, bool npy) {
  const npuE_step *step = p->all_steps[k];
  dump_op op;
  op_of_step(&op, g, p, k, d->nest, d->step_us);
  int n = input ? step->n_in : step->n_out;
  const int *v = input ? step->in : step->out;
  for (int i = 0; i < n; i++) {
    npu_status s = dump_tensor(d, &op, input, i, p->slots[v[i]], npy);
    if (s) return s;
  }
  return NPU_OK;
}

/* ---- overflow (enable_dump_debug) ---- */

typedef struct overflow {
  int64_t nan, inf, saturated;
} overflow;

static void scan_overflow(const npu_tensor *t, overflow *o) {
  int64_t n = t->numel;
  switch (t->dtype) {
  case NPU_DTYPE_F32: {
    const float *q = t->data;
    for (int64_t i = 0; i < n; i++)
      if (isnan(q[i])) o->nan++;
      else if (isinf(q[i])) o->inf++;
    break;
  }
  case NPU_DTYPE_F64: {
    const double *q = t->data;
    for (int64_t i = 0; i < n; i++)
      if (isnan(q[i])) o->nan++;
      else if (isinf(q[i])) o->inf++;
    break;
  }
  case NPU_DTYPE_F16: {
    const uint16_t *q = t->data;
    for (int64_t i = 0; i < n; i++) {
      unsigned h = q[i] & 0x7fffu;
      if (h > 0x7c00u) o->nan++;
      else if (h == 0x7c00u) o->inf++;
      else if (h == F16_MAX_BITS) o->saturated++;
    }
    break;
  }
  case NPU_DTYPE_BF16: {
    const uint16_t *q = t->data;
    for (int64_t i = 0; i < n; i++) {
      unsigned b = q[i] & 0x7fffu;
      if (b > 0x7f80u) o->nan++;
      else if (b == 0x7f80u) o->inf++;
    }
    break;
  }
  default: break;
  }
}

static bool abnormal(const overflow *o) { return o->nan || o->inf || o->saturated; }

/* After step k: an output with Inf/NaN (or float16 at +-65504) from inputs that have none
   dumps the step's inputs and outputs and says so in the log. */
static npu_status check_step(npuE_dump *d, const npu_graph *g, const npuE_plan *p, int k) {
  const npuE_step *step = p->all_steps[k];
  overflow sum = {0};
  for (int i = 0; i < step->n_out; i++) {
    const npu_tensor *t = p->slots[step->out[i]];
    if (t && npuX_is_float(t->dtype)) scan_overflow(t, &sum);
  }
  if (!abnormal(&sum)) return NPU_OK;
  for (int i = 0; i < step->n_in; i++) {
    const npu_tensor *t = p->slots[step->in[i]];
    overflow in = {0};
    if (t && npuX_is_float(t->dtype)) scan_overflow(t, &in);
    if (abnormal(&in)) return NPU_OK; /* propagated, not made here */
  }
  npu_status s = dump_step_io(d, g, p, k, true, true);
  if (!s) s = dump_step_io(d, g, p, k, false, true);
  if (s) return s;
  /* inside while loops: their iterations, as the file names carry them (sanitised names
     hold no '.', so the first one starts the suffix) */
  char name[DUMP_NAME_MAX];
  npuE_dump_step_name(name, sizeof name, g, p, step, d->nest);
  const char *iter = strchr(name, '.');
  npuC_log(d->ctx, 2,
           "enable_dump_debug: overflow in %s '%s' (task %d, %s%s%siteration %" PRIu64 " of "
           "model %s): %" PRId64 " NaN, %" PRId64 " Inf, %" PRId64 " float16 at +-65504 in its "
           "outputs from finite inputs; inputs and outputs dumped to '%s'",
           step->def->name, g->nodes[npuE_dump_step_node(p, step)].name, k,
           iter ? "loop iteration " : "", iter ? iter + 5 : "", iter ? ", " : "", d->iteration,
           d->cur->model, sum.nan, sum.inf, sum.saturated, d->dir);
  return NPU_OK;
}

/* ---- events ---- */

static bool step_selected(const npuE_dump *d, uint64_t it) {
  if (!d->n_ranges) return true;
  for (int i = 0; i < d->n_ranges; i++)
    if ((int64_t)it >= d->ranges[i][0] && (int64_t)it <= d->ranges[i][1]) return true;
  return false;
}

static npu_status begin_iteration(npuE_dump *d, const npu_graph *g, const npuE_plan *p) {
  plan_dump *pd = d->cur;
  d->in_iteration = true;
  d->iteration = pd->n_iterations;
  d->selected = step_selected(d, d->iteration);
  d->data_index = d->check || d->n_ranges ? d->iteration : pd->n_dumped;
  d->wrote = false;
  d->dir[0] = 0;
  if (!d->selected || !d->dump) return NPU_OK;
  int64_t us = npuE_dump_now_us();
  for (int i = 0; i < pd->n_feeds; i++) {
    const feed_dump *f = &pd->feeds[i];
    const npuG_value *v = &p->values[f->value];
    dump_op op;
    op_of_node(&op, g, npuX_op(g->nodes[v->node].op)->name, v->node, f->task, us);
    npu_status s = dump_tensor(d, &op, false, v->index, p->slots[f->value], !d->stats);
    if (s) return s;
  }
  return NPU_OK;
}

static npu_status end_iteration(npuE_dump *d) {
  npu_status s = close_stats(d);
  if (d->wrote) d->cur->n_dumped++;
  d->in_iteration = false;
  return s;
}

npu_status npuE_dump_event(npuE_dump *d, npuE_state *st, const npuE_plan *p, npuE_event e,
                           int k) {
  const npu_graph *g = st->graph;
  d->nest = &st->nest;
  switch (e) {
  case NPUE_RUN_BEGIN: d->cur = NULL; return find_plan(d, g, p, &d->cur);
  case NPUE_ITER_BEGIN: return d->cur ? begin_iteration(d, g, p) : NPU_OK;
  case NPUE_STEP_BEGIN: {
    if (!d->cur || !d->selected || !d->cur->flags[k]) return NPU_OK;
    d->step_us = npuE_dump_now_us();
    return d->cur->flags[k] & STEP_IN ? dump_step_io(d, g, p, k, true, !d->stats) : NPU_OK;
  }
  case NPUE_STEP_END: {
    if (!d->cur || !d->selected) return NPU_OK;
    uint8_t f = d->cur->flags[k];
    npu_status s = NPU_OK;
    if (f & (STEP_OUT | STEP_DATA)) s = dump_step_io(d, g, p, k, false, !d->stats);
    if (!s && (f & STEP_CHECK)) s = check_step(d, g, p, k);
    return s;
  }
  case NPUE_ITER_END: {
    if (!d->cur) return NPU_OK;
    npu_status s = end_iteration(d);
    d->cur->n_iterations++;
    return s;
  }
  case NPUE_RUN_END: {
    /* a run that failed inside an iteration: close what it opened; its files count */
    npu_status s = d->cur && d->in_iteration ? end_iteration(d) : NPU_OK;
    d->cur = NULL;
    return s;
  }
  }
  return NPU_OK;
}
