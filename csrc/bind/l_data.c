/*
 * l_data.c — datasets and checkpoints for Lua: the npu.Dataset userdata (tf.data pipelines
 * over npu_dataset_*), npu.DatasetIterator (a host-side iterator over one, with its producer
 * thread), the graph's dataset list (core.graph_add_dataset), and safetensors files
 * (core.safetensors_save / core.safetensors_load).  The Lua facade (lua/npu/data.lua,
 * lua/npu/saver.lua) adds the structure of components (lists, string keys), options tables
 * and the one-shot iterator of a graph.
 *
 * Shape of every function: check arguments, create the result box, call the core, fill the
 * box, raise last.  Element tensors are pushed into boxes created before the call.
 */
#include <string.h>

#include "bind.h"

#define NPUB_DATASET "npu.Dataset"
#define NPUB_ITERATOR "npu.DatasetIterator"
#define NPUB_SAFETENSORS "npu.Safetensors"

typedef struct dataset_box {
  npu_dataset *ds;
} dataset_box;

typedef struct iterator_box {
  npu_iterator *it;
  int n_components;
} iterator_box;

typedef struct safetensors_box {
  npu_safetensors *st;
} safetensors_box;

static npu_dataset *check_dataset(lua_State *L, int idx) {
  dataset_box *box = npuB_checkudata(L, idx, NPUB_DATASET);
  if (!box->ds) npuB_fail(L, NULL, NPU_ERR_ARG, "npu.Dataset: empty handle");
  return box->ds;
}

static dataset_box *new_dataset_box(lua_State *L) {
  dataset_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->ds = NULL;
  luaL_setmetatable(L, NPUB_DATASET);
  return box;
}

static int dataset_gc(lua_State *L) {
  dataset_box *box = npuB_checkudata(L, 1, NPUB_DATASET);
  npu_dataset_release(box->ds);
  box->ds = NULL;
  return 0;
}

/* core.dataset_from_tensors({t1, t2, ...}) -> npu.Dataset */
static int l_dataset_from_tensors(lua_State *L) {
  npuB_checktype(L, 1, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 1);
  if (n < 1 || n > 16)
    return npuB_fail(L, NULL, NPU_ERR_ARG, "npu.data: need 1 to 16 components, got %d", (int)n);
  npu_tensor *ts[16];
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    ts[i] = npuB_test_tensor(L, -1);
    if (!ts[i])
      return npuB_fail(L, NULL, NPU_ERR_ARG,
                "npu.data: component %d is a %s, expected an npu.Tensor", i + 1,
                        luaL_typename(L, -1));
    lua_pop(L, 1); /* the list keeps it alive */
  }
  dataset_box *box = new_dataset_box(L);
  npu_status st = npu_dataset_from_tensors(npuB_context(L), (int)n, ts, &box->ds);
  if (st) return npuB_raise(L, "npu.data.Dataset.from_tensor_slices", st);
  return 1;
}

static int64_t check_i64(lua_State *L, int idx, const char *where, const char *what) {
  int ok = 0; /* a number only: lua_tointegerx would also take the string "2" */
  lua_Integer v = lua_type(L, idx) == LUA_TNUMBER ? lua_tointegerx(L, idx, &ok) : 0;
  if (!ok) npuB_fail(L, NULL, NPU_ERR_ARG,
            "%s: %s must be an integer, got %s", where, what, luaL_typename(L, idx));
  return (int64_t)v;
}

/* ds:shuffle(buffer_size, seed, reshuffle_each_iteration) */
static int m_shuffle(lua_State *L) {
  static const char where[] = "npu.Dataset:shuffle";
  npu_dataset *in = check_dataset(L, 1);
  int64_t buffer = check_i64(L, 2, where, "buffer_size");
  uint64_t seed = lua_isnoneornil(L, 3) ? 0 : (uint64_t)check_i64(L, 3, where, "seed");
  int reshuffle = lua_isnoneornil(L, 4) ? 1 : lua_toboolean(L, 4);
  dataset_box *box = new_dataset_box(L);
  npu_status st = npu_dataset_shuffle(in, buffer, seed, reshuffle, &box->ds);
  if (st) return npuB_raise(L, where, st);
  return 1;
}

