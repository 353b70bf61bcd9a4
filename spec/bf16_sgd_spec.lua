-- bf16_sgd_spec.lua — GradientDescentOptimizer's updates fused under the mixed precision modes
-- (ApplyGradientDescentFusionPass, GradientDescentUpdateFusionPass; csrc/compile/fusion.c,
-- precision.c's decide_fused_sgd, kernels.h's npuK_matmul_half_sgd).
-- Under allow_mix_precision_bf16 the weight gradient's matmul is a trust-list op: the unfused
-- plan stores its product bfloat16, casts it back to float32 and runs mul, sub and the assign in
-- float32 (the variable stays float32).  The fused step computes the same product (BF16DOT where
-- the process has it, else the widening GEMM), rounds it to bfloat16, then updates the variable
-- in place: the weights after training must be the unfused plan's bits exactly, at 1 and 2
-- threads, on the native path and (in a child process with NPU_NO_AVX512BF16=1) on the widening
-- one, and under allow_mix_precision_fp16 too.  The plan: one step per update, no float32 copy
-- of a weight gradient, the forward GEMMs still bfloat16 (the fused step's GEMM operands are
-- not "written into a variable"); fusion_result.json counts the effects.
local lu = require("luaunit")
local npu = require("npu")
local support = dofile(SPEC_DIR .. "/support.lua")

-- The model and the run, as source so that the child process runs the very same ones: an MLP
-- (batch 32, 100-48-24-10; every GEMM transposes one operand somewhere), four SGD steps on two
-- batches, under the mode, with the gradient-descent passes on or off.  Returns the variables'
-- float32 bits as strings, the loss, the explain of the train op.
local CASE = [==[
local npu = require("npu")
local GD_OFF = '{"Switch":{"GraphFusion":{"ApplyGradientDescentFusionPass":"off",' ..
  '"GradientDescentUpdateFusionPass":"off"}}}'
return function(mode, fused, threads)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 32, 100 }, "x")
  local y = g:placeholder("int32", { 32 }, "y")
  local init = npu.initializers.glorot_uniform
  local h1 = npu.layers.dense(x, 48, { activation = "relu", kernel_initializer = init { seed = 1 } })
  local h2 = npu.layers.dense(h1, 24, { activation = "relu", kernel_initializer = init { seed = 2 } })
  local logits = npu.layers.dense(h2, 10, { kernel_initializer = init { seed = 3 } })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
  local train_op = npu.train.GradientDescentOptimizer(0.3):minimize(loss)
  local opts = { precision_mode = mode, export_compile_stat = 0 }
  local path
  if not fused then
    path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(GD_OFF)
    f:close()
    opts.fusion_switch_file = path
  end
  local n0 = npu.core.n_threads()
  npu.core.set_n_threads(threads or 1)
  local sess = npu.Session { graph = g, options = opts }
  if path then os.remove(path) end
  sess:run(g:global_variables_initializer())
  local batches = {}
  for i = 1, 2 do
    local labels = {}
    for j = 1, 32 do labels[j] = (j * 7 + i) % 10 end
    batches[i] = { [x] = npu.random.uniform({ 32, 100 }, { minval = -1, maxval = 1, seed = 10 + i }),
                   [y] = npu.tensor(labels, "int32") }
  end
  for s = 1, 4 do sess:run(train_op, batches[(s - 1) % 2 + 1]) end
  local bits = {}
  for i, v in ipairs(sess:run(g:global_variables())) do
    local t = v:reshape({ v:numel() }):totable()
    local parts = {}
    for j = 1, #t do parts[j] = string.pack("<f", t[j]) end
    bits[i] = table.concat(parts)
  end
  local e = sess:explain(train_op, batches[1])
  local l = sess:run(loss, batches[1]):item()
  sess:close()
  npu.core.set_n_threads(n0)
  return bits, l, e
end
]==]

local run = assert(load(CASE, "case"))()

-- The first differing float32 of two bit strings, or nil.
local function first_difference(a, b)
  if #a ~= #b then return ("lengths %d, %d"):format(#a, #b) end
  for i = 1, #a, 4 do
    if a:sub(i, i + 3) ~= b:sub(i, i + 3) then
      return ("element %d: %.9g vs %.9g"):format((i - 1) // 4 + 1, string.unpack("<f", a, i),
        string.unpack("<f", b, i))
    end
  end
end

