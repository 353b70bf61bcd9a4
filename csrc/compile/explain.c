/*
 * explain.c — a compiled plan described as JSON text (npu_session_explain, sess:explain).
 *
 * The description is read from the plan alone, after every pass: the steps that run (what
 * fusion made of them, the rounding the precision mode chose), each value's dtype, shape, size
 * and where its memory lives, and the plan's memory totals.  Three tables of fields — plan,
 * step, value — drive the output, so a pass that adds something to the plan adds one line (and
 * a small writer) here; the layout is documented with npu_session_explain in npu.h.
 *
 * The text is built in one growing buffer from the context's allocator: an allocation failure
 * anywhere leaves nothing behind and returns NPU_ERR_NOMEM.
 */
#include <stdio.h>
#include <string.h>

#include "compile/fused_ops.h"
#include "compile/passes.h"
#include "compile/tuning.h"
#include "options/options_int.h"

/* ---- a minimal JSON writer ---- */

#define JW_MAX_DEPTH 64 /* control steps nest 3 levels each (step, blocks, block) */

typedef struct jw {
  npu_context *ctx;
  char *buf;
  size_t len, cap;
  bool nomem;
  bool after_key;            /* the next value follows "key": (no comma) */
  int depth;
  bool first[JW_MAX_DEPTH];  /* per open container: nothing written in it yet */
} jw;

static void put(jw *w, const char *s, size_t n) {
  if (w->nomem) return;
  if (w->len + n + 1 > w->cap) {
    size_t cap = w->cap ? w->cap : 1024;
    while (cap < w->len + n + 1) cap *= 2;
    char *b = npuC_realloc(w->ctx, w->buf, cap);
    if (!b) {
      w->nomem = true;
      return;
    }
    w->buf = b;
    w->cap = cap;
  }
  memcpy(w->buf + w->len, s, n);
  w->len += n;
  w->buf[w->len] = 0;
}

static void puts_(jw *w, const char *s) { put(w, s, strlen(s)); }

/* The comma before a value or a key, unless it is the first in its container. */
static void sep(jw *w) {
  if (w->after_key) {
    w->after_key = false;
    return;
  }
  if (w->depth > 0 && !w->first[w->depth - 1]) put(w, ",", 1);
  if (w->depth > 0) w->first[w->depth - 1] = false;
}

static void open_(jw *w, char c) {
  sep(w);
  put(w, &c, 1);
  /* nesting is fixed by this file's tables: JW_MAX_DEPTH is never reached */
  if (w->depth < JW_MAX_DEPTH) w->first[w->depth++] = true;
}

static void close_(jw *w, char c) {
  if (w->depth > 0) w->depth--;
  put(w, &c, 1);
}

void npuP_json_escape(const char *s, void (*put_fn)(void *ud, const char *text, size_t n),
                      void *ud) {
  const char *run = s ? s : ""; /* the bytes not yet handed over, copied as they are */
  const char *c = run;
  for (; *c; c++) {
    unsigned char u = (unsigned char)*c;
    if (u != '"' && u != '\\' && u >= 0x20) continue;
    char esc[8];
    if (c > run) put_fn(ud, run, (size_t)(c - run));
    if (u < 0x20) snprintf(esc, sizeof esc, "\\u%04x", u);
    else esc[0] = '\\', esc[1] = (char)u, esc[2] = 0;
    put_fn(ud, esc, strlen(esc));
    run = c + 1;
  }
  if (c > run) put_fn(ud, run, (size_t)(c - run));
}

static void put_jw(void *w, const char *s, size_t n) { put(w, s, n); }

/* s escaped, without the quotes. */
static void escaped(jw *w, const char *s) { npuP_json_escape(s, put_jw, w); }

static void str(jw *w, const char *s) {
  sep(w);
  if (!s) {
    puts_(w, "null");
    return;
  }
  put(w, "\"", 1);
  escaped(w, s);
  put(w, "\"", 1);
}

static void key(jw *w, const char *k) {
  str(w, k);
  put(w, ":", 1);
  w->after_key = true;
}

static void num(jw *w, int64_t v) {
  char b[32];
  sep(w);
  snprintf(b, sizeof b, "%lld", (long long)v);
  puts_(w, b);
}

static void boolean(jw *w, bool v) {
  sep(w);
  puts_(w, v ? "true" : "false");
}

/* ---- what the fields read ---- */

