--- variables_spec.lua — variables live in the C graph (npu_graph_add_variable and friends):
-- a graph built in Lua, one imported from a binary GraphDef (.pb) and one from a TensorFlow.js
-- model.json list the same variables, with the same initializers and trainable flags; raw
-- variable nodes register too; errors name the culprit; a SavedModel loads frozen (none) by
-- default and keeps its variables with {variables = true}: the same outputs, bit for bit, and
-- they train and save.
local lu = require("luaunit")
local npu = require("npu")

local S = dofile(SPEC_DIR .. "/support.lua")

TestVariables = {}

local function names(list)
  local out = {}
  for i, v in ipairs(list) do out[i] = v:name() end
  return out
end

-- The values of g's variables after its initializer ran, by name.
local function initialized(g)
  local init = g:global_variables_initializer()
  local sess <close> = npu.Session { graph = g }
  sess:run(init)
  local out = {}
  for _, v in ipairs(g:global_variables()) do out[v:name()] = sess:run(v):totable() end
  return out
end

-- w = {1, 2} (float32), step = 7 (int32: not trainable), built in Lua.
local function lua_graph()
  local g = npu.Graph()
  g:variable(npu.tensor({ 1, 2 }), "w")
  g:variable(npu.tensor(7, "int32"), "step")
  return g
end

-- The same graph as TensorFlow writes it: VariableV2 + Const + "<name>/Assign" nodes.
local F = S.pb_field
local function str(num, s) return F(num, 2, s) end
local DT_FLOAT, DT_INT32 = 1, 3
local function attr(key, value) return str(5, str(1, key) .. str(2, value)) end
local function shape_proto(dims)
  local s = {}
  for i, d in ipairs(dims) do s[i] = str(2, F(1, 0, d)) end
  return table.concat(s)
