-- spec/ops4_spec.lua — the ops added for TensorFlow imports and ported TF 1.15 scripts (the
-- last block of csrc/ops/ops.def): ceil, broadcast_to, sparse_to_dense, in_top_k, int32
-- matmul / batch_matmul; the Lua composites of lua/npu/tf_extra.lua (clip_by_value,
-- assign_add / assign_sub, stack / unstack, npu.range over graph outputs); their import from
-- TensorFlow graphs (BroadcastTo, Ceil, SparseToDense, int32 MatMul, InTopKV2 / InTopK,
-- ClipByValue, AssignAdd / AssignSub, Range of tensors) and the round trip through .pb.
--
-- Forward values are checked against values computed by hand (or by naive loops here), on the
-- device path and the host reference path (use_off_line = false); errors carry the status code
-- and name the node; gradients against central differences (float64).
local lu = require("luaunit")
local npu = require("npu")
local model = require("npu.model")

local S = dofile(SPEC_DIR .. "/support.lua")
local flatten = S.flatten

local function run_both(g, fetches, feeds)
  local out = {}
  for _, opts in ipairs({ {}, { use_off_line = false } }) do
    local sess <close> = npu.Session { graph = g, options = opts }
    out[#out + 1] = sess:run(fetches, feeds)
  end
  return out[1], out[2]
end

local expect_error = S.expect_error

local function values(t) return t:totable() end

-- ---- forward ------------------------------------------------------------------------------

TestOps4Forward = {}

-- { name, build(g) -> output, expected table, expected dtype }
local forward = {
  { "ceil_f32", function(g)
    return npu.ceil(g:const(npu.tensor({ -1.5, -0.5, 0, 0.25, 2, 1e9 + 0.5, math.huge, -math.huge }, "float32")))
  end, { -1, -0.0, 0, 1, 2, 1e9, math.huge, -math.huge }, "float32" },
  { "ceil_f64", function(g)
    return npu.ceil(g:const(npu.tensor({ { -2.25, 3.000001 }, { 7, -0.0 } }, "float64")))
  end, { { -2, 4 }, { 7, -0.0 } }, "float64" },
  { "broadcast_to_attr", function(g)
    return npu.broadcast_to(g:const(npu.tensor({ { 1 }, { 2 } }, "float32")), { 3, 2, 2 })
  end, { { { 1, 1 }, { 2, 2 } }, { { 1, 1 }, { 2, 2 } }, { { 1, 1 }, { 2, 2 } } }, "float32" },
  { "broadcast_to_input_int", function(g)
    local shape = g:const(npu.tensor({ 2, 3 }, "int64"))
    return g:op("broadcast_to", { g:const(npu.tensor({ 4, 5, 6 }, "int32")), shape })
  end, { { 4, 5, 6 }, { 4, 5, 6 } }, "int32" },
  { "broadcast_to_scalar", function(g)
    return npu.broadcast_to(g:const(npu.tensor(true, "bool")), { 2 })
  end, { true, true }, "bool" },
  { "sparse_to_dense_matrix", function(g)
    return npu.sparse_to_dense(g:const(npu.tensor({ { 0, 1 }, { 1, 0 }, { 2, 1 } }, "int32")), { 3, 2 },
      g:const(npu.tensor({ 5, 6, 7 }, "float32")), -1)
  end, { { -1, 5 }, { 6, -1 }, { -1, 7 } }, "float32" },
  { "sparse_to_dense_vector_scalar_value_i64", function(g)
    return npu.sparse_to_dense(g:const(npu.tensor({ 1, 3 }, "int64")), { 5 },
      g:const(npu.tensor(9, "int32")), g:const(npu.tensor(2, "int32")))
  end, { 2, 9, 2, 9, 2 }, "int32" },
  { "sparse_to_dense_scalar_index", function(g)
    return npu.sparse_to_dense(g:const(npu.tensor(2, "int32")), { 4 }, g:const(npu.tensor(1.5, "float64")), 0)
  end, { 0, 0, 1.5, 0 }, "float64" },
  { "sparse_to_dense_repeats_unvalidated", function(g)
    return npu.sparse_to_dense(g:const(npu.tensor({ 2, 0, 2 }, "int32")), { 3 },
      g:const(npu.tensor({ 1, 2, 3 }, "float32")), 0, false)
  end, { 2, 0, 3 }, "float32" },
  { "sparse_to_dense_shape_input", function(g)
    return g:op("sparse_to_dense", { g:const(npu.tensor({ 1 }, "int32")), g:const(npu.tensor({ 2 }, "int32")),
      g:const(npu.tensor({ 4 }, "float32")), g:const(npu.tensor(0, "float32")) })
  end, { 0, 4 }, "float32" },
  { "in_top_k_ties_nan_range", function(g)
    local p = g:const(npu.tensor({ { 1, 3, 3, 0 }, { 1, 3, 3, 0 }, { 1, 3, 3, 0 }, { 5, 1, 2, 0 / 0 },
      { 1, 2, 3, 4 }, { 1, 2, 3, math.huge } }, "float32"))
    local t = g:const(npu.tensor({ 1, 2, 0, 3, 4, 3 }, "int32"))
    return npu.in_top_k(p, t, 1)
  end, { true, true, false, false, false, false }, "bool" },
  { "in_top_k_k_input_i64", function(g)
    local p = g:const(npu.tensor({ { 0.1, 0.5, 0.4 }, { 0.3, 0.3, 0.4 } }, "float32"))
    local t = g:const(npu.tensor({ 2, 0 }, "int64"))
    return g:op("in_top_k", { p, t, g:const(npu.tensor(2, "int64")) })
  end, { true, true }, "bool" },
  { "in_top_k_k0", function(g)
    return npu.in_top_k(g:const(npu.tensor({ { 1, 2 } }, "float32")), g:const(npu.tensor({ 1 }, "int32")), 0)
  end, { false }, "bool" },
  { "matmul_i32", function(g)
    local a = g:const(npu.tensor({ { 1, 2, 3 }, { -4, 5, 6 } }, "int32"))
    local b = g:const(npu.tensor({ { 7, 8 }, { 9, 10 }, { 11, -12 } }, "int32"))
    return npu.matmul(a, b)
  end, { { 58, -8 }, { 83, -54 } }, "int32" },
  { "matmul_i32_transposes", function(g)
    local a = g:const(npu.tensor({ { 1, -4 }, { 2, 5 }, { 3, 6 } }, "int32"))
    local b = g:const(npu.tensor({ { 7, 9, 11 }, { 8, 10, -12 } }, "int32"))
    return npu.matmul(a, b, { transpose_a = true, transpose_b = true })
  end, { { 58, -8 }, { 83, -54 } }, "int32" },
  { "matmul_i32_wraps", function(g)
    local a = g:const(npu.tensor({ { 65536, 2 } }, "int32"))
    local b = g:const(npu.tensor({ { 65536 }, { 2147483647 } }, "int32"))
    -- 2^32 + 2 * (2^31 - 1) = 2^32 + 2^32 - 2 = -2 modulo 2^32
    return npu.matmul(a, b)
  end, { { -2 } }, "int32" },
  { "batch_matmul_i32_broadcast", function(g)
    local a = g:const(npu.tensor({ { { 1, 2 } }, { { 3, 4 } } }, "int32")) -- (2, 1, 2)
    local b = g:const(npu.tensor({ { 1, 0 }, { 0, -1 } }, "int32"))        -- (2, 2)
    return npu.batch_matmul(a, b)
  end, { { { 1, -2 } }, { { 3, -4 } } }, "int32" },
}

for _, c in ipairs(forward) do
  local name, build, want, dtype = table.unpack(c)
  TestOps4Forward["test_" .. name] = function()
    local g = npu.Graph()
    local y = build(g)
    lu.assertEquals(y:dtype(), dtype)
    local dev, ref = run_both(g, y)
    lu.assertEquals(dev:totable(), want, name .. " (device)")
    lu.assertEquals(ref:totable(), want, name .. " (reference)")
    if name:match("^ceil") then -- the sign of zero
      local w, d = flatten(want), flatten(dev:totable())
      for i = 1, #w do
        if w[i] == 0 then lu.assertEquals(1 / d[i], 1 / w[i], name .. ": signed zero") end
      end
    end
  end
end

-- Larger int32 products against naive loops (device and reference agree bit for bit).
function TestOps4Forward.test_matmul_i32_against_loops()
  local r = S.lcg(77)
  local m, k, n = 5, 7, 3
  local A, B = {}, {}
  for i = 1, m do A[i] = {} for j = 1, k do A[i][j] = r() % 2001 - 1000 end end
  for i = 1, k do B[i] = {} for j = 1, n do B[i][j] = r() % 2001 - 1000 end end
  local want = {}
  for i = 1, m do
    want[i] = {}
    for j = 1, n do
      local s = 0
      for p = 1, k do s = s + A[i][p] * B[p][j] end
      want[i][j] = s
    end
  end
  local g = npu.Graph()
  local y = npu.matmul(g:const(npu.tensor(A, "int32")), g:const(npu.tensor(B, "int32")))
  local dev, ref = run_both(g, y)
  lu.assertEquals(dev:totable(), want)
  lu.assertEquals(ref:totable(), want)
  -- the precision pass leaves integer products alone
  local sess <close> = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  lu.assertEquals(sess:run(y):totable(), want)
end

-- At size: K = 1500 with values up to 2^20, so partial sums pass 2^31 and wrap (TensorFlow's
-- int32 MatMul wraps modulo 2^32); batch_matmul with a broadcast batch and adj_x / adj_y.
-- The oracle: Lua's 64-bit integers, wrapped to int32 once at the end (exact: |sum| < 2^63).
local function wrap32(v)
  v = v & 0xffffffff
  return v >= 0x80000000 and v - 0x100000000 or v
end

function TestOps4Forward.test_matmul_i32_wraps_at_size()
  local r = S.lcg(91)
  local m, k, n = 3, 1500, 4
  local A, B = {}, {}
  for i = 1, m do A[i] = {} for j = 1, k do A[i][j] = r() % (1 << 21) - (1 << 20) end end
  for i = 1, k do B[i] = {} for j = 1, n do B[i][j] = r() % (1 << 21) - (1 << 20) end end
  local want, wrapped = {}, 0
  for i = 1, m do
    want[i] = {}
    for j = 1, n do
      local s = 0
      for p = 1, k do s = s + A[i][p] * B[p][j] end
      want[i][j] = wrap32(s)
      if want[i][j] ~= s then wrapped = wrapped + 1 end
    end
  end
  lu.assertEquals(wrapped, m * n) -- every sum left int32's range
  local g = npu.Graph()
  local a, b = g:const(npu.tensor(A, "int32")), g:const(npu.tensor(B, "int32"))
  -- transposed operands: the same product read the other way
  local At, Bt = {}, {}
  for j = 1, k do At[j] = {} for i = 1, m do At[j][i] = A[i][j] end end
  for j = 1, n do Bt[j] = {} for p = 1, k do Bt[j][p] = B[p][j] end end
  local y = npu.matmul(a, b)
  local yt = npu.matmul(g:const(npu.tensor(At, "int32")), g:const(npu.tensor(Bt, "int32")),
    { transpose_a = true, transpose_b = true })
  -- batch_matmul: x (2, m, k) against y (k, n) broadcast over the batch, adj_y on (n, k)
  local X = { A, {} }
  for i = 1, m do X[2][i] = {} for p = 1, k do X[2][i][p] = wrap32(A[i][p] * 3 + 1) end end
  local bm = g:op("batch_matmul", { g:const(npu.tensor(X, "int32")), g:const(npu.tensor({ Bt }, "int32")) },
    { adj_y = true })
  local want2 = {}
  for i = 1, m do
    want2[i] = {}
    for j = 1, n do
      local s = 0
      for p = 1, k do s = s + X[2][i][p] * B[p][j] end
      want2[i][j] = wrap32(s)
    end
  end
  for _, res in ipairs({ { run_both(g, { y, yt, bm }) } }) do
    for _, out in ipairs(res) do
      lu.assertEquals(out[1]:totable(), want)
      lu.assertEquals(out[2]:totable(), want)
      lu.assertEquals(out[3]:totable(), { want, want2 })
    end
  end
end

function TestOps4Forward.test_tf_types_and_table()
  local want = { ceil = "Ceil", broadcast_to = "BroadcastTo", sparse_to_dense = "SparseToDense", in_top_k = "InTopKV2" }
  for name, tf in pairs(want) do lu.assertEquals(npu.ops[name].tf_type, tf, name) end
  lu.assertEquals(npu.ops.broadcast_to.args, { "shape" })
  lu.assertEquals(npu.ops.in_top_k.args, { "k" })
  lu.assertEquals(npu.ops.in_top_k.precision_list, "block")
  lu.assertIs(npu.math.ceil, npu.ceil)
  lu.assertIs(npu.nn.in_top_k, npu.in_top_k)
end

-- Shapes known only in part while building.
function TestOps4Forward.test_inference_with_unknown_dims()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 1 }, "x")
  lu.assertEquals(npu.broadcast_to(x, { 4, 2, 3 }):shape(), { 4, 2, 3 })
  local p = g:placeholder("float32", { -1, 10 }, "p")
  local t = g:placeholder("int32", { -1 }, "t")
  lu.assertEquals(npu.in_top_k(p, t, 3):shape(), { -1 })
  local n = g:placeholder("int32", { 2 }, "n")
  lu.assertEquals(g:op("broadcast_to", { x, n }):shape(), { -1, -1 })