/* Where a value's memory lives. */
typedef enum mem_kind {
  MEM_NONE = 0, /* nothing in this plan produces it (absorbed by a fused step, or not needed) */
  MEM_FEED, MEM_CONST, MEM_VARIABLE, MEM_ALIAS, MEM_ITERATOR, MEM_ARENA, MEM_OWN,
  MEM_COUNT
} mem_kind;

static const char *const mem_names[MEM_COUNT] = {
    [MEM_NONE] = "none",         [MEM_FEED] = "feed",   [MEM_CONST] = "constant",
    [MEM_VARIABLE] = "variable", [MEM_ALIAS] = "alias", [MEM_ITERATOR] = "iterator",
    [MEM_ARENA] = "arena",       [MEM_OWN] = "own",
};

/* What a step's outputs are, by the executor's kind of op. */
static const mem_kind out_kind[] = {
    [NPUX_KIND_KERNEL] = MEM_OWN,       [NPUX_KIND_PLACEHOLDER] = MEM_FEED,
    [NPUX_KIND_CONST] = MEM_CONST,      [NPUX_KIND_VARIABLE] = MEM_VARIABLE,
    [NPUX_KIND_ASSIGN] = MEM_VARIABLE,  [NPUX_KIND_IDENTITY] = MEM_ALIAS,
    [NPUX_KIND_NO_OP] = MEM_NONE,       [NPUX_KIND_LOOP] = MEM_NONE,
    [NPUX_KIND_GET_NEXT] = MEM_ITERATOR,
    [NPUX_KIND_COND] = MEM_ALIAS,       /* the taken branch's results, borrowed */
    [NPUX_KIND_WHILE] = MEM_OWN,        /* the loop variables' final tensors */
    [NPUX_KIND_LOOP_VAR] = MEM_ALIAS,
};

typedef struct ex {
  const npu_graph *g;
  const npuP_config *cfg;
  const npuE_plan *p;
  uint8_t *kind; /* mem_kind by value id */
  uint8_t *used; /* by value id: a step reads it or a fetch names it */
  int *alias_of; /* by value id: the value whose arena block it shares (a reshape's), or -1 */
} ex;

static size_t value_bytes(const npuE_plan *p, int v) {
  const npuG_value *d = &p->values[v];
  if (d->ndim < 0) return 0; /* rank unknown (a graph dump's stage 0): size unknown */
  int64_t n = npuT_numel(d->ndim, d->shape);
  return n > 0 ? (size_t)n * npu_dtype_size(d->dtype) : 0;
}

static int64_t arena_offset(const npuE_plan *p, int v) {
  return p->memory.offset ? p->memory.offset[v] : -1;
}

/* ---- value fields: {"name", "dtype", "shape", "bytes", "memory", "offset"} ---- */

typedef void (*value_field)(jw *, const ex *, int v);

static const char *node_name(const ex *e, int node) { return npuP_node_name(e->g, node); }

static void v_name(jw *w, const ex *e, int v) {
  char b[24];
  const npuG_value *d = &e->p->values[v];
  sep(w);
  put(w, "\"", 1);
  escaped(w, node_name(e, d->node));
  snprintf(b, sizeof b, ":%d\"", d->index);
  puts_(w, b);
}
static void v_dtype(jw *w, const ex *e, int v) { str(w, npu_dtype_name(e->p->values[v].dtype)); }
static void v_shape(jw *w, const ex *e, int v) {
  const npuG_value *d = &e->p->values[v];
  if (d->ndim < 0) { /* rank unknown (only in a graph dump's stage 0: a plan's are inferred) */
    str(w, NULL);
    return;
  }
  open_(w, '[');
  for (int i = 0; i < d->ndim; i++) num(w, d->shape[i]);
  close_(w, ']');
}
static void v_bytes(jw *w, const ex *e, int v) { num(w, (int64_t)value_bytes(e->p, v)); }
static void v_memory(jw *w, const ex *e, int v) { str(w, mem_names[e->kind[v]]); }

static const struct {
  const char *name;
  value_field fn;
} value_fields[] = {
    {"name", v_name},   {"dtype", v_dtype},   {"shape", v_shape},
    {"bytes", v_bytes}, {"memory", v_memory},
};

