/*
 * bench_cnn.c — a small CNN at batch 32 through the C API beside a hand-written C twin
 * (im2col + cblas_sgemm + plain loops) in the same process, runs interleaved, medians.
 *
 * The network (NHWC, float32): x (32, 28, 28, 1) -> conv 3x3x32 SAME + bias + relu -> max_pool
 * 2x2 -> conv 3x3x64 SAME + bias + relu -> max_pool 2x2 -> reshape (32, 3136) -> dense 10.
 * "forward" fetches the logits; "train step" feeds an upstream gradient of the logits, runs
 * the backward pass (npu_graph_gradients) and an SGD update of the six variables.  The twin
 * does the same arithmetic: im2col + sgemm, bias/relu/pool loops, col2im for the input
 * gradient, sgemm for the filter gradients.
 *
 * Forward is timed for three sessions of the same graph, each beside the twin: "unfused
 * pool" (a fusion_switch_file turning ConvMaxPoolFusionPass off: the plan before that pass),
 * the default session (conv + bias + relu + max_pool as one step; op_select_implmode's
 * default, high_performance: the second convolution by Winograd F(2x2, 3x3), the first keeps
 * the direct kernel: one input channel), and "high_precision" (op_select_implmode set so:
 * both convolutions by the direct kernel, the default before issue 14).  The train step runs
 * the default session (the second layer's input gradient, a 3x3 stride-1
 * conv2d_backprop_input of 64 -> 32 channels, by Winograd too) and the high_precision one.
 * Threads: the session at 1 and 2 device threads (npu_context_set_n_threads; OpenBLAS at one
 * thread, as the context sets it); the twin with OpenBLAS at the same thread count.
 * Usage: bench_cnn [reps [threads [precision]]] (default 41; 1 and 2 threads, or only the one
 * given, 0 for both; float32).  precision (or the environment's BENCH_PRECISION; the argument
 * wins) is a precision_mode value (allow_mix_precision_bf16, force_fp16, ...) or a
 * precision_mode_v2 one (mixed_bfloat16, ...) given to the three sessions; without one they get
 * the options they had before (float32).  The twin always computes in float32, so under a
 * reduced mode its logits check allows that mode's rounding (see check_bound).  With
 * BENCH_TSV set, each case is one line "case<TAB>name<TAB>session ms<TAB>hand ms" (for
 * bench/versus_torch.lua), the logits check silent.  With BENCH_CNN_SESSION_ONLY set, the twin is not
 * run (for a profiler's view of the session alone); with BENCH_CNN_FORWARD_ONLY, no train step.
 */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "include/npu.h"
#include "bench.h"

static double (*tick)(void) = now; /* bench_clock() once main has run */

#define B 32
#define H 28
#define C1 32
#define C2 64
#define H2 14
#define H3 7
#define FLAT (H3 * H3 * C2)
#define NCLS 10

/* ---- the hand-C twin ------------------------------------------------------------------- */

typedef struct twin {
  float *x, *w1, *b1, *w2, *b2, *wd, *bd, *dlogits;
  float *col1, *a1, *p1, *col2, *a2, *p2, *logits;              /* forward */
  float *dp2, *da2, *dcol2, *dp1, *da1, *dw1, *db1, *dw2, *db2, *dwd, *dbd; /* backward */
} twin;

/* col is (n*h*w, 9*c): 3x3 SAME stride 1 im2col of x (n, h, w, c) */
static void im2col3(const float *restrict x, int n, int h, int w, int c, float *restrict col) {
  for (int b = 0; b < n; b++)
    for (int i = 0; i < h; i++)
      for (int j = 0; j < w; j++) {
        float *d = col + (((size_t)b * h + i) * w + j) * 9 * c;
        for (int ki = 0; ki < 3; ki++, d += 3 * c) {
          int ii = i + ki - 1;
          if (ii < 0 || ii >= h) {
            memset(d, 0, sizeof(float) * 3 * (size_t)c);
            continue;
          }
          const float *src = x + (((size_t)b * h + ii) * w + j - 1) * c;
          if (j > 0 && j + 1 < w) {
            for (int k = 0; k < 3 * c; k++) d[k] = src[k];
            continue;
          }
          for (int kj = 0; kj < 3; kj++) {
            int jj = j + kj - 1;
            for (int k = 0; k < c; k++) d[kj * c + k] = jj < 0 || jj >= w ? 0 : src[kj * c + k];
          }
        }
      }
}

