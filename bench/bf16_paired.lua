-- bf16_paired.lua — does keeping fused biases float32 (precision.c keep_epilogue_f32) change a
-- shared model's bfloat16 error, beyond the draw of inputs?  Three sessions of the model of
-- ../shared/models (or $NPU_MODELS_DIR): float32 (must_keep_origin_dtype), allow_mix_precision_bf16
-- as it is ("after": biases and prelu slopes of fused steps float32) and the same with a
-- customize_dtypes file giving those operands bfloat16 ("before": the plan before that change),
-- run on the same N inputs (input_0.npy, then uniform draws in [0, 1), seeds 1001...: the range
-- of every shared model's input).  Per input, the error of a bfloat16 plan is the largest
-- |y - y32| over all outputs divided by the peak |y32| (y32: the float32 session's outputs).
--   lua5.4 bench/bf16_paired.lua [N] [NAME ...]        (default 200 emotion)
--   lua5.4 bench/bf16_paired.lua --dump DIR [N] [NAME]  (default 3 emotion) instead writes the
--     first N inputs (DIR/x_K.npy) and every step's output under both bfloat16 plans
--     (DIR/after_K_I.npy, DIR/before_K_I.npy, I the line of DIR/names.txt) for
--     bench/bf16_offset.py --layers DIR, which recomputes each op from our inputs to it
-- Prints, per model: the mean error of each plan, after / before (a 95 % bootstrap interval over
-- inputs: 2000 resamples of the N paired errors), on how many inputs after is the worse, for
-- a model of at most 16 output numbers on which of them each input's largest error falls, and,
-- where the plan ends in a softmax, each logit's (the softmax's input's) mean error and its
-- standard deviation over the inputs: a fixed offset is the same on every input, a random error
-- averages to nothing.  bench/bf16_offset.py takes the same question to a float64 emulation.
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
local npu = require("npu")
local model = require("npu.model")

local DIR = os.getenv("NPU_MODELS_DIR") or here .. "/../shared/models"
local N, names, DUMP = nil, {}, nil
local argv = arg or {}
if argv[1] == "--dump" then DUMP = assert(argv[2], "--dump wants a directory") end
for i = DUMP and 3 or 1, #argv do
  local a = argv[i]
  if tonumber(a) then N = math.tointeger(tonumber(a)) or -1 else names[#names + 1] = a end
end
N = N or (DUMP and 3 or 200)
if #names == 0 then names = { "emotion" } end
assert(N >= (DUMP and 1 or 2), "usage: lua5.4 bench/bf16_paired.lua [--dump DIR] [N >= 2] [NAME ...]")

local function flat(t) return t:reshape({ t:numel() }):totable() end

-- A customize_dtypes file giving every float32 operand of the fused convolution and matmul
-- steps of explain e bfloat16 (the bias and slopes keep_epilogue_f32 keeps); its path.
local function before_cfg(e)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  for _, st in ipairs(e.steps) do
    if st.op:match("^fused_") and st.inputs[3] and st.inputs[3].dtype == "float32" then
      f:write(st.node, "::InputDtype:", ("bfloat16,"):rep(#st.inputs - 1), "bfloat16\n")
    end
  end
  f:close()
  return path
end

-- mean of the numbers t[i] for i in idx (all of t when idx is nil)
local function mean(t, idx)
  local s, n = 0, idx and #idx or #t
  for k = 1, n do s = s + t[idx and idx[k] or k] end
  return s / n
end

local function study(name)
  local g, info = model.load_model(("%s/%s/%s.json"):format(DIR, name, name))
  local x0 = {}
  for i, e in ipairs(info.inputs) do x0[i] = npu.load(("%s/%s/input_%d.npy"):format(DIR, name, i - 1)) end
  local function feeds(k)
    local f = {}
    for i, e in ipairs(info.inputs) do
      f[e.name] = k == 1 and x0[i] or npu.random.uniform(x0[i]:shape(), { seed = 1000 + 10 * k + i })
    end
    return f
  end
  local fetch = {}
  for i, o in ipairs(info.output_names) do fetch[i] = o end
  local after = npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16" } }
  local e = after:explain(fetch, feeds(1))
  -- the logits: the input of the last softmax step, when a plan ends in one
  local logits
  for _, st in ipairs(e.steps) do
    if st.op == "softmax" then logits = st.inputs[1].name end
  end
  if logits then fetch[#fetch + 1] = logits end
  local cfg = before_cfg(e)
  local sessions = {
    npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }, after,
    npu.Session { graph = g, options = { precision_mode = "allow_mix_precision_bf16", customize_dtypes = cfg } } }
  os.remove(cfg)
  if DUMP then -- every step's output (fetching these leaves the plan as it is)
    local all, seen, list = {}, {}, assert(io.open(DUMP .. "/names.txt", "w"))
    for _, st in ipairs(e.steps) do
      local v = st.outputs[1] and st.outputs[1].name
      if v and not seen[v] then
        seen[v] = true
        all[#all + 1] = v
        list:write(#all, " ", v, "\n")
      end
    end
    list:close()
    for k = 1, N do
      local f = feeds(k)
      f[info.inputs[1].name]:save(("%s/x_%d.npy"):format(DUMP, k))
      for i, label in ipairs { "after", "before" } do
        for j, y in ipairs(sessions[i + 1]:run(all, f)) do y:save(("%s/%s_%d_%d.npy"):format(DUMP, label, k, j)) end
      end
    end
    return
  end
  local err, dl, where, n_out = { {}, {} }, { {}, {} }, { {}, {} }, 0
  for k = 1, N do
    local f, outs = feeds(k), {}
    for i, s in ipairs(sessions) do outs[i] = s:run(fetch, f) end
    local peak = 0
    for j = 1, #info.output_names do
      for _, v in ipairs(flat(outs[1][j])) do peak = math.max(peak, math.abs(v)) end
    end
    for i = 2, 3 do
      local m, at, base = 0, 0, 0
      for j = 1, #info.output_names do
        local a, b = flat(outs[i][j]), flat(outs[1][j])
        for q = 1, #b do
          if math.abs(a[q] - b[q]) > m then m, at = math.abs(a[q] - b[q]), base + q end
        end
        base = base + #b
      end
      err[i - 1][k] = peak > 0 and m / peak or m
      where[i - 1][at] = (where[i - 1][at] or 0) + 1
      n_out = base
      if logits then
        local a, b, d = flat(outs[i][#fetch]), flat(outs[1][#fetch]), {}
        for q = 1, #b do d[q] = a[q] - b[q] end
        dl[i - 1][k] = d
      end
    end
  end
  local ea, eb = mean(err[1]), mean(err[2])
  math.randomseed(2)
  local ratios, idx = {}, {}
  for r = 1, 2000 do
    for k = 1, N do idx[k] = math.random(N) end
    ratios[r] = mean(err[1], idx) / mean(err[2], idx)
  end
  table.sort(ratios)
  local worse = 0
  for k = 1, N do if err[1][k] > err[2][k] then worse = worse + 1 end end
  print(("%s, %d inputs: mean error after %.3e, before %.3e; after / before %.3f (95 %% %.3f-%.3f);"
    .. " after worse on %d"):format(name, N, ea, eb, ea / eb, ratios[51], ratios[1950], worse))
  if n_out <= 16 then -- few outputs: which element carries an input's largest error, how often
    for i, label in ipairs { "after ", "before" } do
      local c = {}
      for q = 1, n_out do c[q] = tostring(where[i][q] or 0) end
      print(("  largest error on output element 1..%d, inputs, %s: %s"):format(n_out, label, table.concat(c, " ")))
    end
  end
  if logits then
    for i, label in ipairs { "after ", "before" } do
      local off, sd = {}, {}
      for q = 1, #dl[i][1] do
        local s, s2 = 0, 0
        for k = 1, N do s, s2 = s + dl[i][k][q], s2 + dl[i][k][q] ^ 2 end
        off[q] = ("%+6.1f"):format(1e3 * s / N)
        sd[q] = ("%4.1f"):format(1e3 * math.sqrt(math.max(s2 / N - (s / N) ^ 2, 0)))
      end
      print(("  logit error (1e-3) %s: mean %s   sd %s"):format(label, table.concat(off, " "), table.concat(sd, " ")))
    end
  end
end

npu.core.set_n_threads(1)
for _, n in ipairs(names) do
  local ok, msg = pcall(study, n)
  if not ok then print(("%s: skipped: %s"):format(n, tostring(msg))) end
end
