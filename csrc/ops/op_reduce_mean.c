/*
 * op_reduce_mean.c — reduce_mean: the mean of x over the given axes (TensorFlow Mean); integer
 * means truncate toward zero.  Attributes (also positional, npu.reduce_mean(x, axis,
 * keepdims)): axis (an int or a list of ints, negative counting from the end, no repeats;
 * absent: every axis; an empty list: none), keepdims (default false: reduced axes are dropped;
 * true: kept with size 1).  f32, f64, i32, i64.
 * Block list: a long accumulation that float16 rounds away and overflows, so it stays float32.
 * float32 accumulates in float64 and rounds once (docs/numerics.md): the device in lanes and
 * shape-fixed pieces (the same bits at any thread count), the reference one input at a time,
 * so the two agree to one float32 ulp; float64 and ints: ascending in the type, bitwise.
 * Gradient: dy broadcast back over the reduced axes, divided by the number of
 * elements reduced (broadcast_like with mean).
 */
#include "ops/grad.h"

NPUX_REDUCE_OP_G(reduce_mean, "Mean", NPUK_RED_MEAN, NPUX_PREC_BLOCK, npuX_reduce_mean_grad)
