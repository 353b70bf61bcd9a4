/* blas.c: the only file that talks to OpenBLAS (<cblas.h>).
 *
 * Matmul C (m, n) = op(A) op(B), row-major, contiguous; A stored (m, k) or (k, m) if trans_a,
 * B stored (k, n) or (n, k) if trans_b.
 *
 * Threads: OpenBLAS runs single-threaded (npuK_blas_set_threads(1), set when a context is
 * created) and the GEMM is parallelised here, over the pool: C is cut into blocks of rows (or of
 * columns when there are few rows) whose sizes depend only on (m, n, k), and each block is one
 * single-threaded sgemm.  So the same shapes always make the same calls, whatever the thread
 * count: results are bitwise identical across thread counts (the `deterministic` option), and
 * the device has one pool instead of two fighting over the cores.
 * Dimensions that do not fit in blasint fall back to the reference loop.
 *
 * Few rows (m <= GEMV_MAX_M): each row of a block is one matrix-vector product (sgemv: no
 * packing of B), when that is measured faster than OpenBLAS's sgemm: one row against an op(B)
 * of at least GEMV_MIN_N columns, or up to GEMV_MAX_M rows of a product too big for OpenBLAS's
 * small-matrix kernel (m n k > GEMV_BIG_WORK), whose packing of B costs ~4-8x the whole GEMV
 * (bench/bench_mlp.c; 1 x 1024 x 1024: sgemm 430 us, sgemv 53 us).  The choice is a function of
 * (m, n, k) alone, made once per GEMM, so thread counts still do not change the bits.
 * The tuner (compile/tuning.c, aoe_mode) may force either (npuK_gemm_algo): the same float32
 * sum over k, other rounding order, within the bound both are held to.
 */
#include <limits.h>
#include <string.h>
#include <cblas.h>

#include "kernels/kernels.h"
#include "kernels/kgrad.h"

static int fits_blasint(int64_t m, int64_t n, int64_t k) {
  return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX;
}

/* The block plan of one GEMM: by rows when there are enough, else by columns, at most
   MAX_BLOCKS blocks of at least MIN_BLOCK; small products are one block. */
enum { MIN_BLOCK = 256, MAX_BLOCKS = 32, SMALL_WORK = 1 << 21 };
enum { GEMV_MAX_M = 4, GEMV_MIN_N = 128, GEMV_BIG_WORK = 1 << 20 };

/* Whether a GEMM of these shapes runs its rows as matrix-vector products (see the top). */
static int use_gemv(int64_t m, int64_t n, int64_t k) {
  return (m == 1 && n >= GEMV_MIN_N) || (m <= GEMV_MAX_M && m * n * k > GEMV_BIG_WORK);
}

/* The rule above, or what the step's algorithm forces (npuK_gemm_algo). */
static int pick_gemv(int algo, int64_t m, int64_t n, int64_t k) {
  return algo == NPUK_GEMM_SGEMM ? 0 : algo == NPUK_GEMM_GEMV ? 1 : use_gemv(m, n, k);
}

int npuK_gemm_uses_gemv(int algo, int64_t m, int64_t n, int64_t k) {
  return pick_gemv(algo, m, n, k);
}

typedef struct gemm_job {
  int trans_a, trans_b, by_rows, f64, gemv;
  int64_t m, n, k, block;
  const void *a, *b;
  void *c;
  const npuK_epilogue *ep; /* f32 only: bias as C's initial value, activation after */
  const npuK_pool *pool;   /* polled between blocks (npuK_stopped): a cancelled run stops */
} gemm_job;

static void plan_blocks(gemm_job *j, int64_t *n_blocks) {
  int64_t m = j->m, n = j->n;
  *n_blocks = 1;
  j->by_rows = 1;
  j->block = m;
  if (m * n * j->k < SMALL_WORK) return;
  int64_t len = m >= 2 * MIN_BLOCK ? m : n;
  if (len < 2 * MIN_BLOCK) return;
  j->by_rows = m >= 2 * MIN_BLOCK;
  int64_t block = (len + MAX_BLOCKS - 1) / MAX_BLOCKS;
  if (block < MIN_BLOCK) block = MIN_BLOCK;
  block = (block + 7) & ~(int64_t)7;
  j->block = block;
  *n_blocks = (len + block - 1) / block;
}

/* Row r of op(A) (A's block as the GEMM passes it, leading dimension lda) and its stride. */
static size_t a_row(enum CBLAS_TRANSPOSE ta, blasint lda, int64_t r, blasint *inc) {
  *inc = ta == CblasTrans ? lda : 1;
  return (size_t)(ta == CblasTrans ? r : r * lda);
}

/* C's row r (n) = op(B) applied to row r of op(A) (k), plus beta times C's row: y = B^T x
   when B is stored (k, n), y = B x when it is stored (n, k) (trans_b). */
