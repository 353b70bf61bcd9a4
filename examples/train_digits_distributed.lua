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
local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/checkout.lua") -- runs from any directory, on this checkout's build or the rock
package.path = here .. "/?.lua;" .. package.path -- digits.lua, beside this script
local npu = require("npu")
local digits = require("digits") -- train_digits.lua's data, model and evaluation

local LOOPS = tonumber(arg and arg[1]) or 15
local ITERATIONS_PER_LOOP = 100
local RANK, SIZE = npu.hccl.get_rank_id(), npu.hccl.get_rank_size()
local BATCH = 64 // SIZE -- per rank: the global batch stays 64
local N_TEST = 360
local t_start = npu.core.monotonic_time()
local function say(...) if RANK == 0 then print(...) end end

-- The data, split as train_digits.lua splits it (the same on every rank).
local x_train, y_train, x_test, y_test, n_train = digits.load(N_TEST)

-- Each rank reads its shard of the training set.
local g = npu.Graph()
local dataset = npu.data.Dataset.from_tensor_slices({ x_train, y_train }):shard(SIZE, RANK)
    :shuffle(n_train // SIZE + 1, { seed = 1 + RANK }):batch(BATCH, { drop_remainder = true }):repeat_()
local batch = dataset:make_one_shot_iterator(g):get_next()
local logits = digits.model(batch[1])
local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = batch[2], logits = logits })
local global_step = npu.train.get_or_create_global_step(g)
local opt = npu.train.npu_distributed_optimizer_wrapper(npu.train.GradientDescentOptimizer(0.2))
local train_op = opt:minimize(loss, { global_step = global_step })

local x_eval, predictions = digits.evaluation(g)

local config, custom_op = digits.config(ITERATIONS_PER_LOOP)
custom_op.parameter_map["hcom_parallel"].b = true
custom_op.parameter_map["hccl_timeout"].i = 60

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
say(digits.accuracy(sess, predictions, x_eval, x_test, y_test, LOOPS * ITERATIONS_PER_LOOP, t_start))
