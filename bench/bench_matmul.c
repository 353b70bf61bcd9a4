/*
 * bench_matmul.c — a 1024x1024x1024 float32 matmul run as a one-node graph in a session,
 * against cblas_sgemm called directly on the same buffers.  One process, the same OpenBLAS,
 * several repetitions, medians; prints the ratio (session throughput / raw throughput).
 *
 * Also: the cost of npu_session_run for a one-node graph from C (no Lua).
 *
 * Then (`bench_matmul bf16` runs this part alone) the GEMMs of the MLP 784-256-256-10 at batch
 * 64 (forward, and the gradient products with their transposes) and at batch 1, on one thread:
 * bfloat16 A and B computed as stored (npuK_gemm_bf16_ep, VDPBF16PS: algo BF16DOT), the same
 * bfloat16 operands widened by blocks for sgemm / sgemv (the path without AVX512_BF16, algo
 * AUTO), and float32 sgemm on float32 operands; C float32.  Interleaved rounds, medians, the
 * ratios printed; last, the peak of VDPBF16PS and of float32 FMA on one core (bench_peak).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/npu.h"
#include "kernels/kernels.h"
#include "bench.h"

#define REPS 15
#define N 1024

static int fail(npu_context *ctx, const char *what, npu_status st) {
  fprintf(stderr, "bench_matmul: %s: %s: %s\n", what, npu_status_name(st), npu_context_errmsg(ctx));
  return 1;
}

/* one GEMM shape: bf16 native, bf16 widening, float32 sgemm */
static void bf16_shape(const char *what, int ta, int tb, int64_t m, int64_t n, int64_t k,
                       double *tot) {
  float *af = malloc(sizeof(float) * (size_t)(m * k)), *bf = malloc(sizeof(float) * (size_t)(k * n));
  uint16_t *ah = malloc(2 * (size_t)(m * k)), *bh = malloc(2 * (size_t)(k * n));
  float *c = malloc(sizeof(float) * (size_t)(m * n));
  for (int64_t i = 0; i < m * k; i++) af[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (int64_t i = 0; i < k * n; i++) bf[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
  npuK_cast(NULL, m * k, NPUK_F32, af, NPUK_BF16, ah);
  npuK_cast(NULL, k * n, NPUK_F32, bf, NPUK_BF16, bh);
  size_t s1 = npuK_gemm_bf16_scratch_size(ta, tb, m, n, k, 1);
  size_t s2 = npuK_matmul_half_b_scratch_size(m, n, k, 1, NPUK_BF16, NPUK_BF16, NPUK_F32,
                                              NPUK_GEMM_AUTO);
  float *scratch = malloc((s1 > s2 ? s1 : s2) + 64);
  enum { R = 31 };
  double t[3][R];
  int iters = (int)(2e7 / (double)(m * n * k)) + 1;
  for (int r = -2; r < R; r++)
    for (int v = 0; v < 3; v++) {
      double t0 = now();
      for (int i = 0; i < iters; i++) {
        if (v == 0) npuK_gemm_bf16_ep(NULL, ta, tb, m, n, k, ah, bh, NULL, c, NPUK_F32, scratch, 1);
        else if (v == 1)
          npuK_matmul_half_b_algo_ep(NULL, ta, tb, m, n, k, ah, NPUK_BF16, bh, NPUK_BF16, NULL, c,
                                     NPUK_F32, scratch, 1, NPUK_GEMM_AUTO);
        else npuK_matmul_f32_blas(NULL, ta, tb, m, n, k, af, bf, c);
      }
      if (r >= 0) t[v][r] = (now() - t0) / iters;
    }
  double md[3], fl = 2.0 * (double)(m * n * k);
  for (int v = 0; v < 3; v++) tot[v] += md[v] = median(t[v], R);
  printf("  %-22s %4lldx%4lldx%4lld %c%c  %8.1f %8.1f %8.1f us  %6.1f %6.1f %6.1f GFLOP/s"
         "  native/widen %.2f  native/f32 %.2f\n",
         what, (long long)m, (long long)n, (long long)k, ta ? 'T' : 'N', tb ? 'T' : 'N',
         md[0] * 1e6, md[1] * 1e6, md[2] * 1e6, fl / md[0] * 1e-9, fl / md[1] * 1e-9,
         fl / md[2] * 1e-9, md[0] / md[1], md[0] / md[2]);
  free(af), free(bf), free(ah), free(bh), free(c), free(scratch);
}

/* The instructions' own peak on one core, for the GEMM figures to be read against: VDPBF16PS
   (32 products and 32 adds a zmm) and float32 VFMADD231PS (16 and 16) on 12 independent
   register chains, nothing loaded; GFLOP/s of CPU time, medians of interleaved rounds. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define PEAK_CHAINS 12
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), noinline)) static float
peak_dpbf16(long n) {
  __m512 acc[PEAK_CHAINS];
  __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = a; /* 1.0 pairs: no overflow */
  for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_setzero_ps();
  for (long r = 0; r < n; r++)
#pragma GCC unroll 12
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  float s = 0;
  for (int i = 0; i < PEAK_CHAINS; i++) s += _mm512_reduce_add_ps(acc[i]);
  return s;
}
__attribute__((target("avx512f,fma"), noinline)) static float peak_fma(long n) {
  __m512 acc[PEAK_CHAINS], a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-9f);
  for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_setzero_ps();
  for (long r = 0; r < n; r++)
#pragma GCC unroll 12
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
  float s = 0;
  for (int i = 0; i < PEAK_CHAINS; i++) s += _mm512_reduce_add_ps(acc[i]);
  return s;
}
static void bench_peak(void) {
  if (!npuK_bf16dot()) return; /* AVX512_BF16 absent (or turned off): nothing to measure */
  enum { R = 15 };
  const long n = 2000000;
  double t[2][R];
  volatile float sink = 0;
  for (int r = 0; r < R; r++) { /* this thread's CPU time: the core's, whoever else shares the
                                   machine or the process (see bench_clock) */
    double t0 = thread_cpu_now();
    sink += peak_dpbf16(n);
    t[0][r] = thread_cpu_now() - t0;
    t0 = thread_cpu_now();
    sink += peak_fma(n);
    t[1][r] = thread_cpu_now() - t0;
  }
  double flops = (double)n * PEAK_CHAINS, bf = flops * 64 / median(t[0], R) * 1e-9,
         f32 = flops * 32 / median(t[1], R) * 1e-9;
  printf("  peak, one core, registers only: VDPBF16PS %.0f GFLOP/s, float32 FMA %.0f GFLOP/s "
         "(%.2fx)\n", bf, f32, bf / f32);
  (void)sink;
}
#else
static void bench_peak(void) {}
#endif

