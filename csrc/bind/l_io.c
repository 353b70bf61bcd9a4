/*
 * l_io.c — model files for Lua: TensorFlow graphs in (TensorFlow.js model.json, binary
 * GraphDef .pb, from a file or from bytes) and out (.pb), over npu_graph_import_* and
 * npu_graph_export_graphdef.  The facade is lua/npu/model.lua.
 *
 *   core.graph_import_file(path)        -> npu.Graph, info
 *   core.graph_import_graphdef(bytes)   -> npu.Graph, info
 *   core.graph_import_savedmodel(dir, tags, signature_key, variables) -> npu.Graph, info
 *   core.graph_export_savedmodel(g, dir, key, in_keys, in_names, out_keys, out_names, vars)
 *   core.graph_export_graphdef(g, path) -> true
 *   core.graph_serialize_graphdef(g)    -> bytes (a string)
 *   core.monotonic_time()               -> seconds (a float) of a monotonic wall clock, for
 *                                          timing runs: os.clock is the process's CPU time,
 *                                          which counts every device thread
 * info = {format =, signature_source =, inputs = {{key =, name =, dtype =, shape =}, ...},
 *         outputs = {...}}  (shape nil when even the rank is unknown; -1 for unknown dims).
 *
 * Boxes (graph, info, tensor) are created before the core call so a Lua error while building
 * the result never strands a C handle: their __gc releases what they hold.
 */
#include <time.h>

#include "bind.h"

#define NPUB_MODEL_INFO "npu.ModelInfo"

typedef struct info_box {
  npu_model_info *info;
} info_box;

static int info_gc(lua_State *L) {
  info_box *b = npuB_checkudata(L, 1, NPUB_MODEL_INFO);
  npu_model_info_release(b->info);
  b->info = NULL;
  return 0;
}

static npuB_graph_box *new_graph_box(lua_State *L) {
  npuB_graph_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->g = NULL;
  luaL_setmetatable(L, NPUB_GRAPH);
  return box;
}

static info_box *new_info_box(lua_State *L) {
  info_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->info = NULL;
  luaL_setmetatable(L, NPUB_MODEL_INFO);
  return box;
}

static void push_io(lua_State *L, const npu_model_io *e) {
  lua_createtable(L, 0, 4);
  lua_pushstring(L, e->key);
  lua_setfield(L, -2, "key");
  lua_pushstring(L, e->name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, npu_dtype_name(e->dtype));
  lua_setfield(L, -2, "dtype");
  if (e->ndim >= 0) {
    lua_createtable(L, e->ndim, 0);
    for (int i = 0; i < e->ndim; i++) {
      lua_pushinteger(L, e->shape[i]);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "shape");
  }
}

/* Stack: ..., graph box, info box.  Leaves ..., graph box, info table. */
static int finish_import(lua_State *L, const npu_model_info *info) {
  lua_createtable(L, 0, 4);
  lua_pushstring(L, npu_model_info_format(info));
  lua_setfield(L, -2, "format");
  lua_pushstring(L, npu_model_info_signature_source(info));
  lua_setfield(L, -2, "signature_source");
  int n = npu_model_info_n_inputs(info);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_io(L, npu_model_info_input(info, i));
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "inputs");
  n = npu_model_info_n_outputs(info);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_io(L, npu_model_info_output(info, i));
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "outputs");
  if (npu_model_info_signature_key(info)) { /* SavedModel */
    lua_pushstring(L, npu_model_info_signature_key(info));
    lua_setfield(L, -2, "signature_key");
    lua_pushstring(L, npu_model_info_method_name(info));
    lua_setfield(L, -2, "method_name");
    n = npu_model_info_n_signatures(info);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
      lua_pushstring(L, npu_model_info_signature_at(info, i));
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "signatures");
  }
  lua_remove(L, -2); /* the info box: its __gc frees the info */
  return 2;
}

static int l_import_file(lua_State *L) {
  const char *path = npuB_checkstring(L, 1);
  npuB_graph_box *gb = new_graph_box(L);
  info_box *ib = new_info_box(L);
  npu_status st = npu_graph_import_file(npuB_context(L), path, &gb->g, &ib->info);
  if (st) return npuB_raise(L, "npu.load_model", st);
  return finish_import(L, ib->info);
}

static int l_import_graphdef(lua_State *L) {
  size_t len;
  const char *bytes = npuB_checklstring(L, 1, &len);
  npuB_graph_box *gb = new_graph_box(L);
  info_box *ib = new_info_box(L);
  npu_status st = npu_graph_import_graphdef(npuB_context(L), bytes, len, &gb->g, &ib->info);
  if (st) return npuB_raise(L, "npu.import_graph_def", st);
  return finish_import(L, ib->info);
}

