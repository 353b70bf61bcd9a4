/*
 * test_external_weight.c — external_weight through the C API (compile/external_weight.c):
 * results equal with the option on and off, the weight files in
 * $ASCEND_WORK_PATH/tmp_weight_<pid>_<session> while the session lives (identical constants
 * in one file, a folded constant in its own), the directory gone after close, the graph's and
 * the plan's constants out of the context's accounted memory, a directory that cannot be made
 * (NPU_ERR_IO naming it), two contexts' sessions sharing ASCEND_WORK_PATH (a directory each,
 * closing one leaves the other's files), and the allocation-failure sweep with the option on.
 *
 * Files go to a fresh directory under /tmp (ASCEND_WORK_PATH), removed at the end.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npu_test.h"

static char tmp_dir[64];

/* The weight directory of this process in dir (its name in name), and how many files it
   holds; -1 when there is none. */
static int weight_files(const char *dir, char *name, size_t size) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "tmp_weight_%ld_", (long)getpid());
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = -1;
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    if ((size_t)snprintf(name, size, "%s/%.64s", dir, e->d_name) >= size) continue;
    DIR *w = opendir(name);
    n = 0;
    for (struct dirent *f; w && (f = readdir(w));)
      if (f->d_name[0] != '.') n += strncmp(f->d_name, "weight_", 7) == 0 ? 1 : 1000;
    if (w) closedir(w);
  }
  closedir(d);
  return n;
}

/* y = ((x @ w1) @ w2 + b) @ (w3 * two): w1 and w2 hold the same 64x64 floats (16 KiB, one
   file), w3 others, k = w3 * two is folded at compile time (a plan constant of 16 KiB, a
   file of its own); b (256 bytes) stays in memory. */
typedef struct model {
  npu_graph *g;
  int x, y;
} model;

static npu_status constant(npu_context *ctx, npu_graph *g, const char *name, int64_t n,
                           float base, int *value) {
  npu_tensor *t;
  int64_t shape[2] = {n, 64};
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, n == 1 ? 1 : 2, n == 1 ? shape + 1 : shape, &t));
  float *d = npu_tensor_data(t);
  for (int64_t i = 0; i < npu_tensor_numel(t); i++) d[i] = base + 0.001f * (float)(i % 997);
  return graph_const(g, name, t, value);
}

static npu_status build(npu_context *ctx, model *m) {
  TRY(npu_graph_new(ctx, &m->g));
  int64_t xs[] = {-1, 64};
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 2}}};
  int node, w1, w2, w3, b, two, k, h, h2, z;
  TRY(npu_graph_add_op(m->g, "placeholder", "x", 0, NULL, 2, a, &node));
  m->x = npu_graph_output(m->g, node, 0);
  TRY(constant(ctx, m->g, "w1", 64, -0.03f, &w1));
  TRY(constant(ctx, m->g, "w2", 64, -0.03f, &w2));
  TRY(constant(ctx, m->g, "w3", 64, -0.5f, &w3));
  TRY(constant(ctx, m->g, "b", 1, 0.25f, &b));
  npu_tensor *t2;
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 0, NULL, &(float){2}, sizeof(float), &t2));
  TRY(graph_const(m->g, "two", t2, &two));
  TRY(graph_op(m->g, "mul", "k", 2, (int[]){w3, two}, &k));
  TRY(graph_op(m->g, "matmul", "h", 2, (int[]){m->x, w1}, &h));
  TRY(graph_op(m->g, "matmul", "h2", 2, (int[]){h, w2}, &h2));
  TRY(graph_op(m->g, "add", "z", 2, (int[]){h2, b}, &z));
  TRY(graph_op(m->g, "matmul", "y", 2, (int[]){z, k}, &m->y));
  return NPU_OK;
}

typedef struct run_case {
  bool on;
  model m;
  npu_options *o;
  npu_session *s;
  npu_tensor *x, *y;
} run_case;

