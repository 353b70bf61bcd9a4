/*
 * test_fastmath.c — the high_performance kernels (kernels/kfast.h) and gelu's kernels against
 * float64 computed here: the error bounds kfast.h states, over a sweep of float32 bit patterns
 * (every 4093rd of all 2^32, so every binade and sign); special values; the same bits whatever
 * the split of the range (threads) and in place; then the implementation-mode options through
 * the C API: a bad op_precision_mode file fails npu_session_new naming file and line with
 * nothing leaked, and an allocation-failure sweep over a session that parses one.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npu_test.h"
#include "kernels/kfast.h"

/* The float32 ulp at the exact value v (subnormal spacing below FLT_MIN). */
static double ulp_at(double v) {
  v = fabs(v);
  if (v < FLT_MIN) return 0x1p-149;
  int e;
  frexp(v, &e);
  return ldexp(1.0, e - 24);
}

static double sigmoid_d(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }
static double gelu_d(double x, int approximate) {
  if (isinf(x)) return x > 0 ? x : -0.0;
  if (approximate) {
    double k1 = 2 * sqrt(2 / M_PI);
    return x * sigmoid_d(x * (k1 + 0.044715 * k1 * x * x));
  }
  return 0.5 * x * erfc(-x / sqrt(2.0));
}

enum { F_EXP, F_LOG, F_TANH, F_SIGMOID, F_GELU, F_GELU_TANH, F_COUNT };

static const struct {
  const char *name;
  npuK_unop op;
  double (*ref)(double);
} funcs[F_COUNT] = {
    [F_EXP] = {"exp", NPUK_UN_EXP, exp},
    [F_LOG] = {"log", NPUK_UN_LOG, log},
    [F_TANH] = {"tanh", NPUK_UN_TANH, tanh},
    [F_SIGMOID] = {"sigmoid", NPUK_UN_SIGMOID, sigmoid_d},
    [F_GELU] = {"gelu", 0, NULL},
    [F_GELU_TANH] = {"gelu(tanh)", 0, NULL},
};

static double ref_of(int f, double x) {
  if (f == F_GELU || f == F_GELU_TANH) return gelu_d(x, f == F_GELU_TANH);
  return funcs[f].ref(x);
}

static void run_fast(int f, int64_t n, const float *x, float *y) {
  if (f == F_GELU || f == F_GELU_TANH) npuK_gelu_f32_fast(NULL, f == F_GELU_TANH, n, x, y);
  else CHECK(npuK_unary_f32_fast(NULL, funcs[f].op, n, x, y) == 0);
}

/* The bounds of kfast.h: ulp for x >= from (the first row of a function whose bound applies
   everywhere has from = -inf). */
static const struct {
  int f;
  double from, ulps;
} bounds[] = {
    {F_EXP, -INFINITY, 1.0},       {F_LOG, -INFINITY, 1.5},     {F_TANH, -INFINITY, 1.5},
    {F_SIGMOID, -INFINITY, 2.5},   {F_GELU, -10, 8},            {F_GELU, -INFINITY, 11},
    {F_GELU_TANH, -2, 8},          {F_GELU_TANH, -3, 16},       {F_GELU_TANH, -6, 66},
    {F_GELU_TANH, -INFINITY, 215},
};

#define N_BOUNDS ((int)(sizeof bounds / sizeof *bounds))
enum { CHUNK = 1 << 14, SWEEP_STEP = 4093 };

/* Special inputs and the float32 of the exact result are compared exactly (NaN with NaN). */
static int same_special(float got, double want) {
  return (isnan(got) && isnan(want)) || (got == (float)want && !signbit(got) == !signbit(want));
}

