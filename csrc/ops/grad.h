/*
 * grad.h — reverse-mode gradients as graph nodes.
 *
 * npu_graph_gradients (grad.c) walks the nodes between the xs and the ys in reverse id order
 * and calls each op's `.grad` with an npuX_grad: the node being differentiated, the value ids
 * of its inputs and outputs, the upstream gradient of each output (dy, -1 when no gradient
 * flows into that output) and an array dx to fill with the gradient of each input (preset to
 * -1: "no gradient", which is also right for integer inputs).  A grad function builds its
 * nodes with the helpers below; they latch the first failure in gc->status and then do
 * nothing (returning -1), so a grad function reads as straight-line code and returns
 * gc->status at the end.  Nodes are named "<scope>/<OpType>" with scope
 * "gradients/<node>_grad", as TensorFlow names them.
 *
 * Shapes are static (-1 unknown): where a gradient must undo NumPy broadcasting,
 * npuX_greduce_to sums over the axes where the input had size 1 (or was missing) and the
 * output did not; a -1 against a -1 is assumed equal.
 */
#ifndef NPU_GRAD_H
#define NPU_GRAD_H

#include "kernels/kgrad.h"
#include "ops/ops.h"

typedef struct npuX_grad {
  npu_graph *graph;
  int node;                  /* the node being differentiated */
  npuG_params params;        /* a copy of its params (the node array moves as nodes are added) */
  int n_inputs, n_outputs;
  const int *x;              /* its inputs' value ids */
  const int *y;              /* its outputs' value ids */
  const int *dy;             /* per output: the upstream gradient's value id, -1 = none */
  int *dx;                   /* per input, to fill: the gradient's value id, -1 = none */
  const bool *wanted;        /* per input: on a path to the xs (others' dx are ignored) */
  char scope[160];           /* "gradients/<node>_grad" */
  npu_status status;         /* the first failure; helpers do nothing once it is set */
} npuX_grad;

/* Adds op `op` with inputs `in` and attributes; returns its output 0's value id, or -1 (and
   gc->status set) on failure or when an input is -1. */
int npuX_gadd(npuX_grad *gc, const char *op, int n_in, const int *in, int n_attrs,
              const npu_attr *attrs);
/* One and two inputs, no attributes. */
int npuX_g1(npuX_grad *gc, const char *op, int a);
int npuX_g2(npuX_grad *gc, const char *op, int a, int b);
/* A scalar constant of dtype. */
int npuX_gconst(npuX_grad *gc, double v, npu_dtype dtype);
/* d (the gradient of a broadcast result) summed back to the shape of value x. */
int npuX_greduce_to(npuX_grad *gc, int d, int x);
/* The same with the mean over those axes (the gradient of a broadcast that divides). */
int npuX_greduce_mean_to(npuX_grad *gc, int d, int x);
/* d reshaped to the shape of value like (its static shape, or shape(like) at run time). */
int npuX_greshape_to(npuX_grad *gc, int d, int like);
/* d broadcast to the shape of value like; d is `like` reduced over `axes` (n_axes -1: every
   axis; dims dropped or kept as 1).  mean: divided by the number of elements reduced. */
int npuX_gbroadcast(npuX_grad *gc, int d, int like, int n_axes, const int64_t *axes, bool mean);
/* The sum of n values of one shape (add, or add_n when the op table has it). */
int npuX_gsum(npuX_grad *gc, int n, const int *v);
/* Sets gc->status (first failure only) with a message naming the node; returns it. */
npu_status npuX_gerror(npuX_grad *gc, npu_status st, const char *fmt, ...) NPU_PRINTF(3, 4);

/* The node's static descriptor of value v (a copy). */
npuG_value npuX_gvalue(const npuX_grad *gc, int v);
/* 1 when dtype is a float dtype (the ones gradients flow through). */
bool npuX_is_float(npu_dtype t);

/* Attribute constructors for npuX_gadd. */
static inline npu_attr npuX_aint(const char *name, int64_t v) {
  return (npu_attr){.name = name, .type = NPU_ATTR_INT, .u.i = v};
}
static inline npu_attr npuX_abool(const char *name, bool v) {
  return (npu_attr){.name = name, .type = NPU_ATTR_BOOL, .u.i = v};
}
static inline npu_attr npuX_afloat(const char *name, double v) {
  return (npu_attr){.name = name, .type = NPU_ATTR_FLOAT, .u.f = v};
}
static inline npu_attr npuX_astr(const char *name, const char *v) {
  return (npu_attr){.name = name, .type = NPU_ATTR_STRING, .u.s = v};
}
static inline npu_attr npuX_adtype(const char *name, npu_dtype v) {
  return (npu_attr){.name = name, .type = NPU_ATTR_DTYPE, .u.i = v};
}
static inline npu_attr npuX_aints(const char *name, const int64_t *v, int n) {
  return (npu_attr){.name = name, .type = NPU_ATTR_INTS, .u.ints = {v, n}};
}

/* The reshape family (reshape, expand_dims, squeeze; ops/family.c): run copies x's bytes to
   y (skipped when memory planning aliased them: src == dst); grad reshapes dy back to x's shape. */
npu_status npuX_copy_run(const npuX_call *c);
npu_status npuX_reshape_grad(npuX_grad *gc);

/* split, split_v (ops/grad.c): scratch for the kernel's sizes and output pointers; the
   gradient: dx[dx_input] = concat of the dy (zeros where absent) along the attribute axis
   (NPU_ERR_UNSUPPORTED when the axis is an input: axis_is_input). */
