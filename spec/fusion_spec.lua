-- fusion_spec.lua — the fusion passes (csrc/compile/passes.def): for each pass, what it matches,
-- what it leaves (a value that must stay: fetched, read twice, a non-constant filter or
-- operand, a broadcast that is not per channel), that steps drop by the expected count, and
-- that fused results equal the unfused plan (a switch file with ALL off) and the host
-- reference path (use_off_line = false); the fusion_switch_file rules and errors; the contents
-- of fusion_result.json (export_compile_stat).
--
-- Tolerances, float32:
--   elementwise chains, convolution + bias + activation: bit for bit (each op is the same
--     expression at the same precision; the bias is added after the sum, as unfused);
--   matmul + bias: at most 4 ulp of the output's peak |y| (the bias is the GEMM's initial
--     output, beta = 1, so it enters OpenBLAS's sum first; bits agree while k fits one
--     k-panel of OpenBLAS);
--   batch-norm folding: max |d| <= 1e-5 * peak (the scale multiplies the filter before the
--     sum instead of the sum after it);
--   against the reference path: max |d| <= 1e-5 * peak (naive loops sum in another order).
local lu = require("luaunit")
local npu = require("npu")
local support = dofile(SPEC_DIR .. "/support.lua")

local ULP = 2 ^ -23

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local read_file = support.read_all

-- A switch file in a temporary path (read when the session is created).
local function switch_file(text)
  local path = os.tmpname()
  write_file(path, text)
  return path
end

local ALL_OFF = support.FUSION_ALL_OFF

-- float32 computation, no statistics file unless asked, passes as a switch text says.
local session = support.fusion_session

local function flat(t) return t:reshape({ t:numel() }):totable() end

-- max |a - b| and max |b|
local diff = support.max_diff

-- The same float32 bits (a NaN matches any NaN).
local assert_same_bits = support.assert_same_bits

local function assert_close(a, b, rel, what)
  local d, peak = diff(a, b)
  lu.assertTrue(d <= rel * math.max(peak, 1e-30), ("%s: max |d| %.3g > %.3g * peak %.4g"):format(what or "",
    d, rel, peak))
end

-- The fused plan against the unfused one and the reference path; returns the three results
-- and the two explains.
local function three_ways(g, fetch, feeds)
  local on, off = session(g), session(g, nil, ALL_OFF)
  local ref = session(g, { use_off_line = false })
  return on:run(fetch, feeds), off:run(fetch, feeds), ref:run(fetch, feeds), on:explain(fetch, feeds),
      off:explain(fetch, feeds)
end

-- Steps of an explain as "op" or "op<Pass:absorbed,...>".
local function shape_of(e)
  local out = {}
  for _, s in ipairs(e.steps) do
    if s.pass and s.pass:match("Pass$") then
      out[#out + 1] = ("%s<%s:%s>"):format(s.op, s.pass, table.concat(s.absorbed, ","))
    else
      out[#out + 1] = s.op
    end
  end
  return out
end

local function randn(shape, seed, stddev) return npu.random.normal(shape, { seed = seed, stddev = stddev or 1 }) end

-- ---------------------------------------------------------------- MatMulBiasAddFusionPass

TestFusionMatMul = {}

-- x (m, k) @ w -> + bias -> act, every transpose and form of the bias, every activation.
function TestFusionMatMul:test_matmul_bias_activation_is_one_gemm_step()
  local acts = {
    { "none", function(y) return y end, "" },
    { "relu", npu.relu, ",Relu" },
    { "relu6", npu.relu6, ",Relu6" },
    { "leaky_relu", function(y) return npu.leaky_relu(y, { alpha = 0.1, name = "LeakyRelu" }) end, ",LeakyRelu" },
    { "sigmoid", npu.sigmoid, ",Sigmoid" },
    { "tanh", npu.tanh, ",Tanh" },
    { "prelu", function(y) return npu.prelu(y, y:graph():const(randn({ 17 }, 30)), { name = "Prelu" }) end, ",Prelu" },
  }
  local biases = {
    { "bias_add", function(mm, b) return npu.nn.bias_add(mm, b, { name = "B" }) end },
    { "add", function(mm, b) return npu.add(mm, b, { name = "B" }) end },
    { "add, bias first", function(mm, b) return npu.add(b, mm, { name = "B" }) end },
  }
  local m, k, n = 9, 300, 17
  for ai, act in ipairs(acts) do
    for bi, bias in ipairs(biases) do
      for _, ta in ipairs({ false, true }) do
        local tb = ai % 2 == 0
        local g = npu.Graph()
        local x = g:placeholder("float32", ta and { k, m } or { m, k }, "x")
        local w = g:const(randn(tb and { n, k } or { k, n }, ai, 0.1), "w")
        local b = g:const(randn(bias[1] == "add" and ai % 2 == 1 and { 1, n } or { n }, 10 + bi), "b")
        local mm = npu.matmul(x, w, { transpose_a = ta, transpose_b = tb, name = "MM" })
        local y = act[2](bias[2](mm, b))
        local feeds = { [x] = randn(ta and { k, m } or { m, k }, 20 + ai) }
        local what = ("%s, %s, transpose_a %s transpose_b %s"):format(act[1], bias[1], ta, tb)
        local r_on, r_off, r_ref, e_on, e_off = three_ways(g, y, feeds)
        lu.assertEquals(#e_off.steps, act[1] == "none" and 2 or 3, what)
        lu.assertEquals(shape_of(e_on), { "fused_matmul<MatMulBiasAddFusionPass:B" .. act[3] .. ">" }, what)
        local d, peak = diff(r_on, r_off)
        lu.assertTrue(d <= 4 * ULP * peak, ("%s: %.3g ulp of the peak"):format(what, d / (ULP * peak)))
        assert_close(r_on, r_ref, 1e-5, what)
      end
    end
  end
end

function TestFusionMatMul:test_small_k_gives_the_unfused_bits()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 32, 64 }, "x")
  local y = npu.relu(npu.nn.bias_add(x:matmul(g:const(randn({ 64, 48 }, 1))), g:const(randn({ 48 }, 2))))
  local r_on, r_off = three_ways(g, y, { [x] = randn({ 32, 64 }, 3) })
  assert_same_bits(r_on, r_off, "k = 64")
end

-- A wide product is cut into column blocks (blas.c): each block starts from its own slice of
-- the bias and applies its own slice of prelu's slopes.
function TestFusionMatMul:test_column_blocks_take_their_slice_of_bias_and_slopes()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 8, 300 }, "x")
  local h = npu.nn.bias_add(x:matmul(g:const(randn({ 300, 1024 }, 1, 0.1))), g:const(randn({ 1024 }, 2)))
  local y = npu.prelu(h, g:const(randn({ 1024 }, 3)))
  local r_on, r_off, r_ref, e_on = three_ways(g, y, { [x] = randn({ 8, 300 }, 4) })
  lu.assertEquals(#e_on.steps, 1)
  local d, peak = diff(r_on, r_off)
  lu.assertTrue(d <= 4 * ULP * peak, ("%.3g ulp of the peak"):format(d / (ULP * peak)))
  assert_close(r_on, r_ref, 1e-5, "reference")
end

-- What the pass leaves: each case keeps the matmul's own step.
function TestFusionMatMul:test_leaves_what_must_stay_or_is_not_a_bias()
  local m, k, n = 6, 8, 5
  local cases = {
    { "the product is fetched", function(g, mm, b) return { npu.relu(npu.nn.bias_add(mm, b)), mm } end,
      { "matmul", "fused_elementwise<TbeEltwiseFusionPass:Relu>" } },
    { "the product is read twice", function(g, mm, b) return npu.nn.bias_add(mm, b) + npu.abs(mm) end,
      { "matmul", "abs", "fused_elementwise<TbeEltwiseFusionPass:Add>" } },
    { "a full-size addend", function(g, mm, b) return npu.relu(mm + g:const(randn({ m, n }, 5))) end,
      { "matmul", "fused_elementwise<TbeEltwiseFusionPass:Relu>" } },
    { "a column addend", function(g, mm, b) return npu.relu(mm + g:const(randn({ m, 1 }, 6))) end,
      { "matmul", "add", "relu" } },
  }
  for _, c in ipairs(cases) do
    local g = npu.Graph()
    local x = g:placeholder("float32", { m, k }, "x")
    local mm = x:matmul(g:const(randn({ k, n }, 1)))
    local y = c[2](g, mm, g:const(randn({ n }, 2)))
    local feeds = { [x] = randn({ m, k }, 3) }
    local on = session(g)
    lu.assertEquals(shape_of(on:explain(y, feeds)), c[3], c[1])
    local off = session(g, nil, ALL_OFF)
    local a, b = on:run(y, feeds), off:run(y, feeds)
    if type(a) == "table" then a, b = a[1], b[1] end
    assert_same_bits(a, b, c[1])
  end
end

function TestFusionMatMul:test_relu_stays_when_the_sum_is_fetched()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 3 }, "x")
  local z = npu.nn.bias_add(x:matmul(g:const(randn({ 3, 2 }, 1))), g:const(randn({ 2 }, 2)), { name = "Z" })
  local r = npu.relu(z)
  local feeds = { [x] = randn({ 4, 3 }, 3) }
  local sess = session(g)
  lu.assertEquals(shape_of(sess:explain({ r, z }, feeds)), { "fused_matmul<MatMulBiasAddFusionPass:Z>", "relu" })
  local got = sess:run({ r, z }, feeds)
  local want = session(g, nil, ALL_OFF):run({ r, z }, feeds)
  assert_same_bits(got[1], want[1], "relu")
  assert_same_bits(got[2], want[2], "sum")
end

function TestFusionMatMul:test_float64_is_not_fused()
  local g = npu.Graph()
  local x = g:placeholder("float64", { 4, 3 }, "x")
  local y = npu.nn.bias_add(x:matmul(g:const(randn({ 3, 2 }, 1), "float64")), g:const(randn({ 2 }, 2), "float64"))
  lu.assertEquals(shape_of(session(g):explain(y, { [x] = randn({ 4, 3 }, 3):astype("float64") })),
    { "matmul", "bias_add" })
end

