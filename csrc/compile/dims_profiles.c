/*
 * dims_profiles.c — dynamic dimension profiles (input_shape, dynamic_dims, dynamic_node_type):
 * parsing the two strings, checking them against the graph and each run's feeds against them
 * (dims_profiles.h says what is checked).  The session (session.c find_plan) compiles the plans
 * of every profile at a signature's first run, with the stand-in feeds made here.
 *
 * Layout: entries[i] is input_shape's i-th "name:dims" (dims with -1 for a profile dim;
 * first_dyn = how many -1s come before it, so its j-th -1 takes sizes[k * n_dyn + first_dyn +
 * j] in profile k).  The strings were validated by the option table (grammar, counts, 2 to 100
 * profiles, one size per -1), so parsing trusts the grammar and only guards the limits.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/dims_profiles.h"
#include "compile/generalize.h"
#include "ops/ops.h"
#include "options/options_int.h"

typedef struct dims_entry {
  char *name;
  int ndim; /* 0: a scalar ("name:0") */
  int64_t shape[NPU_MAX_DIMS]; /* -1: a profile dim */
  int first_dyn;
  int value; /* the graph value it describes, once checked (-1 before) */
} dims_entry;

struct npuP_dims {
  int node_type; /* dynamic_node_type: 0 dataset outputs, 1 placeholders */
  bool hybrid;   /* compile_hybrid_mode 1: a feed outside the profiles runs the dynamic plan */
  int n_entries;
  dims_entry *entries;
  int n_profiles, n_dyn;
  int64_t *sizes;   /* n_profiles * n_dyn */
  uint8_t *cand;    /* n_profiles: scratch of the run check */
  bool checked;     /* the graph check passed */
  npuP_generic feeds; /* stand-in feeds (npuP_dims_feeds) */
};

/* ------------------------------------------------------------------ parsing */

typedef struct parse_state {
  npuP_dims *d;
  npu_context *ctx;
  npu_status status; /* set when a piece fails for want of memory */
  int i;             /* entry or profile being read */
  int j;             /* dim within it */
} parse_state;

static int piece_dim(const char *p, const char *e, void *ud, char *why, size_t n) {
  parse_state *ps = ud;
  dims_entry *en = &ps->d->entries[ps->i];
  int64_t v = 0;
  npuO_span_int(p, e, &v);
  if (en->ndim >= NPU_MAX_DIMS) {
    snprintf(why, n, "'%s' has more than %d dims", en->name, NPU_MAX_DIMS);
    return -1;
  }
  en->shape[en->ndim++] = v;
  return 0;
}

static int piece_entry(const char *p, const char *e, void *ud, char *why, size_t n) {
  parse_state *ps = ud;
  dims_entry *en = &ps->d->entries[ps->i];
  const char *colon = e;
  while (colon > p && colon[-1] != ':') colon--;
  const char *np = p, *ne = colon - 1;
  while (np < ne && (*np == ' ' || *np == '\t')) np++;
  while (ne > np && (ne[-1] == ' ' || ne[-1] == '\t')) ne--;
  en->name = npuC_alloc(ps->ctx, (size_t)(ne - np) + 1);
  if (!en->name) {
    ps->status = NPU_ERR_NOMEM;
    return -1;
  }
  memcpy(en->name, np, (size_t)(ne - np));
  en->name[ne - np] = 0;
  en->value = -1;
  en->first_dyn = ps->j;
  if (npuO_for_pieces(colon, e, ',', piece_dim, ps, why, n)) return -1;
  if (en->ndim == 1 && en->shape[0] == 0) en->ndim = 0; /* 000: "For scalar inputs, set the
                                                            shape to 0" */
  for (int k = 0; k < en->ndim; k++) ps->j += en->shape[k] == -1;
  ps->i++;
  return 0;
}

/* (the option table checked the counts: one size per -1 of input_shape in every profile) */
static int piece_size(const char *p, const char *e, void *ud, char *why, size_t n) {
  (void)why, (void)n;
  parse_state *ps = ud;
  npuO_span_int(p, e, &ps->d->sizes[(size_t)ps->i * (size_t)ps->d->n_dyn + (size_t)ps->j++]);
  return 0;
}

