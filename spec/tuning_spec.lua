-- tuning_spec.lua — AOE made real (compile/tuning.c): aoe_mode 2 times each step's candidates
-- and writes records with the documented keys to <work_path>/npu_aoe_tuning.jsonl and the
-- operator cache; a new session reads them back without timing (explain's tuning.timed and
-- each step's "tuned"); the chosen candidate is the one applied; a corrupt or stale record is
-- ignored and rewritten; the operator cache is aged to its size limit; aoe_mode 1 tunes the
-- fusion passes of a plan; results stay within each kernel's stated accuracy; the options'
-- errors; steps nested in while loops and cond branches are tuned and read back under keys of
-- their own; a constant filter's Winograd candidate is timed with its U prepared, as the plan
-- runs it.  Which candidate wins is asserted only where the margin is ~1.5x or more (the
-- constant-filter case); elsewhere never: the machine is shared and noisy.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

TestTuning = {}

-- Each test's work_path, removed when the test ends, failed or not.
function TestTuning:setUp() self.dir = S.tmpdir() end
function TestTuning:tearDown() S.rm_rf(self.dir) end

local AOE_FILE = "npu_aoe_tuning.jsonl"
local CACHE_FILE = "kernel_cache/npu_op_cache.jsonl"

-- A small CNN: conv 3x3 (1 -> 8) + bias + relu + pool, conv 3x3 (8 -> 16) + bias + relu,
-- dense to 10 at batch 2 (a matmul of 2 rows: sgemm and sgemv are both candidates).
local function build()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 12, 12, 1 }, "x")
  local function c(shape, seed) return g:const(npu.random.normal(shape, { seed = seed, stddev = 0.3 })) end
  local h = npu.nn.relu(npu.nn.bias_add(npu.nn.conv2d(x, c({ 3, 3, 1, 8 }, 1),
    { strides = { 1, 1, 1, 1 }, padding = "SAME" }), c({ 8 }, 2)))
  h = npu.nn.max_pool(h, { ksize = 2, strides = 2, padding = "VALID" })
  h = npu.nn.relu(npu.nn.bias_add(npu.nn.conv2d(h, c({ 3, 3, 8, 16 }, 3),
    { strides = { 1, 1, 1, 1 }, padding = "SAME" }), c({ 16 }, 4)))
  local y = npu.reshape(h, { -1, 6 * 6 * 16 }):matmul(c({ 6 * 6 * 16, 10 }, 5))
  return g, x, y
end

local function feed(x) return { [x] = npu.random.normal({ 2, 12, 12, 1 }, { seed = 7 }) } end

