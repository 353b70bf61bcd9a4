/* test_kernels.c: tests for csrc/kernels and csrc/core/half.h.
 *
 * Every optimised kernel is compared with its _ref twin on random inputs of awkward sizes;
 * values that could be subtly wrong are checked against hand-computed cases; and every
 * parallel kernel is run through fake pools (real pthreads, and a serial pool that cuts ranges
 * at odd places) and must match the serial run bitwise. Test-only code may allocate.
 */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/half.h"
#include "kernels/kernels.h"
#include "kernels/kfast.h"
#include "kernels/kgrad.h"
#include "kernels/kmath.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_u64(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static int64_t rng_int(int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(rng_u64() % (uint64_t)(hi - lo + 1));
}

static float rng_f32(void) { /* [-1, 1) */
  return (float)((double)(rng_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rand_f32(int64_t n) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; i++) p[i] = rng_f32();
  return p;
}

static double *rand_f64(int64_t n) {
  double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  for (int64_t i = 0; i < n; i++) p[i] = rng_f32() * 3.0 + rng_f32() * 1e-9;
  return p;
}

static int64_t prod(int ndim, const int64_t *d) {
  int64_t p = 1;
  for (int i = 0; i < ndim; i++) p *= d[i];
  return p;
}

static int bits_equal(const void *a, const void *b, size_t n) {
  return memcmp(a, b, n) == 0;
}

/* Max relative difference between two float arrays (NaNs must match). */
static double max_rel_f32(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(a[i]) || isnan(b[i])) {
      if (!(isnan(a[i]) && isnan(b[i]))) return INFINITY;
      continue;
    }
    double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) > 1 ? fabs((double)b[i]) : 1);
    if (d > m) m = d;
  }
  return m;
}

/* ---- fake pools --------------------------------------------------------------------------- */

typedef struct fake_pool {
  int threads; /* 0: run chunks serially in this thread */
  int64_t chunk; /* fixed chunk size, ignoring grain (0: n / 5 rounded up) */
} fake_pool;

typedef struct fp_task {
  npuK_range_fn fn;
  void *arg;
  int64_t n, chunk;
  int tid, threads;
} fp_task;

static void *fp_thread(void *p) {
  fp_task *t = p;
  int64_t n_chunks = (t->n + t->chunk - 1) / t->chunk;
  for (int64_t c = t->tid; c < n_chunks; c += t->threads) {
    int64_t b = c * t->chunk, e = b + t->chunk < t->n ? b + t->chunk : t->n;
    t->fn(t->arg, b, e);
  }
  return NULL;
}

static void fake_parallel_for(void *self, int64_t n, int64_t grain, npuK_range_fn fn, void *arg) {
  fake_pool *fp = self;
  (void)grain;
  int64_t chunk = fp->chunk > 0 ? fp->chunk : (n + 4) / 5;
  if (fp->threads == 0) {
    fp_task t = {fn, arg, n, chunk, 0, 1};
    fp_thread(&t);
    return;
  }
  pthread_t th[8];
  fp_task tasks[8];
  for (int i = 0; i < fp->threads; i++) {
    tasks[i] = (fp_task){fn, arg, n, chunk, i, fp->threads};
    pthread_create(&th[i], NULL, fp_thread, &tasks[i]);
  }
  for (int i = 0; i < fp->threads; i++) pthread_join(th[i], NULL);
}

static fake_pool fp_two = {2, 0};   /* 2 pthreads, 5 chunks */
static fake_pool fp_odd = {0, 7};   /* serial, chunks of 7 items: ranges start mid-row */
static npuK_pool pool_two = {fake_parallel_for, &fp_two, NULL};
static npuK_pool pool_odd = {fake_parallel_for, &fp_odd, NULL};

/* ---- half --------------------------------------------------------------------------------- */

static void test_half(void) {
  long bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = npu_f16_to_f32((uint16_t)h);
    uint16_t back = npu_f32_to_f16(f);
    int is_nan = ((h & 0x7c00u) == 0x7c00u) && (h & 0x3ffu);
    if (is_nan) {
      if (!isnan(f) || !(((back & 0x7c00u) == 0x7c00u) && (back & 0x3ffu))) bad++;
    } else if (back != h) {
      bad++;
    }
  }
  CHECK_EQ_I64(bad, 0);
  /* bf16 -> f32 -> bf16 round trip, all patterns */
  bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = npu_bf16_to_f32((uint16_t)h);
    uint16_t back = npu_f32_to_bf16(f);
    if (isnan(f) ? !isnan(npu_bf16_to_f32(back)) : back != h) bad++;
  }
  CHECK_EQ_I64(bad, 0);

  CHECK_EQ_I64(npu_f32_to_f16(65504.0f), 0x7bff);
  CHECK_EQ_I64(npu_f32_to_f16(65519.99f), 0x7bff);
  CHECK_EQ_I64(npu_f32_to_f16(65520.0f), 0x7c00);
  CHECK_EQ_I64(npu_f32_to_f16(-65520.0f), 0xfc00);
  CHECK_EQ_I64(npu_f32_to_f16(1e10f), 0x7c00);
  CHECK_EQ_I64(npu_f32_to_f16(INFINITY), 0x7c00);
  CHECK(isnan(npu_f16_to_f32(npu_f32_to_f16(NAN))));
  CHECK_EQ_I64(npu_f32_to_f16(1.0f / 3.0f), 0x3555);
  CHECK_EQ_I64(npu_f32_to_f16(1.0f), 0x3c00);
  CHECK_EQ_I64(npu_f32_to_f16(-0.0f), 0x8000);
  CHECK_EQ_I64(npu_f32_to_f16(ldexpf(1, -24)), 0x0001);  /* smallest subnormal */
  CHECK_EQ_I64(npu_f32_to_f16(ldexpf(1, -25)), 0x0000);  /* tie -> even (0) */
  CHECK_EQ_I64(npu_f32_to_f16(ldexpf(1.0001f, -25)), 0x0001);
  CHECK_EQ_I64(npu_f32_to_f16(ldexpf(3, -25)), 0x0002);  /* tie between 1 and 2 -> 2 */
  CHECK_EQ_I64(npu_f32_to_f16(ldexpf(5, -25)), 0x0002);  /* tie between 2 and 3 -> 2 */
  CHECK_EQ_I64(npu_f32_to_f16(ldexpf(1, -14)), 0x0400);  /* smallest normal */
  CHECK_EQ_I64(npu_f32_to_f16(ldexpf(1, -14) - ldexpf(1, -25)), 0x0400); /* tie 0x3ff/0x400 */
  CHECK_EQ_I64(npu_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);     /* tie -> even */
  CHECK_EQ_I64(npu_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02); /* tie -> even (up) */
  CHECK_EQ_I64(npu_f32_to_f16(1.0f + ldexpf(1.5f, -11)), 0x3c01);
  CHECK(npu_f16_to_f32(0x0001) == ldexpf(1, -24));
  CHECK(npu_f16_to_f32(0x7bff) == 65504.0f);
  CHECK(npu_f16_to_f32(0x83ff) == -1023 * ldexpf(1, -24));

  CHECK_EQ_I64(npu_f32_to_bf16(1.0f), 0x3f80);
  CHECK_EQ_I64(npu_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);     /* tie -> even */
  CHECK_EQ_I64(npu_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82); /* tie -> even */
  CHECK_EQ_I64(npu_f32_to_bf16(FLT_MAX), 0x7f80);
  CHECK_EQ_I64(npu_f32_to_bf16(-INFINITY), 0xff80);
  CHECK(isnan(npu_bf16_to_f32(npu_f32_to_bf16(NAN))));
  CHECK(isnan(npu_bf16_to_f32(npu_f32_to_bf16(npu_bits_f32(0x7f800001u))))); /* low payload */

#ifdef __FLT16_MAX__
  /* Compare with the compiler's correctly rounded _Float16 conversion on random floats. */
  bad = 0;
  for (int i = 0; i < 300000; i++) {
    uint32_t u = (uint32_t)rng_u64();
    if (i % 3 == 0) u = (u & 0x87ffffffu) | 0x30000000u; /* near the f16 range */
    float f = npu_bits_f32(u);
    if (isnan(f)) continue;
    _Float16 h = (_Float16)f;
    uint16_t hb;
    memcpy(&hb, &h, 2);
    if (hb != npu_f32_to_f16(f)) bad++;
  }
  CHECK_EQ_I64(bad, 0);
#endif
}

/* ---- matmul ------------------------------------------------------------------------------- */

static void test_matmul(void) {
  static const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {64, 31, 65}, {2, 1, 0}};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
        float *a = rand_f32(m * k), *b = rand_f32(k * n);
        float *c1 = rand_f32(m * n), *c2 = rand_f32(m * n);
        npuK_matmul_f32_blas(NULL, ta, tb, m, n, k, a, b, c1);
        npuK_matmul_f32_ref(NULL, ta, tb, m, n, k, a, b, c2);
        CHECK(max_rel_f32(c1, c2, m * n) < 1e-5);
        double *ad = rand_f64(m * k), *bd = rand_f64(k * n), *d1 = rand_f64(m * n),
               *d2 = rand_f64(m * n);
        npuK_matmul_f64_blas(NULL, ta, tb, m, n, k, ad, bd, d1);
        npuK_matmul_f64_ref(NULL, ta, tb, m, n, k, ad, bd, d2);
        double md = 0;
        for (int64_t i = 0; i < m * n; i++) md = fmax(md, fabs(d1[i] - d2[i]));
        CHECK(md < 1e-12);
        free(a); free(b); free(c1); free(c2); free(ad); free(bd); free(d1); free(d2);
      }
  /* hand case: (2,3) x (3,2), and with trans_b */
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12}, c[4];
  npuK_matmul_f32_blas(NULL, 0, 0, 2, 2, 3, a, b, c);
  CHECK(c[0] == 58 && c[1] == 64 && c[2] == 139 && c[3] == 154);
  float bt[6] = {7, 9, 11, 8, 10, 12};
  npuK_matmul_f32_ref(NULL, 0, 1, 2, 2, 3, a, bt, c);
  CHECK(c[0] == 58 && c[1] == 64 && c[2] == 139 && c[3] == 154);
  int old = npuK_blas_get_threads();
  npuK_blas_set_threads(1);
  CHECK_EQ_I64(npuK_blas_get_threads(), 1);
  npuK_blas_set_threads(old);
}

/* Few rows (blas.c: GEMV_MAX_M): rows as matrix-vector products where that is faster — one
   row against many columns, or up to four rows of a product too big for OpenBLAS's small
   kernel — else sgemm.  Whatever the path: within float32 rounding of the float64 sum (each
   |c - exact| <= k 2^-23 sum|a||b|, the classic bound), the same bits through a 2-thread and
   an odd-chunk pool, the epilogue's result (bias, relu) within the same bound of the plain
   product plus the epilogue (the bias enters the sum first there), and float64 likewise.  Shapes: m 1, 2, 3, 5 (5: sgemm) against n of 10
   (sgemm), 200 (gemv), 4100 (column blocks), every transpose. */
static void test_matmul_small_m(void) {
  uint64_t saved_rng = rng_state; /* the later tests keep the draws they were written with */
  static const int64_t sizes[][3] = {{1, 10, 300},  {1, 200, 33},  {1, 4100, 600},
                                     {2, 300, 2000}, {3, 700, 600}, {5, 300, 1000},
                                     {2, 1, 3},     {1, 129, 1}};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
        float *a = rand_f32(m * k), *b = rand_f32(k * n), *bias = rand_f32(n);
        float *c1 = rand_f32(m * n), *c2 = rand_f32(m * n), *c3 = rand_f32(m * n);
        npuK_matmul_f32_blas(NULL, ta, tb, m, n, k, a, b, c1);
        int ok = 1;
        for (int64_t i = 0; i < m && ok; i++)
          for (int64_t j = 0; j < n && ok; j++) {
            double exact = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
              double x = a[ta ? p * m + i : i * k + p], y = b[tb ? j * k + p : p * n + j];
              exact += x * y;
              mag += fabs(x * y);
            }
            ok = fabs(c1[i * n + j] - exact) <= (double)k * 0x1p-23 * mag + 1e-30;
          }
        CHECK(ok);
        npuK_matmul_f32_blas(&pool_two, ta, tb, m, n, k, a, b, c2);
        CHECK(bits_equal(c1, c2, (size_t)(m * n) * sizeof *c1));
        npuK_matmul_f32_blas(&pool_odd, ta, tb, m, n, k, a, b, c2);
        CHECK(bits_equal(c1, c2, (size_t)(m * n) * sizeof *c1));
        npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
        npuK_matmul_f32_blas_ep(&pool_two, ta, tb, m, n, k, a, b, &ep, c2);
        npuK_matmul_f32_blas_ep(NULL, ta, tb, m, n, k, a, b, &ep, c3);
        CHECK(bits_equal(c2, c3, (size_t)(m * n) * sizeof *c2));
        npuK_epilogue_f32(&ep, m, n, n, c1);
        int within = 1; /* the bias enters the sum first there, last here: k + 2 roundings */
        for (int64_t i = 0; i < m && within; i++)
          for (int64_t j = 0; j < n && within; j++) {
            double mag = fabs(bias[j]);
            for (int64_t p = 0; p < k; p++)
              mag += fabs((double)a[ta ? p * m + i : i * k + p] * b[tb ? j * k + p : p * n + j]);
            within = fabs((double)c2[i * n + j] - c1[i * n + j]) <= (double)(k + 2) * 0x1p-23 * mag;
          }
        CHECK(within);
        double *ad = rand_f64(m * k), *bd = rand_f64(k * n), *d1 = rand_f64(m * n),
               *d2 = rand_f64(m * n);
        npuK_matmul_f64_blas(NULL, ta, tb, m, n, k, ad, bd, d1);
        npuK_matmul_f64_ref(NULL, ta, tb, m, n, k, ad, bd, d2);
        double md = 0;
        for (int64_t i = 0; i < m * n; i++) md = fmax(md, fabs(d1[i] - d2[i]));
        CHECK(md < 1e-11 * (double)k);
        npuK_matmul_f64_blas(&pool_two, ta, tb, m, n, k, ad, bd, d2);
        CHECK(bits_equal(d1, d2, (size_t)(m * n) * sizeof *d1));
        free(a); free(b); free(bias); free(c1); free(c2); free(c3);
        free(ad); free(bd); free(d1); free(d2);
      }
  rng_state = saved_rng;
}

/* npuK_matmul_f32_sgd: w - lr * (op(A) op(B)) block by block from scratch, the same bits as
   the matmul kernel, then lr * d, then w - that; bitwise the same through a 2-thread pool
   (more slots, more scratch) and an odd-chunk one.  Shapes: few rows (m 1, 2, 3, 5: sgemv or
   sgemm), row blocks (m 600 of a product over SMALL_WORK), column blocks (n 1100), every
   transpose. */
static void test_matmul_sgd(void) {
  uint64_t saved_rng = rng_state;
  static const int64_t sizes[][3] = {{1, 300, 20}, {2, 10, 7},    {3, 700, 600},
                                     {5, 17, 9},   {600, 64, 64}, {40, 1100, 64}};
  const float lr = 0.0123f;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
        float *a = rand_f32(m * k), *b = rand_f32(k * n), *w = rand_f32(m * n);
        float *d = malloc((size_t)(m * n) * sizeof *d), *want = malloc((size_t)(m * n) * sizeof *d);
        float *w1 = malloc((size_t)(m * n) * sizeof *d), *w2 = malloc((size_t)(m * n) * sizeof *d);
        npuK_matmul_f32_blas(NULL, ta, tb, m, n, k, a, b, d);
        for (int64_t i = 0; i < m * n; i++) {
          float step = lr * d[i];
          want[i] = w[i] - step;
        }
        size_t bytes1 = npuK_matmul_sgd_scratch_size(m, n, k, 1);
        size_t bytes3 = npuK_matmul_sgd_scratch_size(m, n, k, 3);
        CHECK(bytes1 > 0 && bytes3 >= bytes1);
        float *scratch = malloc(bytes3);
        memcpy(w1, w, (size_t)(m * n) * sizeof *w);
        npuK_matmul_f32_sgd(NULL, ta, tb, m, n, k, a, b, lr, w1, scratch, 1);
        CHECK(bits_equal(w1, want, (size_t)(m * n) * sizeof *w));
        memcpy(w2, w, (size_t)(m * n) * sizeof *w);
        npuK_matmul_f32_sgd(&pool_two, ta, tb, m, n, k, a, b, lr, w2, scratch, 3);
        CHECK(bits_equal(w2, want, (size_t)(m * n) * sizeof *w));
        memcpy(w2, w, (size_t)(m * n) * sizeof *w);
        npuK_matmul_f32_sgd(&pool_odd, ta, tb, m, n, k, a, b, lr, w2, scratch, 3);
        CHECK(bits_equal(w2, want, (size_t)(m * n) * sizeof *w));
        free(a); free(b); free(w); free(d); free(want); free(w1); free(w2); free(scratch);
      }
  CHECK_EQ_I64((int64_t)npuK_matmul_sgd_scratch_size(3, 4, 0, 1), 0);
  rng_state = saved_rng;
}

/* npuK_matmul_half_sgd: A and B stored bfloat16 / float16, the product rounded to d_dtype
   before the update: the bits of the matmul call (BF16DOT where the process has it, else the
   widening path), a Cast to float32 and mul then sub, at 1 and 3 slots; NaN and Inf in A
   reach w.  npuK_sgd_update_half alone: a float32 d is npuK_sgd_update_f32's, a reduced one
   that of d widened first. */
