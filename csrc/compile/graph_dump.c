/*
 * graph_dump.c — DUMP_GE_GRAPH / DUMP_GRAPH_LEVEL: the graph written to files at each stage of
 * a compilation (002 section 7.4.6-7.4.7), as JSON and as Graphviz DOT.
 *
 * A compilation (npuP_compile) has these stages, numbered from 0:
 *   0 PreRunBegin            the graph as given, pruned to what the run needs: one step per
 *                            needed node, shapes as declared (placeholders keep their -1 dims;
 *                            a shape of unknown rank is JSON null, "<unknown rank>" in the DOT)
 *   1 ConstantFolding        shapes inferred from the feeds, constants folded, one step per node
 *   2 Fusion, 3 PrecisionAssignment, 4 ImplementationSelection, 5 MemoryPlanning
 *                            after each pass of compile/passes.h (the last is the final plan)
 * Each selected stage writes ge_proto_<N>_<SS>_<Stage>.json and .dot, N (8 digits) the
 * context's dumped compilations counted from 0, SS the stage, into $DUMP_GRAPH_PATH, else the
 * output directory ($ASCEND_WORK_PATH, else ./npu_out: npuO_output_dir), not the working
 * directory as on the reference (created when missing, once per compilation, by
 * npuP_graph_dump_begin).
 * DUMP_GRAPH_LEVEL (default 2): 1 and 2 every stage, 3 the final plan only, 4 stage 0 only.
 * Cond branches and while loops are drawn inside: the steps nested in control steps are
 * "s<k>" nodes too (numbered as the plan numbers them, after the top-level ones), and the DOT
 * puts each region's steps in a cluster ("subgraph cluster_r<region>") labelled with the
 * cond or while node running it, nested as the regions are; the level-3 JSON gives such a
 * step its "region" and "owner".
 *
 * The JSON is a header plus, by DUMP_GE_GRAPH: 1 the plan's description (npuP_explain, the
 * text sess:explain decodes) and the data of every constant the plan reads (at most
 * DUMP_CONST_MAX elements each); 2 the description alone; 3 nodes and edges only.  Nodes are
 * the plan's steps ("s<k>") and the graph nodes whose values exist before the run starts
 * ("n<id>": feeds, constants, folded values); edges join a value's producer to each step
 * reading it.  The DOT draws the same graph.  Constant data is exact: integer dtypes as
 * integers, float64 with 17 significant digits, narrower floats with 9; NaN and infinities
 * as the strings "NaN", "Infinity", "-Infinity".
 *
 * Off (DUMP_GE_GRAPH unset) it costs one test of the session's options per compilation (the
 * environment is read once, when the session is created).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/passes.h"
#include "options/options_int.h"

#define DUMP_CONST_MAX 1024 /* elements of a constant written at DUMP_GE_GRAPH=1 */

typedef struct dumper {
  npu_context *ctx;
  const npu_graph *g;
  const npuE_plan *p;
  int mode;        /* DUMP_GE_GRAPH: 1 full, 2 without constant data, 3 nodes and edges */
  int *producer;   /* by value id: the step writing it, -1 none */
  uint8_t *used;   /* by value id: a step reads it or a fetch names it */
  /* The values that exist before the run (read, not written by a step) by graph node: the
     node is drawn as a node of its own ("n<id>") when head[id] >= 0, its values are
     head[id], next[head[id]], ... (-1 ends) */
  int *head; /* by node id */
  int *next; /* by value id */
  /* every step drawn, "s<k>": the top-level ones by position, then those nested in control
     steps (depth first), as the plan numbers them (npuE_step.index) */
  const npuE_step **all;
  int n_all;
  FILE *f;
} dumper;

/* $DUMP_GRAPH_PATH, else the output directory. */
static const char *dump_dir(const npu_options *o) {
  const char *dir = npuO_env_string(o, NPUO_ENV_DUMP_GRAPH_PATH);
  return *dir ? dir : npuO_output_dir(o, NULL);
}

npu_status npuP_graph_dump_begin(npu_context *ctx, const npuP_config *cfg, int *graph) {
  *graph = -1;
  if (!cfg->options || !npuO_env_is_set(cfg->options, NPUO_ENV_DUMP_GE_GRAPH)) return NPU_OK;
  const char *dir = dump_dir(cfg->options);
  npu_status s = npuC_make_dirs(ctx, dir, *npuO_env_string(cfg->options, NPUO_ENV_DUMP_GRAPH_PATH)
                                               ? "DUMP_GRAPH_PATH" : "DUMP_GE_GRAPH");
  if (s) return s;
  *graph = ctx->n_graph_dumps++;
  return NPU_OK;
}

