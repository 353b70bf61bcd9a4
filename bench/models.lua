-- models.lua — latency of each public model (../shared/models or $NPU_MODELS_DIR) at batch 1,
-- float32 (must_keep_origin_dtype, as TensorFlow.js computes) and the inference default
-- (force_fp16), with 1 and 2 device threads, beside the TensorFlow.js timings recorded in each
-- meta.json (`timing.cpu` / `timing.wasm`: median of 5 warm predicts on a 2-vCPU machine,
-- wasm = XNNPACK with SIMD, 1 thread), as ratios: tfjs time / our time, > 1 = faster here.
--   lua5.4 bench/models.lua [REPS]      (median of REPS runs after 3 warm-up runs; default 21)
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local model = require("npu.model")
local core = npu.core

local DIR = os.getenv("NPU_MODELS_DIR") or here .. "/../shared/models"
local REPS = tonumber(arg and arg[1]) or 21
local clock = core.monotonic_time

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- timing.<backend>.median_ms from meta.json (a pattern is enough for this fixed layout).
local function tfjs_ms(meta, backend)
  local timing = meta and meta:match('"timing"%s*:%s*(%b{})')
  local block = timing and timing:match('"' .. backend .. '"%s*:%s*(%b{})')
  return block and tonumber(block:match('"median_ms"%s*:%s*([%d.eE+-]+)'))
end

local util = dofile(here .. "/bench/util.lua")
local median = util.median

local function bench(sess, fetch, feeds)
  for _ = 1, 3 do sess:run(fetch, feeds) end
  local times = {}
  for r = 1, REPS do
    local t0 = clock()
    sess:run(fetch, feeds)
    times[r] = (clock() - t0) * 1e3
  end
  return median(times)
end

local names = util.model_names(DIR)
if #names == 0 then
  print("bench/models.lua: no models in " .. DIR .. " (set NPU_MODELS_DIR)")
  return
end

local pool = core.n_threads()
print(("models at batch 1, median of %d runs (ms); ratio = TensorFlow.js time / ours (> 1: faster here)"):format(REPS))
print(("device pool: %d thread(s); TensorFlow.js: 2-vCPU AMD EPYC VM, cpu backend and wasm (SIMD, 1 thread)"):format(pool))
local header = ("%-26s %9s %9s %9s %9s | %9s %9s | %8s %8s %8s"):format("model", "f32 1t", "f32 2t", "f16 1t",
  "f16 2t", "tfjs cpu", "tfjs wasm", "wasm/1t", "wasm/2t", "cpu/1t")
print(header)
print(("-"):rep(#header))
for _, name in ipairs(names) do
  local ok, g, info = pcall(model.load_model, DIR .. "/" .. name .. "/" .. name .. ".json")
  if not ok then
    print(("%-26s not runnable yet: %s"):format(name, (tostring(g):gsub("^.-NPU_ERR", "NPU_ERR"):sub(1, 90))))
  else
    local feeds = {}
    for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(DIR, name, i - 1)) end
    local res = {}
    for _, pm in ipairs({ "must_keep_origin_dtype", "force_fp16" }) do
      local sess <close> = npu.Session { graph = g, options = { precision_mode = pm } }
      for _, nt in ipairs({ 1, 2 }) do
        core.set_n_threads(nt)
        res[#res + 1] = bench(sess, info.output_names, feeds)
      end
    end
    core.set_n_threads(pool)
    local meta = read(DIR .. "/" .. name .. "/meta.json")
    local cpu, wasm = tfjs_ms(meta, "cpu"), tfjs_ms(meta, "wasm")
    local function ratio(a, b) return a and b and ("%8.2fx"):format(a / b) or "       -" end
    print(("%-26s %9.2f %9.2f %9.2f %9.2f | %9s %9s | %s %s %s"):format(name, res[1], res[2], res[3], res[4],
      cpu and ("%.1f"):format(cpu) or "-", wasm and ("%.1f"):format(wasm) or "-", ratio(wasm, res[1]),
      ratio(wasm, res[2]), ratio(cpu, res[1])))
  end
end
