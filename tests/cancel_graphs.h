/* cancel_graphs.h: graphs that run until cancelled, and the cancel-latency measurement, shared
 * by tests/test_cancel.c and bench/bench_cancel.c (through the public API only).
 *
 * loop_graph: (i, v) = (0, ones[1024]); while i < n: (i + 1, v * 1).  n is an int32
 * placeholder: fed 2^31 - 1 the loop never ends by itself; its steps are short (microseconds),
 * so cancel is seen between steps.
 * conv_graph: (i, v) = (0, x); while i < n: (i + 1, relu(conv2d(v, f))) with x (1, hw, hw, c)
 * and f (3, 3, c, c): each iteration is one long kernel, so cancel is seen inside it, between
 * the convolution's blocks of rows.
 *
 * conv_chain_graph: k top-level relu(conv2d(., f)) steps (shapes as conv_graph's) on x * n,
 * then loop_graph's loop over the result: the convolutions are plain steps, so a session's
 * op_select_implmode = high_performance runs them as Winograd F(2x2, 3x3) (compile/implmode.c
 * picks algorithms for top-level steps), and a cancel lands inside one of them.
 *
 * measure_cancel(s, ...) runs the graph on a thread of its own, cancels it after delay_us from
 * this thread, and returns the time from the cancel call to the run's return (ms), with the
 * run's status in *status.
 */
#ifndef NPU_TESTS_CANCEL_GRAPHS_H
#define NPU_TESTS_CANCEL_GRAPHS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "include/npu.h"

#ifndef TRY
#define TRY(call)                                                                          \
  do {                                                                                     \
    npu_status st_ = (call);                                                               \
    if (st_) return st_;                                                                   \
  } while (0)
#endif

static inline double cg_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline npu_status cg_const(npu_context *ctx, npu_graph *g, const char *name, npu_dtype dt,
                                  int ndim, const int64_t *shape, double value, int *out) {
  npu_tensor *t;
  TRY(npu_tensor_new(ctx, dt, ndim, shape, &t));
  int64_t n = npu_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == NPU_DTYPE_F32) ((float *)npu_tensor_data(t))[i] = (float)value;
    else ((int32_t *)npu_tensor_data(t))[i] = (int32_t)value;
  }
  npu_attr a = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  int node;
  npu_status st = npu_graph_add_op(g, "const", name, 0, NULL, 1, &a, &node);
  npu_tensor_release(t);
  TRY(st);
  *out = npu_graph_output(g, node, 0);
  return NPU_OK;
}

/* The loop described above over the int32 scalar n (a placeholder of g); body(g, v, &v_next)
   builds the body's new v; *i_value the loop's count. */
typedef npu_status (*cg_body_fn)(npu_context *ctx, npu_graph *g, int v, int *v_next);

static inline npu_status cg_loop_over(npu_context *ctx, npu_graph *g, int n, int v0, int ndim,
                                      const int64_t *shape, cg_body_fn body, int *i_value,
                                      int *v_value) {
  int node, zero, one;
  TRY(cg_const(ctx, g, "zero", NPU_DTYPE_I32, 0, NULL, 0, &zero));
  int region;
  TRY(npu_graph_region_begin(g, &region));
  npu_attr vi[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I32},
                   {.name = "index", .type = NPU_ATTR_INT, .u.i = 0},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {NULL, 0}}};
  npu_attr vv[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "index", .type = NPU_ATTR_INT, .u.i = 1},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, ndim}}};
  TRY(npu_graph_add_op(g, "loop_var", "i", 0, NULL, 3, vi, &node));
  int i = npu_graph_output(g, node, 0);
  TRY(npu_graph_add_op(g, "loop_var", "v", 0, NULL, 3, vv, &node));
  int v = npu_graph_output(g, node, 0);
  int pred, i1, v1;
  TRY(npu_graph_add_op(g, "less", "pred", 2, (int[]){i, n}, 0, NULL, &node));
  pred = npu_graph_output(g, node, 0);
  TRY(cg_const(ctx, g, "one", NPU_DTYPE_I32, 0, NULL, 1, &one));
  TRY(npu_graph_add_op(g, "add", "i1", 2, (int[]){i, one}, 0, NULL, &node));
  i1 = npu_graph_output(g, node, 0);
  TRY(body(ctx, g, v, &v1));
  TRY(npu_graph_region_end(g, region));
  npu_attr wa = {.name = "region", .type = NPU_ATTR_INT, .u.i = region};
  int wnode;
  TRY(npu_graph_add_op(g, "while", "loop", 5, (int[]){zero, v0, pred, i1, v1}, 1, &wa, &wnode));
  *i_value = npu_graph_output(g, wnode, 0);
  *v_value = npu_graph_output(g, wnode, 1);
  return NPU_OK;
}

