/* indexing.c: dtype-agnostic indexing kernels: strided_slice, split, gather, gather_nd,
 * space_to_batch / batch_to_space, and range.
 *
 * Elements are elem_size bytes (1, 2, 4, 8 take typed loops, other sizes memcpy).  Callers
 * validate shapes and resolve TensorFlow's conventions (masks, negative indices); the gathers
 * check their indices themselves, since those are data, and then write nothing when one is
 * out of range.  Work is split over output rows or elements only: results never depend on
 * the thread count.
 */
#include <stdbool.h>
#include <string.h>

#include "kernels/kutil.h"

/* Grain in rows of `inner` elements. */
static int64_t row_grain(int64_t inner) {
  return inner >= K_GRAIN_ELEMS ? 1 : K_GRAIN_ELEMS / (inner > 0 ? inner : 1);
}

/* ---- strided_slice ------------------------------------------------------------------------ */

void npuK_strided_slice(const npuK_pool *pool, size_t elem_size, int ndim,
                        const int64_t *in_dims, const int64_t *begin, const int64_t *strides,
                        const int64_t *out_dims, const void *x, void *y) {
  int64_t xs[NPUK_MAX_DIMS], is[NPUK_MAX_DIMS], os[NPUK_MAX_DIMS];
  k_dense_strides(ndim, in_dims, xs);
  k_dense_strides(ndim, out_dims, os);
  int64_t base = 0;
  for (int d = 0; d < ndim; d++) {
    is[d] = xs[d] * strides[d];
    base += begin[d] * xs[d];
  }
  if (k_prod(ndim, out_dims) == 0) return;
  k_copy_nd(pool, elem_size, ndim, out_dims, is, (const char *)x + base * (int64_t)elem_size,
            os, y);
}

void npuK_strided_slice_ref(const npuK_pool *pool, size_t elem_size, int ndim,
                            const int64_t *in_dims, const int64_t *begin,
                            const int64_t *strides, const int64_t *out_dims, const void *x,
                            void *y) {
  (void)pool;
  int64_t xs[NPUK_MAX_DIMS];
  k_dense_strides(ndim, in_dims, xs);
  int64_t total = k_prod(ndim, out_dims);
  for (int64_t i = 0; i < total; i++) {
    int64_t rest = i, off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
      int64_t c = rest % out_dims[d];
      rest /= out_dims[d];
      off += (begin[d] + c * strides[d]) * xs[d];
    }
    memcpy((char *)y + i * (int64_t)elem_size, (const char *)x + off * (int64_t)elem_size,
           elem_size);
  }
}

/* ---- split -------------------------------------------------------------------------------- */

typedef struct split_job {
  size_t es;
  int n;
  int64_t total, inner;
  const int64_t *axis_dims;
  const char *x;
  void *const *ys;
} split_job;

static void split_range(void *arg, int64_t begin, int64_t end) {
  const split_job *j = arg;
  size_t es = j->es;
  for (int64_t o = begin; o < end; o++) {
    const char *src = j->x + (size_t)(o * j->total * j->inner) * es;
    for (int i = 0; i < j->n; i++) {
      size_t bytes = (size_t)(j->axis_dims[i] * j->inner) * es;
      if (bytes) memcpy((char *)j->ys[i] + (size_t)o * bytes, src, bytes);
      src += bytes;
    }
  }
}

void npuK_split(const npuK_pool *pool, size_t elem_size, int n_outputs, int64_t outer,
                const int64_t *axis_dims, int64_t inner, const void *x, void *const *ys) {
  split_job j = {.es = elem_size, .n = n_outputs, .inner = inner, .axis_dims = axis_dims,
                 .x = x, .ys = ys};
  for (int i = 0; i < n_outputs; i++) j.total += axis_dims[i];
  npuK_parallel_for(pool, outer, row_grain(j.total * inner), split_range, &j);
}

/* ---- gather ------------------------------------------------------------------------------- */

static int64_t index_at(const void *indices, size_t index_size, int64_t i) {
  return index_size == 8 ? ((const int64_t *)indices)[i] : ((const int32_t *)indices)[i];
}

static int64_t first_bad(const void *indices, size_t index_size, int64_t n, int64_t limit) {
  for (int64_t i = 0; i < n; i++) {
    int64_t v = index_at(indices, index_size, i);
    if (v < 0 || v >= limit) return i;
  }
  return -1;
}