end

-- ---- errors -------------------------------------------------------------------------------

TestOps4Errors = {}

function TestOps4Errors.test_build_time()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  expect_error("NPU_ERR_SHAPE", { "broadcast_to", "[2,3]", "[4,3,2]" }, npu.broadcast_to, x, { 4, 3, 2 })
  expect_error("NPU_ERR_SHAPE", { "broadcast_to", "cannot be broadcast" }, npu.broadcast_to, x, { 3 })
  expect_error("NPU_ERR_ARG", { "broadcast_to", "shape is required" }, g.op, g, "broadcast_to", { x }, {})
  expect_error("NPU_ERR_ARG", { "broadcast_to", ">= 0" }, npu.broadcast_to, x, { -1, 3 })
  expect_error("NPU_ERR_DTYPE", { "ceil", "int32" }, npu.ceil, g:placeholder("int32", { 2 }))
  local t = g:placeholder("int32", { 2 }, "t")
  expect_error("NPU_ERR_DTYPE", { "in_top_k", "float64" }, npu.in_top_k, g:placeholder("float64", { 2, 3 }), t, 1)
  expect_error("NPU_ERR_DTYPE", { "in_top_k", "float32" }, npu.in_top_k, x, g:placeholder("float32", { 2 }), 1)
  expect_error("NPU_ERR_SHAPE", { "in_top_k", "[2,3]", "[3]" }, npu.in_top_k, x, g:placeholder("int32", { 3 }), 1)
  expect_error("NPU_ERR_ARG", { "in_top_k", "k is required" }, g.op, g, "in_top_k", { x, t }, {})
  local idx = g:const(npu.tensor({ { 0, 1 } }, "int32"))
  local v = g:const(npu.tensor({ 1 }, "float32"))
  expect_error("NPU_ERR_SHAPE", { "sparse_to_dense", "output_shape [4]" }, npu.sparse_to_dense, idx, { 4 }, v, 0)
  expect_error("NPU_ERR_DTYPE", { "sparse_to_dense", "float32", "int32" }, npu.sparse_to_dense, idx, { 2, 2 }, v,
    g:const(npu.tensor(0, "int32")))
  expect_error("NPU_ERR_SHAPE", { "sparse_to_dense", "one value per index" }, npu.sparse_to_dense, idx, { 2, 2 },
    g:const(npu.tensor({ 1, 2 }, "float32")), 0)
  expect_error("NPU_ERR_ARG", { "sparse_to_dense", "got 2 input(s)" }, g.op, g, "sparse_to_dense", { idx, v }, { output_shape = { 2 } })
  expect_error("NPU_ERR_DTYPE", { "matmul", "int64" }, npu.matmul, g:placeholder("int64", { 2, 2 }), g:placeholder("int64", { 2, 2 }))
  expect_error("NPU_ERR_DTYPE", { "matmul" }, npu.matmul, g:placeholder("int32", { 2, 2 }), g:placeholder("float32", { 2, 2 }))
