/*
 * test_grad.c — npu_graph_gradients through the C API alone: gradient values against values
 * computed here, the argument errors, a failure leaving the graph exactly as it was (nodes,
 * values, names), and the allocation-failure sweeps, plain and through cond and while (fail
 * the N-th allocation for every N: a clean NPU_ERR_NOMEM, the graph unchanged, the outs -1,
 * zero live bytes once released).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "npu_test.h"
#include "kernels/kgrad.h"

static npu_status add(npu_graph *g, const char *op, const char *name, int n_in, const int *in,
                      int n_attrs, const npu_attr *attrs, int *value) {
  int node;
  npu_status st = npu_graph_add_op(g, op, name, n_in, in, n_attrs, attrs, &node);
  *value = st ? -1 : out0(g, node);
  return st;
}

/* loss = reduce_mean(relu(x W + b)^2) with x (2, 3) and W (3, 2), b (2) placeholders. */
static npu_status build(npu_context *ctx, npu_graph **out, int *x, int *w, int *b, int *loss) {
  npu_graph *g;
  npu_status st = npu_graph_new(ctx, &g);
  if (st) return st;
  int64_t sx[] = {2, 3}, sw[] = {3, 2}, sb[] = {2};
  npu_attr ax[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F64},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {sx, 2}}};
  npu_attr aw[] = {ax[0], {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {sw, 2}}};
  npu_attr ab[] = {ax[0], {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {sb, 1}}};
  int mm, ba, r, sq;
  if (!st) st = add(g, "placeholder", "x", 0, NULL, 2, ax, x);
  if (!st) st = add(g, "placeholder", "w", 0, NULL, 2, aw, w);
  if (!st) st = add(g, "placeholder", "b", 0, NULL, 2, ab, b);
  if (!st) st = add(g, "matmul", NULL, 2, (int[]){*x, *w}, 0, NULL, &mm);
  if (!st) st = add(g, "bias_add", NULL, 2, (int[]){mm, *b}, 0, NULL, &ba);
  if (!st) st = add(g, "relu", NULL, 1, &ba, 0, NULL, &r);
  if (!st) st = add(g, "square", NULL, 1, &r, 0, NULL, &sq);
  if (!st) st = add(g, "reduce_mean", "loss", 1, &sq, 0, NULL, loss);
  if (st) {
    npu_graph_release(g);
    return st;
  }
  *out = g;
  return NPU_OK;
}

static const double X[2][3] = {{1, -2, 0.5}, {0.25, 1, -1}};
static const double W[3][2] = {{0.5, -1}, {1, 0.25}, {-0.5, 2}};
static const double B[2] = {0.125, 0.5};

static npu_tensor *tensor(npu_context *ctx, int ndim, const int64_t *shape, const void *data,
                          size_t n) {
  npu_tensor *t = NULL;
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F64, ndim, shape, data, n * sizeof(double), &t) ==
        NPU_OK);
  return t;
}

static void test_values(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g = NULL;
  int x, w, b, loss;
  CHECK(build(ctx, &g, &x, &w, &b, &loss) == NPU_OK);
  int xs[3] = {x, w, b}, dx[3];
  CHECK(npu_graph_gradients(g, 1, &loss, NULL, 3, xs, dx) == NPU_OK);
  for (int i = 0; i < 3; i++) CHECK(dx[i] >= 0);
  CHECK(strncmp(npu_graph_node_name(g, npu_graph_value_node(g, dx[1])), "gradients/", 10) == 0);

  /* by hand: h = relu(x W + b); dloss/dh = 2 h / 4; dW = x^T dh, db = sum dh, dx = dh W^T */
  double h[2][2], dh[2][2], dW[3][2] = {{0}}, db[2] = {0}, dX[2][3] = {{0}};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      double s = B[j];
      for (int k = 0; k < 3; k++) s += X[i][k] * W[k][j];
      h[i][j] = s > 0 ? s : 0;
      dh[i][j] = s > 0 ? 2 * h[i][j] / 4 : 0;
    }
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      db[j] += dh[i][j];
      for (int k = 0; k < 3; k++) {
        dW[k][j] += X[i][k] * dh[i][j];
        dX[i][k] += dh[i][j] * W[k][j];
      }
    }
  int64_t sx[] = {2, 3}, sw[] = {3, 2}, sb[] = {2};
  npu_tensor *feeds[3] = {tensor(ctx, 2, sx, X, 6), tensor(ctx, 2, sw, W, 6),
                          tensor(ctx, 1, sb, B, 2)};
  npu_session *s = NULL;
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  npu_tensor *got[3] = {NULL};
  CHECK(npu_session_run(s, 3, xs, feeds, 3, dx, got, 0, NULL) == NPU_OK);
  const double *gx = npu_tensor_data(got[0]), *gw = npu_tensor_data(got[1]),
               *gb = npu_tensor_data(got[2]);
  for (int i = 0; i < 6; i++) CHECK_NEAR(gx[i], dX[i / 3][i % 3], 1e-14);
  for (int i = 0; i < 6; i++) CHECK_NEAR(gw[i], dW[i / 2][i % 2], 1e-14);
  for (int i = 0; i < 2; i++) CHECK_NEAR(gb[i], db[i], 1e-14);
  for (int i = 0; i < 3; i++) {
    npu_tensor_release(got[i]);
    npu_tensor_release(feeds[i]);
  }
  npu_session_release(s);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

