-- freeze_spec.lua — npu.graph_util.convert_variables_to_constants (csrc/io/freeze.c): a
-- trained graph frozen for inference.  Checked: the frozen graph keeps only what the outputs
-- need (no initializer, assign, gradient or optimizer node), its consts hold the trained
-- values, its outputs are bit-equal to the trained session's under float32 and under
-- allow_mix_precision_bf16 (where its plan casts no weight at run time: the consts are
-- stored bfloat16 when the plan compiles); white/blacklists; it exports and reimports; and
-- every error names its culprit.
local lu = require("luaunit")
local npu = require("npu")
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

local function same_bits(a, b)
  lu.assertEquals(a:shape(), b:shape())
  lu.assertEquals(a:totable(), b:totable()) -- float32 values as doubles: equal means same bits
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

local function raises(code, pattern, fn)
  local ok, err = pcall(fn)
  lu.assertFalse(ok)
  lu.assertEquals(err.code, code, tostring(err))
  lu.assertStrContains(tostring(err), pattern)
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
