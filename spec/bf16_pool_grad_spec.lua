-- bf16_pool_grad_spec.lua — the fused max-pool gradient with relu gradient
-- (fused_max_pool_grad_relu_grad, MaxPoolGradReluGradFusionPass) under a reduced precision
-- mode.  Under allow_mix_precision_bf16 the step reads x, dy and the features and writes dx as
-- stored (bfloat16), so the executor widens none of them (explain: widened = {}); float16
-- operands (force_fp16, allow_mix_precision_fp16) are widened by the executor as before.
-- Either way its results are the bits of the two unfused steps, which the executor runs on
-- widened copies (the pass switched off), at 1 and 2 threads.  Under allow_mix_precision_bf16
-- the bias gradient (bias_add_grad of dx) joins the step as a float32 second output summing dx
-- as stored, as float32 plans have it: no Cast of dx to float32, no bias_add_grad step.  Its sum
-- is grouped by image (kgrad.h), bias_add_grad's is one running sum: both float64 sums of the
-- same terms rounded once to float32, so they differ by at most one float32 ulp of the
-- largest |db| (the float64 error, n h w 2^-53 sum|dx|, is far below it at these sizes).
-- Pools that tile the input, leave gaps, pad and overlap (3x3 stride 2: dx added up in a
-- float32 copy, narrowed once); channels off the 8-lane vectors.  tests/test_half_io.c checks
-- the kernel itself on every dtype mix, with NaN, infinities and signed zeros.
local lu = require("luaunit")
local npu = require("npu")
local support = dofile(SPEC_DIR .. "/support.lua")

local POOL_GRAD_OFF = '{"Switch":{"GraphFusion":{"MaxPoolGradReluGradFusionPass":"off"}}}'

local function randn(shape, seed, stddev) return npu.random.normal(shape, { seed = seed, stddev = stddev or 1 }) end

-- conv + bias + relu + max_pool, the loss sum(p * p): its gradients of x and of the bias
-- (a variable: bias_add_grad reads dx).
local function graph(n, h, w, c, oc, pool)
  local g = npu.Graph()
  local x = g:placeholder("float32", { n, h, w, c }, "x")
  local b = g:variable(randn({ oc }, 3), "b")
  local y = npu.relu(npu.nn.bias_add(npu.nn.conv2d(x, g:const(randn({ 3, 3, c, oc }, 1, 0.3), "w"),
    { padding = "SAME", name = "C" }), b, { name = "B" }))
  local p = npu.nn.max_pool(y, { ksize = pool[1], strides = pool[2], padding = pool[3], name = "P" })
  local grads = npu.gradients(npu.reduce_sum(p * p), { x, b })
  return g, { grads[1], grads[2] }, { [x] = randn({ n, h, w, c }, 2) }
end

local function session(g, mode, switches)
  local s = support.fusion_session(g, { precision_mode = mode }, switches)
  s:run(g:global_variables_initializer())
  return s
end

TestBf16PoolGrad = {}

function TestBf16PoolGrad:test_reads_and_writes_reduced_operands_as_stored_with_the_unfused_bits()
  local n0 = npu.core.n_threads()
  for _, mode in ipairs({ "allow_mix_precision_bf16", "force_fp16", "allow_mix_precision_fp16" }) do
    local bf16 = mode == "allow_mix_precision_bf16"
    local stored = bf16 and "bfloat16" or "float16"
    for _, v in ipairs({
      { 2, 8, 8, 3, 16, { 2, 2, "VALID" } }, { 3, 9, 7, 5, 13, { 2, 2, "SAME" } },
      { 2, 11, 10, 9, 6, { 3, 2, "SAME" } }, { 1, 13, 13, 3, 4, { 3, 3, "VALID" } },
    }) do
      local what = ("%s %dx%dx%dx%d -> %d, pool %d/%d %s"):format(mode, v[1], v[2], v[3], v[4], v[5],
        v[6][1], v[6][2], v[6][3])
      local g, grads, feeds = graph(table.unpack(v))
      npu.core.set_n_threads(1)
      local fused, unfused = session(g, mode), session(g, mode, POOL_GRAD_OFF)
      local step
      for _, s in ipairs(fused:explain(grads, feeds).steps) do
        if s.op == "fused_max_pool_grad_relu_grad" then step = s end
      end
      lu.assertNotNil(step, what)
      lu.assertEquals(step.widened, bf16 and {} or { 0, 1, 2, 3 }, what)
      lu.assertEquals({ step.round_in, step.round_out }, { stored, stored }, what)
      local widened_unfused = {}
      for _, s in ipairs(unfused:explain(grads, feeds).steps) do
        if s.op == "max_pool_grad" then widened_unfused = s.widened end
      end
      lu.assertTrue(#widened_unfused >= 3, what .. ": the unfused step widens its inputs")
      local a, b = fused:run(grads, feeds), unfused:run(grads, feeds)
      npu.core.set_n_threads(2)
      local a2 = session(g, mode):run(grads, feeds)
      npu.core.set_n_threads(n0)
      local dx = a[1]:reshape({ a[1]:numel() }):totable()
      local nonzero = 0
      for _, e in ipairs(dx) do nonzero = nonzero + (e ~= 0 and 1 or 0) end
      lu.assertTrue(nonzero > 0, what .. ": the gradient is not all zero")
      local n = {}
      for _, s in ipairs(fused:explain(grads, feeds).steps) do n[s.op] = (n[s.op] or 0) + 1 end
      if bf16 then
        lu.assertNil(n.bias_add_grad, what .. ": the bias gradient joined the step")
        lu.assertEquals(#step.outputs, 2, what)
      else
        lu.assertEquals(n.bias_add_grad, 1, what .. ": float16 keeps its own step")
        lu.assertEquals(#step.outputs, 1, what)
      end
      support.assert_same_bits(a[1], b[1], what .. ", unfused, gradient of x")
      local db, db_ref = a[2]:totable(), b[2]:totable()
      local peak = 0
      for _, e in ipairs(db_ref) do peak = math.max(peak, math.abs(e)) end
      for k = 1, #db do
        lu.assertTrue(math.abs(db[k] - db_ref[k]) <= 2 ^ -23 * peak, what .. ", bias gradient " .. k)
      end
      for i = 1, 2 do support.assert_same_bits(a2[i], a[i], what .. ", 2 threads, gradient " .. i) end
      fused:close(); unfused:close()
    end
  end
end

-- The fused step of a float32 plan reads float32 as it did: nothing to widen, no scratch
-- beyond the bias sums (none here: no bias_add_grad joins a graph without one).
function TestBf16PoolGrad:test_float32_plan_unchanged()
  local g, grads, feeds = graph(2, 8, 8, 3, 16, { 2, 2, "VALID" })
  local s = session(g, "must_keep_origin_dtype")
  for _, st in ipairs(s:explain(grads, feeds).steps) do
    if st.op == "fused_max_pool_grad_relu_grad" then
      lu.assertEquals(st.widened, {})
      lu.assertNil(st.round_in)
    end
  end
end
