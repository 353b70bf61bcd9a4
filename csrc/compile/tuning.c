/*
 * tuning.c — AOE made real (compile/tuning.h): tuning records, the operator cache, and the
 * timing of candidates on synthetic inputs.
 *
 * Candidates (what the device can really choose, each within the accuracy its kernel states):
 *   conv2d, fused_conv2d   im2col, and Winograd F(2x2, 3x3) where it fits (3x3, stride 1,
 *                          float32) and the session allows it: the step's implementation mode
 *                          is high_performance (op_select_implmode, op_precision_mode), or
 *                          aoe_config_file's tune_optimization_level is "O1", which widens
 *                          the candidates (docs/numerics.md gives Winograd's bound);
 *   conv2d_backprop_input  its own kernel ("default": at stride 1 the direct kernel or im2col on
 *                          the turned filter, else the scatter), and Winograd at 3x3 stride 1,
 *                          float32, under the same gate as conv2d's;
 *   matmul, fused_matmul   for at most GEMV_ROWS rows: sgemm, or each row as sgemv (the same
 *                          float32 sum over k, other order); a step given the native bfloat16
 *                          GEMM (bf16dot: A and B stored bfloat16, the CPU has AVX512_BF16)
 *                          against widening its operands for sgemm / sgemv (the GEMV rule's
 *                          choice, then the other for few rows), timed on bfloat16 operands;
 *   fused_apply_gradient_descent  (ApplyGradientDescentFusionPass: a weight gradient's matmul
 *                          with the update applied block by block) the matmul's candidates
 *                          above, timed on the fused step itself, update included: the
 *                          matmul it absorbed is gone from the plan, and its GEMM runs here
 *                          in blocks, each updating the variable while in cache, so a
 *                          record of the plain matmul would time another thing;
 *   these and depthwise_conv2d, fused_depthwise_conv2d, max_pool, avg_pool
 *                          the threads the step runs on (all, half, one): the kernels give the
 *                          same bits at any thread count (docs/numerics.md, Determinism).
 * Only float32 steps with fixed shapes are tuned (no dynamic or float16-stored operands), but
 * for two kinds of steps the precision modes store reduced: GEMM steps the compiler gave the
 * native bfloat16 GEMM (bf16dot), and convolution steps (conv2d, fused conv2d), whose reduced
 * x and y are taken as stored and other reduced operands widened as the executor widens them
 * (so direct_bf16 is timed against the widening kernels); at the top level and nested in cond
 * branches and while loops at any depth.
 *
 * Timing: a candidate runs the step's own kernel on synthetic inputs of the step's shapes
 * (constants as they are; other inputs filled with values in [0.5, 1.5)), after one warm-up
 * call each (a Winograd or direct_bf16 candidate on a constant filter with its U / packed
 * filter made once beforehand by npuP_prepare_filter, as the plan runs it; a bf16dot one on a
 * matmul's constant B with B's panels likewise), in interleaved rounds (each round runs every candidate once, so a
 * burst of load hits them alike), and is judged by its median.  The compiler's own choice is candidate 0
 * and keeps its place unless another median is at least MARGIN faster.  A nested step is
 * timed the same way, on its own: the loop or branch around it is not run (how often a loop
 * runs is known only then, from its data), and its kernel is called as the loop calls it,
 * again and again on operands of the same shapes with its region's constants as they are;
 * what the loop adds around the step (its other steps, the loop variables' hand-over) is not
 * in the times.
 *
 * Records: one JSON object per line (a format people can read with their own tools):
 *   {"v":1,"key":...,"kind":"op"|"subgraph","op":...,"inputs":[...],"outputs":[...],
 *    "node":...,"context":...,"attrs":...,"impl":...,"threads_max":N,"fingerprint":...,
 *    "algo":...,"threads":N,
 *    "fusion_off":[...],"candidates":[{"algo":...,"threads":N,"median_us":x},...],
 *    (a candidate timed with its constant filter or weights prepared once, as the plan runs
 *    it, also has "prepared":true)
 *    "written":unix,"atime":unix,"checksum":"<16 hex>"}
 * The checksum is FNV-1a 64 of the line up to `,"checksum"`.  key identifies what was timed
 * (op type, shapes, dtypes, attributes, implementation mode, the context's thread count, and
 * for a nested step " in " and the blocks around it, "context" in the record: "while/body",
 * "cond/then>while/body"; a top-level step's key has no such part);
 * fingerprint what timed it (format version, our kernels' version, OpenBLAS's build
 * config, the CPU's model name).  A line that does not parse or whose checksum differs is
 * corrupt: ignored, and dropped when the file is next written; a record of another fingerprint
 * or format version is stale: ignored, and replaced when this machine tunes the key.
 *
 * The operator cache is bounded: max_op_cache_size MB (op_cache.ini in the cache directory,
 * else ASCEND_MAX_OP_CACHE_SIZE, else 500; -1: no ageing, access times not updated) and
 * remain_cache_size_ratio % (op_cache.ini, else ASCEND_REMAIN_CACHE_SIZE_RATIO, else 50).
 * When a write would leave the file above the limit, the records not used for AGE_SECONDS
 * (half an hour, as 000 says) go, least recently used first, until the file is at most ratio %
 * of the limit; records used more recently stay even when the file remains above the limit
 * (000: "compilation will not be interrupted").  Writes go to a temporary file renamed over
 * the old one, re-reading the file first, so concurrent sessions lose no record but the one
 * both rewrite.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "compile/fused_ops.h"
#include "compile/tuning.h"
#include "core/half.h"
#include "core/pool.h"
#include "options/options_int.h"

/* Bump when a kernel's speed characteristics change enough that old records mislead. */
#define KERNELS_VERSION "lua-npu kernels 1"
#define FORMAT_VERSION 1
enum { GEMV_ROWS = 16, AGE_SECONDS = 1800, DEFAULT_CACHE_MB = 500, DEFAULT_RATIO = 50 };
static const double MARGIN = 0.97;           /* a candidate must beat the default's median by 3 % */
static const double BUDGET_US = 40000;       /* timing per step (O2); deeper_opat: x4 */
enum { MIN_ROUNDS = 5, MAX_ROUNDS = 25 };

typedef struct store {
  char *path;      /* NULL: not used */
  bool write;      /* records are written here */
  bool aged;       /* the operator cache: size limit and ageing */
  cJSON *records;  /* array of valid records, loaded at the first use */
  bool loaded, dirty;
  int n_corrupt, n_stale;
} store;

struct npuP_tune_config {
  int mode;            /* aoe_mode: 0 unset, 1, 2, 4 */
  bool widen;          /* tune_optimization_level O1: Winograd without high_performance */
  bool deeper;         /* feature deeper_opat: four times the timing budget */
  char **names, **types; /* aoe_config_file: tune_ops_name / tune_ops_type (owned) */
  int n_names, n_types;
  store aoe;           /* <work_path>/npu_aoe_tuning.jsonl */
  store cache;         /* the operator cache */
  int64_t max_bytes;   /* -1: no ageing */
  int ratio;
  char fingerprint[320];
};

/* ---------------------------------------------------------------- small helpers */

static uint64_t fnv(const void *data, size_t n, uint64_t h) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
#define FNV0 14695981039346656037ull

static char *dup_str(npu_context *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = npuC_alloc(ctx, n);
  if (d) memcpy(d, s, n);
  return d;
}

static char *join_path(npu_context *ctx, const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *d = npuC_alloc(ctx, n);
  if (d) snprintf(d, n, "%s/%s", dir, name);
  return d;
}

/* The CPU's model name (/proc/cpuinfo), "unknown cpu" elsewhere. */
static void cpu_model(char *buf, size_t n) {
  snprintf(buf, n, "unknown cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char *v = strchr(line, ':');
    if (!v) break;
    v++;
    while (*v == ' ') v++;
    snprintf(buf, n, "%s", v);
    buf[strcspn(buf, "\n")] = 0;
    break;
  }
  fclose(f);
}

/* ---------------------------------------------------------------- aoe_config_file */

