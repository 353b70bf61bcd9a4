/*
 * test_dump.c — the data dump and overflow detection (exec/dump.c) through the C API: the log
 * line an overflow writes (the Lua module has no log hook), the one atomic_overflow writes,
 * an unwritable dump_path (NPU_ERR_IO naming it, fetches NULL, nothing leaked), and the
 * allocation-failure sweep over dumping runs of every kind (tensor, stats, overflow, a
 * dump_layer with data inputs): a clean NPU_ERR_NOMEM and zero live bytes for every N.
 * Files go under a mkdtemp directory, removed at the end.
 */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npu_test.h"

static char tmp_root[] = "/tmp/npu_test_dump_XXXXXX";

enum { MODE_TENSOR, MODE_STATS, MODE_DEBUG, MODE_LAYER, N_MODES };

/* y = exp(relu(x W)): x (2, 2) fed; runs it twice (the second run overflows exp in float32),
   dumping as mode says under dir. */
static npu_status scenario(npu_context *ctx, session_handles *h, int mode, const char *dir, int *y_out) {
  TRY(npu_graph_new(ctx, &h->g));
  npu_graph *g = h->g;
  int64_t xs[] = {2, 2};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 2}}};
  int nx, nw, nm, nr, ne;
  TRY(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx));
  npu_tensor *w;
  const float wd[] = {1, 0, 0, 2};
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, xs, wd, sizeof wd, &w));
  npu_attr wv = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = w};
  npu_status st = npu_graph_add_op(g, "const", "W", 0, NULL, 1, &wv, &nw);
  npu_tensor_release(w);
  TRY(st);
  int mm_in[] = {npu_graph_output(g, nx, 0), npu_graph_output(g, nw, 0)};
  TRY(npu_graph_add_op(g, "matmul", "mm", 2, mm_in, 0, NULL, &nm));
  int r_in[] = {npu_graph_output(g, nm, 0)};
  TRY(npu_graph_add_op(g, "relu", "relu", 1, r_in, 0, NULL, &nr));
  int e_in[] = {npu_graph_output(g, nr, 0)};
  TRY(npu_graph_add_op(g, "exp", "exp", 1, e_in, 0, NULL, &ne));
  int y = npu_graph_output(g, ne, 0);
  if (y_out) *y_out = y;

  TRY(npu_options_new(ctx, &h->o));
  TRY(npu_options_set_string(h->o, "precision_mode", "must_keep_origin_dtype"));
  TRY(npu_options_set_string(h->o, "dump_path", dir));
  if (mode == MODE_DEBUG) {
    TRY(npu_options_set_bool(h->o, "enable_dump_debug", 1));
  } else {
    TRY(npu_options_set_bool(h->o, "enable_dump", 1));
    TRY(npu_options_set_string(h->o, "dump_mode", "all"));
    if (mode == MODE_STATS) TRY(npu_options_set_string(h->o, "dump_data", "stats"));
    if (mode == MODE_LAYER) TRY(npu_options_set_string(h->o, "dump_layer", "mm exp"));
    TRY(npu_options_set_string(h->o, "dump_step", "0-1"));
  }
  TRY(npu_session_new(ctx, g, h->o, &h->s));
  for (int run = 0; run < 2; run++) {
    npu_tensor_release(h->out);
    h->out = NULL;
    npu_tensor_release(h->x);
    h->x = NULL;
    const float xd[2][4] = {{1, 2, 3, 4}, {1, 60, 3, 4}}; /* exp(120): Inf in float32 */
    TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, xs, xd[run], sizeof xd[run], &h->x));
    st = npu_session_run(h->s, 1, (int[]){npu_graph_output(g, nx, 0)}, &h->x, 1, &y, &h->out, 0,
                         NULL);
    if (st) {
      CHECK(h->out == NULL);
      return st;
    }
  }
  npu_session_close(h->s); /* closes what the dump holds */
  return NPU_OK;
}

/* ---- the log ---- */

