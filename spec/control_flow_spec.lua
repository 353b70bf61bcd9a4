-- Control flow on the device: npu.cond, npu.case, npu.while_loop, npu.map_fn, npu.TensorArray
-- (lua/npu/control.lua, compile/control.c, exec/control.c).  Values are computed by hand or
-- by the TensorFlow semantics written next to each case.
local lu = require("luaunit")
local npu = require("npu")

local F32 = "float32"

local function session(g, options)
  return npu.Session { graph = g, options = options }
end

local function expect_error(code, parts, fn, ...)
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error")
  local msg = tostring(err)
  lu.assertStrContains(tostring(msg), code)
  for _, p in ipairs(parts) do lu.assertStrContains(tostring(msg), p) end
  return msg
end

local function scalar(v, dtype) return npu.tensor(v, dtype or F32) end

TestCond = {}

function TestCond:test_takes_one_branch()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1 }, "x")
  local p = g:placeholder("bool", {}, "p")
  local y = npu.cond(p, function() return x * 2 end, function() return x - 1 end, "pick")
  lu.assertEquals(y:shape(), { -1 })
  lu.assertEquals(y:op():name(), "pick")
  local sess <close> = session(g)
  local xv = npu.tensor({ 1, 2, 3 }, F32)
  lu.assertEquals(sess:run(y, { [x] = xv, [p] = scalar(true, "bool") }):totable(), { 2, 4, 6 })
  lu.assertEquals(sess:run(y, { [x] = xv, [p] = scalar(false, "bool") }):totable(), { 0, 1, 2 })
end

-- Only the taken branch runs: the other one would fail (a gather out of range).
function TestCond:test_untaken_branch_does_not_run()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 3 }, "x")
  local i = g:placeholder("int32", {}, "i")
  local ok = npu.less(i, 3)
  local y = npu.cond(ok, function() return npu.gather(x, i) end, function() return 0.0 end)
  local sess <close> = session(g)
  local xv = npu.tensor({ 5, 6, 7 }, F32)
  lu.assertEquals(sess:run(y, { [x] = xv, [i] = scalar(2, "int32") }):item(), 7)
  lu.assertEquals(sess:run(y, { [x] = xv, [i] = scalar(9, "int32") }):item(), 0)
end

function TestCond:test_structures_constants_and_outer_values()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 2 }, "x")
  local p = g:placeholder("bool", {}, "p")
  local r = npu.cond(p, function() return { a = x + 1, b = { x, 3.0 } } end,
    function() return { a = x * 0.0, b = { x * 2, 4.0 } } end)
  local sess <close> = session(g)
  local xv = npu.tensor({ 1, 2 }, F32)
  local t = sess:run({ r.a, r.b[1], r.b[2] }, { [x] = xv, [p] = scalar(true, "bool") })
  lu.assertEquals(t[1]:totable(), { 2, 3 })
  lu.assertEquals(t[2]:totable(), { 1, 2 })
  lu.assertEquals(t[3]:item(), 3)
  t = sess:run({ r.a, r.b[1], r.b[2] }, { [x] = xv, [p] = scalar(false, "bool") })
  lu.assertEquals(t[1]:totable(), { 0, 0 })
  lu.assertEquals(t[2]:totable(), { 2, 4 })
  lu.assertEquals(t[3]:item(), 4)
end

-- Branches of different shapes: the result's dimension is known when it runs.
function TestCond:test_branch_shapes_differ()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 4 }, "x")
  local p = g:placeholder("bool", {}, "p")
  local y = npu.cond(p, function() return npu.concat({ x, x }, 0) end, function() return x end)
  lu.assertEquals(y:shape(), { -1 })
  local s = npu.reduce_sum(y * 2)
  local sess <close> = session(g)
  local xv = npu.tensor({ 1, 2, 3, 4 }, F32)
  local r = sess:run({ y, s }, { [x] = xv, [p] = scalar(true, "bool") })
  lu.assertEquals(r[1]:shape(), { 8 })
  lu.assertEquals(r[2]:item(), 40)
  r = sess:run({ y, s }, { [x] = xv, [p] = scalar(false, "bool") })
  lu.assertEquals(r[1]:shape(), { 4 })
  lu.assertEquals(r[2]:item(), 20)
end

