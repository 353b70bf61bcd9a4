/* gelu.c: gelu and its gradient, the high_precision kernels (kfast.h; the float32 fast twin
 * is in fastmath.c).
 *
 * float32 is computed in double and rounded once, so the result is the correctly rounded
 * value but for rare ties: erfc keeps its relative accuracy in the far negative tail, where
 * 1 + erf would cancel, and the tanh form uses 1 + tanh(u) = 2 sigmoid(2u) for the same reason.
 * Split over elements; in-place allowed (each element is read before it is written).
 */
#include <math.h>

#include "kernels/kfast.h"
#include "kernels/kutil.h"

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794
#define K1 1.59576912160573071176 /* 2 sqrt(2 / pi) */
#define K2 (0.044715 * K1)

static double sigmoid(double u) {
  if (u >= 0) return 1 / (1 + exp(-u));
  double e = exp(u);
  return e / (1 + e);
}

/* The limits at +-inf (the formulas would give inf * 0 = NaN there). */
static double gelu(double x, int approximate) {
  if (isinf(x)) return x > 0 ? x : -0.0;
  if (approximate) return x * sigmoid(x * (K1 + K2 * x * x));
  return 0.5 * x * erfc(-x * SQRT1_2);
}

static double gelu_grad(double x, int approximate) {
  if (isinf(x)) return x > 0 ? 1.0 : 0.0;
  if (approximate) {
    double s = sigmoid(x * (K1 + K2 * x * x));
    return s + x * s * (1 - s) * (K1 + 3 * K2 * x * x);
  }
  return 0.5 * erfc(-x * SQRT1_2) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
}

typedef struct gelu_job {
  int approximate, f64;
  const void *x, *dy;
  void *y;
} gelu_job;

static void gelu_range(void *arg, int64_t begin, int64_t end) {
  const gelu_job *j = arg;
  if (j->f64) {
    const double *x = j->x;
    double *y = j->y;
    for (int64_t i = begin; i < end; i++) y[i] = gelu(x[i], j->approximate);
  } else {
    const float *x = j->x;
    float *y = j->y;
    for (int64_t i = begin; i < end; i++) y[i] = (float)gelu(x[i], j->approximate);
  }
}

static void grad_range(void *arg, int64_t begin, int64_t end) {
  const gelu_job *j = arg;
  if (j->f64) {
    const double *x = j->x, *dy = j->dy;
    double *dx = j->y;
    for (int64_t i = begin; i < end; i++) dx[i] = dy[i] * gelu_grad(x[i], j->approximate);
  } else {
    const float *x = j->x, *dy = j->dy;
    float *dx = j->y;
    for (int64_t i = begin; i < end; i++)
      dx[i] = (float)((double)dy[i] * gelu_grad(x[i], j->approximate));
  }
}

/* erfc and exp per element: a smaller grain than the cheap elementwise kernels. */
#define GELU_GRAIN (K_GRAIN_ELEMS / 4)

void npuK_gelu_f32(const npuK_pool *pool, int approximate, int64_t n, const float *x, float *y) {
  gelu_job j = {approximate, 0, x, NULL, y};
  npuK_parallel_for(pool, n, GELU_GRAIN, gelu_range, &j);
}

void npuK_gelu_f64(const npuK_pool *pool, int approximate, int64_t n, const double *x,
                   double *y) {
  gelu_job j = {approximate, 1, x, NULL, y};
  npuK_parallel_for(pool, n, GELU_GRAIN, gelu_range, &j);
}

void npuK_gelu_grad_f32(const npuK_pool *pool, int approximate, int64_t n, const float *dy,
                        const float *x, float *dx) {
  gelu_job j = {approximate, 0, x, dy, dx};
  npuK_parallel_for(pool, n, GELU_GRAIN, grad_range, &j);
}

void npuK_gelu_grad_f64(const npuK_pool *pool, int approximate, int64_t n, const double *dy,
                        const double *x, double *dx) {
  gelu_job j = {approximate, 1, x, dy, dx};
  npuK_parallel_for(pool, n, GELU_GRAIN, grad_range, &j);
}
