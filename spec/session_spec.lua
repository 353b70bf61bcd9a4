-- session_spec.lua — sessions: fetch structures, feeds, errors naming the culprit, the plan
-- cache, variables, close and <close>, many sessions, use_off_line, session_device_id,
-- deterministic results across runs and thread counts.
local lu = require("luaunit")
local npu = require("npu")

local function mlp()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 4 }, "x")
  local w = g:variable(npu.random.normal({ 4, 3 }, { seed = 11 }), "w")
  local b = g:variable(npu.tensor({ 0.1, -0.2, 0.3 }), "b")
  local y = npu.nn.softmax(x:matmul(w) + b, { name = "y" })
  return g, x, w, b, y
end

TestSession = {}

function TestSession:test_fetch_structures_mirror_tensorflow()
  local g, x, w, b, y = mlp()
  local sess <close> = npu.Session { graph = g }
  lu.assertNil(sess:run(g:global_variables_initializer()))
  local feed = { [x] = npu.random.uniform({ 2, 4 }, { seed = 1 }) }
  local single = sess:run(y, feed)
  lu.assertEquals(single:shape(), { 2, 3 })
  local list = sess:run({ y, w }, feed)
  lu.assertEquals(#list, 2)
  lu.assertEquals(list[2]:shape(), { 4, 3 })
  local map = sess:run({ probs = y, params = { w = w, b = "b:0" } }, feed)
  lu.assertEquals(map.params.b:totable()[2], npu.tensor({ -0.2 }):totable()[1])
  lu.assertTrue(npu.allclose(map.probs, single))
  local byname = sess:run("y:0", { ["x:0"] = feed[x] })
  lu.assertTrue(npu.allclose(byname, single))
  -- a bare node name is the operation: runs it, returns nothing
  lu.assertNil(sess:run("init", {}))
end

function TestSession:test_feeds_accept_tables_and_convert_dtype()
  local g = npu.Graph()
  local x = g:placeholder("int32", { 3 }, "x")
  local y = x * 2
  local sess = npu.Session { graph = g }
  local r = sess:run(y, { [x] = { 1, 2, 3 } })
  lu.assertEquals(r:dtype(), "int32")
  lu.assertEquals(r:totable(), { 2, 4, 6 })
end

function TestSession:test_missing_feed_names_the_placeholder()
  local g, x, _, _, y = mlp()
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local ok, err = pcall(sess.run, sess, y)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "placeholder 'x'")
  lu.assertStrContains(tostring(err), "[-1,4]")
end

function TestSession:test_wrong_feed_shape_and_dtype()
  local g, x, _, _, y = mlp()
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local ok, err = pcall(sess.run, sess, y, { [x] = npu.zeros({ 2, 5 }) })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_SHAPE")
  lu.assertStrContains(tostring(err), "placeholder 'x' expects [-1,4], got [2,5]")
  ok, err = pcall(sess.run, sess, y, { [x] = npu.zeros({ 2, 4 }, "float64") })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_DTYPE")
  lu.assertStrContains(tostring(err), "expects float32, got float64")
  ok, err = pcall(sess.run, sess, y, { [x] = { { 1, 2, 3, 4 }, { 1, 2 } } })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "ragged")
  -- a -1 dimension accepts any size
  lu.assertEquals(sess:run(y, { [x] = npu.zeros({ 7, 4 }) }):shape(), { 7, 3 })
end

function TestSession:test_fetch_from_another_graph()
  local g1 = mlp()
  local g2 = npu.Graph()
  local other = g2:placeholder("float32", { 1 }, "other")
  local sess = npu.Session { graph = g1 }
  lu.assertErrorMsgContains("fetch 'other:0' belongs to another graph", sess.run, sess, other)
  lu.assertErrorMsgContains("belongs to another graph", sess.run, sess, { other })
  lu.assertErrorMsgContains("feed 'other:0' belongs to another graph", sess.run, sess, "y:0",
    { [other] = { 1 } })
  lu.assertErrorMsgContains("no node named 'nope'", sess.run, sess, "nope:0")
  lu.assertErrorMsgContains("cannot fetch a number", sess.run, sess, 42)
end

