/*
 * op_conv2d_backprop_input.c — conv2d_backprop_input: conv2d's input gradient, also the
 * "transposed convolution" of decoders (TensorFlow Conv2DBackpropInput; Keras Conv2DTranspose).
 * Operands in TensorFlow's order: input_sizes, filter, out_backprop (dy).  input_sizes (4 ints,
 * the NHWC shape of conv2d's input; its batch may be -1: dy's) is an attribute, or — as
 * TensorFlow passes it — a FIRST input (int32/int64, known by compile time: a constant or a
 * value the compiler folds, e.g. Shape -> StridedSlice -> Pack): min_inputs is 0 and the
 * operand binding (operands.h) starts at input 0 with two data inputs after it, so the
 * GraphDef importer turns a constant input_sizes into the attribute and keeps a computed one
 * as input 0; the exporter writes it first (.tf_const_inputs_first).  Lua: g:op(
 * "conv2d_backprop_input", {filter, dy}, {input_sizes = {1, 8, 8, 3}, strides = 2,
 * padding = "SAME"}).  filter is HWIO (k_h, k_w, c, out_c), dy (n, out_h, out_w, out_c) where
 * (out_h, out_w) is what conv2d gives for input_sizes; conv2d's window attributes (strides,
 * dilations, padding SAME/VALID/EXPLICIT, explicit_paddings, data_format NHWC).  f32.
 * Output: input_sizes, dx[n, ih, iw, ci] = the sum of dy[n, oh, ow, co] * filter[kh, kw, ci,
 * co] over the (oh, ow, kh, kw) that read (ih, iw) in the forward, and co.
 * Trust list, as its forward op.
 * Device: stride 1, dilation 1: conv2d of dy with the filter turned half a turn (the direct
 * kernel where c % 8 == 0, else im2col + sgemm); otherwise dy times the filter's transpose
 * with sgemm (columns of (k_h, k_w, c) per output pixel, in blocks of output rows), scattered
 * back (col2im) in a fixed order.
 * Under op_select_implmode high_performance (compile/implmode.c), 3x3 stride 1 where its rule
 * says Winograd is faster (winograd_rule; super_performance: wherever it takes the shape with
 * at least 8 channels each side): that convolution by Winograd F(2x2, 3x3)
 * (kernels/winograd.c), with Winograd's rounding and bound (docs/numerics.md); explain shows
 * "winograd_2x3".  aoe_mode 2 times it against the default kernel under the same gate.
 * Under mixed bfloat16 on a CPU with AVX512_BF16 (npuK_bf16dot()), the filter and dy reach
 * the kernel as stored, bfloat16, and dx is written as stored (NPUX_F_BF16_DOT,
 * compile/precision.c): VDPBF16PS over pairs of output channels, any stride
 * (conv_bwd_bf16.c), |dx - exact| <= k_h k_w out_c 2^-24 sum|dy f| + 2 k_h k_w out_c 2^-126
 * (kgrad.h); explain shows algo "bf16dot".  Elsewhere, or with NPU_NO_AVX512BF16=1, the
 * executor widens them for the float32 kernels above.
 * Reference: the direct loops of kgrad.h (npuK_conv2d_backprop_input_f32).
 * The gradient of conv2d (ops/grad.c) builds this op with the attribute.
 */
#include "kernels/kmath.h"
#include "ops/grad.h"
#include "ops/operands.h"

static const char *const operand_names[] = {"input_sizes"};

typedef struct cbi_params {
  npuX_window_grad_params wg; /* first: the window-gradient helpers read it */
  npuX_operands o;
} cbi_params;
_Static_assert(sizeof(cbi_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  cbi_params *p = params;
  if (ic->n_inputs < 2)
    return npuX_error(ic, NPU_ERR_ARG, "needs the filter and the gradient dy as inputs, got %d "
                      "input(s)", ic->n_inputs);
  npu_status st = npuX_operands_bind(ic, operand_names, 1, 0, 2, &p->o);
  if (!st) st = npuX_conv_parse(ic, &p->wg.win);
  if (st) return st;
  if (p->o.slot[0] == NPUX_OPERAND_ABSENT)
    return npuX_error(ic, NPU_ERR_ARG, "input_sizes (4 ints: an attribute or the first input) "
                      "is required");
  return NPU_OK;
}

/* input_sizes now: *known false while an input's value is not known; sizes[0] may be -1. */
static npu_status get_sizes(npuX_infer *ic, const cbi_params *p, int64_t sizes[4], bool *known) {
  int n;
  npu_status st = npuX_operand_ints(ic, &p->o, operand_names, 0, sizes, 4, &n, known);
  if (st) return st;
  if ((*known || n >= 0) && n != 4)
    return npuX_error(ic, NPU_ERR_ARG, "input_sizes must have 4 entries (NHWC), got %d", n);
  for (int i = 0; *known && i < 4; i++)
    if (sizes[i] < (i == 0 ? -1 : 0))
      return npuX_error(ic, NPU_ERR_ARG, "input_sizes has a negative entry");
  return NPU_OK;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_COUNT};
  const cbi_params *p = params;
  const int fi = ic->n_inputs - 2, di = ic->n_inputs - 1;
  const npuG_value *f = &ic->in[fi], *dy = &ic->in[di];
  npu_status st = npuX_check_dtype(ic, fi, ok);
  if (!st) st = npuX_check_same_dtype(ic, fi);
  if (st) return st;
  int64_t sizes[4] = {-1, -1, -1, -1};
  bool known;
  if ((st = get_sizes(ic, p, sizes, &known))) return st;
  if (!known) sizes[0] = sizes[1] = sizes[2] = sizes[3] = -1;
  char sf[96], sd[96];
  if (f->ndim >= 0 && f->ndim != 4)
    return npuX_error(ic, NPU_ERR_SHAPE, "needs an HWIO filter (rank 4), got %s",
                      npuX_shape(sf, f));
  const int64_t k[2] = {f->ndim == 4 ? f->shape[0] : -1, f->ndim == 4 ? f->shape[1] : -1};
  st = npuX_window_grad_check(ic, &p->wg.win, sizes + 1, k, di);
  if (st) return st;
  if (f->ndim == 4 && f->shape[2] >= 0 && sizes[3] >= 0 && f->shape[2] != sizes[3])
    return npuX_error(ic, NPU_ERR_SHAPE, "filter %s has %lld input channels, input_sizes say %lld",
                      npuX_shape(sf, f), (long long)f->shape[2], (long long)sizes[3]);
  if (f->ndim == 4 && dy->ndim == 4 && f->shape[3] >= 0 && dy->shape[3] >= 0 &&
      f->shape[3] != dy->shape[3])
    return npuX_error(ic, NPU_ERR_SHAPE, "the gradient %s has %lld channels, filter %s gives %lld",
                      npuX_shape(sd, dy), (long long)dy->shape[3], npuX_shape(sf, f),
                      (long long)f->shape[3]);
  int64_t batch = dy->ndim == 4 ? dy->shape[0] : -1;
  if (sizes[0] >= 0 && batch >= 0 && sizes[0] != batch)
    return npuX_error(ic, NPU_ERR_SHAPE, "input_sizes has batch %lld, the gradient %s has %lld",
                      (long long)sizes[0], npuX_shape(sd, dy), (long long)batch);
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = f->dtype, .ndim = 4,
                            .shape = {sizes[0] >= 0 ? sizes[0] : batch, sizes[1], sizes[2],
                                      sizes[3] >= 0 ? sizes[3] : f->ndim == 4 ? f->shape[2] : -1}};
  return NPU_OK;
}