/* ds:batch(batch_size, drop_remainder) */
static int m_batch(lua_State *L) {
  static const char where[] = "npu.Dataset:batch";
  npu_dataset *in = check_dataset(L, 1);
  int64_t n = check_i64(L, 2, where, "batch_size");
  int drop = lua_toboolean(L, 3);
  dataset_box *box = new_dataset_box(L);
  npu_status st = npu_dataset_batch(in, n, drop, &box->ds);
  if (st) return npuB_raise(L, where, st);
  return 1;
}

/* ds:repeat_(count): nil or -1 = forever */
static int m_repeat(lua_State *L) {
  static const char where[] = "npu.Dataset:repeat_";
  npu_dataset *in = check_dataset(L, 1);
  int64_t count = lua_isnoneornil(L, 2) ? -1 : check_i64(L, 2, where, "count");
  dataset_box *box = new_dataset_box(L);
  npu_status st = npu_dataset_repeat(in, count, &box->ds);
  if (st) return npuB_raise(L, where, st);
  return 1;
}

/* ds:prefetch(buffer_size) */
static int m_prefetch(lua_State *L) {
  static const char where[] = "npu.Dataset:prefetch";
  npu_dataset *in = check_dataset(L, 1);
  int64_t n = check_i64(L, 2, where, "buffer_size");
  dataset_box *box = new_dataset_box(L);
  npu_status st = npu_dataset_prefetch(in, n, &box->ds);
  if (st) return npuB_raise(L, where, st);
  return 1;
}

/* ds:shard(num_shards, index) */
static int m_shard(lua_State *L) {
  static const char where[] = "npu.Dataset:shard";
  npu_dataset *in = check_dataset(L, 1);
  int64_t n = check_i64(L, 2, where, "num_shards");
  int64_t index = check_i64(L, 3, where, "index");
  dataset_box *box = new_dataset_box(L);
  npu_status st = npu_dataset_shard(in, n, index, &box->ds);
  if (st) return npuB_raise(L, where, st);
  return 1;
}

static int m_n_components(lua_State *L) {
  lua_pushinteger(L, npu_dataset_n_components(check_dataset(L, 1)));
  return 1;
}

static int check_component(lua_State *L, const npu_dataset *ds, int idx) {
  lua_Integer i = npuB_checkinteger(L, idx);
  if (i < 1 || i > npu_dataset_n_components(ds))
    npuB_fail(L, NULL, NPU_ERR_ARG, "npu.Dataset: component %d out of range (1..%d)", (int)i,
               npu_dataset_n_components(ds));
  return (int)i - 1;
}

/* ds:dtype(i) -> "float32" (i from 1) */
static int m_dtype(lua_State *L) {
  npu_dataset *ds = check_dataset(L, 1);
  lua_pushstring(L, npu_dtype_name(npu_dataset_dtype(ds, check_component(L, ds, 2))));
  return 1;
}

/* ds:shape(i) -> {d1, d2, ...} with -1 for a batch dim that may be partial */
static int m_shape(lua_State *L) {
  npu_dataset *ds = check_dataset(L, 1);
  int i = check_component(L, ds, 2);
  int nd = npu_dataset_ndim(ds, i);
  const int64_t *shape = npu_dataset_shape(ds, i);
  lua_createtable(L, nd, 0);
  for (int d = 0; d < nd; d++) {
    lua_pushinteger(L, (lua_Integer)shape[d]);
    lua_rawseti(L, -2, d + 1);
  }
  return 1;
}

/* ds:cardinality() -> elements per pass, -1 when infinite */
static int m_cardinality(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)npu_dataset_cardinality(check_dataset(L, 1)));
  return 1;
}