static void test_accuracy(void) {
  static float x[CHUNK], y[CHUNK];
  for (int f = 0; f < F_COUNT; f++) {
    double worst[N_BOUNDS] = {0};
    long n_special = 0, bad_special = 0;
    for (uint64_t base = 0; base < (1ull << 32); base += (uint64_t)CHUNK * SWEEP_STEP) {
      int n = 0;
      for (; n < CHUNK && base + (uint64_t)n * SWEEP_STEP < (1ull << 32); n++) {
        uint32_t u = (uint32_t)(base + (uint64_t)n * SWEEP_STEP);
        memcpy(&x[n], &u, sizeof u);
      }
      run_fast(f, n, x, y);
      for (int k = 0; k < n; k++) {
        double want = ref_of(f, x[k]);
        if (isnan(want) || isinf((float)want) || !isfinite(x[k])) {
          n_special++;
          bad_special += !same_special(y[k], want);
          continue;
        }
        double err = fabs((double)y[k] - want) / ulp_at(want);
        for (int b = 0; b < N_BOUNDS; b++)
          if (bounds[b].f == f && x[k] >= bounds[b].from && err > worst[b]) worst[b] = err;
      }
    }
    CHECK(n_special > 100);
    if (bad_special) fprintf(stderr, "%s: %ld special values differ\n", funcs[f].name, bad_special);
    CHECK_EQ_I64(bad_special, 0);
    for (int b = 0; b < N_BOUNDS; b++) {
      if (bounds[b].f != f) continue;
      if (!(worst[b] <= bounds[b].ulps))
        fprintf(stderr, "%s: %.3f ulp for x >= %g, stated %g\n", funcs[f].name, worst[b],
                bounds[b].from, bounds[b].ulps);
      CHECK(worst[b] <= bounds[b].ulps);
      CHECK(worst[b] > 0.25); /* the sweep reached the approximation's own error */
    }
  }
}

/* Named inputs whose results are fixed by the definitions (limits, exact zeros). */
static void test_special_values(void) {
  static const struct {
    int f;
    float x, y;
  } cases[] = {
      {F_EXP, 0.0f, 1.0f},           {F_EXP, -INFINITY, 0.0f},   {F_EXP, INFINITY, INFINITY},
      {F_EXP, 89.0f, INFINITY},      {F_EXP, -104.0f, 0.0f},     {F_LOG, 1.0f, 0.0f},
      {F_LOG, 0.0f, -INFINITY},      {F_LOG, -0.0f, -INFINITY},  {F_LOG, INFINITY, INFINITY},
      {F_TANH, 0.0f, 0.0f},          {F_TANH, -0.0f, -0.0f},     {F_TANH, 20.0f, 1.0f},
      {F_TANH, -INFINITY, -1.0f},    {F_SIGMOID, 0.0f, 0.5f},    {F_SIGMOID, INFINITY, 1.0f},
      {F_SIGMOID, -INFINITY, 0.0f},  {F_GELU, 0.0f, 0.0f},       {F_GELU, -0.0f, -0.0f},
      {F_GELU, INFINITY, INFINITY},  {F_GELU, -INFINITY, -0.0f}, {F_GELU_TANH, 1e30f, 1e30f},
      {F_GELU_TANH, -INFINITY, -0.0f},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    float y;
    run_fast(cases[i].f, 1, &cases[i].x, &y);
    if (!(y == cases[i].y && !signbit(y) == !signbit(cases[i].y)))
      fprintf(stderr, "%s(%a) = %a, want %a\n", funcs[cases[i].f].name, cases[i].x, y, cases[i].y);
    CHECK(y == cases[i].y && !signbit(y) == !signbit(cases[i].y));
  }
  /* exp's subnormal results: within one subnormal step of the exact value */
  for (float x = -103.5f; x < -87.0f; x += 0.37f) {
    float y;
    run_fast(F_EXP, 1, &x, &y);
    CHECK(fabs((double)y - exp((double)x)) <= 0x1p-149);
  }
  float nan = NAN, y;
  for (int f = 0; f < F_COUNT; f++) {
    run_fast(f, 1, &nan, &y);
    CHECK(isnan(y));
  }
  float neg = -1.0f;
  run_fast(F_LOG, 1, &neg, &y);
  CHECK(isnan(y));
}

/* One element's result never depends on where a range starts or ends (the pool's split), and
   in place gives the same bits. */
