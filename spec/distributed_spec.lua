-- distributed_spec.lua — data-parallel training over MPI (csrc/dist/, lua/npu/hccl.lua,
-- docs/distributed.md).  One process: rank 0 of 1, RANK_SIZE / RANK_ID checked, collectives
-- as identities, errors at build time.  Then the scripts of spec/mpi/ under
-- `mpirun -np 2` (with the flags a root CI needs): every collective and dtype against
-- hand-computed values, 2 ranks x 32 against 1 process x 64, a rank leaving early, send /
-- receive; and groups under -np 4 (--oversubscribe: the machine may have fewer cores).  Those
-- skip, saying why, only where mpirun or MPI is missing.
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
  -- an unknown group is reported by the function called, not the rank query it asks
  lu.assertErrorMsgContains("npu.hccl.allreduce: NPU_ERR_ARG: unknown group 'other'", hccl.allreduce, x, "sum", 1, -1, "other")
  lu.assertErrorMsgContains("npu.hccl.send: NPU_ERR_ARG: unknown group 'other'", hccl.send, x, 5, 1, "other")
  lu.assertErrorMsgContains("npu.hccl.receive: NPU_ERR_ARG: unknown group 'other'", hccl.receive, { 3 }, "float32", 5, 1, "other", g)
  lu.assertErrorMsgContains("npu.hccl.allgather: NPU_ERR_ARG: unknown group 'other'", hccl.allgather, x, 1, "other")
  lu.assertErrorMsgContains("npu.hccl.get_local_rank_id: NPU_ERR_ARG: unknown group 'other'", hccl.get_local_rank_id, "other")
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

function TestDistributed:test_send_and_receive_with_one_rank()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  lu.assertErrorMsgContains("npu.hccl.send: NPU_ERR_ARG: dest_rank 0 is this rank: a rank cannot send to itself", hccl.send, x, 1, 0)
  lu.assertErrorMsgContains("dest_rank 1 is out of range: group 'hccl_world_group' has 1 rank", hccl.send, x, 1, 1)
  lu.assertErrorMsgContains("src_rank 0 is this rank: a rank cannot receive from itself", hccl.receive, { 2 }, "float32", 1, 0, nil, g)
  lu.assertErrorMsgContains("sr_tag must be an integer, got 1.5", hccl.send, x, 1.5, 1)
  lu.assertErrorMsgContains("shape must be a list of dimensions", hccl.receive, 2, "float32", 1, 1)
  -- the op's own checks (what the Lua checks above cannot see)
  lu.assertErrorMsgContains("sr_tag 16384 is outside [0, 16383]", g.op, g, "hcom_send", { x }, { sr_tag = 16384, dest_rank = 1 })
  lu.assertErrorMsgContains("attribute 'dest_rank' is required", g.op, g, "hcom_send", { x }, { sr_tag = 1 })
  lu.assertErrorMsgContains("a receive declares its whole shape", g.op, g, "hcom_receive", {}, { shape = { -1 }, dtype = "float32", sr_tag = 1, src_rank = 1 })
  lu.assertErrorMsgContains("NPU_ERR_DTYPE", g.op, g, "hcom_receive", {}, { shape = { 2 }, dtype = "bool", sr_tag = 1, src_rank = 1 })
  lu.assertErrorMsgContains("NPU_ERR_DTYPE", g.op, g, "hcom_send", { g:placeholder("bool", { 2 }) }, { sr_tag = 1, dest_rank = 1 })
  -- built past the Lua checks, the run refuses them, naming the op
  local self_send = g:op("hcom_send", { x }, { sr_tag = 1, dest_rank = 0 })
  local recv = g:op("hcom_receive", {}, { shape = { 2 }, dtype = "int32", sr_tag = 1, src_rank = 3 })
  local sess <close> = npu.Session { graph = g }
  if hccl.available() then
    lu.assertErrorMsgContains("hcom_send 'HcomSend': dest_rank 0 is this rank", sess.run, sess, self_send, { [x] = { 1, 2 } })
    lu.assertErrorMsgContains("hcom_receive 'HcomReceive': src_rank 3 is out of range", sess.run, sess, recv)
  else
    lu.assertErrorMsgContains("built without MPI", sess.run, sess, recv)
  end
end

