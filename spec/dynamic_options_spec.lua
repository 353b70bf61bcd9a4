-- dynamic_options_spec.lua — the options that make dynamic-shape plans (docs/dynamic.md,
-- Options): compile_hybrid_mode (a profile's feeds run its static plan, others one dynamic-shape
-- plan; external weights on), compile_dynamic_mode (one dynamic-shape plan for every feed
-- shape), shape_generalization_mode (STRICT, FULL, ADAPTIVE once a shape changes) and
-- all_tensor_not_empty (the empty-tensor check of dynamic steps).  Each is observed from Lua:
-- the values, the plans compiled (sess:stats()), what sess:explain shows (a dynamic-shape plan
-- has -1 feed dims and dynamic steps), and the refused combinations, named.
local lu = require("luaunit")
local npu = require("npu")

local fails = dofile(SPEC_DIR .. "/support.lua").fails

local function row(n, first) -- {{first, first+1, ...}} of shape (1, n)
  local t = {}
  for i = 1, n do t[i] = first + i - 1 end
  return npu.tensor({ t })
end

local function n_dynamic_steps(e)
  local n = 0
  for _, s in ipairs(e.steps) do n = n + (s.dynamic and 1 or 0) end
  return n
end

-- y = 2x + 1 over a (1, -1) placeholder, profiles x (1,2) and (1,4)
local function line()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, -1 }, "x")
  return g, x, x * 2 + 1
