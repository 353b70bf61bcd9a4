/*
 * op_image_summary.c — image_summary: tf.summary.image's op (TensorFlow ImageSummary): a
 * Summary with one value per image of the first max_outputs (attribute, default 3, >= 1) of a
 * batch (b, h, w, c), c 1 (grayscale), 3 (RGB) or 4 (RGBA), each a PNG (kernels/ksummary.h:
 * stored deflate blocks, no compressor).  uint8 images are taken as they are; float images
 * (float32, float16, bfloat16, float64) are normalised one at a time as TensorFlow does
 * (npuK_image_to_u8; a pixel with a non-finite channel is red, bad_color (255, 0, 0, 255)).
 * Tags "<tag>/image" when max_outputs is 1, else "<tag>/image/<i>".  Attribute tag.  Output
 * uint8 (n) (ops/summary.h).  Scratch: the images kept, as float64 and as 8 bits.
 * No gradient.  Kernels: npuK_image_to_u8, npuK_summary_images.
 */
#include "ops/summary.h"

typedef struct image_params {
  int64_t max_outputs;
} image_params;
_Static_assert(sizeof(image_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  image_params *p = params;
  p->max_outputs = 3;
  npu_status st = npuX_summary_parse(ic, params);
  if (!st) st = npuX_attr_int(ic, "max_outputs", &p->max_outputs);
  if (!st && p->max_outputs < 1)
    st = npuX_error(ic, NPU_ERR_ARG, "max_outputs must be >= 1, got %lld", (long long)p->max_outputs);
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  (void)params;
  npuX_summary_output(ic);
  const npuG_value *x = &ic->in[0];
  char sx[96];
  static const npu_dtype allowed[] = {NPU_DTYPE_U8, NPU_DTYPE_F32, NPU_DTYPE_F16, NPU_DTYPE_BF16,
                                      NPU_DTYPE_F64, NPU_DTYPE_COUNT};
  npu_status st = npuX_check_dtype(ic, 0, allowed);
  if (st) return st;
  if (x->ndim >= 0 && (x->ndim != 4 || (x->shape[3] >= 0 && x->shape[3] != 1 &&
                                        x->shape[3] != 3 && x->shape[3] != 4)))
    return npuX_error(ic, NPU_ERR_SHAPE, "needs images (batch, height, width, channels) with "
                      "1, 3 or 4 channels, got %s", npuX_shape(sx, x));
  return NPU_OK;
}

static int64_t kept(const npuX_call *c) {
  const image_params *p = c->params;
  int64_t b = c->in[0]->shape[0];
  return b < p->max_outputs ? b : p->max_outputs;
}

static size_t scratch_size(const npuX_call *c) {
  const npu_tensor *x = c->in[0];
  if (x->ndim != 4) return 0;
  size_t per = (size_t)(x->shape[1] * x->shape[2] * x->shape[3]), n = (size_t)kept(c) * per;
  return n + (x->dtype == NPU_DTYPE_U8 ? 0 : per * sizeof(double)) + 8;
}

static npu_status run(const npuX_call *c) {
  if (c->discarded) return npuX_summary_empty(c);
  const image_params *p = c->params;
  const npu_tensor *x = c->in[0];
  int64_t n = kept(c), h = x->shape[1], w = x->shape[2];
  int ch = (int)x->shape[3];
  size_t per = (size_t)(h * w * ch);
  const uint8_t *pixels = x->data;
  if (x->dtype != NPU_DTYPE_U8) {
    static const uint8_t bad_color[4] = {255, 0, 0, 255};
    uint8_t *u8 = c->scratch;
    double *f64 = (double *)((char *)c->scratch + ((n * per + 7) & ~(size_t)7));
    size_t esize = npu_dtype_size(x->dtype);
    for (int64_t i = 0; i < n; i++) {
      npuK_cast(NULL, (int64_t)per, (npuK_dtype)x->dtype, (const char *)x->data + i * per * esize,
                NPUK_F64, f64);
      npuK_image_to_u8(h * w, ch, f64, bad_color, u8 + i * per);
    }
    pixels = u8;
  }
  const char *tag = npuX_summary_tag(c);
  int max = (int)(p->max_outputs > 2 ? 2 : p->max_outputs); /* 1 or "more than 1" */
  int64_t bytes = (int64_t)npuK_summary_images(NULL, tag, max, n, h, w, ch, NULL);
  npu_status st = npuX_output(c, 0, 1, &bytes);
  if (!st) npuK_summary_images(c->out[0]->data, tag, max, n, h, w, ch, pixels);
  return st;
}

const npu_op_def npuX_op_image_summary = {
    .name = "image_summary", .tf_type = "ImageSummary", .args = "tag,max_outputs",
    .min_inputs = 1, .max_inputs = 1, .n_outputs = 1, .prec = NPUX_PREC_BLOCK,
    .flags = NPUX_F_DATA_SHAPE | NPUX_F_SUMMARY, .parse = parse, .infer = infer, .scratch_size = scratch_size,
    .run = run};
