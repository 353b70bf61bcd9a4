--- npu — NPU sessions for Lua: build or import a graph, configure a session the way a
-- TensorFlow-on-Ascend script does, run it on the device, fetch tensors.
--
-- This file is the facade over the C module `npu.core`.  The C surface stays small and
-- generic (g:add_op works for every op); the conveniences live here:
--   * graph building: npu.Graph(), g:placeholder/const/variable, one function per op of the
--     op table (npu.matmul, npu.nn.relu, x:matmul(w), ...), operators + - * / and unary -,
--     a default graph as in TensorFlow 1 (npu.placeholder(...) without a graph);
--   * sessions: npu.Session{graph=, config=} or {graph=, options={...}}, sess:run;
--   * tensors: npu.tensor, npu.zeros, npu.random.normal, ... (from the C module).
--
-- The op functions (npu.matmul, npu.nn.relu, x:matmul(w), ...: one per op of the op table,
-- generated from it) are documented in docs/ops.md, with their TensorFlow types, inputs and
-- attributes; npu.signature("conv2d") spells one out.
--
-- The objects (their methods are the "Class" sections below):
--
-- * Tensor: A tensor: an immutable n-dimensional array on the host.  `t[i]` (1-based,
--   negative from the end) is an element of a rank-1 tensor or row i (a copy, of rank - 1) of a
--   higher one; `#t` is the first dim; `tostring(t)` shows dtype, shape and (the first) values;
--   `t + u`, `t * 2`, `-t`, ... run the op at once (eagerly) with the graph ops' broadcasting and
--   dtype rules. A tensor is a to-be-closed value: `local t <close> = ...` frees its memory at
--   once.
-- * Graph: A graph: nodes (operations) with integer ids whose outputs feed other nodes, built
--   from Lua and run by a Session (`tf.Graph`).  One function per op of the op table adds a node
--   (`npu.matmul(a, b)`, `x:matmul(w)`, `g:op("matmul", {a, b})`: see docs/ops.md). `tostring(g)`
--   reads "npu.Graph(n nodes)".
-- * Output: A value in a graph: output i of a node (`tf.Tensor` in graph mode).  Every op of
--   the op table is also a method (`x:matmul(w)`, `x:reshape({-1, 4})`); `+ - * /` and unary `-`
--   add nodes (numbers and tables on either side become constants); `==` compares identity (same
--   graph and value); `tostring` shows name, op, dtype and shape.
-- * Operation: A node of a graph (`tf.Operation`).  Fetching an operation in Session:run runs
--   it and gives nil; `==` compares identity.
-- * Session: A session: a graph, the options it is compiled with, and the plans compiled so
--   far (one per signature of fetches and feeds, cached).  Made by npu.Session.  A to-be-closed
--   value: `local sess <close> = npu.Session{...}` closes it (writing profiles and dumps) at the
--   end of the block.
-- @module npu
local core = require("npu.core")
local errors = require("npu.errors")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)
local config = require("npu.config")

local npu = {}
npu.core = core
npu._VERSION = core.version -- npu.h's NPU_VERSION_MAJOR.MINOR.PATCH (npu_version_string)

-- Tensors -------------------------------------------------------------------------------

for _, name in ipairs({ "tensor", "zeros", "ones", "fill", "range", "load", "allclose" }) do
  npu[name] = core[name]
end
npu.random = {
  normal = core.random_normal,
  uniform = core.random_uniform,
}
npu.Tensor = core.Tensor_mt

-- Errors are npu.errors values (lua/npu/errors.lua).
npu.errors = errors
--- The status code of an error raised by npu, or nil for any other value.  Errors are
-- npu.errors values: `npu.errors.is(err, npu.errors.ShapeError)` tests a class.
-- @param err any value (what pcall returned)
-- @treturn ?string "NPU_ERR_SHAPE", ..., or nil
-- @usage local ok, err = pcall(sess.run, sess, y)
-- if npu.error_code(err) == "NPU_ERR_OUT_OF_RANGE" then ... end
function npu.error_code(err)
  return errors.is_error(err) and err.code or nil
end

-- Logs -----------------------------------------------------------------------------------
-- The core's warnings (an option ignored for another's precedence, a dump or profile file
-- not written, ...) reach Lua here.  By default warnings and errors go through Lua 5.4's
-- `warn` (shown by `lua5.4 -W`, or after warn("@on")); ASCEND_SLOG_PRINT_TO_STDOUT=1 prints
-- them on stdout instead, and ASCEND_GLOBAL_LOG_LEVEL (0 debug, 1 info, 2 warning, 3 error,
-- 4 none; default 2 here) sets the least level passed on, as in CANN.

local LOG_LEVELS = { [0] = "debug", "info", "warning", "error" }
local LOG_NUMBERS = { debug = 0, info = 1, warning = 2, error = 3, none = 4 }
local function env_log_level()
  local v = math.tointeger(tonumber(os.getenv("ASCEND_GLOBAL_LOG_LEVEL") or ""))
  return v and v >= 0 and v <= 4 and v or 2
end
local log = { fn = nil, min = env_log_level(), stdout = os.getenv("ASCEND_SLOG_PRINT_TO_STDOUT") == "1" }

local function default_log(level, message)
  if log.stdout then
    io.stdout:write("[", level:upper(), "] npu: ", message, "\n")
    io.stdout:flush()
  else
    warn("npu ", level, ": ", message)
  end
end

local function deliver(level, message)
  if level < log.min then return end
  (log.fn or default_log)(LOG_LEVELS[level] or tostring(level), message, level)
end
core.set_log_handler(deliver)

