/*
 * l_tensor.c — npu.Tensor: the Lua face of npu_tensor, and the tensor constructors.
 *
 * A tensor is a full userdata (npuB_tensor_box) holding one reference to an npu_tensor; __gc
 * and __close drop it (both are safe on a NULL handle, and a closed tensor raises
 * "npu.Tensor is closed" when used).  Tensors are immutable from Lua, so astype to the same
 * dtype and npu.tensor(t) give a new userdata sharing the same C tensor.
 *
 * Module functions (added to the table at the top of the stack by npuB_open_tensor):
 *   tensor(data [, dtype])     nested tables / numbers / booleans -> tensor; the shape comes
 *                              from the nesting (ragged input raises, naming the path).
 *                              dtype defaults to float32 for numbers (TensorFlow's float
 *                              default; integers too: pass "int64" to keep them exact) and
 *                              bool when every element is a boolean.  Integer dtypes take only
 *                              integral values within range (no silent truncation: use
 *                              astype for that); booleans convert to 1/0.
 *   zeros(shape [, dtype]), ones(shape [, dtype]), fill(shape, value [, dtype])
 *                              shape: a table of dims ({} = scalar) or one integer (1-D).
 *   range([start,] limit [, delta [, dtype]])
 *                              like tf.range: start + i*delta while < limit (> for delta < 0);
 *                              int32 when every argument is an integer, else float32; values
 *                              computed in double (or exact int64) and rounded once.
 *   random_normal(shape, {mean=0, stddev=1, seed=, dtype="float32"})
 *   random_uniform(shape, {minval=0, maxval=1, seed=, dtype="float32"})
 *                              seed is required (explicit seeds make runs reproducible);
 *                              unknown option keys raise.  The generator is in core/random.c.
 *   load(path)                 reads a .npy file; raises on every error (a missing file is
 *                              NPU_ERR_IO, a malformed one NPU_ERR_FORMAT), for consistency
 *                              with the rest of the module.
 *   allclose(a, b [, rtol=1e-5 [, atol=1e-8 [, equal_nan=false]]])
 *                              NumPy's rule |a - b| <= atol + rtol * |b| elementwise; NaN is
 *                              never close unless equal_nan; infinities only to themselves.
 *                              a and b are tensors, numbers or nested tables of equal shapes.
 *   is_tensor(v)               true for a (possibly closed) npu.Tensor.
 *   Tensor                     the method table (string keys of t[...] look there); the Lua
 *                              facade may add methods to it.
 *   Tensor_mt                  the metatable (its __index is a function: integer keys index).
 * Methods: shape() (a new table), dtype() ("float32", ...), ndim(), numel(), totable()
 *   (nested tables; a rank-0 tensor gives a plain value; integers as Lua integers, exactly;
 *   bool as booleans), item() (single-element tensors only), astype(dtype), reshape(shape)
 *   (one dim may be -1), save(path), get(i, j, ...) (one 1-based index per dim, negative
 *   counts from the end; returns the element).
 * Indexing: t[i] (1-based, negative from the end) on a rank-1 tensor returns the element; on a
 *   rank > 1 tensor it returns row i as a new tensor of rank - 1 (a copy); a rank-0 tensor
 *   cannot be indexed (use item()).  Out of range raises, naming the index and the dim.
 *   #t is the size of the first dim.  == is identity.  tostring(t) reads
 *   "npu.Tensor(float32, [2,3]): [[1, 2, 3], [4, 5, 6]]", at most 6 leading values per dim
 *   and ~1000 values in all, "..." marking what is left out.
 *
 * Invariants: arguments are checked (and may raise) before anything is acquired; results are
 * boxed before the core call; errors from the core are raised last through npuB_raise.  No
 * malloc here: nested tables are walked once to find and check the shape, then the tensor is
 * created and filled directly.  Large tensors step the Lua GC by their size, so Lua knows the
 * C memory its small userdata hold.
 */
/***
Tensors: values on the host, the inputs and results of sessions.
@module npu
*/

/***
Makes a tensor from a number, a boolean or nested tables (the shape comes from the nesting).
Mirrors `tf.constant`'s value conversion / `np.array`.
@function npu.tensor
@tparam number|boolean|table|Tensor data a value, nested tables of equal lengths, or a
  tensor (a new handle on the same data)
@tparam[opt] string dtype "float32" (the default for numbers, integers included), "float16",
  "bfloat16", "float64", "int8", "uint8", "int32", "int64" or "bool" (the default when every
  element is a boolean)
@treturn Tensor
@raise NPU_ERR_ARG for ragged tables (naming the path), an unknown dtype, or a value an
  integer dtype cannot hold exactly (use `astype` to truncate)
@usage local t = npu.tensor({{1, 2, 3}, {4, 5, 6}})   -- float32, shape {2, 3}
local i = npu.tensor(7, "int64")
*/

/***
A tensor of zeros (`tf.zeros`).
@function npu.zeros
@tparam table|integer shape a list of dims (`{}` for a scalar) or one integer (rank 1)
@tparam[opt="float32"] string dtype
@treturn Tensor
@usage local b = npu.zeros({10})
*/

/***
A tensor of ones (`tf.ones`).
@function npu.ones
@tparam table|integer shape a list of dims or one integer
@tparam[opt="float32"] string dtype
@treturn Tensor
*/

/***
A tensor every element of which is `value` (`tf.fill`).
@function npu.fill
@tparam table|integer shape a list of dims or one integer
@tparam number|boolean value must fit dtype exactly
@tparam[opt="float32"] string dtype
@treturn Tensor
@raise NPU_ERR_ARG when value does not fit dtype
*/

/***
A tensor of normally distributed values (`tf.random.normal`), reproducible from its seed.
@function npu.random.normal
@tparam table|integer shape
@tparam table opts `mean` (0), `stddev` (1), `seed` (required), `dtype` ("float32");
  an unknown key raises
@treturn Tensor
@usage local w = npu.random.normal({784, 10}, {stddev = 0.05, seed = 1})
*/

/***
A tensor of uniformly distributed values in [minval, maxval) (`tf.random.uniform`).
@function npu.random.uniform
@tparam table|integer shape
@tparam table opts `minval` (0), `maxval` (1), `seed` (required), `dtype` ("float32")
@treturn Tensor
*/