static npu_status bad_cfg(npu_context *ctx, const char *path, const char *what, const char *a) {
  return npuC_error(ctx, NPU_ERR_FORMAT, "aoe_config_file '%s': %s%s", path, what, a ? a : "");
}

static npu_status read_list(npu_context *ctx, const char *path, const cJSON *arr, bool types,
                            char ***out, int *n) {
  if (!cJSON_IsArray(arr)) return bad_cfg(ctx, path, arr->string, " must be an array of strings");
  int count = cJSON_GetArraySize(arr), k = 0;
  if (count && !(*out = npuC_calloc(ctx, (size_t)count, sizeof **out))) return NPU_ERR_NOMEM;
  const cJSON *it;
  cJSON_ArrayForEach(it, arr) {
    if (!cJSON_IsString(it))
      return bad_cfg(ctx, path, arr->string, " must be an array of strings");
    if (types && npuX_find(it->valuestring) < 0 && npuX_find_tf(it->valuestring) < 0)
      return npuC_error(ctx, NPU_ERR_NOT_FOUND,
                        "aoe_config_file '%s': tune_ops_type '%s' is not an op type (our op "
                        "names or TensorFlow types: Conv2D, MatMul, ...)", path, it->valuestring);
    if (!((*out)[k] = dup_str(ctx, it->valuestring))) return NPU_ERR_NOMEM;
    *n = ++k;
  }
  return NPU_OK;
}

/* {"tune_ops_name": [...], "tune_ops_type": [...], "tune_optimization_level": "O1"|"O2",
    "feature": ["deeper_opat"|"nonhomo_split"]} */
static npu_status load_aoe_config(npu_context *ctx, npuP_tune_config *c, const char *path) {
  char *text;
  npu_status s = npuC_read_file(ctx, path, "aoe_config_file", &text, NULL);
  if (s) return s;
  cJSON *root = cJSON_Parse(text);
  npuC_free(ctx, text);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return bad_cfg(ctx, path, "not a JSON object", NULL);
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, root) {
    const char *k = it->string;
    if (!strcmp(k, "tune_ops_name")) s = read_list(ctx, path, it, false, &c->names, &c->n_names);
    else if (!strcmp(k, "tune_ops_type"))
      s = read_list(ctx, path, it, true, &c->types, &c->n_types);
    else if (!strcmp(k, "tune_optimization_level")) {
      if (!cJSON_IsString(it) || (strcmp(it->valuestring, "O1") && strcmp(it->valuestring, "O2")))
        s = bad_cfg(ctx, path, "tune_optimization_level must be \"O1\" or \"O2\"", NULL);
      else c->widen = !strcmp(it->valuestring, "O1");
    } else if (!strcmp(k, "feature")) {
      const cJSON *f;
      if (!cJSON_IsArray(it)) s = bad_cfg(ctx, path, "feature must be an array of strings", NULL);
      cJSON_ArrayForEach(f, it) {
        if (s) break;
        const char *v = cJSON_IsString(f) ? f->valuestring : "";
        if (!strcmp(v, "deeper_opat") && c->mode != 2)
          s = npuC_error(ctx, NPU_ERR_CONFLICT, "aoe_config_file '%s': feature deeper_opat "
                         "needs aoe_mode 2 (000)", path);
        else if (!strcmp(v, "nonhomo_split") && c->mode != 1)
          s = npuC_error(ctx, NPU_ERR_CONFLICT, "aoe_config_file '%s': feature nonhomo_split "
                         "needs aoe_mode 1 (000)", path);
        else if (!strcmp(v, "deeper_opat")) c->deeper = true;
        else if (strcmp(v, "nonhomo_split"))
          s = bad_cfg(ctx, path, "unknown feature (deeper_opat, nonhomo_split): ", v);
      }
    } else {
      s = bad_cfg(ctx, path, "unknown key (tune_ops_name, tune_ops_type, "
                  "tune_optimization_level, feature): ", k);
    }
    if (s) break;
  }
  cJSON_Delete(root);
  return s;
}

/* ---------------------------------------------------------------- op_cache.ini */

/* [op_compiler_cache] max_op_cache_size=N, remain_cache_size_ratio=N: the values that are
   valid win over the environment (000). */
static void load_cache_ini(npuP_tune_config *c, const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/op_cache.ini", dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[256];
  bool section = false;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (line[0] == '[') section = !strcmp(line, "[op_compiler_cache]");
    char *eq = strchr(line, '=');
    if (!section || !eq || line[0] == '#') continue;
    *eq = 0;
    char *end;
    long v = strtol(eq + 1, &end, 10);
    if (end == eq + 1 || *end) continue;
    if (!strcmp(line, "max_op_cache_size") && v >= -1)
      c->max_bytes = v < 0 ? -1 : (int64_t)v << 20;
    else if (!strcmp(line, "remain_cache_size_ratio") && v >= 1 && v <= 100)
      c->ratio = (int)v;
  }
  fclose(f);
}

/* ---------------------------------------------------------------- the config */

static npu_status cache_dir(npu_context *ctx, const npu_options *o, char **out) {
  *out = NULL;
  const char *dir = npuO_string(o, NPUO_op_compiler_cache_dir);
  if (*dir) return (*out = join_path(ctx, dir, "kernel_cache")) ? NPU_OK : NPU_ERR_NOMEM;
  const char *env = npuO_env_string(o, NPUO_ENV_ASCEND_CACHE_PATH);
  if (*env) return (*out = join_path(ctx, env, "kernel_cache")) ? NPU_OK : NPU_ERR_NOMEM;
  const char *home = getenv("HOME");
  char base[4096];
  snprintf(base, sizeof base, "%s/atc_data", home && *home ? home : ".");
  return (*out = join_path(ctx, base, "kernel_cache")) ? NPU_OK : NPU_ERR_NOMEM;
}

void npuP_tune_config_free(npu_context *ctx, npuP_tune_config *c) {
  if (!c) return;
  for (int i = 0; i < c->n_names; i++) npuC_free(ctx, c->names[i]);
  for (int i = 0; i < c->n_types; i++) npuC_free(ctx, c->types[i]);
  npuC_free(ctx, c->names);
  npuC_free(ctx, c->types);
  npuC_free(ctx, c->aoe.path);
  npuC_free(ctx, c->cache.path);
  cJSON_Delete(c->aoe.records);
  cJSON_Delete(c->cache.records);
  npuC_free(ctx, c);
}

static npu_status config_paths(npu_context *ctx, const npu_options *o, npuP_tune_config *c) {
  const char *mode = npuO_string(o, NPUO_aoe_mode);
  c->mode = *mode ? atoi(mode) : 0;
  /* work_path: the AOE working directory (000: must exist, default the current directory;
     here the output directory, npuO_output_dir, made when records are to be written) */
  const char *work = npuO_string(o, NPUO_work_path);
  if (c->mode || *work) {
    const char *from, *dir = *work ? work : npuO_output_dir(o, &from);
    struct stat sb;
    if (!*work && (c->mode == 1 || c->mode == 2)) {
      char what[64];
      snprintf(what, sizeof what, "aoe_mode into %s", from);
      npu_status s = npuC_make_dirs(ctx, dir, what);
      if (s) return s;
    }
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
      return npuC_error(ctx, NPU_ERR_IO, "work_path '%s' is not an existing directory (000: "
                        "create it in advance)", dir);
    if (!(c->aoe.path = join_path(ctx, dir, "npu_aoe_tuning.jsonl"))) return NPU_ERR_NOMEM;
    c->aoe.write = c->mode == 1 || c->mode == 2;
  }
  /* the operator cache: disabled by op_compiler_cache_mode=disable and, as in 000, by a
     non-zero op_debug_level */
  const char *cm = npuO_string(o, NPUO_op_compiler_cache_mode);
  if (!strcmp(cm, "disable") || npuO_int(o, NPUO_op_debug_level) != 0) return NPU_OK;
  char *dir;
  npu_status s = cache_dir(ctx, o, &dir);
  if (s) return s;
  c->cache.path = join_path(ctx, dir, "npu_op_cache.jsonl");
  c->cache.write = c->mode == 1 || c->mode == 2;
  c->cache.aged = true;
  c->max_bytes = (int64_t)DEFAULT_CACHE_MB << 20;
  c->ratio = DEFAULT_RATIO;
  if (npuO_env_is_set(o, NPUO_ENV_ASCEND_MAX_OP_CACHE_SIZE)) {
    int64_t mb = npuO_env_int(o, NPUO_ENV_ASCEND_MAX_OP_CACHE_SIZE);
    c->max_bytes = mb < 0 ? -1 : mb << 20;
  }
  if (npuO_env_is_set(o, NPUO_ENV_ASCEND_REMAIN_CACHE_SIZE_RATIO))
    c->ratio = (int)npuO_env_int(o, NPUO_ENV_ASCEND_REMAIN_CACHE_SIZE_RATIO);
  load_cache_ini(c, dir);
  npuC_free(ctx, dir);
  if (!c->cache.path) return NPU_ERR_NOMEM;
  /* force: "deletes the existing cache, then recompiles the operators and adds them" */
  if (!strcmp(cm, "force") && unlink(c->cache.path) != 0 && errno != ENOENT)
    return npuC_error(ctx, NPU_ERR_IO, "op_compiler_cache_mode force: cannot remove '%s': %s",
                      c->cache.path, strerror(errno));
  return NPU_OK;
}