static void test_errors(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g = NULL;
  int x, w, b, loss, dx[2] = {7, 7};
  CHECK(build(ctx, &g, &x, &w, &b, &loss) == NPU_OK);
  CHECK(npu_graph_gradients(NULL, 1, &loss, NULL, 1, &x, dx) == NPU_ERR_ARG);
  CHECK(npu_graph_gradients(g, 0, &loss, NULL, 1, &x, dx) == NPU_ERR_ARG);
  CHECK(dx[0] == -1);
  CHECK(npu_graph_gradients(g, 1, &loss, NULL, 1, NULL, dx) == NPU_ERR_ARG);
  int bad = 9999;
  CHECK(npu_graph_gradients(g, 1, &bad, NULL, 1, &x, dx) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "ys[0]") != NULL);
  CHECK(npu_graph_gradients(g, 1, &loss, &x, 1, &x, dx) == NPU_ERR_SHAPE); /* grad_ys shape */

  /* an op without a gradient on the path: pad REFLECT; the graph is left as it was */
  int64_t pads[] = {1, 1, 1, 1};
  npu_attr ap[] = {{.name = "paddings", .type = NPU_ATTR_INTS, .u.ints = {pads, 4}},
                   {.name = "mode", .type = NPU_ATTR_STRING, .u.s = "REFLECT"}};
  int p, e, s;
  CHECK(add(g, "pad", NULL, 1, &x, 2, ap, &p) == NPU_OK);
  CHECK(add(g, "exp", NULL, 1, &p, 0, NULL, &e) == NPU_OK);
  CHECK(add(g, "reduce_sum", NULL, 1, &e, 0, NULL, &s) == NPU_OK);
  int ys[2] = {loss, s}, xs[2] = {x, w};
  int n_nodes = npu_graph_n_nodes(g), n_values = npu_graph_n_values(g);
  dx[0] = dx[1] = 7;
  CHECK(npu_graph_gradients(g, 2, ys, NULL, 2, xs, dx) == NPU_ERR_UNSUPPORTED);
  CHECK(strstr(npu_context_errmsg(ctx), "REFLECT") != NULL);
  CHECK(dx[0] == -1 && dx[1] == -1);
  CHECK(npu_graph_n_nodes(g) == n_nodes);
  CHECK(npu_graph_n_values(g) == n_values);
  CHECK(npu_graph_find_node(g, "gradients/loss_grad/BroadcastLike") < 0);
  CHECK(npu_graph_find_node(g, "loss") >= 0); /* the name index was rebuilt */
  /* the graph still grows normally, and names made unique as before */
  int e2;
  CHECK(add(g, "exp", NULL, 1, &p, 0, NULL, &e2) == NPU_OK);
  CHECK(strcmp(npu_graph_node_name(g, npu_graph_value_node(g, e2)), "Exp_1") == 0);
  CHECK(npu_graph_gradients(g, 1, &loss, NULL, 2, xs, dx) == NPU_OK);
  CHECK(dx[0] >= 0 && dx[1] >= 0);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* The sweep's case: a graph built before each attempt, npu_graph_gradients on it. */
typedef struct grad_case {
  npu_graph *g;
  int loss, n_nodes, n_values, xs[3], dx[3];
} grad_case;

