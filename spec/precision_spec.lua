-- precision_spec.lua — what precision_mode / precision_mode_v2 (and graph_run_mode through their
-- defaults) do on this device: per op class as 000 describes, values are stored in float16
-- (bfloat16) and kernels compute in float32 between them.  The oracle is the same graph run
-- with must_keep_origin_dtype on values rounded in the spec (astype float16 and back); the plan
-- itself is read with sess:explain (dtypes, sizes, the Cast steps of the precision pass).
local lu = require("luaunit")
local npu = require("npu")

local function round(t, dtype) return t:astype(dtype or "float16"):astype("float32") end

-- y = relu(x W) + x2 (cube op, then vector ops)
local function graph()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 8, 32 }, "x")
  local w = g:placeholder("float32", { 32, 16 }, "w")
  local b = g:placeholder("float32", { 8, 16 }, "b")
  local mm = x:matmul(w)
  local y = npu.nn.relu(mm) + b
  return g, x, w, b, mm, y
end

local X = npu.random.normal({ 8, 32 }, { seed = 1 })
local W = npu.random.normal({ 32, 16 }, { seed = 2 })
local B = npu.random.normal({ 8, 16 }, { seed = 3 })

local function run(options, fetch_name)
  local g, x, w, b, mm, y = graph()
  local sess = npu.Session { graph = g, options = options }
  local feeds = { [x] = X, [w] = W, [b] = B }
  return sess:run(fetch_name == "mm" and mm or y, feeds)
end

-- The oracle: full float32 on given (already rounded) inputs, with output rounding per op.
local function oracle(xr, wr, br, round_mm, round_vec)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 8, 32 }, "x")
  local w = g:placeholder("float32", { 32, 16 }, "w")
  local mm = x:matmul(w)
  local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local m = sess:run(mm, { [x] = xr, [w] = wr })
  if round_mm then m = round(m, round_mm) end
  local g2 = npu.Graph()
  local mp = g2:placeholder("float32", { 8, 16 }, "m")
  local bp = g2:placeholder("float32", { 8, 16 }, "b")
  local relu = npu.nn.relu(mp)
  local s2 = npu.Session { graph = g2, options = { precision_mode = "must_keep_origin_dtype" } }
  local r = s2:run(relu, { [mp] = m })
  if round_vec then r = round(r, round_vec) end
  local g3 = npu.Graph()
  local rp = g3:placeholder("float32", { 8, 16 }, "r")
  local bp3 = g3:placeholder("float32", { 8, 16 }, "b")
  local s3 = npu.Session { graph = g3, options = { precision_mode = "must_keep_origin_dtype" } }
  local y = s3:run(rp + bp3, { [rp] = r, [bp3] = br })
  if round_vec then y = round(y, round_vec) end
  return m, y
end

local function same(a, b) return npu.allclose(a, b, 0, 0) end

TestPrecision = {}

function TestPrecision:test_training_default_keeps_float32()
  local _, y = oracle(X, W, B)
  lu.assertTrue(same(run({ graph_run_mode = 1 }), y))
  lu.assertTrue(same(run({}), y))
end

function TestPrecision:test_inference_default_is_force_fp16()
  local _, y = oracle(round(X), round(W), round(B), "float16", "float16")
  local got = run({ graph_run_mode = 0 })
  lu.assertTrue(same(got, y))
  lu.assertTrue(same(run({ graph_run_mode = 0, precision_mode = "force_fp16" }), y))
  lu.assertTrue(same(run({ precision_mode_v2 = "fp16" }), y))
  -- and it really differs from float32
  local _, y32 = oracle(X, W, B)
  lu.assertFalse(same(got, y32))
  lu.assertTrue(npu.allclose(got, y32, 1e-2, 1e-2))
  -- every value is representable in float16
  lu.assertTrue(same(got, round(got)))
end

function TestPrecision:test_must_keep_origin_dtype_equals_the_host_reference_path()
  local dev = run({ graph_run_mode = 0, precision_mode = "must_keep_origin_dtype" })
  local host = run({ graph_run_mode = 0, use_off_line = false })
  lu.assertTrue(npu.allclose(dev, host, 1e-6, 1e-6))
  lu.assertTrue(same(run({ precision_mode_v2 = "origin", graph_run_mode = 0 }), dev))
