/* test_conv_bwd_bf16.c: conv2d's filter and input gradients on bfloat16 as stored
 * (conv_bwd_bf16.c); the filter gradient
 * against a float64 oracle of the same bfloat16 inputs, within the bound kgrad.h states
 * (|df - exact| <= 129 2^-24 sum|x dy| + 2 n_terms 2^-126); strides 1 and 2, SAME and VALID,
 * dilation, odd pixel counts, one input channel, channel tails; the same bits on one thread,
 * two threads and ranges cut mid-way; a bfloat16 df the float32 one rounded; NaN and
 * infinities propagating; the portable path (level 0) against the same oracle.  The native
 * path runs where the CPU has AVX512_BF16 (npuK_bf16dot()); elsewhere it says it skipped.
 * The input gradient likewise, within k_h k_w out_c 2^-24 sum|dy f| + 2 k_h k_w out_c 2^-126
 * (one chain per element), any stride and dilation, odd channel counts. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/half.h"
#include "kernels/kernels.h"
#include "kernels/kgrad.h"

/* a pool of two pthreads taking alternate chunks of n / 3 items (0 threads: serial chunks) */
typedef struct tpool {
  int threads;
} tpool;
typedef struct ttask {
  npuK_range_fn fn;
  void *arg;
  int64_t n, chunk;
  int tid, threads;
} ttask;

static void *tthread(void *p) {
  ttask *t = p;
  for (int64_t b = t->tid * t->chunk; b < t->n; b += t->threads * t->chunk)
    t->fn(t->arg, b, b + t->chunk < t->n ? b + t->chunk : t->n);
  return NULL;
}

