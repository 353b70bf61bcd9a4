/*
 * l_options.c — npu.Options for Lua: a set of session option values (npu_options), the option
 * table as Lua tables, and the environment overlay with a Lua table as the environment.
 *
 * The userdata is a box holding one npu_options pointer (NULL until the core has made it; __gc
 * releases it and is safe on NULL), the layout l_session.c relies on.  Binding shape: check
 * arguments, create the box, call the core, raise last with npuB_raise.  No malloc here.
 *
 * Module functions: options_new(), options_check(o), option_list(), option_info(name),
 * option_env_list(), option_rules().  Methods: set_int/set_string/set_bool/set_float(name, v)
 * (typed, as parameter_map's .i/.s/.b/.f), set(name, v) (by the option's declared type),
 * get(name) -> value, was_set, is_set(name), values() -> {name = value} of the set options,
 * copy(), apply_env([tbl]), check().
 */
#include <string.h>

#include "bind.h"

static npu_options **check_box(lua_State *L, int idx) {
  return npuB_checkudata(L, idx, NPUB_OPTIONS);
}

static npu_options *check_options(lua_State *L, int idx) {
  npu_options **box = check_box(L, idx);
  if (!*box) npuB_fail(L, "npu.Options", NPU_ERR_STATE, "options not initialised");
  return *box;
}

/* Pushes a new box (NULL inside) with the metatable set. */
static npu_options **new_box(lua_State *L) {
  npu_options **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  luaL_setmetatable(L, NPUB_OPTIONS);
  return box;
}

static const char *type_letter(npu_option_type t) {
  static const char *const letters[] = {"i", "s", "b", "f"};
  return (unsigned)t < 4 ? letters[t] : "?";
}

static const char *type_noun(npu_option_type t) {
  static const char *const nouns[] = {"an int (.i)", "a string (.s)", "a bool (.b)",
                                      "a float (.f)"};
  return (unsigned)t < 4 ? nouns[t] : "?";
}

/* ---- lifecycle */

static int l_options_new(lua_State *L) {
  npu_options **box = new_box(L);
  npu_status st = npu_options_new(npuB_context(L), box);
  if (st) return npuB_raise(L, "npu.options_new", st);
  return 1;
}

static int l_options_gc(lua_State *L) {
  npu_options **box = check_box(L, 1);
  npu_options_release(*box);
  *box = NULL;
  return 0;
}

static int l_options_copy(lua_State *L) {
  npu_options *o = check_options(L, 1);
  npu_options **box = new_box(L);
  npu_status st = npu_options_copy(o, box);
  if (st) return npuB_raise(L, "npu.Options:copy", st);
  return 1;
}

/* ---- setters */

/* o:set_<type>(name, v) and o:set(name, v): value 3 checked as the type wants it, then the
   core's setter of that type (which checks the option's own type and range). */
static int set_as(lua_State *L, npu_option_type type, const char *who) {
  npu_options *o = check_options(L, 1);
  const char *name = npuB_checkstring(L, 2);
  npu_status st;
  switch (type) {
  case NPU_OPTION_INT: st = npu_options_set_int(o, name, (int64_t)npuB_checkinteger(L, 3)); break;
  case NPU_OPTION_STRING:
    npuB_checktype(L, 3, LUA_TSTRING); /* no number-to-string coercion: .s takes bytes */
    st = npu_options_set_string(o, name, lua_tostring(L, 3));
    break;
  case NPU_OPTION_BOOL:
    npuB_checktype(L, 3, LUA_TBOOLEAN);
    st = npu_options_set_bool(o, name, lua_toboolean(L, 3));
    break;
  default: st = npu_options_set_float(o, name, (double)npuB_checknumber(L, 3)); break;
  }
  if (st) return npuB_raise(L, who, st);
  lua_settop(L, 1);
  return 1;
}

static int l_set_int(lua_State *L) { return set_as(L, NPU_OPTION_INT, "npu.Options:set_int"); }
static int l_set_string(lua_State *L) {
  return set_as(L, NPU_OPTION_STRING, "npu.Options:set_string");
}
static int l_set_bool(lua_State *L) { return set_as(L, NPU_OPTION_BOOL, "npu.Options:set_bool"); }
static int l_set_float(lua_State *L) {
  return set_as(L, NPU_OPTION_FLOAT, "npu.Options:set_float");
}

/* o:set(name, v): by the option's declared type; the Lua type must match it. */
static int l_set(lua_State *L) {
  npu_options *o = check_options(L, 1);
  const char *name = npuB_checkstring(L, 2);
  const npu_option_info *info = npu_option_find(name);
  npu_status st;
  int ok = 1;
  npuB_checkany(L, 3);
  if (!info) {
    st = npu_options_set_int(o, name, 0); /* fails: the core's message suggests a name */
    return npuB_raise(L, "npu.Options:set", st ? st : NPU_ERR_INTERNAL);
  }
  switch (info->type) {
  case NPU_OPTION_INT: {
    int is_int = 0;
    lua_tointegerx(L, 3, &is_int); /* an integer, or a float with an integral value */
    ok = lua_type(L, 3) == LUA_TNUMBER && is_int;
    break;
  }
  case NPU_OPTION_STRING: ok = lua_type(L, 3) == LUA_TSTRING; break;
  case NPU_OPTION_BOOL: ok = lua_type(L, 3) == LUA_TBOOLEAN; break;
  case NPU_OPTION_FLOAT: ok = lua_type(L, 3) == LUA_TNUMBER; break;
  }
  if (!ok)
    return npuB_fail(L, "npu.Options:set", NPU_ERR_OPTION, "option '%s' takes %s, got %s", name,
                      type_noun(info->type), luaL_typename(L, 3));
  return set_as(L, info->type, "npu.Options:set"); /* the value's type is checked above */
}

