-- spec/data_dynamic_spec.lua — datasets whose element shape varies on the device: a batch
-- without drop_remainder delivers its short last batch; the session compiles a plan per
-- element shape once (peeking at the next element, taking nothing) and switches between
-- them, also inside an iterations_per_loop loop, where the fetches stay the last step's.
local lu = require("luaunit")
local npu = require("npu")
local Dataset = npu.data.Dataset

local function range_ds(n, dtype)
  return Dataset.from_tensor_slices(npu.range(0, n, 1, dtype or "float32"))
end

TestDataDynamic = {}

function TestDataDynamic:test_the_last_partial_batch_is_delivered()
  local g = npu.Graph()
  local e = Dataset.from_tensor_slices({ x = npu.tensor({ { 0, 0 }, { 1, -1 }, { 2, -2 }, { 3, -3 }, { 4, -4 } }),
    y = npu.range(0, 5, 1, "int32") }):batch(2):make_one_shot_iterator(g):get_next()
  lu.assertEquals(e.x:shape(), { -1, 2 })
  local total = npu.reduce_sum(e.x, 0)
  local sess <close> = npu.Session { graph = g }
  local r = sess:run({ e.x, e.y, total })
  lu.assertEquals(r[1]:totable(), { { 0, 0 }, { 1, -1 } })
  lu.assertEquals(r[2]:totable(), { 0, 1 })
  lu.assertEquals(r[3]:totable(), { 1, -1 })
  sess:run({ e.x, e.y, total })
  r = sess:run({ e.x, e.y, total })
  lu.assertEquals(r[1]:shape(), { 1, 2 })
  lu.assertEquals(r[1]:totable(), { { 4, -4 } })
  lu.assertEquals(r[2]:totable(), { 4 })
  lu.assertEquals(r[3]:totable(), { 4, -4 })
  lu.assertEquals(sess:n_plans(), 2) -- one per element shape
  local ok, err = pcall(sess.run, sess, { e.x, e.y, total })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_OUT_OF_RANGE")
  lu.assertStrContains(tostring(err), "end of data")
end

