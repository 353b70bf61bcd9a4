/*
 * lbind.c — luaopen_npu_core: the module table, this lua_State's context, the error helper.
 *
 * The context lives in a full userdata kept in the registry under a private key; its __gc
 * drops the state's reference when the state closes.  Objects made from it hold their own
 * references, so they stay valid even if collected in any order.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"

static const char CONTEXT_KEY = 0; /* its address is the registry key */
static const char LOG_FN_KEY = 0;  /* registry key of the Lua log handler (core.set_log_handler) */

/* ---- the log ----
 *
 * The core reports warnings through the context's log hook, sometimes from its own threads
 * (dump and profile writers).  Lua may only be called on the thread and state running the
 * binding, so the hook only queues (a fixed ring in the context box: no malloc, a mutex for
 * the writers); npuB_flush_log hands the queue to the Lua handler through lua_pcall, after
 * the calls that may log (session create/run/close, options check) and before every raise. */
enum { LOG_SLOTS = 32, LOG_MSG = 512 };
typedef struct log_ring {
  pthread_mutex_t mu;
  atomic_int n; /* queued; read without the lock on the fast path */
  int head, dropped;
  struct {
    int level;
    char msg[LOG_MSG];
  } slot[LOG_SLOTS];
} log_ring;

typedef struct context_box {
  npu_context *ctx;
  log_ring log;
} context_box;

static int context_gc(lua_State *L) {
  context_box *box = lua_touserdata(L, 1);
  if (box->ctx) npu_context_set_log(box->ctx, NULL, NULL); /* objects may outlive the box */
  npu_context_release(box->ctx);
  box->ctx = NULL;
  pthread_mutex_destroy(&box->log.mu);
  return 0;
}

static context_box *get_box(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &CONTEXT_KEY);
  context_box *box = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!box || !box->ctx) luaL_error(L, "npu: the module's context is gone (state closing?)");
  return box;
}

npu_context *npuB_context(lua_State *L) { return get_box(L)->ctx; }

static void log_hook(void *ud, int level, const char *message) {
  log_ring *r = ud;
  pthread_mutex_lock(&r->mu);
  int n = atomic_load(&r->n);
  if (n == LOG_SLOTS) r->dropped++;
  else {
    int i = (r->head + n) % LOG_SLOTS;
    r->slot[i].level = level;
    snprintf(r->slot[i].msg, LOG_MSG, "%s", message ? message : "");
    atomic_store(&r->n, n + 1);
  }
  pthread_mutex_unlock(&r->mu);
}

void npuB_flush_log(lua_State *L) {
  context_box *box = get_box(L);
  log_ring *r = &box->log;
  while (atomic_load_explicit(&r->n, memory_order_relaxed) > 0 || r->dropped) {
    int level;
    char msg[LOG_MSG];
    pthread_mutex_lock(&r->mu);
    if (atomic_load(&r->n) > 0) {
      level = r->slot[r->head].level;
      memcpy(msg, r->slot[r->head].msg, LOG_MSG);
      r->head = (r->head + 1) % LOG_SLOTS;
      atomic_fetch_sub(&r->n, 1);
    } else {
      level = 2;
      snprintf(msg, sizeof msg, "%d log messages were dropped (more than %d queued)", r->dropped,
               LOG_SLOTS);
      r->dropped = 0;
    }
    pthread_mutex_unlock(&r->mu);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &LOG_FN_KEY);
    if (!lua_isfunction(L, -1)) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushinteger(L, level);
    lua_pushstring(L, msg);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) lua_pop(L, 1); /* a failing handler loses one line */
  }
}

/* core.set_log_handler(fn): fn(level, message) receives the core's messages (level 0 debug,
   1 info, 2 warning, 3 error); nil: they are dropped.  core.flush_log() delivers the queue. */
static int l_set_log_handler(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) npuB_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &LOG_FN_KEY);
  return 0;
}

static int l_flush_log(lua_State *L) {
  npuB_flush_log(L);
  return 0;
}

/* core._log(level, message): sends a message through the context's log hook, as the core does
   (for tests of the path). */
static int l_log(lua_State *L) {
  int level = (int)npuB_checkinteger(L, 1);
  const char *msg = npuB_checkstring(L, 2);
  log_hook(&get_box(L)->log, level, msg);
  return 0;
}