static void test_matmul_half_sgd(void) {
  uint64_t saved_rng = rng_state;
  static const int64_t sizes[][3] = {{1, 300, 20}, {3, 70, 64}, {64, 256, 33}, {40, 1100, 64}};
  static const npuK_dtype dts[][3] = {{NPUK_BF16, NPUK_BF16, NPUK_BF16},
                                      {NPUK_F16, NPUK_F16, NPUK_F16},
                                      {NPUK_BF16, NPUK_BF16, NPUK_F32}};
  const float lr = 0.0123f;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2], mn = m * n;
          npuK_dtype adt = dts[t][0], bdt = dts[t][1], ddt = dts[t][2];
          float *af = rand_f32(m * k), *bf = rand_f32(k * n), *w = rand_f32(mn);
          if (s == 1) af[5] = NAN, af[k + 1] = INFINITY; /* rows 0 and 1 of op(A) or columns */
          uint16_t *a = malloc((size_t)(m * k) * 2), *b = malloc((size_t)(k * n) * 2);
          npuK_cast(NULL, m * k, NPUK_F32, af, adt, a);
          npuK_cast(NULL, k * n, NPUK_F32, bf, bdt, b);
          /* the unfused steps: matmul into d_dtype, Cast to float32, mul then sub */
          void *d = malloc((size_t)mn * 4);
          float *df = malloc((size_t)mn * 4), *want = malloc((size_t)mn * 4);
          size_t mm_bytes = npuK_matmul_half_b_scratch_size(m, n, k, 3, adt, bdt, ddt,
                                                            NPUK_GEMM_BF16DOT);
          float *mm_scratch = malloc(mm_bytes ? mm_bytes : 1);
          npuK_matmul_half_b_algo_ep(NULL, ta, tb, m, n, k, a, adt, b, bdt, NULL, d, ddt,
                                     mm_scratch, 1, NPUK_GEMM_BF16DOT);
          npuK_cast(NULL, mn, ddt, d, NPUK_F32, df);
          memcpy(want, w, (size_t)mn * 4);
          npuK_sgd_update_f32(NULL, mn, lr, df, want);
          size_t bytes1 = npuK_matmul_half_sgd_scratch_size(m, n, k, 1, adt, bdt, ddt,
                                                            NPUK_GEMM_BF16DOT);
          size_t bytes3 = npuK_matmul_half_sgd_scratch_size(m, n, k, 3, adt, bdt, ddt,
                                                            NPUK_GEMM_BF16DOT);
          /* the product's buffer, unless the native GEMM's tiles update w themselves */
          CHECK(npuK_gemm_bf16_takes(NPUK_GEMM_BF16DOT, adt, bdt) ||
                bytes1 >= (size_t)mn * npuK_dtype_size(ddt));
          CHECK(bytes3 >= bytes1);
          void *scratch = malloc(bytes3);
          float *w1 = malloc((size_t)mn * 4);
          memcpy(w1, w, (size_t)mn * 4);
          npuK_matmul_half_sgd(NULL, ta, tb, m, n, k, a, adt, b, bdt, ddt, lr, w1, scratch, 1,
                               NPUK_GEMM_BF16DOT);
          CHECK(bits_equal(w1, want, (size_t)mn * 4));
          memcpy(w1, w, (size_t)mn * 4);
          npuK_matmul_half_sgd(&pool_odd, ta, tb, m, n, k, a, adt, b, bdt, ddt, lr, w1, scratch,
                               3, NPUK_GEMM_BF16DOT);
          CHECK(bits_equal(w1, want, (size_t)mn * 4));
          if (adt == NPUK_BF16 && bdt == NPUK_BF16) { /* the tile path at both levels */
            size_t gb = npuK_gemm_bf16_scratch_size(ta, tb, m, n, k, 3);
            void *gs = malloc(gb ? gb : 1);
            float *want0 = malloc((size_t)mn * 4);
            npuK_gemm_bf16_level_ep(NULL, ta, tb, m, n, k, a, b, NULL, d, ddt, gs, 1, 0);
            npuK_cast(NULL, mn, ddt, d, NPUK_F32, df);
            memcpy(want0, w, (size_t)mn * 4);
            npuK_sgd_update_f32(NULL, mn, lr, df, want0);
            for (int level = 0; level < 2; level++) {
              memcpy(w1, w, (size_t)mn * 4);
              npuK_gemm_bf16_sgd_level(&pool_odd, ta, tb, m, n, k, a, b, ddt, lr, w1, gs, 3,
                                       level);
              CHECK(bits_equal(w1, want0, (size_t)mn * 4));
            }
            free(gs);
            free(want0);
          }
          if (s == 1) { /* the NaN in A reaches the outputs its row or column of op(A) makes */
            int any_nan = 0;
            for (int64_t i = 0; i < mn; i++) any_nan |= isnan(w1[i]);
            CHECK(any_nan);
          }
          free(af); free(bf); free(w); free(a); free(b); free(d); free(df); free(want);
          free(mm_scratch); free(scratch); free(w1);
        }
  CHECK_EQ_I64((int64_t)npuK_matmul_half_sgd_scratch_size(3, 4, 0, 1, NPUK_BF16, NPUK_BF16,
                                                          NPUK_BF16, NPUK_GEMM_BF16DOT), 0);
  /* the update alone, n not a multiple of its 1024-element blocks */
  int64_t n = 5000;
  float *df = rand_f32(n), *w = rand_f32(n), *w1 = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
  uint16_t *dh = malloc((size_t)n * 2);
  df[17] = NAN, df[18] = -INFINITY;
  for (int t = 0; t < 2; t++) {
    npuK_dtype dt = t ? NPUK_F16 : NPUK_BF16;
    npuK_cast(NULL, n, NPUK_F32, df, dt, dh);
    float *wide = malloc((size_t)n * 4);
    npuK_cast(NULL, n, dt, dh, NPUK_F32, wide);
    memcpy(want, w, (size_t)n * 4);
    npuK_sgd_update_f32(NULL, n, 0.5f, wide, want);
    memcpy(w1, w, (size_t)n * 4);
    npuK_sgd_update_half(&pool_odd, n, 0.5f, dh, dt, w1);
    CHECK(bits_equal(w1, want, (size_t)n * 4));
    CHECK(isnan(w1[17]) && w1[18] == INFINITY);
    free(wide);
  }
  memcpy(want, w, (size_t)n * 4);
  npuK_sgd_update_f32(NULL, n, 0.5f, df, want);
  memcpy(w1, w, (size_t)n * 4);
  npuK_sgd_update_half(NULL, n, 0.5f, df, NPUK_F32, w1);
  CHECK(bits_equal(w1, want, (size_t)n * 4));
  free(df); free(w); free(w1); free(want); free(dh);
  rng_state = saved_rng;
}

/* ---- binary ------------------------------------------------------------------------------- */

/* Broadcast strides of an input of shape (in_ndim, in_dims) against an output of out_ndim. */
static void bcast_strides(int out_ndim, int in_ndim, const int64_t *in_dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = out_ndim - 1; i >= 0; i--) {
    int k = i - (out_ndim - in_ndim);
    if (k < 0 || in_dims[k] == 1) {
      strides[i] = 0;
    } else {
      strides[i] = s;
    }
    if (k >= 0) s *= in_dims[k];
  }
}

/* A random broadcasting pair: output dims, and each input's dims (some dims 1 or missing). */
static int rand_bcast(int64_t *od, int64_t *ad, int *and_, int64_t *bd, int *bnd) {
  int nd = (int)rng_int(0, 5);
  for (int i = 0; i < nd; i++) od[i] = rng_int(1, 6);
  if (rng_int(0, 9) == 0 && nd > 0) od[rng_int(0, nd - 1)] = 0; /* sometimes empty */
  *and_ = nd - (int)rng_int(0, nd > 0 ? 1 : 0);
  *bnd = nd - (int)rng_int(0, nd);
  for (int i = 0; i < *and_; i++) ad[i] = rng_int(0, 2) ? od[nd - *and_ + i] : 1;
  for (int i = 0; i < *bnd; i++) bd[i] = rng_int(0, 2) ? od[nd - *bnd + i] : 1;
  return nd;
}

#define TEST_BINARY_DT(T, dt, GEN)                                                             \
  static void test_binary_##dt(void) {                                                         \
    for (int iter = 0; iter < 150; iter++) {                                                   \
      int64_t od[8], ad[8], bd[8], as[8], bs[8];                                               \
      int an, bn, nd = rand_bcast(od, ad, &an, bd, &bn);                                       \
      if (iter % 5 == 0) { /* same shape, dense */                                             \
        an = bn = nd;                                                                          \
        memcpy(ad, od, sizeof od);                                                             \
        memcpy(bd, od, sizeof od);                                                             \
      }                                                                                        \
      if (iter % 7 == 0) bn = 0; /* scalar */                                                  \
      bcast_strides(nd, an, ad, as);                                                           \
      bcast_strides(nd, bn, bd, bs);                                                           \
      int64_t na = prod(an, ad), nb = prod(bn, bd), no = prod(nd, od);                         \
      T *a = malloc((size_t)(na + 1) * sizeof(T)), *b = malloc((size_t)(nb + 1) * sizeof(T));  \
      T *o1 = malloc((size_t)(no + 1) * sizeof(T)), *o2 = malloc((size_t)(no + 1) * sizeof(T)); \
      T *o3 = malloc((size_t)(no + 1) * sizeof(T)), *o4 = malloc((size_t)(no + 1) * sizeof(T)); \
      for (int64_t i = 0; i < na; i++) a[i] = GEN;                                             \
      for (int64_t i = 0; i < nb; i++) b[i] = GEN;                                             \
      for (int op = 0; op < NPUK_BIN_COUNT; op++) {                                            \
        npuK_binary_##dt(NULL, (npuK_binop)op, nd, od, a, as, b, bs, o1);                      \
        npuK_binary_##dt##_ref(NULL, (npuK_binop)op, nd, od, a, as, b, bs, o2);                \
        npuK_binary_##dt(&pool_two, (npuK_binop)op, nd, od, a, as, b, bs, o3);                 \
        npuK_binary_##dt(&pool_odd, (npuK_binop)op, nd, od, a, as, b, bs, o4);                 \
        CHECK(bits_equal(o1, o2, (size_t)no * sizeof(T)));                                     \
        CHECK(bits_equal(o1, o3, (size_t)no * sizeof(T)));                                     \
        CHECK(bits_equal(o1, o4, (size_t)no * sizeof(T)));                                     \
      }                                                                                        \
      uint8_t *c1 = malloc((size_t)no + 1), *c2 = malloc((size_t)no + 1);                      \
      for (int op = 0; op < NPUK_CMP_COUNT; op++) {                                            \
        npuK_compare_##dt(NULL, (npuK_cmpop)op, nd, od, a, as, b, bs, c1);                     \
        npuK_compare_##dt(&pool_odd, (npuK_cmpop)op, nd, od, a, as, b, bs, c2);                \
        CHECK(bits_equal(c1, c2, (size_t)no));                                                 \
      }                                                                                        \
      free(a); free(b); free(o1); free(o2); free(o3); free(o4); free(c1); free(c2);            \
    }                                                                                          \
  }

TEST_BINARY_DT(float, f32, (float)rng_int(-4, 4) * 0.5f + (rng_int(0, 20) == 0 ? NAN : 0.0f))
TEST_BINARY_DT(double, f64, rng_f32() * 4.0)
TEST_BINARY_DT(int32_t, i32, (int32_t)(rng_int(0, 30) == 0 ? INT32_MIN : rng_int(-9, 9)))
TEST_BINARY_DT(int64_t, i64, (rng_int(0, 30) == 0 ? INT64_MIN : rng_int(-9, 9)))

static void test_binary_hand(void) {
  /* (2,1,3) + (4,1) -> (2,4,3) */
  float a[6] = {1, 2, 3, 10, 20, 30}, b[4] = {100, 200, 300, 400}, o[24];
  int64_t ad[3] = {2, 1, 3}, bd[2] = {4, 1}, od[3] = {2, 4, 3}, as[3], bs[3];
  bcast_strides(3, 3, ad, as);
  bcast_strides(3, 2, bd, bs);
  CHECK(as[0] == 3 && as[1] == 0 && as[2] == 1 && bs[0] == 0 && bs[1] == 1 && bs[2] == 0);
  npuK_binary_f32(NULL, NPUK_BIN_ADD, 3, od, a, as, b, bs, o);
  int ok = 1;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 3; k++)
        if (o[(i * 4 + j) * 3 + k] != a[i * 3 + k] + b[j]) ok = 0;
  CHECK(ok);
  CHECK(o[23] == 430 && o[0] == 101);

  /* integer semantics */
  int32_t x[8] = {7, -7, 7, -7, 5, INT32_MIN, INT32_MIN, 0};
  int32_t y[8] = {2, 2, -2, -2, 0, -1, 3, 0};
  int32_t r[8];
  int64_t d1[1] = {8}, s1[1] = {1};
  npuK_binary_i32(NULL, NPUK_BIN_DIV, 1, d1, x, s1, y, s1, r);
  CHECK(r[0] == 3 && r[1] == -3 && r[2] == -3 && r[3] == 3 && r[4] == 0 && r[5] == INT32_MIN &&
        r[7] == 0);
  npuK_binary_i32(NULL, NPUK_BIN_FLOOR_DIV, 1, d1, x, s1, y, s1, r);
  CHECK(r[0] == 3 && r[1] == -4 && r[2] == -4 && r[3] == 3 && r[4] == 0 && r[5] == INT32_MIN);
  npuK_binary_i32(NULL, NPUK_BIN_FLOOR_MOD, 1, d1, x, s1, y, s1, r);
  CHECK(r[0] == 1 && r[1] == 1 && r[2] == -1 && r[3] == -1 && r[4] == 0 && r[5] == 0);
  CHECK(r[6] == 1); /* INT32_MIN mod 3: -2147483648 = -715827883*3 + 1 */
  npuK_binary_i32(NULL, NPUK_BIN_ADD, 1, d1, x, s1, y, s1, r);
  CHECK(r[5] == INT32_MAX); /* wraps */
  npuK_binary_i32(NULL, NPUK_BIN_POW, 1, d1, x, s1, y, s1, r);
  CHECK(r[0] == 49 && r[1] == 49 && r[2] == 0 && r[4] == 1 && r[7] == 1);

  float fx[4] = {-7.5f, 7.5f, NAN, 1}, fy[4] = {2, -2, 1, NAN}, fr[4];
  int64_t d4[1] = {4};
  npuK_binary_f32(NULL, NPUK_BIN_FLOOR_MOD, 1, d4, fx, s1, fy, s1, fr);
  CHECK(fr[0] == 0.5f && fr[1] == -0.5f);
  npuK_binary_f32(NULL, NPUK_BIN_FLOOR_DIV, 1, d4, fx, s1, fy, s1, fr);
  CHECK(fr[0] == -4 && fr[1] == -4);
  npuK_binary_f32(NULL, NPUK_BIN_MAXIMUM, 1, d4, fx, s1, fy, s1, fr);
  CHECK(fr[0] == 2 && fr[1] == 7.5f && isnan(fr[2]) && isnan(fr[3]));
  npuK_binary_f32(NULL, NPUK_BIN_MINIMUM, 1, d4, fx, s1, fy, s1, fr);
  CHECK(fr[0] == -7.5f && isnan(fr[2]) && isnan(fr[3]));
  npuK_binary_f32(NULL, NPUK_BIN_SQUARED_DIFFERENCE, 1, d4, fx, s1, fy, s1, fr);
  CHECK(fr[0] == 90.25f);
  { /* the 8-element bodies and the tail (n = 19), NaN on either side, b dense or one value */
    float ga[19], gb[19], gr[19];
    int64_t d19[1] = {19}, s0[1] = {0};
    for (int i = 0; i < 19; i++) ga[i] = (float)(i % 5) - 2, gb[i] = (float)(i % 3) - 1;
    ga[3] = NAN, gb[9] = NAN, ga[17] = NAN, gb[17] = NAN;
    for (int op = 0; op < 2; op++)
      for (int scalar = 0; scalar < 2; scalar++) {
        npuK_binary_f32(NULL, op ? NPUK_BIN_MINIMUM : NPUK_BIN_MAXIMUM, 1, d19, ga, s1, gb,
                        scalar ? s0 : s1, gr);
        for (int i = 0; i < 19; i++) {
          float p = ga[i], q = scalar ? gb[0] : gb[i];
          float want = p != p || q != q ? NAN : op ? fminf(p, q) : fmaxf(p, q);
          CHECK((want != want && gr[i] != gr[i]) || gr[i] == want);
        }
      }
  }
  uint8_t cr[4];
  npuK_compare_f32(NULL, NPUK_CMP_LESS, 1, d4, fx, s1, fy, s1, cr);
  CHECK(cr[0] == 1 && cr[1] == 0 && cr[2] == 0 && cr[3] == 0);
  npuK_compare_f32(NULL, NPUK_CMP_NOT_EQUAL, 1, d4, fx, s1, fy, s1, cr);
  CHECK(cr[2] == 1 && cr[3] == 1);
  uint8_t la[4] = {0, 1, 0, 2}, lb[4] = {0, 0, 1, 1}, lr[4];
  npuK_logical_bool(NULL, NPUK_LOGICAL_AND, 1, d4, la, s1, lb, s1, lr);
  CHECK(lr[0] == 0 && lr[1] == 0 && lr[2] == 0 && lr[3] == 1);
  npuK_logical_bool(NULL, NPUK_LOGICAL_XOR, 1, d4, la, s1, lb, s1, lr);
  CHECK(lr[0] == 0 && lr[1] == 1 && lr[2] == 1 && lr[3] == 0);
  /* ndim 0 */
  float sa = 2, sb = 3, so = 0;
  npuK_binary_f32(NULL, NPUK_BIN_MUL, 0, NULL, &sa, NULL, &sb, NULL, &so);
  CHECK(so == 6);
  /* in-place with a dense a */
  float ip[4] = {1, 2, 3, 4}, one = 1;
  int64_t zs[1] = {0};
  npuK_binary_f32(NULL, NPUK_BIN_SUB, 1, d4, ip, s1, &one, zs, ip);
  CHECK(ip[0] == 0 && ip[3] == 3);
}

/* ---- unary, bias_add, softmax ------------------------------------------------------------- */

static void test_unary(void) {
  enum { N = 1001 };
  float x[N], y[N], y2[N];
  double xd[N], yd[N];
  for (int i = 0; i < N; i++) {
    x[i] = (float)(i - 500) * 0.2f;
    xd[i] = x[i];
  }
  for (int op = 0; op < NPUK_UN_COUNT; op++) {
    CHECK(npuK_unary_supported((npuK_unop)op, NPUK_F32));
    CHECK(npuK_unary_f32(NULL, (npuK_unop)op, N, x, y) == 0);
    CHECK(npuK_unary_f32(&pool_two, (npuK_unop)op, N, x, y2) == 0);
    CHECK(bits_equal(y, y2, sizeof y));
    CHECK(npuK_unary_f64(NULL, (npuK_unop)op, N, xd, yd) == 0);
    double worst = 0;
    for (int i = 0; i < N; i++) {
      if (isnan(yd[i])) {
        if (!isnan(y[i])) worst = INFINITY;
        continue;
      }
      if (fabs(yd[i]) > FLT_MAX) { /* overflows float */
        if (!isinf(y[i]) || (y[i] > 0) != (yd[i] > 0)) worst = INFINITY;
        continue;
      }
      if (fabs(yd[i]) < FLT_MIN) { /* float subnormal range: absolute, one subnormal ulp */
        if (fabs(y[i] - yd[i]) > 1.5e-45) worst = INFINITY;
        continue;
      }
      worst = fmax(worst, fabs(y[i] - yd[i]) / fabs(yd[i]));
    }
    CHECK(worst < 4e-6); /* f32 agrees with f64 to a few ulp, including tiny sigmoids */
  }
  float big[4] = {-100, 100, -1000, 1000}, sb[4];
  npuK_unary_f32(NULL, NPUK_UN_SIGMOID, 4, big, sb);
  CHECK(fabs(sb[0] - 3.720075976e-44) <= 1.5e-45); /* subnormal: one ulp */
  CHECK(sb[0] > 0 && sb[1] == 1 && sb[2] == 0 && sb[3] == 1);
  float r6[3] = {-1, 3, 9}, nan1 = NAN;
  npuK_unary_f32(NULL, NPUK_UN_RELU6, 3, r6, r6); /* in place */
  CHECK(r6[0] == 0 && r6[1] == 3 && r6[2] == 6);
  npuK_unary_f32(NULL, NPUK_UN_RELU, 1, &nan1, &nan1);
  CHECK(isnan(nan1));
  /* 8-element bodies and the tail (n = 19), in place: NaN kept, -0 -> +0 (relu) and -0
     (relu6), +-inf clamped, everything else by the definition */
  float v[19], w[19];
  for (int i = 0; i < 19; i++) v[i] = (float)(i - 9) * 0.75f;
  v[0] = NAN, v[5] = -0.0f, v[11] = INFINITY, v[12] = -INFINITY, v[18] = NAN;
  for (int op = 0; op < 2; op++) {
    memcpy(w, v, sizeof v);
    npuK_unary_f32(NULL, op ? NPUK_UN_RELU6 : NPUK_UN_RELU, 19, w, w);
    for (int i = 0; i < 19; i++) {
      float in = v[i], want = in != in ? in : in < 0 ? 0 : (op && in > 6) ? 6 : in;
      if (in == 0 && !op) want = 0.0f; /* relu(-0) = +0 */
      CHECK((in != in && w[i] != w[i]) ||
            (w[i] == want && signbit(w[i]) == signbit(want)));
    }
  }

  int32_t xi[5] = {-3, 0, 4, INT32_MIN, 9}, yi[5];
  CHECK(npuK_unary_i32(NULL, NPUK_UN_ABS, 5, xi, yi) == 0);
  CHECK(yi[0] == 3 && yi[2] == 4 && yi[3] == INT32_MIN);
  CHECK(npuK_unary_i32(NULL, NPUK_UN_RELU6, 5, xi, yi) == 0 && yi[4] == 6 && yi[0] == 0);
  CHECK(npuK_unary_i32(NULL, NPUK_UN_NEG, 5, xi, yi) == 0 && yi[0] == 3 && yi[3] == INT32_MIN);
  CHECK(npuK_unary_i32(NULL, NPUK_UN_EXP, 5, xi, yi) == -1);
  CHECK(!npuK_unary_supported(NPUK_UN_SIGMOID, NPUK_I64));
  CHECK(npuK_unary_supported(NPUK_UN_SQUARE, NPUK_I64));
  int64_t xl[2] = {-5, 3000000000LL}, yl[2];
  CHECK(npuK_unary_i64(NULL, NPUK_UN_SQUARE, 2, xl, yl) == 0 && yl[0] == 25 &&
        yl[1] == 9000000000000000000LL);
}

