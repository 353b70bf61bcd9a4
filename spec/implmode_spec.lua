-- implmode_spec.lua — operator implementation modes (compile/implmode.c): op_select_implmode,
-- optypelist_for_implmode and op_precision_mode choose between the high_precision (libm) and
-- high_performance (vectorised float32, kernels/kfast.h) kernels of exp, log, tanh, sigmoid,
-- softmax, log_softmax and gelu.  The oracles: the use_off_line=false reference path (bitwise,
-- for what must not change) and the same graph in float64 (for the stated errors); gelu itself
-- against erf computed here.  Steps nested in while loops and cond branches (and in imported
-- While/If) get the choices their top-level twins get: Winograd's bound checked against float64
-- sums computed here.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")
local flatten = S.flatten

local ROWS, COLS = 16, 50
local DUAL = { "exp", "log", "tanh", "sigmoid", "softmax", "log_softmax", "gelu", "gelu_tanh" }
local SINGLE = { "relu", "sqrt", "square", "matmul", "tanh2" }

-- inputs: x uniform in [-6, 6), p in [0.5, 8) (log, sqrt), one value per element
local function inputs(dtype)
  local r = S.lcg(42)
  local xs, ps = {}, {}
  for i = 1, ROWS * COLS do
    xs[i] = (r() % 49152) / 4096 - 6
    ps[i] = 0.5 + (r() % 30720) / 4096
  end
  return npu.tensor(xs, dtype):reshape({ ROWS, COLS }), npu.tensor(ps, dtype):reshape({ ROWS, COLS })
end

-- Every op of the spec on placeholders x and p; node names are the keys (tanh2: a second tanh).
local function graph(dtype)
  local g = npu.Graph()
  local x = g:placeholder(dtype, { ROWS, COLS }, "x")
  local p = g:placeholder(dtype, { ROWS, COLS }, "p")
  local w = g:const(npu.ones({ COLS, 3 }):astype(dtype))
  local quarter = x * g:const(npu.tensor({ 0.25 }, dtype)) -- [-1.5, 1.5): the tanh form's best range
  local ys = {
    exp = npu.exp(x, { name = "exp" }),
    log = npu.log(p, { name = "log" }),
    tanh = npu.tanh(x, { name = "tanh" }),
    tanh2 = npu.tanh(p, { name = "tanh2" }),
    sigmoid = npu.sigmoid(x, { name = "sigmoid" }),
    softmax = npu.nn.softmax(x, { name = "softmax" }),
    log_softmax = npu.nn.log_softmax(x, { name = "log_softmax" }),
    gelu = npu.gelu(x, { name = "gelu" }),
    gelu_tanh = npu.gelu(quarter, { approximate = true, name = "gelu_tanh" }),
    relu = npu.nn.relu(x, { name = "relu" }),
    sqrt = npu.sqrt(p, { name = "sqrt" }),
    square = npu.square(x, { name = "square" }),
    matmul = npu.matmul(x, w, { name = "matmul" }),
  }
  return g, x, p, ys
end

local X32, P32 = inputs("float32")

