/*
 * l_session.c — npu.Session for Lua: creation from a graph and an npu.Options, run, explain,
 * close.
 *
 * sess:run(fetches, feeds [, run_options]) follows TensorFlow: fetches is an npu.Output, an npu.Operation, a
 * tensor name ("y:0"), or a table of those nested in any way (lists and string-keyed maps);
 * the result has the same structure, with tensors for outputs and nothing (nil) for
 * operations.  feeds maps npu.Output or "name:0" to an npu.Tensor, a number or nested tables
 * (converted to the fed value's dtype).  run_options: {timeout_in_ms = n} (RunOptions): past it the
 * run fails with NPU_ERR_TIMEOUT; {progress = fn, every = n}: fn(step, total) is called as a
 * loop runs (parse_run_options).  A run is interrupted by Ctrl-C in the interpreter (see
 * interrupted() below).
 *
 * The common case — one Output fetched — takes a path with no table work at all.  Result
 * boxes are created before the run so a Lua memory error can never strand a C reference.
 */
/***
Sessions: compile a graph with options and run it on the device.
@module npu
*/

#include <limits.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bind.h"

typedef struct session_box {
  npu_session *s;
} session_box;

#define MAX_STACK_ITEMS 64

static session_box *check_box(lua_State *L) { return npuB_checkudata(L, 1, NPUB_SESSION); }

static npu_session *check_open(lua_State *L, const char *where) {
  session_box *box = check_box(L);
  if (!box->s || npu_session_is_closed(box->s))
    npuB_fail(L, where, NPU_ERR_STATE, "the session is closed");
  return box->s;
}

/* core.session_new(graph, options or nil) */
static int l_session_new(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npu_options *opts = NULL;
  if (!lua_isnoneornil(L, 2)) {
    npu_options **o = npuB_checkudata(L, 2, NPUB_OPTIONS);
    opts = *o;
  }
  session_box *box = lua_newuserdatauv(L, sizeof *box, 1);
  box->s = NULL;
  luaL_setmetatable(L, NPUB_SESSION);
  lua_pushvalue(L, 1); /* keep the graph userdata (and its Outputs' identity) alive */
  lua_setiuservalue(L, -2, 1);
  npu_status st = npu_session_new(npuB_context(L), g, opts, &box->s);
  if (st) return npuB_raise(L, "npu.Session", st);
  npuB_flush_log(L);
  return 1;
}

static int l_session_gc(lua_State *L) {
  session_box *box = check_box(L);
  npu_session_release(box->s);
  box->s = NULL;
  return 0;
}

/***
Closes the session (`tf.Session.close`): writes what profiling and dumps still hold and frees
the plans; later runs raise NPU_ERR_STATE.  Closing twice is harmless.
@function Session:close
@within Class Session
*/
static int l_session_close(lua_State *L) {
  session_box *box = check_box(L);
  if (box->s) npu_session_close(box->s);
  npuB_flush_log(L);
  return 0;
}

/***
Whether the session was closed.
@function Session:closed
@within Class Session
@treturn boolean
*/
static int l_session_closed(lua_State *L) {
  session_box *box = check_box(L);
  lua_pushboolean(L, !box->s || npu_session_is_closed(box->s));
  return 1;
}

/***
How many plans the session has compiled and cached.
@function Session:n_plans
@within Class Session
@treturn integer
*/
static int l_session_n_plans(lua_State *L) {
  session_box *box = check_box(L);
  lua_pushinteger(L, box->s ? npu_session_n_plans(box->s) : 0);
  return 1;
}

/* sess:stats() -> {plans =, compiled =, dynamic_plans =, empty_skips =, copy_reuses =}
   (npu_session_stat). */
/***
The session's counters.
@function Session:stats
@within Class Session
@treturn table `{plans =, compiled =, dynamic_plans =, empty_skips =, copy_reuses =}`: plans
  cached, plans compiled in all, plans compiled for dynamic shapes, runs skipped as having
  nothing to do, variables' reduced-precision copies reused instead of cast again
@raise NPU_ERR_STATE on a closed session
*/
static int l_session_stats(lua_State *L) {
  npu_session *s = check_open(L, "npu.Session:stats");
  npuB_check_no_more(L, 1);
  static const struct {
    const char *name;
    npu_session_stat_kind kind;
  } stats[] = {{"plans", NPU_SESSION_STAT_PLANS},
               {"compiled", NPU_SESSION_STAT_COMPILED},
               {"dynamic_plans", NPU_SESSION_STAT_DYNAMIC_PLANS},
               {"empty_skips", NPU_SESSION_STAT_EMPTY_SKIPS},
               {"copy_reuses", NPU_SESSION_STAT_COPY_REUSES}};
  lua_createtable(L, 0, (int)(sizeof stats / sizeof stats[0]));
  for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++) {
    lua_pushinteger(L, (lua_Integer)npu_session_stat(s, stats[i].kind));
    lua_setfield(L, -2, stats[i].name);
  }
  return 1;
}

/* ---- fetch collection ---- */

typedef struct fetch_set {
  int n_values, n_targets;
  int *values;  /* capacity cap */
  int *targets; /* capacity cap */
  int cap;
} fetch_set;

/* Resolves one fetch item at idx to a value (>= 0) or a target node (via *is_target); errors
   start with `where` ("npu.Session:run"). */
static int resolve_item(lua_State *L, int idx, npu_graph *g, bool *is_target, const char *where) {
  *is_target = false;
  npuB_ref *r = npuB_test_output(L, idx);
  if (r) {
    if (r->g != g)
      npuB_fail(L, where, NPU_ERR_STATE, "fetch '%s:%d' belongs to another graph",
                 npu_graph_node_name(r->g, npu_graph_value_node(r->g, r->id)),
                 npu_graph_value_index(r->g, r->id));
    return r->id;
  }
  r = npuB_test_operation(L, idx);
  if (r) {
    if (r->g != g)
      npuB_fail(L, where, NPU_ERR_STATE, "operation '%s' belongs to another graph",
                 npu_graph_node_name(r->g, r->id));
    *is_target = true;
    return r->id;
  }
  if (lua_type(L, idx) == LUA_TSTRING) {
    const char *name = lua_tostring(L, idx);
    int v;
    if (!strchr(name, ':')) { /* a bare node name is the operation, as in TensorFlow */
      int node = npu_graph_find_node(g, name);
      if (node < 0) npuB_fail(L, where, NPU_ERR_NOT_FOUND, "no node named '%s'", name);
      *is_target = true;
      return node;
    }
    npu_status st = npu_graph_find_value(g, name, &v);
    if (st) npuB_raise(L, where, st);
    return v;
  }
  /* name the type as its metatable does ("npu.Tensor": a value, not a graph element) */
  const char *type = luaL_getmetafield(L, idx, "__name") == LUA_TSTRING ? lua_tostring(L, -1)
                                                                      : luaL_typename(L, idx);
  return npuB_fail(L, NULL, NPU_ERR_ARG,
                   "%s: cannot fetch a %s (expected npu.Output, npu.Operation, "
                   "a tensor name or a table of them)", where, type);
}

