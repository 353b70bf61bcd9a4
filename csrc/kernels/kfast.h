/* kfast.h: the high_performance kernels (fastmath.c) and gelu's kernels (gelu.c), npuK_.
 *
 * Two implementations of the transcendental ops exist, chosen per step by the implementation
 * modes (compile/implmode.c, options op_select_implmode, optypelist_for_implmode,
 * op_precision_mode):
 *   high_precision    the libm-based kernels of unary.c, nn.c and gelu.c (the only ones the
 *                     use_off_line=false reference path runs);
 *   high_performance  (the default, op_select_implmode's in the reference) the float32 twins
 *                     below: range reduction + polynomial, written so the
 *                     compiler vectorises them (blocks of NPUK_FAST_BLOCK elements, no
 *                     branches, no libm calls per element).
 * float64 has one implementation (high_precision): the twins below are float32 only.
 *
 * The conventions of kernels.h hold (no allocation, in-place allowed, work split only over
 * independent elements or rows).  Every element goes through the same blocked code whatever
 * the split (a partial block is padded), so results are bitwise identical for any thread count.
 *
 * Accuracy of the twins against the exact value (an ulp is that of the exact result in float32;
 * measured over every float32 input for the elementwise ones, checked on a sweep of them by
 * tests/test_fastmath.c; bench/implmode.lua prints both implementations' errors):
 *   exp       <= 1 ulp, subnormal results included (0.98 measured)
 *   log       <= 1.5 ulp (1.23); log(0) = -inf, log(x < 0) = NaN, log(inf) = inf
 *   tanh      <= 1.5 ulp (1.33)
 *   sigmoid   <= 2.5 ulp (2.40)
 *   gelu      exact form <= 8 ulp for x >= -10 (7.26), 11 below (10.4; |gelu| < 1e-22 there);
 *             tanh form <= 8 ulp for x >= -2 (7.51), then growing as the float32 argument of
 *             the sigmoid loses relative accuracy: <= 16 ulp for x >= -3, <= 66 for x >= -6,
 *             <= 215 below (|gelu| < 1e-10 there)
 *   softmax   <= 5 ulp (4.3) and log_softmax <= 2e-7 max(1, |y|) absolute, against the exact
 *             function of the float32 differences x - max both kernels start from; the
 *             high_precision kernels' sequential row sum does worse on long rows (35 ulp and
 *             5.5e-7 on rows of 1000 in the same test): there the fast twins lose only in exp
 * NaN in gives NaN out; +-inf give the limits, as the high_precision kernels do.
 */
#ifndef NPU_KERNELS_KFAST_H
#define NPU_KERNELS_KFAST_H

#include "kernels/kernels.h"

/* Elements per vectorised block. */
#define NPUK_FAST_BLOCK 16

/* y[i] = OP(x[i]) for the ops with a high_performance twin (EXP, LOG, TANH, SIGMOID); returns
   0, or -1 (nothing written) for any other op: the caller runs the high_precision kernel. */
int npuK_unary_f32_fast(const npuK_pool *pool, npuK_unop op, int64_t n, const float *x,
                        float *y);
/* 1 when op has a high_performance twin. */
int npuK_unary_has_fast(npuK_unop op);

/* softmax / log_softmax over the last axis (x, y are (rows, cols); in-place ok), as
   npuK_softmax_f32 / npuK_log_softmax_f32 but with the fast exp, the row sum in 16 lanes
   (float32 over 16 blocks, then float64) added in a fixed order, and softmax multiplying by
   the reciprocal of the sum. */
void npuK_softmax_f32_fast(const npuK_pool *pool, int64_t rows, int64_t cols, const float *x,
                           float *y);
void npuK_log_softmax_f32_fast(const npuK_pool *pool, int64_t rows, int64_t cols,
                               const float *x, float *y);
/* One row x (cols) of npuK_log_softmax_f32_fast: *max and *log_sum as it computes them, its
   outputs being (x[c] - *max) - *log_sum (for fused kernels that recompute them). */
void npuK_log_softmax_row_f32_fast(const float *x, int64_t cols, float *max, float *log_sum);

/* ---------------------------------------------------------------- gelu (gelu.c, fastmath.c)
 * gelu: y = x * Phi(x), Phi the standard normal CDF (approximate = 0: exact,
 * 0.5 x (1 + erf(x / sqrt 2))), or the tanh form (approximate = 1:
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), computed as x * sigmoid(2 sqrt(2/pi) (...)),
 * the same function without the cancellation of 1 + tanh for x < 0).
 * _f32 computes in double and rounds once (high_precision); _f32_fast is the twin above.
 * gelu_grad: dx = dy * d gelu / dx (x, dy, dx dense of n elements; dx may alias either):
 *   exact  Phi(x) + x phi(x);  tanh form  s + x s (1 - s) (k1 + 3 k2 x^2), s = sigmoid(u),
 *   u = x (k1 + k2 x^2), k1 = 2 sqrt(2/pi), k2 = 0.044715 k1. */
void npuK_gelu_f32(const npuK_pool *pool, int approximate, int64_t n, const float *x, float *y);
void npuK_gelu_f64(const npuK_pool *pool, int approximate, int64_t n, const double *x,
                   double *y);
void npuK_gelu_f32_fast(const npuK_pool *pool, int approximate, int64_t n, const float *x,
                        float *y);
void npuK_gelu_grad_f32(const npuK_pool *pool, int approximate, int64_t n, const float *dy,
                        const float *x, float *dx);
void npuK_gelu_grad_f64(const npuK_pool *pool, int approximate, int64_t n, const double *dy,
                        const double *x, double *dx);

#endif