-- name -> flat table of the results under these options (float32 unless dtype says)
local function run(options, dtype)
  dtype = dtype or "float32"
  local g, x, p, ys = graph(dtype)
  options = options or {}
  options.precision_mode = options.precision_mode or "must_keep_origin_dtype"
  if options.use_off_line == false then options.precision_mode = nil end
  local sess = npu.Session { graph = g, options = options }
  local names, fetches = {}, {}
  for name, y in pairs(ys) do
    names[#names + 1] = name
    fetches[#fetches + 1] = y
  end
  local X, P = X32, P32
  if dtype == "float64" then X, P = X32:astype("float64"), P32:astype("float64") end
  local got = sess:run(fetches, { [x] = X, [p] = P })
  local out = {}
  for i, name in ipairs(names) do out[name] = flatten(got[i]:totable()) end
  return out
end

local REF = run({ use_off_line = false })
local EXACT = run({ use_off_line = false }, "float64")

local function same(a, b)
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return #a == #b
end

local function write(text)
  local path = os.tmpname()
  S.write(path, text)
  return path
end

-- The ops whose results differ from the reference path, as a sorted list.
local function changed(got)
  local list = {}
  for name, ref in pairs(REF) do
    if not same(got[name], ref) then list[#list + 1] = name end
  end
  table.sort(list)
  return list
end

-- The ops (node names) that have a high_performance kernel, sorted.
local FAST = { "exp", "gelu", "gelu_tanh", "log", "log_softmax", "sigmoid", "softmax", "tanh", "tanh2" }

-- FAST without the names given.
local function fast_but(...)
  local drop, list = {}, {}
  for _, name in ipairs({ ... }) do drop[name] = true end
  for _, name in ipairs(FAST) do
    if not drop[name] then list[#list + 1] = name end
  end
  return list
end

TestImplMode = {}

-- 000: op_select_implmode's default is high_performance; high_precision, set explicitly, is
-- the libm kernels, bitwise the reference path's.
function TestImplMode:test_default_is_high_performance_and_high_precision_is_the_reference_path()
  local default, fast = run({}), run({ op_select_implmode = "high_performance" })
  lu.assertEquals(changed(default), FAST)
  for name, ys in pairs(fast) do lu.assertTrue(same(default[name], ys), name) end
  lu.assertEquals(changed(run({ op_select_implmode = "high_precision" })), {})
end

function TestImplMode:test_high_performance_changes_exactly_the_ops_with_two_implementations()
  local got = run({ op_select_implmode = "high_performance" })
  lu.assertEquals(changed(got), FAST)
end

-- The errors kfast.h states, against float64: k ulp <= k 2^-23 |exact|.  softmax and
-- log_softmax also carry the rounding of x - max in float32 (up to 12 * 2^-24 here), which the
-- high_precision kernels carry as well.
local BOUND = { exp = 1, log = 1.5, tanh = 1.5, tanh2 = 1.5, sigmoid = 2.5, gelu = 8,
  gelu_tanh = 8, softmax = 12 }

function TestImplMode:test_high_performance_is_within_the_stated_error()
  local got = run({}) -- the default mode, high_performance
  for name, k in pairs(BOUND) do
    local worst = 0
    for i, exact in ipairs(EXACT[name]) do
      local err = math.abs(got[name][i] - exact) / math.max(math.abs(exact), 1e-30)
      worst = math.max(worst, err / 2 ^ -23)
    end
    lu.assertTrue(worst <= k, ("%s: %.2f ulp, stated %g"):format(name, worst, k))
    lu.assertTrue(worst > 0, name) -- float32 is not float64
  end
  for i, exact in ipairs(EXACT.log_softmax) do
    local err = math.abs(got.log_softmax[i] - exact)
    lu.assertTrue(err <= 1e-6 * math.max(1, math.abs(exact)), "log_softmax " .. i)
  end
end

-- 000: the listed types "use the mode specified by the op_select_implmode parameter"; the
-- others keep the default, high_performance.  So the list matters with high_precision.
function TestImplMode:test_optypelist_limits_the_mode_to_the_listed_types()
  local function with(list)
    return changed(run({ op_select_implmode = "high_precision", optypelist_for_implmode = list }))
  end
  lu.assertEquals(with("Exp"), fast_but("exp"))
  lu.assertEquals(with("SoftmaxV2"), fast_but("softmax"))
  lu.assertEquals(with("LogSoftmaxV2,sigmoid"), fast_but("log_softmax", "sigmoid"))
  lu.assertEquals(with("Tanh,Gelu"), fast_but("gelu", "gelu_tanh", "tanh", "tanh2"))
  -- 000's other names: pools have one implementation, LRN and ROIAlign no op here
  lu.assertEquals(with("Pooling,LRN,ROIAlign,MatMul"), FAST)
  -- high_performance for the listed types is what the others get anyway
  lu.assertEquals(changed(run({ op_select_implmode = "high_performance",
    optypelist_for_implmode = "Exp" })), FAST)
end

-- The list still needs op_select_implmode set explicitly (options.c's REQUIRES rule): its
-- default, high_performance, is what the unlisted types get, so a list without a mode is a
-- mistake, not a request for the default.
function TestImplMode:test_optypelist_needs_op_select_implmode_set()
  local g = graph("float32")
  local ok, err = pcall(npu.Session, { graph = g, options = { optypelist_for_implmode = "Exp" } })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "NPU_ERR_CONFLICT")
  lu.assertStrContains(tostring(err), "requires 'op_select_implmode' to be set")
  -- set to its default value, it is set
  local sess = npu.Session { graph = g, options = { op_select_implmode = "high_performance",
    optypelist_for_implmode = "Exp" } }
  lu.assertNotNil(sess)
end

function TestImplMode:test_unknown_type_in_optypelist_names_the_nearest()
  local g, x = graph("float32")
  local ok, err = pcall(npu.Session, { graph = g, options = { op_select_implmode = "high_performance",
    optypelist_for_implmode = "Exp,SoftmaxV3" } })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "optypelist_for_implmode: unknown operator type 'SoftmaxV3' (did you mean 'SoftmaxV2'?)")
  lu.assertNotNil(x)
end

function TestImplMode:test_op_precision_mode_by_node_name_beats_by_type()
  local path = write(table.concat({
    "; per type, then per node",
    "[ByOpType]",
    "Tanh=high_performance",
    "gelu = super_performance",
    "SoftmaxV2=keep_fp16",
    "[ByNodeName]",
    "tanh2=high_precision",
    "exp=high_performance",
    "no_such_node=high_performance",
    "",
  }, "\n"))
  local got = run({ op_precision_mode = path })
  os.remove(path)
  -- tanh2 (its node) and softmax (keep_fp16) precise; log, sigmoid and log_softmax, which the
  -- file does not name, take the default, high_performance
  lu.assertEquals(changed(got), fast_but("softmax", "tanh2"))
end

function TestImplMode:test_op_precision_mode_wins_over_op_select_implmode()
  -- were op_select_implmode read, every op would run high_precision; the file makes sigmoid
  -- precise and leaves the others to the default
  local path = write("[ByOpType]\nSigmoid=high_precision\n")
  local got = run({ op_precision_mode = path, op_select_implmode = "high_precision" })
  lu.assertEquals(changed(got), fast_but("sigmoid"))
  got = run({ op_precision_mode = path, op_select_implmode = "high_precision",
    optypelist_for_implmode = "Exp" })
  os.remove(path)
  lu.assertEquals(changed(got), fast_but("sigmoid"))
end

function TestImplMode:test_super_performance_is_high_performance_and_the_other_modes_choose_nothing()
  local fast = run({ op_select_implmode = "high_performance" })
  local path = write("[ByOpType]\nExp=super_performance\nTanh=enable_float_32_execution\n" ..
    "Sigmoid=enable_hi_float_32_execution\nSoftmax=support_out_of_bound_index\n")
  local got = run({ op_precision_mode = path })
  os.remove(path)
  lu.assertTrue(same(got.exp, fast.exp))
  -- the four modes that choose nothing here run high_precision (tanh, tanh2: type Tanh;
  -- sigmoid; softmax); the ops the file does not name run the default, high_performance
  lu.assertEquals(changed(got), fast_but("sigmoid", "softmax", "tanh", "tanh2"))
end

function TestImplMode:test_ini_errors_name_file_and_line()
  local cases = {
    { "[ByOpType]\nExp=high_performance\n[ByNodeNames]\n", "line 3: unknown section '[ByNodeNames]'" },
    { "[ByOpType]\nExp\n", "line 2: missing '='" },
    { "[ByNodeName]\nexp=fast\n", "line 2: unknown mode 'fast' for 'exp'" },
    { "[ByOpType]\nExq=high_performance\n", "line 2: unknown operator type 'Exq' (did you mean 'Exp'?)" },
    { "Exp=high_performance\n", "line 1: entry 'Exp' before any section" },
  }
  for _, c in ipairs(cases) do
    local path = write(c[1])
    local g = graph("float32")
    local ok, err = pcall(npu.Session, { graph = g, options = { op_precision_mode = path } })
    os.remove(path)
    lu.assertFalse(ok)
    lu.assertStrContains(tostring(err), "NPU_ERR_FORMAT")
    lu.assertStrContains(tostring(err), "op_precision_mode '" .. path .. "', " .. c[2])
  end
  local ok, err = pcall(npu.Session, { graph = graph("float32"),
    options = { op_precision_mode = "/no/such/dir/op_precision.ini" } })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "NPU_ERR_IO")
end

function TestImplMode:test_the_reference_path_ignores_the_modes()
  lu.assertEquals(changed(run({ use_off_line = false, op_select_implmode = "high_performance" })), {})
end

function TestImplMode:test_float64_has_one_implementation()
  local got = run({ op_select_implmode = "high_performance" }, "float64")
  for name, exact in pairs(EXACT) do lu.assertTrue(same(got[name], exact), name) end
end

function TestImplMode:test_same_bits_for_any_thread_count()
  local core = npu.core
  local n0 = core.n_threads()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 300, 1000 }, "x")
  local ys = { npu.exp(x), npu.tanh(x), npu.gelu(x), npu.nn.softmax(x), npu.nn.log_softmax(x) }
  local X = npu.random.uniform({ 300, 1000 }, { minval = -8, maxval = 8, seed = 7 })
  local sess = npu.Session { graph = g, options = { op_select_implmode = "high_performance" } }
  local results = {}
  for _, n in ipairs({ 1, 2, 3 }) do
    core.set_n_threads(n)
    results[#results + 1] = sess:run(ys, { [x] = X })
  end
  core.set_n_threads(n0)
  for k = 2, #results do
    for i = 1, #ys do lu.assertTrue(npu.allclose(results[k][i], results[1][i], 0, 0), k .. ":" .. i) end
  end
end

function TestImplMode:test_explain_shows_each_steps_implementation()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local y = npu.nn.softmax(npu.exp(x, { name = "e" }) + npu.tanh(x, { name = "t" }), { name = "s" })
  local sess = npu.Session { graph = g, options = { op_select_implmode = "high_precision",
    optypelist_for_implmode = "Tanh" } }
  local e = sess:explain(y, { [x] = npu.zeros({ 2, 3 }) })
  local impl, pass = {}, {}
  for _, s in ipairs(e.steps) do impl[s.node], pass[s.node] = s.impl, s.pass end
  -- tanh high_precision (listed); exp high_performance (the default) fuses with the add, the
  -- fused step running the fast exp (its impl says so)
  lu.assertEquals(impl, { e = "high_performance", t = "high_precision", s = "high_performance" })
  lu.assertEquals(pass, { e = "TbeEltwiseFusionPass" })
  lu.assertStrContains(tostring(e), "high_performance")
end

-- ---- gelu (op_gelu.c) -------------------------------------------------------------------

-- erf by its Taylor series (|x| <= 3: terms up to ~200 against a sum near 1: 1e-13 absolute)
local function erf(x)
  local sum, term, n = 0, x, 0
  repeat
    local add = term / (2 * n + 1)
    sum = sum + add
    n = n + 1
    term = -term * x * x / n
  until math.abs(add) < 1e-17 and n > 5
  return 2 / math.sqrt(math.pi) * sum
end

local function tanh(u)
  local e = math.exp(-2 * math.abs(u))
  local t = (1 - e) / (1 + e)
  return u < 0 and -t or t
end

TestGelu = {}

function TestGelu:test_values_against_the_definitions()
  local xs = { -3, -2.5, -1, -0.25, 0, 0.5, 1, 2.75, 3 }
  local g = npu.Graph()
  local x = g:placeholder("float64", { #xs }, "x")
  local sess = npu.Session { graph = g }
  local exact = flatten(sess:run(npu.gelu(x), { [x] = npu.tensor(xs, "float64") }):totable())
  local approx = flatten(sess:run(npu.nn.gelu(x, true), { [x] = npu.tensor(xs, "float64") }):totable())
  for i, v in ipairs(xs) do
    lu.assertAlmostEquals(exact[i], 0.5 * v * (1 + erf(v / math.sqrt(2))), 1e-12)
    local t = tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3))
    lu.assertAlmostEquals(approx[i], 0.5 * v * (1 + t), 1e-12)
  end
end

function TestGelu:test_shape_dtype_and_errors()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 4 }, "x")
  local y = npu.gelu(x, { approximate = true })
  lu.assertEquals(y:shape(), { -1, 4 })
  lu.assertEquals(y:dtype(), "float32")
  local i = g:placeholder("int32", { 2 }, "i")
  lu.assertErrorMsgContains("gelu", npu.gelu, i)
  lu.assertErrorMsgContains("approximate", npu.gelu, x, { approximate = "yes" })
