#!/usr/bin/env lua5.4
-- tfjs_compare.lua — a model run by lua-npu against the reference outputs that
-- tools/tfjs_reference.mjs wrote with TensorFlow.js (docs/import.md).
--
--   lua5.4 tools/tfjs_compare.lua MODEL.json|MODEL.pb REFDIR [OPTION=VALUE ...]
--
-- Feeds REFDIR/input_<i>.npy to the model's i-th input, fetches its outputs in signature order
-- (REFDIR/reference.json's names when present) and prints, per output, the measures of
-- shared/models/README.md: peak = max|r|, max abs = max|y - r|, norm = max abs / peak, max rel
-- over the elements with max(|y|, |r|) >= 1e-3 peak.  Options default to
-- precision_mode=must_keep_origin_dtype (float32 throughout).  Exit status 0 when every output
-- has the reference's dtype and shape, is finite and has norm <= 1e-4 (integer outputs: equal),
-- 1 otherwise, 2 on a usage error.
local script_dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local root = script_dir .. "/.."
do -- the checkout's module when it is built there, else the installed one
  local build = os.getenv("NPU_MODULE_ROOT") or root
  if package.searchpath("npu.core", build .. "/?.so") then
    package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
    package.cpath = build .. "/?.so;" .. package.cpath
  end
end
local npu = require("npu")

local TOL = 1e-4 -- README, "Recommended acceptance test"

local model_path, ref_dir = arg[1], arg[2]
if not model_path or not ref_dir then
  io.stderr:write("usage: tfjs_compare.lua MODEL.json|MODEL.pb REFDIR [OPTION=VALUE ...]\n")
  os.exit(2)
end
local options = { precision_mode = "must_keep_origin_dtype" }
for k = 3, #arg do
  local name, v = arg[k]:match("^([%w_]+)=(.*)$")
  if not name then
    io.stderr:write("tfjs_compare: expected OPTION=VALUE, got '" .. arg[k] .. "'\n")
    os.exit(2)
  end
  if v == "true" or v == "false" then options[name] = v == "true"
  else options[name] = math.tointeger(tonumber(v)) or tonumber(v) or v end
end

local function exists(p)
  local f = io.open(p, "rb")
  if f then f:close() end
  return f ~= nil
end

local g, info = npu.load_model(model_path)
-- output names: reference.json's (tfjs_reference.mjs resolved them), else the signature's
local names = info.output_names
local ref_json = ref_dir .. "/reference.json"
if exists(ref_json) then
  local f = assert(io.open(ref_json, "r"))
  local text = f:read("a")
  f:close()
  local outs = text:match('"outputs":%s*(%b[])')
  if outs then
    names = {}
    -- TensorFlow.js reads a name without ":i" as output 0 of that node
    for name in outs:gmatch('"name":%s*"([^"]+)"') do
      names[#names + 1] = name:find(":%d+$") and name or name .. ":0"
    end
  end
end

-- inputs: reference.json's names and files (tfjs_reference.mjs numbers them in the
-- Placeholders' order, which may differ from the signature's), else the signature's order
local feeds = {}
local ref_inputs = exists(ref_json) and (function()
  local f = assert(io.open(ref_json, "r"))
  local text = f:read("a")
  f:close()
  return text:match('"inputs":%s*(%b[])')
end)()
if ref_inputs then
  for entry in ref_inputs:gmatch("%b{}") do
    local name, file = entry:match('"name":%s*"([^"]+)"'), entry:match('"file":%s*"([^"]+)"')
    feeds[name] = npu.load(ref_dir .. "/" .. file)
  end
else
  for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/input_%d.npy"):format(ref_dir, i - 1)) end
end
-- TensorFlow.js reads a DT_UINT8 (DT_INT8) Placeholder as int32, so tfjs_reference.mjs writes
-- an int32 input; the graph here keeps the model's dtype: the same values, converted (the
-- recipe's integers are 0..255)
for _, e in ipairs(info.inputs) do
  local t = feeds[e.name]
  if t and e.dtype and t:dtype() ~= e.dtype and t:dtype() == "int32" and e.dtype:match("int") then
    feeds[e.name] = t:astype(e.dtype)
  end
end
local sess <close> = npu.Session { graph = g, options = options }
local t0 = os.clock()
local ys = sess:run(names, feeds)
local first_s = os.clock() - t0

local function flat(t) return t:reshape({ t:numel() }):totable() end

local ok = true
print(("%-28s %-8s %-16s %10s %10s %10s %10s"):format("output", "dtype", "shape", "peak", "max abs",
  "norm", "max rel"))
for j, name in ipairs(names) do
  local r = npu.load(("%s/output_%d.npy"):format(ref_dir, j - 1))
  local y = ys[j]
  local shape = "[" .. table.concat(r:shape(), ",") .. "]"
  if y:dtype() ~= r:dtype() or table.concat(y:shape(), ",") ~= table.concat(r:shape(), ",") then
    print(("%-28s got %s [%s], reference %s %s"):format(name, y:dtype(), table.concat(y:shape(), ","),
      r:dtype(), shape))
    ok = false
  else
    local a, b = flat(y), flat(r)
    local peak, max_abs, finite = 0, 0, true
    for k = 1, #b do
      if a[k] ~= a[k] or math.abs(a[k]) == math.huge then finite = false end
      peak = math.max(peak, math.abs(b[k]))
      max_abs = math.max(max_abs, math.abs(a[k] - b[k]))
    end
    local max_rel = 0
    for k = 1, #b do
      local m = math.max(math.abs(a[k]), math.abs(b[k]))
      if m >= 1e-3 * peak and m > 0 then max_rel = math.max(max_rel, math.abs(a[k] - b[k]) / m) end
    end
    local norm = peak > 0 and max_abs / peak or max_abs
    local integer = r:dtype():match("int") ~= nil
    local pass = finite and (integer and max_abs == 0 or not integer and norm <= TOL)
    ok = ok and pass
    print(("%-28s %-8s %-16s %10.4g %10.2g %10.2g %10.2g%s"):format(name, r:dtype(), shape, peak, max_abs,
      norm, max_rel, pass and "" or (finite and "  FAIL" or "  FAIL (non-finite)")))
  end
end
print(("first run (compile + run) %.0f ms CPU; %s"):format(first_s * 1000, ok and "all outputs match"
  or "MISMATCH"))
os.exit(ok and 0 or 1)
