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

-- Host ops under the reduced-precision modes: the host sees its inputs and returns its outputs
-- in the graph's dtypes whatever the mode (a float16 input is cast back to float32 for it), and
-- a host output, of unknown rank until it runs, may feed a matmul, a convolution or a reshape,
-- inside a loop too.  (A host output fetched directly once failed with "rank -1" under
-- force_fp16: the precision pass stored it in float16 and planned a Cast of unknown shape.)
local REDUCED = { "force_fp16", "allow_mix_precision", "allow_fp32_to_fp16" }

function TestHostFunc:test_reduced_modes_matmul_in_host_out_fetched()
  for _, mode in ipairs(REDUCED) do
    local g = npu.Graph()
    local x = g:placeholder("float32", { 2, 2 }, "x")
    local w = g:const(npu.tensor({ { 1, 0 }, { 0, 3 } }, "float32"))
    local dtype_seen
    local y = npu.host_func(function(t)
      dtype_seen = t:dtype()
      return t
    end, npu.matmul(x, w), "float32", "id")
    local sess <close> = npu.Session { graph = g, options = { precision_mode = mode } }
    local r = sess:run(y, { [x] = { { 1.001, 2 }, { 3, 4 } } })
    lu.assertEquals(dtype_seen, "float32", mode)
    lu.assertEquals(r:dtype(), "float32", mode)
    -- the matmul's output is stored in float16 in these modes: 1.001 rounds to 1 + 2^-10
    lu.assertEquals(r:totable(), { { 1.0009765625, 6 }, { 3, 12 } }, mode)
  end
end

function TestHostFunc:test_reduced_modes_host_out_feeds_matmul_conv_reshape()
  for _, mode in ipairs(REDUCED) do
    local g = npu.Graph()
    local x = g:placeholder("float32", { 1, 2, 2, 1 }, "x")
    local f = g:const(npu.tensor({ { { { 2 } } } }, "float32")) -- 1x1 conv, times 2
    local h = npu.host_func(function(t) return t end, npu.nn.conv2d(x, f, { strides = 1, padding = "SAME" }),
      "float32", "after_conv")
    local conv = npu.nn.conv2d(h, f, { strides = 1, padding = "SAME" }) -- x * 4
    local m = npu.host_func(function(t) return t end, npu.reshape(conv, { 2, 2 }), "float32", "to_mm")
    local mm = npu.matmul(m, g:const(npu.tensor({ { 1, 0 }, { 0, 10 } }, "float32")))
    local flat = npu.reshape(mm, { -1 })
    local sess <close> = npu.Session { graph = g, options = { precision_mode = mode } }
    lu.assertEquals(sess:run(flat, { [x] = { { { { 1 }, { 2 } }, { { 3 }, { 4 } } } } }):totable(),
      { 4, 80, 12, 160 }, mode)
    -- a host result of the wrong rank for the matmul: the run's error names the step
    local bad = npu.host_func(function() return { 1, 2, 3 } end, x, "float32", "vector")
    local ok, err = pcall(sess.run, sess, npu.matmul(bad, bad), { [x] = { { { { 1 }, { 2 } }, { { 3 }, { 4 } } } } })
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "NPU_ERR_SHAPE")
    lu.assertStrContains(tostring(err), "needs two matrices, got shapes [3] and [3]")
  end
end

function TestHostFunc:test_matmul_of_an_unknown_rank_is_built()
  -- the graph is built without an error; its output is a matrix of unknown dimensions
  local g = npu.Graph()
  local y = npu.host_func(function() return { { 1, 2 } } end, g:const(0, "float32"), "float32")
  local mm = npu.matmul(y, g:const(npu.tensor({ { 1 }, { 1 } }, "float32")))
  lu.assertEquals(#mm:shape(), 2)
  lu.assertErrorMsgContains("needs two matrices", npu.matmul, y, g:const(npu.tensor({ 1, 1 }, "float32")))
  local sess <close> = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  lu.assertEquals(sess:run(mm):totable(), { { 3 } })
end

function TestHostFunc:test_reduced_modes_inside_a_while_loop()
  for _, mode in ipairs(REDUCED) do
    local g = npu.Graph()
    local w = g:const(npu.tensor({ { 1, 0 }, { 0, 2 } }, "float32"))
    local calls = 0
    local r = npu.while_loop(function(i) return npu.less(i, 3) end, function(i, v)
      local d = npu.host_func(function(t)
        calls = calls + 1
        return t
      end, npu.matmul(v, w), "float32")
      return i + 1, d
    end, { g:const(0, "int32"), g:const(npu.tensor({ { 1, 1 } }, "float32")) })
    local sess <close> = npu.Session { graph = g, options = { precision_mode = mode } }
    lu.assertEquals(sess:run(npu.matmul(r[2], w)):totable(), { { 1, 16 } }, mode)
    lu.assertEquals(calls, 3, mode)
  end
end

function TestHostFunc:test_reduced_modes_registered_host_op_in_an_imported_graph()
  local J = dofile(SPEC_DIR .. "/support.lua").tfjson
  local model = J.graph({
    J.placeholder("x", { 2, 2 }), J.const("w", "DT_FLOAT", { 2, 2 }, { 1, -2, 0.5, 3 }),
    J.const("flat", "DT_INT32", { 1 }, { -1 }),
    J.node("mm", "MatMul", { "x", "w" }), J.node("cs", "HalfSpecRowCumsum", { "mm" }),
    J.node("mm2", "MatMul", { "cs", "w" }), J.node("r", "Reshape", { "mm2", "flat" }),
    J.node("y", "Relu", { "r" }),
  })
  npu.register_host_op("HalfSpecRowCumsum", function(t)
    lu.assertEquals(t:dtype(), "float32")
    local rows = t:totable()
    for _, row in ipairs(rows) do for j = 2, #row do row[j] = row[j] + row[j - 1] end end
    return rows
  end)
  -- x w = {{2, 4}, {-1, 18}}; cumsum {{2, 6}, {-1, 17}}; times w {{5, 14}, {7.5, 53}}
  for _, mode in ipairs(REDUCED) do
    for _, pair in ipairs { false, "[[['mm2'], ['y']]]" } do
      local g = npu.import_graph_def(model)
      local sess <close> = npu.Session { graph = g, options = {
        precision_mode = mode, mix_compile_mode = true, in_out_pair = pair or nil } }
      lu.assertEquals(sess:run("y:0", { ["x:0"] = { { 1, 2 }, { -3, 4 } } }):totable(), { 5, 14, 7.5, 53 },
        mode .. " " .. tostring(pair))
    end
  end
end
