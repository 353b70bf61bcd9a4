-- fusion_nested_spec.lua — the fusion passes in plans with control flow (csrc/compile/fusion.c,
-- npuP_fuse's walk over blocks): each pass's pattern inside a while body, inside a cond
-- branch, and at the top level of a graph that also holds a loop.  For each: the fused step is
-- in the explain listing at its depth, the results equal the same graph with every pass off
-- (fusion_switch_file ALL off) over several iterations, and the plan with fusion off has no
-- fused step anywhere.  Then what stays: a value with a run-time shape (a loop variable whose
-- invariant has -1), a value the loop gives back or its body reads again, a value computed in a
-- while condition and read in its body; an imported TensorFlow While/If graph fuses as ours;
-- fusion_result.json counts the nested steps; a training loop under npu.while_loop updates its
-- kernel in one step.
--
-- Tolerances, float32, fused against unfused: the same bits, but for batch-norm folding (the
-- scale multiplies the filter before the sum instead of the sum after it: max |d| <= 1e-5 *
-- peak, as in fusion_spec.lua).  The matmul cases keep k = 8, inside one k-panel of OpenBLAS,
-- where the bias entering the GEMM first changes no bit.
local lu = require("luaunit")
local npu = require("npu")

local support = dofile(SPEC_DIR .. "/support.lua")
local F32 = "float32"
local ALL_OFF = support.FUSION_ALL_OFF

local function randn(shape, seed, stddev) return npu.random.normal(shape, { seed = seed, stddev = stddev or 1 }) end

-- float32 computation, statistics as asked (none by default), passes as a switch text says.
local session = support.fusion_session

local function flat(t) return t:reshape({ t:numel() }):totable() end

local assert_same_bits = support.assert_same_bits

local function assert_close(a, b, rel, what)
  local d, peak = support.max_diff(a, b)
  lu.assertTrue(d <= rel * math.max(peak, 1e-30), ("%s: max |d| %.3g > %.3g * peak %.4g"):format(what, d, rel, peak))
end

-- The steps of an explain at every depth, each with its depth.
local all_steps = support.all_steps

-- The steps a pass made, as "depth:op".
local function fused_by(e, pass)
  local out = {}
  for _, s in ipairs(all_steps(e)) do
    if s.pass == pass then out[#out + 1] = s.depth .. ":" .. s.op end
  end
  table.sort(out)
  return out
end

local function count_fused(e)
  local n = 0
  for _, s in ipairs(all_steps(e)) do
    if s.pass and s.pass:match("Pass$") then n = n + 1 end
  end
  return n
end

-- ------------------------------------------------------------------------- the patterns

local FILTER = randn({ 3, 3, 4, 4 }, 11, 0.3)
local BIAS4 = randn({ 4 }, 12)
local W8 = randn({ 8, 8 }, 13, 0.4)
local BIAS8 = randn({ 8 }, 14)

-- name, the pass, the fused step's op, the input's shape, the pattern on x, the output's shape,
-- bits (false: batch-norm folding's bound)
local CASES = {
  { "rnn cell", "MatMulBiasAddFusionPass", "fused_matmul", { 4, 8 }, { 4, 8 }, true, function(g, x)
    return npu.tanh(npu.nn.bias_add(npu.matmul(x, g:const(W8)), g:const(BIAS8)))
  end },
  { "conv bias relu", "ConvBiasAddFusionPass", "fused_conv2d", { 1, 6, 6, 4 }, { 1, 6, 6, 4 }, true, function(g, x)
    local c = npu.nn.conv2d(x, g:const(FILTER), { strides = { 1, 1, 1, 1 }, padding = "SAME" })
    return npu.relu(npu.nn.bias_add(c, g:const(BIAS4)))
  end },
  { "conv batch norm", "ConvBatchnormFusionPass", "fused_conv2d", { 1, 6, 6, 4 }, { 1, 6, 6, 4 }, false, function(g, x)
    local c = npu.nn.conv2d(x, g:const(FILTER), { strides = { 1, 1, 1, 1 }, padding = "SAME" })
    return npu.relu(c * g:const(npu.tensor({ 0.5, 2, -1, 1.5 }, F32)) + g:const(BIAS4))
  end },
  { "conv max pool", "ConvMaxPoolFusionPass", "fused_conv2d", { 1, 6, 6, 4 }, { 1, 3, 3, 4 }, true, function(g, x)
    local c = npu.nn.conv2d(x, g:const(FILTER), { strides = { 1, 1, 1, 1 }, padding = "SAME" })
    return npu.nn.max_pool(c, { ksize = 2, strides = 2, padding = "VALID" })
  end },
  { "elementwise chain", "TbeEltwiseFusionPass", "fused_elementwise", { 3, 5 }, { 3, 5 }, true, function(_, x)
    return npu.sigmoid(npu.exp(x * 0.5) - 1.25)
  end },
  { "pool grad relu grad", "MaxPoolGradReluGradFusionPass", "fused_max_pool_grad_relu_grad", { 1, 6, 6, 4 },
    { 1, 6, 6, 4 }, true, function(_, x)
      local o = { ksize = 2, strides = 2, padding = "VALID" }
      local y = npu.nn.max_pool(x, o)
      return npu.relu_grad(npu.max_pool_grad(x, y, npu.neg(y), o), x)
    end },
}

-- The pattern placed: "while" (in the body, on x * t, t counting 1..n, summed into the loop's
-- accumulator), "cond" (the then branch; the else branch gives zeros), "top" (beside a loop
-- summing x n times).  Returns the graph, what to fetch and the feeds for n iterations.
local function placed(case, where, n, pred)
  local _, _, _, xshape, yshape, _, pattern = table.unpack(case)
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, xshape, "x")
  local nn = g:placeholder("int32", {}, "n")
  local p = g:placeholder("bool", {}, "p")
  local fetch
  if where == "while" then
    local r = npu.while_loop(function(i) return npu.less(i, nn) end,
      function(i, t, acc) return i + 1, t + 1, acc + pattern(g, x * t) end,
      { 0, g:const(npu.tensor(1, F32)), g:const(npu.zeros(yshape)) })
    fetch = { r[3] }
  elseif where == "cond" then
    fetch = { npu.cond(p, function() return pattern(g, x) end, function() return g:const(npu.zeros(yshape)) end) }
  else
    local r = npu.while_loop(function(i) return npu.less(i, nn) end,
      function(i, acc) return i + 1, acc + x end, { 0, g:const(npu.zeros(xshape)) })
    fetch = { pattern(g, x), r[2] }
  end
  local feeds = { [x] = randn(xshape, 21), [nn] = npu.tensor(n, "int32"), [p] = npu.tensor(pred ~= false, "bool") }
  return g, fetch, feeds
end

TestFusionNested = {}

function TestFusionNested:test_each_pass_in_a_loop_a_branch_and_beside_a_loop()
  for _, case in ipairs(CASES) do
    local name, pass, op, _, _, bits = table.unpack(case)
    for _, where in ipairs({ "while", "cond", "top" }) do
      local what = name .. " in " .. where
      local g, fetch, feeds = placed(case, where, 3)
      local on, off = session(g), session(g, nil, ALL_OFF)
      lu.assertEquals(fused_by(on:explain(fetch, feeds), pass), { (where == "top" and "0:" or "1:") .. op }, what)
      lu.assertEquals(count_fused(off:explain(fetch, feeds)), 0, what .. ": the switch file reaches nested steps")
      for _, n in ipairs({ 0, 1, 3 }) do -- several iterations (and none); the branch taken and not
        for k, v in pairs(feeds) do
          if v:dtype() == "int32" then feeds[k] = npu.tensor(n, "int32") end
          if v:dtype() == "bool" then feeds[k] = npu.tensor(n ~= 0, "bool") end
        end
        local a, b = on:run(fetch, feeds), off:run(fetch, feeds)
        for i = 1, #fetch do
          if bits then assert_same_bits(a[i], b[i], what .. ", n = " .. n)
          else assert_close(a[i], b[i], 1e-5, what .. ", n = " .. n) end
        end
      end
      on:close()
      off:close()
    end
  end
end

-- The loop's result is the pattern's (a value that changes each iteration, not a sum).
function TestFusionNested:test_an_rnn_cell_carried_through_the_loop()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 4, 8 }, "x")
  local n = g:placeholder("int32", {}, "n")
  local w, b = g:const(W8), g:const(BIAS8)
  local r = npu.while_loop(function(i) return npu.less(i, n) end,
    function(i, h) return i + 1, npu.tanh(npu.nn.bias_add(npu.matmul(h, w) + x, b)) end, { 0, x })
  local on, off = session(g), session(g, nil, ALL_OFF)
  local feeds = { [x] = randn({ 4, 8 }, 3), [n] = npu.tensor(6, "int32") }
  local e = on:explain(r[2], feeds)
  lu.assertEquals(fused_by(e, "TbeEltwiseFusionPass"), { "1:fused_elementwise" }) -- + x, bias, tanh
  local a = on:run(r[2], feeds)
  assert_same_bits(a, off:run(r[2], feeds), "six steps of the cell")
  -- the hidden state by hand, in float32 steps
  local h = flat(feeds[x])
  local xs, ws, bs = flat(feeds[x]), flat(W8), flat(BIAS8)
  local f32 = function(v) return string.unpack("<f", string.pack("<f", v)) end
  for _ = 1, 6 do
    local nh = {}
    for row = 0, 3 do
      for col = 0, 7 do
        local s = 0
        for k = 0, 7 do s = s + h[row * 8 + k + 1] * ws[k * 8 + col + 1] end
        nh[row * 8 + col + 1] = f32(math.tanh(f32(f32(s) + xs[row * 8 + col + 1]) + bs[col + 1]))
      end
    end
    h = nh
  end
  local got = flat(a)
  for i = 1, #h do lu.assertAlmostEquals(got[i], h[i], 1e-5) end
