-- winograd_filter_spec.lua — a Winograd step whose filter is a constant (a Const, or the filter
-- ConvBatchnormFusionPass folds) gets U = G g G^T computed once, when the plan is compiled
-- (compile/plan.c: prepare_steps), instead of on every run; a fed or variable filter keeps the
-- per-call transform.  Oracles: the same graph with the filter fed as a placeholder (the
-- per-call path: the same bits, since U comes from the same code), the default (direct) kernel
-- within Winograd's bound, and explain: the step says "prepared", the plan's constants grow by
-- exactly U's 16 c out_c floats, and its scratch shrinks by as much (no room for the per-call
-- transform).
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

TestWinogradFilter = {}

local N, H, C, OC = 2, 10, 8, 16

local function randn(shape, seed) return npu.random.normal(shape, { seed = seed, stddev = 0.5 }) end

-- Conv2D forced to Winograd wherever it takes the shape (these small layers are below
-- high_performance's rule)
local ini
function TestWinogradFilter:setUp()
  ini = os.tmpname()
  S.write(ini, "[ByOpType]\nConv2D=super_performance\n")
end
function TestWinogradFilter:tearDown() os.remove(ini) end

local function session(g, opts)
  local o = { op_precision_mode = ini }
  for k, v in pairs(opts or {}) do o[k] = v end
  return npu.Session { graph = g, options = o }
end

-- y = relu(conv2d(x, f) + b) (one fused_conv2d step), with f a Const (constant = true) or a
-- placeholder named "f"; the second output is the bare convolution's graph when `bare`
local function graph(constant, bare)
  local g = npu.Graph()
  local x = g:placeholder("float32", { N, H, H, C }, "x")
  local f = constant and g:const(randn({ 3, 3, C, OC }, 3), "w")
    or g:placeholder("float32", { 3, 3, C, OC }, "f")
  local conv = npu.nn.conv2d(x, f, { strides = 1, padding = "SAME", name = "wconv" })
  local y = bare and conv or npu.relu(npu.nn.bias_add(conv, g:const(randn({ OC }, 4), "b")))
  return g, x, f, y
end

local function feeds(x, f)
  local t = { [x] = randn({ N, H, H, C }, 5) }
  if f then t[f] = randn({ 3, 3, C, OC }, 3) end
  return t
end

local U_BYTES = 16 * C * OC * 4

function TestWinogradFilter:test_constant_filter_is_transformed_once_with_the_same_bits()
  for _, bare in ipairs { true, false } do
    local what = bare and "conv2d" or "fused conv2d + bias + relu"
    local gc, xc, _, yc = graph(true, bare)
    local gp, xp, fp, yp = graph(false, bare)
    local sc, sp = session(gc), session(gp)
    local ec, ep = sc:explain(yc, feeds(xc)), sp:explain(yp, feeds(xp, fp))
    local stc, stp = ec.steps[#ec.steps], ep.steps[#ep.steps]
    lu.assertEquals(#ec.steps, 1, what)
    lu.assertEquals(stc.op, bare and "conv2d" or "fused_conv2d", what)
    lu.assertEquals(stc.algo, "winograd_2x3", what)
    lu.assertEquals(stp.algo, "winograd_2x3", what)
    lu.assertEquals(stc.prepared, "winograd_filter", what)
    lu.assertNil(stp.prepared, what .. ": a fed filter is transformed each run")
    -- U counted with the constants; the fed filter belongs to the caller
    lu.assertEquals(ec.memory.prepared_bytes, U_BYTES, what)
    lu.assertEquals(ep.memory.prepared_bytes, 0, what)
    local filter_bytes = 9 * C * OC * 4
    local others = bare and 0 or OC * 4 -- the bias: a constant of both plans
    lu.assertEquals(ec.memory.constant_bytes, filter_bytes + U_BYTES + others, what)
    lu.assertEquals(ep.memory.constant_bytes, others, what)
    -- the prepared step's scratch holds no room for U (the per-call transform's): U_BYTES less
    lu.assertEquals(stc.scratch_bytes, stp.scratch_bytes - U_BYTES, what)
    lu.assertEquals(ec.memory.scratch_bytes, ep.memory.scratch_bytes - U_BYTES, what)
    -- where the scratch lives in the arena (memory planning), the arena shrinks by as much;
    -- either way the plan holds the filter's bytes more in all (U in, U's room out)
    if ec.memory.buffers_in_arena then
      lu.assertEquals(ec.memory.arena_bytes, ep.memory.arena_bytes - U_BYTES, what)
    end
    lu.assertEquals(ec.memory.total_bytes - ep.memory.total_bytes, filter_bytes, what)
    lu.assertStrContains(tostring(ec), "(filter pre-transformed)")
    lu.assertStrContains(tostring(ec), ("(%d B filters pre-transformed)"):format(U_BYTES))
    lu.assertNotStrContains(tostring(ep), "pre-transformed")
    -- the bits of the per-call transform, run after run (U is not consumed)
    local want = sp:run(yp, feeds(xp, fp))
    for run = 1, 2 do
      lu.assertTrue(npu.allclose(sc:run(yc, feeds(xc)), want, 0, 0), what .. ", run " .. run)
    end
    -- and the default kernel's result within Winograd's bound (docs/numerics.md): W <= 81 c
    -- max|x| max|f| (see implmode_spec), here with max|x|, max|f| < 4
    local default = npu.Session { graph = gc }
    local ed = default:explain(yc, feeds(xc))
    lu.assertEquals(ed.steps[#ed.steps].algo, "direct", what)
    lu.assertNil(ed.steps[#ed.steps].prepared, what)
    local d = S.max_diff(want, default:run(yc, feeds(xc)))
    local u = 2 ^ -24
    local bound = (C + 7) * u / (1 - (C + 7) * u) * 81 * C * 4 * 4
    lu.assertTrue(d <= bound, ("%s: |winograd - direct| %g, bound %g"):format(what, d, bound))
    lu.assertTrue(d > 0, what .. ": Winograd's rounding, not the direct kernel's")
  end
end

-- x -> conv2d -> batch norm (inference): ConvBatchnormFusionPass folds the scale into the
-- filter, a constant made at compile time: that one is pre-transformed too
function TestWinogradFilter:test_a_folded_batchnorm_filter_is_pre_transformed()
  local g = npu.Graph()
  local x = g:placeholder("float32", { N, H, H, C }, "x")
  local conv = npu.nn.conv2d(x, g:const(randn({ 3, 3, C, OC }, 3), "w"),
    { strides = 1, padding = "SAME", name = "wconv" })
  local scale = g:const(npu.random.uniform({ OC }, { seed = 6 }) + npu.tensor({ 0.5 }))
  local y = npu.relu(conv * scale + g:const(randn({ OC }, 7)))
  local sess = session(g)
  local e = sess:explain(y, feeds(x))
  local s = e.steps[#e.steps]
  lu.assertEquals(#e.steps, 1)
  lu.assertEquals(s.op, "fused_conv2d")
  lu.assertEquals(s.algo, "winograd_2x3")
  lu.assertEquals(s.prepared, "winograd_filter")
  lu.assertEquals(e.memory.prepared_bytes, U_BYTES)
  -- against the plan without fusion: conv, mul, add, relu one by one, Winograd on the
  -- unscaled filter: other rounding, within the bound (scale < 1.5, so |f s| < 6)
  local dir, _ <close> = S.tmpdir()
  local off = dir .. "/all_off.json"
  S.write(off, '{"Switch":{"GraphFusion":{"ALL":"off"},"UBFusion":{"ALL":"off"}}}')
  local d = S.max_diff(sess:run(y, feeds(x)), session(g, { fusion_switch_file = off }):run(y, feeds(x)))
  local u = 2 ^ -24
  lu.assertTrue(d <= (C + 9) * u / (1 - (C + 9) * u) * 81 * C * 4 * 6, tostring(d))
end

-- Training: the filter is a variable, updated by each step: transformed on every run (the
-- per-call path), and the step's forward convolution sees the updated filter.
function TestWinogradFilter:test_a_variable_filter_is_transformed_each_run()
  local g = npu.Graph()
  local x = g:placeholder("float32", { N, H, H, C }, "x")
  local w = g:variable(randn({ 3, 3, C, OC }, 3), "w")
  local y = npu.nn.conv2d(x, w, { strides = 1, padding = "SAME", name = "wconv" })
  local bump = npu.assign(w, w * g:const(npu.tensor({ 2 })))
  local sess = session(g)
  sess:run(g:global_variables_initializer())
  local e = sess:explain(y, feeds(x))
  local st = S.steps_by_node(e).wconv
  lu.assertEquals(st.algo, "winograd_2x3")
  lu.assertNil(st.prepared)
  lu.assertEquals(e.memory.prepared_bytes, 0)
  local before = sess:run(y, feeds(x))
  sess:run(bump)
  local after = sess:run(y, feeds(x))
  -- doubling the filter doubles U and the output exactly (powers of two)
  lu.assertTrue(npu.allclose(after, before * npu.tensor({ 2 }), 0, 0))
end
