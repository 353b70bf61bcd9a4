--- npu.data — input pipelines as tf.data describes them, produced on the device side by a
-- producer thread while the graph computes.
--
--   local ds = npu.data.Dataset.from_tensor_slices({x = images, y = labels})
--     :shuffle(1000, {seed = 7}):batch(64, {drop_remainder = true}):repeat_():prefetch(2)
--   local it = ds:make_one_shot_iterator(g)
--   local batch = it:get_next()          -- {x = Output, y = Output}: graph outputs
--   for b in ds:iterate() do ... end      -- or on the host: {x = Tensor, y = Tensor}
--
-- Also shard (C, on the producer thread), and map / filter / padded_batch (graph functions
-- evaluated once on the host when defined: see below and docs/training.md).  A batch that
-- keeps its short last batch runs on the device too: the session compiles a plan per element
-- shape.
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
-- @module npu.data
local core = require("npu.core")
local errors = require("npu.errors")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)

local data = {}
data.errors = { OutOfRangeError = errors.OutOfRangeError }

local Tensor_mt = core.Tensor_mt
local function is_tensor(v) return getmetatable(v) == Tensor_mt end

local Dataset = {}
Dataset.__index = Dataset
data.Dataset = Dataset

-- structure: { kind = "single" | "list" | "keys", keys = {sorted keys} (kind "keys"), n = n }
-- replayable: the dataset is finite and yields one order every time (no shuffle below, no
-- endless repeat), so map, filter and padded_batch may evaluate it once on the host.
local function wrap(handle, structure, replayable)
  return setmetatable({ _handle = handle, _structure = structure, _replayable = replayable },
    Dataset)
end

-- Puts values (one per component, in component order) into the dataset's structure.
local function structured(structure, values)
  if structure.kind == "single" then return values[1] end
  if structure.kind == "list" then return values end
  local t = {}
  for i, k in ipairs(structure.keys) do t[k] = values[i] end
  return t
end

--- Whether v is a dataset of this module.
-- @param v any value
-- @treturn boolean
function data.is_dataset(v) return getmetatable(v) == Dataset end

local function to_tensor(v, what)
  if is_tensor(v) then return v end
  if type(v) == "table" or type(v) == "number" then return core.tensor(v) end
  error(("npu.data.Dataset.from_tensor_slices: %s is a %s, expected an npu.Tensor or a table "
    .. "of numbers"):format(what, type(v)), 3)
end

--- A dataset of the slices of tensors along their first dimension
-- (`tf.data.Dataset.from_tensor_slices`).
-- @tparam Tensor|table x a tensor, a list of tensors `{t1, t2}`, a string-keyed table
--   `{key = tensor}` (elements come in the same structure), or nested numbers; all of the
--   first dimension's size
-- @treturn Dataset
-- @raise NPU_ERR_ARG for mixed keys, holes or values that are not tensors
-- @usage local ds = npu.data.Dataset.from_tensor_slices({images, labels})
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
  return wrap(core.dataset_from_tensors(components), structure, true)
end

--- The elements in a random order, drawn from a buffer of buffer_size
-- (`tf.data.Dataset.shuffle`).
-- @tparam integer buffer_size
-- @tparam[opt] table|integer opts `{seed = 0, reshuffle_each_iteration = true}`, or the seed
-- @treturn Dataset
function Dataset:shuffle(buffer_size, opts)
  local seed, reshuffle
  if type(opts) == "number" then seed = opts
  elseif type(opts) == "table" then
    errors.check_keys("npu.Dataset:shuffle", opts, { "seed", "reshuffle_each_iteration" })
    seed, reshuffle = opts.seed, opts.reshuffle_each_iteration
  elseif opts ~= nil then error("npu.Dataset:shuffle: argument 2 must be an options table or a seed", 2) end
  if reshuffle == nil then reshuffle = true end
  return wrap(self._handle:shuffle(buffer_size, seed or 0, reshuffle), self._structure, false)
end

-- batch's and padded_batch's last argument: {drop_remainder = b}, or b itself; nil is false.
local function drop_remainder(where, opts)
  local drop = opts
  if type(opts) == "table" then
    errors.check_keys(where, opts, { "drop_remainder" })
    drop = opts.drop_remainder
  end
  if drop ~= nil and type(drop) ~= "boolean" then
    errors.raise(where, "NPU_ERR_ARG", "drop_remainder must be a boolean, got " .. errors.typename(drop))
  end
  return drop == true
