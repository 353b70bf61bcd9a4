-- memory_spec.lua — memory planning: the intermediate values of a plan share one arena (placed
-- by lifetime), what explain reports of it, and that sharing never changes a result: an MLP
-- and a convolutional model of ../shared/models against independent results, a value read
-- late after many others, fetched intermediates, an iterations_per_loop loop, two plans in
-- one session.  (Planning on against off, bit for bit, and the context's peak bytes: C test
-- tests/test_memory.c, which can set NPU_MEMORY_PLAN per session.)
local lu = require("luaunit")
local npu = require("npu")
local model = require("npu.model")

local MODELS_DIR = os.getenv("NPU_MODELS_DIR") or (ROOT_DIR or ".") .. "/../shared/models"

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- The invariants of explain's memory report, whatever the graph.
local function check_report(e)
  local m = e.memory
  lu.assertTrue(m.planning)
  lu.assertTrue(m.arena_bytes >= m.live_peak_bytes, "the arena holds the live peak")
  lu.assertTrue(m.arena_bytes % 64 == 0 or m.arena_bytes == 0)
  local buffers = m.buffers_in_arena and 0 or m.scratch_bytes + m.round_bytes
  lu.assertEquals(m.total_bytes, m.arena_bytes + m.own_bytes + m.constant_bytes + buffers)
  -- values in the arena never overlap while both are live: check it from the steps
  local placed = {}
  local n = 0
  for k, s in ipairs(e.steps) do
    for _, v in ipairs(s.outputs) do
      if v.memory == "arena" then
        lu.assertEquals(v.offset % 64, 0, v.name)
        lu.assertTrue(v.offset + v.bytes <= m.arena_bytes, v.name)
        if not placed[v.name] then n = n + 1 end
        placed[v.name] = { first = k, last = k, lo = v.offset, hi = v.offset + v.bytes }
      end
    end
    for _, v in ipairs(s.inputs) do
      if placed[v.name] then placed[v.name].last = k end
    end
  end
  lu.assertEquals(n, m.planned_values)
  -- a reshape's output may share its input's block (alias_of, at the same offset): one group
  local group = {}
  local function root(name) while group[name] do name = group[name] end return name end
  local n_alias = 0
  for _, s in ipairs(e.steps) do
    for _, v in ipairs(s.outputs) do
      if v.alias_of then
        lu.assertTrue(s.op == "reshape" or s.op == "squeeze" or s.op == "expand_dims", s.op)
        lu.assertEquals(s.inputs[1].name, v.alias_of)
        lu.assertEquals(s.inputs[1].offset, v.offset, v.name)
        group[v.name] = v.alias_of
        n_alias = n_alias + 1
      end
    end
  end
  lu.assertEquals(n_alias, m.aliased_values)
  for a, pa in pairs(placed) do
    for b, pb in pairs(placed) do
      if a < b and root(a) ~= root(b) and pa.first <= pb.last and pb.first <= pa.last then
        lu.assertTrue(pa.hi <= pb.lo or pb.hi <= pa.lo, ("%s and %s overlap while live"):format(a, b))
      end
    end
  end
  return m
end

-- An MLP of `depth` hidden layers of `width`, on (batch, 32) inputs, 10 classes.
local function mlp(depth, width)
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 32 }, "x")
  local h, fan = x, 32
  for i = 1, depth do
    local w = g:const(npu.random.normal({ fan, width }, { stddev = 1 / math.sqrt(fan), seed = i }), "w" .. i)
    local b = g:const(npu.random.normal({ width }, { stddev = 0.1, seed = 100 + i }), "b" .. i)
    h = npu.relu(npu.add(npu.matmul(h, w), b), { name = "h" .. i })
    fan = width
  end
  local w = g:const(npu.random.normal({ fan, 10 }, { stddev = 0.1, seed = 99 }), "w_out")
  local y = npu.nn.softmax(npu.matmul(h, w), { name = "y" })
  return g, x, y
end

TestMemory = {}