/* ---- error objects ----
 *
 * Every error the module raises is an npu.Error: a table {code = "NPU_ERR_SHAPE", number = 4,
 * message = <the detail>, where = "npu.Session:run", node =, op =, position = "user.lua:12",
 * text = <the full text>} whose __tostring gives "<position>: <text>", the text a plain string
 * error would have had.  lua/npu/errors.lua adds classes and string methods to the metatable
 * (core.Error_mt) and raises its own errors through core.raise, so both sides share the rule
 * for `position`: the innermost Lua frame that is not a C function and not a file of the facade
 * (core.set_facade_dir tells which directory that is), i.e. the user's line. */
static const char ERROR_MT = 0;      /* registry key of the metatable */
static const char FACADE_DIR_KEY = 0; /* registry key of the facade's source prefix ("@.../npu/") */

static bool in_facade(lua_State *L, const char *source) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &FACADE_DIR_KEY);
  size_t n = 0;
  const char *dir = lua_tolstring(L, -1, &n);
  bool in = dir && n && strncmp(source, dir, n) == 0;
  lua_pop(L, 1);
  return in;
}

/* Pushes "file:line" of the user's frame (see above), or nil when there is none. */
static void push_position(lua_State *L) {
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0 || in_facade(L, ar.source)) continue;
    lua_pushfstring(L, "%s:%d", ar.short_src, ar.currentline);
    return;
  }
  lua_pushnil(L);
}

static void set_string(lua_State *L, const char *field, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, field);
}

/* The one raising path.  The message is at the top of the stack (popped). */
static int raise_object(lua_State *L, const char *where, npu_status status, const char *node,
                        const char *op) {
  npuB_flush_log(L); /* the warnings that led here come first */
  const char *message = lua_tostring(L, -1);
  int msg_idx = lua_gettop(L);
  lua_createtable(L, 0, 9);
  lua_pushstring(L, npu_status_name(status));
  lua_setfield(L, -2, "code");
  lua_pushinteger(L, (lua_Integer)status);
  lua_setfield(L, -2, "number");
  lua_pushvalue(L, msg_idx);
  lua_setfield(L, -2, "message");
  set_string(L, "where", where);
  set_string(L, "node", node);
  set_string(L, "op", op);
  if (where) lua_pushfstring(L, "%s: %s: %s", where, npu_status_name(status), message);
  else lua_pushvalue(L, msg_idx);
  lua_setfield(L, -2, "text");
  push_position(L);
  lua_setfield(L, -2, "position");
  lua_rawgetp(L, LUA_REGISTRYINDEX, &ERROR_MT);
  lua_setmetatable(L, -2);
  return lua_error(L);
}

int npuB_raise_node(lua_State *L, const char *where, npu_status status, const char *node,
                    const char *op) {
  npu_context *ctx = npuB_context(L);
  const char *msg = npu_context_errmsg(ctx);
  lua_pushstring(L, msg && *msg ? msg : "(no detail)");
  return raise_object(L, where, status, node, op);
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
  return npuB_raise_node(L, where, status, NULL, NULL);
}

int npuB_fail(lua_State *L, const char *where, npu_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  return raise_object(L, where, status, NULL, NULL);
}

/* ---- lauxlib's checks, raising npu errors (same texts as lauxlib's) ---- */

int npuB_argerror(lua_State *L, int arg, const char *extramsg) {
  lua_Debug ar;
  if (!lua_getstack(L, 0, &ar))
    return npuB_fail(L, NULL, NPU_ERR_ARG, "bad argument #%d (%s)", arg, extramsg);
  lua_getinfo(L, "n", &ar);
  if (ar.namewhat && strcmp(ar.namewhat, "method") == 0) {
    arg--;
    if (arg == 0)
      return npuB_fail(L, NULL, NPU_ERR_ARG, "calling '%s' on bad self (%s)",
                       ar.name ? ar.name : "?", extramsg);
  }
  return npuB_fail(L, NULL, NPU_ERR_ARG, "bad argument #%d to '%s' (%s)", arg,
                   ar.name ? ar.name : "?", extramsg);
}

