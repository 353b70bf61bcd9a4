-- spec/mpi/early_exit.lua — the last rank leaves after one collective; the others' next
-- collective fails within hccl_timeout + 1 s with NPU_ERR_TIMEOUT naming it, their session
-- still runs what needs no collective, and later collectives fail at once.
local C = dofile((arg[0]:match("^(.*)/[^/]+$") or ".") .. "/common.lua")
local npu, rank, size, check = C.npu, C.rank, C.size, C.check
local g = npu.Graph()
local x = g:placeholder("float32", { 3 }, "x")
local s = npu.hccl.allreduce(x, "sum")
local y = x * 2
local timeout = tonumber(os.getenv("TIMEOUT_S") or "2")
local sess <close> = npu.Session { graph = g, options = { hccl_timeout = timeout } }
local v = sess:run(s, { [x] = npu.tensor({ 1, 2, 3 }) }):totable()
check("first allreduce", v[1] == size, v[1])
if rank == size - 1 then
  check("leaves early", true)
  os.exit(0)
end
local t0 = C.now()
local ok, err = pcall(sess.run, sess, s, { [x] = npu.tensor({ 1, 2, 3 }) })
local took = C.now() - t0
check("times out", not ok and tostring(err):find("NPU_ERR_TIMEOUT", 1, true)
  and tostring(err):find("hcom_allreduce", 1, true) and tostring(err):find("hccl_timeout", 1, true)
  and tostring(err):find("rank " .. (size - 1), 1, true), err)
check("within hccl_timeout + 1 s", took >= timeout - 0.1 and took <= timeout + 1, took)
local w = sess:run(y, { [x] = npu.tensor({ 1, 2, 3 }) }):totable()
check("the session still runs", w[3] == 6, w[3])
ok, err = pcall(sess.run, sess, s, { [x] = npu.tensor({ 1, 2, 3 }) })
check("later collectives fail at once", not ok and tostring(err):find("out of step", 1, true), err)
