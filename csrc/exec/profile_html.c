/*
 * profile_html.c — report.html, the profile as one self-contained page (docs/profiling.md):
 * the time by step (op_summary.csv's rows, longest total first) and by op type
 * (op_statistic.csv's), sortable by clicking a column; a timeline of the last iteration drawn
 * as inline SVG (a lane per nesting level: a cond or while step spans the steps it ran); the
 * slowest step executions of the session.  No external resource, no server: CSS, SVG and the
 * few lines of script that sort the tables are in the file.
 *
 * Invariants: written at close from what exec/profile.c collected (profile_int.h), after the
 * CSVs; times are printed as the CSVs print them (µs, 3 decimals, exact), so the numbers can be
 * found in both.  Each sortable cell carries its value in data-v (ns or a count).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/profile_int.h"

enum {
  TL_WIDTH = 1000, /* the timeline's drawing width, px */
  TL_LANE = 22,    /* height of a nesting level's lane */
  TL_AXIS = 26,    /* the time axis below the lanes */
  TL_LEFT = 24     /* margin left of time 0 (its tick label is centred on it) */
};

/* s as HTML text (also fit for a quoted attribute). */
static void html_text(FILE *f, const char *s) {
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
    switch (*c) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default:
      if (*c >= 0x20 || *c == '\t') fputc(*c, f);
    }
  }
}

static void put_us(FILE *f, int64_t ns) {
  char b[32];
  fputs(npuE_profile_us(b, sizeof b, ns), f);
}

/* A td holding a time, sortable by its ns. */
static void td_us(FILE *f, int64_t ns) {
  fprintf(f, "<td class=\"n\" data-v=\"%lld\">", (long long)ns);
  put_us(f, ns);
  fputs("</td>", f);
}

static void td_count(FILE *f, uint64_t n) {
  fprintf(f, "<td class=\"n\" data-v=\"%llu\">%llu</td>", (unsigned long long)n,
          (unsigned long long)n);
}

static void td_text(FILE *f, const char *s) {
  fputs("<td>", f);
  html_text(f, s);
  fputs("</td>", f);
}

/* An op type's colour: a hue from its name (the same op, the same colour everywhere). */
static unsigned hue(const char *op) {
  unsigned h = 2166136261u;
  for (const unsigned char *c = (const unsigned char *)op; *c; c++) h = (h ^ *c) * 16777619u;
  return h % 360;
}

static const char style[] =
    "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}"
    "h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}"
    "table{border-collapse:collapse;margin:.5em 0}"
    "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}"
    "th{background:#f0f0f0;cursor:pointer;user-select:none}"
    "th[aria-sort=descending]::after{content:' \\25BC'}"
    "th[aria-sort=ascending]::after{content:' \\25B2'}"
    ".meta{color:#555}.note{color:#a40}"
    "svg text{font:11px monospace}.legend span{display:inline-block;margin-right:1em}"
    ".legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:middle}";

/* Sorting by a header click (or #sort=<data-key>[-asc] in the address, which the specs use). */
static const char script[] =
    "(function(){\n"
    "function sortTable(t,col,asc){var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows),"
    "h=t.tHead.rows[0].cells,num=h[col].getAttribute('data-type')==='num';\n"
    "rows.sort(function(x,y){var a=x.cells[col],c=y.cells[col],d;"
    "if(num)d=parseFloat(a.getAttribute('data-v'))-parseFloat(c.getAttribute('data-v'));"
    "else d=a.textContent.localeCompare(c.textContent);return asc?d:-d;});\n"
    "rows.forEach(function(r){b.appendChild(r);});\n"
    "for(var i=0;i<h.length;i++)h[i].removeAttribute('aria-sort');"
    "h[col].setAttribute('aria-sort',asc?'ascending':'descending');}\n"
    "var tables=document.querySelectorAll('table.sortable');\n"
    "tables.forEach(function(t){var h=t.tHead.rows[0].cells;"
    "Array.prototype.forEach.call(h,function(th,i){th.addEventListener('click',function(){"
    "sortTable(t,i,th.getAttribute('aria-sort')==='descending');});});});\n"
    "var m=/sort=([a-z_]+)(-asc)?/.exec(location.hash);\n"
    "if(m)tables.forEach(function(t){var h=t.tHead.rows[0].cells;"
    "for(var i=0;i<h.length;i++)if(h[i].getAttribute('data-key')===m[1])sortTable(t,i,!!m[2]);});\n"
    "})();\n";

