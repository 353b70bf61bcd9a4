/*
 * test_conv_bf16.c — the direct convolution on bfloat16 operands (kernels/conv_bf16.c,
 * NPUK_CONV_DIRECT_BF16): VDPBF16PS where the CPU has it, its portable twin everywhere.
 *
 * Against a float64 oracle of the same bfloat16 inputs, within the bound kernels.h states
 * (k 2^-23 sum|x f| + k 2^-126, k = k_h k_w c): strides, SAME / VALID, odd channel counts
 * (pairs straddling taps), c = 1, out_c multiples of 16 and not; the epilogue and the fused
 * pool giving the bits of the unfused steps; a bfloat16 y the bits of narrowing the float32
 * one; the same bits over threads and slots; NaN / Inf propagating; subnormal inputs read as
 * zero; a filter that is not bfloat16 sent to the widening kernel.  Where the CPU has
 * AVX512_BF16 the instructions are compared with the twin (bits: the twin follows the SDM's
 * order and flushes).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/half.h"
#include "kernels/kernels.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* [-1, 1) */
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint16_t to_bf16(float v) { return npu_f32_to_bf16(v); }
static float from_bf16(uint16_t h) { return npu_bf16_to_f32(h); }

/* ---- a pool of 2 pthreads handing out chunks of 1 slot ----------------------------------- */

typedef struct task {
  npuK_range_fn fn;
  void *arg;
  int64_t n;
  int tid;
} task;

static void *worker(void *p) {
  task *t = p;
  for (int64_t i = t->tid; i < t->n; i += 2) t->fn(t->arg, i, i + 1);
  return NULL;
}

