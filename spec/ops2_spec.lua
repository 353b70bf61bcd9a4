-- spec/ops2_spec.lua — the shape, movement and gather ops (the `/* shapes, movement, gathers */`
-- block of csrc/ops/ops.def): pack, unpack, strided_slice, gather, gather_nd, split, split_v,
-- tile, fill, range, expand_dims, squeeze, zeros_like, ones_like, depth_to_space,
-- space_to_depth, space_to_batch_nd, batch_to_space_nd, top_k, non_max_suppression,
-- stop_gradient.
--
-- Table-driven like ops_spec.lua: forward values against results computed independently here
-- in plain Lua (strided_slice by Python's slice rules, space_to_batch_nd by TensorFlow's
-- documented pad -> reshape -> transpose -> reshape, ...), on the device path and on the host
-- reference path (use_off_line = false), which must also agree with each other; shape
-- inference with unknown dims; errors whose messages carry the status code, the op and the
-- shapes; the operands given as constant inputs as TensorFlow passes them; the Lua
-- positional forms; the Shape -> StridedSlice -> Pack -> Reshape chain folded at compile time.
--
-- Defines global test tables TestOps2*; spec/run.lua runs LuaUnit.
local lu = require("luaunit")
local npu = require("npu")

local F32 = "float32"

-- ------------------------------------------------------------------------------------------
-- Helpers
-- ------------------------------------------------------------------------------------------

local S = dofile(SPEC_DIR .. "/support.lua")
local lcg, numel, nest, flatten, strides_of, unravel, offset, copy, as_number, seed_of =
  S.lcg, S.numel, S.nest, S.flatten, S.strides_of, S.unravel, S.offset, S.copy, S.as_number,
  S.seed_of

-- "grid": k/32 in [-4, 4] (exact in float32); "int": integers in [-20, 20]; "few": integers
-- in [0, 3] (many ties, for top_k).
local function rand_data(seed, shape, kind, dtype)
  local r = lcg(seed)
  local out = {}
  local int = dtype and (dtype:match("int") or dtype == "uint8")
  for i = 1, numel(shape) do
    local u = r()
    if kind == "few" then out[i] = u % 4
    elseif kind == "int" or int then out[i] = u % 41 - 20
    else out[i] = (u % 257 - 128) / 32 end
    if int then out[i] = math.tointeger(out[i]) or math.floor(out[i]) end
  end
  return out
end

