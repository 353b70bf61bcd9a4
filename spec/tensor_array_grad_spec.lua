-- spec/tensor_array_grad_spec.lua — gradients of TensorArrays and of while loops carrying them
-- (issue 10): unsorted_segment_sum (gather's gradient) forward and its errors, gather's
-- gradient along axis 0 and 1, tensor_array_write's gradient (overwritten rows get none, a
-- grown buffer's new rows are dropped) through write/read/stack and scatter/gather by hand,
-- and through while loops: npu.map_fn, a TensorArray read inside the body, a loop variable
-- whose shape changes every iteration and a loop of 10 variables, against central differences
-- in float64 (h = 1e-6, |analytic - numeric| <= 1e-6 * (1 + |numeric|), as in
-- control_grad_spec.lua); and the record ops of the recording loop (record_push, record_read).
local lu = require("luaunit")
local npu = require("npu")

local F64 = "float64"
local function t64(v) return npu.tensor(v, F64) end

local function values(t)
  local v = t:totable()
  if type(v) ~= "table" then return { v } end
  local out = {}
  local function walk(x)
    if type(x) == "table" then for _, e in ipairs(x) do walk(e) end else out[#out + 1] = x end
  end
  walk(v)
  return out
end

-- Central differences of scalar L in each element of placeholder ph, and the elementwise
-- comparison (support.lua)
local support = dofile(SPEC_DIR .. "/support.lua")
local check_numeric, assert_close = support.check_gradient, support.assert_close

TestUnsortedSegmentSum = {}

function TestUnsortedSegmentSum:test_forward_by_hand()
  local g = npu.Graph()
  local x = g:const(npu.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } }, "float32"))
  local ids = g:const(npu.tensor({ 2, -1, 0, 2 }, "int32"))
  local y = npu.unsorted_segment_sum(x, ids, 4)
  lu.assertEquals(y:shape(), { 4, 2 })
  local sess <close> = npu.Session { graph = g }
  -- row 1 (id -1) is dropped; segments 1 and 3 are named by no row: zeros
  lu.assertEquals(sess:run(y):totable(), { { 5, 6 }, { 0, 0 }, { 8, 10 }, { 0, 0 } })
  -- ids of rank 2, a prefix of data's shape: y is [num_segments] + the rest
  local x3 = g:const(npu.tensor({ { { 1 }, { 2 } }, { { 3 }, { 4 } } }, F64))
  local y3 = npu.unsorted_segment_sum(x3, g:const(npu.tensor({ { 1, 1 }, { 0, 1 } }, "int64")), 2)
  lu.assertEquals(y3:shape(), { 2, 1 })
  lu.assertEquals(sess:run(y3):totable(), { { 3 }, { 7 } })
end

-- At size, against float64 sums in Lua: 60000 rows of 3 into 7 segments (about a seventh
-- dropped by id -1), float32 values on a 2^-20 grid; the kernel adds a segment's rows in
-- ascending order in float32, so |got - s| <= n_s 2^-24 sum|x| (n_s the segment's rows), and
-- the float64 input is held to float64's version of the same bound.  Device and reference.
function TestUnsortedSegmentSum:test_large_against_float64_sums()
  local rows, cols, nseg = 60000, 3, 7
  local seed = 12345
  local function rnd() seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed >> 8 end
  local xs, ids = {}, {}
  local sum, mag, cnt = {}, {}, {}
  for s = 1, nseg * cols do sum[s], mag[s] = 0.0, 0.0 end
  for s = 1, nseg do cnt[s] = 0 end
  for r = 1, rows do
    local id = rnd() % (nseg + 1) - 1
    ids[r] = id
    local row = {}
    for c = 1, cols do
      local v = (rnd() - (1 << 22)) / (1 << 20) + 1
      row[c] = v
      if id >= 0 then
        sum[id * cols + c], mag[id * cols + c] = sum[id * cols + c] + v, mag[id * cols + c] + math.abs(v)
      end
    end
    if id >= 0 then cnt[id + 1] = cnt[id + 1] + 1 end
    xs[r] = row
  end
  for _, dt in ipairs({ "float32", F64 }) do
    local g = npu.Graph()
    local x = g:placeholder(dt, { rows, cols }, "x")
    local i = g:placeholder("int32", { rows }, "ids")
    local y = npu.unsorted_segment_sum(x, i, nseg)
    local u = dt == "float32" and 2.0 ^ -24 or 2.0 ^ -53
    for _, opts in ipairs({ {}, { use_off_line = false } }) do
      local sess <close> = npu.Session { graph = g, options = opts }
      local got = sess:run(y, { [x] = npu.tensor(xs, dt), [i] = npu.tensor(ids, "int32") }):totable()
      for s = 0, nseg - 1 do
        for c = 1, cols do
          local k = s * cols + c
          local err = math.abs(got[s + 1][c] - sum[k])
          lu.assertTrue(err <= cnt[s + 1] * u * mag[k], ("%s segment %d col %d: %.9g vs %.9g"):format(dt, s, c, got[s + 1][c], sum[k]))
        end
      end
    end
  end
end

function TestUnsortedSegmentSum:test_num_segments_fed_is_sized_when_it_runs()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 3 }, "x")
  local n = g:placeholder("int32", {}, "n")
  local y = g:op("unsorted_segment_sum", { x, g:const(npu.tensor({ 0, 2, 0 }, "int32")), n })
  lu.assertEquals(y:shape(), { -1 })
  local sess <close> = npu.Session { graph = g }
  local feeds = { [x] = npu.tensor({ 1, 2, 4 }, "float32"), [n] = npu.tensor(3, "int32") }
  lu.assertEquals(sess:run(y, feeds):totable(), { 5, 0, 2 })
  feeds[n] = npu.tensor(5, "int32")
  lu.assertEquals(sess:run(y, feeds):totable(), { 5, 0, 2, 0, 0 })
