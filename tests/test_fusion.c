/*
 * test_fusion.c — the fusion passes through the C API: fusion_result.json where and when
 * export_compile_stat says (npu_out/FE/<pid>/ or $ASCEND_WORK_PATH/FE/<pid>/, merged with
 * what is there, session and graph ids, nothing for sessions that fused nothing), the errors
 * of an unwritable path, and the allocation-failure sweep over a graph every pass rewrites
 * (switch file parsed, constants folded, steps replaced), and over a training step (the
 * backward pass's and the update's passes, folded broadcasts, dropped steps): a clean
 * NPU_ERR_NOMEM and zero live bytes for every failing allocation; the fused kernels (kernels.h, "fused steps") against
 * their reference twins, bit for bit, and fused plans against thread counts.  The Lua side
 * (spec/fusion_spec.lua) covers what each pass matches and leaves.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npu_test.h"
#include "kernels/kmath.h"

static npu_status add_const(npu_context *ctx, npu_graph *g, const char *name, int ndim,
                            const int64_t *shape, float base, int *value) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  float data[1024];
  for (int64_t i = 0; i < n; i++) data[i] = base + 0.01f * (float)((i * 7) % 23) - 0.1f;
  npu_tensor *t;
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, ndim, shape, data, (size_t)n * sizeof *data, &t));
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  int node;
  npu_status s = npu_graph_add_op(g, "const", name, 0, NULL, 1, &a, &node);
  npu_tensor_release(t);
  if (!s) *value = out0(g, node);
  return s;
}

static npu_status add1(npu_graph *g, const char *op, int a, int *out) {
  int node;
  TRY(npu_graph_add_op(g, op, NULL, 1, &a, 0, NULL, &node));
  *out = out0(g, node);
  return NPU_OK;
}

static npu_status add2(npu_graph *g, const char *op, int a, int b, int *out) {
  int in[2] = {a, b}, node;
  TRY(npu_graph_add_op(g, op, NULL, 2, in, 0, NULL, &node));
  *out = out0(g, node);
  return NPU_OK;
}

/* x (2, 6, 6, 3) -> conv2d -> * scale + shift -> relu (ConvBatchnormFusionPass) -> reshape
   (2, 144) -> matmul -> bias_add -> sigmoid (MatMulBiasAddFusionPass) -> * 2 -> - 1
   (TbeEltwiseFusionPass). */
static npu_status build(npu_context *ctx, npu_graph **out, int *x, int *y) {
  *out = NULL;
  npu_graph *g;
  TRY(npu_graph_new(ctx, &g));
  int64_t xs[] = {2, 6, 6, 3}, fs[] = {3, 3, 3, 4}, cs[] = {4}, ws[] = {144, 5}, bs[] = {5},
          one[] = {1}, rs[] = {2, 144};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 4}}};
  npu_attr conv[] = {{.name = "padding", .type = NPU_ATTR_STRING, .u.s = "SAME"}};
  npu_attr shape[] = {{.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {rs, 2}}};
  int nx, f, sc, sh, w, b, two, c1, v, node;
  npu_status s = npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx);
  if (!s) s = add_const(ctx, g, "f", 4, fs, 0.1f, &f);
  if (!s) s = add_const(ctx, g, "scale", 1, cs, 1.0f, &sc);
  if (!s) s = add_const(ctx, g, "shift", 1, cs, 0.2f, &sh);
  if (!s) s = add_const(ctx, g, "w", 2, ws, 0.0f, &w);
  if (!s) s = add_const(ctx, g, "b", 1, bs, 0.3f, &b);
  if (!s) s = add_const(ctx, g, "two", 1, one, 2.1f, &two);
  if (!s) s = add_const(ctx, g, "one", 1, one, 1.1f, &c1);
  int in[2] = {out0(g, nx), f};
  if (!s) s = npu_graph_add_op(g, "conv2d", "conv", 2, in, 1, conv, &node);
  if (!s) v = out0(g, node);
  if (!s) s = add2(g, "mul", v, sc, &v);
  if (!s) s = add2(g, "add", v, sh, &v);
  if (!s) s = add1(g, "relu", v, &v);
  if (!s) s = npu_graph_add_op(g, "reshape", NULL, 1, &v, 1, shape, &node);
  if (!s) v = out0(g, node);
  if (!s) s = add2(g, "matmul", v, w, &v);
  if (!s) s = add2(g, "bias_add", v, b, &v);
  if (!s) s = add1(g, "sigmoid", v, &v);
  if (!s) s = add2(g, "mul", v, two, &v);
  if (!s) s = add2(g, "sub", v, c1, &v);
  if (s) {
    npu_graph_release(g);
    return s;
  }
  *out = g;
  *x = out0(g, nx);
  *y = v;
  return NPU_OK;
}

