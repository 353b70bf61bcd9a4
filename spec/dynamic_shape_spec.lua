-- spec/dynamic_shape_spec.lua — values sized when they run (docs/dynamic.md): where (one
-- input), unique, boolean_mask and non_max_suppression with its true output size.  Values
-- computed by hand; the same graphs on the device and on the host reference path
-- (use_off_line = false); one session fed data of different sizes run after run (the
-- buffers resized); ops fed by a data-sized value (gather_nd of where, then a reduction);
-- errors naming the node.
--
-- Defines global test tables TestDynamicShape*; spec/run.lua runs LuaUnit.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

local F32 = "float32"

-- Runs fetches with feeds on both paths; returns the device results (as tables) after
-- checking the reference path gives the same.
local function run_both(g, fetches, feeds)
  local results = {}
  for _, path in ipairs({ "device", "reference" }) do
    local sess <close> = npu.Session { graph = g, options = path == "reference" and { use_off_line = false } or nil }
    local r = sess:run(fetches, feeds)
    local out = {}
    for i, t in ipairs(r) do out[i] = { dtype = t:dtype(), shape = t:shape(), value = t:totable() } end
    results[path] = out
  end
  -- NaN ~= NaN: compared as text
  local function text(v) return type(v) == "table" and v or v ~= v and "nan" or v end
  for i, out in ipairs(results.device) do
    local a, b = {}, {}
    for k, v in ipairs(type(out.value) == "table" and out.value or {}) do a[k] = text(v) end
    for k, v in ipairs(type(results.reference[i].value) == "table" and results.reference[i].value or {}) do b[k] = text(v) end
    lu.assertEquals(b, a)
    lu.assertEquals(results.reference[i].shape, out.shape)
    lu.assertEquals(results.reference[i].dtype, out.dtype)
  end
  return results.device
end

local function expect_error(code, f, ...) return S.expect_error(code, nil, f, ...) end

TestDynamicShapeWhere = {}

function TestDynamicShapeWhere.test_bool_2d_3d_and_float()
  local g = npu.Graph()
  local b2 = g:placeholder("bool", { 2, 3 }, "b2")
  local b3 = g:placeholder("bool", { 2, 2, 2 }, "b3")
  local f = g:placeholder(F32, { 5 }, "f")
  local r = run_both(g, { npu.where(b2), npu.where(b3), npu.where(f) }, {
    [b2] = npu.tensor({ { true, false, true }, { false, true, false } }, "bool"),
    [b3] = npu.tensor({ { { false, true }, { false, false } }, { { true, true }, { false, true } } }, "bool"),
    [f] = npu.tensor({ 0, -0.0, 2.5, 0 / 0, -1 }, F32), -- -0.0 is false, NaN true
  })
  lu.assertEquals(r[1], { dtype = "int64", shape = { 3, 2 }, value = { { 0, 0 }, { 0, 2 }, { 1, 1 } } })
  lu.assertEquals(r[2].shape, { 4, 3 })
  lu.assertEquals(r[2].value, { { 0, 0, 1 }, { 1, 0, 0 }, { 1, 0, 1 }, { 1, 1, 1 } })
  lu.assertEquals(r[3].value, { { 2 }, { 3 }, { 4 } })
end

function TestDynamicShapeWhere.test_none_true_is_zero_rows()
  local g = npu.Graph()
  local x = g:placeholder("int32", { 2, 3 }, "x")
  local r = run_both(g, { npu.where(x) }, { [x] = npu.zeros({ 2, 3 }):astype("int32") })
  lu.assertEquals(r[1].shape, { 0, 2 })
  lu.assertEquals(r[1].dtype, "int64")
end

function TestDynamicShapeWhere.test_shape_inference()
  local g = npu.Graph()
  local w = npu.where(g:placeholder(F32, { -1, 4, 2 }))
  lu.assertEquals(w:shape(), { -1, 3 })
  lu.assertEquals(w:dtype(), "int64")
  lu.assertEquals(npu.ops.where.tf_type, "Where")
end

