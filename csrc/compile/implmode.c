/*
 * implmode.c — operator implementation modes: which of an op's two implementations a step runs
 * (kernels/kfast.h): high_performance (vectorised float32 approximations with the errors
 * kfast.h states; the default, as 000 gives op_select_implmode's) or high_precision
 * (libm-based, the reference path's kernels, and the direct convolution).  The ops that have
 * both are those of `dual` below, and conv2d and conv2d_backprop_input, whose high_performance is an
 * algorithm (npuE_step.algo): Winograd F(2x2, 3x3) where it takes the shape and is measured
 * faster than the direct kernel (winograd_rule, bench/bench_winograd.c), other rounding with
 * the bound of docs/numerics.md; for every other op the modes are accepted and change nothing.
 *
 * What chooses (000; the first that is set wins):
 *   op_precision_mode        an .ini file: [ByOpType] type=mode and [ByNodeName] node=mode, the
 *                            node's entry winning over its type's; modes high_precision,
 *                            high_performance, super_performance (high_performance's kernels,
 *                            and Winograd wherever it takes the shape with >= 8 channels, even
 *                            where it is slower here), and enable_float_32_execution,
 *                            enable_hi_float_32_execution, keep_fp16, support_out_of_bound_index,
 *                            which choose no implementation on this device (it has no HF32, no
 *                            float16 arithmetic, and gathers always check their indices): a node
 *                            or type given one of these runs high_precision.  Ops the file does
 *                            not name take the default (MODE_DEFAULT): the file lists
 *                            exceptions, as optypelist_for_implmode does.
 *   op_select_implmode       set explicitly: the mode of every op, or, with
 *                            optypelist_for_implmode, of the listed types only (000: they "use
 *                            the mode specified by the op_select_implmode parameter"), the others
 *                            keeping the default.
 *   (nothing)                high_performance everywhere: op_select_implmode's default in 000
 *                            (MODE_DEFAULT; options.def gives the same text).  Until issue 14 it
 *                            was high_precision; setting that explicitly gives the old results
 *                            (bitwise the reference path's kernels, the direct convolution).
 * A NULL config (nothing of the three set) is the default everywhere.
 * Op types are our op names, TensorFlow types (Exp, Softmax) or the Ascend names the reference
 * lists: SoftmaxV2 (softmax), LogSoftmaxV2, Pooling (max_pool and avg_pool: one implementation
 * each), LRN and ROIAlign (no such ops here: accepted, no effect).
 *
 * The choices reach every step the plan runs: the top-level ones (an iterations_per_loop loop
 * runs those) and the steps nested in cond branches and while loops at any depth (npu.cond,
 * npu.while_loop, imported functional If/While, TensorArray loops), a node named in the .ini
 * file by its own name wherever it sits.  A nested step whose shapes are known only when it
 * runs (a loop variable with -1 in its shape invariant) keeps im2col: the other algorithms are
 * chosen from shapes fixed at compile time.
 *
 * The reference path (use_off_line=false) ignores all of it: its kernels are the oracle.
 * The file is parsed when the session is made, so a bad one fails npu_session_new naming file
 * and line; node names are matched when a graph is compiled (a name no node has does nothing).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "compile/fused_ops.h"
#include "compile/passes.h"
#include "kernels/kmath.h"
#include "options/options_int.h"

/* Ops with a high_performance implementation (their kernels take npuX_call.impl). */
static const char *const dual[] = {"exp", "log", "tanh", "sigmoid", "softmax", "log_softmax",
                                   "gelu"};

/* Ascend IR type names (000's list for optypelist_for_implmode, and the V2 names the ini files
   of the reference use) that are not one of our op or TensorFlow type names.  op NULL: no
   such op here. */
static const struct {
  const char *name, *op, *op2;
} ascend[] = {
    {"SoftmaxV2", "softmax", NULL},     {"LogSoftmaxV2", "log_softmax", NULL},
    {"Pooling", "max_pool", "avg_pool"}, {"LRN", NULL, NULL},
    {"ROIAlign", NULL, NULL},
};

/* MODE_SUPER: high_performance's kernels, and Winograd wherever it takes the shape with at
   least 8 channels each side, whether or not it is the faster kernel here (winograd_rule) */
enum { MODE_PRECISION = 0, MODE_PERFORMANCE = 1, MODE_SUPER = 2 };

/* The mode of an op nothing names: op_select_implmode's default in 000 (options.def) */
enum { MODE_DEFAULT = MODE_PERFORMANCE };

static const struct {
  const char *name;
  int mode;
} modes[] = {
    {"high_precision", MODE_PRECISION},
    {"high_performance", MODE_PERFORMANCE},
    {"super_performance", MODE_SUPER},
    {"enable_float_32_execution", MODE_PRECISION},
    {"enable_hi_float_32_execution", MODE_PRECISION},
    {"keep_fp16", MODE_PRECISION},
    {"support_out_of_bound_index", MODE_PRECISION},
};

