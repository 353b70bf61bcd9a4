-- explain_spec.lua — sess:explain(fetches [, feeds]): the plan a run with the same arguments
-- would execute, described without running it: the steps after folding (op, node, pass),
-- each value's name, dtype, shape, bytes and where its memory lives, the plan's totals; the
-- printed listing; the fetch and feed forms of sess:run; the errors.
local lu = require("luaunit")
local npu = require("npu")

-- Every fusion pass off, so each node keeps a step of its own and its value can be named.
local function no_fusion_file()
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write('{"Switch":{"GraphFusion":{"ALL":"off"},"UBFusion":{"ALL":"off"}}}\n')
  f:close()
  return path
end

local function session(g, opts)
  local path = no_fusion_file()
  local o = { precision_mode = "must_keep_origin_dtype", fusion_switch_file = path }
  for k, v in pairs(opts or {}) do o[k] = v end
  local sess = npu.Session { graph = g, options = o }
  os.remove(path) -- read when the session is created
  return sess
end

-- x (-1, 6) -> matmul w (6, 5) -> + b -> relu -> * k, with k = 2 * 3 folded at compile time.
local function mlp()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 6 }, "x")
  local w = g:const(npu.random.normal({ 6, 5 }, { seed = 3 }), "w")
  local b = g:const(npu.random.normal({ 5 }, { seed = 4 }), "b")
  local k = npu.mul(g:const(npu.tensor({ 2 }), "two"), g:const(npu.tensor({ 3 }), "three"), { name = "k" })
  local mm = npu.matmul(x, w, { name = "mm" })
  local z = npu.add(mm, b, { name = "z" })
  local r = npu.relu(z, { name = "r" })
  local y = npu.mul(r, k, { name = "y" })
  return g, x, y, { w = w, b = b, k = k, mm = mm, z = z, r = r }
end

local function by_node(e, name)
  for _, s in ipairs(e.steps) do
    if s.node == name then return s end
  end
end

TestExplain = {}