/***
Reads a `.npy` file (NumPy's format) into a tensor.
@function npu.load
@tparam string path
@treturn Tensor
@raise NPU_ERR_IO when the file cannot be read, NPU_ERR_FORMAT when it is not a `.npy` file
  of a supported dtype
*/

/***
Whether two values are equal within tolerances, as `numpy.allclose`:
|a - b| <= atol + rtol * |b| elementwise; NaN is close to nothing unless equal_nan, and an
infinity only to itself.
@function npu.allclose
@tparam Tensor|number|table a
@tparam Tensor|number|table b of a's shape
@tparam[opt=1e-5] number rtol
@tparam[opt=1e-8] number atol
@tparam[opt=false] boolean equal_nan
@treturn boolean
@raise NPU_ERR_SHAPE when the shapes differ
*/

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bind.h"

#define PRINT_PER_DIM 6
#define PRINT_BUDGET 1000
#define GC_STEP_BYTES ((size_t)64 * 1024)

static const char DTYPE_LIST[] =
    "float32, float16, bfloat16, float64, int8, uint8, int32, int64, bool";

/* ---- boxes -------------------------------------------------------------------------------- */

static int tensor_gc(lua_State *L) {
  npuB_tensor_box *box = npuB_checkudata(L, 1, NPUB_TENSOR);
  npu_tensor_release(box->t);
  box->t = NULL;
  return 0;
}

npu_tensor *npuB_check_tensor(lua_State *L, int idx) {
  npuB_tensor_box *box = npuB_checkudata(L, idx, NPUB_TENSOR);
  if (!box->t) npuB_argerror(L, idx, "npu.Tensor is closed");
  return box->t;
}

npu_tensor *npuB_test_tensor(lua_State *L, int idx) {
  npuB_tensor_box *box = luaL_testudata(L, idx, NPUB_TENSOR);
  return box ? box->t : NULL;
}

npuB_tensor_box *npuB_new_tensor_box(lua_State *L) {
  npuB_tensor_box *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->t = NULL;
  luaL_setmetatable(L, NPUB_TENSOR);
  return box;
}

void npuB_push_tensor(lua_State *L, npu_tensor *t) {
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  box->t = npu_tensor_retain(t);
}

/* After a box got its tensor: tell the collector about the C memory behind it (unless the
 * host stopped the collector: LUA_GCSTEP would run it anyway). */
static void gc_account(lua_State *L, const npu_tensor *t) {
  if (t && npu_tensor_nbytes(t) >= GC_STEP_BYTES && lua_gc(L, LUA_GCISRUNNING) == 1) {
    size_t kb = npu_tensor_nbytes(t) / 1024;
    lua_gc(L, LUA_GCSTEP, kb > 1000000 ? 1000000 : (int)kb);
  }
}

/* Finishes a constructor: raise on failure, else account for the memory; the box stays on
 * top of the stack. */
static int finish(lua_State *L, const char *where, npu_status st, npuB_tensor_box *box) {
  if (st) return npuB_raise(L, where, st);
  gc_account(L, box->t);
  return 1;
}

/* ---- argument helpers --------------------------------------------------------------------- */

static int opt_dtype(lua_State *L, int idx, int def, const char *where) {
  if (lua_isnoneornil(L, idx)) return def;
  if (lua_type(L, idx) != LUA_TSTRING)
    return npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: dtype must be a string (%s), got %s", where, DTYPE_LIST,
                      luaL_typename(L, idx));
  const char *name = lua_tostring(L, idx);
  int d = npu_dtype_from_name(name);
  if (d < 0) return npuB_fail(L, NULL, NPU_ERR_DTYPE,
            "%s: unknown dtype '%s' (%s)", where, name, DTYPE_LIST);
  return d;
}

/* An integer from a Lua integer or an integral float; raises otherwise. */
static int64_t check_int(lua_State *L, int idx, const char *where, const char *what) {
  int ok;
  lua_Integer v = lua_tointegerx(L, idx, &ok);
  if (!ok || lua_type(L, idx) != LUA_TNUMBER)
    npuB_fail(L, NULL, NPU_ERR_ARG, "%s: %s must be an integer, got %s", where, what,
               lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx) : luaL_typename(L, idx));
  return (int64_t)v;
}

/* A shape: one integer (rank 1) or a table of integers ({} = rank 0).  allow_infer admits
 * one -1.  Returns ndim. */
static int check_shape(lua_State *L, int idx, const char *where, int64_t *shape,
                       int allow_infer) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    shape[0] = check_int(L, idx, where, "shape");
    if (shape[0] < 0 && !(allow_infer && shape[0] == -1))
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: shape must be >= 0, got %I", where, (lua_Integer)shape[0]);
    return 1;
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    return npuB_fail(L, NULL, NPU_ERR_ARG, "%s: shape must be a table of integers, got %s", where,
                      luaL_typename(L, idx));
  lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
  if (n > NPU_MAX_DIMS)
    return npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: shape has %d dims, at most %d are supported", where, (int)n,
                      NPU_MAX_DIMS);
  int inferred = 0;
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, i);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok || lua_type(L, -1) != LUA_TNUMBER)
      return npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: shape[%d] must be an integer, got %s", where, (int)i,
                        lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1)
                                                       : luaL_typename(L, -1));
    lua_pop(L, 1);
    if (v == -1 && allow_infer) {
      if (inferred++)
        return npuB_fail(L, NULL, NPU_ERR_ARG, "%s: only one dimension may be -1", where);
    } else if (v < 0) {
      return npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: shape[%d] must be >= 0, got %I", where, (int)i, v);
    }
    shape[i - 1] = (int64_t)v;
  }
  return (int)n;
}

/* ---- Lua values -> tensor ----------------------------------------------------------------- */

typedef struct conv {
  lua_State *L;
  const char *where;
  int dtype; /* -1 while inferring */
  int ndim;
  int64_t shape[NPU_MAX_DIMS];
  int64_t path[NPU_MAX_DIMS]; /* 1-based index at each depth of the element being visited */
  int64_t n_bool, n_num;
  char *dst;
  size_t esize;
} conv;