end

function TestGelu:test_graphdef_round_trip_keeps_approximate()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local exact, approx = npu.gelu(x, { name = "ge" }), npu.gelu(x, { approximate = true, name = "ga" })
  local g2 = npu.import_graph_def(npu.export_graph_def(g))
  local X = npu.tensor({ { -1, 0, 1 }, { 2, -2, 0.5 } })
  local want = npu.Session { graph = g }:run({ exact, approx }, { [x] = X })
  local got = npu.Session { graph = g2 }:run({ "ge:0", "ga:0" }, { ["x:0"] = X })
  lu.assertTrue(npu.allclose(got[1], want[1], 0, 0))
  lu.assertTrue(npu.allclose(got[2], want[2], 0, 0))
  lu.assertFalse(npu.allclose(want[1], want[2], 0, 0))
end

-- ---- steps inside loops and branches (compile/implmode.c: select_block) ------------------
-- One graph holds a convolution, an exp and a tanh three times: at the top level, in a while
-- loop's body (each a loop variable's next value) and in a cond's then branch.  Whatever the
-- options, a nested step gets the choice its top-level twin gets, and the same bits.

local N, H, C = 1, 8, 8 -- 8 input and output channels: the least Winograd takes
local SHAPE = { N, H, H, C }

local function uniform(seed, n)
  local r, out = S.lcg(seed), {}
  for i = 1, n do out[i] = (r() % 65536) / 32768 - 1 end -- [-1, 1)
  return out