static npu_status grad_setup(npu_context *ctx, void *ud) {
  grad_case *c = ud;
  *c = (grad_case){.dx = {7, 7, 7}};
  TRY(build(ctx, &c->g, &c->xs[0], &c->xs[1], &c->xs[2], &c->loss));
  c->n_nodes = npu_graph_n_nodes(c->g);
  c->n_values = npu_graph_n_values(c->g);
  return NPU_OK;
}

static npu_status grad_run(npu_context *ctx, void *ud) {
  grad_case *c = ud;
  (void)ctx;
  return npu_graph_gradients(c->g, 1, &c->loss, NULL, 3, c->xs, c->dx);
}

/* A failed call left the graph as it was, the outs -1, and the graph usable. */
static void grad_after(npu_context *ctx, npu_status st, void *ud) {
  grad_case *c = ud;
  (void)ctx;
  if (st != NPU_OK) {
    CHECK(c->dx[0] == -1 && c->dx[1] == -1 && c->dx[2] == -1);
    CHECK(npu_graph_n_nodes(c->g) == c->n_nodes);
    CHECK(npu_graph_n_values(c->g) == c->n_values);
    /* still usable: the whole call succeeds on the same graph */
    CHECK(npu_graph_gradients(c->g, 1, &c->loss, NULL, 3, c->xs, c->dx) == NPU_OK);
  }
  npu_graph_release(c->g);
  c->g = NULL;
}

static void test_allocation_failure_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  grad_case c;
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.setup = grad_setup, .run = grad_run, .after = grad_after, .ud = &c});
  CHECK(n_failures > 20); /* the sweep really went through the call's allocations */
  npu_context_release(ctx);
}

/* The sweep over control flow: loss = while (i < 3) { i += 1; v *= w } starting at
   v = cond(p, x * w, exp(x)); gradients to x and w (a grad cond, a recording loop and a
   backward loop, each with regions of clones). */
static npu_status scalar_ph(npu_graph *g, const char *name, npu_dtype dtype, int *v) {
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = dtype},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {NULL, 0}}};
  return add(g, "placeholder", name, 0, NULL, 2, a, v);
}

static npu_status int_const(npu_context *ctx, npu_graph *g, int32_t k, int *v) {
  npu_tensor *t;
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_I32, 0, NULL, &k, sizeof k, &t));
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  npu_status st = add(g, "const", NULL, 0, NULL, 1, &a, v);
  npu_tensor_release(t);
  return st;
}

static npu_status build_control(npu_context *ctx, npu_graph *g, int *x, int *w, int *loss) {
  int p, t, e, c, zero, three, one, lv0, lv1, less, i1, v1, r_then, r_else, r_loop, node;
  TRY(scalar_ph(g, "x", NPU_DTYPE_F64, x));
  TRY(scalar_ph(g, "w", NPU_DTYPE_F64, w));
  TRY(scalar_ph(g, "p", NPU_DTYPE_BOOL, &p));
  TRY(npu_graph_region_begin(g, &r_then));
  TRY(add(g, "mul", NULL, 2, (int[]){*x, *w}, 0, NULL, &t));
  TRY(npu_graph_region_end(g, r_then));
  TRY(npu_graph_region_begin(g, &r_else));
  TRY(add(g, "exp", NULL, 1, x, 0, NULL, &e));
  TRY(npu_graph_region_end(g, r_else));
  npu_attr ac[] = {{.name = "then_region", .type = NPU_ATTR_INT, .u.i = r_then},
                   {.name = "else_region", .type = NPU_ATTR_INT, .u.i = r_else}};
  TRY(add(g, "cond", "c", 3, (int[]){p, t, e}, 2, ac, &c));
  TRY(int_const(ctx, g, 0, &zero));
  TRY(int_const(ctx, g, 3, &three));
  TRY(int_const(ctx, g, 1, &one));
  TRY(npu_graph_region_begin(g, &r_loop));
  npu_attr a0[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I32},
                   {.name = "index", .type = NPU_ATTR_INT, .u.i = 0}};
  npu_attr a1[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F64},
                   {.name = "index", .type = NPU_ATTR_INT, .u.i = 1}};
  TRY(add(g, "loop_var", NULL, 0, NULL, 2, a0, &lv0));
  TRY(add(g, "loop_var", NULL, 0, NULL, 2, a1, &lv1));
  TRY(add(g, "less", NULL, 2, (int[]){lv0, three}, 0, NULL, &less));
  TRY(add(g, "add", NULL, 2, (int[]){lv0, one}, 0, NULL, &i1));
  TRY(add(g, "mul", NULL, 2, (int[]){lv1, *w}, 0, NULL, &v1));
  TRY(npu_graph_region_end(g, r_loop));
  npu_attr aw = {.name = "region", .type = NPU_ATTR_INT, .u.i = r_loop};
  TRY(npu_graph_add_op(g, "while", "loop", 5, (int[]){zero, c, less, i1, v1}, 1, &aw, &node));
  *loss = npu_graph_output(g, node, 1);
  return NPU_OK;
}