static const char *path_str(const conv *c, int depth, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < depth && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "[%lld]", (long long)c->path[i]);
  if (depth == 0) snprintf(buf, size, "the top level");
  return buf;
}

static int is_int_dtype(int d) {
  return d == NPU_DTYPE_I8 || d == NPU_DTYPE_U8 || d == NPU_DTYPE_I32 || d == NPU_DTYPE_I64;
}

static void int_range(int d, int64_t *lo, int64_t *hi) {
  switch (d) {
  case NPU_DTYPE_I8: *lo = INT8_MIN, *hi = INT8_MAX; break;
  case NPU_DTYPE_U8: *lo = 0, *hi = UINT8_MAX; break;
  case NPU_DTYPE_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
  default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

/* Checks that the number at idx fits integer dtype d exactly; returns NULL or a reason. */
static const char *int_misfit(lua_State *L, int idx, int d) {
  int64_t lo, hi, v;
  int_range(d, &lo, &hi);
  if (lua_isinteger(L, idx)) {
    v = (int64_t)lua_tointeger(L, idx);
  } else {
    double x = lua_tonumber(L, idx);
    if (x != floor(x) || !isfinite(x)) return "is not an integer";
    if (!(x >= -0x1p63 && x < 0x1p63)) return "is out of range";
    v = (int64_t)x;
  }
  return v < lo || v > hi ? "is out of range" : NULL;
}

/* Visits the value on top of the stack at `depth`, checking it against the inferred shape. */
static void conv_check(conv *c, int depth) {
  lua_State *L = c->L;
  char pb[NPU_MAX_DIMS * 24 + 16];
  int type = lua_type(L, -1);
  if (depth < c->ndim) {
    if (type != LUA_TTABLE)
      npuB_fail(L, NULL, NPU_ERR_SHAPE,
                "%s: ragged at %s: expected a table of %d elements, got a %s", c->where,
                 path_str(c, depth, pb, sizeof pb), (int)c->shape[depth], lua_typename(L, type));
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    if (n != c->shape[depth])
      npuB_fail(L, NULL, NPU_ERR_SHAPE, "%s: ragged at %s: expected %d elements, got %d", c->where,
                 path_str(c, depth, pb, sizeof pb), (int)c->shape[depth], (int)n);
    luaL_checkstack(L, 4, "npu.tensor: nesting");
    for (lua_Integer i = 1; i <= n; i++) {
      c->path[depth] = i;
      lua_rawgeti(L, -1, i);
      conv_check(c, depth + 1);
      lua_pop(L, 1);
    }
    return;
  }
  if (type == LUA_TBOOLEAN) {
    c->n_bool++;
  } else if (type == LUA_TNUMBER) {
    c->n_num++;
    const char *why = is_int_dtype(c->dtype) ? int_misfit(L, -1, c->dtype) : NULL;
    if (why)
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: element %s = %s %s for %s (use astype to truncate or wrap)", c->where,
                 path_str(c, depth, pb, sizeof pb), lua_tostring(L, -1), why,
                 npu_dtype_name((npu_dtype)c->dtype));
  } else if (type == LUA_TTABLE) {
    npuB_fail(L, NULL, NPU_ERR_SHAPE, "%s: ragged at %s: expected a number, got a table", c->where,
               path_str(c, depth, pb, sizeof pb));
  } else {
    npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: element %s is a %s, expected a number or a boolean", c->where,
               path_str(c, depth, pb, sizeof pb), lua_typename(L, type));
  }
}

/* Writes the number or boolean at idx as one element of dtype d at dst (already checked). */
static void store_leaf(lua_State *L, int idx, int d, void *dst) {
  if (lua_type(L, idx) == LUA_TBOOLEAN) {
    uint8_t b = (uint8_t)lua_toboolean(L, idx);
    npu_dtype_convert(NPU_DTYPE_BOOL, &b, (npu_dtype)d, dst, 1);
  } else if (lua_isinteger(L, idx)) {
    int64_t i = (int64_t)lua_tointeger(L, idx);
    npu_dtype_convert(NPU_DTYPE_I64, &i, (npu_dtype)d, dst, 1);
  } else {
    double x = lua_tonumber(L, idx);
    npu_dtype_convert(NPU_DTYPE_F64, &x, (npu_dtype)d, dst, 1);
  }
}

static void conv_fill(conv *c, int depth) {
  lua_State *L = c->L;
  if (depth < c->ndim) {
    /* The tables were checked; a finalizer run by the allocation in between could still have
     * changed them, so check the cheap things again rather than trust them. */
    if (lua_type(L, -1) != LUA_TTABLE || (int64_t)lua_rawlen(L, -1) != c->shape[depth])
      npuB_fail(L, NULL, NPU_ERR_ARG, "%s: the input changed during conversion", c->where);
    for (lua_Integer i = 1; i <= c->shape[depth]; i++) {
      lua_rawgeti(L, -1, i);
      conv_fill(c, depth + 1);
      lua_pop(L, 1);
    }
    return;
  }
  int type = lua_type(L, -1);
  if (type != LUA_TNUMBER && type != LUA_TBOOLEAN)
    npuB_fail(L, NULL, NPU_ERR_ARG, "%s: the input changed during conversion", c->where);
  store_leaf(L, -1, c->dtype, c->dst);
  c->dst += c->esize;
}

