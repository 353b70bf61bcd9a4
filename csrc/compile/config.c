/*
 * config.c — what compiling needs from a session's options, read once per session (or per
 * graph with set_graph_exec_config).  Files the options name are parsed here by the pass that
 * uses them, so a malformed file fails npu_session_new with a message naming file and line.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <stdlib.h>
#include <string.h>

#include "compile/precision.h"
#include "compile/compile.h"
#include "compile/tuning.h"
#include "options/options_int.h"

/* accelerate_train_mode, validated by the option table: "fast|step|0.9" runs the steps before
   90 % of the total with the trust-list ops in float16 (fast1: bfloat16), as allow_mix_precision
   does, the rest in the mode's own precision; "fast|loss|1.05" stays reduced while the loss is
   above 1.05 x the target.  The session (session.c) reads the progress and switches. */
static void read_accelerate(const npu_options *o, npuP_config *cfg) {
  const char *accel = npuO_is_set(o, NPUO_accelerate_train_mode)
                          ? npuO_string(o, NPUO_accelerate_train_mode)
                          : npuO_string(o, NPUO_experimental_accelerate_train_mode);
  if (!*accel) return;
  cfg->accel.on = true;
  cfg->accel.reduced = strncmp(accel, "fast1|", 6) == 0 ? NPUP_MIX_BF16 : NPUP_MIX_FP16;
  cfg->accel.by_loss = strstr(accel, "|loss|") != NULL;
  cfg->accel.ratio = strtod(strrchr(accel, '|') + 1, NULL);
  cfg->accel.original = cfg->precision;
}

/* NPU_VERIFY_PLANS=1: a developer's switch (make test sets it), not an option of the
   reference: the verifier checks our compiler, not the user's graph. */
static bool verify_plans(void) {
  const char *v = getenv("NPU_VERIFY_PLANS");
  return v && strcmp(v, "1") == 0;
}

/* compile_dynamic_mode generalises every input from the first run (000: "the first iteration
   generalizes all input shapes to -1, and the shape_generalization_mode setting does not take
   effect"); else shape_generalization_mode, which the option table lets leave STRICT only with
   jit_compile=true. */
static int generalize_mode(const npu_options *o) {
  if (npuO_bool(o, NPUO_compile_dynamic_mode)) return NPUP_GEN_ALL;
  const char *m = npuO_string(o, NPUO_shape_generalization_mode);
  return !strcmp(m, "FULL") ? NPUP_GEN_FULL : !strcmp(m, "ADAPTIVE") ? NPUP_GEN_ADAPTIVE
                                                                      : NPUP_GEN_STRICT;
}

npu_status npuP_config_init(npu_context *ctx, const npu_options *o, npuP_config *cfg) {
  /* 004: "the configured cache directory must exist. Otherwise, the compilation fails." */
  const char *cache_dir = npuO_string(o, NPUO_graph_compiler_cache_dir);
  struct stat sb;
  if (*cache_dir && (stat(cache_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
    *cfg = (npuP_config){0};
    return npuC_error(ctx, NPU_ERR_IO,
                      "graph_compiler_cache_dir '%s' is not an existing directory (004: the "
                      "cache directory must exist)", cache_dir);
  }
  *cfg = (npuP_config){
      .reference = !npuO_bool(o, NPUO_use_off_line),
      .fold = npuO_bool(o, NPUO_oo_constant_folding),
      .any_feed_dims = npuO_bool(o, NPUO_compile_dynamic_mode),
      .generalize = generalize_mode(o),
      .skip_empty = !npuO_bool(o, NPUO_all_tensor_not_empty),
      .training = npuO_training(o),
      .hcom_parallel = npuO_bool(o, NPUO_hcom_parallel),
      .iterations_per_loop = npuO_int(o, NPUO_iterations_per_loop),
      .precision = (int)npuP_precision_mode(o),
      .options = o,
      .verify = verify_plans(),
      .mix_compile = npuO_bool(o, NPUO_mix_compile_mode),
      .in_out_pair = npuO_string(o, NPUO_in_out_pair),
      .in_out_pair_device = npuO_bool(o, NPUO_in_out_pair_flag),
  };
  read_accelerate(o, cfg);
  npu_status s = npuP_fusion_config_new(ctx, o, &cfg->fusion);
  if (!s) s = npuP_mix_config_new(ctx, o, &cfg->mix);
  if (!s) s = npuP_impl_config_new(ctx, o, &cfg->impl);
  if (!s) s = npuP_tune_config_new(ctx, o, &cfg->tune);
  if (s) npuP_config_free(ctx, cfg);
  return s;
}

void npuP_config_free(npu_context *ctx, npuP_config *cfg) {
  npuP_fusion_config_free(ctx, cfg->fusion);
  npuP_mix_config_free(ctx, cfg->mix);
  npuP_impl_config_free(ctx, cfg->impl);
  npuP_tune_config_free(ctx, cfg->tune);
  cfg->tune = NULL;
  cfg->fusion = NULL;
  cfg->mix = NULL;
  cfg->impl = NULL;
}