function TestCond:test_nested()
  local g = npu.Graph()
  local a = g:placeholder("int32", {}, "a")
  -- sign(a) as nested conds
  local y = npu.cond(npu.greater(a, 0), function() return g:const(npu.tensor(1, "int32")) end, function()
    return npu.cond(npu.less(a, 0), function() return a * 0 - 1 end, function() return a * 0 end)
  end)
  local sess <close> = session(g)
  for _, c in ipairs({ { 5, 1 }, { -3, -1 }, { 0, 0 } }) do
    lu.assertEquals(sess:run(y, { [a] = scalar(c[1], "int32") }):item(), c[2])
  end
end

function TestCond:test_case()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder("int32", {}, "x")
  local y = npu.case({
    { npu.less(x, 0), function() return g:const(npu.tensor(-1, "int32")) end },
    { npu.equal(x, 0), function() return g:const(npu.tensor(0, "int32")) end },
  }, { default = function() return x * 10 end })
  local sess <close> = session(g)
  lu.assertEquals(sess:run(y, { [x] = scalar(-4, "int32") }):item(), -1)
  lu.assertEquals(sess:run(y, { [x] = scalar(0, "int32") }):item(), 0)
  lu.assertEquals(sess:run(y, { [x] = scalar(7, "int32") }):item(), 70)
end

function TestCond:test_errors()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 2 }, "x")
  local p = g:placeholder("bool", {}, "p")
  expect_error("same structure", { "true_fn returns", "false_fn returns" }, npu.cond, p,
    function() return x end, function() return { x, x } end)
  expect_error("NPU_ERR_DTYPE", { "cond", "float32", "int32", "result 1" }, npu.cond, p,
    function() return x end, function() return npu.cast(x, "int32") end)
  expect_error("NPU_ERR_DTYPE", { "pred must be a bool scalar" }, npu.cond, x,
    function() return x end, function() return x end)
  -- a value built inside a branch is not visible outside it
  local inner
  npu.cond(p, function() inner = x * 3 return x end, function() return x end)
  expect_error("NPU_ERR_ARG", { "not visible here" }, function() return inner + 1 end)
  local sess <close> = session(g)
  expect_error("NPU_ERR_ARG", { "inside a cond branch or while loop" }, sess.run, sess, inner,
    { [x] = npu.tensor({ 1, 2 }, F32) })
  -- the graph and session stay usable
  local y = npu.cond(p, function() return x + 1 end, function() return x end)
  lu.assertEquals(sess:run(y, { [x] = npu.tensor({ 1, 2 }, F32), [p] = scalar(true, "bool") }):totable(), { 2, 3 })
  -- a failing branch function closes its region: building goes on outside it
  expect_error("boom", {}, npu.cond, p, function() error("boom") end, function() return x end)
  lu.assertEquals(g:region(), 0)
end

TestWhile = {}

function TestWhile:test_sum_and_counter()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local r = npu.while_loop(function(i) return npu.less(i, 10) end,
    function(i, s) return i + 1, s + npu.cast(i, F32) end, { 0, 0.0 })
  local sess <close> = session(g)
  local t = sess:run(r)
  lu.assertEquals(t[1]:item(), 10)
  lu.assertEquals(t[1]:dtype(), "int32")
  lu.assertEquals(t[2]:item(), 45) -- 0 + 1 + ... + 9
end

function TestWhile:test_fed_bound_captured_value_and_repeated_runs()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local n = g:placeholder("int32", {}, "n")
  local w = g:placeholder(F32, { 3 }, "w")
  -- v <- v * w, n times (w read from outside the loop)
  local r = npu.while_loop(function(i, v) return npu.less(i, n) end,
    function(i, v) return i + 1, v * w end, { 0, npu.ones({ 3 }) })
  local sess <close> = session(g)
  local wv = npu.tensor({ 2, 3, 0.5 }, F32)
  lu.assertEquals(sess:run(r[2], { [n] = scalar(3, "int32"), [w] = wv }):totable(), { 8, 27, 0.125 })
  lu.assertEquals(sess:run(r[2], { [n] = scalar(0, "int32"), [w] = wv }):totable(), { 1, 1, 1 })
  lu.assertEquals(sess:run(r[2], { [n] = scalar(1, "int32"), [w] = wv }):totable(), { 2, 3, 0.5 })
end

function TestWhile:test_maximum_iterations_stops_the_loop()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local r = npu.while_loop(function(i) return npu.less(i, 100) end, function(i) return i + 1 end,
    { 0 }, { maximum_iterations = 7 })
  local sess <close> = session(g)
  lu.assertEquals(sess:run(r[1]):item(), 7)
