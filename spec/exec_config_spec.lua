-- exec_config_spec.lua — graph-level options: npu.util.set_graph_exec_config (002 §7.3), whose
-- options win over the session's for the runs that reach the fetch; npu.ExperimentalConfig
-- (004) and npu.NPURunConfig carrying it into a session; dynamic_inputs_shape_range checks.
local lu = require("luaunit")
local npu = require("npu")

local set = npu.util.set_graph_exec_config

-- y = x w: float16 rounding of the result shows the inference default (force_fp16).
local function product_graph()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 8 }, "x")
  local w = g:variable(npu.random.normal({ 8, 3 }, { seed = 5 }), "w")
  local y = x:matmul(w)
  return g, x, y
end
local X = npu.random.normal({ 4, 8 }, { seed = 6 })

local function is_f16(t) return npu.allclose(t, t:astype("float16"):astype("float32"), 0, 0) end

-- The exact float32 product, from a training session (must_keep_origin_dtype).
local function exact(g, x, y)
  local s = npu.Session { graph = g, options = { graph_run_mode = 1 } }
  s:run(g:global_variables_initializer())
  return s:run(y, { [x] = X })
end

local function fails(f, ...)
  local ok, err = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  return tostring(err)
end

-- counter += sum(batch), fed by a dataset: a loop needs training (graph_run_mode 1).
local function counting_graph()
  local g = npu.Graph()
  local ds = npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "float32"))
      :batch(2, { drop_remainder = true }):repeat_()
  local b = ds:make_one_shot_iterator(g):get_next()
  local total = g:variable(npu.zeros({}), "total")
  local step = npu.assign(total, total + npu.reduce_sum(b))
  return g, step, total, b
end

TestGraphLevelWins = {}