/* Converts the number, boolean or nested table at idx; pushes the new tensor's box. */
static npu_tensor *convert_lua(lua_State *L, int idx, int dtype, const char *where) {
  idx = lua_absindex(L, idx);
  int type = lua_type(L, idx);
  if (type != LUA_TNUMBER && type != LUA_TBOOLEAN && type != LUA_TTABLE)
    npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: expected an npu.Tensor, a number, a boolean or a table, got %s", where,
               luaL_typename(L, idx));
  conv c = {.L = L, .where = where, .dtype = dtype};
  /* The shape: follow the first elements down. */
  luaL_checkstack(L, 4, "npu.tensor");
  lua_pushvalue(L, idx);
  while (lua_type(L, -1) == LUA_TTABLE) {
    if (c.ndim == NPU_MAX_DIMS)
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: nested deeper than %d levels (a tensor has at most %d dims)", where,
                 NPU_MAX_DIMS, NPU_MAX_DIMS);
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    c.shape[c.ndim++] = (int64_t)n;
    if (n == 0) break;
    lua_rawgeti(L, -1, 1);
    lua_remove(L, -2);
  }
  lua_pop(L, 1);
  /* Every element against it. */
  lua_pushvalue(L, idx);
  conv_check(&c, 0);
  lua_pop(L, 1);
  if (c.dtype < 0) {
    if (c.n_bool && c.n_num)
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: the data mixes booleans and numbers; pass a dtype", where);
    c.dtype = c.n_bool ? NPU_DTYPE_BOOL : NPU_DTYPE_F32;
  }
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  npu_status st = npu_tensor_new(npuB_context(L), (npu_dtype)c.dtype, c.ndim, c.shape, &box->t);
  if (st) npuB_raise(L, where, st);
  c.dst = npu_tensor_data(box->t);
  c.esize = npu_dtype_size((npu_dtype)c.dtype);
  lua_pushvalue(L, idx);
  conv_fill(&c, 0);
  lua_pop(L, 1);
  gc_account(L, box->t);
  return box->t;
}

npu_tensor *npuB_to_tensor(lua_State *L, int idx, int dtype, const char *what) {
  idx = lua_absindex(L, idx);
  npu_tensor *t = npuB_test_tensor(L, idx);
  if (!t && luaL_testudata(L, idx, NPUB_TENSOR))
    npuB_fail(L, NULL, NPU_ERR_STATE, "%s: npu.Tensor is closed", what);
  if (!t) return convert_lua(L, idx, dtype, what);
  if (dtype < 0 || (npu_dtype)dtype == npu_tensor_dtype(t)) {
    lua_pushvalue(L, idx);
    return t;
  }
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  npu_status st = npu_tensor_cast(npuB_context(L), t, (npu_dtype)dtype, &box->t);
  finish(L, what, st, box);
  return box->t;
}

/* ---- constructors ------------------------------------------------------------------------- */

static int l_tensor(lua_State *L) {
  int dtype = opt_dtype(L, 2, -1, "npu.tensor");
  npu_tensor *t = npuB_test_tensor(L, 1);
  if (t && (dtype < 0 || (npu_dtype)dtype == npu_tensor_dtype(t))) { /* a new handle on the same tensor */
    npuB_push_tensor(L, t);
    return 1;
  }
  npuB_to_tensor(L, 1, dtype, "npu.tensor");
  return 1;
}

/* Checks that `value` (at idx) can be stored in dtype d, naming it. */
static void check_scalar(lua_State *L, int idx, int d, const char *where, const char *what) {
  int type = lua_type(L, idx);
  if (type == LUA_TBOOLEAN) return;
  if (type != LUA_TNUMBER)
    npuB_fail(L, NULL, NPU_ERR_ARG, "%s: %s must be a number or a boolean, got %s", where, what,
               luaL_typename(L, idx));
  const char *why = is_int_dtype(d) ? int_misfit(L, idx, d) : NULL;
  if (why)
    npuB_fail(L, NULL, NPU_ERR_ARG, "%s: %s %s %s for %s", where, what, lua_tostring(L, idx), why,
               npu_dtype_name((npu_dtype)d));
}

/* A tensor of `shape` (arg 1) every element of which is the value at value_idx (0: zeros). */
static int make_filled(lua_State *L, const char *where, int value_idx, int dtype) {
  int64_t shape[NPU_MAX_DIMS];
  int ndim = check_shape(L, 1, where, shape, 0);
  if (value_idx) check_scalar(L, value_idx, dtype, where, "value");
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  npu_status st = npu_tensor_new(npuB_context(L), (npu_dtype)dtype, ndim, shape, &box->t);
  if (st == NPU_OK && value_idx && npu_tensor_numel(box->t) > 0) {
    npu_tensor *t = box->t;
    size_t es = npu_dtype_size(npu_tensor_dtype(t)), done = es, total = npu_tensor_nbytes(t);
    store_leaf(L, value_idx, dtype, npu_tensor_data(t));
    while (done < total) { /* doubling copies */
      size_t n = done < total - done ? done : total - done;
      memcpy((char *)npu_tensor_data(t) + done, npu_tensor_data(t), n);
      done += n;
    }
  }
  return finish(L, where, st, box);
}

static int l_zeros(lua_State *L) {
  int dtype = opt_dtype(L, 2, NPU_DTYPE_F32, "npu.zeros");
  return make_filled(L, "npu.zeros", 0, dtype);
}

static int l_ones(lua_State *L) {
  int dtype = opt_dtype(L, 2, NPU_DTYPE_F32, "npu.ones");
  lua_settop(L, 2);
  lua_pushinteger(L, 1);
  return make_filled(L, "npu.ones", 3, dtype);
}

static int l_fill(lua_State *L) {
  npuB_checkany(L, 2);
  int dtype = opt_dtype(L, 3, lua_type(L, 2) == LUA_TBOOLEAN ? NPU_DTYPE_BOOL : NPU_DTYPE_F32,
                        "npu.fill");
  return make_filled(L, "npu.fill", 2, dtype);
}

/* The number at idx (checked integral and in int64 range) as int64, exactly. */
static int64_t to_i64(lua_State *L, int idx) {
  if (lua_isinteger(L, idx)) return (int64_t)lua_tointeger(L, idx);
  return (int64_t)lua_tonumber(L, idx);
}