typedef struct node_mode {
  char *name;
  int mode;
} node_mode;

struct npuP_impl_config {
  int fallback;                /* mode of the ops nothing names */
  int8_t by_op[NPUX_OP_COUNT]; /* mode by op id, -1: not named */
  node_mode *nodes;            /* [ByNodeName] entries (names owned) */
  int n_nodes, cap_nodes;
  int *slots;                  /* name -> index + 1 in nodes, open addressing, at most half */
  uint32_t n_slots;            /* full: a file of many entries reads in linear time */
};

static bool is_dual(const npu_op_def *def) {
  for (size_t i = 0; i < npu_countof(dual); i++)
    if (strcmp(def->name, dual[i]) == 0) return true;
  return false;
}

/* the dual kernels, and the convolutions whose high_performance is Winograd (select_step) */
bool npuP_impl_has_fast(const npu_op_def *def) {
  return is_dual(def) || def == &npuX_op_conv2d || def == &npuX_op_conv2d_backprop_input;
}

/* Op ids named by type name `name` into ids[0..2); returns their count (0: a known name with
   no op here), or -1 when the name is unknown. */
static int resolve_type(const char *name, int ids[2]) {
  for (size_t i = 0; i < npu_countof(ascend); i++)
    if (strcmp(name, ascend[i].name) == 0) {
      int n = 0;
      if (ascend[i].op) ids[n++] = npuX_find(ascend[i].op);
      if (ascend[i].op2) ids[n++] = npuX_find(ascend[i].op2);
      return n;
    }
  int id = npuX_find(name);
  if (id < 0) id = npuX_find_tf(name);
  if (id < 0) return -1;
  ids[0] = id;
  return 1;
}

/* The known type name nearest to an unknown one (for "did you mean"), or NULL. */
static const char *nearest_type(const char *name) {
  npuC_nearest near;
  npuC_nearest_init(&near, name);
  for (size_t i = 0; i < npu_countof(ascend); i++) npuC_nearest_try(&near, ascend[i].name);
  for (int i = 0; i < NPUX_OP_COUNT; i++) {
    npuC_nearest_try(&near, npuX_op(i)->name);
    npuC_nearest_try(&near, npuX_op(i)->tf_type);
  }
  return npuC_nearest_result(&near);
}

static int find_mode(const char *name) {
  for (size_t i = 0; i < npu_countof(modes); i++)
    if (strcmp(name, modes[i].name) == 0) return modes[i].mode;
  return -1;
}

static const char *nearest_mode(const char *name) {
  npuC_nearest near;
  npuC_nearest_init(&near, name);
  for (size_t i = 0; i < npu_countof(modes); i++) npuC_nearest_try(&near, modes[i].name);
  return npuC_nearest_result(&near);
}

/* ", did you mean 'x'?" or "" into buf. */
static const char *suggest(char *buf, size_t size, const char *best) {
  if (best) snprintf(buf, size, " (did you mean '%s'?)", best);
  else buf[0] = 0;
  return buf;
}

/* ---- optypelist_for_implmode ----------------------------------------------------------- */

static npu_status apply_type_list(npu_context *ctx, struct npuP_impl_config *c, const char *list,
                                  int mode) {
  const char *p = list;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    size_t len = strcspn(p, ", ");
    if (!len) break;
    char name[128], hint[160];
    if (len >= sizeof name)
      return npuC_error(ctx, NPU_ERR_OPTION, "optypelist_for_implmode: operator type '%.40s...' "
                        "is too long", p);
    memcpy(name, p, len);
    name[len] = 0;
    int ids[2], n = resolve_type(name, ids);
    if (n < 0)
      return npuC_error(ctx, NPU_ERR_OPTION, "optypelist_for_implmode: unknown operator type "
                        "'%s'%s", name, suggest(hint, sizeof hint, nearest_type(name)));
    for (int i = 0; i < n; i++) c->by_op[ids[i]] = (int8_t)mode;
    p += len;
  }
  return NPU_OK;
}

/* ---- op_precision_mode (.ini) ---------------------------------------------------------- */


static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
  return s;
}

static int find_node(const struct npuP_impl_config *c, const char *name) {
  if (!c->n_slots) return -1;
  for (uint32_t i = npuC_hash_str(name) & (c->n_slots - 1);; i = (i + 1) & (c->n_slots - 1)) {
    int k = c->slots[i] - 1;
    if (k < 0) return -1;
    if (strcmp(c->nodes[k].name, name) == 0) return k;
  }
}

static void index_node(struct npuP_impl_config *c, int k) {
  uint32_t i = npuC_hash_str(c->nodes[k].name) & (c->n_slots - 1);
  while (c->slots[i]) i = (i + 1) & (c->n_slots - 1);
  c->slots[i] = k + 1;
}

