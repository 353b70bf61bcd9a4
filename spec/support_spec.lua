-- support_spec.lua — the helpers in spec/support.lua that other specs lean on (a temporary
-- directory goes when the test that made it fails halfway, max_diff, the counting loop), and
-- spec/run.lua saying why a test skipped.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

TestSupport = {}

function TestSupport:test_tmpdir_is_removed_when_a_test_fails_halfway()
  local made
  local ok, err = pcall(function()
    local dir, _ <close> = S.tmpdir()
    made = dir
    S.write(dir .. "/f", "x")
    lu.assertTrue(S.exists(dir .. "/f"))
    error("an assertion failed here")
  end)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "an assertion failed here")
  lu.assertNotNil(made)
  lu.assertFalse(S.exists(made), "left behind: " .. tostring(made))
end

function TestSupport:test_max_diff()
  local d, peak = S.max_diff(npu.tensor({ { 1, 2 }, { 3, 4 } }), npu.tensor({ 1, 2.5, 3, -5 }))
  lu.assertEquals(d, 9)
  lu.assertEquals(peak, 5)
  lu.assertStrContains(tostring(S.fails(S.max_diff, npu.tensor({ 1, 2 }), npu.tensor({ 1 }))), "element counts")
end

-- A NaN where a number was wanted is a difference (Lua's math.max and a `>` test both drop a
-- NaN); equal infinities are none.
function TestSupport:test_max_diff_and_assert_close_see_a_nan()
  local nan, inf = 0 / 0, math.huge
  local d = S.max_diff(npu.tensor({ 1, nan, 3 }), npu.tensor({ 1, 2, 3 }))
  lu.assertFalse(d <= 1, "max_diff dropped a NaN: " .. tostring(d))
  d = S.max_diff(npu.tensor({ 1, 2 }), npu.tensor({ nan, 2 }))
  lu.assertFalse(d <= 1, "max_diff dropped a NaN in b: " .. tostring(d))
  lu.assertEquals(S.max_diff(npu.tensor({ inf, -inf }), npu.tensor({ inf, -inf })), 0)
  lu.assertStrContains(tostring(S.fails(S.assert_close, { 1, nan }, { 1, 2 }, 1e-6, "x")), "x [2]")
  lu.assertStrContains(tostring(S.fails(S.assert_close, { 1, 2 }, { 1, nan }, 1e-6, "y")), "y [2]")
  S.assert_close({ inf, 1 }, { inf, 1 }, 1e-6, "equal infinities")
  lu.assertStrContains(tostring(S.fails(S.assert_close, { 1.1 }, { 1 }, 1e-6, "z")), "z [1]")
end

function TestSupport:test_counting_loop_adds_9000_in_1000_iterations()
  local g = npu.Graph()
  local step, total = S.counting_loop(g, "batch_sum")
  lu.assertNotNil(g:get_operation_by_name("batch_sum"))
  local sess <close> = npu.Session { graph = g, options = { iterations_per_loop = 1000 } }
  sess:run(g:global_variables_initializer())
  sess:run(npu.util.set_iteration_per_loop(sess, step, 1000))
  lu.assertEquals(sess:run(total):item(), 9000)
end

-- spec/run.lua names each skipped test and says why (LuaUnit's text output only counts them).
function TestSupport:test_the_runner_says_why_a_test_skipped()
  local p = io.popen(("env NPU_TF_SAVED_MODEL=/nonexistent lua5.4 %s %s-p %s 2>&1"):format(
    S.sh_quote(ROOT_DIR .. "/spec/run.lua"), INSTALLED and "--installed " or "",
    S.sh_quote("^TestSavedModel%.test_written_by_tensorflow$")))
  local out = p:read("a")
  lu.assertTrue(p:close(), out)
  lu.assertStrContains(out, "1 skipped")
  lu.assertStrContains(out, "skipped TestSavedModel.test_written_by_tensorflow: no SavedModel written by "
    .. "TensorFlow here (/nonexistent)")
end
