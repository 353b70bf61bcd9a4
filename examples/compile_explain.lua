-- compile_explain.lua — what the compiler does between sess:run and the kernels, seen through
-- sess:explain (docs/compiler.md): a small conv + dense model runs with the fusion passes on
-- (the default) and with a fusion_switch_file turning ALL of them off; both plans are
-- listed, their step counts compared and their results checked to agree.  Then the same
-- graph under precision_mode must_keep_origin_dtype and force_fp16: the dtype each step
-- stores its output in, and how far the float16 result is from the float32 one.
--
--   lua5.4 examples/compile_explain.lua [MODEL]     (MODEL: a TensorFlow.js model.json or a
--                                                    frozen .pb; default: the model built here)
--
-- It leaves no file behind: export_compile_stat = 0 (no fusion_result.json), and the switch
-- file is a temporary file, removed as soon as the session has read it.
local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/checkout.lua") -- runs from any directory, on this checkout's build or the rock
local npu = require("npu")

-- The model: x (N, 8, 8, 3) scaled to [-1, 1], a 3x3 convolution with a batch norm folded
-- in by hand (a per-channel scale and shift) and relu, 2x2 max pooling, then two dense layers
-- and softmax.  Weights from fixed seeds, so every run prints the same thing.
local function build()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 8, 8, 3 }, "image")
  local function const(shape, seed, name)
    return g:const(npu.random.normal(shape, { stddev = 0.3, seed = seed }), nil, name)
  end
  local scaled = (x - 0.5) * 2                                   -- an elementwise chain
  local conv = npu.nn.conv2d(scaled, const({ 3, 3, 3, 8 }, 1, "conv/filter"),
    { strides = { 1, 1, 1, 1 }, padding = "SAME", name = "conv" })
  local bn = conv * const({ 8 }, 2, "bn/scale") + const({ 8 }, 3, "bn/shift")
  local pooled = npu.nn.max_pool(npu.nn.relu(bn), { ksize = { 1, 2, 2, 1 },
    strides = { 1, 2, 2, 1 }, padding = "VALID", name = "pool" })
  local flat = npu.reshape(pooled, { -1, 4 * 4 * 8 })
  local hidden = npu.nn.relu(npu.nn.bias_add(flat:matmul(const({ 128, 32 }, 4, "dense1/kernel")),
    const({ 32 }, 5, "dense1/bias")))
  local logits = npu.nn.bias_add(hidden:matmul(const({ 32, 10 }, 6, "dense2/kernel")),
    const({ 10 }, 7, "dense2/bias"), { name = "logits" })
  return g, x, npu.nn.softmax(logits, { name = "probs" })
end

local g, x, y
if arg[1] then
  local info
  g, info = npu.load_model(arg[1])
  x = g:get_tensor_by_name(info.input_names[1])
  y = g:get_tensor_by_name(info.output_names[1])
else
  g, x, y = build()
end

-- A batch of 2 (unknown dims of a loaded model's input: 2 for the batch, else 1).
local shape = {}
for i, d in ipairs(x:shape()) do shape[i] = d >= 0 and d or (i == 1 and 2 or 1) end
local feeds = { [x] = npu.random.uniform(shape, { minval = 0, maxval = 1, seed = 7 }) }

local function session(options, switches)
  local o = { export_compile_stat = 0 } -- no fusion_result.json
  for k, v in pairs(options) do o[k] = v end
  local path
  if switches then
    path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(switches)
    f:close()
    o.fusion_switch_file = path
  end
  local ok, sess = pcall(npu.Session, { graph = g, options = o })
  if path then os.remove(path) end -- read when the session is created
  if not ok then error(sess, 0) end
  return sess
end

local function flat(t) return t:reshape({ t:numel() }):totable() end

-- max |a - b| over max |b|
local function rel_diff(a, b)
  local p, q = flat(a), flat(b)
  assert(#p == #q, "results differ in size")
  local d, peak = 0, 0
  for i = 1, #p do
    d = math.max(d, math.abs(p[i] - q[i]))
    peak = math.max(peak, math.abs(q[i]))
  end
  return d / math.max(peak, 1e-30)
end

-- 1. Fusion: the default passes against a switch file turning every pass off.
local fp32 = { precision_mode = "must_keep_origin_dtype" }
local on = session(fp32)
local off = session(fp32, '{"Switch":{"GraphFusion":{"ALL":"off"},"UBFusion":{"ALL":"off"}}}')
local e_on, e_off = on:explain(y, feeds), off:explain(y, feeds)
print("== fusion passes on (the default)")
print(e_on)
print("== fusion passes off (fusion_switch_file: ALL off)")
print(e_off)
local fused = 0
for _, s in ipairs(e_on.steps) do
  if s.pass then fused = fused + 1 end
end
print(("steps: %d with the passes on (%d fused), %d with them off"):format(e_on.n_steps, fused,
  e_off.n_steps))
local d = rel_diff(on:run(y, feeds), off:run(y, feeds))
-- fusion reorders float32 sums at most (docs/compiler.md: tolerances)
assert(d <= 1e-5, ("fused and unfused results differ: %.3g of the peak"):format(d))
print(("results agree: max |fused - unfused| = %.3g of the peak"):format(d))
on:close()
off:close()

-- 2. Precision: what each step stores its output in.
local results = {}
for _, mode in ipairs({ "must_keep_origin_dtype", "force_fp16" }) do
  local sess <close> = session({ precision_mode = mode })
  local e = sess:explain(y, feeds)
  local counts, order = {}, {}
  for _, s in ipairs(e.steps) do
    for _, v in ipairs(s.outputs) do
      if not counts[v.dtype] then counts[v.dtype], order[#order + 1] = 0, v.dtype end
      counts[v.dtype] = counts[v.dtype] + 1
    end
  end
  local parts = {}
  for i, dt in ipairs(order) do parts[i] = ("%d %s"):format(counts[dt], dt) end
  print(("precision_mode %s: %d steps, step outputs: %s"):format(mode, e.n_steps,
    table.concat(parts, ", ")))
  for _, s in ipairs(e.steps) do
    print(("  %-18s %-14s -> %s%s"):format(s.op, s.node, s.outputs[1] and s.outputs[1].dtype or "-",
      s.round_in and (" (stored " .. s.round_in .. ", computed in float32)") or ""))
  end
  results[mode] = sess:run(y, feeds)
  print(("  fetched: %s"):format(results[mode]:dtype()))
end
print(("force_fp16 against float32: max |d| = %.3g of the peak"):format(
  rel_diff(results.force_fp16, results.must_keep_origin_dtype)))
