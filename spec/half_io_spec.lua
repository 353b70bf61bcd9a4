-- half_io_spec.lua — float16 steps without full-size float32 copies: under force_fp16 the
-- elementwise steps (unary, binary, fused elementwise programs) read and write their float16
-- operands themselves, a block at a time, and steps that only move elements (reshape, pad,
-- transpose, concat, ...) move them as stored; only the other steps (convolutions, matmul,
-- pooling, ...) still get their operands widened into a float32 buffer (explain's
-- memory.round_bytes, the largest such buffer).  Results are those of rounding float32 values
-- to float16 after every op, as before: the oracle runs each op alone in float32 on rounded
-- inputs and rounds its output.
local lu = require("luaunit")
local npu = require("npu")
local model = require("npu.model")

local MODELS_DIR = os.getenv("NPU_MODELS_DIR") or (ROOT_DIR or ".") .. "/../shared/models"

local function round(t) return t:astype("float16"):astype("float32") end
local function same(a, b) return npu.allclose(a, b, 0, 0) end

-- One op in float32 on (rounded) inputs, its output rounded: what a float16 step gives.
local function op16(build, ...)
  local g = npu.Graph()
  local ins, feeds = {}, {}
  for i, t in ipairs { ... } do
    ins[i] = g:placeholder("float32", t:shape(), "in" .. i)
    feeds[ins[i]] = round(t)
  end
  local s = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  return round(s:run(build(g, table.unpack(ins)), feeds))
end

TestHalfIO = {}

function TestHalfIO:test_elementwise_steps_plan_no_widening_and_round_as_before()
  -- y = exp(pow(relu(x * 0.5 + b), 2) - z): a fused chain with scalar and row broadcasts, a
  -- standalone binary op broadcasting along the middle axis, a standalone unary op
  local X = npu.random.normal({ 5, 7, 300 }, { seed = 11 })
  local B = npu.random.normal({ 300 }, { seed = 12 })
  local Z = npu.random.normal({ 5, 1, 300 }, { seed = 13 })
  local g = npu.Graph()
  local x = g:placeholder("float32", { 5, 7, 300 }, "x")
  local b = g:placeholder("float32", { 300 }, "b")
  local z = g:placeholder("float32", { 5, 1, 300 }, "z")
  local h = npu.nn.relu(x * 0.5 + b)
  local p = g:op("pow", { h, g:const(npu.tensor({ 2.0 })) }, {}, "p")
  local y = g:op("exp", { p - z }, {}, "y")
  local feeds = { [x] = X, [b] = B, [z] = Z }
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local e = sess:explain(y, feeds)
  lu.assertEquals(e.memory.round_bytes, 0)
  local reduced = 0
  for _, s in ipairs(e.steps) do
    if s.pass ~= "precision" then
      lu.assertEquals(s.outputs[1].dtype, "float16", s.op)
      reduced = reduced + 1
    end
  end
  lu.assertTrue(reduced >= 3, "steps computing in float16: " .. reduced)
  -- the oracle, step by step: fusion folds x * 0.5 + b -> relu -> pow into one step (its
  -- bits are the separate ops', rounded once at the end), then sub, then exp
  local hr = op16(function(gg, a, c)
    return gg:op("pow", { npu.nn.relu(a * 0.5 + c), gg:const(npu.tensor({ 2.0 })) }, {}, "p")
  end, X, B)
  local sr = op16(function(_, a, c) return a - c end, hr, Z)
  local want = op16(function(gg, a) return gg:op("exp", { a }, {}, "y") end, sr)
  local got = sess:run(y, feeds)
  lu.assertTrue(same(got, want))
end

function TestHalfIO:test_movement_steps_move_float16_as_stored()
  local X = npu.random.normal({ 4, 6, 10 }, { seed = 21 })
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 6, 10 }, "x")
  local t = g:op("transpose", { npu.nn.relu(x) }, { perm = { 2, 0, 1 } }, "t")
  local r = g:op("reshape", { t }, { shape = { 10, 24 } }, "r")
  local pd = g:op("pad", { r }, { paddings = { { 1, 0 }, { 0, 2 } } }, "pd")
  local y = npu.nn.relu(pd)
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local e = sess:explain(y, { [x] = X })
  lu.assertEquals(e.memory.round_bytes, 0)
  local ref = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  -- relu of float16 values is exact, and moving elements rounds nothing: the float32 result
  -- on the rounded input
  lu.assertTrue(same(sess:run(y, { [x] = X }), ref:run(y, { [x] = round(X) })))
end

-- A model's force_fp16 plan: the widening buffer is only ever a step the kernel cannot feed
-- from float16 (a convolution, pooling, matmul): its float16 operands' size twice, the largest.
local function load(name)
  local json = ("%s/%s/%s.json"):format(MODELS_DIR, name, name)
  local f = io.open(json, "rb")
  if not f then return nil end
  f:close()
  local g, info = model.load_model(json)
  local feeds = {}
  for i, e in ipairs(info.inputs) do
    feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(MODELS_DIR, name, i - 1))
  end
  return g, info, feeds
end

local DIRECT = { fused_elementwise = true, add = true, sub = true, mul = true, relu = true,
  relu6 = true, reshape = true, pad = true, transpose = true, concat = true, cast = true,
  identity = true }

function TestHalfIO:test_blazeface_widens_only_cube_and_pooling_steps()
  local g, info, feeds = load("blazeface")
  if not g then return lu.skip("blazeface not in " .. MODELS_DIR) end
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local e = sess:explain(info.output_names, feeds)
  local widest, elementwise = 0, 0
  for _, s in ipairs(e.steps) do
    local bytes = 0
    for _, side in ipairs { s.inputs, s.outputs } do
      for _, v in ipairs(side) do
        if v.dtype == "float16" then bytes = bytes + 2 * v.bytes end
      end
    end
    if DIRECT[s.op] then elementwise = elementwise + 1
    elseif bytes > widest then widest = bytes end
  end
  lu.assertTrue(elementwise > 20, "elementwise steps: " .. elementwise)
  lu.assertEquals(e.memory.round_bytes, widest)
end

function TestHalfIO:test_float16_plans_hold_less_than_float32()
  for _, name in ipairs { "emotion", "mobileface" } do
    local g, info, feeds = load(name)
    if g then
      local function total(mode)
        local s = npu.Session { graph = g, options = { precision_mode = mode } }
        return s:explain(info.output_names, feeds).memory.total_bytes
      end
      local t16, t32 = total("force_fp16"), total("must_keep_origin_dtype")
      lu.assertTrue(t16 < t32, ("%s: float16 plan %d bytes, float32 %d"):format(name, t16, t32))
    end
  end
end