static npu_status input(npu_context *ctx, npu_tensor **out) {
  int64_t xs[] = {2, 6, 6, 3};
  float data[216];
  for (int i = 0; i < 216; i++) data[i] = (float)((i * 13) % 17) / 8.0f - 1.0f;
  return npu_tensor_from_data(ctx, NPU_DTYPE_F32, 4, xs, data, sizeof data, out);
}

static cJSON *read_json(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return cJSON_Parse(buf);
}

static const char *stat_of(const cJSON *root, const char *key, const char *kind, const char *pass,
                           const char *field) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  v = cJSON_GetObjectItemCaseSensitive(v, kind);
  v = cJSON_GetObjectItemCaseSensitive(v, pass);
  v = cJSON_GetObjectItemCaseSensitive(v, field);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool has_key(const char *path, const char *key) {
  cJSON *root = read_json(path);
  bool found = cJSON_GetObjectItemCaseSensitive(root, key) != NULL;
  cJSON_Delete(root);
  return found;
}

static bool streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* A session on g with export_compile_stat `mode` (and a switch file when given). */
static npu_status new_session(npu_context *ctx, npu_graph *g, int mode, const char *switches,
                              npu_session **s) {
  npu_options *o;
  TRY(npu_options_new(ctx, &o));
  npu_status st = npu_options_set_int(o, "export_compile_stat", mode);
  if (!st) st = npu_options_set_string(o, "precision_mode", "must_keep_origin_dtype");
  if (!st && switches) st = npu_options_set_string(o, "fusion_switch_file", switches);
  if (!st) st = npu_session_new(ctx, g, o, s);
  npu_options_release(o);
  return st;
}

static npu_status run(npu_session *s, int x, npu_tensor *xt, int y, float *first) {
  npu_tensor *out = NULL;
  TRY(npu_session_run(s, 1, &x, &xt, 1, &y, &out, 0, NULL));
  *first = ((const float *)npu_tensor_data(out))[0];
  npu_tensor_release(out);
  return NPU_OK;
}

static char tmp_root[256];

static void make_tmp_root(void) {
  snprintf(tmp_root, sizeof tmp_root, "/tmp/npu_test_fusion_XXXXXX");
  CHECK(mkdtemp(tmp_root) != NULL);
}

