/*
 * bench_winograd.c — Winograd F(2x2, 3x3) (kernels/winograd.c) against the direct kernel
 * (kernels/conv_direct.c) on a grid of 3x3 stride-1 SAME convolutions, the kernels called as a
 * plan's step calls them, in one process: for each shape and thread count every variant runs
 * once per round, rounds interleaved (a burst of load from elsewhere hits both kernels alike),
 * medians.  It is what compile/implmode.c's rule for op_select_implmode high_performance
 * (winograd_wins) was derived from.
 *
 * Variants (each the direct kernel's median over Winograd's: > 1 Winograd is faster):
 *   fwd    conv2d alone;
 *   ep     with the fused epilogue bias + relu (a fused_conv2d step);
 *   pool   bias + relu + a 2x2 stride-2 max pool fused (bench_cnn's layers);
 *   fwdU, poolU  fwd and pool with the filter's transform U computed once beforehand
 *          (npuK_conv2d_f32_winograd_u_ep: a plan's step whose filter is a constant, plan.c);
 *   bwd    conv2d_backprop_input of the same layer: dx (n, h, w, c) from dy (n, h, w, oc),
 *          npuK_conv2d_backprop_input_f32_gemm (the direct kernel on the turned filter where
 *          c % 8 == 0, the op's default) against its Winograd form.
 * Grid: batch 1, 8, 32; H = W 7, 14, 28, 56; c = out_c 8, 16, 32, 64, 128, 256 and the pairs
 * 32 -> 64, 64 -> 32, 128 -> 256; shapes whose forward exceeds MAX_GFLOP are left out (they
 * would take the whole run and tell nothing the neighbours do not).  Threads: the device pool
 * at 1 and 2 (npu_context_set_n_threads; OpenBLAS at one thread, as the context sets it).
 * Inputs in [-1, 1), fixed seed.
 * Usage: bench_winograd [rounds [threads [batch]]] (default 9; 1 and 2 threads; every batch).
 * Columns: n h c oc threads, tiles (2x2 output tiles per image), the direct forward's median
 * ms, its GFLOP/s (9 c oc multiply-adds per output), then the six ratios.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/npu_int.h"
#include "include/npu.h"
#include "kernels/kernels.h"
#include "kernels/kmath.h"
#include "bench.h"

#define MAX_GFLOP 1.2 /* per forward call */
#define N_VAR 6

static const char *const var_names[N_VAR] = {"fwd", "ep", "pool", "fwdU", "poolU", "bwd"};

static uint32_t seed = 12345;
static float urand(void) {
  seed = seed * 1664525u + 1013904223u;
  return (float)(seed >> 8) / 8388608.0f - 1.0f;
}

static float *filled(size_t n) {
  float *p = malloc(n * sizeof *p);
  if (p)
    for (size_t i = 0; i < n; i++) p[i] = urand();
  return p;
}

typedef struct layer {
  npuK_window2d w, pw;
  int64_t oc;
  float *x, *f, *u, *bias, *y, *dy, *dx, *scratch;
  npuK_epilogue ep;
} layer;

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

static int layer_init(layer *l, int64_t n, int64_t h, int64_t c, int64_t oc, int slots) {
  memset(l, 0, sizeof *l);
  l->w = (npuK_window2d){.n = n, .in_h = h, .in_w = h, .c = c, .k_h = 3, .k_w = 3,
                         .stride_h = 1, .stride_w = 1, .dilation_h = 1, .dilation_w = 1,
                         .pad_top = 1, .pad_left = 1, .out_h = h, .out_w = h};
  l->pw = (npuK_window2d){.n = n, .in_h = h, .in_w = h, .c = oc, .k_h = 2, .k_w = 2,
                          .stride_h = 2, .stride_w = 2, .dilation_h = 1, .dilation_w = 1,
                          .out_h = h / 2, .out_w = h / 2};
  l->oc = oc;
  size_t s = 0;
  s = max_z(s, npuK_conv2d_direct_scratch_size(&l->w, oc, NULL, slots));
  s = max_z(s, npuK_conv2d_direct_scratch_size(&l->w, oc, &l->pw, slots));
  s = max_z(s, npuK_conv2d_winograd_scratch_size(&l->w, oc, NULL, slots));
  s = max_z(s, npuK_conv2d_winograd_scratch_size(&l->w, oc, &l->pw, slots));
  s = max_z(s, npuK_conv2d_backprop_input_f32_scratch_size(&l->w, oc, slots));
  s = max_z(s, npuK_conv2d_backprop_input_f32_winograd_scratch_size(&l->w, oc, slots));
  size_t image = (size_t)(n * h * h);
  l->x = filled(image * (size_t)c);
  l->f = filled((size_t)(9 * c * oc));
  l->bias = filled((size_t)oc);
  l->y = malloc(image * (size_t)oc * sizeof(float));
  l->dy = filled(image * (size_t)oc);
  l->dx = malloc(image * (size_t)c * sizeof(float));
  l->scratch = malloc(s + 64);
  l->u = malloc(npuK_conv2d_winograd_filter_size(c, oc));
  if (l->u && l->f) npuK_conv2d_winograd_filter(NULL, c, oc, l->f, l->u);
  l->ep = (npuK_epilogue){.bias = l->bias, .act = NPUK_ACT_RELU};
  return l->x && l->f && l->u && l->bias && l->y && l->dy && l->dx && l->scratch ? 0 : -1;
}

