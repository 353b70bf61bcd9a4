-- spec/nn_train_spec.lua — the training library around the optimizers: losses (values by
-- hand, gradients, no overflow), one_hot, random_uniform (seeded per session step),
-- dropout, initializers, the dense / conv2d / batch_normalization layers, is_finite and
-- reduce_all.
local lu = require("luaunit")
local npu = require("npu")
if not npu.layers then -- until init.lua wires the training modules in
  npu.train = require("npu.train")
  npu.gradients = npu.train.gradients
  require("npu.nn_extra").install(npu)
end

local function close(a, b, tol, what)
  if math.abs(a - b) > tol then lu.fail(("%s: got %.12g, want %.12g"):format(what or "value", a, b)) end
end

local function flat(t, out)
  out = out or {}
  if type(t) ~= "table" then out[#out + 1] = t return out end
  for _, v in ipairs(t) do flat(v, out) end
  return out
end

TestLosses = {}

function TestLosses.test_softmax_cross_entropy_value_and_gradient()
  local g = npu.Graph()
  local logits = g:placeholder("float64", { 2, 3 }, "logits")
  local labels = g:const(npu.tensor({ { 0, 0, 1 }, { 0.25, 0.75, 0 } }, "float64"))
  local ce = npu.nn.softmax_cross_entropy_with_logits { labels = labels, logits = logits }
  lu.assertEquals(ce:shape(), { 2 })
  local d = npu.gradients(npu.reduce_sum(ce), logits)[1]
  local sess <close> = npu.Session { graph = g }
  local L = { { 1, 2, 3 }, { -1, 0.5, 2 } }
  local feed = { [logits] = npu.tensor(L, "float64") }
  local got, grad = sess:run(ce, feed):totable(), sess:run(d, feed):totable()
  local lab = { { 0, 0, 1 }, { 0.25, 0.75, 0 } }
  for r = 1, 2 do
    local s = 0
    for c = 1, 3 do s = s + math.exp(L[r][c]) end
    local want = 0
    for c = 1, 3 do want = want - lab[r][c] * (L[r][c] - math.log(s)) end
    close(got[r], want, 1e-12, "row " .. r)
    for c = 1, 3 do close(grad[r][c], math.exp(L[r][c]) / s - lab[r][c], 1e-12, "grad") end
  end
  -- positional arguments are TensorFlow's order (labels, logits)
  local ce2 = npu.nn.softmax_cross_entropy_with_logits(labels, logits)
  lu.assertTrue(npu.allclose(sess:run(ce2, feed), sess:run(ce, feed)))
end

function TestLosses.test_sparse_softmax_cross_entropy_matches_dense()
  local g = npu.Graph()
  local logits = g:placeholder("float32", { -1, 4 }, "logits")
  local labels = g:placeholder("int32", { -1 }, "labels")
  local sparse = npu.nn.sparse_softmax_cross_entropy_with_logits { labels = labels, logits = logits }
  local dense = npu.nn.softmax_cross_entropy_with_logits { labels = npu.one_hot(labels, 4), logits = logits }
  local grads = npu.gradients(npu.reduce_mean(sparse), { logits, labels })
  lu.assertNil(grads[2], "integer labels get no gradient")
  local sess <close> = npu.Session { graph = g }
  local feed = { [logits] = { { 1, 2, 3, 4 }, { 4, 3, 2, 1 }, { 0, 0, 0, 0 } }, [labels] = { 3, 0, 2 } }
  lu.assertTrue(npu.allclose(sess:run(sparse, feed), sess:run(dense, feed)))
  close(sess:run(sparse, feed):totable()[3], math.log(4), 1e-6, "uniform logits")
  local gl = sess:run(grads[1], feed):totable()
  close(gl[3][3], (0.25 - 1) / 3, 1e-6, "d/dlogits of the mean")
  -- tf.losses.sparse_softmax_cross_entropy is the mean
  close(sess:run(npu.losses.sparse_softmax_cross_entropy(labels, logits), feed):item(),
    (sess:run(sparse, feed):totable()[1] + sess:run(sparse, feed):totable()[2] + math.log(4)) / 3, 1e-6, "mean")
end

function TestLosses.test_sigmoid_cross_entropy_no_overflow()
  local g = npu.Graph()
  local x = g:placeholder("float64", { 4 }, "x")
  local z = g:const(npu.tensor({ 0, 1, 1, 0 }, "float64"))
  local l = npu.nn.sigmoid_cross_entropy_with_logits { labels = z, logits = x }
  local d = npu.gradients(npu.reduce_sum(l), x)[1]
  local sess <close> = npu.Session { graph = g }
  local xv = { -2, 0.5, 3, 800 }
  local feed = { [x] = npu.tensor(xv, "float64") }
  local got, grad = sess:run(l, feed):totable(), sess:run(d, feed):totable()
  local zv = { 0, 1, 1, 0 }
  for i = 1, 3 do
    local p = 1 / (1 + math.exp(-xv[i]))
    close(got[i], -(zv[i] * math.log(p) + (1 - zv[i]) * math.log(1 - p)), 1e-12, "loss " .. i)
    close(grad[i], p - zv[i], 1e-12, "grad " .. i)
  end
  close(got[4], 800, 1e-9, "large logit: finite") -- log(1 + e^800) without overflow
  close(grad[4], 1, 1e-12, "large logit gradient")
end

function TestLosses.test_l2_loss_and_mean_squared_error()
  local g = npu.Graph()
  local t = g:const(npu.tensor({ 1, 2, 3 }))
  local p = g:const(npu.tensor({ { 1 }, { 3 }, { 0 } }))
  local y = g:const(npu.tensor({ { 2 }, { 1 }, { 0 } }))
  local sess <close> = npu.Session { graph = g }
  close(sess:run(npu.nn.l2_loss(t)):item(), 7, 1e-6, "l2_loss")
  close(sess:run(npu.losses.mean_squared_error(y, p)):item(), 5 / 3, 1e-6, "mse")
  close(sess:run(npu.losses.mean_squared_error { labels = y, predictions = p }):item(), 5 / 3, 1e-6, "named")
  close(sess:run(npu.losses.mean_squared_error(y, p, { weights = 2 })):item(), 10 / 3, 1e-6, "weight 2")
  -- weights with a zero: sum(w * d^2) / (number of nonzero weights)
  local w = g:const(npu.tensor({ { 1 }, { 3 }, { 0 } }))
  close(sess:run(npu.losses.mean_squared_error(y, p, { weights = w })):item(), (1 + 12) / 2, 1e-6, "weights")
end

TestTrainOps = {}

function TestTrainOps.test_one_hot()
  local g = npu.Graph()
  local i = g:placeholder("int64", { 2, 2 }, "i")
  local sess <close> = npu.Session { graph = g }
  local f = { [i] = npu.tensor({ { 0, 2 }, { -1, 5 } }, "int64") }
  lu.assertEquals(sess:run(npu.one_hot(i, 3), f):totable(),
    { { { 1, 0, 0 }, { 0, 0, 1 } }, { { 0, 0, 0 }, { 0, 0, 0 } } })
  local y = npu.one_hot(i, 3, { axis = 0, on_value = 5, off_value = -1, dtype = "int32" })
  lu.assertEquals(y:shape(), { 3, 2, 2 })
  lu.assertEquals(y:dtype(), "int32")
  lu.assertEquals(sess:run(y, f):totable()[3], { { -1, 5 }, { -1, -1 } })
  lu.assertErrorMsgContains("depth", npu.one_hot, i)
  lu.assertErrorMsgContains("axis", npu.one_hot, i, 3, { axis = 4 })
  lu.assertErrorMsgContains("NPU_ERR_DTYPE", npu.one_hot, g:const(npu.tensor({ 1.5 })), 3)
end

function TestTrainOps.test_is_finite_and_reduce_all()
  local g = npu.Graph()
  local x = g:const(npu.tensor({ { 1, math.huge }, { 0 / 0, -3 } }, "float64"))
  local f = npu.is_finite(x)
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(f):totable(), { { true, false }, { false, true } })
  lu.assertEquals(sess:run(npu.reduce_all(f)):totable(), false)
  lu.assertEquals(sess:run(npu.reduce_all(f, 1)):totable(), { false, false })
  local fin = npu.reduce_all(npu.is_finite(g:const(npu.tensor({ 1, 2 }))))
  lu.assertEquals(sess:run(fin):totable(), true)
  lu.assertEquals(npu.reduce_all(f, 0, true):shape(), { 1, 2 })
  lu.assertErrorMsgContains("NPU_ERR_DTYPE", npu.reduce_all, x)
