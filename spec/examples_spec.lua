-- examples_spec.lua — every example runs as the README says, so the docs cannot rot.
local lu = require("luaunit")

local function run(cmd)
  local p = io.popen("cd '" .. ROOT_DIR .. "' && " .. cmd .. " 2>&1; echo \"exit=$?\"")
  local out = p:read("a")
  p:close()
  return out, tonumber(out:match("exit=(%d+)%s*$"))
end

TestExamples = {}

function TestExamples:test_quickstart()
  local out, rc = run("lua5.4 examples/quickstart.lua")
  lu.assertEquals(rc, 0, out)
  lu.assertStrContains(tostring(out), "output shape: {4, 10}")
  lu.assertEquals(select(2, out:gsub("image %d: top class %d", "")), 4)
end

function TestExamples:test_control_flow()
  local out, rc = run("lua5.4 examples/control_flow.lua")
  lu.assertEquals(rc, 0, out)
  lu.assertStrContains(tostring(out), "[[2, 3, 4], ")
  lu.assertStrContains(tostring(out), "[1.414214, 1000, 0.5]]")
  local k = tonumber(out:match("Newton iterations until converged: (%d+)"))
  lu.assertTrue(k and k > 5 and k < 100, out)
  -- rows of a: [4, 9, 16] / sqrt(353); the zero row stays zero
  lu.assertStrContains(tostring(out), "[[0.2128985, 0.4790217, 0.8515941]")
  lu.assertStrContains(tostring(out), "[0, 0, 0]")
end

function TestExamples:test_weight_update()
  local out, rc = run("lua5.4 examples/weight_update.lua")
  lu.assertEquals(rc, 0, out)
  lu.assertStrContains(tostring(out), "after update:")
  lu.assertStrContains(tostring(out), "plans compiled: 3")
end

function TestExamples:test_train_digits_shortened()
  -- 5 loops of 100 device steps; the full example (15 loops) reaches about 96.7 %
  local out, rc = run("lua5.4 examples/train_digits.lua 5")
  lu.assertEquals(rc, 0, out)
  lu.assertStrContains(tostring(out), "loop  5/5 step   500")
  local acc = tonumber(out:match("test accuracy: ([%d.]+) %%"))
  lu.assertNotNil(acc, out)
  lu.assertTrue(acc >= 93, "accuracy " .. tostring(acc))
end

function TestExamples:test_train_digits_distributed()
  -- 2 ranks x batch 32 under mpirun (docs/distributed.md); 5 loops of 100 steps
  if not os.execute("command -v mpirun >/dev/null 2>&1") then lu.skip("mpirun is not installed (openmpi-bin)") end
  if not require("npu").hccl.available() then lu.skip("lua-npu was built without MPI (libopenmpi-dev)") end
  -- under make sanitize, Open MPI's allocations at exit read as leaks: leak detection off there
  local preload = os.getenv("LD_PRELOAD")
  local no_leaks = preload and preload:find("asan") and "env ASAN_OPTIONS=detect_leaks=0 " or ""
  local out, rc = run(no_leaks .. "mpirun --oversubscribe --allow-run-as-root -np 2 " ..
    (no_leaks ~= "" and "-x ASAN_OPTIONS " or "") .. "lua5.4 examples/train_digits_distributed.lua 5")
  lu.assertEquals(rc, 0, out)
  lu.assertStrContains(out, "2 ranks, batch 32 per rank")
  lu.assertStrContains(out, "loop  5/5 step   500")
  local acc = tonumber(out:match("test accuracy: ([%d.]+) %%"))
  lu.assertNotNil(acc, out)
  lu.assertTrue(acc >= 93, "accuracy " .. tostring(acc))
  lu.assertEquals(select(2, out:gsub("test accuracy", "")), 1) -- rank 0 alone prints
end

function TestExamples:test_infer_from_pb()
  local models = os.getenv("NPU_MODELS_DIR") or ROOT_DIR .. "/../shared/models"
  local f = io.open(models .. "/mobileface/mobileface.json")
  if not f then lu.skip("the shared models are not here (" .. models .. ")") end
  f:close()
  local out, rc = run("lua5.4 examples/infer_from_pb.lua")
  lu.assertEquals(rc, 0, out)
end

-- compile_explain.lua, run in an empty directory without ASCEND_WORK_PATH: it must leave
-- nothing there (no fusion_result.json).  The built model has 14 graph ops (sub, mul, conv2d,
-- mul, add, relu, max_pool, reshape, matmul, bias_add, relu, matmul, bias_add, softmax); the
-- passes absorb 7 of them (mul into the chain; mul, add, relu into the convolution; bias_add
-- and relu, then bias_add, into the two matmuls).
local function absolute(path)
  local p = io.popen("cd '" .. path .. "' && pwd")
  local abs = p:read("l")
  p:close()
  return abs
end

