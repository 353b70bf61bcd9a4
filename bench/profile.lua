-- profile.lua — what profiling_mode costs: the same graphs run by a session with profiling on
-- (task_trace l1, and l0 for the loop; training_trace on in the loop: every step timed,
-- trace.json streamed) and one with it off, in one process, blocks of runs of the two sessions interleaved; median times per run,
-- the ratio on / off (1.00 = free) and the cost per profiled step.
--   lua5.4 bench/profile.lua [REPS]      (median of REPS blocks after a warm-up; default 21)
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")

local REPS = tonumber(arg and arg[1]) or 21

local out = os.tmpname()
os.remove(out)

local util = dofile(here .. "/bench/util.lua")

-- Median µs per call of fn(sess) for the sessions on and off, blocks of `block` calls
-- interleaved.
local function compare(on, off, fn, block)
  for _ = 1, 3 do fn(on); fn(off) end
  local t_on, t_off = util.alternate(REPS, function() for _ = 1, block do fn(on) end end,
    function() for _ = 1, block do fn(off) end end)
  return t_on * 1e6 / block, t_off * 1e6 / block
end

-- The two sessions, profiled and not (the caller closes them).
local function sessions(g, opts, level)
  local on_opts, off_opts = { profiling_mode = true,
    profiling_options = '{"output":"' .. out .. '","task_trace":"' .. (level or "l1") .. '"}' }, {}
  for k, v in pairs(opts) do on_opts[k], off_opts[k] = v, v end
  return npu.Session { graph = g, options = on_opts }, npu.Session { graph = g, options = off_opts }
end

local rows = {}
local function report(name, steps, t_on, t_off)
  rows[#rows + 1] = ("%-44s %6d %10.2f %10.2f %7.3fx %9.0f"):format(name, steps, t_off, t_on,
    t_on / t_off, (t_on - t_off) * 1e3 / steps)
end

-- MLP 784-128-128-10, batch 32, constant weights: sess:run from Lua (online inference)
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 32, 784 }, "x")
  local h, width = x, 784
  for i, n in ipairs({ 128, 128, 10 }) do
    local w = g:const(npu.random.normal({ width, n }, { stddev = 0.05, seed = i }))
    local b = g:const(npu.random.normal({ n }, { stddev = 0.05, seed = 10 + i }))
    h = npu.matmul(h, w) + b
    if i < 3 then h = npu.nn.relu(h) end
    width = n
  end
  local y = npu.nn.softmax(h)
  local on, off = sessions(g, { graph_run_mode = 0, precision_mode = "must_keep_origin_dtype",
    export_compile_stat = 0 })
  local feeds = { [x] = npu.random.uniform({ 32, 784 }, { seed = 7 }) }
  local t_on, t_off = compare(on, off, function(s) s:run(y, feeds) end, 200)
  on:run(y, feeds)
  report("MLP 784-128-128-10 b32, sess:run", on:last_plan().steps, t_on, t_off)
  on:close(); off:close()
end

-- relu of a fed 1-element tensor: sess:run with the least work a run can do (the worst ratio)
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1 }, "x")
  local y = npu.nn.relu(x)
  local on, off = sessions(g, { graph_run_mode = 0, export_compile_stat = 0 })
  local feeds = { [x] = npu.tensor({ -1.0 }) }
  local t_on, t_off = compare(on, off, function(s) s:run(y, feeds) end, 5000)
  on:run(y, feeds)
  report("relu(x [1]), sess:run", on:last_plan().steps, t_on, t_off)
  on:close(); off:close()
end

-- a training loop: counter += sum(batch of 8) fed by a dataset, iterations_per_loop 1000:
-- five tiny steps an iteration, the profiler's worst case (trace.json grows by a line a step)
for _, level in ipairs({ "l1", "l0" }) do
  local IPL = 1000
  local g = npu.Graph()
  local ds = npu.data.Dataset.from_tensor_slices(npu.range(0, 4096, 1, "float32"))
    :batch(8, { drop_remainder = true }):repeat_()
  local b = ds:make_one_shot_iterator(g):get_next()
  local total = g:variable(npu.zeros({}), "total")
  local step = npu.assign(total, total + npu.reduce_sum(b))
  local on, off = sessions(g, { iterations_per_loop = IPL, export_compile_stat = 0 }, level)
  local loops = {}
  for _, s in ipairs({ on, off }) do
    s:run(g:global_variables_initializer())
    loops[s] = npu.util.set_iteration_per_loop(s, step, IPL)
  end
  local t_on, t_off = compare(on, off, function(s) s:run({ total, loops[s] }) end, 2)
  on:run({ total, loops[on] })
  report(("dataset loop, iterations_per_loop %d, %s"):format(IPL, level), on:last_plan().steps * IPL, t_on, t_off)
  on:close(); off:close()
end

print(("profiling_mode on vs off, median of %d blocks"):format(REPS))
print(("%-44s %6s %10s %10s %8s %9s"):format("graph", "steps", "off us", "on us", "on/off", "ns/step"))
for _, r in ipairs(rows) do print(r) end
os.execute("rm -rf '" .. out .. "'")
