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
 */
#include <limits.h>
#include <string.h>
#include <cblas.h>

#include "kernels/kernels.h"

static int fits_blasint(int64_t m, int64_t n, int64_t k) {
  return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX;
}

/* The block plan of one GEMM: by rows when there are enough, else by columns, at most
   MAX_BLOCKS blocks of at least MIN_BLOCK; small products are one block. */
enum { MIN_BLOCK = 256, MAX_BLOCKS = 32, SMALL_WORK = 1 << 21 };

typedef struct gemm_job {
  int trans_a, trans_b, by_rows, f64;
  int64_t m, n, k, block;
  const void *a, *b;
  void *c;
  const npuK_epilogue *ep; /* f32 only: bias as C's initial value, activation after */
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

static void gemm_range(void *arg, int64_t b0, int64_t b1) {
  const gemm_job *j = arg;
  enum CBLAS_TRANSPOSE ta = j->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = j->trans_b ? CblasTrans : CblasNoTrans;
  blasint lda = (blasint)(j->trans_a ? j->m : j->k), ldb = (blasint)(j->trans_b ? j->k : j->n);
  size_t es = j->f64 ? sizeof(double) : sizeof(float);
  for (int64_t blk = b0; blk < b1; blk++) {
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
    if (j->f64) {
      cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)j->k, 1.0,
                  (const double *)a, lda, (const double *)b, ldb, 0.0, (double *)c,
                  (blasint)j->n);
      continue;
    }
    /* A fused step's epilogue: the block starts as the bias (beta = 1 accumulates onto it)
       and gets its activation while it is still in cache. */
    const npuK_epilogue *ep = j->ep;
    float *cf = (float *)c;
    int64_t col0 = j->by_rows ? 0 : lo;
    if (ep && ep->bias)
      for (int64_t r = 0; r < m; r++)
        memcpy(cf + r * j->n, ep->bias + col0, (size_t)n * sizeof *cf);
    cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)j->k, 1.0f,
                (const float *)a, lda, (const float *)b, ldb, ep && ep->bias ? 1.0f : 0.0f, cf,
                (blasint)j->n);
    if (ep && ep->act != NPUK_ACT_NONE) {
      npuK_epilogue act = {.act = ep->act, .alpha = ep->alpha,
                           .slope = ep->slope ? ep->slope + col0 : NULL};
      npuK_epilogue_f32(&act, m, n, j->n, cf);
    }
  }
}

static void gemm(const npuK_pool *pool, int f64, int trans_a, int trans_b, int64_t m, int64_t n,
                 int64_t k, const void *a, const void *b, const npuK_epilogue *ep, void *c) {
  gemm_job j = {.trans_a = trans_a, .trans_b = trans_b, .f64 = f64, .m = m, .n = n, .k = k,
                .a = a, .b = b, .c = c, .ep = ep};
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
  gemm(pool, 0, trans_a, trans_b, m, n, k, a, b, NULL, c);
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
  gemm(pool, 1, trans_a, trans_b, m, n, k, a, b, NULL, c);
}

void npuK_matmul_f32_blas_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                             int64_t n, int64_t k, const float *a, const float *b,
                             const npuK_epilogue *ep, float *c) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || !fits_blasint(m, n, k)) { /* the reference loop, then the epilogue */
    npuK_matmul_f32_ref_ep(pool, trans_a, trans_b, m, n, k, a, b, ep, c);
    return;
  }
  gemm(pool, 0, trans_a, trans_b, m, n, k, a, b, ep, c);
}

void npuK_blas_set_threads(int n) {
  openblas_set_num_threads(n < 1 ? 1 : n);
}

int npuK_blas_get_threads(void) {
  return openblas_get_num_threads();
}