static npu_status open_and_run(npu_context *ctx, run_case *c) {
  TRY(build(ctx, &c->m));
  TRY(npu_options_new(ctx, &c->o));
  TRY(npu_options_set_bool(c->o, "external_weight", c->on));
  TRY(npu_options_set_string(c->o, "precision_mode", "must_keep_origin_dtype"));
  TRY(npu_options_set_int(c->o, "export_compile_stat", 0)); /* no fusion_result.json */
  TRY(npu_session_new(ctx, c->m.g, c->o, &c->s));
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, (int64_t[]){3, 64}, &c->x));
  float *d = npu_tensor_data(c->x);
  for (int i = 0; i < 3 * 64; i++) d[i] = (float)((i * 7) % 13) - 6.0f;
  return npu_session_run(c->s, 1, &c->m.x, &c->x, 1, &c->m.y, &c->y, 0, NULL);
}

static void close_case(run_case *c) {
  npu_tensor_release(c->y);
  npu_tensor_release(c->x);
  npu_session_release(c->s);
  npu_options_release(c->o);
  npu_graph_release(c->m.g);
  *c = (run_case){0};
}

static void test_files_results_memory(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  size_t base = npu_context_live_bytes(ctx);
  char dir[256] = "";

  run_case off = {.on = false};
  npu_status st = open_and_run(ctx, &off);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "off: %s\n", npu_context_errmsg(ctx));
  size_t live_off = npu_context_live_bytes(ctx) - base;
  CHECK_EQ_I64(weight_files(tmp_dir, dir, sizeof dir), -1); /* off: nothing written */

  run_case on = {.on = true};
  size_t before_on = npu_context_live_bytes(ctx);
  st = open_and_run(ctx, &on);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "on: %s\n", npu_context_errmsg(ctx));
  size_t live_on = npu_context_live_bytes(ctx) - before_on;
  /* w1 = w2 share a file; w3 and the folded k one each */
  CHECK_EQ_I64(weight_files(tmp_dir, dir, sizeof dir), 3);
  /* off: 3 graph weights and k, 16 KiB each, accounted; on: 4 mappings, headers only */
  CHECK(live_off > live_on + 60 * 1024);
  fprintf(stderr, "external_weight: accounted %zu bytes off, %zu on\n", live_off, live_on);
  if (off.y && on.y) {
    CHECK_EQ_I64(npu_tensor_nbytes(on.y), npu_tensor_nbytes(off.y));
    CHECK(memcmp(npu_tensor_data(on.y), npu_tensor_data(off.y), npu_tensor_nbytes(off.y)) == 0);
  }

  /* a second plan (another batch size) reads the same constants: no new file */
  npu_tensor *x5 = NULL, *y5 = NULL;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, (int64_t[]){5, 64}, &x5) == NPU_OK);
  CHECK(npu_session_run(on.s, 1, &on.m.x, &x5, 1, &on.m.y, &y5, 0, NULL) == NPU_OK);
  CHECK_EQ_I64(weight_files(tmp_dir, dir, sizeof dir), 3);
  npu_tensor_release(x5);

  /* close: files and directory gone; the graph's mapped constants still read */
  npu_session_close(on.s);
  struct stat sb;
  CHECK(stat(dir, &sb) != 0);
  CHECK_EQ_I64(weight_files(tmp_dir, dir, sizeof dir), -1);
  npu_session *again = NULL;
  npu_tensor *y2 = NULL;
  CHECK(npu_session_new(ctx, on.m.g, off.o, &again) == NPU_OK);
  CHECK(npu_session_run(again, 1, &on.m.x, &on.x, 1, &on.m.y, &y2, 0, NULL) == NPU_OK);
  if (y2 && off.y)
    CHECK(memcmp(npu_tensor_data(y2), npu_tensor_data(off.y), npu_tensor_nbytes(off.y)) == 0);
  npu_tensor_release(y2);
  npu_tensor_release(y5);
  npu_session_release(again);
  close_case(&on);
  close_case(&off);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
  npu_context_release(ctx);
}

static void test_unwritable_directory(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  char file[128], work[160];
  snprintf(file, sizeof file, "%s/a_file", tmp_dir);
  write_text(file, "");
  snprintf(work, sizeof work, "%s/work", file); /* under a regular file: cannot be made */
  setenv("ASCEND_WORK_PATH", work, 1);
  run_case c = {.on = true};
  npu_status st = open_and_run(ctx, &c);
  CHECK(st == NPU_ERR_IO);
  const char *msg = npu_context_errmsg(ctx);
  CHECK(strstr(msg, "external_weight") != NULL);
  CHECK(strstr(msg, file) != NULL);
  if (st != NPU_ERR_IO || !strstr(msg, file)) fprintf(stderr, "unwritable: %s\n", msg);
  close_case(&c);
  setenv("ASCEND_WORK_PATH", tmp_dir, 1);
  remove(file);
  npu_context_release(ctx);
}

