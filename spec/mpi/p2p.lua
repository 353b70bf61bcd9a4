-- spec/mpi/p2p.lua — hccl_ops.send / receive between ranks 0 and 1 (mpirun -np 2): every
-- dtype against hand-computed values, inside one plan (receive, compute, send back) and inside
-- an iterations_per_loop loop; a shape or dtype mismatch fails on both ranks naming both and
-- the ranks go on; a receive whose sender never sends times out within hccl_timeout + 1 s and
-- the session (collectives included) stays usable.
local C = dofile((arg[0]:match("^(.*)/[^/]+$") or ".") .. "/common.lua")
local npu, rank, size, check = C.npu, C.rank, C.size, C.check
local hccl = npu.hccl

local vals = { { 1, 2, 3 }, { 4, 5, 6 } }
for _, dt in ipairs({ "float32", "float16", "int32" }) do
  local g = npu.Graph()
  if rank == 0 then
    local x = g:placeholder(dt, { 2, 3 }, "x")
    local s = hccl.send(x, 5, 1)
    local back = hccl.receive({ 3 }, dt, 6, 1, nil, g)
    local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
    sess:run(s, { [x] = npu.tensor(vals, dt) })
    local r = sess:run(back)
    local ok, why = C.close(r:totable(), { 5, 7, 9 }, 0) -- column sums, made by rank 1
    check(dt .. " send, then receive what rank 1 computed", ok and r:dtype() == dt, why or r:dtype())
  elseif rank == 1 then
    local y = hccl.receive({ 2, 3 }, dt, 5, 0, nil, g)
    local col = npu.cast(npu.reduce_sum(npu.cast(y, "float32"), 0), dt) -- float16 has no reduce_sum
    local s = hccl.send(col, 6, 0)
    local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
    local r = sess:run({ y, col, s }) -- one plan: receive, reduce, send
    local ok, why = C.close(r[1]:totable(), vals, 0)
    check(dt .. " receive", ok and r[1]:dtype() == dt, why or r[1]:dtype())
    ok, why = C.close(r[2]:totable(), { 5, 7, 9 }, 0)
    check(dt .. " compute on it and send back in the same plan", ok, why)
  end
end

-- float16 values travel exactly: 2^-14 (the smallest normal), 65504, -0.5
if rank <= 1 then
  local g = npu.Graph()
  local want = { 2 ^ -14, 65504, -0.5 }
  local sess
  if rank == 0 then
    local x = g:placeholder("float16", { 3 }, "x")
    local s = hccl.send(x, 1, 1)
    sess = npu.Session { graph = g }
    sess:run(s, { [x] = npu.tensor(want, "float16") })
    check("float16 extremes sent", true)
  else
    local y = hccl.receive({ 3 }, "float16", 1, 0, nil, g)
    sess = npu.Session { graph = g }
    local ok, why = C.close(sess:run(y):totable(), want, 0)
    check("float16 extremes arrive exactly", ok, why)
  end
  sess:close()
end

