/* segment.c: unsorted_segment_sum (kgrad.h), the scatter-add that gives gather its gradient.
 *
 * x is (n_rows, inner), y (n_segments, inner).  The ids are checked first (nothing is summed
 * when one is out of range), then each block of columns is zeroed and summed over the rows in
 * ascending order, so a column's additions happen in one order whatever the thread count.
 */
#include <string.h>

#include "kernels/kgrad.h"

typedef struct seg_args {
  npuK_dtype dtype;
  int64_t n_rows, inner, n_segments;
  const void *ids;
  size_t id_size;
  const void *x;
  void *y;
} seg_args;

static int64_t id_at(const seg_args *a, int64_t r) {
  return a->id_size == 8 ? ((const int64_t *)a->ids)[r] : ((const int32_t *)a->ids)[r];
}

#define SEG_LOOP(T)                                                                                \
  do {                                                                                             \
    const T *x = a->x;                                                                             \
    T *y = a->y;                                                                                   \
    for (int64_t s = 0; s < a->n_segments; s++)                                                    \
      for (int64_t c = c0; c < c1; c++) y[s * a->inner + c] = 0;                                   \
    for (int64_t r = 0; r < a->n_rows; r++) {                                                      \
      int64_t s = id_at(a, r);                                                                     \
      if (s < 0) continue;                                                                         \
      for (int64_t c = c0; c < c1; c++) y[s * a->inner + c] += x[r * a->inner + c];                \
    }                                                                                              \
  } while (0)

static void seg_cols(void *arg, int64_t c0, int64_t c1) {
  const seg_args *a = arg;
  switch (a->dtype) {
  case NPUK_F32: SEG_LOOP(float); break;
  case NPUK_F64: SEG_LOOP(double); break;
  default: break;
  }
}

int64_t npuK_unsorted_segment_sum(const npuK_pool *pool, npuK_dtype dtype, int64_t n_rows,
                                  int64_t inner, int64_t n_segments, const void *ids,
                                  size_t id_size, const void *x, void *y) {
  seg_args a = {dtype, n_rows, inner, n_segments, ids, id_size, x, y};
  for (int64_t r = 0; r < n_rows; r++)
    if (id_at(&a, r) >= n_segments) return r;
  /* a block of columns per chunk: enough rows of work to be worth a thread */
  int64_t grain = n_rows > 0 ? 1 + 4096 / (n_rows + n_segments) : inner;
  npuK_parallel_for(pool, inner, grain, seg_cols, &a);
  return -1;
}
