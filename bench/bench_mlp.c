/*
 * bench_mlp.c — an MLP 784-256-256-10 (dense + relu, dense + relu, dense, softmax) through the
 * C API beside a hand-written C twin over the same OpenBLAS, in one process, one thread:
 *
 *   inference at batch 1 (a game engine's frame: one input) and batch 64: npu_session_run
 *     against cblas_sgemv (batch 1) or cblas_sgemm (batch 64) + bias + relu loops + softmax;
 *   one SGD training step at batch 64 (softmax cross-entropy on one-hot labels, mean over the
 *     batch): npu_session_run of the update against a hand-fused twin (forward, backward,
 *     W -= lr x^T dy as one sgemm with alpha = -lr, beta = 1).
 *
 * Each case alternates the two sides rep by rep (so drifts of a shared machine hit both) and
 * prints medians and the ratio session / hand.  bench/mlp.lua gives the Lua-side time.
 *
 * Usage: bench_mlp [reps [threads [precision]]] (41, 1, float32): with threads = 2 the session
 * runs on two device threads (OpenBLAS at one, as the context sets it) and the twin on OpenBLAS
 * at two.  precision (or the environment's BENCH_PRECISION; the argument wins) is a
 * precision_mode value (allow_mix_precision_bf16, force_fp16, ...) or a precision_mode_v2 one
 * (mixed_bfloat16, ...) for the session; without one the session gets no options (float32, as
 * the twin).  The hand twin always computes in float32: under a reduced mode the ratio is the
 * price or gain of that mode against plain float32 C, and the printed differences are the
 * mode's rounding, not a bug.  With BENCH_TSV set, each case is one line
 * "case<TAB>name<TAB>session ms<TAB>hand ms" (for bench/versus_torch.lua).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/npu.h"
#include "bench.h"

static double (*tick)(void) = now; /* bench_clock() once main has run */

enum { IN = 784, H = 256, OUT = 10, BIG = 64, MAX_REPS = 201 };
static int reps = 41, threads = 1, tsv;
static const float LR = 0.01f;
static const int64_t dims_in[] = {IN, H, H}, dims_out[] = {H, H, OUT};

static npu_context *ctx;
static npu_options *opts;      /* the session's options: NULL, or the precision asked for */
static const char *precision;  /* its value as given, NULL for float32 */

static void die(const char *what, npu_status st) {
  fprintf(stderr, "bench_mlp: %s: %s: %s\n", what, npu_status_name(st), npu_context_errmsg(ctx));
  exit(1);
}

/* ---- the graph: placeholders x (batch, 784) and labels (batch, 10), six variables ---- */

typedef struct mlp {
  npu_graph *g;
  npu_session *s;
  int x, labels, probs, loss, train, init; /* values; train and init are nodes */
  int w[3], b[3];                         /* variable values */
  int assigns[6], n_assigns;              /* the initializers, grouped into init */
  npu_tensor *w0[3], *b0[3];              /* their initial values (the hand twin's copies) */
} mlp;

static int op(npu_graph *g, const char *name, int n_in, const int *in, int n_attr,
              const npu_attr *attrs) {
  int node;
  npu_status st = npu_graph_add_op(g, name, NULL, n_in, in, n_attr, attrs, &node);
  if (st) die(name, st);
  return node;
}

static int op1(npu_graph *g, const char *name, int n_in, const int *in, int n_attr,
               const npu_attr *attrs) {
  return npu_graph_output(g, op(g, name, n_in, in, n_attr, attrs), 0);
}

static int constant(npu_graph *g, npu_tensor *t) {
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  return op1(g, "const", 0, NULL, 1, &a);
}

static int placeholder(npu_graph *g, int64_t batch, int64_t width) {
  int64_t shape[] = {batch, width};
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 2}}};
  return op1(g, "placeholder", 0, NULL, 2, a);
}

/* A no_op running the n nodes (created after them: a control dependency comes first). */
static int group(npu_graph *g, int n, const int *nodes) {
  int node = op(g, "no_op", 0, NULL, 0, NULL);
  for (int i = 0; i < n; i++) {
    npu_status st = npu_graph_add_control(g, node, nodes[i]);
    if (st) die("group", st);
  }
  return node;
}

/* A variable holding t, its initializer an assign (grouped into init). */
static int variable(mlp *m, npu_tensor *t) {
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS,
                   .u.ints = {npu_tensor_shape(t), npu_tensor_ndim(t)}}};
  int v = op1(m->g, "variable", 0, NULL, 2, a);
  int in[] = {v, constant(m->g, t)};
  m->assigns[m->n_assigns++] = op(m->g, "assign", 2, in, 0, NULL);
  return v;
}

