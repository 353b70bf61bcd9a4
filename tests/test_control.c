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

static void release_all(void *ud) {
  handles *h = ud;
  for (int i = 0; i < 2; i++) npu_tensor_release(h->out[i]);
  npu_tensor_release(h->x);
  npu_tensor_release(h->n);
  npu_tensor_release(h->p);
  npu_session_release(h->s);
  npu_graph_release(h->g);
  memset(h, 0, sizeof *h);
}

static npu_status binary(npu_graph *g, const char *op, int a, int b, int *value) {
  int in[] = {a, b};
  return graph_op(g, op, NULL, 2, in, value);
}

/* (i, v) = (0, x); while i < n: (i + 1, concat(v, v)); then y = p ? v * 2 : v - v; returns
   y and i. */
static npu_status scenario(npu_context *ctx, void *ud, int check_values) {
  handles *h = ud;
  TRY(npu_graph_new(ctx, &h->g));
  npu_graph *g = h->g;
  int64_t s3[] = {3}, any[] = {-1};
  int x, n, p, zero, one, two;
  TRY(graph_placeholder(g, "x", NPU_DTYPE_F32, 1, s3, &x));
  TRY(graph_placeholder(g, "n", NPU_DTYPE_I32, 0, NULL, &n));
  TRY(graph_placeholder(g, "p", NPU_DTYPE_BOOL, 0, NULL, &p));
  npu_tensor *t;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &t));
  *(int32_t *)npu_tensor_data(t) = 0;
  TRY(graph_const(g, "zero", t, &zero));

  int loop, node;
  TRY(npu_graph_region_begin(g, &loop));
  int i, v, pred, i1, v2;
  TRY(graph_loop_var(g, "i", NPU_DTYPE_I32, 0, 0, NULL, &i));
  TRY(graph_loop_var(g, "v", NPU_DTYPE_F32, 1, 1, any, &v));
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

static void test_scenario_values_and_sweep(void) {
  handles h = {0};
  scenario_values_and_sweep(&(checked_scenario){
      .play = scenario, .release = release_all, .ud = &h, .what = "control", .threads = 2,
      .min_failures = 30});
}