static void sgemv_rows(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
                       int64_t k, const float *a, blasint lda, const float *b, blasint ldb,
                       float beta, float *c, blasint ldc) {
  for (int64_t r = 0; r < m; r++) {
    blasint inc;
    const float *x = a + a_row(ta, lda, r, &inc);
    if (tb == CblasTrans)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)k, 1.0f, b, ldb, x, inc, beta,
                  c + r * ldc, 1);
    else
      cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)k, (blasint)n, 1.0f, b, ldb, x, inc, beta,
                  c + r * ldc, 1);
  }
}

static void dgemv_rows(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
                       int64_t k, const double *a, blasint lda, const double *b, blasint ldb,
                       double *c, blasint ldc) {
  for (int64_t r = 0; r < m; r++) {
    blasint inc;
    const double *x = a + a_row(ta, lda, r, &inc);
    if (tb == CblasTrans)
      cblas_dgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)k, 1.0, b, ldb, x, inc, 0.0,
                  c + r * ldc, 1);
    else
      cblas_dgemv(CblasRowMajor, CblasTrans, (blasint)k, (blasint)n, 1.0, b, ldb, x, inc, 0.0,
                  c + r * ldc, 1);
  }
}

/* One float32 block C (m, n; row stride ldc) = op(A) op(B), columns col0.. of the whole, by
   sgemm or (gemv) by rows.  A fused step's epilogue: the block starts as the bias (beta = 1
   accumulates onto it) and gets its activation while it is still in cache. */
static void sgemm_block(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int gemv, int64_t m,
                        int64_t n, int64_t k, const float *a, blasint lda, const float *b,
                        blasint ldb, const npuK_epilogue *ep, int64_t col0, float *c,
                        blasint ldc) {
  if (ep && ep->bias)
    for (int64_t r = 0; r < m; r++) memcpy(c + r * ldc, ep->bias + col0, (size_t)n * sizeof *c);
  float beta = ep && ep->bias ? 1.0f : 0.0f;
  if (gemv) sgemv_rows(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, 1.0f, a, lda, b, ldb,
                beta, c, ldc);
  if (ep && ep->act != NPUK_ACT_NONE) {
    npuK_epilogue act = {.act = ep->act, .alpha = ep->alpha,
                         .slope = ep->slope ? ep->slope + col0 : NULL, .fast = ep->fast};
    npuK_epilogue_f32(&act, m, n, ldc, c);
  }
}

static void gemm_range(void *arg, int64_t b0, int64_t b1) {
  const gemm_job *j = arg;
  enum CBLAS_TRANSPOSE ta = j->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = j->trans_b ? CblasTrans : CblasNoTrans;
  blasint lda = (blasint)(j->trans_a ? j->m : j->k), ldb = (blasint)(j->trans_b ? j->k : j->n);
  size_t es = j->f64 ? sizeof(double) : sizeof(float);
  for (int64_t blk = b0; blk < b1 && !npuK_stopped(j->pool); blk++) {
    int64_t lo = blk * j->block, len = (j->by_rows ? j->m : j->n) - lo;
    if (len > j->block) len = j->block;
    const char *a = j->a, *b = j->b;
    char *c = j->c;
    int64_t m = j->m, n = j->n;
    if (j->by_rows) { /* rows lo.. of op(A) and C */
      a += (size_t)(j->trans_a ? lo : lo * j->k) * es;
      c += (size_t)(lo * j->n) * es;
      m = len;
    } else { /* columns lo.. of op(B) and C */
      b += (size_t)(j->trans_b ? lo * j->k : lo) * es;
      c += (size_t)lo * es;
      n = len;
    }
    if (j->f64 && j->gemv) {
      dgemv_rows(ta, tb, m, n, j->k, (const double *)a, lda, (const double *)b, ldb,
                 (double *)c, (blasint)j->n);
      continue;
    }
    if (j->f64) {
      cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)j->k, 1.0,
                  (const double *)a, lda, (const double *)b, ldb, 0.0, (double *)c,
                  (blasint)j->n);
      continue;
    }
    sgemm_block(ta, tb, j->gemv, m, n, j->k, (const float *)a, lda, (const float *)b, ldb, j->ep,
                j->by_rows ? 0 : lo, (float *)c, (blasint)j->n);
  }
}

static void gemm(const npuK_pool *pool, int f64, int trans_a, int trans_b, int64_t m, int64_t n,
                 int64_t k, const void *a, const void *b, const npuK_epilogue *ep, void *c,
                 int algo) {
  gemm_job j = {.trans_a = trans_a, .trans_b = trans_b, .f64 = f64, .m = m, .n = n, .k = k,
                .a = a, .b = b, .c = c, .ep = ep, .gemv = pick_gemv(algo, m, n, k), .pool = pool};
  int64_t n_blocks;
  plan_blocks(&j, &n_blocks);
  npuK_parallel_for(pool, n_blocks, 1, gemm_range, &j);
}