/* Pass 1 (set->values NULL): count.  Pass 2: record. */
static void collect(lua_State *L, int idx, npu_graph *g, fetch_set *set, int depth,
                    const char *where) {
  if (depth > 32) npuB_fail(L, NULL, NPU_ERR_ARG, "%s: fetches nested too deeply", where);
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) == LUA_TTABLE) {
    luaL_checkstack(L, 3, "fetches");
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      collect(L, -1, g, set, depth + 1, where);
      lua_pop(L, 1);
    }
    return;
  }
  bool is_target;
  int id = resolve_item(L, idx, g, &is_target, where);
  if (set->values) {
    if (is_target) set->targets[set->n_targets] = id;
    else set->values[set->n_values] = id;
  }
  if (is_target) set->n_targets++;
  else set->n_values++;
}

/* Pass 3: builds the result mirroring the fetch structure; tensors come from boxes at
   boxes_idx (a list), consumed in collection order. */
static void build(lua_State *L, int idx, int boxes_idx, int *next, int depth) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) == LUA_TTABLE) {
    luaL_checkstack(L, 4, "fetch results");
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pushvalue(L, -2);                 /* key */
      build(L, -2, boxes_idx, next, depth + 1); /* result */
      lua_settable(L, -5);
      lua_pop(L, 1);
    }
    return;
  }
  if (npuB_test_operation(L, idx) ||
      (lua_type(L, idx) == LUA_TSTRING && !strchr(lua_tostring(L, idx), ':'))) {
    lua_pushnil(L);
    return;
  }
  lua_rawgeti(L, boxes_idx, ++*next);
}

/* ---- feeds ---- */

typedef struct feed_set {
  int n;
  int *values;
  npu_tensor **tensors;
} feed_set;

static int count_feeds(lua_State *L, int idx) {
  int n = 0;
  if (lua_isnoneornil(L, idx)) return 0;
  npuB_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    n++;
    lua_pop(L, 1);
  }
  return n;
}

/* Resolves and converts every feed; the converted tensors are kept in the list at keep_idx. */
static void collect_feeds(lua_State *L, int idx, npu_graph *g, feed_set *fs, int keep_idx,
                          const char *where) {
  if (lua_isnoneornil(L, idx)) return;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int v;
    npuB_ref *r = npuB_test_output(L, -2);
    if (r) {
      if (r->g != g)
        npuB_fail(L, where, NPU_ERR_STATE, "feed '%s:%d' belongs to another graph",
                   npu_graph_node_name(r->g, npu_graph_value_node(r->g, r->id)),
                   npu_graph_value_index(r->g, r->id));
      v = r->id;
    } else if (lua_type(L, -2) == LUA_TSTRING) {
      npu_status st = npu_graph_find_value(g, lua_tostring(L, -2), &v);
      if (st) npuB_raise(L, lua_pushfstring(L, "%s: feed", where), st);
    } else {
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: feed keys must be npu.Output or tensor names, got %s", where,
                 luaL_typename(L, -2));
    }
    for (int i = 0; i < fs->n; i++)
      if (fs->values[i] == v) npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: value %d is fed twice", where, v);
    char what[160];
    int node = npu_graph_value_node(g, v);
    snprintf(what, sizeof what, "%s: feed for '%s:%d'", where, npu_graph_node_name(g, node),
             npu_graph_value_index(g, v));
    /* Lua data converts to the fed value's dtype; an npu.Tensor is fed as it is, so a wrong
       dtype is reported (naming the placeholder) rather than silently cast. */
    int dtype = npuB_test_tensor(L, -1) ? -1 : (int)npu_graph_value_dtype(g, v);
    npu_tensor *t = npuB_to_tensor(L, -1, dtype, what);
    lua_rawseti(L, keep_idx, fs->n + 1); /* pops the tensor userdata, keeps it alive */
    fs->values[fs->n] = v;
    fs->tensors[fs->n] = t;
    fs->n++;
    lua_pop(L, 1);
  }
}

static void *scratch(lua_State *L, size_t n) { return lua_newuserdatauv(L, n ? n : 1, 0); }

/* The arguments of sess:run and sess:explain: fetches at index 2, feeds at index 3 (the stack
   is first set to `top` entries: 3, or 4 to keep sess:run's options).  Lists
   longer than the stack arrays go to scratch userdata; converted feed tensors are kept alive
   by a table left on the stack. */
typedef struct run_args {
  feed_set fs;
  fetch_set set;
  bool single; /* fetches is one item, not a table */
  int feed_stack_v[MAX_STACK_ITEMS];
  npu_tensor *feed_stack_t[MAX_STACK_ITEMS];
  int stack_v[MAX_STACK_ITEMS], stack_t[MAX_STACK_ITEMS];
} run_args;