function TestMemory:test_mlp_arena_below_the_sum_and_results_unchanged()
  local g, x, y = mlp(6, 64)
  local feed = { [x] = npu.random.normal({ 16, 32 }, { seed = 7 }) }
  local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local e = sess:explain(y, feed)
  local m = check_report(e)
  lu.assertTrue(m.planned_values >= 6)
  lu.assertTrue(m.arena_bytes < m.planned_bytes, tostring(e))
  -- no intermediate keeps a buffer of its own: only the fetched y does
  lu.assertEquals(m.own_bytes, 16 * 10 * 4)
  -- the host reference path computes the same (its own kernels, serial)
  local ref = npu.Session { graph = g, options = { use_off_line = false } }
  local got = sess:run(y, feed)
  lu.assertTrue(npu.allclose(got, ref:run(y, feed), 1e-5, 1e-6))
  -- steady state: the second run allocates nothing new and gives the same values
  lu.assertTrue(npu.allclose(sess:run(y, feed), got, 0, 0))
end

function TestMemory:test_conv_model_arena_below_the_sum_and_matches_its_reference()
  local dir = MODELS_DIR .. "/emotion"
  if not exists(dir .. "/emotion.json") then lu.skip("models directory absent (set NPU_MODELS_DIR)") end
  local g, info = model.load_model(dir .. "/emotion.json")
  local feeds = { [info.inputs[1].name] = npu.load(dir .. "/input_0.npy") }
  local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local e = sess:explain(info.output_names, feeds)
  local m = check_report(e)
  lu.assertTrue(m.planned_values > 10)
  -- a chain of convolutions: a few values live at once, not all of them
  lu.assertTrue(m.arena_bytes < m.planned_bytes / 2, tostring(e))
  local y = sess:run(info.output_names, feeds)[1]
  local r = npu.load(dir .. "/output_0.npy")
  lu.assertTrue(npu.allclose(y, r, 1e-4, 1e-5))
end

-- a = x * 3 is read only by the last step; 20 steps in between produce and drop values.
function TestMemory:test_a_value_read_late_survives_the_values_between()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 64 }, "x")
  local a = npu.mul(x, 3, { name = "a" })
  local h = x
  for i = 1, 20 do h = npu.add(npu.mul(h, 0.5), i) end
  local y = npu.add(h, a, { name = "y" })
  local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local xs = {}
  for i = 1, 4 * 64 do xs[i] = (i % 13) - 6 end
  local e = sess:explain(y, { [x] = npu.tensor(xs):reshape({ 4, 64 }) })
  check_report(e)
  local out = sess:run(y, { [x] = npu.tensor(xs):reshape({ 4, 64 }) }):reshape({ 4 * 64 }):totable()
  local function f32(v) return (string.unpack("f", string.pack("f", v))) end
  for i = 1, 4 * 64 do
    local v = xs[i]
    for k = 1, 20 do v = f32(f32(v * 0.5) + k) end -- each float32 operation rounded
    lu.assertEquals(out[i], f32(v + f32(xs[i] * 3)), "element " .. i)
  end
end

function TestMemory:test_fetched_intermediates_and_identities_keep_their_values()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 32 }, "x")
  local h1 = npu.add(x, 1, { name = "h1" })
  local h2 = npu.mul(h1, 2, { name = "h2" })
  local seen = npu.identity(h2, { name = "seen" })
  local h3 = npu.add(h2, 5, { name = "h3" })
  local h4 = npu.mul(h3, 3, { name = "h4" })
  local y = npu.add(h4, h1, { name = "y" })
  local sess = npu.Session { graph = g }
  local function feed(v) return { [x] = npu.fill({ 2, 32 }, v) } end
  local e = sess:explain({ y, h3, seen }, feed(1))
  check_report(e)
  local r1 = sess:run({ y, h3, seen }, feed(1))
  local r2 = sess:run({ y, h3, seen }, feed(2))
  -- x = 1: h1 2, h2 4, h3 9, h4 27, y 29; x = 2: h1 3, h2 6, h3 11, h4 33, y 36
  for _, c in ipairs({ { r1, 29, 9, 4 }, { r2, 36, 11, 6 } }) do
    lu.assertTrue(npu.allclose(c[1][1], npu.fill({ 2, 32 }, c[2]), 0, 0))
    lu.assertTrue(npu.allclose(c[1][2], npu.fill({ 2, 32 }, c[3]), 0, 0))
    lu.assertTrue(npu.allclose(c[1][3], npu.fill({ 2, 32 }, c[4]), 0, 0))
  end
