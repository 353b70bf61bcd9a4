-- spec/ops_spec.lua — the op layer, table-driven: for every op of csrc/ops/ops.def (except
-- the graph plumbing), shape inference (unknown dims and ranks included), forward values
-- against results computed independently here in plain Lua (naive loops with TensorFlow's
-- SAME/VALID rule for the convolutions and pools), the host reference path
-- (use_off_line = false) against the device path, and error cases whose messages must carry
-- the status code, the op and the shapes.
--
-- Inputs are pseudo-random but deterministic (a small LCG below).  Float inputs are
-- multiples of 1/32 in [-4, 4]: exact in float32, so products and short sums are exact too
-- and the tolerances only absorb transcendental functions and summation order.
--
-- Defines global test tables TestOps*; spec/run.lua runs LuaUnit.
local lu = require("luaunit")
local npu = require("npu")

-- ------------------------------------------------------------------------------------------
-- Helpers: random data, shapes, nesting
-- ------------------------------------------------------------------------------------------

local S = dofile(SPEC_DIR .. "/support.lua")
local lcg, numel, nest, flatten, strides_of, unravel, offset, copy, as_number, seed_of =
  S.lcg, S.numel, S.nest, S.flatten, S.strides_of, S.unravel, S.offset, S.copy, S.as_number,
  S.seed_of

local rand_data, assert_close, assert_error = S.rand_data, S.assert_allclose, S.assert_error

local function shape_str(s)
  if s == nil then return "nil" end
  local parts = {}
  for i, d in ipairs(s) do parts[i] = tostring(d) end
  return "{" .. table.concat(parts, ",") .. "}"
end

local function close_session(s)
  if s.close then s:close() end
end

-- ------------------------------------------------------------------------------------------
-- Independent reference computations (plain Lua, double precision)
-- ------------------------------------------------------------------------------------------

local ref = {}

local function trunc(q) return q >= 0 and math.floor(q) or math.ceil(q) end

