-- freeze.lua — what freezing a trained graph (npu.graph_util.convert_variables_to_constants)
-- buys at inference: the MLP 784-256-256-10 forward at batch 1 and 64, and bench_cnn's CNN
-- (28x28x1 -> conv3x3x32 + relu -> max pool -> conv3x3x64 + relu -> max pool -> dense 10) at
-- batch 32, and a recurrent cell in a while loop (h = tanh(h W + b), 20 iterations, 256
-- wide, batch 1: the weights read inside the loop body), each under float32 (must_keep_origin_dtype) and allow_mix_precision_bf16, with
-- its weights as variables and frozen to consts.  Under bfloat16 a variable is cast to
-- bfloat16 once per write: the plan keeps the copy ("kept" casts, explain's copy_of) while
-- nothing writes the variable; a const is stored bfloat16 once, when the plan compiles, and a
-- constant convolution filter (direct_bf16) or GEMM B (bf16dot) is packed once per plan (a
-- variable's kept copy is still packed at each call).
-- One thread; the four sessions of a model timed in turn (CPU time), REPS rounds, medians;
-- µs per run.
-- Usage: lua5.4 bench/freeze.lua [reps]
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = "./?.so;" .. package.cpath
local npu = require("npu")
local now = os.clock -- CPU time: one thread on a shared machine (wall time counts the others)
local util = dofile("bench/util.lua")
local median = util.median
local REPS = tonumber(arg[1]) or 15
npu.core.set_n_threads(1)

local function mlp(batch)
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, 784 }, "x")
  npu.nn.softmax(util.mlp_logits(npu, x), { name = "probs" })
  return g, npu.random.uniform({ batch, 784 }, { seed = 8 })
end

local function cnn(batch)
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, 28, 28, 1 }, "x")
  npu.nn.softmax(util.cnn_logits(npu, x, batch), { name = "probs" })
  return g, npu.random.uniform({ batch, 28, 28, 1 }, { seed = 8 })
end

local function rnn(batch)
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, 256 }, "x")
  local w = g:variable(npu.random.normal({ 256, 256 }, { stddev = 0.06, seed = 1 }), "w")
  local b = g:variable(npu.zeros({ 256 }), "b")
  local r = npu.while_loop(function(i) return npu.less(i, 20) end,
    function(i, h) return i + 1, npu.tanh(npu.matmul(h, w) + b) end, { 0, x })
  npu.nn.softmax(r[2], { name = "probs" })
  return g, npu.random.uniform({ batch, 256 }, { seed = 8 })
end

-- The four sessions of one model: {float32, bf16} x {variables, frozen}, and how many cast
-- steps each plan runs.
local MODES = { "must_keep_origin_dtype", "allow_mix_precision_bf16" }
local function sessions(build, batch)
  local list = {}
  for _, mode in ipairs(MODES) do
    local g, xb = build(batch)
    local sess = npu.Session { graph = g, options = { precision_mode = mode } }
    sess:run(g:global_variables_initializer())
    local frozen = npu.graph_util.convert_variables_to_constants(sess, g, { "probs" })
    local fsess = npu.Session { graph = frozen, options = { precision_mode = mode } }
    for _, s in ipairs { sess, fsess } do
      local feeds = { ["x:0"] = xb }
      local casts, kept, algos = 0, 0, {}
      for _, st in ipairs(s:explain("probs:0", feeds).steps) do
        if st.op == "cast" then casts = casts + 1 end
        if st.copy_of then kept = kept + 1 end
        if st.algo then algos[#algos + 1] = st.algo end
      end
      list[#list + 1] = { sess = s, feeds = feeds, casts = casts, kept = kept, algos = table.concat(algos, ","),
                          name = (mode:match("bf16") and "bf16" or "f32") .. (s == sess and " variables" or " frozen"),
                          times = {} }
    end
    -- same inputs, same bits: the frozen graph rounds at the same points
    local a = sess:run("probs:0", list[#list].feeds):totable()
    local b = fsess:run("probs:0", list[#list].feeds):totable()
    local equal = true
    for r = 1, #a do equal = equal and table.concat(a[r], ",") == table.concat(b[r], ",") end
    list[#list].bits_equal = equal
  end
  return list
end

local function bench(title, list, iters)
  for _, c in ipairs(list) do for _ = 1, 3 do c.sess:run("probs:0", c.feeds) end end
  for _ = 1, REPS do
    for _, c in ipairs(list) do
      local t0 = now()
      for _ = 1, iters do c.sess:run("probs:0", c.feeds) end
      c.times[#c.times + 1] = (now() - t0) / iters
    end
  end
  print(title)
  local base = median(list[1].times)
  for i, c in ipairs(list) do
    local t = median(c.times)
    local vs_var = i % 2 == 0 and ("  frozen/variables %.2f"):format(t / median(list[i - 1].times)) or ""
    print(("  %-15s %9.1f µs  x%.2f of f32 variables%s  (%d casts%s%s%s)"):format(c.name, t * 1e6,
      t / base, vs_var, c.casts, c.kept > 0 and (", %d kept"):format(c.kept) or "", c.algos ~= "" and "; " .. c.algos or "",
      c.bits_equal ~= nil and ("; frozen bits %s"):format(c.bits_equal and "equal" or "DIFFER") or ""))
  end
end

if os.getenv("FREEZE_RNN_ONLY") then
  bench("RNN cell 256 wide in a while loop of 20 iterations, batch 1", sessions(rnn, 1), 100)
  return
end
if not os.getenv("FREEZE_CNN_ONLY") then
  bench("MLP 784-256-256-10 forward, batch 1", sessions(mlp, 1), 300)
  bench("MLP 784-256-256-10 forward, batch 64", sessions(mlp, 64), 30)
end
bench("RNN cell 256 wide in a while loop of 20 iterations, batch 1", sessions(rnn, 1), 100)
bench("CNN 28x28x1 conv32-pool-conv64-pool-dense10 forward, batch 32", sessions(cnn, 32), 5)
