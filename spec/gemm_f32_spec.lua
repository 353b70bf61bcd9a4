-- gemm_f32_spec.lua — our float32 GEMM tiles (csrc/kernels/gemm_f32.c, algorithm f32tile):
-- the compiler gives them float32 matmul / fused_matmul / fused SGD steps of the shapes where
-- they beat OpenBLAS here (npuK_gemm_f32_wins: 8 rows or more, 32 columns or more, A within
-- L2), on a CPU with AVX-512F unless NPU_NO_AVX512 is set.  Checked: explain names the
-- algorithm (and not for batch one or 10 columns); every output within k 2^-24 sum|a b| of
-- float64 sums ((k + 1) with a bias), and within twice that of the OpenBLAS path a child
-- process with NPU_NO_AVX512=1 runs (whose explain names no algorithm); a training step's
-- fused updates have the unfused plan's bits, at 1 and 2 threads; the tuner times f32tile as
-- a candidate.
local lu = require("luaunit")
local npu = require("npu")
local support = dofile(SPEC_DIR .. "/support.lua")

-- As source, so that the child process builds the very same graphs: for each case the
-- operands, the fetched values (flat lists) and the GEMM steps' algorithms ("none": AUTO).
local CASES = support.GEMM_CASES_PRELUDE .. [==[
-- every transpose combination, shapes off the tiles' edges (m % 8, n % 32), odd k; the last
-- with a bias and relu (fused_matmul); then batch one and ten columns (OpenBLAS's shapes)
return function()
  local out = {}
  local shapes = { { 37, 45, 129 }, { 37, 45, 129 }, { 37, 45, 129 }, { 37, 45, 129 },
                   { 19, 70, 300, bias = true }, { 1, 256, 784 }, { 64, 10, 256 },
                   { 24, 96, 200, tb = true } } -- B^T the larger: run as (B A^T)^T
  for t, s in ipairs(shapes) do
    local ta, tb = (t - 1) % 2 == 1 and t <= 4, (t >= 3 and t <= 4) or s.tb == true
    local m, n, k = s[1], s[2], s[3]
    local A = npu.random.normal(ta and { k, m } or { m, k }, { seed = 1 + t })
    local B = npu.random.normal(tb and { n, k } or { k, n }, { seed = 9 + t })
    local bias = npu.random.normal({ n }, { seed = 20 + t })
    local g = npu.Graph()
    local a = g:placeholder("float32", A:shape(), "a")
    local b = g:placeholder("float32", B:shape(), "b")
    local c = g:placeholder("float32", { n }, "c")
    local y = g:op("matmul", { a, b }, { transpose_a = ta, transpose_b = tb }, "y")
    if s.bias then y = npu.nn.relu(npu.nn.bias_add(y, c)) end
    local feeds = { [a] = A, [b] = B }
    if s.bias then feeds[c] = bias end
    local sess = npu.Session { graph = g }
    out[t] = { m = m, n = n, k = k, ta = ta, tb = tb, bias = s.bias and flat(bias:totable()),
               A = flat(A:totable()), B = flat(B:totable()),
               y = flat(sess:run(y, feeds):totable()), algos = algos(sess, y, feeds) }
  end
  return out
end
]==]
local cases = assert(load(CASES, "cases"))()

-- The same cases in a child process with NPU_NO_AVX512=1 (OpenBLAS's path): per case its
-- algorithms, then its values, one per line.
local function child_cases()
  local script = "local cases = assert(load(" .. ("%q"):format(CASES) .. "))()\n" .. [[
for _, c in ipairs(cases()) do
  io.write("case ", table.concat(c.algos, ","), "\n")
  for _, v in ipairs(c.y) do io.write(("%.17g\n"):format(v)) end
end
]]
  local out = support.run_lua(".", "NPU_NO_AVX512=1", script)
  local res = {}
  for l in out:gmatch("[^\n]+") do
    local algos = l:match("^case (.*)$")
    if algos then res[#res + 1] = { algos = algos, y = {} }
    else
      local v = tonumber(l)
      lu.assertNotNil(v, out:sub(1, 400))
      local c = res[#res]
      c.y[#c.y + 1] = v
    end
  end
  return res
end

-- Float64 sums of op(A) op(B) (+ bias, relu) and the bound for each.
local function oracle(c)
  local exact, bound = support.gemm_float64(c)
  for i = 1, #exact do
    local s, mag, k, j = exact[i], bound[i], c.k, (i - 1) % c.n
    if c.bias then s, mag, k = s + c.bias[j + 1], mag + math.abs(c.bias[j + 1]), k + 1 end
    if c.bias and s < 0 then s = 0 end -- relu: 1-Lipschitz, the bound holds through it
    exact[i], bound[i] = s, k * 2 ^ -24 * mag
  end
  return exact, bound
end

TestGemmF32 = {}

function TestGemmF32:test_explain_names_f32tile_for_its_shapes_only()
  local here = support.f32tile_here()
  local got = cases()
  for t = 1, 5 do
    lu.assertEquals(got[t].algos, { here and "f32tile" or "none" }, "case " .. t)
  end
  lu.assertEquals(got[6].algos, { "none" }) -- batch one: matrix-vector products
  lu.assertEquals(got[7].algos, { "none" }) -- ten columns: OpenBLAS
  lu.assertEquals(got[8].algos, { here and "f32tile" or "none" }, "case 8")
end

function TestGemmF32:test_within_bound_of_float64_and_of_the_openblas_path()
  local got, blas = cases(), child_cases()
  lu.assertEquals(#blas, #got)
  for t, c in ipairs(got) do
    lu.assertEquals(blas[t].algos, "none", "case " .. t .. ": NPU_NO_AVX512=1 runs OpenBLAS")
    local exact, bound = oracle(c)
    lu.assertEquals(#blas[t].y, #exact)
    local worst, worst_b = 0, 0
    for i, e in ipairs(exact) do
      local b = bound[i] + 1e-30
      worst = math.max(worst, math.abs(c.y[i] - e) / b)
      worst_b = math.max(worst_b, math.abs(c.y[i] - blas[t].y[i]) / (2 * b))
    end
    lu.assertTrue(worst <= 1, ("case %d: %.3g of the bound"):format(t, worst))
    lu.assertTrue(worst_b <= 1, ("case %d vs OpenBLAS: %.3g of twice the bound"):format(t, worst_b))
  end
end

-- A training step, batch 64, 100-64-48-10: the weight gradients of the first two layers
-- (100 x 64 x 64, 64 x 48 x 64) are fused updates on f32tile; their weights after four steps
-- are the unfused plan's bits (gradient-descent passes off: a matmul on f32tile, then mul and
-- sub), at 1 and 2 threads.
local GD_OFF = '{"Switch":{"GraphFusion":{"ApplyGradientDescentFusionPass":"off",' ..
  '"GradientDescentUpdateFusionPass":"off"}}}'
local function train(fused, threads)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 64, 100 }, "x")
  local y = g:placeholder("int32", { 64 }, "y")
  local init = npu.initializers.glorot_uniform
  local h1 = npu.layers.dense(x, 64, { activation = "relu", kernel_initializer = init { seed = 1 } })
  local h2 = npu.layers.dense(h1, 48, { activation = "relu", kernel_initializer = init { seed = 2 } })
  local logits = npu.layers.dense(h2, 10, { kernel_initializer = init { seed = 3 } })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
  local train_op = npu.train.GradientDescentOptimizer(0.3):minimize(loss)
  local opts = { export_compile_stat = 0 }
  local path
  if not fused then
    path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(GD_OFF)
    f:close()
    opts.fusion_switch_file = path
  end
  local n0 = npu.core.n_threads()
  npu.core.set_n_threads(threads)
  local sess = npu.Session { graph = g, options = opts }
  if path then os.remove(path) end
  sess:run(g:global_variables_initializer())
  local labels = {}
  for j = 1, 64 do labels[j] = (j * 7) % 10 end
  local feeds = { [x] = npu.random.uniform({ 64, 100 }, { minval = -1, maxval = 1, seed = 11 }),
                  [y] = npu.tensor(labels, "int32") }
  for _ = 1, 4 do sess:run(train_op, feeds) end
  local bits = {}
  for i, v in ipairs(sess:run(g:global_variables())) do
    local t = v:reshape({ v:numel() }):totable()
    for j = 1, #t do t[j] = string.pack("<f", t[j]) end
    bits[i] = table.concat(t)
  end
  local e = sess:explain(train_op, feeds)
  sess:close()
  npu.core.set_n_threads(n0)
  return bits, e
end

function TestGemmF32:test_fused_updates_have_the_unfused_bits()
  local off, e_off = train(false, 1)
  local on, e = train(true, 1)
  local on2 = train(true, 2)
  lu.assertEquals(#on, 6)
  for i = 1, #on do
    lu.assertTrue(on[i] == off[i], "variable " .. i .. ": fused against unfused")
    lu.assertTrue(on2[i] == on[i], "variable " .. i .. ": 2 threads")
  end
  local fused, tiles, tiles_off = 0, 0, 0
  for _, st in ipairs(e.steps) do
    if st.op == "fused_apply_gradient_descent" then
      fused = fused + 1
      if st.algo == "f32tile" then tiles = tiles + 1 end
    end
  end
  for _, st in ipairs(e_off.steps) do
    if st.op == "matmul" and st.node:match("MatMul_grad/MatMul_1$") and st.algo == "f32tile" then
      tiles_off = tiles_off + 1
    end
  end
  lu.assertEquals(fused, 3)
  local want = support.f32tile_here() and 2 or 0 -- the 48 x 10 layer's gradient: OpenBLAS
  lu.assertEquals(tiles, want)
  lu.assertEquals(tiles_off, want)
end

-- aoe_mode 2 times f32tile against OpenBLAS on a float32 GEMM; the run's result stays within
-- the bound whichever wins (the chosen algorithm is one of the two).
function TestGemmF32:test_the_tuner_times_f32tile()
  if not support.f32tile_here() then lu.skip("no AVX-512F here, or NPU_NO_AVX512 set") end
  local dir = support.tmpdir()
  local g = npu.Graph()
  local A = npu.random.normal({ 37, 129 }, { seed = 2 })
  local B = npu.random.normal({ 129, 45 }, { seed = 3 })
  local a = g:placeholder("float32", { 37, 129 }, "a")
  local b = g:placeholder("float32", { 129, 45 }, "b")
  local y = g:op("matmul", { a, b }, {}, "y")
  local sess = npu.Session { graph = g, options = { export_compile_stat = 0, aoe_mode = "2",
    work_path = dir, op_compiler_cache_mode = "disable" } }
  local feeds = { [a] = A, [b] = B }
  sess:run(y, feeds)
  local h = assert(io.open(dir .. "/npu_aoe_tuning.jsonl"))
  local text = h:read("a")
  h:close()
  support.rm_rf(dir)
  -- the record's candidates: f32tile (the compiler's choice) and OpenBLAS's sgemm
  lu.assertStrContains(text, '"f32tile"')
  lu.assertStrContains(text, '"sgemm"')
  local e = sess:explain(y, feeds)
  for _, st in ipairs(e.steps) do
    if st.op == "matmul" then lu.assertTrue(st.algo == "f32tile" or st.algo == "sgemm", tostring(st.algo)) end
  end
end

-- A constant B (frozen weights) is packed into the tiles' panels once per plan (explain's
-- prepared "f32_weights", no scratch): the same bits as the same product with B fed, for B
-- stored (k, n) and transposed (n, k), plain and with bias + relu.  A fed B read in place
-- reserves no scratch and still runs f32tile (the same bits, not OpenBLAS's).
function TestGemmF32:test_constant_weights_packed_once_same_bits()
  if not support.f32tile_here() then lu.skip("no AVX-512F here, or NPU_NO_AVX512 set") end
  local A = npu.random.normal({ 37, 129 }, { seed = 4 })
  for _, tb in ipairs { false, true } do
    for _, fused in ipairs { false, true } do
      local B = npu.random.normal(tb and { 45, 129 } or { 129, 45 }, { seed = 5 })
      local bias = npu.random.normal({ 45 }, { seed = 6 })
      local function build(constant)
        local g = npu.Graph()
        local a = g:placeholder("float32", { 37, 129 }, "a")
        local b = constant and g:const(B, "w") or g:placeholder("float32", B:shape(), "w")
        local y = g:op("matmul", { a, b }, { transpose_b = tb }, "y")
        if fused then y = npu.nn.relu(npu.nn.bias_add(y, g:const(bias, "bias"))) end
        local feeds = { [a] = A }
        if not constant then feeds[b] = B end
        local sess = npu.Session { graph = g, options = { export_compile_stat = 0 } }
        local step
        for _, st in ipairs(sess:explain(y, feeds).steps) do
          if st.op == "matmul" or st.op == "fused_matmul" then step = st end
        end
        return sess:run(y, feeds), step
      end
      local what = ("transpose_b %s, fused %s"):format(tb, fused)
      local fed, s_fed = build(false)
      local const, s_const = build(true)
      lu.assertEquals(s_const.algo, "f32tile", what)
      lu.assertEquals(s_const.prepared, "f32_weights", what)
      lu.assertEquals(s_const.scratch_bytes, 0, what)
      lu.assertNil(s_fed.prepared, what)
      -- a fed B stored (k, n) that fits L2 is read in place: no panel reserved; transposed,
      -- it is packed per call into the step's scratch
      if tb then lu.assertTrue(s_fed.scratch_bytes > 0, what)
      else lu.assertEquals(s_fed.scratch_bytes, 0, what) end
      lu.assertEquals(s_fed.algo, "f32tile", what)
      support.assert_same_bits(const, fed, what)
    end
  end
end
