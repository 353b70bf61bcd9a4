-- distributed_spec.lua — data-parallel training over MPI (csrc/dist/, lua/npu/hccl.lua,
-- docs/distributed.md).  One process: rank 0 of 1, RANK_SIZE / RANK_ID checked, collectives
-- as identities, errors at build time.  Then the scripts of spec/mpi/ under
-- `mpirun -np 2` (with the flags a root CI needs): every collective and dtype against
-- hand-computed values, 2 ranks x 32 against 1 process x 64, a rank leaving early.  Those skip,
-- saying why, only where mpirun or MPI is missing.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

local hccl = npu.hccl

TestDistributed = {}

function TestDistributed:test_one_process_is_rank_0_of_1()
  lu.assertEquals(hccl.get_rank_id(), 0)
  lu.assertEquals(hccl.get_rank_size(), 1)
  lu.assertEquals(hccl.get_local_rank_id(), 0)
  lu.assertEquals(hccl.get_local_rank_size(), 1)
  lu.assertIs(npu.hccl_ops, hccl)
  lu.assertErrorMsgContains("npu.hccl.get_rank_id: NPU_ERR_ARG: unknown group 'my_group'", hccl.get_rank_id, "my_group")
end

function TestDistributed:test_rank_env_must_agree_with_the_launcher()
  local out = S.run_lua(".", "RANK_SIZE=4", 'print(pcall(require("npu").hccl.get_rank_size))')
  lu.assertStrContains(out, "NPU_ERR_CONFLICT: RANK_SIZE=4 (environment) but the launcher started 1 process (not under mpirun)")
  out = S.run_lua(".", "RANK_SIZE=1 RANK_ID=3", 'print(pcall(require("npu").hccl.get_rank_id))')
  lu.assertStrContains(out, "NPU_ERR_CONFLICT: RANK_ID=3 (environment) but this process is rank 0 of 1")
  out = S.run_lua(".", "RANK_SIZE=1 RANK_ID=0", 'print(require("npu").hccl.get_rank_id())')
  lu.assertEquals(out, "0\n")
end

function TestDistributed:test_collectives_with_one_rank()
  if not hccl.available() then
    local g = npu.Graph()
    local x = g:placeholder("float32", { 2 }, "x")
    local sess <close> = npu.Session { graph = g }
    lu.assertErrorMsgContains("built without MPI", sess.run, sess, hccl.allreduce(x, "sum"), { [x] = { 1, 2 } })
    lu.skip("built without MPI: the collectives say so (checked); the rest needs MPI")
  end
  for _, dt in ipairs({ "float32", "float16", "int32" }) do
    local g = npu.Graph()
    local x = g:placeholder(dt, { 2, 2 }, "x")
    local outs = { hccl.allreduce(x, "prod"), hccl.broadcast({ x }, 0)[1], hccl.allgather(x, 1),
      hccl.reduce_scatter(x, "max", 1) }
    local sess <close> = npu.Session { graph = g }
    for _, t in ipairs(sess:run(outs, { [x] = npu.tensor({ { 1, 2 }, { 3, 4 } }, dt) })) do
      lu.assertEquals(t:dtype(), dt)
      lu.assertEquals(t:totable(), { { 1, 2 }, { 3, 4 } })
    end
  end
end

function TestDistributed:test_bad_arguments_name_the_op()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 3 }, "x")
  lu.assertErrorMsgContains("hcom_allreduce 'HcomAllReduce': unknown reduction 'avg' (sum, prod, max or min)", hccl.allreduce, x, "avg")
  lu.assertErrorMsgContains("rank_size 2 but there is 1 rank", hccl.allgather, x, 2)
  lu.assertErrorMsgContains("NPU_ERR_SHAPE", g.op, g, "hcom_reduce_scatter", { x }, { reduction = "sum", rank_size = 2 })
  lu.assertErrorMsgContains("unknown group 'other'", hccl.allreduce, x, "sum", 1, -1, "other")
  lu.assertErrorMsgContains("NPU_ERR_DTYPE", hccl.allreduce, g:placeholder("bool", { 2 }), "max")
  -- the C check of rank_size, when the op is built directly
  local ag = g:op("hcom_all_gather", { x }, { rank_size = 3 })
  local sess <close> = npu.Session { graph = g }
  if hccl.available() then
    lu.assertErrorMsgContains("hcom_all_gather 'HcomAllGather': rank_size 3 but there is 1 rank",
      sess.run, sess, ag, { [x] = { 1, 2, 3 } })
  end
end

