/*
 * op_non_max_suppression.c — non_max_suppression: greedy selection of boxes by score,
 * dropping (or, soft NMS, down-weighting) those that overlap a better kept box (TensorFlow
 * NonMaxSuppressionV5; V2, V3 and V4 import onto it).  Inputs boxes (float32, (n, 4) as
 * (y1, x1, y2, x2), corners in either order) and scores (float32, (n)).  Operands
 * max_output_size (int >= 0, required), iou_threshold (in [0, 1], default 0.5),
 * score_threshold (default -inf) and soft_nms_sigma (>= 0, default 0: hard NMS): attributes
 * (also positional: npu.non_max_suppression(boxes, scores, 10, 0.5)) or TF's trailing inputs
 * 3..6 (operands.h).  Attribute pad_to_max_output_size (default false).
 * Candidates have score > score_threshold and are visited by descending score, ties by lower
 * index; one is kept unless its IoU with a kept box is > iou_threshold; at most
 * max_output_size are kept (soft NMS: kernels.h).
 * Outputs, as V5's: selected_indices (int32) and selected_scores (float32, the scores after
 * soft-NMS decay), of length n = the count kept — known only when the op runs
 * (NPUX_F_DATA_SHAPE) — or, with pad_to_max_output_size, max_output_size (padded with 0);
 * valid_outputs (int32 scalar), the count.
 * Block list: scores and IoUs stay float32.  Kernel: npuK_non_max_suppression_f32.
 */
#include <math.h>

#include "ops/operands.h"

static const char *const operand_names[] = {"max_output_size", "iou_threshold",
                                            "score_threshold", "soft_nms_sigma"};
enum { N_OPERANDS = 4 };

typedef struct nms_params {
  npuX_operands o;
  bool pad;
  double value[N_OPERANDS]; /* the attributes' values and the defaults */
} nms_params;
_Static_assert(sizeof(nms_params) <= sizeof(npuG_params), "params too big");

static npu_status parse(npuX_infer *ic, void *params) {
  nms_params *p = params;
  npu_status st = npuX_operands_bind(ic, operand_names, N_OPERANDS, 2, 0, &p->o);
  if (!st) st = npuX_attr_bool(ic, "pad_to_max_output_size", &p->pad);
  if (!st && p->o.slot[0] == NPUX_OPERAND_ABSENT)
    st = npuX_error(ic, NPU_ERR_ARG, "max_output_size is required (attribute or input 3)");
  p->value[0] = 0, p->value[1] = 0.5, p->value[2] = -INFINITY, p->value[3] = 0;
  for (int k = 0; k < N_OPERANDS && !st; k++) {
    int64_t iv;
    bool is_int, known;
    if (p->o.slot[k] == NPUX_OPERAND_ATTR)
      st = npuX_operand_scalar(ic, &p->o, operand_names, k, &p->value[k], &iv, &is_int, &known);
  }
  ic->n_outputs = 3;
  return st;
}

static npu_status infer(npuX_infer *ic, const void *params) {
  static const npu_dtype f32[] = {NPU_DTYPE_F32, NPU_DTYPE_COUNT};
  const nms_params *p = params;
  const npuG_value *boxes = &ic->in[0], *scores = &ic->in[1];
  ic->n_outputs = 3;
  ic->out[0] = (npuG_value){.dtype = NPU_DTYPE_I32, .ndim = 1, .shape = {-1}};
  ic->out[1] = (npuG_value){.dtype = NPU_DTYPE_F32, .ndim = 1, .shape = {-1}};
  ic->out[2] = (npuG_value){.dtype = NPU_DTYPE_I32, .ndim = 0};
  npu_status st = npuX_check_dtype(ic, 0, f32);
  if (!st) st = npuX_check_dtype(ic, 1, f32);
  if (st) return st;
  char sb[96], ss[96];
  bool boxes_ok =
      boxes->ndim < 0 || (boxes->ndim == 2 && (boxes->shape[1] < 0 || boxes->shape[1] == 4));
  bool scores_ok = scores->ndim < 0 || scores->ndim == 1;
  int64_t nb = boxes->ndim == 2 ? boxes->shape[0] : -1;
  int64_t ns = scores->ndim == 1 ? scores->shape[0] : -1;
  if (!boxes_ok || !scores_ok || (nb >= 0 && ns >= 0 && nb != ns))
    return npuX_error(ic, NPU_ERR_SHAPE, "boxes must be (n, 4) and scores (n), got %s and %s",
                      npuX_shape(sb, boxes), npuX_shape(ss, scores));
  double v[N_OPERANDS];
  int64_t iv;
  bool known[N_OPERANDS], is_int = true;
  for (int k = 0; k < N_OPERANDS; k++) {
    known[k] = true, v[k] = p->value[k];
    if ((st = npuX_operand_scalar(ic, &p->o, operand_names, k, &v[k], &iv, &is_int, &known[k])))
      return st;
    if (k == 0 && !is_int) return npuX_error(ic, NPU_ERR_DTYPE, "max_output_size must be an integer");
    if (k == 0 && known[0]) v[0] = (double)iv;
  }
  if (known[0] && (v[0] < 0 || v[0] > INT32_MAX))
    return npuX_error(ic, NPU_ERR_ARG, "max_output_size %lld must be in [0, 2^31)",
                      (long long)v[0]);
  if (known[1] && !(v[1] >= 0 && v[1] <= 1))
    return npuX_error(ic, NPU_ERR_ARG, "iou_threshold %g must be in [0, 1]", v[1]);
  if (known[3] && !(v[3] >= 0))
    return npuX_error(ic, NPU_ERR_ARG, "soft_nms_sigma %g must be >= 0", v[3]);
  if (p->pad && known[0]) ic->out[0].shape[0] = ic->out[1].shape[0] = (int64_t)v[0];
  return NPU_OK;
}

