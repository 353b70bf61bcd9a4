-- exception_dump_spec.lua — enable_exception_dump and NPU_COLLECT_PATH (csrc/exec/exception_dump.c):
-- a gather whose fed indices are out of range fails at run time; the run's error is exactly the
-- one it is with the option 0, and the failing operator is dumped in the layout of
-- docs/debugging.md ("Exception dump"): mode 2 in <base>/extra-info/data-dump/<device_id>/,
-- mode 1 in <base>/extra-info/, NPU_COLLECT_PATH forcing mode 1 into itself, 0 writing
-- nothing; the .npy inputs hold the fed values, as stored (float16 stays float16), the JSON
-- names the node, the status and the message.  A directory that cannot be made leaves the
-- error as it was (the log line it writes is checked by tests/test_exception_dump.c: the Lua
-- module has no log hook).  Each case runs a subprocess with its own ASCEND_WORK_PATH /
-- NPU_COLLECT_PATH in a temporary directory (make test sets ASCEND_WORK_PATH for the suite).
local lu = require("luaunit")
local npu = require("npu")

local S = dofile(SPEC_DIR .. "/support.lua")

-- Builds x[4,3] (DTYPE) gathered by fed int64 indices i[3] (node "pick"), runs it with the
-- options OPTS: once with indices in range, then out of range; prints "ERR:" and the error.
local SCRIPT = [[
local npu = require("npu")
local g = npu.Graph()
local x = g:placeholder("DTYPE", { 4, 3 }, "x")
local i = g:placeholder("int64", { 3 }, "i")
local y = npu.gather(x, i, { name = "pick" })
local sess <close> = npu.Session { graph = g, options = OPTS }
local xv = npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 }, { 10, 11, 12.5 } }, "DTYPE")
assert(#sess:run(y, { [x] = xv, [i] = npu.tensor({ 3, 0, 1 }, "int64") }):totable() == 3)
local ok, err = pcall(sess.run, sess, y, { [x] = xv, [i] = npu.tensor({ 0, 4, 1 }, "int64") })
assert(not ok)
print("ERR:" .. err.text) -- the text without its position (tostring(err) has it)
]]

local function run(dir, env, opts, dtype)
  local script = SCRIPT:gsub("OPTS", opts or "{}"):gsub("DTYPE", dtype or "float32")
  local out = S.run_lua(dir, env, script)
  local err = out:match("ERR:([^\n]*)")
  lu.assertNotNil(err, out)
  return err, out
end

local WANT = "npu.Session:run: NPU_ERR_ARG: gather 'pick': indices[1] = 4 is not in [0, 4) (params [4,3], axis 0)"

-- The files of one exception dump in dir: exactly a .json and the two inputs' .npy, sharing
-- one {op_type}.{op_name}.{task}.{timestamp} prefix; returns the parsed JSON and the prefix.
local function one_dump(dir)
  local files = S.ls(dir)
  lu.assertEquals(#files, 3, table.concat(files, " "))
  local prefix = files[1]:match("^(gather%.pick%.0%.%d+)%.")
  lu.assertNotNil(prefix, files[1])
  lu.assertEquals(files, { prefix .. ".input.0.npy", prefix .. ".input.1.npy", prefix .. ".json" })
  return S.json_decode(S.read(dir .. "/" .. prefix .. ".json")), prefix
end

local function check_json(j, prefix, mode, message)
  lu.assertEquals(j.op_type, "gather")
  lu.assertEquals(j.op_name, "pick")
  lu.assertEquals(j.node, "pick")
  lu.assertEquals(j.task, 0)
  lu.assertEquals(j.status, "NPU_ERR_ARG")
  lu.assertEquals("npu.Session:run: NPU_ERR_ARG: " .. j.message, message)
  lu.assertEquals(j.mode, mode)
  lu.assertEquals(j.iteration, 1) -- the first run (iteration 0) went through
  lu.assertEquals(tostring(j.timestamp_us), prefix:match("(%d+)$"))
  lu.assertEquals(#j.inputs, 2)
  lu.assertEquals(j.inputs[1].shape, { 4, 3 })
  lu.assertEquals(j.inputs[1].file, prefix .. ".input.0.npy")
  lu.assertEquals(j.inputs[2], { index = 1, dtype = "int64", shape = { 3 }, format = "ND",
    file = prefix .. ".input.1.npy" })
  lu.assertEquals(j.outputs, { { index = 0, dtype = j.inputs[1].dtype, shape = { 3, 3 }, format = "ND" } })
end

TestExceptionDump = {}

function TestExceptionDump:setUp() self.tmp = S.tmpdir() end
function TestExceptionDump:tearDown() S.rm_rf(self.tmp) end

-- The default (2): the same error as with 0, the files in $ASCEND_WORK_PATH/extra-info/data-dump/0.
function TestExceptionDump:test_mode_2_default_into_ascend_work_path()
  local work = self.tmp .. "/work"
  local env = "-u NPU_COLLECT_PATH ASCEND_WORK_PATH=" .. S.sh_quote(work)
  local off = run(self.tmp, env, "{ enable_exception_dump = 0 }")
  lu.assertEquals(off, WANT)
  lu.assertEquals(S.ls(self.tmp), {}) -- 0: nothing, not even the directory
  local err = run(self.tmp, env)
  lu.assertEquals(err, off)
  lu.assertEquals(S.ls(work), { "extra-info" })
  lu.assertEquals(S.ls(work .. "/extra-info"), { "data-dump" })
  lu.assertEquals(S.ls(work .. "/extra-info/data-dump"), { "0" })
  local dir = work .. "/extra-info/data-dump/0"
  local j, prefix = one_dump(dir)
  check_json(j, prefix, 2, err)
  lu.assertEquals(j.device_id, 0)
  lu.assertEquals(j.inputs[1].dtype, "float32")
  -- the inputs as fed
  local xin = npu.load(dir .. "/" .. prefix .. ".input.0.npy")
  lu.assertEquals(xin:dtype(), "float32")
  lu.assertEquals(xin:totable(), { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 }, { 10, 11, 12.5 } })
  local iin = npu.load(dir .. "/" .. prefix .. ".input.1.npy")
  lu.assertEquals(iin:dtype(), "int64")
  lu.assertEquals(iin:totable(), { 0, 4, 1 })
  lu.assertEquals(S.ls(self.tmp), { "work" }) -- nothing in the working directory
end

-- Mode 1: $ASCEND_WORK_PATH/extra-info itself; float16 inputs stay float16.
function TestExceptionDump:test_mode_1_into_extra_info()
  local work = self.tmp .. "/work"
  local err = run(self.tmp, "-u NPU_COLLECT_PATH ASCEND_WORK_PATH=" .. S.sh_quote(work),
    "{ enable_exception_dump = 1 }", "float16")
  lu.assertEquals(err, WANT)
  local j, prefix = one_dump(work .. "/extra-info")
  check_json(j, prefix, 1, err)
  lu.assertEquals(j.inputs[1].dtype, "float16")
  local xin = npu.load(work .. "/extra-info/" .. prefix .. ".input.0.npy")
  lu.assertEquals(xin:dtype(), "float16")
  lu.assertEquals(xin:totable(), { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 }, { 10, 11, 12.5 } })