end

-- Collatz: steps until 1 (27 takes 111), a cond inside the body.
function TestWhile:test_cond_inside_while()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x0 = g:placeholder("int32", {}, "x0")
  local r = npu.while_loop(function(x, k) return npu.greater(x, 1) end, function(x, k)
    local even = npu.equal(npu.floor_mod(x, 2), 0)
    return npu.cond(even, function() return npu.floor_div(x, 2) end, function() return x * 3 + 1 end), k + 1
  end, { x0, 0 })
  local sess <close> = session(g)
  lu.assertEquals(sess:run(r[2], { [x0] = scalar(27, "int32") }):item(), 111)
  lu.assertEquals(sess:run(r[2], { [x0] = scalar(6, "int32") }):item(), 8)
  lu.assertEquals(sess:run(r[2], { [x0] = scalar(1, "int32") }):item(), 0)
end

-- Nested loops: sum over i < n of sum over j < i of j = n(n-1)(n-2)/6.
function TestWhile:test_nested_loops()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local n = g:placeholder("int32", {}, "n")
  local r = npu.while_loop(function(i) return npu.less(i, n) end, function(i, total)
    local inner = npu.while_loop(function(j) return npu.less(j, i) end,
      function(j, s) return j + 1, s + j end, { 0, 0 })
    return i + 1, total + inner[2]
  end, { 0, 0 })
  local sess <close> = session(g)
  for _, m in ipairs({ 0, 1, 5, 12 }) do
    lu.assertEquals(sess:run(r[2], { [n] = scalar(m, "int32") }):item(), m * (m - 1) * (m - 2) // 6)
  end
end

-- A while loop inside a cond branch.
function TestWhile:test_while_inside_cond()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local p = g:placeholder("bool", {}, "p")
  local y = npu.cond(p, function()
    return npu.while_loop(function(v) return npu.less(v, 100) end, function(v) return v * 3 end, { 1 })[1]
  end, function() return g:const(npu.tensor(-1, "int32")) end)
  local sess <close> = session(g)
  lu.assertEquals(sess:run(y, { [p] = scalar(true, "bool") }):item(), 243)
  lu.assertEquals(sess:run(y, { [p] = scalar(false, "bool") }):item(), -1)
end

function TestWhile:test_shape_invariants()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 3 }, "x")
  local grow = function(v) return npu.concat({ v, v }, 0) end
  local small = function(v) return npu.less(npu.reduce_sum(v), 100.0) end
  -- TensorFlow's default: the shape must not change
  expect_error("NPU_ERR_SHAPE", { "while", "loop variable 1", "[3]", "shape_invariants" },
    npu.while_loop, small, grow, { x })
  local r = npu.while_loop(small, grow, { x }, { shape_invariants = { { -1 } } })
  lu.assertEquals(r[1]:shape(), { -1 })
  local sess <close> = session(g)
  local out = sess:run(r[1], { [x] = npu.tensor({ 1, 2, 3 }, F32) })
  lu.assertEquals(out:shape(), { 96 }) -- sums 6, 12, 24, 48, 96: doubled 5 times, 192 stops
  out = sess:run(r[1], { [x] = npu.tensor({ 20, 30, 0 }, F32) })
  lu.assertEquals(out:shape(), { 6 }) -- 50, then 100 stops
  out = sess:run(r[1], { [x] = npu.tensor({ 50, 60, 0 }, F32) })
  lu.assertEquals(out:shape(), { 3 }) -- 110: the body never runs
  -- an invariant that fixes a dim the body changes, known only when it runs
  local k = g:placeholder("int32", {}, "k")
  local r2 = npu.while_loop(function(v) return npu.less(npu.reduce_sum(v), 10.0) end,
    function(v) return npu.tile(v, npu.reshape(k, { 1 })) end, { x }, { shape_invariants = { { 3 } }, name = "tiled", maximum_iterations = 5 })
  expect_error("NPU_ERR_SHAPE", { "while 'tiled'", "loop variable 1", "[6]", "iteration 1" },
    sess.run, sess, r2[1], { [x] = npu.tensor({ 1, 1, 1 }, F32), [k] = scalar(2, "int32") })
  -- k = 1 keeps the shape: the same loop runs
  lu.assertEquals(sess:run(r2[1], { [x] = npu.tensor({ 1, 1, 1 }, F32), [k] = scalar(1, "int32") }):totable(),
    { 1, 1, 1 }) -- tile by 1 never grows the sum: maximum_iterations ends it