static int l_range(lua_State *L) {
  static const char where[] = "npu.range";
  int nargs = lua_gettop(L);
  if (nargs < 1 || lua_isnil(L, 1)) return npuB_fail(L, NULL, NPU_ERR_ARG,
            "%s: limit is required", where);
  /* range(n) = range(0, n); range(start, limit [, delta [, dtype]]) */
  int i_start = 1, i_limit = 2, i_delta = 3;
  if (nargs == 1 || lua_isnil(L, 2)) i_start = 0, i_limit = 1;
  int all_int = 1;
  int idxs[3] = {i_start, i_limit, i_delta};
  const char *names[3] = {"start", "limit", "delta"};
  for (int k = 0; k < 3; k++) {
    int i = idxs[k];
    if (!i || lua_isnoneornil(L, i)) continue;
    if (lua_type(L, i) != LUA_TNUMBER)
      return npuB_fail(L, NULL, NPU_ERR_ARG, "%s: %s must be a number, got %s", where, names[k],
                        luaL_typename(L, i));
    if (!lua_isinteger(L, i)) all_int = 0;
  }
  int dtype = opt_dtype(L, 4, all_int ? NPU_DTYPE_I32 : NPU_DTYPE_F32, where);
  if (dtype == NPU_DTYPE_BOOL) return npuB_fail(L, NULL, NPU_ERR_ARG,
            "%s: dtype bool is not numeric", where);
  double start = i_start ? lua_tonumber(L, i_start) : 0.0, limit = lua_tonumber(L, i_limit);
  double delta = lua_isnoneornil(L, i_delta) ? 1.0 : lua_tonumber(L, i_delta);
  if (delta == 0) return npuB_fail(L, NULL, NPU_ERR_ARG, "%s: delta must not be zero", where);
  if (!isfinite(start) || !isfinite(limit) || !isfinite(delta))
    return npuB_fail(L, NULL, NPU_ERR_ARG, "%s: start, limit and delta must be finite", where);
  int64_t n;
  int64_t istart = 0, idelta = 1;
  if (is_int_dtype(dtype)) {
    for (int k = 0; k < 3; k++) {
      int i = idxs[k];
      if (!i || lua_isnoneornil(L, i)) continue;
      const char *why = int_misfit(L, i, NPU_DTYPE_I64);
      if (why)
        return npuB_fail(L, NULL, NPU_ERR_ARG,
                  "%s: %s %s %s for %s", where, names[k], lua_tostring(L, i), why,
                          npu_dtype_name((npu_dtype)dtype));
    }
    istart = i_start ? to_i64(L, i_start) : 0;
    int64_t ilimit = to_i64(L, i_limit);
    idelta = lua_isnoneornil(L, i_delta) ? 1 : to_i64(L, i_delta);
    if ((idelta > 0 && istart >= ilimit) || (idelta < 0 && istart <= ilimit)) {
      n = 0;
    } else {
      uint64_t span = idelta > 0 ? (uint64_t)ilimit - (uint64_t)istart
                                 : (uint64_t)istart - (uint64_t)ilimit;
      uint64_t d = idelta > 0 ? (uint64_t)idelta : 0 - (uint64_t)idelta;
      uint64_t count = span / d + (span % d != 0);
      if (count > ((uint64_t)1 << 48)) return npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: too many elements", where);
      n = (int64_t)count;
    }
    if (n > 0) {
      int64_t lo, hi, last = istart + (n - 1) * idelta;
      int_range(dtype, &lo, &hi);
      if (istart < lo || istart > hi || last < lo || last > hi)
        return npuB_fail(L, NULL, NPU_ERR_ARG, "%s: values from %I to %I do not fit %s", where,
                          (lua_Integer)istart, (lua_Integer)last, npu_dtype_name((npu_dtype)dtype));
    }
  } else {
    double count = ceil((limit - start) / delta);
    if (!(count > 0)) count = 0;
    if (count > 0x1p48) return npuB_fail(L, NULL, NPU_ERR_ARG, "%s: too many elements", where);
    n = (int64_t)count;
  }
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  npu_status st = npu_tensor_new(npuB_context(L), (npu_dtype)dtype, 1, &n, &box->t);
  if (st == NPU_OK) {
    char *dst = npu_tensor_data(box->t);
    size_t es = npu_dtype_size((npu_dtype)dtype);
    for (int64_t i = 0; i < n; i++, dst += es) {
      if (is_int_dtype(dtype)) {
        int64_t v = istart + i * idelta;
        npu_dtype_convert(NPU_DTYPE_I64, &v, (npu_dtype)dtype, dst, 1);
      } else {
        double v = start + (double)i * delta;
        npu_dtype_convert(NPU_DTYPE_F64, &v, (npu_dtype)dtype, dst, 1);
      }
    }
  }
  return finish(L, where, st, box);
}

/* Reads the options table at idx: only `allowed` keys; numbers into vals (defaults kept). */
static void check_opts(lua_State *L, int idx, const char *where, const char *const *allowed) {
  if (lua_type(L, idx) != LUA_TTABLE)
    npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: expected an options table with a seed ({seed = 1, ...}), got %s", where,
               luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    int known = 0;
    if (lua_type(L, -1) == LUA_TSTRING)
      for (int i = 0; allowed[i]; i++) known |= strcmp(lua_tostring(L, -1), allowed[i]) == 0;
    if (!known) {
      luaL_Buffer b;
      const char *key = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                       : luaL_typename(L, -1);
      lua_pushfstring(L, "%s: unknown option '%s' (known:", where, key);
      luaL_buffinit(L, &b);
      for (int i = 0; allowed[i]; i++) {
        luaL_addchar(&b, ' ');
        luaL_addstring(&b, allowed[i]);
      }
      luaL_addchar(&b, ')');
      luaL_pushresult(&b);
      lua_concat(L, 2);
      lua_error(L);
    }
  }
}

static double opt_number(lua_State *L, int idx, const char *key, double def, const char *where) {
  lua_getfield(L, idx, key);
  double v = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      npuB_fail(L, NULL, NPU_ERR_ARG,
                "%s: option %s must be a number, got %s", where, key, luaL_typename(L, -1));
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

static int random_common(lua_State *L, int normal) {
  static const char *const normal_keys[] = {"mean", "stddev", "seed", "dtype", NULL};
  static const char *const uniform_keys[] = {"minval", "maxval", "seed", "dtype", NULL};
  const char *where = normal ? "npu.random_normal" : "npu.random_uniform";
  int64_t shape[NPU_MAX_DIMS];
  int ndim = check_shape(L, 1, where, shape, 0);
  check_opts(L, 2, where, normal ? normal_keys : uniform_keys);
  double a = opt_number(L, 2, normal ? "mean" : "minval", 0.0, where);
  double b = opt_number(L, 2, normal ? "stddev" : "maxval", 1.0, where);
  lua_getfield(L, 2, "seed");
  if (lua_isnil(L, -1))
    return npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: opts.seed is required (explicit seeds make runs reproducible)",
                      where);
  uint64_t seed = (uint64_t)check_int(L, -1, where, "opts.seed");
  lua_getfield(L, 2, "dtype");
  int dtype = opt_dtype(L, -1, NPU_DTYPE_F32, where);
  lua_pop(L, 2);
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  npu_context *ctx = npuB_context(L);
  npu_status st = normal ? npu_tensor_random_normal(ctx, (npu_dtype)dtype, ndim, shape, a, b,
                                                    seed, &box->t)
                         : npu_tensor_random_uniform(ctx, (npu_dtype)dtype, ndim, shape, a, b,
                                                     seed, &box->t);
  return finish(L, where, st, box);
}

