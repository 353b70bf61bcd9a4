--- npu.host — host ops: Lua functions as steps of a graph (csrc/ops/op_host_func.c,
-- csrc/bind/l_session.c).
--
--   local y = npu.host_func(function(x) return x:totable()[1] * 2 end, x, "float32")
--
-- npu.host_func(fn, inputs, output_dtypes [, name]) — tf.numpy_function: inputs is an
-- npu.Output or a list of them (npu.Tensors and Lua values become constants); output_dtypes
-- a dtype name (one Output returned) or a list of them (a list returned).  When a run reaches
-- the node, fn(...) is called with the inputs' values as npu.Tensors, on the thread that
-- called sess:run (so it may touch this lua_State freely), and returns one value per output
-- dtype: an npu.Tensor, a number or nested tables, converted to that dtype.  Output shapes are
-- whatever fn returns (unknown when the graph is built).  An error in fn fails the run:
-- sess:run raises "NPU_ERR_CALLBACK: host_func '<name>': <the error>".  Host ops may sit inside
-- npu.cond branches and npu.while_loop bodies.  fn lives as long as the graph.
--
-- npu.register_host_op(tf_type, fn) — mixed computing: fn implements the TensorFlow op type
-- tf_type, one the device lacks, in models imported from now on (npu.load_model,
-- npu.import_graph_def): each node of that type becomes a host_func node calling fn with the
-- node's inputs (constant inputs too, in order) and returning one value per output, converted
-- to the node's output dtype (its Tout, out_type, dtype or T attribute, else its first input's).
-- A session runs such a node only with mix_compile_mode = true.  A type the device has is
-- refused (NPU_ERR_ARG).
-- @module npu.host
local core = require("npu.core")
local errors = require("npu.errors")

local M = {}

function M.install(npu)
  local Output_mt = core.Output_mt
  local function is_output(v) return getmetatable(v) == Output_mt end

  --- Implements a TensorFlow op type the device lacks with a Lua function, in models imported
  -- from now on (mixed computing): each node of that type becomes a host step calling fn with
  -- the node's inputs as Tensors; a session runs such nodes only with mix_compile_mode = true.
  -- @function npu.register_host_op
  -- @tparam string tf_type e.g. "Erfinv"
  -- @tparam function fn `fn(...)` returning one value per output
  -- @raise NPU_ERR_ARG for a type the device has, or arguments of the wrong type
  function npu.register_host_op(tf_type, fn)
    local where = "npu.register_host_op"
    if type(tf_type) ~= "string" then
      errors.raise(where, "NPU_ERR_ARG", "tf_type must be a string, got " .. errors.typename(tf_type))
    end
    if type(fn) ~= "function" then
      errors.raise(where, "NPU_ERR_ARG", "fn must be a function, got " .. errors.typename(fn))
    end
    core.register_host_op(tf_type, fn)
  end

  --- A graph step running a Lua function on the host (`tf.numpy_function`).  When a run
  -- reaches it, fn is called on the thread that called Session:run with the inputs' values as
  -- Tensors, and returns one value per output dtype (a Tensor, number or nested tables).
  -- @function npu.host_func
  -- @tparam function fn
  -- @tparam Output|table inputs an Output or a list (Tensors and Lua values become constants)
  -- @tparam string|table output_dtypes one dtype (one Output returned) or a list (a list
  --   returned)
  -- @tparam[opt] string name
  -- @treturn Output|{Output,...}
  -- @raise NPU_ERR_ARG for arguments of the wrong type; at run time an error in fn fails the
  --   run with NPU_ERR_CALLBACK naming the node
  -- @usage local y = npu.host_func(function(x) return x:totable()[1] * 2 end, x, "float32")
  function npu.host_func(fn, inputs, output_dtypes, name)
    local where = "npu.host_func"
    if type(fn) ~= "function" then
      errors.raise(where, "NPU_ERR_ARG", "fn must be a function, got " .. errors.typename(fn))
    end
    local list = inputs
    if inputs == nil then list = {}
    elseif is_output(inputs) or getmetatable(inputs) == core.Tensor_mt or type(inputs) ~= "table" then
      list = { inputs }
    else
      errors.check_list(where, "inputs", list) -- a nil (a misspelt variable) would drop the rest
    end
    if type(output_dtypes) ~= "string" and type(output_dtypes) ~= "table" then
      errors.raise(where, "NPU_ERR_ARG", "output_dtypes must be a dtype name or a list of them, got "
        .. errors.typename(output_dtypes))
    end
    if name ~= nil and type(name) ~= "string" then
      errors.raise(where, "NPU_ERR_ARG", "name must be a string, got " .. errors.typename(name))
    end
    local g
    for _, v in ipairs(list) do
      if is_output(v) then g = v:graph() break end
    end
    g = g or npu.get_default_graph()
    local ins = {}
    for i, v in ipairs(list) do ins[i] = is_output(v) and v or g:const(v) end
    local one = type(output_dtypes) == "string"
    local outs = core.host_func(g, fn, ins, one and { output_dtypes } or output_dtypes, name)
    return one and outs[1] or outs
  end
end

return M
