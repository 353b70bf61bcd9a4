-- run_overhead.lua — the cost of one sess:run of a one-node graph from Lua, beside the cost
-- of a bare Lua -> C method call (the floor), printed as times and a ratio.
-- One process, several repetitions, medians.
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")

local REPS, ITERS = 11, 200000
local clock = os.clock

local median = dofile("bench/util.lua").median

local function measure(fn)
  local times = {}
  for r = 1, REPS do
    local t0 = clock()
    fn(ITERS)
    times[r] = (clock() - t0) / ITERS
  end
  return median(times)
end

local t = npu.tensor({ 1.5 })
local floor = measure(function(n) for _ = 1, n do t:ndim() end end)

local g = npu.Graph()
local x = g:placeholder("float32", { 1 }, "x")
local y = npu.nn.relu(x)
local sess = npu.Session { graph = g }
local feeds = { [x] = t }
local fed = measure(function(n) for _ = 1, n do sess:run(y, feeds) end end)

local g2 = npu.Graph()
local c = npu.nn.relu(g2:const(npu.tensor({ -1.0 })))
local sess2 = npu.Session { graph = g2 }
local nofeed = measure(function(n) for _ = 1, n do sess2:run(c) end end)

print(("Lua -> C method call (t:ndim()):         %7.3f us"):format(floor * 1e6))
print(("sess:run(relu(const)), one node, no feed: %7.3f us  (%.1fx a method call)"):format(nofeed * 1e6, nofeed / floor))
print(("sess:run(relu(x), {[x]=t}), one feed:     %7.3f us  (%.1fx a method call)"):format(fed * 1e6, fed / floor))
