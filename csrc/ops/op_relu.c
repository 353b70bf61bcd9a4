/* op_relu.c — relu: max(x, 0) elementwise (TensorFlow Relu). Gray list.
   Gradient: relu_grad(dy, y), as TensorFlow's: y > 0 exactly where x is,
   and reading y instead of x lets the fusion passes fold x into the step that makes y. */
#include "ops/grad.h"

static npu_status grad(npuX_grad *gc) {
  gc->dx[0] = npuX_g2(gc, "relu_grad", gc->dy[0], gc->y[0]);
  return gc->status;
}

NPUX_UNARY_OP_G(relu, "Relu", NPUK_UN_RELU, NPUX_PREC_GRAY, npuX_unary_infer_numeric, grad)