/* <thead> from "key:label:num|text" triples; col `sorted` marked descending. */
static void thead(FILE *f, const char *const *cols, int n, int sorted) {
  fputs("<thead><tr>", f);
  for (int i = 0; i < n; i++) {
    const char *c = cols[i], *a = strchr(c, ':'), *b = strchr(a + 1, ':');
    fprintf(f, "<th data-key=\"%.*s\" data-type=\"%s\"%s>%.*s</th>", (int)(a - c), c, b + 1,
            i == sorted ? " aria-sort=\"descending\"" : "", (int)(b - a - 1), a + 1);
  }
  fputs("</tr></thead>\n<tbody>\n", f);
}

typedef struct step_ref {
  const plan_rec *plan;
  int step;
} step_ref;

static int by_step_total(const void *a, const void *b) {
  const step_ref *x = a, *y = b;
  int64_t u = x->plan->steps[x->step].total_ns, v = y->plan->steps[y->step].total_ns;
  if (u != v) return u < v ? 1 : -1;
  if (x->plan->id != y->plan->id) return x->plan->id < y->plan->id ? -1 : 1;
  return x->step - y->step;
}

static npu_status steps_table(npuE_profile *pr, FILE *f, int64_t all) {
  size_t n = 0;
  for (int i = 0; i < pr->n_plans; i++) n += (size_t)pr->plans[i]->n_steps;
  step_ref *r = npuC_alloc(pr->ctx, (n ? n : 1) * sizeof *r);
  if (!r) return NPU_ERR_NOMEM;
  n = 0;
  for (int i = 0; i < pr->n_plans; i++)
    for (int k = 0; k < pr->plans[i]->n_steps; k++) r[n++] = (step_ref){pr->plans[i], k};
  qsort(r, n, sizeof *r, by_step_total);
  static const char *const cols[] = {
      "plan_id:plan:num",   "step:step:num",         "op_name:op_name:text",
      "op_type:op_type:text", "pass:pass:text",      "count:count:num",
      "total_us:total_us:num", "avg_us:avg_us:num",  "min_us:min_us:num",
      "max_us:max_us:num",  "ratio_percent:share %:num"};
  fputs("<h2>Time by step</h2>\n<p class=\"meta\">op_summary.csv: one row per step of each plan, "
        "largest total first; click a column to sort.</p>\n"
        "<table id=\"steps\" class=\"sortable\">", f);
  thead(f, cols, 11, 6);
  for (size_t i = 0; i < n; i++) {
    const step_rec *s = &r[i].plan->steps[r[i].step];
    fprintf(f, "<tr><td class=\"n\" data-v=\"%d\">%d</td><td class=\"n\" data-v=\"%d\">%d</td>",
            r[i].plan->id, r[i].plan->id, r[i].step, r[i].step);
    td_text(f, s->name);
    td_text(f, s->op);
    td_text(f, s->pass ? s->pass : "");
    td_count(f, s->count);
    td_us(f, s->total_ns);
    if (s->count) {
      td_us(f, s->total_ns / (int64_t)s->count);
      td_us(f, s->min_ns);
      td_us(f, s->max_ns);
    } else {
      fputs("<td data-v=\"-1\"></td><td data-v=\"-1\"></td><td data-v=\"-1\"></td>", f);
    }
    double share = all > 0 ? 100.0 * (double)s->total_ns / (double)all : 0.0;
    fprintf(f, "<td class=\"n\" data-v=\"%.6f\">%.1f</td></tr>\n", share, share);
  }
  fputs("</tbody></table>\n", f);
  npuC_free(pr->ctx, r);
  return NPU_OK;
}

static void ops_table(FILE *f, const npuE_op_total *t, size_t n, int64_t all) {
  static const char *const cols[] = {"op_type:op_type:text", "count:count:num",
                                     "total_us:total_us:num", "avg_us:avg_us:num",
                                     "min_us:min_us:num",   "max_us:max_us:num",
                                     "ratio_percent:ratio_percent:num"};
  fputs("<h2>Time by op type</h2>\n<p class=\"meta\">op_statistic.csv.</p>\n"
        "<table id=\"ops\" class=\"sortable\">", f);
  thead(f, cols, 7, 2);
  for (size_t j = 0; j < n; j++) {
    fputs("<tr>", f);
    fprintf(f, "<td><i style=\"display:inline-block;width:.8em;height:.8em;margin-right:.3em;"
               "background:hsl(%u,55%%,65%%)\"></i>", hue(t[j].op));
    html_text(f, t[j].op);
    fputs("</td>", f);
    td_count(f, t[j].count);
    td_us(f, t[j].total_ns);
    td_us(f, t[j].total_ns / (int64_t)t[j].count);
    td_us(f, t[j].min_ns);
    td_us(f, t[j].max_ns);
    double share = all > 0 ? 100.0 * (double)t[j].total_ns / (double)all : 0.0;
    fprintf(f, "<td class=\"n\" data-v=\"%.6f\">%.3f</td></tr>\n", share, share);
  }
  fputs("</tbody></table>\n", f);
}

