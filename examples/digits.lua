-- digits.lua — what train_digits.lua and train_digits_distributed.lua share: the 8x8 digits
-- (examples/data/README.md) split into a training and a test set, the MLP (64-128-10), its
-- evaluation on a placeholder, the session's configuration and the test accuracy.  Not an
-- example itself: the two require it (their package.path has their own directory, so both run
-- from any directory).
local npu = require("npu")

-- The data files sit beside this file, wherever the script was started from.
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

local digits = {}

-- The data: pixel counts 0..16 scaled to [0, 1]; a fixed shuffled split (seeded Fisher-Yates
-- in plain Lua, so the split is the same everywhere, on every rank), n_test for the test set.
-- Returns x_train, y_train, x_test, y_test, n_train.
function digits.load(n_test)
  local images = npu.load(here .. "/data/digits_images.npy"):astype("float32"):totable()
  local labels = npu.load(here .. "/data/digits_labels.npy"):astype("int32"):totable()
  local order, state = {}, 20240601
  for i = 1, #images do order[i] = i end
  for i = #order, 2, -1 do
    state = (state * 1103515245 + 12345) % 2147483648
    local j = state % i + 1
    order[i], order[j] = order[j], order[i]
  end
  local function subset(from, to)
    local xs, ys = {}, {}
    for k = from, to do
      local row = {}
      for j, v in ipairs(images[order[k]]) do row[j] = v / 16 end
      xs[#xs + 1], ys[#ys + 1] = row, labels[order[k]]
    end
    return npu.tensor(xs, "float32"), npu.tensor(ys, "int32")
  end
  local n_train = #order - n_test
  local x_train, y_train = subset(1, n_train)
  local x_test, y_test = subset(n_train + 1, #order)
  return x_train, y_train, x_test, y_test, n_train
end

-- The model's logits for x (a batch of 64 pixels): layers "hidden" (128, relu) and "logits".
function digits.model(x)
  local init = npu.initializers.glorot_uniform
  local h = npu.layers.dense(x, 128, { activation = "relu", kernel_initializer = init { seed = 1 }, name = "hidden" })
  return npu.layers.dense(h, 10, { kernel_initializer = init { seed = 2 }, name = "logits" })
end

-- Evaluation shares the variables: the same layers applied to a placeholder of g.  Returns the
-- placeholder and the predicted classes.
function digits.evaluation(g)
  local x_eval = g:placeholder("float32", { -1, 64 }, "x_eval")
  local eval_logits = npu.nn.bias_add(
    npu.nn.relu(npu.nn.bias_add(x_eval:matmul(g:get_tensor_by_name("hidden/kernel:0")),
      g:get_tensor_by_name("hidden/bias:0"))):matmul(g:get_tensor_by_name("logits/kernel:0")),
    g:get_tensor_by_name("logits/bias:0"))
  return x_eval, npu.argmax(eval_logits, 1, { output_type = "int32" })
end

-- The session's configuration, as a training script on the reference writes it; returns the
-- ConfigProto and its NpuOptimizer entry (for more parameters).
function digits.config(iterations_per_loop)
  local config = npu.ConfigProto()
  local custom_op = config.graph_options.rewrite_options.custom_optimizers:add()
  custom_op.name = "NpuOptimizer"
  custom_op.parameter_map["iterations_per_loop"].i = iterations_per_loop
  custom_op.parameter_map["enable_data_pre_proc"].b = true
  custom_op.parameter_map["precision_mode"].s = npu.compat.as_bytes("must_keep_origin_dtype")
  config.graph_options.rewrite_options.remapping = npu.RewriterConfig.OFF
  return config, custom_op
end

-- The line saying the test accuracy of predictions, after steps steps since t_start.
function digits.accuracy(sess, predictions, x_eval, x_test, y_test, steps, t_start)
  local predicted = sess:run(predictions, { [x_eval] = x_test }):totable()
  local correct = 0
  for i, want in ipairs(y_test:totable()) do
    if predicted[i] == want then correct = correct + 1 end
  end
  return ("test accuracy: %.2f %% (%d/%d), %d steps in %.2f s"):format(100 * correct / #predicted,
    correct, #predicted, steps, npu.core.monotonic_time() - t_start)
end

return digits