typedef struct gather_job {
  size_t es, index_size;
  int64_t axis_dim, inner, n_indices;
  const void *indices;
  const char *x;
  char *y;
} gather_job;

static void gather_range(void *arg, int64_t begin, int64_t end) {
  const gather_job *j = arg;
  size_t row = (size_t)j->inner * j->es;
  for (int64_t r = begin; r < end; r++) {
    int64_t o = r / j->n_indices, k = r % j->n_indices;
    int64_t src = o * j->axis_dim + index_at(j->indices, j->index_size, k);
    memcpy(j->y + (size_t)r * row, j->x + (size_t)src * row, row);
  }
}

int64_t npuK_gather(const npuK_pool *pool, size_t elem_size, int64_t outer, int64_t axis_dim,
                    int64_t inner, int64_t n_indices, const void *indices, size_t index_size,
                    const void *x, void *y) {
  int64_t bad = first_bad(indices, index_size, n_indices, axis_dim);
  if (bad >= 0 || inner == 0) return bad;
  gather_job j = {.es = elem_size, .index_size = index_size, .axis_dim = axis_dim,
                  .inner = inner, .n_indices = n_indices, .indices = indices, .x = x, .y = y};
  npuK_parallel_for(pool, outer * n_indices, row_grain(inner), gather_range, &j);
  return -1;
}

int64_t npuK_gather_ref(const npuK_pool *pool, size_t elem_size, int64_t outer,
                        int64_t axis_dim, int64_t inner, int64_t n_indices, const void *indices,
                        size_t index_size, const void *x, void *y) {
  (void)pool;
  int64_t bad = first_bad(indices, index_size, n_indices, axis_dim);
  if (bad >= 0) return bad;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < n_indices; k++)
      for (int64_t e = 0; e < inner; e++) {
        int64_t src = (o * axis_dim + index_at(indices, index_size, k)) * inner + e;
        int64_t dst = (o * n_indices + k) * inner + e;
        memcpy((char *)y + dst * (int64_t)elem_size,
               (const char *)x + src * (int64_t)elem_size, elem_size);
      }
  return -1;
}

/* ---- gather_nd ---------------------------------------------------------------------------- */

typedef struct gnd_job {
  size_t es, index_size;
  int depth;
  int64_t inner;
  const int64_t *strides; /* x's strides over the indexed dims */
  const void *indices;
  const char *x;
  char *y;
} gnd_job;

static void gnd_range(void *arg, int64_t begin, int64_t end) {
  const gnd_job *j = arg;
  size_t row = (size_t)j->inner * j->es;
  for (int64_t r = begin; r < end; r++) {
    int64_t off = 0;
    for (int d = 0; d < j->depth; d++)
      off += index_at(j->indices, j->index_size, r * j->depth + d) * j->strides[d];
    memcpy(j->y + (size_t)r * row, j->x + (size_t)off * j->es, row);
  }
}

int64_t npuK_gather_nd(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
                       int64_t n_indices, int index_depth, const void *indices,
                       size_t index_size, const void *x, void *y) {
  int64_t xs[NPUK_MAX_DIMS];
  k_dense_strides(ndim, in_dims, xs);
  for (int64_t r = 0; r < n_indices; r++)
    for (int d = 0; d < index_depth; d++) {
      int64_t v = index_at(indices, index_size, r * index_depth + d);
      if (v < 0 || v >= in_dims[d]) return r;
    }
  int64_t inner = k_prod(ndim - index_depth, in_dims + index_depth);
  if (inner == 0) return -1;
  gnd_job j = {.es = elem_size, .index_size = index_size, .depth = index_depth, .inner = inner,
               .strides = xs, .indices = indices, .x = x, .y = y};
  npuK_parallel_for(pool, n_indices, row_grain(inner), gnd_range, &j);
  return -1;
}

/* ---- space_to_batch / batch_to_space ------------------------------------------------------ */

typedef struct s2b_job {
  size_t es;
  int m;
  bool to_batch;
  int64_t batch; /* the smaller batch: x's for space_to_batch, y's for batch_to_space */
  int64_t inner;
  const int64_t *space;  /* the spatial dims of the side with the smaller batch */
  const int64_t *blocks; /* the spatial dims of the other side */
  const int64_t *block, *before;
  const char *x;
  char *y;
} s2b_job;

/* Row r of the side with the larger batch (to_batch: y) holds block offset b, item n and
   block position o; the other side's position is o * block + b - before. */
