/* op_div.c — div: x / y elementwise with NumPy broadcasting (TensorFlow RealDiv).  No
   attributes.  f32, f64, i32, i64 (integers truncate toward zero; an integer divisor holding a
   zero fails the run, NPU_ERR_ARG "Integer division by zero" naming the node, as TensorFlow
   does: ops/family.c).  Gray list: one rounding per element, so it follows its upstream.
   Gradient (TensorFlow's _RealDivGrad): dx = dy / y, dy' = dy * ((-x / y) / y), each summed
   over the axes it was broadcast along. */
#include "ops/grad.h"

static npu_status grad(npuX_grad *gc) {
  int x = gc->x[0], y = gc->x[1], d = gc->dy[0];
  gc->dx[0] = npuX_greduce_to(gc, npuX_g2(gc, "div", d, y), x);
  int q = npuX_g2(gc, "div", npuX_g2(gc, "div", npuX_g1(gc, "neg", x), y), y);
  gc->dx[1] = npuX_greduce_to(gc, npuX_g2(gc, "mul", d, q), y);
  return gc->status;
}

NPUX_BINARY_OP_G(div, "RealDiv", NPUK_BIN_DIV, NPUX_PREC_GRAY, grad)
