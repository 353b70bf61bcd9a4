/*
 * test_exception_dump.c — enable_exception_dump (exec/exception_dump.c) through the C API:
 * what the Lua module cannot see.  The log lines (one info line naming the directory after a
 * dump; a warning naming the directory when it cannot be made, the run's error unchanged; one
 * naming the base directory and the variable it came from when the directory is too long for
 * a path), bfloat16 inputs written as float32, and the allocation-failure sweep over a failing
 * run with the dump on: whichever allocation fails, the run ends with NPU_ERR_NOMEM or with the
 * gather's own NPU_ERR_ARG and message, and nothing is leaked.  ASCEND_WORK_PATH is set (setenv) to
 * directories under a mkdtemp directory, removed at the end.
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npu_test.h"

static char tmp_root[] = "/tmp/npu_test_exception_dump_XXXXXX";

static const char WANT[] = "gather 'pick': indices[1] = 4 is not in [0, 4) (params [4,3], axis 0)";

/* y = gather(x, i) (node "pick"), x (4, 3) of dtype, i (3,) int64 = {0, 4, 1}: fails at run
   time.  Returns the run's status. */
static npu_status scenario(npu_context *ctx, session_handles *h, npu_dtype dtype,
                           const char *work) {
  TRY(npu_graph_new(ctx, &h->g));
  npu_graph *g = h->g;
  int64_t xs[] = {4, 3}, is[] = {3};
  npu_attr px[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = dtype},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 2}}};
  npu_attr pi[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I64},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {is, 1}}};
  int nx, ni, ny;
  TRY(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, px, &nx));
  TRY(npu_graph_add_op(g, "placeholder", "i", 0, NULL, 2, pi, &ni));
  int in[] = {npu_graph_output(g, nx, 0), npu_graph_output(g, ni, 0)};
  TRY(npu_graph_add_op(g, "gather", "pick", 2, in, 0, NULL, &ny));
  int y = npu_graph_output(g, ny, 0);
  TRY(npu_options_new(ctx, &h->o));
  /* the session reads the process's environment (npu_options_apply_env) */
  setenv("ASCEND_WORK_PATH", work, 1);
  unsetenv("NPU_COLLECT_PATH");
  TRY(npu_session_new(ctx, g, h->o, &h->s));
  /* x: 0x3f80 + k is a bfloat16 / 0x3c00 + k a float16 just above 1 (exact in float32) */
  uint16_t xd[12];
  uint16_t one = dtype == NPU_DTYPE_BF16 ? 0x3f80 : 0x3c00; /* 2-byte dtypes only */
  for (int k = 0; k < 12; k++) xd[k] = (uint16_t)(one + k);
  const int64_t id[] = {0, 4, 1};
  npu_tensor *feeds[2] = {0};
  npu_status st = npu_tensor_from_data(ctx, dtype, 2, xs, xd, sizeof xd, &feeds[0]);
  if (!st) st = npu_tensor_from_data(ctx, NPU_DTYPE_I64, 1, is, id, sizeof id, &feeds[1]);
  if (!st)
    st = npu_session_run(h->s, 2, in, feeds, 1, &y, &h->out, 0, NULL);
  npu_tensor_release(feeds[0]);
  npu_tensor_release(feeds[1]);
  if (st) CHECK(h->out == NULL);
  return st;
}

/* ---- the log ---- */