end
local function node(name, op, inputs, attrs)
  local s = { str(1, name), str(2, op) }
  for _, i in ipairs(inputs) do s[#s + 1] = str(3, i) end
  for _, a in ipairs(attrs) do s[#s + 1] = attr(a[1], a[2]) end
  return str(1, table.concat(s))
end
local function const(name, dtype, dims, content)
  local tensor = F(1, 0, dtype) .. str(2, shape_proto(dims)) .. str(4, content)
  return node(name, "Const", {}, { { "dtype", F(6, 0, dtype) }, { "value", str(8, tensor) } })
end
local function variable(name, dtype, dims)
  return node(name, "VariableV2", {}, { { "dtype", F(6, 0, dtype) }, { "shape", str(7, shape_proto(dims)) } })
end
local function pb_graph()
  return table.concat({
    const("w/initial_value", DT_FLOAT, { 2 }, string.pack("<ff", 1, 2)),
    variable("w", DT_FLOAT, { 2 }),
    node("w/Assign", "Assign", { "w", "w/initial_value" }, { { "T", F(6, 0, DT_FLOAT) } }),
    const("step/initial_value", DT_INT32, {}, string.pack("<i4", 7)),
    variable("step", DT_INT32, {}),
    node("step/Assign", "Assign", { "step", "step/initial_value" }, { { "T", F(6, 0, DT_INT32) } }),
  })
end

local J = S.tfjson
local function json_graph()
  return J.graph({
    J.const("w/initial_value", "DT_FLOAT", { 2 }, { 1, 2 }),
    '{"name": "w", "op": "VariableV2", "attr": {"dtype": {"type": "DT_FLOAT"}, "shape": {"shape": {"dim": [{"size": "2"}]}}}}',
    J.node("w/Assign", "Assign", { "w", "w/initial_value" }),
    J.const("step/initial_value", "DT_INT32", {}, { 7 }),
    '{"name": "step", "op": "VariableV2", "attr": {"dtype": {"type": "DT_INT32"}, "shape": {"shape": {}}}}',
    J.node("step/Assign", "Assign", { "step", "step/initial_value" }, '"T": ' .. J.INT32),
  })
end

function TestVariables:test_built_imported_pb_and_json_list_the_same()
  local graphs = { lua = lua_graph(), pb = npu.import_graph_def(pb_graph()),
                   json = npu.import_graph_def(json_graph()) }
  for how, g in pairs(graphs) do
    lu.assertEquals(names(g:global_variables()), { "w:0", "step:0" }, how)
    lu.assertEquals(names(npu.train.trainable_variables(g)), { "w:0" }, how)
    local inits = g:variable_initializers()
    lu.assertEquals(#inits, 2, how)
    lu.assertEquals(g:operation(inits[1]):name(), "w/Assign", how)
    lu.assertEquals(g:operation(inits[2]):name(), "step/Assign", how)
    lu.assertEquals(initialized(g), { ["w:0"] = { 1, 2 }, ["step:0"] = 7 }, how)
  end
end

-- A graph trained after import: the optimizer's default var_list is the imported variable.
function TestVariables:test_imported_graph_trains()
  local g = npu.import_graph_def(pb_graph())
  local _ <close> = g:as_default()
  local w = g:get_tensor_by_name("w:0")
  local loss = npu.reduce_sum(w * w)
  local train = npu.train.GradientDescentOptimizer(0.25):minimize(loss)
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  sess:run(train)
  -- w - 0.25 * 2w = w / 2
  lu.assertEquals(sess:run(w):totable(), { 0.5, 1 })
  -- the optimizer's own state (none for plain descent) adds no trainable variable
  lu.assertEquals(names(npu.train.trainable_variables(g)), { "w:0" })
end

-- Raw nodes register: a variable op added by add_op is listed; an assign is its initializer
-- only under TensorFlow's name "<variable>/Assign".
function TestVariables:test_raw_nodes_register()
  local g = npu.Graph()
  local v = g:output(g:add_op("variable", {}, { dtype = "float32", shape = { 2 } }, "v"), 0)
  local c = g:const(npu.tensor({ 3, 4 }))
  lu.assertEquals(names(g:global_variables()), { "v:0" })
  lu.assertEquals(g:variable_initializers(), {})
  g:add_op("assign", { v, c }, nil, "update")
  lu.assertEquals(g:variable_initializers(), {})
  local a = g:add_op("assign", { v, c }, nil, "v/Assign")
  lu.assertEquals(g:variable_initializers(), { a })
  lu.assertEquals(initialized(g), { ["v:0"] = { 3, 4 } })
end

function TestVariables:test_scopes_and_trainable_flags()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local k = npu.variable_scope("fc", function() return g:variable(npu.zeros({ 2, 2 }), "kernel") end)
  local gs = npu.train.get_or_create_global_step(g)
  lu.assertEquals(k:name(), "fc/kernel:0")
  lu.assertEquals(g:operation(g:variable_initializers()[1]):name(), "fc/kernel/Assign")
  lu.assertEquals(names(g:global_variables()), { "fc/kernel:0", "global_step:0" })
  lu.assertTrue(g:is_trainable(k))
  lu.assertFalse(g:is_trainable(gs))
  npu.train.mark_non_trainable(k)
  lu.assertEquals(npu.train.trainable_variables(g), {})
  g:set_trainable(k, true)
  lu.assertEquals(names(npu.train.trainable_variables(g)), { "fc/kernel:0" })
end

function TestVariables:test_errors_name_the_culprit()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1 }, "x")
  local msg, e = S.fails(function() g:variable(x, "v") end)
  lu.assertEquals(e.code, "NPU_ERR_ARG")
  lu.assertStrContains(msg, "'x:0'")
  lu.assertStrContains(msg, "variable 'v': the initial value's shape must be fully known")
  lu.assertStrContains(msg, "[-1]")
  lu.assertEquals(g:global_variables(), {})
  lu.assertEquals(g:n_nodes(), 1) -- nothing half-built
  msg, e = S.fails(function() g:set_trainable(x, false) end)
  lu.assertEquals(e.code, "NPU_ERR_ARG")
  lu.assertStrContains(msg, "'x' is not a variable (its op is placeholder)")
  local other = npu.Graph():const(npu.tensor(1), "c")
  msg = S.fails(function() g:add_variable(other, "v") end)
  lu.assertStrContains(msg, "belongs to another graph")
  msg = S.fails(function() g:add_variable(1, "v") end)
  lu.assertStrContains(msg, "must be an npu.Output, got number")
end

-- ---- SavedModels: frozen by default, variables with {variables = true} ---------------------

-- x [2] * w [2] + b [2] -> y, exported with w and b as variables ("b" sorts first).
local function export_wb(dir)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local w = g:const(npu.tensor({ 1, 2 }), "w")
  local b = g:const(npu.tensor({ 0.5, -3 }), "b")
  local y = npu.add(npu.mul(x, w), b, { name = "y" })
  npu.export_saved_model(g, dir, { inputs = { x = x }, outputs = { y = y }, variables = { "w", "b" } })
end

-- The signature's first output for its first input fed with x, from a fresh session (the
-- variables initialized first when the graph has any).
local function predict(g, info, x)
  local sess <close> = npu.Session { graph = g }
  if #g:global_variables() > 0 then sess:run(g:global_variables_initializer()) end
  return sess:run(info.output_names[1], { [info.input_names[1]] = x }):totable()
