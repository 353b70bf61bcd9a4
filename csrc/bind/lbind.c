/*
 * lbind.c — luaopen_npu_core: the module table, this lua_State's context, the error helper.
 *
 * The context lives in a full userdata kept in the registry under a private key; its __gc
 * drops the state's reference when the state closes.  Objects made from it hold their own
 * references, so they stay valid even if collected in any order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bind/bind.h"

static const char CONTEXT_KEY = 0; /* its address is the registry key */

typedef struct context_box {
  npu_context *ctx;
} context_box;

static int context_gc(lua_State *L) {
  context_box *box = lua_touserdata(L, 1);
  npu_context_release(box->ctx);
  box->ctx = NULL;
  return 0;
}

npu_context *npuB_context(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &CONTEXT_KEY);
  context_box *box = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!box || !box->ctx) luaL_error(L, "npu: the module's context is gone (state closing?)");
  return box->ctx;
}

static int push_string_protected(lua_State *L) {
  lua_pushstring(L, lua_touserdata(L, 1));
  return 1;
}

int npuB_push_owned_string(lua_State *L, npu_context *ctx, char *text) {
  lua_pushcfunction(L, push_string_protected);
  lua_pushlightuserdata(L, text);
  int rc = lua_pcall(L, 1, 1, 0);
  npu_free(ctx, text);
  if (rc != LUA_OK) return lua_error(L);
  return 1;
}

int npuB_raise(lua_State *L, const char *where, npu_status status) {
  npu_context *ctx = npuB_context(L);
  const char *msg = npu_context_errmsg(ctx);
  return luaL_error(L, "%s: %s: %s", where, npu_status_name(status),
                    msg && *msg ? msg : "(no detail)");
}

static int l_live_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)npu_context_live_bytes(npuB_context(L)));
  return 1;
}

static int l_peak_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)npu_context_peak_bytes(npuB_context(L)));
  return 1;
}

static int l_n_threads(lua_State *L) {
  lua_pushinteger(L, npu_context_n_threads(npuB_context(L)));
  return 1;
}

static int l_set_n_threads(lua_State *L) {
  npu_context_set_n_threads(npuB_context(L), (int)luaL_checkinteger(L, 1));
  return 0;
}

static int l_fail_after(lua_State *L) {
  npu_context_fail_after(npuB_context(L), (long)luaL_checkinteger(L, 1));
  return 0;
}

static int l_status_names(lua_State *L) {
  lua_createtable(L, NPU_STATUS_COUNT, 0);
  for (int i = 0; i < NPU_STATUS_COUNT; i++) {
    lua_pushstring(L, npu_status_name((npu_status)i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* Reads NPU_NUM_THREADS / NPU_NUM_DEVICES so a host (or a test) can size the device pool of a
   state before loading the module; both default as in npu_context_config. */
static int env_int(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end;
  long n = strtol(v, &end, 10);
  return *end || n < 0 || n > 1024 ? -1 : (int)n;
}

int luaopen_npu_core(lua_State *L);
NPU_API int luaopen_npu_core(lua_State *L) {
  npu_context_config cfg = {.n_threads = env_int("NPU_NUM_THREADS"),
                            .n_devices = env_int("NPU_NUM_DEVICES")};
  if (cfg.n_threads < 0) return luaL_error(L, "npu: NPU_NUM_THREADS must be an integer in [0, 1024]");
  if (cfg.n_devices < 0) return luaL_error(L, "npu: NPU_NUM_DEVICES must be an integer in [0, 1024]");
  context_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->ctx = NULL;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, context_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  if (npu_context_new(&cfg, &box->ctx) != NPU_OK)
    return luaL_error(L, "npu: cannot create the device context (out of memory?)");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &CONTEXT_KEY);

  static const luaL_Reg funcs[] = {
      {"live_bytes", l_live_bytes}, {"peak_bytes", l_peak_bytes}, {"n_threads", l_n_threads},
      {"set_n_threads", l_set_n_threads},
      {"_fail_after", l_fail_after}, {"status_names", l_status_names}, {NULL, NULL}};
  luaL_newlib(L, funcs);
  npuB_open_tensor(L);
  npuB_open_graph(L);
  npuB_open_session(L);
  npuB_open_options(L);
  npuB_open_io(L);
  npuB_open_train(L);
  npuB_open_data(L);
  npuB_open_summary(L);
  return 1;
}