static int piece_profile(const char *p, const char *e, void *ud, char *why, size_t n) {
  parse_state *ps = ud;
  ps->j = 0;
  if (npuO_for_pieces(p, e, ',', piece_size, ps, why, n)) return -1;
  ps->i++;
  return 0;
}

static int count_char(const char *s, char c) {
  int k = 0;
  for (; *s; s++) k += *s == c;
  return k;
}

static npu_status parse(npu_context *ctx, const npu_options *o, npuP_dims **out) {
  const char *shape = npuO_string(o, NPUO_input_shape), *dims = npuO_string(o, NPUO_dynamic_dims);
  npuP_dims *d = npuC_calloc(ctx, 1, sizeof *d);
  if (!d) return NPU_ERR_NOMEM;
  d->node_type = (int)npuO_int(o, NPUO_dynamic_node_type);
  d->hybrid = npuO_int(o, NPUO_compile_hybrid_mode) == 1;
  d->n_entries = count_char(shape, ';') + 1;
  d->n_profiles = count_char(dims, ';') + 1;
  d->n_dyn = count_char(shape, '-'); /* an upper bound of the -1s (the grammar: only -1 has '-') */
  d->entries = npuC_calloc(ctx, (size_t)d->n_entries, sizeof *d->entries);
  d->sizes = npuC_calloc(ctx, (size_t)d->n_profiles * (size_t)(d->n_dyn + 1), sizeof *d->sizes);
  d->cand = npuC_calloc(ctx, (size_t)d->n_profiles, 1);
  if (!d->entries || !d->sizes || !d->cand) {
    npuP_dims_free(ctx, d);
    return NPU_ERR_NOMEM;
  }
  char why[256] = "";
  parse_state ps = {.d = d, .ctx = ctx};
  int bad = npuO_for_pieces(shape, shape + strlen(shape), ';', piece_entry, &ps, why, sizeof why);
  if (!bad) {
    d->n_dyn = ps.j;
    ps.i = 0;
    bad = npuO_for_pieces(dims, dims + strlen(dims), ';', piece_profile, &ps, why, sizeof why);
  }
  if (bad) {
    npuP_dims_free(ctx, d);
    return ps.status ? ps.status
                     : npuC_error(ctx, NPU_ERR_OPTION, "input_shape / dynamic_dims: %s", why);
  }
  *out = d;
  return NPU_OK;
}

void npuP_dims_free(npu_context *ctx, npuP_dims *d) {
  if (!d) return;
  for (int i = 0; d->entries && i < d->n_entries; i++) npuC_free(ctx, d->entries[i].name);
  npuC_free(ctx, d->entries);
  npuC_free(ctx, d->sizes);
  npuC_free(ctx, d->cand);
  npuP_generic_free(ctx, &d->feeds);
  npuC_free(ctx, d);
}

int npuP_dims_n_profiles(const npuP_dims *d) { return d ? d->n_profiles : 0; }
bool npuP_dims_hybrid(const npuP_dims *d) { return d && d->hybrid; }

/* ------------------------------------------------------------------ shapes and messages */

/* Entry en's shape in profile k; k < 0: input_shape's own, -1 at the profile dims. */
static void profile_shape(const npuP_dims *d, const dims_entry *en, int k, int64_t *shape) {
  if (k < 0) {
    memcpy(shape, en->shape, (size_t)en->ndim * sizeof *shape);
    return;
  }
  const int64_t *sz = d->sizes + (size_t)k * (size_t)d->n_dyn + (size_t)en->first_dyn;
  for (int i = 0, j = 0; i < en->ndim; i++) shape[i] = en->shape[i] == -1 ? sz[j++] : en->shape[i];
}

static bool is_profile(const npuP_dims *d, const dims_entry *en, int k, int ndim,
                       const int64_t *shape) {
  int64_t want[NPU_MAX_DIMS];
  if (ndim != en->ndim) return false;
  profile_shape(d, en, k, want);
  return ndim == 0 || memcmp(want, shape, (size_t)ndim * sizeof *shape) == 0;
}