-- NumPy broadcasting of two flat arrays
function ref.broadcast(a, ashape, b, bshape, f)
  local nd = math.max(#ashape, #bshape)
  local oshape = {}
  for i = 1, nd do
    local da = ashape[i - (nd - #ashape)] or 1
    local db = bshape[i - (nd - #bshape)] or 1
    oshape[i] = da == 1 and db or da
  end
  local sa, sb = strides_of(ashape), strides_of(bshape)
  local out = {}
  for lin = 0, numel(oshape) - 1 do
    local idx = unravel(lin, oshape)
    local oa, ob = 0, 0
    for i = 1, nd do
      local ia, ib = i - (nd - #ashape), i - (nd - #bshape)
      if ia >= 1 and ashape[ia] ~= 1 then oa = oa + idx[i] * sa[ia] end
      if ib >= 1 and bshape[ib] ~= 1 then ob = ob + idx[i] * sb[ib] end
    end
    out[lin + 1] = f(a[oa + 1], b[ob + 1])
  end
  return out, oshape
end

local binary_fn = {
  add = function(a, b) return a + b end,
  sub = function(a, b) return a - b end,
  mul = function(a, b) return a * b end,
  div = function(a, b)
    if math.type(a) == "integer" and math.type(b) == "integer" then return trunc(a / b) end
    return a / b
  end,
  maximum = function(a, b) return math.max(a, b) end,
  minimum = function(a, b) return math.min(a, b) end,
}

local unary_fn = {
  neg = function(x) return -x end,
  relu = function(x) return math.max(x, 0) end,
  relu6 = function(x) return math.min(math.max(x, 0), 6) end,
  sigmoid = function(x) return 1 / (1 + math.exp(-x)) end,
  tanh = function(x)
    local e = math.exp(2 * x)
    return (e - 1) / (e + 1)
  end,
  exp = math.exp,
  log = math.log,
  sqrt = math.sqrt,
  square = function(x) return x * x end,
}

-- TensorFlow's output size and padding before for one spatial dim.
function ref.window_dim(n, k, stride, dilation, padding, before, after)
  local eff = (k - 1) * dilation + 1
  if padding == "SAME" then
    local out = (n + stride - 1) // stride
    local total = math.max((out - 1) * stride + eff - n, 0)
    return out, total // 2
  elseif padding == "VALID" then
    return (n - eff + stride) // stride, 0
  else -- EXPLICIT
    return (n + before + after - eff) // stride + 1, before
  end
end

local function hw(v, default)
  if v == nil then return default, default end
  if type(v) == "number" then return v, v end
  if #v == 4 then return v[2], v[3] end
  return v[1], v[2]
end

-- geometry of conv-like ops from NHWC input shape, window (kh, kw) and attributes
local function geometry(xs, kh, kw, attrs)
  local sh, sw = hw(attrs.strides, 1)
  local dh, dw = hw(attrs.dilations, 1)
  local ep = attrs.explicit_paddings or { 0, 0, 0, 0, 0, 0, 0, 0 }
  local oh, pt = ref.window_dim(xs[2], kh, sh, dh, attrs.padding, ep[3], ep[4])
  local ow, pl = ref.window_dim(xs[3], kw, sw, dw, attrs.padding, ep[5], ep[6])
  return { n = xs[1], h = xs[2], w = xs[3], c = xs[4], kh = kh, kw = kw, sh = sh, sw = sw,
    dh = dh, dw = dw, oh = oh, ow = ow, pt = pt, pl = pl }
end

-- visits every valid input position of output pixel (n, oh, ow)
local function each_tap(g, oh, ow, fn)
  for kh = 0, g.kh - 1 do
    local ih = oh * g.sh - g.pt + kh * g.dh
    if ih >= 0 and ih < g.h then
      for kw = 0, g.kw - 1 do
        local iw = ow * g.sw - g.pl + kw * g.dw
        if iw >= 0 and iw < g.w then fn(kh, kw, ih, iw) end
      end
    end
  end
end

function ref.conv2d(x, xs, f, fs, attrs)
  local g = geometry(xs, fs[1], fs[2], attrs)
  local oc = fs[4]
  local out = {}
  for n = 0, g.n - 1 do
    for oh = 0, g.oh - 1 do
      for ow = 0, g.ow - 1 do
        for o = 0, oc - 1 do
          local sum = 0
          each_tap(g, oh, ow, function(kh, kw, ih, iw)
            for ci = 0, g.c - 1 do
              sum = sum + x[((n * g.h + ih) * g.w + iw) * g.c + ci + 1]
                  * f[((kh * fs[2] + kw) * g.c + ci) * oc + o + 1]
            end
          end)
          out[#out + 1] = sum
        end
      end
    end
  end
  return out, { g.n, g.oh, g.ow, oc }
end

function ref.depthwise_conv2d(x, xs, f, fs, attrs)
  local g = geometry(xs, fs[1], fs[2], attrs)
  local m = fs[4]
  local out = {}
  for n = 0, g.n - 1 do
    for oh = 0, g.oh - 1 do
      for ow = 0, g.ow - 1 do
        for ci = 0, g.c - 1 do
          for j = 0, m - 1 do
            local sum = 0
            each_tap(g, oh, ow, function(kh, kw, ih, iw)
              sum = sum + x[((n * g.h + ih) * g.w + iw) * g.c + ci + 1]
                  * f[((kh * fs[2] + kw) * g.c + ci) * m + j + 1]
            end)
            out[#out + 1] = sum
          end
        end
      end
    end
  end
  return out, { g.n, g.oh, g.ow, g.c * m }
end

local function pool(x, xs, attrs, is_max)
  local kh, kw = hw(attrs.ksize)
  local g = geometry(xs, kh, kw, attrs)
  local out = {}
  for n = 0, g.n - 1 do
    for oh = 0, g.oh - 1 do
      for ow = 0, g.ow - 1 do
        for c = 0, g.c - 1 do
          local acc, count = is_max and -math.huge or 0, 0
          each_tap(g, oh, ow, function(_, _, ih, iw)
            local v = x[((n * g.h + ih) * g.w + iw) * g.c + c + 1]
            if is_max then acc = math.max(acc, v) else acc = acc + v end
            count = count + 1
          end)
          out[#out + 1] = is_max and acc or (count > 0 and acc / count or 0)
        end
      end
    end
  end
  return out, { g.n, g.oh, g.ow, g.c }
end
function ref.max_pool(x, xs, attrs) return pool(x, xs, attrs, true) end
function ref.avg_pool(x, xs, attrs) return pool(x, xs, attrs, false) end

function ref.transpose(x, xs, perm)
  local ys = {}
  for i = 1, #perm do ys[i] = xs[perm[i] + 1] end
  local sx = strides_of(xs)
  local out = {}
  for lin = 0, numel(ys) - 1 do
    local idx = unravel(lin, ys)
    local o = 0
    for i = 1, #perm do o = o + idx[i] * sx[perm[i] + 1] end
    out[lin + 1] = x[o + 1]
  end
  return out, ys
end

function ref.concat(list, axis)
  local rank = #list[1].shape
  if axis < 0 then axis = axis + rank end
  local ys = copy(list[1].shape)
  ys[axis + 1] = 0
  for _, t in ipairs(list) do ys[axis + 1] = ys[axis + 1] + t.shape[axis + 1] end
  local out = {}
  for lin = 0, numel(ys) - 1 do
    local idx = unravel(lin, ys)
    local a = idx[axis + 1]
    for _, t in ipairs(list) do
      if a < t.shape[axis + 1] then
        idx[axis + 1] = a
        out[lin + 1] = t.data[offset(idx, strides_of(t.shape)) + 1]
        break
      end
      a = a - t.shape[axis + 1]
    end
  end
  return out, ys
end

function ref.slice(x, xs, begin, size)
  local ys = {}
  for i = 1, #xs do ys[i] = size[i] == -1 and xs[i] - begin[i] or size[i] end
  local sx = strides_of(xs)
  local out = {}
  for lin = 0, numel(ys) - 1 do
    local idx = unravel(lin, ys)
    for i = 1, #idx do idx[i] = idx[i] + begin[i] end
    out[lin + 1] = x[offset(idx, sx) + 1]
  end
  return out, ys
end

function ref.pad(x, xs, paddings, mode, value)
  local ys = {}
  for i = 1, #xs do ys[i] = xs[i] + paddings[2 * i - 1] + paddings[2 * i] end
  local sx = strides_of(xs)
  local out = {}
  for lin = 0, numel(ys) - 1 do
    local idx = unravel(lin, ys)
    local inside = true
    for i = 1, #idx do
      local j, n = idx[i] - paddings[2 * i - 1], xs[i]
      if j < 0 or j >= n then
        if mode == "REFLECT" then j = j < 0 and -j or 2 * (n - 1) - j
        elseif mode == "SYMMETRIC" then j = j < 0 and -j - 1 or 2 * n - 1 - j
        else inside = false end
      end
      idx[i] = j
    end
    out[lin + 1] = inside and x[offset(idx, sx) + 1] or (value or 0)
  end
  return out, ys
end

-- axes: nil (all) or a list of axes (negative allowed)
function ref.reduce(x, xs, axes, keepdims, kind)
  local rank = #xs
  local red = {}
  if axes == nil then
    for i = 1, rank do red[i] = true end
  else
    for _, a in ipairs(type(axes) == "table" and axes or { axes }) do
      red[(a < 0 and a + rank or a) + 1] = true
    end
  end
  local ys, ks = {}, {} -- output shape; kept (non-reduced) input shape
  for i = 1, rank do
    if red[i] then
      if keepdims then ys[#ys + 1] = 1 end
    else
      ys[#ys + 1] = xs[i]
      ks[#ks + 1] = xs[i]
    end
  end
  local ksr = strides_of(ks)
  local acc, count = {}, {}
  for lin = 0, numel(xs) - 1 do
    local idx = unravel(lin, xs)
    local o, k = 0, 0
    for i = 1, rank do
      if not red[i] then
        k = k + 1
        o = o + idx[i] * ksr[k]
      end
    end
    local v = x[lin + 1]
    if acc[o + 1] == nil then acc[o + 1], count[o + 1] = v, 1
    else
      count[o + 1] = count[o + 1] + 1
      if kind == "max" then acc[o + 1] = math.max(acc[o + 1], v) else acc[o + 1] = acc[o + 1] + v end
    end
  end
  if kind == "mean" then
    for i = 1, #acc do
      if math.type(acc[i]) == "integer" then acc[i] = trunc(acc[i] / count[i])
      else acc[i] = acc[i] / count[i] end
    end
  end
  return acc, ys
end

function ref.argmax(x, xs, axis)
  local rank = #xs
  if axis < 0 then axis = axis + rank end
  local ys = {}
  for i = 1, rank do if i ~= axis + 1 then ys[#ys + 1] = xs[i] end end
  local sx = strides_of(xs)
  local out = {}
  for lin = 0, numel(ys) - 1 do
    local oidx = unravel(lin, ys)
    local idx, k = {}, 0
    for i = 1, rank do
      if i == axis + 1 then idx[i] = 0 else
        k = k + 1
        idx[i] = oidx[k]
      end
    end
    local best, besti = -math.huge, 0
    for j = 0, xs[axis + 1] - 1 do
      idx[axis + 1] = j
      local v = x[offset(idx, sx) + 1]
      if v > best then best, besti = v, j end
    end
    out[lin + 1] = besti
  end
  return out, ys
end

local function softmax_rows(x, xs, log)
  local cols = xs[#xs]
  local out = {}
  for r = 0, numel(xs) // cols - 1 do
    local m = -math.huge
    for j = 1, cols do m = math.max(m, x[r * cols + j]) end
    local sum = 0
    for j = 1, cols do sum = sum + math.exp(x[r * cols + j] - m) end
    for j = 1, cols do
      local v = x[r * cols + j] - m
      out[r * cols + j] = log and v - math.log(sum) or math.exp(v) / sum
    end
  end
  return out, copy(xs)
end

-- cast of one value as the kernels define it
local cast_fn = {
  int32 = function(v)
    if math.type(v) == "float" then v = trunc(v) end
    return math.tointeger(math.max(math.min(v, 2147483647), -2147483648))
  end,
  uint8 = function(v)
    if math.type(v) == "float" then v = trunc(v) end
    return math.tointeger(math.max(math.min(v, 255), 0))
  end,
  int8 = function(v)
    if math.type(v) == "float" then v = trunc(v) end
    return math.tointeger(math.max(math.min(v, 127), -128))
  end,
  int64 = function(v) return math.tointeger(math.type(v) == "float" and trunc(v) or v) end,
  float32 = function(v) return v + 0.0 end,
  float64 = function(v) return v + 0.0 end,
  bool = function(v) return v ~= 0 and 1 or 0 end,
}

-- ------------------------------------------------------------------------------------------
-- The forward table: op, inputs {shape, dtype, kind, seed}, attrs, the expected result as a
-- function of the input data, and the tolerance.
-- ------------------------------------------------------------------------------------------

local F32 = "float32"
local function int_kind(dt) return (dt:match("int") or dt == "uint8") and "int" or nil end
local cases = {}
local function case(c) cases[#cases + 1] = c end

-- elementwise binary: several broadcast patterns, float32 and int32
local bin_shapes = {
  { { 3, 4 }, { 3, 4 } },
  { { 2, 1, 5 }, { 3, 1 } },
  { { 4 }, { 2, 3, 4 } },
  { { 2, 3 }, { 1 } },
}
for _, op in ipairs({ "add", "sub", "mul", "div", "maximum", "minimum" }) do
  for i, sh in ipairs(bin_shapes) do
    case {
      name = ("%s_f32_%d"):format(op, i), op = op,
      inputs = { { shape = sh[1] }, { shape = sh[2], kind = op == "div" and "pos" or nil } },
      expect = function(a, b) return ref.broadcast(a.data, a.shape, b.data, b.shape, binary_fn[op]) end,
    }
  end
  case {
    name = op .. "_i32", op = op,
    inputs = { { shape = { 2, 3, 4 }, dtype = "int32", kind = "int" },
      { shape = { 3, 1 }, dtype = "int32", kind = "int", nonzero = op == "div" } },
    expect = function(a, b) return ref.broadcast(a.data, a.shape, b.data, b.shape, binary_fn[op]) end,
  }
  case {
    name = op .. "_f64", op = op,
    inputs = { { shape = { 5, 3 }, dtype = "float64" },
      { shape = { 3 }, dtype = "float64", kind = op == "div" and "pos" or nil } },
    expect = function(a, b) return ref.broadcast(a.data, a.shape, b.data, b.shape, binary_fn[op]) end,
  }
end

-- elementwise unary
local unary_kind = { log = "pos", sqrt = "pos", relu6 = "wide" }
for _, op in ipairs({ "neg", "relu", "relu6", "sigmoid", "tanh", "exp", "log", "sqrt", "square" }) do
  for _, dt in ipairs({ "float32", "float64" }) do
    case {
      name = op .. "_" .. dt, op = op,
      inputs = { { shape = { 3, 7, 5 }, dtype = dt, kind = unary_kind[op] } },
      expect = function(a)
        local out = {}
        for i, v in ipairs(a.data) do out[i] = unary_fn[op](v) end
        return out, a.shape
      end,
    }
  end
end
for _, op in ipairs({ "neg", "relu", "relu6", "square" }) do
  case {
    name = op .. "_i32", op = op,
    inputs = { { shape = { 4, 6 }, dtype = "int32", kind = "int" } },
    expect = function(a)
      local out = {}
      for i, v in ipairs(a.data) do out[i] = math.tointeger(unary_fn[op](v)) end
      return out, a.shape
    end,
  }
end

-- bias_add
for _, sh in ipairs({ { 2, 5 }, { 2, 3, 4, 6 } }) do
  for _, dt in ipairs({ "float32", "float64" }) do
    case {
      name = ("bias_add_%s_rank%d"):format(dt, #sh), op = "bias_add",
      inputs = { { shape = sh, dtype = dt }, { shape = { sh[#sh] }, dtype = dt } },
      expect = function(x, b) return ref.broadcast(x.data, x.shape, b.data, b.shape, binary_fn.add) end,
    }
  end
end

-- softmax, log_softmax
for _, op in ipairs({ "softmax", "log_softmax" }) do
  for _, sh in ipairs({ { 7 }, { 4, 9 }, { 2, 3, 5 } }) do
    for _, dt in ipairs({ "float32", "float64" }) do
      case {
        name = ("%s_%s_rank%d"):format(op, dt, #sh), op = op,
        attrs = #sh == 2 and { axis = 1 } or nil,
        inputs = { { shape = sh, dtype = dt } },
        expect = function(x) return softmax_rows(x.data, x.shape, op == "log_softmax") end,
        rtol = 1e-5, atol = 1e-6,
      }
    end
  end
end

-- conv2d: awkward sizes, strides 2, dilation 2, batch 2, every padding form
local conv_cases = {
  { "same_s1", { 1, 5, 5, 2 }, { 3, 3, 2, 3 }, { strides = { 1, 1, 1, 1 }, padding = "SAME" } },
  { "valid_s1", { 2, 6, 7, 3 }, { 3, 2, 3, 4 }, { padding = "VALID" } },
  { "same_s2_odd", { 2, 7, 6, 3 }, { 3, 3, 3, 5 }, { strides = { 1, 2, 2, 1 }, padding = "SAME" } },
  { "valid_s2", { 2, 9, 8, 2 }, { 3, 3, 2, 4 }, { strides = { 2, 2 }, padding = "VALID" } },
  { "same_s2x3_even_k", { 1, 8, 10, 3 }, { 4, 2, 3, 2 }, { strides = { 2, 3 }, padding = "SAME" } },
  { "same_dil2", { 2, 9, 7, 3 }, { 3, 3, 3, 4 }, { dilations = { 1, 2, 2, 1 }, padding = "SAME" } },
  { "valid_dil2_s2", { 1, 11, 10, 2 }, { 3, 2, 2, 3 }, { strides = 2, dilations = 2, padding = "VALID" } },
  { "explicit", { 2, 5, 6, 3 }, { 3, 3, 3, 2 },
    { padding = "EXPLICIT", explicit_paddings = { 0, 0, 1, 2, 0, 1, 0, 0 }, strides = { 1, 2, 1, 1 } } },
  { "pointwise_1x1", { 2, 4, 5, 6 }, { 1, 1, 6, 7 }, { padding = "VALID" } },
  { "kernel_bigger_than_input_same", { 1, 2, 3, 2 }, { 5, 5, 2, 3 }, { padding = "SAME" } },
  -- large enough for the GEMM path to cut the output pixels into several blocks and slots
  { "large_same", { 2, 17, 19, 8 }, { 3, 3, 8, 16 }, { padding = "SAME" } },
  { "large_valid_s2_dil2", { 2, 23, 21, 5 }, { 3, 3, 5, 6 }, { strides = 2, dilations = 2, padding = "VALID" } },
}
for _, c in ipairs(conv_cases) do
  case {
    name = "conv2d_" .. c[1], op = "conv2d", attrs = c[4],
    inputs = { { shape = c[2] }, { shape = c[3], kind = "small" } },
    expect = function(x, f) return ref.conv2d(x.data, x.shape, f.data, f.shape, c[4]) end,
    rtol = 1e-5, atol = 1e-5,
  }
end

-- depthwise_conv2d: channel multiplier 1 and 2
local dw_cases = {
  { "same_m1", { 1, 6, 5, 3 }, { 3, 3, 3, 1 }, { padding = "SAME" } },
  { "valid_m2", { 2, 7, 6, 3 }, { 3, 2, 3, 2 }, { padding = "VALID" } },
  { "same_s2_m2", { 2, 7, 7, 4 }, { 3, 3, 4, 2 }, { strides = { 1, 2, 2, 1 }, padding = "SAME" } },
  { "same_dil2_m2", { 1, 9, 8, 2 }, { 3, 3, 2, 2 }, { dilations = { 2, 2 }, padding = "SAME" } },
  { "explicit_m3", { 1, 4, 5, 2 }, { 2, 2, 2, 3 },
    { padding = "EXPLICIT", explicit_paddings = { 0, 0, 1, 0, 2, 1, 0, 0 } } },
  { "large_same_m2", { 2, 19, 17, 12 }, { 3, 3, 12, 2 }, { padding = "SAME" } },
}
for _, c in ipairs(dw_cases) do
  case {
    name = "depthwise_conv2d_" .. c[1], op = "depthwise_conv2d", attrs = c[4],
    inputs = { { shape = c[2] }, { shape = c[3], kind = "small" } },
    expect = function(x, f) return ref.depthwise_conv2d(x.data, x.shape, f.data, f.shape, c[4]) end,
    rtol = 1e-5, atol = 1e-5,
  }
end

-- pools
local pool_cases = {
  { "2x2_s2_valid", { 2, 6, 7, 3 }, { ksize = { 1, 2, 2, 1 }, strides = { 1, 2, 2, 1 }, padding = "VALID" } },
  { "3x3_s2_same", { 2, 7, 6, 2 }, { ksize = { 3, 3 }, strides = { 2, 2 }, padding = "SAME" } },
  { "3x2_s1_same", { 1, 5, 4, 3 }, { ksize = { 3, 2 }, padding = "SAME" } },
  { "3_s3_valid", { 1, 10, 9, 2 }, { ksize = 3, strides = 3, padding = "VALID" } },
  { "window_bigger_than_input_same", { 1, 2, 3, 2 }, { ksize = 4, strides = 2, padding = "SAME" } },
  { "large_3x3_s2_same", { 2, 33, 31, 16 }, { ksize = 3, strides = 2, padding = "SAME" } },
}
for _, op in ipairs({ "max_pool", "avg_pool" }) do
  for _, c in ipairs(pool_cases) do
    case {
      name = op .. "_" .. c[1], op = op, attrs = c[3],
      inputs = { { shape = c[2] } },
      expect = function(x) return ref[op](x.data, x.shape, c[3]) end,
      rtol = 1e-6, atol = 1e-6,
    }
  end
end

-- reshape (any dtype: a copy)
for i, c in ipairs({
  { { 2, 3, 4 }, { 4, 6 }, F32 }, { { 2, 3, 4 }, { -1, 2 }, "int32" }, { { 6 }, { 1, 2, 1, 3 }, "float64" },
  { { 4, 5 }, { 5, -1 }, "int64" }, { { 2, 6 }, { 12 }, "uint8" },
}) do
  case {
    name = "reshape_" .. i, op = "reshape", attrs = { shape = c[2] },
    inputs = { { shape = c[1], dtype = c[3], kind = int_kind(c[3]) } },
    expect = function(x)
      local ys, known = copy(c[2]), 1
      for _, d in ipairs(ys) do if d ~= -1 then known = known * d end end
      for k, d in ipairs(ys) do if d == -1 then ys[k] = numel(x.shape) // known end end
      return copy(x.data), ys
    end,
  }
end

-- transpose
for i, c in ipairs({
  { { 3, 4 }, nil, F32 }, { { 2, 3, 4 }, { 2, 0, 1 }, F32 }, { { 2, 3, 4, 5 }, { 0, 3, 1, 2 }, "int32" },
  { { 4, 3, 2 }, { 1, -1, 0 }, "float64" }, { { 5, 6 }, { 1, 0 }, "uint8" }, { { 7 }, { 0 }, "int64" },
}) do
  case {
    name = "transpose_" .. i, op = "transpose", attrs = c[2] and { perm = c[2] } or nil,
    inputs = { { shape = c[1], dtype = c[3], kind = int_kind(c[3]) } },
    expect = function(x)
      local rank = #x.shape
      local perm = {}
      for k = 1, rank do
        local p = c[2] and c[2][k] or rank - k
        perm[k] = p < 0 and p + rank or p
      end
      return ref.transpose(x.data, x.shape, perm)
    end,
  }
end

-- concat (20 inputs: more than any fixed-size buffer of the executor holds)
local many_shapes = {}
for k = 1, 20 do many_shapes[k] = { 2, k % 3 + 1 } end
for i, c in ipairs({
  { { { 2, 3 }, { 4, 3 } }, 0, F32 },
  { { { 2, 3 }, { 2, 1 }, { 2, 5 } }, 1, F32 },
  { { { 2, 3, 4 }, { 2, 2, 4 } }, -2, "int32" },
  { { { 3, 2, 2 } }, 2, "float64" },
  { { { 1, 2, 3 }, { 1, 2, 3 }, { 1, 2, 1 }, { 1, 2, 2 } }, -1, "int64" },
  { many_shapes, 1, F32 },
}) do
  local inputs = {}
  for k, sh in ipairs(c[1]) do
    inputs[k] = { shape = sh, dtype = c[3], kind = int_kind(c[3]) }
  end
  case {
    name = "concat_" .. i, op = "concat", attrs = { axis = c[2] }, inputs = inputs,
    expect = function(...) return ref.concat({ ... }, c[2]) end,
  }
end

-- slice
for i, c in ipairs({
  { { 5, 6 }, { 1, 2 }, { 3, 4 }, F32 },
  { { 4, 5, 6 }, { 0, 1, 2 }, { -1, 3, -1 }, "int32" },
  { { 7 }, { 6 }, { 1 }, "float64" },
  { { 3, 4 }, { 0, 0 }, { 3, 4 }, "int64" },
  { { 3, 4 }, { 1, 4 }, { 2, 0 }, F32 }, -- an empty extent
}) do
  case {
    name = "slice_" .. i, op = "slice", attrs = { begin = c[2], size = c[3] },
    inputs = { { shape = c[1], dtype = c[4], kind = int_kind(c[4]) } },
    expect = function(x) return ref.slice(x.data, x.shape, c[2], c[3]) end,
  }
end

-- pad
for i, c in ipairs({
  { { 3, 4 }, { 1, 2, 0, 3 }, nil, nil, F32 },
  { { 2, 3, 4 }, { 0, 1, 2, 2, 1, 0 }, "CONSTANT", 2.5, F32 },
  { { 4, 5 }, { 2, 3, 1, 4 }, "REFLECT", nil, F32 },
  { { 4, 5 }, { 3, 4, 4, 1 }, "SYMMETRIC", nil, "int32" },
  { { 3, 3, 2 }, { 2, 2, 1, 1, 1, 0 }, "REFLECT", nil, "float64" },
  { { 2, 3 }, { 1, 1, 1, 1 }, "CONSTANT", 7, "int64" },
  { { 5 }, { 5, 5 }, "SYMMETRIC", nil, "uint8" },
}) do
  local attrs = { paddings = c[2], mode = c[3], constant_values = c[4] }
  case {
    name = "pad_" .. i, op = "pad", attrs = attrs,
    inputs = { { shape = c[1], dtype = c[5], kind = int_kind(c[5]) } },
    expect = function(x) return ref.pad(x.data, x.shape, c[2], c[3] or "CONSTANT", c[4]) end,
  }
end

-- cast
for _, c in ipairs({
  { F32, "int32", "wide" }, { F32, "float64", nil }, { "float64", F32, nil }, { "int32", F32, "int" },
  { F32, "uint8", "wide" }, { F32, "int8", "wide" }, { "int32", "int64", "int" }, { F32, "bool", "int" },
  { "int64", "float64", "int" },
}) do
  case {
    name = ("cast_%s_to_%s"):format(c[1], c[2]), op = "cast", attrs = { dtype = c[2] },
    inputs = { { shape = { 3, 5 }, dtype = c[1], kind = c[3] } },
    out_dtype = c[2],
    expect = function(x)
      local out = {}
      for i, v in ipairs(x.data) do out[i] = cast_fn[c[2]](v) end
      return out, x.shape
    end,
  }
end

-- reductions
local reduce_axes = {
  { nil, false }, { nil, true }, { 1, false }, { { 0, 2 }, false }, { { -1 }, true }, { { 2, 0, 1 }, true },
  { {}, false },
}
for _, op in ipairs({ "reduce_sum", "reduce_mean", "reduce_max" }) do
  local kind = op:sub(8)
  for i, r in ipairs(reduce_axes) do
    for _, dt in ipairs({ "float32", "float64", "int32", "int64" }) do
      case {
        name = ("%s_%s_%d"):format(op, dt, i), op = op,
        attrs = { axis = r[1], keepdims = r[2] },
        inputs = { { shape = { 3, 4, 5 }, dtype = dt, kind = int_kind(dt) } },
        expect = function(x)
          if type(r[1]) == "table" and #r[1] == 0 then return copy(x.data), copy(x.shape) end
          return ref.reduce(x.data, x.shape, r[1], r[2], kind)
        end,
        rtol = 1e-5, atol = 1e-5,
      }
    end
  end
end

-- argmax (small integer-valued inputs: ties are common and must give the first index)
for i, c in ipairs({
  { { 4, 7 }, nil, nil, F32 }, { { 4, 7 }, 1, nil, F32 }, { { 3, 4, 5 }, -2, "int32", "float64" },
  { { 3, 4, 5 }, 2, "int64", "int32" }, { { 6 }, 0, "int32", "int64" },
}) do
  case {
    name = "argmax_" .. i, op = "argmax", attrs = { axis = c[2], output_type = c[3] },
    inputs = { { shape = c[1], dtype = c[4], kind = "int" } },
    out_dtype = c[3] or "int64",
    expect = function(x) return ref.argmax(x.data, x.shape, c[2] or 0) end,
  }
end

-- matmul (from the lead's example op: checked here with the rest of the table)
for _, t in ipairs({ { false, false }, { true, false }, { false, true }, { true, true } }) do
  case {
    name = ("matmul_ta%s_tb%s"):format(t[1], t[2]), op = "matmul",
    attrs = { transpose_a = t[1], transpose_b = t[2] },
    inputs = { { shape = t[1] and { 5, 3 } or { 3, 5 } }, { shape = t[2] and { 4, 5 } or { 5, 4 } } },
    expect = function(a, b)
      local out = {}
      for i = 0, 2 do
        for j = 0, 3 do
          local s = 0
          for k = 0, 4 do
            local av = t[1] and a.data[k * 3 + i + 1] or a.data[i * 5 + k + 1]
            local bv = t[2] and b.data[j * 5 + k + 1] or b.data[k * 4 + j + 1]
            s = s + av * bv
          end
          out[#out + 1] = s
        end
      end
      return out, { 3, 4 }
    end,
    rtol = 1e-5, atol = 1e-5,
  }
end

-- ------------------------------------------------------------------------------------------
-- Running a forward case on both paths
-- ------------------------------------------------------------------------------------------

local function make_inputs(c)
  local list = {}
  for i, inp in ipairs(c.inputs) do
    local dt = inp.dtype or F32
    local data = rand_data(seed_of(c.name, i), inp.shape, inp.kind)
    if dt:match("int") or dt == "uint8" then
      for k, v in ipairs(data) do
        v = math.tointeger(v) or math.floor(v)
        if dt == "uint8" then v = v % 256 end
        if inp.nonzero and v == 0 then v = 3 end
        data[k] = v
      end
    end
    list[i] = { shape = inp.shape, dtype = dt, data = data }
  end
  return list
end

local function run_forward(c)
  local inputs = make_inputs(c)
  local want, want_shape = c.expect(table.unpack(inputs))
  S.check_forward(c, inputs, want, want_shape, c.out_dtype or inputs[1].dtype)
end

TestOpsForward = {}
for _, c in ipairs(cases) do
  TestOpsForward["test_" .. c.name] = function() run_forward(c) end
end

-- The ops this file covers: each is in the op table and has forward, shape and error cases.
local OWN_OPS = { "add", "sub", "mul", "div", "maximum", "minimum", "neg", "relu", "relu6",
  "sigmoid", "tanh", "exp", "log", "sqrt", "square", "bias_add", "softmax", "log_softmax",
  "conv2d", "depthwise_conv2d", "max_pool", "avg_pool", "reshape", "transpose", "concat",
  "slice", "pad", "cast", "reduce_sum", "reduce_mean", "reduce_max", "argmax", "matmul" }

function TestOpsForward.test_every_op_is_covered()
  S.assert_ops_covered(cases, OWN_OPS)
end

-- ------------------------------------------------------------------------------------------
-- Shape inference with unknown dims (-1) and unknown rank ("?")
-- ------------------------------------------------------------------------------------------

local U = "?" -- unknown rank
local shape_cases = {
  -- op, {input shapes}, attrs, expected shape (nil = unknown rank), input dtype, out dtype
  { "add", { { -1, 3 }, { 3 } }, nil, { -1, 3 } },
  { "sub", { { -1, 3 }, { 2, 1 } }, nil, { 2, 3 } },
  { "mul", { { -1, 1, 4 }, { 5, -1 } }, nil, { -1, 5, 4 } },
  { "maximum", { U, { 3 } }, nil, nil },
  { "div", { { 2, -1 }, { -1 } }, nil, { 2, -1 } },
  { "minimum", { {}, { 2, 2 } }, nil, { 2, 2 } },
  { "neg", { { -1, 5 } }, nil, { -1, 5 } },
  { "relu6", { U }, nil, nil },
  { "relu", { { -1, 2 } }, nil, { -1, 2 } },
  { "sigmoid", { { -1, -1 } }, nil, { -1, -1 } },
  { "tanh", { { 3 } }, nil, { 3 } },
  { "exp", { { -1, 2, 3 } }, nil, { -1, 2, 3 } },
  { "log", { U }, nil, nil },
  { "sqrt", { {} }, nil, {} },
  { "square", { { 4, -1 } }, nil, { 4, -1 } },
  { "bias_add", { { -1, -1 }, { 4 } }, nil, { -1, 4 } },
  { "bias_add", { { -1, 7, 7, 3 }, { -1 } }, nil, { -1, 7, 7, 3 } },
  { "bias_add", { U, { 4 } }, nil, nil },
  { "softmax", { { -1, 10 } }, nil, { -1, 10 } },
  { "log_softmax", { U }, nil, nil },
  { "conv2d", { { -1, 28, 28, 3 }, { 5, 5, 3, 8 } }, { strides = { 1, 2, 2, 1 }, padding = "SAME" }, { -1, 14, 14, 8 } },
  { "conv2d", { { -1, 28, 28, 3 }, { 5, 5, 3, 8 } }, { padding = "VALID" }, { -1, 24, 24, 8 } },
  { "conv2d", { { 2, -1, 9, 3 }, { 3, 3, 3, 4 } }, { padding = "VALID", dilations = 2 }, { 2, -1, 5, 4 } },
  { "conv2d", { { -1, -1, -1, -1 }, { 3, 3, 3, 16 } }, { padding = "SAME" }, { -1, -1, -1, 16 } },
  { "conv2d", { U, { 3, 3, 3, 16 } }, { padding = "SAME" }, { -1, -1, -1, 16 } },
  { "conv2d", { { 1, 8, 8, 3 }, U }, { padding = "SAME", strides = 2 }, { 1, -1, -1, -1 } },
  { "conv2d", { { 1, 5, 6, 3 }, { 3, 3, 3, 2 } },
    { padding = "EXPLICIT", explicit_paddings = { 0, 0, 1, 1, 2, 2, 0, 0 } }, { 1, 5, 8, 2 } },
  { "depthwise_conv2d", { { -1, 9, 9, 4 }, { 3, 3, 4, 2 } }, { padding = "VALID" }, { -1, 7, 7, 8 } },
  { "depthwise_conv2d", { { -1, 9, 9, 4 }, { 3, 3, -1, 2 } }, { padding = "SAME" }, { -1, 9, 9, 8 } },
  { "depthwise_conv2d", { U, { 3, 3, 4, 3 } }, { padding = "SAME" }, { -1, -1, -1, 12 } },
  { "max_pool", { { -1, 9, 9, 3 } }, { ksize = 3, strides = 2, padding = "SAME" }, { -1, 5, 5, 3 } },
  { "max_pool", { { -1, 9, -1, 3 } }, { ksize = 3, strides = 2, padding = "VALID" }, { -1, 4, -1, 3 } },
  { "avg_pool", { U }, { ksize = { 1, 2, 2, 1 }, strides = { 1, 2, 2, 1 }, padding = "VALID" }, { -1, -1, -1, -1 } },
  { "avg_pool", { { 2, 7, 5, 1 } }, { ksize = { 2, 3 }, padding = "VALID" }, { 2, 6, 3, 1 } },
  { "reshape", { { -1, 784 } }, { shape = { -1, 28, 28, 1 } }, { -1, 28, 28, 1 } },
  { "reshape", { { 6, 4 } }, { shape = { -1, 8 } }, { 3, 8 } },
  { "reshape", { { -1, 4 } }, { shape = { 2, 2, -1 } }, { 2, 2, -1 } },
  { "reshape", { U }, { shape = { 3, -1 } }, { 3, -1 } },
  { "reshape", { { 2, 3 } }, { shape = {} }, nil, F32, F32, "bad" }, -- 6 elements into a scalar: error
  { "reshape", { { 1, 1 } }, { shape = {} }, {} },
  { "transpose", { { -1, 3, 5 } }, { perm = { 2, 0, 1 } }, { 5, -1, 3 } },
  { "transpose", { { 2, -1, 4 } }, nil, { 4, -1, 2 } },
  { "transpose", { U }, { perm = { 1, 0 } }, { -1, -1 } },
  { "transpose", { U }, nil, nil },
  { "concat", { { -1, 3 }, { 2, 3 } }, { axis = 0 }, { -1, 3 } },
  { "concat", { { 2, -1 }, { -1, 4 } }, { axis = 1 }, { 2, -1 } },
  { "concat", { { 2, 3 }, { -1, 4 } }, { axis = -1 }, { 2, 7 } },
  { "concat", { U, { 2, 3 } }, { axis = 1 }, { 2, -1 } },
  { "concat", { U, U }, { axis = 0 }, nil },
  { "slice", { { -1, 5 } }, { begin = { 0, 1 }, size = { 2, -1 } }, { 2, 4 } },
  { "slice", { { -1, 5 } }, { begin = { 1, 1 }, size = { -1, 2 } }, { -1, 2 } },
  { "slice", { U }, { begin = { 1, 1 }, size = { 3, -1 } }, { 3, -1 } },
  { "pad", { { -1, 3 } }, { paddings = { { 1, 2 }, { 0, 1 } } }, { -1, 4 } },
  { "pad", { U }, { paddings = { 1, 1, 2, 2, 0, 0 } }, { -1, -1, -1 } },
  { "cast", { { -1, 2 } }, { dtype = "int32" }, { -1, 2 }, F32, "int32" },
  { "cast", { U }, { dtype = "float64" }, nil, "int32", "float64" },
  { "reduce_sum", { { -1, 3, 4 } }, { axis = 1 }, { -1, 4 } },
  { "reduce_sum", { { -1, 3, 4 } }, { axis = { 1 }, keepdims = true }, { -1, 1, 4 } },
  { "reduce_mean", { { -1, 3, 4 } }, nil, {} },
  { "reduce_mean", { { -1, 3, 4 } }, { keepdims = true }, { 1, 1, 1 } },
  { "reduce_max", { U }, nil, {} },
  { "reduce_max", { U }, { axis = 0 }, nil },
  { "reduce_sum", { { 2, -1 } }, { axis = { -1, 0 } }, {} },
  { "argmax", { { -1, 10 } }, { axis = 1 }, { -1 }, F32, "int64" },
  { "argmax", { { 5, -1 } }, nil, { -1 }, F32, "int64" },
  { "argmax", { U }, { axis = 1, output_type = "int32" }, nil, F32, "int32" },
  { "matmul", { { -1, 3 }, { 3, -1 } }, nil, { -1, -1 } },
}

local function placeholder(g, dt, sh, name)
  if sh == U then return g:placeholder(dt, nil, name) end
  return g:placeholder(dt, sh, name)
end

TestOpsShapes = {}
for i, c in ipairs(shape_cases) do
  local op, in_shapes, attrs, want, in_dt, out_dt, bad = c[1], c[2], c[3], c[4], c[5], c[6], c[7]
  TestOpsShapes[("test_%02d_%s"):format(i, op)] = function()
    local g = npu.Graph()
    local ins = {}
    for k, sh in ipairs(in_shapes) do ins[k] = placeholder(g, in_dt or F32, sh, "x" .. k) end
    if bad then
      assert_error(function() g:op(op, ins, attrs) end, "NPU_ERR_SHAPE", { op })
      return
    end
    local y = g:op(op, ins, attrs)
    lu.assertEquals(y:shape(), want, ("%s on %s"):format(op, shape_str(in_shapes[1] ~= U and in_shapes[1] or nil)))
    lu.assertEquals(y:dtype(), out_dt or in_dt or F32)
  end
end

-- Unknown dims are resolved when fed: one graph, run with two different batch sizes.
local dynamic_cases = {
  { "conv2d", { { -1, -1, -1, 3 }, { 3, 3, 3, 4 } }, { { 2, 7, 6, 3 }, { 3, 3, 3, 4 } },
    { strides = 2, padding = "SAME" }, function(x, f, a) return ref.conv2d(x.data, x.shape, f.data, f.shape, a) end },
  { "depthwise_conv2d", { { -1, 8, 8, 2 }, { 3, 3, 2, 2 } }, { { 3, 8, 8, 2 }, { 3, 3, 2, 2 } },
    { padding = "VALID" }, function(x, f, a) return ref.depthwise_conv2d(x.data, x.shape, f.data, f.shape, a) end },
  { "max_pool", { { -1, -1, -1, 2 } }, { { 2, 5, 7, 2 } }, { ksize = 2, strides = 2, padding = "SAME" },
    function(x, a) return ref.max_pool(x.data, x.shape, a) end },
  { "reshape", { { -1, 6 } }, { { 4, 6 } }, { shape = { -1, 3, 2 } },
    function(x) return copy(x.data), { x.shape[1], 3, 2 } end },
  { "reduce_sum", { U }, { { 3, 2, 4 } }, { axis = { 0, 2 } },
    function(x, a) return ref.reduce(x.data, x.shape, a.axis, false, "sum") end },
  { "concat", { { -1, 2 }, { -1, 2 } }, { { 3, 2 }, { 1, 2 } }, { axis = 0 },
    function(a, b) return ref.concat({ a, b }, 0) end },
  { "softmax", { { -1, -1 } }, { { 3, 5 } }, nil, function(x) return softmax_rows(x.data, x.shape) end },
}
for i, c in ipairs(dynamic_cases) do
  local op, ph_shapes, feed_shapes, attrs, expect = c[1], c[2], c[3], c[4], c[5]
  TestOpsShapes[("test_dynamic_%d_%s"):format(i, op)] = function()
    local g = npu.Graph()
    local phs = {}
    for k, sh in ipairs(ph_shapes) do phs[k] = placeholder(g, F32, sh, "x" .. k) end
    local y = g:op(op, phs, attrs)
    local sess = npu.Session { graph = g }
    for round = 1, 2 do
      local feeds, inputs = {}, {}
      for k, sh in ipairs(feed_shapes) do
        local shape = copy(sh)
        if round == 2 and ph_shapes[k] ~= U and ph_shapes[k][1] == -1 then shape[1] = shape[1] + 1 end
        inputs[k] = { shape = shape, data = rand_data(31 * i + 7 * k + round, shape, k == 2 and "small" or nil) }
        feeds[phs[k]] = npu.tensor(nest(inputs[k].data, shape), F32)
      end
      inputs[#inputs + 1] = attrs
      local want, want_shape = expect(table.unpack(inputs))
      local out = sess:run(y, feeds)
      lu.assertEquals(out:shape(), want_shape)
      assert_close(flatten(out:totable()), want, 1e-5, 1e-5, op .. " round " .. round)
    end
    close_session(sess)
  end
end

-- ------------------------------------------------------------------------------------------
-- Errors: status code, op name and the culprit in the message
-- ------------------------------------------------------------------------------------------

local error_cases = {
  -- name, op, {input specs {shape, dtype}}, attrs, code, {parts of the message}
  { "matmul_inner", "matmul", { { { 2, 3 } }, { { 4, 5 } } }, nil, "NPU_ERR_SHAPE", { "matmul", "[2,3]", "[4,5]" } },
  { "matmul_rank", "matmul", { { { 2, 3, 4 } }, { { 4, 5 } } }, nil, "NPU_ERR_SHAPE", { "matmul", "[2,3,4]" } },
  { "add_broadcast", "add", { { { 3, 2 } }, { { 3 } } }, nil, "NPU_ERR_SHAPE", { "add", "[3,2]", "[3]" } },
  { "relu_bool", "relu", { { { 2 }, "bool" } }, nil, "NPU_ERR_DTYPE", { "relu", "bool" } },
  { "sub_broadcast", "sub", { { { 2, 3 } }, { { 4 } } }, nil, "NPU_ERR_SHAPE", { "sub", "[2,3]", "[4]" } },
  { "mul_dtypes", "mul", { { { 2 } }, { { 2 }, "int32" } }, nil, "NPU_ERR_DTYPE", { "mul", "float32", "int32" } },
  { "div_bool", "div", { { { 2 }, "bool" }, { { 2 }, "bool" } }, nil, "NPU_ERR_DTYPE", { "div", "bool" } },
  { "maximum_uint8", "maximum", { { { 2 }, "uint8" }, { { 2 }, "uint8" } }, nil, "NPU_ERR_DTYPE", { "maximum", "uint8" } },
  { "minimum_shapes", "minimum", { { { 3, 1 } }, { { 2, 4 } } }, nil, "NPU_ERR_SHAPE", { "minimum", "[3,1]", "[2,4]" } },
  { "sigmoid_int", "sigmoid", { { { 2 }, "int32" } }, nil, "NPU_ERR_DTYPE", { "sigmoid", "int32", "float32" } },
  { "tanh_int", "tanh", { { { 2 }, "int64" } }, nil, "NPU_ERR_DTYPE", { "tanh", "int64" } },
  { "exp_int", "exp", { { { 2 }, "int32" } }, nil, "NPU_ERR_DTYPE", { "exp" } },
  { "log_int", "log", { { { 2 }, "int32" } }, nil, "NPU_ERR_DTYPE", { "log" } },
  { "sqrt_int", "sqrt", { { { 2 }, "int32" } }, nil, "NPU_ERR_DTYPE", { "sqrt" } },
  { "neg_bool", "neg", { { { 2 }, "bool" } }, nil, "NPU_ERR_DTYPE", { "neg", "bool" } },
  { "relu6_uint8", "relu6", { { { 2 }, "uint8" } }, nil, "NPU_ERR_DTYPE", { "relu6" } },
  { "square_bool", "square", { { { 2 }, "bool" } }, nil, "NPU_ERR_DTYPE", { "square" } },
  { "bias_add_size", "bias_add", { { { 2, 4 } }, { { 5 } } }, nil, "NPU_ERR_SHAPE", { "bias_add", "[5]", "[2,4]" } },
  { "bias_add_rank1", "bias_add", { { { 4 } }, { { 4 } } }, nil, "NPU_ERR_SHAPE", { "bias_add", "[4]", "rank" } },
  { "bias_add_bias_rank", "bias_add", { { { 2, 4 } }, { { 1, 4 } } }, nil, "NPU_ERR_SHAPE", { "bias_add", "[1,4]" } },
  { "bias_add_nchw", "bias_add", { { { 2, 4 } }, { { 4 } } }, { data_format = "NCHW" }, "NPU_ERR_UNSUPPORTED", { "bias_add", "NCHW" } },
  { "bias_add_format", "bias_add", { { { 2, 4 } }, { { 4 } } }, { data_format = "HWCN" }, "NPU_ERR_ARG", { "HWCN", "NHWC" } },
  { "bias_add_int", "bias_add", { { { 2, 4 }, "int32" }, { { 4 }, "int32" } }, nil, "NPU_ERR_DTYPE", { "bias_add", "int32" } },
  { "softmax_axis", "softmax", { { { 2, 4 } } }, { axis = 0 }, "NPU_ERR_UNSUPPORTED", { "softmax", "axis", "[2,4]" } },
  { "softmax_axis_range", "softmax", { { { 2, 4 } } }, { axis = 2 }, "NPU_ERR_ARG", { "softmax", "axis 2" } },
  { "softmax_int", "softmax", { { { 2, 4 }, "int32" } }, nil, "NPU_ERR_DTYPE", { "softmax", "int32" } },
  { "softmax_scalar", "softmax", { { {} } }, nil, "NPU_ERR_SHAPE", { "softmax", "[]" } },
  { "log_softmax_axis", "log_softmax", { { { 2, 3, 4 } } }, { axis = 1 }, "NPU_ERR_UNSUPPORTED", { "log_softmax", "[2,3,4]" } },
  { "conv2d_f64", "conv2d", { { { 1, 5, 5, 3 }, "float64" }, { { 3, 3, 3, 2 }, "float64" } }, { padding = "SAME" },
    "NPU_ERR_DTYPE", { "conv2d", "float64", "float32" } },
  { "conv2d_channels", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 4, 2 } } }, { padding = "SAME" },
    "NPU_ERR_SHAPE", { "conv2d", "[1,5,5,3]", "[3,3,4,2]" } },
  { "conv2d_rank", "conv2d", { { { 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "SAME" },
    "NPU_ERR_SHAPE", { "conv2d", "[5,5,3]", "[3,3,3,2]" } },
  { "conv2d_too_small", "conv2d", { { { 1, 2, 2, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "VALID" },
    "NPU_ERR_SHAPE", { "conv2d", "[1,2,2,3]", "[3,3,3,2]" } },
  { "conv2d_dilated_too_small", "conv2d", { { { 1, 4, 9, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "VALID", dilations = 2 },
    "NPU_ERR_SHAPE", { "conv2d", "[1,4,9,3]" } },
  { "conv2d_no_padding", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, nil, "NPU_ERR_ARG", { "conv2d", "padding", "SAME", "VALID" } },
  { "conv2d_bad_padding", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "FULL" },
    "NPU_ERR_ARG", { "conv2d", "FULL", "SAME", "VALID", "EXPLICIT" } },
  { "conv2d_stride0", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "SAME", strides = { 1, 0, 1, 1 } },
    "NPU_ERR_ARG", { "conv2d", "strides" } },
  { "conv2d_stride_batch", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "SAME", strides = { 2, 1, 1, 1 } },
    "NPU_ERR_ARG", { "conv2d", "strides", "batch" } },
  { "conv2d_stride_len3", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "SAME", strides = { 1, 1, 1 } },
    "NPU_ERR_ARG", { "conv2d", "strides", "3 entries" } },
  { "conv2d_dilation_channel", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "SAME", dilations = { 1, 2, 2, 2 } },
    "NPU_ERR_ARG", { "conv2d", "dilations" } },
  { "conv2d_nchw", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "SAME", data_format = "NCHW" },
    "NPU_ERR_UNSUPPORTED", { "conv2d", "NCHW" } },
  { "conv2d_explicit_missing", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "EXPLICIT" },
    "NPU_ERR_ARG", { "conv2d", "explicit_paddings" } },
  { "conv2d_explicit_batch", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } },
    { padding = "EXPLICIT", explicit_paddings = { 1, 0, 1, 1, 1, 1, 0, 0 } }, "NPU_ERR_ARG", { "conv2d", "explicit_paddings" } },
  { "conv2d_explicit_negative", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } },
    { padding = "EXPLICIT", explicit_paddings = { 0, 0, -1, 1, 1, 1, 0, 0 } }, "NPU_ERR_ARG", { "conv2d", "negative" } },
  { "conv2d_explicit_without_mode", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } },
    { padding = "SAME", explicit_paddings = { 0, 0, 1, 1, 1, 1, 0, 0 } }, "NPU_ERR_ARG", { "conv2d", "EXPLICIT" } },
  { "conv2d_strides_type", "conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 2 } } }, { padding = "SAME", strides = "2" },
    "NPU_ERR_ARG", { "conv2d", "strides" } },
  { "depthwise_channels", "depthwise_conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 2, 2 } } }, { padding = "SAME" },
    "NPU_ERR_SHAPE", { "depthwise_conv2d", "[1,5,5,3]", "[3,3,2,2]" } },
  { "depthwise_f64", "depthwise_conv2d", { { { 1, 5, 5, 3 }, "float64" }, { { 3, 3, 3, 1 }, "float64" } }, { padding = "SAME" },
    "NPU_ERR_DTYPE", { "depthwise_conv2d", "float64" } },
  { "depthwise_bad_padding", "depthwise_conv2d", { { { 1, 5, 5, 3 } }, { { 3, 3, 3, 1 } } }, { padding = "same" },
    "NPU_ERR_ARG", { "depthwise_conv2d", "same", "SAME" } },
  { "depthwise_too_small", "depthwise_conv2d", { { { 1, 2, 5, 3 } }, { { 3, 3, 3, 1 } } }, { padding = "VALID" },
    "NPU_ERR_SHAPE", { "depthwise_conv2d", "[1,2,5,3]" } },
  { "max_pool_no_ksize", "max_pool", { { { 1, 4, 4, 1 } } }, { padding = "VALID" }, "NPU_ERR_ARG", { "max_pool", "ksize" } },
  { "max_pool_explicit", "max_pool", { { { 1, 4, 4, 1 } } }, { ksize = 2, padding = "EXPLICIT" },
    "NPU_ERR_ARG", { "max_pool", "EXPLICIT", "SAME", "VALID" } },
  { "max_pool_rank", "max_pool", { { { 4, 4, 1 } } }, { ksize = 2, padding = "VALID" }, "NPU_ERR_SHAPE", { "max_pool", "[4,4,1]" } },
  { "max_pool_ksize_channel", "max_pool", { { { 1, 4, 4, 2 } } }, { ksize = { 1, 2, 2, 2 }, padding = "VALID" },
    "NPU_ERR_ARG", { "max_pool", "ksize" } },
  { "max_pool_too_small", "max_pool", { { { 1, 2, 2, 1 } } }, { ksize = 3, padding = "VALID" }, "NPU_ERR_SHAPE", { "max_pool", "[1,2,2,1]" } },
  { "avg_pool_int", "avg_pool", { { { 1, 4, 4, 1 }, "int32" } }, { ksize = 2, padding = "VALID" }, "NPU_ERR_DTYPE", { "avg_pool", "int32" } },
  { "avg_pool_stride0", "avg_pool", { { { 1, 4, 4, 1 } } }, { ksize = 2, strides = 0, padding = "VALID" }, "NPU_ERR_ARG", { "avg_pool", "strides" } },
  { "avg_pool_nchw", "avg_pool", { { { 1, 4, 4, 1 } } }, { ksize = 2, padding = "VALID", data_format = "NCHW" },
    "NPU_ERR_UNSUPPORTED", { "avg_pool", "NCHW" } },
  { "reshape_count", "reshape", { { { 2, 3 } } }, { shape = { 4, 2 } }, "NPU_ERR_SHAPE", { "reshape", "[2,3]", "[4,2]" } },
  { "reshape_infer", "reshape", { { { 2, 3 } } }, { shape = { 4, -1 } }, "NPU_ERR_SHAPE", { "reshape", "[2,3]", "[4,-1]" } },
  { "reshape_two_unknown", "reshape", { { { 2, 3 } } }, { shape = { -1, -1 } }, "NPU_ERR_SHAPE", { "reshape", "-1" } },
  { "reshape_negative", "reshape", { { { 2, 3 } } }, { shape = { -2, -3 } }, "NPU_ERR_SHAPE", { "reshape", "-2" } },
  { "reshape_partial", "reshape", { { { -1, 3 } } }, { shape = { 4, 5 } }, "NPU_ERR_SHAPE", { "reshape", "[-1,3]", "[4,5]" } },
  { "reshape_missing", "reshape", { { { 2, 3 } } }, nil, "NPU_ERR_ARG", { "reshape", "shape" } },
  { "transpose_not_perm", "transpose", { { { 2, 3 } } }, { perm = { 0, 0 } }, "NPU_ERR_ARG", { "transpose", "perm", "[0,0]" } },
  { "transpose_out_of_range", "transpose", { { { 2, 3 } } }, { perm = { 0, 2 } }, "NPU_ERR_ARG", { "transpose", "[0,2]" } },
  { "transpose_len", "transpose", { { { 2, 3, 4 } } }, { perm = { 1, 0 } }, "NPU_ERR_SHAPE", { "transpose", "[1,0]", "[2,3,4]" } },
  { "concat_dims", "concat", { { { 2, 3 } }, { { 3, 3 } } }, { axis = 1 }, "NPU_ERR_SHAPE", { "concat", "[2,3]", "[3,3]" } },
  { "concat_rank", "concat", { { { 2, 3 } }, { { 2, 3, 1 } } }, { axis = 0 }, "NPU_ERR_SHAPE", { "concat", "[2,3]", "[2,3,1]" } },
  { "concat_dtype", "concat", { { { 2, 3 } }, { { 2, 3 }, "int32" } }, { axis = 0 }, "NPU_ERR_DTYPE", { "concat", "int32" } },
  { "concat_axis", "concat", { { { 2, 3 } }, { { 2, 3 } } }, { axis = 2 }, "NPU_ERR_ARG", { "concat", "axis 2" } },
  { "concat_no_axis", "concat", { { { 2, 3 } }, { { 2, 3 } } }, nil, "NPU_ERR_ARG", { "concat", "axis" } },
  { "concat_scalars", "concat", { { {} }, { {} } }, { axis = 0 }, "NPU_ERR_SHAPE", { "concat", "scalar" } },
  { "slice_bounds", "slice", { { { 4, 5 } } }, { begin = { 1, 2 }, size = { 2, 4 } }, "NPU_ERR_SHAPE", { "slice", "[1,2]", "[2,4]", "[4,5]" } },
  { "slice_begin", "slice", { { { 4, 5 } } }, { begin = { 5, 0 }, size = { -1, -1 } }, "NPU_ERR_SHAPE", { "slice", "[5,0]", "[4,5]" } },
  { "slice_len", "slice", { { { 4, 5 } } }, { begin = { 1 }, size = { 1, 1 } }, "NPU_ERR_ARG", { "slice", "[1]", "[1,1]" } },
  { "slice_rank", "slice", { { { 4, 5 } } }, { begin = { 0, 0, 0 }, size = { 1, 1, 1 } }, "NPU_ERR_SHAPE", { "slice", "[4,5]" } },
  { "slice_negative", "slice", { { { 4, 5 } } }, { begin = { -1, 0 }, size = { 1, 1 } }, "NPU_ERR_ARG", { "slice", "[-1,0]" } },
  { "pad_odd", "pad", { { { 2, 3 } } }, { paddings = { 1, 1, 1 } }, "NPU_ERR_ARG", { "pad", "paddings" } },
  { "pad_rank", "pad", { { { 2, 3 } } }, { paddings = { 1, 1 } }, "NPU_ERR_SHAPE", { "pad", "[2,3]" } },
  { "pad_negative", "pad", { { { 2, 3 } } }, { paddings = { 1, -1, 0, 0 } }, "NPU_ERR_ARG", { "pad", ">= 0" } },
  { "pad_reflect", "pad", { { { 2, 3 } } }, { paddings = { 2, 0, 0, 0 }, mode = "REFLECT" }, "NPU_ERR_SHAPE", { "pad", "REFLECT", "[2,3]" } },
  { "pad_symmetric", "pad", { { { 2, 3 } } }, { paddings = { 0, 0, 0, 4 }, mode = "SYMMETRIC" }, "NPU_ERR_SHAPE", { "pad", "SYMMETRIC" } },
  { "pad_mode", "pad", { { { 2, 3 } } }, { paddings = { 0, 0, 0, 1 }, mode = "WRAP" }, "NPU_ERR_ARG", { "pad", "WRAP", "REFLECT" } },
  { "pad_value_mode", "pad", { { { 2, 3 } } }, { paddings = { 0, 0, 0, 1 }, mode = "REFLECT", constant_values = 1 },
    "NPU_ERR_ARG", { "pad", "constant_values" } },
  { "pad_missing", "pad", { { { 2, 3 } } }, nil, "NPU_ERR_ARG", { "pad", "paddings" } },
  { "cast_unknown", "cast", { { { 2 } } }, { dtype = "float128" }, "NPU_ERR_DTYPE", { "cast", "float128" } },
  { "cast_missing", "cast", { { { 2 } } }, nil, "NPU_ERR_ARG", { "cast", "dtype" } },
  { "reduce_sum_dup", "reduce_sum", { { { 2, 3 } } }, { axis = { 1, -1 } }, "NPU_ERR_ARG", { "reduce_sum", "twice" } },
  { "reduce_mean_range", "reduce_mean", { { { 2, 3 } } }, { axis = 2 }, "NPU_ERR_ARG", { "reduce_mean", "axis 2" } },
  { "reduce_max_bool", "reduce_max", { { { 2, 3 }, "bool" } }, nil, "NPU_ERR_DTYPE", { "reduce_max", "bool" } },
  { "reduce_sum_keepdims", "reduce_sum", { { { 2, 3 } } }, { keepdims = "yes" }, "NPU_ERR_ARG", { "reduce_sum", "keepdims" } },
  { "argmax_range", "argmax", { { { 2, 3 } } }, { axis = -3 }, "NPU_ERR_ARG", { "argmax", "axis -3" } },
  { "argmax_output_type", "argmax", { { { 2, 3 } } }, { output_type = "float32" }, "NPU_ERR_DTYPE", { "argmax", "output_type" } },
  { "argmax_empty", "argmax", { { { 2, 0 } } }, { axis = 1 }, "NPU_ERR_SHAPE", { "argmax", "[2,0]" } },
  { "argmax_scalar", "argmax", { { {} } }, nil, "NPU_ERR_ARG", { "argmax" } },
  { "reshape_shape_twice", "reshape", { { { 2, 3 } }, { { 2 }, "int32" } }, { shape = { 3, 2 } },
    "NPU_ERR_ARG", { "reshape", "shape", "input 2" } },
  { "reshape_shape_input_float", "reshape", { { { 2, 3 } }, { { 2 } } }, nil, "NPU_ERR_DTYPE", { "reshape", "float32", "int32" } },
  { "reshape_shape_input_rank", "reshape", { { { 2, 3 } }, { { 2, 1 }, "int64" } }, nil, "NPU_ERR_SHAPE", { "reshape", "[2,1]" } },
}

TestOpsErrors = {}
for _, c in ipairs(error_cases) do
  local name, op, ins, attrs, code, parts = c[1], c[2], c[3], c[4], c[5], c[6]
  TestOpsErrors["test_" .. name] = function()
    local g = npu.Graph()
    local phs = {}
    for k, spec in ipairs(ins) do phs[k] = g:placeholder(spec[2] or F32, spec[1], "x" .. k) end
    local msg = assert_error(function() g:op(op, phs, attrs, "culprit") end, code, parts)
    lu.assertStrContains(tostring(msg), "'culprit'") -- the node, by the name it was to get
    -- a failing add leaves the graph as it was: the same op with good inputs still works
    lu.assertEquals(g:n_nodes(), #ins, msg)
  end
end

-- Errors reached only at run time: feeds whose shapes break the op.
function TestOpsErrors.test_conv2d_fed_shape_mismatch()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1, -1, -1, -1 }, "x")
  local w = g:const(npu.tensor(nest(rand_data(5, { 3, 3, 3, 2 }), { 3, 3, 3, 2 }), F32))
  local y = g:op("conv2d", { x, w }, { padding = "VALID" })
  local sess = npu.Session { graph = g }
  local bad = npu.tensor(nest(rand_data(6, { 1, 5, 5, 4 }), { 1, 5, 5, 4 }), F32)
  assert_error(function() sess:run(y, { [x] = bad }) end, "NPU_ERR_SHAPE", { "conv2d", "[1,5,5,4]" })
  local small = npu.tensor(nest(rand_data(7, { 1, 2, 2, 3 }), { 1, 2, 2, 3 }), F32)
  assert_error(function() sess:run(y, { [x] = small }) end, "NPU_ERR_SHAPE", { "conv2d", "[1,2,2,3]" })
  close_session(sess)
end

function TestOpsErrors.test_reshape_fed_count_mismatch()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1, 3 }, "x")
  local y = npu.reshape(x, { 2, -1, 2 })
  local sess = npu.Session { graph = g }
  local out = sess:run(y, { [x] = npu.tensor(nest(rand_data(8, { 4, 3 }), { 4, 3 }), F32) })
  lu.assertEquals(out:shape(), { 2, 3, 2 })
  assert_error(function()
    sess:run(y, { [x] = npu.tensor(nest(rand_data(9, { 3, 3 }), { 3, 3 }), F32) })
  end, "NPU_ERR_SHAPE", { "reshape", "[3,3]" })
  close_session(sess)
end

-- reshape's shape as an optional second input (TF computes it at run time): a known value is
-- used exactly as the attribute; an unknown one leaves every dim -1, its length the rank.
TestOpsReshapeInput = {}

function TestOpsReshapeInput.test_const_shape_input()
  for _, dt in ipairs({ "int32", "int64" }) do
    local g = npu.Graph()
    local x = g:placeholder(F32, { 2, 3 }, "x")
    local y = g:op("reshape", { x, g:const(npu.tensor({ 3, 2 }, dt)) })
    lu.assertEquals(y:shape(), { 3, 2 })
    local z = g:op("reshape", { x, g:const(npu.tensor({ -1, 1, 2 }, dt)) })
    lu.assertEquals(z:shape(), { 3, 1, 2 })
    local data = rand_data(11, { 2, 3 })
    local sess = npu.Session { graph = g }
    local out = sess:run(y, { [x] = npu.tensor(nest(data, { 2, 3 }), F32) })
    lu.assertEquals(out:shape(), { 3, 2 })
    assert_close(flatten(out:totable()), data, 0, 0, "reshape by a const shape input, " .. dt)
    close_session(sess)
  end
end

function TestOpsReshapeInput.test_method_spelling()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 4, 6 }, "x")
  lu.assertEquals(npu.reshape(x, g:const(npu.tensor({ 6, -1 }, "int32"))):shape(), { 6, 4 })
  lu.assertEquals(npu.reshape(x, { 2, 12 }):shape(), { 2, 12 }) -- the attribute still works
end

function TestOpsReshapeInput.test_unknown_shape_input()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 2, 3 }, "x")
  lu.assertEquals(g:op("reshape", { x, g:placeholder("int32", { 3 }, "s") }):shape(), { -1, -1, -1 })
  lu.assertEquals(g:op("reshape", { x, g:placeholder("int64", { -1 }, "t") }):shape(), nil)
end

-- TF's pattern: the shape computed from another value's shape, known once the feeds are.
function TestOpsReshapeInput.test_shape_from_shape_op()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1, 3 }, "x")
  local f = g:placeholder(F32, { -1 }, "f")
  local y = g:op("reshape", { f, g:op("shape", { x }) })
  lu.assertEquals(y:shape(), { -1, -1 })
  local p = g:placeholder("int32", { 2 }, "p")
  local z = g:op("reshape", { f, p }, nil, "fed")
  local sess = npu.Session { graph = g }
  local data = rand_data(12, { 6 })
  local out = sess:run(y, { [x] = npu.tensor(nest(rand_data(13, { 2, 3 }), { 2, 3 }), F32),
                            [f] = npu.tensor(data, F32) })
  lu.assertEquals(out:shape(), { 2, 3 })
  assert_close(flatten(out:totable()), data, 0, 0, "reshape by a Shape op")
  -- a shape only the run knows: the step is shaped when it runs (docs/dynamic.md)
  local fed = sess:run(z, { [p] = npu.tensor({ 2, 3 }, "int32"), [f] = npu.tensor(data, F32) })
  lu.assertEquals(fed:shape(), { 2, 3 })
  assert_close(flatten(fed:totable()), data, 0, 0, "reshape by a fed shape")
  fed = sess:run(z, { [p] = npu.tensor({ 3, 2 }, "int32"), [f] = npu.tensor(data, F32) })
  lu.assertEquals(fed:shape(), { 3, 2 })
  assert_error(function()
    sess:run(z, { [p] = npu.tensor({ 4, 2 }, "int32"), [f] = npu.tensor(data, F32) })
  end, "NPU_ERR_SHAPE", { "reshape", "'fed'" })
  close_session(sess)
end

function TestOpsReshapeInput.test_const_shape_errors()
  local function add(values, dt)
    local g = npu.Graph()
    local x = g:placeholder(F32, { 2, 3 }, "x")
    local s = g:const(npu.tensor(values, dt or "int32"))
    return function() g:op("reshape", { x, s }, nil, "culprit") end
  end
  assert_error(add({ 4, 2 }), "NPU_ERR_SHAPE", { "reshape", "'culprit'", "[2,3]", "[4,2]" })
  assert_error(add({ -1, -1 }, "int64"), "NPU_ERR_SHAPE", { "reshape", "more than one -1" })
  assert_error(add({ 3, -2 }), "NPU_ERR_SHAPE", { "reshape", "-2" })
end

-- ------------------------------------------------------------------------------------------
-- The Lua spellings: positional .args, method style, trailing options
-- ------------------------------------------------------------------------------------------

TestOpsApi = {}

function TestOpsApi.test_positional_args()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 2, 3, 4 }, "x")
  local b = g:placeholder(F32, { 2, 3, 4 }, "b")
  lu.assertEquals(npu.reshape(x, { 4, 6 }):shape(), { 4, 6 })
  lu.assertEquals(npu.transpose(x, { 2, 0, 1 }):shape(), { 4, 2, 3 })
  lu.assertEquals(npu.transpose(x):shape(), { 4, 3, 2 })
  lu.assertEquals(npu.concat({ x, b }, 1):shape(), { 2, 6, 4 })
  lu.assertEquals(npu.slice(x, { 0, 1, 1 }, { 1, -1, 2 }):shape(), { 1, 2, 2 })
  lu.assertEquals(npu.pad(x, { { 1, 1 }, { 0, 0 }, { 2, 2 } }):shape(), { 4, 3, 8 })
  lu.assertEquals(npu.pad(x, { { 1, 1 }, { 0, 0 }, { 2, 2 } }, { mode = "SYMMETRIC" }):shape(), { 4, 3, 8 })
  lu.assertEquals(npu.cast(x, "int32"):dtype(), "int32")
  lu.assertEquals(npu.reduce_sum(x, { 1 }, true):shape(), { 2, 1, 4 })
  lu.assertEquals(npu.reduce_mean(x, -1):shape(), { 2, 3 })
  lu.assertEquals(npu.reduce_max(x):shape(), {})
  lu.assertEquals(npu.reduce_max(x, nil, true):shape(), { 1, 1, 1 })
  lu.assertEquals(npu.argmax(x, 2):shape(), { 2, 3 })
  lu.assertEquals(npu.argmax(x, 2, { output_type = "int32" }):dtype(), "int32")
end

function TestOpsApi.test_method_style_and_options()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 1, 8, 8, 3 }, "x")
  local w = g:placeholder(F32, { 3, 3, 3, 4 }, "w")
  lu.assertEquals(x:conv2d(w, { strides = { 1, 2, 2, 1 }, padding = "SAME" }):shape(), { 1, 4, 4, 4 })
  lu.assertEquals(npu.conv2d(x, w, { padding = "VALID" }):shape(), { 1, 6, 6, 4 })
  lu.assertEquals(x:max_pool({ ksize = 2, strides = 2, padding = "VALID" }):shape(), { 1, 4, 4, 3 })
  lu.assertEquals(x:reshape({ -1 }):shape(), { 192 })
  lu.assertEquals(x:reduce_sum({ 1, 2 }):shape(), { 1, 3 })
  local named = x:sigmoid({ name = "probs" })
  lu.assertStrContains(named:name(), "probs")
end

-- The op table carries each op's precision list as its file states it.
function TestOpsApi.test_precision_lists()
  local want = {
    conv2d = "trust", depthwise_conv2d = "trust", matmul = "trust",
    exp = "block", log = "block", sqrt = "block", softmax = "block", log_softmax = "block",
    reduce_sum = "block", reduce_mean = "block",
    sub = "gray", mul = "gray", div = "gray", maximum = "gray", minimum = "gray", neg = "gray",
    relu6 = "gray", sigmoid = "gray", tanh = "gray", square = "gray", bias_add = "gray",
    max_pool = "gray", avg_pool = "gray", reshape = "gray", transpose = "gray", concat = "gray",
    slice = "gray", pad = "gray", cast = "gray", reduce_max = "gray", argmax = "gray",
  }
  for name, list in pairs(want) do
    lu.assertNotNil(npu.ops[name], name)
    lu.assertEquals(npu.ops[name].precision_list, list, name)
  end
end

-- TensorFlow's op types are the import keys.
function TestOpsApi.test_tf_types()
  local want = {
    sub = "Sub", mul = "Mul", div = "RealDiv", maximum = "Maximum", minimum = "Minimum",
    neg = "Neg", relu6 = "Relu6", sigmoid = "Sigmoid", tanh = "Tanh", exp = "Exp", log = "Log",
    sqrt = "Sqrt", square = "Square", bias_add = "BiasAdd", softmax = "Softmax",
    log_softmax = "LogSoftmax", conv2d = "Conv2D", depthwise_conv2d = "DepthwiseConv2dNative",
    max_pool = "MaxPool", avg_pool = "AvgPool", reshape = "Reshape", transpose = "Transpose",
    concat = "ConcatV2", slice = "Slice", pad = "Pad", cast = "Cast", reduce_sum = "Sum",
    reduce_mean = "Mean", reduce_max = "Max", argmax = "ArgMax",
  }
  for name, tf in pairs(want) do lu.assertEquals(npu.ops[name].tf_type, tf, name) end
end

-- Numerics the naive oracle above does not reach.
function TestOpsApi.test_special_values()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 6 }, "x")
  local sess = npu.Session { graph = g }
  local big = npu.tensor({ -1000, -20, 0, 20, 1000, 88 }, F32)
  local s = flatten(sess:run(npu.sigmoid(x), { [x] = big }):totable())
  assert_close(s, { 0, 1 / (1 + math.exp(20)), 0.5, 1 / (1 + math.exp(-20)), 1, 1 }, 1e-6, 1e-30, "sigmoid")
  local sm = flatten(sess:run(npu.softmax(x), { [x] = big }):totable())
  assert_close(sm, { 0, 0, 0, 0, 1, 0 }, 1e-6, 1e-30, "softmax of large logits")
  local ls = flatten(sess:run(npu.log_softmax(x), { [x] = big }):totable())
  assert_close({ ls[5], ls[6] }, { 0, -912 }, 1e-6, 1e-4, "log_softmax of large logits")
  local r6 = flatten(sess:run(npu.relu6(x), { [x] = big }):totable())
  assert_close(r6, { 0, 0, 0, 6, 6, 6 }, 0, 0, "relu6")
  close_session(sess)
end
