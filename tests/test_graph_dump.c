/*
 * test_graph_dump.c — DUMP_GE_GRAPH through the C API (compile/graph_dump.c), where the
 * environment can be set per session: the files of each stage, their JSON read back with
 * cJSON, a directory that cannot be created, nothing written when the variable is unset, and
 * the allocation-failure sweep with dumps on (a clean NPU_ERR_NOMEM, zero live bytes).
 *
 * Files go to a fresh directory under /tmp (DUMP_GRAPH_PATH), removed at the end.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "npu_test.h"

static char tmp_dir[64];

/* Files in dir (0 when it does not exist). */
static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void remove_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char path[512];
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    remove(path);
  }
  closedir(d);
}

static cJSON *read_json(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return cJSON_Parse(buf);
}

/* x (-1, 4) -> matmul w (4, 3) -> bias_add b -> relu -> mul k, k = two * three folded. */
typedef struct model {
  npu_graph *g;
  int x, y;
} model;

static npu_status constant(npu_context *ctx, npu_graph *g, const char *name, int ndim,
                           const int64_t *shape, float base, int *value) {
  npu_tensor *t;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, ndim, shape, &t));
  float *d = npu_tensor_data(t);
  for (int64_t i = 0; i < npu_tensor_numel(t); i++) d[i] = base + 0.25f * (float)i;
  return graph_const(g, name, t, value);
}


static npu_status build(npu_context *ctx, model *m) {
  TRY(npu_graph_new(ctx, &m->g));
  int64_t xs[] = {-1, 4};
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 2}}};
  int node, w, b, two, three, k, mm, z, r;
  TRY(npu_graph_add_op(m->g, "placeholder", "x", 0, NULL, 2, a, &node));
  m->x = npu_graph_output(m->g, node, 0);
  TRY(constant(ctx, m->g, "w", 2, (int64_t[]){4, 3}, -1, &w));
  TRY(constant(ctx, m->g, "b", 1, (int64_t[]){3}, 0.5f, &b));
  TRY(constant(ctx, m->g, "two", 1, (int64_t[]){1}, 2, &two));
  TRY(constant(ctx, m->g, "three", 1, (int64_t[]){1}, 3, &three));
  TRY(graph_op(m->g, "mul", "k", 2, (int[]){two, three}, &k));
  TRY(graph_op(m->g, "matmul", "mm", 2, (int[]){m->x, w}, &mm));
  TRY(graph_op(m->g, "bias_add", "z", 2, (int[]){mm, b}, &z));
  TRY(graph_op(m->g, "relu", "r", 1, (int[]){z}, &r));
  TRY(graph_op(m->g, "mul", "y", 2, (int[]){r, k}, &m->y));
  return NPU_OK;
}

/* Builds the model, runs it once in a new session (the environment as set), releases all. */
static npu_status scenario(npu_context *ctx) {
  model m = {0};
  npu_options *o = NULL;
  npu_session *s = NULL;
  npu_tensor *x = NULL, *y = NULL;
  npu_status st = build(ctx, &m);
  if (!st) st = npu_options_new(ctx, &o);
  if (!st) st = npu_options_set_string(o, "precision_mode", "must_keep_origin_dtype");
  if (!st) st = npu_options_set_int(o, "export_compile_stat", 0); /* no fusion_result.json */
  if (!st) st = npu_session_new(ctx, m.g, o, &s);
  if (!st) st = npu_tensor_new(ctx, NPU_DTYPE_F32, 2, (int64_t[]){2, 4}, &x);
  if (!st) {
    for (int i = 0; i < 8; i++) ((float *)npu_tensor_data(x))[i] = (float)i;
    st = npu_session_run(s, 1, &m.x, &x, 1, &m.y, &y, 0, NULL);
  }
  npu_tensor_release(y);
  npu_tensor_release(x);
  npu_session_release(s);
  npu_options_release(o);
  npu_graph_release(m.g);
  return st;
}

static const char *step_node(const cJSON *step) {
  return cJSON_GetStringValue(cJSON_GetObjectItem(step, "node"));
}

