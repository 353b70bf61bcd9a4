/*
 * exec_config.c — graph-level options (set_graph_exec_config, 002 §7.3; ExperimentalConfig,
 * 004): the overlay a node carries, the session's config for a run that reaches it, and the
 * dynamic_inputs_shape_range check.
 *
 * The overlay is stored as attributes of the node, one per option, under the names of the
 * table below ("_is_train_graph", "_graph_dynamic_input", ...): plain node data, so graphs
 * copy and export it with nothing special, and a leading underscore tells TensorFlow tools it
 * is bookkeeping, not an input of the op.  Only the options 002 §7.3 and 004 offer per graph
 * may be overlaid; everything else is a session matter.
 *
 * Invariants: g->n_exec_configs counts the nodes carrying at least one of these attributes;
 * g->exec_config_epoch changes at every set, so a session compares one number per run.
 */
#include <stdlib.h>
#include <string.h>

#include "compile/exec_config.h"
#include "options/options_int.h"

/* The options a graph may set for itself, the attribute each is stored under, and the
   parameter of set_graph_exec_config / ExperimentalConfig it comes from (for messages). */
typedef struct graph_option {
  npu_option_id id;
  const char *attr;
  const char *param;
} graph_option;

static const graph_option graph_options[] = {
    {NPUO_graph_run_mode, "_is_train_graph", "is_train_graph"}, /* a BOOL: graph_run_mode != 0 */
    {NPUO_dynamic_input, "_graph_dynamic_input", "dynamic_input"},
    {NPUO_dynamic_graph_execute_mode, "_graph_dynamic_graph_execute_mode",
     "dynamic_graph_execute_mode"},
    {NPUO_dynamic_inputs_shape_range, "_graph_dynamic_inputs_shape_range",
     "dynamic_inputs_shape_range"},
    {NPUO_graph_compiler_cache_dir, "_graph_compiler_cache_dir",
     "experimental_config.graph_compiler_cache_dir"},
    {NPUO_accelerate_train_mode, "_graph_accelerate_train_mode",
     "experimental_config.accelerate_train_mode"},
};
enum { N_GRAPH_OPTIONS = (int)npu_countof(graph_options) };

static int graph_option_of(int id) {
  for (int k = 0; k < N_GRAPH_OPTIONS; k++)
    if ((int)graph_options[k].id == id) return k;
  return -1;
}

static bool has_config(const npuG_node *n) {
  for (int k = 0; k < N_GRAPH_OPTIONS; k++)
    if (npuG_attr_find(n, graph_options[k].attr)) return true;
  return false;
}

static bool is_config_attr(const char *name) {
  for (int k = 0; k < N_GRAPH_OPTIONS; k++)
    if (strcmp(name, graph_options[k].attr) == 0) return true;
  return false;
}

/* ------------------------------------------------------------------ on the node */

/* The overlay value of option k as a new attribute (name and string owned). */
static npu_status make_attr(npu_context *ctx, const npu_options *overlay, int k, npuG_attr *a) {
  npu_option_id id = graph_options[k].id;
  *a = (npuG_attr){0};
  if (!(a->name = npuC_strdup(ctx, graph_options[k].attr))) return NPU_ERR_NOMEM;
  switch (npu_option_at((int)id)->type) {
  case NPU_OPTION_STRING:
    a->type = NPU_ATTR_STRING;
    if (!(a->u.s = npuC_strdup(ctx, npuO_string(overlay, id)))) {
      npuC_free(ctx, a->name);
      a->name = NULL;
      return NPU_ERR_NOMEM;
    }
    return NPU_OK;
  default: /* BOOL, and graph_run_mode as the reference's boolean is_train_graph */
    a->type = NPU_ATTR_BOOL;
    a->u.i = npuO_int(overlay, id) != 0;
    return NPU_OK;
  }
}