static void test_nn(void) {
  enum { R = 37, C = 29 };
  float *x = rand_f32(R * C), *b = rand_f32(C), y[R * C], y2[R * C];
  npuK_bias_add_f32(NULL, R, C, x, b, y);
  int ok = 1;
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++)
      if (y[r * C + c] != x[r * C + c] + b[c]) ok = 0;
  CHECK(ok);
  for (int i = 0; i < R * C; i++) x[i] *= 30; /* wide range */
  x[5] = 1000;                                /* would overflow a naive exp */
  npuK_softmax_f32(NULL, R, C, x, y);
  npuK_softmax_f32(&pool_two, R, C, x, y2);
  CHECK(bits_equal(y, y2, sizeof y));
  double worst = 0;
  for (int r = 0; r < R; r++) {
    double m = -INFINITY, s = 0, sum_y = 0;
    for (int c = 0; c < C; c++) m = fmax(m, x[r * C + c]);
    for (int c = 0; c < C; c++) s += exp(x[r * C + c] - m);
    for (int c = 0; c < C; c++) {
      double e = exp(x[r * C + c] - m) / s;
      worst = fmax(worst, fabs(e - y[r * C + c]));
      sum_y += y[r * C + c];
    }
    CHECK_NEAR(sum_y, 1.0, 1e-5);
  }
  CHECK(worst < 1e-6);
  npuK_log_softmax_f32(&pool_odd, R, C, x, y2);
  worst = 0;
  for (int i = 0; i < R * C; i++)
    if (y[i] > 1e-30f) worst = fmax(worst, fabs(log(y[i]) - y2[i]) / fmax(1, fabs(y2[i])));
  CHECK(worst < 1e-5);
  double xd[6] = {1, 2, 3, 1000, 1000, 1000}, yd[6];
  npuK_softmax_f64(NULL, 2, 3, xd, yd);
  CHECK_NEAR(yd[3], 1.0 / 3, 1e-15);
  CHECK_NEAR(yd[2], exp(3) / (exp(1) + exp(2) + exp(3)), 1e-15);
  npuK_log_softmax_f64(NULL, 2, 3, xd, xd); /* in place */
  CHECK_NEAR(xd[4], -log(3.0), 1e-15);
  double bd[2] = {1, 2}, xb[4] = {0, 0, 1, 1};
  npuK_bias_add_f64(NULL, 2, 2, xb, bd, xb);
  CHECK(xb[0] == 1 && xb[1] == 2 && xb[2] == 2 && xb[3] == 3);
  free(x);
  free(b);
}

/* ---- reductions --------------------------------------------------------------------------- */

#define TEST_REDUCE_DT(T, dt, GEN)                                                             \
  static void test_reduce_##dt(void) {                                                         \
    for (int iter = 0; iter < 120; iter++) {                                                   \
      int nd = (int)rng_int(0, 5);                                                             \
      int64_t d[8];                                                                            \
      for (int i = 0; i < nd; i++) d[i] = rng_int(1, 7);                                       \
      if (iter % 3 == 0 && nd > 0) d[nd - 1] = rng_int(1, 1500); /* long rows / chunks */     \
      if (iter % 17 == 0 && nd > 0) d[rng_int(0, nd - 1)] = 0;                                 \
      uint32_t mask = (uint32_t)rng_int(0, 63);                                                \
      int64_t n = prod(nd, d), no = 1;                                                         \
      for (int i = 0; i < nd; i++)                                                             \
        if (!((mask >> i) & 1)) no *= d[i];                                                    \
      T *x = malloc((size_t)(n + 1) * sizeof(T));                                              \
      T *o1 = malloc((size_t)(no + 1) * sizeof(T)), *o2 = malloc((size_t)(no + 1) * sizeof(T)); \
      T *o3 = malloc((size_t)(no + 1) * sizeof(T)), *o4 = malloc((size_t)(no + 1) * sizeof(T)); \
      for (int64_t i = 0; i < n; i++) x[i] = GEN;                                              \
      for (int op = 0; op < NPUK_RED_COUNT; op++) {                                            \
        npuK_reduce_##dt(NULL, (npuK_redop)op, nd, d, mask, x, o1);                            \
        npuK_reduce_##dt##_ref(NULL, (npuK_redop)op, nd, d, mask, x, o2);                      \
        npuK_reduce_##dt(&pool_two, (npuK_redop)op, nd, d, mask, x, o3);                       \
        npuK_reduce_##dt(&pool_odd, (npuK_redop)op, nd, d, mask, x, o4);                       \
        CHECK(REF_AGREES_##dt(op, o1, o2, no));                                                \
        CHECK(bits_equal(o1, o3, (size_t)no * sizeof(T)));                                     \
        CHECK(bits_equal(o1, o4, (size_t)no * sizeof(T)));                                     \
      }                                                                                        \
      /* argmax/argmin along a random axis, pools vs serial */                                 \
      if (nd > 0 && n > 0) {                                                                   \
        int ax = (int)rng_int(0, nd - 1);                                                      \
        int64_t outer = prod(ax, d), len = d[ax], inner = prod(nd - ax - 1, d + ax + 1);       \
        int64_t *i1 = malloc((size_t)(outer * inner) * 8), *i2 = malloc((size_t)(outer * inner) * 8); \
        npuK_argmax_##dt(NULL, outer, len, inner, x, i1);                                      \
        npuK_argmax_##dt(&pool_odd, outer, len, inner, x, i2);                                 \
        CHECK(bits_equal(i1, i2, (size_t)(outer * inner) * 8));                                \
        int ok = 1;                                                                            \
        for (int64_t o = 0; o < outer * inner; o++) {                                          \
          const T *p = x + (o / inner) * len * inner + o % inner;                              \
          for (int64_t k = 0; k < len; k++) {                                                  \
            if (p[k * inner] != p[k * inner]) continue;                                        \
            if (p[k * inner] > p[i1[o] * inner] || (k < i1[o] && p[k * inner] == p[i1[o] * inner])) \
              ok = 0;                                                                          \
          }                                                                                    \
        }                                                                                      \
        CHECK(ok);                                                                             \
        free(i1);                                                                              \
        free(i2);                                                                              \
      }                                                                                        \
      free(x); free(o1); free(o2); free(o3); free(o4);                                         \
    }                                                                                          \
  }

/* The fast path and the reference agree bitwise except for f32 sum/mean/prod: both accumulate
   in float64, in different orders (lanes / one at a time), so the float64 values differ in the
   last bits and their float32 roundings may differ by one ulp. */
static int f32_within_ulp(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (a[i] == b[i] || (a[i] != a[i] && b[i] != b[i])) continue;
    if (nextafterf(a[i], INFINITY) != b[i] && nextafterf(a[i], -INFINITY) != b[i]) return 0;
  }
  return 1;
}
#define REF_AGREES_f32(op, a, b, n)                                                            \
  ((op) == NPUK_RED_MAX || (op) == NPUK_RED_MIN ? bits_equal(a, b, (size_t)(n) * 4)            \
                                                : f32_within_ulp(a, b, n))
#define REF_AGREES_f64(op, a, b, n) bits_equal(a, b, (size_t)(n) * 8)
#define REF_AGREES_i32(op, a, b, n) bits_equal(a, b, (size_t)(n) * 4)
#define REF_AGREES_i64(op, a, b, n) bits_equal(a, b, (size_t)(n) * 8)

TEST_REDUCE_DT(float, f32, rng_f32())
TEST_REDUCE_DT(double, f64, rng_f32() * 10.0)
TEST_REDUCE_DT(int32_t, i32, (int32_t)rng_int(-100, 100))
TEST_REDUCE_DT(int64_t, i64, rng_int(-100000, 100000))

/* Long float32 sums are float64 sums rounded once: the cases a float32 accumulator gets
   wrong (it stops at 2^24 when adding ones; 1e6 * 0.1f drifts to 0.10096), row and column
   reductions alike, fast and reference, and the same bits on any pool. */
static void test_reduce_accuracy(void) {
  int64_t n = (int64_t)1 << 25;
  float *x = malloc((size_t)n * sizeof *x), o[4], r[4];
  for (int64_t i = 0; i < n; i++) x[i] = 1.0f;
  int64_t d1[1] = {n};
  npuK_reduce_f32(NULL, NPUK_RED_SUM, 1, d1, 1u, x, o);
  npuK_reduce_f32_ref(NULL, NPUK_RED_SUM, 1, d1, 1u, x, r);
  CHECK(o[0] == 33554432.0f && r[0] == 33554432.0f);
  int64_t dc[2] = {n / 4, 4}; /* columns: the kept inner axis */
  npuK_reduce_f32(&pool_odd, NPUK_RED_SUM, 2, dc, 1u, x, o);
  CHECK(o[0] == 8388608.0f && o[3] == 8388608.0f);
  for (int64_t i = 0; i < 1000000; i++) x[i] = 0.1f;
  int64_t dm[1] = {1000000};
  npuK_reduce_f32(NULL, NPUK_RED_MEAN, 1, dm, 1u, x, o);
  npuK_reduce_f32_ref(NULL, NPUK_RED_MEAN, 1, dm, 1u, x, r);
  CHECK(o[0] == 0.1f && r[0] == 0.1f);
  /* uneven values: against a float64 sum, and the same bits on every pool */
  uint32_t s = 12345;
  double exact[2] = {0, 0}, absum = 0;
  for (int64_t i = 0; i < 2000000; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)((double)(s >> 8) / 16777216.0 - 0.25) * (i % 3 ? 1.0f : 1000.0f);
    exact[i % 2] += x[i];
    absum += fabs(x[i]);
  }
  int64_t dr[2] = {1000000, 2};
  float p1[2], p2[2];
  npuK_reduce_f32(NULL, NPUK_RED_SUM, 2, dr, 1u, x, o);
  npuK_reduce_f32(&pool_two, NPUK_RED_SUM, 2, dr, 1u, x, p1);
  npuK_reduce_f32(&pool_odd, NPUK_RED_SUM, 2, dr, 1u, x, p2);
  CHECK(bits_equal(o, p1, sizeof p1) && bits_equal(o, p2, sizeof p2));
  for (int k = 0; k < 2; k++) CHECK(fabs(o[k] - exact[k]) <= 0x1p-24 * fabs(exact[k]) + 1e-12 * absum);
  int64_t dt[2] = {2, 1000000}; /* rows: the same numbers, reduced along contiguous runs */
  npuK_reduce_f32(NULL, NPUK_RED_SUM, 1, dt + 1, 1u, x, o);
  npuK_reduce_f32(&pool_odd, NPUK_RED_SUM, 1, dt + 1, 1u, x, p1);
  CHECK(bits_equal(o, p1, sizeof(float)));
  double e = 0;
  for (int64_t i = 0; i < 1000000; i++) e += x[i];
  CHECK(fabs(o[0] - e) <= 0x1p-24 * fabs(e) + 1e-12 * absum);
  /* few outputs, long sums, reduced groups either side of a kept one: the outputs are cut
     into pieces spread over the pool (the same pieces whatever the pool) */
  int64_t dg[3] = {250000, 2, 4};
  float q[2];
  npuK_reduce_f32(NULL, NPUK_RED_MEAN, 3, dg, 5u, x, o);
  npuK_reduce_f32(&pool_odd, NPUK_RED_MEAN, 3, dg, 5u, x, p1);
  npuK_reduce_f32(&pool_two, NPUK_RED_MEAN, 3, dg, 5u, x, p2);
  npuK_reduce_f32_ref(NULL, NPUK_RED_MEAN, 3, dg, 5u, x, q);
  CHECK(bits_equal(o, p1, sizeof p1) && bits_equal(o, p2, sizeof p2));
  CHECK(f32_within_ulp(o, q, 2));
  free(x);
}

static void test_reduce_hand(void) {
  float x[6] = {1, 2, 3, 4, 5, 6}, o[6];
  int64_t d[2] = {2, 3};
  npuK_reduce_f32(NULL, NPUK_RED_SUM, 2, d, 1u, x, o);
  CHECK(o[0] == 5 && o[1] == 7 && o[2] == 9);
  npuK_reduce_f32(NULL, NPUK_RED_MEAN, 2, d, 2u, x, o);
  CHECK(o[0] == 2 && o[1] == 5);
  npuK_reduce_f32(NULL, NPUK_RED_PROD, 2, d, 3u, x, o);
  CHECK(o[0] == 720);
  npuK_reduce_f32(NULL, NPUK_RED_MAX, 2, d, 0u, x, o); /* no axes: copy */
  CHECK(o[0] == 1 && o[2] == 3);
  int32_t xi[4] = {-3, -4, 7, 1}, oi[2];
  int64_t di[2] = {2, 2};
  npuK_reduce_i32(NULL, NPUK_RED_MEAN, 2, di, 2u, xi, oi);
  CHECK(oi[0] == -3 && oi[1] == 4); /* -7/2 truncates to -3 */
  npuK_reduce_i32(NULL, NPUK_RED_MIN, 2, di, 1u, xi, oi);
  CHECK(oi[0] == -3 && oi[1] == -4);
  /* empty reduction identities */
  int64_t de[2] = {0, 2};
  float fe[2];
  npuK_reduce_f32(NULL, NPUK_RED_MAX, 2, de, 1u, x, fe);
  CHECK(fe[0] == -INFINITY && fe[1] == -INFINITY);
  npuK_reduce_f32(NULL, NPUK_RED_MEAN, 2, de, 1u, x, fe);
  CHECK(isnan(fe[0]));
  npuK_reduce_f32(NULL, NPUK_RED_PROD, 2, de, 1u, x, fe);
  CHECK(fe[0] == 1);
  int64_t ie[2];
  npuK_reduce_i64(NULL, NPUK_RED_MIN, 2, de, 1u, (const int64_t *)x, ie);
  CHECK(ie[0] == INT64_MAX);
  /* NaN propagates through max */
  float xn[3] = {1, NAN, 3}, on;
  int64_t dn[1] = {3};
  npuK_reduce_f32(NULL, NPUK_RED_MAX, 1, dn, 1u, xn, &on);
  CHECK(isnan(on));
  /* argmax ties -> first index, NaN -> first NaN */
  float t[8] = {1, 5, 5, 2, /* row 2 */ 3, NAN, 9, NAN};
  int64_t am[2];
  int32_t am32[2];
  npuK_argmax_f32(NULL, 2, 4, 1, t, am);
  CHECK(am[0] == 1 && am[1] == 1);
  npuK_argmin_f32_i32(NULL, 2, 4, 1, t, am32);
  CHECK(am32[0] == 0 && am32[1] == 1);
  int32_t ti[6] = {4, 4, 1, 1, 4, 4}; /* (3, 2): argmax along axis 0 */
  npuK_argmax_i32(NULL, 1, 3, 2, ti, am);
  CHECK(am[0] == 0 && am[1] == 0);
  npuK_argmin_i32(NULL, 1, 3, 2, ti, am);
  CHECK(am[0] == 1 && am[1] == 1);
}

/* ---- data movement ------------------------------------------------------------------------ */

static void fill_bytes(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rng_u64();
}

static void test_transpose(void) {
  static const size_t sizes[] = {1, 2, 4, 8, 3};
  for (int iter = 0; iter < 120; iter++) {
    int nd = (int)rng_int(1, 6);
    int64_t d[8];
    int perm[8];
    for (int i = 0; i < nd; i++) {
      d[i] = rng_int(1, 6);
      perm[i] = i;
    }
    if (iter % 4 == 0 && nd >= 2) { /* big tiles */
      d[nd - 1] = rng_int(30, 90);
      d[0] = rng_int(30, 70);
    }
    for (int i = nd - 1; i > 0; i--) {
      int k = (int)rng_int(0, i), t = perm[i];
      perm[i] = perm[k];
      perm[k] = t;
    }
    size_t es = sizes[iter % 5];
    size_t nbytes = (size_t)prod(nd, d) * es;
    uint8_t *x = malloc(nbytes + 1), *y1 = malloc(nbytes + 1), *y2 = malloc(nbytes + 1),
            *y3 = malloc(nbytes + 1);
    fill_bytes(x, nbytes);
    npuK_transpose(NULL, es, nd, d, perm, x, y1);
    npuK_transpose_ref(NULL, es, nd, d, perm, x, y2);
    npuK_transpose(&pool_two, es, nd, d, perm, x, y3);
    CHECK(bits_equal(y1, y2, nbytes));
    CHECK(bits_equal(y1, y3, nbytes));
    npuK_transpose(&pool_odd, es, nd, d, perm, x, y3);
    CHECK(bits_equal(y1, y3, nbytes));
    free(x); free(y1); free(y2); free(y3);
  }
  int32_t a[6] = {1, 2, 3, 4, 5, 6}, b[6];
  int64_t d[2] = {2, 3};
  int p[2] = {1, 0};
  npuK_transpose(NULL, 4, 2, d, p, a, b);
  CHECK(b[0] == 1 && b[1] == 4 && b[2] == 2 && b[3] == 5 && b[4] == 3 && b[5] == 6);
}

static void test_movement(void) {
  /* concat of (2,1,2), (2,2,2), (2,0,2) along axis 1 */
  int16_t x0[4] = {1, 2, 3, 4}, x1[8] = {5, 6, 7, 8, 9, 10, 11, 12}, y[12];
  const void *xs[3] = {x0, x1, x0};
  int64_t ad[3] = {1, 2, 0};
  npuK_concat(&pool_odd, 2, 3, 2, ad, 2, xs, y);
  static const int16_t want[12] = {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12};
  CHECK(bits_equal(y, want, sizeof want));

  /* slice of a (3,4,5) float tensor */
  float t[60], s[2 * 2 * 3];
  for (int i = 0; i < 60; i++) t[i] = (float)i;
  int64_t td[3] = {3, 4, 5}, beg[3] = {1, 2, 1}, sz[3] = {2, 2, 3};
  npuK_slice(&pool_two, 4, 3, td, beg, sz, t, s);
  int ok = 1;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++)
        if (s[(i * 2 + j) * 3 + k] != t[((i + 1) * 4 + j + 2) * 5 + k + 1]) ok = 0;
  CHECK(ok);

  /* tile (2,3) by (2,2) -> (4,6) */
  int8_t ti[6] = {1, 2, 3, 4, 5, 6}, to[24];
  int64_t tid[2] = {2, 3}, mul[2] = {2, 2};
  npuK_tile(&pool_odd, 1, 2, tid, mul, ti, to);
  ok = 1;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 6; j++)
      if (to[i * 6 + j] != ti[(i % 2) * 3 + j % 3]) ok = 0;
  CHECK(ok);

  /* broadcast_to (3,1) -> (2,3,4) */
  double bx[3] = {1, 2, 3}, by[24];
  int64_t bod[3] = {2, 3, 4}, bst[3] = {0, 1, 0};
  npuK_broadcast_to(&pool_two, 8, 3, bod, bst, bx, by);
  ok = 1;
  for (int i = 0; i < 24; i++)
    if (by[i] != bx[(i / 4) % 3]) ok = 0;
  CHECK(ok);

  /* pad 1-D [1,2,3] by (2,2) */
  int32_t p1[3] = {1, 2, 3}, po[7], val = -9;
  int64_t pd[1] = {3}, pads[2] = {2, 2};
  CHECK(npuK_pad(NULL, 4, 1, pd, pads, NPUK_PAD_REFLECT, NULL, p1, po) == 0);
  static const int32_t refl[7] = {3, 2, 1, 2, 3, 2, 1};
  CHECK(bits_equal(po, refl, sizeof refl));
  CHECK(npuK_pad(NULL, 4, 1, pd, pads, NPUK_PAD_SYMMETRIC, NULL, p1, po) == 0);
  static const int32_t symm[7] = {2, 1, 1, 2, 3, 3, 2};
  CHECK(bits_equal(po, symm, sizeof symm));
  CHECK(npuK_pad(NULL, 4, 1, pd, pads, NPUK_PAD_CONSTANT, &val, p1, po) == 0);
  static const int32_t cons[7] = {-9, -9, 1, 2, 3, -9, -9};
  CHECK(bits_equal(po, cons, sizeof cons));
  int64_t bad_reflect[2] = {3, 0}, bad_sym[2] = {0, 4}, neg[2] = {-1, 0};
  po[0] = 77;
  CHECK(npuK_pad(NULL, 4, 1, pd, bad_reflect, NPUK_PAD_REFLECT, NULL, p1, po) == -1);
  CHECK(npuK_pad(NULL, 4, 1, pd, bad_sym, NPUK_PAD_SYMMETRIC, NULL, p1, po) == -1);
  CHECK(npuK_pad(NULL, 4, 1, pd, neg, NPUK_PAD_CONSTANT, NULL, p1, po) == -1);
  CHECK(po[0] == 77);
  CHECK(npuK_pad(NULL, 4, 1, pd, bad_sym + 0, NPUK_PAD_SYMMETRIC, NULL, p1, po) == -1);

  /* pad 3-D random vs a naive mapping, every mode, pools vs serial */
  for (int iter = 0; iter < 60; iter++) {
    int64_t d[3], pp[6], od[3];
    npuK_pad_mode mode = (npuK_pad_mode)(iter % 3);
    for (int k = 0; k < 3; k++) {
      d[k] = rng_int(1, 5);
      int64_t lim = mode == NPUK_PAD_REFLECT ? d[k] - 1 : mode == NPUK_PAD_SYMMETRIC ? d[k] : 4;
      pp[2 * k] = rng_int(0, lim);
      pp[2 * k + 1] = rng_int(0, lim);
      od[k] = d[k] + pp[2 * k] + pp[2 * k + 1];
    }
    int64_t n = prod(3, od);
    uint16_t *x = malloc((size_t)prod(3, d) * 2), *y1 = malloc((size_t)n * 2),
             *y2 = malloc((size_t)n * 2);
    fill_bytes((uint8_t *)x, (size_t)prod(3, d) * 2);
    uint16_t v = 0xBEEF;
    CHECK(npuK_pad(NULL, 2, 3, d, pp, mode, &v, x, y1) == 0);
    CHECK(npuK_pad(&pool_odd, 2, 3, d, pp, mode, &v, x, y2) == 0);
    CHECK(bits_equal(y1, y2, (size_t)n * 2));
    ok = 1;
    for (int64_t i = 0; i < n; i++) {
      int64_t c[3] = {i / (od[1] * od[2]), (i / od[2]) % od[1], i % od[2]}, off = 0, out = 0;
      for (int k = 0; k < 3; k++) {
        int64_t q = c[k] - pp[2 * k];
        if (q < 0) q = mode == NPUK_PAD_REFLECT ? -q : mode == NPUK_PAD_SYMMETRIC ? -q - 1 : q;
        if (q >= d[k] && mode != NPUK_PAD_CONSTANT)
          q = mode == NPUK_PAD_REFLECT ? 2 * (d[k] - 1) - q : 2 * d[k] - 1 - q;
        if (q < 0 || q >= d[k]) out = 1;
        off = off * d[k] + q;
      }
      if (y1[i] != (out ? v : x[off])) ok = 0;
    }
    CHECK(ok);
    free(x); free(y1); free(y2);
  }
}