end

-- An index outside output_shape, repeated or out of order: NPU_ERR_ARG at run time naming the
-- node and the index.  (enable_exception_dump 0: the failing op's dump would write extra-info/
-- where the suite runs.)
function TestOps4Errors.test_sparse_to_dense_bad_indices()
  local g = npu.Graph()
  local idx = g:placeholder("int32", { 2, 2 }, "idx")
  local y = npu.sparse_to_dense(idx, { 3, 2 }, 1.0, 0, true, "dense")
  for _, opts in ipairs({ { enable_exception_dump = 0 }, { use_off_line = false, enable_exception_dump = 0 } }) do
    local sess <close> = npu.Session { graph = g, options = opts }
    expect_error("NPU_ERR_ARG", { "sparse_to_dense 'dense'", "index 1, [3,0]", "outside the output shape [3,2]" },
      sess.run, sess, y, { [idx] = npu.tensor({ { 0, 1 }, { 3, 0 } }, "int32") })
    expect_error("NPU_ERR_ARG", { "'dense'", "index 0, [0,-1]" },
      sess.run, sess, y, { [idx] = npu.tensor({ { 0, -1 }, { 1, 0 } }, "int32") })
    expect_error("NPU_ERR_ARG", { "'dense'", "index 1, [0,1]", "repeats", "validate_indices=false" },
      sess.run, sess, y, { [idx] = npu.tensor({ { 0, 1 }, { 0, 1 } }, "int32") })
    expect_error("NPU_ERR_ARG", { "'dense'", "index 1, [0,0]", "out of order" },
      sess.run, sess, y, { [idx] = npu.tensor({ { 1, 1 }, { 0, 0 } }, "int32") })
    lu.assertEquals(sess:run(y, { [idx] = npu.tensor({ { 0, 0 }, { 2, 1 } }, "int32") }):totable(),
      { { 1, 0 }, { 0, 0 }, { 0, 1 } })
  end
