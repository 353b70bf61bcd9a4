/*
 * test_profile.c — profiling_mode through the C API (exec/profile.c): trace.json parsed with
 * cJSON (one complete event per step per iteration, pid = the device, the metadata), the
 * environment variables PROFILING_MODE / PROFILING_OPTIONS (setenv), storage_limit capping
 * trace.json (recorded in its metadata and info.json), a close that cannot write (reported
 * through the log hook), and the allocation-failure sweep (a failure in session creation is a
 * clean NPU_ERR_NOMEM; one for a new plan's statistics leaves the run going and the profile
 * marked truncated, its runs and plans counted apart; zero live bytes after every attempt), and
 * more step events than the profiler buffers (all written, in order).
 */
#include <cjson/cJSON.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npu_test.h"

static char base[256]; /* this test's directory under /tmp */

static char *read_all(const char *path, long *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
  if (buf) buf[n] = 0;
  fclose(f);
  if (len) *len = n;
  return buf;
}

/* The one PROF_* directory under dir into out (false when there is not exactly one). */
static bool prof_dir(const char *dir, char *out, size_t n) {
  char pattern[512];
  glob_t gl;
  snprintf(pattern, sizeof pattern, "%s/PROF_*", dir);
  bool one = glob(pattern, 0, NULL, &gl) == 0 && gl.gl_pathc == 1;
  if (one) snprintf(out, n, "%s", gl.gl_pathv[0]);
  globfree(&gl);
  return one;
}

/* y = relu(x W) with x (2, 3) fed, W (3, 4) constant: two steps (matmul, relu: a feed and a
   constant are no steps) run `runs` times, profiled into `out`; the session is closed (files
   written). */
static npu_status scenario(npu_context *ctx, session_handles *h, const char *out,
                           const char *mm_name, const char *name, int runs, int device) {
  TRY(npu_graph_new(ctx, &h->g));
  npu_graph *g = h->g;
  int64_t xs[] = {2, 3}, ws[] = {3, 4};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 2}}};
  int nx, nw, nm, nr;
  TRY(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx));
  npu_tensor *w;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, ws, &w));
  npu_attr wv = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = w};
  npu_status st = npu_graph_add_op(g, "const", "W", 0, NULL, 1, &wv, &nw);
  npu_tensor_release(w);
  TRY(st);
  int mm_in[] = {out0(g, nx), out0(g, nw)};
  TRY(npu_graph_add_op(g, "matmul", mm_name, 2, mm_in, 0, NULL, &nm));
  int r_in[] = {out0(g, nm)};
  TRY(npu_graph_add_op(g, "relu", name, 1, r_in, 0, NULL, &nr));
  TRY(npu_options_new(ctx, &h->o));
  TRY(npu_options_set_int(h->o, "graph_run_mode", 0));
  TRY(npu_options_set_string(h->o, "precision_mode", "must_keep_origin_dtype")); /* no casts */
  TRY(npu_options_set_int(h->o, "session_device_id", device));
  TRY(npu_options_set_bool(h->o, "profiling_mode", 1));
  char json[512];
  snprintf(json, sizeof json, "{\"output\":\"%s\",\"storage_limit\":\"200MB\"}", out);
  TRY(npu_options_set_string(h->o, "profiling_options", json));
  TRY(npu_session_new(ctx, g, h->o, &h->s));
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, xs, &h->x));
  int fetch = out0(g, nr), feed = out0(g, nx);
  for (int i = 0; i < runs; i++) {
    npu_tensor_release(h->out);
    h->out = NULL;
    TRY(npu_session_run(h->s, 1, &feed, &h->x, 1, &fetch, &h->out, 0, NULL));
  }
  npu_session_close(h->s);
  return NPU_OK;
}

