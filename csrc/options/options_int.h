/*
 * options_int.h — fast internal access to a session's options, for the session, the compiler
 * and the executor (npuO_ prefix).
 *
 * Ids come from options.def: NPUO_<option name>, spelled exactly like the option (lowercase) so
 * that `grep precision_mode` finds every reader.  Accessors take an id, never a string, and do
 * no allocation: hot code may call them freely.
 *
 * Reading rules (the same as the public getters):
 *  - the value set explicitly (a setter) wins, then the environment (npu_options_apply_env),
 *    then the default of the table — for precision_mode, precision_mode_v2 and
 *    enable_small_channel the default depends on graph_run_mode (0 = online inference);
 *  - an option without a default reads 0 / False / "" — npuO_is_set tells "unset" apart;
 *  - npuO_int on a bool option gives 0/1; npuO_int on a string or float option gives 0
 *    (a programming error: use the accessor of the option's type).
 *
 * Session creation, in this order:
 *     npu_options_copy(user_opts)            (or npu_options_new when NULL)
 *     npu_options_apply_env(copy, NULL, NULL) (explicit option > environment > default)
 *     npu_options_check(copy)                (cross-option rules AND the device id range)
 * then npuO_device_id(copy) is the virtual device to use.
 */
#ifndef NPU_OPTIONS_INT_H
#define NPU_OPTIONS_INT_H

#include "core/npu_int.h"

typedef enum npu_option_id {
#define NPU_OPTION(name, ...) NPUO_##name,
#include "options/options.def"
  NPUO_COUNT
} npu_option_id;

/* Environment variables (NPU_ENV lines of options.def): NPUO_ENV_<VARIABLE>. */
typedef enum npuO_env_id {
#define NPU_ENV(var, ...) NPUO_ENV_##var,
#include "options/options.def"
  NPUO_ENV_COUNT
} npuO_env_id;

/* Where a value comes from. */
typedef enum npuO_source {
  NPUO_SRC_DEFAULT = 0,
  NPUO_SRC_USER = 1, /* a setter (parameter_map) */
  NPUO_SRC_ENV = 2   /* npu_options_apply_env */
} npuO_source;

int64_t npuO_int(const npu_options *o, npu_option_id id);
int npuO_bool(const npu_options *o, npu_option_id id);
double npuO_float(const npu_options *o, npu_option_id id);
/* Borrowed: valid until that option is set again or o is released. Never NULL. */
const char *npuO_string(const npu_options *o, npu_option_id id);
int npuO_is_set(const npu_options *o, npu_option_id id);
npuO_source npuO_source_of(const npu_options *o, npu_option_id id);

/* Shorthands for the options with a real effect. */
static inline int npuO_training(const npu_options *o) {
  return npuO_int(o, NPUO_graph_run_mode) != 0;
}
static inline int npuO_device_id(const npu_options *o) {
  return (int)npuO_int(o, NPUO_session_device_id);
}
static inline int npuO_deterministic(const npu_options *o) {
  return npuO_int(o, NPUO_deterministic) != 0;
}
static inline int npuO_use_off_line(const npu_options *o) {
  return npuO_bool(o, NPUO_use_off_line);
}

/* Environment-only settings (ASCEND_GLOBAL_LOG_LEVEL, ASCEND_WORK_PATH, ...), as read by the
   last npu_options_apply_env.  Variables that stand for an option are read through the option;
   these are also recorded here (the raw value), whether or not the option won. */
int npuO_env_is_set(const npu_options *o, npuO_env_id id);
int64_t npuO_env_int(const npu_options *o, npuO_env_id id); /* 0 when unset */
const char *npuO_env_string(const npu_options *o, npuO_env_id id); /* "" when unset */

/* The directory that files written without a path of their own go into (fusion_result.json's
   FE/<pid>/, extra-info/, PROF_*, tmp_weight_*, DUMP_GE_GRAPH's files, the AOE records):
   $ASCEND_WORK_PATH when set, else "npu_out" in the working directory, so that nothing lands
   loose there.  Not made here: each writer makes what it needs when it first writes, so a
   session that writes nothing leaves nothing.  *from (when from is not NULL): where the
   directory came from, for messages ("ASCEND_WORK_PATH", "npu_out (ASCEND_WORK_PATH is
   unset)"). */
const char *npuO_output_dir(const npu_options *o, const char **from);

/* One field of the effective profiling_options as written (string values without their
   quotes, escapes kept) into buf, "" when absent; the older colon form ("training_trace:
   task_trace") reads "on" for a listed switch.  exec/profile.c reads its fields here. */
void npuO_profiling_field(const npu_options *o, const char *field, char *buf, size_t n);

/* The splitters the value checks use, for code that parses a value they accepted (the
   dynamic dimension profiles, compile/dims_profiles.c): npuO_for_pieces calls fn on each piece
   of [p, e) between the `sep` characters and returns the first nonzero result (0 when all
   pieces pass; fn writes a reason into why[n]); npuO_span_int reads [p, e), blanks trimmed, as
   a decimal integer (0, or -1 when it is not one). */
typedef int (*npuO_piece_fn)(const char *p, const char *e, void *ud, char *why, size_t n);
int npuO_for_pieces(const char *p, const char *e, char sep, npuO_piece_fn fn, void *ud,
                    char *why, size_t n);
int npuO_span_int(const char *p, const char *e, int64_t *v);

/* The context the options were created on (borrowed). */
npu_context *npuO_context(const npu_options *o);

/* The session's device-id check, also run by npu_options_check: NPU_ERR_OPTION when the
   effective session_device_id is not below npu_context_n_devices(ctx) (the message names
   ASCEND_DEVICE_ID when the id came from the environment). */
npu_status npuO_check_device(const npu_options *o, npu_context *ctx);

#endif
