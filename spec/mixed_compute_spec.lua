-- mixed_compute_spec.lua — mixed computing (mix_compile_mode, in_out_pair, in_out_pair_flag;
-- csrc/compile/mixed.c): an imported model with an op type the device lacks loads once a Lua
-- implementation is registered (npu.register_host_op) and runs it on the host under
-- mix_compile_mode; in_out_pair places the steps on a path between its in and out nodes on
-- the device (flag true) or on the host (flag false), with the same results.
local lu = require("luaunit")
local npu = require("npu")

local J = dofile(SPEC_DIR .. "/support.lua").tfjson
local json_graph, jplaceholder, jnode = J.graph, J.placeholder, J.node
local function jconst_int(name, v) return J.const(name, "DT_INT32", {}, { v }) end

-- x -> RowCumsum(x, axis) (a type this device lacks) -> Relu -> y
local function custom(type)
  return json_graph({
    jplaceholder("x", { 2, 3 }), jconst_int("axis", 1),
    jnode("cumsum", type, { "x", "axis" }), jnode("y", "Relu", { "cumsum" }),
  })
end
local CUSTOM = custom("RowCumsum")

local function code(f, ...)
  local ok, err = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  return npu.error_code(err), tostring(err)
end

TestMixedCompute = {}

function TestMixedCompute:test_unregistered_type_is_refused()
  local c, msg = code(npu.import_graph_def, custom("RowCumprod")) -- registered by no test
  lu.assertEquals(c, "NPU_ERR_UNSUPPORTED")
  lu.assertStrContains(msg, "RowCumprod")
end

function TestMixedCompute:test_registered_type_runs_on_the_host()
  local calls = 0
  npu.register_host_op("RowCumsum", function(x, axis)
    calls = calls + 1
    lu.assertEquals(axis:item(), 1) -- constant inputs arrive too, in order
    local rows = x:totable()
    for _, r in ipairs(rows) do
      for j = 2, #r do r[j] = r[j] + r[j - 1] end
    end
    return rows
  end)
  local g = npu.import_graph_def(CUSTOM)
  local x, y = "x:0", "y:0"
  local feed = { [x] = { { 1, -5, 2 }, { 0, 1, 1 } } }
  -- full offload (mix_compile_mode off): the node cannot run
  do
    local sess <close> = npu.Session { graph = g }
    local c, msg = code(sess.run, sess, y, feed)
    lu.assertEquals(c, "NPU_ERR_UNSUPPORTED")
    lu.assertStrContains(msg, "mix_compile_mode")
    lu.assertStrContains(msg, "RowCumsum")
  end
  local sess <close> = npu.Session { graph = g, options = { mix_compile_mode = true } }
  lu.assertEquals(sess:run(y, feed):totable(), { { 1, 0, 0 }, { 0, 1, 2 } })
  lu.assertEquals(calls, 1)
  local e = sess:explain(y, feed)
  local placement = {}
  for _, s in ipairs(e.steps) do placement[s.node] = s.placement end
  lu.assertEquals(placement.cumsum, "host")
  lu.assertEquals(placement.y, "device")
  -- errors in the implementation are the run's
  npu.register_host_op("RowCumsum", function() error("no cumsum today") end)
  local c, msg = code(sess.run, sess, y, feed)
  lu.assertEquals(c, "NPU_ERR_CALLBACK")
  lu.assertStrContains(msg, "no cumsum today")
end

function TestMixedCompute:test_device_types_cannot_be_registered()
  local c, msg = code(npu.register_host_op, "Relu", function() end)
  lu.assertEquals(c, "NPU_ERR_ARG")
  lu.assertStrContains(msg, "relu")
end

-- x -> MatMul(w) -> Relu -> AddV2(one) -> Sigmoid
local CHAIN = json_graph({
  jplaceholder("x", { 2, 2 }),
  '{"name": "w", "op": "Const", "attr": {"dtype": {"type": "DT_FLOAT"}, "value": {"tensor": {"dtype": "DT_FLOAT", "tensorShape": {"dim": [{"size": "2"}, {"size": "2"}]}, "floatVal": [1, -2, 0.5, 3]}}}}',
  '{"name": "one", "op": "Const", "attr": {"dtype": {"type": "DT_FLOAT"}, "value": {"tensor": {"dtype": "DT_FLOAT", "tensorShape": {}, "floatVal": [1]}}}}',
  jnode("mm", "MatMul", { "x", "w" }), jnode("relu", "Relu", { "mm" }),
  jnode("add", "AddV2", { "relu", "one" }), jnode("y", "Sigmoid", { "add" }),
})
local PAIR = "[[['mm'], ['relu']]]"

local function placements(options)
  local g = npu.import_graph_def(CHAIN)
  local x, y = "x:0", "y:0"
  local feed = { [x] = { { 1, 2 }, { -3, 4 } } }
  local sess <close> = npu.Session { graph = g, options = options }
  local got = sess:run(y, feed):totable()
  local where = {}
  for _, s in ipairs(sess:explain(y, feed).steps) do
    for _, n in ipairs(s.absorbed or {}) do where[n] = s.placement end
    where[s.node] = s.placement
  end
  return where, got
end

function TestMixedCompute:test_in_out_pair_places_the_range()
  local _, want = placements({})
  -- flag true (the default): [mm, relu] on the device, the rest on the host
  local where, got = placements({ mix_compile_mode = true, in_out_pair = PAIR })
  lu.assertEquals(where.mm, "device")
  lu.assertEquals(where.relu, "device")
  lu.assertEquals(where.y, "host")
  for i = 1, 2 do for j = 1, 2 do lu.assertAlmostEquals(got[i][j], want[i][j], 1e-6) end end
  -- flag false: the range on the host, the rest on the device
  where, got = placements({ mix_compile_mode = true, in_out_pair = PAIR, in_out_pair_flag = false })
  lu.assertEquals(where.mm, "host")
  lu.assertEquals(where.y, "device")
  for i = 1, 2 do for j = 1, 2 do lu.assertAlmostEquals(got[i][j], want[i][j], 1e-6) end end
  -- without mix_compile_mode in_out_pair is refused (option rules)
  lu.assertEquals((code(placements, { in_out_pair = PAIR })), "NPU_ERR_CONFLICT")
  -- a name the graph lacks
  local c, msg = code(placements, { mix_compile_mode = true, in_out_pair = "[[['nope'], ['relu']]]" })
  lu.assertEquals(c, "NPU_ERR_NOT_FOUND")
  lu.assertStrContains(msg, "nope")  -- more pairs than the placement's 8 bits per node hold
  c, msg = code(placements, { mix_compile_mode = true, in_out_pair = "[" .. ("[['mm'], ['relu']],"):rep(8) .. "[['mm'], ['relu']]]" })
  lu.assertEquals(c, "NPU_ERR_OPTION")
  lu.assertStrContains(msg, "in_out_pair: at most 8")
end
