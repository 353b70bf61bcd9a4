-- conv_direct_spec.lua — conv2d's direct kernel (csrc/kernels/conv_direct.c, algorithm
-- "direct"): which steps take it by default (float32, dilation 1, out_c a multiple of 8) and
-- which keep im2col; its outputs against the float64 sum within the bound docs/numerics.md
-- states, gamma(k) sum|x f| with k = k_h k_w c, and against the reference path within the
-- same bound; fused with bias, relu and a max pool, the unfused plan's bits; a tuning
-- candidate (aoe_mode 2 times it beside im2col).
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

local U = 2 ^ -24

local function randn(shape, seed) return npu.random.normal(shape, { seed = seed }) end

-- high_precision: these specs are about the direct kernel (its bits against im2col's, the
-- unfused plan's, other thread counts); the default, high_performance, gives some of their
-- shapes to Winograd (compile/implmode.c: winograd_rule).  opts may set it.
local function session(g, opts)
  local o = { precision_mode = "must_keep_origin_dtype", export_compile_stat = 0,
    op_select_implmode = "high_precision" }
  for k, v in pairs(opts or {}) do o[k] = v end
  return npu.Session { graph = g, options = o }
end

local function flat(t) return t:reshape({ t:numel() }):totable() end

-- conv2d of x (n, h, w, c) by f (kh, kw, c, oc), stride 1, dilation d, padding as given.
local function conv_graph(shape, fshape, opts)
  local g = npu.Graph()
  local x = g:placeholder("float32", shape, "x")
  local f = randn(fshape, 2)
  local y = npu.nn.conv2d(x, g:const(f, "w"), opts)
  return g, x, y, f
end

-- the algorithm of the plan's convolution step (a float16 plan has casts around it)
local function algo_of(g, y, feeds, opts)
  for _, s in ipairs(session(g, opts):explain(y, feeds).steps) do
    if s.op:find("conv2d") then return s.algo end
  end
  error("no convolution step")
end

TestConvDirect = {}

function TestConvDirect:test_default_takes_float32_dilation_one_and_whole_vectors()
  local x = randn({ 1, 6, 6, 4 }, 1)
  local cases = {
    { oc = 16, opts = { padding = "SAME" }, want = "direct" },
    { oc = 8, opts = { padding = "VALID", strides = 2 }, want = "direct" },
    { oc = 12, opts = { padding = "SAME" }, want = "im2col" },              -- off the vectors
    { oc = 16, opts = { padding = "SAME", dilations = 2 }, want = "im2col" }, -- dilated
  }
  for _, cs in ipairs(cases) do
    local g, ph, y = conv_graph({ 1, 6, 6, 4 }, { 3, 3, 4, cs.oc }, cs.opts)
    lu.assertEquals(algo_of(g, y, { [ph] = x }), cs.want, cs.want .. " " .. cs.oc)
  end
  -- float16 computation takes it too (x and y as stored: half_io_spec); the reference path
  -- is never given an algorithm (0, shown as im2col: it runs its naive loops)
  local g, ph, y = conv_graph({ 1, 6, 6, 4 }, { 3, 3, 4, 16 }, { padding = "SAME" })
  lu.assertEquals(algo_of(g, y, { [ph] = x }, { precision_mode = "force_fp16" }), "direct")
  lu.assertEquals(algo_of(g, y, { [ph] = x }, { use_off_line = false }), "im2col")
end

-- Every output within gamma(k) sum|x f| of the float64 sum, as docs/numerics.md states it,
-- on SAME, VALID and strided geometries, odd sizes, 8 to 24 channels; the reference path
-- within the same bound.
function TestConvDirect:test_outputs_within_the_stated_bound_of_the_float64_sum()
  for _, cs in ipairs {
    { { 2, 7, 6, 5 }, { 3, 3, 5, 16 }, { padding = "SAME" } },
    { { 1, 9, 5, 3 }, { 2, 3, 3, 8 }, { padding = "VALID" } },
    { { 1, 8, 9, 6 }, { 3, 3, 6, 24 }, { padding = "SAME", strides = 2 } },
  } do
    local shape, fshape, opts = cs[1], cs[2], cs[3]
    local g, ph, y, f = conv_graph(shape, fshape, opts)
    local x = randn(shape, 3)
    local sess = session(g)
    lu.assertEquals(sess:explain(y, { [ph] = x }).steps[1].algo, "direct")
    local got, ref = sess:run(y, { [ph] = x }), session(g, { use_off_line = false }):run(y, { [ph] = x })
    local n, h, w, c = table.unpack(shape)
    local kh, kw, _, oc = table.unpack(fshape)
    local oshape = got:shape()
    local s = opts.strides or 1
    local oh, ow = oshape[2], oshape[3]
    -- TF's SAME: the padding before is half the total (the odd one after)
    local pt = opts.padding == "SAME" and math.max(0, ((oh - 1) * s + kh - h) // 2) or 0
    local pl = opts.padding == "SAME" and math.max(0, ((ow - 1) * s + kw - w) // 2) or 0
    local xs, fs, ys, rs = flat(x), flat(f), flat(got), flat(ref)
    local k = kh * kw * c
    local gamma = k * U / (1 - k * U)
    local worst = 0
    for b = 0, n - 1 do
      for i = 0, oh - 1 do
        for j = 0, ow - 1 do
          for o = 0, oc - 1 do
            local exact, mag = 0.0, 0.0
            for a = 0, kh - 1 do
              local ih = i * s - pt + a
              if ih >= 0 and ih < h then
                for e = 0, kw - 1 do
                  local iw = j * s - pl + e
                  if iw >= 0 and iw < w then
                    for ci = 0, c - 1 do
                      local p = xs[((b * h + ih) * w + iw) * c + ci + 1] * fs[((a * kw + e) * c + ci) * oc + o + 1]
                      exact, mag = exact + p, mag + math.abs(p)
                    end
                  end
                end
              end
            end
            local at = ((b * oh + i) * ow + j) * oc + o + 1
            local err = math.abs(ys[at] - exact)
            lu.assertTrue(err <= gamma * mag, ("output %d: |y - exact| %g > gamma(%d) * %g"):format(at, err, k, mag))
            lu.assertTrue(math.abs(rs[at] - exact) <= gamma * mag, "reference path")
            if mag > 0 then worst = math.max(worst, err / (U * mag)) end
          end
        end
      end
    end
    lu.assertTrue(worst < k, "largest error in units of u sum|x f|: " .. worst)
  end
end

-- conv + bias + relu + max_pool as one step (the pool in registers where its 2x2 windows lie
-- inside), the bits of the unfused plan, at 1 and 2 threads.
function TestConvDirect:test_fused_pool_has_the_unfused_bits()
  local n0 = npu.core.n_threads()
  local dir, _ <close> = S.tmpdir()
  local off = dir .. "/all_off.json"
  S.write(off, '{"Switch":{"GraphFusion":{"ALL":"off"},"UBFusion":{"ALL":"off"}}}')
  for _, cs in ipairs { { 2, 14, 14, 32, 64 }, { 1, 28, 28, 1, 32 }, { 1, 9, 11, 3, 24 } } do
    local n, h, w, c, oc = table.unpack(cs)
    local g = npu.Graph()
    local x = g:placeholder("float32", { n, h, w, c }, "x")
    local y = npu.relu(npu.nn.bias_add(npu.nn.conv2d(x, g:const(randn({ 3, 3, c, oc }, 4), "w"),
      { padding = "SAME", name = "C" }), g:const(randn({ oc }, 5), "b")))
    local p = npu.nn.max_pool(y, { ksize = 2, strides = 2, padding = "VALID", name = "P" })
    local feeds = { [x] = randn({ n, h, w, c }, 6) }
    npu.core.set_n_threads(1)
    local sess = session(g)
    local e = sess:explain(p, feeds)
    lu.assertEquals(#e.steps, 1)
    lu.assertEquals(e.steps[1].algo, "direct")
    local fused = sess:run(p, feeds)
    -- the plan with every fusion pass off: conv2d, bias_add, relu and max_pool one by one
    local unfused = session(g, { fusion_switch_file = off }):run(p, feeds)
    npu.core.set_n_threads(2)
    local two = session(g):run(p, feeds)
    npu.core.set_n_threads(n0)
    lu.assertTrue(npu.allclose(fused, unfused, 0, 0), "fused against unfused")
    lu.assertTrue(npu.allclose(two, fused, 0, 0), "2 threads")
  end
end

-- aoe_mode 2 times direct and im2col for a convolution that takes both, and the run stays
-- within the bound of the reference.
function TestConvDirect:test_tuning_times_direct_beside_im2col()
  local dir, _ <close> = S.tmpdir()
  local g, ph, y = conv_graph({ 2, 8, 8, 8 }, { 3, 3, 8, 16 }, { padding = "SAME" })
  local feeds = { [ph] = randn({ 2, 8, 8, 8 }, 7) }
  local sess = session(g, { aoe_mode = "2", work_path = dir, op_compiler_cache_mode = "disable" })
  local got = sess:run(y, feeds)
  local f = assert(io.open(dir .. "/npu_aoe_tuning.jsonl"))
  local seen = {}
  for line in f:lines() do
    for _, cand in ipairs(S.json_decode(line).candidates or {}) do seen[cand.algo] = true end
  end
  f:close()
  lu.assertTrue(seen.direct and seen.im2col, "candidates: direct and im2col")
  local ref = session(g, { use_off_line = false }):run(y, feeds)
  lu.assertTrue(npu.allclose(got, ref, 1e-5, 1e-5))
end

-- conv2d's input gradient (conv2d_backprop_input, 3x3 stride 1): by default the forward
-- convolution of dy with the turned filter by the direct kernel, each element within
-- gamma(T) sum|dy f| (T = k_h k_w out_c) of the float64 sum; under op_select_implmode
-- high_performance, or with optypelist_for_implmode naming the type alone, Winograd F(2x2,
-- 3x3) (explain: winograd_2x3), within Winograd's bound (docs/numerics.md; here its
-- consequence gamma(out_c + 7) 64 out_c max|f| max|dy|, W being at most that), other bits than
-- the default, the same bits at 1 and 2 threads; a stride of 2 keeps the default.
TestConvInputGradient = {}

local function input_grad_graph(shape, fshape, opts)
  local g = npu.Graph()
  local x = g:placeholder("float32", shape, "x")
  local f = randn(fshape, 5)
  local y = npu.nn.conv2d(x, g:const(f, "w"), opts)
  local r = randn(y:shape(), 6) -- dy: the loss is sum(y r), r fed (a constant r would make
  local rp = g:placeholder("float32", y:shape(), "r") -- dx a constant, folded at compile time)
  local dx = npu.gradients(npu.reduce_sum(y * rp), { x })[1]
  return g, x, dx, f, r, rp
end

local function backprop_step(sess, dx, feeds)
  for _, s in ipairs(sess:explain(dx, feeds).steps) do
    if s.op == "conv2d_backprop_input" then return s end
  end
  error("no conv2d_backprop_input step")
end

function TestConvInputGradient:test_default_and_winograd_within_their_bounds()
  local shape, fshape = { 2, 9, 10, 16 }, { 3, 3, 16, 24 }
  local g, ph, dx, f, r, rp = input_grad_graph(shape, fshape, { padding = "SAME" })
  local feeds = { [ph] = randn(shape, 3), [rp] = r }
  -- this small gradient (2x9x10, 24 -> 16 channels) is below high_performance's Winograd rule
  -- (compile/implmode.c: the default kernel is faster there); super_performance in
  -- op_precision_mode forces Winograd wherever it takes the shape
  local ini = os.tmpname()
  S.write(ini, "[ByOpType]\nConv2DBackpropInput=super_performance\n")
  local fast = { op_precision_mode = ini }
  local n0 = npu.core.n_threads()
  npu.core.set_n_threads(1)
  local def, wino = session(g):run(dx, feeds), session(g, fast):run(dx, feeds)
  npu.core.set_n_threads(2)
  local wino2 = session(g, fast):run(dx, feeds)
  npu.core.set_n_threads(n0)
  lu.assertNil(backprop_step(session(g), dx, feeds).algo) -- the default: no algorithm to show
  lu.assertEquals(backprop_step(session(g, fast), dx, feeds).algo, "winograd_2x3")
  local hp = backprop_step(session(g, { op_select_implmode = "high_performance",
    optypelist_for_implmode = "Conv2DBackpropInput" }), dx, feeds)
  lu.assertEquals(hp.impl, "high_performance")
  lu.assertNil(hp.algo) -- the default kernel: below the rule
  lu.assertTrue(npu.allclose(wino2, wino, 0, 0), "winograd, 2 threads")
  lu.assertFalse(npu.allclose(wino, def, 0, 0), "winograd's bits are not the default's")
  local n, h, w, c = table.unpack(shape)
  local oc = fshape[4]
  local fs, rs, ds, ws = flat(f), flat(r), flat(def), flat(wino)
  local max_f, max_r = 0, 0
  for _, v in ipairs(fs) do max_f = math.max(max_f, math.abs(v)) end
  for _, v in ipairs(rs) do max_r = math.max(max_r, math.abs(v)) end
  local T = 9 * oc
  local g_def, g_wino = T * U / (1 - T * U), (oc + 7) * U / (1 - (oc + 7) * U)
  local w_max = 64 * oc * max_f * max_r
  local worst = 0
  for b = 0, n - 1 do
    for ih = 0, h - 1 do
      for iw = 0, w - 1 do
        for ci = 0, c - 1 do
          local exact, mag = 0.0, 0.0
          for a = 0, 2 do
            local oh = ih + 1 - a -- SAME 3x3: pad 1 before
            if oh >= 0 and oh < h then
              for e = 0, 2 do
                local ow = iw + 1 - e
                if ow >= 0 and ow < w then
                  local dyb, fb = ((b * h + oh) * w + ow) * oc, ((a * 3 + e) * c + ci) * oc
                  for o = 1, oc do
                    local p = rs[dyb + o] * fs[fb + o]
                    exact, mag = exact + p, mag + math.abs(p)
                  end
                end
              end
            end
          end
          local at = ((b * h + ih) * w + iw) * c + ci + 1
          local err = math.abs(ds[at] - exact)
          lu.assertTrue(err <= g_def * mag, ("dx %d: |dx - exact| %g > gamma(%d) %g"):format(at, err, T, mag))
          if mag > 0 then worst = math.max(worst, err / (U * mag)) end
          lu.assertTrue(math.abs(ws[at] - exact) <= g_wino * w_max, ("winograd dx %d"):format(at))
        end
      end
    end
  end
  lu.assertTrue(worst < T, "default: largest error in units of u sum|dy f|: " .. worst)
  -- stride 2: not Winograd's; the default's values
  local g2, ph2, dx2, _, r2, rp2 = input_grad_graph(shape, fshape, { padding = "SAME", strides = 2 })
  local feeds2 = { [ph2] = randn(shape, 3), [rp2] = r2 }
  lu.assertNil(backprop_step(session(g2, fast), dx2, feeds2).algo)
  lu.assertTrue(npu.allclose(session(g2, fast):run(dx2, feeds2), session(g2):run(dx2, feeds2), 0, 0))
  os.remove(ini)
end