void npuK_matmul_f32_blas(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                          int64_t k, const float *a, const float *b, float *c) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    memset(c, 0, (size_t)(m * n) * sizeof *c);
    return;
  }
  if (!fits_blasint(m, n, k)) {
    npuK_matmul_f32_ref(pool, trans_a, trans_b, m, n, k, a, b, c);
    return;
  }
  gemm(pool, 0, trans_a, trans_b, m, n, k, a, b, NULL, c, NPUK_GEMM_AUTO);
}

void npuK_matmul_f64_blas(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                          int64_t k, const double *a, const double *b, double *c) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    memset(c, 0, (size_t)(m * n) * sizeof *c);
    return;
  }
  if (!fits_blasint(m, n, k)) {
    npuK_matmul_f64_ref(pool, trans_a, trans_b, m, n, k, a, b, c);
    return;
  }
  gemm(pool, 1, trans_a, trans_b, m, n, k, a, b, NULL, c, NPUK_GEMM_AUTO);
}

static void matmul_f32_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                          int64_t n, int64_t k, const float *a, const float *b,
                          const npuK_epilogue *ep, float *c, int algo) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || !fits_blasint(m, n, k)) { /* the reference loop, then the epilogue */
    npuK_matmul_f32_ref_ep(pool, trans_a, trans_b, m, n, k, a, b, ep, c);
    return;
  }
  gemm(pool, 0, trans_a, trans_b, m, n, k, a, b, ep, c, algo);
}

void npuK_matmul_f32_blas_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                             int64_t n, int64_t k, const float *a, const float *b,
                             const npuK_epilogue *ep, float *c) {
  matmul_f32_ep(pool, trans_a, trans_b, m, n, k, a, b, ep, c, NPUK_GEMM_AUTO);
}

/* ---- A and C stored as float16 / bfloat16 ----
 * The blocks of the float32 GEMM (plan_blocks: the same shapes, so the same sgemm calls), run
 * by slots of scratch: slot s takes blocks [s * nb / slots, (s + 1) * nb / slots).  A block by
 * rows widens its rows of op(A) (a (len, k) or, transposed, (k, len) matrix) into the slot; by
 * columns every block reads all of A, widened once per slot.  C's block is computed in the
 * slot, epilogue included, and narrowed into C.  B may be reduced too (b_floats): widened
 * by the block's panel of columns, or all of it once per slot when the blocks are rows (a
 * float16 B under sgemv rows is read as stored instead: gemv_h_block).  Dimensions sgemm
 * cannot take, and k = 0, run the reference loop on each block, as the float32 kernel runs it
 * on the whole (row by row, so the same bits). */

typedef struct half_job {
  gemm_job g;
  const void *a, *bh; /* bh: B as stored when b_dtype is reduced (g.b is then unused) */
  void *c;
  npuK_dtype a_dtype, b_dtype, c_dtype;
  int gemv_h; /* sgemv rows on a float16 B run gemv_h_block on it as stored (no widened B) */
  int blas;
  float *scratch;
  int64_t n_blocks, n_slots, slot_floats;
} half_job;

static int64_t a_floats(const gemm_job *g, npuK_dtype a_dtype) {
  if (a_dtype == NPUK_F32) return 0;
  return g->by_rows ? g->block * g->k : g->m * g->k;
}

static int64_t c_floats(const gemm_job *g, npuK_dtype c_dtype) {
  if (c_dtype == NPUK_F32) return 0;
  return g->by_rows ? g->block * g->n : g->m * g->block;
}

/* B reduced: its block's columns of op(B) (k, block) when the blocks are columns, else all of
   it once per slot, widened.  A float16 weight matrix is read at 2 bytes an element and
   widened a panel at a time in cache, where widening it in full each run wrote and reread 4. */
static int64_t b_floats(const gemm_job *g, npuK_dtype b_dtype, int gemv_h) {
  if (b_dtype == NPUK_F32 || gemv_h) return 0;
  return g->by_rows ? g->n * g->k : g->block * g->k;
}

static void half_plan(half_job *h, int64_t m, int64_t n, int64_t k, int n_slots, int algo) {
  h->g.m = m, h->g.n = n, h->g.k = k;
  h->blas = k > 0 && fits_blasint(m, n, k);
  h->g.gemv = pick_gemv(algo, m, n, k);
  plan_blocks(&h->g, &h->n_blocks);
  if (!h->blas) { /* the reference loop, on one block of all rows */
    h->g.by_rows = 1;
    h->g.block = m;
    h->n_blocks = 1;
  }
  h->n_slots = n_slots < 1 ? 1 : n_slots;
  if (h->n_slots > h->n_blocks) h->n_slots = h->n_blocks;
#if defined(__x86_64__) && defined(__GNUC__) /* GEMV_F16C, defined below; it uses FMA too */
  h->gemv_h = h->blas && h->g.gemv && h->b_dtype == NPUK_F16 && npuK_f16c() &&
              __builtin_cpu_supports("fma");
#endif
  h->slot_floats = a_floats(&h->g, h->a_dtype) + c_floats(&h->g, h->c_dtype) +
                   b_floats(&h->g, h->b_dtype, h->gemv_h);
}

