--- npu.control — control flow with TensorFlow's names: npu.cond, npu.case, npu.while_loop,
-- npu.map_fn and npu.TensorArray.
--
-- A branch or loop body is a Lua function called once, while the graph is built: the ops it
-- creates go into a region of the graph (g:region_begin/_end), which the cond or while node
-- runs on the device — only the taken branch, as many iterations as the condition allows.
-- Functions read outer tensors directly (no explicit capture).  Results may be nested tables
-- of tensors (lists, or tables with string keys, taken in sorted key order as TensorFlow sorts
-- dict keys); numbers and npu.Tensors among them become constants.  docs/dynamic.md.
-- @module npu.control
local core = require("npu.core")
local errors = require("npu.errors")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)

local M = {}

local Output_mt = core.Output_mt
local function is_output(v) return getmetatable(v) == Output_mt end
local function is_tensor(v) return getmetatable(v) == core.Tensor_mt end

-- The option tables' keys (TensorFlow's argument names); a key not listed is an error naming
-- the nearest one (errors.check_keys), so {maximum_iteration = 5} does not pass silently.
local COND_KEYS = { "pred", "true_fn", "false_fn", "name" }
local CASE_KEYS = { "default", "exclusive", "name" }
local WHILE_KEYS = { "maximum_iterations", "shape_invariants", "name", "parallel_iterations",
  "back_prop", "swap_memory" }
local WHILE_TABLE_KEYS = { "cond", "body", "loop_vars", table.unpack(WHILE_KEYS) }
local MAP_KEYS = { "dtype", "fn_output_signature", "name", "parallel_iterations", "back_prop",
  "swap_memory" }
local TA_KEYS = { "dynamic_size", "element_shape", "clear_after_read", "infer_shape", "name",
  "graph" }
local TA_TABLE_KEYS = { "dtype", "size", table.unpack(TA_KEYS) }

-- A value as a message names it: "nil", "a number (-1)", "a function".
local function what_is(v)
  if v == nil then return "nil" end
  if is_output(v) or is_tensor(v) then return "a tensor" end
  if type(v) == "number" or type(v) == "boolean" then return ("a %s (%s)"):format(type(v), tostring(v)) end
  return "a " .. type(v)
end

-- An InvalidArgumentError of `where`: "npu.cond: NPU_ERR_ARG: pred must be ...".
local function fail(where, fmt, ...) errors.raise(where, "NPU_ERR_ARG", fmt:format(...)) end

