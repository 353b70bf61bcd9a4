/*
 * fused_ops.c — the op definitions of fused steps (fused_ops.h): how each runs its params on
 * the kernels of kernels.h ("fused steps").
 *
 * A step's node is the pattern's first node (the matmul, the convolution, the chain's first
 * op), so messages name it; the nodes folded in are listed in the step's `absorbed`.  Shapes
 * were inferred for the original nodes and the pass checked them, so run trusts them; only the
 * dtype is checked again, because a later pass (precision) could store a value in float16.
 */
#include "compile/fused_ops.h"
#include "kernels/kgrad.h"

/* Fused steps compute float32 only; a later pass must not hand them anything else, but x and
   y (input 0, output 0) of a step flagged NPUX_F_HALF_XY may be float16 / bfloat16 when
   half_xy is set (its kernel widens and narrows them by blocks). */
/* half_b: input 1 too (NPUX_F_HALF_B: matmul's B) */
static npu_status check_half_operands(const npuX_call *c, const char *op, bool half_xy,
                                      bool half_b) {
  for (int i = 0; i < c->n_inputs + c->n_outputs; i++) {
    const npu_tensor *t = i < c->n_inputs ? c->in[i] : c->out[i - c->n_inputs];
    if (half_xy && (i == 0 || i == c->n_inputs || (half_b && i == 1)) &&
        npuX_is_half(t->dtype))
      continue;
    if (t->dtype != NPU_DTYPE_F32)
      return npuC_error(c->ctx, NPU_ERR_UNSUPPORTED,
                        "%s '%s': a fused step computes float32, its %s %d is %s", op,
                        c->node->name, i < c->n_inputs ? "input" : "output",
                        i < c->n_inputs ? i : i - c->n_inputs, npu_dtype_name(t->dtype));
  }
  return NPU_OK;
}

static npu_status check_f32_xy(const npuX_call *c, const char *op, bool half_xy) {
  return check_half_operands(c, op, half_xy, false);
}

static npu_status check_f32(const npuX_call *c, const char *op) {
  return check_f32_xy(c, op, false);
}

/* ---- matmul + bias + activation ---- */

static size_t matmul_scratch(const npuX_call *c) {
  const npuP_fused_matmul *p = c->params;
  return npuX_matmul_scratch(c, p->transpose_a, p->transpose_b);
}

static npu_status matmul_impl(const npuX_call *c, bool reference) {
  const npuP_fused_matmul *p = c->params;
  npu_status st = check_half_operands(c, "fused_matmul", !reference, !reference);
  if (st) return st;
  const npu_tensor *a = c->in[0], *b = c->in[1];
  npu_tensor *y = c->out[0];
  int64_t m = y->shape[0], n = y->shape[1], k = a->shape[p->transpose_a ? 0 : 1];
  npuK_epilogue ep = {.bias = p->bias_input >= 0 ? c->in[p->bias_input]->data : NULL,
                      .act = p->act, .alpha = p->alpha,
                      .slope = p->slope_input >= 0 ? c->in[p->slope_input]->data : NULL,
                      .fast = p->act_fast && !reference};
  if (reference)
    npuK_matmul_f32_ref_ep(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data, b->data,
                           &ep, y->data);
  else if (c->prepared && npuK_gemm_f32_takes(c->algo, (npuK_dtype)a->dtype,
                                              (npuK_dtype)b->dtype, (npuK_dtype)y->dtype))
    /* a constant B packed once by the plan (plan.c): B itself is not read */
    npuK_gemm_f32_packed_level_ep(c->pool, p->transpose_a, m, n, k, a->data, c->prepared, &ep,
                                  y->data, c->n_threads, 1);
  else if (npuK_gemm_f32_takes(c->algo, (npuK_dtype)a->dtype, (npuK_dtype)b->dtype,
                               (npuK_dtype)y->dtype))
    /* B read in place (no scratch sized: c->scratch may be NULL) or packed into c->scratch */
    npuK_gemm_f32_ep(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data, b->data, &ep,
                     y->data, c->scratch, c->n_threads);
  else if (c->prepared &&
           npuK_gemm_bf16_takes(c->algo, (npuK_dtype)a->dtype, (npuK_dtype)b->dtype))
    /* a constant B packed once by the plan (plan.c): B itself is not read */
    npuK_gemm_bf16_packed_ep(c->pool, p->transpose_a, m, n, k, a->data, c->prepared, &ep,
                             y->data, (npuK_dtype)y->dtype, c->scratch, c->n_threads);
  else /* A, B and C as stored (NPUX_F_HALF_XY, _HALF_B) */
    npuK_matmul_half_b_algo_ep(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data,
                               (npuK_dtype)a->dtype, b->data, (npuK_dtype)b->dtype, &ep,
                               y->data, (npuK_dtype)y->dtype, c->scratch, c->n_threads, c->algo);
  return NPU_OK;
}

