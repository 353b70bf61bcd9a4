/*
 * options.c — the option table, typed get/set with validation, the environment overlay and the
 * cross-option rules (the options section of npu.h, and options_int.h).
 *
 * Invariants:
 *  - options.def is the only description of an option; the tables here are static const and
 *    built from it.  The rules are a table too (rules[] below), not a ladder of ifs.
 *  - An npu_options holds, per option, a source (default / user / environment) and a value.
 *    Strings it holds are its own copies, allocated on its context.  Defaults are parsed once,
 *    at creation, into dflt[mode] (mode 1 = training, 0 = online inference): reading an option
 *    never parses text or looks up a name.
 *  - A failing call changes nothing: values are validated and copied before anything is freed.
 *  - Environment-only settings (ASCEND_GLOBAL_LOG_LEVEL, ASCEND_WORK_PATH, ...) are not options
 *    (no setter may set them); they live in env_set/env_int/env_text beside the options, so a
 *    session reads them from the same object it was configured with.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "options/options_int.h"

/* ------------------------------------------------------------------ the tables */

typedef enum npuO_check {
  CK_NONE, CK_ENUM, CK_RANGE, CK_PATH, CK_NAMES, CK_WORDS, CK_INPUT_SHAPE, CK_DYNAMIC_DIMS,
  CK_DUMP_STEP, CK_IN_OUT_PAIR, CK_ENGINES, CK_PROFILING, CK_AICORE_NUM, CK_ACCEL,
  CK_SHAPE_RANGE, CK_INT_LIST, CK_DIGITS, CK_ENUM_LIST, CK_IDENT
} npuO_check;

#define T_I NPU_OPTION_INT
#define T_S NPU_OPTION_STRING
#define T_B NPU_OPTION_BOOL
#define T_F NPU_OPTION_FLOAT
#define SCEN_TRAIN "Training"
#define SCEN_INFER "Online inference"
#define SCEN_BOTH "Training/Online inference"

typedef struct option_spec {
  npu_option_info info;  /* public view; default_value is display text */
  const char *dflt;      /* machine default (graph_run_mode = 1) */
  const char *dflt_infer; /* machine default when graph_run_mode = 0; "" = same */
  npuO_check check;
} option_spec;

/* default_value shows both defaults when they differ by mode. */
#define DEFAULT_TEXT(d, di) \
  (sizeof(di) > 1 ? d " (graph_run_mode=1); " di " (graph_run_mode=0)" : d)