-- inside an iterations_per_loop loop: rank 0 sends each batch (0..7 by 2), rank 1 adds what
-- it receives and its own batch: 28 + 28
if rank <= 1 then
  local g = npu.Graph()
  local ds = npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "float32")):batch(2, { drop_remainder = true }):repeat_()
  local b = ds:make_one_shot_iterator(g):get_next()
  local step, total
  if rank == 0 then
    step = hccl.send(b, 7, 1)
  else
    total = g:variable(npu.zeros({}), "total")
    step = npu.assign(total, total + npu.reduce_sum(hccl.receive({ 2 }, "float32", 7, 0, nil, g)) + npu.reduce_sum(b))
  end
  local sess <close> = npu.Session { graph = g, options = { iterations_per_loop = 4, hccl_timeout = 20 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 4)
  if rank == 0 then
    sess:run(loop)
    check("send in an iterations_per_loop loop", true)
  else
    local v = sess:run({ total, loop })[1]:item()
    check("receive in an iterations_per_loop loop", v == 56, v)
  end
end

-- mismatches: shape, then dtype; two sends meeting; both ranks fail naming both; then an
-- exchange works
if rank <= 1 then
  local cases = {
    { "float32", { 3 }, "float32", { 4 }, "NPU_ERR_SHAPE", "rank 0 sends float32 [3] but rank 1 receives float32 [4] (sr_tag 2)" },
    { "int32", { 3 }, "float32", { 3 }, "NPU_ERR_DTYPE", "rank 0 sends int32 [3] but rank 1 receives float32 [3] (sr_tag 2)" },
  }
  for _, c in ipairs(cases) do
    local g = npu.Graph()
    local x = g:placeholder(c[1], c[2], "x")
    local op = rank == 0 and hccl.send(x, 2, 1) or hccl.receive(c[4], c[3], 2, 0, nil, g)
    local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
    local t0 = C.now()
    local ok, err = pcall(sess.run, sess, op, rank == 0 and { [x] = npu.tensor({ 1, 2, 3 }, c[1]) } or nil)
    local name = rank == 0 and "hcom_send 'HcomSend'" or "hcom_receive 'HcomReceive'"
    check(c[5] .. " mismatch fails, naming both", not ok and tostring(err):find(c[5], 1, true)
      and tostring(err):find(name, 1, true) and tostring(err):find(c[6], 1, true) and C.now() - t0 < 10, err)
  end
  do -- both send to each other at once: each gets the other's header, not an answer
    local g = npu.Graph()
    local x = g:placeholder("float32", { 2 }, "x")
    local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
    local ok, err = pcall(sess.run, sess, hccl.send(x, 11, 1 - rank), { [x] = npu.tensor({ 1, 2 }) })
    check("two sends to each other fail", not ok and tostring(err):find(("rank %d sends to rank %d with sr_tag 11 at the same time"):format(rank, 1 - rank), 1, true), err)
  end
  local g = npu.Graph()
  local x = g:placeholder("int32", { 2 }, "x")
  local op = rank == 0 and hccl.send(x, 2, 1) or hccl.receive({ 2 }, "int32", 2, 0, nil, g)
  local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
  local r = sess:run(op, rank == 0 and { [x] = npu.tensor({ 7, 8 }, "int32") } or nil)
  check("an exchange after the mismatches", rank == 0 or (r and r:totable()[2] == 8), r and r:totable()[2])
end

-- a receive whose sender never sends: NPU_ERR_TIMEOUT within hccl_timeout + 1 s; the session
-- still runs what needs no communication, and a collective afterwards (the ranks in step)
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local s = hccl.allreduce(x, "sum")
  local timeout = 2
  local sess <close> = npu.Session { graph = g, options = { hccl_timeout = rank == 1 and timeout or 20 } }
  if rank == 1 then
    local r = hccl.receive({ 2 }, "float32", 9, 0, nil, g)
    local t0 = C.now()
    local ok, err = pcall(sess.run, sess, r)
    local took = C.now() - t0
    check("a receive with no sender times out", not ok and tostring(err):find("NPU_ERR_TIMEOUT", 1, true)
      and tostring(err):find("hcom_receive 'HcomReceive': rank 1 waited 2000 ms (hccl_timeout) for the send of rank 0", 1, true), err)
    check("within hccl_timeout + 1 s", took >= timeout - 0.1 and took <= timeout + 1, took)
    local v = sess:run(x * 2, { [x] = npu.tensor({ 1, 2 }) }):totable()
    check("the session still runs", v[2] == 4, v[2])
  end
  local v = sess:run(s, { [x] = npu.tensor({ 1, 2 }) }):totable()
  check("a collective after the timeout", v[2] == 2 * size, v[2])
end

-- bad arguments, when the graph is built and (bypassing those checks) when it runs
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local ok, err = pcall(hccl.send, x, 1, rank)
  check("a self-send is refused", not ok and tostring(err):find(("dest_rank %d is this rank: a rank cannot send to itself"):format(rank), 1, true), err)
  ok, err = pcall(hccl.send, x, 1, size)
  check("dest_rank out of range", not ok and tostring(err):find(("dest_rank %d is out of range: group 'hccl_world_group' has %d ranks"):format(size, size), 1, true), err)
  ok, err = pcall(hccl.receive, { 2 }, "float32", 1, -1, nil, g)
  check("src_rank out of range", not ok and tostring(err):find("src_rank -1 is out of range", 1, true), err)
  local bad = g:op("hcom_send", { x }, { sr_tag = 1, dest_rank = rank })
  local sess <close> = npu.Session { graph = g }
  ok, err = pcall(sess.run, sess, bad, { [x] = npu.tensor({ 1, 2 }) })
  check("a self-send at run time", not ok and tostring(err):find("hcom_send", 1, true)
    and tostring(err):find("is this rank", 1, true), err)
end
