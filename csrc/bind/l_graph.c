/*
 * l_graph.c — npu.Graph, npu.Output (a value) and npu.Operation (a node) for Lua.
 *
 * The binding is generic: g:add_op(op, inputs, attrs, name) works for every op of the op
 * table; the Lua facade (lua/npu/init.lua) installs convenience methods by walking
 * core.op_list().  Attribute tables convert by Lua type: integer -> INT, float -> FLOAT,
 * boolean -> BOOL, string -> STRING, npu.Tensor -> TENSOR, a (nested) list of numbers -> INTS
 * when all are integers, else FLOATS (nested lists are flattened row by row, so
 * paddings = {{1, 1}, {2, 2}} arrives as {1, 1, 2, 2}).
 *
 * Temporary arrays live in Lua userdata (no malloc here); strings stay on the Lua stack for
 * the duration of the call.
 */
#include <limits.h>
#include <string.h>

#include "bind.h"

#define MAX_ATTRS 32
#define MAX_LIST 1024

npu_graph *npuB_check_graph(lua_State *L, int idx) {
  npuB_graph_box *box = npuB_checkudata(L, idx, NPUB_GRAPH);
  if (!box->g) npuB_argerror(L, idx, "graph is released");
  return box->g;
}

npuB_ref *npuB_test_output(lua_State *L, int idx) { return luaL_testudata(L, idx, NPUB_OUTPUT); }
npuB_ref *npuB_test_operation(lua_State *L, int idx) {
  return luaL_testudata(L, idx, NPUB_OPERATION);
}

static void push_ref(lua_State *L, int graph_idx, int id, const char *mt) {
  graph_idx = lua_absindex(L, graph_idx);
  npuB_graph_box *gb = lua_touserdata(L, graph_idx);
  npuB_ref *r = lua_newuserdatauv(L, sizeof *r, 1);
  r->g = gb->g;
  r->id = id;
  luaL_setmetatable(L, mt);
  lua_pushvalue(L, graph_idx);
  lua_setiuservalue(L, -2, 1);
}

void npuB_push_output(lua_State *L, int graph_idx, int value) {
  push_ref(L, graph_idx, value, NPUB_OUTPUT);
}

static int l_graph_new(lua_State *L) {
  npuB_graph_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->g = NULL;
  luaL_setmetatable(L, NPUB_GRAPH);
  npu_status st = npu_graph_new(npuB_context(L), &box->g);
  if (st) return npuB_raise(L, "npu.Graph", st);
  return 1;
}

static int l_graph_gc(lua_State *L) {
  npuB_graph_box *box = npuB_checkudata(L, 1, NPUB_GRAPH);
  npu_graph_release(box->g);
  box->g = NULL;
  return 0;
}

/* ---- attribute conversion ---- */

typedef struct list_acc {
  int n;
  bool all_int;
  int64_t ints[MAX_LIST];
  double floats[MAX_LIST];
} list_acc;

static void flatten(lua_State *L, int idx, list_acc *acc, const char *key, int depth) {
  idx = lua_absindex(L, idx);
  if (depth > 8) npuB_fail(L, NULL, NPU_ERR_ARG, "attribute '%s': list nested too deeply", key);
  lua_Integer n = luaL_len(L, idx);
  for (lua_Integer i = 1; i <= n; i++) {
    int t = lua_geti(L, idx, i);
    if (t == LUA_TTABLE) flatten(L, -1, acc, key, depth + 1);
    else if (t == LUA_TNUMBER) {
      if (acc->n == MAX_LIST) npuB_fail(L, NULL, NPU_ERR_ARG,
                "attribute '%s': more than %d entries", key, MAX_LIST);
      if (lua_isinteger(L, -1)) {
        acc->ints[acc->n] = lua_tointeger(L, -1);
        acc->floats[acc->n] = (double)acc->ints[acc->n];
      } else {
        acc->all_int = false;
        acc->floats[acc->n] = lua_tonumber(L, -1);
      }
      acc->n++;
    } else
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "attribute '%s': entry %d is a %s, expected a number", key, (int)i,
                 luaL_typename(L, -1));
    lua_pop(L, 1);
  }
}

