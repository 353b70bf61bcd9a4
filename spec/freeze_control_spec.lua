-- freeze_control_spec.lua — npu.graph_util.convert_variables_to_constants on graphs with
-- control flow (csrc/io/freeze.c): a variable read inside a cond branch, a while body, a cond
-- nested in a body or a TensorArray loop becomes a const of its trained value that the region
-- reads; the frozen graph keeps its conds and loops, holds no variable (a session of it needs
-- no init), and its outputs are bit-equal to the trained session's for several feeds, in
-- float32 and under allow_mix_precision_bf16; it exports and reimports; imported If / While
-- freeze; white/blacklists reach variables read only inside a loop; what cannot be frozen (an
-- output needing an assign to a frozen variable inside a loop body; an output inside a branch)
-- is NPU_ERR_ARG naming the culprit.
local lu = require("luaunit")
local npu = require("npu")
local model = require("npu.model")
local gu = npu.graph_util

local F32 = "float32"

local function ops_of(g)
  local seen = {}
  for i = 0, g:n_nodes() - 1 do
    local op = g:operation(i):type()
    seen[op] = (seen[op] or 0) + 1
  end
  return seen
end

local function same_bits(a, b, what)
  lu.assertEquals(a:shape(), b:shape(), what)
  lu.assertEquals(a:totable(), b:totable(), what) -- float32 as doubles: equal means same bits
end

local function raises(code, parts, fn)
  local ok, err = pcall(fn)
  lu.assertFalse(ok, "expected " .. code)
  lu.assertEquals(err.code, code, tostring(err))
  for _, p in ipairs(parts) do lu.assertStrContains(tostring(err), p) end
end

local function bool(v) return npu.tensor(v, "bool") end
local function int(v) return npu.tensor(v, "int32") end

-- x (4, 8), p (bool), n (int32) placeholders; w (8, 8) and b (8) variables; `build` makes
-- the output "out" from them; a few SGD steps on sum(out^2) move w and b from their initial
-- values (so a frozen graph holding the initial values would give other bits).
local function trained(build, precision_mode)
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local m = { g = g }
  m.x = g:placeholder(F32, { 4, 8 }, "x")
  m.p = g:placeholder("bool", {}, "p")
  m.n = g:placeholder("int32", {}, "n")
  m.w = g:variable(npu.random.normal({ 8, 8 }, { stddev = 0.3, seed = 1 }), "w")
  m.b = g:variable(npu.random.normal({ 8 }, { stddev = 0.3, seed = 2 }), "b")
  m.out = npu.identity(build(m), { name = "out" })
  m.train = npu.train.GradientDescentOptimizer(0.01):minimize(npu.reduce_sum(m.out * m.out))
  m.sess = npu.Session { graph = g, options = { precision_mode = precision_mode or "force_fp32" } }
  m.sess:run(g:global_variables_initializer())
  m.xs = { npu.random.uniform({ 4, 8 }, { seed = 3 }), npu.random.uniform({ 4, 8 }, { seed = 4, minval = -1 }) }
  local w0 = m.sess:run(m.w)
  for _ = 1, 2 do m.sess:run(m.train, { [m.x] = m.xs[1], [m.p] = bool(true), [m.n] = int(3) }) end
  lu.assertNotEquals(m.sess:run(m.w):totable(), w0:totable(), "training moved w")
  return m
end