end

-- NPU_COLLECT_PATH makes the default mode 1, into $NPU_COLLECT_PATH/extra-info (ASCEND_WORK_PATH
-- untouched); 0 still writes nothing.
function TestExceptionDump:test_npu_collect_path_forces_mode_1()
  local work, collect = self.tmp .. "/work", self.tmp .. "/collect/"
  local env = "ASCEND_WORK_PATH=" .. S.sh_quote(work) .. " NPU_COLLECT_PATH=" .. S.sh_quote(collect)
  local off = run(self.tmp, env, "{ enable_exception_dump = 0 }")
  lu.assertEquals(S.ls(self.tmp), {})
  local err = run(self.tmp, env)
  lu.assertEquals(err, off)
  lu.assertEquals(S.ls(self.tmp), { "collect" })
  lu.assertEquals(S.ls(collect), { "extra-info" })
  local j, prefix = one_dump(self.tmp .. "/collect/extra-info")
  check_json(j, prefix, 1, err)
end

-- Neither variable: ./npu_out/extra-info/data-dump/<session_device_id>, the default output
-- directory, not the working directory itself.
function TestExceptionDump:test_default_output_directory_and_device_id()
  local err = run(self.tmp, "-u NPU_COLLECT_PATH -u ASCEND_WORK_PATH", "{ session_device_id = 1 }")
  lu.assertEquals(err, WANT)
  lu.assertFalse(S.exists(self.tmp .. "/extra-info"))
  lu.assertEquals(S.ls(self.tmp .. "/npu_out/extra-info/data-dump"), { "1" })
  local j, prefix = one_dump(self.tmp .. "/npu_out/extra-info/data-dump/1")
  check_json(j, prefix, 2, err)
  lu.assertEquals(j.device_id, 1)
end

-- A directory that cannot be made: the run's error as it was, nothing written.
function TestExceptionDump:test_unwritable_directory_keeps_the_error()
  S.write(self.tmp .. "/a_file", "x")
  local err = run(self.tmp, "-u NPU_COLLECT_PATH ASCEND_WORK_PATH=" .. S.sh_quote(self.tmp .. "/a_file/work"))
  lu.assertEquals(err, WANT)
  err = run(self.tmp, "ASCEND_WORK_PATH=" .. S.sh_quote(self.tmp .. "/w") ..
    " NPU_COLLECT_PATH=" .. S.sh_quote(self.tmp .. "/a_file"))
  lu.assertEquals(err, WANT)
  lu.assertEquals(S.ls(self.tmp), { "a_file" })
end

-- A run that does not fail writes nothing, whatever the mode.
function TestExceptionDump:test_nothing_without_a_failure()
  local out = S.run_lua(self.tmp, "ASCEND_WORK_PATH=" .. S.sh_quote(self.tmp .. "/w") ..
    " NPU_COLLECT_PATH=" .. S.sh_quote(self.tmp .. "/c"), [[
local npu = require("npu")
local g = npu.Graph()
local x = g:placeholder("float32", { 4, 3 }, "x")
local i = g:placeholder("int64", { 3 }, "i")
local y = npu.gather(x, i, { name = "pick" })
local sess <close> = npu.Session { graph = g, options = { enable_exception_dump = 1 } }
print("GOT:" .. #sess:run(y, { [x] = npu.zeros({ 4, 3 }), [i] = npu.tensor({ 3, 0, 1 }, "int64") }):totable())
]])
  lu.assertStrContains(tostring(out), "GOT:3")
  lu.assertEquals(S.ls(self.tmp), {})
end