/* Fills attrs from the table at idx; returns the count. */
static int convert_attrs(lua_State *L, int idx, npu_attr *attrs) {
  int n = 0;
  if (lua_isnoneornil(L, idx)) return 0;
  npuB_checktype(L, idx, LUA_TTABLE);
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "attribute names must be strings (got a %s key)", luaL_typename(L, -2));
    if (n == MAX_ATTRS) npuB_fail(L, NULL, NPU_ERR_ARG, "more than %d attributes", MAX_ATTRS);
    luaL_checkstack(L, 4, "attributes");
    npu_attr *a = &attrs[n];
    const char *key = lua_tostring(L, -2);
    a->name = key; /* the key stays in the table, which is on the stack */
    switch (lua_type(L, -1)) {
    case LUA_TNUMBER:
      if (lua_isinteger(L, -1)) a->type = NPU_ATTR_INT, a->u.i = lua_tointeger(L, -1);
      else a->type = NPU_ATTR_FLOAT, a->u.f = lua_tonumber(L, -1);
      break;
    case LUA_TBOOLEAN: a->type = NPU_ATTR_BOOL, a->u.i = lua_toboolean(L, -1); break;
    case LUA_TSTRING: a->type = NPU_ATTR_STRING, a->u.s = lua_tostring(L, -1); break;
    case LUA_TUSERDATA: {
      npu_tensor *t = npuB_test_tensor(L, -1);
      if (!t) npuB_fail(L, NULL, NPU_ERR_ARG,
                "attribute '%s': expected an npu.Tensor, got %s", key, luaL_typename(L, -1));
      a->type = NPU_ATTR_TENSOR;
      a->u.tensor = t;
      break;
    }
    case LUA_TTABLE: {
      list_acc *acc = lua_newuserdatauv(L, sizeof *acc, 0);
      acc->n = 0;
      acc->all_int = true;
      flatten(L, -2, acc, key, 0);
      /* keep acc alive: store it in the attrs table's registry slot via the stack; move it
         below the key so lua_next continues (the value is popped, acc stays). */
      if (acc->all_int) a->type = NPU_ATTR_INTS, a->u.ints.v = acc->ints, a->u.ints.n = acc->n;
      else a->type = NPU_ATTR_FLOATS, a->u.floats.v = acc->floats, a->u.floats.n = acc->n;
      lua_insert(L, -3); /* stack: ..., acc, key, value */
      break;
    }
    default:
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "attribute '%s': unsupported value type %s", key, luaL_typename(L, -1));
    }
    n++;
    lua_pop(L, 1);
  }
  return n;
}

/* g:add_op(op, inputs, attrs, name) -> node id.  inputs: a list of npu.Output. */
static int l_graph_add_op(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  const char *op = npuB_checkstring(L, 2);
  int n_inputs = 0;
  if (!lua_isnoneornil(L, 3)) {
    npuB_checktype(L, 3, LUA_TTABLE);
    n_inputs = (int)luaL_len(L, 3);
  }
  const char *name = npuB_optstring(L, 5, NULL);
  int *inputs = lua_newuserdatauv(L, (size_t)(n_inputs ? n_inputs : 1) * sizeof *inputs, 0);
  for (int i = 0; i < n_inputs; i++) {
    lua_geti(L, 3, i + 1);
    npuB_ref *r = npuB_test_output(L, -1);
    if (!r) npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: input %d is a %s, expected an npu.Output", op, i + 1, luaL_typename(L, -1));
    if (r->g != g)
      npuB_fail(L, NULL, NPU_ERR_ARG, "%s: input %d ('%s') belongs to another graph", op, i + 1,
                 npu_graph_node_name(r->g, npu_graph_value_node(r->g, r->id)));
    inputs[i] = r->id;
    lua_pop(L, 1);
  }
  npu_attr *attrs = lua_newuserdatauv(L, MAX_ATTRS * sizeof *attrs, 0);
  int n_attrs = convert_attrs(L, 4, attrs);
  int node;
  npu_status st = npu_graph_add_op(g, op, name, n_inputs, inputs, n_attrs, attrs, &node);
  if (st) return npuB_raise_node(L, op, st, name, op);
  lua_pushinteger(L, node);
  return 1;
}

