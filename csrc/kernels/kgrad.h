/* kgrad.h: the kernels of gradients and training (npuK_, declared apart from kernels.h so
 * the training work adds files instead of editing the shared header).  The conventions of
 * kernels.h hold: pointers and shapes in, outputs preallocated, no allocation, work split only
 * over independent outputs (results never depend on the thread count); every kernel here is
 * a single implementation (device and reference path alike) unless a _ref twin is declared.
 */
#ifndef NPU_KERNELS_KGRAD_H
#define NPU_KERNELS_KGRAD_H

#include "kernels/kernels.h"

/* ---------------------------------------------------------------- activation grads (grad.c)
 * out[i] = f(a[i], b[i]) for i < n; a, b, out dense; out may alias a or b.
 *   RELU    a = dy, b = x:  x > 0 ? dy : 0            (TF ReluGrad(gradients, features))
 *   RELU6   a = dy, b = x:  0 < x < 6 ? dy : 0        (TF Relu6Grad)
 *   SIGMOID a = y,  b = dy: dy * y * (1 - y)          (TF SigmoidGrad(y, dy))
 *   TANH    a = y,  b = dy: dy * (1 - y * y)          (TF TanhGrad(y, dy))
 *   SQRT    a = y,  b = dy: dy * 0.5 / y              (TF SqrtGrad(y, dy)) */
typedef enum {
  NPUK_AG_RELU, NPUK_AG_RELU6, NPUK_AG_SIGMOID, NPUK_AG_TANH, NPUK_AG_SQRT, NPUK_AG_COUNT
} npuK_act_grad;
void npuK_act_grad_f32(const npuK_pool *pool, npuK_act_grad op, int64_t n, const float *a,
                       const float *b, float *out);
void npuK_act_grad_f64(const npuK_pool *pool, npuK_act_grad op, int64_t n, const double *a,
                       const double *b, double *out);

/* softmax / log_softmax gradients over the last axis: y (the forward output), dy, dx are
 * (rows, cols).  softmax: dx = (dy - sum(dy * y)) * y; log_softmax: dx = dy - exp(y) * sum(dy);
 * sums per row in ascending column order in float64, rounded once.  dx may alias dy. */
void npuK_softmax_grad_f32(const npuK_pool *pool, int64_t rows, int64_t cols, const float *y,
                           const float *dy, float *dx);
void npuK_softmax_grad_f64(const npuK_pool *pool, int64_t rows, int64_t cols, const double *y,
                           const double *dy, double *dx);
void npuK_log_softmax_grad_f32(const npuK_pool *pool, int64_t rows, int64_t cols, const float *y,
                               const float *dy, float *dx);
void npuK_log_softmax_grad_f64(const npuK_pool *pool, int64_t rows, int64_t cols,
                               const double *y, const double *dy, double *dx);

/* bias_add's bias gradient: dy is (rows, cols), db (cols) = the sum over rows, accumulated in
 * ascending row order in float64 and rounded once (parallel over column blocks). */
void npuK_bias_add_grad_f32(const npuK_pool *pool, int64_t rows, int64_t cols, const float *dy,
                            float *db);
void npuK_bias_add_grad_f64(const npuK_pool *pool, int64_t rows, int64_t cols, const double *dy,
                            double *db);

/* relu_grad then bias_add_grad of its output in one pass: dy, x, g are (rows, cols);
 * g = x > 0 ? dy : +0 (npuK_act_grad's RELU) and db (cols) = the column sums of g, accumulated
 * as npuK_bias_add_grad does (ascending rows, float64, rounded once, the same column split):
 * the bits of the two kernels.  g may be dy or x (each element is read before it is written). */
void npuK_relu_grad_bias_grad_f32(const npuK_pool *pool, int64_t rows, int64_t cols,
                                  const float *dy, const float *x, float *g, float *db);

/* A cross-entropy loss's gradient in one row pass: z, d (rows, cols); dy = a * b elementwise
 * (a, b: (rows, cols), or one element where a_one / b_one), y = log_softmax(z), d =
 * log_softmax_grad(y, dy), each as its own kernel computes it (y and dy never stored): the bits
 * of the three kernels, log_softmax's being npuK_log_softmax_f32 or, where fast, its
 * high_performance twin npuK_log_softmax_f32_fast (kfast.h); with db (cols), also
 * npuK_bias_add_grad(d) after.  d may be z, a or b (each element is read before it is
 * written). */
