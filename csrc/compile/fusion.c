/*
 * fusion.c — the fusion passes (passes.def), the fusion switch file and fusion_result.json.
 *
 * npuP_fuse runs after the steps are laid out, one pass at a time in passes.def order, each
 * switchable by fusion_switch_file.  A pass finds a pattern of steps and replaces it with one
 * fused step (fused_ops.h) placed where the pattern's LAST step was: every operand of the
 * pattern is computed by then, and every reader of its result comes later.  A fused step with
 * two outputs (relu_grad or log_softmax_grad with the bias_add_grad of its result) takes the
 * place of the step making its first output instead, since that output's readers may come
 * before the last step; the later steps read nothing else.  The other steps of the pattern
 * are dropped.  The fused step's node is the pattern's first node; the others are listed in
 * its `absorbed`.  Before the passes, steps that constant folding left without readers go.
 *
 * A value folded away must not be needed by anything else: it has exactly one reading input
 * slot in the plan, is not fetched and not fed (a feed replaces a computed value).  A pattern
 * that breaks this MATCHES (match_times) but does not take EFFECT (effect_times).  A pattern
 * never spans an assign step: moving a read of a variable past an assign to it would read the
 * new value.
 *
 * Plans with control flow or run-time shapes are fused too, block by block (the top level,
 * then each cond branch and while condition and body at any depth, by the same rules): a value
 * read outside its block (a block's results, a loop variable, a read in another block) stays,
 * and a value shaped only when the plan runs joins no pattern (docs/dynamic.md).
 *
 * Fusion is for the device: the host reference path (use_off_line = false) stays unfused, so
 * it remains the oracle the fused plan is tested against.
 *
 * Statistics (export_compile_stat) are kept per compiled graph in the session's fusion config
 * and merged into fusion_result.json: after each compile (2) or when the session ends (1).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "compile/fused_ops.h"
#include "compile/passes.h"
#include "compile/precision.h"
#include "compile/tuning.h"
#include "options/options_int.h"

typedef struct fuser fuser;

#define NPU_PASS(name, kind, on, fn, what) static npu_status fn(fuser *f);
#include "compile/passes.def"
#undef NPU_PASS

enum {
#define NPU_PASS(name, kind, on, fn, what) PASS_##name,
#include "compile/passes.def"
#undef NPU_PASS
  N_PASSES
};

/* The two families of the reference: sections of the switch file, keys of the statistics. */
typedef enum pass_kind { GRAPH, UB, N_KINDS } pass_kind;
static const char *const section_names[N_KINDS] = {[GRAPH] = "GraphFusion", [UB] = "UBFusion"};
static const char *const stat_names[N_KINDS] = {[GRAPH] = "graph_fusion", [UB] = "ub_fusion"};

static const struct pass_info {
  const char *name;
  pass_kind kind;
  bool on;
  npu_status (*run)(fuser *f);
} passes[N_PASSES] = {
#define NPU_PASS(name_, kind_, on_, fn_, what_) {#name_, kind_, on_, fn_},
#include "compile/passes.def"
#undef NPU_PASS
};

/* ======================================================================= the session's config */

typedef struct graph_stats {
  int graph_id;
  int match[N_PASSES], effect[N_PASSES];
} graph_stats;

struct npuP_fusion_config {
  bool on[N_PASSES];
  int export_mode;       /* export_compile_stat: 0 never, 1 when the session ends, 2 per compile */
  char *path;            /* fusion_result.json */
  int session_id;        /* per context */
  int n_compiled;        /* graphs compiled: the next graph id */
  graph_stats *pending;  /* compiled graphs not yet written */
  int n_pending, cap_pending;
};

/* ---- fusion_switch_file ---- */

/* 1-based line and column of text[pos]. */
static void line_col(const char *text, size_t pos, int *line, int *col) {
  *line = 1, *col = 1;
  for (size_t i = 0; i < pos && text[i]; i++) {
    if (text[i] == '\n') (*line)++, *col = 1;
    else (*col)++;
  }
}

/* The line of the first `"key"` in text (cJSON keeps no positions; a key names a pass or a
   section once in a sane file), 0 when absent. */
static int key_line(const char *text, const char *key) {
  size_t n = strlen(key);
  for (const char *s = strchr(text, '"'); s; s = strchr(s + 1, '"'))
    if (strncmp(s + 1, key, n) == 0 && s[n + 1] == '"') {
      int line, col;
      line_col(text, (size_t)(s - text), &line, &col);
      return line;
    }
  return 0;
}

typedef struct switch_file {
  npu_context *ctx;
  const char *path, *text;
  bool *on;
} switch_file;

static npu_status bad(switch_file *sf, const char *key, const char *fmt, const char *a,
                      const char *b) {
  char what[NPU_ERRMSG_SIZE];
  snprintf(what, sizeof what, fmt, a, b);
  int line = key ? key_line(sf->text, key) : 0;
  if (line)
    return npuC_error(sf->ctx, NPU_ERR_FORMAT, "fusion_switch_file '%s', line %d: %s", sf->path,
                      line, what);
  return npuC_error(sf->ctx, NPU_ERR_FORMAT, "fusion_switch_file '%s': %s", sf->path, what);
}

/* "on" -> 1, "off" -> 0, else -1. */
static int on_off(const cJSON *v) {
  if (!cJSON_IsString(v)) return -1;
  return strcmp(v->valuestring, "on") == 0 ? 1 : strcmp(v->valuestring, "off") == 0 ? 0 : -1;
}

static npu_status bad_value(switch_file *sf, const cJSON *item) {
  return bad(sf, item->string, "'%s': the value must be \"on\" or \"off\", got %s", item->string,
             cJSON_IsString(item) ? item->valuestring : "a value that is not a string");
}

/* One section: "ALL" first, wherever it is written, then each pass as an exception. */
static npu_status read_section(switch_file *sf, pass_kind kind, const cJSON *sec) {
  if (!cJSON_IsObject(sec))
    return bad(sf, sec->string, "\"%s\" must be an object of \"PassName\": \"on\"|\"off\"%s",
               section_names[kind], "");
  const cJSON *all = NULL;
  for (const cJSON *it = sec->child; it; it = it->next)
    if (strcmp(it->string, "ALL") == 0) {
      if (all) return bad(sf, "ALL", "\"ALL\" is given twice in %s%s", section_names[kind], "");
      all = it;
    }
  if (all) {
    int v = on_off(all);
    if (v < 0) return bad_value(sf, all);
    for (int i = 0; i < N_PASSES; i++)
      if (passes[i].kind == kind) sf->on[i] = v;
  }
  bool seen[N_PASSES] = {0};
  for (const cJSON *it = sec->child; it; it = it->next) {
    if (it == all) continue;
    int found = -1;
    npuC_nearest near;
    npuC_nearest_init(&near, it->string);
    for (int i = 0; i < N_PASSES; i++) {
      if (strcmp(passes[i].name, it->string) == 0) found = i;
      npuC_nearest_try(&near, passes[i].name);
    }
    if (found < 0) {
      char hint[256] = "";
      size_t len = 0;
      const char *best = npuC_nearest_result(&near);
      if (best) len = (size_t)snprintf(hint, sizeof hint, " (did you mean %s?)", best);
      len += (size_t)snprintf(hint + len, sizeof hint - len, "; %s has", section_names[kind]);
      for (int i = 0, n = 0; i < N_PASSES && len < sizeof hint; i++)
        if (passes[i].kind == kind)
          len += (size_t)snprintf(hint + len, sizeof hint - len, "%s %s", n++ ? "," : "",
                                  passes[i].name);
      return bad(sf, it->string, "unknown fusion pass '%s'%s", it->string, hint);
    }
    if (passes[found].kind != kind)
      return bad(sf, it->string, "'%s' is a %s pass: list it under that section", it->string,
                 section_names[passes[found].kind]);
    if (seen[found]) return bad(sf, it->string, "'%s' is given twice%s", it->string, "");
    seen[found] = true;
    int v = on_off(it);
    if (v < 0) return bad_value(sf, it);
    sf->on[found] = v;
  }
  return NPU_OK;
}

static npu_status read_switches(switch_file *sf, size_t len) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(sf->text, len, &end, 0);
  if (!root) {
    int line, col;
    line_col(sf->text, end && end >= sf->text ? (size_t)(end - sf->text) : 0, &line, &col);
    return npuC_error(sf->ctx, NPU_ERR_FORMAT,
                      "fusion_switch_file '%s': malformed JSON at line %d, column %d", sf->path,
                      line, col);
  }
  npu_status s = NPU_OK;
  const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "Switch");
  if (!cJSON_IsObject(root) || !cJSON_IsObject(sw))
    s = bad(sf, NULL, "expected {\"Switch\": {\"GraphFusion\": {...}, \"UBFusion\": {...}}}%s%s",
            "", "");
  for (const cJSON *it = cJSON_IsObject(root) ? root->child : NULL; !s && it; it = it->next)
    if (strcmp(it->string, "Switch") != 0)
      s = bad(sf, it->string, "unknown key '%s' beside \"Switch\"%s", it->string, "");
  bool seen[N_KINDS] = {0};
  for (const cJSON *it = s ? NULL : sw->child; !s && it; it = it->next) {
    int kind = -1;
    for (int k = 0; k < N_KINDS; k++)
      if (strcmp(it->string, section_names[k]) == 0) kind = k;
    if (kind < 0)
      s = bad(sf, it->string, "unknown section '%s' in \"Switch\" (the sections are %s)",
              it->string, "\"GraphFusion\" and \"UBFusion\"");
    else if (seen[kind])
      s = bad(sf, it->string, "section '%s' is given twice%s", it->string, "");
    else
      seen[kind] = true, s = read_section(sf, (pass_kind)kind, it);
  }
  cJSON_Delete(root);
  return s;
}

static npu_status load_switch_file(npu_context *ctx, const char *path, bool *on) {
  char *text;
  size_t len;
  npu_status s = npuC_read_file(ctx, path, "fusion_switch_file", &text, &len);
  if (s) return s;
  switch_file sf = {.ctx = ctx, .path = path, .text = text, .on = on};
  s = read_switches(&sf, len);
  npuC_free(ctx, text);
  return s;
}

