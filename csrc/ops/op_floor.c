/* op_floor.c — floor: the largest integer value not above x, elementwise (TensorFlow Floor);
   NaN and infinities pass through.  f32, f64.  Gray list: exact in any float format.
   No gradient (zero almost everywhere, as TensorFlow's). */
#include "ops/opmath.h"

NPUX_MATH_OP(floor, "Floor", NPUK_MATH_FLOOR, NPUX_PREC_GRAY, npuX_unary_infer_float)