end

--- Consecutive elements stacked in batches (`tf.data.Dataset.batch`).
-- @tparam integer batch_size
-- @tparam[opt] table|boolean opts `{drop_remainder = false}`, or drop_remainder
-- @treturn Dataset
-- @raise NPU_ERR_ARG for an unknown option or a drop_remainder that is not a boolean
function Dataset:batch(batch_size, opts)
  local where = "npu.Dataset:batch"
  local drop = drop_remainder(where, opts)
  return wrap(self._handle:batch(batch_size, drop), self._structure,
    self._replayable)
end

--- The dataset count times over (`tf.data.Dataset.repeat`: `repeat` is a Lua keyword).
-- @tparam[opt] integer count nil or -1: forever
-- @treturn Dataset
function Dataset:repeat_(count)
  return wrap(self._handle:repeat_(count), self._structure,
    self._replayable and count ~= nil and count >= 0)
end

--- Elements produced ahead of the device (`tf.data.Dataset.prefetch`).
-- @tparam[opt=-1] integer buffer_size -1 (AUTOTUNE): about 4 MiB of elements, 2 to 1024
-- @treturn Dataset
function Dataset:prefetch(buffer_size)
  return wrap(self._handle:prefetch(buffer_size or -1), self._structure, self._replayable)
end

--- One worker's part of the data: the elements i (from 0, per pass) with
-- i % num_shards == index (`tf.data.Dataset.shard`).
-- @tparam integer num_shards
-- @tparam integer index
-- @treturn Dataset
function Dataset:shard(num_shards, index)
  return wrap(self._handle:shard(num_shards, index), self._structure, self._replayable)
end

-- ---- map, filter, padded_batch: evaluated once on the host when defined ----
--
-- The producer thread runs C stages only (it never calls Lua nor touches a context), so a
-- function of the elements cannot run there.  map and filter take a *graph function*, as
-- tf.data does: fn receives the element's components as npu.Output placeholders of a private
-- graph (unpacked for a list, the table for keys, one Output for a single tensor) and returns
-- graph outputs.  It is compiled once and run, per element, on the host when the dataset is
-- defined; the results become a new source, so every stage after it (shuffle, batch, repeat,
-- prefetch) runs ahead of the device as before.  Hence the input must be replayable: finite
-- and in one order (no shuffle, no endless repeat below): put those after map and filter, which
-- gives the same elements since fn sees one element at a time.  Results must have one shape per
-- component across elements (the sources of this library hold one shape per component).

local function npu_module() return package.loaded["npu"] or require("npu") end

local function check_replayable(ds, where)
  if not ds._replayable then
    error(("%s: the input must be finite and yield one order (no shuffle or endless repeat "
      .. "before it): %s is evaluated once on the host when defined; shuffle and repeat after "
      .. "it instead"):format(where, where:match(":(.*)$")), 3)
  end
end