static const option_spec specs[] = {
#define NPU_OPTION(name, type, d, di, check, allowed, example, scen, section, depr, effect) \
  {{#name, T_##type, DEFAULT_TEXT(d, di), allowed, SCEN_##scen, section, effect, depr, example}, \
   d, di, CK_##check},
#include "options/options.def"
};
_Static_assert(npu_countof(specs) == NPUO_COUNT, "one spec per option of options.def");
_Static_assert(NPUO_COUNT == 86, "options.def: 80 options of 000 + 6 from 002-004");

#define NPUO_NONE (-1)

typedef struct env_spec {
  npu_option_env_info info;
  int option; /* npu_option_id or NPUO_NONE */
  npuO_check check;
} env_spec;

static const env_spec envs[] = {
#define NPU_ENV(var, option, type, check, allowed, effect) \
  {{#var, NPUO_##option == NPUO_NONE ? NULL : #option, T_##type, allowed, effect}, \
   NPUO_##option, CK_##check},
#include "options/options.def"
};
_Static_assert(npu_countof(envs) == NPUO_ENV_COUNT, "one spec per variable of options.def");

/* ------------------------------------------------------------------ the object */

typedef union npuO_value {
  int64_t i; /* INT and BOOL (0/1) */
  double f;
  char *s;        /* owned copy (values set) */
  const char *cs; /* static text (defaults) */
} npuO_value;

struct npu_options {
  npu_context *ctx;
  unsigned char source[NPUO_COUNT]; /* npuO_source */
  npuO_value value[NPUO_COUNT];
  npuO_value dflt[2][NPUO_COUNT];   /* [0] online inference, [1] training */
  unsigned char env_set[NPUO_ENV_COUNT];
  int64_t env_int[NPUO_ENV_COUNT];
  char *env_text[NPUO_ENV_COUNT]; /* owned raw value of every variable read */
};

static const char *type_word(npu_option_type t) {
  static const char *const words[] = {"an int (.i)", "a string (.s)", "a bool (.b)",
                                      "a float (.f)"};
  return (unsigned)t < 4 ? words[t] : "?";
}

/* ------------------------------------------------------------------ small parsers */

static int parse_int(const char *s, int64_t *v) {
  char *end;
  long long x;
  if (!s || !*s || isspace((unsigned char)*s)) return -1;
  errno = 0;
  x = strtoll(s, &end, 10);
  if (errno || *end) return -1;
  *v = (int64_t)x;
  return 0;
}

static int parse_double(const char *s, double *v) {
  char *end;
  if (!s || !*s || isspace((unsigned char)*s)) return -1;
  errno = 0;
  *v = strtod(s, &end);
  return (errno || *end) ? -1 : 0;
}

/* Span helpers: [p, e) with surrounding blanks trimmed. */
static void trim(const char **p, const char **e) {
  while (*p < *e && isspace((unsigned char)**p)) (*p)++;
  while (*e > *p && isspace((unsigned char)(*e)[-1])) (*e)--;
}

static int span_int(const char *p, const char *e, int64_t *v) {
  char buf[32];
  trim(&p, &e);
  if (e - p <= 0 || e - p >= (long)sizeof buf) return -1;
  memcpy(buf, p, (size_t)(e - p));
  buf[e - p] = 0;
  return parse_int(buf, v);
}

static int span_double(const char *p, const char *e, double *v) {
  char buf[48];
  trim(&p, &e);
  if (e - p <= 0 || e - p >= (long)sizeof buf) return -1;
  memcpy(buf, p, (size_t)(e - p));
  buf[e - p] = 0;
  return parse_double(buf, v);
}

/* 1 when [p, e) is one of the '|'-separated words of list. */
static int list_has(const char *list, const char *p, const char *e) {
  size_t n = (size_t)(e - p);
  while (list && *list) {
    const char *bar = strchr(list, '|');
    size_t len = bar ? (size_t)(bar - list) : strlen(list);
    if (len == n && memcmp(list, p, n) == 0) return 1;
    if (!bar) break;
    list = bar + 1;
  }
  return 0;
}

static int str_in_list(const char *list, const char *s) {
  return list_has(list, s, s + strlen(s));
}

/* Splits [p, e) at each `sep`; calls fn on every piece; stops at the first nonzero. */
typedef int (*piece_fn)(const char *p, const char *e, void *ud, char *why, size_t n);
static int for_pieces(const char *p, const char *e, char sep, piece_fn fn, void *ud, char *why,
                      size_t n) {
  for (;;) {
    const char *q = memchr(p, sep, (size_t)(e - p));
    const char *end = q ? q : e;
    int r = fn(p, end, ud, why, n);
    if (r) return r;
    if (!q) return 0;
    p = q + 1;
  }
}

/* The same, for other layers (options_int.h): they parse values these checks accepted. */
int npuO_for_pieces(const char *p, const char *e, char sep, npuO_piece_fn fn, void *ud,
                    char *why, size_t n) {
  return for_pieces(p, e, sep, fn, ud, why, n);
}
int npuO_span_int(const char *p, const char *e, int64_t *v) { return span_int(p, e, v); }

static int no_control(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
  return 1;
}

/* ------------------------------------------------------------------ value checks */

/* Each check returns 0, or -1 with a reason in why[n]. */

static int check_range(const char *allowed, double v, char *why, size_t n) {
  /* "[lo, hi]", "(lo, hi]", "[lo, hi)" */
  const char *comma = strchr(allowed, ',');
  double lo, hi;
  size_t len = strlen(allowed);
  if (!comma || len < 5 || span_double(allowed + 1, comma, &lo) ||
      span_double(comma + 1, allowed + len - 1, &hi)) {
    snprintf(why, n, "bad range in the option table: %s", allowed);
    return -1;
  }
  if ((allowed[0] == '[' ? v < lo : v <= lo) || (allowed[len - 1] == ']' ? v > hi : v >= hi)) {
    snprintf(why, n, "%.17g is out of range %s", v, allowed);
    return -1;
  }
  return 0;
}

static int piece_nonempty(const char *p, const char *e, void *ud, char *why, size_t n) {
  (void)ud;
  trim(&p, &e);
  if (p == e) {
    snprintf(why, n, "an empty item in the list");
    return -1;
  }
  return 0;
}

static int piece_in_list(const char *p, const char *e, void *ud, char *why, size_t n) {
  trim(&p, &e);
  if (!list_has((const char *)ud, p, e)) {
    snprintf(why, n, "'%.*s' is not one of %s", (int)(e - p), p, (const char *)ud);
    return -1;
  }
  return 0;
}

static int piece_int_min(const char *p, const char *e, void *ud, char *why, size_t n) {
  int64_t v, lo = *(const int64_t *)ud;
  if (span_int(p, e, &v) || v < lo) {
    trim(&p, &e);
    snprintf(why, n, "'%.*s' is not an integer >= %lld", (int)(e - p), p, (long long)lo);
    return -1;
  }
  return 0;
}

/* input_shape piece "name:d,d,...": counts -1 dims into *(int *)ud. */
static int piece_input_shape(const char *p, const char *e, void *ud, char *why, size_t n) {
  const char *colon = NULL;
  int64_t minus1 = -1;
  int *n_dyn = ud;
  for (const char *q = p; q < e; q++)
    if (*q == ':') colon = q;
  if (!colon) {
    snprintf(why, n, "'%.*s' is not name:dims", (int)(e - p), p);
    return -1;
  }
  {
    const char *np = p, *ne = colon;
    trim(&np, &ne);
    if (np == ne) {
      snprintf(why, n, "an input without a name in '%.*s'", (int)(e - p), p);
      return -1;
    }
  }
  if (for_pieces(colon + 1, e, ',', piece_int_min, &minus1, why, n)) return -1;
  for (const char *q = colon + 1; q < e;) {
    const char *c = memchr(q, ',', (size_t)(e - q));
    int64_t v = 0;
    span_int(q, c ? c : e, &v);
    if (v == -1) (*n_dyn)++;
    q = c ? c + 1 : e;
  }
  return 0;
}

typedef struct dims_state { int n_profiles, per_profile; } dims_state;

static int piece_profile(const char *p, const char *e, void *ud, char *why, size_t n) {
  dims_state *st = ud;
  int64_t one = 1;
  int count = 1;
  if (for_pieces(p, e, ',', piece_int_min, &one, why, n)) return -1;
  for (const char *q = p; q < e; q++) count += *q == ',';
  if (st->n_profiles && count != st->per_profile) {
    snprintf(why, n, "profile %d has %d sizes, profile 0 has %d", st->n_profiles, count,
             st->per_profile);
    return -1;
  }
  st->per_profile = count;
  st->n_profiles++;
  return 0;
}

static int check_dynamic_dims(const char *s, dims_state *st, char *why, size_t n) {
  memset(st, 0, sizeof *st);
  if (for_pieces(s, s + strlen(s), ';', piece_profile, st, why, n)) return -1;
  if (st->n_profiles < 2 || st->n_profiles > 100) {
    snprintf(why, n, "%d profile(s): between 2 and 100 are needed", st->n_profiles);
    return -1;
  }
  return 0;
}

static int piece_dump_step(const char *p, const char *e, void *ud, char *why, size_t n) {
  const char *dash = memchr(p, '-', (size_t)(e - p));
  int64_t a, b;
  (void)ud;
  if (dash ? (span_int(p, dash, &a) || span_int(dash + 1, e, &b) || a < 0 || b < a)
           : (span_int(p, e, &a) || a < 0)) {
    snprintf(why, n, "'%.*s' is not an iteration (n) or a range (a-b, a <= b)", (int)(e - p),
             p);
    return -1;
  }
  return 0;
}

static int check_in_out_pair(const char *s, char *why, size_t n) {
  int depth = 0, names = 0;
  const char *p = s, *e = s + strlen(s);
  trim(&p, &e);
  if (p == e || *p != '[' || e[-1] != ']') {
    snprintf(why, n, "expected the str() of a Python list, [[in_nodes, out_nodes]]");
    return -1;
  }
  for (const char *q = p; q < e; q++) {
    if (*q == '[') depth++;
    else if (*q == ']') {
      if (--depth < 0) break;
    } else if (*q == '\'' || *q == '"') {
      const char *close = memchr(q + 1, *q, (size_t)(e - q - 1));
      if (!close) {
        snprintf(why, n, "an unclosed quote");
        return -1;
      }
      names += close > q + 1;
      q = close;
    } else if (*q != ',' && !isspace((unsigned char)*q)) {
      snprintf(why, n, "unexpected '%c' outside a quoted node name", *q);
      return -1;
    }
  }
  if (depth != 0) {
    snprintf(why, n, "unbalanced brackets");
    return -1;
  }
  if (!names) {
    snprintf(why, n, "no node names");
    return -1;
  }
  return 0;
}

static int piece_engine(const char *p, const char *e, void *ud, char *why, size_t n) {
  const char *colon = memchr(p, ':', (size_t)(e - p));
  int64_t v;
  (void)ud;
  trim(&p, &e);
  if (!colon || colon == p || span_int(colon + 1, e, &v) || v < 1) {
    snprintf(why, n, "'%.*s' is not ENGINE:n with n >= 1", (int)(e - p), p);
    return -1;
  }
  for (const char *q = p; q < colon; q++)
    if (!isalnum((unsigned char)*q) && *q != '_') {
      snprintf(why, n, "'%.*s' is not an engine name", (int)(colon - p), p);
      return -1;
    }
  return 0;
}

static int check_aicore_num(const char *s, char *why, size_t n) {
  const char *bar = strchr(s, '|');
  int64_t a, b;
  if (!bar || span_int(s, bar, &a) || span_int(bar + 1, s + strlen(s), &b) || a < 1 || b < 1) {
    snprintf(why, n, "expected cube|vector, two integers > 0 (\"2|4\")");
    return -1;
  }
  return 0;
}

static int check_accel(const char *s, char *why, size_t n) {
  const char *b1 = strchr(s, '|'), *b2 = b1 ? strchr(b1 + 1, '|') : NULL;
  const char *e = s + strlen(s);
  const char *mode_end = b2 ? b2 : e;
  double ratio;
  if (!b1 || !list_has("fast|fast1", s, b1) || !list_has("step|loss", b1 + 1, mode_end)) {
    snprintf(why, n,
             "expected type|trigger|ratio: fast or fast1, step or loss (\"fast|step|0.9\")");
    return -1;
  }
  if (b2) {
    int step = (mode_end - b1 - 1) == 4 && memcmp(b1 + 1, "step", 4) == 0;
    if (span_double(b2 + 1, e, &ratio)) {
      snprintf(why, n, "the ratio '%s' is not a number", b2 + 1);
      return -1;
    }
    if (check_range(step ? "[0.2, 0.9]" : "[1.01, 1.5]", ratio, why, n)) return -1;
  }
  return 0;
}

/* dynamic_inputs_shape_range: "getnext:[d,..],[..];data:[..]", d = int >= -1 or a~b. */
static int piece_range_dim(const char *p, const char *e, void *ud, char *why, size_t n) {
  const char *tilde = memchr(p, '~', (size_t)(e - p));
  int64_t a, b;
  (void)ud;
  if (tilde ? (span_int(p, tilde, &a) || span_int(tilde + 1, e, &b) || a < 0 || b < a)
            : (span_int(p, e, &a) || a < -1)) {
    trim(&p, &e);
    snprintf(why, n, "'%.*s' is not a dimension (n, -1 or a~b)", (int)(e - p), p);
    return -1;
  }
  return 0;
}

static int piece_shape_range(const char *p, const char *e, void *ud, char *why, size_t n) {
  const char *colon = memchr(p, ':', (size_t)(e - p));
  (void)ud;
  trim(&p, &e);
  if (!colon || !(list_has("getnext|data", p, colon))) {
    snprintf(why, n, "'%.*s' does not start with getnext: or data:", (int)(e - p), p);
    return -1;
  }
  for (const char *q = colon + 1;;) {
    const char *close;
    while (q < e && isspace((unsigned char)*q)) q++;
    if (q >= e || *q != '[' || !(close = memchr(q, ']', (size_t)(e - q)))) {
      snprintf(why, n, "expected [dims] after '%.*s'", (int)(q - p), p);
      return -1;
    }
    {
      const char *ip = q + 1, *ie = close;
      trim(&ip, &ie);
      if (ip < ie && for_pieces(ip, ie, ',', piece_range_dim, NULL, why, n)) return -1;
    }
    q = close + 1;
    while (q < e && isspace((unsigned char)*q)) q++;
    if (q == e) return 0;
    if (*q != ',') {
      snprintf(why, n, "unexpected '%c' after ']'", *q);
      return -1;
    }
    q++;
  }
}

/* ---- profiling_options: a flat JSON object (000) or the older "a:b" list (003) ---- */

typedef struct jfield { const char *k, *v; int kl, vl, is_str; } jfield;
enum { MAX_JFIELDS = 48 };

static const char *json_string(const char *p, int *len, char *why, size_t n) {
  const char *start = ++p; /* after the opening quote */
  for (; *p && *p != '"'; p++) {
    if ((unsigned char)*p < 0x20) {
      snprintf(why, n, "a control character inside a JSON string");
      return NULL;
    }
    if (*p == '\\') {
      if (!p[1]) break;
      p++;
    }
  }
  if (*p != '"') {
    snprintf(why, n, "an unterminated JSON string");
    return NULL;
  }
  *len = (int)(p - start);
  return p + 1;
}

static int json_flat(const char *s, jfield *f, int *nf, char *why, size_t n) {
  const char *p = s;
  *nf = 0;
  while (isspace((unsigned char)*p)) p++;
  if (*p++ != '{') goto bad;
  while (isspace((unsigned char)*p)) p++;
  if (*p == '}') goto end;
  for (;;) {
    jfield *fd;
    if (*nf == MAX_JFIELDS) {
      snprintf(why, n, "more than %d fields", MAX_JFIELDS);
      return -1;
    }
    fd = &f[(*nf)++];
    while (isspace((unsigned char)*p)) p++;
    if (*p != '"') goto bad;
    fd->k = p + 1;
    if (!(p = json_string(p, &fd->kl, why, n))) return -1;
    while (isspace((unsigned char)*p)) p++;
    if (*p++ != ':') goto bad;
    while (isspace((unsigned char)*p)) p++;
    if (*p == '"') {
      fd->v = p + 1;
      fd->is_str = 1;
      if (!(p = json_string(p, &fd->vl, why, n))) return -1;
    } else if (*p == '{' || *p == '[') {
      snprintf(why, n, "field '%.*s': nested objects and arrays are not profiling values",
               fd->kl, fd->k);
      return -1;
    } else {
      fd->v = p;
      fd->is_str = 0;
      while (*p && (isalnum((unsigned char)*p) || strchr("+-.", *p))) p++;
      fd->vl = (int)(p - fd->v);
      if (!fd->vl) goto bad;
    }
    while (isspace((unsigned char)*p)) p++;
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p == '}') break;
    goto bad;
  }
end:
  p++;
  while (isspace((unsigned char)*p)) p++;
  if (*p) goto bad;
  return 0;
bad:
  snprintf(why, n, "not a JSON object of \"field\":\"value\" pairs (near '%.12s')", p - (p > s));
  return -1;
}

typedef enum { PF_ANY, PF_ENUM, PF_RANGE, PF_LIST, PF_STORAGE, PF_METRICS, PF_PATH } pf_kind;
typedef struct prof_field { const char *name; pf_kind kind; const char *allowed; } prof_field;

/* The fields of profiling_options (000, Profiling). */
static const prof_field prof_fields[] = {
    {"output", PF_PATH, NULL},
    {"storage_limit", PF_STORAGE, "[200, 4294967295]"},
    {"training_trace", PF_ENUM, "on|off"},
    {"task_trace", PF_ENUM, "on|off|l0|l1"},
    {"task_time", PF_ENUM, "on|off|l0|l1"},
    {"ge_api", PF_ENUM, "off|l0|l1"},
    {"hccl", PF_ENUM, "on|off"},
    {"aicpu", PF_ENUM, "on|off"},
    {"fp_point", PF_ANY, NULL},
    {"bp_point", PF_ANY, NULL},
    {"aic_metrics", PF_METRICS,
     "ArithmeticUtilization|PipeUtilization|Memory|MemoryL0|MemoryUB|ResourceConflictRatio|"
     "L2Cache|MemoryAccess"},
    {"l2", PF_ENUM, "on|off"},
    {"msproftx", PF_ENUM, "on|off"},
    {"runtime_api", PF_ENUM, "on|off"},
    {"sys_hardware_mem_freq", PF_RANGE, "[1, 100]"},
    {"llc_profiling", PF_ENUM, "read|write|capacity|bandwidth"},
    {"sys_io_sampling_freq", PF_RANGE, "[1, 100]"},
    {"sys_interconnection_freq", PF_RANGE, "[1, 50]"},
    {"dvpp_freq", PF_RANGE, "[1, 100]"},
    {"instr_profiling", PF_ENUM, "on|off"},
    {"instr_profiling_freq", PF_RANGE, "[300, 30000]"},
    {"host_sys", PF_LIST, "cpu|mem"},
    {"host_sys_usage", PF_LIST, "cpu|mem"},
    {"host_sys_usage_freq", PF_RANGE, "[1, 50]"},
};

/* 000: instr_profiling_freq "is mutually exclusive with" these. */
static const char *const instr_exclusive[] = {"training_trace", "task_trace", "hccl", "aicpu",
                                              "fp_point", "bp_point", "aic_metrics", "l2",
                                              "task_time", "runtime_api"};

static const jfield *jfind(const jfield *f, int nf, const char *name) {
  size_t len = strlen(name);
  for (int i = 0; i < nf; i++)
    if ((size_t)f[i].kl == len && memcmp(f[i].k, name, len) == 0) return &f[i];
  return NULL;
}

static int check_prof_field(const prof_field *pf, const jfield *fd, char *why, size_t n) {
  char buf[128];
  double v;
  if (fd->vl >= (int)sizeof buf) {
    if (pf->kind == PF_ANY || pf->kind == PF_PATH) return 0;
    snprintf(why, n, "field '%s': value too long", pf->name);
    return -1;
  }
  memcpy(buf, fd->v, (size_t)fd->vl);
  buf[fd->vl] = 0;
  switch (pf->kind) {
  case PF_ANY: return 0;
  case PF_PATH:
    /* 000: the path cannot contain \n \f \r \b \t \v or \u007F. */
    for (int i = 0; i + 1 < fd->vl; i++)
      if (fd->v[i] == '\\' && (strchr("nfrbtv", fd->v[i + 1]) ||
                               (fd->vl - i >= 6 && strncasecmp(fd->v + i, "\\u007f", 6) == 0))) {
        snprintf(why, n, "field 'output': the path contains a control character");
        return -1;
      }
    if (fd->vl == 0) {
      snprintf(why, n, "field 'output': an empty path");
      return -1;
    }
    return 0;
  case PF_ENUM:
    if (str_in_list(pf->allowed, buf)) return 0;
    snprintf(why, n, "field '%s': '%s' is not one of %s", pf->name, buf, pf->allowed);
    return -1;
  case PF_LIST:
    if (for_pieces(buf, buf + strlen(buf), ',', piece_in_list, (void *)pf->allowed, why, n)) {
      char tmp[160];
      snprintf(tmp, sizeof tmp, "%s", why);
      snprintf(why, n, "field '%s': %s", pf->name, tmp);
      return -1;
    }
    return 0;
  case PF_RANGE:
    if (parse_double(buf, &v) || check_range(pf->allowed, v, why, n)) {
      snprintf(why, n, "field '%s': '%s' is not in %s", pf->name, buf, pf->allowed);
      return -1;
    }
    return 0;
  case PF_STORAGE: {
    size_t len = strlen(buf);
    if (len > 2 && strcasecmp(buf + len - 2, "MB") == 0 &&
        !span_double(buf, buf + len - 2, &v) && !check_range(pf->allowed, v, why, n))
      return 0;
    snprintf(why, n, "field 'storage_limit': expected a size in MB in %s, such as \"200MB\"",
             pf->allowed);
    return -1;
  }
  case PF_METRICS:
    if (str_in_list(pf->allowed, buf)) return 0;
    if (strncmp(buf, "Custom:", 7) == 0) {
      int count = 0;
      for (char *q = buf + 7; *q;) {
        char *c = strchr(q, ',');
        char *end;
        long r;
        if (c) *c = 0;
        errno = 0;
        r = strtol(q, &end, 0); /* hex (0x..) or decimal */
        if (errno || *end || end == q || r < 0x1 || r > 0x6E) {
          snprintf(why, n, "field 'aic_metrics': register '%s' is not in [0x1, 0x6E]", q);
          return -1;
        }
        count++;
        if (!c) break;
        q = c + 1;
      }
      if (count >= 1 && count <= 8) return 0;
      snprintf(why, n, "field 'aic_metrics': 1 to 8 custom registers");
      return -1;
    }
    snprintf(why, n, "field 'aic_metrics': '%s' is not one of %s or Custom:<registers>", buf,
             pf->allowed);
    return -1;
  }
  return 0;
}

static int check_profiling(const char *s, char *why, size_t n) {
  jfield f[MAX_JFIELDS];
  int nf;
  const char *p = s;
  while (isspace((unsigned char)*p)) p++;
  if (*p != '{') {
    /* 003: "training_trace:task_trace"; op_trace cannot be combined with the other two. */
    int has_op = 0, has_other = 0;
    static const char legacy[] = "training_trace|task_trace|op_trace";
    if (for_pieces(s, s + strlen(s), ':', piece_in_list, (void *)legacy, why, n))
      return -1;
    has_op = strstr(s, "op_trace") != NULL;
    has_other = strstr(s, "training_trace") || strstr(s, "task_trace");
    if (has_op && has_other) {
      snprintf(why, n, "op_trace cannot be combined with training_trace or task_trace (003)");
      return -1;
    }
    return 0;
  }
  if (json_flat(s, f, &nf, why, n)) return -1;
  for (int i = 0; i < nf; i++) {
    const prof_field *pf = NULL;
    for (size_t j = 0; j < npu_countof(prof_fields); j++)
      if ((size_t)f[i].kl == strlen(prof_fields[j].name) &&
          memcmp(f[i].k, prof_fields[j].name, (size_t)f[i].kl) == 0)
        pf = &prof_fields[j];
    if (!pf) {
      char key[64];
      npuC_nearest near;
      snprintf(key, sizeof key, "%.*s", f[i].kl, f[i].k);
      npuC_nearest_init(&near, key);
      for (size_t j = 0; j < npu_countof(prof_fields); j++)
        npuC_nearest_try(&near, prof_fields[j].name);
      const char *best = npuC_nearest_result(&near);
      if (best)
        snprintf(why, n, "unknown field '%s' (did you mean '%s'?)", key, best);
      else
        snprintf(why, n, "unknown field '%s'", key);
      return -1;
    }
    for (int j = 0; j < i; j++)
      if (f[j].kl == f[i].kl && memcmp(f[j].k, f[i].k, (size_t)f[i].kl) == 0) {
        snprintf(why, n, "field '%s' appears twice", pf->name);
        return -1;
      }
    if (check_prof_field(pf, &f[i], why, n)) return -1;
  }
  if (jfind(f, nf, "instr_profiling_freq"))
    for (size_t j = 0; j < npu_countof(instr_exclusive); j++) {
      const jfield *o = jfind(f, nf, instr_exclusive[j]);
      if (o && o->vl > 0 && !(o->vl == 3 && memcmp(o->v, "off", 3) == 0)) {
        snprintf(why, n, "instr_profiling_freq and %s cannot be used together (000: mutually "
                         "exclusive)", instr_exclusive[j]);
        return -1;
      }
    }
  return 0;
}

/* The value of `field` in a profiling_options string into buf ("" when absent; the older
   colon form reads "on" for a listed switch). */
static void profiling_field(const char *s, const char *field, char *buf, size_t n) {
  jfield f[MAX_JFIELDS];
  int nf;
  char why[8];
  const jfield *fd;
  const char *p = s;
  buf[0] = 0;
  while (isspace((unsigned char)*p)) p++;
  if (*p != '{') {
    size_t len = strlen(field);
    for (const char *q = s; (q = strstr(q, field)) != NULL; q += len)
      if ((q == s || q[-1] == ':') && (q[len] == 0 || q[len] == ':')) {
        snprintf(buf, n, "on");
        return;
      }
    return;
  }
  if (json_flat(s, f, &nf, why, sizeof why)) return;
  if ((fd = jfind(f, nf, field)) != NULL) snprintf(buf, n, "%.*s", fd->vl, fd->v);
}

void npuO_profiling_field(const npu_options *o, const char *field, char *buf, size_t n) {
  profiling_field(npuO_string(o, NPUO_profiling_options), field, buf, n);
}

/* A string value against its option's (or variable's) check. */
static int check_string(npuO_check ck, const char *allowed, const char *s, char *why, size_t n) {
  const char *e = s + strlen(s);
  int count = 0;
  dims_state ds;
  int64_t zero = 0;
  switch (ck) {
  case CK_NONE: return 0;
  case CK_ENUM:
    if (str_in_list(allowed, s)) return 0;
    snprintf(why, n, "'%s' is not one of %s", s, allowed);
    return -1;
  case CK_ENUM_LIST:
    return for_pieces(s, e, ',', piece_in_list, (void *)allowed, why, n);
  case CK_PATH:
    if (!*s) {
      snprintf(why, n, "an empty path");
      return -1;
    }
    if (!no_control(s)) {
      snprintf(why, n, "the path contains a control character");
      return -1;
    }
    return 0;
  case CK_NAMES:
    if (!no_control(s)) {
      snprintf(why, n, "a control character");
      return -1;
    }
    return for_pieces(s, e, ',', piece_nonempty, NULL, why, n);
  case CK_WORDS:
    for (const char *q = s; *q; q++) count += !isspace((unsigned char)*q);
    if (!count || !no_control(s)) {
      snprintf(why, n, "expected names separated by spaces");
      return -1;
    }
    return 0;
  case CK_IDENT:
    for (const char *q = s; *q; q++)
      if (!isalnum((unsigned char)*q) && *q != '_' && *q != '-') {
        snprintf(why, n, "'%s' may hold only letters, digits, - and _", s);
        return -1;
      }
    if (!*s) {
      snprintf(why, n, "empty");
      return -1;
    }
    return 0;
  case CK_INPUT_SHAPE:
    return for_pieces(s, e, ';', piece_input_shape, &count, why, n);
  case CK_DYNAMIC_DIMS:
    return check_dynamic_dims(s, &ds, why, n);
  case CK_DUMP_STEP:
    return for_pieces(s, e, '|', piece_dump_step, NULL, why, n);
  case CK_IN_OUT_PAIR:
    return check_in_out_pair(s, why, n);
  case CK_ENGINES:
    return for_pieces(s, e, ',', piece_engine, NULL, why, n);
  case CK_PROFILING:
    return check_profiling(s, why, n);
  case CK_AICORE_NUM:
    return check_aicore_num(s, why, n);
  case CK_ACCEL:
    return check_accel(s, why, n);
  case CK_SHAPE_RANGE:
    return for_pieces(s, e, ';', piece_shape_range, NULL, why, n);
  case CK_INT_LIST:
    return for_pieces(s, e, ',', piece_int_min, &zero, why, n);
  case CK_DIGITS:
    for (const char *q = s; *q; q++)
      if (!isdigit((unsigned char)*q)) {
        snprintf(why, n, "'%s' is not a byte count (decimal digits)", s);
        return -1;
      }
    if (!*s || strspn(s, "0") == strlen(s)) {
      snprintf(why, n, "'%s' is not a positive byte count", s);
      return -1;
    }
    return 0;
  case CK_RANGE:
    break;
  }
  snprintf(why, n, "no string check for this option");
  return -1;
}

static int check_number(npuO_check ck, const char *allowed, double v, char *why, size_t n) {
  char text[32];
  switch (ck) {
  case CK_ENUM:
    snprintf(text, sizeof text, "%.17g", v);
    if (str_in_list(allowed, text)) return 0;
    snprintf(why, n, "%s is not one of %s", text, allowed);
    return -1;
  case CK_RANGE: return check_range(allowed, v, why, n);
  default: return 0;
  }
}

/* ------------------------------------------------------------------ lookup */

int npu_option_count(void) { return NPUO_COUNT; }

const npu_option_info *npu_option_at(int i) {
  return i >= 0 && i < NPUO_COUNT ? &specs[i].info : NULL;
}

static int find_id(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < NPUO_COUNT; i++)
    if (strcmp(specs[i].info.name, name) == 0) return i;
  return -1;
}

const npu_option_info *npu_option_find(const char *name) {
  int id = find_id(name);
  return id < 0 ? NULL : &specs[id].info;
}

const char *npu_option_suggest(const char *name) {
  npuC_nearest near;
  if (!name || !*name) return NULL;
  npuC_nearest_init(&near, name);
  for (int i = 0; i < NPUO_COUNT; i++) npuC_nearest_try(&near, specs[i].info.name);
  return npuC_nearest_result(&near);
}

int npu_option_env_count(void) { return NPUO_ENV_COUNT; }

const npu_option_env_info *npu_option_env_at(int i) {
  return i >= 0 && i < NPUO_ENV_COUNT ? &envs[i].info : NULL;
}

/* Finds `name` with the setter/getter type `want`; the error names the option. */
static npu_status lookup(const npu_options *o, const char *name, npu_option_type want, int *id) {
  *id = -1;
  if (!o) return npuC_error(NULL, NPU_ERR_ARG, "options is NULL");
  if (!name) return npuC_error(o->ctx, NPU_ERR_ARG, "option name is NULL");
  *id = find_id(name);
  if (*id < 0) {
    const char *s = npu_option_suggest(name);
    if (s) return npuC_error(o->ctx, NPU_ERR_OPTION, "unknown option '%s' (did you mean '%s'?)",
                             name, s);
    return npuC_error(o->ctx, NPU_ERR_OPTION, "unknown option '%s'", name);
  }
  if (specs[*id].info.type != want) {
    npu_option_type t = specs[*id].info.type;
    *id = -1;
    return npuC_error(o->ctx, NPU_ERR_OPTION, "option '%s' takes %s, not %s", name,
                      type_word(t), type_word(want));
  }
  return NPU_OK;
}

/* ------------------------------------------------------------------ lifecycle */

static int parse_bool_text(const char *s, int64_t *v) {
  if (strcasecmp(s, "true") == 0) *v = 1;
  else if (strcasecmp(s, "false") == 0) *v = 0;
  else return -1;
  return 0;
}

static void fill_defaults(npu_options *o) {
  for (int id = 0; id < NPUO_COUNT; id++)
    for (int mode = 0; mode < 2; mode++) {
      const option_spec *sp = &specs[id];
      const char *text = (mode == 0 && sp->dflt_infer[0]) ? sp->dflt_infer : sp->dflt;
      npuO_value *v = &o->dflt[mode][id];
      switch (sp->info.type) {
      case NPU_OPTION_INT: if (parse_int(text, &v->i)) v->i = 0; break;
      case NPU_OPTION_BOOL: if (parse_bool_text(text, &v->i)) v->i = 0; break;
      case NPU_OPTION_FLOAT: if (parse_double(text, &v->f)) v->f = 0; break;
      case NPU_OPTION_STRING: v->cs = text; break;
      }
    }
}

npu_status npu_options_new(npu_context *ctx, npu_options **out) {
  npu_options *o;
  if (!out) return npuC_error(ctx, NPU_ERR_ARG, "npu_options_new: out is NULL");
  *out = NULL;
  if (!ctx) return npuC_error(NULL, NPU_ERR_ARG, "npu_options_new: context is NULL");
  o = npuC_calloc(ctx, 1, sizeof *o);
  if (!o) return NPU_ERR_NOMEM;
  o->ctx = npu_context_retain(ctx);
  fill_defaults(o);
  *out = o;
  return NPU_OK;
}

static void free_strings(npu_options *o) {
  for (int id = 0; id < NPUO_COUNT; id++)
    if (o->source[id] && specs[id].info.type == NPU_OPTION_STRING) {
      npuC_free(o->ctx, o->value[id].s);
      o->value[id].s = NULL;
    }
  for (int e = 0; e < NPUO_ENV_COUNT; e++) {
    npuC_free(o->ctx, o->env_text[e]);
    o->env_text[e] = NULL;
  }
}

void npu_options_release(npu_options *o) {
  npu_context *ctx;
  if (!o) return;
  ctx = o->ctx;
  free_strings(o);
  npuC_free(ctx, o);
  npu_context_release(ctx);
}

npu_status npu_options_copy(const npu_options *src, npu_options **out) {
  npu_options *o;
  if (!out) return npuC_error(src ? src->ctx : NULL, NPU_ERR_ARG, "npu_options_copy: out is NULL");
  *out = NULL;
  if (!src) return npuC_error(NULL, NPU_ERR_ARG, "npu_options_copy: src is NULL");
  o = npuC_alloc(src->ctx, sizeof *o);
  if (!o) return NPU_ERR_NOMEM;
  memcpy(o, src, sizeof *o);
  /* Own every string: clear the copied pointers first so a failure frees only ours. */
  for (int id = 0; id < NPUO_COUNT; id++)
    if (o->source[id] && specs[id].info.type == NPU_OPTION_STRING) o->value[id].s = NULL;
  memset(o->env_text, 0, sizeof o->env_text);
  for (int id = 0; id < NPUO_COUNT; id++)
    if (src->source[id] && specs[id].info.type == NPU_OPTION_STRING &&
        !(o->value[id].s = npuC_strdup(src->ctx, src->value[id].s)))
      goto nomem;
  for (int e = 0; e < NPUO_ENV_COUNT; e++)
    if (src->env_text[e] && !(o->env_text[e] = npuC_strdup(src->ctx, src->env_text[e])))
      goto nomem;
  o->ctx = npu_context_retain(src->ctx);
  *out = o;
  return NPU_OK;
nomem:
  free_strings(o);
  npuC_free(src->ctx, o);
  return NPU_ERR_NOMEM;
}

/* ------------------------------------------------------------------ setters */

static npu_status value_error(const npu_options *o, int id, const char *why) {
  return npuC_error(o->ctx, NPU_ERR_OPTION, "option '%s': %s", specs[id].info.name, why);
}

npu_status npu_options_set_int(npu_options *o, const char *name, int64_t v) {
  char why[256];
  int id;
  npu_status st = lookup(o, name, NPU_OPTION_INT, &id);
  if (st) return st;
  if (v > ((int64_t)1 << 53) || v < -((int64_t)1 << 53))
    return value_error(o, id, "the value is out of range");
  if (check_number(specs[id].check, specs[id].info.allowed, (double)v, why, sizeof why))
    return value_error(o, id, why);
  o->value[id].i = v;
  o->source[id] = NPUO_SRC_USER;
  return NPU_OK;
}

npu_status npu_options_set_bool(npu_options *o, const char *name, int v) {
  int id;
  npu_status st = lookup(o, name, NPU_OPTION_BOOL, &id);
  if (st) return st;
  o->value[id].i = v != 0;
  o->source[id] = NPUO_SRC_USER;
  return NPU_OK;
}

npu_status npu_options_set_float(npu_options *o, const char *name, double v) {
  char why[256];
  int id;
  npu_status st = lookup(o, name, NPU_OPTION_FLOAT, &id);
  if (st) return st;
  if (v != v || check_number(specs[id].check, specs[id].info.allowed, v, why, sizeof why))
    return value_error(o, id, v != v ? "NaN is not a value" : why);
  o->value[id].f = v;
  o->source[id] = NPUO_SRC_USER;
  return NPU_OK;
}

/* Stores a validated string (a copy) with the given source. */
static npu_status store_string(npu_options *o, int id, const char *v, npuO_source src) {
  char *copy = npuC_strdup(o->ctx, v);
  if (!copy) return NPU_ERR_NOMEM;
  if (o->source[id]) npuC_free(o->ctx, o->value[id].s);
  o->value[id].s = copy;
  o->source[id] = (unsigned char)src;
  return NPU_OK;
}

npu_status npu_options_set_string(npu_options *o, const char *name, const char *v) {
  char why[256];
  int id;
  npu_status st = lookup(o, name, NPU_OPTION_STRING, &id);
  if (st) return st;
  if (!v) return npuC_error(o->ctx, NPU_ERR_ARG, "option '%s': value is NULL", name);
  if (check_string(specs[id].check, specs[id].info.allowed, v, why, sizeof why))
    return value_error(o, id, why);
  return store_string(o, id, v, NPUO_SRC_USER);
}

/* ------------------------------------------------------------------ getters */

static const npuO_value *effective(const npu_options *o, int id) {
  int training;
  if (o->source[id]) return &o->value[id];
  training = (o->source[NPUO_graph_run_mode] ? o->value[NPUO_graph_run_mode].i
                                              : o->dflt[1][NPUO_graph_run_mode].i) != 0;
  return &o->dflt[training][id];
}

int64_t npuO_int(const npu_options *o, npu_option_id id) {
  npu_option_type t = specs[id].info.type;
  return (t == NPU_OPTION_INT || t == NPU_OPTION_BOOL) ? effective(o, id)->i : 0;
}

int npuO_bool(const npu_options *o, npu_option_id id) { return npuO_int(o, id) != 0; }

double npuO_float(const npu_options *o, npu_option_id id) {
  return specs[id].info.type == NPU_OPTION_FLOAT ? effective(o, id)->f : 0.0;
}

const char *npuO_string(const npu_options *o, npu_option_id id) {
  if (specs[id].info.type != NPU_OPTION_STRING) return "";
  return o->source[id] ? o->value[id].s : effective(o, id)->cs;
}

int npuO_is_set(const npu_options *o, npu_option_id id) { return o->source[id] != 0; }

npuO_source npuO_source_of(const npu_options *o, npu_option_id id) {
  return (npuO_source)o->source[id];
}

int npuO_env_is_set(const npu_options *o, npuO_env_id id) { return o->env_set[id]; }
int64_t npuO_env_int(const npu_options *o, npuO_env_id id) {
  return o->env_set[id] ? o->env_int[id] : 0;
}
const char *npuO_env_string(const npu_options *o, npuO_env_id id) {
  return o->env_text[id] ? o->env_text[id] : "";
}
const char *npuO_output_dir(const npu_options *o, const char **from) {
  const char *work = npuO_env_string(o, NPUO_ENV_ASCEND_WORK_PATH);
  if (from)
    *from = *work ? "ASCEND_WORK_PATH" : "npu_out (ASCEND_WORK_PATH is unset)";
  return *work ? work : "npu_out";
}
npu_context *npuO_context(const npu_options *o) { return o->ctx; }

int npu_options_is_set(const npu_options *o, const char *name) {
  int id = o ? find_id(name) : -1;
  return id >= 0 && o->source[id] != 0;
}

npu_status npu_options_get_int(const npu_options *o, const char *name, int64_t *v) {
  int id;
  npu_status st;
  if (v) *v = 0;
  if ((st = lookup(o, name, NPU_OPTION_INT, &id))) return st;
  if (!v) return npuC_error(o->ctx, NPU_ERR_ARG, "npu_options_get_int: v is NULL");
  *v = effective(o, id)->i;
  return NPU_OK;
}

npu_status npu_options_get_bool(const npu_options *o, const char *name, int *v) {
  int id;
  npu_status st;
  if (v) *v = 0;
  if ((st = lookup(o, name, NPU_OPTION_BOOL, &id))) return st;
  if (!v) return npuC_error(o->ctx, NPU_ERR_ARG, "npu_options_get_bool: v is NULL");
  *v = (int)effective(o, id)->i;
  return NPU_OK;
}

npu_status npu_options_get_float(const npu_options *o, const char *name, double *v) {
  int id;
  npu_status st;
  if (v) *v = 0;
  if ((st = lookup(o, name, NPU_OPTION_FLOAT, &id))) return st;
  if (!v) return npuC_error(o->ctx, NPU_ERR_ARG, "npu_options_get_float: v is NULL");
  *v = effective(o, id)->f;
  return NPU_OK;
}

npu_status npu_options_get_string(const npu_options *o, const char *name, const char **v) {
  int id;
  npu_status st;
  if (v) *v = NULL;
  if ((st = lookup(o, name, NPU_OPTION_STRING, &id))) return st;
  if (!v) return npuC_error(o->ctx, NPU_ERR_ARG, "npu_options_get_string: v is NULL");
  *v = npuO_string(o, (npu_option_id)id);
  return NPU_OK;
}

/* ------------------------------------------------------------------ device id */

npu_status npuO_check_device(const npu_options *o, npu_context *ctx) {
  int64_t id = npuO_int(o, NPUO_session_device_id);
  int n = npu_context_n_devices(ctx);
  if (id >= 0 && id < n) return NPU_OK;
  if (o->source[NPUO_session_device_id] == NPUO_SRC_ENV)
    return npuC_error(ctx, NPU_ERR_OPTION,
                      "environment variable ASCEND_DEVICE_ID=%lld (session_device_id): the "
                      "context has %d virtual devices (0 to %d)",
                      (long long)id, n, n - 1);
  return npuC_error(ctx, NPU_ERR_OPTION,
                    "option 'session_device_id': device %lld does not exist, the context has %d "
                    "virtual devices (0 to %d)",
                    (long long)id, n, n - 1);
}

/* ------------------------------------------------------------------ environment */

/* Validates the variable's text; fills *iv for INT/BOOL.  0 or -1 with why. */
static int env_parse(const npu_options *o, int e, const char *text, int64_t *iv, char *why,
                     size_t n) {
  const env_spec *es = &envs[e];
  int opt = es->option;
  *iv = 0;
  switch (es->info.type) {
  case NPU_OPTION_INT:
    if (parse_int(text, iv)) {
      snprintf(why, n, "not an integer");
      return -1;
    }
    if (check_number(es->check, es->info.allowed, (double)*iv, why, n)) return -1;
    if (opt >= 0 && check_number(specs[opt].check, specs[opt].info.allowed, (double)*iv, why, n))
      return -1;
    if (opt == NPUO_session_device_id && *iv >= npu_context_n_devices(o->ctx)) {
      snprintf(why, n, "device %lld does not exist, the context has %d virtual devices",
               (long long)*iv, npu_context_n_devices(o->ctx));
      return -1;
    }
    return 0;
  case NPU_OPTION_BOOL:
    if (parse_bool_text(text, iv)) {
      snprintf(why, n, "expected true or false");
      return -1;
    }
    return 0;
  case NPU_OPTION_STRING:
    if (check_string(es->check, es->info.allowed, text, why, n)) return -1;
    if (opt >= 0 && check_string(specs[opt].check, specs[opt].info.allowed, text, why, n))
      return -1;
    return 0;
  case NPU_OPTION_FLOAT:
    break;
  }
  snprintf(why, n, "no float variables");
  return -1;
}

npu_status npu_options_apply_env(npu_options *o,
                                 const char *(*getenv_fn)(const char *, void *), void *ud) {
  const char *raw[NPUO_ENV_COUNT];
  int64_t iv[NPUO_ENV_COUNT];
  char *text[NPUO_ENV_COUNT] = {0};
  char *optstr[NPUO_ENV_COUNT] = {0};
  char why[256];
  if (!o) return npuC_error(NULL, NPU_ERR_ARG, "npu_options_apply_env: options is NULL");
  /* 1: read and validate everything (nothing changes yet) */
  for (int e = 0; e < NPUO_ENV_COUNT; e++) {
    const char *var = envs[e].info.variable;
    raw[e] = getenv_fn ? getenv_fn(var, ud) : getenv(var);
    if (raw[e] && !*raw[e]) raw[e] = NULL; /* empty = unset, as the reference reads it */
    if (raw[e] && env_parse(o, e, raw[e], &iv[e], why, sizeof why))
      return npuC_error(o->ctx, NPU_ERR_OPTION, "environment variable %s='%s': %s", var, raw[e],
                        why);
  }
  /* 2: copy (a failure frees the copies and changes nothing) */
  for (int e = 0; e < NPUO_ENV_COUNT; e++) {
    int opt = envs[e].option;
    if (!raw[e]) continue;
    if (!(text[e] = npuC_strdup(o->ctx, raw[e]))) goto nomem;
    if (opt >= 0 && o->source[opt] != NPUO_SRC_USER &&
        specs[opt].info.type == NPU_OPTION_STRING && !(optstr[e] = npuC_strdup(o->ctx, raw[e])))
      goto nomem;
  }
  /* 3: commit: what an earlier overlay set is replaced by this one */
  for (int id = 0; id < NPUO_COUNT; id++)
    if (o->source[id] == NPUO_SRC_ENV) {
      if (specs[id].info.type == NPU_OPTION_STRING) npuC_free(o->ctx, o->value[id].s);
      o->source[id] = NPUO_SRC_DEFAULT;
    }
  for (int e = 0; e < NPUO_ENV_COUNT; e++) {
    int opt = envs[e].option;
    npuC_free(o->ctx, o->env_text[e]);
    o->env_text[e] = text[e];
    o->env_set[e] = raw[e] != NULL;
    o->env_int[e] = raw[e] ? iv[e] : 0;
    if (!raw[e] || opt < 0 || o->source[opt] == NPUO_SRC_USER) continue;
    if (specs[opt].info.type == NPU_OPTION_STRING) o->value[opt].s = optstr[e];
    else o->value[opt].i = iv[e];
    o->source[opt] = NPUO_SRC_ENV;
  }
  return NPU_OK;
nomem:
  for (int e = 0; e < NPUO_ENV_COUNT; e++) {
    npuC_free(o->ctx, text[e]);
    npuC_free(o->ctx, optstr[e]);
  }
  return NPU_ERR_NOMEM;
}

/* ------------------------------------------------------------------ cross-option rules */

typedef enum { RK_EXCLUSIVE, RK_REQUIRES, RK_TOGETHER, RK_MATCH, RK_PRECEDENCE, RK_NOTE } rule_kind;
typedef enum {
  C_NONE, C_SET, C_USER, C_TRUE, C_IN, C_NOT_IN, C_EFF_IN, C_JSON, C_ENV_SET, C_ENV_IN
} cond_kind;

typedef struct side {
  short is_env, id; /* option id, env id, or -1 */
  unsigned char cond;
  const char *values;
} side;

typedef int (*match_fn)(const npu_options *o, char *why, size_t n);

typedef struct rule {
  npu_option_rule_info info;
  rule_kind kind;
  side a, b, g;
  match_fn match;
} rule;

#define KT_EXCLUSIVE "exclusive"
#define KT_ENV_EXCLUSIVE "env-exclusive"
#define KT_REQUIRES "requires"
#define KT_TOGETHER "together"
#define KT_MATCH "match"
#define KT_PRECEDENCE "precedence"
#define KT_NOTE "note"
#define RK_ENV_EXCLUSIVE RK_EXCLUSIVE
#define CT_SET "set"
#define CT_USER "set explicitly"
#define CT_TRUE "true"
#define CT_IN "in"
#define CT_NOT_IN "not in"
#define CT_EFF_IN "effective in"
#define CT_JSON "json field"
#define CT_ENV_SET "set"
#define CT_ENV_IN "in"

/* A side expands to: name, cond text, values, is_env, id, cond. */
#define O(name, c, v) #name, CT_##c, v, 0, NPUO_##name, C_##c
#define E(var, c, v) #var, CT_##c, v, 1, NPUO_ENV_##var, C_##c
#define X_ NULL, NULL, NULL, 0, -1, C_NONE
#define SIDE_INFO(n, ct, v, e, id, c) n, ct, v
#define SIDE_DATA(n, ct, v, e, id, c) {e, id, c, v}
#define APPLY(m, ...) m(__VA_ARGS__)
#define RULE(kind, A, B, G, reason, fn) \
  {{KT_##kind, APPLY(SIDE_INFO, A), APPLY(SIDE_INFO, B), APPLY(SIDE_INFO, G), reason}, \
   RK_##kind, APPLY(SIDE_DATA, A), APPLY(SIDE_DATA, B), APPLY(SIDE_DATA, G), fn}

static int count_dynamic(const char *input_shape) {
  int count = 0;
  char why[8];
  for_pieces(input_shape, input_shape + strlen(input_shape), ';', piece_input_shape, &count, why,
             sizeof why);
  return count;
}

static int match_dims(const npu_options *o, char *why, size_t n) {
  dims_state ds;
  int dyn = count_dynamic(npuO_string(o, NPUO_input_shape));
  if (check_dynamic_dims(npuO_string(o, NPUO_dynamic_dims), &ds, why, n)) return -1;
  if (dyn != ds.per_profile) {
    snprintf(why, n, "input_shape has %d dynamic (-1) dimension(s) but each dynamic_dims profile "
                     "has %d size(s)", dyn, ds.per_profile);
    return -1;
  }
  return 0;
}

#define MIXED_OK "allow_fp32_to_fp16|must_keep_origin_dtype"
static const rule rules[] = {
  /* Accuracy Tuning */
  RULE(EXCLUSIVE, O(precision_mode, SET, NULL), O(precision_mode_v2, SET, NULL), X_,
       "000: precision_mode 'cannot be used together with precision_mode_v2. precision_mode_v2 "
       "is recommended'", NULL),
  RULE(PRECEDENCE, O(precision_mode, IN, "must_keep_origin_dtype"), O(customize_dtypes, SET, NULL),
       X_, "000: 'if precision_mode is set to must_keep_origin_dtype, customize_dtypes does not "
       "take effect'", NULL),
  RULE(PRECEDENCE, O(precision_mode_v2, IN, "origin"), O(customize_dtypes, SET, NULL), X_,
       "000: 'if precision_mode_v2 is set to origin, customize_dtypes does not take effect'", NULL),
  /* Dynamic Shape */
  RULE(EXCLUSIVE, O(compile_dynamic_mode, TRUE, NULL), O(input_shape, SET, NULL), X_,
       "000: compile_dynamic_mode 'cannot be used together with parameters for dynamic "
       "dimension size profiles'", NULL),
  RULE(EXCLUSIVE, O(compile_dynamic_mode, TRUE, NULL), O(dynamic_dims, SET, NULL), X_,
       "000: compile_dynamic_mode 'cannot be used together with parameters for dynamic "
       "dimension size profiles'", NULL),
  RULE(EXCLUSIVE, O(compile_dynamic_mode, TRUE, NULL), O(dynamic_node_type, SET, NULL), X_,
       "000: compile_dynamic_mode 'cannot be used together with parameters for dynamic "
       "dimension size profiles'", NULL),
  /* (input_shape with both partners covers dynamic_dims with dynamic_node_type) */
  RULE(TOGETHER, O(input_shape, SET, NULL), O(dynamic_dims, SET, NULL), X_,
       "000: 'input_shape, dynamic_dims, and dynamic_node_type must be used together'", NULL),
  RULE(TOGETHER, O(input_shape, SET, NULL), O(dynamic_node_type, SET, NULL), X_,
       "000: 'input_shape, dynamic_dims, and dynamic_node_type must be used together'", NULL),
  RULE(MATCH, O(input_shape, SET, NULL), O(dynamic_dims, SET, NULL), X_,
       "000: 'the number of -1 placeholders equals the number of dimension sizes of each "
       "profile'", match_dims),
  RULE(REQUIRES, O(compile_hybrid_mode, IN, "1"), O(input_shape, SET, NULL), X_,
       "000: compile_hybrid_mode 'must be used together with parameters for dynamic dimension "
       "size profiles'", NULL),
  RULE(REQUIRES, O(compile_hybrid_mode, IN, "1"), O(dynamic_node_type, IN, "1"), X_,
       "000: 'only the scenario with dynamic_node_type set to 1 (placeholder inputs are dynamic) "
       "is supported'", NULL),
  RULE(PRECEDENCE, O(dynamic_dims, SET, NULL), O(dynamic_inputs_shape_range, SET, NULL), X_,
       "000: dynamic_inputs_shape_range 'cannot be used together with dynamic_dims. If both are "
       "configured, dynamic_dims takes precedence and this option is ignored'", NULL),
  RULE(REQUIRES, O(dynamic_graph_execute_mode, SET, NULL), O(dynamic_input, TRUE, NULL), X_,
       "000: dynamic_graph_execute_mode 'takes effect when dynamic_input is set to True'", NULL),
  RULE(PRECEDENCE, O(compile_dynamic_mode, TRUE, NULL), O(shape_generalization_mode, SET, NULL),
       X_, "000: 'when compile_dynamic_mode is set to True ... the shape_generalization_mode "
       "setting does not take effect'", NULL),
  RULE(REQUIRES, O(shape_generalization_mode, NOT_IN, "STRICT"), O(jit_compile, IN, "true"), X_,
       "000: 'when jit_compile is set to true (online operator compilation), use this parameter "
       "to configure the shape generalization mode'", NULL),
  /* Mixed Computing */
  RULE(REQUIRES, O(in_out_pair, SET, NULL), O(mix_compile_mode, TRUE, NULL), X_,
       "000: in_out_pair names the operators offloaded 'in mixed computing scenarios'", NULL),
  RULE(REQUIRES, O(in_out_pair_flag, SET, NULL), O(in_out_pair, SET, NULL), X_,
       "000: in_out_pair_flag says whether 'operators specified by in_out_pair' are offloaded",
       NULL),
  RULE(REQUIRES, O(variable_placement, IN, "Host"), O(mix_compile_mode, TRUE, NULL), X_,
       "000: 'if this configuration option is set to Host, mixed computing must be enabled "
       "(mix_compile_mode = True)'", NULL),
  /* Dump */
  RULE(EXCLUSIVE, O(enable_dump, TRUE, NULL), O(enable_dump_debug, TRUE, NULL), X_,
       "000: 'enable_dump and enable_dump_debug cannot be both set to True'", NULL),
  RULE(REQUIRES, O(enable_dump, TRUE, NULL), O(dump_path, SET, NULL), X_,
       "000: dump_path 'is required when enable_dump or enable_dump_debug is set to True'", NULL),
  RULE(REQUIRES, O(enable_dump_debug, TRUE, NULL), O(dump_path, SET, NULL), X_,
       "000: dump_path 'is required when enable_dump or enable_dump_debug is set to True'", NULL),
  /* Performance Tuning */
  RULE(EXCLUSIVE, O(enable_small_channel, IN, "0"), O(graph_run_mode, IN, "0"), X_,
       "000: enable_small_channel 'cannot be modified in online inference scenarios "
       "(graph_run_mode is 0)'", NULL),
  RULE(PRECEDENCE, O(op_precision_mode, SET, NULL), O(op_select_implmode, SET, NULL), X_,
       "000: 'mutually exclusive with op_select_implmode and optypelist_for_implmode. If they "
       "are all specified, op_precision_mode takes precedence'", NULL),
  RULE(PRECEDENCE, O(op_precision_mode, SET, NULL), O(optypelist_for_implmode, SET, NULL), X_,
       "000: 'mutually exclusive with op_select_implmode and optypelist_for_implmode. If they "
       "are all specified, op_precision_mode takes precedence'", NULL),
  RULE(REQUIRES, O(optypelist_for_implmode, SET, NULL), O(op_select_implmode, SET, NULL), X_,
       "000: optypelist_for_implmode lists the types 'that use the mode specified by the "
       "op_select_implmode parameter'; 'use this option in conjunction with op_select_implmode'",
       NULL),
  RULE(REQUIRES, O(aoe_config_file, SET, NULL), O(aoe_mode, SET, NULL), X_,
       "000: aoe_config_file 'tunes only operators with low performance on the network with "
       "AOE': it selects what aoe_mode tunes", NULL),
  /* Profiling */
  RULE(EXCLUSIVE, O(profiling_options, JSON, "training_trace=on"), O(graph_run_mode, IN, "0"),
       O(profiling_mode, TRUE, NULL),
       "000: 'online inference supports task_trace and aicpu but does not support "
       "training_trace'", NULL),
  RULE(EXCLUSIVE, O(profiling_options, JSON, "training_trace=off"),
       O(graph_run_mode, EFF_IN, "1"), O(profiling_mode, TRUE, NULL),
       "000: 'when Profiling is enabled to collect training data, task_trace and training_trace "
       "must be set to on'", NULL),
  RULE(EXCLUSIVE, O(profiling_options, JSON, "task_trace=off"), O(graph_run_mode, EFF_IN, "1"),
       O(profiling_mode, TRUE, NULL),
       "000: 'when Profiling is enabled to collect training data, task_trace and training_trace "
       "must be set to on'", NULL),
  /* Experiment Parameters */
  RULE(EXCLUSIVE, O(experimental_accelerate_train_mode, SET, NULL),
       O(precision_mode, NOT_IN, MIXED_OK), X_,
       "000: 'can be enabled only when precision_mode is set to allow_fp32_to_fp16, "
       "must_keep_origin_dtype, or none'", NULL),
  RULE(EXCLUSIVE, O(experimental_accelerate_train_mode, SET, NULL),
       O(precision_mode_v2, NOT_IN, "origin"), X_,
       "000: 'can be enabled only when precision_mode_v2 is set to origin or none'", NULL),
  RULE(EXCLUSIVE, O(accelerate_train_mode, SET, NULL), O(precision_mode, NOT_IN, MIXED_OK), X_,
       "004: 'can be enabled only when precision_mode is set to allow_fp32_to_fp16, "
       "must_keep_origin_dtype, or none'", NULL),
  RULE(EXCLUSIVE, O(accelerate_train_mode, SET, NULL), O(precision_mode_v2, NOT_IN, "origin"), X_,
       "004: 'can be enabled only when precision_mode_v2 is set to origin or none'", NULL),
  RULE(EXCLUSIVE, O(accelerate_train_mode, SET, NULL),
       O(experimental_accelerate_train_mode, SET, NULL), X_,
       "the same setting under two names (004 ExperimentalConfig, 000 parameter_map): set one",
       NULL),
  RULE(ENV_EXCLUSIVE, E(ENABLE_DYNAMIC_SHAPE_MULTI_STREAM, ENV_IN, "1"),
       O(auto_multistream_parallel_mode, IN, "cv"), X_,
       "000: 'parallel execution of Cube and Vector operators cannot be enabled at the same time "
       "as the multi-stream concurrency function (ENABLE_DYNAMIC_SHAPE_MULTI_STREAM)'", NULL),
  /* Memory */
  RULE(ENV_EXCLUSIVE, E(GE_USE_STATIC_MEMORY, ENV_SET, NULL), O(static_memory_policy, USER, NULL),
       X_, "002 7.4.1: GE_USE_STATIC_MEMORY and static_memory_policy 'cannot be used at the "
       "same time, otherwise they conflict when the network runs'", NULL),
  /* Data Augmentation, quantisation compression, debugging */
  RULE(REQUIRES, O(local_device_list, SET, NULL), O(local_rank_id, SET, NULL), X_,
       "000: local_device_list is 'used in conjunction with local_rank_id'", NULL),
  RULE(EXCLUSIVE, O(enable_compress_weight, TRUE, NULL), O(compress_weight_conf, SET, NULL), X_,
       "002: enable_compress_weight 'cannot be used together with compress_weight_conf'", NULL),
  RULE(PRECEDENCE, O(op_debug_level, NOT_IN, "0"), O(op_compiler_cache_mode, SET, NULL), X_,
       "000: 'if op_debug_level is set to a non-zero value, the op_compiler_cache_mode "
       "configuration is ignored'", NULL),
  /* Stated by the reference, not checkable here: documented only. */
  RULE(NOTE, O(op_debug_config, SET, NULL), O(op_debug_level, IN, "2"), X_,
       "000: op_debug_level=2 'cannot be used together with the oom option in op_debug_config' "
       "(inside the .cfg file, which is not read: no effect on the CPU device)", NULL),
  RULE(NOTE, E(NPU_COLLECT_PATH, ENV_SET, NULL), O(op_debug_config, SET, NULL), X_,
       "000: with NPU_COLLECT_PATH set, op_debug_config 'cannot be set to oom' (inside the .cfg "
       "file, which is not read: no effect on the CPU device)", NULL),
  RULE(NOTE, O(stream_sync_timeout, SET, NULL), O(hccl_timeout, SET, NULL), X_,
       "000: 'in cluster scenarios' stream_sync_timeout 'must be greater than' hccl_timeout "
       "(there are no clusters here)", NULL),
  RULE(NOTE, O(static_memory_policy, IN, "2|4"), X_, X_,
       "000: 'cannot be set to 2 or 4 when multiple graphs are executed concurrently' (met here: "
       "the plans sharing an arena are one session's, which runs one plan at a time)", NULL),
  RULE(NOTE, O(iterations_per_loop, SET, NULL), X_, X_,
       "000: 'the value must be the same as that of iterations_per_loop set by "
       "set_iteration_per_loop' (not checked here: the options do not see the graph's loop)", NULL),
  RULE(NOTE, O(compile_hybrid_mode, IN, "1"), O(external_weight, SET, NULL), X_,
       "000: with compile_hybrid_mode=1 'the system automatically enables' external_weight", NULL),
  RULE(NOTE, O(aoe_config_file, SET, NULL), O(aoe_mode, SET, NULL), X_,
       "000: the file's feature deeper_opat needs aoe_mode=2, nonhomo_split needs aoe_mode=1 "
       "(inside the file, which is not read: no effect on the CPU device)", NULL),
  RULE(NOTE, O(enable_exception_dump, IN, "1"), O(enable_dump, TRUE, NULL), X_,
       "000: for dynamic-shape networks only enable_exception_dump takes effect", NULL),
};

int npu_option_rule_count(void) { return (int)npu_countof(rules); }

const npu_option_rule_info *npu_option_rule_at(int i) {
  return i >= 0 && i < (int)npu_countof(rules) ? &rules[i].info : NULL;
}

/* The effective value of an option as text (for conditions and messages). */
static const char *value_text(const npu_options *o, int id, char *buf, size_t n) {
  const npuO_value *v = effective(o, id);
  switch (specs[id].info.type) {
  case NPU_OPTION_INT: snprintf(buf, n, "%lld", (long long)v->i); return buf;
  case NPU_OPTION_BOOL: return v->i ? "True" : "False";
  case NPU_OPTION_FLOAT: snprintf(buf, n, "%.17g", v->f); return buf;
  case NPU_OPTION_STRING: return npuO_string(o, (npu_option_id)id);
  }
  return "";
}

static int holds(const npu_options *o, const side *s) {
  char buf[64], field[64], want[64];
  const char *eq;
  if (s->id < 0) return 1; /* no guard */
  if (s->is_env) {
    if (!o->env_set[s->id]) return 0;
    return s->cond == C_ENV_SET || str_in_list(s->values, o->env_text[s->id]);
  }
  switch ((cond_kind)s->cond) {
  case C_SET: return o->source[s->id] != 0;
  case C_USER: return o->source[s->id] == NPUO_SRC_USER;
  case C_TRUE: return o->source[s->id] != 0 && effective(o, s->id)->i != 0;
  case C_IN:
    return o->source[s->id] != 0 &&
           str_in_list(s->values, value_text(o, s->id, buf, sizeof buf));
  case C_NOT_IN:
    return o->source[s->id] != 0 &&
           !str_in_list(s->values, value_text(o, s->id, buf, sizeof buf));
  case C_EFF_IN: return str_in_list(s->values, value_text(o, s->id, buf, sizeof buf));
  case C_JSON:
    if (!o->source[s->id] || !(eq = strchr(s->values, '='))) return 0;
    snprintf(field, sizeof field, "%.*s", (int)(eq - s->values), s->values);
    snprintf(want, sizeof want, "%s", eq + 1);
    profiling_field(npuO_string(o, (npu_option_id)s->id), field, buf, sizeof buf);
    return strcmp(buf, want) == 0;
  default: return 0;
  }
}

/* "'name'=value" or "ENV=value" for a message. */
static const char *side_text(const npu_options *o, const side *s, char *buf, size_t n) {
  char v[96];
  if (s->is_env)
    snprintf(buf, n, "environment variable %s=%s", envs[s->id].info.variable,
             o->env_text[s->id] ? o->env_text[s->id] : "");
  else if (!o->source[s->id] && s->cond != C_EFF_IN)
    snprintf(buf, n, "'%s' (not set)", specs[s->id].info.name);
  else {
    const char *q = specs[s->id].info.type == NPU_OPTION_STRING ? "'" : "";
    snprintf(buf, n, "'%s'=%s%.60s%s", specs[s->id].info.name, q,
             value_text(o, s->id, v, sizeof v), q);
  }
  return buf;
}

/* What side b needs to be, for "requires". */
static const char *need_text(const side *s, char *buf, size_t n) {
  const char *name = specs[s->id].info.name;
  switch ((cond_kind)s->cond) {
  case C_TRUE: snprintf(buf, n, "'%s'=True", name); break;
  case C_IN: snprintf(buf, n, "'%s' in %s", name, s->values); break;
  case C_NOT_IN: snprintf(buf, n, "'%s' not in %s", name, s->values); break;
  default: snprintf(buf, n, "'%s' to be set", name); break;
  }
  return buf;
}

npu_status npu_options_check(const npu_options *o) {
  char ta[160], tb[160], why[256];
  npu_status st;
  if (!o) return npuC_error(NULL, NPU_ERR_ARG, "npu_options_check: options is NULL");
  if ((st = npuO_check_device(o, o->ctx))) return st;
  for (size_t i = 0; i < npu_countof(rules); i++) {
    const rule *r = &rules[i];
    int ha, hb;
    if (r->kind == RK_NOTE || !holds(o, &r->g)) continue;
    ha = holds(o, &r->a);
    hb = holds(o, &r->b);
    switch (r->kind) {
    case RK_EXCLUSIVE:
      if (ha && hb)
        return npuC_error(o->ctx, NPU_ERR_CONFLICT, "%s and %s cannot be used together (%s)",
                          side_text(o, &r->a, ta, sizeof ta), side_text(o, &r->b, tb, sizeof tb),
                          r->info.reason);
      break;
    case RK_REQUIRES:
      if (ha && !hb)
        return npuC_error(o->ctx, NPU_ERR_CONFLICT, "%s requires %s, but got %s (%s)",
                          side_text(o, &r->a, ta, sizeof ta), need_text(&r->b, why, sizeof why),
                          side_text(o, &r->b, tb, sizeof tb), r->info.reason);
      break;
    case RK_TOGETHER:
      if (ha != hb) {
        const side *set = ha ? &r->a : &r->b, *unset = ha ? &r->b : &r->a;
        return npuC_error(o->ctx, NPU_ERR_CONFLICT,
                          "'%s' and '%s' must be used together: '%s' is set, '%s' is not (%s)",
                          r->info.a, r->info.b, specs[set->id].info.name,
                          specs[unset->id].info.name, r->info.reason);
      }
      break;
    case RK_MATCH:
      if (ha && hb && r->match(o, why, sizeof why))
        return npuC_error(o->ctx, NPU_ERR_CONFLICT, "'%s' and '%s' do not match: %s (%s)",
                          r->info.a, r->info.b, why, r->info.reason);
      break;
    case RK_PRECEDENCE:
      if (ha && hb)
        npuC_log(o->ctx, 2, "%s takes precedence: %s is ignored (%s)",
                 side_text(o, &r->a, ta, sizeof ta), side_text(o, &r->b, tb, sizeof tb),
                 r->info.reason);
      break;
    case RK_NOTE:
      break;
    }
  }
  return NPU_OK;
}