int npuB_typeerror(lua_State *L, int arg, const char *tname) {
  const char *typearg;
  if (luaL_getmetafield(L, arg, "__name") == LUA_TSTRING) typearg = lua_tostring(L, -1);
  else if (lua_type(L, arg) == LUA_TLIGHTUSERDATA) typearg = "light userdata";
  else typearg = luaL_typename(L, arg);
  return npuB_argerror(L, arg, lua_pushfstring(L, "%s expected, got %s", tname, typearg));
}

void *npuB_checkudata(lua_State *L, int arg, const char *tname) {
  void *p = luaL_testudata(L, arg, tname);
  if (!p) npuB_typeerror(L, arg, tname);
  return p;
}

lua_Integer npuB_checkinteger(lua_State *L, int arg) {
  int isnum;
  lua_Integer d = lua_tointegerx(L, arg, &isnum);
  if (!isnum) {
    if (lua_isnumber(L, arg)) npuB_argerror(L, arg, "number has no integer representation");
    else npuB_typeerror(L, arg, lua_typename(L, LUA_TNUMBER));
  }
  return d;
}

lua_Number npuB_checknumber(lua_State *L, int arg) {
  int isnum;
  lua_Number d = lua_tonumberx(L, arg, &isnum);
  if (!isnum) npuB_typeerror(L, arg, lua_typename(L, LUA_TNUMBER));
  return d;
}

const char *npuB_checklstring(lua_State *L, int arg, size_t *len) {
  const char *s = lua_tolstring(L, arg, len);
  if (!s) npuB_typeerror(L, arg, lua_typename(L, LUA_TSTRING));
  return s;
}

void npuB_checktype(lua_State *L, int arg, int t) {
  if (lua_type(L, arg) != t) npuB_typeerror(L, arg, lua_typename(L, t));
}

void npuB_checkany(lua_State *L, int arg) {
  if (lua_type(L, arg) == LUA_TNONE) npuB_argerror(L, arg, "value expected");
}

void npuB_check_no_more(lua_State *L, int n) {
  if (lua_gettop(L) > n)
    npuB_argerror(L, n + 1, lua_pushfstring(L, "no argument expected here, got %s",
                                            luaL_typename(L, n + 1)));
}

lua_Integer npuB_optinteger(lua_State *L, int arg, lua_Integer def) {
  return lua_isnoneornil(L, arg) ? def : npuB_checkinteger(L, arg);
}

lua_Number npuB_optnumber(lua_State *L, int arg, lua_Number def) {
  return lua_isnoneornil(L, arg) ? def : npuB_checknumber(L, arg);
}

const char *npuB_optlstring(lua_State *L, int arg, const char *def, size_t *len) {
  if (lua_isnoneornil(L, arg)) {
    if (len) *len = def ? strlen(def) : 0;
    return def;
  }
  return npuB_checklstring(L, arg, len);
}

/* __tostring: "<position>: <text>" (the text alone when there is no position). */
static int error_tostring(lua_State *L) {
  npuB_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "text");
  if (!lua_isstring(L, -1)) {
    lua_pop(L, 1);
    lua_getfield(L, 1, "message");
  }
  const char *text = luaL_tolstring(L, -1, NULL);
  lua_getfield(L, 1, "position");
  if (lua_isstring(L, -1)) lua_pushfstring(L, "%s: %s", lua_tostring(L, -1), text);
  else lua_pushstring(L, text);
  return 1;
}

/* core.raise(where, code, message [, node [, op]]): the facade's errors take the same path.
   code: a status name ("NPU_ERR_SHAPE") or number; where nil: the text is the message. */
static int l_raise(lua_State *L) {
  const char *where = npuB_optstring(L, 1, NULL);
  int status = -1;
  if (lua_type(L, 2) == LUA_TNUMBER) status = (int)lua_tointeger(L, 2);
  else {
    const char *name = npuB_checkstring(L, 2);
    for (int i = 0; i < NPU_STATUS_COUNT; i++)
      if (strcmp(name, npu_status_name((npu_status)i)) == 0) status = i;
  }
  if (status <= 0 || status >= NPU_STATUS_COUNT)
    return npuB_argerror(L, 2, "an error code (\"NPU_ERR_...\") expected");
  const char *message = npuB_checkstring(L, 3);
  const char *node = npuB_optstring(L, 4, NULL), *op = npuB_optstring(L, 5, NULL);
  lua_pushstring(L, message);
  return raise_object(L, where, (npu_status)status, node, op);
}