npu_status npuP_fusion_config_new(npu_context *ctx, const npu_options *o,
                                  struct npuP_fusion_config **out) {
  *out = NULL;
  struct npuP_fusion_config *c = npuC_calloc(ctx, 1, sizeof *c);
  if (!c) return NPU_ERR_NOMEM;
  for (int i = 0; i < N_PASSES; i++) c->on[i] = passes[i].on;
  c->export_mode = (int)npuO_int(o, NPUO_export_compile_stat);
  c->session_id = ctx->n_fusion_sessions++;
  const char *file = npuO_string(o, NPUO_fusion_switch_file);
  npu_status s = *file ? load_switch_file(ctx, file, c->on) : NPU_OK;
  /* 000: $ASCEND_WORK_PATH/FE/<pid>/fusion_result.json; without it the reference writes into
     the working directory, we into the default output directory (npu_out/FE/<pid>/) */
  const char *work = npuO_output_dir(o, NULL);
  if (!s && c->export_mode) {
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    size_t n = strlen(work) + strlen(pid) + 40;
    if (!(c->path = npuC_alloc(ctx, n))) s = NPU_ERR_NOMEM;
    else snprintf(c->path, n, "%s/FE/%s/fusion_result.json", work, pid);
  }
  if (s) {
    npuC_free(ctx, c->path);
    npuC_free(ctx, c);
    return s;
  }
  *out = c;
  return NPU_OK;
}

/* ---- fusion_result.json ---- */

/* The file's current contents as a JSON object (a new one when the file is absent or not an
   object: it is ours to rewrite), or NULL when out of memory. */
static cJSON *read_results(npu_context *ctx, const char *path) {
  char *text;
  cJSON *root = NULL;
  npu_status s = npuC_read_file(ctx, path, NULL, &text, NULL); /* absent: started anew */
  if (s == NPU_ERR_NOMEM) return NULL;
  if (!s) {
    root = cJSON_Parse(text);
    npuC_free(ctx, text);
  }
  if (root && !cJSON_IsObject(root)) {
    cJSON_Delete(root);
    root = NULL;
  }
  return root ? root : cJSON_CreateObject();
}

/* {"graph_fusion": {"Pass": {"match_times": "n", "effect_times": "n"}}, "ub_fusion": {...}}:
   the passes that matched in this graph (a pass switched off never matches). */
static cJSON *graph_json(const graph_stats *g) {
  cJSON *obj = cJSON_CreateObject();
  for (int k = 0; obj && k < N_KINDS; k++) {
    cJSON *kind = cJSON_AddObjectToObject(obj, stat_names[k]);
    for (int i = 0; kind && i < N_PASSES; i++) {
      if ((int)passes[i].kind != k || !g->match[i]) continue;
      char m[16], e[16];
      snprintf(m, sizeof m, "%d", g->match[i]);
      snprintf(e, sizeof e, "%d", g->effect[i]);
      cJSON *p = cJSON_AddObjectToObject(kind, passes[i].name);
      bool ok = p && cJSON_AddStringToObject(p, "match_times", m) &&
                cJSON_AddStringToObject(p, "effect_times", e);
      /* UB fusion keeps no kernel repository here: never a hit */
      if (ok && k == UB) ok = cJSON_AddStringToObject(p, "repository_hit_times", "0") != NULL;
      if (!ok) kind = NULL;
    }
    if (!kind) {
      cJSON_Delete(obj);
      obj = NULL;
    }
  }
  return obj;
}

/* Merges the pending graphs into the file (other sessions' keys stay) and forgets them. */
static npu_status export_stats(npu_context *ctx, struct npuP_fusion_config *c) {
  if (!c->n_pending) return NPU_OK;
  npu_status s = npuC_make_parent_dirs(ctx, c->path, "fusion_result.json");
  if (s) return s;
  cJSON *root = read_results(ctx, c->path);
  for (int i = 0; root && i < c->n_pending; i++) {
    char key[64];
    snprintf(key, sizeof key, "session_and_graph_id_%d_%d", c->session_id, c->pending[i].graph_id);
    cJSON *g = graph_json(&c->pending[i]);
    cJSON_DeleteItemFromObjectCaseSensitive(root, key);
    if (!g || !cJSON_AddItemToObject(root, key, g)) {
      cJSON_Delete(g);
      cJSON_Delete(root);
      root = NULL;
    }
  }
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) return npuC_error(ctx, NPU_ERR_NOMEM, "fusion_result.json: out of memory");
  /* written beside, then renamed: a reader never sees half a file */
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", c->path, (long)getpid());
  FILE *fp = fopen(tmp, "wb");
  size_t n = strlen(text);
  bool ok = fp && fwrite(text, 1, n, fp) == n && fputc('\n', fp) != EOF;
  if (fp && fclose(fp) != 0) ok = false;
  cJSON_free(text);
  if (!ok || rename(tmp, c->path) != 0) {
    int err = errno;
    remove(tmp);
    return npuC_error(ctx, NPU_ERR_IO, "fusion_result.json: cannot write '%s': %s", c->path,
                      strerror(err));
  }
  c->n_pending = 0;
  return NPU_OK;
}

static npu_status record_graph(npu_context *ctx, struct npuP_fusion_config *c,
                               const graph_stats *g) {
  if (c->n_pending == c->cap_pending) {
    int cap = c->cap_pending ? 2 * c->cap_pending : 8;
    graph_stats *p = npuC_realloc(ctx, c->pending, (size_t)cap * sizeof *p);
    if (!p) return NPU_ERR_NOMEM;
    c->pending = p, c->cap_pending = cap;
  }
  c->pending[c->n_pending++] = *g;
  return NPU_OK;
}

void npuP_fusion_session_end(npu_context *ctx, struct npuP_fusion_config *c) {
  if (!c || c->export_mode != 1) return;
  bool matched = false;
  for (int i = 0; i < c->n_pending && !matched; i++)
    for (int k = 0; k < N_PASSES; k++) matched |= c->pending[i].match[k] > 0;
  if (!matched) { /* nothing to report: no file in the working directory */
    c->n_pending = 0;
    return;
  }
  if (export_stats(ctx, c)) npuC_log(ctx, 2, "export_compile_stat: %s", npu_context_errmsg(ctx));
  c->n_pending = 0;
}

void npuP_fusion_config_free(npu_context *ctx, struct npuP_fusion_config *c) {
  if (!c) return;
  npuP_fusion_session_end(ctx, c);
  npuC_free(ctx, c->pending);
  npuC_free(ctx, c->path);
  npuC_free(ctx, c);
}

/* ================================================================================= matching */

enum { MAX_LINKS = 16, MAX_CHAIN = 32, MAX_OPERANDS = 32 };

struct fuser {
  npuP_build *b;
  npuE_plan *p;
  int pass;         /* index in passes[] */
  int *n_readers;   /* by value id: input slots of live steps reading it */
  int *reader;      /* by value id: the first live step reading it, or -1 */
  uint8_t *pinned;  /* by value id: must stay materialised (fetched, fed) */
  /* by value id, the first n_runtime values: a shape known only when the plan runs (a dynamic
     step's output, -1 dims): kept out of every pattern (values added since have fixed shapes) */
  const uint8_t *runtime;
  int n_runtime;
  int match, effect;
};

static bool live(const npuE_step *s) { return s->def != NULL; }

static void index_readers(fuser *f) {
  const npuE_plan *p = f->p;
  for (int v = 0; v < p->n_values; v++) f->n_readers[v] = 0, f->reader[v] = -1;
  for (int k = 0; k < p->n_steps; k++) {
    const npuE_step *s = &p->steps[k];
    for (int i = 0; live(s) && i < s->n_in; i++) {
      int v = s->in[i];
      if (f->reader[v] < 0) f->reader[v] = k;
      f->n_readers[v]++;
    }
  }
}

static const npuG_value *value(const fuser *f, int v) { return &f->p->values[v]; }
/* Every pass asks this of the values it fuses, so a value shaped at run time never joins a
   pattern: the patterns read fixed shapes. */
static bool is_f32(const fuser *f, int v) {
  return value(f, v)->dtype == NPU_DTYPE_F32 && !(v < f->n_runtime && f->runtime[v]);
}

static int64_t numel(const npuG_value *v) { return npuT_numel(v->ndim, v->shape); }

/* Two values of one shape known now: a -1 dim (or an unknown rank) may differ at run time. */
static bool same_shape(const npuG_value *a, const npuG_value *b) {
  return npuG_value_known(a) && npuG_value_known(b) &&
         npuT_same_shape(a->ndim, a->shape, b->ndim, b->shape);
}

/* The live step reading v first, or -1. */
static int next_step(const fuser *f, int v) {
  int k = f->reader[v];
  return k >= 0 && live(&f->p->steps[k]) ? k : -1;
}

/* Whether value v, written by step `from` and read by step `to`, can be folded away. */
static bool foldable(const fuser *f, int v, int from, int to) {
  if (f->n_readers[v] != 1 || f->pinned[v]) return false;
  for (int k = from + 1; k < to; k++)
    if (live(&f->p->steps[k]) && f->p->steps[k].def->kind == NPUX_KIND_ASSIGN) return false;
  return true;
}

/* How operand o broadcasts against a result of shape out: the same shape, one element, or a
   vector along the last dim ((C), (1, C), ...); -1 for anything else. */
static int broadcast_of(const fuser *f, int o, const npuG_value *out) {
  const npuG_value *v = value(f, o);
  if (same_shape(v, out)) return NPUK_EW_FULL;
  if (v->ndim > out->ndim) return -1;
  if (numel(v) == 1) return NPUK_EW_SCALAR;
  if (v->ndim >= 1 && out->ndim >= 1 && v->shape[v->ndim - 1] == out->shape[out->ndim - 1] &&
      numel(v) == v->shape[v->ndim - 1])
    return NPUK_EW_ROW;
  return -1;
}

static double attr_number(const npuG_node *node, const char *name, double dflt) {
  const npuG_attr *a = npuG_attr_find(node, name);
  if (!a) return dflt;
  return a->type == NPU_ATTR_FLOAT ? a->u.f : (double)a->u.i;
}

static const npuG_node *node_of(const fuser *f, const npuE_step *s) {
  return &f->b->graph->nodes[s->node];
}

