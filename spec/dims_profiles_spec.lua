-- dims_profiles_spec.lua — dynamic dimension profiles (input_shape, dynamic_dims,
-- dynamic_node_type; compile/dims_profiles.c): each profile runs with the right values, a feed
-- that is no profile is refused naming it and the allowed shapes, input_shape is checked against
-- the graph (names, order, shapes), every profile's plan is compiled at the first run, and the
-- dataset mode (dynamic_node_type 0) runs or is refused clearly.
local lu = require("luaunit")
local npu = require("npu")
local Dataset = npu.data.Dataset

local fails = dofile(SPEC_DIR .. "/support.lua").fails

local function session(g, input_shape, dynamic_dims, node_type)
  return npu.Session { graph = g, options = { input_shape = input_shape, dynamic_dims = dynamic_dims,
    dynamic_node_type = node_type or 1 } }
end

-- y = 2x + 1 over a (1, -1) placeholder
local function line()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, -1 }, "x")
  local y = x * 2 + 1
  return g, x, y
end

local function row(n, first) -- {{first, first+1, ...}} of shape (1, n)
  local t = {}
  for i = 1, n do t[i] = first + i - 1 end
  return npu.tensor({ t })
end

-- 000's example: data(1,1,40,-1), label(1,-1), mask(-1,-1); y = sum(data) + 10 sum(label) + 100 sum(mask)
local function three_inputs()
  local g = npu.Graph()
  local mask = g:placeholder("float32", { -1, -1 }, "mask") -- created out of order on purpose
  local data = g:placeholder("float32", { 1, 1, 40, -1 }, "data")
  local label = g:placeholder("float32", { 1, -1 }, "label")
  local y = npu.reduce_sum(data) + npu.reduce_sum(label) * 10 + npu.reduce_sum(mask) * 100
  return g, data, label, mask, y
end
local SHAPE3 = "data:1,1,40,-1;label:1,-1;mask:-1,-1"
local DIMS3 = "20,20,1,1;40,40,2,2;80,60,4,4"

TestDimsProfiles = {}

function TestDimsProfiles:test_each_profile_runs_with_the_right_values()
  local g, x, y = line()
  local sess <close> = session(g, "x:1,-1", "2;4;6")
  for _, n in ipairs({ 4, 2, 6, 4 }) do
    local out = sess:run(y, { [x] = row(n, 1) })
    lu.assertEquals(out:shape(), { 1, n })
    local want = {}
    for i = 1, n do want[i] = 2 * i + 1 end
    lu.assertEquals(out:totable(), { want })
  end
end

function TestDimsProfiles:test_the_plans_of_every_profile_are_compiled_at_the_first_run()
  local g, x, y = line()
  local sess <close> = session(g, "x:1,-1", "2;4;6")
  lu.assertEquals(sess:n_plans(), 0)
  sess:run(y, { [x] = row(4, 0) })
  lu.assertEquals(sess:n_plans(), 3) -- profiles 0, 1 and 2
  sess:run(y, { [x] = row(2, 0) })
  sess:run(y, { [x] = row(6, 0) })
  lu.assertEquals(sess:n_plans(), 3) -- no compile for the other profiles' first runs
  -- another fetch signature: its own set of profile plans
  sess:run({ y, x }, { [x] = row(2, 0) })
  lu.assertEquals(sess:n_plans(), 6)
  -- the results of the up-front plans are right (they were compiled from stand-in feeds)
  lu.assertEquals(sess:run(y, { [x] = row(6, 0) }):totable(), { { 1, 3, 5, 7, 9, 11 } })
end