local function assert_close(got, want, tol, what)
  lu.assertEquals(#got, #want, what .. ": element count")
  for i = 1, #want do
    local g, w = as_number(got[i]), as_number(want[i])
    if w ~= w then
      if g == g then lu.fail(("%s: element %d is %s, expected NaN"):format(what, i, tostring(g))) end
    elseif math.abs(g - w) > tol * (1 + math.abs(w)) then
      lu.fail(("%s: element %d is %.9g, expected %.9g"):format(what, i, g, w))
    end
  end
end

local assert_error = S.assert_error

local function values(out)
  local t = out:totable()
  return type(t) == "table" and flatten(t) or { t }
end

-- ------------------------------------------------------------------------------------------
-- Independent references (plain Lua; data flat, row-major; indices 0-based)
-- ------------------------------------------------------------------------------------------

local ref = {}

-- y[i] = x[src(i)] over y's shape; src returns x's 0-based multi-index or nil (a zero)
local function gather_by(x, xs, ys, src)
  local sx = strides_of(xs)
  local out = {}
  for lin = 0, numel(ys) - 1 do
    local idx = src(unravel(lin, ys))
    out[lin + 1] = idx and x[offset(idx, sx) + 1] or 0
  end
  return out, ys
end

function ref.transpose(x, xs, perm) -- perm 1-based here
  local ys = {}
  for i = 1, #perm do ys[i] = xs[perm[i]] end
  return gather_by(x, xs, ys, function(o)
    local idx = {}
    for i = 1, #perm do idx[perm[i]] = o[i] end
    return idx
  end)
end

-- Python's slice semantics, which TensorFlow's StridedSlice follows.
local function slice_indices(dim, b, e, s)
  local start, stop
  if s > 0 then
    start = b == nil and 0 or (b < 0 and math.max(b + dim, 0) or math.min(b, dim))
    stop = e == nil and dim or (e < 0 and math.max(e + dim, 0) or math.min(e, dim))
  else
    start = b == nil and dim - 1 or (b < 0 and math.max(b + dim, -1) or math.min(b, dim - 1))
    stop = e == nil and -1 or (e < 0 and math.max(e + dim, -1) or math.min(e, dim - 1))
  end
  local list, k = {}, start
  while (s > 0 and k < stop) or (s < 0 and k > stop) do
    list[#list + 1] = k
    k = k + s
  end
  return list
end

function ref.strided_slice(x, xs, b, e, s, m)
  m = m or {}
  s = s or {}
  local function bit(name, i) return ((m[name] or 0) >> (i - 1)) & 1 == 1 end
  local items, has_ellipsis = {}, false
  for i = 1, #b do
    if bit("ellipsis_mask", i) then
      items[#items + 1] = { kind = "ellipsis" }
      has_ellipsis = true
    elseif bit("new_axis_mask", i) then items[#items + 1] = { kind = "new" }
    elseif bit("shrink_axis_mask", i) then items[#items + 1] = { kind = "index", v = b[i] }
    else
      items[#items + 1] = { kind = "slice", b = not bit("begin_mask", i) and b[i] or nil,
        e = not bit("end_mask", i) and e[i] or nil, s = s[i] or 1 }
    end
  end
  if not has_ellipsis then items[#items + 1] = { kind = "ellipsis" } end
  local consumed = 0
  for _, it in ipairs(items) do
    if it.kind == "index" or it.kind == "slice" then consumed = consumed + 1 end
  end
  local lists, ys, out_axis = {}, {}, {} -- per input axis: indices; output shape; input axis -> output axis
  local ax = 1
  for _, it in ipairs(items) do
    if it.kind == "ellipsis" then
      for _ = 1, #xs - consumed do
        local l = {}
        for k = 0, xs[ax] - 1 do l[#l + 1] = k end
        lists[ax] = l
        ys[#ys + 1] = xs[ax]
        out_axis[ax] = #ys
        ax = ax + 1
      end
    elseif it.kind == "new" then
      ys[#ys + 1] = 1
    elseif it.kind == "index" then
      lists[ax] = { it.v < 0 and it.v + xs[ax] or it.v }
      ax = ax + 1
    else
      lists[ax] = slice_indices(xs[ax], it.b, it.e, it.s)
      ys[#ys + 1] = #lists[ax]
      out_axis[ax] = #ys
      ax = ax + 1
    end
  end
  return gather_by(x, xs, ys, function(o)
    local idx = {}
    for a = 1, #xs do idx[a] = lists[a][(out_axis[a] and o[out_axis[a]] or 0) + 1] end
    return idx
  end)
end

function ref.pack(list, axis)
  local xs = list[1].shape
  if axis < 0 then axis = axis + #xs + 1 end
  local ys = {}
  for i = 1, #xs + 1 do ys[i] = i == axis + 1 and #list or xs[i - (i > axis + 1 and 1 or 0)] end
  local sx = strides_of(xs)
  local out = {}
  for lin = 0, numel(ys) - 1 do
    local o = unravel(lin, ys)
    local k = table.remove(o, axis + 1)
    out[lin + 1] = list[k + 1].data[offset(o, sx) + 1]
  end
  return out, ys
end

-- sizes along axis -> a list of {data, shape}
function ref.split(x, xs, sizes, axis)
  if axis < 0 then axis = axis + #xs end
  local outs, start = {}, 0
  for _, n in ipairs(sizes) do
    local ys = copy(xs)
    ys[axis + 1] = n
    local first = start
    local data = gather_by(x, xs, ys, function(o)
      local idx = copy(o)
      idx[axis + 1] = idx[axis + 1] + first
      return idx
    end)
    outs[#outs + 1] = { data = data, shape = ys }
    start = start + n
  end
  return outs
end

function ref.unpack(x, xs, axis)
  if axis < 0 then axis = axis + #xs end
  local sizes = {}
  for i = 1, xs[axis + 1] do sizes[i] = 1 end
  local outs = ref.split(x, xs, sizes, axis)
  for _, o in ipairs(outs) do table.remove(o.shape, axis + 1) end
  return outs
end

function ref.tile(x, xs, mult)
  local ys = {}
  for i = 1, #xs do ys[i] = xs[i] * mult[i] end
  return gather_by(x, xs, ys, function(o)
    local idx = {}
    for i = 1, #o do idx[i] = o[i] % xs[i] end
    return idx
  end)
end

function ref.gather(x, xs, ind, is, axis)
  if axis < 0 then axis = axis + #xs end
  local ys = {}
  for i = 1, axis do ys[#ys + 1] = xs[i] end
  for i = 1, #is do ys[#ys + 1] = is[i] end
  for i = axis + 2, #xs do ys[#ys + 1] = xs[i] end
  local si = strides_of(is)
  return gather_by(x, xs, ys, function(o)
    local idx, k = {}, {}
    for i = 1, axis do idx[i] = o[i] end
    for i = 1, #is do k[i] = o[axis + i] end
    idx[axis + 1] = ind[offset(k, si) + 1]
    for i = axis + 2, #xs do idx[i] = o[#is + i - 1] end
    return idx
  end)
end

function ref.gather_nd(x, xs, ind, is)
  local depth = is[#is]
  local ys = {}
  for i = 1, #is - 1 do ys[#ys + 1] = is[i] end
  for i = depth + 1, #xs do ys[#ys + 1] = xs[i] end
  return gather_by(x, xs, ys, function(o)
    local row = 0
    for i = 1, #is - 1 do row = row * is[i] + o[i] end
    local idx = {}
    for d = 1, depth do idx[d] = ind[row * depth + d] end
    for d = depth + 1, #xs do idx[d] = o[#is - 1 + d - depth] end
    return idx
  end)
end

function ref.depth_to_space(x, xs, b)
  local c2 = xs[4] // (b * b)
  return gather_by(x, xs, { xs[1], xs[2] * b, xs[3] * b, c2 }, function(o)
    local i, j = o[2] % b, o[3] % b
    return { o[1], o[2] // b, o[3] // b, (i * b + j) * c2 + o[4] }
  end)
end

function ref.space_to_depth(x, xs, b)
  local c = xs[4]
  return gather_by(x, xs, { xs[1], xs[2] // b, xs[3] // b, c * b * b }, function(o)
    local blk = o[4] // c
    return { o[1], o[2] * b + blk // b, o[3] * b + blk % b, o[4] % c }
  end)
end

local function reshape(data, shape) return { data = data, shape = shape } end

-- TensorFlow's documentation of SpaceToBatchND: pad, reshape to (batch, p1/b1, b1, ...,
-- rest), permute the block dims to the front, reshape to (batch * prod(b), p1/b1, ..., rest).
function ref.space_to_batch(x, xs, block, pads)
  local m = #block
  local ps = copy(xs)
  for i = 1, m do ps[i + 1] = xs[i + 1] + pads[2 * i - 1] + pads[2 * i] end
  local padded = gather_by(x, xs, ps, function(o)
    local idx = copy(o)
    for i = 1, m do
      idx[i + 1] = o[i + 1] - pads[2 * i - 1]
      if idx[i + 1] < 0 or idx[i + 1] >= xs[i + 1] then return nil end
    end
    return idx
  end)
  local split_shape, perm = { xs[1] }, {}
  for i = 1, m do
    split_shape[#split_shape + 1] = ps[i + 1] // block[i]
    split_shape[#split_shape + 1] = block[i]
  end
  for i = m + 2, #xs do split_shape[#split_shape + 1] = xs[i] end
  for i = 1, m do perm[#perm + 1] = 2 * i + 1 end -- the block dims
  perm[#perm + 1] = 1
  for i = 1, m do perm[#perm + 1] = 2 * i end
  for i = 2 * m + 2, #split_shape do perm[#perm + 1] = i end
  local t = ref.transpose(padded, split_shape, perm)
  local ys, prod = {}, 1
  for i = 1, m do prod = prod * block[i] end
  ys[1] = xs[1] * prod
  for i = 1, m do ys[i + 1] = ps[i + 1] // block[i] end
  for i = m + 2, #xs do ys[i] = xs[i] end
  return t, ys
end

-- and of BatchToSpaceND: reshape to (b1, ..., bM, batch, s1, ..., rest), permute to (batch,
-- s1, b1, s2, b2, ..., rest), reshape to (batch, s1 * b1, ..., rest), crop.
function ref.batch_to_space(x, xs, block, crops)
  local m, prod = #block, 1
  for i = 1, m do prod = prod * block[i] end
  local batch = xs[1] // prod
  local split_shape, perm = {}, { m + 1 }
  for i = 1, m do split_shape[i] = block[i] end
  split_shape[m + 1] = batch
  for i = 2, #xs do split_shape[m + i] = xs[i] end
  for i = 1, m do
    perm[#perm + 1] = m + 1 + i
    perm[#perm + 1] = i
  end
  for i = 2 * m + 2, #split_shape do perm[#perm + 1] = i end
  local t = ref.transpose(x, split_shape, perm)
  local full = { batch }
  for i = 1, m do full[i + 1] = xs[i + 1] * block[i] end
  for i = m + 2, #xs do full[i] = xs[i] end
  local ys = copy(full)
  for i = 1, m do ys[i + 1] = full[i + 1] - crops[2 * i - 1] - crops[2 * i] end
  return gather_by(t, full, ys, function(o)
    local idx = copy(o)
    for i = 1, m do idx[i + 1] = o[i + 1] + crops[2 * i - 1] end
    return idx
  end)
end

-- per row: sort (value desc, index asc), keep k; NaN above everything
function ref.top_k(x, xs, k)
  local cols = xs[#xs]
  local vals, inds = {}, {}
  for r = 0, numel(xs) // cols - 1 do
    local order = {}
    for j = 1, cols do order[j] = j - 1 end
    table.sort(order, function(a, b)
      local va, vb = x[r * cols + a + 1], x[r * cols + b + 1]
      if va ~= va or vb ~= vb then
        if va ~= va and vb ~= vb then return a < b end
        return va ~= va
      end
      if va ~= vb then return va > vb end
      return a < b
    end)
    for j = 1, k do
      vals[#vals + 1] = x[r * cols + order[j] + 1]
      inds[#inds + 1] = order[j]
    end
  end
  local ys = copy(xs)
  ys[#ys] = k
  return vals, inds, ys
end

function ref.nms(boxes, scores, max_out, iou_thr, score_thr, pad)
  local function box(i)
    local b = { boxes[4 * i + 1], boxes[4 * i + 2], boxes[4 * i + 3], boxes[4 * i + 4] }
    return math.min(b[1], b[3]), math.min(b[2], b[4]), math.max(b[1], b[3]), math.max(b[2], b[4])
  end
  local function iou(i, j)
    local ay0, ax0, ay1, ax1 = box(i)
    local by0, bx0, by1, bx1 = box(j)
    local aa, ab = (ay1 - ay0) * (ax1 - ax0), (by1 - by0) * (bx1 - bx0)
    if aa <= 0 or ab <= 0 then return 0 end
    local inter = math.max(math.min(ay1, by1) - math.max(ay0, by0), 0)
        * math.max(math.min(ax1, bx1) - math.max(ax0, bx0), 0)
    return inter / (aa + ab - inter)
  end
  local cand = {}
  for i = 0, #scores - 1 do
    if scores[i + 1] > (score_thr or -math.huge) then cand[#cand + 1] = i end
  end
  table.sort(cand, function(a, b)
    if scores[a + 1] ~= scores[b + 1] then return scores[a + 1] > scores[b + 1] end
    return a < b
  end)
  local kept = {}
  for _, c in ipairs(cand) do
    if #kept == max_out then break end
    local ok = true
    for _, k in ipairs(kept) do
      if iou(c, k) > (iou_thr or 0.5) then ok = false end
    end
    if ok then kept[#kept + 1] = c end
  end
  local count = #kept
  if pad then for i = count + 1, max_out do kept[i] = pad end end
  return kept, count
end

-- ------------------------------------------------------------------------------------------
-- The forward table.  inputs: {shape=, dtype=, kind=} (random, fed), {value=, dtype=}
-- (given, fed) or {value=, dtype=, const=true} (a constant of the graph).  expect(...) gets
-- {shape, dtype, data} per input and returns data, shape[, dtype] -- or, for ops with
-- several outputs, a list of {data=, shape=, dtype=}.
-- ------------------------------------------------------------------------------------------

local cases = {}
local function case(c) cases[#cases + 1] = c end
local function one(data, shape, dtype) return { data = data, shape = shape, dtype = dtype } end

-- strided_slice: every mask, negative indices and strides, clamping, empty results
local ss_cases = {
  { "basic", { 3, 4 }, { 0, 1 }, { 3, 4 }, { 2, 1 } },
  { "negative_strides", { 4, 5 }, { 3, 4 }, { -5, 0 }, { -1, -2 } },
  { "negative_indices", { 6, 3 }, { -4, -3 }, { -1, 3 }, { 1, 1 } },
  { "masks", { 3, 4, 5 }, { 1, 0, 0 }, { 0, 3, 0 }, { 1, 1, -1 }, { begin_mask = 5, end_mask = 5 } },
  { "begin_mask_negative_stride", { 7 }, { 0 }, { 2 }, { -2 }, { begin_mask = 1 } },
  { "end_mask_negative_stride", { 7 }, { 4 }, { 0 }, { -3 }, { end_mask = 1 } },
  { "shrink", { 3, 4 }, { 1 }, { 2 }, { 1 }, { shrink_axis_mask = 1 } },
  { "shrink_negative", { 3, 4, 2 }, { 0, -1 }, { 0, 0 }, { 1, 1 },
    { shrink_axis_mask = 2, begin_mask = 1, end_mask = 1 } },
  { "shrink_all", { 2, 3 }, { 1, -2 }, { 2, 0 }, { 1, 1 }, { shrink_axis_mask = 3 } },
  { "ellipsis_new_axis", { 2, 3, 4 }, { 0, 0, 1 }, { 0, 0, 3 }, { 1, 1, 1 },
    { ellipsis_mask = 1, new_axis_mask = 2 } },
  { "new_axis_front", { 3, 2 }, { 0, 0 }, { 0, 0 }, { 1, 1 },
    { new_axis_mask = 1, begin_mask = 2, end_mask = 2 } },
  { "ellipsis_middle", { 2, 3, 4, 5 }, { 1, 0, -1 }, { 2, 0, -3 }, { 1, 1, -1 }, { ellipsis_mask = 2 } },
  { "ellipsis_only", { 2, 3 }, { 0 }, { 0 }, { 1 }, { ellipsis_mask = 1 } },
  { "new_axis_end_shrink", { 4, 3 }, { 2, 0, 0 }, { 3, 0, 0 }, { 1, 1, 1 },
    { shrink_axis_mask = 1, new_axis_mask = 4, end_mask = 2 } },
  { "clamp", { 5 }, { -10 }, { 10 }, { 2 } },
  { "empty", { 5 }, { 3 }, { 1 }, { 1 } },
  { "empty_negative", { 5, 2 }, { 1, 0 }, { 3, 2 }, { -1, 1 } },
  { "big_strides", { 6, 3 }, { 1, 0 }, { 6, 3 }, { 4, 5 } },
  { "no_strides", { 4, 3 }, { 1, 1 }, { 3, 3 } },
  { "partial_spec", { 3, 4, 5 }, { 1 }, { 3 }, { 1 } },
  { "large", { 64, 48, 9 }, { 1, -1, 0 }, { 63, 0, 9 }, { 1, -2, 3 } },
}
for _, dt in ipairs({ F32, "int32", "float64", "uint8" }) do
  for _, c in ipairs(ss_cases) do
    if dt == F32 or c[1] ~= "large" then
      local attrs = copy(c[6] or {})
      attrs.begin, attrs["end"], attrs.strides = c[3], c[4], c[5]
      case {
        name = ("strided_slice_%s_%s"):format(c[1], dt), op = "strided_slice", attrs = attrs,
        inputs = { { shape = c[2], dtype = dt } },
        expect = function(x) return ref.strided_slice(x.data, x.shape, c[3], c[4], c[5], c[6]) end,
      }
    end
  end
end
-- begin, end, strides as TensorFlow passes them: constant inputs (int32 and int64)
for _, it in ipairs({ "int32", "int64" }) do
  case {
    name = "strided_slice_const_inputs_" .. it, op = "strided_slice",
    attrs = { shrink_axis_mask = 1, end_mask = 4 },
    inputs = { { shape = { 4, 5, 3 } }, { value = { -1, 4, 0 }, dtype = it, const = true },
      { value = { 0, 0, 0 }, dtype = it, const = true }, { value = { 1, -2, 2 }, dtype = it, const = true } },
    expect = function(x)
      return ref.strided_slice(x.data, x.shape, { -1, 4, 0 }, { 0, 0, 0 }, { 1, -2, 2 },
        { shrink_axis_mask = 1, end_mask = 4 })
    end,
  }
end

-- pack
for i, c in ipairs({ { { 2, 3 }, 3, 0, F32 }, { { 2, 3 }, 2, 1, "int32" }, { { 2, 3 }, 4, -1, "float64" },
  { {}, 3, 0, "int32" }, { { 4 }, 1, 0, "int64" }, { { 2, 2, 2 }, 2, -4, F32 } }) do
  local inputs = {}
  for k = 1, c[2] do inputs[k] = { shape = c[1], dtype = c[4] } end
  case {
    name = "pack_" .. i, op = "pack", attrs = { axis = c[3] }, inputs = inputs,
    expect = function(...) return ref.pack({ ... }, c[3]) end,
  }
end

-- unpack, split, split_v: several outputs
for i, c in ipairs({ { { 3, 4 }, 0, F32 }, { { 2, 3, 4 }, 1, "int32" }, { { 2, 3, 4 }, -1, "float64" }, { { 5 }, 0, "int64" } }) do
  case {
    name = "unpack_" .. i, op = "unpack", attrs = { axis = c[2] }, multi = true,
    inputs = { { shape = c[1], dtype = c[3] } },
    expect = function(x) return ref.unpack(x.data, x.shape, c[2]) end,
  }
end
for i, c in ipairs({ { { 6, 4 }, 3, nil, F32 }, { { 2, 6, 3 }, 2, 1, "int32" }, { { 2, 3, 4 }, 4, -1, "float64" },
  { { 5 }, 1, 0, "uint8" } }) do
  case {
    name = "split_" .. i, op = "split", attrs = { num_split = c[2], axis = c[3] }, multi = true,
    inputs = { { shape = c[1], dtype = c[4] } },
    expect = function(x)
      local a = c[3] or 0
      local n = x.shape[(a < 0 and a + #x.shape or a) + 1] // c[2]
      local sizes = {}
      for k = 1, c[2] do sizes[k] = n end
      return ref.split(x.data, x.shape, sizes, a)
    end,
  }
end
-- TensorFlow's order: Split(split_dim, value), the axis a constant input first
case {
  name = "split_axis_input_first", op = "split", attrs = { num_split = 2 }, multi = true,
  inputs = { { value = 1, dtype = "int32", const = true }, { shape = { 3, 4 } } },
  expect = function(_, x) return ref.split(x.data, x.shape, { 2, 2 }, 1) end,
}
for i, c in ipairs({ { { 6, 4 }, { 1, 2, 3 }, 0, F32 }, { { 2, 7 }, { 3, -1, 0, 2 }, 1, "int32" },
  { { 2, 3, 4 }, { 4 }, -1, "float64" } }) do
  case {
    name = "split_v_" .. i, op = "split_v", attrs = { size_splits = c[2], axis = c[3] }, multi = true,
    inputs = { { shape = c[1], dtype = c[4] } },
    expect = function(x)
      local a = c[3] < 0 and c[3] + #x.shape or c[3]
      local sizes, sum = copy(c[2]), 0
      for _, v in ipairs(sizes) do if v > 0 then sum = sum + v end end
      for k, v in ipairs(sizes) do if v < 0 then sizes[k] = x.shape[a + 1] - sum end end
      return ref.split(x.data, x.shape, sizes, a)
    end,
  }
end
case {
  name = "split_v_const_inputs", op = "split_v", multi = true,
  inputs = { { shape = { 5, 2 } }, { value = { 2, 3 }, dtype = "int64", const = true },
    { value = 0, dtype = "int32", const = true } },
  expect = function(x) return ref.split(x.data, x.shape, { 2, 3 }, 0) end,
}

-- tile
for i, c in ipairs({ { { 2, 3 }, { 2, 1 }, F32 }, { { 2, 3 }, { 1, 3 }, "int32" }, { { 2, 1, 3 }, { 2, 4, 1 }, "float64" },
  { { 3 }, { 0 }, F32 }, { { 40, 50 }, { 3, 4 }, F32 } }) do
  case {
    name = "tile_" .. i, op = "tile", attrs = { multiples = c[2] },
    inputs = { { shape = c[1], dtype = c[3] } },
    expect = function(x) return ref.tile(x.data, x.shape, c[2]) end,
  }
end
case {
  name = "tile_const_input", op = "tile",
  inputs = { { shape = { 2, 2 } }, { value = { 1, 2 }, dtype = "int32", const = true } },
  expect = function(x) return ref.tile(x.data, x.shape, { 1, 2 }) end,
}

-- gather
local gather_cases = {
  { { 5, 3 }, { 4 }, { 4, 0, 2, 0 }, 0, F32 },
  { { 2, 6 }, { 2, 2 }, { 5, 0, 1, 5 }, 1, "int32" },
  { { 2, 3, 4 }, { 3 }, { 3, 1, 0 }, -1, "float64" },
  { { 4, 2 }, {}, { 2 }, 0, F32 },
  { { 3, 4 }, { 0 }, {}, 1, "int64" },
  { { 300, 70 }, { 200 }, nil, 0, F32 },
}
for i, c in ipairs(gather_cases) do
  for _, it in ipairs({ "int32", "int64" }) do
    local ind = c[3]
    if not ind then
      ind = {}
      for k = 1, numel(c[2]) do ind[k] = (k * 37) % c[1][1] end
    end
    case {
      name = ("gather_%d_%s"):format(i, it), op = "gather", attrs = { axis = c[4] },
      inputs = { { shape = c[1], dtype = c[5] }, { value = ind, shape = c[2], dtype = it } },
      expect = function(x, k) return ref.gather(x.data, x.shape, k.data, k.shape, c[4]) end,
    }
  end
end
case {
  name = "gather_axis_const_input", op = "gather",
  inputs = { { shape = { 3, 4 } }, { value = { 3, 3, 1 }, dtype = "int32" }, { value = 1, dtype = "int64", const = true } },
  expect = function(x, k) return ref.gather(x.data, x.shape, k.data, k.shape, 1) end,
}

-- gather_nd
for i, c in ipairs({
  { { 3, 4 }, { 2, 2 }, { 2, 3, 0, 1 }, F32 },
  { { 3, 4, 2 }, { 3, 1 }, { 2, 0, 1 }, "int32" },
  { { 2, 3, 4 }, { 2, 2, 3 }, { 1, 2, 3, 0, 0, 0, 1, 0, 2, 0, 2, 1 }, "float64" },
  { { 4 }, { 2, 1 }, { 3, 0 }, "int64" },
}) do
  for _, it in ipairs({ "int32", "int64" }) do
    case {
      name = ("gather_nd_%d_%s"):format(i, it), op = "gather_nd",
      inputs = { { shape = c[1], dtype = c[4] }, { value = c[3], shape = c[2], dtype = it } },
      expect = function(x, k) return ref.gather_nd(x.data, x.shape, k.data, k.shape) end,
    }
  end
end

-- fill, range (no data inputs: operands as attributes or constant inputs)
for i, c in ipairs({
  { { dims = { 2, 3 }, value = 1.5 }, {}, 1.5, { 2, 3 }, F32 },
  { { dims = { 4 }, value = 7 }, {}, 7, { 4 }, "int32" },
  { { dims = {}, value = -2.25, dtype = "float64" }, {}, -2.25, {}, "float64" },
  { { dims = { 2, 0 }, value = 1 }, {}, 1, { 2, 0 }, "int32" },
  { { value = 3 }, { { value = { 3, 2 }, dtype = "int64", const = true } }, 3, { 3, 2 }, "int32" },
  { { dims = { 2, 2 } }, { { value = 5, dtype = "int64" } }, 5, { 2, 2 }, "int64" },
  { {}, { { value = { 2 }, dtype = "int32", const = true }, { value = 0.5, dtype = "float64", const = true } },
    0.5, { 2 }, "float64" },
}) do
  case {
    name = "fill_" .. i, op = "fill", attrs = c[1], inputs = c[2], out_dtype = c[5],
    expect = function()
      local out = {}
      for k = 1, numel(c[4]) do out[k] = c[3] end
      return out, c[4], c[5]
    end,
  }
end
for i, c in ipairs({
  { { limit = 5 }, {}, 0, 5, 1, "int32" },
  { { start = 3, limit = -4, delta = -3 }, {}, 3, -4, -3, "int32" },
  { { start = 1, limit = 2, delta = 0.25 }, {}, 1, 2, 0.25, F32 },
  { { start = 0, limit = 1, delta = 0.375, dtype = "float64" }, {}, 0, 1, 0.375, "float64" },
  { { start = 2, limit = 2 }, {}, 2, 2, 1, "int32" },
  { { dtype = "int64" }, { { value = 1, dtype = "int64", const = true }, { value = 10, dtype = "int64", const = true },
    { value = 4, dtype = "int64", const = true } }, 1, 10, 4, "int64" },
  { { start = -1.5 }, { { value = 1.0, dtype = F32, const = true }, { value = 0.5, dtype = F32, const = true } },
    -1.5, 1, 0.5, F32 },
}) do
  case {
    name = "range_" .. i, op = "range", attrs = c[1], inputs = c[2],
    expect = function()
      local out, v = {}, c[3]
      while (c[5] > 0 and v < c[4]) or (c[5] < 0 and v > c[4]) do
        out[#out + 1] = v
        v = v + c[5]
      end
      return out, { #out }, c[6]
    end,
  }
end

-- expand_dims, squeeze, zeros_like, ones_like
for i, c in ipairs({ { { 2, 3 }, 0, F32 }, { { 2, 3 }, -1, "int32" }, { { 2, 3 }, 1, "float64" }, { {}, 0, "int64" },
  { { 4 }, -2, "uint8" } }) do
  case {
    name = "expand_dims_" .. i, op = "expand_dims", attrs = { axis = c[2] },
    inputs = { { shape = c[1], dtype = c[3] } },
    expect = function(x)
      local ys, a = copy(x.shape), c[2] < 0 and c[2] + #x.shape + 2 or c[2] + 1
      table.insert(ys, a, 1)
      return copy(x.data), ys
    end,
  }
end
case {
  name = "expand_dims_const_input", op = "expand_dims",
  inputs = { { shape = { 3 } }, { value = 1, dtype = "int32", const = true } },
  expect = function(x) return copy(x.data), { 3, 1 } end,
}
for i, c in ipairs({ { { 1, 3, 1, 2 }, nil, { 3, 2 }, F32 }, { { 1, 3, 1, 2 }, { 2 }, { 1, 3, 2 }, "int32" },
  { { 2, 1 }, { -1 }, { 2 }, "float64" }, { { 1, 1 }, { 0, 1 }, {}, F32 }, { { 2, 3 }, nil, { 2, 3 }, "int64" } }) do
  case {
    name = "squeeze_" .. i, op = "squeeze", attrs = c[2] and { squeeze_dims = c[2] } or nil,
    inputs = { { shape = c[1], dtype = c[4] } },
    expect = function(x) return copy(x.data), c[3] end,
  }
end
for _, op in ipairs({ "zeros_like", "ones_like" }) do
  for _, dt in ipairs({ F32, "int32", "float64", "bool", "uint8" }) do
    case {
      name = op .. "_" .. dt, op = op,
      inputs = { { shape = { 2, 3 }, dtype = dt, kind = "few" } },
      expect = function(x)
        local out = {}
        for k = 1, numel(x.shape) do out[k] = op == "zeros_like" and 0 or 1 end
        return out, x.shape
      end,
    }
  end
end

-- depth_to_space, space_to_depth
for i, c in ipairs({ { { 1, 2, 3, 8 }, 2, F32 }, { { 2, 2, 2, 18 }, 3, "int32" }, { { 2, 3, 2, 4 }, 2, "float64" },
  { { 1, 16, 16, 64 }, 2, F32 } }) do
  case {
    name = "depth_to_space_" .. i, op = "depth_to_space", attrs = { block_size = c[2] },
    inputs = { { shape = c[1], dtype = c[3] } },
    expect = function(x) return ref.depth_to_space(x.data, x.shape, c[2]) end,
  }
end
for i, c in ipairs({ { { 1, 4, 6, 2 }, 2, F32 }, { { 2, 6, 3, 1 }, 3, "int32" }, { { 2, 4, 4, 3 }, 2, "float64" },
  { { 1, 32, 32, 16 }, 2, F32 } }) do
  case {
    name = "space_to_depth_" .. i, op = "space_to_depth", attrs = { block_size = c[2] },
    inputs = { { shape = c[1], dtype = c[3] } },
    expect = function(x) return ref.space_to_depth(x.data, x.shape, c[2]) end,
  }
end

-- space_to_batch_nd, batch_to_space_nd
for i, c in ipairs({
  { { 1, 4, 4, 1 }, { 2, 2 }, { 0, 0, 0, 0 }, F32 },
  { { 2, 3, 5, 2 }, { 2, 3 }, { 1, 0, 0, 1 }, "int32" },
  { { 2, 5, 3 }, { 3 }, { 2, 2 }, "float64" },
  { { 1, 2, 2, 2, 1 }, { 2, 1, 2 }, { 0, 0, 1, 1, 0, 2 }, F32 },
}) do
  case {
    name = "space_to_batch_nd_" .. i, op = "space_to_batch_nd", attrs = { block_shape = c[2], paddings = c[3] },
    inputs = { { shape = c[1], dtype = c[4] } },
    expect = function(x) return ref.space_to_batch(x.data, x.shape, c[2], c[3]) end,
  }
end
for i, c in ipairs({
  { { 4, 2, 2, 1 }, { 2, 2 }, { 0, 0, 0, 0 }, F32 },
  { { 12, 2, 2, 2 }, { 2, 3 }, { 1, 0, 0, 1 }, "int32" },
  { { 6, 3, 3 }, { 3 }, { 2, 2 }, "float64" },
  { { 8, 1, 2, 2, 1 }, { 2, 1, 2 }, { 0, 1, 1, 0, 0, 3 }, F32 },
}) do
  case {
    name = "batch_to_space_nd_" .. i, op = "batch_to_space_nd", attrs = { block_shape = c[2], crops = c[3] },
    inputs = { { shape = c[1], dtype = c[4] } },
    expect = function(x) return ref.batch_to_space(x.data, x.shape, c[2], c[3]) end,
  }
end
case {
  name = "space_to_batch_nd_const_inputs", op = "space_to_batch_nd",
  inputs = { { shape = { 1, 2, 4, 3 } }, { value = { 2, 2 }, dtype = "int32", const = true },
    { value = { { 1, 1 }, { 0, 0 } }, dtype = "int64", const = true } },
  expect = function(x) return ref.space_to_batch(x.data, x.shape, { 2, 2 }, { 1, 1, 0, 0 }) end,
}

-- top_k: small integer values, so ties are everywhere
for i, c in ipairs({ { { 7 }, 3, F32 }, { { 3, 6 }, 6, "int32" }, { { 2, 3, 5 }, 1, "float64" }, { { 4, 5 }, 0, "int64" },
  { { 130, 257 }, 17, F32 }, { { 3, 9 }, 4, F32, "grid" } }) do
  case {
    name = "top_k_" .. i, op = "top_k", attrs = { k = c[2] }, multi = true,
    inputs = { { shape = c[1], dtype = c[3], kind = c[4] or "few" } },
    expect = function(x)
      local v, ind, ys = ref.top_k(x.data, x.shape, c[2])
      return { one(v, ys, c[3]), one(ind, ys, "int32") }
    end,
  }
end
case {
  name = "top_k_const_input", op = "top_k", multi = true,
  inputs = { { shape = { 2, 5 }, kind = "few" }, { value = 2, dtype = "int32", const = true } },
  expect = function(x)
    local v, ind, ys = ref.top_k(x.data, x.shape, 2)
    return { one(v, ys, F32), one(ind, ys, "int32") }
  end,
}

-- non_max_suppression: clusters of overlapping boxes, corners in both orders, ties
local nms_boxes = {
  0, 0, 1, 1, 0, 0.1, 1, 1.1, 1, 0.9, 0, -0.1, 0, 10, 1, 11, 0, 10.1, 1, 11.1,
  0, 100, 1, 101, 5, 5, 6, 6, 5, 5.5, 6, 6.5, 2, 2, 2, 3, -1, -1, 0, 0,
}
local nms_scores = { 0.9, 0.75, 0.6, 0.95, 0.5, 0.3, 0.75, 0.75, 0.99, 0.2 }
for i, c in ipairs({ { 3 }, { 10, 0.5 }, { 10, 0.7, 0.4 }, { 4, 0.0 }, { 0 }, { 10, 1.0, 0.6 } }) do
  local attrs = { max_output_size = c[1], iou_threshold = c[2], score_threshold = c[3] }
  case {
    name = "non_max_suppression_" .. i, op = "non_max_suppression", attrs = attrs, multi = true,
    inferred = { { -1 }, { -1 }, {} },
    inputs = { { value = nms_boxes, shape = { 10, 4 } }, { value = nms_scores, shape = { 10 } } },
    expect = function(b, s)
      local kept, count = ref.nms(b.data, s.data, c[1], c[2], c[3])
      local sc = {}
      for k, i in ipairs(kept) do sc[k] = s.data[i + 1] end
      return { one(kept, { count }, "int32"), one(sc, { count }, F32), one({ count }, {}, "int32") }
    end,
  }
end
case {
  name = "non_max_suppression_const_inputs_pad0", op = "non_max_suppression", multi = true,
  attrs = { pad_to_max_output_size = true },
  inputs = { { value = nms_boxes, shape = { 10, 4 } }, { value = nms_scores, shape = { 10 } },
    { value = 8, dtype = "int32", const = true }, { value = 0.5, dtype = F32, const = true },
    { value = 0.55, dtype = F32, const = true } },
  expect = function(b, s)
    local kept, count = ref.nms(b.data, s.data, 8, 0.5, 0.55, 0)
    local sc = {}
    for k, i in ipairs(kept) do sc[k] = k <= count and s.data[i + 1] or 0 end
    return { one(kept, { 8 }, "int32"), one(sc, { 8 }, F32), one({ count }, {}, "int32") }
  end,
}

-- stop_gradient: the identity forward
for _, dt in ipairs({ F32, "int32" }) do
  case {
    name = "stop_gradient_" .. dt, op = "stop_gradient", inputs = { { shape = { 2, 3 }, dtype = dt } },
    expect = function(x) return copy(x.data), x.shape end,
  }
end

-- ------------------------------------------------------------------------------------------
-- Running a forward case on both paths
-- ------------------------------------------------------------------------------------------

local function shape_of_value(v)
  local s = {}
  while type(v) == "table" do
    s[#s + 1] = #v
    v = v[1]
  end
  return s
end

local function make_inputs(c)
  local list = {}
  for i, inp in ipairs(c.inputs) do
    local dt = inp.dtype or F32
    local data, shape
    if inp.value ~= nil then
      shape = inp.shape or shape_of_value(inp.value)
      data = type(inp.value) == "table" and flatten(inp.value) or { inp.value }
    else
      shape = inp.shape
      data = rand_data(seed_of(c.name, i), shape, inp.kind, dt)
      if dt == "uint8" then for k, v in ipairs(data) do data[k] = v % 256 end end
      if dt == "bool" then for k, v in ipairs(data) do data[k] = v % 2 end end
    end
    list[i] = { shape = shape, dtype = dt, data = data, const = inp.const }
  end
  return list
end

-- the expected outputs as a list; dtype by default: the first fed input's
local function normalise(c, inputs, ...)
  local default
  for _, inp in ipairs(inputs) do default = default or (not inp.const and inp.dtype) or nil end
  default = c.out_dtype or default
  if c.multi then
    local list = ...
    for _, o in ipairs(list) do o.dtype = o.dtype or default end
    return list
  end
  local data, shape, dtype = ...
  return { one(data, shape, dtype or default) }
end

local function run_forward(c)
  local inputs = make_inputs(c)
  local want = normalise(c, inputs, c.expect(table.unpack(inputs)))
  local g = npu.Graph()
  local ins, feeds = {}, {}
  for i, inp in ipairs(inputs) do
    local t = npu.tensor(nest(inp.data, inp.shape), inp.dtype)
    if inp.const then ins[i] = g:const(t)
    else
      ins[i] = g:placeholder(inp.dtype, inp.shape, "in" .. i)
      feeds[ins[i]] = t
    end
  end
  local y = g:op(c.op, ins, c.attrs)
  local outs = npu.is_output(y) and { y } or y
  lu.assertEquals(#outs, #want, c.name .. ": output count")
  for k, o in ipairs(outs) do
    -- c.inferred: shapes known only when the op runs (NPUX_F_DATA_SHAPE) are -1 until then
    lu.assertEquals(o:shape(), c.inferred and c.inferred[k] or want[k].shape, c.name .. ": inferred shape of output " .. k)
    lu.assertEquals(o:dtype(), want[k].dtype, c.name .. ": inferred dtype of output " .. k)
  end
  local results = {}
  for _, path in ipairs({ "device", "reference" }) do
    local sess <close> = npu.Session { graph = g, options = path == "reference" and { use_off_line = false } or nil }
    local got = sess:run(outs, feeds)
    results[path] = {}
    for k, t in ipairs(got) do
      local what = ("%s (%s) output %d"):format(c.name, path, k)
      lu.assertEquals(t:shape(), want[k].shape, what .. ": shape")
      lu.assertEquals(t:dtype(), want[k].dtype, what .. ": dtype")
      results[path][k] = values(t)
      assert_close(results[path][k], want[k].data, c.tol or 1e-6, what)
    end
  end
  for k = 1, #want do -- device and reference agree exactly
    assert_close(results.device[k], results.reference[k], 0, c.name .. ": device vs reference")
  end
end

TestOps2Forward = {}
for _, c in ipairs(cases) do
  TestOps2Forward["test_" .. c.name] = function() run_forward(c) end
end

local OWN_OPS = { "pack", "unpack", "strided_slice", "gather", "gather_nd", "split", "split_v", "tile",
  "fill", "range", "expand_dims", "squeeze", "zeros_like", "ones_like", "depth_to_space",
  "space_to_depth", "space_to_batch_nd", "batch_to_space_nd", "top_k", "non_max_suppression",
  "stop_gradient" }

function TestOps2Forward.test_every_op_is_covered()
  S.assert_ops_covered(cases, OWN_OPS)
end

-- ------------------------------------------------------------------------------------------
-- Shape inference with unknown dims (-1) and unknown rank ("?")
-- ------------------------------------------------------------------------------------------

local U = "?"
local shape_cases = {
  -- op, {input shapes}, attrs, expected shape of output 1 (nil: unknown rank), input dtype,
  -- output dtype
  { "strided_slice", { { -1, 5 } }, { begin = { 0, 1 }, ["end"] = { 2, 5 } }, { -1, 4 } },
  { "strided_slice", { { -1, 5 } }, { begin = { 0 }, ["end"] = { 1 }, shrink_axis_mask = 1 }, { 5 } },
  { "strided_slice", { { -1, 5 } }, { begin = { 0, 0 }, ["end"] = { 0, 0 }, strides = { -2, 2 },
    begin_mask = 3, end_mask = 3 }, { -1, 3 } },
  { "strided_slice", { U }, { begin = { 0 }, ["end"] = { 1 } }, nil },
  { "strided_slice", { { 4, -1 } }, { begin = { 0, 0 }, ["end"] = { 0, 0 }, new_axis_mask = 1, ellipsis_mask = 2 },
    { 1, 4, -1 } },
  { "pack", { { -1, 3 }, { 2, -1 } }, { axis = 1 }, { 2, 2, 3 } },
  { "pack", { U, { 3 } }, nil, { 2, 3 } },
  { "pack", { U, U }, nil, nil },
  { "unpack", { { -1, 3 } }, { axis = 1 }, { -1 } },
  { "unpack", { U }, { num = 2 }, nil },
  { "split", { { -1, 6 } }, { num_split = 3, axis = 1 }, { -1, 2 } },
  { "split_v", { { 4, -1 } }, { size_splits = { -1, 1 }, axis = 1 }, { 4, -1 } },
  { "split_v", { { -1, 5 } }, { size_splits = { 2, -1 }, axis = 1 }, { -1, 2 } },
  { "tile", { { -1, 3 } }, { multiples = { 2, 2 } }, { -1, 6 } },
  { "tile", { U }, { multiples = { 2, 0 } }, { -1, 0 } },
  { "gather", { { 5, -1 }, { -1 } }, nil, { -1, -1 }, nil, nil, "int32" },
  { "gather", { { 5, 7, 3 }, { 2, 4 } }, { axis = -2 }, { 5, 2, 4, 3 }, nil, nil, "int64" },
  { "gather", { U, { 2 } }, nil, nil, nil, nil, "int32" },
  { "gather_nd", { { 5, 7, 3 }, { -1, 2 } }, nil, { -1, 3 }, nil, nil, "int32" },
  { "gather_nd", { { 5, 7, 3 }, { 4, -1 } }, nil, nil, nil, nil, "int32" },
  { "expand_dims", { { -1, 3 } }, { axis = 1 }, { -1, 1, 3 } },
  { "expand_dims", { U }, { axis = 0 }, nil },
  { "squeeze", { { -1, 1, 3 } }, { axis = { 1 } }, { -1, 3 } },
  { "squeeze", { { 1, -1, 3 } }, nil, nil },
  { "squeeze", { { 1, 2, 1 } }, nil, { 2 } },
  { "zeros_like", { { -1, 2 } }, nil, { -1, 2 } },
  { "ones_like", { U }, nil, nil, "int32", "int32" },
  { "depth_to_space", { { -1, 3, -1, 8 } }, { block_size = 2 }, { -1, 6, -1, 2 } },
  { "depth_to_space", { U }, { block_size = 2 }, { -1, -1, -1, -1 } },
  { "space_to_depth", { { -1, 4, 6, -1 } }, { block_size = 2 }, { -1, 2, 3, -1 } },
  { "space_to_batch_nd", { { -1, 4, 5, 3 } }, { block_shape = { 2, 3 }, paddings = { 0, 0, 1, 0 } }, { -1, 2, 2, 3 } },
  { "space_to_batch_nd", { { 2, 4, -1, 3 } }, { block_shape = { 2, 3 }, paddings = { 0, 0, 1, 0 } }, { 12, 2, -1, 3 } },
  { "batch_to_space_nd", { { -1, 2, 2, 3 } }, { block_shape = { 2, 2 }, crops = { 0, 1, 1, 0 } }, { -1, 3, 3, 3 } },
  { "top_k", { { -1, 10 } }, { k = 3 }, { -1, 3 } },
  { "top_k", { U }, { k = 3 }, nil },
  { "non_max_suppression", { { -1, 4 }, { -1 } }, { max_output_size = 5 }, { -1 }, F32, "int32" },
  { "non_max_suppression", { { -1, 4 }, { -1 } }, { max_output_size = 5, pad_to_max_output_size = true }, { 5 }, F32, "int32" },
  { "stop_gradient", { { -1, 2 } }, nil, { -1, 2 } },
}

local function placeholder(g, dt, sh, name)
  if sh == U then return g:placeholder(dt, nil, name) end
  return g:placeholder(dt, sh, name)
end

TestOps2Shapes = {}
for i, c in ipairs(shape_cases) do
  local op, in_shapes, attrs, want, in_dt, out_dt, second_dt = c[1], c[2], c[3], c[4], c[5], c[6], c[7]
  TestOps2Shapes[("test_%02d_%s"):format(i, op)] = function()
    local g = npu.Graph()
    local ins = {}
    for k, sh in ipairs(in_shapes) do
      ins[k] = placeholder(g, k == 2 and second_dt or in_dt or F32, sh, "x" .. k)
    end
    local y = g:op(op, ins, attrs)
    if not npu.is_output(y) then y = y[1] end
    lu.assertEquals(y:shape(), want, op)
    lu.assertEquals(y:dtype(), out_dt or in_dt or F32)
  end
end

-- Operands given as inputs whose values are not known when the graph is built: the dims
-- they decide are -1; the compile must know them (an error names the node otherwise).
function TestOps2Shapes.test_unknown_operand_inputs()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 4, 6 }, "x")
  local b = g:placeholder("int32", { 2 }, "b")
  local e = g:placeholder("int32", { 2 }, "e")
  local s = g:placeholder("int32", { 2 }, "s")
  lu.assertEquals(g:op("strided_slice", { x, b, e, s }):shape(), { -1, -1 })
  lu.assertEquals(g:op("strided_slice", { x, b, e, s }, { shrink_axis_mask = 2 }):shape(), { -1 })
  lu.assertEquals(g:op("tile", { x, g:placeholder("int64", { 2 }, "m") }):shape(), { -1, -1 })
  local n = g:placeholder("int32", {}, "n")
  lu.assertEquals(g:op("range", { n }, { start = 0, delta = 1 }):shape(), { -1 }) -- the input is limit
  lu.assertEquals(g:op("fill", { g:placeholder("int32", { 3 }, "d") }, { value = 1 }):shape(), { -1, -1, -1 })
  local top = g:op("top_k", { x, n }, nil, "topk")
  lu.assertEquals(top[1]:shape(), { 4, -1 })
  -- k known only when the graph runs: the step is shaped then (docs/dynamic.md)
  local sess <close> = npu.Session { graph = g }
  local xv = npu.tensor({ { 1, 5, 2, 9, 0, 3 }, { 6, 1, 1, 2, 8, 7 }, { 0, 0, 4, 0, 0, 0 },
    { 3, 2, 1, 6, 5, 4 } }, F32)
  local v = sess:run(top[1], { [x] = xv, [n] = npu.tensor(2, "int32") })
  lu.assertEquals(v:shape(), { 4, 2 })
  lu.assertEquals(v:totable(), { { 9, 5 }, { 8, 7 }, { 4, 0 }, { 6, 5 } })
  v = sess:run(top[1], { [x] = xv, [n] = npu.tensor(3, "int32") })
  lu.assertEquals(v:totable(), { { 9, 5, 3 }, { 8, 7, 6 }, { 4, 0, 0 }, { 6, 5, 4 } })
  assert_error(function()
    sess:run(top[1], { [x] = xv, [n] = npu.tensor(7, "int32") })
  end, "NPU_ERR", { "top_k", "'topk'" })
end

-- ------------------------------------------------------------------------------------------
-- Errors: status code, op name, the node and the shapes
-- ------------------------------------------------------------------------------------------

local SS = function(b, e, s, m)
  local a = copy(m or {})
  a.begin, a["end"], a.strides = b, e, s
  return a
end
local error_cases = {
  -- name, op, {input specs {shape, dtype}}, attrs, code, {parts of the message}
  { "strided_slice_no_begin", "strided_slice", { { { 3 } } }, { ["end"] = { 1 } }, "NPU_ERR_ARG", { "strided_slice", "begin" } },
  { "strided_slice_lengths", "strided_slice", { { { 3, 4 } } }, SS({ 0, 0 }, { 1 }, { 1, 1 }), "NPU_ERR_ARG",
    { "strided_slice", "[0,0]", "[1]", "length" } },
  { "strided_slice_stride0", "strided_slice", { { { 3, 4 } } }, SS({ 0, 0 }, { 1, 1 }, { 1, 0 }), "NPU_ERR_ARG",
    { "strided_slice", "stride 0", "[3,4]" } },
  { "strided_slice_two_ellipses", "strided_slice", { { { 3, 4 } } }, SS({ 0, 0 }, { 1, 1 }, { 1, 1 }, { ellipsis_mask = 3 }),
    "NPU_ERR_ARG", { "strided_slice", "ellipsis_mask 3" } },
  { "strided_slice_too_long", "strided_slice", { { { 3, 4 } } }, SS({ 0, 0, 0 }, { 1, 1, 1 }, { 1, 1, 1 }),
    "NPU_ERR_SHAPE", { "strided_slice", "[3,4]", "more entries" } },
  { "strided_slice_shrink_oob", "strided_slice", { { { 3, 4 } } }, SS({ 0, 4 }, { 1, 5 }, { 1, 1 }, { shrink_axis_mask = 2 }),
    "NPU_ERR_SHAPE", { "strided_slice", "index 4", "axis 1", "[3,4]" } },
  { "strided_slice_shrink_negative_stride", "strided_slice", { { { 3, 4 } } }, SS({ 1 }, { 0 }, { -1 }, { shrink_axis_mask = 1 }),
    "NPU_ERR_ARG", { "strided_slice", "stride" } },
  { "strided_slice_mask_range", "strided_slice", { { { 3 } } }, SS({ 0 }, { 1 }, { 1 }, { begin_mask = -1 }),
    "NPU_ERR_ARG", { "strided_slice", "begin_mask" } },
  { "strided_slice_float_begin", "strided_slice", { { { 3 } }, { { 1 } }, { { 1 }, "int32" } }, nil,
    "NPU_ERR_DTYPE", { "strided_slice", "begin", "float32" } },
  { "strided_slice_extra_input", "strided_slice", { { { 3 } }, { { 1 }, "int32" } }, SS({ 0 }, { 1 }, { 1 }),
    "NPU_ERR_ARG", { "strided_slice", "too many" } },
  { "pack_shapes", "pack", { { { 2, 3 } }, { { 3, 2 } } }, nil, "NPU_ERR_SHAPE", { "pack", "[2,3]", "[3,2]" } },
  { "pack_dtypes", "pack", { { { 2 } }, { { 2 }, "int32" } }, nil, "NPU_ERR_DTYPE", { "pack", "int32" } },
  { "pack_axis", "pack", { { { 2, 3 } }, { { 2, 3 } } }, { axis = 3 }, "NPU_ERR_ARG", { "pack", "axis 3" } },
  { "unpack_scalar", "unpack", { { {} } }, nil, "NPU_ERR_SHAPE", { "unpack", "scalar" } },
  { "unpack_num", "unpack", { { { 3, 2 } } }, { num = 2 }, "NPU_ERR_SHAPE", { "unpack", "num 2", "[3,2]" } },
  { "unpack_unknown", "unpack", { { { -1, 2 } } }, nil, "NPU_ERR_SHAPE", { "unpack", "[-1,2]", "num" } },
  { "unpack_too_many", "unpack", { { { 17 } } }, nil, "NPU_ERR_UNSUPPORTED", { "unpack", "[17]", "16" } },
  { "split_divisible", "split", { { { 5, 2 } } }, { num_split = 2 }, "NPU_ERR_SHAPE", { "split", "[5,2]", "num_split 2" } },
  { "split_num", "split", { { { 4 } } }, nil, "NPU_ERR_ARG", { "split", "num_split" } },
  { "split_no_input", "split", {}, { num_split = 2 }, "NPU_ERR_ARG", { "split", "input" } },
  { "split_axis", "split", { { { 4, 2 } } }, { num_split = 2, axis = 2 }, "NPU_ERR_ARG", { "split", "axis 2" } },
  { "split_v_sum", "split_v", { { { 5, 2 } } }, { size_splits = { 2, 2 } }, "NPU_ERR_SHAPE", { "split_v", "[2,2]", "[5,2]" } },
  { "split_v_two_unknown", "split_v", { { { 5 } } }, { size_splits = { -1, -1 } }, "NPU_ERR_ARG", { "split_v", "[-1,-1]" } },
  { "split_v_missing", "split_v", { { { 5 } } }, nil, "NPU_ERR_ARG", { "split_v", "size_splits" } },
  { "tile_len", "tile", { { { 2, 3 } } }, { multiples = { 2 } }, "NPU_ERR_SHAPE", { "tile", "[2]", "[2,3]" } },
  { "tile_negative", "tile", { { { 2, 3 } } }, { multiples = { 2, -1 } }, "NPU_ERR_ARG", { "tile", "[2,-1]" } },
  { "tile_missing", "tile", { { { 2, 3 } } }, nil, "NPU_ERR_ARG", { "tile", "multiples" } },
  { "gather_float_indices", "gather", { { { 3 } }, { { 2 } } }, nil, "NPU_ERR_DTYPE", { "gather", "float32" } },
  { "gather_axis", "gather", { { { 3, 2 } }, { { 2 }, "int32" } }, { axis = 2 }, "NPU_ERR_ARG", { "gather", "axis 2" } },
  { "gather_scalar", "gather", { { {} }, { { 2 }, "int32" } }, nil, "NPU_ERR_SHAPE", { "gather", "rank" } },
  { "gather_batch_dims", "gather", { { { 3 } }, { { 2 }, "int32" } }, { batch_dims = 1 }, "NPU_ERR_UNSUPPORTED",
    { "gather", "batch_dims" } },
  { "gather_nd_depth", "gather_nd", { { { 3, 4 } }, { { 2, 3 }, "int32" } }, nil, "NPU_ERR_SHAPE",
    { "gather_nd", "[2,3]", "[3,4]" } },
  { "gather_nd_dtype", "gather_nd", { { { 3, 4 } }, { { 2, 1 }, "float64" } }, nil, "NPU_ERR_DTYPE", { "gather_nd", "float64" } },
  { "fill_missing", "fill", {}, { dims = { 2 } }, "NPU_ERR_ARG", { "fill", "value" } },
  { "fill_negative", "fill", {}, { dims = { 2, -1 }, value = 1 }, "NPU_ERR_SHAPE", { "fill", "[2,-1]" } },
  { "fill_value_shape", "fill", { { { 2 } } }, { dims = { 2 } }, "NPU_ERR_SHAPE", { "fill", "value", "[2]" } },
  { "range_direction", "range", {}, { start = 5, limit = 1 }, "NPU_ERR_ARG", { "range", "start 5", "limit 1" } },
  { "range_delta0", "range", {}, { limit = 3, delta = 0 }, "NPU_ERR_ARG", { "range", "delta 0" } },
  { "range_no_limit", "range", {}, { start = 1 }, "NPU_ERR_ARG", { "range", "limit" } },
  { "range_dtype", "range", {}, { limit = 3, dtype = "bool" }, "NPU_ERR_DTYPE", { "range", "bool" } },
  { "expand_dims_axis", "expand_dims", { { { 2, 3 } } }, { axis = 3 }, "NPU_ERR_ARG", { "expand_dims", "axis 3" } },
  { "expand_dims_missing", "expand_dims", { { { 2, 3 } } }, nil, "NPU_ERR_ARG", { "expand_dims", "axis" } },
  { "squeeze_not_one", "squeeze", { { { 2, 3 } } }, { squeeze_dims = { 1 } }, "NPU_ERR_SHAPE", { "squeeze", "axis 1", "[2,3]" } },
  { "squeeze_both", "squeeze", { { { 1, 3 } } }, { squeeze_dims = { 0 }, axis = { 0 } }, "NPU_ERR_ARG", { "squeeze", "axis" } },
  { "depth_to_space_channels", "depth_to_space", { { { 1, 2, 2, 6 } } }, { block_size = 2 }, "NPU_ERR_SHAPE",
    { "depth_to_space", "[1,2,2,6]" } },
  { "depth_to_space_block", "depth_to_space", { { { 1, 2, 2, 4 } } }, { block_size = 1 }, "NPU_ERR_ARG", { "depth_to_space", "block_size 1" } },
  { "depth_to_space_nchw", "depth_to_space", { { { 1, 4, 2, 2 } } }, { block_size = 2, data_format = "NCHW" },
    "NPU_ERR_UNSUPPORTED", { "depth_to_space", "NCHW" } },
  { "space_to_depth_hw", "space_to_depth", { { { 1, 3, 4, 1 } } }, { block_size = 2 }, "NPU_ERR_SHAPE",
    { "space_to_depth", "[1,3,4,1]" } },
  { "space_to_depth_rank", "space_to_depth", { { { 4, 4, 1 } } }, { block_size = 2 }, "NPU_ERR_SHAPE", { "space_to_depth", "[4,4,1]" } },
  { "space_to_batch_divisible", "space_to_batch_nd", { { { 1, 5, 4, 1 } } }, { block_shape = { 2, 2 }, paddings = { 0, 0, 0, 0 } },
    "NPU_ERR_SHAPE", { "space_to_batch_nd", "[1,5,4,1]", "[2,2]" } },
  { "space_to_batch_paddings", "space_to_batch_nd", { { { 1, 4, 4, 1 } } }, { block_shape = { 2, 2 }, paddings = { 0, 0 } },
    "NPU_ERR_ARG", { "space_to_batch_nd", "paddings", "[0,0]" } },
  { "space_to_batch_block", "space_to_batch_nd", { { { 1, 4, 4, 1 } } }, { block_shape = { 0, 2 }, paddings = { 0, 0, 0, 0 } },
    "NPU_ERR_ARG", { "space_to_batch_nd", "[0,2]" } },
  { "batch_to_space_batch", "batch_to_space_nd", { { { 3, 2, 2, 1 } } }, { block_shape = { 2, 2 }, crops = { 0, 0, 0, 0 } },
    "NPU_ERR_SHAPE", { "batch_to_space_nd", "[3,2,2,1]", "[2,2]" } },
  { "batch_to_space_crops", "batch_to_space_nd", { { { 4, 2, 2, 1 } } }, { block_shape = { 2, 2 }, crops = { 3, 2, 0, 0 } },
    "NPU_ERR_SHAPE", { "batch_to_space_nd", "crops", "[3,2,0,0]" } },
  { "top_k_large", "top_k", { { { 2, 3 } } }, { k = 4 }, "NPU_ERR_SHAPE", { "top_k", "k 4", "[2,3]" } },
  { "top_k_negative", "top_k", { { { 2, 3 } } }, { k = -1 }, "NPU_ERR_ARG", { "top_k", "k -1" } },
  { "top_k_scalar", "top_k", { { {} } }, { k = 0 }, "NPU_ERR_SHAPE", { "top_k", "rank" } },
  { "top_k_bool", "top_k", { { { 3 }, "bool" } }, { k = 1 }, "NPU_ERR_DTYPE", { "top_k", "bool" } },
  { "nms_boxes", "non_max_suppression", { { { 3, 5 } }, { { 3 } } }, { max_output_size = 2 }, "NPU_ERR_SHAPE",
    { "non_max_suppression", "[3,5]", "[3]" } },
  { "nms_counts", "non_max_suppression", { { { 3, 4 } }, { { 2 } } }, { max_output_size = 2 }, "NPU_ERR_SHAPE",
    { "non_max_suppression", "[3,4]", "[2]" } },
  { "nms_iou", "non_max_suppression", { { { 3, 4 } }, { { 3 } } }, { max_output_size = 2, iou_threshold = 1.5 }, "NPU_ERR_ARG",
    { "non_max_suppression", "iou_threshold 1.5" } },
  { "nms_max", "non_max_suppression", { { { 3, 4 } }, { { 3 } } }, { max_output_size = -1 }, "NPU_ERR_ARG",
    { "non_max_suppression", "max_output_size -1" } },
  { "nms_missing", "non_max_suppression", { { { 3, 4 } }, { { 3 } } }, nil, "NPU_ERR_ARG", { "non_max_suppression", "max_output_size" } },
  { "nms_dtype", "non_max_suppression", { { { 3, 4 }, "float64" }, { { 3 } } }, { max_output_size = 1 }, "NPU_ERR_DTYPE",
    { "non_max_suppression", "float64" } },
}

TestOps2Errors = {}
for _, c in ipairs(error_cases) do
  local name, op, ins, attrs, code, parts = c[1], c[2], c[3], c[4], c[5], c[6]
  TestOps2Errors["test_" .. name] = function()
    local g = npu.Graph()
    local phs = {}
    for k, spec in ipairs(ins) do phs[k] = g:placeholder(spec[2] or F32, spec[1], "x" .. k) end
    local msg = assert_error(function() g:op(op, phs, attrs, "culprit") end, code, parts)
    lu.assertStrContains(tostring(msg), "'culprit'")
    lu.assertEquals(g:n_nodes(), #ins, msg) -- a failing add changes nothing
  end
end

-- Indices are data: out of range is an error at run time, on both paths, naming the index.
-- (enable_exception_dump 0: the failing op's dump is exception_dump_spec's subject, and would
-- write extra-info/ where the suite runs.)
function TestOps2Errors.test_gather_index_out_of_range()
  for _, path in ipairs({ "device", "reference" }) do
    local g = npu.Graph()
    local x = g:placeholder(F32, { 4, 3 }, "x")
    local i = g:placeholder("int64", { 3 }, "i")
    local y = npu.gather(x, i, { name = "pick" })
    local sess <close> = npu.Session { graph = g, options = { use_off_line = path ~= "reference",
      enable_exception_dump = 0 } }
    local xv = npu.zeros({ 4, 3 })
    lu.assertEquals(sess:run(y, { [x] = xv, [i] = npu.tensor({ 3, 0, 1 }, "int64") }):shape(), { 3, 3 })
    assert_error(function() sess:run(y, { [x] = xv, [i] = npu.tensor({ 0, 4, 1 }, "int64") }) end,
      "NPU_ERR_ARG", { "gather", "'pick'", "indices[1] = 4", "[0, 4)" })
    assert_error(function() sess:run(y, { [x] = xv, [i] = npu.tensor({ 0, 1, -1 }, "int64") }) end,
      "NPU_ERR_ARG", { "indices[2] = -1" })
  end
end

function TestOps2Errors.test_gather_nd_index_out_of_range()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 2, 3 }, "x")
  local i = g:placeholder("int32", { 2, 2 }, "i")
  local y = npu.gather_nd(x, i, { name = "pick" })
  local sess <close> = npu.Session { graph = g, options = { enable_exception_dump = 0 } }
  assert_error(function()
    sess:run(y, { [x] = npu.zeros({ 2, 3 }), [i] = npu.tensor({ { 1, 2 }, { 1, 3 } }, "int32") })
  end, "NPU_ERR_ARG", { "gather_nd", "'pick'", "tuple 1", "[1,3]", "[2,3]" })
end

-- A slice valid for the build-time shape but not for the fed one fails at compile time.
function TestOps2Errors.test_strided_slice_fed_shape()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1, 3 }, "x")
  local y = npu.strided_slice(x, { 4 }, { 5 }, nil, { shrink_axis_mask = 1, name = "row4" })
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(values(sess:run(y, { [x] = npu.tensor({ { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }, { 1, 2, 3 } }) })),
    { 1, 2, 3 })
  assert_error(function() sess:run(y, { [x] = npu.zeros({ 2, 3 }) }) end, "NPU_ERR_SHAPE",
    { "strided_slice", "'row4'", "index 4", "[2,3]" })
end

-- ------------------------------------------------------------------------------------------
-- TensorFlow's graph patterns and the Lua spellings
-- ------------------------------------------------------------------------------------------

TestOps2Api = {}

-- facemesh's chain: Shape -> StridedSlice -> Pack -> Reshape on int32 shapes, folded at
-- compile time once the feed's shape is known; the batch changes between runs.
function TestOps2Api.test_shape_strided_slice_pack_reshape_chain()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1, 4, 3 }, "x")
  local batch = npu.strided_slice(g:op("shape", { x }), { 0 }, { 1 }, { 1 }, { shrink_axis_mask = 1 })
  lu.assertEquals(batch:dtype(), "int32")
  lu.assertEquals(batch:shape(), {})
  local shape = npu.pack({ batch, g:const(npu.tensor(-1, "int32")) })
  lu.assertEquals(shape:shape(), { 2 })
  local y = g:op("reshape", { x, shape })
  lu.assertEquals(y:shape(), { -1, -1 })
  local sess <close> = npu.Session { graph = g }
  for _, n in ipairs({ 2, 5 }) do
    local data = rand_data(n, { n, 4, 3 })
    local out = sess:run(y, { [x] = npu.tensor(nest(data, { n, 4, 3 }), F32) })
    lu.assertEquals(out:shape(), { n, 12 })
    assert_close(values(out), data, 0, "reshaped")
    lu.assertEquals(values(sess:run(shape, { [x] = npu.zeros({ n, 4, 3 }) })), { n, -1 })
  end
end

function TestOps2Api.test_positional_forms()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 4, 6 }, "x")
  local img = g:placeholder(F32, { 1, 4, 4, 8 }, "img")
  local idx = g:const(npu.tensor({ 1, 3 }, "int32"))
  lu.assertEquals(npu.strided_slice(x, { 1, 0 }, { 3, 6 }, { 1, 2 }):shape(), { 2, 3 })
  lu.assertEquals(npu.strided_slice(x, { 1 }, { 2 }, { 1 }, { shrink_axis_mask = 1 }):shape(), { 6 })
  lu.assertEquals(npu.strided_slice(x, { 1 }, { 2 }, { shrink_axis_mask = 1 }):shape(), { 6 })
  lu.assertEquals(x:strided_slice({ 0 }, { 0 }, { -1 }, { begin_mask = 1, end_mask = 1 }):shape(), { 4, 6 })
  lu.assertEquals(npu.pack({ x, x, x }, 1):shape(), { 4, 3, 6 })
  local parts = npu.unpack(x, 0)
  lu.assertEquals(#parts, 4)
  lu.assertEquals(parts[1]:shape(), { 6 })
  local thirds = npu.split(x, 3, 1)
  lu.assertEquals(#thirds, 3)
  lu.assertEquals(thirds[3]:shape(), { 4, 2 })
  local pieces = x:split_v({ 1, -1 }, 1)
  lu.assertEquals(pieces[2]:shape(), { 4, 5 })
  lu.assertEquals(npu.tile(x, { 2, 1 }):shape(), { 8, 6 })
  lu.assertEquals(npu.gather(x, idx, 1):shape(), { 4, 2 })
  lu.assertEquals(npu.gather(x, idx):shape(), { 2, 6 })
  lu.assertEquals(npu.gather_nd(x, g:const(npu.tensor({ { 0, 1 } }, "int32"))):shape(), { 1 })
  lu.assertEquals(npu.expand_dims(x, 0):shape(), { 1, 4, 6 })
  lu.assertEquals(npu.squeeze(npu.expand_dims(x, -1), { 2 }):shape(), { 4, 6 })
  lu.assertEquals(npu.zeros_like(x):shape(), { 4, 6 })
  lu.assertEquals(x:ones_like():dtype(), F32)
  lu.assertEquals(npu.depth_to_space(img, 2):shape(), { 1, 8, 8, 2 })
  lu.assertEquals(npu.space_to_depth(img, 2):shape(), { 1, 2, 2, 32 })
  lu.assertEquals(npu.space_to_batch_nd(img, { 2, 2 }, { { 0, 0 }, { 1, 1 } }):shape(), { 4, 2, 3, 8 })
  lu.assertEquals(npu.batch_to_space_nd(img, { 1, 1 }, { { 1, 0 }, { 0, 2 } }):shape(), { 1, 3, 2, 8 })
  local top = npu.top_k(x, 2)
  lu.assertEquals(top[1]:shape(), { 4, 2 })
  lu.assertEquals(top[2]:dtype(), "int32")
  local nms = npu.non_max_suppression(g:placeholder(F32, { 7, 4 }, "b"), g:placeholder(F32, { 7 }, "s"), 3, 0.4)
  lu.assertEquals(nms[1]:shape(), { -1 }) -- the count kept: known when it runs
  lu.assertEquals(nms[2]:shape(), { -1 })
  lu.assertEquals(nms[3]:shape(), {})
  lu.assertEquals(npu.stop_gradient(x):shape(), { 4, 6 })
  -- no data inputs: the generic form (npu.fill and npu.range build tensors)
  lu.assertEquals(g:op("fill", {}, { dims = { 2, 2 }, value = 0.5 }):shape(), { 2, 2 })
  lu.assertEquals(g:op("range", {}, { start = 0, limit = 10, delta = 3 }):shape(), { 4 })
end

-- The operand rule (operands.h): inputs give, in TF order, the operands not given as
-- attributes -- how the importer leaves TF's non-constant inputs.
function TestOps2Api.test_operands_mixed_attributes_and_inputs()
  local g = npu.Graph()
  local r = g:op("range", { g:const(npu.tensor(7, "int32")), g:const(npu.tensor(2, "int32")) }, { start = 1 })
  local f = g:op("fill", { g:const(npu.tensor(9, "int64")) }, { dims = { 3 } })
  local x = g:placeholder(F32, { 5, 4 }, "x")
  local s = g:op("strided_slice", { x, g:const(npu.tensor({ 4, 3 }, "int32")) }, { begin = { 1, 0 }, strides = { 2, 1 } })
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(values(sess:run(r)), { 1, 3, 5 })
  lu.assertEquals(sess:run(f):dtype(), "int64")
  lu.assertEquals(values(sess:run(f)), { 9, 9, 9 })
  local data = rand_data(3, { 5, 4 })
  local got = values(sess:run(s, { [x] = npu.tensor(nest(data, { 5, 4 }), F32) }))
  assert_close(got, (ref.strided_slice(data, { 5, 4 }, { 1, 0 }, { 4, 3 }, { 2, 1 })), 0, "mixed strided_slice")
end

function TestOps2Api.test_non_max_suppression_padding_and_count()
  local g = npu.Graph()
  local b = g:placeholder(F32, { -1, 4 }, "boxes")
  local s = g:placeholder(F32, { -1 }, "scores")
  local nms = npu.non_max_suppression(b, s, 4, 0.5, 0.1, { pad_to_max_output_size = true })
  local sess <close> = npu.Session { graph = g }
  local out = sess:run(nms, { [b] = npu.tensor({ { 0, 0, 2, 2 }, { 0, 0, 2, 2.1 }, { 3, 3, 4, 4 } }, F32),
    [s] = npu.tensor({ 0.5, 0.8, 0.05 }, F32) })
  lu.assertEquals(values(out[1]), { 1, 0, 0, 0 }) -- box 0 overlaps box 1; box 2 is below 0.1
  lu.assertEquals(out[3]:item(), 1)
  -- no boxes at all: everything is padding
  out = sess:run(nms, { [b] = npu.zeros({ 0, 4 }), [s] = npu.zeros({ 0 }) })
  lu.assertEquals(values(out[1]), { 0, 0, 0, 0 })
  lu.assertEquals(out[3]:item(), 0)
end

function TestOps2Api.test_top_k_nan_and_ties()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 6 }, "x")
  local top = npu.top_k(x, 4)
  for _, path in ipairs({ "device", "reference" }) do
    local sess <close> = npu.Session { graph = g, options = path == "reference" and { use_off_line = false } or nil }
    local out = sess:run(top, { [x] = npu.tensor({ 1, 0 / 0, 3, 3, 0 / 0, -1 }, F32) })
    lu.assertEquals(values(out[2]), { 1, 4, 2, 3 }, path)
  end
end

-- zeros_like / ones_like depend only on the shape: folded at compile time, x never read.
function TestOps2Api.test_like_ops_fold()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1, 2 }, "x")
  local y = npu.ones_like(x) + npu.zeros_like(x)
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(values(sess:run(y, { [x] = npu.zeros({ 3, 2 }) })), { 1, 1, 1, 1, 1, 1 })
  lu.assertTrue(sess:last_plan().folded >= 2)
end

function TestOps2Api.test_tf_types_and_lists()
  local want = {
    pack = "Pack", unpack = "Unpack", strided_slice = "StridedSlice", gather = "GatherV2",
    gather_nd = "GatherNd", split = "Split", split_v = "SplitV", tile = "Tile", fill = "Fill",
    range = "Range", expand_dims = "ExpandDims", squeeze = "Squeeze", zeros_like = "ZerosLike",
    ones_like = "OnesLike", depth_to_space = "DepthToSpace", space_to_depth = "SpaceToDepth",
    space_to_batch_nd = "SpaceToBatchND", batch_to_space_nd = "BatchToSpaceND", top_k = "TopKV2",
    non_max_suppression = "NonMaxSuppressionV5", stop_gradient = "StopGradient",
  }
  for name, tf in pairs(want) do lu.assertEquals(npu.ops[name].tf_type, tf, name) end
  for name in pairs(want) do
    lu.assertEquals(npu.ops[name].precision_list, name == "non_max_suppression" and "block" or "gray", name)
  end
  lu.assertEquals(npu.ops.unpack.n_outputs, -1)
  lu.assertEquals(npu.ops.strided_slice.args, { "begin", "end", "strides" })
end

-- ------------------------------------------------------------------------------------------
-- Gradients through the ops that have one
-- ------------------------------------------------------------------------------------------

TestOps2Grad = {}

function TestOps2Grad.test_pack_unpack_split_expand_squeeze()
  local g = npu.Graph()
  local x = g:placeholder("float64", { 2, 3 }, "x")
  local w = npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, "float64")
  local function grad_of(y) return npu.gradients(npu.reduce_sum(y), x)[1] end
  local parts = npu.unpack(x, 1)
  local thirds = npu.split(x, 3, 1)
  local uneven = npu.split_v(x, { 2, 1 }, 1)
  local d = {
    pack = grad_of(npu.pack({ x, x * w }, 0)),
    unpack = grad_of(parts[2] * 3),
    split = grad_of(thirds[1] + thirds[3] * 2),
    split_v = grad_of(uneven[2] * 5),
    expand = grad_of(npu.expand_dims(x * w, 1)),
    squeeze = grad_of(npu.squeeze(npu.expand_dims(x, 0) * w)),
    stop = grad_of(x * npu.stop_gradient(x)),
  }
  local sess <close> = npu.Session { graph = g }
  local xv = npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, "float64")
  local r = sess:run(d, { [x] = xv })
  lu.assertEquals(values(r.pack), { 2, 3, 4, 5, 6, 7 })
  lu.assertEquals(values(r.unpack), { 0, 3, 0, 0, 3, 0 })
  lu.assertEquals(values(r.split), { 1, 0, 2, 1, 0, 2 })
  lu.assertEquals(values(r.split_v), { 0, 0, 5, 0, 0, 5 })
  lu.assertEquals(values(r.expand), { 1, 2, 3, 4, 5, 6 })
  lu.assertEquals(values(r.squeeze), { 1, 2, 3, 4, 5, 6 })
  lu.assertEquals(values(r.stop), { 1, 2, 3, 4, 5, 6 })
end
