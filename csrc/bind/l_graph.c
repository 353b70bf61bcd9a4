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
/***
Graphs, their values (Output) and nodes (Operation).
@module npu
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
/***
An output of a node, as an Output (TensorFlow's "name:i").
@function Graph:output
@within Class Graph
@tparam integer node the node id (g:add_op's result, op:id())
@tparam[opt=0] integer i the 0-based output index
@treturn Output
@raise NPU_ERR_ARG when the node has no output i
*/
static int l_graph_output(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  int node = (int)npuB_checkinteger(L, 2);
  int i = (int)npuB_optinteger(L, 3, 0);
  int v = npu_graph_output(g, node, i);
  if (v < 0) return npuB_fail(L, NULL, NPU_ERR_ARG, "node %d has no output %d", node, i);
  npuB_push_output(L, 1, v);
  return 1;
}

/***
The node with this id, as an Operation.
@function Graph:operation
@within Class Graph
@tparam integer node
@treturn Operation
@raise NPU_ERR_ARG when there is no such node
*/
static int l_graph_operation(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  int node = (int)npuB_checkinteger(L, 2);
  if (node < 0 || node >= npu_graph_n_nodes(g)) return npuB_fail(L, NULL, NPU_ERR_ARG,
            "no node %d", node);
  push_ref(L, 1, node, NPUB_OPERATION);
  return 1;
}

/***
How many outputs a node has.
@function Graph:n_outputs
@within Class Graph
@tparam integer node
@treturn integer
*/
static int l_graph_n_outputs(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  lua_pushinteger(L, npu_graph_n_outputs(g, (int)npuB_checkinteger(L, 2)));
  return 1;
}

/* g:to_dot() -> the graph as given, as Graphviz DOT text (npu_graph_to_dot in npu.h). */
/***
The graph as given (before any compilation), as Graphviz DOT text; npu.util.render_graph
draws it.
@function Graph:to_dot
@within Class Graph
@treturn string
*/
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

/***
The output called "node:i" (`tf.Graph.get_tensor_by_name`).
@function Graph:get_tensor_by_name
@within Class Graph
@tparam string name e.g. "dense/BiasAdd:0"
@treturn Output
@raise NPU_ERR_NOT_FOUND when no node has that name, or it has no such output
*/
static int l_graph_get_tensor_by_name(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  const char *name = npuB_checkstring(L, 2);
  int v;
  npu_status st = npu_graph_find_value(g, name, &v);
  if (st) return npuB_raise(L, "npu.Graph:get_tensor_by_name", st);
  npuB_push_output(L, 1, v);
  return 1;
}

/***
The node called name (`tf.Graph.get_operation_by_name`).
@function Graph:get_operation_by_name
@within Class Graph
@tparam string name
@treturn Operation
@raise NPU_ERR_NOT_FOUND when no node has that name
*/
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
/***
Marks the node producing a value to keep its graph dtypes under every precision mode (what
npu.util.keep_tensors_dtypes does by name).
@function Graph:keep_dtype
@within Class Graph
@tparam integer value an Output's id (output:id())
@raise NPU_ERR_ARG when there is no such value
*/
static int l_graph_keep_dtype(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npu_status st = npu_graph_keep_dtype(g, (int)npuB_checkinteger(L, 2));
  if (st) return npuB_raise(L, "npu.Graph:keep_dtype", st);
  return 0;
}

/***
Whether a node was marked with keep_dtype.
@function Graph:keeps_dtype
@within Class Graph
@tparam integer node
@treturn boolean
*/
static int l_graph_keeps_dtype(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  lua_pushboolean(L, npu_graph_keeps_dtype(g, (int)npuB_checkinteger(L, 2)));
  return 1;
}

/***
The number of nodes.
@function Graph:n_nodes
@within Class Graph
@treturn integer
*/
static int l_graph_n_nodes(lua_State *L) {
  lua_pushinteger(L, npu_graph_n_nodes(npuB_check_graph(L, 1)));
  return 1;
}

/***
Adds a control dependency: node runs after dep (TensorFlow's `control_inputs`).
@function Graph:add_control
@within Class Graph
@tparam integer node
@tparam integer dep
@raise NPU_ERR_ARG when either id is not a node, or dep was not created before node
*/
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

