-- bf16_gemm_spec.lua — the native bfloat16 GEMM (csrc/kernels/gemm_bf16.c, algorithm
-- "bf16dot"): under allow_mix_precision_bf16 (and precision_mode_v2 mixed_bfloat16) a matmul
-- or dense layer whose A and B are stored bfloat16 computes on them as stored with VDPBF16PS
-- where the CPU has AVX512_BF16, instead of widening them to float32 for sgemm.
-- Checked: explain names the algorithm (and names none with NPU_NO_AVX512BF16=1, or on a CPU
-- without the instruction); products are within the kernel's bound of the float64 sums of the
-- same bfloat16 operands (k 2^-24 sum|a b|, then bfloat16's rounding of the output); and the
-- results, a training run's included, are within that bound of the widening path's, run in a
-- child process with NPU_NO_AVX512BF16=1 (the switch is a fact of the process).
local lu = require("luaunit")
local npu = require("npu")

-- Whether this process may use the native path: the CPU's flags and the environment.
local support = dofile(SPEC_DIR .. "/support.lua")
local native_here = support.bf16dot_here

-- The graphs, as source so that the child process builds the very same ones.  Each case
-- returns its fetched tensors' values (flat lists) and the algorithms of its GEMM steps.
local CASES = support.GEMM_CASES_PRELUDE .. [==[
local cases = { _flat = flat }
-- a matmul of every transpose combination, shapes off the tiles' edges, odd k
function cases.matmul(opts)
  local out = {}
  for t = 0, 3 do
    local ta, tb = t % 2 == 1, t >= 2
    local m, n, k = 37, 45, 129
    local A = npu.random.normal(ta and { k, m } or { m, k }, { seed = 1 + t })
    local B = npu.random.normal(tb and { n, k } or { k, n }, { seed = 5 + t })
    local g = npu.Graph()
    local a = g:placeholder("float32", A:shape(), "a")
    local b = g:placeholder("float32", B:shape(), "b")
    local y = g:op("matmul", { a, b }, { transpose_a = ta, transpose_b = tb }, "y")
    local sess = npu.Session { graph = g, options = opts }
    out[#out + 1] = { y = flat(sess:run(y, { [a] = A, [b] = B }):totable()),
                      algos = algos(sess, y, { [a] = A, [b] = B }),
                      A = flat(A:astype("bfloat16"):astype("float32"):totable()),
                      B = flat(B:astype("bfloat16"):astype("float32"):totable()),
                      ta = ta, tb = tb, m = m, n = n, k = k }
  end
  return out
end
-- three steps of SGD on an MLP (dense + relu layers, softmax cross-entropy): the loss of each
-- step and the last weights
function cases.train(opts)
  npu.core.set_n_threads(1)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 16, 40 }, "x")
  local y = g:placeholder("int32", { 16 }, "y")
  local init = npu.initializers.glorot_uniform
  local h = npu.layers.dense(x, 33, { activation = "relu", kernel_initializer = init { seed = 1 } })
  local logits = npu.layers.dense(h, 10, { kernel_initializer = init { seed = 2 } })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
  local train_op = npu.train.GradientDescentOptimizer(0.1):minimize(loss)
  local sess = npu.Session { graph = g, options = opts }
  sess:run(g:global_variables_initializer())
  local labels = {}
  for i = 1, 16 do labels[i] = i % 10 end
  local feeds = { [x] = npu.random.uniform({ 16, 40 }, { seed = 3 }), [y] = npu.tensor(labels, "int32") }
  local losses = {}
  for i = 1, 3 do losses[i] = sess:run({ loss, train_op }, feeds)[1]:totable() end
  local w = g:get_tensor_by_name("dense/kernel:0")
  return { { losses = losses, w = flat(sess:run(w):totable()), algos = algos(sess, train_op, feeds),
             logits = flat(sess:run(logits, feeds):totable()) } }
end
return cases
]==]

local cases = assert(load(CASES, "cases"))()
local BF16 = { precision_mode = "allow_mix_precision_bf16" }