void npuK_log_softmax_xent_grad_f32(const npuK_pool *pool, int fast, int64_t rows, int64_t cols,
                                    const float *z, const float *a, int a_one, const float *b,
                                    int b_one, float *d, float *db);

/* y[i] = x[i] * s for i < n; in-place allowed. */
void npuK_scale_f32(const npuK_pool *pool, int64_t n, double s, const float *x, float *y);
void npuK_scale_f64(const npuK_pool *pool, int64_t n, double s, const double *x, double *y);

/* ---------------------------------------------------------------- windows (window_grad.c)
 * The window geometry of kernels.h (npuK_window2d): x is (n, in_h, in_w, c), outputs
 * (n, out_h, out_w, ...).  Gradients scatter back to input positions, so the work is split
 * only where no two items write one element, and each element accumulates its terms in a
 * fixed order (ascending output position, then window position): results never depend on
 * the thread count.
 * max_pool_grad: dx (x's shape) = each dy added at the first maximum of its window (row-major
 *   window order; padding never wins; a NaN counts as the maximum, as the forward propagates
 *   it).  Items: (n, 64 channels), 8 channels at a time in registers.
 * avg_pool_grad: dx = each dy divided by its window's count of non-padded positions, added at
 *   each of them (TF's AvgPoolGrad).  Items: (n, channel) pairs.
 * conv2d_backprop_filter: filter (k_h, k_w, c, out_c); df[kh, kw, ci, co] = the sum over
 *   (n, oh, ow) of x[n, ih, iw, ci] * dy[n, oh, ow, co].  The sums run in float32 over
 *   blocks of 64 positions and in float64 across blocks, in scratch of
 *   npuK_filter_grad_f32_scratch_size bytes (NULL scratch: float32 throughout).  _ref: direct
 *   loops, items (kh, kw) pairs; the fast kernel (conv_bwd.c: register tiles, items (kh, kw,
 *   16 input channels)) gives its bits at any thread count.
 * conv2d_backprop_input: dx[n, ih, iw, ci] = the sum over (oh, ow, kh, kw, co) of
 *   dy[n, oh, ow, co] * filter[kh, kw, ci, co].  Items: the batch.
 * depthwise_conv2d_backprop_input: filter (k_h, k_w, c, m), dy (n, out_h, out_w, c * m);
 *   dx[n, ih, iw, ci] = the sum over (oh, ow, kh, kw, j) of dy[.., ci * m + j] * f[kh, kw, ci, j].
 *   Items: the batch.
 * depthwise_conv2d_backprop_filter: df[kh, kw, ci, j] = the sum over (n, oh, ow) of
 *   x[n, ih, iw, ci] * dy[n, oh, ow, ci * m + j].  Items: (kh, kw) pairs.  Sums and scratch
 *   as conv2d_backprop_filter's (out_c = m). */
void npuK_max_pool_grad_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x,
                            const float *dy, float *dx);
/* max_pool_grad then relu_grad(that, relu) in one pass (relu: x's shape; NULL: no relu):
   dx = relu > 0 ? max_pool_grad : +0, the bits of the two ops. */
void npuK_max_pool_grad_relu_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x,
                                 const float *dy, const float *relu, float *dx);
/* The same, and db (c) = dx summed over (n, h, w) as bias_add_grad's gradient: each image's
   sum of an item's channels is taken in float64 (pixels ascending) once its dx is done, into
   scratch (n * c doubles), and the images' sums added in ascending order, rounded once.  The
   grouping by image differs from bias_add_grad's one running sum, so db may differ from it
   in the last bit (both are float64 sums of float32 terms rounded once: within
   0.5 ulp(db) + n h w 2^-52 sum|dx| of the exact sum); at any thread count the same bits. */
void npuK_max_pool_grad_relu_bias_f32(const npuK_pool *pool, const npuK_window2d *w,
                                      const float *x, const float *dy, const float *relu,
                                      float *dx, float *db, double *scratch);