/* A tick spacing of 1, 2 or 5 times a power of ten giving at most about 8 ticks over span. */
static double tick_step(double span) {
  double raw = span / 8, mag = pow(10, floor(log10(raw > 0 ? raw : 1)));
  return raw <= mag ? mag : raw <= 2 * mag ? 2 * mag : raw <= 5 * mag ? 5 * mag : 10 * mag;
}

static void timeline(const npuE_profile *pr, FILE *f) {
  fputs("<h2>Timeline of the last iteration</h2>\n", f);
  if (pr->n_last == 0) {
    fputs("<p class=\"meta\">No step was timed.</p>\n", f);
    return;
  }
  const trace_ev *e = pr->last_evs;
  int64_t t0 = e[0].start_ns, t1 = e[0].start_ns + e[0].dur_ns;
  int levels = 1;
  for (int i = 0; i < pr->n_last; i++) {
    if (e[i].start_ns < t0) t0 = e[i].start_ns;
    if (e[i].start_ns + e[i].dur_ns > t1) t1 = e[i].start_ns + e[i].dur_ns;
    if (e[i].level + 1 > levels) levels = e[i].level + 1;
  }
  double span = t1 > t0 ? (double)(t1 - t0) : 1.0, scale = TL_WIDTH / span;
  fprintf(f, "<p class=\"meta\" id=\"timeline-caption\">Plan %d, iteration %llu: %llu step "
             "executions in ", e[0].plan->id, (unsigned long long)e[0].iteration,
          (unsigned long long)pr->n_last_total);
  put_us(f, t1 - t0);
  fputs(" &#181;s, from the first step's start to the last one's end; a lane per nesting "
        "level (a cond or while step spans the steps it ran).", f);
  if (pr->n_last_total > (uint64_t)pr->n_last)
    fprintf(f, " <span class=\"note\">Only the first %d are drawn.</span>", pr->n_last);
  fputs("</p>\n", f);
  int height = levels * TL_LANE + TL_AXIS;
  fprintf(f, "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
             "height=\"%d\" viewBox=\"0 0 %d %d\" style=\"max-width:100%%;height:auto;"
             "background:#fafafa;border:1px solid #ddd\">\n",
          TL_WIDTH + 2 * TL_LEFT, height, TL_WIDTH + 2 * TL_LEFT, height);
  double tick = tick_step(span);
  for (double t = 0; t <= span * 1.0001; t += tick) {
    double x = TL_LEFT + t * scale;
    fprintf(f, "<line x1=\"%.1f\" y1=\"0\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>"
               "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\">%g &#181;s</text>\n",
            x, x, levels * TL_LANE, x, levels * TL_LANE + 16, t / 1000.0);
  }
  for (int i = 0; i < pr->n_last; i++) {
    const step_rec *s = &e[i].plan->steps[e[i].step];
    double x = TL_LEFT + (double)(e[i].start_ns - t0) * scale, w = (double)e[i].dur_ns * scale;
    if (w < 0.5) w = 0.5;
    int y = e[i].level * TL_LANE + 3;
    fprintf(f, "<g><rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
               "fill=\"hsl(%u,55%%,65%%)\" stroke=\"#555\" stroke-width=\"0.3\"/><title>",
            x, y, w, TL_LANE - 6, hue(s->op));
    html_text(f, s->name);
    fputs(" (", f);
    html_text(f, s->op);
    fputs("): ", f);
    put_us(f, e[i].dur_ns);
    fputs(" \xC2\xB5s at +", f);
    put_us(f, e[i].start_ns - t0);
    fprintf(f, " \xC2\xB5s, step %d", e[i].step);
    if (e[i].loop_iteration >= 0)
      fprintf(f, ", loop iteration %lld", (long long)e[i].loop_iteration);
    fputs("</title>", f);
    int chars = (int)((w - 4) / 7);
    if (chars >= 3) {
      int len = (int)strlen(s->name);
      fprintf(f, "<text x=\"%.2f\" y=\"%d\">", x + 2, y + TL_LANE - 10);
      char cut[256];
      snprintf(cut, sizeof cut, "%.*s", len <= chars ? len : chars, s->name);
      html_text(f, cut);
      fputs("</text>", f);
    }
    fputs("</g>\n", f);
  }
  fputs("</svg>\n", f);
}

