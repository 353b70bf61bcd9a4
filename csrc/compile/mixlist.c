/*
 * mixlist.c — the two files that adjust the precision modes, read once per session config
 * (compile/config.c) so that a bad file fails npu_session_new, naming the file and the line.
 *
 * modify_mixlist (000, 002 §5.1): a JSON object with at most the sections "black-list" and
 * "white-list", each with the arrays "to-add" and "to-remove" of op types (TensorFlow names such
 * as "MatMul", or our snake_case op names).  Starting from the built-in lists (each op file's
 * .prec): first the removals — "to-remove" moves an op that IS in that list to the gray list
 * (an op not in it is left alone) — then the additions — "to-add" puts the op in that list,
 * whichever list it was in.  So 002's cases come out as documented: (a) black to-add A: A is
 * black; (b) black to-add A with white to-remove A: A is black; (c) white to-remove A alone:
 * A is gray, not black.  An op added to both lists is an error.  The lists matter in the mixed
 * modes only (precision.c); in the others the file is still read and checked.
 *
 * customize_dtypes (000): one line per op,
 *     <node name>::InputDtype:<dtype>,<dtype>,...,OutputDtype:<dtype>,...
 *     OpType::<type>:InputDtype:<dtype>,...,OutputDtype:<dtype>,...
 * blank lines and lines starting with '#' ignored.  Either part may be absent; the dtypes give
 * the first inputs / outputs in order, the others keep what the mode gives them.  A node's own
 * line wins over its type's line.  Checked here: the syntax, the dtype names (npu_dtype_from_name),
 * the op type, a type given more dtypes than its op has inputs or outputs, a name or a type
 * given twice.  Checked when a plan is compiled (precision.c), since the graph may still grow:
 * a node given more dtypes than it has operands, and dtypes the node cannot take.  A name
 * matching no node of a plan is ignored, as the reference ignores names that fusion renamed.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "compile/precision.h"
#include "compile/compile.h"
#include "options/options_int.h"

npuX_prec npuP_mix_list(const struct npuP_mix_config *mix, int op) {
  return mix && mix->modified ? (npuX_prec)mix->list[op] : npuX_op(op)->prec;
}

const npuP_dtype_rule *npuP_mix_rule(const struct npuP_mix_config *mix, const char *node,
                                     int op) {
  if (!mix || !mix->n_rules) return NULL;
  for (int i = 0; i < mix->n_rules; i++)
    if (mix->rules[i].name && strcmp(mix->rules[i].name, node) == 0) return &mix->rules[i];
  return mix->type_rule[op] >= 0 ? &mix->rules[mix->type_rule[op]] : NULL;
}

/* ---- shared helpers ------------------------------------------------------------------- */

static bool op_matches(int op, const char *name) {
  const npu_op_def *d = npuX_op(op);
  return strcmp(d->name, name) == 0 || (d->tf_type && strcmp(d->tf_type, name) == 0);
}

/* The op type nearest to an unknown name, or NULL when none is close. */
static const char *nearest_op(const char *name) {
  npuC_nearest near;
  npuC_nearest_init(&near, name);
  for (int i = 0; i < NPUX_OP_COUNT; i++) {
    npuC_nearest_try(&near, npuX_op(i)->tf_type);
    npuC_nearest_try(&near, npuX_op(i)->name);
  }
  return npuC_nearest_result(&near);
}

static npu_status unknown_op(npu_context *ctx, const char *option, const char *path, int line,
                             const char *name) {
  const char *best = nearest_op(name);
  return npuC_error(ctx, NPU_ERR_NOT_FOUND, "%s '%s' line %d: unknown op type '%s'%s%s%s", option,
                    path, line, name, best ? " (did you mean '" : "", best ? best : "",
                    best ? "'?)" : "");
}

/* ---- modify_mixlist --------------------------------------------------------------------- */

enum { ADD_BLACK = 1, ADD_WHITE = 2, RM_BLACK = 4, RM_WHITE = 8 };

