/*
 * context.c — the context: accounted allocator, error-message slot, log hook, status and dtype
 * names.  The context is the only place memory comes from, so a test can assert that zero bytes
 * are live after tearing everything down, and can make the n-th allocation fail.
 *
 * Every block carries a 16-byte header holding its size, so frees need no size and the live
 * byte count stays exact.  The blocks come from the host's allocator (npu_context_config.alloc,
 * lua_Alloc's contract) or from malloc; accounting, the limit and the injected failures sit on
 * top of either, so they behave the same whatever the host plugs in.  Counters are atomic because a tensor may be released on another
 * thread than the one that created it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/npu_int.h"
#include "core/pool.h"
#include "kernels/kernels.h"

typedef union block_header {
  size_t size;
  max_align_t align;
} block_header;

static const char *const status_names[NPU_STATUS_COUNT] = {
    [NPU_OK] = "NPU_OK",
    [NPU_ERR_NOMEM] = "NPU_ERR_NOMEM",
    [NPU_ERR_ARG] = "NPU_ERR_ARG",
    [NPU_ERR_DTYPE] = "NPU_ERR_DTYPE",
    [NPU_ERR_SHAPE] = "NPU_ERR_SHAPE",
    [NPU_ERR_OPTION] = "NPU_ERR_OPTION",
    [NPU_ERR_CONFLICT] = "NPU_ERR_CONFLICT",
    [NPU_ERR_NOT_FOUND] = "NPU_ERR_NOT_FOUND",
    [NPU_ERR_STATE] = "NPU_ERR_STATE",
    [NPU_ERR_IO] = "NPU_ERR_IO",
    [NPU_ERR_FORMAT] = "NPU_ERR_FORMAT",
    [NPU_ERR_UNSUPPORTED] = "NPU_ERR_UNSUPPORTED",
    [NPU_ERR_OUT_OF_RANGE] = "NPU_ERR_OUT_OF_RANGE",
    [NPU_ERR_CALLBACK] = "NPU_ERR_CALLBACK",
    [NPU_ERR_INTERNAL] = "NPU_ERR_INTERNAL",
    [NPU_ERR_CANCELLED] = "NPU_ERR_CANCELLED",
    [NPU_ERR_TIMEOUT] = "NPU_ERR_TIMEOUT",
};

const char *npu_status_name(npu_status s) {
  if ((unsigned)s >= NPU_STATUS_COUNT || !status_names[s]) return "NPU_ERR_UNKNOWN";
  return status_names[s];
}

static const struct {
  const char *name;
  size_t size;
} dtype_info[NPU_DTYPE_COUNT] = {
    [NPU_DTYPE_F32] = {"float32", 4}, [NPU_DTYPE_F16] = {"float16", 2},
    [NPU_DTYPE_BF16] = {"bfloat16", 2}, [NPU_DTYPE_F64] = {"float64", 8},
    [NPU_DTYPE_I8] = {"int8", 1},       [NPU_DTYPE_U8] = {"uint8", 1},
    [NPU_DTYPE_I32] = {"int32", 4},     [NPU_DTYPE_I64] = {"int64", 8},
    [NPU_DTYPE_BOOL] = {"bool", 1},
};

const char *npu_dtype_name(npu_dtype t) {
  return (unsigned)t < NPU_DTYPE_COUNT ? dtype_info[t].name : "invalid";
}

size_t npu_dtype_size(npu_dtype t) {
  return (unsigned)t < NPU_DTYPE_COUNT ? dtype_info[t].size : 0;
}

int npu_dtype_from_name(const char *name) {
  static const struct {
    const char *alias;
    npu_dtype t;
  } aliases[] = {{"float", NPU_DTYPE_F32}, {"double", NPU_DTYPE_F64}, {"half", NPU_DTYPE_F16}};
  if (!name) return -1;
  for (int i = 0; i < NPU_DTYPE_COUNT; i++)
    if (strcmp(name, dtype_info[i].name) == 0) return i;
  for (size_t i = 0; i < npu_countof(aliases); i++)
    if (strcmp(name, aliases[i].alias) == 0) return (int)aliases[i].t;
  return -1;
}

const char *npu_version_string(void) {
#define NPU_STR_(x) #x
#define NPU_STR(x) NPU_STR_(x)
  return NPU_STR(NPU_VERSION_MAJOR) "." NPU_STR(NPU_VERSION_MINOR) "." NPU_STR(NPU_VERSION_PATCH);
}

int npu_version(void) { return NPU_VERSION_NUMBER; }

/* ---- context lifecycle ---------------------------------------------- */

