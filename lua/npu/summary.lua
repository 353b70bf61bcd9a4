--- npu.summary — TensorBoard summaries with TensorFlow 1.15's API (tf.summary), and event
-- files written and read back (docs/summaries.md).
--
--   npu.summary.scalar(name, tensor [, collections [, family]])
--   npu.summary.histogram(name, values [, collections [, family]])
--   npu.summary.image(name, tensor [, max_outputs = 3 [, collections [, family]]])
--   npu.summary.text(name, tensor [, collections])        tensor: a Lua string, or uint8 bytes
--   npu.summary.merge(inputs [, collections [, name]]), npu.summary.merge_all([key | graph])
-- are graph ops: they run on the device like any other (ops/summary.h) and output the
-- serialized Summary protocol buffer as a uint8 vector (the library has no string dtype:
-- npu.summary.bytes(t) gives it as a Lua string).  Fetched with an iterations_per_loop loop,
-- the summary is the last iteration's, and only that iteration computes it.
--
--   local w <close> = npu.summary.FileWriter(logdir [, graph [, {max_queue =, flush_secs =,
--                                             filename_suffix =}]])
--   w:add_summary(summary, global_step)   summary: a summary op's fetched value (or its bytes)
--   w:add_graph(graph), w:flush(), w:close(), w:get_logdir(), w:path()
-- writes events.out.tfevents.<time>.<host> on a thread of its own; a failed write (a full
-- disk, a removed logdir) is raised by the next flush or close.
--
--   for step, tag, value, item in npu.summary.read_events(path) do ... end
-- reads an event file back (CRCs checked; an incomplete last record ends the loop, as in
-- TensorBoard, and the reader's :truncated() says how many bytes it had).
-- @module npu.summary
local core = require("npu.core")
local errors = require("npu.errors")
local operands = require("npu.operands")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)

local M = {}
local npu -- set by install

-- The summaries of each graph, by collection key (tf.GraphKeys.SUMMARIES = "summaries").
local collections = setmetatable({}, { __mode = "k" })
local last_graph = setmetatable({}, { __mode = "v" })