end

function TestTrainOps.test_random_uniform_per_session_step()
  local g = npu.Graph()
  local u = npu.random_uniform({ shape = { 2, 3 }, seed = 42, dtype = "float32", name = "u" })
  lu.assertEquals(u:op():name(), "u")
  g = u:graph()
  local s1 = npu.Session { graph = g }
  local a, b = s1:run(u), s1:run(u)
  -- the first draw of a session is npu.random.uniform with the same seed
  lu.assertEquals(a:totable(), npu.random.uniform({ 2, 3 }, { seed = 42 }):totable())
  lu.assertFalse(npu.allclose(a, b))
  -- a new session replays the sequence, constant folding or not
  local s2 = npu.Session { graph = g, options = { oo_constant_folding = true } }
  lu.assertEquals(s2:run(u):totable(), a:totable())
  lu.assertEquals(s2:run(u):totable(), b:totable())
  -- scaled and shaped from a tensor
  local x = g:placeholder("float64", { -1, 2 }, "x")
  local v = npu.random_uniform(npu.shape(x), { minval = 5, maxval = 6, dtype = "float64", seed = 1 })
  local got = flat(s2:run(v, { [x] = npu.zeros({ 3, 2 }, "float64") }):totable())
  lu.assertEquals(#got, 6)
  for _, e in ipairs(got) do lu.assertTrue(e >= 5 and e < 6) end
  lu.assertErrorMsgContains("either", npu.random_uniform, { seed = 1 })
  lu.assertErrorMsgContains("NPU_ERR_DTYPE", npu.random_uniform, { shape = { 2 }, dtype = "int32" })
  lu.assertErrorMsgContains("minval", npu.random_uniform, { shape = { 2 }, minval = 2, maxval = 1 })
end

function TestTrainOps.test_dropout()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 100 }, "x")
  local d = npu.nn.dropout(x, { keep_prob = 0.5, seed = 7 })
  lu.assertIs(npu.nn.dropout(x, { keep_prob = 0.5, training = false }), x)
  lu.assertIs(npu.layers.dropout(x, { rate = 0.5 }), x) -- tf.layers.dropout: training defaults to false
  local grad = npu.gradients(npu.reduce_sum(d), x)[1]
  local sess = npu.Session { graph = g }
  local feed = { [x] = npu.ones({ 10, 100 }) }
  local out = flat(sess:run(d, feed):totable())
  local kept = 0
  for _, v in ipairs(out) do
    lu.assertTrue(v == 0 or v == 2, "kept values are scaled by 1 / keep_prob")
    if v == 2 then kept = kept + 1 end
  end
  lu.assertTrue(kept > 400 and kept < 600, "about half kept: " .. kept)
  -- the gradient is the mask / keep_prob of the same run (x = 1: equal to the output)
  local both = sess:run({ d, grad }, feed)
  lu.assertEquals(both[1]:totable(), both[2]:totable())
  -- the next run draws another mask
  lu.assertNotEquals(flat(sess:run(d, feed):totable()), flat(both[1]:totable()))
  -- a new session gives the same sequence of masks
  local sess2 = npu.Session { graph = g }
  lu.assertEquals(flat(sess2:run(d, feed):totable()), out)
  lu.assertErrorMsgContains("keep_prob", npu.nn.dropout, x, { keep_prob = 0 })
