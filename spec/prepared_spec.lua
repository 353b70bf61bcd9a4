-- prepared_spec.lua — a constant filter prepared once per plan (compile/plan.c,
-- npuE_step.prepared: direct_bf16's packed filter, Winograd's U) is what the kernel reads, so
-- the plan does no per-run work on the stored filter: under allow_mix_precision_bf16 the
-- executor no longer widens a bfloat16 filter into a float32 copy each run (the op's
-- NPUX_F_PREPARED_FILTER: explain's round_bytes drop to 0, the step's scratch holds no room
-- for per-call packing), with the same bits as the fed twin that still packs per call; and
-- AOE (aoe_mode 2) times the direct_bf16 candidate of a constant filter with the filter
-- packed beforehand, as the plan runs it.  The widening path (NPU_NO_AVX512BF16=1, no
-- direct_bf16, nothing prepared) keeps widening the filter: a child process.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

-- conv 3x3 (5 -> 16) + bias + relu (one fused_conv2d step), x bfloat16-exact, the filter a
-- constant or fed; prints, per line: the conv step's algo, prepared and scratch,
-- the plan's round_bytes, and the outputs at 1 and 2 threads.
local SCRIPT = [[
local npu = require("npu")
local seed = 11
local function vals(n, scale)
  local t = {}
  for i = 1, n do
    seed = (seed * 1103515245 + 12345) % 2147483648
    t[i] = ((seed % 511) - 255) / 128 * scale
  end
  return t
end
local xv = npu.tensor(vals(2 * 9 * 8 * 5, 1), "float32"):reshape({ 2, 9, 8, 5 })
-- the filter's values are not bfloat16 ones (x 1.001): the precision pass stores the constant
-- bfloat16 (a float32 one of bfloat16 values would be kept as it is), the fed one gets a Cast
local wv = npu.tensor(vals(3 * 3 * 5 * 16, 0.25 * 1.001), "float32"):reshape({ 3, 3, 5, 16 })
local bv = npu.tensor(vals(16, 0.5), "float32")
for _, constant in ipairs({ true, false }) do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 9, 8, 5 }, "x")
  local f = constant and g:const(wv, "w") or g:placeholder("float32", { 3, 3, 5, 16 }, "f")
  local y = npu.nn.relu(npu.nn.bias_add(npu.nn.conv2d(x, f, { padding = "SAME" }),
    g:const(bv, "b")))
  local feeds = { [x] = xv }
  if not constant then feeds[f] = wv end
  local s = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16",
    export_compile_stat = 0 } }
  local e = s:explain(y, feeds)
  local conv
  for _, st in ipairs(e.steps) do if st.op:find("conv2d") then conv = st end end
  local outs = {}
  local n0 = npu.core.n_threads()
  for _, t in ipairs({ 1, 2 }) do
    npu.core.set_n_threads(t)
    local v = s:run(y, feeds):reshape({ -1 }):totable()
    for i = 1, #v do v[i] = string.format("%a", v[i]) end
    outs[t] = table.concat(v, ",")
  end
  npu.core.set_n_threads(n0)
  print(table.concat({ constant and "const" or "fed", conv.op, tostring(conv.algo),
    tostring(conv.prepared), conv.scratch_bytes, e.memory.round_bytes, outs[1], outs[2] }, " "))
end
]]

local function run(env)
  local out = S.run_lua(".", env, SCRIPT)
  local r = {}
  for line in out:gmatch("[^\n]+") do
    local k, op, algo, prep, scratch, round, y1, y2 =
      line:match("^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$")
    lu.assertNotNil(k, out)
    r[k] = { op = op, algo = algo, prepared = prep, scratch = tonumber(scratch),
      round = tonumber(round), y1 = y1, y2 = y2 }
  end
  lu.assertNotNil(r.const, out)
  lu.assertNotNil(r.fed, out)
  return r
end

TestPrepared = {}

-- The filter's float32 copy: 3 3 5 16 floats.
local FILTER_F32 = 3 * 3 * 5 * 16 * 4

