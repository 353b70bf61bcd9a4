/* test_savedmodel.c — SavedModel directories through the C API alone: export a small model
 * (two of its constants as variables), import it back (npu_graph_import_savedmodel and
 * npu_graph_import_file on the directory), the same results as the graph itself, the
 * signature in the info; a TF2 SavedModel (spec/fixtures/tf2_dense, assembled by
 * spec/savedmodel_spec.lua: a signature call inlined, resource variables found through the
 * object graphs); both kept as variables (npu_savedmodel_options.variables: listed in bundle
 * order, initialized, the same bits; a missing variable fails as when frozen); and the
 * allocation-failure sweep over export and the imports, frozen and with variables. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npu_test.h"

static char tmp_dir[64];

/* x [-1,3] -> matmul w [3,2] -> add b [2] -> y */
static npu_status build(npu_context *ctx, npu_graph **out, int *x, int *y) {
  npu_graph *g;
  *out = NULL;
  TRY(npu_graph_new(ctx, &g));
  npu_status st;
  int node, w, b, xw;
  npu_tensor *tw = NULL, *tb = NULL;
  float wv[6] = {1, -2, 0.5f, 3, -1, 1}, bv[2] = {0.25f, -0.75f};
  npu_attr pa[2] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                    {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {(int64_t[]){-1, 3}, 2}}};
  if ((st = npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, pa, &node))) goto fail;
  *x = npu_graph_output(g, node, 0);
  if ((st = npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, (int64_t[]){3, 2}, wv, sizeof wv, &tw)))
    goto fail;
  if ((st = graph_const(g, "w", tw, &w))) goto fail;
  if ((st = npu_tensor_from_data(ctx, NPU_DTYPE_F32, 1, (int64_t[]){2}, bv, sizeof bv, &tb)))
    goto fail;
  if ((st = graph_const(g, "b", tb, &b))) goto fail;
  if ((st = graph_op(g, "matmul", "xw", 2, (int[]){*x, w}, &xw))) goto fail;
  if ((st = graph_op(g, "add", "y", 2, (int[]){xw, b}, y))) goto fail;
  *out = g;
  return NPU_OK;
fail:
  npu_graph_release(g);
  return st;
}

static npu_status run_y(npu_context *ctx, npu_graph *g, const char *x_name, const char *y_name,
                        npu_tensor **y_out) {
  *y_out = NULL;
  int x, y;
  TRY(npu_graph_find_value(g, x_name, &x));
  TRY(npu_graph_find_value(g, y_name, &y));
  int init = -1; /* a graph with variables runs its initializer first */
  if (npu_graph_n_variables(g) > 0) TRY(npu_graph_add_variables_initializer(g, NULL, &init));
  float xv[6] = {1, 2, 3, -1, 0, 0.5f};
  npu_tensor *xt;
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, (int64_t[]){2, 3}, xv, sizeof xv, &xt));
  npu_session *s;
  npu_status st = npu_session_new(ctx, g, NULL, &s);
  if (!st && init >= 0) st = npu_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &init);
  if (!st) st = npu_session_run(s, 1, &x, &xt, 1, &y, y_out, 0, NULL);
  npu_session_release(s);
  npu_tensor_release(xt);
  return st;
}

static npu_status export_model(npu_context *ctx, const char *dir) {
  npu_graph *g;
  int x, y;
  TRY(build(ctx, &g, &x, &y));
  npu_status st = npu_graph_export_savedmodel(
      g, dir, NULL, 1, (const char *[]){"inputs"}, (const char *[]){"x:0"}, 1,
      (const char *[]){"scores"}, (const char *[]){"y:0"}, 2, (const char *[]){"w", "b"});
  npu_graph_release(g);
  return st;
}

