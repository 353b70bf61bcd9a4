/*
 * l_summary.c — TensorBoard event files for Lua, over npu_event_writer_* and npu_event_reader_*
 * (npu.h, "event files").  The facade is lua/npu/summary.lua (npu.summary).
 *
 *   core.event_writer_new(logdir, {max_queue =, flush_secs =, filename_suffix =, path =})
 *       -> npu.EventWriter: w:add_summary(bytes, step [, wall_time]), w:add_graph(g [, step]),
 *          w:flush(), w:close(), w:path(); __close closes (raising as close does), __gc
 *          closes and drops an error
 *   core.event_reader_open(path) -> npu.EventReader: r:next() -> item table or nil at the end,
 *          r:truncated() -> bytes of an incomplete last record skipped
 *   core.bytes_tensor(s)  -> a uint8 vector of the bytes of Lua string s (strings on the device)
 *   core.tensor_bytes(t)  -> the bytes of a uint8 tensor t as a Lua string
 * bytes: a Lua string or a uint8 npu.Tensor (a summary op's output).  Items:
 *   {kind = "file_version"|"graph"|"scalar"|"histogram"|"image"|"tensor"|"other", step =,
 *    wall_time =, offset =, tag =, value = (a number; {min, max, num, sum, sum_squares,
 *    bucket_limit = {...}, bucket = {...}}; {height, width, colorspace, encoded_image_string};
 *    the string; the file version or GraphDef bytes), plugin_name =, dtype = (tensors)}
 */
#include <string.h>

#include "bind.h"

#define NPUB_EVENT_WRITER "npu.EventWriter"
#define NPUB_EVENT_READER "npu.EventReader"

typedef struct writer_box {
  npu_event_writer *w;
} writer_box;
typedef struct reader_box {
  npu_event_reader *r;
} reader_box;

static npu_event_writer *check_writer(lua_State *L) {
  writer_box *b = npuB_checkudata(L, 1, NPUB_EVENT_WRITER);
  if (!b->w) npuB_fail(L, "npu.EventWriter", NPU_ERR_STATE, "the writer is closed");
  return b->w;
}

static const char *opt_string(lua_State *L, int idx, const char *key) {
  const char *s = NULL;
  if (lua_getfield(L, idx, key) != LUA_TNIL) s = npuB_checkstring(L, -1);
  lua_pop(L, 1); /* the string stays referenced by the options table */
  return s;
}

static int l_writer_new(lua_State *L) {
  const char *logdir = npuB_optstring(L, 1, NULL);
  npu_event_writer_config cfg = {0};
  if (!lua_isnoneornil(L, 2)) {
    npuB_checktype(L, 2, LUA_TTABLE);
    if (lua_getfield(L, 2, "max_queue") != LUA_TNIL) cfg.max_queue = (int)npuB_checkinteger(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "flush_secs") != LUA_TNIL) cfg.flush_secs = npuB_checknumber(L, -1);
    lua_pop(L, 1);
    cfg.filename_suffix = opt_string(L, 2, "filename_suffix");
    cfg.path = opt_string(L, 2, "path");
  }
  if (!logdir && !cfg.path) return npuB_argerror(L, 1, "a logdir expected");
  writer_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->w = NULL;
  luaL_setmetatable(L, NPUB_EVENT_WRITER);
  npu_status s = npu_event_writer_new(npuB_context(L), logdir, &cfg, &b->w);
  if (s) return npuB_raise(L, "npu.summary.FileWriter", s);
  return 1;
}

/* The bytes at idx: a Lua string or a uint8 tensor. */
static const void *check_bytes(lua_State *L, int idx, size_t *n) {
  if (lua_type(L, idx) == LUA_TSTRING) return lua_tolstring(L, idx, n);
  npu_tensor *t = npuB_test_tensor(L, idx);
  if (!t || npu_tensor_dtype(t) != NPU_DTYPE_U8)
    npuB_argerror(L, idx, "a serialized Summary expected (a string or a uint8 npu.Tensor)");
  *n = npu_tensor_nbytes(t);
  return npu_tensor_data(t);
}