static npu_status control_setup(npu_context *ctx, void *ud) {
  grad_case *c = ud;
  *c = (grad_case){.dx = {7, 7, 7}};
  TRY(npu_graph_new(ctx, &c->g));
  npu_status st = build_control(ctx, c->g, &c->xs[0], &c->xs[1], &c->loss);
  if (st) {
    npu_graph_release(c->g);
    return st;
  }
  c->xs[2] = c->xs[0];
  c->n_nodes = npu_graph_n_nodes(c->g);
  c->n_values = npu_graph_n_values(c->g);
  return NPU_OK;
}

static void control_after(npu_context *ctx, npu_status st, void *ud) {
  grad_case *c = ud;
  if (st != NPU_OK) CHECK(npu_graph_region(c->g) == 0); /* every region it opened was closed */
  grad_after(ctx, st, ud);
}

static void test_control_flow_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  grad_case c;
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.setup = control_setup, .run = grad_run, .after = control_after,
                           .ud = &c, .what = "control flow gradients"});
  CHECK(n_failures > 50);
  npu_context_release(ctx);
}

/* The window gradient kernels are adjoints: <A x, dy> = <x, A^T dy> for conv2d and
   depthwise_conv2d in the input and in the filter, avg_pool, and max_pool (a selection). */
static double dot(int64_t n, const float *a, const float *b) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}

static void fill(float *p, int64_t n, unsigned seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (float)((seed >> 8) % 257) / 64.0f - 2.0f;
  }
}

static void test_window_kernels_are_adjoints(void) {
  enum { N = 2, H = 5, WD = 6, C = 3, KH = 3, KW = 2, OC = 4, M = 2 };
  npuK_window2d w = {.n = N, .in_h = H, .in_w = WD, .c = C, .k_h = KH, .k_w = KW,
                     .stride_h = 2, .stride_w = 1, .dilation_h = 1, .dilation_w = 2};
  CHECK(npuK_conv_output_dim(H, KH, 2, 1, 1, &w.out_h, &w.pad_top) == 0);
  CHECK(npuK_conv_output_dim(WD, KW, 1, 2, 1, &w.out_w, &w.pad_left) == 0);
  const int64_t nx = N * H * WD * C, no = N * w.out_h * w.out_w;
  static float x[N * H * WD * C], dx[N * H * WD * C], f[KH * KW * C * OC], df[KH * KW * C * OC];
  static float y[2 * 3 * 6 * OC * C], dy[2 * 3 * 6 * OC * C];
  CHECK(no * OC * C <= (int64_t)(sizeof y / sizeof *y));
  fill(x, nx, 1);
  fill(f, KH * KW * C * OC, 2);
  fill(dy, no * OC, 3);
  /* conv2d */
  npuK_conv2d_f32_ref(NULL, &w, OC, x, f, y, NULL, 1);
  npuK_conv2d_backprop_input_f32(NULL, &w, OC, dy, f, dx);
  npuK_conv2d_backprop_filter_f32(NULL, &w, OC, x, dy, df, NULL);
  double lhs = dot(no * OC, y, dy);
  CHECK_NEAR(dot(nx, x, dx), lhs, 1e-5);
  CHECK_NEAR(dot(KH * KW * C * OC, f, df), lhs, 1e-5);
  /* depthwise_conv2d, multiplier M */
  fill(dy, no * C * M, 4);
  npuK_depthwise_conv2d_f32_ref(NULL, &w, M, x, f, y);
  npuK_depthwise_conv2d_backprop_input_f32(NULL, &w, M, dy, f, dx);
  npuK_depthwise_conv2d_backprop_filter_f32(NULL, &w, M, x, dy, df, NULL);
  lhs = dot(no * C * M, y, dy);
  CHECK_NEAR(dot(nx, x, dx), lhs, 1e-5);
  CHECK_NEAR(dot(KH * KW * C * M, f, df), lhs, 1e-5);
  /* pools (dilation 1) */
  w.dilation_w = 1;
  CHECK(npuK_conv_output_dim(WD, KW, 1, 1, 1, &w.out_w, &w.pad_left) == 0);
  const int64_t np = N * w.out_h * w.out_w * C;
  fill(dy, np, 5);
  npuK_avg_pool_f32_ref(NULL, &w, x, y);
  npuK_avg_pool_grad_f32(NULL, &w, dy, dx);
  CHECK_NEAR(dot(nx, x, dx), dot(np, y, dy), 1e-5);
  npuK_max_pool_f32_ref(NULL, &w, x, y);
  npuK_max_pool_grad_f32(NULL, &w, x, dy, dx);
  CHECK_NEAR(dot(nx, x, dx), dot(np, y, dy), 1e-5);
}