static void parse_run_args(lua_State *L, run_args *a, const char *where, int top) {
  lua_getiuservalue(L, 1, 1);
  npu_graph *g = npuB_check_graph(L, -1);
  lua_pop(L, 1);
  lua_settop(L, top);

  /* feeds */
  int n_feeds = count_feeds(L, 3);
  a->fs = (feed_set){0, a->feed_stack_v, a->feed_stack_t};
  if (n_feeds > MAX_STACK_ITEMS) {
    a->fs.values = scratch(L, (size_t)n_feeds * sizeof(int));
    a->fs.tensors = scratch(L, (size_t)n_feeds * sizeof(npu_tensor *));
  }
  lua_createtable(L, n_feeds, 0);
  int keep_idx = lua_gettop(L);
  collect_feeds(L, 3, g, &a->fs, keep_idx, where);

  /* fetches: counted, then recorded.  nil is a mistake (a misspelt variable), not "nothing". */
  if (lua_isnil(L, 2))
    npuB_fail(L, where, NPU_ERR_ARG, "fetches is nil (a misspelt or unset variable?): give an "
              "npu.Output, an npu.Operation, a tensor or op name, or a table of them");
  a->single = lua_type(L, 2) != LUA_TTABLE;
  fetch_set *set = &a->set;
  *set = (fetch_set){0};
  if (!lua_isnil(L, 2)) collect(L, 2, g, set, 0, where);
  int n_values = set->n_values, n_targets = set->n_targets;
  set->values = n_values > MAX_STACK_ITEMS ? scratch(L, (size_t)n_values * sizeof(int)) : a->stack_v;
  set->targets =
      n_targets > MAX_STACK_ITEMS ? scratch(L, (size_t)n_targets * sizeof(int)) : a->stack_t;
  set->n_values = set->n_targets = 0;
  if (!lua_isnil(L, 2)) collect(L, 2, g, set, 0, where);
}

/* ---- run options and interruption ---- */

/* Ctrl-C in the lua5.4 interpreter: lua.c's SIGINT handler sets a hook on the main thread
   (lua_sethook(globalL, lstop, ...)), which Lua runs at its next instruction — after sess:run
   returns.  So the run polls for it (npu_run_options.interrupt, between steps): a hook that was
   not there when the run began, on this thread or the main thread, cancels the run; the error
   is raised, and Lua's own hook then reports the interruption as it always does.  We install
   no signal handler: a host that embeds Lua sees only the hooks it sets itself (and may set
   one from its own handler to interrupt a run the same way). */
typedef struct interrupt_watch {
  lua_State *L, *main;
  lua_Hook hook_L, hook_main;
} interrupt_watch;

static int interrupted(void *ud) {
  const interrupt_watch *w = ud;
  return lua_gethook(w->L) != w->hook_L || (w->main && lua_gethook(w->main) != w->hook_main);
}

static void watch_interrupts(lua_State *L, interrupt_watch *w, npu_run_options *ro) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  w->L = L;
  w->main = lua_tothread(L, -1);
  lua_pop(L, 1);
  w->hook_L = lua_gethook(L);
  w->hook_main = w->main ? lua_gethook(w->main) : NULL;
  ro->interrupt = interrupted;
  ro->interrupt_ud = w;
}

/* ---- host ops (op_host_func.c) ---- */

/* The Lua functions of host_func nodes: registry[HOST_FUNCS] is a table with weak keys mapping
   a graph's userdata to the list of its functions (a node's attribute key is the index).  So
   a function lives exactly as long as its graph's userdata, which every session over the graph
   keeps alive (user value 1): nothing is pinned in the registry, and nothing crosses
   lua_States. */
static const char HOST_FUNCS = 0;

static void push_host_funcs(lua_State *L, int graph_idx) {
  graph_idx = lua_absindex(L, graph_idx);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &HOST_FUNCS) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &HOST_FUNCS);
  }
  lua_pushvalue(L, graph_idx);
  if (lua_rawget(L, -2) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, graph_idx);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  lua_remove(L, -2);
}

/* core.host_func(graph, fn, {inputs}, {dtypes} [, name]) -> {outputs}: a host_func node whose
   run calls fn(input tensors...) on the thread of sess:run; fn returns one value per dtype
   (an npu.Tensor, a number or nested tables), converted to that dtype. */
