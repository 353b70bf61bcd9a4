-- spec/mpi/collectives.lua — every collective against hand-computed values, for every
-- reduction and dtype, inside a plan and inside an iterations_per_loop loop; bad inputs fail
-- on every rank with errors naming the op, and the ranks go on.  mpirun -np 2 (any N works).
local C = dofile((arg[0]:match("^(.*)/[^/]+$") or ".") .. "/common.lua")
local npu, rank, size, check = C.npu, C.rank, C.size, C.check
local hccl = npu.hccl

-- rank r's x: element i (1..4) is i + 2 r: small integers, exact in every dtype
local function x_of(r) local t = {} for i = 1, 4 do t[i] = i + 2 * r end return t end
local expect = { sum = {}, prod = {}, max = {}, min = {} }
for i = 1, 4 do
  local s, p, mx, mn = 0, 1, -math.huge, math.huge
  for r = 0, size - 1 do
    local v = x_of(r)[i]
    s, p, mx, mn = s + v, p * v, math.max(mx, v), math.min(mn, v)
  end
  expect.sum[i], expect.prod[i], expect.max[i], expect.min[i] = s, p, mx, mn
end

for _, dt in ipairs({ "float32", "float16", "int32" }) do
  local g = npu.Graph()
  local x = g:placeholder(dt, { 4 }, "x")
  local fetch, names = {}, {}
  for _, red in ipairs({ "sum", "prod", "max", "min" }) do
    fetch[#fetch + 1] = hccl.allreduce(x, red)
    names[#names + 1] = "allreduce " .. red
  end
  fetch[#fetch + 1] = hccl.broadcast({ x }, size - 1)[1]
  names[#names + 1] = "broadcast"
  fetch[#fetch + 1] = hccl.allgather(npu.reshape(x, { 2, 2 }), size)
  names[#names + 1] = "allgather"
  local xs = g:placeholder(dt, { 2 * size }, "xs")
  fetch[#fetch + 1] = hccl.reduce_scatter(xs, "sum", size)
  names[#names + 1] = "reduce_scatter"
  local sess <close> = npu.Session { graph = g }
  local xs_val = {}
  for i = 1, 2 * size do xs_val[i] = i * (rank + 1) end
  local r = sess:run(fetch, { [x] = npu.tensor(x_of(rank), dt), [xs] = npu.tensor(xs_val, dt) })
  local want = { expect.sum, expect.prod, expect.max, expect.min, x_of(size - 1) }
  local gathered = {}
  for q = 0, size - 1 do local v = x_of(q) gathered[#gathered + 1] = { v[1], v[2] } gathered[#gathered + 1] = { v[3], v[4] } end
  want[6] = gathered
  local tri = size * (size + 1) / 2 -- sum over ranks of (rank + 1)
  want[7] = { (2 * rank + 1) * tri, (2 * rank + 2) * tri }
  for k = 1, #fetch do
    local ok, why = C.close(r[k]:totable(), want[k], 0)
    check(dt .. " " .. names[k], ok and r[k]:dtype() == dt, why or r[k]:dtype())
  end
end

-- float16 sums are widened, added in float32 and rounded once to float16 (round to nearest,
-- ties to even): rank 0 gives a, rank 1 b, other ranks 0; every a + b is exact in float32 and a
-- float16 tie.  Hand-computed: 1 + 2^-11 -> 1 (even), 1 + 3 2^-11 -> 1 + 2^-9, 2049 -> 2048,
-- 2051 -> 2052, 65520 -> inf (65504 is odd).
do
  local a = { 1, 1 + 2 ^ -10, 2048, 2050, 65504 }
  local b = { 2 ^ -11, 2 ^ -11, 1, 1, 16 }
  local want = { 1, 1 + 2 ^ -9, 2048, 2052, math.huge }
  local mine = {}
  for i = 1, #a do mine[i] = rank == 0 and a[i] or rank == 1 and b[i] or 0 end
  local g = npu.Graph()
  local x = g:placeholder("float16", { #a }, "x")
  local sess <close> = npu.Session { graph = g }
  local got = sess:run(hccl.allreduce(x, "sum"), { [x] = npu.tensor(mine, "float16") }):totable()
  local ok = true
  for i = 1, #a do ok = ok and (size < 2 or got[i] == want[i]) end
  check("float16 allreduce rounds the float32 sum once, ties to even", ok, table.concat(got, ","))
end

-- inside an iterations_per_loop loop: total += allreduce(sum(batch)); batches 0..7 by 2
do
  local g = npu.Graph()
  local ds = npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "float32")):batch(2, { drop_remainder = true }):repeat_()
  local b = ds:make_one_shot_iterator(g):get_next()
  local total = g:variable(npu.zeros({}), "total")
  local step = npu.assign(total, total + hccl.allreduce(npu.reduce_sum(b) * (rank + 1), "sum"))
  local sess <close> = npu.Session { graph = g, options = { iterations_per_loop = 4 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 4)
  local v = sess:run({ total, loop })[1]:item()
  check("allreduce in an iterations_per_loop loop", v == 28 * size * (size + 1) / 2, v)
end

-- bad inputs: every rank fails, naming the op; the ranks then go on
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1 }, "x")
  local s = hccl.allreduce(x, "sum")
  local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
  local t0 = C.now()
  local ok, err = pcall(sess.run, sess, s, { [x] = npu.tensor(rank == 0 and { 1, 2, 3 } or { 1, 2 }) })
  check("mismatched shapes fail on every rank", not ok and tostring(err):find("NPU_ERR_SHAPE", 1, true)
    and tostring(err):find("hcom_allreduce", 1, true) and tostring(err):find("ranks disagree", 1, true)
    and C.now() - t0 < 10, err)
  local v = sess:run(s, { [x] = npu.tensor({ 1, 2 }) }):totable()
  check("the ranks go on after a mismatch", v[2] == 2 * size, v[2])
  local g2 = npu.Graph()
  local y = g2:placeholder("float32", { 2 }, "y")
  local ag = g2:op("hcom_all_gather", { y }, { rank_size = size + 1 })
  local s2 <close> = npu.Session { graph = g2 }
  ok, err = pcall(s2.run, s2, ag, { [y] = npu.tensor({ 1, 2 }) })
  check("rank_size that disagrees with MPI's", not ok and tostring(err):find("hcom_all_gather", 1, true)
    and tostring(err):find(("rank_size %d but MPI has %d ranks"):format(size + 1, size), 1, true), err)
  ok, err = pcall(hccl.allgather, y, size + 1)
  check("rank_size checked when building", not ok and tostring(err):find("rank_size", 1, true), err)
  ok, err = pcall(hccl.allreduce, y, "mean")
  check("unknown reduction", not ok and tostring(err):find("hcom_allreduce", 1, true)
    and tostring(err):find("unknown reduction 'mean'", 1, true), err)
end