static void test_results_in_npu_out_by_default(void) {
  char dir[300], cwd[1024], off[320], res[96];
  snprintf(dir, sizeof dir, "%s/cwd", tmp_root);
  CHECK(mkdir(dir, 0777) == 0);
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(chdir(dir) == 0);
  unsetenv("ASCEND_WORK_PATH");
  snprintf(off, sizeof off, "%s/off.cfg", tmp_root);
  write_text(off, "{\"Switch\":{\"GraphFusion\":{\"ALL\":\"off\"},\"UBFusion\":{\"ALL\":\"off\"}}}");
  /* without ASCEND_WORK_PATH: npu_out/FE/<pid>/, not the working directory itself */
  snprintf(res, sizeof res, "npu_out/FE/%ld", (long)getpid());
  CHECK(mkdir("npu_out", 0777) == 0 && mkdir("npu_out/FE", 0777) == 0 && mkdir(res, 0777) == 0);
  snprintf(res, sizeof res, "npu_out/FE/%ld/fusion_result.json", (long)getpid());
  write_text(res, "{\"someone_else\": {\"kept\": true}}");

  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  int x, y;
  CHECK(build(ctx, &g, &x, &y) == NPU_OK);
  npu_tensor *xt;
  CHECK(input(ctx, &xt) == NPU_OK);
  float fused, unfused;

  /* session 0, mode 2: written after the compile, merged with the file's own key */
  npu_session *s0, *s1, *s2, *s3;
  CHECK(new_session(ctx, g, 2, NULL, &s0) == NPU_OK);
  CHECK(run(s0, x, xt, y, &fused) == NPU_OK);
  cJSON *root = read_json(res);
  CHECK(root != NULL);
  CHECK(cJSON_GetObjectItemCaseSensitive(root, "someone_else") != NULL);
  const char *k0 = "session_and_graph_id_0_0";
  CHECK(streq(stat_of(root, k0, "graph_fusion", "ConvBatchnormFusionPass", "match_times"), "1"));
  CHECK(streq(stat_of(root, k0, "graph_fusion", "ConvBatchnormFusionPass", "effect_times"), "1"));
  CHECK(streq(stat_of(root, k0, "graph_fusion", "MatMulBiasAddFusionPass", "effect_times"), "1"));
  CHECK(streq(stat_of(root, k0, "ub_fusion", "TbeEltwiseFusionPass", "match_times"), "1"));
  CHECK(streq(stat_of(root, k0, "ub_fusion", "TbeEltwiseFusionPass", "effect_times"), "1"));
  CHECK(streq(stat_of(root, k0, "ub_fusion", "TbeEltwiseFusionPass", "repository_hit_times"), "0"));
  /* the conv's bias is the batch norm's: the bias pass has nothing left to match */
  CHECK(stat_of(root, k0, "graph_fusion", "ConvBiasAddFusionPass", "match_times") == NULL);
  cJSON_Delete(root);

  /* session 1, mode 1: nothing until it closes */
  CHECK(new_session(ctx, g, 1, NULL, &s1) == NPU_OK);
  CHECK(run(s1, x, xt, y, &fused) == NPU_OK);
  CHECK(!has_key(res, "session_and_graph_id_1_0"));
  npu_session_close(s1);
  CHECK(has_key(res, "session_and_graph_id_1_0"));
  CHECK(has_key(res, k0));

  /* session 2, mode 0: never; session 3, everything off: nothing matched, nothing written */
  CHECK(new_session(ctx, g, 0, NULL, &s2) == NPU_OK);
  CHECK(run(s2, x, xt, y, &fused) == NPU_OK);
  CHECK(new_session(ctx, g, 1, off, &s3) == NPU_OK);
  CHECK(run(s3, x, xt, y, &unfused) == NPU_OK);
  CHECK_NEAR(fused, unfused, 1e-5);
  npu_session_close(s2);
  npu_session_close(s3);
  CHECK(!has_key(res, "session_and_graph_id_2_0"));
  CHECK(!has_key(res, "session_and_graph_id_3_0"));

  npu_session_release(s0);
  npu_session_release(s1);
  npu_session_release(s2);
  npu_session_release(s3);
  npu_tensor_release(xt);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
  CHECK(access("fusion_result.json", F_OK) != 0);
  remove(off);
  CHECK(chdir(cwd) == 0);
  rmdir(dir);
}