static void s2b_range(void *arg, int64_t begin, int64_t end) {
  const s2b_job *j = arg;
  size_t row = (size_t)j->inner * j->es;
  for (int64_t r = begin; r < end; r++) {
    int64_t rest = r, off = 0, stride = 1;
    bool inside = true;
    int64_t o[NPUK_MAX_DIMS];
    for (int i = j->m - 1; i >= 0; i--) {
      o[i] = rest % j->blocks[i];
      rest /= j->blocks[i];
    }
    int64_t n = rest % j->batch, b = rest / j->batch;
    for (int i = j->m - 1; i >= 0; i--) {
      int64_t bi = b % j->block[i];
      b /= j->block[i];
      int64_t p = o[i] * j->block[i] + bi - j->before[i];
      if (p < 0 || p >= j->space[i]) inside = false;
      off += p * stride;
      stride *= j->space[i];
    }
    off += n * stride;
    if (j->to_batch) {
      if (inside) memcpy(j->y + (size_t)r * row, j->x + (size_t)off * row, row);
      else memset(j->y + (size_t)r * row, 0, row);
    } else if (inside) {
      memcpy(j->y + (size_t)off * row, j->x + (size_t)r * row, row);
    }
  }
}

void npuK_space_to_batch(const npuK_pool *pool, size_t elem_size, int m, int64_t batch,
                         const int64_t *spatial, const int64_t *block, const int64_t *paddings,
                         int64_t inner, const void *x, void *y) {
  int64_t out_sp[NPUK_MAX_DIMS], before[NPUK_MAX_DIMS];
  int64_t rows = batch;
  for (int i = 0; i < m; i++) {
    before[i] = paddings[2 * i];
    out_sp[i] = (spatial[i] + paddings[2 * i] + paddings[2 * i + 1]) / block[i];
    rows *= out_sp[i] * block[i];
  }
  s2b_job j = {.es = elem_size, .m = m, .to_batch = true, .batch = batch, .inner = inner,
               .space = spatial, .blocks = out_sp, .block = block, .before = before, .x = x,
               .y = y};
  if (inner) npuK_parallel_for(pool, rows, row_grain(inner), s2b_range, &j);
}

/* Every y element is some x element (crops only remove), so walking x's rows and writing
   those that land inside y fills y exactly once. */
void npuK_batch_to_space(const npuK_pool *pool, size_t elem_size, int m, int64_t batch,
                         const int64_t *spatial, const int64_t *block, const int64_t *crops,
                         int64_t inner, const void *x, void *y) {
  int64_t out_sp[NPUK_MAX_DIMS], before[NPUK_MAX_DIMS], in_sp[NPUK_MAX_DIMS];
  int64_t rows = batch;
  for (int i = 0; i < m; i++) {
    before[i] = crops[2 * i];
    in_sp[i] = spatial[i];
    out_sp[i] = spatial[i] * block[i] - crops[2 * i] - crops[2 * i + 1];
    rows *= spatial[i] * block[i];
  }
  s2b_job j = {.es = elem_size, .m = m, .to_batch = false, .batch = batch, .inner = inner,
               .space = out_sp, .blocks = in_sp, .block = block, .before = before, .x = x,
               .y = y};
  if (inner) npuK_parallel_for(pool, rows, row_grain(inner), s2b_range, &j);
}

/* ---- range -------------------------------------------------------------------------------- */

/* TensorFlow's order: the value accumulates (v += delta), it is not start + i * delta. */
#define RANGE_DEF(dt, T)                                                                       \
  void npuK_range_##dt(int64_t n, T start, T delta, T *y) {                                    \
    T v = start;                                                                               \
    for (int64_t i = 0; i < n; i++) {                                                          \
      y[i] = v;                                                                                \
      v = (T)(v + delta);                                                                      \
    }                                                                                          \
  }
RANGE_DEF(f32, float)
RANGE_DEF(f64, double)
#undef RANGE_DEF

/* Integers accumulate unsigned and wrap (two's complement): no signed overflow. */
void npuK_range_i32(int64_t n, int32_t start, int32_t delta, int32_t *y) {
  uint32_t v = (uint32_t)start;
  for (int64_t i = 0; i < n; i++, v += (uint32_t)delta) y[i] = (int32_t)v;
}

void npuK_range_i64(int64_t n, int64_t start, int64_t delta, int64_t *y) {
  uint64_t v = (uint64_t)start;
  for (int64_t i = 0; i < n; i++, v += (uint64_t)delta) y[i] = (int64_t)v;
}