end

-- ---- gradients (central differences, float64) ---------------------------------------------

TestOps4Grad = {}

local function check_grad(shape, f, data)
  local g = npu.Graph()
  local x = g:placeholder("float64", shape, "x")
  local y = f(x)
  local r = S.lcg(5)
  local R = {}
  for i = 1, S.numel(y:shape()) do R[i] = (r() % 17 - 8) / 4 end
  local L = npu.reduce_sum(y * g:const(npu.tensor(S.nest(R, y:shape()), "float64")))
  local dx = npu.gradients(L, { x })[1]
  local sess <close> = npu.Session { graph = g }
  local function fed(v) return npu.tensor(S.nest(v, shape), "float64") end
  local analytic = flatten(sess:run(dx, { [x] = fed(data) }):totable())
  local numeric = S.central_differences(sess, L, {}, x, data, fed, 1e-6)
  for i = 1, #data do
    lu.assertAlmostEquals(analytic[i], numeric[i], 1e-6 * (1 + math.abs(numeric[i])), "element " .. i)
  end
end

function TestOps4Grad.test_broadcast_to()
  check_grad({ 2, 1 }, function(x) return npu.broadcast_to(x, { 3, 2, 4 }) end, { 0.5, -1.25 })
  check_grad({ 3 }, function(x) return npu.broadcast_to(x, { 2, 3 }) end, { 0.5, -1.25, 2 })
