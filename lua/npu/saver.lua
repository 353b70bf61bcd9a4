--- npu.train.Saver — checkpoints of variables as safetensors files (Python's `safetensors`
-- reads what this writes, and the other way round).
--
--   local saver = npu.train.Saver()          -- every variable of the default graph
--   local saver = npu.train.Saver(g)         -- every variable of graph g
--   local saver = npu.train.Saver({w, b})    -- those variables, under their node names
--   local saver = npu.train.Saver({weights = w, bias = b})   -- under those names
--   saver:save(sess, "model.safetensors")
--   saver:restore(sess, "model.safetensors")
--
-- save fetches the variables' values with one sess:run; restore runs, with one sess:run,
-- assign ops fed from placeholders — built once per saver, the first time it restores.
-- A variable missing from the file, or held there with another shape or dtype, is an error
-- naming the variable; nothing is assigned then.
-- @module npu.train.Saver
local core = require("npu.core")
local errors = require("npu.errors")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)

local M = {}

local Saver = {}
Saver.__index = Saver
M.SaverClass = Saver

local function is_output(v) return getmetatable(v) == core.Output_mt end

local function shape_str(s)
  local parts = {}
  for i, d in ipairs(s) do parts[i] = tostring(d) end
  return "[" .. table.concat(parts, ",") .. "]"
end

--- Checkpoints of variables as safetensors files (`tf.train.Saver`); Python's `safetensors`
-- reads what it writes, and the other way round.  Also npu.train.Saver.
-- @tparam[opt] Graph|table var_list nil (the default graph's variables), a graph (its
--   variables), a list of variables (saved under their node names) or a table name ->
--   variable
-- @tparam[opt] table opts `{metadata = {key = "value"}}`: the file header's `__metadata__`
-- @treturn Saver
-- @raise NPU_ERR_ARG when there are no variables or var_list holds something else
-- @usage local saver = npu.train.Saver({w, b})
-- saver:save(sess, "model.safetensors")
-- saver:restore(sess, "model.safetensors")
function M.Saver(var_list, opts)
  local entries = {} -- { name = , var = } in save order
  if var_list == nil or getmetatable(var_list) == core.Graph_mt then
    local g = var_list
    if g == nil then
      local npu = package.loaded["npu"] or require("npu")
      g = npu.get_default_graph()
    end
    var_list = g:global_variables()
    if #var_list == 0 then error("npu.train.Saver: the graph has no variables to save", 2) end
  end
  if type(var_list) ~= "table" then
    error("npu.train.Saver: var_list must be nil, an npu.Graph or a table of variables", 2)
  end
  if #var_list > 0 then
    for i, v in ipairs(var_list) do
      if not is_output(v) then error(("npu.train.Saver: var_list[%d] is not a variable (an npu.Output)"):format(i), 2) end
      entries[i] = { name = v:op():name(), var = v }
    end
  else
    local names = {}
    for k in pairs(var_list) do
      if type(k) ~= "string" then error("npu.train.Saver: a var_list table must be a list or map names to variables", 2) end
      names[#names + 1] = k
    end
    table.sort(names)
    for i, k in ipairs(names) do
      if not is_output(var_list[k]) then error(("npu.train.Saver: var_list['%s'] is not a variable"):format(k), 2) end
      entries[i] = { name = k, var = var_list[k] }
    end
  end
  local seen = {}
  for _, e in ipairs(entries) do
    if e.var:op():type() ~= "variable" then
      error(("npu.train.Saver: '%s' is not a variable (op %s)"):format(e.name, e.var:op():type()), 2)
    end
    if seen[e.name] then error(("npu.train.Saver: two variables named '%s'"):format(e.name), 2) end
    seen[e.name] = true
  end
  if #entries == 0 then error("npu.train.Saver: no variables to save", 2) end
  local metadata
  if opts and opts.metadata then
    local parts = {}
    for k, v in pairs(opts.metadata) do
      parts[#parts + 1] = ("%q:%q"):format(tostring(k), tostring(v))
    end
    table.sort(parts)
    metadata = "{" .. table.concat(parts, ",") .. "}"
  end
  return setmetatable({ _entries = entries, _metadata = metadata }, Saver)
end

--- The variables saved, as `{name, variable}` pairs in save order.
-- @treturn table
function Saver:variables()
  local list = {}
  for i, e in ipairs(self._entries) do list[i] = { e.name, e.var } end
  return list
end

--- Writes the variables' current values, fetched with one Session:run
-- (`tf.train.Saver.save`).
-- @tparam Session sess
-- @tparam string path
-- @treturn string path
-- @raise NPU_ERR_IO when the file cannot be written
function Saver:save(sess, path)
  if type(path) ~= "string" then error("npu.train.Saver:save: path must be a string", 2) end
  local vars, names = {}, {}
  for i, e in ipairs(self._entries) do vars[i], names[i] = e.var, e.name end
  local values = sess:run(vars)
  core.safetensors_save(path, names, values, self._metadata)
  return path
end

-- The assign ops of restore, built once: a placeholder per variable.
function Saver:_restore_ops()
  if self._assigns then return self._assigns end
  local npu = package.loaded["npu"] or require("npu")
  local assigns = {}
  for i, e in ipairs(self._entries) do
    local g = e.var:graph()
    local ph = g:placeholder(e.var:dtype(), e.var:shape(), "save/restore_" .. e.name:gsub("[^%w_]", "_"))
    assigns[i] = { ph = ph, op = npu.assign(e.var, ph):op() }
  end
  self._assigns = assigns
  return assigns
end

--- Assigns every variable its value in the file, with one Session:run
-- (`tf.train.Saver.restore`).  A variable missing from the file, or held there with another
-- shape or dtype, is an error naming it, and then nothing is assigned.
-- @tparam Session sess
-- @tparam string path
-- @treturn ?string the file's metadata as JSON text, nil when it has none
-- @raise NPU_ERR_NOT_FOUND for a missing variable; NPU_ERR_SHAPE / NPU_ERR_DTYPE for a
--   mismatch; NPU_ERR_IO / NPU_ERR_FORMAT for an unreadable file
function Saver:restore(sess, path)
  local where = "npu.train.Saver:restore"
  if type(path) ~= "string" then error("npu.train.Saver:restore: path must be a string", 2) end
  local names, tensors, metadata = core.safetensors_load(path)
  local by_name = {}
  for i, n in ipairs(names) do by_name[n] = tensors[i] end
  -- check everything before assigning anything
  for _, e in ipairs(self._entries) do
    local t = by_name[e.name]
    if t == nil then
      errors.raise(where, "NPU_ERR_NOT_FOUND", ("variable '%s' is not in '%s'"):format(e.name, path))
    end
    local want, got = e.var:shape(), t:shape()
    local same = #want == #got
    for d = 1, #want do same = same and want[d] == got[d] end
    if not same then
      errors.raise(where, "NPU_ERR_SHAPE", ("variable '%s' is %s but '%s' holds %s")
        :format(e.name, shape_str(want), path, shape_str(got)))
    end
    if t:dtype() ~= e.var:dtype() then
      errors.raise(where, "NPU_ERR_DTYPE", ("variable '%s' is %s but '%s' holds %s")
        :format(e.name, e.var:dtype(), path, t:dtype()))
    end
  end
  local assigns = self:_restore_ops()
  local targets, feeds = {}, {}
  for i, e in ipairs(self._entries) do
    targets[i] = assigns[i].op
    feeds[assigns[i].ph] = by_name[e.name]
  end
  sess:run(targets, feeds)
  return metadata
end

return M