end

function TestUnsortedSegmentSum:test_errors_name_the_node()
  local g = npu.Graph()
  local x = g:const(npu.tensor({ 1, 2, 3 }, "float32"))
  local y = npu.unsorted_segment_sum(x, g:const(npu.tensor({ 0, 3, 1 }, "int32")), 3, { name = "seg" })
  local sess <close> = npu.Session { graph = g }
  local ok, err = pcall(sess.run, sess, y)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "NPU_ERR_ARG")
  lu.assertStrContains(tostring(err), "unsorted_segment_sum 'seg': segment_ids[1] = 3 is not below num_segments 3")
  ok, err = pcall(npu.unsorted_segment_sum, x, g:const(npu.tensor({ 0, 1 }, "int32")), 2)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "NPU_ERR_SHAPE")
  lu.assertStrContains(tostring(err), "must be a prefix of data's shape")
  ok, err = pcall(npu.unsorted_segment_sum, x, g:const(npu.tensor({ 0, 1, 2 }, "int32")), -1)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "num_segments must be an integer >= 0")
  ok, err = pcall(g.op, g, "unsorted_segment_sum", { x, g:const(npu.tensor({ 0, 1, 2 }, "int32")) })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "num_segments is required")
end

TestGatherGradient = {}

-- L = sum(gather(x, idx, axis) * c): dx sums c's entries into the rows (columns) they came from.
function TestGatherGradient:test_axis_0_and_1_by_hand()
  local g = npu.Graph()
  local x = g:placeholder(F64, { -1, 2 }, "x") -- rows known only when it runs
  local c3 = g:const(t64({ { 1, 2 }, { 3, 4 }, { 5, 6 } }))
  local L0 = npu.reduce_sum(npu.gather(x, g:const(npu.tensor({ 2, 0, 2 }, "int32"))) * c3)
  local d0 = npu.gradients(L0, { x })[1]
  local x1 = g:placeholder(F64, { 3, 2 }, "x1")
  local c33 = g:const(t64({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } }))
  local L1 = npu.reduce_sum(npu.gather(x1, g:const(npu.tensor({ 1, 1, 0 }, "int64")), 1) * c33)
  local d1 = npu.gradients(L1, { x1 })[1]
  lu.assertEquals(d1:shape(), { 3, 2 })
  local sess <close> = npu.Session { graph = g }
  local xv = t64({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
  lu.assertEquals(sess:run(d0, { [x] = xv }):totable(), { { 3, 4 }, { 0, 0 }, { 6, 8 } })
  -- x1[r, 0] is gathered once (weight c[r, 3]), x1[r, 1] twice (c[r, 1] + c[r, 2])
  lu.assertEquals(sess:run(d1, { [x1] = xv }):totable(), { { 3, 3 }, { 6, 9 }, { 9, 15 } })
end

-- boolean_mask is reshape, where and gather: the masked-out elements get 0.
function TestGatherGradient:test_boolean_mask()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 2, 3 }, "x")
  local m = g:placeholder("bool", { 2, 3 }, "m")
  local d = npu.gradients(npu.reduce_sum(npu.boolean_mask(x, m) * 3), { x })[1]
  local sess <close> = npu.Session { graph = g }
  local r = sess:run(d, { [x] = t64({ { 1, 2, 3 }, { 4, 5, 6 } }),
    [m] = npu.tensor({ { true, false, true }, { false, false, true } }, "bool") })
  lu.assertEquals(r:totable(), { { 3, 0, 3 }, { 0, 0, 3 } })