/* Appends to buf (always terminated, "..." when full). */
static void append(char *buf, size_t size, const char *fmt, ...) NPU_PRINTF(3, 4);
static void append(char *buf, size_t size, const char *fmt, ...) {
  size_t len = strlen(buf);
  if (len + 4 >= size) { /* full: it ends "..." */
    memcpy(buf + size - 4, "...", 4);
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + len, size - len, fmt, ap);
  va_end(ap);
  if (w < 0 || (size_t)w >= size - len) memcpy(buf + size - 4, "...", 4);
}

/* "[1,1,40,20]": entry en in profile k, printed as feeds are. */
static void append_profile_shape(char *buf, size_t size, const npuP_dims *d, const dims_entry *en,
                                 int k) {
  int64_t sh[NPU_MAX_DIMS];
  char a[96];
  profile_shape(d, en, k, sh);
  append(buf, size, "%s", npuC_shape_str(a, sizeof a, en->ndim, sh));
}

/* The distinct shapes entry en takes across the profiles, in profile order. */
static void list_shapes(char *buf, size_t size, const npuP_dims *d, const dims_entry *en) {
  for (int k = 0; k < d->n_profiles; k++) {
    bool seen = false;
    int64_t sh[NPU_MAX_DIMS];
    profile_shape(d, en, k, sh);
    for (int m = 0; m < k && !seen; m++) seen = is_profile(d, en, m, en->ndim, sh);
    if (seen) continue;
    append(buf, size, " ");
    append_profile_shape(buf, size, d, en, k);
  }
}

/* Sorted name lists, for "its placeholders: 'a', 'b'" and the input_shape order. */
static int by_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends the names name(ud, i) for i < count (NULL: none), sorted, ", " between them, each
   in quotes when quoted; "(none)" when there is none. */
static npu_status append_sorted(npu_context *ctx, char *buf, size_t size, int count,
                                const char *(*name)(const void *ud, int i), const void *ud,
                                bool quoted) {
  const char **names = count ? npuC_alloc(ctx, (size_t)count * sizeof *names) : NULL;
  if (count && !names) return NPU_ERR_NOMEM;
  int n = 0;
  for (int i = 0; i < count; i++)
    if ((names[n] = name(ud, i))) n++;
  if (!n) append(buf, size, "(none)");
  else qsort(names, (size_t)n, sizeof *names, by_name);
  for (int i = 0; i < n; i++)
    append(buf, size, quoted ? "%s'%s'" : "%s%s", i ? ", " : "", names[i]);
  npuC_free(ctx, names);
  return NPU_OK;
}

static const char *placeholder_name(const void *ud, int id) {
  const npu_graph *g = ud;
  return npuX_op(g->nodes[id].op)->kind == NPUX_KIND_PLACEHOLDER ? g->nodes[id].name : NULL;
}

static const char *entry_name(const void *ud, int i) {
  return ((const npuP_dims *)ud)->entries[i].name;
}

/* ------------------------------------------------------------------ the graph check */

/* The entry's shape against what the graph knows of its value (ndim -1: nothing). */
static npu_status check_shape(npu_context *ctx, const dims_entry *en, const npuG_value *v,
                              const char *what, const char *name) {
  char a[96], b[96];
  if (v->ndim < 0) return NPU_OK;
  bool ok = v->ndim == en->ndim;
  int bad = -1;
  for (int i = 0; ok && i < en->ndim; i++)
    if ((en->shape[i] == -1 && v->shape[i] != -1) ||
        (en->shape[i] != -1 && v->shape[i] != -1 && en->shape[i] != v->shape[i]))
      bad = i, ok = false;
  if (ok) return NPU_OK;
  npuC_shape_str(a, sizeof a, en->ndim, en->shape);
  npuC_shape_str(b, sizeof b, v->ndim, v->shape);
  if (bad < 0)
    return npuC_error(ctx, NPU_ERR_OPTION,
                      "input_shape gives '%s' %d dim(s) %s but %s '%s' is %s", en->name,
                      en->ndim, a, what, name, b);
  if (en->shape[bad] == -1)
    return npuC_error(ctx, NPU_ERR_OPTION,
                      "input_shape makes dim %d of '%s' a profile dim (-1 in %s) but %s '%s' "
                      "fixes it: %s (a profile dim must be unknown, -1, in the graph)",
                      bad, en->name, a, what, name, b);
  return npuC_error(ctx, NPU_ERR_OPTION,
                    "input_shape gives '%s' the shape %s but %s '%s' is %s (dim %d differs)",
                    en->name, a, what, name, b, bad);
}

