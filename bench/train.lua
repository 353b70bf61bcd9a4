-- train.lua — training speed: one SGD step of a 784-256-256-10 MLP at batch 64 on one device
-- thread (fed from Lua), the same step inside an iterations_per_loop loop fed by a dataset
-- on the device, and the per-iteration overhead of the loop on a tiny graph.
-- One process, several repetitions, medians.  Aims (issue 3): <= 1.3 ms per MLP step at one
-- thread; <= 0.5 us per loop iteration.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")
local now = npu.core.monotonic_time
local REPS = 7

local median = dofile("bench/util.lua").median

local function mlp(x, y)
  local init = npu.initializers.glorot_uniform
  local h1 = npu.layers.dense(x, 256, { activation = "relu", kernel_initializer = init { seed = 1 } })
  local h2 = npu.layers.dense(h1, 256, { activation = "relu", kernel_initializer = init { seed = 2 } })
  local logits = npu.layers.dense(h2, 10, { kernel_initializer = init { seed = 3 } })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
  return loss, npu.train.GradientDescentOptimizer(0.01):minimize(loss)
end

npu.core.set_n_threads(1)
local B = 64
local xs = npu.random.uniform({ 1024, 784 }, { seed = 7 })
local ys = npu.tensor((function() local t = {} for i = 1, 1024 do t[i] = (i * 7) % 10 end return t end)(), "int32")

-- 1. fed from Lua, one step per sess:run
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { B, 784 }, "x")
  local y = g:placeholder("int32", { B }, "y")
  local _, train_op = mlp(x, y)
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local xb = npu.random.uniform({ B, 784 }, { seed = 8 })
  local yb = npu.tensor((function() local t = {} for i = 1, B do t[i] = i % 10 end return t end)(), "int32")
  local feeds = { [x] = xb, [y] = yb }
  for _ = 1, 20 do sess:run(train_op, feeds) end
  local times = {}
  for r = 1, REPS do
    local t0 = now()
    for _ = 1, 100 do sess:run(train_op, feeds) end
    times[r] = (now() - t0) / 100
  end
  print(("MLP 784-256-256-10, batch 64, SGD, 1 thread, fed from Lua:  %.3f ms/step  (%.0f steps/s)")
    :format(median(times) * 1e3, 1 / median(times)))
end

-- 2. and 3. need datasets on the device (npu.data)
if not npu.data then
  print("(datasets not available: loop benchmarks skipped)")
  return
end

local function loop_bench(n_per_loop, build)
  local g = npu.Graph()
  local ds = npu.data.Dataset.from_tensor_slices({ xs, ys }):repeat_():batch(B, { drop_remainder = true })
  local it = ds:make_one_shot_iterator(g)
  local batch = it:get_next()
  local train_op = build(g, batch)
  local sess = npu.Session { graph = g, options = { iterations_per_loop = n_per_loop } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, train_op, n_per_loop)
  sess:run(loop)
  local times = {}
  local runs = math.max(1, 200 // n_per_loop)
  for r = 1, REPS do
    local t0 = now()
    for _ = 1, runs do sess:run(loop) end
    times[r] = (now() - t0) / (runs * n_per_loop)
  end
  return median(times)
end

local mlp_build = function(_, batch) local _, op = mlp(batch[1], batch[2]) return op end
local t1 = loop_bench(1, mlp_build)
local t100 = loop_bench(100, mlp_build)
print(("same MLP fed by a dataset on the device: iterations_per_loop 1: %.3f ms/step, 100: %.3f ms/step (%.2fx)")
  :format(t1 * 1e3, t100 * 1e3, t1 / t100))

-- the loop's own cost: a graph doing almost nothing per iteration
local tiny = function(g, batch)
  local v = g:variable(npu.zeros({ 1 }), "v")
  return npu.assign(v, v + npu.reduce_sum(batch[1], { 0, 1 }, false) * 0)
end
local xs1 = npu.zeros({ 64, 1 })
xs = xs1
ys = npu.tensor((function() local t = {} for i = 1, 64 do t[i] = 0 end return t end)(), "int32")
B = 1
local per = loop_bench(1000, tiny)
print(("tiny graph inside an iterations_per_loop 1000 loop: %.3f us per iteration"):format(per * 1e6))