/* The same on operands stored float32, float16 or bfloat16, each its own dtype (the fused
   step's, read as stored under a reduced precision mode): loaded widened exactly, dx narrowed
   as it is stored (half.h's round to nearest even: the bits of widened copies, the float32
   kernel and the executor's narrowing), db summed from dx as stored.  Overlapping windows
   with dx reduced add into a float32 copy of dx in scratch, narrowed once.  scratch:
   npuK_max_pool_grad_relu_bias_scratch bytes (the float64 image sums first, with db). */
size_t npuK_max_pool_grad_relu_bias_scratch(const npuK_window2d *w, npuK_dtype dx_dtype,
                                            int db);
void npuK_max_pool_grad_relu_bias(const npuK_pool *pool, const npuK_window2d *w,
                                  npuK_dtype x_dtype, const void *x, npuK_dtype dy_dtype,
                                  const void *dy, npuK_dtype relu_dtype, const void *relu,
                                  npuK_dtype dx_dtype, void *dx, float *db, void *scratch);
void npuK_avg_pool_grad_f32(const npuK_pool *pool, const npuK_window2d *w, const float *dy,
                            float *dx);
size_t npuK_filter_grad_f32_scratch_size(const npuK_window2d *w, int64_t out_c);
void npuK_conv2d_backprop_filter_f32_ref(const npuK_pool *pool, const npuK_window2d *w,
                                         int64_t out_c, const float *x, const float *dy,
                                         float *df, double *scratch);
void npuK_conv2d_backprop_filter_f32(const npuK_pool *pool, const npuK_window2d *w,
                                     int64_t out_c, const float *x, const float *dy, float *df,
                                     double *scratch);
/* The same with the register tiles chosen (tests): level 1 the AVX2 ones, 2 AVX-512 where the
   CPU has it (what npuK_conv2d_backprop_filter_f32 runs); the same bits. */
void npuK_conv2d_backprop_filter_f32_level(const npuK_pool *pool, const npuK_window2d *w,
                                           int64_t out_c, const float *x, const float *dy,
                                           float *df, double *scratch, int level);
/* conv2d_backprop_filter on x and dy stored as bfloat16 (conv_bwd_bf16.c), by AVX512_BF16's
 * VDPBF16PS over pairs of pixels: run it only where npuK_bf16dot() is 1.  df float32 or
 * bfloat16 (df_dtype NPUK_F32 or NPUK_BF16: the float32 result rounded once more).  Each
 * element: float32 sums over blocks of 128 pixels (exact products, subnormal inputs and
 * results flushed to zero), float64 across blocks, rounded once:
 * |df - exact| <= 129 2^-24 sum|x dy| + 2 n out_h out_w 2^-126; the same bits at any thread
 * count.  Padding is a zero operand: an infinite dy makes NaN in the taps that read padding
 * at its pixel.  scratch: npuK_conv2d_backprop_filter_bf16_scratch_size bytes (float64
 * accumulators, dy's interleaved pairs). */
size_t npuK_conv2d_backprop_filter_bf16_scratch_size(const npuK_window2d *w, int64_t out_c);
void npuK_conv2d_backprop_filter_bf16(const npuK_pool *pool, const npuK_window2d *w,
                                      int64_t out_c, const uint16_t *x, const uint16_t *dy,
                                      void *df, npuK_dtype df_dtype, void *scratch);
/* The same with the path chosen (tests): level 0 the portable scalar loops (the same pairs,
   blocks and order; they need no AVX512_BF16), 1 VDPBF16PS where npuK_bf16dot(). */
void npuK_conv2d_backprop_filter_bf16_level(const npuK_pool *pool, const npuK_window2d *w,
                                            int64_t out_c, const uint16_t *x,
                                            const uint16_t *dy, void *df, npuK_dtype df_dtype,
                                            void *scratch, int level);
/* conv2d_backprop_input on dy and the filter stored as bfloat16 (conv_bwd_bf16.c), by
 * VDPBF16PS over pairs of output channels: run it only where npuK_bf16dot() is 1.  Any
 * stride, dilation and padding; dx float32 or reduced (dx_dtype).  Each element is one float32
 * chain over (kh, kw, channel pairs): |dx - exact| <= k_h k_w out_c 2^-24 sum|dy f| +
 * 2 k_h k_w out_c 2^-126 (subnormals flushed); the same bits at any thread count.  scratch:
 * npuK_conv2d_backprop_input_bf16_scratch_size bytes (the filter interleaved). */