-- Training: the bias is a variable; the fused step reads it as it is, updates included.
function TestFusionMatMul:test_variable_weights_fuse_and_see_assignments()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local w = g:variable(npu.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } }), "w")
  local b = g:variable(npu.tensor({ 0.5, -10 }), "b")
  local y = npu.relu(npu.nn.bias_add(x:matmul(w), b))
  local sess = session(g)
  sess:run(g:global_variables_initializer())
  local feeds = { [x] = npu.tensor({ { 1, 2, 3 }, { -4, 5, 6 } }) }
  lu.assertEquals(#sess:explain(y, feeds).steps, 3) -- two variable reads and the fused step
  lu.assertEquals(sess:run(y, feeds):totable(), { { 4.5, 0 }, { 2.5, 1 } })
  sess:run(npu.assign(b, g:const(npu.tensor({ 0, 0 }))))
  lu.assertEquals(sess:run(y, feeds):totable(), { { 4, 5 }, { 2, 11 } })
end

-- ---------------------------------------------------------------- ConvBiasAddFusionPass

-- ---------------------------------------------------------------- ConvMaxPoolFusionPass

TestFusionConvMaxPool = {}

local POOL_OFF = '{"Switch":{"GraphFusion":{"ConvMaxPoolFusionPass":"off"}}}'

-- x (n, h, w, c) -> conv 3x3 (padding) + bias + relu -> max_pool: the graph, its output, feeds.
local function conv_pool_graph(n, h, w, c, oc, padding, pool)
  local g = npu.Graph()
  local x = g:placeholder("float32", { n, h, w, c }, "x")
  local y = npu.relu(npu.nn.bias_add(npu.nn.conv2d(x, g:const(randn({ 3, 3, c, oc }, 1, 0.3), "w"),
    { padding = padding, name = "C" }), g:const(randn({ oc }, 3), "b"), { name = "B" }))
  local p = npu.nn.max_pool(y, { ksize = pool[1], strides = pool[2], padding = pool[3], name = "P" })
  return g, x, p, { [x] = randn({ n, h, w, c }, 2) }
end

-- Batch 1 and 3, odd sizes, SAME and VALID convolutions and pools, channels off any block:
-- one step, the unfused bits, the same bits at 1 and 2 threads, the reference within 1e-5.
function TestFusionConvMaxPool:test_pool_joins_the_convolution_with_the_unfused_bits()
  local n0 = npu.core.n_threads()
  for _, v in ipairs({
    { 1, 28, 28, 1, 32, "SAME", { 2, 2, "VALID" } }, { 3, 9, 7, 5, 13, "SAME", { 2, 2, "SAME" } },
    { 2, 11, 10, 9, 6, "VALID", { 2, 2, "VALID" } }, { 1, 13, 13, 3, 4, "SAME", { 3, 3, "SAME" } },
    { 2, 8, 9, 17, 33, "VALID", { { 1, 2 }, { 2, 2 }, "VALID" } },
  }) do
    local what = ("%dx%dx%dx%d -> %d, %s, pool %s"):format(v[1], v[2], v[3], v[4], v[5], v[6], v[7][3])
    local g, _, p, feeds = conv_pool_graph(table.unpack(v))
    npu.core.set_n_threads(1)
    local on, off, ref, e_on, e_off = three_ways(g, p, feeds)
    local pool_off = session(g, nil, POOL_OFF)
    npu.core.set_n_threads(2)
    local on2 = session(g):run(p, feeds)
    npu.core.set_n_threads(n0)
    lu.assertEquals(shape_of(e_on), { "fused_conv2d<ConvBiasAddFusionPass:B,Relu,P>" }, what)
    lu.assertEquals(#e_off.steps, 4, what)
    lu.assertEquals(shape_of(pool_off:explain(p, feeds)), { "fused_conv2d<ConvBiasAddFusionPass:B,Relu>", "max_pool" }, what)
    assert_same_bits(on, off, what)
    assert_same_bits(on, pool_off:run(p, feeds), what .. ", pool unfused")
    assert_same_bits(on2, on, what .. ", 2 threads")
    assert_close(on, ref, 1e-5, what .. ", reference")
  end
end

-- A plain conv2d takes the pool too; overlapping windows, a second reader of the convolution,
-- a training graph's gradients or a float16 precision mode where the direct kernel does not
-- take the pair (4 channels: the pooled im2col kernel is float32 only) leave the pool its own
-- step (half_io_spec: a float16 pair it takes).
function TestFusionConvMaxPool:test_what_stays_unfused()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 8, 8, 3 }, "x")
  local c = npu.nn.conv2d(x, g:const(randn({ 3, 3, 3, 4 }, 1), "w"), { padding = "SAME", name = "C" })
  local p = npu.nn.max_pool(c, { ksize = 2, strides = 2, padding = "VALID", name = "P" })
  local feeds = { [x] = randn({ 2, 8, 8, 3 }, 2) }
  local on, off, _, e_on = three_ways(g, p, feeds)
  lu.assertEquals(shape_of(e_on), { "fused_conv2d<ConvMaxPoolFusionPass:P>" })
  assert_same_bits(on, off, "plain conv2d")
  local q = npu.nn.max_pool(c, { ksize = 3, strides = 2, padding = "SAME", name = "Q" })
  lu.assertEquals(shape_of(session(g):explain(q, feeds)), { "conv2d", "max_pool" })
  lu.assertEquals(shape_of(session(g):explain({ p, c }, feeds)), { "conv2d", "max_pool" })
  local mixed = {}
  for _, s in ipairs(session(g, { precision_mode = "allow_mix_precision" }):explain(p, feeds).steps) do
    mixed[s.op] = true
  end
  lu.assertTrue(mixed.max_pool, "allow_mix_precision, 4 channels: the pool stays")
  local gx = npu.gradients(npu.reduce_sum(p), { x })[1]
  local ops = {}
  for _, s in ipairs(session(g):explain(gx, feeds).steps) do ops[s.op] = true end
  lu.assertTrue(ops.max_pool and ops.max_pool_grad, "training: the pool stays")
end

