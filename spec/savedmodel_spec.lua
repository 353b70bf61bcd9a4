-- savedmodel_spec.lua — SavedModel directories: npu.export_saved_model then npu.load_model
-- gives the same results as the graph itself; the pieces of the files (a "serve" meta graph,
-- VariableV2 nodes, a tensor bundle with its footer magic and checksums); a Snappy-compressed
-- index (as TensorFlow writes them) built here from the format's definition; a signature
-- that feeds an interior tensor; directories holding a model.json or one .pb; every error
-- (checksums, missing variables, tags, signatures, text format); and, when it is there, a
-- SavedModel written by TensorFlow itself (TF Serving's half_plus_two test model).
local lu = require("luaunit")
local npu = require("npu")

local S = dofile(SPEC_DIR .. "/support.lua")

-- ---- CRC-32C and LevelDB blocks, from their definitions, to build files TensorFlow's way --

local CRC = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1 == 1) and ((c >> 1) ~ 0x82f63b78) or (c >> 1) end
  CRC[i] = c
end
local function crc32c(s)
  local c = 0xffffffff
  for i = 1, #s do c = CRC[(c ~ s:byte(i)) & 0xff] ~ (c >> 8) end
  return (~c) & 0xffffffff
end
local function mask(c) return ((((c >> 15) | (c << 17)) & 0xffffffff) + 0xa282ead8) & 0xffffffff end

local function varint(s, pos)
  local v, shift = 0, 0
  while true do
    local b = s:byte(pos)
    pos = pos + 1
    v = v | ((b & 0x7f) << shift)
    if b < 0x80 then return v, pos end
    shift = shift + 7
  end
end