static void test_results_under_ascend_work_path(void) {
  char work[300], path[400], blocker[320];
  snprintf(work, sizeof work, "%s/work/a", tmp_root); /* made by the session */
  snprintf(path, sizeof path, "%s/FE/%ld/fusion_result.json", work, (long)getpid());
  setenv("ASCEND_WORK_PATH", work, 1);
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  log_seen seen = {0};
  npu_context_set_log(ctx, on_log, &seen);
  npu_graph *g;
  int x, y;
  CHECK(build(ctx, &g, &x, &y) == NPU_OK);
  npu_tensor *xt;
  CHECK(input(ctx, &xt) == NPU_OK);
  float v;
  npu_session *s;
  CHECK(new_session(ctx, g, 2, NULL, &s) == NPU_OK);
  CHECK(run(s, x, xt, y, &v) == NPU_OK);
  CHECK(has_key(path, "session_and_graph_id_0_0"));
  npu_session_release(s);
  remove(path);

  /* a path through a regular file: 2 fails the compile naming the directory; 1 warns */
  snprintf(blocker, sizeof blocker, "%s/blocker", tmp_root);
  write_text(blocker, "not a directory");
  setenv("ASCEND_WORK_PATH", blocker, 1);
  CHECK(new_session(ctx, g, 2, NULL, &s) == NPU_OK);
  CHECK(run(s, x, xt, y, &v) == NPU_ERR_IO);
  CHECK(strstr(npu_context_errmsg(ctx), "fusion_result.json: cannot create directory") != NULL);
  CHECK(strstr(npu_context_errmsg(ctx), blocker) != NULL);
  npu_session_release(s);
  CHECK(new_session(ctx, g, 1, NULL, &s) == NPU_OK);
  CHECK(run(s, x, xt, y, &v) == NPU_OK);
  CHECK(seen.n == 0);
  npu_session_release(s); /* closes: the file cannot be written, the log says so */
  CHECK(seen.n == 1 && seen.level == 2); /* one warning */
  CHECK(strstr(seen.last, "export_compile_stat") != NULL && strstr(seen.last, blocker) != NULL);
  remove(blocker);
  unsetenv("ASCEND_WORK_PATH");

  npu_tensor_release(xt);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* Everything the passes allocate, failed one allocation at a time. */
static npu_status sweep_once(npu_context *ctx, const char *switches) {
  npu_graph *g = NULL;
  npu_session *s = NULL;
  npu_tensor *xt = NULL;
  int x, y;
  float v;
  npu_status st = build(ctx, &g, &x, &y);
  if (!st) st = input(ctx, &xt);
  if (!st) st = new_session(ctx, g, 1, switches, &s);
  if (!st) st = run(s, x, xt, y, &v);
  npu_session_release(s);
  npu_tensor_release(xt);
  npu_graph_release(g);
  return st;
}

static npu_status sweep_run(npu_context *ctx, void *switches) {
  return sweep_once(ctx, switches);
}

static void test_allocation_failure_sweep(void) {
  char dir[300], cwd[1024], sw[320];
  snprintf(dir, sizeof dir, "%s/sweep", tmp_root);
  CHECK(mkdir(dir, 0777) == 0);
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(chdir(dir) == 0);
  unsetenv("ASCEND_WORK_PATH");
  snprintf(sw, sizeof sw, "%s/on.cfg", dir);
  write_text(sw, "{\"Switch\":{\"GraphFusion\":{\"ALL\":\"on\"},\"UBFusion\":{\"ALL\":\"off\","
                 "\"TbeEltwiseFusionPass\":\"on\"}}}");
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  int n_failures = sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_run, .ud = sw});
  CHECK(n_failures > 50);
  npu_context_release(ctx);
  remove("fusion_result.json");
  remove(sw);
  CHECK(chdir(cwd) == 0);
  rmdir(dir);
}

/* The same bits, a NaN matching any NaN (IEEE leaves a NaN result's sign and payload open). */
static bool same_bits(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof *a) != 0 && !(a[i] != a[i] && b[i] != b[i])) return false;
  return true;
}

/* ---- a training step: the passes of the backward pass and the update ---- */