function TestDistributed:test_groups_of_one_rank()
  hccl.create_group("solo", 1, { 0 })
  lu.assertEquals({ hccl.get_rank_id("solo"), hccl.get_rank_size("solo"), hccl.get_local_rank_id("solo"),
    hccl.get_local_rank_size("solo") }, { 0, 1, 0, 1 })
  lu.assertEquals(hccl.get_world_rank_from_group_rank("solo", 0), 0)
  lu.assertEquals(hccl.get_group_rank_from_world_rank(0, "solo"), 0)
  lu.assertEquals(hccl.get_group_rank_from_world_rank(0, "hccl_world_group"), 0)
  lu.assertErrorMsgContains("create_group 'solo': a group of that name exists (destroy it first)", hccl.create_group, "solo", 1, { 0 })
  if hccl.available() then
    local g = npu.Graph()
    local x = g:placeholder("int32", { 3 }, "x")
    local sess <close> = npu.Session { graph = g }
    local r = sess:run({ hccl.allreduce(x, "max", nil, nil, "solo"), hccl.allgather(x, 1, "solo") }, { [x] = npu.tensor({ 4, 5, 6 }, "int32") })
    lu.assertEquals(r[1]:totable(), { 4, 5, 6 })
    lu.assertEquals(r[2]:totable(), { 4, 5, 6 })
    lu.assertErrorMsgContains("rank_size 2 but there is 1 rank in group 'solo'", hccl.allgather, x, 2, "solo")
  end
  hccl.destroy_group("solo")
  lu.assertErrorMsgContains("npu.hccl.get_rank_size: NPU_ERR_ARG: unknown group 'solo'", hccl.get_rank_size, "solo")
  lu.assertErrorMsgContains("destroy_group: unknown group 'solo'", hccl.destroy_group, "solo")
  lu.assertErrorMsgContains("that group is every rank's and stays", hccl.destroy_group, "hccl_world_group")
  lu.assertErrorMsgContains("that group is every rank's, made by the library", hccl.create_group, "hccl_world_group", 1, { 0 })
  lu.assertErrorMsgContains("rank 1 is out of range: there is 1 rank (0 to 0)", hccl.create_group, "g", 1, { 1 })
  lu.assertErrorMsgContains("rank_num 2 but rank_ids lists 1 ranks", hccl.create_group, "g", 2, { 0 })
  lu.assertErrorMsgContains("unknown keyword 'timeuot' (did you mean 'timeout'?)", hccl.create_group, "g", 1, { 0 }, { timeuot = 1 })
  lu.assertErrorMsgContains("group must be a string", hccl.get_rank_id, 3)
  lu.assertErrorMsgContains("world rank 2 is not in group 'hccl_world_group'", hccl.get_group_rank_from_world_rank, 2)
end

function TestDistributed:test_local_rank_id_and_local_device_list_are_checked_against_the_ranks()
  local g = npu.Graph()
  g:placeholder("float32", { 1 }, "x")
  lu.assertErrorMsgContains("NPU_ERR_OPTION: local_rank_id 1 but this process is local rank 0 of 1 on its machine (not under mpirun)",
    npu.Session, { graph = g, options = { local_rank_id = 1 } })
  lu.assertErrorMsgContains("local_device_list '0,1' names 2 devices but 1 rank runs on this machine",
    npu.Session, { graph = g, options = { local_rank_id = 0, local_device_list = "0,1" } })
  lu.assertErrorMsgContains("entry 0 (this local rank's) is 5 but the session's device_id is 0",
    npu.Session, { graph = g, options = { local_rank_id = 0, local_device_list = "5" } })
  local sess <close> = npu.Session { graph = g, options = { local_rank_id = 0, local_device_list = "0" } }
  lu.assertEquals(sess:options():get("local_rank_id"), 0)
end

function TestDistributed:test_staging_buffers_come_from_the_context()
  if not hccl.available() then lu.skip("built without MPI: collectives do not run") end
  local core = npu.core
  local function live() collectgarbage(); collectgarbage(); return core.live_bytes() end
  local N = 1 << 18
  -- what a session holds after runs of y = f(x), float32 [N]: the staging buffers (2 N floats,
  -- kept for the next step) are the difference between an allreduce and x * 1
  local function held(f)
    local g = npu.Graph()
    local x = g:placeholder("float32", { N }, "x")
    local y = f(x)
    local xt = npu.zeros({ N })
    local base = live()
    local sess <close> = npu.Session { graph = g }
    sess:run(y, { [x] = xt })
    local first = live()
    sess:run(y, { [x] = xt })
    local second = live()
    sess:close()
    return first - base, second - first, live() - base
  end
  local a1, a2, a3 = held(function(x) return hccl.allreduce(x, "sum") end)
  local b1, _, b3 = held(function(x) return x * 1 end)
  lu.assertTrue(a1 - b1 >= 2 * 4 * N, ("allreduce %d, x * 1 %d bytes"):format(a1, b1))
  lu.assertEquals(a2, 0) -- the second run reuses them
  lu.assertEquals(a3, b3) -- closing the session gives them back
end

-- ---- under mpirun -np 2 ------------------------------------------------------------------

local MPIRUN = "mpirun --oversubscribe --allow-run-as-root -np %d"

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
local function mpirun(script, env, np)
  local cmd = ("%s%s %s %s %s lua5.4 %s/spec/mpi/%s 2>&1"):format(NO_LEAKS, env or "", MPIRUN:format(np or 2),
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

local function expect(script, n_ok, env, np)
  need_mpirun()
  local oks, fails, out, ok = mpirun(script, env, np)
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

function TestDistributed:test_mpi_send_and_receive()
  expect("p2p.lua", 14 + 20)
end

function TestDistributed:test_mpi_groups_of_four_ranks()
  expect("groups.lua", 38 + 37 + 59 + 37, nil, 4)
end