function TestExplain:test_steps_after_folding_with_names_dtypes_shapes_bytes()
  local g, x, y = mlp()
  local sess = session(g)
  local e = sess:explain(y, { [x] = npu.zeros({ 3, 6 }) })
  lu.assertEquals(e.n_steps, 4)
  lu.assertEquals(e.folded, 1) -- k
  lu.assertEquals(e.folded_nodes, { "k" })
  lu.assertEquals(e.iterations, 1)
  lu.assertEquals(e.precision_mode, "must_keep_origin_dtype")
  lu.assertFalse(e.reference)
  local want = { { "matmul", "mm" }, { "add", "z" }, { "relu", "r" }, { "mul", "y" } }
  lu.assertEquals(#e.steps, #want)
  for i, s in ipairs(e.steps) do
    lu.assertEquals({ s.op, s.node }, want[i])
    lu.assertNil(s.pass)
    lu.assertEquals(s.absorbed, {})
    lu.assertEquals(#s.outputs, 1)
    local out = s.outputs[1]
    lu.assertEquals(out.name, want[i][2] .. ":0")
    lu.assertEquals(out.dtype, "float32")
    lu.assertEquals(out.shape, { 3, 5 })
    lu.assertEquals(out.bytes, 3 * 5 * 4)
    lu.assertEquals(math.type(out.bytes), "integer")
  end
  -- inputs: the feed, the constants (k folded), the values between the steps
  local mm = by_node(e, "mm")
  lu.assertEquals(mm.inputs[1].name, "x:0")
  lu.assertEquals(mm.inputs[1].memory, "feed")
  lu.assertEquals(mm.inputs[1].shape, { 3, 6 })
  lu.assertEquals(mm.inputs[2].name, "w:0")
  lu.assertEquals(mm.inputs[2].memory, "constant")
  lu.assertEquals(mm.inputs[2].bytes, 6 * 5 * 4)
  lu.assertEquals(by_node(e, "y").inputs[2].name, "k:0")
  lu.assertEquals(by_node(e, "y").inputs[2].memory, "constant")
  lu.assertEquals(by_node(e, "z").inputs[1].name, "mm:0")
  lu.assertEquals(e.feeds[1].name, "x:0")
  lu.assertEquals(e.fetches[1].name, "y:0")
  lu.assertEquals(e.fetches[1].memory, "own")
  -- memory: w (120) + b (20) + k (4) read by the steps
  lu.assertEquals(e.memory.constant_bytes, 120 + 20 + 4)
  lu.assertEquals(e.memory.fetched_bytes, 60)
  lu.assertEquals(e.memory.planned_values, 3)
  lu.assertEquals(e.memory.planned_bytes, 3 * 60)
end

function TestExplain:test_explain_compiles_the_plan_a_run_uses_without_running_it()
  local g = npu.Graph()
  local v = g:variable(npu.tensor({ 1, 2 }), "v")
  local set = npu.assign(v, v * 10)
  local sess = session(g)
  sess:run(g:global_variables_initializer())
  local plans = sess:n_plans()
  local e = sess:explain(set)
  lu.assertEquals(sess:n_plans(), plans + 1)
  lu.assertEquals(by_node(e, "v").outputs[1].memory, "variable")
  lu.assertEquals(sess:run(v):totable(), { 1, 2 }) -- the assign did not run
  sess:run(set)
  lu.assertEquals(sess:n_plans(), plans + 2) -- the run reused the explained plan (+ v's plan)
  lu.assertEquals(sess:run(v):totable(), { 10, 20 })
  -- a dataset's iterator does not move either
  local ds = npu.data.Dataset.from_tensor_slices(npu.range(0, 4, 1, "float32")):batch(2, { drop_remainder = true })
  local nb = ds:make_one_shot_iterator(g):get_next()
  local s2 = session(g)
  lu.assertEquals(s2:explain(nb).steps[1].outputs[1].memory, "iterator")
  lu.assertEquals(s2:run(nb):totable(), { 0, 1 })
end

function TestExplain:test_the_fetch_and_feed_forms_of_run()
  local g, x, y, v = mlp()
  local sess = session(g)
  local feed = npu.zeros({ 2, 6 })
  local a = sess:explain(y, { [x] = feed })
  local b = sess:explain("y:0", { ["x:0"] = feed })
  lu.assertEquals(b.steps, a.steps)
  lu.assertEquals(sess:n_plans(), 1)
  -- a table of fetches, with an operation (a target: no value fetched)
  local c = sess:explain({ y, { v.r }, y:op() }, { [x] = { { 1, 2, 3, 4, 5, 6 } } })
  lu.assertEquals(#c.fetches, 2)
  lu.assertEquals(c.fetches[2].name, "r:0")
  lu.assertEquals(c.fetches[2].shape, { 1, 5 })
  lu.assertEquals(by_node(c, "r").outputs[1].memory, "own") -- fetched: not in the arena
  lu.assertEquals(by_node(c, "z").outputs[1].memory, "arena")
end

function TestExplain:test_tostring_lists_one_line_per_step()
  local g, x, y = mlp()
  local sess = session(g)
  local e = sess:explain(y, { [x] = npu.zeros({ 3, 6 }) })
  local text = tostring(e)
  local lines = {}
  for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
  lu.assertEquals(#lines, 3 + e.n_steps)
  lu.assertStrContains(lines[1], "4 steps, 1 folded")
  lu.assertStrContains(lines[2], ("arena %d B"):format(e.memory.arena_bytes))
  lu.assertEquals(lines[3], "folded: k")
  lu.assertStrMatches(lines[4], "%s*1%s+matmul%s+mm%s.*mm:0 float32 %[3,5%] 60 B arena@%d+")
  lu.assertStrMatches(lines[7], "%s*4%s+mul%s+y%s.*y:0 float32 %[3,5%] 60 B own")
end

function TestExplain:test_fused_steps_name_their_pass_and_absorbed_nodes()
  -- with the passes on (the default), whatever fusion makes of the graph is what explain shows:
  -- every node either has a step or is absorbed by one, and the results are unchanged.
  local g, x, y = mlp()
  local feed = { [x] = npu.random.normal({ 3, 6 }, { seed = 9 }) }
  local fused = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local e = fused:explain(y, feed)
  local seen = {}
  for _, s in ipairs(e.steps) do
    seen[s.node] = true
    for _, n in ipairs(s.absorbed) do seen[n] = true end
    if #s.absorbed > 0 then lu.assertStrContains(s.pass, "Pass") end
  end
  for _, n in ipairs({ "mm", "z", "r", "y" }) do lu.assertTrue(seen[n], n) end
  lu.assertTrue(npu.allclose(fused:run(y, feed), session(g):run(y, feed), 1e-6, 1e-6))
end

function TestExplain:test_precision_modes_show_in_the_plan()
  local g, x, y = mlp()
  local sess = session(g, { precision_mode = "force_fp16" })
  local e = sess:explain(y, { [x] = npu.zeros({ 3, 6 }) })
  lu.assertEquals(e.precision_mode, "force_fp16")
  -- float16 appears: stored as float16 values, or rounded to float16 around the kernel
  local mm = by_node(e, "mm")
  lu.assertTrue(mm.outputs[1].dtype == "float16" or mm.round_out == "float16", tostring(e))
  local ref = session(g, { use_off_line = false })
  lu.assertTrue(ref:explain(y, { [x] = npu.zeros({ 3, 6 }) }).reference)
end

function TestExplain:test_errors()
  local g, x, y = mlp()
  local sess = session(g)
  lu.assertErrorMsgContains("npu.Session:explain: cannot fetch a number", sess.explain, sess, 42)
  lu.assertErrorMsgContains("NPU_ERR_NOT_FOUND", sess.explain, sess, "nope:0")
  lu.assertErrorMsgContains("placeholder 'x' (float32 [-1,6]) must be fed", sess.explain, sess, y)
  lu.assertErrorMsgContains("npu.Session:explain: NPU_ERR_SHAPE: placeholder 'x' expects [-1,6], got [3,7]",
    sess.explain, sess, y, { [x] = npu.zeros({ 3, 7 }) })
  lu.assertErrorMsgContains("npu.Session:explain: feed for 'x:0'", sess.explain, sess, y, { [x] = "abc" })
  local other = npu.Graph()
  local z = other:placeholder("float32", { 1 }, "z")
  lu.assertErrorMsgContains("belongs to another graph", sess.explain, sess, z)
  lu.assertEquals(sess:n_plans(), 0)
  sess:close()
  lu.assertErrorMsgContains("npu.Session:explain: NPU_ERR_STATE: the session is closed", sess.explain, sess, y,
    { [x] = npu.zeros({ 3, 6 }) })
end

-- v <- v * two while i < 3 (maximum_iterations 5), then neg(v) if sum(v) > 0 else v (the
-- loop's v of any length).
local control_graph_with = dofile(SPEC_DIR .. "/support.lua").control_graph
local function control_graph() return control_graph_with({ {}, { -1 } }) end

local function walk(steps, fn, depth)
  for _, s in ipairs(steps or {}) do
    fn(s, depth or 0)
    for _, b in ipairs(s.blocks or {}) do walk(b.steps, fn, (depth or 0) + 1) end
  end
end

function TestExplain:test_control_flow_shows_blocks_dynamic_steps_and_maximum_iterations()
  local g, x, y = control_graph()
  local sess = session(g)
  local e = sess:explain(y, { [x] = npu.ones({ 2 }) })
  local loop, pick
  for _, s in ipairs(e.steps) do
    if s.op == "while" then loop = s end
    if s.op == "cond" then pick = s end
  end
  lu.assertNotNil(loop, tostring(e))
  lu.assertNotNil(pick, tostring(e))
  lu.assertEquals(loop.node, "loop")
  lu.assertEquals(loop.max_iterations, 5)
  lu.assertEquals({ loop.blocks[1].name, loop.blocks[2].name }, { "cond", "body" })
  local double = by_node({ steps = loop.blocks[2].steps }, "double")
  lu.assertTrue(double.dynamic) -- v's invariant [-1]: shaped when it runs
  lu.assertEquals({ pick.blocks[1].name, pick.blocks[2].name }, { "then", "else" })
  lu.assertNotNil(by_node({ steps = pick.blocks[1].steps }, "negate"))
  lu.assertEquals(#pick.blocks[2].steps, 0) -- the else branch only passes v on
  lu.assertNil(pick.max_iterations)
  -- every step, nested ones too, has its own number; top-level steps keep their positions
  local seen, n = {}, 0
  walk(e.steps, function(s)
    lu.assertNil(seen[s.index], "index " .. tostring(s.index) .. " twice")
    seen[s.index] = true
    n = n + 1
  end)
  for i = 0, n - 1 do lu.assertTrue(seen[i], "no step " .. i) end
  for i, s in ipairs(e.steps) do lu.assertEquals(s.index, i - 1) end
  -- the listing: the blocks indented under their step
  local text = tostring(e)
  lu.assertStrContains(text, "maximum_iterations 5")
  lu.assertStrContains(text, "(shaped when it runs)")
  lu.assertNotNil(text:find("\n +body:\n +%d+  add +Add [^\n]*\n +%d+  mul +double "), text)
  lu.assertNotNil(text:find("\n +then:\n +%d+  neg +negate "), text)
  lu.assertStrContains(text, "else: (no steps)")
  -- a loop without a bound says so
  local g2 = npu.Graph()
  local _ <close> = g2:as_default()
  local r = npu.while_loop(function(i) return npu.less(i, 4) end, function(i) return i + 1 end, { 0 })
  local e2 = session(g2):explain(r[1])
  lu.assertStrContains(tostring(e2), "maximum_iterations none")
end
