-- freeze_spec.lua — npu.graph_util.convert_variables_to_constants (csrc/io/freeze.c): a
-- trained graph frozen for inference.  Checked: the frozen graph keeps only what the outputs
-- need (no initializer, assign, gradient or optimizer node), its consts hold the trained
-- values, its outputs are bit-equal to the trained session's under float32 and under
-- allow_mix_precision_bf16 (where its plan casts no weight at run time: the consts are
-- stored bfloat16 when the plan compiles); white/blacklists; it exports and reimports; and
-- every error names its culprit.  Then control flow (TestFreezeControl): a variable read
-- inside a cond branch, a while body, a cond nested in a body or a TensorArray loop becomes a
-- const of its trained value that the region reads; the frozen graph keeps its conds and
-- loops, holds no variable (a session of it needs no init), and its outputs are bit-equal to
-- the trained session's for several feeds, in float32 and under allow_mix_precision_bf16; it
-- exports and reimports; imported If / While freeze; white/blacklists reach variables read
-- only inside a loop; what cannot be frozen (an output needing an assign to a frozen
-- variable inside a loop body; an output inside a branch) is NPU_ERR_ARG naming the culprit.
local lu = require("luaunit")
local npu = require("npu")
local model = require("npu.model")
local S = dofile(SPEC_DIR .. "/support.lua")
local gu = npu.graph_util

local B = 8

-- An MLP 784-64-64-10 trained 3 SGD steps; returns what the tests need.
local function trained(precision_mode)
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 784 }, "x")
  local y = g:placeholder("int32", { -1 }, "y")
  local init = npu.initializers.glorot_uniform
  local h1 = npu.layers.dense(x, 64, { activation = "relu", kernel_initializer = init { seed = 1 } })
  local h2 = npu.layers.dense(h1, 64, { activation = "relu", kernel_initializer = init { seed = 2 } })
  local logits = npu.layers.dense(h2, 10, { kernel_initializer = init { seed = 3 }, name = "logits" })
  local probs = npu.nn.softmax(logits, { name = "probs" })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
  local train_op = npu.train.GradientDescentOptimizer(0.1):minimize(loss)
  local sess = npu.Session { graph = g, options = { precision_mode = precision_mode or "force_fp32" } }
  sess:run(g:global_variables_initializer())
  local xb = npu.random.uniform({ B, 784 }, { seed = 8 })
  local labels = {}
  for i = 1, B do labels[i] = i % 10 end
  local feeds = { [x] = xb, [y] = npu.tensor(labels, "int32") }
  for _ = 1, 3 do sess:run(train_op, feeds) end
  return { g = g, sess = sess, x = x, xb = xb, probs = probs, logits = logits, feeds = feeds,
           train_op = train_op }
end

local function ops_of(g)
  local seen = {}
  for i = 0, g:n_nodes() - 1 do
    local op = g:operation(i):type()
    seen[op] = (seen[op] or 0) + 1
  end
  return seen
end

local function same_bits(a, b, what)
  lu.assertEquals(a:shape(), b:shape(), what)
  lu.assertEquals(a:totable(), b:totable(), what) -- float32 values as doubles: equal means same bits
end

TestFreeze = {}

