-- reduce.lua — what accurate float32 sums cost (docs/numerics.md): reduce_sum and reduce_mean
-- (float64 accumulation) against reduce_max over the same 4096 x 4096 float32 elements (64 MiB):
-- max reads every element once and never rounds, so it is the single-pass, bandwidth-bound
-- yardstick.  Rows (axis 1: contiguous runs, 16 float64 lanes), columns (axis 0: the inner axis
-- kept, rows added as vectors), and everything (one output: one thread, since an output is
-- never split).  One device thread and all of them; the input is a graph variable, so a run
-- is the reduction alone.  Prints the median ms, ns per element, GB/s read and the ratio to max
-- (> 1: slower than max).
--   lua5.4 bench/reduce.lua [REPS]      (median of REPS runs after 2 warm-up runs; default 9)
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local core = npu.core

local REPS = tonumber(arg and arg[1]) or 9
local ROWS, COLS = 4096, 4096
local N = ROWS * COLS
local clock = core.monotonic_time

local median = dofile(here .. "/bench/util.lua").median

local g = npu.Graph()
-- a variable, not a constant: a constant's reductions would be folded when the graph compiles
local x = g:variable(npu.random.uniform({ ROWS, COLS }, { minval = -1, maxval = 1, seed = 1 }), "x")
local SHAPES = { { "rows (axis 1)", { 1 } }, { "columns (axis 0)", { 0 } }, { "all (one output)", { 0, 1 } } }
local OPS = { { "max", npu.reduce_max }, { "sum", npu.reduce_sum }, { "mean", npu.reduce_mean } }
local ys = {}
for si, s in ipairs(SHAPES) do
  ys[si] = {}
  for oi, op in ipairs(OPS) do ys[si][oi] = op[2](x, s[2]) end
end
local sess <close> = npu.Session { graph = g }
sess:run(g:global_variables_initializer())

local function time_ms(y)
  for _ = 1, 2 do sess:run(y) end
  local times = {}
  for r = 1, REPS do
    collectgarbage()
    local t0 = clock()
    sess:run(y)
    times[r] = (clock() - t0) * 1e3
  end
  return median(times)
end

local n_all = core.n_threads()
print(("reduce over %d x %d float32 (%d MiB), median of %d runs"):format(ROWS, COLS, N * 4 >> 20, REPS))
print(("%-18s %-5s %8s %8s %9s %8s %8s"):format("shape", "op", "threads", "ms", "ns/elem", "GB/s", "vs max"))
for _, threads in ipairs(n_all > 1 and { 1, n_all } or { 1 }) do
  core.set_n_threads(threads)
  for si, s in ipairs(SHAPES) do
    local base
    for oi, op in ipairs(OPS) do
      local ms = time_ms(ys[si][oi])
      base = base or ms
      print(("%-18s %-5s %8d %8.2f %9.3f %8.2f %8.2f"):format(s[1], op[1], threads, ms,
        ms * 1e6 / N, N * 4 / (ms * 1e6), ms / base))
    end
  end
end
core.set_n_threads(n_all)
