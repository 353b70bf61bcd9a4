-- tuning.lua — what AOE tuning (aoe_mode, compile/tuning.c) buys: per graph, a session of the
-- default options ("untuned") against a new session that only reads the records two tuning
-- sessions wrote ("tuned": aoe_mode 1 then aoe_mode 2 in a work_path, then a plain session with
-- that work_path, so it times nothing), and the same with aoe_config_file's
-- tune_optimization_level O1 ("tuned O1": Winograd among conv2d's candidates).  Runs of the
-- sessions interleaved in one process; medians; ratio untuned / tuned (> 1: tuning is faster);
-- the tuning's own cost (the tuning sessions' first compile) and the largest difference of the
-- outputs from the untuned ones, relative to their peak.  float32, the operator cache off.
-- A loop of convolutions (a while loop's body) is tuned like the top level: its row shows what
-- the records of its nested steps buy.
--   lua5.4 bench/tuning.lua [REPS [PATTERN [THREADS]]]
--     median of REPS runs after 5 warm-up runs (default 41); only the graphs whose name matches
--     the Lua pattern PATTERN ("." for all); THREADS device threads (default: the context's)
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local model = require("npu.model")
local core = npu.core

local DIR = os.getenv("NPU_MODELS_DIR") or here .. "/../shared/models"
local REPS = tonumber(arg and arg[1]) or 41
local PATTERN = arg and arg[2]
if arg and tonumber(arg[3]) then core.set_n_threads(tonumber(arg[3])) end
local clock = core.monotonic_time

local util = dofile(here .. "/bench/util.lua")
local median = util.median

local function tmpdir()
  local p = io.popen("mktemp -d")
  local d = p:read("l")
  p:close()
  return d
end

local BASE = { precision_mode = "must_keep_origin_dtype", export_compile_stat = 0,
  op_compiler_cache_mode = "disable" }
local function opts(extra)
  local o = {}
  for k, v in pairs(BASE) do o[k] = v end
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

local function first(t) return type(t) == "table" and t[1] or t end

local function max_rel(a, b)
  local x, y = first(a), first(b)
  x, y = x:reshape({ x:numel() }):totable(), y:reshape({ y:numel() }):totable()
  local d, peak = 0, 0
  for i = 1, #x do
    d = math.max(d, math.abs(x[i] - y[i]))
    peak = math.max(peak, math.abs(y[i]))
  end
  return peak > 0 and d / peak or d
end

-- Tunes g in a fresh work_path (aoe_mode 1, then 2), returns the reading session, the time
-- the two tuning compiles took (ms) and what the reader's plan says.
local function tuned_session(g, fetch, feeds, cfg_text)
  local dir = tmpdir()
  local cfg
  if cfg_text then
    cfg = dir .. "/aoe.json"
    local f = assert(io.open(cfg, "w"))
    f:write(cfg_text)
    f:close()
  end
  local t0 = clock()
  for _, mode in ipairs({ "1", "2" }) do
    local s <close> = npu.Session { graph = g, options = opts { aoe_mode = mode, work_path = dir,
      aoe_config_file = mode == "2" and cfg or nil } }
    s:explain(fetch, feeds)
  end
  local cost = (clock() - t0) * 1e3
  local reader = npu.Session { graph = g, options = opts { work_path = dir } }
  local e = reader:explain(fetch, feeds)
  return reader, cost, e, dir
end

-- The steps of explained plan e, at any depth (a loop's or branch's steps too), by node.
local function by_node(e)
  local out = {}
  local function walk(steps)
    for _, s in ipairs(steps) do
      out[s.node] = s
      for _, b in ipairs(s.blocks or {}) do walk(b.steps) end
    end
  end
  walk(e.steps)
  return out
end

-- Steps of tuned plan e whose algorithm or threads a record changed from the untuned plan's.
local function n_changed(e, untuned)
  local before, n = by_node(untuned), 0
  for node, s in pairs(by_node(e)) do
    local b = before[node]
    if s.tuned and (not b or b.algo ~= s.algo or b.threads ~= s.threads) then n = n + 1 end
  end
  return n
end

local rows = {}
local function report(name, g, fetch, feeds)
  if PATTERN and not name:match(PATTERN) then return end
  local plain <close> = npu.Session { graph = g, options = opts() }
  local want = plain:run(fetch, feeds)
  local e0 = plain:explain(fetch, feeds)
  local tuned, cost, e, d1 = tuned_session(g, fetch, feeds)
  local wide, cost_w, ew, d2 = tuned_session(g, fetch, feeds, '{"tune_optimization_level": "O1"}')
  local changed, changed_w = n_changed(e, e0), n_changed(ew, e0)
  local sess = { plain, tuned, wide }
  for _ = 1, 5 do for _, s in ipairs(sess) do s:run(fetch, feeds) end end
  local t = { {}, {}, {} }
  for r = 1, REPS do
    for i, s in ipairs(sess) do
      local t0 = clock()
      s:run(fetch, feeds)
      t[i][r] = (clock() - t0) * 1e3
    end
  end
  local m = { median(t[1]), median(t[2]), median(t[3]) }
  local err, err_w = max_rel(tuned:run(fetch, feeds), want), max_rel(wide:run(fetch, feeds), want)
  assert(e.tuning.timed == 0 and ew.tuning.timed == 0, "the reading sessions time nothing")
  rows[#rows + 1] = ("%-30s %8.3f %8.3f %6.2fx %8.3f %6.2fx %4d %4d %-28s %8.0f %8.0f %8.1e %8.1e"):format(
    name, m[1], m[2], m[1] / m[2], m[3], m[1] / m[3], changed, changed_w,
    #e.tuning.fusion_off > 0 and table.concat(e.tuning.fusion_off, ",") or "-", cost, cost_w,
    err, err_w)
  tuned:close()
  wide:close()
  os.execute("rm -rf '" .. d1 .. "' '" .. d2 .. "'")
end

-- The CNN of bench/bench_cnn.c at batch 32, NHWC float32: 28x28x1 -> conv 3x3x32 SAME + bias +
-- relu -> max_pool 2 -> conv 3x3x64 SAME + bias + relu -> max_pool 2 -> dense 10 (forward)
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 32, 28, 28, 1 }, "x")
  local function c(shape, seed, sd) return g:const(npu.random.normal(shape, { seed = seed, stddev = sd })) end
  local function layer(h, w, b)
    local y = npu.nn.relu(npu.nn.bias_add(npu.nn.conv2d(h, w, { strides = { 1, 1, 1, 1 }, padding = "SAME" }), b))
    return npu.nn.max_pool(y, { ksize = 2, strides = 2, padding = "VALID" })
  end
  local h = layer(layer(x, c({ 3, 3, 1, 32 }, 1, 0.3), c({ 32 }, 2, 0.1)), c({ 3, 3, 32, 64 }, 3, 0.06), c({ 64 }, 4, 0.1))
  local y = npu.nn.bias_add(npu.reshape(h, { 32, 7 * 7 * 64 }):matmul(c({ 7 * 7 * 64, 10 }, 5, 0.02)), c({ 10 }, 6, 0.1))
  report("cnn b32 (bench_cnn)", g, y, { [x] = npu.random.uniform({ 32, 28, 28, 1 }, { seed = 9 }) })
