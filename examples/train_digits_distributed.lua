-- train_digits_distributed.lua — train_digits.lua, data-parallel over MPI: each rank trains
-- the same MLP (64-128-10) on its shard of the 8x8 digits (Dataset:shard), batch 64 / ranks,
-- and the distributed optimizer averages the gradients over the ranks (one allreduce per
-- gradient bucket, overlapping the backward pass: hcom_parallel), so every rank holds the same
-- weights, as one process training with batch 64 would.  Rank 0 prints the loss per loop and
-- the test accuracy (docs/distributed.md).
--
--   mpirun -np 2 lua5.4 examples/train_digits_distributed.lua [loops]   (default 15 loops of 100 steps)
--   (as root, e.g. in a container: mpirun --allow-run-as-root --oversubscribe -np 2 ...)
--   lua5.4 examples/train_digits_distributed.lua                           (one rank: train_digits)
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")

local LOOPS = tonumber(arg and arg[1]) or 15
local ITERATIONS_PER_LOOP = 100
local RANK, SIZE = npu.hccl.get_rank_id(), npu.hccl.get_rank_size()
local BATCH = 64 // SIZE -- per rank: the global batch stays 64
local N_TEST = 360
local t_start = npu.core.monotonic_time()
local function say(...) if RANK == 0 then print(...) end end

-- The data, split as train_digits.lua splits it (the same on every rank).
local images = npu.load("examples/data/digits_images.npy"):astype("float32"):totable()
local labels = npu.load("examples/data/digits_labels.npy"):astype("int32"):totable()
local order, state = {}, 20240601
for i = 1, #images do order[i] = i end
for i = #order, 2, -1 do
  state = (state * 1103515245 + 12345) % 2147483648
  local j = state % i + 1
  order[i], order[j] = order[j], order[i]
end
local function subset(from, to)
  local xs, ys = {}, {}
  for k = from, to do
    local row = {}
    for j, v in ipairs(images[order[k]]) do row[j] = v / 16 end
    xs[#xs + 1], ys[#ys + 1] = row, labels[order[k]]
  end
  return npu.tensor(xs, "float32"), npu.tensor(ys, "int32")
end
local n_train = #order - N_TEST
local x_train, y_train = subset(1, n_train)
local x_test, y_test = subset(n_train + 1, #order)

-- Each rank reads its shard of the training set.
local g = npu.Graph()
local dataset = npu.data.Dataset.from_tensor_slices({ x_train, y_train }):shard(SIZE, RANK)
    :shuffle(n_train // SIZE + 1, { seed = 1 + RANK }):batch(BATCH, { drop_remainder = true }):repeat_()
local batch = dataset:make_one_shot_iterator(g):get_next()
local init = npu.initializers.glorot_uniform
local h = npu.layers.dense(batch[1], 128, { activation = "relu", kernel_initializer = init { seed = 1 }, name = "hidden" })
local logits = npu.layers.dense(h, 10, { kernel_initializer = init { seed = 2 }, name = "logits" })
local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = batch[2], logits = logits })
local global_step = npu.train.get_or_create_global_step(g)
local opt = npu.train.npu_distributed_optimizer_wrapper(npu.train.GradientDescentOptimizer(0.2))
local train_op = opt:minimize(loss, { global_step = global_step })

local x_eval = g:placeholder("float32", { -1, 64 }, "x_eval")
local eval_logits = npu.nn.bias_add(
  npu.nn.relu(npu.nn.bias_add(x_eval:matmul(g:get_tensor_by_name("hidden/kernel:0")),
    g:get_tensor_by_name("hidden/bias:0"))):matmul(g:get_tensor_by_name("logits/kernel:0")),
  g:get_tensor_by_name("logits/bias:0"))
local predictions = npu.argmax(eval_logits, 1, { output_type = "int32" })

local config = npu.ConfigProto()
local custom_op = config.graph_options.rewrite_options.custom_optimizers:add()
custom_op.name = "NpuOptimizer"
custom_op.parameter_map["iterations_per_loop"].i = ITERATIONS_PER_LOOP
custom_op.parameter_map["enable_data_pre_proc"].b = true
custom_op.parameter_map["precision_mode"].s = npu.compat.as_bytes("must_keep_origin_dtype")
custom_op.parameter_map["hcom_parallel"].b = true
custom_op.parameter_map["hccl_timeout"].i = 60
config.graph_options.rewrite_options.remapping = npu.RewriterConfig.OFF

local sess <close> = npu.Session { graph = g, config = config }
sess:run(g:global_variables_initializer())
sess:run(npu.train.broadcast_global_variables(g, 0)) -- every rank starts from rank 0's weights
local loop = npu.util.set_iteration_per_loop(sess, train_op, ITERATIONS_PER_LOOP)
say(("%d rank%s, batch %d per rank"):format(SIZE, SIZE == 1 and "" or "s", BATCH))
for i = 1, LOOPS do
  local r = sess:run({ loss, global_step, loop })
  say(("loop %2d/%d step %5d  loss %.4f (rank 0's batch)"):format(i, LOOPS, r[2]:item(), r[1]:item()))
end

-- The ranks hold the same weights: rank 0 evaluates.
local predicted = sess:run(predictions, { [x_eval] = x_test }):totable()
local correct = 0
for i, want in ipairs(y_test:totable()) do
  if predicted[i] == want then correct = correct + 1 end
end
say(("test accuracy: %.2f %% (%d/%d), %d steps in %.2f s"):format(100 * correct / #predicted,
  correct, #predicted, LOOPS * ITERATIONS_PER_LOOP, npu.core.monotonic_time() - t_start))