/* g:output(node, i) -> npu.Output (i is 0-based like TensorFlow's "name:i") */
static int l_graph_output(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  int node = (int)npuB_checkinteger(L, 2);
  int i = (int)npuB_optinteger(L, 3, 0);
  int v = npu_graph_output(g, node, i);
  if (v < 0) return npuB_fail(L, NULL, NPU_ERR_ARG, "node %d has no output %d", node, i);
  npuB_push_output(L, 1, v);
  return 1;
}

static int l_graph_operation(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  int node = (int)npuB_checkinteger(L, 2);
  if (node < 0 || node >= npu_graph_n_nodes(g)) return npuB_fail(L, NULL, NPU_ERR_ARG,
            "no node %d", node);
  push_ref(L, 1, node, NPUB_OPERATION);
  return 1;
}

static int l_graph_n_outputs(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  lua_pushinteger(L, npu_graph_n_outputs(g, (int)npuB_checkinteger(L, 2)));
  return 1;
}

/* g:to_dot() -> the graph as given, as Graphviz DOT text (npu_graph_to_dot in npu.h). */
static int l_graph_to_dot(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npuB_check_no_more(L, 1);
  npu_context *ctx = npuB_context(L);
  luaL_checkstack(L, 4, "npu.Graph:to_dot");
  char *dot = NULL;
  npu_status st = npu_graph_to_dot(g, &dot);
  if (st) return npuB_raise(L, "npu.Graph:to_dot", st);
  return npuB_push_owned_string(L, ctx, dot);
}

static int l_graph_get_tensor_by_name(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  const char *name = npuB_checkstring(L, 2);
  int v;
  npu_status st = npu_graph_find_value(g, name, &v);
  if (st) return npuB_raise(L, "npu.Graph:get_tensor_by_name", st);
  npuB_push_output(L, 1, v);
  return 1;
}

static int l_graph_get_operation_by_name(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  const char *name = npuB_checkstring(L, 2);
  int node = npu_graph_find_node(g, name);
  if (node < 0) return npuB_fail(L, "npu.Graph:get_operation_by_name", NPU_ERR_NOT_FOUND,
            "no node named '%s'", name);
  push_ref(L, 1, node, NPUB_OPERATION);
  return 1;
}

/* g:keep_dtype(value id): the producing node keeps its graph dtypes under every precision
   mode (npu.util.keep_tensors_dtypes resolves names and Outputs); g:keeps_dtype(node). */
static int l_graph_keep_dtype(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npu_status st = npu_graph_keep_dtype(g, (int)npuB_checkinteger(L, 2));
  if (st) return npuB_raise(L, "npu.Graph:keep_dtype", st);
  return 0;
}

static int l_graph_keeps_dtype(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  lua_pushboolean(L, npu_graph_keeps_dtype(g, (int)npuB_checkinteger(L, 2)));
  return 1;
}

static int l_graph_n_nodes(lua_State *L) {
  lua_pushinteger(L, npu_graph_n_nodes(npuB_check_graph(L, 1)));
  return 1;
}

static int l_graph_add_control(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npu_status st = npu_graph_add_control(g, (int)npuB_checkinteger(L, 2), (int)npuB_checkinteger(L, 3));
  if (st) return npuB_raise(L, "npu.Graph:add_control", st);
  return 0;
}