end

local XS, FS = uniform(11, N * H * H * C), uniform(12, 9 * C * C)

local function nested_graph()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder("float32", SHAPE, "x")
  local n = g:placeholder("int32", {}, "n")
  local p = g:placeholder("bool", {}, "p")
  local f = g:const(npu.tensor(FS, "float32"):reshape({ 3, 3, C, C }))
  local function ops(where, c, e, t)
    return npu.nn.conv2d(c, f, { strides = { 1, 1, 1, 1 }, padding = "SAME", name = where .. "_conv" }),
      npu.exp(e, { name = where .. "_exp" }), npu.tanh(t, { name = where .. "_tanh" })
  end
  local ys = {}
  ys.top_conv, ys.top_exp, ys.top_tanh = ops("top", x, x, x)
  local r = npu.while_loop(function(i) return npu.less(i, n) end,
    function(i, c, e, t) return i + 1, ops("loop", c, e, t) end, { 0, x, x, x })
  ys.loop_conv, ys.loop_exp, ys.loop_tanh = r[2], r[3], r[4]
  local b = npu.cond(p, function() return { ops("then", x, x, x) } end, function() return { x, x, x } end)
  ys.then_conv, ys.then_exp, ys.then_tanh = b[1], b[2], b[3]
  return g, x, n, p, ys
end

local NAMES = { "top_conv", "top_exp", "top_tanh", "loop_conv", "loop_exp", "loop_tanh",
  "then_conv", "then_exp", "then_tanh" }

local steps_by_node = S.steps_by_node -- the steps of an explained plan at any depth, by node

-- name -> flat results (the loop run n times, the then branch taken) and the steps by node
local function run_nested(options, n, g_of)
  local g, x, nn, p, ys = (g_of or nested_graph)()
  options = options or {}
  options.export_compile_stat = 0
  local sess <close> = npu.Session { graph = g, options = options }
  local fetches = {}
  for i, name in ipairs(NAMES) do fetches[i] = ys[name] end
  local feeds = { [x] = npu.tensor(XS, "float32"):reshape(SHAPE), [nn] = npu.tensor(n or 1, "int32"),
    [p] = npu.tensor(true, "bool") }
  local got = sess:run(fetches, feeds)
  local out = {}
  for i, name in ipairs(NAMES) do out[name] = flatten(got[i]:totable()) end
  return out, steps_by_node(sess:explain(fetches, feeds))
end

-- The exact convolution of flat NHWC input xs (SAME, stride 1) and W, Winograd F(2x2, 3x3)
-- run on absolute values (docs/numerics.md): per output, sum over c of
-- |A^T| ((|G| |g| |G^T|) . (|B^T| |d| |B|)) |A| at its place in its 2x2 tile.
local BT = { { 1, 0, 1, 0 }, { 0, 1, 1, 0 }, { 0, 1, 1, 0 }, { 0, 1, 0, 1 } } -- |B^T|
local GA = { { 1, 0, 0 }, { .5, .5, .5 }, { .5, .5, .5 }, { 0, 0, 1 } }       -- |G|
local AT = { { 1, 1, 1, 0 }, { 0, 1, 1, 1 } }                                   -- |A^T|

