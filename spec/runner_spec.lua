-- runner_spec.lua — tools/npu-run, run as a user runs it (io.popen): outputs' statistics
-- against the reference, --save, --benchmark percentiles, options as name=value, errors and
-- exit codes.
local lu = require("luaunit")
local npu = require("npu")

local ROOT = ROOT_DIR or "."
local MODELS_DIR = os.getenv("NPU_MODELS_DIR") or ROOT .. "/../shared/models"
local RUNNER = ROOT .. "/tools/npu-run"
local LUA = "lua5.4 "
if INSTALLED then -- the rock's, as installed: luarocks' wrapper script names the interpreter
  local p = io.popen("command -v npu-run") -- (spec/run.lua --installed put the rock's bin first)
  RUNNER = p:read("l") or RUNNER
  p:close()
  LUA = ""
end

local ENV = ""

-- Runs the runner; returns stdout+stderr and the exit code.
local function run(args)
  local p = io.popen(("%s%s%q %s 2>&1"):format(ENV, LUA, RUNNER, args))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

local function need_models()
  local f = io.open(MODELS_DIR .. "/liveness/liveness.json")
  if not f then lu.skip("models directory " .. MODELS_DIR .. " is absent (set NPU_MODELS_DIR)") end
  f:close()
end

local function flat(t) return t:reshape({ t:numel() }):totable() end

TestRunner = {}

function TestRunner:test_prints_outputs_statistics_of_the_reference()
  need_models()
  local dir = MODELS_DIR .. "/liveness"
  local out, code = run(("%q --input conv2d_1_input=%q precision_mode=must_keep_origin_dtype"):format(
    dir .. "/liveness.json", dir .. "/input_0.npy"))
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(tostring(out), "input  conv2d_1_input:0 float32 [-1,32,32,3] <- " .. dir .. "/input_0.npy")
  local mn, mx, mean = out:match("output Identity:0 float32 %[1,2%] min (%S+) max (%S+) mean (%S+)")
  lu.assertNotNil(mn, out)
  local ref = flat(npu.load(dir .. "/output_0.npy"))
  lu.assertAlmostEquals(tonumber(mn), math.min(ref[1], ref[2]), 1e-5)
  lu.assertAlmostEquals(tonumber(mx), math.max(ref[1], ref[2]), 1e-5)
  lu.assertAlmostEquals(tonumber(mean), (ref[1] + ref[2]) / 2, 1e-5)
end

function TestRunner:test_save_writes_npy_files()
  need_models()
  local dir = MODELS_DIR .. "/blazeface"
  local tmp = os.tmpname()
  os.remove(tmp)
  os.execute("mkdir -p '" .. tmp .. "'")
  local out, code = run(("%q --input input:0=%q --output Identity_1:0 --save %q precision_mode=must_keep_origin_dtype")
    :format(dir .. "/blazeface.json", dir .. "/input_0.npy", tmp))
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(tostring(out), "saved  " .. tmp .. "/Identity_1_0.npy")
  lu.assertNotStrContains(out, "Identity_3:0") -- only the output asked for
  local y, r = flat(npu.load(tmp .. "/Identity_1_0.npy")), flat(npu.load(dir .. "/output_2.npy"))
  lu.assertEquals(#y, #r)
  for i = 1, #r do lu.assertTrue(math.abs(y[i] - r[i]) <= 1e-4 * 40, i) end
  os.execute("rm -rf '" .. tmp .. "'")
end

function TestRunner:test_benchmark_prints_percentiles()
  need_models()
  local out, code = run(("%q --benchmark 5 --threads 1 graph_run_mode=0"):format(MODELS_DIR .. "/emotion/emotion.json"))
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(tostring(out), "random uniform [0, 1), seed 1")
  lu.assertStrMatches(out, ".*first run %(compile %+ run%) [%d.]+ ms.*")
  lu.assertStrMatches(out, ".*benchmark 5 runs, 1 thread%(s%): p50 [%d.]+ ms  p90 [%d.]+ ms  p99 [%d.]+ ms.*")
end

function TestRunner:test_errors_and_exit_codes()
  local out, code = run("")
  lu.assertEquals(code, 2)
  lu.assertStrContains(tostring(out), "no model given")
  lu.assertStrContains(tostring(out), "usage: npu-run")
  out, code = run("/no/such/model.pb")
  lu.assertEquals(code, 1)
  lu.assertStrContains(tostring(out), "NPU_ERR_IO")
  lu.assertStrContains(tostring(out), "/no/such/model.pb")
  out, code = run("m.pb precison_mode=force_fp16")
  lu.assertEquals(code, 2)
  lu.assertStrContains(tostring(out), "did you mean 'precision_mode'")
  out, code = run("m.pb graph_run_mode=zero")
  lu.assertEquals(code, 2)
  lu.assertStrContains(tostring(out), "graph_run_mode takes an integer")
  out, code = run("m.pb --frobnicate")
  lu.assertEquals(code, 2)
  lu.assertStrContains(tostring(out), "unknown flag '--frobnicate'")
  out, code = run("--help")
  lu.assertEquals(code, 0)
  lu.assertStrContains(tostring(out), "--benchmark N")
end

function TestRunner:test_bad_option_value_and_input_name()
  need_models()
  local json = MODELS_DIR .. "/emotion/emotion.json"
  local out, code = run(("%q precision_mode=fp8"):format(json))
  lu.assertEquals(code, 1)
  lu.assertStrContains(tostring(out), "precision_mode")
  out, code = run(("%q --input nope=x.npy"):format(json))
  lu.assertEquals(code, 1)
  lu.assertStrContains(tostring(out), "--input nope: the model has no such input (inputs: input_1:0)")
end

-- The inference sample (examples/infer_from_pb.lua) runs, so its text cannot rot.
function TestRunner:test_infer_from_pb_example()
  need_models()
  local p = io.popen(("%slua5.4 %q --batches=3 --batchsize=2 --precision_mode=must_keep_origin_dtype 2>&1")
    :format(ENV, ROOT .. "/examples/infer_from_pb.lua"))
  local out = p:read("a")
  local _, _, code = p:close()
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(tostring(out), "mobileface.pb: input data:0 -1x112x112x3, output batchnorm0/add_1:0")
  lu.assertStrMatches(out, ".*first run %(compiles the graph%): [%d.]+ ms.*")
  lu.assertStrMatches(out, ".*steady state over 2 batches of 2: median [%d.]+ ms.*")
  lu.assertStrContains(tostring(out), "output batchnorm0/add_1:0 of the last batch: 2x256")
end

function TestRunner:test_runs_a_saved_model_directory()
  local S = dofile(SPEC_DIR .. "/support.lua")
  local tmp = S.tmpdir()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 2 }, "x")
  local y = npu.multiply(x, g:const(npu.tensor({ 2, 4 }, "float32"), "w"), { name = "y" })
  npu.export_saved_model(g, tmp .. "/1", { inputs = { x = x }, outputs = { y = y }, variables = { "w" } })
  npu.tensor({ { 1, 1 }, { 3, 1 } }, "float32"):save(tmp .. "/x.npy")
  local out, code = run(("%q --input x=%q"):format(tmp .. "/1", tmp .. "/x.npy"))
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(tostring(out), "input  x:0 float32 [-1,2] <- " .. tmp .. "/x.npy")
  lu.assertStrContains(tostring(out), "output y:0 float32 [2,2] min 2 max 6 mean 4")
  S.rm_rf(tmp)
end