end

-- A loop of 4 iterations per call (iterations_per_loop) over batches of 8 drawn from 0..63
-- (repeated): doubled = 2 * batch, shifted = between(doubled) + 1, its sum added to variable
-- total.  Checks the explained plan's report and returns it with a function that runs two calls
-- and checks total after each (the sums of 2 i + 1 over 0..31, then over 0..63).
local function doubling_loop(between)
  local g = npu.Graph()
  local xs = npu.range(0, 64, 1, "float32")
  local ds = npu.data.Dataset.from_tensor_slices(xs):batch(8, { drop_remainder = true }):repeat_()
  local b = ds:make_one_shot_iterator(g):get_next()
  local total = g:variable(npu.zeros({}), "total")
  local doubled = npu.mul(b, 2, { name = "doubled" })
  local shifted = npu.add(between(doubled), 1, { name = "shifted" })
  local step = npu.assign(total, total + npu.reduce_sum(shifted))
  local sess = npu.Session { graph = g, options = { iterations_per_loop = 4 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 4)
  local e = sess:explain({ total, loop })
  lu.assertEquals(e.iterations, 4)
  check_report(e)
  return e, function()
    local want = 0
    for i = 0, 31 do want = want + 2 * i + 1 end
    lu.assertEquals(sess:run({ total, loop })[1]:item(), want)
    for i = 32, 63 do want = want + 2 * i + 1 end
    lu.assertEquals(sess:run({ total, loop })[1]:item(), want)
  end
end

-- iterations_per_loop: the steps run 4 times per call; intermediates are rewritten each time.
function TestMemory:test_a_loop_reuses_the_arena_every_iteration()
  local e, run_twice = doubling_loop(function(doubled) return doubled end)
  local function memory_of(name)
    for _, s in ipairs(e.steps) do
      if s.node == name then return s.outputs[1].memory end
    end
  end
  lu.assertEquals(memory_of("doubled"), "arena")
  run_twice()
end

-- Two signatures, run alternately; with static_memory_policy 2 they share one arena (grown
-- when the larger plan compiles second).
function TestMemory:test_two_plans_in_one_session_keep_apart()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 16 }, "x")
  local h = x
  for _ = 1, 6 do h = npu.add(npu.mul(h, 2), 1) end
  local y = npu.add(h, x, { name = "y" })
  for _, policy in ipairs({ 0, 2 }) do
    local sess = npu.Session { graph = g, options = { static_memory_policy = policy } }
    for round = 1, 3 do
      for _, rows in ipairs({ 2, 5 }) do
        local v = round + rows
        local got = sess:run(y, { [x] = npu.fill({ rows, 16 }, v) })
        local want = v
        for _ = 1, 6 do want = want * 2 + 1 end
        lu.assertTrue(npu.allclose(got, npu.fill({ rows, 16 }, want + v), 0, 0))
      end
    end
    lu.assertEquals(sess:n_plans(), 2)
    local e = sess:explain(y, { [x] = npu.fill({ 2, 16 }, 0) })
    lu.assertEquals(e.memory.arena_shared, policy == 2)
    check_report(e)
  end
end

-- ---- reshapes without a copy: a reshape, squeeze or expand_dims of a planned value shares
-- its input's arena block (explain: alias_of), so the step copies nothing ----

local function f32(v) return (string.unpack("f", string.pack("f", v))) end