end

-- A loop variable with a run-time shape: its pattern stays unfused, the fixed-shape pattern
-- beside it in the same body fuses.
function TestFusionNested:test_a_run_time_shape_stays_out_of_the_patterns()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 4, 8 }, "x")
  local n = g:placeholder("int32", {}, "n")
  local w, b = g:const(W8), g:const(BIAS8)
  local function cell(h, name)
    return npu.tanh(npu.nn.bias_add(npu.matmul(h, w, { name = name }), b))
  end
  local r = npu.while_loop(function(i) return npu.less(i, n) end,
    function(i, h, acc)
      return i + 1, npu.concat({ cell(h, "dyn_mm"), h }, 0), acc + cell(x, "fixed_mm")
    end, { 0, x, g:const(npu.zeros({ 4, 8 })) },
    { shape_invariants = { {}, { -1, 8 }, { 4, 8 } } })
  local on, off = session(g), session(g, nil, ALL_OFF)
  local feeds = { [x] = randn({ 4, 8 }, 5), [n] = npu.tensor(3, "int32") }
  local steps = support.steps_by_node(on:explain({ r[2], r[3] }, feeds))
  lu.assertEquals(steps.dyn_mm.op, "matmul", "the run-time shaped product stays a matmul")
  lu.assertNil(steps.dyn_mm.pass)
  lu.assertEquals(steps.fixed_mm.op, "fused_matmul")
  lu.assertEquals(steps.fixed_mm.depth, 1)
  local a, c = on:run({ r[2], r[3] }, feeds), off:run({ r[2], r[3] }, feeds)
  lu.assertEquals(a[1]:shape(), { 32, 8 })
  assert_same_bits(a[1], c[1], "the growing state")
  assert_same_bits(a[2], c[2], "the sum")
