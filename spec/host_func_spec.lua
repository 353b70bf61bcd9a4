-- host_func_spec.lua — host ops: npu.host_func puts a Lua function into a graph (as
-- tf.numpy_function does): values in and out, several outputs, inside a while loop, errors
-- as the run's error, the function collected with its graph.
local lu = require("luaunit")
local npu = require("npu")

TestHostFunc = {}

function TestHostFunc:test_values_in_and_out()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1 }, "x")
  local seen_thread
  local y = npu.host_func(function(t)
    seen_thread = coroutine.running()
    local v = t:totable()
    local out = {}
    for i = #v, 1, -1 do out[#out + 1] = v[i] * 10 end -- reversed, times 10
    return out
  end, x, "float32", "reverse")
  local z = y + 1
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(z, { [x] = { 1, 2, 3 } }):totable(), { 31, 21, 11 })
  lu.assertEquals(sess:run(z, { [x] = { 5 } }):totable(), { 51 })
  lu.assertEquals(seen_thread, coroutine.running()) -- the thread that called sess:run
end

function TestHostFunc:test_several_outputs_and_dtypes()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 2 }, "a")
  local b = g:placeholder("int32", {}, "b")
  local outs = npu.host_func(function(ta, tb)
    lu.assertEquals(ta:dtype(), "float32")
    lu.assertEquals(tb:dtype(), "int32")
    return npu.tensor({ { 1, 2 }, { 3, 4 } }, "float32"), tb:item() + 1
  end, { a, b }, { "float32", "int32" })
  lu.assertEquals(#outs, 2)
  local sess <close> = npu.Session { graph = g }
  local r = sess:run(outs, { [a] = { 0, 0 }, [b] = 41 })
  lu.assertEquals(r[1]:shape(), { 2, 2 })
  lu.assertEquals(r[2]:item(), 42)
  lu.assertEquals(r[2]:dtype(), "int32")
end

function TestHostFunc:test_inside_a_while_loop()
  local g = npu.Graph()
  local calls = 0
  local r = npu.while_loop(function(i, v) return npu.less(i, 5) end, function(i, v)
    local doubled = npu.host_func(function(t)
      calls = calls + 1
      return t:item() * 2
    end, v, "float32")
    return i + 1, doubled
  end, { g:const(0, "int32"), g:const(1, "float32") })
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(r[2]):item(), 32)
  lu.assertEquals(calls, 5)
end

function TestHostFunc:test_errors_are_the_runs_error()
  local g = npu.Graph()
  local x = g:placeholder("float32", {}, "x")
  local y = npu.host_func(function(t)
    if t:item() < 0 then error("negative input") end
    return t
  end, x, "float32", "checked")
  local sess <close> = npu.Session { graph = g }
  local ok, err = pcall(sess.run, sess, y, { [x] = -1 })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "npu.Session:run: NPU_ERR_CALLBACK: host_func 'checked':")
  lu.assertStrContains(tostring(err), "negative input")
  lu.assertEquals(sess:run(y, { [x] = 2 }):item(), 2) -- usable after
  -- a result of the wrong kind, a missing result
  local bad = npu.host_func(function() return "text" end, x, "float32", "bad")
  lu.assertErrorMsgContains("host_func 'bad'", sess.run, sess, bad, { [x] = 1 })
  local none = npu.host_func(function() end, x, "float32", "none")
  lu.assertErrorMsgContains("result 1 is nil", sess.run, sess, none, { [x] = 1 })
  -- a host function may not run its own session again
  local again
  again = npu.host_func(function(t) return sess:run(y, { [x] = 1 }) end, x, "float32", "again")
  lu.assertErrorMsgContains("already running", sess.run, sess, again, { [x] = 1 })
end

function TestHostFunc:test_bad_arguments()
  local g = npu.Graph()
  local x = g:placeholder("float32", {}, "x")
  lu.assertErrorMsgContains("fn must be a function", npu.host_func, 1, x, "float32")
  lu.assertErrorMsgContains("must be a dtype name", npu.host_func, print, x, "complex")
  lu.assertErrorMsgContains("1 to 16 output dtypes", npu.host_func, print, x, {})
  local other = npu.Graph():placeholder("float32", {}, "y")
  lu.assertErrorMsgContains("npu.Output of the graph", npu.host_func, print, { x, other }, "float32")
end

function TestHostFunc:test_the_function_is_collected_with_its_graph()
  local probe = setmetatable({}, { __mode = "v" })
  do
    local g = npu.Graph()
    local x = g:placeholder("float32", {}, "x")
    local f = function(t) return t end
    probe[1] = f
    local y = npu.host_func(f, x, "float32")
    local sess <close> = npu.Session { graph = g }
    lu.assertEquals(sess:run(y, { [x] = 3 }):item(), 3)
  end
  collectgarbage()
  collectgarbage()
  lu.assertNil(probe[1])
end