/* The kernel's candidates, then room for min(n, max_output) indices and scores (max_output
   bounded by n here: the rest would be padding). */
static size_t scratch_size(const npuX_call *c) {
  int64_t n = c->in[0]->ndim == 2 ? c->in[0]->shape[0] : 0;
  size_t k = npuK_nms_scratch_size(n);
  return k + (size_t)(n > 0 ? n : 1) * (sizeof(int32_t) + sizeof(float)) + 16;
}

/* An operand at run time: its input's element 0, else its attribute's value or default. */
static double operand(const npuX_call *c, const nms_params *p, int k) {
  int slot = p->o.slot[k];
  if (slot < 0) return p->value[k];
  double v;
  int64_t iv;
  npuX_tensor_scalar(c->in[slot], &v, &iv);
  return k == 0 ? (double)iv : v;
}

static npu_status run(const npuX_call *c) {
  const nms_params *p = c->params;
  const npu_tensor *boxes = c->in[0], *scores = c->in[1];
  int64_t n = scores->shape[0], max_out = (int64_t)operand(c, p, 0);
  double iou = operand(c, p, 1), sigma = operand(c, p, 3);
  if (max_out < 0 || max_out > INT32_MAX || !(iou >= 0 && iou <= 1) || !(sigma >= 0))
    return npuC_error(c->ctx, NPU_ERR_ARG,
                      "non_max_suppression '%s': max_output_size %lld must be in [0, 2^31), "
                      "iou_threshold %g in [0, 1], soft_nms_sigma %g >= 0",
                      c->node->name, (long long)max_out, iou, sigma);
  size_t at = npuK_nms_scratch_size(n);
  int32_t *sel = (int32_t *)((char *)c->scratch + at);
  float *sel_scores = (float *)(sel + (n > 0 ? n : 1));
  int64_t count = npuK_non_max_suppression_f32(n, boxes->data, scores->data, max_out, (float)iou,
                                               (float)operand(c, p, 2), (float)sigma, sel,
                                               sel_scores, c->scratch);
  int64_t len = p->pad ? max_out : count;
  npu_status st = npuX_output(c, 0, 1, &len);
  if (!st) st = npuX_output(c, 1, 1, &len);
  if (st) return st;
  int32_t *idx = c->out[0]->data;
  float *sc = c->out[1]->data;
  for (int64_t k = 0; k < len; k++) {
    idx[k] = k < count ? sel[k] : 0;
    sc[k] = k < count ? sel_scores[k] : 0.0f;
  }
  *(int32_t *)c->out[2]->data = (int32_t)count;
  return NPU_OK;
}

const npu_op_def npuX_op_non_max_suppression = {
    .name = "non_max_suppression", .tf_type = "NonMaxSuppressionV5",
    .args = "max_output_size,iou_threshold,score_threshold,soft_nms_sigma", .min_inputs = 2,
    .max_inputs = 6, .n_outputs = 3, .prec = NPUX_PREC_BLOCK, .flags = NPUX_F_DATA_SHAPE,
    .parse = parse, .infer = infer, .scratch_size = scratch_size, .run = run,
    .tf_const_inputs = "max_output_size,iou_threshold,score_threshold,soft_nms_sigma"};