size_t npuX_split_scratch_size(const npuX_call *c);
npu_status npuX_split_grad(npuX_grad *gc, bool axis_is_input, int64_t axis, int dx_input);

/* ---- shared pieces of the gradient ops (grad.c) ---- */

/* Two same-shape float inputs (a, b) -> output of that shape and dtype: the activation
   gradients and the softmax gradients (relu_grad, sigmoid_grad, softmax_grad, ...). */
npu_status npuX_pair_infer(npuX_infer *ic, const void *params);
/* The same for the row-wise gradients (softmax_grad, log_softmax_grad): rank >= 1 too. */
npu_status npuX_rows2_infer(npuX_infer *ic, const void *params);
/* run of the activation gradients: out = op(in0, in1) elementwise. */
npu_status npuX_act_grad_run(const npuX_call *c, npuK_act_grad op);
/* run of the row-wise gradients: in0, in1 and out viewed as (rows, last dim). */
typedef void (*npuX_rows2_f32)(const npuK_pool *, int64_t rows, int64_t cols, const float *a,
                               const float *b, float *y);
typedef void (*npuX_rows2_f64)(const npuK_pool *, int64_t rows, int64_t cols, const double *a,
                               const double *b, double *y);
npu_status npuX_rows2_run(const npuX_call *c, npuX_rows2_f32 f32, npuX_rows2_f64 f64);
/* The window attributes of p (ksize for pools, strides, dilations for convolutions, padding,
   explicit_paddings) as attributes for npuX_gadd; buf holds their lists (16 entries).
   Returns the count written to attrs (at most 5). */
int npuX_window_attrs(const npuX_window_params *p, bool pool, npu_attr *attrs, int64_t *buf);

/* Params of the window gradient ops: the window, then the sizes of the tensor they produce
   (input_sizes / filter_sizes attribute; input_sizes[0] may be -1: the batch of dy). */
typedef struct npuX_window_grad_params {
  npuX_window_params win;
  int64_t sizes[4];
} npuX_window_grad_params;
/* parse of those ops: the convolution's attributes and the 4 sizes of attribute `sizes`. */
npu_status npuX_window_grad_parse(npuX_infer *ic, npuX_window_grad_params *p, bool pool,
                                  const char *sizes);
/* infer of those ops: x (or the input sizes) gives in_hw, the window k; dy (rank 4, checked)
   must have the output size the window gives; -1 anywhere skips that comparison. */
npu_status npuX_window_grad_check(npuX_infer *ic, const npuX_window_params *p,
                                  const int64_t in_hw[2], const int64_t k[2], int dy_input);
/* The geometry for an input of shape (n, sizes[1..3]) and a k_h x k_w window, NPU_ERR_SHAPE
   naming the node when it does not fit. */
npu_status npuX_window_grad_geometry(const npuX_call *c, int64_t n, const int64_t sizes[4],
                                     int64_t k_h, int64_t k_w, npuK_window2d *w);
/* infer of a pool's gradient (avg_pool_grad, max_pool_grad): x is input 0, dy input dy_input;
   the output has x's shape. */
npu_status npuX_pool_grad_infer(npuX_infer *ic, const void *params, int dy_input);
/* infer of a convolution's filter gradient (x, dy) -> filter_sizes; dy has sizes[3] channels,
   or sizes[2] * sizes[3] when depthwise. */
npu_status npuX_filter_grad_infer(npuX_infer *ic, const void *params, bool depthwise);

/* The gradients of a convolution (conv2d, depthwise_conv2d): input_op(filter, dy) with
   input_sizes and filter_op(x, dy) with filter_sizes, both with the forward's window
   attributes; the filter's shape and the input's (but the batch) must be known. */
npu_status npuX_conv_grad(npuX_grad *gc, const char *input_op, const char *filter_op);

/* ---- control flow (grad_control.c) ---- */

/* The values cond / while node `node` reads from around it, the inputs the walk gives it: its
   own inputs outside its regions and what its regions' nodes (any depth) read from outside
   them, each once.  *list is allocated (npuC_free), NULL when *n is 0. */
npu_status npuX_control_inputs(const npu_graph *g, int node, int **list, int *n);
/* The gradient of control node n: dy per output (-1 none); in, wanted: its
   npuX_control_inputs and which are on the path; din: per input, its gradient or -1. */
npu_status npuX_control_grad(npu_graph *g, int n, const int *dy, int n_in, const int *in,
                             const bool *wanted, int *din);
/* npu_graph_gradients restricted to the nodes of the current region (the xs are leaves:
   nothing flows past them into the nodes around it), every grad_ys[i] given; no argument
   checks and no undo on failure (the outer call undoes). */
npu_status npuX_gradients_in(npu_graph *g, int n_ys, const int *ys, const int *grad_ys, int n_xs,
                             const int *xs, int *dx);

/* Grad functions of the family ops (defined with the ops' families, used by their files). */
npu_status npuX_reduce_sum_grad(struct npuX_grad *gc);
npu_status npuX_reduce_mean_grad(struct npuX_grad *gc);
npu_status npuX_reduce_max_grad(struct npuX_grad *gc);
npu_status npuX_softmax_grad(struct npuX_grad *gc);
npu_status npuX_log_softmax_grad(struct npuX_grad *gc);

#endif