function TestDistributed:test_the_distributed_optimizer_with_one_rank_is_the_optimizer()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 2 }, "x")
  local w = g:variable(npu.tensor({ { 1 }, { 2 } }), "w")
  local loss = npu.reduce_mean(npu.square(x:matmul(w)))
  local opt = npu.train.npu_distributed_optimizer_wrapper(npu.train.GradientDescentOptimizer(0.1))
  lu.assertIs(npu.train.NPUDistributedOptimizer, npu.train.npu_distributed_optimizer_wrapper)
  local gv = opt:compute_gradients(loss)
  lu.assertEquals(#gv, 1)
  local train = opt:minimize(loss)
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  sess:run(npu.train.broadcast_global_variables(g, 0))
  sess:run(train, { [x] = { { 1, 0 }, { 0, 1 }, { 1, 1 }, { 0, 0 } } })
  -- d/dw mean((x w)^2) = 2/4 x^T (x w): (1 + 3, 2 + 3) / 2 = (2, 2.5); w - 0.1 grad
  local v = sess:run(w):totable()
  lu.assertAlmostEquals(v[1][1], 0.8, 1e-6)
  lu.assertAlmostEquals(v[2][1], 1.75, 1e-6)
end

function TestDistributed:test_gradient_buckets()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 256 }, "a") -- 1 KiB
  local b = g:placeholder("float32", { 512 }, "b") -- 2 KiB
  local c = g:placeholder("float16", { 256 }, "c")
  local d = g:placeholder("float32", { 256 }, "d")
  -- backward order (the last first), cut at 2 KiB and at a dtype change
  local buckets = hccl._buckets({ a, b, c, d }, 2048)
  lu.assertEquals(#buckets, 4)
  lu.assertEquals({ buckets[1][1], buckets[2][1], buckets[3][1], buckets[4][1] }, { 4, 3, 2, 1 })
  buckets = hccl._buckets({ a, d }, 4096)
  lu.assertEquals(#buckets, 1)
  lu.assertEquals({ buckets[1][1], buckets[1][2] }, { 2, 1 })
end

-- ---- under mpirun -np 2 ------------------------------------------------------------------

local MPIRUN = "mpirun --oversubscribe --allow-run-as-root -np 2"

local function need_mpirun()
  if not os.execute("command -v mpirun >/dev/null 2>&1") then
    lu.skip("mpirun is not installed (openmpi-bin; tools/install-deps.sh installs it)")
  end
  if not hccl.available() then lu.skip("lua-npu was built without MPI (libopenmpi-dev)") end
end

-- Runs spec/mpi/<script> under mpirun -np 2; returns the "ok"/"FAIL" lines, all output, and
-- the exit status.
-- Under `make sanitize` (the ASan runtime preloaded) Open MPI's own allocations at exit read
-- as leaks: the ranks and mpirun run with leak detection off there (the rest of ASan stays).
local SANITIZED = os.getenv("LD_PRELOAD") ~= nil and os.getenv("LD_PRELOAD"):find("asan") ~= nil
local NO_LEAKS = SANITIZED and "env ASAN_OPTIONS=detect_leaks=0 " or ""
local NO_LEAKS_X = SANITIZED and "-x ASAN_OPTIONS " or ""
local function mpirun(script, env)
  local cmd = ("%s%s %s %s %s lua5.4 %s/spec/mpi/%s 2>&1"):format(NO_LEAKS, env or "", MPIRUN,
    NO_LEAKS_X, env and "-x " .. env:match("^([%w_]+)=") or "", ROOT_DIR or ".", script)
  local p = io.popen(cmd)
  local out = p:read("a")
  local ok = p:close()
  local oks, fails = {}, {}
  for line in out:gmatch("[^\n]+") do
    if line:match("^ok ") then oks[#oks + 1] = line end
    if line:match("^FAIL ") then fails[#fails + 1] = line end
  end
  return oks, fails, out, ok
end

local function expect(script, n_ok, env)
  need_mpirun()
  local oks, fails, out, ok = mpirun(script, env)
  lu.assertEquals(fails, {}, out)
  lu.assertEquals(#oks, n_ok, out)
  lu.assertTrue(ok, out)
end

function TestDistributed:test_mpi_every_collective_and_dtype()
  expect("collectives.lua", 2 * (3 * 7 + 1 + 1 + 5))
end

function TestDistributed:test_mpi_two_ranks_train_as_one_process()
  expect("train_equal.lua", 4)
  expect("train_equal.lua", 4, "HCOM_PARALLEL=0")
end

function TestDistributed:test_mpi_a_rank_that_leaves_makes_the_others_time_out()
  expect("early_exit.lua", 2 + 5)
end