npu_status npu_graph_set_exec_config(npu_graph *g, int node, const npu_options *overlay) {
  if (!g) return NPU_ERR_ARG;
  npu_context *ctx = g->ctx;
  if (node < 0 || node >= g->n_nodes)
    return npuC_error(ctx, NPU_ERR_ARG, "npu_graph_set_exec_config: no node %d", node);
  npuG_node *n = &g->nodes[node];
  int n_new = 0;
  if (overlay) {
    for (int id = 0; id < NPUO_COUNT; id++) {
      if (npuO_source_of(overlay, (npu_option_id)id) != NPUO_SRC_USER) continue;
      if (graph_option_of(id) < 0)
        return npuC_error(ctx, NPU_ERR_OPTION,
                          "node '%s': option '%s' cannot be set per graph (graph level: "
                          "graph_run_mode (is_train_graph), dynamic_input, "
                          "dynamic_graph_execute_mode, dynamic_inputs_shape_range, "
                          "graph_compiler_cache_dir, accelerate_train_mode)",
                          n->name, npu_option_at(id)->name);
      n_new++;
    }
  }
  int n_kept = 0;
  for (int i = 0; i < n->n_attrs; i++) n_kept += !is_config_attr(n->attrs[i].name);
  npuG_attr *attrs = NULL;
  if (n_kept + n_new) {
    attrs = npuC_calloc(ctx, (size_t)(n_kept + n_new), sizeof *attrs);
    if (!attrs) return NPU_ERR_NOMEM;
  }
  /* the new attributes first, so a failure frees only what was made here */
  int made = 0;
  for (int k = 0; overlay && k < N_GRAPH_OPTIONS; k++) {
    if (npuO_source_of(overlay, graph_options[k].id) != NPUO_SRC_USER) continue;
    npu_status st = make_attr(ctx, overlay, k, &attrs[made]);
    if (st) {
      npuG_free_attrs(ctx, attrs, made); /* and the array */
      return st;
    }
    made++;
  }
  /* commit: move the other attributes after them, free the old config attributes */
  bool had = has_config(n);
  int j = n_new;
  for (int i = 0; i < n->n_attrs; i++) {
    npuG_attr *a = &n->attrs[i];
    if (!is_config_attr(a->name)) {
      attrs[j++] = *a;
      continue;
    }
    npuC_free(ctx, a->name);
    if (a->type == NPU_ATTR_STRING) npuC_free(ctx, a->u.s);
  }
  npuC_free(ctx, n->attrs);
  n->attrs = attrs;
  n->n_attrs = n_kept + n_new;
  g->n_exec_configs += (n_new > 0) - had;
  g->exec_config_epoch++;
  return NPU_OK;
}

npu_status npu_graph_get_exec_config(const npu_graph *g, int node, npu_options **out) {
  if (!out) return npuC_error(g ? g->ctx : NULL, NPU_ERR_ARG, "npu_graph_get_exec_config: out is NULL");
  *out = NULL;
  if (!g) return NPU_ERR_ARG;
  if (node < 0 || node >= g->n_nodes)
    return npuC_error(g->ctx, NPU_ERR_ARG, "npu_graph_get_exec_config: no node %d", node);
  const npuG_node *n = &g->nodes[node];
  if (!has_config(n)) return NPU_OK;
  npu_options *o;
  npu_status st = npu_options_new(g->ctx, &o);
  for (int k = 0; !st && k < N_GRAPH_OPTIONS; k++) {
    const npuG_attr *a = npuG_attr_find(n, graph_options[k].attr);
    if (!a) continue;
    const npu_option_info *info = npu_option_at((int)graph_options[k].id);
    if (info->type == NPU_OPTION_STRING)
      st = npu_options_set_string(o, info->name, a->u.s);
    else if (info->type == NPU_OPTION_BOOL)
      st = npu_options_set_bool(o, info->name, a->u.i != 0);
    else
      st = npu_options_set_int(o, info->name, a->u.i != 0);
  }
  if (st) {
    if (o) npu_options_release(o);
    return st;
  }
  *out = o;
  return NPU_OK;
}

bool npuP_is_exec_config_attr(const char *name) { return is_config_attr(name); }

