/*
 * op_pad.c — pad: x surrounded by paddings[2i] elements before and paddings[2i + 1] after along
 * each axis i (TensorFlow Pad / PadV2 / MirrorPad).
 * Operands (operands.h: attribute, or TensorFlow's input 2 and 3): paddings (2 * rank ints
 * >= 0: before0, after0, before1, ...; also positional, and the Lua binding flattens
 * {{1, 1}, {2, 2}}; as an input an int32/int64 (rank, 2) matrix, which may be known only when
 * the op runs: the output is then sized then), constant_values (a number, default 0, converted
 * to x's dtype at run time; as an input a scalar).  Attribute mode ("CONSTANT" (default),
 * "REFLECT" (mirror without the edge: paddings <= dim - 1) or "SYMMETRIC" (with the edge:
 * <= dim), as tf.pad).
 * Any dtype.  Gray list: moves data, never rounds (beyond converting the constant).
 * Gradient (mode CONSTANT with paddings an attribute; REFLECT and SYMMETRIC, and paddings
 * given as an input, have none here): the input's block of dy (slice); dims of the input with
 * padding after them must be known.
 */
#include <string.h>

#include "ops/grad.h"
#include "ops/operands.h"

static const char *const operand_names[] = {"paddings", "constant_values"};

static const char *const mode_names[] = {
    [NPUK_PAD_CONSTANT] = "CONSTANT", [NPUK_PAD_REFLECT] = "REFLECT",
    [NPUK_PAD_SYMMETRIC] = "SYMMETRIC"};

typedef struct pad_params {
  npuX_operands o;
  int n_paddings; /* 2 * rank, from the attribute */
  npuK_pad_mode mode;
  double value;   /* from the attribute */
  int64_t paddings[2 * NPU_MAX_DIMS];
} pad_params;
_Static_assert(sizeof(pad_params) <= sizeof(npuG_params), "params too big");

/* Checks a paddings list (from the attribute, or an input's value once known). */
static npu_status check_paddings(npuX_infer *ic, int n, const int64_t *v) {
  char s[96];
  if (n % 2)
    return npuX_error(ic, NPU_ERR_ARG, "paddings %s must have 2 entries (before, after) per axis",
                      npuC_shape_str(s, sizeof s, n, v));
  for (int i = 0; i < n; i++)
    if (v[i] < 0)
      return npuX_error(ic, NPU_ERR_ARG, "paddings %s must be >= 0",
                        npuC_shape_str(s, sizeof s, n, v));
  return NPU_OK;
}

static npu_status parse(npuX_infer *ic, void *params) {
  pad_params *p = params;
  npu_status st = npuX_operands_bind(ic, operand_names, 2, 1, 0, &p->o);
  if (st) return st;
  if (p->o.slot[0] == NPUX_OPERAND_ABSENT)
    return npuX_error(ic, NPU_ERR_ARG, "attribute 'paddings' is required (or input 2)");
  if (p->o.slot[0] == NPUX_OPERAND_ATTR) {
    st = npuX_attr_ints(ic, "paddings", p->paddings, 2 * NPU_MAX_DIMS, &p->n_paddings);
    if (!st) st = check_paddings(ic, p->n_paddings, p->paddings);
    if (st) return st;
  }
  const char *mode = "CONSTANT";
  st = npuX_attr_string(ic, "mode", &mode);
  if (st) return st;
  int m = -1;
  for (int i = 0; i < (int)npu_countof(mode_names); i++)
    if (strcmp(mode, mode_names[i]) == 0) m = i;
  if (m < 0)
    return npuX_error(ic, NPU_ERR_ARG,
                      "mode '%s' is invalid (valid: 'CONSTANT', 'REFLECT', 'SYMMETRIC')", mode);
  p->mode = (npuK_pad_mode)m;
  p->value = 0;
  if (p->o.slot[1] == NPUX_OPERAND_ATTR) st = npuX_attr_float(ic, "constant_values", &p->value);
  if (!st && p->mode != NPUK_PAD_CONSTANT && (p->value != 0 || p->o.slot[1] >= 0))
    st = npuX_error(ic, NPU_ERR_ARG, "constant_values needs mode 'CONSTANT', not '%s'", mode);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  const pad_params *p = params;
  const npuG_value *x = &ic->in[0];
  npuG_value *y = &ic->out[0];
  int64_t pads[2 * NPU_MAX_DIMS];
  int n;
  bool known;
  npu_status st = npuX_operand_ints(ic, &p->o, operand_names, 0, pads, 2 * NPU_MAX_DIMS, &n, &known);
  if (!st && known && p->o.slot[0] >= 0) st = check_paddings(ic, n, pads);
  if (st) return st;
  if (p->o.slot[1] >= 0) { /* a scalar of any real dtype */
    double v;
    int64_t iv;
    bool is_int, vknown;
    if ((st = npuX_operand_scalar(ic, &p->o, operand_names, 1, &v, &iv, &is_int, &vknown)))
      return st;
  }
  const int ndim = n >= 0 ? n / 2 : x->ndim;
  ic->n_outputs = 1;
  *y = (npuG_value){.dtype = x->dtype, .ndim = ndim};
  char sx[96], s[96];
  if (x->ndim >= 0 && n >= 0 && x->ndim != ndim)
    return npuX_error(ic, NPU_ERR_SHAPE, "paddings %s need %d entries for input %s",
                      known ? npuC_shape_str(s, sizeof s, n, pads) : "(input)", 2 * x->ndim,
                      npuX_shape(sx, x));
  /* REFLECT repeats no edge element, so each side may use at most dim - 1 of them. */
  const int64_t slack = p->mode == NPUK_PAD_REFLECT ? 1 : 0;
  for (int i = 0; i < ndim; i++) {
    int64_t dim = x->ndim >= 0 ? x->shape[i] : -1;
    int64_t before = known ? pads[2 * i] : -1, after = known ? pads[2 * i + 1] : -1;
    y->shape[i] = dim >= 0 && known ? dim + before + after : -1;
    if (dim >= 0 && known && p->mode != NPUK_PAD_CONSTANT &&
        (before > dim - slack || after > dim - slack))
      return npuX_error(ic, NPU_ERR_SHAPE,
                        "paddings %s: mode %s allows at most %lld on axis %d of input %s",
                        npuC_shape_str(s, sizeof s, n, pads), mode_names[p->mode],
                        (long long)(dim - slack), i, npuX_shape(sx, x));
  }
  return NPU_OK;
}

