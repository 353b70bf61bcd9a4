/* kmath.h: the kernels of the math, comparison, selection, batched-product and image-resize
 * ops (npuK_), declared apart from kernels.h so this work adds files instead of editing the
 * shared header.  The conventions of kernels.h hold: pointers and shapes in, outputs
 * preallocated by the caller, no allocation, no globals; work is split only over independent
 * output elements (results never depend on the thread count); element counts and strides in
 * ELEMENTS.  Broadcast operands come as per-output-dim element strides (0 where broadcast),
 * as for npuK_binary_*.  A kernel with a `_ref` twin has an optimised version; the others are
 * single implementations (device and reference path alike).
 */
#ifndef NPU_KERNELS_KMATH_H
#define NPU_KERNELS_KMATH_H

#include "kernels/kernels.h"

/* ---------------------------------------------------------------- elementwise (math.c)
 * y[i] = OP(x[i]) for i < n; x, y dense; in-place allowed.  Returns 0, or -1 (nothing
 * written) when op is not defined for the dtype (integers: SIGN only).
 *   RSQRT       1 / sqrt(x)
 *   SIN, COS    sinf/cosf (sin/cos for f64)
 *   RECIPROCAL  1 / x (x = 0 gives inf, as TF)
 *   SIGN        -1, 0 or 1 (TF Sign: 0 for 0, -0 and NaN); ints alike
 *   FLOOR       floorf/floor
 *   CEIL        ceilf/ceil */
#define NPUK_MATHOP_LIST(X) X(RSQRT, rsqrt) X(SIN, sin) X(COS, cos) X(RECIPROCAL, reciprocal) \
  X(SIGN, sign) X(FLOOR, floor) X(CEIL, ceil)
typedef enum {
#define NPUK_X_(E, s) NPUK_MATH_##E,
  NPUK_MATHOP_LIST(NPUK_X_)
#undef NPUK_X_
  NPUK_MATH_COUNT
} npuK_mathop;

int npuK_math_f32(const npuK_pool *pool, npuK_mathop op, int64_t n, const float *x, float *y);
int npuK_math_f64(const npuK_pool *pool, npuK_mathop op, int64_t n, const double *x, double *y);
int npuK_math_i32(const npuK_pool *pool, npuK_mathop op, int64_t n, const int32_t *x, int32_t *y);
int npuK_math_i64(const npuK_pool *pool, npuK_mathop op, int64_t n, const int64_t *x, int64_t *y);

/* y[i] = !x[i] (bool bytes, nonzero = true; y is 0/1); in-place allowed. */
void npuK_logical_not_bool(const npuK_pool *pool, int64_t n, const uint8_t *x, uint8_t *y);

/* leaky_relu: y[i] = x[i] > 0 ? x[i] : alpha * x[i] (TF LeakyRelu; NaN gives NaN); in-place
 * allowed. */
void npuK_leaky_relu_f32(const npuK_pool *pool, int64_t n, float alpha, const float *x, float *y);
void npuK_leaky_relu_f64(const npuK_pool *pool, int64_t n, double alpha, const double *x,
                         double *y);

/* out = atan2(a, b) with broadcasting: out dense (dims[0..ndim)), a and b with element strides
 * per output dim (0 where broadcast; NULL allowed when ndim == 0). */
void npuK_atan2_f32(const npuK_pool *pool, int ndim, const int64_t *dims, const float *a,
                    const int64_t *a_strides, const float *b, const int64_t *b_strides,
                    float *out);
void npuK_atan2_f64(const npuK_pool *pool, int ndim, const int64_t *dims, const double *a,
                    const int64_t *a_strides, const double *b, const int64_t *b_strides,
                    double *out);

/* prelu: y = x > 0 ? x : alpha * x; x and y dense (dims), alpha read with alpha_strides per
 * dim (0 where broadcast).  In-place (y == x) allowed. */
void npuK_prelu_f32(const npuK_pool *pool, int ndim, const int64_t *dims, const float *x,
                    const float *alpha, const int64_t *alpha_strides, float *y);
