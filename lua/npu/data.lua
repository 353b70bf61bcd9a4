--- npu.data — input pipelines as tf.data describes them, produced on the device side by a
-- producer thread while the graph computes.
--
--   local ds = npu.data.Dataset.from_tensor_slices({x = images, y = labels})
--     :shuffle(1000, {seed = 7}):batch(64, {drop_remainder = true}):repeat_():prefetch(2)
--   local it = ds:make_one_shot_iterator(g)
--   local batch = it:get_next()          -- {x = Output, y = Output}: graph outputs
--   for b in ds:iterate() do ... end      -- or on the host: {x = Tensor, y = Tensor}
--
-- Components: a single npu.Tensor (elements are tensors), a list of tensors (elements are
-- lists) or a string-keyed table (elements are tables with the same keys; components are
-- kept in sorted key order).  Plain Lua tables of numbers are converted with npu.tensor
-- (float32).  Semantics, shuffle's generator included, are specified in npu.h ("datasets"):
-- a seed gives the same order on every machine; the default seed is 0 (reproducible: the
-- library has no global random state).
--
-- The end of the data is an error whose message carries "NPU_ERR_OUT_OF_RANGE":
-- npu.error_code(err) == npu.errors.OutOfRangeError.
local core = require("npu.core")

local data = {}
data.errors = { OutOfRangeError = "NPU_ERR_OUT_OF_RANGE" }

local Tensor_mt = core.Tensor_mt
local function is_tensor(v) return getmetatable(v) == Tensor_mt end

local Dataset = {}
Dataset.__index = Dataset
data.Dataset = Dataset

-- structure: { kind = "single" | "list" | "keys", keys = {sorted keys} (kind "keys"), n = n }
local function wrap(handle, structure)
  return setmetatable({ _handle = handle, _structure = structure }, Dataset)
end

--- Is v a dataset of this module?
function data.is_dataset(v) return getmetatable(v) == Dataset end

local function to_tensor(v, what)
  if is_tensor(v) then return v end
  if type(v) == "table" or type(v) == "number" then return core.tensor(v) end
  error(("npu.data.Dataset.from_tensor_slices: %s is a %s, expected an npu.Tensor or a table "
    .. "of numbers"):format(what, type(v)), 3)
end