static int l_host_func(lua_State *L) {
  static const char where[] = "npu.host_func";
  npu_graph *g = npuB_check_graph(L, 1);
  npuB_checktype(L, 2, LUA_TFUNCTION);
  npuB_checktype(L, 3, LUA_TTABLE);
  npuB_checktype(L, 4, LUA_TTABLE);
  const char *name = npuB_optstring(L, 5, NULL);
  lua_Integer n_in = luaL_len(L, 3), n_out = luaL_len(L, 4);
  if (n_out < 1 || n_out > 16)
    return npuB_fail(L, where, NPU_ERR_ARG, "give 1 to 16 output dtypes, got %d", (int)n_out);
  if (n_in > 4096) return npuB_fail(L, where, NPU_ERR_ARG, "too many inputs");
  int *inputs = scratch(L, (size_t)n_in * sizeof *inputs);
  for (lua_Integer i = 1; i <= n_in; i++) {
    lua_rawgeti(L, 3, i);
    npuB_ref *r = npuB_test_output(L, -1);
    if (!r || r->g != g)
      return npuB_fail(L, where, NPU_ERR_ARG, "input %d must be an npu.Output of the graph",
                       (int)i);
    inputs[i - 1] = r->id;
    lua_pop(L, 1);
  }
  int64_t tout[16];
  for (lua_Integer i = 1; i <= n_out; i++) {
    lua_rawgeti(L, 4, i);
    int dt = lua_type(L, -1) == LUA_TSTRING ? npu_dtype_from_name(lua_tostring(L, -1)) : -1;
    if (dt < 0)
      return npuB_fail(L, where, NPU_ERR_DTYPE, "output dtype %d must be a dtype name "
                       "(\"float32\", \"int32\", ...), got %s%s%s", (int)i,
                       lua_type(L, -1) == LUA_TSTRING ? "'" : "",
                       lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1),
                       lua_type(L, -1) == LUA_TSTRING ? "'" : "");
    tout[i - 1] = dt;
    lua_pop(L, 1);
  }
  push_host_funcs(L, 1);
  int funcs = lua_gettop(L);
  lua_Integer key = luaL_len(L, funcs) + 1;
  npu_attr attrs[] = {{.name = "key", .type = NPU_ATTR_INT, .u.i = key},
                      {.name = "Tout", .type = NPU_ATTR_INTS, .u.ints = {tout, (int)n_out}}};
  int node;
  npu_status st = npu_graph_add_op(g, "host_func", name, (int)n_in, inputs, 2, attrs, &node);
  if (st) return npuB_raise(L, "npu.host_func", st);
  lua_pushvalue(L, 2);
  lua_rawseti(L, funcs, key);
  lua_createtable(L, (int)n_out, 0);
  for (int i = 0; i < (int)n_out; i++) {
    npuB_push_output(L, 1, npu_graph_output(g, node, i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* Mixed computing: registry[HOST_OPS] maps a TensorFlow op type to its key (-1, -2, ...:
   negative, so never a graph's host_func key) and the key to the Lua function implementing
   it.  Imports on this state's context turn nodes of those types into host_func nodes
   carrying the key (npu_context_register_host_op). */
static const char HOST_OPS = 0;

static void push_host_ops(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &HOST_OPS) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &HOST_OPS);
  }
}

/* core.register_host_op(tf_type, fn): fn implements TensorFlow op type tf_type in imports
   from now on (registering a type again replaces its function). */
static int l_register_host_op(lua_State *L) {
  const char *type = npuB_checkstring(L, 1);
  npuB_checktype(L, 2, LUA_TFUNCTION);
  push_host_ops(L);
  int ops = lua_gettop(L);
  lua_Integer key;
  if (lua_getfield(L, ops, type) == LUA_TNUMBER) key = lua_tointeger(L, -1);
  else {
    lua_Integer n = 0;
    lua_pushnil(L);
    while (lua_next(L, ops)) {
      if (lua_type(L, -2) == LUA_TNUMBER) n++;
      lua_pop(L, 1);
    }
    key = -(n + 1);
  }
  lua_pop(L, 1);
  npu_status st = npu_context_register_host_op(npuB_context(L), type, (int64_t)key);
  if (st) return npuB_raise(L, "npu.register_host_op", st);
  lua_pushinteger(L, key);
  lua_setfield(L, ops, type);
  lua_pushvalue(L, 2);
  lua_rawseti(L, ops, key);
  return 0;
}

/* What the run's host callback needs: the state running sess:run and, in that call's frame,
   the graph's userdata (an absolute index, valid while the run is in progress). */
typedef struct host_ctx {
  lua_State *L;
  int graph_idx;
} host_ctx;

typedef struct host_call {
  int64_t key;
  int n_in, n_out;
  npu_tensor *const *in;
  const npu_dtype *dtypes;
  npu_tensor **out;
} host_call;

/* Under lua_pcall: (graph userdata, host_call) -> fills out[] with new references. */
static int host_call_protected(lua_State *L) {
  host_call *c = lua_touserdata(L, 2);
  if (c->key < 0) push_host_ops(L); /* an imported op type (npu.register_host_op) */
  else push_host_funcs(L, 1);
  if (lua_rawgeti(L, -1, (lua_Integer)c->key) != LUA_TFUNCTION)
    return luaL_error(L, "no Lua function for key %d (graph built in another lua_State?)",
                      (int)c->key);
  luaL_checkstack(L, c->n_in + c->n_out + 8, "host_func");
  for (int i = 0; i < c->n_in; i++) npuB_push_tensor(L, c->in[i]);
  int base = lua_gettop(L) - c->n_in;
  lua_call(L, c->n_in, c->n_out);
  for (int i = 0; i < c->n_out; i++) {
    char what[48];
    snprintf(what, sizeof what, "result %d", i + 1);
    if (lua_isnil(L, base + i)) return luaL_error(L, "result %d is nil", i + 1);
    npu_tensor *t = npuB_to_tensor(L, base + i, (int)c->dtypes[i], what);
    c->out[i] = npu_tensor_retain(t);
    lua_pop(L, 1);
  }
  return 0;
}

/* tostring(v), for a host function's error value. */
static int error_text(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

static npu_status lua_host_op(void *ud, int64_t key, int n_inputs, npu_tensor *const *inputs,
                              int n_outputs, const npu_dtype *dtypes, npu_tensor **outputs,
                              char *why, size_t why_size) {
  host_ctx *h = ud;
  lua_State *L = h->L;
  host_call c = {key, n_inputs, n_outputs, inputs, dtypes, outputs};
  if (!lua_checkstack(L, 4)) {
    snprintf(why, why_size, "Lua stack overflow");
    return NPU_ERR_NOMEM;
  }
  lua_pushcfunction(L, host_call_protected);
  lua_pushvalue(L, h->graph_idx);
  lua_pushlightuserdata(L, &c);
  if (lua_pcall(L, 2, 0, 0) == LUA_OK) return NPU_OK;
  /* the error value as text, __tostring honoured (an npu.Error from a nested run), protected:
     this runs inside the core, where a Lua error must not escape */
  lua_pushcfunction(L, error_text);
  lua_insert(L, -2);
  const char *msg = lua_pcall(L, 1, 1, 0) == LUA_OK ? lua_tostring(L, -1) : NULL;
  snprintf(why, why_size, "%s", msg ? msg : "(error object is not a string)");
  lua_pop(L, 1);
  return NPU_ERR_CALLBACK;
}

/* ---- progress (npu_run_options.progress) ----
   The Lua function (or callable) stays at fn_idx of sess:run's frame for the run; a Lua error
   inside it is kept at err_idx (a slot pushed before the run), the run is cancelled, and the
   error is raised once the executor has unwound (STYLE.md: callbacks go through lua_pcall). */
typedef struct progress_ctx {
  lua_State *L;
  int fn_idx, err_idx;
  bool failed;
} progress_ctx;

/* Under lua_pcall: (fn, step, total) -> whether to cancel. */
static int progress_call_protected(lua_State *L) {
  lua_call(L, 2, 1);
  if (lua_isnil(L, -1) || lua_type(L, -1) == LUA_TBOOLEAN) return 1;
  return luaL_error(L, "the progress function must return nothing, false or true (to cancel the "
                    "run), got a %s", luaL_typename(L, -1));
}

static int lua_progress(void *ud, int64_t step, int64_t total) {
  progress_ctx *p = ud;
  lua_State *L = p->L;
  if (!lua_checkstack(L, 5)) return 1;
  lua_pushcfunction(L, progress_call_protected);
  lua_pushvalue(L, p->fn_idx);
  lua_pushinteger(L, (lua_Integer)step);
  lua_pushinteger(L, (lua_Integer)total);
  if (lua_pcall(L, 3, 1, 0) != LUA_OK) {
    lua_replace(L, p->err_idx);
    p->failed = true;
    return 1;
  }
  int cancel = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return cancel;
}

/* The run's error when the progress function raised one: an npu.Error (from a call into npu
   inside it) goes on as it is; anything else becomes NPU_ERR_CALLBACK keeping its text. */
static int raise_progress_error(lua_State *L, int err_idx) {
  lua_pushvalue(L, err_idx);
  if (luaL_getmetafield(L, -1, "__name") == LUA_TSTRING &&
      strcmp(lua_tostring(L, -1), "npu.Error") == 0) {
    lua_pop(L, 1);
    return lua_error(L);
  }
  lua_settop(L, err_idx);
  const char *msg = lua_tostring(L, err_idx);
  return npuB_fail(L, "npu.Session:run", NPU_ERR_CALLBACK, "the progress function failed: %s",
                   msg ? msg : lua_pushfstring(L, "(a %s error value)", luaL_typename(L, err_idx)));
}

/* sess:run's 4th argument, TensorFlow's RunOptions, and ours: {timeout_in_ms = n (n >= 0, 0:
   none), progress = fn(step, total) (a function or a callable), every = n (n >= 1, the
   iterations between calls; default: about a hundred calls a run)}.  An unknown key names the
   nearest known one (npu_nearest, the one "did you mean" rule).  *has_progress: whether a
   progress function is given. */
static void parse_run_options(lua_State *L, int idx, npu_run_options *ro, bool *has_progress) {
  static const char where[] = "npu.Session:run";
  static const char *const known[] = {"timeout_in_ms", "progress", "every"};
  *has_progress = false;
  if (lua_isnoneornil(L, idx)) return;
  npuB_checktype(L, idx, LUA_TTABLE);
  bool every = false;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    if (!key)
      npuB_fail(L, where, NPU_ERR_ARG, "run options are named (string keys), got a %s key",
                luaL_typename(L, -2));
    size_t k = 0;
    while (k < sizeof known / sizeof known[0] && strcmp(key, known[k]) != 0) k++;
    if (k == sizeof known / sizeof known[0]) {
      npu_nearest near;
      npu_nearest_init(&near, key);
      for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) npu_nearest_try(&near, known[i]);
      const char *best = npu_nearest_result(&near);
      if (best) npuB_fail(L, where, NPU_ERR_ARG, "unknown run option '%s' (did you mean '%s'?)", key, best);
      npuB_fail(L, where, NPU_ERR_ARG, "unknown run option '%s' (known: timeout_in_ms, progress, "
                "every)", key);
    }
    if (k == 1) { /* progress */
      if (!lua_isfunction(L, -1)) {
        if (luaL_getmetafield(L, -1, "__call") == LUA_TNIL)
          npuB_fail(L, where, NPU_ERR_ARG, "progress must be a function(step, total) or a "
                    "callable, got %s", luaL_typename(L, -1));
        lua_pop(L, 1); /* the __call */
      }
      lua_pop(L, 1);
      continue;
    }
    /* a number only: lua_tointegerx would also take the string "500" */
    int isnum = 0;
    lua_Integer n = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isnum) : 0;
    const char *got = lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1);
    if (k == 0) {
      if (!isnum || n < 0)
        npuB_fail(L, where, NPU_ERR_ARG, "timeout_in_ms must be an integer >= 0 (milliseconds; "
                  "0: no limit), got %s", got);
      ro->timeout_in_ms = (int64_t)n;
    } else {
      if (!isnum || n < 1)
        npuB_fail(L, where, NPU_ERR_ARG, "every must be an integer >= 1 (iterations between "
                  "progress calls), got %s", got);
      ro->progress_every = (int64_t)n;
      every = true;
    }
    lua_pop(L, 1);
  }
  *has_progress = lua_getfield(L, idx, "progress") != LUA_TNIL;
  lua_pop(L, 1);
  if (every && !*has_progress)
    npuB_fail(L, where, NPU_ERR_ARG, "every is given without progress (the function it paces)");
}