static npu_status add_node(npu_context *ctx, struct npuP_impl_config *c, const char *name,
                           int mode) {
  int k = find_node(c, name);
  if (k >= 0) { /* a later line wins, as in an ini file */
    c->nodes[k].mode = mode;
    return NPU_OK;
  }
  if (2 * ((uint64_t)c->n_nodes + 1) > c->n_slots) {
    uint32_t n = c->n_slots ? 2 * c->n_slots : 16;
    int *slots = npuC_calloc(ctx, n, sizeof *slots);
    if (!slots) return NPU_ERR_NOMEM;
    npuC_free(ctx, c->slots);
    c->slots = slots, c->n_slots = n;
    for (int i = 0; i < c->n_nodes; i++) index_node(c, i);
  }
  if (c->n_nodes == c->cap_nodes) {
    int cap = c->cap_nodes ? 2 * c->cap_nodes : 8;
    node_mode *t = npuC_realloc(ctx, c->nodes, (size_t)cap * sizeof *t);
    if (!t) return NPU_ERR_NOMEM;
    c->nodes = t, c->cap_nodes = cap;
  }
  char *copy = npuC_strdup(ctx, name);
  if (!copy) return NPU_ERR_NOMEM;
  c->nodes[c->n_nodes++] = (node_mode){copy, mode};
  index_node(c, c->n_nodes - 1);
  return NPU_OK;
}

enum { SEC_NONE, SEC_TYPE, SEC_NODE };

/* One line (NUL-terminated, no newline) of the file; *section is the current section. */
static npu_status parse_line(npu_context *ctx, struct npuP_impl_config *c, const char *path,
                             int lineno, char *line, int *section) {
  char hint[160];
  line = trim(line);
  if (!*line || *line == ';' || *line == '#') return NPU_OK;
  if (*line == '[') {
    static const char *const names[] = {"[ByOpType]", "[ByNodeName]"};
    for (int k = 0; k < 2; k++)
      if (strcmp(line, names[k]) == 0) return *section = k ? SEC_NODE : SEC_TYPE, NPU_OK;
    return npuC_error(ctx, NPU_ERR_FORMAT, "op_precision_mode '%s', line %d: unknown section "
                      "'%s' (the sections are [ByOpType] and [ByNodeName])", path, lineno, line);
  }
  char *eq = strchr(line, '=');
  if (!eq)
    return npuC_error(ctx, NPU_ERR_FORMAT, "op_precision_mode '%s', line %d: missing '=' in "
                      "'%s' (an entry is name=mode)", path, lineno, line);
  *eq = 0;
  const char *key = trim(line), *value = trim(eq + 1);
  if (*section == SEC_NONE)
    return npuC_error(ctx, NPU_ERR_FORMAT, "op_precision_mode '%s', line %d: entry '%s' before "
                      "any section ([ByOpType] or [ByNodeName])", path, lineno, key);
  if (!*key)
    return npuC_error(ctx, NPU_ERR_FORMAT, "op_precision_mode '%s', line %d: empty %s before "
                      "'='", path, lineno, *section == SEC_TYPE ? "operator type" : "node name");
  int mode = find_mode(value);
  if (mode < 0)
    return npuC_error(ctx, NPU_ERR_FORMAT, "op_precision_mode '%s', line %d: unknown mode '%s' "
                      "for '%s'%s", path, lineno, value, key,
                      suggest(hint, sizeof hint, nearest_mode(value)));
  if (*section == SEC_NODE) return add_node(ctx, c, key, mode);
  int ids[2], n = resolve_type(key, ids);
  if (n < 0)
    return npuC_error(ctx, NPU_ERR_FORMAT, "op_precision_mode '%s', line %d: unknown operator "
                      "type '%s'%s", path, lineno, key, suggest(hint, sizeof hint,
                                                                 nearest_type(key)));
  for (int i = 0; i < n; i++) c->by_op[ids[i]] = (int8_t)mode;
  return NPU_OK;
}

static npu_status load_ini(npu_context *ctx, struct npuP_impl_config *c, const char *path) {
  char *text;
  npu_status s = npuC_read_file(ctx, path, "op_precision_mode", &text, NULL);
  if (s) return s;
  int section = SEC_NONE, lineno = 0;
  for (char *line = text; line && !s;) {
    char *next = strchr(line, '\n');
    if (next) *next++ = 0;
    s = parse_line(ctx, c, path, ++lineno, line, &section);
    line = next;
  }
  npuC_free(ctx, text);
  return s;
}

/* ---- the config and the pass ----------------------------------------------------------- */

void npuP_impl_config_free(npu_context *ctx, struct npuP_impl_config *c) {
  if (!c) return;
  for (int i = 0; i < c->n_nodes; i++) npuC_free(ctx, c->nodes[i].name);
  npuC_free(ctx, c->nodes);
  npuC_free(ctx, c->slots);
  npuC_free(ctx, c);
}