/* Whether step s gets its high_performance implementation (compile/implmode.c).  The fused
   kernels that take such a step run its fast twin, told so: elementwise programs
   (NPUK_EW_UNARY_FAST), epilogues (sigmoid, tanh: act_fast) and the cross-entropy gradient
   (log_softmax: the step's impl); the unfused plan's bits either way. */
static bool fast_impl(const fuser *f, const npuE_step *s) {
  return npuP_impl_is_fast(f->b->cfg, s->def, node_of(f, s)->name);
}

/* The activations an epilogue applies. */
static const struct {
  const npu_op_def *def;
  npuK_act act;
} activations[] = {
    {&npuX_op_relu, NPUK_ACT_RELU},         {&npuX_op_relu6, NPUK_ACT_RELU6},
    {&npuX_op_leaky_relu, NPUK_ACT_LEAKY_RELU}, {&npuX_op_sigmoid, NPUK_ACT_SIGMOID},
    {&npuX_op_tanh, NPUK_ACT_TANH},         {&npuX_op_prelu, NPUK_ACT_PRELU},
};

/* Whether step s is an activation of value v (float32); *slope: prelu's slopes, one per
   channel along the last dim (the only prelu an epilogue takes), else -1; *fast: a sigmoid or
   tanh under high_performance, which the epilogue runs by its fast kernel (kfast.h) too. */
static bool activation_of(const fuser *f, const npuE_step *s, int v, npuK_act *act, float *alpha,
                          int *slope, bool *fast) {
  *slope = -1;
  for (size_t i = 0; i < npu_countof(activations); i++)
    if (s->def == activations[i].def && s->n_out == 1 && s->in[0] == v && is_f32(f, s->out[0])) {
      *fast = fast_impl(f, s);
      if (s->def == &npuX_op_prelu) {
        if (s->in[1] == v || !is_f32(f, s->in[1]) ||
            broadcast_of(f, s->in[1], value(f, v)) != NPUK_EW_ROW)
          return false;
        *slope = s->in[1];
      }
      *act = activations[i].act;
      *alpha = (float)attr_number(node_of(f, s), "alpha", 0.2);
      return true;
    }
  return false;
}

typedef struct pattern {
  int steps[MAX_CHAIN + 1]; /* in plan order, the anchor first */
  int n_steps;
  int in[MAX_OPERANDS];
  int n_in;
  int out; /* the value the fused step writes */
  int out2; /* with two_outputs: its second output */
  bool two_outputs;
  int at_step; /* k > 0: the fused step takes the place of steps[k - 1] (the later steps read
                  only values made before it), 0: of the last step */
} pattern;

/* Frees what step s owns (before the precision pass: no widen; no control: a kernel step)
   and marks it dropped (def NULL), for compact after the pass. */
static void drop_step(npu_context *ctx, npuE_step *s) {
  npuC_free(ctx, s->in);
  npuC_free(ctx, s->owned_params);
  npuC_free(ctx, s->absorbed);
  *s = (npuE_step){.def = NULL};
}

/* Replaces the pattern's steps with one step of def (params owned, freed on failure too). */
static npu_status commit(fuser *f, const pattern *pt, const npu_op_def *def, void *params,
                         size_t scratch) {
  npu_context *ctx = f->b->ctx;
  npuE_plan *p = f->p;
  int n = pt->n_steps;
  int n_out = pt->two_outputs ? 2 : 1;
  int *io = npuC_alloc(ctx, (size_t)(pt->n_in + n_out + 1) * sizeof *io);
  int *absorbed = npuC_alloc(ctx, (size_t)(n > 1 ? n - 1 : 1) * sizeof *absorbed);
  if (!io || !absorbed) {
    npuC_free(ctx, io);
    npuC_free(ctx, absorbed);
    npuC_free(ctx, params);
    return NPU_ERR_NOMEM;
  }
  memcpy(io, pt->in, (size_t)pt->n_in * sizeof *io);
  io[pt->n_in] = pt->out;
  if (pt->two_outputs) io[pt->n_in + 1] = pt->out2;
  int anchor = p->steps[pt->steps[0]].node;
  for (int i = 1; i < n; i++) absorbed[i - 1] = p->steps[pt->steps[i]].node;
  for (int i = 0; i < n; i++) {
    npuE_step *s = &p->steps[pt->steps[i]];
    /* the values between the pattern's steps are gone with them, but those it writes */
    int v = s->out[0];
    if (i < n - 1 && v != pt->out && !(pt->two_outputs && v == pt->out2)) f->n_readers[v] = 0;
    drop_step(ctx, s);
  }
  npuE_step *s = &p->steps[pt->steps[pt->at_step ? pt->at_step - 1 : n - 1]];
  *s = (npuE_step){.node = anchor, .def = def, .params = params, .owned_params = params,
                   .pass = passes[f->pass].name, .absorbed = absorbed, .n_absorbed = n - 1,
                   .n_in = pt->n_in, .n_out = n_out, .in = io, .out = io + pt->n_in,
                   .scratch_size = scratch, .round_in = -1, .round_out = -1};
  if (s->n_in > p->max_in) p->max_in = s->n_in; /* rounding is the precision pass's */
  f->effect++;
  return NPU_OK;
}

/* Drops the steps fusion replaced, keeping the order of the others. */
static void compact(npuE_plan *p) {
  int n = 0;
  for (int k = 0; k < p->n_steps; k++)
    if (live(&p->steps[k])) p->steps[n++] = p->steps[k];
  p->n_steps = n;
}

/* ---- MatMulBiasAddFusionPass ---- */

/* The bias step s adds to matmul result v (m, n): bias_add(v, b), add(v, b) or add(b, v) with
   b of n elements along the last dim; its value id, or -1. */
static int matmul_bias_of(const fuser *f, const npuE_step *s, int v) {
  const npuG_value *y = value(f, v);
  if (s->n_out != 1 || s->n_in != 2 || !is_f32(f, s->out[0]) || !same_shape(value(f, s->out[0]), y))
    return -1;
  if (s->def == &npuX_op_bias_add) return s->in[0] == v && s->in[1] != v ? s->in[1] : -1;
  if (s->def != &npuX_op_add || (s->in[0] == v) == (s->in[1] == v)) return -1;
  int b = s->in[0] == v ? s->in[1] : s->in[0];
  return is_f32(f, b) && value(f, b)->ndim <= 2 && broadcast_of(f, b, y) == NPUK_EW_ROW ? b : -1;
}

static npu_status fuse_matmul_bias(fuser *f) {
  npuE_plan *p = f->p;
  for (int k = 0; k < p->n_steps; k++) {
    const npuE_step *mm = &p->steps[k];
    if (mm->def != &npuX_op_matmul || !is_f32(f, mm->out[0])) continue;
    int v = mm->out[0], kb = next_step(f, v);
    int bias = kb >= 0 ? matmul_bias_of(f, &p->steps[kb], v) : -1;
    if (bias < 0) continue;
    f->match++;
    if (!foldable(f, v, k, kb)) continue;
    pattern pt = {.steps = {k, kb}, .n_steps = 2, .in = {mm->in[0], mm->in[1], bias}, .n_in = 3,
                  .out = p->steps[kb].out[0]};
    npuK_act act = NPUK_ACT_NONE;
    float alpha = 0;
    bool fast = false;
    int ka = next_step(f, pt.out), slope = -1;
    if (ka >= 0 && activation_of(f, &p->steps[ka], pt.out, &act, &alpha, &slope, &fast) &&
        foldable(f, pt.out, kb, ka)) {
      pt.steps[pt.n_steps++] = ka;
      pt.out = p->steps[ka].out[0];
      if (slope >= 0) pt.in[pt.n_in++] = slope;
    } else {
      act = NPUK_ACT_NONE;
      slope = -1;
      fast = false;
    }
    npuP_fused_matmul *params = npuC_alloc(f->b->ctx, sizeof *params);
    if (!params) return NPU_ERR_NOMEM;
    const npuG_node *node = node_of(f, mm);
    *params = (npuP_fused_matmul){.transpose_a = attr_number(node, "transpose_a", 0) != 0,
                                  .transpose_b = attr_number(node, "transpose_b", 0) != 0,
                                  .bias_input = 2, .slope_input = slope >= 0 ? 3 : -1,
                                  .act = act, .alpha = alpha, .act_fast = fast};
    npu_status s = commit(f, &pt, &npuP_op_fused_matmul, params, 0);
    if (s) return s;
  }
  return NPU_OK;
}

/* ---- ApplyGradientDescentFusionPass ---- */

/* The kind of the step that makes value v (a plan value keeps its graph node). */
static npuX_kind producer_kind(const fuser *f, int v) {
  return npuX_op(f->b->graph->nodes[value(f, v)->node].op)->kind;
}

/* Whether the fused step may read value v at the assign's place and while the variable is
   written: v is no view of a variable (a kernel's own buffer, a constant, a feed), so no
   assign between can change it, and it is not the storage being updated. */
static bool stable_operand(const fuser *f, int v) {
  npuX_kind k = producer_kind(f, v);
  return k == NPUX_KIND_KERNEL || k == NPUX_KIND_CONST || k == NPUX_KIND_PLACEHOLDER;
}

/* Value v (read by no one else, not fetched or fed) may vanish into the fused step. */
static bool private_value(const fuser *f, int v) { return f->n_readers[v] == 1 && !f->pinned[v]; }

/* The lr of step s = mul(lr, d) or mul(d, lr) with lr one float32 element and s of d's shape;
   its value id, or -1. */
static int lr_of(const fuser *f, const npuE_step *s, int d) {
  if (s->def != &npuX_op_mul || s->n_in != 2 || (s->in[0] == d) == (s->in[1] == d) ||
      !same_shape(value(f, s->out[0]), value(f, d)))
    return -1;
  int lr = s->in[0] == d ? s->in[1] : s->in[0];
  return is_f32(f, lr) && numel(value(f, lr)) == 1 ? lr : -1;
}

