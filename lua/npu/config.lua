--- npu.config — the Lua look-alike of TensorFlow's ConfigProto, so that a TF-on-Ascend script
-- ports line by line.  For example:
--
--   local config = npu.ConfigProto()
--   local custom_op = config.graph_options.rewrite_options.custom_optimizers:add()
--   custom_op.name = "NpuOptimizer"
--   custom_op.parameter_map["graph_run_mode"].i = 0
--   custom_op.parameter_map["precision_mode"].s = npu.compat.as_bytes("force_fp16")
--   config.graph_options.rewrite_options.remapping = npu.RewriterConfig.OFF
--
-- Rules (stricter than the reference adapter, which reads a mistyped entry as empty):
--   * every parameter_map assignment is validated at once, and an error points at the line
--     that made it: an unknown option (the nearest name is suggested), the wrong setter for the
--     option's type (.i on a string option), a value outside the allowed set or range;
--   * reading parameter_map["x"].i returns what was set through .i, nil when nothing was;
--     reading a setter of the wrong type is an error;
--   * custom_op.name must be "NpuOptimizer": lua-npu runs no other custom optimizer, so any
--     other name is an error at the line that set it (clearer than a session that silently
--     ignores the options); a custom optimizer left without a name is an error when the
--     session is created;
--   * the other ConfigProto fields TensorFlow 1.15 really has (allow_soft_placement,
--     log_device_placement, gpu_options.allow_growth, intra_op_parallelism_threads, the
--     RewriterConfig toggles such as remapping and memory_optimization, ...) are type-checked,
--     stored and ignored: they have no effect here.  A field TensorFlow does not have is an
--     error (typos are caught).
--
-- config.to_options(x [, base]) turns x into an npu.Options userdata, starting from a copy of
-- `base` (an npu.Options, e.g. the initialize_system options) when given:
--   * x = nil: base's copy, or all defaults;
--   * x = a ConfigProto: its NpuOptimizer parameter_map;
--   * x = an npu.Options: its values (those set) over base;
--   * x = an npu.NPURunConfig: its session_config's parameter_map, its named options and its
--     experimental_config (an option given by two of them is an error);
--   * x = a flat table {precision_mode = "force_fp16", graph_run_mode = 0}: converted by each
--     option's declared type — a Lua integer for .i, a string for .s, a boolean for .b, a
--     number for .f.  An integer given for a string option whose allowed values are all
--     numbers (aoe_mode "1|2|4", quant_dumpable, ac_parallel_enable "0|1") is converted to its
--     decimal string, since that is unambiguous; any other mismatch is an error naming the
--     option, the type it takes and the type given.
-- Errors raised by to_options point at the caller's caller (level 3): the npu.Session{} line.
--
-- npu.compat.as_bytes / as_text / as_str are the identity (Lua strings are bytes), so that
-- tf.compat.as_bytes("...") ports as npu.compat.as_bytes("...").
-- @module npu.config
local core = require("npu.core")
local errors = require("npu.errors")
local error, raise = errors.error, errors.raise

local M = {}

--- `tf.compat.as_bytes`, `as_text`, `as_str`: the identity (Lua strings are bytes), so that
-- `tf.compat.as_bytes("force_fp16")` ports as `npu.compat.as_bytes("force_fp16")`.
-- @function npu.compat.as_bytes
-- @tparam string s
-- @treturn string s
local function identity(s) return s end
M.compat = { as_bytes = identity, as_text = identity, as_str = identity }

--- RewriterConfig enums (tensorflow/core/protobuf/rewriter_config.proto), as npu.RewriterConfig:
-- the Toggle values, MemOptType and NumIterationsType.  Fields set from Lua are stored and
-- type-checked, and have no effect here.
-- @table RewriterConfig
-- @field DEFAULT 0 (Toggle)
-- @field ON 1
-- @field OFF 2
-- @field AGGRESSIVE 3
-- @field DEFAULT_MEM_OPT 0 (MemOptType), also NO_MEM_OPT, MANUAL, HEURISTICS, ...
-- @field DEFAULT_NUM_ITERS 0 (NumIterationsType), also ONE, TWO
M.RewriterConfig = {
  -- Toggle
  DEFAULT = 0, ON = 1, OFF = 2, AGGRESSIVE = 3,
  -- MemOptType
  DEFAULT_MEM_OPT = 0, NO_MEM_OPT = 1, MANUAL = 2, HEURISTICS = 3, SWAPPING_HEURISTICS = 4,
  RECOMPUTATION_HEURISTICS = 5, SCHEDULING_HEURISTICS = 6,
  -- NumIterationsType
  DEFAULT_NUM_ITERS = 0, ONE = 1, TWO = 2,
}

