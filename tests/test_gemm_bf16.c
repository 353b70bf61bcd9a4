/*
 * test_gemm_bf16.c — the native bfloat16 GEMM (kernels/gemm_bf16.c, VDPBF16PS).
 *
 * Against a float64 oracle on the same bfloat16 inputs (subnormals taken as zero, as the
 * instruction reads them): |c - exact| <= k 2^-24 sum|a b| + k 2^-126, and with a bias
 * (k + 1) 2^-24 (|bias| + sum|a b|) + k 2^-126, then the narrowing of a reduced C (half an
 * ulp of it); NaN where the oracle has NaN, the same infinity.  All four transpose
 * combinations, m / n / k on and off the tile edges (1, odd k, k = 0), every C dtype, the
 * epilogues.  The AVX512_BF16 tiles against the portable twin bit for bit (the same chains:
 * this checks the instruction's rounding is the one the twin emulates), and 1 against 2 real
 * threads and 1..3 slots bit for bit.  Where the CPU lacks AVX512_BF16 the level-1 calls run
 * the twin, and the comparisons still hold.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pool_two.h"
#include "core/half.h"
#include "kernels/kernels.h"

static uint32_t rng = 2024;
static float urand(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)(rng >> 8) / (float)(1u << 24);
}

static uint16_t to_bf16(float f) {
  uint16_t h;
  npuK_half_narrow(&f, NPUK_BF16, &h, 1);
  return h;
}

/* set: rand_bf16 draws from [0, 2) instead, so sums do not cancel (the bound's sum|a b| is
   then the sum itself: the widest error a long chain can pile up) */
static int all_positive = 0;

/* n bfloat16 values in [-2, 2); special: a few NaN / Inf / subnormals / signed zeros */
static uint16_t *rand_bf16(int64_t n, int special) {
  uint16_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++)
    v[i] = to_bf16(all_positive ? urand() * 2 : (urand() - 0.5f) * 4);
  if (special && n > 6) {
    v[1] = 0x0001; /* the smallest subnormal */
    v[2] = 0x807f; /* a negative subnormal */
    v[3] = 0x8000; /* -0 */
  }
  if (special == 2 && n > 6) v[4] = 0x7fc0, v[5] = 0x7f80; /* NaN, +Inf */
  return v;
}

/* the instruction's reading: subnormals are zero */
static double rd(uint16_t h) {
  float f = npu_bf16_to_f32(h);
  return fabsf(f) < 0x1p-126f ? 0.0 : (double)f;
}

/* c (m, n) stored cd within the bound of the float64 sums of op(A) op(B) (+ bias, relu) */
static int within_bound(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                        const uint16_t *b, const npuK_epilogue *ep, const void *c,
                        npuK_dtype cd) {
  float *cf = malloc((size_t)(m * n) * sizeof *cf);
  npuK_cast(NULL, m * n, cd, c, NPUK_F32, cf);
  int ok = 1;
  for (int64_t r = 0; r < m && ok; r++)
    for (int64_t j = 0; j < n && ok; j++) {
      double sum = 0, mag = 0;
      for (int64_t i = 0; i < k; i++) {
        double x = rd(ta ? a[i * m + r] : a[r * k + i]), y = rd(tb ? b[j * k + i] : b[i * n + j]);
        sum += x * y;
        mag += fabs(x * y);
      }
      double tol = (double)k * 0x1p-24 * mag + (double)k * 0x1p-126;
      if (ep && ep->bias) {
        sum += ep->bias[j];
        mag += fabs(ep->bias[j]);
        tol = (double)(k + 1) * 0x1p-24 * mag + (double)k * 0x1p-126;
      }
      if (ep && ep->act == NPUK_ACT_RELU && sum < 0) sum = 0; /* relu is 1-Lipschitz */
      if (cd != NPUK_F32) tol += (cd == NPUK_BF16 ? 0x1p-8 : 0x1p-11) * (fabs(sum) + tol) + 0x1p-24;
      double got = cf[r * n + j];
      if (isnan(sum)) ok = isnan(got);
      else if (isinf(sum)) ok = got == sum;
      else ok = fabs(got - sum) <= tol;
      if (!ok)
        fprintf(stderr, "  (%lld, %lld): got %.9g, want %.9g, tol %g (m %lld n %lld k %lld)\n",
                (long long)r, (long long)j, got, sum, tol, (long long)m, (long long)n,
                (long long)k);
    }
  free(cf);
  return ok;
}