typedef struct mixfile {
  npu_context *ctx;
  const char *path;
  const char *text;
  uint8_t moves[NPUX_OP_COUNT]; /* ADD_* | RM_* by op id */
} mixfile;

/* 1-based line of the first occurrence of "s" (quoted) in the text: cJSON keeps no positions,
   and a key or an op name is what a message points at. */
static int line_of(const mixfile *m, const char *s) {
  size_t n = strlen(s);
  for (const char *p = m->text; (p = strchr(p, '"')) != NULL; p++)
    if (strncmp(p + 1, s, n) == 0 && p[n + 1] == '"') {
      int line = 1;
      for (const char *q = m->text; q < p; q++) line += *q == '\n';
      return line;
    }
  return 1;
}

static npu_status mix_error(const mixfile *m, npu_status st, const char *at, const char *what) {
  return npuC_error(m->ctx, st, "modify_mixlist '%s' line %d: %s", m->path, line_of(m, at), what);
}

/* One "to-add" / "to-remove" array: marks its ops with flag. */
static npu_status read_moves(mixfile *m, const cJSON *arr, const char *section, uint8_t flag) {
  char what[160];
  if (!cJSON_IsArray(arr)) {
    snprintf(what, sizeof what, "\"%s\".\"%s\" must be an array of op types", section, arr->string);
    return mix_error(m, NPU_ERR_FORMAT, arr->string, what);
  }
  const cJSON *item;
  cJSON_ArrayForEach(item, arr) {
    if (!cJSON_IsString(item)) {
      snprintf(what, sizeof what, "\"%s\".\"%s\" must hold op type names (strings)", section,
               arr->string);
      return mix_error(m, NPU_ERR_FORMAT, arr->string, what);
    }
    const char *name = item->valuestring;
    int found = 0;
    for (int op = 0; op < NPUX_OP_COUNT; op++)
      if (op_matches(op, name)) {
        m->moves[op] |= flag;
        found++;
        if ((m->moves[op] & (ADD_BLACK | ADD_WHITE)) == (ADD_BLACK | ADD_WHITE)) {
          snprintf(what, sizeof what, "'%s' is added to both the black-list and the white-list",
                   name);
          return mix_error(m, NPU_ERR_CONFLICT, name, what);
        }
      }
    if (!found) return unknown_op(m->ctx, "modify_mixlist", m->path, line_of(m, name), name);
  }
  return NPU_OK;
}

static npu_status read_mixlist(npu_context *ctx, const char *path, struct npuP_mix_config *c) {
  static const struct {
    const char *name;
    uint8_t add, remove;
  } sections[] = {{"black-list", ADD_BLACK, RM_BLACK}, {"white-list", ADD_WHITE, RM_WHITE}};
  char *text;
  npu_status s = npuC_read_file(ctx, path, "modify_mixlist", &text, NULL);
  if (s) return s;
  mixfile m = {.ctx = ctx, .path = path, .text = text};
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
  if (!root) {
    int line = 1;
    for (const char *q = text; end && q < end && *q; q++) line += *q == '\n';
    s = npuC_error(ctx, NPU_ERR_FORMAT, "modify_mixlist '%s' line %d: malformed JSON", path, line);
  } else if (!cJSON_IsObject(root)) {
    s = npuC_error(ctx, NPU_ERR_FORMAT,
                   "modify_mixlist '%s' line 1: expected a JSON object with \"black-list\" and/or "
                   "\"white-list\"", path);
  }
  const cJSON *sec;
  if (!s) cJSON_ArrayForEach(sec, root) {
    size_t k = 0;
    while (k < npu_countof(sections) && strcmp(sec->string, sections[k].name) != 0) k++;
    char what[200];
    if (k == npu_countof(sections)) {
      snprintf(what, sizeof what, "unknown section \"%s\" (the sections are \"black-list\" and "
               "\"white-list\")", sec->string);
      s = mix_error(&m, NPU_ERR_FORMAT, sec->string, what);
      break;
    }
    if (!cJSON_IsObject(sec)) {
      snprintf(what, sizeof what, "\"%s\" must be an object with \"to-add\" and/or \"to-remove\"",
               sec->string);
      s = mix_error(&m, NPU_ERR_FORMAT, sec->string, what);
      break;
    }
    const cJSON *arr;
    cJSON_ArrayForEach(arr, sec) {
      bool add = strcmp(arr->string, "to-add") == 0;
      if (!add && strcmp(arr->string, "to-remove") != 0) {
        snprintf(what, sizeof what, "unknown key \"%s\" in \"%s\" (the keys are \"to-add\" and "
                 "\"to-remove\")", arr->string, sec->string);
        s = mix_error(&m, NPU_ERR_FORMAT, arr->string, what);
        break;
      }
      s = read_moves(&m, arr, sec->string, add ? sections[k].add : sections[k].remove);
      if (s) break;
    }
    if (s) break;
  }
  cJSON_Delete(root);
  npuC_free(ctx, text);
  if (s) return s;
  /* removals first, then additions: 002 §5.1 a, b, c */
  c->modified = true;
  for (int op = 0; op < NPUX_OP_COUNT; op++) {
    uint8_t mv = m.moves[op], l = c->list[op];
    if ((mv & RM_BLACK) && l == NPUX_PREC_BLOCK) l = NPUX_PREC_GRAY;
    if ((mv & RM_WHITE) && l == NPUX_PREC_TRUST) l = NPUX_PREC_GRAY;
    if (mv & ADD_BLACK) l = NPUX_PREC_BLOCK;
    if (mv & ADD_WHITE) l = NPUX_PREC_TRUST;
    c->list[op] = l;
  }
  return NPU_OK;
}

