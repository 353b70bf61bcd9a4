-- implmode.lua — high_precision versus high_performance implementations (op_select_implmode):
-- each op on 1024 x 1024 float32 elements (rows of 1024 for softmax / log_softmax), with one
-- device thread and with all of them, the median time of a sess:run under each mode, their
-- ratio (> 1: high_performance is faster), and each mode's largest error against the same
-- graph computed in float64 (in float32 ulps of the exact value).
-- Then convolutions in a while loop under each mode (below).
--   lua5.4 bench/implmode.lua [REPS [conv]]   (median of REPS runs after 2 warm-up runs;
--                                             default 15; "conv": the loop's table only)
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local core = npu.core

local REPS = tonumber(arg and arg[1]) or 15
local ONLY_CONV = arg and arg[2] == "conv"
local ROWS, COLS = 1024, 1024
local clock = core.monotonic_time

local OPS = {
  { "exp", function(x) return npu.exp(x) end, -10, 10 },
  { "log", function(x) return npu.log(x) end, 1e-3, 100 },
  { "tanh", function(x) return npu.tanh(x) end, -10, 10 },
  { "sigmoid", function(x) return npu.sigmoid(x) end, -10, 10 },
  { "gelu", function(x) return npu.gelu(x) end, -10, 10 },
  { "gelu (tanh)", function(x) return npu.gelu(x, true) end, -3, 3 },
  { "softmax", function(x) return npu.nn.softmax(x) end, -10, 10 },
  { "log_softmax", function(x) return npu.nn.log_softmax(x) end, -10, 10 },
}

local median = dofile(here .. "/bench/util.lua").median

local function session(fn, dtype, options)
  local g = npu.Graph()
  local x = g:placeholder(dtype, { ROWS, COLS }, "x")
  return npu.Session { graph = g, options = options }, x, fn(x)
end

-- The result of the previous run is collected first, so the plan writes into the tensor it
-- keeps (a result still held elsewhere would make it allocate and fault in a new one).
local function time_ms(sess, y, feeds)
  for _ = 1, 2 do sess:run(y, feeds) end
  local times = {}
  for r = 1, REPS do
    collectgarbage()
    local t0 = clock()
    sess:run(y, feeds)
    times[r] = (clock() - t0) * 1e3
  end
  return median(times)
end

-- The float32 ulp at v (the spacing of float32 numbers around the exact value).
local function ulp(v)
  v = math.abs(v)
  if v < 2 ^ -126 then return 2 ^ -149 end
  local e = math.floor(math.log(v, 2))
  if 2 ^ e > v then e = e - 1 elseif 2 ^ (e + 1) <= v then e = e + 1 end
  return 2 ^ (e - 23)
end

local function max_ulps(got, exact)
  local worst = 0
  for r = 1, ROWS do
    local gr, er = got[r], exact[r]
    for c = 1, COLS do
      local e = er[c]
      if e == e and e ~= math.huge and e ~= -math.huge then
        local d = math.abs(gr[c] - e) / ulp(e)
        if d > worst then worst = d end
      end
    end
  end
  return worst
end

local all = core.n_threads()
-- both set explicitly: unset is high_performance (op_select_implmode's default)
local modes = { { "high_precision", { op_select_implmode = "high_precision" } },
  { "high_performance", { op_select_implmode = "high_performance" } } }
if not ONLY_CONV then
print(("implementation modes: %d x %d float32, median of %d runs; device pool %d thread(s)"):format(
  ROWS, COLS, REPS, all))
print(("%-12s %7s %12s %12s %8s %12s %12s"):format("op", "threads", "precise ms", "fast ms",
  "speedup", "precise err", "fast err"))
end
for _, op in ipairs(ONLY_CONV and {} or OPS) do
  local name, fn, lo, hi = op[1], op[2], op[3], op[4]
  local X = npu.random.uniform({ ROWS, COLS }, { minval = lo, maxval = hi, seed = 11 })
  local s64, x64, y64 = session(fn, "float64", { use_off_line = false })
  local exact = s64:run(y64, { [x64] = X:astype("float64") }):totable()
  local err, sessions = {}, {}
  for m, mode in ipairs(modes) do
    local options = { precision_mode = "must_keep_origin_dtype" }
    for k, v in pairs(mode[2]) do options[k] = v end
    local sess, x, y = session(fn, "float32", options)
    sessions[m] = { sess, y, { [x] = X } }
    err[m] = max_ulps(sess:run(y, { [x] = X }):totable(), exact)
  end
  for _, n in ipairs(all > 1 and { 1, all } or { 1 }) do
    core.set_n_threads(n)
    local t = {}
    for m = 1, 2 do t[m] = time_ms(table.unpack(sessions[m])) end
    print(("%-12s %7d %12.3f %12.3f %7.2fx %10.2f ulp %8.2f ulp"):format(name, n, t[1], t[2],
      t[1] / t[2], err[1], err[2]))
  end
  core.set_n_threads(all)
end

-- Convolutions in a while loop's body (compile/implmode.c walks nested steps): 6 iterations of
-- conv 3x3 SAME, C -> C channels, under each mode, against the same 6 convolutions written out
-- at the top level (plain convolutions, so fusion makes no difference there); high_performance
-- runs Winograd F(2x2, 3x3) in both.  Ratio high_precision / high_performance (> 1: faster), and
-- loop / top level (near 1: the loop's steps get the top level's choices).  Each on all device
-- threads and on one; the four sessions run in turn, medians.
local function conv_graph(shape, looped)
  local c = shape[4]
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder("float32", shape, "x")
  local f = g:const(npu.random.normal({ 3, 3, c, c }, { seed = 1, stddev = 1 / (3 * math.sqrt(c)) }))
  local function layer(v) return npu.nn.conv2d(v, f, { strides = { 1, 1, 1, 1 }, padding = "SAME" }) end
  local y = x
  if looped then
    y = npu.while_loop(function(i) return npu.less(i, 6) end, function(i, v) return i + 1, layer(v) end, { 0, x })[2]
  else
    for _ = 1, 6 do y = layer(y) end
  end
  return g, x, y
end

print()
print(("convolutions in a loop: 6 x conv 3x3, median of %d runs"):format(REPS))
print(("%-22s %7s %12s %12s %8s %12s %12s"):format("shape", "threads", "precise ms", "fast ms",
  "speedup", "loop/top prec", "loop/top fast"))
for _, shape in ipairs({ { 8, 14, 14, 32 }, { 4, 28, 28, 64 } }) do
  local X = npu.random.uniform(shape, { seed = 9 })
  local runs = {} -- [looped][mode] = { sess, y, feeds }
  for _, looped in ipairs({ true, false }) do
    runs[looped] = {}
    for m, mode in ipairs(modes) do
      local options = { precision_mode = "must_keep_origin_dtype", export_compile_stat = 0 }
      for k, v in pairs(mode[2]) do options[k] = v end
      local g, x, y = conv_graph(shape, looped)
      runs[looped][m] = { npu.Session { graph = g, options = options }, y, { [x] = X } }
    end
  end
  local list = { runs[true][1], runs[true][2], runs[false][1], runs[false][2] }
  for _, n in ipairs(all > 1 and { all, 1 } or { 1 }) do
    core.set_n_threads(n)
    -- the four in turn each round, so a burst of load from elsewhere hits them alike
    local times = { {}, {}, {}, {} }
    for _ = 1, 2 do for _, r in ipairs(list) do r[1]:run(r[2], r[3]) end end
    for rep = 1, REPS do
      for i, r in ipairs(list) do
        collectgarbage()
        local t0 = clock()
        r[1]:run(r[2], r[3])
        times[i][rep] = (clock() - t0) * 1e3
      end
    end
    local t = { [true] = { median(times[1]), median(times[2]) }, [false] = { median(times[3]), median(times[4]) } }
    print(("%-22s %7d %12.3f %12.3f %7.2fx %11.2fx %11.2fx"):format(table.concat(shape, "x"), n,
      t[true][1], t[true][2], t[true][1] / t[true][2], t[true][1] / t[false][1], t[true][2] / t[false][2]))
  end
  core.set_n_threads(all)
end