/* ds:iterator() -> npu.DatasetIterator (its producer thread starts now) */
static int m_iterator(lua_State *L) {
  npu_dataset *ds = check_dataset(L, 1);
  iterator_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->it = NULL;
  box->n_components = npu_dataset_n_components(ds);
  luaL_setmetatable(L, NPUB_ITERATOR);
  npu_status st = npu_iterator_new(npuB_context(L), ds, &box->it);
  if (st) return npuB_raise(L, "npu.Dataset:iterator", st);
  return 1;
}

/* core.graph_add_dataset(g, ds) -> dataset id (the attribute of iterator_get_next) */
static int l_graph_add_dataset(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npu_dataset *ds = check_dataset(L, 2);
  int id;
  npu_status st = npu_graph_add_dataset(g, ds, &id);
  if (st) return npuB_raise(L, "npu.Graph:add_dataset", st);
  lua_pushinteger(L, id);
  return 1;
}

/* ---- iterators ---- */

static iterator_box *check_iterator(lua_State *L, int idx) {
  return npuB_checkudata(L, idx, NPUB_ITERATOR);
}

static int iterator_gc(lua_State *L) {
  iterator_box *box = check_iterator(L, 1);
  npu_iterator_release(box->it); /* joins the producer */
  box->it = NULL;
  return 0;
}

/* Shared by get_next and next: the element's tensors pushed, or the status (nothing pushed). */
static npu_status push_next(lua_State *L, iterator_box *box, const char *where) {
  if (!box->it) npuB_fail(L, where, NPU_ERR_STATE, "the iterator is closed");
  int n = box->n_components;
  npuB_tensor_box *boxes[16];
  int base = lua_gettop(L);
  for (int c = 0; c < n; c++) boxes[c] = npuB_new_tensor_box(L);
  npu_tensor *ts[16];
  npu_status st = npu_iterator_next(box->it, ts);
  if (st) {
    lua_settop(L, base);
    return st;
  }
  for (int c = 0; c < n; c++) boxes[c]->t = ts[c];
  return NPU_OK;
}

/* it:get_next() -> t1, t2, ...; raises NPU_ERR_OUT_OF_RANGE at the end of the data */
static int m_get_next(lua_State *L) {
  iterator_box *box = check_iterator(L, 1);
  npu_status st = push_next(L, box, "npu.DatasetIterator:get_next");
  if (st) return npuB_raise(L, "npu.DatasetIterator:get_next", st);
  return box->n_components;
}

/* it:next() -> t1, t2, ... or nil at the end of the data (other errors raise) */
static int m_next(lua_State *L) {
  iterator_box *box = check_iterator(L, 1);
  npu_status st = push_next(L, box, "npu.DatasetIterator:next");
  if (st == NPU_ERR_OUT_OF_RANGE) {
    lua_pushnil(L);
    return 1;
  }
  if (st) return npuB_raise(L, "npu.DatasetIterator:next", st);
  return box->n_components;
}

static int m_n_iter_components(lua_State *L) {
  lua_pushinteger(L, check_iterator(L, 1)->n_components);
  return 1;
}

/* ---- safetensors ---- */

static int safetensors_gc(lua_State *L) {
  safetensors_box *box = npuB_checkudata(L, 1, NPUB_SAFETENSORS);
  npu_safetensors_release(box->st);
  box->st = NULL;
  return 0;
}