/* ---- getters */

/* Pushes the value of option `name` (known) of o. */
static npu_status push_value(lua_State *L, const npu_options *o, const npu_option_info *info) {
  npu_status st = NPU_OK;
  switch (info->type) {
  case NPU_OPTION_INT: {
    int64_t v;
    if (!(st = npu_options_get_int(o, info->name, &v))) lua_pushinteger(L, (lua_Integer)v);
    break;
  }
  case NPU_OPTION_STRING: {
    const char *v;
    if (!(st = npu_options_get_string(o, info->name, &v))) lua_pushstring(L, v);
    break;
  }
  case NPU_OPTION_BOOL: {
    int v;
    if (!(st = npu_options_get_bool(o, info->name, &v))) lua_pushboolean(L, v);
    break;
  }
  case NPU_OPTION_FLOAT: {
    double v;
    if (!(st = npu_options_get_float(o, info->name, &v))) lua_pushnumber(L, v);
    break;
  }
  }
  return st;
}

/* o:get(name) -> value (set, else default), was_set */
static int l_get(lua_State *L) {
  npu_options *o = check_options(L, 1);
  const char *name = npuB_checkstring(L, 2);
  const npu_option_info *info = npu_option_find(name);
  npu_status st;
  if (!info) {
    st = npu_options_set_int(o, name, 0); /* fails with the unknown-name message */
    return npuB_raise(L, "npu.Options:get", st ? st : NPU_ERR_INTERNAL);
  }
  if ((st = push_value(L, o, info))) return npuB_raise(L, "npu.Options:get", st);
  lua_pushboolean(L, npu_options_is_set(o, name));
  return 2;
}

static int l_is_set(lua_State *L) {
  npu_options *o = check_options(L, 1);
  lua_pushboolean(L, npu_options_is_set(o, npuB_checkstring(L, 2)));
  return 1;
}

/* o:values() -> {name = value} of the options set (by a setter or the environment) */
static int l_values(lua_State *L) {
  npu_options *o = check_options(L, 1);
  lua_newtable(L);
  for (int i = 0; i < npu_option_count(); i++) {
    const npu_option_info *info = npu_option_at(i);
    if (!npu_options_is_set(o, info->name)) continue;
    if (push_value(L, o, info)) continue;
    lua_setfield(L, -2, info->name);
  }
  return 1;
}

static int l_tostring(lua_State *L) {
  npu_options **box = check_box(L, 1);
  luaL_Buffer b;
  int first = 1;
  if (!*box) {
    lua_pushliteral(L, "npu.Options(released)");
    return 1;
  }
  luaL_buffinit(L, &b);
  luaL_addstring(&b, "npu.Options{");
  for (int i = 0; i < npu_option_count(); i++) {
    const npu_option_info *info = npu_option_at(i);
    if (!npu_options_is_set(*box, info->name)) continue;
    if (!first) luaL_addstring(&b, ", ");
    first = 0;
    luaL_addstring(&b, info->name);
    luaL_addchar(&b, '=');
    if (push_value(L, *box, info)) {
      luaL_addstring(&b, "?");
      continue;
    }
    if (info->type == NPU_OPTION_STRING) {
      lua_pushfstring(L, "'%s'", lua_tostring(L, -1));
      lua_remove(L, -2);
    } else {
      luaL_tolstring(L, -1, NULL);
      lua_remove(L, -2);
    }
    luaL_addvalue(&b);
  }
  luaL_addchar(&b, '}');
  luaL_pushresult(&b);
  return 1;
}

/* ---- environment and rules */

typedef struct env_ctx {
  lua_State *L;
  int table; /* stack index of the environment table */
  int failed;
} env_ctx;

/* Runs under lua_pcall: (tbl, lightuserdata name) -> the string value or nil. */
static int env_lookup(lua_State *L) {
  const char *name = lua_touserdata(L, 2);
  lua_pushstring(L, name);
  lua_rawget(L, 1);
  if (lua_type(L, -1) == LUA_TNUMBER) lua_tolstring(L, -1, NULL); /* in place */
  else if (lua_type(L, -1) != LUA_TSTRING) lua_pushnil(L);
  return 1;
}