/* Regions misused: each a clear status and message, the graph unchanged. */
static void test_region_errors(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int r1, r2, x, node = 7;
  int64_t s2[] = {2};
  CHECK(graph_placeholder(g, "x", NPU_DTYPE_F32, 1, s2, &x) == NPU_OK);
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

/* The build-time errors of cond, while, loop_var and tensor_array_write, each with its status
   and the words that name the culprit; a failed add changes nothing. */
static int add_fails(npu_context *ctx, npu_graph *g, const char *op, int n_in, const int *in, int n_attrs,
                     const npu_attr *attrs, npu_status want, const char *part) {
  int node = 7, n_before = npu_graph_n_nodes(g);
  npu_status st = npu_graph_add_op(g, op, NULL, n_in, in, n_attrs, attrs, &node);
  const char *msg = npu_context_errmsg(ctx);
  int ok = st == want && node == -1 && npu_graph_n_nodes(g) == n_before && strstr(msg, part);
  if (!ok) fprintf(stderr, "%s: got %d '%s', want %d '%s'\n", op, (int)st, msg, (int)want, part);
  return ok;
}

static npu_attr int_attr(const char *name, int64_t v) {
  return (npu_attr){.name = name, .type = NPU_ATTR_INT, .u.i = v};
}

static void test_build_errors(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t s2[] = {2}, s3[] = {3}, s22[] = {2, 2}, bad_dim[] = {-2};
  int x, x3, p, fi, ii, node;
  CHECK(graph_placeholder(g, "x", NPU_DTYPE_F32, 1, s2, &x) == NPU_OK);
  CHECK(graph_placeholder(g, "x3", NPU_DTYPE_F32, 1, s3, &x3) == NPU_OK);
  CHECK(graph_placeholder(g, "p", NPU_DTYPE_BOOL, 0, NULL, &p) == NPU_OK);
  CHECK(graph_placeholder(g, "f", NPU_DTYPE_F32, 0, NULL, &fi) == NPU_OK);
  CHECK(graph_placeholder(g, "ii", NPU_DTYPE_I32, 2, s22, &ii) == NPU_OK);

  /* cond */
  int ra, rb, vb, open_r;
  CHECK(npu_graph_region_begin(g, &ra) == NPU_OK && npu_graph_region_end(g, ra) == NPU_OK);
  CHECK(npu_graph_region_begin(g, &rb) == NPU_OK);
  int xx[] = {x, x};
  CHECK(graph_op(g, "add", "vb", 2, xx, &vb) == NPU_OK);
  CHECK(npu_graph_region_end(g, rb) == NPU_OK);
  npu_attr ab[] = {int_attr("then_region", ra), int_attr("else_region", rb)};
  npu_attr aa[] = {int_attr("then_region", ra), int_attr("else_region", ra)};
  int pxx[] = {p, x, x}, px[] = {p, x}, pvb[] = {p, vb, vb};
  CHECK(add_fails(ctx, g, "cond", 3, pxx, 2, aa, NPU_ERR_ARG, "are the same region"));
  CHECK(add_fails(ctx, g, "cond", 2, px, 2, ab, NPU_ERR_ARG, "an odd number of inputs"));
  CHECK(add_fails(ctx, g, "cond", 3, pvb, 2, ab, NPU_ERR_ARG, "a then result ('vb') is not visible"));
  CHECK(npu_graph_region_begin(g, &open_r) == NPU_OK);
  npu_attr ao[] = {int_attr("then_region", open_r), int_attr("else_region", ra)};
  CHECK(add_fails(ctx, g, "cond", 3, pxx, 2, ao, NPU_ERR_STATE, "is still open"));
  CHECK(npu_graph_region_end(g, open_r) == NPU_OK);
  CHECK(npu_graph_add_op(g, "cond", "first", 3, pxx, 2, ab, &node) == NPU_OK);
  int rc;
  CHECK(npu_graph_region_begin(g, &rc) == NPU_OK && npu_graph_region_end(g, rc) == NPU_OK);
  npu_attr again[] = {int_attr("then_region", ra), int_attr("else_region", rc)};
  CHECK(add_fails(ctx, g, "cond", 3, pxx, 2, again, NPU_ERR_ARG, "already runs in 'first'"));

  /* while: a region holding loop_var 0 with invariant [3] and a true condition */
  int rw, lv, yes;
  CHECK(npu_graph_region_begin(g, &rw) == NPU_OK);
  npu_attr va[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   int_attr("index", 0),
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {s3, 1}}};
  CHECK(npu_graph_add_op(g, "loop_var", "v", 0, NULL, 3, va, &node) == NPU_OK);
  lv = out0(g, node);
  npu_tensor *t;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_BOOL, 0, NULL, &t) == NPU_OK);
  *(uint8_t *)npu_tensor_data(t) = 1;
  CHECK(graph_const(g, "yes", t, &yes) == NPU_OK);
  CHECK(npu_graph_region_end(g, rw) == NPU_OK);
  npu_attr wa[] = {int_attr("region", rw)};
  npu_attr wbad[] = {int_attr("region", rw), int_attr("maximum_iterations", -2)};
  int w_ok[] = {x, yes, lv}, w_even[] = {x, yes};
  CHECK(add_fails(ctx, g, "while", 3, w_ok, 2, wbad, NPU_ERR_ARG, "'maximum_iterations' must be >= 0"));
  CHECK(add_fails(ctx, g, "while", 2, w_even, 1, wa, NPU_ERR_ARG, "an odd number of inputs"));
  CHECK(add_fails(ctx, g, "while", 3, w_ok, 1, wa, NPU_ERR_SHAPE,
                  "the initial value [2] does not fit the shape invariant [3]"));
  int w_two[] = {x3, x3, yes, lv, lv}; /* loop variable 1 has no loop_var */
  CHECK(add_fails(ctx, g, "while", 5, w_two, 1, wa, NPU_ERR_ARG, "has no loop_var with index 1"));

  /* loop_var */
  npu_attr no_index[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32}};
  npu_attr neg_dim[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                        int_attr("index", 0),
                        {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {bad_dim, 1}}};
  CHECK(add_fails(ctx, g, "loop_var", 0, NULL, 1, no_index, NPU_ERR_ARG, "attribute 'index'"));
  CHECK(add_fails(ctx, g, "loop_var", 0, NULL, 3, neg_dim, NPU_ERR_ARG, "dimension 0 is -2"));

  /* tensor_array_write: buffer x ([2]: two scalar elements) */
  int zero, two_idx;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &t) == NPU_OK);
  *(int32_t *)npu_tensor_data(t) = 0;
  CHECK(graph_const(g, "zero", t, &zero) == NPU_OK);
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_I32, 1, s2, &t) == NPU_OK);
  memset(npu_tensor_data(t), 0, 2 * sizeof(int32_t));
  CHECK(graph_const(g, "two_idx", t, &two_idx) == NPU_OK);
  npu_attr size_bad[] = {int_attr("size", -2)};
  int w_f[] = {x, fi, fi}, w_rank[] = {x, ii, fi}, w_scatter[] = {x, two_idx, fi},
      w_fine[] = {x, zero, fi};
  CHECK(add_fails(ctx, g, "tensor_array_write", 3, w_fine, 1, size_bad, NPU_ERR_ARG,
                  "'size' must be >= 0 (or -1: it grows), got -2"));
  CHECK(add_fails(ctx, g, "tensor_array_write", 3, w_f, 0, NULL, NPU_ERR_DTYPE,
                  "index must be int32 or int64, got float32"));
  CHECK(add_fails(ctx, g, "tensor_array_write", 3, w_rank, 0, NULL, NPU_ERR_SHAPE,
                  "a scalar (write) or a vector (scatter), got [2,2]"));
  CHECK(add_fails(ctx, g, "tensor_array_write", 3, w_scatter, 0, NULL, NPU_ERR_SHAPE,
                  "a scatter of [2] indices needs as many values stacked, got []"));
  int w_elem[] = {x, zero, x}; /* elements of x are scalars: a [2] value does not fit */
  CHECK(add_fails(ctx, g, "tensor_array_write", 3, w_elem, 0, NULL, NPU_ERR_SHAPE,
                  "the array holds float32 elements of [] (buffer [2])"));
  CHECK(npu_graph_region(g) == 0);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* A placeholder built inside a branch: refused when the plan is compiled (build it outside and
   use its value inside), the session usable after. */