static int m_add_summary(lua_State *L) {
  npu_event_writer *w = check_writer(L);
  size_t n;
  const void *p = check_bytes(L, 2, &n);
  int64_t step = (int64_t)npuB_optinteger(L, 3, 0);
  double wall = npuB_optnumber(L, 4, -1);
  npu_status s = npu_event_writer_add_summary(w, p, n, step, wall);
  if (s) return npuB_raise(L, "npu.EventWriter:add_summary", s);
  return 0;
}

static int m_add_graph(lua_State *L) {
  npu_event_writer *w = check_writer(L);
  npu_graph *g = npuB_check_graph(L, 2);
  int64_t step = (int64_t)npuB_optinteger(L, 3, 0);
  npu_status s = npu_event_writer_add_graph(w, g, step, npuB_optnumber(L, 4, -1));
  if (s) return npuB_raise(L, "npu.EventWriter:add_graph", s);
  return 0;
}

static int m_flush(lua_State *L) {
  npu_status s = npu_event_writer_flush(check_writer(L));
  if (s) return npuB_raise(L, "npu.EventWriter:flush", s);
  return 0;
}

static int m_close(lua_State *L) {
  writer_box *b = npuB_checkudata(L, 1, NPUB_EVENT_WRITER);
  if (!b->w) return 0;
  npu_status s = npu_event_writer_close(b->w);
  if (s) return npuB_raise(L, "npu.EventWriter:close", s);
  return 0;
}

static int m_path(lua_State *L) {
  lua_pushstring(L, npu_event_writer_path(check_writer(L)));
  return 1;
}

static int writer_gc(lua_State *L) {
  writer_box *b = npuB_checkudata(L, 1, NPUB_EVENT_WRITER);
  npu_event_writer_release(b->w);
  b->w = NULL;
  return 0;
}

static int l_reader_open(lua_State *L) {
  const char *path = npuB_checkstring(L, 1);
  reader_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->r = NULL;
  luaL_setmetatable(L, NPUB_EVENT_READER);
  npu_status s = npu_event_reader_open(npuB_context(L), path, &b->r);
  if (s) return npuB_raise(L, "npu.summary.read_events", s);
  return 1;
}

static void set_doubles(lua_State *L, const char *key, const uint8_t *p, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    double d;
    memcpy(&d, p + 8 * (size_t)i, 8); /* little-endian on the hosts we build for */
    lua_pushnumber(L, d);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, key);
}

static void set_number(lua_State *L, const char *key, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, key);
}

