-- bf16_weights_spec.lua — a bf16dot matmul / fused_matmul step whose B is a constant stored
-- bfloat16 (a frozen graph's weights under allow_mix_precision_bf16) gets B packed into the
-- native GEMM's panels once per plan (compile/plan.c, npuE_step.prepared; explain's prepared
-- "bf16_weights", memory.prepared_bytes), instead of packing it on every call.  Checked: the
-- frozen MLP (npu.graph_util.convert_variables_to_constants) gives the bits of the same graph
-- with its weights fed (packed per call), at 1 and 2 threads and batches of 1 to 20 rows
-- (few rows read the panels too, units spanning several of them); explain names the prepared
-- data and counts its bytes; with NPU_NO_AVX512BF16=1 (a child process: the switch is a fact
-- of the process) nothing is prepared and the results are within bfloat16's rounding of the
-- native ones.
local lu = require("luaunit")
local S = dofile(SPEC_DIR .. "/support.lua")

-- x (batch, 37) -> dense 130 + relu (fused_matmul: bias and activation on the float32 sums)
-- -> matmul by W2 (45, 130) transposed (a plain matmul step, B stored (n, k)), fetched.
-- (The fetch keeps the name "probs" so that both twins fetch "probs:0".)
-- k odd (37) and n off the 32-column panels (130, 45).  Prints per batch and twin
-- ("frozen" / "fed"): the GEMM steps' algo:prepared, memory.prepared_bytes, then the outputs
-- at 1 and 2 threads as hex floats.
local SCRIPT = [[
local npu = require("npu")
local gu = npu.graph_util
local function model(batch, fed)
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, 37 }, "x")
  local w1v = npu.random.normal({ 37, 130 }, { seed = 3 })
  local w2v = npu.random.normal({ 45, 130 }, { seed = 4 })
  local w1 = fed and g:placeholder("float32", { 37, 130 }, "w1") or g:variable(w1v, "w1")
  local w2 = fed and g:placeholder("float32", { 45, 130 }, "w2") or g:variable(w2v, "w2")
  local b1 = g:const(npu.random.normal({ 130 }, { seed = 5 }), "b1")
  local h = npu.nn.relu(npu.nn.bias_add(g:op("matmul", { x, w1 }, {}), b1))
  g:op("matmul", { h, w2 }, { transpose_b = true }, "probs")
  return g, x, w1, w2, w1v, w2v
end
local opts = { precision_mode = "allow_mix_precision_bf16" }
for _, batch in ipairs({ 1, 3, 9, 20 }) do
  local xv = npu.random.normal({ batch, 37 }, { seed = 7 + batch })
  for _, fed in ipairs({ false, true }) do
    local g, x, w1, w2, w1v, w2v = model(batch, fed)
    local feeds = { [x] = xv }
    local sess
    if fed then
      feeds[w1], feeds[w2] = w1v, w2v
      sess = npu.Session { graph = g, options = opts }
    else
      local s0 = npu.Session { graph = g, options = opts }
      s0:run(g:global_variables_initializer())
      local frozen = gu.convert_variables_to_constants(s0, g, { "probs" })
      sess = npu.Session { graph = frozen, options = opts }
      feeds = { ["x:0"] = xv }
    end
    local e = sess:explain("probs:0", feeds)
    local steps = {}
    for _, st in ipairs(e.steps) do
      if st.op == "matmul" or st.op == "fused_matmul" then
        steps[#steps + 1] = tostring(st.algo) .. ":" .. tostring(st.prepared)
      end
    end
    local outs = {}
    local n0 = npu.core.n_threads()
    for _, t in ipairs({ 1, 2 }) do
      npu.core.set_n_threads(t)
      local v = sess:run("probs:0", feeds):reshape({ -1 }):totable()
      for i = 1, #v do v[i] = string.format("%a", v[i]) end
      outs[t] = table.concat(v, ",")
    end
    npu.core.set_n_threads(n0)
    print(table.concat({ batch, fed and "fed" or "frozen", table.concat(steps, ","),
      e.memory.prepared_bytes, outs[1], outs[2] }, " "))
  end
end
]]

local function run(env)
  local out = S.run_lua(".", env, SCRIPT)
  local r = {}
  for line in out:gmatch("[^\n]+") do
    local batch, twin, steps, bytes, y1, y2 =
      line:match("^(%d+) (%S+) (%S+) (%d+) (%S+) (%S+)$")
    lu.assertNotNil(batch, out)
    r[batch .. twin] = { steps = steps, bytes = tonumber(bytes), y1 = y1, y2 = y2 }
  end
  lu.assertNotNil(r["20frozen"], out)
  return r
end

-- B's panels for m rows: w columns (the kernel's units: 128 for one or two rows, 64 for
-- three or four, else 32) of k / 2 pairs rounded up, 4 bytes a pair.
local function panels(m, n, k)
  local w = m <= 2 and 128 or m <= 4 and 64 or 32
  return math.ceil(n / w) * math.ceil(k / 2) * w * 4