static int l_random_normal(lua_State *L) { return random_common(L, 1); }
static int l_random_uniform(lua_State *L) { return random_common(L, 0); }

static int l_load(lua_State *L) {
  const char *path = npuB_checkstring(L, 1);
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  npu_status st = npu_tensor_load_npy(npuB_context(L), path, &box->t);
  return finish(L, "npu.load", st, box);
}

static int l_allclose(lua_State *L) {
  static const char where[] = "npu.allclose";
  double rtol = npuB_optnumber(L, 3, 1e-5), atol = npuB_optnumber(L, 4, 1e-8);
  int equal_nan = lua_toboolean(L, 5);
  npuB_checkany(L, 2);
  /* Tensors are compared as they are; Lua data converts to float64 (no rounding on the way). */
  npu_tensor *a = npuB_to_tensor(L, 1, npuB_test_tensor(L, 1) ? -1 : NPU_DTYPE_F64, where);
  npu_tensor *b = npuB_to_tensor(L, 2, npuB_test_tensor(L, 2) ? -1 : NPU_DTYPE_F64, where);
  if (npu_tensor_ndim(a) != npu_tensor_ndim(b) ||
      memcmp(npu_tensor_shape(a), npu_tensor_shape(b),
             (size_t)npu_tensor_ndim(a) * sizeof(int64_t)) != 0) {
    char sa[96], sb[96];
    return npuB_fail(L, NULL, NPU_ERR_SHAPE, "%s: shapes %s and %s differ", where,
                      npu_shape_format(sa, sizeof sa, npu_tensor_ndim(a), npu_tensor_shape(a)),
                      npu_shape_format(sb, sizeof sb, npu_tensor_ndim(b), npu_tensor_shape(b)));
  }
  int close = 1;
  for (int64_t i = 0; i < npu_tensor_numel(a) && close; i++) {
    double x = npu_tensor_get(a, i), y = npu_tensor_get(b, i);
    if (isnan(x) || isnan(y)) close = equal_nan && isnan(x) && isnan(y);
    else if (isinf(x) || isinf(y)) close = x == y;
    else close = fabs(x - y) <= atol + rtol * fabs(y);
  }
  lua_pushboolean(L, close);
  return 1;
}

static int l_is_tensor(lua_State *L) {
  lua_pushboolean(L, luaL_testudata(L, 1, NPUB_TENSOR) != NULL);
  return 1;
}

/* ---- methods ------------------------------------------------------------------------------ */

/* A tensor's layout read once through the accessors (calls, not field reads): what the
   per-element loops use. */
typedef struct tview {
  const npu_tensor *t;
  const void *data;
  npu_dtype dtype;
  int ndim;
  const int64_t *shape;
} tview;

static tview view_of(const npu_tensor *t) {
  return (tview){.t = t, .data = npu_tensor_data(t), .dtype = npu_tensor_dtype(t),
                 .ndim = npu_tensor_ndim(t), .shape = npu_tensor_shape(t)};
}

static void push_elem(lua_State *L, const tview *v, int64_t i) {
  const void *d = v->data;
  switch (v->dtype) {
  case NPU_DTYPE_BOOL: lua_pushboolean(L, ((const uint8_t *)d)[i] != 0); break;
  case NPU_DTYPE_I8: lua_pushinteger(L, ((const int8_t *)d)[i]); break;
  case NPU_DTYPE_U8: lua_pushinteger(L, ((const uint8_t *)d)[i]); break;
  case NPU_DTYPE_I32: lua_pushinteger(L, ((const int32_t *)d)[i]); break;
  case NPU_DTYPE_I64: lua_pushinteger(L, (lua_Integer)((const int64_t *)d)[i]); break;
  case NPU_DTYPE_F32: lua_pushnumber(L, ((const float *)d)[i]); break;
  case NPU_DTYPE_F64: lua_pushnumber(L, ((const double *)d)[i]); break;
  default: lua_pushnumber(L, npu_tensor_get(v->t, i)); break; /* the half types */
  }
}