/* ---- variables: the graph's own list (npu_graph_add_variable and friends in npu.h), so a
   graph built here, in C or imported lists the same ones ---- */

/* The npu.Output at arg, a value of g, naming `what` when it is not. */
static int check_value_of(lua_State *L, npu_graph *g, int arg, const char *where, const char *what) {
  npuB_ref *r = npuB_test_output(L, arg);
  if (!r) npuB_fail(L, where, NPU_ERR_ARG, "%s must be an npu.Output, got %s", what,
                    luaL_typename(L, arg));
  if (r->g != g)
    npuB_fail(L, where, NPU_ERR_ARG, "%s ('%s') belongs to another graph", what,
              npu_graph_node_name(r->g, npu_graph_value_node(r->g, r->id)));
  return r->id;
}

/* g:add_variable(initial, name) -> the variable's npu.Output (initial: an npu.Output of g). */
static int l_graph_add_variable(lua_State *L) {
  static const char where[] = "npu.Graph:variable";
  npu_graph *g = npuB_check_graph(L, 1);
  int init = check_value_of(L, g, 2, where, "the initial value");
  const char *name = npuB_optstring(L, 3, NULL);
  int v;
  npu_status st = npu_graph_add_variable(g, name, init, &v);
  if (st) return npuB_raise_node(L, where, st, name, "variable");
  npuB_push_output(L, 1, v);
  return 1;
}

/* g:variables([trainable_only]) -> the variables' npu.Outputs, in creation order. */
static int l_graph_variables(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  int trainable_only = lua_toboolean(L, 2);
  int n = npu_graph_n_variables(g), k = 0;
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    npu_variable_info vi;
    if (npu_graph_variable_info(g, i, &vi) || (trainable_only && !vi.trainable)) continue;
    npuB_push_output(L, 1, vi.value);
    lua_rawseti(L, -2, ++k);
  }
  return 1;
}

/* g:variable_initializers() -> the node ids of the variables' initializers (those that have
   one), in creation order. */
static int l_graph_variable_initializers(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  int n = npu_graph_n_variables(g), k = 0;
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    npu_variable_info vi;
    if (npu_graph_variable_info(g, i, &vi) || vi.initializer < 0) continue;
    lua_pushinteger(L, vi.initializer);
    lua_rawseti(L, -2, ++k);
  }
  return 1;
}

/* The index of the variable whose npu.Output is at arg, raising when it is none. */
static int check_variable(lua_State *L, npu_graph *g, int arg, const char *where) {
  int value = check_value_of(L, g, arg, where, "the variable");
  int i = npu_graph_find_variable(g, npu_graph_value_node(g, value));
  if (i < 0)
    npuB_fail(L, where, NPU_ERR_ARG, "'%s' is not a variable (its op is %s)",
              npu_graph_node_name(g, npu_graph_value_node(g, value)),
              npu_graph_node_op(g, npu_graph_value_node(g, value)));
  return i;
}

/* g:set_trainable(v, flag): variable v is in the default var_list of optimizers, or not. */
static int l_graph_set_trainable(lua_State *L) {
  static const char where[] = "npu.Graph:set_trainable";
  npu_graph *g = npuB_check_graph(L, 1);
  int i = check_variable(L, g, 2, where);
  npu_status st = npu_graph_set_variable_trainable(g, i, lua_toboolean(L, 3));
  if (st) return npuB_raise(L, where, st);
  return 0;
}

/* g:is_trainable(v) -> boolean (raises when v is not a variable). */
static int l_graph_is_trainable(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npu_variable_info vi;
  npu_graph_variable_info(g, check_variable(L, g, 2, "npu.Graph:is_trainable"), &vi);
  lua_pushboolean(L, vi.trainable);
  return 1;
}

/* g:region_begin() -> region id; g:region_end(id); g:region() -> the current one (0: top);
   g:node_region(node).  The facade's npu.cond / npu.while_loop build their branches and
   bodies between them (lua/npu/control.lua). */