static npu_status matmul_run(const npuX_call *c) { return matmul_impl(c, false); }
static npu_status matmul_ref(const npuX_call *c) { return matmul_impl(c, true); }

const npu_op_def npuP_op_fused_matmul = {
    .name = "fused_matmul", .tf_type = "_FusedMatMul", .min_inputs = 3, .max_inputs = 4,
    .n_outputs = 1, .prec = NPUX_PREC_TRUST, .fused = true, .tune = NPUX_TUNE_GEMM,
    .flags = NPUX_F_NO_FOLD | NPUX_F_HALF_XY | NPUX_F_HALF_B | NPUX_F_PREPARED_FILTER,
    .scratch_size = matmul_scratch, .run = matmul_run, .run_ref = matmul_ref};

/* ---- gradient descent through the gradient's GEMM (ApplyGradientDescentFusionPass) ---- */

static size_t sgd_scratch(const npuX_call *c) {
  const npuP_fused_sgd *p = c->params;
  const npu_tensor *w = c->out[0], *a = c->in[1], *b = c->in[2];
  if (w->ndim != 2 || a->ndim != 2) return 0;
  int64_t m = w->shape[0], n = w->shape[1], k = a->shape[p->transpose_a ? 0 : 1];
  if (npuK_gemm_f32_takes(c->algo, (npuK_dtype)a->dtype, (npuK_dtype)b->dtype,
                          (npuK_dtype)p->product_dtype)) /* B's panels only: no product */
    return npuK_gemm_f32_scratch_size(p->transpose_b, m, n, k, c->n_threads);
  if (a->dtype == NPU_DTYPE_F32 && b->dtype == NPU_DTYPE_F32 && p->product_dtype == NPU_DTYPE_F32)
    return npuK_matmul_sgd_scratch_size(m, n, k, c->n_threads);
  return npuK_matmul_half_sgd_scratch_size(m, n, k, c->n_threads, (npuK_dtype)a->dtype,
                                           (npuK_dtype)b->dtype, (npuK_dtype)p->product_dtype,
                                           c->algo);
}

/* in: var (its storage, exclusive: exec.c), a, b, lr; out: var.  The pass checked shapes
   (0 < m, n, k <= INT_MAX) and float32 graph values; a and b may be stored reduced (the
   precision pass: npuP_fused_sgd), var and lr stay float32.  lr is read now, so a schedule's
   value counts. */
static npu_status sgd_run(const npuX_call *c) {
  const npuP_fused_sgd *p = c->params;
  const npu_tensor *a = c->in[1], *b = c->in[2], *lr = c->in[3];
  npu_tensor *w = c->out[0];
  if (c->in[0]->dtype != NPU_DTYPE_F32 || lr->dtype != NPU_DTYPE_F32 || w->dtype != NPU_DTYPE_F32 ||
      !(a->dtype == NPU_DTYPE_F32 || npuX_is_half(a->dtype)) ||
      !(b->dtype == NPU_DTYPE_F32 || npuX_is_half(b->dtype)))
    return npuC_error(c->ctx, NPU_ERR_UNSUPPORTED,
                      "fused_apply_gradient_descent '%s': the variable and lr must be float32 and "
                      "the GEMM's operands float32, float16 or bfloat16 (got %s, %s, %s, %s)",
                      c->node->name, npu_dtype_name(c->in[0]->dtype), npu_dtype_name(a->dtype),
                      npu_dtype_name(b->dtype), npu_dtype_name(lr->dtype));
  int64_t m = w->shape[0], n = w->shape[1], k = a->shape[p->transpose_a ? 0 : 1];
  float rate = *(const float *)lr->data;
  if (npuK_gemm_f32_takes(c->algo, (npuK_dtype)a->dtype, (npuK_dtype)b->dtype,
                          (npuK_dtype)p->product_dtype)) /* each tile updates w in registers */
    npuK_gemm_f32_sgd_level(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data, b->data,
                            rate, w->data, c->scratch, c->n_threads, 1);
  else if (a->dtype == NPU_DTYPE_F32 && b->dtype == NPU_DTYPE_F32 && p->product_dtype == NPU_DTYPE_F32)
    npuK_matmul_f32_sgd_algo(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data,
                             b->data, rate, w->data, c->scratch, c->n_threads, c->algo);
  else
    npuK_matmul_half_sgd(c->pool, p->transpose_a, p->transpose_b, m, n, k, a->data,
                         (npuK_dtype)a->dtype, b->data, (npuK_dtype)b->dtype,
                         (npuK_dtype)p->product_dtype, rate, w->data, c->scratch, c->n_threads,
                         c->algo);
  return NPU_OK;
}