end

function TestPrecision:test_cube_fp16in_fp32out()
  local m = oracle(round(X), round(W), B)
  local got = run({ precision_mode = "cube_fp16in_fp32out" }, "mm")
  lu.assertTrue(same(got, m))
  lu.assertTrue(same(run({ precision_mode = "force_fp32" }, "mm"), m))
  lu.assertTrue(same(run({ precision_mode_v2 = "cube_fp16in_fp32out" }, "mm"), m))
  lu.assertFalse(same(got, round(got))) -- the output stays float32
end

function TestPrecision:test_allow_fp32_to_fp16_rounds_cube_ops_only()
  local _, y = oracle(round(X), round(W), B, "float16", nil)
  lu.assertTrue(same(run({ precision_mode = "allow_fp32_to_fp16" }), y))
end

function TestPrecision:test_mixed_modes_reduce_trust_ops_and_gray_ops_follow()
  -- matmul (trust) in float16; relu and add (gray) follow it, so b is cast down for the add
  local _, y16 = oracle(round(X), round(W), round(B), "float16", "float16")
  lu.assertTrue(same(run({ precision_mode = "allow_mix_precision" }), y16))
  lu.assertTrue(same(run({ precision_mode_v2 = "mixed_float16" }), y16))
  local bf = "bfloat16"
  local _, ybf = oracle(round(X, bf), round(W, bf), round(B, bf), bf, bf)
  lu.assertTrue(same(run({ precision_mode = "allow_mix_precision_bf16" }), ybf))
  lu.assertTrue(same(run({ precision_mode_v2 = "mixed_bfloat16" }), ybf))
  lu.assertFalse(same(ybf, y16))
end

function TestPrecision:test_integer_ops_are_untouched()
  local g = npu.Graph()
  local a = g:placeholder("int32", { 3 }, "a")
  local s = npu.Session { graph = g, options = { graph_run_mode = 0 } }
  lu.assertEquals(s:run(a * 70001, { [a] = { 1, 2, 3 } }):totable(), { 70001, 140002, 210003 })
end

-- ---- the plan: dtypes per step (sess:explain) ----

-- The plan as explain gives it: the value each step writes, by the graph node it stands for
-- ("mm" for "mm:0", whichever step writes it: fusion may fold nodes into one step), the number
-- of Cast steps the precision pass added, and the explain result.
local function plan_of(sess, fetches, feeds)
  local e = sess:explain(fetches, feeds)
  local by_node, casts = {}, 0
  for _, s in ipairs(e.steps) do
    if s.pass == "precision" then
      casts = casts + 1
    else
      for _, o in ipairs(s.outputs) do by_node[o.name:match("^(.*):0$") or o.name] = o end
    end
  end
  return by_node, casts, e
end

-- x -> matmul -> relu -> softmax -> relu2, and a relu fed by the placeholder alone
local function chain()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 8, 32 }, "x")
  local w = g:placeholder("float32", { 32, 16 }, "w")
  local mm = g:op("matmul", { x, w }, {}, "mm")
  local r1 = g:op("relu", { mm }, {}, "r1")
  local sm = g:op("softmax", { r1 }, {}, "sm")
  local r2 = g:op("relu", { sm }, {}, "r2")
  local r0 = g:op("relu", { x }, {}, "r0")
  return g, { x = x, w = w, mm = mm, r1 = r1, sm = sm, r2 = r2, r0 = r0 }, { [x] = X, [w] = W }
end

function TestPrecision:test_block_list_op_stays_float32_and_gray_follows_upstream()
  local g, v, feeds = chain()
  local sess = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision" } }
  local p = plan_of(sess, { v.r2, v.r0 }, feeds)
  lu.assertEquals(p.mm.dtype, "float16")   -- trust
  lu.assertEquals(p.r1.dtype, "float16")   -- gray after a float16 step
  lu.assertEquals(p.sm.dtype, "float32")   -- block
  lu.assertEquals(p.r2.dtype, "float32")   -- gray after a block-list step
  lu.assertEquals(p.r0.dtype, "float32")   -- gray fed by a placeholder only
  -- force_fp16 reduces every op, the block list included (000: every op supporting float16)
  local f = plan_of(npu.Session { graph = g, options = { precision_mode = "force_fp16" } },
    { v.r2, v.r0 }, feeds)
  for _, name in ipairs { "mm", "r1", "sm", "r2", "r0" } do lu.assertEquals(f[name].dtype, "float16", name) end
