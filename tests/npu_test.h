/* npu_test.h: what the C tests that drive the public API (include/npu.h) share, on top of
 * check.h.
 *
 * TRY(call): return the call's npu_status from the enclosing function when it is not NPU_OK.
 *
 * graph_op(g, type, name, n, in, &value) adds a node of `type` over n input values (no
 * attributes), graph_const(g, name, t, &value) a const node holding tensor t (released here,
 * whatever happens); each gives the node's first output in *value.
 *
 * session_handles: what a scenario on one session holds (graph, options, session, a fed tensor and
 * a fetched one); session_handles_release releases them all (NULLs skipped) and zeroes the struct,
 * after_release_handles is that as a scenario's `after`.
 *
 * A scenario_def names a scenario: `setup` (optional) prepares it, `run` plays it, `after`
 * (optional) releases what it left, given the status run returned (and checks what must hold
 * after a failure); `ud` goes to all three.
 *
 * scenario_run_once(ctx, &(scenario_def){.run = f, .after = g, .ud = &data}): plays it once with
 * allocations working; checks NPU_OK (printing the message otherwise) and that ctx holds the
 * live bytes it held before.
 *
 * Files: write_text(path, text) writes a file (checked; a regular file in a directory's place is
 * how the tests make a path that cannot be created); count_files_in(dir) counts the regular files under dir (recursively; -1 when it cannot
 * tell); remove_tree(dir) removes dir and everything under it.
 *
 * The log: log_seen and on_log, to pass to npu_context_set_log(ctx, on_log, &seen): counts the
 * lines and keeps the last one and its level.
 *
 * sweep_alloc_failures(ctx, &(scenario_def){...}): the allocation-failure sweep. For n = 1, 2,
 * ...: setup with allocations working (NPU_OK checked), run with the n-th allocation from ctx
 * failing, after with allocations working again; then it checks that ctx holds the live bytes it
 * held before the sweep and that the status is NPU_OK or NPU_ERR_NOMEM (a wrong status is
 * reported with n and the message, and ends the sweep). The sweep ends once `ok_in_a_row`
 * attempts (default 1) succeed in a row, which it checks happened (within SWEEP_MAX_ATTEMPTS),
 * and returns the number of attempts that failed with NPU_ERR_NOMEM: the caller checks that the
 * sweep went through enough allocations.
 *
 * scenario_values_and_sweep(&(checked_scenario){...}): the two runs most suites give their
 * scenario, written once as play(ctx, ud, check_values): played with values checked on a fresh
 * context of `threads` threads (0: the default) by scenario_run_once, then with values unchecked
 * (an allocation failing ends a run early) under sweep_alloc_failures on a fresh context of 2
 * threads, which must fail more than `min_failures` allocations; release(ud) (optional) frees
 * what a run left.
 *
 * Header-only and includes check.h: include it (or check.h alone) from one .c file per
 * executable.
 */
#ifndef NPU_TESTS_NPU_TEST_H
#define NPU_TESTS_NPU_TEST_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

#include "check.h"
#include "include/npu.h"

#define TRY(call)                                                                          \
  do {                                                                                     \
    npu_status st_ = (call);                                                               \
    if (st_) return st_;                                                                   \
  } while (0)

static inline npu_status graph_op(npu_graph *g, const char *type, const char *name, int n,
                                  const int *in, int *value) {
  int node;
  TRY(npu_graph_add_op(g, type, name, n, in, 0, NULL, &node));
  *value = npu_graph_output(g, node, 0);
  return NPU_OK;
}

static inline npu_status graph_const(npu_graph *g, const char *name, npu_tensor *t, int *value) {
  npu_attr v = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  int node;
  npu_status st = npu_graph_add_op(g, "const", name, 0, NULL, 1, &v, &node);
  npu_tensor_release(t);
  TRY(st);
  *value = npu_graph_output(g, node, 0);
  return NPU_OK;
}