local function collect(g, keys, s)
  collections[g] = collections[g] or {}
  for _, key in ipairs(keys or { "summaries" }) do
    if type(key) ~= "string" then
      errors.raise("npu.summary", "NPU_ERR_ARG", "a collection key must be a string, got " .. errors.typename(key))
    end
    local c = collections[g][key] or {}
    collections[g][key] = c
    c[#c + 1] = s
  end
  last_graph[1] = g
end

-- TensorFlow's tag cleaning (summary_op_util.clean_tag): characters other than letters,
-- digits, '_', '-', '/', '.' become '_'; a leading '/' is dropped.
local function clean_tag(name)
  return (tostring(name):gsub("[^%w_%-/%.]", "_"):gsub("^/+", ""))
end

-- A node name of g not taken yet: base, base_1, base_2, ... (what the graph would make).
local function unique_name(g, base)
  if not pcall(g.get_operation_by_name, g, base) then return base end
  for k = 1, math.huge do
    local name = base .. "_" .. k
    if not pcall(g.get_operation_by_name, g, name) then return name end
  end
end

local function graph_of(v) return operands.graph_of(npu, v) end

-- The arguments every summary takes: name a string, collections a list of keys (or nil), family
-- a string (or nil); TensorFlow's tag cleaning would otherwise turn a nil name into "nil".
local function check_common(where, name, collections_arg, family)
  if type(name) ~= "string" then
    errors.raise(where, "NPU_ERR_ARG", "name must be a string, got " .. errors.typename(name))
  end
  if collections_arg ~= nil then
    if type(collections_arg) ~= "table" or getmetatable(collections_arg) ~= nil then
      errors.raise(where, "NPU_ERR_ARG", "collections must be a list of keys ({\"summaries\"}), got "
        .. errors.typename(collections_arg))
    end
    errors.check_list(where, "collections", collections_arg)
  end
  if family ~= nil and type(family) ~= "string" then
    errors.raise(where, "NPU_ERR_ARG", "family must be a string, got " .. errors.typename(family))
  end
end

local function summary_op(op, name, family, input, attrs, collections_arg)
  check_common("npu.summary." .. op:gsub("_summary$", ""), name, collections_arg, family)
  local g = graph_of(input)
  local base = clean_tag(name)
  if family then base = clean_tag(family) .. "/" .. base end
  local node_name = unique_name(g, base)
  attrs.tag = node_name
  local s = g:op(op, { input }, attrs, node_name)
  collect(g, collections_arg, s)
  return s
end

--- A scalar summary op (`tf.summary.scalar`): outputs the serialized Summary protocol
-- buffer as a uint8 vector (npu.summary.bytes gives it as a string).
-- @tparam string name the tag (cleaned as TensorFlow cleans it, made unique)
-- @tparam Output tensor a scalar
-- @tparam[opt] {string,...} collections_arg the collections to add it to (default "summaries")
-- @tparam[opt] string family a tag prefix
-- @treturn Output
-- @usage npu.summary.scalar("loss", loss)
function M.scalar(name, tensor, collections_arg, family)
  return summary_op("scalar_summary", name, family, tensor, {}, collections_arg)
end

--- A histogram summary op (`tf.summary.histogram`), TensorFlow's bucket layout.
-- @tparam string name
-- @tparam Output values
-- @tparam[opt] {string,...} collections_arg
-- @tparam[opt] string family
-- @treturn Output
function M.histogram(name, values, collections_arg, family)
  return summary_op("histogram_summary", name, family, values, {}, collections_arg)
end

--- An image summary op (`tf.summary.image`): PNG images of a (batch, height, width, channels)
-- tensor, channels 1, 3 or 4.
-- @tparam string name
-- @tparam Output tensor
-- @tparam[opt=3] integer max_outputs the number of images of the batch kept
-- @tparam[opt] {string,...} collections_arg
-- @tparam[opt] string family
-- @treturn Output
function M.image(name, tensor, max_outputs, collections_arg, family)
  return summary_op("image_summary", name, family, tensor, { max_outputs = max_outputs or 3 },
    collections_arg)
end

--- A text summary op (`tf.summary.text`).
-- @tparam string name
-- @tparam string|Output tensor a Lua string (its bytes, UTF-8 for TensorBoard) or a uint8
--   vector of bytes
-- @tparam[opt] {string,...} collections_arg
-- @treturn Output
function M.text(name, tensor, collections_arg)
  check_common("npu.summary.text", name, collections_arg)
  if type(tensor) == "string" then
    tensor = npu.get_default_graph():const(core.bytes_tensor(tensor), "uint8")
  end
  return summary_op("text_summary", name, nil, tensor, {}, collections_arg)
end

--- One summary op merging others (`tf.summary.merge`).
-- @tparam {Output,...} inputs summary ops
-- @tparam[opt] {string,...} collections_arg
-- @tparam[opt="Merge/MergeSummary"] string name
-- @treturn Output
-- @raise NPU_ERR_ARG when inputs is not a non-empty list
function M.merge(inputs, collections_arg, name)
  local where = "npu.summary.merge"
  if type(inputs) ~= "table" or getmetatable(inputs) ~= nil or #inputs == 0 then
    errors.raise(where, "NPU_ERR_ARG", "a non-empty list of summaries expected, got "
      .. (type(inputs) == "table" and getmetatable(inputs) == nil and "an empty table" or errors.typename(inputs)))
  end
  errors.check_list(where, "inputs", inputs)
  if collections_arg ~= nil then check_common(where, "", collections_arg) end
  if name ~= nil and type(name) ~= "string" then
    errors.raise(where, "NPU_ERR_ARG", "name must be a string, got " .. errors.typename(name))
  end
  local g = graph_of(inputs[1])
  local m = g:op("merge_summary", inputs, nil, name or "Merge/MergeSummary")
  if collections_arg then collect(g, collections_arg, m) end
  return m
end

--- Every summary of a collection merged (`tf.summary.merge_all`).
-- @tparam[opt="summaries"] string|Graph key a collection key, or the graph to look in
--   (else the default graph when it has summaries, else the graph of the last summary made)
-- @tparam[opt] string scope only summaries whose names start with it
-- @tparam[opt] string name
-- @treturn ?Output nil when there is no summary
function M.merge_all(key, scope, name)
  local g
  if getmetatable(key) == core.Graph_mt then g, key = key, nil end
  if key ~= nil and type(key) ~= "string" then
    errors.raise("npu.summary.merge_all", "NPU_ERR_ARG", "key must be a collection key (a string) or "
      .. "an npu.Graph, got " .. errors.typename(key))
  end
  if scope ~= nil and type(scope) ~= "string" then
    errors.raise("npu.summary.merge_all", "NPU_ERR_ARG", "scope must be a string, got " .. errors.typename(scope))
  end
  key = key or "summaries"
  if not g then
    local default = npu.get_default_graph()
    g = collections[default] and collections[default][key] and default or last_graph[1] or default
  end
  local list = {}
  for _, s in ipairs(collections[g] and collections[g][key] or {}) do
    if scope == nil or s:name():find(scope, 1, true) == 1 then list[#list + 1] = s end
  end
  if #list == 0 then return nil end
  return M.merge(list, nil, name)
end

--- The bytes of a fetched summary (a uint8 tensor) as a Lua string.
-- @tparam Tensor|string t
-- @treturn string
function M.bytes(t)
  if type(t) == "string" then return t end
  return core.tensor_bytes(t)
end

-- FileWriter ---------------------------------------------------------------------------------

local FileWriter = {}
FileWriter.__index = FileWriter

local function step_of(v)
  if v == nil then return 0 end
  if npu.is_tensor(v) then v = v:item() end
  -- a number only: math.tointeger would also take the string "5"
  return type(v) == "number" and math.tointeger(v)
    or errors.raise("npu.summary.FileWriter", "NPU_ERR_ARG", "global_step must be an integer, got "
      .. (type(v) == "number" and tostring(v) or errors.typename(v)))
end

--- Queues a summary for writing (`tf.summary.FileWriter.add_summary`).
-- @function FileWriter:add_summary
-- @tparam Tensor|string summary a summary op's fetched value, or its bytes
-- @tparam[opt=0] integer|Tensor global_step
-- @raise NPU_ERR_ARG when global_step is not an integer
function FileWriter:add_summary(summary, global_step)
  self._w:add_summary(summary, step_of(global_step))
end
--- Writes a graph, for TensorBoard's graph view (`tf.summary.FileWriter.add_graph`).
-- @function FileWriter:add_graph
-- @tparam Graph graph
-- @tparam[opt=0] integer global_step
function FileWriter:add_graph(graph, global_step)
  self._w:add_graph(graph, step_of(global_step))
end
--- Writes what is queued (`flush`); raises a failed earlier write (a full disk, a removed
-- logdir).
-- @function FileWriter:flush
-- @raise NPU_ERR_IO
function FileWriter:flush() self._w:flush() end
--- Flushes and closes the file (`close`; also by `<close>`).
-- @function FileWriter:close
-- @raise NPU_ERR_IO for a failed write
function FileWriter:close() self._w:close() end
--- The directory given (`get_logdir`).
-- @function FileWriter:get_logdir
-- @treturn string
function FileWriter:get_logdir() return self._logdir end
--- The event file's path (events.out.tfevents.<time>.<host>).
-- @function FileWriter:path
-- @treturn string
function FileWriter:path() return self._w:path() end
FileWriter.__close = function(self) self._w:close() end

local WRITER_KEYS = { "max_queue", "flush_secs", "filename_suffix", "path" }
local WRITER_TYPES = { max_queue = "integer", flush_secs = "number", filename_suffix = "string", path = "string" }

--- An event file writer for TensorBoard (`tf.summary.FileWriter`), writing on a thread of
-- its own.  A to-be-closed value.
-- @tparam string logdir
-- @tparam[opt] Graph graph written first when given
-- @tparam[opt] table opts `max_queue` (10), `flush_secs` (120), `filename_suffix`, `path`
--   (the exact file)
-- @treturn FileWriter
-- @raise NPU_ERR_ARG for an unknown option; NPU_ERR_IO when the directory cannot be made
-- @usage local w <close> = npu.summary.FileWriter("/tmp/logs/run1", g)
-- w:add_summary(sess:run(merged), step)
function M.FileWriter(logdir, graph, opts)
  if type(logdir) ~= "string" then error("npu.summary.FileWriter: a logdir (string) expected", 2) end
  if opts == nil and type(graph) == "table" and getmetatable(graph) == nil then graph, opts = nil, graph end
  local where = "npu.summary.FileWriter"
  if opts ~= nil and (type(opts) ~= "table" or getmetatable(opts) ~= nil) then
    errors.raise(where, "NPU_ERR_ARG", "opts must be a table {max_queue =, flush_secs =, "
      .. "filename_suffix =}, got " .. errors.typename(opts))
  end
  errors.check_keys(where, opts, WRITER_KEYS)
  if opts then
    for k, want in pairs(WRITER_TYPES) do
      local v = opts[k]
      if v ~= nil and (want == "integer" and math.type(v) ~= "integer" or want ~= "integer" and type(v) ~= want) then
        errors.raise(where, "NPU_ERR_ARG", ("%s must be %s, got %s"):format(k,
          want == "integer" and "an integer" or "a " .. want, type(v) == "number" and tostring(v) or errors.typename(v)))
      end
    end
  end
  if graph ~= nil and getmetatable(graph) ~= core.Graph_mt then
    errors.raise(where, "NPU_ERR_ARG", "graph must be an npu.Graph, got " .. errors.typename(graph))
  end
  local self = setmetatable({ _logdir = logdir, _w = core.event_writer_new(logdir, opts) }, FileWriter)
  if graph ~= nil then self:add_graph(graph) end
  return self
end
M.FileWriterCache = nil

-- Reading ------------------------------------------------------------------------------------

--- Reads an event file back (CRCs checked; an incomplete last record ends the loop, as in
-- TensorBoard).
-- @tparam string path
-- @treturn function an iterator giving `step, tag, value, item` (item: `{kind, step, wall_time,
--   offset, tag, value, plugin_name}`, kind "file_version", "graph", "scalar", "histogram",
--   "image", "tensor" or "other"), the reader (`reader:truncated()`), nil, and the reader
--   as the loop's closing value
-- @raise NPU_ERR_IO when the file cannot be opened
-- @usage for step, tag, value in npu.summary.read_events(path) do print(step, tag, value) end
function M.read_events(path)
  if type(path) ~= "string" then
    errors.raise("npu.summary.read_events", "NPU_ERR_ARG", "path must be a string, got " .. errors.typename(path))
  end
  local reader = core.event_reader_open(path)
  local function iter(r)
    local item = r:next()
    if item == nil then return nil end
    return item.step, item.tag, item.value, item
  end
  return iter, reader, nil, reader
end

--- Installs the module as npu.summary (done by `require "npu"`).
-- @tparam table npu_module the npu module
-- @treturn table this module
function M.install(npu_module)
  npu = npu_module
  npu.summary = M
  return M
end

return M