/* The default allocator: malloc/free behind lua_Alloc's contract. */
static void *default_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, nsize);
}

npu_status npu_context_new(const npu_context_config *cfg, npu_context **out) {
  if (!out) return NPU_ERR_ARG;
  *out = NULL;
  npu_context_config c = cfg ? *cfg : (npu_context_config){0};
  if (c.n_threads < 0 || c.n_devices < 0) return NPU_ERR_ARG;
  if (c.n_threads == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c.n_threads = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
  }
  if (c.n_devices == 0) c.n_devices = 8;
  /* The device parallelises GEMM itself (kernels/blas.c): OpenBLAS runs single-threaded. */
  npuK_blas_set_threads(1);
  npu_alloc_fn alloc = c.alloc ? c.alloc : default_alloc;
  npu_context *ctx = alloc(c.alloc_ud, NULL, 0, sizeof *ctx);
  if (!ctx) return NPU_ERR_NOMEM;
  memset(ctx, 0, sizeof *ctx);
  ctx->alloc = alloc;
  ctx->alloc_ud = c.alloc_ud;
  atomic_init(&ctx->refcount, 1);
  atomic_init(&ctx->live_bytes, 0);
  atomic_init(&ctx->peak_bytes, 0);
  atomic_init(&ctx->pool_busy, false);
  ctx->memory_limit = c.memory_limit;
  ctx->n_devices = c.n_devices;
  npu_status st = npuC_pool_new(ctx, c.n_threads, &ctx->pool);
  if (st != NPU_OK) {
    alloc(c.alloc_ud, ctx, sizeof *ctx, 0);
    return st;
  }
  *out = ctx;
  return NPU_OK;
}

npu_context *npu_context_retain(npu_context *ctx) {
  if (ctx) atomic_fetch_add(&ctx->refcount, 1);
  return ctx;
}

void npu_context_release(npu_context *ctx) {
  if (!ctx || atomic_fetch_sub(&ctx->refcount, 1) != 1) return;
  npuC_pool_free(ctx->pool);
  ctx->alloc(ctx->alloc_ud, ctx, sizeof *ctx, 0);
}

const char *npu_context_errmsg(const npu_context *ctx) { return ctx ? ctx->errmsg : ""; }
size_t npu_context_live_bytes(const npu_context *ctx) { return atomic_load(&ctx->live_bytes); }
size_t npu_context_peak_bytes(const npu_context *ctx) { return atomic_load(&ctx->peak_bytes); }
size_t npu_context_memory_limit(const npu_context *ctx) { return ctx ? ctx->memory_limit : 0; }

npu_status npu_context_set_memory_limit(npu_context *ctx, size_t bytes) {
  if (!ctx) return NPU_ERR_ARG;
  size_t live = atomic_load(&ctx->live_bytes);
  if (bytes && bytes < live)
    return npuC_error(ctx, NPU_ERR_ARG,
                      "memory limit %zu bytes is below the %zu bytes in use now (free tensors, "
                      "sessions or graphs first, or give a limit of at least %zu; 0: none)",
                      bytes, live, live);
  ctx->memory_limit = bytes;
  return NPU_OK;
}
int npu_context_n_threads(const npu_context *ctx) { return npuC_pool_active(ctx->pool); }