npu_status npuP_impl_config_new(npu_context *ctx, const npu_options *o,
                                struct npuP_impl_config **out) {
  *out = NULL;
  bool by_file = npuO_is_set(o, NPUO_op_precision_mode);
  /* none: every op MODE_DEFAULT (op_mode reads a NULL config so) */
  if (!by_file && !npuO_is_set(o, NPUO_op_select_implmode)) return NPU_OK;
  struct npuP_impl_config *c = npuC_calloc(ctx, 1, sizeof *c);
  if (!c) return NPU_ERR_NOMEM;
  memset(c->by_op, -1, sizeof c->by_op);
  c->fallback = MODE_DEFAULT; /* the types the list or the file does not name */
  npu_status s = NPU_OK;
  if (by_file) { /* wins over the other two (000) */
    s = load_ini(ctx, c, npuO_string(o, NPUO_op_precision_mode));
  } else {
    int mode = find_mode(npuO_string(o, NPUO_op_select_implmode)); /* ENUM-checked */
    if (mode < 0) mode = MODE_DEFAULT;
    if (npuO_is_set(o, NPUO_optypelist_for_implmode))
      s = apply_type_list(ctx, c, npuO_string(o, NPUO_optypelist_for_implmode), mode);
    else
      c->fallback = mode;
  }
  if (s) {
    npuP_impl_config_free(ctx, c);
    return s;
  }
  *out = c;
  return NPU_OK;
}

/* The mode of op def at node; c NULL: nothing set, the default everywhere. */
static int op_mode(const struct npuP_impl_config *c, const npu_op_def *def, const char *node) {
  if (!c) return MODE_DEFAULT;
  int k = find_node(c, node);
  if (k >= 0) return c->nodes[k].mode;
  int id = npuX_find(def->name);
  return id >= 0 && c->by_op[id] >= 0 ? c->by_op[id] : c->fallback;
}

bool npuP_impl_is_fast(const npuP_config *cfg, const npu_op_def *def, const char *node) {
  return !cfg->reference && def->kind == NPUX_KIND_KERNEL && is_dual(def) &&
         op_mode(cfg->impl, def, node) >= MODE_PERFORMANCE;
}

/* conv2d under high_performance: Winograd F(2x2, 3x3) (kernels/winograd.c) where it takes
   the geometry (float32 x and y, 3x3, stride and dilation 1, shapes known now) and is clearly
   faster than the direct kernel, the default (conv_direct.c), whose bound is tighter.  The
   rule is bench/bench_winograd.c's table (3x3 SAME, AMD EPYC Zen 4, one thread, CPU time, two
   runs of interleaved medians; ratios direct / Winograd over the forward alone, with bias +
   relu, with the pool fused, and the input gradient; docs/compiler.md has the key rows; the
   same grid at two threads, wall time, found no row the rule takes where Winograd loses by
   more than 5 %: Winograd gains less from a second thread than the direct kernel, which makes
   the work threshold, if anything, more right there):
   - both channel counts at least 32, their product at least 2048: Winograd's 16 GEMMs run
     over c with out_c columns; at 8 and 16 channels they lose everywhere (0.3-0.8x); 32 -> 32
     gains 2-14 % on the largest images only (8x56x56 1.07-1.14x, 1x56x56 0.86-1.12x): not
     worth the looser bound;
   - at least WINOGRAD_MIN_TILES output tiles (2x2) per call, n * ceil(oh/2) * ceil(ow/2): the
     filter transform (16 c out_c values, in double) runs every call, and few tiles cannot pay
     for it, however wide: at 1x28x28 (196 tiles) 64 -> 64 0.85-0.91x, 128 -> 128 0.92-1.04x,
     256 -> 256 0.8-0.9x; at 1x14x14 0.3-0.5x;
   - tiles x c x out_c at least WINOGRAD_MIN_WORK (784 tiles at 64 -> 64): below it the gain
     is within the noise: 64 -> 64 at 8x14x14 (392 tiles) 1.04-1.21x forward, 0.90-0.95x input
     gradient; 32 -> 64 at 1x56x56 (784) 1.01-1.24x; at it and above, 1.1-1.4x: 64 -> 64 at
     1x56x56 1.13-1.28x, 8x28x28 1.07-1.31x, 32 -> 64 at 8x28x28 1.06-1.21x and 32x14x14
     (bench_cnn's second layer) 1.04-1.19x, 128 -> 128 at 8x14x14 1.00-1.24x;
   - the tiles' fill (outputs / 4 tiles) at least 7/8: an odd side wastes a row and a column of
     edge tiles; 7x7 images (16 tiles for 49 outputs, 77 %) lose at every batch and width
     (32x7x7 128 -> 128 0.71-1.00x, 8x7x7 0.41-0.65x).
   The same rule whatever is fused after the convolution (bias, activation, pool: their ratios
   move together), and for the input gradient (below; its ratios a little lower).

   A conv2d whose filter is a constant (inference: a Const, or folded by
   ConvBatchnormFusionPass) has its transform U computed once, when compiling (plan.c:
   prepare_steps); bench_winograd's fwdU / poolU columns (same run as above, Zen 4, 1 and 2
   threads) show what is left once the per-call transform is gone: the tiles and work
   conditions fall, and these hold instead:
   - the channel conditions as above: 32 -> 32 gains 1-19 % (1.01-1.19x at 1 thread, 0.95-2.1x
     at 2), too little for the looser bound; 32 -> 64 and up win;
   - at least WINOGRAD_CONST_MIN_TILES tiles: 1x14x14 (49 tiles) 32 -> 64 1.27-1.48x, 64 -> 64
     1.43-1.81x, 128 -> 128 1.45-1.84x; 7x7 images fail the fill condition (1x7x7 0.5-1.1x);
   - tiles x WINOGRAD_CONST_TILES_PER_U >= c x out_c: U (16 c out_c floats) is still read
     whole each call and must be spread over enough tiles: 1x14x14 256 -> 256 (49 tiles)
     0.85-1.04x, while 128 -> 256 there is 1.07-1.48x and 1x28x28 256 -> 256 1.13-1.15x;
   - the fill condition as above.
   Before (the filter transformed per call): 1x14x14 64 -> 64 0.45x, 1x28x28 64 -> 64 0.64-0.91x,
   128 -> 128 0.87-0.98x.  Variable filters (training) and the input gradient, whose turned
   filter is transformed per call, keep the rule above. */
