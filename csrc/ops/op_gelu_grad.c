/* op_gelu_grad.c — gelu_grad(dy, x): dy * d gelu(x) / dx elementwise (the gradient gelu's
   gradient adds; "GeluGrad", like Gelu not a TensorFlow 1.15 op).  Attribute approximate
   (bool, default false) as gelu's: exact Phi(x) + x phi(x), or the tanh form's derivative
   (kernels/kfast.h).  Two inputs of one shape and dtype, f32 or f64; one implementation
   (computed in double).  Gray list, as the other activation gradients. */
#include "ops/grad.h"

typedef struct gelu_grad_params {
  bool approximate;
} gelu_grad_params;
_Static_assert(sizeof(gelu_grad_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  gelu_grad_params *p = params;
  return npuX_attr_bool(ic, "approximate", &p->approximate);
}

static npu_status run(const npuX_call *c) {
  const gelu_grad_params *p = c->params;
  const npu_tensor *dy = c->in[0], *x = c->in[1];
  npu_tensor *dx = c->out[0];
  if (x->dtype == NPU_DTYPE_F64)
    npuK_gelu_grad_f64(c->pool, p->approximate, x->numel, dy->data, x->data, dx->data);
  else
    npuK_gelu_grad_f32(c->pool, p->approximate, x->numel, dy->data, x->data, dx->data);
  return NPU_OK;
}

const npu_op_def npuX_op_gelu_grad = {
    .name = "gelu_grad", .tf_type = "GeluGrad", .min_inputs = 2, .max_inputs = 2,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = npuX_pair_infer,
    .run = run};
