/*
 * profile.c — profiling_mode: the time of every step of every run (CLOCK_MONOTONIC, ns),
 * written as CSV summaries and a Chrome-trace timeline when the session closes.
 *
 * The files are complete at every moment a run is not in progress, as of the last checkpoint:
 * after a run, its events and the summaries are written out and trace.json gets its closing
 * metadata (overwritten by the next events), so a process that exits without closing the
 * session (os.exit, a kill between runs) leaves parseable files: trace.json and
 * iteration_trace.csv hold every run that ended; the summaries are rewritten unless the last
 * rewrite took more than 1/CHECKPOINT_SHARE of the time since, which bounds their cost for many
 * short runs (they may then miss the runs of the last moments).
 *
 * Layout (docs/profiling.md): <base>/PROF_<session>_<pid>_<YYYYMMDDhhmmss>/ holding
 * op_summary.csv and op_statistic.csv (task_trace / task_time not off), iteration_trace.csv
 * (training_trace), host_sys.csv (host_sys or host_sys_usage), trace.json and info.json.
 * <base> is profiling_options' output, else $ASCEND_WORK_PATH, else ./npu_out (npuO_output_dir).
 *
 * Invariants:
 *  - The run path pays two clock readings and a few adds a step: a plan's statistics are an
 *    array of counters, one per step (npuE_step.index: the steps nested in cond branches and
 *    loop bodies too, a trace event of a step inside a while loop carrying args.loop_iteration),
 *    made at the plan's first run; events for trace.json and the
 *    iteration rows go into fixed buffers made with the profile, formatted and written out
 *    when a buffer fills (after the step's clock stopped) and at close.  Memory is bounded
 *    however long the session runs; trace.json is streamed and capped by storage_limit.
 *  - After creation the only allocation is a new plan's record.  When it fails the plan runs
 *    unprofiled and the profile says it is truncated (info.json); the run goes on.
 *  - Plan records copy what the summaries need (node names; op and pass names are static),
 *    so a plan dropped from the session's cache is still described at close.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "exec/profile_int.h"
#include "options/options_int.h"

static const char *const task_names[] = {"off", "l0", "l1"};

static inline int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* ns as microseconds with 3 decimals (exact: no floating point). */
static const char *us(char *buf, size_t n, int64_t ns) {
  if (ns < 0) {
    snprintf(buf, n, "-%lld.%03lld", (long long)(-ns / 1000), (long long)(-ns % 1000));
    return buf;
  }
  snprintf(buf, n, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
  return buf;
}

const char *npuE_profile_us(char *buf, size_t n, int64_t ns) { return us(buf, n, ns); }

/* ---- options ---- */

static int hex4(const char *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    int c = (unsigned char)p[i];
    int d = c >= '0' && c <= '9' ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/* A JSON string body decoded in place (profiling_options keeps values as written): \" \\ \/
   \b \f \n \r \t, and \uXXXX as UTF-8 (a surrogate pair joined).  NULL, or why the value
   cannot be decoded: an unknown escape, \u0000 (no C string holds it), a lone surrogate. */
static const char *unescape(char *s) {
  char *w = s;
  for (const char *r = s; *r; r++) {
    if (*r != '\\') {
      *w++ = *r;
      continue;
    }
    char e = r[1];
    char simple = e == '"' || e == '\\' || e == '/' ? e
                  : e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n'
                  : e == 'r' ? '\r' : e == 't' ? '\t' : 0;
    if (simple) {
      *w++ = simple;
      r++;
      continue;
    }
    if (e != 'u') return "an unknown escape (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)";
    long c = hex4(r + 2);
    if (c < 0) return "\\u not followed by four hexadecimal digits";
    r += 5;
    if (c >= 0xDC00 && c <= 0xDFFF) return "a \\u escape that is a lone low surrogate";
    if (c >= 0xD800 && c <= 0xDBFF) {
      long lo = r[1] == '\\' && r[2] == 'u' ? hex4(r + 3) : -1;
      if (lo < 0xDC00 || lo > 0xDFFF) return "a \\u escape that is a lone high surrogate";
      c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
      r += 6;
    }
    if (c == 0) return "\\u0000 (a name or path cannot hold a NUL)";
    if (c < 0x80) {
      *w++ = (char)c;
    } else if (c < 0x800) {
      *w++ = (char)(0xC0 | c >> 6), *w++ = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      *w++ = (char)(0xE0 | c >> 12), *w++ = (char)(0x80 | (c >> 6 & 0x3F));
      *w++ = (char)(0x80 | (c & 0x3F));
    } else {
      *w++ = (char)(0xF0 | c >> 18), *w++ = (char)(0x80 | (c >> 12 & 0x3F));
      *w++ = (char)(0x80 | (c >> 6 & 0x3F)), *w++ = (char)(0x80 | (c & 0x3F));
    }
  }
  *w = 0;
  return NULL;
}

static bool legacy_form(const npu_options *o) {
  const char *s = npuO_string(o, NPUO_profiling_options);
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
  return *s && *s != '{';
}

/* task_time (the newer name) wins over task_trace; default on (= l1).  The older colon form
   lists the switches that are on (op_trace is the operator trace: task_trace). */
static task_level read_task(const npu_options *o) {
  char v[32];
  if (legacy_form(o)) {
    npuO_profiling_field(o, "task_trace", v, sizeof v);
    if (!*v) npuO_profiling_field(o, "op_trace", v, sizeof v);
    return *v ? TASK_L1 : TASK_OFF;
  }
  npuO_profiling_field(o, "task_time", v, sizeof v);
  if (!*v) npuO_profiling_field(o, "task_trace", v, sizeof v);
  if (strcmp(v, "off") == 0) return TASK_OFF;
  if (strcmp(v, "l0") == 0) return TASK_L0;
  return TASK_L1;
}

/* Default: on when training (graph_run_mode 1), off for online inference, which does not
   support it (000; options.c refuses "on" there). */
static bool read_training_trace(const npu_options *o) {
  char v[32];
  npuO_profiling_field(o, "training_trace", v, sizeof v);
  if (legacy_form(o)) return *v != 0;
  if (!*v) return npuO_training(o);
  return strcmp(v, "on") == 0;
}

/* "200MB" (validated) as bytes; unset: 90% of the space free where the files go (000). */
static uint64_t read_storage_limit(const npu_options *o, const char *dir) {
  char v[64];
  npuO_profiling_field(o, "storage_limit", v, sizeof v);
  if (*v) return (uint64_t)(strtod(v, NULL) * 1048576.0);
  struct statvfs fs;
  if (statvfs(dir, &fs) == 0) return (uint64_t)((double)fs.f_bavail * (double)fs.f_frsize * 0.9);
  return UINT64_MAX;
}

/* fp_point / bp_point: the profiling_options field, else the older session option; *from says
   which, for messages. */
static npu_status read_point(npu_context *ctx, const npu_options *o, const char *field,
                             npu_option_id id, char **out, const char **from) {
  char v[1024];
  npuO_profiling_field(o, field, v, sizeof v);
  const char *bad = unescape(v);
  if (bad)
    return npuC_error(ctx, NPU_ERR_OPTION, "profiling_options field %s: %s", field, bad);
  *from = "profiling_options field";
  if (!*v && *npuO_string(o, id)) {
    snprintf(v, sizeof v, "%s", npuO_string(o, id));
    *from = "option";
  }
  return (*out = npuC_strdup(ctx, v)) ? NPU_OK : NPU_ERR_NOMEM;
}

/* ---- the output directory ---- */

/* <base>/PROF_<session>_<pid>_<YYYYMMDDhhmmss>[_n]: a new directory (another context of this
   process may have made one with the same session id in the same second). */
static npu_status make_session_dir(npuE_profile *pr, const npu_options *o) {
  npu_context *ctx = pr->ctx;
  char out[4096];
  const char *base, *what, *from;
  char what_buf[64];
  npuO_profiling_field(o, "output", out, sizeof out);
  if (legacy_form(o)) out[0] = 0;
  const char *bad = unescape(out);
  if (bad) return npuC_error(ctx, NPU_ERR_OPTION, "profiling_options field output: %s", bad);
  for (const char *c = out; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) /* a \u escape the option's check let by */
      return npuC_error(ctx, NPU_ERR_OPTION,
                        "profiling_options field output: the path contains a control character");
  if (*out) {
    base = out;
    what = "profiling_options output";
  } else {
    base = npuO_output_dir(o, &from);
    snprintf(what_buf, sizeof what_buf, "profiling into %s", from);
    what = what_buf;
  }
  time_t now = time(NULL);
  struct tm tm;
  char stamp[32];
  localtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y%m%d%H%M%S", &tm);
  strftime(pr->started, sizeof pr->started, "%Y-%m-%dT%H:%M:%S", &tm);
  size_t n = strlen(base) + 1 + 96; /* room for the name and a _n suffix */
  char path[4096];
  if (n > 3990 || snprintf(path, sizeof path, "%s/PROF_%d_%ld_%s", base, pr->session_id,
                           pr->pid, stamp) >= (int)sizeof path)
    return npuC_error(ctx, NPU_ERR_IO, "%s: path '%s' is too long", what, base);
  if (!(pr->dir = npuC_alloc(ctx, n))) return NPU_ERR_NOMEM;
  npu_status s = npuC_make_unique_dir(ctx, path, what, pr->dir, n);
  if (!s) pr->storage_limit = read_storage_limit(o, base);
  return s;
}

static void free_profile(npu_context *ctx, npuE_profile *pr) {
  for (int i = 0; i < pr->n_plans; i++) npuC_free(ctx, pr->plans[i]);
  npuC_free(ctx, pr->plans);
  npuC_free(ctx, pr->evs);
  npuC_free(ctx, pr->last_evs);
  npuC_free(ctx, pr->iters);
  npuC_free(ctx, pr->fp_point);
  npuC_free(ctx, pr->bp_point);
  npuC_free(ctx, pr->dir);
  npuC_free(ctx, pr);
}

npu_status npuE_profile_new(npu_context *ctx, const npu_options *o, const npuE_observed *who,
                            npuE_profile **out) {
  *out = NULL;
  if (!npuO_bool(o, NPUO_profiling_mode)) return NPU_OK;
  npuE_profile *pr = npuC_calloc(ctx, 1, sizeof *pr);
  if (!pr) return NPU_ERR_NOMEM;
  pr->ctx = ctx;
  pr->session_id = who->session_id;
  pr->device_id = who->device_id;
  pr->pid = (long)getpid();
  pr->task = read_task(o);
  pr->training_trace = read_training_trace(o);
  char v[64];
  npuO_profiling_field(o, "host_sys", v, sizeof v);
  pr->host_cpu = strstr(v, "cpu") != NULL, pr->host_mem = strstr(v, "mem") != NULL;
  npuO_profiling_field(o, "host_sys_usage", v, sizeof v);
  pr->host_cpu |= strstr(v, "cpu") != NULL, pr->host_mem |= strstr(v, "mem") != NULL;
  pr->last_iter_end = -1;
  npu_status s = read_point(ctx, o, "fp_point", NPUO_fp_point, &pr->fp_point, &pr->fp_from);
  if (!s) s = read_point(ctx, o, "bp_point", NPUO_bp_point, &pr->bp_point, &pr->bp_from);
  if (!s && pr->task != TASK_OFF &&
      (!(pr->evs = npuC_alloc(ctx, TRACE_CAP * sizeof *pr->evs)) ||
       !(pr->last_evs = npuC_alloc(ctx, LAST_CAP * sizeof *pr->last_evs))))
    s = NPU_ERR_NOMEM;
  if (!s && pr->training_trace && !(pr->iters = npuC_alloc(ctx, ITER_CAP * sizeof *pr->iters)))
    s = NPU_ERR_NOMEM;
  if (!s) s = make_session_dir(pr, o);
  if (s) {
    free_profile(ctx, pr);
    return s;
  }
  getrusage(RUSAGE_SELF, &pr->ru0);
  pr->t0 = pr->wall0 = now_ns();
  *out = pr;
  return NPU_OK;
}

/* ---- writing ---- */

/* dir/name into buf; false when it does not fit. */
static bool file_path(const npuE_profile *pr, const char *name, char *buf, size_t n) {
  return snprintf(buf, n, "%s/%s", pr->dir, name) < (int)n;
}

/* A failed write while running: the first is reported at close. */
static void write_failed(npuE_profile *pr, const char *file) {
  if (!pr->write_errno) {
    pr->write_errno = errno ? errno : EIO;
    pr->write_file = file;
  }
}

/* s as a JSON string body into buf (at most n - 1 bytes, cut at a character boundary). */
static size_t json_escape(char *buf, size_t n, const char *s) {
  size_t w = 0;
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    char esc[8];
    size_t len = 1;
    if (*c == '"' || *c == '\\') {
      esc[0] = '\\', esc[1] = (char)*c, len = 2;
    } else if (*c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", *c);
      len = 6;
    } else {
      esc[0] = (char)*c;
    }
    if (w + len + 1 > n) {
      while (w > 0 && ((unsigned char)buf[w - 1] & 0xC0) == 0x80) w--; /* no half a character */
      if (w > 0 && ((unsigned char)buf[w - 1] & 0xC0) == 0xC0) w--;
      break;
    }
    memcpy(buf + w, esc, len);
    w += len;
  }
  buf[w] = 0;
  return w;
}

/* The event lines are built by appending (printf costs more than the step it describes):
   bounded, `ok` false once something did not fit. */
typedef struct line {
  char buf[8192];
  size_t len;
  bool ok;
} line;

static void put(line *l, const char *s, size_t n) {
  if (l->len + n >= sizeof l->buf) {
    l->ok = false;
    return;
  }
  memcpy(l->buf + l->len, s, n);
  l->len += n;
}
static void put_str(line *l, const char *s) { put(l, s, strlen(s)); }
static void put_u64(line *l, uint64_t v) {
  char b[24];
  int i = (int)sizeof b;
  do b[--i] = (char)('0' + v % 10); while ((v /= 10) != 0);
  put(l, b + i, sizeof b - (size_t)i);
}
static void put_int(line *l, int64_t v) {
  if (v < 0) put(l, "-", 1);
  put_u64(l, (uint64_t)(v < 0 ? -v : v));
}
/* ns as microseconds with 3 decimals, like us() */
static void put_us(line *l, int64_t ns) {
  if (ns < 0) put(l, "-", 1), ns = -ns;
  put_u64(l, (uint64_t)(ns / 1000));
  char f[4] = {'.', (char)('0' + ns / 100 % 10), (char)('0' + ns / 10 % 10), (char)('0' + ns % 10)};
  put(l, f, 4);
}
/* a JSON string body, at most 2000 bytes of it */
static void put_json(line *l, const char *s) {
  char esc[2001];
  put(l, esc, json_escape(esc, sizeof esc, s));
}

/* One event line into trace.json, unless storage_limit is reached (then it is counted). */
static void trace_put(npuE_profile *pr, const line *l) {
  if (!l->ok || !pr->trace) return;
  if (pr->trace_bytes + l->len + TAIL_RESERVE > pr->storage_limit) {
    pr->n_dropped++;
    return;
  }
  if (fwrite(l->buf, 1, l->len, pr->trace) != l->len) write_failed(pr, "trace.json");
  pr->trace_bytes += l->len;
  pr->n_events++;
}

/* ,\n{"name":"mm","cat":"op","ph":"X","ts":12.345,"dur":1.234,"pid":0,"tid":0,"args":{"op":
   "matmul","plan":1,"step":0,"iteration":5[,"pass":"..."][,"input_shapes":...]}} */
static void step_line(const npuE_profile *pr, const trace_ev *e, bool shapes, line *l) {
  const step_rec *sr = &e->plan->steps[e->step];
  l->len = 0, l->ok = true;
  put_str(l, ",\n{\"name\":\"");
  put_json(l, sr->name);
  put_str(l, "\",\"cat\":\"op\",\"ph\":\"X\",\"ts\":");
  put_us(l, e->start_ns - pr->t0);
  put_str(l, ",\"dur\":");
  put_us(l, e->dur_ns);
  put_str(l, ",\"pid\":");
  put_int(l, pr->device_id);
  put_str(l, ",\"tid\":0,\"args\":{\"op\":\"");
  put_str(l, sr->op);
  put_str(l, "\",\"plan\":");
  put_int(l, e->plan->id);
  put_str(l, ",\"step\":");
  put_int(l, e->step);
  put_str(l, ",\"iteration\":");
  put_u64(l, e->iteration);
  if (e->loop_iteration >= 0) {
    put_str(l, ",\"loop_iteration\":");
    put_int(l, e->loop_iteration);
  }
  if (sr->pass) {
    put_str(l, ",\"pass\":\"");
    put_str(l, sr->pass);
    put_str(l, "\"");
  }
  if (shapes) {
    static const char *const keys[] = {",\"input_shapes\":\"", "\",\"input_dtypes\":\"",
                                       "\",\"output_shapes\":\"", "\",\"output_dtypes\":\""};
    const char *vals[] = {sr->in_shapes, sr->in_dtypes, sr->out_shapes, sr->out_dtypes};
    for (int i = 0; i < 4; i++) {
      put_str(l, keys[i]);
      put_str(l, vals[i]); /* digits, brackets, dtype names: nothing to escape */
    }
    put_str(l, "\"");
  }
  put_str(l, "}}");
}

/* Before the buffer is emptied: the last iteration's events are kept for report.html's
   timeline (those from iter_first replace the kept ones; with iter_first -1 the buffer
   continues the kept iteration), and each event competes for the slowest SLOW_N. */
static void keep_for_report(npuE_profile *pr) {
  int from = pr->iter_first < 0 ? 0 : pr->iter_first;
  if (pr->iter_first >= 0 && pr->n_evs > from) pr->n_last = 0, pr->n_last_total = 0;
  if (pr->iter_first < 0 || pr->n_evs > from) {
    for (int i = from; i < pr->n_evs; i++)
      if (pr->n_last < LAST_CAP) pr->last_evs[pr->n_last++] = pr->evs[i];
    pr->n_last_total += (uint64_t)(pr->n_evs - from);
    pr->iter_first = -1;
  } else {
    pr->iter_first = 0; /* a new iteration with no event yet: its events start the buffer */
  }
  for (int i = 0; i < pr->n_evs; i++) {
    const trace_ev *e = &pr->evs[i];
    if (pr->n_slow == SLOW_N && e->dur_ns <= pr->slow[SLOW_N - 1].dur_ns) continue;
    int j = pr->n_slow < SLOW_N ? pr->n_slow++ : SLOW_N - 1;
    while (j > 0 && pr->slow[j - 1].dur_ns < e->dur_ns) {
      pr->slow[j] = pr->slow[j - 1];
      j--;
    }
    pr->slow[j] = *e;
  }
}

static void flush_steps(npuE_profile *pr) {
  line l;
  keep_for_report(pr);
  for (int i = 0; i < pr->n_evs; i++) {
    step_line(pr, &pr->evs[i], pr->task == TASK_L1, &l);
    if (!l.ok) step_line(pr, &pr->evs[i], false, &l); /* shapes too long for one line */
    trace_put(pr, &l);
  }
  pr->n_evs = 0;
}

static void flush_iterations(npuE_profile *pr) {
  line l;
  for (int i = 0; i < pr->n_iters; i++) {
    const iter_ev *e = &pr->iters[i];
    bool span = e->fp_ns >= 0 && e->bp_ns >= 0;
    /* iteration_trace.csv */
    l.len = 0, l.ok = true;
    put_u64(&l, e->iteration);
    put(&l, ",", 1);
    put_int(&l, e->plan_id);
    put(&l, ",", 1);
    put_us(&l, e->start_ns - pr->t0);
    put(&l, ",", 1);
    put_us(&l, e->end_ns - pr->t0);
    put(&l, ",", 1);
    put_us(&l, e->end_ns - e->start_ns);
    put(&l, ",", 1);
    if (e->fp_ns >= 0) put_us(&l, e->fp_ns - pr->t0);
    put(&l, ",", 1);
    if (e->bp_ns >= 0) put_us(&l, e->bp_ns - pr->t0);
    put(&l, ",", 1);
    if (span) put_us(&l, e->bp_ns - e->fp_ns);
    put(&l, ",", 1);
    if (e->bp_ns >= 0) put_us(&l, e->end_ns - e->bp_ns);
    put(&l, ",", 1);
    if (e->gap_ns >= 0) put_us(&l, e->gap_ns);
    put(&l, "\n", 1);
    if (pr->iter_csv && fwrite(l.buf, 1, l.len, pr->iter_csv) != l.len)
      write_failed(pr, "iteration_trace.csv");
    /* trace.json, on thread 1 */
    l.len = 0;
    put_str(&l, ",\n{\"name\":\"iteration ");
    put_u64(&l, e->iteration);
    put_str(&l, "\",\"cat\":\"iteration\",\"ph\":\"X\",\"ts\":");
    put_us(&l, e->start_ns - pr->t0);
    put_str(&l, ",\"dur\":");
    put_us(&l, e->end_ns - e->start_ns);
    put_str(&l, ",\"pid\":");
    put_int(&l, pr->device_id);
    put_str(&l, ",\"tid\":1,\"args\":{\"plan\":");
    put_int(&l, e->plan_id);
    put_str(&l, ",\"iteration\":");
    put_u64(&l, e->iteration);
    if (span) {
      put_str(&l, ",\"fp_bp_us\":");
      put_us(&l, e->bp_ns - e->fp_ns);
    }
    put_str(&l, "}}");
    trace_put(pr, &l);
  }
  pr->n_iters = 0;
}

static const char iter_header[] =
    "iteration_id,plan_id,start_us,end_us,duration_us,fp_start_us,bp_end_us,fp_bp_us,"
    "grad_refresh_us,gap_us\n";

/* trace.json's head, and iteration_trace.csv's: at the first run (or at close, when there
   was none, so the files are always there). */
static npu_status open_streams(npuE_profile *pr) {
  char path[4200];
  if (!pr->trace) {
    if (!file_path(pr, "trace.json", path, sizeof path) || !(pr->trace = fopen(path, "w")))
      return npuC_error(pr->ctx, NPU_ERR_IO, "profiling: cannot create '%s': %s", path,
                        strerror(errno));
    int len = fprintf(pr->trace,
                      "{\"traceEvents\":[\n"
                      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                      "\"args\":{\"name\":\"NPU device %d (session %d)\"}},\n"
                      "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                      "\"args\":{\"name\":\"steps\"}}",
                      pr->device_id, pr->device_id, pr->session_id, pr->device_id);
    if (pr->training_trace && len > 0)
      len += fprintf(pr->trace,
                     ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,"
                     "\"args\":{\"name\":\"iterations\"}}",
                     pr->device_id);
    if (len < 0) write_failed(pr, "trace.json");
    else pr->trace_bytes = (uint64_t)len;
  }
  if (pr->training_trace && !pr->iter_csv) {
    if (!file_path(pr, "iteration_trace.csv", path, sizeof path) ||
        !(pr->iter_csv = fopen(path, "w")))
      return npuC_error(pr->ctx, NPU_ERR_IO, "profiling: cannot create '%s': %s", path,
                        strerror(errno));
    if (fputs(iter_header, pr->iter_csv) < 0) write_failed(pr, "iteration_trace.csv");
  }
  return NPU_OK;
}

/* ---- plans ---- */

/* The shapes ("[2,3];[4]") or dtypes ("float32;int32") of n values, written at buf when it is
   not NULL; returns the length. */
static size_t value_list(char *buf, const npuE_plan *p, int n, const int *ids, bool dtypes) {
  size_t len = 0;
  for (int i = 0; i < n; i++) {
    char one[256];
    const npuG_value *v = &p->values[ids[i]];
    if (dtypes) snprintf(one, sizeof one, "%s", npu_dtype_name(v->dtype));
    else npuC_shape_str(one, sizeof one, v->ndim, v->shape);
    size_t l = strlen(one);
    if (buf) {
      if (i) buf[len] = ';';
      memcpy(buf + len + (i ? 1 : 0), one, l);
    }
    len += l + (i ? 1 : 0);
  }
  return len;
}

static const char *node_name(const npu_graph *g, int node) {
  return node >= 0 && node < g->n_nodes ? g->nodes[node].name : "?";
}

/* The step running node `name` (its own, or a fused step that absorbed it): -1 when the plan
   does not run it (pruned, folded); NPU_ERR_NOT_FOUND when the graph has no such node. */
static npu_status find_point(npuE_profile *pr, const npu_graph *g, const npuE_plan *p,
                             const char *name, const char *field, const char *from, int dflt,
                             int *out) {
  *out = dflt;
  if (!*name) return NPU_OK;
  int node = npuG_find_node(g, name);
  *out = -1;
  if (node < 0)
    return npuC_error(pr->ctx, NPU_ERR_NOT_FOUND,
                      "profiling: %s %s names no node of the graph: '%s'", from, field, name);
  for (int k = 0; k < p->n_steps && *out < 0; k++) {
    const npuE_step *s = &p->steps[k];
    if (s->node == node) *out = k;
    for (int i = 0; i < s->n_absorbed && *out < 0; i++)
      if (s->absorbed[i] == node) *out = k;
  }
  return NPU_OK;
}

/* A record for plan p, seen for the first time.  *out NULL (and NPU_OK) when memory is short:
   the profile is then truncated. */
static npu_status add_plan(npuE_profile *pr, const npuE_state *st, const npuE_plan *p,
                           plan_rec **out) {
  npu_context *ctx = pr->ctx;
  const npu_graph *g = st->graph;
  *out = NULL;
  int fp, bp;
  npu_status s = find_point(pr, g, p, pr->fp_point, "fp_point", pr->fp_from, 0, &fp);
  if (!s) s = find_point(pr, g, p, pr->bp_point, "bp_point", pr->bp_from, p->n_steps - 1, &bp);
  if (s) return s;
  bool l1 = pr->task == TASK_L1;
  size_t text = 0;
  for (int k = 0; k < p->n_all_steps; k++) {
    const npuE_step *sp = p->all_steps[k];
    text += strlen(node_name(g, sp->node)) + 1;
    if (l1)
      text += value_list(NULL, p, sp->n_in, sp->in, false) +
              value_list(NULL, p, sp->n_in, sp->in, true) +
              value_list(NULL, p, sp->n_out, sp->out, false) +
              value_list(NULL, p, sp->n_out, sp->out, true) + 4;
  }
  if (pr->n_plans == pr->cap_plans) {
    int cap = pr->cap_plans ? 2 * pr->cap_plans : 8;
    plan_rec **grown = npuC_realloc(ctx, pr->plans, (size_t)cap * sizeof *grown);
    if (!grown) goto nomem;
    pr->plans = grown, pr->cap_plans = cap;
  }
  plan_rec *r = npuC_alloc(ctx, sizeof *r + (size_t)p->n_all_steps * sizeof(step_rec) + text + 1);
  if (!r) goto nomem;
  *r = (plan_rec){.id = p->id, .n_steps = p->n_all_steps, .fp_step = fp, .bp_step = bp,
                  .steps = (step_rec *)(r + 1)};
  char *t = (char *)(r->steps + p->n_all_steps);
  *t = 0;
  const char *empty = t++;
  for (int k = 0; k < p->n_all_steps; k++) {
    const npuE_step *sp = p->all_steps[k];
    step_rec *sr = &r->steps[k];
    *sr = (step_rec){.op = sp->def->name, .pass = sp->pass, .in_shapes = empty,
                     .in_dtypes = empty, .out_shapes = empty, .out_dtypes = empty};
    size_t l = strlen(node_name(g, sp->node)) + 1;
    sr->name = memcpy(t, node_name(g, sp->node), l);
    t += l;
    if (!l1) continue;
    const char **fields[] = {&sr->in_shapes, &sr->in_dtypes, &sr->out_shapes, &sr->out_dtypes};
    for (int f = 0; f < 4; f++) {
      *fields[f] = t;
      t += value_list(t, p, f < 2 ? sp->n_in : sp->n_out, f < 2 ? sp->in : sp->out, f % 2);
      *t++ = 0;
    }
  }
  pr->plans[pr->n_plans++] = r;
  *out = r;
  return NPU_OK;
nomem:
  pr->n_nomem_runs++;
  for (int i = 0; i < pr->n_nomem_plans && i < NOMEM_IDS; i++)
    if (pr->nomem_ids[i] == p->id) return NPU_OK; /* the same plan, again */
  if (pr->n_nomem_plans < NOMEM_IDS) pr->nomem_ids[pr->n_nomem_plans] = p->id;
  pr->n_nomem_plans++;
  return NPU_OK;
}

static plan_rec *find_plan(npuE_profile *pr, int id) {
  for (int i = pr->n_plans - 1; i >= 0; i--)
    if (pr->plans[i]->id == id) return pr->plans[i];
  return NULL;
}

/* ---- events ---- */

static void checkpoint(npuE_profile *pr);

npu_status npuE_profile_event(npuE_profile *pr, npuE_state *st, const npuE_plan *p,
                              npuE_event e, int k) {
  switch (e) {
  case NPUE_STEP_BEGIN:
    pr->step_start[st->nest.level < NPUE_MAX_LOOPS ? st->nest.level : NPUE_MAX_LOOPS] = now_ns();
    return NPU_OK;
  case NPUE_STEP_END: {
    int level = st->nest.level < NPUE_MAX_LOOPS ? st->nest.level : NPUE_MAX_LOOPS;
    int64_t end = now_ns(), start = pr->step_start[level], d = end - start;
    plan_rec *r = pr->cur;
    if (!r) return NPU_OK;
    if (pr->task != TASK_OFF) {
      step_rec *sr = &r->steps[k];
      if (!sr->count++ || d < sr->min_ns) sr->min_ns = d;
      if (d > sr->max_ns) sr->max_ns = d;
      sr->total_ns += d;
      int depth = st->nest.depth;
      pr->evs[pr->n_evs++] = (trace_ev){
          .start_ns = start, .dur_ns = d, .iteration = pr->iteration, .plan = r, .step = k,
          .level = st->nest.level,
          .loop_iteration = depth ? st->nest.iteration[depth <= NPUE_MAX_LOOPS ? depth - 1
                                                                               : NPUE_MAX_LOOPS - 1]
                                  : -1};
      /* only a plan with more steps than the buffer fills it inside an iteration (see
         ITER_END and RUN_BEGIN) */
      if (pr->n_evs == TRACE_CAP) flush_steps(pr);
    }
    if (k == r->fp_step) pr->iter_fp = start;
    if (k == r->bp_step) pr->iter_bp = end;
    return NPU_OK;
  }
  case NPUE_ITER_BEGIN:
    pr->iteration = st->n_iterations;
    pr->iter_first = pr->n_evs;
    pr->iter_fp = pr->iter_bp = -1;
    pr->iter_start = now_ns();
    return NPU_OK;
  case NPUE_ITER_END: {
    int64_t end = now_ns();
    if (!pr->cur) return NPU_OK;
    pr->cur->iterations++;
    /* the buffer is written out between iterations, after `end` was read, so that the next
       iteration's steps fit without a write inside it */
    if (pr->evs && TRACE_CAP - pr->n_evs < pr->cur->n_steps) flush_steps(pr);
    if (!pr->training_trace) return NPU_OK;
    pr->iters[pr->n_iters++] = (iter_ev){
        .iteration = pr->iteration, .plan_id = pr->cur->id, .start_ns = pr->iter_start,
        .end_ns = end, .fp_ns = pr->iter_fp, .bp_ns = pr->iter_bp,
        .gap_ns = pr->last_iter_end >= 0 ? pr->iter_start - pr->last_iter_end : -1};
    pr->last_iter_end = end;
    if (pr->n_iters == ITER_CAP) flush_iterations(pr);
    return NPU_OK;
  }
  case NPUE_RUN_BEGIN: {
    pr->cur = NULL;
    pr->runs++;
    npu_status s = open_streams(pr);
    if (s) return s;
    plan_rec *r = pr->last && pr->last->id == p->id ? pr->last : find_plan(pr, p->id);
    if (!r && (s = add_plan(pr, st, p, &r))) return s;
    if (!r) return NPU_OK; /* no memory for its record: this run is not profiled */
    pr->cur = pr->last = r;
    /* room for the first iteration's steps (the last run may have been another plan's) */
    if (pr->evs && TRACE_CAP - pr->n_evs < r->n_steps) flush_steps(pr);
    return NPU_OK;
  }
  case NPUE_RUN_END:
    pr->cur = NULL;
    checkpoint(pr);
    return NPU_OK;
  }
  return NPU_OK;
}

/* ---- the summaries, at close ---- */

static FILE *open_file(npuE_profile *pr, const char *name) {
  char path[4200];
  FILE *f = file_path(pr, name, path, sizeof path) ? fopen(path, "w") : NULL;
  if (!f)
    npuC_error(pr->ctx, NPU_ERR_IO, "profiling: cannot create '%s': %s", path, strerror(errno));
  return f;
}

static npu_status close_file(npuE_profile *pr, FILE *f, const char *name) {
  bool bad = ferror(f) != 0;
  int err = errno;
  if (fclose(f) != 0) bad = true, err = errno;
  if (bad)
    return npuC_error(pr->ctx, NPU_ERR_IO, "profiling: cannot write '%s/%s': %s", pr->dir, name,
                      strerror(err ? err : EIO));
  return NPU_OK;
}

static npu_status write_op_summary(npuE_profile *pr) {
  FILE *f = open_file(pr, "op_summary.csv");
  if (!f) return NPU_ERR_IO;
  fputs("plan_id,step,op_name,op_type,pass,count,total_us,avg_us,min_us,max_us", f);
  fputs(pr->task == TASK_L1 ? ",input_shapes,input_dtypes,output_shapes,output_dtypes\n" : "\n", f);
  for (int i = 0; i < pr->n_plans; i++) {
    const plan_rec *r = pr->plans[i];
    for (int k = 0; k < r->n_steps; k++) {
      const step_rec *sr = &r->steps[k];
      char a[32], b[32], c[32], d[32];
      fprintf(f, "%d,%d,", r->id, k);
      npuC_csv_field(f, sr->name);
      fprintf(f, ",%s,%s,%llu,%s,", sr->op, sr->pass ? sr->pass : "",
              (unsigned long long)sr->count, us(a, sizeof a, sr->total_ns));
      if (sr->count)
        fprintf(f, "%s,%s,%s", us(b, sizeof b, sr->total_ns / (int64_t)sr->count),
                us(c, sizeof c, sr->min_ns), us(d, sizeof d, sr->max_ns));
      else
        fputs(",,", f);
      if (pr->task == TASK_L1) {
        const char *cols[] = {sr->in_shapes, sr->in_dtypes, sr->out_shapes, sr->out_dtypes};
        for (int j = 0; j < 4; j++) {
          fputc(',', f);
          npuC_csv_field(f, cols[j]);
        }
      }
      fputc('\n', f);
    }
  }
  return close_file(pr, f, "op_summary.csv");
}

static int by_total(const void *a, const void *b) {
  const npuE_op_total *x = a, *y = b;
  if (x->total_ns != y->total_ns) return x->total_ns < y->total_ns ? 1 : -1;
  return strcmp(x->op, y->op);
}

npu_status npuE_profile_op_totals(npuE_profile *pr, npuE_op_total **out, size_t *n_out,
                                  int64_t *all_out) {
  size_t n_steps = 0;
  for (int i = 0; i < pr->n_plans; i++) n_steps += (size_t)pr->plans[i]->n_steps;
  npuE_op_total *t = npuC_calloc(pr->ctx, n_steps ? n_steps : 1, sizeof *t);
  *out = t;
  if (!t) return NPU_ERR_NOMEM;
  size_t n = 0;
  int64_t all = 0;
  for (int i = 0; i < pr->n_plans; i++)
    for (int k = 0; k < pr->plans[i]->n_steps; k++) {
      const step_rec *sr = &pr->plans[i]->steps[k];
      if (!sr->count) continue;
      size_t j = 0;
      while (j < n && strcmp(t[j].op, sr->op) != 0) j++;
      if (j == n) t[n++] = (npuE_op_total){.op = sr->op, .min_ns = sr->min_ns};
      if (sr->min_ns < t[j].min_ns) t[j].min_ns = sr->min_ns;
      if (sr->max_ns > t[j].max_ns) t[j].max_ns = sr->max_ns;
      t[j].count += sr->count;
      t[j].total_ns += sr->total_ns;
      all += sr->total_ns;
    }
  qsort(t, n, sizeof *t, by_total);
  *n_out = n;
  *all_out = all;
  return NPU_OK;
}

static npu_status write_op_statistic(npuE_profile *pr) {
  npuE_op_total *t;
  size_t n;
  int64_t all;
  if (npuE_profile_op_totals(pr, &t, &n, &all))
    return npuC_error(pr->ctx, NPU_ERR_NOMEM, "profiling: op_statistic.csv: out of memory");
  FILE *f = open_file(pr, "op_statistic.csv");
  if (!f) {
    npuC_free(pr->ctx, t);
    return NPU_ERR_IO;
  }
  fputs("op_type,count,total_us,avg_us,min_us,max_us,ratio_percent\n", f);
  for (size_t j = 0; j < n; j++) {
    char a[32], b[32], c[32], d[32];
    fprintf(f, "%s,%llu,%s,%s,%s,%s,%.3f\n", t[j].op, (unsigned long long)t[j].count,
            us(a, sizeof a, t[j].total_ns), us(b, sizeof b, t[j].total_ns / (int64_t)t[j].count),
            us(c, sizeof c, t[j].min_ns), us(d, sizeof d, t[j].max_ns),
            all > 0 ? 100.0 * (double)t[j].total_ns / (double)all : 0.0);
  }
  npuC_free(pr->ctx, t);
  return close_file(pr, f, "op_statistic.csv");
}

static double seconds(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6; }

/* host_sys cpu / mem: the process's CPU time and memory from the profile's creation to its
   close (getrusage: process-wide, every thread and session of the process counts). */
static npu_status write_host_sys(npuE_profile *pr) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double wall = (double)(now_ns() - pr->wall0) * 1e-9;
  FILE *f = open_file(pr, "host_sys.csv");
  if (!f) return NPU_ERR_IO;
  fputs("metric,value,unit\n", f);
  if (pr->host_cpu) {
    double user = seconds(ru.ru_utime) - seconds(pr->ru0.ru_utime);
    double sys = seconds(ru.ru_stime) - seconds(pr->ru0.ru_stime);
    fprintf(f, "wall_time,%.6f,s\nuser_cpu_time,%.6f,s\nsystem_cpu_time,%.6f,s\n", wall, user,
            sys);
    fprintf(f, "cpu_utilization,%.2f,%%\n", wall > 0 ? 100.0 * (user + sys) / wall : 0.0);
  }
  if (pr->host_mem) {
    fprintf(f, "peak_rss,%ld,KiB\n", ru.ru_maxrss);
    fprintf(f, "device_memory_peak,%zu,bytes\n", atomic_load(&pr->ctx->peak_bytes));
    fprintf(f, "device_memory_live,%zu,bytes\n", atomic_load(&pr->ctx->live_bytes));
  }
  return close_file(pr, f, "host_sys.csv");
}