/* dynamic_node_type 1: the names are the graph's placeholders, alphabetically. */
static npu_status check_placeholders(npuP_dims *d, npu_context *ctx, const npu_graph *g) {
  char list[300] = "";
  for (int i = 0; i < d->n_entries; i++) {
    dims_entry *en = &d->entries[i];
    int id = npuG_find_node(g, en->name);
    if (id < 0 || npuX_op(g->nodes[id].op)->kind != NPUX_KIND_PLACEHOLDER) {
      npu_status st = append_sorted(ctx, list, sizeof list, g->n_nodes, placeholder_name, g, true);
      if (st) return st;
      return npuC_error(ctx, NPU_ERR_OPTION,
                        "input_shape names '%s', which is %s of the graph (dynamic_node_type 1: "
                        "the dynamic inputs are placeholders); its placeholders: %s",
                        en->name, id < 0 ? "not a node" : "not a placeholder", list);
    }
    if (i && strcmp(d->entries[i - 1].name, en->name) >= 0) {
      npu_status st = append_sorted(ctx, list, sizeof list, d->n_entries, entry_name, d, false);
      if (st) return st;
      if (!strcmp(d->entries[i - 1].name, en->name))
        return npuC_error(ctx, NPU_ERR_OPTION, "input_shape names '%s' twice", en->name);
      return npuC_error(ctx, NPU_ERR_OPTION,
                        "input_shape lists '%s' before '%s': the names must follow the "
                        "alphabetical order of the data nodes' names (000): %s",
                        d->entries[i - 1].name, en->name, list);
    }
    const npuG_node *node = &g->nodes[id];
    npu_status st = check_shape(ctx, en, &g->values[node->first_output], "placeholder",
                                node->name);
    if (st) return st;
    en->value = node->first_output;
  }
  return NPU_OK;
}

/* dynamic_node_type 0: one get_next, one entry per output, its element one of the profiles
   (the executor binds elements of the shape its plan was compiled for, exec/exec.c). */
