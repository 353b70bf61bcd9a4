/* train.c: kernels of the training ops: one_hot, is_finite, reduce_all, and the plain
 * gradient-descent update of a variable that GradientDescentUpdateFusionPass's step runs.
 *
 * one_hot splits over outer rows, the update over elements; each output element is written
 * once, so results do not depend on the thread count.
 */
#include <string.h>

#include "kernels/kgrad.h"
#include "kernels/kutil.h"

typedef struct one_hot_job {
  size_t es;
  int64_t depth, inner;
  npuK_dtype idx_dtype;
  const void *indices, *on, *off;
  void *y;
} one_hot_job;

static int64_t index_at(const one_hot_job *j, int64_t i) {
  switch (j->idx_dtype) {
  case NPUK_I32: return ((const int32_t *)j->indices)[i];
  case NPUK_U8: return ((const uint8_t *)j->indices)[i];
  default: return ((const int64_t *)j->indices)[i];
  }
}

static void one_hot_range(void *arg, int64_t begin, int64_t end) {
  const one_hot_job *j = arg;
  char *y = j->y;
  const size_t es = j->es;
  for (int64_t o = begin; o < end; o++) {
    char *block = y + (size_t)(o * j->depth * j->inner) * es;
    for (int64_t k = 0; k < j->depth * j->inner; k++) memcpy(block + (size_t)k * es, j->off, es);
    for (int64_t i = 0; i < j->inner; i++) {
      int64_t d = index_at(j, o * j->inner + i);
      if (d >= 0 && d < j->depth) memcpy(block + (size_t)(d * j->inner + i) * es, j->on, es);
    }
  }
}

void npuK_one_hot(const npuK_pool *pool, size_t elem_size, int64_t outer, int64_t depth,
                  int64_t inner, npuK_dtype idx_dtype, const void *indices, const void *on,
                  const void *off, void *y) {
  one_hot_job j = {elem_size, depth, inner, idx_dtype, indices, on, off, y};
  int64_t per = depth * inner;
  int64_t grain = K_GRAIN_ELEMS / (per > 0 ? per : 1);
  npuK_parallel_for(pool, outer, grain < 1 ? 1 : grain, one_hot_range, &j);
}

typedef struct finite_job {
  const void *x;
  uint8_t *y;
} finite_job;

#define DEFINE_FINITE(T, dt)                                                                   \
  static void finite_range_##dt(void *arg, int64_t begin, int64_t end) {                       \
    const finite_job *j = arg;                                                                 \
    const T *x = j->x;                                                                         \
    for (int64_t i = begin; i < end; i++) j->y[i] = (uint8_t)(x[i] - x[i] == 0);               \
  }                                                                                            \
  void npuK_is_finite_##dt(const npuK_pool *pool, int64_t n, const T *x, uint8_t *y) {         \
    finite_job j = {x, y};                                                                     \
    npuK_parallel_for(pool, n, K_GRAIN_ELEMS, finite_range_##dt, &j);                          \
  }
DEFINE_FINITE(float, f32)
DEFINE_FINITE(double, f64)

void npuK_reduce_all_bool(int ndim, const int64_t *dims, uint32_t axes_mask, const uint8_t *x,
                          uint8_t *out) {
  int64_t n_out = 1, n = k_prod(ndim, dims);
  for (int d = 0; d < ndim; d++)
    if (!(axes_mask & (1u << d))) n_out *= dims[d];
  for (int64_t i = 0; i < n_out; i++) out[i] = 1;
  int64_t coord[NPUK_MAX_DIMS] = {0};
  for (int64_t i = 0; i < n; i++) {
    if (!x[i]) {
      int64_t o = 0;
      for (int d = 0; d < ndim; d++)
        if (!(axes_mask & (1u << d))) o = o * dims[d] + coord[d];
      out[o] = 0;
    }
    for (int d = ndim - 1; d >= 0; d--) { /* advance the row-major coordinate */
      if (++coord[d] < dims[d]) break;
      coord[d] = 0;
    }
  }
}

/* ---- gradient descent on a variable (kgrad.h: npuK_sgd_update_f32) ---- */

typedef struct sgd_update_job {
  float lr;
  const float *d;
  float *w;
} sgd_update_job;

/* w = w - lr * d as the mul op then the sub op compute it: two statements, so the product is
   rounded before the subtraction (no contraction into an fma); eight lanes through a local
   array, which the compiler vectorises at -O2.  npuK_matmul_f32_sgd (blas.c) runs its rows
   through this too (serially, pool NULL). */
static void sgd_update_range(void *arg, int64_t begin, int64_t end) {
  const sgd_update_job *j = arg;
  const float lr = j->lr, *d = j->d;
  float *w = j->w;
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    float r[8];
    for (int l = 0; l < 8; l++) {
      float step = lr * d[i + l];
      r[l] = w[i + l] - step;
    }
    for (int l = 0; l < 8; l++) w[i + l] = r[l];
  }
  for (; i < end; i++) {
    float step = lr * d[i];
    w[i] = w[i] - step;
  }
}

void npuK_sgd_update_f32(const npuK_pool *pool, int64_t n, float lr, const float *d, float *w) {
  sgd_update_job j = {lr, d, w};
  npuK_parallel_for(pool, n, K_GRAIN_ELEMS, sgd_update_range, &j);
}

typedef struct sgd_update_half_job {
  float lr;
  const uint16_t *d;
  npuK_dtype dt;
  float *w;
} sgd_update_half_job;

/* Blocks of 1024: widened into a stack buffer that stays in L1 while the update reads it. */
static void sgd_update_half_range(void *arg, int64_t begin, int64_t end) {
  const sgd_update_half_job *j = arg;
  float buf[1024];
  for (int64_t i = begin; i < end; i += 1024) {
    int64_t len = end - i < 1024 ? end - i : 1024;
    npuK_cast(NULL, len, j->dt, j->d + i, NPUK_F32, buf);
    sgd_update_job u = {j->lr, buf, j->w + i};
    sgd_update_range(&u, 0, len);
  }
}

void npuK_sgd_update_half(const npuK_pool *pool, int64_t n, float lr, const void *d,
                          npuK_dtype d_dtype, float *w) {
  if (d_dtype == NPUK_F32) {
    npuK_sgd_update_f32(pool, n, lr, d, w);
    return;
  }
  sgd_update_half_job j = {lr, d, d_dtype, w};
  npuK_parallel_for(pool, n, K_GRAIN_ELEMS, sgd_update_half_range, &j);
}
