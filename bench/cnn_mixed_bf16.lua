-- cnn_mixed_bf16.lua — bench_cnn's model (28x28x1 -> conv3x3x32 + relu -> max pool -> conv3x3x64
-- + relu -> max pool -> dense 10, batch 32) trained by SGD under must_keep_origin_dtype
-- (float32) and allow_mix_precision_bf16, one thread, timed alternately in one process (CPU
-- time: one thread on a shared machine), medians of REPS rounds of 10 steps.  The bfloat16
-- convolution gradients (kernels/conv_bwd_bf16.c, explain's algo "bf16dot") are a fact of the
-- process, so the script runs itself again with NPU_NO_AVX512BF16=1 for the widening path
-- (the gradients' bfloat16 operands widened to float32 by the executor, as before) and prints
-- both ratios.  Usage: lua5.4 bench/cnn_mixed_bf16.lua [reps]
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")
local util = dofile("bench/util.lua")
local median = util.median
local REPS = tonumber(arg[1]) or 9
local CHILD = os.getenv("CNN_MIXED_BF16_CHILD")
npu.core.set_n_threads(1)

local B = 32
local function model(mode)
  local g, _, _, train, feeds = util.cnn_sgd(npu, B)
  local sess = npu.Session { graph = g, options = { precision_mode = mode } }
  sess:run(g:global_variables_initializer())
  local algos = {}
  for _, s in ipairs(sess:explain(train, feeds).steps) do
    if s.op:find("^conv2d_backprop") then algos[#algos + 1] = s.algo or "widened" end
  end
  for _ = 1, 5 do sess:run(train, feeds) end
  return function() for _ = 1, 10 do sess:run(train, feeds) end end, table.concat(algos, ",")
end

local f32 = model("must_keep_origin_dtype")
local bf16, algos = model("allow_mix_precision_bf16")
local t32, tbf = {}, {}
for r = 1, REPS do
  local t0 = os.clock()
  f32()
  local t1 = os.clock()
  bf16()
  tbf[r], t32[r] = (os.clock() - t1) / 10, (t1 - t0) / 10
end
local a, b = median(t32), median(tbf)
local line = ("%.3f %.3f %s"):format(a * 1e3, b * 1e3, algos)
if CHILD then
  print(line)
  return
end
local p = io.popen("CNN_MIXED_BF16_CHILD=1 NPU_NO_AVX512BF16=1 " .. (arg[-1] or "lua5.4") .. " " .. arg[0] .. " " .. REPS)
local c32, cbf, calgos = p:read("a"):match("(%S+) (%S+) (%S+)")
p:close()
print(("cnn b32 SGD step, one thread, CPU time, median of %d x 10 steps"):format(REPS))
print(("  native bf16 gradients (%s): float32 %.3f ms, mixed bf16 %.3f ms, %.2fx"):format(algos, a * 1e3, b * 1e3, b / a))
print(("  NPU_NO_AVX512BF16=1   (%s): float32 %.3f ms, mixed bf16 %.3f ms, %.2fx"):format(calgos or "?",
  tonumber(c32) or 0 / 0, tonumber(cbf) or 0 / 0, (tonumber(cbf) or 0 / 0) / (tonumber(c32) or 0 / 0)))