-- Winograd by mode: super_performance (op_precision_mode) runs conv2d by Winograd wherever
-- it takes the shape (3x3, stride 1, >= 8 channels in and out), pooled or not; the same bits
-- at 1 and 2 threads; the unfused Winograd plan's bits; within rounding of the reference.
-- high_performance (the default mode) picks it only where it is measured faster
-- (compile/implmode.c's rule); high_precision runs the direct kernel (out_c a multiple of 8);
-- Winograd never for one input channel.
function TestFusionConvMaxPool:test_winograd_by_implementation_mode()
  local n0 = npu.core.n_threads()
  local super = os.tmpname()
  write_file(super, "[ByOpType]\nConv2D=super_performance\n")
  local fast = { op_precision_mode = super }
  -- the last field: what high_performance alone picks (the filter is a constant: the rule for
  -- a filter transformed once, implmode.c; 9 -> 8 channels are below it)
  for _, v in ipairs({ { 2, 14, 14, 32, 64, "SAME", { 2, 2, "VALID" }, "winograd_2x3" },
                       { 1, 9, 7, 9, 8, "VALID", { 2, 2, "SAME" }, "direct" } }) do
    local g, x, p, feeds = conv_pool_graph(table.unpack(v, 1, 7))
    npu.core.set_n_threads(1)
    local sess = session(g, fast)
    local y, e = sess:run(p, feeds), sess:explain(p, feeds)
    local unfused = session(g, fast, ALL_OFF)
    local y_off, e_off = unfused:run(p, feeds), unfused:explain(p, feeds)
    npu.core.set_n_threads(2)
    local y2 = session(g, fast):run(p, feeds)
    npu.core.set_n_threads(n0)
    lu.assertEquals(e.steps[1].algo, "winograd_2x3")
    lu.assertEquals(e.steps[1].impl, "high_performance")
    lu.assertEquals(e_off.steps[1].algo, "winograd_2x3")
    lu.assertEquals(session(g):explain(p, feeds).steps[1].algo, "direct") -- high_precision
    lu.assertEquals(session(g, { op_select_implmode = "high_performance" }):explain(p, feeds)
      .steps[1].algo, v[8])
    -- the default mode is high_performance: its choice
    local default = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
    lu.assertEquals(default:explain(p, feeds).steps[1].algo, v[8])
    assert_same_bits(y, y_off, "winograd fused / unfused")
    assert_same_bits(y2, y, "winograd, 2 threads")
    assert_close(y, session(g, { use_off_line = false }):run(p, feeds), 1e-5, "winograd, reference")
    -- by node or type in op_precision_mode's file as well, and never for 1 channel in
    local ini = os.tmpname()
    local f = io.open(ini, "w")
    f:write("[ByNodeName]\nC=super_performance\n")
    f:close()
    local by_file = session(g, { op_precision_mode = ini }):explain(p, feeds)
    os.remove(ini)
    lu.assertEquals(by_file.steps[1].algo, "winograd_2x3")
    local _ = x
  end
  local g, _, p, feeds = conv_pool_graph(1, 28, 28, 1, 32, "SAME", { 2, 2, "VALID" })
  lu.assertEquals(session(g, fast):explain(p, feeds).steps[1].algo, "direct") -- not Winograd
  os.remove(super)
end

-- ---------------------------------------------------------------- MaxPoolGradReluGradFusionPass

TestFusionPoolGradRelu = {}

local POOL_GRAD_OFF = '{"Switch":{"GraphFusion":{"MaxPoolGradReluGradFusionPass":"off"}}}'

-- Which ops an explain runs, counted.
local function op_counts(e)
  local n = {}
  for _, s in ipairs(e.steps) do n[s.op] = (n[s.op] or 0) + 1 end
  return n
end

-- conv + bias + relu + max_pool, backwards (the gradients of x and the filter): each
-- max_pool_grad and its relu_grad are one step, the bits of the pass switched off (and of
-- ALL off), the same bits at 1 and 2 threads, the reference path within 1e-5 of the peak.
-- Pools that tile the input, leave gaps (odd sizes), pad (SAME) and overlap (3x3 stride 2);
-- channels off the 8-lane vectors.
function TestFusionPoolGradRelu:test_relu_grad_joins_max_pool_grad_with_the_same_bits()
  local n0 = npu.core.n_threads()
  for _, v in ipairs({
    { 2, 8, 8, 3, 16, "SAME", { 2, 2, "VALID" } }, { 3, 9, 7, 5, 13, "SAME", { 2, 2, "SAME" } },
    { 2, 11, 10, 9, 6, "VALID", { 3, 2, "SAME" } }, { 1, 13, 13, 3, 4, "SAME", { 3, 3, "VALID" } },
  }) do
    local what = ("%dx%dx%dx%d -> %d, pool %d/%d %s"):format(v[1], v[2], v[3], v[4], v[5], v[7][1], v[7][2], v[7][3])
    local g, x, p, feeds = conv_pool_graph(table.unpack(v))
    local gx = npu.gradients(npu.reduce_sum(p * p), { x })[1]
    npu.core.set_n_threads(1)
    local on, off, ref, e_on, e_off = three_ways(g, gx, feeds)
    local pass_off = session(g, nil, POOL_GRAD_OFF)
    npu.core.set_n_threads(2)
    local on2 = session(g):run(gx, feeds)
    npu.core.set_n_threads(n0)
    local n_on, n_off = op_counts(e_on), op_counts(pass_off:explain(gx, feeds))
    lu.assertEquals(n_on.fused_max_pool_grad_relu_grad, 1, what)
    lu.assertNil(n_on.relu_grad, what)
    lu.assertNil(n_on.max_pool_grad, what)
    lu.assertEquals({ n_off.max_pool_grad, n_off.relu_grad, n_off.fused_max_pool_grad_relu_grad }, { 1, 1, nil }, what)
    lu.assertEquals(#e_on.steps + 1, #pass_off:explain(gx, feeds).steps, what)
    lu.assertTrue(#e_off.steps > #e_on.steps, what)
    local pooled_step
    for _, s in ipairs(e_on.steps) do
      if s.op == "fused_max_pool_grad_relu_grad" then pooled_step = s end
    end
    lu.assertEquals(pooled_step.pass, "MaxPoolGradReluGradFusionPass", what)
    lu.assertEquals(#pooled_step.absorbed, 1, what)
    local d, peak = diff(on, ref)
    lu.assertTrue(peak > 0, what) -- the gradient is not all zero
    assert_same_bits(on, pass_off:run(gx, feeds), what .. ", pass off")
    assert_same_bits(on, off, what .. ", all off")
    assert_same_bits(on2, on, what .. ", 2 threads")
    lu.assertTrue(d <= 1e-5 * peak, what .. ", reference")
  end
end

-- The ops built by hand: one step where relu_grad's features are the pool's input or another
-- tensor of its shape (the same bits as unfused, the reference within 1e-5); two steps where
-- the pool's gradient is fetched too, read by another op, or the features differ in shape
-- (a broadcast is not relu_grad's) or dtype (float64 features: no float32 fusion).
function TestFusionPoolGradRelu:test_by_hand_and_what_stays_unfused()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 6, 6, 9 }, "x")
  local f = g:placeholder("float32", { 2, 6, 6, 9 }, "f")
  local dy = g:placeholder("float32", { 2, 3, 3, 9 }, "dy")
  local y = npu.nn.max_pool(x, { ksize = 2, strides = 2, padding = "VALID", name = "P" })
  local mpg = npu.max_pool_grad(x, y, dy, { ksize = 2, strides = 2, padding = "VALID", name = "G" })
  local feeds = { [x] = randn({ 2, 6, 6, 9 }, 5), [f] = randn({ 2, 6, 6, 9 }, 7), [dy] = randn({ 2, 3, 3, 9 }, 6) }
  for i, feat in ipairs({ x, f }) do
    local r = npu.relu_grad(mpg, feat, { name = "R" .. i })
    local on, off, ref, e_on = three_ways(g, r, feeds)
    lu.assertEquals(shape_of(e_on), { "max_pool", "fused_max_pool_grad_relu_grad<MaxPoolGradReluGradFusionPass:R" .. i .. ">" })
    assert_same_bits(on, off, "by hand")
    local d, peak = diff(on, ref)
    lu.assertTrue(peak > 0 and d <= 1e-5 * peak)
    local zeros = 0
    for _, v in ipairs(flat(on)) do zeros = zeros + (v == 0 and 1 or 0) end
    lu.assertTrue(zeros > 2 * 6 * 6 * 9 * 3 / 4, "a 2x2 pool's gradient is mostly zero, relu cuts more")
  end
  local r = npu.relu_grad(mpg, f)
  local fetched = op_counts(session(g):explain({ r, mpg }, feeds))
  lu.assertEquals({ fetched.max_pool_grad, fetched.relu_grad }, { 1, 1 })
  local twice = op_counts(session(g):explain({ r, npu.relu(mpg) }, feeds))
  lu.assertEquals({ twice.max_pool_grad, twice.relu_grad }, { 1, 1 })
  lu.assertNil(twice.fused_max_pool_grad_relu_grad)
end

-- ---------------------------------------------------------------- ApplyGradientDescentFusionPass

TestFusionApplyGradientDescent = {}

local SGD_OFF = '{"Switch":{"GraphFusion":{"ApplyGradientDescentFusionPass":"off"}}}'

-- w (r, c) -= lr * op(a) op(b), a and b fed: the train op and the variable.
local function sgd_graph(r, c, k, ta, tb, lr_of)
  local g = npu.Graph()
  local a = g:placeholder("float32", ta and { k, r } or { r, k }, "a")
  local b = g:placeholder("float32", tb and { c, k } or { k, c }, "b")
  local w = g:variable(randn({ r, c }, 1), "w")
  local d = npu.matmul(a, b, { transpose_a = ta, transpose_b = tb, name = "dW" })
  local step = npu.assign(w, w - (lr_of and lr_of(g) or g:const(0.0123, "lr")) * d)
  local feeds = { [a] = randn(ta and { k, r } or { r, k }, 2), [b] = randn(tb and { c, k } or { k, c }, 3) }
  return g, w, step, feeds, d
end

-- Three updates, then w: under the given options and switches.
local function sgd_run(g, w, step, feeds, opts, switches)
  local sess = session(g, opts, switches)
  sess:run(g:global_variables_initializer())
  for _ = 1, 3 do sess:run(step, feeds) end
  return sess:run(w), sess:explain(step, feeds)
end

-- Few rows (1, 2, 3, 5: GEMV or sgemm), row blocks, column blocks, every transpose: one step,
-- the unfused bits, the same bits at 1 and 2 threads, the reference path within 1e-5.
function TestFusionApplyGradientDescent:test_update_is_one_step_with_the_unfused_bits()
  local n0 = npu.core.n_threads()
  for _, sz in ipairs({ { 1, 300, 20 }, { 2, 10, 7 }, { 3, 5, 2 }, { 5, 17, 9 }, { 600, 64, 64 }, { 40, 1100, 64 } }) do
    for _, ta in ipairs({ false, true }) do
      for _, tb in ipairs({ false, true }) do
        local what = ("%dx%dx%d, transpose_a %s transpose_b %s"):format(sz[1], sz[2], sz[3], ta, tb)
        local g, w, step, feeds = sgd_graph(sz[1], sz[2], sz[3], ta, tb)
        npu.core.set_n_threads(1)
        local on, e_on = sgd_run(g, w, step, feeds)
        local off, e_off = sgd_run(g, w, step, feeds, nil, SGD_OFF)
        npu.core.set_n_threads(2)
        local on2 = sgd_run(g, w, step, feeds)
        npu.core.set_n_threads(n0)
        local ref = sgd_run(g, w, step, feeds, { use_off_line = false })
        lu.assertEquals(shape_of(e_on), { "variable", "fused_apply_gradient_descent<ApplyGradientDescentFusionPass:Mul,Sub,Assign>" }, what)
        -- without the GEMM form the update is still one step after the product
        lu.assertEquals(shape_of(e_off), { "variable", "matmul", "fused_gradient_descent_update<GradientDescentUpdateFusionPass:Sub,Assign>" }, what)
        assert_same_bits(on, off, what)
        assert_same_bits(on2, on, what .. ", 2 threads")
        assert_close(on, ref, 1e-5, what .. ", reference")
      end
    end
  end
end

-- The optimizer's own graph (tf.train.GradientDescentOptimizer): every dense kernel's update
-- fuses, the weights after three steps are the bits of the unfused update.
function TestFusionApplyGradientDescent:test_gradient_descent_optimizer_on_an_mlp()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 16, 30 }, "x")
  local y = g:placeholder("int32", { 16 }, "y")
  local init = npu.initializers.glorot_uniform
  local h = npu.layers.dense(x, 20, { activation = "relu", kernel_initializer = init { seed = 1 } })
  local logits = npu.layers.dense(h, 4, { kernel_initializer = init { seed = 2 } })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
  local train_op = npu.train.GradientDescentOptimizer(0.1):minimize(loss)
  local feeds = { [x] = randn({ 16, 30 }, 5), [y] = npu.tensor({ 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3 }, "int32") }
  local vars = g:global_variables()
  local function train(switches)
    local sess = session(g, nil, switches)
    sess:run(g:global_variables_initializer())
    for _ = 1, 3 do sess:run(train_op, feeds) end
    local n = 0
    for _, st in ipairs(sess:explain(train_op, feeds).steps) do
      if st.op == "fused_apply_gradient_descent" then n = n + 1 end
    end
    return sess:run(vars), n
  end
  local on, n_on = train()
  local off, n_off = train(SGD_OFF)
  lu.assertEquals(n_on, 2)
  lu.assertEquals(n_off, 0)
  for i = 1, #vars do assert_same_bits(on[i], off[i], "variable " .. i) end
end

-- What stays unfused: a fetched gradient, a learning rate of several elements, a product that
-- reads the variable it updates, force_fp16 (whose mul and sub are float16 too); the mixed
-- modes fuse.
function TestFusionApplyGradientDescent:test_leaves_what_it_cannot_update_in_place()
  local cases = {
    { "the gradient is fetched", function()
      local g, w, step, feeds, d = sgd_graph(4, 6, 3, false, false)
      return g, w, { step, d }, feeds
    end },
    { "lr per column", function()
      return sgd_graph(4, 6, 3, false, false, function(g) return g:const(randn({ 6 }, 9)) end)
    end },
    { "the product reads the variable", function()
      local g = npu.Graph()
      local a = g:placeholder("float32", { 5, 5 }, "a")
      local w = g:variable(randn({ 5, 5 }, 1), "w")
      local step = npu.assign(w, w - g:const(0.01, "lr") * npu.matmul(a, w, { name = "dW" }))
      return g, w, step, { [a] = randn({ 5, 5 }, 2) }
    end },
  }
  for _, c in ipairs(cases) do
    local g, w, step, feeds = c[2]()
    local on, e_on = sgd_run(g, w, step, feeds)
    local off = sgd_run(g, w, step, feeds, nil, SGD_OFF)
    for _, st in ipairs(e_on.steps) do lu.assertNotEquals(st.op, "fused_apply_gradient_descent", c[1]) end
    assert_same_bits(on, off, c[1])
  end
  -- force_fp16 computes mul and sub in float16 too: no float32 update to fuse into
  local g, w, step, feeds = sgd_graph(4, 6, 3, false, false)
  local _, e = sgd_run(g, w, step, feeds, { precision_mode = "force_fp16" })
  for _, st in ipairs(e.steps) do lu.assertNotEquals(st.op, "fused_apply_gradient_descent", "force_fp16") end
  -- the mixed modes fuse, with the unfused plan's bits (bf16_sgd_spec.lua has the MLP)
  for _, mode in ipairs { "allow_mix_precision", "allow_mix_precision_bf16" } do
    local on, e_on = sgd_run(g, w, step, feeds, { precision_mode = mode })
    local off = sgd_run(g, w, step, feeds, { precision_mode = mode }, SGD_OFF)
    lu.assertEquals(op_counts(e_on).fused_apply_gradient_descent, 1, mode)
    assert_same_bits(on, off, mode)
  end
end

-- A fetched value of the variable keeps the value it had (the update copies first); the next
-- run's update starts from the variable, not from the fetched copy.
function TestFusionApplyGradientDescent:test_fetched_values_are_not_written()
  local g, w, step, feeds = sgd_graph(3, 200, 8, false, false)
  local sess = session(g)
  sess:run(g:global_variables_initializer())
  local before = sess:run(w)
  local copy = flat(before)
  sess:run(step, feeds)
  assert_same_bits(before, npu.tensor(copy):reshape({ 3, 200 }), "held value")
  local after = sess:run(w)
  local off = session(g, nil, SGD_OFF)
  off:run(g:global_variables_initializer())
  off:run(step, feeds)
  assert_same_bits(after, off:run(w), "updated value")
end

-- ------------------------------------- ReluGradBiasAddGradFusionPass, GradientDescentUpdateFusionPass

TestFusionTrainingStep = {}

local TRAIN_OFF = '{"Switch":{"GraphFusion":{"ReluGradBiasAddGradFusionPass":"off","GradientDescentUpdateFusionPass":"off","MaxPoolGradReluGradFusionPass":"off","LogSoftmaxGradFusionPass":"off"}}}'

-- An MLP trained by GradientDescentOptimizer, three steps: each hidden layer's relu_grad and
-- bias_add_grad are one step, each bias's mul, sub and assign one step, the forward loss's
-- reduce_sum and neg gone (the gradient's broadcast_like folds with their shapes); the
-- weights are the bits of the passes off, of ALL off, and at 2 threads; the reference path
-- within 1e-5.  Batch 300: column sums long enough to show an accumulation.
function TestFusionTrainingStep:test_mlp_step_fuses_with_the_unfused_bits()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 300, 30 }, "x")
  local y = g:placeholder("int32", { 300 }, "y")
  local init = npu.initializers.glorot_uniform
  local h = npu.layers.dense(x, 40, { activation = "relu", kernel_initializer = init { seed = 1 } })
  h = npu.layers.dense(h, 20, { activation = "relu", kernel_initializer = init { seed = 3 } })
  local logits = npu.layers.dense(h, 4, { kernel_initializer = init { seed = 2 } })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
  local train_op = npu.train.GradientDescentOptimizer(0.1):minimize(loss)
  local labels = {}
  for i = 1, 300 do labels[i] = i % 4 end
  local feeds = { [x] = randn({ 300, 30 }, 5), [y] = npu.tensor(labels, "int32") }
  local vars = g:global_variables()
  local function train(opts, switches)
    local sess = session(g, opts, switches)
    sess:run(g:global_variables_initializer())
    for _ = 1, 3 do sess:run(train_op, feeds) end
    return sess:run(vars), sess:explain(train_op, feeds)
  end
  local n0 = npu.core.n_threads()
  npu.core.set_n_threads(1)
  local on, e_on = train()
  local pass_off, e_pass_off = train(nil, TRAIN_OFF)
  local off = train(nil, ALL_OFF)
  npu.core.set_n_threads(2)
  local on2 = train()
  npu.core.set_n_threads(n0)
  local ref = train({ use_off_line = false })
  local n = op_counts(e_on)
  lu.assertEquals(n.fused_relu_grad_bias_add_grad, 2)
  lu.assertEquals(n.fused_gradient_descent_update, 3)
  lu.assertEquals(n.fused_apply_gradient_descent, 3)
  lu.assertEquals(n.fused_log_softmax_grad, 1)
  lu.assertNil(n.relu_grad)
  lu.assertNil(n.bias_add_grad) -- the logits' bias: with the loss's gradient
  lu.assertNil(n.log_softmax)
  lu.assertNil(n.log_softmax_grad)
  lu.assertNil(n.mul)
  lu.assertNil(n.reduce_sum)
  lu.assertNil(n.neg)
  lu.assertNil(n.broadcast_like)
  lu.assertNil(n.assign)
  for _, st in ipairs(e_on.steps) do
    if st.op == "fused_relu_grad_bias_add_grad" then
      lu.assertEquals(st.pass, "ReluGradBiasAddGradFusionPass")
      lu.assertStrContains(st.absorbed[1], "BiasAddGrad")
    end
  end
  local n_off = op_counts(e_pass_off)
  lu.assertEquals({ n_off.relu_grad, n_off.bias_add_grad, n_off.fused_relu_grad_bias_add_grad }, { 2, 3, nil })
  lu.assertEquals({ n_off.log_softmax, n_off.log_softmax_grad, n_off.fused_log_softmax_grad }, { 1, 1, nil })
  lu.assertEquals(#e_pass_off.steps, #e_on.steps + 2 + 3 + 3)
  for i = 1, #vars do
    assert_same_bits(on[i], pass_off[i], "variable " .. i .. ", passes off")
    assert_same_bits(on[i], off[i], "variable " .. i .. ", all off")
    assert_same_bits(on2[i], on[i], "variable " .. i .. ", 2 threads")
    assert_close(on[i], ref[i], 1e-5, "variable " .. i .. ", reference")
  end
end

-- relu_grad and bias_add_grad by hand on awkward values (NaN and -0 features and gradients,
-- +-inf, 2000 rows, 37 columns: off the 8 lanes): g the bits of relu_grad, db each column's
-- float64 sum of g in row order rounded once (computed here), the bits of the two steps.
function TestFusionTrainingStep:test_by_hand_against_float64_sums()
  local rows, cols = 2000, 37
  local g = npu.Graph()
  local dy = g:placeholder("float32", { rows, cols }, "dy")
  local f = g:placeholder("float32", { rows, cols }, "f")
  local r = npu.relu_grad(dy, f, { name = "R" })
  local db = npu.bias_add_grad(r, { name = "D" })
  local d, ft = {}, {}
  local specials = { 0 / 0, -0.0, 0.0, math.huge, -math.huge, 1e30, -1e-30 }
  local rnd = flat(randn({ rows * cols }, 11, 100))
  local sgn = flat(randn({ rows * cols }, 12))
  for i = 1, rows * cols do
    d[i] = i % 97 == 0 and specials[i % 7 + 1] or rnd[i]
    ft[i] = i % 89 == 0 and specials[(i + 3) % 7 + 1] or sgn[i]
  end
  local feeds = { [dy] = npu.tensor(d):reshape({ rows, cols }), [f] = npu.tensor(ft):reshape({ rows, cols }) }
  local on, off = session(g), session(g, nil, ALL_OFF)
  local e = on:explain({ r, db }, feeds)
  lu.assertEquals(shape_of(e), { "fused_relu_grad_bias_add_grad<ReluGradBiasAddGradFusionPass:D>" })
  local got, want = on:run({ r, db }, feeds), off:run({ r, db }, feeds)
  assert_same_bits(got[1], want[1], "g")
  assert_same_bits(got[2], want[2], "db")
  local gv, dbv = flat(got[1]), flat(got[2])
  for c = 1, cols do
    local sum = 0.0
    for i = 0, rows - 1 do sum = sum + string.unpack("<f", string.pack("<f", gv[i * cols + c])) end
    lu.assertEquals(string.pack("<f", dbv[c]), string.pack("<f", sum), "column " .. c)
  end
  for i = 1, rows * cols do
    local keep = ft[i] > 0
    if keep then
      lu.assertTrue(gv[i] == string.unpack("<f", string.pack("<f", d[i])) or (gv[i] ~= gv[i] and d[i] ~= d[i]))
    else
      lu.assertEquals(string.pack("<f", gv[i]), string.pack("<f", 0.0), "masked element " .. i)
    end
  end
end

-- What stays: relu_grad with no bias_add_grad of it, a bias_add_grad of another value, a
-- reduced precision mode (relu_grad is gray, bias_add_grad block-listed); an update whose
-- learning rate has several elements, or whose gradient is a view of the variable, or under
-- force_fp16 (the mixed modes keep the update float32 and fuse it).
function TestFusionTrainingStep:test_what_stays_unfused()
  local g = npu.Graph()
  local dy = g:placeholder("float32", { 8, 16 }, "dy")
  local f = g:placeholder("float32", { 8, 16 }, "f")
  local r = npu.relu_grad(dy, f)
  local feeds = { [dy] = randn({ 8, 16 }, 1), [f] = randn({ 8, 16 }, 2) }
  lu.assertEquals(shape_of(session(g):explain(r * 2, feeds)), { "relu_grad", "mul" })
  lu.assertEquals(shape_of(session(g):explain({ r, npu.bias_add_grad(dy) }, feeds)), { "relu_grad", "bias_add_grad" })
  local mixed = op_counts(session(g, { precision_mode = "allow_mix_precision" }):explain(npu.bias_add_grad(r), feeds))
  lu.assertNil(mixed.fused_relu_grad_bias_add_grad)
  -- updates
  local v = g:variable(randn({ 16 }, 3), "v")
  local grad = npu.bias_add_grad(dy)
  local cases = {
    { "lr per element", npu.assign(v, v - g:const(randn({ 16 }, 4)) * grad) },
    { "the gradient is the variable", npu.assign(v, v - g:const(0.5) * v) },
  }
  for _, c in ipairs(cases) do
    local sess = session(g)
    sess:run(g:global_variables_initializer())
    lu.assertNil(op_counts(sess:explain(c[2], feeds)).fused_gradient_descent_update, c[1])
  end
  local step = npu.assign(v, v - g:const(0.5) * grad)
  local sess = session(g)
  sess:run(g:global_variables_initializer())
  lu.assertEquals(op_counts(sess:explain(step, feeds)).fused_gradient_descent_update, 1)
  local forced = session(g, { precision_mode = "force_fp16" })
  forced:run(g:global_variables_initializer())
  lu.assertNil(op_counts(forced:explain(step, feeds)).fused_gradient_descent_update)
  -- under a mixed mode the update stays float32 (the assign writes it): fused
  local mix = session(g, { precision_mode = "allow_mix_precision" })
  mix:run(g:global_variables_initializer())
  lu.assertEquals(op_counts(mix:explain(step, feeds)).fused_gradient_descent_update, 1)
  -- the fetched gradient is still read by the update (and is the unfused value)
  local before = sess:run(v)
  local got = sess:run({ grad, step }, feeds)
  local gv, b0, after = flat(got[1]), flat(before), flat(sess:run(v))
  for i = 1, 16 do
    local step_i = string.unpack("<f", string.pack("<f", 0.5 * gv[i]))
    lu.assertEquals(string.pack("<f", after[i]), string.pack("<f", b0[i] - step_i))
  end
end

-- The forward loss fetched beside the train op keeps its steps (and its value); a loss not
-- fetched leaves only what the gradient needs (the broadcasts folded, as a constant).
function TestFusionTrainingStep:test_folded_broadcasts_and_the_loss()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 6, 5 }, "x")
  local lab = g:placeholder("float32", { 6, 5 }, "lab")
  local w = g:variable(randn({ 5, 5 }, 1), "w")
  local logits = npu.matmul(x, w)
  local loss = npu.reduce_mean(-npu.reduce_sum(lab * npu.nn.log_softmax(logits), { axis = -1 }))
  local train_op = npu.train.GradientDescentOptimizer(0.1):minimize(loss)
  local lv = {}
  for i = 1, 30 do lv[i] = i % 5 == 0 and 1 or 0 end
  local feeds = { [x] = randn({ 6, 5 }, 2), [lab] = npu.tensor(lv):reshape({ 6, 5 }) }
  local sess = session(g)
  sess:run(g:global_variables_initializer())
  local e = sess:explain(train_op, feeds)
  lu.assertNil(op_counts(e).reduce_sum)
  lu.assertNil(op_counts(e).broadcast_like)
  lu.assertEquals(op_counts(e).fused_log_softmax_grad, 1)
  local e2 = sess:explain({ loss, train_op }, feeds)
  lu.assertEquals(op_counts(e2).reduce_sum, 1)
  -- the loss reads the log-probabilities too: they stay a step of their own
  lu.assertNil(op_counts(e2).fused_log_softmax_grad)
  lu.assertEquals(op_counts(e2).log_softmax, 1)
  local off = session(g, nil, ALL_OFF)
  off:run(g:global_variables_initializer())
  local l_on, l_off = sess:run({ loss, train_op }, feeds)[1], off:run({ loss, train_op }, feeds)[1]
  assert_same_bits(l_on, l_off, "loss")
  assert_same_bits(sess:run(w), off:run(w), "w")