local function exact_and_w(xs)
  local function xat(b, y, x, c)
    if y < 0 or y >= H or x < 0 or x >= H then return 0 end
    return xs[((b * H + y) * H + x) * C + c + 1]
  end
  local function fat(kh, kw, c, k) return FS[((kh * 3 + kw) * C + c) * C + k + 1] end
  -- |M| |at| |M^T| (4x4) for M of n columns and an n x n patch at(a, b), 1-based
  local function sandwich(M, n, at)
    local out = {}
    for i = 1, 4 do
      out[i] = {}
      for j = 1, 4 do
        local s = 0
        for a = 1, n do
          for bb = 1, n do
            if M[i][a] ~= 0 and M[j][bb] ~= 0 then s = s + M[i][a] * math.abs(at(a, bb)) * M[j][bb] end
          end
        end
        out[i][j] = s
      end
    end
    return out
  end
  local U = {} -- U[c][k] = |G| |g| |G^T|
  for c = 0, C - 1 do
    U[c] = {}
    for k = 0, C - 1 do U[c][k] = sandwich(GA, 3, function(a, bb) return fat(a - 1, bb - 1, c, k) end) end
  end
  local exact, w = {}, {}
  for b = 0, N - 1 do
    for ty = 0, H // 2 - 1 do
      for tx = 0, H // 2 - 1 do
        local V = {} -- V[c] = |B^T| |d| |B| of the tile's 4x4 patch
        for c = 0, C - 1 do
          V[c] = sandwich(BT, 4, function(a, bb) return xat(b, 2 * ty - 2 + a, 2 * tx - 2 + bb, c) end)
        end
        for k = 0, C - 1 do
          local M = {}
          for i = 1, 4 do
            M[i] = {}
            for j = 1, 4 do
              local s = 0
              for c = 0, C - 1 do s = s + U[c][k][i][j] * V[c][i][j] end
              M[i][j] = s
            end
          end
          for oy = 0, 1 do
            for ox = 0, 1 do
              local y, x = 2 * ty + oy, 2 * tx + ox
              local sw = 0
              for i = 1, 4 do
                for j = 1, 4 do sw = sw + AT[oy + 1][i] * M[i][j] * AT[ox + 1][j] end
              end
              local se = 0
              for kh = 0, 2 do
                for kw = 0, 2 do
                  for c = 0, C - 1 do se = se + xat(b, y + kh - 1, x + kw - 1, c) * fat(kh, kw, c, k) end
                end
              end
              local at = ((b * H + y) * H + x) * C + k + 1
              exact[at], w[at] = se, sw
            end
          end
        end
      end
    end
  end
  return exact, w
end

-- Winograd's bound: |y - exact| <= gamma(c + 7) W, u = 2^-24; returns the worst |y - exact| / (u W)
local function winograd_worst(ys, xs)
  local exact, w = exact_and_w(xs)
  local u = 2 ^ -24
  local gamma = (C + 7) * u / (1 - (C + 7) * u)
  local worst = 0
  for i, y in ipairs(ys) do
    local err = math.abs(y - exact[i])
    lu.assertTrue(err <= gamma * w[i], ("output %d: |y - exact| = %g > gamma(c+7) W = %g"):format(i, err, gamma * w[i]))
    worst = math.max(worst, err / (u * w[i]))
  end
  return worst
end

local function same_as(got, a, b, what)
  lu.assertTrue(same(got[a], got[b]), what or (a .. " and " .. b .. " differ"))
end

TestImplModeNested = {}

-- These 8-channel 8x8 convolutions are far below high_performance's Winograd rule (too few
-- tiles to pay for the filter transform: the direct kernel is faster, and high_performance
-- runs it); super_performance (op_precision_mode) forces Winograd wherever it takes the
-- shape, so these tests see it in loops and branches.  SUPER: those options, the file written
-- for each test and removed after it.
local SUPER_INI = "[ByOpType]\nConv2D=super_performance\nExp=high_performance\nTanh=high_performance\n"
local super_path
local function SUPER() return { op_precision_mode = super_path } end
function TestImplModeNested:setUp() super_path = write(SUPER_INI) end
function TestImplModeNested:tearDown() os.remove(super_path) end

-- The default (high_performance) and high_precision set explicitly, in every block: the
-- direct kernel for these small convolutions either way, the fast or the libm exp and tanh.
function TestImplModeNested:test_default_nested_convolutions_run_direct_with_the_top_levels_bits()
  local fast = run_nested({ op_select_implmode = "high_performance" })
  for _, mode in ipairs({ "high_performance", "high_precision" }) do
    local options = mode == "high_precision" and { op_select_implmode = mode } or {}
    local got, steps = run_nested(options)
    for _, where in ipairs({ "top", "loop", "then" }) do
      local s = steps[where .. "_conv"]
      lu.assertEquals(s.algo, "direct", where)
      lu.assertEquals(s.impl, mode, where)
      lu.assertEquals(s.depth, where == "top" and 0 or 1, where)
      lu.assertEquals(steps[where .. "_exp"].impl, mode, where)
    end
    for _, op in ipairs({ "conv", "exp", "tanh" }) do
      same_as(got, "loop_" .. op, "top_" .. op)
      same_as(got, "then_" .. op, "top_" .. op)
    end
    if mode == "high_performance" then -- unset is high_performance, bit for bit
      for _, name in ipairs(NAMES) do lu.assertTrue(same(got[name], fast[name]), name) end
    else
      -- the reference path's kernels: the same bits for exp and tanh, the conv within its sum's bound
      local ref = run_nested({ use_off_line = false })
      lu.assertTrue(same(got.loop_exp, ref.loop_exp) and same(got.loop_tanh, ref.loop_tanh))
      for i, v in ipairs(ref.loop_conv) do lu.assertAlmostEquals(got.loop_conv[i], v, 1e-5) end
    end
  end
