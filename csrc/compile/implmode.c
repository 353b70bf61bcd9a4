/* implmode.c — operator implementation modes.  Not yet written: high_precision everywhere. */
#include "compile/passes.h"

npu_status npuP_select_impl(npuP_build *b) { (void)b; return NPU_OK; }

npu_status npuP_impl_config_new(npu_context *ctx, const npu_options *o,
                                struct npuP_impl_config **out) {
  (void)ctx, (void)o;
  *out = NULL;
  return NPU_OK;
}
void npuP_impl_config_free(npu_context *ctx, struct npuP_impl_config *c) { (void)ctx, (void)c; }