end

function TestPrecision:test_gray_op_with_a_kept_and_a_reduced_input_stays_float32()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 8 }, "x")
  local w = g:placeholder("float32", { 8, 8 }, "w")
  local mm = g:op("matmul", { x, w }, {}, "mm")   -- reduced
  local ex = g:op("exp", { x }, {}, "ex")         -- block: kept
  local s = g:op("add", { mm, ex }, {}, "s")       -- gray with both
  local s2 = g:op("add", { mm, x }, {}, "s2")      -- gray with reduced + neutral
  local sess = npu.Session { graph = g, options = { precision_mode_v2 = "mixed_float16" } }
  local feeds = { [x] = npu.random.normal({ 4, 8 }, { seed = 4 }), [w] = npu.random.normal({ 8, 8 }, { seed = 5 }) }
  local p = plan_of(sess, { s, s2 }, feeds)
  lu.assertEquals(p.s.dtype, "float32")
  lu.assertEquals(p.s2.dtype, "float16")
  -- and the values: s2 = round(round(mm) + round(x)) with mm from rounded inputs
  local r = sess:run({ s, s2 }, feeds)
  local ref = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local g2 = npu.Graph()
  local a = g2:placeholder("float32", { 4, 8 }, "a")
  local bb = g2:placeholder("float32", { 4, 8 }, "b")
  local add = npu.Session { graph = g2, options = { precision_mode = "must_keep_origin_dtype" } }
  local mm16 = round(ref:run(mm, { [x] = round(feeds[x]), [w] = round(feeds[w]) }))
  lu.assertTrue(same(r[2], round(add:run(a + bb, { [a] = mm16, [bb] = round(feeds[x]) }))))
  lu.assertTrue(same(r[1], add:run(a + bb, { [a] = mm16, [bb] = ref:run(ex, { [x] = feeds[x] }) })))
end

function TestPrecision:test_gray_follows_through_identity_in_the_upstream_dtype()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 2, 2 }, "a")
  local m = g:op("matmul", { a, a }, {}, "m")
  local id = npu.identity(m)
  local r = g:op("relu", { id }, {}, "r")
  local feeds = { [a] = npu.tensor({ { 1.1, 2 }, { 3, 4 } }) }
  for mode, dt in pairs { allow_mix_precision = "float16", allow_mix_precision_bf16 = "bfloat16" } do
    local sess = npu.Session { graph = g, options = { precision_mode = mode } }
    local p = plan_of(sess, r, feeds)
    lu.assertEquals({ p.m.dtype, p.r.dtype }, { dt, dt }, mode)
    local got = sess:run({ r, id }, feeds)
    lu.assertTrue(same(got[1], got[2]), mode) -- relu of positive values: exactly m in dt
    lu.assertTrue(same(got[2], round(got[2], dt)), mode)
  end
end

function TestPrecision:test_half_size_storage_and_casts()
  local g, v, feeds = chain()
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local p, casts, e = plan_of(sess, v.r2, feeds)
  lu.assertEquals(p.mm.dtype, "float16")
  lu.assertEquals(p.mm.bytes, 8 * 16 * 2)
  -- x and w cast down, r2 cast back for the fetch
  lu.assertEquals(casts, 3)
  lu.assertEquals(e.fetches[1].dtype, "float32")
  local last = e.steps[#e.steps]
  lu.assertEquals({ last.op, last.pass, last.outputs[1].dtype }, { "cast", "precision", "float32" })
  local y = sess:run(v.r2, feeds)
  lu.assertEquals(y:dtype(), "float32")
  lu.assertTrue(same(y, round(y)))
  -- origin: no casts, every value float32
  local o, ocasts = plan_of(npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } },
    v.r2, feeds)
  lu.assertEquals(ocasts, 0)
  lu.assertEquals(o.mm.bytes, 8 * 16 * 4)
end