/* x (4, 3) -> dense 5 + relu -> dense 3 -> cross-entropy on labels (4, 3) (log_softmax, mul,
   reduce_sum, neg, reduce_mean), its gradients, and w -= 0.1 * grad for the four variables
   (mul, sub, assign), grouped: broadcast_like folds, the loss's forward steps are dropped,
   and LogSoftmaxGrad-, ReluGradBiasAddGrad-, ApplyGradientDescent- and
   GradientDescentUpdateFusionPass rewrite it. */
typedef struct train_graph {
  npu_graph *g;
  int x, labels, train, init, w0;
} train_graph;

static npu_status add_variable(npu_context *ctx, train_graph *t, const char *name, int ndim,
                               const int64_t *shape, float base, int *assign, int *v) {
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, ndim}}};
  int node, c;
  TRY(npu_graph_add_op(t->g, "variable", name, 0, NULL, 2, a, &node));
  *v = out0(t->g, node);
  TRY(add_const(ctx, t->g, NULL, ndim, shape, base, &c));
  int in[2] = {*v, c};
  return npu_graph_add_op(t->g, "assign", NULL, 2, in, 0, NULL, assign);
}

static npu_status build_train(npu_context *ctx, train_graph *t) {
  int64_t xs[] = {4, 3}, w1s[] = {3, 5}, b1s[] = {5}, w2s[] = {5, 3}, b2s[] = {3}, one[] = {1},
          last = -1;
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 2}}};
  npu_attr axis = {.name = "axis", .type = NPU_ATTR_INTS, .u.ints = {&last, 1}};
  int vars[4], assigns[4], updates[4], dx[4], node, h, lr, ls, loss;
  TRY(npu_graph_add_op(t->g, "placeholder", "x", 0, NULL, 2, ph, &node));
  t->x = out0(t->g, node);
  TRY(npu_graph_add_op(t->g, "placeholder", "labels", 0, NULL, 2, ph, &node));
  t->labels = out0(t->g, node);
  TRY(add_variable(ctx, t, "w1", 2, w1s, 0.1f, &assigns[0], &vars[0]));
  TRY(add_variable(ctx, t, "b1", 1, b1s, 0.05f, &assigns[1], &vars[1]));
  TRY(add_variable(ctx, t, "w2", 2, w2s, -0.1f, &assigns[2], &vars[2]));
  TRY(add_variable(ctx, t, "b2", 1, b2s, 0.02f, &assigns[3], &vars[3]));
  t->w0 = vars[0];
  TRY(add2(t->g, "matmul", t->x, vars[0], &h));
  TRY(add2(t->g, "bias_add", h, vars[1], &h));
  TRY(add1(t->g, "relu", h, &h));
  TRY(add2(t->g, "matmul", h, vars[2], &h));
  TRY(add2(t->g, "bias_add", h, vars[3], &h));
  TRY(add1(t->g, "log_softmax", h, &ls));
  TRY(add2(t->g, "mul", t->labels, ls, &h));
  TRY(npu_graph_add_op(t->g, "reduce_sum", NULL, 1, &h, 1, &axis, &node));
  TRY(add1(t->g, "neg", out0(t->g, node), &h));
  TRY(add1(t->g, "reduce_mean", h, &loss));
  TRY(npu_graph_gradients(t->g, 1, &loss, NULL, 4, vars, dx));
  TRY(add_const(ctx, t->g, "lr", 1, one, 0.2f, &lr)); /* 0.2 - 0.1: add_const's pattern */
  for (int i = 0; i < 4; i++) {
    int step, upd;
    TRY(add2(t->g, "mul", lr, dx[i], &step));
    TRY(add2(t->g, "sub", vars[i], step, &upd));
    int in[2] = {vars[i], upd};
    TRY(npu_graph_add_op(t->g, "assign", NULL, 2, in, 0, NULL, &updates[i]));
  }
  TRY(npu_graph_add_op(t->g, "no_op", "train", 0, NULL, 0, NULL, &t->train));
  TRY(npu_graph_add_op(t->g, "no_op", "init", 0, NULL, 0, NULL, &t->init));
  for (int i = 0; i < 4; i++) {
    TRY(npu_graph_add_control(t->g, t->train, updates[i]));
    TRY(npu_graph_add_control(t->g, t->init, assigns[i]));
  }
  return NPU_OK;
}

