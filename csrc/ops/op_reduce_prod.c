/*
 * op_reduce_prod.c — reduce_prod: the product of x over the given axes (TensorFlow Prod; the
 * axes are its reduction_indices const input).  Attributes as reduce_sum's (also positional).
 * f32, f64, i32, i64 (ints wrap); an empty reduction gives 1.  Products are accumulated in
 * ascending input order, float32 in float64 (rounded once).  Block list: products overflow
 * float16.
 */
#include "ops/ops.h"

NPUX_REDUCE_OP(reduce_prod, "Prod", NPUK_RED_PROD, NPUX_PREC_BLOCK)
