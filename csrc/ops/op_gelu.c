/*
 * op_gelu.c — gelu: x * Phi(x), Phi the standard normal CDF (tf.nn.gelu).  Attribute
 * approximate (bool, default false, as tf.nn.gelu): false is the exact form
 * 0.5 x (1 + erf(x / sqrt 2)), true the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * f32, f64; gelu(-inf) = -0 and gelu(inf) = inf (the limits).
 *
 * TensorFlow 1.15 has no Gelu op (tf.nn.gelu, from 2.4, is a composite of Erf or Tanh), so
 * a TF graph never holds one; "Gelu" is the name the graph builder gives the node, as in
 * TFLite and Ascend IR, and GraphDef import/export read and write it under that name.
 *
 * Two implementations (kernels/kfast.h): high_precision computes in double and rounds once;
 * high_performance (implementation modes, compile/implmode.c) runs the vectorised float32
 * twin.  float64 has only the first.
 * Gray list: smooth and bounded by |x|, so it follows its upstream.
 * Gradient: gelu_grad(dy, x) with the same approximate.
 */
#include "ops/grad.h"

typedef struct gelu_params {
  bool approximate;
} gelu_params;
_Static_assert(sizeof(gelu_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  gelu_params *p = params;
  return npuX_attr_bool(ic, "approximate", &p->approximate);
}

static npu_status run(const npuX_call *c) {
  const gelu_params *p = c->params;
  const npu_tensor *x = c->in[0];
  npu_tensor *y = c->out[0];
  if (x->dtype == NPU_DTYPE_F64)
    npuK_gelu_f64(c->pool, p->approximate, x->numel, x->data, y->data);
  else if (c->impl)
    npuK_gelu_f32_fast(c->pool, p->approximate, x->numel, x->data, y->data);
  else
    npuK_gelu_f32(c->pool, p->approximate, x->numel, x->data, y->data);
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  const gelu_params *p = (const gelu_params *)gc->params.bytes;
  npu_attr a = npuX_abool("approximate", p->approximate);
  int in[2] = {gc->dy[0], gc->x[0]};
  gc->dx[0] = npuX_gadd(gc, "gelu_grad", 2, in, 1, &a);
  return gc->status;
}

const npu_op_def npuX_op_gelu = {
    .name = "gelu", .tf_type = "Gelu", .args = "approximate", .min_inputs = 1, .max_inputs = 1,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = npuX_unary_infer_float,
    .run = run, .grad = grad};
