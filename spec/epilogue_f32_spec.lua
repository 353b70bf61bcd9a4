-- epilogue_f32_spec.lua — a fused convolution's or matmul's bias (and prelu slopes) stay
-- float32 under every reduced precision mode: the kernel adds them to its float32 sums before
-- y is rounded once, so rounding them too was an extra error for nothing (blazeface under
-- allow_mix_precision_bf16: 0.19 of the output's peak with bfloat16 biases, 0.12 with float32
-- ones; docs/compiler.md).  The values are chosen so that every result is exact: the sums
-- cancel the bias's integer part, leaving 3 * 2^-12, a float16 and a bfloat16 value, where a
-- bias rounded to bfloat16 (1 + 3 * 2^-12 -> 1) leaves 0 and one rounded to float16 (-> 1 + 2^-10)
-- leaves 2^-10.  A customize_dtypes line still decides: given bfloat16, the bias is rounded.
local lu = require("luaunit")
local npu = require("npu")
local support = dofile(SPEC_DIR .. "/support.lua")

local FRAC = 3 * 2 ^ -12

-- x: ones (1, 2, 2, 2); each step's float32 sum is -j for output channel j, its bias j + FRAC.
local function graph()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, 2, 2, 2 }, "x")
  -- 1x1 convolution, 2 -> 2 channels: channel j sums -j/2 - j/2
  local f = g:const(npu.tensor({ { { { -0.5, -1 }, { -0.5, -1 } } } }, "float32"))
  local b = g:const(npu.tensor({ 1 + FRAC, 2 + FRAC }, "float32"))
  local c = npu.nn.relu(npu.nn.bias_add(g:op("conv2d", { x, f }, { strides = 1, padding = "VALID" }, "c"), b))
  -- depthwise 1x1, multiplier 1: channel j times -j
  local d = g:op("depthwise_conv2d", { x, g:const(npu.tensor({ { { { -1 }, { -2 } } } }, "float32")) },
    { strides = 1, padding = "VALID" }, "d")
  local dy = npu.nn.bias_add(d, b)
  -- matmul (4, 2) x (2, 2): row sums as the convolution's
  local m = g:op("matmul", { g:op("reshape", { x }, { shape = { 4, 2 } }, "r"), f:reshape({ 2, 2 }) }, {}, "m")
  local my = npu.nn.relu(npu.nn.bias_add(m, b))
  return g, x, { c, dy, my }
end

local function run(options)
  local g, x, ys = graph()
  local sess = npu.Session { graph = g, options = options }
  local feeds = { [x] = npu.ones({ 1, 2, 2, 2 }) }
  return sess:run(ys, feeds), sess:explain(ys, feeds)
end

-- Every element of the three outputs: FRAC in channel/column 1 and 2 alike (v), or not.
local function all_equal(ys, v)
  for _, y in ipairs(ys) do
    local t = y:reshape({ y:numel() }):totable()
    for i = 1, #t do
      if t[i] ~= v then return false, ("%s: element %d is %.17g, not %.17g"):format(tostring(y), i, t[i], v) end
    end
  end
  return true
end

TestEpilogueF32 = {}

function TestEpilogueF32:test_the_bias_of_fused_steps_stays_float32_in_every_reduced_mode()
  for _, mode in ipairs { "allow_mix_precision_bf16", "force_fp16", "allow_mix_precision" } do
    local ys, e = run { precision_mode = mode }
    local fused = 0
    for _, st in ipairs(e.steps) do
      if st.op == "fused_conv2d" or st.op == "fused_depthwise_conv2d" or st.op == "fused_matmul" then
        fused = fused + 1
        lu.assertNotEquals(st.inputs[1].dtype, "float32", mode .. " " .. st.op .. " x")
        lu.assertEquals(st.inputs[3].dtype, "float32", mode .. " " .. st.op .. " bias")
        lu.assertNotEquals(st.outputs[1].dtype, "float32", mode .. " " .. st.op .. " y")
      end
    end
    lu.assertEquals(fused, 3, mode)
    lu.assertTrue(all_equal(ys, FRAC))
    lu.assertEquals(e.memory.round_bytes, 0, mode) -- nothing left to widen: weights are exact
  end