static npu_status check_dataset(npuP_dims *d, npu_context *ctx, const npu_graph *g) {
  const npuG_node *next = NULL;
  for (int id = 0; id < g->n_nodes; id++) {
    const npuG_node *node = &g->nodes[id];
    if (npuX_op(node->op)->kind != NPUX_KIND_GET_NEXT) continue;
    if (next)
      return npuC_error(ctx, NPU_ERR_UNSUPPORTED,
                        "dynamic_node_type 0: the graph has two iterator_get_next nodes ('%s', "
                        "'%s'); whole-graph profiles take one (002 §5.6)",
                        next->name, node->name);
    next = node;
  }
  if (!next)
    return npuC_error(ctx, NPU_ERR_OPTION,
                      "dynamic_node_type 0 (the dataset's outputs are the dynamic inputs) but the "
                      "graph has no iterator_get_next; for placeholders use dynamic_node_type 1");
  if (next->n_outputs != d->n_entries)
    return npuC_error(ctx, NPU_ERR_OPTION,
                      "dynamic_node_type 0: input_shape has %d input(s) but iterator_get_next "
                      "'%s' has %d output(s) (one entry per output, in order)",
                      d->n_entries, next->name, next->n_outputs);
  for (int i = 0; i < d->n_entries; i++) {
    dims_entry *en = &d->entries[i];
    const npuG_value *v = &g->values[next->first_output + i];
    char a[96];
    for (int k = 0; k < v->ndim; k++)
      if (v->shape[k] < 0)
        return npuC_error(ctx, NPU_ERR_UNSUPPORTED,
                          "dynamic_node_type 0: iterator_get_next '%s' output %d is %s, an element "
                          "shape that varies (a short last batch): this device binds one element "
                          "shape per plan and cannot switch profiles inside a run; batch with "
                          "drop_remainder=true (an element shape that is one of the profiles), or "
                          "feed placeholders with dynamic_node_type 1",
                          next->name, i, npuC_shape_str(a, sizeof a, v->ndim, v->shape));
    if (v->ndim != en->ndim)
      return npuC_error(ctx, NPU_ERR_OPTION,
                        "input_shape gives '%s' %d dim(s) but iterator_get_next '%s' output %d "
                        "is %s",
                        en->name, en->ndim, next->name, i,
                        npuC_shape_str(a, sizeof a, v->ndim, v->shape));
    en->value = next->first_output + i;
  }
  /* the element must be one profile, all outputs together */
  for (int k = 0; k < d->n_profiles; k++) {
    bool all = true;
    for (int i = 0; i < d->n_entries && all; i++) {
      const npuG_value *v = &g->values[d->entries[i].value];
      all = is_profile(d, &d->entries[i], k, v->ndim, v->shape);
    }
    if (all) return NPU_OK;
  }
  char got[200] = "", allowed[260] = "";
  for (int i = 0; i < d->n_entries; i++) {
    const npuG_value *v = &g->values[d->entries[i].value];
    char a[96];
    append(got, sizeof got, "%s%s", i ? " " : "", npuC_shape_str(a, sizeof a, v->ndim, v->shape));
  }
  for (int k = 0; k < d->n_profiles; k++) {
    append(allowed, sizeof allowed, " %d:", k);
    for (int i = 0; i < d->n_entries; i++) {
      append(allowed, sizeof allowed, " ");
      append_profile_shape(allowed, sizeof allowed, d, &d->entries[i], k);
    }
  }
  return npuC_error(ctx, NPU_ERR_SHAPE,
                    "dynamic_node_type 0: iterator_get_next '%s' gives elements %s: not one of the "
                    "dynamic_dims profiles:%s",
                    next->name, got, allowed);
}

/* ------------------------------------------------------------------ the run check */

/* compile_hybrid_mode: whether feed t, no profile's, may run the dynamic-shape plan: its rank
   and the dims input_shape fixes are input_shape's (else it is refused as before: the plan
   binds those dims). */
static bool is_outside(const dims_entry *en, const npu_tensor *t) {
  if (t->ndim != en->ndim) return false;
  for (int i = 0; i < en->ndim; i++)
    if (en->shape[i] != -1 && en->shape[i] != t->shape[i]) return false;
  return true;
}