enum { WINOGRAD_MIN_CHANNELS = 32, WINOGRAD_MIN_CHANNEL_PRODUCT = 2048, WINOGRAD_MIN_TILES = 392,
       WINOGRAD_CONST_MIN_TILES = 49, WINOGRAD_CONST_TILES_PER_U = 1024 };
static const double WINOGRAD_MIN_WORK = 784.0 * 64 * 64; /* tiles x c x out_c */

/* The rule above on a convolution of c -> out_c channels, n images of oh x ow outputs; any:
   super_performance's Winograd wherever it takes the shape with at least 8 channels each side
   (the rule before the direct kernel was the default: fewer channels are 2x slower than
   im2col).  u_once: the filter is a constant, its U computed once (the constant-filter rule). */
static bool winograd_rule(int64_t n, int64_t oh, int64_t ow, int64_t c, int64_t out_c,
                          bool any, bool u_once) {
  if (any) return c >= 8 && out_c >= 8;
  int64_t th = (oh + 1) / 2, tw = (ow + 1) / 2, tiles = n * th * tw;
  bool shape = c >= WINOGRAD_MIN_CHANNELS && out_c >= WINOGRAD_MIN_CHANNELS &&
               c * out_c >= WINOGRAD_MIN_CHANNEL_PRODUCT && 8 * oh * ow >= 7 * 4 * th * tw;
  if (u_once)
    return shape && tiles >= WINOGRAD_CONST_MIN_TILES &&
           tiles * WINOGRAD_CONST_TILES_PER_U >= c * out_c;
  return shape && tiles >= WINOGRAD_MIN_TILES &&
         (double)tiles * (double)c * (double)out_c >= WINOGRAD_MIN_WORK;
}

const npu_tensor *npuP_winograd_constant_filter(const npuP_build *b, const npuE_step *s) {
  if ((s->def != &npuX_op_conv2d && s->def != &npuP_op_fused_conv2d) || s->n_in < 2 ||
      s->host || s->dynamic || (s->widen && s->widen[1]))
    return NULL;
  const npu_tensor *f = b->known[s->in[1]];
  if (!f || f->dtype != NPU_DTYPE_F32 || f->ndim != 4 || f->shape[0] != 3 || f->shape[1] != 3)
    return NULL;
  return f;
}

/* Whether Winograd takes conv2d step s of p (float32, shapes known now); *w and *f: its
   geometry and filter, set when it does. */
static bool winograd_takes(const npuE_plan *p, const npuE_step *s, npuK_window2d *w,
                           const npuG_value **f) {
  if (s->dynamic || s->widen || s->round_in >= 0 || s->round_out >= 0) return false;
  const npuG_value *x = &p->values[s->in[0]], *y = &p->values[s->out[0]];
  *f = &p->values[s->in[1]];
  if (x->dtype != NPU_DTYPE_F32 || (*f)->dtype != NPU_DTYPE_F32 || y->dtype != NPU_DTYPE_F32)
    return false;
  npuK_window2d pw;
  bool pooled;
  return !npuP_conv_geometry(s->def, s->params, x, *f, w, &pw, &pooled) &&
         npuK_conv2d_winograd_fits(w, pooled ? &pw : NULL);
}

