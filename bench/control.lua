-- control.lua — what control flow costs on the device: a while_loop of N tiny iterations
-- (i < n; i + 1; s + x) per iteration, beside the same N steps written out straight in a
-- static graph (the unrolled twin), and a cond beside the branch alone.  One process,
-- several repetitions, medians; ratios printed.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")

local REPS = 15
local clock = os.clock

local median = dofile("bench/util.lua").median

local function measure(fn, inner)
  local times = {}
  for r = 1, REPS do
    local t0 = clock()
    for _ = 1, inner do fn() end
    times[r] = (clock() - t0) / inner
  end
  return median(times)
end

local N = 1000
-- the loop
local g = npu.Graph()
local _ <close> = g:as_default()
local n = g:placeholder("int32", {}, "n")
local x = g:placeholder("float32", {}, "x")
local r = npu.while_loop(function(i, s) return npu.less(i, n) end,
  function(i, s) return i + 1, s + x end, { 0, 0.0 })
local sess = npu.Session { graph = g }
local feeds = { [n] = npu.tensor(N, "int32"), [x] = npu.tensor(1.0) }
assert(sess:run(r[2], feeds):item() == N)
local feeds0 = { [n] = npu.tensor(0, "int32"), [x] = npu.tensor(1.0) }
local t_loop = measure(function() sess:run(r[2], feeds) end, 20)
local t_empty = measure(function() sess:run(r[2], feeds0) end, 200)
local per_iter = (t_loop - t_empty) / N

-- the unrolled twin: N adds in a static plan (no loop, no counter)
local g2 = npu.Graph()
local x2 = g2:placeholder("float32", {}, "x")
local s2 = g2:const(npu.tensor(0.0))
for _ = 1, N do s2 = s2 + x2 end
-- fusion would merge the chain into one step: switched off, it is N steps, as in the loop
local off_file = os.tmpname()
do
  local f = assert(io.open(off_file, "w"))
  f:write('{"Switch":{"GraphFusion":{"ALL":"off"},"UBFusion":{"ALL":"off"}}}\n')
  f:close()
end
local sess2 = npu.Session { graph = g2, options = { fusion_switch_file = off_file } }
local feeds2 = { [x2] = npu.tensor(1.0) }
assert(sess2:run(s2, feeds2):item() == N)
local t_straight = measure(function() sess2:run(s2, feeds2) end, 20)
os.remove(off_file)

-- cond around a small matmul, beside the matmul alone
local g3 = npu.Graph()
local a = g3:placeholder("float32", { 16, 16 }, "a")
local p = g3:placeholder("bool", {}, "p")
local y = npu.cond(p, function() return npu.matmul(a, a) end, function() return a end)
local plain = npu.matmul(a, a)
local sess3 = npu.Session { graph = g3 }
local av = npu.random.uniform({ 16, 16 }, { seed = 1 })
local f3 = { [a] = av, [p] = npu.tensor(true, "bool") }
local t_cond = measure(function() sess3:run(y, f3) end, 2000)
local t_plain = measure(function() sess3:run(plain, { [a] = av }) end, 2000)

print(("while_loop, %d iterations (less, add, add):   %8.1f us a run, %6.3f us an iteration"):format(
  N, t_loop * 1e6, per_iter * 1e6))
print(("the %d adds unrolled, a static plan, unfused: %8.1f us a run, %6.3f us an add  (loop/unrolled %.2fx)"):format(
  N, t_straight * 1e6, t_straight / N * 1e6, t_loop / t_straight))
print(("cond(p, matmul 16x16, identity):               %8.2f us  (matmul alone %.2f us, %.2fx)"):format(
  t_cond * 1e6, t_plain * 1e6, t_cond / t_plain))