static void value(jw *w, const ex *e, int v) {
  open_(w, '{');
  for (size_t i = 0; i < npu_countof(value_fields); i++) {
    key(w, value_fields[i].name);
    value_fields[i].fn(w, e, v);
  }
  if (e->kind[v] == MEM_ARENA) { /* only arena values have one */
    key(w, "offset");
    num(w, arena_offset(e->p, v));
    if (e->alias_of[v] >= 0) { /* at its input's offset: the step copies nothing */
      key(w, "alias_of");
      v_name(w, e, e->alias_of[v]);
    }
  }
  close_(w, '}');
}

static void values(jw *w, const ex *e, int n, const int *ids) {
  open_(w, '[');
  for (int i = 0; i < n; i++) value(w, e, ids[i]);
  close_(w, ']');
}

/* ---- step fields ---- */

typedef void (*step_field)(jw *, const ex *, const npuE_step *);

static void s_op(jw *w, const ex *e, const npuE_step *s) { (void)e, str(w, s->def->name); }
static void s_node(jw *w, const ex *e, const npuE_step *s) { str(w, node_name(e, s->node)); }
static void s_pass(jw *w, const ex *e, const npuE_step *s) { (void)e, str(w, s->pass); }
static void s_absorbed(jw *w, const ex *e, const npuE_step *s) {
  open_(w, '[');
  for (int i = 0; i < s->n_absorbed; i++) str(w, node_name(e, s->absorbed[i]));
  close_(w, ']');
}
static void s_inputs(jw *w, const ex *e, const npuE_step *s) { values(w, e, s->n_in, s->in); }
static void s_outputs(jw *w, const ex *e, const npuE_step *s) { values(w, e, s->n_out, s->out); }
static void rounding(jw *w, int dtype) {
  str(w, dtype >= 0 ? npu_dtype_name((npu_dtype)dtype) : NULL);
}
static void s_round_in(jw *w, const ex *e, const npuE_step *s) { (void)e, rounding(w, s->round_in); }
static void s_round_out(jw *w, const ex *e, const npuE_step *s) { (void)e, rounding(w, s->round_out); }
/* the inputs (numbers from 0) the executor widens from their stored float16 / bfloat16 into
   float32 copies before the kernel runs (npuE_step.widen: compile/precision.c, less what
   plan.c's prepare_steps lets the kernel read as stored) */
static void s_widened(jw *w, const ex *e, const npuE_step *s) {
  (void)e;
  open_(w, '[');
  for (int i = 0; s->widen && i < s->n_in; i++)
    if (s->widen[i]) num(w, i);
  close_(w, ']');
}
/* compile/implmode.c: which of the op's kernels runs (every op has a high_precision one) */
static void s_impl(jw *w, const ex *e, const npuE_step *s) {
  (void)e, str(w, s->impl ? "high_performance" : "high_precision");
}
/* the algorithm of a step with several (npuK_conv_algo), null for the others */
static void s_algo(jw *w, const ex *e, const npuE_step *s) {
  static const char *const conv[NPUK_CONV_ALGO_COUNT] = {
      [NPUK_CONV_IM2COL] = "im2col", [NPUK_CONV_WINOGRAD_2X3] = "winograd_2x3",
      [NPUK_CONV_DIRECT] = "direct", [NPUK_CONV_DIRECT_BF16] = "direct_bf16"};
  static const char *const gemm[NPUK_GEMM_ALGO_COUNT] = {
      [NPUK_GEMM_AUTO] = NULL, [NPUK_GEMM_SGEMM] = "sgemm", [NPUK_GEMM_GEMV] = "gemv",
      [NPUK_GEMM_BF16DOT] = "bf16dot", [NPUK_GEMM_F32TILE] = "f32tile"};
  /* conv2d, fused conv2d: npuK_conv_algo; conv2d_backprop_input: winograd_2x3 or null */
  bool is_conv = s->def->tune == NPUX_TUNE_CONV ||
                 (s->def == &npuX_op_conv2d_backprop_input && s->algo == NPUK_CONV_WINOGRAD_2X3);
  /* matmul, fused matmul, and fused_apply_gradient_descent's GEMM: npuK_gemm_algo */
  bool is_gemm = s->def->tune == NPUX_TUNE_GEMM || s->def == &npuP_op_fused_sgd;
  /* a step computing on bfloat16 as stored (NPUX_F_BF16_DOT: its last two inputs stored
     bfloat16 and not widened by the executor, which the precision pass decides so only where
     the CPU has AVX512_BF16) */
  const int a = s->n_in - 2, b = s->n_in - 1; /* the data inputs of conv2d's gradients */
  bool bf16_dot = (s->def->flags & NPUX_F_BF16_DOT) && !s->host && s->n_in >= 2 &&
                  !(s->widen && (s->widen[a] || s->widen[b])) &&
                  e->p->values[s->in[a]].dtype == NPU_DTYPE_BF16 &&
                  e->p->values[s->in[b]].dtype == NPU_DTYPE_BF16;
  str(w, bf16_dot ? "bf16dot"
         : is_conv && s->algo < NPUK_CONV_ALGO_COUNT ? conv[s->algo]
         : is_gemm && s->algo < NPUK_GEMM_ALGO_COUNT ? gemm[s->algo]
                                                     : NULL);
}
/* compile/tuning.c: the threads a tuned step runs on (null: the context's), and where its
   choice came from */