function TestPrepared:test_a_prepared_bf16_filter_is_not_widened_each_run()
  local r = run("-u NPU_NO_AVX512BF16")
  local c, f = r.const, r.fed
  lu.assertEquals(c.op, "fused_conv2d")
  if not S.cpu_has_bf16dot() then -- nothing prepared here: the widening path below is all there is
    lu.assertEquals(c.prepared, "nil")
    return
  end
  lu.assertEquals({ c.algo, c.prepared }, { "direct_bf16", "bf16_filter" })
  lu.assertEquals({ f.algo, f.prepared }, { "direct_bf16", "nil" })
  -- neither is widened: the prepared constant one is not read, the fed one (cast to bfloat16
  -- each run) is read as stored and packed per call (plan.c: reads_stored_filter)
  lu.assertEquals(f.round, 0)
  lu.assertEquals(c.round, 0)
  -- no room for per-call packing in the prepared step's scratch: at least the packed filter
  -- (3 rows of 8 channel pairs of 16 lanes, bfloat16) less
  lu.assertTrue(c.scratch + 3 * 8 * 16 * 2 * 2 <= f.scratch,
    ("scratch %d (prepared) against %d (per call)"):format(c.scratch, f.scratch))
  -- the same bits: packed once or per call, at 1 and 2 threads
  lu.assertEquals(c.y1, f.y1)
  lu.assertEquals(c.y1, c.y2)
  lu.assertEquals(f.y1, f.y2)
end

function TestPrepared:test_the_widening_path_still_widens_the_filter()
  local r = run("NPU_NO_AVX512BF16=1")
  for _, k in ipairs({ "const", "fed" }) do
    lu.assertEquals({ r[k].algo, r[k].prepared }, { "direct", "nil" }, k)
    lu.assertEquals(r[k].round, FILTER_F32, k)
  end
  lu.assertEquals(r.const.y1, r.fed.y1)
  lu.assertEquals(r.const.y1, r.const.y2)
  -- and the native path gives the widening kernel's bits (bfloat16-exact inputs: both sums are
  -- exact in float32 at these magnitudes)
  if S.cpu_has_bf16dot() then lu.assertEquals(run("-u NPU_NO_AVX512BF16").const.y1, r.const.y1) end
end

-- AOE: the direct_bf16 candidate of a constant filter is timed with the filter packed once
-- beforehand (what plan.c gives the chosen algorithm), not packed per call; the record marks
-- such candidates "prepared".  A 3x3, 256 -> 256 filter over 1x3x3 pixels, constant or fed.
local function aoe_times(dir, constant)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, 3, 3, 256 }, "x")
  local w = npu.random.normal({ 3, 3, 256, 256 }, { seed = 41, stddev = 0.05 })
  local f = constant and g:const(w, "w") or g:placeholder("float32", { 3, 3, 256, 256 }, "f")
  local y = npu.nn.conv2d(x, f, { padding = "SAME", name = "pconv" })
  local feeds = { [x] = npu.random.normal({ 1, 3, 3, 256 }, { seed = 42 }) }
  if not constant then feeds[f] = w end
  return S.aoe_tune_bf16(dir, constant and "const" or "fed", g, y, feeds, "pconv", "conv2d",
    "direct_bf16")
end

function TestPrepared:test_aoe_times_direct_bf16_with_the_filter_packed_once()
  if not S.bf16dot_here() then return end -- no direct_bf16 candidate without the instructions
  S.aoe_check_prepared(aoe_times, "direct_bf16", "bf16_filter")
end

-- Every allocation of compiling and running a plan with prepared filters (a direct_bf16 step's
-- packed filter, a Winograd step's U) failing in turn: an npu.Error each time, nothing left
-- allocated, and the run succeeding once no allocation fails.
function TestPrepared:test_failed_allocations_while_preparing_leak_nothing()
  local function case(prec, impl, shape, want)
    return function()
      local g = npu.Graph()
      local x = g:placeholder("float32", shape, "x")
      local c = shape[4]
      local f = g:const(npu.random.normal({ 3, 3, c, c }, { seed = 5, stddev = 0.1 }), "w")
      local y = npu.nn.conv2d(x, f, { padding = "SAME", name = "pc" })
      return S.run_prepared(g, y, { [x] = npu.random.normal(shape, { seed = 6 }) },
        { precision_mode = prec, op_select_implmode = impl }, "conv2d", want)
    end
  end
  local cases = { { "winograd", case("must_keep_origin_dtype", "high_performance", { 1, 14, 14, 64 },
    "winograd_filter") } }
  if S.bf16dot_here() then
    cases[#cases + 1] = { "direct_bf16", case("allow_mix_precision_bf16", nil, { 1, 6, 6, 32 },
      "bf16_filter") }
  end
  for _, c in ipairs(cases) do
    local what, f = c[1], c[2]
    f()
    S.sweep_allocations(what, f)
  end
end