static void test_dump_and_log(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  log_seen seen = {0};
  npu_context_set_log(ctx, on_log, &seen);
  char work[300], dir[400];
  snprintf(work, sizeof work, "%s/work", tmp_root);
  snprintf(dir, sizeof dir, "%s/extra-info/data-dump/0", work);
  session_handles h = {0};
  npu_status st = scenario(ctx, &h, NPU_DTYPE_BF16, work);
  CHECK(st == NPU_ERR_ARG);
  CHECK(strcmp(npu_context_errmsg(ctx), WANT) == 0);
  CHECK(seen.n == 1 && seen.level == 1);
  CHECK(strstr(seen.last, "enable_exception_dump: gather 'pick' (task 0) failed with "
                          "NPU_ERR_ARG; 3 files written to") != NULL);
  CHECK(strstr(seen.last, dir) != NULL);
  if (seen.n != 1 || !strstr(seen.last, dir)) fprintf(stderr, "log: %s\n", seen.last);
  CHECK(count_files_in(dir) == 3);
  /* the bfloat16 input, as float32, exactly */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls '%s'/*.input.0.npy", dir);
  FILE *p = popen(cmd, "r");
  char path[500] = "";
  if (p) {
    if (!fgets(path, sizeof path, p)) path[0] = 0;
    pclose(p);
  }
  path[strcspn(path, "\n")] = 0;
  npu_tensor *x = NULL;
  CHECK(npu_tensor_load_npy(ctx, path, &x) == NPU_OK);
  if (x) {
    CHECK(npu_tensor_dtype(x) == NPU_DTYPE_F32);
    CHECK_EQ_I64(npu_tensor_numel(x), 12);
    const float *v = npu_tensor_data(x);
    for (int k = 0; k < 12; k++) CHECK(v[k] == 1.0f + (float)k / 128.0f);
    npu_tensor_release(x);
  }
  session_handles_release(&h);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* ---- a directory that cannot be made ---- */

static void test_unwritable_directory(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  log_seen seen = {0};
  npu_context_set_log(ctx, on_log, &seen);
  char file[300], work[340];
  snprintf(file, sizeof file, "%s/a_file", tmp_root);
  write_text(file, "");
  snprintf(work, sizeof work, "%s/work", file);
  session_handles h = {0};
  npu_status st = scenario(ctx, &h, NPU_DTYPE_F16, work);
  CHECK(st == NPU_ERR_ARG);
  if (st != NPU_ERR_ARG) fprintf(stderr, "%s: %s\n", npu_status_name(st), npu_context_errmsg(ctx));
  CHECK(strcmp(npu_context_errmsg(ctx), WANT) == 0);
  CHECK(seen.n == 1 && seen.level == 2);
  char want[500];
  snprintf(want, sizeof want, "enable_exception_dump: gather 'pick' not dumped: "
           "enable_exception_dump: cannot create directory '%s': Not a directory", work);
  CHECK(strstr(seen.last, want) != NULL);
  if (!strstr(seen.last, want)) fprintf(stderr, "log: %s\n", seen.last);
  session_handles_release(&h);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* ---- a directory too long for a path ---- */

static void test_directory_too_long(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  log_seen seen = {0};
  npu_context_set_log(ctx, on_log, &seen);
  /* fits a path, but not with "/extra-info/data-dump/0" after it */
  static char work[4100];
  int n = snprintf(work, sizeof work, "%s/", tmp_root);
  memset(work + n, 'w', 4090 - (size_t)n);
  work[4090] = 0;
  session_handles h = {0};
  npu_status st = scenario(ctx, &h, NPU_DTYPE_F16, work);
  CHECK(st == NPU_ERR_ARG);
  CHECK(strcmp(npu_context_errmsg(ctx), WANT) == 0);
  CHECK(seen.n == 1 && seen.level == 2);
  /* the message names the variable the base directory came from, then the directory (the
     log line and seen.last cut it) */
  char want[4200];
  snprintf(want, sizeof want, "enable_exception_dump: gather 'pick' not dumped: its directory "
           "is too long under ASCEND_WORK_PATH '%s'", work);
  size_t n_seen = strlen(seen.last);
  CHECK(n_seen > 200 && strncmp(seen.last, want, n_seen) == 0);
  if (n_seen <= 200 || strncmp(seen.last, want, n_seen) != 0)
    fprintf(stderr, "log: %.200s\n", seen.last);
  session_handles_release(&h);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* ---- the allocation-failure sweep ---- */

typedef struct sweep_case {
  session_handles h; /* first: after_release_handles releases it */
  char work[300];
} sweep_case;

/* The gather's failure is this scenario's success: NPU_OK when the run failed as it should,
   NPU_ERR_INTERNAL (ending the sweep with a report) when the dump changed the error. */
static npu_status sweep_run(npu_context *ctx, void *ud) {
  sweep_case *c = ud;
  npu_status st = scenario(ctx, &c->h, NPU_DTYPE_BF16, c->work);
  if (st == NPU_ERR_ARG && strcmp(npu_context_errmsg(ctx), WANT) == 0) return NPU_OK;
  return st == NPU_ERR_NOMEM ? st : NPU_ERR_INTERNAL;
}

static void test_allocation_failure_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  sweep_case c = {0};
  snprintf(c.work, sizeof c.work, "%s/sweep", tmp_root);
  /* a failure inside the dump is swallowed (logged): the attempt succeeds before the last
     allocation, so several successes in a row end the sweep */
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.run = sweep_run, .after = after_release_handles, .ud = &c,
                           .what = "exception dump", .ok_in_a_row = 8});
  CHECK(n_failures > 20);
  npu_context_release(ctx);
}

int main(void) {
  if (!mkdtemp(tmp_root)) {
    perror("mkdtemp");
    return 1;
  }
  test_dump_and_log();
  test_unwritable_directory();
  test_directory_too_long();
  test_allocation_failure_sweep();
  remove_tree(tmp_root);
  return check_summary("test_exception_dump");
}