-- Messages -------------------------------------------------------------------------------
-- A message is a table whose fields are declared by a schema: kind "int", "bool", "string",
-- "float", "message" (a nested message, created on first read), "repeated" (a list with
-- add/append/extend), "map" and "loose" (plain tables).  Unknown fields are errors.

local message_mt = {}
local schemas = {} -- message -> {typename, fields}
local values = setmetatable({}, { __mode = "k" }) -- message -> its field values

local function new_message(typename, fields, init)
  local m = setmetatable({}, message_mt)
  schemas[m] = { typename = typename, fields = fields }
  values[m] = {}
  if init then
    for k, v in pairs(init) do m[k] = v end
  end
  return m
end
setmetatable(schemas, { __mode = "k" })

local function field_spec(m, k, level)
  local s = schemas[m]
  local f = s.fields[k]
  if f == nil then
    error(("%s has no field '%s'"):format(s.typename, tostring(k)), level + 1)
  end
  return f, s
end

local function new_repeated(typename, make)
  local list = {}
  local r = {}
  function r.add(...)
    local self_or_init, init = ...
    if self_or_init == r then init = select(2, ...) else init = self_or_init end
    if not make then error(typename .. ".add: a list of scalars, use append", 2) end
    local item = make(init)
    list[#list + 1] = item
    return item
  end
  function r.append(a, b)
    local v = (a == r) and b or a
    if make then error(typename .. ".append: use add() for messages", 2) end
    list[#list + 1] = v
  end
  function r.extend(a, b)
    local t = (a == r) and b or a
    for _, v in ipairs(t) do r.append(v) end
  end
  return setmetatable(r, {
    __index = function(_, i) return list[i] end,
    __len = function() return #list end,
    __newindex = function() error(typename .. ": use add/append", 2) end,
    __ipairs = nil,
    __pairs = function() return ipairs(list) end,
  })
end

local scalar_check = {
  int = function(v) return math.type(v) == "integer" end,
  bool = function(v) return type(v) == "boolean" end,
  string = function(v) return type(v) == "string" end,
  float = function(v) return type(v) == "number" end,
}
local scalar_default = { int = 0, bool = false, string = "", float = 0.0 }

message_mt.__index = function(m, k)
  local f = field_spec(m, k, 2)
  local vals = values[m]
  local v = vals[k]
  if v ~= nil then return v end
  if f.kind == "message" then
    v = f.make()
  elseif f.kind == "repeated" then
    v = new_repeated(schemas[m].typename .. "." .. k, f.make)
  elseif f.kind == "map" or f.kind == "loose" then
    v = {}
  else
    return f.default ~= nil and f.default or scalar_default[f.kind]
  end
  vals[k] = v
  return v
end

message_mt.__newindex = function(m, k, v)
  local f, s = field_spec(m, k, 2)
  if f.kind == "message" or f.kind == "repeated" then
    error(("%s.%s: assignment not allowed to a message or list field"):format(s.typename, k), 2)
  end
  if f.kind == "map" or f.kind == "loose" then
    if type(v) ~= "table" then error(("%s.%s: expects a table"):format(s.typename, k), 2) end
  else
    local ok = scalar_check[f.kind](v)
    if f.kind == "int" and not ok and math.type(v) == "float" and math.tointeger(v) then
      v, ok = math.tointeger(v), true
    end
    if not ok then
      error(("%s.%s expects %s %s, got %s"):format(s.typename, k,
        f.kind == "int" and "an" or "a", f.kind, type(v)), 2)
    end
    if f.check then
      local why = f.check(v)
      if why then error(("%s.%s: %s"):format(s.typename, k, why), 2) end
    end
  end
  if f.set then f.set(m, v, 2) end
  values[m][k] = v
end

message_mt.__tostring = function(m) return schemas[m].typename .. "()" end

local function int(default) return { kind = "int", default = default } end
local function bool() return { kind = "bool" } end
local function str() return { kind = "string" } end
local function float() return { kind = "float" } end
local function loose() return { kind = "loose" } end
local function toggle()
  return { kind = "int", check = function(v)
    if v < 0 or v > 3 then return "a RewriterConfig Toggle: DEFAULT, ON, OFF or AGGRESSIVE" end
  end }
end

-- parameter_map ----------------------------------------------------------------------------

local attr_fields = { i = "i", s = "s", b = "b", f = "f" }
local setter_of = { i = "set_int", s = "set_string", b = "set_bool", f = "set_float" }
local lua_type_of = { i = "an integer", s = "a string", b = "a boolean", f = "a number" }

-- Raises err (from npu.Options:set_int, ...) again as the error of `where`: same code and
-- message ("<where>: NPU_ERR_OPTION: msg").
local rewhere = errors.rewhere

local function option_or_error(name, where, level)
  local info, msg = core.option_info(name)
  if not info then raise(where, "NPU_ERR_OPTION", msg) end
  return info
end

local function new_attr_value(op, name)
  local where = ('parameter_map["%s"]'):format(name)
  local info = option_or_error(name, where, 3)
  return setmetatable({}, {
    __index = function(_, k)
      local field = attr_fields[k]
      if not field then
        error(("%s.%s: an option value has .i, .s, .b or .f"):format(where, tostring(k)), 2)
      end
      if field ~= info.type then
        raise(where .. "." .. k, "NPU_ERR_OPTION", ("option '%s' takes .%s"):format(name, info.type))
      end
      local e = op._entries[name]
      return e and e.value or nil
    end,
    __newindex = function(_, k, v)
      local field = attr_fields[k]
      if not field then
        error(("%s.%s: an option value has .i, .s, .b or .f"):format(where, tostring(k)), 2)
      end
      local lhs = where .. "." .. k
      if field == "i" and math.type(v) == "float" and math.tointeger(v) then v = math.tointeger(v) end
      if field ~= info.type then
        raise(lhs, "NPU_ERR_OPTION", ("option '%s' takes .%s (%s), not .%s"):format(
          name, info.type, lua_type_of[info.type], k))
      end
      local ok_type = (k == "i" and math.type(v) == "integer") or (k == "s" and type(v) == "string")
        or (k == "b" and type(v) == "boolean") or (k == "f" and type(v) == "number")
      if not ok_type then
        error(("%s: expects %s, got %s"):format(lhs, lua_type_of[k], type(v)), 2)
      end
      local ok, err = pcall(op._options[setter_of[k]], op._options, name, v)
      if not ok then rewhere(err, lhs) end
      op._entries[name] = { field = k, value = v }
    end,
    __tostring = function() return where end,
  })
end

local function new_parameter_map(op)
  local proxies = {}
  return setmetatable({}, {
    __index = function(_, name)
      if type(name) ~= "string" then error("parameter_map: option names are strings", 2) end
      local p = proxies[name]
      if not p then
        p = new_attr_value(op, name)
        proxies[name] = p
      end
      return p
    end,
    __newindex = function(_, name)
      error(('parameter_map["%s"] = ...: set a value with .i, .s, .b or .f'):format(tostring(name)), 2)
    end,
    __pairs = function()
      local names = {}
      for n in pairs(op._entries) do names[#names + 1] = n end
      table.sort(names)
      local i = 0
      return function()
        i = i + 1
        local n = names[i]
        if n then return n, proxies[n] or new_attr_value(op, n) end
      end
    end,
  })
end

local custom_op_fields
local function new_custom_op(init)
  local op = new_message("CustomGraphOptimizer", custom_op_fields)
  -- private state, out of the schema's way
  rawset(op, "_options", core.options_new())
  rawset(op, "_entries", {})
  rawset(op, "_pm", new_parameter_map(op))
  if init then
    for k, v in pairs(init) do op[k] = v end
  end
  return op
end

custom_op_fields = {
  name = { kind = "string", set = function(_, v, level)
    if v ~= "NpuOptimizer" then
      local hint = (v:lower():gsub("[^%a]", "") == "npuoptimizer" or v:lower():find("npu"))
        and " (did you mean 'NpuOptimizer'?)" or ""
      error(("custom_op.name = '%s': lua-npu runs only the 'NpuOptimizer' custom optimizer%s")
        :format(v, hint), level + 1)
    end
  end },
  parameter_map = { kind = "message", make = nil }, -- replaced below by a rawget hook
}

-- parameter_map is read through the op's private proxy.
local base_index = message_mt.__index
message_mt.__index = function(m, k)
  if k == "parameter_map" and rawget(m, "_pm") then return rawget(m, "_pm") end
  return base_index(m, k)
end

-- ConfigProto and its parts (TensorFlow 1.15 field names) -----------------------------------

local rewriter_fields = {
  layout_optimizer = toggle(), constant_folding = toggle(), shape_optimization = toggle(),
  remapping = toggle(), arithmetic_optimization = toggle(), dependency_optimization = toggle(),
  loop_optimization = toggle(), function_optimization = toggle(), debug_stripper = toggle(),
  disable_model_pruning = bool(), scoped_allocator_optimization = toggle(),
  pin_to_host_optimization = toggle(), implementation_selector = toggle(),
  auto_mixed_precision = toggle(), disable_meta_optimizer = bool(),
  meta_optimizer_iterations = int(), min_graph_nodes = int(),
  memory_optimization = { kind = "int", check = function(v)
    if v < 0 or v > 6 then return "a RewriterConfig MemOptType (0..6; OFF reads as MANUAL)" end
  end },
  memory_optimizer_target_node_name_scope = str(), meta_optimizer_timeout_ms = int(),
  auto_parallel = loose(), fail_on_optimizer_errors = bool(), scoped_allocator_opts = loose(),
  optimizers = { kind = "repeated" },
  custom_optimizers = { kind = "repeated", make = new_custom_op },
  inter_optimizer_verifier_config = loose(), post_optimization_verifier_config = loose(),
}

local optimizer_options_fields = {
  do_common_subexpression_elimination = bool(), do_constant_folding = bool(),
  max_folded_constant_in_bytes = int(), do_function_inlining = bool(), opt_level = int(),
  global_jit_level = int(),
}

local graph_options_fields = {
  enable_recv_scheduling = bool(),
  optimizer_options = { kind = "message", make = function()
    return new_message("OptimizerOptions", optimizer_options_fields) end },
  build_cost_model = int(), build_cost_model_after = int(), infer_shapes = bool(),
  place_pruned_graph = bool(), enable_bfloat16_sendrecv = bool(), timeline_step = int(),
  rewrite_options = { kind = "message", make = function()
    return new_message("RewriterConfig", rewriter_fields) end },
}

local gpu_options_fields = {
  per_process_gpu_memory_fraction = float(), allow_growth = bool(), allocator_type = str(),
  deferred_deletion_bytes = int(), visible_device_list = str(),
  polling_active_delay_usecs = int(), polling_inactive_delay_msecs = int(),
  force_gpu_compatible = bool(), experimental = loose(),
}

local config_fields = {
  device_count = { kind = "map" },
  intra_op_parallelism_threads = int(), inter_op_parallelism_threads = int(),
  use_per_session_threads = bool(), session_inter_op_thread_pool = { kind = "repeated",
    make = function(init) return new_message("ThreadPoolOptionProto",
      { num_threads = int(), global_name = str() }, init) end },
  placement_period = int(), device_filters = { kind = "repeated" },
  gpu_options = { kind = "message", make = function()
    return new_message("GPUOptions", gpu_options_fields) end },
  allow_soft_placement = bool(), log_device_placement = bool(),
  graph_options = { kind = "message", make = function()
    return new_message("GraphOptions", graph_options_fields) end },
  operation_timeout_in_ms = int(), rpc_options = loose(), cluster_def = loose(),
  isolate_session_state = bool(), experimental = loose(),
}

local function is_config(v) return getmetatable(v) == message_mt and schemas[v].typename == "ConfigProto" end
M.is_config = is_config

--- A session configuration (`tf.ConfigProto`), for npu.Session{config =}: the NPU options
-- go in `graph_options.rewrite_options.custom_optimizers:add()`'s parameter_map, as in a
-- TF-on-Ascend script; every assignment is checked at once (an unknown option names the
-- nearest, a wrong setter or value is an error at that line).  Also npu.ConfigProto.
-- @tparam[opt] table init fields to set (`allow_soft_placement = true`, ...): TensorFlow
--   1.15's fields are stored and ignored; a field TensorFlow lacks is an error
-- @treturn table the ConfigProto message
-- @usage local config = npu.ConfigProto()
-- local custom_op = config.graph_options.rewrite_options.custom_optimizers:add()
-- custom_op.name = "NpuOptimizer"
-- custom_op.parameter_map["precision_mode"].s = "force_fp16"
function M.ConfigProto(init)
  if init ~= nil and type(init) ~= "table" then
    error("npu.ConfigProto: expects nothing or a table of fields", 2)
  end
  local ok, c = pcall(new_message, "ConfigProto", config_fields, init)
  if not ok then error(c) end
  return c
end

-- to_options ----------------------------------------------------------------------------

local Options_mt = core.Options_mt
local function is_options(v) return getmetatable(v) == Options_mt end

local function numeric_allowed(info)
  if not info.allowed or info.allowed == "" then return false end
  for tok in (info.allowed .. "|"):gmatch("([^|]*)|") do
    if not tok:match("^%-?%d+$") then return false end
  end
  return true
end

-- Converts a flat-table value to the option's declared type; returns value or nil, message.
local function convert(info, v)
  local t = info.type
  if t == "i" then
    local iv = math.tointeger(v)
    if type(v) == "number" and iv then return iv end
    return nil, ("option '%s' takes an integer (.i), got %s"):format(info.name, math.type(v) or type(v))
  elseif t == "s" then
    if type(v) == "string" then return v end
    if math.type(v) == "integer" and numeric_allowed(info) then return tostring(v) end
    return nil, ("option '%s' takes a string (.s), got %s%s"):format(info.name, type(v),
      type(v) == "number" and (" (write \"" .. tostring(v) .. "\")") or "")
  elseif t == "b" then
    if type(v) == "boolean" then return v end
    return nil, ("option '%s' takes a boolean (.b), got %s"):format(info.name, type(v))
  else
    if type(v) == "number" then return v + 0.0 end
    return nil, ("option '%s' takes a number (.f), got %s"):format(info.name, type(v))
  end
end

local function npu_optimizer(cfg)
  local found
  local list = cfg.graph_options.rewrite_options.custom_optimizers
  for i = 1, #list do
    local op = list[i]
    if op.name ~= "NpuOptimizer" then
      error(("config: custom optimizer #%d has no name: set custom_op.name = \"NpuOptimizer\""):format(i), 4)
    end
    if found then error("config: more than one NpuOptimizer custom optimizer", 4) end
    found = op
  end
  return found
end

--- Turns a ConfigProto, an NPURunConfig, an npu.Options, a flat table or nil into a new
-- npu.Options, starting from a copy of base when given (what npu.Session does with its
-- config or options, over npu.initialize_system's).
-- @param x the configuration, or nil
-- @tparam[opt] userdata base an npu.Options
-- @treturn userdata npu.Options
-- @raise NPU_ERR_OPTION for an unknown or invalid option; NPU_ERR_ARG for a value of the
--   wrong type
function M.to_options(x, base)
  if base ~= nil and not is_options(base) then error("to_options: base must be an npu.Options", 2) end
  local o = base and base:copy() or core.options_new()
  if x == nil then return o end
  if is_options(x) then
    for name, v in pairs(x:values()) do o:set(name, v) end
  elseif M.is_run_config(x) then
    local ok, err = pcall(M._run_config_options, x, o)
    if not ok then error(err, 3) end
  elseif is_config(x) then
    local op = npu_optimizer(x)
    if op then
      for name, v in pairs(op._options:values()) do o:set(name, v) end
    end
  elseif type(x) == "table" and getmetatable(x) == nil then
    local names = {}
    for k in pairs(x) do
      if type(k) ~= "string" then error("options: option names are strings, got " .. type(k), 3) end
      names[#names + 1] = k
    end
    table.sort(names) -- deterministic: the first bad option is always the same
    for _, name in ipairs(names) do
      local info, msg = core.option_info(name)
      if not info then raise("options", "NPU_ERR_OPTION", msg) end
      local v, why = convert(info, x[name])
      if v == nil then raise("options", "NPU_ERR_OPTION", why) end
      local ok, err = pcall(o.set, o, name, v)
      if not ok then rewhere(err, ("options.%s"):format(name)) end
    end
  else
    error("to_options: expected a ConfigProto, an NPURunConfig, an npu.Options or a table of options, got "
      .. type(x), 3)
  end
  return o
end

-- ExperimentalConfig, NPURunConfig, set_graph_exec_config ----------------------------------
-- npu.ExperimentalConfig{graph_compiler_cache_dir =, accelerate_train_mode =} (004): the two
-- options it names, validated by the option table when it is made.  It goes into a session
-- as the reference puts it into an estimator, through a run config:
--   local config = npu.NPURunConfig{experimental_config = exp, session_config = cfg}
--   local sess = npu.Session{graph = g, config = config}
-- or into one graph with npu.util.set_graph_exec_config(fetch, {experimental_config = exp}).

-- "unknown parameter 'x' (did you mean 'y'?)" among names (a list); the suggestion follows
-- the one rule of every "did you mean" (errors.suggest).
local function unknown(what, key, names)
  key = tostring(key)
  local best = errors.suggest(key, names)
  if best then
    return ("%s: unknown parameter '%s' (did you mean '%s'?)"):format(what, tostring(key), best)
  end
  return ("%s: unknown parameter '%s' (known: %s)"):format(what, tostring(key), table.concat(names, ", "))
end

local EXPERIMENTAL_NAMES = { "accelerate_train_mode", "graph_compiler_cache_dir" }
local EXPERIMENTAL_KNOWN = { accelerate_train_mode = true, graph_compiler_cache_dir = true }
local experimental_mt = {}
local experimental_values = setmetatable({}, { __mode = "k" })

-- Validates one ExperimentalConfig value through the option table; returns it or raises.
local function check_experimental(k, v, level)
  local what = "npu.ExperimentalConfig"
  if not EXPERIMENTAL_KNOWN[k] then error(unknown(what, k, EXPERIMENTAL_NAMES), level + 1) end
  if v == nil then return nil end
  if type(v) ~= "string" then
    error(("%s.%s: expects a string, got %s"):format(what, k, type(v)), level + 1)
  end
  local scratch = core.options_new()
  local ok, err = pcall(scratch.set_string, scratch, k, v)
  if not ok then rewhere(err, what .. "." .. k) end
  return v
end

experimental_mt.__index = function(e, k)
  if not EXPERIMENTAL_KNOWN[k] then error(unknown("npu.ExperimentalConfig", k, EXPERIMENTAL_NAMES), 2) end
  return experimental_values[e][k]
end
experimental_mt.__newindex = function(e, k, v)
  experimental_values[e][k] = check_experimental(k, v, 2)
end
experimental_mt.__pairs = function(e)
  return next, experimental_values[e], nil
end
experimental_mt.__tostring = function(e)
  local parts = {}
  for _, k in ipairs(EXPERIMENTAL_NAMES) do
    local v = experimental_values[e][k]
    if v ~= nil then parts[#parts + 1] = ("%s = %q"):format(k, v) end
  end
  return "npu.ExperimentalConfig{" .. table.concat(parts, ", ") .. "}"
end

local function is_experimental(v) return getmetatable(v) == experimental_mt end
M.is_experimental = is_experimental

--- The experimental options of TF Adapter's `ExperimentalConfig` (graph_compiler_cache_dir,
-- accelerate_train_mode, ...), for NPURunConfig or npu.util.set_graph_exec_config.  Also
-- npu.ExperimentalConfig.
-- @tparam[opt] table init `{accelerate_train_mode = "fast|step|0.9", ...}`
-- @treturn table
-- @raise NPU_ERR_ARG for an unknown parameter (naming the nearest) or a bad value
function M.ExperimentalConfig(init)
  if init ~= nil and (type(init) ~= "table" or getmetatable(init) ~= nil) then
    error("npu.ExperimentalConfig: expects a table of parameters", 2)
  end
  local vals = {}
  for k, v in pairs(init or {}) do vals[k] = check_experimental(k, v, 2) end
  local e = setmetatable({}, experimental_mt)
  experimental_values[e] = vals
  return e
end

-- NPURunConfig: the reference's estimator run configuration, reduced to what a session reads.
-- session_config (a ConfigProto) and experimental_config (an ExperimentalConfig) as in
-- NPURunConfig(experimental_config=..., session_config=...); any option of the table by name
-- (NPURunConfig(iterations_per_loop=..., precision_mode=...)); and the estimator's own
-- parameters, which have no session here: accepted, type-checked and ignored.
local ESTIMATOR_ONLY = { model_dir = "string", save_checkpoints_steps = "number",
  save_checkpoints_secs = "number", save_summary_steps = "number", keep_checkpoint_max = "number",
  keep_checkpoint_every_n_hours = "number", log_step_count_steps = "number",
  tf_random_seed = "number" }
local run_config_mt = { __tostring = function() return "npu.NPURunConfig" end }
local function is_run_config(v) return getmetatable(v) == run_config_mt end
M.is_run_config = is_run_config

--- TF Adapter's estimator run configuration (`NPURunConfig`), reduced to what a session
-- reads: session_config (a ConfigProto), experimental_config (an ExperimentalConfig) and any
-- option by name (`iterations_per_loop = 100`); the estimator's own parameters (model_dir,
-- save_checkpoints_steps, ...) are type-checked and ignored.  An option given twice is an
-- error.  Also npu.NPURunConfig.
-- @tparam[opt] table init
-- @treturn table for npu.Session{config =}
function M.NPURunConfig(init)
  if init ~= nil and (type(init) ~= "table" or getmetatable(init) ~= nil) then
    error("npu.NPURunConfig: expects a table of parameters", 2)
  end
  local rc = { options = {} }
  local names = {}
  for k in pairs(init or {}) do
    if type(k) ~= "string" then error("npu.NPURunConfig: parameter names are strings", 2) end
    names[#names + 1] = k
  end
  table.sort(names)
  for _, k in ipairs(names) do
    local v = init[k]
    if k == "session_config" then
      if not is_config(v) then error("npu.NPURunConfig.session_config: expects an npu.ConfigProto", 2) end
      rc.session_config = v
    elseif k == "experimental_config" then
      if not is_experimental(v) then
        error("npu.NPURunConfig.experimental_config: expects an npu.ExperimentalConfig", 2)
      end
      rc.experimental_config = v
    elseif ESTIMATOR_ONLY[k] then
      if type(v) ~= ESTIMATOR_ONLY[k] then
        error(("npu.NPURunConfig.%s: expects a %s, got %s"):format(k, ESTIMATOR_ONLY[k], type(v)), 2)
      end
    else
      local info = core.option_info(k)
      if not info then
        local list = { "session_config", "experimental_config" }
        for n in pairs(ESTIMATOR_ONLY) do list[#list + 1] = n end
        for _, o in ipairs(core.option_list()) do list[#list + 1] = o.name end
        error(unknown("npu.NPURunConfig", k, list), 2)
      end
      rc.options[k] = v
    end
  end
  -- validate now, so the error points at this line rather than at the session's
  local ok, err = pcall(M.to_options, setmetatable(rc, run_config_mt))
  if not ok then error(err, 0) end -- its position is already this caller's line
  return rc
end

-- The options of a run config, one source per option: the session_config's parameter_map,
-- the named options, then the experimental_config.  An option given by two of them is an error.
local function run_config_options(rc, o)
  local from = {}
  local function put(name, v, source)
    if from[name] then
      raise("npu.NPURunConfig", "NPU_ERR_CONFLICT", ("option '%s' is given by both %s and %s")
        :format(name, from[name], source))
    end
    from[name] = source
    local ok, err = pcall(o.set, o, name, v)
    if not ok then rewhere(err, ("npu.NPURunConfig: %s.%s"):format(source, name)) end
  end
  if rc.session_config then
    local op = npu_optimizer(rc.session_config)
    if op then
      for name, v in pairs(op._options:values()) do put(name, v, "session_config") end
    end
  end
  local names = {}
  for k in pairs(rc.options) do names[#names + 1] = k end
  table.sort(names)
  for _, name in ipairs(names) do
    local info = core.option_info(name)
    local v, why = convert(info, rc.options[name])
    if v == nil then raise("npu.NPURunConfig", "NPU_ERR_OPTION", why) end
    put(name, v, "the run config")
  end
  if rc.experimental_config then
    for _, k in ipairs(EXPERIMENTAL_NAMES) do
      local v = experimental_values[rc.experimental_config][k]
      if v ~= nil then put(k, v, "experimental_config") end
    end
  end
end
M._run_config_options = run_config_options

-- set_graph_exec_config's parameters (002 §7.3) and the option each stands for.
local GRAPH_PARAMS = { "dynamic_input", "dynamic_graph_execute_mode", "dynamic_inputs_shape_range",
  "is_train_graph", "experimental_config" }
local GRAPH_PARAM_TYPE = { dynamic_input = "boolean", dynamic_graph_execute_mode = "string",
  dynamic_inputs_shape_range = "string", is_train_graph = "boolean" }

-- Collects the (graph, node id) pairs fetch names: an Output (its op), an Operation, a tensor
-- or op name of the default graph, or a list of those.
local function fetch_nodes(fetch, list, depth)
  local mt = getmetatable(fetch)
  if mt == core.Output_mt then
    local op = fetch:op()
    list[#list + 1] = { op:graph(), op:id() }
  elseif mt == core.Operation_mt then
    list[#list + 1] = { fetch:graph(), fetch:id() }
  elseif type(fetch) == "string" then
    local g = M.get_default_graph()
    local ok, v
    if fetch:find(":", 1, true) then ok, v = pcall(g.get_tensor_by_name, g, fetch)
    else ok, v = pcall(g.get_operation_by_name, g, fetch) end
    if not ok then error(v) end
    fetch_nodes(v, list, depth)
  elseif type(fetch) == "table" and mt == nil and depth < 8 then
    for _, f in ipairs(fetch) do fetch_nodes(f, list, depth + 1) end
  else
    error(("fetch must be an Output, an Operation, a tensor or op name, or a list of them; got %s")
      :format(mt and tostring(fetch) or type(fetch)), 0)
  end
end

--- Options for the runs that reach a fetch, over the session's (TF Adapter's
-- `util.set_graph_exec_config`): the fetch's nodes carry them (export and import keep them
-- as attributes).  Parameters left out keep the session's values.  Also
-- npu.util.set_graph_exec_config.
-- @tparam Output|Operation|string|table fetch an Output, an Operation, a node or tensor name
--   of the default graph, or a list of them
-- @tparam table params `dynamic_input`, `dynamic_graph_execute_mode`,
--   `dynamic_inputs_shape_range`, `is_train_graph` (graph_run_mode 1 or 0),
--   `experimental_config` (an npu.ExperimentalConfig)
-- @return fetch
-- @raise NPU_ERR_ARG for an unknown parameter (naming the nearest) or a value of the wrong
--   type; NPU_ERR_OPTION for an invalid value
function M.set_graph_exec_config(fetch, params)
  local where = "npu.util.set_graph_exec_config"
  if params ~= nil and (type(params) ~= "table" or getmetatable(params) ~= nil) then
    error(where .. ": argument 2 must be a table of parameters", 2)
  end
  params = params or {}
  local o = core.options_new()
  for k, v in pairs(params) do
    if k == "experimental_config" then
      if not is_experimental(v) then error(where .. ".experimental_config: expects an npu.ExperimentalConfig", 2) end
    elseif not GRAPH_PARAM_TYPE[k] then
      error(unknown(where, k, GRAPH_PARAMS), 2)
    elseif type(v) ~= GRAPH_PARAM_TYPE[k] then
      error(("%s.%s: expects a %s, got %s"):format(where, k, GRAPH_PARAM_TYPE[k], type(v)), 2)
    end
  end
  local function set(setter, name, v, param)
    local ok, err = pcall(o[setter], o, name, v)
    if not ok then rewhere(err, where .. "." .. param) end
  end
  if params.dynamic_input ~= nil then set("set_bool", "dynamic_input", params.dynamic_input, "dynamic_input") end
  for _, k in ipairs({ "dynamic_graph_execute_mode", "dynamic_inputs_shape_range" }) do
    if params[k] ~= nil then set("set_string", k, params[k], k) end
  end
  if params.is_train_graph ~= nil then
    set("set_int", "graph_run_mode", params.is_train_graph and 1 or 0, "is_train_graph")
  end
  if params.experimental_config then
    for _, k in ipairs(EXPERIMENTAL_NAMES) do
      local v = experimental_values[params.experimental_config][k]
      if v ~= nil then set("set_string", k, v, "experimental_config." .. k) end
    end
  end
  local nodes = {}
  local ok, err = pcall(fetch_nodes, fetch, nodes, 0)
  if not ok then errors.rewhere(err, where) end
  for _, gn in ipairs(nodes) do
    local ok2, err2 = pcall(gn[1].set_exec_config, gn[1], gn[2], o)
    if not ok2 then rewhere(err2, where) end
  end
  return fetch
end

--- The options a node carries (set_graph_exec_config's), as `{option = value}`.  Also
-- npu.util.graph_exec_config.
-- @tparam Operation|Output op
-- @treturn ?table nil when the node carries none
function M.graph_exec_config(op)
  if getmetatable(op) == core.Output_mt then op = op:op() end
  if getmetatable(op) ~= core.Operation_mt then error("graph_exec_config: expects an Operation or an Output", 2) end
  local o = op:graph():exec_config(op:id())
  return o and o:values() or nil
end

-- the default graph, for fetches given by name (init.lua installs npu.get_default_graph)
M.get_default_graph = function() error("npu.config: no default graph", 2) end

return M