static void col2im3(const float *restrict col, int n, int h, int w, int c, float *restrict dx) {
  memset(dx, 0, sizeof(float) * (size_t)n * h * w * c);
  for (int b = 0; b < n; b++)
    for (int i = 0; i < h; i++)
      for (int j = 0; j < w; j++) {
        const float *s = col + (((size_t)b * h + i) * w + j) * 9 * c;
        for (int ki = 0; ki < 3; ki++)
          for (int kj = 0; kj < 3; kj++, s += c) {
            int ii = i + ki - 1, jj = j + kj - 1;
            if (ii < 0 || ii >= h || jj < 0 || jj >= w) continue;
            float *d = dx + (((size_t)b * h + ii) * w + jj) * c;
            for (int k = 0; k < c; k++) d[k] += s[k];
          }
      }
}

static void bias_relu(float *restrict y, const float *restrict bias, size_t rows, int c) {
  for (size_t r = 0; r < rows; r++)
    for (int k = 0; k < c; k++) {
      float v = y[r * c + k] + bias[k];
      y[r * c + k] = v > 0 ? v : 0;
    }
}

/* 2x2 stride 2 max pool of (n, h, w, c) */
static void pool2(const float *restrict x, int n, int h, int w, int c, float *restrict y) {
  int oh = h / 2, ow = w / 2;
  for (int b = 0; b < n; b++)
    for (int i = 0; i < oh; i++)
      for (int j = 0; j < ow; j++) {
        const float *r0 = x + ((size_t)(b * h + 2 * i) * w + 2 * j) * c, *r1 = r0 + (size_t)w * c;
        float *o = y + ((size_t)(b * oh + i) * ow + j) * c;
        for (int k = 0; k < c; k++) {
          float m = r0[k], v = r0[c + k];
          m = v > m ? v : m;
          v = r1[k];
          m = v > m ? v : m;
          v = r1[c + k];
          o[k] = v > m ? v : m;
        }
      }
}

static void twin_forward(twin *t) {
  im2col3(t->x, B, H, H, 1, t->col1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B * H * H, C1, 9, 1, t->col1, 9, t->w1,
              C1, 0, t->a1, C1);
  bias_relu(t->a1, t->b1, (size_t)B * H * H, C1);
  pool2(t->a1, B, H, H, C1, t->p1);
  im2col3(t->p1, B, H2, H2, C1, t->col2);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B * H2 * H2, C2, 9 * C1, 1, t->col2,
              9 * C1, t->w2, C2, 0, t->a2, C2);
  bias_relu(t->a2, t->b2, (size_t)B * H2 * H2, C2);
  pool2(t->a2, B, H2, H2, C2, t->p2);
  for (int b = 0; b < B; b++) memcpy(t->logits + b * NCLS, t->bd, sizeof(float) * NCLS);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, NCLS, FLAT, 1, t->p2, FLAT, t->wd,
              NCLS, 1, t->logits, NCLS);
}

static void colsum(const float *d, int rows, int c, float *out) {
  memset(out, 0, sizeof(float) * (size_t)c);
  for (int r = 0; r < rows; r++)
    for (int k = 0; k < c; k++) out[k] += d[(size_t)r * c + k];
}

/* dy (n, h/2, w/2, c) of a 2x2 pool of a = relu(..) (n, h, w, c) to its window's first
   maximum, masked by the relu (a winner > 0 passed it) */