end

-- A SavedModel loads frozen by default (its variables are constants holding the bundle's
-- values: the graph lists none, needs no initializer); with {variables = true} it lists them
-- all, in the bundle's (sorted) order, each initialized to the bundle's value.
function TestVariables:test_savedmodel_lists_none_by_default_all_with_variables()
  local dir, _ <close> = S.tmpdir()
  export_wb(dir .. "/m")
  local frozen = npu.load_model(dir .. "/m")
  lu.assertEquals(frozen:global_variables(), {})
  lu.assertEquals(frozen:get_operation_by_name("w"):type(), "const")
  local g = npu.load_model(dir .. "/m", { variables = true })
  lu.assertEquals(names(g:global_variables()), { "b:0", "w:0" })
  lu.assertEquals(names(npu.train.trainable_variables(g)), { "b:0", "w:0" })
  lu.assertEquals(g:get_operation_by_name("w"):type(), "variable")
  local inits = g:variable_initializers()
  lu.assertEquals(g:operation(inits[1]):name(), "b/Assign")
  lu.assertEquals(g:operation(inits[2]):name(), "w/Assign")
  lu.assertEquals(initialized(g), { ["b:0"] = { 0.5, -3 }, ["w:0"] = { 1, 2 } })
  -- false is the default, stated
  lu.assertEquals(npu.load_model(dir .. "/m", { variables = false }):global_variables(), {})
end

