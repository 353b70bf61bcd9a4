/*
 * test_dims_profiles.c — dynamic dimension profiles (input_shape, dynamic_dims,
 * dynamic_node_type; compile/dims_profiles.c) through the C API: the values of every profile,
 * the plans compiled at the first run, the refusal of a feed that is no profile and of an
 * input_shape that does not describe the graph, the dynamic-shape plans of compile_hybrid_mode,
 * compile_dynamic_mode and shape_generalization_mode (with all_tensor_not_empty's empty-tensor
 * check), and the allocation-failure sweep over all of it (a clean NPU_ERR_NOMEM and zero live
 * bytes at every failing allocation).
 */
#include <string.h>

#include "npu_test.h"

typedef struct handles {
  npu_graph *g;
  npu_options *o, *bad, *dyn[3];
  npu_session *s, *s_bad, *s_dyn[3];
  npu_tensor *x, *out;
} handles;

static void release_all(void *ud) {
  handles *h = ud;
  npu_tensor_release(h->out);
  npu_tensor_release(h->x);
  npu_session_release(h->s);
  npu_session_release(h->s_bad);
  for (int i = 0; i < 3; i++) {
    npu_session_release(h->s_dyn[i]);
    npu_options_release(h->dyn[i]);
  }
  npu_options_release(h->o);
  npu_options_release(h->bad);
  npu_graph_release(h->g);
  memset(h, 0, sizeof *h);
}

/* Runs y = x + x for a (1, n) x of 1, 2, ...; checks the values when asked. */
static npu_status run_on(npu_context *ctx, handles *h, npu_session *s, int fetch, int feed,
                         int64_t n, int check_values) {
  npu_tensor_release(h->x);
  npu_tensor_release(h->out);
  h->x = h->out = NULL;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, (int64_t[]){1, n}, &h->x));
  float *xd = npu_tensor_data(h->x);
  for (int64_t i = 0; i < n; i++) xd[i] = (float)(i + 1);
  TRY(npu_session_run(s, 1, &feed, &h->x, 1, &fetch, &h->out, 0, NULL));
  if (check_values) {
    CHECK_EQ_I64(npu_tensor_shape(h->out)[1], n);
    const float *y = npu_tensor_data(h->out);
    for (int64_t i = 0; i < n; i++) CHECK_NEAR(y[i], 2.0 * (double)(i + 1), 0);
  }
  return NPU_OK;
}

static npu_status run_n(npu_context *ctx, handles *h, int fetch, int feed, int64_t n,
                        int check_values) {
  return run_on(ctx, h, h->s, fetch, feed, n, check_values);
}

/* compile_hybrid_mode, compile_dynamic_mode, shape_generalization_mode ADAPTIVE: which plans
   the runs compile (npu_session_stat), and the empty-tensor check on a batch of 0. */
static npu_status dynamic_plans(npu_context *ctx, handles *h, int y, int x, int check_values) {
  for (int i = 0; i < 3; i++) TRY(npu_options_new(ctx, &h->dyn[i]));
  TRY(npu_options_set_string(h->dyn[0], "input_shape", "x:1,-1"));
  TRY(npu_options_set_string(h->dyn[0], "dynamic_dims", "2;4"));
  TRY(npu_options_set_int(h->dyn[0], "dynamic_node_type", 1));
  TRY(npu_options_set_int(h->dyn[0], "compile_hybrid_mode", 1));
  TRY(npu_options_set_bool(h->dyn[1], "compile_dynamic_mode", 1));
  TRY(npu_options_set_string(h->dyn[2], "jit_compile", "true"));
  TRY(npu_options_set_string(h->dyn[2], "shape_generalization_mode", "ADAPTIVE"));
  for (int i = 0; i < 3; i++) TRY(npu_session_new(ctx, h->g, h->dyn[i], &h->s_dyn[i]));
  /* hybrid: both profiles and the dynamic-shape plan at the first run, which is outside */
  TRY(run_on(ctx, h, h->s_dyn[0], y, x, 3, check_values));
  TRY(run_on(ctx, h, h->s_dyn[0], y, x, 4, check_values));
  TRY(run_on(ctx, h, h->s_dyn[0], y, x, 7, check_values));
  CHECK_EQ_I64(npu_session_stat(h->s_dyn[0], NPU_SESSION_STAT_COMPILED), 3);
  CHECK_EQ_I64(npu_session_stat(h->s_dyn[0], NPU_SESSION_STAT_DYNAMIC_PLANS), 1);
  /* compile_dynamic_mode: one plan; a batch of 0 skips the add (all_tensor_not_empty False) */
  for (int64_t n = 1; n < 4; n++) TRY(run_on(ctx, h, h->s_dyn[1], y, x, n, check_values));
  TRY(run_on(ctx, h, h->s_dyn[1], y, x, 0, check_values));
  CHECK_EQ_I64(npu_session_stat(h->s_dyn[1], NPU_SESSION_STAT_COMPILED), 1);
  CHECK_EQ_I64(npu_session_stat(h->s_dyn[1], NPU_SESSION_STAT_EMPTY_SKIPS), 1);
  /* ADAPTIVE: a static plan, then one with the changed dim -1 */
  for (int64_t n = 2; n < 6; n++) TRY(run_on(ctx, h, h->s_dyn[2], y, x, n, check_values));
  CHECK_EQ_I64(npu_session_stat(h->s_dyn[2], NPU_SESSION_STAT_COMPILED), 2);
  CHECK_EQ_I64(npu_session_stat(h->s_dyn[2], NPU_SESSION_STAT_PLANS), 2);
  return NPU_OK;
}

