-- spec/grad_spec.lua — gradients (npu.gradients over npu_graph_gradients): every
-- differentiable op's gradient against central differences, broadcasting, integer inputs,
-- several consumers, grad_ys, values that do not affect the ys, and the errors (the graph is
-- left unchanged).
--
-- The check: for y = f(inputs), L = sum(y * R) with R a fixed random tensor, so the whole
-- Jacobian is exercised; the analytic dL/dx from the graph against (L(x + h e_i) -
-- L(x - h e_i)) / 2h for every element i.
-- Tolerances: float64 ops use h = 1e-6 and |analytic - numeric| <= 1e-6 * (1 + |numeric|);
-- float32-only ops (conv2d, depthwise_conv2d, max_pool, avg_pool and their cases) use
-- h = 1e-2 on inputs that are multiples of 1/32, where those ops are piecewise linear, and
-- |analytic - numeric| <= 2e-3 * (1 + |numeric|).
-- Inputs of non-smooth ops (relu, maximum, max_pool, ...) keep every kink farther than h away.
local lu = require("luaunit")
local npu = require("npu")
if not npu.gradients then -- until init.lua wires the training modules in
  npu.train = require("npu.train")
  npu.gradients = npu.train.gradients
  require("npu.nn_extra").install(npu)
end

local S = dofile(SPEC_DIR .. "/support.lua")
local lcg, numel, flatten = S.lcg, S.numel, S.flatten

-- "any": distinct values in about [-2, 2], none at 0, none closer than 1/96 to a value of
-- another input (input index `which` shifts them by (which - 1) / 48); "pos": in [0.5, 2.5];
-- "grid": multiples of 1/8 in [-2, 2]; "int": integers in [-3, 3].
local function data(seed, shape, kind, which)
  local r = lcg(seed)
  local n = numel(shape)
  local out = {}
  if kind == "pos" then
    for i = 1, n do out[i] = 0.5 + (r() % 64) / 32 end
  elseif kind == "int" then
    for i = 1, n do out[i] = r() % 7 - 3 end
  elseif kind == "grid" then
    for i = 1, n do out[i] = ((r() % 33) - 16) / 8 end
  else
    -- a random permutation of distinct values, kept away from 0
    local vals = {}
    for i = 1, n do vals[i] = (i - (n + 1) / 2) / 32 * (64 / math.max(n, 32)) end
    for i = n, 2, -1 do
      local j = r() % i + 1
      vals[i], vals[j] = vals[j], vals[i]
    end
    for i = 1, n do
      local v = vals[i]
      out[i] = (v >= 0 and v + 1 / 64 or v - 1 / 64) + ((which or 1) - 1) / 48
    end
  end
  return out
end

