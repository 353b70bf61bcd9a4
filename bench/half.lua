-- half.lua — what force_fp16 does to time: for each model of ../shared/models (or
-- $NPU_MODELS_DIR) at batch 1 and for two synthetic graphs on 4 Mi-element tensors (memory
-- traffic, not arithmetic, is their cost), force_fp16 time / float32 (must_keep_origin_dtype)
-- time at one device thread.  Both sessions live in one process and their runs alternate;
-- each is the median of REPS runs after 3 warm-up runs.  < 1: force_fp16 is faster.
--   lua5.4 bench/half.lua [REPS] [NAME ...]        (default 21; all models and both graphs)
-- Columns, each a child process of this script (--rows prints machine-readable lines), run in
-- turn three times (NPU_HALF_ROUNDS=n: n times, for a loaded machine), the median ratio printed:
--   F16C     this build, float16 conversions through F16C where the CPU has it
--   scalar   this build with NPU_NO_F16C=1: half.h's scalar conversions (CPUs without F16C)
--   before   only if NPU_BASELINE_ROOT names the root of another build (its npu/core.so, e.g.
--            one of the commit before this work): that build, for before/after in one run
-- Synthetic graphs ("eltwise": x plus six constants, h = h + c six times (fused into one
-- program), then a sum over all elements; "eltwise+pool": the same chain on a 1x1024x1024x4
-- map, then an 8x8 average pool) feed and fetch float32 as every graph does; an add per 4 or 2
-- bytes read, so the conversions, not the arithmetic, decide what float16 costs.  "mlp-head":
-- dense 2048 -> 4096 (bias, relu) -> 1000, softmax, at batch 1: matrix-vector products whose
-- 12 Mi weights (48 MiB in float32, 24 in float16) are read once a run.
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local model = require("npu.model")
local core = npu.core

local DIR = os.getenv("NPU_MODELS_DIR") or here .. "/../shared/models"
local util = dofile(here .. "/bench/util.lua")
local ROWS_ONLY, REPS, names = false, 21, {}
for _, a in ipairs(arg or {}) do
  if a == "--rows" then ROWS_ONLY = true
  elseif tonumber(a) then REPS = tonumber(a)
  else names[#names + 1] = a end
end
local SYNTHETIC = { "eltwise", "eltwise+pool", "mlp-head" }
if #names == 0 then
  names = util.model_names(DIR)
  for _, n in ipairs(SYNTHETIC) do names[#names + 1] = n end
end

local median = util.median

-- The synthetic graphs: fetch list, feeds.
local function synthetic(name)
  if name == "mlp-head" then -- a classifier head at batch 1: its weights are the traffic
    local g = npu.Graph()
    local x = g:placeholder("float32", { 1, 2048 }, "x")
    local w1 = g:const(npu.random.uniform({ 2048, 4096 }, { minval = -0.05, maxval = 0.05, seed = 1 }))
    local b1 = g:const(npu.random.uniform({ 4096 }, { seed = 2 }))
    local w2 = g:const(npu.random.uniform({ 4096, 1000 }, { minval = -0.05, maxval = 0.05, seed = 3 }))
    local h = npu.relu(npu.nn.bias_add(npu.matmul(x, w1), b1))
    local y = npu.nn.softmax(npu.matmul(h, w2))
    return g, { y }, { [x] = npu.random.uniform({ 1, 2048 }, { seed = 9 }) }
  end
  local N = 4 * 1024 * 1024
  local g = npu.Graph()
  local shape = name == "eltwise" and { N } or { 1, 1024, 1024, 4 }
  local x = g:placeholder("float32", shape, "x")
  local h = x
  for i = 1, 6 do
    local c = g:const(npu.random.uniform(shape, { minval = 0.5, maxval = 1.5, seed = i }))
    h = h + c
  end
  local y = name == "eltwise" and npu.reduce_sum(h, { 0 })
    or npu.nn.avg_pool(h, { ksize = 8, strides = 8, padding = "VALID" })
  return g, { y }, { [x] = npu.random.uniform(shape, { seed = 9 }) }
end

local function load(name)
  for _, s in ipairs(SYNTHETIC) do
    if s == name then return synthetic(name) end
  end
  local g, info = model.load_model(("%s/%s/%s.json"):format(DIR, name, name))
  local feeds = {}
  for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(DIR, name, i - 1)) end
  return g, info.output_names, feeds
end

-- One model: float32 and force_fp16 medians (ms), runs alternating.
local function measure(name)
  local ok, g, fetch, feeds = pcall(load, name)
  if not ok then return nil end
  local f32 <close> = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local f16 <close> = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  for _ = 1, 3 do f32:run(fetch, feeds); f16:run(fetch, feeds) end
  local t32, t16 = util.alternate(REPS, function() f32:run(fetch, feeds) end,
    function() f16:run(fetch, feeds) end)
  return t32 * 1e3, t16 * 1e3
end

if ROWS_ONLY then
  core.set_n_threads(1)
  for _, name in ipairs(names) do
    local a, b = measure(name)
    if a then print(("%s\t%.4f\t%.4f"):format(name, a, b)) end
  end
  return
end

local script = arg[0]
local configs = { { label = "F16C", env = "" }, { label = "scalar", env = "NPU_NO_F16C=1 " } }
local base = os.getenv("NPU_BASELINE_ROOT")
if base then configs[#configs + 1] = { label = "before", env = ("NPU_MODULE_ROOT='%s' "):format(base) } end
local argv = { tostring(REPS) }
for _, n in ipairs(names) do argv[#argv + 1] = ("'%s'"):format(n) end

local rows = {} -- rows[name][label] = { ratios, f32 times, f16 times }
local ROUNDS = tonumber(os.getenv("NPU_HALF_ROUNDS") or "") or 3
for _ = 1, ROUNDS do
  for _, c in ipairs(configs) do
    local p = io.popen(("%slua5.4 '%s' --rows %s"):format(c.env, script, table.concat(argv, " ")))
    for line in p:lines() do
      local name, a, b = line:match("^(.-)\t(%S+)\t(%S+)$")
      if name then
        rows[name] = rows[name] or {}
        local r = rows[name][c.label] or { ratio = {}, f32 = {}, f16 = {} }
        rows[name][c.label] = r
        r.ratio[#r.ratio + 1] = tonumber(b) / tonumber(a)
        r.f32[#r.f32 + 1], r.f16[#r.f16 + 1] = tonumber(a), tonumber(b)
      end
    end
    p:close()
  end
end

print(("force_fp16 time / float32 time, one device thread, median of %d alternating runs, then of %d rounds"):format(REPS, ROUNDS))
local head = ("%-26s %9s %9s"):format("model", "f32 ms", "f16 ms")
for _, c in ipairs(configs) do head = head .. (" %9s"):format(c.label) end
print(head)
print(("-"):rep(#head))
for _, name in ipairs(names) do
  local r = rows[name]
  if not r or not r.F16C then
    print(("%-26s not runnable"):format(name))
  else
    local line = ("%-26s %9.3f %9.3f"):format(name, median(r.F16C.f32), median(r.F16C.f16))
    for _, c in ipairs(configs) do
      line = line .. (r[c.label] and ("   %6.3fx"):format(median(r[c.label].ratio)) or "         -")
    end
    print(line)
  end
end