static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void test_trace_json(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  char out[300], dir[512], path[600];
  snprintf(out, sizeof out, "%s/trace", base);
  session_handles h = {0};
  npu_status st = scenario(ctx, &h, out, "mm", "r", 4, 2);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "scenario: %s\n", npu_context_errmsg(ctx));
  session_handles_release(&h);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
  CHECK(prof_dir(out, dir, sizeof dir));
  snprintf(path, sizeof path, "%s/trace.json", dir);
  char *text = read_all(path, NULL);
  CHECK(text != NULL);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  CHECK(root != NULL);
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  CHECK(cJSON_IsArray(events));
  int n_x = 0, n_meta = 0, per_step[2] = {0};
  double last_ts[2] = {-1, -1};
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    const char *ph = str_of(e, "ph");
    CHECK(ph != NULL);
    CHECK_EQ_I64(num_of(e, "pid"), 2); /* the device */
    if (ph && strcmp(ph, "M") == 0) n_meta++;
    if (!ph || strcmp(ph, "X") != 0) continue;
    n_x++;
    CHECK(strcmp(str_of(e, "cat"), "op") == 0);
    CHECK_EQ_I64(num_of(e, "tid"), 0);
    CHECK(num_of(e, "dur") >= 0 && num_of(e, "ts") >= 0);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    int step = (int)num_of(args, "step");
    CHECK(step >= 0 && step < 2);
    if (step < 0 || step >= 2) continue;
    per_step[step]++;
    CHECK(num_of(e, "ts") > last_ts[step]); /* each step's events in time order */
    last_ts[step] = num_of(e, "ts");
    const char *op = str_of(args, "op"), *name = str_of(e, "name");
    static const char *const ops[] = {"matmul", "relu"};
    static const char *const names[] = {"mm", "r"};
    CHECK(op && strcmp(op, ops[step]) == 0);
    CHECK(name && strcmp(name, names[step]) == 0);
    if (step == 0) {
      CHECK(strcmp(str_of(args, "input_shapes"), "[2,3];[3,4]") == 0);
      CHECK(strcmp(str_of(args, "output_dtypes"), "float32") == 0);
    }
  }
  CHECK_EQ_I64(n_x, 2 * 4);
  for (int k = 0; k < 2; k++) CHECK_EQ_I64(per_step[k], 4);
  CHECK_EQ_I64(n_meta, 2); /* process and thread names; no iteration thread in inference */
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "otherData");
  CHECK_EQ_I64(num_of(meta, "events"), 8);
  CHECK_EQ_I64(num_of(meta, "storage_limit_bytes"), 200 * 1048576.0);
  CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(meta, "truncated")));
  cJSON_Delete(root);
  free(text);
  snprintf(path, sizeof path, "%s/info.json", dir);
  text = read_all(path, NULL);
  root = text ? cJSON_Parse(text) : NULL;
  CHECK(root != NULL);
  CHECK_EQ_I64(num_of(root, "runs"), 4);
  CHECK_EQ_I64(num_of(root, "device_id"), 2);
  CHECK(strcmp(str_of(root, "task_trace"), "l1") == 0);
  cJSON_Delete(root);
  free(text);
}

/* More step events than the buffer holds (4096): it is written out between iterations, and
   trace.json holds every event once, in order (step 0 then 1 of each iteration). */
static void test_trace_over_the_buffer(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  enum { RUNS = 2500 };
  char out[300], dir[512], path[600];
  snprintf(out, sizeof out, "%s/many", base);
  session_handles h = {0};
  CHECK(scenario(ctx, &h, out, "mm", "r", RUNS, 0) == NPU_OK);
  session_handles_release(&h);
  npu_context_release(ctx);
  CHECK(prof_dir(out, dir, sizeof dir));
  snprintf(path, sizeof path, "%s/trace.json", dir);
  char *text = read_all(path, NULL);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  CHECK(root != NULL);
  const cJSON *e;
  int n_x = 0, in_order = 0;
  double last_iteration = -1;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "traceEvents")) {
    const char *ph = str_of(e, "ph");
    if (!ph || strcmp(ph, "X") != 0) continue;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    int step = (int)num_of(args, "step");
    double it = num_of(args, "iteration");
    in_order += step == n_x % 2 && (step ? it == last_iteration : it > last_iteration);
    last_iteration = it;
    n_x++;
  }
  CHECK_EQ_I64(n_x, 2 * RUNS);
  CHECK_EQ_I64(in_order, 2 * RUNS);
  CHECK_EQ_I64(num_of(cJSON_GetObjectItemCaseSensitive(root, "otherData"), "events"), 2 * RUNS);
  cJSON_Delete(root);
  free(text);
}

/* PROFILING_MODE / PROFILING_OPTIONS are read from the process environment when a session is
   created; an explicit profiling_mode wins. */