/* Output 0 of node (the value most ops have). */
static inline int out0(npu_graph *g, int node) { return npu_graph_output(g, node, 0); }

/* A scalar int32 constant v named name (loop counters and bounds). */
static inline npu_status scalar_i32(npu_context *ctx, npu_graph *g, const char *name, int32_t v,
                                    int *out) {
  npu_tensor *t;
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_I32, 0, NULL, &v, sizeof v, &t));
  return graph_const(g, name, t, out);
}

/* A placeholder of dtype dt and shape (ndim dims; ndim 0: a scalar) named name. */
static inline npu_status graph_placeholder(npu_graph *g, const char *name, npu_dtype dt, int ndim,
                                           const int64_t *shape, int *out) {
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = dt},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {(int64_t *)shape, ndim}}};
  int node;
  TRY(npu_graph_add_op(g, "placeholder", name, 0, NULL, 2, a, &node));
  *out = out0(g, node);
  return NPU_OK;
}

/* Loop variable index (a loop_var, inside a while's region) of dtype dt, shape invariant
   shape (ndim dims; ndim 0: a scalar, as a loop's counter). */
static inline npu_status graph_loop_var(npu_graph *g, const char *name, npu_dtype dt, int index,
                                        int ndim, const int64_t *shape, int *out) {
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = dt},
                  {.name = "index", .type = NPU_ATTR_INT, .u.i = index},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {(int64_t *)shape, ndim}}};
  int node;
  TRY(npu_graph_add_op(g, "loop_var", name, 0, NULL, 3, a, &node));
  *out = out0(g, node);
  return NPU_OK;
}

typedef struct session_handles {
  npu_graph *g;
  npu_options *o;
  npu_session *s;
  npu_tensor *x, *out;
} session_handles;

static inline void session_handles_release(session_handles *h) {
  npu_tensor_release(h->out);
  npu_tensor_release(h->x);
  npu_session_release(h->s);
  npu_options_release(h->o);
  npu_graph_release(h->g);
  *h = (session_handles){0};
}

static inline void after_release_handles(npu_context *ctx, npu_status st, void *h) {
  (void)ctx, (void)st;
  session_handles_release(h);
}

typedef struct scenario_def {
  npu_status (*setup)(npu_context *ctx, void *ud);          /* optional; NPU_OK wanted */
  npu_status (*run)(npu_context *ctx, void *ud);            /* the scenario */
  void (*after)(npu_context *ctx, npu_status st, void *ud); /* optional: releases what run left */
  void *ud;
  const char *what;  /* names the scenario in a failure report (NULL: "scenario") */
  int ok_in_a_row;   /* successes in a row that end the sweep; 0 means 1 (a failure that the
                        scenario swallows lets an attempt succeed before the last allocation) */
} scenario_def;

#define SWEEP_MAX_ATTEMPTS 100000L

static inline void scenario_run_once(npu_context *ctx, const scenario_def *sc) {
  size_t base = npu_context_live_bytes(ctx);
  npu_status st = sc->setup ? sc->setup(ctx, sc->ud) : NPU_OK;
  if (!st) st = sc->run(ctx, sc->ud);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "%s: %s\n", sc->what ? sc->what : "scenario", npu_context_errmsg(ctx));
  if (sc->after) sc->after(ctx, st, sc->ud);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
}