end

-- clip_by_value passes the gradient where min <= t <= max (TensorFlow's composite): inputs
-- kept away from the bounds by more than h.
function TestOps4Grad.test_clip_by_value()
  check_grad({ 5 }, function(x) return npu.clip_by_value(x, -1, 1.5) end, { -2, -0.5, 0.25, 1.25, 3 })
  local g = npu.Graph()
  local x = g:placeholder("float64", { 4 }, "x")
  local d = npu.gradients(npu.reduce_sum(npu.clip_by_value(x, -1, 1)), { x })[1]
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(d, { [x] = npu.tensor({ -3, -0.5, 0.5, 3 }, "float64") }):totable(), { 0, 1, 1, 0 })
end

-- ---- the Lua composites --------------------------------------------------------------------

TestOps4Lua = {}

function TestOps4Lua.test_clip_by_value_values_and_tensor_bounds()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local lo = g:const(npu.tensor({ 0, -1, -2 }, "float32"))
  local y = npu.clip_by_value(x, lo, 1, "clipped")
  lu.assertEquals(y:op():name(), "clipped")
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(y, { [x] = npu.tensor({ { -3, -3, -3 }, { 0.5, 2, -1.5 } }, "float32") }):totable(),
    { { 0, -1, -2 }, { 0.5, 1, -1.5 } })
