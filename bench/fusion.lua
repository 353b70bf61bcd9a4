-- fusion.lua — what the fusion passes (csrc/compile/passes.def) buy: the same graphs run with
-- every pass on (the default) and with a fusion_switch_file turning ALL of them off, in one
-- process, runs of the two sessions interleaved; median times and the ratio off / on (> 1:
-- fusion is faster).  float32 (must_keep_origin_dtype) so only fusion differs.
--   lua5.4 bench/fusion.lua [REPS]      (median of REPS runs after 5 warm-up runs; default 51)
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local model = require("npu.model")
local core = npu.core

local DIR = os.getenv("NPU_MODELS_DIR") or here .. "/../shared/models"
local REPS = tonumber(arg and arg[1]) or 51

local off_file = os.tmpname()
do
  local f = assert(io.open(off_file, "w"))
  f:write('{"Switch":{"GraphFusion":{"ALL":"off"},"UBFusion":{"ALL":"off"}}}\n')
  f:close()
end

local util = dofile(here .. "/bench/util.lua")

-- Median ms of sess_on and sess_off running fetch with feeds, runs interleaved.
local function compare(g, fetch, feeds)
  local base = { precision_mode = "must_keep_origin_dtype", export_compile_stat = 0 }
  local opts_off = { fusion_switch_file = off_file }
  for k, v in pairs(base) do opts_off[k] = v end
  local on <close> = npu.Session { graph = g, options = base }
  local off <close> = npu.Session { graph = g, options = opts_off }
  for _ = 1, 5 do on:run(fetch, feeds); off:run(fetch, feeds) end
  local t_on, t_off = util.alternate(REPS, function() on:run(fetch, feeds) end,
    function() off:run(fetch, feeds) end)
  return t_on * 1e3, t_off * 1e3, on:last_plan().steps, off:last_plan().steps
end

local rows = {}
local function report(name, g, fetch, feeds)
  local on, off, s_on, s_off = compare(g, fetch, feeds)
  rows[#rows + 1] = ("%-34s %5d %5d %10.3f %10.3f %7.2fx"):format(name, s_off, s_on, off, on, off / on)
end

-- MLP 784-256-256-10, batch 64, constant weights (an inference graph)
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 64, 784 }, "x")
  local h, width = x, 784
  for i, n in ipairs({ 256, 256, 10 }) do
    local w = g:const(npu.random.normal({ width, n }, { stddev = 0.05, seed = i }), nil, "w" .. i)
    local b = g:const(npu.random.normal({ n }, { stddev = 0.1, seed = 10 + i }), nil, "b" .. i)
    h = npu.nn.bias_add(h:matmul(w), b)
    if i < 3 then h = npu.nn.relu(h) end
    width = n
  end
  report("mlp 784-256-256-10 b64", g, npu.nn.softmax(h), { [x] = npu.random.normal({ 64, 784 }, { seed = 7 }) })
end

-- An elementwise chain on 1M elements: ((x * s + t) relu6) * x2 - 1, tanh
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1024, 1024 }, "x")
  local x2 = g:placeholder("float32", { 1024, 1024 }, "x2")
  local s = g:const(npu.random.normal({ 1024 }, { seed = 1 }))
  local t = g:const(npu.random.normal({ 1024 }, { seed = 2 }))
  local y = npu.tanh(npu.relu6(x * s + t) * x2 - 1)
  report("eltwise chain 5 ops, 1M floats", g, y, {
    [x] = npu.random.normal({ 1024, 1024 }, { seed = 3 }), [x2] = npu.random.normal({ 1024, 1024 }, { seed = 4 }) })
end

-- conv2d + batch norm (constant mul/add) + relu, 3 layers at 64x64x32, batch 8
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 8, 64, 64, 32 }, "x")
  local h = x
  for i = 1, 3 do
    local w = g:const(npu.random.normal({ 3, 3, 32, 32 }, { stddev = 0.1, seed = i }))
    local scale = g:const(npu.random.uniform({ 32 }, { minval = 0.5, maxval = 1.5, seed = 20 + i }))
    local shift = g:const(npu.random.normal({ 32 }, { stddev = 0.1, seed = 30 + i }))
    h = npu.nn.relu(npu.conv2d(h, w, { padding = "SAME" }) * scale + shift)
  end
  report("conv+bn+relu x3 b8 64x64x32", g, h, { [x] = npu.random.normal({ 8, 64, 64, 32 }, { seed = 9 }) })
end

-- imported models (batch 1)
for _, name in ipairs(util.model_names(DIR)) do
  local g, info = model.load_model(DIR .. "/" .. name .. "/" .. name .. ".json")
  local feeds = {}
  for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(DIR, name, i - 1)) end
  report("model " .. name, g, info.output_names, feeds)
end
os.remove(off_file)

print(("fusion on vs ALL off (fusion_switch_file), float32, median of %d interleaved runs, %d device thread(s)")
  :format(REPS, core.n_threads()))
print(("%-34s %5s %5s %10s %10s %8s"):format("graph", "steps", "fused", "off ms", "on ms", "off/on"))
for _, r in ipairs(rows) do print(r) end