end

function TestImplModeNested:test_high_performance_reaches_loops_and_branches()
  -- high_performance itself: the fast kernels, and the direct kernel for these small
  -- convolutions (winograd_rule), in every block
  local _, hp = run_nested({ op_select_implmode = "high_performance" })
  for _, where in ipairs({ "top", "loop", "then" }) do
    lu.assertEquals(hp[where .. "_conv"].algo, "direct", where)
    lu.assertEquals(hp[where .. "_conv"].impl, "high_performance", where)
    lu.assertEquals(hp[where .. "_tanh"].impl, "high_performance", where)
  end
  local got, steps = run_nested(SUPER())
  for _, where in ipairs({ "top", "loop", "then" }) do
    lu.assertEquals(steps[where .. "_conv"].algo, "winograd_2x3", where)
    lu.assertEquals(steps[where .. "_conv"].impl, "high_performance", where)
    lu.assertEquals(steps[where .. "_exp"].impl, "high_performance", where)
    lu.assertEquals(steps[where .. "_tanh"].impl, "high_performance", where)
  end
  for _, op in ipairs({ "conv", "exp", "tanh" }) do
    same_as(got, "loop_" .. op, "top_" .. op)
    same_as(got, "then_" .. op, "top_" .. op)
  end
  local precise = run_nested({ op_select_implmode = "high_precision" })
  lu.assertFalse(same(got.loop_conv, precise.loop_conv), "Winograd's rounding is not the direct kernel's")
  lu.assertFalse(same(got.loop_exp, precise.loop_exp), "the fast exp is not libm's")
  -- the explain listing names the nested step's algorithm
  local g, x, n, p, ys = nested_graph()
  local sess <close> = npu.Session { graph = g, options = SUPER() }
  local text = tostring(sess:explain(ys.loop_conv, { [x] = npu.zeros(SHAPE), [n] = npu.tensor(1, "int32") }))
  lu.assertNotNil(text:match("body:.-loop_conv[^\n]*high_performance winograd_2x3"), text)
  lu.assertNotNil(p)
end

function TestImplModeNested:test_nested_winograd_meets_its_bound_against_float64()
  local one, steps = run_nested(SUPER(), 1)
  lu.assertEquals(steps.loop_conv.algo, "winograd_2x3")
  lu.assertFalse(same(one.loop_conv, run_nested({}, 1).loop_conv), "not the direct kernel's bits")
  local worst = winograd_worst(one.loop_conv, XS)
  lu.assertTrue(worst > 0, "float32 is not float64")
  winograd_worst(one.then_conv, XS)
  -- the second iteration convolves the first one's result: Winograd again, within its bound
  local two = run_nested(SUPER(), 2)
  winograd_worst(two.loop_conv, one.loop_conv)
  lu.assertFalse(same(two.loop_conv, one.loop_conv))
end

function TestImplModeNested:test_optypelist_names_types_inside_loops()
  -- high_precision for the listed type, the default (high_performance) for the others
  local got, steps = run_nested({ op_select_implmode = "high_precision", optypelist_for_implmode = "Tanh" })
  local fast = run_nested({ op_select_implmode = "high_performance" })
  local precise = run_nested({ op_select_implmode = "high_precision" })
  for _, where in ipairs({ "loop", "then" }) do
    lu.assertEquals(steps[where .. "_exp"].impl, "high_performance", where)
    lu.assertEquals(steps[where .. "_tanh"].impl, "high_precision", where)
    lu.assertEquals(steps[where .. "_conv"].algo, "direct", where)
    lu.assertTrue(same(got[where .. "_exp"], fast.top_exp), where .. " exp: the fast kernel's bits")
    lu.assertTrue(same(got[where .. "_tanh"], precise.top_tanh), where .. " tanh: libm's bits")
    lu.assertTrue(same(got[where .. "_conv"], precise.top_conv), where .. " conv: the direct kernel's bits")
  end
  -- Conv2D listed: high_precision for it (the direct kernel), the exp the default's
  got, steps = run_nested({ op_select_implmode = "high_precision", optypelist_for_implmode = "Conv2D" })
  for _, where in ipairs({ "loop", "then" }) do
    lu.assertEquals(steps[where .. "_conv"].algo, "direct", where)
    lu.assertEquals(steps[where .. "_conv"].impl, "high_precision", where)
    lu.assertEquals(steps[where .. "_exp"].impl, "high_performance", where)
    lu.assertTrue(same(got[where .. "_conv"], fast.top_conv), where)
  end
end

function TestImplModeNested:test_op_precision_mode_names_a_node_inside_a_loop()
  local path = write("[ByNodeName]\nloop_conv=super_performance\nloop_exp=high_precision\n")
  local _, steps = run_nested({ op_precision_mode = path })
  os.remove(path)
  lu.assertEquals(steps.loop_conv.algo, "winograd_2x3")
  lu.assertEquals(steps.then_conv.algo, "direct")
  lu.assertEquals(steps.top_conv.algo, "direct")
  lu.assertEquals(steps.loop_exp.impl, "high_precision")
  -- nodes the file does not name: the default, high_performance
  lu.assertEquals(steps.then_exp.impl, "high_performance")
  lu.assertEquals(steps.top_exp.impl, "high_performance")
end