end

-- assign_add reads the variable's value of this run: each run adds once more.
function TestOps4Lua.test_assign_add_and_sub()
  local g = npu.Graph()
  local v = g:variable(npu.tensor({ 1, 2 }, "float32"), "v")
  local w = g:variable(npu.tensor(10, "int32"), "w")
  local add = v:assign_add({ 0.5, 1 })
  local sub = npu.assign_sub(w, 3, "w_sub")
  lu.assertEquals(sub:op():name(), "w_sub")
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  lu.assertEquals(sess:run(add):totable(), { 1.5, 3 })
  lu.assertEquals(sess:run(add):totable(), { 2, 4 })
  lu.assertEquals(sess:run(sub):totable(), 7)
  lu.assertEquals(sess:run({ sub, v })[2]:totable(), { 2, 4 })
  lu.assertEquals(sess:run(w):totable(), 4)
  lu.assertEquals(v:assign_sub(v):graph(), g)
end

function TestOps4Lua.test_stack_unstack()
  local g = npu.Graph()
  local a = g:const(npu.tensor({ 1, 2 }, "float32"))
  local b = g:const(npu.tensor({ 3, 4 }, "float32"))
  local s0, s1 = npu.stack({ a, b }), npu.stack({ a, b }, 1, "st")
  lu.assertEquals(s1:op():name(), "st")
  local parts = npu.unstack(s1, 2)
  lu.assertEquals(#parts, 2)
  local sess <close> = npu.Session { graph = g }
  local r = sess:run({ s0, s1, parts[1], parts[2] })
  lu.assertEquals(values(r[1]), { { 1, 2 }, { 3, 4 } })
  lu.assertEquals(values(r[2]), { { 1, 3 }, { 2, 4 } })
  lu.assertEquals(values(r[3]), { 1, 3 })
  lu.assertEquals(values(r[4]), { 2, 4 })
  expect_error(nil, { "npu.unstack", "num is 3" }, function() npu.unstack(s1, 3) end)
end

-- npu.range: a tensor from numbers; a range op from graph outputs, whose length is known when
-- the graph compiles (constants, folded values) or, from a fed value, when it runs.
function TestOps4Lua.test_range_over_outputs()
  lu.assertEquals(npu.range(4):totable(), { 0, 1, 2, 3 })
  lu.assertEquals(npu.range(1, 2, 0.25):totable(), { 1, 1.25, 1.5, 1.75 })
  local g = npu.Graph()
  local n = g:const(npu.tensor(3, "int32"))
  local r1 = npu.range(n)
  local r2 = npu.range(n, n * 3, 2)
  local r3 = npu.range(g:const(npu.tensor(0.5, "float32")), 2.0, nil, nil, "r3")
  lu.assertEquals(r3:op():name(), "r3")
  local sess <close> = npu.Session { graph = g }
  local r = sess:run({ r1, r2, r3 })
  lu.assertEquals(values(r[1]), { 0, 1, 2 })
  lu.assertEquals(values(r[2]), { 3, 5, 7 })
  lu.assertEquals(values(r[3]), { 0.5, 1.5 })
  local p = g:placeholder("int32", {}, "p")
  local rp = npu.range(p)
  local sess2 <close> = npu.Session { graph = g }
  lu.assertEquals(values(sess2:run(rp, { [p] = npu.tensor(4, "int32") })), { 0, 1, 2, 3 })
  lu.assertEquals(values(sess2:run(rp, { [p] = npu.tensor(2, "int32") })), { 0, 1 })
end

-- ---- import and export ---------------------------------------------------------------------

TestOps4Import = {}

local FLOAT, INT32 = S.tfjson.FLOAT, S.tfjson.INT32
local json_graph, jplaceholder, jnode, jconst = S.tfjson.graph, S.tfjson.placeholder, S.tfjson.node, S.tfjson.const

local function run(g, fetches, feeds)
  local sess <close> = npu.Session { graph = g }
  return sess:run(fetches, feeds)
end

-- Every new type imports, computes TensorFlow's values, and the .pb export re-imports to the
-- same values.
function TestOps4Import.test_new_types_and_round_trip()
  local g = model.import_graph_def(json_graph({
    jplaceholder("x", { 2, 1 }), jplaceholder("p", { 2, 3 }), jplaceholder("ix", { 2, 2 }, "DT_INT32"),
    jconst("shape", "DT_INT32", { 2 }, { 2, 3 }),
    jnode("bt", "BroadcastTo", { "x", "shape" }, '"T": ' .. FLOAT .. ', "Tidx": ' .. INT32),
    jnode("ce", "Ceil", { "x" }),
    jconst("idx", "DT_INT32", { 2, 2 }, { 0, 0, 1, 2 }), jconst("oshape", "DT_INT32", { 2 }, { 2, 3 }),
    jconst("vals", "DT_FLOAT", { 2 }, { 7, 8 }), jconst("dflt", "DT_FLOAT", {}, { -1 }),
    jnode("s2d", "SparseToDense", { "idx", "oshape", "vals", "dflt" },
      '"T": ' .. FLOAT .. ', "Tindices": ' .. INT32 .. ', "validate_indices": {"b": true}'),
    jnode("mm", "MatMul", { "ix", "ix" }, '"T": ' .. INT32 .. ', "transpose_a": {"b": false}, "transpose_b": {"b": true}'),
    jconst("targets", "DT_INT32", { 2 }, { 2, 0 }), jconst("k", "DT_INT32", {}, { 1 }),
    jnode("itk2", "InTopKV2", { "p", "targets", "k" }, '"T": ' .. INT32),
    jnode("itk1", "InTopK", { "p", "targets" }, '"T": ' .. INT32 .. ', "k": {"i": "2"}'),
    jconst("lo", "DT_FLOAT", {}, { 0 }), jconst("hi", "DT_FLOAT", {}, { 0.5 }),
    jnode("clip", "ClipByValue", { "p", "lo", "hi" }),
    jconst("three", "DT_INT32", {}, { 3 }), jconst("one", "DT_INT32", {}, { 1 }), jconst("zero", "DT_INT32", {}, { 0 }),
    jnode("twice", "Mul", { "three", "three" }, '"T": ' .. INT32),
    jnode("rng", "Range", { "zero", "twice", "three" }, '"Tidx": ' .. INT32),
    jnode("st", "Pack", { "x", "x" }, '"T": ' .. FLOAT .. ', "N": {"i": "2"}, "axis": {"i": "0"}'),
    jnode("us", "Unpack", { "st" }, '"T": ' .. FLOAT .. ', "num": {"i": "2"}, "axis": {"i": "0"}'),
  }))
  lu.assertEquals(g:get_operation_by_name("clip"):type(), "minimum")
  lu.assertEquals(g:get_operation_by_name("clip/maximum"):type(), "maximum")
  local fetches = { "bt:0", "ce:0", "s2d:0", "mm:0", "itk2:0", "itk1:0", "clip:0", "rng:0", "us:1" }
  local feeds = {
    ["x:0"] = npu.tensor({ { 0.5 }, { -1.5 } }, "float32"),
    ["p:0"] = npu.tensor({ { 0.1, 0.7, 0.2 }, { 0.4, 0.4, 0.2 } }, "float32"),
    ["ix:0"] = npu.tensor({ { 1, 2 }, { 3, 4 } }, "int32"),
  }
  local want = {
    { { 0.5, 0.5, 0.5 }, { -1.5, -1.5, -1.5 } }, { { 1 }, { -1 } }, { { 7, -1, -1 }, { -1, -1, 8 } },
    { { 5, 11 }, { 11, 25 } }, { false, true }, { true, true }, { { 0.1, 0.5, 0.2 }, { 0.4, 0.4, 0.2 } },
    { 0, 3, 6 }, { { 0.5 }, { -1.5 } },
  }
  local got = run(g, fetches, feeds)
  for i = 1, #want do
    lu.assertTrue(npu.allclose(got[i], npu.tensor(want[i], got[i]:dtype()), 1e-6, 1e-6), fetches[i])
  end
  local g2 = model.import_graph_def(model.export_graph_def(g))
  lu.assertEquals(g2:get_operation_by_name("bt"):type(), "broadcast_to")
  lu.assertEquals(g2:get_operation_by_name("s2d"):type(), "sparse_to_dense")
  lu.assertEquals(g2:get_operation_by_name("itk1"):type(), "in_top_k")
  local got2 = run(g2, fetches, feeds)
  for i = 1, #want do
    lu.assertEquals(got2[i]:totable(), got[i]:totable(), fetches[i] .. " after .pb")
  end
end

-- The exporter writes what TensorFlow's OpDefs need: InTopKV2's k in the targets' dtype,
-- SparseToDense's T / Tindices / validate_indices, BroadcastTo's Tidx.
function TestOps4Import.test_export_attributes()
  local g = npu.Graph()
  local p = g:placeholder("float32", { 2, 3 }, "p")
  local t = g:placeholder("int64", { 2 }, "t")
  npu.in_top_k(p, t, 2, { name = "itk" })
  npu.sparse_to_dense(g:const(npu.tensor({ 1 }, "int64")), { 3 }, g:const(npu.tensor({ 5 }, "int32")), 0, false, "s2d")
  npu.broadcast_to(p, { 4, 2, 3 }, { name = "bt" })
  local bytes = model.export_graph_def(g)
  for _, s in ipairs({ "InTopKV2", "itk/k", "SparseToDense", "Tindices", "validate_indices", "s2d/output_shape",
    "BroadcastTo", "bt/shape", "Tidx" }) do
    lu.assertStrContains(bytes, s)
  end
  local g2 = model.import_graph_def(bytes)
  local feeds = { ["p:0"] = npu.tensor({ { 1, 2, 3 }, { 3, 2, 1 } }, "float32"), ["t:0"] = npu.tensor({ 1, 1 }, "int64") }
  local r = run(g2, { "itk:0", "s2d:0", "bt:0" }, feeds)
  lu.assertEquals(r[1]:totable(), { true, true })
  lu.assertEquals(r[2]:totable(), { 0, 5, 0 })
  lu.assertEquals(r[3]:shape(), { 4, 2, 3 })
  lu.assertEquals(g2:get_operation_by_name("itk/k"):type(), "const")
end

-- AssignAdd / AssignSub on a variable of a (non-frozen) TF1 graph: add / sub, then assign.
function TestOps4Import.test_assign_add_sub()
  local g = model.import_graph_def(json_graph({
    '{"name": "v", "op": "VariableV2", "attr": {"dtype": {"type": "DT_FLOAT"}, "shape": {"shape": {"dim": [{"size": "2"}]}}}}',
    jconst("init", "DT_FLOAT", { 2 }, { 1, 2 }), jconst("inc", "DT_FLOAT", { 2 }, { 10, 20 }),
    jnode("v/Assign", "Assign", { "v", "init" }),
    jnode("up", "AssignAdd", { "v", "inc" }), jnode("down", "AssignSub", { "v", "inc" }),
  }))
  lu.assertEquals(g:get_operation_by_name("up"):type(), "assign")
  lu.assertEquals(g:get_operation_by_name("up/add"):type(), "add")
  lu.assertEquals(g:get_operation_by_name("down/sub"):type(), "sub")
  local sess <close> = npu.Session { graph = g }
  sess:run("v/Assign:0")
  lu.assertEquals(sess:run("up:0"):totable(), { 11, 22 })
  lu.assertEquals(sess:run("up:0"):totable(), { 21, 42 })
  lu.assertEquals(sess:run("down:0"):totable(), { 11, 22 })
end

-- A Range over a placeholder imports (the input stays an input) and fails clearly at compile.
function TestOps4Import.test_range_of_placeholder()
  local g = model.import_graph_def(json_graph({
    jplaceholder("n", {}, "DT_INT32"), jconst("zero", "DT_INT32", {}, { 0 }), jconst("one", "DT_INT32", {}, { 1 }),
    jnode("rng", "Range", { "zero", "n", "one" }, '"Tidx": ' .. INT32),
  }))
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(values(sess:run("rng:0", { ["n:0"] = npu.tensor(3, "int32") })), { 0, 1, 2 })
  lu.assertEquals(values(sess:run("rng:0", { ["n:0"] = npu.tensor(5, "int32") })), { 0, 1, 2, 3, 4 })
end
