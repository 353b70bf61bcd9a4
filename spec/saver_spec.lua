-- spec/saver_spec.lua — npu.train.Saver and safetensors files: round trips (all variables,
-- a list, a name map), the file layout Python's safetensors expects (checked byte by byte
-- here), a file written by hand exactly as Python writes it (assembled with string.pack)
-- restored, and clear errors for corrupt files, missing variables and mismatched shapes.
local lu = require("luaunit")
local npu = require("npu")
local core = npu.core
local Saver = (npu.train and npu.train.Saver) or require("npu.saver").Saver

local function tmpfile()
  local p = os.tmpname()
  return p
end

local S = dofile(SPEC_DIR .. "/support.lua")
local read, write = S.read, S.write

-- A safetensors file as Python writes it: header JSON padded with spaces to a multiple of 8.
local function st_file(json, data)
  local pad = (8 - #json % 8) % 8
  json = json .. string.rep(" ", pad)
  return string.pack("<I8", #json) .. json .. (data or "")
end

local function model()
  local g = npu.Graph()
  local w = g:variable(npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }), "w")
  local b = g:variable(npu.tensor({ 0.5, -0.25 }, "float64"), "b")
  local step = g:variable(npu.tensor(7, "int64"), "step")
  local sess = npu.Session { graph = g }
  sess:run(g:global_variables_initializer())
  return g, sess, w, b, step
end

local function zero_all(sess, vars)
  for _, v in ipairs(vars) do
    sess:run(npu.assign(v, v:graph():const(npu.zeros(v:shape(), v:dtype()))))
  end
end

TestSaver = {}