/***
Runs the graph to compute the fetches (`tf.Session.run`).  The first run of a signature
(which fetches, which feeds) compiles its plan; later ones reuse it.
@function Session:run
@within Class Session
@tparam Output|Operation|string|table fetches an Output, an Operation (run for its effect:
  its result is nil), a tensor name ("y:0"), or a table of those nested in any way (lists
  and string-keyed maps)
@tparam[opt] table feeds maps Outputs or "name:0" to npu.Tensors, numbers or nested tables
  (converted to the fed value's dtype)
@tparam[opt] table run_options TensorFlow's RunOptions `{timeout_in_ms = n}` (0: no limit),
  and `progress = function(step, total)` called every `every` iterations of a loop run
  (default: about a hundred calls a run; returning true cancels the run; npu.util.ProgressBar
  draws a bar from it)
@treturn Tensor|table|nil the fetched values, in the structure of fetches: Tensors for
  outputs, nil for operations
@raise NPU_ERR_STATE on a closed session; NPU_ERR_ARG for a fetch that is not an element of
  the graph (or nil) and for a wrong feed; NPU_ERR_SHAPE when a fed value does not fit its
  placeholder; NPU_ERR_TIMEOUT past timeout_in_ms; NPU_ERR_OUT_OF_RANGE when a dataset is
  exhausted; NPU_ERR_CANCELLED when interrupted (Ctrl-C) or cancelled by the progress
  function; NPU_ERR_CALLBACK when the progress function raises
@usage local probs = sess:run(y, {[x] = npu.random.uniform({2, 784}, {seed = 3})})
local loss_value, _ = table.unpack(sess:run({loss, train_op}))
*/
static int l_session_run(lua_State *L) {
  npu_session *s = check_open(L, "npu.Session:run");
  npuB_check_no_more(L, 4); /* parse_run_args' settop would drop a 5th silently */
  npu_run_options ro = {0};
  bool has_progress;
  parse_run_options(L, 4, &ro, &has_progress);
  interrupt_watch iw;
  watch_interrupts(L, &iw, &ro);
  run_args a;
  parse_run_args(L, &a, "npu.Session:run", 4); /* the run options stay at 4 */
  /* the progress function and the slot for its error, above everything the run's callbacks
     push (they stay balanced) */
  progress_ctx prog = {L, 0, 0, false};
  if (has_progress) {
    lua_getfield(L, 4, "progress");
    prog.fn_idx = lua_gettop(L);
    lua_pushnil(L);
    prog.err_idx = lua_gettop(L);
    ro.progress = lua_progress;
    ro.progress_ud = &prog;
  }
  lua_getiuservalue(L, 1, 1); /* the graph's userdata: its host functions */
  host_ctx host = {L, lua_gettop(L)};
  ro.host_op = lua_host_op;
  ro.host_ud = &host;
  feed_set fs = a.fs;
  fetch_set set = a.set;
  bool single = a.single;
  int n_values = set.n_values, n_targets = set.n_targets;

  /* result boxes first, then the run */
  npu_tensor *out_stack[MAX_STACK_ITEMS];
  npu_tensor **out = n_values > MAX_STACK_ITEMS
                         ? scratch(L, (size_t)n_values * sizeof(npu_tensor *))
                         : out_stack;
  lua_createtable(L, n_values, 0);
  int boxes_idx = lua_gettop(L);
  npuB_tensor_box **boxes = scratch(L, (size_t)n_values * sizeof *boxes);
  for (int i = 0; i < n_values; i++) {
    boxes[i] = npuB_new_tensor_box(L);
    lua_rawseti(L, boxes_idx, i + 1);
  }
  npu_status st = npu_session_run_with_options(s, &ro, fs.n, fs.values, fs.tensors, n_values,
                                               set.values, out, n_targets, set.targets);
  if (st) {
    if (prog.failed) return raise_progress_error(L, prog.err_idx);
    /* the failing step, when there is one, goes into the error's node and op fields (copied:
       the log handler raise_object calls may run npu again) */
    const char *op = NULL, *node = npu_context_errnode(npuB_context(L), &op);
    char node_copy[128];
    if (node) snprintf(node_copy, sizeof node_copy, "%s", node);
    return npuB_raise_node(L, "npu.Session:run", st, node ? node_copy : NULL, op);
  }
  for (int i = 0; i < n_values; i++) boxes[i]->t = out[i];
  npuB_flush_log(L);

  if (lua_isnil(L, 2)) return 0;
  if (single) {
    if (n_values == 0) return 0; /* an operation */
    lua_rawgeti(L, boxes_idx, 1);
    return 1;
  }
  int next = 0;
  build(L, 2, boxes_idx, &next, 0);
  return 1;
}

