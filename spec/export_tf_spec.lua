-- export_tf_spec.lua — a .pb exported from a graph built in Lua is a GraphDef TensorFlow
-- reads: attributes of TF's types (type: DT_FLOAT, shapes as TensorShapeProto, ...), decoded
-- with `protoc --decode` against the schema subset in spec/fixtures/tf/graph.proto (Debian's
-- protobuf-compiler; without it that test skips, saying so), and read back by our importer.
local lu = require("luaunit")
local npu = require("npu")
local S = dofile(SPEC_DIR .. "/support.lua")

TestExportTF2 = {}

local ROOT = ROOT_DIR or "."

-- A graph as a TF1 script builds it: placeholders, layers in scopes, casts, reductions, pools.
local function build()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local img = g:placeholder("float32", { -1, 6, 6, 2 }, "img")
  local ids = g:placeholder("int32", { -1 }, "ids")
  local k = g:const(npu.random.normal({ 3, 3, 2, 4 }, { seed = 1 }), "k")
  local y = npu.name_scope("block", function()
    local c = npu.nn.conv2d(img, k, { 1, 1, 1, 1 }, "SAME")
    return npu.nn.max_pool(npu.nn.relu(c), { 1, 2, 2, 1 }, { 1, 2, 2, 1 }, "VALID")
  end)
  local flat = npu.reshape(y, { -1, 36 })
  local out = npu.reduce_sum(npu.cast(flat, "float64"), 1, false, { name = "out" })
  local n = npu.cast(ids, "int64", { name = "n" })
  return g, img, ids, out, n
end

local function feeds(img, ids)
  return { [img] = npu.random.uniform({ 2, 6, 6, 2 }, { seed = 3 }), [ids] = npu.tensor({ 1, 2 }, "int32") }
end

local function has_protoc()
  return os.execute("command -v protoc >/dev/null 2>&1") == true
end

function TestExportTF2:test_protoc_decodes_tf_types()
  if not has_protoc() then
    lu.skip("protoc is not installed (Debian: apt-get install protobuf-compiler): the GraphDef is not decoded against TensorFlow's schema")
  end
  local g = build()
  local dir, _ <close> = S.tmpdir()
  local pb = dir .. "/g.pb"
  npu.export_graph_def(g, pb)
  local p = io.popen(("protoc --decode=tensorflow.GraphDef -I %s %s < %s 2>&1"):format(
    S.sh_quote(ROOT .. "/spec/fixtures/tf"), S.sh_quote(ROOT .. "/spec/fixtures/tf/graph.proto"), S.sh_quote(pb)))
  local text = p:read("a")
  local ok = p:close()
  lu.assertTrue(ok, text)
  -- dtypes are `type` values, never strings
  for _, name in ipairs({ "float32", "float64", "int32", "int64", "float", "double" }) do
    lu.assertNil(text:find('s: "' .. name .. '"', 1, true), "a dtype written as a string: " .. name)
  end
  lu.assertStrContains(text, "type: DT_FLOAT")
  lu.assertStrContains(text, "type: DT_DOUBLE")
  lu.assertStrContains(text, "type: DT_INT64")
  lu.assertStrContains(text, "type: DT_INT32")
  -- the placeholder's shape is a TensorShapeProto
  lu.assertStrContains(text, "shape {\n        dim {\n          size: -1\n        }\n        dim {\n          size: 6\n")
  -- window attributes are int lists, padding a string, names scoped as in TF
  lu.assertStrContains(text, 'name: "block/Conv2D"')
  lu.assertStrContains(text, 'name: "block/MaxPool"')
  lu.assertStrContains(text, 's: "SAME"')
  lu.assertStrContains(text, "i: 1\n        i: 2\n        i: 2\n        i: 1")
  -- and nothing protoc could not place in the schema (an unknown field prints as a number)
  for line in text:gmatch("[^\n]+") do
    lu.assertNil(line:match("^%s*%d+:"), "a field outside TensorFlow's schema: " .. line)
  end
end

function TestExportTF2:test_reimport_gives_the_same_results()
  local g, img, ids, out, n = build()
  local want = npu.Session { g }:run({ out, n }, feeds(img, ids))
  local g2 = npu.import_graph_def(npu.export_graph_def(g))
  local img2, ids2 = g2:get_tensor_by_name("img:0"), g2:get_tensor_by_name("ids:0")
  lu.assertEquals(img2:dtype(), "float32")
  lu.assertEquals(img2:shape(), { -1, 6, 6, 2 })
  lu.assertEquals(ids2:dtype(), "int32")
  local got = npu.Session { g2 }:run({ "out:0", "n:0" }, feeds(img2, ids2))
  lu.assertEquals(got[1]:dtype(), "float64")
  lu.assertEquals(got[2]:dtype(), "int64")
  lu.assertTrue(npu.allclose(got[1], want[1]))
  lu.assertEquals(got[2]:totable(), want[2]:totable())
  lu.assertEquals(g2:get_operation_by_name("block/Conv2D"):type(), "conv2d")
end
