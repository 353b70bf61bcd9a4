/* test_options.c — the options layer without Lua: the table, typed set/get, the internal
 * accessors, the environment overlay, the rules, and an allocation-failure sweep (every
 * allocation failed in turn: a clean status, nothing changed, zero live bytes at the end). */
#include <string.h>

#include "npu_test.h"
#include "options/options_int.h"

static const char *fake_env(const char *name, void *ud) {
  const char *const *kv = ud;
  for (; kv[0]; kv += 2)
    if (strcmp(kv[0], name) == 0) return kv[1];
  return NULL;
}

static void test_table(void) {
  CHECK_EQ_I64(npu_option_count(), NPUO_COUNT);
  CHECK(strcmp(npu_option_at(NPUO_precision_mode)->name, "precision_mode") == 0);
  CHECK(npu_option_find("graph_run_mode") == npu_option_at(NPUO_graph_run_mode));
  CHECK(npu_option_find("nope") == NULL);
  CHECK(npu_option_at(-1) == NULL && npu_option_at(NPUO_COUNT) == NULL);
  CHECK(strcmp(npu_option_suggest("precison_mode"), "precision_mode") == 0);
  CHECK(npu_option_suggest("zzzzzzzzzzzzzzzzzzzz") == NULL);
  CHECK(npu_option_env_count() == NPUO_ENV_COUNT);
  CHECK(strcmp(npu_option_env_at(NPUO_ENV_ASCEND_DEVICE_ID)->option, "session_device_id") == 0);
  CHECK(npu_option_env_at(NPUO_ENV_ASCEND_GLOBAL_LOG_LEVEL)->option == NULL);
  CHECK(npu_option_rule_count() > 40);
  for (int i = 0; i < npu_option_rule_count(); i++) CHECK(npu_option_rule_at(i)->a != NULL);
}

static void test_set_get(npu_context *ctx) {
  npu_options *o = NULL, *c = NULL;
  const char *s = NULL;
  int64_t i = -1;
  int b = -1;
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  /* defaults, mode-dependent */
  CHECK(npuO_training(o) && !npuO_is_set(o, NPUO_graph_run_mode));
  CHECK(strcmp(npuO_string(o, NPUO_precision_mode), "must_keep_origin_dtype") == 0);
  CHECK(npuO_use_off_line(o) && !npuO_deterministic(o) && npuO_device_id(o) == 0);
  CHECK(npu_options_set_int(o, "graph_run_mode", 0) == NPU_OK);
  CHECK(strcmp(npuO_string(o, NPUO_precision_mode), "force_fp16") == 0);
  CHECK_EQ_I64(npuO_int(o, NPUO_enable_small_channel), 1);
  /* typed setters */
  CHECK(npu_options_set_int(o, "precision_mode", 1) == NPU_ERR_OPTION);
  CHECK(strstr(npu_context_errmsg(ctx), "takes a string (.s), not an int (.i)") != NULL);
  CHECK(npu_options_set_string(o, "precison_mode", "x") == NPU_ERR_OPTION);
  CHECK(strstr(npu_context_errmsg(ctx), "did you mean 'precision_mode'?") != NULL);
  CHECK(npu_options_set_string(o, "precision_mode", "fp17") == NPU_ERR_OPTION);
  CHECK(npu_options_set_string(o, "precision_mode", NULL) == NPU_ERR_ARG);
  CHECK(npu_options_set_string(o, "precision_mode", "force_fp32") == NPU_OK);
  CHECK(npu_options_set_bool(o, "use_off_line", 0) == NPU_OK);
  CHECK(npu_options_set_float(o, "use_off_line", 1.0) == NPU_ERR_OPTION);
  CHECK(npu_options_set_int(o, "deterministic", 2) == NPU_ERR_OPTION);
  CHECK(npu_options_set_int(o, "deterministic", 1) == NPU_OK);
  CHECK(npuO_deterministic(o) && !npuO_use_off_line(o));
  CHECK(npu_options_get_string(o, "precision_mode", &s) == NPU_OK && strcmp(s, "force_fp32") == 0);
  CHECK(npu_options_get_int(o, "precision_mode", &i) == NPU_ERR_OPTION && i == 0);
  CHECK(npu_options_get_string(o, "graph_run_mode", &s) == NPU_ERR_OPTION && s == NULL);
  CHECK(npu_options_get_bool(o, "use_off_line", &b) == NPU_OK && b == 0);
  CHECK(npu_options_is_set(o, "precision_mode") && !npu_options_is_set(o, "dump_path"));
  CHECK(!npu_options_is_set(o, "no_such_option"));
  CHECK(npuO_source_of(o, NPUO_precision_mode) == NPUO_SRC_USER);
  /* copy */
  CHECK(npu_options_copy(o, &c) == NPU_OK);
  CHECK(npu_options_set_string(c, "precision_mode", "force_fp16") == NPU_OK);
  CHECK(strcmp(npuO_string(o, NPUO_precision_mode), "force_fp32") == 0);
  CHECK(strcmp(npuO_string(c, NPUO_precision_mode), "force_fp16") == 0);
  npu_options_release(c);
  npu_options_release(o);
  npu_options_release(NULL);
}