const npu_op_def npuP_op_fused_sgd = {
    .name = "fused_apply_gradient_descent", .tf_type = "ApplyGradientDescent", .min_inputs = 4,
    .max_inputs = 4, .n_outputs = 1, .kind = NPUX_KIND_ASSIGN, .prec = NPUX_PREC_BLOCK,
    .flags = NPUX_F_NO_FOLD, .scratch_size = sgd_scratch, .run = sgd_run};

/* ---- convolution + bias + activation (a folded batch norm is a new filter and bias) ---- */

/* A window over (n, in_h, in_w, c) from window attributes: npuX_window_geometry's. */
static int window_of(const npuX_window_params *p, const int64_t shape[4], int64_t k_h,
                     int64_t k_w, npuK_window2d *w) {
  *w = (npuK_window2d){.n = shape[0], .in_h = shape[1], .in_w = shape[2], .c = shape[3],
                       .k_h = k_h, .k_w = k_w, .stride_h = p->stride[0],
                       .stride_w = p->stride[1], .dilation_h = p->dilation[0],
                       .dilation_w = p->dilation[1]};
  if (npuX_window_dim(p, 0, w->in_h, w->k_h, &w->out_h, &w->pad_top)) return -1;
  return npuX_window_dim(p, 1, w->in_w, w->k_w, &w->out_w, &w->pad_left);
}

static int geometry(const npu_op_def *def, const void *params, const int64_t x[4],
                    const int64_t f[4], npuK_window2d *w, npuK_window2d *pool, bool *pooled) {
  *pooled = false;
  if (def == &npuX_op_conv2d) return window_of(params, x, f[0], f[1], w);
  const npuP_fused_conv *p = params;
  if (window_of(&p->window, x, p->k_h, p->k_w, w)) return -1;
  if (!(*pooled = p->pooled)) return 0;
  int64_t y[4] = {w->n, w->out_h, w->out_w, p->out_c};
  return window_of(&p->pool, y, p->pool.ksize[0], p->pool.ksize[1], pool);
}

int npuP_conv_geometry(const npu_op_def *def, const void *params, const npuG_value *x,
                       const npuG_value *filter, npuK_window2d *w, npuK_window2d *pool,
                       bool *pooled) {
  *pooled = false;
  if (x->ndim != 4 || filter->ndim != 4) return -1;
  return geometry(def, params, x->shape, filter->shape, w, pool, pooled);
}

/* The kernel a (non-depthwise) fused_conv2d step runs: pooled or not, IM2COL, Winograd or
   DIRECT. */