-- The frozen graph of "out": no variable, a session of its own with no init, the outputs
-- of every feed (x, p, n) bit-equal to the trained session's; returns the frozen graph.
local function check_frozen(m, cases, precision_mode)
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { "out" })
  local ops = ops_of(frozen)
  lu.assertNil(ops.variable, "every variable frozen")
  lu.assertNil(ops.assign, "no initializer or update kept")
  lu.assertEquals(#frozen:variables(), 0)
  local sess <close> = npu.Session { graph = frozen, options = { precision_mode = precision_mode or "force_fp32" } }
  -- a placeholder the output does not read is left out, as the nodes it feeds
  local has = {}
  for i = 0, frozen:n_nodes() - 1 do has[frozen:operation(i):name()] = true end
  for k, c in ipairs(cases) do
    local want = m.sess:run(m.out, { [m.x] = m.xs[c[1]], [m.p] = bool(c[2]), [m.n] = int(c[3]) })
    local feeds = { ["x:0"] = m.xs[c[1]] }
    if has.p then feeds["p:0"] = bool(c[2]) end
    if has.n then feeds["n:0"] = int(c[3]) end
    same_bits(sess:run("out:0", feeds), want, "case " .. k)
  end
  -- the consts hold the trained values under the variables' names
  same_bits(sess:run("w:0"), m.sess:run(m.w))
  return frozen, ops
end

-- which of the placeholders p and n the frozen graph kept
local function placeholders(frozen)
  local names = {}
  for i = 0, frozen:n_nodes() - 1 do names[frozen:operation(i):name()] = true end
  return { p = names.p == true, n = names.n == true }
end

-- the models ------------------------------------------------------------------------------

-- a cond whose then branch reads w and b, whose else branch reads no variable
local function cond_model(m)
  return npu.cond(m.p, function() return npu.tanh(npu.matmul(m.x, m.w) + m.b) end,
    function() return m.x * 2 end)
end

-- the same after a cond the output does not need (left out: the kept cond's regions are
-- renumbered in the frozen graph)
local function cond_after_unused_cond(m)
  npu.cond(m.p, function() return npu.matmul(m.x, m.w) end, function() return m.x end)
  return cond_model(m)
end

-- a while loop whose body multiplies by w n times
local function while_model(m)
  local r = npu.while_loop(function(i) return npu.less(i, m.n) end,
    function(i, h) return i + 1, npu.tanh(npu.matmul(h, m.w) + m.b) end, { 0, m.x })
  return r[2]
end

-- a cond nested in the loop body: matmul by w in the first two iterations, + b after; the
-- loop starts from a cond on p reading w
local function nested_model(m)
  local h0 = npu.cond(m.p, function() return npu.tanh(npu.matmul(m.x, m.w)) end, function() return m.x * 2 end)
  local r = npu.while_loop(function(i) return npu.less(i, m.n) end,
    function(i, h)
      local h2 = npu.cond(npu.less(i, 2), function() return npu.tanh(npu.matmul(h, m.w) + m.b) end,
        function() return h + m.b end)
      return i + 1, h2
    end, { 0, h0 })
  return r[2]
end

-- a loop writing each iteration's row product into a TensorArray, stacked and summed
local function tensor_array_model(m)
  local ta = npu.TensorArray(F32, 0, { dynamic_size = true, element_shape = { 4, 8 } })
  local r = npu.while_loop(function(i) return npu.less(i, m.n) end,
    function(i, h, acc)
      local h2 = npu.tanh(npu.matmul(h, m.w) + m.b)
      return i + 1, h2, acc:write(i, h2)
    end, { 0, m.x, ta })
  return npu.reduce_sum(r[3]:stack(), { axis = 0 })
end

TestFreezeControl = {}

function TestFreezeControl:test_cond_reads_a_variable_in_one_branch()
  local m = trained(cond_model)
  local frozen, ops = check_frozen(m, { { 1, true, 0 }, { 1, false, 0 }, { 2, true, 0 }, { 2, false, 0 } })
  lu.assertEquals(ops.cond, 1)
  lu.assertEquals(ops.const >= 2, true)
  lu.assertEquals(placeholders(frozen), { p = true, n = false })
  -- the unused cond is left out, and the kept one runs the frozen graph's regions 1 and 2
  local m2 = trained(cond_after_unused_cond)
  local f2, ops2 = check_frozen(m2, { { 1, true, 0 }, { 2, false, 0 } })
  lu.assertEquals(ops2.cond, 1)
  local regions = {}
  for i = 0, f2:n_nodes() - 1 do
    local r = f2:node_region(i)
    if r > 0 then regions[r] = true end
  end
  lu.assertEquals(regions, { true, true }, "then's nodes in region 1; else's (x * 2) in 2")
  local max_before = 0
  for i = 0, m2.g:n_nodes() - 1 do max_before = math.max(max_before, m2.g:node_region(i)) end
  lu.assertTrue(max_before >= 4, "the kept cond ran regions 3 and 4 in the trained graph")
end

function TestFreezeControl:test_while_body_reads_a_variable()
  local m = trained(while_model)
  local frozen, ops = check_frozen(m, { { 1, true, 0 }, { 1, true, 1 }, { 1, true, 5 }, { 2, true, 3 } })
  lu.assertEquals(ops["while"], 1)
  lu.assertEquals(ops.loop_var, 2, "both loop variables, read or not")
  lu.assertEquals(placeholders(frozen), { p = false, n = true })
  -- the gradient loops of the training step are left out
  lu.assertTrue(frozen:n_nodes() < m.g:n_nodes() / 3)
end

function TestFreezeControl:test_cond_nested_in_while()
  local m = trained(nested_model)
  local _, ops = check_frozen(m, { { 1, true, 4 }, { 1, false, 4 }, { 2, true, 1 }, { 2, false, 0 }, { 1, true, 7 } })
  lu.assertEquals(ops.cond, 2)
  lu.assertEquals(ops["while"], 1)
end

function TestFreezeControl:test_tensor_array_loop()
  local m = trained(tensor_array_model)
  local _, ops = check_frozen(m, { { 1, true, 1 }, { 1, true, 3 }, { 2, true, 6 } })
  lu.assertEquals(ops["while"], 1)
  lu.assertNotNil(ops.tensor_array_write)
end

function TestFreezeControl:test_bf16_same_bits()
  for _, build in ipairs({ nested_model, tensor_array_model }) do
    local m = trained(build, "allow_mix_precision_bf16")
    check_frozen(m, { { 1, true, 4 }, { 2, false, 2 }, { 2, true, 1 } }, "allow_mix_precision_bf16")
  end
end

function TestFreezeControl:test_export_and_reimport()
  local m = trained(nested_model)
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { "out" })
  local g2 = npu.import_graph_def(npu.export_graph_def(frozen))
  lu.assertEquals(ops_of(g2).cond, 2)
  local sess <close> = npu.Session { graph = g2, options = { precision_mode = "force_fp32" } }
  for _, c in ipairs({ { 1, true, 4 }, { 2, false, 3 } }) do
    same_bits(sess:run("out:0", { ["x:0"] = m.xs[c[1]], ["p:0"] = bool(c[2]), ["n:0"] = int(c[3]) }),
      m.sess:run(m.out, { [m.x] = m.xs[c[1]], [m.p] = bool(c[2]), [m.n] = int(c[3]) }))
  end
