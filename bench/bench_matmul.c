/*
 * bench_matmul.c — a 1024x1024x1024 float32 matmul run as a one-node graph in a session,
 * against cblas_sgemm called directly on the same buffers.  One process, the same OpenBLAS,
 * several repetitions, medians; prints the ratio (session throughput / raw throughput).
 *
 * Also: the cost of npu_session_run for a one-node graph from C (no Lua).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/npu.h"
#include "bench.h"

#define REPS 15
#define N 1024

static int fail(npu_context *ctx, const char *what, npu_status st) {
  fprintf(stderr, "bench_matmul: %s: %s: %s\n", what, npu_status_name(st), npu_context_errmsg(ctx));
  return 1;
}

int main(void) {
  npu_context *ctx;
  if (npu_context_new(NULL, &ctx)) return 1;
  npu_graph *g;
  npu_tensor *a, *b, *out = NULL;
  npu_status st;
  if ((st = npu_graph_new(ctx, &g))) return fail(ctx, "graph", st);
  int64_t shape[] = {N, N};
  if ((st = npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 2, shape, -1, 1, 1, &a))) return fail(ctx, "a", st);
  if ((st = npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 2, shape, -1, 1, 2, &b))) return fail(ctx, "b", st);
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 2}}};
  int na, nb, nm;
  npu_graph_add_op(g, "placeholder", "a", 0, NULL, 2, ph, &na);
  npu_graph_add_op(g, "placeholder", "b", 0, NULL, 2, ph, &nb);
  int in[] = {npu_graph_output(g, na, 0), npu_graph_output(g, nb, 0)};
  if ((st = npu_graph_add_op(g, "matmul", NULL, 2, in, 0, NULL, &nm))) return fail(ctx, "matmul", st);
  npu_session *s;
  if ((st = npu_session_new(ctx, g, NULL, &s))) return fail(ctx, "session", st);
  int fetch = npu_graph_output(g, nm, 0);
  npu_tensor *feeds[] = {a, b};

  float *c = malloc(sizeof(float) * N * N);
  /* Raw OpenBLAS gets as many threads as the device pool (the context set it to 1). */
  int threads = npu_context_n_threads(ctx);
  double t_raw[REPS], t_sess[REPS];
  /* warm up both, then interleave so drifts in clock speed hit both alike */
  openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, npu_tensor_data(a), N,
              npu_tensor_data(b), N, 0.0f, c, N);
  openblas_set_num_threads(1);
  if ((st = npu_session_run(s, 2, in, feeds, 1, &fetch, &out, 0, NULL))) return fail(ctx, "run", st);
  npu_tensor_release(out);
  for (int r = 0; r < REPS; r++) {
    openblas_set_num_threads(threads);
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, npu_tensor_data(a), N,
                npu_tensor_data(b), N, 0.0f, c, N);
    t_raw[r] = now() - t0;
    openblas_set_num_threads(1);
    t0 = now();
    st = npu_session_run(s, 2, in, feeds, 1, &fetch, &out, 0, NULL);
    t_sess[r] = now() - t0;
    if (st) return fail(ctx, "run", st);
    npu_tensor_release(out);
  }
  double raw = median(t_raw, REPS), sess = median(t_sess, REPS);
  double flops = 2.0 * N * N * N;
  printf("matmul %dx%dx%d float32, %d threads on both sides, median of %d:\n", N, N, N,
         threads, REPS);
  printf("  raw cblas_sgemm      %8.3f ms  %7.1f GFLOP/s\n", raw * 1e3, flops / raw * 1e-9);
  printf("  npu session run      %8.3f ms  %7.1f GFLOP/s\n", sess * 1e3, flops / sess * 1e-9);
  printf("  ratio session/raw throughput: %.3f\n", raw / sess);

  /* per-run overhead of a one-node graph from C: relu of a 1-element placeholder */
  npu_graph *g2;
  npu_graph_new(ctx, &g2);
  int64_t one[] = {1};
  npu_attr ph1[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                    {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {one, 1}}};
  int nx, nr;
  npu_graph_add_op(g2, "placeholder", "x", 0, NULL, 2, ph1, &nx);
  int xin = npu_graph_output(g2, nx, 0);
  npu_graph_add_op(g2, "relu", NULL, 1, &xin, 0, NULL, &nr);
  npu_session *s2;
  npu_session_new(ctx, g2, NULL, &s2);
  npu_tensor *x1;
  npu_tensor_new(ctx, NPU_DTYPE_F32, 1, one, &x1);
  int f2 = npu_graph_output(g2, nr, 0);
  double per[REPS];
  const int iters = 200000;
  for (int r = 0; r < REPS; r++) {
    double t0 = now();
    for (int i = 0; i < iters; i++) {
      npu_session_run(s2, 1, &xin, &x1, 1, &f2, &out, 0, NULL);
      npu_tensor_release(out);
    }
    per[r] = (now() - t0) / iters;
  }
  printf("one-node graph (relu of a fed [1] tensor), C API: %.3f us per run (median of %d x %d)\n",
         median(per, REPS) * 1e6, REPS, iters);

  npu_tensor_release(x1);
  npu_session_release(s2);
  npu_graph_release(g2);
  free(c);
  npu_session_release(s);
  npu_tensor_release(a);
  npu_tensor_release(b);
  npu_graph_release(g);
  npu_context_release(ctx);
  return 0;
}
