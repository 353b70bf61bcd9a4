/*
 * tuning.h — AOE made real on the CPU device (compile/tuning.c): the options aoe_mode,
 * work_path, aoe_config_file, op_compiler_cache_mode, op_compiler_cache_dir and the
 * environment variables ASCEND_MAX_OP_CACHE_SIZE and ASCEND_REMAIN_CACHE_SIZE_RATIO.
 *
 * What can be tuned here (the device's real choices): a step's algorithm (conv2d: im2col or
 * Winograd F(2x2, 3x3); matmul: sgemm or rows as sgemv), the threads a step runs on, and, for
 * a whole plan, which fusion passes take effect.  Tuning times the candidates on synthetic
 * inputs of the step's shapes while compiling and keeps the fastest in a tuning record; a
 * record found later is applied without timing.
 *
 * Records live in two stores with one format (JSON Lines, docs/compiler.md "Tuning"): the AOE
 * result file <work_path>/npu_aoe_tuning.jsonl and the operator cache
 * <op_compiler_cache_dir | $ASCEND_CACHE_PATH | $HOME/atc_data>/kernel_cache/npu_op_cache.jsonl,
 * whose size is bounded and aged.  Each line carries a checksum and the fingerprint of the
 * library, OpenBLAS and CPU that timed it; a corrupt line is ignored (and dropped at the next
 * write), a stale one (another fingerprint or format) ignored and replaced when tuning.
 */
#ifndef NPU_TUNING_H
#define NPU_TUNING_H
#include "compile/passes.h"

/* npuE_step.tuned */
enum { NPUP_TUNED_NONE = 0, NPUP_TUNED_TIMED = 1, NPUP_TUNED_RECORD = 2 };

typedef struct npuP_tune_config npuP_tune_config;

/* From checked options: NULL out when neither AOE nor the operator cache can do anything
   (aoe_mode unset, work_path unset, cache disabled).  Parses aoe_config_file (NPU_ERR_FORMAT /
   NPU_ERR_NOT_FOUND naming it), checks work_path exists when aoe_mode is set (NPU_ERR_IO), and
   under op_compiler_cache_mode=force removes the cache file. */
npu_status npuP_tune_config_new(npu_context *ctx, const npu_options *o, npuP_tune_config **out);
void npuP_tune_config_free(npu_context *ctx, npuP_tune_config *c);

/* The operator pass (after implementation selection, before memory planning): applies records
   to the plan's steps, those nested in cond / while steps included, and, under aoe_mode 2,
   times the steps without one. */
npu_status npuP_tune_steps(npuP_build *b);

/* Subgraph tuning (aoe_mode 1) and subgraph records: the whole-plan choice.  key: the
   signature's description (compile/plan.c); *fusion_off: the passes a record turns off (bit i:
   pass i of passes.def), *found whether there is one. */
npu_status npuP_tune_subgraph_lookup(npuP_build *b, const char *key, unsigned *fusion_off,
                                     bool *found);
/* Times the n plans (compiled with fusion_off[i]) on synthetic inputs, interleaved, and
   records the winner's mask; returns its index in *best. */
npu_status npuP_tune_subgraph_time(npuP_build *b, const char *key, npuE_plan *const *plans,
                                   const unsigned *fusion_off, int n, int *best);
/* Whether subgraph tuning (aoe_mode 1) is on. */
bool npuP_tune_subgraph_on(const npuP_config *cfg);
bool npuP_tune_records_on(const npuP_config *cfg);

/* compile/fusion.c: the pass's index in passes.def by name (-1 when none), their count and
   names. */
int npuP_fusion_pass_index(const char *name);
int npuP_fusion_pass_count(void);
const char *npuP_fusion_pass_name(int i);
#endif