end

TestInitializers = {}

function TestInitializers.test_glorot_uniform_he_normal_zeros()
  local gu = npu.initializers.glorot_uniform { seed = 3 }({ 20, 30 })
  lu.assertEquals(gu:shape(), { 20, 30 })
  local limit = math.sqrt(6 / 50)
  local vals = flat(gu:totable())
  local mx = 0
  for _, v in ipairs(vals) do mx = math.max(mx, math.abs(v)) end
  lu.assertTrue(mx <= limit and mx > 0.9 * limit)
  lu.assertEquals(npu.initializers.glorot_uniform { seed = 3 }({ 20, 30 }):totable(), gu:totable())
  lu.assertNotEquals(npu.initializers.glorot_uniform { seed = 4 }({ 20, 30 }):totable(), gu:totable())
  -- conv kernel fans: receptive field * channels
  local k = flat(npu.initializers.glorot_uniform { seed = 1 }({ 3, 3, 4, 8 }):totable())
  local klimit = math.sqrt(6 / (36 + 72))
  for _, v in ipairs(k) do lu.assertTrue(math.abs(v) <= klimit) end

  local he = npu.initializers.he_normal { seed = 5 }({ 200, 50 }, "float64")
  lu.assertEquals(he:dtype(), "float64")
  local hv = flat(he:totable())
  local stddev = math.sqrt(2 / 200) / 0.87962566103423978
  local sum, sq = 0, 0
  for _, v in ipairs(hv) do
    lu.assertTrue(math.abs(v) <= 2 * stddev, "truncated at 2 stddev")
    sum, sq = sum + v, sq + v * v
  end
  local n = #hv
  local sd = math.sqrt(sq / n - (sum / n) ^ 2)
  close(sd, math.sqrt(2 / 200), 0.05 * math.sqrt(2 / 200), "he_normal's stddev is sqrt(2 / fan_in)")
  lu.assertEquals(npu.initializers.he_normal { seed = 5 }({ 200, 50 }, "float64"):totable(), he:totable())
  lu.assertEquals(npu.initializers.zeros()({ 2 }):totable(), { 0, 0 })