/* sess:last_plan() -> {steps = n, folded = n}: the plan the last run used. */
/***
The plan the last run (or explain) used.
@function Session:last_plan
@within Class Session
@treturn table `{steps = n, folded = n}`: steps run per call, nodes folded to constants
@raise NPU_ERR_STATE when nothing has run yet, or the session is closed
*/
static int l_session_last_plan(lua_State *L) {
  npu_session *s = check_open(L, "npu.Session:last_plan");
  int n_steps, n_folded;
  npu_status st = npu_session_last_plan(s, &n_steps, &n_folded);
  if (st) return npuB_raise(L, "npu.Session:last_plan", st);
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, n_steps);
  lua_setfield(L, -2, "steps");
  lua_pushinteger(L, n_folded);
  lua_setfield(L, -2, "folded");
  return 1;
}

/* ---- explain ---- */

#define NPUB_EXPLAIN "npu.Explain"

/* The decoded description: objects become string-keyed tables, arrays lists, null an absent
   field; integral numbers become integers. */
static void push_json(lua_State *L, const cJSON *j) {
  luaL_checkstack(L, 3, "npu.Session:explain");
  if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
    bool object = cJSON_IsObject(j);
    lua_createtable(L, object ? 0 : cJSON_GetArraySize(j), object ? cJSON_GetArraySize(j) : 0);
    lua_Integer i = 0;
    for (const cJSON *c = j->child; c; c = c->next) {
      push_json(L, c);
      if (object) lua_setfield(L, -2, c->string);
      else lua_rawseti(L, -2, ++i);
    }
  } else if (cJSON_IsString(j)) {
    lua_pushstring(L, j->valuestring);
  } else if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    lua_Integer n;
    if (lua_numbertointeger(d, &n) && (double)n == d) lua_pushinteger(L, n);
    else lua_pushnumber(L, d);
  } else if (cJSON_IsBool(j)) {
    lua_pushboolean(L, cJSON_IsTrue(j));
  } else {
    lua_pushnil(L);
  }
}

/* Runs under lua_pcall so that a Lua memory error cannot strand the cJSON tree. */
static int push_json_protected(lua_State *L) {
  push_json(L, lua_touserdata(L, 1));
  return 1;
}

/* sess:explain(fetches [, feeds]) -> the plan sess:run(fetches, feeds) would run (compiled
   now if it is not cached), as a table {precision_mode, reference, n_steps, folded,
   iterations, feeds, fetches, steps = {...}, memory = {...}} (the layout of
   npu_session_explain in npu.h) whose tostring is a listing, one line per step. */
static int l_session_explain(lua_State *L) {
  npu_session *s = check_open(L, "npu.Session:explain");
  npuB_check_no_more(L, 3);
  npu_context *ctx = npuB_context(L);
  run_args a;
  parse_run_args(L, &a, "npu.Session:explain", 3);
  luaL_checkstack(L, 4, "npu.Session:explain");
  char *json = NULL;
  npu_status st = npu_session_explain(s, a.fs.n, a.fs.values, a.fs.tensors, a.set.n_values,
                                      a.set.values, a.set.n_targets, a.set.targets, &json);
  if (st) return npuB_raise(L, "npu.Session:explain", st);
  cJSON *root = cJSON_Parse(json);
  npu_free(ctx, json);
  if (!root)
    return npuB_fail(L, "npu.Session:explain", NPU_ERR_NOMEM, "out of memory decoding the plan's "
                      "description");
  lua_pushcfunction(L, push_json_protected);
  lua_pushlightuserdata(L, root);
  int rc = lua_pcall(L, 1, 1, 0);
  cJSON_Delete(root);
  if (rc != LUA_OK) return lua_error(L);
  luaL_setmetatable(L, NPUB_EXPLAIN);
  return 1;
}

/* sess:explain_dot(fetches [, feeds]) -> the DOT text of the plan sess:explain describes
   (npu_session_explain_dot in npu.h). */