/* ---- text ---- */

static void put_file(void *f, const char *s, size_t n) { fwrite(s, 1, n, f); }

/* s escaped for a JSON string, without the quotes. */
static void json_raw(FILE *f, const char *s) { npuP_json_escape(s, put_file, f); }

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  json_raw(f, s);
  fputc('"', f);
}

/* Inside a DOT double-quoted string: quotes and backslashes escaped, control bytes dropped. */
static void dot_text(FILE *f, const char *s) {
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
    if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
    else if (*c >= 0x20) fputc(*c, f);
  }
}

static const char *node_name(const dumper *d, int node) { return npuP_node_name(d->g, node); }

static const char *node_op(const dumper *d, int node) {
  return node >= 0 && node < d->g->n_nodes ? npuX_op(d->g->nodes[node].op)->name : "?";
}

static bool is_fed(const npuE_plan *p, int v) { return npuP_is_fed(p->n_feeds, p->feeds, v); }

/* "float32 [2,-1]", "float32 <unknown rank>" */
static void shape_text(FILE *f, const npuG_value *v) {
  char shape[NPU_MAX_DIMS * 22 + 4];
  fprintf(f, "%s %s", npu_dtype_name(v->dtype), npuC_shape_str(shape, sizeof shape, v->ndim,
                                                               v->shape));
}

/* ---- the node/edge view, shared by the level-3 JSON and the DOT ---- */

static void count_step(void *ud, const npuE_step *step, int depth, const npuE_step *parent,
                       int b) {
  (void)step, (void)depth, (void)parent, (void)b;
  ((dumper *)ud)->n_all++;
}

static void list_step(void *ud, const npuE_step *step, int depth, const npuE_step *parent,
                      int b) {
  (void)parent, (void)b;
  dumper *d = ud;
  d->all[depth ? d->n_all++ : (int)(step - d->p->steps)] = step;
}

/* Which value producers are steps (nested ones included), which values the run reads, which graph nodes stand for
   values that exist before the run (feeds, constants, folded values). */
static npu_status index_plan(dumper *d) {
  const npuE_plan *p = d->p;
  size_t nv = (size_t)(p->n_values ? p->n_values : 1);
  d->producer = npuC_alloc(d->ctx, nv * sizeof *d->producer);
  d->used = npuC_calloc(d->ctx, nv, 1);
  d->head = npuC_alloc(d->ctx, (size_t)(d->g->n_nodes ? d->g->n_nodes : 1) * sizeof *d->head);
  d->next = npuC_alloc(d->ctx, nv * sizeof *d->next);
  if (!d->producer || !d->used || !d->head || !d->next) return NPU_ERR_NOMEM;
  d->n_all = 0;
  npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, count_step, d);
  d->all = npuC_alloc(d->ctx, (size_t)(d->n_all ? d->n_all : 1) * sizeof *d->all);
  if (!d->all) return NPU_ERR_NOMEM;
  d->n_all = p->n_steps;
  npuP_walk_steps(p->steps, p->n_steps, 0, NULL, 0, list_step, d);
  for (int n = 0; n < d->g->n_nodes; n++) d->head[n] = -1;
  for (int v = 0; v < p->n_values; v++) d->producer[v] = -1;
  for (int k = 0; k < d->n_all; k++) {
    const npuE_step *s = d->all[k];
    for (int i = 0; i < s->n_in; i++) d->used[s->in[i]] = 1;
    for (int i = 0; i < s->n_out; i++)
      if (!is_fed(p, s->out[i])) d->producer[s->out[i]] = k;
  }
  for (int i = 0; i < p->n_fetches; i++) d->used[p->fetches[i]] = 1;
  for (int v = p->n_values - 1; v >= 0; v--) { /* each list in value order */
    int n = p->values[v].node;
    if (!d->used[v] || d->producer[v] >= 0 || n < 0 || n >= d->g->n_nodes) continue;
    d->next[v] = d->head[n];
    d->head[n] = v;
  }
  return NPU_OK;
}

/* The id of value v's producer: "s<k>" or "n<node>". */
static void producer_id(const dumper *d, int v, char *buf, size_t n) {
  if (d->producer[v] >= 0) snprintf(buf, n, "s%d", d->producer[v]);
  else snprintf(buf, n, "n%d", d->p->values[v].node);
}