static npu_status scenario(npu_context *ctx, void *ud, int check_values) {
  handles *h = ud;
  TRY(npu_graph_new(ctx, &h->g));
  int64_t shape[] = {1, -1};
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 2}}};
  int nx, nz, ny;
  TRY(npu_graph_add_op(h->g, "placeholder", "x", 0, NULL, 2, a, &nx));
  TRY(npu_graph_add_op(h->g, "placeholder", "z", 0, NULL, 2, a, &nz));
  int x = npu_graph_output(h->g, nx, 0);
  TRY(npu_graph_add_op(h->g, "add", "y", 2, (int[]){x, x}, 0, NULL, &ny));
  int y = npu_graph_output(h->g, ny, 0);

  TRY(npu_options_new(ctx, &h->o));
  TRY(npu_options_set_string(h->o, "input_shape", "x:1,-1"));
  TRY(npu_options_set_string(h->o, "dynamic_dims", "2;4;6"));
  TRY(npu_options_set_int(h->o, "dynamic_node_type", 1));
  TRY(npu_session_new(ctx, h->g, h->o, &h->s));
  TRY(run_n(ctx, h, y, x, 4, check_values));
  CHECK_EQ_I64(npu_session_n_plans(h->s), 3); /* every profile's plan, at the first run */
  TRY(run_n(ctx, h, y, x, 6, check_values));
  TRY(run_n(ctx, h, y, x, 2, check_values));
  CHECK_EQ_I64(npu_session_n_plans(h->s), 3);

  /* a feed that is no profile: NPU_ERR_ARG, nothing fetched */
  npu_status st = run_n(ctx, h, y, x, 3, 0);
  if (st == NPU_ERR_NOMEM) return st;
  CHECK(st == NPU_ERR_ARG);
  CHECK(h->out == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "feed 'x' has shape [1,3]: not one of the dynamic_dims "
                                        "profiles: [1,2] [1,4] [1,6]") != NULL);

  /* an input_shape that names no placeholder, with the list of the graph's */
  TRY(npu_options_new(ctx, &h->bad));
  TRY(npu_options_set_string(h->bad, "input_shape", "w:1,-1;x:1,-1"));
  TRY(npu_options_set_string(h->bad, "dynamic_dims", "2,2;4,4"));
  TRY(npu_options_set_int(h->bad, "dynamic_node_type", 1));
  TRY(npu_session_new(ctx, h->g, h->bad, &h->s_bad));
  npu_tensor *out = NULL;
  st = npu_session_run(h->s_bad, 1, &x, &h->x, 1, &y, &out, 0, NULL);
  if (st == NPU_ERR_NOMEM) return st;
  CHECK(st == NPU_ERR_OPTION);
  CHECK(out == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "input_shape names 'w', which is not a node of the graph") !=
        NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "its placeholders: 'x', 'z'") != NULL);
  return dynamic_plans(ctx, h, y, x, check_values);
}

static void test_scenario_values_and_sweep(void) {
  handles h = {0};
  scenario_values_and_sweep(&(checked_scenario){
      .play = scenario, .release = release_all, .ud = &h, .min_failures = 20});
}

int main(void) {
  test_scenario_values_and_sweep();
  return check_summary("test_dims_profiles");
}
