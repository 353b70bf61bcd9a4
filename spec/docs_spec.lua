-- docs_spec.lua — the generated op reference (docs/ops.md, tools/gen_ops_doc.c) is current and
-- agrees with what the library does; docs/compiler.md names every pass and precision mode and
-- is linked from the README.  (docs/options.md has its own check in options_spec.lua.)
local lu = require("luaunit")
local npu = require("npu")
local core = npu.core

local ROOT = ROOT_DIR or "."
local GEN = os.getenv("NPU_GEN_OPS_DOC") or (ROOT .. "/build/gen_ops_doc")

local read_all = dofile(SPEC_DIR .. "/support.lua").read_all

-- stdout, stderr and exit status of the generator run on ops.def file def
local function generate(def)
  -- (the rock's suite, spec/run.lua --installed, may run in a source tree nobody built)
  local f = io.open(GEN)
  if f then f:close() elseif INSTALLED then lu.skip("no " .. GEN .. ": the source tree is not built") end
  local err = os.tmpname()
  local p = io.popen('"' .. GEN .. '" "' .. def .. '" 2>"' .. err .. '"')
  local out = p:read("a")
  local ok = p:close()
  local msg = read_all(err) or ""
  os.remove(err)
  return out, msg, ok
end

-- docs/ops.md's table row of op name, split into its cells
local function row(doc, name)
  local line = doc:match("\n(| `" .. name:gsub("%p", "%%%0") .. "` |[^\n]*)")
  if not line then return nil end
  local cells = {}
  for c in line:gmatch("|([^|]*)") do cells[#cells + 1] = c:match("^%s*(.-)%s*$") end
  cells[#cells] = nil -- after the last |
  return cells
end

TestDocs = {}

function TestDocs:test_docs_ops_md_is_generated_from_the_table()
  local out, msg, ok = generate(ROOT .. "/csrc/ops/ops.def")
  lu.assertTrue(ok and #out > 0, "cannot run " .. GEN .. " (build it: make build/gen_ops_doc): " .. msg)
  local doc = read_all(ROOT .. "/docs/ops.md")
  lu.assertNotNil(doc, "docs/ops.md is missing: run make docs")
  lu.assertTrue(doc == out, "docs/ops.md is stale: run make docs")
end

function TestDocs:test_every_op_has_a_row_agreeing_with_the_binding()
  local doc = read_all(ROOT .. "/docs/ops.md") or ""
  local n = 0
  for _, def in ipairs(core.op_list()) do
    local c = row(doc, def.name)
    lu.assertNotNil(c, "no row for " .. def.name)
    n = n + 1
    -- op | TensorFlow types | inputs | outputs | args | list | grad | fast | const inputs | notes
    lu.assertStrContains(c[2], "`" .. def.tf_type .. "`")
    local inputs = def.max_inputs < 0 and def.min_inputs .. "+ (a list)"
      or def.min_inputs == def.max_inputs and tostring(def.min_inputs)
      or def.min_inputs .. "-" .. def.max_inputs
    lu.assertEquals(c[3], inputs, def.name)
    local args = {}
    for i, a in ipairs(def.args) do args[i] = "`" .. a .. "`" end
    lu.assertEquals(c[5], table.concat(args, ", "), def.name)
    if def.kind == "kernel" then lu.assertEquals(c[6], def.precision_list, def.name) end
  end
  lu.assertEquals(n, #core.op_list())
  lu.assertStrContains(doc, ("The %d ops of the op table"):format(n))
end

-- The "fast" column against what the compiler does: under op_select_implmode =
-- high_performance, explain says which steps got the fast kernels.
function TestDocs:test_fast_column_matches_the_implementation_the_compiler_picks()
  local doc = read_all(ROOT .. "/docs/ops.md") or ""
  local unary = { "exp", "log", "tanh", "sigmoid", "gelu", "softmax", "log_softmax", "sqrt", "relu",
    "neg", "square", "abs", "sin", "rsqrt" }
  for _, name in ipairs(unary) do
    local g = npu.Graph()
    local x = g:placeholder("float32", { 2, 4 }, "x")
    local y = g:op(name, { x })
    local sess <close> = npu.Session { graph = g, options = { op_select_implmode = "high_performance",
      precision_mode = "must_keep_origin_dtype", export_compile_stat = 0 } }
    local impl = sess:explain(y, { [x] = npu.ones({ 2, 4 }) }).steps[1].impl
    local fast = row(doc, name)[8] == "yes"
    lu.assertEquals(impl, fast and "high_performance" or "high_precision", name)
  end
end

-- conv2d and conv2d_backprop_input: their high_performance is an algorithm (Winograd F(2x2,
-- 3x3) where the rule takes the shape, compile/implmode.c), so the column says "yes" for them
-- too; explain shows the algorithm at a shape the rule takes.
function TestDocs:test_fast_column_names_the_winograd_convolutions()
  local doc = read_all(ROOT .. "/docs/ops.md") or ""
  local n, h, c, oc = 8, 28, 32, 64
  local g = npu.Graph()
  local x = g:placeholder("float32", { n, h, h, c }, "x")
  local dy = g:placeholder("float32", { n, h, h, oc }, "dy")
  local f = g:const(npu.zeros({ 3, 3, c, oc }))
  local y = g:op("conv2d", { x, f }, { strides = 1, padding = "SAME" }, "doc_conv")
  local dx = g:op("conv2d_backprop_input", { f, dy }, { input_sizes = { n, h, h, c }, strides = 1,
    padding = "SAME" }, "doc_dx")
  local sess <close> = npu.Session { graph = g, options = { op_select_implmode = "high_performance",
    export_compile_stat = 0 } }
  local feeds = { [x] = npu.zeros({ n, h, h, c }), [dy] = npu.zeros({ n, h, h, oc }) }
  for _, t in ipairs({ { "conv2d", y, "doc_conv" }, { "conv2d_backprop_input", dx, "doc_dx" } }) do
    local algo
    for _, s in ipairs(sess:explain(t[2], feeds).steps) do
      if s.node == t[3] then algo = s.algo end
    end
    lu.assertEquals(algo, "winograd_2x3", t[1])
    lu.assertEquals(row(doc, t[1])[8], "yes", t[1])
  end
end

-- Import aliases listed in the doc are types the importer accepts.
function TestDocs:test_listed_aliases_are_imported()
  local doc = read_all(ROOT .. "/docs/ops.md") or ""
  local section = doc:match("## Import aliases\n(.*)$")
  lu.assertNotNil(section)
  local n = 0
  for tf, op in section:gmatch("| `([%w_]+)`\\?%*? | `([%w_]+)` |") do
    n = n + 1
    lu.assertNotNil(npu.ops[op], tf .. " -> " .. op)
  end
  lu.assertTrue(n >= 10, "aliases listed: " .. n)
  -- and through the importer (a TensorFlow.js graph in memory): AddV2 and Inv are aliases
  local g = npu.import_graph_def('{"format":"graph-model","modelTopology":{"node":[' ..
    '{"name":"a","op":"Placeholder","attr":{"dtype":{"type":"DT_FLOAT"}}},' ..
    '{"name":"s","op":"AddV2","input":["a","a"],"attr":{"T":{"type":"DT_FLOAT"}}},' ..
    '{"name":"r","op":"Inv","input":["s"],"attr":{"T":{"type":"DT_FLOAT"}}}]},"weightsManifest":[]}')
  lu.assertEquals(g:get_operation_by_name("s"):type(), row(doc, "add")[1]:match("`(.-)`"))
  lu.assertStrContains(row(doc, "add")[2], "`AddV2`")
  lu.assertEquals(g:get_operation_by_name("r"):type(), "reciprocal")
  lu.assertStrContains(row(doc, "reciprocal")[2], "`Inv`")
end

function TestDocs:test_generator_refuses_an_ops_def_that_disagrees_with_the_table()
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write("/* graph plumbing */\nNPU_OP(placeholder)\nNPU_OP(bogus)\n")
  f:close()
  local out, msg, ok = generate(path)
  os.remove(path)
  lu.assertTrue(not ok, "the generator should fail")
  lu.assertEquals(out, "")
  lu.assertStrContains(tostring(msg), path .. ":3: 'bogus' is not op 1 of the compiled table (const)")
  out, msg, ok = generate(ROOT .. "/no/such/ops.def")
  lu.assertTrue(not ok, "the generator should fail")
  lu.assertStrContains(tostring(msg), "cannot open " .. ROOT .. "/no/such/ops.def")
end

function TestDocs:test_compiler_md_names_every_pass_and_precision_mode()
  local doc = read_all(ROOT .. "/docs/compiler.md")
  lu.assertNotNil(doc, "docs/compiler.md is missing")
  local passes = read_all(ROOT .. "/csrc/compile/passes.def") or ""
  local n = 0
  for name in passes:gmatch("\nNPU_PASS%(([%w_]+),") do
    n = n + 1
    lu.assertStrContains(doc, "`" .. name .. "`")
    -- fusion_switch_file's text (docs/options.md) names every pass it can switch
    lu.assertStrContains(core.option_info("fusion_switch_file").effect or "", name)
  end
  lu.assertEquals(n, 10)
  for _, opt in ipairs({ "precision_mode", "precision_mode_v2" }) do
    for mode in core.option_info(opt).allowed:gmatch("[^|]+") do
      lu.assertStrContains(doc, "`" .. mode .. "`", opt)
    end
  end
  -- every option and variable the guide puts in backquotes as an option exists
  for name in doc:gmatch("option `([%w_]+)`") do lu.assertNotNil(core.option_info(name), name) end
  lu.assertStrContains(read_all(ROOT .. "/README.md") or "", "docs/compiler.md")
  lu.assertStrContains(read_all(ROOT .. "/README.md") or "", "docs/ops.md")
end

-- docs/numerics.md states the bound spec/reduce_accuracy_spec.lua checks (within a factor 2
-- for the float64 term), and the README links it.
function TestDocs:test_numerics_md_states_the_bound_the_spec_checks()
  local doc = read_all(ROOT .. "/docs/numerics.md")
  lu.assertNotNil(doc, "docs/numerics.md is missing")
  lu.assertStrContains(doc, "|r - s| <= 2^-24 |s| + n 2^-53 sum|x|")
  lu.assertStrContains(read_all(ROOT .. "/README.md") or "", "docs/numerics.md")
end

if SPEC_DIR == nil then os.exit(lu.LuaUnit.run()) end

-- docs/lua.md (errors, warnings, strict arguments, names) exists, lists every error class the
-- module has, and the README links it.
function TestDocs:test_lua_face_is_documented()
  local doc = read_all(ROOT .. "/docs/lua.md")
  lu.assertNotNil(doc, "docs/lua.md is missing")
  for name, c in pairs(npu.errors) do
    if type(c) == "table" and c.name == name and c.code then
      lu.assertStrContains(doc, name, false, "docs/lua.md does not name npu.errors." .. name)
    end
  end
  lu.assertStrContains(read_all(ROOT .. "/README.md") or "", "docs/lua.md")
end
