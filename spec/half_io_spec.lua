-- half_io_spec.lua — float16 steps without full-size float32 copies: under force_fp16 the
-- elementwise steps (unary, binary, fused elementwise programs) read and write their float16
-- operands themselves, a block at a time, steps that only move elements (reshape, pad,
-- transpose, concat, ...) move them as stored, convolutions and matmul widen their input and
-- narrow their output by blocks in their scratch (matmul its float16 weights too), pools by
-- bands of rows; only the other steps (softmax, ...) and the convolutions' weights still get
-- widened into a float32 buffer (explain's memory.round_bytes, the largest such buffer).  Results are those
-- of rounding float32 values to float16 after every op, as before: the oracle runs each op
-- alone in float32 on rounded inputs and rounds its output.
local lu = require("luaunit")
local npu = require("npu")
local model = require("npu.model")

local MODELS_DIR = os.getenv("NPU_MODELS_DIR") or (ROOT_DIR or ".") .. "/../shared/models"

local function round(t) return t:astype("float16"):astype("float32") end
local function same(a, b) return npu.allclose(a, b, 0, 0) end

-- An operand op16 does not round: a fused step's bias stays float32 in every mode (the
-- precision pass's keep_epilogue_f32), the kernel adding it to its float32 sums.
local function f32(t) return { f32 = t } end

-- One op in float32 on (rounded) inputs, its output rounded: what a float16 step gives.
local function op16(build, ...)
  local g = npu.Graph()
  local ins, feeds = {}, {}
  for i, t in ipairs { ... } do
    local kept = type(t) == "table" and t.f32
    ins[i] = g:placeholder("float32", (kept or t):shape(), "in" .. i)
    feeds[ins[i]] = kept or round(t)
  end
  local s = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  return round(s:run(build(g, table.unpack(ins)), feeds))
end

TestHalfIO = {}

function TestHalfIO:test_elementwise_steps_plan_no_widening_and_round_as_before()
  -- y = exp(pow(relu(x * 0.5 + b), 2) - z): a fused chain with scalar and row broadcasts, a
  -- standalone binary op broadcasting along the middle axis, a standalone unary op
  local X = npu.random.normal({ 5, 7, 300 }, { seed = 11 })
  local B = npu.random.normal({ 300 }, { seed = 12 })
  local Z = npu.random.normal({ 5, 1, 300 }, { seed = 13 })
  local g = npu.Graph()
  local x = g:placeholder("float32", { 5, 7, 300 }, "x")
  local b = g:placeholder("float32", { 300 }, "b")
  local z = g:placeholder("float32", { 5, 1, 300 }, "z")
  local h = npu.nn.relu(x * 0.5 + b)
  local p = g:op("pow", { h, g:const(npu.tensor({ 2.0 })) }, {}, "p")
  local y = g:op("exp", { p - z }, {}, "y")
  local feeds = { [x] = X, [b] = B, [z] = Z }
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local e = sess:explain(y, feeds)
  lu.assertEquals(e.memory.round_bytes, 0)
  local reduced = 0
  for _, s in ipairs(e.steps) do
    if s.pass ~= "precision" then
      lu.assertEquals(s.outputs[1].dtype, "float16", s.op)
      reduced = reduced + 1
    end
  end
  lu.assertTrue(reduced >= 3, "steps computing in float16: " .. reduced)
  -- the oracle, step by step: fusion folds x * 0.5 + b -> relu -> pow into one step (its
  -- bits are the separate ops', rounded once at the end), then sub, then exp
  local hr = op16(function(gg, a, c)
    return gg:op("pow", { npu.nn.relu(a * 0.5 + c), gg:const(npu.tensor({ 2.0 })) }, {}, "p")
  end, X, B)
  local sr = op16(function(_, a, c) return a - c end, hr, Z)
  local want = op16(function(gg, a) return gg:op("exp", { a }, {}, "y") end, sr)
  local got = sess:run(y, feeds)
  lu.assertTrue(same(got, want))
end

function TestHalfIO:test_movement_steps_move_float16_as_stored()
  local X = npu.random.normal({ 4, 6, 10 }, { seed = 21 })
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 6, 10 }, "x")
  local t = g:op("transpose", { npu.nn.relu(x) }, { perm = { 2, 0, 1 } }, "t")
  local r = g:op("reshape", { t }, { shape = { 10, 24 } }, "r")
  local pd = g:op("pad", { r }, { paddings = { { 1, 0 }, { 0, 2 } } }, "pd")
  local y = npu.nn.relu(pd)
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local e = sess:explain(y, { [x] = X })
  lu.assertEquals(e.memory.round_bytes, 0)
  local ref = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  -- relu of float16 values is exact, and moving elements rounds nothing: the float32 result
  -- on the rounded input
  lu.assertTrue(same(sess:run(y, { [x] = X }), ref:run(y, { [x] = round(X) })))
