/*
 * bind.h — shared pieces of the Lua binding (the only code that includes lua.h).
 *
 * Every binding function has the same shape: check arguments first (these may raise while we
 * own nothing); create the result userdata before acquiring anything (its __gc is safe on a
 * NULL handle); call the core (which never jumps); put the handle in the box at once; raise last
 * with npuB_raise.  No malloc in binding code.
 *
 * Each lua_State that loads the module gets one npu_context, kept in the registry; its __gc
 * releases it (objects created from it keep it alive through their own references).
 */
#ifndef NPU_BIND_H
#define NPU_BIND_H

#include <stdbool.h>

#include <lauxlib.h>
#include <lua.h>

#include "npu.h" /* the public API alone: a C host can do whatever this binding does */

/* Metatable names: "npu.Tensor expected" reads well in luaL_checkudata's message. */
#define NPUB_TENSOR "npu.Tensor"
#define NPUB_GRAPH "npu.Graph"
#define NPUB_OUTPUT "npu.Output"
#define NPUB_SESSION "npu.Session"
#define NPUB_OPTIONS "npu.Options"

/* The context of this lua_State (created by luaopen_npu_core). */
npu_context *npuB_context(lua_State *L);
/* The one raising path (lbind.c): each raises an npu.Error object {code, number, message,
   where, node, op, position, text} whose tostring is "<user's file:line>: <text>".  None
   returns.
   npuB_raise: text "<where>: NPU_ERR_X: <context message>".
   npuB_raise_node: the same, naming the node and op (NULL: unknown).
   npuB_fail: the message formatted here (lua_pushfstring's formats); text "<where>: NPU_ERR_X:
   <message>", or the message alone when where is NULL (argument errors that name their
   function themselves). */
int npuB_raise(lua_State *L, const char *where, npu_status status);
/* Pushes text the library handed over (npu_free on ctx) as a Lua string and frees it, also
   when pushing fails (the memory error is raised after the free).  Returns 1. */
int npuB_push_owned_string(lua_State *L, npu_context *ctx, char *text);
int npuB_raise_node(lua_State *L, const char *where, npu_status status, const char *node,
                    const char *op);
int npuB_fail(lua_State *L, const char *where, npu_status status, const char *fmt, ...);
/* Hands the core's queued log messages (warnings of a run, of a session's options, of writer
   threads) to the Lua handler (core.set_log_handler), through lua_pcall.  Call it after a core
   call that may log; cheap when nothing is queued (one atomic load). */
void npuB_flush_log(lua_State *L);
/* lauxlib's argument checks, raising through the same path (an npu.Error, NPU_ERR_ARG, with
   lauxlib's text: "bad argument #2 to 'run' (npu.Tensor expected, got nil)"). */
int npuB_argerror(lua_State *L, int arg, const char *extramsg);
int npuB_typeerror(lua_State *L, int arg, const char *tname);
void *npuB_checkudata(lua_State *L, int arg, const char *tname);
lua_Integer npuB_checkinteger(lua_State *L, int arg);
lua_Number npuB_checknumber(lua_State *L, int arg);
const char *npuB_checklstring(lua_State *L, int arg, size_t *len);
void npuB_checktype(lua_State *L, int arg, int t);
void npuB_checkany(lua_State *L, int arg);
/* Raises "bad argument #n+1 to 'f' (no argument expected here, got T)" when more than n
   arguments were given: for functions that take none (or n), so an options table a user
   thought they took is not silently ignored. */
void npuB_check_no_more(lua_State *L, int n);
lua_Integer npuB_optinteger(lua_State *L, int arg, lua_Integer def);
lua_Number npuB_optnumber(lua_State *L, int arg, lua_Number def);
const char *npuB_optlstring(lua_State *L, int arg, const char *def, size_t *len);
#define npuB_checkstring(L, arg) npuB_checklstring(L, (arg), NULL)
#define npuB_optstring(L, arg, def) npuB_optlstring(L, (arg), (def), NULL)

/* Tensors (l_tensor.c). */
typedef struct npuB_tensor_box {
  npu_tensor *t; /* NULL only while being filled or after a failed fill */
} npuB_tensor_box;
/* The tensor at idx, or raises "npu.Tensor expected". */
npu_tensor *npuB_check_tensor(lua_State *L, int idx);
/* The tensor at idx, or NULL when it is not an npu.Tensor. */
npu_tensor *npuB_test_tensor(lua_State *L, int idx);
/* Pushes a new empty box (with the metatable) to fill: create it before acquiring the tensor. */
npuB_tensor_box *npuB_new_tensor_box(lua_State *L);
/* Pushes an npu.Tensor userdata holding a NEW reference to t (retained here). */
void npuB_push_tensor(lua_State *L, npu_tensor *t);
/* Converts the value at idx (an npu.Tensor, a number, a boolean or nested tables) to a
   tensor: an npu.Tensor is retained and returned as is when dtype is -1 or matches, else cast;
   tables and numbers are converted to `dtype` (-1: float32).  Pushes the npu.Tensor holding
   the result (so it is owned by the Lua stack and nothing leaks if a later check raises), and
   returns the borrowed tensor.  Raises, naming `what`, on ragged or non-numeric input. */
npu_tensor *npuB_to_tensor(lua_State *L, int idx, int dtype, const char *what);

/* Graphs (l_graph.c).  An npu.Output is one value of a graph, an npu.Operation one node; both
   keep their npu.Graph userdata alive as user value 1. */
#define NPUB_OPERATION "npu.Operation"
typedef struct npuB_graph_box {
  npu_graph *g;
} npuB_graph_box;
typedef struct npuB_ref {
  npu_graph *g; /* borrowed: user value 1 holds the graph */
  int id;       /* value id (Output) or node id (Operation) */
} npuB_ref;
npu_graph *npuB_check_graph(lua_State *L, int idx);
npuB_ref *npuB_test_output(lua_State *L, int idx);
npuB_ref *npuB_test_operation(lua_State *L, int idx);
/* Pushes an npu.Output for value id of the graph whose userdata is at graph_idx. */
void npuB_push_output(lua_State *L, int graph_idx, int value);

/* Each area adds its functions and metatables to the module table at the top of the stack. */
void npuB_open_tensor(lua_State *L);
void npuB_open_graph(lua_State *L);
void npuB_open_session(lua_State *L);
void npuB_open_options(lua_State *L);
void npuB_open_io(lua_State *L);
void npuB_open_train(lua_State *L);
void npuB_open_data(lua_State *L);
void npuB_open_summary(lua_State *L);

#endif
