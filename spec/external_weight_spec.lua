-- external_weight_spec.lua — external_weight (compile/external_weight.c): results bit for bit
-- equal with the option on and off (a small model, and the shared models when present), the
-- weight files in $ASCEND_WORK_PATH/tmp_weight_<pid>_<session> (else the working directory)
-- while the session lives, identical constants in one file, the directory gone after close,
-- the constants out of the context's accounted memory (npu.core.live_bytes), an unwritable
-- directory named in an NPU_ERR_IO error.
--
-- In-process cases write under $ASCEND_WORK_PATH (make test sets build/ascend_work) and skip
-- without it, so nothing lands in the checkout; the layout cases run a subprocess in a
-- temporary directory with the environment they need.
local lu = require("luaunit")
local npu = require("npu")
local model = require("npu.model")
local S = dofile(SPEC_DIR .. "/support.lua")

local MODELS_DIR = os.getenv("NPU_MODELS_DIR") or (ROOT_DIR or ".") .. "/../shared/models"

-- The small model, as source so that a subprocess builds the same: y = ((x @ w1) @ w2 + b) @ k,
-- w1 and w2 the same 64x64 floats (16 KiB: one file), k = w3 * 2 folded at compile time (a plan
-- constant: a file of its own, and w3 another), b 256 bytes (stays in memory).  The weights'
-- Lua tensors are dropped, so the graph holds the only reference.
local MODEL = [[
local npu = require("npu")
local function build()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 64 }, "x")
  local function w(seed) return g:const(npu.random.normal({ 64, 64 }, { seed = seed, stddev = 0.1 })) end
  local w1, w2, w3 = w(1), w(1), w(3)
  local b = g:const(npu.random.normal({ 64 }, { seed = 4 }))
  local k = w3 * 2
  local y = ((x:matmul(w1)):matmul(w2) + b):matmul(k)
  return g, x, y
end
local function feed(x, n) return { [x] = npu.random.normal({ n or 3, 64 }, { seed = 9 }) } end
local function pid()
  local f = io.open("/proc/self/stat")
  local s = f and f:read("l")
  if f then f:close() end
  return s and s:match("^(%d+)")
end
-- the weight directories of this process in base: {path = n weight files}
local function weight_dirs(base)
  local out, p = {}, pid()
  local h = io.popen("ls -A '" .. base .. "' 2>/dev/null")
  for name in h:lines() do
    if name:match("^tmp_weight_" .. p .. "_%d+$") then
      local n, l = 0, io.popen("ls -A '" .. base .. "/" .. name .. "'")
      for f in l:lines() do n = n + (f:match("^weight_%x+$") and 1 or 1000) end
      l:close()
      out[base .. "/" .. name] = n
    end
  end
  h:close()
  return out
end
local function bits(t)
  local out = {}
  for i, v in ipairs(t:reshape({ t:numel() }):totable()) do out[i] = string.pack("<d", v) end
  return table.concat(out)
end
]]
local M = load(MODEL .. " return { build = build, feed = feed, pid = pid, weight_dirs = weight_dirs, bits = bits }")()

local function live()
  collectgarbage()
  collectgarbage()
  return npu.core.live_bytes()
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

local function work_path()
  local base = os.getenv("ASCEND_WORK_PATH")
  if not base or base == "" then
    lu.skip("ASCEND_WORK_PATH is unset (make test sets build/ascend_work): the files would land in the working directory")
  end
  if not M.pid() then lu.skip("no /proc/self/stat: cannot find this process's directory") end
  os.execute("mkdir -p " .. S.sh_quote(base))
  return base
end

TestExternalWeight = {}

function TestExternalWeight:test_small_model_files_equal_results_and_less_memory()
  local base = work_path()
  local function run(on)
    local g, x, y = M.build()
    local before = live()
    local sess = npu.Session { graph = g, options = { external_weight = on } }
    local r = sess:run(y, M.feed(x))
    local used = live() - before
    return sess, r, used, g, x, y
  end
  local s_off, r_off, used_off = run(false)
  lu.assertEquals(count(M.weight_dirs(base)), 0)
  s_off:close()
  local s_on, r_on, used_on, g, x, y = run(true)
  local dirs = M.weight_dirs(base)
  lu.assertEquals(count(dirs), 1)
  local dir, n = next(dirs)
  lu.assertEquals(n, 3) -- w1 = w2, w3, the folded k
  lu.assertEquals(M.bits(r_on), M.bits(r_off))
  -- off: the graph's three 16 KiB weights and the plan's folded k are accounted; on: mappings
  lu.assertTrue(used_on + 60 * 1024 < used_off, ("accounted %d on, %d off"):format(used_on, used_off))
  -- another plan (batch 5) reads the same constants: no new file
  s_on:run(y, M.feed(x, 5))
  lu.assertEquals(M.weight_dirs(base)[dir], 3)
  s_on:close()
  lu.assertFalse(S.exists(dir), dir .. " should be gone after close")
  -- the graph's constants are file-backed now; they still read after the files went
  local again <close> = npu.Session { graph = g }
  lu.assertEquals(M.bits(again:run(y, M.feed(x))), M.bits(r_off))
