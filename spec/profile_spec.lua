-- profile_spec.lua — profiling_mode / profiling_options (exec/profile.c, docs/profiling.md):
-- where the PROF_* directory goes (output field, $ASCEND_WORK_PATH, the working directory),
-- op_summary.csv against the plan (sess:explain) and the run counts, op_statistic.csv against
-- op_summary.csv, trace.json's complete events, iteration_trace.csv per iteration with
-- iterations_per_loop and fp_point / bp_point, task_trace l0, host_sys, the environment
-- variables (through a subprocess), and the errors.  trace.json is checked with patterns here;
-- tests/test_profile.c parses it with cJSON.
local lu = require("luaunit")
local npu = require("npu")

local support = dofile(SPEC_DIR .. "/support.lua")
local sh_quote, ls, json_decode = support.sh_quote, support.ls, support.json_decode
local tmpdir, rm, exists, csv = support.tmpdir, support.rm_rf, support.exists, support.read_csv
local read = support.read

-- The single PROF_* directory under base (asserted).
local function prof_dir(base)
  local found = {}
  for _, name in ipairs(ls(base)) do
    if name:match("^PROF_") then found[#found + 1] = name end
  end
  lu.assertEquals(#found, 1, "PROF_* directories in " .. base .. ": " .. table.concat(found, " "))
  return base .. "/" .. found[1], found[1]
end

-- The complete ("X") events of trace.json of one category, as tables of their fields.
local function x_events(text, cat)
  local out = {}
  for line in text:gmatch("[^\n]+") do
    if line:find('"ph":"X"', 1, true) and line:find('"cat":"' .. cat .. '"', 1, true) then
      out[#out + 1] = {
        name = line:match('^,?{"name":"(.-)","cat"'),
        ts = tonumber(line:match('"ts":([%d.]+)')),
        dur = tonumber(line:match('"dur":([%d.]+)')),
        pid = tonumber(line:match('"pid":(%d+)')),
        tid = tonumber(line:match('"tid":(%d+)')),
        op = line:match('"op":"(.-)"'),
        plan = tonumber(line:match('"plan":(%d+)')),
        step = tonumber(line:match('"step":(%d+)')),
        iteration = tonumber(line:match('"iteration":(%d+)')),
        input_shapes = line:match('"input_shapes":"(.-)"'),
        line = line,
      }
    end
  end
  return out
end

-- counter += sum(batch), fed by a dataset: a training loop of `ipl` iterations per run.
local function counting_graph()
  local g = npu.Graph()
  local step, total = support.counting_loop(g, "batch_sum")
  return g, step, total
end

-- Runs the loop `runs` times with iterations_per_loop = ipl; returns the session's directory
-- and the loop plan's explain table (sess:explain of the loop run).
local function profile_loop(base, extra, runs, ipl)
  local g, step, total = counting_graph()
  local opts = { iterations_per_loop = ipl, profiling_mode = true,
    profiling_options = extra or ('{"output":"' .. base .. '/out"}') }
  local sess = npu.Session { graph = g, options = opts }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, ipl)
  local e = sess:explain({ total, loop })
  for _ = 1, runs do sess:run({ total, loop }) end
  sess:close()
  return e, g
end

TestProfile = {}

function TestProfile:setUp() self.base = tmpdir() end
function TestProfile:tearDown() rm(self.base) end

function TestProfile:test_files_appear_under_the_output_field()
  local base = self.base
  profile_loop(base, '{"output":"' .. base .. '/a/b","task_trace":"on"}', 1, 2)
  local dir, name = prof_dir(base .. "/a/b") -- made with its parents
  local pid = read("/proc/self/stat")
  local sid, p, stamp = name:match("^PROF_(%d+)_(%d+)_(%d+)$")
  lu.assertNotNil(sid, name)
  lu.assertEquals(#stamp, 14) -- YYYYMMDDhhmmss
  if pid then lu.assertEquals(p, pid:match("^(%d+)")) end
  -- training (graph_run_mode 1): training_trace is on by default
  lu.assertEquals(ls(dir), { "info.json", "iteration_trace.csv", "op_statistic.csv", "op_summary.csv", "report.html", "trace.json" })
  local info = read(dir .. "/info.json")
  lu.assertStrContains(info, '"truncated": false')
  lu.assertStrContains(info, '"task_trace": "l1"')
  lu.assertStrContains(info, '"runs": 2')
  lu.assertStrContains(info, '"iterations": 3') -- the initializer's and the loop's two
end

function TestProfile:test_op_summary_counts_steps_and_agrees_with_the_plan_and_op_statistic()
  local runs, ipl = 3, 4
  local e = profile_loop(self.base, nil, runs, ipl)
  lu.assertEquals(e.iterations, ipl)
  local dir = prof_dir(self.base .. "/out")
  local rows, header = csv(dir .. "/op_summary.csv")
  lu.assertEquals(header, { "plan_id", "step", "op_name", "op_type", "pass", "count", "total_us", "avg_us",
    "min_us", "max_us", "input_shapes", "input_dtypes", "output_shapes", "output_dtypes" })
  -- plan 0: the initializer, run once; plan 1: the loop, one row per step of its explain
  local loop, init, sum = {}, 0, 0
  for _, r in ipairs(rows) do
    if r.plan_id == "1" then loop[#loop + 1] = r else init = init + 1 end
    local total, avg, lo, hi = tonumber(r.total_us), tonumber(r.avg_us), tonumber(r.min_us), tonumber(r.max_us)
    lu.assertTrue(total >= 0 and lo >= 0 and lo <= avg + 0.001 and avg <= hi + 0.001, r.op_name)
    lu.assertAlmostEquals(avg, total / tonumber(r.count), 0.0011)
    sum = sum + total
  end
  lu.assertTrue(init >= 1)
  lu.assertEquals(#loop, #e.steps)
  for k, s in ipairs(e.steps) do
    local r = loop[k]
    lu.assertEquals(tonumber(r.step), k - 1)
    lu.assertEquals(r.op_type, s.op)
    lu.assertEquals(r.op_name, s.node)
    lu.assertEquals(tonumber(r.count), runs * ipl, s.node)
    -- l1: shapes and dtypes as the plan has them
    local shapes, dtypes = {}, {}
    for i, v in ipairs(s.outputs) do
      shapes[i] = "[" .. table.concat(v.shape, ",") .. "]"
      dtypes[i] = v.dtype
    end
    lu.assertEquals(r.output_shapes, table.concat(shapes, ";"), s.node)
    lu.assertEquals(r.output_dtypes, table.concat(dtypes, ";"), s.node)
  end
  -- op_statistic: per op type, its total the sum of op_summary's
  local stats = csv(dir .. "/op_statistic.csv")
  local stat_sum, ratio, count = 0, 0, 0
  local by_type = {}
  for _, r in ipairs(rows) do by_type[r.op_type] = (by_type[r.op_type] or 0) + tonumber(r.count) end
  for _, r in ipairs(stats) do
    stat_sum = stat_sum + tonumber(r.total_us)
    ratio = ratio + tonumber(r.ratio_percent)
    lu.assertEquals(tonumber(r.count), by_type[r.op_type], r.op_type)
    count = count + 1
  end
  lu.assertEquals(count, (function() local n = 0 for _ in pairs(by_type) do n = n + 1 end return n end)())
  lu.assertAlmostEquals(stat_sum, sum, 0.001 * #rows + 1e-9)
  lu.assertAlmostEquals(ratio, 100, 0.01 * #stats)
  for i = 2, #stats do -- largest first
    lu.assertTrue(tonumber(stats[i - 1].total_us) >= tonumber(stats[i].total_us))
  end
end

function TestProfile:test_trace_json_has_one_complete_event_per_step_per_iteration()
  local runs, ipl = 2, 3
  local e = profile_loop(self.base, nil, runs, ipl)
  local dir = prof_dir(self.base .. "/out")
  local text = read(dir .. "/trace.json")
  lu.assertStrMatches(text, '^{"traceEvents":%[\n.*\n%],\n"otherData":{.*}}\n$')
  lu.assertStrContains(text, '"truncated":false')
  -- it is JSON: the events, then the metadata
  local doc = json_decode(text)
  local n_x = 0
  for _, ev in ipairs(doc.traceEvents) do
    lu.assertTrue(ev.ph == "X" or ev.ph == "M", ev.ph)
    if ev.ph == "X" and ev.cat == "op" then n_x = n_x + 1 end
  end
  lu.assertEquals(doc.otherData.truncated, false)
  lu.assertEquals(doc.otherData.events_dropped, 0)
  lu.assertEquals(doc.otherData.events, #doc.traceEvents - 3) -- less the 3 metadata events
  local ops = x_events(text, "op")
  lu.assertEquals(#ops, n_x)
  local rows = csv(dir .. "/op_summary.csv")
  local want = 0
  for _, r in ipairs(rows) do want = want + tonumber(r.count) end
  lu.assertEquals(#ops, want)
  local per = {} -- loop plan: steps × iterations, each (iteration, step) once
  for _, ev in ipairs(ops) do
    lu.assertTrue(ev.dur >= 0 and ev.ts >= 0)
    lu.assertEquals(ev.pid, 0) -- the device
    lu.assertEquals(ev.tid, 0)
    if ev.plan == 1 then
      local key = ev.iteration .. ":" .. ev.step
      lu.assertNil(per[key], key)
      per[key] = true
      lu.assertEquals(ev.op, e.steps[ev.step + 1].op)
      lu.assertEquals(ev.name, e.steps[ev.step + 1].node)
      lu.assertNotNil(ev.input_shapes)
    end
  end
  local n = 0
  for _ in pairs(per) do n = n + 1 end
  lu.assertEquals(n, #e.steps * runs * ipl)
  -- iterations on tid 1, one per iteration (the initializer's included)
  lu.assertEquals(#x_events(text, "iteration"), 1 + runs * ipl)
end

function TestProfile:test_iteration_trace_rows_per_iteration_with_fp_and_bp_points()
  local runs, ipl = 2, 4
  local e = profile_loop(self.base,
    '{"output":"' .. self.base .. '/out","training_trace":"on","fp_point":"batch_sum","bp_point":""}', runs, ipl)
  local dir = prof_dir(self.base .. "/out")
  local rows, header = csv(dir .. "/iteration_trace.csv")
  lu.assertEquals(header, { "iteration_id", "plan_id", "start_us", "end_us", "duration_us", "fp_start_us",
    "bp_end_us", "fp_bp_us", "grad_refresh_us", "gap_us" })
  lu.assertEquals(#rows, 1 + runs * ipl) -- the initializer, then every loop iteration
  local fp_step
  for k, s in ipairs(e.steps) do if s.node == "batch_sum" then fp_step = k - 1 end end
  lu.assertNotNil(fp_step, "batch_sum runs in the loop plan")
  local text = read(dir .. "/trace.json")
  local starts = {} -- iteration -> ts of batch_sum's step
  for _, ev in ipairs(x_events(text, "op")) do
    if ev.plan == 1 and ev.step == fp_step then starts[ev.iteration] = ev.ts end
  end
  local last_end
  for i, r in ipairs(rows) do
    lu.assertEquals(tonumber(r.iteration_id), i - 1)
    local s, en, d = tonumber(r.start_us), tonumber(r.end_us), tonumber(r.duration_us)
    lu.assertAlmostEquals(en - s, d, 0.0011)
    lu.assertTrue(d >= 0)
    if i == 1 then
      -- the initializer plan has no batch_sum: no forward span
      lu.assertEquals(r.plan_id, "0")
      lu.assertEquals(r.fp_start_us, "")
      lu.assertEquals(r.gap_us, "")
    else
      lu.assertEquals(r.plan_id, "1")
      -- fp: batch_sum's step start; bp (empty): the plan's last step's end
      lu.assertEquals(tonumber(r.fp_start_us), starts[i - 1])
      local fp, bp = tonumber(r.fp_start_us), tonumber(r.bp_end_us)
      lu.assertTrue(s <= fp and fp <= bp and bp <= en)
      lu.assertAlmostEquals(tonumber(r.fp_bp_us), bp - fp, 0.0011)
      lu.assertAlmostEquals(tonumber(r.grad_refresh_us), en - bp, 0.0011)
      lu.assertAlmostEquals(tonumber(r.gap_us), s - last_end, 0.0011)
    end
    last_end = en
  end
end

function TestProfile:test_unknown_fp_point_fails_the_first_run()
  local g, step = counting_graph()
  local sess = npu.Session { graph = g, options = { profiling_mode = true,
    profiling_options = '{"output":"' .. self.base .. '/out","fp_point":"no_such_node"}' } }
  local ok, err = pcall(sess.run, sess, g:global_variables_initializer())
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_NOT_FOUND")
  lu.assertStrContains(tostring(err), "profiling_options field fp_point names no node of the graph: 'no_such_node'")
  -- again at the next run (nothing was recorded for the plan)
  ok, err = pcall(sess.run, sess, g:global_variables_initializer())
  lu.assertFalse(ok)
  sess:close()
  -- the older option spelling (003)
  sess = npu.Session { graph = g, options = { profiling_mode = true, bp_point = "nope",
    profiling_options = '{"output":"' .. self.base .. '/out2"}' } }
  ok, err = pcall(sess.run, sess, g:global_variables_initializer())
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "option bp_point names no node of the graph: 'nope'")
  sess:close()
  lu.assertNotNil(step)
end

function TestProfile:test_json_escapes_in_points_and_output_are_decoded()
  -- \uXXXX in fp_point is the character it names (here in the message naming the node)
  local g = counting_graph()
  local sess = npu.Session { graph = g, options = { profiling_mode = true,
    profiling_options = '{"output":"' .. self.base .. '/out","fp_point":"no_\\u00e9l\\u00E9ment\\/\\t"}' } }
  local ok, err = pcall(sess.run, sess, g:global_variables_initializer())
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "fp_point names no node of the graph: 'no_\u{e9}l\u{e9}ment/\t'")
  sess:close()
  -- a name the escapes spell is found: batch_sum
  sess = npu.Session { graph = g, options = { profiling_mode = true,
    profiling_options = '{"output":"' .. self.base .. '/o\\u0075t2","fp_point":"\\u0062atch_sum"}' } }
  sess:run(g:global_variables_initializer())
  sess:close()
  lu.assertEquals(#ls(self.base .. "/out2"), 1) -- the output path was decoded too
  -- what no C string or path can hold is refused at session creation
  ok, err = pcall(npu.Session, { graph = g, options = { profiling_mode = true,
    profiling_options = '{"output":"' .. self.base .. '/o3","fp_point":"a\\u0000b"}' } })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "profiling_options field fp_point: \\u0000")
  ok, err = pcall(npu.Session, { graph = g, options = { profiling_mode = true,
    profiling_options = '{"output":"' .. self.base .. '/o3","bp_point":"\\ud800x"}' } })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "profiling_options field bp_point: a \\u escape that is a lone high surrogate")
  ok, err = pcall(npu.Session, { graph = g, options = { profiling_mode = true,
    profiling_options = '{"output":"' .. self.base .. '/o\\u0001"}' } })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "profiling_options field output: the path contains a control character")
end

function TestProfile:test_task_trace_l0_omits_shapes_and_off_omits_step_files()
  profile_loop(self.base, '{"output":"' .. self.base .. '/l0","task_trace":"l0"}', 1, 2)
  local dir = prof_dir(self.base .. "/l0")
  local rows, header = csv(dir .. "/op_summary.csv")
  lu.assertEquals(header, { "plan_id", "step", "op_name", "op_type", "pass", "count", "total_us", "avg_us",
    "min_us", "max_us" })
  lu.assertTrue(#rows > 0)
  local text = read(dir .. "/trace.json")
  lu.assertTrue(#x_events(text, "op") > 0)
  lu.assertNil(text:find("input_shapes", 1, true))
  lu.assertNil(text:find("output_dtypes", 1, true))
  -- task_time wins over task_trace; off (online inference: training needs it on): no step
  -- statistics, no step events
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local y = npu.nn.relu(x)
  local sess = npu.Session { graph = g, options = { graph_run_mode = 0, profiling_mode = true,
    profiling_options = '{"output":"' .. self.base .. '/off","task_trace":"on","task_time":"off"}' } }
  sess:run(y, { [x] = npu.ones({ 2 }) })
  sess:close()
  dir = prof_dir(self.base .. "/off")
  lu.assertEquals(ls(dir), { "info.json", "report.html", "trace.json" })
  text = read(dir .. "/trace.json")
  lu.assertEquals(#x_events(text, "op"), 0)
  lu.assertStrContains(read(dir .. "/info.json"), '"task_trace": "off"')
end

function TestProfile:test_online_inference_has_no_iteration_trace_and_host_sys_is_written()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local y = npu.nn.relu(npu.matmul(x, g:const(npu.ones({ 3, 4 }), "w"), { name = "mm" }), { name = "r" })
  local sess = npu.Session { graph = g, options = { graph_run_mode = 0, session_device_id = 1, profiling_mode = true,
    profiling_options = '{"output":"' .. self.base .. '/out","host_sys":"cpu,mem"}' } }
  for _ = 1, 5 do sess:run(y, { [x] = npu.ones({ 2, 3 }) }) end
  sess:close()
  local dir = prof_dir(self.base .. "/out")
  lu.assertEquals(ls(dir), { "host_sys.csv", "info.json", "op_statistic.csv", "op_summary.csv", "report.html", "trace.json" })
  local host = {}
  for _, r in ipairs(csv(dir .. "/host_sys.csv")) do host[r.metric] = tonumber(r.value) end
  lu.assertTrue(host.wall_time > 0)
  lu.assertTrue(host.user_cpu_time >= 0 and host.system_cpu_time >= 0)
  lu.assertTrue(host.peak_rss > 0)
  lu.assertTrue(host.device_memory_peak > 0)
  local ops = x_events(read(dir .. "/trace.json"), "op")
  lu.assertTrue(#ops > 0)
  for _, ev in ipairs(ops) do lu.assertEquals(ev.pid, 1) end -- pid = session_device_id
  for _, r in ipairs(csv(dir .. "/op_summary.csv")) do lu.assertEquals(r.count, "5") end
end

function TestProfile:test_profiling_mode_false_makes_no_directory()
  local g, step = counting_graph()
  local sess = npu.Session { graph = g, options = { profiling_mode = false,
    profiling_options = '{"output":"' .. self.base .. '/out"}' } }
  sess:run(g:global_variables_initializer())
  sess:run(step)
  sess:close()
  lu.assertFalse(exists(self.base .. "/out"))
end

function TestProfile:test_a_session_without_runs_still_writes_its_files()
  local g = counting_graph()
  local sess = npu.Session { graph = g, options = { profiling_mode = true,
    profiling_options = '{"output":"' .. self.base .. '/out"}' } }
  sess:close()
  local dir = prof_dir(self.base .. "/out")
  local text = read(dir .. "/trace.json")
  lu.assertStrContains(text, '"events":0')
  local rows = csv(dir .. "/op_summary.csv")
  lu.assertEquals(#rows, 0)
end

function TestProfile:test_unwritable_output_is_an_error_at_session_creation()
  local file = self.base .. "/a_file"
  local f = assert(io.open(file, "w"))
  f:close()
  local g = counting_graph()
  local ok, err = pcall(npu.Session, { graph = g, options = { profiling_mode = true,
    profiling_options = '{"output":"' .. file .. '/sub"}' } })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), "profiling_options output: cannot create directory '" .. file .. "/sub'")
end

-- ---------------------------------------------------------------- the process environment

local SCRIPT = [[
local npu = require("npu")
local g = npu.Graph()
local x = g:placeholder("float32", {2}, "x")
local y = npu.nn.relu(x)
local sess = npu.Session{graph = g, options = OPTS}
sess:run(y, {[x] = npu.ones({2})})
sess:close()
print("done")
]]

local function run_script(dir, env, opts)
  return support.run_lua(dir, env, (SCRIPT:gsub("OPTS", opts or "{}")))
end

function TestProfile:test_environment_variables_turn_it_on()
  local out = self.base .. "/env"
  local env = "PROFILING_MODE=true PROFILING_OPTIONS=" .. sh_quote('{"output":"' .. out .. '","task_trace":"l0"}')
  lu.assertStrContains(run_script(self.base, env), "done")
  local dir = prof_dir(out)
  local _, header = csv(dir .. "/op_summary.csv")
  lu.assertEquals(#header, 10) -- l0, from PROFILING_OPTIONS
  -- the explicit option wins over PROFILING_MODE
  rm(out)
  lu.assertStrContains(run_script(self.base, env, "{profiling_mode = false}"), "done")
  lu.assertFalse(exists(out))
  -- and profiling_options over PROFILING_OPTIONS
  local out2 = self.base .. "/explicit"
  lu.assertStrContains(run_script(self.base, env, '{profiling_options = \'{"output":"' .. out2 .. '"}\'}'), "done")
  lu.assertFalse(exists(out))
  local _, header2 = csv(prof_dir(out2) .. "/op_summary.csv")
  lu.assertEquals(#header2, 14)
end

function TestProfile:test_ascend_work_path_then_npu_out()
  local work = self.base .. "/work"
  local cwd = self.base .. "/cwd"
  assert(os.execute("mkdir " .. sh_quote(cwd)))
  lu.assertStrContains(run_script(cwd, "ASCEND_WORK_PATH=" .. sh_quote(work),
    "{profiling_mode = true, export_compile_stat = 0}"), "done")
  prof_dir(work) -- made when missing
  lu.assertEquals(ls(cwd), {})
  lu.assertStrContains(run_script(cwd, "-u ASCEND_WORK_PATH",
    "{profiling_mode = true, export_compile_stat = 0}"), "done")
  lu.assertEquals(ls(cwd), { "npu_out" }) -- the default output directory, nothing loose
  local dir = prof_dir(cwd .. "/npu_out")
  lu.assertTrue(exists(dir .. "/trace.json"))
end

-- v <- v * two while i < 3 (maximum_iterations 5), then neg(v) if sum(v) > 0 else v.
local control_graph = support.control_graph

-- Steps inside a loop body and a taken branch have rows and events of their own: a body
-- step one event per iteration, with args.loop_iteration.
function TestProfile:test_steps_inside_loops_and_branches_are_profiled()
  local base = self.base
  local g, x, y = control_graph()
  local sess = npu.Session { graph = g, options = { profiling_mode = true,
    profiling_options = '{"output":"' .. base .. '/out","task_trace":"on"}' } }
  for _ = 1, 2 do sess:run(y, { [x] = npu.tensor({ 1, 2 }) }) end
  sess:close()
  local dir = prof_dir(base .. "/out")
  local counts = {}
  for _, r in ipairs(csv(dir .. "/op_summary.csv")) do counts[r.op_name] = tonumber(r.count) end
  lu.assertEquals(counts.double, 6) -- 3 iterations, 2 runs
  lu.assertEquals(counts.negate, 2)
  lu.assertEquals(counts.loop, 2)
  local text = read(dir .. "/trace.json")
  local its, loop_ev, negate_ev = {}, nil, nil
  for _, e in ipairs(x_events(text, "op")) do
    if e.name == "double" then its[#its + 1] = tonumber(e.line:match('"loop_iteration":(%d+)')) end
    if e.name == "loop" then loop_ev = e end
    if e.name == "negate" then negate_ev = e end
  end
  lu.assertEquals(its, { 0, 1, 2, 0, 1, 2 })
  lu.assertNil(negate_ev.line:match('"loop_iteration"')) -- in a branch, not in a loop
  -- the loop's own event spans its body's (its clock runs while they do)
  lu.assertTrue(loop_ev.dur > 0)
end