-- where feeding gather_nd and a reduction: those steps are sized when they run too; one
-- session, feeds of different sizes run after run.
function TestDynamicShapeWhere.test_downstream_and_resized_runs()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1, -1 }, "x")
  local idx = npu.where(npu.greater(x, 0))
  local picked = npu.gather_nd(x, idx)
  local total = npu.reduce_sum(picked)
  local count = npu.shape(idx)
  for _, path in ipairs({ "device", "reference" }) do
    local sess <close> = npu.Session { graph = g, options = path == "reference" and { use_off_line = false } or nil }
    local cases = {
      { { { 1, -2, 3 }, { -4, 5, -6 } }, { 1, 3, 5 }, 9 },
      { { { -1 } }, {}, 0 },
      { { { 1, 2 }, { 3, 4 }, { 5, -6 }, { 7, 8 } }, { 1, 2, 3, 4, 5, 7, 8 }, 30 },
      { { { 2, -1, 0 }, { 0, 0, 0 } }, { 2 }, 2 },
    }
    for i, c in ipairs(cases) do
      local r = sess:run({ picked, total, count }, { [x] = c[1] })
      lu.assertEquals(r[1]:totable(), c[2], path .. " run " .. i)
      lu.assertEquals(r[1]:shape(), { #c[2] }, path .. " run " .. i)
      lu.assertEquals(r[2]:item(), c[3], path .. " run " .. i)
      lu.assertEquals(r[3]:totable(), { #c[2], 2 }, path .. " run " .. i)
    end
  end
end

function TestDynamicShapeWhere.test_three_arguments_select()
  local g = npu.Graph()
  local c = g:placeholder("bool", { 3 }, "c")
  local y = npu.where(c, g:const({ 1, 2, 3 }), g:const({ -1, -2, -3 }))
  lu.assertEquals(y:op():type(), "select_v2")
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(y, { [c] = npu.tensor({ true, false, true }, "bool") }):totable(), { 1, -2, 3 })
end

function TestDynamicShapeWhere.test_errors()
  local g = npu.Graph()
  local err = expect_error("NPU_ERR_SHAPE", g.op, g, "where", { g:placeholder(F32, nil, "unranked") }, nil, "w")
  lu.assertStrContains(tostring(err), "where 'w'")
  lu.assertStrContains(tostring(err), "known rank")
  err = expect_error("NPU_ERR_ARG", function() return npu.where(npu.constant({ 1 }), npu.constant({ 1 })) end)
  lu.assertStrContains(tostring(err), "npu.where")
end

TestDynamicShapeUnique = {}

function TestDynamicShapeUnique.test_values_and_both_index_dtypes()
  local g = npu.Graph()
  local x = g:placeholder("int32", { -1 }, "x")
  local f = g:placeholder(F32, { 6 }, "f")
  local y, idx = npu.unique(x)
  local y64, idx64 = npu.unique(x, "int64")
  local fy, fidx = npu.unique(f)
  lu.assertEquals(y:shape(), { -1 })
  lu.assertEquals(idx:dtype(), "int32")
  lu.assertEquals(idx64:dtype(), "int64")
  local r = run_both(g, { y, idx, y64, idx64, fy, fidx }, {
    [x] = npu.tensor({ 1, 1, 2, 4, 4, 4, 7, 8, 8 }, "int32"),
    [f] = npu.tensor({ 0.5, -0.0, 0.5, 0, 0 / 0, -3 }, F32), -- -0.0 == 0 (the first kept); NaN alone
  })
  lu.assertEquals(r[1], { dtype = "int32", shape = { 5 }, value = { 1, 2, 4, 7, 8 } })
  lu.assertEquals(r[2].value, { 0, 0, 1, 2, 2, 2, 3, 4, 4 })
  lu.assertEquals(r[3].value, r[1].value)
  lu.assertEquals(r[4], { dtype = "int64", shape = { 9 }, value = { 0, 0, 1, 2, 2, 2, 3, 4, 4 } })
  lu.assertEquals(r[5].shape, { 4 })
  lu.assertEquals(r[5].value[1], 0.5)
  lu.assertEquals(1 / r[5].value[2], -math.huge) -- -0.0 came first
  lu.assertNotEquals(r[5].value[3], r[5].value[3])
  lu.assertEquals(r[5].value[4], -3)
  lu.assertEquals(r[6].value, { 0, 1, 0, 1, 2, 3 })
end

function TestDynamicShapeUnique.test_order_of_first_occurrence_and_resized_runs()
  local g = npu.Graph()
  local x = g:placeholder("int64", { -1 }, "x")
  local y, idx = npu.unique(x)
  local sess <close> = npu.Session { graph = g }
  local cases = {
    { { 5, 3, 5, 1, 3 }, { 5, 3, 1 }, { 0, 1, 0, 2, 1 } },
    { {}, {}, {} },
    { { 9 }, { 9 }, { 0 } },
    { { 2, 2, 2, 2, 2, 2, 2, 1 }, { 2, 1 }, { 0, 0, 0, 0, 0, 0, 0, 1 } },
  }
  for i, c in ipairs(cases) do
    local r = sess:run({ y, idx }, { [x] = npu.tensor(c[1], "int64") })
    lu.assertEquals(r[1]:totable(), c[2], "run " .. i)
    lu.assertEquals(r[1]:shape(), { #c[2] }, "run " .. i)
    lu.assertEquals(r[2]:totable(), c[3], "run " .. i)
  end
end

function TestDynamicShapeUnique.test_errors()
  local g = npu.Graph()
  local err = expect_error("NPU_ERR_SHAPE", g.op, g, "unique", { g:placeholder(F32, { 2, 3 }) }, nil, "u2")
  lu.assertStrContains(tostring(err), "unique 'u2'")
  lu.assertStrContains(tostring(err), "[2,3]")
  err = expect_error("NPU_ERR_DTYPE", g.op, g, "unique", { g:placeholder(F32, { 3 }) }, { out_idx = "float32" }, "uf")
  lu.assertStrContains(tostring(err), "unique 'uf'")
  lu.assertStrContains(tostring(err), "out_idx")
  err = expect_error("NPU_ERR_UNSUPPORTED", g.op, g, "unique", { g:placeholder(F32, { 3 }) }, { axis = { 1 } }, "ua")
  lu.assertStrContains(tostring(err), "unique 'ua'")
end

TestDynamicShapeBooleanMask = {}

function TestDynamicShapeBooleanMask.test_axes_and_ranks()
  local g = npu.Graph()
  local x = g:placeholder(F32, { -1, 3 }, "x")
  local m = g:placeholder("bool", { -1 }, "m")
  local m2 = g:placeholder("bool", { 2, 3 }, "m2")
  local c = g:placeholder("bool", { 3 }, "c")
  local t3 = g:placeholder(F32, { 2, 2, 2 }, "t3")
  local m3 = g:placeholder("bool", { 2, 2 }, "m3")
  local r = run_both(g, {
    npu.boolean_mask(x, m), npu.boolean_mask(x, m2), npu.boolean_mask(x, c, { axis = 1 }),
    npu.boolean_mask(t3, m3, { axis = 1 }), npu.boolean_mask(t3, m3),
  }, {
    [x] = { { 1, 2, 3 }, { 4, 5, 6 } }, [m] = npu.tensor({ false, true }, "bool"),
    [m2] = npu.tensor({ { true, false, true }, { false, false, true } }, "bool"),
    [c] = npu.tensor({ true, false, true }, "bool"),
    [t3] = { { { 1, 2 }, { 3, 4 } }, { { 5, 6 }, { 7, 8 } } },
    [m3] = npu.tensor({ { false, true }, { true, true } }, "bool"),
  })
  lu.assertEquals(r[1].value, { { 4, 5, 6 } })
  lu.assertEquals(r[2].value, { 1, 3, 6 })
  lu.assertEquals(r[3].value, { { 1, 3 }, { 4, 6 } })
  lu.assertEquals(r[4].value, { { 2, 3, 4 }, { 6, 7, 8 } }) -- dims 1, 2 masked: (2, 3)
  lu.assertEquals(r[5].value, { { 3, 4 }, { 5, 6 }, { 7, 8 } }) -- dims 0, 1 masked: (3, 2)
end

function TestDynamicShapeBooleanMask.test_all_false_and_errors()
  local g = npu.Graph()
  local x = g:placeholder(F32, { 3, 2 }, "x")
  local m = g:placeholder("bool", { 3 }, "m")
  local r = run_both(g, { npu.boolean_mask(x, m) }, { [x] = { { 1, 2 }, { 3, 4 }, { 5, 6 } },
    [m] = npu.tensor({ false, false, false }, "bool") })
  lu.assertEquals(r[1].shape, { 0, 2 })
  local err = expect_error("NPU_ERR_SHAPE", npu.boolean_mask, x, g:placeholder("bool", { 2 }))
  lu.assertStrContains(tostring(err), "mask [2]")
  lu.assertStrContains(tostring(err), "[3,2]")
  err = expect_error("NPU_ERR_DTYPE", npu.boolean_mask, x, g:placeholder(F32, { 3 }))
  lu.assertStrContains(tostring(err), "bool")
  err = expect_error("NPU_ERR_SHAPE", npu.boolean_mask, x, g:placeholder("bool", { 3, 2 }), { axis = 1 })
  lu.assertStrContains(tostring(err), "axis 1")
end

-- ---- TensorFlow import: Where, Unique, UniqueV2 (and non-max suppression below) ----------

local J = dofile(SPEC_DIR .. "/support.lua").tfjson
local FLOAT, json_graph, jplaceholder, jnode, jconst = J.FLOAT, J.graph, J.placeholder, J.node, J.const
local function run_named(g, names, feeds)
  local sess <close> = npu.Session { graph = g }
  local r = sess:run(names, feeds)
  for i, t in ipairs(r) do r[i] = t:totable() end
  return r
end

TestDynamicShapeImport = {}

function TestDynamicShapeImport.test_where_unique()
  local g = npu.import_graph_def(json_graph({
    jplaceholder("x", { -1 }),
    jnode("w", "Where", { "x" }),
    jnode("u", "Unique", { "x" }, '"T": ' .. FLOAT .. ', "out_idx": {"type": "DT_INT64"}'),
    jconst("axis", "DT_INT32", { 1 }, { 0 }),
    jnode("u2", "UniqueV2", { "x", "axis" }, '"T": ' .. FLOAT .. ', "Taxis": {"type": "DT_INT32"}, "out_idx": {"type": "DT_INT32"}'),
  }))
  lu.assertEquals(g:get_operation_by_name("w"):type(), "where")
  lu.assertEquals(g:get_operation_by_name("u2"):type(), "unique")
  local r = run_named(g, { "w:0", "u:0", "u:1", "u2:0", "u2:1" }, { ["x:0"] = { 3, 0, 3, 1 } })
  lu.assertEquals(r, { { { 0 }, { 2 }, { 3 } }, { 3, 0, 1 }, { 0, 1, 0, 2 }, { 3, 0, 1 }, { 0, 1, 0, 2 } })
end

-- ---- non-max suppression with its true output size ---------------------------------------
-- A (0.9) overlaps B (IoU 1/3), B overlaps C (IoU 1/3), A and C do not: visited by score, A
-- keeps and drops B, so C survives; were B first, it would drop both.
local ABC = { { 0, 0, 2, 2 }, { 0, 1, 2, 3 }, { 0, 2, 2, 4 } }

TestDynamicShapeNms = {}

function TestDynamicShapeNms.test_v3_order_and_score_threshold()
  local g = npu.Graph()
  local b = g:placeholder(F32, { -1, 4 }, "b")
  local s = g:placeholder(F32, { -1 }, "s")
  local kept = npu.image.non_max_suppression(b, s, 10, 0.3)
  local high = npu.image.non_max_suppression(b, s, 10, 0.3, 0.75)
  lu.assertEquals(kept:shape(), { -1 })
  local r = run_both(g, { kept, high }, { [b] = ABC, [s] = { 0.9, 0.8, 0.7 } })
  lu.assertEquals(r[1], { dtype = "int32", shape = { 2 }, value = { 0, 2 } })
  lu.assertEquals(r[2].value, { 0 }) -- C is below 0.75, B is dropped by A
  r = run_both(g, { kept, high }, { [b] = ABC, [s] = { 0.9, 0.95, 0.7 } })
  lu.assertEquals(r[1].value, { 1 }) -- B first: it drops A and C
  lu.assertEquals(r[2].value, { 1 })
end

function TestDynamicShapeNms.test_padded_with_valid_outputs()
  local g = npu.Graph()
  local b = g:placeholder(F32, { 3, 4 }, "b")
  local s = g:placeholder(F32, { 3 }, "s")
  local idx, valid = npu.image.non_max_suppression_padded(b, s, 4, 0.3, nil, true)
  local idx_short, valid_short = npu.image.non_max_suppression_padded(b, s, 4, 0.3)
  lu.assertEquals(idx:shape(), { 4 })
  lu.assertEquals(idx_short:shape(), { -1 })
  local r = run_both(g, { idx, valid, idx_short, valid_short }, { [b] = ABC, [s] = { 0.9, 0.8, 0.7 } })
  lu.assertEquals(r[1].value, { 0, 2, 0, 0 })
  lu.assertEquals(r[2].value, 2)
  lu.assertEquals(r[3].value, { 0, 2 })
  lu.assertEquals(r[4].value, 2)
end

-- Soft NMS (sigma 0.5: weight exp(-iou^2)), iou_threshold 1 so nothing is dropped outright:
-- A 0.9 kept; B 0.8 * exp(-1/9) = 0.71587 kept next; C 0.7 * exp(-1/9) (for B; A is apart)
-- = 0.62639 last.
function TestDynamicShapeNms.test_v5_soft_nms_scores()
  local g = npu.Graph()
  local b = g:placeholder(F32, { 3, 4 }, "b")
  local s = g:placeholder(F32, { 3 }, "s")
  local idx, scores = npu.image.non_max_suppression_with_scores(b, s, 3, 1.0, 0, 0.5)
  local hidx, hscores = npu.image.non_max_suppression_with_scores(b, s, 3, 0.3)
  local r = run_both(g, { idx, scores, hidx, hscores }, { [b] = ABC, [s] = { 0.9, 0.8, 0.7 } })
  lu.assertEquals(r[1].value, { 0, 1, 2 })
  local w = math.exp(-1 / 9)
  local want = { 0.9, 0.8 * w, 0.7 * w }
  for i = 1, 3 do lu.assertAlmostEquals(r[2].value[i], want[i], 1e-6) end
  lu.assertEquals(r[3].value, { 0, 2 })
  lu.assertAlmostEquals(r[4].value[2], 0.7, 1e-7) -- hard NMS: scores unchanged
  -- max_output_size 1 stops after the first
  local one = npu.image.non_max_suppression_with_scores(b, s, 1, 1.0, 0, 0.5)
  lu.assertEquals(run_both(g, { one }, { [b] = ABC, [s] = { 0.9, 0.8, 0.7 } })[1].value, { 0 })
end

-- An independent oracle on random boxes: Bodla et al.'s soft NMS written eagerly (after each
-- selection every remaining score is multiplied by its weight at once; the best remaining
-- score, ties by lower index, is selected next; a score at or below score_threshold leaves),
-- with hard NMS as the weight 0 past iou_threshold (dropping the box) and 1 below it.  TensorFlow's V5 kernel
-- (and ours) is lazy instead — a priority queue whose popped candidate catches up with the
-- boxes selected since it was last seen — which selects the same boxes, so only the
-- multiplications' order differs: indices must match exactly, scores to float32 rounding
-- (a few units of 2^-24 per decay).
-- Scores here are float64; the IoU is rounded to float32 as TensorFlow computes it (boxes on
-- an integer grid, so areas and intersections are exact in both).
local function eager_nms(boxes, scores, max_out, iou_thr, score_thr, sigma)
  local f32 = function(v) return (string.unpack("f", string.pack("f", v))) end
  local function iou(i, j)
    local a, b = boxes[i], boxes[j]
    local ay0, ax0, ay1, ax1 = math.min(a[1], a[3]), math.min(a[2], a[4]), math.max(a[1], a[3]), math.max(a[2], a[4])
    local by0, bx0, by1, bx1 = math.min(b[1], b[3]), math.min(b[2], b[4]), math.max(b[1], b[3]), math.max(b[2], b[4])
    local aa, ab = (ay1 - ay0) * (ax1 - ax0), (by1 - by0) * (bx1 - bx0)
    if aa <= 0 or ab <= 0 then return 0 end
    local inter = math.max(math.min(ay1, by1) - math.max(ay0, by0), 0) * math.max(math.min(ax1, bx1) - math.max(ax0, bx0), 0)
    return f32(inter / (aa + ab - inter))
  end
  local live, cur, err = {}, {}, {}
  for i = 1, #scores do
    if scores[i] > score_thr then live[#live + 1] = i; cur[i], err[i] = scores[i], 0 end
  end
  local kept, kept_scores, kept_err = {}, {}, {}
  while #kept < max_out and #live > 0 do
    local best = 1
    for k = 2, #live do
      local i, b = live[k], live[best]
      if cur[i] > cur[b] or (cur[i] == cur[b] and i < b) then best = k end
    end
    local s = table.remove(live, best)
    kept[#kept + 1], kept_scores[#kept_scores + 1], kept_err[#kept + 1] = s - 1, cur[s], err[s]
    local rest = {}
    for _, i in ipairs(live) do
      local sim = iou(i, s)
      local x = -0.5 / sigma * sim * sim
      local w = sim > iou_thr and 0 or (sigma > 0 and math.exp(x) or 1)
      cur[i] = cur[i] * w
      -- float32's error per decay, in units of 2^-24: the product, expf, and the argument's
      -- three roundings scaled by |x|
      if w ~= 1 then err[i] = err[i] + 3 + 3 * math.abs(x) end
      -- hard NMS drops it; soft NMS keeps a score of 0 above a score_threshold of -inf
      if cur[i] > score_thr and (sigma > 0 or w > 0) then rest[#rest + 1] = i end
    end
    live = rest
  end
  return kept, kept_scores, kept_err
end

function TestDynamicShapeNms.test_random_boxes_against_an_eager_oracle()
  local r = S.lcg(2024)
  local n = 400
  local boxes, scores = {}, {}
  for i = 1, n do
    -- clusters: a corner near one of 12 centres, sizes 1..40, corners in either order
    local cy, cx = (r() % 12) * 30, (r() % 7) * 35
    local y0, x0 = cy + r() % 20, cx + r() % 20
    local y1, x1 = y0 + 1 + r() % 40, x0 + 1 + r() % 40
    if r() % 4 == 0 then y0, y1 = y1, y0 end
    if r() % 5 == 0 then x0, x1 = x1, x0 end
    if r() % 50 == 0 then y1 = y0 end -- empty: overlaps nothing
    boxes[i] = { y0, x0, y1, x1 }
    -- float32 scores in (0, 1) on a 2^-12 grid: ties happen
    scores[i] = (1 + r() % 4095) / 4096
  end
  local g = npu.Graph()
  local b = g:placeholder(F32, { n, 4 }, "b")
  local s = g:placeholder(F32, { n }, "s")
  local cases = {
    { 60, 0.5, -math.huge, 0 }, { 400, 0.3, 0.25, 0 }, { 400, 0.0, -math.huge, 0 },
    { 100, 1.0, 0.0, 0.5 }, { 400, 0.6, 0.05, 0.25 }, { 150, 0.45, 0.2, 2.0 },
  }
  local fetches = {}
  for _, c in ipairs(cases) do
    local idx, sc = npu.image.non_max_suppression_with_scores(b, s, c[1], c[2], c[3], c[4])
    fetches[#fetches + 1], fetches[#fetches + 2] = idx, sc
  end
  local got = run_both(g, fetches, { [b] = npu.tensor(boxes, F32), [s] = npu.tensor(scores, F32) })
  for k, c in ipairs(cases) do
    local want, want_scores, want_err = eager_nms(boxes, scores, c[1], c[2], c[3], c[4])
    local what = ("case %d (max %d, iou %g, score %g, sigma %g)"):format(k, c[1], c[2], c[3], c[4])
    lu.assertTrue(#want > 5, what) -- the case selects something worth comparing
    local decayed = 0
    for i, j in ipairs(want) do decayed = decayed + (want_scores[i] < scores[j + 1] and 1 or 0) end
    lu.assertEquals(decayed > 5, c[4] > 0, what) -- soft NMS lowered some kept scores
    lu.assertEquals(got[2 * k - 1].value, want, what)
    for i, v in ipairs(got[2 * k].value) do
      lu.assertTrue(math.abs(v - want_scores[i]) <= (1 + want_err[i]) * 2.0 ^ -24 * want_scores[i], what .. " score " .. i)
    end
  end
end

function TestDynamicShapeNms.test_resized_runs()
  local g = npu.Graph()
  local b = g:placeholder(F32, { -1, 4 }, "b")
  local s = g:placeholder(F32, { -1 }, "s")
  local m = g:placeholder("int32", {}, "m")
  local kept = npu.image.non_max_suppression(b, s, m, 0.3)
  local sess <close> = npu.Session { graph = g }
  local cases = {
    { ABC, { 0.9, 0.8, 0.7 }, 5, { 0, 2 } },
    { { { 0, 0, 1, 1 } }, { 0.5 }, 5, { 0 } },
    { ABC, { 0.1, 0.2, 0.3 }, 1, { 2 } },
    { npu.zeros({ 0, 4 }), npu.zeros({ 0 }), 5, {} },
    { ABC, { 0.9, 0.8, 0.7 }, 0, {} },
  }
  for i, c in ipairs(cases) do
    local r = sess:run(kept, { [b] = c[1], [s] = c[2], [m] = npu.tensor(c[3], "int32") })
    lu.assertEquals(r:shape(), { #c[4] }, "run " .. i)
    lu.assertEquals(r:totable(), c[4], "run " .. i)
  end
end

function TestDynamicShapeNms.test_errors()
  local g = npu.Graph()
  local err = expect_error("NPU_ERR_DTYPE", g.op, g, "non_max_suppression",
    { g:placeholder("float64", { 3, 4 }), g:placeholder(F32, { 3 }) }, { max_output_size = 2 }, "nms64")
  lu.assertStrContains(tostring(err), "non_max_suppression 'nms64'")
  err = expect_error("NPU_ERR_SHAPE", g.op, g, "non_max_suppression",
    { g:placeholder(F32, { 3, 4 }), g:placeholder(F32, { 2 }) }, { max_output_size = 2 }, "nms_n")
  lu.assertStrContains(tostring(err), "non_max_suppression 'nms_n'")
  lu.assertStrContains(tostring(err), "[3,4]")
  err = expect_error("NPU_ERR_ARG", g.op, g, "non_max_suppression",
    { g:placeholder(F32, { 3, 4 }), g:placeholder(F32, { 3 }) }, { max_output_size = 2, soft_nms_sigma = -1 }, "nms_s")
  lu.assertStrContains(tostring(err), "soft_nms_sigma -1")
  -- a fed max_output_size out of range: at run time, naming the node
  local m = g:placeholder("int32", {}, "m")
  local b, s = g:placeholder(F32, { 3, 4 }), g:placeholder(F32, { 3 })
  local kept = g:op("non_max_suppression", { b, s, m }, nil, "nms_m")
  local sess <close> = npu.Session { graph = g }
  err = expect_error("NPU_ERR_ARG", sess.run, sess, kept[1], { [b] = ABC, [s] = { 1, 2, 3 }, [m] = npu.tensor(-1, "int32") })
  lu.assertStrContains(tostring(err), "'nms_m'")
end