/* The weight directories of this process in dir: how many, the files of each in files[]
   (in no particular order), the first two names in names[]. */
static int weight_dirs(const char *dir, int files[2], char names[2][256]) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "tmp_weight_%ld_", (long)getpid());
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    if (n < 2) {
      snprintf(names[n], 256, "%s/%.64s", dir, e->d_name);
      files[n] = 0;
      DIR *w = opendir(names[n]);
      for (struct dirent *f; w && (f = readdir(w));)
        if (f->d_name[0] != '.') files[n]++;
      if (w) closedir(w);
    }
    n++;
  }
  closedir(d);
  return n;
}

/* Two contexts of one process: each counts its sessions from 0, so both sessions want
   tmp_weight_<pid>_0.  Each gets a directory of its own; closing one leaves the other's
   files, and the other session still runs and compiles a new plan. */
static void test_two_contexts_one_work_path(void) {
  npu_context *ca, *cb;
  CHECK(npu_context_new(NULL, &ca) == NPU_OK);
  CHECK(npu_context_new(NULL, &cb) == NPU_OK);
  run_case a = {.on = true}, b = {.on = true};
  CHECK(open_and_run(ca, &a) == NPU_OK);
  npu_status st = open_and_run(cb, &b);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "second context: %s\n", npu_context_errmsg(cb));
  int files[2] = {0, 0};
  char names[2][256] = {"", ""};
  CHECK_EQ_I64(weight_dirs(tmp_dir, files, names), 2);
  CHECK_EQ_I64(files[0], 3);
  CHECK_EQ_I64(files[1], 3);
  CHECK(strcmp(names[0], names[1]) != 0);

  npu_session_close(a.s); /* removes a's directory only */
  CHECK_EQ_I64(weight_dirs(tmp_dir, files, names), 1);
  CHECK_EQ_I64(files[0], 3);
  /* b: the same run again, and a new plan (batch 5) over its mapped constants */
  npu_tensor *y = NULL, *x5 = NULL, *y5 = NULL;
  CHECK(npu_session_run(b.s, 1, &b.m.x, &b.x, 1, &b.m.y, &y, 0, NULL) == NPU_OK);
  if (y && a.y) CHECK(memcmp(npu_tensor_data(y), npu_tensor_data(a.y), npu_tensor_nbytes(y)) == 0);
  CHECK(npu_tensor_new(cb, NPU_DTYPE_F32, 2, (int64_t[]){5, 64}, &x5) == NPU_OK);
  CHECK(npu_session_run(b.s, 1, &b.m.x, &x5, 1, &b.m.y, &y5, 0, NULL) == NPU_OK);
  CHECK_EQ_I64(npu_session_n_plans(b.s), 2);
  CHECK_EQ_I64(weight_dirs(tmp_dir, files, names), 1);
  CHECK_EQ_I64(files[0], 3);
  npu_tensor_release(y);
  npu_tensor_release(x5);
  npu_tensor_release(y5);
  close_case(&b);
  close_case(&a);
  CHECK_EQ_I64(weight_dirs(tmp_dir, files, names), 0);
  npu_context_release(cb);
  npu_context_release(ca);
}

static npu_status sweep_run(npu_context *ctx, void *ud) {
  (void)ud;
  run_case c = {.on = true};
  npu_status st = open_and_run(ctx, &c);
  close_case(&c);
  return st;
}

static void test_allocation_failure_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.run = sweep_run, .what = "external_weight"});
  CHECK(n_failures > 20);
  char dir[256];
  CHECK_EQ_I64(weight_files(tmp_dir, dir, sizeof dir), -1); /* every session cleaned up */
  npu_context_release(ctx);
}

int main(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/npu_external_weight_XXXXXX");
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("ASCEND_WORK_PATH", tmp_dir, 1);
  test_files_results_memory();
  test_unwritable_directory();
  test_two_contexts_one_work_path();
  test_allocation_failure_sweep();
  unsetenv("ASCEND_WORK_PATH");
  rmdir(tmp_dir);
  return check_summary("test_external_weight");
}