end

function TestWhile:test_errors()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 2 }, "x")
  expect_error("NPU_ERR_DTYPE", { "loop variable 1", "float32", "int32" }, npu.while_loop,
    function(v) return npu.less(npu.reduce_sum(v), 3.0) end, function(v) return npu.cast(v, "int32") end, { x })
  expect_error("same structure", { "body returns" }, npu.while_loop,
    function(a, b) return npu.less(a, 3.0) end, function(a, b) return a end, { 1.0, 2.0 })
  expect_error("NPU_ERR_DTYPE", { "bool scalar" }, npu.while_loop,
    function(v) return v end, function(v) return v end, { x })
  expect_error("maximum_iterations", {}, npu.while_loop,
    function(v) return npu.less(v, 3) end, function(v) return v end, { 1 }, { maximum_iterations = -2 })
  lu.assertEquals(g:region(), 0)
end

TestMapFn = {}

function TestMapFn:test_squares_and_rows()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1 }, "x")
  local m = g:placeholder(F32, { -1, 3 }, "m")
  local sq = npu.map_fn(function(e) return e * e end, x)
  local rows = npu.map_fn(function(row) return npu.reduce_sum(row) end, m)
  local sess <close> = session(g)
  lu.assertEquals(sess:run(sq, { [x] = npu.tensor({ 1, -2, 3 }, F32) }):totable(), { 1, 4, 9 })
  lu.assertEquals(sess:run(sq, { [x] = npu.tensor({ 4 }, F32) }):totable(), { 16 })
  lu.assertEquals(sess:run(rows, { [m] = npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, F32) }):totable(), { 6, 15 })
end

function TestMapFn:test_dtype_change()
  local g = npu.Graph()
  local x = g:placeholder("int32", { 4 }, "x")
  local y = npu.map_fn(function(e) return npu.cast(e, F32) * 0.5 end, x, { dtype = F32 })
  local sess <close> = session(g)
  lu.assertEquals(sess:run(y, { [x] = npu.tensor({ 1, 2, 3, 4 }, "int32") }):totable(), { 0.5, 1, 1.5, 2 })
end

TestTensorArray = {}

function TestTensorArray:test_outside_loops()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local ta = npu.TensorArray(F32, 3, { element_shape = { 2 } })
  ta = ta:write(0, npu.tensor({ 1, 2 }, F32)):write(2, npu.tensor({ 5, 6 }, F32))
  local sess <close> = session(g)
  local r = sess:run({ ta:stack(), ta:read(2), ta:size(), ta:gather({ 2, 0 }), ta:concat() })
  lu.assertEquals(r[1]:totable(), { { 1, 2 }, { 0, 0 }, { 5, 6 } })
  lu.assertEquals(r[2]:totable(), { 5, 6 })
  lu.assertEquals(r[3]:item(), 3)
  lu.assertEquals(r[4]:totable(), { { 5, 6 }, { 1, 2 } })
  lu.assertEquals(r[5]:totable(), { 1, 2, 0, 0, 5, 6 })
  local u = npu.TensorArray(F32, 2):unstack(npu.tensor({ { 1, 1 }, { 2, 2 } }, F32))
  lu.assertEquals(sess:run(u:read(1)):totable(), { 2, 2 })
  local s = npu.TensorArray(F32, 4, { element_shape = {} }):scatter({ 3, 1 }, npu.tensor({ 7, 8 }, F32))
  lu.assertEquals(sess:run(s:stack()):totable(), { 0, 8, 0, 7 })
  lu.assertStrContains(tostring(ta), "npu.TensorArray(float32, size 3")
end

function TestTensorArray:test_dynamic_size_in_a_loop()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local n = g:placeholder("int32", {}, "n")
  local ta = npu.TensorArray("int32", 0, { dynamic_size = true })
  local r = npu.while_loop(function(i) return npu.less(i, n) end,
    function(i, acc) return i + 1, acc:write(i, i * i) end, { 0, ta })
  local stacked, size = r[2]:stack(), r[2]:size()
  local sess <close> = session(g)
  local t = sess:run({ stacked, size }, { [n] = scalar(5, "int32") })
  lu.assertEquals(t[1]:totable(), { 0, 1, 4, 9, 16 })
  lu.assertEquals(t[2]:item(), 5)
  lu.assertEquals(sess:run(stacked, { [n] = scalar(2, "int32") }):totable(), { 0, 1 })
