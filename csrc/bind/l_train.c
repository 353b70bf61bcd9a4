/*
 * l_train.c — the training entry points of the Lua binding: core.gradients (tf.gradients over
 * npu_graph_gradients).  The optimizers, losses and layers are Lua (lua/npu/train.lua,
 * lua/npu/nn_extra.lua) over the op table.
 */
#include "bind.h"

/* Reads list at idx of npu.Output of one graph into ids; *g is set from the first (or checked
   against it); leaves nothing on the stack.  allow_nil: missing entries (up to n) are -1. */
static void read_outputs(lua_State *L, int idx, const char *what, int n, int *ids, npu_graph **g,
                         int graph_owner, bool allow_nil) {
  for (int i = 0; i < n; i++) {
    lua_geti(L, idx, i + 1);
    if (allow_nil && lua_isnil(L, -1)) {
      ids[i] = -1;
      lua_pop(L, 1);
      continue;
    }
    npuB_ref *r = npuB_test_output(L, -1);
    if (!r) npuB_fail(L, NULL, NPU_ERR_ARG,
              "npu.gradients: %s[%d] is a %s, expected an npu.Output", what, i + 1,
                       luaL_typename(L, -1));
    if (!*g) {
      *g = r->g;
      lua_getiuservalue(L, -1, 1); /* the graph userdata, kept for pushing results */
      lua_replace(L, graph_owner);
    } else if (r->g != *g)
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "npu.gradients: %s[%d] belongs to another graph", what, i + 1);
    ids[i] = r->id;
    lua_pop(L, 1);
  }
}

/* core.gradients(ys, xs [, grad_ys]) -> { [i] = npu.Output or nil, n = #xs } */
static int l_gradients(lua_State *L) {
  npuB_checktype(L, 1, LUA_TTABLE);
  npuB_checktype(L, 2, LUA_TTABLE);
  bool have_gy = !lua_isnoneornil(L, 3);
  if (have_gy) npuB_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 3);
  int n_ys = (int)luaL_len(L, 1), n_xs = (int)luaL_len(L, 2);
  if (n_ys < 1) return npuB_fail(L, NULL, NPU_ERR_ARG, "npu.gradients: ys is empty");
  lua_pushnil(L); /* 4: the graph userdata */
  int *ys = lua_newuserdatauv(L, (size_t)(2 * n_ys + 2 * n_xs + 1) * sizeof(int), 0);
  int *gys = ys + n_ys, *xs = gys + n_ys, *dx = xs + n_xs;
  npu_graph *g = NULL;
  read_outputs(L, 1, "ys", n_ys, ys, &g, 4, false);
  read_outputs(L, 2, "xs", n_xs, xs, &g, 4, false);
  if (have_gy) read_outputs(L, 3, "grad_ys", n_ys, gys, &g, 4, true);
  npu_status st = npu_graph_gradients(g, n_ys, ys, have_gy ? gys : NULL, n_xs, xs, dx);
  if (st) return npuB_raise(L, "npu.gradients", st);
  lua_createtable(L, n_xs, 1);
  for (int i = 0; i < n_xs; i++) {
    if (dx[i] < 0) continue;
    npuB_push_output(L, 4, dx[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushinteger(L, n_xs);
  lua_setfield(L, -2, "n");
  return 1;
}

void npuB_open_train(lua_State *L) {
  static const luaL_Reg funcs[] = {{"gradients", l_gradients}, {NULL, NULL}};
  luaL_setfuncs(L, funcs, 0);
}