npu_status npuP_exec_config_import(npu_graph *g, int node, int n_attrs, const npu_attr *attrs) {
  npu_options *o;
  npu_status st = npu_options_new(g->ctx, &o);
  if (st) return st;
  for (int i = 0; !st && i < n_attrs; i++) {
    const npu_attr *a = &attrs[i];
    int k = 0;
    while (k < N_GRAPH_OPTIONS && strcmp(graph_options[k].attr, a->name) != 0) k++;
    if (k == N_GRAPH_OPTIONS) continue;
    const npu_option_info *info = npu_option_at((int)graph_options[k].id);
    bool string = info->type == NPU_OPTION_STRING;
    if (a->type != (string ? NPU_ATTR_STRING : NPU_ATTR_BOOL))
      st = npuC_error(g->ctx, NPU_ERR_FORMAT, "attribute '%s' (set_graph_exec_config's %s) must "
                      "be a %s", a->name, graph_options[k].param, string ? "string" : "bool");
    else if (string) st = npu_options_set_string(o, info->name, a->u.s);
    else if (info->type == NPU_OPTION_BOOL) st = npu_options_set_bool(o, info->name, a->u.i != 0);
    else st = npu_options_set_int(o, info->name, a->u.i != 0);
  }
  if (!st) st = npu_graph_set_exec_config(g, node, o);
  npu_options_release(o);
  return st;
}

/* Whether nodes a and b carry the same overlay. */
static bool same_config(const npuG_node *a, const npuG_node *b) {
  for (int k = 0; k < N_GRAPH_OPTIONS; k++) {
    const npuG_attr *x = npuG_attr_find(a, graph_options[k].attr);
    const npuG_attr *y = npuG_attr_find(b, graph_options[k].attr);
    if (!x != !y) return false;
    if (!x) continue;
    if (x->type != y->type) return false;
    if (x->type == NPU_ATTR_STRING ? strcmp(x->u.s, y->u.s) != 0 : x->u.i != y->u.i)
      return false;
  }
  return true;
}

/* ------------------------------------------------------------------ the session's side */

/* The session's options with node's overlay on top, checked.  accelerate_train_mode goes
   under the name the session used when it set experimental_accelerate_train_mode: the two
   are one setting (the rule forbidding both names must not fire when the graph overrides). */
static npu_status merge(npu_context *ctx, const npu_graph *g, int node,
                        const npu_options *session, npu_options **out) {
  const npuG_node *n = &g->nodes[node];
  npu_options *o;
  npu_status st = npu_options_copy(session, &o);
  if (st) return st;
  for (int k = 0; !st && k < N_GRAPH_OPTIONS; k++) {
    const npuG_attr *a = npuG_attr_find(n, graph_options[k].attr);
    if (!a) continue;
    const npu_option_info *info = npu_option_at((int)graph_options[k].id);
    const char *name = info->name;
    if (graph_options[k].id == NPUO_accelerate_train_mode &&
        npuO_is_set(o, NPUO_experimental_accelerate_train_mode))
      name = "experimental_accelerate_train_mode";
    if (info->type == NPU_OPTION_STRING) st = npu_options_set_string(o, name, a->u.s);
    else if (info->type == NPU_OPTION_BOOL) st = npu_options_set_bool(o, name, a->u.i != 0);
    else st = npu_options_set_int(o, name, a->u.i != 0);
  }
  if (!st) st = npu_options_check(o);
  if (st) {
    npu_options_release(o);
    return npuC_error_prefix(ctx, st, "the graph-level config of node '%s' "
                                      "(set_graph_exec_config) over the session's options",
                             n->name);
  }
  *out = o;
  return NPU_OK;
}

static void free_item(npu_context *ctx, npuP_graph_config *it) {
  if (!it) return;
  npuP_config_free(ctx, &it->compile);
  npu_options_release(it->options);
  npuC_free(ctx, it);
}

static npu_status add_item(npuP_graph_configs *set, npu_context *ctx, const npu_graph *g,
                           int node, const npu_options *session, npuP_graph_config **out) {
  npuP_graph_config **items =
      npuC_realloc(ctx, set->items, (size_t)(set->n + 1) * sizeof *items);
  if (!items) return NPU_ERR_NOMEM;
  set->items = items;
  npuP_graph_config *it = npuC_calloc(ctx, 1, sizeof *it);
  if (!it) return NPU_ERR_NOMEM;
  it->node = node;
  npu_status st = merge(ctx, g, node, session, &it->options);
  if (!st) {
    st = npuP_config_init(ctx, it->options, &it->compile);
    if (st) {
      npu_options_release(it->options);
      npuC_free(ctx, it);
      return npuC_error_prefix(ctx, st, "the graph-level config of node '%s'",
                               g->nodes[node].name);
    }
  }
  if (st) {
    npuC_free(ctx, it);
    return st;
  }
  set->items[set->n++] = it;
  *out = it;
  return NPU_OK;
}

bool npuP_graph_configs_stale(const npuP_graph_configs *set, const npu_graph *g) {
  return set->epoch != g->exec_config_epoch;
}

