-- mistakes_spec.lua — fifty mistakes a user porting a TensorFlow script makes, each with the
-- message it gets: an npu error value (its code), whose text names the culprit and, where a
-- name was misspelt, the nearest valid one; the position is the user's line (this file).
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

TestMistakes = {}

local THIS = debug.getinfo(1, "S").short_src

-- A small world to make mistakes in.
local function world()
  local g = npu.Graph()
  local w = {
    g = g,
    x = g:placeholder("float32", { 1, 8, 8, 3 }, "x"),
    k = g:const(npu.zeros({ 3, 3, 3, 4 }), "k"),
    m = g:placeholder("float32", { 2, 3 }, "m"),
    v = g:variable(npu.zeros({ 3, 2 }), "v"),
  }
  w.sess = npu.Session { graph = g }
  return w
end

-- { what, function(w) that makes the mistake, code, text the message contains }
local CASES = {
  -- misspelt attributes and keywords (strict arguments)
  { "conv2d strides misspelt", function(w) return npu.nn.conv2d(w.x, w.k, { strdes = { 1, 2, 2, 1 }, padding = "SAME" }) end,
    "NPU_ERR_ARG", "unknown attribute 'strdes' (did you mean 'strides'?)" },
  { "reduce_sum keepdim", function(w) return npu.reduce_sum(w.m, { axis = 1, keepdim = true }) end,
    "NPU_ERR_ARG", "unknown attribute 'keepdim' (did you mean 'keepdims'?)" },
  { "reduce_sum keep_dims (TF1 spelling)", function(w) return npu.reduce_sum(w.m, { axis = 1, keep_dims = true }) end,
    "NPU_ERR_ARG", "unknown attribute 'keep_dims' (did you mean 'keepdims'?)" },
  { "matmul transpose_b misspelt", function(w) return npu.matmul(w.m, w.m, { tranpose_b = true }) end,
    "NPU_ERR_ARG", "unknown attribute 'tranpose_b' (did you mean 'transpose_b'?)" },
  { "relu takes no attribute", function(w) return npu.nn.relu(w.m, { alpha = 0.2 }) end,
    "NPU_ERR_ARG", "relu 'Relu': unknown attribute 'alpha' (relu takes none)" },
  { "max_pool ksize misspelt", function(w) return npu.nn.max_pool(w.x, { ksizes = { 1, 2, 2, 1 }, strides = { 1, 2, 2, 1 }, padding = "VALID" }) end,
    "NPU_ERR_ARG", "unknown attribute 'ksizes' (did you mean 'ksize'?)" },
  { "generic g:op with a misspelt attribute", function(w) return w.g:op("matmul", { w.m, w.m }, { transpose_bb = true }) end,
    "NPU_ERR_ARG", "(did you mean 'transpose_b'?)" },
  { "unknown op in g:op", function(w) return w.g:op("matmull", { w.m, w.m }) end,
    "NPU_ERR_NOT_FOUND", "unknown op 'matmull' (did you mean 'matmul'?)" },
  { "softmax axis misspelt", function(w) return npu.nn.softmax(w.m, { axsi = -1 }) end,
    "NPU_ERR_ARG", "unknown attribute 'axsi' (did you mean 'axis'?)" },
  { "cast dtype misspelt", function(w) return npu.cast(w.m, { dtpye = "int32" }) end,
    "NPU_ERR_ARG", "unknown attribute 'dtpye' (did you mean 'dtype'?)" },
  -- positional forms
  { "too many positional arguments", function(w) return npu.nn.conv2d(w.x, w.k, { 1, 1, 1, 1 }, "VALID", "NHWC", { 1, 1, 1, 1 }, "extra") end,
    "NPU_ERR_ARG", "the signature is npu.conv2d(input1, input2, strides, padding, data_format, dilations, {attr = v, name = s})" },
  { "a list where the options go", function(w) return npu.nn.relu(w.m, { 1, 2 }) end,
    "NPU_ERR_ARG", "argument 2: expected the options table {attr = v, name = s} (or nothing), got a list" },
  { "a string where the options go", function(w) return npu.nn.relu(w.m, "act") end,
    "NPU_ERR_ARG", "got string; the signature is npu.relu(input1, {attr = v, name = s})" },
  { "padding value wrong", function(w) return npu.nn.conv2d(w.x, w.k, { 1, 1, 1, 1 }, "SAMEE") end,
    "NPU_ERR_ARG", "SAMEE" },
  { "strides of the wrong length", function(w) return npu.nn.conv2d(w.x, w.k, { 1, 1, 1 }, "SAME") end,
    "NPU_ERR_ARG", "strides" },
  -- shapes and dtypes
  { "matmul inner dims differ", function(w) return npu.matmul(w.m, w.m) end,
    "NPU_ERR_SHAPE", "[2,3]" },
  { "broadcast that cannot be", function(w) return w.m + npu.tensor({ 1, 2 }) end,
    "NPU_ERR_SHAPE", "[2,3] and [2]" },
  { "adding int to float", function(w) return w.m + w.g:const(npu.tensor({ 1, 2, 3 }, "int32")) end,
    "NPU_ERR_DTYPE", "int32" },
  { "conv2d with a rank-2 input", function(w) return npu.nn.conv2d(w.m, w.k, { 1, 1, 1, 1 }, "SAME") end,
    "NPU_ERR_SHAPE", "conv2d" },
  { "reshape to a size that does not fit", function(w) return npu.reshape(w.m, { 4, 2 }) end,
    "NPU_ERR_SHAPE", "reshape" },
  { "reduce over an axis out of range", function(w) return npu.reduce_sum(w.m, 5) end,
    "NPU_ERR_ARG", "axis" },
  { "variable from an unknown shape", function(w) return w.g:variable(w.g:placeholder("float32", { -1, 2 })) end,
    "NPU_ERR_ARG", "the initial value's shape must be fully known" },
  { "inputs from two graphs", function(w) return npu.matmul(w.m, npu.Graph():placeholder("float32", { 3, 2 })) end,
    "NPU_ERR_ARG", "belongs to another graph" },
  -- sessions and runs
  { "run(nil): a misspelt fetch variable", function(w) return w.sess:run(nil) end,
    "NPU_ERR_ARG", "fetches is nil (a misspelt or unset variable?)" },
  { "run of a tensor, not a graph element", function(w) return w.sess:run(npu.tensor({ 1 })) end,
    "NPU_ERR_ARG", "cannot fetch a npu.Tensor" },
  { "run of a number", function(w) return w.sess:run(42) end,
    "NPU_ERR_ARG", "cannot fetch a number" },
  { "run of an unknown op name", function(w) return w.sess:run("trian_op") end,
    "NPU_ERR_NOT_FOUND", "no node named 'trian_op'" },
  { "run of an unknown tensor name", function(w) return w.sess:run("loss:0") end,
    "NPU_ERR_NOT_FOUND", "loss" },
  { "missing feed", function(w) return w.sess:run(w.m * 2) end,
    "NPU_ERR_ARG", "placeholder 'm' (float32 [2,3]) must be fed" },
  { "feed of the wrong shape", function(w) return w.sess:run(w.m * 2, { [w.m] = npu.zeros({ 3, 2 }) }) end,
    "NPU_ERR_SHAPE", "[3,2]" },
  { "feed of the wrong dtype", function(w) return w.sess:run(w.m * 2, { [w.m] = npu.zeros({ 2, 3 }, "int32") }) end,
    "NPU_ERR_DTYPE", "int32" },
  { "feed keyed by a number", function(w) return w.sess:run(w.m * 2, { [1] = npu.zeros({ 2, 3 }) }) end,
    "NPU_ERR_ARG", "feed keys must be npu.Output or tensor names" },
  { "variable read before the initializer", function(w) return w.sess:run(w.v) end,
    "NPU_ERR_STATE", "v" },
  { "run on a closed session", function(w) w.sess:close(); return w.sess:run(w.v) end,
    "NPU_ERR_STATE", "the session is closed" },
  { "fetch from another graph", function(w) return w.sess:run(npu.Graph():placeholder("float32", { 1 }, "p")) end,
    "NPU_ERR_STATE", "belongs to another graph" },
  { "sess.run(y): a dot for a colon", function(w) return w.sess.run(w.m) end,
    "NPU_ERR_ARG", "bad argument #1 to 'run' (npu.Session expected, got npu.Output)" },
  { "a string for a node id", function(w) return w.g:output("m") end,
    "NPU_ERR_ARG", "bad argument #1 to 'output' (number expected, got string)" },
  { "Session{grpah = g}", function(w) return npu.Session { grpah = w.g } end,
    "NPU_ERR_ARG", "unknown keyword 'grpah' (did you mean 'graph'?)" },
  { "Session{graph = 'g'}", function() return npu.Session { graph = "g" } end,
    "NPU_ERR_ARG", "graph must be an npu.Graph, got string" },
  { "Session{g, graph = g}", function(w) return npu.Session { w.g, graph = w.g } end,
    "NPU_ERR_ARG", "give the graph once" },
  { "Session{config, options}", function(w) return npu.Session { graph = w.g, config = npu.ConfigProto(), options = {} } end,
    "NPU_ERR_ARG", "give either config or options, not both" },
  -- options
  { "unknown option", function(w) return npu.Session { graph = w.g, options = { precison_mode = "force_fp16" } } end,
    "NPU_ERR_OPTION", "unknown option 'precison_mode' (did you mean 'precision_mode'?)" },
  { "option value not allowed", function(w) return npu.Session { graph = w.g, options = { precision_mode = "fp16" } } end,
    "NPU_ERR_OPTION", "precision_mode" },
  { "parameter_map with the wrong setter", function()
      local c = npu.ConfigProto()
      local op = c.graph_options.rewrite_options.custom_optimizers:add()
      op.name = "NpuOptimizer"
      op.parameter_map["precision_mode"].i = 1
    end, "NPU_ERR_OPTION", "option 'precision_mode' takes .s" },
  { "parameter_map with an unknown option", function()
      local c = npu.ConfigProto()
      local op = c.graph_options.rewrite_options.custom_optimizers:add()
      op.name = "NpuOptimizer"
      op.parameter_map["iteration_per_loop"].i = 10
    end, "NPU_ERR_OPTION", "did you mean 'iterations_per_loop'?" },
  { "iterations_per_loop not matching", function(w)
      return npu.util.set_iteration_per_loop(w.sess, w.g:global_variables_initializer(), 10)
    end, "NPU_ERR_CONFLICT", "10 iterations requested" },
  -- tensors
  { "ragged nested table", function() return npu.tensor({ { 1, 2 }, { 3 } }) end,
    "NPU_ERR_SHAPE", "ragged" },
  { "unknown dtype", function() return npu.zeros({ 2 }, "float33") end,
    "NPU_ERR_DTYPE", "unknown dtype 'float33'" },
  { "item of a tensor with many elements", function() return npu.zeros({ 2 }):item() end,
    "NPU_ERR_ARG", "item() needs" },
  { "random without a seed", function() return npu.random.normal({ 2 }, {}) end,
    "NPU_ERR_ARG", "opts.seed is required" },
  { "index out of range", function() return npu.zeros({ 2 }):get(3) end,
    "NPU_ERR_ARG", "out of range" },
  { "tensor reshape to a wrong size", function() return npu.zeros({ 2, 3 }):reshape({ 4 }) end,
    "NPU_ERR_SHAPE", "cannot reshape" },
  -- data
  { "end of data", function()
      local it = npu.data.Dataset.from_tensor_slices(npu.range(0, 1, 1, "int64")):iterator()
      it:get_next()
      return it:get_next()
    end, "NPU_ERR_OUT_OF_RANGE", "end of data" },
  { "batch of zero", function() return npu.data.Dataset.from_tensor_slices(npu.range(0, 4, 1, "int64")):batch(0) end,
    "NPU_ERR_ARG", "batch" },
  { "tensor name in keep_tensors_dtypes", function(w) return npu.util.keep_tensors_dtypes(w.g, { "mm:0" }) end,
    "NPU_ERR_NOT_FOUND", "npu.util.keep_tensors_dtypes: NPU_ERR_NOT_FOUND" },
  -- distributed training (npu.hccl, the distributed optimizer wrapper)
  { "hccl allreduce of a tensor", function() return npu.hccl.allreduce(npu.zeros({ 2 }), "sum") end,
    "NPU_ERR_ARG", "npu.hccl.allreduce: NPU_ERR_ARG: tensor must be an npu.Output, got npu.Tensor" },
  { "hccl group never created", function() return npu.hccl.get_rank_id("my_group") end,
    "NPU_ERR_ARG", "npu.hccl.get_rank_id: NPU_ERR_ARG: unknown group 'my_group' (npu.hccl.create_group makes one)" },
  { "hccl allgather rank_size wrong", function(w) return npu.hccl.allgather(w.m, 2) end,
    "NPU_ERR_ARG", "rank_size 2 but there is 1 rank" },
  { "hccl broadcast list with a nil", function(w) return npu.hccl.broadcast({ w.m, nil, w.m }, 0) end,
    "NPU_ERR_ARG", "npu.hccl.broadcast: NPU_ERR_ARG: tensors has a hole at 2" },
  { "broadcast_global_variables root_rank out of range", function(w) return npu.hccl.broadcast_global_variables(w.g, 1) end,
    "NPU_ERR_ARG", "root_rank must be an integer rank in [0, 1), got 1" },
  { "broadcast_global_variables root_rank a string", function(w) return npu.train.broadcast_global_variables(w.g, "0") end,
    "NPU_ERR_ARG", "got 0 (a string)" },
  { "broadcast_global_variables of an Output", function(w) return npu.hccl.broadcast_global_variables(w.m) end,
    "NPU_ERR_ARG", "argument 1 must be an npu.Graph, got npu.Output" },
  { "distributed wrapper of nil", function() return npu.train.npu_distributed_optimizer_wrapper(nil) end,
    "NPU_ERR_ARG", "argument 1 must be an optimizer" },
  { "distributed wrapper bucket_bytes misspelt", function()
      return npu.train.NPUDistributedOptimizer(npu.train.GradientDescentOptimizer(0.1), { bucket_byte = 1024 })
    end, "NPU_ERR_ARG", "unknown keyword 'bucket_byte' (did you mean 'bucket_bytes'?)" },
  -- host ops
  { "host_func without output dtypes", function(w) return npu.host_func(function(v) return v end, w.m) end,
    "NPU_ERR_ARG", "npu.host_func: NPU_ERR_ARG: output_dtypes must be a dtype name or a list of them, got nil" },
  { "host_func inputs with a nil", function(w) return npu.host_func(function(a) return a end, { w.m, nil, w.m }, "float32") end,
    "NPU_ERR_ARG", "inputs has a hole at 2" },
  { "host_func name not a string", function(w) return npu.host_func(function(v) return v end, w.m, "float32", 5) end,
    "NPU_ERR_ARG", "name must be a string, got number" },
  { "host_func fn nil", function(w) return npu.host_func(nil, w.m, "float32") end,
    "NPU_ERR_ARG", "npu.host_func: NPU_ERR_ARG: fn must be a function, got nil" },
  { "register_host_op fn nil", function() return npu.register_host_op("MyOp", nil) end,
    "NPU_ERR_ARG", "npu.register_host_op: NPU_ERR_ARG: fn must be a function, got nil" },
  -- summaries (npu.summary)
  { "summary name nil (a misspelt variable)", function(w) return npu.summary.scalar(nil, npu.reduce_sum(w.m)) end,
    "NPU_ERR_ARG", "npu.summary.scalar: NPU_ERR_ARG: name must be a string, got nil" },
  { "summary collections a string, not a list", function(w) return npu.summary.histogram("h", w.m, "train") end,
    "NPU_ERR_ARG", "npu.summary.histogram: NPU_ERR_ARG: collections must be a list of keys" },
  { "summary family a number", function(w) return npu.summary.scalar("loss", npu.reduce_sum(w.m), nil, 1) end,
    "NPU_ERR_ARG", "family must be a string, got number" },
  { "summary text name nil", function() return npu.summary.text(nil, "hello") end,
    "NPU_ERR_ARG", "npu.summary.text: NPU_ERR_ARG: name must be a string, got nil" },
  { "summary merge with a nil in the list", function(w)
      local a = npu.summary.scalar("a", npu.reduce_sum(w.m))
      return npu.summary.merge({ a, nil, a })
    end, "NPU_ERR_ARG", "npu.summary.merge: NPU_ERR_ARG: inputs has a hole at 2" },
  { "summary merge_all key not a string", function() return npu.summary.merge_all({ "summaries" }) end,
    "NPU_ERR_ARG", "key must be a collection key (a string) or an npu.Graph, got table" },
  { "FileWriter option misspelt", function() return npu.summary.FileWriter("/nonexistent/logs", { flush_sec = 5 }) end,
    "NPU_ERR_ARG", "npu.summary.FileWriter: NPU_ERR_ARG: unknown keyword 'flush_sec' (did you mean 'flush_secs'?)" },
  { "FileWriter max_queue a string", function() return npu.summary.FileWriter("/nonexistent/logs", { max_queue = "10" }) end,
    "NPU_ERR_ARG", "max_queue must be an integer, got string" },
  { "FileWriter graph not a graph", function() return npu.summary.FileWriter("/nonexistent/logs", "graph") end,
    "NPU_ERR_ARG", "graph must be an npu.Graph, got string" },
  { "FileWriter global_step a string", function()
      local dir = os.tmpname()
      os.remove(dir)
      local fw = npu.summary.FileWriter(dir)
      local ok, err = pcall(fw.add_summary, fw, "", "5")
      fw:close()
      os.execute("rm -rf '" .. dir .. "'")
      if not ok then error(err, 0) end
    end, "NPU_ERR_ARG", "global_step must be an integer, got string" },
  { "read_events of nil", function() return npu.summary.read_events(nil) end,
    "NPU_ERR_ARG", "npu.summary.read_events: NPU_ERR_ARG: path must be a string, got nil" },
  -- npu.serve: keys are checked before the child starts
  { "serve with a misspelt key of its own", function() return npu.serve { model_base_path = "/nonexistent", timout = 1 } end,
    "NPU_ERR_ARG", "npu.serve: NPU_ERR_ARG: unknown flag 'timout' (did you mean 'timeout'?)" },
  { "serve with a misspelt flag", function() return npu.serve { model_base_pth = "/nonexistent" } end,
    "NPU_ERR_ARG", "unknown flag 'model_base_pth' (did you mean 'model_base_path'?)" },
  { "serve timeout a string", function() return npu.serve { model_base_path = "/nonexistent", timeout = "5" } end,
    "NPU_ERR_ARG", "timeout must be a number of seconds > 0, got 5" },
  -- run options, stats, DOT (the binding)
  { "run option misspelt", function(w) return w.sess:run(w.m * 2, { [w.m] = npu.zeros({ 2, 3 }) }, { timeout_in_msec = 100 }) end,
    "NPU_ERR_ARG", "npu.Session:run: NPU_ERR_ARG: unknown run option 'timeout_in_msec' (did you mean 'timeout_in_ms'?)" },
  { "run option timeout a string", function(w) return w.sess:run(w.m * 2, { [w.m] = npu.zeros({ 2, 3 }) }, { timeout_in_ms = "100" }) end,
    "NPU_ERR_ARG", "timeout_in_ms must be an integer >= 0 (milliseconds; 0: no limit), got string" },
  { "run options not a table", function(w) return w.sess:run(w.m * 2, { [w.m] = npu.zeros({ 2, 3 }) }, 100) end,
    "NPU_ERR_ARG", "bad argument #3 to 'run' (table expected, got number)" },
  { "stats takes no argument", function(w) return w.sess:stats("plans") end,
    "NPU_ERR_ARG", "bad argument #1 to 'stats' (no argument expected here, got string)" },
  { "g:to_dot takes no options", function(w) return w.g:to_dot({ rankdir = "LR" }) end,
    "NPU_ERR_ARG", "bad argument #1 to 'to_dot' (no argument expected here, got table)" },
  { "explain's to_dot takes no options", function(w)
      local e = w.sess:explain(w.m * 2, { [w.m] = npu.zeros({ 2, 3 }) })
      return e:to_dot({ rankdir = "LR" })
    end, "NPU_ERR_ARG", "npu.Explain:to_dot: NPU_ERR_ARG: takes no arguments, got table" },
  { "host_func dtype misspelt", function(w) return npu.host_func(function(v) return v end, w.m, "flaot32") end,
    "NPU_ERR_DTYPE", "npu.host_func: NPU_ERR_DTYPE: output dtype 1 must be a dtype name (\"float32\", \"int32\", ...), got 'flaot32'" },
  { "export_saved_model variables not names", function(w)
      return npu.export_saved_model(w.g, "/nonexistent/sm", { inputs = { m = w.m }, outputs = { y = w.m * 2 }, variables = { 5 } })
    end, "NPU_ERR_ARG", "npu.export_saved_model: variables[1] is a number, expected a string" },
  -- datasets: shard, padded_batch, batch and shuffle options
  { "shard with a string", function() return npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "int64")):shard("2", 0) end,
    "NPU_ERR_ARG", "npu.Dataset:shard: num_shards must be an integer, got string" },
  { "shard without its index", function() return npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "int64")):shard(2) end,
    "NPU_ERR_ARG", "npu.Dataset:shard: index must be an integer, got nil" },
  { "batch drop_remainder misspelt", function() return npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "int64")):batch(2, { drop_reminder = true }) end,
    "NPU_ERR_ARG", "npu.Dataset:batch: NPU_ERR_ARG: unknown keyword 'drop_reminder' (did you mean 'drop_remainder'?)" },
  { "padded_batch drop_remainder misspelt", function() return npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "int64")):padded_batch(2, {}, nil, { drop_reminder = true }) end,
    "NPU_ERR_ARG", "npu.Dataset:padded_batch: NPU_ERR_ARG: unknown keyword 'drop_reminder' (did you mean 'drop_remainder'?)" },
  { "padded_batch padded_shapes key misspelt", function()
      local ds = npu.data.Dataset.from_tensor_slices({ image = npu.zeros({ 4, 2 }), label = npu.zeros({ 4 }) })
      return ds:padded_batch(2, { imgae = { 4 } })
    end, "NPU_ERR_ARG", "unknown padded_shapes key 'imgae' (did you mean 'image'?)" },
  { "padded_batch batch_size nil", function() return npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "int64")):padded_batch(nil, {}) end,
    "NPU_ERR_ARG", "npu.Dataset:padded_batch: NPU_ERR_ARG: batch_size must be an integer, got nil" },
  { "shuffle seed misspelt", function() return npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "int64")):shuffle(4, { sed = 1 }) end,
    "NPU_ERR_ARG", "npu.Dataset:shuffle: NPU_ERR_ARG: unknown keyword 'sed' (did you mean 'seed'?)" },
  -- models, rendering, TensorFlow's extra names
  { "export_saved_model outputs misspelt", function(w)
      return npu.export_saved_model(w.g, "/nonexistent/sm", { inputs = { m = w.m }, output = { y = w.m * 2 } })
    end, "NPU_ERR_ARG", "npu.export_saved_model: NPU_ERR_ARG: unknown keyword 'output' (did you mean 'outputs'?)" },
  { "export_saved_model inputs mixing a list and keys", function(w)
      return npu.export_saved_model(w.g, "/nonexistent/sm", { inputs = { w.m, x = w.x }, outputs = { y = w.m * 2 } })
    end, "NPU_ERR_ARG", "inputs must be a list; it has key 'x' beyond its 1 entries" },
  { "export_saved_model of nil", function() return npu.export_saved_model(nil, "/nonexistent/sm", {}) end,
    "NPU_ERR_ARG", "argument 1 must be an npu.Graph, got nil" },
  { "load_model tags misspelt", function() return npu.load_model("/nonexistent/sm", { tag = "serve" }) end,
    "NPU_ERR_ARG", "npu.load_model: NPU_ERR_ARG: unknown keyword 'tag' (did you mean 'tags'?)" },
  { "render_graph format misspelt", function(w) return npu.util.render_graph(w.g, "/nonexistent/g.svg", { formt = "png" }) end,
    "NPU_ERR_ARG", "npu.util.render_graph: NPU_ERR_ARG: unknown keyword 'formt' (did you mean 'format'?)" },
  { "where with x nil and y given", function(w) return npu.where(w.g:placeholder("bool", { 2, 3 }), nil, w.m) end,
    "NPU_ERR_ARG", "npu.where: NPU_ERR_ARG: x is nil but y is given" },
  { "boolean_mask axis misspelt", function(w) return npu.boolean_mask(w.m, w.g:placeholder("bool", { 3 }), { axes = 1 }) end,
    "NPU_ERR_ARG", "npu.boolean_mask: NPU_ERR_ARG: unknown keyword 'axes' (did you mean 'axis'?)" },
  { "boolean_mask axis a string", function(w) return npu.boolean_mask(w.m, w.g:placeholder("bool", { 3 }), "1") end,
    "NPU_ERR_ARG", "argument 3 must be the axis (an integer) or {axis =, name =}, got string" },
  { "boolean_mask mask nil", function(w) return npu.boolean_mask(w.m, nil) end,
    "NPU_ERR_ARG", "npu.boolean_mask: NPU_ERR_ARG: mask is nil" },
  { "clip_by_value min nil", function(w) return npu.clip_by_value(w.m, nil, 1) end,
    "NPU_ERR_ARG", "npu.clip_by_value: NPU_ERR_ARG: clip_value_min is nil" },
  { "assign_add of nil", function(w) return npu.assign_add(w.v, nil) end,
    "NPU_ERR_ARG", "npu.assign_add: NPU_ERR_ARG: value is nil" },
  { "assign_sub name not a string", function(w) return w.v:assign_sub(1, { name = "dec" }) end,
    "NPU_ERR_ARG", "npu.assign_sub: NPU_ERR_ARG: name must be a string, got table" },
  { "sparse_to_dense output_shape nil", function(w) return npu.sparse_to_dense(w.g:const(npu.tensor({ 1 }, "int32")), nil, 1) end,
    "NPU_ERR_ARG", "npu.sparse_to_dense: NPU_ERR_ARG: output_shape is nil" },
  { "sparse_to_dense validate_indices a string", function(w)
      return npu.sparse_to_dense(w.g:const(npu.tensor({ 1 }, "int32")), { 4 }, 1, 0, "no")
    end, "NPU_ERR_ARG", "validate_indices must be a boolean, got string" },
  -- extra arguments and forgotten flags (each was dropped, or read as false, silently)
  { "variable with TF's trainable option", function(w) return w.g:variable(npu.zeros({ 2 }), "w", { trainable = false }) end,
    "NPU_ERR_ARG", "npu.Graph:variable: NPU_ERR_ARG: argument 4: no argument expected here, got table" },
  { "variable with an options table for its name", function(w) return w.g:variable(npu.zeros({ 2 }), { trainable = false }) end,
    "NPU_ERR_ARG", "npu.Graph:variable: NPU_ERR_ARG: argument 2 (name) must be a string, got table" },
  { "the same inside a name scope (was Lua's 'attempt to concatenate')", function(w)
      return npu.name_scope("s", function() return w.g:variable(npu.zeros({ 2 }), { trainable = false }) end)
    end, "NPU_ERR_ARG", "argument 2 (name) must be a string, got table" },
  { "set_trainable without its flag", function(w) return w.g:set_trainable(w.v) end,
    "NPU_ERR_ARG", "boolean expected, got no value" },
  { "set_trainable with a string flag", function(w) return w.g:set_trainable(w.v, "no") end,
    "NPU_ERR_ARG", "boolean expected, got string" },
  { "variables with a string for trainable_only", function(w) return w.g:variables("trainable") end,
    "NPU_ERR_ARG", "boolean expected, got string" },
  { "is_trainable of two variables", function(w) return w.g:is_trainable(w.v, w.v) end,
    "NPU_ERR_ARG", "bad argument #2 to 'is_trainable' (no argument expected here" },
  { "add_variable with an options table", function(w) return w.g:add_variable(w.g:const(npu.zeros({ 2 })), "w", {}) end,
    "NPU_ERR_ARG", "no argument expected here, got table" },
  { "run with a 5th argument", function(w) return w.sess:run(w.m, { [w.m] = npu.zeros({ 2, 3 }) }, nil, { every = 1 }) end,
    "NPU_ERR_ARG", "no argument expected here, got table" },
  { "explain with run options", function(w) return w.sess:explain(w.m * 2, { [w.m] = npu.zeros({ 2, 3 }) }, { timeout_in_ms = 5 }) end,
    "NPU_ERR_ARG", "no argument expected here, got table" },
  { "set_memory_limit with a unit", function() return npu.set_memory_limit(1, "GB") end,
    "NPU_ERR_ARG", "npu.set_memory_limit: NPU_ERR_ARG: argument 2: no argument expected here, got string" },
  { "ProgressBar given two tables", function() return npu.util.ProgressBar({ total = 5 }, { width = 10 }) end,
    "NPU_ERR_ARG", "npu.util.ProgressBar: NPU_ERR_ARG: argument 2: no argument expected here, got table" },
  { "bar.update: a dot for a colon", function() return npu.util.ProgressBar({ total = 5, plain = true, stream = { write = function() end } }).update(3) end,
    "NPU_ERR_ARG", "call it as a method, with a colon (bar:update(...)); argument 1 is number" },
  { "bar:update with a third number", function()
      return npu.util.ProgressBar({ total = 5, plain = true, stream = { write = function() end } }):update(1, 5, 2)
    end, "NPU_ERR_ARG", "npu.util.ProgressBar:update: NPU_ERR_ARG: argument 4: no argument expected here, got number" },
  { "bar:finish with a message", function()
      return npu.util.ProgressBar({ total = 5, plain = true, stream = { write = function() end } }):finish("done")
    end, "NPU_ERR_ARG", "argument 2: no argument expected here, got string" },
  { "hccl get_rank_size with two groups", function() return npu.hccl.get_rank_size("hccl_world_group", "g2") end,
    "NPU_ERR_ARG", "npu.hccl.get_rank_size: NPU_ERR_ARG: argument 2: no argument expected here, got string" },
  { "hccl create_group with a bare timeout", function() return npu.hccl.create_group("g", 1, { 0 }, 30) end,
    "NPU_ERR_ARG", "npu.hccl.create_group: NPU_ERR_ARG: opts must be a table {timeout = seconds}, got number" },
  { "hccl send with an extra argument", function(w) return npu.hccl.send(w.m, 0, 1, nil, "fusion") end,
    "NPU_ERR_ARG", "npu.hccl.send: NPU_ERR_ARG: argument 5: no argument expected here, got string" },
  { "hccl receive into a string graph", function() return npu.hccl.receive({ 2 }, "float32", 0, 1, nil, "g") end,
    "NPU_ERR_ARG", "npu.hccl.receive: NPU_ERR_ARG: graph must be an npu.Graph, got string" },
  { "minimize global_step misspelt", function(w)
      return npu.train.GradientDescentOptimizer(0.1):minimize(npu.reduce_sum(w.v), { global_stp = w.v })
    end, "NPU_ERR_ARG", "npu.train.Optimizer:minimize: NPU_ERR_ARG: unknown keyword 'global_stp' (did you mean 'global_step'?)" },
  { "distributed minimize var_list misspelt", function(w)
      local opt = npu.train.NPUDistributedOptimizer(npu.train.GradientDescentOptimizer(0.1))
      return opt:minimize(npu.reduce_sum(w.v), { varlist = { w.v } })
    end, "NPU_ERR_ARG", "unknown keyword 'varlist' (did you mean 'var_list'?)" },
  { "apply_gradients name misspelt", function(w)
      local opt = npu.train.GradientDescentOptimizer(0.1)
      return opt:apply_gradients(opt:compute_gradients(npu.reduce_sum(w.v)), { nmae = "step" })
    end, "NPU_ERR_ARG", "unknown keyword 'nmae' (did you mean 'name'?)" },
  { "loss-scaled minimize global_step misspelt", function(w)
      local opt = npu.train.LossScaleOptimizer(npu.train.GradientDescentOptimizer(0.1), npu.train.FixedLossScaleManager(2))
      return opt:minimize(npu.reduce_sum(w.v), { global_stp = w.v })
    end, "NPU_ERR_ARG", "unknown keyword 'global_stp' (did you mean 'global_step'?)" },
  { "compute_gradients grad_loss misspelt", function(w)
      return npu.train.GradientDescentOptimizer(0.1):compute_gradients(npu.reduce_sum(w.v), nil, { gradloss = w.v })
    end, "NPU_ERR_ARG", "npu.train.Optimizer:compute_gradients: NPU_ERR_ARG: unknown keyword 'gradloss' (did you mean 'grad_loss'?)" },
}