int npuK_gemm_bf16_takes(int algo, npuK_dtype a_dtype, npuK_dtype b_dtype) {
  return algo == NPUK_GEMM_BF16DOT && a_dtype == NPUK_BF16 && b_dtype == NPUK_BF16 &&
         npuK_bf16dot();
}

int npuK_gemm_f32_takes(int algo, npuK_dtype a_dtype, npuK_dtype b_dtype, npuK_dtype c_dtype) {
  return algo == NPUK_GEMM_F32TILE && a_dtype == NPUK_F32 && b_dtype == NPUK_F32 &&
         c_dtype == NPUK_F32 && npuK_avx512f();
}

/* F32TILE's shapes (measured here, Zen 4, one thread, bench/bench_gemm_f32.c, docs/training.md
   "The floor"): from F32_MIN_M rows (fewer keep sgemv / OpenBLAS's small-matrix kernel: 4 x
   256 x 784 runs ~1.2x faster as sgemv rows) and F32_MIN_N columns (10 columns: one masked
   vector a row, 5-20 % slower than sgemm), while A stays in L2 (F32_MAX_A floats: every panel
   of B re-reads all of A, and without blocking over k or m that is L3 traffic beyond it: 512 x
   512 x 512 ran 2x slower than sgemm, 64 x 256 x 4096 up to 3x) and a panel of B, k x 32
   floats, does too (F32_MAX_K). */
enum { F32_MIN_M = 8, F32_MIN_N = 32, F32_MAX_K = 4096, F32_MAX_A = 1 << 17 };
int npuK_gemm_f32_wins(int64_t m, int64_t n, int64_t k) {
  return npuK_avx512f() && m >= F32_MIN_M && n >= F32_MIN_N && k <= F32_MAX_K &&
         m * k <= F32_MAX_A;
}

size_t npuK_matmul_half_b_scratch_size(int64_t m, int64_t n, int64_t k, int n_slots,
                                       npuK_dtype a_dtype, npuK_dtype b_dtype,
                                       npuK_dtype c_dtype, int algo) {
  if (npuK_gemm_f32_takes(algo, a_dtype, b_dtype, c_dtype))
    return npuK_gemm_f32_scratch_size(1, m, n, k, n_slots); /* a transposed B: the most */
  if (npuK_gemm_bf16_takes(algo, a_dtype, b_dtype)) { /* the most any transposes need */
    size_t s0 = npuK_gemm_bf16_scratch_size(1, 1, m, n, k, n_slots);
    size_t s1 = npuK_gemm_bf16_scratch_size(1, 0, m, n, k, n_slots);
    return s0 > s1 ? s0 : s1;
  }
  if (algo == NPUK_GEMM_BF16DOT) algo = NPUK_GEMM_AUTO;
  if (m <= 0 || n <= 0 || (a_dtype == NPUK_F32 && b_dtype == NPUK_F32 && c_dtype == NPUK_F32))
    return 0;
  half_job h = {.a_dtype = a_dtype, .b_dtype = b_dtype, .c_dtype = c_dtype};
  half_plan(&h, m, n, k > 0 ? k : 0, n_slots, algo);
  return (size_t)(h.n_slots * h.slot_floats) * sizeof(float);
}

size_t npuK_matmul_half_scratch_size(int64_t m, int64_t n, int64_t k, int n_slots,
                                     npuK_dtype a_dtype, npuK_dtype c_dtype) {
  return npuK_matmul_half_b_scratch_size(m, n, k, n_slots, a_dtype, NPUK_F32, c_dtype,
                                         NPUK_GEMM_AUTO);
}

/* Widens rows [r0, r0 + rows) of a (rows of len elements, row stride ld) into dst (rows, len). */
static void widen_rows(float *dst, const void *a, npuK_dtype dt, int64_t r0, int64_t rows,
                       int64_t len, int64_t ld, int64_t col0) {
  const uint16_t *ah = a;
  if (ld == len) {
    npuK_cast(NULL, rows * len, dt, ah + r0 * ld + col0, NPUK_F32, dst);
    return;
  }
  for (int64_t r = 0; r < rows; r++)
    npuK_cast(NULL, len, dt, ah + (r0 + r) * ld + col0, NPUK_F32, dst + r * len);
}