void npuK_prelu_f64(const npuK_pool *pool, int ndim, const int64_t *dims, const double *x,
                    const double *alpha, const int64_t *alpha_strides, double *y);

/* select: out = cond ? x : y elementwise, elem_size bytes per element (any dtype); out dense
 * (dims), cond (bool bytes, nonzero = true), x and y read with their strides (0 where
 * broadcast).  TF1 Select's rank-1 condition is cond_strides {1, 0, 0, ...}. */
void npuK_select(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *dims,
                 const uint8_t *cond, const int64_t *cond_strides, const void *x,
                 const int64_t *x_strides, const void *y, const int64_t *y_strides, void *out);

/* reduce_any: x (bool bytes) of dims, bit i of axes_mask = axis i reduced; out (kept axes,
 * row-major) = 1 where some reduced element is nonzero (an empty reduction gives 0). */
void npuK_reduce_any_bool(const npuK_pool *pool, int ndim, const int64_t *dims,
                          uint32_t axes_mask, const uint8_t *x, uint8_t *out);

/* ---------------------------------------------------------------- batch_matmul (bmm.c)
 * out[b] = op(a[b']) op(c[b'']) for each batch index b of the dense batch shape
 * (batch_dims[0..batch_ndim)), out[b] is (m, n) row-major at b * m * n.  a's matrix for batch
 * b starts at sum_i b_i * a_strides[i] MATRICES (0 where a is broadcast along that dim), each
 * stored (m, k), or (k, m) when trans_a; likewise b (k, n), or (n, k) when trans_b.
 * Fast: one sgemm/dgemm (npuK_matmul_*_blas) per batch, or a single one with the batch folded
 * into the rows when b is shared by every batch and a is dense without trans_a.
 * _ref: npuK_matmul_*_ref per batch. */
void npuK_batch_matmul_f32(const npuK_pool *pool, int trans_a, int trans_b, int batch_ndim,
                           const int64_t *batch_dims, const int64_t *a_strides,
                           const int64_t *b_strides, int64_t m, int64_t n, int64_t k,
                           const float *a, const float *b, float *out);
void npuK_batch_matmul_f32_ref(const npuK_pool *pool, int trans_a, int trans_b, int batch_ndim,
                               const int64_t *batch_dims, const int64_t *a_strides,
                               const int64_t *b_strides, int64_t m, int64_t n, int64_t k,
                               const float *a, const float *b, float *out);
void npuK_batch_matmul_f64(const npuK_pool *pool, int trans_a, int trans_b, int batch_ndim,
                           const int64_t *batch_dims, const int64_t *a_strides,
                           const int64_t *b_strides, int64_t m, int64_t n, int64_t k,
                           const double *a, const double *b, double *out);
void npuK_batch_matmul_f64_ref(const npuK_pool *pool, int trans_a, int trans_b, int batch_ndim,
                               const int64_t *batch_dims, const int64_t *a_strides,
                               const int64_t *b_strides, int64_t m, int64_t n, int64_t k,
                               const double *a, const double *b, double *out);

/* ---------------------------------------------------------------- resize (resize.c)
 * x is NHWC (n, in_h, in_w, c), y is (n, out_h, out_w, c); TensorFlow's ResizeBilinear and
 * ResizeNearestNeighbor exactly (in float arithmetic):
 *   scale = align_corners && out > 1 ? (in - 1) / (float)(out - 1) : in / (float)out
 *   bilinear: src = half_pixel ? (i + 0.5f) * scale - 0.5f : i * scale; lo = max(floor(src), 0),
 *     hi = min(ceil(src), in - 1), lerp = src - floor(src); top = tl + (tr - tl) * x_lerp,
 *     bottom = bl + (br - bl) * x_lerp, y = top + (bottom - top) * y_lerp.
 *   nearest: src = half_pixel ? (i + 0.5f) * scale : i * scale; index = min(align_corners ?
 *     roundf(src) : floorf(src), in - 1), then max(index, 0) with half_pixel.
 * resize_bilinear fast: per-axis weights precomputed into scratch
 * (npuK_resize_bilinear_scratch_size bytes, 8-byte aligned), parallel over output rows;
 * _ref computes every weight per element.  Bitwise equal.
 * resize_nearest: dtype-agnostic (elem_size bytes), copies c-element pixels.  Single. */