local function to_tensor(flat, shape, dtype)
  local t = npu.tensor(#shape == 0 and flat[1] or flat, dtype)
  if #shape ~= 1 then t = t:reshape(shape) end
  return t
end

-- Builds the graph, returns the max error ratio seen (asserting the tolerance).
local function check(c)
  local dtype = c.dtype or "float64"
  local h = c.h or (dtype == "float64" and 1e-6 or 1e-2)
  local tol = c.tol or (dtype == "float64" and 1e-6 or 2e-3)
  local g = npu.Graph()
  local ph, vals, feeds = {}, {}, {}
  for i, spec in ipairs(c.inputs) do
    local shape, kind, idt = spec[1], spec[2], spec[3] or dtype
    ph[i] = g:placeholder(idt, shape, "in" .. i)
    vals[i] = data(1000 * i + #c.name, shape, idt:match("^int") and "int" or kind, i)
    feeds[ph[i]] = to_tensor(vals[i], shape, idt)
  end
  local y = c.f(table.unpack(ph))
  local yshape = y:shape()
  lu.assertNotNil(yshape, c.name .. ": output shape")
  local R = g:const(to_tensor(data(7, yshape, "grid"), yshape, y:dtype()))
  local L = npu.reduce_sum(y * R)
  local xs = {}
  for i = 1, #ph do xs[i] = ph[i] end
  local grads = npu.gradients(L, xs)
  local sess <close> = npu.Session { graph = g }
  for i, spec in ipairs(c.inputs) do
    local shape, idt = spec[1], spec[3] or dtype
    if idt:match("^int") then
      lu.assertNil(grads[i], c.name .. ": integer input " .. i .. " has no gradient")
    else
      lu.assertNotNil(grads[i], c.name .. ": input " .. i .. " has a gradient")
      local got = sess:run(grads[i], feeds)
      lu.assertEquals(got:shape(), shape, c.name .. ": gradient " .. i .. " shape")
      local analytic = flatten(got:totable())
      local base = vals[i]
      local numeric = S.central_differences(sess, L, feeds, ph[i], base,
        function(p) return to_tensor(p, shape, idt) end, h)
      for k = 1, #base do
        local err = math.abs(analytic[k] - numeric[k])
        if err > tol * (1 + math.abs(numeric[k])) then
          lu.fail(("%s: d/d input %d [%d]: analytic %.9g, numeric %.9g"):format(c.name, i, k,
            analytic[k], numeric[k]))
        end
      end
    end
  end
end

local function attrs(t) return t end

-- Every differentiable op, with broadcasting and attribute variants.
local cases = {
  { name = "add", inputs = { { { 2, 3 } }, { { 2, 3 } } }, f = function(a, b) return a + b end },
  { name = "add_broadcast_213_41", inputs = { { { 2, 1, 3 } }, { { 4, 1 } } }, f = function(a, b) return a + b end },
  { name = "add_scalar", inputs = { { { 2, 3 } }, { {} } }, f = function(a, b) return a + b end },
  { name = "sub_broadcast", inputs = { { { 4, 1 } }, { { 2, 1, 3 } } }, f = function(a, b) return a - b end },
  { name = "mul_broadcast", inputs = { { { 2, 1, 3 } }, { { 4, 1 } } }, f = function(a, b) return a * b end },
  { name = "mul_scalar", inputs = { { {} }, { { 3, 2 } } }, f = function(a, b) return a * b end },
  { name = "div_broadcast", inputs = { { { 2, 1, 3 } }, { { 4, 1 }, "pos" } }, f = function(a, b) return a / b end },
  { name = "div_scalar", inputs = { { { 3 } }, { {}, "pos" } }, f = function(a, b) return a / b end },
  { name = "maximum", inputs = { { { 2, 3 } }, { { 2, 3 } } }, f = function(a, b) return npu.maximum(a, b) end },
  { name = "maximum_broadcast", inputs = { { { 2, 1, 3 } }, { { 4, 1 } } }, f = function(a, b) return npu.maximum(a, b) end },
  { name = "minimum", inputs = { { { 2, 3 } }, { { 2, 3 } } }, f = function(a, b) return npu.minimum(a, b) end },
  { name = "minimum_scalar", inputs = { { { 2, 3 } }, { {} } }, f = function(a, b) return npu.minimum(a, b) end },
  { name = "neg", inputs = { { { 2, 3 } } }, f = function(a) return npu.neg(a) end },
  { name = "relu", inputs = { { { 3, 4 } } }, f = function(a) return npu.relu(a) end },
  { name = "relu6", inputs = { { { 3, 4 } } }, f = function(a) return npu.relu6(a * 4) end },
  { name = "sigmoid", inputs = { { { 2, 3 } } }, f = function(a) return npu.sigmoid(a) end },
  { name = "tanh", inputs = { { { 2, 3 } } }, f = function(a) return npu.tanh(a) end },
  { name = "gelu", inputs = { { { 2, 3 } } }, f = function(a) return npu.gelu(a) end },
  { name = "gelu_tanh", inputs = { { { 2, 3 } } }, f = function(a) return npu.gelu(a, true) end },
  { name = "exp", inputs = { { { 2, 3 } } }, f = function(a) return npu.exp(a) end },
  { name = "log", inputs = { { { 2, 3 }, "pos" } }, f = function(a) return npu.log(a) end },
  { name = "sqrt", inputs = { { { 2, 3 }, "pos" } }, f = function(a) return npu.sqrt(a) end },
  { name = "square", inputs = { { { 2, 3 } } }, f = function(a) return npu.square(a) end },
  { name = "matmul", inputs = { { { 2, 3 } }, { { 3, 4 } } }, f = function(a, b) return npu.matmul(a, b) end },
  { name = "matmul_ta", inputs = { { { 3, 2 } }, { { 3, 4 } } }, f = function(a, b) return npu.matmul(a, b, { transpose_a = true }) end },
  { name = "matmul_tb", inputs = { { { 2, 3 } }, { { 4, 3 } } }, f = function(a, b) return npu.matmul(a, b, { transpose_b = true }) end },
  { name = "matmul_ta_tb", inputs = { { { 3, 2 } }, { { 4, 3 } } }, f = function(a, b) return npu.matmul(a, b, { transpose_a = true, transpose_b = true }) end },
  { name = "bias_add", inputs = { { { 2, 3, 4 } }, { { 4 } } }, f = function(a, b) return npu.nn.bias_add(a, b) end },
  { name = "softmax", inputs = { { { 3, 4 } } }, f = function(a) return npu.nn.softmax(a) end },
  { name = "log_softmax", inputs = { { { 3, 4 } } }, f = function(a) return npu.nn.log_softmax(a) end },
  { name = "reshape", inputs = { { { 2, 6 } } }, f = function(a) return npu.reshape(a, { 3, 2, 2 }) end },
  { name = "transpose", inputs = { { { 2, 3, 4 } } }, f = function(a) return npu.transpose(a, { 2, 0, 1 }) end },
  { name = "transpose_default", inputs = { { { 2, 3 } } }, f = function(a) return npu.transpose(a) end },
  { name = "concat", inputs = { { { 2, 3 } }, { { 2, 1 } }, { { 2, 2 } } }, f = function(a, b, c) return npu.concat({ a, b, c }, 1) end },
  { name = "concat_axis0", inputs = { { { 1, 3 } }, { { 2, 3 } } }, f = function(a, b) return npu.concat({ a, b }, -2) end },
  { name = "slice", inputs = { { { 3, 4 } } }, f = function(a) return npu.slice(a, { 1, 1 }, { 2, -1 }) end },
  { name = "pad", inputs = { { { 2, 3 } } }, f = function(a) return npu.pad(a, { { 1, 0 }, { 2, 1 } }) end },
  { name = "reduce_sum_all", inputs = { { { 2, 3 } } }, f = function(a) return npu.reduce_sum(a) end },
  { name = "reduce_sum_axis", inputs = { { { 2, 3, 2 } } }, f = function(a) return npu.reduce_sum(a, { 0, 2 }) end },
  { name = "reduce_sum_keepdims", inputs = { { { 2, 3 } } }, f = function(a) return npu.reduce_sum(a, -1, true) end },
  { name = "reduce_mean_all", inputs = { { { 2, 3 } } }, f = function(a) return npu.reduce_mean(a) end },
  { name = "reduce_mean_axis", inputs = { { { 2, 3, 2 } } }, f = function(a) return npu.reduce_mean(a, 1) end },
  { name = "reduce_mean_keepdims", inputs = { { { 2, 3 } } }, f = function(a) return npu.reduce_mean(a, 0, true) end },
  { name = "reduce_max_all", inputs = { { { 2, 3 } } }, f = function(a) return npu.reduce_max(a) end },
  { name = "reduce_max_axis", inputs = { { { 2, 3, 2 } } }, f = function(a) return npu.reduce_max(a, { 1 }) end },
  { name = "reduce_max_keepdims", inputs = { { { 3, 4 } } }, f = function(a) return npu.reduce_max(a, -1, true) end },
  { name = "cast_f32_to_f64", inputs = { { { 2, 3 }, nil, "float32" } }, dtype = "float32",
    f = function(a) return npu.square(npu.cast(a, "float64")) end },
  { name = "identity", inputs = { { { 2, 3 } } }, f = function(a) return npu.identity(a) * a end },
  { name = "integer_input_no_gradient", inputs = { { { 2, 3 } }, { { 3 }, nil, "int32" } },
    f = function(a, n) return a * npu.cast(n, "float64") end },
  { name = "several_consumers", inputs = { { { 2, 3 } } },
    f = function(a) return a * a + npu.exp(a) + a + npu.reduce_sum(a, 1, true) end },
  -- float32-only window ops
  { name = "max_pool_valid", dtype = "float32", inputs = { { { 1, 4, 4, 2 } } },
    f = function(x) return npu.nn.max_pool(x, { ksize = 2, strides = 2, padding = "VALID" }) end },
  { name = "max_pool_same_overlapping", dtype = "float32", inputs = { { { 2, 5, 5, 1 } } },
    f = function(x) return npu.nn.max_pool(x, { ksize = 3, strides = 2, padding = "SAME" }) end },
  { name = "avg_pool_same", dtype = "float32", inputs = { { { 1, 4, 5, 2 } } },
    f = function(x) return npu.nn.avg_pool(x, { ksize = 3, strides = 2, padding = "SAME" }) end },
  { name = "avg_pool_valid", dtype = "float32", inputs = { { { 2, 4, 4, 1 } } },
    f = function(x) return npu.nn.avg_pool(x, { ksize = { 2, 3 }, strides = 1, padding = "VALID" }) end },
  { name = "depthwise_conv2d_same", dtype = "float32", inputs = { { { 2, 4, 4, 2 } }, { { 3, 3, 2, 2 } } },
    f = function(x, w) return npu.nn.depthwise_conv2d(x, w, { strides = 1, padding = "SAME" }) end },
  { name = "depthwise_conv2d_strided_dilated", dtype = "float32", inputs = { { { 1, 6, 5, 3 } }, { { 2, 2, 3, 1 } } },
    f = function(x, w) return npu.nn.depthwise_conv2d(x, w, { strides = 2, dilations = 1, padding = "VALID" }) end },
  { name = "conv2d_filter", dtype = "float32", inputs = { { { 3, 3, 2, 3 } } },
    f = function(w)
      local x = w:graph():const(to_tensor(data(99, { 2, 4, 5, 2 }, "any"), { 2, 4, 5, 2 }, "float32"))
      return npu.nn.conv2d(x, w, { strides = 1, padding = "SAME" })
    end },
  { name = "conv2d_filter_strided_explicit", dtype = "float32", inputs = { { { 2, 3, 2, 2 } } },
    f = function(w)
      local x = w:graph():const(to_tensor(data(98, { 1, 5, 6, 2 }, "any"), { 1, 5, 6, 2 }, "float32"))
      return npu.nn.conv2d(x, w, { strides = 2, dilations = { 1, 1 }, padding = "EXPLICIT",
        explicit_paddings = { 0, 0, 1, 0, 0, 2, 0, 0 } })
    end },
  { name = "conv2d", dtype = "float32", needs = "conv2d_backprop_input",
    inputs = { { { 2, 4, 4, 2 } }, { { 3, 3, 2, 3 } } },
    f = function(x, w) return npu.nn.conv2d(x, w, { strides = 1, padding = "SAME" }) end },
  { name = "conv2d_strided_valid", dtype = "float32", needs = "conv2d_backprop_input",
    inputs = { { { 1, 5, 5, 2 } }, { { 2, 2, 2, 2 } } },
    f = function(x, w) return npu.nn.conv2d(x, w, { strides = 2, padding = "VALID" }) end },
  -- the ops added for gradients that are differentiable themselves
  { name = "broadcast_like_axes", inputs = { { { 2, 3 } }, { { 2, 4, 3 } } },
    f = function(a, like) return npu.broadcast_like(a, like, { axes = { 1 } }) * like end },
  { name = "broadcast_like_kept_mean", inputs = { { { 2, 1, 3 } } },
    f = function(a)
      local like = a:graph():const(npu.zeros({ 2, 4, 3 }, "float64"))
      return npu.broadcast_like(a, like, { axes = { 1 }, mean = true })
    end },
  { name = "broadcast_like_plain", inputs = { { { 3 } } },
    f = function(a) return npu.broadcast_like(a, a:graph():const(npu.zeros({ 2, 3 }, "float64")), { axes = {} }) end },
  { name = "broadcast_like_all_mean", inputs = { { {} } },
    f = function(a) return npu.broadcast_like(a, a:graph():const(npu.zeros({ 2, 3 }, "float64")), { mean = true }) end },
  { name = "mlp", inputs = { { { 3, 4 } }, { { 4, 5 } }, { { 5 } }, { { 5, 2 } } },
    f = function(x, w1, b1, w2)
      return npu.nn.log_softmax(npu.matmul(npu.tanh(npu.nn.bias_add(npu.matmul(x, w1), b1)), w2))
    end },
}

TestGradients = {}
for _, c in ipairs(cases) do
  TestGradients["test_" .. c.name] = function()
    if c.needs and not npu.ops[c.needs] then return lu.skip(c.needs .. " is not in the op table yet") end
    check(c)
  end
end

-- TensorFlow's rule for reduce_max: the gradient is split evenly among tied maxima.
function TestGradients.test_reduce_max_splits_ties()
  local g = npu.Graph()
  local x = g:placeholder("float64", { 2, 3 }, "x")
  local y = npu.reduce_max(x, 1)
  local d = npu.gradients(y, x)[1]
  local sess <close> = npu.Session { graph = g }
  local got = sess:run(d, { [x] = npu.tensor({ { 1, 3, 3 }, { 5, 5, 5 } }, "float64") })
  lu.assertTrue(npu.allclose(got, npu.tensor({ { 0, 0.5, 0.5 }, { 1 / 3, 1 / 3, 1 / 3 } }, "float64")))
end

-- maximum/minimum give a tie to x, as TensorFlow's x >= y (x <= y) masks do.
function TestGradients.test_maximum_minimum_ties_go_to_x()
  local g = npu.Graph()
  local a = g:placeholder("float64", { 2 }, "a")
  local b = g:placeholder("float64", { 2 }, "b")
  local da = npu.gradients(npu.maximum(a, b), { a, b })
  local dm = npu.gradients(npu.minimum(a, b), { a, b })
  local sess <close> = npu.Session { graph = g }
  local f = { [a] = npu.tensor({ 1, 2 }, "float64"), [b] = npu.tensor({ 1, 3 }, "float64") }
  lu.assertEquals(sess:run(da[1], f):totable(), { 1, 0 })
  lu.assertEquals(sess:run(da[2], f):totable(), { 0, 1 })
  lu.assertEquals(sess:run(dm[1], f):totable(), { 1, 1 })
  lu.assertEquals(sess:run(dm[2], f):totable(), { 0, 0 })
end

function TestGradients.test_several_consumers_sum()
  local g = npu.Graph()
  local x = g:placeholder("float64", { 3 }, "x")
  local y = x * x + npu.exp(x) + x
  local d = npu.gradients(y, x)[1]
  local sess <close> = npu.Session { graph = g }
  local xv = { -1, 0.5, 2 }
  local got = sess:run(d, { [x] = npu.tensor(xv, "float64") }):totable()
  for i, v in ipairs(xv) do lu.assertAlmostEquals(got[i], 2 * v + math.exp(v) + 1, 1e-12) end
end

function TestGradients.test_grad_ys_and_lists()
  local g = npu.Graph()
  local x = g:placeholder("float64", { 2 }, "x")
  local y1, y2 = x * 3, npu.square(x)
  local gy = g:const(npu.tensor({ 10, 100 }, "float64"))
  local d = npu.gradients({ y1, y2 }, { x }, { gy, nil })[1]
  local sess <close> = npu.Session { graph = g }
  -- d = 3 * [10, 100] + 2 x
  lu.assertEquals(sess:run(d, { [x] = npu.tensor({ 1, 2 }, "float64") }):totable(), { 32, 304 })
end

function TestGradients.test_unconnected_and_integer_values_have_none()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local z = g:placeholder("float32", { 2 }, "z")
  local n = g:placeholder("int32", { 2 }, "n")
  local y = x * npu.cast(n, "float32")
  local grads = npu.gradients(y, { z, n, x })
  lu.assertEquals(grads.n, 3)
  lu.assertNil(grads[1])
  lu.assertNil(grads[2])
  lu.assertNotNil(grads[3])
  -- through an integer value (argmax) nothing flows
  lu.assertNil(npu.gradients(npu.cast(npu.argmax(x), "float32"), x)[1])
  -- the gradient of x itself is ones
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(npu.gradients(x, x)[1], { [x] = { 5, 6 } }):totable(), { 1, 1 })
end

function TestGradients.test_stop_gradient()
  if not npu.ops.stop_gradient then return lu.skip("stop_gradient is not in the op table yet") end
  local g = npu.Graph()
  local x = g:placeholder("float64", { 2 }, "x")
  local y = x * npu.stop_gradient(x)
  local d = npu.gradients(y, x)[1]
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(d, { [x] = npu.tensor({ 2, 3 }, "float64") }):totable(), { 2, 3 })
end