static void test_environment(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  char out[300], dir[512], json[400];
  snprintf(out, sizeof out, "%s/env", base);
  snprintf(json, sizeof json, "{\"output\":\"%s\",\"task_trace\":\"l0\"}", out);
  setenv("PROFILING_MODE", "true", 1);
  setenv("PROFILING_OPTIONS", json, 1);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  npu_session *s = NULL;
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  npu_session_release(s);
  CHECK(prof_dir(out, dir, sizeof dir));
  char path[600];
  snprintf(path, sizeof path, "%s/info.json", dir);
  char *text = read_all(path, NULL);
  CHECK(text && strstr(text, "\"task_trace\": \"l0\""));
  free(text);
  /* explicit False: nothing more is made */
  npu_options *o;
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  CHECK(npu_options_set_bool(o, "profiling_mode", 0) == NPU_OK);
  CHECK(npu_session_new(ctx, g, o, &s) == NPU_OK);
  npu_session_release(s);
  CHECK(prof_dir(out, dir, sizeof dir)); /* still exactly one */
  npu_options_release(o);
  unsetenv("PROFILING_MODE");
  unsetenv("PROFILING_OPTIONS");
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* storage_limit (200 MB, the least allowed): steps with 1500-character names until trace.json
   would pass it; the file stays under it, still parses, and says it was cut. */
enum { RUNS = 70000 }; /* 140000 events of about 1.6 kB: more than 200 MB */
static void test_storage_limit(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  char out[300], dir[512], path[600];
  snprintf(out, sizeof out, "%s/limit", base);
  char name[1501], mm_name[1501];
  memset(name, 'n', 1500);
  name[1500] = 0;
  memcpy(mm_name, name, sizeof name);
  mm_name[0] = 'm';
  session_handles h = {0};
  CHECK(scenario(ctx, &h, out, mm_name, name, RUNS, 0) == NPU_OK);
  session_handles_release(&h);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
  CHECK(prof_dir(out, dir, sizeof dir));
  snprintf(path, sizeof path, "%s/trace.json", dir);
  struct stat sb;
  CHECK(stat(path, &sb) == 0);
  CHECK(sb.st_size <= 200 * 1048576L);
  CHECK(sb.st_size > 199 * 1048576L);
  FILE *f = fopen(path, "rb");
  char tail[1024] = {0};
  if (f) {
    fseek(f, -(long)(sizeof tail - 1), SEEK_END);
    CHECK(fread(tail, 1, sizeof tail - 1, f) == sizeof tail - 1);
    fclose(f);
  }
  char *meta = strstr(tail, "\"otherData\":");
  CHECK(meta != NULL);
  cJSON *m = meta ? cJSON_ParseWithOpts(meta + strlen("\"otherData\":"), NULL, 0) : NULL;
  CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "truncated")));
  double dropped = num_of(m, "events_dropped"), kept = num_of(m, "events");
  CHECK(dropped > 0);
  CHECK_EQ_I64(kept + dropped, 2.0 * RUNS);
  cJSON_Delete(m);
  snprintf(path, sizeof path, "%s/info.json", dir);
  char *text = read_all(path, NULL);
  CHECK(text && strstr(text, "\"truncated\": true") && strstr(text, "storage_limit reached"));
  free(text);
  /* the op summary still counts every step */
  snprintf(path, sizeof path, "%s/op_summary.csv", dir);
  text = read_all(path, NULL);
  CHECK(text && strstr(text, ",relu,,70000,"));
  free(text);
  snprintf(path, sizeof path, "%s/trace.json", dir);
  remove(path);
}

static char logged[1024];
static void capture(void *ud, int level, const char *message) {
  (void)ud, (void)level;
  if (!logged[0]) snprintf(logged, sizeof logged, "%s", message);
}

/* The directory is gone when the session closes: close cannot fail, the log hook says why. */
static void test_close_reports_through_the_log(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_context_set_log(ctx, capture, NULL);
  char out[300], dir[512];
  snprintf(out, sizeof out, "%s/gone", base);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  npu_options *o;
  char json[400];
  snprintf(json, sizeof json, "{\"output\":\"%s\"}", out);
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  CHECK(npu_options_set_bool(o, "profiling_mode", 1) == NPU_OK);
  CHECK(npu_options_set_string(o, "profiling_options", json) == NPU_OK);
  npu_session *s = NULL;
  CHECK(npu_session_new(ctx, g, o, &s) == NPU_OK);
  CHECK(prof_dir(out, dir, sizeof dir));
  remove_tree(out);
  npu_session_release(s);
  CHECK(strstr(logged, "profiling: cannot create") != NULL);
  CHECK(strstr(logged, dir) != NULL);
  npu_options_release(o);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

typedef struct sweep_case {
  session_handles h; /* first: after_release_handles releases it */
  char out[300];
} sweep_case;

static npu_status sweep_run(npu_context *ctx, void *ud) {
  sweep_case *c = ud;
  return scenario(ctx, &c->h, c->out, "mm", "r", 2, 0);
}

static void test_allocation_failure_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  sweep_case c = {0};
  const char *out = c.out;
  snprintf(c.out, sizeof c.out, "%s/sweep", base);
  /* Failures swallowed by the profiler (a new plan's statistics) let the scenario succeed, so
     the sweep ends only after a long run of successes. */
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.run = sweep_run, .after = after_release_handles, .ud = &c,
                           .ok_in_a_row = 40});
  CHECK(n_failures > 20);
  npu_context_release(ctx);
  /* some attempt lost its plan's statistics and said so */
  char pattern[400];
  glob_t gl;
  int truncated = 0;
  snprintf(pattern, sizeof pattern, "%s/PROF_*/info.json", out);
  if (glob(pattern, 0, NULL, &gl) == 0)
    for (size_t i = 0; i < gl.gl_pathc; i++) {
      char *text = read_all(gl.gl_pathv[i], NULL);
      if (text && strstr(text, "\"plans_unprofiled_out_of_memory\": 1")) truncated++;
      /* its run, counted apart: the plan's next run made the record (two runs, one plan) */
      if (text && strstr(text, "\"plans_unprofiled_out_of_memory\": 1"))
        CHECK(strstr(text, "\"runs_unprofiled_out_of_memory\": 1,") != NULL &&
              strstr(text, "\"plans\": 1,") != NULL);
      free(text);
    }
  globfree(&gl);
  CHECK(truncated >= 1);
}

int main(void) {
  snprintf(base, sizeof base, "/tmp/test_profile_XXXXXX");
  if (!mkdtemp(base)) {
    perror("mkdtemp");
    return 1;
  }
  test_trace_json();
  test_trace_over_the_buffer();
  test_environment();
  test_close_reports_through_the_log();
  test_allocation_failure_sweep();
  test_storage_limit();
  remove_tree(base);
  return check_summary("test_profile");
}