end

function TestTensorArray:test_errors()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local i = g:placeholder("int32", {}, "i")
  local ta = npu.TensorArray(F32, 2, { element_shape = { 1 } }):write(i, npu.tensor({ 1 }, F32))
  local sess <close> = session(g)
  expect_error("NPU_ERR_ARG", { "tensor_array_write", "index 2", "size 2" }, sess.run, sess, ta:stack(),
    { [i] = scalar(2, "int32") })
  local r = ta:read(3)
  expect_error("NPU_ERR", { "gather" }, sess.run, sess, r, { [i] = scalar(0, "int32") })
  lu.assertEquals(sess:run(ta:stack(), { [i] = scalar(1, "int32") }):totable(), { { 0 }, { 1 } })
  expect_error("NPU_ERR_SHAPE", { "tensor_array_write" }, function()
    return ta:write(0, npu.tensor({ 1, 2 }, F32))
  end)
end

TestControlPaths = {}

-- The host reference path gives the same values; explain lists the control steps.
function TestControlPaths:test_reference_path_and_explain()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 3 }, "x")
  local r = npu.while_loop(function(i, v) return npu.less(i, 4) end,
    function(i, v) return i + 1, npu.cond(npu.greater(npu.reduce_sum(v), 10.0),
      function() return v * 0.5 end, function() return v * 3 end) end, { 0, x })
  local xv = npu.tensor({ 1, 2, 3 }, F32)
  local a <close> = session(g)
  local b <close> = session(g, { use_off_line = false })
  local va = a:run(r[2], { [x] = xv }):totable()
  lu.assertEquals(va, b:run(r[2], { [x] = xv }):totable())
  -- 6 -> 18 -> 9 -> 27 -> 13.5: x * 3 * 0.5 * 3 * 0.5
  lu.assertEquals(va, { 2.25, 4.5, 6.75 })
  local text = tostring(a:explain(r[2], { [x] = xv }))
  lu.assertStrContains(text, "while")
end

-- User mistakes that would otherwise pass silently or fail far from their cause: unknown
-- option keys (named, with the nearest valid one), nil where a function or value was meant,
-- shape_invariants of the wrong structure, exclusive = true, bad TensorArray indices.
TestControlMistakes = {}

function TestControlMistakes:test_unknown_option_keys()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local p = g:placeholder("bool", {}, "p")
  local c = function(i) return npu.less(i, 3) end
  local b = function(i) return i + 1 end
  expect_error("NPU_ERR_ARG", { "npu.while_loop", "unknown option 'maximum_iteration'",
    "did you mean 'maximum_iterations'" }, npu.while_loop, c, b, { 0 }, { maximum_iteration = 5 })
  expect_error("NPU_ERR_ARG", { "npu.while_loop", "'shape_invariant'", "'shape_invariants'" },
    npu.while_loop, { cond = c, body = b, loop_vars = { 0 }, shape_invariant = { {} } })
  expect_error("NPU_ERR_ARG", { "npu.while_loop", "options must be a table", "number (5)" },
    npu.while_loop, c, b, { 0 }, 5)
  expect_error("NPU_ERR_ARG", { "npu.cond", "'flase_fn'", "'false_fn'" }, npu.cond,
    { pred = p, true_fn = function() return 1 end, flase_fn = function() return 2 end })
  expect_error("NPU_ERR_ARG", { "npu.case", "'defualt'", "'default'" }, npu.case,
    { { p, function() return 1 end } }, { defualt = function() return 2 end })
  expect_error("NPU_ERR_ARG", { "npu.map_fn", "'dtpye'", "'dtype'" }, npu.map_fn,
    function(e) return e end, npu.tensor({ 1, 2 }, F32), { dtpye = F32 })
  expect_error("NPU_ERR_ARG", { "npu.TensorArray", "'dynamic_sise'", "'dynamic_size'" },
    npu.TensorArray, F32, 0, { dynamic_sise = true })
  expect_error("NPU_ERR_ARG", { "npu.TensorArray", "'element_shap'", "'element_shape'" },
    npu.TensorArray, { dtype = F32, size = 2, element_shap = { 1 } })
  -- the documented options that have no effect here are accepted
  local r = npu.while_loop(c, b, { 0 }, { parallel_iterations = 10, back_prop = false, swap_memory = false })
  local sess <close> = session(g)
  lu.assertEquals(sess:run(r[1]):item(), 3)
  lu.assertEquals(g:region(), 0)
