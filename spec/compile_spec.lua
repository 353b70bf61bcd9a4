-- compile_spec.lua — what compiling a plan does: pruning to the fetches, constant folding
-- (oo_constant_folding), Shape known from the feeds' shapes.
local lu = require("luaunit")
local npu = require("npu")

TestCompile = {}

function TestCompile:test_pruning_runs_only_what_the_fetches_need()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local a = npu.relu(x)
  local _unused = npu.exp(npu.sqrt(x))
  local sess = npu.Session { graph = g }
  sess:run(a, { [x] = { 1, -1 } })
  lu.assertEquals(sess:last_plan().steps, 1)
end

function TestCompile:test_constant_subgraphs_fold_and_match_unfolded()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 3, 4 }, "x")
  local w = g:const(npu.random.normal({ 4, 4 }, { seed = 1 }))
  local ex = npu.exp(g:const(npu.tensor({ 0.5 })))
  local scale = ex * 2                    -- all constant: folds
  local tr = npu.transpose(w, { 1, 0 })
  local w2 = tr * scale                   -- folds too
  local y = npu.nn.relu(x:matmul(w2))
  local feed = { [x] = npu.random.normal({ 3, 4 }, { seed = 2 }) }
  local on = npu.Session { graph = g }
  local off = npu.Session { graph = g, options = { oo_constant_folding = false } }
  local r_on, r_off = on:run(y, feed), off:run(y, feed)
  lu.assertTrue(npu.allclose(r_on, r_off, 0, 0))
  lu.assertEquals(on:last_plan().folded, 4) -- exp, mul, transpose, mul
  lu.assertEquals(on:explain(y, feed).folded_nodes,
    { ex:op():name(), scale:op():name(), tr:op():name(), w2:op():name() }) -- in graph order
  lu.assertEquals(off:explain(y, feed).folded_nodes, {})
  lu.assertEquals(on:last_plan().steps, 2)
  lu.assertEquals(off:last_plan().folded, 0)
  -- 6 nodes; exp and its * 2 fuse (TbeEltwiseFusionPass), the fast exp (the default mode,
  -- high_performance) or libm's (high_precision)
  lu.assertEquals(off:last_plan().steps, 5)
  local precise = npu.Session { graph = g, options = { oo_constant_folding = false,
    op_select_implmode = "high_precision" } }
  lu.assertTrue(npu.allclose(precise:run(y, feed), r_off, 1e-6, 0))
  lu.assertEquals(precise:last_plan().steps, 5)
end

function TestCompile:test_shape_is_known_from_the_feeds()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 3 }, "x")
  local s = npu.shape(x)
  lu.assertEquals(s:shape(), { 2 })
  local sess = npu.Session { graph = g }
  lu.assertEquals(sess:run(s, { [x] = npu.zeros({ 5, 3 }) }):totable(), { 5, 3 })
  lu.assertEquals(sess:run(s, { [x] = npu.zeros({ 2, 3 }) }):totable(), { 2, 3 })
  lu.assertEquals(sess:last_plan().steps, 0)
  local s64 = npu.shape(x, { out_type = "int64" })
  lu.assertEquals(sess:run(s64, { [x] = npu.zeros({ 4, 3 }) }):dtype(), "int64")
  lu.assertErrorMsgContains("out_type must be int32 or int64", npu.shape, x, { out_type = "float32" })
end

function TestCompile:test_variables_and_feeds_never_fold()
  local g = npu.Graph()
  local v = g:variable(npu.tensor({ 1, 2 }), "v")
  local y = v * 3
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  lu.assertEquals(sess:run(y):totable(), { 3, 6 })
  sess:run(npu.assign(v, g:const(npu.tensor({ 10, 20 }))))
  lu.assertEquals(sess:run(y):totable(), { 30, 60 })
end
