-- quickstart.lua — build an MLP (784-256-10), configure a session exactly as the reference's
-- online-inference sample does (infer_from_pb.py), run a batch, print the top classes.
--
--   lua5.4 examples/quickstart.lua        (after `make`, or with the rock installed)
local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/checkout.lua") -- runs from any directory, on this checkout's build or the rock
local npu = require("npu")

-- The model: weights from fixed seeds, so every run prints the same thing.
local g = npu.Graph()
local x = g:placeholder("float32", { -1, 784 }, "input_data")
local w1 = g:variable(npu.random.normal({ 784, 256 }, { stddev = 0.05, seed = 1 }), "dense1/kernel")
local b1 = g:variable(npu.zeros({ 256 }), "dense1/bias")
local w2 = g:variable(npu.random.normal({ 256, 10 }, { stddev = 0.05, seed = 2 }), "dense2/kernel")
local b2 = g:variable(npu.zeros({ 10 }), "dense2/bias")
local hidden = npu.nn.relu(npu.nn.bias_add(x:matmul(w1), b1))
local logits = npu.nn.bias_add(hidden:matmul(w2), b2, { name = "logits" })
local probs = npu.nn.softmax(logits, { name = "probs" })

-- The session configuration of the reference's inference sample, line by line.
local config = npu.ConfigProto()
local custom_op = config.graph_options.rewrite_options.custom_optimizers:add()
custom_op.name = "NpuOptimizer"
custom_op.parameter_map["use_off_line"].b = true                         -- run on the device
custom_op.parameter_map["precision_mode"].s = npu.compat.as_bytes("force_fp16")
custom_op.parameter_map["graph_run_mode"].i = 0                          -- online inference
config.graph_options.rewrite_options.remapping = npu.RewriterConfig.OFF
config.graph_options.rewrite_options.memory_optimization = npu.RewriterConfig.OFF

local sess <close> = npu.Session { graph = g, config = config }
sess:run(g:global_variables_initializer())

-- A batch of 4 "images" (seeded noise standing in for data).
local batch = npu.random.uniform({ 4, 784 }, { minval = 0, maxval = 1, seed = 7 })
local out = sess:run(probs, { [x] = batch })
print("output", out)
print(("output shape: {%s}"):format(table.concat(out:shape(), ", ")))

local top = sess:run(npu.argmax(logits, 1), { [x] = batch }):totable()
for i, row in ipairs(out:totable()) do
  print(("image %d: top class %d (p = %.4f)"):format(i, top[i], row[top[i] + 1]))
end