end

-- Values read outside their block stay: the product the loop also gives back, a product of
-- the condition block read by the body, a top-level product read inside the loop and after it.
function TestFusionNested:test_values_read_outside_the_block_stay()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 4, 8 }, "x")
  local n = g:placeholder("int32", {}, "n")
  local w, b = g:const(W8), g:const(BIAS8)
  local top = npu.matmul(x, w, { name = "top_mm" })
  local shared
  local r = npu.while_loop(function(i, h)
      shared = npu.matmul(h, w, { name = "cond_mm" })
      local t = npu.tanh(npu.nn.bias_add(shared, b))
      return npu.logical_and(npu.less(i, n), npu.less(npu.reduce_sum(t), 1e30))
    end,
    function(i, h, _)
      local mm = npu.matmul(h, w, { name = "kept_mm" })
      return i + 1, npu.tanh(npu.nn.bias_add(mm, b)) + shared * 0.5 + top, mm
    end, { 0, x, x })
  local after = npu.relu(npu.nn.bias_add(top, b))
  local fetch = { r[2], r[3], after }
  local feeds = { [x] = randn({ 4, 8 }, 9), [n] = npu.tensor(4, "int32") }
  local on, off = session(g), session(g, nil, ALL_OFF)
  local steps = support.steps_by_node(on:explain(fetch, feeds))
  lu.assertEquals(steps.kept_mm.op, "matmul", "the loop gives the product back: it stays")
  lu.assertEquals(steps.cond_mm.op, "matmul", "the body reads the condition's product: it stays")
  lu.assertEquals(steps.top_mm.op, "matmul", "read in the loop and after it: it stays")
  lu.assertEquals(#fused_by(on:explain(fetch, feeds), "TbeEltwiseFusionPass"), 3, "the chains around them fuse")
  local a, c = on:run(fetch, feeds), off:run(fetch, feeds)
  for i = 1, #fetch do assert_same_bits(a[i], c[i], "result " .. i) end
end

-- Our graph written as TensorFlow's functional While and If and read back fuses as ours.
function TestFusionNested:test_an_imported_while_and_if_graph_fuses()
  local case = CASES[1]
  local g = npu.Graph()
  local x, nn, p, c
  do
    local _ <close> = g:as_default()
    x = g:placeholder(F32, { 4, 8 }, "x")
    nn = g:placeholder("int32", {}, "n")
    p = g:placeholder("bool", {}, "p")
    local pattern = case[7]
    local r = npu.while_loop(function(i) return npu.less(i, nn) end,
      function(i, h) return i + 1, pattern(g, h) end, { 0, x })
    c = npu.cond(p, function() return pattern(g, r[2]) end, function() return r[2] end)
  end
  local g2 = npu.import_graph_def(npu.export_graph_def(g))
  local xv, nv, pv = randn({ 4, 8 }, 2), npu.tensor(3, "int32"), npu.tensor(true, "bool")
  local feeds = { [x:name()] = xv, [nn:name()] = nv, [p:name()] = pv }
  local on, off = session(g2), session(g2, nil, ALL_OFF)
  local e = on:explain(c:name(), feeds)
  lu.assertEquals(fused_by(e, "MatMulBiasAddFusionPass"), { "1:fused_matmul", "1:fused_matmul" },
    "the loop's and the branch's cells")
  local got = on:run(c:name(), feeds)
  assert_same_bits(got, off:run(c:name(), feeds), "imported")
  local mine = session(g)
  assert_same_bits(got, mine:run(c, { [x] = xv, [nn] = nv, [p] = pv }), "as our graph")
end

-- fusion_result.json counts the steps fused in loops and branches with the top level's.
function TestFusionNested:test_statistics_count_nested_steps()
  local stat = support.read_all("/proc/self/stat")
  if not stat then lu.skip("no /proc/self/stat: the process id is unknown") end
  local work = os.getenv("ASCEND_WORK_PATH")
  if not work or work == "" then work = "npu_out" end
  local path = ("%s/FE/%s/fusion_result.json"):format(work, stat:match("^(%d+)"))
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 4, 8 }, "x")
  local n = g:placeholder("int32", {}, "n")
  local p = g:placeholder("bool", {}, "p")
  local cell = CASES[1][7]
  local r = npu.while_loop(function(i) return npu.less(i, n) end,
    function(i, h) return i + 1, cell(g, h) end, { 0, x })
  local c = npu.cond(p, function() return cell(g, x) end, function() return x end)
  local fetch = { cell(g, x), r[2], c }
  local before = support.read_all(path)
  before = before and support.json_decode(before) or {}
  local sess = session(g, { export_compile_stat = 2 })
  sess:run(fetch, { [x] = randn({ 4, 8 }, 1), [n] = npu.tensor(2, "int32"), [p] = npu.tensor(true, "bool") })
  sess:close()
  local now, found = support.json_decode(assert(support.read_all(path))), nil
  for k, v in pairs(now) do
    if before[k] == nil then found = v end
  end
  lu.assertNotNil(found, "a new graph's statistics")
  lu.assertEquals(found.graph_fusion.MatMulBiasAddFusionPass, { match_times = "3", effect_times = "3" })