static int l_import_tfjs(lua_State *L) {
  size_t len;
  const char *json = npuB_checklstring(L, 1, &len);
  const char *dir = npuB_optstring(L, 2, NULL);
  npuB_graph_box *gb = new_graph_box(L);
  info_box *ib = new_info_box(L);
  npu_status st = npu_graph_import_tfjs(npuB_context(L), json, len, dir, &gb->g, &ib->info);
  if (st) return npuB_raise(L, "npu.import_graph_def", st);
  return finish_import(L, ib->info);
}

static int l_import_savedmodel(lua_State *L) {
  npu_savedmodel_options o = {.tags = npuB_optstring(L, 2, NULL),
                              .signature_key = npuB_optstring(L, 3, NULL),
                              .variables = lua_toboolean(L, 4)};
  const char *dir = npuB_checkstring(L, 1);
  npuB_graph_box *gb = new_graph_box(L);
  info_box *ib = new_info_box(L);
  npu_status st = npu_graph_import_savedmodel_with_options(npuB_context(L), dir, &o, &gb->g, &ib->info);
  if (st) return npuB_raise(L, "npu.load_model", st);
  return finish_import(L, ib->info);
}

/* Names from a Lua list at index idx into a userdata array (no malloc in binding code). */
static const char **check_names(lua_State *L, int idx, const char *what, int *n) {
  npuB_checktype(L, idx, LUA_TTABLE);
  *n = (int)luaL_len(L, idx);
  if (*n > 128) npuB_fail(L, NULL, NPU_ERR_ARG, "npu.export_saved_model: more than 128 %s", what);
  const char **v = lua_newuserdatauv(L, ((size_t)*n + 1) * sizeof *v, 0);
  for (int i = 0; i < *n; i++) {
    lua_geti(L, idx, i + 1);
    /* a string only: a number converted here would be a new string that nothing keeps alive
       once popped (and a number is no tensor or node name) */
    if (lua_type(L, -1) != LUA_TSTRING) npuB_fail(L, NULL, NPU_ERR_ARG,
              "npu.export_saved_model: %s[%d] is a %s, expected a string", what, i + 1,
              luaL_typename(L, -1));
    v[i] = lua_tostring(L, -1); /* kept alive by the table */
    lua_pop(L, 1);
  }
  return v;
}

/* core.graph_export_savedmodel(g, dir, signature_key|nil, input_keys, input_names,
   output_keys, output_names, variables) -> true */
static int l_export_savedmodel(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  const char *dir = npuB_checkstring(L, 2);
  const char *key = npuB_optstring(L, 3, NULL);
  int n_ik, n_in, n_ok, n_on, n_var;
  const char **ik = check_names(L, 4, "input keys", &n_ik);
  const char **in = check_names(L, 5, "input names", &n_in);
  const char **ok = check_names(L, 6, "output keys", &n_ok);
  const char **on = check_names(L, 7, "output names", &n_on);
  const char **vars = check_names(L, 8, "variables", &n_var);
  if (n_ik != n_in || n_ok != n_on) npuB_fail(L, NULL, NPU_ERR_ARG,
            "npu.export_saved_model: keys and names differ in number");
  npu_status st = npu_graph_export_savedmodel(g, dir, key, n_in, ik, in, n_on, ok, on, n_var, vars);
  if (st) return npuB_raise(L, "npu.export_saved_model", st);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_export_graphdef(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  const char *path = npuB_checkstring(L, 2);
  npu_status st = npu_graph_export_graphdef(g, path);
  if (st) return npuB_raise(L, "npu.export_graph_def", st);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_serialize_graphdef(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npuB_tensor_box *tb = npuB_new_tensor_box(L);
  npu_status st = npu_graph_serialize_graphdef(g, &tb->t);
  if (st) return npuB_raise(L, "npu.export_graph_def", st);
  lua_pushlstring(L, npu_tensor_data(tb->t), npu_tensor_nbytes(tb->t));
  return 1;
}

static int l_monotonic_time(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

void npuB_open_io(lua_State *L) {
  luaL_newmetatable(L, NPUB_MODEL_INFO);
  lua_pushcfunction(L, info_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  static const luaL_Reg funcs[] = {{"graph_import_file", l_import_file},
                                   {"graph_import_graphdef", l_import_graphdef},
                                   {"graph_import_tfjs", l_import_tfjs},
                                   {"graph_import_savedmodel", l_import_savedmodel},
                                   {"graph_export_savedmodel", l_export_savedmodel},
                                   {"graph_export_graphdef", l_export_graphdef},
                                   {"graph_serialize_graphdef", l_serialize_graphdef},
                                   {"monotonic_time", l_monotonic_time},
                                   {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