static int l_graph_region_begin(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  int region;
  npu_status st = npu_graph_region_begin(g, &region);
  if (st) return npuB_raise(L, "npu.Graph:region_begin", st);
  lua_pushinteger(L, region);
  return 1;
}

/* An id beyond int's range is no region (0, refused), rather than one wrapped to another's. */
static int check_id(lua_State *L, int arg) {
  lua_Integer id = npuB_checkinteger(L, arg);
  return id < 0 || id > INT_MAX ? 0 : (int)id;
}

static int l_graph_region_end(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npu_status st = npu_graph_region_end(g, check_id(L, 2));
  if (st) return npuB_raise(L, "npu.Graph:region_end", st);
  return 0;
}

static int l_graph_region(lua_State *L) {
  lua_pushinteger(L, npu_graph_region(npuB_check_graph(L, 1)));
  return 1;
}

static int l_graph_node_region(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  lua_Integer node = npuB_checkinteger(L, 2);
  lua_pushinteger(L, npu_graph_node_region(g, node < 0 || node > INT_MAX ? -1 : (int)node));
  return 1;
}

/* g:set_exec_config(node, options or nil): the node's graph-level options (the facade's
   npu.util.set_graph_exec_config builds the npu.Options). */
static int l_graph_set_exec_config(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  int node = (int)npuB_checkinteger(L, 2);
  const npu_options *overlay = NULL;
  if (!lua_isnoneornil(L, 3)) {
    npu_options **box = npuB_checkudata(L, 3, NPUB_OPTIONS);
    if (!*box) return npuB_argerror(L, 3, "options not initialised");
    overlay = *box;
  }
  npu_status st = npu_graph_set_exec_config(g, node, overlay);
  if (st) return npuB_raise(L, "npu.Graph:set_exec_config", st);
  return 0;
}

/* g:exec_config(node) -> a new npu.Options, or nil when the node carries none */
static int l_graph_exec_config(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  int node = (int)npuB_checkinteger(L, 2);
  npu_options **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  luaL_setmetatable(L, NPUB_OPTIONS);
  npu_status st = npu_graph_get_exec_config(g, node, box);
  if (st) return npuB_raise(L, "npu.Graph:exec_config", st);
  if (!*box) lua_pushnil(L);
  return 1;
}

static int l_graph_tostring(lua_State *L) {
  npuB_graph_box *box = npuB_checkudata(L, 1, NPUB_GRAPH);
  lua_pushfstring(L, "npu.Graph(%d nodes)", box->g ? npu_graph_n_nodes(box->g) : 0);
  return 1;
}

/* ---- Output ---- */

static npuB_ref *check_output(lua_State *L, int idx) { return npuB_checkudata(L, idx, NPUB_OUTPUT); }

static int l_output_name(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  int node = npu_graph_value_node(r->g, r->id);
  lua_pushfstring(L, "%s:%d", npu_graph_node_name(r->g, node), npu_graph_value_index(r->g, r->id));
  return 1;
}

static int l_output_dtype(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  lua_pushstring(L, npu_dtype_name(npu_graph_value_dtype(r->g, r->id)));
  return 1;
}

