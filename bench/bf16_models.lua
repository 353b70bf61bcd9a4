-- bf16_models.lua — what allow_mix_precision_bf16 does to time now that convolutions compute
-- on bfloat16 as stored (kernels/conv_bf16.c, algorithm direct_bf16): for the CNN of
-- bench_cnn (28x28x1 -> conv 3x3x32 + relu + pool -> conv 3x3x64 + relu + pool -> dense 10,
-- batch 32) and each model of ../shared/models (or $NPU_MODELS_DIR) at its batch-1 input,
-- allow_mix_precision_bf16 time / float32 (must_keep_origin_dtype) time at one device thread.
-- Both sessions live in one process and their runs alternate; each time is the median of REPS
-- runs after 3 warm-up runs.  < 1: bfloat16 is faster.
--   lua5.4 bench/bf16_models.lua [REPS] [NAME ...]      (default 21; the CNN and all models)
-- Columns: f32 ms; "native": this process (VDPBF16PS where the CPU has it); "widening": the
-- same in a child process with NPU_NO_AVX512BF16=1 (the kernels widening bfloat16 to float32,
-- as before this work); convs: the plan's convolution steps, and how many run direct_bf16.
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local model = require("npu.model")
local util = dofile(here .. "/bench/util.lua")

local DIR = os.getenv("NPU_MODELS_DIR") or here .. "/../shared/models"
local ROWS_ONLY, REPS, names = false, 21, {}
for _, a in ipairs(arg or {}) do
  if a == "--rows" then ROWS_ONLY = true
  elseif tonumber(a) then REPS = tonumber(a)
  else names[#names + 1] = a end
end
if #names == 0 then
  names = { "cnn" }
  for _, n in ipairs(util.model_names(DIR)) do names[#names + 1] = n end
end

local function cnn()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 32, 28, 28, 1 }, "x")
  local h = x
  for i, c in ipairs({ { 1, 32 }, { 32, 64 } }) do
    local w = g:const(npu.random.normal({ 3, 3, c[1], c[2] }, { stddev = 0.2, seed = i }))
    local b = g:const(npu.random.normal({ c[2] }, { stddev = 0.1, seed = 10 + i }))
    h = npu.nn.relu(npu.nn.bias_add(npu.nn.conv2d(h, w, { padding = "SAME" }), b))
    h = npu.nn.max_pool(h, { ksize = 2, strides = 2, padding = "VALID" })
  end
  h = h:reshape({ 32, 7 * 7 * 64 })
  local wd = g:const(npu.random.normal({ 7 * 7 * 64, 10 }, { stddev = 0.05, seed = 3 }))
  local y = npu.nn.softmax(npu.matmul(h, wd))
  return g, { y }, { [x] = npu.random.uniform({ 32, 28, 28, 1 }, { seed = 4 }) }
end

local function load(name)
  if name == "cnn" then return cnn() end
  local g, info = model.load_model(("%s/%s/%s.json"):format(DIR, name, name))
  local feeds, fetch = {}, {}
  for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(DIR, name, i - 1)) end
  for _, e in ipairs(info.outputs) do fetch[#fetch + 1] = e.name end
  return g, fetch, feeds
end

-- One model: float32 ms, bfloat16 / float32, convolution steps, of which direct_bf16.
local function measure(name)
  local ok, g, fetch, feeds = pcall(load, name)
  if not ok then return nil, tostring(g) end
  local f32 <close> = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local bf <close> = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16" } }
  local n_conv, n_native = 0, 0
  for _, s in ipairs(bf:explain(fetch, feeds).steps) do
    if s.op == "conv2d" or s.op == "fused_conv2d" then
      n_conv = n_conv + 1
      if s.algo == "direct_bf16" then n_native = n_native + 1 end
    end
  end
  for _ = 1, 3 do f32:run(fetch, feeds); bf:run(fetch, feeds) end
  local a, b = util.alternate(REPS, function() f32:run(fetch, feeds) end, function() bf:run(fetch, feeds) end)
  return a * 1e3, b / a, n_conv, n_native
end

npu.core.set_n_threads(1)
if ROWS_ONLY then
  for _, n in ipairs(names) do
    local ms, r = measure(n)
    if ms then print(("row %s %.4f %.4f"):format(n, ms, r)) end
  end
  os.exit(0)
end

-- the widening column: this script again, in a child with NPU_NO_AVX512BF16=1
local child = {}
do
  local cmd = ("NPU_NO_AVX512BF16=1 lua5.4 %q --rows %d %s"):format(arg[0], REPS, table.concat(names, " "))
  local p = io.popen(cmd)
  for line in p:lines() do
    local n, _, r = line:match("^row (%S+) (%S+) (%S+)$")
    if n then child[n] = tonumber(r) end
  end
  p:close()
end

print(("allow_mix_precision_bf16 time / float32 time, one device thread, medians of %d alternating runs"):format(REPS))
print(("%-26s %9s %7s %9s %8s"):format("model", "f32 ms", "native", "widening", "convs"))
for _, n in ipairs(names) do
  local ms, r, nc, nn = measure(n)
  if ms then
    print(("%-26s %9.3f %7.3f %9s %4d/%-3d"):format(n, ms, r, child[n] and ("%.3f"):format(child[n]) or "-", nn, nc))
  else
    print(("%-26s skipped: %s"):format(n, r))
  end
end
