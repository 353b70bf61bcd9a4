/* kimport.c — the kernels of kimport.h: int32 matrix products (the plain triple loop,
 * wrapping as TensorFlow's int32 MatMul), in_top_k (one pass per row), sparse_to_dense (check
 * every index, then fill and scatter). */
#include <math.h>
#include <string.h>

#include "kernels/kimport.h"

/* ---- int32 matmul ---------------------------------------------------------------------- */

typedef struct imm_job {
  int trans_a, trans_b;
  int64_t m, n, k;
  const int32_t *a, *b;
  int32_t *c;
} imm_job;

static void imm_rows(void *arg, int64_t begin, int64_t end) {
  const imm_job *j = arg;
  int64_t n = j->n, k = j->k, m = j->m;
  for (int64_t i = begin; i < end; i++)
    for (int64_t col = 0; col < n; col++) {
      uint32_t acc = 0; /* unsigned: wraparound is defined */
      for (int64_t p = 0; p < k; p++) {
        int32_t x = j->trans_a ? j->a[p * m + i] : j->a[i * k + p];
        int32_t y = j->trans_b ? j->b[col * k + p] : j->b[p * n + col];
        acc += (uint32_t)x * (uint32_t)y;
      }
      j->c[i * n + col] = (int32_t)acc;
    }
}

void npuK_matmul_i32(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                     int64_t k, const int32_t *a, const int32_t *b, int32_t *c) {
  imm_job j = {trans_a, trans_b, m, n, k, a, b, c};
  int64_t grain = n * k > 0 ? 16384 / (n * k) + 1 : m + 1;
  npuK_parallel_for(pool, m, grain, imm_rows, &j);
}

void npuK_batch_matmul_i32(const npuK_pool *pool, int trans_a, int trans_b, int batch_ndim,
                           const int64_t *batch_dims, const int64_t *a_strides,
                           const int64_t *b_strides, int64_t m, int64_t n, int64_t k,
                           const int32_t *a, const int32_t *b, int32_t *out) {
  int64_t batches = 1;
  for (int i = 0; i < batch_ndim; i++) batches *= batch_dims[i];
  for (int64_t bi = 0; bi < batches; bi++) {
    int64_t rest = bi, oa = 0, ob = 0;
    for (int i = batch_ndim - 1; i >= 0; i--) {
      int64_t idx = rest % batch_dims[i];
      rest /= batch_dims[i];
      oa += idx * a_strides[i];
      ob += idx * b_strides[i];
    }
    npuK_matmul_i32(pool, trans_a, trans_b, m, n, k, a + oa * m * k, b + ob * k * n,
                    out + bi * m * n);
  }
}

/* ---- in_top_k -------------------------------------------------------------------------- */

typedef struct topk_job {
  int64_t cols, k;
  const float *pred;
  const void *targets;
  int i64;
  uint8_t *out;
} topk_job;

static void topk_rows(void *arg, int64_t begin, int64_t end) {
  const topk_job *j = arg;
  for (int64_t r = begin; r < end; r++) {
    int64_t t = j->i64 ? ((const int64_t *)j->targets)[r] : ((const int32_t *)j->targets)[r];
    const float *row = j->pred + r * j->cols;
    uint8_t in = 0;
    if (t >= 0 && t < j->cols && isfinite(row[t])) {
      int64_t greater = 0;
      for (int64_t c = 0; c < j->cols && greater < j->k; c++) greater += row[c] > row[t];
      in = greater < j->k;
    }
    j->out[r] = in;
  }
}

void npuK_in_top_k_f32(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                       const float *pred, const void *targets, int targets_i64, uint8_t *out) {
  topk_job j = {cols, k, pred, targets, targets_i64, out};
  npuK_parallel_for(pool, rows, cols > 0 ? 16384 / cols + 1 : rows + 1, topk_rows, &j);
}

/* ---- sparse_to_dense ------------------------------------------------------------------- */

static int64_t index_at(const void *indices, int i64, int64_t i) {
  return i64 ? ((const int64_t *)indices)[i] : ((const int32_t *)indices)[i];
}

int64_t npuK_sparse_to_dense(size_t elem_size, int ndim, const int64_t *dims, int64_t n,
                             const void *indices, int indices_i64, const void *values,
                             int64_t values_step, const void *default_value, int validate,
                             void *y, int *why) {
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) numel *= dims[d];
  int64_t prev = -1;
  /* pass 1: every index inside dims (and ordered when validating) */
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < ndim; d++) {
      int64_t v = index_at(indices, indices_i64, i * ndim + d);
      if (v < 0 || v >= dims[d]) return *why = 1, i;
      off = off * dims[d] + v;
    }
    if (validate && i > 0 && off <= prev) return *why = off == prev ? 2 : 3, i;
    prev = off;
  }
  /* pass 2: fill, then scatter (a repeated index without validate: the last one wins) */
  uint8_t *out = y;
  for (int64_t e = 0; e < numel; e++) memcpy(out + e * elem_size, default_value, elem_size);
  const uint8_t *val = values;
  for (int64_t i = 0; i < n; i++) {
    int64_t off = 0;
    for (int d = 0; d < ndim; d++) off = off * dims[d] + index_at(indices, indices_i64, i * ndim + d);
    memcpy(out + off * elem_size, val + i * values_step * (int64_t)elem_size, elem_size);
  }
  *why = 0;
  return -1;
}