/* Matrix-vector products on a float16 B as stored (F16C): c[r, j] = bias[j] + sum_i a[r, i]
   B[i, j] for the rows of a block that runs as sgemv (few rows: B is read once, and its bytes
   are the product's cost).  Where the sgemv path widens a panel of B into scratch and reads it
   back (more traffic than float32 when the panel leaves the cache), this reads B's 2 bytes an
   element once and widens 8 lanes in registers.  The sum is a float32 sum over k in another
   order than OpenBLAS's (as the GEMV / SGEMM algorithms differ, kernels.h): |c - exact| <=
   (k + 1) 2^-23 (|bias| + sum |a b|), no longer OpenBLAS's bits (tests/test_half_io.c checks the
   bound against float64). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMV_F16C 1

/* c[0, n) += x B for B (k rows of ldb) float16 row-major: B streamed row after row (4 rows a
   pass, so c, in L1, is loaded and stored once per 4 rows), each 8 halves widened in registers. */
__attribute__((target("f16c"))) static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

__attribute__((target("avx2,fma,f16c"))) static void gemv_h_n(int64_t n, int64_t k,
                                                                const float *x, int64_t incx,
                                                                const uint16_t *b, int64_t ldb,
                                                                float *c) {
#define GH_ROW(r, j) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b##r + (j))))
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) {
    const uint16_t *b0 = b + i * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
    const float s0 = x[i * incx], s1 = x[(i + 1) * incx], s2 = x[(i + 2) * incx],
                s3 = x[(i + 3) * incx];
    const __m256 x0 = _mm256_set1_ps(s0), x1 = _mm256_set1_ps(s1), x2 = _mm256_set1_ps(s2),
                 x3 = _mm256_set1_ps(s3);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      __m256 acc = _mm256_loadu_ps(c + j);
      acc = _mm256_fmadd_ps(x0, GH_ROW(0, j), acc);
      acc = _mm256_fmadd_ps(x1, GH_ROW(1, j), acc);
      acc = _mm256_fmadd_ps(x2, GH_ROW(2, j), acc);
      acc = _mm256_fmadd_ps(x3, GH_ROW(3, j), acc);
      _mm256_storeu_ps(c + j, acc);
    }
    for (; j < n; j++)
      c[j] = c[j] + s0 * h2f(b0[j]) + s1 * h2f(b1[j]) + s2 * h2f(b2[j]) + s3 * h2f(b3[j]);
  }
  for (; i < k; i++) {
    const uint16_t *b0 = b + i * ldb;
    const float s0 = x[i * incx];
    const __m256 x0 = _mm256_set1_ps(s0);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(c + j, _mm256_fmadd_ps(x0, GH_ROW(0, j), _mm256_loadu_ps(c + j)));
    for (; j < n; j++) c[j] = c[j] + s0 * h2f(b0[j]);
  }
#undef GH_ROW
}

/* c[j] (+)= dot(B[j, :], x) for B (n, ldb) float16 row-major (op(B) = B^T). */
__attribute__((target("avx2,fma,f16c"))) static void gemv_h_t(int64_t n, int64_t k,
                                                                const float *x, int64_t incx,
                                                                const uint16_t *b, int64_t ldb,
                                                                float *c) {
  for (int64_t j = 0; j < n; j++) {
    const uint16_t *row = b + j * ldb;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    if (incx == 1) {
      for (; i + 16 <= k; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + i))), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + i + 8))), a1);
      }
    }
    a0 = _mm256_add_ps(a0, a1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float acc = _mm_cvtss_f32(h);
    for (; i < k; i++) acc += x[i * incx] * h2f(row[i]);
    c[j] += acc;
  }
}

/* Rows [0, m) of a block of C (n columns from col0, row stride ldc) by the kernels above: C
   starts as the bias (or 0), the activation follows as sgemm_block applies it. */
static void gemv_h_block(enum CBLAS_TRANSPOSE ta, int trans_b, int64_t m, int64_t n, int64_t k,
                         const float *a, blasint lda, const uint16_t *b, int64_t ldb,
                         const npuK_epilogue *ep, int64_t col0, float *c, int64_t ldc) {
  for (int64_t r = 0; r < m; r++) {
    float *cr = c + r * ldc;
    if (ep && ep->bias) memcpy(cr, ep->bias + col0, (size_t)n * sizeof *cr);
    else memset(cr, 0, (size_t)n * sizeof *cr);
    blasint inc;
    const float *x = a + a_row(ta, lda, r, &inc);
    if (trans_b) gemv_h_t(n, k, x, inc, b + col0 * ldb, ldb, cr);
    else gemv_h_n(n, k, x, inc, b + col0, ldb, cr);
  }
  if (ep && ep->act != NPUK_ACT_NONE) {
    npuK_epilogue act = {.act = ep->act, .alpha = ep->alpha,
                         .slope = ep->slope ? ep->slope + col0 : NULL, .fast = ep->fast};
    npuK_epilogue_f32(&act, m, n, ldc, c);
  }
}
#else
#define GEMV_F16C 0
#endif