end

-- A loop of convolutions: 6 iterations of conv 3x3 SAME + bias + relu (C -> C channels) in a
-- while loop's body (nested steps: fused block by block, tuned by their own records)
for _, shape in ipairs({ { 8, 14, 14, 32 }, { 4, 28, 28, 64 } }) do
  local c = shape[4]
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder("float32", shape, "x")
  local f = g:const(npu.random.normal({ 3, 3, c, c }, { seed = 1, stddev = 1 / (3 * math.sqrt(c)) }))
  local b = g:const(npu.random.normal({ c }, { seed = 2, stddev = 0.1 }))
  local r = npu.while_loop(function(i) return npu.less(i, 6) end, function(i, v)
    return i + 1, npu.nn.relu(npu.nn.bias_add(npu.nn.conv2d(v, f, { strides = { 1, 1, 1, 1 }, padding = "SAME" }), b))
  end, { 0, x })
  report(("conv loop 6x (%s)"):format(table.concat(shape, "x")), g, r[2],
    { [x] = npu.random.uniform(shape, { seed = 9 }) })
end

-- MLP 784-256-256-10 at batch 1 (GEMV territory) and 64
for _, batch in ipairs({ 1, 64 }) do
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, 784 }, "x")
  local h, width = x, 784
  for i, n in ipairs({ 256, 256, 10 }) do
    h = npu.nn.bias_add(h:matmul(g:const(npu.random.normal({ width, n }, { stddev = 0.05, seed = i }))),
      g:const(npu.random.normal({ n }, { stddev = 0.1, seed = 10 + i })))
    if i < 3 then h = npu.nn.relu(h) end
    width = n
  end
  report("mlp 784-256-256-10 b" .. batch, g, npu.nn.softmax(h), { [x] = npu.random.normal({ batch, 784 }, { seed = 7 }) })
end

-- the shared models (batch 1)
for _, name in ipairs(util.model_names(DIR)) do
  local g, info = model.load_model(DIR .. "/" .. name .. "/" .. name .. ".json")
  local feeds = {}
  for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(DIR, name, i - 1)) end
  report("model " .. name, g, info.output_names, feeds)
end

print(("AOE tuned vs untuned, float32, median of %d interleaved runs, %d device thread(s)"):format(REPS, core.n_threads()))
print(("%-30s %8s %8s %7s %8s %7s %4s %4s %-28s %8s %8s %8s %8s"):format("graph", "untuned", "tuned", "ratio",
  "tunedO1", "ratio", "chg", "chgW", "fusion off (aoe_mode 1)", "tune ms", "tuneO1", "err", "errO1"))
for _, r in ipairs(rows) do print(r) end