static void slowest_table(const npuE_profile *pr, FILE *f) {
  static const char *const cols[] = {
      "rank:rank:num",         "dur_us:dur_us:num",        "op_name:op_name:text",
      "op_type:op_type:text",  "plan_id:plan:num",         "step:step:num",
      "iteration:iteration:num", "loop_iteration:loop iteration:num", "start_us:start_us:num"};
  fputs("<h2>Slowest step executions</h2>\n<p class=\"meta\">The longest single executions of "
        "the session (start_us counts from the session's creation, as trace.json's ts).</p>\n"
        "<table id=\"slowest\" class=\"sortable\">", f);
  thead(f, cols, 9, 1);
  for (int i = 0; i < pr->n_slow; i++) {
    const trace_ev *e = &pr->slow[i];
    const step_rec *s = &e->plan->steps[e->step];
    fputs("<tr>", f);
    td_count(f, (uint64_t)i + 1);
    td_us(f, e->dur_ns);
    td_text(f, s->name);
    td_text(f, s->op);
    fprintf(f, "<td class=\"n\" data-v=\"%d\">%d</td><td class=\"n\" data-v=\"%d\">%d</td>",
            e->plan->id, e->plan->id, e->step, e->step);
    td_count(f, e->iteration);
    if (e->loop_iteration >= 0) td_count(f, (uint64_t)e->loop_iteration);
    else fputs("<td data-v=\"-1\"></td>", f);
    td_us(f, e->start_ns - pr->t0);
    fputs("</tr>\n", f);
  }
  fputs("</tbody></table>\n", f);
}

/* The header: the session and what the profile holds. */
static void summary(const npuE_profile *pr, FILE *f, int64_t all) {
  uint64_t iterations = 0;
  for (int i = 0; i < pr->n_plans; i++) iterations += pr->plans[i]->iterations;
  fprintf(f, "<h1>Profile of session %d on device %d</h1>\n<p class=\"meta\" id=\"summary\">"
             "pid %ld, started %s; task_trace %s, training_trace %s; %llu runs of %d plans, "
             "%llu iterations; step time ",
          pr->session_id, pr->device_id, pr->pid, pr->started,
          pr->task == TASK_OFF ? "off" : pr->task == TASK_L0 ? "l0" : "l1",
          pr->training_trace ? "on" : "off", (unsigned long long)pr->runs, pr->n_plans,
          (unsigned long long)iterations);
  put_us(f, all);
  fputs(" &#181;s in all.  The files beside this one hold the same numbers: op_summary.csv, "
        "op_statistic.csv, iteration_trace.csv, trace.json (every step execution), "
        "info.json.</p>\n", f);
  if (pr->n_dropped)
    fprintf(f, "<p class=\"note\">storage_limit reached: %llu events left out of trace.json "
               "(the tables here count them).</p>\n", (unsigned long long)pr->n_dropped);
  if (pr->n_nomem_plans)
    fprintf(f, "<p class=\"note\">Out of memory for the statistics of %d plan(s): %llu runs "
               "are missing.</p>\n", pr->n_nomem_plans, (unsigned long long)pr->n_nomem_runs);
}

npu_status npuE_profile_write_html(npuE_profile *pr) {
  char path[4200];
  snprintf(path, sizeof path, "%s/report.html", pr->dir);
  npuE_op_total *t = NULL;
  size_t n = 0;
  int64_t all = 0;
  if (pr->task != TASK_OFF && npuE_profile_op_totals(pr, &t, &n, &all))
    return npuC_error(pr->ctx, NPU_ERR_NOMEM, "profiling: report.html: out of memory");
  FILE *f = fopen(path, "w");
  if (!f) {
    npuC_free(pr->ctx, t);
    return npuC_error(pr->ctx, NPU_ERR_IO, "profiling: cannot create '%s': %s", path,
                      strerror(errno));
  }
  fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
             "<title>lua-npu profile: session %d</title>\n<style>%s</style>\n</head>\n<body>\n",
          pr->session_id, style);
  summary(pr, f, all);
  npu_status s = NPU_OK;
  if (pr->task == TASK_OFF) {
    fputs("<p class=\"meta\">task_trace is off: no step was timed.</p>\n", f);
  } else {
    s = steps_table(pr, f, all);
    ops_table(f, t, n, all);
    timeline(pr, f);
    slowest_table(pr, f);
  }
  fprintf(f, "<script>\n%s</script>\n</body>\n</html>\n", script);
  npuC_free(pr->ctx, t);
  bool bad = ferror(f) != 0;
  int err = errno;
  if (fclose(f) != 0) bad = true, err = errno;
  if (s) return npuC_error(pr->ctx, s, "profiling: report.html: out of memory");
  if (bad)
    return npuC_error(pr->ctx, NPU_ERR_IO, "profiling: cannot write '%s': %s", path,
                      strerror(err ? err : EIO));
  return NPU_OK;
}
