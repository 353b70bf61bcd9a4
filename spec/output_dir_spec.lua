-- output_dir_spec.lua — files a session writes without a path of its own go into the output
-- directory: $ASCEND_WORK_PATH, else ./npu_out (csrc/options: npuO_output_dir), never loose in
-- the working directory.  One session with every such writer on (export_compile_stat,
-- profiling_mode, external_weight, enable_exception_dump, aoe_mode, DUMP_GE_GRAPH) runs in an
-- empty directory without ASCEND_WORK_PATH; then the same with ASCEND_WORK_PATH; then with
-- npu_out taken by a file.
local lu = require("luaunit")
local S = dofile(SPEC_DIR .. "/support.lua")

-- relu(x @ w + b) (fused by MatMulBiasAddFusionPass: fusion_result.json has something to say),
-- w 32x32 float32 = 4 KiB (external_weight files it), then gather(y, i) with i fed out of
-- range on the second run (enable_exception_dump dumps it).  Prints what npu_out holds while
-- the session is open (the weight files go when it closes), then "ERR:" and the error.
local SCRIPT = [[
local npu = require("npu")
local g = npu.Graph()
local x = g:placeholder("float32", { 2, 32 }, "x")
local i = g:placeholder("int64", { 2 }, "i")
local w = g:const(npu.random.normal({ 32, 32 }, { seed = 1 }), nil, "w")
local b = g:const(npu.random.normal({ 32 }, { seed = 2 }), nil, "b")
local y = npu.nn.relu(npu.nn.bias_add(x:matmul(w), b))
local picked = npu.gather(y, i, { name = "pick" })
local opts = { export_compile_stat = 2, profiling_mode = true, external_weight = true,
  enable_exception_dump = 1, aoe_mode = "2", op_compiler_cache_mode = "disable" }
local sess = npu.Session { graph = g, options = opts }
local xv = npu.random.uniform({ 2, 32 }, { seed = 3 })
assert(#sess:run(picked, { [x] = xv, [i] = npu.tensor({ 1, 0 }, "int64") }):totable() == 2)
local ok, err = pcall(sess.run, sess, picked, { [x] = xv, [i] = npu.tensor({ 0, 9 }, "int64") })
local base = os.getenv("ASCEND_WORK_PATH") or "npu_out"
local p = io.popen("ls -A '" .. base .. "'")
print("OPEN:" .. p:read("a"):gsub("\n", " "))
p:close()
sess:close()
print("ERR:" .. (ok and "none" or err.text))
]]

local function run(dir, env, script)
  return S.run_lua(dir, "-u NPU_COLLECT_PATH -u DUMP_GRAPH_PATH " .. env .. " DUMP_GE_GRAPH=3 DUMP_GRAPH_LEVEL=3",
    script or SCRIPT)
end

local function find(list, pattern)
  for _, name in ipairs(list) do
    if name:match(pattern) then return name end
  end
end

-- What a session with every writer on leaves in out (its own directory, nothing else in it).
local function check_outputs(out, printed)
  lu.assertStrContains(printed, "ERR:npu.Session:run: NPU_ERR_ARG: gather 'pick'")
  lu.assertStrContains(printed:match("OPEN:([^\n]*)") or "", "tmp_weight_", false, printed)
  local files = S.ls(out)
  lu.assertNil(find(files, "^tmp_weight_"), "weight files removed at close: " .. table.concat(files, " "))
  -- fusion_result.json under FE/<pid>/, with the fused pass
  lu.assertEquals(S.ls(out .. "/FE") and #S.ls(out .. "/FE"), 1)
  local fe = out .. "/FE/" .. S.ls(out .. "/FE")[1]
  lu.assertEquals(S.ls(fe), { "fusion_result.json" })
  lu.assertStrContains(S.read(fe .. "/fusion_result.json"), "MatMulBiasAddFusionPass")
  -- the profile
  local prof = find(files, "^PROF_")
  lu.assertNotNil(prof, table.concat(files, " "))
  lu.assertTrue(S.exists(out .. "/" .. prof .. "/op_summary.csv"))
  -- the exception dump: the gather's two inputs and its description
  local xdump = S.ls(out .. "/extra-info")
  lu.assertEquals(#xdump, 3, table.concat(xdump, " "))
  lu.assertNotNil(find(xdump, "^gather%.pick%.%d+%.%d+%.json$"), table.concat(xdump, " "))
  -- DUMP_GE_GRAPH's final plan, and aoe_mode's records
  lu.assertNotNil(find(files, "^ge_proto_00000000_05_MemoryPlanning%.json$"), table.concat(files, " "))
  lu.assertNotNil(find(files, "^npu_aoe_tuning%.jsonl$"), table.concat(files, " "))
end

TestOutputDir = {}

function TestOutputDir:setUp() self.tmp = S.tmpdir() end
function TestOutputDir:tearDown() S.rm_rf(self.tmp) end

function TestOutputDir:test_npu_out_without_ascend_work_path()
  local printed = run(self.tmp, "-u ASCEND_WORK_PATH")
  lu.assertEquals(S.ls(self.tmp), { "npu_out" }, printed) -- nothing loose in the working directory
  check_outputs(self.tmp .. "/npu_out", printed)
end

function TestOutputDir:test_ascend_work_path_made_when_missing()
  local work = self.tmp .. "/work/deeper"
  local cwd = self.tmp .. "/cwd"
  assert(os.execute("mkdir " .. S.sh_quote(cwd)))
  local printed = run(cwd, "ASCEND_WORK_PATH=" .. S.sh_quote(work))
  lu.assertEquals(S.ls(cwd), {}, printed) -- no npu_out either
  check_outputs(work, printed)
end

-- A session that writes nothing makes nothing: no empty npu_out.
function TestOutputDir:test_nothing_written_nothing_made()
  local printed = S.run_lua(self.tmp, "-u ASCEND_WORK_PATH", [[
local npu = require("npu")
local g = npu.Graph()
local x = g:placeholder("float32", { 2 }, "x")
local sess <close> = npu.Session { graph = g }
print(sess:run(x * 2, { [x] = npu.tensor({ 1, 2 }) }):totable()[2])
]])
  lu.assertStrContains(printed, "4")
  lu.assertEquals(S.ls(self.tmp), {}, printed)
end

-- npu_out taken by a file: the writer fails with NPU_ERR_IO naming it and where it came from.
function TestOutputDir:test_npu_out_not_a_directory_is_an_io_error_naming_it()
  S.write(self.tmp .. "/npu_out", "not a directory")
  local printed = S.run_lua(self.tmp, "-u ASCEND_WORK_PATH", [[
local npu = require("npu")
local g = npu.Graph()
local x = g:placeholder("float32", { 2 }, "x")
local ok, err = pcall(function()
  local sess <close> = npu.Session { graph = g, options = { profiling_mode = true } }
  sess:run(x * 2, { [x] = npu.tensor({ 1, 2 }) })
end)
print("ERR:" .. (ok and "none" or tostring(err)))
]])
  lu.assertStrContains(printed, "NPU_ERR_IO")
  lu.assertStrContains(printed, "'npu_out' exists and is not a directory")
  lu.assertStrContains(printed, "ASCEND_WORK_PATH is unset")
  lu.assertEquals(S.read(self.tmp .. "/npu_out"), "not a directory")
end
