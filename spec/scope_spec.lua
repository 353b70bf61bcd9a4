-- scope_spec.lua — names as TensorFlow forms them: npu.name_scope / npu.variable_scope, layers
-- with a name, optimizer updates and gradients, so names written in TF scripts (dump_layer,
-- fp_point/bp_point, keep_tensors_dtypes, modify_mixlist) find their nodes.
local lu = require("luaunit")
local npu = require("npu")

TestScopes = {}

local function names(g)
  local list = {}
  for i = 0, g:n_nodes() - 1 do list[#list + 1] = g:operation(i):name() end
  return list
end

local function has(list, name)
  for _, n in ipairs(list) do if n == name then return true end end
  return false
end

function TestScopes:test_name_scope_prefixes_nodes_and_returns_results()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 2 }, "x")
  local a, b = npu.name_scope("fc", function()
    return npu.matmul(x, x), npu.nn.relu(x, { name = "act" })
  end)
  lu.assertEquals(a:op():name(), "fc/MatMul")
  lu.assertEquals(b:op():name(), "fc/act")
  -- nested, and a scope opened again gets a new name
  local c = npu.name_scope("fc", function()
    return npu.name_scope("inner", function() return npu.nn.relu(x) end)
  end)
  lu.assertEquals(c:op():name(), "fc_1/inner/Relu")
  -- outside: no prefix
  lu.assertEquals(npu.nn.relu(x):op():name(), "Relu")
end

function TestScopes:test_close_form_and_absolute_names()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  do
    local _ <close> = npu.name_scope("block")
    lu.assertEquals(npu.neg(x):op():name(), "block/Neg")
    lu.assertEquals(npu.name_scope("top/", function() return npu.neg(x) end):op():name(), "top/Neg")
    lu.assertEquals(npu.get_name_scope(g), "block/")
  end
  lu.assertEquals(npu.get_name_scope(g), "")
  lu.assertEquals(npu.neg(x):op():name(), "Neg")
end

function TestScopes:test_errors_inside_a_scope_close_it()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local ok, err = pcall(npu.name_scope, "bad", function() return npu.matmul(x, x) end)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "matmul 'bad/MatMul'")
  lu.assertEquals(npu.get_name_scope(g), "")
  lu.assertErrorMsgContains("the scope name must be a string", npu.name_scope, 1, function() end)
end

function TestScopes:test_variable_scope_keeps_its_name()
  local g = npu.Graph()
  local v1 = npu.variable_scope("enc", function() return g:variable(npu.zeros({ 2 }), "w") end)
  local c = npu.variable_scope("enc", function() return g:const(1, "c") end)
  lu.assertEquals(v1:op():name(), "enc/w")
  lu.assertEquals(c:op():name(), "enc/c")
  lu.assertTrue(has(names(g), "enc/w/Assign"))
end

function TestScopes:test_layers_optimizer_and_gradients_are_named_like_tensorflow()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 3 }, "x")
  local y = npu.layers.dense(x, 2, { name = "fc", activation = "relu" })
  local y2 = npu.layers.dense(y, 1) -- the default name
  local y3 = npu.layers.dense(y2, 1)
  local loss = npu.reduce_mean(npu.square(y3))
  npu.train.GradientDescentOptimizer(0.1):minimize(loss)
  local n = names(g)
  for _, want in ipairs({ "fc/kernel", "fc/bias", "fc/MatMul", "fc/BiasAdd", "fc/Relu",
    "dense/kernel", "dense/MatMul", "dense_1/kernel", "dense_1/BiasAdd",
    "gradients/fc/MatMul_grad/MatMul", "gradients/fc/Relu_grad/ReluGrad",
    "GradientDescent/update_fc/kernel/Assign", "GradientDescent/update_dense_1/bias/Assign",
    "GradientDescent" }) do
    lu.assertTrue(has(n, want), want .. " not in " .. table.concat(n, " "))
  end
  lu.assertEquals(y:op():name(), "fc/Relu")
  lu.assertErrorMsgContains("unknown keyword 'actvation' (did you mean 'activation'?)",
    npu.layers.dense, x, 2, { actvation = "relu" })
end

function TestScopes:test_dump_layer_finds_a_scoped_name()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, 3 }, "x")
  local y = npu.layers.dense(x, 2, { name = "fc" })
  g:global_variables_initializer()
  -- keep_tensors_dtypes takes TF names
  npu.util.keep_tensors_dtypes(g, { "fc/MatMul:0" })
  lu.assertEquals(g:get_tensor_by_name("fc/BiasAdd:0"), y)
end
