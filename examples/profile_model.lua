-- profile_model.lua — where a model spends its time, and what its layers compute.
--
-- Two sessions over the same imported model, each with one debugging feature on:
--   1. profiling_mode (docs/profiling.md): the model runs RUNS times, the session closes and
--      writes its profile; the op types and the steps that took the most time are printed
--      from op_statistic.csv and op_summary.csv.
--   2. enable_dump with dump_data "stats" under force_fp16 (docs/debugging.md): one run
--      writes a row of statistics per operator output; the outputs with the largest
--      magnitude — the ones closest to float16's 65504 — and any NaN/Inf are printed.
--
--   lua5.4 examples/profile_model.lua [MODEL] [RUNS]   (MODEL: a TensorFlow.js model.json or
--                                                      a frozen .pb; default: emotion from
--                                                      ../shared/models; RUNS default 20)
--
-- Everything is written under a temporary directory, removed at the end.
local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/checkout.lua") -- runs from any directory, on this checkout's build or the rock
local npu = require("npu")

local models = os.getenv("NPU_MODELS_DIR") or here .. "/../../shared/models"
local model_path = arg[1] or models .. "/emotion/emotion.json"
local runs = tonumber(arg[2] or "20")
assert(runs and runs >= 1, "RUNS must be a number >= 1")

local g, info = npu.load_model(model_path)
local input = info.inputs[1]
local shape = {}
for i, d in ipairs(input.shape) do shape[i] = d < 0 and 1 or d end -- unknown dims: 1
local x = npu.random.uniform(shape, { seed = 1 }):astype(input.dtype)
local feeds = { [input.name] = x }
local fetches = info.output_names
print(("%s: %s, input %s %s"):format(model_path, tostring(g), input.name,
  table.concat(shape, "x")))

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))

-- One CSV line's fields (RFC 4180: a field with a comma or a quote is quoted, "" inside).
local function csv_fields(line)
  local fields, i = {}, 1
  repeat
    local field
    if line:sub(i, i) == '"' then
      local j, parts = i + 1, {}
      while true do
        local q = assert(line:find('"', j, true), "unterminated quote")
        parts[#parts + 1] = line:sub(j, q - 1)
        if line:sub(q + 1, q + 1) ~= '"' then i = q + 1 break end
        parts[#parts + 1] = '"'
        j = q + 2
      end
      field = table.concat(parts)
    else
      local comma = line:find(",", i, true) or #line + 1
      field, i = line:sub(i, comma - 1), comma
    end
    fields[#fields + 1] = field
    i = i + 1 -- past the comma
  until i > #line + 1
  return fields
end

-- A CSV file as a list of rows keyed by the header's names.
local function read_csv(path)
  local rows, header = {}, nil
  for line in io.lines(path) do
    local fields = csv_fields(line)
    if not header then
      header = fields
    else
      local row = {}
      for i, name in ipairs(header) do row[name] = fields[i] end
      rows[#rows + 1] = row
    end
  end
  return rows
end

local function the_one(pattern) -- the single path a shell glob names
  local p = io.popen("ls -d " .. pattern .. " 2>/dev/null")
  local path = p:read("l")
  p:close()
  return assert(path, "nothing matches " .. pattern)
end

-- 1. Profile: time per op type and per step.
do
  local sess <close> = npu.Session { graph = g, options = {
    graph_run_mode = 0,
    profiling_mode = true,
    profiling_options = ('{"output":"%s/prof","task_trace":"on"}'):format(dir),
  } }
  for _ = 1, runs do sess:run(fetches, feeds) end
end -- closing the session writes the profile
local prof = the_one("'" .. dir .. "/prof'/PROF_*")
print(("\nprofile of %d runs (%s):"):format(runs, prof:match("[^/]+$")))
print(("  %-24s %6s %10s %8s %7s"):format("op type", "count", "total us", "avg us", "share"))
local stats = read_csv(prof .. "/op_statistic.csv")
for i = 1, math.min(5, #stats) do
  local r = stats[i]
  print(("  %-24s %6d %10.1f %8.2f %6.1f%%"):format(r.op_type, tonumber(r.count),
    tonumber(r.total_us), tonumber(r.avg_us), tonumber(r.ratio_percent)))
end
local steps = read_csv(prof .. "/op_summary.csv")
table.sort(steps, function(a, b) return tonumber(a.total_us) > tonumber(b.total_us) end)
print("  slowest steps:")
for i = 1, math.min(3, #steps) do
  local r = steps[i]
  print(("    %-40s %-20s avg %8.2f us  out %s"):format(r.op_name, r.op_type, tonumber(r.avg_us),
    r.output_shapes or ""))
end

-- 2. Statistics of every operator's output under force_fp16.
do
  local sess <close> = npu.Session { graph = g, options = {
    graph_run_mode = 0,
    precision_mode = "force_fp16",
    enable_dump = true,
    dump_path = dir .. "/dump",
    dump_data = "stats",
  } }
  sess:run(fetches, feeds)
end
local rows = read_csv(the_one("'" .. dir .. "/dump'/*/*/*/*/0/stats.csv"))
local outputs, bad = {}, 0
for _, r in ipairs(rows) do
  if r.io == "output" and r.max ~= "" then
    r.peak = math.max(math.abs(tonumber(r.min)), math.abs(tonumber(r.max)))
    outputs[#outputs + 1] = r
  end
  bad = bad + (tonumber(r.nan) or 0) + (tonumber(r.pos_inf) or 0) + (tonumber(r.neg_inf) or 0)
end
table.sort(outputs, function(a, b) return a.peak > b.peak end)
print(("\nforce_fp16 dump: %d tensors, %d NaN/Inf values; largest magnitudes (float16 max 65504):")
  :format(#rows, bad))
for i = 1, math.min(3, #outputs) do
  local r = outputs[i]
  print(("  %-40s %-8s %-12s min %10.4g  max %10.4g  mean %10.4g"):format(r.op_name, r.dtype,
    r.shape, tonumber(r.min), tonumber(r.max), tonumber(r.mean)))
end

os.execute("rm -rf '" .. dir .. "'")
