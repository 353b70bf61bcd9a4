/*
 * config.c — what compiling needs from a session's options, read once per session (or per
 * graph with set_graph_exec_config).  Files the options name are parsed here by the pass that
 * uses them, so a malformed file fails npu_session_new with a message naming file and line.
 */
#include <stdlib.h>
#include <string.h>

#include "compile/precision.h"
#include "exec/exec.h"
#include "options/options_int.h"

/* NPU_VERIFY_PLANS=1: a developer's switch (make test sets it), not an option of the
   reference: the verifier checks our compiler, not the user's graph. */
static bool verify_plans(void) {
  const char *v = getenv("NPU_VERIFY_PLANS");
  return v && strcmp(v, "1") == 0;
}

npu_status npuP_config_init(npu_context *ctx, const npu_options *o, npuP_config *cfg) {
  *cfg = (npuP_config){
      .reference = !npuO_bool(o, NPUO_use_off_line),
      .fold = npuO_bool(o, NPUO_oo_constant_folding),
      .training = npuO_training(o),
      .iterations_per_loop = npuO_int(o, NPUO_iterations_per_loop),
      .precision = (int)npuP_precision_mode(o),
      .options = o,
      .verify = verify_plans(),
  };
  npu_status s = npuP_fusion_config_new(ctx, o, &cfg->fusion);
  if (!s) s = npuP_mix_config_new(ctx, o, &cfg->mix);
  if (!s) s = npuP_impl_config_new(ctx, o, &cfg->impl);
  if (s) npuP_config_free(ctx, cfg);
  return s;
}

void npuP_config_free(npu_context *ctx, npuP_config *cfg) {
  npuP_fusion_config_free(ctx, cfg->fusion);
  npuP_mix_config_free(ctx, cfg->mix);
  npuP_impl_config_free(ctx, cfg->impl);
  cfg->fusion = NULL;
  cfg->mix = NULL;
  cfg->impl = NULL;
}
