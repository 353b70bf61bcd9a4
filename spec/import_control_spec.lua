-- import_control_spec.lua — TensorFlow control flow in imported graphs (csrc/io/graphdef.c,
-- "control flow"): TF2 If / While with the graph's function library and PartitionedCall
-- inlined; TF1 Switch / Merge conds and Enter / Merge / Switch / LoopCond / NextIteration /
-- Exit while frames (a cond nested in a loop body); TensorArrayV3 and TensorList ops inside
-- loops; every graph's export re-imports (as If / While with a library) to the same values;
-- errors name what is wrong, and unsupported ops are listed all at once.
--
-- The graphs are assembled by hand as TensorFlow.js model.json text; values are checked against
-- sums and products worked out by hand.
local lu = require("luaunit")
local npu = require("npu")
local model = require("npu.model")

local S = dofile(SPEC_DIR .. "/support.lua")
local expect_error = S.expect_error

-- ---- model.json builders ---------------------------------------------------------------------

local function q(s) return '"' .. s .. '"' end
local function list(items) return "[" .. table.concat(items, ",") .. "]" end
local list_json = list
local function dims_json(dims)
  local d = {}
  for i, v in ipairs(dims) do d[i] = ('{"size": "%d"}'):format(v) end
  return '{"dim": ' .. list(d) .. "}"