/* A session (switches: a fusion_switch_file; export_compile_stat mode), the initializer, two
   training steps, then w1 into out (15 floats). */
static npu_status train_once(npu_context *ctx, const char *switches, int mode, float *out) {
  train_graph t = {0};
  npu_session *s = NULL;
  npu_tensor *feeds[2] = {NULL, NULL}, *w = NULL;
  int64_t xs[] = {4, 3};
  float xd[12], yd[12];
  for (int i = 0; i < 12; i++) {
    xd[i] = (float)((i * 5) % 7) / 3.0f - 1.0f;
    yd[i] = i % 3 == i / 3 % 3 ? 1.0f : 0.0f;
  }
  npu_status st = npu_graph_new(ctx, &t.g);
  if (!st) st = build_train(ctx, &t);
  if (!st) st = npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, xs, xd, sizeof xd, &feeds[0]);
  if (!st) st = npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, xs, yd, sizeof yd, &feeds[1]);
  if (!st) st = new_session(ctx, t.g, mode, switches, &s);
  if (!st) st = npu_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &t.init);
  int fed[2] = {t.x, t.labels};
  for (int i = 0; !st && i < 2; i++)
    st = npu_session_run(s, 2, fed, feeds, 0, NULL, NULL, 1, &t.train);
  if (!st) st = npu_session_run(s, 0, NULL, NULL, 1, &t.w0, &w, 0, NULL);
  if (!st) memcpy(out, npu_tensor_data(w), 15 * sizeof *out);
  npu_tensor_release(w);
  npu_tensor_release(feeds[0]);
  npu_tensor_release(feeds[1]);
  npu_session_release(s);
  npu_graph_release(t.g);
  return st;
}

static npu_status train_sweep_run(npu_context *ctx, void *switches) {
  float w[15];
  return train_once(ctx, switches, 0, w);
}

/* Whether fusion_result.json (under dir) shows pass with an effect. */
static bool pass_took_effect(const char *dir, const char *pass) {
  char path[400];
  snprintf(path, sizeof path, "%s/FE/%ld/fusion_result.json", dir, (long)getpid());
  cJSON *root = read_json(path), *g = NULL;
  bool took = false;
  cJSON_ArrayForEach(g, root) {
    const cJSON *p = cJSON_GetObjectItem(cJSON_GetObjectItem(g, "graph_fusion"), pass);
    const cJSON *e = cJSON_GetObjectItem(p, "effect_times");
    took |= cJSON_IsString(e) && atoi(e->valuestring) > 0;
  }
  cJSON_Delete(root);
  return took;
}

/* The training step's passes (each took effect, fusion_result.json says) give the unfused
   plan's weights, bit for bit; under the sweep every failing allocation (folding, dropped
   steps, two-output fused steps, the passes' params) is a clean NPU_ERR_NOMEM. */
