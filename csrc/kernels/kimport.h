/* kimport.h: the kernels of ops added for TensorFlow imports and ported TF 1.15 scripts
 * (npuK_): int32 matrix products, in_top_k, sparse_to_dense.  Declared apart from kernels.h
 * so this work adds files instead of editing the shared header.  The conventions of
 * kernels.h hold: pointers and shapes in, outputs preallocated, no allocation, no globals;
 * work split only over independent output rows (results never depend on the thread count);
 * sizes in ELEMENTS.  Each is a single implementation (device and reference path alike).
 */
#ifndef NPU_KERNELS_KIMPORT_H
#define NPU_KERNELS_KIMPORT_H

#include "kernels/kernels.h"

/* matmul_i32: c = op(a) op(b) in int32 with two's-complement wraparound (TensorFlow's int32
 * MatMul on the CPU: products and sums modulo 2^32).  a is (m, k), or (k, m) when trans_a;
 * b is (k, n), or (n, k) when trans_b; c is (m, n) row-major.  The plain triple loop, parallel
 * over rows of c.
 * batch_matmul_i32: the same per batch, with the batch geometry of npuK_batch_matmul_f32
 * (kmath.h): out[b] at b * m * n; a's and b's matrices at sum_i b_i * strides[i] MATRICES. */
void npuK_matmul_i32(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                     int64_t k, const int32_t *a, const int32_t *b, int32_t *c);
void npuK_batch_matmul_i32(const npuK_pool *pool, int trans_a, int trans_b, int batch_ndim,
                           const int64_t *batch_dims, const int64_t *a_strides,
                           const int64_t *b_strides, int64_t m, int64_t n, int64_t k,
                           const int32_t *a, const int32_t *b, int32_t *out);

/* in_top_k: pred is (rows, cols) float32; targets (rows) int32 (targets_i64 = 0) or int64;
 * out[r] = 1 when targets[r] is in [0, cols), pred[r, t] is finite and fewer than k entries of
 * row r are strictly greater than pred[r, t] (ties all count as in, as TensorFlow's InTopK);
 * else 0.  k <= 0 gives 0 everywhere. */
void npuK_in_top_k_f32(const npuK_pool *pool, int64_t rows, int64_t cols, int64_t k,
                       const float *pred, const void *targets, int targets_i64, uint8_t *out);

/* sparse_to_dense: y (dims[0..ndim), elem_size bytes an element) = default_value (one
 * element) everywhere, then y[indices[i]] = values[i * values_step] for i < n (values_step 0:
 * one scalar for all).  indices is (n, ndim) row-major (ndim 0: y is a scalar, each tuple empty), int32 (indices_i64 = 0) or int64.  Every index is checked before anything is
 * written: returns -1 when all are inside dims (and, with validate, in strictly increasing
 * row-major order: no repeats), else the first bad i with *why 1 (outside dims), 2 (repeated)
 * or 3 (out of order); y is untouched then. */
int64_t npuK_sparse_to_dense(size_t elem_size, int ndim, const int64_t *dims, int64_t n,
                             const void *indices, int indices_i64, const void *values,
                             int64_t values_step, const void *default_value, int validate,
                             void *y, int *why);

#endif