end
local function T(dt) return ('{"type": "%s"}'):format(dt) end
local function attrs_json(a)
  local keys, out = {}, {}
  for k in pairs(a or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = q(k) .. ": " .. a[k] end
  return "{" .. table.concat(out, ",") .. "}"
end
local function node(name, op, inputs, a)
  local ins = {}
  for i, v in ipairs(inputs or {}) do ins[i] = q(v) end
  return ('{"name": %s, "op": %s, "input": %s, "attr": %s}'):format(q(name), q(op), list(ins), attrs_json(a))
end
local function placeholder(name, dt, dims)
  return node(name, "Placeholder", {}, { dtype = T(dt), shape = '{"shape": ' .. dims_json(dims) .. "}" })
end
local function const(name, dt, dims, vals, control)
  local key = dt == "DT_FLOAT" and "floatVal" or dt == "DT_BOOL" and "boolVal" or
    dt == "DT_INT64" and "int64Val" or "intVal"
  local vs = {}
  for i, v in ipairs(vals) do
    vs[i] = (dt == "DT_INT32" or dt == "DT_INT64") and q(("%d"):format(v)) or tostring(v)
  end
  return node(name, "Const", control and { "^" .. control } or {}, {
    dtype = T(dt),
    value = ('{"tensor": {"dtype": "%s", "tensorShape": %s, "%s": %s}}'):format(dt, dims_json(dims), key, list(vs)),
  })
end
local function func_attr(name) return ('{"func": {"name": "%s"}}'):format(name) end
local function type_list(types)
  local t = {}
  for i, v in ipairs(types) do t[i] = q(v) end
  return '{"list": {"type": ' .. list(t) .. "}}"
end
-- a FunctionDef: args / outs are {name, dtype} pairs; ret maps an output to "node:arg:index"
local function func(name, args, outs, nodes, ret)
  local function argdefs(l)
    local t = {}
    for i, a in ipairs(l) do t[i] = ('{"name": "%s", "type": "%s"}'):format(a[1], a[2]) end
    return list(t)
  end
  local r = {}
  for k, v in pairs(ret) do r[#r + 1] = q(k) .. ": " .. q(v) end
  return ('{"signature": {"name": "%s", "inputArg": %s, "outputArg": %s}, "nodeDef": %s, "ret": {%s}}')
      :format(name, argdefs(args), argdefs(outs), list(nodes), table.concat(r, ","))
end
local function graph(nodes, functions)
  local lib = functions and (', "library": {"function": ' .. list(functions) .. "}") or ""
  return '{"format": "graph-model", "modelTopology": {"node": ' .. list(nodes) .. lib .. "}}"
end

local function run(g, fetches, feeds)
  local sess <close> = npu.Session { graph = g }
  return sess:run(fetches, feeds)
end
local function values(ts)
  local out = {}
  for i, t in ipairs(ts) do out[i] = t:totable() end
  return out
end

-- Runs g and its .pb round trip on each case ({feeds, want}); both give want.
local function check(g, fetches, cases)
  local g2 = model.import_graph_def(model.export_graph_def(g))
  for _, gg in ipairs({ g, g2 }) do
    for _, c in ipairs(cases) do
      lu.assertEquals(values(run(gg, fetches, c[1])), c[2], gg == g2 and "after .pb" or nil)
    end
  end
  return g2
end

local function ti(v) return npu.tensor(v, "int32") end
local function tf(v) return npu.tensor(v, "float32") end

-- ---- TF2: If, While, PartitionedCall with a library -----------------------------------------

TestImportControlTF2 = {}

local INT, FLOAT, BOOL = T("DT_INT32"), T("DT_FLOAT"), T("DT_BOOL")

-- y = If(p, x, k): then x * k, else x - k; a second output returns the argument k as is.
function TestImportControlTF2.test_if()
  local g = model.import_graph_def(graph({
    placeholder("x", "DT_FLOAT", { 2 }), placeholder("p", "DT_BOOL", {}), const("k", "DT_FLOAT", {}, { 3 }),
    node("y", "StatelessIf", { "p", "x", "k" }, {
      Tcond = BOOL, Tin = type_list({ "DT_FLOAT", "DT_FLOAT" }), Tout = type_list({ "DT_FLOAT", "DT_FLOAT" }),
      then_branch = func_attr("then_fn"), else_branch = func_attr("else_fn"),
    }),
    node("out", "Identity", { "y" }, { T = FLOAT }),
  }, {
    func("then_fn", { { "a", "DT_FLOAT" }, { "b", "DT_FLOAT" } }, { { "r", "DT_FLOAT" }, { "k", "DT_FLOAT" } },
      { node("mul", "Mul", { "a", "b" }, { T = FLOAT }) }, { r = "mul:z:0", k = "b" }),
    func("else_fn", { { "a", "DT_FLOAT" }, { "b", "DT_FLOAT" } }, { { "r", "DT_FLOAT" }, { "k", "DT_FLOAT" } },
      { node("sub", "Sub", { "a", "b" }, { T = FLOAT }) }, { r = "sub:z:0", k = "b" }),
  }))
  lu.assertEquals(g:get_operation_by_name("y"):type(), "cond")
  check(g, { "out:0", "y:1" }, {
    { { ["x:0"] = tf({ 1, 2 }), ["p:0"] = npu.tensor(true, "bool") }, { { 3, 6 }, 3 } },
    { { ["x:0"] = tf({ 1, 2 }), ["p:0"] = npu.tensor(false, "bool") }, { { -2, -1 }, 3 } },
  })
end

-- While(i = 0, s = 0, n): i < n; (i + 1, s + i) -> s = 0 + 1 + ... + (n - 1).
local function counter_while(op)
  return graph({
    placeholder("n", "DT_INT32", {}), const("zero", "DT_INT32", {}, { 0 }),
    node("w", op, { "zero", "zero", "n" }, {
      T = type_list({ "DT_INT32", "DT_INT32", "DT_INT32" }), cond = func_attr("cond_fn"), body = func_attr("body_fn"),
      parallel_iterations = '{"i": "10"}',
    }),
    node("total", "Identity", { "w:1" }, { T = INT }),
  }, {
    func("cond_fn", { { "i", "DT_INT32" }, { "s", "DT_INT32" }, { "n", "DT_INT32" } }, { { "ok", "DT_BOOL" } },
      { node("less", "Less", { "i", "n" }, { T = INT }) }, { ok = "less:z:0" }),
    func("body_fn", { { "i", "DT_INT32" }, { "s", "DT_INT32" }, { "n", "DT_INT32" } },
      { { "i1", "DT_INT32" }, { "s1", "DT_INT32" }, { "n1", "DT_INT32" } }, {
        const("one", "DT_INT32", {}, { 1 }),
        node("inc", "AddV2", { "i", "one:output:0" }, { T = INT }),
        node("acc", "AddV2", { "s", "i" }, { T = INT }),
      }, { i1 = "inc:z:0", s1 = "acc:z:0", n1 = "n" }),
  })
end

function TestImportControlTF2.test_while_counter()
  for _, op in ipairs({ "While", "StatelessWhile" }) do
    local g = model.import_graph_def(counter_while(op))
    lu.assertEquals(g:get_operation_by_name("w"):type(), "while")
    check(g, { "total:0", "w:0" }, {
      { { ["n:0"] = ti(5) }, { 10, 5 } },
      { { ["n:0"] = ti(0) }, { 0, 0 } },
      { { ["n:0"] = ti(101) }, { 5050, 101 } },
    })
  end
end

-- PartitionedCall is inlined where it stands; "call:i" is still its output i.
function TestImportControlTF2.test_partitioned_call()
  local g = model.import_graph_def(graph({
    placeholder("a", "DT_FLOAT", { 2 }), placeholder("b", "DT_FLOAT", { 2 }),
    node("call", "StatefulPartitionedCall", { "a", "b" }, {
      Tin = type_list({ "DT_FLOAT", "DT_FLOAT" }), Tout = type_list({ "DT_FLOAT", "DT_FLOAT" }), f = func_attr("f"),
    }),
    node("out", "AddV2", { "call", "call:1" }, { T = FLOAT }),
  }, {
    func("f", { { "x", "DT_FLOAT" }, { "y", "DT_FLOAT" } }, { { "p", "DT_FLOAT" }, { "d", "DT_FLOAT" } }, {
      node("m", "Mul", { "x", "y" }, { T = FLOAT }),
      node("d", "Sub", { "x", "y" }, { T = FLOAT }),
    }, { p = "m:z:0", d = "d:z:0" }),
  }))
  lu.assertEquals(g:get_operation_by_name("call/m"):type(), "mul")
  check(g, { "out:0", "call:0" }, {
    { { ["a:0"] = tf({ 2, 3 }), ["b:0"] = tf({ 4, 5 }) }, { { 6, 13 }, { 8, 15 } } },
  })
end

-- A TensorList filled in a While body: TensorListReserve, SetItem, Stack, Length, GetItem.
function TestImportControlTF2.test_tensor_list_in_while()
  local g = model.import_graph_def(graph({
    placeholder("x", "DT_FLOAT", { 4 }), const("zero", "DT_INT32", {}, { 0 }),
    const("elem", "DT_INT32", { 0 }, {}), const("n", "DT_INT32", {}, { 4 }),
    node("list", "TensorListReserve", { "elem", "n" }, { element_dtype = FLOAT, shape_type = INT }),
    node("w", "While", { "zero", "list", "x" }, {
      T = type_list({ "DT_INT32", "DT_VARIANT", "DT_FLOAT" }), cond = func_attr("c"), body = func_attr("b"),
    }),
    node("stack", "TensorListStack", { "w:1", "elem" }, { element_dtype = FLOAT, num_elements = '{"i": "-1"}' }),
    node("len", "TensorListLength", { "w:1" }, {}),
    const("two", "DT_INT32", {}, { 2 }),
    node("item", "TensorListGetItem", { "w:1", "two", "elem" }, { element_dtype = FLOAT }),
  }, {
    func("c", { { "i", "DT_INT32" }, { "l", "DT_VARIANT" }, { "x", "DT_FLOAT" } }, { { "ok", "DT_BOOL" } }, {
      const("four", "DT_INT32", {}, { 4 }),
      node("less", "Less", { "i", "four:output:0" }, { T = INT }),
    }, { ok = "less:z:0" }),
    func("b", { { "i", "DT_INT32" }, { "l", "DT_VARIANT" }, { "x", "DT_FLOAT" } },
      { { "i1", "DT_INT32" }, { "l1", "DT_VARIANT" }, { "x1", "DT_FLOAT" } }, {
        const("axis", "DT_INT32", {}, { 0 }), const("one", "DT_INT32", {}, { 1 }),
        node("e", "GatherV2", { "x", "i", "axis:output:0" }, { Tparams = FLOAT, Tindices = INT, Taxis = INT }),
        node("sq", "Mul", { "e:output:0", "e:output:0" }, { T = FLOAT }),
        node("set", "TensorListSetItem", { "l", "i", "sq:z:0" }, { element_dtype = FLOAT }),
        node("inc", "AddV2", { "i", "one:output:0" }, { T = INT }),
      }, { i1 = "inc:z:0", l1 = "set:output_handle:0", x1 = "x" }),
  }))
  check(g, { "stack:0", "len:0", "item:0" }, {
    { { ["x:0"] = tf({ 1, 2, 3, -4 }) }, { { 1, 4, 9, 16 }, 4, 9 } },
  })
end

-- A TensorList grown by TensorListPushBack in a While body, from an EmptyTensorList (whose [0]
-- buffer takes its rank from the first element): the squares of x's rows, stacked.
function TestImportControlTF2.test_tensor_list_push_back_in_while()
  local g = model.import_graph_def(graph({
    placeholder("x", "DT_FLOAT", { 3, 2 }), const("zero", "DT_INT32", {}, { 0 }),
    const("elem", "DT_INT32", { 1 }, { 2 }), const("max", "DT_INT32", {}, { -1 }),
    node("list", "EmptyTensorList", { "elem", "max" }, { element_dtype = FLOAT, shape_type = INT }),
    node("w", "While", { "zero", "list", "x" }, {
      T = type_list({ "DT_INT32", "DT_VARIANT", "DT_FLOAT" }), cond = func_attr("c"), body = func_attr("b"),
    }),
    node("stack", "TensorListStack", { "w:1", "elem" }, { element_dtype = FLOAT, num_elements = '{"i": "-1"}' }),
    node("len", "TensorListLength", { "w:1" }, {}),
  }, {
    func("c", { { "i", "DT_INT32" }, { "l", "DT_VARIANT" }, { "x", "DT_FLOAT" } }, { { "ok", "DT_BOOL" } }, {
      const("three", "DT_INT32", {}, { 3 }),
      node("less", "Less", { "i", "three:output:0" }, { T = INT }),
    }, { ok = "less:z:0" }),
    func("b", { { "i", "DT_INT32" }, { "l", "DT_VARIANT" }, { "x", "DT_FLOAT" } },
      { { "i1", "DT_INT32" }, { "l1", "DT_VARIANT" }, { "x1", "DT_FLOAT" } }, {
        const("axis", "DT_INT32", {}, { 0 }), const("one", "DT_INT32", {}, { 1 }),
        node("e", "GatherV2", { "x", "i", "axis:output:0" }, { Tparams = FLOAT, Tindices = INT, Taxis = INT }),
        node("sq", "Mul", { "e:output:0", "e:output:0" }, { T = FLOAT }),
        node("push", "TensorListPushBack", { "l", "sq:z:0" }, { element_dtype = FLOAT }),
        node("inc", "AddV2", { "i", "one:output:0" }, { T = INT }),
      }, { i1 = "inc:z:0", l1 = "push:output_handle:0", x1 = "x" }),
  }))
  check(g, { "stack:0", "len:0" }, {
    { { ["x:0"] = tf({ { 1, 2 }, { 3, -4 }, { 0.5, 0 } }) }, { { { 1, 4 }, { 9, 16 }, { 0.25, 0 } }, 3 } },
  })
end

-- A TF2 While's output_shapes are its variables' shape invariants: x grows a dimension each
-- iteration (x1 = ExpandDims(x, 0): an unknown rank), i keeps its [] and s a fixed [2]; the
-- export writes them back (the loop_var's shape, any shape as an unknown rank).
function TestImportControlTF2.test_while_output_shapes()
  local function shapes(list)
    local t = {}
    for i, d in ipairs(list) do t[i] = d == "?" and '{"unknownRank": true}' or dims_json(d) end
    return '{"list": {"shape": ' .. list_json(t) .. "}}"
  end
  local text = graph({
    placeholder("n", "DT_INT32", {}), const("zero", "DT_INT32", {}, { 0 }), const("x0", "DT_FLOAT", {}, { 1.5 }),
    const("s0", "DT_FLOAT", { 2 }, { 0, 0 }),
    node("w", "StatelessWhile", { "zero", "x0", "s0", "n" }, {
      T = type_list({ "DT_INT32", "DT_FLOAT", "DT_FLOAT", "DT_INT32" }), cond = func_attr("c"), body = func_attr("b"),
      output_shapes = shapes({ {}, "?", { 2 }, {} }),
    }),
  }, {
    func("c", { { "i", "DT_INT32" }, { "x", "DT_FLOAT" }, { "s", "DT_FLOAT" }, { "n", "DT_INT32" } }, { { "ok", "DT_BOOL" } },
      { node("less", "Less", { "i", "n" }, { T = INT }) }, { ok = "less:z:0" }),
    func("b", { { "i", "DT_INT32" }, { "x", "DT_FLOAT" }, { "s", "DT_FLOAT" }, { "n", "DT_INT32" } },
      { { "i1", "DT_INT32" }, { "x1", "DT_FLOAT" }, { "s1", "DT_FLOAT" }, { "n1", "DT_INT32" } }, {
        const("one", "DT_INT32", {}, { 1 }), const("axis", "DT_INT32", {}, { 0 }),
        node("inc", "AddV2", { "i", "one:output:0" }, { T = INT }),
        node("grow", "ExpandDims", { "x", "axis:output:0" }, { T = FLOAT, Tdim = INT }),
        node("acc", "AddV2", { "s", "s" }, { T = FLOAT }),
      }, { i1 = "inc:z:0", x1 = "grow:output:0", s1 = "acc:z:0", n1 = "n" }),
  })
  local g = model.import_graph_def(text)
  lu.assertEquals(g:get_tensor_by_name("w/loop_var_2:0"):shape(), { 2 })
  local g2 = check(g, { "w:1", "w:2" }, {
    { { ["n:0"] = ti(2) }, { { { 1.5 } }, { 0, 0 } } },
    { { ["n:0"] = ti(0) }, { 1.5, { 0, 0 } } },
  })
  lu.assertEquals(g2:get_tensor_by_name("w/loop_var_2:0"):shape(), { 2 })
  -- without output_shapes x keeps its rank (0) and the body's rank 1 is refused
  local plain = text:gsub(',"output_shapes": %b{}', "")
  lu.assertNotEquals(plain, text)
  expect_error("NPU_ERR_SHAPE", { "loop variable 2", "enters the body as []" }, model.import_graph_def, plain)
end

-- ---- TF1: Switch / Merge conds, while frames -----------------------------------------------

TestImportControlTF1 = {}

-- cond(p, x * 2, x - 1) as tf.cond lowers it; the Merge lists the else branch first.
function TestImportControlTF1.test_switch_merge_cond()
  local g = model.import_graph_def(graph({
    placeholder("x", "DT_FLOAT", { 2 }), placeholder("p", "DT_BOOL", {}),
    node("cond/Switch", "Switch", { "x", "p" }, { T = FLOAT }),
    node("cond/switch_t", "Identity", { "cond/Switch:1" }, { T = FLOAT }),
    const("cond/two", "DT_FLOAT", {}, { 2 }, "cond/switch_t"),
    node("cond/mul", "Mul", { "cond/switch_t", "cond/two" }, { T = FLOAT }),
    node("cond/switch_f", "Identity", { "cond/Switch" }, { T = FLOAT }),
    const("cond/one", "DT_FLOAT", {}, { 1 }, "cond/switch_f"),
    node("cond/sub", "Sub", { "cond/switch_f", "cond/one" }, { T = FLOAT }),
    node("cond/Merge", "Merge", { "cond/sub", "cond/mul" }, { T = FLOAT, N = '{"i": "2"}' }),
    node("out", "Identity", { "cond/Merge" }, { T = FLOAT }),
  }))
  lu.assertEquals(g:get_operation_by_name("cond/Merge"):type(), "identity")
  check(g, { "out:0", "cond/Merge:0" }, {
    { { ["x:0"] = tf({ 1, 2 }), ["p:0"] = npu.tensor(true, "bool") }, { { 2, 4 }, { 2, 4 } } },
    { { ["x:0"] = tf({ 1, 2 }), ["p:0"] = npu.tensor(false, "bool") }, { { 0, 1 }, { 0, 1 } } },
  })
end

-- A tf.while_loop frame summing a cond of its counter: s += (i < 2 ? 10 * i : i), i < n;
-- plus a loop-invariant Enter (n) and a TensorArrayV3 of the squares written each iteration.
local function tf1_while_nodes()
  local W = "while/"
  local frame = { frame_name = '{"s": "' .. "d2hpbGUvd2hpbGVfY29udGV4dA==" .. '"}' } -- "while/while_context"
  local function enter(name, input, dt, constant)
    return node(W .. name, "Enter", { input }, {
      T = T(dt), frame_name = frame.frame_name, is_constant = constant and '{"b": true}' or '{"b": false}',
      parallel_iterations = '{"i": "10"}',
    })
  end
  return {
    placeholder("n", "DT_INT32", {}), const("zero", "DT_INT32", {}, { 0 }), const("size", "DT_INT32", {}, { 5 }),
    node("ta", "TensorArrayV3", { "size" }, {
      dtype = INT, element_shape = '{"shape": {}}', dynamic_size = '{"b": false}',
      clear_after_read = '{"b": true}', identical_element_shapes = '{"b": true}', tensor_array_name = '{"s": ""}',
    }),
    enter("Enter", "zero", "DT_INT32"), enter("Enter_1", "zero", "DT_INT32"),
    enter("Enter_2", "n", "DT_INT32", true), enter("Enter_ta", "ta", "DT_RESOURCE", true),
    enter("Enter_flow", "ta:1", "DT_FLOAT"),
    node(W .. "Merge", "Merge", { W .. "Enter", W .. "NextIteration" }, { T = INT, N = '{"i": "2"}' }),
    node(W .. "Merge_1", "Merge", { W .. "Enter_1", W .. "NextIteration_1" }, { T = INT, N = '{"i": "2"}' }),
    node(W .. "Merge_flow", "Merge", { W .. "Enter_flow", W .. "NextIteration_flow" }, { T = FLOAT, N = '{"i": "2"}' }),
    node(W .. "Less", "Less", { W .. "Merge", W .. "Enter_2" }, { T = INT }),
    node(W .. "LoopCond", "LoopCond", { W .. "Less" }, {}),
    node(W .. "Switch", "Switch", { W .. "Merge", W .. "LoopCond" }, { T = INT }),
    node(W .. "Switch_1", "Switch", { W .. "Merge_1", W .. "LoopCond" }, { T = INT }),
    node(W .. "Switch_flow", "Switch", { W .. "Merge_flow", W .. "LoopCond" }, { T = FLOAT }),
    node(W .. "Identity", "Identity", { W .. "Switch:1" }, { T = INT }),
    node(W .. "Identity_1", "Identity", { W .. "Switch_1:1" }, { T = INT }),
    node(W .. "Identity_flow", "Identity", { W .. "Switch_flow:1" }, { T = FLOAT }),
    const(W .. "one", "DT_INT32", {}, { 1 }, W .. "Identity"),
    node(W .. "add", "AddV2", { W .. "Identity", W .. "one" }, { T = INT }),
    -- the cond inside the body
    const(W .. "two", "DT_INT32", {}, { 2 }, W .. "Identity"),
    node(W .. "cond/Less", "Less", { W .. "Identity", W .. "two" }, { T = INT }),
    node(W .. "cond/Switch", "Switch", { W .. "Identity", W .. "cond/Less" }, { T = INT }),
    const(W .. "cond/ten", "DT_INT32", {}, { 10 }, W .. "Identity"),
    node(W .. "cond/mul", "Mul", { W .. "cond/Switch:1", W .. "cond/ten" }, { T = INT }),
    node(W .. "cond/keep", "Identity", { W .. "cond/Switch" }, { T = INT }),
    node(W .. "cond/Merge", "Merge", { W .. "cond/keep", W .. "cond/mul" }, { T = INT, N = '{"i": "2"}' }),
    node(W .. "add_1", "AddV2", { W .. "Identity_1", W .. "cond/Merge" }, { T = INT }),
    node(W .. "square", "Mul", { W .. "Identity", W .. "Identity" }, { T = INT }),
    node(W .. "write", "TensorArrayWriteV3", { W .. "Enter_ta", W .. "Identity", W .. "square", W .. "Identity_flow" }, { T = INT }),
    node(W .. "NextIteration", "NextIteration", { W .. "add" }, { T = INT }),
    node(W .. "NextIteration_1", "NextIteration", { W .. "add_1" }, { T = INT }),
    node(W .. "NextIteration_flow", "NextIteration", { W .. "write" }, { T = FLOAT }),
    node(W .. "Exit", "Exit", { W .. "Switch" }, { T = INT }),
    node(W .. "Exit_1", "Exit", { W .. "Switch_1" }, { T = INT }),
    node(W .. "Exit_flow", "Exit", { W .. "Switch_flow" }, { T = FLOAT }),
    node("total", "Identity", { W .. "Exit_1" }, { T = INT }),
    node("ta_size", "TensorArraySizeV3", { "ta", W .. "Exit_flow" }, {}),
    const("r0", "DT_INT32", {}, { 0 }), const("r1", "DT_INT32", {}, { 1 }),
    node("range", "Range", { "r0", "ta_size", "r1" }, { Tidx = INT }),
    node("squares", "TensorArrayGatherV3", { "ta", "range", W .. "Exit_flow" }, { dtype = INT, element_shape = '{"shape": {}}' }),
    const("three", "DT_INT32", {}, { 3 }),
    node("third", "TensorArrayReadV3", { "ta", "three", W .. "Exit_flow" }, { dtype = INT }),
  }
end

-- The same frame with a TensorArray of dynamic size (no element shape: its buffer takes any
-- shape in the loop) and a body constant whose control input is the loop's Merge (a loop
-- variable: an argument once exported, the control edge dropped): the .pb round trip writes
-- the buffer's invariant as an unknown rank in output_shapes.
function TestImportControlTF1.test_while_frame_growing_tensor_array_round_trip()
  local nodes = tf1_while_nodes()
  for i, nd in ipairs(nodes) do
    if nd:find('"name": "ta"', 1, true) then
      nodes[i] = node("ta", "TensorArrayV3", { "size" }, {
        dtype = INT, element_shape = '{"shape": {"unknownRank": true}}', dynamic_size = '{"b": true}',
        clear_after_read = '{"b": true}', identical_element_shapes = '{"b": true}', tensor_array_name = '{"s": ""}',
      })
    elseif nd:find('"name": "while/one"', 1, true) then
      nodes[i] = const("while/one", "DT_INT32", {}, { 1 }, "while/Merge")
    end
  end
  local g = model.import_graph_def(graph(nodes))
  check(g, { "total:0", "squares:0", "third:0", "ta_size:0" }, {
    { { ["n:0"] = ti(5) }, { 19, { 0, 1, 4, 9, 16 }, 9, 5 } },
    { { ["n:0"] = ti(7) }, { 30, { 0, 1, 4, 9, 16, 25, 36 }, 9, 7 } },
  })
end

function TestImportControlTF1.test_while_frame_with_cond_and_tensor_array()
  local g = model.import_graph_def(graph(tf1_while_nodes()))
  lu.assertEquals(g:get_operation_by_name("while/while_context"):type(), "while")
  lu.assertEquals(g:get_operation_by_name("while/Exit_1"):type(), "identity")
  -- i = 0..4: 0 + 10 + 2 + 3 + 4
  check(g, { "total:0", "while/Exit:0", "squares:0", "third:0", "ta_size:0" }, {
    { { ["n:0"] = ti(5) }, { 19, 5, { 0, 1, 4, 9, 16 }, 9, 5 } },
  })
  -- fewer iterations: the rows not written stay zero
  lu.assertEquals(values(run(g, { "total:0", "squares:0" }, { ["n:0"] = ti(2) })), { 10, { 0, 1, 0, 0, 0 } })
  -- writing past the fixed size is the array's error
  expect_error("NPU_ERR_ARG", { "index 5", "size 5" }, run, g, { "total:0" }, { ["n:0"] = ti(7) })
end

-- TensorArraySplitV3 of x [6, 2] into three elements of 2 rows, a read, and TensorArrayConcatV3
-- back (value and the lengths): the elements are rows of the dense buffer [3, 2, 2].
local function split_concat_graph(lengths)
  return graph({
    placeholder("x", "DT_FLOAT", { 6, 2 }), const("size", "DT_INT32", {}, { 3 }),
    const("lengths", "DT_INT64", { #lengths }, lengths), const("one", "DT_INT32", {}, { 1 }),
    node("ta", "TensorArrayV3", { "size" }, {
      dtype = FLOAT, element_shape = '{"shape": {"unknownRank": true}}', dynamic_size = '{"b": false}',
      clear_after_read = '{"b": true}', identical_element_shapes = '{"b": true}', tensor_array_name = '{"s": ""}',
    }),
    node("split", "TensorArraySplitV3", { "ta", "x", "lengths", "ta:1" }, { T = FLOAT }),
    node("read", "TensorArrayReadV3", { "ta", "one", "split" }, { dtype = FLOAT }),
    node("concat", "TensorArrayConcatV3", { "ta", "split" }, {
      dtype = FLOAT, element_shape_except0 = '{"shape": {"unknownRank": true}}',
    }),
    node("joined", "Identity", { "concat" }, { T = FLOAT }),
  })
end

function TestImportControlTF1.test_tensor_array_split_and_concat()
  local g = model.import_graph_def(split_concat_graph({ 2, 2, 2 }))
  local x = { { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 }, { 9, 10 }, { 11, 12 } }
  check(g, { "read:0", "joined:0", "concat:1" }, { { { ["x:0"] = tf(x) }, { { { 5, 6 }, { 7, 8 } }, x, { 2, 2, 2 } } } })
  lu.assertEquals(run(g, { "concat:1" }, { ["x:0"] = tf(x) })[1]:dtype(), "int64")
end

-- ---- errors ----------------------------------------------------------------------------------

TestImportControlErrors = {}

function TestImportControlErrors.test_ragged_tensor_array_split_is_named()
  expect_error("NPU_ERR_UNSUPPORTED", { "node 'split' (TensorArraySplitV3)", "lengths 1 and 3", "ragged" },
    model.import_graph_def, split_concat_graph({ 1, 3, 2 }))
end

function TestImportControlErrors.test_unsupported_ops_listed_at_once()
  -- unsupported types in the graph, in a loop body and in a function are named together
  local nodes = tf1_while_nodes()
  nodes[#nodes + 1] = node("weird", "FancyOp", { "total" }, {})
  nodes[#nodes + 1] = node("while/odd", "OddOp", { "while/Identity" }, {})
  nodes[#nodes + 1] = node("c", "PartitionedCall", { "n" }, { f = func_attr("f") })
  local err = expect_error("NPU_ERR_UNSUPPORTED", { "3 unsupported op types", "FancyOp", "OddOp", "StrangeOp",
    "node 'c/s'" }, model.import_graph_def, graph(nodes, {
    func("f", { { "x", "DT_INT32" } }, { { "y", "DT_INT32" } }, { node("s", "StrangeOp", { "x" }, {}) }, { y = "s:y:0" }),
  }))
  lu.assertNotStrContains(err, "Switch")
end

function TestImportControlErrors.test_malformed()
  local base = {
    placeholder("x", "DT_FLOAT", { 2 }), placeholder("p", "DT_BOOL", {}),
  }
  local function with(extra, fns)
    local t = { table.unpack(base) }
    for _, e in ipairs(extra) do t[#t + 1] = e end
    return graph(t, fns)
  end
  local ident = func("id", { { "a", "DT_FLOAT" } }, { { "r", "DT_FLOAT" } }, {}, { r = "a" })
  -- a function the library does not have
  expect_error("NPU_ERR_FORMAT", { "'y'", "then_branch names function 'nope'" }, model.import_graph_def,
    with({ node("y", "If", { "p", "x" }, { then_branch = func_attr("nope"), else_branch = func_attr("id") }) }, { ident }))
  -- the arguments do not match the function's
  expect_error("NPU_ERR_FORMAT", { "'y'", "takes 1 argument" }, model.import_graph_def,
    with({ node("y", "If", { "p", "x", "x" }, { then_branch = func_attr("id"), else_branch = func_attr("id") }) }, { ident }))
  -- an output without a ret entry
  expect_error("NPU_ERR_FORMAT", { "no ret entry" }, model.import_graph_def,
    with({ node("y", "PartitionedCall", { "x" }, { f = func_attr("bad") }) },
      { func("bad", { { "a", "DT_FLOAT" } }, { { "r", "DT_FLOAT" } }, {}, {}) }))
  -- a Merge of two values of no cond
  expect_error("NPU_ERR_UNSUPPORTED", { "'m'", "not the two branches" }, model.import_graph_def,
    with({ node("m", "Merge", { "x", "x" }, { T = FLOAT, N = '{"i": "2"}' }) }))
  -- a loop Merge without its NextIteration
  expect_error("NPU_ERR_UNSUPPORTED", { "'w/m'", "one Enter and one NextIteration" }, model.import_graph_def,
    with({ node("w/e", "Enter", { "x" }, { T = FLOAT, frame_name = '{"s": "Zg=="}' }),
      node("w/m", "Merge", { "w/e", "x" }, { T = FLOAT, N = '{"i": "2"}' }) }))
  -- a function calling itself
  expect_error("NPU_ERR_UNSUPPORTED", { "more than 32 deep" }, model.import_graph_def,
    with({ node("y", "PartitionedCall", { "x" }, { f = func_attr("rec") }) },
      { func("rec", { { "a", "DT_FLOAT" } }, { { "r", "DT_FLOAT" } },
        { node("again", "PartitionedCall", { "a" }, { f = func_attr("rec") }) }, { r = "again:output:0" }) }))
end
