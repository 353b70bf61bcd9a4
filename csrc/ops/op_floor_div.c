/* op_floor_div.c — floor_div: floor(x / y) elementwise with NumPy broadcasting (TensorFlow
   FloorDiv).  Floats: floor of the IEEE quotient; ints round toward -inf, and a zero divisor
   fails the run as in TensorFlow ("Integer division by zero", ops/family.c).  Gray list. */
#include "ops/ops.h"

NPUX_BINARY_OP(floor_div, "FloorDiv", NPUK_BIN_FLOOR_DIV, NPUX_PREC_GRAY)