/* ---- customize_dtypes ------------------------------------------------------------------- */

typedef struct cfgline {
  npu_context *ctx;
  const char *path;
  int line;
  int cap_rules;    /* c->rules' room (grown by doubling) */
  int *slots;       /* node name -> rule index + 1, open addressing, at most half full: a */
  uint32_t n_slots; /* file of many lines reads in linear time */
} cfgline;

/* The rule of node `name` so far, or -1. */
static int find_rule(const cfgline *l, const struct npuP_mix_config *c, const char *name) {
  if (!l->n_slots) return -1;
  for (uint32_t i = npuC_hash_str(name) & (l->n_slots - 1);; i = (i + 1) & (l->n_slots - 1)) {
    int k = l->slots[i] - 1;
    if (k < 0) return -1;
    if (strcmp(c->rules[k].name, name) == 0) return k;
  }
}

static void index_rule(cfgline *l, const struct npuP_mix_config *c, int k) {
  uint32_t i = npuC_hash_str(c->rules[k].name) & (l->n_slots - 1);
  while (l->slots[i]) i = (i + 1) & (l->n_slots - 1);
  l->slots[i] = k + 1;
}

/* Room for one more rule in c->rules and, for a name rule, in the index. */
static npu_status reserve_rule(cfgline *l, struct npuP_mix_config *c, bool named) {
  if (c->n_rules == l->cap_rules) {
    int cap = l->cap_rules ? 2 * l->cap_rules : 8;
    npuP_dtype_rule *rules = npuC_realloc(l->ctx, c->rules, (size_t)cap * sizeof *rules);
    if (!rules) return NPU_ERR_NOMEM;
    c->rules = rules, l->cap_rules = cap;
  }
  if (named && 2 * ((uint64_t)c->n_rules + 1) > l->n_slots) {
    uint32_t n = l->n_slots ? 2 * l->n_slots : 16;
    int *slots = npuC_calloc(l->ctx, n, sizeof *slots);
    if (!slots) return NPU_ERR_NOMEM;
    npuC_free(l->ctx, l->slots);
    l->slots = slots, l->n_slots = n;
    for (int k = 0; k < c->n_rules; k++)
      if (c->rules[k].name) index_rule(l, c, k);
  }
  return NPU_OK;
}

static npu_status line_error(const cfgline *l, npu_status st, const char *fmt, const char *arg) {
  char what[400];
  snprintf(what, sizeof what, fmt, arg);
  return npuC_error(l->ctx, st, "customize_dtypes '%s' line %d: %s", l->path, l->line, what);
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
  *e = 0;
  return s;
}