end

TestLayers = {}

function TestLayers.test_dense()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 3 }, "x")
  local y = npu.layers.dense(x, 4, { activation = "relu", kernel_initializer = npu.initializers.zeros() })
  local z = npu.layers.dense(y, 2, { use_bias = false, name = "out" })
  local again = npu.layers.dense(x, 5)
  lu.assertEquals(y:shape(), { -1, 4 })
  lu.assertEquals(z:shape(), { -1, 2 })
  lu.assertEquals(g:get_tensor_by_name("dense/kernel:0"):shape(), { 3, 4 })
  lu.assertEquals(g:get_tensor_by_name("dense/bias:0"):shape(), { 4 })
  lu.assertEquals(g:get_tensor_by_name("out/kernel:0"):shape(), { 4, 2 })
  lu.assertErrorMsgContains("no node", g.get_tensor_by_name, g, "out/bias:0")
  lu.assertEquals(g:get_tensor_by_name("dense_1/kernel:0"):shape(), { 3, 5 })
  lu.assertEquals(again:shape(), { -1, 5 })
  lu.assertEquals(#npu.train.trainable_variables(g), 5)
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  lu.assertEquals(sess:run(y, { [x] = { { 1, 2, 3 } } }):totable(), { { 0, 0, 0, 0 } })
  -- rank 3 inputs: applied to the last axis
  local x3 = g:placeholder("float32", { 2, -1, 3 }, "x3")
  local y3 = npu.layers.dense(x3, 6, { activation = npu.tanh })
  lu.assertEquals(y3:shape()[3], 6)
  sess:run(g:global_variables_initializer())
  lu.assertEquals(sess:run(y3, { [x3] = npu.ones({ 2, 5, 3 }) }):shape(), { 2, 5, 6 })
  lu.assertErrorMsgContains("unknown activation", npu.layers.dense, x, 2, { activation = "swish?" })
end

function TestLayers.test_conv2d_layer_trains()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 6, 6, 2 }, "x")
  local y = npu.layers.conv2d(x, 4, 3, { strides = 1, padding = "same", activation = "relu" })
  local v = npu.layers.conv2d(y, 2, { 2, 2 }, { strides = 2 })
  lu.assertEquals(y:shape(), { -1, 6, 6, 4 })
  lu.assertEquals(v:shape(), { -1, 3, 3, 2 })
  lu.assertEquals(g:get_tensor_by_name("conv2d/kernel:0"):shape(), { 3, 3, 2, 4 })
  lu.assertEquals(g:get_tensor_by_name("conv2d_1/bias:0"):shape(), { 2 })
  if not npu.ops.conv2d_backprop_input then return end
  local loss = npu.reduce_mean(npu.square(v))
  local op = npu.train.GradientDescentOptimizer(0.05):minimize(loss)
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local feed = { [x] = npu.random.uniform({ 4, 6, 6, 2 }, { seed = 2 }) }
  local first = sess:run(loss, feed):item()
  for _ = 1, 20 do sess:run(op, feed) end
  lu.assertTrue(sess:run(loss, feed):item() < first)