function TestImplModeNested:test_imported_functional_control_flow()
  -- our graph written as TensorFlow's While and If with a function library, read back
  local function imported()
    local g, x, n, p, ys = nested_graph()
    local g2 = npu.import_graph_def(npu.export_graph_def(g))
    local names = {} -- fetched and fed by name in the imported graph
    for k, y in pairs(ys) do names[k] = y:name() end
    return g2, x:name(), n:name(), p:name(), names
  end
  local got, steps = run_nested(SUPER(), 1, imported)
  local convs = 0
  for _, s in pairs(steps) do
    if s.depth > 0 and s.algo then
      lu.assertEquals(s.algo, "winograd_2x3")
      convs = convs + 1
    end
  end
  lu.assertEquals(convs, 2, "the loop's and the branch's convolution")
  local mine = run_nested(SUPER())
  for _, name in ipairs(NAMES) do lu.assertTrue(same(got[name], mine[name]), name) end
end

function TestImplModeNested:test_iterations_per_loop_steps_take_the_mode()
  -- an iterations_per_loop loop runs the plan's own steps n times: they are top-level steps
  local g = npu.Graph()
  local xs = npu.tensor(XS, "float32"):reshape(SHAPE)
  local ds = npu.data.Dataset.from_tensor_slices(xs):batch(N, { drop_remainder = true }):repeat_()
  local b = ds:make_one_shot_iterator(g):get_next()
  local f = g:const(npu.tensor(FS, "float32"):reshape({ 3, 3, C, C }))
  local y = npu.nn.conv2d(b, f, { strides = { 1, 1, 1, 1 }, padding = "SAME", name = "ipl_conv" })
  local total = g:variable(npu.zeros({}), "total")
  local step = npu.assign(total, total + npu.reduce_sum(y))
  local sess <close> = npu.Session { graph = g, options = { iterations_per_loop = 3,
    op_precision_mode = super_path, export_compile_stat = 0 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 3)
  local got = sess:run({ y, loop })
  local e = sess:explain({ y, loop })
  lu.assertEquals(e.iterations, 3)
  lu.assertEquals(steps_by_node(e).ipl_conv.algo, "winograd_2x3")
  winograd_worst(flatten(got[1]:totable()), XS)
end

function TestImplModeNested:test_map_fn_a_tensor_array_loop()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder("float32", SHAPE, "x")
  local f = g:const(npu.tensor(FS, "float32"):reshape({ 3, 3, C, C }))
  local y = npu.map_fn(function(e)
    return npu.reshape(npu.nn.conv2d(npu.reshape(e, { 1, H, H, C }), f,
      { strides = { 1, 1, 1, 1 }, padding = "SAME", name = "map_conv" }), { H, H, C })
  end, x)
  local sess <close> = npu.Session { graph = g, options = SUPER() }
  local feeds = { [x] = npu.tensor(XS, "float32"):reshape(SHAPE) }
  lu.assertEquals(steps_by_node(sess:explain(y, feeds)).map_conv.algo, "winograd_2x3")
  local got = flatten(sess:run(y, feeds):totable())
  lu.assertTrue(same(got, run_nested(SUPER()).top_conv),
    "the top level's Winograd bits")
end

-- ---- high_performance's Winograd rule (compile/implmode.c: winograd_rule) ----------------
-- Winograd F(2x2, 3x3) only where bench/bench_winograd.c measured it clearly faster than the
-- direct kernel: >= 32 channels each side with a product >= 2048, >= 392 output tiles per call,
-- tiles x c x out_c >= 784 x 64 x 64, tiles at least 7/8 full; a constant filter (its U
-- computed once): the channels and fill alike, >= 49 tiles and tiles x 1024 >= c x out_c.  explain shows the decision on
-- shapes either side of each condition; a Winograd step's result is within its bound.

TestWinogradRule = {}

-- the filter a Const, or fed (fed: a placeholder, as a variable filter is: its transform runs
-- every call)
local function conv_case(n, h, c, oc, fed)
  local g = npu.Graph()
  local x = g:placeholder("float32", { n, h, h, c }, "x")
  local f = fed and g:placeholder("float32", { 3, 3, c, oc }, "f")
    or g:const(npu.random.normal({ 3, 3, c, oc }, { seed = 31, stddev = 0.1 }))
  local y = npu.nn.conv2d(x, f, { strides = { 1, 1, 1, 1 }, padding = "SAME", name = "rule_conv" })
  return g, x, y, fed and f
end

-- opts nil: op_select_implmode = high_performance
local function conv_algo(n, h, c, oc, opts, fed)
  local g, x, y, f = conv_case(n, h, c, oc, fed)
  local sess <close> = npu.Session { graph = g, options = opts or { op_select_implmode = "high_performance" } }
  local feeds = { [x] = npu.zeros({ n, h, h, c }) }
  if f then feeds[f] = npu.zeros({ 3, 3, c, oc }) end
  local s = steps_by_node(sess:explain(y, feeds)).rule_conv
  return s.algo, s.impl
end

function TestWinogradRule:test_decisions_either_side_of_the_rule()
  local W, D = "winograd_2x3", "direct"
  local cases = {
    -- n, h, c, out_c, algo under high_performance with the filter fed (transformed every
    -- call), with a constant filter (transformed once, when compiling)
    { 8, 28, 32, 64, W, W }, -- 1568 tiles, work 784 x 64 x 64
    { 32, 14, 32, 64, W, W }, -- bench_cnn's second layer
    { 1, 56, 64, 64, W, W }, -- 784 tiles at 64 -> 64
    { 8, 28, 16, 16, D, D }, -- too few channels
    { 8, 56, 32, 32, D, D }, -- 32 -> 32: product 1024
    { 1, 28, 128, 128, D, W }, -- 196 tiles: the per-call filter transform is not paid for
    { 8, 14, 64, 64, D, W }, -- 392 tiles at 64 -> 64: half the work the per-call rule asks
    { 1, 14, 32, 64, D, W }, -- 49 tiles: the constant-filter rule's least
    { 1, 12, 64, 64, D, D }, -- 36 tiles
    { 1, 14, 256, 256, D, D }, -- 49 tiles for U's 256 x 256: 64 wanted
    { 1, 14, 128, 256, D, W }, -- 32 wanted
    { 32, 7, 128, 128, D, D }, -- 7x7: the tiles 77 % full
  }
  for _, k in ipairs(cases) do
    local what = ("%dx%dx%d %d -> %d"):format(k[1], k[2], k[2], k[3], k[4])
    for j, fed in ipairs { true, false } do
      local algo, impl = conv_algo(k[1], k[2], k[3], k[4], nil, fed)
      local how = what .. (fed and ", fed filter" or ", constant filter")
      lu.assertEquals(algo, k[4 + j], how)
      lu.assertEquals(impl, "high_performance", how)
      -- unset: high_performance's decision; high_precision: the direct kernel
      lu.assertEquals(conv_algo(k[1], k[2], k[3], k[4], {}, fed), k[4 + j], how .. ", default mode")
      lu.assertEquals(conv_algo(k[1], k[2], k[3], k[4], { op_select_implmode = "high_precision" }, fed),
        "direct", how .. ", high_precision")
    end
  end
  -- super_performance: Winograd wherever it takes the shape (>= 8 channels each side)
  local path = write("[ByOpType]\nConv2D=super_performance\n")
  lu.assertEquals(conv_algo(8, 28, 16, 16, { op_precision_mode = path }), "winograd_2x3")
  lu.assertEquals(conv_algo(32, 7, 128, 128, { op_precision_mode = path }), "winograd_2x3")
  lu.assertEquals(conv_algo(8, 28, 4, 16, { op_precision_mode = path }), "direct")
  os.remove(path)
end

function TestWinogradRule:test_input_gradient_follows_the_rule()
  local function algo(n, h, c, oc, options)
    local g = npu.Graph()
    local dy = g:placeholder("float32", { n, h, h, oc }, "dy")
    local f = g:const(npu.random.normal({ 3, 3, c, oc }, { seed = 32, stddev = 0.1 }))
    local dx = g:op("conv2d_backprop_input", { f, dy }, { input_sizes = { n, h, h, c }, strides = 1,
      padding = "SAME" }, "rule_dx")
    local sess <close> = npu.Session { graph = g, options = options or { op_select_implmode = "high_performance" } }
    return steps_by_node(sess:explain(dx, { [dy] = npu.zeros({ n, h, h, oc }) })).rule_dx.algo
  end
  lu.assertEquals(algo(8, 28, 32, 64), "winograd_2x3") -- dy's 64 channels -> dx's 32
  lu.assertEquals(algo(8, 28, 32, 64, {}), "winograd_2x3") -- the default mode
  lu.assertNil(algo(8, 28, 32, 64, { op_select_implmode = "high_precision" }))
  lu.assertNil(algo(8, 14, 32, 64)) -- 392 tiles at 64 -> 32: the default kernel
  lu.assertNil(algo(8, 28, 16, 16))
end

function TestWinogradRule:test_a_winograd_step_is_within_its_bound()
  -- |y - exact| <= gamma(c + 7) W (docs/numerics.md), W the algorithm on absolute values:
  -- with F(2x2, 3x3)'s matrices W <= 81 c max|x| max|f| (|G| rows sum to at most 1.5, |B^T|'s
  -- to 2, |A^T|'s to 3); the reference path sums in float64
  local n, h, c, oc = 8, 28, 32, 64
  local g, x, y = conv_case(n, h, c, oc)
  local xs = npu.random.normal({ n, h, h, c }, { seed = 33 })
  local feeds = { [x] = xs }
  -- the default session: high_performance, so Winograd for this shape
  local sess <close> = npu.Session { graph = g }
  lu.assertEquals(steps_by_node(sess:explain(y, feeds)).rule_conv.algo, "winograd_2x3")
  local got = sess:run(y, feeds)
  local ref <close> = npu.Session { graph = g, options = { use_off_line = false } }
  local want = ref:run(y, feeds)
  local function max_abs(t)
    local m = 0
    for _, v in ipairs(flatten(t:totable())) do m = math.max(m, math.abs(v)) end
    return m
  end
  local fmax = 0
  for _, v in ipairs(flatten(npu.random.normal({ 3, 3, c, oc }, { seed = 31, stddev = 0.1 }):totable())) do
    fmax = math.max(fmax, math.abs(v))
  end
  local u = 2 ^ -24
  local bound = (c + 7) * u / (1 - (c + 7) * u) * 81 * c * max_abs(xs) * fmax
  local a, b, worst = flatten(got:totable()), flatten(want:totable()), 0
  for i = 1, #a do worst = math.max(worst, math.abs(a[i] - b[i])) end
  lu.assertTrue(worst <= bound, ("largest |y - ref| %g, bound %g"):format(worst, bound))
  lu.assertTrue(worst > 0, "Winograd's rounding, not the reference's")
end