function TestDimsProfiles:test_a_feed_that_is_no_profile_is_refused()
  local g, x, y = line()
  local sess <close> = session(g, "x:1,-1", "2;4;6")
  local _, err = fails(sess.run, sess, y, { [x] = row(3, 0) })
  lu.assertEquals(npu.error_code(err), "NPU_ERR_ARG")
  lu.assertStrContains(tostring(err),
    "feed 'x' has shape [1,3]: not one of the dynamic_dims profiles: [1,2] [1,4] [1,6]")
  lu.assertEquals(sess:n_plans(), 0) -- refused before anything compiled
  _, err = fails(sess.run, sess, y, { [x] = npu.ones({ 2, 2 }) }) -- a fixed dim differs
  lu.assertStrContains(tostring(err), "feed 'x' has shape [2,2]")
  lu.assertStrContains(fails(sess.explain, sess, y, { [x] = row(5, 0) }), "feed 'x' has shape [1,5]")
end

function TestDimsProfiles:test_several_inputs_take_one_profile_together()
  local g, data, label, mask, y = three_inputs()
  local sess <close> = session(g, SHAPE3, DIMS3)
  -- profile 1: data(1,1,40,40), label(1,40), mask(2,2)
  local feeds = { [data] = npu.ones({ 1, 1, 40, 40 }), [label] = npu.ones({ 1, 40 }),
    [mask] = npu.ones({ 2, 2 }) }
  lu.assertEquals(sess:run(y, feeds):item(), 1600 + 400 + 400)
  lu.assertEquals(sess:n_plans(), 3)
  -- profile 2: data(1,1,40,80), label(1,60), mask(4,4)
  feeds = { [data] = npu.ones({ 1, 1, 40, 80 }), [label] = npu.ones({ 1, 60 }), [mask] = npu.ones({ 4, 4 }) }
  lu.assertEquals(sess:run(y, feeds):item(), 3200 + 600 + 1600)
  lu.assertEquals(sess:n_plans(), 3)
  -- each feed is some profile's, but data is profile 0's and label profile 1's
  feeds = { [data] = npu.ones({ 1, 1, 40, 20 }), [label] = npu.ones({ 1, 40 }), [mask] = npu.ones({ 1, 1 }) }
  local _, err = fails(sess.run, sess, y, feeds)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_ARG")
  lu.assertStrContains(tostring(err), "feeds 'data' [1,1,40,20], 'label' [1,40], 'mask' [1,1] are not one "
    .. "dynamic_dims profile")
  lu.assertStrContains(tostring(err), "0: data[1,1,40,20] label[1,20] mask[1,1] 1: data[1,1,40,40]")
  -- mask alone: its allowed shapes
  feeds = { [data] = npu.ones({ 1, 1, 40, 20 }), [label] = npu.ones({ 1, 20 }), [mask] = npu.ones({ 3, 3 }) }
  lu.assertStrContains(fails(sess.run, sess, y, feeds),
    "feed 'mask' has shape [3,3]: not one of the dynamic_dims profiles: [1,1] [2,2] [4,4]")
end

function TestDimsProfiles:test_inputs_not_in_input_shape_are_not_constrained()
  local g, x, y = line()
  local z = g:placeholder("float32", { -1 }, "z")
  local w = npu.reduce_sum(z) + npu.reduce_sum(y)
  local sess <close> = session(g, "x:1,-1", "2;4")
  for _, n in ipairs({ 1, 3, 7 }) do
    lu.assertEquals(sess:run(w, { [x] = row(2, 0), [z] = npu.ones({ n }) }):item(), n + 1 + 3)
  end
  lu.assertEquals(sess:run(npu.reduce_sum(z), { [z] = npu.ones({ 5 }) }):item(), 5) -- x not fed
end

function TestDimsProfiles:test_a_scalar_input_is_shape_0()
  local g, x, y = line()
  local s = g:placeholder("float32", {}, "s")
  local sess <close> = session(g, "s:0;x:1,-1", "2;4")
  lu.assertEquals(sess:run(y * s, { [x] = row(2, 0), [s] = npu.tensor(3) }):totable(), { { 3, 9 } })
  lu.assertStrContains(fails(sess.run, sess, y * s, { [x] = row(2, 0), [s] = npu.ones({ 1 }) }),
    "feed 's' has shape [1]: not one of the dynamic_dims profiles: []")
end