void npuP_graph_configs_free(npu_context *ctx, npuP_graph_configs *set, const npu_graph *g) {
  for (int i = 0; i < set->n; i++) free_item(ctx, set->items[i]);
  npuC_free(ctx, set->items);
  *set = (npuP_graph_configs){.epoch = g ? g->exec_config_epoch : 0};
}

bool npuP_graph_configs_accelerate(const npuP_graph_configs *set, const npu_graph *g) {
  for (int i = 0; i < set->n; i++)
    if (set->items[i]->compile.accel.on) return true;
  for (int id = 0; g->n_exec_configs && id < g->n_nodes; id++) {
    const npuG_attr *a = npuG_attr_find(&g->nodes[id], "_graph_accelerate_train_mode");
    if (a && a->type == NPU_ATTR_STRING && *a->u.s) return true;
  }
  return false;
}

/* ------------------------------------------------------------------ dynamic_inputs_shape_range */

/* One "[d,...]" of the option: each dim an interval (a fixed n is n..n, -1 is 0..max). */
typedef struct shape_range {
  bool getnext;
  int ndim; /* may exceed NPU_MAX_DIMS: then no value can match */
  int64_t lo[NPU_MAX_DIMS], hi[NPU_MAX_DIMS];
  const char *text; /* the bracketed text, for messages (into the option string) */
  int text_len;
} shape_range;

static void skip_space(const char **p) {
  while (**p == ' ' || **p == '\t') (*p)++;
}

/* Parses a value the option table has already validated, so the grammar is known good:
   sections "getnext:" / "data:" separated by ';', each a list of [dims] separated by ','. */
static int parse_ranges(const char *s, shape_range *r, int cap) {
  int n = 0;
  bool getnext = false;
  for (const char *p = s; *p && n < cap;) {
    skip_space(&p);
    if (strncmp(p, "getnext", 7) == 0) getnext = true, p += 7;
    else if (strncmp(p, "data", 4) == 0) getnext = false, p += 4;
    skip_space(&p);
    if (*p == ':') p++;
    for (;;) {
      skip_space(&p);
      if (*p != '[' || n >= cap) break;
      const char *close = strchr(p, ']');
      shape_range *e = &r[n++];
      *e = (shape_range){.getnext = getnext, .text = p, .text_len = (int)(close - p + 1)};
      for (const char *q = p + 1; q < close;) {
        skip_space(&q);
        if (q >= close) break;
        char *end;
        long long a = strtoll(q, &end, 10), b = a;
        q = end;
        skip_space(&q);
        if (*q == '~') b = strtoll(q + 1, &end, 10), q = end;
        if (e->ndim < NPU_MAX_DIMS) {
          e->lo[e->ndim] = a < 0 ? 0 : a;
          e->hi[e->ndim] = a < 0 ? INT64_MAX : b;
        }
        e->ndim++;
        skip_space(&q);
        if (*q == ',') q++;
      }
      p = close + 1;
      skip_space(&p);
      if (*p == ',') p++;
    }
    while (*p && *p != ';') p++;
    if (*p == ';') p++;
  }
  return n;
}

typedef struct input_ref {
  const char *name; /* node name (placeholders: the sort key) */
  int value;
} input_ref;

static int by_name(const void *a, const void *b) {
  return strcmp(((const input_ref *)a)->name, ((const input_ref *)b)->name);
}

static const char *section_name(bool getnext) { return getnext ? "getnext" : "data"; }