function TestFreeze:test_float32_bit_equal_and_pruned()
  local m = trained("force_fp32")
  local before = m.sess:run(m.probs, { [m.x] = m.xb })
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { "probs" })
  lu.assertNotIs(frozen, m.g)
  local ops = ops_of(frozen)
  lu.assertNil(ops.variable, "every variable frozen")
  lu.assertNil(ops.assign, "no initializer or update kept")
  lu.assertEquals(#frozen:variables(), 0)
  lu.assertEquals(ops.placeholder, 1, "x stays, y (labels) is not needed")
  lu.assertTrue(frozen:n_nodes() < m.g:n_nodes() / 3, "gradients and optimizer pruned")
  -- the consts carry the variables' names and the trained values
  local w = m.g:variables()[1]
  local wname = w:name():gsub(":0$", "")
  same_bits(npu.Session { graph = frozen }:run(wname .. ":0"), m.sess:run(w))
  -- the frozen graph runs in a session of its own, with nothing to initialise
  local sess <close> = npu.Session { graph = frozen, options = { precision_mode = "force_fp32" } }
  same_bits(sess:run("probs:0", { ["x:0"] = m.xb }), before)
  -- training goes on in the old session; the frozen graph keeps the values of the freeze
  m.sess:run(m.train_op, m.feeds)
  lu.assertNotEquals(m.sess:run(m.probs, { [m.x] = m.xb }):totable(), before:totable())
  same_bits(sess:run("probs:0", { ["x:0"] = m.xb }), before)
end

function TestFreeze:test_bf16_no_weight_casts_and_same_bits()
  local m = trained("allow_mix_precision_bf16")
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, "probs")
  local sess <close> = npu.Session { graph = frozen, options = { precision_mode = "allow_mix_precision_bf16" } }
  local feeds = { ["x:0"] = m.xb }
  -- the variable graph casts each float32 weight to bfloat16 at every run; the frozen one
  -- none (its consts were stored bfloat16 when the plan compiled): its casts are the fed x
  -- and the logits back to float32 for the softmax, as in the variable graph
  local weights = {}
  for _, v in ipairs(m.g:variables()) do weights[(v:name():gsub(":0$", ""))] = true end
  local function casts(s, fetch, f)
    local of_weights, others = 0, 0
    for _, st in ipairs(s:explain(fetch, f).steps) do
      if st.op == "cast" and weights[st.node] then of_weights = of_weights + 1
      elseif st.op == "cast" then others = others + 1 end
    end
    return of_weights, others
  end
  local var_w, var_other = casts(m.sess, m.probs, { [m.x] = m.xb })
  local frz_w, frz_other = casts(sess, "probs:0", feeds)
  lu.assertEquals(var_w, 3, "the variable graph casts its three kernels")
  lu.assertEquals(frz_w, 0, "the frozen graph casts no weight")
  lu.assertEquals(frz_other, var_other)
  -- the same roundings at the same points: the same bits
  same_bits(sess:run("probs:0", feeds), m.sess:run(m.probs, { [m.x] = m.xb }))
end