static void test_placeholder_in_a_region(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t s2[] = {2};
  int x, p, inner, rt, re, node;
  CHECK(graph_placeholder(g, "x", NPU_DTYPE_F32, 1, s2, &x) == NPU_OK);
  CHECK(graph_placeholder(g, "p", NPU_DTYPE_BOOL, 0, NULL, &p) == NPU_OK);
  CHECK(npu_graph_region_begin(g, &rt) == NPU_OK);
  CHECK(graph_placeholder(g, "inner", NPU_DTYPE_F32, 1, s2, &inner) == NPU_OK);
  CHECK(npu_graph_region_end(g, rt) == NPU_OK);
  CHECK(npu_graph_region_begin(g, &re) == NPU_OK && npu_graph_region_end(g, re) == NPU_OK);
  npu_attr ca[] = {int_attr("then_region", rt), int_attr("else_region", re)};
  int cin[] = {p, inner, x};
  CHECK(npu_graph_add_op(g, "cond", "pick", 3, cin, 2, ca, &node) == NPU_OK);
  int y = out0(g, node);
  npu_session *s;
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  npu_tensor *xt, *pt, *out = (npu_tensor *)&out;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, s2, &xt) == NPU_OK);
  memset(npu_tensor_data(xt), 0, 2 * sizeof(float));
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_BOOL, 0, NULL, &pt) == NPU_OK);
  *(uint8_t *)npu_tensor_data(pt) = 0;
  int feeds[] = {x, p};
  npu_tensor *ft[] = {xt, pt};
  CHECK(npu_session_run(s, 2, feeds, ft, 1, &y, &out, 0, NULL) == NPU_ERR_UNSUPPORTED);
  CHECK(out == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "placeholder 'inner' cannot be inside a cond branch"));
  CHECK(npu_session_run(s, 2, feeds, ft, 1, &x, &out, 0, NULL) == NPU_OK); /* still usable */
  npu_tensor_release(out);
  npu_tensor_release(xt);
  npu_tensor_release(pt);
  npu_session_release(s);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

int main(void) {
  test_scenario_values_and_sweep();
  test_region_errors();
  test_build_errors();
  test_placeholder_in_a_region();
  return check_summary("test_control");
}