local function run_in_empty_dir(args)
  local root = absolute(ROOT_DIR)
  local module_root = absolute(os.getenv("NPU_MODULE_ROOT") or ROOT_DIR) -- make sanitize's build
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir '" .. dir .. "'"))
  local p = io.popen("cd '" .. dir .. "' && env -u ASCEND_WORK_PATH NPU_MODULE_ROOT='" .. module_root ..
    "' lua5.4 '" .. root .. "/examples/compile_explain.lua' " .. (args or "") .. " 2>&1; echo \"exit=$?\"")
  local out = p:read("a")
  p:close()
  local ls = io.popen("ls -A '" .. dir .. "'")
  local left = ls:read("a")
  ls:close()
  os.execute("rm -rf '" .. dir .. "'")
  return out, tonumber(out:match("exit=(%d+)%s*$")), left
end

function TestExamples:test_compile_explain()
  local out, rc, left = run_in_empty_dir()
  lu.assertEquals(rc, 0, out)
  lu.assertEquals(left, "", "files left behind")
  local on, fused, off = out:match("steps: (%d+) with the passes on %((%d+) fused%), (%d+) with them off")
  lu.assertEquals({ tonumber(on), tonumber(fused), tonumber(off) }, { 6, 4, 14 }, out)
  lu.assertStrContains(out, "ConvBatchnormFusionPass(Mul_1,Add,Relu,pool)")
  lu.assertStrContains(out, "MatMulBiasAddFusionPass(BiasAdd,Relu_1)")
  lu.assertStrContains(out, "TbeEltwiseFusionPass(Mul)")
  lu.assertStrContains(out, "results agree")
  lu.assertStrContains(out, "precision_mode must_keep_origin_dtype: 6 steps, step outputs: 6 float32")
  -- force_fp16: a cast of the feed in, every step's output float16, a cast of the fetch out
  lu.assertStrContains(tostring(out), "precision_mode force_fp16: 9 steps, step outputs: 8 float16, 1 float32")
  lu.assertEquals(select(2, out:gsub("fetched: float32", "")), 2)
  local d = tonumber(out:match("force_fp16 against float32: max |d| = ([%d.e+-]+) of the peak"))
  lu.assertNotNil(d, out)
  lu.assertTrue(d > 0 and d < 1e-2, "float16 error " .. tostring(d)) -- rounded, not wrong
end

function TestExamples:test_compile_explain_on_a_shared_model()
  local models = os.getenv("NPU_MODELS_DIR") or ROOT_DIR .. "/../shared/models"
  local f = io.open(models .. "/emotion/emotion.json")
  if not f then lu.skip("the shared models are not here (" .. models .. ")") end
  f:close()
  local path = absolute(models) .. "/emotion/emotion.json"
  local out, rc, left = run_in_empty_dir("'" .. path .. "'")
  lu.assertEquals(rc, 0, out)
  lu.assertEquals(left, "", "files left behind")
  local on, off = out:match("steps: (%d+) with the passes on %(%d+ fused%), (%d+) with them off")
  lu.assertNotNil(on, out)
  lu.assertTrue(tonumber(on) < tonumber(off), out)
  lu.assertStrContains(tostring(out), "results agree")
end

-- profile_model.lua on emotion, 5 runs: the profile's op types come sorted by time with
-- counts that are multiples of the runs, and the force_fp16 stats dump finds float16 outputs
-- and no NaN/Inf on the reference model.
function TestExamples:test_profile_model()
  local models = os.getenv("NPU_MODELS_DIR") or ROOT_DIR .. "/../shared/models"
  local f = io.open(models .. "/emotion/emotion.json")
  if not f then lu.skip("the shared models are not here (" .. models .. ")") end
  f:close()
  local out, rc = run("lua5.4 examples/profile_model.lua '" .. models .. "/emotion/emotion.json' 5")
  lu.assertEquals(rc, 0, out)
  lu.assertStrContains(tostring(out), "profile of 5 runs (PROF_")
  local shares, prev = 0, math.huge
  for op, count, total, share in out:gmatch("\n  ([%w_]+) +(%d+) +([%d.]+) +[%d.]+ +([%d.]+)%%") do
    lu.assertEquals(tonumber(count) % 5, 0, op)
    lu.assertTrue(tonumber(total) <= prev, "sorted by total: " .. op)
    prev = tonumber(total)
    shares = shares + tonumber(share)
  end
  lu.assertTrue(shares > 50 and shares <= 100.05, out)
  lu.assertStrContains(tostring(out), "  fused_conv2d ")
  lu.assertEquals(select(2, out:gsub("\n    %S+ +[%w_]+ +avg +[%d.]+ us  out %[", "")), 3, out) -- slowest steps
  lu.assertStrContains(tostring(out), "NaN/Inf values; largest")
  lu.assertStrContains(tostring(out), ", 0 NaN/Inf values")
  lu.assertEquals(select(2, out:gsub(" float16 +%d+x", "")), 3, out)
end
