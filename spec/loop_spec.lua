-- loop_spec.lua — iterations_per_loop: one sess:run performs n steps on the device, fed by a
-- dataset, and returns the last step's values; the reference's rules are enforced.
local lu = require("luaunit")
local npu = require("npu")

-- counter += sum(batch): with batches 0,1,2,... the state after k steps is known exactly
local function counting_graph(n_elems, batch)
  local g = npu.Graph()
  local xs = npu.range(0, n_elems, 1, "float32")
  local ds = npu.data.Dataset.from_tensor_slices(xs):batch(batch, { drop_remainder = true }):repeat_()
  local it = ds:make_one_shot_iterator(g)
  local b = it:get_next()
  local total = g:variable(npu.zeros({}), "total")
  local step = npu.assign(total, total + npu.reduce_sum(b))
  return g, step, total, b
end

TestLoop = {}

function TestLoop:test_one_run_does_n_steps_and_returns_the_last()
  local g, step, total, b = counting_graph(10, 2)
  local sess = npu.Session { graph = g, options = { iterations_per_loop = 4 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 4)
  local r = sess:run({ total, b, loop })
  -- batches {0,1},{2,3},{4,5},{6,7}: total 28, the last batch fetched
  lu.assertEquals(r[1]:item(), 28)
  lu.assertEquals(r[2]:totable(), { 6, 7 })
  r = sess:run({ total, loop })
  -- {8,9}, then the repeat: {0,1},{2,3},{4,5}
  lu.assertEquals(r[1]:item(), 28 + 17 + 1 + 5 + 9)
  lu.assertEquals(sess:n_plans(), 3) -- the initializer, and each fetch signature once
end

function TestLoop:test_the_count_must_match_the_option()
  local g, step = counting_graph(10, 2)
  local sess = npu.Session { graph = g, options = { iterations_per_loop = 10 } }
  lu.assertErrorMsgContains("iterations_per_loop is 10", npu.util.set_iteration_per_loop, sess, step, 5)
  -- a loop node built for another count is refused when it runs
  local other = npu.Session { graph = g, options = { iterations_per_loop = 5 } }
  local loop = npu.util.set_iteration_per_loop(other, step, 5)
  sess:run(g:global_variables_initializer())
  lu.assertErrorMsgContains("must be equal", sess.run, sess, loop)
end

function TestLoop:test_data_must_come_from_a_dataset()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local v = g:variable(npu.zeros({ 2 }), "v")
  local step = npu.assign(v, v + x)
  local sess = npu.Session { graph = g, options = { iterations_per_loop = 3 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 3)
  lu.assertErrorMsgContains("must take its data from a dataset", sess.run, sess, loop, { [x] = { 1, 1 } })
end

function TestLoop:test_training_mode_is_required()
  local g, step = counting_graph(10, 2)
  local sess = npu.Session { graph = g, options = { iterations_per_loop = 2, graph_run_mode = 0 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 2)
  lu.assertErrorMsgContains("graph_run_mode 1", sess.run, sess, loop)
end

function TestLoop:test_end_of_data_is_recognisable()
  local g = npu.Graph()
  local ds = npu.data.Dataset.from_tensor_slices(npu.range(0, 5, 1, "float32")):batch(2, { drop_remainder = true })
  local b = ds:make_one_shot_iterator(g):get_next()
  local sess = npu.Session { graph = g }
  lu.assertEquals(sess:run(b):totable(), { 0, 1 })
  lu.assertEquals(sess:run(b):totable(), { 2, 3 })
  local ok, err = pcall(sess.run, sess, b)
  lu.assertFalse(ok)
  lu.assertTrue(npu.errors.is(err, npu.errors.OutOfRangeError))
  lu.assertStrContains(tostring(err), "end of data")
end

function TestLoop:test_partial_batches_run_on_the_device()
  -- (spec/data_dynamic_spec.lua: a plan per element shape, loops that change shape inside)
  local g = npu.Graph()
  local ds = npu.data.Dataset.from_tensor_slices(npu.range(0, 5, 1, "float32")):batch(2)
  local b = ds:make_one_shot_iterator(g):get_next()
  local sess = npu.Session { graph = g }
  lu.assertEquals(sess:run(b):totable(), { 0, 1 })
  lu.assertEquals(sess:run(b):totable(), { 2, 3 })
  lu.assertEquals(sess:run(b):totable(), { 4 })
  lu.assertErrorMsgContains("end of data", sess.run, sess, b)
end

function TestLoop:test_training_in_a_loop_matches_step_by_step()
  local function build(loop_n)
    local g = npu.Graph()
    local xs = npu.random.normal({ 64, 3 }, { seed = 1 })
    local ys = npu.random.normal({ 64, 1 }, { seed = 2 })
    local ds = npu.data.Dataset.from_tensor_slices({ xs, ys }):batch(8, { drop_remainder = true }):repeat_()
    local b = ds:make_one_shot_iterator(g):get_next()
    local w = g:variable(npu.zeros({ 3, 1 }), "w")
    local loss = npu.reduce_mean(npu.square(b[1]:matmul(w) - b[2]))
    local train = npu.train.GradientDescentOptimizer(0.1):minimize(loss, { var_list = { w } })
    local sess = npu.Session { graph = g, options = { iterations_per_loop = loop_n } }
    sess:run(g:global_variables_initializer())
    return sess, train, w
  end
  local s1, t1, w1 = build(1)
  for _ = 1, 20 do s1:run(t1) end
  local s20, t20, w20 = build(20)
  s20:run(npu.util.set_iteration_per_loop(s20, t20, 20))
  lu.assertTrue(npu.allclose(s1:run(w1), s20:run(w20), 0, 0))
end