/***
The plan Session:explain describes, drawn as Graphviz DOT text (npu.util.render_graph
renders it).
@function Session:explain_dot
@within Class Session
@tparam Output|Operation|string|table fetches as for run
@tparam[opt] table feeds as for run
@treturn string
*/
static int l_session_explain_dot(lua_State *L) {
  npu_session *s = check_open(L, "npu.Session:explain_dot");
  npuB_check_no_more(L, 3);
  npu_context *ctx = npuB_context(L);
  run_args a;
  parse_run_args(L, &a, "npu.Session:explain_dot", 3);
  luaL_checkstack(L, 4, "npu.Session:explain_dot");
  char *dot = NULL;
  npu_status st = npu_session_explain_dot(s, a.fs.n, a.fs.values, a.fs.tensors, a.set.n_values,
                                          a.set.values, a.set.n_targets, a.set.targets, &dot);
  if (st) return npuB_raise(L, "npu.Session:explain_dot", st);
  return npuB_push_owned_string(L, ctx, dot);
}

/* sess:set_progress(now, total): accelerate_train_mode's step (or loss) and total (or target). */
/***
Tells a session running with the accelerate_train_mode option how far training is: the
current step and the total (mode "...|step|r"), or the current loss and the target loss
("...|loss|r").  npu.util.TellMeStepOrLossHook calls it; without it the session reads
STEP_NOW/TOTAL_STEP or LOSS_NOW/TARGET_LOSS from the environment.
@function Session:set_progress
@within Class Session
@tparam number now
@tparam number total
@raise NPU_ERR_STATE when accelerate_train_mode is not set
*/
static int l_session_set_progress(lua_State *L) {
  npu_session *s = check_open(L, "npu.Session:set_progress");
  double now = npuB_checknumber(L, 2), total = npuB_checknumber(L, 3);
  npu_status st = npu_session_set_progress(s, now, total);
  if (st) return npuB_raise(L, "npu.Session:set_progress", st);
  return 0;
}

/***
Whether accelerate_train_mode currently runs the session in reduced precision.
@function Session:reduced_precision
@within Class Session
@treturn boolean
*/
static int l_session_reduced_precision(lua_State *L) {
  lua_pushboolean(L, npu_session_reduced_precision(check_open(L, "npu.Session:reduced_precision")));
  return 1;
}

static int l_session_tostring(lua_State *L) {
  session_box *box = check_box(L);
  if (!box->s || npu_session_is_closed(box->s)) lua_pushliteral(L, "npu.Session(closed)");
  else {
    int n = npu_session_n_plans(box->s);
    lua_pushfstring(L, "npu.Session(%d plan%s compiled)", n, n == 1 ? "" : "s");
  }
  return 1;
}

/* sess:options() -> the session's effective npu.Options (a copy). */
/***
The session's effective options, as a new npu.Options (`o:get("precision_mode")`).
@function Session:options
@within Class Session
@treturn userdata npu.Options
*/
static int l_session_options(lua_State *L) {
  npu_session *s = check_open(L, "npu.Session:options");
  npu_options **o = lua_newuserdatauv(L, sizeof *o, 0);
  *o = NULL;
  luaL_setmetatable(L, NPUB_OPTIONS);
  npu_status st = npu_options_copy(npu_session_options(s), o);
  if (st) return npuB_raise(L, "npu.Session:options", st);
  return 1;
}

/* core.hccl_ranks() -> rank_id, rank_size, local_rank_id, local_rank_size (csrc/dist/). */
static int l_hccl_ranks(lua_State *L) {
  int r[4];
  npu_status st = npu_dist_ranks(npuB_context(L), &r[0], &r[1], &r[2], &r[3]);
  if (st) return npuB_raise(L, "npu.hccl", st);
  for (int i = 0; i < 4; i++) lua_pushinteger(L, r[i]);
  return 4;
}

/* core.hccl_create_group(name, {world ranks...}, timeout_ms) (csrc/dist/). */
static int l_hccl_create_group(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer timeout = npuB_checkinteger(L, 3);
  lua_Integer n = luaL_len(L, 2);
  if (n < 1 || n > INT_MAX / (lua_Integer)sizeof(int))
    return luaL_error(L, "npu.hccl.create_group: NPU_ERR_ARG: create_group '%s': %s", name,
                      n < 1 ? "no ranks" : "too many ranks");
  int *ranks = lua_newuserdatauv(L, (size_t)n * sizeof *ranks, 0); /* collected with the call */
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 2, i);
    int isnum = 0;
    lua_Integer v = lua_tointegerx(L, -1, &isnum);
    if (!isnum || v < INT_MIN || v > INT_MAX)
      return luaL_error(L, "npu.hccl.create_group: NPU_ERR_ARG: create_group '%s': rank_ids[%d] "
                        "is not a rank (%s)", name, (int)i, luaL_typename(L, -1));
    ranks[i - 1] = (int)v;
    lua_pop(L, 1);
  }
  npu_status st = npu_dist_create_group(npuB_context(L), name, (int)n, ranks, (int64_t)timeout);
  if (st) return npuB_raise(L, "npu.hccl.create_group", st);
  return 0;
}

/* core.hccl_destroy_group(name). */
static int l_hccl_destroy_group(lua_State *L) {
  npu_status st = npu_dist_destroy_group(npuB_context(L), luaL_checkstring(L, 1));
  if (st) return npuB_raise(L, "npu.hccl.destroy_group", st);
  return 0;
}

/* core.hccl_group_size(name [, where]) -> its rank count (members or not); where: the
   npu.hccl function asking, for the message (the rank queries, send, allgather, ...). */
static int l_hccl_group_size(lua_State *L) {
  int size;
  const char *where = luaL_optstring(L, 2, "npu.hccl.get_rank_size");
  npu_status st = npu_dist_group_ranks(npuB_context(L), luaL_checkstring(L, 1), NULL, &size,
                                       NULL, NULL);
  if (st) return npuB_raise(L, where, st);
  lua_pushinteger(L, size);
  return 1;
}

/* core.hccl_group_ranks(name [, where]) -> rank_id, rank_size, local_rank_id,
   local_rank_size. */
static int l_hccl_group_ranks(lua_State *L) {
  int r[4];
  const char *where = luaL_optstring(L, 2, "npu.hccl.get_rank_id");
  npu_status st = npu_dist_group_ranks(npuB_context(L), luaL_checkstring(L, 1), &r[0], &r[1],
                                       &r[2], &r[3]);
  if (st) return npuB_raise(L, where, st);
  for (int i = 0; i < 4; i++) lua_pushinteger(L, r[i]);
  return 4;
}