static void half_range(void *arg, int64_t s0, int64_t s1) {
  const half_job *h = arg;
  const gemm_job *g = &h->g;
  enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
  const float *bf = g->b;
  const int b_half = h->b_dtype != NPUK_F32;
  for (int64_t s = s0; s < s1; s++) {
    float *abuf = h->scratch + s * h->slot_floats;
    float *cbuf = abuf + a_floats(g, h->a_dtype);
    float *bbuf = cbuf + c_floats(g, h->c_dtype); /* unused under gemv_h */
    int64_t b0 = s * h->n_blocks / h->n_slots, b1 = (s + 1) * h->n_blocks / h->n_slots;
    const float *a_all = h->a_dtype == NPUK_F32 ? h->a : abuf;
    if (!g->by_rows && h->a_dtype != NPUK_F32) /* all of A, as stored (m, k) or (k, m) */
      npuK_cast(NULL, g->m * g->k, h->a_dtype, h->a, NPUK_F32, abuf);
    if (g->by_rows && b_half && !h->gemv_h) { /* all of B, as stored (k, n) or (n, k) */
      npuK_cast(NULL, g->k * g->n, h->b_dtype, h->bh, NPUK_F32, bbuf);
      bf = bbuf;
    }
    for (int64_t blk = b0; blk < b1 && !npuK_stopped(g->pool); blk++) {
      int64_t lo = blk * g->block, len = (g->by_rows ? g->m : g->n) - lo;
      if (len > g->block) len = g->block;
      int64_t m = g->by_rows ? len : g->m, n = g->by_rows ? g->n : len;
      const float *a = a_all;
      blasint lda = (blasint)(g->trans_a ? g->m : g->k);
      const float *b = bf;
      blasint ldb = (blasint)(g->trans_b ? g->k : g->n);
      if (g->by_rows && h->a_dtype == NPUK_F32) {
        a += g->trans_a ? lo : lo * g->k;
      } else if (g->by_rows) { /* rows lo.. of op(A): rows of A, or columns of A^T */
        if (g->trans_a) widen_rows(abuf, h->a, h->a_dtype, 0, g->k, len, g->m, lo);
        else widen_rows(abuf, h->a, h->a_dtype, lo, len, g->k, g->k, 0);
        a = abuf;
        lda = (blasint)(g->trans_a ? len : g->k);
      }
#if GEMV_F16C
      if (h->gemv_h) { /* rows as matrix-vector products on B as stored */
        float *c = h->c_dtype == NPUK_F32 ? (float *)h->c + (g->by_rows ? lo * g->n : lo) : cbuf;
        int64_t ldc = h->c_dtype == NPUK_F32 ? g->n : n;
        gemv_h_block(ta, g->trans_b, m, n, g->k, a, lda, h->bh, g->trans_b ? g->k : g->n, g->ep,
                     g->by_rows ? 0 : lo, c, ldc);
        if (h->c_dtype != NPUK_F32) {
          uint16_t *ch = (uint16_t *)h->c + (g->by_rows ? lo * g->n : lo);
          if (ldc == g->n) npuK_cast(NULL, m * n, NPUK_F32, c, h->c_dtype, ch);
          else
            for (int64_t r = 0; r < m; r++)
              npuK_cast(NULL, n, NPUK_F32, c + r * ldc, h->c_dtype, ch + r * g->n);
        }
        continue;
      }
#endif
      if (!g->by_rows && b_half) { /* columns lo.. of op(B): its panel, widened */
        if (g->trans_b) widen_rows(bbuf, h->bh, h->b_dtype, lo, len, g->k, g->k, 0);
        else widen_rows(bbuf, h->bh, h->b_dtype, 0, g->k, len, g->n, lo);
        b = bbuf;
        ldb = (blasint)(g->trans_b ? g->k : len);
      } else if (!g->by_rows) {
        b += g->trans_b ? lo * g->k : lo;
      }
      float *c = h->c_dtype == NPUK_F32
                     ? (float *)h->c + (g->by_rows ? lo * g->n : lo)
                     : cbuf;
      int64_t ldc = h->c_dtype == NPUK_F32 ? g->n : n;
      if (h->blas) {
        sgemm_block(ta, tb, g->gemv, m, n, g->k, a, lda, b, ldb, g->ep, g->by_rows ? 0 : lo, c,
                    (blasint)ldc);
      } else { /* the one block of all rows (half_plan): C is (m, n) */
        npuK_matmul_f32_ref_ep(NULL, g->trans_a, g->trans_b, m, n, g->k, a, b, g->ep, c);
      }
      if (h->c_dtype != NPUK_F32) { /* narrow the block into C */
        uint16_t *ch = (uint16_t *)h->c + (g->by_rows ? lo * g->n : lo);
        if (ldc == g->n) npuK_cast(NULL, m * n, NPUK_F32, c, h->c_dtype, ch);
        else
          for (int64_t r = 0; r < m; r++)
            npuK_cast(NULL, n, NPUK_F32, c + r * ldc, h->c_dtype, ch + r * g->n);
      }
    }
  }
}