function TestGradients.test_gradient_node_names_follow_tensorflow()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 2 }, "x")
  local w = g:variable(npu.ones({ 2, 2 }), "w")
  local y = npu.matmul(x, w, { name = "mm" })
  local d = npu.gradients(npu.reduce_sum(y), w)[1]
  lu.assertStrContains(d:name(), "gradients/mm_grad/MatMul")
end

function TestGradients.test_no_gradient_is_an_error_and_changes_nothing()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 2 }, "x")
  local y = npu.reduce_sum(npu.exp(npu.pad(x, { { 1, 1 }, { 1, 1 } }, { mode = "REFLECT" })))
  local before = g:n_nodes()
  local ok, err = pcall(npu.gradients, y, x)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_UNSUPPORTED")
  lu.assertStrContains(tostring(err), "REFLECT")
  lu.assertEquals(g:n_nodes(), before)
  -- the graph still works, and can take gradients elsewhere
  local d = npu.gradients(npu.reduce_sum(npu.exp(x)), x)[1]
  lu.assertNotNil(d)
end

function TestGradients.test_argument_errors()
  local g1, g2 = npu.Graph(), npu.Graph()
  local a = g1:placeholder("float32", { 2 }, "a")
  local b = g2:placeholder("float32", { 2 }, "b")
  lu.assertErrorMsgContains("another graph", npu.gradients, a, b)
  lu.assertErrorMsgContains("ys is empty", npu.gradients, {}, a)
  lu.assertErrorMsgContains("expected an npu.Output", npu.gradients, a, { 3 })
  local wrong = g1:const(npu.tensor({ 1, 2, 3 }))
  local ok, err = pcall(npu.gradients, a, a, wrong)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_SHAPE")
  ok, err = pcall(npu.gradients, a, a, g1:const(npu.tensor({ 1, 2 }, "float64")))
  lu.assertEquals(npu.error_code(err), "NPU_ERR_DTYPE")