end

function TestHalfIO:test_convolutions_and_matmul_take_float16_as_stored()
  -- conv2d 3x3 (im2col), conv2d 1x1 (pointwise), depthwise stride 2, matmul: x and y of each
  -- stay float16 (NPUX_F_HALF_XY); only their weights are widened by the executor
  local X = npu.random.normal({ 2, 9, 9, 8 }, { seed = 31 })
  local F = npu.random.normal({ 3, 3, 8, 12 }, { seed = 32 })
  local W = npu.random.normal({ 1, 1, 12, 12 }, { seed = 33 })
  local D = npu.random.normal({ 3, 3, 12, 1 }, { seed = 34 })
  local M = npu.random.normal({ 12, 7 }, { seed = 35 })
  local conv = function(gg, a, f) return gg:op("conv2d", { a, f }, { strides = 1, padding = "SAME" }, "c") end
  local dw = function(gg, a, f)
    return gg:op("depthwise_conv2d", { a, f }, { strides = 2, padding = "SAME" }, "d")
  end
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 9, 9, 8 }, "x")
  local c1 = conv(g, x, g:const(F))
  local c2 = conv(g, c1, g:const(W))
  local c3 = dw(g, c2, g:const(D))
  local r = g:op("reshape", { c3 }, { shape = { 50, 12 } }, "r")
  local y = g:op("matmul", { r, g:const(M) }, {}, "m")
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local e = sess:explain(y, { [x] = X })
  local n_xy = 0
  for _, st in ipairs(e.steps) do
    if st.op == "conv2d" or st.op == "depthwise_conv2d" or st.op == "matmul" then
      lu.assertEquals(st.inputs[1].dtype, "float16", st.op)
      lu.assertEquals(st.outputs[1].dtype, "float16", st.op)
      n_xy = n_xy + 1
    end
  end
  lu.assertEquals(n_xy, 4)
  -- the widest widening is the largest weight (F, in float32), not an activation
  lu.assertEquals(e.memory.round_bytes, 4 * 3 * 3 * 8 * 12)
  local a1 = op16(conv, X, F)
  local a2 = op16(conv, a1, W)
  local a3 = op16(dw, a2, D)
  local want = op16(function(gg, a, b)
    return gg:op("matmul", { gg:op("reshape", { a }, { shape = { 50, 12 } }, "r"), b }, {}, "m")
  end, a3, M)
  lu.assertTrue(same(sess:run(y, { [x] = X }), want))
end