static void *alloc_out(int64_t n, npuK_dtype dt) {
  size_t sz = (size_t)(n ? n : 1) * npuK_dtype_size(dt);
  void *p = malloc(sz);
  memset(p, 0xa5, sz); /* stale bits must be overwritten */
  return p;
}

static void *scratch_for(int ta, int tb, int64_t m, int64_t n, int64_t k, int slots) {
  size_t sz = npuK_gemm_bf16_scratch_size(ta, tb, m, n, k, slots);
  void *s = malloc(sz ? sz : 1); /* exactly the size asked: a sanitizer build sees overruns */
  memset(s, 0x5a, sz ? sz : 1);
  return s;
}

/* x and y (n, stored dt) hold the same bits, but that NaNs may differ in sign and payload
   (the hardware's NaN is its own) */
static int same_bits(const void *x, const void *y, int64_t n, npuK_dtype dt) {
  float *fx = malloc((size_t)(n ? n : 1) * sizeof *fx), *fy = malloc((size_t)(n ? n : 1) * sizeof *fy);
  npuK_cast(NULL, n, dt, x, NPUK_F32, fx);
  npuK_cast(NULL, n, dt, y, NPUK_F32, fy);
  int ok = 1;
  for (int64_t i = 0; i < n; i++)
    ok &= (isnan(fx[i]) && isnan(fy[i])) || npu_f32_bits(fx[i]) == npu_f32_bits(fy[i]);
  free(fx), free(fy);
  return ok;
}

static const npuK_dtype cds[] = {NPUK_F32, NPUK_BF16, NPUK_F16};

/* B packed once (npuK_gemm_bf16_pack_b) and read by the _packed entry: the bits of c1 (the
   per-call packing at level 1), at both levels and any slots, in exactly the scratch asked */
static void check_packed(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                         const uint16_t *b, const npuK_epilogue *epp, npuK_dtype cd,
                         const void *c1) {
  size_t pb = npuK_gemm_bf16_packed_size(m, n, k), cb = (size_t)(m * n) * npuK_dtype_size(cd);
  CHECK(k > 0 || pb == 0);
  uint32_t *pk = malloc(pb ? pb : 1);
  memset(pk, 0x3c, pb ? pb : 1);
  npuK_gemm_bf16_pack_b(tb, m, n, k, b, pk);
  for (int level = 0; level <= 1; level++)
    for (int slots = 1; slots <= 3; slots++) {
      size_t sz = npuK_gemm_bf16_packed_scratch_size(ta, m, k);
      void *s = malloc(sz ? sz : 1), *c = alloc_out(m * n, cd);
      npuK_gemm_bf16_packed_level_ep(slots > 1 ? &two : NULL, ta, m, n, k, a, pk, epp, c, cd,
                                     s, slots, level);
      CHECK(level ? memcmp(c, c1, cb) == 0 : same_bits(c, c1, m * n, cd));
      free(s), free(c);
    }
  free(pk);
}

