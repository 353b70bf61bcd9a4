-- spec/reduce_accuracy_spec.lua — float32 sums are as good as their float64 sums rounded once
-- (docs/numerics.md).  reduce_sum, reduce_mean, the softmax / log_softmax denominators,
-- bias_add_grad and conv2d's filter gradient used to add element after element in float32, on the device and on the
-- reference twin alike (reduce_mean of 1e6 x 0.1 gave 0.1009583, reduce_sum of 2^25 ones gave
-- 16777216), so no comparison between the two could see it.  The oracle here is float64
-- arithmetic in plain Lua, on inputs exact in float32, on the device path, the
-- use_off_line=false reference path and (softmax) the high_performance kernels; and the same
-- bits with one thread and two.
--
-- The bound, for a sum of n float32 values x with float64 sum s: |got - s| <= 2^-24 |s| +
-- 2 n 2^-53 sum|x| (one float32 rounding plus float64 accumulation).  Float32 accumulation
-- misses it by orders of magnitude on the long sums below (its error grows like n 2^-24).
--
-- Defines the global test table TestReduceAccuracy; spec/run.lua runs LuaUnit.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

local U = 2.0 ^ -24 -- float32's unit roundoff
local PATHS = { device = {}, reference = { use_off_line = false } }

local function f32(v) return (string.unpack("f", string.pack("f", v))) end

local function within(got, s, n, abs_sum)
  return math.abs(got - s) <= U * math.abs(s) + 2 * n * 2.0 ^ -53 * abs_sum
end

-- n values in [-3, 5) on a 2^-20 grid (exact in float32; a positive mean, so long sums grow
-- and float32 accumulation loses digits).
local function values(seed, n)
  local r, out = S.lcg(seed), {}
  for i = 1, n do out[i] = (r() - (1 << 22)) / (1 << 20) + 1 end
  return out
end

local function run_paths(g, fetches, feed, extra)
  local out = {}
  for name, opts in pairs(PATHS) do
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    for k, v in pairs(extra or {}) do o[k] = v end
    local sess <close> = npu.Session { graph = g, options = o }
    out[name] = sess:run(fetches, feed)
  end
  return out
end

TestReduceAccuracy = {}

function TestReduceAccuracy:test_mean_of_a_million_tenths()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1 }, "x")
  local y = npu.reduce_mean(x)
  local exact = f32(0.1) -- the float64 mean of 1e6 copies of float32 0.1
  for name, res in pairs(run_paths(g, { y }, { [x] = npu.fill({ 1000000 }, 0.1) })) do
    local got = res[1]:item()
    lu.assertTrue(math.abs(got - exact) <= U * exact, ("%s: %.10g"):format(name, got))
  end
end

function TestReduceAccuracy:test_sum_of_2_to_the_25_ones_is_exact()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1 }, "x")
  local y = npu.reduce_sum(x)
  for name, res in pairs(run_paths(g, { y }, { [x] = npu.ones({ 1 << 25 }) })) do
    lu.assertEquals(res[1]:item(), 33554432, name)
  end
end