end
local function hybrid(g, extra)
  local o = { input_shape = "x:1,-1", dynamic_dims = "2;4", dynamic_node_type = 1,
    compile_hybrid_mode = 1 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return npu.Session { graph = g, options = o }
end

TestHybridMode = {}

function TestHybridMode:test_profiles_run_static_plans_other_shapes_one_dynamic_plan()
  local g, x, y = line()
  local sess <close> = hybrid(g)
  for _, n in ipairs({ 4, 3, 2, 9, 1, 4, 17 }) do
    local got = sess:run(y, { [x] = row(n, 1) })
    lu.assertEquals(got:shape(), { 1, n })
    local want = {}
    for i = 1, n do want[i] = 2 * i + 1 end
    lu.assertEquals(got:totable(), { want })
  end
  -- the first run compiled both profiles and the dynamic-shape plan; nothing since
  lu.assertEquals(sess:stats().compiled, 3)
  lu.assertEquals(sess:stats().dynamic_plans, 1)
  -- a profile's feeds: its static plan, fused, no dynamic step
  local e = sess:explain(y, { [x] = row(2, 1) })
  lu.assertFalse(e.generic)
  lu.assertEquals(e.feeds[1].shape, { 1, 2 })
  lu.assertEquals(n_dynamic_steps(e), 0)
  lu.assertEquals(e.steps[1].op, "fused_elementwise")
  -- other feeds: the dynamic-shape plan, the profile dim unknown, its steps shaped when they run
  local d = sess:explain(y, { [x] = row(5, 1) })
  lu.assertTrue(d.generic)
  lu.assertEquals(d.feeds[1].shape, { 1, -1 })
  lu.assertEquals(n_dynamic_steps(d), #d.steps)
  lu.assertStrContains(tostring(d), "dynamic shape")
  lu.assertStrContains(tostring(d), " dynamic")
  lu.assertEquals(sess:stats().compiled, 3)
end

function TestHybridMode:test_a_first_run_outside_the_profiles_compiles_them_too()
  local g, x, y = line()
  local sess <close> = hybrid(g)
  lu.assertEquals(sess:run(y, { [x] = row(3, 0) }):totable(), { { 1, 3, 5 } })
  lu.assertEquals(sess:stats().compiled, 3)
  sess:run(y, { [x] = row(4, 0) })
  sess:run(y, { [x] = row(2, 0) })
  lu.assertEquals(sess:stats().compiled, 3)
end

function TestHybridMode:test_feeds_of_two_profiles_run_the_dynamic_plan()
  local g = npu.Graph()
  local a = g:placeholder("float32", { -1 }, "a")
  local b = g:placeholder("float32", { -1 }, "b")
  local y = npu.reduce_sum(a) + npu.reduce_sum(b) * 10
  local sess <close> = npu.Session { graph = g, options = { input_shape = "a:-1;b:-1",
    dynamic_dims = "1,1;2,2", dynamic_node_type = 1, compile_hybrid_mode = 1 } }
  -- a is profile 0's, b profile 1's: no profile sets both, so the dynamic plan runs them
  lu.assertEquals(sess:run(y, { [a] = npu.ones({ 1 }), [b] = npu.ones({ 2 }) }):totable(), 21)
  lu.assertTrue(sess:explain(y, { [a] = npu.ones({ 1 }), [b] = npu.ones({ 2 }) }).generic)
  lu.assertFalse(sess:explain(y, { [a] = npu.ones({ 2 }), [b] = npu.ones({ 2 }) }).generic)
end

function TestHybridMode:test_errors()
  local g, x, y = line()
  -- without hybrid, a shape outside the profiles is refused as before
  local plain <close> = npu.Session { graph = g, options = { input_shape = "x:1,-1",
    dynamic_dims = "2;4", dynamic_node_type = 1 } }
  lu.assertStrContains(fails(plain.run, plain, y, { [x] = row(3, 1) }),
    "NPU_ERR_ARG: feed 'x' has shape [1,3]: not one of the dynamic_dims profiles: [1,2] [1,4]")
  -- with it, a feed must still have input_shape's rank and fixed dims (the plan binds them)
  local sess <close> = hybrid(g)
  lu.assertStrContains(fails(sess.run, sess, y, { [x] = npu.ones({ 2, 3 }) }),
    "NPU_ERR_ARG: feed 'x' has shape [2,3]: compile_hybrid_mode runs a feed outside the " ..
    "dynamic_dims profiles on the dynamic-shape plan only when it has input_shape's rank and " ..
    "fixed dims: [1,-1]")
  lu.assertStrContains(fails(sess.run, sess, y, { [x] = npu.ones({ 3 }) }), "input_shape's rank")
  -- the combinations 000 requires
  lu.assertStrContains(fails(npu.Session, { graph = g, options = { compile_hybrid_mode = 1 } }),
    "NPU_ERR_CONFLICT: 'compile_hybrid_mode'=1 requires 'input_shape'")
  lu.assertStrContains(fails(npu.Session, { graph = g, options = { compile_hybrid_mode = 1,
    input_shape = "x:1,-1", dynamic_dims = "2;4", dynamic_node_type = 0 } }),
    "'compile_hybrid_mode'=1 requires 'dynamic_node_type' in 1")
end

-- 000: "if weight externalization ... is not enabled via external_weight, the system
-- automatically enables this function".  Written under $ASCEND_WORK_PATH (make test sets it).
function TestHybridMode:test_turns_external_weight_on()
  local base = os.getenv("ASCEND_WORK_PATH")
  if not base or base == "" then lu.skip("needs ASCEND_WORK_PATH (make test sets it)") end
  local function n_weight_files()
    local h = io.popen("find '" .. base .. "' -name 'weight_*' 2>/dev/null | wc -l")
    local n = tonumber(h:read("a"))
    h:close()
    return n
  end
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 64 }, "x")
  local w = g:const(npu.random.normal({ 64, 64 }, { seed = 7 })) -- 16 KiB: a file
  local y = x:matmul(w)
  local before = n_weight_files()
  local plain <close> = npu.Session { graph = g, options = { input_shape = "x:-1,64",
    dynamic_dims = "1;2", dynamic_node_type = 1 } }
  local want = plain:run(y, { [x] = npu.ones({ 1, 64 }) })
  lu.assertEquals(n_weight_files(), before)
  local sess = npu.Session { graph = g, options = { input_shape = "x:-1,64", dynamic_dims = "1;2",
    dynamic_node_type = 1, compile_hybrid_mode = 1 } }
  lu.assertEquals(sess:run(y, { [x] = npu.ones({ 1, 64 }) }):totable(), want:totable())
  lu.assertEquals(sess:run(y, { [x] = npu.ones({ 3, 64 }) }):shape(), { 3, 64 })
  lu.assertEquals(n_weight_files(), before + 1) -- one file, shared by the three plans
  sess:close()
  lu.assertEquals(n_weight_files(), before)
end

-- a small MLP, x (-1, 3) or as declared
local function dense(shape)
  local g = npu.Graph()
  local x = g:placeholder("float32", shape or { 2, 3 }, "x")
  local w = g:const(npu.tensor({ { 1, 2, 3, 4 }, { -1, 0, 1, 0 }, { 0.5, 0.5, 0.5, 0.5 } }), "w")
  local b = g:const(npu.tensor({ 0.5, -4, 1, 0 }), "b")
  return g, x, npu.nn.relu(x:matmul(w) + b)
end

local function rows(n, seed)
  return npu.random.uniform({ n, 3 }, { seed = seed or n, minval = -2, maxval = 2 })
end

TestCompileDynamicModeOptions = {}

