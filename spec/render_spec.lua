-- render_spec.lua — pictures of graphs: g:to_dot() (the graph as given), sess:explain_dot and
-- e:to_dot() (the plan, the same drawing DUMP_GE_GRAPH writes for a compilation's last stage),
-- and npu.util.render_graph through Graphviz's `dot` to SVG.  Graphviz (Debian: graphviz) is
-- optional: the specs that need it skip, saying so, when `dot` is not on PATH; the error a
-- script gets without it is checked either way.
local lu = require("luaunit")
local npu = require("npu")

local S = dofile(SPEC_DIR .. "/support.lua")

local function have(cmd) return os.execute("command -v " .. cmd .. " >/dev/null 2>&1") == true end
if not have("dot") then
  io.stderr:write("render_spec: Graphviz's dot is not installed (Debian: graphviz): the SVG specs skip\n")
end
local function need_dot()
  if not have("dot") then lu.skip("Graphviz's dot is not installed (Debian: graphviz): SVG rendering not checked") end
end

-- a while loop and a cond (support.lua's, as spec/graph_dump_spec.lua draws them) and a session
local CONTROL = S.CONTROL_GRAPH .. [==[
local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
]==]

local function control_graph()
  local env = setmetatable({ npu = npu }, { __index = _G })
  local f = assert(load(CONTROL .. "return g, x, y, sess", "control", "t", env))
  return f()
end

local function mlp()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 3 }, "x")
  local w = g:const(npu.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, "float32"), "w")
  local y = npu.nn.relu(npu.add(x:matmul(w), g:const(npu.tensor({ 1, -1 }, "float32"), "b")), { name = "y" })
  return g, x, y
end

TestRender = {}

function TestRender:setUp() self.dir = S.tmpdir() end

-- Under `make sanitize` the ASan runtime is preloaded into this process and would be into dot,
-- whose own allocations then read as leaks: dot runs through a wrapper without the preload.
local function render(what, path)
  local preload = os.getenv("LD_PRELOAD")
  if not (preload and preload:find("asan")) then return npu.util.render_graph(what, path) end
  local wrapper = path:match("^(.*)/") .. "/dot-without-preload"
  local f = assert(io.open(wrapper, "w"))
  f:write('#!/bin/sh\nexec env -u LD_PRELOAD dot "$@"\n')
  f:close()
  os.execute("chmod +x '" .. wrapper .. "'")
  return npu.util.render_graph(what, path, { dot = wrapper })
end
function TestRender:tearDown() S.rm_rf(self.dir) end

function TestRender:test_graph_to_dot_draws_every_node_as_given()
  local g = mlp()
  local dot = g:to_dot()
  lu.assertStrContains(dot, "digraph \"graph\" {")
  lu.assertStrContains(dot, "label=\"graph as given: ")
  lu.assertNotNil(dot:find("n%d+ %[shape=ellipse, label=\"placeholder\\nx"), dot) -- a feed
  lu.assertNotNil(dot:find("n%d+ %[shape=note, label=\"const\\nw"), dot)
  lu.assertStrContains(dot, "matmul\\n")
  lu.assertStrContains(dot, "relu\\ny")
  lu.assertStrContains(dot, "float32 [-1,3]") -- shapes as declared
  lu.assertTrue(dot:sub(-2) == "}\n")
end

function TestRender:test_graph_to_dot_puts_regions_in_clusters()
  local g = control_graph()
  local dot = g:to_dot()
  lu.assertStrContains(dot, "label=\"while 'loop': loop\"")
  lu.assertStrContains(dot, "label=\"cond 'pick': then\"")
  lu.assertStrContains(dot, "label=\"cond 'pick': else\"")
  local cluster = dot:match("subgraph cluster_r%d+ {\n%s*label=\"while 'loop': loop\";(.-)\n%s*}")
  lu.assertNotNil(cluster, dot)
  lu.assertStrContains(cluster, "double")
end

function TestRender:test_explain_to_dot_is_the_plan()
  local g, x, y = mlp()
  local sess <close> = npu.Session { graph = g }
  local feeds = { [x] = npu.tensor({ { 1, 2, 3 } }, "float32") }
  local e = sess:explain(y, feeds)
  local dot = e:to_dot()
  lu.assertEquals(dot, sess:explain_dot(y, feeds))
  lu.assertNotNil(dot:find("^digraph \"plan_%d+\" {\n  label=\"plan %d+: " .. e.n_steps .. " steps\""), dot)
  -- a node per step, named as explain names them
  for _, s in ipairs(e.steps) do lu.assertStrContains(dot, s.op .. "\\n" .. s.node) end
  lu.assertStrContains(dot, "[peripheries=2]") -- the fetch
  lu.assertStrContains(dot, "float32 [1,3]") -- shapes as the feeds made them
  local stranger = setmetatable({}, getmetatable(e))
  lu.assertErrorMsgContains("not a result of sess:explain", function() return stranger:to_dot() end)
