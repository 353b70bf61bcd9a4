-- summary.lua — what TensorBoard summaries cost a training loop: the digits MLP
-- (examples/train_digits.lua: 64-128-10, batch 64, SGD, a dataset on the device,
-- iterations_per_loop 100) with and without a merged summary (loss, accuracy, three weight
-- histograms) fetched with every loop — a summary every 100 steps — and written by a
-- FileWriter.  Interleaved repetitions, medians, one device thread; timed by the process's CPU
-- time (os.clock: the device thread, the dataset's producer and the writer's thread together),
-- which a busy shared machine disturbs far less than the wall clock (printed too).
-- Aim: at most 2 % slower.
--
-- `lua5.4 bench/summary.lua count plain|with LOOPS` runs one variant alone, LOOPS loops after
-- the warm-up, for an instruction counter: bench/summary_instructions.sh runs it under
-- valgrind's callgrind and subtracts a 0-loop run, which counts the same on a busy machine.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")
local wall = npu.core.monotonic_time
local now = os.clock
local REPS, LOOPS, N = tonumber(arg[1]) or 21, 10, 100
npu.core.set_n_threads(1)

local median = dofile("bench/util.lua").median

local images = npu.load("examples/data/digits_images.npy"):astype("float32")
local labels = npu.load("examples/data/digits_labels.npy"):astype("int32")

local function build()
  local g = npu.Graph()
  local batch = npu.data.Dataset.from_tensor_slices({ images, labels }):shuffle(1797, { seed = 1 })
      :batch(64, { drop_remainder = true }):repeat_():make_one_shot_iterator(g):get_next()
  local init = npu.initializers.glorot_uniform
  local h = npu.layers.dense(batch[1] * (1 / 16), 128, { activation = "relu", kernel_initializer = init { seed = 1 }, name = "hidden" })
  local logits = npu.layers.dense(h, 10, { kernel_initializer = init { seed = 2 }, name = "logits" })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = batch[2], logits = logits })
  local gs = npu.train.get_or_create_global_step(g)
  local train_op = npu.train.GradientDescentOptimizer(0.2):minimize(loss, { global_step = gs })
  npu.summary.scalar("loss", loss)
  local correct = npu.equal(npu.argmax(logits, 1, { output_type = "int32" }), batch[2])
  npu.summary.scalar("accuracy", npu.reduce_mean(npu.cast(correct, "float32")))
  for _, name in ipairs({ "hidden/kernel", "logits/kernel", "logits/bias" }) do
    npu.summary.histogram("weights/" .. name, g:get_tensor_by_name(name .. ":0"))
  end
  local merged = npu.summary.merge_all(g)
  local sess = npu.Session { graph = g, options = { iterations_per_loop = N } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, train_op, N)
  return g, sess, loss, gs, loop, merged
end

if arg[1] == "count" then
  local g, sess, loss, gs, loop, merged = build()
  local dir = os.tmpname()
  os.remove(dir)
  local writer = npu.summary.FileWriter(dir, g)
  local function step(mode)
    if mode == "plain" then return sess:run({ loss, gs, loop }) end
    local r = sess:run({ loss, gs, loop, merged })
    writer:add_summary(r[4], r[2])
  end
  step("plain"); step("with") -- warm up: compile, first allocations
  for _ = 1, tonumber(arg[3]) do step(arg[2]) end
  writer:close()
  os.execute("rm -rf '" .. dir .. "'")
  return
end

local plain, with = { build() }, { build() }
local dir = os.tmpname()
os.remove(dir)
local writer = npu.summary.FileWriter(dir, with[1])

local wall_a, wall_b = {}, {}
local function time_plain(r)
  local _, sess, loss, gs, loop = table.unpack(plain)
  local t0, w0 = now(), wall()
  for _ = 1, LOOPS do sess:run({ loss, gs, loop }) end
  wall_a[#wall_a + 1] = (wall() - w0) / (LOOPS * N)
  return (now() - t0) / (LOOPS * N)
end
local function time_with()
  local _, sess, loss, gs, loop, merged = table.unpack(with)
  local t0, w0 = now(), wall()
  for _ = 1, LOOPS do
    local r = sess:run({ loss, gs, loop, merged })
    writer:add_summary(r[4], r[2])
  end
  wall_b[#wall_b + 1] = (wall() - w0) / (LOOPS * N)
  return (now() - t0) / (LOOPS * N)
end

time_plain(); time_with() -- warm up: compile, first allocations
wall_a, wall_b = {}, {}
local a, b = {}, {}
for r = 1, REPS do
  if r % 2 == 1 then a[r] = time_plain(); b[r] = time_with()
  else b[r] = time_with(); a[r] = time_plain() end
end
writer:close()
local ta, tb = median(a), median(b)
print(("digits MLP, iterations_per_loop %d, 1 device thread, CPU time: %.2f us/step without summaries, %.2f us/step with a merged summary every %d steps (+ FileWriter): ratio %.4f (aim <= 1.02)")
  :format(N, ta * 1e6, tb * 1e6, N, tb / ta))
print(("  wall clock: %.2f and %.2f us/step, ratio %.4f"):format(median(wall_a) * 1e6,
  median(wall_b) * 1e6, median(wall_b) / median(wall_a)))
local bytes = 0
for _ in npu.summary.read_events(writer:path()) do bytes = bytes + 1 end
print(("%d items written to %s"):format(bytes, writer:path()))
os.execute("rm -rf '" .. dir .. "'")
