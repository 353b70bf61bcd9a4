-- graph_dump_spec.lua — DUMP_GE_GRAPH / DUMP_GRAPH_LEVEL / DUMP_GRAPH_PATH (compile/graph_dump.c):
-- the files per stage of a compilation, the JSON read back (the graph as given, a constant gone
-- after folding, a fused step absorbing bias_add, constant data at level 1 only, exact for
-- int64 and float64, nodes and edges only at level 3, a shape of unknown rank), the DOT's
-- edges, the stages each DUMP_GRAPH_LEVEL selects, the working directory as the default place,
-- and a directory that cannot be made.
--
-- The environment is read when a session is created, from the process's own environment, so
-- each case runs a small script in a subprocess with the variables set (in a fresh temporary
-- directory, which is also its working directory).
local lu = require("luaunit")
local S = dofile(SPEC_DIR .. "/support.lua")

local sh_quote, ls, exists = S.sh_quote, S.ls, S.exists

-- x (-1, 6) -> matmul w -> bias_add b -> relu -> mul k, k = two * three (folded when compiled);
-- a second fetch (mm alone) makes a second compilation.
local SCRIPT = [[
local npu = require("npu")
local g = npu.Graph()
local x = g:placeholder("float32", { -1, 6 }, "x")
local w = g:const(npu.tensor({ { 1, 2, 3, 4, 5 }, { 6, 7, 8, 9, 10 }, { 11, 12, 13, 14, 15 },
  { 16, 17, 18, 19, 20 }, { 21, 22, 23, 24, 25 }, { 26, 27, 28, 29, 30 } }), "w")
local b = g:const(npu.tensor({ 0.5, -0.5, 0.25, -0.25, 0 }), "b")
local k = npu.mul(g:const(npu.tensor({ 2 }), "two"), g:const(npu.tensor({ 3 }), "three"), { name = "k" })
local mm = npu.matmul(x, w, { name = "mm" })
local z = npu.bias_add(mm, b, { name = "z" })
local r = npu.relu(z, { name = "r" })
local y = npu.mul(r, k, { name = "y" })
local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype",
  export_compile_stat = 0 } }
local ok, err = pcall(sess.run, sess, y, { [x] = npu.ones({ 2, 6 }) })
if not ok then print("error: " .. tostring(err)) os.exit(0) end
if TWICE then sess:run(mm, { [x] = npu.ones({ 2, 6 }) }) end
print("done")
]]

-- Runs the script in dir with env ("VAR=value ..."; the dump variables are cleared first).
local function run(dir, env, twice)
  return S.run_lua(dir, "-u DUMP_GE_GRAPH -u DUMP_GRAPH_LEVEL -u DUMP_GRAPH_PATH " .. env,
    ("TWICE = %s; "):format(tostring(twice or false)) .. SCRIPT)
end

local STAGES = { "00_PreRunBegin", "01_ConstantFolding", "02_Fusion", "03_PrecisionAssignment",
  "04_ImplementationSelection", "05_MemoryPlanning" }

