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
  lu.assertStrContains(err, "end of data")
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