/* "InputDtype:a,b,...,OutputDtype:c,..." (either part absent) into r->dtypes. */
static npu_status parse_dtypes(const cfgline *l, char *spec, npuP_dtype_rule *r) {
  static const char *const part_names[2] = {"InputDtype:", "OutputDtype:"};
  npu_dtype parts[2][NPUX_MAX_OUTPUTS * 4];
  int n[2] = {0, 0}, part = -1;
  bool seen[2] = {false, false};
  for (char *tok = spec; tok;) {
    char *comma = strchr(tok, ',');
    if (comma) *comma = 0;
    char *t = trim(tok);
    for (int k = 0; k < 2; k++)
      if (strncmp(t, part_names[k], strlen(part_names[k])) == 0) {
        if (seen[k]) return line_error(l, NPU_ERR_FORMAT, "%s given twice", part_names[k]);
        seen[k] = true;
        part = k;
        t = trim(t + strlen(part_names[k]));
      }
    if (part < 0)
      return line_error(l, NPU_ERR_FORMAT,
                        "expected InputDtype:... and/or OutputDtype:... after the name, got '%s'",
                        t);
    if (!*t)
      return line_error(l, NPU_ERR_FORMAT, "an empty dtype in the %s list", part_names[part]);
    int dt = npu_dtype_from_name(t);
    if (dt < 0)
      return line_error(l, NPU_ERR_FORMAT,
                        "unknown dtype '%s' (float16, float32, bfloat16 or an integer dtype)", t);
    if (n[part] == (int)npu_countof(parts[part]))
      return line_error(l, NPU_ERR_FORMAT, "too many dtypes in the %s list", part_names[part]);
    parts[part][n[part]++] = (npu_dtype)dt;
    tok = comma ? comma + 1 : NULL;
  }
  r->n_in = n[0];
  r->n_out = n[1];
  r->dtypes = npuC_alloc(l->ctx, (size_t)(n[0] + n[1] ? n[0] + n[1] : 1) * sizeof *r->dtypes);
  if (!r->dtypes) return NPU_ERR_NOMEM;
  memcpy(r->dtypes, parts[0], (size_t)n[0] * sizeof *r->dtypes);
  memcpy(r->dtypes + n[0], parts[1], (size_t)n[1] * sizeof *r->dtypes);
  return NPU_OK;
}

/* An OpType:: line's checks against the op itself: it computes, and has that many operands. */
static npu_status check_type_rule(const cfgline *l, const npuP_dtype_rule *r, const char *type) {
  const npu_op_def *d = npuX_op(r->op);
  char what[200];
  if (d->kind != NPUX_KIND_KERNEL)
    return line_error(l, NPU_ERR_FORMAT, "op type '%s' computes nothing: dtypes apply to "
                      "computing ops", type);
  if (d->max_inputs >= 0 && r->n_in > d->max_inputs) {
    snprintf(what, sizeof what, "%d input dtypes, but %s takes at most %d input(s)", r->n_in,
             type, d->max_inputs);
    return line_error(l, NPU_ERR_FORMAT, "%s", what);
  }
  if (d->n_outputs >= 0 && r->n_out > d->n_outputs) {
    snprintf(what, sizeof what, "%d output dtypes, but %s has %d output(s)", r->n_out, type,
             d->n_outputs);
    return line_error(l, NPU_ERR_FORMAT, "%s", what);
  }
  return NPU_OK;
}

