/*
 * bench_gemm_f32.c — our float32 GEMM tiles (kernels/gemm_f32.c, algorithm F32TILE) against
 * OpenBLAS through the same entry the matmul op runs (npuK_matmul_half_b_algo_ep, algo AUTO:
 * sgemm, or sgemv rows for few rows), one thread, in one process: interleaved rounds, medians,
 * GFLOP/s and the ratio printed.  Shapes: the MLP 784-256-256-10 training step at batch 64
 * (forward, dW = x^T dy, dx = dy W^T), a sweep of the rows m (the rule's lower end), and large
 * products (its upper end).  `bench_gemm_f32 step` runs the step's shapes alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "bench.h"

static double shape(const char *what, int ta, int tb, int64_t m, int64_t n, int64_t k) {
  float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n));
  float *c = malloc(sizeof(float) * (size_t)(m * n));
  for (int64_t i = 0; i < m * k; i++) a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (int64_t i = 0; i < k * n; i++) b[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
  void *scratch = malloc(npuK_gemm_f32_scratch_size(1, m, n, k, 1) + 64);
  enum { R = 21 };
  double t[2][R];
  int iters = (int)(3e7 / (double)(m * n * k)) + 1;
  for (int r = -2; r < R; r++)
    for (int v = 0; v < 2; v++) {
      double t0 = now();
      for (int i = 0; i < iters; i++)
        npuK_matmul_half_b_algo_ep(NULL, ta, tb, m, n, k, a, NPUK_F32, b, NPUK_F32, NULL, c,
                                   NPUK_F32, scratch, 1,
                                   v ? NPUK_GEMM_F32TILE : NPUK_GEMM_AUTO);
      if (r >= 0) t[v][r] = (now() - t0) / iters;
    }
  double f = 2.0 * (double)(m * n * k) * 1e-9, ob = median(t[0], R), ours = median(t[1], R);
  printf("%-10s %s%s %5lld x %5lld x %5lld  openblas %6.1f GF/s %8.1f us   f32tile %6.1f GF/s "
         "%8.1f us   ratio %.2f%s\n",
         what, ta ? "T" : "N", tb ? "T" : "N", (long long)m, (long long)n, (long long)k,
         f / ob, ob * 1e6, f / ours, ours * 1e6, ours / ob,
         npuK_gemm_f32_wins(m, n, k) ? "  (rule: f32tile)" : "");
  free(a), free(b), free(c), free(scratch);
  return ours / ob;
}

int main(int argc, char **argv) {
  npuK_blas_set_threads(1);
  if (!npuK_avx512f()) printf("(no AVX-512F or NPU_NO_AVX512 set: F32TILE runs as AUTO)\n");
  int step_only = argc > 1 && !strcmp(argv[1], "step");
  printf("MLP 784-256-256-10 batch 64, one thread (interleaved, medians of 21):\n");
  shape("fwd1", 0, 0, 64, 256, 784);
  shape("fwd2", 0, 0, 64, 256, 256);
  shape("fwd3", 0, 0, 64, 10, 256);
  shape("dW1", 1, 0, 784, 256, 64);
  shape("dW2", 1, 0, 256, 256, 64);
  shape("dW3", 1, 0, 256, 10, 64);
  shape("dx2", 0, 1, 64, 256, 256);
  shape("dx3", 0, 1, 64, 256, 10);
  if (step_only) return 0;
  printf("rows:\n");
  static const int64_t rows[] = {1, 2, 4, 8, 16, 32};
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) shape("rows", 0, 0, rows[i], 256, 784);
  printf("large:\n");
  shape("square", 0, 0, 512, 512, 512);
  shape("square", 0, 0, 1024, 1024, 1024);
  shape("long k", 0, 0, 64, 256, 4096);
  shape("wide", 0, 0, 256, 4096, 256);
  return 0;
}