static void layer_free(layer *l) {
  free(l->x), free(l->f), free(l->bias), free(l->y), free(l->dy), free(l->dx), free(l->scratch);
  free(l->u);
}

/* variant v by the direct kernel (wino 0) or Winograd (1) */
static void run(const layer *l, const npuK_pool *pool, int slots, int v, int wino) {
  const npuK_window2d *w = &l->w;
  switch (v) {
  case 0:
  case 1:
  case 2:
  case 3:
  case 4: {
    const npuK_epilogue *ep = v == 0 || v == 3 ? NULL : &l->ep;
    const npuK_window2d *pw = v == 2 || v == 4 ? &l->pw : NULL;
    if (wino && v >= 3)
      npuK_conv2d_f32_winograd_u_ep(pool, w, l->oc, l->x, l->u, ep, pw, l->y, l->scratch, slots);
    else if (wino)
      npuK_conv2d_f32_winograd_ep(pool, w, l->oc, l->x, l->f, ep, pw, l->y, l->scratch, slots);
    else npuK_conv2d_f32_direct_ep(pool, w, l->oc, l->x, l->f, ep, pw, l->y, l->scratch, slots);
    break;
  }
  default:
    if (wino)
      npuK_conv2d_backprop_input_f32_winograd(pool, w, l->oc, l->dy, l->f, l->dx, l->scratch, slots);
    else
      npuK_conv2d_backprop_input_f32_gemm(pool, w, l->oc, l->dy, l->f, l->dx, l->scratch, slots);
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 9, only_threads = argc > 2 ? atoi(argv[2]) : 0;
  int only_batch = argc > 3 ? atoi(argv[3]) : 0;
  if (rounds < 1) rounds = 1;
  double (*tick)(void) = bench_clock(only_threads);
  npu_context *ctx;
  if (npu_context_new(NULL, &ctx)) return 1;
  static const int64_t batches[] = {1, 8, 32}, sizes[] = {7, 14, 28, 56};
  static const int64_t chans[][2] = {{8, 8},   {16, 16}, {32, 32},   {64, 64},  {128, 128},
                                     {256, 256}, {32, 64}, {64, 32}, {128, 256}};
  double *t = malloc(sizeof(double) * (size_t)rounds * 2 * N_VAR);
  if (!t) return 1;
  printf("bench_winograd: 3x3 stride-1 SAME conv2d, direct / Winograd F(2x2,3x3) medians of %d "
         "interleaved rounds (> 1: Winograd faster)\n", rounds);
  printf("%3s %3s %4s %4s %2s %5s %9s %7s", "n", "h", "c", "oc", "T", "tiles", "direct ms",
         "GFLOP/s");
  for (int v = 0; v < N_VAR; v++) printf(" %6s", var_names[v]);
  printf("\n");
  int max_threads = npu_context_n_threads(ctx);
  for (int threads = 1; threads <= (max_threads < 2 ? max_threads : 2); threads++) {
    if (only_threads > 0 && threads != only_threads) continue;
    npu_context_set_n_threads(ctx, threads);
    const npuK_pool *pool = npuC_kernel_pool(ctx);
    for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++)
      for (size_t hi = 0; hi < sizeof sizes / sizeof *sizes; hi++)
        for (size_t ci = 0; ci < sizeof chans / sizeof *chans; ci++) {
          int64_t n = batches[bi], h = sizes[hi], c = chans[ci][0], oc = chans[ci][1];
          if (only_batch > 0 && n != only_batch) continue;
          double gflop = 2.0 * 9 * (double)(n * h * h) * (double)(c * oc) * 1e-9;
          if (gflop > MAX_GFLOP) continue;
          layer l;
          if (layer_init(&l, n, h, c, oc, threads)) {
            fprintf(stderr, "bench_winograd: out of memory\n");
            return 1;
          }
          for (int v = 0; v < N_VAR; v++) /* warm-up */
            for (int k = 0; k < 2; k++) run(&l, pool, threads, v, k);
          for (int r = 0; r < rounds; r++)
            for (int v = 0; v < N_VAR; v++)
              for (int k = 0; k < 2; k++) {
                int kk = (r + v) % 2 ? 1 - k : k; /* alternate which kernel goes first */
                double t0 = tick();
                run(&l, pool, threads, v, kk);
                t[((size_t)v * 2 + (size_t)kk) * (size_t)rounds + (size_t)r] = tick() - t0;
              }
          double med[N_VAR][2];
          for (int v = 0; v < N_VAR; v++)
            for (int k = 0; k < 2; k++)
              med[v][k] = median(t + ((size_t)v * 2 + (size_t)k) * (size_t)rounds, rounds);
          printf("%3lld %3lld %4lld %4lld %2d %5lld %9.3f %7.1f", (long long)n, (long long)h,
                 (long long)c, (long long)oc, threads, (long long)(((h + 1) / 2) * ((h + 1) / 2)),
                 med[0][0] * 1e3, gflop / med[0][0]);
          for (int v = 0; v < N_VAR; v++) printf(" %6.2f", med[v][0] / med[v][1]);
          printf("\n");
          fflush(stdout);
          layer_free(&l);
        }
  }
  free(t);
  npu_context_release(ctx);
  return 0;
}