local function assert_same_variables(a, b, what)
  lu.assertEquals(#a, #b, what)
  lu.assertEquals(#a, 6, what) -- three kernels, three biases
  for i = 1, #a do
    local d = first_difference(a[i], b[i])
    if d then lu.fail(("%s: variable %d differs, %s"):format(what, i, d)) end
  end
end

-- The steps of an explain by op, and the dtype of each step's first output by node name.
local function census(e)
  local by_op, out_dtype = {}, {}
  for _, st in ipairs(e.steps) do
    by_op[st.op] = (by_op[st.op] or 0) + 1
    if st.outputs and st.outputs[1] then out_dtype[st.node] = st.outputs[1].dtype end
  end
  return by_op, out_dtype
end

-- Whether this process may use the native bfloat16 dot products.
local native_here = support.bf16dot_here

TestBf16Sgd = {}

-- The fused plan's weights are the bits of the unfused plan's (gradient-descent passes off,
-- every other pass on), at 1 and 2 threads, under both mixed modes.
function TestBf16Sgd:test_fused_updates_have_the_unfused_bits()
  for _, mode in ipairs { "allow_mix_precision_bf16", "allow_mix_precision_fp16" } do
    local off, l_off = run(mode, false, 1)
    local on, l_on, e = run(mode, true, 1)
    local on2 = run(mode, true, 2)
    assert_same_variables(on, off, mode .. ", fused against unfused")
    assert_same_variables(on2, on, mode .. ", 2 threads")
    lu.assertEquals(l_on, l_off, mode .. ": loss")
    -- the reduced GEMMs really ran: other bits than float32's, a close loss
    local f32, l_f32 = run("must_keep_origin_dtype", true, 1)
    lu.assertNotEquals(on[1], f32[1], mode .. ": float32's bits")
    lu.assertTrue(math.abs(l_on - l_f32) < 0.05, ("%s: loss %g, float32 %g"):format(mode, l_on, l_f32))
    local by_op = census(e)
    lu.assertEquals(by_op.fused_apply_gradient_descent, 3, mode)
    lu.assertEquals(by_op.fused_gradient_descent_update, 3, mode)
  end
end

-- The plan under allow_mix_precision_bf16: each kernel's update is one step reading the
-- gradient's GEMM operands as stored bfloat16, nothing casts a weight gradient to float32, no
-- assign copies a new value, and the forward dense layers still store bfloat16 (a fused
-- update's GEMM operands are not values written into a variable, which keep float32).
function TestBf16Sgd:test_plan_under_mixed_bfloat16()
  local _, _, e = run("allow_mix_precision_bf16", true, 1)
  local _, _, e_off = run("allow_mix_precision_bf16", false, 1)
  local by_op, out_dtype = census(e)
  local by_op_off, out_dtype_off = census(e_off)
  lu.assertEquals(by_op.assign, nil)
  lu.assertEquals(by_op_off.assign, 6)
  lu.assertEquals(by_op_off.fused_apply_gradient_descent, nil)
  for _, layer in ipairs { "dense", "dense_1", "dense_2" } do
    lu.assertEquals(out_dtype[layer .. "/MatMul"], "bfloat16", layer)
    lu.assertEquals(out_dtype[layer .. "/MatMul"], out_dtype_off[layer .. "/MatMul"], layer)
  end
  local casts_off, casts = 0, 0
  for _, st in ipairs(e.steps) do
    if st.op == "cast" and st.node:match("MatMul_grad/MatMul_1$") then casts = casts + 1 end
    if st.op == "fused_apply_gradient_descent" then
      lu.assertEquals(st.inputs[1].dtype, "float32", st.node)  -- the variable
      lu.assertEquals(st.inputs[2].dtype, "bfloat16", st.node) -- the GEMM's A and B
      lu.assertEquals(st.inputs[3].dtype, "bfloat16", st.node)
      lu.assertEquals(st.inputs[4].dtype, "float32", st.node)  -- lr
      lu.assertEquals(st.outputs[1].dtype, "float32", st.node)
      lu.assertEquals(st.outputs[1].memory, "variable", st.node)
      -- the GEMM the unfused matmul would run: bf16dot where the CPU has AVX512_BF16
      lu.assertEquals(st.algo, native_here() and "bf16dot" or nil, st.node)
    end
  end
  for _, st in ipairs(e_off.steps) do
    if st.op == "cast" and st.node:match("MatMul_grad/MatMul_1$") then casts_off = casts_off + 1 end
  end
  lu.assertEquals(casts, 0)
  lu.assertEquals(casts_off, 3)
end

-- The modes that store every op's output reduced keep the updates' steps (fusion.c: sgd_mode).
function TestBf16Sgd:test_other_reduced_modes_stay_unfused()
  for _, mode in ipairs { "force_fp16", "allow_fp32_to_fp16" } do
    local _, _, e = run(mode, true, 1)
    local by_op = census(e)
    lu.assertEquals(by_op.fused_apply_gradient_descent, nil, mode)
    lu.assertEquals(by_op.fused_gradient_descent_update, nil, mode)
  end
end

-- The same comparison in a child process with NPU_NO_AVX512BF16=1: the widening GEMM's bits,
-- fused and unfused alike (the child's GEMMs name no algorithm, this process's bf16dot where
-- the CPU has it), and close to this process's weights (bfloat16 products hide most of the
-- float32 sums' differences of order).
function TestBf16Sgd:test_widening_path_in_a_child_process()
  local script = "local run = assert(load(" .. ("%q"):format(CASE) .. "))()\n" .. [[
local off = run("allow_mix_precision_bf16", false, 1)
local on, _, e = run("allow_mix_precision_bf16", true, 2)
local same = #on == #off and #on == 6
for i = 1, #on do same = same and on[i] == off[i] end
local n_bf16dot = 0
for _, st in ipairs(e.steps) do if st.algo == "bf16dot" then n_bf16dot = n_bf16dot + 1 end end
io.write(same and "same" or "differ", " ", n_bf16dot, "\n")
for i = 1, #on do io.write((on[i]:gsub(".", function(c) return ("%02x"):format(c:byte()) end)), "\n") end
]]
  local out = support.run_lua(".", "NPU_NO_AVX512BF16=1", script)
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  lu.assertEquals(lines[1], "same 0", out:sub(1, 400))
  lu.assertEquals(#lines, 7, out:sub(1, 400))
  local here, _, e = run("allow_mix_precision_bf16", true, 1)
  local n_bf16dot = 0
  for _, st in ipairs(e.steps) do if st.algo == "bf16dot" then n_bf16dot = n_bf16dot + 1 end end
  if native_here() then lu.assertTrue(n_bf16dot >= 3, "the forward GEMMs on bf16dot here") end
  local worst = 0
  for i = 1, 6 do
    local child = lines[i + 1]:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
    lu.assertEquals(#child, #here[i])
    for j = 1, #child, 4 do
      local u, v = string.unpack("<f", child, j), string.unpack("<f", here[i], j)
      worst = math.max(worst, math.abs(u - v))
    end
  end
  lu.assertTrue(worst < 1e-2, "largest |w - w'| " .. worst)
end

-- fusion_result.json (export_compile_stat = 2): three GEMM updates and three bias updates take
-- effect under allow_mix_precision_bf16.  Written by a child process into a fresh
-- ASCEND_WORK_PATH, so that this process's other sessions do not mix in.
function TestBf16Sgd:test_fusion_result_counts()
  local dir, _ <close> = support.tmpdir()
  local out = support.run_lua(dir, "ASCEND_WORK_PATH=" .. support.sh_quote(dir), [[
local npu = require("npu")
local g = npu.Graph()
local x = g:placeholder("float32", { 8, 12 }, "x")
local y = g:placeholder("int32", { 8 }, "y")
local h = npu.layers.dense(x, 6, { activation = "relu" })
local h2 = npu.layers.dense(h, 5, { activation = "relu" })
local logits = npu.layers.dense(h2, 3)
local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
local train_op = npu.train.GradientDescentOptimizer(0.1):minimize(loss)
local sess = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16",
  export_compile_stat = 2 } }
sess:run(g:global_variables_initializer())
sess:run(train_op, { [x] = npu.random.uniform({ 8, 12 }, { seed = 3 }),
  [y] = npu.tensor({ 0, 1, 2, 0, 1, 2, 0, 1 }, "int32") })
sess:close()
print("done")
]])
  lu.assertStrContains(out, "done")
  local pids = support.ls(dir .. "/FE")
  lu.assertEquals(#pids, 1, out)
  local text = support.read_all(("%s/FE/%s/fusion_result.json"):format(dir, pids[1]))
  lu.assertNotNil(text, "fusion_result.json under " .. dir)
  local found = 0
  for _, stats in pairs(support.json_decode(text)) do
    local gf = stats.graph_fusion or {}
    if gf.ApplyGradientDescentFusionPass then
      found = found + 1
      lu.assertEquals(gf.ApplyGradientDescentFusionPass, { match_times = "3", effect_times = "3" })
      lu.assertEquals(gf.GradientDescentUpdateFusionPass, { match_times = "3", effect_times = "3" })
    end
  end
  lu.assertEquals(found, 1, text)
end