/* The same loop over a placeholder n made here (*n_value). */
static inline npu_status cg_loop(npu_context *ctx, npu_graph *g, int v0, int ndim,
                                 const int64_t *shape, cg_body_fn body, int *n_value,
                                 int *i_value, int *v_value) {
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {NULL, 0}}};
  int node;
  TRY(npu_graph_add_op(g, "placeholder", "n", 0, NULL, 2, ph, &node));
  *n_value = npu_graph_output(g, node, 0);
  return cg_loop_over(ctx, g, *n_value, v0, ndim, shape, body, i_value, v_value);
}

static inline npu_status cg_scale_body(npu_context *ctx, npu_graph *g, int v, int *v_next) {
  int c, node;
  TRY(cg_const(ctx, g, "c", NPU_DTYPE_F32, 0, NULL, 1, &c));
  TRY(npu_graph_add_op(g, "mul", "scaled", 2, (int[]){v, c}, 0, NULL, &node));
  *v_next = npu_graph_output(g, node, 0);
  return NPU_OK;
}

static int cg_conv_c = 32; /* channels of conv_graph's body (set before building) */
static inline npu_status cg_conv_body(npu_context *ctx, npu_graph *g, int v, int *v_next) {
  int f, node;
  int64_t fs[] = {3, 3, cg_conv_c, cg_conv_c}, strides[] = {1, 1, 1, 1};
  TRY(cg_const(ctx, g, "f", NPU_DTYPE_F32, 4, fs, 1.0 / (9.0 * cg_conv_c), &f));
  npu_attr ca[] = {{.name = "strides", .type = NPU_ATTR_INTS, .u.ints = {strides, 4}},
                   {.name = "padding", .type = NPU_ATTR_STRING, .u.s = "SAME"}};
  TRY(npu_graph_add_op(g, "conv2d", "conv", 2, (int[]){v, f}, 2, ca, &node));
  int c = npu_graph_output(g, node, 0);
  TRY(npu_graph_add_op(g, "relu", "act", 1, &c, 0, NULL, &node));
  *v_next = npu_graph_output(g, node, 0);
  return NPU_OK;
}

/* A graph and the values a run feeds and fetches. */
typedef struct cg_graph {
  npu_graph *g;
  int n, i, v;
} cg_graph;

static inline npu_status cg_loop_graph(npu_context *ctx, cg_graph *out) {
  TRY(npu_graph_new(ctx, &out->g));
  int64_t shape[] = {1024};
  int v0;
  TRY(cg_const(ctx, out->g, "v0", NPU_DTYPE_F32, 1, shape, 1, &v0));
  return cg_loop(ctx, out->g, v0, 1, shape, cg_scale_body, &out->n, &out->i, &out->v);
}

static inline npu_status cg_conv_graph(npu_context *ctx, int hw, int c, cg_graph *out) {
  TRY(npu_graph_new(ctx, &out->g));
  int64_t shape[] = {1, hw, hw, c};
  int v0;
  cg_conv_c = c;
  TRY(cg_const(ctx, out->g, "x", NPU_DTYPE_F32, 4, shape, 1, &v0));
  return cg_loop(ctx, out->g, v0, 4, shape, cg_conv_body, &out->n, &out->i, &out->v);
}

