-- graph_spec.lua — graph building: names, lookups, shape inference at build time, operators,
-- the default graph, the generic op form, errors naming the culprit.
local lu = require("luaunit")
local npu = require("npu")

TestGraph = {}

function TestGraph:test_names_are_suffixed_like_tensorflow()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 2, 2 }, "a")
  local m1 = a:matmul(a)
  local m2 = a:matmul(a)
  local m3 = npu.matmul(a, a)
  lu.assertEquals(m1:op():name(), "MatMul")
  lu.assertEquals(m2:op():name(), "MatMul_1")
  lu.assertEquals(m3:op():name(), "MatMul_2")
  lu.assertEquals(m1:name(), "MatMul:0")
  local a2 = g:placeholder("float32", { 2 }, "a")
  lu.assertEquals(a2:op():name(), "a_1")
end

function TestGraph:test_explicit_names_and_lookup()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 3 }, "input")
  local y = npu.nn.relu(x, { name = "act" })
  lu.assertEquals(y:name(), "act:0")
  lu.assertTrue(g:get_tensor_by_name("act:0") == y)
  lu.assertTrue(g:get_tensor_by_name("input:0") == x)
  lu.assertEquals(g:get_operation_by_name("act"):type(), "relu")
  lu.assertErrorMsgContains("no node named 'nope'", g.get_tensor_by_name, g, "nope:0")
  lu.assertErrorMsgContains("has 1 output", g.get_tensor_by_name, g, "act:1")
  lu.assertErrorMsgContains("not a tensor name", g.get_tensor_by_name, g, "act:x")
end

function TestGraph:test_shapes_inferred_while_building()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 784 }, "x")
  local w = g:const(npu.zeros({ 784, 10 }))
  local y = x:matmul(w)
  lu.assertEquals(y:shape(), { -1, 10 })
  lu.assertEquals(y:dtype(), "float32")
  local z = y + g:const(npu.zeros({ 10 }))
  lu.assertEquals(z:shape(), { -1, 10 })
  lu.assertEquals(npu.matmul(x, w, { transpose_a = false }):shape(), { -1, 10 })
  local t = g:placeholder("float32", { 10, 784 }, "t")
  lu.assertEquals(npu.matmul(t, w, { transpose_a = true, transpose_b = true }):shape(), { 784, 784 })
  local u = g:placeholder("float32", nil, "unknown_rank")
  lu.assertNil((u + u):shape())
end

function TestGraph:test_impossible_matmul_names_op_and_both_shapes()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 2, 3 }, "a")
  local b = g:placeholder("float32", { 4, 5 }, "b")
  local ok, err = pcall(npu.matmul, a, b)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "matmul")
  lu.assertStrContains(tostring(err), "[2,3]")
  lu.assertStrContains(tostring(err), "[4,5]")
  lu.assertEquals(npu.error_code(err), "NPU_ERR_SHAPE")
  -- nothing was added
  lu.assertEquals(g:n_nodes(), 2)
end

function TestGraph:test_error_points_at_the_building_line()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 2, 3 }, "a")
  local ok, err = pcall(function() return a:matmul(a) end)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "[2,3]")
end

function TestGraph:test_broadcast_errors_name_both_shapes()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 2, 3 }, "a")
  local b = g:placeholder("float32", { 4 }, "b")
  lu.assertErrorMsgContains("[2,3] and [4]", function() return a + b end)
end

function TestGraph:test_dtype_mismatch_is_an_error()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 2 }, "a")
  local b = g:placeholder("int32", { 2 }, "b")
  local ok, err = pcall(function() return a + b end)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_DTYPE")
  lu.assertStrContains(tostring(err), "float32")
  lu.assertStrContains(tostring(err), "int32")
end

function TestGraph:test_operators_and_constants()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 3 }, "x")
  local y = (x + 1) * 2 - x / 4
  local z = -y
  local sess = npu.Session { graph = g }
  local r = sess:run(z, { [x] = { 1, 2, 4 } }):totable()
  for i, v in ipairs({ 1, 2, 4 }) do
    lu.assertAlmostEquals(r[i], -((v + 1) * 2 - v / 4), 1e-6)
  end
  local r2 = sess:run(2 - x, { [x] = { 1, 2, 4 } }):totable()
  lu.assertEquals(r2, { 1, 0, -2 })
end