static void test_split_and_in_place(void) {
  enum { N = 1000 };
  static float x[N], whole[N], part[N], inplace[N];
  for (int i = 0; i < N; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 37.0f;
  for (int f = 0; f < F_COUNT; f++) {
    run_fast(f, N, x, whole);
    for (int at = 0; at < N;) { /* ragged pieces: 1 .. 37 elements */
      int len = 1 + (at * 13) % 37;
      if (len > N - at) len = N - at;
      run_fast(f, len, x + at, part + at);
      at += len;
    }
    memcpy(inplace, x, sizeof x);
    run_fast(f, N, inplace, inplace);
    CHECK(memcmp(whole, part, sizeof whole) == 0);
    CHECK(memcmp(whole, inplace, sizeof whole) == 0);
  }
  CHECK(npuK_unary_f32_fast(NULL, NPUK_UN_RELU, N, x, part) == -1);
  CHECK(!npuK_unary_has_fast(NPUK_UN_SQRT) && npuK_unary_has_fast(NPUK_UN_EXP));
}

/* softmax and log_softmax: against float64 per row, rows of lengths around the block size. */
static void test_rows(void) {
  enum { MAXC = 1000 };
  static float x[MAXC], y[MAXC], y2[MAXC];
  static const int lens[] = {1, 2, 15, 16, 17, 33, 100, 1000};
  double worst_sm = 0, worst_lsm = 0;
  unsigned seed = 12345;
  for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
    int cols = lens[li];
    for (int rep = 0; rep < 50; rep++) {
      double scale = rep % 5 == 0 ? 40 : rep % 5 == 1 ? 0.01 : 8;
      for (int c = 0; c < cols; c++) {
        seed = seed * 1103515245u + 12345u;
        x[c] = (float)(((double)(seed >> 8) / (1 << 24) - 0.5) * 2 * scale);
      }
      /* the exact values for the float32 differences x - max both kernels start from (their
         rounding alone costs up to |x - max| 2^-24 relative, whatever the kernel) */
      float m = -INFINITY;
      double sum = 0;
      for (int c = 0; c < cols; c++) m = x[c] > m ? x[c] : m;
      for (int c = 0; c < cols; c++) sum += exp((double)(x[c] - m));
      npuK_softmax_f32_fast(NULL, 1, cols, x, y);
      npuK_log_softmax_f32_fast(NULL, 1, cols, x, y2);
      for (int c = 0; c < cols; c++) {
        double p = exp((double)(x[c] - m)) / sum, lp = (double)(x[c] - m) - log(sum);
        double e = fabs(y[c] - p) / ulp_at(p);
        if (p >= FLT_MIN && e > worst_sm) worst_sm = e;
        double le = fabs(y2[c] - lp) / (fabs(lp) > 1 ? fabs(lp) : 1);
        if (le > worst_lsm) worst_lsm = le;
      }
    }
  }
  if (!(worst_sm <= 5)) fprintf(stderr, "softmax: %.3f ulp, stated 5\n", worst_sm);
  if (!(worst_lsm <= 2e-7)) fprintf(stderr, "log_softmax: %.3g, stated 2e-7\n", worst_lsm);
  CHECK(worst_sm <= 5 && worst_sm > 0.25);
  CHECK(worst_lsm <= 2e-7);
  /* rows with NaN / inf are NaN throughout, as the high_precision kernel makes them */
  static const float specials[][3] = {{1, NAN, 2}, {1, INFINITY, 2}, {-INFINITY, -INFINITY, -INFINITY}};
  for (int r = 0; r < 3; r++) {
    float a[3], b[3];
    npuK_softmax_f32_fast(NULL, 1, 3, specials[r], a);
    npuK_softmax_f32(NULL, 1, 3, specials[r], b);
    for (int c = 0; c < 3; c++) CHECK(isnan(a[c]) && isnan(b[c]));
    npuK_log_softmax_f32_fast(NULL, 1, 3, specials[r], a);
    npuK_log_softmax_f32(NULL, 1, 3, specials[r], b);
    for (int c = 0; c < 3; c++) CHECK(isnan(a[c]) == isnan(b[c]));
  }
  /* row by row equals all rows at once; in place equals out of place */
  enum { R = 7, C = 19 };
  static float xs[R * C], all[R * C], one[R * C];
  for (int i = 0; i < R * C; i++) xs[i] = (float)((i * 31) % 23) - 11.5f;
  npuK_softmax_f32_fast(NULL, R, C, xs, all);
  for (int r = 0; r < R; r++) npuK_softmax_f32_fast(NULL, 1, C, xs + r * C, one + r * C);
  CHECK(memcmp(all, one, sizeof all) == 0);
  memcpy(one, xs, sizeof xs);
  npuK_softmax_f32_fast(NULL, R, C, one, one);
  CHECK(memcmp(all, one, sizeof all) == 0);
}

