-- bench/util.lua — what the Lua benchmarks share (loaded with dofile(ROOT .. "/bench/util.lua");
-- not a benchmark itself): the median of a list of times, two things timed alternately, the
-- shared models that are there, and the MLP and CNN training graphs.
local util = {}

-- The median of the numbers in t (sorts t in place; the upper one of an even count's two).
function util.median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

-- a() and b() called in turn reps times, each call timed (npu.core.monotonic_time): the median
-- seconds of a's calls and of b's.  Alternating puts the two under the same load on a shared
-- machine; warm them up first.
function util.alternate(reps, a, b)
  local clock = require("npu").core.monotonic_time
  local ta, tb = {}, {}
  for r = 1, reps do
    local t0 = clock()
    a()
    local t1 = clock()
    b()
    tb[r] = clock() - t1
    ta[r] = t1 - t0
  end
  return util.median(ta), util.median(tb)
end

-- The names of the shared models in dir (NPU_MODELS_DIR: dir/NAME/NAME.json), in ls order;
-- none when dir is not there.
function util.model_names(dir)
  local names = {}
  local p = io.popen('ls "' .. dir .. '" 2>/dev/null')
  for n in p:lines() do
    local f = io.open(dir .. "/" .. n .. "/" .. n .. ".json", "rb")
    if f then
      f:close()
      names[#names + 1] = n
    end
  end
  p:close()
  return names
end

-- The MLP's logits of x (batch x 784): 784 -> 256 relu -> 256 relu -> 10, glorot_uniform
-- weights, seeds 1, 2, 3 (bench_mlp.c's model; mlp_sgd trains it, freeze.lua runs it).
function util.mlp_logits(npu, x)
  local init = npu.initializers.glorot_uniform
  local h1 = npu.layers.dense(x, 256, { activation = "relu", kernel_initializer = init { seed = 1 } })
  local h2 = npu.layers.dense(h1, 256, { activation = "relu", kernel_initializer = init { seed = 2 } })
  return npu.layers.dense(h2, 10, { kernel_initializer = init { seed = 3 } })
end

-- The CNN's logits of x (batch x 28x28x1): conv3x3x32 + relu -> max pool -> conv3x3x64 + relu
-- -> max pool -> dense 10, glorot_uniform, seeds 1, 2, 3 (bench_cnn.c's model; cnn_sgd trains
-- it, freeze.lua runs it).
function util.cnn_logits(npu, x, batch)
  local init = npu.initializers.glorot_uniform
  local h = npu.layers.conv2d(x, 32, 3, { padding = "same", activation = "relu", kernel_initializer = init { seed = 1 } })
  h = npu.nn.max_pool(h, 2, 2, "VALID")
  h = npu.layers.conv2d(h, 64, 3, { padding = "same", activation = "relu", kernel_initializer = init { seed = 2 } })
  h = npu.nn.max_pool(h, 2, 2, "VALID")
  return npu.layers.dense(npu.reshape(h, { batch, 7 * 7 * 64 }), 10, { kernel_initializer = init { seed = 3 } })
end

-- The MLP the benchmarks train (bench_mlp.c's): batch x 784 -> 256 relu -> 256 relu -> 10
-- (glorot_uniform weights, seeds 1, 2, 3), the mean softmax cross-entropy against int32
-- labels, gradient descent at lr 0.01, in a new graph of npu (the module under test, which
-- versus.lua's workers load from another build).  Returns the graph, the x and label
-- placeholders and the train op.
function util.mlp_sgd(npu, batch)
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, 784 }, "x")
  local labels = g:placeholder("int32", { batch }, "y")
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits {
    labels = labels, logits = util.mlp_logits(npu, x) })
  return g, x, labels, npu.train.GradientDescentOptimizer(0.01):minimize(loss)
end

-- The CNN the benchmarks train (bench_cnn.c's): batch x 28x28x1 -> conv3x3x32 + relu -> max
-- pool -> conv3x3x64 + relu -> max pool -> dense 10 (glorot_uniform, seeds 1, 2, 3), the mean
-- softmax cross-entropy against int32 labels, gradient descent at lr 0.01.  Returns the graph,
-- the x and label placeholders, the train op and feeds (uniform x, seed 8; labels k % 10).
function util.cnn_sgd(npu, batch)
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, 28, 28, 1 }, "x")
  local y = g:placeholder("int32", { batch }, "y")
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits {
    labels = y, logits = util.cnn_logits(npu, x, batch) })
  local labels = {}
  for k = 1, batch do labels[k] = k % 10 end
  local feeds = { [x] = npu.random.uniform({ batch, 28, 28, 1 }, { seed = 8 }), [y] = npu.tensor(labels, "int32") }
  return g, x, y, npu.train.GradientDescentOptimizer(0.01):minimize(loss), feeds
end

return util