static void build(mlp *m, int64_t batch, int training) {
  npu_status st;
  if ((st = npu_graph_new(ctx, &m->g))) die("graph", st);
  npu_graph *g = m->g;
  m->n_assigns = 0;
  m->x = placeholder(g, batch, IN);
  int h = m->x;
  for (int l = 0; l < 3; l++) {
    int64_t ws[] = {dims_in[l], dims_out[l]}, bs[] = {dims_out[l]};
    float lim = sqrtf(6.0f / (float)(dims_in[l] + dims_out[l]));
    if ((st = npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 2, ws, -lim, lim, 10 + l, &m->w0[l])) ||
        (st = npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 1, bs, -0.1, 0.1, 20 + l, &m->b0[l])))
      die("weights", st);
    m->w[l] = variable(m, m->w0[l]);
    m->b[l] = variable(m, m->b0[l]);
    int mm[] = {h, m->w[l]};
    int ba[] = {op1(g, "matmul", 2, mm, 0, NULL), m->b[l]};
    h = op1(g, "bias_add", 2, ba, 0, NULL);
    if (l < 2) h = op1(g, "relu", 1, &h, 0, NULL);
  }
  m->probs = op1(g, "softmax", 1, &h, 0, NULL);
  m->init = group(g, m->n_assigns, m->assigns);
  m->train = -1;
  if (training) {
    m->labels = placeholder(g, batch, OUT);
    int64_t last = -1;
    npu_attr ax = {.name = "axis", .type = NPU_ATTR_INTS, .u.ints = {&last, 1}};
    int prod[] = {m->labels, op1(g, "log_softmax", 1, &h, 0, NULL)};
    int sum = op1(g, "reduce_sum", 1, (int[]){op1(g, "mul", 2, prod, 0, NULL)}, 1, &ax);
    m->loss = op1(g, "reduce_mean", 1, (int[]){op1(g, "neg", 1, &sum, 0, NULL)}, 0, NULL);
    int xs[6], dx[6];
    for (int l = 0; l < 3; l++) xs[2 * l] = m->w[l], xs[2 * l + 1] = m->b[l];
    if ((st = npu_graph_gradients(g, 1, &m->loss, NULL, 6, xs, dx))) die("gradients", st);
    npu_tensor *lr;
    int64_t none[1];
    if ((st = npu_tensor_new(ctx, NPU_DTYPE_F32, 0, none, &lr))) die("lr", st);
    *(float *)npu_tensor_data(lr) = LR;
    int lrv = constant(g, lr);
    npu_tensor_release(lr);
    int updates[6];
    for (int i = 0; i < 6; i++) { /* var = var - lr * grad, as tf.train.GradientDescentOptimizer */
      int step[] = {lrv, dx[i]};
      int sub[] = {xs[i], op1(g, "mul", 2, step, 0, NULL)};
      int as[] = {xs[i], op1(g, "sub", 2, sub, 0, NULL)};
      updates[i] = op(g, "assign", 2, as, 0, NULL);
    }
    m->train = group(g, 6, updates);
  }
  if ((st = npu_session_new(ctx, g, opts, &m->s))) die("session", st);
  if ((st = npu_session_run(m->s, 0, NULL, NULL, 0, NULL, NULL, 1, &m->init))) die("init", st);
}

static void drop(mlp *m) {
  for (int l = 0; l < 3; l++) npu_tensor_release(m->w0[l]), npu_tensor_release(m->b0[l]);
  npu_session_release(m->s);
  npu_graph_release(m->g);
}

/* ---- the hand twin ---- */

typedef struct hand {
  float *w[3], *b[3];
  float *h[3];  /* activations (batch, width): h[0], h[1] after relu, h[2] the probabilities */
  float *d[3];  /* gradients at each layer's output */
} hand;

static void hand_new(hand *t, const mlp *m, int64_t batch) {
  for (int l = 0; l < 3; l++) {
    size_t nw = (size_t)(dims_in[l] * dims_out[l]), nb = (size_t)dims_out[l];
    t->w[l] = malloc(nw * sizeof(float));
    t->b[l] = malloc(nb * sizeof(float));
    memcpy(t->w[l], npu_tensor_data(m->w0[l]), nw * sizeof(float));
    memcpy(t->b[l], npu_tensor_data(m->b0[l]), nb * sizeof(float));
    t->h[l] = malloc((size_t)(batch * dims_out[l]) * sizeof(float));
    t->d[l] = malloc((size_t)(batch * dims_out[l]) * sizeof(float));
  }
}