/* one shape: every transpose, C dtype, epilogue; twin, slots, threads */
static void check_shape(int64_t m, int64_t n, int64_t k, int special) {
  uint16_t *a = rand_bf16(m * k, special), *b = rand_bf16(k * n, special);
  float *bias = malloc((size_t)n * sizeof *bias);
  for (int64_t j = 0; j < n; j++) bias[j] = (urand() - 0.5f) * 2;
  npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
  for (int t = 0; t < 4; t++)
    for (int d = 0; d < 3; d++)
      for (int e = 0; e < 2; e++) {
        int ta = t & 1, tb = t >> 1;
        npuK_dtype cd = cds[d];
        const npuK_epilogue *epp = e ? &ep : NULL;
        size_t cb = (size_t)(m * n) * npuK_dtype_size(cd);
        void *c1 = alloc_out(m * n, cd), *c0 = alloc_out(m * n, cd);
        void *s = scratch_for(ta, tb, m, n, k, 1);
        npuK_gemm_bf16_level_ep(NULL, ta, tb, m, n, k, a, b, epp, c1, cd, s, 1, 1);
        npuK_gemm_bf16_level_ep(NULL, ta, tb, m, n, k, a, b, epp, c0, cd, NULL, 1, 0);
        CHECK(within_bound(ta, tb, m, n, k, a, b, epp, c1, cd));
        CHECK(same_bits(c1, c0, m * n, cd)); /* the tiles are the twin's chains */
        free(s);
        for (int slots = 2; slots <= 3; slots++) {
          void *c2 = alloc_out(m * n, cd), *s2 = scratch_for(ta, tb, m, n, k, slots);
          npuK_gemm_bf16_level_ep(&two, ta, tb, m, n, k, a, b, epp, c2, cd, s2, slots, 1);
          CHECK(memcmp(c1, c2, cb) == 0); /* threads and slots change no bit */
          free(c2), free(s2);
        }
        check_packed(ta, tb, m, n, k, a, b, epp, cd, c1);
        free(c1), free(c0);
      }
  free(a), free(b), free(bias);
}

static void test_shapes(void) {
  static const int64_t ms[] = {1, 2, 3, 4, 7, 8, 9, 17, 300};
  static const int64_t ns[] = {1, 15, 16, 17, 32, 33, 70, 130};
  static const int64_t ks[] = {0, 1, 2, 3, 31, 64};
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
    for (size_t j = 0; j < sizeof ns / sizeof *ns; j++)
      for (size_t q = 0; q < sizeof ks / sizeof *ks; q++)
        if (ms[i] * ns[j] * ks[q] <= 300 * 70 * 31) check_shape(ms[i], ns[j], ks[q], 0);
  check_shape(64, 96, 300, 0); /* the MLP's k range, a bigger tile count */
  check_shape(5, 40, 129, 0);
}

/* a reduction of k = 4099 terms (odd: a last pair half empty), few rows and columns: the
   float32 chains' rounding grows with k, so the bound is checked where it has room to fail;
   mixed signs (cancelling) and all positive (not) */
static void test_long_k(void) {
  check_shape(3, 17, 4099, 0);
  all_positive = 1;
  check_shape(3, 17, 4099, 0);
  all_positive = 0;
}

/* subnormal inputs count as zero; NaN and Inf propagate */
static void test_special(void) {
  check_shape(9, 33, 13, 1);
  check_shape(9, 33, 13, 2);
  check_shape(1, 17, 7, 2);
  /* a subnormal times a large number: the instruction reads it as zero */
  uint16_t a[2] = {0x0040, 0x3f80}, b[2] = {to_bf16(0x1p100f), 0x3f80}; /* 2^-127 * 2^100 + 1 */
  float c = -1;
  npuK_gemm_bf16_level_ep(NULL, 0, 0, 1, 1, 2, a, b, NULL, &c, NPUK_F32, NULL, 1, 0);
  CHECK(c == 1.0f);
  void *s = scratch_for(0, 0, 1, 1, 2, 1);
  c = -1;
  npuK_gemm_bf16_level_ep(NULL, 0, 0, 1, 1, 2, a, b, NULL, &c, NPUK_F32, s, 1, 1);
  CHECK(c == 1.0f);
  free(s);
  /* k = 0: the sums are +0, then the epilogue: bias, relu */
  float bias[3] = {-1, 0.5f, 2}, y[6];
  npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
  npuK_gemm_bf16_ep(NULL, 0, 0, 2, 3, 0, a, b, &ep, y, NPUK_F32, NULL, 1);
  CHECK(y[0] == 0 && y[1] == 0.5f && y[2] == 2 && y[3] == 0 && y[5] == 2);
}

/* the exact sum order (Intel SDM): pair 0 gives 1; pair 1 adds its odd element's product
   first, 1 + 2^-24 rounding to 1 (a tie, to even), then its even one's 2^-23: 1 + 2^-23.  The
   even product first would give 1 + 2^-22, one rounding of the pair's sum 1 + 2^-23 too. */