--- Dataset.from_tensor_slices(tensor | {t1, t2, ...} | {key = tensor, ...}): the slices of
-- the components along their first dimension (all the same size).
function Dataset.from_tensor_slices(x)
  local components, structure
  if is_tensor(x) then
    components, structure = { x }, { kind = "single", n = 1 }
  elseif type(x) == "table" then
    local n_str, n_int, all_tensors = 0, 0, true
    for k, v in pairs(x) do
      if type(k) == "string" then n_str = n_str + 1
      elseif math.type(k) == "integer" then n_int = n_int + 1
      else error("npu.data.Dataset.from_tensor_slices: keys must be strings or list indices", 2) end
      if not is_tensor(v) then all_tensors = false end
    end
    if n_str > 0 and n_int > 0 then
      error("npu.data.Dataset.from_tensor_slices: a table of components is a list or a "
        .. "string-keyed table, not both", 2)
    elseif n_str > 0 then
      local keys = {}
      for k in pairs(x) do keys[#keys + 1] = k end
      table.sort(keys)
      components = {}
      for i, k in ipairs(keys) do components[i] = to_tensor(x[k], ("component '%s'"):format(k)) end
      structure = { kind = "keys", keys = keys, n = #keys }
    elseif n_int > 0 and all_tensors then
      if n_int ~= #x then error("npu.data.Dataset.from_tensor_slices: the list of components has holes", 2) end
      components = {}
      for i = 1, n_int do components[i] = x[i] end
      structure = { kind = "list", n = n_int }
    elseif n_int > 0 then -- nested numbers: one tensor
      components, structure = { to_tensor(x, "the table") }, { kind = "single", n = 1 }
    else
      error("npu.data.Dataset.from_tensor_slices: no components (empty table)", 2)
    end
  else
    error(("npu.data.Dataset.from_tensor_slices: expected an npu.Tensor or a table of them, got %s")
      :format(type(x)), 2)
  end
  return wrap(core.dataset_from_tensors(components), structure)
end

--- ds:shuffle(buffer_size, {seed = 0, reshuffle_each_iteration = true}) (or a seed number).
function Dataset:shuffle(buffer_size, opts)
  local seed, reshuffle
  if type(opts) == "number" then seed = opts
  elseif type(opts) == "table" then seed, reshuffle = opts.seed, opts.reshuffle_each_iteration
  elseif opts ~= nil then error("npu.Dataset:shuffle: argument 2 must be an options table or a seed", 2) end
  if reshuffle == nil then reshuffle = true end
  return wrap(self._handle:shuffle(buffer_size, seed or 0, reshuffle), self._structure)
end

--- ds:batch(batch_size, {drop_remainder = false}) (or a boolean).
function Dataset:batch(batch_size, opts)
  local drop = opts
  if type(opts) == "table" then drop = opts.drop_remainder end
  return wrap(self._handle:batch(batch_size, drop and true or false), self._structure)
end

--- ds:repeat_(count): count times over (nil or -1: forever).  `repeat` is a Lua keyword.
function Dataset:repeat_(count)
  return wrap(self._handle:repeat_(count), self._structure)
end

--- ds:prefetch(buffer_size): elements produced ahead (-1: AUTOTUNE: about 4 MiB of elements, 2 to 1024, as without a prefetch).
function Dataset:prefetch(buffer_size)
  return wrap(self._handle:prefetch(buffer_size or -1), self._structure)
end

--- ds:shard(num_shards, index): the elements i (from 0, per pass) with
-- i % num_shards == index, as tf.data's shard (one worker's part of the data).
function Dataset:shard(num_shards, index)
  return wrap(self._handle:shard(num_shards, index), self._structure)
end

--- Elements per pass (-1: infinite).
function Dataset:cardinality() return self._handle:cardinality() end

-- Puts values (one per component, in component order) into the dataset's structure.
local function structured(structure, values)
  if structure.kind == "single" then return values[1] end
  if structure.kind == "list" then return values end
  local t = {}
  for i, k in ipairs(structure.keys) do t[k] = values[i] end
  return t
end

--- The element's spec: {dtype = , shape = } per component, in the dataset's structure
-- (shape entries -1 for a batch dim that may be partial).
function Dataset:element_spec()
  local specs = {}
  for i = 1, self._structure.n do
    specs[i] = { dtype = self._handle:dtype(i), shape = self._handle:shape(i) }
  end
  return structured(self._structure, specs)
end

-- A host iterator: get_next() raises at the end (NPU_ERR_OUT_OF_RANGE), next() gives nil.
local HostIterator = {}
HostIterator.__index = HostIterator
HostIterator.__close = function(self) self:close() end

function HostIterator:get_next()
  return structured(self._structure, table.pack(self._it:get_next()))
end
function HostIterator:next()
  local first = table.pack(self._it:next())
  if first[1] == nil then return nil end
  return structured(self._structure, first)
end
--- Stops the producer thread now (the garbage collector would, later).
function HostIterator:close() self._it:close() end

--- ds:iterator(): an iterator on the host (a producer thread starts now).
function Dataset:iterator()
  return setmetatable({ _it = self._handle:iterator(), _structure = self._structure }, HostIterator)
end

--- for element in ds:iterate() do ... end: the elements as npu.Tensors on the host (in the
-- dataset's structure).  Leaving the loop early (break) stops the producer at once.
function Dataset:iterate()
  local it = self:iterator()
  return HostIterator.next, it, nil, it
end

-- The graph's one-shot iterator: one iterator_get_next node per iterator object.
local GraphIterator = {}
GraphIterator.__index = GraphIterator

--- ds:make_one_shot_iterator(graph): graph defaults to npu's default graph.
function Dataset:make_one_shot_iterator(g, name)
  if g == nil then
    local npu = package.loaded["npu"] or require("npu")
    g = npu.get_default_graph()
  end
  if getmetatable(g) ~= core.Graph_mt then
    error("npu.Dataset:make_one_shot_iterator: argument 1 must be an npu.Graph", 2)
  end
  local id = core.graph_add_dataset(g, self._handle)
  local node = g:add_op("iterator_get_next", {}, { dataset = id }, name or "IteratorGetNext")
  local outs = {}
  for i = 1, self._structure.n do outs[i] = g:output(node, i - 1) end
  local it = setmetatable({ graph = g, dataset = self, node = node,
    _outputs = structured(self._structure, outs) }, GraphIterator)
  --- it:get_next() (or it.get_next(), as TensorFlow scripts write it): the element as graph
  -- outputs, in the dataset's structure.  Every call gives the same node's outputs: a session
  -- runs one iterator per node, advanced once per step.
  it.get_next = function() return it._outputs end
  return it
end

data.Iterator = GraphIterator

return data