static void hand_free(hand *t) {
  for (int l = 0; l < 3; l++) free(t->w[l]), free(t->b[l]), free(t->h[l]), free(t->d[l]);
}

static void softmax_rows(int64_t batch, float *y) {
  for (int64_t r = 0; r < batch; r++) {
    float *row = y + r * OUT, mx = row[0], sum = 0;
    for (int j = 1; j < OUT; j++) mx = row[j] > mx ? row[j] : mx;
    for (int j = 0; j < OUT; j++) sum += row[j] = expf(row[j] - mx);
    for (int j = 0; j < OUT; j++) row[j] /= sum;
  }
}

static void hand_forward(hand *t, int64_t batch, const float *x) {
  const float *in = x;
  for (int l = 0; l < 3; l++) {
    int k = (int)dims_in[l], n = (int)dims_out[l];
    float *y = t->h[l];
    if (batch == 1) {
      memcpy(y, t->b[l], (size_t)n * sizeof *y);
      cblas_sgemv(CblasRowMajor, CblasTrans, k, n, 1.0f, t->w[l], n, in, 1, 1.0f, y, 1);
    } else {
      for (int64_t r = 0; r < batch; r++) memcpy(y + r * n, t->b[l], (size_t)n * sizeof *y);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)batch, n, k, 1.0f, in, k,
                  t->w[l], n, 1.0f, y, n);
    }
    if (l < 2)
      for (int64_t i = 0; i < batch * n; i++) y[i] = y[i] > 0 ? y[i] : 0;
    in = y;
  }
  softmax_rows(batch, t->h[2]);
}

/* One SGD step: the forward, dlogits = (p - labels) / batch, then per layer db = column sums,
   d(input) = d W^T (through relu), W -= lr in^T d as one sgemm (alpha -lr, beta 1). */
static void hand_train(hand *t, int64_t batch, const float *x, const float *labels) {
  hand_forward(t, batch, x);
  float inv = 1.0f / (float)batch;
  for (int64_t i = 0; i < batch * OUT; i++) t->d[2][i] = (t->h[2][i] - labels[i]) * inv;
  for (int l = 2; l >= 0; l--) {
    int k = (int)dims_in[l], n = (int)dims_out[l];
    const float *in = l ? t->h[l - 1] : x, *d = t->d[l];
    if (l) { /* d(input), masked by the relu, before W changes */
      float *dp = t->d[l - 1];
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)batch, k, n, 1.0f, d, n,
                  t->w[l], n, 0.0f, dp, k);
      for (int64_t i = 0; i < batch * k; i++) dp[i] = in[i] > 0 ? dp[i] : 0;
    }
    for (int j = 0; j < n; j++) {
      float s = 0;
      for (int64_t r = 0; r < batch; r++) s += d[r * n + j];
      t->b[l][j] -= LR * s;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, (int)batch, -LR, in, k, d, n, 1.0f,
                t->w[l], n);
  }
}

/* ---- the cases ---- */

static void report(const char *what, double sess, double hnd) {
  if (tsv) {
    printf("case\t%s\t%.6f\t%.6f\n", what, sess * 1e3, hnd * 1e3);
    return;
  }
  printf("  %-34s session %9.2f us   hand C %9.2f us   ratio %.2fx\n", what, sess * 1e6,
         hnd * 1e6, sess / hnd);
}

static double max_diff(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
  return m;
}

static void infer_case(int64_t batch, int iters) {
  mlp m;
  build(&m, batch, 0);
  hand t;
  hand_new(&t, &m, batch);
  npu_tensor *x, *out = NULL;
  int64_t xs[] = {batch, IN};
  npu_status st = npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 2, xs, 0, 1, 5, &x);
  if (st) die("x", st);
  const float *xd = npu_tensor_data(x);
  if ((st = npu_session_run(m.s, 1, &m.x, &x, 1, &m.probs, &out, 0, NULL))) die("run", st);
  hand_forward(&t, batch, xd);
  double diff = max_diff(npu_tensor_data(out), t.h[2], batch * OUT);
  npu_tensor_release(out);
  double ts[MAX_REPS], th[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    double t0 = tick();
    for (int i = 0; i < iters; i++) {
      npu_session_run(m.s, 1, &m.x, &x, 1, &m.probs, &out, 0, NULL);
      npu_tensor_release(out);
    }
    ts[r] = (tick() - t0) / iters;
    t0 = tick();
    openblas_set_num_threads(threads);
    for (int i = 0; i < iters; i++) hand_forward(&t, batch, xd);
    th[r] = (tick() - t0) / iters;
    openblas_set_num_threads(1);
  }
  char what[64];
  snprintf(what, sizeof what, tsv ? "mlp b%lld forward" : "inference, batch %lld:", (long long)batch);
  report(what, median(ts, reps), median(th, reps));
  if (!tsv) printf("  %-34s max |probs difference| %.2g\n", "", diff);
  npu_tensor_release(x);
  hand_free(&t);
  drop(&m);
}

