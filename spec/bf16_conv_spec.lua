-- bf16_conv_spec.lua — conv2d computing on bfloat16 as stored (csrc/kernels/conv_bf16.c,
-- algorithm "direct_bf16"): under allow_mix_precision_bf16 a convolution whose x and filter
-- the precision pass stores bfloat16 takes it where the CPU has AVX512_BF16, and
-- NPU_NO_AVX512BF16=1 gives back the widening kernel ("direct").  Both are held to the bound
-- docs/numerics.md states against the float64 sum of the same bfloat16 inputs (inputs built
-- bfloat16-exact here, so the float64 sum is exact): the float32 sum within k 2^-23 sum|x f|
-- (k = k_h k_w c), then y narrowed to bfloat16 (2^-8 relative).  The widening path runs in a
-- child process (the switch is read once per process).
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

-- Whether the CPU has the instructions (AVX512_BF16 and the AVX-512 F/BW/VL npuK_bf16dot() also
-- wants): the child run with NPU_NO_AVX512BF16 unset computes on bfloat16 then
local cpu_has_bf16 = S.cpu_has_bf16dot

-- The script both processes run: a conv2d (and a CNN's two fused layers) under
-- allow_mix_precision_bf16 on bfloat16-exact inputs (m 2^e, |m| < 256), printing the step
-- algorithms and the outputs.
local SCRIPT = [[
local npu = require("npu")
local seed = 7
local function rnd(n)
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed % n
end
local function exact_values(count, scale)
  local t = {}
  for i = 1, count do t[i] = (rnd(511) - 255) / 128 * 2 ^ (rnd(7) - 3) * scale end
  return t
end
local function tensor(shape, scale)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return npu.tensor(exact_values(n, scale), "float32"):reshape(shape)
end
local out = {}
local function emit(s) out[#out + 1] = s end
local opts = { precision_mode = "allow_mix_precision_bf16", export_compile_stat = 0 }
-- one convolution, odd channels, SAME
local g = npu.Graph()
local x = g:placeholder("float32", { 2, 9, 8, 5 }, "x")
local xv, fv = tensor({ 2, 9, 8, 5 }, 1), tensor({ 3, 3, 5, 16 }, 0.25)
local y = npu.nn.conv2d(x, g:const(fv, "w"), { padding = "SAME" })
local sess = npu.Session { graph = g, options = opts }
for _, s in ipairs(sess:explain(y, { [x] = xv }).steps) do
  if s.op:find("conv2d") then emit("algo " .. s.op .. " " .. tostring(s.algo) .. " " .. tostring(s.prepared)) end
end
emit("x " .. table.concat(xv:reshape({ -1 }):totable(), " "))
emit("f " .. table.concat(fv:reshape({ -1 }):totable(), " "))
local yv = sess:run(y, { [x] = xv }):reshape({ -1 }):totable()
for i = 1, #yv do yv[i] = string.format("%.17g", yv[i]) end
emit("y " .. table.concat(yv, " "))
-- the CNN's layers: conv + bias + relu + 2x2 pool, twice (fused steps), at 1 and 2 threads
local g2 = npu.Graph()
local x2 = g2:placeholder("float32", { 4, 14, 14, 1 }, "x")
local h = x2
for i, c in ipairs({ { 1, 16 }, { 16, 32 } }) do
  local w = g2:const(tensor({ 3, 3, c[1], c[2] }, 0.5), "w" .. i)
  local b = g2:const(tensor({ c[2] }, 0.1), "b" .. i)
  h = npu.nn.relu(npu.nn.bias_add(npu.nn.conv2d(h, w, { padding = "SAME" }), b))
  h = npu.nn.max_pool(h, { ksize = 2, strides = 2, padding = "VALID" })
end
local x2v = tensor({ 4, 14, 14, 1 }, 1)
local s2 = npu.Session { graph = g2, options = opts }
for _, s in ipairs(s2:explain(h, { [x2] = x2v }).steps) do
  if s.op:find("conv2d") then emit("algo " .. s.op .. " " .. tostring(s.algo) .. " " .. tostring(s.prepared)) end
end
local n0 = npu.core.n_threads()
npu.core.set_n_threads(1)
local one = s2:run(h, { [x2] = x2v })
npu.core.set_n_threads(2)
local two = s2:run(h, { [x2] = x2v })
npu.core.set_n_threads(n0)
emit("threads_same " .. tostring(npu.allclose(one, two, 0, 0)))
local cv = one:reshape({ -1 }):totable()
for i = 1, #cv do cv[i] = string.format("%.17g", cv[i]) end
emit("cnn " .. table.concat(cv, " "))
print(table.concat(out, "\n"))
]]

local function run(env)
  local out = S.run_lua(".", env, SCRIPT)
  local r = { algos = {} }
  for line in out:gmatch("[^\n]+") do
    local key, rest = line:match("^(%S+) ?(.*)$")
    if key == "algo" then
      r.algos[#r.algos + 1] = rest
    elseif key == "threads_same" then
      r.threads_same = rest == "true"
    elseif key == "x" or key == "f" or key == "y" or key == "cnn" then
      local t = {}
      for v in rest:gmatch("%S+") do t[#t + 1] = tonumber(v) end
      r[key] = t
    else
      error("unexpected output: " .. out)
    end
  end
  lu.assertNotNil(r.y, out)
  return r
end

local native, wide -- each process's results, computed once

local function results()
  if not native then
    native = run("-u NPU_NO_AVX512BF16")
    wide = run("NPU_NO_AVX512BF16=1")
  end
  return native, wide
end

TestBf16Conv = {}

function TestBf16Conv:test_explain_names_the_algorithm_and_the_switch_turns_it_off()
  local n, w = results()
  local want = cpu_has_bf16() and "direct_bf16" or "direct"
  -- the constant filters packed once for the kernel (explain's prepared) where it runs
  local pre = cpu_has_bf16() and " bf16_filter" or " nil"
  lu.assertEquals(n.algos, { "conv2d " .. want .. pre, "fused_conv2d " .. want .. pre,
    "fused_conv2d " .. want .. pre })
  lu.assertEquals(w.algos, { "conv2d direct nil", "fused_conv2d direct nil", "fused_conv2d direct nil" })
end

-- |y - exact| <= 2^-8 |exact| + k 2^-23 sum|x f| (+ a hair for the narrowing of the sum's
-- own error), exact the float64 sum of the bfloat16-exact inputs: both processes.
function TestBf16Conv:test_outputs_within_the_stated_bound_of_the_exact_sum()
  local n_, w_ = results()
  local x, f = n_.x, n_.f
  local N, H, W, C, OC, k = 2, 9, 8, 5, 16, 45
  local worst = 0
  for _, r in ipairs({ n_, w_ }) do
    local bad = {}
    for b = 0, N - 1 do
      for oh = 0, H - 1 do
        for ow = 0, W - 1 do
          for o = 0, OC - 1 do
            local s, m = 0, 0
            for kh = 0, 2 do
              for kw = 0, 2 do
                local ih, iw = oh - 1 + kh, ow - 1 + kw
                if ih >= 0 and ih < H and iw >= 0 and iw < W then
                  for c = 0, C - 1 do
                    local p = x[((b * H + ih) * W + iw) * C + c + 1] * f[((kh * 3 + kw) * C + c) * OC + o + 1]
                    s, m = s + p, m + math.abs(p)
                  end
                end
              end
            end
            local got = r.y[((b * H + oh) * W + ow) * OC + o + 1]
            local tol = 2 ^ -8 * math.abs(s) + 1.01 * k * 2 ^ -23 * m
            local e = math.abs(got - s)
            if not (e <= tol) then bad[#bad + 1] = ("%g vs %g"):format(got, s) end
            if m > 0 then worst = math.max(worst, e / (2 ^ -8 * math.abs(s) + k * 2 ^ -23 * m)) end
          end
        end
      end
    end
    lu.assertEquals(#bad, 0, table.concat(bad, ", ", 1, math.min(#bad, 5)))
  end
  lu.assertTrue(worst > 0) -- the bound is not vacuous: something was rounded
end

-- The CNN's fused layers: the same bits at 1 and 2 threads in each process; the native and
-- widening outputs close (two layers of bfloat16 narrowing between them: a loose relative
-- check, the bound being the per-layer one above).
function TestBf16Conv:test_cnn_layers_deterministic_and_close_to_the_widening_path()
  local n, w = results()
  lu.assertTrue(n.threads_same, "native: 1 vs 2 threads")
  lu.assertTrue(w.threads_same, "widening: 1 vs 2 threads")
  lu.assertEquals(#n.cnn, 4 * 3 * 3 * 32)
  local big = 0
  for i = 1, #w.cnn do big = math.max(big, math.abs(w.cnn[i])) end
  lu.assertTrue(big > 0)
  for i = 1, #n.cnn do
    lu.assertTrue(math.abs(n.cnn[i] - w.cnn[i]) <= 2 ^ -6 * big, ("%d: %g vs %g"):format(i, n.cnn[i], w.cnn[i]))
  end
end

-- AOE (aoe_mode 2) times direct_bf16 beside direct and im2col on a bfloat16 convolution, where
-- the CPU has the instructions; whatever wins, the output stays within the widening path's
-- neighbourhood (both kernels' bounds, then the narrowing of y).
function TestBf16Conv:test_aoe_times_it_beside_the_others()
  local dir = S.tmpdir()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 10, 10, 8 }, "x")
  local f = g:const(npu.random.normal({ 3, 3, 8, 32 }, { seed = 3, stddev = 0.3 }), "w")
  local y = npu.nn.conv2d(x, f, { padding = "SAME" })
  local xv = npu.random.normal({ 2, 10, 10, 8 }, { seed = 4 })
  local opts = { precision_mode = "allow_mix_precision_bf16", export_compile_stat = 0 }
  local plain = npu.Session { graph = g, options = opts }
  local want = plain:run(y, { [x] = xv })
  plain:close()
  local tuned = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16",
    export_compile_stat = 0, aoe_mode = "2", work_path = dir, op_compiler_cache_mode = "disable" } }
  local got = tuned:run(y, { [x] = xv })
  tuned:close()
  local algos = {}
  for line in io.lines(dir .. "/npu_aoe_tuning.jsonl") do
    for _, c in ipairs(S.json_decode(line).candidates) do algos[c.algo] = true end
  end
  S.rm_rf(dir)
  lu.assertTrue(algos.direct and algos.im2col, "direct and im2col timed")
  -- (this process: NPU_NO_AVX512BF16=1 in its environment turns the kernel off)
  lu.assertEquals(algos.direct_bf16 == true, S.bf16dot_here(), "direct_bf16 timed where the CPU has it")
  local a, b = want:reshape({ -1 }):totable(), got:reshape({ -1 }):totable()
  local big = 0
  for i = 1, #a do big = math.max(big, math.abs(a[i])) end
  for i = 1, #a do lu.assertTrue(math.abs(a[i] - b[i]) <= 2 ^ -7 * big, ("%d: %g vs %g"):format(i, a[i], b[i])) end
end

-- A variable's filter (a training graph's) under allow_mix_precision_bf16: its Cast writes it
-- bfloat16 and direct_bf16 reads that as stored (plan.c: prepare_steps), where the executor
-- widened it to float32 each run and the kernel checked and packed it again.  The same
-- arithmetic, so the same bits as the same values given as constants (packed once at compile
-- time), at 1 and 2 threads; explain's widened lists no input of the convolutions and the plan
-- has nothing left to widen (round_bytes 0), where the widening path (NPU_NO_AVX512BF16=1, a
-- child process) widens each filter (input 1).
local VARIABLE_FILTERS = [[
local npu = require("npu")
local function exact(shape, scale, seed)
  local n, t = 1, {}
  for _, d in ipairs(shape) do n = n * d end
  for i = 1, n do t[i] = ((i * 37 + seed * 11) % 31 - 15) / 16 * scale end
  return npu.tensor(t, "float32"):reshape(shape)
end
local function graph(variable)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 12, 12, 3 }, "x")
  local function param(t, name) return variable and g:variable(t, name) or g:const(t, name) end
  local h = npu.nn.relu(npu.nn.bias_add(npu.nn.conv2d(x, param(exact({ 3, 3, 3, 16 }, 0.5, 1), "f1"),
    { padding = "SAME" }), param(exact({ 16 }, 0.1, 2), "b1")))
  h = npu.nn.max_pool(h, { ksize = 2, strides = 2, padding = "VALID" })
  local y = npu.nn.conv2d(h, param(exact({ 3, 3, 16, 32 }, 0.25, 3), "f2"), { padding = "SAME" })
  local sess = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16",
    export_compile_stat = 0 } }
  if variable then sess:run(g:global_variables_initializer()) end
  local feeds = { [x] = exact({ 4, 12, 12, 3 }, 1, 4) }
  return sess, y, feeds, sess:explain(y, feeds)
end
]]

