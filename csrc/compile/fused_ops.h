/*
 * fused_ops.h — the ops of the steps fusion makes (compile/fusion.c, compile/fused_ops.c).
 *
 * They are compile-internal: not in ops.def, so a graph (or Lua, or an imported model) can
 * never name them.  A fused step's params are built by its pass in one allocation
 * (npuE_step.owned_params, freed with the plan) and need no destructor.  Every fused step
 * computes in float32: the passes fuse float32 values only.
 */
#ifndef NPU_FUSED_OPS_H
#define NPU_FUSED_OPS_H
#include "ops/ops.h"

/* fused_matmul: inputs a, b, bias (n) [, prelu slopes (n)]; y = op(a) op(b) + bias, then act. */
typedef struct npuP_fused_matmul {
  bool transpose_a, transpose_b;
  int bias_input;  /* 2 */
  int slope_input; /* act prelu: the input of its slopes, else -1 */
  npuK_act act;
  float alpha;
  bool act_fast;   /* act sigmoid / tanh by its high_performance kernel (the step it absorbed) */
} npuP_fused_matmul;

/* fused_apply_gradient_descent: an assign step (kind NPUX_KIND_ASSIGN with a kernel: the
   executor hands it the variable's own storage, made exclusive, as input 0 and output 0);
   inputs var (m, n), a, b, lr (one element); var = var - lr * (op(a) op(b)).  Under a mixed
   precision mode the precision pass gives a and b the dtypes the matmul would have and sets
   product_dtype to the dtype the matmul's output would be stored in (it reads `product`, the
   matmul's graph output, to decide): the product is rounded to it before the update, as the
   unfused plan's Cast back to float32 reads it.  product_dtype is NPU_DTYPE_F32 otherwise. */
typedef struct npuP_fused_sgd {
  bool transpose_a, transpose_b;
  int product;              /* value id of the matmul's output (gone from the plan) */
  npu_dtype product_dtype;  /* set by the precision pass */
} npuP_fused_sgd;

/* fused_conv2d / fused_depthwise_conv2d: inputs x, filter [, bias (channels)] [, prelu slopes
   (channels)].  Batch-norm folding gives the step a new filter and bias: plan constants made
   at compile time.  fused_conv2d with `pooled` (ConvMaxPoolFusionPass) writes the max_pool of
   the activation instead: y is the pool's output, `pool` the pool's window attributes over
   the convolution's output. */
typedef struct npuP_fused_conv {
  npuX_window_params window; /* first: npuX_window_call reads the params as this */
  int64_t k_h, k_w, c, out_c; /* filter dims; out_c: depthwise's multiplier */
  int bias_input;             /* 2, or -1 without a bias */
  int slope_input;            /* act prelu: the input of its slopes, else -1 */
  npuK_act act;
  float alpha;
  bool act_fast;              /* act sigmoid / tanh by its high_performance kernel */
  bool pooled;
  npuX_window_params pool;    /* pooled: max_pool's ksize, strides, padding */
} npuP_fused_conv;

/* The geometry of a conv2d step (conv2d or fused_conv2d; params, x and the filter as their
   descriptors) and, for a pooled fused_conv2d, of its pool over the convolution's output
   (*pooled set); -1 when a window does not fit. */
int npuP_conv_geometry(const npu_op_def *def, const void *params, const npuG_value *x,
                       const npuG_value *filter, npuK_window2d *w, npuK_window2d *pool,
                       bool *pooled);

/* fused_elementwise: inputs = the operands of the program; y has the shape of the chain. */
typedef struct npuP_fused_eltwise {
  int n_instr;
  npuK_ew_instr prog[]; /* n_instr */
} npuP_fused_eltwise;

extern const npu_op_def npuP_op_fused_matmul;
extern const npu_op_def npuP_op_fused_sgd;
extern const npu_op_def npuP_op_fused_conv2d;
extern const npu_op_def npuP_op_fused_depthwise_conv2d;
/* fused_max_pool_grad_relu_grad: inputs x, y, dy of max_pool_grad, then relu_grad's features
   (x's shape); params: max_pool_grad's npuX_window_params; y = relu_grad(max_pool_grad(x, y,
   dy), features), the bits of the two steps. */
extern const npu_op_def npuP_op_fused_max_pool_grad_relu;
/* fused_relu_grad_bias_add_grad: inputs relu_grad's dy and features (one shape, rank >= 2);
   outputs g = relu_grad(dy, features) and db = bias_add_grad(g), the bits of the two steps
   (kgrad.h: npuK_relu_grad_bias_grad_f32). */
extern const npu_op_def npuP_op_fused_relu_grad_bias_grad;
/* fused_gradient_descent_update: an assign step like fused_apply_gradient_descent; inputs var,
   grad (var's shape), lr (one element); var = var - lr * grad, the bits of mul then sub.  The
   gradient is read as stored (float32, or float16 / bfloat16 under a reduced mode: widened
   exactly, as the Cast the precision pass would insert). */
extern const npu_op_def npuP_op_fused_sgd_update;
/* fused_log_softmax_grad: inputs z, a, b; d = log_softmax_grad(log_softmax(z), a * b) (a cross-
   entropy loss's gradient), and with a second output bias_add_grad(d); a or b may be one
   element.  The bits of the steps it replaces (kgrad.h: npuK_log_softmax_xent_grad_f32). */
typedef struct npuP_fused_xent_grad {
  bool a_one, b_one;
} npuP_fused_xent_grad;
extern const npu_op_def npuP_op_fused_xent_grad;
/* The same program under two precision lists: gray when every op of the chain is gray (it
   follows its upstream), block when one of them is block-listed (exp, log, sqrt, pow ...). */
extern const npu_op_def npuP_op_fused_eltwise;
extern const npu_op_def npuP_op_fused_eltwise_block;

#endif