function TestCompileDynamicModeOptions:test_one_dynamic_plan_for_every_shape()
  local g, x, y = dense()
  local rg, rx, ry = dense({ -1, 3 }) -- the reference: a static plan per shape
  local ref <close> = npu.Session { graph = rg }
  local sess <close> = npu.Session { graph = g, options = { compile_dynamic_mode = true } }
  for _, n in ipairs({ 2, 5, 1, 7, 2 }) do
    local got = sess:run(y, { [x] = rows(n) })
    lu.assertEquals(got:totable(), ref:run(ry, { [rx] = rows(n) }):totable())
  end
  lu.assertEquals(sess:stats().compiled, 1)
  lu.assertEquals(sess:stats().dynamic_plans, 1)
  local e = sess:explain(y, { [x] = rows(3) })
  lu.assertTrue(e.generic)
  lu.assertEquals(e.feeds[1].shape, { -1, -1 }) -- "all input shapes are generalized to -1"
  lu.assertEquals(n_dynamic_steps(e), #e.steps)
  -- without it, the declared shape binds and the plan is static
  local off <close> = npu.Session { graph = g }
  lu.assertFalse(off:explain(y, { [x] = rows(2) }).generic)
  lu.assertStrContains(fails(off.run, off, y, { [x] = rows(5) }), "expects [2,3], got [5,3]")
end

function TestCompileDynamicModeOptions:test_an_op_that_cannot_take_the_shape_fails_when_it_runs()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local r = npu.reshape(x, { 6 }, { name = "fixed_reshape" })
  local sess <close> = npu.Session { graph = g, options = { compile_dynamic_mode = true } }
  lu.assertEquals(sess:run(r, { [x] = npu.ones({ 3, 2 }) }):shape(), { 6 })
  lu.assertStrContains(fails(sess.run, sess, r, { [x] = npu.ones({ 4, 3 }) }), "fixed_reshape")
end

TestShapeGeneralization = {}

-- feeds of these shapes in turn; returns the explained feed shape of each run and the counts
local function generalize(mode, shapes, declared)
  local g = npu.Graph()
  local x = g:placeholder("float32", declared or { -1, -1 }, "x")
  local y = npu.reduce_sum(x * 2, { 1 })
  local opts = { jit_compile = "true", shape_generalization_mode = mode }
  local sess <close> = npu.Session { graph = g, options = opts }
  local seen = {}
  for i, sh in ipairs(shapes) do
    local got = sess:run(y, { [x] = npu.ones(sh) })
    lu.assertEquals(got:totable()[1], 2 * sh[2])
    seen[i] = "[" .. table.concat(sess:explain(y, { [x] = npu.ones(sh) }).feeds[1].shape, ",") .. "]"
  end
  return seen, sess:stats().compiled, sess:stats().dynamic_plans
end

local SHAPES = { { 2, 3 }, { 2, 3 }, { 4, 3 }, { 5, 3 }, { 5, 7 }, { 2, 3 }, { 6, 8 } }

function TestShapeGeneralization:test_strict_compiles_a_plan_per_shape()
  local seen, compiled, dynamic = generalize("STRICT", SHAPES)
  lu.assertEquals(seen, { "[2,3]", "[2,3]", "[4,3]", "[5,3]", "[5,7]", "[2,3]", "[6,8]" })
  lu.assertEquals({ compiled, dynamic }, { 5, 0 })
end

function TestShapeGeneralization:test_full_generalises_every_axis_once_a_shape_changes()
  local seen, compiled, dynamic = generalize("FULL", SHAPES)
  -- the first shape keeps its static plan; from the first change, one dynamic plan
  lu.assertEquals(seen, { "[2,3]", "[2,3]", "[-1,-1]", "[-1,-1]", "[-1,-1]", "[2,3]", "[-1,-1]" })
  lu.assertEquals({ compiled, dynamic }, { 2, 1 })
end

function TestShapeGeneralization:test_adaptive_generalises_the_axes_that_changed()
  local seen, compiled, dynamic = generalize("ADAPTIVE", SHAPES)
  lu.assertEquals(seen, { "[2,3]", "[2,3]", "[-1,3]", "[-1,3]", "[-1,-1]", "[2,3]", "[-1,-1]" })
  lu.assertEquals({ compiled, dynamic }, { 3, 2 })
end

function TestShapeGeneralization:test_a_dim_the_placeholder_fixes_stays_fixed()
  local seen, compiled = generalize("FULL", { { 2, 3 }, { 4, 3 }, { 9, 3 } }, { -1, 3 })
  lu.assertEquals(seen, { "[2,3]", "[-1,3]", "[-1,3]" })
  lu.assertEquals(compiled, 2)
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 3 }, "x")
  local sess <close> = npu.Session { graph = g, options = { jit_compile = "true",
    shape_generalization_mode = "FULL" } }
  sess:run(x * 2, { [x] = npu.ones({ 1, 3 }) })
  sess:run(x * 2, { [x] = npu.ones({ 2, 3 }) })
  lu.assertStrContains(fails(sess.run, sess, x * 2, { [x] = npu.ones({ 2, 4 }) }),
    "placeholder 'x' expects [-1,3], got [2,4]")