static size_t conv_scratch(const npuX_call *c) {
  const npuP_fused_conv *p = c->params;
  npuK_window2d w, pw;
  bool pooled;
  if (geometry(&npuP_op_fused_conv2d, p, c->in[0]->shape, c->in[1]->shape, &w, &pw, &pooled))
    return 0;
  /* a prepared filter (NPUX_F_PREPARED_FILTER) needs no room for its per-call transform */
  if (c->algo == NPUK_CONV_WINOGRAD_2X3 && c->prepared)
    return npuK_conv2d_winograd_u_scratch_size(&w, p->out_c, pooled ? &pw : NULL, c->n_threads);
  if (c->algo == NPUK_CONV_WINOGRAD_2X3)
    return npuK_conv2d_winograd_scratch_size(&w, p->out_c, pooled ? &pw : NULL, c->n_threads);
  if (c->algo == NPUK_CONV_DIRECT_BF16 && c->prepared && c->in[0]->dtype == NPU_DTYPE_BF16)
    return npuK_conv2d_bf16_direct_packed_scratch_size(&w, p->out_c, pooled ? &pw : NULL,
                                                       c->n_threads,
                                                       (npuK_dtype)c->out[0]->dtype);
  if (c->algo == NPUK_CONV_DIRECT_BF16 && c->in[1]->dtype == NPU_DTYPE_BF16 &&
      c->in[0]->dtype == NPU_DTYPE_BF16) /* a variable's filter read as stored (plan.c) */
    return npuK_conv2d_bf16_direct_stored_scratch_size(&w, p->out_c, pooled ? &pw : NULL,
                                                       c->n_threads,
                                                       (npuK_dtype)c->out[0]->dtype);
  if (c->algo == NPUK_CONV_DIRECT_BF16)
    return npuK_conv2d_bf16_direct_scratch_size(&w, p->out_c, pooled ? &pw : NULL, c->n_threads,
                                                (npuK_dtype)c->out[0]->dtype);
  if (c->algo == NPUK_CONV_DIRECT)
    return npuK_conv2d_direct_half_scratch_size(&w, p->out_c, pooled ? &pw : NULL, c->n_threads,
                                                (npuK_dtype)c->in[0]->dtype,
                                                (npuK_dtype)c->out[0]->dtype);
  if (pooled) return npuK_conv2d_pool_scratch_size(&w, p->out_c, &pw, c->n_threads);
  return npuK_conv2d_half_scratch_size(&w, p->out_c, c->n_threads, (npuK_dtype)c->in[0]->dtype,
                                       (npuK_dtype)c->out[0]->dtype);
}

static size_t dw_scratch(const npuX_call *c) {
  const npuP_fused_conv *p = c->params;
  npuK_window2d w;
  if (npuX_window_geometry(&p->window, c->in[0], p->k_h, p->k_w, &w)) return 0;
  return npuK_depthwise_conv2d_half_scratch_size(&w, p->out_c, c->n_threads, /* multiplier */
                                                 (npuK_dtype)c->in[0]->dtype,
                                                 (npuK_dtype)c->out[0]->dtype);
}

/* A pooled step (ConvMaxPoolFusionPass: under the float16 / bfloat16 modes only where the
   direct kernel takes it), or the Winograd algorithm (compile/implmode.c gives it to float32 x and y only), or the direct
   one (x and y as stored: float32, float16 or bfloat16).  None is on the reference path, which
   is never fused nor given an algorithm. */
