/*
 * precision.c — what the precision modes (precision_mode / precision_mode_v2) do to a plan.
 *
 * The device computes in float32 or float64.  A mode that puts an op in float16 (or bfloat16)
 * is carried out by rounding: the op's float32 inputs are rounded to float16 before the kernel
 * reads them, and its float32 outputs are rounded after it writes them.  That is exactly what a
 * float16 tensor would hold; the arithmetic inside the kernel stays float32 (the accumulation a
 * cube unit does in float32 anyway).  Which ops are rounded follows 000:
 *
 *   must_keep_origin_dtype, origin,     nothing changes
 *   allow_fp32_to_bf16                  (every op here supports float32)
 *   force_fp16, fp16                    every op: float16 in, float16 out
 *   allow_fp32_to_fp16                  matrix (cube, trust-list) ops: float16 in and out;
 *                                       vector ops keep float32
 *   force_fp32, cube_fp16in_fp32out     cube ops: float16 in, float32 out
 *   allow_mix_precision(_fp16),         trust-list ops: float16 (bfloat16) in and out; block
 *   mixed_float16 / _bf16, mixed_bfloat16   and gray ops keep float32 (gray ops following their
 *                                       upstream is part of the full precision pass, not here)
 *
 * The defaults depend on graph_run_mode: force_fp16 for online inference (0), and
 * must_keep_origin_dtype for training (1), as 000 gives them for current devices.
 */
#include <string.h>

#include "compile/precision.h"
#include "compile/passes.h"
#include "options/options_int.h"

static const struct {
  const char *name;
  npuP_precision mode;
} names[] = {
    {"must_keep_origin_dtype", NPUP_ORIGIN},     {"origin", NPUP_ORIGIN},
    {"allow_fp32_to_bf16", NPUP_ORIGIN},         {"force_fp16", NPUP_FORCE_FP16},
    {"fp16", NPUP_FORCE_FP16},                   {"allow_fp32_to_fp16", NPUP_FP32_TO_FP16},
    {"force_fp32", NPUP_CUBE_FP16_IN},           {"cube_fp16in_fp32out", NPUP_CUBE_FP16_IN},
    {"allow_mix_precision", NPUP_MIX_FP16},      {"allow_mix_precision_fp16", NPUP_MIX_FP16},
    {"mixed_float16", NPUP_MIX_FP16},            {"allow_mix_precision_bf16", NPUP_MIX_BF16},
    {"mixed_bfloat16", NPUP_MIX_BF16},
};

npuP_precision npuP_precision_mode(const npu_options *o) {
  /* The two options cannot both be set (npu_options_check); an unset precision_mode_v2 leaves
     precision_mode, whose default follows graph_run_mode. */
  const char *v = npuO_is_set(o, NPUO_precision_mode_v2) ? npuO_string(o, NPUO_precision_mode_v2)
                                                         : npuO_string(o, NPUO_precision_mode);
  for (size_t i = 0; i < npu_countof(names); i++)
    if (strcmp(v, names[i].name) == 0) return names[i].mode;
  return NPUP_ORIGIN;
}

void npuP_rounding(npuP_precision mode, const npu_op_def *def, int *round_in, int *round_out) {
  *round_in = *round_out = -1;
  if (def->kind != NPUX_KIND_KERNEL) return;
  bool cube = def->prec == NPUX_PREC_TRUST;
  switch (mode) {
  case NPUP_FORCE_FP16: *round_in = *round_out = NPUK_F16; break;
  case NPUP_FP32_TO_FP16:
  case NPUP_MIX_FP16:
    if (cube) *round_in = *round_out = NPUK_F16;
    break;
  case NPUP_MIX_BF16:
    if (cube) *round_in = *round_out = NPUK_BF16;
    break;
  case NPUP_CUBE_FP16_IN:
    if (cube) *round_in = NPUK_F16;
    break;
  default: break;
  }
}

/* The precision pass: for now the rounding chosen per step in emit_step stands. */
npu_status npuP_assign_precision(npuP_build *b) { (void)b; return NPU_OK; }

npu_status npuP_mix_config_new(npu_context *ctx, const npu_options *o,
                               struct npuP_mix_config **out) {
  (void)ctx, (void)o;
  *out = NULL;
  return NPU_OK;
}
void npuP_mix_config_free(npu_context *ctx, struct npuP_mix_config *c) { (void)ctx, (void)c; }