static void s_threads(jw *w, const ex *e, const npuE_step *s) {
  (void)e;
  if (s->threads) num(w, s->threads);
  else str(w, NULL);
}
static void s_tuned(jw *w, const ex *e, const npuE_step *s) {
  (void)e;
  str(w, s->tuned == 1 ? "timed" : s->tuned == 2 ? "record" : NULL);
}
static void s_scratch(jw *w, const ex *e, const npuE_step *s) {
  (void)e, num(w, (int64_t)s->scratch_size);
}
static void s_index(jw *w, const ex *e, const npuE_step *s) { (void)e, num(w, s->index); }
/* a step's constant operand transformed once, at compile time (plan.c: prepare_steps): a
   Winograd filter ("winograd_filter"), a direct_bf16 filter ("bf16_filter"), a bf16dot
   GEMM's B ("bf16_weights"), an f32tile GEMM's B ("f32_weights"), else null.  GEMM and
   convolution algorithms share numbers. */
static void s_prepared(jw *w, const ex *e, const npuE_step *s) {
  (void)e, str(w, !s->prepared                              ? NULL
                 : s->def->tune == NPUX_TUNE_GEMM
                     ? (s->algo == NPUK_GEMM_F32TILE ? "f32_weights" : "bf16_weights")
                 : s->algo == NPUK_CONV_DIRECT_BF16        ? "bf16_filter"
                                                           : "winograd_filter");
}
/* a Cast step making a variable's reduced-precision copy that the plan keeps between runs and
   makes again only after the variable is written (npuE_step.copy_of): the variable's name */
static void s_copy_of(jw *w, const ex *e, const npuE_step *s) {
  str(w, s->copy_of ? e->g->nodes[s->copy_of - 1].name : NULL);
}
/* shaped when it runs: outputs and scratch sized from the actual inputs (exec.c run_dynamic) */
static void s_dynamic(jw *w, const ex *e, const npuE_step *s) { (void)e, boolean(w, s->dynamic); }
/* mixed computing (compile/mixed.c): "host" or "device" */
static void s_placement(jw *w, const ex *e, const npuE_step *s) {
  (void)e, str(w, s->host ? "host" : "device");
}

static const struct {
  const char *name;
  step_field fn;
} step_fields[] = {
    {"op", s_op},
    {"node", s_node},
    {"pass", s_pass},
    {"absorbed", s_absorbed},
    {"inputs", s_inputs},
    {"outputs", s_outputs},
    {"round_in", s_round_in},
    {"round_out", s_round_out},
    {"widened", s_widened},
    {"scratch_bytes", s_scratch},
    {"impl", s_impl},
    {"algo", s_algo},
    {"threads", s_threads},
    {"tuned", s_tuned},
    {"index", s_index},
    {"prepared", s_prepared},
    {"copy_of", s_copy_of},
    {"dynamic", s_dynamic},
    {"placement", s_placement},
};

/* ---- control steps: their blocks, each a list of steps ---- */

static void step(jw *w, const ex *e, const npuE_step *s);

static void steps(jw *w, const ex *e, const npuE_step *list, int n) {
  open_(w, '[');
  for (int k = 0; k < n; k++) step(w, e, &list[k]);
  close_(w, ']');
}

/* cond: "then", "else"; while: "cond" (what the condition needs), "body" (the rest). */
const char *npuP_block_name(const npuE_step *control, int b) {
  static const char *const names[2][2] = {{"then", "else"}, {"cond", "body"}};
  return names[control->def->kind == NPUX_KIND_WHILE][b & 1];
}