static void test_env_and_rules(npu_context *ctx) {
  npu_options *o = NULL;
  const char *env[] = {"ASCEND_DEVICE_ID", "3", "ASCEND_GLOBAL_LOG_LEVEL", "1",
                       "PROFILING_OPTIONS", "{\"output\":\"/tmp/p\"}", "ASCEND_WORK_PATH", "/w",
                       NULL, NULL};
  const char *bad[] = {"ASCEND_SLOG_PRINT_TO_STDOUT", "2", NULL, NULL};
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  CHECK(npu_options_apply_env(o, fake_env, (void *)env) == NPU_OK);
  CHECK(npuO_device_id(o) == 3 && npuO_source_of(o, NPUO_session_device_id) == NPUO_SRC_ENV);
  CHECK(npuO_env_is_set(o, NPUO_ENV_ASCEND_GLOBAL_LOG_LEVEL));
  CHECK_EQ_I64(npuO_env_int(o, NPUO_ENV_ASCEND_GLOBAL_LOG_LEVEL), 1);
  CHECK(strcmp(npuO_env_string(o, NPUO_ENV_ASCEND_WORK_PATH), "/w") == 0);
  CHECK(strcmp(npuO_string(o, NPUO_profiling_options), "{\"output\":\"/tmp/p\"}") == 0);
  CHECK(npu_options_apply_env(o, fake_env, (void *)bad) == NPU_ERR_OPTION);
  CHECK(strstr(npu_context_errmsg(ctx), "ASCEND_SLOG_PRINT_TO_STDOUT") != NULL);
  CHECK(npuO_device_id(o) == 3); /* unchanged */
  CHECK(npu_options_check(o) == NPU_OK);
  CHECK(npu_options_set_int(o, "session_device_id", 100) == NPU_OK);
  CHECK(npu_options_check(o) == NPU_ERR_OPTION);
  CHECK(npuO_check_device(o, ctx) == NPU_ERR_OPTION);
  CHECK(npu_options_set_int(o, "session_device_id", 1) == NPU_OK);
  CHECK(npu_options_set_string(o, "precision_mode", "force_fp16") == NPU_OK);
  CHECK(npu_options_set_string(o, "precision_mode_v2", "fp16") == NPU_OK);
  CHECK(npu_options_check(o) == NPU_ERR_CONFLICT);
  CHECK(strstr(npu_context_errmsg(ctx), "'precision_mode'") != NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "'precision_mode_v2'") != NULL);
  npu_options_release(o);
}

/* One scenario touching every allocating path. */
static npu_status scenario(npu_context *ctx) {
  const char *env[] = {"ASCEND_DEVICE_ID", "2", "PROFILING_OPTIONS", "{}", "JOB_ID", "j1",
                       NULL, NULL};
  npu_options *o = NULL, *c = NULL;
  npu_status st;
  if ((st = npu_options_new(ctx, &o))) return st;
  if ((st = npu_options_set_string(o, "dump_path", "/tmp/a")) ||
      (st = npu_options_set_string(o, "dump_path", "/tmp/b")) ||
      (st = npu_options_apply_env(o, fake_env, (void *)env)) ||
      (st = npu_options_copy(o, &c)) || (st = npu_options_apply_env(c, fake_env, (void *)env)) ||
      (st = npu_options_check(c))) {
    /* a failure changed nothing that was there */
    const char *d = o ? npuO_string(o, NPUO_dump_path) : "";
    if (strcmp(d, "/tmp/b") != 0 && strcmp(d, "/tmp/a") != 0 && strcmp(d, "") != 0)
      st = NPU_ERR_INTERNAL;
  }
  npu_options_release(c);
  npu_options_release(o);
  return st;
}

static npu_status sweep_run(npu_context *ctx, void *ud) {
  (void)ud;
  return scenario(ctx);
}

static void test_alloc_failure_sweep(void) {
  npu_context *ctx = NULL;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  CHECK(scenario(ctx) == NPU_OK);
  int n_failed = sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_run});
  CHECK(n_failed >= 8);
  npu_context_release(ctx);
}

int main(void) {
  npu_context *ctx = NULL;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  test_table();
  test_set_get(ctx);
  test_env_and_rules(ctx);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
  test_alloc_failure_sweep();
  return check_summary("test_options");
}