end

TestTensorArrayGradient = {}

-- c overwrites a at row 0: a gets no gradient; b is stacked (weights {3, 4}) and read (10 each).
function TestTensorArrayGradient:test_write_read_stack_by_hand()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local a, b, c = g:placeholder(F64, { 2 }, "a"), g:placeholder(F64, { 2 }, "b"), g:placeholder(F64, { 2 }, "c")
  local ta = npu.TensorArray(F64, 0, { dynamic_size = true }):write(0, a):write(1, b):write(0, c)
  local L = npu.reduce_sum(ta:stack() * g:const(t64({ { 1, 2 }, { 3, 4 } }))) + npu.reduce_sum(ta:read(1) * 10)
  local d = npu.gradients(L, { a, b, c })
  local sess <close> = npu.Session { graph = g }
  local feeds = { [a] = t64({ 1, 1 }), [b] = t64({ 2, 2 }), [c] = t64({ 3, 3 }) }
  local r = sess:run({ d[1], d[2], d[3] }, feeds)
  lu.assertEquals(r[1]:totable(), { 0, 0 })
  lu.assertEquals(r[2]:totable(), { 13, 14 })
  lu.assertEquals(r[3]:totable(), { 1, 2 })
end

-- A fixed-size array: scatter rows 2 and 0, gather rows 0 and 2; the buffer's gradient has the
-- buffer's shape with the written rows zeroed (tensor_array_write_grad).
function TestTensorArrayGradient:test_scatter_gather_and_the_buffer_by_hand()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local a, b = g:placeholder(F64, { 2 }, "a"), g:placeholder(F64, { 2 }, "b")
  local buf = g:placeholder(F64, { 3, 2 }, "buf")
  local ta = npu.TensorArray(F64, 3, { element_shape = { 2 } })
  ta.flow = buf -- start from a fed buffer, to see its gradient
  ta = ta:scatter({ 2, 0 }, npu.stack({ a, b }))
  local L = npu.reduce_sum(ta:gather({ 0, 2 }) * g:const(t64({ { 1, 2 }, { 3, 4 } })))
    + npu.reduce_sum(ta:stack() * g:const(t64({ { 10, 20 }, { 30, 40 }, { 50, 60 } })))
  local d = npu.gradients(L, { a, b, buf })
  lu.assertEquals(d[3]:shape(), { 3, 2 })
  local sess <close> = npu.Session { graph = g }
  local r = sess:run({ d[1], d[2], d[3] }, { [a] = t64({ 1, 2 }), [b] = t64({ 3, 4 }), [buf] = t64({ { 0, 0 }, { 0, 0 }, { 0, 0 } }) })
  lu.assertEquals(r[1]:totable(), { 3 + 50, 4 + 60 })
  lu.assertEquals(r[2]:totable(), { 1 + 10, 2 + 20 })
  lu.assertEquals(r[3]:totable(), { { 0, 0 }, { 30, 40 }, { 0, 0 } })
end

-- A growing array's buffer: rows the write added are dropped from the old buffer's gradient.
function TestTensorArrayGradient:test_grown_buffer_drops_the_new_rows()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local buf = g:placeholder(F64, { 2, 1 }, "buf")
  local v = g:placeholder(F64, { 1 }, "v")
  local ta = npu.TensorArray(F64, 0, { dynamic_size = true })
  ta.flow = buf
  local y = ta:write(3, v):stack() -- rows 0, 1 from buf, 2 zero, 3 = v
  lu.assertEquals(y:shape(), { 4, 1 })
  local L = npu.reduce_sum(y * g:const(t64({ { 1 }, { 2 }, { 3 }, { 4 } })))
  local d = npu.gradients(L, { buf, v })
  local sess <close> = npu.Session { graph = g }
  local r = sess:run({ d[1], d[2] }, { [buf] = t64({ { 5 }, { 6 } }), [v] = t64({ 7 }) })
  lu.assertEquals(r[1]:totable(), { { 1 }, { 2 } })
  lu.assertEquals(r[2]:totable(), { 4 })
