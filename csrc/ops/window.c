/*
 * window.c — what the sliding-window ops share (conv2d, depthwise_conv2d, max_pool,
 * avg_pool): reading the window attributes into npuX_window_params, the data_format check
 * (also bias_add's), and the window geometry used by infer (with -1 unknowns), scratch_size
 * and run (concrete shapes).  Tensors are NHWC; (h, w) pairs are stored in that order.
 * The attribute rules follow TensorFlow: strides, dilations and ksize as {1, h, w, 1}, with
 * {h, w} and one int accepted too; padding SAME or VALID, and for the convolutions EXPLICIT
 * with explicit_paddings {0, 0, top, bottom, left, right, 0, 0}.
 */
#include <string.h>

#include "ops/ops.h"

_Static_assert(sizeof(npuX_window_params) <= sizeof(npuG_params), "params too big");

static const char *const pad_names[] = {
    [NPUX_PAD_VALID] = "VALID", [NPUX_PAD_SAME] = "SAME", [NPUX_PAD_EXPLICIT] = "EXPLICIT"};

const char *npuX_padding_name(npuX_padding mode) { return pad_names[mode]; }

/* An (h, w) pair given as TF's {1, h, w, 1}, as {h, w} or as one int; entries >= 1.  Absent:
   hw is left as it was (the caller's default). */
static npu_status attr_hw(npuX_infer *ic, const char *name, int64_t hw[2]) {
  int64_t v[4];
  int n = 0;
  npu_status st = npuX_attr_ints(ic, name, v, 4, &n);
  if (st || n == 0) return st;
  if (n == 1) hw[0] = hw[1] = v[0];
  else if (n == 2) hw[0] = v[0], hw[1] = v[1];
  else if (n == 4) {
    if (v[0] != 1 || v[3] != 1)
      return npuX_error(ic, NPU_ERR_ARG,
                        "attribute '%s' = {%lld, %lld, %lld, %lld}: the batch and channel "
                        "entries must be 1",
                        name, (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3]);
    hw[0] = v[1], hw[1] = v[2];
  } else
    return npuX_error(ic, NPU_ERR_ARG,
                      "attribute '%s' has %d entries; give 4 ({1, h, w, 1}), 2 ({h, w}) or 1",
                      name, n);
  if (hw[0] < 1 || hw[1] < 1)
    return npuX_error(ic, NPU_ERR_ARG, "attribute '%s' must be >= 1, got (%lld, %lld)", name,
                      (long long)hw[0], (long long)hw[1]);
  return NPU_OK;
}

/* explicit_paddings: 8 ints >= 0 in NHWC order, batch and channel entries 0. */
static npu_status attr_explicit_paddings(npuX_infer *ic, int64_t pad[4]) {
  int64_t v[8];
  int n = 0;
  npu_status st = npuX_attr_ints(ic, "explicit_paddings", v, 8, &n);
  if (st) return st;
  if (n != 8)
    return npuX_error(ic, NPU_ERR_ARG,
                      "padding 'EXPLICIT' needs 'explicit_paddings' with 8 entries "
                      "{0, 0, top, bottom, left, right, 0, 0}, got %d",
                      n);
  for (int i = 0; i < 8; i++) {
    if (v[i] < 0)
      return npuX_error(ic, NPU_ERR_ARG, "explicit_paddings[%d] = %lld is negative", i + 1,
                        (long long)v[i]);
    if ((i < 2 || i >= 6) && v[i] != 0)
      return npuX_error(ic, NPU_ERR_ARG,
                        "explicit_paddings: the batch and channel entries must be 0");
  }
  memcpy(pad, v + 2, 4 * sizeof *pad);
  return NPU_OK;
}

/* padding (required).  Convolutions also take EXPLICIT (and then explicit_paddings, which is
   an error with any other mode); the pools take SAME or VALID and ignore explicit_paddings. */