npu_status npuP_tune_config_new(npu_context *ctx, const npu_options *o, npuP_tune_config **out) {
  *out = NULL;
  npuP_tune_config *c = npuC_calloc(ctx, 1, sizeof *c);
  if (!c) return NPU_ERR_NOMEM;
  npu_status s = config_paths(ctx, o, c);
  const char *file = npuO_string(o, NPUO_aoe_config_file);
  if (!s && *file) s = load_aoe_config(ctx, c, file);
  if (!s) {
    char cpu[200];
    cpu_model(cpu, sizeof cpu);
    snprintf(c->fingerprint, sizeof c->fingerprint, "%s; OpenBLAS %s; %s", KERNELS_VERSION,
             npuK_blas_config(), cpu);
  }
  if (s || (!c->aoe.path && !c->cache.path)) {
    npuP_tune_config_free(ctx, c);
    return s;
  }
  *out = c;
  return NPU_OK;
}

bool npuP_tune_subgraph_on(const npuP_config *cfg) {
  return cfg->tune && cfg->tune->mode == 1 && !cfg->reference;
}

bool npuP_tune_records_on(const npuP_config *cfg) { return cfg->tune && !cfg->reference; }

/* ---------------------------------------------------------------- the stores */

/* A line's record, or NULL when it is corrupt (no checksum, another checksum, not JSON). */
static cJSON *parse_line(const char *line) {
  const char *mark = strstr(line, ",\"checksum\":\"");
  if (!mark) return NULL;
  unsigned long long want;
  if (sscanf(mark + 13, "%16llx", &want) != 1) return NULL;
  if (fnv(line, (size_t)(mark - line), FNV0) != want) return NULL;
  cJSON *r = cJSON_Parse(line);
  if (r && (!cJSON_IsObject(r) || !cJSON_IsString(cJSON_GetObjectItem(r, "key")))) {
    cJSON_Delete(r);
    r = NULL;
  }
  return r;
}

/* The file's records as an array (empty when the file is absent); corrupt lines counted. */
static cJSON *read_records(npu_context *ctx, const char *path, int *n_corrupt) {
  cJSON *arr = cJSON_CreateArray();
  char *text;
  if (!arr || npuC_read_file(ctx, path, NULL, &text, NULL)) return arr;
  for (char *line = text, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    if (!*line) continue;
    cJSON *r = parse_line(line);
    if (r) cJSON_AddItemToArray(arr, r);
    else (*n_corrupt)++;
  }
  npuC_free(ctx, text);
  return arr;
}

static cJSON *find_record(const cJSON *arr, const char *key) {
  cJSON *r;
  cJSON_ArrayForEach(r, arr) {
    const cJSON *k = cJSON_GetObjectItem(r, "key");
    if (cJSON_IsString(k) && !strcmp(k->valuestring, key)) return r;
  }
  return NULL;
}

static bool fresh(const npuP_tune_config *c, const cJSON *r) {
  const cJSON *v = cJSON_GetObjectItem(r, "v"), *fp = cJSON_GetObjectItem(r, "fingerprint");
  return cJSON_IsNumber(v) && v->valueint == FORMAT_VERSION && cJSON_IsString(fp) &&
         !strcmp(fp->valuestring, c->fingerprint);
}

static void store_load(npu_context *ctx, store *st) {
  if (st->loaded || !st->path) return;
  st->loaded = true;
  st->records = read_records(ctx, st->path, &st->n_corrupt);
}

/* The fresh record of key in the stores (the AOE file first), NULL when none; a record used
   from the operator cache has its access time renewed (unless ageing is off). */
static const cJSON *lookup(npu_context *ctx, npuP_tune_config *c, const char *key) {
  store *stores[2] = {&c->aoe, &c->cache};
  for (int i = 0; i < 2; i++) {
    store *st = stores[i];
    store_load(ctx, st);
    cJSON *r = st->records ? find_record(st->records, key) : NULL;
    if (!r) continue;
    if (!fresh(c, r)) {
      st->n_stale++;
      continue;
    }
    cJSON *at = cJSON_GetObjectItem(r, "atime");
    double now = (double)time(NULL);
    if (st->aged && c->max_bytes >= 0 && cJSON_IsNumber(at) && now - at->valuedouble > 60) {
      cJSON_SetNumberValue(at, now);
      st->dirty = true;
    }
    return r;
  }
  return NULL;
}

/* One line: the record without its checksum, then the checksum of that text. */
static char *record_line(npu_context *ctx, const cJSON *r) {
  cJSON *copy = cJSON_Duplicate(r, 1);
  if (!copy) return NULL;
  cJSON_DeleteItemFromObject(copy, "checksum");
  char *text = cJSON_PrintUnformatted(copy);
  cJSON_Delete(copy);
  if (!text) return NULL;
  size_t n = strlen(text); /* ends with '}' */
  char *line = npuC_alloc(ctx, n + 40);
  if (line) {
    text[n - 1] = 0;
    snprintf(line, n + 40, "%s,\"checksum\":\"%016llx\"}\n", text,
             (unsigned long long)fnv(text, n - 1, FNV0));
  }
  cJSON_free(text);
  return line;
}