bool npuP_winograd_fits(const npuE_plan *p, const npuE_step *s) {
  npuK_window2d w;
  const npuG_value *f;
  return winograd_takes(p, s, &w, &f);
}

static bool winograd_wins(const npuP_build *b, const npuE_step *s, bool any) {
  npuK_window2d w;
  const npuG_value *f;
  return winograd_takes(b->plan, s, &w, &f) &&
         winograd_rule(w.n, w.out_h, w.out_w, w.c, f->shape[3], any,
                       npuP_winograd_constant_filter(b, s) != NULL);
}

/* The direct kernel (kernels/conv_direct.c) by default, either mode, where it takes the step:
   shapes known now, dilation 1, out_c a multiple of 8 (and a fused pool with windows that
   cannot overlap).  Each output is one FMA chain over its taps, im2col's bound (the same bits
   only where OpenBLAS runs its FMA kernel on the shape: on this Zen 4 test_kernels' shapes get
   its AVX-512 small-matrix kernel and other bits, which test_kernels prints), and it runs bench_cnn's
   layers (bias, relu and pool fused) in 0.6-0.7x (c = 32) and 0.25x (c = 1) of im2col's time:
   no column buffer, nothing packed per call.  x and y float32, or stored float16 / bfloat16
   by the precision pass (the kernel widens x's rows once into its copy and narrows y's rows:
   the bits of the float32 kernel between the conversions, instead of im2col + sgemm on widened
   rows); the filter (and bias) float32, or reduced and widened for the step by the executor. */
static bool direct_dtype(npu_dtype dt) {
  return dt == NPU_DTYPE_F32 || dt == NPU_DTYPE_F16 || dt == NPU_DTYPE_BF16;
}

bool npuP_direct_fits(const npuE_plan *p, const npuE_step *s) {
  /* a step on the host runs the reference kernel, whatever its algorithm */
  if (s->host || s->dynamic || (s->widen && (s->widen[0] || s->widen[s->n_in]))) return false;
  const npuG_value *x = &p->values[s->in[0]], *y = &p->values[s->out[0]];
  const npuG_value *f = &p->values[s->in[1]];
  /* x and y reach the kernel as stored (NPUX_F_HALF_XY: never widened); the filter in float32 */
  if (!direct_dtype(x->dtype) || !direct_dtype(y->dtype) ||
      !(f->dtype == NPU_DTYPE_F32 || (s->widen && s->widen[1] && direct_dtype(f->dtype))))
    return false;
  npuK_window2d w, pw;
  bool pooled;
  return !npuP_conv_geometry(s->def, s->params, x, f, &w, &pw, &pooled) &&
         npuK_conv2d_direct_fits(&w, f->shape[3], pooled ? &pw : NULL);
}

/* Whether every value of float32 tensor t is a bfloat16 value (its low 16 bits zero). */
static bool bf16_values(const npu_tensor *t) {
  const uint32_t *u = t->data;
  for (int64_t i = 0; i < t->numel; i++)
    if (u[i] & 0xffffu) return false;
  return true;
}

bool npuP_direct_bf16_fits(const npuP_build *b, const npuE_step *s) {
  const npuE_plan *p = b->plan;
  if (!npuP_direct_fits(p, s) || !npuK_bf16dot()) return false;
  const npuG_value *x = &p->values[s->in[0]], *f = &p->values[s->in[1]];
  if (x->dtype != NPU_DTYPE_BF16) return false;
  /* a filter stored bfloat16 reaches the kernel widened: bfloat16 values in float32.  The
     kernel checks its filter anyway and widens x instead where some value is not one. */
  if (f->dtype == NPU_DTYPE_BF16) return s->widen && s->widen[1];
  const npu_tensor *k = b->known[s->in[1]];
  return f->dtype == NPU_DTYPE_F32 && k && k->dtype == NPU_DTYPE_F32 && bf16_values(k);
}

/* conv2d_backprop_input: at stride 1 the forward convolution of dy with the turned filter
   (kernels/conv_bwd.c), so Winograd where it takes that convolution: 3x3, stride and dilation
   1, float32, shapes known now (*w and *out_c: the op's window, dy's channels).  The tuner
   times it on these (compile/tuning.c). */