void npuK_matmul_half_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                         int64_t k, const void *a, npuK_dtype a_dtype, const float *b,
                         const npuK_epilogue *ep, void *c, npuK_dtype c_dtype, float *scratch,
                         int n_slots) {
  npuK_matmul_half_algo_ep(pool, trans_a, trans_b, m, n, k, a, a_dtype, b, ep, c, c_dtype,
                           scratch, n_slots, NPUK_GEMM_AUTO);
}

void npuK_matmul_half_b_algo_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                                int64_t n, int64_t k, const void *a, npuK_dtype a_dtype,
                                const void *b, npuK_dtype b_dtype, const npuK_epilogue *ep,
                                void *c, npuK_dtype c_dtype, float *scratch, int n_slots,
                                int algo) {
  /* (a float32 GEMM asked for no scratch before F32TILE: without it, it runs as AUTO; the
     matmul steps call the tiles themselves, with no scratch where B is read in place) */
  if (npuK_gemm_f32_takes(algo, a_dtype, b_dtype, c_dtype) && scratch) {
    npuK_gemm_f32_ep(pool, trans_a, trans_b, m, n, k, a, b, ep, c, scratch, n_slots);
    return;
  }
  if (algo == NPUK_GEMM_F32TILE) algo = NPUK_GEMM_AUTO; /* not these operands, or not here */
  if (a_dtype == NPUK_F32 && b_dtype == NPUK_F32 && c_dtype == NPUK_F32) {
    matmul_f32_ep(pool, trans_a, trans_b, m, n, k, a, b, ep, c, algo);
    return;
  }
  if (npuK_gemm_bf16_takes(algo, a_dtype, b_dtype)) {
    npuK_gemm_bf16_ep(pool, trans_a, trans_b, m, n, k, a, b, ep, c, c_dtype, scratch, n_slots);
    return;
  }
  if (algo == NPUK_GEMM_BF16DOT) algo = NPUK_GEMM_AUTO; /* not these operands, or not here */
  if (m <= 0 || n <= 0) return;
  half_job h = {.g = {.trans_a = trans_a, .trans_b = trans_b, .ep = ep, .pool = pool},
                .a = a, .c = c, .a_dtype = a_dtype, .b_dtype = b_dtype, .c_dtype = c_dtype,
                .scratch = scratch};
  if (b_dtype == NPUK_F32) h.g.b = b;
  else h.bh = b;
  half_plan(&h, m, n, k > 0 ? k : 0, n_slots, algo);
  npuK_parallel_for(pool, h.n_slots, 1, half_range, &h);
}

void npuK_matmul_half_algo_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                              int64_t n, int64_t k, const void *a, npuK_dtype a_dtype,
                              const float *b, const npuK_epilogue *ep, void *c,
                              npuK_dtype c_dtype, float *scratch, int n_slots, int algo) {
  npuK_matmul_half_b_algo_ep(pool, trans_a, trans_b, m, n, k, a, a_dtype, b, NPUK_F32, ep, c,
                             c_dtype, scratch, n_slots, algo);
}

/* ---- gradient descent through the GEMM (kernels.h: npuK_matmul_f32_sgd) ---- */

typedef struct sgd_job {
  gemm_job g;
  float lr;
  float *w, *scratch;
  int64_t n_blocks, n_slots, slot_floats;
} sgd_job;

static void sgd_plan(sgd_job *j, int64_t m, int64_t n, int64_t k, int n_slots, int algo) {
  j->g.m = m, j->g.n = n, j->g.k = k;
  j->g.gemv = pick_gemv(algo, m, n, k); /* the block plan does not depend on it */
  plan_blocks(&j->g, &j->n_blocks);
  j->n_slots = n_slots < 1 ? 1 : n_slots;
  if (j->n_slots > j->n_blocks) j->n_slots = j->n_blocks;
  j->slot_floats = j->g.by_rows ? j->g.block * n : m * j->g.block;
}

size_t npuK_matmul_sgd_scratch_size(int64_t m, int64_t n, int64_t k, int n_slots) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  sgd_job j = {0};
  sgd_plan(&j, m, n, k, n_slots, NPUK_GEMM_AUTO);
  return (size_t)(j.n_slots * j.slot_floats) * sizeof(float);
}