/* What a source node is: "feed" (its value is fed at run time), "constant" (a constant of
   the graph), "folded" (a node evaluated when compiling). */
static const char *source_kind(const dumper *d, int node) {
  for (int v = d->head[node]; v >= 0; v = d->next[v])
    if (is_fed(d->p, v)) return "feed";
  npuX_kind kind = npuX_op(d->g->nodes[node].op)->kind;
  if (kind == NPUX_KIND_PLACEHOLDER) return "feed"; /* a graph drawn without a run's feeds */
  return kind == NPUX_KIND_CONST ? "constant" : "folded";
}

/* ---- JSON ---- */

static void json_header(const dumper *d, int graph, int stage, const char *name, int level) {
  fprintf(d->f, "{\"graph\":%d,\"stage\":%d,\"stage_name\":", graph, stage);
  json_str(d->f, name);
  fprintf(d->f, ",\"dump_ge_graph\":%d,\"dump_graph_level\":%d", d->mode, level);
}

/* Element i of t, exactly: integers (bool 0/1) as integers, float64 with 17 digits, the
   narrower floats with 9 (enough for float32); NaN and infinities as strings. */
static void json_element(FILE *f, const npu_tensor *t, int64_t i) {
  if (t->dtype == NPU_DTYPE_I64) {
    fprintf(f, "%lld", (long long)((const int64_t *)t->data)[i]);
    return;
  }
  double x = npu_tensor_get(t, i);
  bool is_float = t->dtype == NPU_DTYPE_F32 || t->dtype == NPU_DTYPE_F16 ||
                  t->dtype == NPU_DTYPE_BF16 || t->dtype == NPU_DTYPE_F64;
  if (!is_float) fprintf(f, "%lld", (long long)x); /* int8, uint8, int32, bool: exact */
  else if (isnan(x)) fputs("\"NaN\"", f);
  else if (isinf(x)) fputs(x > 0 ? "\"Infinity\"" : "\"-Infinity\"", f);
  else fprintf(f, t->dtype == NPU_DTYPE_F64 ? "%.17g" : "%.9g", x);
}

