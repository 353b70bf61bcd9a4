-- spec/ops3_spec.lua — the math, comparison and image ops (the `/* math, comparisons, image */`
-- block of csrc/ops/ops.def): prelu, leaky_relu, pow, squared_difference, floor_div,
-- floor_mod, atan2, abs, rsqrt, sin, cos, reciprocal, sign, the comparisons, logical_and /
-- or / not, select, select_v2, reduce_min, reduce_prod, reduce_any, argmin, add_n,
-- batch_matmul, conv2d_backprop_input, resize_bilinear, resize_nearest_neighbor.
--
-- Table-driven like ops_spec.lua: forward values against results computed independently here
-- in plain Lua, on the device path and on the host reference path (use_off_line = false),
-- which must also agree with each other; shape inference with unknown dims and ranks; errors
-- whose messages carry the status code, the op and the shapes.  conv2d_backprop_input is
-- checked by naive loops and as the adjoint of conv2d (<conv2d(x, w), dy> == <x,
-- conv2d_backprop_input(shape(x), w, dy)>), with input_sizes as an attribute and as
-- TensorFlow's first const input.  The resize ops follow TensorFlow's float arithmetic, which
-- the naive loops here reproduce exactly by rounding each operation to float32.
--
-- Defines global test tables TestOps3*; spec/run.lua runs LuaUnit.
local lu = require("luaunit")
local npu = require("npu")

local F32, F64, I32, I64, BOOL = "float32", "float64", "int32", "int64", "bool"

local S = dofile(SPEC_DIR .. "/support.lua")
local lcg, numel, nest, flatten, strides_of, unravel, offset, copy, as_number, seed_of =
  S.lcg, S.numel, S.nest, S.flatten, S.strides_of, S.unravel, S.offset, S.copy, S.as_number,
  S.seed_of

-- ------------------------------------------------------------------------------------------
-- Helpers
-- ------------------------------------------------------------------------------------------

local rand_data, assert_close, assert_error = S.rand_data, S.assert_allclose, S.assert_error

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

local function close(s) if s.close then s:close() end end

local function flat_of(t)
  local v = t:totable()
  if type(v) ~= "table" then return { v } end
  return flatten(v)
end