static npu_status run(const npuX_call *c) {
  const pad_params *p = c->params;
  const npu_tensor *x = c->in[0];
  const int64_t *pads = p->paddings;
  int64_t pads_in[2 * NPU_MAX_DIMS];
  if (p->o.slot[0] >= 0) { /* checked by infer, on this value (a dynamic step) or a constant */
    if (npuX_tensor_ints(c->in[p->o.slot[0]], pads_in, 2 * NPU_MAX_DIMS) != 2 * x->ndim)
      return npuC_error(c->ctx, NPU_ERR_SHAPE, "pad '%s': paddings do not fit the input",
                        c->node->name);
    pads = pads_in;
  }
  double v = p->value;
  if (p->o.slot[1] >= 0) {
    int64_t iv;
    npuX_tensor_scalar(c->in[p->o.slot[1]], &v, &iv);
  }
  /* The constant as one element of x's dtype (8 bytes hold any of them). */
  int64_t value[1] = {0};
  /* float16 / bfloat16 x (the precision pass's storage, NPUX_F_MOVES): through float32, the
     two roundings a float32 pad and narrowing its output would make */
  npuK_dtype via = npuX_is_half(x->dtype) ? NPUK_F32 : NPUK_F64;
  double value64 = v;
  float value32 = (float)v;
  if (p->mode == NPUK_PAD_CONSTANT && v != 0 &&
      npuK_cast(c->pool, 1, via, via == NPUK_F32 ? (const void *)&value32 : &value64,
                (npuK_dtype)x->dtype, value))
    return npuC_error(c->ctx, NPU_ERR_DTYPE, "pad '%s': no constant of dtype %s", c->node->name,
                      npu_dtype_name(x->dtype));
  if (npuK_pad(c->pool, npu_dtype_size(x->dtype), x->ndim, x->shape, pads, p->mode, value,
               x->data, c->out[0]->data))
    return npuC_error(c->ctx, NPU_ERR_SHAPE, "pad '%s': paddings do not fit the input",
                      c->node->name);
  return NPU_OK;
}

static npu_status grad(npuX_grad *gc) {
  const pad_params *p = (const pad_params *)gc->params.bytes;
  if (p->mode != NPUK_PAD_CONSTANT)
    return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "mode %s has no gradient here (only CONSTANT)",
                       mode_names[p->mode]);
  if (p->o.slot[0] >= 0)
    return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "paddings given as an input have no gradient "
                       "here (only the attribute)");
  npuG_value x = npuX_gvalue(gc, gc->x[0]);
  const int ndim = p->n_paddings / 2;
  int64_t begin[NPU_MAX_DIMS], size[NPU_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    begin[i] = p->paddings[2 * i];
    size[i] = x.ndim > i ? x.shape[i] : -1;
    if (size[i] < 0 && p->paddings[2 * i + 1] != 0)
      return npuX_gerror(gc, NPU_ERR_UNSUPPORTED, "dimension %d of the input must be known", i);
  }
  npu_attr a[2] = {npuX_aints("begin", begin, ndim), npuX_aints("size", size, ndim)};
  gc->dx[0] = npuX_gadd(gc, "slice", 1, &gc->dy[0], 2, a);
  return gc->status;
}

const npu_op_def npuX_op_pad = {
    .name = "pad", .tf_type = "Pad", .args = "paddings", .min_inputs = 1, .max_inputs = 3,
    .n_outputs = 1, .prec = NPUX_PREC_GRAY, .parse = parse, .infer = infer, .run = run,
    .grad = grad, .flags = NPUX_F_MOVES,
    /* Pad and MirrorPad: (x, paddings); PadV2 adds a third const input, constant_values. */
    .tf_const_inputs = "paddings,constant_values"};