end

-- The loss's gradient by hand: logits with NaN, +-inf and huge values, long rows (300
-- columns), the mul's operands full or one element, with and without the bias gradient: one
-- step, the bits of the passes off and of ALL off, at 1 and 2 threads; under high_precision
-- and under high_performance (the default), where the fused step runs log_softmax's fast
-- kernel (impl), as the unfused plan does.
function TestFusionTrainingStep:test_log_softmax_grad_by_hand()
  local rows, cols = 37, 300
  local zs = flat(randn({ rows * cols }, 21, 5))
  for i = 1, #zs do
    if i % 101 == 0 then zs[i] = ({ 0 / 0, math.huge, -math.huge, 1e30 })[i // 101 % 4 + 1] end
  end
  local z0 = npu.tensor(zs):reshape({ rows, cols })
  local differ = 0
  for _, mode in ipairs({ "high_precision", "high_performance" }) do
    local opts = { op_select_implmode = mode }
    for _, form in ipairs({ "full", "one" }) do
      for _, with_bias in ipairs({ false, true }) do
        local what = mode .. ", " .. form .. (with_bias and ", bias" or "")
        local g = npu.Graph()
        local z = g:placeholder("float32", { rows, cols }, "z")
        local a = g:placeholder("float32", { rows, cols }, "a")
        local b = form == "full" and g:placeholder("float32", { rows, cols }, "b") or g:const(-1 / 37, "b")
        local d = npu.log_softmax_grad(npu.nn.log_softmax(z), a * b)
        local fetch = with_bias and { d, npu.bias_add_grad(d) } or { d }
        local feeds = { [z] = z0, [a] = randn({ rows, cols }, 22) }
        if form == "full" then feeds[b] = randn({ rows, cols }, 23) end
        local n0 = npu.core.n_threads()
        npu.core.set_n_threads(1)
        local on, e = session(g, opts):run(fetch, feeds), session(g, opts):explain(fetch, feeds)
        local off = session(g, opts, ALL_OFF):run(fetch, feeds)
        local pass_off = session(g, opts, TRAIN_OFF):run(fetch, feeds)
        npu.core.set_n_threads(2)
        local on2 = session(g, opts):run(fetch, feeds)
        npu.core.set_n_threads(n0)
        lu.assertEquals(#e.steps, 1, what)
        lu.assertEquals(e.steps[1].op, "fused_log_softmax_grad", what)
        lu.assertEquals(e.steps[1].impl, mode, what)
        lu.assertEquals(#e.steps[1].absorbed, with_bias and 3 or 2, what)
        for i = 1, #fetch do
          assert_same_bits(on[i], off[i], what .. ", all off")
          assert_same_bits(on[i], pass_off[i], what .. ", passes off")
          assert_same_bits(on2[i], on[i], what .. ", 2 threads")
        end
      end
    end
  end
  -- every row above holds a NaN, an infinity or 1e30 (sums of exactly 1): on ordinary logits
  -- the two kernels round apart, and the default session is the fast one, fused or not
  local g = npu.Graph()
  local z = g:placeholder("float32", { rows, cols }, "z")
  local a = g:placeholder("float32", { rows, cols }, "a")
  local d = npu.log_softmax_grad(npu.nn.log_softmax(z), a * g:const(-1 / 37, "b"))
  local feeds = { [z] = randn({ rows, cols }, 24, 5), [a] = randn({ rows, cols }, 22) }
  local precise = flat(session(g):run(d, feeds))
  local default = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  lu.assertEquals(default:explain(d, feeds).steps[1].impl, "high_performance")
  local fast = default:run(d, feeds)
  assert_same_bits(fast, session(g, { op_select_implmode = "high_performance" }, ALL_OFF):run(d, feeds),
    "default, all off")
  for k, v in ipairs(flat(fast)) do
    if v ~= precise[k] then differ = differ + 1 end
  end
  lu.assertTrue(differ > 0, "the fast log_softmax's bits differ from libm's somewhere")
end

-- conv + bias + relu + max_pool trained (the bias a variable): the bias gradient joins the
-- fused max_pool_grad + relu_grad step as its second output; the images' float64 sums added
-- in order may differ from one running sum in the last bit only: within one ulp of the
-- float64 sum of the step's own dx (computed here), at 1 and 2 threads the same bits.
function TestFusionTrainingStep:test_bias_grad_joins_the_pool_gradient()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 5, 10, 10, 3 }, "x")
  local b = g:variable(randn({ 12 }, 4), "b")
  local z = npu.nn.bias_add(npu.nn.conv2d(x, g:const(randn({ 3, 3, 3, 12 }, 1, 0.3), "w"),
    { padding = "SAME" }), b)
  local p = npu.nn.max_pool(npu.relu(z), { ksize = 2, strides = 2, padding = "VALID" })
  local loss = npu.reduce_sum(p * p)
  local gb, gz = table.unpack(npu.gradients(loss, { b, z }))
  local feeds = { [x] = randn({ 5, 10, 10, 3 }, 2) }
  local n0 = npu.core.n_threads()
  npu.core.set_n_threads(1)
  local sess = session(g)
  sess:run(g:global_variables_initializer())
  local e = sess:explain(gb, feeds)
  local n = op_counts(e)
  lu.assertEquals(n.fused_max_pool_grad_relu_grad, 1)
  lu.assertNil(n.bias_add_grad)
  local on = sess:run(gb, feeds)
  local off = session(g, nil, TRAIN_OFF)
  off:run(g:global_variables_initializer())
  lu.assertEquals(op_counts(off:explain(gb, feeds)).bias_add_grad, 1)
  local unfused = off:run(gb, feeds)
  npu.core.set_n_threads(2)
  local s2 = session(g)
  s2:run(g:global_variables_initializer())
  local on2 = s2:run(gb, feeds)
  npu.core.set_n_threads(n0)
  assert_same_bits(on2, on, "2 threads")
  -- the fused step's first output (relu_grad's: fetched, it stays one step)
  local both = sess:run({ gz, gb }, feeds)
  lu.assertEquals(op_counts(sess:explain({ gz, gb }, feeds)).fused_max_pool_grad_relu_grad, 1)
  assert_same_bits(both[2], on, "fetched with dx")
  local dx = flat(both[1])
  local got, want = flat(on), flat(unfused)
  for c = 1, 12 do
    local sum = 0.0
    for i = c, #dx, 12 do sum = sum + dx[i] end
    local ulp = 2 ^ (math.floor(math.log(math.abs(sum), 2)) - 23)
    lu.assertTrue(math.abs(got[c] - sum) <= ulp, ("column %d: %.9g vs float64 %.9g"):format(c, got[c], sum))
    lu.assertTrue(math.abs(got[c] - want[c]) <= ulp, ("column %d: %.9g vs unfused %.9g"):format(c, got[c], want[c]))
  end