/***
Adds a variable initialised from a value of the graph (npu_graph_add_variable): the C form
Graph:variable builds on (that one also takes tensors and tables, and applies name scopes).
@function Graph:add_variable
@within Class Graph
@tparam Output initial a value of this graph, its shape fully known
@tparam[opt="Variable"] string name
@treturn Output the variable
@raise NPU_ERR_ARG when initial is of another graph or its shape is not fully known
*/
static int l_graph_add_variable(lua_State *L) {
  static const char where[] = "npu.Graph:variable";
  npu_graph *g = npuB_check_graph(L, 1);
  int init = check_value_of(L, g, 2, where, "the initial value");
  const char *name = npuB_optstring(L, 3, NULL);
  npuB_check_no_more(L, 3);
  int v;
  npu_status st = npu_graph_add_variable(g, name, init, &v);
  if (st) return npuB_raise_node(L, where, st, name, "variable");
  npuB_push_output(L, 1, v);
  return 1;
}

/***
The graph's variables, in creation order: those of Graph:variable, an imported graph's
VariableV2 nodes and a C host's (Graph:global_variables is the TensorFlow-named form).
@function Graph:variables
@within Class Graph
@tparam[opt=false] boolean trainable_only only the trainable ones
@treturn {Output,...}
*/
static int l_graph_variables(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  if (!lua_isnoneornil(L, 2)) npuB_checktype(L, 2, LUA_TBOOLEAN); /* not a truthy string */
  npuB_check_no_more(L, 2);
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

/***
The node ids of the variables' initializers (of those that have one), in creation order.
@function Graph:variable_initializers
@within Class Graph
@treturn {integer,...}
*/
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

/***
Puts a variable in the default var_list of optimizers, or takes it out.
@function Graph:set_trainable
@within Class Graph
@tparam Output v a variable of this graph
@tparam boolean flag
@raise NPU_ERR_ARG when v is not a variable of this graph
*/
static int l_graph_set_trainable(lua_State *L) {
  static const char where[] = "npu.Graph:set_trainable";
  npu_graph *g = npuB_check_graph(L, 1);
  int i = check_variable(L, g, 2, where);
  npuB_checktype(L, 3, LUA_TBOOLEAN); /* a forgotten flag is not false */
  npuB_check_no_more(L, 3);
  npu_status st = npu_graph_set_variable_trainable(g, i, lua_toboolean(L, 3));
  if (st) return npuB_raise(L, where, st);
  return 0;
}

/***
Whether a variable is trainable (in optimizers' default var_list).
@function Graph:is_trainable
@within Class Graph
@tparam Output v a variable of this graph
@treturn boolean
@raise NPU_ERR_ARG when v is not a variable of this graph
*/
static int l_graph_is_trainable(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npu_variable_info vi;
  int i = check_variable(L, g, 2, "npu.Graph:is_trainable");
  npuB_check_no_more(L, 2);
  npu_graph_variable_info(g, i, &vi);
  lua_pushboolean(L, vi.trainable);
  return 1;
}

/* g:region_begin() -> region id; g:region_end(id); g:region() -> the current one (0: top);
   g:node_region(node).  The facade's npu.cond / npu.while_loop build their branches and
   bodies between them (lua/npu/control.lua). */
/***
Opens a region: nodes added until region_end belong to it (the branches of npu.cond and the
bodies of npu.while_loop are built in regions).
@function Graph:region_begin
@within Class Graph
@treturn integer the region id
*/
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

/***
Closes the innermost open region.
@function Graph:region_end
@within Class Graph
@tparam integer region the id region_begin gave
@raise NPU_ERR_STATE when region is not the innermost open one
*/
static int l_graph_region_end(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  npu_status st = npu_graph_region_end(g, check_id(L, 2));
  if (st) return npuB_raise(L, "npu.Graph:region_end", st);
  return 0;
}

/***
The region nodes are added to now (0: the top level).
@function Graph:region
@within Class Graph
@treturn integer
*/
static int l_graph_region(lua_State *L) {
  lua_pushinteger(L, npu_graph_region(npuB_check_graph(L, 1)));
  return 1;
}

/***
The region a node belongs to (0: the top level; -1: no such node).
@function Graph:node_region
@within Class Graph
@tparam integer node
@treturn integer
*/
static int l_graph_node_region(lua_State *L) {
  npu_graph *g = npuB_check_graph(L, 1);
  lua_Integer node = npuB_checkinteger(L, 2);
  lua_pushinteger(L, npu_graph_node_region(g, node < 0 || node > INT_MAX ? -1 : (int)node));
  return 1;
}

/* g:set_exec_config(node, options or nil): the node's graph-level options (the facade's
   npu.util.set_graph_exec_config builds the npu.Options). */
/***
Sets (or with nil clears) the session options a node carries: runs that reach it compile
with them over the session's (npu.util.set_graph_exec_config builds them from TensorFlow's
parameters).
@function Graph:set_exec_config
@within Class Graph
@tparam integer node
@tparam[opt] userdata options an npu.Options, or nil
*/
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
/***
The options a node carries (set with set_exec_config), as a new npu.Options.
@function Graph:exec_config
@within Class Graph
@tparam integer node
@treturn ?userdata an npu.Options, or nil when the node carries none
*/
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

/***
The output's name, "node:i" (`tf.Tensor.name`).
@function Output:name
@within Class Output
@treturn string
*/
static int l_output_name(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  int node = npu_graph_value_node(r->g, r->id);
  lua_pushfstring(L, "%s:%d", npu_graph_node_name(r->g, node), npu_graph_value_index(r->g, r->id));
  return 1;
}

/***
The output's dtype (`tf.Tensor.dtype`).
@function Output:dtype
@within Class Output
@treturn string "float32", ...
*/
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

/***
The output's static shape (`tf.Tensor.shape`): dims known when the graph was built, -1 for
unknown ones; a list that prints as `{-1, 10}` and compares by value.
@function Output:shape
@within Class Output
@treturn ?table the dims, or nil when even the rank is unknown
*/
static int l_output_shape(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  push_shape(L, npu_graph_value_ndim(r->g, r->id), npu_graph_value_shape(r->g, r->id));
  return 1;
}

/***
The node that produces this output (`tf.Tensor.op`).
@function Output:op
@within Class Output
@treturn Operation
*/
static int l_output_op(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  lua_getiuservalue(L, 1, 1);
  push_ref(L, -1, npu_graph_value_node(r->g, r->id), NPUB_OPERATION);
  return 1;
}

/***
The graph the output belongs to (`tf.Tensor.graph`).
@function Output:graph
@within Class Output
@treturn Graph
*/
static int l_output_graph(lua_State *L) {
  check_output(L, 1);
  lua_getiuservalue(L, 1, 1);
  return 1;
}

/***
Which output of its node this is, from 0 (`tf.Tensor.value_index`).
@function Output:index
@within Class Output
@treturn integer
*/
static int l_output_index(lua_State *L) {
  npuB_ref *r = check_output(L, 1);
  lua_pushinteger(L, npu_graph_value_index(r->g, r->id));
  return 1;
}

/***
The value's id in its graph (what Graph:keep_dtype takes).
@function Output:id
@within Class Output
@treturn integer
*/
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

/***
The node's name (`tf.Operation.name`).
@function Operation:name
@within Class Operation
@treturn string
*/
static int l_operation_name(lua_State *L) {
  npuB_ref *r = check_operation(L, 1);
  lua_pushstring(L, npu_graph_node_name(r->g, r->id));
  return 1;
}

/***
The node's op, as the op table names it ("matmul", "no_op", ...; `tf.Operation.type` gives
TensorFlow's name, which docs/ops.md lists beside it).
@function Operation:type
@within Class Operation
@treturn string
*/
static int l_operation_type(lua_State *L) {
  npuB_ref *r = check_operation(L, 1);
  lua_pushstring(L, npu_graph_node_op(r->g, r->id));
  return 1;
}

/***
The node's id in its graph (what Graph:output, Graph:add_control take).
@function Operation:id
@within Class Operation
@treturn integer
*/
static int l_operation_id(lua_State *L) {
  lua_pushinteger(L, check_operation(L, 1)->id);
  return 1;
}

/***
The node's outputs (`tf.Operation.outputs`).
@function Operation:outputs
@within Class Operation
@treturn {Output,...}
*/
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

/***
The values the node takes (`tf.Operation.inputs`).
@function Operation:inputs
@within Class Operation
@treturn {Output,...}
*/
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

/***
The graph the node belongs to (`tf.Operation.graph`).
@function Operation:graph
@within Class Operation
@treturn Graph
*/
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