/* ---- cast --------------------------------------------------------------------------------- */

static double read_as_double(npuK_dtype t, const void *p) {
  switch (t) {
  case NPUK_F32: return *(const float *)p;
  case NPUK_F16: return npu_f16_to_f32(*(const uint16_t *)p);
  case NPUK_BF16: return npu_bf16_to_f32(*(const uint16_t *)p);
  case NPUK_F64: return *(const double *)p;
  case NPUK_I8: return *(const int8_t *)p;
  case NPUK_U8: return *(const uint8_t *)p;
  case NPUK_I32: return *(const int32_t *)p;
  case NPUK_I64: return (double)*(const int64_t *)p;
  default: return *(const uint8_t *)p;
  }
}

static void test_cast(void) {
  /* every pair on small exact integers 0..100 */
  uint8_t src[101 * 8], dst[101 * 8], tmp[101 * 8];
  int64_t ints[101];
  for (int i = 0; i <= 100; i++) ints[i] = i;
  for (int from = 0; from < NPUK_DTYPE_COUNT; from++) {
    CHECK(npuK_cast(NULL, 101, NPUK_I64, ints, (npuK_dtype)from, src) == 0);
    for (int to = 0; to < NPUK_DTYPE_COUNT; to++) {
      CHECK(npuK_cast(&pool_odd, 101, (npuK_dtype)from, src, (npuK_dtype)to, dst) == 0);
      size_t fs = npuK_dtype_size((npuK_dtype)from), ts = npuK_dtype_size((npuK_dtype)to);
      int ok = 1;
      for (int i = 0; i <= 100; i++) {
        double want = from == NPUK_BOOL || to == NPUK_BOOL ? (i != 0) : i;
        if (read_as_double((npuK_dtype)to, dst + i * ts) != want) ok = 0;
      }
      (void)fs;
      CHECK(ok);
    }
  }
  (void)tmp;
  CHECK(npuK_cast(NULL, 1, (npuK_dtype)9, src, NPUK_F32, dst) == -1);

  float f[8] = {3.7f, -3.7f, NAN, 1e10f, -1e10f, 300.0f, -5.0f, 2147483520.0f};
  int32_t i32[8];
  uint8_t u8[8];
  npuK_cast(NULL, 8, NPUK_F32, f, NPUK_I32, i32);
  CHECK(i32[0] == 3 && i32[1] == -3 && i32[2] == 0 && i32[3] == INT32_MAX &&
        i32[4] == INT32_MIN && i32[5] == 300 && i32[7] == 2147483520);
  npuK_cast(NULL, 8, NPUK_F32, f, NPUK_U8, u8);
  CHECK(u8[0] == 3 && u8[1] == 0 && u8[2] == 0 && u8[3] == 255 && u8[5] == 255 && u8[6] == 0);
  double big[3] = {1e19, -1e19, 9223372036854775807.0};
  int64_t i64[3];
  npuK_cast(NULL, 3, NPUK_F64, big, NPUK_I64, i64);
  CHECK(i64[0] == INT64_MAX && i64[1] == INT64_MIN && i64[2] == INT64_MAX);
  int32_t wi[3] = {300, -1, 256};
  npuK_cast(NULL, 3, NPUK_I32, wi, NPUK_U8, u8);
  CHECK(u8[0] == 44 && u8[1] == 255 && u8[2] == 0);
  int8_t i8[3];
  npuK_cast(NULL, 3, NPUK_I32, wi, NPUK_I8, i8);
  CHECK(i8[0] == 44 && i8[1] == -1 && i8[2] == 0);
  uint8_t bools[3] = {0, 2, 255};
  float fb[3];
  npuK_cast(NULL, 3, NPUK_BOOL, bools, NPUK_F32, fb);
  CHECK(fb[0] == 0 && fb[1] == 1 && fb[2] == 1);
  uint8_t bb[3];
  npuK_cast(NULL, 3, NPUK_BOOL, bools, NPUK_BOOL, bb);
  CHECK(bb[0] == 0 && bb[1] == 1 && bb[2] == 1);
  float nb[3] = {0.0f, -0.0f, NAN};
  npuK_cast(NULL, 3, NPUK_F32, nb, NPUK_BOOL, bb);
  CHECK(bb[0] == 0 && bb[1] == 0 && bb[2] == 1);
  /* no double rounding: f64 -> f16 and i64 -> bf16 */
  double dr = 1.0 + ldexp(1, -11) + ldexp(1, -40);
  uint16_t h;
  npuK_cast(NULL, 1, NPUK_F64, &dr, NPUK_F16, &h);
  CHECK_EQ_I64(h, 0x3c01);
  int64_t ir = (1LL << 24) + (1LL << 16) + 1;
  npuK_cast(NULL, 1, NPUK_I64, &ir, NPUK_BF16, &h);
  CHECK_EQ_I64(h, 0x4b81);
  int64_t ir2 = (1LL << 24) + (1LL << 16);
  npuK_cast(NULL, 1, NPUK_I64, &ir2, NPUK_BF16, &h);
  CHECK_EQ_I64(h, 0x4b80);
  int64_t huge = INT64_MAX;
  float hf;
  npuK_cast(NULL, 1, NPUK_I64, &huge, NPUK_F32, &hf);
  CHECK(hf == 9223372036854775808.0f);
  npuK_cast(NULL, 1, NPUK_I64, &huge, NPUK_F16, &h);
  CHECK_EQ_I64(h, 0x7c00);
  double tiny = -ldexp(1, -160); /* negative, underflows float: must stay -0 in f16 */
  npuK_cast(NULL, 1, NPUK_F64, &tiny, NPUK_F16, &h);
  CHECK_EQ_I64(h, 0x8000);
  uint16_t hh[2] = {0x3555, 0x7e00};
  double hd[2];
  npuK_cast(NULL, 2, NPUK_F16, hh, NPUK_F64, hd);
  CHECK(hd[0] == (double)npu_f16_to_f32(0x3555) && isnan(hd[1]));
  npuK_cast(NULL, 2, NPUK_F16, hh, NPUK_BF16, hh);
  CHECK(hh[0] == npu_f32_to_bf16(npu_f16_to_f32(0x3555)) && isnan(npu_bf16_to_f32(hh[1])));
  /* large arrays: threads do not change anything */
  enum { N = 50000 };
  float *xs = rand_f32(N);
  uint16_t *a1 = malloc(N * 2), *a2 = malloc(N * 2);
  npuK_cast(NULL, N, NPUK_F32, xs, NPUK_BF16, a1);
  npuK_cast(&pool_two, N, NPUK_F32, xs, NPUK_BF16, a2);
  CHECK(bits_equal(a1, a2, N * 2));
  free(xs); free(a1); free(a2);
}

/* ---- conv, depthwise, pools --------------------------------------------------------------- */

static void test_output_dim(void) {
  int64_t o, p;
  CHECK(npuK_conv_output_dim(4, 2, 1, 1, 1, &o, &p) == 0 && o == 4 && p == 0); /* total 1 */
  CHECK(npuK_conv_output_dim(5, 4, 2, 1, 1, &o, &p) == 0 && o == 3 && p == 1); /* total 3 */
  CHECK(npuK_conv_output_dim(6, 4, 2, 1, 1, &o, &p) == 0 && o == 3 && p == 1); /* total 2 */
  CHECK(npuK_conv_output_dim(5, 3, 1, 1, 1, &o, &p) == 0 && o == 5 && p == 1);
  CHECK(npuK_conv_output_dim(7, 3, 3, 1, 1, &o, &p) == 0 && o == 3 && p == 1); /* total 2 */
  CHECK(npuK_conv_output_dim(5, 1, 3, 1, 1, &o, &p) == 0 && o == 2 && p == 0); /* max(-1,0) */
  CHECK(npuK_conv_output_dim(5, 3, 2, 1, 0, &o, &p) == 0 && o == 2 && p == 0);
  CHECK(npuK_conv_output_dim(6, 3, 2, 1, 0, &o, &p) == 0 && o == 2 && p == 0);
  CHECK(npuK_conv_output_dim(7, 3, 1, 2, 0, &o, &p) == 0 && o == 3 && p == 0); /* eff 5 */
  CHECK(npuK_conv_output_dim(7, 3, 1, 2, 1, &o, &p) == 0 && o == 7 && p == 2);
  CHECK(npuK_conv_output_dim(4, 3, 1, 2, 0, &o, &p) == -1 && o == 0 && p == 0);
  CHECK(npuK_conv_output_dim(0, 1, 1, 1, 1, &o, &p) == -1);
  CHECK(npuK_conv_output_dim(4, 0, 1, 1, 1, &o, &p) == -1);
}

static npuK_window2d make_window(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                 int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                                 int same) {
  npuK_window2d g = {n, h, w, c, kh, kw, sh, sw, dh, dw, 0, 0, 0, 0};
  if (npuK_conv_output_dim(h, kh, sh, dh, same, &g.out_h, &g.pad_top) ||
      npuK_conv_output_dim(w, kw, sw, dw, same, &g.out_w, &g.pad_left))
    g.n = 0;
  return g;
}

static void run_conv(const npuK_window2d *g, int64_t oc, const npuK_pool *pool, int slots,
                     const float *x, const float *f, float *y) {
  size_t ss = npuK_conv2d_f32_scratch_size(g, oc, slots);
  float *scratch = ss ? malloc(ss) : NULL;
  npuK_conv2d_f32(pool, g, oc, x, f, y, scratch, slots);
  free(scratch);
}

static void test_conv_hand(void) {
  float x[16], f[9], y[16];
  for (int i = 0; i < 16; i++) x[i] = (float)(i + 1);
  for (int i = 0; i < 9; i++) f[i] = 1;
  npuK_window2d g = make_window(1, 4, 4, 1, 3, 3, 1, 1, 1, 1, 0);
  CHECK(g.out_h == 2 && g.out_w == 2);
  run_conv(&g, 1, NULL, 1, x, f, y);
  CHECK(y[0] == 54 && y[1] == 63 && y[2] == 90 && y[3] == 99);
  npuK_conv2d_f32_ref(NULL, &g, 1, x, f, y, NULL, 1);
  CHECK(y[0] == 54 && y[1] == 63 && y[2] == 90 && y[3] == 99);
  /* SAME with a 3x3 filter whose only 1 is the centre: identity */
  for (int i = 0; i < 9; i++) f[i] = i == 4;
  g = make_window(1, 4, 4, 1, 3, 3, 1, 1, 1, 1, 1);
  run_conv(&g, 1, NULL, 1, x, f, y);
  CHECK(bits_equal(x, y, sizeof x));
  /* SAME with an even 2x2 kernel on 3x3: padding all after (TF) */
  float x9[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, f4[4] = {1, 1, 1, 1}, y9[9];
  g = make_window(1, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1);
  CHECK(g.pad_top == 0 && g.pad_left == 0 && g.out_h == 3);
  run_conv(&g, 1, NULL, 1, x9, f4, y9);
  CHECK(y9[0] == 12 && y9[2] == 9 && y9[6] == 15 && y9[8] == 9 && y9[4] == 28);
  /* stride 2 SAME on 4x4 with 3x3 ones: out 2x2, pad_total 1 -> before 0 */
  for (int i = 0; i < 9; i++) f[i] = 1;
  g = make_window(1, 4, 4, 1, 3, 3, 2, 2, 1, 1, 1);
  CHECK(g.out_h == 2 && g.pad_top == 0);
  run_conv(&g, 1, NULL, 1, x, f, y);
  CHECK(y[0] == 54 && y[1] == 4 + 8 + 12 + 3 + 7 + 11 + 0 && y[3] == 11 + 12 + 15 + 16);
  /* 2 in channels, 2 out channels, 1x1: y = x W */
  float xc[4] = {1, 2, 3, 4}, wc[4] = {1, 10, 100, 1000}, yc[4];
  g = make_window(1, 1, 2, 2, 1, 1, 1, 1, 1, 1, 0);
  CHECK(npuK_conv2d_f32_scratch_size(&g, 2, 4) == 0);
  run_conv(&g, 2, NULL, 1, xc, wc, yc);
  CHECK(yc[0] == 201 && yc[1] == 2010 && yc[2] == 403 && yc[3] == 4030);
}

static void test_conv_random(void) {
  for (int iter = 0; iter < 60; iter++) {
    int64_t n = rng_int(1, 2), h = rng_int(1, 11), w = rng_int(1, 11), c = rng_int(1, 5);
    int64_t kh = rng_int(1, 4), kw = rng_int(1, 4), sh = rng_int(1, 2), sw = rng_int(1, 2);
    int64_t dh = rng_int(1, 2), dw = rng_int(1, 2), oc = rng_int(1, 6);
    int same = (int)rng_int(0, 1);
    if (iter % 6 == 0) kh = kw = sh = sw = dh = dw = 1, same = 0; /* 1x1 fast path */
    if (iter % 6 == 1) kh = kw = 1, sh = sw = 2;                   /* 1x1, strided */
    if (iter == 2) h = 40, w = 45, c = 7, n = 2;                   /* large M */
    if (iter == 3) n = 2, h = w = 20, c = 64, kh = kw = 3, sh = sw = dh = dw = 1, same = 1;
    if (iter == 4) n = 2, h = w = 70, c = 3, kh = kw = sh = sw = dh = dw = 1, same = 0; /* 1x1, 3 blocks */
    npuK_window2d g = make_window(n, h, w, c, kh, kw, sh, sw, dh, dw, same);
    if (g.n == 0) continue;
    if (iter == 3) /* proves several blocks, one per slot */
      CHECK(npuK_conv2d_f32_scratch_size(&g, oc, 3) > npuK_conv2d_f32_scratch_size(&g, oc, 1));
    int64_t nx = n * h * w * c, nf = kh * kw * c * oc, ny = n * g.out_h * g.out_w * oc;
    float *x = rand_f32(nx), *f = rand_f32(nf), *y1 = rand_f32(ny), *y2 = rand_f32(ny);
    float *y3 = rand_f32(ny), *y4 = rand_f32(ny);
    run_conv(&g, oc, NULL, 1, x, f, y1);
    npuK_conv2d_f32_ref(NULL, &g, oc, x, f, y2, NULL, 0);
    CHECK(max_rel_f32(y1, y2, ny) < 1e-5);
    run_conv(&g, oc, &pool_two, 3, x, f, y3);
    CHECK(bits_equal(y1, y3, (size_t)ny * 4));
    run_conv(&g, oc, &pool_odd, 2, x, f, y4);
    CHECK(bits_equal(y1, y4, (size_t)ny * 4));

    /* depthwise with the same geometry, multiplier 1..2 */
    int64_t mult = rng_int(1, 2), nyd = n * g.out_h * g.out_w * c * mult;
    float *fd = rand_f32(kh * kw * c * mult), *d1 = rand_f32(nyd), *d2 = rand_f32(nyd);
    float *d3 = rand_f32(nyd);
    npuK_depthwise_conv2d_f32(NULL, &g, mult, x, fd, d1);
    npuK_depthwise_conv2d_f32_ref(NULL, &g, mult, x, fd, d2);
    npuK_depthwise_conv2d_f32(&pool_two, &g, mult, x, fd, d3);
    CHECK(max_rel_f32(d1, d2, nyd) < 1e-6);
    CHECK(bits_equal(d1, d3, (size_t)nyd * 4));

    /* pools with the same geometry (dilation 1, as in TF) */
    npuK_window2d gp = make_window(n, h, w, c, kh, kw, sh, sw, 1, 1, same);
    if (gp.n) {
      int64_t np_ = n * gp.out_h * gp.out_w * c;
      float *p1 = rand_f32(np_), *p2 = rand_f32(np_), *p3 = rand_f32(np_);
      npuK_max_pool_f32(NULL, &gp, x, p1);
      npuK_max_pool_f32_ref(NULL, &gp, x, p2);
      npuK_max_pool_f32(&pool_odd, &gp, x, p3);
      CHECK(bits_equal(p1, p2, (size_t)np_ * 4) && bits_equal(p1, p3, (size_t)np_ * 4));
      npuK_avg_pool_f32(NULL, &gp, x, p1);
      npuK_avg_pool_f32_ref(NULL, &gp, x, p2);
      npuK_avg_pool_f32(&pool_two, &gp, x, p3);
      CHECK(bits_equal(p1, p2, (size_t)np_ * 4) && bits_equal(p1, p3, (size_t)np_ * 4));
      free(p1); free(p2); free(p3);
    }
    free(x); free(f); free(y1); free(y2); free(y3); free(y4);
    free(fd); free(d1); free(d2); free(d3);
  }
}

/* max_pool_grad against the plain loop over (n, channel) it replaced: ties (values drawn
   from a few), NaNs, overlapping windows, padding, channel counts off the 8-lane vectors and
   past the 64-channel items; the same bits on any pool. */
static void naive_max_pool_grad(const npuK_window2d *w, const float *x, const float *dy,
                                float *dx) {
  const int64_t c = w->c;
  memset(dx, 0, (size_t)(w->n * w->in_h * w->in_w * c) * sizeof *dx);
  for (int64_t n = 0; n < w->n; n++)
    for (int64_t ci = 0; ci < c; ci++)
      for (int64_t oh = 0; oh < w->out_h; oh++)
        for (int64_t ow = 0; ow < w->out_w; ow++) {
          int64_t best = -1;
          float m = 0;
          for (int64_t kh = 0; kh < w->k_h; kh++)
            for (int64_t kw = 0; kw < w->k_w; kw++) {
              int64_t ih = oh * w->stride_h - w->pad_top + kh, iw = ow * w->stride_w - w->pad_left + kw;
              if (ih < 0 || ih >= w->in_h || iw < 0 || iw >= w->in_w) continue;
              float v = x[((n * w->in_h + ih) * w->in_w + iw) * c + ci];
              if (best < 0 || v > m || (v != v && m == m)) best = ih * w->in_w + iw, m = v;
            }
          if (best >= 0)
            dx[(n * w->in_h * w->in_w + best) * c + ci] += dy[((n * w->out_h + oh) * w->out_w + ow) * c + ci];
        }
}

static void test_max_pool_grad(void) {
  static const int64_t shapes[][8] = { /* n h w c k s same */
      {2, 6, 6, 8, 2, 2, 0}, {1, 7, 5, 13, 3, 2, 1}, {3, 5, 5, 70, 3, 1, 1}, {1, 4, 4, 1, 2, 1, 0},
      {2, 9, 9, 17, 3, 3, 1}, {1, 3, 3, 9, 4, 1, 1},
      /* windows that cannot overlap but leave pixels out: odd sizes, gaps, SAME padding */
      {2, 7, 7, 12, 2, 2, 0}, {1, 10, 10, 9, 2, 3, 0}, {1, 7, 7, 16, 2, 2, 1},
      {2, 28, 28, 32, 2, 2, 0}}; /* the CNN's first pool: the windows tile the input */
  /* over all shapes (a small one may keep or cut all: that depends on the random stream),
     some gradients survive the relu mask and some are cut */
  int64_t kept = 0, cut = 0;
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
    const int64_t *s = shapes[t];
    npuK_window2d g = make_window(s[0], s[1], s[2], s[3], s[4], s[4], s[5], s[5], 1, 1, (int)s[6]);
    CHECK(g.n > 0);
    int64_t nx = g.n * g.in_h * g.in_w * g.c, ny = g.n * g.out_h * g.out_w * g.c;
    float *x = rand_f32(nx), *dy = rand_f32(ny), *d1 = rand_f32(nx), *d2 = rand_f32(nx);
    float *d3 = rand_f32(nx);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)((int)(x[i] * 3)); /* ties */
    if (t % 2) x[nx / 3] = NAN, x[nx / 2] = NAN;
    dy[0] = -0.0f, dy[ny - 1] = NAN; /* a winner gets 0 + dy: +0, and the NaN */
    naive_max_pool_grad(&g, x, dy, d1);
    npuK_max_pool_grad_f32(NULL, &g, x, dy, d2);
    CHECK(bits_equal(d1, d2, (size_t)nx * 4));
    npuK_max_pool_grad_f32(&pool_two, &g, x, dy, d3);
    CHECK(bits_equal(d1, d3, (size_t)nx * 4));
    npuK_max_pool_grad_f32(&pool_odd, &g, x, dy, d3);
    CHECK(bits_equal(d1, d3, (size_t)nx * 4));
    /* fused with relu_grad: the bits of relu_grad(max_pool_grad) on any pool, with the
       features x itself (the training graph's case: ties at 0, negatives, NaN) and another
       tensor (signs, -0, NaN: only > 0 keeps the gradient) */
    float *feat = rand_f32(nx), *r1 = rand_f32(nx);
    for (int64_t i = 0; i < nx; i++) feat[i] = feat[i] - 0.5f;
    feat[0] = -0.0f, feat[nx - 1] = NAN, feat[nx / 2] = 0.0f;
    for (int rep = 0; rep < 2; rep++) {
      const float *fe = rep ? feat : x;
      npuK_act_grad_f32(NULL, NPUK_AG_RELU, nx, d1, fe, r1);
      for (int64_t i = 0; i < nx; i++) kept += r1[i] != 0, cut += r1[i] == 0 && d1[i] != 0;
      npuK_max_pool_grad_relu_f32(NULL, &g, x, dy, fe, d2);
      CHECK(bits_equal(r1, d2, (size_t)nx * 4));
      npuK_max_pool_grad_relu_f32(&pool_two, &g, x, dy, fe, d3);
      CHECK(bits_equal(r1, d3, (size_t)nx * 4));
      npuK_max_pool_grad_relu_f32(&pool_odd, &g, x, dy, fe, d3);
      CHECK(bits_equal(r1, d3, (size_t)nx * 4));
    }
    free(feat); free(r1);
    free(x); free(dy); free(d1); free(d2); free(d3);
  }
  CHECK(kept > 0 && cut > 0);
}