static inline npu_status cg_conv_chain_graph(npu_context *ctx, int hw, int c, int k,
                                              cg_graph *out) {
  TRY(npu_graph_new(ctx, &out->g));
  npu_graph *g = out->g;
  int64_t shape[] = {1, hw, hw, c};
  int x, n, nf, node;
  cg_conv_c = c;
  TRY(cg_const(ctx, g, "x", NPU_DTYPE_F32, 4, shape, 1, &x));
  /* x * float(n): the chain depends on the feed, so nothing folds it at compile time */
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {NULL, 0}}};
  TRY(npu_graph_add_op(g, "placeholder", "n", 0, NULL, 2, ph, &node));
  n = npu_graph_output(g, node, 0);
  npu_attr to = {.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32};
  TRY(npu_graph_add_op(g, "cast", "nf", 1, &n, 1, &to, &node));
  nf = npu_graph_output(g, node, 0);
  TRY(npu_graph_add_op(g, "mul", "xn", 2, (int[]){x, nf}, 0, NULL, &node));
  int v = npu_graph_output(g, node, 0);
  for (int i = 0; i < k; i++) TRY(cg_conv_body(ctx, g, v, &v));
  out->n = n;
  return cg_loop_over(ctx, g, n, v, 4, shape, cg_scale_body, &out->i, &out->v);
}

/* Runs the graph's loop n times (fetching i into *i_out when not NULL). */
static inline npu_status cg_run(npu_context *ctx, npu_session *s, const cg_graph *cg, int32_t n,
                                const npu_run_options *ro, int32_t *i_out) {
  npu_tensor *nt, *it = NULL;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &nt));
  *(int32_t *)npu_tensor_data(nt) = n;
  npu_status st = npu_session_run_with_options(s, ro, 1, &cg->n, &nt, 1, &cg->i, &it, 0, NULL);
  if (!st && i_out) *i_out = *(const int32_t *)npu_tensor_data(it);
  npu_tensor_release(it);
  npu_tensor_release(nt);
  return st;
}

typedef struct cg_job {
  npu_context *ctx;
  npu_session *s;
  const cg_graph *cg;
  npu_status status;
  double end_ms;
  atomic_int started; /* set by the run's first interrupt poll: the run is in progress */
} cg_job;

/* A cancel reaches only the run in progress: the measuring thread waits for this. */
static int cg_mark_started(void *ud) {
  atomic_store((atomic_int *)ud, 1);
  return 0;
}

static void *cg_run_thread(void *arg) {
  cg_job *j = arg;
  npu_run_options ro = {.interrupt = cg_mark_started, .interrupt_ud = &j->started};
  j->status = cg_run(j->ctx, j->s, j->cg, 2147483647, &ro, NULL);
  j->end_ms = cg_now_ms();
  return NULL;
}

/* by_context: npu_context_cancel instead of npu_session_cancel.  Returns the latency (ms), or
   -1 when the thread could not start. */
static inline double measure_cancel(npu_context *ctx, npu_session *s, const cg_graph *cg,
                                    long delay_us, int by_context, npu_status *status) {
  cg_job j = {.ctx = ctx, .s = s, .cg = cg};
  atomic_init(&j.started, 0);
  pthread_t t;
  *status = NPU_ERR_INTERNAL;
  if (pthread_create(&t, NULL, cg_run_thread, &j) != 0) return -1;
  struct timespec tick = {.tv_sec = 0, .tv_nsec = 100000};
  while (!atomic_load(&j.started)) nanosleep(&tick, NULL);
  struct timespec d = {.tv_sec = delay_us / 1000000, .tv_nsec = (delay_us % 1000000) * 1000};
  nanosleep(&d, NULL);
  double t0 = cg_now_ms();
  if (by_context) npu_context_cancel(ctx);
  else npu_session_cancel(s);
  pthread_join(t, NULL);
  *status = j.status;
  return j.end_ms - t0;
}

static int cg_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile (0..1) of n values (sorted in place). */
static inline double cg_quantile(double *v, int n, double q) {
  qsort(v, (size_t)n, sizeof *v, cg_cmp);
  int k = (int)(q * (n - 1) + 0.999999);
  return v[k < n ? k : n - 1];
}

#endif
