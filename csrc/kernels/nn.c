/* nn.c: bias_add and softmax / log_softmax over the last axis.
 *
 * x and y are (rows, cols), row-major; bias is (cols). Work is split over rows only; inside a
 * row the max and the sum of exp(x - max) are taken in ascending column order, the sum in
 * float64 (A) whatever the element type, so a long float32 row's denominator is its float64
 * sum rounded once and results do not depend on the thread count. These are also the
 * reference twins of kfast.h's softmax. In-place (y == x) is allowed.
 */
#include <math.h>

#include "kernels/kutil.h"

typedef struct nn_job {
  int64_t cols;
  const void *x, *bias;
  void *y;
} nn_job;

static int64_t row_grain(int64_t cols) {
  int64_t g = K_GRAIN_ELEMS / (cols > 0 ? cols : 1);
  return g < 1 ? 1 : g;
}

#define DEFINE_NN(T, A, dt, EXP, LOG)                                                              \
  static void bias_range_##dt(void *arg, int64_t begin, int64_t end) {                          \
    const nn_job *j = arg;                                                                      \
    const T *x = j->x, *bias = j->bias;                                                         \
    T *y = j->y;                                                                                \
    for (int64_t r = begin; r < end; r++)                                                       \
      for (int64_t c = 0; c < j->cols; c++) y[r * j->cols + c] = x[r * j->cols + c] + bias[c];  \
  }                                                                                             \
  void npuK_bias_add_##dt(const npuK_pool *pool, int64_t rows, int64_t cols, const T *x,        \
                          const T *bias, T *y) {                                                \
    nn_job j = {cols, x, bias, y};                                                              \
    npuK_parallel_for(pool, rows, row_grain(cols), bias_range_##dt, &j);                        \
  }                                                                                             \
  /* Writes exp(x - max) into y and returns the row sum (in A); *mx gets the max. */             \
  static A exp_row_##dt(const T *x, T *y, int64_t cols, T *mx) {                                \
    T m = -INFINITY;                                                                            \
    for (int64_t c = 0; c < cols; c++)                                                          \
      if (x[c] > m || x[c] != x[c]) m = x[c];                                                   \
    A sum = 0;                                                                                  \
    for (int64_t c = 0; c < cols; c++) {                                                        \
      y[c] = EXP(x[c] - m);                                                                     \
      sum += (A)y[c];                                                                           \
    }                                                                                           \
    *mx = m;                                                                                    \
    return sum;                                                                                 \
  }                                                                                             \
  static void softmax_range_##dt(void *arg, int64_t begin, int64_t end) {                       \
    const nn_job *j = arg;                                                                      \
    for (int64_t r = begin; r < end; r++) {                                                     \
      const T *x = (const T *)j->x + r * j->cols;                                               \
      T *y = (T *)j->y + r * j->cols, m;                                                        \
      T sum = (T)exp_row_##dt(x, y, j->cols, &m);                                               \
      for (int64_t c = 0; c < j->cols; c++) y[c] /= sum;                                        \
    }                                                                                           \
  }                                                                                             \
  static void log_softmax_range_##dt(void *arg, int64_t begin, int64_t end) {                   \
    const nn_job *j = arg;                                                                      \
    for (int64_t r = begin; r < end; r++) {                                                     \
      const T *x = (const T *)j->x + r * j->cols;                                               \
      T *y = (T *)j->y + r * j->cols, m;                                                        \
      /* y may alias x: every x[c] is read before y[c] is written. */                          \
      A sum = 0;                                                                                \
      m = -INFINITY;                                                                            \
      for (int64_t c = 0; c < j->cols; c++)                                                     \
        if (x[c] > m || x[c] != x[c]) m = x[c];                                                 \
      for (int64_t c = 0; c < j->cols; c++) sum += (A)EXP(x[c] - m);                            \
      T ls = LOG((T)sum);                                                                       \
      for (int64_t c = 0; c < j->cols; c++) y[c] = (x[c] - m) - ls;                             \
    }                                                                                           \
  }                                                                                             \
  void npuK_softmax_##dt(const npuK_pool *pool, int64_t rows, int64_t cols, const T *x, T *y) { \
    nn_job j = {cols, x, NULL, y};                                                              \
    npuK_parallel_for(pool, rows, row_grain(cols), softmax_range_##dt, &j);                     \
  }                                                                                             \
  void npuK_log_softmax_##dt(const npuK_pool *pool, int64_t rows, int64_t cols, const T *x,     \
                             T *y) {                                                            \
    nn_job j = {cols, x, NULL, y};                                                              \
    npuK_parallel_for(pool, rows, row_grain(cols), log_softmax_range_##dt, &j);                 \
  }

DEFINE_NN(float, double, f32, expf, logf)
DEFINE_NN(double, double, f64, exp, log)