-- The direct kernel takes float16 convolutions (x widened once per image or band of rows into
-- its copy, y narrowed by rows): explain names it, x and y stay float16, and the result is
-- the float32 direct kernel's on rounded operands, rounded — padded and unpadded, strided,
-- 16 + 8 channels, bias and relu fused into the step; a dilated one keeps im2col.
function TestHalfIO:test_float16_convolutions_run_the_direct_kernel()
  local X = npu.random.normal({ 2, 11, 13, 5 }, { seed = 41 })
  local F = npu.random.normal({ 3, 3, 5, 16 }, { seed = 42 })
  local G = npu.random.normal({ 3, 3, 16, 24 }, { seed = 43 })
  local B = npu.random.normal({ 24 }, { seed = 44 })
  local H = npu.random.normal({ 3, 3, 24, 8 }, { seed = 45 })
  local first = function(gg, a, f) return gg:op("conv2d", { a, f }, { strides = 1, padding = "SAME" }, "c1") end
  local second = function(gg, a, f, b)
    return npu.nn.relu(npu.nn.bias_add(gg:op("conv2d", { a, f }, { strides = 2, padding = "VALID" }, "c2"), b))
  end
  local dilated = function(gg, a, f)
    return gg:op("conv2d", { a, f }, { strides = 1, padding = "SAME", dilations = 2 }, "c3")
  end
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 11, 13, 5 }, "x")
  local y = dilated(g, second(g, first(g, x, g:const(F)), g:const(G), g:const(B)), g:const(H))
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local algos = {}
  for _, st in ipairs(sess:explain(y, { [x] = X }).steps) do
    if st.op:find("conv2d") then
      lu.assertEquals(st.inputs[1].dtype, "float16", st.op)
      lu.assertEquals(st.outputs[1].dtype, "float16", st.op)
      algos[#algos + 1] = st.op .. " " .. st.algo
    end
  end
  lu.assertEquals(algos, { "conv2d direct", "fused_conv2d direct", "conv2d im2col" })
  local a1 = op16(first, X, F)
  local a2 = op16(second, a1, G, f32(B))
  lu.assertTrue(same(sess:run(y, { [x] = X }), op16(dilated, a2, H)))
end

-- Pointwise convolutions (stride 1 and 2, no pool: their float16 output narrowed from the
-- register tiles where the CPU has AVX-512, their input widened by bands of rows) and the
-- float16 add of their outputs (computed in registers on F16C): the bits of each op in float32
-- on rounded inputs, rounded; an infinity in x makes infinities and NaNs (inf - inf) late in
-- the add's operands.
function TestHalfIO:test_pointwise_convolutions_and_their_add_round_as_before()
  local X = npu.random.normal({ 2, 20, 24, 16 }, { seed = 51 })
  local xs = X:totable()
  xs[2][15][20][3] = math.huge
  X = npu.tensor(xs, "float32")
  local F = npu.random.normal({ 1, 1, 16, 32 }, { seed = 52 })
  local G = npu.random.normal({ 1, 1, 16, 32 }, { seed = 53 })
  local B = npu.random.normal({ 32 }, { seed = 54 })
  local pa = function(gg, a, f, b)
    return npu.nn.relu(npu.nn.bias_add(gg:op("conv2d", { a, f }, { strides = 1, padding = "VALID" }, "pa"), b))
  end
  local pb = function(gg, a, f) return gg:op("conv2d", { a, f }, { strides = 1, padding = "VALID" }, "pb") end
  local ps = function(gg, a, f) return gg:op("conv2d", { a, f }, { strides = 2, padding = "VALID" }, "ps") end
  local sub = function(_, a, b) return a - b end
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 20, 24, 16 }, "x")
  local cf, cg, cb = g:const(F), g:const(G), g:const(B)
  local y = pa(g, x, cf, cb) - pb(g, x, cg)
  local z = ps(g, x, cg)
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local got = sess:run({ y, z }, { [x] = X })
  local want = op16(sub, op16(pa, X, F, f32(B)), op16(pb, X, G))
  lu.assertTrue(npu.allclose(got[1], want, 0, 0, true))
  lu.assertTrue(same(got[2], op16(ps, X, G)))
  local t = want:totable()
  local nan, inf = false, false
  for _, row in ipairs(t[2]) do
    for _, px in ipairs(row) do
      for _, v in ipairs(px) do nan, inf = nan or v ~= v, inf or math.abs(v) == math.huge end
    end
  end
  lu.assertTrue(nan and inf, "the data holds NaNs and infinities")
end