static npu_status conv_special(const npuX_call *c, bool reference, const npuK_epilogue *ep) {
  const npuP_fused_conv *p = c->params;
  npuK_window2d w, pw;
  bool pooled;
  if (geometry(&npuP_op_fused_conv2d, p, c->in[0]->shape, c->in[1]->shape, &w, &pw, &pooled))
    return npuC_error(c->ctx, NPU_ERR_SHAPE, "fused_conv2d '%s': the window does not fit the input",
                      c->node->name);
  const float *x = c->in[0]->data, *filter = c->in[1]->data;
  float *y = c->out[0]->data;
  /* a pooled step with float16 / bfloat16 x or y has the direct kernel only (fusion.c fuses
     such pairs where it takes them), whatever algorithm a tuning candidate names */
  bool reduced = c->in[0]->dtype != NPU_DTYPE_F32 || c->out[0]->dtype != NPU_DTYPE_F32;
  if (!reference && c->algo == NPUK_CONV_DIRECT_BF16 && c->in[0]->dtype == NPU_DTYPE_BF16) {
    /* bfloat16 x by VDPBF16PS, a constant filter packed once (plan.c), else packed per call */
    if (c->prepared)
      npuK_conv2d_bf16_direct_packed_ep(c->pool, &w, p->out_c, c->in[0]->data, c->prepared, ep,
                                        pooled ? &pw : NULL, y, (npuK_dtype)c->out[0]->dtype,
                                        c->scratch, c->n_threads);
    else if (c->in[1]->dtype == NPU_DTYPE_BF16) /* a variable's, read as stored (plan.c) */
      npuK_conv2d_bf16_direct_stored_ep(c->pool, &w, p->out_c, c->in[0]->data, c->in[1]->data,
                                        ep, pooled ? &pw : NULL, y,
                                        (npuK_dtype)c->out[0]->dtype, c->scratch, c->n_threads);
    else
      npuK_conv2d_bf16_direct_ep(c->pool, &w, p->out_c, c->in[0]->data, filter, ep,
                                 pooled ? &pw : NULL, y, (npuK_dtype)c->out[0]->dtype,
                                 c->scratch, c->n_threads);
    return NPU_OK;
  }
  if (!reference && (c->algo == NPUK_CONV_DIRECT || c->algo == NPUK_CONV_DIRECT_BF16 ||
                     (pooled && reduced))) {
    npuK_conv2d_direct_half_ep(c->pool, &w, p->out_c, x, (npuK_dtype)c->in[0]->dtype, filter, ep,
                               pooled ? &pw : NULL, y, (npuK_dtype)c->out[0]->dtype, c->scratch,
                               c->n_threads);
    return NPU_OK;
  }
  if (reference || c->in[0]->dtype != NPU_DTYPE_F32 || c->out[0]->dtype != NPU_DTYPE_F32)
    return npuC_error(c->ctx, NPU_ERR_INTERNAL, "fused_conv2d '%s': a pooled or Winograd step "
                      "runs float32 on the device only", c->node->name);
  if (c->algo == NPUK_CONV_WINOGRAD_2X3 && c->prepared) /* U of a constant filter (plan.c) */
    npuK_conv2d_f32_winograd_u_ep(c->pool, &w, p->out_c, x, c->prepared, ep, pooled ? &pw : NULL,
                                  y, c->scratch, c->n_threads);
  else if (c->algo == NPUK_CONV_WINOGRAD_2X3)
    npuK_conv2d_f32_winograd_ep(c->pool, &w, p->out_c, x, filter, ep, pooled ? &pw : NULL, y,
                                c->scratch, c->n_threads);
  else
    npuK_conv2d_f32_pool_ep(c->pool, &w, p->out_c, x, filter, ep, &pw, y, c->scratch,
                            c->n_threads);
  return NPU_OK;
}

static npu_status conv_impl(const npuX_call *c, bool reference, bool depthwise) {
  const npuP_fused_conv *p = c->params;
  /* a prepared filter replaces input 1 (NPUX_F_PREPARED_FILTER): the stored one, perhaps
     reduced, is not read; direct_bf16 reads a bfloat16 x's variable filter stored bfloat16
     (plan.c: prepare_steps) */
  bool stored_f = !depthwise && c->algo == NPUK_CONV_DIRECT_BF16 &&
                  c->in[0]->dtype == NPU_DTYPE_BF16 && c->in[1]->dtype == NPU_DTYPE_BF16;
  npu_status st = check_half_operands(c, depthwise ? "fused_depthwise_conv2d" : "fused_conv2d",
                                      !reference, !reference && (c->prepared || stored_f));
  npuK_window2d w;
  if (!st) st = npuX_window_call(c, p->k_h, p->k_w, &w);
  if (st) return st;
  const void *x = c->in[0]->data;
  const float *filter = c->in[1]->data;
  npuK_epilogue ep = {.bias = p->bias_input >= 0 ? c->in[p->bias_input]->data : NULL,
                      .act = p->act, .alpha = p->alpha,
                      .slope = p->slope_input >= 0 ? c->in[p->slope_input]->data : NULL,
                      .fast = p->act_fast && !reference};
  void *y = c->out[0]->data;
  if (depthwise && reference)
    npuK_depthwise_conv2d_f32_ref_ep(c->pool, &w, p->out_c, x, filter, &ep, y);
  else if (depthwise) /* x and y as stored (NPUX_F_HALF_XY) */
    npuK_depthwise_conv2d_half_ep(c->pool, &w, p->out_c, x, (npuK_dtype)c->in[0]->dtype, filter,
                                  &ep, y, (npuK_dtype)c->out[0]->dtype, c->scratch,
                                  c->n_threads);
  else if (p->pooled || (c->algo != NPUK_CONV_IM2COL && !reference))
    return conv_special(c, reference, &ep);
  else if (reference)
    npuK_conv2d_f32_ref_ep(c->pool, &w, p->out_c, x, filter, &ep, y, c->scratch, c->n_threads);
  else /* x and y as stored (NPUX_F_HALF_XY) */
    npuK_conv2d_half_ep(c->pool, &w, p->out_c, x, (npuK_dtype)c->in[0]->dtype, filter, &ep, y,
                        (npuK_dtype)c->out[0]->dtype, c->scratch, c->n_threads);
  return NPU_OK;
}