npu_status npuP_dims_match(npuP_dims **dims, npu_context *ctx, const npu_options *o,
                           const npu_graph *g, int n_feeds, const int *feeds,
                           npu_tensor *const *feed_tensors, int *profile) {
  *profile = -1;
  npuP_dims *d = *dims;
  if (!d) {
    if (!npuO_is_set(o, NPUO_input_shape)) return NPU_OK;
    npu_status st = parse(ctx, o, &d);
    if (st) return st;
    *dims = d;
  }
  if (!d->checked) {
    npu_status st = d->node_type == 0 ? check_dataset(d, ctx, g) : check_placeholders(d, ctx, g);
    if (st) return st;
    d->checked = true;
  }
  if (d->node_type == 0) return NPU_OK; /* one element shape, checked once above */
  memset(d->cand, 1, (size_t)d->n_profiles);
  bool fed_any = false, outside = false;
  for (int i = 0; i < d->n_entries; i++) {
    const dims_entry *en = &d->entries[i];
    const npu_tensor *t = NULL;
    for (int f = 0; f < n_feeds && !t; f++)
      if (feeds[f] == en->value) t = feed_tensors[f];
    if (!t) continue; /* not fed: the run does not reach it (or the compile says it must be) */
    fed_any = true;
    bool some = false;
    for (int k = 0; k < d->n_profiles; k++) {
      bool is = is_profile(d, en, k, t->ndim, t->shape);
      some |= is;
      d->cand[k] &= is;
    }
    if (!some && d->hybrid && is_outside(en, t)) {
      outside = true;
      continue;
    }
    if (!some && d->hybrid) {
      char a[96], b[96];
      return npuC_error(ctx, NPU_ERR_ARG,
                        "feed '%s' has shape %s: compile_hybrid_mode runs a feed outside the "
                        "dynamic_dims profiles on the dynamic-shape plan only when it has "
                        "input_shape's rank and fixed dims: %s",
                        en->name, npuC_shape_str(a, sizeof a, t->ndim, t->shape),
                        npuC_shape_str(b, sizeof b, en->ndim, en->shape));
    }
    if (!some) {
      char a[96], allowed[300] = "";
      list_shapes(allowed, sizeof allowed, d, en);
      return npuC_error(ctx, NPU_ERR_ARG,
                        "feed '%s' has shape %s: not one of the dynamic_dims profiles:%s",
                        en->name, npuC_shape_str(a, sizeof a, t->ndim, t->shape), allowed);
    }
  }
  if (!fed_any) return NPU_OK;
  for (int k = 0; k < d->n_profiles && !outside; k++)
    if (d->cand[k]) {
      *profile = k;
      return NPU_OK;
    }
  if (d->hybrid) { /* no profile, or feeds of different profiles: the dynamic-shape plan */
    *profile = NPUP_DIMS_OUTSIDE;
    return NPU_OK;
  }
  /* each feed is some profile's, but not all the same profile's */
  char got[200] = "", allowed[300] = "";
  for (int i = 0; i < d->n_entries; i++) {
    const dims_entry *en = &d->entries[i];
    for (int f = 0; f < n_feeds; f++)
      if (feeds[f] == en->value) {
        char a[96];
        const npu_tensor *t = feed_tensors[f];
        append(got, sizeof got, "%s'%s' %s", *got ? ", " : "", en->name,
               npuC_shape_str(a, sizeof a, t->ndim, t->shape));
        break;
      }
  }
  for (int k = 0; k < d->n_profiles; k++) {
    append(allowed, sizeof allowed, " %d:", k);
    for (int i = 0; i < d->n_entries; i++) {
      append(allowed, sizeof allowed, " %s", d->entries[i].name);
      append_profile_shape(allowed, sizeof allowed, d, &d->entries[i], k);
    }
  }
  return npuC_error(ctx, NPU_ERR_ARG,
                    "feeds %s are not one dynamic_dims profile (a profile sets all the inputs "
                    "together); the profiles:%s",
                    got, allowed);
}

npu_status npuP_dims_feeds(npuP_dims *d, npu_context *ctx, int k, int n_feeds, const int *feeds,
                           npu_tensor *const *feed_tensors, npu_tensor *const **out) {
  *out = NULL;
  npu_status s = npuP_generic_reserve(&d->feeds, ctx, n_feeds);
  if (s) return s;
  for (int f = 0; f < n_feeds; f++) {
    d->feeds.ptrs[f] = feed_tensors[f];
    for (int i = 0; i < d->n_entries; i++) {
      const dims_entry *en = &d->entries[i];
      if (feeds[f] != en->value) continue;
      npu_tensor *m = &d->feeds.meta[f]; /* shape only: compiling reads no data */
      *m = (npu_tensor){.dtype = feed_tensors[f]->dtype, .ndim = en->ndim};
      profile_shape(d, en, k, m->shape);
      m->numel = npuT_numel(m->ndim, m->shape);
      m->nbytes = (size_t)m->numel * npu_dtype_size(m->dtype);
      d->feeds.ptrs[f] = m;
      break;
    }
  }
  *out = d->feeds.ptrs;
  return NPU_OK;
}