static int m_next(lua_State *L) {
  reader_box *b = npuB_checkudata(L, 1, NPUB_EVENT_READER);
  if (!b->r) return 0;
  npu_event_value v;
  npu_status s = npu_event_reader_next(b->r, &v);
  if (s == NPU_ERR_OUT_OF_RANGE) return 0;
  if (s) return npuB_raise(L, "npu.summary.read_events", s);
  static const char *const kinds[] = {"file_version", "graph", "scalar", "histogram", "image",
                                      "tensor", "other"};
  lua_createtable(L, 0, 8);
  lua_pushstring(L, kinds[v.kind]);
  lua_setfield(L, -2, "kind");
  lua_pushinteger(L, v.step);
  lua_setfield(L, -2, "step");
  set_number(L, "wall_time", v.wall_time);
  lua_pushinteger(L, v.offset);
  lua_setfield(L, -2, "offset");
  if (v.tag) {
    lua_pushlstring(L, v.tag, v.tag_len);
    lua_setfield(L, -2, "tag");
  }
  if (v.plugin_name) {
    lua_pushlstring(L, v.plugin_name, v.plugin_name_len);
    lua_setfield(L, -2, "plugin_name");
  }
  switch (v.kind) {
  case NPU_EVENT_SCALAR: lua_pushnumber(L, v.simple_value); break;
  case NPU_EVENT_HISTOGRAM:
    lua_createtable(L, 0, 7);
    set_number(L, "min", v.min);
    set_number(L, "max", v.max);
    set_number(L, "num", v.num);
    set_number(L, "sum", v.sum);
    set_number(L, "sum_squares", v.sum_squares);
    set_doubles(L, "bucket_limit", v.bucket_limits, v.bucket_limits ? v.n_buckets : 0);
    set_doubles(L, "bucket", v.buckets, v.buckets ? v.n_buckets : 0);
    break;
  case NPU_EVENT_IMAGE:
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, v.height);
    lua_setfield(L, -2, "height");
    lua_pushinteger(L, v.width);
    lua_setfield(L, -2, "width");
    lua_pushinteger(L, v.colorspace);
    lua_setfield(L, -2, "colorspace");
    lua_pushlstring(L, (const char *)v.data, v.n_data);
    lua_setfield(L, -2, "encoded_image_string");
    break;
  case NPU_EVENT_TENSOR:
    lua_pushinteger(L, v.tensor_dtype);
    lua_setfield(L, -2, "dtype");
    lua_pushlstring(L, (const char *)v.data, v.n_data);
    break;
  case NPU_EVENT_FILE_VERSION:
  case NPU_EVENT_GRAPH: lua_pushlstring(L, (const char *)v.data, v.n_data); break;
  default: lua_pushnil(L); break;
  }
  lua_setfield(L, -2, "value");
  return 1;
}

static int m_truncated(lua_State *L) {
  reader_box *b = npuB_checkudata(L, 1, NPUB_EVENT_READER);
  lua_pushinteger(L, (lua_Integer)npu_event_reader_truncated(b->r));
  return 1;
}

static int reader_gc(lua_State *L) {
  reader_box *b = npuB_checkudata(L, 1, NPUB_EVENT_READER);
  npu_event_reader_release(b->r);
  b->r = NULL;
  return 0;
}

static int l_bytes_tensor(lua_State *L) {
  size_t n;
  const char *s = npuB_checklstring(L, 1, &n);
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  int64_t shape[1] = {(int64_t)n};
  npu_status st = npu_tensor_from_data(npuB_context(L), NPU_DTYPE_U8, 1, shape, s, n, &box->t);
  if (st) return npuB_raise(L, "npu.core.bytes_tensor", st);
  return 1;
}

static int l_tensor_bytes(lua_State *L) {
  npu_tensor *t = npuB_check_tensor(L, 1);
  if (npu_tensor_dtype(t) != NPU_DTYPE_U8) return npuB_argerror(L, 1, "a uint8 npu.Tensor expected");
  lua_pushlstring(L, npu_tensor_data(t), npu_tensor_nbytes(t));
  return 1;
}

void npuB_open_summary(lua_State *L) {
  static const luaL_Reg writer_methods[] = {
      {"add_summary", m_add_summary}, {"add_graph", m_add_graph}, {"flush", m_flush},
      {"close", m_close}, {"path", m_path}, {NULL, NULL}};
  luaL_newmetatable(L, NPUB_EVENT_WRITER);
  luaL_newlib(L, writer_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, writer_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, m_close); /* <close>: a write error raises, as w:close() does */
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);
  static const luaL_Reg reader_methods[] = {{"next", m_next}, {"truncated", m_truncated},
                                            {NULL, NULL}};
  luaL_newmetatable(L, NPUB_EVENT_READER);
  luaL_newlib(L, reader_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, reader_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, reader_gc);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);
  static const luaL_Reg funcs[] = {
      {"event_writer_new", l_writer_new}, {"event_reader_open", l_reader_open},
      {"bytes_tensor", l_bytes_tensor}, {"tensor_bytes", l_tensor_bytes}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