end

-- Unknown dims: the batch dimension -1 everywhere, gradients shaped at compile time.
function TestGradients.test_unknown_batch_dimension()
  local g = npu.Graph()
  local x = g:placeholder("float64", { -1, 3 }, "x")
  local b = g:placeholder("float64", { 3 }, "b")
  local loss = npu.reduce_mean(npu.square(npu.relu(x + b)))
  local d = npu.gradients(loss, { x, b })
  local sess <close> = npu.Session { graph = g }
  local f = { [x] = npu.tensor({ { 1, -1, 2 }, { 0.5, 1, -3 } }, "float64"),
    [b] = npu.tensor({ 0, 0, 0 }, "float64") }
  lu.assertEquals(sess:run(d[1], f):shape(), { 2, 3 })
  -- dloss/db = mean over the 6 elements of 2 relu(x) = [2*1.5/6, 2*1/6, 2*2/6]
  local db = sess:run(d[2], f):totable()
  lu.assertAlmostEquals(db[1], 0.5, 1e-12)
  lu.assertAlmostEquals(db[2], 1 / 3, 1e-12)
  lu.assertAlmostEquals(db[3], 2 / 3, 1e-12)
end

-- The gradient ops' own forward values (they are ops of the table like any other).
function TestGradients.test_gradient_ops_forward()
  local g = npu.Graph()
  local dy = g:const(npu.tensor({ 1, 2, 3, 4 }, "float64"))
  local x = g:const(npu.tensor({ -1, 0.5, 5, 7 }, "float64"))
  local y = g:const(npu.tensor({ 0.5, 0.25, 0.1, 0.9 }, "float64"))
  local sess <close> = npu.Session { graph = g }
  local function v(o) return sess:run(o):totable() end
  lu.assertEquals(v(npu.relu_grad(dy, x)), { 0, 2, 3, 4 })
  lu.assertEquals(v(npu.relu6_grad(dy, x)), { 0, 2, 3, 0 })
  local s = v(npu.sigmoid_grad(y, dy))
  lu.assertAlmostEquals(s[1], 0.25, 1e-15)
  local t = v(npu.tanh_grad(y, dy))
  lu.assertAlmostEquals(t[2], 2 * (1 - 0.0625), 1e-15)
  lu.assertAlmostEquals(v(npu.sqrt_grad(y, dy))[1], 1, 1e-15)
  lu.assertEquals(v(npu.bias_add_grad(npu.reshape(dy, { 2, 2 }))), { 4, 6 })
  lu.assertEquals(v(npu.broadcast_like(g:const(npu.tensor({ 1, 2 }, "float64")),
    npu.reshape(x, { 2, 2 }), { axes = { 1 } })), { { 1, 1 }, { 2, 2 } })
  lu.assertEquals(v(npu.broadcast_like(g:const(npu.tensor({ 4, 6 }, "float64")),
    npu.reshape(x, { 2, 2 }), { axes = { 0 }, mean = true })), { { 2, 3 }, { 2, 3 } })
  local ok, err = pcall(npu.relu_grad, dy, npu.reshape(x, { 2, 2 }))
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "same shape")
  ok, err = pcall(npu.broadcast_like, g:const(npu.tensor({ 1, 2, 3 }, "float64")), x)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "cannot be broadcast")
end
