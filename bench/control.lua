-- control.lua — what control flow costs on the device: a while_loop of N tiny iterations
-- (i < n; i + 1; s + x) per iteration, beside the same N steps written out straight in a
-- static graph (the unrolled twin), and a cond beside the branch alone; then fusion inside
-- loops: a while loop of an RNN cell (dense + bias + tanh) and one of conv + bias + relu,
-- fused against a switch file turning every pass off, the two sessions timed in turn in each
-- repetition.  One process, several repetitions, medians; ratios printed.
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
local off_file = os.tmpname() -- kept for the fusion cases below
do
  local f = assert(io.open(off_file, "w"))
  f:write('{"Switch":{"GraphFusion":{"ALL":"off"},"UBFusion":{"ALL":"off"}}}\n')
  f:close()
end
local sess2 = npu.Session { graph = g2, options = { fusion_switch_file = off_file } }
local feeds2 = { [x2] = npu.tensor(1.0) }
assert(sess2:run(s2, feeds2):item() == N)
local t_straight = measure(function() sess2:run(s2, feeds2) end, 20)

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

-- Fusion inside loops: the same graph fused and with every pass off, timed in turn in each
-- repetition (the ratio of each repetition's pair, its median printed).
local function fused_vs_off(name, build, inner)
  local gf, fetch, fd = build()
  local on = npu.Session { graph = gf }
  local off = npu.Session { graph = gf, options = { fusion_switch_file = off_file } }
  local a, b = on:run(fetch, fd), off:run(fetch, fd)
  local d = dofile("spec/support.lua").max_diff(a, b)
  local t_on, t_off, ratio = {}, {}, {}
  for rep = 1, REPS do
    local t0 = clock()
    for _ = 1, inner do on:run(fetch, fd) end
    t_on[rep] = (clock() - t0) / inner
    t0 = clock()
    for _ = 1, inner do off:run(fetch, fd) end
    t_off[rep] = (clock() - t0) / inner
    ratio[rep] = t_on[rep] / t_off[rep]
  end
  print(("%-46s fused %8.1f us, off %8.1f us a run: fused/off %.2fx  (max |d| %.1g)"):format(
    name, median(t_on) * 1e6, median(t_off) * 1e6, median(ratio), d))
end

local ITERS = tonumber(arg and arg[1]) or 50
local function rnn(batch, hidden)
  return function()
    local gr = npu.Graph()
    local _ <close> = gr:as_default()
    local xr = gr:placeholder("float32", { batch, hidden }, "x")
    local nr = gr:placeholder("int32", {}, "n")
    local w = gr:const(npu.random.normal({ hidden, hidden }, { seed = 2, stddev = 1 / math.sqrt(hidden) }))
    local bias = gr:const(npu.random.normal({ hidden }, { seed = 4 }))
    local rr = npu.while_loop(function(i) return npu.less(i, nr) end,
      function(i, h) return i + 1, npu.tanh(npu.nn.bias_add(npu.matmul(h, w), bias)) end, { 0, xr })
    return gr, rr[2], { [xr] = npu.random.normal({ batch, hidden }, { seed = 5 }), [nr] = npu.tensor(ITERS, "int32") }
  end
end
local function conv_loop(hw, c)
  return function()
    local gc = npu.Graph()
    local _ <close> = gc:as_default()
    local xc = gc:placeholder("float32", { 1, hw, hw, c }, "x")
    local nc = gc:placeholder("int32", {}, "n")
    local f = gc:const(npu.random.normal({ 3, 3, c, c }, { seed = 6, stddev = 1 / math.sqrt(9 * c) }))
    local bias = gc:const(npu.random.normal({ c }, { seed = 7, stddev = 0.1 }))
    local rc = npu.while_loop(function(i) return npu.less(i, nc) end,
      function(i, h)
        return i + 1, npu.relu(npu.nn.bias_add(npu.nn.conv2d(h, f, { strides = { 1, 1, 1, 1 }, padding = "SAME" }), bias))
      end, { 0, xc })
    return gc, rc[2], { [xc] = npu.random.normal({ 1, hw, hw, c }, { seed = 8 }), [nc] = npu.tensor(ITERS, "int32") }
  end
end
fused_vs_off(("while: RNN cell batch 1, hidden 256, %d its"):format(ITERS), rnn(1, 256), 5)
fused_vs_off(("while: RNN cell batch 1, hidden 64, %d its"):format(ITERS), rnn(1, 64), 20)
fused_vs_off(("while: RNN cell batch 32, hidden 128, %d its"):format(ITERS), rnn(32, 128), 5)
fused_vs_off(("while: conv3x3+bias+relu 1x32x32x16, %d its"):format(ITERS), conv_loop(32, 16), 2)
os.remove(off_file)
