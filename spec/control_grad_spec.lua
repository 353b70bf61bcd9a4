-- spec/control_grad_spec.lua — gradients through npu.cond and npu.while_loop (ops/grad_control.c):
-- cond against hand-computed values in both branches (a value read by one branch only gets a
-- zero gradient when the other runs), while loops against closed forms and central
-- differences in float64 (h = 1e-6, |analytic - numeric| <= 1e-6 * (1 + |numeric|), as in
-- grad_spec.lua), nesting, an optimizer minimizing through a cond, a training step with a cond
-- and a loop run by iterations_per_loop, and the errors (the graph left as it was).
local lu = require("luaunit")
local npu = require("npu")

local F64 = "float64"
local function t64(v) return npu.tensor(v, F64) end
local function b(v) return npu.tensor(v, "bool") end


local function values(t)
  local v = t:totable()
  return type(v) == "table" and v or { v }
end

-- Central differences of scalar L with respect to placeholder ph, and the elementwise
-- comparison (support.lua)
local support = dofile(SPEC_DIR .. "/support.lua")
local check_numeric, assert_close = support.check_gradient, support.assert_close

TestCondGradient = {}

-- y = cond(p, x*x*w, exp(x) + c): then dy/dx = 2xw, dy/dw = x^2, dy/dc = 0; else
-- dy/dx = exp(x), dy/dw = 0 (w is read by the then branch only), dy/dc = 1.
function TestCondGradient:test_both_branches_by_hand()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 3 }, "x")
  local w = g:placeholder(F64, { 3 }, "w")
  local c = g:placeholder(F64, {}, "c")
  local p = g:placeholder("bool", {}, "p")
  local y = npu.cond(p, function() return x * x * w end, function() return npu.exp(x) + c end)
  local loss = npu.reduce_sum(y)
  local gr = npu.gradients(loss, { x, w, c })
  lu.assertEquals(gr[1]:shape(), { 3 })
  lu.assertEquals(gr[2]:shape(), { 3 })
  local sess <close> = npu.Session { graph = g }
  local xv, wv = { 0.5, -1, 2 }, { 3, 0.25, -2 }
  local feeds = { [x] = t64(xv), [w] = t64(wv), [c] = t64(1.5), [p] = b(true) }
  local r = sess:run({ gr[1], gr[2], gr[3] }, feeds)
  assert_close(values(r[1]), { 2 * 0.5 * 3, 2 * -1 * 0.25, 2 * 2 * -2 }, 1e-12, "then: d/dx")
  assert_close(values(r[2]), { 0.25, 1, 4 }, 1e-12, "then: d/dw")
  assert_close(values(r[3]), { 0 }, 0, "then: d/dc (c is read by the other branch)")
  feeds[p] = b(false)
  r = sess:run({ gr[1], gr[2], gr[3] }, feeds)
  assert_close(values(r[1]), { math.exp(0.5), math.exp(-1), math.exp(2) }, 1e-12, "else: d/dx")
  assert_close(values(r[2]), { 0, 0, 0 }, 0, "else: d/dw (w is read by the other branch)")
  assert_close(values(r[3]), { 3 }, 1e-12, "else: d/dc")
end

-- A branch returning an outer value as is, a structure with two results of which the loss
-- uses one, and tf.gradients' nil for a value neither branch reads.
function TestCondGradient:test_results_as_is_and_unused_outputs()
  local g = npu.Graph()
  local x = g:placeholder(F64, {}, "x")
  local u = g:placeholder(F64, {}, "u")
  local p = g:placeholder("bool", {}, "p")
  local r = npu.cond(p, function() return { a = x, b = x * 10 } end,
    function() return { a = x * x * x, b = x + 1 } end)
  local gr = npu.gradients(r.a * 2, { x, u })
  lu.assertNil(gr[2])
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(gr[1], { [x] = t64(2), [p] = b(true) }):item(), 2)
  lu.assertEquals(sess:run(gr[1], { [x] = t64(2), [p] = b(false) }):item(), 2 * 3 * 4)
end

