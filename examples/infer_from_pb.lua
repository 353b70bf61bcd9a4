-- infer_from_pb.lua — the reference's online-inference sample (002 §4, infer_from_pb.py),
-- ported: load a trained frozen graph, configure the session once (use_off_line, force_fp16,
-- graph_run_mode 0, remapping and memory optimisation off), run the batches in a loop, and
-- report the first run (which compiles the graph) apart from the steady state.
--
--   lua5.4 examples/infer_from_pb.lua [--model_path=model.pb|model.json|saved_model_dir]
--          [--batchsize=4]
--          [--batches=20] [--input_tensor_name=data:0] [--output_tensor_name=...:0]
--          [--precision_mode=force_fp16]
--
-- Without --model_path the sample takes mobileface from ../shared/models (a face-embedding
-- network, TensorFlow.js graph model) and first converts it to a frozen .pb, so that what it
-- then loads is a .pb as in the reference.  The reference reads ImageNet JPEGs; here each
-- batch is seeded noise of the input's shape (preprocessing is not the point of the sample).
local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/checkout.lua") -- runs from any directory, on this checkout's build or the rock
local npu = require("npu")
local model = require("npu.model")
local clock = npu.core.monotonic_time -- wall time (os.clock would add up every device thread)

-- Command line, argparse-style (--name=value); unknown arguments are errors, as in the reference.
local defaults = { model_path = "", batchsize = "4", batches = "20", input_tensor_name = "",
  output_tensor_name = "", precision_mode = "force_fp16" }
local args = {}
for k, v in pairs(defaults) do args[k] = v end
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^%-%-?([%w_]+)=(.*)$")
  if not k or defaults[k] == nil then
    io.stderr:write("ERROR: Unknown command line arg: " .. a .. "\n")
    os.exit(2)
  end
  args[k] = v
end
local batch_size, n_batches = tonumber(args.batchsize), tonumber(args.batches)
assert(batch_size and batch_size >= 1 and n_batches and n_batches >= 2, "--batchsize >= 1, --batches >= 2")

-- The model: the given file, or mobileface converted to .pb.
local model_path, tmpdir = args.model_path, nil
if model_path == "" then
  local json = (os.getenv("NPU_MODELS_DIR") or here .. "/../../shared/models") .. "/mobileface/mobileface.json"
  local g = model.load_model(json)
  tmpdir = os.tmpname()
  os.remove(tmpdir)
  os.execute("mkdir -p '" .. tmpdir .. "'")
  model_path = tmpdir .. "/mobileface.pb"
  model.export_graph_def(g, model_path)
  print(("converted %s to %s"):format(json, model_path))
end

local Classifier = {}
Classifier.__index = Classifier

function Classifier.new()
  local self = setmetatable({}, Classifier)
  -- Model compilation and optimisation settings, as the reference sets them.
  local config = npu.ConfigProto()
  local custom_op = config.graph_options.rewrite_options.custom_optimizers:add()
  custom_op.name = "NpuOptimizer"
  custom_op.parameter_map["use_off_line"].b = true                   -- 1: run on the device
  custom_op.parameter_map["precision_mode"].s = npu.compat.as_bytes(args.precision_mode) -- 2
  custom_op.parameter_map["graph_run_mode"].i = 0                    -- 3: inference
  config.graph_options.rewrite_options.remapping = npu.RewriterConfig.OFF -- 4
  config.graph_options.rewrite_options.memory_optimization = npu.RewriterConfig.OFF
  -- Load the model and name its input and output.
  local info
  self.graph, info = model.load_model(model_path)
  self.input_tensor = self.graph:get_tensor_by_name(args.input_tensor_name ~= "" and args.input_tensor_name
    or info.input_names[1])
  self.output_tensor = self.graph:get_tensor_by_name(args.output_tensor_name ~= "" and args.output_tensor_name
    or info.output_names[1])
  -- The first run compiles the graph: the session lives as long as the classifier.
  self.sess = npu.Session { graph = self.graph, config = config }
  return self
end

--- Runs every batch; returns the outputs, the first run's time and the later runs' times.
function Classifier:do_infer(batches)
  local outs, times = {}, {}
  local first
  for i, data in ipairs(batches) do
    local start = clock()
    outs[i] = self.sess:run(self.output_tensor, { [self.input_tensor] = data })
    local dt = clock() - start
    if i == 1 then first = dt else times[#times + 1] = dt end -- the reference times from run 2
  end
  return outs, first, times
end

function Classifier:batch_shape()
  local shape = self.input_tensor:shape()
  local s = {}
  for i, d in ipairs(shape) do s[i] = (i == 1 and d < 0) and batch_size or d end
  if shape[1] >= 0 and shape[1] ~= batch_size then
    print(("note: the model's batch size is fixed at %d"):format(shape[1]))
  end
  return s
end

local classifier = Classifier.new()
print(("model %s: input %s %s, output %s"):format(model_path, classifier.input_tensor:name(),
  table.concat(classifier.input_tensor:shape(), "x"), classifier.output_tensor:name()))

-- "Preprocessing": seeded noise batches of the input's shape.
local shape = classifier:batch_shape()
local batches = {}
for i = 1, n_batches do batches[i] = npu.random.uniform(shape, { minval = 0, maxval = 1, seed = i }) end

local outs, first, times = classifier:do_infer(batches)
table.sort(times)
local total = 0
for _, t in ipairs(times) do total = total + t end
local images = #times * shape[1]
print(("first run (compiles the graph): %.1f ms"):format(first * 1e3))
print(("steady state over %d batches of %d: median %.2f ms, mean %.2f ms per batch"):format(#times, shape[1],
  times[(#times + 1) // 2] * 1e3, total / #times * 1e3))
print(("images/sec = %.1f"):format(images / total))
local o = outs[#outs]
print(("output %s of the last batch: %s"):format(classifier.output_tensor:name(), table.concat(o:shape(), "x")))

classifier.sess:close()
if tmpdir then os.execute("rm -rf '" .. tmpdir .. "'") end
