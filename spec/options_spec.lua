-- options_spec.lua — session options: the table (every option of the reference), typed
-- setters, values and ranges, unknown names, the cross-option rules, the environment overlay,
-- the ConfigProto look-alike and the generated documentation.
--
-- Run with the suite (lua5.4 spec/run.lua), or alone from the checkout root:
--   LUA_PATH="lua/?.lua;lua/?/init.lua;;" LUA_CPATH="./?.so;;" lua5.4 spec/options_spec.lua
local lu = require("luaunit")
local core = require("npu.core")
local config = require("npu.config")

local ROOT = ROOT_DIR or "."

-- helpers -------------------------------------------------------------------------------

local function split(s, sep)
  local t = {}
  for piece in (s .. sep):gmatch("(.-)" .. sep:gsub("%p", "%%%0")) do t[#t + 1] = piece end
  return t
end

-- Calls f(...) expecting an error; returns the message.
local function fails(f, ...)
  local ok, err = pcall(f, ...)
  lu.assertFalse(ok, "expected an error")
  return tostring(err)
end

local function assert_code(err, code)
  lu.assertStrContains(tostring(err), code)
end

-- The option's example as the Lua value of its type.
local function example_value(info)
  local v = info.example
  if info.type == "i" then return math.tointeger(tonumber(v)) end
  if info.type == "b" then return v == "True" end
  if info.type == "f" then return tonumber(v) end
  return v
end

local function typed(info, text)
  if info.type == "i" then return math.tointeger(tonumber(text)) end
  if info.type == "b" then return text == "True" or text == "true" end
  if info.type == "f" then return tonumber(text) end
  return text
end

local setter = { i = "set_int", s = "set_string", b = "set_bool", f = "set_float" }
local wrong_value = { i = 1, s = "x", b = true, f = 1.5 }

-- "a|b|c" (or a single word): a value list.
local function is_enum(info)
  return info.type ~= "b" and not info.allowed:find("[^%w_%-%.|]")
end

local function is_range(info)
  return info.allowed:match("^[%[%(]%s*%-?%d") ~= nil
end

local OPTIONS = core.option_list()
local BY_NAME = {}
for _, info in ipairs(OPTIONS) do BY_NAME[info.name] = info end

-- The option names of 000 (every line holding just a name in its tables), in its order.
local NAMES_000 = {
  "graph_run_mode", "session_device_id", "deterministic", "atomic_clean_policy",
  "static_memory_policy", "variable_use_1g_huge_page", "external_weight", "input_fusion_size",
  "input_batch_cpy", "input_shape", "dynamic_dims", "dynamic_node_type", "compile_hybrid_mode",
  "ac_parallel_enable", "compile_dynamic_mode", "all_tensor_not_empty", "mix_compile_mode",
  "in_out_pair_flag", "in_out_pair", "enable_exception_dump", "op_debug_config", "debug_dir",
  "export_compile_stat", "precision_mode_v2", "precision_mode", "modify_mixlist",
  "customize_dtypes", "enable_dump", "dump_mode", "enable_dump_debug", "dump_debug_mode",
  "dump_path", "dump_step", "dump_data", "dump_layer", "quant_dumpable", "fusion_switch_file",
  "buffer_optimize", "use_off_line", "iterations_per_loop", "hcom_parallel",
  "enable_small_channel", "op_precision_mode", "enable_scope_fusion_passes",
  "stream_max_parallel_num", "is_tailing_optimization", "variable_placement", "frozen_variable",
  "graph_max_parallel_model_num", "profiling_mode", "profiling_options", "aoe_mode", "work_path",
  "aoe_config_file", "op_compiler_cache_mode", "op_compiler_cache_dir", "aicore_num",
  "oo_constant_folding", "local_rank_id", "local_device_list", "hccl_timeout", "op_wait_timeout",
  "op_execute_timeout", "stream_sync_timeout", "event_sync_timeout", "graph_compiler_cache_dir",
  "jit_compile", "shape_generalization_mode", "experimental_accelerate_train_mode",
  "auto_multistream_parallel_mode", "op_debug_level", "enable_data_pre_proc",
  "variable_format_optimize", "op_select_implmode", "optypelist_for_implmode", "dynamic_input",
  "dynamic_graph_execute_mode", "dynamic_inputs_shape_range", "graph_memory_max_size",
  "variable_memory_max_size",
}
-- Only in the older documents: 002 (quantisation compression), 003, 004.
local NAMES_OLDER = { "enable_compress_weight", "compress_weight_conf", "auto_tune_mode",
  "fp_point", "bp_point", "accelerate_train_mode" }

-- The table ------------------------------------------------------------------------------

TestOptionsTable = {}

function TestOptionsTable:test_every_option_of_000_is_in_the_table()
  lu.assertEquals(#NAMES_000, 80)
  for _, name in ipairs(NAMES_000) do
    lu.assertNotNil(BY_NAME[name], name .. " (000) missing from options.def")
  end
end

function TestOptionsTable:test_options_only_in_older_documents_are_in_the_table()
  for _, name in ipairs(NAMES_OLDER) do lu.assertNotNil(BY_NAME[name], name) end
  lu.assertEquals(#OPTIONS, #NAMES_000 + #NAMES_OLDER)
end

function TestOptionsTable:test_names_are_unique()
  local seen = {}
  for _, info in ipairs(OPTIONS) do
    lu.assertNil(seen[info.name], "duplicate " .. info.name)
    seen[info.name] = true
  end
end

function TestOptionsTable:test_setter_types_follow_the_reference_examples()
  -- a sample of the configuration examples of 000
  local want = { graph_run_mode = "i", precision_mode = "s", use_off_line = "b",
    ac_parallel_enable = "s", quant_dumpable = "s", aoe_mode = "s", enable_small_channel = "i",
    compile_hybrid_mode = "i", enable_exception_dump = "i", iterations_per_loop = "i",
    profiling_mode = "b", profiling_options = "s", enable_data_pre_proc = "b",
    op_debug_level = "i", hccl_timeout = "i", external_weight = "b", dynamic_node_type = "i" }
  for name, t in pairs(want) do lu.assertEquals(BY_NAME[name].type, t, name) end
end

function TestOptionsTable:test_fields_are_filled()
  local scenarios = { ["Training"] = true, ["Online inference"] = true,
    ["Training/Online inference"] = true }
  for _, info in ipairs(OPTIONS) do
    lu.assertTrue(("isbf"):find(info.type, 1, true) ~= nil, info.name)
    lu.assertTrue(scenarios[info.scenario], info.name .. ": " .. info.scenario)
    lu.assertTrue(#info.section > 0, info.name)
    lu.assertTrue(#info.allowed > 0, info.name)
    lu.assertTrue(#info.example > 0, info.name)
    lu.assertEquals(type(info.deprecated), "boolean")
  end
end

function TestOptionsTable:test_effect_says_plainly_what_happens_here()
  for _, info in ipairs(OPTIONS) do
    local e = info.effect
    lu.assertTrue((e:match("^real: ") or e:match("^validated") or e:match("^no effect")) ~= nil,
      info.name .. ": " .. e)
  end
end

function TestOptionsTable:test_only_the_implemented_options_claim_a_real_effect()
  local real = {}
  for _, info in ipairs(OPTIONS) do
    if info.effect:match("^real: ") then real[#real + 1] = info.name end
  end
  table.sort(real)
  lu.assertEquals(real, { "accelerate_train_mode", "all_tensor_not_empty", -- exec/exec.c run_dynamic
    "aoe_config_file", "aoe_mode", -- compile/tuning.c
    "bp_point", "compile_dynamic_mode", "compile_hybrid_mode", -- compile/generalize.c, session.c
    "customize_dtypes", "deterministic",
    "dump_data", "dump_debug_mode", "dump_layer", "dump_mode", "dump_path", "dump_step", -- exec/dump.c
    "dynamic_dims", "dynamic_input",
    "dynamic_inputs_shape_range", "dynamic_node_type", "enable_dump", "enable_dump_debug", -- exec/dump.c
    "enable_exception_dump", -- exec/exception_dump.c
    "experimental_accelerate_train_mode", "export_compile_stat",
    "external_weight", -- compile/external_weight.c
    "fp_point",
    "fusion_switch_file", "graph_max_parallel_model_num", -- session.c (lanes)
    "graph_run_mode",
    "hccl_timeout", "hcom_parallel", -- dist/dist.c, compile/schedule.c
    "in_out_pair", "in_out_pair_flag", -- compile/mixed.c
    "input_shape", "iterations_per_loop",
    "mix_compile_mode", -- compile/mixed.c, io/graphdef.c (npu_context_register_host_op)
    "modify_mixlist",
    "oo_constant_folding", "op_compiler_cache_dir", "op_compiler_cache_mode", -- compile/tuning.c
    "op_execute_timeout", "op_precision_mode", "op_select_implmode",
    "op_wait_timeout", -- exec/exec.c, exec/dataset.c (core/watch.c)
    "optypelist_for_implmode", "precision_mode", "precision_mode_v2",
    "profiling_mode", "profiling_options", -- exec/profile.c (and bp_point, fp_point)
    "session_device_id", "shape_generalization_mode", "static_memory_policy", "use_off_line",
    "work_path" }) -- compile/tuning.c
end

function TestOptionsTable:test_hardware_options_say_no_effect_on_the_cpu()
  for _, name in ipairs({ "aicore_num", "op_debug_config",
    "stream_sync_timeout", "variable_use_1g_huge_page", "jit_compile", "buffer_optimize" }) do
    lu.assertStrContains(BY_NAME[name].effect, "no effect on the CPU device", name)
  end
end

function TestOptionsTable:test_deprecated_section_is_marked()
  for _, info in ipairs(OPTIONS) do
    if info.section == "Deprecated" then lu.assertTrue(info.deprecated, info.name) end
  end
  lu.assertTrue(BY_NAME.auto_tune_mode.deprecated)
  lu.assertFalse(BY_NAME.precision_mode.deprecated)
end

function TestOptionsTable:test_mode_dependent_defaults_are_documented()
  lu.assertStrContains(BY_NAME.precision_mode.default, "force_fp16 (graph_run_mode=0)")
  lu.assertStrContains(BY_NAME.precision_mode_v2.default, "fp16 (graph_run_mode=0)")
  lu.assertEquals(BY_NAME.graph_run_mode.default, "1")
end

function TestOptionsTable:test_option_info_of_a_known_and_an_unknown_name()
  local info = core.option_info("dump_path")
  lu.assertEquals(info.type, "s")
  lu.assertEquals(info.section, "Accuracy Comparison")
  local none, msg, best = core.option_info("dump_pth")
  lu.assertNil(none)
  lu.assertStrContains(tostring(msg), "did you mean 'dump_path'?")
  lu.assertEquals(best, "dump_path")
end

-- One generated test per option: the right setter accepts the reference's example, every other
-- setter is refused naming the option, the value reads back, and an unset option reads its
-- default.
TestOptionsEach = {}
for _, info in ipairs(OPTIONS) do
  TestOptionsEach["test_" .. info.name] = function()
    local o = core.options_new()
    local v0, set0 = o:get(info.name)
    lu.assertFalse(set0)
    if info.default ~= "" and not info.default:find("graph_run_mode") then
      lu.assertEquals(v0, typed(info, info.default))
    end
    for t, fn in pairs(setter) do
      if t ~= info.type then
        local err = fails(o[fn], o, info.name, wrong_value[t])
        assert_code(err, "NPU_ERR_OPTION")
        lu.assertStrContains(tostring(err), "'" .. info.name .. "'")
        lu.assertStrContains(tostring(err), "takes")
      end
    end
    lu.assertFalse(o:is_set(info.name))
    local v = example_value(info)
    o[setter[info.type]](o, info.name, v)
    local got, was_set = o:get(info.name)
    lu.assertEquals(got, v)
    lu.assertTrue(was_set)
    lu.assertTrue(o:is_set(info.name))
  end
end

-- Values -----------------------------------------------------------------------------------

TestOptionsValues = {}

function TestOptionsValues:test_every_enum_option_accepts_its_values_and_refuses_others()
  local n = 0
  for _, info in ipairs(OPTIONS) do
    if is_enum(info) then
      n = n + 1
      local o = core.options_new()
      for _, value in ipairs(split(info.allowed, "|")) do
        o[setter[info.type]](o, info.name, typed(info, value))
        lu.assertEquals((o:get(info.name)), typed(info, value))
      end
      local bad = info.type == "i" and 97 or "no_such_value"
      local err = fails(o[setter[info.type]], o, info.name, bad)
      assert_code(err, "NPU_ERR_OPTION")
      lu.assertStrContains(tostring(err), info.name)
    end
  end
  lu.assertTrue(n >= 25, "enum options found: " .. n)
end

function TestOptionsValues:test_every_range_option_checks_both_ends()
  local n = 0
  for _, info in ipairs(OPTIONS) do
    if is_range(info) and info.type == "i" then
      n = n + 1
      local open, lo, hi, close = info.allowed:match("^([%[%(])%s*(%-?%d+)%s*,%s*(%-?%d+)%s*([%]%)])$")
      lo, hi = math.tointeger(tonumber(lo)), math.tointeger(tonumber(hi))
      local first = open == "[" and lo or lo + 1
      local last = close == "]" and hi or hi - 1
      local o = core.options_new()
      o:set_int(info.name, first)
      o:set_int(info.name, last)
      assert_code(fails(o.set_int, o, info.name, first - 1), "NPU_ERR_OPTION")
      assert_code(fails(o.set_int, o, info.name, last + 1), "NPU_ERR_OPTION")
      lu.assertEquals((o:get(info.name)), last, "a failed set changes nothing")
    end
  end
  lu.assertTrue(n >= 10, "range options found: " .. n)
end

-- Formats: {option, {good...}, {bad...}}
local FORMATS = {
  { "input_shape", { "data:1,1,40,-1;label:1,-1;mask:-1,-1", "x:0", "a/b:-1, 3" },
    { "", "data", "data:1,x", ":1,2", "data:1,-2" } },
  { "dynamic_dims", { "20,20,1,1;40,40,2,2;80,60,4,4", "1;2" },
    { "1", "1,2;3", "1,x;2,3", "0;1", "" } },
  { "dump_step", { "0|5|10", "0|3-5|10", "7" }, { "", "a", "5-3", "1||2", "-1" } },
  { "dump_layer", { "nodename1 nodename2", "x" }, { "", "   " } },
  { "in_out_pair", { "[[['a'], ['b', 'c']]]", '[[["in"], ["out"]]]' },
    { "", "a,b", "[[['a']]", "[[a]]", "[]" } },
  { "stream_max_parallel_num", { "DNN_VM_AICPU:10,AIcoreEngine:1", "AIcoreEngine:4" },
    { "", "AIcoreEngine", "AIcoreEngine:0", "x y:1", "A:1," } },
  { "aicore_num", { "2|4", "24|48" }, { "", "2", "0|4", "2|x" } },
  { "experimental_accelerate_train_mode", { "fast|step|0.9", "fast1|loss|1.05", "fast|step" },
    { "", "slow|step|0.9", "fast|time|0.9", "fast|step|0.95", "fast|loss|1.6", "fast|step|x" } },
  { "dynamic_inputs_shape_range",
    { "getnext:[128 ,3~5, 2~128, -1],[64 ,3~5, 2~128, -1];data:[128 ,3~5, 2~128, -1]",
      "data:[3~5],[3~6]", "data:[]" },
    { "", "foo:[1]", "data:1,2", "data:[5~3]", "data:[1],x" } },
  { "local_device_list", { "0,1", "3" }, { "", "0,,1", "a", "-1" } },
  { "graph_memory_max_size", { "26843545600" }, { "", "26G", "0", "-5" } },
  { "enable_scope_fusion_passes", { "ScopeLayerNormPass,ScopeClipBoxesPass" }, { "", "a,,b" } },
  { "auto_tune_mode", { "RL,GA", "GA" }, { "", "RL,XX", "rl" } },
  { "dump_path", { "/home/test/output", "output" }, { "", "a\nb" } },
  { "profiling_options",
    { '{"output":"/tmp/profiling","training_trace":"on","fp_point":"","bp_point":""}',
      '{}', '{"storage_limit":"200MB","aic_metrics":"PipeUtilization"}',
      '{"aic_metrics":"Custom:0x49,0x8,0x15"}', '{"sys_hardware_mem_freq":50}',
      '{"host_sys":"cpu,mem","task_trace":"l1"}', '{"instr_profiling_freq":"1000","l2":"off"}',
      "training_trace:task_trace", "op_trace" },
    { "", "{", '{"output":"/tmp"', '{"trainig_trace":"on"}', '{"training_trace":"maybe"}',
      '{"storage_limit":"100MB"}', '{"sys_interconnection_freq":"51"}',
      '{"aic_metrics":"Custom:0x7F"}', '{"host_sys":"cpu,disk"}', '{"output":"a\\nb"}',
      '{"instr_profiling_freq":"1000","training_trace":"on"}', '{"a":{"b":1}}',
      '{"l2":"on","l2":"off"}', "op_trace:training_trace", "bogus_trace" } },
}

function TestOptionsValues:test_formatted_strings_are_checked()
  for _, case in ipairs(FORMATS) do
    local name, good, bad = case[1], case[2], case[3]
    for _, v in ipairs(good) do
      local o = core.options_new()
      local ok, err = pcall(o.set_string, o, name, v)
      lu.assertTrue(ok, ("%s = %q should pass: %s"):format(name, v, tostring(err)))
    end
    for _, v in ipairs(bad) do
      local o = core.options_new()
      local ok, err = pcall(o.set_string, o, name, v)
      lu.assertFalse(ok, ("%s = %q should fail"):format(name, v))
      assert_code(tostring(err), "NPU_ERR_OPTION")
      lu.assertStrContains(tostring(err), name)
    end
  end
end

function TestOptionsValues:test_profiling_field_typo_suggests_the_field()
  local o = core.options_new()
  local err = fails(o.set_string, o, "profiling_options", '{"trainig_trace":"on"}')
  lu.assertStrContains(tostring(err), "did you mean 'training_trace'?")
end

function TestOptionsValues:test_unknown_name_suggests_the_nearest()
  local o = core.options_new()
  local err = fails(o.set_string, o, "precison_mode", "force_fp16")
  assert_code(err, "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "unknown option 'precison_mode' (did you mean 'precision_mode'?)")
  lu.assertStrContains(fails(o.set_int, o, "graph_run_mod", 0), "did you mean 'graph_run_mode'?")
  lu.assertStrContains(fails(o.set_bool, o, "Use_Off_Line", true), "did you mean 'use_off_line'?")
  lu.assertStrContains(fails(o.get, o, "dump_pth"), "did you mean 'dump_path'?")
end

function TestOptionsValues:test_a_far_unknown_name_gets_no_suggestion()
  local o = core.options_new()
  local err = fails(o.set_int, o, "completely_unrelated_thing", 1)
  lu.assertStrContains(tostring(err), "unknown option 'completely_unrelated_thing'")
  lu.assertNil(err:find("did you mean", 1, true))
end

function TestOptionsValues:test_a_failed_set_changes_nothing()
  local o = core.options_new()
  o:set_string("precision_mode", "force_fp32")
  fails(o.set_string, o, "precision_mode", "fp17")
  fails(o.set_int, o, "precision_mode", 1)
  lu.assertEquals({ o:get("precision_mode") }, { "force_fp32", true })
end

function TestOptionsValues:test_setters_do_not_coerce_lua_types()
  local o = core.options_new()
  lu.assertStrContains(fails(o.set_string, o, "aoe_mode", 2), "string expected")
  lu.assertStrContains(fails(o.set_bool, o, "use_off_line", 1), "boolean expected")
  lu.assertStrContains(fails(o.set_int, o, "graph_run_mode", 0.5), "integer")
end

function TestOptionsValues:test_int_setter_refuses_huge_values()
  local o = core.options_new()
  assert_code(fails(o.set_int, o, "hccl_timeout", math.maxinteger), "NPU_ERR_OPTION")
end

function TestOptionsValues:test_no_option_takes_a_float()
  local o = core.options_new()
  for _, info in ipairs(OPTIONS) do lu.assertNotEquals(info.type, "f", info.name) end
  assert_code(fails(o.set_float, o, "hccl_timeout", 1.5), "NPU_ERR_OPTION")
end

function TestOptionsValues:test_defaults_depend_on_graph_run_mode()
  local o = core.options_new()
  lu.assertEquals({ o:get("precision_mode") }, { "must_keep_origin_dtype", false })
  lu.assertEquals((o:get("precision_mode_v2")), "origin")
  lu.assertEquals((o:get("enable_small_channel")), 0)
  o:set_int("graph_run_mode", 0)
  lu.assertEquals({ o:get("precision_mode") }, { "force_fp16", false })
  lu.assertEquals((o:get("precision_mode_v2")), "fp16")
  lu.assertEquals((o:get("enable_small_channel")), 1)
end

function TestOptionsValues:test_options_without_default_read_zero_and_unset()
  local o = core.options_new()
  lu.assertEquals({ o:get("op_execute_timeout") }, { 0, false })
  lu.assertEquals({ o:get("dump_path") }, { "", false })
  lu.assertEquals({ o:get("variable_format_optimize") }, { false, false })
end

function TestOptionsValues:test_every_default_passes_its_own_check()
  for _, info in ipairs(OPTIONS) do
    if info.default ~= "" then
      local o = core.options_new()
      local value = info.default:match("^(.-) %(graph_run_mode=1%)") or info.default
      o[setter[info.type]](o, info.name, typed(info, value))
    end
  end
end

function TestOptionsValues:test_copy_is_independent()
  local a = core.options_new()
  a:set_string("dump_path", "/tmp/a")
  local b = a:copy()
  b:set_string("dump_path", "/tmp/b")
  b:set_int("graph_run_mode", 0)
  lu.assertEquals((a:get("dump_path")), "/tmp/a")
  lu.assertEquals((b:get("dump_path")), "/tmp/b")
  lu.assertFalse(a:is_set("graph_run_mode"))
end

function TestOptionsValues:test_tostring_lists_the_set_options()
  local o = core.options_new()
  lu.assertEquals(tostring(o), "npu.Options{}")
  o:set_int("graph_run_mode", 0)
  o:set_string("precision_mode", "force_fp16")
  lu.assertEquals(tostring(o), "npu.Options{graph_run_mode=0, precision_mode='force_fp16'}")
end

function TestOptionsValues:test_values_and_generic_set()
  local o = core.options_new()
  o:set("graph_run_mode", 0):set("use_off_line", false):set("dump_path", "/tmp")
  lu.assertEquals(o:values(), { graph_run_mode = 0, use_off_line = false, dump_path = "/tmp" })
  lu.assertStrContains(fails(o.set, o, "graph_run_mode", "0"), "takes an int (.i), got string")
  lu.assertStrContains(fails(o.set, o, "use_off_line", 0), "takes a bool (.b), got number")
  lu.assertStrContains(fails(o.set, o, "precison_mode", "x"), "did you mean 'precision_mode'?")
end

function TestOptionsValues:test_many_options_objects_are_collected()
  for _ = 1, 2000 do
    local o = core.options_new()
    o:set_string("dump_path", "/tmp/x")
    o:copy()
  end
  collectgarbage()
  collectgarbage()
end

-- Cross-option rules ------------------------------------------------------------------------

local ENV = {}
for _, e in ipairs(core.option_env_list()) do ENV[e.variable] = e end

local function first_not_in(info, values)
  local excluded = {}
  for _, v in ipairs(split(values, "|")) do excluded[v] = true end
  for _, v in ipairs(split(info.allowed, "|")) do
    if not excluded[v] then return typed(info, v) end
  end
  if info.type == "b" then return false end
  error("no value outside " .. values .. " for " .. info.name)
end

-- Makes side (name, when, values) hold in o / env.
local function satisfy(o, env, name, when, values)
  if ENV[name] then
    env[name] = values and split(values, "|")[1] or "1"
    return
  end
  local info = BY_NAME[name]
  if when == "set" or when == "set explicitly" then
    o:set(name, example_value(info))
  elseif when == "true" then
    o:set(name, info.type == "b" and true or 1)
  elseif when == "in" then
    o:set(name, typed(info, split(values, "|")[1]))
  elseif when == "not in" then
    o:set(name, first_not_in(info, values))
  elseif when == "effective in" then
    local cur = o:get(name)
    if not values:find(tostring(cur), 1, true) then o:set(name, typed(info, split(values, "|")[1])) end
  elseif when == "json field" then
    local field, value = values:match("^(.-)=(.*)$")
    o:set(name, ('{"%s":"%s"}'):format(field, value))
  else
    error("unknown condition " .. when)
  end
end

-- Makes side b of a "requires" rule fail (set to another valid value, or left unset).
local function falsify(o, name, when, values)
  local info = BY_NAME[name]
  if when == "true" then
    if info.type == "b" then o:set(name, false) else o:set(name, 0) end
  elseif when == "in" then o:set(name, first_not_in(info, values)) end
end

-- Extra settings some rules need so that no earlier rule fires first.
local EXTRAS = {
  ["input_shape>dynamic_node_type"] = { dynamic_dims = true },
  ["dynamic_dims>dynamic_inputs_shape_range"] = { input_shape = true, dynamic_node_type = 0 },
  ["compile_dynamic_mode>shape_generalization_mode"] = { jit_compile = "true" },
  ["op_precision_mode>optypelist_for_implmode"] = { op_select_implmode = true },
  ["compile_hybrid_mode>dynamic_node_type"] = { input_shape = true, dynamic_dims = true },
  ["compile_hybrid_mode>external_weight"] = { input_shape = true, dynamic_dims = true,
    dynamic_node_type = 1 },
  ["enable_exception_dump>enable_dump"] = { dump_path = true },
}

local function apply_extras(o, key)
  for name, v in pairs(EXTRAS[key] or {}) do
    o:set(name, v == true and example_value(BY_NAME[name]) or v)
  end
end

local function run_check(o, env)
  if next(env) then o:apply_env(env) end
  return pcall(o.check, o)
end

TestOptionsRules = {}

function TestOptionsRules:test_the_rule_table_names_known_options_and_variables()
  local rules = core.option_rules()
  lu.assertTrue(#rules >= 40)
  for _, r in ipairs(rules) do
    for _, side in ipairs({ "a", "b", "guard" }) do
      local name = r[side]
      if name then lu.assertTrue(BY_NAME[name] ~= nil or ENV[name] ~= nil, name) end
    end
    lu.assertTrue(#r.reason > 10)
  end
end

function TestOptionsRules:test_every_conflict_rule_fires_naming_both_options()
  local n = 0
  for i, r in ipairs(core.option_rules()) do
    local key = r.a .. ">" .. (r.b or "")
    local o, env = core.options_new(), {}
    if r.guard then satisfy(o, env, r.guard, r.guard_when, r.guard_values) end
    apply_extras(o, key)
    if r.kind == "exclusive" or r.kind == "env-exclusive" then
      satisfy(o, env, r.a, r.a_when, r.a_values)
      satisfy(o, env, r.b, r.b_when, r.b_values)
    elseif r.kind == "requires" then
      satisfy(o, env, r.a, r.a_when, r.a_values)
      falsify(o, r.b, r.b_when, r.b_values)
    elseif r.kind == "together" then
      satisfy(o, env, r.a, r.a_when, r.a_values)
    elseif r.kind == "match" then
      o:set("input_shape", "data:1,-1;label:-1,-1") -- 3 dynamic dims
      o:set("dynamic_dims", "1,2;3,4")              -- 2 sizes per profile
      o:set("dynamic_node_type", 0)
    end
    if r.kind ~= "precedence" and r.kind ~= "note" then
      n = n + 1
      local ok, err = run_check(o, env)
      lu.assertFalse(ok, ("rule %d (%s %s / %s) did not fire"):format(i, r.kind, r.a, r.b))
      err = tostring(err)
      assert_code(err, "NPU_ERR_CONFLICT")
      lu.assertStrContains(tostring(err), r.a, false, "rule " .. i)
      lu.assertStrContains(tostring(err), r.b, false, "rule " .. i)
    end
  end
  lu.assertTrue(n >= 25, "conflict rules tested: " .. n)
end

function TestOptionsRules:test_together_fires_from_either_side()
  local o = core.options_new()
  o:set_string("dynamic_dims", "1,2;3,4")
  local err = fails(o.check, o)
  lu.assertStrContains(tostring(err), "'input_shape' and 'dynamic_dims' must be used together")
end

function TestOptionsRules:test_precedence_and_note_rules_are_not_errors()
  local n = 0
  for _, r in ipairs(core.option_rules()) do
    if r.kind == "precedence" or r.kind == "note" then
      n = n + 1
      local o, env = core.options_new(), {}
      apply_extras(o, r.a .. ">" .. (r.b or ""))
      satisfy(o, env, r.a, r.a_when, r.a_values)
      if r.b then satisfy(o, env, r.b, r.b_when, r.b_values) end
      local ok, err = run_check(o, env)
      lu.assertTrue(ok, ("%s %s / %s: %s"):format(r.kind, r.a, tostring(r.b), tostring(err)))
    end
  end
  lu.assertTrue(n >= 8)
end

function TestOptionsRules:test_op_precision_mode_takes_precedence_over_op_select_implmode()
  local o = core.options_new()
  o:set_string("op_precision_mode", "/home/test/op_precision.ini")
  o:set_string("op_select_implmode", "high_precision")
  o:set_string("optypelist_for_implmode", "Pooling")
  o:check()
end

function TestOptionsRules:test_satisfied_combinations_pass()
  local o = core.options_new()
  o:set_int("graph_run_mode", 0)
  o:set_string("input_shape", "data:1,1,40,-1;label:1,-1;mask:-1,-1")
  o:set_string("dynamic_dims", "20,20,1,1;40,40,2,2;80,60,4,4")
  o:set_int("dynamic_node_type", 1)
  o:set_int("compile_hybrid_mode", 1)
  o:set_bool("enable_dump", true)
  o:set_string("dump_path", "/tmp/dump")
  o:set_string("variable_placement", "Host")
  o:set_bool("mix_compile_mode", true)
  o:set_string("precision_mode_v2", "origin")
  o:set_string("experimental_accelerate_train_mode", "fast|step|0.9")
  o:set_string("shape_generalization_mode", "FULL")
  o:set_string("jit_compile", "true")
  o:check()
end

function TestOptionsRules:test_enable_small_channel_default_is_fine_in_inference()
  local o = core.options_new()
  o:set_int("graph_run_mode", 0)
  o:set_int("enable_small_channel", 1)
  o:check()
  o:set_int("enable_small_channel", 0)
  lu.assertStrContains(fails(o.check, o), "'enable_small_channel'=0")
end

function TestOptionsRules:test_profiling_training_trace_in_inference()
  local o = core.options_new()
  o:set_int("graph_run_mode", 0)
  o:set_string("profiling_options", '{"training_trace":"on"}')
  o:check() -- profiling_mode off: the options are not used
  o:set_bool("profiling_mode", true)
  local err = fails(o.check, o)
  lu.assertStrContains(tostring(err), "profiling_options")
  lu.assertStrContains(tostring(err), "graph_run_mode")
end

function TestOptionsRules:test_session_device_id_is_checked_against_the_devices()
  local o = core.options_new()
  o:set_int("session_device_id", 7)
  o:check()
  o:set_int("session_device_id", 99)
  local err = fails(o.check, o)
  assert_code(err, "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "session_device_id")
end

-- Environment -------------------------------------------------------------------------------

local ENV_GOOD = {
  ASCEND_DEVICE_ID = "1", PROFILING_MODE = "true", HCCL_EXEC_TIMEOUT = "600", AOE_MODE = "2",
  PROFILING_OPTIONS = '{"output":"/tmp/p","task_trace":"on"}', GE_USE_STATIC_MEMORY = "1",
  ASCEND_WORK_PATH = "/tmp/work", ASCEND_CACHE_PATH = "/tmp/cache", NPU_COLLECT_PATH = "/tmp/c",
  JOB_ID = "job-10087_a", OP_NO_REUSE_MEM = "FusedMulAddN,BatchNorm",
}
local ENV_BAD = {
  ASCEND_DEVICE_ID = "one", PROFILING_MODE = "yes", HCCL_EXEC_TIMEOUT = "-5", AOE_MODE = "3",
  PROFILING_OPTIONS = "{bad", GE_USE_STATIC_MEMORY = "4", ASCEND_WORK_PATH = "a\tb",
  ASCEND_CACHE_PATH = "a\nb", NPU_COLLECT_PATH = "\1", JOB_ID = "job 1", OP_NO_REUSE_MEM = "a,,b",
  DUMP_GRAPH_PATH = "a\tb",
}

local function env_good_value(e)
  if ENV_GOOD[e.variable] then return ENV_GOOD[e.variable] end
  local lo = e.allowed:match("^[%[%(]%s*(%-?%d+)")
  if lo then return lo end
  return split(e.allowed, "|")[1]
end

local function env_bad_value(e)
  if ENV_BAD[e.variable] then return ENV_BAD[e.variable] end
  if e.type == "i" then return "x1" end
  error("no bad value for " .. e.variable)
end

TestOptionsEnv = {}

function TestOptionsEnv:test_every_variable_accepts_a_valid_value()
  for _, e in ipairs(core.option_env_list()) do
    local o = core.options_new()
    o:apply_env({ [e.variable] = env_good_value(e) })
    if e.option then
      lu.assertTrue(o:is_set(e.option), e.variable)
      local v = o:get(e.option)
      lu.assertEquals(tostring(v), env_good_value(e), e.variable)
    end
  end
end

function TestOptionsEnv:test_every_invalid_value_is_an_error_naming_the_variable()
  for _, e in ipairs(core.option_env_list()) do
    local o = core.options_new()
    local err = fails(o.apply_env, o, { [e.variable] = env_bad_value(e) })
    assert_code(err, "NPU_ERR_OPTION")
    lu.assertStrContains(tostring(err), "environment variable " .. e.variable)
  end
end

function TestOptionsEnv:test_explicit_option_wins_over_environment_wins_over_default()
  local o = core.options_new()
  lu.assertEquals({ o:get("session_device_id") }, { 0, false })
  o:apply_env({ ASCEND_DEVICE_ID = "3", HCCL_EXEC_TIMEOUT = "600" })
  lu.assertEquals({ o:get("session_device_id") }, { 3, true })
  o:set_int("session_device_id", 5)
  o:apply_env({ ASCEND_DEVICE_ID = "3", HCCL_EXEC_TIMEOUT = "600" })
  lu.assertEquals((o:get("session_device_id")), 5)
  lu.assertEquals((o:get("hccl_timeout")), 600)
end

function TestOptionsEnv:test_profiling_variables_map_to_the_options()
  local o = core.options_new()
  o:set_bool("profiling_mode", false)
  o:apply_env({ PROFILING_MODE = "true", PROFILING_OPTIONS = '{"output":"/tmp/p"}' })
  lu.assertEquals((o:get("profiling_mode")), false) -- explicit wins
  lu.assertEquals((o:get("profiling_options")), '{"output":"/tmp/p"}')
end

function TestOptionsEnv:test_empty_value_counts_as_unset()
  local o = core.options_new()
  o:apply_env({ ASCEND_DEVICE_ID = "", ASCEND_GLOBAL_LOG_LEVEL = "" })
  lu.assertFalse(o:is_set("session_device_id"))
end

function TestOptionsEnv:test_a_failed_overlay_changes_nothing()
  local o = core.options_new()
  o:apply_env({ ASCEND_DEVICE_ID = "2" })
  fails(o.apply_env, o, { ASCEND_DEVICE_ID = "4", ASCEND_GLOBAL_LOG_LEVEL = "9" })
  lu.assertEquals((o:get("session_device_id")), 2)
end

function TestOptionsEnv:test_a_new_overlay_replaces_the_previous_one()
  local o = core.options_new()
  o:apply_env({ ASCEND_DEVICE_ID = "2" })
  o:apply_env({})
  lu.assertFalse(o:is_set("session_device_id"))
end

function TestOptionsEnv:test_device_id_out_of_range_names_the_variable()
  local o = core.options_new()
  local err = fails(o.apply_env, o, { ASCEND_DEVICE_ID = "64" })
  lu.assertStrContains(tostring(err), "ASCEND_DEVICE_ID")
end

function TestOptionsEnv:test_ge_use_static_memory_conflicts_with_static_memory_policy()
  local o = core.options_new()
  o:apply_env({ GE_USE_STATIC_MEMORY = "2" })
  lu.assertEquals((o:get("static_memory_policy")), 2)
  o:check()
  o:set_int("static_memory_policy", 0)
  local err = fails(o.check, o)
  lu.assertStrContains(tostring(err), "GE_USE_STATIC_MEMORY")
  lu.assertStrContains(tostring(err), "static_memory_policy")
end

function TestOptionsEnv:test_copy_keeps_the_environment()
  local o = core.options_new()
  o:apply_env({ ASCEND_DEVICE_ID = "2", GE_USE_STATIC_MEMORY = "1" })
  local c = o:copy()
  c:set_int("static_memory_policy", 1)
  assert_code(fails(c.check, c), "NPU_ERR_CONFLICT")
  lu.assertEquals((c:get("session_device_id")), 2)
end

function TestOptionsEnv:test_the_process_environment_is_read_by_default()
  local o = core.options_new()
  local ok, err = pcall(o.apply_env, o)
  lu.assertTrue(ok or tostring(err):find("environment variable", 1, true) ~= nil)
end

function TestOptionsEnv:test_environment_table_values_must_be_strings()
  local o = core.options_new()
  o:apply_env({ ASCEND_DEVICE_ID = 3, PROFILING_MODE = true }) -- number read as text, bool ignored
  lu.assertEquals((o:get("session_device_id")), 3)
  lu.assertFalse(o:is_set("profiling_mode"))
end

-- ConfigProto ---------------------------------------------------------------------------------

local function npu_config()
  local c = config.ConfigProto()
  local custom_op = c.graph_options.rewrite_options.custom_optimizers:add()
  custom_op.name = "NpuOptimizer"
  return c, custom_op
end

TestOptionsConfigProto = {}

function TestOptionsConfigProto:test_the_reference_script_ports_line_by_line()
  local c = config.ConfigProto()
  local custom_op = c.graph_options.rewrite_options.custom_optimizers:add()
  custom_op.name = "NpuOptimizer"
  custom_op.parameter_map["use_off_line"].b = true
  custom_op.parameter_map["graph_run_mode"].i = 0
  custom_op.parameter_map["precision_mode"].s = config.compat.as_bytes("force_fp16")
  c.graph_options.rewrite_options.remapping = config.RewriterConfig.OFF
  c.graph_options.rewrite_options.memory_optimization = config.RewriterConfig.OFF
  local o = config.to_options(c)
  lu.assertEquals(o:values(), { use_off_line = true, graph_run_mode = 0,
    precision_mode = "force_fp16" })
end

function TestOptionsConfigProto:test_reads_return_what_was_set()
  local _, op = npu_config()
  op.parameter_map["iterations_per_loop"].i = 10
  op.parameter_map["dump_path"].s = "/tmp/d"
  op.parameter_map["enable_dump"].b = true
  lu.assertEquals(op.parameter_map["iterations_per_loop"].i, 10)
  lu.assertEquals(op.parameter_map["dump_path"].s, "/tmp/d")
  lu.assertEquals(op.parameter_map["enable_dump"].b, true)
  lu.assertNil(op.parameter_map["precision_mode"].s)
  lu.assertStrContains(fails(function() return op.parameter_map["dump_path"].i end), "takes .s")
  lu.assertEquals(op.name, "NpuOptimizer")
end

function TestOptionsConfigProto:test_wrong_setter_is_an_error_at_the_line_that_wrote_it()
  local _, op = npu_config()
  local line = debug.getinfo(1, "l").currentline + 1
  local ok, err = pcall(function() op.parameter_map["precision_mode"].i = 1 end)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "options_spec.lua:" .. line .. ":")
  lu.assertStrContains(tostring(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "option 'precision_mode' takes .s")
end

function TestOptionsConfigProto:test_every_wrong_setter_through_parameter_map()
  local _, op = npu_config()
  for _, info in ipairs(OPTIONS) do
    for t in pairs(setter) do
      if t ~= info.type then
        local err = fails(function() op.parameter_map[info.name][t] = wrong_value[t] end)
        lu.assertStrContains(tostring(err), "option '" .. info.name .. "' takes ." .. info.type)
      end
    end
  end
end

function TestOptionsConfigProto:test_out_of_range_and_unknown_through_parameter_map()
  local _, op = npu_config()
  local err = fails(function() op.parameter_map["graph_run_mode"].i = 2 end)
  lu.assertStrContains(tostring(err), 'parameter_map["graph_run_mode"].i: NPU_ERR_OPTION')
  err = fails(function() op.parameter_map["precison_mode"].s = "force_fp16" end)
  lu.assertStrContains(tostring(err), "did you mean 'precision_mode'?")
  lu.assertStrContains(tostring(err), "options_spec.lua:")
  err = fails(function() op.parameter_map["graph_run_mode"].i = "0" end)
  lu.assertStrContains(tostring(err), "expects an integer, got string")
  err = fails(function() op.parameter_map["graph_run_mode"].x = 1 end)
  lu.assertStrContains(tostring(err), ".i, .s, .b or .f")
end

function TestOptionsConfigProto:test_a_failed_assignment_keeps_the_previous_value()
  local c, op = npu_config()
  op.parameter_map["precision_mode"].s = "force_fp32"
  fails(function() op.parameter_map["precision_mode"].s = "fp17" end)
  lu.assertEquals(op.parameter_map["precision_mode"].s, "force_fp32")
  lu.assertEquals((config.to_options(c):get("precision_mode")), "force_fp32")
end

function TestOptionsConfigProto:test_custom_optimizer_must_be_npu_optimizer()
  local c = config.ConfigProto()
  local op = c.graph_options.rewrite_options.custom_optimizers:add()
  local err = fails(function() op.name = "NpuOptimiser" end)
  lu.assertStrContains(tostring(err), "did you mean 'NpuOptimizer'?")
  lu.assertStrContains(fails(function() op.name = "MyOptimizer" end), "only the 'NpuOptimizer'")
  lu.assertStrContains(fails(config.to_options, c), "has no name")
  op.name = "NpuOptimizer"
  config.to_options(c)
  c.graph_options.rewrite_options.custom_optimizers.add().name = "NpuOptimizer"
  lu.assertStrContains(fails(config.to_options, c), "more than one NpuOptimizer")
end

function TestOptionsConfigProto:test_tensorflow_fields_are_accepted_and_checked()
  local c = config.ConfigProto({ allow_soft_placement = true, log_device_placement = false })
  c.gpu_options.allow_growth = true
  c.intra_op_parallelism_threads = 4
  c.graph_options.optimizer_options.do_constant_folding = true
  c.graph_options.rewrite_options.optimizers:append("constfold")
  c.device_count = { CPU = 1 }
  lu.assertTrue(c.allow_soft_placement)
  lu.assertEquals(c.inter_op_parallelism_threads, 0)
  lu.assertStrContains(fails(function() c.allow_soft_placemnt = true end),
    "ConfigProto has no field 'allow_soft_placemnt'")
  lu.assertStrContains(fails(function() c.allow_soft_placement = 1 end), "expects a bool")
  lu.assertStrContains(fails(function() c.graph_options.rewrite_options.remapping = 7 end), "Toggle")
  lu.assertStrContains(fails(function() c.graph_options = {} end), "assignment not allowed")
  lu.assertEquals(config.to_options(c):values(), {})
end

function TestOptionsConfigProto:test_the_flat_form_converts_by_declared_type()
  local o = config.to_options({ precision_mode = "force_fp16", graph_run_mode = 0,
    use_off_line = false, aoe_mode = 2, quant_dumpable = 1, iterations_per_loop = 10.0 })
  lu.assertEquals(o:values(), { precision_mode = "force_fp16", graph_run_mode = 0,
    use_off_line = false, aoe_mode = "2", quant_dumpable = "1", iterations_per_loop = 10 })
end

function TestOptionsConfigProto:test_the_flat_form_refuses_ambiguous_values()
  lu.assertStrContains(fails(config.to_options, { precision_mode = 1 }),
    "option 'precision_mode' takes a string (.s), got number")
  lu.assertStrContains(fails(config.to_options, { graph_run_mode = "0" }),
    "option 'graph_run_mode' takes an integer (.i), got string")
  lu.assertStrContains(fails(config.to_options, { graph_run_mode = 0.5 }), "takes an integer")
  lu.assertStrContains(fails(config.to_options, { use_off_line = 1 }), "takes a boolean")
  lu.assertStrContains(fails(config.to_options, { aoe_mode = 3 }), "NPU_ERR_OPTION")
  lu.assertStrContains(fails(config.to_options, { graph_run_mod = 0 }),
    "did you mean 'graph_run_mode'?")
  lu.assertStrContains(fails(config.to_options, 42), "expected a ConfigProto")
end

function TestOptionsConfigProto:test_to_options_starts_from_a_copy_of_base()
  local base = config.to_options({ graph_run_mode = 0, dump_path = "/tmp/base" })
  local o = config.to_options({ dump_path = "/tmp/mine" }, base)
  lu.assertEquals(o:values(), { graph_run_mode = 0, dump_path = "/tmp/mine" })
  lu.assertEquals((base:get("dump_path")), "/tmp/base")
  local c = config.to_options(nil, base)
  lu.assertEquals(c:values(), base:values())
  lu.assertEquals(config.to_options(base):values(), base:values())
  lu.assertEquals(config.to_options():values(), {})
end

function TestOptionsConfigProto:test_parameter_map_iterates_the_set_entries()
  local _, op = npu_config()
  op.parameter_map["graph_run_mode"].i = 0
  op.parameter_map["dump_path"].s = "/tmp"
  local names = {}
  for name, attr in pairs(op.parameter_map) do names[#names + 1] = name .. "=" .. tostring(attr) end
  lu.assertEquals(names, { 'dump_path=parameter_map["dump_path"]',
    'graph_run_mode=parameter_map["graph_run_mode"]' })
end

function TestOptionsConfigProto:test_compat_is_the_identity()
  lu.assertEquals(config.compat.as_bytes("abc"), "abc")
  lu.assertEquals(config.compat.as_text("abc"), "abc")
end

-- Documentation ---------------------------------------------------------------------------------

TestOptionsDocs = {}

local read_all = dofile(SPEC_DIR .. "/support.lua").read_all

function TestOptionsDocs:test_docs_options_md_is_generated_from_the_table()
  local gen = os.getenv("NPU_GEN_OPTIONS_DOC") or (ROOT .. "/build/gen_options_doc")
  -- (the rock's suite, spec/run.lua --installed, may run in a source tree nobody built)
  local f = io.open(gen)
  if f then f:close() elseif INSTALLED then lu.skip("no " .. gen .. ": the source tree is not built") end
  local p = io.popen('"' .. gen .. '" 2>/dev/null')
  local out = p:read("a")
  local ok = p:close()
  lu.assertTrue(ok and #out > 0, "cannot run " .. gen .. " (build it: make build/gen_options_doc)")
  local doc = read_all(ROOT .. "/docs/options.md")
  lu.assertNotNil(doc, "docs/options.md is missing: run make docs")
  lu.assertTrue(doc == out, "docs/options.md is stale: run make docs")
end

function TestOptionsDocs:test_docs_list_every_option_variable_and_rule()
  local doc = read_all(ROOT .. "/docs/options.md") or ""
  for _, info in ipairs(OPTIONS) do lu.assertStrContains(doc, "`" .. info.name .. "`") end
  for _, e in ipairs(core.option_env_list()) do lu.assertStrContains(doc, "`" .. e.variable .. "`") end
  lu.assertStrContains(doc, "## Cross-option rules")
end

if SPEC_DIR == nil then os.exit(lu.LuaUnit.run()) end
