-- distributed.lua — data-parallel training over MPI on this machine (docs/distributed.md):
-- steps/s of one SGD step of an MLP 784-1024-1024-1024-10 (about 3 M weights, 11.6 MiB of
-- gradients) at a global batch of 128, for 1 rank and for 2 ranks (batch 64 each, one kernel
-- thread per rank), and with 2 ranks the share of the step spent on collectives (1 - the
-- step without them / the step with them, the same per-rank work), hcom_parallel off and on
-- (gradients in buckets of 2 MiB).  Best of 5 timings of 20 steps, the cases taking turns.
--
--   lua5.4 bench/distributed.lua      (runs the 2-rank part under mpirun -np 2 itself)
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")
local now = npu.core.monotonic_time
local GLOBAL_BATCH, STEPS, REPS = 128, 20, 5

npu.core.set_n_threads(1)

local median = dofile("bench/util.lua").median

-- A session running SGD steps on batch `batch`: distributed (the wrapper) or not.
local function trainer(batch, distributed, hcom_parallel)
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, 784 }, "x")
  local y = g:placeholder("int32", { batch }, "y")
  local init = npu.initializers.glorot_uniform
  local h = x
  for i = 1, 3 do h = npu.layers.dense(h, 1024, { activation = "relu", kernel_initializer = init { seed = i } }) end
  local logits = npu.layers.dense(h, 10, { kernel_initializer = init { seed = 9 } })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
  local opt = npu.train.GradientDescentOptimizer(0.01)
  if distributed then opt = npu.train.npu_distributed_optimizer_wrapper(opt, { bucket_bytes = 2 * 1024 * 1024 }) end
  local train = opt:minimize(loss)
  local sess = npu.Session { graph = g, options = { hcom_parallel = hcom_parallel, hccl_timeout = 120 } }
  sess:run(g:global_variables_initializer())
  local labels = {}
  for i = 1, batch do labels[i] = i % 10 end
  local feeds = { [x] = npu.random.uniform({ batch, 784 }, { seed = 8 }), [y] = npu.tensor(labels, "int32") }
  return function() sess:run(train, feeds) end
end

local function steps_per_s(step)
  step() -- compiles
  local times = {}
  for r = 1, REPS do
    local t0 = now()
    for _ = 1, STEPS do step() end
    times[r] = now() - t0
  end
  return STEPS / median(times)
end

if arg[1] == "worker" then -- under mpirun: every rank runs the same cases in the same order
  local size = npu.hccl.get_rank_size()
  local batch = GLOBAL_BATCH // size
  -- each case once in turn, REPS times, the best of each (the ranks share 2 cores with each
  -- other and the communication threads: turns even out the machine's drift)
  local steps = { trainer(batch, false, false), trainer(batch, true, false), trainer(batch, true, true) }
  local best = { 0, 0, 0 }
  for _, s in ipairs(steps) do s() end
  for _ = 1, REPS do
    for k, s in ipairs(steps) do
      local t0 = now()
      for _ = 1, STEPS do s() end
      best[k] = math.max(best[k], STEPS / (now() - t0))
    end
  end
  local local_only, off, on = best[1], best[2], best[3]
  if npu.hccl.get_rank_id() == 0 then
    print(("%d ranks x batch %d: %.2f steps/s, hcom_parallel off"):format(size, batch, off))
    print(("%d ranks x batch %d: %.2f steps/s, hcom_parallel on"):format(size, batch, on))
    print(("  the same step without collectives: %.2f steps/s"):format(local_only))
    print(("  collectives' share of the step: %.0f %% (hcom_parallel off), %.0f %% (on)")
      :format(100 * (1 - off / local_only), 100 * (1 - on / local_only)))
    print(("  hcom_parallel on / off: %.2fx"):format(on / off))
  end
  return
end

print(("MLP 784-1024x3-10 SGD, global batch %d, one kernel thread per rank, %d cores"):format(GLOBAL_BATCH,
  tonumber(io.popen("nproc"):read("l"))))
local one = steps_per_s(trainer(GLOBAL_BATCH, false, false))
print(("1 rank  x batch %d: %.2f steps/s"):format(GLOBAL_BATCH, one))
if not npu.hccl.available() or not os.execute("command -v mpirun >/dev/null 2>&1") then
  print("2 ranks: skipped (mpirun or MPI is missing)")
  return
end
local p = io.popen("mpirun --oversubscribe --allow-run-as-root -np 2 lua5.4 bench/distributed.lua worker 2>&1")
local out = p:read("a")
p:close()
io.write(out)
local two = tonumber(out:match("(%S+) steps/s, hcom_parallel on"))
if two then print(("2 ranks / 1 rank (steps/s, global batch %d each): %.2fx"):format(GLOBAL_BATCH, two / one)) end