static void test_overflow_logs_one_line(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  log_seen seen = {0};
  npu_context_set_log(ctx, on_log, &seen);
  char dir[300];
  snprintf(dir, sizeof dir, "%s/debug", tmp_root);
  session_handles h = {0};
  npu_status st = scenario(ctx, &h, MODE_DEBUG, dir, NULL);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "debug scenario: %s\n", npu_context_errmsg(ctx));
  /* run 0 is finite; run 1 overflows in exp only (relu's output is finite); relu and exp are
     one fused step, named after exp, the node whose value it outputs */
  CHECK(seen.n == 1);
  CHECK(seen.level == 2);
  CHECK(strstr(seen.last, "enable_dump_debug: overflow in fused_elementwise 'exp' (task 1, "
                          "iteration 1 of model exp/0): 0 NaN, 1 Inf, 0 float16 at +-65504") !=
        NULL);
  CHECK(strstr(seen.last, dir) != NULL);
  CHECK(count_files_in(dir) == 2); /* exp's input and output */
  session_handles_release(&h);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);

  /* atomic_overflow: a note at session creation, then nothing */
  seen = (log_seen){0};
  npu_options *o;
  npu_graph *g;
  npu_session *s;
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  CHECK(npu_options_set_bool(o, "enable_dump_debug", 1) == NPU_OK);
  CHECK(npu_options_set_string(o, "dump_debug_mode", "atomic_overflow") == NPU_OK);
  CHECK(npu_options_set_string(o, "dump_path", dir) == NPU_OK);
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  CHECK(npu_session_new(ctx, g, o, &s) == NPU_OK);
  CHECK(seen.n == 1 && seen.level == 1 && strstr(seen.last, "atomic_overflow") != NULL);
  npu_session_release(s);
  npu_graph_release(g);
  npu_options_release(o);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* ---- errors ---- */

static void test_unwritable_path(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  char file[300], dir[340];
  snprintf(file, sizeof file, "%s/a_file", tmp_root);
  write_text(file, "");
  snprintf(dir, sizeof dir, "%s/sub", file);
  for (int mode = 0; mode < N_MODES; mode++) {
    session_handles h = {0};
    npu_status st = scenario(ctx, &h, mode, dir, NULL);
    CHECK(st == NPU_ERR_IO);
    CHECK(h.out == NULL);
    char want[400];
    snprintf(want, sizeof want, "cannot create directory '%s': Not a directory", dir);
    CHECK(strstr(npu_context_errmsg(ctx), want) != NULL);
    if (!strstr(npu_context_errmsg(ctx), want))
      fprintf(stderr, "got: %s\n", npu_context_errmsg(ctx));
    session_handles_release(&h);
    CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  }
  npu_context_release(ctx);
}

/* ---- the allocation-failure sweep ---- */

typedef struct sweep_case {
  session_handles h; /* first: after_release_handles releases it */
  int mode;
  char dir[300];
} sweep_case;

static npu_status sweep_run(npu_context *ctx, void *ud) {
  sweep_case *c = ud;
  return scenario(ctx, &c->h, c->mode, c->dir, NULL);
}

static void test_allocation_failure_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  static const char *const names[N_MODES] = {"tensor dump", "stats dump", "overflow detection",
                                             "dump_layer"};
  for (int mode = 0; mode < N_MODES; mode++) {
    sweep_case c = {.mode = mode};
    snprintf(c.dir, sizeof c.dir, "%s/sweep%d", tmp_root, mode);
    int n_failures = sweep_alloc_failures(
        ctx, &(scenario_def){.run = sweep_run, .after = after_release_handles, .ud = &c,
                             .what = names[mode]});
    CHECK(n_failures > 20);
  }
  npu_context_release(ctx);
}

int main(void) {
  if (!mkdtemp(tmp_root)) {
    perror("mkdtemp");
    return 1;
  }
  test_overflow_logs_one_line();
  test_unwritable_path();
  test_allocation_failure_sweep();
  remove_tree(tmp_root);
  return check_summary("test_dump");
}
