/*
 * test_context.c — the context as a host sees it: the version, and a host allocator
 * (npu_context_config.alloc, lua_Alloc's contract).  With one plugged in, every block the
 * library takes comes from it and goes back to it (counted here), the accounting (live and
 * peak bytes, memory_limit) and npu_context_fail_after still apply on top, and an allocator
 * that refuses makes calls fail with NPU_ERR_NOMEM and leave nothing behind.
 */
#include <stdlib.h>
#include <string.h>

#include "npu_test.h"
#include "core/npu_int.h" /* npuC_alloc: a request no public call can make */

typedef struct heap {
  long blocks, calls;
  size_t bytes;     /* held now, as the host sees it (the library's bytes plus headers) */
  long refuse_from; /* > 0: the refuse_from-th call allocating, and every later one, fails */
  int bad_osize;    /* a free or resize whose osize did not match what was handed out */
} heap;

/* Blocks carry their size before them, so the test can check the osize the library gives. */
static void *host_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  heap *h = ud;
  size_t *old = ptr ? (size_t *)ptr - 2 : NULL;
  if (old && old[0] != osize) h->bad_osize = 1;
  if (nsize == 0) {
    if (old) {
      h->blocks--;
      h->bytes -= old[0];
      free(old);
    }
    return NULL;
  }
  h->calls++;
  if (h->refuse_from > 0 && h->calls >= h->refuse_from) return NULL;
  size_t *p = realloc(old, nsize + 2 * sizeof(size_t));
  if (!p) return NULL;
  if (!old) h->blocks++;
  h->bytes += nsize - (old ? p[0] : 0);
  p[0] = nsize;
  return p + 2;
}

/* y = relu(x W) for a fed x: a graph, a session, a run. */
static npu_status small_run(npu_context *ctx, float *result) {
  npu_status st;
  npu_graph *g = NULL;
  npu_session *s = NULL;
  npu_tensor *x = NULL, *y = NULL, *w = NULL;
  int vx, vw, vm, vy, node;
  int64_t shape[] = {2, 2};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 2}}};
  if ((st = npu_graph_new(ctx, &g))) goto done;
  if ((st = npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &node))) goto done;
  vx = npu_graph_output(g, node, 0);
  if ((st = npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, shape, (float[]){1, -2, 3, 4}, 16, &w)))
    goto done;
  st = graph_const(g, "w", w, &vw);
  w = NULL;
  if (st) goto done;
  if ((st = graph_op(g, "matmul", NULL, 2, (int[]){vx, vw}, &vm))) goto done;
  if ((st = graph_op(g, "relu", "y", 1, &vm, &vy))) goto done;
  if ((st = npu_session_new(ctx, g, NULL, &s))) goto done;
  if ((st = npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, shape, (float[]){1, 0, 0, 1}, 16, &x)))
    goto done;
  if ((st = npu_session_run(s, 1, &vx, &x, 1, &vy, &y, 0, NULL))) goto done;
  if (result) memcpy(result, npu_tensor_data(y), 16);
done:
  npu_tensor_release(y);
  npu_tensor_release(x);
  npu_tensor_release(w);
  npu_session_release(s);
  npu_graph_release(g);
  return st;
}

static npu_status sweep_run(npu_context *ctx, void *ud) {
  (void)ud;
  return small_run(ctx, NULL);
}

static void test_version(void) {
  CHECK(npu_version() == NPU_VERSION_NUMBER);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", NPU_VERSION_MAJOR, NPU_VERSION_MINOR,
           NPU_VERSION_PATCH);
  CHECK(strcmp(npu_version_string(), want) == 0);
}

static void test_host_allocator(void) {
  heap h = {0};
  npu_context *ctx = NULL;
  npu_context_config cfg = {.n_threads = 2, .alloc = host_alloc, .alloc_ud = &h};
  CHECK(npu_context_new(&cfg, &ctx) == NPU_OK);
  if (!ctx) return;
  CHECK(h.blocks == 1); /* the context itself */
  float y[4] = {0};
  CHECK(small_run(ctx, y) == NPU_OK);
  CHECK(y[0] == 1 && y[1] == 0 && y[2] == 3 && y[3] == 4);
  CHECK(npu_context_live_bytes(ctx) == 0);
  CHECK(npu_context_peak_bytes(ctx) > 0);
  CHECK(h.blocks == 1);

  /* While things live, the host holds the library's bytes plus a header per block. */
  npu_tensor *t = NULL;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, (int64_t[]){1000}, &t) == NPU_OK);
  CHECK(h.blocks >= 2);
  CHECK(h.bytes >= npu_context_live_bytes(ctx) && npu_context_live_bytes(ctx) >= 4000);
  npu_tensor_release(t);

  /* The test hook and the sweep work on top of the host's allocator. */
  int n_nomem = sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_run,
                                                          .what = "host allocator sweep"});
  CHECK(n_nomem > 20);
  CHECK(h.blocks == 1);

  /* The host's allocator refusing: NPU_ERR_NOMEM, nothing left behind. */
  for (long k = 1; k < 400; k += 7) {
    h.refuse_from = h.calls + k;
    npu_status st = small_run(ctx, NULL);
    h.refuse_from = 0;
    CHECK(st == NPU_OK || st == NPU_ERR_NOMEM);
    CHECK(npu_context_live_bytes(ctx) == 0);
    CHECK(h.blocks == 1);
  }
  /* memory_limit still applies (the accounting, not the host, refuses). */
  npu_context_release(ctx);
  CHECK(h.blocks == 0 && h.bytes == 0);
  CHECK(!h.bad_osize);

  cfg.memory_limit = 1000;
  CHECK(npu_context_new(&cfg, &ctx) == NPU_OK);
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, (int64_t[]){1000}, &t) == NPU_ERR_NOMEM);
  CHECK(t == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "limit") != NULL);
  /* a request so large that the bytes in use plus it wrap around is past the limit too: it
     never reaches the host */
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, (int64_t[]){100}, &t) == NPU_OK);
  long calls = h.calls;
  CHECK(npuC_alloc(ctx, SIZE_MAX - 64) == NULL);
  CHECK(h.calls == calls);
  CHECK(strstr(npu_context_errmsg(ctx), "of the 1000-byte memory limit") != NULL);
  npu_tensor_release(t);
  t = NULL;
  npu_context_release(ctx);
  CHECK(h.blocks == 0);

  /* A host that refuses the context itself. */
  h.refuse_from = h.calls + 1;
  ctx = (npu_context *)&h;
  CHECK(npu_context_new(&cfg, &ctx) == NPU_ERR_NOMEM);
  CHECK(ctx == NULL);
  CHECK(h.blocks == 0);
  h.refuse_from = 0;
}

int main(void) {
  test_version();
  test_host_allocator();
  return check_summary("test_context");
}
