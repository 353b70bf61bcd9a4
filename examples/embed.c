/*
 * embed.c — lua-npu from a C host, two ways.
 *
 *  1. The C API alone: build y = relu(x W + b), create a session, run it, read the result.
 *  2. A host that embeds Lua: two lua_States on two threads, each loading `npu` with require
 *     (the installed module, found through package.path and package.cpath, which Lua takes from
 *     LUA_PATH_5_4 / LUA_CPATH_5_4; from the repository root the checkout's npu/ is found) and
 *     running a script that builds and runs its own graph.  Contexts are per state, so nothing
 *     is shared.
 *
 * Built as a host builds it, against the installed library:
 *     cc embed.c $(pkg-config --cflags --libs npu lua5.4)
 * (`make test` installs into a temporary DESTDIR and does exactly that: tests/test_install.sh).
 * Exit status 0 on success.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <npu.h>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    npu_status st_ = (call);                                                              \
    if (st_ != NPU_OK) {                                                                  \
      fprintf(stderr, "embed: %s failed: %s: %s\n", #call, npu_status_name(st_),          \
              npu_context_errmsg(ctx));                                                   \
      goto done;                                                                          \
    }                                                                                     \
  } while (0)

/* The host's allocator (lua_Alloc's contract): here malloc with a count of the blocks out, so
   the host sees the library give back everything it took. */
typedef struct host_heap {
  atomic_long blocks;
} host_heap;

static void *host_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  host_heap *heap = ud;
  (void)osize;
  if (nsize == 0) {
    if (ptr) atomic_fetch_sub(&heap->blocks, 1);
    free(ptr);
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (p && !ptr) atomic_fetch_add(&heap->blocks, 1);
  return p;
}

static int run_c_api(void) {
  int ok = 0;
  host_heap heap = {0};
  npu_context *ctx = NULL;
  npu_graph *g = NULL;
  npu_tensor *w = NULL, *b = NULL, *x = NULL, *y = NULL;
  npu_options *opts = NULL;
  npu_session *sess = NULL;
  npu_context_config cfg = {.alloc = host_alloc, .alloc_ud = &heap};
  if (npu_context_new(&cfg, &ctx) != NPU_OK) return 0;
  CHECK(npu_graph_new(ctx, &g));

  /* x: a (-1, 3) placeholder; w: 3x2 constant; b: 2 constant */
  int64_t xshape[] = {-1, 3};
  npu_attr ph_attrs[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                         {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xshape, 2}}};
  int n_x, n_w, n_b, n_mm, n_add, n_relu;
  CHECK(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph_attrs, &n_x));
  const float wdata[] = {1, -1, 2, 0.5f, -3, 1};
  const float bdata[] = {0.5f, -0.25f};
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, (int64_t[]){3, 2}, wdata, sizeof wdata, &w));
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 1, (int64_t[]){2}, bdata, sizeof bdata, &b));
  npu_attr wa = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = w};
  npu_attr ba = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = b};
  CHECK(npu_graph_add_op(g, "const", "w", 0, NULL, 1, &wa, &n_w));
  CHECK(npu_graph_add_op(g, "const", "b", 0, NULL, 1, &ba, &n_b));
  int mm_in[] = {npu_graph_output(g, n_x, 0), npu_graph_output(g, n_w, 0)};
  CHECK(npu_graph_add_op(g, "matmul", NULL, 2, mm_in, 0, NULL, &n_mm));
  int add_in[] = {npu_graph_output(g, n_mm, 0), npu_graph_output(g, n_b, 0)};
  CHECK(npu_graph_add_op(g, "bias_add", NULL, 2, add_in, 0, NULL, &n_add));
  int relu_in[] = {npu_graph_output(g, n_add, 0)};
  CHECK(npu_graph_add_op(g, "relu", "y", 1, relu_in, 0, NULL, &n_relu));

  CHECK(npu_options_new(ctx, &opts));
  CHECK(npu_options_set_int(opts, "graph_run_mode", 0));
  CHECK(npu_session_new(ctx, g, opts, &sess));

  const float xdata[] = {1, 2, 3, -1, 0, 1};
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, (int64_t[]){2, 3}, xdata, sizeof xdata, &x));
  int feed = npu_graph_output(g, n_x, 0), fetch = npu_graph_output(g, n_relu, 0);
  CHECK(npu_session_run(sess, 1, &feed, &x, 1, &fetch, &y, 0, NULL));

  /* expected: relu(x W + b) computed here by hand */
  const float *out = npu_tensor_data(y);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      float acc = bdata[j];
      for (int k = 0; k < 3; k++) acc += xdata[i * 3 + k] * wdata[k * 2 + j];
      float want = acc > 0 ? acc : 0;
      if (fabsf(out[i * 2 + j] - want) > 1e-5f) {
        fprintf(stderr, "embed: y[%d][%d] = %g, expected %g\n", i, j, out[i * 2 + j], want);
        goto done;
      }
    }
  printf("C API: y = relu(x W + b) -> [[%g, %g], [%g, %g]]\n", out[0], out[1], out[2], out[3]);
  ok = 1;