size_t npuK_resize_bilinear_scratch_size(int64_t out_h, int64_t out_w);
void npuK_resize_bilinear_f32(const npuK_pool *pool, int64_t n, int64_t in_h, int64_t in_w,
                              int64_t c, int64_t out_h, int64_t out_w, int align_corners,
                              int half_pixel_centers, const float *x, float *y, void *scratch);
void npuK_resize_bilinear_f32_ref(const npuK_pool *pool, int64_t n, int64_t in_h, int64_t in_w,
                                  int64_t c, int64_t out_h, int64_t out_w, int align_corners,
                                  int half_pixel_centers, const float *x, float *y,
                                  void *scratch);
void npuK_resize_nearest(const npuK_pool *pool, size_t elem_size, int64_t n, int64_t in_h,
                         int64_t in_w, int64_t c, int64_t out_h, int64_t out_w,
                         int align_corners, int half_pixel_centers, const void *x, void *y);

/* ---------------------------------------------------------------- conv2d_backprop_input
 * (conv_bwd.c)  The geometry of kernels.h (npuK_window2d: x (n, in_h, in_w, c) is the
 * gradient dx here), filter HWIO (k_h, k_w, c, out_c), dy (n, out_h, out_w, out_c);
 * dx[n, ih, iw, ci] = the sum over the (oh, ow, kh, kw) reading (ih, iw) and co of
 * dy[n, oh, ow, co] * filter[kh, kw, ci, co].  Fast: stride 1, dilation 1, the forward
 * convolution of dy with the turned filter (conv_direct.c's kernel where c is a multiple of
 * 8, else conv.c's im2col + sgemm); otherwise sgemm of
 * blocks of output rows, then col2im parallel over input rows.  scratch:
 * npuK_conv2d_backprop_input_f32_scratch_size bytes, float-aligned; n_slots as conv2d's (the
 * bits do not depend on it nor on the pool).  Each element is a float32 sum of its
 * k_h k_w out_c terms, within 2 T 2^-24 sum|dy f| of the exact one.  Its reference twin is
 * the direct loop of kgrad.h, npuK_conv2d_backprop_input_f32 (not bitwise equal: sums in
 * another order). */
size_t npuK_conv2d_backprop_input_f32_scratch_size(const npuK_window2d *w, int64_t out_c,
                                                   int n_slots);
void npuK_conv2d_backprop_input_f32_gemm(const npuK_pool *pool, const npuK_window2d *w,
                                         int64_t out_c, const float *dy, const float *filter,
                                         float *dx, float *scratch, int n_slots);
/* The input gradient by Winograd F(2x2, 3x3) (op_select_implmode high_performance): 3x3,
 * stride 1, dilation 1, padding before at most 2, and something to compute (_fits), the
 * forward convolution of dy with the turned filter run by winograd.c (kernels.h,
 * npuK_conv2d_f32_winograd_ep): other bits than _gemm, each element within
 * gamma(out_c + 7) W of the exact one, W that algorithm on absolute values (docs/numerics.md,
 * "Winograd"); the same bits at any thread and slot count.  Where _fits says no, it writes
 * nothing: the caller takes _gemm. */
int npuK_conv2d_backprop_input_winograd_fits(const npuK_window2d *w, int64_t out_c);
size_t npuK_conv2d_backprop_input_f32_winograd_scratch_size(const npuK_window2d *w,
                                                            int64_t out_c, int n_slots);
void npuK_conv2d_backprop_input_f32_winograd(const npuK_pool *pool, const npuK_window2d *w,
                                             int64_t out_c, const float *dy, const float *filter,
                                             float *dx, float *scratch, int n_slots);

#endif
