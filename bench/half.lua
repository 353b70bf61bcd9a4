-- half.lua — what force_fp16 and allow_mix_precision_bf16 do to time: for each model of
-- ../shared/models (or $NPU_MODELS_DIR) at batch 1 and for two synthetic graphs on 4 Mi-element
-- tensors (memory traffic, not arithmetic, is their cost), force_fp16 time / float32
-- (must_keep_origin_dtype) time at one device thread.  The sessions live in one process and
-- their runs take turns; each is the median of REPS runs after 3 warm-up runs.  < 1: force_fp16
-- is faster.
--   lua5.4 bench/half.lua [REPS] [NAME ...]        (default 21; all models and both graphs)
-- Columns, each a child process of this script (--rows prints machine-readable lines), run in
-- turn three times (NPU_HALF_ROUNDS=n: n times, for a loaded machine), the median ratio printed:
--   F16C     this build, float16 conversions through F16C where the CPU has it
--   scalar   this build with NPU_NO_F16C=1: half.h's scalar conversions (CPUs without F16C)
--   no dpbf16  (second table only) this build with NPU_NO_AVX512BF16=1: no AVX512_BF16 dot
--            products, bfloat16 widened to float32 as on CPUs without them
--   before   only if NPU_BASELINE_ROOT names the root of another build (its npu/core.so, e.g.
--            one of the commit before this work): that build, for before/after in one run
-- Synthetic graphs ("eltwise": x plus six constants, h = h + c six times (fused into one
-- program), then a sum over all elements; "eltwise+pool": the same chain on a 1x1024x1024x4
-- map, then an 8x8 average pool) feed and fetch float32 as every graph does; an add per 4 or 2
-- bytes read, so the conversions, not the arithmetic, decide what float16 costs.  "mlp-head":
-- dense 2048 -> 4096 (bias, relu) -> 1000, softmax, at batch 1: matrix-vector products whose
-- 12 Mi weights (48 MiB in float32, 24 in float16) are read once a run.
-- A third session runs under allow_mix_precision_bf16 (bfloat16 where the mode's lists allow,
-- float32 elsewhere), its runs alternating with the other two; a second table gives its time
-- against float32 (the same rounds and configurations), each mode's plan total (explain's
-- memory.total_bytes) and each mode's largest output error against the reference outputs
-- (output_<j>.npy beside the model; for the synthetic graphs, the float32 session's outputs),
-- divided by the reference's peak |value|: the accuracy each mode costs.
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

local MODES = { "must_keep_origin_dtype", "force_fp16", "allow_mix_precision_bf16" }

-- The reference outputs of a shared model (a list of tensors), or nil (a synthetic graph).
local function references(name)
  local refs, j = {}, 0
  while true do
    local path = ("%s/%s/output_%d.npy"):format(DIR, name, j)
    local f = io.open(path, "rb")
    if not f then break end
    f:close()
    j = j + 1
    refs[j] = npu.load(path)
  end
  return j > 0 and refs or nil
end

-- The largest |y - ref| over all outputs, divided by the largest |ref| (the absolute error
-- when every ref is 0); math.huge when a value is not finite where its reference is.
local function rel_error(ys, refs)
  local err, peak = 0, 0
  for j, r in ipairs(refs) do
    local a = ys[j]:reshape({ ys[j]:numel() }):totable()
    local b = r:reshape({ r:numel() }):totable()
    for i = 1, #b do
      local d = math.abs(a[i] - b[i])
      if d ~= d and b[i] == b[i] then d = math.huge end
      if d > err then err = d end
      if math.abs(b[i]) > peak then peak = math.abs(b[i]) end
    end
  end
  return peak > 0 and err / peak or err
end

-- One model: for each of MODES the median ms (runs of the three sessions in turn), the plan
-- total in bytes and the output error against the references.
local function measure(name)
  local ok, g, fetch, feeds = pcall(load, name)
  if not ok then return nil end
  local sessions, times, res = {}, {}, {}
  for i, mode in ipairs(MODES) do sessions[i] = npu.Session { graph = g, options = { precision_mode = mode } } end
  for _ = 1, 3 do
    for _, s in ipairs(sessions) do s:run(fetch, feeds) end
  end
  -- util.alternate's discipline for three: each rep runs every session once, in turn
  local clock = core.monotonic_time
  for i = 1, #MODES do times[i] = {} end
  for r = 1, REPS do
    for i, s in ipairs(sessions) do
      local t0 = clock()
      s:run(fetch, feeds)
      times[i][r] = clock() - t0
    end
  end
  local outs = {}
  for i, s in ipairs(sessions) do outs[i] = s:run(fetch, feeds) end
  local refs = references(name) or outs[1]
  for i, s in ipairs(sessions) do
    res[i] = { ms = median(times[i]) * 1e3, bytes = s:explain(fetch, feeds).memory.total_bytes,
      err = rel_error(outs[i], refs) }
    s:close()
  end
  return res
end

if ROWS_ONLY then
  core.set_n_threads(1)
  for _, name in ipairs(names) do
    local res = measure(name)
    if res then
      local f = { name }
      for _, x in ipairs(res) do f[#f + 1] = ("%.4f\t%d\t%.3e"):format(x.ms, x.bytes, x.err) end
      print(table.concat(f, "\t"))
    end
  end
  return
end

local script = arg[0]
local configs = { { label = "F16C", env = "" }, { label = "scalar", env = "NPU_NO_F16C=1 " },
  -- kernels that would compute on bfloat16 with AVX512_BF16 (npuK_bf16dot) widen instead:
  -- the bf16 table's column for this build without its native bfloat16 kernels
  { label = "no dpbf16", env = "NPU_NO_AVX512BF16=1 ", bf16_only = true } }
local base = os.getenv("NPU_BASELINE_ROOT")
if base then configs[#configs + 1] = { label = "before", env = ("NPU_MODULE_ROOT='%s' "):format(base) } end
local argv = { tostring(REPS) }
for _, n in ipairs(names) do argv[#argv + 1] = ("'%s'"):format(n) end

-- rows[name][label] = { ratios, f32 times, f16 times, bf16 ratios and times, each mode's plan
-- bytes and error (the last round's: they do not change from run to run) }
local rows = {}
local ROUNDS = tonumber(os.getenv("NPU_HALF_ROUNDS") or "") or 3
for _ = 1, ROUNDS do
  for _, c in ipairs(configs) do
    local p = io.popen(("%slua5.4 '%s' --rows %s"):format(c.env, script, table.concat(argv, " ")))
    for line in p:lines() do
      local f = {}
      for x in line:gmatch("[^\t]+") do f[#f + 1] = x end
      if #f == 10 then
        local name, a, b, c16 = f[1], tonumber(f[2]), tonumber(f[5]), tonumber(f[8])
        rows[name] = rows[name] or {}
        local r = rows[name][c.label] or { ratio = {}, f32 = {}, f16 = {}, bratio = {}, bf16 = {} }
        rows[name][c.label] = r
        r.ratio[#r.ratio + 1], r.bratio[#r.bratio + 1] = b / a, c16 / a
        r.f32[#r.f32 + 1], r.f16[#r.f16 + 1], r.bf16[#r.bf16 + 1] = a, b, c16
        r.bytes = { tonumber(f[3]), tonumber(f[6]), tonumber(f[9]) }
        -- "%.3e" of an overflow (math.huge) reads "inf", which tonumber does not take back
        local function err(x) return tonumber(x) or (x:match("inf") and math.huge) or 0 / 0 end
        r.err = { err(f[4]), err(f[7]), err(f[10]) }
      end
    end
    p:close()
  end
end

-- One table: per model, the float32 and `key` median times (ms, column `label`), the median
-- `ratio` of each configuration that keep(c) accepts, then extra(r)'s cells under extra_head.
local function print_table(label, key, ratio, keep, extra_head, extra)
  local head = ("%-26s %9s %9s"):format("model", "f32 ms", label)
  for _, c in ipairs(configs) do
    if keep(c) then head = head .. (" %9s"):format(c.label) end
  end
  head = head .. extra_head
  print(head)
  print(("-"):rep(#head))
  for _, name in ipairs(names) do
    local r = rows[name]
    if not r or not r.F16C then
      print(("%-26s not runnable"):format(name))
    else
      local line = ("%-26s %9.3f %9.3f"):format(name, median(r.F16C.f32), median(r.F16C[key]))
      for _, c in ipairs(configs) do
        if keep(c) then
          line = line .. (r[c.label] and ("   %6.3fx"):format(median(r[c.label][ratio])) or "         -")
        end
      end
      print(line .. extra(r))
    end
  end
end

print(("force_fp16 time / float32 time, one device thread, median of %d alternating runs, then of %d rounds"):format(REPS, ROUNDS))
print_table("f16 ms", "f16", "ratio", function(c) return not c.bf16_only end, "",
  function() return "" end)

print()
print(("allow_mix_precision_bf16 (bf16) against float32 (f32) and force_fp16 (f16), the same runs:"
  .. " time ratio per configuration, plan total (explain's memory.total_bytes, KiB), largest output"
  .. " error / peak |reference| (the models' output_<j>.npy; the synthetic graphs' float32 outputs)"))
print_table("bf16 ms", "bf16", "bratio", function() return true end,
  (" %8s %8s %8s %9s %9s %9s"):format("f32 KiB", "f16 KiB", "bf16 KiB", "f32 err", "f16 err", "bf16 err"),
  function(r)
    local b, e = r.F16C.bytes, r.F16C.err
    return (" %8d %8d %8d %9.2g %9.2g %9.2g"):format(b[1] // 1024, b[2] // 1024, b[3] // 1024,
      e[1], e[2], e[3])
  end)
