/*
 * test_control.c — control flow through the C API alone (regions, cond, while, loop_var):
 * values computed here, the errors a region's misuse gets, and the allocation-failure sweep
 * over building, compiling and running a loop whose variable changes shape inside a cond.
 */
#include <string.h>

#include "npu_test.h"

typedef struct handles {
  npu_graph *g;
  npu_session *s;
  npu_tensor *x, *n, *p, *out[2];
} handles;

static void release_all(handles *h) {
  for (int i = 0; i < 2; i++) npu_tensor_release(h->out[i]);
  npu_tensor_release(h->x);
  npu_tensor_release(h->n);
  npu_tensor_release(h->p);
  npu_session_release(h->s);
  npu_graph_release(h->g);
  memset(h, 0, sizeof *h);
}

static int out0(npu_graph *g, int node) { return npu_graph_output(g, node, 0); }

static npu_status placeholder(npu_graph *g, const char *name, npu_dtype dt, int ndim,
                              int64_t *shape, int *value) {
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = dt},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, ndim}}};
  int node;
  TRY(npu_graph_add_op(g, "placeholder", name, 0, NULL, 2, a, &node));
  *value = out0(g, node);
  return NPU_OK;
}

static npu_status binary(npu_graph *g, const char *op, int a, int b, int *value) {
  int in[] = {a, b};
  return graph_op(g, op, NULL, 2, in, value);
}

/* (i, v) = (0, x); while i < n: (i + 1, concat(v, v)); then y = p ? v * 2 : v - v; returns
   y and i. */
static npu_status scenario(npu_context *ctx, handles *h, int check_values) {
  TRY(npu_graph_new(ctx, &h->g));
  npu_graph *g = h->g;
  int64_t s3[] = {3}, any[] = {-1};
  int x, n, p, zero, one, two;
  TRY(placeholder(g, "x", NPU_DTYPE_F32, 1, s3, &x));
  TRY(placeholder(g, "n", NPU_DTYPE_I32, 0, NULL, &n));
  TRY(placeholder(g, "p", NPU_DTYPE_BOOL, 0, NULL, &p));
  npu_tensor *t;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &t));
  *(int32_t *)npu_tensor_data(t) = 0;
  TRY(graph_const(g, "zero", t, &zero));

  int loop, node;
  TRY(npu_graph_region_begin(g, &loop));
  npu_attr vi[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I32},
                   {.name = "index", .type = NPU_ATTR_INT, .u.i = 0},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {NULL, 0}}};
  npu_attr vv[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "index", .type = NPU_ATTR_INT, .u.i = 1},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {any, 1}}};
  int i, v, pred, i1, v2;
  TRY(npu_graph_add_op(g, "loop_var", "i", 0, NULL, 3, vi, &node));
  i = out0(g, node);
  TRY(npu_graph_add_op(g, "loop_var", "v", 0, NULL, 3, vv, &node));
  v = out0(g, node);
  TRY(binary(g, "less", i, n, &pred));
  TRY(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &t));
  *(int32_t *)npu_tensor_data(t) = 1;
  TRY(graph_const(g, "one", t, &one));
  TRY(binary(g, "add", i, one, &i1));
  npu_attr axis = {.name = "axis", .type = NPU_ATTR_INT, .u.i = 0};
  int cin[] = {v, v};
  TRY(npu_graph_add_op(g, "concat", NULL, 2, cin, 1, &axis, &node));
  v2 = out0(g, node);
  TRY(npu_graph_region_end(g, loop));
  npu_attr wa[] = {{.name = "region", .type = NPU_ATTR_INT, .u.i = loop}};
  int win[] = {zero, x, pred, i1, v2};
  int wnode;
  TRY(npu_graph_add_op(g, "while", "loop", 5, win, 1, wa, &wnode));
  int count = npu_graph_output(g, wnode, 0), grown = npu_graph_output(g, wnode, 1);

  int then_r, else_r, y2, y0;
  TRY(npu_graph_region_begin(g, &then_r));
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 0, NULL, &t));
  *(float *)npu_tensor_data(t) = 2;
  TRY(graph_const(g, "two", t, &two));
  TRY(binary(g, "mul", grown, two, &y2));
  TRY(npu_graph_region_end(g, then_r));
  TRY(npu_graph_region_begin(g, &else_r));
  TRY(binary(g, "sub", grown, grown, &y0));
  TRY(npu_graph_region_end(g, else_r));
  npu_attr ca[] = {{.name = "then_region", .type = NPU_ATTR_INT, .u.i = then_r},
                   {.name = "else_region", .type = NPU_ATTR_INT, .u.i = else_r}};
  int cond_in[] = {p, y2, y0};
  TRY(npu_graph_add_op(g, "cond", "pick", 3, cond_in, 2, ca, &node));
  int y = out0(g, node);

  TRY(npu_session_new(ctx, g, NULL, &h->s));
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, s3, &h->x));
  float *xd = npu_tensor_data(h->x);
  xd[0] = 1, xd[1] = 2, xd[2] = 3;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &h->n));
  *(int32_t *)npu_tensor_data(h->n) = 2;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_BOOL, 0, NULL, &h->p));
  *(uint8_t *)npu_tensor_data(h->p) = 1;
  int feeds[] = {x, n, p}, fetches[] = {y, count};
  npu_tensor *ft[] = {h->x, h->n, h->p};
  npu_status st = npu_session_run(h->s, 3, feeds, ft, 2, fetches, h->out, 0, NULL);
  if (st) {
    CHECK(h->out[0] == NULL && h->out[1] == NULL);
    return st;
  }
  if (check_values) {
    CHECK(npu_tensor_ndim(h->out[0]) == 1 && npu_tensor_shape(h->out[0])[0] == 12);
    const float *yd = npu_tensor_data(h->out[0]);
    for (int k = 0; k < 12; k++) CHECK_NEAR(yd[k], 2 * xd[k % 3], 0);
    CHECK(*(const int32_t *)npu_tensor_data(h->out[1]) == 2);
  }
  return NPU_OK;
}

