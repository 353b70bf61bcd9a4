/*
 * op_reduce_sum.c — reduce_sum: the sum of x over the given axes (TensorFlow Sum).
 * Attributes (also positional, npu.reduce_sum(x, axis, keepdims)): axis (an int or a list of
 * ints, negative counting from the end, no repeats; absent: every axis; an empty list: none),
 * keepdims (default false: reduced axes are dropped; true: kept with size 1).  f32, f64, i32,
 * i64 (integer sums wrap).
 * Block list: a long accumulation that float16 rounds away and overflows, so it stays float32.
 * float32 accumulates in float64 and rounds once (docs/numerics.md): the device in lanes and
 * shape-fixed pieces (the same bits at any thread count), the reference one input at a time,
 * so the two agree to one float32 ulp; float64 and ints: ascending in the type, bitwise.
 * Gradient: dy broadcast back over the reduced axes (broadcast_like).
 */
#include "ops/grad.h"

NPUX_REDUCE_OP_G(reduce_sum, "Sum", NPUK_RED_SUM, NPUX_PREC_BLOCK, npuX_reduce_sum_grad)