local function conv_steps(e)
  local out = {}
  for _, s in ipairs(e.steps) do
    if s.op:find("conv2d") then out[#out + 1] = s end
  end
  return out
end

function TestBf16Conv:test_a_variable_filter_is_read_as_stored()
  local graph = load(VARIABLE_FILTERS .. "\nreturn graph")()
  local vs, vy, vf, ve = graph(true)
  local cs, cy, cf, ce = graph(false)
  local native = S.bf16dot_here()
  local steps = conv_steps(ve)
  lu.assertEquals(#steps, 2)
  for _, s in ipairs(steps) do
    lu.assertEquals(s.algo, native and "direct_bf16" or "direct", s.op)
    lu.assertNil(s.prepared, s.op .. ": a variable is not packed at compile time")
    lu.assertEquals(s.widened, native and {} or { 1 }, s.op .. ": the filter widened only without the instructions")
  end
  for _, s in ipairs(conv_steps(ce)) do
    lu.assertEquals(s.algo, native and "direct_bf16" or "direct", s.op)
    lu.assertEquals(s.widened, {}, s.op)
  end
  if native then lu.assertEquals(ve.memory.round_bytes, 0, "nothing widened") end
  local n0 = npu.core.n_threads()
  for _, t in ipairs({ 1, 2 }) do
    npu.core.set_n_threads(t)
    local a, b = vs:run(vy, vf), cs:run(cy, cf)
    S.assert_same_bits(a, b, ("variable vs constant filters, %d thread(s)"):format(t))
  end
  npu.core.set_n_threads(n0)
  vs:close()
  cs:close()
  if not native then return end
  -- the widening path widens each run the filter this one reads as stored
  local out = S.run_lua(".", "NPU_NO_AVX512BF16=1", VARIABLE_FILTERS .. [[
local _, _, _, e = graph(true)
for _, s in ipairs(e.steps) do
  if s.op:find("conv2d") then print("step", s.algo, table.concat(s.widened, ",")) end
end
print("round", e.memory.round_bytes)
]])
  lu.assertStrContains(out, "step\tdirect\t1\nstep\tdirect\t1\n")
  local round = tonumber(out:match("round\t(%d+)"))
  lu.assertEquals(round, 4 * 3 * 3 * 16 * 32, out) -- the larger filter's float32 copy
end