void npu_context_set_n_threads(npu_context *ctx, int n) {
  if (n < 1 || n > npuC_pool_size(ctx->pool)) n = npuC_pool_size(ctx->pool);
  npuC_pool_set_active(ctx->pool, n);
}
int npu_context_n_devices(const npu_context *ctx) { return ctx->n_devices; }

void npu_context_set_log(npu_context *ctx, npu_log_fn fn, void *ud) {
  ctx->log_fn = fn;
  ctx->log_ud = ud;
}

void npu_context_fail_after(npu_context *ctx, long n) {
  atomic_store(&ctx->fail_after, n > 0 ? n : 0);
}

/* The test hook's countdown: true when this allocation is the one to fail.  Atomic, as runs
   of one session on several threads allocate at once (graph_max_parallel_model_num). */
static bool injected_failure(npu_context *ctx) {
  long n = atomic_load_explicit(&ctx->fail_after, memory_order_relaxed);
  while (n > 0)
    if (atomic_compare_exchange_weak(&ctx->fail_after, &n, n - 1)) return n == 1;
  return false;
}

/* ---- allocation ---------------------------------------------------------- */

void *npuC_alloc(npu_context *ctx, size_t n) {
  if (injected_failure(ctx)) {
    npuC_error(ctx, NPU_ERR_NOMEM, "out of memory (injected failure, %zu bytes)", n);
    return NULL;
  }
  if (n > SIZE_MAX - sizeof(block_header)) {
    npuC_error(ctx, NPU_ERR_NOMEM, "out of memory (%zu bytes requested)", n);
    return NULL;
  }
  size_t live = atomic_load(&ctx->live_bytes);
  /* n > limit - live, not live + n > limit: that sum wraps for a huge n (and live may pass
     the limit a little when threads allocate at once) */
  if (ctx->memory_limit && (live > ctx->memory_limit || n > ctx->memory_limit - live)) {
    npuC_error(ctx, NPU_ERR_NOMEM,
               "out of memory: %zu bytes requested, %zu of the %zu-byte memory limit in use",
               n, live, ctx->memory_limit);
    return NULL;
  }
  block_header *h = ctx->alloc(ctx->alloc_ud, NULL, 0, sizeof *h + n);
  if (!h) {
    npuC_error(ctx, NPU_ERR_NOMEM, "out of memory (%zu bytes requested)", n);
    return NULL;
  }
  h->size = n;
  size_t now = atomic_fetch_add(&ctx->live_bytes, n) + n;
  size_t peak = atomic_load(&ctx->peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&ctx->peak_bytes, &peak, now)) {
  }
  return h + 1;
}

void *npuC_calloc(npu_context *ctx, size_t count, size_t size) {
  if (size && count > SIZE_MAX / size) {
    npuC_error(ctx, NPU_ERR_NOMEM, "out of memory (%zu x %zu bytes requested)", count, size);
    return NULL;
  }
  void *p = npuC_alloc(ctx, count * size);
  if (p) memset(p, 0, count * size);
  return p;
}

void *npuC_realloc(npu_context *ctx, void *p, size_t n) {
  if (!p) return npuC_alloc(ctx, n);
  block_header *old = (block_header *)p - 1;
  size_t old_size = old->size;
  if (n <= old_size) return p;
  void *q = npuC_alloc(ctx, n);
  if (!q) return NULL;
  memcpy(q, p, old_size);
  npuC_free(ctx, p);
  return q;
}

void npuC_free(npu_context *ctx, void *p) {
  if (!p) return;
  block_header *h = (block_header *)p - 1;
  size_t size = h->size;
  atomic_fetch_sub(&ctx->live_bytes, size);
  ctx->alloc(ctx->alloc_ud, h, sizeof *h + size, 0);
}

void npu_free(npu_context *ctx, void *p) {
  if (ctx) npuC_free(ctx, p);
}

char *npuC_strdup(npu_context *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = npuC_alloc(ctx, n);
  if (d) memcpy(d, s, n);
  return d;
}