-- A float16 convolution (bias, relu) and the max pool after it are one step where the direct
-- kernel takes the pair: it pools the float32 rows and narrows the pool's output, which is
-- the rounded pool of the float32 step (rounding is monotone: the pool of rounded values).
function TestHalfIO:test_float16_convolution_takes_the_max_pool_after_it()
  local X = npu.random.normal({ 2, 10, 12, 3 }, { seed = 51 })
  local F = npu.random.normal({ 3, 3, 3, 16 }, { seed = 52 })
  local B = npu.random.normal({ 16 }, { seed = 53 })
  local build = function(gg, a, f, b)
    local c = npu.nn.relu(npu.nn.bias_add(gg:op("conv2d", { a, f }, { strides = 1, padding = "SAME" }, "c"), b))
    return npu.nn.max_pool(c, { ksize = 2, strides = 2, padding = "VALID", name = "p" })
  end
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 10, 12, 3 }, "x")
  local y = build(g, x, g:const(F), g:const(B))
  for _, mode in ipairs { "force_fp16", "allow_mix_precision" } do
    local sess = npu.Session { graph = g, options = { precision_mode = mode } }
    local ops = {}
    for _, st in ipairs(sess:explain(y, { [x] = X }).steps) do
      if st.pass ~= "precision" then
        ops[#ops + 1] = st.op .. " " .. tostring(st.algo)
        lu.assertEquals(st.inputs[1].dtype, "float16", mode)
        lu.assertEquals(st.outputs[1].dtype, "float16", mode)
      end
    end
    lu.assertEquals(ops, { "fused_conv2d direct" }, mode)
    lu.assertTrue(same(sess:run(y, { [x] = X }), op16(build, X, F, f32(B))), mode)
  end
end

function TestHalfIO:test_matmul_reads_float16_weights_as_stored()
  -- B (the weights) stays float16 too (NPUX_F_HALF_B) and the bias float32 (the fused step's
  -- epilogue operand): nothing is widened by the executor.
  -- 50 rows: GEMM blocks on B widened by panels, the bits of widening it whole; 1 row: the
  -- matrix-vector path reads B in registers, a float32 sum in another order, so within a
  -- float16 rounding step of the oracle
  local K, N = 300, 700
  local W = npu.random.normal({ K, N }, { seed = 41 })
  local Bias = npu.random.normal({ N }, { seed = 42 })
  for _, m in ipairs { 50, 1 } do
    local X = npu.random.normal({ m, K }, { seed = 40 + m })
    local g = npu.Graph()
    local x = g:placeholder("float32", { m, K }, "x")
    local y = npu.relu(npu.nn.bias_add(g:op("matmul", { x, g:const(W) }, {}, "m"), g:const(Bias)))
    local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
    local e = sess:explain(y, { [x] = X })
    local mm
    for _, st in ipairs(e.steps) do
      if st.op == "matmul" or st.op == "fused_matmul" then mm = st end
    end
    lu.assertNotNil(mm, "a matmul step")
    lu.assertEquals(mm.inputs[2].dtype, "float16")
    lu.assertEquals(e.memory.round_bytes, 0, "rows " .. m)
    local want = op16(function(gg, a, b, c)
      return npu.relu(npu.nn.bias_add(gg:op("matmul", { a, b }, {}, "m"), c))
    end, X, W, f32(Bias))
    local got = sess:run(y, { [x] = X })
    if m > 1 then
      lu.assertTrue(same(got, want), "rows " .. m)
    else
      lu.assertFalse(same(got, npu.zeros({ m, N })))
      lu.assertTrue(npu.allclose(got, want, 2 ^ -9, 1e-3), "rows " .. m)
    end
  end
end

function TestHalfIO:test_pools_take_float16_as_stored()
  local X = npu.random.normal({ 2, 11, 10, 5 }, { seed = 41 })
  local mp = function(gg, a)
    return gg:op("max_pool", { a }, { ksize = 3, strides = 2, padding = "SAME" }, "mp")
  end
  local ap = function(gg, a)
    return gg:op("avg_pool", { a }, { ksize = 2, strides = 1, padding = "VALID" }, "ap")
  end
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 11, 10, 5 }, "x")
  local y = ap(g, mp(g, npu.nn.relu(x)))
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local e = sess:explain(y, { [x] = X })
  lu.assertEquals(e.memory.round_bytes, 0)
  local want = op16(ap, op16(mp, op16(function(_, a) return npu.nn.relu(a) end, X)))
  lu.assertTrue(same(sess:run(y, { [x] = X }), want))
