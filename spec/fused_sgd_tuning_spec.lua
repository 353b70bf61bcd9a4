-- fused_sgd_tuning_spec.lua — AOE on the fused gradient-descent step (compile/tuning.c):
-- ApplyGradientDescentFusionPass folds a weight gradient's matmul into the update, so the step
-- fused_apply_gradient_descent is timed as itself, with the matmul's GEMM candidates (sgemm and,
-- for at most 16 rows, sgemv rows; bf16dot against widening where its A and B are stored
-- bfloat16 and the CPU has AVX512_BF16), and records of its own.  A record that forces the other
-- candidate is what the step then runs: explain's algo says so, and the variable after a step
-- stays within the bound of that choice of the untuned session's.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

TestFusedSgdTuning = {}

function TestFusedSgdTuning:setUp() self.dir = S.tmpdir() end
function TestFusedSgdTuning:tearDown() S.rm_rf(self.dir) end

local AOE_FILE = "npu_aoe_tuning.jsonl"
local LR = 0.01
local ROWS, IN, OUT = 64, 8, 32 -- dW = x^T dy: 8 rows (sgemm and sgemv both candidates), k = 64

local X = npu.random.normal({ ROWS, IN }, { seed = 5 })
local C = npu.random.normal({ ROWS, OUT }, { seed = 4 })

-- loss = sum(x W * C): dy = C, so dW = x^T C and the bound below is known exactly
local function build()
  local g = npu.Graph()
  local x = g:placeholder("float32", { ROWS, IN }, "x")
  local w = g:variable(npu.random.normal({ IN, OUT }, { seed = 3 }), "w")
  local loss = npu.reduce_sum(x:matmul(w) * g:const(C))
  local train = npu.train.GradientDescentOptimizer(LR):minimize(loss)
  return g, x, w, train
end

-- W after one step, and the explained fused step, of a session with these options
local function step(mode, opts)
  local g, x, w, train = build()
  local o = { export_compile_stat = 0, precision_mode = mode, op_compiler_cache_mode = "disable" }
  for k, v in pairs(opts or {}) do o[k] = v end
  local sess = npu.Session { graph = g, options = o }
  sess:run(g:global_variables_initializer())
  local feeds = { [x] = X }
  local fused
  for _, s in ipairs(sess:explain(train, feeds).steps) do
    if s.op == "fused_apply_gradient_descent" then fused = s end
  end
  lu.assertNotNil(fused, "the update is fused")
  sess:run(train, feeds)
  local got = sess:run(w)
  sess:close()
  return got:reshape({ -1 }):totable(), fused
end

local function the_record(path)
  local lines, rec, at = {}, nil, nil
  for l in io.lines(path) do
    lines[#lines + 1] = l
    local r = S.json_decode(l)
    if r.op == "fused_apply_gradient_descent" then rec, at = r, #lines end
  end
  lu.assertNotNil(rec, "a record of the fused step")
  return rec, lines, at
end

-- FNV-1a 64 over the line up to ,"checksum" (as tuning.c seals a record)
local function seal(line)
  local body = line:match('^(.*),"checksum":"%x+"}$')
  local h = -3750763034362895579
  for i = 1, #body do h = (h ~ body:byte(i)) * 1099511628211 end
  return body .. ',"checksum":"' .. ("%016x"):format(h) .. '"}'
end

-- |w_a - w_b| <= lr (slack + 2 k 2^-24) sum_r |x_ri C_rj| + 2^-22 |w|: two float32 sums of the
-- same k products in other orders (each within k 2^-24 sum|ab|), a product rounded to
-- bfloat16 (slack 2^-8 relative each, under the mixed mode), then the update's two roundings.
local function assert_within(a, b, slack, what)
  local worst = 0
  for i = 0, IN - 1 do
    for j = 0, OUT - 1 do
      local s = 0
      for r = 0, ROWS - 1 do
        s = s + math.abs(X:totable()[r + 1][i + 1] * C:totable()[r + 1][j + 1])
      end
      local k = i * OUT + j + 1
      local bound = LR * (slack + 2 * ROWS * 2 ^ -24) * s * 1.02 + 2 ^ -22 * math.abs(a[k])
      local d = math.abs(a[k] - b[k])
      lu.assertTrue(d <= bound, ("%s: W[%d][%d] %.9g vs %.9g, bound %.3g"):format(what, i, j, a[k], b[k], bound))
      if d / bound > worst then worst = d / bound end
    end
  end
  return worst
end

-- Times the fused step (aoe_mode 2), rewrites its record to the candidate not chosen, and checks
-- that a new session applies it.
local function force_other(dir, mode, choices)
  local _, timed = step(mode, { aoe_mode = "2", work_path = dir })
  lu.assertEquals(timed.tuned, "timed")
  local rec, lines, at = the_record(dir .. "/" .. AOE_FILE)
  lu.assertStrContains(rec.key, "op fused_apply_gradient_descent in ")
  lu.assertStrContains(rec.key, " attrs ta1 tb0 product ")
  lu.assertEquals(timed.algo, rec.algo, "the timed winner is what the step runs")
  local seen = {}
  for _, c in ipairs(rec.candidates) do seen[c.algo] = true end
  for _, a in ipairs(choices) do lu.assertTrue(seen[a], "candidate " .. a) end
  local other = rec.algo == choices[1] and choices[2] or choices[1]
  lines[at] = seal(lines[at]:gsub('"algo":"' .. rec.algo .. '","threads"', '"algo":"' .. other .. '","threads"', 1))
  local f = assert(io.open(dir .. "/" .. AOE_FILE, "w"))
  for _, l in ipairs(lines) do f:write(l, "\n") end
  f:close()
  local w, forced = step(mode, { aoe_mode = "2", work_path = dir })
  lu.assertEquals(forced.tuned, "record")
  lu.assertEquals(forced.algo, other, "the record's choice is what the step runs")
  return w, other
end

function TestFusedSgdTuning:test_float32_record_forces_sgemm_or_gemv()
  local want = step("must_keep_origin_dtype")
  local got = force_other(self.dir, "must_keep_origin_dtype", { "sgemm", "gemv" })
  assert_within(got, want, 0, "float32")
end

function TestFusedSgdTuning:test_mixed_bf16_record_forces_bf16dot_or_widening()
  if not S.bf16dot_here() then
    -- no native GEMM here: the candidates are the widening path's (sgemm, sgemv rows)
    local want = step("allow_mix_precision_bf16")
    local got = force_other(self.dir, "allow_mix_precision_bf16", { "sgemm", "gemv" })
    assert_within(got, want, 0, "bf16 widening")
    return
  end
  local want, untuned = step("allow_mix_precision_bf16")
  lu.assertEquals(untuned.algo, "bf16dot")
  local got, other = force_other(self.dir, "allow_mix_precision_bf16", { "bf16dot", "sgemm" })
  -- the product is rounded to bfloat16 in both (the matmul's stored dtype): one bfloat16 ulp
  -- of it apart at most, plus the sums' orders
  local worst = assert_within(got, want, 2 ^ -7, "bf16dot vs " .. other)
  lu.assertTrue(worst <= 1)
end