static npu_status run_checking_values(npu_context *ctx, void *h) { return scenario(ctx, h, 1); }
static npu_status run_only(npu_context *ctx, void *h) { return scenario(ctx, h, 0); }

static void after_release(npu_context *ctx, npu_status st, void *h) {
  (void)ctx, (void)st;
  release_all(h);
}

static void test_values(void) {
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  handles h = {0};
  scenario_run_once(ctx, &(scenario_def){.run = run_checking_values, .after = after_release, .ud = &h});
  npu_context_release(ctx);
}

static void test_allocation_failure_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  handles h = {0};
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.run = run_only, .after = after_release, .ud = &h, .what = "control"});
  CHECK(n_failures > 30);
  npu_context_release(ctx);
}

/* Regions misused: each a clear status and message, the graph unchanged. */
static void test_region_errors(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int r1, r2, x, node = 7;
  int64_t s2[] = {2};
  CHECK(placeholder(g, "x", NPU_DTYPE_F32, 1, s2, &x) == NPU_OK);
  CHECK(npu_graph_region_begin(g, &r1) == NPU_OK && r1 == 1);
  CHECK(npu_graph_region_begin(g, &r2) == NPU_OK && r2 == 2);
  CHECK(npu_graph_region_end(g, r1) == NPU_ERR_STATE); /* r2 is open inside it */
  CHECK(strstr(npu_context_errmsg(ctx), "reverse order") != NULL);
  int inner;
  int in[] = {x, x};
  CHECK(graph_op(g, "add", "inner", 2, in, &inner) == NPU_OK);
  CHECK(npu_graph_region_end(g, r2) == NPU_OK);
  /* a cond whose region is still open (r1) */
  npu_attr ca[] = {{.name = "then_region", .type = NPU_ATTR_INT, .u.i = r1},
                   {.name = "else_region", .type = NPU_ATTR_INT, .u.i = r2}};
  int cin[] = {x, x, x};
  CHECK(npu_graph_region_end(g, r1) == NPU_OK);
  /* regions opened inside another region cannot be run from the top level */
  CHECK(npu_graph_add_op(g, "cond", NULL, 3, cin, 2, ca, &node) == NPU_ERR_ARG);
  CHECK(node == -1);
  /* inner belongs to region 2: not visible at the top level */
  int use[] = {inner, x};
  CHECK(npu_graph_add_op(g, "add", NULL, 2, use, 0, NULL, &node) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "'inner'") && strstr(npu_context_errmsg(ctx), "not visible"));
  int n_before = npu_graph_n_nodes(g);
  npu_attr bad[] = {{.name = "then_region", .type = NPU_ATTR_INT, .u.i = 9},
                    {.name = "else_region", .type = NPU_ATTR_INT, .u.i = 1}};
  CHECK(npu_graph_add_op(g, "cond", NULL, 3, cin, 2, bad, &node) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "not a region") != NULL);
  CHECK(npu_graph_n_nodes(g) == n_before);
  CHECK(npu_graph_region(g) == 0);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

int main(void) {
  test_values();
  test_region_errors();
  test_allocation_failure_sweep();
  return check_summary("test_control");
}
