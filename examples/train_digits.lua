-- train_digits.lua — trains an MLP (64-128-10) on real data, the 8x8 handwritten digits
-- (1797 samples, examples/data/README.md), with the training loop on the device: a dataset
-- feeds the graph (shuffle, batch 64, repeat) and each sess:run performs iterations_per_loop
-- SGD steps without coming back to Lua.  Prints the loss per loop (with a progress bar on a
-- terminal) and the test accuracy on a fixed held-out split.  Given a logdir, it also writes
-- TensorBoard summaries there (the loss, the batch accuracy, histograms of the weights, the
-- graph): `tensorboard --logdir <logdir>` shows them (docs/summaries.md).
--
--   lua5.4 examples/train_digits.lua [loops [logdir]]   (default 15 loops of 100 steps)
local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/checkout.lua") -- runs from any directory, on this checkout's build or the rock
package.path = here .. "/?.lua;" .. package.path -- digits.lua, beside this script
local npu = require("npu")
local digits = require("digits") -- the data, model and evaluation train_digits_distributed.lua shares

local LOOPS = tonumber(arg and arg[1]) or 15
local LOGDIR = arg and arg[2]
local ITERATIONS_PER_LOOP = 100
local BATCH = 64
local N_TEST = 360
local t_start = npu.core.monotonic_time()

-- The data: a fixed shuffled split of the 1797 digits.
local x_train, y_train, x_test, y_test, n_train = digits.load(N_TEST)

-- The model, fed by a dataset on the device.
local g = npu.Graph()
local dataset = npu.data.Dataset.from_tensor_slices({ x_train, y_train })
    :shuffle(n_train, { seed = 1 }):batch(BATCH, { drop_remainder = true }):repeat_()
local batch = dataset:make_one_shot_iterator(g):get_next()
local logits = digits.model(batch[1])
local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = batch[2], logits = logits })
local global_step = npu.train.get_or_create_global_step(g)
local train_op = npu.train.GradientDescentOptimizer(0.2):minimize(loss, { global_step = global_step })

-- Summaries: ops of the graph like any other, computed on the device; fetched with the loop,
-- they are the last step's (and only that step computes them).
local summaries
if LOGDIR then
  local correct = npu.equal(npu.argmax(logits, 1, { output_type = "int32" }), batch[2])
  npu.summary.scalar("loss", loss)
  npu.summary.scalar("accuracy", npu.reduce_mean(npu.cast(correct, "float32")))
  for _, name in ipairs({ "hidden/kernel", "logits/kernel", "logits/bias" }) do
    npu.summary.histogram("weights/" .. name, g:get_tensor_by_name(name .. ":0"))
  end
  summaries = npu.summary.merge_all(g)
end

-- Evaluation shares the variables: the same layers applied to a placeholder.
local x_eval, predictions = digits.evaluation(g)

-- The session, configured as a training script on the reference configures it.
local config = digits.config(ITERATIONS_PER_LOOP)

local sess <close> = npu.Session { graph = g, config = config }
sess:run(g:global_variables_initializer())
local loop = npu.util.set_iteration_per_loop(sess, train_op, ITERATIONS_PER_LOOP)

-- Progress: the device loop itself moves a bar over all the training steps (sess:run's
-- progress function, every 10 iterations), on stderr: redrawn on a terminal, a line per tenth
-- otherwise.  Each loop's loss is printed on stdout.
local bar = npu.util.ProgressBar { total = math.max(1, LOOPS * ITERATIONS_PER_LOOP), label = "training" }
local writer = LOGDIR and npu.summary.FileWriter(LOGDIR, g)
for i = 1, LOOPS do
  local r = sess:run({ loss, global_step, loop, summaries }, nil,
    { progress = bar:callback((i - 1) * ITERATIONS_PER_LOOP), every = 10 })
  if writer then writer:add_summary(r[4], r[2]) end
  bar:clear()
  print(("loop %2d/%d step %5d  loss %.4f"):format(i, LOOPS, r[2]:item(), r[1]:item()))
end
bar:finish()
if writer then
  writer:close()
  print("summaries: " .. writer:path())
end

print(digits.accuracy(sess, predictions, x_eval, x_test, y_test, LOOPS * ITERATIONS_PER_LOOP, t_start))
