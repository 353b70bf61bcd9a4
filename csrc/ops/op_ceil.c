/* op_ceil.c — ceil: the smallest integer value not below x, elementwise (TensorFlow Ceil);
   NaN and infinities pass through, -0.5 gives -0.  f32, f64.  Gray list: exact in any float
   format.  No gradient (zero almost everywhere, as TensorFlow's). */
#include "ops/opmath.h"

NPUX_MATH_OP(ceil, "Ceil", NPUK_MATH_CEIL, NPUX_PREC_GRAY, npuX_unary_infer_float)