end

function TestControlMistakes:test_nil_where_a_function_or_value_was_meant()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 2 }, "x")
  local p = g:placeholder("bool", {}, "p")
  local f = function() return x end
  expect_error("NPU_ERR_ARG", { "npu.cond", "pred must be", "got nil" }, npu.cond, nil, f, f)
  expect_error("NPU_ERR_ARG", { "npu.cond", "false_fn must be a function", "got nil" }, npu.cond, p, f, nil)
  expect_error("NPU_ERR_ARG", { "npu.cond", "true_fn must be a function", "a table" }, npu.cond, p, { f }, f)
  expect_error("NPU_ERR_ARG", { "npu.while_loop", "body must be a function", "got nil" },
    npu.while_loop, function(v) return npu.less(npu.reduce_sum(v), 1.0) end, nil, { x })
  expect_error("NPU_ERR_ARG", { "npu.case", "default must be a function", "number" }, npu.case,
    { { p, f } }, { default = 3 })
  expect_error("NPU_ERR_ARG", { "npu.map_fn", "elems must be a tensor", "got nil" }, npu.map_fn, f, nil)
  expect_error("NPU_ERR_ARG", { "npu.map_fn", "fn must be a function" }, npu.map_fn, nil, x)
  expect_error("NPU_ERR_ARG", { "npu.map_fn", "dtype", "got a number" }, npu.map_fn, f, x, { dtype = 1 })
  local ta = npu.TensorArray(F32, 2, { element_shape = { 2 } })
  expect_error("NPU_ERR_ARG", { "npu.TensorArray:write", "value is nil" }, ta.write, ta, 0, nil)
  expect_error("NPU_ERR_ARG", { "npu.TensorArray:scatter", "value is nil" }, ta.scatter, ta, { 0 }, nil)
  expect_error("NPU_ERR_ARG", { "npu.TensorArray:unstack", "value is nil" }, ta.unstack, ta, nil)
  expect_error("NPU_ERR_ARG", { "npu.TensorArray", "element_shape" }, npu.TensorArray, F32, 2,
    { element_shape = { 2, "x" } })
  lu.assertEquals(g:region(), 0)
end

function TestControlMistakes:test_shape_invariants_of_the_wrong_structure()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 3 }, "x")
  local small = function(v) return npu.less(npu.reduce_sum(v), 100.0) end
  local grow = function(v) return npu.concat({ v, v }, 0) end
  -- {-1} is one shape, not loop_vars' structure (one variable: {{-1}})
  expect_error("NPU_ERR_ARG", { "shape_invariants[1] must be a shape", "number (-1)", "{{-1}}" },
    npu.while_loop, small, grow, { x }, { shape_invariants = { -1 } })
  expect_error("NPU_ERR_ARG", { "shape_invariants must be a table like loop_vars'", "a string" },
    npu.while_loop, small, grow, { x }, { shape_invariants = "-1" })
  expect_error("NPU_ERR_ARG", { "shape_invariants has the key [2]" }, npu.while_loop, small, grow,
    { x }, { shape_invariants = { { -1 }, { -1 } } })
  expect_error("NPU_ERR_ARG", { "shape_invariants.v must be a shape" }, npu.while_loop,
    function(s) return small(s.v) end, function(s) return { v = grow(s.v) } end, { v = x },
    { shape_invariants = { v = { -1.5 } } })
  expect_error("NPU_ERR_ARG", { "shape_invariants has the key 'w'", "which loop_vars' {v=tensor} has not" },
    npu.while_loop, function(s) return small(s.v) end, function(s) return { v = grow(s.v) } end,
    { v = x }, { shape_invariants = { w = { -1 } } })
  -- the right structure, nested, with a variable left to its initial shape (nil)
  local r = npu.while_loop(function(s) return small(s.v) end,
    function(s) return { v = grow(s.v), k = s.k + 1 } end, { v = x, k = 0 },
    { shape_invariants = { v = { -1 } } })
  local sess <close> = session(g)
  local t = sess:run({ r.v, r.k }, { [x] = npu.tensor({ 1, 2, 3 }, F32) })
  lu.assertEquals(t[1]:shape(), { 96 })
  lu.assertEquals(t[2]:item(), 5)
  lu.assertEquals(g:region(), 0)
end