static void train_case(int iters) {
  mlp m;
  build(&m, BIG, 1);
  hand t;
  hand_new(&t, &m, BIG);
  npu_tensor *x, *y;
  int64_t xs[] = {BIG, IN}, ys[] = {BIG, OUT};
  npu_status st = npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 2, xs, 0, 1, 5, &x);
  if (!st) st = npu_tensor_new(ctx, NPU_DTYPE_F32, 2, ys, &y);
  if (st) die("x", st);
  float *yd = npu_tensor_data(y);
  memset(yd, 0, sizeof(float) * BIG * OUT);
  for (int r = 0; r < BIG; r++) yd[r * OUT + (r * 7) % OUT] = 1;
  int feeds[] = {m.x, m.labels};
  npu_tensor *fv[] = {x, y};
  /* one step each from the same weights: the updated first layers agree */
  if ((st = npu_session_run(m.s, 2, feeds, fv, 0, NULL, NULL, 1, &m.train))) die("train", st);
  hand_train(&t, BIG, npu_tensor_data(x), yd);
  npu_tensor *w0 = NULL;
  if ((st = npu_session_run(m.s, 0, NULL, NULL, 1, &m.w[0], &w0, 0, NULL))) die("fetch", st);
  double diff = max_diff(npu_tensor_data(w0), t.w[0], IN * H);
  npu_tensor_release(w0);
  double ts[MAX_REPS], th[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    double t0 = tick();
    for (int i = 0; i < iters; i++) npu_session_run(m.s, 2, feeds, fv, 0, NULL, NULL, 1, &m.train);
    ts[r] = (tick() - t0) / iters;
    t0 = tick();
    openblas_set_num_threads(threads);
    for (int i = 0; i < iters; i++) hand_train(&t, BIG, npu_tensor_data(x), yd);
    th[r] = (tick() - t0) / iters;
    openblas_set_num_threads(1);
  }
  report(tsv ? "mlp b64 sgd step" : "SGD training step, batch 64:", median(ts, reps), median(th, reps));
  if (!tsv) printf("  %-34s max |W1 difference| after one step %.2g\n", "", diff);
  npu_tensor_release(x);
  npu_tensor_release(y);
  hand_free(&t);
  drop(&m);
}

/* The session options for the precision asked for: a precision_mode value, else a
   precision_mode_v2 one; NULL options when none is asked for (the session as before). */
static void precision_options(const char *mode) {
  if (!mode || !*mode) return;
  npu_status st = npu_options_new(ctx, &opts);
  if (st) die("options", st);
  if (npu_options_set_string(opts, "precision_mode", mode) &&
      (st = npu_options_set_string(opts, "precision_mode_v2", mode)))
    die("precision (neither a precision_mode nor a precision_mode_v2 value)", st);
  precision = mode;
}

int main(int argc, char **argv) {
  if (argc > 1) reps = atoi(argv[1]);
  if (argc > 2) threads = atoi(argv[2]);
  tick = bench_clock(threads);
  if (reps < 1 || reps > MAX_REPS || threads < 1 || threads > 64) {
    fprintf(stderr, "usage: bench_mlp [reps (1..%d) [threads [precision]]]\n", MAX_REPS);
    return 2;
  }
  tsv = getenv("BENCH_TSV") != NULL;
  npu_status st = npu_context_new(NULL, &ctx);
  if (st) return 1;
  precision_options(argc > 3 ? argv[3] : getenv("BENCH_PRECISION"));
  npu_context_set_n_threads(ctx, threads);
  openblas_set_num_threads(1);
  if (!tsv)
    printf("MLP 784-256-256-10, %d thread(s), medians of %d interleaved reps; session %s, hand C"
           " float32:\n", threads, reps, precision ? precision : "float32");
  infer_case(1, 400);
  infer_case(BIG, 40);
  train_case(10);
  npu_options_release(opts);
  npu_context_release(ctx);
  return 0;
}