local function lines(path)
  local out = {}
  local f = io.open(path)
  if not f then return out end
  for l in f:lines() do out[#out + 1] = l end
  f:close()
  return out
end

local function records(path)
  local out = {}
  for _, l in ipairs(lines(path)) do out[#out + 1] = S.json_decode(l) end
  return out
end

-- FNV-1a 64, as the records' checksum (integers wrap modulo 2^64 in Lua 5.4)
local function fnv(s)
  local h = -3750763034362895579 -- 14695981039346656037
  for i = 1, #s do h = (h ~ s:byte(i)) * 1099511628211 end
  return ("%016x"):format(h)
end

local function body_of(line) return line:match('^(.*),"checksum":"%x+"}$') end
local function seal(body) return body .. ',"checksum":"' .. fnv(body) .. '"}' end

local function write_lines(path, ls)
  local f = assert(io.open(path, "w"))
  for _, l in ipairs(ls) do f:write(l, "\n") end
  f:close()
end

local function session(dir, extra)
  local g, x, y = build()
  local opts = { export_compile_stat = 0, work_path = dir, op_compiler_cache_dir = dir .. "/cache" }
  for k, v in pairs(extra or {}) do opts[k] = v or nil end
  local sess = npu.Session { graph = g, options = opts }
  return sess, g, x, y
end

local function explain(sess, x, y) return sess:explain(y, feed(x)) end

local max_diff = S.max_diff

function TestTuning:test_operator_tuning_writes_records_a_new_session_reads_them()
  local dir = self.dir
  local sess, _, x, y = session(dir, { aoe_mode = "2" })
  local e = explain(sess, x, y)
  lu.assertEquals(e.tuning.aoe_mode, "2")
  lu.assertTrue(e.tuning.timed >= 3, "three steps timed (two convolutions, the matmul)")
  lu.assertEquals(e.tuning.reused, 0)
  local recs = records(dir .. "/" .. AOE_FILE)
  lu.assertEquals(#recs, e.tuning.timed)
  for _, r in ipairs(recs) do
    for _, k in ipairs({ "v", "key", "kind", "op", "node", "inputs", "outputs", "impl", "threads_max",
      "fingerprint", "algo", "threads", "candidates", "written", "atime", "checksum" }) do
      lu.assertNotNil(r[k], "record key " .. k)
    end
    lu.assertEquals(r.kind, "op")
    lu.assertStrContains(r.fingerprint, "OpenBLAS")
    lu.assertTrue(#r.candidates >= 1)
  end
  for _, l in ipairs(lines(dir .. "/" .. AOE_FILE)) do
    lu.assertEquals(seal(body_of(l)), l, "checksum")
  end
  -- the same records in the operator cache
  lu.assertEquals(#records(dir .. "/cache/" .. CACHE_FILE), #recs)
  -- the chosen candidate is what the plan runs
  local by_node = {}
  for _, r in ipairs(recs) do by_node[r.node] = r end
  for _, s in ipairs(e.steps) do
    local r = by_node[s.node]
    if r then
      lu.assertEquals(s.tuned, "timed")
      if s.op:match("conv2d") or s.op:match("matmul") then lu.assertEquals(s.algo, r.algo, s.node) end
      lu.assertEquals(s.threads or r.threads_max, r.threads, s.node)
    end
  end
  local want = sess:run(y, feed(x))
  sess:close()

  -- a new session with aoe_mode: applies, times nothing
  local again, _, x2, y2 = session(dir, { aoe_mode = "2" })
  local e2 = explain(again, x2, y2)
  lu.assertEquals(e2.tuning.timed, 0)
  lu.assertEquals(e2.tuning.reused, #recs)
  for _, s in ipairs(e2.steps) do
    if by_node[s.node] then lu.assertEquals(s.tuned, "record") end
  end
  again:close()
  -- a session without aoe_mode (op_compiler_cache_mode enable, the default) reads the cache
  local plain, _, x3, y3 = session(dir, { work_path = false })
  local e3 = explain(plain, x3, y3)
  lu.assertNil(e3.tuning.aoe_mode)
  lu.assertEquals(e3.tuning.timed, 0)
  lu.assertEquals(e3.tuning.reused, #recs)
  local got = plain:run(y3, feed(x3))
  local d, peak = max_diff(got, want)
  lu.assertTrue(d <= 0, "same choices, same bits: " .. d .. " of " .. peak)
  plain:close()
  -- disable: the cache is not read
  local off, _, x4, y4 = session(dir, { work_path = false, op_compiler_cache_mode = "disable" })
  lu.assertEquals(explain(off, x4, y4).tuning.reused, 0)
  off:close()
end

function TestTuning:test_results_stay_within_each_kernels_accuracy()
  local dir = self.dir
  local g, x, y = build()
  local ref = npu.Session { graph = g, options = { use_off_line = false, export_compile_stat = 0 } }
  local want = ref:run(y, feed(x))
  ref:close()
  -- high_precision (set: the default is high_performance, whose candidates include Winograd):
  -- no Winograd among the candidates
  local function has_winograd(path)
    for _, r in ipairs(records(path)) do
      for _, c in ipairs(r.candidates) do
        if c.algo == "winograd_2x3" then return true end
      end
    end
    return false
  end
  local sess = npu.Session { graph = g, options = { export_compile_stat = 0, aoe_mode = "2",
    work_path = dir, op_compiler_cache_mode = "disable", op_select_implmode = "high_precision" } }
  local e = sess:explain(y, feed(x))
  for _, s in ipairs(e.steps) do lu.assertNotEquals(s.algo, "winograd_2x3") end
  lu.assertTrue(#records(dir .. "/" .. AOE_FILE) >= 2)
  lu.assertFalse(has_winograd(dir .. "/" .. AOE_FILE), "high_precision: no Winograd candidate")
  local d, peak = max_diff(sess:run(y, feed(x)), want)
  lu.assertTrue(d <= 1e-5 * peak, ("tuned vs reference: %g of %g"):format(d, peak))
  sess:close()
  -- O1 widens high_precision's conv2d candidates to Winograd: within its bound
  -- (docs/numerics.md; here, with values of order one and c = 8, far below 1e-4 of the peak)
  local cfg, wdir = dir .. "/aoe.json", dir .. "/wide"
  os.execute("mkdir -p " .. S.sh_quote(wdir))
  S.write(cfg, '{"tune_optimization_level": "O1", "tune_ops_type": ["Conv2D"]}')
  local wide = npu.Session { graph = g, options = { export_compile_stat = 0, aoe_mode = "2",
    work_path = wdir, aoe_config_file = cfg, op_compiler_cache_mode = "disable",
    op_select_implmode = "high_precision" } }
  local ew = wide:explain(y, feed(x))
  local recs = records(wdir .. "/" .. AOE_FILE)
  lu.assertTrue(has_winograd(wdir .. "/" .. AOE_FILE),
    "the 8 -> 16 convolution had Winograd among its candidates")
  for _, r in ipairs(recs) do lu.assertTrue(r.widened) end
  for _, s in ipairs(ew.steps) do -- tune_ops_type: only the convolutions were timed
    if s.tuned == "timed" then lu.assertStrContains(s.op, "conv2d") end
  end
  d, peak = max_diff(wide:run(y, feed(x)), want)
  lu.assertTrue(d <= 1e-4 * peak, ("widened vs reference: %g of %g"):format(d, peak))
  wide:close()
end

function TestTuning:test_corrupt_and_stale_records_are_ignored_and_rewritten()
  local dir = self.dir
  local sess, _, x, y = session(dir, { aoe_mode = "2", op_compiler_cache_mode = "disable" })
  local n = explain(sess, x, y).tuning.timed
  sess:close()
  local path = dir .. "/" .. AOE_FILE
  local ls = lines(path)
  lu.assertEquals(#ls, n)
  -- line 1: a byte changed (checksum no longer matches); line 2: another fingerprint, sealed
  -- again (stale); and a line of garbage
  ls[1] = ls[1]:gsub('"threads":(%d)', '"threads":9', 1)
  ls[2] = seal((body_of(ls[2]):gsub('"fingerprint":"', '"fingerprint":"another machine; ', 1)))
  ls[#ls + 1] = "{not json"
  write_lines(path, ls)
  local again, _, x2, y2 = session(dir, { aoe_mode = "2", op_compiler_cache_mode = "disable" })
  local e = explain(again, x2, y2)
  lu.assertEquals(e.tuning.timed, 2)
  lu.assertEquals(e.tuning.reused, n - 2)
  again:close()
  local after = lines(path)
  lu.assertEquals(#after, n, "garbage dropped, the two records rewritten")
  for _, l in ipairs(after) do
    lu.assertEquals(seal(body_of(l)), l)
    lu.assertNotStrContains(l, "another machine")
  end
end

function TestTuning:test_force_removes_the_cache()
  local dir = self.dir
  local sess, _, x, y = session(dir, { aoe_mode = "2" })
  explain(sess, x, y)
  sess:close()
  lu.assertTrue(S.exists(dir .. "/cache/" .. CACHE_FILE))
  local forced, _, x2, y2 = session(dir, { work_path = false, op_compiler_cache_mode = "force" })
  lu.assertFalse(S.exists(dir .. "/cache/" .. CACHE_FILE))
  lu.assertEquals(explain(forced, x2, y2).tuning.reused, 0)
  forced:close()
end

function TestTuning:test_subgraph_tuning_chooses_fusion_and_is_read_back()
  local dir = self.dir
  local sess, _, x, y = session(dir, { aoe_mode = "1", op_compiler_cache_mode = "disable" })
  local e = explain(sess, x, y)
  lu.assertEquals(e.tuning.subgraph, "timed")
  lu.assertEquals(e.tuning.timed, 0, "aoe_mode 1 times no single step")
  local want = sess:run(y, feed(x))
  sess:close()
  local recs = records(dir .. "/" .. AOE_FILE)
  lu.assertEquals(#recs, 1)
  lu.assertEquals(recs[1].kind, "subgraph")
  lu.assertTrue(#recs[1].candidates >= 2, "the plan and at least one pass off")
  local again, _, x2, y2 = session(dir, { aoe_mode = "1", op_compiler_cache_mode = "disable" })
  local e2 = explain(again, x2, y2)
  lu.assertEquals(e2.tuning.subgraph, "record")
  lu.assertEquals(e2.tuning.fusion_off, recs[1].fusion_off)
  for _, p in ipairs(e2.tuning.fusion_off) do
    for _, s in ipairs(e2.steps) do lu.assertNotEquals(s.pass, p) end
  end
  local d, peak = max_diff(again:run(y2, feed(x2)), want)
  lu.assertTrue(d <= 1e-5 * peak, ("fusion on/off: %g of %g"):format(d, peak))
  again:close()
end

-- ageing: a cache of ~1.3 MB of old records (atime two hours ago) and a few recent ones,
-- ASCEND_MAX_OP_CACHE_SIZE=1 (MB), ratio 50: the next write ages the old ones out down to
-- 512 KiB, the recent ones stay; with op_cache.ini max_op_cache_size=-1 nothing is aged.
local AGEING = [[
local npu = require("npu")
local dir = os.getenv("DIR")
local g = npu.Graph()
local x = g:placeholder("float32", { 2, 64 }, "x")
local y = x:matmul(g:const(npu.random.normal({ 64, 32 }, { seed = 1 })))
local sess = npu.Session { graph = g, options = { aoe_mode = "2", work_path = dir,
  op_compiler_cache_dir = dir, export_compile_stat = 0 } }
local ok, err = pcall(sess.explain, sess, y, { [x] = npu.ones({ 2, 64 }) })
print(ok and "OK" or ("ERROR " .. tostring(err)))
sess:close()
]]

local function fill_cache(dir, n_old, n_new)
  os.execute("mkdir -p " .. S.sh_quote(dir .. "/kernel_cache"))
  local now = os.time()
  local ls = {}
  for i = 1, n_old + n_new do
    local atime = i <= n_old and now - 7200 - i or now
    local body = ('{"v":1,"key":"synthetic %d %s","kind":"op","fingerprint":"x","written":%d,"atime":%d'):format(
      i, ("p"):rep(240), atime, atime)
    ls[#ls + 1] = seal(body)
  end
  write_lines(dir .. "/" .. CACHE_FILE, ls)
end

function TestTuning:test_cache_size_limit_ages_old_records()
  local dir = self.dir
  fill_cache(dir, 4000, 5)
  local out = S.run_lua(dir, "DIR=" .. S.sh_quote(dir) ..
    " ASCEND_MAX_OP_CACHE_SIZE=1 ASCEND_REMAIN_CACHE_SIZE_RATIO=50", AGEING)
  lu.assertStrContains(out, "OK")
  local ls = lines(dir .. "/" .. CACHE_FILE)
  local size, recent, oldest_left = 0, 0, math.huge
  for _, l in ipairs(ls) do
    size = size + #l + 1
    local i = tonumber(l:match('"synthetic (%d+)'))
    if i and i > 4000 then recent = recent + 1 end
    if i and i <= 4000 then oldest_left = math.min(oldest_left, i) end
  end
  lu.assertTrue(size <= 512 * 1024, "aged down to 50 % of 1 MB: " .. size)
  lu.assertEquals(recent, 5, "records used within half an hour stay")
  lu.assertTrue(#ls > 1000, "only down to the ratio, not emptied")
  -- least recently used first: what is left of the old ones are the most recent of them (the
  -- lower numbers: atime = now - 7200 - i)
  lu.assertEquals(oldest_left, 1)
  lu.assertNotNil(ls[#ls]:match('"kind":"op"'))
  -- op_cache.ini's -1 wins over the environment: no ageing
  fill_cache(dir, 4000, 5)
  S.write(dir .. "/kernel_cache/op_cache.ini", "[op_compiler_cache]\nmax_op_cache_size=-1\nremain_cache_size_ratio=80\n")
  out = S.run_lua(dir, "DIR=" .. S.sh_quote(dir) .. " ASCEND_MAX_OP_CACHE_SIZE=1", AGEING)
  lu.assertStrContains(out, "OK")
  lu.assertTrue(#lines(dir .. "/" .. CACHE_FILE) >= 4005)
end

function TestTuning:test_option_errors()
  local dir = self.dir
  local g = build()
  local function make(opts)
    opts.export_compile_stat = 0
    return npu.Session { graph = g, options = opts }
  end
  local err = S.fails(make, { aoe_mode = "3" })
  lu.assertStrContains(err, "NPU_ERR_OPTION")
  lu.assertStrContains(err, "aoe_mode")
  err = S.fails(make, { aoe_mode = "2", work_path = dir .. "/missing" })
  lu.assertStrContains(err, "NPU_ERR_IO")
  lu.assertStrContains(err, dir .. "/missing")
  S.write(dir .. "/c.json", '{"tune_ops_type": ["MatMul"]}')
  err = S.fails(make, { aoe_config_file = dir .. "/c.json" })
  lu.assertStrContains(err, "NPU_ERR_CONFLICT")
  lu.assertStrContains(err, "aoe_mode")
  local cases = {
    { '{"tune_ops_typo": []}', "NPU_ERR_FORMAT", "tune_ops_typo" },
    { '{"tune_ops_type": ["NoSuchOp"]}', "NPU_ERR_NOT_FOUND", "NoSuchOp" },
    { '{"tune_optimization_level": "O3"}', "NPU_ERR_FORMAT", "tune_optimization_level" },
    { '{"feature": ["nonhomo_split"]}', "NPU_ERR_CONFLICT", "nonhomo_split" },
    { '[1]', "NPU_ERR_FORMAT", "c.json" },
  }
  for _, c in ipairs(cases) do
    S.write(dir .. "/c.json", c[1])
    err = S.fails(make, { aoe_mode = "2", work_path = dir, aoe_config_file = dir .. "/c.json" })
    lu.assertStrContains(err, c[2], c[1])
    lu.assertStrContains(err, c[3], c[1])
  end
  err = S.fails(make, { aoe_mode = "2", work_path = dir, aoe_config_file = dir .. "/none.json" })
  lu.assertStrContains(err, "NPU_ERR_IO")
  err = S.fails(make, { op_compiler_cache_mode = "sometimes" })
  lu.assertStrContains(err, "NPU_ERR_OPTION")
  -- aoe_mode 4 (gradient splitting): validated, nothing tuned
  local sess = make({ aoe_mode = "4", work_path = dir, op_compiler_cache_mode = "disable" })
  sess:close()
  lu.assertFalse(S.exists(dir .. "/" .. AOE_FILE))
end

-- ---- steps inside loops and branches ------------------------------------------------------
-- A 3x3 convolution (8 -> 8 channels) at the top level and, with the same shapes, in a while
-- loop's body; a matmul of 2 rows (sgemm and sgemv both candidates) in the body and in a
-- cond's then branch.  A nested step's record is its own: its key says where it sits.
local function nested_build()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder("float32", { 1, 8, 8, 8 }, "x")
  local m = g:placeholder("float32", { 2, 64 }, "m")
  local n = g:placeholder("int32", {}, "n")
  local p = g:placeholder("bool", {}, "p")
  local f = g:const(npu.random.normal({ 3, 3, 8, 8 }, { seed = 1, stddev = 0.3 }))
  local w = g:const(npu.random.normal({ 64, 64 }, { seed = 2, stddev = 0.1 }))
  local function conv(v, name) return npu.nn.conv2d(v, f, { strides = { 1, 1, 1, 1 }, padding = "SAME", name = name }) end
  local top = conv(x, "top_conv")
  local r = npu.while_loop(function(i) return npu.less(i, n) end, function(i, v, a)
    return i + 1, conv(v, "loop_conv"), npu.matmul(a, w, { name = "loop_matmul" })
  end, { 0, x, m })
  local b = npu.cond(p, function() return npu.matmul(m, w, { name = "then_matmul" }) end, function() return m end)
  local feeds = { [x] = npu.random.normal({ 1, 8, 8, 8 }, { seed = 3 }), [m] = npu.random.normal({ 2, 64 }, { seed = 4 }),
    [n] = npu.tensor(2, "int32"), [p] = npu.tensor(true, "bool") }
  return g, feeds, { top, r[2], r[3], b }
end

local nested_steps = S.steps_by_node -- steps at any depth by node name

local function nested_session(dir, extra, fetches)
  local g, feeds, ys = nested_build()
  local opts = { export_compile_stat = 0, work_path = dir, op_compiler_cache_dir = dir .. "/cache" }
  for k, v in pairs(extra or {}) do opts[k] = v or nil end
  local sess = npu.Session { graph = g, options = opts }
  local want = ys
  if fetches then
    want = {}
    for i, k in ipairs(fetches) do want[i] = ys[k] end
  end
  return sess, want, feeds
end

local NESTED = { "top_conv", "loop_conv", "loop_matmul", "then_matmul" }

function TestTuning:test_nested_steps_are_tuned_and_read_back()
  local dir = self.dir
  local sess, ys, feeds = nested_session(dir, { aoe_mode = "2" })
  local e = sess:explain(ys, feeds)
  lu.assertEquals(e.tuning.timed, 4)
  local steps = nested_steps(e)
  for _, name in ipairs(NESTED) do lu.assertEquals(steps[name].tuned, "timed", name) end
  local recs = {}
  for _, r in ipairs(records(dir .. "/" .. AOE_FILE)) do recs[r.node] = r end
  -- where each sits, in its record and its key; the top-level key is as it always was
  lu.assertEquals(recs.top_conv.context, "")
  lu.assertEquals(recs.loop_conv.context, "while/body")
  lu.assertEquals(recs.loop_matmul.context, "while/body")
  lu.assertEquals(recs.then_matmul.context, "cond/then")
  lu.assertNotNil(recs.top_conv.key:match(" threads %d+$"), recs.top_conv.key)
  lu.assertEquals(recs.loop_conv.key, recs.top_conv.key .. " in while/body")
  lu.assertEquals(recs.then_matmul.key:sub(-13), " in cond/then")
  -- the GEMV / GEMM choice of the nested matmuls, applied as recorded
  for _, name in ipairs({ "loop_matmul", "then_matmul" }) do
    local algos = {}
    for _, c in ipairs(recs[name].candidates) do algos[c.algo] = true end
    lu.assertTrue(algos.gemv and algos.sgemm, name .. ": both candidates timed")
    lu.assertEquals(steps[name].algo, recs[name].algo, name)
  end
  lu.assertEquals(steps.loop_conv.algo, recs.loop_conv.algo)
  local want = sess:run(ys, feeds)
  sess:close()
  -- a later session, operator cache on (op_compiler_cache_mode enable, the default), no AOE:
  -- every nested choice read back, nothing timed, the same bits
  local plain, ys2, feeds2 = nested_session(dir, { work_path = false, op_compiler_cache_mode = "enable" })
  local e2 = plain:explain(ys2, feeds2)
  lu.assertEquals(e2.tuning.timed, 0)
  lu.assertEquals(e2.tuning.reused, 4)
  local steps2 = nested_steps(e2)
  for _, name in ipairs(NESTED) do
    lu.assertEquals(steps2[name].tuned, "record", name)
    lu.assertEquals(steps2[name].algo, steps[name].algo, name)
    lu.assertEquals(steps2[name].threads, steps[name].threads, name)
  end
  local got = plain:run(ys2, feeds2)
  for i = 1, #want do lu.assertEquals(max_diff(got[i], want[i]), 0, "fetch " .. i) end
  plain:close()
end

function TestTuning:test_a_top_level_record_is_not_a_nested_steps()
  local dir = self.dir
  -- the top-level convolution alone is tuned
  local sess, ys, feeds = nested_session(dir, { aoe_mode = "2" }, { 1 })
  lu.assertEquals(sess:explain(ys, feeds).tuning.timed, 1)
  sess:close()
  -- the loop's convolution, of the same shapes, finds no record of its own: AOE times it
  local again, ys2, feeds2 = nested_session(dir, { aoe_mode = "2" }, { 1, 2 })
  local e = again:explain(ys2, feeds2)
  local steps = nested_steps(e)
  lu.assertEquals(steps.top_conv.tuned, "record")
  lu.assertEquals(steps.loop_conv.tuned, "timed")
  again:close()
  -- aoe_config_file's tune_ops_name names a nested node
  local cfg, wdir = dir .. "/aoe.json", dir .. "/named"
  os.execute("mkdir -p " .. S.sh_quote(wdir))
  S.write(cfg, '{"tune_ops_name": ["then_matmul"]}')
  local named, ys3, feeds3 = nested_session(wdir, { aoe_mode = "2", aoe_config_file = cfg,
    op_compiler_cache_mode = "disable" })
  local e3 = named:explain(ys3, feeds3)
  lu.assertEquals(e3.tuning.timed, 1)
  lu.assertEquals(nested_steps(e3).then_matmul.tuned, "timed")
  named:close()
end

function TestTuning:test_nested_convolution_candidates_under_high_performance()
  local dir = self.dir
  local g, feeds, ys = nested_build()
  local ref = npu.Session { graph = g, options = { use_off_line = false, export_compile_stat = 0 } }
  local want = ref:run(ys, feeds)
  ref:close()
  local sess = npu.Session { graph = g, options = { export_compile_stat = 0, aoe_mode = "2", work_path = dir,
    op_compiler_cache_mode = "disable", op_select_implmode = "high_performance" } }
  local e = sess:explain(ys, feeds)
  local rec
  for _, r in ipairs(records(dir .. "/" .. AOE_FILE)) do
    if r.node == "loop_conv" then rec = r end
  end
  local algos = {}
  for _, c in ipairs(rec.candidates) do algos[c.algo] = true end
  lu.assertTrue(algos.winograd_2x3 and algos.direct and algos.im2col, "Winograd, direct and im2col timed in the loop")
  lu.assertEquals(rec.impl, "high_performance")
  lu.assertEquals(nested_steps(e).loop_conv.algo, rec.algo)
  -- whichever won: within Winograd's bound (far below 1e-4 of the peak here; the loop runs it twice)
  local got = sess:run(ys, feeds)
  for i = 1, #want do
    local d, peak = max_diff(got[i], want[i])
    lu.assertTrue(d <= 1e-4 * peak, ("fetch %d: %g of %g"):format(i, d, peak))
  end
  sess:close()
end

-- conv2d_backprop_input (3x3, stride 1: the forward convolution of dy with the turned filter):
-- its own kernel ("default") against Winograd under the same gate as conv2d's — only under
-- high_performance or O1 — the record applied by a later session, results within Winograd's
-- bound whichever won.
local function input_grad_build()
  local g = npu.Graph()
  local dy = g:placeholder("float32", { 2, 8, 8, 16 }, "dy")
  local f = g:const(npu.random.normal({ 3, 3, 8, 16 }, { seed = 21, stddev = 0.3 }))
  local dx = g:op("conv2d_backprop_input", { f, dy }, { input_sizes = { 2, 8, 8, 8 }, strides = 1,
    padding = "SAME" }, "dx")
  return g, dy, dx, { [dy] = npu.random.normal({ 2, 8, 8, 16 }, { seed = 22 }) }
end

local function record_of(path, node)
  for _, r in ipairs(records(path)) do
    if r.node == node then return r end
  end
end

local function step_of(e, node)
  for _, s in ipairs(e.steps) do
    if s.node == node then return s end
  end
end

function TestTuning:test_input_gradient_candidates_winograd_under_high_performance_or_O1()
  local dir = self.dir
  local g, dy, dx, feeds = input_grad_build()
  local ref = npu.Session { graph = g, options = { use_off_line = false, export_compile_stat = 0 } }
  local want = ref:run(dx, feeds)
  ref:close()
  local function tuned(wd, extra)
    local opts = { export_compile_stat = 0, aoe_mode = "2", work_path = wd, op_compiler_cache_mode = "disable" }
    for k, v in pairs(extra or {}) do opts[k] = v end
    local sess = npu.Session { graph = g, options = opts }
    local e = sess:explain(dx, feeds)
    local got = sess:run(dx, feeds)
    sess:close()
    return e, record_of(wd .. "/" .. AOE_FILE, "dx"), got
  end
  local function algos(rec)
    local set = {}
    for _, c in ipairs(rec and rec.candidates or {}) do set[c.algo] = true end
    return set
  end
  -- high_precision: no Winograd among the candidates (only the threads, where there are two)
  local _, rec0 = tuned(dir, { op_select_implmode = "high_precision" })
  lu.assertNil(algos(rec0).winograd_2x3)
  -- the default mode is high_performance: Winograd among them
  local ddir = dir .. "/default"
  os.execute("mkdir -p " .. S.sh_quote(ddir))
  local _, recd = tuned(ddir)
  lu.assertTrue(algos(recd).winograd_2x3, "the default mode times Winograd")
  lu.assertEquals(recd.impl, "high_performance")
  -- records are keyed by the step's mode: a default session applies the default's record and
  -- not high_precision's (nor the other way round)
  local function applied(wd, extra)
    local opts = { export_compile_stat = 0, work_path = wd, op_compiler_cache_mode = "disable" }
    for k, v in pairs(extra or {}) do opts[k] = v end
    local sess <close> = npu.Session { graph = g, options = opts }
    return step_of(sess:explain(dx, feeds), "dx").tuned
  end
  lu.assertEquals(applied(ddir), "record")
  if rec0 then -- high_precision's record (threads only: none where one thread is all there is)
    lu.assertEquals(applied(dir, { op_select_implmode = "high_precision" }), "record")
  end
  lu.assertNotEquals(applied(dir), "record")
  lu.assertNotEquals(applied(ddir, { op_select_implmode = "high_precision" }), "record")
  -- high_performance: the op's own kernel and Winograd timed, the winner applied
  local hdir = dir .. "/hp"
  os.execute("mkdir -p " .. S.sh_quote(hdir))
  local e, rec, got = tuned(hdir, { op_select_implmode = "high_performance" })
  lu.assertNotNil(rec, "a record for the input gradient")
  lu.assertEquals(rec.op, "conv2d_backprop_input")
  local set = algos(rec)
  lu.assertTrue(set.winograd_2x3 and set.default, "Winograd and the default kernel timed")
  lu.assertEquals(rec.impl, "high_performance")
  local s = step_of(e, "dx")
  lu.assertEquals(s.tuned, "timed")
  lu.assertEquals(s.algo, rec.algo == "winograd_2x3" and "winograd_2x3" or nil)
  local d, peak = max_diff(got, want)
  lu.assertTrue(d <= 1e-4 * peak, ("tuned input gradient vs reference: %g of %g"):format(d, peak))
  -- a later session applies the record without timing: the same choice, the same bits
  local again = npu.Session { graph = g, options = { export_compile_stat = 0, aoe_mode = "2",
    work_path = hdir, op_compiler_cache_mode = "disable", op_select_implmode = "high_performance" } }
  local e2 = again:explain(dx, feeds)
  lu.assertEquals(e2.tuning.timed, 0)
  lu.assertEquals(step_of(e2, "dx").tuned, "record")
  lu.assertEquals(step_of(e2, "dx").algo, s.algo)
  lu.assertTrue(npu.allclose(again:run(dx, feeds), got, 0, 0), "the record's kernel, the same bits")
  again:close()
  -- O1 widens the candidates to Winograd without high_performance (high_precision set)
  local wdir, cfg = dir .. "/wide", dir .. "/aoe.json"
  os.execute("mkdir -p " .. S.sh_quote(wdir))
  S.write(cfg, '{"tune_optimization_level": "O1", "tune_ops_type": ["Conv2DBackpropInput"]}')
  local _, recw, gotw = tuned(wdir, { aoe_config_file = cfg, op_select_implmode = "high_precision" })
  lu.assertTrue(algos(recw).winograd_2x3, "O1: Winograd among the candidates")
  lu.assertTrue(recw.widened)
  d, peak = max_diff(gotw, want)
  lu.assertTrue(d <= 1e-4 * peak, ("widened input gradient vs reference: %g of %g"):format(d, peak))
end

-- A constant filter's Winograd candidate is timed as the plan runs it: U computed once
-- beforehand (plan.c prepares it for the chosen algorithm), not the per-call transform.
-- 1x14x14, 64 -> 64 (49 tiles; docs/compiler.md's constant-filter table): per call Winograd
-- loses to the direct kernel by ~2x, with U once it wins by ~1.4x, so the constant filter
-- is recorded as Winograd (under high_performance and under O1) and its fed twin is not —
-- margins far above this machine's noise.  A later session applies the record: Winograd
-- with U prepared, the tuned session's bits.
local function uconv_graph(constant)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, 14, 14, 64 }, "x")
  local w = npu.random.normal({ 3, 3, 64, 64 }, { seed = 31, stddev = 0.1 })
  local f = constant and g:const(w, "w") or g:placeholder("float32", { 3, 3, 64, 64 }, "f")
  local y = npu.nn.conv2d(x, f, { strides = 1, padding = "SAME", name = "uconv" })
  local feeds = { [x] = npu.random.normal({ 1, 14, 14, 64 }, { seed = 32 }) }
  if not constant then feeds[f] = w end
  return g, y, feeds
end

function TestTuning:test_constant_filter_winograd_timed_with_u_prepared()
  -- Which candidate wins is the machine's business (under the sanitizers the instrumented
  -- kernels reorder them: direct 2 ms, im2col 0.18 ms), so what is asserted is the change:
  -- Winograd on a constant filter is timed with U prepared once, far below the per-call
  -- transform the fed twin pays (80 against 270 us here: the transform is most of a call at
  -- 1x14x14, 64 -> 64), and a later session applies whatever was recorded, U prepared exactly
  -- when that is Winograd, with the tuned session's bits.  Without the sanitizers the record is
  -- Winograd for the constant filter (a margin of ~1.5x over direct on this machine).
  local sanitized = (os.getenv("LD_PRELOAD") or ""):find("asan") ~= nil
  for _, mode in ipairs({ "high_performance", "O1" }) do
    local wino = {}
    for _, constant in ipairs({ true, false }) do
      local what = mode .. (constant and ", constant filter" or ", fed filter")
      local wd = ("%s/%s_%s"):format(self.dir, mode, constant and "const" or "fed")
      os.execute("mkdir -p " .. S.sh_quote(wd))
      local g, y, feeds = uconv_graph(constant)
      local opts = { export_compile_stat = 0, aoe_mode = "2", work_path = wd,
        op_compiler_cache_mode = "disable" }
      if mode == "O1" then
        S.write(wd .. "/aoe.json", '{"tune_optimization_level": "O1"}')
        opts.aoe_config_file = wd .. "/aoe.json"
        opts.op_select_implmode = "high_precision" -- O1 without high_performance (the default)
      else
        opts.op_select_implmode = "high_performance"
      end
      local sess = npu.Session { graph = g, options = opts }
      local e = sess:explain(y, feeds)
      local got = sess:run(y, feeds)
      sess:close()
      local rec = record_of(wd .. "/" .. AOE_FILE, "uconv")
      lu.assertNotNil(rec, what .. ": a record")
      local times, seen = {}, {}
      for _, c in ipairs(rec.candidates) do
        local t = times[c.algo]
        if not t or c.median_us < t then times[c.algo] = c.median_us end
        seen[#seen + 1] = ("%s/%d %.1f"):format(c.algo, c.threads, c.median_us)
      end
      seen = table.concat(seen, ", ")
      lu.assertNotNil(times.winograd_2x3, what .. ": Winograd timed")
      lu.assertNotNil(times.direct, what .. ": the direct kernel timed")
      wino[constant] = times.winograd_2x3
      local s = step_of(e, "uconv")
      if constant and not sanitized then
        lu.assertEquals(rec.algo, "winograd_2x3", what .. ": " .. seen)
      end
      local is_wino = rec.algo == "winograd_2x3"
      lu.assertEquals(s.prepared, (constant and is_wino) and "winograd_filter" or nil,
        what .. ": U prepared for a constant filter's Winograd only (" .. seen .. ")")
      -- a later session (no aoe_mode) applies the record: the same algorithm, U prepared as
      -- above, the same bits
      local later = npu.Session { graph = g, options = { export_compile_stat = 0, work_path = wd,
        op_compiler_cache_mode = "disable",
        op_select_implmode = mode == "O1" and "high_precision" or "high_performance" } }
      local e2 = later:explain(y, feeds)
      local s2 = step_of(e2, "uconv")
      lu.assertEquals(e2.tuning.timed, 0, what)
      lu.assertEquals(s2.tuned, "record", what)
      lu.assertEquals(s2.algo, s.algo, what)
      lu.assertEquals(s2.prepared, s.prepared, what)
      lu.assertTrue(npu.allclose(later:run(y, feeds), got, 0, 0), what .. ": the same bits")
      later:close()
    end
    lu.assertTrue(wino[true] < 0.6 * wino[false], mode .. ": Winograd with U prepared " ..
      wino[true] .. " us, with the per-call transform " .. wino[false] .. " us")
  end
end