-- NumPy broadcasting of any number of flat arrays: f(a, b, ...) per output element.
local function broadcast(list, f)
  local nd = 0
  for _, x in ipairs(list) do nd = math.max(nd, #x.shape) end
  local oshape = {}
  for i = 1, nd do
    local d = 1
    for _, x in ipairs(list) do
      local k = x.shape[i - (nd - #x.shape)]
      if k and k ~= 1 then d = k end
    end
    oshape[i] = d
  end
  local out = {}
  for lin = 0, numel(oshape) - 1 do
    local idx = unravel(lin, oshape)
    local args = {}
    for j, x in ipairs(list) do
      local st, o = strides_of(x.shape), 0
      for i = 1, nd do
        local ix = i - (nd - #x.shape)
        if ix >= 1 and x.shape[ix] ~= 1 then o = o + idx[i] * st[ix] end
      end
      args[j] = x.data[o + 1]
    end
    out[lin + 1] = f(table.unpack(args))
  end
  return out, oshape
end

local function map(x, f)
  local out = {}
  for i, v in ipairs(x.data) do out[i] = f(v) end
  return out, copy(x.shape)
end

-- reduce x over axes (0-based list, nil = all)
local function reduce(x, axes, keepdims, init, f)
  local nd = #x.shape
  local red = {}
  if axes == nil then for d = 0, nd - 1 do red[d] = true end
  else for _, a in ipairs(axes) do red[a < 0 and a + nd or a] = true end end
  local oshape, kshape = {}, {}
  for d = 0, nd - 1 do
    if red[d] then
      if keepdims then oshape[#oshape + 1] = 1 end
    else
      oshape[#oshape + 1] = x.shape[d + 1]
      kshape[#kshape + 1] = x.shape[d + 1]
    end
  end
  local out = {}
  for i = 1, numel(kshape) do out[i] = init end
  local kst = strides_of(kshape)
  for lin = 0, numel(x.shape) - 1 do
    local idx = unravel(lin, x.shape)
    local k, o = 0, 0
    for d = 0, nd - 1 do
      if not red[d] then k = k + 1; o = o + idx[d + 1] * kst[k] end
    end
    out[o + 1] = f(out[o + 1], x.data[lin + 1])
  end
  return out, oshape
end

-- ------------------------------------------------------------------------------------------
-- Naive references: batch matmul, conv2d and its input gradient, resizes
-- ------------------------------------------------------------------------------------------

local function batch_matmul(a, b, adj_x, adj_y)
  local ra, rb = #a.shape, #b.shape
  local m = adj_x and a.shape[ra] or a.shape[ra - 1]
  local k = adj_x and a.shape[ra - 1] or a.shape[ra]
  local n = adj_y and b.shape[rb - 1] or b.shape[rb]
  local ab, bb = { shape = {} }, { shape = {} }
  for d = 1, ra - 2 do ab.shape[d] = a.shape[d] end
  for d = 1, rb - 2 do bb.shape[d] = b.shape[d] end
  local nb = math.max(#ab.shape, #bb.shape)
  local bshape = {}
  for i = 1, nb do
    local da, db = ab.shape[i - (nb - #ab.shape)] or 1, bb.shape[i - (nb - #bb.shape)] or 1
    bshape[i] = da == 1 and db or da
  end
  local out = {}
  local sa, sb = m * k, k * n
  for bi = 0, numel(bshape) - 1 do
    local idx = unravel(bi, bshape)
    local oa, ob = 0, 0
    local sta, stb = strides_of(ab.shape), strides_of(bb.shape)
    for i = 1, nb do
      local ia, ib = i - (nb - #ab.shape), i - (nb - #bb.shape)
      if ia >= 1 and ab.shape[ia] ~= 1 then oa = oa + idx[i] * sta[ia] end
      if ib >= 1 and bb.shape[ib] ~= 1 then ob = ob + idx[i] * stb[ib] end
    end
    for i = 0, m - 1 do
      for j = 0, n - 1 do
        local s = 0
        for p = 0, k - 1 do
          local av = adj_x and a.data[oa * sa + p * m + i + 1] or a.data[oa * sa + i * k + p + 1]
          local bv = adj_y and b.data[ob * sb + j * k + p + 1] or b.data[ob * sb + p * n + j + 1]
          s = s + av * bv
        end
        out[#out + 1] = s
      end
    end
  end
  local oshape = copy(bshape)
  oshape[#oshape + 1] = m
  oshape[#oshape + 1] = n
  return out, oshape
end

-- TensorFlow's SAME/VALID rule: output size and padding before.
local function window_dim(n, k, stride, dilation, padding)
  local eff = (k - 1) * dilation + 1
  if padding == "SAME" then
    local out = (n + stride - 1) // stride
    local total = math.max((out - 1) * stride + eff - n, 0)
    return out, total // 2
  end
  return (n - eff + stride) // stride, 0
end

local function hw(v)
  if v == nil then return 1, 1 end
  if type(v) == "number" then return v, v end
  if #v == 4 then return v[2], v[3] end
  return v[1], v[2]
end

-- calls fn(n, oh, ow, ih, iw, kh, kw) for every tap of conv2d reading inside the input
local function conv_taps(xs, fs, attrs, fn)
  local sh, sw = hw(attrs.strides)
  local dh, dw = hw(attrs.dilations)
  local oh_n, pt = window_dim(xs[2], fs[1], sh, dh, attrs.padding)
  local ow_n, pl = window_dim(xs[3], fs[2], sw, dw, attrs.padding)
  for n = 0, xs[1] - 1 do
    for oh = 0, oh_n - 1 do
      for ow = 0, ow_n - 1 do
        for kh = 0, fs[1] - 1 do
          local ih = oh * sh - pt + kh * dh
          if ih >= 0 and ih < xs[2] then
            for kw = 0, fs[2] - 1 do
              local iw = ow * sw - pl + kw * dw
              if iw >= 0 and iw < xs[3] then fn(n, oh, ow, ih, iw, kh, kw) end
            end
          end
        end
      end
    end
  end
  return oh_n, ow_n
end

local function conv2d_backprop_input(xs, f, fs, dy, attrs)
  local c, oc = fs[3], fs[4]
  local out = {}
  for i = 1, numel(xs) do out[i] = 0 end
  local sh, sw = hw(attrs.strides)
  local dh, dw = hw(attrs.dilations)
  local oh_n = window_dim(xs[2], fs[1], sh, dh, attrs.padding)
  local ow_n = window_dim(xs[3], fs[2], sw, dw, attrs.padding)
  conv_taps(xs, fs, attrs, function(n, oh, ow, ih, iw, kh, kw)
    for ci = 0, c - 1 do
      local s = 0
      for co = 0, oc - 1 do
        s = s + dy[((n * oh_n + oh) * ow_n + ow) * oc + co + 1] * f[((kh * fs[2] + kw) * c + ci) * oc + co + 1]
      end
      local o = ((n * xs[2] + ih) * xs[3] + iw) * c + ci + 1
      out[o] = out[o] + s
    end
  end)
  return out, copy(xs)
end

local function resize_scale(inn, out, align)
  if align and out > 1 then return f32((inn - 1) / (out - 1)) end
  return f32(inn / out)
end

local function bilinear_w(i, scale, inn, half)
  local src = half and f32(f32((i + 0.5) * scale) - 0.5) or f32(i * scale)
  local fl = math.floor(src)
  return math.max(fl, 0), math.min(math.ceil(src), inn - 1), f32(src - fl)
end

local function resize_bilinear(x, size, align, half)
  local n, ih, iw, c = table.unpack(x.shape)
  local oh, ow = size[1], size[2]
  local sh, sw = resize_scale(ih, oh, align), resize_scale(iw, ow, align)
  local out = {}
  local function at(b, yy, xx, ch) return x.data[((b * ih + yy) * iw + xx) * c + ch + 1] end
  for b = 0, n - 1 do
    for oy = 0, oh - 1 do
      local y0, y1, yl = bilinear_w(oy, sh, ih, half)
      for ox = 0, ow - 1 do
        local x0, x1, xl = bilinear_w(ox, sw, iw, half)
        for ch = 0, c - 1 do
          local tl, tr, bl, br = at(b, y0, x0, ch), at(b, y0, x1, ch), at(b, y1, x0, ch), at(b, y1, x1, ch)
          local top = f32(tl + f32(f32(tr - tl) * xl))
          local bottom = f32(bl + f32(f32(br - bl) * xl))
          out[#out + 1] = f32(top + f32(f32(bottom - top) * yl))
        end
      end
    end
  end
  return out, { n, oh, ow, c }
end

local function round_half_away(v) return v >= 0 and math.floor(v + 0.5) or -math.floor(-v + 0.5) end

local function nearest_i(i, scale, inn, align, half)
  local src = half and f32((i + 0.5) * scale) or f32(i * scale)
  local k = align and round_half_away(src) or math.floor(src)
  k = math.min(k, inn - 1)
  if half then k = math.max(k, 0) end
  return k
end

local function resize_nearest(x, size, align, half)
  local n, ih, iw, c = table.unpack(x.shape)
  local oh, ow = size[1], size[2]
  local sh, sw = resize_scale(ih, oh, align), resize_scale(iw, ow, align)
  local out = {}
  for b = 0, n - 1 do
    for oy = 0, oh - 1 do
      local yy = nearest_i(oy, sh, ih, align, half)
      for ox = 0, ow - 1 do
        local xx = nearest_i(ox, sw, iw, align, half)
        for ch = 0, c - 1 do out[#out + 1] = x.data[((b * ih + yy) * iw + xx) * c + ch + 1] end
      end
    end
  end
  return out, { n, oh, ow, c }
end

-- ------------------------------------------------------------------------------------------
-- Forward cases
-- ------------------------------------------------------------------------------------------

local function fdiv(a, b) return math.floor(a / b) end
local function fmod(a, b)
  if math.type(a) == "integer" then return a % b end
  local r = math.fmod(a, b)
  if r ~= 0 and ((r < 0) ~= (b < 0)) then r = r + b end
  return r
end
local function ipow(a, b)
  local r = 1
  for _ = 1, b do r = r * a end
  return r
end

local cases = {}
local function case(c) cases[#cases + 1] = c end

-- elementwise binary: { name, op, dtype, shape a, shape b, kind a, kind b, f, rtol }
local binary_cases = {
  { "pow_f32", "pow", F32, { 2, 3 }, { 3 }, "pos", "small", function(a, b) return a ^ b end, 1e-6 },
  { "pow_f64_scalar", "pow", F64, { 4 }, {}, "pos", "small", function(a, b) return a ^ b end, 1e-12 },
  { "pow_i32", "pow", I32, { 2, 4 }, { 4 }, "few", "pow", ipow },
  { "squared_difference_f32", "squared_difference", F32, { 2, 1, 3 }, { 4, 1 }, nil, nil,
    function(a, b) return (a - b) ^ 2 end },
  { "squared_difference_i64", "squared_difference", I64, { 5 }, { 5 }, "int", "int",
    function(a, b) return (a - b) * (a - b) end },
  { "floor_div_f32", "floor_div", F32, { 3, 4 }, { 4 }, nil, "nz", fdiv },
  { "floor_div_i32", "floor_div", I32, { 3, 4 }, { 3, 1 }, "int", "nz", function(a, b) return a // b end },
  { "floor_mod_f32", "floor_mod", F32, { 3, 4 }, { 4 }, nil, "nz", fmod },
  { "floor_mod_i64", "floor_mod", I64, { 2, 5 }, { 5 }, "int", "nz", function(a, b) return a % b end },
  { "atan2_f32", "atan2", F32, { 2, 3 }, { 2, 1 }, nil, nil, function(a, b) return math.atan(a, b) end, 1e-6 },
  { "atan2_f64", "atan2", F64, { 5 }, { 5 }, nil, nil, function(a, b) return math.atan(a, b) end, 1e-12 },
}
for _, b in ipairs(binary_cases) do
  local name, op, dt, sa, sb, ka, kb, f, rtol = table.unpack(b)
  if kb == "pow" then kb = nil end
  case {
    name = name, op = op,
    inputs = { { shape = sa, dtype = dt, kind = ka }, { shape = sb, dtype = dt, kind = b[7] == "pow" and "exp" or kb } },
    expect = function(x, y) return broadcast({ x, y }, f) end, rtol = rtol,
  }
end

local function sign(v) return v > 0 and 1 or v < 0 and -1 or 0 end
-- elementwise unary: { op, dtype, kind, f, rtol }
local unary_cases = {
  { "abs", F32, nil, math.abs }, { "abs", I32, "int", math.abs }, { "abs", I64, "int", math.abs },
  { "rsqrt", F32, "pos", function(v) return 1 / math.sqrt(v) end, 1e-6 },
  { "rsqrt", F64, "pos", function(v) return 1 / math.sqrt(v) end, 1e-12 },
  { "sin", F32, nil, math.sin, 1e-6 }, { "cos", F32, nil, math.cos, 1e-6 },
  { "sin", F64, nil, math.sin, 1e-12 }, { "cos", F64, nil, math.cos, 1e-12 },
  { "reciprocal", F32, "pos", function(v) return 1 / v end, 1e-6 },
  { "sign", F32, "few", sign }, { "sign", I32, "int", sign }, { "sign", I64, "few", sign },
}
for _, u in ipairs(unary_cases) do
  local op, dt, kind, f, rtol = table.unpack(u)
  case {
    name = op .. "_" .. dt, op = op, inputs = { { shape = { 3, 5 }, dtype = dt, kind = kind } },
    expect = function(x) return map(x, f) end, rtol = rtol,
  }
end

-- comparisons -> bool
local cmp_fn = {
  equal = function(a, b) return a == b end, not_equal = function(a, b) return a ~= b end,
  less = function(a, b) return a < b end, less_equal = function(a, b) return a <= b end,
  greater = function(a, b) return a > b end, greater_equal = function(a, b) return a >= b end,
}
for _, op in ipairs({ "equal", "not_equal", "less", "less_equal", "greater", "greater_equal" }) do
  for _, dt in ipairs({ F32, I32, I64, F64 }) do
    case {
      name = op .. "_" .. dt, op = op, out_dtype = BOOL,
      inputs = { { shape = { 3, 4 }, dtype = dt, kind = "few" }, { shape = { 4 }, dtype = dt, kind = "few" } },
      expect = function(x, y) return broadcast({ x, y }, cmp_fn[op]) end,
    }
  end
end
for _, op in ipairs({ "equal", "not_equal" }) do
  case {
    name = op .. "_bool", op = op, out_dtype = BOOL,
    inputs = { { shape = { 2, 3 }, dtype = BOOL, kind = "bool" }, { shape = { 2, 1 }, dtype = BOOL, kind = "bool" } },
    expect = function(x, y) return broadcast({ x, y }, cmp_fn[op]) end,
  }
end
case {
  name = "logical_and", op = "logical_and", out_dtype = BOOL,
  inputs = { { shape = { 3, 4 }, dtype = BOOL, kind = "bool" }, { shape = { 4 }, dtype = BOOL, kind = "bool" } },
  expect = function(x, y) return broadcast({ x, y }, function(a, b) return a and b end) end,
}
case {
  name = "logical_or", op = "logical_or", out_dtype = BOOL,
  inputs = { { shape = { 2, 1, 3 }, dtype = BOOL, kind = "bool" }, { shape = { 4, 1 }, dtype = BOOL, kind = "bool" } },
  expect = function(x, y) return broadcast({ x, y }, function(a, b) return a or b end) end,
}
case {
  name = "logical_not", op = "logical_not", out_dtype = BOOL,
  inputs = { { shape = { 7 }, dtype = BOOL, kind = "bool" } },
  expect = function(x) return map(x, function(v) return not v end) end,
}

-- select (TF1 rules) and select_v2 (broadcasting)
local function pick(c, a, b) if c then return a else return b end end
case {
  name = "select_same_shape", op = "select",
  inputs = { { shape = { 2, 3 }, dtype = BOOL, kind = "bool" }, { shape = { 2, 3 } }, { shape = { 2, 3 } } },
  expect = function(c, x, y) return broadcast({ c, x, y }, pick) end,
}
case {
  name = "select_rows", op = "select",
  inputs = { { shape = { 3 }, dtype = BOOL, kind = "bool" }, { shape = { 3, 2, 2 }, dtype = I32, kind = "int" },
             { shape = { 3, 2, 2 }, dtype = I32, kind = "int" } },
  expect = function(c, x, y)
    local out = {}
    for i = 1, 12 do out[i] = pick(c.data[(i - 1) // 4 + 1], x.data[i], y.data[i]) end
    return out, { 3, 2, 2 }
  end,
}
case {
  name = "select_scalar_cond", op = "select",
  inputs = { { shape = {}, dtype = BOOL, kind = "bool" }, { shape = { 4 }, dtype = F64 }, { shape = { 4 }, dtype = F64 } },
  expect = function(c, x, y) return broadcast({ c, x, y }, pick) end,
}
case {
  name = "select_vector", op = "select",
  inputs = { { shape = { 5 }, dtype = BOOL, kind = "bool" }, { shape = { 5 }, dtype = BOOL, kind = "bool" },
             { shape = { 5 }, dtype = BOOL, kind = "bool" } },
  expect = function(c, x, y) return broadcast({ c, x, y }, pick) end,
}
case {
  name = "select_v2_broadcast", op = "select_v2",
  inputs = { { shape = { 2, 1, 3 }, dtype = BOOL, kind = "bool" }, { shape = { 4, 1 } }, { shape = { 3 } } },
  expect = function(c, x, y) return broadcast({ c, x, y }, pick) end,
}
case {
  name = "select_v2_int64_scalar_cond", op = "select_v2",
  inputs = { { shape = {}, dtype = BOOL, kind = "bool" }, { shape = { 2, 2 }, dtype = I64, kind = "int" },
             { shape = { 1 }, dtype = I64, kind = "int" } },
  expect = function(c, x, y) return broadcast({ c, x, y }, pick) end,
}

-- reductions
local reduce_cases = {
  { "reduce_min", F32, { 3, 4, 2 }, { 1 }, false, math.huge, math.min },
  { "reduce_min", I32, { 3, 4 }, nil, false, math.maxinteger, math.min, "int" },
  { "reduce_min", F64, { 2, 3, 2 }, { 0, 2 }, true, math.huge, math.min },
  { "reduce_prod", F32, { 3, 4 }, { 1 }, false, 1, function(a, b) return a * b end, "small" },
  { "reduce_prod", I64, { 2, 3, 2 }, { -1 }, true, 1, function(a, b) return a * b end, "few" },
  { "reduce_prod", F64, { 3, 2 }, nil, false, 1, function(a, b) return a * b end },
  { "reduce_any", BOOL, { 3, 4 }, { 1 }, false, false, function(a, b) return a or b end, "bool" },
  { "reduce_any", BOOL, { 2, 3, 2 }, { 0, 2 }, true, false, function(a, b) return a or b end, "bool" },
  { "reduce_any", BOOL, { 4 }, nil, false, false, function(a, b) return a or b end, "bool" },
  { "reduce_any", BOOL, { 2, 0 }, { 1 }, false, false, function(a, b) return a or b end, "bool" },
}
for i, r in ipairs(reduce_cases) do
  local op, dt, shape, axes, keep, init, f, kind = table.unpack(r)
  case {
    name = ("%s_%d"):format(op, i), op = op, attrs = { axis = axes, keepdims = keep },
    inputs = { { shape = shape, dtype = dt, kind = kind } },
    expect = function(x) return reduce(x, axes, keep, init, f) end,
  }
end
local function argmin_ref(x, axis)
  local nd = #x.shape
  if axis < 0 then axis = axis + nd end
  local oshape = {}
  for d = 1, nd do if d ~= axis + 1 then oshape[#oshape + 1] = x.shape[d] end end
  local st = strides_of(x.shape)
  local out = {}
  for lin = 0, numel(oshape) - 1 do
    local oidx = unravel(lin, oshape)
    local idx, k = {}, 1
    for d = 1, nd do
      if d == axis + 1 then idx[d] = 0 else idx[d] = oidx[k]; k = k + 1 end
    end
    local best, bi = nil, 0
    for j = 0, x.shape[axis + 1] - 1 do
      idx[axis + 1] = j
      local v = x.data[offset(idx, st) + 1]
      if best == nil or v < best then best, bi = v, j end
    end
    out[lin + 1] = bi
  end
  return out, oshape
end
case { name = "argmin_axis1", op = "argmin", attrs = { axis = 1 }, out_dtype = I64,
  inputs = { { shape = { 3, 5, 2 }, kind = "few" } }, expect = function(x) return argmin_ref(x, 1) end }
case { name = "argmin_i32_out", op = "argmin", attrs = { axis = -1, output_type = "int32" }, out_dtype = I32,
  inputs = { { shape = { 4, 6 }, dtype = I32, kind = "few" } }, expect = function(x) return argmin_ref(x, -1) end }

-- add_n
case {
  name = "add_n_three", op = "add_n",
  inputs = { { shape = { 2, 3 } }, { shape = { 2, 3 } }, { shape = { 2, 3 } } },
  expect = function(a, b, c) return broadcast({ a, b, c }, function(p, q, r) return p + q + r end) end,
}
case {
  name = "add_n_one_i32", op = "add_n", inputs = { { shape = { 4 }, dtype = I32, kind = "int" } },
  expect = function(a) return copy(a.data), { 4 } end,
}
case {
  name = "add_n_five_f64", op = "add_n",
  inputs = { { shape = { 3 }, dtype = F64 }, { shape = { 3 }, dtype = F64 }, { shape = { 3 }, dtype = F64 },
             { shape = { 3 }, dtype = F64 }, { shape = { 3 }, dtype = F64 } },
  expect = function(...)
    return broadcast({ ... }, function(...) local s = 0; for _, v in ipairs({ ... }) do s = s + v end; return s end)
  end,
}

-- batch_matmul: { name, a shape, b shape, adj_x, adj_y, dtype }
local bmm_cases = {
  { "plain", { 2, 3, 4 }, { 2, 4, 5 }, false, false },
  { "adj_x", { 2, 4, 3 }, { 2, 4, 5 }, true, false },
  { "adj_y", { 2, 3, 4 }, { 2, 5, 4 }, false, true },
  { "adj_both_f64", { 3, 4, 2 }, { 3, 5, 4 }, true, true, F64 },
  { "broadcast_b", { 2, 3, 2, 4 }, { 4, 3 }, false, false },      -- folds into one product
  { "broadcast_batch", { 2, 1, 3, 4 }, { 3, 4, 2 }, false, false },
  { "broadcast_adj", { 1, 3, 4 }, { 2, 1, 2, 4 }, false, true },
  { "rank2", { 3, 4 }, { 4, 2 }, false, false },
  { "empty_k", { 2, 3, 0 }, { 2, 0, 2 }, false, false },
}
for _, b in ipairs(bmm_cases) do
  local name, sa, sb, ax, ay, dt = table.unpack(b)
  case {
    name = "batch_matmul_" .. name, op = "batch_matmul", attrs = { adj_x = ax, adj_y = ay },
    inputs = { { shape = sa, dtype = dt }, { shape = sb, dtype = dt } },
    expect = function(x, y) return batch_matmul(x, y, ax, ay) end,
  }
end

-- prelu and leaky_relu
case {
  name = "prelu_channels", op = "prelu",
  inputs = { { shape = { 1, 3, 3, 4 } }, { shape = { 1, 1, 4 }, kind = "small" } },
  expect = function(x, a) return broadcast({ x, a }, function(v, s) return v > 0 and v or s * v end) end,
}
case {
  name = "prelu_vector_f64", op = "prelu",
  inputs = { { shape = { 5, 3 }, dtype = F64 }, { shape = { 3 }, dtype = F64, kind = "small" } },
  expect = function(x, a) return broadcast({ x, a }, function(v, s) return v > 0 and v or s * v end) end,
}
case {
  name = "prelu_scalar_alpha", op = "prelu",
  inputs = { { shape = { 2, 6 } }, { shape = {}, kind = "small" } },
  expect = function(x, a) return broadcast({ x, a }, function(v, s) return v > 0 and v or s * v end) end,
}
case {
  name = "leaky_relu_default", op = "leaky_relu", inputs = { { shape = { 3, 4 } } },
  expect = function(x) return map(x, function(v) return v > 0 and v or f32(0.2) * v end) end,
}
case {
  name = "leaky_relu_alpha_f64", op = "leaky_relu", attrs = { alpha = 0.125 }, inputs = { { shape = { 6 }, dtype = F64 } },
  expect = function(x) return map(x, function(v) return v > 0 and v or 0.125 * v end) end,
}

-- conv2d_backprop_input: { name, x shape, filter shape, attrs }
local cbi_cases = {
  { "same_s1", { 1, 5, 5, 2 }, { 3, 3, 2, 3 }, { padding = "SAME" } },
  { "same_s2", { 2, 7, 6, 3 }, { 3, 3, 3, 4 }, { padding = "SAME", strides = 2 } },
  { "valid_s2", { 1, 8, 7, 2 }, { 2, 3, 2, 2 }, { padding = "VALID", strides = { 1, 2, 2, 1 } } },
  { "valid_dilated", { 1, 9, 9, 1 }, { 3, 3, 1, 2 }, { padding = "VALID", dilations = 2 } },
  { "same_s3_1x1", { 1, 7, 7, 3 }, { 1, 1, 3, 2 }, { padding = "SAME", strides = 3 } },
}
for _, cb in ipairs(cbi_cases) do
  local name, xs, fs, attrs = table.unpack(cb)
  local sh, sw = hw(attrs.strides)
  local dh, dw = hw(attrs.dilations)
  local oh = window_dim(xs[2], fs[1], sh, dh, attrs.padding)
  local ow = window_dim(xs[3], fs[2], sw, dw, attrs.padding)
  local a = copy(attrs)
  a.input_sizes = xs
  case {
    name = "conv2d_backprop_input_" .. name, op = "conv2d_backprop_input", attrs = a,
    inputs = { { shape = fs, kind = "small" }, { shape = { xs[1], oh, ow, fs[4] } } },
    expect = function(f, dy) return conv2d_backprop_input(xs, f.data, fs, dy.data, attrs) end,
    rtol = 1e-5, atol = 1e-5,
  }
end

-- resizes: { name, x shape, size, align_corners, half_pixel_centers }
local resize_cases = {
  { "up", { 1, 3, 4, 2 }, { 7, 9 }, false, false },
  { "up_align", { 2, 3, 4, 1 }, { 5, 7 }, true, false },
  { "up_half", { 1, 4, 3, 2 }, { 9, 8 }, false, true },
  { "down", { 1, 9, 8, 2 }, { 4, 3 }, false, false },
  { "down_half", { 1, 9, 8, 2 }, { 4, 3 }, false, true },
  { "down_align", { 1, 9, 8, 1 }, { 4, 3 }, true, false },
  { "to_one", { 1, 5, 5, 1 }, { 1, 1 }, true, false },
  { "odd_half", { 1, 5, 7, 3 }, { 3, 11 }, false, true },
}
for _, r in ipairs(resize_cases) do
  local name, xs, size, align, half = table.unpack(r)
  local attrs = { size = size, align_corners = align, half_pixel_centers = half }
  case {
    name = "resize_bilinear_" .. name, op = "resize_bilinear", attrs = attrs, inputs = { { shape = xs } },
    expect = function(x) return resize_bilinear(x, size, align, half) end, rtol = 0, atol = 0,
  }
  case {
    name = "resize_nearest_neighbor_" .. name, op = "resize_nearest_neighbor", attrs = attrs,
    inputs = { { shape = xs, dtype = name:match("down") and I32 or F32, kind = name:match("down") and "int" or nil } },
    expect = function(x) return resize_nearest(x, size, align, half) end, rtol = 0, atol = 0,
  }
end

local function make_inputs(c)
  local list = {}
  for i, inp in ipairs(c.inputs) do
    local dt = inp.dtype or F32
    local kind = inp.kind
    if kind == "exp" then -- small non-negative integer exponents
      local r = lcg(seed_of(c.name, i))
      local data = {}
      for k = 1, numel(inp.shape) do data[k] = r() % 4 end
      list[i] = { shape = inp.shape, dtype = dt, data = data }
    else
      local data = rand_data(seed_of(c.name, i), inp.shape, kind)
      if dt:match("int") then
        for k, v in ipairs(data) do data[k] = math.tointeger(v) or math.floor(v) end
      end
      list[i] = { shape = inp.shape, dtype = dt, data = data }
    end
  end
  return list
end

local function run_forward(c)
  local inputs = make_inputs(c)
  local want, want_shape = c.expect(table.unpack(inputs))
  local want_dtype = c.out_dtype or (c.op:match("^select") and inputs[2].dtype) or inputs[1].dtype
  if c.op:match("^resize_bilinear") then want_dtype = F32 end
  if c.op == "conv2d_backprop_input" then want_dtype = F32 end
  S.check_forward(c, inputs, want, want_shape, want_dtype)
end

TestOps3Forward = {}
for _, c in ipairs(cases) do
  TestOps3Forward["test_" .. c.name] = function() run_forward(c) end
end

local OWN_OPS = { "prelu", "leaky_relu", "pow", "squared_difference", "floor_div", "floor_mod",
  "atan2", "abs", "rsqrt", "sin", "cos", "reciprocal", "sign", "equal", "not_equal", "less",
  "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_not",
  "select", "select_v2", "reduce_min", "reduce_prod", "reduce_any", "argmin", "add_n",
  "batch_matmul", "conv2d_backprop_input", "resize_bilinear", "resize_nearest_neighbor" }

local TF_TYPES = { prelu = "Prelu", leaky_relu = "LeakyRelu", pow = "Pow",
  squared_difference = "SquaredDifference", floor_div = "FloorDiv", floor_mod = "FloorMod",
  atan2 = "Atan2", abs = "Abs", rsqrt = "Rsqrt", sin = "Sin", cos = "Cos",
  reciprocal = "Reciprocal", sign = "Sign", equal = "Equal", not_equal = "NotEqual",
  less = "Less", less_equal = "LessEqual", greater = "Greater", greater_equal = "GreaterEqual",
  logical_and = "LogicalAnd", logical_or = "LogicalOr", logical_not = "LogicalNot",
  select = "Select", select_v2 = "SelectV2", reduce_min = "Min", reduce_prod = "Prod",
  reduce_any = "Any", argmin = "ArgMin", add_n = "AddN", batch_matmul = "BatchMatMulV2",
  conv2d_backprop_input = "Conv2DBackpropInput", resize_bilinear = "ResizeBilinear",
  resize_nearest_neighbor = "ResizeNearestNeighbor" }

function TestOps3Forward.test_every_op_is_covered()
  S.assert_ops_covered(cases, OWN_OPS)
end

function TestOps3Forward.test_tf_types()
  for name, tf in pairs(TF_TYPES) do lu.assertEquals(npu.ops[name].tf_type, tf, name) end
end

-- Special values: NaN, infinities, signed zeros, division by zero.
function TestOps3Forward.test_special_values()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 5 }, "x")
  local nan, inf = 0 / 0, math.huge
  local feed = { [x] = npu.tensor({ nan, inf, -inf, 0.0, -2.0 }, F32) }
  local sess = npu.Session { graph = g }
  local function run(y) return flat_of(sess:run(y, feed)) end
  local s = run(g:op("sign", { x }))
  lu.assertEquals({ s[2], s[3], s[4], s[5] }, { 1, -1, 0, -1 })
  lu.assertEquals(s[1], 0) -- TensorFlow documents 0 for NaN
  local r = run(g:op("reciprocal", { x }))
  lu.assertTrue(r[1] ~= r[1]); lu.assertEquals({ r[2], r[3], r[4], r[5] }, { 0, -0.0, inf, -0.5 })
  local q = run(g:op("rsqrt", { x }))
  lu.assertEquals(q[4], inf); lu.assertTrue(q[5] ~= q[5])
  local e = run(g:op("equal", { x, x }))
  lu.assertEquals(e, { false, true, true, true, true })
  local ne = run(g:op("not_equal", { x, x }))
  lu.assertEquals(ne, { true, false, false, false, false })
  local fin = run(g:op("is_finite", { x }))
  lu.assertEquals(fin, { false, false, false, true, true })
  local mn = run(g:op("reduce_min", { x }, { axis = 0, keepdims = true }))
  lu.assertTrue(mn[1] ~= mn[1]) -- NaN propagates
  local lr = run(g:op("leaky_relu", { x }, { alpha = 0.5 }))
  lu.assertTrue(lr[1] ~= lr[1]); lu.assertEquals({ lr[2], lr[3], lr[5] }, { inf, -inf, -1.0 })
  local at = run(g:op("atan2", { x, g:const(npu.tensor({ 1, 1, 1, -1, 0 }, F32)) }))
  lu.assertTrue(at[1] ~= at[1])
  lu.assertAlmostEquals(at[2], math.pi / 2, 1e-6)
  lu.assertAlmostEquals(at[4], math.pi, 1e-6)      -- atan2(+0, -1)
  lu.assertAlmostEquals(at[5], -math.pi / 2, 1e-6) -- atan2(-2, 0)
  close(sess)
end

-- TensorFlow raises "Integer division by zero"; so do we, naming the node (more cases:
-- spec/progress_spec.lua).
function TestOps3Forward.test_integer_division_by_zero_fails()
  local g = npu.Graph()
  local a = g:const(npu.tensor({ 7, -7, 5 }, I32))
  local b = g:placeholder(I32, { 3 }, "b")
  local sess = npu.Session { graph = g }
  local ok, err = pcall(sess.run, sess, g:op("floor_div", { a, b }, nil, "fd"), { [b] = { 0, 2, -3 } })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "floor_div 'fd': Integer division by zero")
  lu.assertEquals(err.node, "fd")
  lu.assertEquals(flat_of(sess:run(g:op("floor_div", { a, b }), { [b] = { 1, 2, -3 } })), { 7, -4, -2 })
  lu.assertEquals(flat_of(sess:run(g:op("floor_mod", { a, b }), { [b] = { 1, 2, -3 } })), { 0, 1, -1 })
  close(sess)
end

-- ------------------------------------------------------------------------------------------
-- conv2d_backprop_input: the adjoint of conv2d, input_sizes as TensorFlow's first input,
-- the gradient of conv2d, a larger case through the blocked GEMM
-- ------------------------------------------------------------------------------------------

TestOps3ConvBackpropInput = {}

local function dot(a, b)
  local s = 0
  for i = 1, #a do s = s + a[i] * b[i] end
  return s
end

local adjoint_cases = {
  { { 2, 9, 8, 3 }, { 3, 3, 3, 4 }, { padding = "SAME", strides = 2 } },
  { { 1, 10, 9, 2 }, { 4, 3, 2, 3 }, { padding = "VALID", strides = { 1, 3, 2, 1 } } },
  { { 1, 11, 11, 2 }, { 3, 3, 2, 2 }, { padding = "SAME", dilations = 2 } },
  { { 1, 6, 7, 2 }, { 3, 3, 2, 2 }, { padding = "EXPLICIT", explicit_paddings = { 0, 0, 1, 2, 0, 1, 0, 0 } } },
}
for i, ac in ipairs(adjoint_cases) do
  TestOps3ConvBackpropInput["test_adjoint_" .. i] = function()
    local xs, fs, attrs = table.unpack(ac)
    local xd = rand_data(100 + i, xs, "small")
    local fd = rand_data(200 + i, fs, "small")
    local g = npu.Graph()
    local x = g:placeholder(F32, xs, "x")
    local f = g:placeholder(F32, fs, "f")
    local y = g:op("conv2d", { x, f }, attrs)
    local ys = y:shape()
    local dyd = rand_data(300 + i, ys, "small")
    local dy = g:placeholder(F32, ys, "dy")
    local a = copy(attrs)
    a.input_sizes = xs
    local dx = g:op("conv2d_backprop_input", { f, dy }, a)
    lu.assertEquals(dx:shape(), xs)
    local feeds = { [x] = npu.tensor(nest(xd, xs), F32), [f] = npu.tensor(nest(fd, fs), F32),
      [dy] = npu.tensor(nest(dyd, ys), F32) }
    for _, opts in ipairs({ {}, { use_off_line = false } }) do
      local sess = npu.Session { graph = g, options = opts }
      local yv, dxv = table.unpack(sess:run({ y, dx }, feeds))
      local lhs, rhs = dot(flat_of(yv), dyd), dot(xd, flat_of(dxv))
      lu.assertAlmostEquals(lhs, rhs, 1e-4 * (1 + math.abs(lhs)))
      close(sess)
    end
  end
end

function TestOps3ConvBackpropInput.test_input_sizes_as_first_input()
  local xs, fs, attrs = { 2, 7, 6, 3 }, { 3, 3, 3, 4 }, { padding = "SAME", strides = 2 }
  local fd, dyd = rand_data(11, fs, "small"), rand_data(12, { 2, 4, 3, 4 })
  local want = conv2d_backprop_input(xs, fd, fs, dyd, attrs)
  for _, dt in ipairs({ I32, I64 }) do
    local g = npu.Graph()
    local sizes = g:const(npu.tensor(xs, dt))
    local f = g:const(npu.tensor(nest(fd, fs), F32))
    local dy = g:placeholder(F32, { -1, 4, 3, 4 }, "dy")
    local dx = g:op("conv2d_backprop_input", { sizes, f, dy }, attrs)
    lu.assertEquals(dx:shape(), xs)
    -- the positional Lua form too
    local dx2 = npu.conv2d_backprop_input(sizes, f, dy, attrs)
    local sess = npu.Session { graph = g }
    local a, b = table.unpack(sess:run({ dx, dx2 }, { [dy] = npu.tensor(nest(dyd, { 2, 4, 3, 4 }), F32) }))
    assert_close(flat_of(a), want, 1e-5, 1e-5, "input_sizes input " .. dt)
    assert_close(flat_of(b), want, 1e-5, 1e-5, "positional " .. dt)
    close(sess)
  end
end

function TestOps3ConvBackpropInput.test_input_sizes_from_shape_folds()
  -- input_sizes computed from a tensor's shape (how Keras' Conv2DTranspose builds it) is
  -- known once the graph compiles
  local g = npu.Graph()
  local like = g:placeholder(F32, { -1, 6, 6, 2 }, "like")
  local f = g:const(npu.tensor(nest(rand_data(5, { 3, 3, 2, 3 }, "small"), { 3, 3, 2, 3 }), F32))
  local dy = g:placeholder(F32, { -1, 3, 3, 3 }, "dy")
  local dx = g:op("conv2d_backprop_input", { g:op("shape", { like }, { out_type = "int32" }), f, dy },
    { padding = "SAME", strides = 2 })
  lu.assertEquals(dx:shape(), { -1, -1, -1, 2 }) -- channels from the filter
  local sess = npu.Session { graph = g }
  local out = sess:run(dx, { [like] = npu.tensor(nest(rand_data(6, { 2, 6, 6, 2 }), { 2, 6, 6, 2 }), F32),
    [dy] = npu.tensor(nest(rand_data(7, { 2, 3, 3, 3 }), { 2, 3, 3, 3 }), F32) })
  lu.assertEquals(out:shape(), { 2, 6, 6, 2 })
  close(sess)
end

function TestOps3ConvBackpropInput.test_large_blocked()
  -- enough output rows that the GEMM path works in several blocks; device vs reference
  local xs, fs, attrs = { 1, 40, 40, 16 }, { 3, 3, 16, 8 }, { padding = "SAME", strides = 1 }
  local g = npu.Graph()
  local f = g:const(npu.tensor(nest(rand_data(21, fs, "small"), fs), F32))
  local dy = g:const(npu.tensor(nest(rand_data(22, { 1, 40, 40, 8 }, "small"), { 1, 40, 40, 8 }), F32))
  local a = copy(attrs)
  a.input_sizes = xs
  local dx = g:op("conv2d_backprop_input", { f, dy }, a)
  local outs = {}
  for i, opts in ipairs({ {}, { use_off_line = false } }) do
    local sess = npu.Session { graph = g, options = opts }
    outs[i] = flat_of(sess:run(dx))
    close(sess)
  end
  assert_close(outs[1], outs[2], 1e-5, 1e-5, "device vs reference")
end

function TestOps3ConvBackpropInput.test_conv2d_gradient_uses_it()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 1, 5, 5, 2 }, "x")
  local f = g:const(npu.tensor(nest(rand_data(31, { 3, 3, 2, 2 }, "small"), { 3, 3, 2, 2 }), F32))
  local y = g:op("conv2d", { x, f }, { padding = "SAME", strides = 2 })
  local loss = g:op("reduce_sum", { y })
  local dx = npu.gradients(loss, { x })[1]
  lu.assertEquals(dx:shape(), { 1, 5, 5, 2 })
  local sess = npu.Session { graph = g }
  local out = sess:run(dx, { [x] = npu.tensor(nest(rand_data(32, { 1, 5, 5, 2 }), { 1, 5, 5, 2 }), F32) })
  local ones = {}
  for i = 1, 1 * 3 * 3 * 2 do ones[i] = 1 end
  local fd = rand_data(31, { 3, 3, 2, 2 }, "small")
  assert_close(flat_of(out), conv2d_backprop_input({ 1, 5, 5, 2 }, fd, { 3, 3, 2, 2 }, ones,
    { padding = "SAME", strides = 2 }), 1e-5, 1e-5, "conv2d gradient")
  close(sess)
end

-- ------------------------------------------------------------------------------------------
-- The resize size and reduction axes as TensorFlow's trailing const inputs; positional forms
-- ------------------------------------------------------------------------------------------

TestOps3Api = {}

function TestOps3Api.test_resize_size_input()
  local xs = { 1, 3, 4, 2 }
  local xd = rand_data(41, xs)
  local g = npu.Graph()
  local x = g:const(npu.tensor(nest(xd, xs), F32))
  local size = g:const(npu.tensor({ 5, 6 }, I32))
  local a = g:op("resize_bilinear", { x, size }, { half_pixel_centers = true })
  local b = npu.resize_nearest_neighbor(x, { 5, 6 })
  local c = npu.resize_bilinear(x, size, { align_corners = true })
  lu.assertEquals(a:shape(), { 1, 5, 6, 2 })
  local sess = npu.Session { graph = g }
  local av, bv, cv = table.unpack(sess:run({ a, b, c }))
  local xt = { shape = xs, data = xd }
  assert_close(flat_of(av), (resize_bilinear(xt, { 5, 6 }, false, true)), 0, 0, "size input")
  assert_close(flat_of(bv), (resize_nearest(xt, { 5, 6 }, false, false)), 0, 0, "positional size")
  assert_close(flat_of(cv), (resize_bilinear(xt, { 5, 6 }, true, false)), 0, 0, "size input, align")
  close(sess)
end

function TestOps3Api.test_positional_and_methods()
  local g = npu.Graph()
  local x = g:const(npu.tensor({ { -1.0, 2.0 }, { 3.0, -4.0 } }, F32))
  local b = g:const(npu.tensor({ true, false }, BOOL))
  local sess = npu.Session { graph = g }
  lu.assertEquals(flat_of(sess:run(npu.leaky_relu(x, 0.5))), { -0.5, 2, 3, -2 })
  lu.assertEquals(flat_of(sess:run(npu.reduce_min(x, 1))), { -1, -4 })
  lu.assertEquals(flat_of(sess:run(npu.reduce_prod(x, 0, true))), { -3, -8 })
  lu.assertEquals(flat_of(sess:run(npu.reduce_any(b))), { true })
  lu.assertEquals(flat_of(sess:run(npu.argmin(x, 1))), { 0, 1 })
  lu.assertEquals(flat_of(sess:run(x:abs())), { 1, 2, 3, 4 })
  lu.assertEquals(flat_of(sess:run(npu.add_n({ x, x, x }))), { -3, 6, 9, -12 })
  lu.assertEquals(flat_of(sess:run(npu.select_v2(b, x, 0 * x))), { -1, 0, 3, 0 })
  close(sess)
end

function TestOps3Api.test_reduction_axes_as_input()
  local g = npu.Graph()
  local x = g:const(npu.tensor({ { 1, 5 }, { 3, 2 } }, I32))
  local axis = g:const(npu.tensor({ 1 }, I32))
  -- the importer's way: a const axis input becomes the attribute; Lua passes the attribute
  lu.assertEquals(npu.ops.reduce_min.tf_type, "Min")
  local sess = npu.Session { graph = g }
  lu.assertEquals(flat_of(sess:run(g:op("reduce_min", { x }, { axis = 1 }))), { 1, 2 })
  close(sess)
  lu.assertNotNil(axis)
end

-- ------------------------------------------------------------------------------------------
-- Shape inference with unknown dims (-1) and unknown rank
-- ------------------------------------------------------------------------------------------

local U = "?"
local shape_cases = {
  -- op, {input shapes}, {input dtypes}, attrs, expected shape (nil: unknown rank), out dtype
  { "pow", { { -1, 3 }, { 3 } }, nil, nil, { -1, 3 } },
  { "atan2", { U, { 2 } }, nil, nil, nil },
  { "floor_mod", { { -1, 1 }, { 1, 4 } }, { I32, I32 }, nil, { -1, 4 }, I32 },
  { "rsqrt", { { -1, 7 } }, nil, nil, { -1, 7 } },
  { "sign", { U }, { I64 }, nil, nil, I64 },
  { "less", { { -1, 3 }, { 2, 1 } }, nil, nil, { 2, 3 }, BOOL },
  { "equal", { U, { 3 } }, nil, nil, nil, BOOL },
  { "logical_and", { { -1 }, { 4 } }, { BOOL, BOOL }, nil, { 4 }, BOOL },
  { "logical_not", { { -1, 2 } }, { BOOL }, nil, { -1, 2 }, BOOL },
  { "select", { { -1 }, { -1, 3 }, { 5, -1 } }, { BOOL, F32, F32 }, nil, { 5, 3 } },
  { "select", { U, { -1, 3 }, U }, { BOOL, F32, F32 }, nil, { -1, 3 } },
  { "select_v2", { { -1, 1 }, { 3 }, {} }, { BOOL, F32, F32 }, nil, { -1, 3 } },
  { "select_v2", { U, { 3 }, {} }, { BOOL, I32, I32 }, nil, nil, I32 },
  { "reduce_min", { { -1, 3, 4 } }, nil, { axis = 1 }, { -1, 4 } },
  { "reduce_prod", { U }, nil, nil, {} },
  { "reduce_any", { { -1, 3 } }, { BOOL }, { axis = 0, keepdims = true }, { 1, 3 }, BOOL },
  { "reduce_any", { U }, { BOOL }, { axis = 0 }, nil, BOOL },
  { "argmin", { { -1, 10 } }, nil, { axis = 1 }, { -1 }, I64 },
  { "add_n", { { -1, 3 }, { 2, -1 }, U }, nil, nil, { 2, 3 } },
  { "add_n", { U, U }, nil, nil, nil },
  { "batch_matmul", { { -1, 3, 4 }, { 4, 5 } }, nil, nil, { -1, 3, 5 } },
  { "batch_matmul", { { 2, 1, -1, 4 }, { 3, -1, 6 } }, nil, nil, { 2, 3, -1, 6 } },
  { "batch_matmul", { { -1, 4, 3 }, { 7, 5, 4 } }, nil, { adj_x = true, adj_y = true }, { 7, 3, 5 } },
  { "batch_matmul", { U, { 4, 5 } }, nil, nil, nil },
  { "prelu", { { -1, 8, 8, 4 }, { 1, 1, 4 } }, nil, nil, { -1, 8, 8, 4 } },
  { "prelu", { U, { 4 } }, nil, nil, nil },
  { "leaky_relu", { { -1, 2 } }, nil, nil, { -1, 2 } },
  { "conv2d_backprop_input", { { 3, 3, 2, 4 }, { -1, 4, 4, 4 } }, nil,
    { input_sizes = { -1, 8, 8, 2 }, padding = "SAME", strides = 2 }, { -1, 8, 8, 2 } },
  { "conv2d_backprop_input", { { 3, 3, 2, 4 }, U }, nil,
    { input_sizes = { 1, 9, 9, 2 }, padding = "VALID", strides = 2 }, { 1, 9, 9, 2 } },
  { "conv2d_backprop_input", { { -1 }, { 3, 3, 2, 4 }, { 2, 4, 4, 4 } }, { I32, F32, F32 },
    { padding = "SAME" }, { 2, -1, -1, 2 } },
  { "resize_bilinear", { { -1, 5, 5, 3 } }, nil, { size = { 10, 12 } }, { -1, 10, 12, 3 } },
  { "resize_bilinear", { U, { 2 } }, { F32, I32 }, nil, { -1, -1, -1, -1 } },
  { "resize_nearest_neighbor", { { 2, -1, -1, 1 } }, { I64 }, { size = { 3, 3 } }, { 2, 3, 3, 1 }, I64 },
}

TestOps3Shapes = {}
for i, c in ipairs(shape_cases) do
  local op, in_shapes, dts, attrs, want, out_dt = table.unpack(c)
  TestOps3Shapes[("test_%02d_%s"):format(i, op)] = function()
    local g = npu.Graph()
    local ins = {}
    for k, sh in ipairs(in_shapes) do
      ins[k] = g:placeholder(dts and dts[k] or F32, sh ~= U and sh or nil, "x" .. k)
    end
    local y = g:op(op, ins, attrs)
    lu.assertEquals(y:shape(), want, op)
    lu.assertEquals(y:dtype(), out_dt or F32, op)
  end
end

-- ------------------------------------------------------------------------------------------
-- Errors: status code, op name and the culprit in the message
-- ------------------------------------------------------------------------------------------

local error_cases = {
  -- name, op, {input specs {shape, dtype}}, attrs, code, {parts of the message}
  { "pow_bool", "pow", { { { 2 }, BOOL }, { { 2 }, BOOL } }, nil, "NPU_ERR_DTYPE", { "pow", "bool" } },
  { "squared_difference_shapes", "squared_difference", { { { 2, 3 } }, { { 4 } } }, nil, "NPU_ERR_SHAPE", { "squared_difference", "[2,3]", "[4]" } },
  { "floor_div_dtypes", "floor_div", { { { 2 } }, { { 2 }, I32 } }, nil, "NPU_ERR_DTYPE", { "floor_div", "float32", "int32" } },
  { "atan2_int", "atan2", { { { 2 }, I32 }, { { 2 }, I32 } }, nil, "NPU_ERR_DTYPE", { "atan2", "int32" } },
  { "atan2_shapes", "atan2", { { { 3 } }, { { 2 } } }, nil, "NPU_ERR_SHAPE", { "atan2", "[3]", "[2]" } },
  { "rsqrt_int", "rsqrt", { { { 2 }, I32 } }, nil, "NPU_ERR_DTYPE", { "rsqrt", "int32" } },
  { "sin_bool", "sin", { { { 2 }, BOOL } }, nil, "NPU_ERR_DTYPE", { "sin", "bool" } },
  { "sign_bool", "sign", { { { 2 }, BOOL } }, nil, "NPU_ERR_DTYPE", { "sign", "bool" } },
  { "abs_uint8", "abs", { { { 2 }, "uint8" } }, nil, "NPU_ERR_DTYPE", { "abs", "uint8" } },
  { "less_bool", "less", { { { 2 }, BOOL }, { { 2 }, BOOL } }, nil, "NPU_ERR_DTYPE", { "less", "bool" } },
  { "greater_dtypes", "greater", { { { 2 } }, { { 2 }, I64 } }, nil, "NPU_ERR_DTYPE", { "greater", "float32", "int64" } },
  { "equal_shapes", "equal", { { { 2, 3 } }, { { 2 } } }, nil, "NPU_ERR_SHAPE", { "equal", "[2,3]", "[2]" } },
  { "logical_and_float", "logical_and", { { { 2 } }, { { 2 }, BOOL } }, nil, "NPU_ERR_DTYPE", { "logical_and", "float32" } },
  { "logical_not_int", "logical_not", { { { 2 }, I32 } }, nil, "NPU_ERR_DTYPE", { "logical_not", "int32" } },
  { "select_cond_float", "select", { { { 2 } }, { { 2 } }, { { 2 } } }, nil, "NPU_ERR_DTYPE", { "select", "float32" } },
  { "select_xy_shapes", "select", { { { 2 }, BOOL }, { { 2 } }, { { 3 } } }, nil, "NPU_ERR_SHAPE", { "select", "[2]", "[3]" } },
  { "select_cond_shape", "select", { { { 2, 1 }, BOOL }, { { 2, 3 } }, { { 2, 3 } } }, nil, "NPU_ERR_SHAPE", { "select", "[2,1]", "[2,3]", "select_v2" } },
  { "select_cond_rows", "select", { { { 3 }, BOOL }, { { 2, 3 } }, { { 2, 3 } } }, nil, "NPU_ERR_SHAPE", { "select", "[3]", "[2,3]" } },
  { "select_xy_dtypes", "select", { { { 2 }, BOOL }, { { 2 } }, { { 2 }, I32 } }, nil, "NPU_ERR_DTYPE", { "select", "float32", "int32" } },
  { "select_v2_shapes", "select_v2", { { { 4 }, BOOL }, { { 2, 3 } }, { { 3 } } }, nil, "NPU_ERR_SHAPE", { "select_v2", "[4]", "[2,3]" } },
  { "reduce_min_axis", "reduce_min", { { { 2, 3 } } }, { axis = 2 }, "NPU_ERR_ARG", { "reduce_min", "axis 2" } },
  { "reduce_prod_bool", "reduce_prod", { { { 2 }, BOOL } }, nil, "NPU_ERR_DTYPE", { "reduce_prod", "bool" } },
  { "reduce_any_float", "reduce_any", { { { 2 } } }, nil, "NPU_ERR_DTYPE", { "reduce_any", "float32" } },
  { "reduce_any_repeat", "reduce_any", { { { 2, 2 }, BOOL } }, { axis = { 0, -2 } }, "NPU_ERR_ARG", { "reduce_any", "twice" } },
  { "argmin_empty", "argmin", { { { 3, 0 } } }, { axis = 1 }, "NPU_ERR_SHAPE", { "argmin", "[3,0]" } },
  { "argmin_bool", "argmin", { { { 3 }, BOOL } }, nil, "NPU_ERR_DTYPE", { "argmin", "bool" } },
  { "add_n_shapes", "add_n", { { { 2, 3 } }, { { 2, 3 } }, { { 3, 2 } } }, nil, "NPU_ERR_SHAPE", { "add_n", "[2,3]", "[3,2]" } },
  { "add_n_dtypes", "add_n", { { { 2 } }, { { 2 }, F64 } }, nil, "NPU_ERR_DTYPE", { "add_n", "float32", "float64" } },
  { "add_n_bool", "add_n", { { { 2 }, BOOL } }, nil, "NPU_ERR_DTYPE", { "add_n", "bool" } },
  { "batch_matmul_inner", "batch_matmul", { { { 2, 3, 4 } }, { { 2, 5, 6 } } }, nil, "NPU_ERR_SHAPE", { "batch_matmul", "[2,3,4]", "[2,5,6]" } },
  { "batch_matmul_batch", "batch_matmul", { { { 2, 3, 4 } }, { { 3, 4, 6 } } }, nil, "NPU_ERR_SHAPE", { "batch_matmul", "[2,3,4]", "[3,4,6]" } },
  { "batch_matmul_rank", "batch_matmul", { { { 4 } }, { { 4, 2 } } }, nil, "NPU_ERR_SHAPE", { "batch_matmul", "[4]" } },
  { "batch_matmul_int", "batch_matmul", { { { 2, 2 }, I64 }, { { 2, 2 }, I64 } }, nil, "NPU_ERR_DTYPE", { "batch_matmul", "int64" } },
  { "prelu_alpha", "prelu", { { { 2, 3 } }, { { 2 } } }, nil, "NPU_ERR_SHAPE", { "prelu", "[2]", "[2,3]" } },
  { "prelu_alpha_rank", "prelu", { { { 3 } }, { { 2, 3 } } }, nil, "NPU_ERR_SHAPE", { "prelu", "[2,3]", "[3]" } },
  { "prelu_int", "prelu", { { { 3 }, I32 }, { { 3 }, I32 } }, nil, "NPU_ERR_DTYPE", { "prelu", "int32" } },
  { "leaky_relu_alpha", "leaky_relu", { { { 3 } } }, { alpha = "x" }, "NPU_ERR_ARG", { "leaky_relu", "alpha" } },
  { "cbi_no_sizes", "conv2d_backprop_input", { { { 3, 3, 2, 4 } }, { { 1, 4, 4, 4 } } }, { padding = "SAME" }, "NPU_ERR_ARG", { "conv2d_backprop_input", "input_sizes" } },
  { "cbi_one_input", "conv2d_backprop_input", { { { 3, 3, 2, 4 } } }, { padding = "SAME", input_sizes = { 1, 4, 4, 2 } }, "NPU_ERR_ARG", { "conv2d_backprop_input" } },
  { "cbi_sizes_count", "conv2d_backprop_input", { { { 3, 3, 2, 4 } }, { { 1, 4, 4, 4 } } }, { padding = "SAME", input_sizes = { 4, 4, 2 } }, "NPU_ERR_ARG", { "conv2d_backprop_input", "input_sizes", "3" } },
  { "cbi_channels", "conv2d_backprop_input", { { { 3, 3, 2, 4 } }, { { 1, 4, 4, 4 } } }, { padding = "SAME", input_sizes = { 1, 4, 4, 3 } }, "NPU_ERR_SHAPE", { "conv2d_backprop_input", "[3,3,2,4]", "3" } },
  { "cbi_dy_size", "conv2d_backprop_input", { { { 3, 3, 2, 4 } }, { { 1, 5, 4, 4 } } }, { padding = "SAME", input_sizes = { 1, 8, 8, 2 }, strides = 2 }, "NPU_ERR_SHAPE", { "conv2d_backprop_input", "[1,5,4,4]", "4x4" } },
  { "cbi_dy_channels", "conv2d_backprop_input", { { { 3, 3, 2, 4 } }, { { 1, 4, 4, 5 } } }, { padding = "SAME", input_sizes = { 1, 4, 4, 2 } }, "NPU_ERR_SHAPE", { "conv2d_backprop_input", "[1,4,4,5]", "[3,3,2,4]" } },
  { "cbi_batch", "conv2d_backprop_input", { { { 3, 3, 2, 4 } }, { { 2, 4, 4, 4 } } }, { padding = "SAME", input_sizes = { 1, 4, 4, 2 } }, "NPU_ERR_SHAPE", { "conv2d_backprop_input", "[2,4,4,4]" } },
  { "cbi_filter_rank", "conv2d_backprop_input", { { { 3, 3, 2 } }, { { 1, 4, 4, 4 } } }, { padding = "SAME", input_sizes = { 1, 4, 4, 2 } }, "NPU_ERR_SHAPE", { "conv2d_backprop_input", "[3,3,2]" } },
  { "cbi_int", "conv2d_backprop_input", { { { 3, 3, 2, 4 }, I32 }, { { 1, 4, 4, 4 }, I32 } }, { padding = "SAME", input_sizes = { 1, 4, 4, 2 } }, "NPU_ERR_DTYPE", { "conv2d_backprop_input", "int32" } },
  { "cbi_padding", "conv2d_backprop_input", { { { 3, 3, 2, 4 } }, { { 1, 4, 4, 4 } } }, { padding = "FULL", input_sizes = { 1, 4, 4, 2 } }, "NPU_ERR_ARG", { "conv2d_backprop_input", "FULL" } },
  { "cbi_sizes_float", "conv2d_backprop_input", { { { 4 } }, { { 3, 3, 2, 4 } }, { { 1, 4, 4, 4 } } }, { padding = "SAME" }, "NPU_ERR_DTYPE", { "conv2d_backprop_input", "input_sizes", "float32" } },
  { "cbi_too_many", "conv2d_backprop_input", { { { 4 }, I32 }, { { 3, 3, 2, 4 } }, { { 1, 4, 4, 4 } } }, { padding = "SAME", input_sizes = { 1, 4, 4, 2 } }, "NPU_ERR_ARG", { "conv2d_backprop_input", "too many" } },
  { "resize_rank", "resize_bilinear", { { { 4, 4, 3 } } }, { size = { 2, 2 } }, "NPU_ERR_SHAPE", { "resize_bilinear", "[4,4,3]" } },
  { "resize_no_size", "resize_bilinear", { { { 1, 4, 4, 3 } } }, nil, "NPU_ERR_ARG", { "resize_bilinear", "size" } },
  { "resize_size_count", "resize_nearest_neighbor", { { { 1, 4, 4, 3 } } }, { size = { 2, 2, 2 } }, "NPU_ERR_ARG", { "resize_nearest_neighbor", "size" } },
  { "resize_size_zero", "resize_bilinear", { { { 1, 4, 4, 3 } } }, { size = { 0, 2 } }, "NPU_ERR_ARG", { "resize_bilinear", "[0,2]" } },
  { "resize_both_flags", "resize_bilinear", { { { 1, 4, 4, 3 } } }, { size = { 2, 2 }, align_corners = true, half_pixel_centers = true }, "NPU_ERR_ARG", { "resize_bilinear", "half_pixel_centers" } },
  { "resize_int", "resize_bilinear", { { { 1, 4, 4, 3 }, I32 } }, { size = { 2, 2 } }, "NPU_ERR_DTYPE", { "resize_bilinear", "int32" } },
  { "resize_empty", "resize_nearest_neighbor", { { { 1, 0, 4, 3 } } }, { size = { 2, 2 } }, "NPU_ERR_SHAPE", { "resize_nearest_neighbor", "[1,0,4,3]" } },
}

TestOps3Errors = {}
for _, c in ipairs(error_cases) do
  local name, op, specs, attrs, code, parts = table.unpack(c)
  TestOps3Errors["test_" .. name] = function()
    local g = npu.Graph()
    local ins = {}
    for k, s in ipairs(specs) do ins[k] = g:placeholder(s[2] or F32, s[1], "in" .. k) end
    assert_error(function() g:op(op, ins, attrs) end, code, parts)
  end
end

function TestOps3Errors.test_select_fed_mismatch()
  -- unknown at build time, caught when the fed shapes are known
  local g = npu.Graph()
  local c = g:placeholder(BOOL, { -1 }, "c")
  local x = g:placeholder(F32, { -1, 2 }, "x")
  local y = g:op("select", { c, x, x })
  local sess = npu.Session { graph = g }
  assert_error(function()
    sess:run(y, { [c] = npu.tensor({ true, false, true }, BOOL), [x] = npu.tensor({ { 1, 2 }, { 3, 4 } }, F32) })
  end, "NPU_ERR_SHAPE", { "select", "[3]", "[2,2]" })
  close(sess)
end

function TestOps3Errors.test_resize_size_input_not_int()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 1, 4, 4, 1 }, "x")
  local s = g:const(npu.tensor({ 2.0, 2.0 }, F32))
  assert_error(function() g:op("resize_bilinear", { x, s }) end, "NPU_ERR_DTYPE", { "resize_bilinear", "size", "float32" })
end