/* gelu's high_precision kernels: values fixed by Phi (Phi(1) = 0.841344746068543, Phi(-2) =
   0.0227501319481792), the tanh form's definition, and the gradient against central
   differences of the float64 kernel. */
static void test_gelu_precise(void) {
  double x[4] = {1, -1, -2, 0.5}, y[4], dy[4] = {1, 1, 1, 1}, g[4];
  npuK_gelu_f64(NULL, 0, 4, x, y);
  CHECK_NEAR(y[0], 0.841344746068543, 1e-14);
  CHECK_NEAR(y[1], -(1 - 0.841344746068543), 1e-14);
  CHECK_NEAR(y[2], -2 * 0.0227501319481792, 1e-14);
  npuK_gelu_f64(NULL, 1, 4, x, y);
  for (int i = 0; i < 4; i++) {
    double v = x[i], t = tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v));
    CHECK_NEAR(y[i], 0.5 * v * (1 + t), 1e-14);
  }
  for (int approximate = 0; approximate < 2; approximate++) {
    npuK_gelu_grad_f64(NULL, approximate, 4, dy, x, g);
    for (int i = 0; i < 4; i++) {
      double h = 1e-6, a = x[i] + h, b = x[i] - h, ya, yb;
      npuK_gelu_f64(NULL, approximate, 1, &a, &ya);
      npuK_gelu_f64(NULL, approximate, 1, &b, &yb);
      CHECK_NEAR(g[i], (ya - yb) / (2 * h), 1e-8);
    }
  }
  /* float32: the float64 value rounded once */
  float xf[5] = {-12.5f, -3.25f, 0.1f, 2.0f, 7.0f}, yf[5];
  for (int approximate = 0; approximate < 2; approximate++) {
    npuK_gelu_f32(NULL, approximate, 5, xf, yf);
    for (int i = 0; i < 5; i++) CHECK(yf[i] == (float)gelu_d(xf[i], approximate));
  }
  float gf[2], dyf[2] = {2, -3}, xg[2] = {0.5f, -1.5f};
  npuK_gelu_grad_f32(NULL, 0, 2, dyf, xg, gf);
  double g64[2], dy64[2] = {2, -3}, x64[2] = {0.5, -1.5};
  npuK_gelu_grad_f64(NULL, 0, 2, dy64, x64, g64);
  CHECK(gf[0] == (float)g64[0] && gf[1] == (float)g64[1]);
}

/* ---- the options through the C API ---- */

/* Writes text to a file under $TMPDIR (or /tmp); its path in a static buffer that the next call
   overwrites. */
static const char *write_file(const char *name, const char *text) {
  static char path[256];
  const char *dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/npu_test_fastmath_%s", dir && *dir ? dir : "/tmp", name);
  write_text(path, text);
  return path;
}

/* y = exp(x) under op_precision_mode = path; *out gets y for x = x_in */
static npu_status exp_session(npu_context *ctx, const char *path, float x_in, float *out) {
  npu_graph *g = NULL;
  npu_options *o = NULL;
  npu_session *s = NULL;
  npu_tensor *x = NULL, *y = NULL;
  int64_t shape[] = {1};
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 1}}};
  int nx, ny;
  npu_status st = npu_graph_new(ctx, &g);
  if (!st) st = npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, a, &nx);
  int in = st ? -1 : npu_graph_output(g, nx, 0);
  if (!st) st = npu_graph_add_op(g, "exp", "e", 1, &in, 0, NULL, &ny);
  if (!st) st = npu_options_new(ctx, &o);
  if (!st) st = npu_options_set_string(o, "op_precision_mode", path);
  if (!st) st = npu_session_new(ctx, g, o, &s);
  if (!st) st = npu_tensor_new(ctx, NPU_DTYPE_F32, 1, shape, &x);
  if (!st) {
    *(float *)npu_tensor_data(x) = x_in;
    int fetch = npu_graph_output(g, ny, 0);
    st = npu_session_run(s, 1, &in, &x, 1, &fetch, &y, 0, NULL);
  }
  if (!st) *out = *(const float *)npu_tensor_data(y);
  npu_tensor_release(y);
  npu_tensor_release(x);
  npu_session_release(s);
  npu_options_release(o);
  npu_graph_release(g);
  return st;
}