static inline int sweep_alloc_failures(npu_context *ctx, const scenario_def *sw) {
  const char *what = sw->what ? sw->what : "scenario";
  size_t base = npu_context_live_bytes(ctx);
  int want_ok = sw->ok_in_a_row > 0 ? sw->ok_in_a_row : 1, n_ok = 0, n_failures = 0;
  for (long n = 1; n <= SWEEP_MAX_ATTEMPTS && n_ok < want_ok; n++) {
    if (sw->setup) {
      npu_status st0 = sw->setup(ctx, sw->ud);
      CHECK(st0 == NPU_OK);
      if (st0) {
        fprintf(stderr, "%s: setup before allocation %ld: status %s (%s)\n", what, n,
                npu_status_name(st0), npu_context_errmsg(ctx));
        return n_failures;
      }
    }
    npu_context_fail_after(ctx, n);
    npu_status st = sw->run(ctx, sw->ud);
    npu_context_fail_after(ctx, 0);
    char msg[512] = "";
    if (st != NPU_OK && st != NPU_ERR_NOMEM)
      snprintf(msg, sizeof msg, "%s", npu_context_errmsg(ctx)); /* before `after` runs */
    if (sw->after) sw->after(ctx, st, sw->ud);
    size_t live = npu_context_live_bytes(ctx);
    CHECK_EQ_I64(live, base);
    if (live != base)
      fprintf(stderr, "%s: allocation %ld failing (status %s): %zu live bytes, %zu before\n", what,
              n, npu_status_name(st), live, base);
    CHECK(st == NPU_OK || st == NPU_ERR_NOMEM);
    if (st == NPU_OK) {
      n_ok++;
      continue;
    }
    if (st != NPU_ERR_NOMEM) {
      fprintf(stderr, "%s: allocation %ld: status %s (%s)\n", what, n, npu_status_name(st), msg);
      return n_failures;
    }
    n_ok = 0;
    n_failures++;
  }
  CHECK(n_ok == want_ok); /* the scenario ran through without a failing allocation */
  return n_failures;
}

typedef struct checked_scenario {
  npu_status (*play)(npu_context *ctx, void *ud, int check_values);
  void (*release)(void *ud); /* optional */
  void *ud;
  const char *what;  /* as scenario_def's */
  int threads;       /* the values run's context (0: the default) */
  int min_failures;  /* the sweep fails more allocations than this */
} checked_scenario;

/* scenario_def's ud while a checked_scenario plays: which run it is */
typedef struct checked_run {
  const checked_scenario *cs;
  int check_values;
} checked_run;

static inline npu_status checked_run_play(npu_context *ctx, void *ud) {
  const checked_run *r = ud;
  return r->cs->play(ctx, r->cs->ud, r->check_values);
}

static inline void checked_run_release(npu_context *ctx, npu_status st, void *ud) {
  const checked_run *r = ud;
  (void)ctx, (void)st;
  if (r->cs->release) r->cs->release(r->cs->ud);
}

static inline void scenario_values_and_sweep(const checked_scenario *cs) {
  checked_run values = {cs, 1}, sweep = {cs, 0};
  npu_context *ctx;
  npu_context_config cfg = {.n_threads = cs->threads};
  CHECK(npu_context_new(cs->threads ? &cfg : NULL, &ctx) == NPU_OK);
  if (!ctx) return;
  scenario_run_once(ctx, &(scenario_def){.run = checked_run_play, .after = checked_run_release,
                                         .ud = &values, .what = cs->what});
  npu_context_release(ctx);
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  if (!ctx) return;
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.run = checked_run_play, .after = checked_run_release, .ud = &sweep,
                           .what = cs->what});
  CHECK(n_failures > cs->min_failures); /* the sweep went through the scenario's allocations */
  if (n_failures <= cs->min_failures)
    fprintf(stderr, "%s: %d allocations failed in the sweep, more than %d expected\n",
            cs->what ? cs->what : "scenario", n_failures, cs->min_failures);
  npu_context_release(ctx);
}

/* ---- files and the log ---- */

static inline void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static inline int remove_entry_(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static inline void remove_tree(const char *dir) { nftw(dir, remove_entry_, 16, FTW_DEPTH | FTW_PHYS); }

static inline int count_files_in(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "find '%s' -type f 2>/dev/null | wc -l", dir);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p) {
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
  }
  return n;
}

typedef struct log_seen {
  int n, level;
  char last[600];
} log_seen;

static inline void on_log(void *ud, int level, const char *message) {
  log_seen *seen = ud;
  seen->n++;
  seen->level = level;
  snprintf(seen->last, sizeof seen->last, "%s", message);
}

#endif