/* core.hccl_world_rank(name, group_rank) and core.hccl_group_rank(world_rank, name). */
static int l_hccl_world_rank(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_Integer r = npuB_checkinteger(L, 2);
  int w;
  npu_status st = npu_dist_world_rank(npuB_context(L), name,
                                      r < INT_MIN || r > INT_MAX ? -1 : (int)r, &w);
  if (st) return npuB_raise(L, "npu.hccl.get_world_rank_from_group_rank", st);
  lua_pushinteger(L, w);
  return 1;
}
static int l_hccl_group_rank(lua_State *L) {
  lua_Integer w = npuB_checkinteger(L, 1);
  const char *name = luaL_checkstring(L, 2);
  int r;
  npu_status st = npu_dist_group_rank(npuB_context(L), w < INT_MIN || w > INT_MAX ? -1 : (int)w,
                                      name, &r);
  if (st) return npuB_raise(L, "npu.hccl.get_group_rank_from_world_rank", st);
  lua_pushinteger(L, r);
  return 1;
}

/* core.hccl_available() -> whether the library was built with MPI. */
static int l_hccl_available(lua_State *L) {
  lua_pushboolean(L, npu_dist_available());
  return 1;
}

/* A node of g by the name a script gives (TensorFlow's output_node_names: "y"; "y:0" is
   taken as its node), or -1. */
static int node_by_name(npu_graph *g, const char *name) {
  int node = npu_graph_find_node(g, name);
  int v;
  if (node < 0 && !npu_graph_find_value(g, name, &v)) node = npu_graph_value_node(g, v);
  return node;
}

/* core.session_freeze(sess, g, output_names, keep_names) -> a new npu.Graph: the outputs'
   ancestors with every variable they read frozen to the session's value, except those named
   in keep_names (lua/npu/graph_util.lua checks the names and builds that list). */
static int l_session_freeze(lua_State *L) {
  const char *where = "npu.graph_util.convert_variables_to_constants";
  npu_session *s = check_open(L, where);
  npu_graph *g = npuB_check_graph(L, 2);
  npuB_checktype(L, 3, LUA_TTABLE);
  npuB_checktype(L, 4, LUA_TTABLE);
  npuB_check_no_more(L, 4);
  lua_Integer n_out = luaL_len(L, 3);
  if (n_out < 1)
    npuB_fail(L, where, NPU_ERR_ARG, "output_node_names is empty: name the model's outputs");
  if (n_out > INT_MAX / (lua_Integer)sizeof(int))
    npuB_fail(L, where, NPU_ERR_ARG, "output_node_names has %lld entries: too many",
              (long long)n_out);
  int *outputs = lua_newuserdatauv(L, (size_t)n_out * sizeof *outputs, 0); /* no malloc here */
  for (lua_Integer i = 0; i < n_out; i++) {
    if (lua_geti(L, 3, i + 1) != LUA_TSTRING)
      npuB_fail(L, where, NPU_ERR_ARG, "output_node_names[%d] is a %s, expected a node name",
                (int)i + 1, luaL_typename(L, -1));
    outputs[i] = node_by_name(g, lua_tostring(L, -1));
    if (outputs[i] < 0)
      npuB_fail(L, where, NPU_ERR_NOT_FOUND, "output node '%s' is not in the graph", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  int n_vars = npu_graph_n_variables(g);
  unsigned char *keep = lua_newuserdatauv(L, (size_t)n_vars + 1, 0);
  memset(keep, 0, (size_t)n_vars + 1);
  lua_Integer n_keep = luaL_len(L, 4);
  for (lua_Integer i = 0; i < n_keep; i++) {
    lua_geti(L, 4, i + 1);
    const char *name = lua_tostring(L, -1);
    int v = name ? npu_graph_find_variable(g, npu_graph_find_node(g, name)) : -1;
    if (v < 0) npuB_fail(L, where, NPU_ERR_NOT_FOUND, "'%s' is not a variable of the graph",
                         name ? name : luaL_typename(L, -1));
    keep[v] = 1;
    lua_pop(L, 1);
  }
  npuB_graph_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->g = NULL;
  luaL_setmetatable(L, NPUB_GRAPH);
  npu_status st = npu_session_freeze(s, g, (int)n_out, outputs, keep, &box->g);
  if (st) return npuB_raise(L, where, st);
  return 1;
}

void npuB_open_session(lua_State *L) {
  static const luaL_Reg methods[] = {{"run", l_session_run},         {"close", l_session_close},
                                     {"closed", l_session_closed},   {"n_plans", l_session_n_plans},
                                     {"stats", l_session_stats},
                                     {"options", l_session_options}, {"last_plan", l_session_last_plan},
                                     {"set_progress", l_session_set_progress},
                                     {"reduced_precision", l_session_reduced_precision},
                                     {"explain", l_session_explain},
                                     {"explain_dot", l_session_explain_dot},
                                     {NULL, NULL}};
  luaL_newmetatable(L, NPUB_SESSION);
  lua_pushcfunction(L, l_session_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_session_close);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, l_session_tostring);
  lua_setfield(L, -2, "__tostring");
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_setfield(L, -2, "Session_mt");
  /* explain's results; the facade (lua/npu/explain.lua) gives it its __tostring */
  luaL_newmetatable(L, NPUB_EXPLAIN);
  lua_setfield(L, -2, "Explain_mt");
  lua_pushcfunction(L, l_session_new);
  lua_setfield(L, -2, "session_new");
  lua_pushcfunction(L, l_session_freeze);
  lua_setfield(L, -2, "session_freeze");
  lua_pushcfunction(L, l_host_func);
  lua_setfield(L, -2, "host_func");
  lua_pushcfunction(L, l_register_host_op);
  lua_setfield(L, -2, "register_host_op");
  lua_pushcfunction(L, l_hccl_ranks);
  lua_setfield(L, -2, "hccl_ranks");
  lua_pushcfunction(L, l_hccl_available);
  lua_setfield(L, -2, "hccl_available");
  static const luaL_Reg hccl[] = {{"hccl_create_group", l_hccl_create_group},
                                  {"hccl_destroy_group", l_hccl_destroy_group},
                                  {"hccl_group_size", l_hccl_group_size},
                                  {"hccl_group_ranks", l_hccl_group_ranks},
                                  {"hccl_world_rank", l_hccl_world_rank},
                                  {"hccl_group_rank", l_hccl_group_rank},
                                  {NULL, NULL}};
  luaL_setfuncs(L, hccl, 0);
}