static void test_order(void) {
  uint16_t one = 0x3f80;
  uint16_t a[4] = {one, one, one, one}, b[4] = {one, 0, to_bf16(0x1p-23f), to_bf16(0x1p-24f)};
  float c[2];
  for (int level = 0; level < 2; level++) {
    void *s = scratch_for(0, 0, 1, 1, 4, 1);
    npuK_gemm_bf16_level_ep(NULL, 0, 0, 1, 1, 4, a, b, NULL, c + level, NPUK_F32, s, 1, level);
    free(s);
  }
  CHECK(c[0] == 1.0f + 0x1p-23f);
  CHECK(c[1] == c[0]);
}

/* VDPBF16PS adds each exact product to the sum with one rounding (as a fused multiply-add
   would), then flushes a subnormal result: a product is neither rounded to Inf on its own when
   beyond float32's range nor flushed before it is added.  The twin must do the same, or it
   stops being the instruction's bits at the range's ends (the shapes above never go there). */
#define POW2(e, neg) ((uint16_t)(((neg) ? 0x8000 : 0) | (127 + (e)) << 7)) /* +-2^e, bfloat16 */
static void test_range_ends(void) {
  const struct {
    uint16_t a[2], b[2]; /* element 1's product is added first */
    float want;
  } cases[] = {
      /* -2^-140 alone: the sum -2^-140 flushed to -0, not +0 + (-0 flushed first) */
      {{POW2(-70, 1), 0}, {POW2(-70, 0), 0}, -0.0f},
      /* 2^-126 - 2^-140 is subnormal: flushed to +0 (the product flushed first kept 2^-126) */
      {{POW2(-70, 1), POW2(-63, 0)}, {POW2(-70, 0), POW2(-63, 0)}, 0.0f},
      /* 2^-126 - 2^-160 rounds to 2^-126, a normal: kept (tininess after rounding) */
      {{POW2(-80, 1), POW2(-63, 0)}, {POW2(-80, 0), POW2(-63, 0)}, 0x1p-126f},
      /* -2^129 overflows the sum to -Inf, and -Inf + 2^129 stays -Inf (not Inf - Inf = NaN) */
      {{POW2(127, 0), POW2(127, 1)}, {POW2(2, 0), POW2(2, 0)}, -__builtin_inff()},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int level = 0; level < 2; level++) {
      float c = 1234;
      void *s = scratch_for(0, 0, 1, 1, 2, 1);
      npuK_gemm_bf16_level_ep(NULL, 0, 0, 1, 1, 2, cases[i].a, cases[i].b, NULL, &c, NPUK_F32,
                              s, 1, level);
      free(s);
      CHECK(npu_f32_bits(c) == npu_f32_bits(cases[i].want));
      if (npu_f32_bits(c) != npu_f32_bits(cases[i].want))
        fprintf(stderr, "  range case %zu level %d: got %a, want %a\n", i, level, c,
                cases[i].want);
    }
  /* bfloat16 values of every exponent, random signs and significands: the tiles give the
     twin's bits (where the CPU has the instruction; else both are the twin) */
  const int64_t m = 5, n = 37, k = 41;
  uint16_t *a = malloc((size_t)(m * k) * 2), *b = malloc((size_t)(k * n) * 2);
  for (int64_t i = 0; i < m * k; i++) a[i] = (uint16_t)(urand() * 65536);
  for (int64_t i = 0; i < k * n; i++) b[i] = (uint16_t)(urand() * 65536);
  for (int t = 0; t < 4; t++) {
    float c0[5 * 37], c1[5 * 37];
    void *s = scratch_for(t & 1, t >> 1, m, n, k, 1);
    npuK_gemm_bf16_level_ep(NULL, t & 1, t >> 1, m, n, k, a, b, NULL, c0, NPUK_F32, s, 1, 0);
    npuK_gemm_bf16_level_ep(NULL, t & 1, t >> 1, m, n, k, a, b, NULL, c1, NPUK_F32, s, 1, 1);
    CHECK(same_bits(c0, c1, m * n, NPUK_F32));
    free(s);
  }
  free(a), free(b);
}

int main(void) {
  printf("native bfloat16 dot products here: %s\n", npuK_bf16dot() ? "yes" : "no");
  test_order();
  test_range_ends();
  test_special();
  test_shapes();
  test_long_k();
  return check_summary("test_gemm_bf16");
}