end

-- The DOT of e:to_dot() is the one DUMP_GE_GRAPH writes for the final stage, title aside.
function TestRender:test_explain_dot_matches_the_dump()
  local out = self.dir .. "/dump"
  local script = CONTROL .. [==[
local f = assert(io.open(os.getenv("EXPLAIN_OUT"), "w"))
f:write(sess:explain(y, { [x] = npu.tensor({ 1, 2 }) }):to_dot())
f:close()
]==]
  local log = S.run_lua(self.dir, "-u DUMP_GE_GRAPH -u DUMP_GRAPH_LEVEL -u DUMP_GRAPH_PATH DUMP_GE_GRAPH=2 " ..
    "DUMP_GRAPH_LEVEL=3 EXPLAIN_OUT=" .. S.sh_quote(self.dir .. "/explain.dot") ..
    " DUMP_GRAPH_PATH=" .. S.sh_quote(out), script)
  lu.assertTrue(S.exists(self.dir .. "/explain.dot"), log)
  local mine = S.read(self.dir .. "/explain.dot")
  local dumped = S.read(("%s/ge_proto_%08d_05_MemoryPlanning.dot"):format(out, 0))
  local function body(d) return (d:gsub("^[^\n]*\n[^\n]*\n", "")) end
  lu.assertStrContains(mine, "subgraph cluster_r")
  lu.assertEquals(body(mine), body(dumped))
end

function TestRender:test_render_without_dot_is_a_clear_error()
  local g = mlp()
  local ok, err = pcall(npu.util.render_graph, g, self.dir .. "/g.svg", { dot = "no-such-graphviz-dot" })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "NPU_ERR_NOT_FOUND")
  lu.assertStrContains(tostring(err), "Graphviz's 'no-such-graphviz-dot' was not found on PATH")
  lu.assertStrContains(tostring(err), "apt-get install graphviz")
  lu.assertEquals(npu.error_code(err), "NPU_ERR_NOT_FOUND")
  lu.assertFalse(S.exists(self.dir .. "/g.svg"))
  lu.assertErrorMsgContains("argument 1 must be", npu.util.render_graph, 42, "x.svg")
  lu.assertErrorMsgContains("argument 2 must be", npu.util.render_graph, g, nil)
end

-- SVG through dot: nodes and clusters (Graphviz writes a <g class="cluster"> per cluster and a
-- <g class="node"> per node with the node's id as its <title>).
function TestRender:test_render_graph_to_svg()
  need_dot()
  local g, x, y, sess = control_graph()
  local svg_path = render(g, self.dir .. "/graph.svg")
  lu.assertEquals(svg_path, self.dir .. "/graph.svg")
  local svg = S.read(svg_path)
  lu.assertStrContains(svg, "<svg")
  lu.assertTrue(svg:find("</svg>%s*$") ~= nil)
  local _, clusters = svg:gsub("class=\"cluster\"", "")
  -- the loop and the then branch (the else branch returns its input: its cluster is empty in
  -- the DOT, and Graphviz draws no empty cluster)
  lu.assertEquals(clusters, 2)
  lu.assertStrContains(svg, "while &#39;loop&#39;: loop")
  lu.assertStrContains(svg, "double")
  -- the plan, from an explain result, and DOT text as such
  local e = sess:explain(y, { [x] = npu.tensor({ 1, 2 }) })
  local plan_svg = S.read(render(e, self.dir .. "/plan.svg"))
  lu.assertStrContains(plan_svg, "<svg")
  lu.assertStrContains(plan_svg, "negate")
  local text = S.read(render("digraph t { a -> b }", self.dir .. "/t.svg"))
  lu.assertStrContains(text, "<title>a&#45;&gt;b</title>")
  -- another format by extension
  local png = S.read(render(g, self.dir .. "/graph.png"))
  lu.assertEquals(png:sub(1, 8), "\137PNG\r\n\26\n")
  sess:close()
end

function TestRender:test_dot_failure_is_reported()
  need_dot()
  local ok, err = pcall(npu.util.render_graph, "digraph broken { a -> }", self.dir .. "/b.svg")
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), "syntax error")
end