/* conv2d_backprop_input's fast kernel (stride 1: the forward convolution of dy with the
   turned filter, by the direct kernel where dx has 8k channels; otherwise GEMM + col2im) against its direct-loop twin, to 2 T 2^-24 of the
   magnitude sum|dy f| (T terms per element), and the same bits on any pool and slot count;
   shapes of one image per GEMM, images cut into row blocks (a large image), and the stride-1
   geometries below. */
static void test_conv_backprop_input_gemm(void) {
  static const int64_t cs[][9] = { /* n h w c k s same oc */
      {32, 14, 14, 32, 3, 1, 1, 64}, {5, 9, 7, 3, 3, 2, 1, 6}, {1, 12, 12, 4, 3, 1, 0, 5},
      {3, 6, 6, 2, 2, 2, 0, 3},      {2, 200, 190, 8, 3, 1, 1, 4},
      /* stride 1 (the forward convolution of dy with the turned filter): 2x2 SAME (nothing
         padded before), 1x1, 5x5, VALID (padded by 2 each side), one channel of dx, and one
         of dy (conv.c's few-taps product) */
      {2, 7, 6, 3, 2, 1, 1, 4},      {1, 5, 5, 6, 1, 1, 0, 7},  {2, 9, 8, 3, 5, 1, 1, 2},
      {1, 4, 4, 16, 3, 1, 0, 9},     {2, 5, 6, 1, 3, 1, 1, 12}, {1, 6, 6, 8, 3, 1, 1, 1}};
  for (size_t t = 0; t < sizeof cs / sizeof cs[0]; t++) {
    const int64_t *q = cs[t];
    npuK_window2d g = make_window(q[0], q[1], q[2], q[3], q[4], q[4], q[5], q[5], 1, 1, (int)q[6]);
    CHECK(g.n > 0);
    int64_t oc = q[7], nx = g.n * g.in_h * g.in_w * g.c, ny = g.n * g.out_h * g.out_w * oc;
    int64_t nf = g.k_h * g.k_w * g.c * oc, terms = g.k_h * g.k_w * oc;
    float *dy = rand_f32(ny), *f = rand_f32(nf), *d1 = rand_f32(nx), *d2 = rand_f32(nx);
    float *d3 = rand_f32(nx), *ref = rand_f32(nx), *mag = rand_f32(nx);
    size_t ss = npuK_conv2d_backprop_input_f32_scratch_size(&g, oc, 3);
    CHECK(ss > 0);
    float *scratch = malloc(ss);
    npuK_conv2d_backprop_input_f32_gemm(NULL, &g, oc, dy, f, d1, scratch, 1);
    npuK_conv2d_backprop_input_f32_gemm(&pool_two, &g, oc, dy, f, d2, scratch, 2);
    npuK_conv2d_backprop_input_f32_gemm(&pool_odd, &g, oc, dy, f, d3, scratch, 3);
    CHECK(bits_equal(d1, d2, (size_t)nx * 4));
    CHECK(bits_equal(d1, d3, (size_t)nx * 4));
    npuK_conv2d_backprop_input_f32(NULL, &g, oc, dy, f, ref);
    for (int64_t i = 0; i < ny; i++) dy[i] = fabsf(dy[i]);
    for (int64_t i = 0; i < nf; i++) f[i] = fabsf(f[i]);
    npuK_conv2d_backprop_input_f32(NULL, &g, oc, dy, f, mag);
    int ok = 1;
    for (int64_t i = 0; i < nx; i++)
      if (fabs((double)d1[i] - ref[i]) > 2.0 * (double)terms * ldexp(1, -24) * mag[i]) ok = 0;
    CHECK(ok);
    free(dy), free(f), free(d1), free(d2), free(d3), free(ref), free(mag), free(scratch);
  }
}

/* The gradients against float64 sums computed here from the definitions (not the twins), at
   sizes whose sums are long: conv2d_backprop_input (stride 1: the forward convolution of dy
   with the turned filter, by the direct kernel where dx has 8k channels, else im2col + sgemm;
   stride 2: GEMM + col2im) with T = k_h k_w out_c = 2880 terms per
   element, within gamma(T) sum|dy f|; conv2d_backprop_filter over P = n out_h out_w = 2304 to
   6272 positions (the FMA tiles for several input channels and for one, float32 blocks of 64
   positions summed in float64: within (gamma(64) + 2^-24) sum|x dy| + 2^-40 sum|x dy|; no
   scratch, float32 throughout: gamma(P)); and max_pool_grad fused with relu_grad on a large
   image, the mask applied here to the naive loops' gradient (the same bits). */
static double gamma_u(int64_t k) { return (double)k * 0x1p-24 / (1 - (double)k * 0x1p-24); }

/* conv2d_backprop_input's definition in float64 (exact, mag: zeroed, dx's size): each dx
   element the sum of dy * f over the (oh, ow, kh, kw) reading it and co, and of |dy f|. */
static void bwd_input_exact(const npuK_window2d *g, int64_t oc, const float *dy, const float *f,
                            double *exact, double *mag) {
  for (int64_t nb = 0; nb < g->n; nb++)
    for (int64_t oh = 0; oh < g->out_h; oh++)
      for (int64_t ow = 0; ow < g->out_w; ow++)
        for (int64_t i = 0; i < g->k_h; i++)
          for (int64_t j = 0; j < g->k_w; j++) {
            int64_t ih = oh * g->stride_h - g->pad_top + i, iw = ow * g->stride_w - g->pad_left + j;
            if (ih < 0 || ih >= g->in_h || iw < 0 || iw >= g->in_w) continue;
            const float *d = dy + ((nb * g->out_h + oh) * g->out_w + ow) * oc;
            for (int64_t ci = 0; ci < g->c; ci++) {
              int64_t xi = ((nb * g->in_h + ih) * g->in_w + iw) * g->c + ci;
              const float *fr = f + ((i * g->k_w + j) * g->c + ci) * oc;
              for (int64_t o = 0; o < oc; o++)
                exact[xi] += (double)d[o] * fr[o], mag[xi] += fabs((double)d[o] * fr[o]);
            }
          }
}

static void test_conv_grads_exact(void) {
  static const int64_t in_cs[][8] = { /* n h w c k s same oc */
      {1, 10, 9, 6, 3, 1, 1, 320}, {2, 8, 8, 5, 3, 1, 0, 320}, {1, 11, 9, 4, 3, 2, 1, 320},
      /* dx with 8k channels: stride 1 runs the direct kernel (a 320-channel FMA chain per
         tap), SAME and VALID (padded by 2 before), one vector and a masked channel tail */
      {1, 9, 10, 8, 3, 1, 1, 320}, {2, 7, 8, 24, 3, 1, 0, 320}};
  double worst_in = 0;
  for (size_t t = 0; t < sizeof in_cs / sizeof in_cs[0]; t++) {
    const int64_t *q = in_cs[t];
    npuK_window2d g = make_window(q[0], q[1], q[2], q[3], q[4], q[4], q[5], q[5], 1, 1, (int)q[6]);
    CHECK(g.n > 0);
    int64_t oc = q[7], nx = g.n * g.in_h * g.in_w * g.c, ny = g.n * g.out_h * g.out_w * oc;
    int64_t nf = g.k_h * g.k_w * g.c * oc, terms = g.k_h * g.k_w * oc;
    float *dy = rand_f32(ny), *f = rand_f32(nf), *dx = rand_f32(nx);
    double *exact = calloc((size_t)nx, sizeof *exact), *mag = calloc((size_t)nx, sizeof *mag);
    bwd_input_exact(&g, oc, dy, f, exact, mag);
    float *scratch = malloc(npuK_conv2d_backprop_input_f32_scratch_size(&g, oc, 2));
    for (int p = 0; p < 2; p++) {
      npuK_conv2d_backprop_input_f32_gemm(p ? &pool_two : NULL, &g, oc, dy, f, dx, scratch, p + 1);
      int ok = 1;
      for (int64_t i = 0; i < nx; i++) {
        double err = fabs((double)dx[i] - exact[i]);
        if (err > gamma_u(terms) * mag[i]) ok = 0;
        if (mag[i] > 0) worst_in = fmax(worst_in, err / (0x1p-24 * mag[i]));
      }
      CHECK(ok);
    }
    free(dy), free(f), free(dx), free(exact), free(mag), free(scratch);
  }
  static const int64_t f_cs[][8] = { /* n h w c k same oc */
      {4, 24, 24, 20, 3, 1, 24}, {8, 28, 28, 1, 3, 1, 32}, {3, 30, 29, 3, 2, 0, 16}};
  double worst_f = 0;
  for (size_t t = 0; t < sizeof f_cs / sizeof f_cs[0]; t++) {
    const int64_t *q = f_cs[t];
    npuK_window2d g = make_window(q[0], q[1], q[2], q[3], q[4], q[4], 1, 1, 1, 1, (int)q[5]);
    CHECK(g.n > 0);
    int64_t oc = q[6], nx = g.n * g.in_h * g.in_w * g.c, ny = g.n * g.out_h * g.out_w * oc;
    int64_t nf = g.k_h * g.k_w * g.c * oc, positions = g.n * g.out_h * g.out_w;
    float *x = rand_f32(nx), *dy = rand_f32(ny), *df = rand_f32(nf);
    double *exact = calloc((size_t)nf, sizeof *exact), *mag = calloc((size_t)nf, sizeof *mag);
    for (int64_t nb = 0; nb < g.n; nb++)
      for (int64_t oh = 0; oh < g.out_h; oh++)
        for (int64_t ow = 0; ow < g.out_w; ow++)
          for (int64_t i = 0; i < g.k_h; i++)
            for (int64_t j = 0; j < g.k_w; j++) {
              int64_t ih = oh - g.pad_top + i, iw = ow - g.pad_left + j;
              if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
              const float *d = dy + ((nb * g.out_h + oh) * g.out_w + ow) * oc;
              for (int64_t ci = 0; ci < g.c; ci++) {
                double a = x[((nb * g.in_h + ih) * g.in_w + iw) * g.c + ci];
                int64_t fi = ((i * g.k_w + j) * g.c + ci) * oc;
                for (int64_t o = 0; o < oc; o++)
                  exact[fi + o] += a * d[o], mag[fi + o] += fabs(a * d[o]);
              }
            }
    double *acc = malloc(npuK_filter_grad_f32_scratch_size(&g, oc));
    for (int s = 0; s < 2; s++) { /* float64 across blocks (the FMA tiles), float32 throughout */
      npuK_conv2d_backprop_filter_f32(&pool_two, &g, oc, x, dy, df, s ? NULL : acc);
      double rel = s ? gamma_u(positions) : gamma_u(64) + 0x1p-24 + 0x1p-40;
      int ok = 1;
      for (int64_t i = 0; i < nf; i++) {
        double err = fabs((double)df[i] - exact[i]);
        if (err > rel * mag[i]) ok = 0;
        if (!s && mag[i] > 0) worst_f = fmax(worst_f, err / (0x1p-24 * mag[i]));
      }
      CHECK(ok);
    }
    free(x), free(dy), free(df), free(exact), free(mag), free(acc);
  }
  printf("  conv2d_backprop_input: largest |dx - exact| / (2^-24 sum|dy f|) %.2f (bound T = 2880);"
         " backprop_filter: |df - exact| / (2^-24 sum|x dy|) %.2f (bound 65)\n",
         worst_in, worst_f);
  /* max_pool_grad + relu_grad on 4 x 56 x 56 x 64, overlapping 3x3 windows at stride 2 */
  npuK_window2d g = make_window(4, 56, 56, 64, 3, 3, 2, 2, 1, 1, 1);
  CHECK(g.n > 0);
  int64_t nx = g.n * g.in_h * g.in_w * g.c, ny = g.n * g.out_h * g.out_w * g.c;
  float *x = rand_f32(nx), *dy = rand_f32(ny), *feat = rand_f32(nx), *d1 = rand_f32(nx);
  float *d2 = rand_f32(nx);
  naive_max_pool_grad(&g, x, dy, d1);
  int64_t kept = 0;
  for (int64_t i = 0; i < nx; i++) {
    if (feat[i] > 0) kept += d1[i] != 0;
    else d1[i] = 0.0f;
  }
  CHECK(kept > 0);
  npuK_max_pool_grad_relu_f32(&pool_two, &g, x, dy, feat, d2);
  CHECK(bits_equal(d1, d2, (size_t)nx * 4));
  free(x), free(dy), free(feat), free(d1), free(d2);
}

/* ---- the fused training kernels against float64 oracles computed here ---------------------
   4096 rows, so the column sums show accumulation: a float32 running sum would drift by
   ~2^-24 * 4096 sum|g|, the float64 one rounded once is within 1 ulp of the exact sum. */
static int near_ulp(double exact, float got, double ulps) {
  double u = ldexp(1.0, ilogb(fabs(exact) > FLT_MIN ? exact : FLT_MIN) - 23);
  return fabs((double)got - exact) <= ulps * u;
}

static void test_fused_train_oracle(void) {
  const int64_t rows = 4096, cols = 37; /* two 16-column tiles and a 5-column tail */
  float *dy = rand_f32(rows * cols), *x = rand_f32(rows * cols), *g = rand_f32(rows * cols);
  float *db = rand_f32(cols), *db2 = rand_f32(cols);
  npuK_relu_grad_bias_grad_f32(&pool_odd, rows, cols, dy, x, g, db);
  int ok = 1;
  for (int64_t c = 0; c < cols; c++) {
    double e = 0;
    for (int64_t r = 0; r < rows; r++) {
      int64_t i = r * cols + c;
      float want = x[i] > 0 ? dy[i] : 0.0f;
      if (memcmp(&want, &g[i], 4) != 0) ok = 0;
      e += want;
    }
    if (!near_ulp(e, db[c], 0.5)) ok = 0;
  }
  CHECK(ok);
  npuK_relu_grad_bias_grad_f32(&pool_two, rows, cols, dy, x, g, db2);
  CHECK(bits_equal(db, db2, (size_t)cols * 4));
  /* in place: g = dy */
  float *dyc = malloc((size_t)(rows * cols) * 4);
  memcpy(dyc, dy, (size_t)(rows * cols) * 4);
  npuK_relu_grad_bias_grad_f32(NULL, rows, cols, dyc, x, dyc, db2);
  CHECK(bits_equal(dyc, g, (size_t)(rows * cols) * 4) && bits_equal(db, db2, (size_t)cols * 4));

  /* log_softmax, mul, log_softmax_grad: rows of 4096 columns (the row sums accumulate), a the
     labels (rows, cols), b one element (the loss's scale); d and db against float64 */
  const int64_t lr = 8, lc = 4096;
  float *z = rand_f32(lr * lc), *lab = rand_f32(lr * lc), sc = -0.125f;
  float *d = rand_f32(lr * lc), *ldb = rand_f32(lc);
  for (int64_t i = 0; i < lr * lc; i++) z[i] *= 8.0f, lab[i] = lab[i] > 0.9f ? 1.0f : 0.0f;
  npuK_log_softmax_xent_grad_f32(&pool_odd, 0, lr, lc, z, lab, 0, &sc, 1, d, ldb);
  double *col = calloc((size_t)lc, sizeof *col), worst = 0;
  ok = 1;
  for (int64_t r = 0; r < lr; r++) {
    const float *zr = z + r * lc, *ar = lab + r * lc;
    double m = -INFINITY, se = 0, sdy = 0;
    for (int64_t c = 0; c < lc; c++) m = fmax(m, zr[c]);
    for (int64_t c = 0; c < lc; c++) se += exp(zr[c] - m), sdy += (double)ar[c] * sc;
    for (int64_t c = 0; c < lc; c++) {
      double p = exp(zr[c] - m) / se, e = (double)ar[c] * sc - p * sdy;
      /* d = dy - softmax * sum(dy), softmax as expf(y) of the float32 y = (z - m) - ls: the
         absolute roundings of z - m, ls (up to ~2^-21 each) and y (|y| 2^-24) are relative
         errors of exp(y), so 16 + |y| ulps of the product, 4 of dy */
      double tol = 0x1p-24 * (4 * fabs((double)ar[c] * sc) + (16 - log(p)) * fabs(p * sdy));
      if (fabs(d[r * lc + c] - e) > tol) ok = 0, worst = fmax(worst, fabs(d[r * lc + c] - e) / tol);
      col[c] += d[r * lc + c];
    }
  }
  if (!ok) printf("worst %g\n", worst);
  CHECK(ok);
  ok = 1;
  for (int64_t c = 0; c < lc; c++)
    if (!near_ulp(col[c], ldb[c], 0.5)) ok = 0;
  CHECK(ok);
  /* fast (a high_performance log_softmax absorbed): the bits of npuK_log_softmax_f32_fast, the
     mul and npuK_log_softmax_grad_f32 run one after the other, at any thread count (on these
     rows the two log_softmax kernels happen to round their log-sums alike: the spec
     fusion_spec.lua tells them apart on a graph) */
  {
    float *y = malloc((size_t)(lr * lc) * 4), *ldy = malloc((size_t)(lr * lc) * 4);
    float *want = malloc((size_t)(lr * lc) * 4), *fd = malloc((size_t)(lr * lc) * 4);
    float *fdb = malloc((size_t)lc * 4), *wdb = malloc((size_t)lc * 4);
    npuK_log_softmax_f32_fast(NULL, lr, lc, z, y);
    for (int64_t i = 0; i < lr * lc; i++) ldy[i] = lab[i] * sc;
    npuK_log_softmax_grad_f32(NULL, lr, lc, y, ldy, want);
    npuK_bias_add_grad_f32(NULL, lr, lc, want, wdb);
    npuK_log_softmax_xent_grad_f32(&pool_odd, 1, lr, lc, z, lab, 0, &sc, 1, fd, fdb);
    CHECK(bits_equal(fd, want, (size_t)(lr * lc) * 4));
    CHECK(bits_equal(fdb, wdb, (size_t)lc * 4));
    npuK_log_softmax_xent_grad_f32(&pool_two, 1, lr, lc, z, lab, 0, &sc, 1, fd, fdb);
    CHECK(bits_equal(fd, want, (size_t)(lr * lc) * 4));
    free(y), free(ldy), free(want), free(fd), free(fdb), free(wdb);
  }

  /* sgd: w - lr * d with the product rounded, exactly */
  const int64_t n = 4099;
  float *w = rand_f32(n), *w0 = malloc((size_t)n * 4), *dd = rand_f32(n), rate = 0.01f;
  memcpy(w0, w, (size_t)n * 4);
  npuK_sgd_update_f32(&pool_odd, n, rate, dd, w);
  ok = 1;
  for (int64_t i = 0; i < n; i++) {
    float step = (float)((double)rate * dd[i]), want = (float)((double)w0[i] - step);
    if (memcmp(&want, &w[i], 4) != 0) ok = 0;
  }
  CHECK(ok);

  /* max_pool_grad + relu + bias: db against the float64 sum of the oracle's dx */
  npuK_window2d pw = make_window(64, 8, 8, 67, 2, 2, 2, 2, 1, 1, 0);
  CHECK(pw.n > 0);
  int64_t nx = pw.n * pw.in_h * pw.in_w * pw.c, ny = pw.n * pw.out_h * pw.out_w * pw.c;
  float *px = rand_f32(nx), *pdy = rand_f32(ny), *feat = rand_f32(nx), *e1 = rand_f32(nx);
  float *e2 = rand_f32(nx), *pdb = rand_f32(pw.c);
  double *scr = malloc((size_t)(pw.n * pw.c) * sizeof *scr);
  naive_max_pool_grad(&pw, px, pdy, e1);
  for (int64_t i = 0; i < nx; i++)
    if (!(feat[i] > 0)) e1[i] = 0.0f;
  npuK_max_pool_grad_relu_bias_f32(&pool_odd, &pw, px, pdy, feat, e2, pdb, scr);
  CHECK(bits_equal(e1, e2, (size_t)nx * 4));
  ok = 1;
  for (int64_t ci = 0; ci < pw.c; ci++) {
    double e = 0;
    for (int64_t i = ci; i < nx; i += pw.c) e += e1[i];
    if (!near_ulp(e, pdb[ci], 0.5 + 1e-6)) ok = 0;
  }
  CHECK(ok);
  free(dy), free(x), free(g), free(db), free(db2), free(dyc), free(z), free(lab), free(d);
  free(ldb), free(col), free(w), free(w0), free(dd), free(px), free(pdy), free(feat), free(e1);
  free(e2), free(pdb), free(scr);
}