static void json_str(FILE *f, const char *s) {
  char buf[2048];
  json_escape(buf, sizeof buf, s);
  fprintf(f, "\"%s\"", buf);
}

/* Whether something is missing from the profile: events past storage_limit, plans whose
   statistics could not be allocated. */
static bool truncated(const npuE_profile *pr) { return pr->n_dropped || pr->n_nomem_plans; }

static npu_status write_info(npuE_profile *pr) {
  uint64_t iterations = 0;
  for (int i = 0; i < pr->n_plans; i++) iterations += pr->plans[i]->iterations;
  FILE *f = open_file(pr, "info.json");
  if (!f) return NPU_ERR_IO;
  fprintf(f, "{\n  \"producer\": \"lua-npu\",\n  \"session_id\": %d,\n  \"device_id\": %d,\n"
             "  \"pid\": %ld,\n  \"started\": \"%s\",\n  \"task_trace\": \"%s\",\n"
             "  \"training_trace\": %s,\n  \"fp_point\": ",
          pr->session_id, pr->device_id, pr->pid, pr->started, task_names[pr->task],
          pr->training_trace ? "true" : "false");
  json_str(f, pr->fp_point);
  fputs(",\n  \"bp_point\": ", f);
  json_str(f, pr->bp_point);
  fprintf(f, ",\n  \"storage_limit_bytes\": %llu,\n  \"runs\": %llu,\n  \"plans\": %d,\n"
             "  \"iterations\": %llu,\n  \"trace_events\": %llu,\n"
             "  \"trace_events_dropped\": %llu,\n  \"plans_unprofiled_out_of_memory\": %d,\n"
             "  \"runs_unprofiled_out_of_memory\": %llu,\n  \"truncated\": %s,\n  \"notes\": [",
          (unsigned long long)pr->storage_limit, (unsigned long long)pr->runs, pr->n_plans,
          (unsigned long long)iterations, (unsigned long long)pr->n_events,
          (unsigned long long)pr->n_dropped, pr->n_nomem_plans,
          (unsigned long long)pr->n_nomem_runs, truncated(pr) ? "true" : "false");
  const char *sep = "";
  if (pr->n_dropped) {
    fprintf(f, "\"storage_limit reached: %llu events left out of trace.json\"",
            (unsigned long long)pr->n_dropped);
    sep = ", ";
  }
  if (pr->n_nomem_runs)
    fprintf(f, "%s\"out of memory for the statistics of %d new plan(s): %llu of their runs are "
               "missing from every file (a later run of such a plan tries again)\"", sep,
            pr->n_nomem_plans, (unsigned long long)pr->n_nomem_runs);
  fputs("]\n}\n", f);
  return close_file(pr, f, "info.json");
}