static npu_status attr_padding(npuX_infer *ic, bool conv, npuX_window_params *p) {
  const char *s = NULL;
  npu_status st = npuX_attr_string(ic, "padding", &s);
  if (st) return st;
  const char *valid = conv ? "'SAME', 'VALID' or 'EXPLICIT'" : "'SAME' or 'VALID'";
  if (!s) return npuX_error(ic, NPU_ERR_ARG, "attribute 'padding' is required (%s)", valid);
  int mode = -1;
  for (int i = 0; i <= (conv ? NPUX_PAD_EXPLICIT : NPUX_PAD_SAME); i++)
    if (strcmp(s, pad_names[i]) == 0) mode = i;
  if (mode < 0) return npuX_error(ic, NPU_ERR_ARG, "padding '%s' is invalid (valid: %s)", s, valid);
  p->padding = (npuX_padding)mode;
  if (!conv) return NPU_OK;
  if (mode == NPUX_PAD_EXPLICIT) return attr_explicit_paddings(ic, p->explicit_pad);
  if (npuX_attr_find(ic, "explicit_paddings"))
    return npuX_error(ic, NPU_ERR_ARG, "attribute 'explicit_paddings' needs padding 'EXPLICIT'");
  return NPU_OK;
}

npu_status npuX_check_nhwc(npuX_infer *ic) {
  const char *fmt = "NHWC";
  npu_status st = npuX_attr_string(ic, "data_format", &fmt);
  if (st) return st;
  if (strcmp(fmt, "NHWC") == 0) return NPU_OK;
  if (strcmp(fmt, "NCHW") == 0)
    return npuX_error(ic, NPU_ERR_UNSUPPORTED,
                      "data_format 'NCHW' is not supported on this device (use 'NHWC' and "
                      "transpose the input)");
  return npuX_error(ic, NPU_ERR_ARG, "data_format '%s' is invalid (valid: 'NHWC', 'NCHW')", fmt);
}

npu_status npuX_window_parse(npuX_infer *ic, npuX_window_kind kind, npuX_window_params *p) {
  const bool conv = kind == NPUX_WINDOW_CONV;
  p->ksize[0] = p->ksize[1] = 0;
  p->stride[0] = p->stride[1] = p->dilation[0] = p->dilation[1] = 1;
  npu_status st = NPU_OK;
  if (!conv) {
    st = attr_hw(ic, "ksize", p->ksize);
    if (!st && p->ksize[0] == 0)
      st = npuX_error(ic, NPU_ERR_ARG, "attribute 'ksize' is required ({1, kh, kw, 1}, "
                                       "{kh, kw} or one int)");
  }
  if (!st) st = attr_hw(ic, "strides", p->stride);
  if (!st && conv) st = attr_hw(ic, "dilations", p->dilation);
  if (!st) st = attr_padding(ic, conv, p);
  if (!st) st = npuX_check_nhwc(ic);
  return st;
}

int npuX_window_dim(const npuX_window_params *p, int a, int64_t in, int64_t k, int64_t *out,
                    int64_t *pad_before) {
  if (p->padding != NPUX_PAD_EXPLICIT)
    return npuK_conv_output_dim(in, k, p->stride[a], p->dilation[a],
                                p->padding == NPUX_PAD_SAME, out, pad_before);
  /* EXPLICIT is VALID over the padded input. */
  const int64_t before = p->explicit_pad[2 * a], after = p->explicit_pad[2 * a + 1];
  if (npuK_conv_output_dim(in + before + after, k, p->stride[a], p->dilation[a], 0, out,
                           pad_before))
    return -1;
  *pad_before = before;
  return 0;
}

int npuX_window_out_hw(const npuX_window_params *p, const int64_t in[2], const int64_t k[2],
                       int64_t out[2]) {
  for (int a = 0; a < 2; a++) {
    out[a] = -1;
    if (in[a] < 0 || k[a] < 0) continue; /* unknown stays unknown */
    int64_t pad;
    if (npuX_window_dim(p, a, in[a], k[a], &out[a], &pad)) return a;
  }
  return -1;
}