static npu_status read_line(cfgline *l, char *s, struct npuP_mix_config *c) {
  char *sep = strstr(s, "::");
  if (!sep)
    return line_error(l, NPU_ERR_FORMAT, "expected 'name::InputDtype:...' or "
                      "'OpType::type:InputDtype:...', got '%s'", s);
  *sep = 0;
  char *name = trim(s), *spec = sep + 2, *type = NULL;
  if (strcmp(name, "OpType") == 0) {
    char *colon = strchr(spec, ':');
    if (!colon)
      return line_error(l, NPU_ERR_FORMAT, "expected 'OpType::type:...', got 'OpType::%s'", spec);
    *colon = 0;
    type = trim(spec);
    spec = colon + 1;
  }
  if (!*name || (type && !*type)) return line_error(l, NPU_ERR_FORMAT, "%s", "an empty name");
  npuP_dtype_rule r = {.op = -1, .line = l->line};
  if (type) {
    for (int op = 0; op < NPUX_OP_COUNT && r.op < 0; op++)
      if (op_matches(op, type)) r.op = op;
    if (r.op < 0) return unknown_op(l->ctx, "customize_dtypes", l->path, l->line, type);
    if (c->type_rule[r.op] >= 0) {
      char what[160];
      snprintf(what, sizeof what, "op type '%s' already given on line %d", type,
               c->rules[c->type_rule[r.op]].line);
      return line_error(l, NPU_ERR_FORMAT, "%s", what);
    }
  } else {
    int i = find_rule(l, c, name);
    if (i >= 0) {
      char what[320];
      snprintf(what, sizeof what, "node '%.200s' already given on line %d", name,
               c->rules[i].line);
      return line_error(l, NPU_ERR_FORMAT, "%s", what);
    }
  }
  npu_status st = parse_dtypes(l, spec, &r);
  if (!st && type) st = check_type_rule(l, &r, type);
  if (!st && !type && !(r.name = npuC_strdup(l->ctx, name))) st = NPU_ERR_NOMEM;
  if (!st) st = reserve_rule(l, c, !type);
  if (st) {
    npuC_free(l->ctx, r.name);
    npuC_free(l->ctx, r.dtypes);
    return st;
  }
  if (type) c->type_rule[r.op] = c->n_rules;
  c->rules[c->n_rules++] = r;
  if (!type) index_rule(l, c, c->n_rules - 1);
  return NPU_OK;
}

static npu_status read_dtypes(npu_context *ctx, const char *path, struct npuP_mix_config *c) {
  char *text;
  npu_status s = npuC_read_file(ctx, path, "customize_dtypes", &text, NULL);
  if (s) return s;
  if (!(c->dtypes_path = npuC_strdup(ctx, path))) s = NPU_ERR_NOMEM;
  cfgline l = {.ctx = ctx, .path = path};
  for (char *p = text; !s && p;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    l.line++;
    char *t = trim(p);
    if (*t && *t != '#') s = read_line(&l, t, c);
    p = nl ? nl + 1 : NULL;
  }
  npuC_free(ctx, l.slots);
  npuC_free(ctx, text);
  return s;
}

/* ---- the config ------------------------------------------------------------------------ */

void npuP_mix_config_free(npu_context *ctx, struct npuP_mix_config *c) {
  if (!c) return;
  for (int i = 0; i < c->n_rules; i++) {
    npuC_free(ctx, c->rules[i].name);
    npuC_free(ctx, c->rules[i].dtypes);
  }
  npuC_free(ctx, c->rules);
  npuC_free(ctx, c->dtypes_path);
  npuC_free(ctx, c);
}

npu_status npuP_mix_config_new(npu_context *ctx, const npu_options *o,
                               struct npuP_mix_config **out) {
  *out = NULL;
  const char *mixlist = npuO_string(o, NPUO_modify_mixlist);
  const char *dtypes = npuO_string(o, NPUO_customize_dtypes);
  if (!*mixlist && !*dtypes) return NPU_OK;
  struct npuP_mix_config *c = npuC_calloc(ctx, 1, sizeof *c);
  if (!c) return NPU_ERR_NOMEM;
  for (int op = 0; op < NPUX_OP_COUNT; op++) {
    c->list[op] = (uint8_t)npuX_op(op)->prec;
    c->type_rule[op] = -1;
  }
  npu_status s = NPU_OK;
  if (*mixlist) s = read_mixlist(ctx, mixlist, c);
  if (!s && *dtypes) s = read_dtypes(ctx, dtypes, c);
  if (s) {
    npuP_mix_config_free(ctx, c);
    return s;
  }
  *out = c;
  return NPU_OK;
}