static npu_status conv_run(const npuX_call *c) { return conv_impl(c, false, false); }
static npu_status conv_ref(const npuX_call *c) { return conv_impl(c, true, false); }
static npu_status dw_run(const npuX_call *c) { return conv_impl(c, false, true); }
static npu_status dw_ref(const npuX_call *c) { return conv_impl(c, true, true); }

const npu_op_def npuP_op_fused_conv2d = {
    .name = "fused_conv2d", .tf_type = "_FusedConv2D", .min_inputs = 2, .max_inputs = 4,
    .n_outputs = 1, .prec = NPUX_PREC_TRUST, .fused = true, .tune = NPUX_TUNE_CONV, .flags = NPUX_F_NO_FOLD | NPUX_F_HALF_XY | NPUX_F_PREPARED_FILTER,
    .scratch_size = conv_scratch, .run = conv_run, .run_ref = conv_ref};

const npu_op_def npuP_op_fused_depthwise_conv2d = {
    .name = "fused_depthwise_conv2d", .tf_type = "_FusedDepthwiseConv2dNative",
    .min_inputs = 2, .max_inputs = 4, .n_outputs = 1, .prec = NPUX_PREC_TRUST,
    .fused = true, .tune = NPUX_TUNE_THREADS, .flags = NPUX_F_NO_FOLD | NPUX_F_HALF_XY, .scratch_size = dw_scratch, .run = dw_run,
    .run_ref = dw_ref};

/* ---- elementwise chains ---- */

enum { MAX_OPERANDS = 64 };

static npu_status eltwise_impl(const npuX_call *c, bool reference) {
  const npuP_fused_eltwise *p = c->params;
  if (c->n_inputs > MAX_OPERANDS)
    return npuC_error(c->ctx, NPU_ERR_INTERNAL, "fused_elementwise '%s': %d operands (at most %d)",
                      c->node->name, c->n_inputs, MAX_OPERANDS);
  const npu_tensor *y = c->out[0];
  int64_t cols = y->ndim ? y->shape[y->ndim - 1] : 1, rows = cols ? y->numel / cols : 0;
  /* Operands the precision pass stores at half size (NPUX_F_HALF_IO) are read and written
     as they are: the kernel widens them a block at a time.  The reference path never gets
     them (the pass does not run there). */
  bool half = false;
  for (int i = 0; i < c->n_inputs + c->n_outputs; i++)
    half |= npuX_is_half((i < c->n_inputs ? c->in[i] : c->out[i - c->n_inputs])->dtype);
  if (half && !reference) {
    const void *operands[MAX_OPERANDS];
    npuK_dtype dtypes[MAX_OPERANDS];
    for (int i = 0; i < c->n_inputs; i++) {
      operands[i] = c->in[i]->data;
      dtypes[i] = (npuK_dtype)c->in[i]->dtype;
    }
    if (npuK_eltwise_mixed(c->pool, p->n_instr, p->prog, rows, cols, operands, dtypes, y->data,
                           (npuK_dtype)y->dtype) == 0)
      return NPU_OK;
  }
  npu_status st = check_f32(c, "fused_elementwise");
  if (st) return st;
  const float *operands[MAX_OPERANDS];
  for (int i = 0; i < c->n_inputs; i++) operands[i] = c->in[i]->data;
  (reference ? npuK_eltwise_f32_ref : npuK_eltwise_f32)(c->pool, p->n_instr, p->prog, rows, cols,
                                                        operands, y->data);
  return NPU_OK;
}

static npu_status eltwise_run(const npuX_call *c) { return eltwise_impl(c, false); }
static npu_status eltwise_ref(const npuX_call *c) { return eltwise_impl(c, true); }

const npu_op_def npuP_op_fused_eltwise = {
    .name = "fused_elementwise", .tf_type = "FusedElementwise", .min_inputs = 1,
    .max_inputs = MAX_OPERANDS, .n_outputs = 1, .prec = NPUX_PREC_GRAY,
    .fused = true, .flags = NPUX_F_NO_FOLD | NPUX_F_HALF_IO, .run = eltwise_run, .run_ref = eltwise_ref};