-- A cond inside a branch, and a value computed from x outside the cond and read inside it
-- (its gradient flows on to x once, through the outer walk).
function TestCondGradient:test_nested_against_central_differences()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 2 }, "x")
  local p = g:placeholder("bool", {}, "p")
  local q = g:placeholder("bool", {}, "q")
  local z = npu.tanh(x) * 3
  local y = npu.cond(p, function()
    return npu.cond(q, function() return npu.sigmoid(z * x) end, function() return npu.exp(x) * z end)
  end, function() return z * z + x end)
  local L = npu.reduce_sum(y * g:const(t64({ 0.75, -1.25 })))
  local d = npu.gradients(L, { x })[1]
  local sess <close> = npu.Session { graph = g }
  for _, pq in ipairs({ { true, true }, { true, false }, { false, true } }) do
    local feeds = { [x] = t64({ 0.3, -0.7 }), [p] = b(pq[1]), [q] = b(pq[2]) }
    check_numeric(sess, L, d, x, feeds, ("nested cond p=%s q=%s"):format(pq[1], pq[2]))
  end
end

-- (The memory plan keeps a branch result returned as is alive as long as the cond's output:
-- here the gradient of x in the else branch is the incoming gradient itself.)
function TestCondGradient:test_result_returned_as_is_outlives_the_cond()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 2 }, "x")
  local p = g:placeholder("bool", {}, "p")
  local a = npu.exp(x)
  local y = npu.cond(p, function() return a end, function() return a * 2 end)
  local out = y + npu.tanh(x) * 5 -- a buffer freed after the cond would be reused here
  local sess <close> = npu.Session { graph = g }
  local got = values(sess:run(out, { [x] = t64({ 0.3, -0.7 }), [p] = b(true) }))
  assert_close(got, { math.exp(0.3) + 5 * math.tanh(0.3), math.exp(-0.7) + 5 * math.tanh(-0.7) },
    1e-12, "exp(x) + 5 tanh(x)")
end

TestWhileGradient = {}

-- v -> v * w, n times from v = x: y = x w^n, dy/dx = w^n, dy/dw = n x w^(n-1).
function TestWhileGradient:test_power_by_hand()
  local g = npu.Graph()
  local x = g:placeholder(F64, {}, "x")
  local w = g:placeholder(F64, {}, "w")
  local n = g:placeholder("int32", {}, "n")
  local out = npu.while_loop(function(i) return npu.less(i, n) end,
    function(i, v) return i + 1, v * w end, { 0, x })
  local gr = npu.gradients(out[2], { x, w })
  local sess <close> = npu.Session { graph = g }
  for _, k in ipairs({ 0, 1, 2, 5 }) do
    local r = sess:run({ out[2], gr[1], gr[2] }, { [x] = t64(1.5), [w] = t64(-1.25), [n] = npu.tensor(k, "int32") })
    assert_close(r[1]:item(), 1.5 * (-1.25) ^ k, 1e-12, "y, n = " .. k)
    assert_close(r[2]:item(), (-1.25) ^ k, 1e-12, "dy/dx, n = " .. k)
    assert_close(r[3]:item(), k == 0 and 0 or k * 1.5 * (-1.25) ^ (k - 1), 1e-12, "dy/dw, n = " .. k)
  end
end

-- x is both the initial value and read by the body: v = x, then v = v * x three times:
-- y = x^4, dy/dx = 4 x^3 (the two contributions summed).
function TestWhileGradient:test_initial_value_also_read_inside()
  local g = npu.Graph()
  local x = g:placeholder(F64, {}, "x")
  local out = npu.while_loop(function(i) return npu.less(i, 3) end,
    function(i, v) return i + 1, v * x end, { 0, x })
  local d = npu.gradients(out[2], { x })[1]
  local sess <close> = npu.Session { graph = g }
  assert_close(sess:run(d, { [x] = t64(1.5) }):item(), 4 * 1.5 ^ 3, 1e-12, "d x^4 / dx")
end

