-- progress_spec.lua — long runs and the smaller items of the Lua face (issue 13, items 7 and 9):
-- sess:run's {progress =, every =} on an iterations_per_loop loop (the steps seen, cancel by
-- returning true, errors inside the function, strict options), npu.util.ProgressBar drawing
-- into a string buffer, integer division by zero for every op and dtype on both paths,
-- npu.set_memory_limit, and profiling files complete when a script exits without closing.
local lu = require("luaunit")
local npu = require("npu")
local support = dofile(SPEC_DIR .. "/support.lua")
local fails = support.fails

-- support.counting_loop in a session of `ipl` iterations per loop: 1000 iterations add 9000.
local function loop_session(ipl)
  local g = npu.Graph()
  local step, total = support.counting_loop(g)
  local sess = npu.Session { graph = g, options = { iterations_per_loop = ipl } }
  sess:run(g:global_variables_initializer())
  return sess, npu.util.set_iteration_per_loop(sess, step, ipl), total
end

-- A stream that keeps what is written, for ProgressBar.
local function buffer()
  local b = { parts = {}, flushes = 0 }
  function b:write(...)
    for _, s in ipairs({ ... }) do self.parts[#self.parts + 1] = s end
    return self
  end
  function b:flush() self.flushes = self.flushes + 1 end
  function b:text() return table.concat(self.parts) end
  return b
end

-- A clock that advances `dt` seconds at each reading.
local function ticking(dt)
  local t = 0
  return function() t = t + dt; return t end
end

TestProgress = {}

function TestProgress:setUp()
  self.sess, self.loop, self.total = loop_session(1000)
end

function TestProgress:tearDown() self.sess:close() end

function TestProgress:test_every_100_sees_exactly_the_hundreds_of_1000()
  local seen = {}
  local r = self.sess:run({ self.total, self.loop }, nil, {
    progress = function(step, total) seen[#seen + 1] = { step, total } end, every = 100 })
  local want = {}
  for i = 1, 10 do want[i] = { 100 * i, 1000 } end
  lu.assertEquals(seen, want)
  lu.assertEquals(r[1]:item(), 9000) -- the fetch is the last iteration's
end

function TestProgress:test_default_every_is_about_a_hundred_calls()
  local steps = {}
  self.sess:run(self.loop, nil, { progress = function(step) steps[#steps + 1] = step end })
  lu.assertEquals(#steps, 100)
  lu.assertEquals({ steps[1], steps[2], steps[100] }, { 10, 20, 1000 })
end

function TestProgress:test_a_step_count_not_dividing_the_total_still_reports_the_last()
  local steps = {}
  self.sess:run(self.loop, nil, { progress = function(step) steps[#steps + 1] = step end, every = 300 })
  lu.assertEquals(steps, { 300, 600, 900, 1000 })
end

function TestProgress:test_a_run_without_a_loop_reports_once()
  local seen = {}
  local v = self.sess:run(self.total, nil, { progress = function(s, t) seen[#seen + 1] = { s, t } end })
  lu.assertEquals(seen, { { 1, 1 } })
  lu.assertEquals(v:item(), 0)
end

function TestProgress:test_returning_true_cancels_and_keeps_the_iterations_done()
  local calls = 0
  local msg, err = fails(self.sess.run, self.sess, { self.total, self.loop }, nil, {
    progress = function(step) calls = calls + 1; return step == 300 end, every = 100 })
  lu.assertTrue(npu.errors.is(err, npu.errors.CancelledError), msg)
  lu.assertStrContains(msg, "cancelled by its progress callback after iteration 300 of 1000")
  lu.assertEquals(calls, 3)
  -- 300 iterations ran: 60 cycles of (1 + 5 + 9 + 13 + 17)
  lu.assertEquals(self.sess:run(self.total):item(), 60 * 45)
  -- false and nil go on; the session runs again
  self.sess:run(self.loop, nil, { progress = function() return false end, every = 500 })
  lu.assertEquals(self.sess:run(self.total):item(), 60 * 45 + 9000)
end

function TestProgress:test_an_error_in_the_function_is_the_runs_error()
  local msg, err = fails(self.sess.run, self.sess, self.loop, nil, {
    progress = function(step) if step == 500 then error("stop at " .. step) end end, every = 100 })
  lu.assertTrue(npu.errors.is(err, npu.errors.CallbackError), msg)
  lu.assertEquals(err.code, "NPU_ERR_CALLBACK")
  lu.assertStrContains(err.message, "the progress function failed:")
  lu.assertStrContains(err.message, "progress_spec.lua")
  lu.assertStrContains(err.message, "stop at 500")
  lu.assertEquals(self.sess:run(self.total):item(), 100 * 45) -- 500 iterations done
  -- an error value that is no string keeps its type in the message
  msg = fails(self.sess.run, self.sess, self.loop, nil, { progress = function() error({}) end })
  lu.assertStrContains(msg, "(a table error value)")
  -- an npu.Error raised inside goes on unchanged
  local _, inner = fails(self.sess.run, self.sess, self.loop, nil, {
    progress = function() npu.errors.raise("mine", "NPU_ERR_NOT_FOUND", "no such thing") end })
  lu.assertTrue(npu.errors.is(inner, npu.errors.NotFoundError), tostring(inner))
  lu.assertEquals(inner.message, "no such thing")
end

function TestProgress:test_the_function_must_return_nothing_or_a_boolean()
  local msg, err = fails(self.sess.run, self.sess, self.loop, nil, { progress = function() return 1 end })
  lu.assertEquals(err.code, "NPU_ERR_CALLBACK")
  lu.assertStrContains(msg, "must return nothing, false or true (to cancel the run), got a number")
end

function TestProgress:test_the_function_may_close_the_session()
  -- the close waits for the run's end (freeing the plans under the running loop crashed)
  local calls = 0
  local r = self.sess:run({ self.total, self.loop }, nil, {
    progress = function(step)
      calls = calls + 1
      if step == 200 then self.sess:close(); collectgarbage() end
    end, every = 100 })
  lu.assertEquals(calls, 10)
  lu.assertEquals(r[1]:item(), 9000)
  lu.assertTrue(self.sess:closed())
  local msg, err = fails(self.sess.run, self.sess, self.total)
  lu.assertEquals(err.code, "NPU_ERR_STATE", msg)
  lu.assertStrContains(msg, "the session is closed")
end

function TestProgress:test_the_function_may_not_grow_the_graph_being_run()
  -- adding nodes moved the node and value arrays under the running loop (a use after free)
  local g = self.total:graph()
  local n = g:n_nodes()
  local msg, err = fails(self.sess.run, self.sess, self.loop, nil, {
    progress = function() g:const(npu.ones({ 3 }), "late") end, every = 100 })
  lu.assertEquals(err.code, "NPU_ERR_STATE", msg)
  lu.assertStrContains(msg, "cannot add node 'late': a session is running this graph")
  lu.assertEquals(g:n_nodes(), n)
  lu.assertEquals(self.sess:run(self.total):item(), 100 * 45 / 5) -- 100 iterations ran
  -- after the run the graph grows again
  lu.assertEquals(self.sess:run(g:const(npu.ones({ 3 }), "late")):totable(), { 1, 1, 1 })
end

function TestProgress:test_a_host_function_may_not_grow_the_graph_being_run()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 3 }, "x")
  local y = npu.host_func(function(v)
    g:const(npu.ones({ 3 }), "inside")
    return v
  end, x, "float32")
  local z = y + 1
  local sess <close> = npu.Session(g)
  local n = g:n_nodes()
  local msg = fails(sess.run, sess, z, { [x] = { 1, 2, 3 } })
  lu.assertStrContains(msg, "cannot add node 'inside': a session is running this graph")
  lu.assertEquals(g:n_nodes(), n)
end

function TestProgress:test_a_callable_table_is_a_progress_function()
  local steps = {}
  local callable = setmetatable({}, { __call = function(_, step) steps[#steps + 1] = step end })
  self.sess:run(self.loop, nil, { progress = callable, every = 250 })
  lu.assertEquals(steps, { 250, 500, 750, 1000 })
end

function TestProgress:test_run_options_are_strict()
  local s, loop = self.sess, self.loop
  local cases = {
    { { progres = print }, "unknown run option 'progres' (did you mean 'progress'?)" },
    { { evry = 3, progress = print }, "unknown run option 'evry' (did you mean 'every'?)" },
    { { progress = 3 }, "progress must be a function(step, total) or a callable, got number" },
    { { progress = print, every = 0 }, "every must be an integer >= 1 (iterations between progress calls), got 0" },
    { { progress = print, every = 1.5 }, "every must be an integer >= 1 (iterations between progress calls), got 1.5" },
    { { progress = print, every = "10" }, "every must be an integer >= 1 (iterations between progress calls), got string" },
    { { every = 10 }, "every is given without progress (the function it paces)" },
    { { timeout_in_ms = -1 }, "timeout_in_ms must be an integer >= 0" },
  }
  for _, c in ipairs(cases) do
    local msg, err = fails(s.run, s, loop, nil, c[1])
    lu.assertStrContains(msg, c[2])
    lu.assertEquals(err.code, "NPU_ERR_ARG", msg)
  end
  lu.assertEquals(s:run(self.total):item(), 0) -- nothing ran
end

-- ---- npu.util.ProgressBar ----

TestProgressBar = {}

function TestProgressBar:test_draws_a_bar_on_a_terminal_stream()
  local out = buffer()
  local bar = npu.util.ProgressBar { total = 1000, width = 10, stream = out, plain = false, clock = ticking(1) }
  bar:update(450)
  -- clock readings: 1 at creation, 2 here: 450 steps in 1 s
  lu.assertEquals(out:text(), "\r[====>     ]  45% 450/1000 450.0 it/s")
  bar:update(1000)
  bar:finish()
  bar:finish() -- once only
  lu.assertStrContains(out:text(), "\r[==========] 100% 1000/1000 500.0 it/s\r[==========] 100% 1000/1000 333.3 it/s\n")
  lu.assertEquals(select(2, out:text():gsub("\n", "")), 1)
  lu.assertTrue(out.flushes >= 3)
end

function TestProgressBar:test_plain_lines_every_tenth_and_at_the_end()
  local out = buffer()
  local bar = npu.util.ProgressBar { total = 1000, stream = out, plain = true, label = "train", clock = ticking(0.5) }
  for step = 50, 1000, 50 do bar:update(step) end
  bar:finish()
  local lines = {}
  for l in out:text():gmatch("[^\n]+") do lines[#lines + 1] = l end
  lu.assertEquals(#lines, 10)
  lu.assertEquals(lines[1], "train  10% 100/1000 200.0 it/s")
  lu.assertEquals(lines[10]:match("^train 100%% 1000/1000 "), "train 100% 1000/1000 ")
  lu.assertNotStrContains(out:text(), "\r")
end

function TestProgressBar:test_a_stream_that_is_not_a_terminal_gets_plain_lines()
  local out = buffer()
  local bar = npu.util.ProgressBar { total = 10, stream = out }
  bar:update(10)
  lu.assertTrue(bar.plain)
  lu.assertStrContains(out:text(), "100% 10/10")
  lu.assertNotStrContains(out:text(), "[")
end

function TestProgressBar:test_as_the_progress_function_of_runs()
  local sess, loop = loop_session(100)
  local out = buffer()
  -- the bar is callable: passed as it is
  local bar = npu.util.ProgressBar { total = 100, stream = out, plain = true }
  sess:run(loop, nil, { progress = bar, every = 10 })
  bar:finish()
  lu.assertStrContains(out:text(), "100% 100/100")
  lu.assertEquals(select(2, out:text():gsub("\n", "")), 10)
  -- one bar over three runs: callback(offset)
  local out2 = buffer()
  local whole = npu.util.ProgressBar { total = 300, stream = out2, plain = true }
  for i = 1, 3 do sess:run(loop, nil, { progress = whole:callback((i - 1) * 100), every = 50 }) end
  whole:finish()
  lu.assertStrContains(out2:text(), "100% 300/300")
  lu.assertStrContains(out2:text(), " 50% 150/300")
  sess:close()
end

function TestProgressBar:test_a_finished_bar_given_to_another_run_starts_again()
  -- one bar per epoch, reused: the second run drew nothing (its lines were all 'shown')
  local sess, loop = loop_session(100)
  local out = buffer()
  local bar = npu.util.ProgressBar { total = 100, stream = out, plain = true, clock = ticking(1) }
  for _ = 1, 2 do
    sess:run(loop, nil, { progress = bar, every = 10 })
    bar:finish()
  end
  sess:close()
  lu.assertEquals(select(2, out:text():gsub("100%% 100/100", "")), 2)
  lu.assertEquals(select(2, out:text():gsub("\n", "")), 20)
  -- the rate counts from the restart: 10 steps in 1 s (clock 1 at the restart, 2 at step 10)
  lu.assertStrContains(out:text(), "10% 10/100 10.0 it/s\n 20%")
  -- a step below the last one starts again too (a new run without finish)
  local out2 = buffer()
  local b2 = npu.util.ProgressBar { total = 10, width = 4, stream = out2, plain = false, clock = ticking(1) }
  b2:update(10)
  b2:update(5)
  lu.assertStrContains(out2:text(), "\r[==> ]  50% 5/10 5.0 it/s")
end

function TestProgressBar:test_clear_blanks_the_line()
  local out = buffer()
  local bar = npu.util.ProgressBar { total = 4, width = 4, stream = out, plain = false, clock = ticking(1) }
  bar:update(2)
  local drawn = #out:text() - 1
  bar:clear()
  lu.assertEquals(out:text():sub(-(drawn + 2)), "\r" .. (" "):rep(drawn) .. "\r")
end

function TestProgressBar:test_arguments_are_checked()
  local out = buffer()
  local cases = {
    { function() npu.util.ProgressBar { totl = 3 } end, "unknown" , "total" },
    { function() npu.util.ProgressBar { total = 0 } end, "total must be an integer >= 1, got 0" },
    { function() npu.util.ProgressBar { width = 2.5 } end, "width must be an integer >= 1, got 2.5" },
    { function() npu.util.ProgressBar { stream = 3 } end, "stream must have a write method" },
    { function() npu.util.ProgressBar { plain = "yes" } end, "plain must be a boolean, got string" },
    { function() npu.util.ProgressBar(5) end, "give a table" },
    { function() npu.util.ProgressBar { stream = out }:update(1) end, "the bar has no total" },
    { function() npu.util.ProgressBar { stream = out, total = 3 }:update(-1) end, "step must be an integer >= 0" },
  }
  for _, c in ipairs(cases) do
    local msg, err = fails(c[1])
    lu.assertStrContains(msg, c[2])
    if c[3] then lu.assertStrContains(msg, c[3]) end
    lu.assertEquals(err.code, "NPU_ERR_ARG", msg)
  end
end

-- ---- integer division by zero ----

TestIntegerDivisionByZero = {}

-- Runs op(x, d) with d holding a zero, on the device path and the reference path
-- (use_off_line = false): a clear error naming the node, on both.
function TestIntegerDivisionByZero:test_every_op_and_dtype_on_both_paths()
  for _, op in ipairs({ "div", "floor_div", "floor_mod" }) do
    for _, dtype in ipairs({ "int32", "int64" }) do
      for _, reference in ipairs({ false, true }) do
        local g = npu.Graph()
        local x = g:placeholder(dtype, { 4 }, "x")
        local d = g:placeholder(dtype, { 4 }, "d")
        local q = g:op(op, { x, d }, nil, "q_" .. op)
        local opts = reference and { use_off_line = false } or {}
        local sess = npu.Session { graph = g, options = opts }
        local what = op .. " " .. dtype .. (reference and " (reference)" or "")
        local msg, err = fails(sess.run, sess, q, { [x] = { 7, -7, 8, 9 }, [d] = { 2, 2, 0, 3 } })
        lu.assertEquals(err.code, "NPU_ERR_ARG", what .. ": " .. msg)
        lu.assertTrue(npu.errors.is(err, npu.errors.InvalidArgumentError), what)
        lu.assertStrContains(msg, op .. " 'q_" .. op .. "': Integer division by zero (" .. dtype .. " divisor)")
        lu.assertEquals(err.node, "q_" .. op, what)
        lu.assertEquals(err.op, op, what)
        -- without a zero the values are TensorFlow's
        local want = ({ div = { 3, -3, 2, 3 }, floor_div = { 3, -4, 2, 3 }, floor_mod = { 1, 1, 0, 0 } })[op]
        lu.assertEquals(sess:run(q, { [x] = { 7, -7, 8, 9 }, [d] = { 2, 2, 4, 3 } }):totable(), want, what)
        sess:close()
      end
    end
  end
end

function TestIntegerDivisionByZero:test_a_broadcast_zero_and_floats()
  local g = npu.Graph()
  local x = g:placeholder("int32", { 2, 3 }, "x")
  local d = g:placeholder("int32", {}, "d")
  local q = npu.floor_div(x, d, { name = "by_scalar" })
  local sess = npu.Session { graph = g }
  local _, err = fails(sess.run, sess, q, { [x] = { { 1, 2, 3 }, { 4, 5, 6 } }, [d] = 0 })
  lu.assertEquals(err.node, "by_scalar")
  -- floats divide by zero as IEEE does: no error
  local fx = g:placeholder("float32", { 2 }, "fx")
  local fz = npu.div(fx, g:const(npu.zeros({ 2 })))
  local v = sess:run(fz, { [fx] = { 1, -1 } }):totable()
  lu.assertEquals(v, { math.huge, -math.huge })
  sess:close()
end

function TestIntegerDivisionByZero:test_a_constant_zero_divisor_names_the_node_when_folded()
  local g = npu.Graph()
  local q = npu.floor_mod(g:const(npu.tensor({ 5, 6 }, "int32")), g:const(npu.tensor({ 1, 0 }, "int32")),
    { name = "folded" })
  local sess = npu.Session { graph = g }
  local msg, err = fails(sess.run, sess, q)
  lu.assertEquals(err.code, "NPU_ERR_ARG")
  lu.assertStrContains(msg, "floor_mod 'folded': Integer division by zero")
  sess:close()
end

-- ---- npu.set_memory_limit ----

TestMemoryLimit = {}

function TestMemoryLimit:tearDown() npu.set_memory_limit(0) end

function TestMemoryLimit:test_a_run_needing_more_than_the_limit_fails_naming_it()
  lu.assertEquals(npu.get_memory_limit(), 0)
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1 }, "x")
  local y = x + x
  local sess = npu.Session { graph = g }
  local small, big = npu.zeros({ 4 }), npu.zeros({ 1 << 20 })
  sess:run(y, { [x] = small })
  local limit = npu.core.live_bytes() + (1 << 20)
  npu.set_memory_limit(limit)
  lu.assertEquals(npu.get_memory_limit(), limit)
  local msg, err = fails(sess.run, sess, y, { [x] = big })
  lu.assertTrue(npu.errors.is(err, npu.errors.ResourceExhaustedError), msg)
  lu.assertStrContains(msg, ("of the %d-byte memory limit in use"):format(limit))
  lu.assertEquals(sess:run(y, { [x] = small }):totable(), { 0, 0, 0, 0 }) -- still usable
  npu.set_memory_limit(0)
  lu.assertEquals(#sess:run(y, { [x] = big }):totable(), 1 << 20)
  sess:close()
end

function TestMemoryLimit:test_a_limit_below_what_is_held_is_refused()
  local keep = npu.zeros({ 1 << 16 })
  local live = npu.core.live_bytes()
  local msg, err = fails(npu.set_memory_limit, live // 2)
  lu.assertEquals(err.code, "NPU_ERR_ARG")
  lu.assertStrContains(msg, ("memory limit %d bytes is below the %d bytes in use now"):format(live // 2, live))
  lu.assertEquals(npu.get_memory_limit(), 0)
  for _, bad in ipairs({ -1, 1.5, "100" }) do
    msg = fails(npu.set_memory_limit, bad)
    lu.assertStrContains(msg, "bytes must be an integer >= 0")
  end
  lu.assertEquals(keep:shape()[1], 1 << 16)
end

-- ---- profiling files at exit ----

TestProfileAtExit = {}

function TestProfileAtExit:setUp() self.dir = support.tmpdir() end
function TestProfileAtExit:tearDown() support.rm_rf(self.dir) end

-- A script profiling two runs that ends without closing its session: normally (the state is
-- closed, and the session with it) and by os.exit (it is not: what the files hold is what the
-- checkpoints after the runs wrote, exec/profile.c).
function TestProfileAtExit:test_files_are_complete_without_close()
  for _, ending in ipairs({ "", "os.exit(0)" }) do
    local out = self.dir .. "/" .. (ending == "" and "end" or "exit")
    local script = ([[
      local npu = require("npu")
      local g = npu.Graph()
      local x = g:placeholder("float32", {3}, "x")
      local y = npu.nn.relu(x, {name = "r"})
      local sess = npu.Session{graph = g, options = {profiling_mode = true,
        profiling_options = '{"output":"%s","task_trace":"l1"}'}}
      sess:run(y, {[x] = {1, -2, 3}})
      sess:run(y, {[x] = {1, -2, 3}})
      print("ran")
      %s
    ]]):format(out, ending)
    local text = support.run_lua(self.dir, "", script)
    lu.assertStrContains(text, "ran")
    local dirs = support.ls(out)
    lu.assertEquals(#dirs, 1, text)
    local prof = out .. "/" .. dirs[1]
    local trace = support.json_decode(support.read(prof .. "/trace.json"))
    lu.assertNotNil(trace, ending .. ": trace.json does not parse")
    local relu = 0
    for _, e in ipairs(trace.traceEvents) do
      if e.ph == "X" and e.args and e.args.op == "relu" then relu = relu + 1 end
    end
    lu.assertEquals(relu, 2, ending)
    lu.assertEquals(trace.otherData.producer, "lua-npu")
    local rows = support.read_csv(prof .. "/op_summary.csv")
    local found
    for _, r in ipairs(rows) do if r.op_type == "relu" then found = r end end
    lu.assertNotNil(found, ending)
    local info = support.json_decode(support.read(prof .. "/info.json"))
    if ending == "" then -- the state was closed: the session too, so everything is final
      lu.assertEquals(found.count, "2")
      lu.assertEquals(info.runs, 2)
    else -- the summaries are as of the last rewrite, which a run right after may skip
      lu.assertTrue(found.count == "1" or found.count == "2", found.count)
      lu.assertTrue(info.runs == 1 or info.runs == 2, tostring(info.runs))
    end
  end
end