done:
  npu_tensor_release(y);
  npu_tensor_release(x);
  npu_session_release(sess);
  npu_options_release(opts);
  npu_tensor_release(w);
  npu_tensor_release(b);
  npu_graph_release(g);
  if (ok && npu_context_live_bytes(ctx) != 0) {
    fprintf(stderr, "embed: %zu bytes still live after releasing everything\n",
            npu_context_live_bytes(ctx));
    ok = 0;
  }
  npu_context_release(ctx);
  if (ok && atomic_load(&heap.blocks) != 0) {
    fprintf(stderr, "embed: %ld blocks of the host's allocator not given back\n",
            (long)atomic_load(&heap.blocks));
    ok = 0;
  }
  return ok;
}

/* ---- two lua_States on two threads ---- */

static const char *script =
    "local npu = require('npu')\n"
    "local seed = ...\n"
    "local g = npu.Graph()\n"
    "local x = g:placeholder('float32', {-1, 4}, 'x')\n"
    "local w = g:variable(npu.random.normal({4, 3}, {seed = seed}), 'w')\n"
    "local y = npu.nn.softmax(x:matmul(w))\n"
    "local sess <close> = npu.Session{graph = g, options = {graph_run_mode = 0,\n"
    "  precision_mode = 'must_keep_origin_dtype'}}\n"
    "sess:run(g:global_variables_initializer())\n"
    "local total = 0\n"
    "for i = 1, 200 do\n"
    "  local p = sess:run(y, {[x] = npu.random.uniform({8, 4}, {seed = i})})\n"
    "  for _, row in ipairs(p:totable()) do total = total + row[1] + row[2] + row[3] end\n"
    "end\n"
    "return total\n";

typedef struct lua_job {
  int seed;
  double total;
  char error[256];
} lua_job;

static void *run_lua(void *arg) {
  lua_job *job = arg;
  lua_State *L = luaL_newstate();
  if (!L) {
    snprintf(job->error, sizeof job->error, "cannot create a lua_State");
    return NULL;
  }
  luaL_openlibs(L);
  if (luaL_loadstring(L, script) != LUA_OK) {
    snprintf(job->error, sizeof job->error, "%s", lua_tostring(L, -1));
  } else {
    lua_pushinteger(L, job->seed);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) snprintf(job->error, sizeof job->error, "%s", lua_tostring(L, -1));
    else job->total = lua_tonumber(L, -1);
  }
  lua_close(L);
  return NULL;
}

static int run_two_states(void) {
  lua_job jobs[2] = {{.seed = 1}, {.seed = 2}};
  pthread_t threads[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&threads[i], NULL, run_lua, &jobs[i]) != 0) return 0;
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  for (int i = 0; i < 2; i++) {
    if (jobs[i].error[0]) {
      fprintf(stderr, "embed: lua state %d: %s\n", i + 1, jobs[i].error);
      return 0;
    }
    /* Each row of a softmax sums to 1: 200 runs x 8 rows. */
    if (fabs(jobs[i].total - 1600.0) > 1e-2) {
      fprintf(stderr, "embed: lua state %d: softmax rows summed to %g, expected 1600\n", i + 1,
              jobs[i].total);
      return 0;
    }
  }
  printf("Lua: two lua_States on two threads ran 200 sessions runs each (row sums %.4f, %.4f)\n",
         jobs[0].total, jobs[1].total);
  return 1;
}

int main(void) {
  /* The header compiled against and the library linked must agree (same major at least). */
  if (npu_version() / 10000 != NPU_VERSION_MAJOR) {
    fprintf(stderr, "embed: npu.h is %d.%d.%d, the library %s\n", NPU_VERSION_MAJOR,
            NPU_VERSION_MINOR, NPU_VERSION_PATCH, npu_version_string());
    return 1;
  }
  if (!run_c_api()) return 1;
  if (!run_two_states()) return 1;
  printf("embed: ok (lua-npu %s)\n", npu_version_string());
  return 0;
}
