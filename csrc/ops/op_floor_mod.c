/* op_floor_mod.c — floor_mod: x - floor(x / y) * y elementwise with NumPy broadcasting
   (TensorFlow FloorMod): the result has y's sign.  Ints: a zero divisor fails the run as in TensorFlow ("Integer division by
   zero", ops/family.c).
   Gray list. */
#include "ops/ops.h"

NPUX_BINARY_OP(floor_mod, "FloorMod", NPUK_BIN_FLOOR_MOD, NPUX_PREC_GRAY)