/* The precision modes the two gradient-descent passes fuse under: float32, and the mixed
   modes, where the precision pass (decide_fused_sgd) gives the fused GEMM the matmul's reduced
   operands and product dtype while the variable, lr and the update stay float32 — the bits of
   the unfused plan (matmul stored reduced, Cast back, mul and sub in float32: the chain
   TbeEltwiseFusionPass makes, kept float32 because the assign writes its result).  The other
   reduced modes keep their steps. */
static bool sgd_mode(const fuser *f) {
  int mode = f->b->cfg->precision;
  return mode == NPUP_ORIGIN || mode == NPUP_MIX_FP16 || mode == NPUP_MIX_BF16;
}

/* matmul d = op(a) op(b), then mul by a scalar lr, then sub from a variable's value, then the
   assign of that to the variable (tf.train.GradientDescentOptimizer's var - lr * grad for a
   dense layer's kernel): one step updating the variable block by block from the GEMM. */
static npu_status fuse_apply_gradient_descent(fuser *f) {
  npuE_plan *p = f->p;
  if (!sgd_mode(f)) return NPU_OK;
  for (int k = 0; k < p->n_steps; k++) {
    const npuE_step *mm = &p->steps[k];
    if (mm->def != &npuX_op_matmul || !is_f32(f, mm->out[0])) continue;
    int d = mm->out[0], km = next_step(f, d), lr = km >= 0 ? lr_of(f, &p->steps[km], d) : -1;
    if (lr < 0) continue;
    int t = p->steps[km].out[0], ks = next_step(f, t);
    const npuE_step *sub = ks >= 0 ? &p->steps[ks] : NULL;
    if (!sub || sub->def != &npuX_op_sub || sub->in[1] != t || sub->in[0] == t ||
        producer_kind(f, sub->in[0]) != NPUX_KIND_VARIABLE ||
        !same_shape(value(f, sub->in[0]), value(f, d)) || !is_f32(f, sub->in[0]))
      continue;
    int var = sub->in[0], u = sub->out[0], ka = next_step(f, u);
    const npuE_step *as = ka >= 0 ? &p->steps[ka] : NULL;
    if (!as || as->def != &npuX_op_assign || as->in[0] != var || as->in[1] != u) continue;
    f->match++;
    const npuG_value *w = value(f, d), *a = value(f, mm->in[0]);
    const npuG_node *node = node_of(f, mm);
    bool ta = attr_number(node, "transpose_a", 0) != 0, tb = attr_number(node, "transpose_b", 0) != 0;
    int64_t m = w->shape[0], n = w->shape[1], kk = a->ndim == 2 ? a->shape[ta ? 0 : 1] : -1;
    if (!private_value(f, d) || !private_value(f, t) || !foldable(f, u, ks, ka) ||
        !stable_operand(f, mm->in[0]) || !stable_operand(f, mm->in[1]) || !stable_operand(f, lr) ||
        m <= 0 || n <= 0 || kk <= 0 || m > INT_MAX || n > INT_MAX || kk > INT_MAX)
      continue;
    npuP_fused_sgd *params = npuC_alloc(f->b->ctx, sizeof *params);
    if (!params) return NPU_ERR_NOMEM;
    *params = (npuP_fused_sgd){.transpose_a = ta, .transpose_b = tb, .product = d,
                               .product_dtype = NPU_DTYPE_F32};
    size_t scratch = npuK_matmul_sgd_scratch_size(m, n, kk, p->n_threads);
    pattern pt = {.steps = {k, km, ks, ka}, .n_steps = 4,
                  .in = {var, mm->in[0], mm->in[1], lr}, .n_in = 4, .out = as->out[0]};
    npu_status s = commit(f, &pt, &npuP_op_fused_sgd, params, scratch);
    if (s) return s;
    if (scratch > p->scratch_size) p->scratch_size = scratch;
  }
  return NPU_OK;
}

/* ---- GradientDescentUpdateFusionPass ---- */

/* mul of a gradient d (any float32 value of the variable's shape that a kernel made: a bias's
   bias_add_grad, a filter's conv2d_backprop_filter) by a one-element lr, then sub from the
   variable's value, then the assign of that to the variable: one assign step updating the
   variable in place (the bits of mul then sub), where TbeEltwiseFusionPass would leave a
   chain step writing var - lr * d to a buffer and the assign copying it.  A matmul gradient
   is ApplyGradientDescentFusionPass's (it runs first). */
static npu_status fuse_gradient_descent_update(fuser *f) {
  npuE_plan *p = f->p;
  if (!sgd_mode(f)) return NPU_OK; /* as the GEMM form */
  for (int k = 0; k < p->n_steps; k++) {
    const npuE_step *mul = &p->steps[k];
    if (mul->def != &npuX_op_mul || mul->n_in != 2 || mul->in[0] == mul->in[1]) continue;
    int t = mul->out[0], ks = next_step(f, t), d = -1, lr = -1;
    for (int i = 0; i < 2 && d < 0; i++) {
      int cand = mul->in[i], other = mul->in[1 - i];
      if (lr_of(f, mul, cand) == other) d = cand, lr = other;
    }
    const npuE_step *sub = ks >= 0 ? &p->steps[ks] : NULL;
    if (d < 0 || !sub || sub->def != &npuX_op_sub || sub->in[1] != t || sub->in[0] == t ||
        producer_kind(f, sub->in[0]) != NPUX_KIND_VARIABLE || !is_f32(f, sub->in[0]) ||
        !is_f32(f, d) || !same_shape(value(f, sub->in[0]), value(f, d)))
      continue;
    int var = sub->in[0], u = sub->out[0], ka = next_step(f, u);
    const npuE_step *as = ka >= 0 ? &p->steps[ka] : NULL;
    if (!as || as->def != &npuX_op_assign || as->in[0] != var || as->in[1] != u) continue;
    f->match++;
    if (!private_value(f, t) || !foldable(f, u, ks, ka) || !stable_operand(f, d) ||
        !stable_operand(f, lr) || value(f, d)->ndim < 0 || numel(value(f, d)) <= 0)
      continue;
    pattern pt = {.steps = {k, ks, ka}, .n_steps = 3, .in = {var, d, lr}, .n_in = 3,
                  .out = as->out[0]};
    npu_status s = commit(f, &pt, &npuP_op_fused_sgd_update, NULL, 0);
    if (s) return s;
  }
  return NPU_OK;
}

/* ---- ConvBatchnormFusionPass, ConvBiasAddFusionPass ---- */

typedef enum link_kind { L_ADD, L_SUB, L_RSUB, L_MUL, L_ACT } link_kind;

/* One op after a convolution: y + o, y - o, o - y, y * o with o per channel or scalar, or the
   activation that ends the chain. */
typedef struct conv_link {
  int step;
  link_kind kind;
  int operand; /* value id (not L_ACT) */
  int bcast;   /* NPUK_EW_ROW or NPUK_EW_SCALAR */
  npuK_act act;
  float alpha;
  int slope;     /* L_ACT prelu: its slopes */
  bool act_fast; /* L_ACT sigmoid / tanh under high_performance */
} conv_link;

static bool affine_of(const fuser *f, const npuE_step *s, int v, conv_link *l) {
  const npuG_value *y = value(f, v);
  if (s->n_out != 1 || s->n_in != 2 || !is_f32(f, s->out[0]) || !same_shape(value(f, s->out[0]), y))
    return false;
  bool bias_add = s->def == &npuX_op_bias_add;
  if (!bias_add && s->def != &npuX_op_add && s->def != &npuX_op_sub && s->def != &npuX_op_mul)
    return false;
  if ((s->in[0] == v) == (s->in[1] == v) || (bias_add && s->in[0] != v)) return false;
  l->operand = s->in[0] == v ? s->in[1] : s->in[0];
  l->bcast = broadcast_of(f, l->operand, y);
  if (!is_f32(f, l->operand) || (l->bcast != NPUK_EW_ROW && l->bcast != NPUK_EW_SCALAR))
    return false;
  l->kind = s->def == &npuX_op_mul ? L_MUL
            : s->def == &npuX_op_sub ? (s->in[0] == v ? L_SUB : L_RSUB)
                                     : L_ADD;
  return true;
}

/* The ops after convolution step k, as far as they have the pattern's shape (whether they can
   be folded is decided after). */
static int conv_links(const fuser *f, int k, conv_link *links) {
  int v = f->p->steps[k].out[0], n = 0;
  while (n < MAX_LINKS) {
    int kc = next_step(f, v);
    if (kc < 0) break;
    const npuE_step *s = &f->p->steps[kc];
    conv_link l = {.step = kc, .operand = -1};
    if (activation_of(f, s, v, &l.act, &l.alpha, &l.slope, &l.act_fast)) {
      l.kind = L_ACT;
      links[n++] = l;
      break;
    }
    if (!affine_of(f, s, v, &l)) break;
    links[n++] = l;
    v = s->out[0];
  }
  return n;
}

static npuP_fused_conv *conv_params(fuser *f, const npuE_step *conv) {
  npuP_fused_conv *pc = npuC_alloc(f->b->ctx, sizeof *pc);
  if (!pc) return NULL;
  const npuG_value *w = value(f, conv->in[1]);
  *pc = (npuP_fused_conv){.k_h = w->shape[0], .k_w = w->shape[1], .c = w->shape[2],
                          .out_c = w->shape[3], .bias_input = -1, .slope_input = -1};
  memcpy(&pc->window, node_of(f, conv)->params.bytes, sizeof pc->window);
  return pc;
}

/* The fuser's by-value arrays (readers, reader, pinned) grown to n values. */
static npu_status fit_readers(fuser *f, size_t n) {
  npu_context *ctx = f->b->ctx;
  int *readers = npuC_realloc(ctx, f->n_readers, n * sizeof *readers);
  if (readers) f->n_readers = readers;
  int *reader = readers ? npuC_realloc(ctx, f->reader, n * sizeof *reader) : NULL;
  if (reader) f->reader = reader;
  uint8_t *pinned = reader ? npuC_realloc(ctx, f->pinned, n) : NULL;
  if (pinned) f->pinned = pinned;
  return pinned ? NPU_OK : NPU_ERR_NOMEM;
}

/* A new plan value holding a float32 constant made now (a folded filter or bias), described
   like value `like` (its name) with the given shape; *v its id, *t its data. */