static double num_of(const cJSON *r, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(r, k);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* The operator cache's ageing: while the lines total more than the limit, the least recently
   used record not used for AGE_SECONDS goes, down to ratio % of the limit. */
static void age(npu_context *ctx, const npuP_tune_config *c, char **lines, const cJSON **recs,
                int n) {
  if (c->max_bytes < 0) return;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += lines[i] ? (int64_t)strlen(lines[i]) : 0;
  if (total <= c->max_bytes) return;
  int64_t keep = c->max_bytes / 100 * c->ratio;
  double now = (double)time(NULL);
  while (total > keep) {
    int oldest = -1;
    for (int i = 0; i < n; i++)
      if (lines[i] && now - num_of(recs[i], "atime") > AGE_SECONDS &&
          (oldest < 0 || num_of(recs[i], "atime") < num_of(recs[oldest], "atime")))
        oldest = i;
    if (oldest < 0) break;
    total -= (int64_t)strlen(lines[oldest]);
    npuC_free(ctx, lines[oldest]);
    lines[oldest] = NULL;
  }
}

/* Writes st: the file as it is now (other sessions' records), ours replacing theirs by key,
   corrupt lines dropped, aged; through a temporary file and a rename. */
static npu_status store_save(npu_context *ctx, const npuP_tune_config *c, store *st) {
  if (!st->dirty || !st->path) return NPU_OK;
  st->dirty = false;
  npu_status s = npuC_make_parent_dirs(ctx, st->path, "tuning");
  if (s) return s;
  int n_corrupt = 0;
  cJSON *disk = read_records(ctx, st->path, &n_corrupt);
  if (!disk) return NPU_ERR_NOMEM;
  cJSON *r;
  cJSON_ArrayForEach(r, st->records) {
    const char *key = cJSON_GetObjectItem(r, "key")->valuestring;
    cJSON *copy = cJSON_Duplicate(r, 1), *old = find_record(disk, key);
    if (!copy) continue;
    if (old) cJSON_ReplaceItemViaPointer(disk, old, copy);
    else cJSON_AddItemToArray(disk, copy);
  }
  int n = cJSON_GetArraySize(disk);
  char **lines = npuC_calloc(ctx, (size_t)(n ? n : 1), sizeof *lines);
  const cJSON **recs = npuC_calloc(ctx, (size_t)(n ? n : 1), sizeof *recs);
  if (!lines || !recs) s = NPU_ERR_NOMEM;
  int i = 0;
  cJSON_ArrayForEach(r, disk) {
    if (s) break;
    recs[i] = r;
    if (!(lines[i++] = record_line(ctx, r))) s = NPU_ERR_NOMEM;
  }
  if (!s && st->aged) age(ctx, c, lines, recs, n);
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", st->path, (long)getpid());
  FILE *f = s ? NULL : fopen(tmp, "w");
  if (!s && !f)
    s = npuC_error(ctx, NPU_ERR_IO, "tuning: cannot write '%s': %s", tmp, strerror(errno));
  for (i = 0; f && i < n; i++)
    if (lines[i]) fputs(lines[i], f);
  if (f && (fclose(f) != 0 || rename(tmp, st->path) != 0)) {
    s = npuC_error(ctx, NPU_ERR_IO, "tuning: cannot write '%s': %s", st->path, strerror(errno));
    unlink(tmp);
  }
  for (i = 0; lines && i < n; i++) npuC_free(ctx, lines[i]);
  npuC_free(ctx, lines);
  npuC_free(ctx, (void *)recs);
  /* what is on disk now is what the session knows */
  if (!s) {
    cJSON_Delete(st->records);
    st->records = read_records(ctx, st->path, &n_corrupt);
  }
  cJSON_Delete(disk);
  return s;
}

/* Records r (owned) in every store that is written; the in-memory copies too, so the rest of
   this compilation (a repeated layer) reuses it. */
static void store_put(npuP_tune_config *c, store *st, const cJSON *r) {
  if (!st->path || !st->write) return;
  if (!st->records && !(st->records = cJSON_CreateArray())) return;
  const char *key = cJSON_GetObjectItem(r, "key")->valuestring;
  cJSON *copy = cJSON_Duplicate(r, 1), *old = find_record(st->records, key);
  if (!copy) return;
  if (old) cJSON_ReplaceItemViaPointer(st->records, old, copy);
  else cJSON_AddItemToArray(st->records, copy);
  st->dirty = true;
  (void)c;
}

static npu_status save_all(npu_context *ctx, npuP_tune_config *c) {
  npu_status s = store_save(ctx, c, &c->aoe);
  npu_status s2 = store_save(ctx, c, &c->cache);
  return s ? s : s2;
}

/* ---------------------------------------------------------------- describing a step */

typedef struct sbuf {
  char *p;
  size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) NPU_PRINTF(2, 3);
static void put(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
  va_end(ap);
  if (k > 0) b->n = b->n + (size_t)k < b->cap ? b->n + (size_t)k : b->cap - 1;
}

static void value_desc(sbuf *b, const npuG_value *v) {
  put(b, "%s[", npu_dtype_name(v->dtype));
  for (int i = 0; i < v->ndim; i++) put(b, "%s%lld", i ? "," : "", (long long)v->shape[i]);
  put(b, "]");
}

static void window_desc(sbuf *b, const npuX_window_params *w) {
  put(b, "k%lldx%lld s%lldx%lld d%lldx%lld p%d:%lld,%lld,%lld,%lld", (long long)w->ksize[0],
      (long long)w->ksize[1], (long long)w->stride[0], (long long)w->stride[1],
      (long long)w->dilation[0], (long long)w->dilation[1], (int)w->padding,
      (long long)w->explicit_pad[0], (long long)w->explicit_pad[1],
      (long long)w->explicit_pad[2], (long long)w->explicit_pad[3]);
}

/* What the tuner chooses for step s: its op's kind, but for the fused gradient-descent step
   (its op an assign), whose GEMM is the absorbed matmul's: a GEMM's algorithms. */
static npuX_tune tune_kind(const npuE_step *s) {
  return s->def == &npuP_op_fused_sgd ? NPUX_TUNE_GEMM : s->def->tune;
}

/* The attributes that make a step's kernel call (beyond shapes and dtypes).  A tuned op's
   params: the fused ones' npuP_fused_conv / npuP_fused_matmul, the window ops'
   npuX_window_params, matmul's two transpose flags. */
static void attrs_desc(sbuf *b, const npuE_step *s) {
  const void *prm = s->owned_params ? s->owned_params : s->params;
  npuX_tune k = tune_kind(s);
  if (s->def->fused && (k == NPUX_TUNE_CONV || k == NPUX_TUNE_THREADS)) {
    const npuP_fused_conv *f = prm;
    window_desc(b, &f->window);
    put(b, " bias%d act%d/%g slope%d", f->bias_input >= 0, (int)f->act, (double)f->alpha,
        f->slope_input >= 0);
    if (f->pooled) {
      put(b, " pool ");
      window_desc(b, &f->pool);
    }
  } else if (k == NPUX_TUNE_CONV || k == NPUX_TUNE_THREADS || k == NPUX_TUNE_CONV_INPUT) {
    window_desc(b, prm); /* conv2d_backprop_input's params start with its window too */
  } else if (s->def == &npuP_op_fused_sgd) {
    const npuP_fused_sgd *f = prm;
    put(b, "ta%d tb%d product %s", f->transpose_a, f->transpose_b,
        npu_dtype_name(f->product_dtype));
  } else if (k == NPUX_TUNE_GEMM && s->def->fused) {
    const npuP_fused_matmul *f = prm;
    put(b, "ta%d tb%d bias%d act%d/%g slope%d", f->transpose_a, f->transpose_b,
        f->bias_input >= 0, (int)f->act, (double)f->alpha, f->slope_input >= 0);
  } else if (k == NPUX_TUNE_GEMM) {
    const bool *t = prm;
    put(b, "ta%d tb%d", t[0], t[1]);
  }
}

static bool reduced_dtype(npu_dtype dt) { return dt == NPU_DTYPE_F16 || dt == NPU_DTYPE_BF16; }

/* A GEMM step the compiler gave the native bfloat16 GEMM (implmode.c): A and B bfloat16 as
   stored, C as stored (reduced or float32); a fused step's bias / slopes float32
   (precision.c: keep_epilogue_f32), or reduced by a customize_dtypes line and then widened by
   the executor (widen flags past input 1 only).  Timed on synthetic operands as it runs. */
static bool bf16dot_step(const npuE_step *s) {
  if (s->def->tune != NPUX_TUNE_GEMM || s->algo != NPUK_GEMM_BF16DOT) return false;
  for (int i = 0; s->widen && i < s->n_in + s->n_out; i++)
    if (s->widen[i] && (i < 2 || i >= s->n_in)) return false;
  return true;
}

/* The fused gradient-descent step: shapes fixed, nothing widened; its GEMM's A and B (inputs
   1, 2) as the precision pass stored them (float32, or reduced under a mixed mode: the kernel
   reads them as stored), the variable, lr and the output float32.  Its kernel updates the
   synthetic output in place, as the plan's run updates the variable. */
static bool sgd_benchable(const npuE_plan *p, const npuE_step *s, npu_tensor *const *known) {
  if (s->dynamic || s->widen || s->host || s->n_in != 4 || s->n_out != 1) return false;
  for (int i = 0; i < s->n_in + s->n_out; i++) {
    const npuG_value *v = &p->values[i < s->n_in ? s->in[i] : s->out[i - s->n_in]];
    if (i < s->n_in && known[s->in[i]]) continue;
    bool half = (i == 1 || i == 2) && reduced_dtype(v->dtype);
    if ((v->dtype != NPU_DTYPE_F32 && !half) || !npuG_value_known(v)) return false;
  }
  return true;
}

/* Whether the step can be run on synthetic inputs here: a kernel with fixed shapes, float32
   operands (constants may be of any dtype: they are used as they are), no float16 storage —
   except a convolution's under the precision modes (conv2d, the fused conv2d: their
   algorithms include direct_bf16, which only such steps take), whose x and y the kernel takes
   as stored and whose other reduced operands the executor widens (bench_new does the same),
   and a bf16dot GEMM step's (above). */
static bool benchable(const npuE_plan *p, const npuE_step *s, npu_tensor *const *known) {
  const bool conv = s->def->tune == NPUX_TUNE_CONV, bf16 = bf16dot_step(s);
  if (s->def == &npuP_op_fused_sgd) return sgd_benchable(p, s, known);
  if (s->def->kind != NPUX_KIND_KERNEL || !s->def->run || s->dynamic ||
      (!conv && !bf16 && (s->widen || s->round_in >= 0 || s->round_out >= 0)) || s->control ||
      ((s->def->flags & NPUX_F_NO_FOLD) && !s->def->fused))
    return false;
  for (int i = 0; i < s->n_in; i++) {
    const npuG_value *v = &p->values[s->in[i]];
    if (known[s->in[i]]) continue;
    bool half = reduced_dtype(v->dtype) &&
                (bf16 || (conv && (i == 0 || (s->widen && s->widen[i]))));
    if ((v->dtype != NPU_DTYPE_F32 && !half) || !npuG_value_known(v)) return false;
  }
  for (int i = 0; i < s->n_out; i++) {
    const npuG_value *v = &p->values[s->out[i]];
    bool half = (conv || bf16) && reduced_dtype(v->dtype);
    if ((v->dtype != NPU_DTYPE_F32 && !half) || !npuG_value_known(v)) return false;
  }
  return true;
}

/* The step's key into keybuf. */
static void step_key(const npuE_plan *p, const npuE_step *s, int threads, const char *where,
                     char *keybuf, size_t n) {
  sbuf b = {keybuf, 0, n};
  keybuf[0] = 0;
  put(&b, "op %s in", s->def->name);
  for (int i = 0; i < s->n_in; i++) {
    put(&b, " ");
    value_desc(&b, &p->values[s->in[i]]);
  }
  put(&b, " out");
  for (int i = 0; i < s->n_out; i++) {
    put(&b, " ");
    value_desc(&b, &p->values[s->out[i]]);
  }
  put(&b, " attrs ");
  attrs_desc(&b, s);
  put(&b, " impl %d threads %d", s->impl, threads);
  /* a nested step's block: its record is not a top-level step's of the same shapes, nor
     another block's (keys of top-level steps are as they were before nesting was tuned) */
  if (*where) put(&b, " in %s", where);
}

/* ---------------------------------------------------------------- timing */

typedef struct cand {
  int algo, threads;
  double median_us;
  bool prepared; /* timed with the step's constant operand prepared once (bench_prepare) */
} cand;

/* bench.prepared is indexed by a convolution's or a GEMM's algorithm (bf16dot's packed B) */
#define N_PREPARED                                                                           \
  ((int)NPUK_GEMM_ALGO_COUNT > (int)NPUK_CONV_ALGO_COUNT ? (int)NPUK_GEMM_ALGO_COUNT           \
                                                         : (int)NPUK_CONV_ALGO_COUNT)
typedef struct bench {
  npu_context *ctx;
  npu_tensor *in[16];
  npu_tensor *out[NPUX_MAX_OUTPUTS];
  void *scratch;
  /* by algorithm: a constant filter prepared as plan.c does for the run (npuP_prepare_filter:
     Winograd's U, direct_bf16's packed filter), or NULL */
  void *prepared[N_PREPARED];
  int n_in, n_out;
} bench;

static void bench_free(bench *bn) {
  for (int i = 0; i < bn->n_in; i++) npu_tensor_release(bn->in[i]);
  for (int i = 0; i < bn->n_out; i++) npu_tensor_release(bn->out[i]);
  npuC_free(bn->ctx, bn->scratch);
  for (int a = 0; a < N_PREPARED; a++) npuC_free(bn->ctx, bn->prepared[a]);
  bn->n_in = bn->n_out = 0;
  bn->scratch = NULL;
  memset(bn->prepared, 0, sizeof bn->prepared);
}

/* Inputs (constants as they are, the others filled in [0.5, 1.5)), outputs and scratch.  An
   operand the executor widens for the step (s->widen) is given as the kernel gets it: float32,
   a constant widened, the others filled with values of its stored dtype; an operand the kernel
   takes as stored (a convolution's reduced x, y) is made in that dtype. */
static npu_status bench_new(npuP_build *b, const npuE_step *s, size_t scratch, bench *bn) {
  npuE_plan *p = b->plan;
  *bn = (bench){.ctx = b->ctx};
  if (s->n_in > (int)npu_countof(bn->in)) return NPU_ERR_UNSUPPORTED;
  uint32_t seed = 12345;
  for (int i = 0; i < s->n_in; i++) {
    int v = s->in[i];
    const bool wide = s->widen && s->widen[i];
    const npu_tensor *k = b->known[v];
    if (k && !wide) {
      bn->in[bn->n_in++] = npu_tensor_retain(b->known[v]);
      continue;
    }
    const npuG_value *d = &p->values[v];
    npu_dtype dt = wide ? NPU_DTYPE_F32 : d->dtype;
    npu_status st = npu_tensor_new(b->ctx, dt, d->ndim, d->shape, &bn->in[bn->n_in]);
    if (st) return st;
    npu_tensor *t = bn->in[bn->n_in++];
    if (k) {
      npuK_cast(NULL, t->numel, (npuK_dtype)k->dtype, k->data, NPUK_F32, t->data);
      continue;
    }
    for (int64_t e = 0; e < t->numel; e++) {
      seed = seed * 1664525u + 1013904223u;
      float x = 0.5f + (float)(seed >> 8) / 16777216.0f;
      /* a value of the stored dtype, stored as the kernel reads it */
      uint16_t h = d->dtype == NPU_DTYPE_BF16 ? npu_f32_to_bf16(x) : npu_f32_to_f16(x);
      if (d->dtype != NPU_DTYPE_F32) x = d->dtype == NPU_DTYPE_BF16 ? npu_bf16_to_f32(h) : npu_f16_to_f32(h);
      if (dt == NPU_DTYPE_F32) ((float *)t->data)[e] = x;
      else ((uint16_t *)t->data)[e] = h;
    }
  }
  for (int i = 0; i < s->n_out; i++) {
    const npuG_value *d = &p->values[s->out[i]];
    npu_dtype dt = s->widen && s->widen[s->n_in + i] ? NPU_DTYPE_F32 : d->dtype;
    npu_status st = npu_tensor_new(b->ctx, dt, d->ndim, d->shape, &bn->out[bn->n_out]);
    if (st) return st;
    bn->n_out++;
  }
  if (scratch && !(bn->scratch = npuC_alloc(b->ctx, scratch))) return NPU_ERR_NOMEM;
  return NPU_OK;
}

/* A Winograd or direct_bf16 candidate on a step whose filter is a constant (a bf16dot one
   on a matmul whose B is a constant) is timed as the plan will run it: with it prepared once here (npuP_prepare_filter, what plan.c
   gives the chosen algorithm), outside the timed calls, not with the per-call transform or
   packing, which would undervalue the candidate on small inference layers. */
static npu_status bench_prepare(npuP_build *b, const npuE_step *s, const cand *cs, int n,
                                bench *bn) {
  if (!(s->def->flags & NPUX_F_PREPARED_FILTER)) return NPU_OK;
  for (int i = 0; i < n; i++) {
    int a = cs[i].algo;
    if (a < 0 || a >= N_PREPARED || bn->prepared[a]) continue;
    size_t bytes;
    npu_status st = npuP_prepare_filter(b, s, a, &bn->prepared[a], &bytes);
    if (st) return st;
  }
  return NPU_OK;
}

/* What a call of step s with algorithm algo is given as npuX_call.prepared: a plan's step
   its own (subgraph tuning times compiled plans, their scratch sized for it), else what
   bench_prepare made. */
static const void *bench_prepared(const npuE_step *s, const bench *bn, int algo) {
  if (!(s->def->flags & NPUX_F_PREPARED_FILTER) || algo < 0 || algo >= N_PREPARED)
    return NULL;
  return algo == s->algo && s->prepared ? s->prepared : bn->prepared[algo];
}

/* One call of step s's kernel with algorithm algo on `threads` threads; its time in us, or a
   negative time when the kernel fails (the candidate is then out). */
static double bench_once(npuP_build *b, const npuE_step *s, bench *bn, int algo, int threads) {
  npu_context *ctx = b->ctx;
  int was = npuC_pool_active(ctx->pool);
  if (threads != was) npuC_pool_set_active(ctx->pool, threads);
  npuX_call call = {.ctx = ctx, .pool = npuC_kernel_pool(ctx), .n_threads = threads,
                    .node = &b->graph->nodes[s->node],
                    .params = s->owned_params ? s->owned_params : s->params,
                    .n_inputs = s->n_in, .in = bn->in, .n_outputs = s->n_out, .out = bn->out,
                    .scratch = bn->scratch, .impl = s->impl, .algo = algo,
                    .prepared = bench_prepared(s, bn, algo)};
  int64_t t0 = npuC_now_ns();
  npu_status st = s->def->run(&call);
  int64_t t1 = npuC_now_ns();
  if (threads != was) npuC_pool_set_active(ctx->pool, was);
  return st ? -1 : (double)(t1 - t0) / 1000.0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The candidates' medians over interleaved rounds (one warm-up call each first). */
static npu_status time_candidates(npuP_build *b, npuE_step *s, cand *cs, int n, double budget) {
  npuE_plan *p = b->plan;
  size_t scratch = 0;
  uint8_t algo0 = s->algo;
  for (int i = 0; i < n; i++) { /* each candidate's scratch, sized as the plan would */
    s->algo = (uint8_t)cs[i].algo;
    size_t keep = p->scratch_size;
    npu_status st = npuP_step_scratch(b->ctx, p, s, &b->graph->nodes[s->node], false);
    p->scratch_size = keep;
    if (st) return st;
    if (s->scratch_size > scratch) scratch = s->scratch_size;
  }
  s->algo = algo0;
  npu_status rs = npuP_step_scratch(b->ctx, p, s, &b->graph->nodes[s->node], false);
  if (rs) return rs;
  bench bn;
  npu_status st = bench_new(b, s, scratch, &bn);
  if (!st) st = bench_prepare(b, s, cs, n, &bn);
  double *t = npuC_calloc(b->ctx, (size_t)n * MAX_ROUNDS, sizeof *t);
  if (!st && !t) st = NPU_ERR_NOMEM;
  double warm = 0;
  for (int i = 0; !st && i < n; i++) {
    double us = bench_once(b, s, &bn, cs[i].algo, cs[i].threads);
    cs[i].median_us = us < 0 ? -1 : 0;
    cs[i].prepared = bench_prepared(s, &bn, cs[i].algo) != NULL;
    warm += us > 0 ? us : 0;
  }
  int rounds = warm > 0 ? (int)(budget / warm) : MAX_ROUNDS;
  rounds = rounds < MIN_ROUNDS ? MIN_ROUNDS : rounds > MAX_ROUNDS ? MAX_ROUNDS : rounds;
  for (int r = 0; !st && r < rounds; r++)
    for (int i = 0; i < n; i++)
      if (cs[i].median_us >= 0) t[i * MAX_ROUNDS + r] = bench_once(b, s, &bn, cs[i].algo, cs[i].threads);
  for (int i = 0; !st && i < n; i++) {
    if (cs[i].median_us < 0) continue;
    qsort(t + i * MAX_ROUNDS, (size_t)rounds, sizeof *t, cmp_double);
    cs[i].median_us = t[i * MAX_ROUNDS + rounds / 2];
  }
  npuC_free(b->ctx, t);
  bench_free(&bn);
  return st;
}

/* ---------------------------------------------------------------- the operator pass */

static const char *conv_algo_name(int a) {
  return a == NPUK_CONV_WINOGRAD_2X3  ? "winograd_2x3"
         : a == NPUK_CONV_DIRECT      ? "direct"
         : a == NPUK_CONV_DIRECT_BF16 ? "direct_bf16"
                                      : "im2col";
}
static const char *gemm_algo_name(int a) {
  return a == NPUK_GEMM_GEMV      ? "gemv"
         : a == NPUK_GEMM_SGEMM   ? "sgemm"
         : a == NPUK_GEMM_BF16DOT ? "bf16dot"
         : a == NPUK_GEMM_F32TILE ? "f32tile"
                                  : "auto";
}
/* conv2d_backprop_input: "default" is the op's own kernel (the direct kernel on the turned
   filter, im2col or the scatter, by shape: op_conv2d_backprop_input.c) */
static const char *algo_name(npuX_tune k, int a) {
  return k == NPUX_TUNE_CONV         ? conv_algo_name(a)
         : k == NPUX_TUNE_GEMM       ? gemm_algo_name(a)
         : k == NPUX_TUNE_CONV_INPUT ? (a == NPUK_CONV_WINOGRAD_2X3 ? "winograd_2x3" : "default")
                                     : "default";
}
static int algo_parse(npuX_tune k, const char *name) {
  if (k == NPUX_TUNE_CONV_INPUT)
    return !strcmp(name, "winograd_2x3") ? NPUK_CONV_WINOGRAD_2X3 : NPUK_CONV_IM2COL;
  if (k == NPUX_TUNE_CONV)
    return !strcmp(name, "winograd_2x3") ? NPUK_CONV_WINOGRAD_2X3
           : !strcmp(name, "direct")     ? NPUK_CONV_DIRECT
           : !strcmp(name, "direct_bf16") ? NPUK_CONV_DIRECT_BF16
                                         : NPUK_CONV_IM2COL;
  if (k == NPUX_TUNE_GEMM)
    return !strcmp(name, "gemv")      ? NPUK_GEMM_GEMV
           : !strcmp(name, "sgemm")   ? NPUK_GEMM_SGEMM
           : !strcmp(name, "bf16dot") ? NPUK_GEMM_BF16DOT
           : !strcmp(name, "f32tile") ? NPUK_GEMM_F32TILE
                                      : NPUK_GEMM_AUTO;
  return 0;
}

/* m, n, k of a matmul step. */
static void gemm_dims(const npuE_plan *p, const npuE_step *s, int64_t *m, int64_t *n, int64_t *k) {
  const void *prm = s->owned_params ? s->owned_params : s->params;
  bool ta = ((const bool *)prm)[0]; /* the three params structs start with transpose_a */
  /* the fused gradient-descent step: A is input 1, the variable (output 0) the product's shape */
  const int ia = s->def == &npuP_op_fused_sgd ? 1 : 0;
  const npuG_value *a = &p->values[s->in[ia]], *y = &p->values[s->out[0]];
  *m = y->shape[0], *n = y->shape[1], *k = a->shape[ta ? 0 : 1];
}

/* The candidates of step s; candidate 0 is what the compiler chose. */
static int candidates(const npuP_build *b, const npuE_step *s, npuX_tune kind, int T, bool widen,
                      cand *cs) {
  int algos[4], n_algos = 0;
  if (kind == NPUX_TUNE_CONV) {
    /* the compiler's choice, then the others: im2col always, direct where it takes the step,
       Winograd only where the session allows it (high_performance) or O1 widens */
    algos[n_algos++] = s->algo;
    if (s->algo != NPUK_CONV_IM2COL) algos[n_algos++] = NPUK_CONV_IM2COL;
    if (s->algo != NPUK_CONV_DIRECT && npuP_direct_fits(b->plan, s))
      algos[n_algos++] = NPUK_CONV_DIRECT;
    if (s->algo != NPUK_CONV_DIRECT_BF16 && npuP_direct_bf16_fits(b, s))
      algos[n_algos++] = NPUK_CONV_DIRECT_BF16;
    if (s->algo != NPUK_CONV_WINOGRAD_2X3 && (s->impl || widen) &&
        npuP_winograd_fits(b->plan, s))
      algos[n_algos++] = NPUK_CONV_WINOGRAD_2X3;
  } else if (kind == NPUX_TUNE_CONV_INPUT) {
    /* the input gradient: the compiler's choice, then the op's own kernel or Winograd under
       the same gate as conv2d's (the step's high_performance, or O1) */
    algos[n_algos++] = s->algo;
    if (s->algo != NPUK_CONV_IM2COL) algos[n_algos++] = NPUK_CONV_IM2COL;
    else if ((s->impl || widen) && npuP_backprop_input_winograd_fits(b->plan, s))
      algos[n_algos++] = NPUK_CONV_WINOGRAD_2X3;
  } else if (kind == NPUX_TUNE_GEMM) {
    int64_t m, n, k;
    gemm_dims(b->plan, s, &m, &n, &k);
    int own = npuK_gemm_uses_gemv(NPUK_GEMM_AUTO, m, n, k) ? NPUK_GEMM_GEMV : NPUK_GEMM_SGEMM;
    /* the native bfloat16 GEMM, the compiler's choice, against widening for OpenBLAS */
    if (s->algo == NPUK_GEMM_BF16DOT) algos[n_algos++] = NPUK_GEMM_BF16DOT;
    /* our float32 tiles (kernels/gemm_f32.c): the compiler's choice first where it made it,
       else timed against OpenBLAS on any float32 GEMM with k > 0 on an AVX-512F CPU */
    bool f32 = s->algo != NPUK_GEMM_BF16DOT && k > 0 && npuK_avx512f() &&
               npuP_f32tile_operands(b->plan, s);
    if (f32 && s->algo == NPUK_GEMM_F32TILE) algos[n_algos++] = NPUK_GEMM_F32TILE;
    algos[n_algos++] = own;
    if (f32 && s->algo != NPUK_GEMM_F32TILE) algos[n_algos++] = NPUK_GEMM_F32TILE;
    if (m <= GEMV_ROWS && k > 0) algos[n_algos++] = own == NPUK_GEMM_GEMV ? NPUK_GEMM_SGEMM : NPUK_GEMM_GEMV;
  } else {
    algos[n_algos++] = s->algo;
  }
  int threads[3] = {T}, n_threads = 1;
  if (T > 1) threads[n_threads++] = 1;
  if (T >= 4) threads[n_threads++] = T / 2;
  int n = 0;
  for (int a = 0; a < n_algos; a++)
    for (int t = 0; t < n_threads; t++) cs[n++] = (cand){.algo = algos[a], .threads = threads[t]};
  return n;
}

/* Whether aoe_config_file selects step s (no lists: every step). */
static bool selected(const npuP_tune_config *c, const npu_graph *g, const npuE_step *s) {
  if (!c->n_names && !c->n_types) return true;
  for (int j = -1; j < s->n_absorbed; j++) {
    const npuG_node *node = &g->nodes[j < 0 ? s->node : s->absorbed[j]];
    const npu_op_def *def = npuX_op(node->op);
    for (int i = 0; i < c->n_names; i++)
      if (!strcmp(c->names[i], node->name)) return true;
    for (int i = 0; i < c->n_types; i++)
      if (!strcmp(c->types[i], def->name) || (def->tf_type && !strcmp(c->types[i], def->tf_type)))
        return true;
  }
  return false;
}

static cJSON *values_json(const npuE_plan *p, int n, const int *ids) {
  cJSON *arr = cJSON_CreateArray();
  for (int i = 0; arr && i < n; i++) {
    char buf[160];
    sbuf b = {buf, 0, sizeof buf};
    buf[0] = 0;
    value_desc(&b, &p->values[ids[i]]);
    cJSON_AddItemToArray(arr, cJSON_CreateString(buf));
  }
  return arr;
}

static cJSON *new_record(const npuP_tune_config *c, const char *key, const char *kind) {
  cJSON *r = cJSON_CreateObject();
  if (!r) return NULL;
  double now = (double)time(NULL);
  cJSON_AddNumberToObject(r, "v", FORMAT_VERSION);
  cJSON_AddStringToObject(r, "key", key);
  cJSON_AddStringToObject(r, "kind", kind);
  cJSON_AddStringToObject(r, "fingerprint", c->fingerprint);
  cJSON_AddNumberToObject(r, "written", now);
  cJSON_AddNumberToObject(r, "atime", now);
  return r;
}

static void add_candidates(cJSON *r, npuX_tune kind, const cand *cs, int n) {
  cJSON *arr = cJSON_AddArrayToObject(r, "candidates");
  for (int i = 0; arr && i < n; i++) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    if (kind != NPUX_TUNE_NONE) cJSON_AddStringToObject(o, "algo", algo_name(kind, cs[i].algo));
    cJSON_AddNumberToObject(o, "threads", cs[i].threads);
    cJSON_AddNumberToObject(o, "median_us", cs[i].median_us < 0 ? -1 : (double)(int64_t)(cs[i].median_us * 1000) / 1000);
    if (cs[i].prepared) cJSON_AddTrueToObject(o, "prepared");
    cJSON_AddItemToArray(arr, o);
  }
}

/* Times step s's candidates and records the winner; applies it. */
static npu_status tune_step(npuP_build *b, npuE_step *s, npuX_tune kind, int T, const char *key,
                            const char *where) {
  npuP_tune_config *c = b->cfg->tune;
  cand cs[12];
  int n = candidates(b, s, kind, T, c->widen, cs);
  if (n < 2) return NPU_OK;
  npu_status st = time_candidates(b, s, cs, n, c->deeper ? 4 * BUDGET_US : BUDGET_US);
  if (st) return st;
  int best = 0;
  for (int i = 1; i < n; i++)
    if (cs[i].median_us >= 0 && (cs[best].median_us < 0 || cs[i].median_us < cs[best].median_us * MARGIN))
      best = i;
  s->algo = (uint8_t)(kind == NPUX_TUNE_THREADS ? s->algo : cs[best].algo);
  s->threads = (uint8_t)(cs[best].threads < T ? cs[best].threads : 0);
  s->tuned = NPUP_TUNED_TIMED;
  b->plan->tuning.timed++;
  cJSON *r = new_record(c, key, "op");
  if (!r) return NPU_ERR_NOMEM;
  cJSON_AddStringToObject(r, "op", s->def->name);
  cJSON_AddStringToObject(r, "node", b->graph->nodes[s->node].name);
  cJSON_AddStringToObject(r, "context", where);
  cJSON_AddItemToObject(r, "inputs", values_json(b->plan, s->n_in, s->in));
  cJSON_AddItemToObject(r, "outputs", values_json(b->plan, s->n_out, s->out));
  cJSON_AddStringToObject(r, "impl", s->impl ? "high_performance" : "high_precision");
  cJSON_AddBoolToObject(r, "widened", c->widen);
  cJSON_AddNumberToObject(r, "threads_max", T);
  cJSON_AddStringToObject(r, "algo", algo_name(kind, cs[best].algo));
  cJSON_AddNumberToObject(r, "threads", cs[best].threads);
  add_candidates(r, kind, cs, n);
  store_put(c, &c->aoe, r);
  store_put(c, &c->cache, r);
  cJSON_Delete(r);
  return NPU_OK;
}

/* A record's choice on step s, when it is one of the candidates allowed now. */
static bool apply_record(npuP_build *b, npuE_step *s, npuX_tune kind, int T, const cJSON *r) {
  const cJSON *a = cJSON_GetObjectItem(r, "algo"), *t = cJSON_GetObjectItem(r, "threads");
  if (!cJSON_IsString(a) || !cJSON_IsNumber(t)) return false;
  /* O1's widening travels with its records: they are the user's opt-in */
  bool widen = b->cfg->tune->widen || cJSON_IsTrue(cJSON_GetObjectItem(r, "widened"));
  cand cs[12];
  int n = candidates(b, s, kind, T, widen, cs), algo = algo_parse(kind, a->valuestring);
  for (int i = 0; i < n; i++)
    if ((kind == NPUX_TUNE_THREADS || cs[i].algo == algo) && cs[i].threads == t->valueint) {
      if (kind != NPUX_TUNE_THREADS) s->algo = (uint8_t)algo;
      s->threads = (uint8_t)(t->valueint < T ? t->valueint : 0);
      s->tuned = NPUP_TUNED_RECORD;
      b->plan->tuning.reused++;
      return true;
    }
  return false;
}

/* One step: a record's choice, or (aoe_mode 2, the step selected) its candidates timed. */
static npu_status tune_one(npuP_build *b, npuE_step *step, int T, const char *where,
                           bool nested) {
  npuP_tune_config *c = b->cfg->tune;
  npuE_plan *p = b->plan;
  npuX_tune kind = tune_kind(step);
  if (kind == NPUX_TUNE_NONE || !benchable(p, step, b->known)) return NPU_OK;
  char key[1024];
  step_key(p, step, T, where, key, sizeof key);
  const cJSON *r = lookup(b->ctx, c, key);
  uint8_t algo0 = step->algo;
  npu_status s = NPU_OK;
  if (r && apply_record(b, step, kind, T, r)) {
  } else if (c->mode == 2 && selected(c, b->graph, step)) {
    s = tune_step(b, step, kind, T, key, where);
  } else {
    return NPU_OK;
  }
  if (!s && step->algo != algo0) /* the scratch of the algorithm chosen */
    s = npuP_step_scratch(b->ctx, p, step, &b->graph->nodes[step->node], false);
  /* a nested step's scratch is the plan's own (compile/control.c) */
  if (!s && nested && step->scratch_size) p->nested_scratch = true;
  return s;
}

/* The steps of a block and of the blocks nested in its control steps, at any depth; where
   (a buffer of `cap` bytes) says where the block sits: "" at the top level, else the blocks
   around it from the outside in ("while/body", "cond/then>while/body"). */
static npu_status tune_block(npuP_build *b, npuE_step *steps, int n, int T, char *where,
                             size_t cap) {
  npu_status s = NPU_OK;
  size_t len = strlen(where);
  for (int k = 0; k < n && !s; k++) {
    npuE_step *step = &steps[k];
    if (!step->control) {
      s = tune_one(b, step, T, where, len > 0);
      continue;
    }
    for (int j = 0; j < 2 && !s; j++) {
      snprintf(where + len, cap - len, "%s%s/%s", len ? ">" : "", step->def->name,
               npuP_block_name(step, j));
      const npuE_block *blk = &step->control->block[j];
      s = tune_block(b, blk->steps, blk->n_steps, T, where, cap);
      where[len] = 0;
    }
  }
  return s;
}

npu_status npuP_tune_steps(npuP_build *b) {
  npuP_tune_config *c = b->cfg->tune;
  npuE_plan *p = b->plan;
  if (!c || b->cfg->reference) return NPU_OK;
  int T = npu_context_n_threads(b->ctx);
  if (T > p->n_threads) T = p->n_threads;
  /* a nested block's constants are in b->known (plan.c: know_nested_constants): the timing
     uses them as they are, as it does the top level's */
  char where[256] = "";
  npu_status s = tune_block(b, p->steps, p->n_steps, T, where, sizeof where);
  npu_status w = save_all(b->ctx, c);
  return s ? s : w;
}

/* ---------------------------------------------------------------- subgraph tuning */

npu_status npuP_tune_subgraph_lookup(npuP_build *b, const char *key, unsigned *fusion_off,
                                     bool *found) {
  *fusion_off = 0;
  *found = false;
  const cJSON *r = lookup(b->ctx, b->cfg->tune, key);
  const cJSON *off = r ? cJSON_GetObjectItem(r, "fusion_off") : NULL;
  if (!cJSON_IsArray(off)) return NPU_OK;
  const cJSON *it;
  cJSON_ArrayForEach(it, off) {
    int i = cJSON_IsString(it) ? npuP_fusion_pass_index(it->valuestring) : -1;
    if (i >= 0) *fusion_off |= 1u << i;
  }
  *found = true;
  return NPU_OK;
}

/* The sum of the benchable steps' times of each plan, interleaved rounds, medians. */
npu_status npuP_tune_subgraph_time(npuP_build *b, const char *key, npuE_plan *const *plans,
                                   const unsigned *fusion_off, int n, int *best) {
  npuP_tune_config *c = b->cfg->tune;
  *best = 0;
  enum { ROUNDS = 7 };
  double *t = npuC_calloc(b->ctx, (size_t)n * ROUNDS, sizeof *t);
  if (!t) return NPU_ERR_NOMEM;
  npu_status s = NPU_OK;
  npuE_plan *own = b->plan;
  npu_tensor **known_own = b->known;
  /* each plan's constants: the slots no step writes and no feed fills */
  npu_tensor **known[33] = {0};
  for (int i = 0; i < n && i < 33 && !s; i++) {
    npuE_plan *p = plans[i];
    if (!(known[i] = npuC_alloc(b->ctx, (size_t)(p->n_values ? p->n_values : 1) * sizeof **known)))
      s = NPU_ERR_NOMEM;
    for (int v = 0; !s && v < p->n_values; v++) known[i][v] = p->slots[v];
    for (int k = 0; !s && k < p->n_all_steps; k++)
      for (int j = 0; j < p->all_steps[k]->n_out; j++) known[i][p->all_steps[k]->out[j]] = NULL;
    for (int j = 0; !s && j < p->n_feeds; j++) known[i][p->feeds[j]] = NULL;
  }
  for (int r = 0; r < ROUNDS && !s; r++)
    for (int i = 0; i < n && !s; i++) {
      npuE_plan *p = plans[i];
      b->plan = p;
      b->known = known[i];
      /* every step once, those nested in cond / while steps too: a loop's body as one
         iteration of it (its trip count is known only when it runs) */
      for (int k = 0; k < p->n_all_steps && !s; k++) {
        npuE_step *st = (npuE_step *)p->all_steps[k]; /* the plan's own, listed through const */
        if (!benchable(p, st, known[i])) continue;
        bench bn;
        s = bench_new(b, st, st->scratch_size, &bn);
        int T = st->threads ? st->threads : npu_context_n_threads(b->ctx);
        double us = s ? 0 : bench_once(b, st, &bn, st->algo, T);
        bench_free(&bn);
        t[i * ROUNDS + r] += us > 0 ? us : 0;
      }
    }
  b->plan = own;
  b->known = known_own;
  for (int i = 0; i < n && i < 33; i++) npuC_free(b->ctx, known[i]);
  double med[32];
  for (int i = 0; i < n && i < 32; i++) {
    qsort(t + i * ROUNDS, ROUNDS, sizeof *t, cmp_double);
    med[i] = t[i * ROUNDS + ROUNDS / 2];
    if (i && med[i] < med[*best] * MARGIN) *best = i;
  }
  npuC_free(b->ctx, t);
  if (s) return s;
  cJSON *r = new_record(c, key, "subgraph");
  if (!r) return NPU_ERR_NOMEM;
  cJSON *off = cJSON_AddArrayToObject(r, "fusion_off");
  for (int i = 0; off && i < npuP_fusion_pass_count(); i++)
    if (fusion_off[*best] & (1u << i))
      cJSON_AddItemToArray(off, cJSON_CreateString(npuP_fusion_pass_name(i)));
  cJSON *cands = cJSON_AddArrayToObject(r, "candidates");
  for (int j = 0; cands && j < n && j < 32; j++) {
    cJSON *o = cJSON_CreateObject(), *offs = o ? cJSON_AddArrayToObject(o, "fusion_off") : NULL;
    for (int i = 0; offs && i < npuP_fusion_pass_count(); i++)
      if (fusion_off[j] & (1u << i))
        cJSON_AddItemToArray(offs, cJSON_CreateString(npuP_fusion_pass_name(i)));
    if (o) cJSON_AddNumberToObject(o, "median_us", (double)(int64_t)(med[j] * 1000) / 1000);
    if (o) cJSON_AddItemToArray(cands, o);
  }
  store_put(c, &c->aoe, r);
  store_put(c, &c->cache, r);
  cJSON_Delete(r);
  return save_all(b->ctx, c);
}