/* ---- Winograd F(2x2, 3x3) and the pooled convolutions ---------------------------------- */

/* The exact convolution (float64) and W, the Winograd algorithm run on absolute values:
   sum over c of |A^T| ((|G| |g| |G^T|) . (|B^T| |d| |B|)) |A| for the output's tile. */
static void wino_exact(const npuK_window2d *g, int64_t oc, const float *x, const float *f,
                       double *exact, double *mag) {
  static const double B[4][4] = {{1, 0, 1, 0}, {0, 1, 1, 0}, {0, 1, 1, 0}, {0, 1, 0, 1}};
  static const double G[4][3] = {{1, 0, 0}, {.5, .5, .5}, {.5, .5, .5}, {0, 0, 1}};
  static const double A[2][4] = {{1, 1, 1, 0}, {0, 1, 1, 1}};
  const int64_t c = g->c;
  for (int64_t nb = 0; nb < g->n; nb++)
    for (int64_t oh = 0; oh < g->out_h; oh++)
      for (int64_t ow = 0; ow < g->out_w; ow++)
        for (int64_t o = 0; o < oc; o++) {
          double e = 0, m = 0;
          int64_t ti = oh / 2, tj = ow / 2, r = oh % 2, q = ow % 2;
          for (int64_t ci = 0; ci < c; ci++) {
            double d[4][4], u[4][4], v[4][4];
            for (int a = 0; a < 4; a++)
              for (int b = 0; b < 4; b++) {
                int64_t ih = 2 * ti - g->pad_top + a, iw = 2 * tj - g->pad_left + b;
                d[a][b] = ih < 0 || ih >= g->in_h || iw < 0 || iw >= g->in_w
                              ? 0
                              : x[((nb * g->in_h + ih) * g->in_w + iw) * c + ci];
              }
            for (int kh = 0; kh < 3; kh++)
              for (int kw = 0; kw < 3; kw++)
                e += d[r + kh][q + kw] * f[((kh * 3 + kw) * c + ci) * oc + o];
            for (int a = 0; a < 4; a++)
              for (int b = 0; b < 4; b++) {
                u[a][b] = v[a][b] = 0;
                for (int i = 0; i < 3; i++)
                  for (int j = 0; j < 3; j++)
                    u[a][b] += G[a][i] * fabs(f[((i * 3 + j) * c + ci) * oc + o]) * G[b][j];
                for (int i = 0; i < 4; i++)
                  for (int j = 0; j < 4; j++) v[a][b] += B[a][i] * fabs(d[i][j]) * B[b][j];
              }
            for (int a = 0; a < 4; a++)
              for (int b = 0; b < 4; b++) m += A[r][a] * u[a][b] * v[a][b] * A[q][b];
          }
          int64_t at = ((nb * g->out_h + oh) * g->out_w + ow) * oc + o;
          exact[at] = e;
          mag[at] = m;
        }
}

static void run_winograd(const npuK_window2d *g, int64_t oc, const npuK_pool *pool, int slots,
                         const float *x, const float *f, const npuK_epilogue *ep,
                         const npuK_window2d *pw, float *y) {
  size_t ss = npuK_conv2d_winograd_scratch_size(g, oc, pw, slots);
  float *scratch = malloc(ss ? ss : 1);
  npuK_conv2d_f32_winograd_ep(pool, g, oc, x, f, ep, pw, y, scratch, slots);
  free(scratch);
}

static void run_conv_pooled(const npuK_window2d *g, int64_t oc, const npuK_pool *pool, int slots,
                            const float *x, const float *f, const npuK_epilogue *ep,
                            const npuK_window2d *pw, float *y) {
  size_t ss = npuK_conv2d_pool_scratch_size(g, oc, pw, slots);
  float *scratch = malloc(ss ? ss : 1);
  npuK_conv2d_f32_pool_ep(pool, g, oc, x, f, ep, pw, y, scratch, slots);
  free(scratch);
}

/* The pool window (k, stride, SAME or VALID) over a convolution's output (n, h, w, oc). */
static npuK_window2d pool_over(const npuK_window2d *g, int64_t oc, int64_t k, int64_t s,
                               int same) {
  return make_window(g->n, g->out_h, g->out_w, oc, k, k, s, s, 1, 1, same);
}

/* conv2d's small-k product (a first layer: few taps, npuK_conv_small_k): every output is the
   fmaf chain over its im2col taps ascending from +0 — computed here from the geometry —
   whatever the threads and slots, fused pool or not; within k 2^-24 sum|x f| of the float64
   sum; and the bits of OpenBLAS's sgemm on the same rows where OpenBLAS uses FMA kernels
   (reported, not asserted: that is OpenBLAS's choice of kernel). */
static void test_conv_small_k(void) {
  static const struct { int64_t n, h, w, c, k, s, oc; int same; } cs[] = {
      {2, 28, 28, 1, 3, 1, 32, 1}, /* the CNN's first layer at batch 2: several blocks */
      {1, 9, 7, 1, 3, 1, 8, 0},    /* one vector of channels, VALID */
      {2, 11, 13, 1, 3, 2, 13, 1}, /* 8 + 5 scalar channels, strided */
      {1, 10, 10, 1, 3, 1, 40, 1}, /* 32 + 8 */
      {1, 12, 12, 1, 4, 1, 33, 1}, /* k = 16, the largest taken */
      {1, 6, 6, 1, 1, 1, 16, 0},   /* 1x1 on one channel: the pointwise path, k = 1 */
      {1, 8, 8, 2, 2, 1, 24, 1},   /* two channels, k = 8 */
  };
  int fma_cpu = 0, sgemm_same = 1;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  fma_cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  for (size_t t = 0; t < sizeof cs / sizeof cs[0]; t++) {
    npuK_window2d g = make_window(cs[t].n, cs[t].h, cs[t].w, cs[t].c, cs[t].k, cs[t].k, cs[t].s,
                                  cs[t].s, 1, 1, cs[t].same);
    int64_t oc = cs[t].oc, k = cs[t].k * cs[t].k * cs[t].c, m = g.n * g.out_h * g.out_w;
    CHECK(g.n > 0);
    CHECK(npuK_conv_uses_small_k(&g, oc) == fma_cpu);
    CHECK(!npuK_conv_uses_small_k(&g, 7)); /* too few channels for a vector */
    int64_t nx = g.n * g.in_h * g.in_w * g.c, ny = m * oc;
    float *x = rand_f32(nx), *f = rand_f32(k * oc), *y1 = rand_f32(ny), *y2 = rand_f32(ny);
    float *want = rand_f32(ny), *col = rand_f32(m * k), *blas = rand_f32(ny);
    int ok = 1;
    for (int64_t r = 0; r < m; r++) {
      int64_t ow = r % g.out_w, q = r / g.out_w, oh = q % g.out_h, nb = q / g.out_h, tap = 0;
      for (int64_t i = 0; i < g.k_h; i++)
        for (int64_t j = 0; j < g.k_w; j++)
          for (int64_t ci = 0; ci < g.c; ci++, tap++) {
            int64_t ih = oh * g.stride_h - g.pad_top + i, iw = ow * g.stride_w - g.pad_left + j;
            int inside = ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w;
            col[r * k + tap] = inside ? x[((nb * g.in_h + ih) * g.in_w + iw) * g.c + ci] : 0;
          }
      for (int64_t o = 0; o < oc; o++) {
        float s = 0;
        double exact = 0, mag = 0;
        for (int64_t tp = 0; tp < k; tp++) {
          s = fmaf(col[r * k + tp], f[tp * oc + o], s);
          exact += (double)col[r * k + tp] * f[tp * oc + o];
          mag += fabs((double)col[r * k + tp] * f[tp * oc + o]);
        }
        want[r * oc + o] = s;
        double err = fabs((double)want[r * oc + o] - exact);
        if (err > (double)k * ldexp(1, -24) * mag) ok = 0;
      }
    }
    CHECK(ok);
    npuK_conv_small_k(m, oc, k, col, f, y1);
    if (fma_cpu) CHECK(bits_equal(y1, want, (size_t)ny * 4));
    run_conv(&g, oc, NULL, 1, x, f, y1);
    run_conv(&g, oc, &pool_two, 3, x, f, y2);
    if (fma_cpu) CHECK(bits_equal(y1, want, (size_t)ny * 4));
    CHECK(bits_equal(y1, y2, (size_t)ny * 4));
    npuK_matmul_f32_blas(NULL, 0, 0, m, oc, k, col, f, blas);
    if (!bits_equal(y1, blas, (size_t)ny * 4)) sgemm_same = 0;
    /* with bias + relu, and with a 2x2 pool fused: the separate kernels' bits */
    float *bias = rand_f32(oc);
    npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
    size_t ss = npuK_conv2d_f32_scratch_size(&g, oc, 2);
    float *scratch = malloc(ss ? ss : 1);
    npuK_conv2d_f32_ep(&pool_two, &g, oc, x, f, &ep, y2, scratch, 2);
    npuK_epilogue_f32(&ep, m, oc, oc, y1);
    CHECK(bits_equal(y1, y2, (size_t)ny * 4));
    free(scratch);
    npuK_window2d pw = pool_over(&g, oc, 2, 2, 0);
    if (pw.n) {
      int64_t np_ = pw.n * pw.out_h * pw.out_w * oc;
      float *p1 = rand_f32(np_), *p2 = rand_f32(np_);
      npuK_max_pool_f32(NULL, &pw, y2, p1);
      run_conv_pooled(&g, oc, &pool_two, 2, x, f, &ep, &pw, p2);
      CHECK(bits_equal(p1, p2, (size_t)np_ * 4));
      free(p1), free(p2);
    }
    free(x), free(f), free(y1), free(y2), free(want), free(col), free(blas), free(bias);
  }
  printf("  conv2d small-k product: %s; OpenBLAS's sgemm on the same rows: %s\n",
         fma_cpu ? "AVX2 + FMA" : "not taken (no AVX2 + FMA)",
         sgemm_same ? "the same bits" : "other bits (a non-FMA OpenBLAS kernel)");
}

/* Winograd against float64: |y - exact| <= gamma(c + 7) W (docs/numerics.md); the same bits
   at any thread count and slot count; epilogue and pool bit for bit the separate kernels. */
static void test_conv_winograd(void) {
  static const struct { int64_t n, h, w, c, oc, same, pad_top, pad_left; } cases[] = {
      {1, 1, 1, 1, 1, 1, -1, -1},   {1, 3, 3, 1, 1, 0, -1, -1},  {2, 5, 7, 3, 5, 1, -1, -1},
      {1, 6, 9, 7, 13, 0, -1, -1},  {3, 7, 4, 9, 8, 1, -1, -1},  {1, 8, 8, 17, 3, 1, -1, -1},
      {2, 14, 14, 32, 64, 1, -1, -1}, {1, 11, 13, 33, 9, 0, -1, -1}, {1, 9, 10, 8, 16, 0, 2, 0},
      {2, 6, 5, 12, 7, 0, 0, 2},    {1, 40, 37, 16, 24, 1, -1, -1}, {1, 4, 4, 70, 70, 1, -1, -1},
  };
  const double u = 0x1p-24;
  double worst = 0, worst_direct = 0;
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
    int64_t n = cases[t].n, h = cases[t].h, w = cases[t].w, c = cases[t].c, oc = cases[t].oc;
    npuK_window2d g = make_window(n, h, w, c, 3, 3, 1, 1, 1, 1, (int)cases[t].same);
    if (cases[t].pad_top >= 0) { /* explicit padding: VALID over the padded input */
      g.pad_top = cases[t].pad_top, g.pad_left = cases[t].pad_left;
      g.out_h = h + 2 * g.pad_top - 2, g.out_w = w + 2 * g.pad_left - 2;
    }
    CHECK(g.n > 0 && npuK_conv2d_winograd_fits(&g, NULL));
    int64_t nx = n * h * w * c, nf = 9 * c * oc, ny = n * g.out_h * g.out_w * oc;
    float *x = rand_f32(nx), *f = rand_f32(nf), *y1 = rand_f32(ny), *y2 = rand_f32(ny);
    float *y3 = rand_f32(ny), *yd = rand_f32(ny), *bias = rand_f32(oc);
    double *exact = malloc((size_t)ny * sizeof *exact), *mag = malloc((size_t)ny * sizeof *mag);
    wino_exact(&g, oc, x, f, exact, mag);
    run_winograd(&g, oc, NULL, 1, x, f, NULL, NULL, y1);
    run_conv(&g, oc, NULL, 1, x, f, yd);
    double gamma = (double)(c + 7) * u / (1 - (double)(c + 7) * u);
    int ok = 1;
    for (int64_t i = 0; i < ny; i++) {
      double err = fabs(y1[i] - exact[i]);
      ok &= err <= gamma * mag[i];
      if (mag[i] > 0) worst = fmax(worst, err / (u * mag[i]));
      if (mag[i] > 0) worst_direct = fmax(worst_direct, fabs(yd[i] - exact[i]) / (u * mag[i]));
    }
    CHECK(ok);
    /* determinism: threads, odd ranges, more slots than blocks */
    run_winograd(&g, oc, &pool_two, 3, x, f, NULL, NULL, y2);
    CHECK(bits_equal(y1, y2, (size_t)ny * 4));
    run_winograd(&g, oc, &pool_odd, 2, x, f, NULL, NULL, y3);
    CHECK(bits_equal(y1, y3, (size_t)ny * 4));
    /* epilogues: the kernel's then npuK_epilogue_f32, bit for bit */
    for (int a = 0; a < 3; a++) {
      npuK_epilogue ep = {.bias = bias, .act = a == 0 ? NPUK_ACT_RELU : a == 1 ? NPUK_ACT_NONE
                                                                                : NPUK_ACT_TANH};
      run_winograd(&g, oc, &pool_two, 2, x, f, &ep, NULL, y2);
      memcpy(y3, y1, (size_t)ny * 4);
      npuK_epilogue_f32(&ep, ny / oc, oc, oc, y3);
      CHECK(bits_equal(y2, y3, (size_t)ny * 4));
    }
    /* fused 2x2 stride-2 max pool (VALID and SAME): max_pool of the unpooled output */
    npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
    run_winograd(&g, oc, NULL, 1, x, f, &ep, NULL, y1);
    for (int same = 0; same < 2; same++) {
      npuK_window2d pw = pool_over(&g, oc, 2, 2, same);
      if (pw.n == 0) continue;
      CHECK(npuK_conv2d_winograd_fits(&g, &pw));
      int64_t np = n * pw.out_h * pw.out_w * oc;
      float *p1 = rand_f32(np), *p2 = rand_f32(np);
      npuK_max_pool_f32(NULL, &pw, y1, p1);
      run_winograd(&g, oc, &pool_two, 3, x, f, &ep, &pw, p2);
      CHECK(bits_equal(p1, p2, (size_t)np * 4));
      free(p1), free(p2);
    }
    free(x), free(f), free(y1), free(y2), free(y3), free(yd), free(bias), free(exact), free(mag);
  }
  /* what the bound leaves: the largest error seen, in units of u W (the bound is c + 7) */
  printf("  winograd F(2x2,3x3): largest |y - exact| / (2^-24 W) %.2f (im2col's, same W: %.2f)\n",
         worst, worst_direct);
  /* what it does not take */
  npuK_window2d g = make_window(1, 8, 8, 4, 5, 5, 1, 1, 1, 1, 1);
  CHECK(!npuK_conv2d_winograd_fits(&g, NULL));
  g = make_window(1, 8, 8, 4, 3, 3, 2, 2, 1, 1, 1);
  CHECK(!npuK_conv2d_winograd_fits(&g, NULL));
  g = make_window(1, 8, 8, 4, 3, 3, 1, 1, 2, 2, 1);
  CHECK(!npuK_conv2d_winograd_fits(&g, NULL));
  g = make_window(1, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1);
  npuK_window2d pw = pool_over(&g, 4, 3, 3, 1); /* windows are not the tiles */
  CHECK(npuK_conv2d_winograd_fits(&g, NULL) && !npuK_conv2d_winograd_fits(&g, &pw));
  CHECK(npuK_conv2d_pool_fits(&g, &pw));
  pw = pool_over(&g, 4, 3, 2, 1); /* overlapping windows */
  CHECK(!npuK_conv2d_pool_fits(&g, &pw));
}

/* A pool whose stop flag is up from the start (a cancelled run). */
static int always_stopped(void *self) {
  (void)self;
  return 1;
}

/* Equal bits, or both NaN (a NaN's payload and sign follow the order OpenBLAS meets it in). */
static int same_or_nan(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!bits_equal(a + i, b + i, 4) && !(a[i] != a[i] && b[i] != b[i])) return 0;
  return 1;
}

static void run_direct(const npuK_window2d *g, int64_t oc, const npuK_pool *pool, int slots,
                       const float *x, const float *f, const npuK_epilogue *ep,
                       const npuK_window2d *pw, float *y, int level) {
  size_t ss = npuK_conv2d_direct_scratch_size(g, oc, pw, slots);
  float *scratch = malloc(ss ? ss : 1);
  if (level < 2)
    npuK_conv2d_f32_direct_level_ep(pool, g, oc, x, f, ep, pw, y, scratch, slots, level);
  else npuK_conv2d_f32_direct_ep(pool, g, oc, x, f, ep, pw, y, scratch, slots);
  free(scratch);
}

/* Winograd with U computed once (npuK_conv2d_winograd_filter, then the _u_ep form) against the
   per-call transform, on a large c (the transform split over channels into several ranges):
   the same bits, with and without an epilogue and the fused pool, at other thread counts; the
   _u_ep form's scratch (no U region), filled with NaN, is written before it is read. */