static bool backprop_input_winograd_takes(const npuE_plan *p, const npuE_step *s,
                                          npuK_window2d *w, int64_t *out_c) {
  if (s->def != &npuX_op_conv2d_backprop_input || s->host || s->dynamic || s->widen ||
      s->round_in >= 0 || s->round_out >= 0 || s->n_in < 2)
    return false;
  const npuG_value *f = &p->values[s->in[s->n_in - 2]], *dx = &p->values[s->out[0]];
  if (f->dtype != NPU_DTYPE_F32 || dx->dtype != NPU_DTYPE_F32 || f->ndim != 4 || dx->ndim != 4)
    return false;
  for (int i = 0; i < 4; i++)
    if (f->shape[i] < 0 || dx->shape[i] < 0) return false;
  const npuX_window_params *win = s->params; /* the op's params start with its window */
  *w = (npuK_window2d){.n = dx->shape[0], .in_h = dx->shape[1], .in_w = dx->shape[2],
                       .c = dx->shape[3], .k_h = f->shape[0], .k_w = f->shape[1],
                       .stride_h = win->stride[0], .stride_w = win->stride[1],
                       .dilation_h = win->dilation[0], .dilation_w = win->dilation[1]};
  *out_c = f->shape[3];
  if (npuX_window_dim(win, 0, w->in_h, w->k_h, &w->out_h, &w->pad_top) ||
      npuX_window_dim(win, 1, w->in_w, w->k_w, &w->out_w, &w->pad_left))
    return false;
  return npuK_conv2d_backprop_input_winograd_fits(w, *out_c);
}

bool npuP_backprop_input_winograd_fits(const npuE_plan *p, const npuE_step *s) {
  npuK_window2d w;
  int64_t out_c;
  return backprop_input_winograd_takes(p, s, &w, &out_c);
}

/* Under high_performance: winograd_rule on that convolution, out_c -> c channels over dx's
   pixels (its outputs).  bench_winograd's input-gradient column follows the forward's, a
   little lower: 64 -> 64 at 8x14x14 0.90-0.95x (forward 1.04-1.05x; below the rule's work),
   at 32x14x14 1.15-1.17x, 1x56x56 1.13-1.21x. */
static bool backprop_input_winograd_wins(const npuE_plan *p, const npuE_step *s, bool any) {
  npuK_window2d w;
  int64_t out_c;
  return backprop_input_winograd_takes(p, s, &w, &out_c) &&
         winograd_rule(w.n, w.in_h, w.in_w, out_c, w.c, any, false);
}

/* The step's scratch for the algorithm just chosen; a nested step's comes from the plan's own
   scratch (compile/control.c), which allocate (plan.c) then makes even when memory planning
   holds the top-level steps' scratch in its arena. */
static npu_status rescratch(npuP_build *b, npuE_step *step, bool nested) {
  npu_status s = npuP_step_scratch(b->ctx, b->plan, step, &b->graph->nodes[step->node], false);
  if (!s && nested && step->scratch_size) b->plan->nested_scratch = true;
  return s;
}

/* A matmul / fused_matmul step whose A and B reach the kernel stored bfloat16 (the precision
   pass's NPUX_F_HALF_XY / _HALF_B: never widened), shapes known now, where the process has
   native bfloat16 dot products (npuK_bf16dot: AVX512_BF16, NPU_NO_AVX512BF16 unset): the
   native GEMM (kernels/gemm_bf16.c), VDPBF16PS on the operands as stored, where widening them
   made the mixed-precision step slower than float32.  Its bound: k 2^-24 sum|a b| plus the
   instruction's flush of subnormals (docs/numerics.md). */
static bool bf16dot_takes(const npuE_plan *p, const npuE_step *s) {
  /* fused_apply_gradient_descent (a mixed mode's): its GEMM, the matmul's, reads inputs 1, 2 */
  int ia = s->def == &npuP_op_fused_sgd ? 1 : 0;
  if ((s->def->tune != NPUX_TUNE_GEMM && !ia) || s->host || s->dynamic || s->n_in < ia + 2)
    return false;
  if (s->widen && (s->widen[ia] || s->widen[ia + 1])) return false;
  const npuG_value *a = &p->values[s->in[ia]], *b = &p->values[s->in[ia + 1]];
  return a->dtype == NPU_DTYPE_BF16 && b->dtype == NPU_DTYPE_BF16 && a->ndim == 2 &&
         b->ndim == 2 && npuK_bf16dot();
}

/* f32tile's operands (passes.h): a float32 matmul / fused_matmul step, shapes known now, none of
   its operands widened; the fused SGD step too (the gradient's GEMM on inputs 1 and 2 updates
   the variable from each tile, compile/fused_ops.c), when its product is float32.  Its bound:
   k 2^-24 sum|a b|, OpenBLAS's form (docs/numerics.md). */
bool npuP_f32tile_operands(const npuE_plan *p, const npuE_step *s) {
  const int ia = s->def == &npuP_op_fused_sgd ? 1 : 0;
  if ((s->def->tune != NPUX_TUNE_GEMM && !ia) || s->host || s->dynamic || s->n_in < ia + 2 ||
      s->widen || s->round_in >= 0 || s->round_out >= 0)
    return false;
  const void *prm = s->owned_params ? s->owned_params : s->params;
  if (ia && ((const npuP_fused_sgd *)prm)->product_dtype != NPU_DTYPE_F32) return false;
  const npuG_value *a = &p->values[s->in[ia]], *b = &p->values[s->in[ia + 1]],
                   *y = &p->values[s->out[0]];
  return a->dtype == NPU_DTYPE_F32 && b->dtype == NPU_DTYPE_F32 && y->dtype == NPU_DTYPE_F32 &&
         a->ndim == 2 && b->ndim == 2 && y->ndim == 2;
}

