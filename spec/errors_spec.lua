-- errors_spec.lua — errors are values: code, number, message, node, op; classes tested with
-- npu.errors.is; the position is the caller's line, never a line of npu's own files; the text
-- (tostring) is the full message as before.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

TestErrors = {}

local THIS = debug.getinfo(1, "S").short_src

-- The error of f(...) and the line that called it (the line of the pcall's caller + offset).
local function catch(f, ...)
  local ok, err = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  return err
end

function TestErrors:test_an_error_from_c_is_a_value_with_its_fields()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 2, 3 }, "a")
  local line = debug.getinfo(1, "l").currentline + 1
  local ok, err = pcall(function() return npu.matmul(a, a, { name = "mm" }) end)
  lu.assertFalse(ok)
  lu.assertTrue(npu.errors.is_error(err))
  lu.assertEquals(err.code, "NPU_ERR_SHAPE")
  lu.assertEquals(err.number, 4)
  lu.assertEquals(err.op, "matmul")
  lu.assertEquals(err.node, "mm")
  lu.assertEquals(err.where, "matmul")
  lu.assertStrContains(err.message, "[2,3]")
  lu.assertEquals(err.text, "matmul: NPU_ERR_SHAPE: " .. err.message)
  -- the position is this file's line, not lua/npu/init.lua's
  lu.assertEquals(err.position, THIS .. ":" .. line)
  lu.assertEquals(tostring(err), err.position .. ": " .. err.text)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_SHAPE")
end

function TestErrors:test_an_error_reads_like_its_text()
  local g = npu.Graph()
  local err = catch(g.get_tensor_by_name, g, "nope:0")
  lu.assertEquals(err:match("NPU_ERR_[%u_]+"), "NPU_ERR_NOT_FOUND")
  lu.assertNotNil(err:find("no node named 'nope'", 1, true))
  lu.assertEquals("<" .. err, "<" .. tostring(err))
  lu.assertEquals(err .. ">", tostring(err) .. ">")
  lu.assertIs(err.class, npu.errors.NotFoundError)
end

function TestErrors:test_classes_and_is()
  local E = npu.errors
  local err = catch(function() return npu.Graph():placeholder("float32", { 2 }) + npu.tensor({ 1, 2, 3 }) end)
  lu.assertTrue(E.is(err, E.ShapeError))
  lu.assertTrue(E.is(err, E.InvalidArgumentError)) -- the parent of the argument-like codes
  lu.assertTrue(E.is(err, E.Error))
  lu.assertTrue(E.is(err, "NPU_ERR_SHAPE"))
  lu.assertFalse(E.is(err, E.OutOfRangeError))
  lu.assertFalse(E.is("a string", E.Error))
  lu.assertFalse(E.is(nil, E.Error))
  lu.assertEquals(tostring(E.OutOfRangeError), "npu.errors.OutOfRangeError")
  -- every status code has its class
  for _, code in ipairs(npu.core.status_names()) do
    if code ~= "NPU_OK" then
      local found
      for _, c in pairs(E) do
        if type(c) == "table" and c.code == code then found = c end
      end
      lu.assertNotNil(found, code)
      lu.assertTrue(found.parent ~= nil, code)
    end
  end
end

function TestErrors:test_end_of_data_is_an_out_of_range_error()
  local it = npu.data.Dataset.from_tensor_slices(npu.range(0, 1, 1, "int64")):iterator()
  it:get_next()
  local err = catch(it.get_next, it)
  lu.assertTrue(npu.errors.is(err, npu.errors.OutOfRangeError))
  lu.assertEquals(err.code, "NPU_ERR_OUT_OF_RANGE")
end

function TestErrors:test_errors_raised_by_the_facade_point_at_the_caller()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 2 }, "x")
  local line = debug.getinfo(1, "l").currentline + 1
  local ok, err = pcall(g.variable, g, x, "v")
  lu.assertFalse(ok)
  lu.assertEquals(err.position, THIS .. ":" .. line)
  lu.assertEquals(err.code, "NPU_ERR_ARG")
  lu.assertStrContains(tostring(err), "the initial value's shape must be fully known")
  lu.assertNil(tostring(err):find("lua/npu/", 1, true))
  -- a hand-coded facade error carries its code
  local e2 = catch(npu.util.set_iteration_per_loop, npu.Session { graph = g }, g:global_variables_initializer(), 3)
  lu.assertEquals(e2.code, "NPU_ERR_CONFLICT")
  lu.assertEquals(e2.where, "npu.util.set_iteration_per_loop")
end

function TestErrors:test_argument_errors_of_the_binding_are_values()
  local err = catch(npu.tensor, { { 1, 2 }, { 3 } })
  lu.assertEquals(err.code, "NPU_ERR_SHAPE")
  lu.assertStrContains(tostring(err), "ragged")
  err = catch(npu.zeros, { 2 }, "float33")
  lu.assertEquals(err.code, "NPU_ERR_DTYPE")
end

function TestErrors:test_errors_of_the_script_pass_through_unchanged()
  local g = npu.Graph()
  local x = g:placeholder("bool", {}, "p")
  local ok, err = pcall(npu.cond, x, function() error({ mine = true }) end, function() return 1 end)
  lu.assertFalse(ok)
  lu.assertTrue(type(err) == "table" and err.mine)
  ok, err = pcall(npu.cond, x, function() error("boom", 0) end, function() return 1 end)
  lu.assertEquals(err, "boom")
end

function TestErrors:test_raise_from_scripts()
  local err = catch(npu.errors.raise, "mine", npu.errors.NotFoundError, "no such thing")
  lu.assertEquals(err.code, "NPU_ERR_NOT_FOUND")
  lu.assertEquals(err.text, "mine: NPU_ERR_NOT_FOUND: no such thing")
  lu.assertErrorMsgContains("an error code", npu.errors.raise, "mine", "NPU_OK", "x")
end

function TestErrors:test_the_interpreter_prints_the_text_with_the_position()
  local out = S.run_lua(".", "", [[
local npu = require("npu")
local g = npu.Graph()
local a = g:placeholder("float32", { 2, 3 }, "a")
local b = a:matmul(a)
]])
  lu.assertStrContains(out, "(command line):4: matmul: NPU_ERR_SHAPE: matmul 'MatMul'")
end