/* Checks value v (static shape) and, when fed, its feed against range r. */
static npu_status check_one(npu_context *ctx, const npu_graph *g, const shape_range *r,
                            const input_ref *in, const npu_tensor *fed) {
  const npuG_value *v = &g->values[in->value];
  const char *what = r->getnext ? "get_next output" : "placeholder";
  if (v->ndim >= 0 && v->ndim != r->ndim)
    return npuC_error(ctx, NPU_ERR_OPTION,
                      "dynamic_inputs_shape_range: %s '%s:%d' has rank %d but its range %.*s "
                      "has %d dim(s)",
                      what, in->name, v->index, v->ndim, r->text_len, r->text, r->ndim);
  for (int d = 0; v->ndim >= 0 && d < v->ndim; d++) {
    int64_t k = v->shape[d];
    if (k >= 0 && (k < r->lo[d] || k > r->hi[d]))
      return npuC_error(ctx, NPU_ERR_OPTION,
                        "dynamic_inputs_shape_range: %s '%s:%d' has dim %d of size %lld, "
                        "outside its range %.*s",
                        what, in->name, v->index, d, (long long)k, r->text_len, r->text);
  }
  if (!fed) return NPU_OK;
  bool ok = fed->ndim == r->ndim;
  for (int d = 0; ok && d < fed->ndim; d++)
    ok = fed->shape[d] >= r->lo[d] && fed->shape[d] <= r->hi[d];
  if (!ok) {
    char shape[96];
    npuC_shape_str(shape, sizeof shape, fed->ndim, fed->shape);
    return npuC_error(ctx, NPU_ERR_SHAPE,
                      "%s '%s:%d' fed %s, outside its dynamic_inputs_shape_range %.*s", what,
                      in->name, v->index, shape, r->text_len, r->text);
  }
  return NPU_OK;
}

/* Checks the ranges of one section against its inputs, in order. */
static npu_status check_section(npu_context *ctx, const npu_graph *g, bool getnext,
                                const shape_range *r, int n_r, const input_ref *in, int n_in,
                                int n_feeds, const int *feeds, npu_tensor *const *feed_tensors) {
  int n = 0;
  for (int i = 0; i < n_r; i++) n += r[i].getnext == getnext;
  if (n == 0) return NPU_OK; /* the section is absent: those inputs are not constrained */
  if (n != n_in)
    return npuC_error(ctx, NPU_ERR_OPTION,
                      "dynamic_inputs_shape_range: '%s:' gives %d range(s) but this run has %d "
                      "%s(s)%s%s%s",
                      section_name(getnext), n, n_in,
                      getnext ? "get_next output" : "placeholder", n_in ? " (first: '" : "",
                      n_in ? in[0].name : "",
                      n_in ? (getnext ? "')" : "'; 000 orders placeholders by name)") : "");
  int j = 0;
  for (int i = 0; i < n_r; i++) {
    if (r[i].getnext != getnext) continue;
    const npu_tensor *fed = NULL;
    for (int f = 0; f < n_feeds; f++)
      if (feeds[f] == in[j].value) fed = feed_tensors[f];
    npu_status st = check_one(ctx, g, &r[i], &in[j], fed);
    if (st) return st;
    j++;
  }
  return NPU_OK;
}

/* 000: with dynamic_input, each placeholder ("data", sorted by name) and each dataset output
   ("getnext", in graph order) has a range; dynamic_dims takes precedence over it. */
static bool ranges_apply(const npu_options *o) {
  return npuO_bool(o, NPUO_dynamic_input) && *npuO_string(o, NPUO_dynamic_inputs_shape_range) &&
         !npuO_is_set(o, NPUO_dynamic_dims);
}

static npu_status check_ranges(npu_context *ctx, const npu_graph *g, const npu_options *o,
                               const uint8_t *reach, int n_feeds, const int *feeds,
                               npu_tensor *const *feed_tensors) {
  const char *text = npuO_string(o, NPUO_dynamic_inputs_shape_range);
  int cap = 0, n_data = 0, n_next = 0;
  for (const char *p = text; *p; p++) cap += *p == '[';
  for (int id = 0; id < g->n_nodes; id++) {
    if (!reach[id]) continue;
    npuX_kind kind = npuX_op(g->nodes[id].op)->kind;
    n_data += kind == NPUX_KIND_PLACEHOLDER;
    if (kind == NPUX_KIND_GET_NEXT) n_next += g->nodes[id].n_outputs;
  }
  shape_range *r = npuC_calloc(ctx, (size_t)cap + 1, sizeof *r);
  input_ref *in = npuC_calloc(ctx, (size_t)(n_data + n_next) + 1, sizeof *in);
  if (!r || !in) {
    npuC_free(ctx, r);
    npuC_free(ctx, in);
    return NPU_ERR_NOMEM;
  }
  int n_r = parse_ranges(text, r, cap);
  input_ref *data = in, *next = in + n_data;
  int i_data = 0, i_next = 0;
  for (int id = 0; id < g->n_nodes; id++) {
    if (!reach[id]) continue;
    const npuG_node *n = &g->nodes[id];
    npuX_kind kind = npuX_op(n->op)->kind;
    if (kind == NPUX_KIND_PLACEHOLDER) data[i_data++] = (input_ref){n->name, n->first_output};
    if (kind == NPUX_KIND_GET_NEXT)
      for (int k = 0; k < n->n_outputs; k++)
        next[i_next++] = (input_ref){n->name, n->first_output + k};
  }
  qsort(data, (size_t)n_data, sizeof *data, by_name);
  npu_status st = check_section(ctx, g, false, r, n_r, data, n_data, n_feeds, feeds, feed_tensors);
  if (!st)
    st = check_section(ctx, g, true, r, n_r, next, n_next, n_feeds, feeds, feed_tensors);
  npuC_free(ctx, r);
  npuC_free(ctx, in);
  return st;
}