static void sgd_range(void *arg, int64_t s0, int64_t s1) {
  const sgd_job *j = arg;
  const gemm_job *g = &j->g;
  enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
  blasint lda = (blasint)(g->trans_a ? g->m : g->k), ldb = (blasint)(g->trans_b ? g->k : g->n);
  float lr = j->lr;
  for (int64_t s = s0; s < s1; s++) {
    float *d = j->scratch + s * j->slot_floats;
    int64_t b0 = s * j->n_blocks / j->n_slots, b1 = (s + 1) * j->n_blocks / j->n_slots;
    for (int64_t blk = b0; blk < b1; blk++) { /* gemm_range's block, C in scratch */
      int64_t lo = blk * g->block, len = (g->by_rows ? g->m : g->n) - lo;
      if (len > g->block) len = g->block;
      const float *a = g->a, *b = g->b;
      float *w = j->w;
      int64_t m = g->m, n = g->n;
      if (g->by_rows) {
        a += g->trans_a ? lo : lo * g->k;
        w += lo * g->n;
        m = len;
      } else {
        b += g->trans_b ? lo * g->k : lo;
        w += lo;
        n = len;
      }
      sgemm_block(ta, tb, g->gemv, m, n, g->k, a, lda, b, ldb, NULL, 0, d, (blasint)n);
      for (int64_t r = 0; r < m; r++) /* w = w - lr * d, a row: the mul op then the sub op */
        npuK_sgd_update_f32(NULL, n, lr, d + r * n, w + r * g->n);
    }
  }
}

void npuK_matmul_f32_sgd_algo(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                              int64_t n, int64_t k, const float *a, const float *b, float lr,
                              float *w, float *scratch, int n_slots, int algo) {
  if (m <= 0 || n <= 0 || k <= 0 || !fits_blasint(m, n, k)) return; /* the caller's promise */
  sgd_job j = {.g = {.trans_a = trans_a, .trans_b = trans_b, .a = a, .b = b}, .lr = lr, .w = w,
               .scratch = scratch};
  sgd_plan(&j, m, n, k, n_slots, algo);
  npuK_parallel_for(pool, j.n_slots, 1, sgd_range, &j);
}

void npuK_matmul_f32_sgd(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                         int64_t k, const float *a, const float *b, float lr, float *w,
                         float *scratch, int n_slots) {
  npuK_matmul_f32_sgd_algo(pool, trans_a, trans_b, m, n, k, a, b, lr, w, scratch, n_slots,
                           NPUK_GEMM_AUTO);
}

/* The product's bytes, rounded up so the GEMM's scratch after it starts 64-byte aligned. */
static size_t sgd_product_bytes(int64_t m, int64_t n, npuK_dtype d_dtype) {
  return ((size_t)(m * n) * npuK_dtype_size(d_dtype) + 63) & ~(size_t)63;
}

size_t npuK_matmul_half_sgd_scratch_size(int64_t m, int64_t n, int64_t k, int n_slots,
                                         npuK_dtype a_dtype, npuK_dtype b_dtype,
                                         npuK_dtype d_dtype, int algo) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  if (npuK_gemm_bf16_takes(algo, a_dtype, b_dtype)) /* no product buffer: the tiles update w */
    return npuK_matmul_half_b_scratch_size(m, n, k, n_slots, a_dtype, b_dtype, d_dtype, algo);
  return sgd_product_bytes(m, n, d_dtype) +
         npuK_matmul_half_b_scratch_size(m, n, k, n_slots, a_dtype, b_dtype, d_dtype, algo);
}

/* BF16DOT: each tile of the native GEMM updates w while in cache (npuK_gemm_bf16_sgd_level:
   an output's bits do not depend on the tiling).  Otherwise two passes: the product from the
   matmul op's own call, so its bits are the unfused plan's by construction (the widening
   path's sgemm blocks are those of a whole (m, n) call), then the update reading it back. */
void npuK_matmul_half_sgd(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                          int64_t k, const void *a, npuK_dtype a_dtype, const void *b,
                          npuK_dtype b_dtype, npuK_dtype d_dtype, float lr, float *w,
                          void *scratch, int n_slots, int algo) {
  if (m <= 0 || n <= 0 || k <= 0 || !fits_blasint(m, n, k)) return; /* the caller's promise */
  if (npuK_gemm_bf16_takes(algo, a_dtype, b_dtype)) {
    npuK_gemm_bf16_sgd_level(pool, trans_a, trans_b, m, n, k, a, b, d_dtype, lr, w, scratch,
                             n_slots, 1);
    return;
  }
  void *d = scratch;
  float *gemm_scratch = (float *)((char *)scratch + sgd_product_bytes(m, n, d_dtype));
  npuK_matmul_half_b_algo_ep(pool, trans_a, trans_b, m, n, k, a, a_dtype, b, b_dtype, NULL, d,
                             d_dtype, gemm_scratch, n_slots, algo);
  npuK_sgd_update_half(pool, m * n, lr, d, d_dtype, w);
}

void npuK_blas_set_threads(int n) {
  openblas_set_num_threads(n < 1 ? 1 : n);
}

const char *npuK_blas_config(void) {
  return openblas_get_config();
}

int npuK_blas_get_threads(void) {
  return openblas_get_num_threads();
}