-- x (4, 64) -> a = x * 2 -> r = reshape (64, 4) -> s = expand_dims 0 -> q = squeeze 0 ->
-- y = q + 1 (fetched); more = a * 3 reads a after the chain, so the group outlives it.
local function chain(fetch_names)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 64 }, "x")
  local a = npu.mul(x, 2, { name = "a" })
  local r = npu.reshape(a, { 64, 4 }, { name = "r" })
  local s = npu.expand_dims(r, 0, { name = "s" })
  local q = npu.squeeze(s, { 0 }, { name = "q" })
  local y = npu.add(q, 1, { name = "y" })
  local more = npu.mul(a, 3, { name = "more" })
  local z = npu.add(npu.reshape(more, { 64, 4 }), y, { name = "z" })
  local by = { x = x, a = a, r = r, s = s, q = q, y = y, z = z }
  local fetches = {}
  for i, n in ipairs(fetch_names) do fetches[i] = by[n] end
  return g, x, fetches
end

local function xs_feed(x, k)
  local xs = {}
  for i = 1, 256 do xs[i] = ((i * 7 + k) % 19 - 9) * 0.375 end
  return { [x] = npu.tensor(xs):reshape({ 4, 64 }) }, xs
end

local function outputs_of(e)
  local by = {}
  for _, s in ipairs(e.steps) do
    for _, v in ipairs(s.outputs) do by[v.name:match("^(.-):")] = v end
  end
  return by
end

function TestMemory:test_reshape_squeeze_expand_dims_alias_their_input()
  local g, x, f = chain({ "z" })
  local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local feed, xs = xs_feed(x, 1)
  local e = sess:explain(f, feed)
  local m = check_report(e)
  local v = outputs_of(e)
  lu.assertEquals(v.r.alias_of, "a:0")
  lu.assertEquals(v.s.alias_of, "r:0")
  lu.assertEquals(v.q.alias_of, "s:0")
  lu.assertEquals(v.r.offset, v.a.offset)
  lu.assertEquals(v.q.offset, v.a.offset)
  lu.assertNil(v.more.alias_of)
  lu.assertEquals(v.more.memory, "arena")
  lu.assertEquals(m.aliased_values, 4) -- the three and more's reshape
  -- the listing says so instead of an offset of its own
  lu.assertStrContains(tostring(e), "alias of a:0")
  lu.assertStrContains(tostring(e), "4 of them aliases")
  -- two blocks of 1 KB: a/r/s/q (q is read by the last step, y + 1 fused into z) and
  -- more/its reshape; copying, more's reshape step would hold q, more and its output (3 KB)
  lu.assertEquals(m.arena_bytes, 2 * 1024, tostring(e))
  lu.assertEquals(m.live_peak_bytes, 2 * 1024)
  -- values computed here, twice (the second run reuses the arena)
  for round = 1, 2 do
    local z = sess:run(f, feed)[1]:reshape({ 256 }):totable()
    for i = 1, 256 do
      local a = f32(xs[i] * 2)
      lu.assertEquals(z[i], f32(f32(a * 3) + f32(a + 1)), ("round %d element %d"):format(round, i))
    end
  end
end

-- The arena shrinks by the reshape's size: a (16 KB) -> r = reshape -> y = reduce_sum
-- (fetched).  Copying, the reshape step holds a and r (32 KB); aliased, a/r is one block.
function TestMemory:test_an_alias_shrinks_the_arena_by_the_reshape()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 64, 64 }, "x")
  local a = npu.mul(x, 2, { name = "a" })
  local r = npu.reshape(a, { 4096 }, { name = "r" })
  local y = npu.reduce_sum(r, 0, { name = "y" })
  local sess = npu.Session { graph = g }
  local e = sess:explain(y, { [x] = npu.fill({ 64, 64 }, -1) })
  local m = check_report(e)
  lu.assertEquals(m.aliased_values, 1)
  lu.assertEquals(m.planned_bytes, 2 * 16384) -- a and r: their cost unplanned
  lu.assertEquals(m.live_peak_bytes, 16384)   -- a and r count once
  lu.assertEquals(m.arena_bytes, 16384)
  lu.assertEquals(sess:run(y, { [x] = npu.fill({ 64, 64 }, 1.5) }):item(), 4096 * 3)
  lu.assertEquals(sess:run(y, { [x] = npu.fill({ 64, 64 }, -0.25) }):item(), -2048)
end