static void test_conv_winograd_prepared(void) {
  const int64_t n = 2, h = 9, w = 12, c = 300, oc = 24;
  npuK_window2d g = make_window(n, h, w, c, 3, 3, 1, 1, 1, 1, 1);
  CHECK(g.n > 0 && npuK_conv2d_winograd_fits(&g, NULL));
  int64_t nx = n * h * w * c, nf = 9 * c * oc, ny = n * g.out_h * g.out_w * oc;
  float *x = rand_f32(nx), *f = rand_f32(nf), *bias = rand_f32(oc);
  float *u1 = malloc(npuK_conv2d_winograd_filter_size(c, oc));
  float *u2 = malloc(npuK_conv2d_winograd_filter_size(c, oc));
  CHECK(npuK_conv2d_winograd_filter_size(c, oc) == (size_t)(16 * c * oc) * 4);
  npuK_conv2d_winograd_filter(NULL, c, oc, f, u1);
  npuK_conv2d_winograd_filter(&pool_odd, c, oc, f, u2);
  CHECK(bits_equal(u1, u2, (size_t)(16 * c * oc) * 4));
  npuK_window2d pw = pool_over(&g, oc, 2, 2, 0);
  CHECK(pw.n > 0 && npuK_conv2d_winograd_fits(&g, &pw));
  for (int k = 0; k < 3; k++) {
    npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
    const npuK_epilogue *e = k ? &ep : NULL;
    const npuK_window2d *pp = k == 2 ? &pw : NULL;
    int64_t m = k == 2 ? n * pw.out_h * pw.out_w * oc : ny;
    float *y1 = rand_f32(m), *y2 = rand_f32(m);
    run_winograd(&g, oc, &pool_two, 3, x, f, e, pp, y1);
    /* U given, the scratch holds no U: exactly its size (valgrind would see an overrun) */
    size_t ss = npuK_conv2d_winograd_u_scratch_size(&g, oc, pp, 2);
    CHECK(ss + (size_t)(16 * g.c * oc) * 4 == npuK_conv2d_winograd_scratch_size(&g, oc, pp, 2));
    float *scratch = malloc(ss);
    for (size_t i = 0; i < ss / 4; i++) scratch[i] = NAN;
    npuK_conv2d_f32_winograd_u_ep(&pool_odd, &g, oc, x, u1, e, pp, y2, scratch, 2);
    CHECK(bits_equal(y1, y2, (size_t)m * 4));
    free(y1), free(y2), free(scratch);
  }
  free(x), free(f), free(bias), free(u1), free(u2);
}

/* conv2d_backprop_input by Winograd (op_select_implmode high_performance): against the
   definition's float64 sums at sizes whose channel sums are long (out_c up to 320), within
   gamma(out_c + 7) W — W Winograd on the absolute values of dy and of the filter turned half a
   turn with its channels swapped, over the forward geometry built here (pad 2 - pad, the
   claim of conv_bwd.c) — the same bits at any thread and slot count; what it does not take. */
static void test_conv_backprop_input_winograd(void) {
  static const int64_t cs[][6] = { /* n h w c same oc */
      {2, 14, 14, 32, 1, 64}, {1, 10, 9, 6, 1, 320}, {2, 8, 7, 5, 0, 320}, {1, 3, 4, 9, 0, 8},
      {3, 5, 6, 16, 1, 24}};
  double worst = 0;
  for (size_t t = 0; t < sizeof cs / sizeof cs[0]; t++) {
    const int64_t *q = cs[t];
    npuK_window2d g = make_window(q[0], q[1], q[2], q[3], 3, 3, 1, 1, 1, 1, (int)q[4]);
    int64_t oc = q[5], nx = g.n * g.in_h * g.in_w * g.c, ny = g.n * g.out_h * g.out_w * oc;
    CHECK(g.n > 0 && npuK_conv2d_backprop_input_winograd_fits(&g, oc));
    npuK_window2d fw = {.n = g.n, .in_h = g.out_h, .in_w = g.out_w, .c = oc, .k_h = 3, .k_w = 3,
                        .stride_h = 1, .stride_w = 1, .dilation_h = 1, .dilation_w = 1,
                        .pad_top = 2 - g.pad_top, .pad_left = 2 - g.pad_left,
                        .out_h = g.in_h, .out_w = g.in_w};
    float *dy = rand_f32(ny), *f = rand_f32(9 * g.c * oc), *turned = rand_f32(9 * g.c * oc);
    for (int64_t i = 0; i < 9; i++)
      for (int64_t ci = 0; ci < g.c; ci++)
        for (int64_t o = 0; o < oc; o++)
          turned[(i * oc + o) * g.c + ci] = f[((8 - i) * g.c + ci) * oc + o];
    double *exact = calloc((size_t)nx, sizeof *exact), *mag = calloc((size_t)nx, sizeof *mag);
    double *ex2 = malloc((size_t)nx * sizeof *ex2), *w_abs = malloc((size_t)nx * sizeof *w_abs);
    bwd_input_exact(&g, oc, dy, f, exact, mag);
    wino_exact(&fw, g.c, dy, turned, ex2, w_abs);
    float *d1 = rand_f32(nx), *d2 = rand_f32(nx), *d3 = rand_f32(nx);
    size_t ss = npuK_conv2d_backprop_input_f32_winograd_scratch_size(&g, oc, 3);
    float *scratch = malloc(ss);
    npuK_conv2d_backprop_input_f32_winograd(NULL, &g, oc, dy, f, d1, scratch, 1);
    npuK_conv2d_backprop_input_f32_winograd(&pool_two, &g, oc, dy, f, d2, scratch, 2);
    npuK_conv2d_backprop_input_f32_winograd(&pool_odd, &g, oc, dy, f, d3, scratch, 3);
    CHECK(bits_equal(d1, d2, (size_t)nx * 4) && bits_equal(d1, d3, (size_t)nx * 4));
    int ok = 1;
    for (int64_t i = 0; i < nx; i++) {
      double err = fabs((double)d1[i] - exact[i]);
      ok &= err <= gamma_u(oc + 7) * w_abs[i] && w_abs[i] >= mag[i] * (1 - 1e-12) &&
            fabs(ex2[i] - exact[i]) <= 1e-12 * mag[i]; /* the forward geometry is the gradient */
      if (w_abs[i] > 0) worst = fmax(worst, err / (0x1p-24 * w_abs[i]));
    }
    CHECK(ok);
    free(dy), free(f), free(turned), free(exact), free(mag), free(ex2), free(w_abs);
    free(d1), free(d2), free(d3), free(scratch);
  }
  printf("  conv2d_backprop_input winograd: largest |dx - exact| / (2^-24 W) %.2f (bound "
         "out_c + 7)\n", worst);
  npuK_window2d g = make_window(1, 9, 9, 8, 3, 3, 2, 2, 1, 1, 1); /* stride 2 */
  CHECK(!npuK_conv2d_backprop_input_winograd_fits(&g, 8));
  CHECK(npuK_conv2d_backprop_input_f32_winograd_scratch_size(&g, 8, 1) == 0);
  g = make_window(1, 9, 9, 8, 5, 5, 1, 1, 1, 1, 1); /* 5x5 */
  CHECK(!npuK_conv2d_backprop_input_winograd_fits(&g, 8));
  g = make_window(1, 9, 9, 8, 3, 3, 1, 1, 2, 2, 1); /* dilated */
  CHECK(!npuK_conv2d_backprop_input_winograd_fits(&g, 8));
}

/* The direct kernel (NPUK_CONV_DIRECT): every output the fmaf chain over its valid taps in
   (kh, kw, ci) order from +0 — computed here from the geometry — bit for bit, AVX-512 and
   AVX2 tiles and the portable twin alike (those the CPU has), at any thread and slot count;
   within gamma(k) sum|x f| of the float64 sum (k = k_h k_w c, docs/numerics.md); the
   epilogues and a fused max pool the separate kernels' bits; a stopped pool stops it.
   Whether OpenBLAS's im2col gave the same bits is reported (OpenBLAS's choice of kernel),
   not asserted. */
static void test_conv_direct(void) {
  static const struct { int64_t n, h, w, c, kh, kw, s, oc; int same, pt, pl; } cs[] = {
      {2, 14, 14, 32, 3, 3, 1, 64, 1, -1, -1}, /* the CNN's second layer at batch 2 */
      {2, 28, 28, 1, 3, 3, 1, 32, 1, -1, -1},  /* its first */
      {1, 9, 7, 3, 3, 3, 1, 8, 0, -1, -1},     /* VALID: no padded copy, one vector */
      {3, 11, 13, 5, 3, 3, 2, 24, 1, -1, -1},  /* strided, 16 + 8 channels */
      {1, 7, 9, 9, 5, 3, 1, 40, 1, -1, -1},    /* 5x3 */
      {1, 6, 6, 17, 1, 1, 1, 16, 0, -1, -1},   /* 1x1 */
      {1, 8, 9, 4, 2, 2, 1, 8, 1, -1, -1},     /* even SAME: padding after only */
      {2, 5, 4, 7, 3, 3, 1, 72, 0, 2, 1},      /* explicit padding, wider than the window */
      {1, 3, 2, 2, 3, 3, 1, 16, 1, -1, -1},    /* narrower than a tile */
      {1, 20, 31, 6, 3, 3, 1, 48, 1, -1, -1},  /* 31 columns: 6 tiles of 5 or 6 */
      {1, 40, 41, 48, 3, 3, 1, 16, 1, -1, -1}, /* padded image over 256 KiB: bands of rows */
      {1, 6, 7, 320, 3, 3, 1, 24, 1, -1, -1},  /* k = 2880 taps x channels: a long chain */
  };
  const double u = 0x1p-24;
  int sgemm_same = 1;
  double worst = 0;
  for (size_t t = 0; t < sizeof cs / sizeof cs[0]; t++) {
    npuK_window2d g = make_window(cs[t].n, cs[t].h, cs[t].w, cs[t].c, cs[t].kh, cs[t].kw,
                                  cs[t].s, cs[t].s, 1, 1, cs[t].same);
    if (cs[t].pt >= 0) { /* explicit padding: VALID over the padded input */
      g.pad_top = cs[t].pt, g.pad_left = cs[t].pl;
      g.out_h = (g.in_h + 2 * g.pad_top - g.k_h) / g.stride_h + 1;
      g.out_w = (g.in_w + 2 * g.pad_left - g.k_w) / g.stride_w + 1;
    }
    int64_t oc = cs[t].oc, k = g.k_h * g.k_w * g.c, m = g.n * g.out_h * g.out_w, ny = m * oc;
    CHECK(g.n > 0 && npuK_conv2d_direct_fits(&g, oc, NULL));
    float *x = rand_f32(g.n * g.in_h * g.in_w * g.c), *f = rand_f32(k * oc);
    float *want = rand_f32(ny), *y1 = rand_f32(ny), *y2 = rand_f32(ny), *bias = rand_f32(oc);
    int ok = 1;
    for (int64_t r = 0; r < m; r++) {
      int64_t ow = r % g.out_w, q = r / g.out_w, oh = q % g.out_h, nb = q / g.out_h;
      for (int64_t o = 0; o < oc; o++) {
        float acc = 0;
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < g.k_h; i++)
          for (int64_t j = 0; j < g.k_w; j++) {
            int64_t ih = oh * g.stride_h - g.pad_top + i, iw = ow * g.stride_w - g.pad_left + j;
            if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) continue;
            for (int64_t ci = 0; ci < g.c; ci++) {
              float a = x[((nb * g.in_h + ih) * g.in_w + iw) * g.c + ci];
              float b = f[((i * g.k_w + j) * g.c + ci) * oc + o];
              acc = fmaf(a, b, acc);
              exact += (double)a * b;
              mag += fabs((double)a * b);
            }
          }
        want[r * oc + o] = acc;
        double err = fabs((double)acc - exact);
        if (err > (double)k * u / (1 - (double)k * u) * mag) ok = 0;
        if (mag > 0) worst = fmax(worst, err / (u * mag));
      }
    }
    CHECK(ok);
    for (int level = 0; level <= 2; level++) { /* the portable twin, AVX2, AVX-512 tiles */
      run_direct(&g, oc, NULL, 1, x, f, NULL, NULL, y1, level);
      CHECK(bits_equal(y1, want, (size_t)ny * 4));
      run_direct(&g, oc, &pool_two, 3, x, f, NULL, NULL, y2, level);
      CHECK(bits_equal(y2, want, (size_t)ny * 4));
      run_direct(&g, oc, &pool_odd, 2, x, f, NULL, NULL, y2, level);
      CHECK(bits_equal(y2, want, (size_t)ny * 4));
    }
    run_conv(&g, oc, NULL, 1, x, f, y2); /* im2col + OpenBLAS */
    if (!bits_equal(y2, want, (size_t)ny * 4)) sgemm_same = 0;
    /* epilogues: in registers (bias, bias + relu) or after (tanh), the separate kernels' bits */
    for (int a = 0; a < 3; a++)
      for (int level = 0; level <= 2; level++) {
        npuK_epilogue ep = {.bias = bias, .act = a == 0 ? NPUK_ACT_RELU : a == 1 ? NPUK_ACT_NONE
                                                                                  : NPUK_ACT_TANH};
        run_direct(&g, oc, &pool_two, 2, x, f, &ep, NULL, y2, level);
        memcpy(y1, want, (size_t)ny * 4);
        npuK_epilogue_f32(&ep, m, oc, oc, y1);
        CHECK(bits_equal(y1, y2, (size_t)ny * 4));
      }
    /* fused max pools (2x2 VALID and SAME, 3x3 stride 3): max_pool of the unpooled output */
    npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
    memcpy(y1, want, (size_t)ny * 4);
    npuK_epilogue_f32(&ep, m, oc, oc, y1);
    for (int v = 0; v < 3; v++) {
      npuK_window2d pw = pool_over(&g, oc, v < 2 ? 2 : 3, v < 2 ? 2 : 3, v == 1);
      if (pw.n == 0) continue;
      CHECK(npuK_conv2d_direct_fits(&g, oc, &pw));
      int64_t np_ = pw.n * pw.out_h * pw.out_w * oc;
      float *p1 = rand_f32(np_), *p2 = rand_f32(np_);
      npuK_max_pool_f32(NULL, &pw, y1, p1);
      for (int level = 0; level <= 2; level++) {
        run_direct(&g, oc, level ? &pool_two : &pool_odd, 3, x, f, &ep, &pw, p2, level);
        CHECK(bits_equal(p1, p2, (size_t)np_ * 4));
      }
      free(p1), free(p2);
    }
    free(x), free(f), free(want), free(y1), free(y2), free(bias);
  }
  /* the 2x2 pool in registers pools the sums before the bias and relu, falling back to
     max_pool's rule where a NaN may appear: the separate kernels' bits with NaN, infinite
     and zero inputs (ties, -0 sums from products that underflow), biases of +-inf, NaN and
     -0, over 32 + 8 channels (a masked vector), with and without relu (a NaN's sign is the
   order of the add's operands: same_or_nan) */
  for (int a = 0; a < 2; a++) {
    npuK_window2d g = make_window(2, 8, 10, 3, 3, 3, 1, 1, 1, 1, 1);
    const int64_t oc = 40, nx = 2 * 8 * 10 * 3, ny = 2 * 8 * 10 * oc;
    float *x = rand_f32(nx), *f = rand_f32(27 * oc), *bias = rand_f32(oc);
    float *y = rand_f32(ny);
    for (int64_t i = 0; i < nx; i += 7) x[i] = 0;
    for (int64_t i = 3; i < nx; i += 11) x[i] = -1e-30f; /* x f underflows: -0 sums */
    for (int64_t i = 0; i < 27 * oc; i += 5) f[i] = 1e-20f;
    x[5] = NAN, x[100] = INFINITY, x[301] = -INFINITY, x[402] = -NAN;
    bias[0] = INFINITY, bias[1] = -INFINITY, bias[2] = NAN, bias[3] = -0.0f, bias[35] = -0.0f;
    for (int i = 4; i < 30; i += 3) bias[i] = 0;
    npuK_epilogue ep = {.bias = bias, .act = a ? NPUK_ACT_RELU : NPUK_ACT_NONE};
    run_direct(&g, oc, NULL, 1, x, f, &ep, NULL, y, 0);
    npuK_window2d pw = pool_over(&g, oc, 2, 2, 0);
    int64_t np_ = pw.n * pw.out_h * pw.out_w * oc;
    float *p1 = rand_f32(np_), *p2 = rand_f32(np_);
    npuK_max_pool_f32(NULL, &pw, y, p1);
    for (int level = 0; level <= 2; level++) {
      run_direct(&g, oc, &pool_two, 2, x, f, &ep, &pw, p2, level);
      CHECK(same_or_nan(p1, p2, np_));
    }
    free(x), free(f), free(bias), free(y), free(p1), free(p2);
  }
  /* cancelled: nothing is computed (y keeps its sentinel) */
  {
    npuK_window2d g = make_window(1, 6, 6, 2, 3, 3, 1, 1, 1, 1, 1);
    npuK_pool stopped = {NULL, NULL, always_stopped};
    float *x = rand_f32(72), *f = rand_f32(18 * 8), y[288];
    for (int i = 0; i < 288; i++) y[i] = 12345;
    run_direct(&g, 8, &stopped, 1, x, f, NULL, NULL, y, 2);
    int untouched = 1;
    for (int i = 0; i < 288; i++) untouched &= y[i] == 12345;
    CHECK(untouched);
    free(x), free(f);
  }
  /* what it does not take: dilation, out_c off the vectors, overlapping pool windows */
  npuK_window2d g = make_window(1, 8, 8, 4, 3, 3, 1, 1, 2, 2, 1);
  CHECK(!npuK_conv2d_direct_fits(&g, 8, NULL));
  g = make_window(1, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1);
  CHECK(!npuK_conv2d_direct_fits(&g, 12, NULL) && !npuK_conv2d_direct_fits(&g, 4, NULL));
  npuK_window2d pw = pool_over(&g, 8, 3, 2, 1);
  CHECK(npuK_conv2d_direct_fits(&g, 8, NULL) && !npuK_conv2d_direct_fits(&g, 8, &pw));
  g = make_window(1, 8, 8, 4, 3, 3, 1, 1, 1, 1, 0);
  CHECK(npuK_conv2d_direct_scratch_size(&g, 8, NULL, 2) == 0); /* VALID, no pool: none */
  g = make_window(1, 400, 400, 64, 3, 3, 1, 1, 1, 1, 1); /* a large image: a band, not all */
  CHECK(npuK_conv2d_direct_scratch_size(&g, 64, NULL, 1) < (size_t)7 * 402 * 64 * 4);
  printf("  conv2d direct: largest |y - exact| / (2^-24 sum|x f|) %.2f (bound k); OpenBLAS's "
         "im2col: %s\n", worst, sgemm_same ? "the same bits" : "other bits");
}

/* im2col + pool in one kernel: bit for bit conv2d (+ epilogue), then max_pool, at any thread
   and slot count; the random shapes include several blocks (slots, pool rows across blocks). */
static void test_conv_pooled(void) {
  for (int iter = 0; iter < 40; iter++) {
    int64_t n = rng_int(1, 3), h = rng_int(1, 15), w = rng_int(1, 15), c = rng_int(1, 9);
    int64_t k = rng_int(1, 3), s = rng_int(1, 2), oc = rng_int(1, 11);
    int same = (int)rng_int(0, 1), pk = rng_int(1, 3), ps = pk + rng_int(0, 1);
    if (iter == 0) n = 32, h = w = 28, c = 1, k = 3, s = 1, oc = 32, same = 1, pk = ps = 2;
    if (iter == 1) n = 4, h = w = 14, c = 32, k = 3, s = 1, oc = 64, same = 1, pk = ps = 2;
    if (iter == 2) n = 1, h = 9, w = 7, c = 3, k = 3, s = 1, oc = 5, same = 0, pk = ps = 2;
    if (iter == 4) n = 3, h = 15, w = 5, c = 6, k = 3, s = 1, oc = 6, same = 1, pk = ps = 2;
    if (iter == 5) n = 2, h = 9, w = 300, c = 300, k = 3, s = 1, oc = 3, same = 1, pk = ps = 3;
    npuK_window2d g = make_window(n, h, w, c, k, k, s, s, 1, 1, same);
    if (g.n == 0) continue;
    npuK_window2d pw = pool_over(&g, oc, pk, ps, (int)rng_int(0, 1));
    if (pw.n == 0) continue;
    CHECK(npuK_conv2d_pool_fits(&g, &pw));
    int64_t nx = n * h * w * c, ny = n * g.out_h * g.out_w * oc, np = n * pw.out_h * pw.out_w * oc;
    float *x = rand_f32(nx), *f = rand_f32(k * k * c * oc), *y = rand_f32(ny);
    float *bias = rand_f32(oc), *p1 = rand_f32(np), *p2 = rand_f32(np), *p3 = rand_f32(np);
    if (iter % 4 == 3) x[0] = NAN; /* NaN wins its window, as in max_pool */
    npuK_epilogue ep = {.bias = bias, .act = iter % 3 ? NPUK_ACT_RELU : NPUK_ACT_NONE};
    size_t ss = npuK_conv2d_f32_scratch_size(&g, oc, 1);
    float *scratch = malloc(ss ? ss : 1);
    npuK_conv2d_f32_ep(NULL, &g, oc, x, f, &ep, y, scratch, 1);
    free(scratch);
    npuK_max_pool_f32(NULL, &pw, y, p1);
    run_conv_pooled(&g, oc, NULL, 1, x, f, &ep, &pw, p2);
    CHECK(same_or_nan(p1, p2, np));
    run_conv_pooled(&g, oc, &pool_odd, 3, x, f, &ep, &pw, p3);
    CHECK(bits_equal(p2, p3, (size_t)np * 4));
    run_conv_pooled(&g, oc, &pool_two, 2, x, f, &ep, &pw, p3);
    CHECK(bits_equal(p2, p3, (size_t)np * 4));
    free(x), free(f), free(y), free(bias), free(p1), free(p2), free(p3);
  }
}