/* trace.json's end: the metadata (otherData) and the closing brackets, written where the
   events end; the file is cut there (a checkpoint's longer end may have been there). */
static void put_trace_tail(npuE_profile *pr) {
  int n = fprintf(pr->trace,
          "\n],\n\"otherData\":{\"producer\":\"lua-npu\",\"session_id\":%d,\"device_id\":%d,"
          "\"pid\":%ld,\"task_trace\":\"%s\",\"events\":%llu,\"events_dropped\":%llu,"
          "\"storage_limit_bytes\":%llu,\"truncated\":%s}}\n",
          pr->session_id, pr->device_id, pr->pid, task_names[pr->task],
          (unsigned long long)pr->n_events, (unsigned long long)pr->n_dropped,
          (unsigned long long)pr->storage_limit, truncated(pr) ? "true" : "false");
  /* the events end at trace_bytes (every byte written is counted there) */
  long end = n > 0 && fflush(pr->trace) == 0 ? (long)pr->trace_bytes + n : -1;
  if (end < 0) write_failed(pr, "trace.json");
  else if (end < pr->trace_end && ftruncate(fileno(pr->trace), (off_t)end) != 0)
    write_failed(pr, "trace.json");
  else pr->trace_end = end;
}

static npu_status finish_trace(npuE_profile *pr) {
  put_trace_tail(pr);
  FILE *f = pr->trace;
  pr->trace = NULL;
  return close_file(pr, f, "trace.json");
}