static npu_status add_constant(fuser *f, int like, int ndim, const int64_t *shape, int *v,
                               npu_tensor **t) {
  npu_context *ctx = f->b->ctx;
  npuE_plan *p = f->p;
  size_t n = (size_t)p->n_values + 1;
  npuG_value *values = npuC_realloc(ctx, p->values, n * sizeof *values);
  if (values) p->values = values;
  npu_tensor **slots = values ? npuC_realloc(ctx, p->slots, n * sizeof *slots) : NULL;
  if (slots) p->slots = slots;
  uint8_t *owned = slots ? npuC_realloc(ctx, p->owned, n) : NULL;
  if (owned) p->owned = owned;
  npu_tensor **known = owned ? npuC_realloc(ctx, f->b->known, n * sizeof *known) : NULL;
  if (known) f->b->known = known;
  if (!known || fit_readers(f, n) || npu_tensor_new(ctx, NPU_DTYPE_F32, ndim, shape, t))
    return NPU_ERR_NOMEM;
  int id = p->n_values++;
  p->values[id] = p->values[like];
  p->values[id].dtype = NPU_DTYPE_F32;
  p->values[id].ndim = ndim;
  memcpy(p->values[id].shape, shape, (size_t)ndim * sizeof *shape);
  p->slots[id] = f->b->known[id] = *t;
  p->owned[id] = 1;
  f->n_readers[id] = 0, f->reader[id] = -1, f->pinned[id] = 0;
  *v = id;
  return NPU_OK;
}

/* bn: ConvBatchnormFusionPass (the chain holds a mul: scales folded into a constant filter),
   else ConvBiasAddFusionPass (adds only). */
static npu_status fuse_conv(fuser *f, bool bn) {
  npuE_plan *p = f->p;
  for (int k = 0; k < p->n_steps; k++) {
    npu_tensor **known = f->b->known; /* add_constant may move it */
    const npuE_step *conv = &p->steps[k];
    bool dw = conv->def == &npuX_op_depthwise_conv2d;
    if (!dw && conv->def != &npuX_op_conv2d) continue;
    if (!is_f32(f, conv->in[0]) || !is_f32(f, conv->in[1]) || !is_f32(f, conv->out[0])) continue;
    conv_link links[MAX_LINKS];
    int n = conv_links(f, k, links);
    bool has_mul = false;
    for (int i = 0; i < n; i++) has_mul |= links[i].kind == L_MUL;
    if (bn ? !has_mul : !(n > 0 && (links[0].kind == L_ADD || links[0].kind == L_SUB))) continue;
    f->match++;

    /* the prefix of links that can be folded */
    bool filter_known = known[conv->in[1]] != NULL, folded_mul = false, const_add = false;
    int used = 0, var_bias = -1, v = conv->out[0], prev = k;
    for (int i = 0; i < n; i++) {
      const conv_link *l = &links[i];
      if (!foldable(f, v, prev, l->step)) break;
      if (l->kind != L_ACT) {
        bool c = known[l->operand] != NULL;
        if (bn) {
          if (!c || !filter_known) break; /* training graphs: variables are never folded */
          folded_mul |= l->kind == L_MUL;
        } else if (l->kind == L_MUL || l->kind == L_RSUB) {
          break;
        } else if (c) {
          if (var_bias >= 0) break;
          const_add = true;
        } else { /* one bias computed at run time: a per-channel value added as it is */
          if (var_bias >= 0 || const_add || l->bcast != NPUK_EW_ROW || l->kind != L_ADD) break;
          var_bias = l->operand;
        }
      }
      used = i + 1;
      v = p->steps[l->step].out[0];
      prev = l->step;
      if (l->kind == L_ACT) break;
    }
    if (bn ? !folded_mul : used == 0 || links[0].kind == L_ACT) continue;

    /* y = conv(x, w) * scale + shift per output channel: scale into a new filter, shift
       into a new bias (both computed in double, rounded once) */
    int64_t channels = value(f, conv->out[0])->shape[3];
    int n_shift = 0, last_shift = -1;
    for (int i = 0; i < used; i++)
      if (links[i].kind != L_ACT && links[i].kind != L_MUL) n_shift++, last_shift = i;
    /* one added vector and no scale: the step reads it as it is (the unfused bits) */
    if (!bn && n_shift == 1 && links[last_shift].kind == L_ADD &&
        links[last_shift].bcast == NPUK_EW_ROW)
      var_bias = links[last_shift].operand;
    bool has_shift = n_shift > 0 && var_bias < 0;
    npuP_fused_conv *pc = conv_params(f, conv);
    double *st = npuC_alloc(f->b->ctx, (size_t)channels * 2 * sizeof *st);
    if (!pc || !st) {
      npuC_free(f->b->ctx, pc);
      npuC_free(f->b->ctx, st);
      return NPU_ERR_NOMEM;
    }
    double *scale = st, *shift = st + channels;
    for (int64_t ch = 0; ch < channels; ch++) scale[ch] = 1, shift[ch] = 0;
    pattern pt = {.steps = {k}, .n_steps = 1, .in = {conv->in[0], conv->in[1]}, .n_in = 2};
    int shift_like = -1, slope = -1;
    for (int i = 0; i < used; i++) {
      const conv_link *l = &links[i];
      pt.steps[pt.n_steps++] = l->step;
      pt.out = p->steps[l->step].out[0];
      if (l->kind == L_ACT) {
        pc->act = l->act;
        pc->alpha = l->alpha;
        pc->act_fast = l->act_fast;
        slope = l->slope;
        continue;
      }
      if (l->operand == var_bias) continue;
      if (l->kind != L_MUL && shift_like < 0) shift_like = l->operand;
      const float *o = known[l->operand]->data;
      for (int64_t ch = 0; ch < channels; ch++) {
        double x = o[l->bcast == NPUK_EW_SCALAR ? 0 : ch];
        switch (l->kind) {
        case L_ADD: shift[ch] += x; break;
        case L_SUB: shift[ch] -= x; break;
        case L_RSUB: scale[ch] = -scale[ch], shift[ch] = x - shift[ch]; break;
        default: scale[ch] *= x, shift[ch] *= x; break; /* L_MUL */
        }
      }
    }
    npu_status s = NPU_OK;
    if (bn) { /* the filter viewed as (k_h * k_w * c, channels), conv2d and depthwise alike */
      const npu_tensor *w = known[conv->in[1]];
      npu_tensor *fw;
      s = add_constant(f, conv->in[1], w->ndim, w->shape, &pt.in[1], &fw);
      const float *w0 = w->data;
      float *w1 = s ? NULL : fw->data;
      for (int64_t i = 0; w1 && i < w->numel; i++) w1[i] = (float)(w0[i] * scale[i % channels]);
    }
    if (!s && has_shift) {
      npu_tensor *bt;
      s = add_constant(f, shift_like, 1, &channels, &pt.in[2], &bt);
      float *b1 = s ? NULL : bt->data;
      for (int64_t ch = 0; b1 && ch < channels; ch++) b1[ch] = (float)shift[ch];
      pc->bias_input = 2;
      pt.n_in = 3;
    } else if (!s && var_bias >= 0) {
      pc->bias_input = 2;
      pt.in[pt.n_in++] = var_bias;
    }
    if (slope >= 0) {
      pc->slope_input = pt.n_in;
      pt.in[pt.n_in++] = slope;
    }
    npuC_free(f->b->ctx, st);
    if (s) {
      npuC_free(f->b->ctx, pc);
      return s;
    }
    s = commit(f, &pt, dw ? &npuP_op_fused_depthwise_conv2d : &npuP_op_fused_conv2d, pc,
               conv->scratch_size);
    if (s) return s;
  }
  return NPU_OK;
}

static npu_status fuse_conv_batchnorm(fuser *f) { return fuse_conv(f, true); }
static npu_status fuse_conv_bias(fuser *f) { return fuse_conv(f, false); }

/* ---- ConvMaxPoolFusionPass ---- */

/* The pooled params of convolution step conv followed by max_pool step mp (a new block, owned
   by the caller), or NULL when the pool's windows overlap or the shapes do not fit. */
static npuP_fused_conv *pooled_params(fuser *f, const npuE_step *conv, const npuE_step *mp) {
  npuP_fused_conv *pc = npuC_alloc(f->b->ctx, sizeof *pc);
  if (!pc) return NULL;
  if (conv->def == &npuP_op_fused_conv2d) {
    *pc = *(const npuP_fused_conv *)conv->params;
  } else {
    const npuG_value *w = value(f, conv->in[1]);
    *pc = (npuP_fused_conv){.k_h = w->shape[0], .k_w = w->shape[1], .c = w->shape[2],
                            .out_c = w->shape[3], .bias_input = -1, .slope_input = -1};
    memcpy(&pc->window, node_of(f, conv)->params.bytes, sizeof pc->window);
  }
  pc->pooled = true;
  memcpy(&pc->pool, node_of(f, mp)->params.bytes, sizeof pc->pool);
  return pc;
}

/* conv2d or fused_conv2d (float32), then max_pool of its output with windows that do not
   overlap, the convolution's output read by nothing else: one fused_conv2d step writing the
   pool (inference graphs: in training, max_pool_grad and relu_grad read that output again).
   Where the precision mode may store x or y in float16 / bfloat16, only pairs the direct
   kernel takes (it reads and writes them as stored; the pooled im2col kernel is float32 only).
   Rounding after the pool instead of before changes nothing but the sign of a zero: rounding
   is monotone, so max_pool of rounded values is the rounded max. */
