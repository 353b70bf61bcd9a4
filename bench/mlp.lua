-- mlp.lua — the Lua side of build/bench/bench_mlp (which runs the same MLP through the C API
-- beside a hand-written C twin): MLP 784-256-256-10 (dense + relu, dense + relu, dense,
-- softmax) at batch 1 and 64, one thread, sess:run from Lua, and a one-node graph's sess:run
-- for the per-run overhead of the binding.  Medians of interleaved repetitions.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")
local now = npu.core.monotonic_time
local REPS = 21

local median = dofile("bench/util.lua").median

npu.core.set_n_threads(1)

local function model(batch)
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, 784 }, "x")
  local init = npu.initializers.glorot_uniform
  local h1 = npu.layers.dense(x, 256, { activation = "relu", kernel_initializer = init { seed = 1 } })
  local h2 = npu.layers.dense(h1, 256, { activation = "relu", kernel_initializer = init { seed = 2 } })
  local probs = npu.nn.softmax(npu.layers.dense(h2, 10, { kernel_initializer = init { seed = 3 } }))
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  return sess, probs, { [x] = npu.random.uniform({ batch, 784 }, { seed = 8 }) }
end

local cases = {}
for _, batch in ipairs { 1, 64 } do
  local sess, probs, feeds = model(batch)
  cases[#cases + 1] = { name = ("MLP inference, batch %d"):format(batch), iters = batch == 1 and 400 or 40,
                        fn = function() return sess:run(probs, feeds) end, times = {} }
end
do -- the binding's share: a one-node graph with one feed
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1 }, "x")
  local y = npu.nn.relu(x)
  local sess = npu.Session { graph = g }
  local feeds = { [x] = npu.tensor({ 1 }) }
  cases[#cases + 1] = { name = "sess:run(relu(x), {[x]=t}), one feed", iters = 20000,
                        fn = function() return sess:run(y, feeds) end, times = {} }
end

for _, c in ipairs(cases) do for _ = 1, 10 do c.fn() end end
for r = 1, REPS do
  for _, c in ipairs(cases) do
    local t0 = now()
    for _ = 1, c.iters do c.fn() end
    c.times[r] = (now() - t0) / c.iters
  end
end
print(("Lua sess:run, one thread, medians of %d interleaved reps:"):format(REPS))
for _, c in ipairs(cases) do print(("  %-40s %9.2f us"):format(c.name, median(c.times) * 1e6)) end
