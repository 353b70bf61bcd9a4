/*
 * test_gemm_f32.c — our float32 GEMM tiles (kernels/gemm_f32.c, algorithm F32TILE).
 *
 * Against a float64 oracle: |c - exact| <= k 2^-24 sum|a b|, with a bias (k + 1) 2^-24
 * (|bias| + sum|a b|); NaN where the oracle has NaN, the same infinity.  All four transpose
 * combinations, m / n / k on and off the tile edges (m % 8, n % 32 and n <= 16, k = 1, odd
 * and long k), the epilogues.  The AVX-512F tiles against the portable twin (fmaf) bit for
 * bit, 1 against 2 real threads and 1..3 slots bit for bit, B packed once against B as
 * stored bit for bit, the fused gradient descent
 * against the product then w - lr d bit for bit.  Where the CPU lacks AVX-512F the level-1
 * calls run the twin, and the comparisons still hold.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "npu_test.h"
#include "pool_two.h"
#include "kernels/kernels.h"
#include "kernels/kgrad.h"

static uint32_t rng = 4242;
static float urand(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)(rng >> 8) / (float)(1u << 24);
}

/* set: values in [0, 2) so that sums do not cancel (the bound's sum|a b| is the sum) */
static int all_positive = 0;

/* n floats in [-2, 2); special 2: a NaN and an Inf among them */
static float *rand_f32(int64_t n, int special) {
  float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = all_positive ? urand() * 2 : (urand() - 0.5f) * 4;
  if (special == 2 && n > 6) v[4] = NAN, v[5] = INFINITY;
  return v;
}

static int within_bound(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                        const float *b, const npuK_epilogue *ep, const float *c) {
  int ok = 1;
  for (int64_t r = 0; r < m && ok; r++)
    for (int64_t j = 0; j < n && ok; j++) {
      double sum = 0, mag = 0;
      for (int64_t i = 0; i < k; i++) {
        double x = ta ? a[i * m + r] : a[r * k + i], y = tb ? b[j * k + i] : b[i * n + j];
        sum += x * y;
        mag += fabs(x * y);
      }
      double tol = (double)k * 0x1p-24 * mag;
      if (ep && ep->bias) {
        sum += ep->bias[j];
        mag += fabs(ep->bias[j]);
        tol = (double)(k + 1) * 0x1p-24 * mag;
      }
      if (ep && ep->act == NPUK_ACT_RELU && sum < 0) sum = 0; /* relu is 1-Lipschitz */
      double got = c[r * n + j];
      if (isnan(sum)) ok = isnan(got);
      else if (isinf(sum)) ok = got == sum;
      else ok = fabs(got - sum) <= tol;
      if (!ok)
        fprintf(stderr, "  (%lld, %lld): got %.9g, want %.9g, tol %g (m %lld n %lld k %lld)\n",
                (long long)r, (long long)j, got, sum, tol, (long long)m, (long long)n,
                (long long)k);
    }
  return ok;
}

static float *alloc_out(int64_t n) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  memset(p, 0xa5, (size_t)(n ? n : 1) * sizeof *p); /* stale bits must be overwritten */
  return p;
}

/* NULL where the size is 0 (B read in place): the kernel must not touch it then */
static void *scratch_for(int tb, int64_t m, int64_t n, int64_t k, int slots) {
  size_t sz = npuK_gemm_f32_scratch_size(tb, m, n, k, slots);
  if (!sz) return NULL;
  void *s = malloc(sz); /* exactly the size asked: a sanitizer build sees overruns */
  memset(s, 0x5a, sz);
  return s;
}

/* the same bits, but that NaNs may differ in sign and payload (the hardware's NaN is its own) */
static int same_bits(const float *x, const float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!(isnan(x[i]) && isnan(y[i])) && memcmp(x + i, y + i, sizeof *x)) {
      fprintf(stderr, "  [%lld]: %a vs %a\n", (long long)i, x[i], y[i]);
      return 0;
    }
  return 1;
}