static npu_status fuse_conv_max_pool(fuser *f) {
  npuE_plan *p = f->p;
  bool reduced = f->b->cfg->precision != NPUP_ORIGIN;
  for (int k = 0; k < p->n_steps; k++) {
    npuE_step *conv = &p->steps[k];
    bool fused = conv->def == &npuP_op_fused_conv2d;
    if ((!fused && conv->def != &npuX_op_conv2d) || conv->dynamic ||
        (fused && ((const npuP_fused_conv *)conv->params)->pooled))
      continue;
    int v = conv->out[0], kp = next_step(f, v);
    npuE_step *mp = kp >= 0 ? &p->steps[kp] : NULL;
    if (!mp || mp->def != &npuX_op_max_pool || mp->in[0] != v || mp->dynamic || !is_f32(f, v) ||
        !is_f32(f, mp->out[0]) || !is_f32(f, conv->in[0]) || !is_f32(f, conv->in[1]))
      continue;
    f->match++;
    if (!foldable(f, v, k, kp)) continue;
    npuP_fused_conv *pc = pooled_params(f, conv, mp);
    if (!pc) return NPU_ERR_NOMEM;
    npuK_window2d w, pw;
    bool pooled;
    if (npuP_conv_geometry(&npuP_op_fused_conv2d, pc, value(f, conv->in[0]),
                           value(f, conv->in[1]), &w, &pw, &pooled) ||
        !npuK_conv2d_pool_fits(&w, &pw) || (reduced && !npuK_conv2d_direct_fits(&w, pc->out_c, &pw))) {
      npuC_free(f->b->ctx, pc);
      continue;
    }
    npu_context *ctx = f->b->ctx;
    npuE_step *s = conv;
    if (fused) { /* the fused step takes the pool: its params, its output, one more node
                    (counted as this pass's effect; explain names the step's first pass) */
      int *absorbed = npuC_realloc(ctx, conv->absorbed, (size_t)(conv->n_absorbed + 1) *
                                                             sizeof *absorbed);
      if (!absorbed) {
        npuC_free(ctx, pc);
        return NPU_ERR_NOMEM;
      }
      absorbed[conv->n_absorbed++] = mp->node;
      conv->absorbed = absorbed;
      npuC_free(ctx, conv->owned_params);
      conv->params = conv->owned_params = pc;
      conv->out[0] = mp->out[0]; /* the step keeps the name of the pass that made it */
      f->n_readers[v] = 0;
      npuC_free(ctx, mp->in);
      npuC_free(ctx, mp->owned_params);
      npuC_free(ctx, mp->absorbed);
      *mp = (npuE_step){.def = NULL};
      f->effect++;
    } else {
      pattern pt = {.steps = {k, kp}, .n_steps = 2, .in = {conv->in[0], conv->in[1]},
                    .n_in = 2, .out = mp->out[0]};
      npu_status st = commit(f, &pt, &npuP_op_fused_conv2d, pc, 0);
      if (st) return st;
      s = &p->steps[kp];
    }
    npu_status st = npuP_step_scratch(ctx, p, s, &f->b->graph->nodes[s->node], false);
    if (st) return st;
  }
  return NPU_OK;
}

/* ---- TbeEltwiseFusionPass ---- */

static const struct eltwise_op {
  const npu_op_def *def;
  uint8_t kind, op; /* npuK_ew_kind, npuK_unop / npuK_binop */
} eltwise_ops[] = {
    {&npuX_op_add, NPUK_EW_BINARY, NPUK_BIN_ADD},
    {&npuX_op_sub, NPUK_EW_BINARY, NPUK_BIN_SUB},
    {&npuX_op_mul, NPUK_EW_BINARY, NPUK_BIN_MUL},
    {&npuX_op_div, NPUK_EW_BINARY, NPUK_BIN_DIV},
    {&npuX_op_maximum, NPUK_EW_BINARY, NPUK_BIN_MAXIMUM},
    {&npuX_op_minimum, NPUK_EW_BINARY, NPUK_BIN_MINIMUM},
    {&npuX_op_pow, NPUK_EW_BINARY, NPUK_BIN_POW},
    {&npuX_op_squared_difference, NPUK_EW_BINARY, NPUK_BIN_SQUARED_DIFFERENCE},
    {&npuX_op_floor_div, NPUK_EW_BINARY, NPUK_BIN_FLOOR_DIV},
    {&npuX_op_floor_mod, NPUK_EW_BINARY, NPUK_BIN_FLOOR_MOD},
    {&npuX_op_bias_add, NPUK_EW_BINARY, NPUK_BIN_ADD}, /* the bias is a last-dim operand */
    {&npuX_op_neg, NPUK_EW_UNARY, NPUK_UN_NEG},
    {&npuX_op_relu, NPUK_EW_UNARY, NPUK_UN_RELU},
    {&npuX_op_relu6, NPUK_EW_UNARY, NPUK_UN_RELU6},
    {&npuX_op_sigmoid, NPUK_EW_UNARY, NPUK_UN_SIGMOID},
    {&npuX_op_tanh, NPUK_EW_UNARY, NPUK_UN_TANH},
    {&npuX_op_exp, NPUK_EW_UNARY, NPUK_UN_EXP},
    {&npuX_op_log, NPUK_EW_UNARY, NPUK_UN_LOG},
    {&npuX_op_sqrt, NPUK_EW_UNARY, NPUK_UN_SQRT},
    {&npuX_op_square, NPUK_EW_UNARY, NPUK_UN_SQUARE},
    {&npuX_op_abs, NPUK_EW_UNARY, NPUK_UN_ABS},
    {&npuX_op_leaky_relu, NPUK_EW_LEAKY_RELU, 0},
    {&npuX_op_prelu, NPUK_EW_PRELU, 0}, /* the slope is the operand, the value input 0 */
};

static const struct eltwise_op *eltwise_of(const fuser *f, const npuE_step *s) {
  if (!live(s) || s->n_out != 1 || !is_f32(f, s->out[0])) return NULL;
  for (size_t i = 0; i < npu_countof(eltwise_ops); i++)
    if (s->def == eltwise_ops[i].def) {
      for (int j = 0; j < s->n_in; j++)
        if (!is_f32(f, s->in[j])) return NULL;
      return &eltwise_ops[i];
    }
  return NULL;
}

typedef struct chain {
  pattern pt;
  npuK_ew_instr prog[MAX_CHAIN + 1];
  int n_instr;
  bool block; /* an op of the chain is block-listed */
} chain;

/* The operand index of value v (each value is passed once), or -1 when there are too many. */
static int operand_index(chain *c, int v) {
  for (int i = 0; i < c->pt.n_in; i++)
    if (c->pt.in[i] == v) return i;
  if (c->pt.n_in == MAX_OPERANDS) return -1;
  c->pt.in[c->pt.n_in] = v;
  return c->pt.n_in++;
}

/* Appends step s (op e) reading the running value v, or the chain's first step (v < 0): its
   instruction, and for a first step the LOAD of an operand of the result's shape. */
static bool append(const fuser *f, chain *c, const npuE_step *s, const struct eltwise_op *e,
                   int v, const npuG_value *shape) {
  if (c->n_instr + 2 > MAX_CHAIN + 1 || !same_shape(value(f, s->out[0]), shape)) return false;
  npuK_ew_instr in = {.kind = e->kind, .op = e->op, .operand = -1};
  /* exp, log, tanh, sigmoid under high_performance: the program runs their fast kernels */
  if (e->kind == NPUK_EW_UNARY && fast_impl(f, s)) in.kind = NPUK_EW_UNARY_FAST;
  int load = -1;
  if (e->kind == NPUK_EW_PRELU) {
    int x = s->in[0], o = s->in[1], bc = broadcast_of(f, o, shape);
    if (o == x || bc < 0) return false;
    if (v < 0 ? broadcast_of(f, x, shape) != NPUK_EW_FULL : x != v) return false;
    if (v < 0) load = x;
    in.bcast = (uint8_t)bc;
    if ((in.operand = (int16_t)operand_index(c, o)) < 0) return false;
  } else if (e->kind != NPUK_EW_BINARY) {
    if (v < 0) load = s->in[0];
    else if (s->in[0] != v) return false;
    in.alpha = e->kind == NPUK_EW_LEAKY_RELU ? (float)attr_number(node_of(f, s), "alpha", 0.2) : 0;
  } else {
    int a = s->in[0], b = s->in[1], o;
    if (v < 0) { /* the operand of the result's shape is loaded, the other one is combined */
      bool a_full = broadcast_of(f, a, shape) == NPUK_EW_FULL;
      if (!a_full && (broadcast_of(f, b, shape) != NPUK_EW_FULL || e->def == &npuX_op_bias_add))
        return false;
      load = a_full ? a : b;
      o = a_full ? b : a;
      in.swap = !a_full;
    } else {
      if ((a == v) == (b == v) || (e->def == &npuX_op_bias_add && a != v)) return false;
      o = a == v ? b : a;
      in.swap = b == v; /* operand OP value */
    }
    int bc = broadcast_of(f, o, shape);
    if (bc < 0 || (e->def == &npuX_op_bias_add && bc != NPUK_EW_ROW)) return false;
    in.bcast = (uint8_t)bc;
    if ((in.operand = (int16_t)operand_index(c, o)) < 0) return false;
  }
  if (load >= 0) {
    int li = operand_index(c, load);
    if (li < 0) return false;
    c->prog[c->n_instr++] = (npuK_ew_instr){.kind = NPUK_EW_LOAD, .operand = (int16_t)li};
  }
  c->prog[c->n_instr++] = in;
  c->block |= e->def->prec == NPUX_PREC_BLOCK;
  return true;
}

static npu_status fuse_eltwise(fuser *f) {
  npuE_plan *p = f->p;
  for (int k = 0; k < p->n_steps; k++) {
    const struct eltwise_op *e = eltwise_of(f, &p->steps[k]);
    if (!e) continue;
    chain c = {.pt = {.steps = {k}, .n_steps = 1}};
    const npuG_value *shape = value(f, p->steps[k].out[0]);
    if (!append(f, &c, &p->steps[k], e, -1, shape)) continue;
    int v = p->steps[k].out[0], prev = k;
    while (c.pt.n_steps < MAX_CHAIN) {
      int kn = next_step(f, v);
      const struct eltwise_op *en = kn >= 0 ? eltwise_of(f, &p->steps[kn]) : NULL;
      if (!en) break;
      chain trial = c; /* a conv_link that does not fit leaves the chain as it was */
      if (!append(f, &trial, &p->steps[kn], en, v, shape)) break;
      f->match++;
      if (!foldable(f, v, prev, kn)) break;
      c = trial;
      c.pt.steps[c.pt.n_steps++] = kn;
      v = p->steps[kn].out[0];
      prev = kn;
    }
    if (c.pt.n_steps < 2) continue;
    c.pt.out = v;
    npuP_fused_eltwise *params =
        npuC_alloc(f->b->ctx, sizeof *params + (size_t)c.n_instr * sizeof params->prog[0]);
    if (!params) return NPU_ERR_NOMEM;
    params->n_instr = c.n_instr;
    memcpy(params->prog, c.prog, (size_t)c.n_instr * sizeof c.prog[0]);
    npu_status s = commit(f, &c.pt, c.block ? &npuP_op_fused_eltwise_block : &npuP_op_fused_eltwise,
                          params, 0);
    if (s) return s;
    /* commit put the step at the chain's last; its impl says (explain) that it runs a fast
       kernel, the instructions which */
    for (int i = 0; i < c.n_instr; i++)
      if (c.prog[i].kind == NPUK_EW_UNARY_FAST) p->steps[c.pt.steps[c.pt.n_steps - 1]].impl = 1;
    f->effect += c.pt.n_steps - 2; /* commit counted one; each conv_link folded is an effect */
  }
  return NPU_OK;
}