end

function TestExternalWeight:test_shared_models_bit_equal_and_less_memory()
  local base = work_path()
  local found = false
  for _, name in ipairs({ "emotion", "mobileface" }) do
    local dir = MODELS_DIR .. "/" .. name
    if S.exists(dir .. "/" .. name .. ".json") then
      found = true
      for _, pm in ipairs({ "must_keep_origin_dtype", "force_fp16" }) do
        local res = {}
        for _, on in ipairs({ false, true }) do
          local g, info = model.load_model(dir .. "/" .. name .. ".json")
          local feeds = {}
          for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/input_%d.npy"):format(dir, i - 1)) end
          local before = live()
          local sess <close> = npu.Session { graph = g, options = { external_weight = on, precision_mode = pm } }
          local ys = sess:run(info.output_names, feeds)
          local r = { used = live() - before, bits = {} }
          for j, t in ipairs(ys) do r.bits[j] = M.bits(t) end
          local dirs = M.weight_dirs(base)
          r.n_dirs, r.files = count(dirs), select(2, next(dirs))
          res[on] = r
        end
        local what = name .. " " .. pm
        lu.assertEquals(res[true].bits, res[false].bits, what .. ": outputs differ")
        lu.assertEquals(res[false].n_dirs, 0, what)
        lu.assertEquals(res[true].n_dirs, 1, what)
        lu.assertTrue(res[true].files > 0, what)
        -- the weights (>= 800 KiB in both models) leave the accounted memory
        lu.assertTrue(res[true].used + 500 * 1024 < res[false].used,
          ("%s: accounted %d on, %d off"):format(what, res[true].used, res[false].used))
      end
      lu.assertEquals(count(M.weight_dirs(base)), 0)
    end
  end
  if not found then lu.skip("models directory " .. MODELS_DIR .. " is absent (set NPU_MODELS_DIR)") end
end

-- the layout in a subprocess: where the files go, one per distinct constant, gone after close
local LAYOUT = MODEL .. [[
local g, x, y = build()
local sess = npu.Session { graph = g, options = { external_weight = true, export_compile_stat = 0 } }
local ok, err = pcall(sess.run, sess, y, feed(x))
if not ok then print("ERROR " .. tostring(err)) os.exit(0) end
local base = os.getenv("ASCEND_WORK_PATH") or "npu_out"
for d, n in pairs(weight_dirs(base)) do print("DIR " .. d .. " " .. n) end
sess:close()
print("AFTER " .. #(function() local t = {} for d in pairs(weight_dirs(base)) do t[#t + 1] = d end return t end)())
]]

function TestExternalWeight:test_ascend_work_path_and_working_directory()
  if not M.pid() then lu.skip("no /proc/self/stat") end
  local tmp = S.tmpdir()
  local out = S.run_lua(tmp, "ASCEND_WORK_PATH=" .. S.sh_quote(tmp .. "/work/deep"), LAYOUT)
  local dir, n = out:match("DIR (%S+) (%d+)")
  lu.assertNotNil(dir, out)
  lu.assertStrContains(dir, tmp .. "/work/deep/tmp_weight_")
  lu.assertEquals(tonumber(n), 3, out)
  lu.assertStrContains(tostring(out), "AFTER 0")
  lu.assertFalse(S.exists(dir))
  -- without ASCEND_WORK_PATH: the default output directory, npu_out
  out = S.run_lua(tmp, "-u ASCEND_WORK_PATH", LAYOUT)
  dir, n = out:match("DIR (%S+) (%d+)")
  lu.assertNotNil(dir, out)
  lu.assertStrContains(dir, "npu_out/tmp_weight_")
  lu.assertEquals(tonumber(n), 3, out)
  lu.assertStrContains(tostring(out), "AFTER 0")
  lu.assertEquals(S.ls(tmp), { "npu_out", "work" }) -- work/deep and npu_out stay
  lu.assertEquals(S.ls(tmp .. "/npu_out"), {}) -- tmp_weight_* removed
  S.rm_rf(tmp)
end

function TestExternalWeight:test_unwritable_directory_is_an_io_error_naming_it()
  local tmp = S.tmpdir()
  S.write(tmp .. "/a_file", "x")
  local out = S.run_lua(tmp, "ASCEND_WORK_PATH=" .. S.sh_quote(tmp .. "/a_file/work"), LAYOUT)
  lu.assertStrContains(tostring(out), "ERROR ")
  lu.assertStrContains(tostring(out), "NPU_ERR_IO")
  lu.assertStrContains(tostring(out), "external_weight")
  lu.assertStrContains(tostring(out), tmp .. "/a_file")
  S.rm_rf(tmp)
end

function TestExternalWeight:test_option_off_by_default_and_typed()
  local base = work_path()
  local g, x, y = M.build()
  local sess <close> = npu.Session { graph = g }
  sess:run(y, M.feed(x))
  lu.assertEquals(count(M.weight_dirs(base)), 0)
  local err = S.fails(function() npu.Session { graph = g, options = { external_weight = 1 } } end)
  lu.assertStrContains(tostring(err), "external_weight")
end
