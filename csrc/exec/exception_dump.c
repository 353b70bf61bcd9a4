/*
 * exception_dump.c — enable_exception_dump: what the operator whose kernel failed at run time
 * was given.  On the reference an AI Core exception dumps the failing operator; here a kernel
 * fails by returning an error status (an index out of range in gather, gather_nd, one_hot; a
 * host op's Lua error; ...), and npuE_run calls npuE_exception_dump before it returns that
 * status.  docs/debugging.md ("Exception dump") is the user's side of this file.
 *
 * Directory (made when missing; <base> stands for the script's directory, as ASCEND_WORK_PATH
 * does everywhere in this library):
 *   mode 1 (common ExceptionDump)  <base>/extra-info/
 *          <base> = $NPU_COLLECT_PATH, else $ASCEND_WORK_PATH, else ./npu_out (npuO_output_dir)
 *   mode 2 (LiteExceptionDump)     <base>/extra-info/data-dump/<device_id>/
 *          <base> = $ASCEND_WORK_PATH, else ./npu_out
 *   NPU_COLLECT_PATH set makes mode 2 mode 1 (as the reference says); 0 dumps nothing.
 * Files, named as the data dump names them (exec/dump.c: op type, op name sanitised, task =
 * the step's index in the plan, timestamp = microseconds since the Unix epoch):
 *   {op_type}.{op_name}.{task}.{timestamp}.input.{i}.npy   each input, as stored
 *   {op_type}.{op_name}.{task}.{timestamp}.json            the description
 * The outputs hold whatever the kernel left (garbage): only their descriptions are written.
 *
 * Invariants: nothing is read or done unless a kernel failed (the run path pays nothing); the
 * caller's status and the context's message are what they were (the message is saved and put
 * back: the helpers used here set it when they fail); a file that cannot be written is
 * reported through the log hook (npuC_log, level 2) and the other files are still tried;
 * everything allocated here is freed before returning.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "exec/observe.h"
#include "options/options_int.h"

#define XDUMP_PATH_MAX 4096
#define XDUMP_NAME_MAX 256

static const char what[] = "enable_exception_dump";

/* The directory for mode (1 or 2), per the table above; false when it does not fit.  *base and
   *from: the base directory and where it came from, for messages. */
static bool dump_dir(const npu_options *o, int mode, char *dir, size_t n, const char **base,
                     const char **from) {
  const char *collect = npuO_env_string(o, NPUO_ENV_NPU_COLLECT_PATH);
  if (mode == 1 && *collect) *base = collect, *from = "NPU_COLLECT_PATH";
  else *base = npuO_output_dir(o, from);
  size_t len = strlen(*base);
  while (len > 1 && (*base)[len - 1] == '/') len--;
  int w = mode == 1 ? snprintf(dir, n, "%.*s/extra-info", (int)len, *base)
                    : snprintf(dir, n, "%.*s/extra-info/data-dump/%d", (int)len, *base,
                               npuO_device_id(o));
  return w >= 0 && (size_t)w < n;
}

/* The shape of t (else of v) into the array a (NULL: memory ran out before); false when memory
   ran out. */
static bool shape_json(cJSON *a, const npu_tensor *t, const npuG_value *v) {
  int ndim = t ? t->ndim : v->ndim;
  if (!a) return false;
  for (int i = 0; i < ndim; i++) {
    cJSON *n = cJSON_CreateNumber((double)(t ? t->shape[i] : v->shape[i]));
    if (!cJSON_AddItemToArray(a, n)) {
      cJSON_Delete(n); /* NULL, or not added */
      return false;
    }
  }
  return true;
}

/* {"index", "dtype", "shape", "format", ["file"]}; NULL when memory ran out. */
static cJSON *tensor_json(int index, const npu_tensor *t, const npuG_value *v, const char *file) {
  cJSON *j = cJSON_CreateObject();
  bool ok = j && cJSON_AddNumberToObject(j, "index", index) &&
            cJSON_AddStringToObject(j, "dtype", npu_dtype_name(t ? t->dtype : v->dtype)) &&
            shape_json(cJSON_AddArrayToObject(j, "shape"), t, v) &&
            cJSON_AddStringToObject(j, "format", "ND") &&
            (!file || cJSON_AddStringToObject(j, "file", file));
  if (ok) return j;
  cJSON_Delete(j);
  return NULL;
}

static bool write_text(const char *path, const char *text, const char **why) {
  FILE *f = fopen(path, "w");
  if (!f) {
    *why = strerror(errno);
    return false;
  }
  size_t n = strlen(text);
  bool ok = fwrite(text, 1, n, f) == n && fputc('\n', f) != EOF;
  int err = errno;
  if (fclose(f) != 0 && ok) ok = false, err = errno;
  if (!ok) {
    remove(path);
    *why = strerror(err);
  }
  return ok;
}

