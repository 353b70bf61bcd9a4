-- cancel_spec.lua — stopping a run from Lua: sess:run's {timeout_in_ms = n} (TensorFlow's
-- RunOptions) fails with a deadline error the script can test for; Ctrl-C (SIGINT) in the
-- lua5.4 interpreter stops a long run at once (tests/test_cancel.c covers the C side).
local lu = require("luaunit")
local npu = require("npu")

-- i = 0; while i < n: i = i + 1 (n fed: 2^31 - 1 runs "forever")
local function counting_loop()
  local g = npu.Graph()
  local n = g:placeholder("int32", {}, "n")
  local r = npu.while_loop(function(i) return npu.less(i, n) end,
                           function(i) return i + 1 end, { g:const(0, "int32") })
  return g, n, r[1] or r
end

local function now_ms()
  local p = io.popen("date +%s%N")
  local ns = tonumber(p:read("a"))
  p:close()
  return ns / 1e6
end

TestCancel = {}

function TestCancel:test_timeout_in_ms_is_a_deadline_error()
  local g, n, i = counting_loop()
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(sess:run(i, { [n] = 7 }):item(), 7)
  local t0 = now_ms()
  local ok, err = pcall(sess.run, sess, i, { [n] = 2147483647 }, { timeout_in_ms = 30 })
  local ms = now_ms() - t0
  lu.assertFalse(ok)
  lu.assertTrue(npu.errors.is(err, npu.errors.DeadlineExceededError), tostring(err))
  lu.assertEquals(npu.error_code(err), "NPU_ERR_TIMEOUT")
  lu.assertStrContains(tostring(err), "npu.Session:run: NPU_ERR_TIMEOUT: the run passed its timeout " ..
                            "(timeout_in_ms = 30) at step")
  lu.assertTrue(ms >= 30 and ms < 2000, ms)
  -- the session is still usable, and a run that ends in time is not affected
  lu.assertEquals(sess:run(i, { [n] = 100 }, { timeout_in_ms = 60000 }):item(), 100)
  lu.assertEquals(sess:run(i, { [n] = 5 }, {}):item(), 5)
end

function TestCancel:test_bad_run_options_are_refused()
  local g, n, i = counting_loop()
  local sess <close> = npu.Session { graph = g }
  lu.assertErrorMsgContains("timeout_in_ms must be an integer >= 0", sess.run, sess, i,
                            { [n] = 1 }, { timeout_in_ms = -1 })
  lu.assertErrorMsgContains("timeout_in_ms must be an integer >= 0", sess.run, sess, i,
                            { [n] = 1 }, { timeout_in_ms = "soon" })
  lu.assertErrorMsgContains("unknown run option 'trace_level'", sess.run, sess, i, { [n] = 1 },
                            { trace_level = 3 })
  lu.assertErrorMsgContains("table expected", sess.run, sess, i, { [n] = 1 }, 30)
end

function TestCancel:test_the_error_codes_are_named()
  lu.assertEquals(npu.errors.CancelledError.code, "NPU_ERR_CANCELLED")
  lu.assertEquals(npu.errors.DeadlineExceededError.code, "NPU_ERR_TIMEOUT")
  local names = {}
  for _, name in ipairs(npu.core.status_names()) do names[name] = true end
  lu.assertTrue(names.NPU_ERR_CANCELLED and names.NPU_ERR_TIMEOUT)
end

-- Ctrl-C: a script runs a loop that never ends; SIGINT after 0.5 s stops it at once, with Lua's
-- usual report of the interruption.
function TestCancel:test_sigint_in_the_interpreter_stops_a_long_run()
  local dir = os.tmpname()
  os.remove(dir)
  local script = dir .. ".lua"
  local f = assert(io.open(script, "w"))
  -- (under spec/run.lua --installed the environment's paths find the installed rock)
  f:write((INSTALLED and "" or ([[
package.path = %q .. "/lua/?.lua;" .. %q .. "/lua/?/init.lua;" .. package.path
package.cpath = %q .. "/?.so;" .. package.cpath
]]):format(ROOT_DIR, ROOT_DIR, os.getenv("NPU_MODULE_ROOT") or ROOT_DIR)) .. [[
local npu = require("npu")
local g = npu.Graph()
local n = g:placeholder("int32", {}, "n")
local r = npu.while_loop(function(i) return npu.less(i, n) end,
                         function(i) return i + 1 end, { g:const(0, "int32") })
local sess = npu.Session { graph = g }
io.stderr:write("running\n")
sess:run(r[1] or r, { [n] = 2147483647 })
print("finished?!")
]])
  f:close()
  -- SIGINT once the run is under way ("running" written, then 0.3 s), not at a fixed time from
  -- the start: a slow start (make sanitize) must not turn it into a kill before lua5.4 handles it
  local out_path, pid_path = dir .. ".out", dir .. ".pid"
  os.execute(("sh -c 'lua5.4 %s > %s 2>&1 & echo $! > %s; wait $!; echo \"exit=$?\" >> %s' &"):format(
    script, out_path, pid_path, out_path))
  local function read(path)
    local h = io.open(path)
    if not h then return "" end
    local text = h:read("a")
    h:close()
    return text
  end
  local waited = 0
  while not read(out_path):find("running") and waited < 600 do
    os.execute("sleep 0.05")
    waited = waited + 1
  end
  os.execute("sleep 0.3")
  local pid = read(pid_path):match("%d+")
  local t0 = now_ms()
  if pid then os.execute("kill -INT " .. pid) end
  while not read(out_path):find("exit=") and now_ms() - t0 < 10000 do os.execute("sleep 0.02") end
  local ms = now_ms() - t0
  local out = read(out_path)
  if pid and not out:find("exit=") then os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
  os.remove(script)
  os.remove(out_path)
  os.remove(pid_path)
  lu.assertStrContains(out, "running")
  lu.assertStrContains(out, "interrupted")
  lu.assertNotStrContains(out, "finished?!")
  lu.assertNotStrContains(out, "exit=0")
  lu.assertTrue(ms < 5000, ms) -- from the signal; the loop alone would take hours
end
