/* select.c: kernels that choose elements by value: top_k (per row, the k largest),
 * non_max_suppression (greedy box selection by score and overlap), where (the coordinates of
 * nonzero elements) and unique (values by first occurrence).
 *
 * The order both use is total, so results never depend on the thread count or on the sort
 * algorithm: larger value first, equal values by lower index (TensorFlow's TopKV2 and
 * NonMaxSuppressionV3 tie rule); for top_k a NaN counts as larger than every number (NaNs by
 * index, as NumPy sorts them to one end).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/kutil.h"

/* ---- top_k -------------------------------------------------------------------------------- */

/* a (value va, index ia) goes before b.  v != v is the NaN test (never true for integers). */
#define BETTER(va, ia, vb, ib)                                                                 \
  ((va) != (va) ? ((vb) != (vb) ? (ia) < (ib) : 1)                                             \
                : (vb) != (vb) ? 0 : (va) != (vb) ? (va) > (vb) : (ia) < (ib))

#define TOP_K_DEF(dt, T)                                                                       \
  typedef struct top_k_job_##dt {                                                              \
    int64_t cols, k;                                                                           \
    const T *x;                                                                                \
    T *v;                                                                                      \
    int32_t *idx;                                                                              \
  } top_k_job_##dt;                                                                            \
                                                                                               \
  /* The output row is a heap of the k best so far, its root the worst of them. */            \
  static void sift_down_##dt(T *v, int32_t *ix, int64_t n, int64_t at) {                       \
    for (;;) {                                                                                 \
      int64_t w = at, l = 2 * at + 1, r = l + 1;                                               \
      if (l < n && BETTER(v[w], ix[w], v[l], ix[l])) w = l;                                    \
      if (r < n && BETTER(v[w], ix[w], v[r], ix[r])) w = r;                                    \
      if (w == at) return;                                                                     \
      T tv = v[w];                                                                             \
      int32_t ti = ix[w];                                                                      \
      v[w] = v[at], ix[w] = ix[at], v[at] = tv, ix[at] = ti;                                   \
      at = w;                                                                                  \
    }                                                                                          \
  }                                                                                            \
                                                                                               \
  static void top_k_range_##dt(void *arg, int64_t begin, int64_t end) {                        \
    const top_k_job_##dt *j = arg;                                                             \
    const int64_t k = j->k;                                                                    \
    for (int64_t r = begin; r < end; r++) {                                                    \
      const T *x = j->x + r * j->cols;                                                         \
      T *v = j->v + r * k;                                                                     \
      int32_t *ix = j->idx + r * k;                                                        \
      for (int64_t c = 0; c < j->cols; c++) {                                                  \
        if (c < k) { /* push, sift up: a worse element rises */                                \
          int64_t at = c;                                                                      \
          v[at] = x[c], ix[at] = (int32_t)c;                                                   \
          while (at > 0) {                                                                     \
            int64_t p = (at - 1) / 2;                                                          \
            if (!BETTER(v[p], ix[p], v[at], ix[at])) break;                                    \
            T tv = v[p];                                                                       \
            int32_t ti = ix[p];                                                                \
            v[p] = v[at], ix[p] = ix[at], v[at] = tv, ix[at] = ti;                             \
            at = p;                                                                            \
          }                                                                                    \
        } else if (BETTER(x[c], c, v[0], ix[0])) {                                             \
          v[0] = x[c], ix[0] = (int32_t)c;                                                     \
          sift_down_##dt(v, ix, k, 0);                                                         \
        }                                                                                      \
      }                                                                                        \
      for (int64_t n = k - 1; n > 0; n--) { /* heap sort: the worst goes to the end */         \
        T tv = v[0];                                                                           \
        int32_t ti = ix[0];                                                                    \
        v[0] = v[n], ix[0] = ix[n], v[n] = tv, ix[n] = ti;                                     \
        sift_down_##dt(v, ix, n, 0);                                                           \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
                                                                                               \
  void npuK_top_k_##dt(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,           \
                       const T *x, T *values, int32_t *indices) {                              \
    top_k_job_##dt j = {.cols = cols, .k = k, .x = x, .v = values, .idx = indices};            \
    if (k > 0)                                                                                 \
      npuK_parallel_for(pool, rows, cols >= K_GRAIN_ELEMS ? 1 : K_GRAIN_ELEMS / (cols + 1),     \
                        top_k_range_##dt, &j);                                                 \
  }                                                                                            \
                                                                                               \
  /* k passes: pass j takes the best element that ranks after pass j - 1's. */                 \
  void npuK_top_k_##dt##_ref(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,     \
                             const T *x, T *values, int32_t *indices) {                        \
    (void)pool;                                                                                \
    for (int64_t r = 0; r < rows; r++) {                                                       \
      const T *row = x + r * cols;                                                             \
      for (int64_t j = 0; j < k; j++) {                                                        \
        int64_t best = -1;                                                                     \
        for (int64_t c = 0; c < cols; c++) {                                                   \
          if (j > 0) {                                                                         \
            int64_t prev = indices[r * k + j - 1];                                             \
            if (!BETTER(row[prev], prev, row[c], c)) continue;                                 \
          }                                                                                    \
          if (best < 0 || BETTER(row[c], c, row[best], best)) best = c;                        \
        }                                                                                      \
        values[r * k + j] = row[best];                                                         \
        indices[r * k + j] = (int32_t)best;                                                    \
      }                                                                                        \
    }                                                                                          \
  }

TOP_K_DEF(f32, float)
TOP_K_DEF(f64, double)
TOP_K_DEF(i32, int32_t)
TOP_K_DEF(i64, int64_t)
#undef TOP_K_DEF

/* ---- non_max_suppression ------------------------------------------------------------------ */

/* A candidate box: its current score (soft-NMS lowers it), its index, and how many selected
   boxes it has been compared with already. */
typedef struct nms_candidate {
  float score;
  int64_t index, begin;
} nms_candidate;

/* a is popped before b: higher score, ties by lower index. */
static bool nms_before(const nms_candidate *a, const nms_candidate *b) {
  return a->score != b->score ? a->score > b->score : a->index < b->index;
}

static void heap_up(nms_candidate *h, int64_t i) {
  while (i > 0 && nms_before(&h[i], &h[(i - 1) / 2])) {
    nms_candidate t = h[i];
    h[i] = h[(i - 1) / 2], h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static void heap_down(nms_candidate *h, int64_t n, int64_t i) {
  for (;;) {
    int64_t best = i, l = 2 * i + 1, r = l + 1;
    if (l < n && nms_before(&h[l], &h[best])) best = l;
    if (r < n && nms_before(&h[r], &h[best])) best = r;
    if (best == i) return;
    nms_candidate t = h[i];
    h[i] = h[best], h[best] = t;
    i = best;
  }
}

static float minf(float a, float b) { return a < b ? a : b; }
static float maxf(float a, float b) { return a > b ? a : b; }

/* TensorFlow's IOU: corners in any order; an empty box overlaps nothing. */
static float iou(const float *a, const float *b) {
  float ay0 = minf(a[0], a[2]), ax0 = minf(a[1], a[3]), ay1 = maxf(a[0], a[2]),
        ax1 = maxf(a[1], a[3]);
  float by0 = minf(b[0], b[2]), bx0 = minf(b[1], b[3]), by1 = maxf(b[0], b[2]),
        bx1 = maxf(b[1], b[3]);
  float area_a = (ay1 - ay0) * (ax1 - ax0), area_b = (by1 - by0) * (bx1 - bx0);
  if (area_a <= 0 || area_b <= 0) return 0;
  float inter = maxf(minf(ay1, by1) - maxf(ay0, by0), 0) * maxf(minf(ax1, bx1) - maxf(ax0, bx0), 0);
  return inter / (area_a + area_b - inter);
}

size_t npuK_nms_scratch_size(int64_t n) { return (size_t)(n > 0 ? n : 1) * sizeof(nms_candidate); }

/* TensorFlow's NonMaxSuppressionV5 loop: the best candidate is compared with the boxes
   selected since it was last looked at; hard NMS drops it at an IoU > iou_threshold, soft NMS
   scales its score by exp(-iou^2 / (2 sigma)) (0 past iou_threshold) and puts it back while
   the score stays above score_threshold; an unchanged score selects it. */
int64_t npuK_non_max_suppression_f32(int64_t n, const float *boxes, const float *scores,
                                     int64_t max_output, float iou_threshold,
                                     float score_threshold, float soft_nms_sigma,
                                     int32_t *selected, float *selected_scores, void *scratch) {
  nms_candidate *heap = scratch;
  int64_t n_heap = 0, count = 0;
  bool soft = soft_nms_sigma > 0;
  float scale = soft ? -0.5f / soft_nms_sigma : 0.0f;
  for (int64_t i = 0; i < n; i++)
    if (scores[i] > score_threshold) {
      heap[n_heap] = (nms_candidate){scores[i], i, 0};
      heap_up(heap, n_heap++);
    }
  while (count < max_output && n_heap > 0) {
    nms_candidate c = heap[0];
    heap[0] = heap[--n_heap];
    heap_down(heap, n_heap, 0);
    float original = c.score;
    bool hard = false;
    for (int64_t j = count - 1; j >= c.begin; j--) {
      float sim = iou(boxes + 4 * c.index, boxes + 4 * (int64_t)selected[j]);
      c.score *= sim <= iou_threshold ? expf(scale * sim * sim) : 0.0f;
      if (!soft && sim > iou_threshold) {
        hard = true;
        break;
      }
      if (c.score <= score_threshold) break;
    }
    c.begin = count;
    if (hard) continue;
    if (c.score == original) {
      selected[count] = (int32_t)c.index;
      selected_scores[count++] = c.score;
    } else if (c.score > score_threshold) {
      heap[n_heap] = c;
      heap_up(heap, n_heap++);
    }
  }
  return count;
}

/* ---- where, unique ---------------------------------------------------------------------- */

/* Element i of x is nonzero: -0.0 is zero and NaN is not, as x != 0 tests it. */
static bool nonzero_at(const void *x, npuK_dtype dtype, int64_t i) {
  switch (dtype) {
  case NPUK_F32: return ((const float *)x)[i] != 0;
  case NPUK_F64: return ((const double *)x)[i] != 0;
  case NPUK_F16:
  case NPUK_BF16: return (((const uint16_t *)x)[i] & 0x7fff) != 0;
  case NPUK_I32: return ((const int32_t *)x)[i] != 0;
  case NPUK_I64: return ((const int64_t *)x)[i] != 0;
  case NPUK_I8:
  case NPUK_U8:
  case NPUK_BOOL: return ((const uint8_t *)x)[i] != 0;
  default: return false;
  }
}

int64_t npuK_count_nonzero(int64_t n, const void *x, npuK_dtype dtype) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; i++) count += nonzero_at(x, dtype, i);
  return count;
}

void npuK_where(int ndim, const int64_t *dims, const void *x, npuK_dtype dtype,
                int64_t *coords) {
  int64_t n = 1, at[NPUK_MAX_DIMS] = {0};
  for (int d = 0; d < ndim; d++) n *= dims[d];
  for (int64_t i = 0; i < n; i++) {
    if (nonzero_at(x, dtype, i))
      for (int d = 0; d < ndim; d++) *coords++ = at[d];
    for (int d = ndim - 1; d >= 0 && ++at[d] == dims[d]; d--) at[d] = 0; /* row-major odometer */
  }
}

/* unique: the elements sorted by (key, index) bring equal values together; the first of each
   run is its value's first occurrence.  Floats are keyed as doubles (exact for every float
   dtype; -0.0 == 0.0), integers as int64; a NaN equals nothing, so each is its own value. */
typedef struct unique_entry {
  double f;
  int64_t i, index;
} unique_entry;

static int by_double(const void *pa, const void *pb) {
  const unique_entry *a = pa, *b = pb;
  bool na = a->f != a->f, nb = b->f != b->f;
  if (na != nb) return na ? 1 : -1; /* NaNs last, by index */
  if (!na && a->f != b->f) return a->f < b->f ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

static int by_int(const void *pa, const void *pb) {
  const unique_entry *a = pa, *b = pb;
  if (a->i != b->i) return a->i < b->i ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

size_t npuK_unique_scratch_size(int64_t n) { return (size_t)(n > 0 ? n : 1) * sizeof(unique_entry); }

int64_t npuK_unique_ids(int64_t n, const void *x, npuK_dtype dtype, int64_t *ids, void *scratch) {
  unique_entry *e = scratch;
  bool is_float = dtype == NPUK_F32 || dtype == NPUK_F64 || dtype == NPUK_F16 || dtype == NPUK_BF16;
  for (int64_t k = 0; k < n; k++) {
    e[k] = (unique_entry){.index = k};
    switch (dtype) {
    case NPUK_F32: e[k].f = ((const float *)x)[k]; break;
    case NPUK_F64: e[k].f = ((const double *)x)[k]; break;
    case NPUK_F16:
    case NPUK_BF16: {
      uint16_t h = ((const uint16_t *)x)[k];
      e[k].f = dtype == NPUK_F16 ? npu_f16_to_f32(h) : npu_bf16_to_f32(h);
      break;
    }
    case NPUK_I32: e[k].i = ((const int32_t *)x)[k]; break;
    case NPUK_I64: e[k].i = ((const int64_t *)x)[k]; break;
    case NPUK_I8: e[k].i = ((const int8_t *)x)[k]; break;
    default: e[k].i = ((const uint8_t *)x)[k]; break;
    }
  }
  if (n > 1) qsort(e, (size_t)n, sizeof *e, is_float ? by_double : by_int);
  /* ids[index] = the index of its value's first occurrence, then renumbered in order */
  for (int64_t k = 0; k < n; k++) {
    bool same = k > 0 && (is_float ? e[k].f == e[k - 1].f : e[k].i == e[k - 1].i);
    ids[e[k].index] = same ? ids[e[k - 1].index] : e[k].index;
  }
  int64_t count = 0;
  for (int64_t k = 0; k < n; k++) ids[k] = ids[k] == k ? count++ : ids[ids[k]];
  return count;
}

void npuK_unique_values(int64_t n, const void *x, size_t elem_size, const int64_t *ids, void *y) {
  int64_t next = 0;
  for (int64_t k = 0; k < n; k++)
    if (ids[k] == next) memcpy((char *)y + (size_t)next++ * elem_size, (const char *)x + (size_t)k * elem_size, elem_size);
}