end

function TestShapeGeneralization:test_needs_jit_compile_true_and_compile_dynamic_mode_wins()
  lu.assertStrContains(fails(npu.Session, { graph = npu.Graph(), options = {
    shape_generalization_mode = "FULL" } }),
    "NPU_ERR_CONFLICT: 'shape_generalization_mode'='FULL' requires 'jit_compile' in true")
  lu.assertStrContains(fails(npu.Session, { graph = npu.Graph(), options = {
    shape_generalization_mode = "ADAPTIVE", jit_compile = "auto" } }), "jit_compile")
  -- compile_dynamic_mode: generalised from the first run ("the shape_generalization_mode
  -- setting does not take effect")
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, -1 }, "x")
  local sess <close> = npu.Session { graph = g, options = { compile_dynamic_mode = true,
    jit_compile = "true", shape_generalization_mode = "ADAPTIVE" } }
  sess:run(x * 2, { [x] = npu.ones({ 2, 3 }) })
  lu.assertEquals(sess:explain(x * 2, { [x] = npu.ones({ 2, 3 }) }).feeds[1].shape, { -1, -1 })
end

TestAllTensorNotEmpty = {}

-- range(n) sized when it runs: n = 0 gives empty values down to the reduce_sum, which is not
-- empty (a scalar) and runs
local function empty_chain(opt)
  local g = npu.Graph()
  local n = g:placeholder("int32", {}, "n")
  local y = npu.exp(npu.cast(npu.range(n), "float32") * 2)
  local t = npu.reduce_sum(y)
  local sess = npu.Session { graph = g, options = { all_tensor_not_empty = opt } }
  local function run(k)
    local out = sess:run({ y, t }, { [n] = npu.tensor(k, "int32") })
    return out[1]:shape(), out[2]:totable()
  end
  return sess, run, function() return sess:explain({ y, t }, { [n] = npu.tensor(0, "int32") }) end
end

function TestAllTensorNotEmpty:test_false_skips_the_kernels_of_empty_dynamic_steps()
  local sess <close>, run, explain = empty_chain(false)
  local e = explain()
  lu.assertEquals(n_dynamic_steps(e), 5) -- range, cast, mul, exp, reduce_sum
  local shape, total = run(0)
  lu.assertEquals({ shape, total }, { { 0 }, 0 })
  lu.assertEquals(sess:stats().empty_skips, 4) -- every step but the reduce_sum
  shape, total = run(3)
  lu.assertEquals(shape, { 3 })
  lu.assertAlmostEquals(total, 1 + math.exp(2) + math.exp(4), 1e-4)
  lu.assertEquals(sess:stats().empty_skips, 4) -- nothing empty: every kernel ran
  run(0)
  lu.assertEquals(sess:stats().empty_skips, 8)
end

function TestAllTensorNotEmpty:test_true_runs_every_kernel()
  local sess <close>, run = empty_chain(true)
  local shape, total = run(0)
  lu.assertEquals({ shape, total }, { { 0 }, 0 })
  shape, total = run(3)
  lu.assertAlmostEquals(total, 1 + math.exp(2) + math.exp(4), 1e-4)
  lu.assertEquals(sess:stats().empty_skips, 0)
end

function TestAllTensorNotEmpty:test_static_steps_are_not_checked()
  -- a static plan has no empty-tensor check: shapes are fixed, nothing is skipped
  local g = npu.Graph()
  local x = g:placeholder("float32", { 0, 3 }, "x")
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(x * 2, { [x] = npu.ones({ 0, 3 }) }):shape(), { 0, 3 })
  lu.assertEquals(sess:stats().empty_skips, 0)
end

function TestAllTensorNotEmpty:test_stats_of_a_closed_session_fail()
  local sess = npu.Session { graph = npu.Graph() }
  lu.assertEquals(sess:stats(), { plans = 0, compiled = 0, dynamic_plans = 0, empty_skips = 0,
                                  copy_reuses = 0 })
  sess:close()
  lu.assertStrContains(fails(sess.stats, sess), "npu.Session:stats")
end