function TestPrecision:test_constants_are_cast_once_at_compile_time()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local c = g:const(npu.tensor({ { 0.1, 0.2 }, { 0.3, 0.4 }, { 0.5, 0.6 } }), "c")
  local k = g:const(npu.tensor({ { 1, 2 }, { 3, 4.5 }, { 5, -0.25 } }), "k") -- float16 values
  local y, z = x:matmul(c), x:matmul(k)
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  local feeds = { [x] = npu.random.normal({ 2, 3 }, { seed = 9 }) }
  local _, casts, e = plan_of(sess, y, feeds)
  lu.assertEquals(casts, 2) -- x down and y back; c was converted when compiling
  lu.assertEquals(e.steps[2].inputs[2].dtype, "float16")
  lu.assertEquals(e.steps[2].inputs[2].memory, "constant")
  -- a constant holding float16 values already is read as it is: no copy, nothing to widen
  _, casts, e = plan_of(sess, z, feeds)
  lu.assertEquals(casts, 2)
  lu.assertEquals(e.steps[2].inputs[2].dtype, "float32")
  lu.assertEquals(e.steps[2].inputs[2].memory, "constant")
  lu.assertEquals(e.steps[2].round_in, "float16") -- x still is
  -- both equal the float32 graph run on rounded values, rounded
  local ref = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local r = sess:run({ y, z }, feeds)
  local rx = { [x] = round(feeds[x]) }
  lu.assertTrue(same(r[2], round(ref:run(z, rx))))
  local g2 = npu.Graph()
  local x2 = g2:placeholder("float32", { 2, 3 }, "x")
  local y2 = x2:matmul(g2:const(round(npu.tensor({ { 0.1, 0.2 }, { 0.3, 0.4 }, { 0.5, 0.6 } }))))
  local ref2 = npu.Session { graph = g2, options = { precision_mode = "must_keep_origin_dtype" } }
  lu.assertTrue(same(r[1], round(ref2:run(y2, { [x2] = round(feeds[x]) }))))
end

function TestPrecision:test_reduced_storage_needs_less_memory()
  -- sixteen [64, 1024] values live at once (all summed at the end): float16 halves them; the
  -- float32 buffer a float16 step computes in (its operands widened) costs one step's worth
  local g = npu.Graph()
  local x = g:placeholder("float32", { 64, 1024 }, "x")
  local h, parts = x, {}
  for i = 1, 16 do
    h = npu.nn.relu(h * 0.5)
    parts[i] = h
  end
  local y = npu.reduce_sum(parts[1])
  for i = 2, 16 do y = y + npu.reduce_sum(parts[i]) end
  local feed = { [x] = npu.random.normal({ 64, 1024 }, { seed = 6 }) }
  local function held(mode)
    collectgarbage(); collectgarbage()
    local base = npu.core.live_bytes()
    local sess = npu.Session { graph = g, options = { precision_mode = mode } }
    local r = sess:run(y, feed)
    local total = sess:explain(y, feed).memory.total_bytes
    collectgarbage(); collectgarbage()
    local bytes = npu.core.live_bytes() - base
    sess:close()
    return bytes, total, r
  end
  local b32, t32, r32 = held("must_keep_origin_dtype")
  local b16, t16, r16 = held("force_fp16")
  lu.assertTrue(b16 < 0.7 * b32, ("float16 %d bytes, float32 %d"):format(b16, b32))
  lu.assertTrue(t16 < 0.7 * t32, ("float16 %d bytes, float32 %d"):format(t16, t32))
  lu.assertTrue(npu.allclose(r16, r32, 1e-2, 1e-2))
end

function TestPrecision:test_keep_tensors_dtypes_keeps_an_op_float32()
  local g, v, feeds = chain()
  npu.util.keep_tensors_dtypes(g, { "r1:0" })
  npu.util.keep_tensors_dtypes(g, v.r0)
  local p = plan_of(npu.Session { graph = g, options = { precision_mode = "force_fp16" } },
    { v.r2, v.r0 }, feeds)
  lu.assertEquals(p.mm.dtype, "float16")
  lu.assertEquals(p.r1.dtype, "float32")
  lu.assertEquals(p.r0.dtype, "float32")
  lu.assertEquals(p.sm.dtype, "float16")
  -- in a mixed mode a kept op keeps the gray ops after it float32, as a block-list op does
  local g2 = npu.Graph()
  local x = g2:placeholder("float32", { 8, 32 }, "x")
  local w = g2:placeholder("float32", { 32, 16 }, "w")
  local mm = g2:op("matmul", { x, w }, {}, "mm")
  local r = g2:op("relu", { mm }, {}, "r")
  npu.util.keep_tensors_dtypes(g2, { mm })
  local m = plan_of(npu.Session { graph = g2, options = { precision_mode = "allow_mix_precision" } },
    r, { [x] = X, [w] = W })
  lu.assertEquals(m.mm.dtype, "float32")
  lu.assertEquals(m.r.dtype, "float32")
  -- values equal the float32 run for the kept op
  local ref = npu.Session { graph = g2, options = { precision_mode = "must_keep_origin_dtype" } }
  local s = npu.Session { graph = g2, options = { precision_mode = "force_fp16" } }
  lu.assertTrue(same(s:run(mm, { [x] = X, [w] = W }), ref:run(mm, { [x] = X, [w] = W })))