local function files(graph, stages)
  local out = {}
  for _, st in ipairs(stages) do
    for _, ext in ipairs({ "dot", "json" }) do
      out[#out + 1] = ("ge_proto_%08d_%s.%s"):format(graph, st, ext)
    end
  end
  table.sort(out)
  return out
end

local function json(dir, graph, stage)
  return S.json_decode(S.read(("%s/ge_proto_%08d_%s.json"):format(dir, graph, stage)))
end

local function by_node(steps, name)
  for _, s in ipairs(steps) do
    if s.node == name then return s end
  end
end

local function has_step(steps, name) return by_node(steps, name) ~= nil end

TestGraphDump = {}

function TestGraphDump:setUp()
  self.dir = S.tmpdir()
  self.out = self.dir .. "/graphs/deeper" -- made by the dump
end

function TestGraphDump:tearDown() S.rm_rf(self.dir) end

function TestGraphDump:test_level_2_by_default_every_stage_without_constant_data()
  local out = run(self.dir, "DUMP_GE_GRAPH=2 DUMP_GRAPH_PATH=" .. sh_quote(self.out))
  lu.assertStrContains(tostring(out), "done")
  lu.assertEquals(ls(self.out), files(0, STAGES))
  lu.assertEquals(ls(self.dir), { "graphs" }) -- nothing in the working directory

  local given = json(self.out, 0, "00_PreRunBegin")
  lu.assertEquals({ given.graph, given.stage, given.stage_name, given.dump_ge_graph, given.dump_graph_level },
    { 0, 0, "PreRunBegin", 2, 2 })
  lu.assertNil(given.constants)
  local steps = given.plan.steps
  -- the graph as given: every needed node but constants and placeholders, declared shapes
  lu.assertEquals(#steps, 5)
  for i, want in ipairs({ { "mul", "k" }, { "matmul", "mm" }, { "bias_add", "z" }, { "relu", "r" }, { "mul", "y" } }) do
    lu.assertEquals({ steps[i].op, steps[i].node }, want)
  end
  lu.assertEquals(by_node(steps, "mm").inputs[1].shape, { -1, 6 })
  lu.assertEquals(by_node(steps, "mm").inputs[2].memory, "constant")
  lu.assertEquals(by_node(steps, "mm").inputs[2].dtype, "float32")

  -- folding: k is evaluated, no longer a step
  local folded = json(self.out, 0, "01_ConstantFolding")
  lu.assertEquals(folded.plan.folded_nodes, { "k" })
  lu.assertFalse(has_step(folded.plan.steps, "k"))
  lu.assertTrue(has_step(folded.plan.steps, "z"))
  lu.assertEquals(by_node(folded.plan.steps, "mm").outputs[1].shape, { 2, 5 }) -- from the feed

  -- fusion: matmul absorbs bias_add and relu
  local fused = json(self.out, 0, "02_Fusion")
  local mm = by_node(fused.plan.steps, "mm")
  lu.assertEquals(mm.op, "fused_matmul")
  lu.assertEquals(mm.pass, "MatMulBiasAddFusionPass")
  lu.assertEquals(mm.absorbed, { "z", "r" })
  lu.assertFalse(has_step(fused.plan.steps, "z"))
  lu.assertEquals(#fused.plan.steps, 2)

  -- the final plan has its memory laid out
  local final = json(self.out, 0, "05_MemoryPlanning")
  lu.assertEquals(final.stage, 5)
  lu.assertTrue(final.plan.memory.planning)
  lu.assertTrue(final.plan.memory.arena_bytes > 0)
  lu.assertFalse(json(self.out, 0, "04_ImplementationSelection").plan.memory.planning)

  -- DOT: nodes labelled with op and name, dtypes and shapes, one edge per input
  local dot = S.read(self.out .. "/ge_proto_00000000_02_Fusion.dot")
  lu.assertStrContains(dot, 'digraph "ge_proto_00000000_02_Fusion" {')
  lu.assertStrContains(dot, 's0 [label="fused_matmul\\nmm\\nabsorbed: z, r\\n(MatMulBiasAddFusionPass)\\nfloat32 [2,5]"')
  lu.assertStrContains(dot, 'n0 [shape=ellipse, label="placeholder\\nx\\n:0 float32 [2,6]"];')
  lu.assertStrContains(dot, 'n5 [shape=note, label="mul\\nk\\n:0 float32 [1]"];')
  for _, edge in ipairs({ 'n0 -> s0 [label="float32 [2,6]"];', 'n1 -> s0 [label="float32 [6,5]"];',
    'n2 -> s0 [label="float32 [5]"];', 's0 -> s1 [label="float32 [2,5]"];', 'n5 -> s1 [label="float32 [1]"];' }) do
    lu.assertStrContains(dot, edge)
  end
  lu.assertStrContains(dot, "s1 [peripheries=2];") -- the fetch
  lu.assertEquals(select(2, dot:gsub(" %-> ", "")), 5)
  -- Graphviz reads every file, where it is installed (not under make sanitize's preloads)
  if os.execute("command -v dot >/dev/null 2>&1") then
    for _, f in ipairs(ls(self.out)) do
      if f:match("%.dot$") then
        lu.assertTrue(os.execute("env -u LD_PRELOAD dot -Tsvg " .. sh_quote(self.out .. "/" .. f) ..
          " -o /dev/null"), f)
      end
    end
  end
end

function TestGraphDump:test_level_1_adds_the_constants_values()
  local out = run(self.dir, "DUMP_GE_GRAPH=1 DUMP_GRAPH_LEVEL=1 DUMP_GRAPH_PATH=" .. sh_quote(self.out))
  lu.assertStrContains(tostring(out), "done")
  lu.assertEquals(ls(self.out), files(0, STAGES)) -- no subgraphs: 1 is 2

  local function constants(stage)
    local c = {}
    for _, e in ipairs(json(self.out, 0, stage).constants) do c[e.name] = e end
    return c
  end
  local given = constants("00_PreRunBegin")
  lu.assertEquals(given["w:0"].shape, { 6, 5 })
  lu.assertEquals(given["w:0"].numel, 30)
  lu.assertFalse(given["w:0"].truncated)
  local want = {}
  for i = 1, 30 do want[i] = i end
  lu.assertEquals(given["w:0"].values, want)
  lu.assertEquals(given["b:0"].values, { 0.5, -0.5, 0.25, -0.25, 0 })
  lu.assertEquals(given["two:0"].values, { 2 })
  lu.assertNil(given["k:0"]) -- a step, not yet a constant

  local final = constants("05_MemoryPlanning")
  lu.assertEquals(final["k:0"].values, { 6 }) -- folded
  lu.assertNil(final["two:0"]) -- read by nothing once k is folded
  lu.assertEquals(final["w:0"].dtype, "float32")
end

function TestGraphDump:test_level_3_nodes_and_edges_only()
  local out = run(self.dir, "DUMP_GE_GRAPH=3 DUMP_GRAPH_PATH=" .. sh_quote(self.out))
  lu.assertStrContains(tostring(out), "done")
  lu.assertEquals(#ls(self.out), 12)
  local text = S.read(self.out .. "/ge_proto_00000000_02_Fusion.json")
  lu.assertNotStrContains(text, "dtype")
  lu.assertNotStrContains(text, "float32")
  local j = S.json_decode(text)
  lu.assertNil(j.plan)
  lu.assertNil(j.constants)
  local nodes, by_name = {}, {}
  for _, n in ipairs(j.nodes) do
    nodes[n.id] = n
    by_name[n.name] = n
  end
  lu.assertEquals(by_name.x.kind, "feed")
  lu.assertEquals(by_name.w.kind, "constant")
  lu.assertEquals(by_name.k.kind, "folded")
  lu.assertEquals(by_name.mm.op, "fused_matmul")
  lu.assertEquals(by_name.mm.absorbed, { "z", "r" })
  lu.assertNil(by_name.z)
  local edges = {}
  for _, e in ipairs(j.edges) do edges[#edges + 1] = nodes[e.from].name .. "->" .. nodes[e.to].name end
  table.sort(edges)
  lu.assertEquals(edges, { "b->mm", "k->y", "mm->y", "w->mm", "x->mm" })
  lu.assertEquals(j.fetches, { by_name.y.id })

  local dot = S.read(self.out .. "/ge_proto_00000000_02_Fusion.dot")
  lu.assertNotStrContains(dot, "float32")
  lu.assertStrContains(dot, "n0 -> s0;")
  lu.assertStrContains(dot, "s0 -> s1;")
end

function TestGraphDump:test_level_3_of_dump_graph_level_the_final_plan_only()
  run(self.dir, "DUMP_GE_GRAPH=2 DUMP_GRAPH_LEVEL=3 DUMP_GRAPH_PATH=" .. sh_quote(self.out))
  lu.assertEquals(ls(self.out), files(0, { "05_MemoryPlanning" }))
end

function TestGraphDump:test_level_4_the_first_stage_only()
  run(self.dir, "DUMP_GE_GRAPH=2 DUMP_GRAPH_LEVEL=4 DUMP_GRAPH_PATH=" .. sh_quote(self.out))
  lu.assertEquals(ls(self.out), files(0, { "00_PreRunBegin" }))
  lu.assertEquals(#json(self.out, 0, "00_PreRunBegin").plan.steps, 5)
end

function TestGraphDump:test_each_compilation_numbered_in_the_output_directory_by_default()
  local out = run(self.dir, "-u ASCEND_WORK_PATH DUMP_GE_GRAPH=3 DUMP_GRAPH_LEVEL=3", true)
  lu.assertStrContains(tostring(out), "done")
  local want = files(0, { "05_MemoryPlanning" })
  for _, f in ipairs(files(1, { "05_MemoryPlanning" })) do want[#want + 1] = f end
  table.sort(want)
  local out_dir = self.dir .. "/npu_out" -- not the working directory itself
  lu.assertEquals(ls(self.dir), { "npu_out" })
  lu.assertEquals(ls(out_dir), want)
  local second = json(out_dir, 1, "05_MemoryPlanning")
  lu.assertEquals(second.graph, 1)
  lu.assertEquals(#second.nodes, 3) -- x, w, mm
end

-- A placeholder of unknown rank (no shape given) at stage 0, and constants whose values a
-- float32-width number would round: an int64 above 2^53 and a float64 needing 17 digits.
local EXACT_SCRIPT = [[
local npu = require("npu")
local g = npu.Graph()
local x = g:placeholder("float32", nil, "x")
local y = npu.relu(x, { name = "y" })
local big = g:const(npu.tensor({ 9007199254740993, -3 }, "int64"), "big")
local small = g:const(npu.tensor({ 7, 1 }, "int32"), "small")
local tenth = g:const(npu.tensor({ 0.1, 1e300 }, "float64"), "tenth")
local nb = npu.add(big, big, { name = "nb" })
local ns = npu.add(small, small, { name = "ns" })
local nt = npu.add(tenth, tenth, { name = "nt" })
local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype",
  export_compile_stat = 0 } }
local ok, err = pcall(sess.run, sess, { y, nb, ns, nt }, { [x] = npu.ones({ 2, 3 }) })
if not ok then print("error: " .. tostring(err)) os.exit(0) end
print("done")
]]

function TestGraphDump:test_stage_0_unknown_rank_and_exact_constants()
  local out = S.run_lua(self.dir, "-u DUMP_GE_GRAPH -u DUMP_GRAPH_LEVEL -u DUMP_GRAPH_PATH " ..
    "DUMP_GE_GRAPH=1 DUMP_GRAPH_LEVEL=4 DUMP_GRAPH_PATH=" .. sh_quote(self.out), EXACT_SCRIPT)
  lu.assertStrContains(tostring(out), "done")
  lu.assertEquals(ls(self.out), files(0, { "00_PreRunBegin" }))
  local text = S.read(self.out .. "/ge_proto_00000000_00_PreRunBegin.json")
  -- unknown rank: "shape": null, not [] (a scalar's), and no bytes claimed
  local j = S.json_decode(text)
  local relu = by_node(j.plan.steps, "y")
  lu.assertEquals(relu.inputs[1].name, "x:0")
  lu.assertNil(relu.inputs[1].shape)
  lu.assertEquals(relu.inputs[1].bytes, 0)
  lu.assertStrContains(text, '"name":"x:0","dtype":"float32","shape":null')
  local dot = S.read(self.out .. "/ge_proto_00000000_00_PreRunBegin.dot")
  lu.assertStrContains(dot,
    'n0 [shape=ellipse, label="placeholder\\nx\\n:0 float32 <unknown rank>"];')
  lu.assertStrContains(dot, '-> s0 [label="float32 <unknown rank>"];')
  lu.assertNotStrContains(dot, "float32 []")
  -- constants: integers as integers, float64 with 17 digits (read back exactly)
  lu.assertStrContains(text, '"name":"big:0","dtype":"int64","shape":[2],"numel":2,' ..
    '"truncated":false,"values":[9007199254740993,-3]}')
  lu.assertStrContains(text, '"name":"small:0","dtype":"int32","shape":[2],"numel":2,' ..
    '"truncated":false,"values":[7,1]}')
  lu.assertStrContains(text, '"values":[0.10000000000000001,1.0000000000000001e+300]}')
  local c = {}
  for _, e in ipairs(j.constants) do c[e.name] = e end
  lu.assertEquals(c["tenth:0"].values, { 0.1, 1e300 })
end

function TestGraphDump:test_unset_writes_nothing()
  local out = run(self.dir, "DUMP_GRAPH_LEVEL=1 DUMP_GRAPH_PATH=" .. sh_quote(self.out))
  lu.assertStrContains(tostring(out), "done")
  lu.assertFalse(exists(self.out))
  lu.assertEquals(ls(self.dir), {})
end

function TestGraphDump:test_a_directory_that_cannot_be_made_fails_the_run()
  S.write(self.dir .. "/file", "")
  local bad = self.dir .. "/file/sub"
  local out = run(self.dir, "DUMP_GE_GRAPH=1 DUMP_GRAPH_PATH=" .. sh_quote(bad))
  lu.assertStrContains(tostring(out), "error: ")
  lu.assertStrContains(tostring(out), "NPU_ERR_IO")
  lu.assertStrContains(tostring(out), "DUMP_GRAPH_PATH: cannot create directory '" .. bad .. "'")
end

function TestGraphDump:test_a_file_that_cannot_be_written_fails_the_run()
  local taken = self.out .. "/ge_proto_00000000_00_PreRunBegin.json"
  assert(os.execute("mkdir -p " .. sh_quote(taken))) -- a directory where the file goes
  local out = run(self.dir, "DUMP_GE_GRAPH=2 DUMP_GRAPH_PATH=" .. sh_quote(self.out))
  lu.assertStrContains(tostring(out), "NPU_ERR_IO")
  lu.assertStrContains(tostring(out), "DUMP_GE_GRAPH: cannot write '" .. taken .. "'")
end

function TestGraphDump:test_a_bad_value_fails_the_session()
  local out = run(self.dir, "DUMP_GE_GRAPH=4")
  lu.assertStrContains(tostring(out), "environment variable DUMP_GE_GRAPH='4'")
end

-- A cond and a while loop: their regions are clusters of the DOT, labelled with the node
-- running them, the nested steps inside; the JSON's steps hold their blocks.
local CONTROL_SCRIPT = S.CONTROL_GRAPH .. [==[
local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
print(sess:run(y, { [x] = npu.tensor({ 1, 2 }) }):totable()[1])
]==]

function TestGraphDump:test_regions_are_clusters_labelled_with_their_cond_or_while()
  local out = S.run_lua(self.dir, "-u DUMP_GE_GRAPH -u DUMP_GRAPH_LEVEL -u DUMP_GRAPH_PATH " ..
    "DUMP_GE_GRAPH=2 DUMP_GRAPH_PATH=" .. sh_quote(self.out), CONTROL_SCRIPT)
  lu.assertStrContains(tostring(out), "-8")
  for _, stage in ipairs({ "00_PreRunBegin", "05_MemoryPlanning" }) do
    local dot = S.read(("%s/ge_proto_%08d_%s.dot"):format(self.out, 0, stage))
    lu.assertStrContains(dot, "subgraph cluster_r")
    lu.assertStrContains(dot, "label=\"while 'loop': loop\"")
    lu.assertStrContains(dot, "label=\"cond 'pick': then\"")
    lu.assertStrContains(dot, "label=\"cond 'pick': else\"")
    -- the loop body's step sits in the loop's cluster
    local cluster = dot:match("subgraph cluster_r%d+ {\n%s*label=\"while 'loop': loop\";(.-)\n%s*}")
    lu.assertNotNil(cluster, dot)
    lu.assertStrContains(cluster, "double")
    lu.assertNotNil(dot:find("-> s%d+ %[label"), dot)
  end
  local j = json(self.out, 0, "05_MemoryPlanning")
  local loop = by_node(j.plan and j.plan.steps or j.steps, "loop")
  lu.assertNotNil(loop, S.read(("%s/ge_proto_%08d_05_MemoryPlanning.json"):format(self.out, 0)))
  lu.assertNotNil(by_node(loop.blocks[2].steps, "double"))
end