function TestSaver:test_round_trip_all_variables()
  local g, sess, w, b, step = model()
  local path = tmpfile()
  local saver = Saver(g)
  lu.assertEquals(saver:save(sess, path), path)
  zero_all(sess, { w, b, step })
  lu.assertEquals(sess:run(w):totable(), { { 0, 0, 0 }, { 0, 0, 0 } })
  saver:restore(sess, path)
  lu.assertEquals(sess:run(w):totable(), { { 1, 2, 3 }, { 4, 5, 6 } })
  lu.assertEquals(sess:run(b):totable(), { 0.5, -0.25 })
  lu.assertEquals(sess:run(step):item(), 7)
  -- restoring twice reuses the same assign ops
  local n_nodes = #g:global_variables()
  saver:restore(sess, path)
  lu.assertEquals(#g:global_variables(), n_nodes)
  -- the names are the variables' node names; the default graph form works too
  local names = core.safetensors_load(path)
  table.sort(names)
  lu.assertEquals(names, { "b", "step", "w" })
  os.remove(path)
end

function TestSaver:test_list_and_name_map()
  local g, sess, w, b = model()
  local path = tmpfile()
  Saver({ weights = w, bias = b }):save(sess, path)
  local names, tensors = core.safetensors_load(path)
  local by = {}
  for i, n in ipairs(names) do by[n] = tensors[i] end
  lu.assertEquals(by.weights:totable(), { { 1, 2, 3 }, { 4, 5, 6 } })
  lu.assertEquals(by.bias:dtype(), "float64")
  zero_all(sess, { w })
  Saver({ weights = w }):restore(sess, path) -- extra tensors in the file are fine
  lu.assertEquals(sess:run(w):totable(), { { 1, 2, 3 }, { 4, 5, 6 } })
  -- a list saver expects its own names: 'w' is not in this file
  local ok, err = pcall(Saver({ w }).restore, Saver({ w }), sess, path)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_NOT_FOUND")
  lu.assertStrContains(tostring(err), "'w'")
  os.remove(path)
end

function TestSaver:test_layout_is_safetensors()
  local g, sess = model()
  local path = tmpfile()
  Saver(g, { metadata = { format = "pt" } }):save(sess, path)
  local bytes = read(path)
  local n = string.unpack("<I8", bytes)
  lu.assertEquals(n % 8, 0)
  local header = bytes:sub(9, 8 + n)
  lu.assertStrMatches(header, "^{.*} *$")
  lu.assertStrContains(header, '"__metadata__":{"format":"pt"}')
  lu.assertStrContains(header, '"w":{"dtype":"F32","shape":[2,3],"data_offsets":[')
  lu.assertStrContains(header, '"step":{"dtype":"I64","shape":[]')
  -- w's data is where its offsets say
  local b0, b1 = header:match('"w":{[^}]*"data_offsets":%[(%d+),(%d+)%]')
  local floats = { string.unpack("<ffffff", bytes, 8 + n + tonumber(b0) + 1) }
  lu.assertEquals({ table.unpack(floats, 1, 6) }, { 1, 2, 3, 4, 5, 6 })
  lu.assertEquals(tonumber(b1) - tonumber(b0), 24)
  lu.assertEquals(#bytes, 8 + n + 24 + 16 + 8)
  local _, _, meta = core.safetensors_load(path)
  lu.assertEquals(meta, '{"format":"pt"}')
  os.remove(path)
end

function TestSaver:test_restore_file_written_by_hand()
  local g, sess, w, b, step = model()
  -- as Python's safetensors.numpy.save_file({"w": ..., "b": ..., "step": ...}) lays it out:
  -- tensors sorted, offsets from the end of the header
  local json = '{"__metadata__":{"format":"np"},'
      .. '"b":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},'
      .. '"step":{"dtype":"I64","shape":[],"data_offsets":[16,24]},'
      .. '"w":{"dtype":"F32","shape":[2,3],"data_offsets":[24,48]}}'
  local data = string.pack("<dd", 3.5, -1.125) .. string.pack("<i8", 123456789012)
      .. string.pack("<ffffff", 0.5, 1.5, 2.5, -3, -4, 1e-3)
  local path = tmpfile()
  write(path, st_file(json, data))
  lu.assertEquals(Saver(g):restore(sess, path), '{"format":"np"}')
  lu.assertEquals(sess:run(b):totable(), { 3.5, -1.125 })
  lu.assertEquals(sess:run(step):item(), 123456789012)
  local wv = sess:run(w):totable()
  lu.assertEquals(wv[1], { 0.5, 1.5, 2.5 })
  lu.assertAlmostEquals(wv[2][3], 1e-3, 1e-9)
  -- the half types come in as themselves: F16 1.0 = 0x3c00, BF16 -2.0 = 0xc000
  write(path, st_file('{"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},'
    .. '"k":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]},'
    .. '"m":{"dtype":"BOOL","shape":[2],"data_offsets":[6,8]},'
    .. '"u":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}}',
    string.pack("<I2I2I2BBB", 0x3c00, 0x4000, 0xc000, 7, 0, 255)))
  local names, tensors = core.safetensors_load(path)
  local by = {}
  for i, n in ipairs(names) do by[n] = tensors[i] end
  lu.assertEquals(by.h:dtype(), "float16")
  lu.assertEquals(by.h:totable(), { 1, 2 })
  lu.assertEquals(by.k:dtype(), "bfloat16")
  lu.assertEquals(by.k:totable(), { -2 })
  lu.assertEquals(by.m:dtype(), "bool")
  -- any nonzero byte reads as true, stored 1: saved again, the bytes are 1, 0
  local again = tmpfile()
  core.safetensors_save(again, { "m" }, { by.m })
  lu.assertEquals(read(again):sub(-2), "\1\0")
  os.remove(again)
  lu.assertEquals(by.u:totable(), { 255 })
  os.remove(path)
end

function TestSaver:test_mismatches_name_the_variable()
  local g, sess, w = model()
  local path = tmpfile()
  write(path, st_file('{"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},'
    .. '"b":{"dtype":"F64","shape":[2],"data_offsets":[24,40]},'
    .. '"step":{"dtype":"I64","shape":[],"data_offsets":[40,48]}}', string.rep("\0", 48)))
  local ok, err = pcall(Saver(g).restore, Saver(g), sess, path)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_SHAPE")
  lu.assertStrContains(tostring(err), "variable 'w' is [2,3]")
  lu.assertStrContains(tostring(err), "[3,2]")
  lu.assertEquals(sess:run(w):totable(), { { 1, 2, 3 }, { 4, 5, 6 } }) -- nothing assigned
  write(path, st_file('{"w":{"dtype":"I32","shape":[2,3],"data_offsets":[0,24]}}', string.rep("\0", 24)))
  ok, err = pcall(Saver({ w }).restore, Saver({ w }), sess, path)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_DTYPE")
  lu.assertStrContains(tostring(err), "variable 'w' is float32")
  write(path, st_file('{"b":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}}', string.rep("\0", 16)))
  ok, err = pcall(Saver(g).restore, Saver(g), sess, path)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_NOT_FOUND")
  lu.assertStrContains(tostring(err), "variable 'w' is not in")
  os.remove(path)
end

function TestSaver:test_corrupt_files()
  local g, sess = model()
  local path = tmpfile()
  local saver = Saver(g)
  local function fails(bytes, code, says)
    write(path, bytes)
    local ok, err = pcall(saver.restore, saver, sess, path)
    lu.assertFalse(ok)
    lu.assertEquals(npu.error_code(err), code, err)
    lu.assertStrContains(tostring(err), says)
    lu.assertStrContains(tostring(err), path)
  end
  fails(string.pack("<I8", 4096) .. "{}", "NPU_ERR_FORMAT", "header length 4096")
  fails("abc", "NPU_ERR_FORMAT", "too short")
  fails(st_file('{"w": {"dtype": "F32",'), "NPU_ERR_FORMAT", "not a JSON object")
  fails(st_file('{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}', string.rep("\0", 8)),
    "NPU_ERR_FORMAT", "out of range")
  fails(st_file('{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},'
    .. '"b":{"dtype":"F64","shape":[2],"data_offsets":[16,32]}}', string.rep("\0", 32)),
    "NPU_ERR_FORMAT", "overlap")
  fails(st_file('{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}', string.rep("\0", 20)),
    "NPU_ERR_FORMAT", "needs 24 bytes")
  fails(st_file('{"w":{"dtype":"F33","shape":[2,3],"data_offsets":[0,24]}}', string.rep("\0", 24)),
    "NPU_ERR_FORMAT", 'unknown dtype "F33"')
  fails(st_file('{"w":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}}', string.rep("\0", 4)),
    "NPU_ERR_UNSUPPORTED", "U16")
  local ok, err = pcall(saver.restore, saver, sess, path .. ".missing")
  lu.assertEquals(npu.error_code(err), "NPU_ERR_IO")
  os.remove(path)
end

function TestSaver:test_bad_arguments()
  local g, sess, w = model()
  local ok, err = pcall(Saver, { 1 })
  lu.assertFalse(ok)
  lu.assertStrContains(tostring(err), "not a variable")
  ok, err = pcall(Saver, { w * 2 })
  lu.assertStrContains(tostring(err), "not a variable")
  ok, err = pcall(Saver, npu.Graph())
  lu.assertStrContains(tostring(err), "no variables")
  ok, err = pcall(Saver(g).save, Saver(g), sess, "/nonexistent-dir/x.safetensors")
  lu.assertEquals(npu.error_code(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), "/nonexistent-dir/x.safetensors")
end