end

TestFusionConv = {}

local function conv_graph(depthwise, opts)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 9, 7, 4 }, "x")
  local w = depthwise and randn({ 3, 3, 4, 2 }, 1, 0.3) or randn({ 3, 3, 4, 8 }, 1, 0.3)
  local filter = opts.variable_filter and g:variable(w, "w") or g:const(w, "w")
  local conv = (depthwise and npu.depthwise_conv2d or npu.conv2d)(x, filter,
    { padding = "SAME", strides = opts.strides or 1, name = "C" })
  return g, x, conv, { [x] = randn({ 2, 9, 7, 4 }, 2) }
end

function TestFusionConv:test_conv_bias_activation_is_one_step_with_the_unfused_bits()
  for _, dw in ipairs({ false, true }) do
    for _, v in ipairs({
      { "bias_add, relu", function(g, c) return npu.relu(npu.nn.bias_add(c, g:const(randn({ 8 }, 3)), { name = "B" })) end, "B,Relu" },
      { "add, relu6", function(g, c) return npu.relu6(npu.add(g:const(randn({ 8 }, 3)), c, { name = "B" })) end, "B,Relu6" },
      { "add (1,1,1,C)", function(g, c) return npu.add(c, g:const(randn({ 1, 1, 1, 8 }, 3)), { name = "B" }) end, "B" },
      { "bias_add, prelu", function(g, c) return npu.prelu(npu.nn.bias_add(c, g:const(randn({ 8 }, 3)), { name = "B" }), g:const(randn({ 8 }, 4)), { name = "P" }) end, "B,P" },
      { "two constant adds", function(g, c) return npu.sigmoid(npu.sub(npu.add(c, g:const(randn({ 8 }, 3)), { name = "B" }), g:const(npu.tensor({ 0.25 })), { name = "S" })) end, "B,S,Sigmoid" },
    }) do
      local g, x, conv, feeds = conv_graph(dw, { strides = 2 })
      local y = v[2](g, conv)
      local what = (dw and "depthwise " or "conv2d ") .. v[1]
      local r_on, r_off, r_ref, e_on = three_ways(g, y, feeds)
      local op = dw and "fused_depthwise_conv2d" or "fused_conv2d"
      lu.assertEquals(shape_of(e_on), { op .. "<ConvBiasAddFusionPass:" .. v[3] .. ">" }, what)
      if v[1] == "two constant adds" then
        assert_close(r_on, r_off, 1e-6, what) -- the two shifts are summed into one bias
      else
        assert_same_bits(r_on, r_off, what)
      end
      assert_close(r_on, r_ref, 1e-5, what)
    end
  end