/* ---- MaxPoolGradReluGradFusionPass ---- */

/* The first live bias_add_grad step after step k reading value g, or -1. */
static int bias_grad_reader(const fuser *f, int g, int k) {
  for (int j = k + 1; j < f->p->n_steps; j++) {
    const npuE_step *s = &f->p->steps[j];
    if (live(s) && s->def == &npuX_op_bias_add_grad && s->n_in == 1 && s->in[0] == g &&
        !s->dynamic)
      return j;
  }
  return -1;
}

/* max_pool_grad (float32), then relu_grad of its output (the gradients, input 0) with float32
   features of x's shape, that output read by nothing else: one step that masks as it scatters
   (a training graph's conv + relu + max_pool, backwards).  The same bits: relu_grad selects. */
static npu_status fuse_max_pool_grad_relu(fuser *f) {
  npuE_plan *p = f->p;
  for (int k = 0; k < p->n_steps; k++) {
    const npuE_step *mpg = &p->steps[k];
    if (mpg->def != &npuX_op_max_pool_grad || mpg->dynamic || mpg->n_in != 3) continue;
    int v = mpg->out[0], kr = next_step(f, v);
    const npuE_step *rg = kr >= 0 ? &p->steps[kr] : NULL;
    if (!rg || rg->def != &npuX_op_relu_grad || rg->in[0] != v || rg->in[1] == v ||
        rg->dynamic) /* neither has a high_performance kernel (implmode.c's dual) */
      continue;
    bool f32 = true;
    for (int i = 0; i < 3; i++) f32 &= is_f32(f, mpg->in[i]);
    if (!f32 || !is_f32(f, v) || !is_f32(f, rg->in[1]) || !is_f32(f, rg->out[0]) ||
        !same_shape(value(f, rg->in[1]), value(f, mpg->in[0])) ||
        !same_shape(value(f, v), value(f, mpg->in[0])))
      continue;
    f->match++;
    if (!foldable(f, v, k, kr)) continue;
    npuX_window_params *wp = npuC_alloc(f->b->ctx, sizeof *wp);
    if (!wp) return NPU_ERR_NOMEM;
    memcpy(wp, node_of(f, mpg)->params.bytes, sizeof *wp);
    pattern pt = {.steps = {k, kr}, .n_steps = 2,
                  .in = {mpg->in[0], mpg->in[1], mpg->in[2], rg->in[1]}, .n_in = 4,
                  .out = rg->out[0]};
    /* a bias_add_grad of the result (the convolution's bias, backwards) joins as a second
       output, summed while each image's dx is in cache; the step stays at relu_grad's place.
       Also under mixed bfloat16, where the kernel reads dx as stored: the sum (float32, as
       the block-listed bias_add_grad's after its Cast: precision.c, decide) is of the
       rounded dx.  Not under mixed float16, whose dx the executor narrows after the kernel */
    int mode = f->b->cfg->precision;
    int kb = mode == NPUP_ORIGIN || mode == NPUP_MIX_BF16 ? bias_grad_reader(f, rg->out[0], kr) : -1;
    if (kb >= 0 && is_f32(f, p->steps[kb].out[0])) {
      pt.steps[pt.n_steps++] = kb;
      pt.out2 = p->steps[kb].out[0];
      pt.two_outputs = true;
      pt.at_step = 2;
    }
    npu_status st = commit(f, &pt, &npuP_op_fused_max_pool_grad_relu, wp, 0);
    if (!st && pt.two_outputs) {
      npuE_step *fs = &p->steps[kr];
      st = npuP_step_scratch(f->b->ctx, p, fs, &f->b->graph->nodes[fs->node], false);
    }
    if (st) return st;
  }
  return NPU_OK;
}

/* ---- ReluGradBiasAddGradFusionPass ---- */

/* relu_grad (float32, dy and features of one shape of rank >= 2) whose output g some later
   bias_add_grad reads: one step writing g and the bias gradient in one pass over g (a dense
   layer's relu, backwards).  g stays (the input gradient's and the weights' GEMMs read it), so
   the step takes relu_grad's place: bias_add_grad reads nothing else.  Float32 precision
   only: under a reduced mode relu_grad (gray) and bias_add_grad (block) keep their own. */
static npu_status fuse_relu_grad_bias_grad(fuser *f) {
  npuE_plan *p = f->p;
  if (f->b->cfg->precision != NPUP_ORIGIN) return NPU_OK;
  for (int k = 0; k < p->n_steps; k++) {
    const npuE_step *rg = &p->steps[k];
    if (rg->def != &npuX_op_relu_grad || rg->dynamic || rg->n_in != 2) continue;
    int g = rg->out[0], kb = bias_grad_reader(f, g, k);
    if (kb < 0) continue;
    const npuG_value *gv = value(f, g);
    if (!is_f32(f, rg->in[0]) || !is_f32(f, rg->in[1]) || !is_f32(f, g) ||
        !is_f32(f, p->steps[kb].out[0]) || gv->ndim < 2 ||
        !same_shape(value(f, rg->in[0]), gv) || !same_shape(value(f, rg->in[1]), gv))
      continue;
    f->match++;
    pattern pt = {.steps = {k, kb}, .n_steps = 2, .in = {rg->in[0], rg->in[1]}, .n_in = 2,
                  .out = g, .out2 = p->steps[kb].out[0], .two_outputs = true, .at_step = 1};
    npu_status s = commit(f, &pt, &npuP_op_fused_relu_grad_bias_grad, NULL, 0);
    if (s) return s;
  }
  return NPU_OK;
}

/* ---- LogSoftmaxGradFusionPass ---- */

/* The step making value v, searched backwards from step k, or -1. */
static int producer_step(const fuser *f, int v, int k) {
  for (int j = k - 1; j >= 0; j--) {
    const npuE_step *s = &f->p->steps[j];
    for (int i = 0; live(s) && i < s->n_out; i++)
      if (s->out[i] == v) return j;
  }
  return -1;
}

/* log_softmax_grad(y, dy) with y = log_softmax(z) and dy = mul(a, b), both read by nothing
   else (a cross-entropy loss's gradient once the constant broadcasts are folded: log_softmax of
   the logits, the labels times -1/batch), float32 of one shape of rank >= 1 (a or b may be
   one element): one step computing the three row by row, y and dy never stored; a
   bias_add_grad of the result (the logits' bias) joins as a second output.  The step takes
   log_softmax_grad's place, with log_softmax's implementation mode as its impl.  Float32
   precision only (log_softmax is block-listed). */
static npu_status fuse_log_softmax_grad(fuser *f) {
  npuE_plan *p = f->p;
  if (f->b->cfg->precision != NPUP_ORIGIN) return NPU_OK;
  for (int k = 0; k < p->n_steps; k++) {
    const npuE_step *lg = &p->steps[k];
    if (lg->def != &npuX_op_log_softmax_grad || lg->dynamic || lg->n_in != 2) continue;
    int y = lg->in[0], dy = lg->in[1], d = lg->out[0];
    int kl = producer_step(f, y, k), km = producer_step(f, dy, k);
    const npuE_step *ls = kl >= 0 ? &p->steps[kl] : NULL, *mul = km >= 0 ? &p->steps[km] : NULL;
    if (!ls || !mul || ls->def != &npuX_op_log_softmax || mul->def != &npuX_op_mul ||
        ls->dynamic || mul->dynamic || mul->n_in != 2)
      continue;
    /* log_softmax's fast kernel has a twin in the fused one (its max and row sum), so a
       high_performance log_softmax fuses too, and the step runs that kernel (impl) */
    bool fast = fast_impl(f, ls);
    const npuG_value *dv = value(f, d);
    int z = ls->in[0], a = mul->in[0], b = mul->in[1];
    int ba = broadcast_of(f, a, dv), bb = broadcast_of(f, b, dv);
    if (!is_f32(f, z) || !is_f32(f, y) || !is_f32(f, dy) || !is_f32(f, d) || !is_f32(f, a) ||
        !is_f32(f, b) || dv->ndim < 1 || !same_shape(value(f, z), dv) ||
        !same_shape(value(f, y), dv) || !same_shape(value(f, dy), dv) ||
        (ba != NPUK_EW_FULL && ba != NPUK_EW_SCALAR) || (bb != NPUK_EW_FULL && bb != NPUK_EW_SCALAR))
      continue;
    f->match++;
    if (!foldable(f, y, kl, k) || !foldable(f, dy, km, k)) continue;
    npuP_fused_xent_grad *params = npuC_alloc(f->b->ctx, sizeof *params);
    if (!params) return NPU_ERR_NOMEM;
    *params = (npuP_fused_xent_grad){.a_one = ba == NPUK_EW_SCALAR, .b_one = bb == NPUK_EW_SCALAR};
    pattern pt = {.n_steps = 3, .in = {z, a, b}, .n_in = 3, .out = d};
    /* in plan order; the step goes where log_softmax_grad was */
    int lo = kl < km ? kl : km, hi = kl < km ? km : kl;
    pt.steps[0] = lo, pt.steps[1] = hi, pt.steps[2] = k;
    pt.at_step = 3;
    int kb = bias_grad_reader(f, d, k);
    if (kb >= 0 && is_f32(f, p->steps[kb].out[0])) {
      pt.steps[pt.n_steps++] = kb;
      pt.out2 = p->steps[kb].out[0];
      pt.two_outputs = true;
    }
    npu_status s = commit(f, &pt, &npuP_op_fused_xent_grad, params, 0);
    if (s) return s;
    p->steps[k].impl = fast; /* commit put the step at k, log_softmax_grad's place */
  }
  return NPU_OK;
}

