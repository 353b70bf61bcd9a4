-- variable_copy_spec.lua — a variable's reduced-precision copy is made once per write, not once
-- per run (compile/precision.c: mark_variable_copies; exec/exec.c: copy_current).  Under a
-- mode that stores a matmul's weights in bfloat16 or float16, a plan reading a variable W
-- converts it by a Cast step; the plan keeps that copy and converts again only when W was
-- written since (an assign in a plan, the API's assign from a feed, a training step, a loop of
-- training steps, a checkpoint restored).  Checked, at 1 and 2 threads, in three modes: after
-- every kind of write the next run gives the bits of the same graph with its weights fed (a
-- feed is cast at every run: today's plan), the copies are reused while nothing writes
-- (sess:stats().copy_reuses), and a plan that writes the variable itself (training) keeps its
-- casts as before (no kept copy, nothing outside its arena).
local lu = require("luaunit")
local npu = require("npu")
local Saver = (npu.train and npu.train.Saver) or require("npu.saver").Saver

local MODES = { "allow_mix_precision_bf16", "allow_mix_precision_fp16", "force_fp16" }

-- x (3, 37) -> dense 40 + relu -> dense 10: y.  Weights w1 (37, 40), b1 (40), w2 (40, 10),
-- variables, or placeholders when fed.
local function mlp(x, w)
  local h = npu.nn.relu(npu.nn.bias_add(npu.matmul(x, w.w1), w.b1))
  return npu.matmul(h, w.w2)
end

local SHAPES = { w1 = { 37, 40 }, b1 = { 40 }, w2 = { 40, 10 } }
local NAMES = { "w1", "b1", "w2" }

local function variables_model(opts)
  local g = npu.Graph()
  local w = {}
  for i, n in ipairs(NAMES) do
    w[n] = g:variable(npu.random.normal(SHAPES[n], { stddev = 0.3, seed = 10 + i }), n)
  end
  local x = g:placeholder("float32", { 3, 37 }, "x")
  local y = mlp(x, w)
  -- training on a dataset's batch (loops need one), the same batch every step
  local ds = npu.data.Dataset.from_tensor_slices(npu.random.normal({ 3, 37 }, { seed = 30 }))
    :batch(3, { drop_remainder = true }):repeat_()
  local xb = ds:make_one_shot_iterator(g):get_next()
  local loss = npu.reduce_mean(npu.square(mlp(xb, w)))
  local train = npu.train.GradientDescentOptimizer(0.05):minimize(loss)
  -- the API's way to set a variable: an assign from a feed
  local w1_in = g:placeholder("float32", SHAPES.w1, "w1_in")
  local set_w1 = npu.assign(w.w1, w1_in)
  -- a plan that reads w (its copies kept) and writes another variable
  local count = g:variable(npu.zeros({}), "count")
  local bump = npu.assign(count, count + npu.reduce_sum(y))
  local sess = npu.Session { graph = g, options = opts }
  sess:run(g:global_variables_initializer())
  return { g = g, sess = sess, w = w, x = x, y = y, train = train, w1_in = w1_in,
           set_w1 = set_w1, bump = bump }
end

local function fed_model(opts)
  local g = npu.Graph()
  local w = {}
  for _, n in ipairs(NAMES) do w[n] = g:placeholder("float32", SHAPES[n], n) end
  local x = g:placeholder("float32", { 3, 37 }, "x")
  return { sess = npu.Session { graph = g, options = opts }, w = w, x = x, y = mlp(x, w) }
end

local function bits(t)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, e in ipairs(v) do walk(e) end
    else out[#out + 1] = ("%a"):format(v) end
  end
  walk(t:totable())
  return table.concat(out, ",")
end

local XV = npu.random.normal({ 3, 37 }, { seed = 7 })

-- y of the variables' session, checked against the fed twin given the variables' values now
local function check_y(m, fed, what)
  local y = m.sess:run(m.y, { [m.x] = XV })
  local vals = m.sess:run({ m.w.w1, m.w.b1, m.w.w2 })
  local want = fed.sess:run(fed.y, { [fed.x] = XV, [fed.w.w1] = vals[1], [fed.w.b1] = vals[2],
                                     [fed.w.w2] = vals[3] })
  lu.assertEquals(bits(y), bits(want), what)
  return bits(y)
end

local function casts(sess, fetch, feeds)
  local kept, plain = 0, 0
  for _, st in ipairs(sess:explain(fetch, feeds).steps) do
    if st.op == "cast" then
      if st.copy_of then kept = kept + 1 else plain = plain + 1 end
    end
  end
  return kept, plain
end

TestVariableCopy = {}

local function each_case(fn)
  local n0 = npu.core.n_threads()
  for _, threads in ipairs({ 1, 2 }) do
    npu.core.set_n_threads(threads)
    for _, mode in ipairs(MODES) do
      local ok, err = pcall(fn, { precision_mode = mode }, ("%s, %d thread(s)"):format(mode, threads))
      if not ok then
        npu.core.set_n_threads(n0)
        error(err, 0)
      end
    end
  end
  npu.core.set_n_threads(n0)
end

function TestVariableCopy:test_every_write_is_seen_by_the_next_run()
  each_case(function(opts, case)
    local m, fed = variables_model(opts), fed_model(opts)
    local feeds = { [m.x] = XV }
    -- the inference plan keeps the two weights' copies (the bias stays float32)
    local kept = casts(m.sess, m.y, feeds)
    lu.assertEquals(kept, 2, case)
    local y0 = check_y(m, fed, case .. ": first run")
    local reuses = m.sess:stats().copy_reuses
    lu.assertEquals(bits(m.sess:run(m.y, feeds)), y0, case .. ": reused")
    lu.assertEquals(m.sess:stats().copy_reuses, reuses + 2, case)
    local path = os.tmpname()
    local saver = Saver(m.g)
    saver:save(m.sess, path)
    -- the API: an assign from a feed
    local w1 = npu.random.normal(SHAPES.w1, { stddev = 0.3, seed = 99 })
    m.sess:run(m.set_w1, { [m.w1_in] = w1 })
    local y1 = check_y(m, fed, case .. ": after the API's assign")
    lu.assertNotEquals(y1, y0)
    lu.assertEquals(bits(m.sess:run(m.w.w1)), bits(w1))
    -- a training step (a fused update writes the weights in place)
    m.sess:run(m.train)
    local y2 = check_y(m, fed, case .. ": after a training step")
    lu.assertNotEquals(y2, y1)
    -- a plan reading the copies and writing another variable: reused there too
    reuses = m.sess:stats().copy_reuses
    m.sess:run({ m.y, m.bump }, feeds)
    m.sess:run({ m.y, m.bump }, feeds)
    lu.assertEquals(m.sess:stats().copy_reuses, reuses + 2, case) -- made by its first run only
    lu.assertEquals(check_y(m, fed, case .. ": unchanged"), y2)
    -- a checkpoint restored
    saver:restore(m.sess, path)
    os.remove(path)
    lu.assertEquals(check_y(m, fed, case .. ": after restore"), y0)
  end)
end

function TestVariableCopy:test_a_loop_of_training_steps_then_inference()
  each_case(function(opts, case)
    local loop_opts = { precision_mode = opts.precision_mode, iterations_per_loop = 3 }
    local a, b = variables_model(loop_opts), variables_model(opts)
    local fed = fed_model(opts)
    check_y(a, fed, case .. ": before") -- the copies made, then the loop writes the weights
    local loop = npu.util.set_iteration_per_loop(a.sess, a.train, 3)
    a.sess:run(loop)
    for _ = 1, 3 do b.sess:run(b.train) end
    for _, n in ipairs(NAMES) do
      lu.assertEquals(bits(a.sess:run(a.w[n])), bits(b.sess:run(b.w[n])), case .. ": " .. n)
    end
    lu.assertEquals(check_y(a, fed, case .. ": after the loop"), check_y(b, fed, case))
  end)
end

function TestVariableCopy:test_training_plans_keep_their_casts_in_the_arena()
  local m = variables_model({ precision_mode = "allow_mix_precision_bf16" })
  local kept, plain = casts(m.sess, m.train)
  lu.assertEquals(kept, 0) -- the plan writes the weights: a copy would never be reused
  lu.assertTrue(plain >= 2)
  lu.assertEquals(m.sess:explain(m.train).memory.variable_copy_bytes, 0)
  -- the inference plan's copies are its own buffers, counted in own_bytes
  local mem = m.sess:explain(m.y, { [m.x] = XV }).memory
  lu.assertEquals(mem.variable_copy_bytes, (37 * 40 + 40 * 10) * 2)
  lu.assertTrue(mem.own_bytes >= mem.variable_copy_bytes)
  lu.assertStrContains(tostring(m.sess:explain(m.y, { [m.x] = XV })), "variables' kept copies")
  -- float32 plans have no casts at all
  local f = variables_model({ precision_mode = "must_keep_origin_dtype" })
  lu.assertEquals({ casts(f.sess, f.y, { [f.x] = XV }) }, { 0, 0 })
  f.sess:run(f.y, { [f.x] = XV })
  f.sess:run(f.y, { [f.x] = XV })
  lu.assertEquals(f.sess:stats().copy_reuses, 0)
end

function TestVariableCopy:test_an_uninitialised_variable_is_still_an_error()
  local g = npu.Graph()
  local w = g:variable(npu.random.normal({ 4, 3 }, { seed = 1 }), "w")
  local x = g:placeholder("float32", { 1, 4 }, "x")
  local y = npu.matmul(x, w)
  local sess = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16" } }
  local feeds = { [x] = npu.ones({ 1, 4 }) }
  for _ = 1, 2 do -- the copy was never made: the second run fails the same way
    local ok, err = pcall(sess.run, sess, y, feeds)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "variable 'w' is not initialised")
  end
  sess:run(g:global_variables_initializer())
  lu.assertEquals(#sess:run(y, feeds):totable()[1], 3)
  lu.assertEquals(sess:stats().copy_reuses, 0)
end

-- A feed of a variable's value (or of an identity of it) overrides the variable for that run:
-- its cast is of the feed, which may change at every run, so the plan keeps no copy of it.
function TestVariableCopy:test_a_fed_variable_value_is_cast_at_every_run()
  each_case(function(opts, what)
    local m = variables_model(opts)
    local fed = fed_model(opts)
    local ident = npu.identity(m.w.w2)
    local y2 = npu.matmul(npu.nn.relu(npu.nn.bias_add(npu.matmul(m.x, m.w.w1), m.w.b1)), ident)
    local reuses0 = m.sess:stats().copy_reuses
    for seed = 1, 3 do
      local W1 = npu.random.normal(SHAPES.w1, { stddev = 0.3, seed = 40 + seed })
      local W2 = npu.random.normal(SHAPES.w2, { stddev = 0.3, seed = 50 + seed })
      local stored = m.sess:run({ m.w.b1, m.w.w2 })
      local want = fed.sess:run(fed.y, { [fed.x] = XV, [fed.w.w1] = W1, [fed.w.b1] = stored[1],
                                         [fed.w.w2] = stored[2] })
      local y = m.sess:run(m.y, { [m.x] = XV, [m.w.w1] = W1 })
      lu.assertEquals(bits(y), bits(want), ("%s, w1 fed, seed %d"):format(what, seed))
      want = fed.sess:run(fed.y, { [fed.x] = XV, [fed.w.w1] = m.sess:run(m.w.w1),
                                   [fed.w.b1] = stored[1], [fed.w.w2] = W2 })
      y = m.sess:run(y2, { [m.x] = XV, [ident] = W2 })
      lu.assertEquals(bits(y), bits(want), ("%s, identity of w2 fed, seed %d"):format(what, seed))
    end
    -- only the weight not fed keeps its copy (w2; then w1; b1 stays float32): 1 reuse a run
    -- from the second run of each plan on
    lu.assertEquals(m.sess:stats().copy_reuses - reuses0, 4, what)
    local kept = casts(m.sess, m.y, { [m.x] = XV, [m.w.w1] = npu.zeros(SHAPES.w1) })
    lu.assertEquals(kept, 1, what)
  end)
end
