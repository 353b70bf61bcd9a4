/*
 * bench_reduce.c — the float32 sum kernel (kernels/reduce.c: float64 accumulation, lanes,
 * shape-fixed pieces) on one thread, against two plain C loops over the same 4096 x 4096
 * floats (64 MiB): the float32 sequential loop the kernel used to be (inaccurate, and a chain of
 * dependent adds), and a 16-lane float32 loop that the compiler vectorises (inaccurate too: it is
 * only here as the speed of reading the bytes, the yardstick).  Rows (axis 1), columns (axis 0)
 * and everything (one output).  One process, several repetitions, medians; prints ns per
 * element, GB/s and the ratios (> 1: the kernel is slower).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "bench.h"

#define R 4096
#define C 4096
#define REPS 9
#define LANES 16

/* the old kernel: each output adds its inputs one after the other in float32 */
static void seq_rows(const float *x, float *out) {
  for (int r = 0; r < R; r++) {
    float acc = x[(size_t)r * C];
    for (int c = 1; c < C; c++) acc += x[(size_t)r * C + c];
    out[r] = acc;
  }
}
static void seq_cols(const float *x, float *out) {
  memcpy(out, x, C * sizeof *out);
  for (int r = 1; r < R; r++)
    for (int c = 0; c < C; c++) out[c] += x[(size_t)r * C + c];
}
static void seq_all(const float *x, float *out) {
  float acc = x[0];
  for (size_t i = 1; i < (size_t)R * C; i++) acc += x[i];
  out[0] = acc;
}

/* the yardstick: 16 float32 lanes, a fixed trip count the compiler vectorises */
static float lanes(const float *x, size_t n) {
  float l[LANES] = {0};
  for (size_t i = 0; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) l[k] += x[i + k];
  float s = 0;
  for (int k = 0; k < LANES; k++) s += l[k];
  return s;
}
static void read_rows(const float *x, float *out) {
  for (int r = 0; r < R; r++) out[r] = lanes(x + (size_t)r * C, C);
}
static void read_cols(const float *restrict x, float *restrict out) {
  memcpy(out, x, C * sizeof *out);
  for (int r = 1; r < R; r++)
    for (int c = 0; c < C; c += LANES)
      for (int k = 0; k < LANES; k++) out[c + k] += x[(size_t)r * C + c + k];
}
static void read_all(const float *x, float *out) { out[0] = lanes(x, (size_t)R * C); }

static const int64_t dims[2] = {R, C};
static void kern_rows(const float *x, float *out) { npuK_reduce_f32(NULL, NPUK_RED_SUM, 2, dims, 2u, x, out); }
static void kern_cols(const float *x, float *out) { npuK_reduce_f32(NULL, NPUK_RED_SUM, 2, dims, 1u, x, out); }
static void kern_all(const float *x, float *out) { npuK_reduce_f32(NULL, NPUK_RED_SUM, 2, dims, 3u, x, out); }

typedef void (*fn)(const float *, float *);

static double time_ns(fn f, const float *x, float *out) {
  double t[REPS];
  f(x, out);
  for (int i = 0; i < REPS; i++) {
    double t0 = now();
    f(x, out);
    t[i] = (now() - t0) * 1e9;
  }
  qsort(t, REPS, sizeof *t, cmp_double);
  return t[REPS / 2];
}

int main(void) {
  float *x = malloc((size_t)R * C * sizeof *x), *out = malloc(C * sizeof *out);
  if (!x || !out) return 1;
  unsigned s = 1;
  for (size_t i = 0; i < (size_t)R * C; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
  static const struct { const char *name; fn kernel, seq, read; } cases[] = {
      {"rows (axis 1)", kern_rows, seq_rows, read_rows},
      {"columns (axis 0)", kern_cols, seq_cols, read_cols},
      {"all (one output)", kern_all, seq_all, read_all},
  };
  const double n = (double)R * C;
  printf("float32 sum over %d x %d (%d MiB), one thread, median of %d\n", R, C,
         (int)(n * 4 / (1 << 20)), REPS);
  printf("%-18s %21s %21s %21s %9s %9s\n", "", "kernel ns/el  GB/s", "f32 loop ns/el  GB/s",
         "16 lanes ns/el  GB/s", "vs loop", "vs lanes");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    double k = time_ns(cases[i].kernel, x, out), q = time_ns(cases[i].seq, x, out),
           l = time_ns(cases[i].read, x, out);
    printf("%-18s %13.3f %7.2f %13.3f %7.2f %13.3f %7.2f %9.2f %9.2f\n", cases[i].name, k / n,
           n * 4 / k, q / n, n * 4 / q, l / n, n * 4 / l, k / q, k / l);
  }
  free(x);
  free(out);
  return 0;
}