static void tparallel_for(void *self, int64_t n, int64_t grain, npuK_range_fn fn, void *arg) {
  const tpool *tp = self;
  (void)grain;
  int64_t chunk = (n + 2) / 3;
  if (chunk < 1) return;
  if (!tp->threads) {
    ttask t = {fn, arg, n, chunk, 0, 1};
    tthread(&t);
    return;
  }
  pthread_t th[2];
  ttask t[2];
  for (int i = 0; i < 2; i++) {
    t[i] = (ttask){fn, arg, n, chunk, i, 2};
    pthread_create(&th[i], NULL, tthread, &t[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
}

static tpool tp_two = {2}, tp_serial = {0};
static npuK_pool pool_two = {tparallel_for, &tp_two, NULL};
static npuK_pool pool_thirds = {tparallel_for, &tp_serial, NULL};

static uint64_t rng = 88172645463325252ull;
static double urand(void) { /* xorshift64, in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

/* set: rand_bf16 draws non-negative values, so the sums do not cancel */
static int all_positive = 0;

static uint16_t *rand_bf16(int64_t n, double scale) {
  uint16_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++)
    v[i] = npu_f32_to_bf16((float)((all_positive ? fabs(urand()) : urand()) * scale));
  return v;
}

typedef struct geo {
  int64_t n, h, w, c, k_h, k_w, stride, dilation, out_c;
  int same;
} geo;

static int make_window(const geo *g, npuK_window2d *w) {
  *w = (npuK_window2d){.n = g->n, .in_h = g->h, .in_w = g->w, .c = g->c, .k_h = g->k_h,
                       .k_w = g->k_w, .stride_h = g->stride, .stride_w = g->stride,
                       .dilation_h = g->dilation, .dilation_w = g->dilation};
  return npuK_conv_output_dim(g->h, g->k_h, g->stride, g->dilation, g->same, &w->out_h,
                              &w->pad_top) ||
         npuK_conv_output_dim(g->w, g->k_w, g->stride, g->dilation, g->same, &w->out_w,
                              &w->pad_left);
}

/* the exact sum (float64: each product exact, the sums within ~2^-50 relative here) and the
   sum of |x dy|, padding positions skipped */
static void oracle(const npuK_window2d *w, int64_t oc, const uint16_t *x, const uint16_t *dy,
                   double *df, double *mag) {
  for (int64_t kh = 0; kh < w->k_h; kh++)
    for (int64_t kw = 0; kw < w->k_w; kw++)
      for (int64_t ci = 0; ci < w->c; ci++)
        for (int64_t co = 0; co < oc; co++) {
          double s = 0, m = 0;
          for (int64_t b = 0; b < w->n; b++)
            for (int64_t oh = 0; oh < w->out_h; oh++)
              for (int64_t ow = 0; ow < w->out_w; ow++) {
                int64_t ih = oh * w->stride_h - w->pad_top + kh * w->dilation_h;
                int64_t iw = ow * w->stride_w - w->pad_left + kw * w->dilation_w;
                if (ih < 0 || ih >= w->in_h || iw < 0 || iw >= w->in_w) continue;
                double a = npu_bf16_to_f32(x[((b * w->in_h + ih) * w->in_w + iw) * w->c + ci]);
                double d = npu_bf16_to_f32(dy[((b * w->out_h + oh) * w->out_w + ow) * oc + co]);
                s += a * d, m += fabs(a * d);
              }
          int64_t i = ((kh * w->k_w + kw) * w->c + ci) * oc + co;
          df[i] = s, mag[i] = m;
        }
}

/* |got - exact| <= rel 2^-24 mag + 2 terms 2^-126: the gradients' bounds (kgrad.h) */
static int within_bound(float got, double exact, double mag, double rel, int64_t terms) {
  double bound = rel * 0x1p-24 * mag + 2.0 * (double)terms * 0x1p-126;
  return fabs((double)got - exact) <= bound;
}

/* the filter gradient's: 129 2^-24 sum|x dy| + 2 n_terms 2^-126 */
static int within(float got, double exact, double mag, int64_t n_terms) {
  return within_bound(got, exact, mag, 129.0, n_terms);
}

/* A gradient kernel under test (the filter's or the input's: the same signature), its _level
   twin, its bfloat16 operands (x and dy, or dy and the filter), its n outputs' oracle and bound
   (within_bound's rel and terms). */
typedef struct bwd_case {
  void (*fn)(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c, const uint16_t *a,
             const uint16_t *b, void *out, npuK_dtype out_dtype, void *scratch);
  void (*level)(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c, const uint16_t *a,
                const uint16_t *b, void *out, npuK_dtype out_dtype, void *scratch, int level);
  const uint16_t *a, *b;
  int64_t n;
  const double *exact, *mag;
  double rel;
  int64_t terms;
} bwd_case;

/* Every path of one case: the portable level within the bound of the oracle; where native, the
   native entry too, with the portable loops' bits (VDPBF16PS adds a pair's products one after
   the other, as the portable loops do: on normal numbers their bits), the same bits on two
   threads and on ranges cut in thirds, and a bfloat16 output the float32 one rounded. */
static void check_paths(const npuK_window2d *w, int64_t oc, const bwd_case *c, void *scratch,
                        int native) {
  const int64_t n = c->n;
  float *o0 = malloc((size_t)n * 4), *o1 = malloc((size_t)n * 4), *o2 = malloc((size_t)n * 4);
  uint16_t *h = malloc((size_t)n * 2);
  long bad = 0;
  c->level(NULL, w, oc, c->a, c->b, o0, NPUK_F32, scratch, 0);
  for (int64_t i = 0; i < n; i++)
    bad += !within_bound(o0[i], c->exact[i], c->mag[i], c->rel, c->terms);
  CHECK_EQ_I64(bad, 0); /* portable */
  if (native) {
    bad = 0;
    c->fn(NULL, w, oc, c->a, c->b, o1, NPUK_F32, scratch);
    for (int64_t i = 0; i < n; i++)
      bad += !within_bound(o1[i], c->exact[i], c->mag[i], c->rel, c->terms);
    CHECK_EQ_I64(bad, 0);
    CHECK(memcmp(o0, o1, (size_t)n * 4) == 0);
    c->fn(&pool_two, w, oc, c->a, c->b, o2, NPUK_F32, scratch);
    CHECK(memcmp(o1, o2, (size_t)n * 4) == 0);
    c->fn(&pool_thirds, w, oc, c->a, c->b, o2, NPUK_F32, scratch);
    CHECK(memcmp(o1, o2, (size_t)n * 4) == 0);
    c->fn(&pool_two, w, oc, c->a, c->b, h, NPUK_BF16, scratch);
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += h[i] != npu_f32_to_bf16(o1[i]);
    CHECK_EQ_I64(bad, 0);
  }
  free(o0), free(o1), free(o2), free(h);
}

/* one shape: every path against the oracle, the native one's bits on every pool */
static void check_shape(const geo *g, double x_scale, int native) {
  npuK_window2d w;
  CHECK(make_window(g, &w) == 0);
  const int64_t oc = g->out_c, nx = w.n * w.in_h * w.in_w * w.c;
  const int64_t ndy = w.n * w.out_h * w.out_w * oc, nf = w.k_h * w.k_w * w.c * oc;
  const int64_t n_terms = w.n * w.out_h * w.out_w;
  uint16_t *x = rand_bf16(nx, x_scale), *dy = rand_bf16(ndy, 1.0);
  double *exact = malloc((size_t)nf * sizeof *exact), *mag = malloc((size_t)nf * sizeof *mag);
  void *scratch = malloc(npuK_conv2d_backprop_filter_bf16_scratch_size(&w, oc));
  oracle(&w, oc, x, dy, exact, mag);
  check_paths(&w, oc,
              &(bwd_case){npuK_conv2d_backprop_filter_bf16, npuK_conv2d_backprop_filter_bf16_level,
                          x, dy, nf, exact, mag, 129.0, n_terms},
              scratch, native);
  free(x), free(dy), free(exact), free(mag), free(scratch);
}

static const geo shapes[] = {
    /* n  h   w   c  kh kw s  d  oc  same */
    {1, 7, 7, 32, 3, 3, 1, 1, 64, 1},    /* c % 16 == 0 (packed 16 channels a pixel), 49 pixels */
    {3, 9, 9, 1, 3, 3, 1, 1, 32, 1},     /* one input channel, channels split, 243 pixels */
    {2, 8, 8, 16, 3, 3, 2, 1, 24, 1},    /* stride 2, a channel tail */
    {1, 10, 10, 5, 3, 3, 2, 1, 17, 0},   /* VALID, rows across taps, 17 channels */
    {2, 5, 6, 3, 2, 2, 1, 1, 40, 0},     /* 2x2, 40 channels: a 32 tile and a 16 one */
    {4, 12, 12, 32, 3, 3, 1, 1, 48, 1},  /* 576 pixels: several blocks */
    {1, 9, 9, 16, 3, 3, 1, 2, 16, 1},    /* dilation 2 */
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0},      /* one pixel, one channel each side */
    {2, 4, 4, 33, 1, 1, 1, 1, 7, 0},     /* 1x1, 33 rows (16 + 16 + 1) */
};

/* NaN and infinity: an element whose oracle is not finite is not finite; a NaN in x makes
   exactly its rows NaN (x never meets padding) */
static void check_nonfinite(void) {
  geo g = {2, 6, 6, 16, 3, 3, 1, 1, 32, 1};
  npuK_window2d w;
  make_window(&g, &w);
  const int64_t oc = g.out_c, nx = w.n * w.in_h * w.in_w * w.c;
  const int64_t ndy = w.n * w.out_h * w.out_w * oc, nf = w.k_h * w.k_w * w.c * oc;
  uint16_t *x = rand_bf16(nx, 1.0), *dy = rand_bf16(ndy, 1.0);
  double *exact = malloc((size_t)nf * sizeof *exact), *mag = malloc((size_t)nf * sizeof *mag);
  float *f = malloc((size_t)nf * 4);
  void *scratch = malloc(npuK_conv2d_backprop_filter_bf16_scratch_size(&w, oc));
  x[((1 * w.in_h + 2) * w.in_w + 3) * w.c + 5] = npu_f32_to_bf16(NAN);
  dy[((0 * w.out_h + 4) * w.out_w + 1) * oc + 9] = npu_f32_to_bf16(INFINITY);
  oracle(&w, oc, x, dy, exact, mag);
  for (int level = 0; level < 2; level++) {
    npuK_conv2d_backprop_filter_bf16_level(&pool_two, &w, oc, x, dy, f, NPUK_F32, scratch,
                                           level);
    long missed = 0, n_nan = 0, finite_ok = 0;
    for (int64_t i = 0; i < nf; i++) {
      if (!isfinite(exact[i]) && isfinite(f[i])) missed++;
      if (isnan(exact[i])) n_nan++, missed += !isnan(f[i]);
      if (isfinite(f[i])) finite_ok += !within(f[i], exact[i], mag[i], w.n * w.out_h * w.out_w);
    }
    CHECK_EQ_I64(missed, 0);
    CHECK(n_nan >= 9 * oc); /* every tap reads the NaN pixel (it is inside the 3x3 SAME) */
    CHECK_EQ_I64(finite_ok, 0);
  }
  free(x), free(dy), free(exact), free(mag), free(f), free(scratch);
}

/* Subnormal bfloat16 inputs count as zero, subnormal sums flush: within the bound's
   2 n 2^-126 term; a product of normal numbers below 2^-126 flushes too. */
static void check_subnormal(int native) {
  geo g = {1, 5, 5, 16, 3, 3, 1, 1, 16, 1};
  npuK_window2d w;
  make_window(&g, &w);
  const int64_t oc = g.out_c, nx = w.n * w.in_h * w.in_w * w.c;
  const int64_t ndy = w.n * w.out_h * w.out_w * oc, nf = w.k_h * w.k_w * w.c * oc;
  uint16_t *x = rand_bf16(nx, 0x1p-120), *dy = rand_bf16(ndy, 0x1p-10);
  for (int64_t i = 0; i < nx; i += 3) x[i] = npu_f32_to_bf16((float)(urand() * 0x1p-128));
  double *exact = malloc((size_t)nf * sizeof *exact), *mag = malloc((size_t)nf * sizeof *mag);
  float *f = malloc((size_t)nf * 4);
  void *scratch = malloc(npuK_conv2d_backprop_filter_bf16_scratch_size(&w, oc));
  oracle(&w, oc, x, dy, exact, mag);
  for (int level = 0; level <= native; level++) {
    npuK_conv2d_backprop_filter_bf16_level(NULL, &w, oc, x, dy, f, NPUK_F32, scratch, level);
    long bad = 0, zeros = 0;
    for (int64_t i = 0; i < nf; i++) {
      bad += !within(f[i], exact[i], mag[i], w.n * w.out_h * w.out_w);
      zeros += f[i] == 0 && exact[i] != 0;
    }
    CHECK_EQ_I64(bad, 0);
    CHECK(zeros > 0); /* products near 2^-130 flush: the flush is real, and bounded */
  }
  free(x), free(dy), free(exact), free(mag), free(f), free(scratch);
}

/* ---- input gradient ---- */

/* dx by the definition, float64, and the sum of |dy f| */
static void oracle_dx(const npuK_window2d *w, int64_t oc, const uint16_t *dy, const uint16_t *f,
                      double *dx, double *mag) {
  for (int64_t b = 0; b < w->n; b++)
    for (int64_t ih = 0; ih < w->in_h; ih++)
      for (int64_t iw = 0; iw < w->in_w; iw++)
        for (int64_t ci = 0; ci < w->c; ci++) {
          double s = 0, m = 0;
          for (int64_t kh = 0; kh < w->k_h; kh++)
            for (int64_t kw = 0; kw < w->k_w; kw++) {
              int64_t th = ih + w->pad_top - kh * w->dilation_h;
              int64_t tw = iw + w->pad_left - kw * w->dilation_w;
              if (th < 0 || tw < 0 || th % w->stride_h || tw % w->stride_w) continue;
              int64_t oh = th / w->stride_h, ow = tw / w->stride_w;
              if (oh >= w->out_h || ow >= w->out_w) continue;
              for (int64_t co = 0; co < oc; co++) {
                double a = npu_bf16_to_f32(dy[((b * w->out_h + oh) * w->out_w + ow) * oc + co]);
                double g = npu_bf16_to_f32(f[((kh * w->k_w + kw) * w->c + ci) * oc + co]);
                s += a * g, m += fabs(a * g);
              }
            }
          int64_t i = ((b * w->in_h + ih) * w->in_w + iw) * w->c + ci;
          dx[i] = s, mag[i] = m;
        }
}

static void check_input_shape(const geo *g, int native) {
  npuK_window2d w;
  CHECK(make_window(g, &w) == 0);
  const int64_t oc = g->out_c, nx = w.n * w.in_h * w.in_w * w.c, k = w.k_h * w.k_w * oc;
  const int64_t ndy = w.n * w.out_h * w.out_w * oc, nf = w.k_h * w.k_w * w.c * oc;
  uint16_t *dy = rand_bf16(ndy, 1.0), *f = rand_bf16(nf, 1.0);
  double *exact = malloc((size_t)nx * sizeof *exact), *mag = malloc((size_t)nx * sizeof *mag);
  void *scratch = malloc(npuK_conv2d_backprop_input_bf16_scratch_size(&w, oc));
  oracle_dx(&w, oc, dy, f, exact, mag);
  check_paths(&w, oc,
              &(bwd_case){npuK_conv2d_backprop_input_bf16, npuK_conv2d_backprop_input_bf16_level,
                          dy, f, nx, exact, mag, (double)k, k},
              scratch, native);
  free(dy), free(f), free(exact), free(mag), free(scratch);
}

/* NaN in dy reaches exactly the dx elements whose windows read it; infinities stay non-finite */
static void check_input_nonfinite(void) {
  geo g = {1, 6, 6, 16, 3, 3, 1, 1, 24, 1};
  npuK_window2d w;
  make_window(&g, &w);
  const int64_t oc = g.out_c, nx = w.n * w.in_h * w.in_w * w.c;
  const int64_t ndy = w.n * w.out_h * w.out_w * oc, nf = w.k_h * w.k_w * w.c * oc;
  uint16_t *dy = rand_bf16(ndy, 1.0), *f = rand_bf16(nf, 1.0);
  dy[(2 * w.out_w + 3) * oc + 7] = npu_f32_to_bf16(NAN);
  dy[(5 * w.out_w + 0) * oc + 23] = npu_f32_to_bf16(INFINITY); /* the odd channel count's last */
  double *exact = malloc((size_t)nx * sizeof *exact), *mag = malloc((size_t)nx * sizeof *mag);
  float *d = malloc((size_t)nx * 4);
  void *scratch = malloc(npuK_conv2d_backprop_input_bf16_scratch_size(&w, oc));
  oracle_dx(&w, oc, dy, f, exact, mag);
  for (int level = 0; level < 2; level++) {
    npuK_conv2d_backprop_input_bf16_level(&pool_two, &w, oc, dy, f, d, NPUK_F32, scratch, level);
    long missed = 0, extra = 0, n_bad = 0;
    for (int64_t i = 0; i < nx; i++) {
      missed += !isfinite(exact[i]) && isfinite(d[i]);
      extra += isfinite(exact[i]) && !isfinite(d[i]);
      n_bad += !isfinite(exact[i]);
    }
    CHECK_EQ_I64(missed, 0);
    CHECK_EQ_I64(extra, 0);
    CHECK(n_bad >= 9 * 16);
  }
  free(dy), free(f), free(exact), free(mag), free(d), free(scratch);
}

static const geo input_shapes[] = {
    /* n  h   w   c  kh kw s  d  oc  same */
    {2, 14, 14, 32, 3, 3, 1, 1, 64, 1},  /* bench_cnn's second layer's shape, one image less */
    {1, 9, 11, 3, 3, 3, 1, 1, 24, 1},    /* 3 channels (a channel tail), rows not of 8 pixels */
    {2, 8, 8, 16, 3, 3, 2, 1, 17, 1},    /* stride 2, an odd out_c */
    {1, 10, 9, 40, 3, 3, 2, 1, 8, 0},    /* VALID stride 2, 40 channels: 32 + 8 */
    {1, 9, 9, 16, 3, 3, 1, 2, 16, 1},    /* dilation 2 */
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0},      /* one of everything */
    {2, 5, 6, 5, 2, 2, 1, 1, 33, 0},     /* 2x2 VALID, 33 channels out */
};

/* bfloat16 bit patterns of every exponent (subnormals, Inf and NaN among them) */
static uint16_t *wild_bf16(int64_t n) {
  uint16_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = (uint16_t)((urand() + 1.0) * 32768.0);
  return v;
}

/* the same floats, but that NaNs may differ in sign and payload */
static long count_diff(const float *a, const float *b, int64_t n) {
  long d = 0;
  for (int64_t i = 0; i < n; i++)
    d += !(isnan(a[i]) && isnan(b[i])) && memcmp(a + i, b + i, sizeof *a) != 0;
  return d;
}

/* Products beyond float32's range and sums flushed at its bottom: the portable path takes
   each product unrounded and flushes only the sum, as VDPBF16PS does (k_dpbf16_step), so
   both give the same bits on operands of any exponent (c % 16 == 0 takes pack_x16, c = 3
   pack_rows). */
static void check_range_ends(int native) {
  static const geo gs[] = {{1, 6, 6, 16, 3, 3, 1, 1, 20, 1}, {1, 5, 7, 3, 3, 3, 2, 1, 17, 1}};
  for (size_t s = 0; s < sizeof gs / sizeof gs[0] && native; s++) {
    npuK_window2d w;
    CHECK(make_window(&gs[s], &w) == 0);
    const int64_t oc = gs[s].out_c, nx = w.n * w.in_h * w.in_w * w.c;
    const int64_t ndy = w.n * w.out_h * w.out_w * oc, nf = w.k_h * w.k_w * w.c * oc;
    uint16_t *x = wild_bf16(nx), *dy = wild_bf16(ndy), *f = wild_bf16(nf);
    float *a = malloc((size_t)(nf > nx ? nf : nx) * 4), *b = malloc((size_t)(nf > nx ? nf : nx) * 4);
    size_t ss = npuK_conv2d_backprop_filter_bf16_scratch_size(&w, oc),
           si = npuK_conv2d_backprop_input_bf16_scratch_size(&w, oc);
    void *scratch = malloc(ss > si ? ss : si);
    npuK_conv2d_backprop_filter_bf16_level(NULL, &w, oc, x, dy, a, NPUK_F32, scratch, 0);
    npuK_conv2d_backprop_filter_bf16_level(NULL, &w, oc, x, dy, b, NPUK_F32, scratch, 1);
    CHECK_EQ_I64(count_diff(a, b, nf), 0);
    npuK_conv2d_backprop_input_bf16_level(NULL, &w, oc, dy, f, a, NPUK_F32, scratch, 0);
    npuK_conv2d_backprop_input_bf16_level(NULL, &w, oc, dy, f, b, NPUK_F32, scratch, 1);
    CHECK_EQ_I64(count_diff(a, b, nx), 0);
    free(x), free(dy), free(f), free(a), free(b), free(scratch);
  }
}

int main(void) {
  int native = npuK_bf16dot();
  if (!native) printf("test_conv_bwd_bf16: no AVX512_BF16 here: the native path skipped\n");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    check_shape(&shapes[i], 1.0, native);
    check_shape(&shapes[i], 1e3, native); /* another magnitude */
  }
  check_nonfinite();
  check_subnormal(native);
  for (size_t i = 0; i < sizeof input_shapes / sizeof input_shapes[0]; i++)
    check_input_shape(&input_shapes[i], native);
  check_input_nonfinite();
  /* long reductions, mixed signs then all positive (no cancelling): the filter gradient over
     32 x 28 x 28 = 25088 pixels, the input gradient over 3 * 3 * 256 = 2304 terms */
  const geo long_filter = {32, 28, 28, 1, 3, 3, 1, 1, 32, 1}; /* bench_cnn's first layer */
  const geo long_input = {1, 6, 6, 4, 3, 3, 1, 1, 256, 1};
  for (all_positive = 0; all_positive < 2; all_positive++) {
    check_shape(&long_filter, 1.0, native);
    check_input_shape(&long_input, native);
  }
  all_positive = 0;
  check_range_ends(native);
  return check_summary("test_conv_bwd_bf16");
}