/* "max_iterations" (while: null = no bound) and "blocks": [{"name", "steps"}, ...] */
static void control(jw *w, const ex *e, const npuE_step *s) {
  const npuE_control *c = s->control;
  bool loop = s->def->kind == NPUX_KIND_WHILE;
  if (loop) {
    key(w, "max_iterations");
    if (c->max_iterations < 0) str(w, NULL);
    else num(w, c->max_iterations);
  }
  key(w, "blocks");
  open_(w, '[');
  for (int b = 0; b < 2; b++) {
    open_(w, '{');
    key(w, "name");
    str(w, npuP_block_name(s, b));
    key(w, "steps");
    steps(w, e, c->block[b].steps, c->block[b].n_steps);
    close_(w, '}');
  }
  close_(w, ']');
}

static void step(jw *w, const ex *e, const npuE_step *s) {
  open_(w, '{');
  for (size_t i = 0; i < npu_countof(step_fields); i++) {
    key(w, step_fields[i].name);
    step_fields[i].fn(w, e, s);
  }
  if (s->control) control(w, e, s);
  close_(w, '}');
}

/* ---- memory fields ---- */

/* Bytes of the distinct values of kind k (used ones only, when used_only). */
static int64_t sum_kind(const ex *e, mem_kind k, bool used_only) {
  size_t n = 0;
  for (int v = 0; v < e->p->n_values; v++)
    if (e->kind[v] == k && (!used_only || e->used[v])) n += value_bytes(e->p, v);
  return (int64_t)n;
}

static int64_t fetched_bytes(const ex *e) {
  size_t n = 0;
  for (int i = 0; i < e->p->n_fetches; i++) {
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = e->p->fetches[j] == e->p->fetches[i];
    if (!seen) n += value_bytes(e->p, e->p->fetches[i]);
  }
  return (int64_t)n;
}

static void add_prepared(void *ud, const npuE_step *s, int depth, const npuE_step *parent,
                         int b) {
  (void)depth, (void)parent, (void)b;
  *(int64_t *)ud += (int64_t)s->prepared_bytes;
}

/* The bytes of the steps' pre-transformed constant filters (npuE_step.prepared). */
static int64_t prepared_bytes(const ex *e) {
  int64_t n = 0;
  npuP_walk_steps(e->p->steps, e->p->n_steps, 0, NULL, 0, add_prepared, &n);
  return n;
}

typedef struct copy_sum {
  const npuE_plan *p;
  int64_t bytes;
} copy_sum;

static void add_copy(void *ud, const npuE_step *s, int depth, const npuE_step *parent, int b) {
  (void)depth, (void)parent, (void)b;
  copy_sum *c = ud;
  if (s->copy_of) c->bytes += (int64_t)value_bytes(c->p, s->out[0]);
}

/* The bytes of the variables' kept copies (npuE_step.copy_of): buffers of the plan's own, so
   a part of own_bytes. */
static int64_t copy_bytes(const ex *e) {
  copy_sum c = {.p = e->p};
  npuP_walk_steps(e->p->steps, e->p->n_steps, 0, NULL, 0, add_copy, &c);
  return c.bytes;
}

/* The constants the plan reads and what it derived from them once (Winograd's U). */
static int64_t constant_bytes(const ex *e) {
  return sum_kind(e, MEM_CONST, true) + prepared_bytes(e);
}

/* What the plan holds while it runs: its arena, the buffers of its own, the constants it
   reads, the kernels' scratch and the widening buffer (unless the arena holds them).  Feeds
   and variables belong to the caller and the session. */
static int64_t total_bytes(const ex *e) {
  const npuE_plan *p = e->p;
  int64_t buffers = p->memory.buffers ? 0 : (int64_t)p->scratch_size + (int64_t)p->round_size;
  return (int64_t)p->memory.arena_bytes + sum_kind(e, MEM_OWN, false) +
         constant_bytes(e) + buffers;
}

typedef void (*plan_field)(jw *, const ex *);