end

TestBf16Weights = {}

function TestBf16Weights:test_a_frozen_mlp_packs_its_weights_once_with_the_fed_bits()
  local r = run("-u NPU_NO_AVX512BF16")
  for _, batch in ipairs({ 1, 3, 9, 20 }) do
    local c, f = r[batch .. "frozen"], r[batch .. "fed"]
    if S.cpu_has_bf16dot() then
      lu.assertEquals(c.steps, "bf16dot:bf16_weights,bf16dot:bf16_weights", batch)
      lu.assertEquals(f.steps, "bf16dot:nil,bf16dot:nil", batch)
      lu.assertEquals(c.bytes, panels(batch, 130, 37) + panels(batch, 45, 130), batch)
    else -- no native path here: nothing to pack
      lu.assertEquals(c.steps, "nil:nil,nil:nil", batch)
      lu.assertEquals(c.bytes, 0, batch)
    end
    lu.assertEquals(f.bytes, 0, batch)
    -- the same bits: B packed once or per call, at 1 and 2 threads
    lu.assertEquals(c.y1, f.y1, "batch " .. batch)
    lu.assertEquals(c.y1, c.y2, "batch " .. batch)
    lu.assertEquals(f.y1, f.y2, "batch " .. batch)
  end
end

local function values(s)
  local t = {}
  for h in s:gmatch("[^,]+") do t[#t + 1] = tonumber(h) end
  return t
end

function TestBf16Weights:test_the_widening_path_prepares_nothing()
  local off = run("NPU_NO_AVX512BF16=1")
  local on = run("-u NPU_NO_AVX512BF16")
  for _, batch in ipairs({ 1, 20 }) do
    local c = off[batch .. "frozen"]
    lu.assertEquals(c.steps, "nil:nil,nil:nil", batch)
    lu.assertEquals(c.bytes, 0, batch)
    lu.assertEquals(c.y1, off[batch .. "fed"].y1, batch)
    -- outputs stored bfloat16 either way: the two paths' float32 sums differ by a few
    -- roundings, which bfloat16's rounding of the hidden layer and of the output can turn
    -- into one ulp each (2^-8 relative): within 2^-5 of the largest output
    local a, b = values(c.y1), values(on[batch .. "frozen"].y1)
    lu.assertEquals(#a, #b)
    local big = 0
    for i = 1, #a do big = math.max(big, math.abs(a[i])) end
    lu.assertTrue(big > 1, "outputs of some size")
    for i = 1, #a do
      lu.assertTrue(math.abs(a[i] - b[i]) <= 2 ^ -5 * big,
        ("batch %d element %d: %.9g vs %.9g"):format(batch, i, a[i], b[i]))
    end
  end
end

-- AOE (aoe_mode 2): the bf16dot candidate of a matmul whose B is a constant is timed with B
-- packed once beforehand (what plan.c gives the chosen algorithm), as the plan runs it; the
-- record marks such candidates "prepared".  Nine rows (more than a tile, so the per-call path
-- packs) by a 1024 x 1024 B, constant or fed.
local function aoe_times(dir, constant)
  local npu = require("npu")
  local g = npu.Graph()
  local x = g:placeholder("float32", { 9, 1024 }, "x")
  local w = npu.random.normal({ 1024, 1024 }, { seed = 41, stddev = 0.05 })
  local b = constant and g:const(w, "w") or g:placeholder("float32", { 1024, 1024 }, "b")
  local y = g:op("matmul", { x, b }, {}, "pmm")
  local feeds = { [x] = npu.random.normal({ 9, 1024 }, { seed = 42 }) }
  if not constant then feeds[b] = w end
  return S.aoe_tune_bf16(dir, constant and "const" or "fed", g, y, feeds, "pmm", "matmul",
    "bf16dot")
end

function TestBf16Weights:test_aoe_times_bf16dot_with_b_packed_once()
  if not S.bf16dot_here() then return end -- no bf16dot candidate without the instructions
  S.aoe_check_prepared(aoe_times, "bf16dot", "bf16_weights")
end

-- Every allocation of compiling and running a plan with B packed once failing in turn: an
-- npu.Error each time, nothing left allocated, the run succeeding once none fails.
function TestBf16Weights:test_failed_allocations_while_packing_leak_nothing()
  if not S.bf16dot_here() then return end
  local npu = require("npu")
  local function f()
    local g = npu.Graph()
    local x = g:placeholder("float32", { 2, 33 }, "x")
    local w = g:const(npu.random.normal({ 33, 40 }, { seed = 5 }), "w")
    local y = g:op("matmul", { x, w }, {}, "mm")
    return S.run_prepared(g, y, { [x] = npu.random.normal({ 2, 33 }, { seed = 6 }) },
      { precision_mode = "allow_mix_precision_bf16" }, "matmul", "bf16_weights")
  end
  f()
  S.sweep_allocations("matmul with B packed once", f)
end