int npuX_window_geometry(const npuX_window_params *p, const npu_tensor *x, int64_t k_h,
                         int64_t k_w, npuK_window2d *w) {
  *w = (npuK_window2d){.n = x->shape[0], .in_h = x->shape[1], .in_w = x->shape[2],
                       .c = x->shape[3], .k_h = k_h, .k_w = k_w,
                       .stride_h = p->stride[0], .stride_w = p->stride[1],
                       .dilation_h = p->dilation[0], .dilation_w = p->dilation[1]};
  if (npuX_window_dim(p, 0, w->in_h, w->k_h, &w->out_h, &w->pad_top)) return -1;
  if (npuX_window_dim(p, 1, w->in_w, w->k_w, &w->out_w, &w->pad_left)) return -1;
  return 0;
}

npu_status npuX_window_call(const npuX_call *c, int64_t k_h, int64_t k_w, npuK_window2d *w) {
  if (npuX_window_geometry(c->params, c->in[0], k_h, k_w, w) == 0) return NPU_OK;
  return npuC_error(c->ctx, NPU_ERR_SHAPE, "%s '%s': the window does not fit the input",
                    npuX_op(c->node->op)->name, c->node->name);
}

npu_status npuX_conv_infer(npuX_infer *ic, const npuX_window_params *p, const char *filter) {
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_COUNT};
  const npuG_value *x = &ic->in[0], *f = &ic->in[1];
  npu_status st = npuX_check_dtype(ic, 0, ok);
  if (!st) st = npuX_check_same_dtype(ic, 0);
  if (st) return st;
  char sx[96], sf[96];
  if ((x->ndim >= 0 && x->ndim != 4) || (f->ndim >= 0 && f->ndim != 4))
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "needs an NHWC input and a %s filter (rank 4), got input %s and filter %s",
                      filter, npuX_shape(sx, x), npuX_shape(sf, f));
  npuG_value *y = &ic->out[0];
  *y = (npuG_value){.dtype = x->dtype, .ndim = 4, .shape = {-1, -1, -1, -1}};
  ic->n_outputs = 1;
  int64_t in[2] = {-1, -1}, k[2] = {-1, -1};
  if (x->ndim == 4) {
    y->shape[0] = x->shape[0];
    in[0] = x->shape[1], in[1] = x->shape[2];
  }
  if (f->ndim == 4) k[0] = f->shape[0], k[1] = f->shape[1];
  if (x->ndim == 4 && f->ndim == 4 && x->shape[3] >= 0 && f->shape[2] >= 0 &&
      x->shape[3] != f->shape[2])
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "input %s has %lld channels but filter %s (%s) expects %lld",
                      npuX_shape(sx, x), (long long)x->shape[3], npuX_shape(sf, f), filter,
                      (long long)f->shape[2]);
  int a = npuX_window_out_hw(p, in, k, &y->shape[1]);
  if (a >= 0)
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "input %s is too small for filter %s (dilation %lld, padding %s): no "
                      "output %s",
                      npuX_shape(sx, x), npuX_shape(sf, f), (long long)p->dilation[a],
                      pad_names[p->padding], a ? "column" : "row");
  return NPU_OK;
}

npu_status npuX_pool_infer(npuX_infer *ic, const void *params) {
  static const npu_dtype ok[] = {NPU_DTYPE_F32, NPU_DTYPE_COUNT};
  const npuX_window_params *p = params;
  const npuG_value *x = &ic->in[0];
  npu_status st = npuX_check_dtype(ic, 0, ok);
  if (st) return st;
  char sx[96];
  if (x->ndim >= 0 && x->ndim != 4)
    return npuX_error(ic, NPU_ERR_SHAPE, "needs an NHWC input (rank 4), got %s",
                      npuX_shape(sx, x));
  npuG_value *y = &ic->out[0];
  *y = (npuG_value){.dtype = x->dtype, .ndim = 4, .shape = {-1, -1, -1, -1}};
  ic->n_outputs = 1;
  if (x->ndim != 4) return NPU_OK;
  y->shape[0] = x->shape[0];
  y->shape[3] = x->shape[3];
  const int64_t in[2] = {x->shape[1], x->shape[2]};
  int a = npuX_window_out_hw(p, in, p->ksize, &y->shape[1]);
  if (a >= 0)
    return npuX_error(ic, NPU_ERR_SHAPE,
                      "input %s is too small for the %lldx%lld window (padding %s): no output "
                      "%s",
                      npuX_shape(sx, x), (long long)p->ksize[0], (long long)p->ksize[1],
                      pad_names[p->padding], a ? "column" : "row");
  return NPU_OK;
}