function TestDimsProfiles:test_input_shape_must_name_the_placeholders()
  local g, data, label, mask, y = three_inputs()
  local feeds = { [data] = npu.ones({ 1, 1, 40, 20 }), [label] = npu.ones({ 1, 20 }), [mask] = npu.ones({ 1, 1 }) }
  local sess = session(g, "data:1,1,40,-1;labels:1,-1;mask:-1,-1", DIMS3)
  local _, err = fails(sess.run, sess, y, feeds)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "input_shape names 'labels', which is not a node of the graph "
    .. "(dynamic_node_type 1: the dynamic inputs are placeholders); its placeholders: 'data', 'label', 'mask'")
  -- the error stays until the graph has the placeholder
  lu.assertStrContains(fails(sess.run, sess, y, feeds), "'labels'")
  sess:close()
  g:variable(npu.ones({ 2 }), "v")
  sess = session(g, "data:1,1,40,-1;v:-1", "20,1;40,2")
  lu.assertStrContains(fails(sess.run, sess, y, feeds), "input_shape names 'v', which is not a placeholder")
  sess:close()
end

function TestDimsProfiles:test_names_must_be_in_alphabetical_order()
  local g, data, label, mask, y = three_inputs()
  local feeds = { [data] = npu.ones({ 1, 1, 40, 20 }), [label] = npu.ones({ 1, 20 }), [mask] = npu.ones({ 1, 1 }) }
  local sess <close> = session(g, "label:1,-1;data:1,1,40,-1;mask:-1,-1", "20,20,1,1;40,40,2,2")
  local _, err = fails(sess.run, sess, y, feeds)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "input_shape lists 'label' before 'data': the names must follow the "
    .. "alphabetical order of the data nodes' names (000): data, label, mask")
  local twice <close> = session(g, "data:1,1,40,-1;data:1,1,40,-1", "1,2;3,4")
  lu.assertStrContains(fails(twice.run, twice, y, feeds), "input_shape names 'data' twice")
end

function TestDimsProfiles:test_shapes_must_agree_with_the_placeholders()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, 5 }, "x")
  local y = x * 2
  local sess <close> = session(g, "x:1,-1", "5;6")
  local _, err = fails(sess.run, sess, y, { [x] = npu.ones({ 1, 5 }) })
  lu.assertEquals(npu.error_code(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "input_shape makes dim 1 of 'x' a profile dim (-1 in [1,-1]) but "
    .. "placeholder 'x' fixes it: [1,5]")
  local g2, x2, y2 = line()
  local fixed <close> = session(g2, "x:2,-1", "5;6")
  lu.assertStrContains(fails(fixed.run, fixed, y2, { [x2] = npu.ones({ 2, 5 }) }),
    "input_shape gives 'x' the shape [2,-1] but placeholder 'x' is [1,-1] (dim 0 differs)")
  local rank <close> = session(g2, "x:1,1,-1", "5;6")
  lu.assertStrContains(fails(rank.run, rank, y2, { [x2] = npu.ones({ 1, 5 }) }),
    "input_shape gives 'x' 3 dim(s) [1,1,-1] but placeholder 'x' is [1,-1]")
  -- a fixed dim of input_shape over an unknown dim of the placeholder narrows it
  local g3 = npu.Graph()
  local x3 = g3:placeholder("float32", { -1, -1 }, "x")
  local narrow <close> = session(g3, "x:3,-1", "1;2")
  lu.assertEquals(narrow:run(npu.reduce_sum(x3), { [x3] = npu.ones({ 3, 2 }) }):item(), 6)
  lu.assertStrContains(fails(narrow.run, narrow, npu.reduce_sum(x3), { [x3] = npu.ones({ 2, 2 }) }),
    "feed 'x' has shape [2,2]: not one of the dynamic_dims profiles: [3,1] [3,2]")
end

function TestDimsProfiles:test_options_are_checked_together_at_creation()
  local g = line()
  local ok, err = pcall(session, g, "x:1,-1", "2,3;4,5")
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_CONFLICT")
  lu.assertStrContains(tostring(err), "input_shape has 1 dynamic (-1) dimension(s)")
  ok, err = pcall(function() return npu.Session { graph = g, options = { input_shape = "x:1,-1", dynamic_dims = "2;4" } } end)
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "must be used together")
end

