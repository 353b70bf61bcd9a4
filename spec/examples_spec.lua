-- examples_spec.lua — every example runs as the README says, so the docs cannot rot; and from
-- any directory: each runs from an empty temporary directory, by its path, and may leave
-- nothing there but npu_out/ (the default output directory, when ASCEND_WORK_PATH is unset).
-- Under spec/run.lua --installed the examples of the source tree run against the installed
-- rock (the environment's paths), even in a checkout that is built.
local lu = require("luaunit")

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function absolute(path)
  local p = io.popen("cd " .. sh_quote(path) .. " && pwd")
  local abs = p:read("l")
  p:close()
  return abs
end

-- Runs `<cmd>` (in which EXAMPLES stands for the examples' directory, given as an absolute
-- path, or with relative = true as a path relative to the directory) in an empty temporary
-- directory with env ("VAR=value ...") added; returns the output, the exit status and what it
-- left in the directory (ls -A, one name a line).
local function run_in_empty_dir(cmd, env, relative)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. sh_quote(dir)))
  local examples = absolute(ROOT_DIR) .. "/examples"
  if relative then
    local p = io.popen("realpath --relative-to=" .. sh_quote(dir) .. " " .. sh_quote(examples))
    examples = p:read("l")
    p:close()
  end
  local module_root = os.getenv("NPU_MODULE_ROOT") -- make sanitize's build, made absolute
  if module_root then env = (env or "") .. " NPU_MODULE_ROOT=" .. sh_quote(absolute(module_root)) end
  -- under --installed, a build in the checkout must not stand in for the rock: the examples
  -- look for one in the empty directory, find none, and load the installed module
  if INSTALLED then env = (env or "") .. " NPU_MODULE_ROOT=" .. sh_quote(dir) end
  local p = io.popen("cd " .. sh_quote(dir) .. " && env " .. (env or "") .. " " ..
    cmd:gsub("EXAMPLES", (examples:gsub("%%", "%%%%"))) .. " 2>&1; echo \"exit=$?\"")
  local out = p:read("a")
  p:close()
  local ls = io.popen("ls -A " .. sh_quote(dir))
  local left = ls:read("a")
  ls:close()
  os.execute("rm -rf " .. sh_quote(dir))
  return out, tonumber(out:match("exit=(%d+)%s*$")), left
end

local function run(cmd, env, relative)
  local out, rc, left = run_in_empty_dir(cmd, env, relative)
  lu.assertTrue(left == "" or left == "npu_out\n", "left in the working directory: " .. left)
  return out, rc
end

TestExamples = {}

function TestExamples:test_quickstart()
  local out, rc = run("lua5.4 EXAMPLES/quickstart.lua", nil, true) -- a relative path
  lu.assertEquals(rc, 0, out)
  lu.assertStrContains(tostring(out), "output shape: {4, 10}")
  lu.assertEquals(select(2, out:gsub("image %d: top class %d", "")), 4)
end

function TestExamples:test_control_flow()
  local out, rc = run("lua5.4 EXAMPLES/control_flow.lua")
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
  local out, rc = run("lua5.4 EXAMPLES/weight_update.lua")
  lu.assertEquals(rc, 0, out)
  lu.assertStrContains(tostring(out), "after update:")
  lu.assertStrContains(tostring(out), "plans compiled: 3")
end

function TestExamples:test_train_digits_shortened()
  -- 5 loops of 100 device steps; the full example (15 loops) reaches about 96.7 %
  local out, rc = run("lua5.4 EXAMPLES/train_digits.lua 5")
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
    (no_leaks ~= "" and "-x ASAN_OPTIONS " or "") .. "lua5.4 EXAMPLES/train_digits_distributed.lua 5")
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
  local out, rc = run("lua5.4 EXAMPLES/infer_from_pb.lua")
  lu.assertEquals(rc, 0, out)
end

-- compile_explain.lua, without ASCEND_WORK_PATH: it must leave nothing at all (no
-- fusion_result.json, no npu_out).  The built model has 14 graph ops (sub, mul, conv2d,
-- mul, add, relu, max_pool, reshape, matmul, bias_add, relu, matmul, bias_add, softmax); the
-- passes absorb 7 of them (mul into the chain; mul, add, relu into the convolution; bias_add
-- and relu, then bias_add, into the two matmuls).
local function run_compile_explain(args)
  return run_in_empty_dir("lua5.4 EXAMPLES/compile_explain.lua " .. (args or ""), "-u ASCEND_WORK_PATH")
end

function TestExamples:test_compile_explain()
  local out, rc, left = run_compile_explain()
  lu.assertEquals(rc, 0, out)
  lu.assertEquals(left, "", "files left behind")
  local on, fused, off = out:match("steps: (%d+) with the passes on %((%d+) fused%), (%d+) with them off")
  lu.assertEquals({ tonumber(on), tonumber(fused), tonumber(off) }, { 6, 4, 14 }, out)
  lu.assertStrContains(out, "ConvBatchnormFusionPass(Mul_1,Add,Relu,pool)")
  lu.assertStrContains(out, "MatMulBiasAddFusionPass(BiasAdd,Relu_1)")
  lu.assertStrContains(out, "TbeEltwiseFusionPass(Mul)")
  lu.assertStrContains(out, "results agree")
  lu.assertStrContains(out, "precision_mode must_keep_origin_dtype: 6 steps, step outputs: 6 float32")
  -- force_fp16: a cast of the feed in, every step's output float16 (the pool in the
  -- convolution's step, as in float32: the direct kernel takes float16), a cast of the fetch out
  lu.assertStrContains(tostring(out), "precision_mode force_fp16: 8 steps, step outputs: 7 float16, 1 float32")
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
  local out, rc, left = run_compile_explain("'" .. path .. "'")
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
  local out, rc = run("lua5.4 EXAMPLES/profile_model.lua '" .. absolute(models) .. "/emotion/emotion.json' 5")
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
