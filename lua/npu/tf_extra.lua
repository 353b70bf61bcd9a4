--- npu.tf_extra — TensorFlow 1.15 names a ported script or an imported graph needs, over the
-- ops of the op table.  Installed into the module by `require("npu.tf_extra").install(npu)`:
--   npu.stack / npu.unstack (tf.stack, tf.unstack: pack / unpack),
--   npu.clip_by_value(t, min, max) (minimum(maximum(t, min), max), as tf.clip_by_value, so its
--     gradient passes where min <= t <= max; ClipByValue imports as the same two nodes),
--   npu.assign_add / npu.assign_sub(var, value) and var:assign_add / var:assign_sub
--     (assign(var, var + value): the executor's assign reads the variable's value of this run),
--   npu.sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value,
--     validate_indices), npu.nn.in_top_k / npu.math.in_top_k, npu.math.ceil,
--   npu.range(start, limit, delta, dtype): graph outputs among the arguments make a range op
--     (its length must be known when the graph compiles: constants, or values the compiler
--     folds); plain numbers keep making a tensor (npu.core.range).
-- @module npu.tf_extra
local errors = require("npu.errors")
local operands = require("npu.operands")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)
local M = {}

local npu -- set by install

local function check_name(where, name)
  if name ~= nil and type(name) ~= "string" then
    errors.raise(where, "NPU_ERR_ARG", "name must be a string, got " .. errors.typename(name))
  end
end

-- An operand a script meant to give: nil is a misspelt or unset variable, not "nothing".
local function check_given(where, what, v)
  if v == nil then errors.raise(where, "NPU_ERR_ARG", what .. " is nil (a misspelt or unset variable?)") end
end

local function graph_of(...) return operands.graph_of(npu, ...) end

-- v as an output of graph g with the dtype of `like` when it is Lua data.
local function as_output(g, v, like)
  if npu.is_output(v) then return v end
  return npu.convert_to_tensor(v, like and like:dtype() or nil, g)
end

--- Stacks tensors of one shape along a new axis (`tf.stack`; the pack op).
-- @function npu.stack
-- @tparam {Output,...} values
-- @tparam[opt=0] integer axis
-- @tparam[opt] string name
-- @treturn Output
function M.stack(values, axis, name)
  return npu.pack(values, { axis = axis or 0, name = name })
end