-- Snappy with literals and copies (1- and 2-byte offsets): a naive greedy matcher.
local function snappy(data)
  local out = { S.pb_varint(#data) }
  local lit_start, i, copies = 1, 1, 0
  local function flush(upto)
    local n = upto - lit_start
    while n > 0 do
      local k = math.min(n, 60)
      out[#out + 1] = string.char((k - 1) << 2) .. data:sub(lit_start, lit_start + k - 1)
      lit_start, n = lit_start + k, n - k
    end
  end
  while i <= #data do
    local best_len, best_off = 0, 0
    for j = math.max(1, i - 2000), i - 1 do
      local l = 0
      while i + l <= #data and l < 64 and data:byte(j + l) == data:byte(i + l) do l = l + 1 end
      if l > best_len then best_len, best_off = l, i - j end
    end
    if best_len >= 4 then
      flush(i)
      if best_len <= 11 and best_off < 2048 then
        out[#out + 1] = string.char(1 | ((best_len - 4) << 2) | ((best_off >> 8) << 5), best_off & 0xff)
      else
        out[#out + 1] = string.char(2 | ((best_len - 1) << 2), best_off & 0xff, best_off >> 8)
      end
      i = i + best_len
      lit_start = i
      copies = copies + 1
    else
      i = i + 1
    end
  end
  flush(#data + 1)
  return table.concat(out), copies
end

-- Rewrites a table file with its first data block Snappy-compressed (type 1), as TensorFlow's
-- BundleWriter does, and the index block's handle moved accordingly.
local function compress_index(path)
  local s = S.read(path)
  local footer = s:sub(-48)
  local moff, p = varint(footer, 1)
  local msize
  msize, p = varint(footer, p)
  local ioff, isize
  ioff, p = varint(footer, p)
  isize = varint(footer, p)
  -- the data block is the one the index block's single entry points to: offset 0
  local iblock = s:sub(ioff + 1, ioff + isize)
  local _, q = varint(iblock, 1)            -- shared
  local klen; klen, q = varint(iblock, q)
  local vlen; vlen, q = varint(iblock, q)
  local key = iblock:sub(q, q + klen - 1)
  local handle = iblock:sub(q + klen, q + klen + vlen - 1)
  local doff, hp = varint(handle, 1)
  local dsize = varint(handle, hp)
  assert(doff == 0)
  local data = s:sub(1, dsize)
  local comp, copies = snappy(data)
  local function block(contents, kind)
    local t = string.char(kind)
    return contents .. t .. string.pack("<I4", mask(crc32c(contents .. t)))
  end
  local out = { block(comp, 1) }
  local meta_off = #out[1]
  local meta = s:sub(moff + 1, moff + msize)
  out[#out + 1] = block(meta, 0)
  local idx_off = meta_off + msize + 5
  local entry = S.pb_varint(0) .. S.pb_varint(#key) ..
    S.pb_varint(#S.pb_varint(0) + #S.pb_varint(#comp)) .. key .. S.pb_varint(0) .. S.pb_varint(#comp)
  local idx = entry .. string.pack("<I4I4", 0, 1)
  out[#out + 1] = block(idx, 0)
  local f = S.pb_varint(meta_off) .. S.pb_varint(msize) .. S.pb_varint(idx_off) .. S.pb_varint(#idx)
  out[#out + 1] = f .. string.rep("\0", 40 - #f) .. s:sub(-8)
  S.write(path, table.concat(out))
  return copies
end

-- ---- a model to export ---------------------------------------------------------------------

local function small_model()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 3 }, "x")
  local w = g:const(npu.tensor({ { 1, -2 }, { 0.5, 3 }, { -1, 1 } }, "float32"), "w")
  local b = g:const(npu.tensor({ 0.25, -0.75 }, "float32"), "b")
  local y = npu.nn.softmax(x:matmul(w) + b, { name = "probs" })
  return g, x, y
end

local X = npu.tensor({ { 1, 2, 3 }, { -1, 0, 0.5 } }, "float32")

local function direct(g, x, y)
  local sess <close> = npu.Session{ graph = g }
  return sess:run(y, { [x] = X })
end

local function export(dir)
  local g, x, y = small_model()
  npu.export_saved_model(g, dir, { inputs = { inputs = "x:0" }, outputs = { probs = y },
                                   variables = { "w", "b" } })
  return direct(g, x, y)
end

TestSavedModel = {}

function TestSavedModel:setUp() self.dir = S.tmpdir() .. "/1" end
function TestSavedModel:tearDown() S.rm_rf(self.dir:gsub("/1$", "")) end

function TestSavedModel:test_round_trip()
  local want = export(self.dir)
  lu.assertTrue(S.exists(self.dir .. "/saved_model.pb"))
  lu.assertTrue(S.exists(self.dir .. "/variables/variables.index"))
  lu.assertTrue(S.exists(self.dir .. "/variables/variables.data-00000-of-00001"))
  -- the data shard holds w (6 floats) and b (2 floats), in key order: b then w
  local data = S.read(self.dir .. "/variables/variables.data-00000-of-00001")
  lu.assertEquals(#data, 4 * 8)
  lu.assertEquals(string.unpack("<f", data, 1), 0.25)
  -- the index ends with LevelDB's table magic
  lu.assertEquals(S.read(self.dir .. "/variables/variables.index"):sub(-8),
                  "\x57\xfb\x80\x8b\x24\x75\x47\xdb")
  -- the graph holds the variables as VariableV2, not as constants
  local pb = S.read(self.dir .. "/saved_model.pb")
  lu.assertStrContains(pb, "VariableV2")
  lu.assertStrContains(pb, "serve")
  lu.assertStrContains(pb, "tensorflow/serving/predict")

  local g, info = npu.load_model(self.dir)
  lu.assertEquals(info.format, "savedmodel")
  lu.assertEquals(info.signature_source, "signature_def")
  lu.assertEquals(info.signature_key, "serving_default")
  lu.assertEquals(info.method_name, "tensorflow/serving/predict")
  lu.assertEquals(info.signatures, { "serving_default" })
  lu.assertEquals(info.inputs[1].key, "inputs")
  lu.assertEquals(info.inputs[1].name, "x:0")
  lu.assertEquals(info.inputs[1].shape, { -1, 3 })
  lu.assertEquals(info.outputs[1].key, "probs")
  lu.assertEquals(info.outputs[1].dtype, "float32")
  -- frozen: the variables are constants, nothing to initialise
  lu.assertEquals(g:get_operation_by_name("w"):type(), "const")
  local sess <close> = npu.Session{ graph = g }
  local got = sess:run(info.output_names[1], { [info.input_names[1]] = X })
  lu.assertEquals(got:totable(), want:totable())
end

function TestSavedModel:test_snappy_compressed_index()
  local want = export(self.dir)
  local copies = compress_index(self.dir .. "/variables/variables.index")
  lu.assertTrue(copies > 0, "the test block must use Snappy's copies, not only literals")
  local g, info = npu.load_model(self.dir)
  local sess <close> = npu.Session{ graph = g }
  lu.assertEquals(sess:run(info.output_names[1], { [info.input_names[1]] = X }):totable(),
                  want:totable())
end

function TestSavedModel:test_signature_feeds_an_interior_tensor()
  -- as TF Serving's half_plus_two: the signature feeds x:0, an Identity of something else
  local g = npu.Graph()
  local raw = g:placeholder("int32", { -1, 2 }, "raw")
  local x = npu.identity(npu.cast(raw, "float32"), { name = "x" })
  local y = npu.multiply(x, g:const(npu.tensor({ 2, 3 }, "float32"), "scale"), { name = "y" })
  npu.export_saved_model(g, self.dir, { inputs = { x = "x:0" }, outputs = { y = "y:0" },
                                        variables = { "scale" } })
  local g2, info = npu.load_model(self.dir)
  lu.assertEquals(g2:get_operation_by_name("x"):type(), "placeholder")
  lu.assertFalse(pcall(g2.get_operation_by_name, g2, "raw"), "raw is above the fed tensor: pruned")
  local sess <close> = npu.Session{ graph = g2 }
  lu.assertEquals(sess:run("y:0", { ["x:0"] = npu.tensor({ { 1, 1 }, { 2, -1 } }, "float32") }):totable(),
                  { { 2, 3 }, { 4, -3 } })
  lu.assertEquals(info.inputs[1].dtype, "float32")
end

function TestSavedModel:test_tags_and_signature_options()
  export(self.dir)
  local _, info = npu.load_model(self.dir, { tags = "serve", signature = "serving_default" })
  lu.assertEquals(info.signature_key, "serving_default")
  local msg = S.fails(npu.load_model, self.dir, { tags = "serve,gpu" })
  lu.assertStrContains(tostring(msg), "NPU_ERR_NOT_FOUND")
  lu.assertStrContains(tostring(msg), 'no meta graph is tagged "serve,gpu" (the tag sets are: {"serve"})')
  msg = S.fails(npu.load_model, self.dir, { signature = "classify" })
  lu.assertStrContains(tostring(msg), "no signature 'classify' (it has 'serving_default')")
end

function TestSavedModel:test_directories_of_other_models()
  local g, x, y = small_model()
  local want = direct(g, x, y)
  os.execute("mkdir -p " .. S.sh_quote(self.dir))
  npu.export_graph_def(g, self.dir .. "/frozen.pb")
  local g2, info = npu.load_model(self.dir)
  lu.assertEquals(info.format, "graphdef")
  local sess <close> = npu.Session{ graph = g2 }
  lu.assertEquals(sess:run(y:name(), { ["x:0"] = X }):totable(), want:totable())
  npu.export_graph_def(g, self.dir .. "/other.pb")
  lu.assertStrContains(S.fails(npu.load_model, self.dir), "and more than one .pb file")
  S.rm_rf(self.dir .. "/frozen.pb")
  S.rm_rf(self.dir .. "/other.pb")
  lu.assertStrContains(S.fails(npu.load_model, self.dir),
                       "has no saved_model.pb, no model.json and no .pb file")
end

function TestSavedModel:test_errors()
  export(self.dir)
  local data = self.dir .. "/variables/variables.data-00000-of-00001"
  local index = self.dir .. "/variables/variables.index"
  local good_data, good_index = S.read(data), S.read(index)
  -- a flipped byte in a tensor
  S.write(data, string.char(good_data:byte(1) ~ 1) .. good_data:sub(2))
  local msg = S.fails(npu.load_model, self.dir)
  lu.assertStrContains(tostring(msg), "NPU_ERR_FORMAT")
  lu.assertStrContains(tostring(msg), "CRC-32C checksum mismatch")
  -- a shard too short
  S.write(data, good_data:sub(1, 8))
  lu.assertStrContains(S.fails(npu.load_model, self.dir), "lies past the end of the file")
  S.write(data, good_data)
  -- a flipped byte in the index's data block
  S.write(index, good_index:sub(1, 9) .. string.char(good_index:byte(10) ~ 0x40) .. good_index:sub(11))
  lu.assertStrContains(S.fails(npu.load_model, self.dir), "block checksum mismatch")
  -- no footer
  S.write(index, good_index:sub(1, -2))
  lu.assertStrContains(S.fails(npu.load_model, self.dir), "no table footer (magic number missing)")
  -- no variables at all
  S.rm_rf(self.dir .. "/variables")
  msg = S.fails(npu.load_model, self.dir)
  lu.assertStrContains(tostring(msg), "NPU_ERR_IO")
  lu.assertStrContains(tostring(msg), "variables.index")
  -- a variable the bundle lacks: export another model's bundle
  local g = npu.Graph()
  local c = g:const(npu.tensor({ 1 }, "float32"), "other")
  npu.export_saved_model(g, self.dir .. "-other", { outputs = { o = c }, variables = { "other" } })
  os.execute("cp -r " .. S.sh_quote(self.dir .. "-other/variables") .. " " .. S.sh_quote(self.dir))
  S.rm_rf(self.dir .. "-other")
  msg = S.fails(npu.load_model, self.dir)
  lu.assertStrContains(tostring(msg), "variable 'w' has no value in")
  -- a corrupt saved_model.pb
  S.write(self.dir .. "/saved_model.pb", "\x12\xff\xff\x01")
  lu.assertStrContains(S.fails(npu.load_model, self.dir), "corrupt SavedModel")
  -- text format
  S.rm_rf(self.dir .. "/saved_model.pb")
  S.write(self.dir .. "/saved_model.pbtxt", "saved_model_schema_version: 1")
  msg = S.fails(npu.load_model, self.dir)
  lu.assertStrContains(tostring(msg), "NPU_ERR_UNSUPPORTED")
  lu.assertStrContains(tostring(msg), "text-format SavedModels are not supported")
end

function TestSavedModel:test_export_errors()
  local g, x, y = small_model()
  lu.assertStrContains(S.fails(npu.export_saved_model, g, self.dir,
                               { outputs = { y = "nope:0" } }),
                       "signature tensor 'nope:0' is not in the graph")
  lu.assertStrContains(S.fails(npu.export_saved_model, g, self.dir,
                               { outputs = { y = y }, variables = { "x" } }),
                       "variable 'x' is not a const node of the graph")
  lu.assertStrContains(S.fails(npu.export_saved_model, g, 7), "expected a directory name")
  lu.assertNotNil(x)
end

-- The directory of a SavedModel TensorFlow wrote: $env, else ../shared/models/<name>/00000123;
-- the test skips when it holds none (what names the kind in the message).
local function written_by_tensorflow(env, name, what)
  local dir = os.getenv(env) or (ROOT_DIR .. "/../shared/models/" .. name .. "/00000123")
  if not S.exists(dir .. "/saved_model.pb") then
    lu.skip("no " .. what .. " written by TensorFlow here (" .. dir .. ")")
  end
  return dir
end

-- TensorFlow Serving's own test model (written by TensorFlow 1.x: VariableV2, a Snappy
-- index), when a copy is at ../shared/models/saved_model_half_plus_two_cpu/00000123 or
-- $NPU_TF_SAVED_MODEL: y = 0.5 x + 2, y3 = 0.5 x2 + 3.
function TestSavedModel:test_written_by_tensorflow()
  local dir = written_by_tensorflow("NPU_TF_SAVED_MODEL", "saved_model_half_plus_two_cpu",
    "SavedModel")
  local g, info = npu.load_model(dir)
  lu.assertEquals(info.signatures, { "classify_x_to_y", "regress_x2_to_y3", "regress_x_to_y",
                                     "regress_x_to_y2", "serving_default" })
  local sess <close> = npu.Session{ graph = g }
  lu.assertEquals(sess:run("y:0", { ["x:0"] = npu.tensor({ { 1 }, { 2 }, { 5 } }, "float32") }):totable(),
                  { { 2.5 }, { 3 }, { 4.5 } })
  local g3 = npu.load_model(dir, { signature = "regress_x2_to_y3" })
  local s3 <close> = npu.Session{ graph = g3 }
  lu.assertEquals(s3:run("y3:0", { ["x2:0"] = npu.tensor({ { 1 }, { 2 } }, "float32") }):totable(),
                  { { 3.5 }, { 4 } })
  -- the classify signature reads serialized tf.Examples: strings, which this device lacks
  lu.assertStrContains(S.fails(npu.load_model, dir, { signature = "classify_x_to_y" }),
                       "DT_STRING is not supported")
end

-- ---- TF2 SavedModels, assembled here from the formats' definitions -------------------------
-- (saved_model.proto, meta_graph.proto, saved_object_graph.proto, function.proto,
-- trackable_object_graph.proto, tensor_bundle.proto): a Keras-like dense layer y = x W + b
-- whose signature calls a function (StatefulPartitionedCall) with the variables it captured,
-- VarHandleOps named "Variable" and "Variable_1" whose values the bundle keeps under object
-- graph keys ("dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"), found through the SavedObjectGraph's
-- bound_inputs and the checkpoint's TrackableObjectGraph, as TensorFlow 2 writes them.

local F = S.pb_field
local function str(num, s) return F(num, 2, s) end
local DT_FLOAT, DT_STRING, DT_RESOURCE = 1, 7, 20

local function shape_proto(dims)
  local s = {}
  for i, d in ipairs(dims) do s[i] = str(2, F(1, 0, d & 0xffffffffffffffff)) end
  return table.concat(s)
end
local function attr(key, value) return str(5, str(1, key) .. str(2, value)) end
local function a_type(t) return F(6, 0, t) end
local function a_shape(dims) return str(7, shape_proto(dims)) end
local function a_func(name) return str(10, str(1, name)) end
local function nodedef(name, op, inputs, attrs)
  local s = { str(1, name), str(2, op) }
  for _, i in ipairs(inputs or {}) do s[#s + 1] = str(3, i) end
  for _, a in ipairs(attrs or {}) do s[#s + 1] = attr(a[1], a[2]) end
  return table.concat(s)
end
-- FunctionDef { signature = 1: OpDef { name = 1, input_arg = 2, output_arg = 3 }, node_def = 3,
-- ret = 4 }; args and outs are {name, DataType} pairs
local function funcdef(name, args, outs, nodes, ret)
  local sig = { str(1, name) }
  for _, a in ipairs(args) do sig[#sig + 1] = str(2, str(1, a[1]) .. F(3, 0, a[2])) end
  for _, a in ipairs(outs) do sig[#sig + 1] = str(3, str(1, a[1]) .. F(3, 0, a[2])) end
  local s = { str(1, table.concat(sig)) }
  for _, n in ipairs(nodes) do s[#s + 1] = str(3, n) end
  for k, v in pairs(ret) do s[#s + 1] = str(4, str(1, k) .. str(2, v)) end
  return table.concat(s)
end

local function tf2_saved_model_pb()
  local call = { { "Tin", "" }, { "Tout", "" } }
  local function call_attrs(f) return { { "f", a_func(f) }, call[1], call[2] } end
  local graph = table.concat({
    str(1, nodedef("serving_default_x", "Placeholder", {},
                   { { "dtype", a_type(DT_FLOAT) }, { "shape", a_shape({ -1, 3 }) } })),
    str(1, nodedef("Variable", "VarHandleOp", {}, { { "dtype", a_type(DT_FLOAT) },
                   { "shape", a_shape({ 3, 2 }) }, { "shared_name", str(2, "Variable") } })),
    str(1, nodedef("Variable_1", "VarHandleOp", {}, { { "dtype", a_type(DT_FLOAT) },
                   { "shape", a_shape({ 2 }) }, { "shared_name", str(2, "Variable_1") } })),
    str(1, nodedef("StatefulPartitionedCall", "StatefulPartitionedCall",
                   { "serving_default_x", "Variable", "Variable_1" },
                   call_attrs("__inference_signature_wrapper_20"))),
    -- the saver's call, which reads strings: never reached, never imported
    str(1, nodedef("saver_filename", "Placeholder", {}, { { "dtype", a_type(DT_STRING) } })),
    str(1, nodedef("StatefulPartitionedCall_1", "StatefulPartitionedCall",
                   { "saver_filename", "Variable", "Variable_1" }, call_attrs("__inference__traced_save_30"))),
    str(2, table.concat({
      str(1, funcdef("__inference_signature_wrapper_20",
                     { { "x", DT_FLOAT }, { "unknown", DT_RESOURCE }, { "unknown_0", DT_RESOURCE } },
                     { { "identity", DT_FLOAT } },
                     { nodedef("StatefulPartitionedCall", "StatefulPartitionedCall",
                               { "x", "unknown", "unknown_0" }, call_attrs("__inference_call_10")),
                       nodedef("Identity", "Identity", { "StatefulPartitionedCall:output:0", "^NoOp" },
                               { { "T", a_type(DT_FLOAT) } }),
                       nodedef("NoOp", "NoOp", { "^StatefulPartitionedCall" }) },
                     { identity = "Identity:output:0" })),
      str(1, funcdef("__inference_call_10",
                     { { "inputs", DT_FLOAT }, { "matmul_readvariableop_resource", DT_RESOURCE },
                       { "biasadd_readvariableop_resource", DT_RESOURCE } },
                     { { "identity", DT_FLOAT } },
                     { nodedef("MatMul/ReadVariableOp", "ReadVariableOp", { "matmul_readvariableop_resource" },
                               { { "dtype", a_type(DT_FLOAT) } }),
                       nodedef("MatMul", "MatMul", { "inputs", "MatMul/ReadVariableOp:value:0" },
                               { { "T", a_type(DT_FLOAT) } }),
                       nodedef("BiasAdd/ReadVariableOp", "ReadVariableOp", { "biasadd_readvariableop_resource" },
                               { { "dtype", a_type(DT_FLOAT) } }),
                       nodedef("BiasAdd", "BiasAdd", { "MatMul:product:0", "BiasAdd/ReadVariableOp:value:0" },
                               { { "T", a_type(DT_FLOAT) } }),
                       nodedef("Identity", "Identity", { "BiasAdd:output:0" }, { { "T", a_type(DT_FLOAT) } }) },
                     { identity = "Identity:output:0" })),
      str(1, funcdef("__inference__traced_save_30",
                     { { "file_prefix", DT_STRING }, { "a", DT_RESOURCE }, { "b", DT_RESOURCE } },
                     { { "identity", DT_STRING } },
                     { nodedef("Const", "Const", {}, { { "dtype", a_type(DT_STRING) },
                               { "value", str(8, F(1, 0, DT_STRING) .. str(8, "tensors")) } }),
                       nodedef("Identity", "Identity", { "file_prefix" }, { { "T", a_type(DT_STRING) } }) },
                     { identity = "Identity:output:0" })),
    })),
  })
  local function tensor_info(name, dims) return str(1, name) .. F(2, 0, DT_FLOAT) .. str(3, shape_proto(dims)) end
  local signature = str(5, str(1, "serving_default") .. str(2,
    str(1, str(1, "x") .. str(2, tensor_info("serving_default_x:0", { -1, 3 }))) ..
    str(2, str(1, "y") .. str(2, tensor_info("StatefulPartitionedCall:0", { -1, 2 }))) ..
    str(3, "tensorflow/serving/predict")))
  -- SavedObjectGraph: root -> dense (1) -> kernel (2), bias (3); the wrapper captured 2 and 3
  local function child(id, name) return str(1, F(1, 0, id) .. str(2, name)) end
  local variable = str(7, F(1, 0, DT_FLOAT))
  local objects = str(1, child(1, "dense") .. str(4, str(1, "_generic_user_object"))) ..
    str(1, child(2, "kernel") .. child(3, "bias") .. str(4, str(1, "_generic_user_object"))) ..
    str(1, variable) .. str(1, variable) ..
    str(2, str(1, "__inference_signature_wrapper_20") ..
           str(2, str(2, S.pb_varint(2) .. S.pb_varint(3)))) -- bound_inputs, packed
  local meta = str(1, str(4, "serve")) .. str(2, graph) .. signature .. str(7, objects)
  return F(1, 0, 1) .. str(2, meta)
end

-- The checkpoint's TrackableObjectGraph, node ids as in the SavedObjectGraph above.
local function trackable_graph()
  local function child(id, name) return str(1, F(1, 0, id) .. str(2, name)) end
  local function value(path)
    return str(2, str(1, "VARIABLE_VALUE") .. str(2, path) .. str(3, path .. "/.ATTRIBUTES/VARIABLE_VALUE"))
  end
  return str(1, child(1, "dense")) .. str(1, child(2, "kernel") .. child(3, "bias")) ..
    str(1, value("dense/kernel")) .. str(1, value("dense/bias"))
end

-- A one-shard tensor bundle written by hand: data blocks as TensorFlow's BundleWriter lays
-- them out (a one-element DT_STRING as [varint length][masked CRC-32C of the length][bytes]),
-- an uncompressed table of every entry, an empty metaindex, the index block, the footer.
-- entries: { key, dtype, dims, bytes } (the string tensor: dtype DT_STRING, bytes the string)
local function write_bundle(prefix, entries)
  table.sort(entries, function(a, b) return a[1] < b[1] end)
  local data, values = {}, {}
  local offset = 0
  for i, e in ipairs(entries) do
    local raw, crc = e[4], nil
    if e[2] == DT_STRING then
      local len32 = string.pack("<I4", #raw)
      local cks = string.pack("<I4", mask(crc32c(len32)))
      crc = mask(crc32c(len32 .. cks .. raw))
      raw = S.pb_varint(#raw) .. cks .. raw
    else
      crc = mask(crc32c(raw))
    end
    data[i] = raw
    values[i] = F(1, 0, e[2]) .. str(2, shape_proto(e[3])) .. (offset > 0 and F(4, 0, offset) or "") ..
      F(5, 0, #raw) .. F(6, 5, string.pack("<I4", crc))
    offset = offset + #raw
  end
  S.write(prefix .. ".data-00000-of-00001", table.concat(data))
  local function block(kvs)
    local b, restarts = {}, {}
    local at = 0
    for _, kv in ipairs(kvs) do
      restarts[#restarts + 1] = string.pack("<I4", at)
      local ent = S.pb_varint(0) .. S.pb_varint(#kv[1]) .. S.pb_varint(#kv[2]) .. kv[1] .. kv[2]
      b[#b + 1] = ent
      at = at + #ent
    end
    if #restarts == 0 then restarts[1] = string.pack("<I4", 0) end
    return table.concat(b) .. table.concat(restarts) .. string.pack("<I4", #restarts)
  end
  local function trailer(contents) return contents .. "\0" .. string.pack("<I4", mask(crc32c(contents .. "\0"))) end
  local kvs = { { "", F(1, 0, 1) .. str(3, F(1, 0, 1)) } } -- BundleHeaderProto: one shard, little-endian
  for i, e in ipairs(entries) do kvs[#kvs + 1] = { e[1], values[i] } end
  local dblock, mblock = block(kvs), block({})
  local iblock = block({ { entries[#entries][1], S.pb_varint(0) .. S.pb_varint(#dblock) } })
  local file = trailer(dblock) .. trailer(mblock) .. trailer(iblock)
  local m_off, i_off = #dblock + 5, #dblock + 5 + #mblock + 5
  local footer = S.pb_varint(m_off) .. S.pb_varint(#mblock) .. S.pb_varint(i_off) .. S.pb_varint(#iblock)
  S.write(prefix .. ".index", file .. footer .. string.rep("\0", 40 - #footer) ..
                              "\x57\xfb\x80\x8b\x24\x75\x47\xdb")
end

local W = { 1, -2, 0.5, 3, -1, 1 }
local B = { 0.25, -0.75 }

local function write_tf2(dir, opts)
  opts = opts or {}
  os.execute("mkdir -p " .. S.sh_quote(dir .. "/variables"))
  S.write(dir .. "/saved_model.pb", tf2_saved_model_pb())
  local entries = {
    { "dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", DT_FLOAT, { 3, 2 }, string.pack("<ffffff", table.unpack(W)) },
    { "dense/bias/.ATTRIBUTES/VARIABLE_VALUE", DT_FLOAT, { 2 }, string.pack("<ff", table.unpack(B)) },
  }
  if not opts.no_object_graph then
    entries[#entries + 1] = { "_CHECKPOINTABLE_OBJECT_GRAPH", DT_STRING, {}, trackable_graph() }
  end
  write_bundle(dir .. "/variables/variables", entries)
end

TestSavedModelTF2 = {}

function TestSavedModelTF2:setUp() self.dir = S.tmpdir() .. "/1" end
function TestSavedModelTF2:tearDown() S.rm_rf(self.dir:gsub("/1$", "")) end

function TestSavedModelTF2:test_function_based_model_with_resource_variables()
  write_tf2(self.dir)
  local g, info = npu.load_model(self.dir)
  lu.assertEquals(info.signature_key, "serving_default")
  lu.assertEquals(info.input_names, { "serving_default_x:0" })
  lu.assertEquals(info.output_names, { "StatefulPartitionedCall:0" })
  lu.assertEquals(info.outputs[1].shape, { -1, 2 })
  -- the captured VarHandleOps are constants holding the object graph's values
  lu.assertEquals(g:get_operation_by_name("Variable"):type(), "const")
  lu.assertFalse(pcall(g.get_operation_by_name, g, "StatefulPartitionedCall_1/Const"),
                 "the saver's function is not imported")
  local sess <close> = npu.Session{ graph = g }
  local y = sess:run("StatefulPartitionedCall:0", { ["serving_default_x:0"] = X }):totable()
  -- X W + b by hand: rows (1,2,3) and (-1,0,0.5)
  local want = { { 1 + 1 - 3 + 0.25, -2 + 6 + 3 - 0.75 }, { -1 - 0.5 + 0.25, 2 + 0.5 - 0.75 } }
  for r = 1, 2 do
    for c = 1, 2 do lu.assertAlmostEquals(y[r][c], want[r][c], 1e-6) end
  end
end

-- spec/fixtures/tf2_dense is this model as files, for the C side: the allocation-failure sweep
-- of tests/test_savedmodel.c and the seeds of the fuzz targets (tests/fuzz).
-- NPU_WRITE_FIXTURES=1 rewrites it.
function TestSavedModelTF2:test_fixture_is_this_model()
  local fixture = SPEC_DIR .. "/fixtures/tf2_dense"
  if os.getenv("NPU_WRITE_FIXTURES") then write_tf2(fixture) end
  write_tf2(self.dir)
  for _, f in ipairs({ "saved_model.pb", "variables/variables.index",
                       "variables/variables.data-00000-of-00001" }) do
    lu.assertTrue(S.read(fixture .. "/" .. f) == S.read(self.dir .. "/" .. f),
                  "spec/fixtures/tf2_dense/" .. f .. " differs: NPU_WRITE_FIXTURES=1 rewrites it")
  end
end

function TestSavedModelTF2:test_errors()
  write_tf2(self.dir, { no_object_graph = true })
  local msg = S.fails(npu.load_model, self.dir)
  lu.assertStrContains(msg, "NPU_ERR_FORMAT")
  lu.assertStrContains(msg, "variable 'Variable' is captured by a TF2 function, but")
  lu.assertStrContains(msg, "has no object graph (_CHECKPOINTABLE_OBJECT_GRAPH)")
  -- a flipped byte in the object graph string fails its checksum
  write_tf2(self.dir)
  local data = self.dir .. "/variables/variables.data-00000-of-00001"
  local d = S.read(data) -- the string sorts first: its bytes are at offset 0
  local at = 12
  S.write(data, d:sub(1, at - 1) .. string.char(d:byte(at) ~ 1) .. d:sub(at + 1))
  lu.assertStrContains(S.fails(npu.load_model, self.dir),
                       "string tensor '_CHECKPOINTABLE_OBJECT_GRAPH': bad length or CRC-32C checksum mismatch")
end

-- TensorFlow Serving's TF2 test model (saved_model_half_plus_two_tf2_cpu, written by
-- TensorFlow 2 with tf.Module variables a, b, c), when a copy is at
-- ../shared/models/saved_model_half_plus_two_tf2_cpu/00000123 or $NPU_TF2_SAVED_MODEL:
-- predict y = 0.5 x + 2, regress_x2_to_y3 y = 0.5 x + 3.
function TestSavedModelTF2:test_written_by_tensorflow()
  local dir = written_by_tensorflow("NPU_TF2_SAVED_MODEL", "saved_model_half_plus_two_tf2_cpu",
    "TF2 SavedModel")
  local g, info = npu.load_model(dir)
  lu.assertEquals(info.signatures, { "__saved_model_init_op", "classify_x2_to_y3", "classify_x_to_y",
                                     "regress_x2_to_y3", "regress_x_to_y", "regress_x_to_y2",
                                     "serving_default" })
  lu.assertEquals(info.input_names, { "serving_default_x:0" })
  local sess <close> = npu.Session{ graph = g }
  lu.assertEquals(sess:run(info.output_names[1], { [info.input_names[1]] = npu.tensor({ 5 }, "float32") }):totable(),
                  { 4.5 })
  local g3, i3 = npu.load_model(dir, { signature = "regress_x2_to_y3" })
  local s3 <close> = npu.Session{ graph = g3 }
  lu.assertEquals(s3:run(i3.output_names[1], { [i3.input_names[1]] = npu.tensor({ 1 }, "float32") }):totable(),
                  { 3.5 })
  lu.assertStrContains(S.fails(npu.load_model, dir, { signature = "regress_x_to_y" }),
                       "DT_STRING is not supported")
  lu.assertStrContains(S.fails(npu.load_model, dir, { signature = "__saved_model_init_op" }),
                       "is TensorFlow 2's initialisation op")
end