static void unpool_relu(const float *restrict dy, const float *restrict a, const float *restrict y,
                        int n, int h, int w, int c, float *restrict da) {
  memset(da, 0, sizeof(float) * (size_t)n * h * w * c);
  int oh = h / 2, ow = w / 2;
  for (int b = 0; b < n; b++)
    for (int i = 0; i < oh; i++)
      for (int j = 0; j < ow; j++) {
        size_t o = ((size_t)(b * oh + i) * ow + j) * c, at = ((size_t)(b * h + 2 * i) * w + 2 * j) * c;
        size_t off[4] = {at, at + c, at + (size_t)w * c, at + (size_t)w * c + c};
        for (int k = 0; k < c; k++) {
          if (!(y[o + k] > 0)) continue;
          for (int q = 0; q < 4; q++)
            if (a[off[q] + k] == y[o + k]) {
              da[off[q] + k] = dy[o + k];
              break;
            }
        }
      }
}

static void sgd(float *w, const float *g, int n) {
  for (int i = 0; i < n; i++) w[i] -= 0.01f * g[i];
}

static void twin_train(twin *t) {
  twin_forward(t);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, FLAT, NCLS, B, 1, t->p2, FLAT, t->dlogits,
              NCLS, 0, t->dwd, NCLS);
  colsum(t->dlogits, B, NCLS, t->dbd);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, FLAT, NCLS, 1, t->dlogits, NCLS, t->wd,
              NCLS, 0, t->dp2, FLAT);
  unpool_relu(t->dp2, t->a2, t->p2, B, H2, H2, C2, t->da2);
  colsum(t->da2, B * H2 * H2, C2, t->db2);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 9 * C1, C2, B * H2 * H2, 1, t->col2,
              9 * C1, t->da2, C2, 0, t->dw2, C2);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B * H2 * H2, 9 * C1, C2, 1, t->da2, C2,
              t->w2, C2, 0, t->dcol2, 9 * C1);
  col2im3(t->dcol2, B, H2, H2, C1, t->dp1);
  unpool_relu(t->dp1, t->a1, t->p1, B, H, H, C1, t->da1);
  colsum(t->da1, B * H * H, C1, t->db1);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 9, C1, B * H * H, 1, t->col1, 9, t->da1,
              C1, 0, t->dw1, C1);
  sgd(t->w1, t->dw1, 9 * C1);
  sgd(t->b1, t->db1, C1);
  sgd(t->w2, t->dw2, 9 * C1 * C2);
  sgd(t->b2, t->db2, C2);
  sgd(t->wd, t->dwd, FLAT * NCLS);
  sgd(t->bd, t->dbd, NCLS);
}

static float *fill(size_t n, unsigned *seed, float scale) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = scale * ((float)(*seed >> 8) / 16777216.0f * 2 - 1);
  }
  return p;
}

/* ---- the session ------------------------------------------------------------------------ */

typedef struct net {
  npu_context *ctx;
  npu_graph *g;
  npu_session *s, *s_unfused, *s_precise; /* default (Winograd), pool unfused, high_precision */
  int x, dlogits, logits;
  int inits[6], updates[6];
} net;

static int fail(npu_context *ctx, const char *what, npu_status st) {
  fprintf(stderr, "bench_cnn: %s: %s: %s\n", what, npu_status_name(st), npu_context_errmsg(ctx));
  return 1;
}

static const char *precision; /* the precision asked for, NULL for float32 */

/* New options for one of the sessions, the precision asked for set in them: a precision_mode
   value, else a precision_mode_v2 one.  Always a set (possibly empty), so each session's
   options are built the same way. */
static npu_status session_options(npu_context *ctx, npu_options **o) {
  npu_status st = npu_options_new(ctx, o);
  if (st || !precision) return st;
  if (npu_options_set_string(*o, "precision_mode", precision) &&
      (st = npu_options_set_string(*o, "precision_mode_v2", precision))) {
    npu_options_release(*o);
    *o = NULL;
  }
  return st;
}

/* How far the session's logits may be from the float32 twin's, relative to (peak + 1): float32
   rounding (1e-6; Winograd's transforms 1e-4), or under a reduced precision that format's:
   bfloat16 keeps 8 significant bits (relative step 2^-8 = 3.9e-3), float16 11 (2^-11), and
   each layer's inputs and output are rounded to it, so allow a few steps. */