/* core.nearest(name, candidates) -> the candidate "did you mean" suggests, or nil: the one rule
   of the C side (npu_nearest), so Lua's keyword checks suggest as the core does. */
static int l_nearest(lua_State *L) {
  const char *name = npuB_checkstring(L, 1);
  npuB_checktype(L, 2, LUA_TTABLE);
  npu_nearest near;
  npu_nearest_init(&near, name);
  lua_Integer n = luaL_len(L, 2);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 2, i); /* the string stays referenced by the table while we look */
    if (lua_type(L, -1) == LUA_TSTRING) npu_nearest_try(&near, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  const char *best = npu_nearest_result(&near);
  if (best) lua_pushstring(L, best);
  else lua_pushnil(L);
  return 1;
}

/* core.position(): the "file:line" an error raised now would carry. */
static int l_position(lua_State *L) {
  push_position(L);
  return 1;
}

static int l_set_facade_dir(lua_State *L) {
  npuB_checkstring(L, 1);
  lua_settop(L, 1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &FACADE_DIR_KEY);
  return 0;
}

static void open_errors(lua_State *L) {
  lua_createtable(L, 0, 4);
  lua_pushcfunction(L, error_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushliteral(L, "npu.Error");
  lua_setfield(L, -2, "__name");
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &ERROR_MT);
  lua_setfield(L, -2, "Error_mt");
}

static int l_live_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)npu_context_live_bytes(npuB_context(L)));
  return 1;
}

static int l_peak_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)npu_context_peak_bytes(npuB_context(L)));
  return 1;
}

/* core.set_memory_limit(bytes): the context's memory_limit (0: none); core.memory_limit(). */
static int l_set_memory_limit(lua_State *L) {
  lua_Integer n = npuB_checkinteger(L, 1);
  if (n < 0) return npuB_argerror(L, 1, "bytes must be >= 0 (0: no limit)");
  npu_status st = npu_context_set_memory_limit(npuB_context(L), (size_t)n);
  if (st) return npuB_raise(L, "npu.set_memory_limit", st);
  return 0;
}

static int l_memory_limit(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)npu_context_memory_limit(npuB_context(L)));
  return 1;
}

static int l_n_threads(lua_State *L) {
  lua_pushinteger(L, npu_context_n_threads(npuB_context(L)));
  return 1;
}

static int l_set_n_threads(lua_State *L) {
  npu_context_set_n_threads(npuB_context(L), (int)npuB_checkinteger(L, 1));
  return 0;
}

static int l_fail_after(lua_State *L) {
  npu_context_fail_after(npuB_context(L), (long)npuB_checkinteger(L, 1));
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
  pthread_mutex_init(&box->log.mu, NULL);
  atomic_init(&box->log.n, 0);
  box->log.head = box->log.dropped = 0;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, context_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  if (npu_context_new(&cfg, &box->ctx) != NPU_OK)
    return luaL_error(L, "npu: cannot create the device context (out of memory?)");
  npu_context_set_log(box->ctx, log_hook, &box->log);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &CONTEXT_KEY);

  static const luaL_Reg funcs[] = {
      {"live_bytes", l_live_bytes}, {"peak_bytes", l_peak_bytes}, {"n_threads", l_n_threads},
      {"set_n_threads", l_set_n_threads},
      {"set_memory_limit", l_set_memory_limit}, {"memory_limit", l_memory_limit},
      {"_fail_after", l_fail_after}, {"status_names", l_status_names}, {"raise", l_raise},
      {"position", l_position}, {"nearest", l_nearest},
      {"set_log_handler", l_set_log_handler}, {"flush_log", l_flush_log}, {"_log", l_log}, {"set_facade_dir", l_set_facade_dir}, {NULL, NULL}};
  luaL_newlib(L, funcs);
  /* the one version: npu.h's NPU_VERSION_*, as the library linked at run time reports it */
  lua_pushstring(L, npu_version_string());
  lua_setfield(L, -2, "version");
  open_errors(L);
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
