-- memory.lua — what memory planning and the precision mode do to a model's memory and speed:
-- for each model, float32 (must_keep_origin_dtype) and force_fp16, with planning on and off,
-- the plan's memory as sess:explain reports it (arena, buffers of its own, constants, total)
-- beside the bytes the context really holds once the session has run (accounted allocator:
-- live bytes after the first run less before the session), and the median latency.
--   lua5.4 bench/memory.lua [REPS] [MODEL ...]   (default 21 runs after 3 warm-up; blazeface,
--                                                  emotion and mobileface of ../shared/models)
-- Planning is switched by NPU_MEMORY_PLAN=0, read when a session is created; Lua cannot set
-- the environment, so each side runs in a child process of this script (--rows prints one
-- machine-readable line per configuration), on and off alternating three times.
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local model = require("npu.model")
local core = npu.core

local DIR = os.getenv("NPU_MODELS_DIR") or here .. "/../shared/models"
local ROWS_ONLY = false
local REPS = 21
local names = {}
for _, a in ipairs(arg or {}) do
  if a == "--rows" then ROWS_ONLY = true
  elseif tonumber(a) then REPS = tonumber(a)
  else names[#names + 1] = a end
end
if #names == 0 then names = { "blazeface", "emotion", "mobileface" } end
local MODES = { "must_keep_origin_dtype", "force_fp16" }
local clock = core.monotonic_time

local median = dofile(here .. "/bench/util.lua").median

-- One row: model, mode, explain's memory, accounted bytes held, latency.
local function measure(name, mode)
  local json = ("%s/%s/%s.json"):format(DIR, name, name)
  local ok, g, info = pcall(model.load_model, json)
  if not ok then return nil, tostring(g) end
  local feeds = {}
  for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(DIR, name, i - 1)) end
  collectgarbage()
  collectgarbage()
  local before = core.live_bytes()
  local sess <close> = npu.Session { graph = g, options = { precision_mode = mode } }
  local outs = sess:run(info.output_names, feeds)
  local held = core.live_bytes() - before
  local m = sess:explain(info.output_names, feeds).memory
  for _ = 1, 3 do outs = sess:run(info.output_names, feeds) end
  local times = {}
  for r = 1, REPS do
    local t0 = clock()
    sess:run(info.output_names, feeds)
    times[r] = (clock() - t0) * 1e3
  end
  return { name = name, mode = mode, planning = m.planning, arena = m.arena_bytes, own = m.own_bytes,
    const = m.constant_bytes, total = m.total_bytes, planned = m.planned_bytes, peak = m.live_peak_bytes,
    held = held, ms = median(times) }
end

local FIELDS = { "name", "mode", "planning", "arena", "own", "const", "total", "planned", "peak", "held", "ms" }

local function encode(r)
  local t = {}
  for i, f in ipairs(FIELDS) do t[i] = tostring(r[f]) end
  return table.concat(t, "\t")
end

local function decode(line)
  local r, i = {}, 1
  for v in (line .. "\t"):gmatch("([^\t]*)\t") do
    local f = FIELDS[i]
    r[f] = (f == "name" or f == "mode") and v or f == "planning" and v == "true" or tonumber(v)
    i = i + 1
  end
  return r
end

if ROWS_ONLY then
  for _, name in ipairs(names) do
    for _, mode in ipairs(MODES) do
      local r = measure(name, mode)
      if r then print(encode(r)) end
    end
  end
  return
end

-- Planning on and off alternate, each in a process of its own (the switch is read from the
-- environment), ROUNDS times; a configuration keeps its best median (the machine's noise only
-- ever adds time).  The memory figures are the same every round.
local ROUNDS = 3
local on, off = {}, {}
for _ = 1, ROUNDS do
  for _, side in ipairs({ { on, "" }, { off, "NPU_MEMORY_PLAN=0 " } }) do
    local cmd = ('%s%s "%s" --rows %d %s'):format(side[2], arg[-1] or "lua5.4", arg[0], REPS,
      table.concat(names, " "))
    local p = io.popen(cmd)
    for line in p:lines() do
      local r = decode(line)
      local key = r.name .. "/" .. r.mode
      if not side[1][key] or r.ms < side[1][key].ms then side[1][key] = r end
    end
    p:close()
  end
end
local rows = {}
for _, name in ipairs(names) do
  for _, mode in ipairs(MODES) do
    local r = on[name .. "/" .. mode]
    if r then rows[#rows + 1] = r else print(("%s (%s): not runnable"):format(name, mode)) end
  end
end

local function kib(b) return b and ("%.0f"):format(b / 1024) or "-" end
print(("memory planning and precision, best of %d medians of %d runs (ms); memory in KiB: plan = explain's"):format(ROUNDS, REPS))
print("total (arena + own buffers + constants + scratch and widening buffers unless in the arena), held =")
print("accounted bytes the session holds after its first run; unplan = planned values' sizes summed, livepk =")
print("the most bytes live at one step (values and step buffers); % = on / off")
local header = ("%-12s %-7s | %8s %8s %8s %8s %8s %8s | %8s %8s %8s | %6s %6s | %7s %7s"):format("model", "mode",
  "arena", "unplan", "livepk", "own", "const", "plan", "plan off", "held", "held off", "plan%", "held%",
  "ms on", "ms off")
print(header)
print(("-"):rep(#header))
local f32 = {}
for _, r in ipairs(rows) do
  local o = off[r.name .. "/" .. r.mode] or {}
  local short = r.mode == "force_fp16" and "fp16" or "fp32"
  if short == "fp32" then f32[r.name] = r end
  print(("%-12s %-7s | %8s %8s %8s %8s %8s %8s | %8s %8s %8s | %5.0f%% %5.0f%% | %7.3f %7.3f"):format(r.name, short,
    kib(r.arena), kib(r.planned), kib(r.peak), kib(r.own), kib(r.const), kib(r.total), kib(o.total), kib(r.held),
    kib(o.held), o.total and 100 * r.total / o.total or 0, o.held and 100 * r.held / o.held or 0, r.ms, o.ms or 0))
end
print()
print("float16 against float32 (planning on): plan bytes and held bytes, f16 / f32")
for _, r in ipairs(rows) do
  local b = f32[r.name]
  if r.mode == "force_fp16" and b then
    print(("%-12s plan %5.1f%%  held %5.1f%%  arena %5.1f%%  latency %5.2fx"):format(r.name, 100 * r.total / b.total,
      100 * r.held / b.held, b.arena > 0 and 100 * r.arena / b.arena or 0, r.ms / b.ms))
  end
end