void npuE_exception_dump(npuE_state *st, const npuE_plan *p, int k, npu_status s) {
  npu_context *ctx = st->ctx;
  const npu_options *o = p->config ? p->config->options : NULL;
  if (!o) return;
  int mode = (int)npuO_int(o, NPUO_enable_exception_dump);
  if (mode == 0) return;
  if (*npuO_env_string(o, NPUO_ENV_NPU_COLLECT_PATH)) mode = 1;

  /* the run's message, put back at the end whatever the helpers below do to it */
  char saved[NPU_ERRMSG_SIZE];
  memcpy(saved, ctx->errmsg, sizeof saved);

  const npu_graph *g = st->graph;
  const npuE_step *step = p->all_steps[k];
  const npuG_node *node = &g->nodes[step->node];
  /* named after the node whose value it outputs (a fused step: the last node it absorbed), as
     the data dump names a step */
  const npuG_node *named = &g->nodes[npuE_dump_step_node(p, step)];
  /* path has room for dir and both names: a file name never truncates */
  char type[XDUMP_NAME_MAX], name[XDUMP_NAME_MAX], dir[XDUMP_PATH_MAX];
  char path[XDUMP_PATH_MAX + 2 * XDUMP_NAME_MAX + 64];
  npuE_dump_sanitise(type, sizeof type, step->def->name);
  npuE_dump_step_name(name, sizeof name, g, p, step, &st->nest); /* with its loop iterations */
  int64_t us = npuE_dump_now_us();
  int n_written = 0, n_failed = 0;
  cJSON *root = NULL;

  const char *base, *from;
  if (!dump_dir(o, mode, dir, sizeof dir, &base, &from)) {
    /* the base last: a long one is cut from the message's end */
    npuC_log(ctx, 2, "%s: %s '%s' not dumped: its directory is too long under %s '%s'", what,
             step->def->name, node->name, from, base);
    goto done;
  }
  if (npuC_make_dirs(ctx, dir, what)) {
    npuC_log(ctx, 2, "%s: %s '%s' not dumped: %s", what, step->def->name, node->name,
             ctx->errmsg);
    goto done;
  }
  char us_text[24], it_text[24];
  snprintf(us_text, sizeof us_text, "%" PRId64, us);
  snprintf(it_text, sizeof it_text, "%" PRIu64, st->n_iterations);
  root = cJSON_CreateObject();
  bool ok = root && cJSON_AddStringToObject(root, "op_type", step->def->name) &&
            cJSON_AddStringToObject(root, "op_name", named->name) &&
            cJSON_AddStringToObject(root, "node", node->name) &&
            cJSON_AddNumberToObject(root, "task", k) &&
            cJSON_AddRawToObject(root, "timestamp_us", us_text) && /* 16 digits: no double */
            cJSON_AddRawToObject(root, "iteration", it_text) &&
            cJSON_AddNumberToObject(root, "model_id", p->id) &&
            cJSON_AddNumberToObject(root, "device_id", npuO_device_id(o)) &&
            cJSON_AddNumberToObject(root, "mode", mode) &&
            cJSON_AddStringToObject(root, "status", npu_status_name(s)) &&
            cJSON_AddStringToObject(root, "message", saved) &&
            cJSON_AddNumberToObject(root, "workspace_bytes", (double)step->scratch_size);
  /* inside while loops: their iterations, outermost first */
  cJSON *loops = ok && st->nest.depth ? cJSON_AddArrayToObject(root, "loop_iterations") : NULL;
  for (int i = 0; loops && i < st->nest.depth && i < NPUE_MAX_LOOPS; i++) {
    cJSON *n = cJSON_CreateNumber((double)st->nest.iteration[i]);
    if (!cJSON_AddItemToArray(loops, n)) {
      cJSON_Delete(n);
      ok = false;
      break;
    }
  }
  if (st->nest.depth && !loops) ok = false;
  cJSON *inputs = ok ? cJSON_AddArrayToObject(root, "inputs") : NULL;
  cJSON *outputs = inputs ? cJSON_AddArrayToObject(root, "outputs") : NULL;
  ok = outputs != NULL;

  /* the inputs' data, as stored (the slots, not the float32 copies a widened step reads) */
  for (int i = 0; i < step->n_in; i++) {
    const npu_tensor *t = p->slots[step->in[i]];
    const char *file = NULL;
    if (t) {
      npuE_dump_file_path(path, sizeof path, dir, type, name, k, us, "input", i);
      if (npuE_dump_write_npy(ctx, t, path)) {
        npuC_log(ctx, 2, "%s: input %d of %s '%s' not dumped: %s", what, i, step->def->name,
                 node->name, ctx->errmsg);
        n_failed++;
      } else {
        file = strrchr(path, '/') + 1;
        n_written++;
      }
    }
    if (ok) ok = cJSON_AddItemToArray(inputs, tensor_json(i, t, &p->values[step->in[i]], file));
  }
  for (int i = 0; i < step->n_out && ok; i++)
    ok = cJSON_AddItemToArray(outputs, tensor_json(i, NULL, &p->values[step->out[i]], NULL));

  char *text = ok ? cJSON_Print(root) : NULL;
  npuE_dump_file_path(path, sizeof path, dir, type, name, k, us, "json", -1);
  const char *why = "out of memory";
  if (!text || !write_text(path, text, &why)) {
    npuC_log(ctx, 2, "%s: the description of %s '%s' not written to '%s': %s", what,
             step->def->name, node->name, dir, why);
    n_failed++;
  } else {
    n_written++;
  }
  cJSON_free(text);
  npuC_log(ctx, n_failed ? 2 : 1,
           "%s: %s '%s' (task %d) failed with %s; %d file%s written to '%s'%s",
           what, step->def->name, node->name, k, npu_status_name(s), n_written,
           n_written == 1 ? "" : "s", dir, n_failed ? ", some could not be" : "");
done:
  cJSON_Delete(root);
  memcpy(ctx->errmsg, saved, sizeof saved);
}