/* One shape: the oracle's bound, tiles = twin, 1 slot = 2 threads x 3 slots, fused SGD. */
static void one(int ta, int tb, int64_t m, int64_t n, int64_t k, int special, int with_ep) {
  float *a = rand_f32(m * k, special), *b = rand_f32(k * n, 0);
  float *bias = rand_f32(n, 0);
  npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
  const npuK_epilogue *e = with_ep ? &ep : NULL;
  float *c1 = alloc_out(m * n), *c0 = alloc_out(m * n), *c2 = alloc_out(m * n);
  void *s1 = scratch_for(tb, m, n, k, 1), *s3 = scratch_for(tb, m, n, k, 3);
  npuK_gemm_f32_level_ep(NULL, ta, tb, m, n, k, a, b, e, c1, s1, 1, 1);
  npuK_gemm_f32_level_ep(NULL, ta, tb, m, n, k, a, b, e, c0, NULL, 1, 0);
  npuK_gemm_f32_level_ep(&two, ta, tb, m, n, k, a, b, e, c2, s3, 3, 1);
  if (k > 0) { /* B packed once: the same chains, both levels */
    float *packed = malloc(npuK_gemm_f32_packed_size(n, k)), *cp = alloc_out(m * n);
    npuK_gemm_f32_pack_b(tb, n, k, b, packed);
    npuK_gemm_f32_packed_level_ep(&two, ta, m, n, k, a, packed, e, cp, 3, 1);
    CHECK(same_bits(c1, cp, m * n));
    npuK_gemm_f32_packed_level_ep(NULL, ta, m, n, k, a, packed, e, cp, 1, 0);
    CHECK(same_bits(c1, cp, m * n));
    free(packed), free(cp);
  }
  CHECK(within_bound(ta, tb, m, n, k, a, b, e, c1));
  CHECK(same_bits(c1, c0, m * n));
  CHECK(same_bits(c1, c2, m * n));
  if (!with_ep && k > 0) { /* w - lr d from the tiles = the product, then the update */
    float *w = rand_f32(m * n, 0), *w0 = malloc((size_t)(m * n) * sizeof *w0);
    float *w2 = malloc((size_t)(m * n) * sizeof *w2);
    memcpy(w0, w, (size_t)(m * n) * sizeof *w);
    memcpy(w2, w, (size_t)(m * n) * sizeof *w);
    npuK_sgd_update_f32(NULL, m * n, 0.37f, c1, w0);
    npuK_gemm_f32_sgd_level(NULL, ta, tb, m, n, k, a, b, 0.37f, w, s1, 1, 1);
    npuK_gemm_f32_sgd_level(&two, ta, tb, m, n, k, a, b, 0.37f, w2, s3, 3, 0);
    CHECK(same_bits(w, w0, m * n));
    CHECK(same_bits(w2, w0, m * n));
    free(w), free(w0), free(w2);
  }
  free(a), free(b), free(bias), free(c1), free(c0), free(c2), free(s1), free(s3);
}

/* A session on y = x W with W a float32 constant of f32tile's shapes (x 16 x 64, W 64 x 48):
   the plan packs W once (plan.c prepare_f32_b); y checked against the tiles called directly
   on the same operands when want is given. */