end

function TestLayers.test_batch_normalization_training_and_inference()
  local g = npu.Graph()
  local x = g:placeholder("float64", { -1, 2 }, "x")
  local y = npu.layers.batch_normalization(x, { training = true, momentum = 0.9, epsilon = 0 })
  local yi = npu.layers.batch_normalization(x, { training = false, name = "bn_inf" })
  local updates = npu.get_collection(npu.GraphKeys.UPDATE_OPS, g)
  lu.assertEquals(#updates, 2)
  lu.assertNotNil(g:get_tensor_by_name("batch_normalization/gamma:0"))
  lu.assertNotNil(g:get_tensor_by_name("batch_normalization/moving_variance:0"))
  local trainable = npu.train.trainable_variables(g)
  lu.assertEquals(#trainable, 4) -- gamma and beta of both layers; moving statistics are not
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local feed = { [x] = npu.tensor({ { 1, 10 }, { 3, 20 }, { 5, 30 }, { 7, 40 } }, "float64") }
  local out = sess:run(y, feed):totable()
  -- per column: mean 0, biased variance 1
  for c = 1, 2 do
    local s, q = 0, 0
    for r = 1, 4 do s, q = s + out[r][c], q + out[r][c] ^ 2 end
    close(s / 4, 0, 1e-12, "mean")
    close(q / 4, 1, 1e-12, "variance")
  end
  -- the update ops move the moving statistics: moving = moving - (moving - batch) * 0.1
  sess:run(g:group(updates), feed)
  local mm = sess:run(g:get_tensor_by_name("batch_normalization/moving_mean:0")):totable()
  local mv = sess:run(g:get_tensor_by_name("batch_normalization/moving_variance:0")):totable()
  close(mm[1], 0.4, 1e-12, "moving mean")
  close(mm[2], 2.5, 1e-12, "moving mean 2")
  close(mv[1], 0.9 + 0.1 * 5, 1e-12, "moving variance") -- batch variance of 1,3,5,7 is 5
  -- inference with fresh statistics (mean 0, variance 1): (x - 0) / sqrt(1 + 0.001)
  close(sess:run(yi, feed):totable()[2][1], 3 / math.sqrt(1.001), 1e-12, "inference")
  -- trains: gradients flow to gamma, beta and x
  local d = npu.gradients(npu.reduce_sum(npu.square(y)), { x, trainable[1], trainable[2] })
  for i = 1, 3 do lu.assertNotNil(d[i]) end
end