size_t npuK_conv2d_backprop_input_bf16_scratch_size(const npuK_window2d *w, int64_t out_c);
void npuK_conv2d_backprop_input_bf16(const npuK_pool *pool, const npuK_window2d *w,
                                     int64_t out_c, const uint16_t *dy, const uint16_t *filter,
                                     void *dx, npuK_dtype dx_dtype, void *scratch);
/* The same with the path chosen (tests): level 0 portable loops of the same order, 1 native. */
void npuK_conv2d_backprop_input_bf16_level(const npuK_pool *pool, const npuK_window2d *w,
                                           int64_t out_c, const uint16_t *dy,
                                           const uint16_t *filter, void *dx,
                                           npuK_dtype dx_dtype, void *scratch, int level);
void npuK_conv2d_backprop_input_f32(const npuK_pool *pool, const npuK_window2d *w,
                                    int64_t out_c, const float *dy, const float *filter,
                                    float *dx);
void npuK_depthwise_conv2d_backprop_input_f32(const npuK_pool *pool, const npuK_window2d *w,
                                              int64_t multiplier, const float *dy,
                                              const float *filter, float *dx);
void npuK_depthwise_conv2d_backprop_filter_f32(const npuK_pool *pool, const npuK_window2d *w,
                                               int64_t multiplier, const float *x,
                                               const float *dy, float *df, double *scratch);

/* ---------------------------------------------------------------- training (train.c)
 * one_hot: indices (idx_dtype NPUK_I32, NPUK_I64 or NPUK_U8) viewed as (outer, inner); y is
 * (outer, depth, inner) elements of elem_size bytes: *on where the index equals the position
 * along depth, else *off (an index outside [0, depth) gives all off). */
void npuK_one_hot(const npuK_pool *pool, size_t elem_size, int64_t outer, int64_t depth,
                  int64_t inner, npuK_dtype idx_dtype, const void *indices, const void *on,
                  const void *off, void *y);

/* is_finite: y[i] = x[i] is neither infinite nor NaN (1/0 bytes); x f32 (is_finite_f32) or
 * f64.  reduce_all: x (bool bytes, nonzero = true) of dims[0..ndim), bit i of axes_mask set =
 * axis i reduced; out (the kept axes, row-major) = 1 where every reduced element is nonzero
 * (an empty reduction gives 1).  Serial. */
void npuK_is_finite_f32(const npuK_pool *pool, int64_t n, const float *x, uint8_t *y);
void npuK_is_finite_f64(const npuK_pool *pool, int64_t n, const double *x, uint8_t *y);
void npuK_reduce_all_bool(int ndim, const int64_t *dims, uint32_t axes_mask, const uint8_t *x,
                          uint8_t *out);

/* Gradient descent on a variable's storage: w[i] = w[i] - lr * d[i] for i < n, the product
 * rounded before the subtraction (the mul op then the sub op: their bits); d may be w. */
void npuK_sgd_update_f32(const npuK_pool *pool, int64_t n, float lr, const float *d, float *w);
/* The same with d stored as d_dtype (float32, float16 or bfloat16; d not w): each block of d
 * widened exactly on the stack, then npuK_sgd_update_f32's arithmetic, so the bits of a Cast to
 * float32 followed by mul and sub. */
void npuK_sgd_update_half(const npuK_pool *pool, int64_t n, float lr, const void *d,
                          npuK_dtype d_dtype, float *w);

/* ---------------------------------------------------------------- segments (segment.c)
 * unsorted_segment_sum (TensorFlow UnsortedSegmentSum; the gradient of gather): x is
 * (n_rows, inner), y (n_segments, inner) = zeros, then y[ids[r], :] += x[r, :] for r in
 * ascending order; ids int32 (id_size 4) or int64 (8); a negative id drops its row (as in
 * TensorFlow).  dtype: f32 or f64 (sums in that type).  Returns -1, or
 * the first r whose id is >= n_segments (y is then not to be used).  Parallel over column
 * blocks, each column summed over rows in ascending order: the bits never depend on the
 * thread count.  Single implementation. */
int64_t npuK_unsorted_segment_sum(const npuK_pool *pool, npuK_dtype dtype, int64_t n_rows,
                                  int64_t inner, int64_t n_segments, const void *ids,
                                  size_t id_size, const void *x, void *y);

#endif