/* The filter gradients sum over every position (n, oh, ow): float32 over blocks of 64, float64
   across them.  A 1x1 filter over 300 x 300 positive terms: within 2^-24 |s| + 2^-18 sum|t|
   (one rounding, plus a float32 sum of 64 terms), which a float32 sum of all 90000 misses;
   and the scratch needs no clearing by the caller: stale scratch gives the same bits. */
static void test_filter_grad_accuracy(void) {
  enum { H = 300, WD = 300, C = 2, OC = 3 };
  npuK_window2d w = {.n = 1, .in_h = H, .in_w = WD, .c = C, .k_h = 1, .k_w = 1, .stride_h = 1,
                     .stride_w = 1, .dilation_h = 1, .dilation_w = 1, .out_h = H, .out_w = WD};
  float *x = malloc(H * WD * C * sizeof *x), *dy = malloc(H * WD * OC * C * sizeof *dy);
  float df[9 * C * OC * C], df2[9 * C * OC * C];
  double *acc = malloc(9 * C * OC * C * sizeof *acc); /* enough for every case below */
  CHECK(x && dy && acc);
  unsigned seed = 7;
  for (int i = 0; i < H * WD * C; i++) x[i] = 0.5f + (float)((seed = seed * 1103515245u + 12345u) >> 9) / 8388608.0f;
  for (int i = 0; i < H * WD * OC * C; i++) dy[i] = 0.5f + (float)((seed = seed * 1103515245u + 12345u) >> 9) / 8388608.0f;
  npuK_conv2d_backprop_filter_f32(NULL, &w, OC, x, dy, df, acc);
  int ok = 1;
  for (int ci = 0; ci < C; ci++)
    for (int co = 0; co < OC; co++) {
      double s = 0;
      for (int p = 0; p < H * WD; p++) s += (double)x[p * C + ci] * dy[p * OC + co];
      ok &= fabs(df[ci * OC + co] - s) <= 0x1p-24 * s + 0x1p-18 * s; /* terms > 0: sum|t| = s */
    }
  CHECK(ok);
  /* depthwise (multiplier 2): dy rows hold C * 2 values */
  npuK_depthwise_conv2d_backprop_filter_f32(NULL, &w, 2, x, dy, df, acc);
  ok = 1;
  for (int ci = 0; ci < C; ci++)
    for (int m = 0; m < 2; m++) {
      double s = 0;
      for (int p = 0; p < H * WD; p++) s += (double)x[p * C + ci] * dy[p * C * 2 + ci * 2 + m];
      ok &= fabs(df[ci * 2 + m] - s) <= 0x1p-24 * s + 0x1p-18 * s;
    }
  CHECK(ok);
  /* a 3x3 filter, SAME padding: items one at a time versus all at once */
  w.k_h = w.k_w = 3;
  w.pad_top = w.pad_left = 1;
  npuK_conv2d_backprop_filter_f32(NULL, &w, OC, x, dy, df, acc);
  memset(acc, 0xff, npuK_filter_grad_f32_scratch_size(&w, OC)); /* stale scratch is ignored */
  npuK_conv2d_backprop_filter_f32(NULL, &w, OC, x, dy, df2, acc);
  CHECK(memcmp(df, df2, 9 * C * OC * sizeof *df) == 0);
  free(x);
  free(dy);
  free(acc);
}

int main(void) {
  test_filter_grad_accuracy();
  test_window_kernels_are_adjoints();
  test_values();
  test_errors();
  test_allocation_failure_sweep();
  test_control_flow_sweep();
  return check_summary("test_grad");
}