/* ---- errors and log -------------------------------------------------- */

npu_status npuC_error(npu_context *ctx, npu_status status, const char *fmt, ...) {
  if (ctx) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->errmsg, sizeof ctx->errmsg, fmt, ap);
    va_end(ap);
    ctx->errnode[0] = '\0'; /* a new error: about no node until one is recorded */
    ctx->errop = NULL;
  }
  return status;
}

void npuC_error_node(npu_context *ctx, const char *node, const char *op) {
  if (!ctx || ctx->errnode[0] || !node || !*node) return;
  snprintf(ctx->errnode, sizeof ctx->errnode, "%s", node);
  ctx->errop = op;
}

const char *npu_context_errnode(const npu_context *ctx, const char **op) {
  bool known = ctx && ctx->errnode[0];
  if (op) *op = known ? ctx->errop : NULL;
  return known ? ctx->errnode : NULL;
}

npu_status npuC_error_prefix(npu_context *ctx, npu_status status, const char *fmt, ...) {
  if (ctx) {
    char prefix[NPU_ERRMSG_SIZE], old[NPU_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, ctx->errmsg, sizeof old);
    /* Precisions keep gcc's truncation analysis quiet: the message is cut, never overrun. */
    snprintf(ctx->errmsg, sizeof ctx->errmsg, "%.200s: %.300s", prefix, old);
  }
  return status;
}

void npuC_log(npu_context *ctx, int level, const char *fmt, ...) {
  if (!ctx || !ctx->log_fn) return;
  char msg[NPU_ERRMSG_SIZE];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ctx->log_fn(ctx->log_ud, level, msg);
}

/* ---- small helpers ---------------------------------------------------- */

int npuC_edit_distance(const char *a, const char *b) {
  /* Two-row Levenshtein; option and op names are short, longer inputs are clipped. */
  enum { MAXLEN = 127 };
  int row0[MAXLEN + 1], row1[MAXLEN + 1];
  size_t la = strlen(a), lb = strlen(b);
  if (la > MAXLEN) la = MAXLEN;
  if (lb > MAXLEN) lb = MAXLEN;
  for (size_t j = 0; j <= lb; j++) row0[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    row1[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      int best = row0[j - 1] + cost;
      if (row0[j] + 1 < best) best = row0[j] + 1;
      if (row1[j - 1] + 1 < best) best = row1[j - 1] + 1;
      row1[j] = best;
    }
    memcpy(row0, row1, (lb + 1) * sizeof row0[0]);
  }
  return row0[lb];
}

void npu_nearest_init(npu_nearest *n, const char *name) {
  if (!n) return;
  n->name = name ? name : "";
  n->best = NULL;
  n->best_d = 1 << 30;
}

void npu_nearest_try(npu_nearest *n, const char *candidate) {
  if (!n) return;
  if (!candidate || !*candidate || !*n->name) return;
  int d;
  if (strcasecmp(candidate, n->name) == 0) d = 0;
  else if (strlen(n->name) >= 3 && strstr(candidate, n->name)) d = 1;
  else d = npuC_edit_distance(n->name, candidate);
  if (d < n->best_d) n->best_d = d, n->best = candidate;
}

const char *npu_nearest_result(const npu_nearest *n) {
  if (!n) return NULL;
  int limit = (int)strlen(n->name) / 2;
  if (limit < 2) limit = 2;
  return n->best && n->best_d <= limit ? n->best : NULL;
}

const char *npuC_shape_str(char *buf, size_t size, int ndim, const int64_t *shape) {
  size_t used = 0;
  if (ndim < 0) {
    snprintf(buf, size, "<unknown rank>");
    return buf;
  }
  used += (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < ndim && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

const char *npu_shape_format(char *buf, size_t size, int ndim, const int64_t *shape) {
  if (!buf || size == 0) return buf;
  if (ndim > 0 && !shape) ndim = 0;
  return npuC_shape_str(buf, size, ndim, shape);
}
