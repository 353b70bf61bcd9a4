--- npu.errors — the errors npu raises, as values.
--
-- Every error raised by npu (by the C binding or by this facade) is an `npu.Error`: a table
--
--     { code = "NPU_ERR_SHAPE", number = 4, message = "<the detail>", where = "npu.Session:run",
--       node = "<node name>" or nil, op = "<op name>" or nil, position = "train.lua:12",
--       text = "npu.Session:run: NPU_ERR_SHAPE: <the detail>" }
--
-- `tostring(err)` is "<position>: <text>", the text a string error would have had, where
-- `position` is the caller's line (the innermost frame outside npu's own files), not a line of
-- npu.  String methods work on it as on that text (`err:match(...)`, `err:find(...)`) and `..`
-- concatenates it.  Tell errors apart by class, as in TensorFlow:
--
--     local ok, err = pcall(it.get_next, it)
--     if npu.errors.is(err, npu.errors.OutOfRangeError) then ... end
--
-- Each status code has one class (`npu.errors.ShapeError`, ...); `npu.errors.Error` is the
-- base of all, and `InvalidArgumentError` the base of the argument-like ones (ARG, DTYPE,
-- SHAPE, OPTION, CONFLICT).  `npu.error_code(err)` gives the code name.
-- @module npu.errors
local core = require("npu.core")

local errors = {}
local Error_mt = core.Error_mt

-- Classes ----------------------------------------------------------------------------------

local Class_mt = { __tostring = function(c) return "npu.errors." .. c.name end }
local by_code = {}

local function class(name, code, parent)
  local c = setmetatable({ name = name, code = code, parent = parent }, Class_mt)
  errors[name] = c
  if code then by_code[code] = c end
  return c
end

--- The base class: every npu error is one.
errors.Error = class("Error")
local invalid = class("InvalidArgumentError", "NPU_ERR_ARG", errors.Error)
-- TensorFlow's names where TensorFlow has one; the status list (npu.h) is the authority: a
-- code added there and missing here gets a class named after it (NPU_ERR_FOO -> FooError).
local names = {
  NPU_ERR_NOMEM = { "ResourceExhaustedError" },
  NPU_ERR_DTYPE = { "DTypeError", invalid },
  NPU_ERR_SHAPE = { "ShapeError", invalid },
  NPU_ERR_OPTION = { "OptionError", invalid },
  NPU_ERR_CONFLICT = { "ConflictError", invalid },
  NPU_ERR_NOT_FOUND = { "NotFoundError" },
  NPU_ERR_STATE = { "FailedPreconditionError" },
  NPU_ERR_IO = { "IOError" },
  NPU_ERR_FORMAT = { "DataLossError" },
  NPU_ERR_UNSUPPORTED = { "UnimplementedError" },
  NPU_ERR_OUT_OF_RANGE = { "OutOfRangeError" },
  NPU_ERR_CALLBACK = { "CallbackError" },
  NPU_ERR_CANCELLED = { "CancelledError" },        -- npu_session_cancel, Ctrl-C
  NPU_ERR_TIMEOUT = { "DeadlineExceededError" },   -- timeout_in_ms, op_*_timeout
  NPU_ERR_INTERNAL = { "InternalError" },
}
for _, code in ipairs(core.status_names()) do
  if code ~= "NPU_OK" and not by_code[code] then
    local n = names[code]
    local name = n and n[1] or (code:gsub("^NPU_ERR_", ""):lower():gsub("^%l", string.upper)
      :gsub("_(%l)", string.upper) .. "Error")
    class(name, code, n and n[2] or errors.Error)
  end
end

--- Whether v is an npu error (an npu.Error value).
-- @param v any value
-- @treturn boolean
function errors.is_error(v) return getmetatable(v) == Error_mt end

--- Whether err is an npu error of class cls or of a class derived from it (TensorFlow's
-- `except tf.errors.OutOfRangeError`).
-- @param err any value (what pcall returned)
-- @tparam table|string cls a class (`npu.errors.ShapeError`) or a code name ("NPU_ERR_SHAPE")
-- @treturn boolean
-- @usage if npu.errors.is(err, npu.errors.OutOfRangeError) then break end
function errors.is(err, cls)
  if getmetatable(err) ~= Error_mt then return false end
  if type(cls) == "string" then return err.code == cls end
  local c = by_code[err.code] or errors.Error
  while c do
    if c == cls then return true end
    c = c.parent
  end
  return false
end

--- The class of an npu error (also `err.class`).
-- @param err any value
-- @treturn ?table the class, nil for a value that is not an npu error
function errors.class_of(err)
  if getmetatable(err) ~= Error_mt then return nil end
  return by_code[err.code] or errors.Error
end

-- Error values read like their text -------------------------------------------------------

Error_mt.__index = function(err, k)
  if k == "class" then return errors.class_of(err) end
  local f = string[k]
  if f then return function(self, ...) return f(tostring(self), ...) end end
end
Error_mt.__concat = function(a, b) return tostring(a) .. tostring(b) end