static void test_round_trip(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  char dir[128];
  snprintf(dir, sizeof dir, "%s/model/1", tmp_dir);
  CHECK(export_model(ctx, dir) == NPU_OK);
  npu_graph *g0, *g1 = NULL, *g2 = NULL;
  int x, y;
  CHECK(build(ctx, &g0, &x, &y) == NPU_OK);
  npu_tensor *want = NULL, *got = NULL, *got2 = NULL;
  CHECK(run_y(ctx, g0, "x:0", "y:0", &want) == NPU_OK);
  npu_model_info *info = NULL;
  CHECK(npu_graph_import_savedmodel(ctx, dir, "serve", NULL, &g1, &info) == NPU_OK);
  if (info) {
    CHECK(strcmp(npu_model_info_format(info), "savedmodel") == 0);
    CHECK(strcmp(npu_model_info_signature_key(info), "serving_default") == 0);
    CHECK(strcmp(npu_model_info_method_name(info), "tensorflow/serving/predict") == 0);
    CHECK_EQ_I64(npu_model_info_n_signatures(info), 1);
    CHECK(npu_model_info_signature_at(info, 1) == NULL);
    CHECK_EQ_I64(npu_model_info_n_inputs(info), 1);
    CHECK(strcmp(npu_model_info_input(info, 0)->key, "inputs") == 0);
    CHECK(strcmp(npu_model_info_output(info, 0)->key, "scores") == 0);
    CHECK_EQ_I64(npu_model_info_output(info, 0)->shape[1], 2);
  }
  if (g1) CHECK(run_y(ctx, g1, "x:0", "y:0", &got) == NPU_OK);
  CHECK(npu_graph_import_file(ctx, dir, &g2, NULL) == NPU_OK);
  if (g2) CHECK(run_y(ctx, g2, "x:0", "y:0", &got2) == NPU_OK);
  if (want && got && got2) {
    CHECK(memcmp(npu_tensor_data(want), npu_tensor_data(got), npu_tensor_nbytes(want)) == 0);
    CHECK(memcmp(npu_tensor_data(want), npu_tensor_data(got2), npu_tensor_nbytes(want)) == 0);
  }
  /* a failing import sets its outs to NULL */
  npu_graph *g3 = (npu_graph *)1;
  npu_model_info *i3 = (npu_model_info *)1;
  CHECK(npu_graph_import_savedmodel(ctx, dir, "train", NULL, &g3, &i3) == NPU_ERR_NOT_FOUND);
  CHECK(g3 == NULL && i3 == NULL);
  CHECK(npu_graph_import_savedmodel(ctx, NULL, NULL, NULL, &g3, NULL) == NPU_ERR_ARG);
  npu_tensor_release(want);
  npu_tensor_release(got);
  npu_tensor_release(got2);
  npu_model_info_release(info);
  npu_graph_release(g0);
  npu_graph_release(g1);
  npu_graph_release(g2);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* spec/fixtures/tf2_dense: y = x W + b through a StatefulPartitionedCall whose captured
   VarHandleOps hold W (3x2) and b (2) under object-graph keys. */
static const char tf2_dir[] = "spec/fixtures/tf2_dense";

static void test_tf2(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g = NULL;
  npu_model_info *info = NULL;
  npu_tensor *y = NULL;
  CHECK(npu_graph_import_savedmodel(ctx, tf2_dir, NULL, NULL, &g, &info) == NPU_OK);
  if (g) CHECK(run_y(ctx, g, "serving_default_x:0", "StatefulPartitionedCall:0", &y) == NPU_OK);
  if (info) CHECK(strcmp(npu_model_info_output(info, 0)->key, "y") == 0);
  if (y) { /* x = [[1,2,3],[-1,0,0.5]], W = [[1,-2],[0.5,3],[-1,1]], b = [0.25,-0.75] */
    const float *v = npu_tensor_data(y), want[4] = {-0.75f, 6.25f, -1.25f, 1.75f};
    for (int i = 0; i < 4; i++) CHECK(v[i] == want[i]);
  }
  npu_tensor_release(y);
  npu_model_info_release(info);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* Variable i of g is `name`, trainable, of ndim dims, with an initializer "<name>/Assign". */
static void check_variable(npu_graph *g, int i, const char *name, int ndim) {
  npu_variable_info v;
  CHECK(npu_graph_variable_info(g, i, &v) == NPU_OK);
  CHECK(v.name && strcmp(v.name, name) == 0);
  CHECK(v.trainable == 1 && v.dtype == NPU_DTYPE_F32);
  CHECK_EQ_I64(v.ndim, ndim);
  char assign[64];
  snprintf(assign, sizeof assign, "%s/Assign", name);
  CHECK(v.initializer >= 0 && strcmp(npu_graph_node_name(g, v.initializer), assign) == 0);
}

/* variables = 1 keeps the variables variables: listed in the bundle's (sorted) key order,
   each initialized to the bundle's value, so the model computes what the frozen one does,
   bit for bit; a variable the bundle lacks fails as the frozen import does. */
static void test_variables(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  char dir[128], other[128], from[200], to[200];
  snprintf(dir, sizeof dir, "%s/model/1", tmp_dir);
  npu_graph *g0 = NULL, *g = NULL, *gd = NULL;
  npu_tensor *want = NULL, *got = NULL;
  int x, y;
  CHECK(build(ctx, &g0, &x, &y) == NPU_OK);
  CHECK(run_y(ctx, g0, "x:0", "y:0", &want) == NPU_OK);
  npu_savedmodel_options o = {.variables = 1};
  npu_model_info *info = NULL;
  CHECK(npu_graph_import_savedmodel_with_options(ctx, dir, &o, &g, &info) == NPU_OK);
  CHECK(info && strcmp(npu_model_info_signature_key(info), "serving_default") == 0);
  if (g) {
    CHECK_EQ_I64(npu_graph_n_variables(g), 2);
    check_variable(g, 0, "b", 1); /* "b" sorts before "w" in the bundle */
    check_variable(g, 1, "w", 2);
    CHECK(strcmp(npu_graph_node_op(g, npu_graph_find_node(g, "w")), "variable") == 0);
    CHECK(run_y(ctx, g, "x:0", "y:0", &got) == NPU_OK);
  }
  if (want && got) CHECK(memcmp(npu_tensor_data(want), npu_tensor_data(got), npu_tensor_nbytes(want)) == 0);
  /* NULL options are the defaults: frozen */
  CHECK(npu_graph_import_savedmodel_with_options(ctx, dir, NULL, &gd, NULL) == NPU_OK);
  CHECK_EQ_I64(npu_graph_n_variables(gd), 0);
  npu_graph_release(gd);
  npu_graph_release(g);
  npu_model_info_release(info);
  npu_tensor_release(got);
  g = NULL, got = NULL;
  /* TF2: the captured VarHandleOps, their keys from the object graphs */
  CHECK(npu_graph_import_savedmodel_with_options(ctx, tf2_dir, &o, &g, NULL) == NPU_OK);
  if (g) {
    CHECK_EQ_I64(npu_graph_n_variables(g), 2);
    check_variable(g, 0, "Variable_1", 1); /* dense/bias/... before dense/kernel/... */
    check_variable(g, 1, "Variable", 2);
    CHECK(run_y(ctx, g, "serving_default_x:0", "StatefulPartitionedCall:0", &got) == NPU_OK);
  }
  if (got) {
    const float *v = npu_tensor_data(got), w4[4] = {-0.75f, 6.25f, -1.25f, 1.75f};
    for (int i = 0; i < 4; i++) CHECK(v[i] == w4[i]);
  }
  npu_graph_release(g);
  g = (npu_graph *)1;
  /* a bundle without b: the graph of {w, b} with the variables of {w} */
  snprintf(dir, sizeof dir, "%s/missing/1", tmp_dir);
  snprintf(other, sizeof other, "%s/missing/2", tmp_dir);
  npu_graph *gb;
  CHECK(build(ctx, &gb, &x, &y) == NPU_OK);
  CHECK(export_model(ctx, dir) == NPU_OK);
  CHECK(npu_graph_export_savedmodel(gb, other, NULL, 1, (const char *[]){"inputs"},
                                    (const char *[]){"x:0"}, 1, (const char *[]){"scores"},
                                    (const char *[]){"y:0"}, 1, (const char *[]){"w"}) == NPU_OK);
  npu_graph_release(gb);
  for (int k = 0; k < 2; k++) {
    const char *f = k ? "variables.data-00000-of-00001" : "variables.index";
    snprintf(from, sizeof from, "%s/variables/%s", other, f);
    snprintf(to, sizeof to, "%s/variables/%s", dir, f);
    CHECK(rename(from, to) == 0);
  }
  char frozen_msg[512];
  CHECK(npu_graph_import_savedmodel(ctx, dir, NULL, NULL, &gd, NULL) == NPU_ERR_FORMAT);
  snprintf(frozen_msg, sizeof frozen_msg, "%s", npu_context_errmsg(ctx));
  CHECK(strstr(frozen_msg, "variable 'b' has no value in") != NULL);
  CHECK(npu_graph_import_savedmodel_with_options(ctx, dir, &o, &g, NULL) == NPU_ERR_FORMAT);
  CHECK(g == NULL && strcmp(npu_context_errmsg(ctx), frozen_msg) == 0);
  npu_tensor_release(got);
  npu_tensor_release(want);
  npu_graph_release(g0);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

static npu_status sweep_import_tf2(npu_context *ctx, void *ud) {
  npu_graph *g;
  npu_model_info *info;
  npu_savedmodel_options o = {.variables = ud != NULL};
  npu_status st = npu_graph_import_savedmodel_with_options(ctx, tf2_dir, &o, &g, &info);
  if (st) return st;
  npu_model_info_release(info);
  npu_graph_release(g);
  return NPU_OK;
}

static npu_status sweep_export(npu_context *ctx, void *ud) {
  char dir[128];
  snprintf(dir, sizeof dir, "%s/sweep/%d", tmp_dir, (*(int *)ud)++);
  return export_model(ctx, dir);
}

/* ud non-NULL: with variables = 1, and their initializer added. */
static npu_status sweep_import(npu_context *ctx, void *ud) {
  char dir[128];
  snprintf(dir, sizeof dir, "%s/model/1", tmp_dir);
  npu_graph *g;
  npu_model_info *info;
  npu_savedmodel_options o = {.variables = ud != NULL};
  npu_status st = npu_graph_import_savedmodel_with_options(ctx, dir, &o, &g, &info);
  int init;
  if (!st && ud && (st = npu_graph_add_variables_initializer(g, NULL, &init))) {
    npu_model_info_release(info);
    npu_graph_release(g);
  }
  if (st) return st;
  npu_model_info_release(info);
  npu_graph_release(g);
  return NPU_OK;
}

static void test_allocation_failure_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  int k = 0;
  CHECK(sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_export, .ud = &k,
                                                   .what = "export_savedmodel"}) > 20);
  CHECK(sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_import,
                                                   .what = "import_savedmodel"}) > 20);
  CHECK(sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_import_tf2,
                                                   .what = "import_savedmodel (TF2)"}) > 20);
  CHECK(sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_import, .ud = &k,
                                                   .what = "import_savedmodel (variables)"}) > 20);
  CHECK(sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_import_tf2, .ud = &k,
                                                   .what = "import_savedmodel (TF2, variables)"}) > 20);
  npu_context_release(ctx);
}

int main(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/npu_savedmodel_XXXXXX");
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_round_trip();
  test_tf2();
  test_variables();
  test_allocation_failure_sweep();
  remove_tree(tmp_dir);
  return check_summary("test_savedmodel");
}