-- The elements of ds on the host: a list of element value lists (component order).
local function host_elements(ds)
  local out = {}
  local it <close> = ds._handle:iterator()
  while true do
    local e = table.pack(it:next())
    if e[1] == nil then break end
    out[#out + 1] = e
  end
  return out
end

-- Stacks tensors of one shape (one component, element order) into the source tensor [n, ...].
local function stack(tensors, dtype, shape, where, what)
  local npu = npu_module()
  if #tensors == 0 then
    local s = { 0 }
    for i, d in ipairs(shape) do s[i + 1] = d < 0 and 0 or d end
    return npu.zeros(s, dtype)
  end
  local first, rows = tensors[1]:shape(), {}
  for k, t in ipairs(tensors) do
    local sh = t:shape()
    if #sh ~= #first or table.concat(sh, ",") ~= table.concat(first, ",") then
      error(("%s: %s is [%s] in element %d but [%s] in element %d: the elements of a dataset "
        .. "have one shape per component here"):format(where, what, table.concat(first, ","), 0,
        table.concat(sh, ","), k - 1), 3)
    end
    rows[k] = t:ndim() == 0 and t:item() or t:totable()
  end
  return npu.tensor(rows, dtype)
end

local function new_source(components, structure)
  return wrap(core.dataset_from_tensors(components), structure, true)
end

-- fn's graph function over ds's element: a session, the placeholders, the flat outputs and
-- the structure of fn's result.
local function graph_function(ds, fn, where)
  if type(fn) ~= "function" then
    error(("%s: argument 1 must be a function of the element's graph outputs, got %s")
      :format(where, type(fn)), 3)
  end
  check_replayable(ds, where)
  local npu = npu_module()
  local g = npu.Graph()
  local st = ds._structure
  local args = {}
  for i = 1, st.n do
    args[i] = g:placeholder(ds._handle:dtype(i), ds._handle:shape(i), "arg" .. i)
  end
  local result
  if st.kind == "list" then result = fn(table.unpack(args, 1, st.n))
  else result = fn(structured(st, args)) end
  local Output_mt = core.Output_mt
  local outs, structure = {}, nil
  if getmetatable(result) == Output_mt then
    outs, structure = { result }, { kind = "single", n = 1 }
  elseif type(result) == "table" and getmetatable(result) == nil then
    local keys = {}
    for k in pairs(result) do keys[#keys + 1] = k end
    if #keys == 0 then error(where .. ": the function returned an empty table", 3) end
    if #result == #keys then
      for i = 1, #result do outs[i] = result[i] end
      structure = { kind = "list", n = #outs }
    else
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for i, k in ipairs(keys) do
        if type(k) ~= "string" then error(where .. ": the function's table has both list and string keys", 3) end
        outs[i] = result[k]
      end
      structure = { kind = "keys", keys = keys, n = #keys }
    end
    for i, o in ipairs(outs) do
      if getmetatable(o) ~= Output_mt then
        error(("%s: the function's result %d is a %s, expected an npu.Output of its graph")
          :format(where, i, type(o)), 3)
      end
    end
  else
    error(("%s: the function must return an npu.Output or a table of them, got %s")
      :format(where, type(result)), 3)
  end
  return npu.Session { graph = g }, args, outs, structure
end

local function run_on(sess, args, outs, element)
  local feeds = {}
  for i, a in ipairs(args) do feeds[a] = element[i] end
  return sess:run(outs, feeds)
end

--- The elements transformed by a graph function (`tf.data.Dataset.map`): fn receives the
-- components as Outputs of a private graph and returns the new element's Outputs; it is
-- compiled once and run per element on the host when the dataset is defined, so the input
-- must be replayable (finite, unshuffled: shuffle and repeat after map).
-- @tparam function fn `fn(components...)` returning an Output, a list or a string-keyed table
-- @treturn Dataset
-- @raise NPU_ERR_ARG when the input is not replayable or fn does not return graph values
-- @usage ds = ds:map(function(x, y) return x / 255, y end)
function Dataset:map(fn)
  local where = "npu.Dataset:map"
  local sess, args, outs, structure = graph_function(self, fn, where)
  local per = {}
  for i = 1, structure.n do per[i] = {} end
  for _, e in ipairs(host_elements(self)) do
    local r = run_on(sess, args, outs, e)
    for i = 1, structure.n do per[i][#per[i] + 1] = r[i] end
  end
  sess:close()
  local components = {}
  for i, o in ipairs(outs) do
    local spec = o:shape()
    components[i] = stack(per[i], o:dtype(), spec, where, ("the function's output %d"):format(i))
  end
  return new_source(components, structure)
end

--- The elements for which a graph function gives true (`tf.data.Dataset.filter`),
-- evaluated once on the host when defined (as map).
-- @tparam function predicate `predicate(components...)` returning a scalar bool Output
-- @treturn Dataset
function Dataset:filter(predicate)
  local where = "npu.Dataset:filter"
  local sess, args, outs, structure = graph_function(self, predicate, where)
  local o = outs[1]
  if structure.kind ~= "single" or o:dtype() ~= "bool" or #o:shape() ~= 0 then
    sess:close()
    error(("%s: the predicate must return one scalar bool Output, got %s %s"):format(where,
      structure.kind == "single" and o:dtype() or (structure.n .. " outputs"),
      structure.kind == "single" and "[" .. table.concat(o:shape(), ",") .. "]" or ""), 2)
  end
  local per = {}
  for i = 1, self._structure.n do per[i] = {} end
  for _, e in ipairs(host_elements(self)) do
    if run_on(sess, args, outs, e)[1]:item() then
      for i = 1, self._structure.n do per[i][#per[i] + 1] = e[i] end
    end
  end
  sess:close()
  local components = {}
  for i = 1, self._structure.n do
    components[i] = stack(per[i], self._handle:dtype(i), self._handle:shape(i), where,
      ("component %d"):format(i))
  end
  return new_source(components, self._structure)
end

-- One value per component, in component order, from a value in the dataset's structure.
local function per_component(structure, v, what, where)
  if v == nil then return {} end
  if structure.kind == "single" then return { v } end
  if type(v) ~= "table" then
    error(("%s: %s must be a table in the dataset's structure, got %s"):format(where, what, type(v)), 3)
  end
  if structure.kind == "list" then
    for k in pairs(v) do
      if math.type(k) ~= "integer" or k < 1 or k > structure.n then
        errors.raise(where, "NPU_ERR_ARG", ("%s has key %s but the dataset's elements have %d components")
          :format(what, tostring(k), structure.n))
      end
    end
    return v
  end
  errors.check_keys(where, v, structure.keys, what .. " key") -- a misspelt component name
  local out = {}
  for i, k in ipairs(structure.keys) do out[i] = v[k] end
  return out
end

--- Batches with each component padded (after its values) to padded_shapes with
-- padding_values (`tf.data.Dataset.padded_batch`).  Elements have one shape per component
-- here, so padding happens where padded_shapes asks for more; the padded elements are made
-- once on the host (the input must be replayable, as for map); with nothing to pad it is
-- batch(batch_size, drop_remainder).
-- @tparam integer batch_size
-- @tparam[opt] table padded_shapes per component a list of dims (-1 or absent: the element's)
-- @tparam[opt] table padding_values per component a number (0)
-- @tparam[opt] table opts `{drop_remainder = false}`
-- @treturn Dataset
function Dataset:padded_batch(batch_size, padded_shapes, padding_values, opts)
  local where = "npu.Dataset:padded_batch"
  if math.type(batch_size) ~= "integer" then
    errors.raise(where, "NPU_ERR_ARG", "batch_size must be an integer, got " ..
      (type(batch_size) == "number" and tostring(batch_size) or errors.typename(batch_size)))
  end
  local drop = drop_remainder(where, opts)
  local st = self._structure
  local shapes = per_component(st, padded_shapes, "padded_shapes", where)
  local values = per_component(st, padding_values, "padding_values", where)
  if st.kind == "single" and padded_shapes ~= nil and type(padded_shapes) ~= "table" then
    error(("%s: padded_shapes must be a list of dims, got %s"):format(where, type(padded_shapes)), 2)
  end
  local paddings, any = {}, false
  for i = 1, st.n do
    local have, want = self._handle:shape(i), shapes[i]
    local name = st.kind == "keys" and ("'" .. st.keys[i] .. "'") or tostring(i)
    if want ~= nil and (type(want) ~= "table" or #want ~= #have) then
      error(("%s: padded_shapes for component %s must be a list of %d dims (the element is [%s]), got %s")
        :format(where, name, #have, table.concat(have, ","),
          type(want) == "table" and "[" .. table.concat(want, ",") .. "]" or type(want)), 2)
    end
    local pad = {}
    for d = 1, #have do
      local w = want and want[d] or -1
      if math.type(w) ~= "integer" or w < -1 then
        error(("%s: padded_shapes for component %s: dim %d is %s, expected a size or -1")
          :format(where, name, d, tostring(w)), 2)
      end
      if w >= 0 and have[d] < 0 then
        error(("%s: component %s is [%s]: padding a dim that varies (a partial inner batch) to a "
          .. "fixed size is not supported; batch the inner dataset with drop_remainder = true")
          :format(where, name, table.concat(have, ",")), 2)
      end
      if w >= 0 and w < have[d] then
        error(("%s: padded_shapes for component %s is [%s] but the element is [%s]: dim %d is smaller")
          :format(where, name, table.concat(want, ","), table.concat(have, ","), d), 2)
      end
      pad[2 * d - 1], pad[2 * d] = 0, w >= 0 and w - have[d] or 0
      any = any or pad[2 * d] > 0
    end
    paddings[i] = pad
    if values[i] ~= nil and type(values[i]) ~= "number" and type(values[i]) ~= "boolean" then
      error(("%s: padding_values for component %s must be a number, got %s")
        :format(where, name, type(values[i])), 2)
    end
  end
  if not any then return self:batch(batch_size, drop) end
  check_replayable(self, where)
  local npu = npu_module()
  local g = npu.Graph()
  local elements = host_elements(self)
  local components = {}
  for i = 1, st.n do
    local per = {}
    for k, e in ipairs(elements) do per[k] = e[i] end
    local all = stack(per, self._handle:dtype(i), self._handle:shape(i), where, ("component %d"):format(i))
    local sh = all:shape()
    local x = g:placeholder(all:dtype(), sh, "component" .. i)
    local pad = { 0, 0 }
    for _, p in ipairs(paddings[i]) do pad[#pad + 1] = p end
    local v = values[i]
    if type(v) == "boolean" then v = v and 1 or 0 end
    local sess <close> = npu.Session { graph = g }
    components[i] = sess:run(npu.pad(x, pad, { constant_values = v or 0 }), { [x] = all })
  end
  return new_source(components, st):batch(batch_size, drop)
end

--- The number of elements per pass (`tf.data.Dataset.cardinality`).
-- @treturn integer -1 for an infinite dataset
function Dataset:cardinality() return self._handle:cardinality() end

--- The element's spec (`tf.data.Dataset.element_spec`): `{dtype =, shape =}` per component,
-- in the dataset's structure (shape entries -1 for a batch dim that may be partial).
-- @treturn table
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

--- The next element as Tensors on the host, in the dataset's structure.
-- @function HostIterator:get_next
-- @return the element
-- @raise NPU_ERR_OUT_OF_RANGE at the end (npu.errors.OutOfRangeError)
function HostIterator:get_next()
  return structured(self._structure, table.pack(self._it:get_next()))
end
--- The next element, or nil at the end.
-- @function HostIterator:next
-- @return the element, or nil
function HostIterator:next()
  local first = table.pack(self._it:next())
  if first[1] == nil then return nil end
  return structured(self._structure, first)
end
--- Stops the producer thread now (the garbage collector would, later; also `<close>`).
-- @function HostIterator:close
function HostIterator:close() self._it:close() end

--- An iterator over the elements on the host (`iter(dataset)`): a producer thread starts
-- now.  A to-be-closed value.
-- @treturn HostIterator with get_next(), next() and close()
function Dataset:iterator()
  return setmetatable({ _it = self._handle:iterator(), _structure = self._structure }, HostIterator)
end

--- The elements as Tensors on the host, for a generic for; leaving the loop early (break)
-- stops the producer at once.
-- @return the iterator triple and a closing value
-- @usage for element in ds:iterate() do print(element) end
function Dataset:iterate()
  local it = self:iterator()
  return HostIterator.next, it, nil, it
end

-- The graph's one-shot iterator: one iterator_get_next node per iterator object.
local GraphIterator = {}
GraphIterator.__index = GraphIterator

--- An iterator node in a graph (`tf.compat.v1.data.make_one_shot_iterator`): its get_next()
-- gives the element as Outputs, which a session advances once per step, on the device side.
-- @tparam[opt] Graph g the default graph when nil
-- @tparam[opt="IteratorGetNext"] string name
-- @treturn table the iterator: `get_next()` (also `it.get_next()`), `graph`, `node`
-- @raise NPU_ERR_ARG when g is not a graph
-- @usage local batch = ds:make_one_shot_iterator(g):get_next()
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
  --- The element as graph outputs, in the dataset's structure (`iterator.get_next()`; also
  -- called `it.get_next()` as TensorFlow scripts write it).  Every call gives the same node's
  -- outputs: a session runs one iterator per node, advanced once per step.
  -- @function Iterator:get_next
  -- @return the element's Outputs
  it.get_next = function() return it._outputs end
  return it
end

data.Iterator = GraphIterator

return data