-- A nonlinear body on vectors (v = tanh(v * w + b), u = u + v * v) with a bound on the
-- iterations and a cond inside the body, against central differences in x, w and b.
function TestWhileGradient:test_nonlinear_body_against_central_differences()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 3 }, "x")
  local w = g:placeholder(F64, { 3 }, "w")
  local bias = g:placeholder(F64, {}, "b")
  local out = npu.while_loop(function(i, v, u) return npu.less(i, 10) end,
    function(i, v, u)
      local nv = npu.tanh(v * w + bias)
      local nu = npu.cond(npu.greater(npu.reduce_sum(nv), 0),
        function() return u + nv * nv end, function() return u - nv * 0.5 end)
      return i + 1, nv, nu
    end, { 0, x, npu.zeros_like(x) }, { maximum_iterations = 4 })
  local L = npu.reduce_sum(out[2] * g:const(t64({ 1, -2, 0.5 }))) + npu.reduce_sum(out[3])
  local gr = npu.gradients(L, { x, w, bias })
  local sess <close> = npu.Session { graph = g }
  local feeds = { [x] = t64({ 0.4, -0.3, 0.9 }), [w] = t64({ 1.1, -0.6, 0.8 }), [bias] = t64(0.05) }
  lu.assertEquals(sess:run(out[1], feeds):item(), 4) -- maximum_iterations stopped it
  check_numeric(sess, L, gr[1], x, feeds, "d/dx")
  check_numeric(sess, L, gr[2], w, feeds, "d/dw")
  check_numeric(sess, L, gr[3], bias, feeds, "d/db")
end

-- A while loop inside a cond branch and loops in loops.
function TestWhileGradient:test_nested_loops_against_central_differences()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 2 }, "x")
  local p = g:placeholder("bool", {}, "p")
  local y = npu.cond(p, function()
    local out = npu.while_loop(function(i) return npu.less(i, 3) end, function(i, v)
      local inner = npu.while_loop(function(j) return npu.less(j, 2) end,
        function(j, s) return j + 1, npu.sigmoid(s * x) end, { 0, v })
      return i + 1, inner[2] + v * 0.5
    end, { 0, x })
    return out[2]
  end, function() return x * x end)
  local L = npu.reduce_sum(y * g:const(t64({ 2, -1 })))
  local d = npu.gradients(L, { x })[1]
  local sess <close> = npu.Session { graph = g }
  check_numeric(sess, L, d, x, { [x] = t64({ 0.7, -0.4 }), [p] = b(true) }, "loops in a cond")
  check_numeric(sess, L, d, x, { [x] = t64({ 0.7, -0.4 }), [p] = b(false) }, "the other branch")
end

TestControlTraining = {}

-- minimize through a cond: loss = (w - 3)^2 when p, else (w + 1)^2.
function TestControlTraining:test_minimize_through_a_cond()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local w = g:variable(npu.tensor(0.0, F64), "w")
  local p = g:placeholder("bool", {}, "p")
  local loss = npu.cond(p, function() return npu.square(w - 3) end, function() return npu.square(w + 1) end)
  local op = npu.train.GradientDescentOptimizer(0.25):minimize(loss)
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  sess:run(op, { [p] = b(true) }) -- w = 0 - 0.25 * 2 * (0 - 3) = 1.5
  assert_close(sess:run(w):item(), 1.5, 1e-12, "one step towards 3")
  for _ = 1, 20 do sess:run(op, { [p] = b(true) }) end
  assert_close(sess:run(w):item(), 3, 1e-6, "converged to 3")
  sess:run(op, { [p] = b(false) }) -- w = 3 - 0.25 * 2 * (3 + 1) = 1
  assert_close(sess:run(w):item(), 1, 1e-5, "the else branch's gradient")
end