/* winograd: the session's second convolution runs Winograd (the default mode) */
static double check_bound(int winograd) {
  if (precision && strstr(precision, "bf16")) return 3e-2;
  if (precision && strstr(precision, "bfloat16")) return 3e-2;
  if (precision && (strstr(precision, "fp16") || strstr(precision, "float16"))) return 5e-3;
  return winograd ? 1e-4 : 1e-6;
}

#define OP(name, n_in, ins, n_at, ats) \
  if ((st = npu_graph_add_op(g, name, NULL, n_in, ins, n_at, ats, &node))) return fail(ctx, name, st)

static int add_var(net *n, const float *init, int ndim, const int64_t *shape, int *value) {
  npu_graph *g = n->g;
  npu_context *ctx = n->ctx;
  npu_status st;
  int node, var;
  npu_attr va[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, ndim}}};
  OP("variable", 0, NULL, 2, va);
  var = npu_graph_output(g, node, 0);
  npu_tensor *t;
  if ((st = npu_tensor_new(ctx, NPU_DTYPE_F32, ndim, shape, &t))) return fail(ctx, "tensor", st);
  memcpy(npu_tensor_data(t), init, npu_tensor_nbytes(t));
  npu_attr ca[] = {{.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t}};
  OP("const", 0, NULL, 1, ca);
  npu_tensor_release(t);
  int in[] = {var, npu_graph_output(g, node, 0)};
  OP("assign", 2, in, 0, NULL);
  *value = var;
  return 0;
}