function TestFreeze:test_lists_keep_variables()
  local m = trained("force_fp32")
  local names = {}
  for i, v in ipairs(m.g:variables()) do names[i] = v:name():gsub(":0$", "") end
  lu.assertTrue(#names >= 6)
  -- blacklist: that variable stays one, with its initializer, in the new graph
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { "probs" },
    { variable_names_blacklist = { names[1] } })
  local vars = frozen:variables()
  lu.assertEquals(#vars, 1)
  lu.assertEquals(vars[1]:name(), names[1] .. ":0")
  local sess <close> = npu.Session { graph = frozen }
  sess:run(frozen:global_variables_initializer())
  -- the kept variable starts from its initial value, so the output differs from the trained one
  local trained_probs = m.sess:run(m.probs, { [m.x] = m.xb })
  lu.assertNotEquals(sess:run("probs:0", { ["x:0"] = m.xb }):totable(), trained_probs:totable())
  -- whitelist (TensorFlow's positional form): only those frozen
  local f2 = gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, { names[2], names[3] })
  lu.assertEquals(#f2:variables(), #names - 2)
  -- TensorFlow's positional blacklist after a whitelist; {} is no options (all frozen)
  local f4 = gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, { names[2], names[3] }, { names[3] })
  lu.assertEquals(#f4:variables(), #names - 1)
  lu.assertEquals(#gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, {}):variables(), 0)
  -- TensorFlow 2's spellings and the compat path
  local f3 = npu.compat.v1.graph_util.convert_variables_to_constants(m.sess, m.g, { "probs" },
    { variable_names_allowlist = { names[2] }, variable_names_denylist = { names[2] } })
  lu.assertEquals(#f3:variables(), #names)
end

function TestFreeze:test_export_and_reimport()
  local m = trained("force_fp32")
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { m.probs })
  local bytes = npu.export_graph_def(frozen)
  lu.assertTrue(#bytes > 784 * 64 * 4)
  local g2 = npu.import_graph_def(bytes)
  local sess <close> = npu.Session { graph = g2, options = { precision_mode = "force_fp32" } }
  same_bits(sess:run("probs:0", { ["x:0"] = m.xb }), m.sess:run(m.probs, { [m.x] = m.xb }))
end

-- pattern: a string the message holds, or a list of them
local function raises(code, pattern, fn)
  local ok, err = pcall(fn)
  lu.assertFalse(ok)
  lu.assertEquals(err.code, code, tostring(err))
  for _, p in ipairs(type(pattern) == "table" and pattern or { pattern }) do
    lu.assertStrContains(tostring(err), p)
  end
end

function TestFreeze:test_errors_name_the_culprit()
  local m = trained("force_fp32")
  local names = {}
  for i, v in ipairs(m.g:variables()) do names[i] = v:name():gsub(":0$", "") end
  raises("NPU_ERR_NOT_FOUND", "output node 'prob' is not in the graph",
    function() gu.convert_variables_to_constants(m.sess, m.g, { "prob" }) end)
  raises("NPU_ERR_ARG", "output_node_names is empty",
    function() gu.convert_variables_to_constants(m.sess, m.g, {}) end)
  raises("NPU_ERR_NOT_FOUND", "variable_names_whitelist names 'nope'",
    function() gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, { "nope" }) end)
  raises("NPU_ERR_NOT_FOUND", "variable_names_blacklist names 'probs'",
    function()
      gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, { variable_names_blacklist = { "probs" } })
    end)
  raises("NPU_ERR_ARG", "unknown option 'variable_names_whitlist'",
    function()
      gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, { variable_names_whitlist = {} })
    end)
  -- the outputs reach an assign writing a variable being frozen: the training op
  local train_name = m.train_op:name()
  raises("NPU_ERR_ARG", "which writes variable",
    function() gu.convert_variables_to_constants(m.sess, m.g, { train_name }) end)
  -- another graph than the session's
  local other = trained("force_fp32")
  raises("NPU_ERR_STATE", "not the session's",
    function() gu.convert_variables_to_constants(m.sess, other.g, { "probs" }) end)
  -- a variable never initialised in the session
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local v = g:variable(npu.tensor({ 1, 2 }), "v")
  local _ = npu.multiply(x, v, { name = "out" })
  local fresh <close> = npu.Session { graph = g }
  raises("NPU_ERR_STATE", "'v'", function() gu.convert_variables_to_constants(fresh, g, { "out" }) end)
end


-- TensorFlow's empty whitelist freezes nothing; a bare {} is no options here (every variable
-- frozen), so the empty whitelist is spelled as a keyword
function TestFreeze:test_empty_whitelist_freezes_nothing()
  local m = trained("force_fp32")
  local n = #m.g:variables()
  lu.assertEquals(#gu.convert_variables_to_constants(m.sess, m.g, { "probs" },
    { variable_names_whitelist = {} }):variables(), n)
  lu.assertEquals(#gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, {}):variables(), 0)
end

-- Mistakes that once passed without a word
function TestFreeze:test_false_option_is_not_absent()
  -- `false or allowlist` read as no whitelist: every variable frozen
  local m = trained("force_fp32")
  raises("NPU_ERR_ARG", "variable_names_whitelist must be a list of variable names, got boolean",
    function()
      gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, { variable_names_whitelist = false })
    end)
  raises("NPU_ERR_ARG", "variable_names_denylist must be a list of variable names, got boolean",
    function()
      gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, { variable_names_denylist = false })
    end)
end