/* The summaries from the statistics so far (at close, and at checkpoints); the first failure
   is returned (its message set), the others still tried. */
static npu_status write_summaries(npuE_profile *pr) {
  npu_status first = NPU_OK, s;
  if (pr->task != TASK_OFF) {
    if ((s = write_op_summary(pr)) && !first) first = s;
    if ((s = write_op_statistic(pr)) && !first) first = s;
  }
  if ((s = npuE_profile_write_html(pr)) && !first) first = s;
  if ((pr->host_cpu || pr->host_mem) && (s = write_host_sys(pr)) && !first) first = s;
  if ((s = write_info(pr)) && !first) first = s;
  return first;
}

enum { CHECKPOINT_SHARE = 20 }; /* summaries at a checkpoint cost at most 1/20 of the time */

/* After a run: its events and iterations written out and trace.json ended (the next events
   overwrite the end), then the summaries rewritten unless the last rewrite took more than
   1/CHECKPOINT_SHARE of the time since it ended (rewriting five files can take milliseconds:
   many short runs would otherwise pay that each).  A failure is logged once and stops the
   checkpoints (the close reports it again). */
static void checkpoint(npuE_profile *pr) {
  if (pr->checkpoint_off || !pr->trace) return;
  if (pr->evs) flush_steps(pr);
  if (pr->iters) flush_iterations(pr);
  if (pr->iter_csv && fflush(pr->iter_csv) != 0) write_failed(pr, "iteration_trace.csv");
  put_trace_tail(pr);
  if (fseek(pr->trace, (long)pr->trace_bytes, SEEK_SET) != 0) write_failed(pr, "trace.json");
  npu_status s = NPU_OK;
  int64_t start = now_ns();
  if (!pr->write_errno &&
      start - pr->checkpoint_end_ns >= CHECKPOINT_SHARE * pr->checkpoint_cost_ns) {
    s = write_summaries(pr);
    pr->checkpoint_end_ns = now_ns();
    pr->checkpoint_cost_ns = pr->checkpoint_end_ns - start;
  }
  if (pr->write_errno || s) {
    pr->checkpoint_off = true;
    if (s) npuC_log(pr->ctx, 2, "%s", npu_context_errmsg(pr->ctx));
    else npuC_log(pr->ctx, 2, "profiling: cannot write '%s/%s': %s", pr->dir, pr->write_file,
                  strerror(pr->write_errno));
  }
}