-- Raising ------------------------------------------------------------------------------------

--- Raises an npu error whose text is "<where>: <code>: <message>" (the message alone when
-- where is nil), positioned at the script's line.  Used by npu's own Lua files; scripts may
-- use it too.
-- @tparam ?string where the function raising, "npu.Session:run"
-- @tparam table|string code a class or a code name ("NPU_ERR_ARG")
-- @tparam string message
-- @tparam[opt] string node the node concerned
-- @tparam[opt] string op its op
-- @raise always
function errors.raise(where, code, message, node, op)
  if getmetatable(code) == Class_mt then code = code.code or "NPU_ERR_INTERNAL" end
  core.raise(where, code, message, node, op)
end

--- `error` for npu's own files: an npu error value passes unchanged, a string becomes an
-- InvalidArgumentError whose text is the string (no level argument needed: the position is
-- always the caller's line).
-- @param message an npu error or a string
-- @raise always
function errors.error(message)
  if getmetatable(message) == Error_mt or type(message) ~= "string" then error(message, 0) end
  core.raise(nil, "NPU_ERR_ARG", message)
end

--- Raises v exactly as it is (an error from a script's own callback).
-- @param v the error value
-- @raise always
function errors.rethrow(v) error(v, 0) end

--- Raises err again as the error of another function (same code, message, node and op); a
-- value that is not an npu error becomes "<where>: <tostring(value)>".
-- @param err the error caught
-- @tparam string where
-- @raise always
function errors.rewhere(err, where)
  if getmetatable(err) == Error_mt then core.raise(where, err.code, err.message, err.node, err.op) end
  core.raise(nil, "NPU_ERR_ARG", where .. ": " .. tostring(err))
end

--- The candidate a "did you mean" offers for an unknown name (the rule of every message of
-- the C library too).
-- @tparam string name
-- @tparam {string,...} candidates
-- @treturn ?string the nearest candidate, nil when none is near
function errors.suggest(name, candidates) return core.nearest(tostring(name), candidates) end

--- The type a message names for v: its metatable's __name ("npu.Output", "npu.Tensor") or
-- its Lua type ("string", "nil").
-- @param v any value
-- @treturn string
function errors.typename(v)
  local mt = getmetatable(v)
  local name = type(mt) == "table" and rawget(mt, "__name")
  return type(name) == "string" and name or type(v)
end

--- Raises an InvalidArgumentError when a function of n parameters was given more (the Lua
-- form of the binding's npuB_check_no_more): "<where>: argument 4: no argument expected here,
-- got table", so g:variable(init, "w", {trainable = false}) does not drop its options.
-- @tparam string where
-- @tparam integer n the parameters the function takes (self counted for a method)
-- @param ... the arguments after the n-th
function errors.check_no_more(where, n, ...)
  if select("#", ...) > 0 then
    core.raise(where, "NPU_ERR_ARG", ("argument %d: no argument expected here, got %s")
      :format(n + 1, errors.typename((...))))
  end
end

--- Raises an InvalidArgumentError when a list has a hole or a key that is not a position
-- (a nil in `{a, b, c}` from a misspelt variable would otherwise drop what follows it):
-- "<where>: <what> has a hole at 2 (a nil in the list?)".
-- @tparam string where
-- @tparam string what the list's name in the message
-- @tparam table t
function errors.check_list(where, what, t)
  local n = #t
  for i = 1, n do
    if t[i] == nil then
      core.raise(where, "NPU_ERR_ARG", ("%s has a hole at %d (a nil in the list?)"):format(what, i))
    end
  end
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then
      core.raise(where, "NPU_ERR_ARG", ("%s must be a list; it has key %s beyond its %d entries%s")
        :format(what, type(k) == "string" and "'" .. k .. "'" or tostring(k), n,
          math.type(k) == "integer" and " (a nil in the list?)" or ""))
    end
  end
end

--- Raises an InvalidArgumentError naming the first key of t (in sorted order) that is not
-- known, with the nearest known one: "<where>: unknown keyword 'actvation' (did you mean
-- 'activation'?)".  Does nothing when t is not a table.
-- @tparam string where
-- @param t the table of options
-- @tparam {string,...} known
-- @tparam[opt="keyword"] string what what a key is called in the message
function errors.check_keys(where, t, known, what)
  if type(t) ~= "table" then return end
  local set, bad = {}, {}
  for _, k in ipairs(known) do set[k] = true end
  for k in pairs(t) do
    if not set[k] then bad[#bad + 1] = tostring(k) end
  end
  if #bad == 0 then return end
  table.sort(bad)
  local best = core.nearest(bad[1], known)
  core.raise(where, "NPU_ERR_ARG", ("unknown %s '%s' %s"):format(what or "keyword", bad[1],
    best and ("(did you mean '" .. best .. "'?)") or ("(known: " .. table.concat(known, ", ") .. ")")))
end

-- The facade's own files: the position of an error skips their frames.
core.set_facade_dir((debug.getinfo(1, "S").source:match("^(@.*[/\\])errors%.lua$")) or "@npu/")

return errors