end

TestWhileTensorArrayGradient = {}

function TestWhileTensorArrayGradient:test_map_fn_by_hand_and_central_differences()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 3, 2 }, "x")
  local w = g:placeholder(F64, {}, "w")
  local m = npu.map_fn(function(e) return npu.tanh(e * w) * e end, x, { name = "rows" })
  local L = npu.reduce_sum(m * m)
  local d = npu.gradients(L, { x, w })
  local sess <close> = npu.Session { graph = g }
  local feeds = { [x] = t64({ { 0.5, -1 }, { 2, 0.25 }, { -0.3, 0.8 } }), [w] = t64(0.7) }
  check_numeric(sess, L, d[1], x, feeds, "map_fn: d/dx")
  check_numeric(sess, L, d[2], w, feeds, "map_fn: d/dw")
  -- squares: d/dx sum(x^2 w) = 2xw, d/dw = sum(x^2)
  local sq = npu.map_fn(function(e) return e * e * w end, x)
  local ds = npu.gradients(npu.reduce_sum(sq), { x, w })
  local r = sess:run({ ds[1], ds[2] }, feeds)
  assert_close(values(r[1]), { 0.7, -1.4, 2.8, 0.35, -0.42, 1.12 }, 1e-12, "squares: d/dx")
  assert_close(values(r[2]), { 0.25 + 1 + 4 + 0.0625 + 0.09 + 0.64 }, 1e-12, "squares: d/dw")
end

-- The body reads the previous element (an RNN's state in a TensorArray): the array is then
-- recorded whole at every iteration.
function TestWhileTensorArrayGradient:test_array_read_inside_the_body()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F64, { 2 }, "x")
  local w = g:placeholder(F64, {}, "w")
  local ta = npu.TensorArray(F64, 0, { dynamic_size = true }):write(0, x)
  local out = npu.while_loop(function(i) return npu.less(i, 4) end,
    function(i, t) return i + 1, t:write(i, npu.tanh(t:read(i - 1) * w)) end, { 1, ta })
  local L = npu.reduce_sum(npu.reshape(out[2]:stack(), { 4, 2 }) * g:const(t64({ { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } })))
  local d = npu.gradients(L, { x, w })
  local sess <close> = npu.Session { graph = g }
  local feeds = { [x] = t64({ 0.3, -0.7 }), [w] = t64(1.3) }
  check_numeric(sess, L, d[1], x, feeds, "read in the body: d/dx")
  check_numeric(sess, L, d[2], w, feeds, "read in the body: d/dw")
end

-- v doubles its length every iteration (shape invariant {-1}): its values are recorded with
-- their own shapes.
function TestWhileTensorArrayGradient:test_loop_variable_changing_shape()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 2 }, "x")
  local w = g:placeholder(F64, {}, "w")
  local out = npu.while_loop(function(i) return npu.less(i, 3) end,
    function(i, v) return i + 1, npu.concat({ v, npu.tanh(v) * w }, 0) end, { 0, x },
    { shape_invariants = { {}, { -1 } } })
  local L = npu.reduce_sum(out[2] * out[2])
  local d = npu.gradients(L, { x, w })
  local sess <close> = npu.Session { graph = g }
  local feeds = { [x] = t64({ 0.3, -0.7 }), [w] = t64(1.3) }
  lu.assertEquals(sess:run(out[2], feeds):shape(), { 16 })
  check_numeric(sess, L, d[1], x, feeds, "changing shape: d/dx")
  check_numeric(sess, L, d[2], w, feeds, "changing shape: d/dw")
end

-- 10 loop variables (the recording loop has 13 outputs): v_j <- v_j * w + v_(j+1).
function TestWhileTensorArrayGradient:test_ten_loop_variables()
  local g = npu.Graph()
  local x = g:placeholder(F64, { 9 }, "x")
  local w = g:placeholder(F64, {}, "w")
  local init = { 0 }
  for j = 1, 9 do init[j + 1] = npu.gather(x, g:const(npu.tensor(j - 1, "int32"))) end
  local out = npu.while_loop(function(i) return npu.less(i, 3) end, function(i, ...)
    local v, r = { ... }, { i + 1 }
    for j = 1, 9 do r[j + 1] = v[j] * w + (v[j + 1] or 0) end
    return table.unpack(r)
  end, init)
  local L = out[2]
  for j = 3, 10 do L = L + out[j] * j end
  local d = npu.gradients(L, { x, w })
  local sess <close> = npu.Session { graph = g }
  local feeds = { [x] = t64({ 0.1, 0.2, 0.3, -0.4, 0.5, 0.6, -0.7, 0.8, 0.9 }), [w] = t64(1.1) }
  check_numeric(sess, L, d[1], x, feeds, "10 variables: d/dx")
  check_numeric(sess, L, d[2], w, feeds, "10 variables: d/dw")
