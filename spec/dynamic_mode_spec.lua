-- dynamic_mode_spec.lua — compile_dynamic_mode (000: "all input shapes are generalised to -1"):
-- a placeholder's declared dims stop binding its feeds (its rank still does), one dynamic-shape
-- plan runs every shape (its steps shaped when they run), and an op that cannot take them fails
-- naming itself.
local lu = require("luaunit")
local npu = require("npu")

local fails = dofile(SPEC_DIR .. "/support.lua").fails

TestCompileDynamicMode = {}

local function dense()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local w = g:const(npu.tensor({ { 1, 2, 3, 4 }, { -1, 0, 1, 0 }, { 0.5, 0.5, 0.5, 0.5 } }), "w")
  return g, x, npu.nn.relu(x:matmul(w))
end

function TestCompileDynamicMode:test_declared_dims_stop_binding_feeds()
  local g, x, y = dense()
  local rows = { { 1, 2, 3 }, { -1, 0, 4 }, { 2, 2, 2 }, { 0, 0, 1 }, { 3, -2, 1 } }
  local off = npu.Session { graph = g }
  lu.assertStrContains(fails(off.run, off, y, { [x] = npu.tensor(rows) }),
    "placeholder 'x' expects [2,3], got [5,3]")
  local on = npu.Session { graph = g, options = { compile_dynamic_mode = true } }
  local got = on:run(y, { [x] = npu.tensor(rows) })
  lu.assertEquals(got:shape(), { 5, 4 })
  -- each row as the declared shape computes it (rows i, i+1 through the static session)
  local want = {}
  for i = 1, 4, 2 do
    local two = off:run(y, { [x] = npu.tensor({ rows[i], rows[i + 1] }) }):totable()
    want[i], want[i + 1] = two[1], two[2]
  end
  want[5] = off:run(y, { [x] = npu.tensor({ rows[5], rows[1] }) }):totable()[1]
  lu.assertEquals(got:totable(), want)
  -- the rank still binds
  lu.assertStrContains(fails(on.run, on, y, { [x] = npu.ones({ 5, 3, 1 }) }),
    "placeholder 'x' expects [2,3], got [5,3,1]")
  -- an op that cannot take the fed shape fails the run, naming itself (its step is dynamic)
  local gr = npu.Graph()
  local xr = gr:placeholder("float32", { 2, 3 }, "xr")
  local r = npu.reshape(xr, { 3, 2 }, { name = "fixed_reshape" })
  local s = npu.Session { graph = gr, options = { compile_dynamic_mode = true } }
  lu.assertStrContains(fails(s.run, s, r, { [xr] = npu.ones({ 4, 3 }) }), "fixed_reshape")
end

function TestCompileDynamicMode:test_convolution_batch_of_two_equals_two_of_one()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, 6, 6, 2 }, "image")
  local f = g:const(npu.random.normal({ 3, 3, 2, 4 }, { seed = 5 }), "filter")
  local y = npu.nn.max_pool(npu.nn.relu(npu.nn.conv2d(x, f, { strides = { 1, 1, 1, 1 }, padding = "SAME" })),
    { ksize = { 1, 2, 2, 1 }, strides = { 1, 2, 2, 1 }, padding = "VALID" })
  local a = npu.random.uniform({ 1, 6, 6, 2 }, { seed = 1 })
  local b = npu.random.uniform({ 1, 6, 6, 2 }, { seed = 2 })
  local static = npu.Session { graph = g }
  local want = { static:run(y, { [x] = a }):totable()[1], static:run(y, { [x] = b }):totable()[1] }
  local ab = npu.tensor({ a:totable()[1], b:totable()[1] })
  local on = npu.Session { graph = g, options = { compile_dynamic_mode = true } }
  local got = on:run(y, { [x] = ab })
  lu.assertEquals(got:shape(), { 2, 3, 3, 4 })
  lu.assertEquals(got:totable(), want) -- same kernels, same bits
end

function TestCompileDynamicMode:test_not_with_profiles()
  local g = dense()
  lu.assertStrContains(fails(npu.Session, { graph = g, options = { compile_dynamic_mode = true,
    input_shape = "x:-1,3", dynamic_dims = "1;2", dynamic_node_type = 1 } }), "compile_dynamic_mode")
end