end

function TestPrecision:test_keep_tensors_dtypes_errors()
  local g, v = chain()
  local ok, err = pcall(npu.util.keep_tensors_dtypes, g, { "r1:0", "nope:0" })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "keep_tensors_dtypes: NPU_ERR_NOT_FOUND: no node named 'nope'")
  lu.assertFalse(g:keeps_dtype(v.r1:op():id())) -- nothing marked
  ok, err = pcall(npu.util.keep_tensors_dtypes, g, { "r1:3" })
  lu.assertStrContains(tostring(err), "has 1 output(s)")
  ok, err = pcall(npu.util.keep_tensors_dtypes, npu.Graph(), { v.r1 })
  lu.assertStrContains(tostring(err), "must be a tensor name")
  ok, err = pcall(npu.util.keep_tensors_dtypes, {}, {})
  lu.assertStrContains(tostring(err), "argument 1 must be an npu.Graph")
end

function TestPrecision:test_must_keep_origin_dtype_is_bitwise_the_reference_path()
  -- integer values whose sums stay exact in float32 in any order, but many not in float16:
  -- the device (OpenBLAS, threads) and the host reference must agree bit for bit
  local rnd = dofile(SPEC_DIR .. "/support.lua").lcg(7)
  local function ints(r, c)
    local t = {}
    for i = 1, r do
      t[i] = {}
      for j = 1, c do t[i][j] = rnd() % 601 - 300 end
    end
    return npu.tensor(t)
  end
  local xi, wi, bi = ints(8, 32), ints(32, 16), ints(8, 16)
  local g, x, w, b, _, y = graph()
  local feeds = { [x] = xi, [w] = wi, [b] = bi }
  local dev = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }:run(y, feeds)
  local host = npu.Session { graph = g, options = { use_off_line = false } }:run(y, feeds)
  lu.assertTrue(same(dev, host))
  lu.assertTrue(same(npu.Session { graph = g, options = { precision_mode_v2 = "origin" } }:run(y, feeds), host))
  local f16 = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }:run(y, feeds)
  lu.assertFalse(same(f16, host))
end

function TestPrecision:test_mixed_precision_training_keeps_updates_float32()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 8, 4 }, "x")
  local w = g:variable(npu.random.normal({ 4, 3 }, { seed = 11 }), "w")
  local loss = npu.reduce_mean(npu.square(x:matmul(w)))
  local train = npu.train.GradientDescentOptimizer(0.1):minimize(loss)
  local sess = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision" } }
  sess:run(g:global_variables_initializer())
  local feeds = { [x] = npu.random.normal({ 8, 4 }, { seed = 12 }) }
  local e = sess:explain({ loss, train }, feeds)
  -- the weight gradient's matmul and the update are one step (ApplyGradientDescentFusionPass)
  local update
  for _, s in ipairs(e.steps) do
    if s.op == "fused_apply_gradient_descent" then update = s end
  end
  lu.assertEquals(update.inputs[2].dtype, "float16")  -- the gradient's matmul is reduced
  lu.assertEquals(update.inputs[3].dtype, "float16")
  lu.assertEquals(update.inputs[1].dtype, "float32")  -- the update w - lr * g is not
  lu.assertEquals(update.outputs[1].dtype, "float32")
  local w0 = sess:run(w)
  sess:run(train, feeds)
  local w1 = sess:run(w)
  lu.assertFalse(same(w0, w1))
  lu.assertFalse(same(w1, round(w1))) -- not rounded to float16 on the way
end
