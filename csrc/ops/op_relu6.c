/* op_relu6.c — relu6: min(max(x, 0), 6) elementwise (TensorFlow Relu6).  No attributes.
   f32, f64, i32, i64.  Gray list: exact (a clamp), follows its upstream.
   Gradient: relu6_grad(dy, y), as TensorFlow's: y > 0 and y < 6 exactly where x is,
   and reading y instead of x lets the fusion passes fold x into the step that makes y. */
#include "ops/grad.h"

static npu_status grad(npuX_grad *gc) {
  gc->dx[0] = npuX_g2(gc, "relu6_grad", gc->dy[0], gc->y[0]);
  return gc->status;
}

NPUX_UNARY_OP_G(relu6, "Relu6", NPUK_UN_RELU6, NPUX_PREC_GRAY, npuX_unary_infer_numeric, grad)