/***
The tensor's shape (`tf.Tensor.shape`, `numpy.ndarray.shape`): a list of dims that prints as
`{2, 3}` and compares by value (`t:shape() == {2, 3}`).
@function Tensor:shape
@within Class Tensor
@treturn table a new list of dims
*/
static int m_shape(lua_State *L) {
  npu_tensor *t = npuB_check_tensor(L, 1);
  lua_createtable(L, npu_tensor_ndim(t), 0);
  for (int i = 0; i < npu_tensor_ndim(t); i++) {
    lua_pushinteger(L, (lua_Integer)npu_tensor_shape(t)[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/***
The element type's name.
@function Tensor:dtype
@within Class Tensor
@treturn string "float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32",
  "int64" or "bool"
*/
static int m_dtype(lua_State *L) {
  lua_pushstring(L, npu_dtype_name(npu_tensor_dtype(npuB_check_tensor(L, 1))));
  return 1;
}

/***
The rank: the number of dims (`numpy.ndarray.ndim`).
@function Tensor:ndim
@within Class Tensor
@treturn integer
*/
static int m_ndim(lua_State *L) {
  lua_pushinteger(L, npu_tensor_ndim(npuB_check_tensor(L, 1)));
  return 1;
}

/***
The number of elements (`numpy.ndarray.size`).
@function Tensor:numel
@within Class Tensor
@treturn integer
*/
static int m_numel(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)npu_tensor_numel(npuB_check_tensor(L, 1)));
  return 1;
}

static void push_nested(lua_State *L, const tview *v, int depth, int64_t *pos) {
  if (depth == v->ndim) {
    push_elem(L, v, (*pos)++);
    return;
  }
  luaL_checkstack(L, 3, "npu.Tensor:totable");
  int64_t n = v->shape[depth];
  lua_createtable(L, n > INT32_MAX ? INT32_MAX : (int)n, 0);
  for (int64_t i = 0; i < n; i++) {
    push_nested(L, v, depth + 1, pos);
    lua_rawseti(L, -2, (lua_Integer)(i + 1));
  }
}

/***
The values as nested Lua tables (`numpy.ndarray.tolist`): integers as Lua integers,
exactly; bool as booleans; a rank-0 tensor gives a plain value.
@function Tensor:totable
@within Class Tensor
@treturn table|number|boolean
@usage npu.tensor({{1, 2}, {3, 4}}):totable()   -- {{1.0, 2.0}, {3.0, 4.0}}
*/
static int m_totable(lua_State *L) {
  npu_tensor *t = npuB_check_tensor(L, 1);
  int64_t pos = 0;
  tview v = view_of(t);
  push_nested(L, &v, 0, &pos);
  return 1;
}

/***
The single element of a one-element tensor (`numpy.ndarray.item`).
@function Tensor:item
@within Class Tensor
@treturn number|boolean
@raise NPU_ERR_ARG when the tensor has not exactly one element
*/
static int m_item(lua_State *L) {
  npu_tensor *t = npuB_check_tensor(L, 1);
  if (npu_tensor_numel(t) != 1) {
    char sb[96];
    return npuB_fail(L, NULL, NPU_ERR_ARG,
              "npu.Tensor:item: the tensor has %I elements (shape %s); item() needs "
                      "exactly one", (lua_Integer)npu_tensor_numel(t),
                      npu_shape_format(sb, sizeof sb, npu_tensor_ndim(t), npu_tensor_shape(t)));
  }
  tview v = view_of(t);
  push_elem(L, &v, 0);
  return 1;
}

/***
The tensor converted to another dtype (`numpy.ndarray.astype`; as `tf.cast`: floats to
integers truncate toward zero).  The same dtype gives a handle on the same data.
@function Tensor:astype
@within Class Tensor
@tparam string dtype
@treturn Tensor
@raise NPU_ERR_ARG when dtype is missing or unknown
*/
static int m_astype(lua_State *L) {
  npu_tensor *t = npuB_check_tensor(L, 1);
  if (lua_isnoneornil(L, 2)) return npuB_fail(L, NULL, NPU_ERR_ARG,
            "npu.Tensor:astype: dtype is required");
  int dtype = opt_dtype(L, 2, -1, "npu.Tensor:astype");
  if ((npu_dtype)dtype == npu_tensor_dtype(t)) {
    npuB_push_tensor(L, t);
    return 1;
  }
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  npu_status st = npu_tensor_cast(npuB_context(L), t, (npu_dtype)dtype, &box->t);
  return finish(L, "npu.Tensor:astype", st, box);
}

/***
The same elements in another shape (`tf.reshape` on a value); one dim may be -1 (inferred).
@function Tensor:reshape
@within Class Tensor
@tparam table|integer shape
@treturn Tensor
@raise NPU_ERR_SHAPE when the element counts differ
*/
static int m_reshape(lua_State *L) {
  static const char where[] = "npu.Tensor:reshape";
  npu_tensor *t = npuB_check_tensor(L, 1);
  int64_t shape[NPU_MAX_DIMS];
  int ndim = check_shape(L, 2, where, shape, 1);
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == -1) infer = i;
    else known = known != 0 && shape[i] > INT64_MAX / known ? -1 : known * shape[i];
  }
  if (infer >= 0) {
    if (known <= 0 || npu_tensor_numel(t) % known != 0) {
      char sa[96], sb[96];
      return npuB_fail(L, NULL, NPU_ERR_SHAPE, "%s: cannot reshape %s into %s", where,
                        npu_shape_format(sa, sizeof sa, npu_tensor_ndim(t), npu_tensor_shape(t)),
                        npu_shape_format(sb, sizeof sb, ndim, shape));
    }
    shape[infer] = npu_tensor_numel(t) / known;
  }
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  npu_status st = npu_tensor_reshape(npuB_context(L), t, ndim, shape, &box->t);
  return finish(L, where, st, box);
}

/***
Writes the tensor to a `.npy` file (`numpy.save`).
@function Tensor:save
@within Class Tensor
@tparam string path
@raise NPU_ERR_IO when the file cannot be written
*/
static int m_save(lua_State *L) {
  npu_tensor *t = npuB_check_tensor(L, 1);
  const char *path = npuB_checkstring(L, 2);
  npu_status st = npu_tensor_save_npy(npuB_context(L), t, path);
  if (st) return npuB_raise(L, "npu.Tensor:save", st);
  return 0;
}

/* 1-based (negative from the end) index at idx into dim d of t, as a 0-based position. */
static int64_t check_index(lua_State *L, const tview *v, int idx, int d, const char *where) {
  int64_t i = check_int(L, idx, where, "an index");
  int64_t n = v->shape[d];
  int64_t p = i > 0 ? i - 1 : n + i;
  if (i == 0 || p < 0 || p >= n)
    npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: index %I out of range for dim %d of size %I (valid: 1..%I or "
               "-%I..-1)", where, (lua_Integer)i, d + 1, (lua_Integer)n, (lua_Integer)n,
               (lua_Integer)n);
  return p;
}

/***
One element, by one 1-based index per dim (negative counts from the end).
@function Tensor:get
@within Class Tensor
@tparam integer ... the indices
@treturn number|boolean
@raise NPU_ERR_ARG when an index is out of range (naming it and the dim) or their number is
  not the rank
@usage npu.tensor({{1, 2}, {3, 4}}):get(2, -1)   -- 4.0
*/
static int m_get(lua_State *L) {
  static const char where[] = "npu.Tensor:get";
  tview v = view_of(npuB_check_tensor(L, 1));
  int n = lua_gettop(L) - 1;
  if (n != v.ndim)
    return npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: %d indices given for a rank-%d tensor (one per dim)", where, n, v.ndim);
  int64_t off = 0;
  for (int d = 0; d < v.ndim; d++) off = off * v.shape[d] + check_index(L, &v, d + 2, d, where);
  push_elem(L, &v, off);
  return 1;
}