function TestSession:test_uninitialised_variable_is_named()
  local g, x, _, _, y = mlp()
  local sess = npu.Session { graph = g }
  local ok, err = pcall(sess.run, sess, y, { [x] = npu.zeros({ 1, 4 }) })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_STATE")
  lu.assertStrContains(tostring(err), "variable 'w' is not initialised")
end

function TestSession:test_plan_cache_by_signature()
  local g, x, w, _, y = mlp()
  local sess = npu.Session { graph = g }
  lu.assertEquals(tostring(sess), "npu.Session(0 plans compiled)")
  sess:run(g:global_variables_initializer())
  lu.assertEquals(sess:n_plans(), 1)
  lu.assertEquals(tostring(sess), "npu.Session(1 plan compiled)")
  for _ = 1, 5 do sess:run(y, { [x] = npu.zeros({ 2, 4 }) }) end
  lu.assertEquals(sess:n_plans(), 2)
  sess:run(y, { [x] = npu.zeros({ 3, 4 }) }) -- another feed shape: another plan
  lu.assertEquals(sess:n_plans(), 3)
  sess:run({ y, w }, { [x] = npu.zeros({ 3, 4 }) })
  lu.assertEquals(sess:n_plans(), 4)
  sess:run(y, { [x] = npu.zeros({ 2, 4 }) }) -- cached
  lu.assertEquals(sess:n_plans(), 4)
end

function TestSession:test_results_are_not_overwritten_by_later_runs()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local y = x * 3
  local sess = npu.Session { graph = g }
  local r1 = sess:run(y, { [x] = { 1, 2 } })
  local r2 = sess:run(y, { [x] = { 10, 20 } })
  lu.assertEquals(r1:totable(), { 3, 6 })
  lu.assertEquals(r2:totable(), { 30, 60 })
end

function TestSession:test_variables_persist_and_assign()
  local g = npu.Graph()
  local v = g:variable(npu.tensor({ 1, 2 }), "v")
  local inc = npu.assign(v, v + 1)
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local before = sess:run(v)
  sess:run(inc)
  sess:run(inc)
  lu.assertEquals(sess:run(v):totable(), { 3, 4 })
  lu.assertEquals(before:totable(), { 1, 2 }) -- a fetched value is a snapshot
  -- variables live in the session: another session starts uninitialised
  local other = npu.Session { graph = g }
  lu.assertErrorMsgContains("not initialised", other.run, other, v)
  local value = g:placeholder("float32", { 2 }, "value")
  local set = npu.assign(v, value)
  sess:run(set, { [value] = { 7, 8 } })
  lu.assertEquals(sess:run(v):totable(), { 7, 8 })
  lu.assertErrorMsgContains("variable 'v' has shape [2]", npu.assign, v, g:const(npu.zeros({ 3 })))
  lu.assertErrorMsgContains("must be a variable", npu.assign, value, value)
end

function TestSession:test_close_and_use_after_close()
  local g, x, _, _, y = mlp()
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  sess:close()
  lu.assertTrue(sess:closed())
  lu.assertErrorMsgContains("NPU_ERR_STATE: the session is closed", sess.run, sess, y, { [x] = npu.zeros({ 1, 4 }) })
  sess:close() -- closing twice is harmless
  lu.assertStrContains(tostring(sess), "closed")
  local captured
  do
    local s <close> = npu.Session { graph = g }
    captured = s
  end
  lu.assertTrue(captured:closed())
end

function TestSession:test_many_sessions_at_once()
  local g, x, _, _, y = mlp()
  local sessions = {}
  for i = 1, 50 do
    sessions[i] = npu.Session { graph = g }
    sessions[i]:run(g:global_variables_initializer())
  end
  local feed = { [x] = npu.random.uniform({ 3, 4 }, { seed = 5 }) }
  local first = sessions[1]:run(y, feed)
  for i = 2, 50 do lu.assertTrue(npu.allclose(sessions[i]:run(y, feed), first, 0, 0)) end
  for i = 1, 50 do sessions[i]:close() end
end

