-- progress.lua — what sess:run's progress function costs an iterations_per_loop loop: the same
-- dataset-fed loop (1000 iterations a run) run without it, with a Lua function every 100
-- iterations, and every iteration; blocks of runs interleaved in one process, median µs per run,
-- the ratio to the run without, and the cost per call.  Unset, the loop pays one NULL test per
-- iteration: bench/progress_instructions.sh counts that in instructions (time cannot see it).
--   lua5.4 bench/progress.lua [REPS]            (median of REPS blocks; default 21)
--   lua5.4 bench/progress.lua count VARIANT N   (N runs of one variant: none, every100, every1;
--                                                for the instruction counts)
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local clock = npu.core.monotonic_time
local median = dofile(here .. "/bench/util.lua").median

local IPL = 1000

-- total += sum(batch): a loop whose iterations are a few short steps, so per-iteration costs show.
local function loop_session()
  local g = npu.Graph()
  local xs = npu.range(0, 64, 1, "float32")
  local ds = npu.data.Dataset.from_tensor_slices(xs):batch(8, { drop_remainder = true }):repeat_()
  local b = ds:make_one_shot_iterator(g):get_next()
  local total = g:variable(npu.zeros({}), "total")
  local step = npu.assign(total, total + npu.reduce_sum(b))
  local sess = npu.Session { graph = g, options = { iterations_per_loop = IPL } }
  sess:run(g:global_variables_initializer())
  return sess, npu.util.set_iteration_per_loop(sess, step, IPL)
end

local calls = 0
local function progress() calls = calls + 1 end
local variants = {
  none = nil,
  every100 = { progress = progress, every = 100 },
  every1 = { progress = progress, every = 1 },
}

if arg[1] == "count" then
  local sess, loop = loop_session()
  local opts = variants[arg[2]]
  if arg[2] ~= "none" and not opts then error("variant: none, every100 or every1") end
  for _ = 1, 3 do sess:run(loop, nil, opts) end -- compiled and warm either way
  for _ = 1, tonumber(arg[3]) do sess:run(loop, nil, opts) end
  sess:close()
  return
end

local REPS = tonumber(arg and arg[1]) or 21
local sess, loop = loop_session()
local order = { "none", "every100", "every1" }
local times = { none = {}, every100 = {}, every1 = {} }
local BLOCK = 20
for _ = 1, 3 do for _, v in ipairs(order) do sess:run(loop, nil, variants[v]) end end
for r = 1, REPS do
  for _, v in ipairs(order) do
    local t0 = clock()
    for _ = 1, BLOCK do sess:run(loop, nil, variants[v]) end
    times[v][r] = (clock() - t0) * 1e6 / BLOCK
  end
end
sess:close()
local base = median(times.none)
print(("progress function on an iterations_per_loop loop of %d, median of %d blocks of %d runs"):format(IPL, REPS, BLOCK))
print(("%-34s %10s %8s %10s"):format("variant", "us/run", "ratio", "ns/call"))
for _, v in ipairs(order) do
  local t = median(times[v])
  local n = v == "every100" and IPL / 100 or v == "every1" and IPL or 0
  print(("%-34s %10.1f %7.3fx %10s"):format(({ none = "none (unset: a NULL test)",
    every100 = "Lua function, every = 100", every1 = "Lua function, every = 1" })[v], t, t / base,
    n > 0 and ("%.0f"):format((t - base) * 1e3 / n) or "-"))
end