/* conv2d_backprop_filter: the register-tiled kernel (AVX-512 and AVX2 tiles) against the
   direct loops, bit for bit (the same sums in the same order), on any pool: channel counts off
   the tiles (4 input channels, 32 / 16 / 8 output channels, masked and scalar tails), more than 16 input channels (several
   items per (kh, kw)), blocks of 64 positions crossing rows and images, strides, dilation,
   SAME and VALID; and float32 throughout when there is no scratch. */
static void test_conv_filter_grad(void) {
  static const int64_t shapes[][11] = { /* n h w c kh kw s d same oc */
      {1, 5, 5, 1, 3, 3, 1, 1, 1, 32, 0}, {2, 9, 7, 3, 3, 3, 1, 1, 1, 17, 0},
      {3, 11, 13, 20, 3, 3, 2, 1, 1, 9, 0}, {1, 8, 8, 5, 1, 1, 1, 1, 0, 64, 0},
      {2, 12, 10, 7, 3, 2, 1, 2, 0, 24, 0}, {5, 6, 6, 33, 2, 2, 2, 1, 1, 7, 0},
      {1, 1, 1, 2, 1, 1, 1, 1, 1, 1, 0},    {4, 14, 14, 32, 3, 3, 1, 1, 1, 64, 0},
      /* one input channel (vectors of output channels over all taps, each tap its blocks) */
      {6, 28, 28, 1, 3, 3, 1, 1, 1, 32, 0}, {2, 9, 11, 1, 3, 3, 2, 1, 0, 8, 0},
      {3, 7, 7, 1, 2, 2, 1, 2, 1, 16, 0},   {1, 6, 6, 1, 1, 1, 1, 1, 0, 24, 0},
      /* AVX-512's output channel tails: 32 + 8 in a masked vector, 32 + 16 */
      {2, 6, 7, 20, 3, 3, 1, 1, 1, 40, 0},  {1, 5, 6, 9, 3, 3, 1, 1, 1, 48, 0}};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
    const int64_t *s = shapes[t];
    npuK_window2d g = make_window(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[6], s[7], s[7],
                                  (int)s[8]);
    CHECK(g.n > 0);
    int64_t oc = s[9], nx = g.n * g.in_h * g.in_w * g.c, ny = g.n * g.out_h * g.out_w * oc;
    int64_t nf = g.k_h * g.k_w * g.c * oc;
    float *x = rand_f32(nx), *dy = rand_f32(ny), *f1 = rand_f32(nf), *f2 = rand_f32(nf);
    float *f3 = rand_f32(nf), *f4 = rand_f32(nf);
    double *acc = malloc(npuK_filter_grad_f32_scratch_size(&g, oc));
    npuK_conv2d_backprop_filter_f32_ref(NULL, &g, oc, x, dy, f1, acc);
    npuK_conv2d_backprop_filter_f32(NULL, &g, oc, x, dy, f2, acc);
    CHECK(bits_equal(f1, f2, (size_t)nf * 4));
    npuK_conv2d_backprop_filter_f32(&pool_two, &g, oc, x, dy, f3, acc);
    CHECK(bits_equal(f1, f3, (size_t)nf * 4));
    npuK_conv2d_backprop_filter_f32(&pool_odd, &g, oc, x, dy, f4, acc);
    CHECK(bits_equal(f1, f4, (size_t)nf * 4));
    npuK_conv2d_backprop_filter_f32_level(&pool_odd, &g, oc, x, dy, f4, acc, 1); /* AVX2 */
    CHECK(bits_equal(f1, f4, (size_t)nf * 4));
    npuK_conv2d_backprop_filter_f32_ref(NULL, &g, oc, x, dy, f1, NULL);
    npuK_conv2d_backprop_filter_f32(&pool_two, &g, oc, x, dy, f2, NULL);
    CHECK(bits_equal(f1, f2, (size_t)nf * 4));
    free(x); free(dy); free(f1); free(f2); free(f3); free(f4); free(acc);
  }
}

/* The fast depthwise kernel's paths (register tiles of 4 columns x 16 or 8 channels, a scalar
   channel tail, border columns with their own kw range, rows with no valid kh, multiplier > 1,
   epilogues applied in registers) against the naive ref: the same summation order, so the
   same bits, on any pool. */
static void check_depthwise(const npuK_window2d *g, int64_t mult, const npuK_epilogue *ep,
                            float scale) {
  int64_t cm = g->c * mult, nx = g->n * g->in_h * g->in_w * g->c;
  int64_t ny = g->n * g->out_h * g->out_w * cm;
  float *x = rand_f32(nx), *f = rand_f32(g->k_h * g->k_w * cm);
  float *y1 = rand_f32(ny), *y2 = rand_f32(ny), *y3 = rand_f32(ny), *y4 = rand_f32(ny);
  for (int64_t i = 0; i < nx; i++) x[i] *= scale;
  npuK_depthwise_conv2d_f32_ep(NULL, g, mult, x, f, ep, y1);
  npuK_depthwise_conv2d_f32_ref_ep(NULL, g, mult, x, f, ep, y2);
  npuK_depthwise_conv2d_f32_ep(&pool_two, g, mult, x, f, ep, y3);
  npuK_depthwise_conv2d_f32_ep(&pool_odd, g, mult, x, f, ep, y4);
  CHECK(bits_equal(y1, y2, (size_t)ny * 4));
  CHECK(bits_equal(y1, y3, (size_t)ny * 4) && bits_equal(y1, y4, (size_t)ny * 4));
  npuK_depthwise_conv2d_f32_portable_ep(&pool_two, g, mult, x, f, ep, y3);
  CHECK(bits_equal(y1, y3, (size_t)ny * 4));
  free(x); free(f); free(y1); free(y2); free(y3); free(y4);
}

static void test_depthwise_paths(void) {
  /* channels: below one vector, one vector + tail, one block, block + vector + tail */
  static const int64_t chans[] = {1, 3, 8, 13, 16, 24, 37};
  for (size_t ci = 0; ci < sizeof chans / sizeof *chans; ci++)
    for (int64_t s = 1; s <= 2; s++)
      for (int64_t d = 1; d <= 2; d++)
        for (int same = 0; same <= 1; same++) {
          /* widths 9 and 14: interior column counts that leave 1..3 after the 4-column tiles */
          npuK_window2d g = make_window(2, 7, 9 + 5 * same, chans[ci], 3, 3, s, s, d, d, same);
          if (g.n == 0) continue;
          check_depthwise(&g, 1, NULL, 1);
          check_depthwise(&g, 1 + (int64_t)(ci % 3), NULL, 1); /* multiplier 1, 2, 3 */
        }
  /* 5x5 and 1x4 filters, stride 2 SAME on an even width (padding only after) */
  npuK_window2d g = make_window(1, 10, 12, 21, 5, 5, 2, 2, 1, 1, 1);
  check_depthwise(&g, 1, NULL, 1);
  g = make_window(1, 6, 11, 17, 1, 4, 1, 1, 1, 1, 1);
  check_depthwise(&g, 1, NULL, 1);
  /* no interior column (the window is wider than the input) and rows/columns with no valid
     tap at all (explicit padding larger than the dilated window) */
  g = make_window(1, 3, 2, 19, 3, 5, 1, 1, 1, 1, 1);
  CHECK(g.n == 1 && g.out_w == 2);
  check_depthwise(&g, 1, NULL, 1);
  npuK_window2d e = {1, 2, 3, 18, 2, 2, 1, 1, 1, 1, 3, 3, 7, 8};
  check_depthwise(&e, 1, NULL, 1);
  check_depthwise(&e, 2, NULL, 1);

  /* epilogues in registers (bias and activations), including channel tails; x scaled so that
     relu6 clips on both sides. Sigmoid and multiplier 2 take the per-row epilogue. */
  float bias[40], slope[40];
  for (int i = 0; i < 40; i++) bias[i] = (float)(i % 7) - 3.0f, slope[i] = 0.05f * (float)i - 1;
  static const npuK_act acts[] = {NPUK_ACT_NONE,       NPUK_ACT_RELU,    NPUK_ACT_RELU6,
                                  NPUK_ACT_LEAKY_RELU, NPUK_ACT_PRELU,   NPUK_ACT_SIGMOID};
  for (size_t a = 0; a < sizeof acts / sizeof *acts; a++)
    for (int with_bias = 0; with_bias <= 1; with_bias++) {
      npuK_epilogue ep = {with_bias ? bias : NULL, acts[a], 0.2f, slope, 0};
      g = make_window(1, 5, 10, 37, 3, 3, 1, 1, 1, 1, 1);
      check_depthwise(&g, 1, &ep, 8);
      g = make_window(1, 5, 9, 13, 3, 3, 2, 2, 1, 1, 1);
      check_depthwise(&g, 1, &ep, 8);
      g = make_window(1, 4, 5, 7, 3, 3, 1, 1, 1, 1, 1);
      check_depthwise(&g, 2, &ep, 8);
    }
  /* relu6 of a tile holding NaN, +-inf and -0 (x = 0 at one pixel with a negative filter) */
  {
    npuK_window2d h = make_window(1, 1, 4, 16, 1, 1, 1, 1, 1, 1, 0);
    float x[64], f[16], y1[64], y2[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(i % 9) - 4.0f;
    for (int i = 0; i < 16; i++) f[i] = i % 2 ? -2.0f : 2.0f;
    x[3] = NAN, x[5] = INFINITY, x[6] = -INFINITY;
    for (size_t a = 1; a < sizeof acts / sizeof *acts; a++) {
      npuK_epilogue ep = {NULL, acts[a], 0.2f, slope, 0};
      npuK_depthwise_conv2d_f32_ep(NULL, &h, 1, x, f, &ep, y1);
      npuK_depthwise_conv2d_f32_ref_ep(NULL, &h, 1, x, f, &ep, y2);
      CHECK(bits_equal(y1, y2, sizeof y1));
      npuK_depthwise_conv2d_f32_portable_ep(NULL, &h, 1, x, f, &ep, y2);
      CHECK(bits_equal(y1, y2, sizeof y1));
    }
  }
}

/* The pools' vector path (8 channels at a time in registers) and their scalar tail against
   the ref, with NaN and infinities among the inputs, on borders, strides and an explicit
   padding whose corner windows are empty. */
static void test_pool_paths(void) {
  static const int64_t chans[] = {5, 8, 13, 37};
  for (size_t ci = 0; ci < sizeof chans / sizeof *chans; ci++)
    for (int64_t k = 2; k <= 3; k++)
      for (int64_t s = 1; s <= 2; s++)
        for (int same = 0; same <= 2; same++) {
          npuK_window2d g = make_window(2, 7, 10, chans[ci], k, k, s, s, 1, 1, same == 1);
          if (same == 2) g = (npuK_window2d){1, 3, 4, chans[ci], k, k, s, s, 1, 1, 3, 3, 7, 8};
          if (g.n == 0) continue;
          int64_t nx = g.n * g.in_h * g.in_w * g.c, ny = g.n * g.out_h * g.out_w * g.c;
          float *x = rand_f32(nx), *y1 = rand_f32(ny), *y2 = rand_f32(ny), *y3 = rand_f32(ny);
          x[nx / 3] = NAN, x[nx / 2] = INFINITY, x[nx - 1] = -INFINITY, x[1] = -0.0f;
          npuK_max_pool_f32(NULL, &g, x, y1);
          npuK_max_pool_f32_ref(NULL, &g, x, y2);
          npuK_max_pool_f32(&pool_odd, &g, x, y3);
          CHECK(bits_equal(y1, y2, (size_t)ny * 4) && bits_equal(y1, y3, (size_t)ny * 4));
          npuK_avg_pool_f32(NULL, &g, x, y1);
          npuK_avg_pool_f32_ref(NULL, &g, x, y2);
          npuK_avg_pool_f32(&pool_two, &g, x, y3);
          CHECK(bits_equal(y1, y2, (size_t)ny * 4) && bits_equal(y1, y3, (size_t)ny * 4));
          free(x); free(y1); free(y2); free(y3);
        }
}

static void test_depthwise_pool_hand(void) {
  /* depthwise: 2 channels, multiplier 2, 2x2 input, 1x1 filter */
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, f[4] = {1, 10, 100, 1000}, y[16];
  npuK_window2d g = make_window(1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0);
  npuK_depthwise_conv2d_f32(NULL, &g, 2, x, f, y);
  CHECK(y[0] == 1 && y[1] == 10 && y[2] == 200 && y[3] == 2000 && y[12] == 7 &&
        y[15] == 8000);
  /* pools: 3x3 SAME stride 1 on a 3x3 image 1..9 */
  float xi[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, yo[9];
  g = make_window(1, 3, 3, 1, 3, 3, 1, 1, 1, 1, 1);
  npuK_avg_pool_f32(NULL, &g, xi, yo);
  CHECK(yo[0] == 3.0f && yo[1] == 3.5f && yo[4] == 5.0f && yo[8] == 7.0f);
  npuK_max_pool_f32(NULL, &g, xi, yo);
  CHECK(yo[0] == 5 && yo[1] == 6 && yo[4] == 9 && yo[6] == 8);
  /* 2x2 SAME stride 2 on 3x3: bottom/right windows hold 2 and 1 valid elements */
  g = make_window(1, 3, 3, 1, 2, 2, 2, 2, 1, 1, 1);
  CHECK(g.out_h == 2 && g.pad_top == 0);
  npuK_avg_pool_f32(NULL, &g, xi, yo);
  CHECK(yo[0] == 3.0f && yo[1] == 4.5f && yo[2] == 7.5f && yo[3] == 9.0f);
  /* explicit padding with an empty window */
  npuK_window2d e = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2};
  float one = 4, eo[4];
  npuK_avg_pool_f32(NULL, &e, &one, eo);
  CHECK(eo[0] == 0 && eo[3] == 4);
  npuK_max_pool_f32(NULL, &e, &one, eo);
  CHECK(eo[0] == -INFINITY && eo[3] == 4);
}

static void test_dtype_size(void) {
  CHECK(npuK_dtype_size(NPUK_F32) == 4 && npuK_dtype_size(NPUK_F16) == 2 &&
        npuK_dtype_size(NPUK_BF16) == 2 && npuK_dtype_size(NPUK_F64) == 8 &&
        npuK_dtype_size(NPUK_I8) == 1 && npuK_dtype_size(NPUK_U8) == 1 &&
        npuK_dtype_size(NPUK_I32) == 4 && npuK_dtype_size(NPUK_I64) == 8 &&
        npuK_dtype_size(NPUK_BOOL) == 1 && npuK_dtype_size(NPUK_DTYPE_COUNT) == 0);
}

/* An epilogue's fast sigmoid / tanh (npuK_epilogue.fast): the bits of the bias add, then the
   high_performance kernel over the whole block, whether the rows are one run (ld = cols) or
   one each (a GEMM's column slab), and not libm's everywhere. */
static void test_fast_epilogue(void) {
  const int64_t rows = 5, cols = 37, ld = 40;
  const npuK_act acts[] = {NPUK_ACT_SIGMOID, NPUK_ACT_TANH};
  const npuK_unop ops[] = {NPUK_UN_SIGMOID, NPUK_UN_TANH};
  float *x = rand_f32(rows * ld), *bias = rand_f32(cols);
  float *got = malloc((size_t)(rows * ld) * 4), *want = malloc((size_t)(rows * ld) * 4);
  float *libm = malloc((size_t)(rows * ld) * 4);
  for (int64_t i = 0; i < rows * ld; i++) x[i] *= 8.0f;
  for (int a = 0; a < 2; a++)
    for (int dense = 0; dense < 2; dense++) {
      int64_t stride = dense ? cols : ld;
      memcpy(got, x, (size_t)(rows * ld) * 4);
      memcpy(want, x, (size_t)(rows * ld) * 4);
      memcpy(libm, x, (size_t)(rows * ld) * 4);
      npuK_epilogue fast = {.bias = bias, .act = acts[a], .fast = 1};
      npuK_epilogue plain = {.bias = bias, .act = acts[a]};
      npuK_epilogue bias_only = {.bias = bias, .act = NPUK_ACT_NONE};
      npuK_epilogue_f32(&fast, rows, cols, stride, got);
      npuK_epilogue_f32(&plain, rows, cols, stride, libm);
      npuK_epilogue_f32(&bias_only, rows, cols, stride, want);
      for (int64_t r = 0; r < rows; r++)
        CHECK(npuK_unary_f32_fast(NULL, ops[a], cols, want + r * stride, want + r * stride) == 0);
      CHECK(bits_equal(got, want, (size_t)(rows * ld) * 4));
      CHECK(!bits_equal(got, libm, (size_t)(rows * ld) * 4));
    }
  free(x), free(bias), free(got), free(want), free(libm);
  /* an elementwise program's UNARY_FAST (rows longer than a block, a partial one at the end):
     the fast kernel's bits at any thread count; _ref runs libm's */
  const int64_t er = 3, ec = NPUK_EW_BLOCK + 477;
  float *ex = rand_f32(er * ec), *ey = malloc((size_t)(er * ec) * 4), *ew = malloc((size_t)(er * ec) * 4);
  for (int64_t i = 0; i < er * ec; i++) ex[i] = ex[i] * 20.0f - 10.0f;
  const npuK_ew_instr prog[] = {{.kind = NPUK_EW_LOAD, .operand = 0},
                                {.kind = NPUK_EW_UNARY_FAST, .op = NPUK_UN_EXP, .operand = -1}};
  const float *const eops[] = {ex};
  npuK_unary_f32_fast(NULL, NPUK_UN_EXP, er * ec, ex, ew);
  npuK_eltwise_f32(&pool_two, 2, prog, er, ec, eops, ey);
  CHECK(bits_equal(ey, ew, (size_t)(er * ec) * 4));
  npuK_eltwise_f32(&pool_odd, 2, prog, er, ec, eops, ey);
  CHECK(bits_equal(ey, ew, (size_t)(er * ec) * 4));
  npuK_unary_f32(NULL, NPUK_UN_EXP, er * ec, ex, ew);
  npuK_eltwise_f32_ref(NULL, 2, prog, er, ec, eops, ey);
  CHECK(bits_equal(ey, ew, (size_t)(er * ec) * 4));
  free(ex), free(ey), free(ew);
}

int main(void) {
  test_dtype_size();
  test_fast_epilogue();
  test_half();
  test_matmul();
  test_matmul_small_m();
  test_matmul_sgd();
  test_matmul_half_sgd();
  test_binary_f32();
  test_binary_f64();
  test_binary_i32();
  test_binary_i64();
  test_binary_hand();
  test_unary();
  test_nn();
  test_reduce_f32();
  test_reduce_f64();
  test_reduce_i32();
  test_reduce_i64();
  test_reduce_hand();
  test_reduce_accuracy();
  test_transpose();
  test_movement();
  test_cast();
  test_output_dim();
  test_conv_hand();
  test_conv_random();
  test_conv_small_k();
  test_conv_winograd();
  test_conv_winograd_prepared();
  test_conv_backprop_input_winograd();
  test_conv_direct();
  test_conv_pooled();
  test_depthwise_pool_hand();
  test_depthwise_paths();
  test_pool_paths();
  test_conv_filter_grad();
  test_max_pool_grad();
  test_conv_backprop_input_gemm();
  test_conv_grads_exact();
  test_fused_train_oracle();
  return check_summary("test_kernels");
}