/* ------------------------------------------------------------------ choosing */

/* Marks (1) the nodes the run executes: fetches, targets and what they depend on, stopping at
   fed values, whose producers are marked 2 (reached, not run). */
static void mark_reached(const npu_graph *g, uint8_t *reach, int n_feeds, const int *feeds,
                         int n_fetches, const int *fetches, int n_targets, const int *targets) {
  for (int i = 0; i < n_fetches; i++)
    if (fetches[i] >= 0 && fetches[i] < g->n_values) reach[g->values[fetches[i]].node] = 1;
  for (int i = 0; i < n_targets; i++)
    if (targets[i] >= 0 && targets[i] < g->n_nodes) reach[targets[i]] = 1;
  for (int id = g->n_nodes - 1; id >= 0; id--) { /* ids are a topological order */
    if (reach[id] != 1) continue;
    const npuG_node *n = &g->nodes[id];
    for (int i = 0; i < n->n_inputs; i++) {
      int v = n->inputs[i], src = g->values[v].node;
      bool fed = false;
      for (int f = 0; f < n_feeds && !fed; f++) fed = feeds[f] == v;
      if (!fed) reach[src] = 1;
      else if (!reach[src]) reach[src] = 2;
    }
    for (int i = 0; i < n->n_controls; i++) reach[n->controls[i]] = 1;
  }
}

npu_status npuP_config_for_run(npuP_graph_configs *set, npu_context *ctx, const npu_graph *g,
                               const npu_options *session, npuP_config *base, int n_feeds,
                               const int *feeds, npu_tensor *const *feed_tensors,
                               int n_fetches, const int *fetches, int n_targets,
                               const int *targets, npuP_config **out, bool *made) {
  *out = base;
  *made = false;
  if (!g->n_exec_configs && !ranges_apply(session)) return NPU_OK;
  uint8_t *reach = npuC_calloc(ctx, (size_t)g->n_nodes + 1, 1);
  if (!reach) return NPU_ERR_NOMEM;
  mark_reached(g, reach, n_feeds, feeds, n_fetches, fetches, n_targets, targets);
  int carrier = -1;
  npu_status st = NPU_OK;
  for (int id = 0; g->n_exec_configs && id < g->n_nodes; id++) {
    /* a fed placeholder is part of the run (its input), a node whose value is fed is not */
    bool part = reach[id] == 1 ||
                (reach[id] == 2 && npuX_op(g->nodes[id].op)->kind == NPUX_KIND_PLACEHOLDER);
    if (!part || !has_config(&g->nodes[id])) continue;
    if (carrier < 0) carrier = id;
    else if (!same_config(&g->nodes[carrier], &g->nodes[id])) {
      st = npuC_error(ctx, NPU_ERR_CONFLICT,
                      "nodes '%s' and '%s' of this run carry different graph-level configs "
                      "(set_graph_exec_config): run them separately or give them the same one",
                      g->nodes[carrier].name, g->nodes[id].name);
      break;
    }
  }
  const npu_options *o = session;
  if (!st && carrier >= 0) {
    npuP_graph_config *it = NULL;
    for (int i = 0; i < set->n && !it; i++)
      if (set->items[i]->node == carrier) it = set->items[i];
    if (!it) {
      st = add_item(set, ctx, g, carrier, session, &it);
      *made = !st;
    }
    if (!st) {
      *out = &it->compile;
      o = it->options;
    }
  }
  if (!st && ranges_apply(o))
    st = check_ranges(ctx, g, o, reach, n_feeds, feeds, feed_tensors);
  npuC_free(ctx, reach);
  return st;
}