end

function TestEpilogueF32:test_customize_dtypes_still_rounds_the_bias_when_told()
  local path = os.tmpname()
  support.write(path, "c::InputDtype:bfloat16,bfloat16,bfloat16\n"
    .. "d::InputDtype:bfloat16,bfloat16,bfloat16\nm::InputDtype:bfloat16,bfloat16,bfloat16\n")
  local ok, ys, e = pcall(run, { precision_mode = "allow_mix_precision_bf16", customize_dtypes = path })
  os.remove(path)
  lu.assertTrue(ok, tostring(ys))
  for _, st in ipairs(e.steps) do
    if st.op:match("^fused_") then lu.assertEquals(st.inputs[3].dtype, "bfloat16", st.op) end
  end
  -- 1 + FRAC rounds to 1 in bfloat16: the sums cancel the bias exactly
  lu.assertTrue(all_equal(ys, 0))
end

function TestEpilogueF32:test_float32_plans_and_the_reference_are_unchanged()
  local ys = run { precision_mode = "must_keep_origin_dtype" }
  lu.assertTrue(all_equal(ys, FRAC))
  ys = run { precision_mode = "allow_mix_precision_bf16", use_off_line = false }
  lu.assertTrue(all_equal(ys, FRAC))
end

-- The same exact values through the direct convolution kernels: 16 -> 16 channels (what
-- npuK_conv2d_direct_fits takes; the steps above, 2 channels, run im2col), 3x3 SAME on ones of
-- 6x6, so border and interior pixels sum different counts of taps.  Output channel j's filter
-- holds -j/16 at the centre tap of each input channel and 0 elsewhere, so every pixel sums -j
-- exactly, in any order; the bias j + FRAC leaves FRAC, float32 or bfloat16 alike.  Where the
-- CPU has AVX512_BF16 the step is direct_bf16 (bfloat16 filter and x by VDPBF16PS), else direct
-- (x widened): both add the float32 bias (the emotion model's plan runs both kinds of step;
-- docs/compiler.md, What bfloat16 costs in accuracy).
function TestEpilogueF32:test_the_direct_kernels_add_the_float32_bias()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, 6, 6, 16 }, "x")
  local fv, bv = {}, {}
  for kh = 1, 3 do
    fv[kh] = {}
    for kw = 1, 3 do
      fv[kh][kw] = {}
      for c = 1, 16 do
        fv[kh][kw][c] = {}
        for j = 1, 16 do fv[kh][kw][c][j] = (kh == 2 and kw == 2) and -j / 16 or 0 end
      end
    end
  end
  for j = 1, 16 do bv[j] = j + FRAC end
  local y = npu.nn.bias_add(g:op("conv2d", { x, g:const(npu.tensor(fv, "float32")) },
    { strides = 1, padding = "SAME" }, "c"), g:const(npu.tensor(bv, "float32")))
  local feeds = { [x] = npu.ones({ 1, 6, 6, 16 }) }
  local want = support.bf16dot_here() and "direct_bf16" or "direct"
  for _, opts in ipairs {
    { precision_mode = "allow_mix_precision_bf16" },
    { precision_mode = "allow_mix_precision_bf16", op_select_implmode = "high_performance" } } do
    local sess = npu.Session { graph = g, options = opts }
    local algo
    for _, st in ipairs(sess:explain(y, feeds).steps) do
      if st.op == "fused_conv2d" then
        algo = st.algo
        lu.assertEquals(st.inputs[1].dtype, "bfloat16")
        lu.assertEquals(st.inputs[3].dtype, "float32")
      end
    end
    lu.assertEquals(algo, want)
    lu.assertTrue(all_equal({ sess:run(y, feeds) }, FRAC))
    sess:close()
  end
end