npu_status npuX_pool_parse(npuX_infer *ic, void *params) {
  return npuX_window_parse(ic, NPUX_WINDOW_POOL, params);
}

npu_status npuX_conv_parse(npuX_infer *ic, void *params) {
  return npuX_window_parse(ic, NPUX_WINDOW_CONV, params);
}

npu_status npuX_pool_run(const npuX_call *c, npuX_pool_f32 kernel) {
  const npuX_window_params *p = c->params;
  npuK_window2d w;
  npu_status st = npuX_window_call(c, p->ksize[0], p->ksize[1], &w);
  if (!st) kernel(c->pool, &w, c->in[0]->data, c->out[0]->data);
  return st;
}

npu_status npuX_pool_run_half(const npuX_call *c, npuX_pool_half kernel) {
  const npuX_window_params *p = c->params;
  npuK_window2d w;
  npu_status st = npuX_window_call(c, p->ksize[0], p->ksize[1], &w);
  if (!st)
    kernel(c->pool, &w, c->in[0]->data, (npuK_dtype)c->in[0]->dtype, c->out[0]->data,
           (npuK_dtype)c->out[0]->dtype, c->scratch, c->n_threads);
  return st;
}

/* Scratch only for x or y stored float16 / bfloat16: bands of widened rows. */
size_t npuX_pool_scratch(const npuX_call *c) {
  const npuX_window_params *p = c->params;
  npuK_window2d w;
  if (npuX_window_geometry(p, c->in[0], p->ksize[0], p->ksize[1], &w)) return 0;
  return npuK_pool_half_scratch_size(&w, c->n_threads, (npuK_dtype)c->in[0]->dtype,
                                     (npuK_dtype)c->out[0]->dtype);
}

/* ---- depth_to_space, space_to_depth: a b x b block moved between space and channels ---- */

_Static_assert(sizeof(npuX_block_size_params) <= sizeof(npuG_params), "params too big");

npu_status npuX_block_size_parse(npuX_infer *ic, void *params) {
  int64_t *block = &((npuX_block_size_params *)params)->block;
  *block = -1;
  npu_status st = npuX_attr_int(ic, "block_size", block);
  if (!st) st = npuX_check_nhwc(ic);
  if (!st && !npuX_attr_find(ic, "block_size"))
    st = npuX_error(ic, NPU_ERR_ARG, "attribute 'block_size' (>= 2) is required");
  if (!st && *block < 2)
    st = npuX_error(ic, NPU_ERR_ARG, "block_size %lld must be >= 2", (long long)*block);
  return st;
}

npu_status npuX_block_size_infer(npuX_infer *ic, const void *params, int64_t *block) {
  const npuG_value *x = &ic->in[0];
  *block = ((const npuX_block_size_params *)params)->block;
  ic->n_outputs = 1;
  ic->out[0] = (npuG_value){.dtype = x->dtype, .ndim = 4, .shape = {-1, -1, -1, -1}};
  char sx[96];
  if (x->ndim >= 0 && x->ndim != 4)
    return npuX_error(ic, NPU_ERR_SHAPE, "input must be NHWC (rank 4), got %s", npuX_shape(sx, x));
  return NPU_OK;
}

npu_status npuX_block_size_run(const npuX_call *c, const int64_t dims[6], bool reference) {
  const npu_tensor *x = c->in[0];
  static const int perm[6] = {0, 1, 3, 2, 4, 5};
  (reference ? npuK_transpose_ref : npuK_transpose)(c->pool, npu_dtype_size(x->dtype), 6, dims,
                                                    perm, x->data, c->out[0]->data);
  return NPU_OK;
}