-- The same case run by a child process with NPU_NO_AVX512BF16=1 (the widening path): its
-- values, printed one per line and read back.
local function widened(name)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(("package.path = %q\npackage.cpath = %q\n"):format(package.path, package.cpath))
  f:write("local cases = assert(load(", ("%q"):format(CASES), "))()\n")
  f:write(([[
local out = cases[%q]({ precision_mode = "allow_mix_precision_bf16" })
local function dump(v)
  if type(v) == "table" then
    io.write("{\n") for _, x in ipairs(v) do dump(x) end io.write("}\n")
  elseif type(v) == "number" then io.write(("%%.17g\n"):format(v))
  else io.write(tostring(v), "\n") end
end
for _, c in ipairs(out) do
  io.write("case\n")
  for _, key in ipairs { "y", "algos", "losses", "w", "logits" } do
    if c[key] then io.write(key, "\n") dump(c[key]) end
  end
end
]]):format(name))
  f:close()
  local p = io.popen("NPU_NO_AVX512BF16=1 lua5.4 " .. script .. " 2>&1")
  local text = p:read("a")
  p:close()
  os.remove(script)
  -- parse: "case" starts a case, a key line, then a nested list of values
  local res, lines, i = {}, {}, 1
  for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
  local function list()
    local t = {}
    assert(lines[i] == "{", "child output: " .. text:sub(1, 400))
    i = i + 1
    while lines[i] ~= "}" do
      if lines[i] == "{" then t[#t + 1] = list()
      else t[#t + 1] = tonumber(lines[i]) or lines[i]; i = i + 1 end
    end
    i = i + 1
    return t
  end
  while i <= #lines do
    if lines[i] == "case" then res[#res + 1] = {}; i = i + 1
    else
      local key = lines[i]
      i = i + 1
      res[#res][key] = list()
    end
  end
  return res
end

local flat = cases._flat

-- The kernel's bound for one output of op(A) op(B) over bfloat16 values, then the rounding to
-- bfloat16 of the stored output (half an ulp: at most 2^-8 of it).
local function bound(k, mag, exact)
  local sum_err = k * 2 ^ -24 * mag + k * 2 ^ -126
  return sum_err + 2 ^ -8 * (math.abs(exact) + sum_err)
end

-- Float64 sums of op(A) op(B) (A, B flat row-major lists) and their magnitudes.
local oracle = support.gemm_float64

TestBf16Gemm = {}

function TestBf16Gemm:test_matmul_within_bound_of_float64_and_of_the_widening_path()
  local native = native_here()
  local got, wide = cases.matmul(BF16), widened("matmul")
  lu.assertEquals(#wide, 4)
  for t, c in ipairs(got) do
    lu.assertEquals(c.algos, { native and "bf16dot" or "none" }, "transposes " .. t)
    lu.assertEquals(wide[t].algos, { "none" }) -- NPU_NO_AVX512BF16=1: widening, as before
    local exact, mag = oracle(c)
    local worst, worst_w = 0, 0
    for i, e in ipairs(exact) do
      local b = bound(c.k, mag[i], e)
      worst = math.max(worst, math.abs(c.y[i] - e) / b)
      worst_w = math.max(worst_w, math.abs(c.y[i] - wide[t].y[i]) / (2 * b))
    end
    lu.assertTrue(worst <= 1, ("transposes %d: %.3g of the bound"):format(t, worst))
    lu.assertTrue(worst_w <= 1, ("transposes %d vs widening: %.3g"):format(t, worst_w))
  end
end

function TestBf16Gemm:test_mixed_bfloat16_v2_takes_the_native_path_too()
  local got = cases.matmul({ precision_mode_v2 = "mixed_bfloat16" })
  lu.assertEquals(got[1].algos, { native_here() and "bf16dot" or "none" })
  -- float32 and float16 plans never name it (a float32 one of these shapes takes our float32
  -- tiles where the CPU has AVX-512F: gemm_f32_spec.lua)
  local f32 = dofile(SPEC_DIR .. "/support.lua").f32tile_here()
  lu.assertEquals(cases.matmul({ precision_mode = "must_keep_origin_dtype" })[1].algos,
    { f32 and "f32tile" or "none" })
  lu.assertEquals(cases.matmul({ precision_mode = "allow_mix_precision_fp16" })[1].algos, { "none" })
end

function TestBf16Gemm:test_training_steps_follow_the_widening_path()
  local native = native_here()
  local got, wide = cases.train(BF16)[1], widened("train")[1]
  -- every GEMM of the step (forward dense layers fused with their bias, the gradients'
  -- products, the weight gradients' fused into their SGD updates) runs natively
  lu.assertTrue(#got.algos >= 5)
  for _, a in ipairs(got.algos) do lu.assertEquals(a, native and "bf16dot" or "none") end
  for _, a in ipairs(wide.algos) do lu.assertEquals(a, "none") end
  -- three steps later the two paths agree to bfloat16's precision: each value stored in
  -- bfloat16 (2^-8 relative) and the sums' orders differing, amplified a little by the steps
  for i = 1, 3 do
    lu.assertAlmostEquals(got.losses[i], flat(wide.losses[i])[1], 2 ^ -6 * math.abs(got.losses[i]))
  end
  local wmax = 0
  for _, v in ipairs(wide.w) do wmax = math.max(wmax, math.abs(v)) end
  for i, v in ipairs(got.w) do lu.assertAlmostEquals(v, wide.w[i], 2 ^ -7 * wmax) end
  local lmax = 0
  for _, v in ipairs(wide.logits) do lmax = math.max(lmax, math.abs(v)) end
  for i, v in ipairs(got.logits) do lu.assertAlmostEquals(v, wide.logits[i], 2 ^ -5 * lmax) end
end

-- aoe_mode 2 times a bf16dot step against widening its operands for sgemm / sgemv (the
-- records list both), and the plan runs the winner; without the native path (the CPU, or
-- NPU_NO_AVX512BF16) bfloat16 steps are not timed, as before.
function TestBf16Gemm:test_aoe_times_bf16dot_against_widening()
  local S = dofile(SPEC_DIR .. "/support.lua")
  local dir = S.tmpdir()
  local ok, err = pcall(function()
    local g = npu.Graph()
    local x = g:placeholder("float32", { 4, 300 }, "x")
    local init = npu.initializers.glorot_uniform
    local h = npu.layers.dense(x, 64, { activation = "relu", kernel_initializer = init { seed = 1 } })
    local y = npu.layers.dense(h, 10, { kernel_initializer = init { seed = 2 } })
    local feeds = { [x] = npu.random.uniform({ 4, 300 }, { seed = 3 }) }
    local tuned = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16",
      export_compile_stat = 0, aoe_mode = "2", work_path = dir, op_compiler_cache_mode = "disable" } }
    local plain = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16" } }
    tuned:run(g:global_variables_initializer())
    plain:run(g:global_variables_initializer())
    local e = tuned:explain(y, feeds)
    local recs = {}
    local f = io.open(dir .. "/npu_aoe_tuning.jsonl")
    if f then
      for l in f:lines() do
        local r = S.json_decode(l)
        recs[r.node] = r
      end
      f:close()
    end
    local gemms = 0
    for _, s in ipairs(e.steps) do
      if s.op == "fused_matmul" then
        gemms = gemms + 1
        local r = recs[s.node]
        if native_here() then
          lu.assertNotNil(r, s.node .. " timed")
          local names = {}
          for _, c in ipairs(r.candidates) do names[c.algo] = true end
          lu.assertTrue(names.bf16dot and (names.sgemm or names.gemv), s.node)
          lu.assertEquals(s.algo or "auto", r.algo == "sgemm" and "sgemm" or r.algo, s.node)
          lu.assertStrContains(r.inputs[1], "bfloat16")
        else
          lu.assertNil(r, s.node .. " not timed")
        end
      end
    end
    lu.assertEquals(gemms, 2)
    -- whichever runs, the results agree to bfloat16's precision
    local a, b = flat(tuned:run(y, feeds):totable()), flat(plain:run(y, feeds):totable())
    local peak = 0
    for _, v in ipairs(b) do peak = math.max(peak, math.abs(v)) end
    for i, v in ipairs(a) do lu.assertAlmostEquals(v, b[i], 2 ^ -6 * peak) end
    tuned:close()
    plain:close()
  end)
  S.rm_rf(dir)
  if not ok then error(err, 0) end
end