function TestSession:test_use_off_line_false_is_the_host_reference_path()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 16, 32 }, "x")
  local w = g:const(npu.random.normal({ 32, 8 }, { seed = 3 }))
  local y = npu.nn.relu(x:matmul(w))
  local feed = { [x] = npu.random.uniform({ 16, 32 }, { seed = 4 }) }
  local dev = npu.Session { graph = g, options = { use_off_line = true } }:run(y, feed)
  local ref = npu.Session { graph = g, options = { use_off_line = false } }:run(y, feed)
  lu.assertTrue(npu.allclose(dev, ref, 1e-5, 1e-5))
end

function TestSession:test_session_device_id()
  local g = mlp()
  local s = npu.Session { graph = g, options = { session_device_id = 3 } }
  lu.assertNotNil(s)
  lu.assertErrorMsgContains("device 8 does not exist", npu.Session, { graph = g, options = { session_device_id = 8 } })
  lu.assertErrorMsgContains("session_device_id", npu.Session, { graph = g, options = { session_device_id = -1 } })
end

function TestSession:test_deterministic_across_runs()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 64, 300 }, "x")
  local w = g:const(npu.random.normal({ 300, 200 }, { seed = 8 }))
  local y = npu.reduce_sum(npu.nn.softmax(x:matmul(w)), { 1 })
  local feed = { [x] = npu.random.normal({ 64, 300 }, { seed = 9 }) }
  local sess = npu.Session { graph = g, options = { deterministic = 1 } }
  local first = sess:run(y, feed)
  for _ = 1, 5 do lu.assertTrue(npu.allclose(sess:run(y, feed), first, 0, 0)) end
end

function TestSession:test_flat_options_are_checked()
  local g = mlp()
  lu.assertErrorMsgContains("precision_mode", npu.Session, { graph = g, options = { precision_mode = "fp17" } })
  lu.assertErrorMsgContains("graph_run_mod", npu.Session, { graph = g, options = { graph_run_mod = 0 } })
  lu.assertErrorMsgContains("either config or options", npu.Session, { graph = g, options = {}, config = npu.ConfigProto() })
end

function TestSession:test_initialize_and_shutdown_system()
  lu.assertTrue(npu.initialize_system({ session_device_id = 1 }))
  local g = mlp()
  local s = npu.Session { graph = g }
  lu.assertNotNil(s)
  lu.assertTrue(npu.shutdown_system())
end

function TestSession:test_gc_stress_sessions_graphs_outputs()
  collectgarbage()
  collectgarbage()
  local base = npu.core.live_bytes()
  for i = 1, 300 do
    local g, x, _, _, y = mlp()
    local sess = npu.Session { graph = g }
    sess:run(g:global_variables_initializer())
    sess:run(y, { [x] = npu.zeros({ 1 + i % 3, 4 }) })
    if i % 2 == 0 then sess:close() end
  end
  collectgarbage()
  collectgarbage()
  lu.assertEquals(npu.core.live_bytes(), base)
end

function TestSession:test_deterministic_across_thread_counts()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 96, 128 }, "x")
  local w = g:const(npu.random.normal({ 128, 160 }, { seed = 21 }))
  local f = g:const(npu.random.normal({ 3, 3, 4, 8 }, { seed = 22 }))
  local img = g:placeholder("float32", { 2, 17, 19, 4 }, "img")
  local conv = npu.nn.conv2d(img, f, { strides = { 1, 2, 2, 1 }, padding = "SAME" })
  local y = { npu.reduce_mean(npu.nn.log_softmax(npu.tanh(x:matmul(w))), { 0 }),
    npu.nn.max_pool(npu.nn.relu(conv), { ksize = { 1, 2, 2, 1 }, strides = { 1, 2, 2, 1 }, padding = "SAME" }) }
  local feed = { [x] = npu.random.normal({ 96, 128 }, { seed = 23 }),
    [img] = npu.random.normal({ 2, 17, 19, 4 }, { seed = 24 }) }
  local sess = npu.Session { graph = g, options = { deterministic = 1 } }
  local full = npu.core.n_threads()
  npu.core.set_n_threads(1)
  local one = sess:run(y, feed)
  npu.core.set_n_threads(full)
  local many = sess:run(y, feed)
  lu.assertTrue(npu.allclose(one[1], many[1], 0, 0))
  lu.assertTrue(npu.allclose(one[2], many[2], 0, 0))
end