static void test_stages_and_contents(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  setenv("DUMP_GE_GRAPH", "1", 1);
  unsetenv("DUMP_GRAPH_LEVEL");
  setenv("DUMP_GRAPH_PATH", tmp_dir, 1);
  npu_status st = scenario(ctx);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "scenario: %s\n", npu_context_errmsg(ctx));
  CHECK_EQ_I64(count_files(tmp_dir), 12); /* 6 stages, .json and .dot */

  char path[256];
  snprintf(path, sizeof path, "%s/ge_proto_00000000_00_PreRunBegin.json", tmp_dir);
  cJSON *j = read_json(path);
  CHECK(j != NULL);
  const cJSON *plan = cJSON_GetObjectItem(j, "plan");
  const cJSON *steps = cJSON_GetObjectItem(plan, "steps");
  CHECK_EQ_I64(cJSON_GetArraySize(steps), 5); /* k, mm, z, r, y: nothing folded or fused yet */
  CHECK(strcmp(step_node(cJSON_GetArrayItem(steps, 0)), "k") == 0);
  CHECK_EQ_I64(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "stage")), 0);
  cJSON_Delete(j);

  snprintf(path, sizeof path, "%s/ge_proto_00000000_05_MemoryPlanning.json", tmp_dir);
  j = read_json(path);
  CHECK(j != NULL);
  plan = cJSON_GetObjectItem(j, "plan");
  steps = cJSON_GetObjectItem(plan, "steps");
  CHECK_EQ_I64(cJSON_GetArraySize(steps), 2); /* fused matmul (z, r absorbed), then y */
  CHECK(strcmp(step_node(cJSON_GetArrayItem(steps, 0)), "mm") == 0);
  const cJSON *consts = cJSON_GetObjectItem(j, "constants");
  bool saw_k = false;
  for (const cJSON *c = consts ? consts->child : NULL; c; c = c->next)
    if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")), "k:0") == 0) {
      saw_k = true;
      CHECK_NEAR(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "values"), 0)),
                 6, 0);
    }
  CHECK(saw_k);
  cJSON_Delete(j);
  remove_files(tmp_dir);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

static void test_levels(void) {
  static const struct {
    const char *level;
    int files;
    const char *one; /* a file that must be there */
  } cases[] = {{"1", 12, "ge_proto_00000000_03_PrecisionAssignment.dot"},
               {"3", 2, "ge_proto_00000000_05_MemoryPlanning.json"},
               {"4", 2, "ge_proto_00000000_00_PreRunBegin.dot"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    npu_context *ctx;
    CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
    setenv("DUMP_GE_GRAPH", "2", 1);
    setenv("DUMP_GRAPH_LEVEL", cases[i].level, 1);
    setenv("DUMP_GRAPH_PATH", tmp_dir, 1);
    CHECK(scenario(ctx) == NPU_OK);
    CHECK_EQ_I64(count_files(tmp_dir), cases[i].files);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, cases[i].one);
    CHECK(access(path, F_OK) == 0);
    remove_files(tmp_dir);
    npu_context_release(ctx);
  }
  unsetenv("DUMP_GRAPH_LEVEL");
}

static void test_off_and_errors(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  char sub[128];
  snprintf(sub, sizeof sub, "%s/never", tmp_dir);
  unsetenv("DUMP_GE_GRAPH");
  setenv("DUMP_GRAPH_PATH", sub, 1);
  CHECK(scenario(ctx) == NPU_OK);
  CHECK(access(sub, F_OK) != 0); /* unset: nothing made, not even the directory */

  /* a directory below a regular file cannot be made */
  char file[128], bad[160];
  snprintf(file, sizeof file, "%s/file", tmp_dir);
  write_text(file, "");
  snprintf(bad, sizeof bad, "%s/sub", file);
  setenv("DUMP_GE_GRAPH", "3", 1);
  setenv("DUMP_GRAPH_PATH", bad, 1);
  CHECK(scenario(ctx) == NPU_ERR_IO);
  CHECK(strstr(npu_context_errmsg(ctx), bad) != NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "DUMP_GRAPH_PATH") != NULL);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  remove(file);
  npu_context_release(ctx);

  /* a file that cannot be written: a directory stands where the first one goes */
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  char blocked[160], taken[256];
  snprintf(blocked, sizeof blocked, "%s/blocked", tmp_dir);
  snprintf(taken, sizeof taken, "%s/ge_proto_00000000_00_PreRunBegin.json", blocked);
  setenv("DUMP_GRAPH_PATH", blocked, 1);
  CHECK(mkdir(blocked, 0777) == 0 && mkdir(taken, 0777) == 0);
  CHECK(scenario(ctx) == NPU_ERR_IO);
  CHECK(strstr(npu_context_errmsg(ctx), "DUMP_GE_GRAPH: cannot write") != NULL);
  CHECK(strstr(npu_context_errmsg(ctx), taken) != NULL);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  rmdir(taken);
  remove_files(blocked);
  rmdir(blocked);
  npu_context_release(ctx);
}

static npu_status sweep_run(npu_context *ctx, void *ud) {
  (void)ud;
  return scenario(ctx);
}

static void test_allocation_failure_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  setenv("DUMP_GE_GRAPH", "1", 1);
  setenv("DUMP_GRAPH_PATH", tmp_dir, 1);
  int n_failures = sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_run});
  CHECK(n_failures > 20);
  remove_files(tmp_dir);
  unsetenv("DUMP_GE_GRAPH");
  npu_context_release(ctx);
}

int main(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/npu_graph_dump_XXXXXX");
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_stages_and_contents();
  test_levels();
  test_off_and_errors();
  test_allocation_failure_sweep();
  unsetenv("DUMP_GRAPH_PATH");
  remove_files(tmp_dir);
  rmdir(tmp_dir);
  return check_summary("test_graph_dump");
}