/* DUMP_GE_GRAPH=1: "constants": the values bound at compile time that the run reads. */
static void json_constants(const dumper *d) {
  const npuE_plan *p = d->p;
  bool first = true;
  fputs(",\"constants\":[", d->f);
  for (int v = 0; v < p->n_values; v++) {
    const npu_tensor *t = p->slots[v];
    if (!t || !d->used[v] || d->producer[v] >= 0 || is_fed(p, v)) continue;
    const npuG_value *val = &p->values[v];
    fputs(first ? "{\"name\":" : ",{\"name\":", d->f);
    first = false;
    fputc('"', d->f);
    json_raw(d->f, node_name(d, val->node));
    fprintf(d->f, ":%d\",\"dtype\":", val->index);
    json_str(d->f, npu_dtype_name(t->dtype));
    fputs(",\"shape\":[", d->f);
    for (int i = 0; i < t->ndim; i++) fprintf(d->f, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    int64_t n = t->numel < DUMP_CONST_MAX ? t->numel : DUMP_CONST_MAX;
    fprintf(d->f, "],\"numel\":%lld,\"truncated\":%s,\"values\":[", (long long)t->numel,
            n < t->numel ? "true" : "false");
    for (int64_t i = 0; i < n; i++) {
      if (i) fputc(',', d->f);
      json_element(d->f, t, i);
    }
    fputs("]}", d->f);
  }
  fputc(']', d->f);
}

/* The region a step's node was built in (0: the top level; a fused step's is its own). */
static int region_of(const dumper *d, const npuE_step *s) {
  return s->node >= 0 && s->node < d->g->n_nodes ? d->g->nodes[s->node].region : 0;
}

/* DUMP_GE_GRAPH=3: nodes and edges, no dtypes, shapes or data. */
static void json_relations(const dumper *d) {
  const npuE_plan *p = d->p;
  char id[32];
  fputs(",\"nodes\":[", d->f);
  bool first = true;
  for (int n = 0; n < d->g->n_nodes; n++) {
    if (d->head[n] < 0) continue;
    fprintf(d->f, "%s{\"id\":\"n%d\",\"name\":", first ? "" : ",", n);
    first = false;
    json_str(d->f, node_name(d, n));
    fputs(",\"op\":", d->f);
    json_str(d->f, node_op(d, n));
    fputs(",\"kind\":", d->f);
    json_str(d->f, source_kind(d, n));
    fputc('}', d->f);
  }
  for (int k = 0; k < d->n_all; k++) {
    const npuE_step *s = d->all[k];
    fprintf(d->f, "%s{\"id\":\"s%d\",\"name\":", first ? "" : ",", k);
    first = false;
    json_str(d->f, node_name(d, s->node));
    fputs(",\"op\":", d->f);
    json_str(d->f, s->def->name);
    fputs(",\"kind\":\"step\"", d->f);
    int r = region_of(d, s);
    if (r) { /* inside a cond branch or loop: the region and the node running it */
      fprintf(d->f, ",\"region\":%d,\"owner\":", r);
      json_str(d->f, node_name(d, d->g->regions[r - 1].owner));
    }
    if (s->pass) {
      fputs(",\"pass\":", d->f);
      json_str(d->f, s->pass);
    }
    if (s->n_absorbed) {
      fputs(",\"absorbed\":[", d->f);
      for (int i = 0; i < s->n_absorbed; i++) {
        if (i) fputc(',', d->f);
        json_str(d->f, node_name(d, s->absorbed[i]));
      }
      fputc(']', d->f);
    }
    fputc('}', d->f);
  }
  fputs("],\"edges\":[", d->f);
  first = true;
  for (int k = 0; k < d->n_all; k++)
    for (int i = 0; i < d->all[k]->n_in; i++) {
      producer_id(d, d->all[k]->in[i], id, sizeof id);
      fprintf(d->f, "%s{\"from\":\"%s\",\"to\":\"s%d\"}", first ? "" : ",", id, k);
      first = false;
    }
  fputs("],\"fetches\":[", d->f);
  for (int i = 0; i < p->n_fetches; i++) {
    producer_id(d, p->fetches[i], id, sizeof id);
    fprintf(d->f, "%s\"%s\"", i ? "," : "", id);
  }
  fputc(']', d->f);
}

/* ---- DOT ---- */

/* Step k's node statement. */
static void dot_step(const dumper *d, int k, const char *indent) {
  const npuE_step *s = d->all[k];
  FILE *f = d->f;
  fprintf(f, "%ss%d [label=\"", indent, k);
  dot_text(f, s->def->name);
  fputs("\\n", f);
  dot_text(f, node_name(d, s->node));
  if (s->n_absorbed) {
    fputs("\\nabsorbed:", f);
    for (int i = 0; i < s->n_absorbed; i++) {
      fputs(i ? ", " : " ", f);
      dot_text(f, node_name(d, s->absorbed[i]));
    }
  }
  if (s->pass) {
    fputs("\\n(", f);
    dot_text(f, s->pass);
    fputc(')', f);
  }
  for (int i = 0; d->mode != 3 && i < s->n_out; i++) {
    fputs("\\n", f);
    shape_text(f, &d->p->values[s->out[i]]);
  }
  fputs(s->n_absorbed || s->pass ? "\", style=filled, fillcolor=lightblue];\n" : "\"];\n", f);
}

/* What region r is to the node running it: "then" / "else" (cond), "loop" (while). */
static const char *region_role(const npu_graph *g, int r) {
  const npuG_node *owner = &g->nodes[g->regions[r - 1].owner];
  if (npuX_op(owner->op)->kind != NPUX_KIND_COND) return "loop";
  int then_r, else_r;
  npuX_cond_regions(owner, &then_r, &else_r);
  return r == then_r ? "then" : "else";
}

/* Region r as a cluster labelled with the node running it: its steps, then the regions
   nested in it.  depth bounds the indentation (regions nest as deep as the graph says). */
static void dot_region(const dumper *d, int r, int depth) {
  const npu_graph *g = d->g;
  FILE *f = d->f;
  char indent[34];
  int w = depth < 15 ? 2 * depth + 2 : 32;
  memset(indent, ' ', (size_t)w);
  indent[w] = 0;
  int owner = g->regions[r - 1].owner;
  bool built = owner >= 0 && owner < g->n_nodes;
  fprintf(f, "%ssubgraph cluster_r%d {\n%s  label=\"", indent, r, indent);
  dot_text(f, built ? node_op(d, owner) : "?");
  fputs(" '", f);
  dot_text(f, built ? node_name(d, owner) : "?");
  fprintf(f, "': %s\";\n%s  style=rounded;\n", built ? region_role(g, r) : "?", indent);
  char inner[40];
  snprintf(inner, sizeof inner, "%s  ", indent);
  for (int k = 0; k < d->n_all; k++)
    if (region_of(d, d->all[k]) == r) dot_step(d, k, inner);
  for (int c = 1; c <= g->n_regions; c++)
    if (g->regions[c - 1].parent == r) dot_region(d, c, depth + 1);
  fprintf(f, "%s}\n", indent);
}

/* The DOT graph named `name`, its title `label`. */
static void dot_graph(const dumper *d, const char *name, const char *label) {
  const npuE_plan *p = d->p;
  FILE *f = d->f;
  bool typed = d->mode != 3;
  char id[32];
  fputs("digraph \"", f);
  dot_text(f, name);
  fputs("\" {\n  label=\"", f);
  dot_text(f, label);
  fputs("\";\n  labelloc=t;\n  node [shape=box, fontname=\"monospace\"];\n", f);
  for (int n = 0; n < d->g->n_nodes; n++) {
    if (d->head[n] < 0) continue;
    bool feed = strcmp(source_kind(d, n), "feed") == 0;
    fprintf(f, "  n%d [shape=%s, label=\"", n, feed ? "ellipse" : "note");
    dot_text(f, node_op(d, n));
    fputs("\\n", f);
    dot_text(f, node_name(d, n));
    for (int v = d->head[n]; typed && v >= 0; v = d->next[v]) {
      fprintf(f, "\\n:%d ", p->values[v].index);
      shape_text(f, &p->values[v]);
    }
    fputs("\"];\n", f);
  }
  for (int k = 0; k < d->n_all; k++)
    if (!region_of(d, d->all[k])) dot_step(d, k, "  ");
  /* cond branches and loop bodies: a cluster per region, nested as the regions are */
  bool any = false;
  for (int k = 0; k < d->n_all && !any; k++) any = region_of(d, d->all[k]) != 0;
  for (int r = 1; any && r <= d->g->n_regions; r++)
    if (d->g->regions[r - 1].parent == 0) dot_region(d, r, 0);
  for (int k = 0; k < d->n_all; k++)
    for (int i = 0; i < d->all[k]->n_in; i++) {
      int v = d->all[k]->in[i];
      producer_id(d, v, id, sizeof id);
      fprintf(f, "  %s -> s%d", id, k);
      if (typed) {
        fputs(" [label=\"", f);
        shape_text(f, &p->values[v]);
        fputs("\"]", f);
      }
      fputs(";\n", f);
    }
  for (int i = 0; i < p->n_fetches; i++) {
    producer_id(d, p->fetches[i], id, sizeof id);
    fprintf(f, "  %s [peripheries=2];\n", id);
  }
  fputs("}\n", f);
}

/* ---- files ---- */

static npu_status open_file(dumper *d, const char *path) {
  d->f = fopen(path, "w");
  if (!d->f)
    return npuC_error(d->ctx, NPU_ERR_IO, "DUMP_GE_GRAPH: cannot write '%s': %s", path,
                      strerror(errno));
  errno = 0; /* what close_file finds set came from writing this file */
  return NPU_OK;
}

static npu_status close_file(dumper *d, const char *path) {
  bool bad = ferror(d->f) != 0;
  int err = errno; /* (may be 0 or stale: errno is not kept per stream) */
  if (fclose(d->f) != 0 && !bad) {
    bad = true;
    err = errno;
  }
  d->f = NULL;
  if (bad)
    return npuC_error(d->ctx, NPU_ERR_IO, "DUMP_GE_GRAPH: cannot write '%s': %s", path,
                      strerror(err ? err : EIO));
  return NPU_OK;
}

static void free_index(dumper *d) {
  npuC_free(d->ctx, d->producer);
  npuC_free(d->ctx, d->used);
  npuC_free(d->ctx, d->head);
  npuC_free(d->ctx, d->next);
  npuC_free(d->ctx, d->all);
  d->producer = d->head = d->next = NULL;
  d->used = NULL;
  d->all = NULL;
}

/* "precision assignment" -> "PrecisionAssignment" */
static void camel(char *out, size_t n, const char *name) {
  size_t j = 0;
  bool up = true;
  for (const char *c = name; *c && j + 1 < n; c++) {
    if (*c == ' ' || *c == '_' || *c == '-') {
      up = true;
      continue;
    }
    out[j++] = up && *c >= 'a' && *c <= 'z' ? (char)(*c - 'a' + 'A') : *c;
    up = false;
  }
  out[j] = 0;
}

static npu_status write_stage(dumper *d, const npuP_config *cfg, int graph, int stage,
                              const char *name, int level) {
  const npu_options *o = cfg->options;
  const char *dir = dump_dir(o);
  char stage_name[64], path[4096];
  camel(stage_name, sizeof stage_name, name);
  npu_status s = index_plan(d); /* (the directory: npuP_graph_dump_begin) */
  char *text = NULL;
  if (!s && d->mode != 3) s = npuP_explain(d->ctx, d->g, cfg, d->p, &text);
  for (int dot = 0; dot < 2 && !s; dot++) {
    int len = snprintf(path, sizeof path, "%s/ge_proto_%08d_%02d_%s.%s", dir, graph, stage,
                       stage_name, dot ? "dot" : "json");
    if (len >= (int)sizeof path) {
      s = npuC_error(d->ctx, NPU_ERR_IO, "DUMP_GRAPH_PATH: path '%s' is too long", dir);
      break;
    }
    if ((s = open_file(d, path))) break;
    if (dot) {
      char id[96], label[128];
      snprintf(id, sizeof id, "ge_proto_%08d_%02d_%s", graph, stage, stage_name);
      snprintf(label, sizeof label, "graph %d, stage %d: %s", graph, stage, stage_name);
      dot_graph(d, id, label);
    } else {
      json_header(d, graph, stage, stage_name, level);
      if (d->mode == 3) {
        json_relations(d);
      } else {
        fputs(",\"plan\":", d->f);
        fputs(text, d->f);
        if (d->mode == 1) json_constants(d);
      }
      fputs("}\n", d->f);
    }
    s = close_file(d, path);
  }
  npuC_free(d->ctx, text);
  free_index(d);
  return s;
}

/* Stage 0: a plan-shaped view of the graph as given, so that the same describer serves: one
   step per needed node that is neither a constant nor a placeholder, constants bound.  d->p
   gives the feeds, fetches and values; fn(d, ud) describes the view (d->p while it runs). */
static npu_status with_given_view(dumper *d, const uint8_t *need,
                                  npu_status (*fn)(dumper *d, void *ud), void *ud) {
  const npu_graph *g = d->g;
  const npuE_plan *p = d->p;
  int n_steps = 0, n_ints = 0;
  for (int id = 0; id < g->n_nodes; id++) {
    npuX_kind kind = npuX_op(g->nodes[id].op)->kind;
    if (!need[id] || kind == NPUX_KIND_CONST || kind == NPUX_KIND_PLACEHOLDER) continue;
    n_steps++;
    n_ints += g->nodes[id].n_inputs + g->nodes[id].n_outputs;
  }
  npuE_plan view = {.n_feeds = p->n_feeds, .feeds = p->feeds, .n_fetches = p->n_fetches,
                    .fetches = p->fetches, .n_targets = p->n_targets, .targets = p->targets,
                    .n_values = p->n_values, .values = p->values, .reference = p->reference,
                    .fold = p->fold, .iterations = 1, .n_steps = n_steps,
                    .n_threads = p->n_threads};
  view.slots = npuC_calloc(d->ctx, (size_t)(p->n_values ? p->n_values : 1), sizeof *view.slots);
  view.steps = npuC_calloc(d->ctx, (size_t)(n_steps ? n_steps : 1), sizeof *view.steps);
  int *ints = npuC_alloc(d->ctx, (size_t)(n_ints ? n_ints : 1) * sizeof *ints);
  npu_status s = view.slots && view.steps && ints ? NPU_OK : NPU_ERR_NOMEM;
  int k = 0, *next = ints;
  for (int id = 0; !s && id < g->n_nodes; id++) {
    const npuG_node *node = &g->nodes[id];
    const npu_op_def *def = npuX_op(node->op);
    if (!need[id]) continue;
    if (def->kind == NPUX_KIND_CONST) {
      if (!is_fed(p, node->first_output))
        view.slots[node->first_output] = npuG_attr_find(node, "value")->u.tensor;
      continue;
    }
    if (def->kind == NPUX_KIND_PLACEHOLDER) continue;
    npuE_step *st = &view.steps[k++];
    *st = (npuE_step){.node = id, .def = def, .params = node->params.bytes,
                      .n_in = node->n_inputs, .n_out = node->n_outputs, .in = next,
                      .round_in = -1, .round_out = -1};
    if (node->n_inputs) memcpy(next, node->inputs, (size_t)node->n_inputs * sizeof *next);
    st->out = next + node->n_inputs;
    for (int i = 0; i < node->n_outputs; i++) st->out[i] = node->first_output + i;
    next += node->n_inputs + node->n_outputs;
  }
  if (!s) {
    d->p = &view;
    s = fn(d, ud);
    d->p = p;
  }
  npuC_free(d->ctx, view.slots);
  npuC_free(d->ctx, view.steps);
  npuC_free(d->ctx, ints);
  return s;
}

typedef struct stage_args {
  const npuP_config *cfg;
  int graph, level;
  const char *name;
} stage_args;

static npu_status write_given(dumper *d, void *ud) {
  const stage_args *a = ud;
  return write_stage(d, a->cfg, a->graph, 0, a->name, a->level);
}

/* ---- DOT text without files (npu_graph_to_dot, npu_session_explain_dot) ---- */

typedef struct dot_args {
  const char *name, *label;
  char **out;
} dot_args;

/* d's plan as DOT text in memory, copied to *out (owned by the caller, npu_free). */
static npu_status dot_to_memory(dumper *d, void *ud) {
  const dot_args *a = ud;
  char *buf = NULL;
  size_t len = 0;
  npu_status s = index_plan(d);
  if (!s && !(d->f = open_memstream(&buf, &len)))
    s = npuC_error(d->ctx, NPU_ERR_NOMEM, "DOT: out of memory");
  if (!s) {
    dot_graph(d, a->name, a->label);
    bool bad = ferror(d->f) != 0;
    if (fclose(d->f) != 0) bad = true;
    d->f = NULL;
    if (bad || !buf) s = npuC_error(d->ctx, NPU_ERR_NOMEM, "DOT: out of memory");
    else if (!(*a->out = npuC_alloc(d->ctx, len + 1))) s = NPU_ERR_NOMEM;
    else memcpy(*a->out, buf, len + 1);
  }
  free(buf); /* open_memstream's, from malloc */
  free_index(d);
  return s;
}

npu_status npuP_plan_dot(npu_context *ctx, const npu_graph *g, const npuE_plan *p, char **out) {
  *out = NULL;
  char name[32], label[96];
  snprintf(name, sizeof name, "plan_%d", p->id);
  snprintf(label, sizeof label, "plan %d: %d steps", p->id, p->n_all_steps);
  dumper d = {.ctx = ctx, .g = g, .p = p, .mode = 2};
  return dot_to_memory(&d, &(dot_args){name, label, out});
}

npu_status npuP_graph_dot(npu_context *ctx, const npu_graph *g, char **out) {
  *out = NULL;
  uint8_t *need = npuC_alloc(ctx, (size_t)(g->n_nodes ? g->n_nodes : 1));
  if (!need) return NPU_ERR_NOMEM;
  memset(need, 1, (size_t)g->n_nodes);
  char label[64];
  snprintf(label, sizeof label, "graph as given: %d nodes", g->n_nodes);
  npuE_plan base = {.n_values = g->n_values, .values = g->values};
  dumper d = {.ctx = ctx, .g = g, .p = &base, .mode = 2};
  npu_status s = with_given_view(&d, need, dot_to_memory, &(dot_args){"graph", label, out});
  npuC_free(ctx, need);
  return s;
}

npu_status npuP_graph_dump(npuP_build *b, int graph, int stage, const char *name, bool last) {
  const npu_options *o = b->cfg->options;
  int level = npuO_env_is_set(o, NPUO_ENV_DUMP_GRAPH_LEVEL)
                  ? (int)npuO_env_int(o, NPUO_ENV_DUMP_GRAPH_LEVEL)
                  : 2;
  if ((level == 3 && !last) || (level == 4 && stage != 0)) return NPU_OK;
  dumper d = {.ctx = b->ctx, .g = b->graph, .p = b->plan,
              .mode = (int)npuO_env_int(o, NPUO_ENV_DUMP_GE_GRAPH)};
  if (stage == 0)
    return with_given_view(&d, b->need, write_given, &(stage_args){b->cfg, graph, level, name});
  return write_stage(&d, b->cfg, graph, stage, name, level);
}