end

-- A training loop under npu.while_loop: the body's gradient-descent update of a dense kernel
-- is one step, and the variable ends with the bits of the four steps.
function TestFusionNested:test_a_training_loop_updates_in_one_step()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 4, 8 }, "x")
  local n = g:placeholder("int32", {}, "n")
  local w = g:variable(randn({ 8, 8 }, 31, 0.5), "w")
  local lr = g:const(npu.tensor(0.05, F32))
  local r = npu.while_loop(function(i) return npu.less(i, n) end,
    function(i, loss)
      local y = npu.tanh(npu.matmul(x, w))
      local grad = npu.matmul(x, y, { transpose_a = true, name = "grad" })
      return i + 1, loss + npu.reduce_sum(npu.assign(w, w - lr * grad))
    end, { 0, g:const(npu.tensor(0, F32)) })
  local feeds = { [x] = randn({ 4, 8 }, 32), [n] = npu.tensor(5, "int32") }
  local results = {}
  for _, sw in ipairs({ false, ALL_OFF }) do
    local sess = session(g, nil, sw or nil)
    sess:run(g:global_variables_initializer())
    local ops = support.steps_by_node(sess:explain(r[2], feeds))
    lu.assertEquals(ops.grad.op, sw and "matmul" or "fused_apply_gradient_descent")
    if not sw then lu.assertEquals(ops.grad.depth, 1) end
    local got = sess:run({ r[2], w }, feeds)
    results[#results + 1] = got
    sess:close()
  end
  assert_same_bits(results[1][1], results[2][1], "the summed weights")
  assert_same_bits(results[1][2], results[2][2], "the kernel after five updates")
  local w0 = flat(randn({ 8, 8 }, 31, 0.5))
  lu.assertNotEquals(flat(results[1][2])[1], w0[1], "the loop updated the kernel")
end

-- aoe_mode 1 (subgraph tuning) on a plan with a loop: the plan and each pass it used (in the
-- loop too) turned off are timed, each step once (a loop's body as one iteration), and the
-- record is read back by a later session; results within the passes' stated bounds.
function TestFusionNested:test_aoe_mode_1_times_plans_with_a_loop()
  local dir = support.tmpdir()
  local function build()
    local g = npu.Graph()
    local _ <close> = g:as_default()
    local x = g:placeholder(F32, { 1, 6, 6, 4 }, "x")
    local n = g:placeholder("int32", {}, "n")
    local cell = CASES[2][7]
    local r = npu.while_loop(function(i) return npu.less(i, n) end,
      function(i, h) return i + 1, cell(g, h) * 0.5 end, { 0, x })
    return g, r[2], { [x] = randn({ 1, 6, 6, 4 }, 41), [n] = npu.tensor(3, "int32") }
  end
  local opts = { aoe_mode = "1", work_path = dir, op_compiler_cache_mode = "disable" }
  local g, y, feeds = build()
  local sess = session(g, opts)
  local e = sess:explain(y, feeds)
  lu.assertEquals(e.tuning.subgraph, "timed")
  local want = session(g, nil, ALL_OFF):run(y, feeds)
  assert_same_bits(sess:run(y, feeds), want, "the tuned plan")
  sess:close()
  local lines = {}
  for l in assert(io.open(dir .. "/npu_aoe_tuning.jsonl")):lines() do lines[#lines + 1] = support.json_decode(l) end
  lu.assertEquals(#lines, 1)
  lu.assertEquals(lines[1].kind, "subgraph")
  lu.assertTrue(#lines[1].candidates >= 2, "the plan and the loop's passes off")
  for _, c in ipairs(lines[1].candidates) do -- every step is in the loop: they were timed there
    lu.assertTrue(c.median_us > 0, "a candidate's time")
  end
  local g2, y2, feeds2 = build()
  local again = session(g2, opts)
  local e2 = again:explain(y2, feeds2)
  lu.assertEquals(e2.tuning.subgraph, "record")
  lu.assertEquals(e2.tuning.fusion_off, lines[1].fusion_off)
  assert_same_bits(again:run(y2, feeds2), want, "the record's plan")
  again:close()
  support.rm_rf(dir)
end