/* The getenv callback: values stay on the Lua stack (anchored) until apply_env returns. */
static const char *env_from_table(const char *name, void *ud) {
  env_ctx *ec = ud;
  lua_State *L = ec->L;
  if (ec->failed || !lua_checkstack(L, 4)) {
    ec->failed = 1;
    return NULL;
  }
  lua_pushcfunction(L, env_lookup);
  lua_pushvalue(L, ec->table);
  lua_pushlightuserdata(L, (void *)name);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
    lua_pop(L, 1);
    ec->failed = 1;
    return NULL;
  }
  if (lua_type(L, -1) != LUA_TSTRING) {
    lua_pop(L, 1);
    return NULL;
  }
  return lua_tostring(L, -1);
}

/* o:apply_env([tbl]): the environment overlay; tbl (name -> string) stands for the process
   environment (for tests and embedding hosts), nil reads getenv(). */
static int l_apply_env(lua_State *L) {
  npu_options *o = check_options(L, 1);
  npu_status st;
  if (lua_isnoneornil(L, 2)) {
    st = npu_options_apply_env(o, NULL, NULL);
  } else {
    env_ctx ec;
    int top;
    npuB_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    top = lua_gettop(L);
    ec.L = L;
    ec.table = 2;
    ec.failed = 0;
    st = npu_options_apply_env(o, env_from_table, &ec);
    lua_settop(L, top);
    if (ec.failed && st == NPU_OK)
      return npuB_fail(L, "npu.Options:apply_env", NPU_ERR_CALLBACK, "could not read the table");
  }
  if (st) return npuB_raise(L, "npu.Options:apply_env", st);
  lua_settop(L, 1);
  return 1;
}

static int l_check(lua_State *L) {
  npu_options *o = check_options(L, 1);
  npu_status st = npu_options_check(o);
  if (st) return npuB_raise(L, "npu.Options:check", st);
  npuB_flush_log(L); /* precedence warnings */
  lua_settop(L, 1);
  return 1;
}

/* ---- the tables */

static void set_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

static void push_info(lua_State *L, const npu_option_info *info) {
  lua_createtable(L, 0, 10);
  set_str(L, "name", info->name);
  set_str(L, "type", type_letter(info->type));
  set_str(L, "default", info->default_value);
  set_str(L, "allowed", info->allowed);
  set_str(L, "scenario", info->scenario);
  set_str(L, "section", info->section);
  set_str(L, "effect", info->effect);
  set_str(L, "example", info->example);
  lua_pushboolean(L, info->deprecated);
  lua_setfield(L, -2, "deprecated");
}

static int l_option_list(lua_State *L) {
  int n = npu_option_count();
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push_info(L, npu_option_at(i));
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* option_info(name) -> table, or nil and a message (with the nearest name) */
static int l_option_info(lua_State *L) {
  const char *name = npuB_checkstring(L, 1);
  const npu_option_info *info = npu_option_find(name);
  const char *s;
  if (info) {
    push_info(L, info);
    return 1;
  }
  lua_pushnil(L);
  if ((s = npu_option_suggest(name)) != NULL)
    lua_pushfstring(L, "unknown option '%s' (did you mean '%s'?)", name, s);
  else
    lua_pushfstring(L, "unknown option '%s'", name);
  lua_pushstring(L, s ? s : "");
  return 3;
}

static int l_option_env_list(lua_State *L) {
  int n = npu_option_env_count();
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    const npu_option_env_info *e = npu_option_env_at(i);
    lua_createtable(L, 0, 5);
    set_str(L, "variable", e->variable);
    set_str(L, "option", e->option);
    set_str(L, "type", type_letter(e->type));
    set_str(L, "allowed", e->allowed);
    set_str(L, "effect", e->effect);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_option_rules(lua_State *L) {
  int n = npu_option_rule_count();
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    const npu_option_rule_info *r = npu_option_rule_at(i);
    lua_createtable(L, 0, 11);
    set_str(L, "kind", r->kind);
    set_str(L, "a", r->a);
    set_str(L, "a_when", r->a_when);
    set_str(L, "a_values", r->a_values);
    set_str(L, "b", r->b);
    set_str(L, "b_when", r->b_when);
    set_str(L, "b_values", r->b_values);
    set_str(L, "guard", r->guard);
    set_str(L, "guard_when", r->guard_when);
    set_str(L, "guard_values", r->guard_values);
    set_str(L, "reason", r->reason);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

void npuB_open_options(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"set_int", l_set_int},   {"set_string", l_set_string}, {"set_bool", l_set_bool},
      {"set_float", l_set_float}, {"set", l_set},             {"get", l_get},
      {"is_set", l_is_set},     {"values", l_values},         {"copy", l_options_copy},
      {"apply_env", l_apply_env}, {"check", l_check},         {NULL, NULL}};
  static const luaL_Reg functions[] = {
      {"options_new", l_options_new},       {"options_check", l_check},
      {"option_list", l_option_list},       {"option_info", l_option_info},
      {"option_env_list", l_option_env_list}, {"option_rules", l_option_rules},
      {NULL, NULL}};
  luaL_newmetatable(L, NPUB_OPTIONS);
  lua_pushcfunction(L, l_options_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, -2, "__tostring");
  luaL_newlib(L, methods);
  lua_setfield(L, -2, "__index");
  lua_setfield(L, -2, "Options_mt");
  luaL_setfuncs(L, functions, 0);
}
