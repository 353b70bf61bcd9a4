-- spec/data_spec.lua — npu.data: tf.data semantics on the host side of the pipeline
-- (ds:iterate / ds:iterator run the same producer thread the device's get_next uses):
-- slices of one tensor, of a list and of a keyed table; seeded shuffle (reproducible, every
-- element once per epoch, reshuffled epochs); batch and drop_remainder; repeat counts;
-- prefetch; the end of data as a recognisable error; the graph's one-shot iterator
-- outputs; and the garbage collection of datasets and iterators (live bytes come back).
local lu = require("luaunit")
local npu = require("npu")
local data = npu.data or require("npu.data")
local core = npu.core

local Dataset = data.Dataset

local function range_ds(n)
  return Dataset.from_tensor_slices(npu.range(0, n, 1, "int64"))
end

-- All elements of ds as Lua values (numbers for scalars, nested tables otherwise).
local function collect(ds)
  local out = {}
  for e in ds:iterate() do out[#out + 1] = e:ndim() == 0 and e:item() or e:totable() end
  return out
end

local function flatten(list)
  local out = {}
  for _, v in ipairs(list) do
    if type(v) == "table" then for _, x in ipairs(v) do out[#out + 1] = x end
    else out[#out + 1] = v end
  end
  return out
end

local function live() collectgarbage(); collectgarbage(); return core.live_bytes() end

TestData = {}

function TestData:test_slices_in_order()
  lu.assertEquals(collect(range_ds(5)), { 0, 1, 2, 3, 4 })
  local m = Dataset.from_tensor_slices(npu.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }))
  lu.assertEquals(collect(m), { { 1, 2 }, { 3, 4 }, { 5, 6 } })
  lu.assertEquals(m:element_spec(), { dtype = "float32", shape = { 2 } })
  lu.assertEquals(m:cardinality(), 3)
  -- plain nested numbers are one tensor
  lu.assertEquals(collect(Dataset.from_tensor_slices({ 1, 2, 3 })), { 1, 2, 3 })
end

function TestData:test_keyed_components()
  local x = npu.tensor({ { 0, 0 }, { 1, -1 }, { 2, -2 }, { 3, -3 }, { 4, -4 } })
  local y = npu.tensor({ 0, 1, 2, 3, 4 }, "int32")
  local ds = Dataset.from_tensor_slices({ y = y, x = x }):shuffle(5, { seed = 11 }):batch(2)
  local spec = ds:element_spec()
  lu.assertEquals(spec.x, { dtype = "float32", shape = { -1, 2 } })
  lu.assertEquals(spec.y, { dtype = "int32", shape = { -1 } })
  local seen, sizes = {}, {}
  for b in ds:iterate() do
    local xs, ys = b.x:totable(), b.y:totable()
    sizes[#sizes + 1] = #ys
    for i, yv in ipairs(ys) do
      lu.assertEquals(xs[i], { yv, -yv }) -- rows stay aligned across components
      seen[#seen + 1] = yv
    end
  end
  lu.assertEquals(sizes, { 2, 2, 1 })
  table.sort(seen)
  lu.assertEquals(seen, { 0, 1, 2, 3, 4 })
end

function TestData:test_list_components()
  local a, b = npu.tensor({ 1, 2, 3 }), npu.tensor({ 10, 20, 30 }, "int64")
  local ds = Dataset.from_tensor_slices({ a, b })
  local got = {}
  for e in ds:iterate() do got[#got + 1] = { e[1]:item(), e[2]:item(), e[2]:dtype() } end
  lu.assertEquals(got, { { 1, 10, "int64" }, { 2, 20, "int64" }, { 3, 30, "int64" } })
end

function TestData:test_bad_components()
  local ok, err = pcall(Dataset.from_tensor_slices, { npu.tensor({ 1, 2 }), npu.tensor({ 1, 2, 3 }) })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_SHAPE")
  lu.assertStrContains(tostring(err), "[2]")
  lu.assertStrContains(tostring(err), "[3]")
  ok, err = pcall(Dataset.from_tensor_slices, npu.tensor(3))
  lu.assertEquals(npu.error_code(err), "NPU_ERR_SHAPE")
  ok, err = pcall(Dataset.from_tensor_slices, { 1, x = npu.tensor({ 1 }) })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "not both")
end

function TestData:test_shuffle_reproducible()
  local a = collect(range_ds(50):shuffle(10, { seed = 1 }))
  local b = collect(range_ds(50):shuffle(10, { seed = 1 }))
  local c = collect(range_ds(50):shuffle(10, { seed = 2 }))
  lu.assertEquals(a, b)
  lu.assertNotEquals(a, c)
  lu.assertNotEquals(a, collect(range_ds(50)))
  -- one dataset, two iterators: the same order
  local ds = range_ds(50):shuffle(10, 1)
  lu.assertEquals(collect(ds), collect(ds))
  lu.assertEquals(collect(ds), a)
end

function TestData:test_shuffle_every_element_once_per_epoch()
  local out = collect(range_ds(40):shuffle(100, { seed = 5 }):repeat_(3))
  lu.assertEquals(#out, 120)
  local epochs = {}
  for ep = 0, 2 do
    local seen = {}
    for i = 1, 40 do
      local v = out[ep * 40 + i]
      lu.assertNil(seen[v], ("epoch %d: %d twice"):format(ep, v))
      seen[v] = true
    end
    epochs[ep + 1] = table.concat(out, ",", ep * 40 + 1, ep * 40 + 40)
  end
  lu.assertNotEquals(epochs[1], epochs[2]) -- reshuffled each iteration
  lu.assertNotEquals(epochs[2], epochs[3])
  local fixed = collect(range_ds(40):shuffle(100, { seed = 5, reshuffle_each_iteration = false }):repeat_(2))
  lu.assertEquals(table.concat(fixed, ",", 1, 40), table.concat(fixed, ",", 41, 80))
  lu.assertEquals(table.concat(fixed, ",", 1, 40), epochs[1])
end

function TestData:test_batch_and_drop_remainder()
  local sizes = {}
  for b in range_ds(10):batch(4):iterate() do sizes[#sizes + 1] = b:shape()[1] end
  lu.assertEquals(sizes, { 4, 4, 2 })
  lu.assertEquals(flatten(collect(range_ds(10):batch(4))), { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 })
  local dropped = range_ds(10):batch(4, { drop_remainder = true })
  lu.assertEquals(dropped:element_spec().shape, { 4 })
  lu.assertEquals(range_ds(10):batch(4):element_spec().shape, { -1 })
  lu.assertEquals(collect(dropped), { { 0, 1, 2, 3 }, { 4, 5, 6, 7 } })
  lu.assertEquals(dropped:cardinality(), 2)
  lu.assertEquals(#collect(range_ds(10):batch(4, true)), 2)
  -- batch of batches
  lu.assertEquals(collect(range_ds(8):batch(2):batch(2)), { { { 0, 1 }, { 2, 3 } }, { { 4, 5 }, { 6, 7 } } })
  local ok, err = pcall(function() return range_ds(4):batch(0) end)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_ARG")
end

function TestData:test_repeat_counts()
  lu.assertEquals(collect(range_ds(3):repeat_(2)), { 0, 1, 2, 0, 1, 2 })
  lu.assertEquals(collect(range_ds(3):repeat_(0)), {})
  lu.assertEquals(range_ds(3):repeat_():cardinality(), -1)
  -- forever: take 10
  local got = {}
  for e in range_ds(3):repeat_():iterate() do
    got[#got + 1] = e:item()
    if #got == 10 then break end
  end
  lu.assertEquals(got, { 0, 1, 2, 0, 1, 2, 0, 1, 2, 0 })
  -- batches across passes, and partial batches per pass
  local s = {}
  for b in range_ds(3):repeat_(2):batch(4):iterate() do s[#s + 1] = b:shape()[1] end
  lu.assertEquals(s, { 4, 2 })
  s = {}
  for b in range_ds(3):batch(2):repeat_(2):iterate() do s[#s + 1] = b:shape()[1] end
  lu.assertEquals(s, { 2, 1, 2, 1 })
end

function TestData:test_prefetch()
  lu.assertEquals(collect(range_ds(20):batch(3):prefetch(1)), collect(range_ds(20):batch(3)))
  lu.assertEquals(collect(range_ds(20):prefetch(8)), collect(range_ds(20)))
  lu.assertEquals(collect(range_ds(5):prefetch()), { 0, 1, 2, 3, 4 }) -- AUTOTUNE
  local ok, err = pcall(function() return range_ds(5):prefetch(0) end)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_ARG")
end

function TestData:test_end_of_data_is_recognisable()
  local it = range_ds(2):iterator()
  lu.assertEquals(it:get_next():item(), 0)
  lu.assertEquals(it:get_next():item(), 1)
  local ok, err = pcall(it.get_next, it)
  lu.assertFalse(ok)
  lu.assertTrue(npu.errors.is(err, data.errors.OutOfRangeError))
  lu.assertIs(data.errors.OutOfRangeError, npu.errors.OutOfRangeError)
  lu.assertEquals(npu.errors.OutOfRangeError.code, "NPU_ERR_OUT_OF_RANGE")
  lu.assertStrContains(tostring(err), "end of data")
  ok, err = pcall(it.get_next, it) -- and it stays at the end
  lu.assertEquals(npu.error_code(err), "NPU_ERR_OUT_OF_RANGE")
  lu.assertNil(it:next())
  it:close()
  ok, err = pcall(it.get_next, it)
  lu.assertStrContains(tostring(err), "closed")
end

function TestData:test_one_shot_iterator_outputs()
  local g = npu.Graph()
  local x = npu.random.uniform({ 10, 3 }, { seed = 1 })
  local y = npu.tensor({ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, "int32")
  local ds = Dataset.from_tensor_slices({ x = x, y = y }):shuffle(10, { seed = 3 }):batch(4, { drop_remainder = true }):repeat_()
  local it = ds:make_one_shot_iterator(g)
  local e = it:get_next()
  lu.assertEquals(e.x:dtype(), "float32")
  lu.assertEquals(e.x:shape(), { 4, 3 })
  lu.assertEquals(e.y:dtype(), "int32")
  lu.assertEquals(e.y:shape(), { 4 })
  lu.assertEquals(e.x:op():type(), "iterator_get_next")
  lu.assertEquals(it.get_next(), e) -- the same node each time
  local single = range_ds(4):batch(2):make_one_shot_iterator(g).get_next()
  lu.assertEquals(single:shape(), { -1 })
  lu.assertEquals(single:dtype(), "int64")
  -- a bad dataset id is refused when the node is built
  local ok, err = pcall(g.add_op, g, "iterator_get_next", {}, { dataset = 99 })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_ARG")
end

function TestData:test_gc_returns_memory()
  local before = live()
  do
    local x = npu.random.normal({ 200, 8 }, { seed = 2 })
    local ds = Dataset.from_tensor_slices({ x = x, i = npu.range(0, 200, 1, "int32") })
      :shuffle(50, { seed = 9 }):batch(16):repeat_():prefetch(3)
    -- unfinished iterators, an early break, iterators never advanced
    for _ = 1, 20 do
      local n = 0
      for _ in ds:iterate() do
        n = n + 1
        if n == 5 then break end
      end
      local it = ds:iterator()
      it:get_next()
      local _ = ds:iterator()
    end
    local g = npu.Graph()
    ds:make_one_shot_iterator(g)
  end
  lu.assertEquals(live(), before)
  -- many datasets and iterators dropped in any order
  for k = 1, 200 do
    local ds = range_ds(k % 7 + 1):shuffle(3, k):batch(2)
    local it = ds:iterator()
    if k % 3 == 0 then it:close()
    elseif k % 5 == 0 then it:next() end
  end
  lu.assertEquals(live(), before)
end

function TestData:test_close_with_scope()
  local before = live()
  do
    local it <close> = range_ds(100):repeat_():prefetch(1):iterator()
    it:get_next()
  end
  lu.assertEquals(live(), before)
end

function TestData:test_shard()
  lu.assertEquals(collect(range_ds(10):shard(3, 0)), { 0, 3, 6, 9 })
  lu.assertEquals(collect(range_ds(10):shard(3, 2)), { 2, 5, 8 })
  lu.assertEquals(range_ds(10):shard(3, 1):cardinality(), 3)
  lu.assertEquals(collect(range_ds(10):shard(1, 0)), collect(range_ds(10)))
  -- per pass under a repeat; whole batches after a batch
  lu.assertEquals(collect(range_ds(5):shard(2, 1):repeat_(2)), { 1, 3, 1, 3 })
  lu.assertEquals(collect(range_ds(7):batch(2):shard(2, 1)), { { 2, 3 }, { 6 } })
  -- the workers' shards cover the data once
  local all = {}
  for k = 0, 3 do for _, v in ipairs(collect(range_ds(11):shard(4, k))) do all[#all + 1] = v end end
  table.sort(all)
  lu.assertEquals(all, collect(range_ds(11)))
  local ok, err = pcall(function() return range_ds(4):shard(2, 2) end)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_ARG")
  lu.assertStrContains(tostring(err), "npu.Dataset:shard")
  lu.assertStrContains(tostring(err), "index must be in [0, num_shards): index 2, num_shards 2")
  ok, err = pcall(function() return range_ds(4):shard(0, 0) end)
  lu.assertStrContains(tostring(err), "num_shards must be >= 1, got 0")
  ok, err = pcall(function() return range_ds(4):shard(2) end)
  lu.assertStrContains(tostring(err), "index must be an integer")
end