static void m_planning(jw *w, const ex *e) { boolean(w, e->p->memory.enabled); }
static void m_arena(jw *w, const ex *e) { num(w, (int64_t)e->p->memory.arena_bytes); }
static void m_shared(jw *w, const ex *e) { boolean(w, e->p->memory.shared); }
static void m_buffers(jw *w, const ex *e) { boolean(w, e->p->memory.buffers); }
static void m_n_planned(jw *w, const ex *e) { num(w, e->p->memory.n_planned); }
static void m_planned(jw *w, const ex *e) { num(w, (int64_t)e->p->memory.planned_bytes); }
static void m_live_peak(jw *w, const ex *e) { num(w, (int64_t)e->p->memory.live_peak_bytes); }
static void m_n_aliased(jw *w, const ex *e) { num(w, e->p->memory.n_aliased); }
static void m_own(jw *w, const ex *e) { num(w, sum_kind(e, MEM_OWN, false)); }
static void m_copy(jw *w, const ex *e) { num(w, copy_bytes(e)); }
static void m_fetched(jw *w, const ex *e) { num(w, fetched_bytes(e)); }
static void m_const(jw *w, const ex *e) { num(w, constant_bytes(e)); }
static void m_prepared(jw *w, const ex *e) { num(w, prepared_bytes(e)); }
static void m_variable(jw *w, const ex *e) { num(w, sum_kind(e, MEM_VARIABLE, false)); }
static void m_scratch(jw *w, const ex *e) { num(w, (int64_t)e->p->scratch_size); }
static void m_round(jw *w, const ex *e) { num(w, (int64_t)e->p->round_size); }
static void m_total(jw *w, const ex *e) { num(w, total_bytes(e)); }

static const struct {
  const char *name;
  plan_field fn;
} memory_fields[] = {
    {"planning", m_planning},
    {"arena_bytes", m_arena},
    {"arena_shared", m_shared},
    {"planned_values", m_n_planned},
    {"planned_bytes", m_planned},
    {"aliased_values", m_n_aliased},
    {"live_peak_bytes", m_live_peak},
    {"own_bytes", m_own},
    {"variable_copy_bytes", m_copy},
    {"fetched_bytes", m_fetched},
    {"constant_bytes", m_const},
    {"prepared_bytes", m_prepared},
    {"variable_bytes", m_variable},
    {"scratch_bytes", m_scratch},
    {"round_bytes", m_round},
    {"buffers_in_arena", m_buffers},
    {"total_bytes", m_total},
};

/* ---- plan fields ---- */

static void p_precision(jw *w, const ex *e) {
  const npu_options *o = e->cfg ? e->cfg->options : NULL;
  if (!o) {
    str(w, NULL);
    return;
  }
  str(w, npuO_is_set(o, NPUO_precision_mode_v2) ? npuO_string(o, NPUO_precision_mode_v2)
                                                : npuO_string(o, NPUO_precision_mode));
}
static void p_reference(jw *w, const ex *e) { boolean(w, e->p->reference); }
static void p_n_steps(jw *w, const ex *e) { num(w, e->p->n_steps); }
static void p_folded(jw *w, const ex *e) { num(w, e->p->n_folded); }
static void p_folded_nodes(jw *w, const ex *e) {
  open_(w, '[');
  for (int i = 0; i < e->p->n_folded; i++) str(w, e->g->nodes[e->p->folded[i]].name);
  close_(w, ']');
}
static void p_iterations(jw *w, const ex *e) { num(w, e->p->iterations); }
/* compiled for feeds with -1 dims (a dynamic-shape plan: any size there) */
static void p_generic(jw *w, const ex *e) { boolean(w, e->p->generic); }
static void p_dynamic(jw *w, const ex *e) { boolean(w, e->p->dynamic); }
static void p_id(jw *w, const ex *e) { num(w, e->p->id); }
static void p_feeds(jw *w, const ex *e) { values(w, e, e->p->n_feeds, e->p->feeds); }
static void p_fetches(jw *w, const ex *e) { values(w, e, e->p->n_fetches, e->p->fetches); }
static void p_steps(jw *w, const ex *e) { steps(w, e, e->p->steps, e->p->n_steps); }
static void p_memory(jw *w, const ex *e) {
  open_(w, '{');
  for (size_t i = 0; i < npu_countof(memory_fields); i++) {
    key(w, memory_fields[i].name);
    memory_fields[i].fn(w, e);
  }
  close_(w, '}');
}

/* compile/tuning.c: {"aoe_mode": "2" | null, "timed": steps timed now, "reused": steps given a
   record's choice, "subgraph": "timed" | "record" | null, "fusion_off": [passes]} */