static void test_training_step_sweep(void) {
  char dir[300], on[320], off[320];
  snprintf(dir, sizeof dir, "%s/train", tmp_root);
  CHECK(mkdir(dir, 0777) == 0);
  snprintf(on, sizeof on, "%s/on.cfg", dir);
  snprintf(off, sizeof off, "%s/off.cfg", dir);
  write_text(on, "{\"Switch\":{\"GraphFusion\":{\"ALL\":\"on\"}}}");
  write_text(off, "{\"Switch\":{\"GraphFusion\":{\"ALL\":\"off\"},\"UBFusion\":{\"ALL\":\"off\"}}}");
  setenv("ASCEND_WORK_PATH", dir, 1);
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  float w_on[15], w_off[15];
  CHECK(train_once(ctx, on, 2, w_on) == NPU_OK);
  CHECK(train_once(ctx, off, 0, w_off) == NPU_OK);
  CHECK(same_bits(w_on, w_off, 15));
  CHECK(w_on[0] != 0.1f - 0.1f); /* trained: the first weight moved from its initial value */
  static const char *const passes[] = {"LogSoftmaxGradFusionPass", "ReluGradBiasAddGradFusionPass",
                                       "ApplyGradientDescentFusionPass",
                                       "GradientDescentUpdateFusionPass"};
  for (size_t i = 0; i < sizeof passes / sizeof *passes; i++)
    CHECK(pass_took_effect(dir, passes[i]));
  unsetenv("ASCEND_WORK_PATH");
  int n_failures = sweep_alloc_failures(ctx, &(scenario_def){.run = train_sweep_run, .ud = on});
  CHECK(n_failures > 50);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* Every op of a program, every broadcast and side, on data with NaN, infinities, signed zeros
   and the relu6 edges; shapes whose rows fill several blocks, or are cut into several. */
static void test_eltwise_kernel_equals_its_reference(void) {
  static const int64_t shapes[][2] = {{3000, 5}, {2, 3000}, {7, 1}, {1, 1024}, {1025, 1}};
  enum { MAX_N = 16000 };
  float *x = malloc(MAX_N * sizeof *x), *o = malloc(MAX_N * sizeof *o);
  float *fast = malloc(MAX_N * sizeof *fast), *ref = malloc(MAX_N * sizeof *ref);
  CHECK(x && o && fast && ref);
  if (!x || !o || !fast || !ref) return;
  const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 6, -6, 7, 1e-30f, -1e-30f};
  for (int i = 0; i < MAX_N; i++) {
    x[i] = (float)((i * 37) % 101) / 7.0f - 7.0f;
    o[i] = (float)((i * 53) % 89) / 11.0f - 4.0f;
    if (i % 13 == 0) x[i] = specials[(i / 13) % 11];
    if (i % 17 == 0) o[i] = specials[(i / 17) % 11];
  }
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
    const float *ops[2] = {x, o};
    for (int op = 0; op < NPUK_UN_COUNT + 1; op++) { /* the unary ops, then leaky_relu */
      npuK_ew_instr prog[2] = {{.kind = NPUK_EW_LOAD, .operand = 0},
                               {.kind = op < NPUK_UN_COUNT ? NPUK_EW_UNARY : NPUK_EW_LEAKY_RELU,
                                .op = (uint8_t)(op < NPUK_UN_COUNT ? op : 0), .operand = -1,
                                .alpha = 0.3f}};
      npuK_eltwise_f32(NULL, 2, prog, rows, cols, ops, fast);
      npuK_eltwise_f32_ref(NULL, 2, prog, rows, cols, ops, ref);
      CHECK(same_bits(fast, ref, n));
    }
    for (int bc = NPUK_EW_FULL; bc <= NPUK_EW_SCALAR; bc++) { /* prelu's slopes */
      npuK_ew_instr prog[2] = {{.kind = NPUK_EW_LOAD, .operand = 0},
                               {.kind = NPUK_EW_PRELU, .bcast = (uint8_t)bc, .operand = 1}};
      npuK_eltwise_f32(NULL, 2, prog, rows, cols, ops, fast);
      npuK_eltwise_f32_ref(NULL, 2, prog, rows, cols, ops, ref);
      CHECK(same_bits(fast, ref, n));
    }
    for (int op = 0; op < NPUK_BIN_COUNT; op++)
      for (int bc = NPUK_EW_FULL; bc <= NPUK_EW_SCALAR; bc++)
        for (int swap = 0; swap < 2; swap++) {
          npuK_ew_instr prog[3] = {
              {.kind = NPUK_EW_LOAD, .operand = 0},
              {.kind = NPUK_EW_BINARY, .op = (uint8_t)op, .bcast = (uint8_t)bc, .swap = (uint8_t)swap, .operand = 1},
              {.kind = NPUK_EW_UNARY, .op = NPUK_UN_RELU6, .operand = -1}};
          npuK_eltwise_f32(NULL, 3, prog, rows, cols, ops, fast);
          npuK_eltwise_f32_ref(NULL, 3, prog, rows, cols, ops, ref);
          if (!same_bits(fast, ref, n))
            fprintf(stderr, "binary op %d, broadcast %d, swap %d, %lldx%lld\n", op, bc, swap,
                    (long long)rows, (long long)cols);
          CHECK(same_bits(fast, ref, n));
        }
  }
  /* the epilogue equals bias_add then the activation's own kernel */
  for (int act = NPUK_ACT_NONE; act < NPUK_ACT_COUNT; act++) {
    int64_t rows = 300, cols = 13, n = rows * cols;
    npuK_epilogue ep = {.bias = o, .act = (npuK_act)act, .alpha = 0.2f, .slope = o + 100};
    memcpy(fast, x, (size_t)n * sizeof *x);
    npuK_epilogue_f32(&ep, rows, cols, cols, fast);
    npuK_bias_add_f32(NULL, rows, cols, x, o, ref);
    static const int unop[NPUK_ACT_COUNT] = {-1, NPUK_UN_RELU, NPUK_UN_RELU6, -1, NPUK_UN_SIGMOID,
                                             NPUK_UN_TANH, -1};
    int64_t dims[2] = {rows, cols}, per_column[2] = {0, 1};
    if (act == NPUK_ACT_LEAKY_RELU) npuK_leaky_relu_f32(NULL, n, 0.2f, ref, ref);
    else if (act == NPUK_ACT_PRELU) npuK_prelu_f32(NULL, 2, dims, ref, o + 100, per_column, ref);
    else if (unop[act] >= 0) npuK_unary_f32(NULL, (npuK_unop)unop[act], n, ref, ref);
    CHECK(same_bits(fast, ref, n));
  }
  free(x);
  free(o);
  free(fast);
  free(ref);
}