end

function TestWhileTensorArrayGradient:test_fourteen_loop_variables_are_refused()
  local g = npu.Graph()
  local x = g:placeholder(F64, {}, "x")
  local init = { 0 }
  for j = 2, 14 do init[j] = x end
  local out = npu.while_loop(function(i) return npu.less(i, 2) end, function(i, ...)
    local r = { i + 1 }
    for j, v in ipairs({ ... }) do r[j + 1] = v * 2 end
    return table.unpack(r)
  end, init, { name = "wide" })
  local before = g:n_nodes()
  local ok, err = pcall(npu.gradients, out[2], { x })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "NPU_ERR_UNSUPPORTED")
  lu.assertStrContains(tostring(err), "gradient of while 'wide': at most 13 loop variables")
  lu.assertEquals(g:n_nodes(), before, "the graph is left as it was")
end

-- record_push / record_read, the recording loop's memory, on their own: values of different
-- shapes and dtypes, one recorded by its shape alone (read back as zeros), and the errors.
TestRecordOps = {}

function TestRecordOps:test_push_and_read_back()
  local g = npu.Graph()
  local data = g:const(npu.tensor({}, "uint8"):reshape({ 0 }))
  local meta = g:const(npu.zeros({ 0, 11 }, "int64"))
  local a = g:const(t64({ { 1, 2, 3 }, { 4, 5, 6 } }))
  local b = g:const(npu.tensor({ 7, 8 }, "int32"))
  local c = g:const(npu.tensor({ 9, 9, 9, 9 }, "float32"))
  local pushed = g:op("record_push", { data, meta, a, b, c }, { shape_only = { 2 } })
  lu.assertEquals(pushed[1]:shape(), { 48 + 8 })
  lu.assertEquals(pushed[2]:shape(), { 3, 11 })
  local again = g:op("record_push", { pushed[1], pushed[2], b, a, c })
  local function read(it, slot, dtype, shape)
    return g:op("record_read", { again[1], again[2], g:const(npu.tensor(it, "int32")) },
      { dtype = dtype, count = 3, slot = slot, shape = shape })
  end
  local ra, rb, rc = read(0, 0, F64), read(0, 1, "int32", { -1 }), read(0, 2, "float32")
  local rb2, ra2 = read(1, 0, "int32"), read(1, 1, F64, { 2, 3 })
  lu.assertEquals(ra:shape(), nil) -- no shape attribute: sized when it runs
  lu.assertEquals(ra2:shape(), { 2, 3 })
  local sess <close> = npu.Session { graph = g }
  local r = sess:run({ ra, rb, rc, rb2, ra2 })
  lu.assertEquals(r[1]:totable(), { { 1, 2, 3 }, { 4, 5, 6 } })
  lu.assertEquals(r[2]:totable(), { 7, 8 })
  lu.assertEquals(r[3]:totable(), { 0, 0, 0, 0 }) -- by its shape alone
  lu.assertEquals(r[4]:totable(), { 7, 8 })
  lu.assertEquals(r[5]:totable(), { { 1, 2, 3 }, { 4, 5, 6 } })
  -- a row past the record, a shape that contradicts the attribute
  local past = read(2, 0, F64)
  local ok, err = pcall(sess.run, sess, past)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "row 6 is outside the record of 6 rows")
  local wrong = read(0, 0, F64, { 3, 2 })
  ok, err = pcall(sess.run, sess, wrong)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "NPU_ERR_SHAPE")
  lu.assertStrContains(tostring(err), "the value recorded is [2,3], not the [3,2] expected")
  ok, err = pcall(g.op, g, "record_push", { data, meta, a }, { shape_only = { 1 } })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "shape_only[0] = 1 is not a value's position")
  ok, err = pcall(g.op, g, "record_read", { data, meta, g:const(npu.tensor(0, "int32")) },
    { dtype = F64, count = 2, slot = 2 })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "need count >= 1 and 0 <= slot < count")
end
