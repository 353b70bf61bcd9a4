-- bf16_conv_grad_spec.lua — conv2d's filter and input gradients on bfloat16 as stored (mixed
-- bfloat16 training: allow_mix_precision_bf16): where the CPU has AVX512_BF16 the steps read
-- x / the filter and dy as the precision pass stores them and compute by VDPBF16PS
-- (kernels/conv_bwd_bf16.c, explain's algo "bf16dot"); NPU_NO_AVX512BF16=1 (a child
-- process: the choice is a fact of
-- the process) or another CPU keeps the widening path.  Checked: which steps take it; the
-- result against the exact sum of the same bfloat16 inputs (bfloat16-exact data whose float32
-- sums are exact, so df is the exact sum rounded to bfloat16, to nearest even);
-- NaN propagating; the same bits on one and two threads; the gradient of conv2d through
-- npu.gradients; a small CNN trained under mixed bfloat16, native against widening (child
-- process), within the bound stated at that test.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

-- the native path runs here: the CPU has AVX512_BF16 (with the F/BW/VL it needs) and the
-- environment does not turn it off (npuK_bf16dot())
local NATIVE = S.bf16dot_here()

local function session(g, mode)
  return npu.Session { graph = g, options = { precision_mode = mode or "allow_mix_precision_bf16" } }
end

-- bfloat16-exact values: multiples of 1/8 in [-2, 2] (at most 5 significant bits)
local function eighths(n, seed)
  local r, t = S.lcg(seed), {}
  for i = 1, n do t[i] = (r() % 33 - 16) / 8 end
  return t
end

