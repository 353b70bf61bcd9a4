-- weight_update.lua — updating weights during online inference (002 §5.5), ported from the
-- reference's sample: the inference graph gets, for each variable, a placeholder and an assign
-- op; new weights (from a training server, here made up) are pushed with one run of the grouped
-- update op, then inference continues in the same session, with nothing recompiled.
--
--   lua5.4 examples/weight_update.lua
local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/checkout.lua") -- runs from any directory, on this checkout's build or the rock
local npu = require("npu")

local TestPolicy = {}
TestPolicy.__index = TestPolicy

function TestPolicy.new()
  local self = setmetatable({}, TestPolicy)
  -- The model (in the reference it comes from a checkpoint).
  local g = npu.Graph()
  self.graph = g
  self.input = g:placeholder("float32", { -1, 16 }, "input")
  local w1 = g:variable(npu.random.normal({ 16, 32 }, { stddev = 0.3, seed = 1 }), "dense/kernel")
  local b1 = g:variable(npu.zeros({ 32 }), "dense/bias")
  local w2 = g:variable(npu.random.normal({ 32, 4 }, { stddev = 0.3, seed = 2 }), "logits/kernel")
  self.output = npu.nn.softmax(npu.nn.relu(self.input:matmul(w1) + b1):matmul(w2), { name = "probs" })

  -- The session, configured as the sample does.
  local config = npu.ConfigProto()
  local custom_op = config.graph_options.rewrite_options.custom_optimizers:add()
  custom_op.name = "NpuOptimizer"
  custom_op.parameter_map["use_off_line"].b = true
  custom_op.parameter_map["precision_mode"].s = npu.compat.as_bytes("force_fp16")
  config.graph_options.rewrite_options.remapping = npu.RewriterConfig.OFF
  custom_op.parameter_map["graph_run_mode"].i = 0
  custom_op.parameter_map["stream_max_parallel_num"].s = npu.compat.as_bytes("AIcoreEngine:4")
  self.sess = npu.Session { graph = g, config = config }
  self.sess:run(g:global_variables_initializer())

  -- The weight-update graph: a placeholder and an assign per variable, grouped.
  self.vars = g:global_variables()
  self.placeholders = {}
  local updates = {}
  for id, var in ipairs(self.vars) do
    local ph = g:placeholder(var:dtype(), var:shape(), "PlaceHolder_" .. (id - 1))
    self.placeholders[var:op():name()] = ph
    updates[#updates + 1] = npu.assign(var, ph)
  end
  self.update_op = g:group(updates, "update_weights")
  return self
end

-- New weights by variable name (in the reference: key-value pairs from the training server).
function TestPolicy:update(key_value)
  local feeds = {}
  for name, value in pairs(key_value) do
    local ph = self.placeholders[name] or error("no variable named " .. name)
    feeds[ph] = value
  end
  self.sess:run(self.update_op, feeds)
end

function TestPolicy:infer(batch)
  return self.sess:run(self.output, { [self.input] = batch })
end

function TestPolicy:unload()
  print("===== start to unload =====")
  self.sess:close()
end

local policy = TestPolicy.new()
local batch = npu.random.uniform({ 2, 16 }, { seed = 3 })
local before = policy:infer(batch)
print("before update:", before)

-- Fresh weights, as a training server would send them.
local fresh = {}
for i, var in ipairs(policy.vars) do
  fresh[var:op():name()] = npu.random.normal(var:shape(), { stddev = 0.3, seed = 100 + i })
end
policy:update(fresh)
local after = policy:infer(batch)
print("after update: ", after)
assert(not npu.allclose(before, after), "the update changed nothing")
-- initializer, inference and update: each compiled once, however many updates follow
print(("plans compiled: %d"):format(policy.sess:n_plans()))
policy:unload()