-- opts (nil: none) checked against the keys `known`; returns a table.
local function options(where, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" or is_output(opts) or is_tensor(opts) then
    fail(where, "the options must be a table, got %s", what_is(opts))
  end
  errors.check_keys(where, opts, known, "option")
  return opts
end

local function check_function(where, name, fn)
  if type(fn) ~= "function" then
    fail(where, "%s must be a function, got %s", name, what_is(fn))
  end
end

-- Structures -----------------------------------------------------------------------------

local function is_leaf(v)
  return is_output(v) or is_tensor(v) or type(v) == "number" or type(v) == "boolean"
end

-- Flattens v into leaves (appended to out); returns its shape: true for a leaf, else
-- {keys = {...}, parts = {...}}.  `what` names v in errors.
local function flatten(v, out, what)
  if is_leaf(v) then
    out[#out + 1] = v
    return true
  end
  if type(v) ~= "table" or getmetatable(v) ~= nil and not getmetatable(v).__is_tensor_array then
    error(("%s: expected tensors, numbers or tables of them, got a %s"):format(what, type(v)), 3)
  end
  if getmetatable(v) and getmetatable(v).__is_tensor_array then
    out[#out + 1] = v
    return "ta"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) == type(b) then return a < b end
    return type(a) == "number"
  end)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = flatten(v[k], out, what) end
  return { keys = keys, parts = parts }
end

local function same_structure(a, b)
  if a == true or b == true or a == "ta" or b == "ta" then return a == b end
  if #a.keys ~= #b.keys then return false end
  for i, k in ipairs(a.keys) do
    if b.keys[i] ~= k or not same_structure(a.parts[i], b.parts[i]) then return false end
  end
  return true
end

local function describe(s)
  if s == true then return "tensor" end
  if s == "ta" then return "TensorArray" end
  local items = {}
  for i, k in ipairs(s.keys) do items[i] = tostring(k) .. "=" .. describe(s.parts[i]) end
  return "{" .. table.concat(items, ", ") .. "}"
end

-- Rebuilds a structure from leaves (consumed from pos[1] on).
local function unflatten(s, leaves, pos)
  if s == true or s == "ta" then
    pos[1] = pos[1] + 1
    return leaves[pos[1] - 1]
  end
  local t = {}
  for i, k in ipairs(s.keys) do t[k] = unflatten(s.parts[i], leaves, pos) end
  return t
end

local function default_dtype(v)
  if type(v) == "boolean" then return "bool" end
  if math.type(v) == "integer" then return "int32" end
  return "float32"
end

-- Any leaf as an Output of g (constants in the current region).
local function as_output(npu, g, v)
  if is_output(v) then return v end
  if is_tensor(v) then return g:const(v) end
  return g:const(core.tensor(v, default_dtype(v)))
end

local function graph_of(npu, ...)
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if is_output(v) then return v:graph() end
    if type(v) == "table" and not is_tensor(v) then
      local leaves = {}
      pcall(flatten, v, leaves, "")
      for _, l in ipairs(leaves) do
        if is_output(l) then return l:graph() end
        if type(l) == "table" and l.flow then return l.flow:graph() end
      end
    end
  end
  return npu.get_default_graph()
end

-- Calls fn(...) inside a new region of g (g the default graph meanwhile); returns the region
-- and fn's results packed.  The region is closed even when fn fails.
local function in_region(g, fn, ...)
  local region = g:region_begin()
  local ok, res = pcall(function(...)
    local _ <close> = g:as_default()
    return table.pack(fn(...))
  end, ...)
  g:region_end(region)
  if not ok then errors.rethrow(res) end
  return region, res
end

-- A function's results as one value: nothing -> {}, one -> it, several -> a list of them.
local function one_value(res)
  if res.n == 0 then return {} end
  if res.n == 1 then return res[1] end
  local t = {}
  for i = 1, res.n do t[i] = res[i] end
  return t
end

-- TensorArray ------------------------------------------------------------------------------

local TensorArray = {}
TensorArray.__index = TensorArray
TensorArray.__is_tensor_array = true

function M.install(npu)
  local function int_const(g, v) return g:const(core.tensor(v, "int32")) end
  -- An index (a scalar: read, write) or indices (a list or vector: gather, scatter) as an
  -- int Output of g.
  local function index_output(g, i, where, vector)
    local dtype = (is_output(i) or is_tensor(i)) and i:dtype()
    if dtype == "int32" or dtype == "int64" then return is_output(i) and i or g:const(i) end
    if not dtype and not vector and math.type(i) == "integer" then return int_const(g, i) end
    if not dtype and vector and type(i) == "table" and getmetatable(i) == nil then
      for k, v in ipairs(i) do
        if math.type(v) ~= "integer" then
          fail(where, "indices[%d] must be an integer, got %s", k, what_is(v))
        end
      end
      return g:const(core.tensor(i, "int32"))
    end
    fail(where, "the %s must be %s or an int32/int64 tensor, got %s",
      vector and "indices" or "index", vector and "a list of integers" or "an integer",
      dtype and ("a " .. dtype .. " tensor") or what_is(i))
  end

  local function check_value(where, value)
    if value == nil then fail(where, "value is nil (a tensor, a number or a table of numbers expected)") end
  end

  local function new_ta(fields) return setmetatable(fields, TensorArray) end

  --- A list of tensors of one shape written and read inside graphs (`tf.TensorArray`), kept
  -- as one dense tensor whose row i is element i.  write/scatter/unstack return a new
  -- TensorArray: use the one returned (as in TensorFlow 2).
  -- @function npu.TensorArray
  -- @tparam string|table dtype the element dtype, or a table `{dtype =, size =, ...}` of all
  --   arguments
  -- @tparam integer size the number of elements (0 allowed with dynamic_size)
  -- @tparam[opt] table opts `dynamic_size` (false), `element_shape` (dims, -1 where unknown),
  --   `clear_after_read`, `infer_shape`, `name`
  -- @treturn TensorArray
  -- @raise NPU_ERR_ARG for a bad dtype, size or element_shape, or an unknown option
  function npu.TensorArray(dtype, size, opts)
    if type(dtype) == "table" and not is_tensor(dtype) then
      opts = options("npu.TensorArray", dtype, TA_TABLE_KEYS)
      dtype, size = opts.dtype, opts.size
    else
      opts = options("npu.TensorArray", opts, TA_KEYS)
    end
    if type(dtype) ~= "string" then error("npu.TensorArray: dtype must be a string (\"float32\", ...)", 2) end
    if math.type(size) ~= "integer" or size < 0 then
      error("npu.TensorArray: size must be an integer >= 0", 2)
    end
    if opts.element_shape ~= nil then
      local ok = type(opts.element_shape) == "table" and getmetatable(opts.element_shape) == nil
      for _, d in ipairs(ok and opts.element_shape or {}) do ok = ok and math.type(d) == "integer" and d >= -1 end
      if not ok then
        fail("npu.TensorArray", "element_shape must be a list of integer dims (-1 where unknown), got %s",
          what_is(opts.element_shape))
      end
    end
    local g = opts.graph or npu.get_default_graph()
    local dynamic = opts.dynamic_size == true
    local flow
    local elem = opts.element_shape
    local known = elem ~= nil
    for _, d in ipairs(elem or {}) do known = known and d >= 0 end
    if known and not dynamic then
      local shape = { size }
      for i, d in ipairs(elem) do shape[i + 1] = d end
      flow = g:const(npu.zeros(shape, dtype))
    else
      flow = g:const(npu.zeros({ 0 }, dtype))
    end
    return new_ta({ flow = flow, dtype = dtype, size_ = size, dynamic = dynamic,
      element_shape = elem, graph = g, name = opts.name or "TensorArray" })
  end

  local function with_flow(ta, flow)
    return new_ta({ flow = flow, dtype = ta.dtype, size_ = ta.size_, dynamic = ta.dynamic,
      element_shape = ta.element_shape, graph = ta.graph, name = ta.name })
  end

  --- Element index set to value (`tf.TensorArray.write`).
  -- @function TensorArray:write
  -- @tparam integer|Output index 0-based
  -- @tparam Output|Tensor|number|table value
  -- @treturn TensorArray a new TensorArray holding the write
  function TensorArray:write(index, value)
    check_value("npu.TensorArray:write", value)
    local idx = index_output(self.flow:graph(), index, "npu.TensorArray:write")
    local v = as_output(npu, self.flow:graph(), value)
    local y = self.flow:graph():op("tensor_array_write", { self.flow, idx, v },
      { size = self.dynamic and -1 or self.size_ }, self.name .. "/write")
    return with_flow(self, y)
  end

  --- Elements indices set to value's rows (`tf.TensorArray.scatter`).
  -- @function TensorArray:scatter
  -- @tparam table|Output indices 0-based
  -- @tparam Output|Tensor|table value one row per index
  -- @treturn TensorArray
  function TensorArray:scatter(indices, value)
    local g = self.flow:graph()
    check_value("npu.TensorArray:scatter", value)
    local idx = index_output(g, indices, "npu.TensorArray:scatter", true)
    local y = g:op("tensor_array_write", { self.flow, idx, as_output(npu, g, value) },
      { size = self.dynamic and -1 or self.size_ }, self.name .. "/scatter")
    return with_flow(self, y)
  end

  --- Element index (`tf.TensorArray.read`).
  -- @function TensorArray:read
  -- @tparam integer|Output index 0-based
  -- @treturn Output
  function TensorArray:read(index)
    return npu.gather(self.flow, index_output(self.flow:graph(), index, "npu.TensorArray:read"))
  end

  --- Elements indices, stacked (`tf.TensorArray.gather`).
  -- @function TensorArray:gather
  -- @tparam table|Output indices 0-based
  -- @treturn Output
  function TensorArray:gather(indices)
    local idx = index_output(self.flow:graph(), indices, "npu.TensorArray:gather", true)
    return npu.gather(self.flow, idx)
  end

  --- All elements stacked along a new first axis (`tf.TensorArray.stack`).
  -- @function TensorArray:stack
  -- @treturn Output
  function TensorArray:stack() return npu.identity(self.flow) end

  --- A TensorArray whose elements are value's rows (`tf.TensorArray.unstack`).
  -- @function TensorArray:unstack
  -- @tparam Output|Tensor|table value
  -- @treturn TensorArray
  function TensorArray:unstack(value)
    check_value("npu.TensorArray:unstack", value)
    local v = as_output(npu, self.flow:graph(), value)
    return with_flow(self, npu.identity(v))
  end

  --- Elements joined along their first axis (`tf.TensorArray.concat`; all elements of one
  -- shape here).
  -- @function TensorArray:concat
  -- @treturn Output
  -- @raise NPU_ERR_ARG when elements are scalars
  function TensorArray:concat()
    local shape = self.flow:shape()
    if not shape or #shape < 2 then error("npu.TensorArray:concat: elements must have rank >= 1", 2) end
    local new = { -1 }
    for i = 3, #shape do new[#new + 1] = shape[i] end
    return npu.reshape(self.flow, new)
  end

  --- The number of elements, as an int32 scalar Output (`tf.TensorArray.size`).
  -- @function TensorArray:size
  -- @treturn Output
  function TensorArray:size()
    if not self.dynamic then return self.flow:graph():const(core.tensor(self.size_, "int32")) end
    return npu.cast(npu.gather(npu.shape(self.flow), 0), "int32")
  end

  function TensorArray:__tostring()
    return ("npu.TensorArray(%s, size %s%s)"):format(self.dtype, tostring(self.size_),
      self.dynamic and ", dynamic" or "")
  end

  -- The n outputs of a cond / while node; where the leaf was a TensorArray (tas[i]), a
  -- TensorArray whose buffer is that output.
  local function node_outputs(g, node, n, tas)
    local outs = {}
    for i = 1, n do
      local o = g:output(node, i - 1)
      outs[i] = tas[i] and with_flow(tas[i], o) or o
    end
    return outs
  end

  -- cond ----------------------------------------------------------------------------------

  --- One of two branches, chosen when it runs (`tf.cond`).  Both functions are traced once,
  -- while the graph is built; only the taken branch runs on the device.  They return the same
  -- structure with the same dtypes; where shapes differ, the result's dimension is known only
  -- when it runs.
  -- @tparam Output|boolean|table pred a bool scalar (or a Lua boolean), or a table
  --   `{pred =, true_fn =, false_fn =, name =}` of all arguments
  -- @tparam function true_fn
  -- @tparam function false_fn
  -- @tparam[opt] string name
  -- @return the taken branch's results, in their structure
  -- @raise NPU_ERR_ARG when the branches' structures or dtypes differ
  -- @usage local y = npu.cond(npu.greater(s, 0), function() return x * 2 end, function() return x end)
  function npu.cond(pred, true_fn, false_fn, name)
    if type(pred) == "table" and not is_output(pred) and not is_tensor(pred) then -- {pred=, true_fn=, ...}
      local opts = options("npu.cond", pred, COND_KEYS)
      pred, true_fn, false_fn, name = opts.pred, opts.true_fn, opts.false_fn, opts.name
    end
    if not (is_output(pred) or is_tensor(pred) or type(pred) == "boolean") then
      fail("npu.cond", "pred must be a bool scalar tensor or a Lua boolean, got %s", what_is(pred))
    end
    check_function("npu.cond", "true_fn", true_fn)
    check_function("npu.cond", "false_fn", false_fn)
    local g = graph_of(npu, pred)
    pred = as_output(npu, g, pred)
    local r_then, res_then = in_region(g, true_fn)
    local r_else, res_else = in_region(g, false_fn)
    local leaves_t, leaves_e = {}, {}
    local vt, ve = one_value(res_then), one_value(res_else)
    local st = flatten(vt, leaves_t, "npu.cond: true_fn's result")
    local se = flatten(ve, leaves_e, "npu.cond: false_fn's result")
    if not same_structure(st, se) then
      error(("npu.cond: true_fn returns %s but false_fn returns %s: both branches must return the same structure")
        :format(describe(st), describe(se)), 2)
    end
    -- leaves to Outputs (a number or npu.Tensor returned becomes an outer constant, which
    -- every branch sees)
    local tas = {}
    local function outputs(leaves)
      local outs = {}
      for i, l in ipairs(leaves) do
        if type(l) == "table" and l.flow then outs[i], tas[i] = l.flow, l
        else outs[i] = as_output(npu, g, l) end
      end
      return outs
    end
    local ot, oe = outputs(leaves_t), outputs(leaves_e)
    local inputs = { pred }
    for i = 1, #ot do inputs[#inputs + 1] = ot[i] end
    for i = 1, #oe do inputs[#inputs + 1] = oe[i] end
    local node = g:add_op("cond", inputs, { then_region = r_then, else_region = r_else }, name or "cond")
    return unflatten(st, node_outputs(g, node, #ot, tas), { 1 })
  end

  --- The function of the first pair whose predicate is true, else default (else the last
  -- pair's function) (`tf.case`).
  -- @tparam table pairs_ a list of `{pred, fn}` pairs
  -- @tparam[opt] table opts `{default = fn, name = s}`; `exclusive = true` is refused
  --   (NPU_ERR_UNSUPPORTED): nothing would check it when it runs
  -- @return the chosen function's results
  function npu.case(pairs_, opts)
    opts = options("npu.case", opts, CASE_KEYS)
    if opts.exclusive ~= nil and type(opts.exclusive) ~= "boolean" then
      fail("npu.case", "exclusive must be a boolean, got %s", what_is(opts.exclusive))
    end
    if opts.exclusive then
      errors.raise("npu.case", "NPU_ERR_UNSUPPORTED", "exclusive = true is not supported: the preds " ..
        "are not checked for being exclusive when it runs (leave it out: the first true pred's " ..
        "function runs)")
    end
    if type(pairs_) ~= "table" or #pairs_ == 0 then
      error("npu.case: pred_fn_pairs must be a non-empty list of {pred, fn} pairs", 2)
    end
    for i, p in ipairs(pairs_) do
      if type(p) ~= "table" or p[1] == nil or type(p[2]) ~= "function" then
        error(("npu.case: pair %d must be {pred, fn}"):format(i), 2)
      end
    end
    local default = opts.default
    if default ~= nil then check_function("npu.case", "default", default) end
    local n = #pairs_
    if default == nil then
      default = pairs_[n][2]
      n = n - 1
    end
    local function chain(i)
      if i > n then return default() end
      return npu.cond(pairs_[i][1], pairs_[i][2], function() return chain(i + 1) end,
        (opts.name or "case") .. "/" .. i)
    end
    return chain(1)
  end

  -- while_loop ------------------------------------------------------------------------------

  local function call_with(fn, vars, as_list)
    if as_list then return table.pack(fn(table.unpack(vars))) end
    return table.pack(fn(vars))
  end

  --- A loop on the device (`tf.while_loop`): body runs while cond is true (and at most
  -- maximum_iterations times).  parallel_iterations, back_prop and swap_memory are accepted
  -- and have no effect (iterations run in order; nothing is swapped).
  -- @tparam function|table cond `cond(vars...)` returning a bool scalar; or a table
  --   `{cond =, body =, loop_vars =, ...}` of all arguments
  -- @tparam function body `body(vars...)` returning the next values, in loop_vars' structure
  -- @tparam table loop_vars a list (cond and body get its elements as arguments) or another
  --   structure (passed as one argument); numbers become constants
  -- @tparam[opt] table opts `maximum_iterations`, `shape_invariants` (the same structure of
  --   shapes, -1 where a dim may change), `name`, `parallel_iterations`, `back_prop`,
  --   `swap_memory`
  -- @return the final values, in loop_vars' structure
  -- @usage local i, s = table.unpack(npu.while_loop(function(i, s) return npu.less(i, 10) end,
  --   function(i, s) return i + 1, s + i end, {0, 0}))
  function npu.while_loop(cond, body, loop_vars, opts)
    if type(cond) == "table" then -- {cond =, body =, loop_vars =, ...}
      opts = options("npu.while_loop", cond, WHILE_TABLE_KEYS)
      cond, body, loop_vars = opts.cond, opts.body, opts.loop_vars
    else
      opts = options("npu.while_loop", opts, WHILE_KEYS)
    end
    check_function("npu.while_loop", "cond", cond)
    check_function("npu.while_loop", "body", body)
    if loop_vars == nil then error("npu.while_loop: loop_vars is required", 2) end
    local max_it = opts.maximum_iterations
    if max_it ~= nil and (math.type(max_it) ~= "integer" or max_it < 0) then
      error("npu.while_loop: maximum_iterations must be an integer >= 0", 2)
    end
    local as_list = type(loop_vars) == "table" and not is_output(loop_vars) and not is_tensor(loop_vars)
      and not loop_vars.flow and #loop_vars > 0
    local g = graph_of(npu, loop_vars)
    local leaves = {}
    local struct = flatten(loop_vars, leaves, "npu.while_loop: loop_vars")
    local inv_leaves
    if opts.shape_invariants ~= nil then
      inv_leaves = {}
      -- inv at path `at` of loop_vars' structure s: a shape (a list of integer dims, -1 where
      -- it may change) or nil where s is a tensor; a table of s's keys where s is a structure
      local function walk(s, inv, at)
        local where = "shape_invariants" .. at
        if s == true or s == "ta" then
          local ok = inv == nil or type(inv) == "table" and getmetatable(inv) == nil
          for _, d in ipairs(ok and inv or {}) do ok = ok and math.type(d) == "integer" and d >= -1 end
          for k in pairs(ok and inv or {}) do ok = ok and math.type(k) == "integer" and k >= 1 and k <= #inv end
          if not ok then
            fail("npu.while_loop", "%s must be a shape (a list of integer dims, -1 where a dim " ..
              "may change), got %s: shape_invariants has loop_vars' structure (one variable {x}: {{-1}})",
              where, what_is(inv))
          end
          inv_leaves[#inv_leaves + 1] = inv or false
          return
        end
        if inv ~= nil and (type(inv) ~= "table" or getmetatable(inv) ~= nil) then
          fail("npu.while_loop", "%s must be a table like loop_vars' %s, got %s", where, describe(s), what_is(inv))
        end
        local known = {}
        for i, k in ipairs(s.keys) do known[k] = true end
        for k in pairs(inv or {}) do
          if not known[k] then
            fail("npu.while_loop", "%s has the key %s, which loop_vars' %s has not", where,
              math.type(k) and ("[" .. k .. "]") or ("'" .. tostring(k) .. "'"), describe(s))
          end
        end
        for i, k in ipairs(s.keys) do
          walk(s.parts[i], inv and inv[k], at .. (math.type(k) and ("[" .. k .. "]") or ("." .. tostring(k))))
        end
      end
      walk(struct, opts.shape_invariants, "")
    end
    local inits, tas = {}, {}
    for i, l in ipairs(leaves) do
      if type(l) == "table" and l.flow then
        inits[i], tas[i] = l.flow, l
      else
        inits[i] = as_output(npu, g, l)
      end
    end
    local name = opts.name or "while"
    local region = g:region_begin()
    local ok, pred_or_err, rl = pcall(function()
      local _ <close> = g:as_default()
      local args = {}
      for i, x in ipairs(inits) do
        local attrs = { dtype = x:dtype(), index = i - 1 }
        local inv = inv_leaves and inv_leaves[i]
        if tas[i] then
          attrs.any_shape = true
        elseif inv then
          attrs.shape = inv
        else -- TensorFlow's default invariant: the initial value's static shape
          attrs.shape = x:shape()
        end
        local v = g:output(g:add_op("loop_var", {}, attrs, name .. "/var"), 0)
        args[i] = tas[i] and with_flow(tas[i], v) or v
      end
      local vars = unflatten(struct, args, { 1 })
      local p = one_value(call_with(cond, vars, as_list))
      if not is_output(p) and type(p) ~= "boolean" then
        error("npu.while_loop: cond must return a bool scalar tensor", 0)
      end
      local r = one_value(call_with(body, vars, as_list))
      if as_list and #leaves == 1 and (is_output(r) or is_leaf(r) or (type(r) == "table" and r.flow)) then
        r = { r }
      end
      local rl = {}
      local rs = flatten(r, rl, "npu.while_loop: body's result")
      if not same_structure(struct, rs) then
        error(("npu.while_loop: the body returns %s but loop_vars is %s: they must have the same structure")
          :format(describe(rs), describe(struct)), 0)
      end
      return as_output(npu, g, p), rl
    end)
    g:region_end(region)
    if not ok then errors.rethrow(pred_or_err) end
    local pred = pred_or_err
    local inputs = {}
    for i, x in ipairs(inits) do inputs[i] = x end
    inputs[#inputs + 1] = pred
    for i, l in ipairs(rl) do
      if type(l) == "table" and l.flow then l = l.flow end
      if not is_output(l) then
        -- a constant result: built in the loop's region is not possible any more; an outer
        -- constant is visible there
        l = as_output(npu, g, l)
      end
      inputs[#inputs + 1] = l
    end
    local node = g:add_op("while", inputs, { region = region, maximum_iterations = max_it or -1 }, name)
    return unflatten(struct, node_outputs(g, node, #inits, tas), { 1 })
  end

  --- fn applied to each slice of elems along its first axis, stacked (`tf.map_fn`): a
  -- while_loop writing fn's results into a TensorArray.
  -- @tparam function fn `fn(slice)` returning an Output
  -- @tparam Output|Tensor|table elems
  -- @tparam[opt] table opts `dtype` (fn's result dtype, default elems'), `fn_output_signature`,
  --   `name`, `parallel_iterations`, `back_prop`, `swap_memory` (no effect)
  -- @treturn Output
  function npu.map_fn(fn, elems, opts)
    opts = options("npu.map_fn", opts, MAP_KEYS)
    check_function("npu.map_fn", "fn", fn)
    if elems == nil or type(elems) == "function" or type(elems) == "string" then
      fail("npu.map_fn", "elems must be a tensor (or numbers to make one), got %s", what_is(elems))
    end
    if not is_output(elems) then
      local g = npu.get_default_graph()
      elems = as_output(npu, g, elems)
    end
    local g = elems:graph()
    local dtype = opts.fn_output_signature or opts.dtype or elems:dtype()
    if type(dtype) == "table" then dtype = dtype.dtype end
    if type(dtype) ~= "string" then
      fail("npu.map_fn", "dtype (or fn_output_signature) must be a dtype name such as \"float32\", got %s", what_is(dtype))
    end
    local shape = elems:shape()
    local n
    if shape and shape[1] and shape[1] >= 0 then
      n = g:const(core.tensor(shape[1], "int32"))
    else
      n = npu.cast(npu.gather(npu.shape(elems), 0), "int32")
    end
    local ta
    do
      local _ <close> = g:as_default()
      ta = npu.TensorArray(dtype, 0, { dynamic_size = true, graph = g, name = (opts.name or "map") .. "/TensorArray" })
    end
    local out = npu.while_loop(function(i) return npu.less(i, n) end, function(i, acc)
      local y = fn(npu.gather(elems, i))
      return i + 1, acc:write(i, y)
    end, { 0, ta }, { name = opts.name or "map" })
    return out[2]:stack()
  end
end

return M