end

-- A list keeps a variable read only inside the loop body a variable, with its initializer:
-- the frozen graph then computes with w's initial value, as the original graph does after
-- its initializer (and with the trained b).
function TestFreezeControl:test_lists_reach_variables_inside_loops()
  local m = trained(while_model)
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { "out" }, { variable_names_blacklist = { "w" } })
  local vars = frozen:variables()
  lu.assertEquals(#vars, 1)
  lu.assertEquals(vars[1]:name(), "w:0")
  local only_b = gu.convert_variables_to_constants(m.sess, m.g, { "out" }, { "b" })
  lu.assertEquals(#only_b:variables(), 1)
  lu.assertEquals(only_b:variables()[1]:name(), "w:0")
  local sess <close> = npu.Session { graph = frozen, options = { precision_mode = "force_fp32" } }
  sess:run(frozen:global_variables_initializer())
  local w0 = npu.random.normal({ 8, 8 }, { stddev = 0.3, seed = 1 })
  same_bits(sess:run("w:0"), w0)
  m.sess:run(npu.assign(m.w, m.g:const(w0)))
  same_bits(sess:run("out:0", { ["x:0"] = m.xs[1], ["n:0"] = int(3) }),
    m.sess:run(m.out, { [m.x] = m.xs[1], [m.n] = int(3) }))
end

-- TensorFlow 2 If and While imported from a GraphDef (a function library) freeze to conds
-- and loops that compute the same: y = If(p, x, k): x * k or x - k; s = While(i < n):
-- (i + 1, s + x * k).
local function q(s) return '"' .. s .. '"' end
local function node(name, op, inputs, attr)
  local ins = {}
  for i, v in ipairs(inputs) do ins[i] = q(v) end
  local a = {}
  for k, v in pairs(attr or {}) do a[#a + 1] = q(k) .. ": " .. v end
  table.sort(a)
  return ('{"name": %s, "op": %s, "input": [%s], "attr": {%s}}'):format(q(name), q(op),
    table.concat(ins, ","), table.concat(a, ","))
end
local FLOAT, INT, BOOL = '{"type": "DT_FLOAT"}', '{"type": "DT_INT32"}', '{"type": "DT_BOOL"}'
local function types(l)
  local t = {}
  for i, v in ipairs(l) do t[i] = q(v) end
  return '{"list": {"type": [' .. table.concat(t, ",") .. "]}}"
end
local function placeholder(name, dt, dims)
  local d = {}
  for i, v in ipairs(dims) do d[i] = ('{"size": "%d"}'):format(v) end
  return node(name, "Placeholder", {}, { dtype = ('{"type": "%s"}'):format(dt),
    shape = '{"shape": {"dim": [' .. table.concat(d, ",") .. "]}}" })
end
local function func(name, args, outs, nodes, ret)
  local function argdefs(l)
    local t = {}
    for i, a in ipairs(l) do t[i] = ('{"name": "%s", "type": "%s"}'):format(a[1], a[2]) end
    return "[" .. table.concat(t, ",") .. "]"
  end
  local r = {}
  for k, v in pairs(ret) do r[#r + 1] = q(k) .. ": " .. q(v) end
  return ('{"signature": {"name": "%s", "inputArg": %s, "outputArg": %s}, "nodeDef": [%s], "ret": {%s}}')
      :format(name, argdefs(args), argdefs(outs), table.concat(nodes, ","), table.concat(r, ","))
end

function TestFreezeControl:test_imported_if_and_while()
  local fa = { { "a", "DT_FLOAT" }, { "b", "DT_FLOAT" } }
  local wa = { { "i", "DT_INT32" }, { "s", "DT_FLOAT" }, { "x", "DT_FLOAT" }, { "k", "DT_FLOAT" }, { "n", "DT_INT32" } }
  local wo = { { "i1", "DT_INT32" }, { "s1", "DT_FLOAT" }, { "x1", "DT_FLOAT" }, { "k1", "DT_FLOAT" }, { "n1", "DT_INT32" } }
  local json = '{"format": "graph-model", "modelTopology": {"node": [' .. table.concat({
    placeholder("x", "DT_FLOAT", { 2 }), placeholder("k", "DT_FLOAT", {}), placeholder("p", "DT_BOOL", {}),
    placeholder("n", "DT_INT32", {}), placeholder("zero", "DT_INT32", {}),
    node("y", "StatelessIf", { "p", "x", "k" }, {
      Tcond = BOOL, Tin = types({ "DT_FLOAT", "DT_FLOAT" }), Tout = types({ "DT_FLOAT" }),
      then_branch = '{"func": {"name": "then_fn"}}', else_branch = '{"func": {"name": "else_fn"}}' }),
    node("w", "While", { "zero", "x", "x", "k", "n" }, {
      T = types({ "DT_INT32", "DT_FLOAT", "DT_FLOAT", "DT_FLOAT", "DT_INT32" }),
      cond = '{"func": {"name": "cond_fn"}}', body = '{"func": {"name": "body_fn"}}' }),
    node("out", "AddV2", { "y", "w:1" }, { T = FLOAT }),
  }, ",") .. '], "library": {"function": [' .. table.concat({
    func("then_fn", fa, { { "r", "DT_FLOAT" } }, { node("mul", "Mul", { "a", "b" }, { T = FLOAT }) }, { r = "mul:z:0" }),
    func("else_fn", fa, { { "r", "DT_FLOAT" } }, { node("sub", "Sub", { "a", "b" }, { T = FLOAT }) }, { r = "sub:z:0" }),
    func("cond_fn", wa, { { "ok", "DT_BOOL" } }, { node("less", "Less", { "i", "n" }, { T = INT }) }, { ok = "less:z:0" }),
    func("body_fn", wa, wo, {
      node("one", "Const", {}, { dtype = INT, value = '{"tensor": {"dtype": "DT_INT32", "tensorShape": {}, "intVal": [1]}}' }),
      node("inc", "AddV2", { "i", "one:output:0" }, { T = INT }),
      node("xk", "Mul", { "x", "k" }, { T = FLOAT }),
      node("acc", "AddV2", { "s", "xk:z:0" }, { T = FLOAT }),
    }, { i1 = "inc:z:0", s1 = "acc:z:0", x1 = "x", k1 = "k", n1 = "n" }),
  }, ",") .. "]}}}"
  local g = model.import_graph_def(json)
  local sess <close> = npu.Session { graph = g }
  local frozen = gu.convert_variables_to_constants(sess, g, { "out" })
  local ops = ops_of(frozen)
  lu.assertEquals(ops.cond, 1)
  lu.assertEquals(ops["while"], 1)
  local fs <close> = npu.Session { graph = frozen }
  -- out = If + While: {3, 6} or {-2, -1}, plus x + n * x * k
  for _, c in ipairs({ { true, 0, { 4, 8 } }, { false, 2, { 5, 13 } }, { true, 3, { 13, 26 } } }) do
    local feeds = { ["x:0"] = npu.tensor({ 1, 2 }, F32), ["k:0"] = npu.tensor(3, F32), ["p:0"] = bool(c[1]),
      ["n:0"] = int(c[2]), ["zero:0"] = int(0) }
    local want = sess:run("out:0", feeds)
    lu.assertEquals(want:totable(), c[3])
    same_bits(fs:run("out:0", feeds), want)
  end
end

-- errors ----------------------------------------------------------------------------------

-- A training loop: the body assigns w and its next iteration reads what the last one wrote.
-- As a const w could not change, so the frozen graph would compute something else: refused,
-- naming the assign and the variable; kept a variable (blacklist), it freezes and runs.
function TestFreezeControl:test_assign_inside_a_loop_is_refused()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 2 }, "x")
  local w = g:variable(npu.tensor({ 1, 2 }, F32), "w")
  local scale = g:variable(npu.tensor({ 0.5, 0.25 }, F32), "scale")
  local r = npu.while_loop(function(i) return npu.less(i, 3) end,
    function(i, h)
      local wn = npu.assign(w, w * scale, { name = "decay" })
      return i + 1, h * wn
    end, { 0, x })
  local _out = npu.identity(r[2], { name = "out" })
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local feeds = { [x] = npu.tensor({ 1, 1 }, F32) }
  -- each iteration: w = w * scale, then h = h * w
  local want, wv = { 1, 1 }, { 1, 2 }
  for _ = 1, 3 do
    wv = { wv[1] * 0.5, wv[2] * 0.25 }
    want = { want[1] * wv[1], want[2] * wv[2] }
  end
  lu.assertEquals(sess:run("out:0", feeds):totable(), want)
  raises("NPU_ERR_ARG", { "'decay'", "writes variable 'w'", "inside a cond branch or while loop" },
    function() gu.convert_variables_to_constants(sess, g, { "out" }) end)
  -- w kept a variable: scale (read in the body, never written) frozen; the loop still decays w
  local frozen = gu.convert_variables_to_constants(sess, g, { "out" }, { variable_names_blacklist = { "w" } })
  lu.assertEquals(#frozen:variables(), 1)
  local fs <close> = npu.Session { graph = frozen }
  fs:run(frozen:global_variables_initializer())
  lu.assertEquals(fs:run("out:0", { ["x:0"] = npu.tensor({ 1, 1 }, F32) }):totable(), want)
end

-- A node inside a branch is not visible outside it: naming it as an output is refused,
-- naming the node and the cond; so is an output whose control dependency reaches into a
-- branch the outputs do not run.
function TestFreezeControl:test_node_inside_a_branch_is_refused()
  local m = trained(cond_model)
  local inner, inner_id, cond_name
  for i = 0, m.g:n_nodes() - 1 do
    local op = m.g:operation(i)
    if op:type() == "tanh" and m.g:node_region(i) > 0 and not inner then inner, inner_id = op:name(), i end
    if op:type() == "cond" and not cond_name then cond_name = op:name() end
  end
  lu.assertNotNil(inner)
  raises("NPU_ERR_ARG", { "output 2 ('" .. inner .. "')", "inside a cond branch or while loop ('" .. cond_name .. "')",
    "not visible outside it" },
    function() gu.convert_variables_to_constants(m.sess, m.g, { "out", inner }) end)
  local _ <close> = m.g:as_default()
  local side = npu.identity(m.x, { name = "side" })
  local side_id
  for i = 0, m.g:n_nodes() - 1 do
    if m.g:operation(i):name() == "side" then side_id = i end
  end
  m.g:add_control(side_id, inner_id)
  raises("NPU_ERR_ARG", { "the control dependency of 'side' reaches '" .. inner .. "'",
    "inside a cond branch or while loop ('" .. cond_name .. "') that the outputs do not run" },
    function() gu.convert_variables_to_constants(m.sess, m.g, { side }) end)
end