function TestFreeze:test_output_of_another_graph()
  -- looked up by name alone, it froze this graph's node of the same name
  local m = trained("force_fp32")
  local other = trained("force_fp32")
  raises("NPU_ERR_ARG", "output_node_names[2] ('probs:0') is a node of another graph",
    function() gu.convert_variables_to_constants(m.sess, m.g, { "probs", other.probs }) end)
  raises("NPU_ERR_ARG", "output_node_names[1] ('probs') is a node of another graph",
    function() gu.convert_variables_to_constants(m.sess, m.g, { other.probs:op() }) end)
  -- this graph's own Output still names its node
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { m.probs })
  lu.assertEquals(#frozen:variables(), 0)
  lu.assertNotNil(frozen:get_operation_by_name("probs"))
end

function TestFreeze:test_empty_table_with_positional_blacklist()
  -- TensorFlow's ([], ["w"]) freezes nothing; {} here meant no whitelist and froze the rest
  local m = trained("force_fp32")
  local name = m.g:variables()[1]:name():gsub(":0$", "")
  raises("NPU_ERR_ARG", "argument 4 is {} with a blacklist as argument 5",
    function() gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, {}, { name }) end)
  -- nil as argument 4 keeps the positional blacklist working
  lu.assertEquals(#gu.convert_variables_to_constants(m.sess, m.g, { "probs" }, nil, { name }):variables(), 1)
end

-- ---- control flow -------------------------------------------------------------------------

local F32 = "float32"

local function bool(v) return npu.tensor(v, "bool") end
local function int(v) return npu.tensor(v, "int32") end

-- x (4, 8), p (bool), n (int32) placeholders; w (8, 8) and b (8) variables; `build` makes
-- the output "out" from them; a few SGD steps on sum(out^2) move w and b from their initial
-- values (so a frozen graph holding the initial values would give other bits).
local function trained_control(build, precision_mode)
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local m = { g = g }
  m.x = g:placeholder(F32, { 4, 8 }, "x")
  m.p = g:placeholder("bool", {}, "p")
  m.n = g:placeholder("int32", {}, "n")
  m.w = g:variable(npu.random.normal({ 8, 8 }, { stddev = 0.3, seed = 1 }), "w")
  m.b = g:variable(npu.random.normal({ 8 }, { stddev = 0.3, seed = 2 }), "b")
  m.out = npu.identity(build(m), { name = "out" })
  m.train = npu.train.GradientDescentOptimizer(0.01):minimize(npu.reduce_sum(m.out * m.out))
  m.sess = npu.Session { graph = g, options = { precision_mode = precision_mode or "force_fp32" } }
  m.sess:run(g:global_variables_initializer())
  m.xs = { npu.random.uniform({ 4, 8 }, { seed = 3 }), npu.random.uniform({ 4, 8 }, { seed = 4, minval = -1 }) }
  local w0 = m.sess:run(m.w)
  for _ = 1, 2 do m.sess:run(m.train, { [m.x] = m.xs[1], [m.p] = bool(true), [m.n] = int(3) }) end
  lu.assertNotEquals(m.sess:run(m.w):totable(), w0:totable(), "training moved w")
  return m
end

-- The frozen graph of "out": no variable, a session of its own with no init, the outputs
-- of every feed (x, p, n) bit-equal to the trained session's; returns the frozen graph.
local function check_frozen_control(m, cases, precision_mode)
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { "out" })
  local ops = ops_of(frozen)
  lu.assertNil(ops.variable, "every variable frozen")
  lu.assertNil(ops.assign, "no initializer or update kept")
  lu.assertEquals(#frozen:variables(), 0)
  local sess <close> = npu.Session { graph = frozen, options = { precision_mode = precision_mode or "force_fp32" } }
  -- a placeholder the output does not read is left out, as the nodes it feeds
  local has = {}
  for i = 0, frozen:n_nodes() - 1 do has[frozen:operation(i):name()] = true end
  for k, c in ipairs(cases) do
    local want = m.sess:run(m.out, { [m.x] = m.xs[c[1]], [m.p] = bool(c[2]), [m.n] = int(c[3]) })
    local feeds = { ["x:0"] = m.xs[c[1]] }
    if has.p then feeds["p:0"] = bool(c[2]) end
    if has.n then feeds["n:0"] = int(c[3]) end
    same_bits(sess:run("out:0", feeds), want, "case " .. k)
  end
  -- the consts hold the trained values under the variables' names
  same_bits(sess:run("w:0"), m.sess:run(m.w))
  return frozen, ops
end

-- which of the placeholders p and n the frozen graph kept
local function placeholders(frozen)
  local names = {}
  for i = 0, frozen:n_nodes() - 1 do names[frozen:operation(i):name()] = true end
  return { p = names.p == true, n = names.n == true }
end

-- the models ------------------------------------------------------------------------------

-- a cond whose then branch reads w and b, whose else branch reads no variable
local function cond_model(m)
  return npu.cond(m.p, function() return npu.tanh(npu.matmul(m.x, m.w) + m.b) end,
    function() return m.x * 2 end)
end

-- the same after a cond the output does not need (left out: the kept cond's regions are
-- renumbered in the frozen graph)
local function cond_after_unused_cond(m)
  npu.cond(m.p, function() return npu.matmul(m.x, m.w) end, function() return m.x end)
  return cond_model(m)
end

-- a while loop whose body multiplies by w n times
local function while_model(m)
  local r = npu.while_loop(function(i) return npu.less(i, m.n) end,
    function(i, h) return i + 1, npu.tanh(npu.matmul(h, m.w) + m.b) end, { 0, m.x })
  return r[2]
end

-- a cond nested in the loop body: matmul by w in the first two iterations, + b after; the
-- loop starts from a cond on p reading w
local function nested_model(m)
  local h0 = npu.cond(m.p, function() return npu.tanh(npu.matmul(m.x, m.w)) end, function() return m.x * 2 end)
  local r = npu.while_loop(function(i) return npu.less(i, m.n) end,
    function(i, h)
      local h2 = npu.cond(npu.less(i, 2), function() return npu.tanh(npu.matmul(h, m.w) + m.b) end,
        function() return h + m.b end)
      return i + 1, h2
    end, { 0, h0 })
  return r[2]
end

-- a loop writing each iteration's row product into a TensorArray, stacked and summed
local function tensor_array_model(m)
  local ta = npu.TensorArray(F32, 0, { dynamic_size = true, element_shape = { 4, 8 } })
  local r = npu.while_loop(function(i) return npu.less(i, m.n) end,
    function(i, h, acc)
      local h2 = npu.tanh(npu.matmul(h, m.w) + m.b)
      return i + 1, h2, acc:write(i, h2)
    end, { 0, m.x, ta })
  return npu.reduce_sum(r[3]:stack(), { axis = 0 })
end

TestFreezeControl = {}

function TestFreezeControl:test_cond_reads_a_variable_in_one_branch()
  local m = trained_control(cond_model)
  local frozen, ops = check_frozen_control(m, { { 1, true, 0 }, { 1, false, 0 }, { 2, true, 0 }, { 2, false, 0 } })
  lu.assertEquals(ops.cond, 1)
  lu.assertEquals(ops.const >= 2, true)
  lu.assertEquals(placeholders(frozen), { p = true, n = false })
  -- the unused cond is left out, and the kept one runs the frozen graph's regions 1 and 2
  local m2 = trained_control(cond_after_unused_cond)
  local f2, ops2 = check_frozen_control(m2, { { 1, true, 0 }, { 2, false, 0 } })
  lu.assertEquals(ops2.cond, 1)
  local regions = {}
  for i = 0, f2:n_nodes() - 1 do
    local r = f2:node_region(i)
    if r > 0 then regions[r] = true end
  end
  lu.assertEquals(regions, { true, true }, "then's nodes in region 1; else's (x * 2) in 2")
  local max_before = 0
  for i = 0, m2.g:n_nodes() - 1 do max_before = math.max(max_before, m2.g:node_region(i)) end
  lu.assertTrue(max_before >= 4, "the kept cond ran regions 3 and 4 in the trained graph")
end

function TestFreezeControl:test_while_body_reads_a_variable()
  local m = trained_control(while_model)
  local frozen, ops = check_frozen_control(m, { { 1, true, 0 }, { 1, true, 1 }, { 1, true, 5 }, { 2, true, 3 } })
  lu.assertEquals(ops["while"], 1)
  lu.assertEquals(ops.loop_var, 2, "both loop variables, read or not")
  lu.assertEquals(placeholders(frozen), { p = false, n = true })
  -- the gradient loops of the training step are left out
  lu.assertTrue(frozen:n_nodes() < m.g:n_nodes() / 3)
end

function TestFreezeControl:test_cond_nested_in_while()
  local m = trained_control(nested_model)
  local _, ops = check_frozen_control(m, { { 1, true, 4 }, { 1, false, 4 }, { 2, true, 1 }, { 2, false, 0 }, { 1, true, 7 } })
  lu.assertEquals(ops.cond, 2)
  lu.assertEquals(ops["while"], 1)
end

function TestFreezeControl:test_tensor_array_loop()
  local m = trained_control(tensor_array_model)
  local _, ops = check_frozen_control(m, { { 1, true, 1 }, { 1, true, 3 }, { 2, true, 6 } })
  lu.assertEquals(ops["while"], 1)
  lu.assertNotNil(ops.tensor_array_write)
end

-- map_fn (a loop over a TensorArray) reading v, under a case (a chain of conds) reading v:
-- v tripled in the session, so the frozen graph holds {3, 6, 9}.
function TestFreezeControl:test_map_fn_and_case()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 5, 3 }, "x")
  local a = g:placeholder(F32, {}, "a")
  local v = g:variable(npu.tensor({ 1, 2, 3 }, F32), "v")
  local m = npu.map_fn(function(e) return e * v end, x)
  local c = npu.case({ { npu.less(a, 0), function() return m * 2 end },
    { npu.equal(a, 0), function() return m + v end } }, { default = function() return m - v end })
  npu.identity(c, { name = "out" })
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  sess:run(npu.assign(v, v * 3))
  local frozen = gu.convert_variables_to_constants(sess, g, { "out" })
  lu.assertEquals(#frozen:variables(), 0)
  lu.assertEquals(ops_of(frozen).cond, 2)
  local fs <close> = npu.Session { graph = frozen }
  local xb = npu.random.uniform({ 5, 3 }, { seed = 1 })
  for _, av in ipairs({ -1, 0, 1 }) do
    local got = fs:run("out:0", { ["x:0"] = xb, ["a:0"] = npu.tensor(av, F32) })
    same_bits(got, sess:run(c, { [x] = xb, [a] = npu.tensor(av, F32) }), "a = " .. av)
    if av == 0 then
      lu.assertAlmostEquals(got:totable()[2][3], xb:totable()[2][3] * 9 + 9, 1e-5)
    end
  end
end

function TestFreezeControl:test_bf16_same_bits()
  for _, build in ipairs({ nested_model, tensor_array_model }) do
    local m = trained_control(build, "allow_mix_precision_bf16")
    check_frozen_control(m, { { 1, true, 4 }, { 2, false, 2 }, { 2, true, 1 } }, "allow_mix_precision_bf16")
  end
end

function TestFreezeControl:test_export_and_reimport()
  local m = trained_control(nested_model)
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { "out" })
  local g2 = npu.import_graph_def(npu.export_graph_def(frozen))
  lu.assertEquals(ops_of(g2).cond, 2)
  local sess <close> = npu.Session { graph = g2, options = { precision_mode = "force_fp32" } }
  for _, c in ipairs({ { 1, true, 4 }, { 2, false, 3 } }) do
    same_bits(sess:run("out:0", { ["x:0"] = m.xs[c[1]], ["p:0"] = bool(c[2]), ["n:0"] = int(c[3]) }),
      m.sess:run(m.out, { [m.x] = m.xs[c[1]], [m.p] = bool(c[2]), [m.n] = int(c[3]) }))
  end