/* f32tile where its operands are and the measured rule says our AVX-512F tiles beat OpenBLAS
   here (npuK_gemm_f32_wins: the training step's GEMMs, kernels/gemm_f32.c). */
static bool f32tile_takes(const npuE_plan *p, const npuE_step *s) {
  if (!npuP_f32tile_operands(p, s)) return false;
  const int ia = s->def == &npuP_op_fused_sgd ? 1 : 0;
  const void *prm = s->owned_params ? s->owned_params : s->params;
  const bool ta = *(const bool *)prm; /* the three params structs start with transpose_a */
  const npuG_value *a = &p->values[s->in[ia]], *y = &p->values[s->out[0]];
  int64_t m = y->shape[0], n = y->shape[1], k = a->shape[ta ? 0 : 1];
  return m > 0 && n > 0 && k > 0 && npuK_gemm_f32_wins(m, n, k);
}

/* The rules of npuP_select_impl on one step. */
static npu_status select_step(npuP_build *b, npuE_step *step, bool nested) {
  const struct npuP_impl_config *c = b->cfg->impl;
  const npuE_plan *p = b->plan;
  if (bf16dot_takes(p, step)) { /* the one GEMM that computes on bfloat16, whatever the mode */
    step->algo = NPUK_GEMM_BF16DOT;
    return rescratch(b, step, nested);
  }
  if (step->algo == NPUK_GEMM_AUTO && f32tile_takes(p, step)) { /* our float32 tiles */
    step->algo = NPUK_GEMM_F32TILE;
    return rescratch(b, step, nested);
  }
  bool conv = step->def->tune == NPUX_TUNE_CONV; /* conv2d and the fused conv2d */
  if (conv && step->algo == NPUK_CONV_IM2COL && npuP_direct_fits(p, step)) {
    /* bfloat16 operands as stored by VDPBF16PS where the CPU has it (kernels/conv_bf16.c:
       about 2x the float32 direct kernel's speed on the CNN's 32 -> 64 layer) */
    step->algo = npuP_direct_bf16_fits(b, step) ? NPUK_CONV_DIRECT_BF16 : NPUK_CONV_DIRECT;
    npu_status s = rescratch(b, step, nested);
    if (s) return s;
  }
  const char *node = step->node >= 0 ? b->graph->nodes[step->node].name : "";
  if (conv) { /* an algorithm to pick, by the convolution's mode (a fused step's node is its conv2d) */
    int mode = op_mode(c, &npuX_op_conv2d, node);
    if (mode < MODE_PERFORMANCE) return NPU_OK;
    step->impl = MODE_PERFORMANCE;
    if (!winograd_wins(b, step, mode == MODE_SUPER)) return NPU_OK;
    step->algo = NPUK_CONV_WINOGRAD_2X3;
    return rescratch(b, step, nested);
  }
  if (step->def == &npuX_op_conv2d_backprop_input) { /* an algorithm too, as conv2d's */
    int mode = op_mode(c, step->def, node);
    if (mode < MODE_PERFORMANCE) return NPU_OK;
    step->impl = MODE_PERFORMANCE;
    if (!backprop_input_winograd_wins(p, step, mode == MODE_SUPER)) return NPU_OK;
    step->algo = NPUK_CONV_WINOGRAD_2X3;
    return rescratch(b, step, nested);
  }
  if (step->def->kind == NPUX_KIND_KERNEL && is_dual(step->def))
    step->impl = op_mode(c, step->def, node) >= MODE_PERFORMANCE;
  return NPU_OK;
}

/* The steps of a block and, through each control step, of the blocks nested in it (a cond's
   branches, a while loop's condition and body, at any depth): nested steps share the plan's
   values, so the rules read their shapes as they read a top-level step's. */
static npu_status select_block(npuP_build *b, npuE_step *steps, int n, bool nested) {
  for (int k = 0; k < n; k++) {
    npuE_step *step = &steps[k];
    npu_status s = NPU_OK;
    if (step->control)
      for (int j = 0; j < 2 && !s; j++)
        s = select_block(b, step->control->block[j].steps, step->control->block[j].n_steps, true);
    else
      s = select_step(b, step, nested);
    if (s) return s;
  }
  return NPU_OK;
}

npu_status npuP_select_impl(npuP_build *b) {
  if (b->cfg->reference) return NPU_OK;
  return select_block(b, b->plan->steps, b->plan->n_steps, false);
}