--- Sends npu's log lines (the device's warnings and errors) to a function.  By default they
-- go through Lua's `warn` (shown by `lua5.4 -W`), or to stdout under
-- ASCEND_SLOG_PRINT_TO_STDOUT=1.  Messages from the device's own threads arrive at the next
-- npu call.
-- @tparam ?function fn `fn(level, message, level_number)` with level "debug", "info",
--   "warning" or "error" (0..3); nil restores the default
-- @tparam[opt] string|integer level the least level passed on ("debug" .. "none", or 0..4);
--   by default ASCEND_GLOBAL_LOG_LEVEL's, else "warning"
-- @raise NPU_ERR_ARG when fn is not a function or nil, or level is unknown (naming the
--   nearest level)
-- @usage npu.set_log(function(level, msg) io.stderr:write(level, ": ", msg, "\n") end, "info")
function npu.set_log(fn, level)
  if fn ~= nil and type(fn) ~= "function" then
    errors.raise("npu.set_log", "NPU_ERR_ARG", "expected a function(level, message) or nil, got " .. type(fn))
  end
  if level ~= nil then
    local n = LOG_NUMBERS[level] or math.tointeger(level)
    if not n or n < 0 or n > 4 then
      local best = errors.suggest(tostring(level), { "debug", "info", "warning", "error", "none" })
      errors.raise("npu.set_log", "NPU_ERR_ARG", ("unknown level '%s'%s"):format(tostring(level),
        best and (" (did you mean '" .. best .. "'?)") or " (debug, info, warning, error, none or 0..4)"))
    end
    log.min = n
  elseif fn == nil then
    log.min = env_log_level()
  end
  log.fn = fn
end