function TestDimsProfiles:test_a_profile_that_does_not_compile_fails_the_first_run()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, -1 }, "x")
  local y = npu.reshape(x, { 2, 2 }) -- only (1,4) reshapes to (2,2)
  local sess <close> = session(g, "x:1,-1", "4;6")
  local _, err = fails(sess.run, sess, y, { [x] = npu.ones({ 1, 4 }) })
  lu.assertStrContains(tostring(err), "dynamic_dims profile 1: ")
  lu.assertEquals(sess:n_plans(), 0) -- the run's own plan went too: the next run fails the same way
  lu.assertStrContains(fails(sess.run, sess, y, { [x] = npu.ones({ 1, 4 }) }), "dynamic_dims profile 1: ")
end

function TestDimsProfiles:test_many_profiles_compile_at_most_32_up_front()
  local g, x, y = line()
  local dims = {}
  for i = 1, 40 do dims[i] = tostring(i) end
  local sess <close> = session(g, "x:1,-1", table.concat(dims, ";"))
  sess:run(y, { [x] = row(3, 0) })
  lu.assertEquals(sess:n_plans(), 32) -- profiles 0 .. 31 (the run's among them)
  sess:run(y, { [x] = row(20, 0) })
  lu.assertEquals(sess:n_plans(), 32)
  lu.assertEquals(sess:run(y, { [x] = row(35, 0) }):shape(), { 1, 35 }) -- compiled at its first run
  lu.assertEquals(sess:n_plans(), 33)
  sess:run(y, { [x] = row(36, 0) })
  lu.assertEquals(sess:n_plans(), 34)
end

-- dynamic_node_type 0: the dataset's outputs are the dynamic inputs
function TestDimsProfiles:test_dataset_elements_of_one_profile_run()
  local g = npu.Graph()
  local ds = Dataset.from_tensor_slices(npu.ones({ 8, 3 })):batch(2, { drop_remainder = true }):repeat_()
  local e = ds:make_one_shot_iterator(g):get_next()
  local y = npu.reduce_sum(e)
  local sess <close> = session(g, "batch:-1,3", "2;4", 0)
  lu.assertEquals(sess:run(y):item(), 6)
  lu.assertEquals(sess:run(y):item(), 6)
  local other <close> = session(g, "batch:-1,3", "4;8", 0)
  local _, err = fails(other.run, other, y)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_SHAPE")
  lu.assertStrContains(tostring(err), "gives elements [2,3]: not one of the dynamic_dims profiles: 0: [4,3] 1: [8,3]")
  local two <close> = session(g, "a:-1;b:-1,3", "2,2;4,4", 0)
  lu.assertStrContains(fails(two.run, two, y), "input_shape has 2 input(s) but iterator_get_next")
end

function TestDimsProfiles:test_dataset_elements_that_vary_are_refused()
  local g = npu.Graph()
  local e = Dataset.from_tensor_slices(npu.ones({ 7, 3 })):batch(2):make_one_shot_iterator(g):get_next()
  local sess <close> = session(g, "batch:-1,3", "2;1", 0)
  local _, err = fails(sess.run, sess, npu.reduce_sum(e))
  lu.assertEquals(npu.error_code(err), "NPU_ERR_UNSUPPORTED")
  lu.assertStrContains(tostring(err), "output 0 is [-1,3], an element shape that varies")
  local g2, x, y = line()
  local none <close> = session(g2, "x:1,-1", "2;4", 0)
  _, err = fails(none.run, none, y, { [x] = row(2, 0) })
  lu.assertEquals(npu.error_code(err), "NPU_ERR_OPTION")
  lu.assertStrContains(tostring(err), "the graph has no iterator_get_next; for placeholders use dynamic_node_type 1")
end
