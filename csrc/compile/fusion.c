/* fusion.c — fusion passes (passes.def).  Not yet written: the plan runs unfused. */
#include "compile/passes.h"

npu_status npuP_fuse(npuP_build *b) { (void)b; return NPU_OK; }

npu_status npuP_fusion_config_new(npu_context *ctx, const npu_options *o,
                                  struct npuP_fusion_config **out) {
  (void)ctx, (void)o;
  *out = NULL;
  return NPU_OK;
}
void npuP_fusion_config_free(npu_context *ctx, struct npuP_fusion_config *c) { (void)ctx, (void)c; }