-- Every axis combination of a [37, 1000, 29] tensor: long rows (axis 2 kept, 1000 or 37000
-- per output), columns (axis 0 or 1 reduced with the inner axis kept), and all of it.
function TestReduceAccuracy:test_every_axis_combination_of_a_rank_3_tensor()
  local A, B, C = 37, 1000, 29
  local xs = values(3, A * B * C)
  -- float64 partial sums in one pass: over c (per a, b), over b (per a, c), over a (per b, c)
  local s_ab, s_ac, s_bc, t_ab, t_ac, t_bc = {}, {}, {}, {}, {}, {}
  for i = 1, A * B do s_ab[i], t_ab[i] = 0.0, 0.0 end
  for i = 1, A * C do s_ac[i], t_ac[i] = 0.0, 0.0 end
  for i = 1, B * C do s_bc[i], t_bc[i] = 0.0, 0.0 end
  local i = 0
  for a = 0, A - 1 do
    for b = 0, B - 1 do
      local ab = a * B + b + 1
      for c = 0, C - 1 do
        i = i + 1
        local v = xs[i]
        local av = math.abs(v)
        local ac, bc = a * C + c + 1, b * C + c + 1
        s_ab[ab], t_ab[ab] = s_ab[ab] + v, t_ab[ab] + av
        s_ac[ac], t_ac[ac] = s_ac[ac] + v, t_ac[ac] + av
        s_bc[bc], t_bc[bc] = s_bc[bc] + v, t_bc[bc] + av
      end
    end
  end
  -- the rest from those (float64 sums of float64 sums: exact enough for an oracle)
  local function fold(src, n_out, n_in, index)
    local out = {}
    for o = 1, n_out do
      local s = 0.0
      for k = 1, n_in do s = s + src[index(o, k)] end
      out[o] = s
    end
    return out
  end
  local by_b = function(o, k) return (k - 1) * B + o end          -- s_ab over a, per b
  local by_a = function(o, k) return (o - 1) * B + k end          -- s_ab over b, per a
  local by_c = function(o, k) return (k - 1) * C + o end          -- s_ac over a, per c
  local expect = { -- mask (bit d = axis d reduced) -> float64 sums, sums of |x|, count
    [1] = { s_bc, t_bc, A }, [2] = { s_ac, t_ac, B }, [4] = { s_ab, t_ab, C },
    [3] = { fold(s_ac, C, A, by_c), fold(t_ac, C, A, by_c), A * B },
    [5] = { fold(s_ab, B, A, by_b), fold(t_ab, B, A, by_b), A * C },
    [6] = { fold(s_ab, A, B, by_a), fold(t_ab, A, B, by_a), B * C },
  }
  local all_s, all_t = 0.0, 0.0
  for k = 1, A * B do all_s, all_t = all_s + s_ab[k], all_t + t_ab[k] end
  expect[7] = { { all_s }, { all_t }, A * B * C }

  local g = npu.Graph()
  local x = g:placeholder("float32", { A, B, C }, "x")
  local fetches, masks = {}, {}
  for mask = 1, 7 do
    local axes = {}
    for d = 0, 2 do if mask & (1 << d) ~= 0 then axes[#axes + 1] = d end end
    fetches[#fetches + 1] = npu.reduce_sum(x, axes)
    fetches[#fetches + 1] = npu.reduce_mean(x, axes)
    masks[#masks + 1] = mask
  end
  local feed = { [x] = npu.tensor(xs, "float32"):reshape({ A, B, C }) }
  for name, res in pairs(run_paths(g, fetches, feed)) do
    for m, mask in ipairs(masks) do
      local e = expect[mask]
      local sums, means = S.flatten(res[2 * m - 1]:totable()), S.flatten(res[2 * m]:totable())
      lu.assertEquals(#sums, #e[1])
      local n, bad = e[3], 0
      for k = 1, #sums do
        if not within(sums[k], e[1][k], n, e[2][k]) then bad = bad + 1 end
        if not within(means[k], e[1][k] / n, n, e[2][k] / n) then bad = bad + 1 end
      end
      lu.assertEquals(bad, 0, ("%s, mask %d: outputs off the bound"):format(name, mask))
    end
  end
end

-- A row of a million: the outputs sum to 1 within a few float32 roundings (each output is
-- rounded once, the denominator once); log_softmax's exp(y) too, within its rounding of
-- log(sum) and of y (|y| < 32 here: 2^-19 absolute at most, systematic part half that).
function TestReduceAccuracy:test_softmax_of_a_million_sums_to_one()
  local N = 1000000
  local r, xs = S.lcg(5), {}
  for i = 1, N do xs[i] = (r() % (1 << 20)) / (1 << 17) - 4 end
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, N }, "x")
  local fetches = { npu.nn.softmax(x), npu.nn.log_softmax(x) }
  local feed = { [x] = npu.tensor(xs, "float32"):reshape({ 1, N }) }
  local runs = run_paths(g, fetches, feed)
  do
    local sess <close> = npu.Session { graph = g, options = { op_select_implmode = "high_performance" } }
    runs.high_performance = sess:run(fetches, feed)
  end
  for name, res in pairs(runs) do
    local y, ly = S.flatten(res[1]:totable()), S.flatten(res[2]:totable())
    local s, ls = 0.0, 0.0
    for k = 1, N do s, ls = s + y[k], ls + math.exp(ly[k]) end
    lu.assertTrue(math.abs(s - 1) <= 4 * U, ("%s softmax: sum - 1 = %.3g"):format(name, s - 1))
    lu.assertTrue(math.abs(ls - 1) <= 2.0 ^ -19, ("%s log_softmax: sum exp - 1 = %.3g"):format(name, ls - 1))
  end
end

function TestReduceAccuracy:test_bias_add_grad_over_a_large_batch()
  local R, C = 100000, 16
  local xs = values(9, R * C)
  local s, t = {}, {}
  for c = 1, C do s[c], t[c] = 0.0, 0.0 end
  for k = 1, R * C do
    local c = (k - 1) % C + 1
    s[c], t[c] = s[c] + xs[k], t[c] + math.abs(xs[k])
  end
  local g = npu.Graph()
  local dy = g:placeholder("float32", { R, C }, "dy")
  local feed = { [dy] = npu.tensor(xs, "float32"):reshape({ R, C }) }
  for name, res in pairs(run_paths(g, { npu.bias_add_grad(dy) }, feed)) do
    local db = res[1]:totable()
    for c = 1, C do
      lu.assertTrue(within(db[c], s[c], R, t[c]), ("%s: column %d: %.9g vs %.9g"):format(name, c, db[c], s[c]))
    end
  end
end

-- The order of every sum is fixed by the shapes: one thread and two give the same bits.
function TestReduceAccuracy:test_same_bits_with_one_thread_and_two()
  local core = npu.core
  local n0 = core.n_threads()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 64, 3000, 8 }, "x")
  local rows = npu.reshape(x, { 192, 8000 })
  local ys = { npu.reduce_sum(x, { 1 }), npu.reduce_sum(x, { 2 }), npu.reduce_mean(x, { 0, 2 }),
    npu.reduce_sum(x), npu.reduce_prod(npu.reshape(x, { 96000, 16 }), { 1 }),
    npu.nn.softmax(rows), npu.nn.log_softmax(rows), npu.bias_add_grad(rows) }
  local feed = { [x] = npu.tensor(values(11, 64 * 3000 * 8), "float32"):reshape({ 64, 3000, 8 }) }
  for _, opts in ipairs({ {}, { op_select_implmode = "high_performance" } }) do
    local sess <close> = npu.Session { graph = g, options = opts }
    local got = {}
    for _, n in ipairs({ 1, 2 }) do
      core.set_n_threads(n)
      got[n] = sess:run(ys, feed)
    end
    core.set_n_threads(n0)
    for i = 1, #ys do lu.assertTrue(npu.allclose(got[1][i], got[2][i], 0, 0), "output " .. i) end
  end
end

-- conv2d's filter gradient sums over every position: a 1x1 filter over 300 x 300 positions,
-- positive terms (so float32 accumulation drifts), float32 over blocks of 64 positions and
-- float64 across them: within 2^-24 |s| + 2^-18 s.
function TestReduceAccuracy:test_conv2d_filter_gradient_over_many_positions()
  local H, W, C, OC = 300, 300, 2, 3
  local r = S.lcg(13)
  local function pos(n)
    local t = {}
    for i = 1, n do t[i] = 0.5 + r() / (1 << 23) end
    return t
  end
  local xs, dys = pos(H * W * C), pos(H * W * OC)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, H, W, C }, "x")
  local dy = g:placeholder("float32", { 1, H, W, OC }, "dy")
  local df = g:op("conv2d_backprop_filter", { x, dy }, { filter_sizes = { 1, 1, C, OC },
    strides = { 1, 1, 1, 1 }, padding = "VALID" })
  local feed = { [x] = npu.tensor(xs, "float32"):reshape({ 1, H, W, C }),
    [dy] = npu.tensor(dys, "float32"):reshape({ 1, H, W, OC }) }
  for name, res in pairs(run_paths(g, { df }, feed)) do
    local got = S.flatten(res[1]:totable())
    for ci = 0, C - 1 do
      for co = 0, OC - 1 do
        local s = 0.0
        for p = 0, H * W - 1 do s = s + xs[p * C + ci + 1] * dys[p * OC + co + 1] end
        local v = got[ci * OC + co + 1]
        lu.assertTrue(math.abs(v - s) <= (U + 2.0 ^ -18) * s, ("%s: df[%d,%d] %.9g vs %.9g"):format(name, ci, co, v, s))
      end
    end
  end
end