--- Splits a tensor along an axis into its slices (`tf.unstack`; the unpack op).
-- @function npu.unstack
-- @tparam Output value
-- @tparam[opt] integer num the expected count (checked)
-- @tparam[opt=0] integer axis
-- @tparam[opt] string name
-- @treturn {Output,...}
-- @raise NPU_ERR_ARG when num differs from the axis' size
function M.unstack(value, num, axis, name)
  local out = npu.unpack(value, { axis = axis or 0, name = name })
  if num ~= nil and #out ~= num then
    error(("npu.unstack: num is %d but axis %d has %d entries"):format(num, axis or 0, #out), 2)
  end
  return out
end

--- Clips values to [clip_value_min, clip_value_max] (`tf.clip_by_value`), as
-- minimum(maximum(t, min), max), so its gradient passes where min <= t <= max.
-- @function npu.clip_by_value
-- @tparam Output t
-- @tparam Output|number clip_value_min
-- @tparam Output|number clip_value_max
-- @tparam[opt] string name
-- @treturn Output
-- @raise NPU_ERR_ARG when an operand is nil (a misspelt variable?)
function M.clip_by_value(t, clip_value_min, clip_value_max, name)
  local where = "npu.clip_by_value"
  check_given(where, "t", t)
  check_given(where, "clip_value_min", clip_value_min)
  check_given(where, "clip_value_max", clip_value_max)
  check_name(where, name)
  local g = graph_of(t, clip_value_min, clip_value_max)
  t = as_output(g, t)
  local lo = as_output(g, clip_value_min, t)
  local hi = as_output(g, clip_value_max, t)
  return npu.minimum(npu.maximum(t, lo), hi, name and { name = name } or nil)
end

local function assign_op(opname)
  local where = "npu.assign_" .. opname
  return function(var, value, name)
    if not npu.is_output(var) then
      errors.raise(where, "NPU_ERR_ARG", "var must be a variable (an npu.Output), got " .. errors.typename(var))
    end
    check_given(where, "value", value)
    check_name(where, name)
    local v = as_output(var:graph(), value, var)
    local updated = opname == "add" and npu.add(var, v) or npu.sub(var, v)
    return npu.assign(var, updated, name and { name = name } or nil)
  end
end
--- Adds value to a variable (`tf.assign_add`; also `var:assign_add(value)`): assign(var,
-- var + value) within the run.
-- @function npu.assign_add
-- @tparam Output var a variable
-- @tparam Output|Tensor|number|table value
-- @tparam[opt] string name
-- @treturn Output the updated variable
-- @raise NPU_ERR_ARG when var is not an Output or value is nil
M.assign_add = assign_op("add")
--- Subtracts value from a variable (`tf.assign_sub`; also `var:assign_sub(value)`).
-- @function npu.assign_sub
-- @tparam Output var a variable
-- @tparam Output|Tensor|number|table value
-- @tparam[opt] string name
-- @treturn Output the updated variable
M.assign_sub = assign_op("sub")

--- A dense tensor from sparse indices and values (`tf.sparse_to_dense`).
-- @function npu.sparse_to_dense
-- @tparam Output|table sparse_indices
-- @tparam Output|table output_shape
-- @tparam Output|table|number sparse_values
-- @tparam[opt=0] number default_value
-- @tparam[opt=true] boolean validate_indices
-- @tparam[opt] string name
-- @treturn Output
function M.sparse_to_dense(sparse_indices, output_shape, sparse_values, default_value,
                           validate_indices, name)
  local where = "npu.sparse_to_dense"
  check_given(where, "sparse_indices", sparse_indices)
  check_given(where, "output_shape", output_shape)
  check_given(where, "sparse_values", sparse_values)
  if validate_indices ~= nil and type(validate_indices) ~= "boolean" then
    errors.raise(where, "NPU_ERR_ARG", "validate_indices must be a boolean, got " .. errors.typename(validate_indices))
  end
  check_name(where, name)
  local g = graph_of(sparse_indices, output_shape, sparse_values, default_value)
  local values = as_output(g, sparse_values)
  local inputs = { as_output(g, sparse_indices, nil) }
  local attrs = { validate_indices = validate_indices ~= false }
  if npu.is_output(output_shape) then inputs[#inputs + 1] = output_shape
  else attrs.output_shape = output_shape end
  inputs[#inputs + 1] = values
  inputs[#inputs + 1] = as_output(g, default_value or 0, values)
  return g:op("sparse_to_dense", inputs, attrs, name)
end

-- npu.range: a tensor (numbers only), or a range op when an argument is a graph output.
--- The numbers start, start + delta, ... below limit (above it for a negative delta), as
-- `tf.range`.  With plain numbers, a Tensor (computed in double, or exactly in int64, and
-- rounded once); when an argument is an Output, a range op of its graph (whose length must
-- be known when the graph compiles).
-- @function npu.range
-- @tparam[opt=0] number|Output start (alone: the limit)
-- @tparam number|Output limit
-- @tparam[opt=1] number|Output delta
-- @tparam[opt] string dtype "int32" when every argument is an integer, else "float32"
-- @tparam[opt] string name
-- @treturn Tensor|Output
-- @usage npu.range(5)            -- a Tensor: 0, 1, 2, 3, 4 (int32)
-- npu.range(1, 2, 0.25)    -- 1, 1.25, 1.5, 1.75 (float32)
local function range(start, limit, delta, dtype, name)
  local g
  for _, v in ipairs({ start, limit, delta }) do
    if npu.is_output(v) then g = v:graph() end
  end
  if not g then return npu.core.range(start, limit, delta, dtype) end
  if limit == nil then start, limit = 0, start end -- range(limit)
  local inputs, attrs = {}, { dtype = dtype }
  for i, k in ipairs({ "start", "limit", "delta" }) do
    local v = ({ start, limit, delta })[i]
    if npu.is_output(v) then inputs[#inputs + 1] = v
    elseif v ~= nil then attrs[k] = v end
  end
  return g:op("range", inputs, attrs, name)
end

--- Installs the functions above into the npu module table (done by `require "npu"`).
-- @tparam table mod the npu module
-- @treturn table this module
function M.install(mod)
  npu = mod
  npu.stack, npu.unstack = M.stack, M.unstack
  npu.clip_by_value = M.clip_by_value
  npu.assign_add, npu.assign_sub = M.assign_add, M.assign_sub
  local methods = npu.core.Output_mt.__index
  methods.assign_add, methods.assign_sub = M.assign_add, M.assign_sub
  npu.sparse_to_dense = M.sparse_to_dense
  npu.range = range
  npu.nn = npu.nn or {}
  npu.nn.in_top_k = npu.in_top_k
  npu.math = npu.math or {}
  npu.math.in_top_k, npu.math.ceil = npu.in_top_k, npu.ceil
  return M
end

return M