const npu_op_def npuP_op_fused_eltwise_block = {
    .name = "fused_elementwise", .tf_type = "FusedElementwise", .min_inputs = 1,
    .max_inputs = MAX_OPERANDS, .n_outputs = 1, .prec = NPUX_PREC_BLOCK,
    .fused = true, .flags = NPUX_F_NO_FOLD | NPUX_F_HALF_IO, .run = eltwise_run, .run_ref = eltwise_ref};

/* ---- max_pool_grad + relu_grad (MaxPoolGradReluGradFusionPass) ---- */

/* in: max_pool_grad's x, y, dy, then relu_grad's features; params: max_pool_grad's window
   attributes; out: dx, and with a second output the bias gradient (bias_add_grad of dx: the
   images' float64 sums in scratch, n * c doubles).  The pass checked the shapes (features:
   x's).  The data operands are float32, or bfloat16 as stored where the precision pass stores
   x, dy, the features and dx so (precision.c: kernel_takes_stored; float16 ones are widened by
   the executor, the kernel's per-lane float16 conversion being slower than that): the kernel
   converts them as it loads and stores, the same bits as widened copies; y is not read.  The
   bias gradient is float32.  Overlapping windows with dx stored reduced add into a float32
   copy of dx in scratch (kgrad.h), so the precision pass asks for the scratch again. */
static npu_status pool_relu_grad_window(const npuX_call *c, npuK_window2d *w) {
  const npuX_window_params *p = c->params;
  for (int i = 0; i < c->n_inputs + c->n_outputs; i++) {
    const npu_tensor *t = i < c->n_inputs ? c->in[i] : c->out[i - c->n_inputs];
    if (t->dtype == NPU_DTYPE_F32 || (i != c->n_inputs + 1 && npuX_is_half(t->dtype))) continue;
    return npuC_error(c->ctx, NPU_ERR_UNSUPPORTED,
                      "fused_max_pool_grad_relu_grad '%s': its %s %d is %s (float32, float16 or "
                      "bfloat16 data, a float32 bias gradient)",
                      c->node->name, i < c->n_inputs ? "input" : "output",
                      i < c->n_inputs ? i : i - c->n_inputs, npu_dtype_name(t->dtype));
  }
  return npuX_window_call(c, p->ksize[0], p->ksize[1], w);
}

static size_t pool_relu_grad_scratch(const npuX_call *c) {
  npuK_window2d w;
  if (c->in[0]->ndim != 4 || npuX_window_call(c, ((const npuX_window_params *)c->params)->ksize[0],
                                              ((const npuX_window_params *)c->params)->ksize[1], &w))
    return 0;
  return npuK_max_pool_grad_relu_bias_scratch(&w, (npuK_dtype)c->out[0]->dtype, c->n_outputs > 1);
}

static npu_status pool_relu_grad_run(const npuX_call *c) {
  npuK_window2d w;
  npu_status st = pool_relu_grad_window(c, &w);
  if (st) return st;
  npuK_max_pool_grad_relu_bias(c->pool, &w, (npuK_dtype)c->in[0]->dtype, c->in[0]->data,
                               (npuK_dtype)c->in[2]->dtype, c->in[2]->data,
                               (npuK_dtype)c->in[3]->dtype, c->in[3]->data,
                               (npuK_dtype)c->out[0]->dtype, c->out[0]->data,
                               c->n_outputs > 1 ? c->out[1]->data : NULL, c->scratch);
  return NPU_OK;
}

const npu_op_def npuP_op_fused_max_pool_grad_relu = {
    .name = "fused_max_pool_grad_relu_grad", .tf_type = "MaxPoolGrad", .min_inputs = 4,
    .max_inputs = 4, .n_outputs = 1, .prec = NPUX_PREC_GRAY, .fused = true,
    .flags = NPUX_F_NO_FOLD, .scratch_size = pool_relu_grad_scratch,
    .run = pool_relu_grad_run};

/* ---- relu_grad + bias_add_grad (ReluGradBiasAddGradFusionPass) ---- */