-- Both forms compute the same bits: our export, the committed TF2 fixture, every SavedModel
-- under spec/fixtures, and TensorFlow's own test models when a copy is here.
function TestVariables:test_savedmodel_both_forms_give_equal_outputs()
  local dir, _ <close> = S.tmpdir()
  export_wb(dir .. "/m")
  local models = { { dir .. "/m", npu.tensor({ 3, -0.25 }) } }
  for _, name in ipairs(S.ls(SPEC_DIR .. "/fixtures")) do
    local d = SPEC_DIR .. "/fixtures/" .. name
    if S.exists(d .. "/saved_model.pb") then
      models[#models + 1] = { d, npu.tensor({ { 1, 2, 3 }, { -1, 0, 0.5 }, { 0.1, 1e-3, -7 } }, "float32") }
    end
  end
  lu.assertTrue(#models >= 2, "spec/fixtures/tf2_dense is a SavedModel fixture")
  for _, tf in ipairs({ "saved_model_half_plus_two_cpu", "saved_model_half_plus_two_tf2_cpu" }) do
    local d = ROOT_DIR .. "/../shared/models/" .. tf .. "/00000123"
    if S.exists(d .. "/saved_model.pb") then
      models[#models + 1] = { d, npu.tensor({ { 1 }, { 2 }, { 5 } }, "float32") }
    end
  end
  for _, m in ipairs(models) do
    local frozen, info = npu.load_model(m[1])
    local g = npu.load_model(m[1], { variables = true })
    lu.assertTrue(#g:global_variables() > 0, m[1])
    lu.assertEquals(predict(g, info, m[2]), predict(frozen, info, m[2]), m[1])
  end
end

-- A SavedModel loaded with variables trains (its float variables are the optimizer's default
-- var_list) and npu.train.Saver saves and restores them.
function TestVariables:test_savedmodel_variables_train_and_save()
  local g, info = npu.load_model(SPEC_DIR .. "/fixtures/tf2_dense", { variables = true })
  local _ <close> = g:as_default()
  local y = g:get_tensor_by_name(info.output_names[1])
  local x_name = info.input_names[1]
  local X = npu.tensor({ { 1, 2, 3 }, { -1, 0, 0.5 } }, "float32")
  -- loss = sum(y): d/db = (2, 2) (two rows), d/dW = column sums of X, (0, 2, 3.5), per column
  local train = npu.train.GradientDescentOptimizer(0.5):minimize(npu.reduce_sum(y))
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local before = sess:run(y, { [x_name] = X }):totable()
  sess:run(train, { [x_name] = X })
  local b = g:get_tensor_by_name("Variable_1:0")
  local W = g:get_tensor_by_name("Variable:0")
  lu.assertEquals(sess:run(b):totable(), { 0.25 - 1, -0.75 - 1 })
  lu.assertEquals(sess:run(W):totable(), { { 1, -2 }, { 0.5 - 1, 3 - 1 }, { -1 - 1.75, 1 - 1.75 } })
  local after = sess:run(y, { [x_name] = X }):totable()
  -- row 1: (1,2,3) W' + b' = (1 - 1 - 8.25 - 0.75, -2 + 4 - 2.25 - 1.75); row 2 likewise
  lu.assertEquals(after, { { -9, -2 }, { -3.375 - 0.75 + 1, 2 - 0.375 - 1.75 } })
  lu.assertNotEquals(after, before)
  local path = os.tmpname()
  local saver = npu.train.Saver(g)
  saver:save(sess, path)
  sess:run(g:global_variables_initializer()) -- back to the bundle's values
  lu.assertEquals(sess:run(y, { [x_name] = X }):totable(), before)
  saver:restore(sess, path)
  lu.assertEquals(sess:run(y, { [x_name] = X }):totable(), after)
  os.remove(path)
end

function TestVariables:test_savedmodel_variables_errors()
  local dir, _ <close> = S.tmpdir()
  -- a bundle missing a variable: the same error with and without the flag
  export_wb(dir .. "/m")
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  npu.export_saved_model(g, dir .. "/w_only", { inputs = { x = x },
    outputs = { y = npu.add(npu.mul(x, g:const(npu.tensor({ 1, 2 }), "w")), g:const(npu.tensor({ 0, 0 }), "b"), { name = "y" }) },
    variables = { "w" } })
  os.execute("cp " .. S.sh_quote(dir .. "/w_only/variables") .. "/* " .. S.sh_quote(dir .. "/m/variables/"))
  local frozen_msg, e = S.fails(npu.load_model, dir .. "/m")
  lu.assertEquals(e.code, "NPU_ERR_FORMAT")
  lu.assertStrContains(frozen_msg, "variable 'b' has no value in")
  local msg
  msg, e = S.fails(npu.load_model, dir .. "/m", { variables = true })
  lu.assertEquals(e.code, "NPU_ERR_FORMAT")
  lu.assertEquals(msg, frozen_msg)
  -- the signature needs a node named as a variable's initializer would be
  g = npu.Graph()
  x = g:placeholder("float32", { 2 }, "x")
  local clash = npu.mul(x, g:const(npu.tensor({ 1, 2 }), "w"), { name = "w/Assign" })
  npu.export_saved_model(g, dir .. "/clash", { inputs = { x = x }, outputs = { y = npu.neg(clash, { name = "y" }) },
                                               variables = { "w" } })
  lu.assertEquals(npu.load_model(dir .. "/clash"):global_variables(), {})
  msg, e = S.fails(npu.load_model, dir .. "/clash", { variables = true })
  lu.assertEquals(e.code, "NPU_ERR_UNSUPPORTED")
  lu.assertStrContains(msg, "variable 'w' cannot be kept a variable: the signature needs a node " ..
                            "named 'w/Assign', the name its initializer would take")
  -- the option's type
  msg, e = S.fails(npu.load_model, dir .. "/m", { variables = 1 })
  lu.assertEquals(e.code, "NPU_ERR_ARG")
  lu.assertStrContains(msg, "variables must be a boolean, got number")
end
