/*
 * bench_conv_bf16.c — the direct convolution on bfloat16 as stored (kernels/conv_bf16.c,
 * VDPBF16PS) against what the bfloat16 precision modes ran before it (conv_direct.c widening x
 * to float32, float32 FMAs, y narrowed) and against float32 throughout (the direct kernel on
 * float32 x and y), the kernels called as a plan's step calls them, in one process: every
 * variant once per round, rounds interleaved, medians.
 *
 * Layers (3x3 SAME stride 1, bias + relu, as bench_cnn's): the CNN's two at batch 32,
 * 28x28x1 -> 32 and 14x14x32 -> 64, each with its 2x2 stride-2 max pool fused; a ResNet-like
 * 56x56x64 -> 64 at batch 1 (no pool).  Inputs in [-1, 1) rounded to bfloat16, fixed seed.
 * Variants: f32 (float32 x, y: npuK_conv2d_f32_direct_ep), wide (bfloat16 x, y, the widening
 * kernel: npuK_conv2d_direct_half_ep), bf16 (npuK_conv2d_bf16_direct_ep: the filter packed in
 * each call), bf16P (the packed form on a filter packed once: a constant filter).
 * Usage: bench_conv_bf16 [rounds [threads]] (default 15; 1 and 2 threads).
 * Columns: the layer, threads, f32's median ms, then each variant's median as f32's / its
 * (> 1: faster than float32) and bf16's speed-up over wide.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/npu_int.h"
#include "include/npu.h"
#include "kernels/kernels.h"
#include "bench.h"

#define N_VAR 4

typedef struct layer {
  const char *name;
  int64_t n, h, c, oc;
  int pooled;
} layer;

static uint64_t seed = 42;
static float urand(void) {
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint16_t to_bf16(float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); /* finite values: RNE */
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 15, only_threads = argc > 2 ? atoi(argv[2]) : 0;
  if (rounds < 1) rounds = 1;
  double (*tick)(void) = bench_clock(only_threads);
  npu_context *ctx;
  if (npu_context_new(NULL, &ctx)) return 1;
  static const layer layers[] = {{"cnn1 32x28x28x1->32 pool", 32, 28, 1, 32, 1},
                                 {"cnn2 32x14x14x32->64 pool", 32, 14, 32, 64, 1},
                                 {"res 1x56x56x64->64", 1, 56, 64, 64, 0}};
  printf("bench_conv_bf16: 3x3 SAME conv2d + bias + relu (+ 2x2 pool), medians of %d interleaved "
         "rounds; npuK_bf16dot %d\n", rounds, npuK_bf16dot());
  printf("%-27s %2s %8s %6s %6s %6s %9s\n", "layer", "T", "f32 ms", "wide", "bf16", "bf16P",
         "bf16/wide");
  int max_threads = npu_context_n_threads(ctx);
  double *t = malloc(sizeof(double) * (size_t)rounds * N_VAR);
  for (int threads = 1; threads <= (max_threads < 2 ? max_threads : 2); threads++) {
    if (only_threads > 0 && threads != only_threads) continue;
    npu_context_set_n_threads(ctx, threads);
    const npuK_pool *pool = npuC_kernel_pool(ctx);
    for (size_t li = 0; li < sizeof layers / sizeof *layers; li++) {
      const layer *L = &layers[li];
      npuK_window2d w = {L->n, L->h, L->h, L->c, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0};
      npuK_conv_output_dim(L->h, 3, 1, 1, 1, &w.out_h, &w.pad_top);
      npuK_conv_output_dim(L->h, 3, 1, 1, 1, &w.out_w, &w.pad_left);
      npuK_window2d pw = {L->n, w.out_h, w.out_w, L->oc, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0};
      npuK_conv_output_dim(w.out_h, 2, 2, 1, 0, &pw.out_h, &pw.pad_top);
      npuK_conv_output_dim(w.out_w, 2, 2, 1, 0, &pw.out_w, &pw.pad_left);
      const npuK_window2d *pp = L->pooled ? &pw : NULL;
      int64_t nx = L->n * L->h * L->h * L->c, nf = 9 * L->c * L->oc;
      int64_t ny = L->pooled ? L->n * pw.out_h * pw.out_w * L->oc : L->n * w.out_h * w.out_w * L->oc;
      float *x = malloc((size_t)nx * 4), *f = malloc((size_t)nf * 4), *b = malloc((size_t)L->oc * 4);
      uint16_t *xh = malloc((size_t)nx * 2);
      for (int64_t i = 0; i < nx; i++) xh[i] = to_bf16(urand()), x[i] = 0;
      for (int64_t i = 0; i < nx; i++) {
        uint32_t u = (uint32_t)xh[i] << 16;
        memcpy(&x[i], &u, 4);
      }
      for (int64_t i = 0; i < nf; i++) {
        uint32_t u = (uint32_t)to_bf16(urand()) << 16;
        memcpy(&f[i], &u, 4);
      }
      for (int64_t i = 0; i < L->oc; i++) b[i] = urand() * 0.1f;
      npuK_epilogue ep = {.bias = b, .act = NPUK_ACT_RELU};
      float *y = malloc((size_t)ny * 4);
      uint16_t *yh = malloc((size_t)ny * 2), *packed = malloc(npuK_conv2d_bf16_filter_size(&w, L->oc));
      npuK_conv2d_bf16_filter_pack(&w, L->oc, f, packed);
      size_t s0 = npuK_conv2d_direct_scratch_size(&w, L->oc, pp, threads);
      size_t s1 = npuK_conv2d_direct_half_scratch_size(&w, L->oc, pp, threads, NPUK_BF16, NPUK_BF16);
      size_t s2 = npuK_conv2d_bf16_direct_scratch_size(&w, L->oc, pp, threads, NPUK_BF16);
      size_t ss = s0 > s1 ? s0 : s1;
      ss = ss > s2 ? ss : s2;
      float *scratch = malloc(ss + 64);
      for (int r = -1; r < rounds; r++)
        for (int v = 0; v < N_VAR; v++) {
          double t0 = tick();
          if (v == 0) npuK_conv2d_f32_direct_ep(pool, &w, L->oc, x, f, &ep, pp, y, scratch, threads);
          else if (v == 1)
            npuK_conv2d_direct_half_ep(pool, &w, L->oc, xh, NPUK_BF16, f, &ep, pp, yh, NPUK_BF16,
                                       scratch, threads);
          else if (v == 2)
            npuK_conv2d_bf16_direct_ep(pool, &w, L->oc, xh, f, &ep, pp, yh, NPUK_BF16, scratch,
                                       threads);
          else
            npuK_conv2d_bf16_direct_packed_ep(pool, &w, L->oc, xh, packed, &ep, pp, yh, NPUK_BF16,
                                              scratch, threads);
          if (r >= 0) t[v * rounds + r] = tick() - t0;
        }
      double med[N_VAR];
      for (int v = 0; v < N_VAR; v++) med[v] = median(t + v * rounds, rounds);
      printf("%-27s %2d %8.3f %6.2f %6.2f %6.2f %9.2f\n", L->name, threads, med[0] * 1e3,
             med[0] / med[1], med[0] / med[2], med[0] / med[3], med[1] / med[2]);
      free(x), free(f), free(b), free(xh), free(y), free(yh), free(packed), free(scratch);
    }
  }
  free(t);
  npu_context_release(ctx);
  return 0;
}