-- df of x (n, h, w, c) and dy by the definition, padding skipped (float64: exact here)
local function oracle(xs, dys, xshape, k, oc, stride, pad, oshape)
  local n, h, w, c = table.unpack(xshape)
  local oh, ow = oshape[2], oshape[3]
  local df = {}
  for kh = 0, k - 1 do
    for kw = 0, k - 1 do
      for ci = 0, c - 1 do
        for co = 0, oc - 1 do
          local s = 0.0
          for b = 0, n - 1 do
            for y = 0, oh - 1 do
              for x = 0, ow - 1 do
                local ih, iw = y * stride - pad + kh, x * stride - pad + kw
                if ih >= 0 and ih < h and iw >= 0 and iw < w then
                  s = s + xs[((b * h + ih) * w + iw) * c + ci + 1] * dys[((b * oh + y) * ow + x) * oc + co + 1]
                end
              end
            end
          end
          df[#df + 1] = s
        end
      end
    end
  end
  return df
end

-- v (a float32 value) rounded to bfloat16, to nearest even
local function bf16(v)
  local u = string.unpack("<I4", string.pack("<f", v))
  u = ((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16
  return (string.unpack("<f", string.pack("<I4", u & 0xffffffff)))
end

local function filter_grad_graph(xshape, oshape, k, oc, opts)
  local g = npu.Graph()
  local x = g:placeholder("float32", xshape, "x")
  local dy = g:placeholder("float32", oshape, "dy")
  local df = g:op("conv2d_backprop_filter", { x, dy }, { filter_sizes = { k, k, xshape[4], oc },
    strides = { 1, opts.stride, opts.stride, 1 }, padding = opts.padding })
  return g, x, dy, df
end

local function step_algos(sess, fetch, feeds)
  local algos = {}
  for _, s in ipairs(sess:explain(fetch, feeds).steps) do
    if s.op == "conv2d_backprop_filter" then algos[#algos + 1] = s.algo or "none" end
  end
  return algos
end

TestBf16ConvGrad = {}

-- SAME stride 1, VALID stride 2, an odd pixel count, one input channel, a channel tail: the
-- exact sum rounded to bfloat16 (the float32 sum is exact on these values, on either path)
function TestBf16ConvGrad:test_exact_inputs_give_the_exact_sum_rounded()
  for _, cs in ipairs {
    { xshape = { 2, 7, 7, 16 }, k = 3, oc = 32, stride = 1, padding = "SAME" },
    { xshape = { 1, 9, 9, 3 }, k = 3, oc = 17, stride = 2, padding = "VALID" },
    { xshape = { 3, 5, 5, 1 }, k = 3, oc = 32, stride = 1, padding = "SAME" }, -- 75 pixels
  } do
    local n, h, w, c = table.unpack(cs.xshape)
    local o = cs.padding == "SAME" and math.ceil(h / cs.stride) or math.ceil((h - cs.k + 1) / cs.stride)
    local pad = cs.padding == "SAME" and math.max((o - 1) * cs.stride + cs.k - h, 0) // 2 or 0
    local oshape = { n, o, o, cs.oc }
    local g, x, dy, df = filter_grad_graph(cs.xshape, oshape, cs.k, cs.oc, cs)
    local xs, dys = eighths(n * h * w * c, 3), eighths(n * o * o * cs.oc, 4)
    local feeds = { [x] = npu.tensor(xs, "float32"):reshape(cs.xshape),
      [dy] = npu.tensor(dys, "float32"):reshape(oshape) }
    local sess = session(g)
    lu.assertEquals(step_algos(sess, df, feeds), { NATIVE and "bf16dot" or "none" })
    local got = S.flatten(sess:run(df, feeds):totable())
    local want = oracle(xs, dys, cs.xshape, cs.k, cs.oc, cs.stride, pad, oshape)
    lu.assertEquals(#got, #want)
    for i = 1, #want do
      lu.assertEquals(got[i], bf16(want[i]), ("%s df[%d] vs %.9g"):format(cs.padding, i, want[i]))
    end
    -- float32 computation of the same graph: no bfloat16 step
    lu.assertEquals(step_algos(session(g, "must_keep_origin_dtype"), df, feeds), { "none" })
  end
end

function TestBf16ConvGrad:test_nan_propagates_and_threads_give_the_same_bits()
  local xshape, oshape = { 2, 6, 6, 16 }, { 2, 6, 6, 32 }
  local g, x, dy, df = filter_grad_graph(xshape, oshape, 3, 32, { stride = 1, padding = "SAME" })
  local xs = eighths(2 * 6 * 6 * 16, 5)
  xs[((1 * 6 + 2) * 6 + 3) * 16 + 5 + 1] = 0 / 0 -- image 1, (2, 3), channel 5
  local feeds = { [x] = npu.tensor(xs, "float32"):reshape(xshape),
    [dy] = npu.random.normal(oshape, { seed = 6 }) }
  local n0 = npu.core.n_threads()
  npu.core.set_n_threads(1)
  local one = session(g):run(df, feeds)
  npu.core.set_n_threads(2)
  local two = session(g):run(df, feeds)
  npu.core.set_n_threads(n0)
  lu.assertTrue(npu.allclose(one, two, 0, 0, true), "1 and 2 threads")
  local got = S.flatten(one:totable())
  -- df[kh, kw, ci, co]: every tap reads that pixel (inside the 3x3 SAME window of some
  -- output pixel), so channel 5's rows are NaN and only they
  local nans = 0
  for i, v in ipairs(got) do
    local ci = ((i - 1) // 32) % 16
    if v ~= v then nans = nans + 1 end
    lu.assertEquals(v ~= v, ci == 5, "element " .. i)
  end
  lu.assertEquals(nans, 9 * 32)
end

-- dx of conv2d_backprop_input by the definition (float64: exact here)
local function oracle_dx(dys, fs, xshape, k, oc, stride, pad, oshape)
  local n, h, w, c = table.unpack(xshape)
  local oh, ow = oshape[2], oshape[3]
  local dx = {}
  for b = 0, n - 1 do
    for ih = 0, h - 1 do
      for iw = 0, w - 1 do
        for ci = 0, c - 1 do
          local s = 0.0
          for kh = 0, k - 1 do
            for kw = 0, k - 1 do
              local th, tw = ih + pad - kh, iw + pad - kw
              if th >= 0 and tw >= 0 and th % stride == 0 and tw % stride == 0 and
                  th // stride < oh and tw // stride < ow then
                local at = ((b * oh + th // stride) * ow + tw // stride) * oc
                for co = 0, oc - 1 do
                  s = s + dys[at + co + 1] * fs[((kh * k + kw) * c + ci) * oc + co + 1]
                end
              end
            end
          end
          dx[#dx + 1] = s
        end
      end
    end
  end
  return dx
end

-- conv2d_backprop_input likewise: SAME stride 1 (bench_cnn's case), stride 2 with an odd
-- channel count, and 1 vs 2 threads
function TestBf16ConvGrad:test_input_gradient_exact_inputs()
  for _, cs in ipairs {
    { xshape = { 2, 6, 7, 16 }, k = 3, oc = 32, stride = 1, padding = "SAME" },
    { xshape = { 1, 8, 8, 3 }, k = 3, oc = 17, stride = 2, padding = "SAME" },
  } do
    local n, h, w, c = table.unpack(cs.xshape)
    local oh, ow = math.ceil(h / cs.stride), math.ceil(w / cs.stride)
    local pad = math.max((oh - 1) * cs.stride + cs.k - h, 0) // 2
    local oshape = { n, oh, ow, cs.oc }
    local g = npu.Graph()
    local f = g:placeholder("float32", { cs.k, cs.k, c, cs.oc }, "f")
    local dy = g:placeholder("float32", oshape, "dy")
    local dx = g:op("conv2d_backprop_input", { f, dy }, { input_sizes = cs.xshape,
      strides = { 1, cs.stride, cs.stride, 1 }, padding = cs.padding })
    local fs, dys = eighths(cs.k * cs.k * c * cs.oc, 12), eighths(n * oh * ow * cs.oc, 13)
    local feeds = { [f] = npu.tensor(fs, "float32"):reshape({ cs.k, cs.k, c, cs.oc }),
      [dy] = npu.tensor(dys, "float32"):reshape(oshape) }
    local n0 = npu.core.n_threads()
    npu.core.set_n_threads(1)
    local sess = session(g)
    local algos = {}
    for _, s in ipairs(sess:explain(dx, feeds).steps) do
      if s.op == "conv2d_backprop_input" then algos[#algos + 1] = s.algo or "none" end
    end
    lu.assertEquals(algos, { NATIVE and "bf16dot" or "none" })
    local one = sess:run(dx, feeds)
    npu.core.set_n_threads(2)
    local two = session(g):run(dx, feeds)
    npu.core.set_n_threads(n0)
    lu.assertTrue(npu.allclose(one, two, 0, 0), "1 and 2 threads")
    local got = S.flatten(one:totable())
    local want = oracle_dx(dys, fs, cs.xshape, cs.k, cs.oc, cs.stride, pad, oshape)
    lu.assertEquals(#got, #want)
    for i = 1, #want do
      lu.assertEquals(got[i], bf16(want[i]), ("dx[%d] vs %.9g"):format(i, want[i]))
    end
  end
end

-- the filter gradient of sum(conv2d(x, w) * r) by npu.gradients is conv2d_backprop_filter(x, r):
-- on exact inputs, the exact sum rounded to bfloat16 (the step's df is stored bfloat16)
function TestBf16ConvGrad:test_gradient_of_conv2d()
  local g = npu.Graph()
  local xshape = { 2, 6, 6, 16 }
  local x = g:placeholder("float32", xshape, "x")
  local r = g:placeholder("float32", { 2, 6, 6, 32 }, "r")
  local w = g:variable(npu.random.normal({ 3, 3, 16, 32 }, { seed = 7 }), "w")
  local loss = npu.reduce_sum(npu.nn.conv2d(x, w, { padding = "SAME" }) * r)
  local dw = npu.gradients(loss, { w })[1]
  local xs, rs = eighths(2 * 6 * 6 * 16, 8), eighths(2 * 6 * 6 * 32, 9)
  local feeds = { [x] = npu.tensor(xs, "float32"):reshape(xshape),
    [r] = npu.tensor(rs, "float32"):reshape({ 2, 6, 6, 32 }) }
  local sess = session(g)
  sess:run(g:global_variables_initializer())
  lu.assertEquals(step_algos(sess, dw, feeds), { NATIVE and "bf16dot" or "none" })
  local got = S.flatten(sess:run(dw, feeds):totable())
  local want = oracle(xs, rs, xshape, 3, 32, 1, 1, { 2, 6, 6, 32 })
  for i = 1, #want do lu.assertEquals(got[i], bf16(want[i]), ("dw[%d] vs %.9g"):format(i, want[i])) end
end

-- A small CNN (8x8x1 -> conv3x3x16 -> relu -> conv3x3x16 stride 2 -> dense 4), trained 4
-- SGD steps under allow_mix_precision_bf16; prints the losses, then the two kernels.
local TRAIN = [[
local npu = require("npu")
local print = PRINT or print
local function S_NUM(l) while type(l) == "table" do l = l[1] end if type(l) ~= "number" then l = l:totable() end return l end
npu.core.set_n_threads(1)
local g = npu.Graph()
local B = 8
local x = g:placeholder("float32", { B, 8, 8, 1 }, "x")
local y = g:placeholder("int32", { B }, "y")
local init = npu.initializers.glorot_uniform
local h = npu.layers.conv2d(x, 16, 3, { padding = "same", activation = "relu", kernel_initializer = init { seed = 1 }, name = "c1" })
h = npu.layers.conv2d(h, 16, 3, { padding = "same", strides = 2, activation = "relu", kernel_initializer = init { seed = 2 }, name = "c2" })
local logits = npu.layers.dense(npu.reshape(h, { B, 4 * 4 * 16 }), 4, { kernel_initializer = init { seed = 3 } })
local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
local train = npu.train.GradientDescentOptimizer(0.05):minimize(loss)
local sess = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16" } }
sess:run(g:global_variables_initializer())
local labels = {}
for i = 1, B do labels[i] = i % 4 end
local feeds = { [x] = npu.random.uniform({ B, 8, 8, 1 }, { seed = 11 }), [y] = npu.tensor(labels, "int32") }
local algos = {}
for _, s in ipairs(sess:explain(train, feeds).steps) do
  if s.op:find("^conv2d_backprop") then algos[#algos + 1] = s.algo or "none" end
end
print(table.concat(algos, " "))
local out = {}
for _ = 1, 4 do
  local l = sess:run({ loss, train }, feeds)
  out[#out + 1] = ("%.9g"):format(S_NUM(l))
end
print(table.concat(out, " "))
for _, name in ipairs { "c1/kernel", "c2/kernel" } do
  local v = sess:run(g:get_tensor_by_name(name .. ":0"))
  local t = {}
  for _, e in ipairs(v:reshape({ v:numel() }):totable()) do t[#t + 1] = ("%.9g"):format(e) end
  print(table.concat(t, " "))
end
]]

local function numbers(line)
  local t = {}
  for v in line:gmatch("%S+") do t[#t + 1] = tonumber(v) end
  return t
end

function TestBf16ConvGrad:test_training_native_against_widening()
  -- here (native where the CPU has it) and in a child process without it
  local here, lines = {}, {}
  PRINT = function(l) lines[#lines + 1] = l end
  local ok, err = pcall(load(TRAIN))
  PRINT = nil
  lu.assertTrue(ok, tostring(err))
  local function algos(l) return l and l:match("^%a[%w_ ]*$") end
  -- the second layer's input gradient, then both filter gradients
  lu.assertEquals(algos(lines[1]), NATIVE and "bf16dot bf16dot bf16dot" or "none none none")
  for i = 2, #lines do here[i - 1] = numbers(lines[i]) end
  local dir = S.tmpdir()
  local out = S.run_lua(dir, "NPU_NO_AVX512BF16=1", TRAIN)
  S.rm_rf(dir)
  local child, first = {}, nil
  for l in out:gmatch("[^\n]+") do
    if first then child[#child + 1] = numbers(l) else first = l end
  end
  lu.assertEquals(first, "none none none", out) -- NPU_NO_AVX512BF16=1: widened, as before
  lu.assertEquals(#child, 3)
  if not NATIVE then -- the same path twice: the same bits
    lu.assertEquals(here, child)
    return
  end
  -- The two paths' filter gradients differ only by their sums' rounding (each within
  -- 129 2^-24 sum|x dy| of the exact sum, kgrad.h; the widening path's float32 kernel within
  -- 65 2^-24 sum|x dy|), which moves df's bfloat16 rounding by one step (2^-8 relative) only
  -- where the sum lies that close to a rounding boundary; everything else in the step is the
  -- same.  So after 4 steps of lr 0.05 we allow the losses 2^-8 relative and each weight 2^-8
  -- of the largest weight (measured here: the same bits, no element crossed a boundary).
  for i = 1, 4 do
    lu.assertTrue(math.abs(here[1][i] - child[1][i]) <= 2 ^ -8 * math.abs(child[1][i]),
      ("loss %d: %.9g vs %.9g"):format(i, here[1][i], child[1][i]))
  end
  for k = 2, 3 do
    local a, b = here[k], child[k]
    lu.assertEquals(#a, #b)
    local scale = 0
    for i = 1, #b do scale = math.max(scale, math.abs(b[i])) end
    local worst = 0
    for i = 1, #b do worst = math.max(worst, math.abs(a[i] - b[i])) end
    if os.getenv("SPEC_VERBOSE") then print(("kernel %d: max |diff| %.3g, max |w| %.3g"):format(k - 1, worst, scale)) end
    for i = 1, #b do
      lu.assertTrue(math.abs(a[i] - b[i]) <= 2 ^ -8 * scale,
        ("kernel %d[%d]: %.9g vs %.9g"):format(k - 1, i, a[i], b[i]))
    end
  end
  lu.assertTrue(#here[2] == 16 * 9 and #here[3] == 16 * 16 * 9)
end
