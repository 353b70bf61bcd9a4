-- mixed_sgd.lua — the MLP 784-256-256-10 SGD step (batch 64, one device thread) under the
-- mixed precision modes with the gradient-descent fusion passes on (the default) and off
-- (fusion_switch_file: ApplyGradientDescentFusionPass and GradientDescentUpdateFusionPass;
-- every other pass on), beside float32: one process, the sessions' blocks of 100 steps
-- interleaved, CPU time, medians.  The two plans of a mode give the same bits
-- (spec/bf16_sgd_spec.lua); the ratio is what fusing the updates saves.
--   lua5.4 bench/mixed_sgd.lua [REPS]      (default 9)
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")
local util = dofile("bench/util.lua")
local median = util.median
local REPS = tonumber(arg and arg[1]) or 9
npu.core.set_n_threads(1)

local off = os.tmpname()
do
  local f = assert(io.open(off, "w"))
  f:write('{"Switch":{"GraphFusion":{"ApplyGradientDescentFusionPass":"off",' ..
    '"GradientDescentUpdateFusionPass":"off"}}}')
  f:close()
end

-- A session training the MLP under the mode; returns a function timing n steps (CPU s/step).
local function trainer(mode, switches)
  local g, x, y, train_op = util.mlp_sgd(npu, 64)
  local sess = npu.Session { graph = g, options = { precision_mode = mode, fusion_switch_file = switches } }
  sess:run(g:global_variables_initializer())
  local labels = {}
  for i = 1, 64 do labels[i] = i % 10 end
  local feeds = { [x] = npu.random.uniform({ 64, 784 }, { seed = 8 }), [y] = npu.tensor(labels, "int32") }
  for _ = 1, 20 do sess:run(train_op, feeds) end
  return function(n)
    local t0 = os.clock()
    for _ = 1, n do sess:run(train_op, feeds) end
    return (os.clock() - t0) / n
  end
end

local cases = {
  { "float32", trainer("must_keep_origin_dtype") },
  { "mixed bfloat16, updates unfused", trainer("allow_mix_precision_bf16", off) },
  { "mixed bfloat16, updates fused", trainer("allow_mix_precision_bf16") },
  { "mixed float16, updates unfused", trainer("allow_mix_precision_fp16", off) },
  { "mixed float16, updates fused", trainer("allow_mix_precision_fp16") },
}
os.remove(off)
local t = {}
for r = 1, REPS do
  for i, c in ipairs(cases) do
    t[i] = t[i] or {}
    t[i][r] = c[2](100)
  end
end
local m = {}
for i, c in ipairs(cases) do
  m[i] = median(t[i])
  print(("%-34s %.3f ms  %.2fx float32"):format(c[1], m[i] * 1e3, m[i] / m[1]))
end
print(("fused / unfused: bfloat16 %.3f, float16 %.3f"):format(m[3] / m[2], m[5] / m[4]))