end

-- A model's force_fp16 plan: the widening buffer is only ever a step the kernel cannot feed
-- from float16 (softmax, ..., a convolution's or matmul's weights): its float16 operands' size
-- twice, the largest.
local function load(name)
  local json = ("%s/%s/%s.json"):format(MODELS_DIR, name, name)
  local f = io.open(json, "rb")
  if not f then return nil end
  f:close()
  local g, info = model.load_model(json)
  local feeds = {}
  for i, e in ipairs(info.inputs) do
    feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(MODELS_DIR, name, i - 1))
  end
  return g, info, feeds
end

local DIRECT = { fused_elementwise = true, add = true, sub = true, mul = true, relu = true,
  relu6 = true, reshape = true, pad = true, transpose = true, concat = true, cast = true,
  identity = true }
-- convolutions and pools read x and write y as stored (NPUX_F_HALF_XY): only weights widen
local HALF_XY = { conv2d = true, depthwise_conv2d = true, fused_conv2d = true,
  fused_depthwise_conv2d = true, max_pool = true, avg_pool = true, matmul = true,
  fused_matmul = true }

function TestHalfIO:test_blazeface_widens_only_weights()
  local g, info, feeds = load("blazeface")
  if not g then return lu.skip("blazeface not in " .. MODELS_DIR) end
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local e = sess:explain(info.output_names, feeds)
  local widest, elementwise, n_xy = 0, 0, 0
  for _, s in ipairs(e.steps) do
    local bytes = 0
    for _, side in ipairs { s.inputs, s.outputs } do
      for k, v in ipairs(side) do
        local as_stored = HALF_XY[s.op] and k == 1
        if v.dtype == "float16" and not as_stored then bytes = bytes + 2 * v.bytes end
      end
    end
    if HALF_XY[s.op] then n_xy = n_xy + 1 end
    if DIRECT[s.op] then elementwise = elementwise + 1
    elseif bytes > widest then widest = bytes end
  end
  lu.assertTrue(elementwise > 20, "elementwise steps: " .. elementwise)
  lu.assertTrue(n_xy > 20, "convolution steps: " .. n_xy)
  lu.assertEquals(e.memory.round_bytes, widest)
  -- blazeface's weights are float16 values already (read as they are): nothing is widened
  lu.assertEquals(widest, 0)
end

function TestHalfIO:test_float16_plans_hold_less_than_float32()
  -- gender: its pointwise convolutions' float16 inputs are widened by bands of rows, not
  -- whole images (a 60x60x16 one was 230 KB of float32 scratch; its plan was 832 KiB against
  -- float32's 703)
  for _, name in ipairs { "emotion", "mobileface", "gender" } do
    local g, info, feeds = load(name)
    if g then
      -- both besides the kernels' scratch and with it: float16 convolutions run the direct
      -- kernel as float32 ones do (its copy and row buffers, no im2col column buffer), so the
      -- scratch no longer tips it (emotion was 1.85 MB in float16 against 1.80 with im2col)
      local function total(mode)
        local s = npu.Session { graph = g, options = { precision_mode = mode } }
        local m = s:explain(info.output_names, feeds).memory
        return m.total_bytes - m.scratch_bytes, m.total_bytes
      end
      local b16, t16 = total("force_fp16")
      local b32, t32 = total("must_keep_origin_dtype")
      lu.assertTrue(b16 < b32, ("%s: float16 plan %d bytes besides scratch, float32 %d"):format(name, b16, b32))
      lu.assertTrue(t16 < t32, ("%s: float16 plan %d bytes, float32 %d"):format(name, t16, t32))
    end
  end
end
