/* test_exec_config.c — graph-level options (npu_graph_set_exec_config): what a node carries,
 * which options it may carry, what a session compiles with, and that every allocation failure
 * on that path leaves a clean status and nothing allocated. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "npu_test.h"

/* x [2,3] (a placeholder), y = x @ w, w a constant [3,2] whose product is not float16-exact. */
static npu_status build(npu_context *ctx, npu_graph **out, int *x, int *y) {
  npu_graph *g;
  npu_status s = npu_graph_new(ctx, &g);
  if (s) return s;
  int64_t sx[] = {2, 3}, sw[] = {3, 2};
  const float wd[] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  npu_tensor *wt = NULL;
  s = npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, sw, wd, sizeof wd, &wt);
  npu_attr pa[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {sx, 2}}};
  npu_attr ca[] = {{.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = wt}};
  int nx = -1, nw = -1, ny = -1;
  if (!s) s = npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, pa, &nx);
  if (!s) s = npu_graph_add_op(g, "const", "w", 0, NULL, 1, ca, &nw);
  npu_tensor_release(wt);
  if (!s) s = npu_graph_add_op(g, "matmul", "y", 2, (int[]){out0(g, nx), out0(g, nw)}, 0, NULL, &ny);
  if (s) {
    npu_graph_release(g);
    return s;
  }
  *out = g;
  *x = out0(g, nx);
  *y = out0(g, ny);
  return NPU_OK;
}

static void test_set_get_and_refusals(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  int x, y;
  CHECK(build(ctx, &g, &x, &y) == NPU_OK);
  int ny = npu_graph_value_node(g, y);
  npu_options *o, *back = (npu_options *)1;
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  CHECK(npu_graph_get_exec_config(g, ny, &back) == NPU_OK && back == NULL);
  CHECK(npu_options_set_int(o, "graph_run_mode", 0) == NPU_OK);
  CHECK(npu_options_set_string(o, "dynamic_inputs_shape_range", "data:[2,3]") == NPU_OK);
  CHECK(npu_graph_set_exec_config(g, ny, o) == NPU_OK);
  CHECK(npu_graph_get_exec_config(g, ny, &back) == NPU_OK && back != NULL);
  int64_t mode = -1;
  const char *range = NULL;
  CHECK(npu_options_get_int(back, "graph_run_mode", &mode) == NPU_OK && mode == 0);
  CHECK(npu_options_is_set(back, "graph_run_mode"));
  CHECK(npu_options_get_string(back, "dynamic_inputs_shape_range", &range) == NPU_OK &&
        strcmp(range, "data:[2,3]") == 0);
  CHECK(!npu_options_is_set(back, "dynamic_input"));
  npu_options_release(back);
  /* a session option is refused, naming it and the node; nothing changes */
  CHECK(npu_options_set_string(o, "precision_mode", "force_fp32") == NPU_OK);
  CHECK(npu_graph_set_exec_config(g, ny, o) == NPU_ERR_OPTION);
  CHECK(strstr(npu_context_errmsg(ctx), "'precision_mode' cannot be set per graph") &&
        strstr(npu_context_errmsg(ctx), "'y'"));
  CHECK(npu_graph_get_exec_config(g, ny, &back) == NPU_OK && back != NULL);
  npu_options_release(back);
  CHECK(npu_graph_set_exec_config(g, 99, NULL) == NPU_ERR_ARG);
  CHECK(npu_graph_set_exec_config(g, ny, NULL) == NPU_OK); /* clears */
  CHECK(npu_graph_get_exec_config(g, ny, &back) == NPU_OK && back == NULL);
  npu_options_release(o);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* A training session; y's config makes its runs inference (force_fp16 by default), so the
   result is float16-rounded where the session's own would be exact; then a conflicting
   config on x fails the run naming both nodes. */
static npu_status scenario(npu_context *ctx, void *ud, int check_values) {
  (void)ud;
  npu_graph *g = NULL;
  npu_options *o = NULL;
  npu_session *s = NULL;
  npu_tensor *xt = NULL, *r = NULL;
  int x, y;
  npu_status st = build(ctx, &g, &x, &y);
  if (!st) st = npu_options_new(ctx, &o);
  if (!st) st = npu_options_set_int(o, "graph_run_mode", 0);
  if (!st) st = npu_options_set_bool(o, "dynamic_input", 1);
  if (!st) st = npu_options_set_string(o, "dynamic_inputs_shape_range", "data:[1~4,3]");
  if (!st) st = npu_graph_set_exec_config(g, npu_graph_value_node(g, y), o);
  if (!st) st = npu_session_new(ctx, g, NULL, &s);
  const float xd[] = {1.1f, 2.2f, 3.3f, 4.4f, 5.5f, 6.6f};
  if (!st)
    st = npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, (int64_t[]){2, 3}, xd, sizeof xd, &xt);
  if (!st) st = npu_session_run(s, 1, &x, &xt, 1, &y, &r, 0, NULL);
  if (!st && check_values) {
    double v = npu_tensor_get(r, 0), exact = 1.1 * 0.1 + 2.2 * 0.3 + 3.3 * 0.5;
    CHECK(v != (double)(float)exact); /* rounded */
    CHECK(fabs(v - exact) < 2e-3);
  }
  if (!st) { /* the same run again: the cached plan, no new config */
    npu_tensor_release(r);
    r = NULL;
    st = npu_session_run(s, 1, &x, &xt, 1, &y, &r, 0, NULL);
    if (!st && check_values) CHECK_EQ_I64(npu_session_n_plans(s), 1);
  }
  if (!st) { /* a different config on x: the run reaches both */
    npu_options *o2 = NULL;
    st = npu_options_new(ctx, &o2);
    if (!st) st = npu_options_set_int(o2, "graph_run_mode", 1);
    if (!st) st = npu_graph_set_exec_config(g, npu_graph_value_node(g, x), o2);
    npu_options_release(o2);
    npu_tensor_release(r);
    r = NULL;
    if (!st) {
      st = npu_session_run(s, 1, &x, &xt, 1, &y, &r, 0, NULL);
      if (st == NPU_ERR_CONFLICT) {
        if (check_values)
          CHECK(strstr(npu_context_errmsg(ctx), "'x'") && strstr(npu_context_errmsg(ctx), "'y'"));
        st = NPU_OK;
      } else if (!st) {
        st = NPU_ERR_INTERNAL; /* expected the conflict */
      }
    }
  }
  npu_tensor_release(r);
  npu_tensor_release(xt);
  npu_session_release(s);
  npu_options_release(o);
  npu_graph_release(g);
  return st;
}

static void test_scenario_values_and_sweep(void) {
  scenario_values_and_sweep(&(checked_scenario){.play = scenario, .min_failures = 20});
}

int main(void) {
  test_set_get_and_refusals();
  test_scenario_values_and_sweep();
  return check_summary("test_exec_config");
}
