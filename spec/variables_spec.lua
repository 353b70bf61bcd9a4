--- variables_spec.lua — variables live in the C graph (npu_graph_add_variable and friends):
-- a graph built in Lua, one imported from a binary GraphDef (.pb) and one from a TensorFlow.js
-- model.json list the same variables, with the same initializers and trainable flags; raw
-- variable nodes register too; errors name the culprit; a SavedModel loads frozen (none).
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
  lu.assertStrContains(msg, "the initial value's shape must be fully known")
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

-- A SavedModel loads frozen: its variables are constants holding the bundle's values, so the
-- graph lists none (and needs no initializer).
function TestVariables:test_savedmodel_loads_frozen()
  local dir = S.tmpdir()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local w = g:const(npu.tensor({ 1, 2 }), "w")
  local y = npu.mul(x, w, { name = "y" })
  npu.export_saved_model(g, dir .. "/m", { inputs = { x = x }, outputs = { y = y }, variables = { "w" } })
  local loaded = npu.load_model(dir .. "/m")
  lu.assertEquals(loaded:global_variables(), {})
  S.rm_rf(dir)
end