/* ---- steps left without readers ---- */

/* Whether step s may go when nothing reads its outputs: a kernel with no state, no host part,
   no data-dependent shape and no collective, whose node no run names as a target and no node
   waits for (a control input: a check kept for its error). */
static bool pure_step(const fuser *f, const npuE_step *s, const uint8_t *waited) {
  const unsigned keep = NPUX_F_NO_FOLD | NPUX_F_SHARED | NPUX_F_DATA_SHAPE | NPUX_F_SUMMARY |
                        NPUX_F_EARLY;
  if (!live(s) || s->def->kind != NPUX_KIND_KERNEL || (s->def->flags & keep) || s->dynamic ||
      s->host || waited[s->node])
    return false;
  for (int i = 0; i < s->n_out; i++)
    if (f->n_readers[s->out[i]] || f->pinned[s->out[i]]) return false;
  return true;
}

/* Drops the steps whose values folding made unneeded: a gradient's broadcast_like reads its
   `like` input for the shape only, so once it is folded (NPUX_F_LIKE_LAST) the forward loss's
   mul, reduce_sum and neg that only lent that shape have no reader left.  Backwards, so a
   chain goes in one sweep (readers come later in the plan). */
static npu_status drop_dead_steps(fuser *f) {
  const npu_graph *g = f->b->graph;
  npuE_plan *p = f->p;
  npu_context *ctx = f->b->ctx;
  uint8_t *waited = npuC_calloc(ctx, (size_t)(g->n_nodes ? g->n_nodes : 1), 1);
  if (!waited) return NPU_ERR_NOMEM;
  for (int id = 0; id < g->n_nodes; id++)
    for (int i = 0; i < g->nodes[id].n_controls; i++) waited[g->nodes[id].controls[i]] = 1;
  for (int i = 0; i < p->n_targets; i++) waited[p->targets[i]] = 1;
  index_readers(f);
  for (int k = p->n_steps - 1; k >= 0; k--) {
    npuE_step *s = &p->steps[k];
    if (!pure_step(f, s, waited)) continue;
    for (int i = 0; i < s->n_in; i++) f->n_readers[s->in[i]]--;
    drop_step(ctx, s);
  }
  compact(p);
  npuC_free(ctx, waited);
  return NPU_OK;
}

/* ====================================================================================== run */

int npuP_fusion_pass_index(const char *name) {
  for (int i = 0; i < N_PASSES; i++)
    if (!strcmp(passes[i].name, name)) return i;
  return -1;
}
int npuP_fusion_pass_count(void) { return N_PASSES; }
const char *npuP_fusion_pass_name(int i) { return i >= 0 && i < N_PASSES ? passes[i].name : NULL; }

/* ---- the walk over a plan's blocks ----
   A dynamic plan (control steps, run-time shapes) is fused block by block: its top-level steps,
   then, depth first, each cond branch and while condition and body.  The passes work on
   f->p->steps, so a nested block is fused with the plan's step list pointing at the block's
   (values are the plan's at every depth).  Within a block a value stays when anything outside
   the block's own steps reads it: a step of another block, a cond's or while's results, a
   loop variable; a control step reads what its blocks capture (compile/control.c), so a value
   computed in a block and read inside a loop nested in it has that loop as a reader there. */

typedef struct fuse_walk {
  fuser f;
  struct npuP_fusion_config *c;
  const npuP_build *b;
  graph_stats *g;
  uint8_t *base_pin; /* by value id: fetched, fed, crossing host and device, run-time shaped */
  int n_values;      /* the plan's values when base_pin was made */
  int *total;        /* by value id: reads anywhere in the plan (all blocks, results, args) */
} fuse_walk;

static void count_reads(void *ud, const npuE_step *step, int depth, const npuE_step *parent,
                        int b) {
  (void)depth, (void)parent, (void)b;
  int *total = ud;
  for (int i = 0; step->def && i < step->n_in; i++) total[step->in[i]]++;
  const npuE_control *c = step->control;
  for (int k = 0; c && k < 2; k++)
    for (int i = 0; i < (step->def->kind == NPUX_KIND_WHILE && k == 0 ? 1 : c->n_results); i++)
      total[c->result[k][i]]++;
  for (int i = 0; c && c->args && i < c->n_results; i++) total[c->args[i]]++;
}

/* Values no pattern may fold away or (runtime) take in at all: a dynamic step's outputs are
   shaped when it runs and its inputs stay for it; a value passing between the host and the
   device part (mixed computing, compile/mixed.c) stays, so no fused step spans both. */
typedef struct pin_scan {
  const npuP_build *b;
  uint8_t *runtime, *pin;
} pin_scan;

static void scan_step(void *ud, const npuE_step *step, int depth, const npuE_step *parent, int b) {
  (void)depth, (void)parent, (void)b;
  pin_scan *ps = ud;
  const npuE_plan *p = ps->b->plan;
  const npu_graph *g = ps->b->graph;
  bool dynamic = step->dynamic && !step->control;
  for (int i = 0; i < step->n_in; i++) {
    int v = step->in[i];
    if (dynamic) ps->pin[v] = 1;
    if (p->on_host && v < g->n_values && p->on_host[g->values[v].node] != p->on_host[step->node])
      ps->pin[v] = 1;
  }
  for (int i = 0; dynamic && i < step->n_out; i++) ps->runtime[step->out[i]] = 1;
}

/* The by-value arrays sized for the plan's values now (a pass may have added constants). */
static npu_status fit_arrays(fuse_walk *w) {
  fuser *f = &w->f;
  npu_context *ctx = f->b->ctx;
  size_t n = (size_t)(f->p->n_values ? f->p->n_values : 1);
  int *total = npuC_realloc(ctx, w->total, n * sizeof *total);
  if (total) w->total = total;
  return total ? fit_readers(f, n) : NPU_ERR_NOMEM;
}

/* The passes over one block's steps (*steps, *n: the plan's own or a nested block's, *n
   updated), then over the blocks nested in its control steps. */
static npu_status fuse_block(fuse_walk *w, npuE_step *steps, int *n, bool nested) {
  fuser *f = &w->f;
  npuE_plan *p = f->p;
  npu_status s = fit_arrays(w);
  if (s) return s;
  /* what is read outside this block's own steps stays */
  memset(w->total, 0, (size_t)p->n_values * sizeof *w->total);
  npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, count_reads, w->total);
  for (int i = 0; i < p->n_fetches; i++) w->total[p->fetches[i]]++;
  npuE_step *own_steps = p->steps;
  int own_n = p->n_steps;
  p->steps = steps, p->n_steps = *n;
  index_readers(f);
  for (int v = 0; v < p->n_values; v++)
    f->pinned[v] = (v < w->n_values && w->base_pin[v]) || w->total[v] > f->n_readers[v];
  /* the top level's steps whose results nothing reads any more (the forward loss once the
     loss gradient's broadcasts are folded) go before the passes look for patterns */
  if (!nested) s = drop_dead_steps(f);
  for (int i = 0; !s && i < N_PASSES; i++) {
    if (!w->c->on[i] || (w->b->fusion_off & (1u << i))) continue;
    index_readers(f);
    f->pass = i;
    f->match = f->effect = 0;
    s = passes[i].run(f);
    compact(p);
    w->g->match[i] += f->match;
    w->g->effect[i] += f->effect;
  }
  *n = p->n_steps;
  p->steps = own_steps, p->n_steps = steps == own_steps ? *n : own_n;
  /* a nested step's scratch is the plan's own (compile/control.c) */
  for (int k = 0; nested && k < *n; k++)
    if (steps[k].scratch_size) p->nested_scratch = true;
  for (int k = 0; !s && k < *n; k++) {
    npuE_control *c = steps[k].control;
    for (int j = 0; c && j < 2 && !s; j++)
      s = fuse_block(w, c->block[j].steps, &c->block[j].n_steps, true);
  }
  return s;
}

npu_status npuP_fuse(npuP_build *b) {
  struct npuP_fusion_config *c = b->cfg->fusion;
  if (!c || b->cfg->reference) return NPU_OK;
  npu_context *ctx = b->ctx;
  npuE_plan *p = b->plan;
  size_t nv = (size_t)(p->n_values ? p->n_values : 1);
  graph_stats g = {.graph_id = b->trial ? -1 : c->n_compiled++};
  fuse_walk w = {.c = c, .b = b, .g = &g, .n_values = p->n_values,
                 .base_pin = npuC_calloc(ctx, nv, 2)};
  uint8_t *runtime = w.base_pin ? w.base_pin + nv : NULL;
  w.f = (fuser){.b = b, .p = p, .runtime = runtime, .n_runtime = p->n_values};
  npu_status s = w.base_pin ? NPU_OK : NPU_ERR_NOMEM;
  for (int i = 0; !s && i < p->n_fetches; i++) w.base_pin[p->fetches[i]] = 1;
  for (int i = 0; !s && i < p->n_feeds; i++) w.base_pin[p->feeds[i]] = 1;
  for (int v = 0; !s && p->dynamic && v < p->n_values; v++) /* run-time shapes: -1 dims */
    runtime[v] = !npuG_value_known(&p->values[v]);
  pin_scan ps = {.b = b, .runtime = runtime, .pin = w.base_pin};
  if (!s) npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, scan_step, &ps);
  for (int v = 0; !s && v < p->n_values; v++) w.base_pin[v] |= runtime[v];
  if (!s) {
    int n = p->n_steps;
    s = fuse_block(&w, p->steps, &n, false);
  }
  npuC_free(ctx, w.f.n_readers);
  npuC_free(ctx, w.f.reader);
  npuC_free(ctx, w.f.pinned);
  npuC_free(ctx, w.base_pin);
  npuC_free(ctx, w.total);
  if (!s && c->export_mode && !b->trial) s = record_graph(ctx, c, &g);
  if (!s && c->export_mode == 2 && !b->trial) s = export_stats(ctx, c);
  return s;
}