-- A training step whose loss goes through a cond and a while loop, run 4 times per
-- sess:run by iterations_per_loop, ends where 4 separate runs end.
local function loop_training_graph()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local xs = npu.range(0, 8, 1, "float32")
  local ds = npu.data.Dataset.from_tensor_slices(xs):batch(2, { drop_remainder = true }):repeat_()
  local batch = ds:make_one_shot_iterator(g):get_next()
  local w = g:variable(npu.tensor({ 0.5, -0.25 }, "float32"), "w")
  local h = npu.while_loop(function(i) return npu.less(i, 2) end,
    function(i, v) return i + 1, npu.tanh(v * w) end, { 0, batch * 0.1 + 0.2 })
  local loss = npu.cond(npu.greater(npu.reduce_sum(batch), 4),
    function() return npu.reduce_sum(npu.square(h[2] - 1)) end,
    function() return npu.reduce_sum(npu.square(h[2] + w)) end)
  local step = npu.train.GradientDescentOptimizer(0.5):minimize(loss)
  return g, step, w
end

function TestControlTraining:test_iterations_per_loop_step_through_cond_and_while()
  local g1, step1, w1 = loop_training_graph()
  local s1 <close> = npu.Session { graph = g1 }
  s1:run(g1:global_variables_initializer())
  for _ = 1, 4 do s1:run(step1) end
  local g2, step2, w2 = loop_training_graph()
  local s2 <close> = npu.Session { graph = g2, options = { iterations_per_loop = 4 } }
  s2:run(g2:global_variables_initializer())
  s2:run(npu.util.set_iteration_per_loop(s2, step2, 4))
  local want, got = values(s1:run(w1)), values(s2:run(w2))
  lu.assertNotEquals(want[1], 0.5) -- it trained
  assert_close(got, want, 1e-6, "w after 4 steps in one run")
end

TestControlGradientErrors = {}

local function expect_refused(g, fn, parts)
  local before = g:n_nodes()
  local ok, err = pcall(fn)
  lu.assertFalse(ok)
  for _, s in ipairs(parts) do lu.assertStrContains(tostring(err), s) end
  lu.assertEquals(g:n_nodes(), before, "the graph is left as it was")
end

function TestControlGradientErrors:test_op_without_gradient_in_a_branch_is_named()
  local g = npu.Graph()
  local x = g:placeholder(F64, {}, "x")
  local p = g:placeholder("bool", {}, "p")
  local y = npu.cond(p, function() return x * 2 end, function() return npu.floor(x) end, "pick")
  expect_refused(g, function() return npu.gradients(y, { x }) end,
    { "NPU_ERR_UNSUPPORTED", "gradient of cond 'pick'", "no gradient is defined for op floor", "Floor" })
end

function TestControlGradientErrors:test_op_without_gradient_in_a_loop_body_is_named()
  local g = npu.Graph()
  local x = g:placeholder(F64, {}, "x")
  local out = npu.while_loop(function(i) return npu.less(i, 2) end,
    function(i, v) return i + 1, npu.floor(v) * 2 end, { 0, x }, { name = "loop" })
  expect_refused(g, function() return npu.gradients(out[2], { x }) end,
    { "NPU_ERR_UNSUPPORTED", "no gradient is defined for op floor", "loop_grad" })
end

-- map_fn is differentiable now (spec/tensor_array_grad_spec.lua); an op without a gradient in
-- its fn is still named.
function TestControlGradientErrors:test_op_without_gradient_in_map_fn_is_named()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 3 }, "x")
  local y = npu.reduce_sum(npu.map_fn(function(e) return npu.floor(e) * e end, x, { name = "squares" }))
  expect_refused(g, function() return npu.gradients(y, { x }) end,
    { "NPU_ERR_UNSUPPORTED", "no gradient is defined for op floor", "squares_grad" })
end

function TestControlGradientErrors:test_random_op_in_a_branch_is_refused()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 2 }, "x")
  local p = g:placeholder("bool", {}, "p")
  local y = npu.reduce_sum(npu.cond(p, function()
    return x * npu.random_uniform({ shape = { 2 }, seed = 1, dtype = F64 })
  end, function() return x end, "noisy"))
  expect_refused(g, function() return npu.gradients(y, { x }) end,
    { "NPU_ERR_UNSUPPORTED", "gradient of cond 'noisy'", "random_uniform", "would draw new numbers" })
end