end

-- A training graph: filter and bias are variables; the bias is read at run time.
function TestFusionConv:test_variable_filter_and_bias_fuse()
  local g, x, conv, feeds = conv_graph(false, { variable_filter = true })
  local b = g:variable(randn({ 8 }, 4), "b")
  local y = npu.relu(npu.nn.bias_add(conv, b))
  local on, off = session(g), session(g, nil, ALL_OFF)
  on:run(g:global_variables_initializer())
  off:run(g:global_variables_initializer())
  local e = on:explain(y, feeds)
  lu.assertEquals(e.steps[#e.steps].op, "fused_conv2d")
  lu.assertEquals(e.steps[#e.steps].absorbed, { "BiasAdd", "Relu" })
  assert_same_bits(on:run(y, feeds), off:run(y, feeds), "variables")
end

function TestFusionConv:test_leaves_fetched_and_shared_values()
  -- the convolution's output fetched: nothing joins it (the bias and relu fuse on their own)
  local g, x, conv, feeds = conv_graph(false, {})
  local z = npu.nn.bias_add(conv, g:const(randn({ 8 }, 3)), { name = "B" })
  local y = npu.relu(z)
  lu.assertEquals(shape_of(session(g):explain({ y, conv }, feeds)),
    { "conv2d", "fused_elementwise<TbeEltwiseFusionPass:Relu>" })
  -- the biased value fetched: the bias joins, relu stays
  lu.assertEquals(shape_of(session(g):explain({ y, z }, feeds)),
    { "fused_conv2d<ConvBiasAddFusionPass:B>", "relu" })
  -- a vector along another axis is not a bias: (n, 1, 1, 1)
  local g2, x2, conv2, feeds2 = conv_graph(false, {})
  local y2 = conv2 + g2:const(randn({ 2, 1, 1, 1 }, 5))
  lu.assertEquals(shape_of(session(g2):explain(y2, feeds2)), { "conv2d", "add" })
end

-- ---------------------------------------------------------------- ConvBatchnormFusionPass

TestFusionBatchnorm = {}

-- Batch norm as an import expresses it, in several orders.
local BN_CHAINS = {
  { "mul, add, relu", function(g, c)
      return npu.relu(npu.add(npu.mul(c, g:const(randn({ 8 }, 5)), { name = "M" }), g:const(randn({ 8 }, 6)), { name = "A" }))
    end, "M,A,Relu" },
  { "bias_add, sub, mul, scalar mul, add", function(g, c)
      local z = npu.nn.bias_add(c, g:const(randn({ 8 }, 5)), { name = "B" })
      z = npu.sub(z, g:const(randn({ 8 }, 6)), { name = "S" })
      z = npu.mul(g:const(randn({ 8 }, 7)), z, { name = "M" })
      z = npu.mul(z, g:const(npu.tensor({ 0.5 })), { name = "H" })
      return npu.add(z, g:const(randn({ 1, 1, 1, 8 }, 8)), { name = "A" })
    end, "B,S,M,H,A" },
  { "constant minus scaled", function(g, c)
      return npu.relu6(npu.sub(g:const(randn({ 8 }, 5)), npu.mul(c, g:const(randn({ 8 }, 6)), { name = "M" }), { name = "S" }))
    end, "M,S,Relu6" },
}

function TestFusionBatchnorm:test_affine_constants_fold_into_the_filter()
  for _, dw in ipairs({ false, true }) do
    for _, chain in ipairs(BN_CHAINS) do
      local g, x, conv, feeds = conv_graph(dw, {})
      local y = chain[2](g, conv)
      local what = (dw and "depthwise " or "conv2d ") .. chain[1]
      local r_on, r_off, r_ref, e_on, e_off = three_ways(g, y, feeds)
      local op = dw and "fused_depthwise_conv2d" or "fused_conv2d"
      lu.assertEquals(shape_of(e_on), { op .. "<ConvBatchnormFusionPass:" .. chain[3] .. ">" }, what)
      lu.assertEquals(#e_off.steps, 2 + select(2, chain[3]:gsub(",", "")), what)
      assert_close(r_on, r_off, 1e-5, what)
      assert_close(r_on, r_ref, 1e-5, what)
    end
  end
end

function TestFusionBatchnorm:test_training_graphs_and_run_time_operands_are_not_folded()
  -- a variable filter: matched, not folded; the affine ops fuse as an elementwise chain
  local g, x, conv, feeds = conv_graph(false, { variable_filter = true })
  local y = BN_CHAINS[1][2](g, conv)
  local sess = session(g, { export_compile_stat = 0 })
  sess:run(g:global_variables_initializer())
  lu.assertEquals(shape_of(sess:explain(y, feeds)),
    { "variable", "conv2d", "fused_elementwise<TbeEltwiseFusionPass:A,Relu>" })
  -- a scale fed at run time
  local g2, x2, conv2, feeds2 = conv_graph(false, {})
  local s = g2:placeholder("float32", { 8 }, "s")
  feeds2[s] = randn({ 8 }, 9)
  local y2 = npu.add(conv2 * s, g2:const(randn({ 8 }, 6)))
  lu.assertEquals(shape_of(session(g2):explain(y2, feeds2)),
    { "conv2d", "fused_elementwise<TbeEltwiseFusionPass:Add>" })
  -- a scale that is not per channel
  local g3, x3, conv3, feeds3 = conv_graph(false, {})
  local y3 = conv3 * g3:const(randn({ 2, 9, 7, 8 }, 10)) + 1
  lu.assertEquals(shape_of(session(g3):explain(y3, feeds3)),
    { "conv2d", "fused_elementwise<TbeEltwiseFusionPass:Add>" })
end

function TestFusionBatchnorm:test_folding_stops_where_a_value_must_stay()
  local g, x, conv, feeds = conv_graph(false, {})
  local m = npu.mul(conv, g:const(randn({ 8 }, 5)), { name = "M" })
  local a = npu.add(m, g:const(randn({ 8 }, 6)), { name = "A" })
  local y = npu.relu(a)
  local sess = session(g)
  lu.assertEquals(shape_of(sess:explain({ y, m }, feeds)),
    { "fused_conv2d<ConvBatchnormFusionPass:M>", "fused_elementwise<TbeEltwiseFusionPass:Relu>" })
  local got, want = sess:run({ y, m }, feeds), session(g, nil, ALL_OFF):run({ y, m }, feeds)
  assert_close(got[1], want[1], 1e-5, "relu")
  assert_close(got[2], want[2], 1e-5, "scaled")
end

-- ---------------------------------------------------------------- TbeEltwiseFusionPass

TestFusionEltwise = {}

-- Values that exercise every branch of the ops: NaN, infinities, signed zeros, 0..6 edges.
local function special_input(shape, seed)
  local t = flat(randn(shape, seed, 4))
  local specials = { 0 / 0, math.huge, -math.huge, 0.0, -0.0, 6, -6, 7, 1e-30, -1e-30 }
  for i, v in ipairs(specials) do t[i * 3] = v end
  return npu.tensor(t):reshape(shape)
end

local UNARY = { "neg", "relu", "relu6", "sigmoid", "tanh", "exp", "log", "sqrt", "square", "abs", "leaky_relu" }
local BINARY = { "add", "sub", "mul", "div", "maximum", "minimum", "pow", "squared_difference", "floor_div", "floor_mod" }

function TestFusionEltwise:test_every_op_in_a_chain_gives_the_unfused_bits()
  local shape = { 6, 7 }
  local operands = { -- how the other operand broadcasts, on either side
    { "full", function(g) return g:const(special_input(shape, 11)) end },
    { "row", function(g) return g:const(randn({ 7 }, 12)) end },
    { "(1, C)", function(g) return g:const(randn({ 1, 7 }, 13)) end },
    { "scalar", function(g) return g:const(npu.tensor({ 1.5 })) end },
  }
  local cases = {}
  for _, u in ipairs(UNARY) do
    cases[#cases + 1] = { u, function(g, v) return npu[u](npu.neg(v)) end }
  end
  for _, b in ipairs(BINARY) do
    for _, o in ipairs(operands) do
      cases[#cases + 1] = { b .. " " .. o[1], function(g, v) return npu[b](npu.abs(v), o[2](g)) end }
      cases[#cases + 1] = { o[1] .. " " .. b, function(g, v) return npu[b](o[2](g), npu.abs(v)) end }
    end
  end
  cases[#cases + 1] = { "bias_add", function(g, v) return npu.nn.bias_add(npu.neg(v), g:const(randn({ 7 }, 14))) end }
  for _, o in ipairs(operands) do
    cases[#cases + 1] = { "prelu, slopes " .. o[1], function(g, v) return npu.prelu(npu.neg(v), o[2](g)) end }
  end
  for _, c in ipairs(cases) do
    local g = npu.Graph()
    local x = g:placeholder("float32", shape, "x")
    local y = npu.tanh(c[2](g, x)) -- three ops: one step
    local feeds = { [x] = special_input(shape, 10) }
    local r_on, r_off, r_ref, e_on, e_off = three_ways(g, y, feeds)
    lu.assertEquals(#e_on.steps, 1, c[1])
    lu.assertEquals(e_on.steps[1].op, "fused_elementwise", c[1])
    lu.assertEquals(#e_on.steps[1].absorbed, 2, c[1])
    lu.assertEquals(#e_off.steps, 3, c[1])
    assert_same_bits(r_on, r_off, c[1])
    assert_same_bits(r_on, r_ref, c[1] .. " (reference)")
  end
end

function TestFusionEltwise:test_long_chains_over_many_blocks()
  -- 3000 x 5 and 2 x 3000: blocks of whole rows, and rows cut into blocks
  for _, shape in ipairs({ { 3000, 5 }, { 2, 3000 } }) do
    local g = npu.Graph()
    local x = g:placeholder("float32", shape, "x")
    local x2 = g:placeholder("float32", shape, "x2")
    local s = g:const(randn({ shape[2] }, 1))
    local y = npu.relu6(npu.maximum((x * s + 0.5) - x2, g:const(npu.tensor({ -1 }))) * 3)
    local feeds = { [x] = special_input(shape, 2), [x2] = randn(shape, 3) }
    local r_on, r_off, _, e_on = three_ways(g, y, feeds)
    lu.assertEquals(#e_on.steps, 1)
    lu.assertEquals(#e_on.steps[1].absorbed, 5)
    assert_same_bits(r_on, r_off, table.concat(shape, "x"))
  end
end

function TestFusionEltwise:test_leaves_shared_fetched_and_broadcasting_values()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 5 }, "x")
  local a = npu.abs(x, { name = "A" })
  local b = npu.neg(a, { name = "N" })
  local c = npu.exp(b, { name = "E" })
  local feeds = { [x] = randn({ 4, 5 }, 1) }
  lu.assertEquals(shape_of(session(g):explain(c, feeds)), { "fused_elementwise<TbeEltwiseFusionPass:N,E>" })
  -- b fetched: the chain breaks after it
  lu.assertEquals(shape_of(session(g):explain({ c, b }, feeds)), { "fused_elementwise<TbeEltwiseFusionPass:N>", "exp" })
  -- a read twice
  local d = c + a
  lu.assertEquals(shape_of(session(g):explain(d, feeds)), { "abs", "fused_elementwise<TbeEltwiseFusionPass:E,Add>" })
  -- an op that broadcasts the chain to a larger shape ends it
  local e = npu.sqrt(npu.square(x)) + g:const(randn({ 3, 1, 1 }, 2))
  lu.assertEquals(shape_of(session(g):explain(e, feeds)), { "fused_elementwise<TbeEltwiseFusionPass:Sqrt>", "add" })
  -- a column operand is no broadcast the program knows
  local f = npu.relu(npu.abs(x) * g:const(randn({ 4, 1 }, 3)))
  lu.assertEquals(shape_of(session(g):explain(f, feeds)), { "abs", "mul", "relu" })
end

function TestFusionEltwise:test_precision_list_of_a_chain()
  -- a block-listed op (exp) in the chain keeps the fused step float32 under mixed precision
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 4 }, "x")
  local y = npu.exp(npu.relu(x) * 2)
  local feeds = { [x] = randn({ 4, 4 }, 1) }
  local sess = session(g, { precision_mode = "allow_mix_precision" })
  local e = sess:explain(y, feeds)
  lu.assertEquals(e.steps[#e.steps].op, "fused_elementwise")
  lu.assertEquals(e.steps[#e.steps].outputs[1].dtype, "float32")
  assert_close(sess:run(y, feeds), session(g, nil, ALL_OFF):run(y, feeds), 0, "mixed")
end

function TestFusionEltwise:test_ops_with_a_chosen_implementation_fuse_running_it()
  -- under high_performance (the default) sigmoid and tanh as a matmul's or a convolution's
  -- activation fuse, the epilogue running their fast kernel, and a fast op in an elementwise
  -- chain (exp here) fuses, the program running its fast kernel: the unfused plan's bits
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 6 }, "x")
  local h = npu.nn.bias_add(x:matmul(g:const(randn({ 6, 3 }, 1))), g:const(randn({ 3 }, 2)), { name = "B" })
  local y = npu.relu(npu.sigmoid(h) * 2, { name = "R" })
  local im = g:placeholder("float32", { 2, 6, 6, 3 }, "im")
  local cv = npu.nn.bias_add(npu.nn.conv2d(im, g:const(randn({ 3, 3, 3, 8 }, 4)), { padding = "SAME" }),
    g:const(randn({ 8 }, 5)), { name = "C" })
  local yc = npu.tanh(cv)
  local ye = npu.relu(npu.exp(im * g:const(npu.tensor({ 0.5 }))) * 2, { name = "E" })
  local feeds = { [x] = randn({ 4, 6 }, 3), [im] = randn({ 2, 6, 6, 3 }, 6) }
  local fused = { "fused_matmul<MatMulBiasAddFusionPass:B,Sigmoid>", "fused_elementwise<TbeEltwiseFusionPass:R>" }
  local conv = { "fused_conv2d<ConvBiasAddFusionPass:C,Tanh>" }
  lu.assertEquals(shape_of(session(g):explain(y, feeds)), fused)
  lu.assertEquals(shape_of(session(g):explain(yc, feeds)), conv)
  lu.assertEquals(#session(g):explain(ye, feeds).steps, 1, "high_precision: one chain")
  -- high_performance, set or by default (session() sets high_precision unless told)
  local default = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local precise = session(g)
  for _, sess in ipairs({ session(g, { op_select_implmode = "high_performance" }), default }) do
    lu.assertEquals(shape_of(sess:explain(y, feeds)), fused)
    lu.assertEquals(shape_of(sess:explain(yc, feeds)), conv)
    local steps = sess:explain(ye, feeds).steps
    lu.assertEquals(#steps, 1, "one chain")
    lu.assertEquals(steps[1].op, "fused_elementwise")
    lu.assertEquals(steps[1].impl, "high_performance")
    local off = session(g, { op_select_implmode = "high_performance" }, ALL_OFF)
    for _, fetch in ipairs({ y, yc, ye }) do
      local got = sess:run(fetch, feeds)
      assert_same_bits(got, off:run(fetch, feeds), "fast, fused against unfused")
      assert_close(got, precise:run(fetch, feeds), 1e-6, "fast against libm")
    end
  end
  -- the fast epilogues are not libm's: tanh over many values tells them apart
  local many = { [x] = randn({ 4, 6 }, 3), [im] = randn({ 2, 6, 6, 3 }, 7, 3) }
  local a, b = flat(default:run(yc, many)), flat(precise:run(yc, many))
  local differ = 0
  for i = 1, #a do
    if a[i] ~= b[i] then differ = differ + 1 end
  end
  lu.assertTrue(differ > 0, "the fused tanh runs the fast kernel")
  a, b = flat(default:run(ye, many)), flat(precise:run(ye, many))
  differ = 0
  for i = 1, #a do
    if a[i] ~= b[i] then differ = differ + 1 end
  end
  lu.assertTrue(differ > 0, "the chain runs the fast exp")
  -- high_precision chosen explicitly, for every op or for sigmoid's type: fused as before
  for _, opts in ipairs({ { op_select_implmode = "high_precision" },
    { op_select_implmode = "high_precision", optypelist_for_implmode = "Sigmoid" } }) do
    lu.assertEquals(shape_of(session(g, opts):explain(y, feeds)), fused)
  end
end

function TestFusionEltwise:test_fast_activations_fuse_into_our_float32_tiles()
  -- the same under our float32 GEMM (f32tile: at least 8 rows and 32 columns, on an AVX-512F
  -- CPU): its epilogue runs the fast sigmoid too, so the fused step keeps the unfused bits
  local g = npu.Graph()
  local x = g:placeholder("float32", { 16, 40 }, "x")
  local h = npu.nn.bias_add(x:matmul(g:const(randn({ 40, 64 }, 11))), g:const(randn({ 64 }, 12)), { name = "B" })
  local y = npu.sigmoid(h)
  local feeds = { [x] = randn({ 16, 40 }, 13, 4) }
  local default = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local steps = default:explain(y, feeds).steps
  lu.assertEquals(shape_of(default:explain(y, feeds)), { "fused_matmul<MatMulBiasAddFusionPass:B,Sigmoid>" })
  lu.assertEquals(steps[1].algo, support.f32tile_here() and "f32tile" or "sgemm")
  local off = session(g, { op_select_implmode = "high_performance" }, ALL_OFF)
  assert_same_bits(default:run(y, feeds), off:run(y, feeds), "fast sigmoid, fused against unfused")
  local a, b = flat(default:run(y, feeds)), flat(session(g):run(y, feeds))
  local differ = 0
  for i = 1, #a do
    if a[i] ~= b[i] then differ = differ + 1 end
  end
  lu.assertTrue(differ > 0, "the fused sigmoid runs the fast kernel")
end

-- ---------------------------------------------------------------- fusion_switch_file

TestFusionSwitchFile = {}

-- matmul + bias + relu, then * 2 - 1: one GraphFusion and one UBFusion pattern.
local function two_patterns()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 4 }, "x")
  local h = npu.relu(npu.nn.bias_add(x:matmul(g:const(randn({ 4, 5 }, 1))), g:const(randn({ 5 }, 2)), { name = "B" }))
  local y = npu.sub(npu.mul(h, g:const(npu.tensor({ 2 })), { name = "M" }), g:const(npu.tensor({ 1 })), { name = "S" })
  return g, y, { [x] = randn({ 3, 4 }, 3) }
end

function TestFusionSwitchFile:test_all_off_and_exceptions()
  local g, y, feeds = two_patterns()
  local want = session(g, nil, ALL_OFF):run(y, feeds)
  local cases = {
    { nil, { "fused_matmul<MatMulBiasAddFusionPass:B,Relu>", "fused_elementwise<TbeEltwiseFusionPass:S>" } },
    { ALL_OFF, { "matmul", "bias_add", "relu", "mul", "sub" } },
    { '{"Switch":{"GraphFusion":{"ALL":"off","MatMulBiasAddFusionPass":"on"},"UBFusion":{"ALL":"off"}}}',
      { "fused_matmul<MatMulBiasAddFusionPass:B,Relu>", "mul", "sub" } },
    -- the exception is written before "ALL": ALL still applies first
    { '{"Switch":{"GraphFusion":{"MatMulBiasAddFusionPass":"on","ALL":"off"},"UBFusion":{"ALL":"off"}}}',
      { "fused_matmul<MatMulBiasAddFusionPass:B,Relu>", "mul", "sub" } },
    -- the matmul pass off: the elementwise pass takes the bias and relu instead
    { '{"Switch":{"GraphFusion":{"MatMulBiasAddFusionPass":"off"}}}',
      { "matmul", "fused_elementwise<TbeEltwiseFusionPass:Relu,M,S>" } },
    { '{"Switch":{"UBFusion":{"ALL":"off","TbeEltwiseFusionPass":"on"}}}',
      { "fused_matmul<MatMulBiasAddFusionPass:B,Relu>", "fused_elementwise<TbeEltwiseFusionPass:S>" } },
    { '{"Switch":{}}', { "fused_matmul<MatMulBiasAddFusionPass:B,Relu>", "fused_elementwise<TbeEltwiseFusionPass:S>" } },
  }
  for i, c in ipairs(cases) do
    local sess = session(g, nil, c[1])
    lu.assertEquals(shape_of(sess:explain(y, feeds)), c[2], c[1] or "no file")
    assert_close(sess:run(y, feeds), want, 1e-6, "case " .. i)
  end
end

function TestFusionSwitchFile:test_errors_name_the_file_and_what_is_wrong()
  local g = two_patterns()
  local cases = {
    { '{"Switch":{"GraphFusion":{"MatMulBiasAddFusinPass":"off"}}}', "NPU_ERR_FORMAT",
      { "line 1", "unknown fusion pass 'MatMulBiasAddFusinPass'", "did you mean MatMulBiasAddFusionPass?",
        "GraphFusion has ConvBatchnormFusionPass, ConvBiasAddFusionPass, ConvMaxPoolFusionPass, MatMulBiasAddFusionPass" } },
    { '{"Switch":{"GraphFusion":{"ALL":"off",}}}', "NPU_ERR_FORMAT", { "malformed JSON at line 1, column" } },
    { '{\n "Switch": {\n  "GraphFusion": {\n   "ALL": "off"\n  }\n }\n', "NPU_ERR_FORMAT", { "malformed JSON at line 6" } },
    { '{"Switch":{"GraphFusion":{"ALL":"yes"}}}', "NPU_ERR_FORMAT", { "'ALL': the value must be \"on\" or \"off\", got yes" } },
    { '{"Switch":{"GraphFusion":{"SoftmaxFusionPass":1}}}', "NPU_ERR_FORMAT", { "unknown fusion pass 'SoftmaxFusionPass'" } },
    { '{"Switch":{"GraphFusion":{"MatMulBiasAddFusionPass":true}}}', "NPU_ERR_FORMAT", { "got a value that is not a string" } },
    { '{"Switch":{"UBFusion":{"MatMulBiasAddFusionPass":"off"}}}', "NPU_ERR_FORMAT",
      { "'MatMulBiasAddFusionPass' is a GraphFusion pass: list it under that section" } },
    { '{"Switch":{"GraphFusion":{"TbeEltwiseFusionPass":"off"}}}', "NPU_ERR_FORMAT", { "is a UBFusion pass" } },
    { '{"Switch":{"UbFusion":{"ALL":"off"}}}', "NPU_ERR_FORMAT", { "unknown section 'UbFusion'" } },
    { '{"Switch":{"GraphFusion":{"ALL":"off"}},"Extra":1}', "NPU_ERR_FORMAT", { "unknown key 'Extra'" } },
    { '{"GraphFusion":{"ALL":"off"}}', "NPU_ERR_FORMAT", { 'expected {"Switch"' } },
    { '{"Switch":{"GraphFusion":{"ALL":"off","ALL":"on"}}}', "NPU_ERR_FORMAT", { '"ALL" is given twice' } },
    { '{"Switch":{"GraphFusion":{"MatMulBiasAddFusionPass":"off","MatMulBiasAddFusionPass":"on"}}}',
      "NPU_ERR_FORMAT", { "is given twice" } },
    { '{"Switch":{"GraphFusion":[]}}', "NPU_ERR_FORMAT", { '"GraphFusion" must be an object' } },
  }
  for _, c in ipairs(cases) do
    local path = switch_file(c[1])
    local ok, err = pcall(npu.Session, { graph = g, options = { fusion_switch_file = path } })
    os.remove(path)
    lu.assertFalse(ok, c[1])
    lu.assertEquals(npu.error_code(err), c[2], c[1])
    lu.assertStrContains(tostring(err), "fusion_switch_file '" .. path .. "'")
    for _, part in ipairs(c[3]) do lu.assertStrContains(tostring(err), part) end
  end
  local missing = os.tmpname()
  os.remove(missing)
  local ok, err = pcall(npu.Session, { graph = g, options = { fusion_switch_file = missing } })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), "cannot open fusion_switch_file '" .. missing .. "'")
end

-- ---------------------------------------------------------------- fusion_result.json

-- The statistics file is read with support.lua's small JSON reader.
local json_decode = support.json_decode

-- Where this process's sessions write: $ASCEND_WORK_PATH/FE/<pid>/ (make test sets it), else
-- npu_out/FE/<pid>/, the default output directory.
local function result_path()
  local work = os.getenv("ASCEND_WORK_PATH")
  if not work or work == "" then work = "npu_out" end
  local stat = read_file("/proc/self/stat")
  if not stat then return nil end
  return ("%s/FE/%s/fusion_result.json"):format(work, stat:match("^(%d+)"))
end

local function read_results()
  local text = read_file(result_path())
  return text and json_decode(text) or {}
end

-- The keys that appear in the file while fn runs (other sessions' garbage collection held off).
local function new_keys(fn)
  collectgarbage("collect")
  collectgarbage("stop")
  local ok, keys, after = pcall(function()
    local before = read_results()
    fn()
    local now, new = read_results(), {}
    for k in pairs(now) do
      if before[k] == nil then new[#new + 1] = k end
    end
    table.sort(new)
    return new, now
  end)
  collectgarbage("restart")
  if not ok then error(keys, 0) end
  return keys, after
end

TestFusionResult = {}

function TestFusionResult:setUp()
  if not result_path() then lu.skip("no /proc/self/stat: the process id is unknown") end
end

function TestFusionResult:test_written_after_each_compilation_with_2()
  local g, y, feeds = two_patterns()
  local sess
  local keys = new_keys(function()
    sess = session(g, { export_compile_stat = 2 })
    sess:run(y, feeds)
  end)
  lu.assertEquals(#keys, 1)
  local s = keys[1]:match("^session_and_graph_id_(%d+)_0$")
  lu.assertNotNil(s, keys[1])
  local stats = read_results()[keys[1]]
  lu.assertEquals(stats, {
    graph_fusion = { MatMulBiasAddFusionPass = { match_times = "1", effect_times = "1" } },
    ub_fusion = { TbeEltwiseFusionPass = { match_times = "1", effect_times = "1", repository_hit_times = "0" } },
  })
  -- a second signature is the session's graph 1; the first entry stays
  local x2 = { [next(feeds)] = randn({ 7, 4 }, 4) }
  keys = new_keys(function() sess:run(y, x2) end)
  lu.assertEquals(keys, { ("session_and_graph_id_%s_1"):format(s) })
  sess:close()
end

function TestFusionResult:test_written_when_the_session_closes_with_1()
  local g, y, feeds = two_patterns()
  local sess = session(g, { export_compile_stat = 1 })
  local keys = new_keys(function() sess:run(y, feeds) end)
  lu.assertEquals(keys, {}) -- not yet
  local after
  keys, after = new_keys(function() sess:close() end)
  lu.assertEquals(#keys, 1)
  lu.assertEquals(after[keys[1]].graph_fusion.MatMulBiasAddFusionPass.effect_times, "1")
  -- a session whose graphs fuse nothing writes nothing
  local g2 = npu.Graph()
  local x = g2:placeholder("float32", { 2, 2 }, "x")
  local m = x:matmul(x)
  keys = new_keys(function()
    local s2 = session(g2, { export_compile_stat = 1 })
    s2:run(m, { [x] = randn({ 2, 2 }, 1) })
    s2:close()
  end)
  lu.assertEquals(keys, {})
end

function TestFusionResult:test_match_without_effect_and_passes_switched_off()
  -- the product is fetched: the matmul pattern matches without effect; the elementwise pass
  -- fuses bias_add and relu (one link) and then * 2 - 1 (two more)
  local g, y, feeds = two_patterns()
  local mm
  for _, s in ipairs(session(g, nil, ALL_OFF):explain(y, feeds).steps) do
    if s.op == "matmul" then mm = g:get_tensor_by_name(s.node .. ":0") end
  end
  local keys, after = new_keys(function()
    local sess = session(g, { export_compile_stat = 2 },
      '{"Switch":{"GraphFusion":{"ConvBatchnormFusionPass":"off"}}}')
    sess:run({ y, mm }, feeds)
  end)
  lu.assertEquals(#keys, 1)
  lu.assertEquals(after[keys[1]], {
    graph_fusion = { MatMulBiasAddFusionPass = { match_times = "1", effect_times = "0" } },
    ub_fusion = { TbeEltwiseFusionPass = { match_times = "3", effect_times = "3", repository_hit_times = "0" } },
  })
  -- switched off: absent, though its pattern is there
  keys, after = new_keys(function()
    local sess = session(g, { export_compile_stat = 2 }, '{"Switch":{"GraphFusion":{"ALL":"off"}}}')
    sess:run(y, feeds)
  end)
  lu.assertEquals(after[keys[1]].graph_fusion, {})
  lu.assertEquals(after[keys[1]].ub_fusion.TbeEltwiseFusionPass.effect_times, "3")
end

-- ---------------------------------------------------------------- models

TestFusionModels = {}

-- The imported models fuse (ConvBiasAdd for their _FusedConv2D, elementwise chains for their
-- activations and post-activation batch norms) and give the unfused bits.
function TestFusionModels:test_models_fuse_with_unchanged_results()
  local model = require("npu.model")
  local dir = os.getenv("NPU_MODELS_DIR") or (ROOT_DIR or ".") .. "/../shared/models"
  local want_fused = { liveness = 16, mobileface = 32, iris = 108 } -- steps removed
  local ran = 0
  for name, removed in pairs(want_fused) do
    local path = ("%s/%s/%s.json"):format(dir, name, name)
    if read_file(path) then
      local g, info = model.load_model(path)
      local feeds = {}
      for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(dir, name, i - 1)) end
      local on, off = session(g), session(g, nil, ALL_OFF)
      local a, b = on:run(info.output_names, feeds), off:run(info.output_names, feeds)
      lu.assertEquals(off:last_plan().steps - on:last_plan().steps, removed, name)
      for j = 1, #b do assert_same_bits(a[j], b[j], name) end
      ran = ran + 1
    end
  end
  if ran == 0 then lu.skip("models directory " .. dir .. " is absent") end
end