static int m_index(lua_State *L) {
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    return 1;
  }
  if (lua_type(L, 2) != LUA_TNUMBER) return 0;
  static const char where[] = "npu.Tensor[]";
  npu_tensor *t = npuB_check_tensor(L, 1);
  tview v = view_of(t);
  if (v.ndim == 0)
    return npuB_fail(L, NULL, NPU_ERR_ARG,
              "%s: a rank-0 tensor cannot be indexed; use t:item()", where);
  int64_t p = check_index(L, &v, 2, 0, where);
  if (v.ndim == 1) {
    push_elem(L, &v, p);
    return 1;
  }
  size_t row = npu_tensor_nbytes(t) / (size_t)npu_tensor_shape(t)[0]; /* shape[0] > 0: p is in range */
  npuB_tensor_box *box = npuB_new_tensor_box(L);
  npu_status st = npu_tensor_from_data(npuB_context(L), npu_tensor_dtype(t), npu_tensor_ndim(t) - 1, npu_tensor_shape(t) + 1,
                                       (const char *)npu_tensor_data(t) + (size_t)p * row, row, &box->t);
  return finish(L, where, st, box);
}

static int m_len(lua_State *L) {
  npu_tensor *t = npuB_check_tensor(L, 1);
  if (npu_tensor_ndim(t) == 0) return npuB_fail(L, NULL, NPU_ERR_SHAPE,
            "npu.Tensor: a rank-0 tensor has no length");
  lua_pushinteger(L, (lua_Integer)npu_tensor_shape(t)[0]);
  return 1;
}

static void fmt_elem(luaL_Buffer *b, const npu_tensor *t, int64_t i) {
  char s[64];
  switch (npu_tensor_dtype(t)) {
  case NPU_DTYPE_BOOL: luaL_addstring(b, ((const uint8_t *)npu_tensor_data(t))[i] ? "true" : "false"); return;
  case NPU_DTYPE_I8: case NPU_DTYPE_U8: case NPU_DTYPE_I32: case NPU_DTYPE_I64:
    snprintf(s, sizeof s, "%lld", (long long)(npu_tensor_dtype(t) == NPU_DTYPE_I64
                                                  ? ((const int64_t *)npu_tensor_data(t))[i]
                                                  : (int64_t)npu_tensor_get(t, i)));
    break;
  default: {
    double v = npu_tensor_get(t, i);
    int digits = npu_tensor_dtype(t) == NPU_DTYPE_F64 ? 15 : npu_tensor_dtype(t) == NPU_DTYPE_F32 ? 7 : 4;
    if (isnan(v)) snprintf(s, sizeof s, "nan");
    else if (isinf(v)) snprintf(s, sizeof s, v > 0 ? "inf" : "-inf");
    else snprintf(s, sizeof s, "%.*g", digits, v);
  }
  }
  luaL_addstring(b, s);
}

static void fmt_rec(luaL_Buffer *b, const npu_tensor *t, int depth, int64_t offset,
                    int *budget) {
  if (depth == npu_tensor_ndim(t)) {
    fmt_elem(b, t, offset);
    (*budget)--;
    return;
  }
  int64_t n = npu_tensor_shape(t)[depth], stride = 1;
  for (int d = depth + 1; d < npu_tensor_ndim(t); d++) stride *= npu_tensor_shape(t)[d];
  int64_t shown = n < PRINT_PER_DIM ? n : PRINT_PER_DIM;
  luaL_addchar(b, '[');
  for (int64_t i = 0; i < shown; i++) {
    if (i) luaL_addstring(b, ", ");
    if (*budget <= 0) {
      luaL_addstring(b, "...");
      shown = n; /* nothing more to mark */
      break;
    }
    fmt_rec(b, t, depth + 1, offset + i * stride, budget);
  }
  if (shown < n) luaL_addstring(b, ", ...");
  luaL_addchar(b, ']');
}

static int m_tostring(lua_State *L) {
  npuB_tensor_box *box = npuB_checkudata(L, 1, NPUB_TENSOR);
  npu_tensor *t = box->t;
  if (!t) {
    lua_pushliteral(L, "npu.Tensor(closed)");
    return 1;
  }
  char sb[192];
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, "npu.Tensor(");
  luaL_addstring(&b, npu_dtype_name(npu_tensor_dtype(t)));
  luaL_addstring(&b, ", ");
  luaL_addstring(&b, npu_shape_format(sb, sizeof sb, npu_tensor_ndim(t), npu_tensor_shape(t)));
  luaL_addstring(&b, "): ");
  int budget = PRINT_BUDGET;
  fmt_rec(&b, t, 0, 0, &budget);
  luaL_pushresult(&b);
  return 1;
}

/* ---- registration ------------------------------------------------------------------------- */

void npuB_open_tensor(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"shape", m_shape},     {"dtype", m_dtype},   {"ndim", m_ndim},
      {"numel", m_numel},     {"totable", m_totable}, {"item", m_item},
      {"astype", m_astype},   {"reshape", m_reshape}, {"save", m_save},
      {"get", m_get},         {NULL, NULL}};
  static const luaL_Reg funcs[] = {
      {"tensor", l_tensor},
      {"zeros", l_zeros},
      {"ones", l_ones},
      {"fill", l_fill},
      {"range", l_range},
      {"random_normal", l_random_normal},
      {"random_uniform", l_random_uniform},
      {"load", l_load},
      {"allclose", l_allclose},
      {"is_tensor", l_is_tensor},
      {NULL, NULL}};
  int module = lua_gettop(L);
  luaL_newmetatable(L, NPUB_TENSOR); /* sets __name */
  lua_pushvalue(L, -1);
  lua_setfield(L, module, "Tensor_mt");
  lua_pushcfunction(L, tensor_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, tensor_gc);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, m_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, m_len);
  lua_setfield(L, -2, "__len");
  luaL_newlib(L, methods);
  lua_pushvalue(L, -1);
  lua_setfield(L, module, "Tensor"); /* the method table, open to the Lua facade */
  lua_pushcclosure(L, m_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_setfuncs(L, funcs, 0);
}