function TestMistakes:test_each_mistake_has_its_message()
  lu.assertTrue(#CASES >= 50, #CASES)
  for _, c in ipairs(CASES) do
    local what, f, code, text = c[1], c[2], c[3], c[4]
    local w = world()
    local ok, err = pcall(f, w)
    lu.assertFalse(ok, what .. ": no error")
    lu.assertTrue(npu.errors.is_error(err), what .. ": not an npu error: " .. tostring(err))
    lu.assertEquals(err.code, code, what .. ": " .. tostring(err))
    lu.assertStrContains(tostring(err), text, false, what)
    -- the position is this file (the user's line), never a file of npu itself
    lu.assertEquals(err.position and err.position:match("^(.*):%d+$"), THIS, what .. ": " .. tostring(err))
  end
end

function TestMistakes:test_tensorflow_positional_forms_work()
  local w = world()
  local y = npu.nn.conv2d(w.x, w.k, { 1, 2, 2, 1 }, "SAME")
  lu.assertEquals(y:shape(), { 1, 4, 4, 4 })
  lu.assertEquals(npu.nn.max_pool(w.x, { 1, 2, 2, 1 }, { 1, 2, 2, 1 }, "VALID"):shape(), { 1, 4, 4, 3 })
  lu.assertEquals(npu.nn.avg_pool(w.x, { 1, 2, 2, 1 }, { 1, 2, 2, 1 }, "VALID", { name = "pool" }):op():name(), "pool")
  lu.assertEquals(npu.reduce_sum(w.m, 1, true):shape(), { 2, 1 })
  lu.assertEquals(npu.matmul(w.m, w.m, false, true):shape(), { 2, 2 })
  lu.assertEquals(npu.nn.conv2d(w.x, w.k, { strides = { 1, 1, 1, 1 }, padding = "VALID" }):shape(), { 1, 6, 6, 4 })
  lu.assertEquals(npu.signature("max_pool"), "npu.max_pool(input1, ksize, strides, padding, data_format, {attr = v, name = s})")
end

function TestMistakes:test_session_takes_the_graph_first()
  local g = npu.Graph()
  local c = g:const(npu.tensor({ 1, 2 }), "c")
  local sess <close> = npu.Session { g }
  lu.assertEquals(sess:run(c):totable(), { 1, 2 })
  local s2 <close> = npu.Session { g, options = { precision_mode = "force_fp32" } }
  lu.assertEquals(s2:run("c:0"):totable(), { 1, 2 })
end

function TestMistakes:test_one_did_you_mean_rule()
  -- the same helper answers for C names and Lua keywords
  lu.assertEquals(npu.errors.suggest("grpah", { "graph", "config" }), "graph")
  lu.assertEquals(npu.errors.suggest("cache_dir", { "graph_compiler_cache_dir" }), "graph_compiler_cache_dir")
  lu.assertEquals(npu.errors.suggest("RELU", { "relu" }), "relu")
  lu.assertNil(npu.errors.suggest("zzzzzz", { "graph", "config" }))
end

-- The mistakes leave nothing behind: once their worlds are collected, the context's live bytes
-- are back where they were (a binding that acquired before raising would leak here).
function TestMistakes:test_mistakes_leave_no_live_bytes()
  local function each()
    for _, c in ipairs(CASES) do
      local w = world()
      pcall(c[2], w)
      w.sess:close()
    end
  end
  each() -- first use of each path (lazily built tables, registered host ops)
  collectgarbage()
  collectgarbage()
  local base = npu.core.live_bytes()
  each()
  collectgarbage()
  collectgarbage()
  lu.assertEquals(npu.core.live_bytes(), base)
end

-- The bindings added with summaries, SavedModel export, host ops and DOT, under an allocation
-- that fails at every position in turn: each failure is an npu error and frees what it took.
function TestMistakes:test_new_bindings_under_allocation_failure()
  local core = npu.core
  local dir = os.tmpname()
  os.remove(dir)
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local y = npu.host_func(function(v) return v end, x, "float32", "h")
  local s = npu.summary.scalar("loss", npu.reduce_sum(y))
  local bytes
  do
    local sess <close> = npu.Session { graph = g }
    bytes = npu.summary.bytes(sess:run(s, { [x] = { 1, 2 } }))
  end
  local cases = {
    { "FileWriter", function()
        local fw = npu.summary.FileWriter(dir, { filename_suffix = ".sweep" })
        local ok, err = pcall(function()
          fw:add_summary(bytes, 1)
          fw:flush()
        end)
        pcall(fw.close, fw)
        if not ok then error(err, 0) end
      end },
    { "read_events", function()
        for _ in npu.summary.read_events(dir .. "/" .. (io.popen("ls " .. dir):read("l") or "none")) do end
      end },
    { "bytes_tensor", function() return core.bytes_tensor("hello") end },
    { "host_func node", function()
        local h = npu.Graph()
        return npu.host_func(function(v) return v end, h:placeholder("float32", { 2 }), { "float32", "int32" })
      end },
    { "g:to_dot", function() return g:to_dot() end },
    { "run with a host op and options", function()
        local sess <close> = npu.Session { graph = g }
        return sess:run({ y, s }, { [x] = { 1, 2 } }, { timeout_in_ms = 10000 })
      end },
    { "explain:to_dot", function()
        local sess <close> = npu.Session { graph = g }
        return sess:explain(y, { [x] = { 1, 2 } }):to_dot()
      end },
    { "export_saved_model", function()
        os.execute("rm -rf '" .. dir .. "/sm'")
        local h = npu.Graph()
        local a = h:placeholder("float32", { 2 }, "a")
        local w = h:const(npu.tensor({ 1, 2 }), "w")
        return npu.export_saved_model(h, dir .. "/sm", { inputs = { a = a }, outputs = { b = a * w }, variables = { "w" } })
      end },
  }
  for _, c in ipairs(cases) do
    local what, f = c[1], c[2]
    f() -- once through (the directory, lazily built tables)
    S.sweep_allocations(what, f)
  end
  os.execute("rm -rf '" .. dir .. "'")
end