static void bench_bf16(void) {
  openblas_set_num_threads(1);
  printf("MLP 784-256-256-10 GEMMs, one thread, C float32 (native bf16 = VDPBF16PS: %s):\n",
         npuK_bf16dot() ? "yes" : "no, the twin");
  printf("  %-22s %14s %3s  %8s %8s %8s\n", "product", "m x n x k", "", "native", "widen",
         "f32");
  static const struct {
    const char *what;
    int ta, tb;
    int64_t m, n, k;
  } sh[] = {{"fwd 1", 0, 0, 64, 256, 784},    {"fwd 2", 0, 0, 64, 256, 256},
            {"fwd 3", 0, 0, 64, 10, 256},     {"dX3 = dY W3^T", 0, 1, 64, 256, 10},
            {"dW3 = H2^T dY", 1, 0, 256, 10, 64}, {"dX2 = dY W2^T", 0, 1, 64, 256, 256},
            {"dW2 = H1^T dY", 1, 0, 256, 256, 64}, {"dW1 = X^T dY", 1, 0, 784, 256, 64},
            {"batch 1: fwd 1", 0, 0, 1, 256, 784}, {"batch 1: fwd 2", 0, 0, 1, 256, 256},
            {"batch 1: fwd 3", 0, 0, 1, 10, 256}};
  double tot[3] = {0}, tot1[3] = {0};
  for (size_t i = 0; i < sizeof sh / sizeof *sh; i++)
    bf16_shape(sh[i].what, sh[i].ta, sh[i].tb, sh[i].m, sh[i].n, sh[i].k,
               sh[i].m == 1 ? tot1 : tot);
  printf("  batch 64 step's 8 GEMMs: native %.1f us, widen %.1f us, f32 %.1f us: "
         "native/widen %.2f, native/f32 %.2f\n",
         tot[0] * 1e6, tot[1] * 1e6, tot[2] * 1e6, tot[0] / tot[1], tot[0] / tot[2]);
  printf("  batch 1 forward's 3 GEMMs: native %.1f us, widen %.1f us, f32 %.1f us: "
         "native/widen %.2f, native/f32 %.2f\n",
         tot1[0] * 1e6, tot1[1] * 1e6, tot1[2] * 1e6, tot1[0] / tot1[1], tot1[0] / tot1[2]);
  bench_peak();
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "bf16")) {
    bench_bf16();
    return 0;
  }
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
  bench_bf16();
  return 0;
}