/* A fused plan gives the same bits whatever the device's thread count. */
static void test_threads_do_not_change_the_bits(void) {
  float first[3];
  npu_tensor *outs[3] = {0};
  npu_context *ctxs[3] = {0};
  const int threads[3] = {1, 2, 5};
  for (int t = 0; t < 3; t++) {
    CHECK(npu_context_new(&(npu_context_config){.n_threads = threads[t]}, &ctxs[t]) == NPU_OK);
    npu_context *ctx = ctxs[t];
    npu_graph *g;
    int x, y;
    CHECK(build(ctx, &g, &x, &y) == NPU_OK);
    npu_tensor *xt;
    CHECK(input(ctx, &xt) == NPU_OK);
    npu_session *s;
    CHECK(new_session(ctx, g, 0, NULL, &s) == NPU_OK);
    CHECK(npu_session_run(s, 1, &x, &xt, 1, &y, &outs[t], 0, NULL) == NPU_OK);
    first[t] = outs[t] ? ((const float *)npu_tensor_data(outs[t]))[0] : 0;
    if (t > 0 && outs[t] && outs[0])
      CHECK(same_bits(npu_tensor_data(outs[t]), npu_tensor_data(outs[0]), 10));
    npu_session_release(s);
    npu_tensor_release(xt);
    npu_graph_release(g);
  }
  CHECK(first[0] == first[1] && first[1] == first[2]);
  for (int t = 0; t < 3; t++) {
    npu_tensor_release(outs[t]);
    CHECK_EQ_I64(npu_context_live_bytes(ctxs[t]), 0);
    npu_context_release(ctxs[t]);
  }
}

int main(void) {
  make_tmp_root();
  test_eltwise_kernel_equals_its_reference();
  test_threads_do_not_change_the_bits();
  test_results_in_npu_out_by_default();
  test_results_under_ascend_work_path();
  test_allocation_failure_sweep();
  test_training_step_sweep();
  remove_tree(tmp_root);
  return check_summary("test_fusion");
}
