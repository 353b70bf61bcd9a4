-- bf16_train_spec.lua — the accuracy side of precision_mode = allow_mix_precision_bf16 as a
-- user meets it: the MLP 784-256-256-10 of bench/bench_mlp.c, trained with SGD from the same
-- seeded weights on the same batches, reaches about the loss float32 reaches.  The task is
-- learnable (labels from a fixed random linear teacher), so the loss falls well below ln 10;
-- bfloat16 keeps 8 significant bits, so the two runs' losses differ, but by far less than what
-- training gains.  Whatever kernels compute bfloat16 (widened to float32 or native dot
-- products), this must hold; the plan is checked to really store bfloat16.
local lu = require("luaunit")
local npu = require("npu")

local B, STEPS, N_BATCHES = 64, 100, 4

-- The data: N_BATCHES batches of x in [-1, 1), labels the argmax of x T - mean (a fixed linear
-- teacher), computed once in float32.
local function data()
  local g = npu.Graph()
  local x = g:placeholder("float32", { B, 784 }, "x")
  local t = g:const(npu.random.normal({ 784, 10 }, { seed = 77 }))
  local s = npu.matmul(x, t)
  local label = npu.argmax(s - npu.reduce_mean(s, { 0 }, true), 1)
  local sess <close> = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local batches = {}
  for i = 1, N_BATCHES do
    local xb = npu.random.uniform({ B, 784 }, { minval = -1, maxval = 1, seed = 100 + i })
    batches[i] = { x = xb, y = sess:run(label, { [x] = xb }):astype("int32") }
  end
  return batches
end

-- Trains STEPS steps under the precision mode; returns the mean loss over the batches before
-- and after, and the session's plan of the training step.
local function train(mode, batches)
  local g = npu.Graph()
  local x = g:placeholder("float32", { B, 784 }, "x")
  local y = g:placeholder("int32", { B }, "y")
  local init = npu.initializers.glorot_uniform
  local h1 = npu.layers.dense(x, 256, { activation = "relu", kernel_initializer = init { seed = 1 } })
  local h2 = npu.layers.dense(h1, 256, { activation = "relu", kernel_initializer = init { seed = 2 } })
  local logits = npu.layers.dense(h2, 10, { kernel_initializer = init { seed = 3 } })
  local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits { labels = y, logits = logits })
  local train_op = npu.train.GradientDescentOptimizer(0.05):minimize(loss)
  local sess <close> = npu.Session { graph = g, options = { precision_mode = mode } }
  sess:run(g:global_variables_initializer())
  local function mean_loss()
    local s = 0
    for _, b in ipairs(batches) do s = s + sess:run(loss, { [x] = b.x, [y] = b.y }):item() end
    return s / #batches
  end
  local before = mean_loss()
  for i = 1, STEPS do
    local b = batches[(i - 1) % #batches + 1]
    sess:run(train_op, { [x] = b.x, [y] = b.y })
  end
  local plan = sess:explain(train_op, { [x] = batches[1].x, [y] = batches[1].y })
  return before, mean_loss(), plan
end

TestBf16Training = {}

function TestBf16Training:test_mixed_bf16_reaches_the_float32_loss()
  local batches = data()
  local b32, a32 = train("must_keep_origin_dtype", batches)
  local b16, a16, plan = train("allow_mix_precision_bf16", batches)
  print(("\n  MLP %d SGD steps: loss float32 %.4f -> %.4f, allow_mix_precision_bf16 %.4f -> %.4f")
    :format(STEPS, b32, a32, b16, a16))
  -- the mixed plan stores bfloat16 (else this would compare float32 with itself)
  local reduced = 0
  for _, s in ipairs(plan.steps) do
    for _, o in ipairs(s.outputs) do
      if o.dtype == "bfloat16" then reduced = reduced + 1 end
    end
  end
  lu.assertTrue(reduced >= 3, "the mixed plan writes bfloat16 values: " .. reduced)
  -- same start (the initial loss only sees bfloat16 rounding of a forward pass)
  lu.assertAlmostEquals(b16, b32, 0.02 * b32)
  -- float32 learns: the loss falls by more than half
  lu.assertTrue(a32 < 0.5 * b32, ("float32 loss %.4f -> %.4f"):format(b32, a32))
  -- bf16 gets as far, within 10 % of what float32 gained
  lu.assertTrue(math.abs(a16 - a32) <= 0.1 * (b32 - a32),
    ("bf16 loss %.4f against float32 %.4f (from %.4f)"):format(a16, a32, b32))
end