-- tf.case's exclusive = true fails when more than one pred is true; nothing here checks that,
-- so it is refused rather than accepted and ignored.
function TestControlMistakes:test_case_exclusive_is_refused()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder("int32", {}, "x")
  local pairs_ = { { npu.less(x, 0), function() return x * 0 - 1 end },
    { npu.greater(x, 0), function() return x * 0 + 1 end } }
  expect_error("NPU_ERR_UNSUPPORTED", { "npu.case", "exclusive = true is not supported" },
    npu.case, pairs_, { default = function() return x * 0 end, exclusive = true })
  expect_error("NPU_ERR_ARG", { "npu.case", "exclusive must be a boolean" }, npu.case, pairs_,
    { exclusive = "yes" })
  local y = npu.case(pairs_, { default = function() return x * 0 end, exclusive = false })
  local sess <close> = session(g)
  lu.assertEquals(sess:run(y, { [x] = scalar(-5, "int32") }):item(), -1)
  lu.assertEquals(sess:run(y, { [x] = scalar(0, "int32") }):item(), 0)
  lu.assertEquals(g:region(), 0)
end

function TestControlMistakes:test_tensor_array_index_types()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local ta = npu.TensorArray(F32, 3, { element_shape = { 2 } })
  local f = g:placeholder(F32, {}, "f")
  expect_error("NPU_ERR_ARG", { "npu.TensorArray:read", "index must be an integer", "number (1.5)" },
    ta.read, ta, 1.5)
  expect_error("NPU_ERR_ARG", { "npu.TensorArray:read", "a float32 tensor" }, ta.read, ta, f)
  expect_error("NPU_ERR_ARG", { "npu.TensorArray:read", "got nil" }, ta.read, ta, nil)
  expect_error("NPU_ERR_ARG", { "npu.TensorArray:write", "a string" }, ta.write, ta, "0", npu.tensor({ 1, 2 }, F32))
  expect_error("NPU_ERR_ARG", { "npu.TensorArray:gather", "indices[2] must be an integer" },
    ta.gather, ta, { 0, 0.5 })
  expect_error("NPU_ERR_ARG", { "npu.TensorArray:scatter", "indices must be a list of integers" },
    ta.scatter, ta, 1, npu.tensor({ { 1, 2 } }, F32))
  -- int tensors, built or given, are indices
  local i = g:placeholder("int64", {}, "i")
  local w = ta:write(npu.tensor(1, "int32"), npu.tensor({ 3, 4 }, F32))
  local sess <close> = session(g)
  local r = sess:run({ w:read(i), w:gather(npu.tensor({ 1, 0 }, "int64")) }, { [i] = npu.tensor(1, "int64") })
  lu.assertEquals(r[1]:totable(), { 3, 4 })
  lu.assertEquals(r[2]:totable(), { { 3, 4 }, { 0, 0 } })
end

-- Region ids beyond C's int are no region: refused, not wrapped onto another region's id.
function TestControlMistakes:test_region_ids_out_of_range()
  local g = npu.Graph()
  local r = g:region_begin()
  expect_error("NPU_ERR_STATE", { "npu.Graph:region_end", "region 0 is not the one being built (1)" },
    g.region_end, g, r + (1 << 32))
  lu.assertEquals(g:region(), r)
  g:region_end(r)
  lu.assertEquals(g:region(), 0)
  lu.assertEquals(g:node_region(1 << 32), -1)
end

-- Loop variables that neither the condition nor the body reads still have their slots borrowed
-- by the loop (the plan's list of them was sized by the ones read: make sanitize saw it write
-- past its end).
function TestWhile:test_variables_nothing_reads()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local n = g:placeholder("int32", {}, "n")
  local x = g:placeholder(F32, { 3 }, "x")
  local init = { 0, x }
  for k = 1, 12 do init[#init + 1] = g:const(npu.tensor({ k, k, k }, F32)) end
  local r = npu.while_loop(function(i) return npu.less(i, n) end, function(i, s, ...)
    local rest = { ... }
    return i + 1, s * 2, table.unpack(rest)
  end, init)
  local sess <close> = session(g)
  local got = sess:run({ r[2], r[14] }, { [n] = scalar(3, "int32"), [x] = npu.tensor({ 1, 2, 3 }, F32) })
  lu.assertEquals(got[1]:totable(), { 8, 16, 24 })
  lu.assertEquals(got[2]:totable(), { 12, 12, 12 })
end
