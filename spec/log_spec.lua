-- log_spec.lua — the core's warnings reach Lua: npu.set_log(fn [, level]); by default through
-- Lua 5.4's warn (lua5.4 -W shows them); ASCEND_SLOG_PRINT_TO_STDOUT=1 prints them on stdout;
-- ASCEND_GLOBAL_LOG_LEVEL sets the least level passed on.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

TestLog = {}

function TestLog:tearDown() npu.set_log(nil) end

-- Options whose check logs a precedence warning (op_precision_mode wins over
-- op_select_implmode + optypelist_for_implmode).
local function precedence_options()
  local o = npu.core.options_new()
  o:set_string("op_precision_mode", "/home/test/op_precision.ini")
  o:set_string("op_select_implmode", "high_precision")
  o:set_string("optypelist_for_implmode", "Pooling")
  return o
end

function TestLog:test_a_precedence_warning_reaches_set_log()
  local got = {}
  npu.set_log(function(level, message, n) got[#got + 1] = { level, message, n } end)
  precedence_options():check()
  lu.assertEquals(#got, 2) -- one per option ignored
  lu.assertEquals(got[1][1], "warning")
  lu.assertEquals(got[1][3], 2)
  lu.assertStrContains(got[1][2], "op_precision_mode")
  lu.assertStrContains(got[1][2], "takes precedence")
end

function TestLog:test_levels_filter()
  local got = {}
  npu.set_log(function(level, message) got[#got + 1] = level .. ":" .. message end, "error")
  npu.core._log(2, "w")
  npu.core._log(3, "e")
  npu.core.flush_log()
  lu.assertEquals(got, { "error:e" })
  got = {}
  npu.set_log(function(level, message) got[#got + 1] = level .. ":" .. message end, "debug")
  npu.core._log(0, "d")
  npu.core._log(1, "i")
  npu.core.flush_log()
  lu.assertEquals(got, { "debug:d", "info:i" })
  lu.assertErrorMsgContains("unknown level 'warnign' (did you mean 'warning'?)", npu.set_log, print, "warnign")
  lu.assertErrorMsgContains("expected a function", npu.set_log, "print")
end

function TestLog:test_messages_queued_before_an_error_come_first()
  local got = {}
  npu.set_log(function(_, message) got[#got + 1] = message end)
  npu.core._log(2, "before")
  local ok = pcall(npu.Graph().get_tensor_by_name, npu.Graph(), "nope:0")
  lu.assertFalse(ok)
  lu.assertEquals(got, { "before" })
end

function TestLog:test_a_failing_handler_does_not_break_npu()
  npu.set_log(function() error("handler broke") end)
  npu.core._log(2, "x")
  npu.core.flush_log()
  precedence_options():check() -- still works
end

function TestLog:test_overflowing_queue_says_how_many_were_dropped()
  local got = {}
  npu.set_log(function(_, message) got[#got + 1] = message end)
  for i = 1, 40 do npu.core._log(2, "m" .. i) end
  npu.core.flush_log()
  lu.assertEquals(#got, 33)
  lu.assertEquals(got[32], "m32")
  lu.assertEquals(got[33], "8 log messages were dropped (more than 32 queued)")
end

local SCRIPT = [[
local npu = require("npu")
local o = npu.core.options_new()
o:set_string("op_precision_mode", "/home/test/op_precision.ini")
o:set_string("op_select_implmode", "high_precision")
o:set_string("optypelist_for_implmode", "Pooling")
o:check()
print("done")
]]

function TestLog:test_default_is_warn()
  local out = S.run_lua(".", "", "warn('@on') " .. SCRIPT)
  lu.assertStrContains(out, "Lua warning: npu warning: 'op_precision_mode'='/home/test/op_precision.ini' takes precedence")
  out = S.run_lua(".", "", SCRIPT) -- warnings off, as lua5.4 starts without -W
  lu.assertEquals(out, "done\n")
end

function TestLog:test_ascend_slog_print_to_stdout()
  local out = S.run_lua(".", "ASCEND_SLOG_PRINT_TO_STDOUT=1", SCRIPT)
  lu.assertStrContains(out, "[WARNING] npu: 'op_precision_mode'='/home/test/op_precision.ini' takes precedence")
  lu.assertStrContains(out, "done")
  out = S.run_lua(".", "ASCEND_SLOG_PRINT_TO_STDOUT=1 ASCEND_GLOBAL_LOG_LEVEL=3", SCRIPT)
  lu.assertEquals(out, "done\n")
end