static int build(net *n, const twin *t) {
  npu_context *ctx = n->ctx;
  npu_status st;
  if ((st = npu_graph_new(ctx, &n->g))) return fail(ctx, "graph", st);
  npu_graph *g = n->g;
  int node;
  int64_t xs[] = {B, H, H, 1}, ds[] = {B, NCLS};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 4}}};
  OP("placeholder", 0, NULL, 2, ph);
  n->x = npu_graph_output(g, node, 0);
  ph[1].u.ints.v = ds;
  ph[1].u.ints.n = 2;
  OP("placeholder", 0, NULL, 2, ph);
  n->dlogits = npu_graph_output(g, node, 0);
  int64_t s_w1[] = {3, 3, 1, C1}, s_b1[] = {C1}, s_w2[] = {3, 3, C1, C2}, s_b2[] = {C2},
          s_wd[] = {FLAT, NCLS}, s_bd[] = {NCLS};
  int v[6];
  const float *inits[] = {t->w1, t->b1, t->w2, t->b2, t->wd, t->bd};
  const int64_t *shapes[] = {s_w1, s_b1, s_w2, s_b2, s_wd, s_bd};
  const int ndims[] = {4, 1, 4, 1, 2, 1};
  for (int i = 0; i < 6; i++) {
    if (add_var(n, inits[i], ndims[i], shapes[i], &v[i])) return 1;
    n->inits[i] = npu_graph_n_nodes(g) - 1;
  }
  npu_attr conv[] = {{.name = "padding", .type = NPU_ATTR_STRING, .u.s = "SAME"}};
  int64_t two = 2;
  npu_attr pool[] = {{.name = "ksize", .type = NPU_ATTR_INTS, .u.ints = {&two, 1}},
                     {.name = "strides", .type = NPU_ATTR_INTS, .u.ints = {&two, 1}},
                     {.name = "padding", .type = NPU_ATTR_STRING, .u.s = "VALID"}};
  int h = n->x;
  for (int l = 0; l < 2; l++) {
    int in[] = {h, v[2 * l]};
    OP("conv2d", 2, in, 1, conv);
    int bi[] = {npu_graph_output(g, node, 0), v[2 * l + 1]};
    OP("bias_add", 2, bi, 0, NULL);
    int ri[] = {npu_graph_output(g, node, 0)};
    OP("relu", 1, ri, 0, NULL);
    int pi[] = {npu_graph_output(g, node, 0)};
    OP("max_pool", 1, pi, 3, pool);
    h = npu_graph_output(g, node, 0);
  }
  int64_t flat[] = {B, FLAT};
  npu_attr ra[] = {{.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {flat, 2}}};
  OP("reshape", 1, &h, 1, ra);
  int mi[] = {npu_graph_output(g, node, 0), v[4]};
  OP("matmul", 2, mi, 0, NULL);
  int bi[] = {npu_graph_output(g, node, 0), v[5]};
  OP("bias_add", 2, bi, 0, NULL);
  n->logits = npu_graph_output(g, node, 0);

  int dv[6];
  if ((st = npu_graph_gradients(g, 1, &n->logits, &n->dlogits, 6, v, dv)))
    return fail(ctx, "gradients", st);
  npu_tensor *lr;
  int64_t one = 1;
  if ((st = npu_tensor_new(ctx, NPU_DTYPE_F32, 0, &one, &lr))) return fail(ctx, "lr", st);
  *(float *)npu_tensor_data(lr) = 0.01f;
  npu_attr ca[] = {{.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = lr}};
  OP("const", 0, NULL, 1, ca);
  npu_tensor_release(lr);
  int lr_v = npu_graph_output(g, node, 0);
  for (int i = 0; i < 6; i++) {
    int mi2[] = {dv[i], lr_v};
    OP("mul", 2, mi2, 0, NULL);
    int si[] = {v[i], npu_graph_output(g, node, 0)};
    OP("sub", 2, si, 0, NULL);
    int ai[] = {v[i], npu_graph_output(g, node, 0)};
    OP("assign", 2, ai, 0, NULL);
    n->updates[i] = node;
  }
  npu_options *o;
  if ((st = session_options(ctx, &o))) return fail(ctx, "precision", st);
  st = npu_session_new(ctx, g, o, &n->s);
  npu_options_release(o);
  if (st) return fail(ctx, "session", st);
  if ((st = npu_session_run(n->s, 0, NULL, NULL, 0, NULL, NULL, 6, n->inits)))
    return fail(ctx, "init", st);
  /* the variables live in the context's resources: the other sessions share them */
  char path[64];
  snprintf(path, sizeof path, "/tmp/bench_cnn_%ld.json", (long)getpid());
  FILE *fp = fopen(path, "w");
  if (!fp) return fail(ctx, "switch file", NPU_ERR_IO);
  fputs("{\"Switch\":{\"GraphFusion\":{\"ConvMaxPoolFusionPass\":\"off\"}}}", fp);
  fclose(fp);
  if ((st = session_options(ctx, &o))) return fail(ctx, "options", st);
  if (!(st = npu_options_set_string(o, "fusion_switch_file", path)))
    st = npu_session_new(ctx, g, o, &n->s_unfused);
  remove(path);
  npu_options_release(o);
  if (!st) st = npu_session_run(n->s_unfused, 0, NULL, NULL, 0, NULL, NULL, 6, n->inits);
  if (st) return fail(ctx, "session (pool unfused)", st);
  if ((st = session_options(ctx, &o))) return fail(ctx, "options", st);
  if (!(st = npu_options_set_string(o, "op_select_implmode", "high_precision")))
    st = npu_session_new(ctx, g, o, &n->s_precise);
  npu_options_release(o);
  if (!st) st = npu_session_run(n->s_precise, 0, NULL, NULL, 0, NULL, NULL, 6, n->inits);
  if (st) return fail(ctx, "session (high_precision)", st);
  return 0;
}