-- %, // and ^ are TensorFlow's floormod, floordiv and pow (negative operands show the floor
-- rule: Lua's math.fmod would give -0.5 and 1.5 here); < and <= raise, naming the ops to use.
function TestGraph:test_floor_operators_power_and_no_ordering()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4 }, "x")
  local sess = npu.Session { graph = g }
  local feeds = { [x] = { -3.5, 2, 7, -1.5 } }
  lu.assertEquals(sess:run(x % 3, feeds):totable(), { 2.5, 2, 1, 1.5 })
  lu.assertEquals(sess:run(x // 2, feeds):totable(), { -2, 1, 3, -1 })
  lu.assertEquals(sess:run(x ^ 2, feeds):totable(), { 12.25, 4, 49, 2.25 })
  lu.assertEquals(sess:run(2 ^ x, feeds):totable()[3], 128)
  lu.assertEquals((x % 3):op():type(), "floor_mod")
  local i = g:placeholder("int32", { 2 }, "i")
  lu.assertEquals(sess:run(i // 2, { [i] = { -3, 5 } }):totable(), { -2, 2 })
  for _, case in ipairs({ { function() return x < 1 end, "npu.less(a, b)" },
                          { function() return 1 < x end, "npu.greater(a, b)" },
                          { function() return x <= x end, "npu.less_equal(a, b)" } }) do
    local ok, err = pcall(case[1])
    lu.assertFalse(ok)
    lu.assertTrue(npu.errors.is(err, "NPU_ERR_ARG"), tostring(err))
    lu.assertStrContains(tostring(err), case[2])
  end
end

function TestGraph:test_unknown_op_suggests_nearest()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 3 }, "x")
  lu.assertErrorMsgContains("did you mean 'matmul'", g.op, g, "matmull", { x, x })
end

function TestGraph:test_wrong_arity()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 3 }, "x")
  lu.assertErrorMsgContains("takes 2 input(s), got 1", g.op, g, "add", { x })
end

function TestGraph:test_inputs_from_another_graph_are_refused()
  local g1, g2 = npu.Graph(), npu.Graph()
  local a = g1:placeholder("float32", { 2 }, "a")
  local b = g2:placeholder("float32", { 2 }, "b")
  lu.assertErrorMsgContains("belongs to another graph", function() return npu.add(a, b) end)
end

function TestGraph:test_default_graph_and_as_default()
  npu.reset_default_graph()
  local x = npu.placeholder("float32", { 2 }, "x")
  lu.assertTrue(rawequal(x:graph(), npu.get_default_graph()))
  local g = npu.Graph()
  do
    local _ <close> = g:as_default()
    local y = npu.placeholder("float32", { 2 }, "y")
    lu.assertTrue(rawequal(y:graph(), g))
  end
  lu.assertFalse(rawequal(npu.get_default_graph(), g))
  npu.reset_default_graph()
end

function TestGraph:test_tostring()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 3 }, "x")
  lu.assertStrContains(tostring(x), 'npu.Output("x:0", op=placeholder, dtype=float32, shape=[-1,3])')
  lu.assertStrContains(tostring(g), "npu.Graph(1 nodes)")
  lu.assertStrContains(tostring(x:op()), 'npu.Operation("x", op=placeholder)')
end

function TestGraph:test_bad_attribute_types()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 2 }, "x")
  lu.assertErrorMsgContains("transpose_a", npu.matmul, x, x, { transpose_a = "yes" })
  lu.assertErrorMsgContains("attribute 'dtype' is required", g.add_op, g, "placeholder", {}, {})
  lu.assertErrorMsgContains("unsupported value type", g.add_op, g, "placeholder", {}, { dtype = print })
end

function TestGraph:test_variables_need_known_shapes_and_list()
  local g = npu.Graph()
  local v = g:variable(npu.zeros({ 2, 3 }), "v")
  lu.assertEquals(v:shape(), { 2, 3 })
  lu.assertEquals(#g:global_variables(), 1)
  local x = g:placeholder("float32", { -1 }, "x")
  lu.assertErrorMsgContains("fully known", g.variable, g, x)
end

function TestGraph:test_op_table_is_exposed()
  local names = {}
  for _, def in ipairs(npu.core.op_list()) do names[def.name] = def end
  for _, n in ipairs({ "matmul", "add", "sub", "mul", "div", "neg", "maximum", "minimum", "bias_add",
    "relu", "relu6", "sigmoid", "tanh", "exp", "log", "sqrt", "square", "softmax", "log_softmax",
    "reshape", "transpose", "concat", "slice", "pad", "reduce_sum", "reduce_mean", "reduce_max",
    "argmax", "cast", "identity", "conv2d", "depthwise_conv2d", "max_pool", "avg_pool" }) do
    lu.assertNotNil(names[n], n)
    lu.assertNotNil(npu[n], "npu." .. n)
  end
  lu.assertEquals(names.matmul.tf_type, "MatMul")
  lu.assertEquals(names.matmul.precision_list, "trust")
end