void npuE_profile_free(npu_context *ctx, npuE_profile *pr) {
  if (!pr) return;
  npu_status s = open_streams(pr); /* when no run opened them */
  if (s) npuC_log(ctx, 2, "%s", npu_context_errmsg(ctx));
  if (pr->evs) flush_steps(pr);
  if (pr->iters) flush_iterations(pr);
  if (pr->write_errno)
    npuC_log(ctx, 2, "profiling: cannot write '%s/%s': %s", pr->dir, pr->write_file,
             strerror(pr->write_errno));
  if (pr->iter_csv && close_file(pr, pr->iter_csv, "iteration_trace.csv"))
    npuC_log(ctx, 2, "%s", npu_context_errmsg(ctx));
  pr->iter_csv = NULL;
  if (pr->trace && finish_trace(pr)) npuC_log(ctx, 2, "%s", npu_context_errmsg(ctx));
  if (pr->task != TASK_OFF) {
    if (write_op_summary(pr)) npuC_log(ctx, 2, "%s", npu_context_errmsg(ctx));
    if (write_op_statistic(pr)) npuC_log(ctx, 2, "%s", npu_context_errmsg(ctx));
  }
  if (npuE_profile_write_html(pr)) npuC_log(ctx, 2, "%s", npu_context_errmsg(ctx));
  if ((pr->host_cpu || pr->host_mem) && write_host_sys(pr))
    npuC_log(ctx, 2, "%s", npu_context_errmsg(ctx));
  if (write_info(pr)) npuC_log(ctx, 2, "%s", npu_context_errmsg(ctx));
  free_profile(ctx, pr);
}