function TestGraphLevelWins:test_is_train_graph_lets_a_loop_run_in_an_inference_session()
  local g, step, total = counting_graph()
  local sess = npu.Session { graph = g, options = { graph_run_mode = 0, iterations_per_loop = 2 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 2)
  lu.assertStrContains(fails(sess.run, sess, loop), "graph_run_mode 1")
  lu.assertIs(set(step, { is_train_graph = true }), step) -- returns fetch
  sess:run(loop) -- the loop reaches step: compiled as a training graph
  lu.assertEquals(sess:run(total):item(), 0 + 1 + 2 + 3)
end

function TestGraphLevelWins:test_precision_default_follows_is_train_graph()
  local g, x, y = product_graph()
  local want = exact(g, x, y)
  local sess = npu.Session { graph = g, options = { graph_run_mode = 0 } }
  sess:run(g:global_variables_initializer())
  local before = sess:run(y, { [x] = X })
  lu.assertTrue(is_f16(before)) -- the inference default: force_fp16
  lu.assertFalse(npu.allclose(before, want, 0, 0))
  set(y, { is_train_graph = true })
  local after = sess:run(y, { [x] = X }) -- the change recompiles
  lu.assertTrue(npu.allclose(after, want, 0, 0)) -- training default: must_keep_origin_dtype
  -- and the other way: a training session, an inference graph
  local train = npu.Session { graph = g }
  train:run(g:global_variables_initializer())
  set(y, { is_train_graph = false })
  lu.assertTrue(npu.allclose(train:run(y, { [x] = X }), before, 0, 0))
  -- clearing gives the session's own back
  set(y, {})
  lu.assertNil(npu.util.graph_exec_config(y))
  lu.assertTrue(npu.allclose(train:run(y, { [x] = X }), want, 0, 0))
end

function TestGraphLevelWins:test_runs_that_do_not_reach_the_node_keep_the_session_options()
  local g, x, y = product_graph()
  local z = x:matmul(g:const(npu.ones({ 8, 2 }))) -- does not reach y
  set(y, { is_train_graph = true })
  local sess = npu.Session { graph = g, options = { graph_run_mode = 0 } }
  sess:run(g:global_variables_initializer())
  lu.assertTrue(npu.allclose(sess:run(y, { [x] = X }), exact(g, x, y), 0, 0))
  local zs = sess:run(z, { [x] = X })
  lu.assertTrue(is_f16(zs))
  -- a run that reaches the node compiles all of its fetches with the node's config
  local r = sess:run({ z, y }, { [x] = X })
  local train = npu.Session { graph = g }
  lu.assertTrue(npu.allclose(r[1], train:run(z, { [x] = X }), 0, 0))
  lu.assertFalse(npu.allclose(r[1], zs, 0, 0))
  lu.assertTrue(npu.allclose(r[2], exact(g, x, y), 0, 0))
end

function TestGraphLevelWins:test_explicit_session_precision_is_not_a_default()
  local g, x, y = product_graph()
  set(y, { is_train_graph = true })
  local sess = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  sess:run(g:global_variables_initializer())
  lu.assertTrue(is_f16(sess:run(y, { [x] = X })))
end

function TestGraphLevelWins:test_the_config_reads_back_and_names_work()
  local g, x, y = product_graph()
  do
    local _ <close> = g:as_default()
    set({ y:name(), "x" }, { dynamic_input = true, dynamic_graph_execute_mode = "dynamic_execute",
      experimental_config = npu.ExperimentalConfig { accelerate_train_mode = "fast|step|0.9" } })
  end
  local want = { dynamic_input = true, dynamic_graph_execute_mode = "dynamic_execute",
    accelerate_train_mode = "fast|step|0.9" }
  lu.assertEquals(npu.util.graph_exec_config(y), want)
  lu.assertEquals(npu.util.graph_exec_config(x:op()), want)
  set(y:op(), { is_train_graph = false })
  lu.assertEquals(npu.util.graph_exec_config(y), { graph_run_mode = 0 }) -- replaced, not merged
end

function TestGraphLevelWins:test_same_config_on_several_fetches_is_one_config()
  local g, x, y = product_graph()
  local z = y + 1
  set({ y, z }, { is_train_graph = true })
  local sess = npu.Session { graph = g, options = { graph_run_mode = 0 } }
  sess:run(g:global_variables_initializer())
  local r = sess:run({ y, z }, { [x] = X })
  lu.assertTrue(npu.allclose(r[1], exact(g, x, y), 0, 0))
end

TestExecConfigErrors = {}

function TestExecConfigErrors:test_unknown_parameter_names_the_nearest()
  local _, _, y = product_graph()
  local err = fails(function() set(y, { is_train_grpah = true }) end)
  lu.assertStrContains(tostring(err), "unknown parameter 'is_train_grpah' (did you mean 'is_train_graph'?)")
  lu.assertStrContains(tostring(err), "exec_config_spec.lua") -- points at the calling line
end

function TestExecConfigErrors:test_bad_values()
  local _, _, y = product_graph()
  lu.assertStrContains(fails(set, y, { dynamic_input = "yes" }), "dynamic_input: expects a boolean")
  local err = fails(set, y, { dynamic_graph_execute_mode = "static" })
  lu.assertStrContains(tostring(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "dynamic_graph_execute_mode")
  err = fails(set, y, { dynamic_inputs_shape_range = "feed:[1,2]" })
  lu.assertStrContains(tostring(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "getnext: or data:")
  err = fails(set, y, { dynamic_inputs_shape_range = "data:[5~2]" })
  lu.assertStrContains(tostring(err), "'5~2' is not a dimension")
  lu.assertStrContains(fails(set, y, { experimental_config = { accelerate_train_mode = "fast" } }),
    "expects an npu.ExperimentalConfig")
  lu.assertStrContains(fails(set, 42, { is_train_graph = true }), "fetch must be")
  lu.assertStrContains(fails(set, "no_such_node", {}), "NPU_ERR_NOT_FOUND")
  lu.assertNil(npu.util.graph_exec_config(y)) -- nothing was set by the failed calls
end

function TestExecConfigErrors:test_only_graph_level_options_may_be_set_on_a_node()
  local g, _, y = product_graph()
  local o = npu.core.options_new()
  o:set("precision_mode", "force_fp32")
  local err = fails(g.set_exec_config, g, y:op():id(), o)
  lu.assertStrContains(tostring(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "option 'precision_mode' cannot be set per graph")
  lu.assertStrContains(tostring(err), y:op():name())
  lu.assertStrContains(fails(g.set_exec_config, g, 10000, nil), "no node 10000")
end

function TestExecConfigErrors:test_conflicting_configs_in_one_run_name_both_nodes()
  local g, x, y = product_graph()
  local z = x:matmul(g:const(npu.ones({ 8, 2 })), { name = "other" })
  set(y, { is_train_graph = true })
  set(z, { is_train_graph = false })
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local err = fails(sess.run, sess, { y, z }, { [x] = X })
  lu.assertStrContains(tostring(err), "NPU_ERR_CONFLICT")
  lu.assertStrContains(tostring(err), "'" .. y:op():name() .. "'")
  lu.assertStrContains(tostring(err), "'other'")
  -- each alone is fine
  sess:run(y, { [x] = X })
  sess:run(z, { [x] = X })
end

function TestExecConfigErrors:test_merged_options_follow_the_cross_option_rules()
  local g, x, y = product_graph()
  set(y, { dynamic_graph_execute_mode = "dynamic_execute" }) -- needs dynamic_input = True
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  local err = fails(sess.run, sess, y, { [x] = X })
  lu.assertStrContains(tostring(err), "NPU_ERR_CONFLICT")
  lu.assertStrContains(tostring(err), "node '" .. y:op():name() .. "'")
  lu.assertStrContains(tostring(err), "dynamic_input")
  -- the session can supply the missing half: graph level adds to it
  local ok = npu.Session { graph = g, options = { dynamic_input = true } }
  ok:run(g:global_variables_initializer())
  ok:run(y, { [x] = X })
end

TestShapeRange = {}

-- placeholders "b" [-1, 3] and "a" [-1]; 000 orders them by name: a, then b
local function two_inputs()
  local g = npu.Graph()
  local b = g:placeholder("float32", { -1, 3 }, "b")
  local a = g:placeholder("float32", { -1 }, "a")
  local y = npu.reduce_sum(b) + npu.reduce_sum(a)
  return g, a, b, y
end

function TestShapeRange:test_feeds_inside_the_ranges_run_outside_fail()
  local g, a, b, y = two_inputs()
  set(y, { dynamic_input = true, dynamic_inputs_shape_range = "data:[1~4],[2~8, 3]" })
  local sess = npu.Session { graph = g }
  lu.assertEquals(sess:run(y, { [a] = { 1, 2, 3 }, [b] = npu.ones({ 5, 3 }) }):item(), 21)
  lu.assertEquals(sess:run(y, { [a] = { 1 }, [b] = npu.ones({ 2, 3 }) }):item(), 7)
  local err = fails(sess.run, sess, y, { [a] = { 1 }, [b] = npu.ones({ 9, 3 }) })
  lu.assertStrContains(tostring(err), "NPU_ERR_SHAPE")
  lu.assertStrContains(tostring(err), "placeholder 'b:0' fed [9,3], outside its dynamic_inputs_shape_range [2~8, 3]")
  err = fails(sess.run, sess, y, { [a] = npu.ones({ 5 }), [b] = npu.ones({ 2, 3 }) })
  lu.assertStrContains(tostring(err), "'a:0' fed [5]")
  -- without dynamic_input the ranges are not used
  set(y, { dynamic_inputs_shape_range = "data:[1~4],[2~8, 3]" })
  lu.assertEquals(sess:run(y, { [a] = npu.ones({ 5 }), [b] = npu.ones({ 9, 3 }) }):item(), 32)
end

function TestShapeRange:test_the_ranges_must_describe_the_inputs()
  local g, a, b, y = two_inputs()
  local sess = npu.Session { graph = g }
  local feeds = { [a] = { 1 }, [b] = npu.ones({ 2, 3 }) }
  set(y, { dynamic_input = true, dynamic_inputs_shape_range = "data:[1~4]" })
  local err = fails(sess.run, sess, y, feeds)
  lu.assertStrContains(tostring(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "'data:' gives 1 range(s) but this run has 2 placeholder(s)")
  set(y, { dynamic_input = true, dynamic_inputs_shape_range = "data:[1~4],[2~8]" })
  lu.assertStrContains(fails(sess.run, sess, y, feeds), "placeholder 'b:0' has rank 2 but its range [2~8] has 1 dim(s)")
  set(y, { dynamic_input = true, dynamic_inputs_shape_range = "data:[1~4],[-1, 4~6]" })
  lu.assertStrContains(fails(sess.run, sess, y, feeds), "placeholder 'b:0' has dim 1 of size 3, outside its range [-1, 4~6]")
  -- scalars are "[]"; a fixed size is itself
  local g2 = npu.Graph()
  local s = g2:placeholder("float32", {}, "s")
  local y2 = s * 2
  set(y2, { dynamic_input = true, dynamic_inputs_shape_range = "data:[]" })
  lu.assertEquals(npu.Session { graph = g2 }:run(y2, { [s] = 4 }):item(), 8)
end

function TestShapeRange:test_session_option_has_the_same_effect()
  local g, a, b, y = two_inputs()
  local sess = npu.Session { graph = g, options = { dynamic_input = true,
    dynamic_inputs_shape_range = "data:[1~4],[2~8, 3]" } }
  lu.assertEquals(sess:run(y, { [a] = { 1 }, [b] = npu.ones({ 2, 3 }) }):item(), 7)
  lu.assertStrContains(fails(sess.run, sess, y, { [a] = { 1 }, [b] = npu.ones({ 1, 3 }) }), "outside")
  -- dynamic_dims takes precedence: the ranges are ignored
  local prof = npu.Session { graph = g, options = { dynamic_input = true,
    dynamic_inputs_shape_range = "data:[1~4],[2~8, 3]", input_shape = "a:-1;b:-1,3",
    dynamic_dims = "5,9;1,2", dynamic_node_type = 1 } }
  lu.assertEquals(prof:run(y, { [a] = npu.ones({ 5 }), [b] = npu.ones({ 9, 3 }) }):item(), 32)
end

function TestShapeRange:test_getnext_ranges_check_the_dataset_outputs()
  local g = npu.Graph()
  local ds = npu.data.Dataset.from_tensor_slices(npu.range(0, 8, 1, "float32")):batch(2, { drop_remainder = true })
  local bt = ds:make_one_shot_iterator(g):get_next()
  local y = npu.reduce_sum(bt)
  set(y, { dynamic_input = true, dynamic_inputs_shape_range = "getnext:[1~4]" })
  local sess = npu.Session { graph = g }
  lu.assertEquals(sess:run(y):item(), 1)
  set(y, { dynamic_input = true, dynamic_inputs_shape_range = "getnext:[3~5]" })
  local err = fails(sess.run, sess, y)
  lu.assertStrContains(tostring(err), "get_next output")
  lu.assertStrContains(tostring(err), "dim 0 of size 2, outside its range [3~5]")
  set(y, { dynamic_input = true, dynamic_inputs_shape_range = "getnext:[2],[2]" })
  lu.assertStrContains(fails(sess.run, sess, y), "'getnext:' gives 2 range(s) but this run has 1 get_next output(s)")
end

TestExperimentalConfig = {}

function TestExperimentalConfig:test_construction_validates()
  local e = npu.ExperimentalConfig { accelerate_train_mode = "fast|step|0.9" }
  lu.assertEquals(e.accelerate_train_mode, "fast|step|0.9")
  lu.assertNil(e.graph_compiler_cache_dir)
  lu.assertEquals(tostring(e), 'npu.ExperimentalConfig{accelerate_train_mode = "fast|step|0.9"}')
  lu.assertEquals(tostring(npu.ExperimentalConfig()), "npu.ExperimentalConfig{}")
  local err = fails(npu.ExperimentalConfig, { accelerate_mode = "fast|step|0.9" })
  lu.assertStrContains(tostring(err), "unknown parameter 'accelerate_mode' (did you mean 'accelerate_train_mode'?)")
  err = fails(npu.ExperimentalConfig, { accelerate_train_mode = "fast|step|0.95" })
  lu.assertStrContains(tostring(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "accelerate_train_mode")
  lu.assertStrContains(fails(npu.ExperimentalConfig, { graph_compiler_cache_dir = 3 }), "expects a string")
  lu.assertStrContains(fails(npu.ExperimentalConfig, { graph_compiler_cache_dir = "" }), "an empty path")
  lu.assertStrContains(fails(function() e.accelerate_train_mode = "slow|step|0.5" end), "NPU_ERR_OPTION")
  lu.assertStrContains(fails(function() return e.cache_dir end),
    "unknown parameter 'cache_dir' (did you mean 'graph_compiler_cache_dir'?)")
  e.graph_compiler_cache_dir = "/tmp"
  lu.assertEquals(e.graph_compiler_cache_dir, "/tmp")
end

function TestExperimentalConfig:test_round_trip_into_a_session_through_NPURunConfig()
  local g = product_graph()
  local cfg = npu.ConfigProto()
  local op = cfg.graph_options.rewrite_options.custom_optimizers:add()
  op.name = "NpuOptimizer"
  op.parameter_map["iterations_per_loop"].i = 10
  local exp = npu.ExperimentalConfig { accelerate_train_mode = "fast|loss|1.05",
    graph_compiler_cache_dir = "/tmp" }
  local rc = npu.NPURunConfig { experimental_config = exp, session_config = cfg,
    precision_mode = "allow_fp32_to_fp16", model_dir = "/tmp/model" }
  local sess = npu.Session { graph = g, config = rc }
  local o = sess:options()
  lu.assertEquals(o:get("accelerate_train_mode"), "fast|loss|1.05")
  lu.assertEquals(o:get("graph_compiler_cache_dir"), "/tmp")
  lu.assertEquals(o:get("iterations_per_loop"), 10)
  lu.assertEquals(o:get("precision_mode"), "allow_fp32_to_fp16")
  -- errors at the line that builds the run config
  local err = fails(npu.NPURunConfig, { experimental_config = exp, accelerate_train_mode = "fast|step|0.5" })
  lu.assertStrContains(tostring(err), "option 'accelerate_train_mode' is given by both")
  lu.assertStrContains(fails(npu.NPURunConfig, { precison_mode = "force_fp16" }), "did you mean 'precision_mode'?")
  lu.assertStrContains(fails(npu.NPURunConfig, { experimental_config = {} }), "expects an npu.ExperimentalConfig")
  lu.assertStrContains(fails(npu.NPURunConfig, { model_dir = 1 }), "model_dir: expects a string")
  lu.assertStrContains(fails(npu.NPURunConfig, { iterations_per_loop = "x" }), "takes an integer")
end

function TestExperimentalConfig:test_graph_compiler_cache_dir_must_exist()
  local g, x, y = product_graph()
  local missing = os.tmpname()
  os.remove(missing) -- (os.tmpname creates the file)
  missing = missing .. ".no_such_dir"
  local err = fails(npu.Session, { graph = g, options = { graph_compiler_cache_dir = missing } })
  lu.assertStrContains(tostring(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), missing)
  npu.Session { graph = g, options = { graph_compiler_cache_dir = "/tmp" } }
  set(y, { experimental_config = npu.ExperimentalConfig { graph_compiler_cache_dir = missing } })
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer()) -- does not reach y
  err = fails(sess.run, sess, y, { [x] = X })
  lu.assertStrContains(tostring(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), "node '" .. y:op():name() .. "'")
end

-- accelerate_train_mode set through an ExperimentalConfig behaves as the session option does
-- (spec/accelerate_spec.lua): reduced precision before 90 % of the steps, exact after.
local function check_step_mode(sess, x, y, want)
  sess:set_progress(0, 100)
  local early = sess:run(y, { [x] = X })
  lu.assertTrue(sess:reduced_precision())
  lu.assertTrue(is_f16(early))
  lu.assertFalse(npu.allclose(early, want, 0, 0))
  sess:set_progress(90, 100)
  local late = sess:run(y, { [x] = X })
  lu.assertFalse(sess:reduced_precision())
  lu.assertTrue(npu.allclose(late, want, 0, 0))
end

function TestExperimentalConfig:test_accelerate_through_the_run_config()
  local g, x, y = product_graph()
  local want = exact(g, x, y)
  local rc = npu.NPURunConfig { experimental_config = npu.ExperimentalConfig { accelerate_train_mode = "fast|step|0.9" } }
  local sess = npu.Session { graph = g, config = rc }
  sess:run(g:global_variables_initializer())
  check_step_mode(sess, x, y, want)
end

function TestExperimentalConfig:test_accelerate_on_one_graph()
  local g, x, y = product_graph()
  local want = exact(g, x, y)
  local z = x:matmul(g:const(npu.ones({ 8, 2 })))
  local sess = npu.Session { graph = g }
  lu.assertStrContains(fails(sess.set_progress, sess, 0, 100), "accelerate_train_mode is not set")
  set(y, { experimental_config = npu.ExperimentalConfig { accelerate_train_mode = "fast|step|0.9" } })
  sess:run(g:global_variables_initializer())
  check_step_mode(sess, x, y, want)
  -- the session's own runs are not accelerated
  sess:set_progress(0, 100)
  local zs = sess:run(z, { [x] = X })
  local plain = npu.Session { graph = g }
  lu.assertTrue(npu.allclose(zs, plain:run(z, { [x] = X }), 0, 0))
  -- the session's precision_mode forbids it, as for the session option
  local strict = npu.Session { graph = g, options = { precision_mode = "force_fp16" } }
  strict:run(g:global_variables_initializer())
  local err = fails(strict.run, strict, y, { [x] = X })
  lu.assertStrContains(tostring(err), "NPU_ERR_CONFLICT")
  lu.assertStrContains(tostring(err), "precision_mode")
end

function TestExperimentalConfig:test_graph_level_accelerate_replaces_the_session_one()
  local g, x, y = product_graph()
  local want = exact(g, x, y)
  -- the session asks for loss mode under the 000 name; the graph for step mode
  local sess = npu.Session { graph = g, options = { experimental_accelerate_train_mode = "fast|loss|1.05" } }
  set(y, { experimental_config = npu.ExperimentalConfig { accelerate_train_mode = "fast|step|0.9" } })
  sess:run(g:global_variables_initializer())
  check_step_mode(sess, x, y, want)
end

TestExecConfigExport = {}

function TestExecConfigExport:test_pb_export_keeps_the_config_as_node_attributes()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local y = npu.relu(x, { name = "y" })
  set(y, { is_train_graph = true, dynamic_input = true, dynamic_inputs_shape_range = "data:[2]" })
  local path = os.tmpname()
  npu.export_graph_def(g, path)
  local f = assert(io.open(path, "rb"))
  local bytes = f:read("a")
  f:close()
  for _, attr in ipairs({ "_is_train_graph", "_graph_dynamic_input", "_graph_dynamic_inputs_shape_range", "data:[2]" }) do
    lu.assertStrContains(bytes, attr)
  end
  local g2 = npu.import_graph_def(path)
  os.remove(path)
  lu.assertEquals(npu.util.graph_exec_config(g2:get_operation_by_name("y")),
    { graph_run_mode = 1, dynamic_input = true, dynamic_inputs_shape_range = "data:[2]" })
end