static void push_shape(lua_State *L, int ndim, const int64_t *shape) {
  if (ndim < 0) {
    lua_pushnil(L);
    return;
  }
  lua_createtable(L, ndim, 0);
  for (int i = 0; i < ndim; i++) {
    lua_pushinteger(L, shape[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

static int l_output_shape(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  push_shape(L, npu_graph_value_ndim(r->g, r->id), npu_graph_value_shape(r->g, r->id));
  return 1;
}

static int l_output_op(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  lua_getiuservalue(L, 1, 1);
  push_ref(L, -1, npu_graph_value_node(r->g, r->id), NPUB_OPERATION);
  return 1;
}

static int l_output_graph(lua_State *L) {
  check_output(L, 1);
  lua_getiuservalue(L, 1, 1);
  return 1;
}

static int l_output_index(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  lua_pushinteger(L, npu_graph_value_index(r->g, r->id));
  return 1;
}

static int l_output_id(lua_State *L) {
  lua_pushinteger(L, check_output(L, 1)->id);
  return 1;
}

static int l_output_tostring(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  char shape[96];
  int node = npu_graph_value_node(r->g, r->id);
  npu_shape_format(shape, sizeof shape, npu_graph_value_ndim(r->g, r->id), npu_graph_value_shape(r->g, r->id));
  lua_pushfstring(L, "npu.Output(\"%s:%d\", op=%s, dtype=%s, shape=%s)", npu_graph_node_name(r->g, node),
                  npu_graph_value_index(r->g, r->id), npu_graph_node_op(r->g, node),
                  npu_dtype_name(npu_graph_value_dtype(r->g, r->id)), shape);
  return 1;
}

static int l_output_eq(lua_State *L) {
  npuB_ref *a = npuB_test_output(L, 1), *b = npuB_test_output(L, 2);
  lua_pushboolean(L, a && b && a->g == b->g && a->id == b->id);
  return 1;
}

/* ---- Operation ---- */

static npuB_ref *check_operation(lua_State *L, int idx) {
  return npuB_checkudata(L, idx, NPUB_OPERATION);
}

static int l_operation_name(lua_State *L) {
  npuB_ref *r = check_operation(L, 1);
  lua_pushstring(L, npu_graph_node_name(r->g, r->id));
  return 1;
}

static int l_operation_type(lua_State *L) {
  npuB_ref *r = check_operation(L, 1);
  lua_pushstring(L, npu_graph_node_op(r->g, r->id));
  return 1;
}

static int l_operation_id(lua_State *L) {
  lua_pushinteger(L, check_operation(L, 1)->id);
  return 1;
}

static int l_operation_outputs(lua_State *L) {
  npuB_ref *r = check_operation(L, 1);
  int n = npu_graph_n_outputs(r->g, r->id);
  lua_getiuservalue(L, 1, 1);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    npuB_push_output(L, -2, npu_graph_output(r->g, r->id, i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_operation_inputs(lua_State *L) {
  npuB_ref *r = check_operation(L, 1);
  int n = npu_graph_n_inputs(r->g, r->id);
  lua_getiuservalue(L, 1, 1);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    npuB_push_output(L, -2, npu_graph_input(r->g, r->id, i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_operation_graph(lua_State *L) {
  check_operation(L, 1);
  lua_getiuservalue(L, 1, 1);
  return 1;
}

static int l_operation_tostring(lua_State *L) {
  npuB_ref *r = check_operation(L, 1);
  lua_pushfstring(L, "npu.Operation(\"%s\", op=%s)", npu_graph_node_name(r->g, r->id),
                  npu_graph_node_op(r->g, r->id));
  return 1;
}

static int l_operation_eq(lua_State *L) {
  npuB_ref *a = npuB_test_operation(L, 1), *b = npuB_test_operation(L, 2);
  lua_pushboolean(L, a && b && a->g == b->g && a->id == b->id);
  return 1;
}

/* core.op_list() -> { {name=, tf_type=, min_inputs=, max_inputs=, n_outputs=, kind=,
   precision_list=, args={...}}, ... }: npu_op_get_info's table, as a C host reads it. */
static int l_op_list(lua_State *L) {
  int count = npu_op_count();
  lua_createtable(L, count, 0);
  for (int i = 0; i < count; i++) {
    npu_op_info d;
    npu_op_get_info(i, &d); /* i is in range: cannot fail */
    lua_createtable(L, 0, 8);
    lua_pushstring(L, d.name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, d.tf_type);
    lua_setfield(L, -2, "tf_type");
    lua_pushinteger(L, d.min_inputs);
    lua_setfield(L, -2, "min_inputs");
    lua_pushinteger(L, d.max_inputs);
    lua_setfield(L, -2, "max_inputs");
    lua_pushinteger(L, d.n_outputs);
    lua_setfield(L, -2, "n_outputs");
    lua_pushstring(L, d.kind_name);
    lua_setfield(L, -2, "kind");
    lua_pushstring(L, d.precision_name);
    lua_setfield(L, -2, "precision_list");
    lua_newtable(L);
    if (d.args) {
      int k = 1;
      const char *s = d.args;
      while (*s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        lua_pushlstring(L, s, len);
        lua_rawseti(L, -2, k++);
        s += len + (e ? 1 : 0);
      }
    }
    lua_setfield(L, -2, "args");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

void npuB_open_graph(lua_State *L) {
  static const luaL_Reg graph_methods[] = {
      {"add_op", l_graph_add_op},
      {"output", l_graph_output},
      {"operation", l_graph_operation},
      {"n_outputs", l_graph_n_outputs},
      {"to_dot", l_graph_to_dot},
      {"get_tensor_by_name", l_graph_get_tensor_by_name},
      {"get_operation_by_name", l_graph_get_operation_by_name},
      {"n_nodes", l_graph_n_nodes},
      {"keep_dtype", l_graph_keep_dtype},
      {"keeps_dtype", l_graph_keeps_dtype},
      {"add_control", l_graph_add_control},
      {"region_begin", l_graph_region_begin},
      {"region_end", l_graph_region_end},
      {"region", l_graph_region},
      {"node_region", l_graph_node_region},
      {"set_exec_config", l_graph_set_exec_config},
      {"exec_config", l_graph_exec_config},
      {"add_variable", l_graph_add_variable},
      {"variables", l_graph_variables},
      {"variable_initializers", l_graph_variable_initializers},
      {"set_trainable", l_graph_set_trainable},
      {"is_trainable", l_graph_is_trainable},
      {NULL, NULL}};
  static const luaL_Reg output_methods[] = {
      {"name", l_output_name}, {"dtype", l_output_dtype}, {"shape", l_output_shape},
      {"op", l_output_op},     {"graph", l_output_graph}, {"index", l_output_index},
      {"id", l_output_id},     {NULL, NULL}};
  static const luaL_Reg operation_methods[] = {
      {"name", l_operation_name},       {"type", l_operation_type},
      {"outputs", l_operation_outputs}, {"inputs", l_operation_inputs},
      {"graph", l_operation_graph},     {"id", l_operation_id},
      {NULL, NULL}};
  /* Metatables carry their method table as __index; the facade adds methods to it. */
  luaL_newmetatable(L, NPUB_GRAPH);
  lua_pushcfunction(L, l_graph_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_graph_tostring);
  lua_setfield(L, -2, "__tostring");
  luaL_newlib(L, graph_methods);
  lua_setfield(L, -2, "__index");
  lua_setfield(L, -2, "Graph_mt");

  luaL_newmetatable(L, NPUB_OUTPUT);
  lua_pushcfunction(L, l_output_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, l_output_eq);
  lua_setfield(L, -2, "__eq");
  luaL_newlib(L, output_methods);
  lua_setfield(L, -2, "__index");
  lua_setfield(L, -2, "Output_mt");

  luaL_newmetatable(L, NPUB_OPERATION);
  lua_pushcfunction(L, l_operation_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, l_operation_eq);
  lua_setfield(L, -2, "__eq");
  luaL_newlib(L, operation_methods);
  lua_setfield(L, -2, "__index");
  lua_setfield(L, -2, "Operation_mt");

  lua_pushcfunction(L, l_graph_new);
  lua_setfield(L, -2, "graph_new");
  lua_pushcfunction(L, l_op_list);
  lua_setfield(L, -2, "op_list");
}