-- (npu.log is the natural logarithm, as tf.log: the log sink is npu.set_log's.)

-- Graphs ---------------------------------------------------------------------------------

local Graph_methods = core.Graph_mt.__index
local Output_mt = core.Output_mt
local Output_methods = Output_mt.__index
local Operation_methods = core.Operation_mt.__index

-- Per-graph Lua state: the name scopes used (variables and their initializers live in the C
-- graph: g:variables()), weakly keyed by the graph userdata.
local graph_state = setmetatable({}, { __mode = "k" })
local function state_of(g)
  local st = graph_state[g]
  if not st then
    st = { scopes_used = {} }
    graph_state[g] = st
  end
  return st
end

--- Whether v is an Output (a value of a graph).
-- @function npu.is_output
-- @param v any value
-- @treturn boolean
local function is_output(v) return getmetatable(v) == Output_mt end
--- Whether v is an Operation (a node of a graph).
-- @function npu.is_operation
-- @param v any value
-- @treturn boolean
local function is_operation(v) return getmetatable(v) == core.Operation_mt end
--- Whether v is a Tensor.
-- @function npu.is_tensor
-- @param v any value
-- @treturn boolean
local function is_tensor(v) return getmetatable(v) == core.Tensor_mt end
npu.is_output, npu.is_operation, npu.is_tensor = is_output, is_operation, is_tensor

--- A new, empty graph (`tf.Graph()`).
-- @treturn Graph
function npu.Graph() return core.graph_new() end

local default_graph
--- The graph that graph-less calls use (npu.placeholder, npu.constant, npu.Session{} without
-- a graph, op functions given only Lua values), as `tf.get_default_graph`.
-- @treturn Graph
function npu.get_default_graph()
  default_graph = default_graph or core.graph_new()
  return default_graph
end
--- Forgets the default graph: the next graph-less call starts a new one
-- (`tf.reset_default_graph`).
function npu.reset_default_graph() default_graph = nil end

--- Makes the graph the default graph until the returned value is closed
-- (`with g.as_default():`).
-- @function Graph:as_default
-- @within Class Graph
-- @treturn table a to-be-closed value that restores the previous default graph
-- @usage local _ <close> = g:as_default()
function Graph_methods:as_default()
  local previous = default_graph
  default_graph = self
  return setmetatable({}, { __close = function() default_graph = previous end })
end

-- Wraps a node: its single output, its outputs as a list, or the operation when it has none.
local function node_result(g, node)
  local n = g:n_outputs(node)
  if n == 1 then return g:output(node, 0) end
  if n == 0 then return g:operation(node) end
  local outs = {}
  for i = 0, n - 1 do outs[i + 1] = g:output(node, i) end
  return outs
end

local function dtype_of(v)
  if is_output(v) or is_tensor(v) then return v:dtype() end
end

-- Any value to an Output of g: Outputs pass, tensors and Lua values become constants.
local function to_output(g, v, dtype)
  if is_output(v) then return v end
  if is_tensor(v) then return g:const(v) end
  return g:const(core.tensor(v, dtype or "float32"))
end
--- A value as an Output of a graph (`tf.convert_to_tensor`): an Output passes unchanged,
-- a Tensor or Lua value becomes a constant.
-- @function npu.convert_to_tensor
-- @param v an Output, a Tensor, a number or nested tables
-- @tparam[opt="float32"] string dtype for Lua values
-- @tparam[opt] Graph g the graph of the constant (the default graph)
-- @treturn Output
npu.convert_to_tensor = function(v, dtype, g) return to_output(g or npu.get_default_graph(), v, dtype) end

-- Name scopes --------------------------------------------------------------------------------
-- As TensorFlow forms names: inside npu.name_scope("fc", fn) every node is "fc/<name>" (its
-- own name, or its op type: "fc/MatMul"); a scope opened again gets a new name ("fc_1"), a
-- name ending in "/" is absolute (not nested, not renamed); npu.variable_scope keeps its name
-- as given.  The scopes are a stack of this module (as TensorFlow's default graph stack),
-- resolved separately for each graph a node is added to.

local raw_add_op = Graph_methods.add_op
local scopes = {} -- { name =, exact =, absolute =, resolved = {[graph] = "prefix/"} }

local function name_taken(g, name)
  return state_of(g).scopes_used[name] or pcall(g.get_operation_by_name, g, name)
end

-- The prefix ("outer/fc/") of the current scopes in graph g, "" outside any.
local function scope_prefix(g)
  local prefix = ""
  for _, e in ipairs(scopes) do
    local r = e.resolved[g]
    if not r then
      local full = e.absolute and e.name or prefix .. e.name
      if not e.exact and name_taken(g, full) then
        local k = 1
        while name_taken(g, full .. "_" .. k) do k = k + 1 end
        full = full .. "_" .. k
      end
      state_of(g).scopes_used[full] = true
      r = full == "" and "" or full .. "/"
      e.resolved[g] = r
    end
    prefix = r
  end
  return prefix
end

--- Adds a node of any op of the op table (the generic form under every op function); the
-- name is put in the current name scope.
-- @function Graph:add_op
-- @within Class Graph
-- @tparam string op the op's name ("matmul"; docs/ops.md lists them)
-- @tparam[opt] {Output,...} inputs
-- @tparam[opt] table attrs the op's attributes by name (`{transpose_b = true}`)
-- @tparam[opt] string name the node's name (default: the op's TensorFlow type, made unique)
-- @treturn integer the node's id
-- @raise NPU_ERR_ARG for an unknown op or attribute (naming the nearest), an input of
--   another graph; NPU_ERR_SHAPE / NPU_ERR_DTYPE when the inputs do not fit the op
function Graph_methods:add_op(op, inputs, attrs, name)
  if scopes[1] then
    local prefix = scope_prefix(self)
    if prefix ~= "" then name = prefix .. (name or (npu.ops[op] and npu.ops[op].tf_type) or op) end
  end
  return raw_add_op(self, op, inputs, attrs, name)
end

local function open_scope(where, name, exact, fn)
  if type(name) ~= "string" then
    errors.raise(where, "NPU_ERR_ARG", "the scope name must be a string, got " .. type(name))
  end
  if fn ~= nil and type(fn) ~= "function" then
    errors.raise(where, "NPU_ERR_ARG", "argument 2 must be a function (or nothing, for <close>), got " .. type(fn))
  end
  local absolute = name:sub(-1) == "/"
  local e = { name = absolute and name:sub(1, -2) or name, exact = exact or absolute,
    absolute = absolute, resolved = setmetatable({}, { __mode = "k" }) }
  local depth = #scopes + 1
  scopes[depth] = e
  local function close()
    for i = #scopes, depth, -1 do scopes[i] = nil end
  end
  if fn == nil then return setmetatable({}, { __close = close }) end
  local r = table.pack(pcall(fn))
  close()
  if not r[1] then errors.rethrow(r[2]) end
  return table.unpack(r, 2, r.n)
end

--- Names the nodes made inside as "name/..." (`with tf.name_scope(name):`).  A scope opened
-- again gets a new name ("fc_1"); a name ending in "/" is absolute.
-- @tparam string name
-- @tparam[opt] function fn run inside the scope; without it, the result is held with <close>
-- @return fn's results, or a to-be-closed value when fn is nil
-- @raise NPU_ERR_ARG when name is not a string or fn not a function
-- @usage npu.name_scope("fc", function() y = npu.matmul(x, w) end)   -- node "fc/MatMul"
-- local _ <close> = npu.name_scope("fc")
function npu.name_scope(name, fn) return open_scope("npu.name_scope", name, false, fn) end

--- As npu.name_scope, but the name is kept as given when opened again
-- (`tf.variable_scope`: variables are found by name, "fc/kernel").
-- @tparam string name
-- @tparam[opt] function fn
-- @return fn's results, or a to-be-closed value when fn is nil
function npu.variable_scope(name, fn) return open_scope("npu.variable_scope", name, true, fn) end

--- The current name scope's prefix in a graph (`tf.get_default_graph().get_name_scope()`).
-- @tparam[opt] Graph g the default graph when nil
-- @treturn string "outer/fc/", or "" outside any scope
function npu.get_name_scope(g) return scope_prefix(g or npu.get_default_graph()) end

--- Adds a placeholder: a value fed at each run (`tf.placeholder`).
-- @function Graph:placeholder
-- @within Class Graph
-- @tparam string dtype "float32", "int32", ...
-- @tparam[opt] table shape the dims, -1 for unknown ones; nil: unknown rank
-- @tparam[opt] string name
-- @treturn Output
-- @usage local x = g:placeholder("float32", {-1, 784}, "x")
function Graph_methods:placeholder(dtype, shape, name)
  local attrs = { dtype = dtype }
  if shape ~= nil then attrs.shape = shape end
  return self:output(self:add_op("placeholder", {}, attrs, name), 0)
end

local DTYPES = { float32 = true, float16 = true, bfloat16 = true, float64 = true, int8 = true,
  uint8 = true, int32 = true, int64 = true, bool = true, float = true, double = true, half = true }
--- Adds a constant (`tf.constant`).
-- @function Graph:const
-- @within Class Graph
-- @tparam Tensor|number|table value
-- @tparam[opt] string dtype "float32" for Lua values; a tensor is converted (also
--   `g:const(value, name)` when the second argument is not a dtype)
-- @tparam[opt="Const"] string name
-- @treturn Output
function Graph_methods:const(value, dtype, name)
  if name == nil and type(dtype) == "string" and not DTYPES[dtype] then
    dtype, name = nil, dtype -- g:const(value, name)
  end
  local t = is_tensor(value) and (dtype and value:astype(dtype) or value) or core.tensor(value, dtype or "float32")
  return self:output(self:add_op("const", {}, { value = t }, name or "Const"), 0)
end

--- Adds a variable (`tf.Variable`) whose initializer "<name>/Assign" assigns initial; run
-- g:global_variables_initializer() before reading it.  The variable is the C graph's
-- (npu_graph_add_variable), like those of graphs built in C or imported.
-- @function Graph:variable
-- @within Class Graph
-- @tparam Tensor|table|Output initial the initial value (a fully known shape)
-- @tparam[opt="Variable"] string name
-- @treturn Output the variable
-- @raise NPU_ERR_ARG when initial's shape is not fully known
function Graph_methods:variable(initial, name, ...)
  errors.check_no_more("npu.Graph:variable", 3, ...)
  if name ~= nil and type(name) ~= "string" then -- TF's g.variable(init, {trainable=...}) form
    errors.raise("npu.Graph:variable", "NPU_ERR_ARG",
      "argument 2 (name) must be a string, got " .. errors.typename(name))
  end
  local init = to_output(self, initial)
  name = name or "Variable"
  if scopes[1] then name = scope_prefix(self) .. name end
  return self:add_variable(init, name)
end

--- The graph's variables (`tf.global_variables`): Graph:variable's, an imported graph's
-- VariableV2 nodes and a C host's, in creation order.
-- @function Graph:global_variables
-- @within Class Graph
-- @treturn {Output,...}
function Graph_methods:global_variables() return self:variables() end

--- An operation that runs every variable's initializer (`tf.global_variables_initializer`).
-- @function Graph:global_variables_initializer
-- @within Class Graph
-- @treturn Operation
function Graph_methods:global_variables_initializer()
  local node = self:add_op("no_op", {}, nil, "init")
  for _, a in ipairs(self:variable_initializers()) do self:add_control(node, a) end
  return self:operation(node)
end

--- Adds a node of any op, converting Lua values and Tensors among the inputs to constants.
-- @function Graph:op
-- @within Class Graph
-- @tparam string op_name an op of the op table (docs/ops.md)
-- @tparam[opt] table inputs Outputs, Tensors or Lua values
-- @tparam[opt] table attrs
-- @tparam[opt] string name
-- @return the node's Output (one output), a list of Outputs (several), or its Operation (none)
-- @usage local y = g:op("matmul", {a, b}, {transpose_b = true})
function Graph_methods:op(op_name, inputs, attrs, name)
  local conv = {}
  local dtype
  for _, v in ipairs(inputs or {}) do dtype = dtype or dtype_of(v) end
  for i, v in ipairs(inputs or {}) do conv[i] = to_output(self, v, dtype) end
  return node_result(self, self:add_op(op_name, conv, attrs, name))
end

--- An operation that runs all of deps (`tf.group`).
-- @function Graph:group
-- @within Class Graph
-- @tparam {Output|Operation,...} deps
-- @tparam[opt="group_deps"] string name
-- @treturn Operation
function Graph_methods:group(deps, name)
  local node = self:add_op("no_op", {}, nil, name or "group_deps")
  for _, d in ipairs(deps) do
    local op = is_output(d) and d:op() or d
    self:add_control(node, op:id())
  end
  return self:operation(node)
end
--- An operation that runs all of deps, in their graph (`tf.group`).
-- @tparam {Output|Operation,...} deps
-- @tparam[opt="group_deps"] string name
-- @treturn Operation
function npu.group(deps, name)
  local first = deps[1]
  local g = first and first:graph() or npu.get_default_graph()
  return g:group(deps, name)
end

-- One function per op, from the op table --------------------------------------------------

local function is_options(v)
  return type(v) == "table" and not is_output(v) and not is_tensor(v) and #v == 0 and next(v) ~= nil
      and type(next(v)) == "string"
end

local function graph_of(list)
  for _, v in ipairs(list) do
    if is_output(v) then return v:graph() end
  end
  return npu.get_default_graph()
end

local ops = {}
for _, def in ipairs(core.op_list()) do ops[def.name] = def end
npu.ops = ops

-- "npu.conv2d(input1, input2, strides, padding, data_format, dilations [, {attr = v, name = s}])"
local function signature(def)
  local parts = {}
  if def.max_inputs < 0 then parts[1] = "{inputs...}"
  else
    for i = 1, def.max_inputs do parts[#parts + 1] = i > def.min_inputs and ("[input%d]"):format(i) or ("input" .. i) end
  end
  for _, a in ipairs(def.args) do parts[#parts + 1] = a end
  parts[#parts + 1] = "{attr = v, name = s}"
  return ("npu.%s(%s)"):format(def.name, table.concat(parts, ", "))
end
--- The call signature of an op's function, as generated from the op table.
-- @function npu.signature
-- @tparam string op the op's name
-- @treturn ?string e.g. "npu.conv2d(input1, input2, strides, padding, ...)", nil for no op
npu.signature = function(op) return ops[op] and signature(ops[op]) end

local function make_op(def)
  local variadic = def.max_inputs < 0
  return function(...)
    local args = table.pack(...)
    local inputs, pos = {}, 1
    if variadic then
      inputs = args[1] or {}
      pos = 2
    else
      for i = 1, def.max_inputs do inputs[i] = args[i] end
      pos = def.max_inputs + 1
      for i = def.max_inputs, def.min_inputs + 1, -1 do -- optional inputs left out
        -- an optional input given as Lua data is the attribute of the same position instead
        -- (npu.reshape(x, {2, 3}): the shape attribute; npu.reshape(x, shape_output): input)
        if inputs[i] == nil or not is_output(inputs[i]) then inputs[i], pos = nil, i end
      end
    end
    local attrs = {}
    for _, a in ipairs(def.args) do
      local v = args[pos]
      if pos > args.n or (pos == args.n and is_options(v)) then break end
      attrs[a] = v
      pos = pos + 1
    end
    local opts = args[pos]
    local name
    if pos < args.n or (opts ~= nil and (type(opts) ~= "table" or is_output(opts) or is_tensor(opts)
        or (next(opts) ~= nil and not is_options(opts)))) then
      errors.raise("npu." .. def.name, "NPU_ERR_ARG", ("argument %d: expected the options table "
        .. "{attr = v, name = s} (or nothing), got %s; the signature is %s"):format(pos,
        is_output(opts) and "an npu.Output" or is_tensor(opts) and "an npu.Tensor"
        or type(opts) == "table" and "a list" or type(opts), signature(def)))
    end
    if opts ~= nil then
      for k, v in pairs(opts) do
        if k == "name" then name = v else attrs[k] = v end
      end
    end
    local g = graph_of(inputs)
    return g:op(def.name, inputs, attrs, name)
  end
end

local skip = { placeholder = true, const = true, variable = true, cond = true, ["while"] = true,
  loop_var = true, tensor_array_write = true }
for name, def in pairs(ops) do
  if not skip[name] then
    local fn = make_op(def)
    npu[name] = npu[name] or fn
    Output_methods[name] = Output_methods[name] or fn
  end
end
--- An operation that does nothing, in the default graph (`tf.no_op`), for control
-- dependencies.
-- @function npu.no_op
-- @tparam[opt] table opts `{name = s}`
-- @treturn Operation
npu.no_op = function(opts) return npu.get_default_graph():op("no_op", {}, nil, opts and opts.name) end

-- TensorFlow's names for the same functions.
--- Graph:placeholder in the default graph (`tf.placeholder`).
-- @function npu.placeholder
-- @tparam string dtype
-- @tparam[opt] table shape
-- @tparam[opt] string name
-- @treturn Output
npu.placeholder = function(dtype, shape, name) return npu.get_default_graph():placeholder(dtype, shape, name) end
--- Graph:const in the default graph (`tf.constant`).
-- @function npu.constant
-- @tparam Tensor|number|table value
-- @tparam[opt] string dtype
-- @tparam[opt] string name
-- @treturn Output
npu.constant = function(value, dtype, name) return npu.get_default_graph():const(value, dtype, name) end
--- Graph:variable in the default graph (`tf.Variable`).
-- @function npu.Variable
-- @tparam Tensor|table|Output initial
-- @tparam[opt] string name
-- @treturn Output
npu.Variable = function(initial, name) return npu.get_default_graph():variable(initial, name) end
--- Graph:global_variables_initializer of the default graph (`tf.global_variables_initializer`).
-- @function npu.global_variables_initializer
-- @treturn Operation
npu.global_variables_initializer = function() return npu.get_default_graph():global_variables_initializer() end
npu.multiply, npu.subtract, npu.divide, npu.negative = npu.mul, npu.sub, npu.div, npu.neg
npu.concat_v2 = npu.concat

npu.nn = {}
for _, name in ipairs({ "relu", "relu6", "sigmoid", "tanh", "softmax", "log_softmax", "bias_add",
  "conv2d", "depthwise_conv2d", "max_pool", "avg_pool", "gelu" }) do
  npu.nn[name] = npu[name]
end
npu.nn.depthwise_conv2d_native = npu.depthwise_conv2d
npu.math = { exp = npu.exp, log = npu.log, sqrt = npu.sqrt, square = npu.square,
  tanh = npu.tanh, sigmoid = npu.sigmoid, maximum = npu.maximum, minimum = npu.minimum,
  reduce_sum = npu.reduce_sum, reduce_mean = npu.reduce_mean, reduce_max = npu.reduce_max,
  argmax = npu.argmax }

-- Operators on graph outputs: numbers and tables on either side become constants.
local function binary(fn)
  return function(a, b)
    if not is_output(a) then a = to_output(b:graph(), a, b:dtype()) end
    if not is_output(b) then b = to_output(a:graph(), b, a:dtype()) end
    return fn(a, b)
  end
end
Output_mt.__add = binary(npu.add)
Output_mt.__sub = binary(npu.sub)
Output_mt.__mul = binary(npu.mul)
Output_mt.__div = binary(npu.div)
Output_mt.__unm = function(a) return npu.neg(a) end
-- TensorFlow's %, // and ** on tensors (floormod, floordiv, pow): Lua's %, // and ^.
Output_mt.__mod = binary(npu.floor_mod)
Output_mt.__idiv = binary(npu.floor_div)
Output_mt.__pow = binary(npu.pow)
-- < and <= cannot build a node: Lua turns what __lt/__le return into a boolean.  Without
-- these, `i < 10` in a while_loop's condition failed with Lua's "attempt to compare".
local function no_compare(op, fn)
  return function()
    errors.raise("npu.Output " .. op, "NPU_ERR_ARG",
      "graph values cannot be compared with " .. op .. " (Lua makes its result a boolean): use "
      .. fn .. ", which build the comparison as a node")
  end
end
Output_mt.__lt = no_compare("<", "npu.less(a, b) or npu.greater(a, b)")
Output_mt.__le = no_compare("<=", "npu.less_equal(a, b) or npu.greater_equal(a, b)")

-- Shapes ------------------------------------------------------------------------------------
-- t:shape() and output:shape() are lists of dims (-1: unknown) that print as {2, 3} and
-- compare by value (shape == {2, 3}); nil for an output of unknown rank.
local Shape_mt = {
  __name = "npu.Shape",
  __tostring = function(s)
    local parts = {}
    for i, d in ipairs(s) do parts[i] = tostring(d) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end,
  __eq = function(a, b)
    if type(a) ~= "table" or type(b) ~= "table" or #a ~= #b then return false end
    for i = 1, #a do if a[i] ~= b[i] then return false end end
    return true
  end,
}
npu.Shape = Shape_mt
local function as_shape(s) return s and setmetatable(s, Shape_mt) end
local Tensor_methods = core.Tensor -- the method table behind Tensor_mt.__index (indexing t[i] too)
do
  local tensor_shape, output_shape = Tensor_methods.shape, Output_methods.shape
  Tensor_methods.shape = function(t) return as_shape(tensor_shape(t)) end
  Output_methods.shape = function(o) return as_shape(output_shape(o)) end
end

-- Eager arithmetic on tensors ---------------------------------------------------------------
-- t + t, t * 2, -t, ... on npu.Tensors run the op at once on the device (a one-node graph),
-- with the graph ops' broadcasting and dtype rules; a Tensor with an Output builds a node of
-- the Output's graph instead.
local function eager(op_name, unary)
  local fn = npu[op_name]
  return function(a, b)
    if unary then b = nil end -- Lua passes the operand twice to __unm
    if is_output(a) or is_output(b) then -- a graph value: build, not run
      local g = is_output(a) and a:graph() or b:graph()
      return fn(to_output(g, a, dtype_of(b)), to_output(g, b, dtype_of(a)))
    end
    local g = core.graph_new()
    local y = b == nil and fn(to_output(g, a)) or fn(to_output(g, a, dtype_of(b)), to_output(g, b, dtype_of(a)))
    local sess <close> = core.session_new(g, config.to_options(nil))
    return sess:run(y)
  end
end
core.Tensor_mt.__add = eager("add")
core.Tensor_mt.__sub = eager("sub")
core.Tensor_mt.__mul = eager("mul")
core.Tensor_mt.__div = eager("div")
core.Tensor_mt.__unm = eager("neg", true)

-- Sessions -------------------------------------------------------------------------------

npu.ConfigProto = config.ConfigProto
npu.RewriterConfig = config.RewriterConfig
npu.compat = config.compat
npu.ExperimentalConfig = config.ExperimentalConfig -- 004
npu.NPURunConfig = config.NPURunConfig             -- takes experimental_config, session_config
config.get_default_graph = npu.get_default_graph  -- set_graph_exec_config's fetch names

local system_options -- set by initialize_system, inherited by later sessions

local SESSION_KEYS = { "graph", "config", "options", "target" }
--- Creates a session on a graph (`tf.Session(graph=, config=)`).  Options come from a
-- ConfigProto (the NpuOptimizer parameter_map, as in a TF-on-Ascend script), an
-- NPURunConfig, or a flat table; sessions start from npu.initialize_system's options.
-- @tparam[opt] table spec `{graph = g, config = cfg}` or `{graph = g, options = {name = value}}`
--   (the graph may come first: `{g, config = c}`); also `npu.Session(g, cfg)`.  Without a
--   graph, the default graph.
-- @param[opt] cfg with a graph as first argument: a ConfigProto, NPURunConfig or options table
-- @treturn Session
-- @raise NPU_ERR_ARG for an unknown key, a graph that is not an npu.Graph, both config and
--   options; NPU_ERR_OPTION for an unknown or invalid option (naming it)
-- @usage local sess <close> = npu.Session{graph = g, options = {precision_mode = "force_fp16"}}
function npu.Session(spec, cfg)
  local graph, opts
  if spec == nil or is_options(spec) or (type(spec) == "table" and getmetatable(spec) == nil) then
    spec = spec or {}
    -- npu.Session{g} / npu.Session{g, config = c}: the graph may come first, unnamed
    local first = rawget(spec, 1)
    if first ~= nil and getmetatable(first) ~= core.Graph_mt then
      errors.raise("npu.Session", "NPU_ERR_ARG", ("the first entry must be an npu.Graph, got %s")
        :format(type(first)))
    end
    if first ~= nil and spec.graph ~= nil then
      errors.raise("npu.Session", "NPU_ERR_ARG", "give the graph once: {g} or {graph = g}")
    end
    local named = {}
    for k, v in pairs(spec) do if k ~= 1 then named[k] = v end end
    errors.check_keys("npu.Session", named, SESSION_KEYS)
    if spec.graph ~= nil and getmetatable(spec.graph) ~= core.Graph_mt then
      errors.raise("npu.Session", "NPU_ERR_ARG", ("graph must be an npu.Graph, got %s"):format(type(spec.graph)))
    end
    graph = first or spec.graph or npu.get_default_graph()
    if spec.config ~= nil and spec.options ~= nil then
      error("npu.Session: give either config or options, not both", 2)
    end
    opts = config.to_options(spec.config or spec.options, system_options)
  else
    graph = spec
    opts = config.to_options(cfg, system_options)
  end
  return core.session_new(graph, opts)
end

-- tf.Session-like helpers on the session object.
local Session_methods = core.Session_mt.__index

-- sess:explain(fetches [, feeds]) returns a table whose tostring is a listing of the plan,
-- and whose to_dot() is the plan drawn as Graphviz DOT (sess:explain_dot(fetches, feeds): the
-- same cached plan).  The session and arguments are remembered beside the table, weakly keyed.
core.Explain_mt.__tostring = require("npu.explain").tostring
local explained = setmetatable({}, { __mode = "k" })
local core_explain = Session_methods.explain
--- The plan Session:run would execute for these fetches and feeds, without running it
-- (compiled and cached now if needed).  `tostring` of the result lists it step by step;
-- its `to_dot()` draws it.
-- @function Session:explain
-- @within Class Session
-- @tparam Output|Operation|string|table fetches as for run
-- @tparam[opt] table feeds as for run
-- @treturn table `{precision_mode, n_steps, folded, iterations, feeds, fetches, steps, memory}`
-- @usage print(sess:explain(y, {[x] = batch}))
function Session_methods.explain(sess, fetches, feeds, ...)
  local e = core_explain(sess, fetches, feeds, ...) -- the core refuses a 4th argument
  explained[e] = { sess, fetches, feeds }
  return e
end
core.Explain_mt.__index = {
  --- The explained plan as Graphviz DOT text (Session:explain_dot of the same arguments).
  -- @function Explain:to_dot
  -- @treturn string
  -- @raise NPU_ERR_ARG when given arguments
  to_dot = function(e, ...)
    if select("#", ...) > 0 then
      errors.raise("npu.Explain:to_dot", "NPU_ERR_ARG", "takes no arguments, got " .. errors.typename((...)))
    end
    local how = explained[e]
    if not how then error("npu.Explain:to_dot: not a result of sess:explain", 2) end
    return how[1]:explain_dot(how[2], how[3])
  end,
}

--- Validates and keeps system-wide options (`npu_ops.initialize_system` in TF Adapter):
-- sessions created afterwards start from them.  Optional: sessions initialise implicitly.
-- @tparam[opt] table options a ConfigProto, NPURunConfig or flat options table
-- @treturn boolean true
-- @raise NPU_ERR_OPTION for an unknown or invalid option
-- @usage npu.initialize_system({precision_mode = "allow_mix_precision"})
function npu.initialize_system(options)
  local o = config.to_options(options)
  core.options_check(o)
  system_options = o
  return true
end

--- Forgets the options of npu.initialize_system (`npu_ops.shutdown_system`): later sessions
-- start from the defaults.  Sessions already open keep theirs.
-- @treturn boolean true
function npu.shutdown_system()
  system_options = nil
  return true
end

npu.util = {}

--- Draws a graph with Graphviz's `dot` into a file.
-- @tparam Graph|table|string what an npu.Graph (as given), a Session:explain result (the
--   plan), or DOT text (a dump's .dot file)
-- @tparam string path the file; its extension gives the format (svg, png, pdf, ...)
-- @tparam[opt] table opts `{format = "svg", dot = "/path/to/dot"}`
-- @treturn string path
-- @raise NPU_ERR_NOT_FOUND when Graphviz is not installed (Debian: graphviz), NPU_ERR_IO when
--   dot fails, NPU_ERR_ARG for a bad argument
function npu.util.render_graph(what, path, opts)
  local where = "npu.util.render_graph"
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(where, "NPU_ERR_ARG", "opts must be a table {format =, dot =}, got " .. errors.typename(opts))
  end
  opts = opts or {}
  errors.check_keys(where, opts, { "format", "dot" })
  for _, k in ipairs({ "format", "dot" }) do
    if opts[k] ~= nil and type(opts[k]) ~= "string" then
      errors.raise(where, "NPU_ERR_ARG", k .. " must be a string, got " .. errors.typename(opts[k]))
    end
  end
  local dot
  if getmetatable(what) == core.Graph_mt then dot = what:to_dot()
  elseif getmetatable(what) == core.Explain_mt then dot = what:to_dot()
  elseif type(what) == "string" and what:match("^[^{]*graph[^{]*{") then dot = what
  else error(where .. ": argument 1 must be an npu.Graph, a sess:explain result or DOT text", 2) end
  if type(path) ~= "string" or path == "" then error(where .. ": argument 2 must be a file path", 2) end
  local format = opts.format or path:match("%.([%w]+)$") or "svg"
  if not format:match("^[%w:]+$") then error(where .. ": bad format '" .. format .. "'", 2) end
  local function q(x) return "'" .. x:gsub("'", "'\\''") .. "'" end
  local exe = opts.dot or "dot"
  local found = os.execute("command -v " .. q(exe) .. " >/dev/null 2>&1")
  if not found then
    errors.raise(where, "NPU_ERR_NOT_FOUND", "Graphviz's '" .. exe .. "' was not found on PATH: " ..
      "install Graphviz (Debian: apt-get install graphviz, or tools/install-deps.sh) or write " ..
      "the DOT text yourself (g:to_dot(), e:to_dot()) and render it elsewhere")
  end
  local src, err = os.tmpname(), os.tmpname()
  local f = assert(io.open(src, "wb"))
  f:write(dot)
  f:close()
  local ok = os.execute(q(exe) .. " -T" .. format .. " -o " .. q(path) .. " " .. q(src) ..
    " 2>" .. q(err))
  local ef = io.open(err, "rb")
  local msg = ef and ef:read("a") or ""
  if ef then ef:close() end
  os.remove(src)
  os.remove(err)
  msg = msg:gsub("%s+$", "")
  if not ok then
    errors.raise(where, "NPU_ERR_IO", exe .. " -T" .. format .. " failed writing '" .. path ..
      "': " .. (msg ~= "" and msg or "(no message)"))
  end
  return path
end

--- An operation whose single Session:run runs train_op n times on the device without
-- returning to Lua (TF Adapter's `util.set_iteration_per_loop`); fetches run alongside it
-- give the last iteration's values.  The graph must take its data from a dataset iterator
-- and graph_run_mode be 1: the first run checks them.
-- @tparam Session sess
-- @tparam Operation|Output train_op
-- @tparam integer n must equal the session's iterations_per_loop option
-- @treturn Operation
-- @raise NPU_ERR_CONFLICT when n differs from iterations_per_loop
function npu.util.set_iteration_per_loop(sess, train_op, n)
  if getmetatable(sess) ~= core.Session_mt then
    error("npu.util.set_iteration_per_loop: argument 1 must be an npu.Session", 2)
  end
  if math.type(n) ~= "integer" or n < 1 then
    error("npu.util.set_iteration_per_loop: iterations must be an integer >= 1", 2)
  end
  local want = sess:options():get("iterations_per_loop")
  if want ~= n then
    errors.raise("npu.util.set_iteration_per_loop", "NPU_ERR_CONFLICT", ("%d iterations requested but the "
      .. "session's iterations_per_loop is %d: parameter_map[\"iterations_per_loop\"] must be equal"):format(n, want))
  end
  local op = is_output(train_op) and train_op:op() or train_op
  if not is_operation(op) then
    error("npu.util.set_iteration_per_loop: argument 2 must be an operation or an output", 2)
  end
  local g = op:graph()
  local node = g:add_op("loop", {}, { iterations = n }, "loop")
  g:add_control(node, op:id())
  return g:operation(node)
end

-- npu.util.set_graph_exec_config(fetch, params) and graph_exec_config(op): options per graph
-- (TF Adapter's util.set_graph_exec_config), documented in lua/npu/config.lua.
npu.util.set_graph_exec_config = config.set_graph_exec_config
npu.util.graph_exec_config = config.graph_exec_config

--- Makes the ops producing tensors keep the graph's dtypes under every precision mode (TF
-- Adapter's `keep_tensors_dtypes`, for online inference).  Mark before the first run.
-- @tparam Graph graph
-- @tparam string|Output|table tensors "name:0" strings or Outputs of graph (one or a list)
-- @raise NPU_ERR_NOT_FOUND for an unknown name (then nothing is marked)
function npu.util.keep_tensors_dtypes(graph, tensors)
  local where = "npu.util.keep_tensors_dtypes"
  if getmetatable(graph) ~= core.Graph_mt then error(where .. ": argument 1 must be an npu.Graph", 2) end
  if type(tensors) ~= "table" or is_output(tensors) then tensors = { tensors } end
  local ids = {}
  for i, t in ipairs(tensors) do
    if type(t) == "string" then
      local ok, out = pcall(graph.get_tensor_by_name, graph, t)
      if not ok then errors.rewhere(out, where) end
      ids[i] = out:id()
    elseif is_output(t) and rawequal(t:graph(), graph) then
      ids[i] = t:id()
    else
      error(("%s: tensor %d must be a tensor name (\"name:0\") or an Output of this graph"):format(where, i), 2)
    end
  end
  for _, id in ipairs(ids) do graph:keep_dtype(id) end
end

--- A hook telling a session running with accelerate_train_mode how far training is (TF
-- Adapter's `TellMeStepOrLossHook`).  Call hook:after_run(sess) after each training run.
-- @tparam table spec `{step = global_step, total_step = n}` or `{loss = loss, final_loss = x}`
--   (step and loss are Outputs or tensor names)
-- @treturn table the hook
-- @raise NPU_ERR_ARG when neither form is given
function npu.util.TellMeStepOrLossHook(spec)
  local by_loss = spec.loss ~= nil
  local tensor = by_loss and spec.loss or spec.step
  local total = by_loss and spec.final_loss or spec.total_step
  if tensor == nil or type(total) ~= "number" then
    error("npu.util.TellMeStepOrLossHook: give {step =, total_step =} or {loss =, final_loss =}", 2)
  end
  local hook = {}
  --- Tells the session that training starts (step 0, or an infinite loss).
  -- @function TellMeStepOrLossHook:begin
  -- @tparam Session sess
  function hook:begin(sess) sess:set_progress(by_loss and math.huge or 0, total) end
  --- Fetches the step or loss and passes it on with Session:set_progress.
  -- @function TellMeStepOrLossHook:after_run
  -- @tparam Session sess
  function hook:after_run(sess) sess:set_progress(sess:run(tensor):item(), total) end
  return hook
end

-- npu.util.ProgressBar{total =, width =, stream =}: a progress bar to pass as sess:run's
-- progress function (documented in lua/npu/progress.lua).
npu.util.ProgressBar = require("npu.progress").ProgressBar

--- Bounds the bytes this Lua state's device context may hold at once (the context's
-- memory_limit).  Later allocations past it fail with NPU_ERR_NOMEM
-- (npu.errors.ResourceExhaustedError) naming the limit.
-- @tparam integer bytes the limit (0: no bound)
-- @raise NPU_ERR_ARG for a limit below the bytes in use now, or a negative or non-integer one
function npu.set_memory_limit(bytes, ...)
  errors.check_no_more("npu.set_memory_limit", 1, ...)
  if math.type(bytes) ~= "integer" or bytes < 0 then
    errors.raise("npu.set_memory_limit", "NPU_ERR_ARG", "bytes must be an integer >= 0 (0: no " ..
      "limit), got " .. (math.type(bytes) and tostring(bytes) or errors.typename(bytes)))
  end
  core.set_memory_limit(bytes)
end
--- The limit set by npu.set_memory_limit.
-- @treturn integer bytes (0: none)
function npu.get_memory_limit() return core.memory_limit() end

-- Training: gradients, optimizers, losses, layers (lua/npu/train.lua, lua/npu/nn_extra.lua)
npu.train = require("npu.train")
npu.gradients = npu.train.gradients
require("npu.nn_extra").install(npu)

-- Control flow: cond, case, while_loop, map_fn, TensorArray (lua/npu/control.lua)
require("npu.control").install(npu)

-- Values sized by the data: where, unique, boolean_mask, image NMS (lua/npu/dynamic.lua)
require("npu.dynamic").install(npu)

-- Host ops: Lua functions as graph steps (lua/npu/host.lua)
require("npu.host").install(npu)

-- Datasets and checkpoints (lua/npu/data.lua, lua/npu/saver.lua)
npu.data = require("npu.data")
-- data-parallel training over MPI: ranks and collectives (docs/distributed.md)
npu.hccl = require("npu.hccl")
npu.hccl_ops = npu.hccl
npu.train.Saver = require("npu.saver").Saver

-- Models: TensorFlow graphs in and out (lua/npu/model.lua)
local model = require("npu.model")
npu.model = model
npu.load_model, npu.import_graph_def, npu.export_graph_def, npu.export_saved_model =
  model.load_model, model.import_graph_def, model.export_graph_def, model.export_saved_model

-- Freezing a trained graph for deployment (lua/npu/graph_util.lua): tf.graph_util and
-- tf.compat.v1.graph_util
npu.graph_util = require("npu.graph_util")
npu.compat.v1 = npu.compat.v1 or {}
npu.compat.v1.graph_util = npu.graph_util

-- TensorFlow 1.15 names for imports and ported scripts (lua/npu/tf_extra.lua)
require("npu.tf_extra").install(npu)

-- TensorBoard summaries and event files (lua/npu/summary.lua)
require("npu.summary").install(npu)

-- npu.serve{...}: an npu-serve child process over a model base path (lua/npu/serve.lua)
require("npu.serve").install(npu)

return npu