#define N_MODES 2 /* forward, train step */

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 41, only_threads = argc > 2 ? atoi(argv[2]) : 0;
  tick = bench_clock(only_threads);
  if (reps < 1) reps = 1;
  precision = argc > 3 ? argv[3] : getenv("BENCH_PRECISION");
  if (precision && !*precision) precision = NULL;
  int tsv = getenv("BENCH_TSV") != NULL;
  unsigned seed = 12345;
  twin t = {0};
  t.x = fill((size_t)B * H * H, &seed, 1);
  t.w1 = fill(9 * C1, &seed, 0.3f);
  t.b1 = fill(C1, &seed, 0.1f);
  t.w2 = fill(9 * C1 * C2, &seed, 0.06f);
  t.b2 = fill(C2, &seed, 0.1f);
  t.wd = fill((size_t)FLAT * NCLS, &seed, 0.02f);
  t.bd = fill(NCLS, &seed, 0.1f);
  t.dlogits = fill(B * NCLS, &seed, 1.0f / B);
  t.col1 = malloc(sizeof(float) * B * H * H * 9);
  t.a1 = malloc(sizeof(float) * B * H * H * C1);
  t.p1 = malloc(sizeof(float) * B * H2 * H2 * C1);
  t.col2 = malloc(sizeof(float) * B * H2 * H2 * 9 * C1);
  t.a2 = malloc(sizeof(float) * B * H2 * H2 * C2);
  t.p2 = malloc(sizeof(float) * B * FLAT);
  t.logits = malloc(sizeof(float) * B * NCLS);
  t.dp2 = malloc(sizeof(float) * B * FLAT);
  t.da2 = malloc(sizeof(float) * B * H2 * H2 * C2);
  t.dcol2 = malloc(sizeof(float) * B * H2 * H2 * 9 * C1);
  t.dp1 = malloc(sizeof(float) * B * H2 * H2 * C1);
  t.da1 = malloc(sizeof(float) * B * H * H * C1);
  t.dw1 = malloc(sizeof(float) * 9 * C1);
  t.db1 = malloc(sizeof(float) * C1);
  t.dw2 = malloc(sizeof(float) * 9 * C1 * C2);
  t.db2 = malloc(sizeof(float) * C2);
  t.dwd = malloc(sizeof(float) * FLAT * NCLS);
  t.dbd = malloc(sizeof(float) * NCLS);

  net n = {0};
  if (npu_context_new(NULL, &n.ctx)) return 1;
  if (build(&n, &t)) return 1;
  npu_status st;
  npu_tensor *xt, *dt;
  int64_t xs[] = {B, H, H, 1}, ds[] = {B, NCLS};
  if ((st = npu_tensor_new(n.ctx, NPU_DTYPE_F32, 4, xs, &xt))) return fail(n.ctx, "x", st);
  if ((st = npu_tensor_new(n.ctx, NPU_DTYPE_F32, 2, ds, &dt))) return fail(n.ctx, "dy", st);
  memcpy(npu_tensor_data(xt), t.x, npu_tensor_nbytes(xt));
  memcpy(npu_tensor_data(dt), t.dlogits, npu_tensor_nbytes(dt));
  int feeds_v[] = {n.x, n.dlogits};
  npu_tensor *feeds[] = {xt, dt};

  /* the logits agree with the twin's: bit for bit without Winograd (high_precision) where
     OpenBLAS runs FMA kernels (the same sgemm calls on the same rows, the first layer's small-k
     product the same fma chains; the pool is exact), within rounding otherwise */
  twin_forward(&t);
  npu_session *sessions[] = {n.s_unfused, n.s, n.s_precise};
  const char *names[] = {"forward, pool unfused", "forward", "forward, high_precision"};
  if (!tsv)
    printf("bench_cnn: 28x28x1 -> conv3x3x32+relu -> pool2 -> conv3x3x64+relu -> pool2 -> dense10,"
           " batch %d; sessions %s, hand C float32\n", B, precision ? precision : "float32");
  for (int k = 0; k < 3; k++) {
    npu_tensor *out = NULL;
    if ((st = npu_session_run(sessions[k], 1, feeds_v, feeds, 1, &n.logits, &out, 0, NULL)))
      return fail(n.ctx, names[k], st);
    double err = 0, peak = 0;
    for (int i = 0; i < B * NCLS; i++) {
      double d = fabs((double)((float *)npu_tensor_data(out))[i] - t.logits[i]);
      err = d > err ? d : err;
      peak = fabs(t.logits[i]) > peak ? fabs(t.logits[i]) : peak;
    }
    npu_tensor_release(out);
    if (!tsv)
      printf("logits, %s: largest difference from the hand C twin %.2e (peak %.2f)\n", names[k],
             err, peak);
    if (err > check_bound(k < 2) * (peak + 1)) {
      fprintf(stderr, "bench_cnn: the session and the twin disagree\n");
      return 1;
    }
  }

  if (getenv("BENCH_CNN_EXPLAIN")) { /* the plans' steps, one a line */
    for (int mode = 0; mode < N_MODES; mode++) {
      char *json = NULL;
      st = mode ? npu_session_explain(n.s, 2, feeds_v, feeds, 0, NULL, 6, n.updates, &json)
                : npu_session_explain(n.s, 1, feeds_v, feeds, 1, &n.logits, 0, NULL, &json);
      if (st) return fail(n.ctx, "explain", st);
      printf("%s plan: %s\n", mode ? "train" : "forward", json);
      npu_free(n.ctx, json);
    }
  }
  int max_threads = npu_context_n_threads(n.ctx), twin_too = !getenv("BENCH_CNN_SESSION_ONLY");
  if (!tsv) printf("%-22s %7s %10s %10s %9s\n", "mode", "threads", "session ms", "hand C ms", "ratio");
  double *tc = malloc(sizeof(double) * (size_t)reps), *ts[3];
  for (int k = 0; k < 3; k++) ts[k] = malloc(sizeof(double) * (size_t)reps);
  int n_modes = getenv("BENCH_CNN_FORWARD_ONLY") ? 1 : N_MODES;
  npu_tensor *out = NULL;
  for (int mode = 0; mode < n_modes; mode++)
    for (int threads = 1; threads <= (max_threads < 2 ? max_threads : 2); threads++) {
      if (only_threads > 0 && threads != only_threads) continue;
      npu_context_set_n_threads(n.ctx, threads);
      int n_sess = mode == 0 ? 3 : 2;
      for (int r = -3; r < reps; r++) { /* three warm-ups */
        openblas_set_num_threads(threads);
        double t0 = tick();
        if (twin_too && mode == 0) twin_forward(&t);
        else if (twin_too) twin_train(&t);
        double t1 = tick();
        openblas_set_num_threads(1);
        if (r >= 0) tc[r] = t1 - t0;
        for (int k = 0; k < n_sess; k++) { /* train: the default and high_precision sessions */
          double t2 = tick();
          if (mode == 0) {
            st = npu_session_run(sessions[k], 1, feeds_v, feeds, 1, &n.logits, &out, 0, NULL);
            npu_tensor_release(out);
          } else {
            st = npu_session_run(k ? n.s_precise : n.s, 2, feeds_v, feeds, 0, NULL, NULL, 6,
                                 n.updates);
          }
          if (st) return fail(n.ctx, "run", st);
          if (r >= 0) ts[k][r] = tick() - t2;
        }
      }
      double mc = median(tc, reps) * 1e3;
      for (int k = 0; k < n_sess; k++) {
        double ms = median(ts[k], reps) * 1e3;
        if (tsv) {
          static const char *tsv_names[] = {"cnn b32 forward, pool unfused", "cnn b32 forward",
                                            "cnn b32 forward, high_precision"};
          printf("case\t%s\t%.6f\t%.6f\n",
                 mode ? (k ? "cnn b32 train step, high_precision" : "cnn b32 train step") : tsv_names[k],
                 ms, mc);
          continue;
        }
        printf("%-22s %7d %10.3f %10.3f %8.2fx\n",
               mode ? (k ? "train step, high_precision" : "train step") : names[k], threads, ms, mc,
               ms / mc);
      }
    }
  for (int k = 0; k < 3; k++) free(ts[k]);
  free(tc);
  npu_tensor_release(xt);
  npu_tensor_release(dt);
  npu_session_release(n.s);
  npu_session_release(n.s_unfused);
  npu_session_release(n.s_precise);
  npu_graph_release(n.g);
  npu_context_release(n.ctx);
  return 0;
}