end

-- A list keeps a variable read only inside the loop body a variable, with its initializer:
-- the frozen graph then computes with w's initial value, as the original graph does after
-- its initializer (and with the trained b).
function TestFreezeControl:test_lists_reach_variables_inside_loops()
  local m = trained_control(while_model)
  local frozen = gu.convert_variables_to_constants(m.sess, m.g, { "out" }, { variable_names_blacklist = { "w" } })
  local vars = frozen:variables()
  lu.assertEquals(#vars, 1)
  lu.assertEquals(vars[1]:name(), "w:0")
  local only_b = gu.convert_variables_to_constants(m.sess, m.g, { "out" }, { "b" })
  lu.assertEquals(#only_b:variables(), 1)
  lu.assertEquals(only_b:variables()[1]:name(), "w:0")
  local sess <close> = npu.Session { graph = frozen, options = { precision_mode = "force_fp32" } }
  sess:run(frozen:global_variables_initializer())
  local w0 = npu.random.normal({ 8, 8 }, { stddev = 0.3, seed = 1 })
  same_bits(sess:run("w:0"), w0)
  m.sess:run(npu.assign(m.w, m.g:const(w0)))
  same_bits(sess:run("out:0", { ["x:0"] = m.xs[1], ["n:0"] = int(3) }),
    m.sess:run(m.out, { [m.x] = m.xs[1], [m.n] = int(3) }))
end

-- TensorFlow 2 If and While imported from a GraphDef (a function library) freeze to conds
-- and loops that compute the same: y = If(p, x, k): x * k or x - k; s = While(i < n):
-- (i + 1, s + x * k).
local J = S.tfjson
local BOOL = '{"type": "DT_BOOL"}'
local function attrs(t) -- an attr object's inside, keys sorted
  local a = {}
  for k, v in pairs(t) do a[#a + 1] = '"' .. k .. '": ' .. v end
  table.sort(a)
  return table.concat(a, ",")
end
local function types(l) return '{"list": {"type": ["' .. table.concat(l, '","') .. '"]}}' end
-- a FunctionDef: args / outs are {name, dtype} pairs; ret maps an output to "node:arg:index"
local function func(name, args, outs, nodes, ret)
  local function argdefs(l)
    local t = {}
    for i, a in ipairs(l) do t[i] = ('{"name": "%s", "type": "%s"}'):format(a[1], a[2]) end
    return "[" .. table.concat(t, ",") .. "]"
  end
  local r = {}
  for k, v in pairs(ret) do r[#r + 1] = ('"%s": "%s"'):format(k, v) end
  return ('{"signature": {"name": "%s", "inputArg": %s, "outputArg": %s}, "nodeDef": [%s], "ret": {%s}}')
      :format(name, argdefs(args), argdefs(outs), table.concat(nodes, ","), table.concat(r, ","))
end

function TestFreezeControl:test_imported_if_and_while()
  local fa = { { "a", "DT_FLOAT" }, { "b", "DT_FLOAT" } }
  local wa = { { "i", "DT_INT32" }, { "s", "DT_FLOAT" }, { "x", "DT_FLOAT" }, { "k", "DT_FLOAT" }, { "n", "DT_INT32" } }
  local wo = { { "i1", "DT_INT32" }, { "s1", "DT_FLOAT" }, { "x1", "DT_FLOAT" }, { "k1", "DT_FLOAT" }, { "n1", "DT_INT32" } }
  local FLOAT, INT = J.FLOAT, J.INT32
  local nodes = J.graph({
    J.placeholder("x", { 2 }), J.placeholder("k", {}), J.placeholder("p", {}, "DT_BOOL"),
    J.placeholder("n", {}, "DT_INT32"), J.placeholder("zero", {}, "DT_INT32"),
    J.node("y", "StatelessIf", { "p", "x", "k" }, attrs {
      Tcond = BOOL, Tin = types({ "DT_FLOAT", "DT_FLOAT" }), Tout = types({ "DT_FLOAT" }),
      then_branch = '{"func": {"name": "then_fn"}}', else_branch = '{"func": {"name": "else_fn"}}' }),
    J.node("w", "While", { "zero", "x", "x", "k", "n" }, attrs {
      T = types({ "DT_INT32", "DT_FLOAT", "DT_FLOAT", "DT_FLOAT", "DT_INT32" }),
      cond = '{"func": {"name": "cond_fn"}}', body = '{"func": {"name": "body_fn"}}' }),
    J.node("out", "AddV2", { "y", "w:1" }),
  })
  -- the library goes inside modelTopology, before the "}}" that closes it and the model
  local json = nodes:sub(1, -3) .. ', "library": {"function": [' .. table.concat({
    func("then_fn", fa, { { "r", "DT_FLOAT" } }, { J.node("mul", "Mul", { "a", "b" }) }, { r = "mul:z:0" }),
    func("else_fn", fa, { { "r", "DT_FLOAT" } }, { J.node("sub", "Sub", { "a", "b" }) }, { r = "sub:z:0" }),
    func("cond_fn", wa, { { "ok", "DT_BOOL" } }, { J.node("less", "Less", { "i", "n" }, '"T": ' .. INT) },
      { ok = "less:z:0" }),
    func("body_fn", wa, wo, {
      J.const("one", "DT_INT32", {}, { 1 }),
      J.node("inc", "AddV2", { "i", "one:output:0" }, '"T": ' .. INT),
      J.node("xk", "Mul", { "x", "k" }),
      J.node("acc", "AddV2", { "s", "xk:z:0" }),
    }, { i1 = "inc:z:0", s1 = "acc:z:0", x1 = "x", k1 = "k", n1 = "n" }),
  }, ",") .. "]}}}"
  local g = model.import_graph_def(json)
  local sess <close> = npu.Session { graph = g }
  local frozen = gu.convert_variables_to_constants(sess, g, { "out" })
  local ops = ops_of(frozen)
  lu.assertEquals(ops.cond, 1)
  lu.assertEquals(ops["while"], 1)
  local fs <close> = npu.Session { graph = frozen }
  -- out = If + While: {3, 6} or {-2, -1}, plus x + n * x * k
  for _, c in ipairs({ { true, 0, { 4, 8 } }, { false, 2, { 5, 13 } }, { true, 3, { 13, 26 } } }) do
    local feeds = { ["x:0"] = npu.tensor({ 1, 2 }, F32), ["k:0"] = npu.tensor(3, F32), ["p:0"] = bool(c[1]),
      ["n:0"] = int(c[2]), ["zero:0"] = int(0) }
    local want = sess:run("out:0", feeds)
    lu.assertEquals(want:totable(), c[3])
    same_bits(fs:run("out:0", feeds), want)
  end
end

-- errors ----------------------------------------------------------------------------------

-- A training loop: the body assigns w and its next iteration reads what the last one wrote.
-- As a const w could not change, so the frozen graph would compute something else: refused,
-- naming the assign and the variable; kept a variable (blacklist), it freezes and runs.
function TestFreezeControl:test_assign_inside_a_loop_is_refused()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder(F32, { 2 }, "x")
  local w = g:variable(npu.tensor({ 1, 2 }, F32), "w")
  local scale = g:variable(npu.tensor({ 0.5, 0.25 }, F32), "scale")
  local r = npu.while_loop(function(i) return npu.less(i, 3) end,
    function(i, h)
      local wn = npu.assign(w, w * scale, { name = "decay" })
      return i + 1, h * wn
    end, { 0, x })
  local _out = npu.identity(r[2], { name = "out" })
  local sess <close> = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local feeds = { [x] = npu.tensor({ 1, 1 }, F32) }
  -- each iteration: w = w * scale, then h = h * w
  local want, wv = { 1, 1 }, { 1, 2 }
  for _ = 1, 3 do
    wv = { wv[1] * 0.5, wv[2] * 0.25 }
    want = { want[1] * wv[1], want[2] * wv[2] }
  end
  lu.assertEquals(sess:run("out:0", feeds):totable(), want)
  raises("NPU_ERR_ARG", { "'decay'", "writes variable 'w'", "inside a cond branch or while loop" },
    function() gu.convert_variables_to_constants(sess, g, { "out" }) end)
  -- w kept a variable: scale (read in the body, never written) frozen; the loop still decays w
  local frozen = gu.convert_variables_to_constants(sess, g, { "out" }, { variable_names_blacklist = { "w" } })
  lu.assertEquals(#frozen:variables(), 1)
  local fs <close> = npu.Session { graph = frozen }
  fs:run(frozen:global_variables_initializer())
  lu.assertEquals(fs:run("out:0", { ["x:0"] = npu.tensor({ 1, 1 }, F32) }):totable(), want)
end

-- A node inside a branch is not visible outside it: naming it as an output is refused,
-- naming the node and the cond; so is an output whose control dependency reaches into a
-- branch the outputs do not run.
function TestFreezeControl:test_node_inside_a_branch_is_refused()
  local m = trained_control(cond_model)
  local inner, inner_id, cond_name
  for i = 0, m.g:n_nodes() - 1 do
    local op = m.g:operation(i)
    if op:type() == "tanh" and m.g:node_region(i) > 0 and not inner then inner, inner_id = op:name(), i end
    if op:type() == "cond" and not cond_name then cond_name = op:name() end
  end
  lu.assertNotNil(inner)
  raises("NPU_ERR_ARG", { "output 2 ('" .. inner .. "')", "inside a cond branch or while loop ('" .. cond_name .. "')",
    "not visible outside it" },
    function() gu.convert_variables_to_constants(m.sess, m.g, { "out", inner }) end)
  local _ <close> = m.g:as_default()
  local side = npu.identity(m.x, { name = "side" })
  local side_id
  for i = 0, m.g:n_nodes() - 1 do
    if m.g:operation(i):name() == "side" then side_id = i end
  end
  m.g:add_control(side_id, inner_id)
  raises("NPU_ERR_ARG", { "the control dependency of 'side' reaches '" .. inner .. "'",
    "inside a cond branch or while loop ('" .. cond_name .. "') that the outputs do not run" },
    function() gu.convert_variables_to_constants(m.sess, m.g, { side }) end)
end