/* core.safetensors_save(path, {names}, {tensors}, metadata_json or nil) */
static int l_safetensors_save(lua_State *L) {
  const char *path = npuB_checkstring(L, 1);
  npuB_checktype(L, 2, LUA_TTABLE);
  npuB_checktype(L, 3, LUA_TTABLE);
  const char *metadata = npuB_optstring(L, 4, NULL);
  lua_Integer n = luaL_len(L, 2);
  if (luaL_len(L, 3) != n)
    return npuB_fail(L, NULL, NPU_ERR_ARG, "npu.safetensors_save: %d names but %d tensors", (int)n,
                      (int)luaL_len(L, 3));
  if (n > 1 << 20) return npuB_fail(L, NULL, NPU_ERR_ARG, "npu.safetensors_save: too many tensors");
  /* scratch owned by the Lua stack: no malloc here */
  const char **names = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *names, 0);
  npu_tensor **ts = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *ts, 0);
  for (lua_Integer i = 0; i < n; i++) {
    lua_geti(L, 2, i + 1);
    if (lua_type(L, -1) != LUA_TSTRING)
      return npuB_fail(L, NULL, NPU_ERR_ARG,
                "npu.safetensors_save: name %d is a %s, expected a string",
                        (int)i + 1, luaL_typename(L, -1));
    names[i] = lua_tostring(L, -1); /* the names table keeps the string alive */
    lua_pop(L, 1);
    lua_geti(L, 3, i + 1);
    ts[i] = npuB_test_tensor(L, -1);
    if (!ts[i])
      return npuB_fail(L, NULL, NPU_ERR_ARG,
                "npu.safetensors_save: tensor %d is a %s, expected an npu.Tensor",
                        (int)i + 1, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  npu_status st = npu_safetensors_save(npuB_context(L), path, (int)n, names, ts, metadata);
  if (st) return npuB_raise(L, "npu.safetensors_save", st);
  return 0;
}

/* core.safetensors_load(path) -> {names}, {tensors}, metadata_json or nil (data order) */
static int l_safetensors_load(lua_State *L) {
  const char *path = npuB_checkstring(L, 1);
  safetensors_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->st = NULL;
  luaL_setmetatable(L, NPUB_SAFETENSORS);
  npu_status st = npu_safetensors_load(npuB_context(L), path, &box->st);
  if (st) return npuB_raise(L, "npu.safetensors_load", st);
  int n = npu_safetensors_count(box->st);
  lua_createtable(L, n, 0);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, npu_safetensors_name(box->st, i));
    lua_rawseti(L, -3, i + 1);
    npuB_push_tensor(L, npu_safetensors_tensor(box->st, i));
    lua_rawseti(L, -2, i + 1);
  }
  const char *m = npu_safetensors_metadata(box->st);
  if (m) lua_pushstring(L, m);
  else lua_pushnil(L);
  return 3; /* the box goes with the stack; its __gc frees the file's copy */
}

void npuB_open_data(lua_State *L) {
  static const luaL_Reg dataset_methods[] = {
      {"shuffle", m_shuffle},   {"batch", m_batch},
      {"repeat_", m_repeat},    {"prefetch", m_prefetch},
      {"shard", m_shard},
      {"n_components", m_n_components}, {"dtype", m_dtype},
      {"shape", m_shape},       {"cardinality", m_cardinality},
      {"iterator", m_iterator}, {NULL, NULL}};
  static const luaL_Reg iterator_methods[] = {{"get_next", m_get_next},
                                              {"next", m_next},
                                              {"n_components", m_n_iter_components},
                                              {"close", iterator_gc},
                                              {NULL, NULL}};
  static const luaL_Reg funcs[] = {{"dataset_from_tensors", l_dataset_from_tensors},
                                   {"graph_add_dataset", l_graph_add_dataset},
                                   {"safetensors_save", l_safetensors_save},
                                   {"safetensors_load", l_safetensors_load},
                                   {NULL, NULL}};
  int module = lua_gettop(L);
  luaL_newmetatable(L, NPUB_DATASET);
  lua_pushcfunction(L, dataset_gc);
  lua_setfield(L, -2, "__gc");
  luaL_newlib(L, dataset_methods);
  lua_setfield(L, -2, "__index");
  lua_setfield(L, module, "Dataset_mt");

  luaL_newmetatable(L, NPUB_ITERATOR);
  lua_pushcfunction(L, iterator_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, iterator_gc);
  lua_setfield(L, -2, "__close");
  luaL_newlib(L, iterator_methods);
  lua_setfield(L, -2, "__index");
  lua_setfield(L, module, "DatasetIterator_mt");

  luaL_newmetatable(L, NPUB_SAFETENSORS);
  lua_pushcfunction(L, safetensors_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);

  luaL_setfuncs(L, funcs, 0);
}