static int geometry(const npuX_call *c, npuK_window2d *w) {
  const npu_tensor *f = c->in[c->n_inputs - 2], *dx = c->out[0];
  const cbi_params *p = c->params;
  return npuX_window_geometry(&p->wg.win, dx, f->shape[0], f->shape[1], w);
}

/* Winograd where op_select_implmode high_performance chose it (compile/implmode.c, npuE_step.
   algo) and the geometry takes it: decided alike for the scratch and the run. */
static bool winograd(const npuX_call *c, const npuK_window2d *w) {
  return c->algo == NPUK_CONV_WINOGRAD_2X3 &&
         npuK_conv2d_backprop_input_winograd_fits(w, c->in[c->n_inputs - 2]->shape[3]);
}

/* the filter and dy stored bfloat16 by the precision pass, which does that only where
   npuK_bf16dot() (NPUX_F_BF16_DOT): the bfloat16 kernel; decided alike for scratch and run */
static bool bf16_operands(const npuX_call *c) {
  return c->in[c->n_inputs - 2]->dtype == NPU_DTYPE_BF16 &&
         c->in[c->n_inputs - 1]->dtype == NPU_DTYPE_BF16;
}

static size_t scratch_size(const npuX_call *c) {
  npuK_window2d w;
  if (geometry(c, &w)) return 0;
  const int64_t out_c = c->in[c->n_inputs - 2]->shape[3];
  if (bf16_operands(c)) return npuK_conv2d_backprop_input_bf16_scratch_size(&w, out_c);
  if (winograd(c, &w))
    return npuK_conv2d_backprop_input_f32_winograd_scratch_size(&w, out_c, c->n_threads);
  return npuK_conv2d_backprop_input_f32_scratch_size(&w, out_c, c->n_threads);
}

static npu_status run_impl(const npuX_call *c, bool reference) {
  const npu_tensor *f = c->in[c->n_inputs - 2], *dy = c->in[c->n_inputs - 1];
  npu_tensor *dx = c->out[0];
  npuK_window2d w;
  if (geometry(c, &w) || w.out_h != dy->shape[1] || w.out_w != dy->shape[2])
    return npuC_error(c->ctx, NPU_ERR_SHAPE, "conv2d_backprop_input '%s': the window does not "
                      "fit the input", c->node->name);
  if (reference)
    npuK_conv2d_backprop_input_f32(c->pool, &w, f->shape[3], dy->data, f->data, dx->data);
  else if (bf16_operands(c)) /* as stored (NPUX_F_BF16_DOT): dx float32 or reduced */
    npuK_conv2d_backprop_input_bf16(c->pool, &w, f->shape[3], dy->data, f->data, dx->data,
                                    (npuK_dtype)dx->dtype, c->scratch);
  else if (winograd(c, &w))
    npuK_conv2d_backprop_input_f32_winograd(c->pool, &w, f->shape[3], dy->data, f->data,
                                            dx->data, c->scratch, c->n_threads);
  else
    npuK_conv2d_backprop_input_f32_gemm(c->pool, &w, f->shape[3], dy->data, f->data, dx->data,
                                        c->scratch, c->n_threads);
  return NPU_OK;
}

static npu_status run(const npuX_call *c) { return run_impl(c, false); }
static npu_status run_ref(const npuX_call *c) { return run_impl(c, true); }

const npu_op_def npuX_op_conv2d_backprop_input = {
    .name = "conv2d_backprop_input", .tf_type = "Conv2DBackpropInput", .min_inputs = 0,
    .max_inputs = 3, .n_outputs = 1, .prec = NPUX_PREC_TRUST, .flags = NPUX_F_BF16_DOT,
    .tune = NPUX_TUNE_CONV_INPUT, .parse = parse, .infer = infer,
    .scratch_size = scratch_size, .run = run, .run_ref = run_ref,
    .tf_const_inputs = "input_sizes", .tf_const_inputs_first = true};