static npu_status frozen_run(npu_context *ctx, void *want) {
  npu_graph *g = NULL;
  npu_session *s = NULL;
  npu_tensor *xt = NULL, *wt = NULL, *yt = NULL;
  int64_t xs[] = {16, 64}, ws[] = {64, 48};
  int x, w, y;
  npu_status st = npu_graph_new(ctx, &g);
  if (!st) st = graph_placeholder(g, "x", NPU_DTYPE_F32, 2, xs, &x);
  if (!st) st = npu_tensor_new(ctx, NPU_DTYPE_F32, 2, ws, &wt);
  if (!st) {
    float *d = npu_tensor_data(wt);
    for (int i = 0; i < 64 * 48; i++) d[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    st = graph_const(g, "w", wt, &w); /* releases wt */
  }
  if (!st) st = graph_op(g, "matmul", "y", 2, (int[]){x, w}, &y);
  if (!st) st = npu_session_new(ctx, g, NULL, &s);
  if (!st) st = npu_tensor_new(ctx, NPU_DTYPE_F32, 2, xs, &xt);
  if (!st) {
    float *d = npu_tensor_data(xt);
    for (int i = 0; i < 16 * 64; i++) d[i] = (float)((i * 53) % 97) / 48.0f - 1.0f;
    st = npu_session_run(s, 1, &x, &xt, 1, &y, &yt, 0, NULL);
  }
  if (!st && want) CHECK(same_bits(npu_tensor_data(yt), want, 16 * 48));
  npu_tensor_release(yt);
  npu_tensor_release(xt);
  npu_session_release(s);
  npu_graph_release(g);
  return st;
}

/* The frozen product through a session (its packed W the plan's), against the kernel; then
   every allocation of it failed in turn: NPU_ERR_NOMEM, nothing leaked. */
static void test_frozen_weights_session(void) {
  float xv[16 * 64], wv[64 * 48], want[16 * 48];
  for (int i = 0; i < 64 * 48; i++) wv[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  for (int i = 0; i < 16 * 64; i++) xv[i] = (float)((i * 53) % 97) / 48.0f - 1.0f;
  npuK_gemm_f32_level_ep(NULL, 0, 0, 16, 48, 64, xv, wv, NULL, want, NULL, 1, 0);
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 1}, &ctx) == NPU_OK);
  scenario_run_once(ctx, &(scenario_def){.run = frozen_run, .ud = want, .what = "frozen"});
  int n_failures = sweep_alloc_failures(ctx, &(scenario_def){.run = frozen_run,
                                                              .what = "frozen sweep"});
  CHECK(n_failures > 10);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* The epilogue in the tile's registers (bias, relu) against the portable twin's
   npuK_epilogue_f32 on stored sums, bit for bit, where the selects matter: sums of +0 and -0
   (A zero, or -0 times a positive B), NaN sums and biases, a -0 bias; bias only; relu only. */
static void ep_in_registers(void) {
  enum { M = 9, N = 40, K = 3 };
  float a[M * K], b[K * N], bias[N], c0[M * N], c1[M * N];
  for (int i = 0; i < M * K; i++) a[i] = i % 3 == 0 ? 0.0f : i % 3 == 1 ? -0.0f : (float)(i % 5) - 2;
  a[4] = NAN;
  for (int i = 0; i < K * N; i++) b[i] = (float)(i % 7) - 3;
  for (int i = 0; i < N; i++) bias[i] = i % 4 == 0 ? -0.0f : i % 4 == 1 ? 0.5f : i % 4 == 2 ? -1 : 0;
  bias[7] = NAN;
  npuK_epilogue eps[] = {{.bias = bias, .act = NPUK_ACT_RELU}, {.bias = bias},
                         {.act = NPUK_ACT_RELU}, {.bias = bias, .act = NPUK_ACT_SIGMOID}};
  for (size_t e = 0; e < sizeof eps / sizeof *eps; e++) {
    npuK_gemm_f32_level_ep(NULL, 0, 0, M, N, K, a, b, &eps[e], c0, NULL, 1, 0);
    npuK_gemm_f32_level_ep(NULL, 0, 0, M, N, K, a, b, &eps[e], c1, NULL, 1, 1);
    CHECK(same_bits(c0, c1, M * N));
  }
  npuK_gemm_f32_level_ep(NULL, 0, 0, M, N, K, a, b, &eps[0], c1, NULL, 1, 1);
  CHECK(signbit(c1[0]) == 0 && c1[0] == 0.0f); /* relu(-0 + -0) is +0 */
}