/* in: relu_grad's dy and features x (one shape, rank >= 2); out: g = relu_grad(dy, x) and
   db = bias_add_grad(g) (the last dim).  The pass checked float32 and the shapes. */
static npu_status relu_bias_grad_run(const npuX_call *c) {
  npu_status st = check_f32(c, "fused_relu_grad_bias_add_grad");
  if (st) return st;
  const npu_tensor *dy = c->in[0];
  int64_t cols = dy->shape[dy->ndim - 1], rows = cols ? dy->numel / cols : 0;
  npuK_relu_grad_bias_grad_f32(c->pool, rows, cols, dy->data, c->in[1]->data, c->out[0]->data,
                               c->out[1]->data);
  return NPU_OK;
}

const npu_op_def npuP_op_fused_relu_grad_bias_grad = {
    .name = "fused_relu_grad_bias_add_grad", .tf_type = "ReluGrad", .min_inputs = 2,
    .max_inputs = 2, .n_outputs = 2, .prec = NPUX_PREC_BLOCK, .fused = true,
    .flags = NPUX_F_NO_FOLD, .run = relu_bias_grad_run};

/* ---- var - lr * grad, any gradient (GradientDescentUpdateFusionPass) ---- */

/* in: var (its storage, exclusive: exec.c), the gradient (var's shape), lr (one element);
   out: var.  lr is read now, so a schedule's value counts. */
static npu_status sgd_update_run(const npuX_call *c) {
  const npu_tensor *d = c->in[1];
  npu_tensor *w = c->out[0];
  if (c->in[0]->dtype != NPU_DTYPE_F32 || c->in[2]->dtype != NPU_DTYPE_F32 ||
      w->dtype != NPU_DTYPE_F32 || !(d->dtype == NPU_DTYPE_F32 || npuX_is_half(d->dtype)))
    return npuC_error(c->ctx, NPU_ERR_UNSUPPORTED,
                      "fused_gradient_descent_update '%s': the variable and lr must be float32 "
                      "and the gradient float32, float16 or bfloat16 (got %s, %s, %s)",
                      c->node->name, npu_dtype_name(c->in[0]->dtype), npu_dtype_name(d->dtype),
                      npu_dtype_name(c->in[2]->dtype));
  npuK_sgd_update_half(c->pool, w->numel, *(const float *)c->in[2]->data, d->data,
                       (npuK_dtype)d->dtype, w->data);
  return NPU_OK;
}

const npu_op_def npuP_op_fused_sgd_update = {
    .name = "fused_gradient_descent_update", .tf_type = "ApplyGradientDescent", .min_inputs = 3,
    .max_inputs = 3, .n_outputs = 1, .kind = NPUX_KIND_ASSIGN, .prec = NPUX_PREC_BLOCK,
    .flags = NPUX_F_NO_FOLD, .run = sgd_update_run};

/* ---- log_softmax + mul + log_softmax_grad (+ bias_add_grad) (LogSoftmaxGradFusionPass) ---- */

/* in: log_softmax's z, the mul's two operands (z's shape, or one element: params); out: d =
   log_softmax_grad(log_softmax(z), a * b) [, bias_add_grad(d)], log_softmax by its
   high_performance kernel where the step's impl says so (the fusion pass sets it from the
   log_softmax it absorbed).  The pass checked float32 and the shapes. */
static npu_status lsx_grad_run(const npuX_call *c) {
  const npuP_fused_xent_grad *p = c->params;
  npu_status st = check_f32(c, "fused_log_softmax_grad");
  if (st) return st;
  const npu_tensor *z = c->in[0];
  int64_t cols = z->shape[z->ndim - 1], rows = cols ? z->numel / cols : 0;
  npuK_log_softmax_xent_grad_f32(c->pool, c->impl, rows, cols, z->data, c->in[1]->data, p->a_one,
                                 c->in[2]->data, p->b_one, c->out[0]->data,
                                 c->n_outputs > 1 ? c->out[1]->data : NULL);
  return NPU_OK;
}

const npu_op_def npuP_op_fused_xent_grad = {
    .name = "fused_log_softmax_grad", .tf_type = "LogSoftmaxGrad", .min_inputs = 3,
    .max_inputs = 3, .n_outputs = 1, .prec = NPUX_PREC_BLOCK, .fused = true,
    .flags = NPUX_F_NO_FOLD, .run = lsx_grad_run};