static void p_tuning(jw *w, const ex *e) {
  const npu_options *o = e->cfg ? e->cfg->options : NULL;
  open_(w, '{');
  key(w, "aoe_mode");
  str(w, o && *npuO_string(o, NPUO_aoe_mode) ? npuO_string(o, NPUO_aoe_mode) : NULL);
  key(w, "timed");
  num(w, e->p->tuning.timed);
  key(w, "reused");
  num(w, e->p->tuning.reused);
  key(w, "subgraph");
  int sg = e->p->tuning.subgraph;
  str(w, sg == 1 ? "timed" : sg == 2 ? "record" : NULL);
  key(w, "fusion_off");
  open_(w, '[');
  for (int i = 0; i < npuP_fusion_pass_count(); i++)
    if (e->p->tuning.fusion_off & (1u << i)) str(w, npuP_fusion_pass_name(i));
  close_(w, ']');
  close_(w, '}');
}

static const struct {
  const char *name;
  plan_field fn;
} plan_fields[] = {
    {"precision_mode", p_precision},
    {"reference", p_reference},
    {"n_steps", p_n_steps},
    {"folded", p_folded},
    {"folded_nodes", p_folded_nodes},
    {"iterations", p_iterations},
    {"id", p_id},
    {"generic", p_generic},
    {"dynamic", p_dynamic},
    {"feeds", p_feeds},
    {"fetches", p_fetches},
    {"steps", p_steps},
    {"memory", p_memory},
    {"tuning", p_tuning},
};

static void classify_step(void *ud, const npuE_step *s, int depth, const npuE_step *parent,
                          int b) {
  (void)depth, (void)parent, (void)b;
  ex *e = ud;
  for (int i = 0; i < s->n_in; i++) e->used[s->in[i]] = 1;
  for (int i = 0; i < s->n_out; i++) {
    int v = s->out[i];
    mem_kind m = (size_t)s->def->kind < npu_countof(out_kind) ? out_kind[s->def->kind] : MEM_OWN;
    if (m == MEM_OWN && arena_offset(e->p, v) >= 0) m = MEM_ARENA;
    if (e->kind[v] != MEM_FEED) e->kind[v] = (uint8_t)m;
  }
  if (s->n_out == 1 && npuP_memory_may_alias(s) && arena_offset(e->p, s->out[0]) >= 0 &&
      arena_offset(e->p, s->out[0]) == arena_offset(e->p, s->in[0]))
    e->alias_of[s->out[0]] = s->in[0];
}

/* Classifies every value by where its memory lives and marks those the run reads (the steps
   nested in control steps included). */
static void classify(ex *e) {
  const npuE_plan *p = e->p;
  for (int i = 0; i < p->n_feeds; i++) e->kind[p->feeds[i]] = MEM_FEED;
  npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, classify_step, e);
  for (int i = 0; i < p->n_fetches; i++) e->used[p->fetches[i]] = 1;
  /* what is left with a tensor bound at compile time: constants and folded values */
  for (int v = 0; v < p->n_values; v++)
    if (e->kind[v] == MEM_NONE && p->slots[v]) e->kind[v] = MEM_CONST;
}

npu_status npuP_explain(npu_context *ctx, const npu_graph *g, const npuP_config *cfg,
                        const npuE_plan *p, char **out) {
  *out = NULL;
  size_t n = (size_t)(p->n_values ? p->n_values : 1);
  ex e = {.g = g, .cfg = cfg, .p = p, .kind = npuC_calloc(ctx, n, 1),
          .used = npuC_calloc(ctx, n, 1), .alias_of = npuC_alloc(ctx, n * sizeof *e.alias_of)};
  jw w = {.ctx = ctx};
  if (e.kind && e.used && e.alias_of) {
    for (int v = 0; v < p->n_values; v++) e.alias_of[v] = -1;
    classify(&e);
    open_(&w, '{');
    for (size_t i = 0; i < npu_countof(plan_fields); i++) {
      key(&w, plan_fields[i].name);
      plan_fields[i].fn(&w, &e);
    }
    close_(&w, '}');
  }
  npuC_free(ctx, e.kind);
  npuC_free(ctx, e.used);
  npuC_free(ctx, e.alias_of);
  if (!e.kind || !e.used || !e.alias_of || w.nomem) {
    npuC_free(ctx, w.buf);
    return npuC_error(ctx, NPU_ERR_NOMEM, "npu_session_explain: out of memory");
  }
  *out = w.buf;
  return NPU_OK;
}