function TestDataDynamic:test_each_shape_compiles_once()
  local g = npu.Graph()
  local b = range_ds(10):batch(4):repeat_(3):make_one_shot_iterator(g):get_next()
  local s = npu.reduce_sum(b)
  local sess <close> = npu.Session { graph = g }
  local sizes, sums = {}, {}
  for _ = 1, 9 do
    local r = sess:run({ b, s })
    sizes[#sizes + 1] = r[1]:shape()[1]
    sums[#sums + 1] = r[2]:item()
  end
  lu.assertEquals(sizes, { 4, 4, 2, 4, 4, 2, 4, 4, 2 })
  lu.assertEquals(sums, { 6, 22, 17, 6, 22, 17, 6, 22, 17 })
  lu.assertEquals(sess:n_plans(), 2)
  lu.assertErrorMsgContains("end of data", sess.run, sess, b)
end

-- y = x * w, squared error, SGD: one step per batch, sizes 4, 4, 2 (10 elements)
local function regression(loop_n)
  local g = npu.Graph()
  local xs = npu.range(1, 11, 1, "float32")
  local ds = Dataset.from_tensor_slices({ xs, npu.range(3, 33, 3, "float32") }):batch(4):repeat_()
  local b = ds:make_one_shot_iterator(g):get_next()
  local w = g:variable(npu.zeros({}), "w")
  local loss = npu.reduce_mean(npu.square(b[1] * w - b[2]))
  local train = npu.train.GradientDescentOptimizer(0.01):minimize(loss, { var_list = { w } })
  local sess = npu.Session { graph = g, options = loop_n and { iterations_per_loop = loop_n } or nil }
  sess:run(g:global_variables_initializer())
  return sess, train, w, b
end

-- the same steps on the host
local function host_w(steps)
  local w, batches = 0.0, { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10 } }
  for k = 0, steps - 1 do
    local xb, grad = batches[k % 3 + 1], 0.0
    for _, x in ipairs(xb) do grad = grad + 2 * (x * w - 3 * x) * x end
    w = w - 0.01 * grad / #xb
  end
  return w
end

function TestDataDynamic:test_a_training_loop_sees_4_4_2()
  local sess <close>, train, w, b = regression(nil)
  local sizes = {}
  for _ = 1, 3 do
    local r = sess:run({ train, b[1] })
    sizes[#sizes + 1] = r[2]:shape()[1]
  end
  lu.assertEquals(sizes, { 4, 4, 2 })
  lu.assertAlmostEquals(sess:run(w):item(), host_w(3), 1e-5)
end

function TestDataDynamic:test_a_loop_changes_shape_inside()
  -- iterations_per_loop 4: run 1 is batches 4,4,2 | 4 (two switches inside), run 2 is 4,2 | 4,4
  local sess <close>, train, w, b = regression(4)
  local loop = npu.util.set_iteration_per_loop(sess, train, 4)
  local r = sess:run({ loop, w, b[1] })
  lu.assertAlmostEquals(r[2]:item(), host_w(4), 1e-5)
  lu.assertEquals(r[3]:totable(), { 1, 2, 3, 4 }) -- the last step's values
  r = sess:run({ loop, w, b[1] })
  lu.assertAlmostEquals(r[2]:item(), host_w(8), 1e-5)
  lu.assertEquals(r[3]:totable(), { 5, 6, 7, 8 })
  r = sess:run({ loop, w, b[1] })
  lu.assertEquals(r[3]:totable(), { 9, 10 }) -- 2 | 4,4,2: ends on the short batch
  lu.assertAlmostEquals(r[2]:item(), host_w(12), 1e-5)
  -- the initializer, and the loop's fetch signature for each of the two shapes
  lu.assertEquals(sess:n_plans(), 3)
end

function TestDataDynamic:test_a_loop_matches_step_by_step()
  local s1 <close>, t1, w1 = regression(nil)
  for _ = 1, 7 do s1:run(t1) end
  local s7 <close>, t7, w7 = regression(7)
  s7:run(npu.util.set_iteration_per_loop(s7, t7, 7))
  lu.assertTrue(npu.allclose(s1:run(w1), s7:run(w7), 0, 0))
end

function TestDataDynamic:test_a_loop_runs_out_of_data()
  local g = npu.Graph()
  local b = range_ds(5):batch(2):make_one_shot_iterator(g):get_next()
  local total = g:variable(npu.zeros({}), "total")
  local step = npu.assign(total, total + npu.reduce_sum(b))
  local sess <close> = npu.Session { graph = g, options = { iterations_per_loop = 4 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 4)
  local ok, err = pcall(sess.run, sess, loop)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_OUT_OF_RANGE")
  lu.assertEquals(sess:run(total):item(), 10) -- the three batches ran: 1 + 5 + 4
end

-- map, filter, padded_batch: graph functions evaluated on the host when defined
local function values(ds)
  local out = {}
  for e in ds:iterate() do out[#out + 1] = e:ndim() == 0 and e:item() or e:totable() end
  return out
end

TestDataTransform = {}

function TestDataTransform:test_map()
  lu.assertEquals(values(range_ds(5, "int64"):map(function(x) return x * x + 1 end)), { 1, 2, 5, 10, 17 })
  -- list components arrive unpacked; a keyed result gives keyed elements
  local ds = Dataset.from_tensor_slices({ npu.tensor({ 1, 2, 3 }), npu.tensor({ 10, 20, 30 }) })
    :map(function(a, b) return { sum = a + b, diff = b - a } end)
  lu.assertEquals(ds:element_spec(), { sum = { dtype = "float32", shape = {} }, diff = { dtype = "float32", shape = {} } })
  local got = {}
  for e in ds:iterate() do got[#got + 1] = { e.sum:item(), e.diff:item() } end
  lu.assertEquals(got, { { 11, 9 }, { 22, 18 }, { 33, 27 } })
  -- keyed components arrive as the table; shapes may change
  local rows = Dataset.from_tensor_slices({ x = npu.tensor({ { 1, 2 }, { 3, 4 } }) })
    :map(function(e) return npu.reduce_sum(e.x) end)
  lu.assertEquals(values(rows), { 3, 7 })
end

function TestDataTransform:test_mapped_data_feeds_the_device()
  local g = npu.Graph()
  local ds = range_ds(6):map(function(x) return x * 10 end):shuffle(6, { seed = 1 }):batch(4):repeat_(2)
  local b = ds:make_one_shot_iterator(g):get_next()
  local sess <close> = npu.Session { graph = g }
  local seen, sizes = {}, {}
  for _ = 1, 4 do
    local t = sess:run(b)
    sizes[#sizes + 1] = t:shape()[1]
    for _, v in ipairs(t:totable()) do seen[#seen + 1] = v end
  end
  lu.assertEquals(sizes, { 4, 2, 4, 2 })
  table.sort(seen)
  lu.assertEquals(seen, { 0, 0, 10, 10, 20, 20, 30, 30, 40, 40, 50, 50 })
end

function TestDataTransform:test_filter()
  local even = range_ds(10, "int64"):filter(function(x) return npu.equal(npu.floor_mod(x, 2), 0) end)
  lu.assertEquals(values(even), { 0, 2, 4, 6, 8 })
  lu.assertEquals(even:cardinality(), 5)
  lu.assertEquals(values(even:batch(2)), { { 0, 2 }, { 4, 6 }, { 8 } })
  local keyed = Dataset.from_tensor_slices({ x = npu.tensor({ 1, 5, 2, 7 }), y = npu.tensor({ 0, 1, 2, 3 }, "int32") })
    :filter(function(e) return npu.greater(e.x, 3) end)
  local got = {}
  for e in keyed:iterate() do got[#got + 1] = { e.x:item(), e.y:item() } end
  lu.assertEquals(got, { { 5, 1 }, { 7, 3 } })
  local none = range_ds(3):filter(function(x) return npu.greater(x, 5) end)
  lu.assertEquals(none:cardinality(), 0)
  lu.assertEquals(values(none), {})
end

function TestDataTransform:test_map_and_filter_errors_name_the_culprit()
  local ok, err = pcall(function() return range_ds(3):filter(function(x) return x end) end)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "npu.Dataset:filter: the predicate must return one scalar bool Output, got float32 []")
  ok, err = pcall(function() return range_ds(3):map(42) end)
  lu.assertStrContains(tostring(err), "npu.Dataset:map: argument 1 must be a function")
  ok, err = pcall(function() return range_ds(3):map(function() return 1 end) end)
  lu.assertStrContains(tostring(err), "must return an npu.Output or a table of them, got number")
  ok, err = pcall(function() return range_ds(3):shuffle(3):map(function(x) return x end) end)
  lu.assertStrContains(tostring(err), "npu.Dataset:map: the input must be finite and yield one order")
  ok, err = pcall(function() return range_ds(3):repeat_():filter(function(x) return npu.greater(x, 1) end) end)
  lu.assertStrContains(tostring(err), "npu.Dataset:filter: the input must be finite")
  -- a partial batch has another shape: elements of one dataset have one shape here
  ok, err = pcall(function() return range_ds(10):batch(4):map(function(x) return x end) end)
  lu.assertStrContains(tostring(err), "the function's output 1 is [4] in element 0 but [2] in element 2")
  -- finite repeats replay
  lu.assertEquals(values(range_ds(2):repeat_(2):map(function(x) return x + 1 end)), { 1, 2, 1, 2 })
end

function TestDataTransform:test_padded_batch()
  local rows = npu.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, "int64")
  local ds = Dataset.from_tensor_slices(rows):padded_batch(2, { 4 }, -1)
  lu.assertEquals(ds:element_spec(), { dtype = "int64", shape = { -1, 4 } })
  lu.assertEquals(values(ds), { { { 1, 2, -1, -1 }, { 3, 4, -1, -1 } }, { { 5, 6, -1, -1 } } })
  lu.assertEquals(values(Dataset.from_tensor_slices(rows):padded_batch(2, { 3 }, nil, { drop_remainder = true })),
    { { { 1, 2, 0 }, { 3, 4, 0 } } })
  -- -1 (or no padded_shapes): the largest in the batch, which is the elements' one shape
  lu.assertEquals(values(Dataset.from_tensor_slices(rows):padded_batch(2, { -1 })), { { { 1, 2 }, { 3, 4 } }, { { 5, 6 } } })
  lu.assertEquals(values(range_ds(5):shuffle(5, 2):padded_batch(5)), values(range_ds(5):shuffle(5, 2):batch(5)))
  -- keyed components, per-component shapes and values
  local kd = Dataset.from_tensor_slices({ a = npu.tensor({ { 1 }, { 2 } }), b = npu.tensor({ 7, 8 }, "int32") })
    :padded_batch(2, { a = { 3 } }, { a = 9 })
  for e in kd:iterate() do
    lu.assertEquals(e.a:totable(), { { 1, 9, 9 }, { 2, 9, 9 } })
    lu.assertEquals(e.b:totable(), { 7, 8 })
  end
  -- it feeds the device like any batch, the short last batch included
  local g = npu.Graph()
  local b = ds:make_one_shot_iterator(g):get_next()
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(npu.reduce_sum(b, 1)):totable(), { 1, 5 })
  lu.assertEquals(sess:run(npu.reduce_sum(b, 1)):totable(), { 9 })
end

function TestDataTransform:test_padded_batch_errors_name_the_culprit()
  local rows = Dataset.from_tensor_slices(npu.tensor({ { 1, 2 }, { 3, 4 } }))
  local ok, err = pcall(rows.padded_batch, rows, 2, { 1 })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "npu.Dataset:padded_batch: padded_shapes for component 1 is [1] but the element is [2]: dim 1 is smaller")
  ok, err = pcall(rows.padded_batch, rows, 2, { 4, 4 })
  lu.assertStrContains(tostring(err), "padded_shapes for component 1 must be a list of 1 dims (the element is [2]), got [4,4]")
  ok, err = pcall(rows.padded_batch, rows, 2, { "x" })
  lu.assertStrContains(tostring(err), "dim 1 is x, expected a size or -1")
  local keyed = Dataset.from_tensor_slices({ a = npu.tensor({ { 1 }, { 2 } }) })
  ok, err = pcall(keyed.padded_batch, keyed, 2, { a = { 2 } }, { a = "z" })
  lu.assertStrContains(tostring(err), "padding_values for component 'a' must be a number, got string")
  ok, err = pcall(function() return rows:shuffle(2):padded_batch(2, { 3 }) end)
  lu.assertStrContains(tostring(err), "npu.Dataset:padded_batch: the input must be finite")
  local inner = range_ds(5):batch(2)
  ok, err = pcall(inner.padded_batch, inner, 2, { 2 })
  lu.assertStrContains(tostring(err), "component 1 is [-1]: padding a dim that varies (a partial inner batch)")
  ok, err = pcall(function() return rows:padded_batch(0, { 3 }) end)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_ARG")
end
