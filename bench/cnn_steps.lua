-- cnn_steps.lua — where bench_cnn's training step spends its time, step by step: the model of
-- bench/cnn_mixed_bf16.lua (28x28x1 -> conv3x3x32 + relu -> max pool -> conv3x3x64 + relu ->
-- max pool -> dense 10, batch 32, SGD), one thread, under one precision mode, run N times by a
-- session with profiling_mode on; prints each step of the plan (explain's op, algo and
-- `widened`: the inputs the executor widens to float32 every run), its stored input and output
-- dtypes, its mean time (op_summary.csv) and the plan's round_bytes (the widening buffer).
--   lua5.4 bench/cnn_steps.lua [precision_mode [N]]   (default allow_mix_precision_bf16, 300)
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")
local MODE = arg[1] or "allow_mix_precision_bf16"
local N = tonumber(arg[2]) or 300
npu.core.set_n_threads(1)

local out = os.tmpname()
os.remove(out)
local B = 32
local g, _, _, train, feeds = dofile("bench/util.lua").cnn_sgd(npu, B)
local sess = npu.Session { graph = g, options = { precision_mode = MODE, profiling_mode = true,
  profiling_options = '{"output":"' .. out .. '","task_trace":"l1","training_trace":"on"}' } }
sess:run(g:global_variables_initializer())
local ex = sess:explain(train, feeds)
for _ = 1, N do sess:run(train, feeds) end
sess:close() -- writes op_summary.csv

-- op_summary.csv: a header, then a row per step of each plan (quoted fields hold commas)
local function fields(line)
  local c, i = {}, 1
  while i <= #line + 1 do
    if line:sub(i, i) == '"' then
      local j = line:find('"', i + 1, true)
      c[#c + 1], i = line:sub(i + 1, j - 1), j + 2
    else
      local j = line:find(",", i, true) or #line + 1
      c[#c + 1], i = line:sub(i, j - 1), j + 1
    end
  end
  return c
end
local p = io.popen("cat '" .. out .. "'/PROF_*/op_summary.csv")
local col, rows = nil, {}
for line in p:lines() do
  local c = fields(line)
  if not col then
    col = {}
    for i, name in ipairs(c) do col[name] = i end
  elseif tonumber(c[col.plan_id]) == 1 then -- plan 0 is the initializer's
    rows[#rows + 1] = c
  end
end
p:close()
os.execute("rm -rf '" .. out .. "'")

print(("%s, batch %d, %d runs; round_bytes %d"):format(MODE, B, N, ex.memory.round_bytes))
print(("%4s %-30s %-12s %9s  %-9s %s"):format("step", "op", "algo", "mean us", "widened", "dtypes in -> out"))
local total = 0
for _, r in ipairs(rows) do
  local s = ex.steps[tonumber(r[col.step]) + 1]
  local us = tonumber(r[col.avg_us]) or 0
  total = total + us
  print(("%4s %-30s %-12s %9.1f  %-9s %s -> %s"):format(r[col.step], s.op, tostring(s.algo or ""), us,
    "[" .. table.concat(s.widened, ",") .. "]", r[col.input_dtypes], r[col.output_dtypes]))
end
print(("%4s %-30s %-12s %9.1f"):format("", "sum", "", total))