static void test_ini_errors(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"[ByOpType]\nExp=high_performance\n[ByNodeNames]\n", "line 3: unknown section '[ByNodeNames]'"},
      {"[ByOpType]\n\nExp high_performance\n", "line 3: missing '='"},
      {"[ByOpType]\nExp=high_perfomance\n", "line 2: unknown mode 'high_perfomance' for 'Exp' (did you mean 'high_performance'?)"},
      {"; a comment\n[ByOpType]\nSoftmaxV3=high_performance\n", "line 3: unknown operator type 'SoftmaxV3' (did you mean 'SoftmaxV2'?)"},
      {"Exp=high_performance\n", "line 1: entry 'Exp' before any section"},
  };
  float y;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    const char *path = write_file("bad.ini", bad[i].text);
    CHECK(exp_session(ctx, path, 1.0f, &y) == NPU_ERR_FORMAT);
    const char *msg = npu_context_errmsg(ctx);
    if (!strstr(msg, bad[i].want) || !strstr(msg, path))
      fprintf(stderr, "message: %s\nwanted: %s\n", msg, bad[i].want);
    CHECK(strstr(msg, bad[i].want) != NULL && strstr(msg, path) != NULL);
    CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
    remove(path);
  }
  CHECK(exp_session(ctx, "/nonexistent/op_precision.ini", 1.0f, &y) == NPU_ERR_IO);
  CHECK(strstr(npu_context_errmsg(ctx), "/nonexistent/op_precision.ini") != NULL);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

typedef struct exp_case {
  const char *path;
  float x, y;
} exp_case;

static npu_status exp_run(npu_context *ctx, void *ud) {
  exp_case *c = ud;
  return exp_session(ctx, c->path, c->x, &c->y);
}

/* The file's modes reach the kernel: exp by type and by node name (which wins), and a clean
   NPU_ERR_NOMEM with nothing leaked for every allocation failure along the way. */
static void test_ini_effect_and_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  float x = 1.5f, fast, precise, y;
  for (int k = 0; k < 1000; k++, x += 0x1p-20f) { /* an input where the two differ */
    run_fast(F_EXP, 1, &x, &fast);
    CHECK(npuK_unary_f32(NULL, NPUK_UN_EXP, 1, &x, &precise) == 0);
    if (fast != precise) break;
  }
  CHECK(fast != precise);
  const char *perf = write_file("perf.ini", "[ByOpType]\r\n  Exp = high_performance \r\n");
  CHECK(exp_session(ctx, perf, x, &y) == NPU_OK && y == fast);
  remove(perf); /* write_file's buffer is reused by the next call */
  const char *node = write_file("node.ini", "[ByOpType]\nexp=high_performance\n"
                                            "[ByNodeName]\ne=keep_fp16\nother=high_performance\n");
  CHECK(exp_session(ctx, node, x, &y) == NPU_OK && y == precise);
  exp_case c = {.path = node, .x = x};
  int n_failures = sweep_alloc_failures(ctx, &(scenario_def){.run = exp_run, .ud = &c});
  CHECK(n_failures > 10);
  remove(node);
  npu_context_release(ctx);
}

int main(void) {
  test_accuracy();
  test_special_values();
  test_split_and_in_place();
  test_rows();
  test_gelu_precise();
  test_ini_errors();
  test_ini_effect_and_sweep();
  return check_summary("test_fastmath");
}
