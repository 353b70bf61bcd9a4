/* bench_conv_grad_bf16.c: conv2d's filter gradient under mixed bfloat16, one thread, on
 * bench_cnn's two layers (batch 32: 28x28x1 -> 32 and 14x14x32 -> 64, 3x3 SAME): float32
 * operands (npuK_conv2d_backprop_filter_f32), bfloat16 operands widened to float32 first and
 * the result narrowed (what the executor does without AVX512_BF16 or with
 * NPU_NO_AVX512BF16=1), and bfloat16 as stored by VDPBF16PS (conv_bwd_bf16.c); the same
 * for the second layer's input gradient (npuK_conv2d_backprop_input_f32_gemm: the direct
 * kernel on the turned filter).  Repetitions
 * interleaved, medians, this thread's CPU time (all of the work: no pool, OpenBLAS at one
 * thread; see bench_clock); ratios to float32 printed.  Usage: bench_conv_grad_bf16 [reps] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "core/half.h"
#include "kernels/kernels.h"
#include "kernels/kgrad.h"
#include "kernels/kmath.h"

typedef struct layer {
  const char *name;
  int64_t n, h, w, c, out_c;
} layer;

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 15;
  if (reps < 1) reps = 1;
  /* one thread: no context sets it here, and a kernel that falls back to sgemm would otherwise
     run on OpenBLAS's threads, beside the clock */
  openblas_set_num_threads(1);
  static const layer layers[] = {{"conv1 28x28x1->32", 32, 28, 28, 1, 32},
                                 {"conv2 14x14x32->64", 32, 14, 14, 32, 64}};
  int native = npuK_bf16dot();
  printf("filter gradient, batch 32, one thread, CPU time, median of %d%s\n", reps,
         native ? "" : " (no AVX512_BF16: the native column is the widening one)");
  for (size_t li = 0; li < sizeof layers / sizeof layers[0]; li++) {
    const layer *L = &layers[li];
    npuK_window2d w = {.n = L->n, .in_h = L->h, .in_w = L->w, .c = L->c, .k_h = 3, .k_w = 3,
                       .stride_h = 1, .stride_w = 1, .dilation_h = 1, .dilation_w = 1,
                       .pad_top = 1, .pad_left = 1, .out_h = L->h, .out_w = L->w};
    int64_t nx = L->n * L->h * L->w * L->c, ndy = L->n * L->h * L->w * L->out_c;
    int64_t nf = 9 * L->c * L->out_c;
    float *xf = malloc((size_t)nx * 4), *dyf = malloc((size_t)ndy * 4), *df = malloc((size_t)nf * 4);
    uint16_t *x = malloc((size_t)nx * 2), *dy = malloc((size_t)ndy * 2), *dh = malloc((size_t)nf * 2);
    double *acc = malloc(npuK_filter_grad_f32_scratch_size(&w, L->out_c));
    void *scratch = malloc(npuK_conv2d_backprop_filter_bf16_scratch_size(&w, L->out_c));
    float *wx = malloc((size_t)nx * 4), *wdy = malloc((size_t)ndy * 4);
    srand(1);
    for (int64_t i = 0; i < nx; i++) x[i] = npu_f32_to_bf16(xf[i] = (float)rand() / RAND_MAX);
    for (int64_t i = 0; i < ndy; i++)
      dy[i] = npu_f32_to_bf16(dyf[i] = (float)rand() / RAND_MAX - 0.5f);
    double *t[3];
    for (int k = 0; k < 3; k++) t[k] = malloc((size_t)reps * sizeof(double));
    for (int r = -2; r < reps; r++)
      for (int k = 0; k < 3; k++) {
        double t0 = thread_cpu_now();
        if (k == 0) {
          npuK_conv2d_backprop_filter_f32(NULL, &w, L->out_c, xf, dyf, df, acc);
        } else if (k == 1 || !native) {
          npuK_half_widen(NPUK_BF16, x, wx, nx);
          npuK_half_widen(NPUK_BF16, dy, wdy, ndy);
          npuK_conv2d_backprop_filter_f32(NULL, &w, L->out_c, wx, wdy, df, acc);
          npuK_half_narrow(df, NPUK_BF16, dh, nf);
        } else {
          npuK_conv2d_backprop_filter_bf16(NULL, &w, L->out_c, x, dy, dh, NPUK_BF16, scratch);
        }
        if (r >= 0) t[k][r] = thread_cpu_now() - t0;
      }
    double m[3];
    for (int k = 0; k < 3; k++) m[k] = median(t[k], reps);
    double flops = 2.0 * (double)nf * (double)(L->n * L->h * L->w);
    printf("%-20s float32 %.3f ms (%.0f GFLOP/s)  bf16 widened %.3f ms (%.2fx)  "
           "bf16 native %.3f ms (%.2fx, %.0f GFLOP/s)\n",
           L->name, m[0] * 1e3, flops / m[0] * 1e-9, m[1] * 1e3, m[1] / m[0], m[2] * 1e3,
           m[2] / m[0], flops / m[2] * 1e-9);
    if (L->c >= 8) { /* the input gradient (conv1's x is the model's input: none there) */
      float *ff = malloc((size_t)nf * 4), *dxf = malloc((size_t)nx * 4), *wf = malloc((size_t)nf * 4);
      uint16_t *fh = malloc((size_t)nf * 2), *dxh = malloc((size_t)nx * 2);
      float *gs = malloc(npuK_conv2d_backprop_input_f32_scratch_size(&w, L->out_c, 1));
      void *bs = malloc(npuK_conv2d_backprop_input_bf16_scratch_size(&w, L->out_c));
      for (int64_t i = 0; i < nf; i++) fh[i] = npu_f32_to_bf16(ff[i] = (float)rand() / RAND_MAX - 0.5f);
      for (int r = -2; r < reps; r++)
        for (int k = 0; k < 3; k++) {
          double t0 = thread_cpu_now();
          if (k == 0) {
            npuK_conv2d_backprop_input_f32_gemm(NULL, &w, L->out_c, dyf, ff, dxf, gs, 1);
          } else if (k == 1 || !native) {
            npuK_half_widen(NPUK_BF16, dy, wdy, ndy);
            npuK_half_widen(NPUK_BF16, fh, wf, nf);
            npuK_conv2d_backprop_input_f32_gemm(NULL, &w, L->out_c, wdy, wf, dxf, gs, 1);
            npuK_half_narrow(dxf, NPUK_BF16, dxh, nx);
          } else {
            npuK_conv2d_backprop_input_bf16(NULL, &w, L->out_c, dy, fh, dxh, NPUK_BF16, bs);
          }
          if (r >= 0) t[k][r] = thread_cpu_now() - t0;
        }
      for (int k = 0; k < 3; k++) m[k] = median(t[k], reps);
      printf("%-20s input gradient: float32 %.3f ms (%.0f GFLOP/s)  bf16 widened %.3f ms (%.2fx)  "
             "bf16 native %.3f ms (%.2fx, %.0f GFLOP/s)\n",
             L->name, m[0] * 1e3, flops / m[0] * 1e-9, m[1] * 1e3, m[1] / m[0], m[2] * 1e3,
             m[2] / m[0], flops / m[2] * 1e-9);
      free(ff), free(dxf), free(wf), free(fh), free(dxh), free(gs), free(bs);
    }
    for (int k = 0; k < 3; k++) free(t[k]);
    free(xf), free(dyf), free(df), free(x), free(dy), free(dh), free(acc), free(scratch);
    free(wx), free(wdy);
  }
  return 0;
}