int main(void) {
  static const int64_t shapes[][3] = {
      {1, 1, 1},    {8, 32, 1},    {7, 33, 5},   {9, 31, 17},  {16, 16, 64}, {3, 10, 256},
      {64, 10, 256}, {17, 48, 33}, {64, 256, 64}, {13, 70, 129}, {256, 64, 3}, {5, 1, 100},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    for (int t = 0; t < 4; t++) {
      const int64_t *s = shapes[i];
      one(t & 1, t >> 1, s[0], s[1], s[2], 0, 0);
      one(t & 1, t >> 1, s[0], s[1], s[2], 0, 1);
    }
  one(0, 0, 9, 40, 20, 2, 0); /* NaN and Inf in A */
  one(1, 1, 9, 40, 20, 2, 1);
  one(0, 0, 4, 5, 0, 0, 1); /* k = 0: the bias, then relu */
  all_positive = 1;          /* long chains that do not cancel: the bound at its widest */
  one(0, 0, 9, 33, 4099, 0, 0);
  one(1, 1, 9, 17, 4099, 0, 1);
  all_positive = 0;
  one(0, 1, 11, 35, 4099, 0, 0);
  one(0, 0, 9, 65, 4099, 0, 1); /* B stored (k, n) beyond L2: packed per call */
  /* C = A B^T with B the larger (dx = dy W^T): computed as C^T = B A^T, then transposed (the
     shapes above with m (k + n) < n k take it too: 3 x 10 x 256, 13 x 70 x 129, ...) */
  one(0, 1, 64, 256, 256, 0, 0);
  one(0, 1, 40, 200, 300, 2, 0); /* rows and columns past the 16 x 16 blocks; NaN, Inf */
  one(0, 1, 64, 256, 256, 0, 1); /* with an epilogue: packed per call as before */
  /* scratch: none where B is read in place (stored (k, n) within L2, or m <= 8), one panel
     (k x 32 floats) a slot where it is packed */
  CHECK(npuK_gemm_f32_scratch_size(0, 64, 256, 784, 2) == 0);
  CHECK(npuK_gemm_f32_scratch_size(0, 8, 4096, 4096, 2) == 0);
  CHECK(npuK_gemm_f32_scratch_size(1, 64, 256, 784, 2) == 2 * 784 * 32 * sizeof(float));
  CHECK(npuK_gemm_f32_scratch_size(0, 9, 65, 4099, 3) == 3 * 4099 * 32 * sizeof(float));
  /* dx = dy W^T, 64 x 256 x 256: C^T (256 x 64) and a panel of dy^T a slot (2 panels) */
  CHECK(npuK_gemm_f32_scratch_size(1, 64, 256, 256, 1) == (64 * 256 + 256 * 32) * sizeof(float));
  CHECK(npuK_gemm_f32_scratch_size(1, 64, 256, 256, 3) == (64 * 256 + 2 * 256 * 32) * sizeof(float));
  /* the switch: F32TILE runs only where npuK_avx512f(), which NPU_NO_AVX512 turns off */
  CHECK(npuK_gemm_f32_takes(NPUK_GEMM_F32TILE, NPUK_F32, NPUK_F32, NPUK_F32) == npuK_avx512f());
  CHECK(!npuK_gemm_f32_takes(NPUK_GEMM_AUTO, NPUK_F32, NPUK_F32, NPUK_F32));
  CHECK(!npuK_gemm_f32_takes(NPUK_GEMM_F32TILE, NPUK_F16, NPUK_F32, NPUK_F32));
  CHECK(!npuK_gemm_f32_wins(1, 256, 784)); /* batch one keeps the matrix-vector products */
  CHECK(npuK_gemm_f32_wins(64, 256, 784) == npuK_avx512f());
  ep_in_registers();
  test_frozen_weights_session();
  return check_summary("test_gemm_f32");
}