-- A fetched reshape output keeps a buffer of its own (the caller holds it), and so does a
-- reshape of a fetched value: copies, as without aliasing; the results stay the caller's.
function TestMemory:test_fetched_ends_of_a_reshape_are_copies()
  for _, names in ipairs({ { "z", "r" }, { "z", "a" }, { "z", "q" }, { "z", "s", "a" } }) do
    local g, x, f = chain(names)
    local sess = npu.Session { graph = g }
    local feed, xs = xs_feed(x, 2)
    local e = sess:explain(f, feed)
    check_report(e)
    local v = outputs_of(e)
    for _, n in ipairs(names) do
      lu.assertEquals(v[n].memory, "own", n)
      lu.assertNil(v[n].alias_of, n)
    end
    local got = sess:run(f, feed)
    local kept = got[2]:reshape({ 256 }):totable()
    -- a later run with other feeds leaves the first run's fetched tensors alone
    local got2 = sess:run(f, (xs_feed(x, 5)))
    for i = 1, 256 do
      local a = f32(xs[i] * 2)
      lu.assertEquals(kept[i], names[2] == "q" and f32(a) or a, names[2] .. " " .. i)
      lu.assertEquals(got[1]:reshape({ 256 }):totable()[i], f32(f32(a * 3) + f32(a + 1)))
    end
    lu.assertFalse(npu.allclose(got[1], got2[1], 0, 0))
  end
end

-- A variable's value, a feed and a constant are not planned: a reshape of them copies.
function TestMemory:test_a_reshape_of_a_feed_variable_or_constant_copies()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 8 }, "x")
  local w = g:variable(npu.fill({ 2, 8 }, 4), "w")
  local c = g:const(npu.fill({ 2, 8 }, 5), "c")
  local rx = npu.reshape(x, { 16 }, { name = "rx" })
  local rw = npu.reshape(w, { 16 }, { name = "rw" })
  local rc = npu.reshape(npu.add(c, x), { 16 }, { name = "rc" })
  local y = npu.add(npu.add(rx, rw), rc, { name = "y" })
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local feed = { [x] = npu.fill({ 2, 8 }, 1) }
  local e = sess:explain(y, feed)
  local m = check_report(e)
  local v = outputs_of(e)
  lu.assertNil(v.rx.alias_of)
  lu.assertNil(v.rw.alias_of)
  lu.assertEquals(v.rc.alias_of ~= nil, true) -- c + x is a kernel's output: planned
  lu.assertEquals(m.aliased_values, 1)
  lu.assertTrue(npu.allclose(sess:run(y, feed), npu.fill({ 16 }, 1 + 4 + 6), 0, 0))
  sess:run(npu.assign(w, npu.fill({ 2, 8 }, -4)))
  lu.assertTrue(npu.allclose(sess:run(y, feed), npu.fill({ 16 }, 1 - 4 + 6), 0, 0))
end

-- iterations_per_loop: the aliased chain is rewritten every iteration, its sum carried in a
-- variable.
function TestMemory:test_an_aliased_reshape_in_a_loop()
  local e, run_twice = doubling_loop(function(doubled)
    local flat = npu.reshape(doubled, { 2, 4 }, { name = "flat" })
    return npu.expand_dims(flat, 0, { name = "wide" })
  end)
  local v = outputs_of(e)
  lu.assertEquals(v.flat.alias_of, "doubled:0")
  lu.assertEquals(v.wide.alias_of, "flat:0")
  run_twice()
end

-- static_memory_policy 2 (the session's shared arena) keeps the aliases; the results match.
function TestMemory:test_aliases_with_a_shared_arena()
  local g, x, f = chain({ "z" })
  local feed, xs = xs_feed(x, 3)
  local sess = npu.Session { graph = g, options = { static_memory_policy = 2 } }
  local e = sess:explain(f, feed)
  check_report(e)
  lu.assertTrue(e.memory.arena_shared)
  lu.assertEquals(outputs_of(e).r.alias_of, "a:0")
  local z = sess:run(f, feed)[1]:reshape({ 256 }):totable()
  for i = 1, 256 do
    local a = f32(xs[i] * 2)
    lu.assertEquals(z[i], f32(f32(a * 3) + f32(a + 1)), i)
  end
end