static void two_for(void *self, int64_t n, int64_t grain, npuK_range_fn fn, void *arg) {
  (void)self, (void)grain;
  pthread_t th[2];
  task ts[2];
  for (int i = 0; i < 2; i++) {
    ts[i] = (task){fn, arg, n, i};
    pthread_create(&th[i], NULL, worker, &ts[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
}
static const npuK_pool pool_two = {two_for, NULL, NULL};

static npuK_window2d window(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                            int64_t s, int same) {
  npuK_window2d g = {n, h, w, c, kh, kw, s, s, 1, 1, 0, 0, 0, 0};
  if (npuK_conv_output_dim(h, kh, s, 1, same, &g.out_h, &g.pad_top) ||
      npuK_conv_output_dim(w, kw, s, 1, same, &g.out_w, &g.pad_left))
    g.n = 0;
  return g;
}

/* The float64 sums and sums of |x f| of the bfloat16 inputs (valid taps only). */
static void oracle(const npuK_window2d *g, int64_t oc, const uint16_t *x, const float *f,
                   double *exact, double *mag) {
  for (int64_t b = 0; b < g->n; b++)
    for (int64_t oh = 0; oh < g->out_h; oh++)
      for (int64_t ow = 0; ow < g->out_w; ow++)
        for (int64_t o = 0; o < oc; o++) {
          double s = 0, m = 0;
          for (int64_t kh = 0; kh < g->k_h; kh++)
            for (int64_t kw = 0; kw < g->k_w; kw++) {
              int64_t ih = oh * g->stride_h - g->pad_top + kh, iw = ow * g->stride_w - g->pad_left + kw;
              if (ih < 0 || ih >= g->in_h || iw < 0 || iw >= g->in_w) continue;
              for (int64_t ci = 0; ci < g->c; ci++) {
                double p = (double)from_bf16(x[((b * g->in_h + ih) * g->in_w + iw) * g->c + ci]) *
                           f[((kh * g->k_w + kw) * g->c + ci) * oc + o];
                s += p, m += fabs(p);
              }
            }
          int64_t i = ((b * g->out_h + oh) * g->out_w + ow) * oc + o;
          exact[i] = s, mag[i] = m;
        }
}

typedef struct conv_case {
  int64_t n, h, w, c, k_h, k_w, s, oc;
  int same;
} conv_case;

static float *run_packed(const npuK_window2d *g, int64_t oc, const npuK_pool *pool, int slots,
                         const uint16_t *x, const uint16_t *packed, const npuK_epilogue *ep,
                         const npuK_window2d *pw, npuK_dtype yt, int64_t ny, int twin) {
  size_t ss = npuK_conv2d_bf16_direct_packed_scratch_size(g, oc, pw, slots, yt);
  float *scratch = malloc(ss ? ss : 1), *y = malloc((size_t)ny * 4);
  memset(y, 0xa5, (size_t)ny * 4);
  (twin ? npuK_conv2d_bf16_direct_twin_ep : npuK_conv2d_bf16_direct_packed_ep)(
      pool, g, oc, x, packed, ep, pw, y, yt, scratch, slots);
  free(scratch);
  return y;
}

static double worst_ratio = 0;
/* set: x and f drawn non-negative, so the sums do not cancel */
static int all_positive = 0;
static int native_equals_twin = 1;

static void test_case(const conv_case *cc) {
  npuK_window2d g = window(cc->n, cc->h, cc->w, cc->c, cc->k_h, cc->k_w, cc->s, cc->same);
  CHECK(g.n > 0 && npuK_conv2d_bf16_direct_fits(&g, cc->oc, NULL) == (cc->oc % 8 == 0));
  const int64_t oc = cc->oc, nx = g.n * g.in_h * g.in_w * g.c, nf = g.k_h * g.k_w * g.c * oc,
                ny = g.n * g.out_h * g.out_w * oc, k = g.k_h * g.k_w * g.c;
  uint16_t *x = malloc((size_t)nx * 2);
  float *f = malloc((size_t)nf * 4), *bias = malloc((size_t)oc * 4);
  for (int64_t i = 0; i < nx; i++) x[i] = to_bf16((all_positive ? fabsf(urand()) : urand()) * 4);
  for (int64_t i = 0; i < nf; i++) f[i] = from_bf16(to_bf16(all_positive ? fabsf(urand()) : urand()));
  for (int64_t i = 0; i < oc; i++) bias[i] = urand();
  size_t fs = npuK_conv2d_bf16_filter_size(&g, oc);
  CHECK(fs == (size_t)(g.k_h * ((g.k_w * g.c + 1) / 2) * ((oc + 15) / 16 * 16) * 2) * 2);
  uint16_t *packed = malloc(fs);
  CHECK(npuK_conv2d_bf16_filter_pack(&g, oc, f, packed) == 0);
  double *exact = malloc((size_t)ny * 8), *mag = malloc((size_t)ny * 8);
  oracle(&g, oc, x, f, exact, mag);
  /* native (where the CPU has it) and the twin, each within the bound */
  float *y = run_packed(&g, oc, NULL, 1, x, packed, NULL, NULL, NPUK_F32, ny, 0);
  float *yt = run_packed(&g, oc, NULL, 1, x, packed, NULL, NULL, NPUK_F32, ny, 1);
  long bad = 0;
  for (int64_t i = 0; i < ny; i++) {
    double bound = k * 0x1p-23 * mag[i] + k * 0x1p-126, e = fabs(y[i] - exact[i]);
    if (!(e <= bound) || !(fabs(yt[i] - exact[i]) <= bound)) bad++;
    if (mag[i] > 0 && e / (0x1p-24 * mag[i]) > worst_ratio) worst_ratio = e / (0x1p-24 * mag[i]);
  }
  CHECK(bad == 0);
  if (memcmp(y, yt, (size_t)ny * 4)) native_equals_twin = 0;
  /* two threads, slots splitting images and rows: the same bits */
  float *y2 = run_packed(&g, oc, &pool_two, 3, x, packed, NULL, NULL, NPUK_F32, ny, 0);
  CHECK(memcmp(y, y2, (size_t)ny * 4) == 0);
  free(y2);
  /* epilogues: bias + relu (in registers), bias + sigmoid (on the rows): the bits of the
     epilogue on the unfused output */
  static const npuK_act acts[] = {NPUK_ACT_RELU, NPUK_ACT_SIGMOID, NPUK_ACT_NONE};
  for (int a = 0; a < 3; a++) {
    npuK_epilogue ep = {.bias = bias, .act = acts[a]};
    float *want = malloc((size_t)ny * 4);
    memcpy(want, y, (size_t)ny * 4);
    npuK_epilogue_f32(&ep, ny / oc, oc, oc, want);
    float *got = run_packed(&g, oc, &pool_two, 2, x, packed, &ep, NULL, NPUK_F32, ny, 0);
    CHECK(memcmp(want, got, (size_t)ny * 4) == 0);
    /* a bfloat16 y: the bits of narrowing the float32 one */
    uint16_t *h = (uint16_t *)run_packed(&g, oc, NULL, 1, x, packed, &ep, NULL, NPUK_BF16, ny, 0);
    uint16_t *hw = malloc((size_t)ny * 2);
    npuK_half_narrow(want, NPUK_BF16, hw, ny);
    CHECK(memcmp(h, hw, (size_t)ny * 2) == 0);
    free(want), free(got), free(h), free(hw);
  }
  /* the fused max pool: 2x2 stride 2 (VALID and SAME), 3x3 stride 3: max_pool of the
     unpooled output with the epilogue */
  npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
  float *full = run_packed(&g, oc, NULL, 1, x, packed, &ep, NULL, NPUK_F32, ny, 0);
  static const int pk[][3] = {{2, 2, 0}, {2, 2, 1}, {3, 3, 1}};
  for (int p = 0; p < 3; p++) {
    npuK_window2d pw = window(g.n, g.out_h, g.out_w, oc, pk[p][0], pk[p][0], pk[p][1], pk[p][2]);
    if (pw.n == 0 || !npuK_conv2d_pool_fits(&g, &pw)) continue;
    int64_t np = pw.n * pw.out_h * pw.out_w * oc;
    float *want = malloc((size_t)np * 4);
    npuK_max_pool_f32(NULL, &pw, full, want);
    float *got = run_packed(&g, oc, &pool_two, 3, x, packed, &ep, &pw, NPUK_F32, np, 0);
    CHECK(memcmp(want, got, (size_t)np * 4) == 0);
    uint16_t *h = (uint16_t *)run_packed(&g, oc, NULL, 1, x, packed, &ep, &pw, NPUK_BF16, np, 0);
    uint16_t *hw = malloc((size_t)np * 2);
    npuK_half_narrow(want, NPUK_BF16, hw, np);
    CHECK(memcmp(h, hw, (size_t)np * 2) == 0);
    free(want), free(got), free(h), free(hw);
  }
  /* the per-call form (packs into its scratch): the packed form's bits, or, on a CPU without
     the instructions, the widening kernel's */
  if (npuK_conv2d_bf16_direct_fits(&g, oc, NULL)) {
    size_t ss = npuK_conv2d_bf16_direct_scratch_size(&g, oc, NULL, 2, NPUK_F32);
    float *scratch = malloc(ss), *got = malloc((size_t)ny * 4);
    npuK_conv2d_bf16_direct_ep(&pool_two, &g, oc, x, f, &ep, NULL, got, NPUK_F32, scratch, 2);
    float *want = full;
    float *wide = NULL;
    if (!npuK_bf16dot()) {
      wide = malloc((size_t)ny * 4);
      size_t hs = npuK_conv2d_direct_half_scratch_size(&g, oc, NULL, 1, NPUK_BF16, NPUK_F32);
      float *hsc = malloc(hs ? hs : 1);
      npuK_conv2d_direct_half_ep(NULL, &g, oc, x, NPUK_BF16, f, &ep, NULL, wide, NPUK_F32, hsc, 1);
      free(hsc);
      want = wide;
    }
    CHECK(memcmp(want, got, (size_t)ny * 4) == 0);
    /* the filter stored bfloat16 (a variable's Cast, read as stored): the packed form's bits
       (its portable twin's on a CPU without the instructions: the same sums), at 2 slots
       and a bfloat16 y too, in less scratch than the per-call form's */
    uint16_t *fb = malloc((size_t)nf * 2);
    for (int64_t i = 0; i < nf; i++) fb[i] = to_bf16(f[i]);
    size_t sts = npuK_conv2d_bf16_direct_stored_scratch_size(&g, oc, NULL, 2, NPUK_BF16);
    CHECK(sts <= npuK_conv2d_bf16_direct_scratch_size(&g, oc, NULL, 2, NPUK_BF16));
    float *ssc = malloc(sts), *sgot = malloc((size_t)ny * 4);
    npuK_conv2d_bf16_direct_stored_ep(&pool_two, &g, oc, x, fb, &ep, NULL, sgot, NPUK_F32, ssc, 2);
    CHECK(memcmp(full, sgot, (size_t)ny * 4) == 0);
    uint16_t *sh = malloc((size_t)ny * 2), *shw = malloc((size_t)ny * 2);
    npuK_conv2d_bf16_direct_stored_ep(&pool_two, &g, oc, x, fb, &ep, NULL, sh, NPUK_BF16, ssc, 2);
    npuK_half_narrow(full, NPUK_BF16, shw, ny);
    CHECK(memcmp(sh, shw, (size_t)ny * 2) == 0);
    free(fb), free(ssc), free(sgot), free(sh), free(shw);
    /* a filter value with low bits set: not bfloat16, so the widening kernel's bits */
    f[nf / 2] = nextafterf(f[nf / 2], 2.0f);
    CHECK(npuK_conv2d_bf16_filter_pack(&g, oc, f, packed) == -1);
    wide = wide ? wide : malloc((size_t)ny * 4);
    size_t hs = npuK_conv2d_direct_half_scratch_size(&g, oc, NULL, 1, NPUK_BF16, NPUK_F32);
    float *hsc = malloc(hs ? hs : 1);
    npuK_conv2d_direct_half_ep(NULL, &g, oc, x, NPUK_BF16, f, &ep, NULL, wide, NPUK_F32, hsc, 1);
    npuK_conv2d_bf16_direct_ep(&pool_two, &g, oc, x, f, &ep, NULL, got, NPUK_F32, scratch, 2);
    CHECK(memcmp(wide, got, (size_t)ny * 4) == 0);
    free(hsc), free(wide), free(scratch), free(got);
  }
  free(full), free(y), free(yt), free(x), free(f), free(bias), free(packed), free(exact),
      free(mag);
}

/* Inf and NaN in x: an output whose window meets them is NaN where the float64 sum is, else
   the same infinity; the others stay finite.  Subnormal bfloat16 inputs are read as zero. */
static void test_special(void) {
  npuK_window2d g = window(1, 6, 7, 3, 3, 3, 1, 1);
  const int64_t oc = 16, nx = 6 * 7 * 3, nf = 27 * oc, ny = 6 * 7 * oc;
  uint16_t x[6 * 7 * 3];
  float f[27 * 16];
  for (int64_t i = 0; i < nx; i++) x[i] = to_bf16(urand());
  for (int64_t i = 0; i < nf; i++) f[i] = from_bf16(to_bf16(urand()));
  x[3 * 7 * 3 + 2 * 3 + 1] = 0x7f80; /* +Inf */
  x[0] = 0x7fc0;                     /* NaN in the corner */
  x[5 * 7 * 3 + 6 * 3 + 2] = 0xff80; /* -Inf in the other */
  uint16_t packed[3 * 5 * 16 * 2];
  CHECK(npuK_conv2d_bf16_filter_size(&g, oc) == sizeof packed);
  CHECK(npuK_conv2d_bf16_filter_pack(&g, oc, f, packed) == 0);
  double exact[6 * 7 * 16], mag[6 * 7 * 16];
  oracle(&g, oc, x, f, exact, mag);
  for (int twin = 0; twin < 2; twin++) {
    float *y = run_packed(&g, oc, &pool_two, 2, x, packed, NULL, NULL, NPUK_F32, ny, twin);
    long bad = 0, n_nan = 0, n_inf = 0;
    for (int64_t i = 0; i < ny; i++) {
      if (isnan(exact[i])) bad += !isnan(y[i]), n_nan++;
      else if (isinf(exact[i])) bad += y[i] != exact[i], n_inf++;
      else bad += !(fabs(y[i] - exact[i]) <= 27 * 0x1p-23 * mag[i]);
    }
    CHECK(bad == 0 && n_nan > 0 && n_inf > 0);
    free(y);
  }
  /* the fused 2x2 pool in registers meeting NaN and infinite sums, and an infinite and a NaN
     bias: max_pool's rule on the epilogue's values (the unpooled output pooled) */
  {
    float bias[16];
    for (int i = 0; i < 16; i++) bias[i] = urand();
    bias[3] = INFINITY, bias[9] = NAN;
    npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
    npuK_window2d pw = window(1, 6, 7, oc, 2, 2, 2, 0);
    const int64_t np = pw.out_h * pw.out_w * oc;
    float *full = run_packed(&g, oc, NULL, 1, x, packed, &ep, NULL, NPUK_F32, ny, 0);
    float *want = malloc((size_t)np * 4);
    npuK_max_pool_f32(NULL, &pw, full, want);
    for (int twin = 0; twin < 2; twin++) {
      float *got = run_packed(&g, oc, &pool_two, 2, x, packed, &ep, &pw, NPUK_F32, np, twin);
      long bad = 0, n_nan = 0;
      for (int64_t i = 0; i < np; i++) {
        bad += memcmp(&got[i], &want[i], 4) != 0 && !(isnan(got[i]) && isnan(want[i]));
        n_nan += isnan(want[i]);
      }
      CHECK(bad == 0 && n_nan > 0);
      free(got);
    }
    free(full), free(want);
  }
  /* subnormal x (bfloat16 0x0001..0x007f and their negatives): read as zero, so every output
     is +0 where the exact sum is tiny but not zero — within the bound's subnormal terms */
  for (int64_t i = 0; i < nx; i++) x[i] = (uint16_t)((i % 127 + 1) | (i % 2 ? 0x8000 : 0));
  for (int64_t i = 0; i < nf; i++) f[i] = 1.0f + (float)(i % 3);
  CHECK(npuK_conv2d_bf16_filter_pack(&g, oc, f, packed) == 0);
  oracle(&g, oc, x, f, exact, mag);
  for (int twin = 0; twin < 2; twin++) {
    float *y = run_packed(&g, oc, NULL, 1, x, packed, NULL, NULL, NPUK_F32, ny, twin);
    long nonzero = 0, tiny = 0;
    for (int64_t i = 0; i < ny; i++) {
      nonzero += y[i] != 0;
      tiny += exact[i] != 0 && fabs(y[i] - exact[i]) <= mag[i];
    }
    CHECK(nonzero == 0 && tiny > 0);
    free(y);
  }
}

/* Operands of every exponent (subnormals, Inf, NaN among them): the twin takes each product
   unrounded and flushes only the sum, as VDPBF16PS does (k_dpbf16_step), so the two give the
   same bits at float32's range ends too (NaNs aside: the hardware's is its own). */
static void test_range_ends(void) {
  if (!npuK_bf16dot()) return;
  static const conv_case cs[] = {{1, 6, 7, 3, 3, 3, 1, 24, 1}, {1, 5, 6, 1, 3, 3, 1, 16, 0}};
  for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
    npuK_window2d g = window(cs[c].n, cs[c].h, cs[c].w, cs[c].c, cs[c].k_h, cs[c].k_w, cs[c].s,
                             cs[c].same);
    const int64_t oc = cs[c].oc, nx = g.n * g.in_h * g.in_w * g.c,
                  nf = g.k_h * g.k_w * g.c * oc, ny = g.n * g.out_h * g.out_w * oc;
    uint16_t *x = malloc((size_t)nx * 2);
    float *f = malloc((size_t)nf * 4);
    for (int64_t i = 0; i < nx; i++) x[i] = (uint16_t)((urand() + 1) * 32768);
    for (int64_t i = 0; i < nf; i++) f[i] = from_bf16((uint16_t)((urand() + 1) * 32768));
    uint16_t *packed = malloc(npuK_conv2d_bf16_filter_size(&g, oc));
    CHECK(npuK_conv2d_bf16_filter_pack(&g, oc, f, packed) == 0);
    float *y = run_packed(&g, oc, NULL, 1, x, packed, NULL, NULL, NPUK_F32, ny, 0);
    float *yt = run_packed(&g, oc, NULL, 1, x, packed, NULL, NULL, NPUK_F32, ny, 1);
    long diff = 0;
    for (int64_t i = 0; i < ny; i++)
      diff += !(isnan(y[i]) && isnan(yt[i])) && memcmp(y + i, yt + i, 4) != 0;
    CHECK(diff == 0);
    free(x), free(f), free(packed), free(y), free(yt);
  }
}

int main(void) {
  static const conv_case cs[] = {
      {2, 28, 28, 1, 3, 3, 1, 32, 1},  /* the CNN's first layer: c = 1, pairs over kw */
      {2, 14, 14, 32, 3, 3, 1, 64, 1}, /* its second */
      {1, 9, 7, 3, 3, 3, 2, 24, 0},    /* odd c, stride 2, VALID, 16 + 8 channels */
      {1, 10, 11, 5, 3, 2, 1, 40, 1},  /* odd c, 3x2 filter: 32 + 8 */
      {2, 6, 6, 8, 1, 1, 1, 8, 0},     /* pointwise, 8 channels */
      {1, 13, 9, 2, 5, 5, 2, 16, 1},   /* 5x5, stride 2 */
      {1, 7, 30, 33, 3, 3, 1, 48, 1},  /* odd c across tiles of 12 columns, 32 + 16 */
      {1, 5, 5, 4, 3, 3, 1, 12, 1},    /* out_c not a multiple of 8 (not DIRECT's) */
  };
  printf("  npuK_bf16dot: %d\n", npuK_bf16dot());
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) test_case(&cs[i]);
  /* a long reduction, k = 3 * 3 * 256 = 2304 terms at the inner pixels: mixed signs, then
     all positive (no cancelling) */
  const conv_case deep = {1, 4, 5, 256, 3, 3, 1, 16, 1};
  test_case(&deep);
  all_positive = 1;
  test_case(&deep);
  all_positive = 0;
  test_special();
  test_range_ends();
  printf("  largest |y - exact| / (2^-24 sum|x f|): %.2f; VDPBF16PS %s the twin's bits\n",
         worst_ratio, !npuK_bf16dot() ? "(absent) vs" : native_equals_twin ? "gives" : "differs from");
  if (npuK_bf16dot()) CHECK(native_equals_twin);
  return check_summary("test_conv_bf16");
}
