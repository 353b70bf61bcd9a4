-- tensor_spec.lua — npu.Tensor and the tensor constructors: conversion from Lua data for every
-- dtype, shapes, errors naming the culprit, zeros/ones/fill/range, the seeded generator
-- (checked against an independent Lua implementation of its specification), .npy files
-- (round trips, the model inputs, byte-identical re-save, malformed files), printing,
-- indexing, allclose, and garbage collection (live bytes back to zero).
local lu = require("luaunit")
local npu = require("npu")
local core = npu.core or require("npu.core")

local SPEC = SPEC_DIR or "spec"
local ROOT = ROOT_DIR or "."
local MODELS = os.getenv("NPU_MODELS_DIR") or (ROOT .. "/../shared/models")
if not io.open(MODELS .. "/iris/input_0.npy", "rb") then MODELS = "/work/shared/models" end
local _ = SPEC

local DTYPES = { "float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64",
                 "bool" }

local function tmpfile(suffix)
  local p = os.tmpname()
  os.remove(p)
  return p .. (suffix or ".npy")
end

local function write_file(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

local read_file = dofile(SPEC_DIR .. "/support.lua").read

-- An .npy file by hand: header text padded as numpy pads it, then raw bytes.
local function npy_bytes(header, data, major)
  major = major or 1
  local lenfmt = major == 1 and "<I2" or "<I4"
  local pre = 6 + 2 + (major == 1 and 2 or 4)
  local hlen = #header + 1
  local pad = 64 - (pre + hlen) % 64
  if pad == 64 then pad = 0 end
  header = header .. string.rep(" ", pad) .. "\n"
  return "\x93NUMPY" .. string.char(major, 0) .. string.pack(lenfmt, #header) .. header ..
      (data or "")
end

local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end

local function assert_error_code(code, fn, ...)
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected an error " .. code)
  lu.assertStrContains(tostring(err), code)
  return tostring(err)
end

-- ---------------------------------------------------------------------------------------
TestTensorConvert = {}

function TestTensorConvert:test_shape_inference()
  lu.assertEquals(npu.tensor(3.5):shape(), {})
  lu.assertEquals(npu.tensor({ 1, 2, 3 }):shape(), { 3 })
  lu.assertEquals(npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }):shape(), { 2, 3 })
  lu.assertEquals(npu.tensor({ { { 1 }, { 2 } } }):shape(), { 1, 2, 1 })
  lu.assertEquals(npu.tensor({}):shape(), { 0 })
  lu.assertEquals(npu.tensor({ {}, {} }):shape(), { 2, 0 })
  local t = npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
  lu.assertEquals(t:ndim(), 2)
  lu.assertEquals(t:numel(), 6)
  lu.assertEquals(#t, 2)
end

function TestTensorConvert:test_default_dtypes()
  lu.assertEquals(npu.tensor({ 1, 2 }):dtype(), "float32")     -- integers too: TF's float default
  lu.assertEquals(npu.tensor({ 1.5, 2 }):dtype(), "float32")
  lu.assertEquals(npu.tensor({ true, false }):dtype(), "bool")
  lu.assertEquals(npu.tensor({}):dtype(), "float32")
  lu.assertEquals(npu.tensor(true):dtype(), "bool")
end

function TestTensorConvert:test_every_dtype_round_trips()
  local cases = {
    float32 = { { 1.5, -2.25 }, { 0, 2 ^ 100 } },
    float64 = { { 0.1, -1e300 }, { 1 / 3, 2 ^ 60 } },
    float16 = { { 0.5, -65504 }, { 2 ^ -24, 1024 } },
    bfloat16 = { { 0.5, -3 }, { 2 ^ 100, 256 } },
    int8 = { { -128, 127 }, { 0, -1 } },
    uint8 = { { 0, 255 }, { 7, 128 } },
    int32 = { { -2147483648, 2147483647 }, { 0, 5 } },
    int64 = { { math.mininteger, math.maxinteger }, { 2 ^ 53 + 1 | 0, -7 } },
    bool = { { true, false }, { false, true } },
  }
  for _, dt in ipairs(DTYPES) do
    local data = cases[dt]
    local t = npu.tensor(data, dt)
    lu.assertEquals(t:dtype(), dt)
    lu.assertEquals(t:shape(), { 2, 2 })
    local back = t:totable()
    for i = 1, 2 do
      for j = 1, 2 do
        lu.assertEquals(back[i][j], data[i][j], dt .. " element " .. i .. "," .. j)
        if dt:match("int") then lu.assertEquals(math.type(back[i][j]), "integer") end
      end
    end
  end
  -- int64 keeps every bit (no detour through double)
  local big = npu.tensor({ 9007199254740993 }, "int64")
  lu.assertEquals(big[1], 9007199254740993)
  lu.assertEquals(big:item(), 9007199254740993)
end

function TestTensorConvert:test_rounding_into_narrow_floats()
  lu.assertEquals(npu.tensor({ 0.1 }):totable()[1], f32(0.1))
  lu.assertEquals(npu.tensor({ 1 / 3 }, "float16")[1], 0.333251953125)
  lu.assertEquals(npu.tensor({ 1 / 3 }, "bfloat16")[1], 0.333984375)
  lu.assertEquals(npu.tensor({ 70000 }, "float16")[1], math.huge)
  lu.assertEquals(npu.tensor({ 16777217 }, "float32")[1], 16777216.0)
end

function TestTensorConvert:test_astype_every_pair()
  local src = npu.tensor({ 0, 1, 2, 100 }, "float64")
  for _, a in ipairs(DTYPES) do
    local ta = src:astype(a)
    lu.assertEquals(ta:dtype(), a)
    for _, b in ipairs(DTYPES) do
      local tb = ta:astype(b)
      lu.assertEquals(tb:dtype(), b)
      lu.assertEquals(tb:shape(), { 4 })
      local v = tb:totable()
      if a == "bool" or b == "bool" then
        if b == "bool" then
          lu.assertEquals(v, { false, true, true, true })
        else
          lu.assertEquals(v, { 0, 1, 1, 1 }, a .. "->" .. b)
        end
      else
        lu.assertEquals(v[3], 2, a .. "->" .. b)
        lu.assertEquals(v[4], 100, a .. "->" .. b)
      end
    end
  end
  lu.assertEquals(npu.tensor({ -1.7, 2.9 }):astype("int32"):totable(), { -1, 2 })
  lu.assertEquals(npu.tensor({ 300, -1 }):astype("uint8"):totable(), { 255, 0 })
  local t = npu.tensor({ 1 })
  lu.assertFalse(rawequal(t:astype("float32"), t))   -- a new handle, same data
  lu.assertEquals(t:astype("float32")[1], 1)
  lu.assertErrorMsgContains("unknown dtype 'float8'", t.astype, t, "float8")
  lu.assertErrorMsgContains("dtype is required", t.astype, t)
end

function TestTensorConvert:test_integer_dtypes_refuse_lossy_values()
  lu.assertErrorMsgContains("element [2] = 300 is out of range for uint8", npu.tensor, { 1, 300 },
    "uint8")
  lu.assertErrorMsgContains("element [1] = 1.5 is not an integer for int32", npu.tensor, { 1.5 },
    "int32")
  lu.assertErrorMsgContains("out of range for int8", npu.tensor, { -129 }, "int8")
  lu.assertErrorMsgContains("out of range for int32", npu.tensor, { 2 ^ 31 }, "int32")
  lu.assertEquals(npu.tensor({ 2.0, -3.0 }, "int32"):totable(), { 2, -3 })
  lu.assertEquals(npu.tensor({ true, false }, "float32"):totable(), { 1, 0 })
  lu.assertEquals(npu.tensor({ 2, 0 }, "bool"):totable(), { true, false })
end

function TestTensorConvert:test_ragged_and_bad_input()
  lu.assertErrorMsgContains("npu.tensor: ragged at [2]: expected 3 elements, got 2",
    npu.tensor, { { 1, 2, 3 }, { 4, 5 } })
  lu.assertErrorMsgContains("ragged at [2][1]: expected 2 elements, got 1",
    npu.tensor, { { { 1, 2 } }, { { 3 } } })
  lu.assertErrorMsgContains("ragged at [2]: expected a table of 3 elements, got a number",
    npu.tensor, { { 1, 2, 3 }, 4 })
  lu.assertErrorMsgContains("ragged at [2]: expected a number, got a table",
    npu.tensor, { 1, { 2 } })
  lu.assertErrorMsgContains("element [1][2] is a string, expected a number or a boolean",
    npu.tensor, { { 1, "2" } })
  lu.assertErrorMsgContains("mixes booleans and numbers", npu.tensor, { true, 1 })
  lu.assertErrorMsgContains("expected an npu.Tensor, a number, a boolean or a table, got string",
    npu.tensor, "12")
  lu.assertErrorMsgContains("unknown dtype 'floaty'", npu.tensor, { 1 }, "floaty")
  local deep = 1
  for _ = 1, 9 do deep = { deep } end
  lu.assertErrorMsgContains("nested deeper than 8 levels", npu.tensor, deep)
  local cyc = {}
  cyc[1] = cyc
  lu.assertErrorMsgContains("nested deeper", npu.tensor, cyc)
end

function TestTensorConvert:test_tensor_of_a_tensor()
  local t = npu.tensor({ 1, 2 })
  local u = npu.tensor(t)
  lu.assertFalse(rawequal(t, u))
  lu.assertEquals(u:totable(), { 1, 2 })
  lu.assertEquals(npu.tensor(t, "int64"):totable(), { 1, 2 })
  lu.assertEquals(npu.tensor(t, "int64")[1], 1)
end

-- ---------------------------------------------------------------------------------------
TestTensorConstructors = {}

function TestTensorConstructors:test_zeros_ones_fill()
  local z = npu.zeros({ 2, 3 })
  lu.assertEquals(z:dtype(), "float32")
  lu.assertEquals(z:totable(), { { 0, 0, 0 }, { 0, 0, 0 } })
  lu.assertEquals(npu.zeros(3, "int64"):totable(), { 0, 0, 0 })
  lu.assertEquals(npu.zeros({}):totable(), 0)
  lu.assertEquals(npu.ones({ 2 }, "bool"):totable(), { true, true })
  lu.assertEquals(npu.ones({ 1, 2 }, "float16"):totable(), { { 1, 1 } })
  lu.assertEquals(npu.fill({ 2, 2 }, 7, "uint8"):totable(), { { 7, 7 }, { 7, 7 } })
  lu.assertEquals(npu.fill({ 3 }, 0.5):totable(), { 0.5, 0.5, 0.5 })
  lu.assertEquals(npu.fill({ 2 }, true):dtype(), "bool")
  lu.assertEquals(npu.fill({ 0, 4 }, 1):shape(), { 0, 4 })
  local big = npu.fill({ 1000, 7 }, -2.5, "float64")
  lu.assertEquals(big:get(1000, 7), -2.5)
  lu.assertEquals(big:get(1, 1), -2.5)
  lu.assertErrorMsgContains("value 256 is out of range for uint8", npu.fill, { 2 }, 256, "uint8")
  lu.assertErrorMsgContains("shape[2] must be >= 0, got -1", npu.zeros, { 2, -1 })
  lu.assertErrorMsgContains("shape[1] must be an integer, got 1.5", npu.zeros, { 1.5 })
  lu.assertErrorMsgContains("shape must be a table of integers, got string", npu.zeros, "x")
  lu.assertErrorMsgContains("at most 8", npu.zeros, { 1, 1, 1, 1, 1, 1, 1, 1, 1 })
end

function TestTensorConstructors:test_range()
  local r = npu.range(5)
  lu.assertEquals(r:dtype(), "int32")
  lu.assertEquals(r:totable(), { 0, 1, 2, 3, 4 })
  lu.assertEquals(npu.range(2, 5):totable(), { 2, 3, 4 })
  lu.assertEquals(npu.range(5, 0, -2):totable(), { 5, 3, 1 })
  lu.assertEquals(npu.range(0, 10, 3):totable(), { 0, 3, 6, 9 })
  lu.assertEquals(npu.range(5, 2):numel(), 0)
  local f = npu.range(1, 2, 0.25)
  lu.assertEquals(f:dtype(), "float32")
  lu.assertEquals(f:totable(), { 1, 1.25, 1.5, 1.75 })
  lu.assertEquals(npu.range(0, 1, 0.1):numel(), 10)
  lu.assertEquals(npu.range(0, 3, 1, "float64"):totable(), { 0, 1, 2 })
  lu.assertEquals(npu.range(0, 3, 1, "int64"):totable(), { 0, 1, 2 })
  lu.assertEquals(npu.range(3, nil, nil, "int8"):totable(), { 0, 1, 2 })
  lu.assertErrorMsgContains("delta must not be zero", npu.range, 0, 5, 0)
  lu.assertErrorMsgContains("do not fit int8", npu.range, 0, 200, 1, "int8")
  lu.assertErrorMsgContains("dtype bool is not numeric", npu.range, 0, 2, 1, "bool")
  lu.assertErrorMsgContains("is not an integer", npu.range, 0, 2.5, 1, "int32")
end

-- ---------------------------------------------------------------------------------------
-- The generator, written from its specification in npu.h / core/random.c with Lua 5.4's
-- 64-bit wrapping integers and logical shifts.  Equal values prove "same seed, same values".
local Ref = {}

function Ref.new(seed)
  local s, x = {}, seed
  for i = 1, 4 do
    x = x + 0x9e3779b97f4a7c15
    local z = x
    z = (z ~ (z >> 30)) * 0xbf58476d1ce4e5b9
    z = (z ~ (z >> 27)) * 0x94d049bb133111eb
    s[i] = z ~ (z >> 31)
  end
  return setmetatable({ s = s }, { __index = Ref })
end

local function rotl(x, k) return (x << k) | (x >> (64 - k)) end

function Ref:next()
  local s = self.s
  local result = rotl(s[2] * 5, 7) * 9
  local t = s[2] << 17
  s[3] = s[3] ~ s[1]
  s[4] = s[4] ~ s[2]
  s[2] = s[2] ~ s[3]
  s[1] = s[1] ~ s[4]
  s[3] = s[3] ~ t
  s[4] = rotl(s[4], 45)
  return result
end

function Ref:uniform() return (self:next() >> 11) * 0x1p-53 end

function Ref.normals(seed, n, mean, stddev)
  local r, out = Ref.new(seed), {}
  while #out < n do
    local u1 = 1.0 - r:uniform()
    local u2 = r:uniform()
    local rho, theta = math.sqrt(-2.0 * math.log(u1)), 2.0 * math.pi * u2
    out[#out + 1] = mean + stddev * (rho * math.cos(theta))
    if #out < n then out[#out + 1] = mean + stddev * (rho * math.sin(theta)) end
  end
  return out
end

function Ref.uniforms(seed, n, low, high)
  local r, out = Ref.new(seed), {}
  for i = 1, n do out[i] = low + (high - low) * r:uniform() end
  return out
end

TestTensorRandom = {}

function TestTensorRandom:test_uniform_matches_the_specification_bit_for_bit()
  local t = npu.random.uniform({ 7 }, { seed = 42, dtype = "float64" })
  lu.assertEquals(t:totable(), Ref.uniforms(42, 7, 0, 1))
  local s = npu.random.uniform({ 2, 3 }, { seed = 42, minval = -2, maxval = 3 })
  local want = Ref.uniforms(42, 6, -2, 3)
  local got = s:reshape({ -1 }):totable()
  for i = 1, 6 do lu.assertEquals(got[i], f32(want[i])) end
end

function TestTensorRandom:test_normal_matches_the_specification()
  local t = npu.random.normal({ 5 }, { seed = 42, dtype = "float64" })
  local want = Ref.normals(42, 5, 0, 1)
  lu.assertEquals(t:totable(), want)   -- same libm here: equal to the last bit
  local s = npu.random.normal({ 3, 3 }, { seed = 42, mean = 1, stddev = 0.5 })
  want = Ref.normals(42, 9, 1, 0.5)
  local got = s:reshape({ -1 }):totable()
  for i = 1, 9 do lu.assertEquals(got[i], f32(want[i])) end
  -- negative and huge seeds are just 64-bit patterns
  lu.assertEquals(npu.random.normal({ 2 }, { seed = -1, dtype = "float64" }):totable(),
    Ref.normals(-1, 2, 0, 1))
  lu.assertEquals(npu.random.uniform({ 2 }, { seed = math.mininteger, dtype = "float64" })
    :totable(), Ref.uniforms(math.mininteger, 2, 0, 1))
end

function TestTensorRandom:test_same_seed_same_values_different_seed_different()
  for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16" }) do
    local a = npu.random.normal({ 4, 4 }, { seed = 7, dtype = dt }):totable()
    local b = npu.random.normal({ 4, 4 }, { seed = 7, dtype = dt }):totable()
    local c = npu.random.normal({ 4, 4 }, { seed = 8, dtype = dt }):totable()
    lu.assertEquals(a, b)
    lu.assertNotEquals(a, c)
    lu.assertEquals(npu.random.uniform({ 3 }, { seed = 7, dtype = dt }):dtype(), dt)
  end
end

function TestTensorRandom:test_statistics()
  local n = 10000
  local v = npu.random.normal({ n }, { seed = 123, mean = 2, stddev = 3 }):totable()
  local sum, sq = 0, 0
  for i = 1, n do sum = sum + v[i] end
  local mean = sum / n
  for i = 1, n do sq = sq + (v[i] - mean) ^ 2 end
  local sd = math.sqrt(sq / (n - 1))
  lu.assertTrue(math.abs(mean - 2) < 0.1, "mean " .. mean)  -- 3.3 standard errors
  lu.assertTrue(math.abs(sd - 3) < 0.08, "stddev " .. sd)
  local u = npu.random.uniform({ n }, { seed = 9, minval = -1, maxval = 1 }):totable()
  local lo, hi, us = math.huge, -math.huge, 0
  for i = 1, n do
    lo, hi, us = math.min(lo, u[i]), math.max(hi, u[i]), us + u[i]
  end
  lu.assertTrue(lo >= -1 and hi < 1)
  lu.assertTrue(math.abs(us / n) < 0.04, "uniform mean " .. us / n)
  -- an odd count still works (the last pair's second value is dropped)
  lu.assertEquals(npu.random.normal({ 3 }, { seed = 1 }):numel(), 3)
end

function TestTensorRandom:test_errors()
  lu.assertErrorMsgContains("opts.seed is required", npu.random.normal, { 2 }, { mean = 1 })
  lu.assertErrorMsgContains("expected an options table with a seed", npu.random.uniform, { 2 })
  lu.assertErrorMsgContains("unknown option 'std'", npu.random.normal, { 2 },
    { seed = 1, std = 2 })
  lu.assertErrorMsgContains("opts.seed must be an integer, got 1.5", npu.random.normal, { 2 },
    { seed = 1.5 })
  assert_error_code("NPU_ERR_DTYPE", npu.random.normal, { 2 }, { seed = 1, dtype = "int32" })
  assert_error_code("NPU_ERR_ARG", npu.random.normal, { 2 }, { seed = 1, stddev = -1 })
  assert_error_code("NPU_ERR_ARG", npu.random.uniform, { 2 }, { seed = 1, minval = 2, maxval = 1 })
  lu.assertErrorMsgContains("option mean must be a number", npu.random.normal, { 2 },
    { seed = 1, mean = "0" })
end

-- ---------------------------------------------------------------------------------------
TestTensorNpy = {}

function TestTensorNpy:test_round_trip_every_numpy_dtype()
  local data = { { 1, 0 }, { 3, 4 } }
  for _, dt in ipairs(DTYPES) do
    local path = tmpfile()
    local src = dt == "bool" and { { true, false }, { false, true } } or data
    local t = npu.tensor(src, dt)
    if dt == "bfloat16" then
      local err = assert_error_code("NPU_ERR_UNSUPPORTED", t.save, t, path)
      lu.assertStrContains(tostring(err), "bfloat16 has no NumPy dtype")
      lu.assertStrContains(tostring(err), "astype")
    else
      t:save(path)
      local u = npu.load(path)
      lu.assertEquals(u:dtype(), dt)
      lu.assertEquals(u:shape(), { 2, 2 })
      lu.assertEquals(u:totable(), t:totable())
      os.remove(path)
    end
  end
  -- scalars, empty and 1-D shapes, and float16 bit patterns kept
  for _, t in ipairs({ npu.tensor(2.5), npu.zeros({ 0, 3 }), npu.range(10),
                       npu.tensor({ 65504, -2 ^ -24, 0.1, math.huge }, "float16") }) do
    local path = tmpfile()
    t:save(path)
    local u = npu.load(path)
    lu.assertEquals(u:shape(), t:shape())
    lu.assertEquals(u:totable(), t:totable())
    os.remove(path)
  end
end

function TestTensorNpy:test_header_is_what_numpy_writes()
  local path = tmpfile()
  npu.tensor({ 1, 2, 3 }, "int32"):save(path)
  local s = read_file(path)
  os.remove(path)
  lu.assertEquals(s:sub(1, 8), "\x93NUMPY\1\0")
  local hlen = string.unpack("<I2", s, 9)
  lu.assertEquals((10 + hlen) % 64, 0)
  local header = s:sub(11, 10 + hlen)
  lu.assertStrContains(header, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }")
  lu.assertEquals(header:sub(-1), "\n")
  lu.assertEquals(#s, 10 + hlen + 12)
  path = tmpfile()
  npu.tensor(1.5, "float64"):save(path)
  lu.assertStrContains(read_file(path), "'shape': (), }")
  os.remove(path)
end

-- The model inputs were written by numpy: mulberry32(20240601) values (r >>> 8) / 2^24.
local function mulberry32(a)
  return function()
    a = (a + 0x6D2B79F5) & 0xffffffff
    local t = ((a ~ (a >> 15)) * (1 | a)) & 0xffffffff
    t = ((t + (((t ~ (t >> 7)) * (61 | t)) & 0xffffffff)) & 0xffffffff) ~ t
    return ((t ~ (t >> 14)) >> 8) / 2 ^ 24
  end
end

local function read_meta_shape(dir)
  local f = io.open(dir .. "/meta.json", "rb")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  local at = text:find('"inputs"', 1, true) or 1
  local shape = text:match('"shape"%s*:%s*%[([%d,%s]+)%]', at)
  local out = {}
  for d in shape:gmatch("%d+") do out[#out + 1] = tonumber(d) end
  return out
end

function TestTensorNpy:test_model_inputs()
  local names = { "antispoof", "blazeface", "emotion", "facemesh-detection-short", "gender",
                  "iris", "liveness", "mobileface" }
  local seen = 0
  for _, name in ipairs(names) do
    local dir = MODELS .. "/" .. name
    if io.open(dir .. "/input_0.npy", "rb") then
      seen = seen + 1
      local t = npu.load(dir .. "/input_0.npy")
      lu.assertEquals(t:dtype(), "float32")
      lu.assertEquals(t:shape(), read_meta_shape(dir), name)
      local flat = t:reshape({ -1 })
      local rnd = mulberry32(20240601)
      for i = 1, 16 do lu.assertEquals(flat[i], rnd(), name .. " element " .. i) end
      local v, sum, lo, hi = flat:totable(), 0, math.huge, -math.huge
      for i = 1, #v do sum, lo, hi = sum + v[i], math.min(lo, v[i]), math.max(hi, v[i]) end
      lu.assertTrue(lo >= 0 and hi < 1, name)
      lu.assertTrue(math.abs(sum / #v - 0.5) < 0.02, name .. " mean " .. sum / #v)
    end
  end
  lu.assertTrue(seen > 0, "no model inputs found under " .. MODELS)
end

function TestTensorNpy:test_byte_identical_resave()
  for _, name in ipairs({ "iris", "emotion" }) do
    local src = MODELS .. "/" .. name .. "/input_0.npy"
    if io.open(src, "rb") then
      local path = tmpfile()
      npu.load(src):save(path)
      lu.assertTrue(read_file(path) == read_file(src), name .. ": re-saved file differs")
      os.remove(path)
    end
  end
end

function TestTensorNpy:test_other_versions_and_byte_orders()
  local path = tmpfile()
  -- version 2.0 (4-byte header length)
  write_file(path, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
    string.pack("<ff", 1.5, -2), 2))
  lu.assertEquals(npu.load(path):totable(), { 1.5, -2 })
  -- big-endian is byte-swapped on load
  write_file(path, npy_bytes("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }",
    string.pack(">i4>i4", 7, -300)))
  lu.assertEquals(npu.load(path):totable(), { 7, -300 })
  write_file(path, npy_bytes("{'descr': '>f8', 'fortran_order': False, 'shape': (1, 1), }",
    string.pack(">d", 0.1)))
  lu.assertEquals(npu.load(path):totable(), { { 0.1 } })
  -- key order and spacing do not matter; a 1-D fortran array is C order too
  write_file(path, npy_bytes("{\"shape\": (3,), \"fortran_order\": True, \"descr\": \"|u1\"}",
    "\1\2\3"))
  lu.assertEquals(npu.load(path):totable(), { 1, 2, 3 })
  -- bool bytes are normalised; trailing bytes are ignored as numpy ignores them
  write_file(path, npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }",
    "\0\5extra"))
  lu.assertEquals(npu.load(path):totable(), { false, true })
  os.remove(path)
end

function TestTensorNpy:test_malformed_files()
  local path = tmpfile()
  local function expect(code, bytes, fragment)
    write_file(path, bytes)
    local err = assert_error_code(code, npu.load, path)
    lu.assertStrContains(tostring(err), path)
    if fragment then lu.assertStrContains(tostring(err), fragment) end
  end
  local good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"
  expect("NPU_ERR_FORMAT", "PK\3\4 this is a zip", "bad magic")
  expect("NPU_ERR_FORMAT", "", "too short")
  expect("NPU_ERR_FORMAT", "\x93NUMPY\1", "truncated")
  expect("NPU_ERR_FORMAT", "\x93NUMPY\9\0\10\0", "version 9.0")
  expect("NPU_ERR_FORMAT", npy_bytes(good, string.rep("\0", 15)),
    "truncated: <f4 [2,2] needs 16 bytes of data, the file has 15")
  expect("NPU_ERR_FORMAT", npy_bytes(good):sub(1, 40), "truncated: the header needs")
  expect("NPU_ERR_UNSUPPORTED",
    npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", string.rep("\0", 16)),
    "fortran_order=True")
  expect("NPU_ERR_UNSUPPORTED",
    npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", string.rep("\0", 16)),
    "dtype '<c8' is not supported")
  expect("NPU_ERR_UNSUPPORTED",
    npy_bytes("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2,), }"),
    "structured")
  expect("NPU_ERR_FORMAT", npy_bytes("{'descr': '<f4', 'shape': (2,), }"),
    "missing key 'fortran_order'")
  expect("NPU_ERR_FORMAT",
    npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }"),
    "non-negative integers")
  expect("NPU_ERR_FORMAT",
    npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}"),
    "unexpected key 'x'")
  expect("NPU_ERR_FORMAT", npy_bytes("['descr']"), "expected a dict")
  expect("NPU_ERR_FORMAT", npy_bytes("{'descr': 'f4', 'fortran_order': False, 'shape': (), }"),
    "byte-order")
  os.remove(path)
  local err = assert_error_code("NPU_ERR_IO", npu.load, path)
  lu.assertStrContains(tostring(err), "No such file or directory")
  err = assert_error_code("NPU_ERR_IO", npu.tensor({ 1 }).save, npu.tensor({ 1 }),
    "/nonexistent-dir/x.npy")
  lu.assertStrContains(tostring(err), "/nonexistent-dir/x.npy")
  lu.assertEquals(io.open("/nonexistent-dir/x.npy"), nil)
end

-- ---------------------------------------------------------------------------------------
TestTensorAccess = {}

function TestTensorAccess:test_tostring()
  lu.assertEquals(tostring(npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })),
    "npu.Tensor(float32, [2,3]): [[1, 2, 3], [4, 5, 6]]")
  lu.assertEquals(tostring(npu.tensor(0.5)), "npu.Tensor(float32, []): 0.5")
  lu.assertEquals(tostring(npu.tensor({ true, false })), "npu.Tensor(bool, [2]): [true, false]")
  lu.assertEquals(tostring(npu.range(10)),
    "npu.Tensor(int32, [10]): [0, 1, 2, 3, 4, 5, ...]")
  lu.assertEquals(tostring(npu.tensor({ 0 / 0, math.huge, -math.huge, 0.1 })),
    "npu.Tensor(float32, [4]): [nan, inf, -inf, 0.1]")
  lu.assertEquals(tostring(npu.zeros({ 0, 2 })), "npu.Tensor(float32, [0,2]): []")
  lu.assertEquals(tostring(npu.tensor({ math.maxinteger }, "int64")),
    "npu.Tensor(int64, [1]): [9223372036854775807]")
  local s = tostring(npu.zeros({ 8, 8, 8, 8, 8 }))
  lu.assertTrue(#s < 8000, "printing is bounded")
  lu.assertStrContains(s, "...")
  lu.assertStrContains(tostring(npu.range(12):reshape({ 2, 6 })), "[[0, 1, 2, 3, 4, 5], [6,")
end

function TestTensorAccess:test_element_reads()
  local t = npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, "int32")
  lu.assertEquals(t:get(2, 3), 6)
  lu.assertEquals(t:get(-1, -1), 6)
  lu.assertEquals(t:get(1, -3), 1)
  local row = t[2]
  lu.assertEquals(row:shape(), { 3 })
  lu.assertEquals(row:dtype(), "int32")
  lu.assertEquals(row:totable(), { 4, 5, 6 })
  lu.assertEquals(t[2][3], 6)
  lu.assertEquals(t[-1][1], 4)
  lu.assertEquals(npu.tensor({ true })[1], true)
  lu.assertEquals(npu.tensor(4):get(), 4)
  lu.assertEquals(t.no_such_method, nil)
  lu.assertErrorMsgContains("index 3 out of range for dim 1 of size 2", function() return t[3] end)
  lu.assertErrorMsgContains("index 0 out of range for dim 1 of size 2", function() return t[0] end)
  lu.assertErrorMsgContains("index 4 out of range for dim 2 of size 3", t.get, t, 1, 4)
  lu.assertErrorMsgContains("index -4 out of range for dim 2", t.get, t, 1, -4)
  lu.assertErrorMsgContains("1 indices given for a rank-2 tensor", t.get, t, 1)
  lu.assertErrorMsgContains("must be an integer", t.get, t, 1, 1.5)
  lu.assertErrorMsgContains("rank-0 tensor cannot be indexed", function() return npu.tensor(1)[1] end)
  lu.assertErrorMsgContains("rank-0 tensor has no length", function() return #npu.tensor(1) end)
  lu.assertErrorMsgContains("out of range for dim 1 of size 0",
    function() return npu.zeros({ 0 })[1] end)
end

function TestTensorAccess:test_item()
  lu.assertEquals(npu.tensor(2.5):item(), 2.5)
  lu.assertEquals(npu.tensor({ { 7 } }, "int64"):item(), 7)
  lu.assertEquals(math.type(npu.tensor({ 7 }, "uint8"):item()), "integer")
  lu.assertErrorMsgContains("the tensor has 2 elements (shape [2]); item() needs exactly one",
    function() return npu.tensor({ 1, 2 }):item() end)
  lu.assertErrorMsgContains("has 0 elements", function() return npu.zeros({ 0 }):item() end)
end

function TestTensorAccess:test_reshape()
  local t = npu.range(12)
  lu.assertEquals(t:reshape({ 3, 4 }):shape(), { 3, 4 })
  lu.assertEquals(t:reshape({ 2, -1, 3 }):shape(), { 2, 2, 3 })
  lu.assertEquals(t:reshape({ -1 }):shape(), { 12 })
  lu.assertEquals(t:reshape({ 3, 4 }):get(3, 4), 11)
  lu.assertEquals(npu.tensor({ 5 }):reshape({}):item(), 5)
  lu.assertErrorMsgContains("cannot reshape [12] into [5,-1]", t.reshape, t, { 5, -1 })
  lu.assertErrorMsgContains("only one dimension may be -1", t.reshape, t, { -1, -1 })
  assert_error_code("NPU_ERR_SHAPE", t.reshape, t, { 5, 2 })
end

function TestTensorAccess:test_allclose()
  local a = npu.tensor({ 1, 2, 3 })
  lu.assertTrue(npu.allclose(a, { 1, 2, 3 }))
  lu.assertTrue(npu.allclose(a, a))
  lu.assertTrue(npu.allclose({ 1e10 }, { 1.00001e10 }))             -- rtol
  lu.assertFalse(npu.allclose({ 1e-7 }, { 2e-7 }))                 -- atol 1e-8
  lu.assertTrue(npu.allclose({ 1e-7 }, { 2e-7 }, 0, 1e-6))
  lu.assertFalse(npu.allclose({ 1 }, { 1.1 }))
  lu.assertTrue(npu.allclose({ 1 }, { 1.1 }, 0.1))
  -- NumPy's asymmetric rule: |a - b| <= atol + rtol * |b|
  lu.assertTrue(npu.allclose({ 1.0 }, { 1.1 }, 0.0909091, 0))
  lu.assertFalse(npu.allclose({ 1.1 }, { 1.0 }, 0.0909091, 0))
  lu.assertFalse(npu.allclose({ 0 / 0 }, { 0 / 0 }))
  lu.assertTrue(npu.allclose({ 0 / 0 }, { 0 / 0 }, nil, nil, true))
  lu.assertFalse(npu.allclose({ 0 / 0 }, { 1 }, nil, nil, true))
  lu.assertTrue(npu.allclose({ math.huge }, { math.huge }))
  lu.assertFalse(npu.allclose({ math.huge }, { -math.huge }))
  lu.assertFalse(npu.allclose({ math.huge }, { 1e308 }, 1))
  lu.assertTrue(npu.allclose(npu.tensor({ 0.1 }), { 0.1 }))         -- float32 vs float64 data
  lu.assertTrue(npu.allclose(2, npu.tensor(2, "int64")))
  lu.assertTrue(npu.allclose({ true, false }, npu.tensor({ 1, 0 })))
  lu.assertErrorMsgContains("shapes [3] and [1,3] differ", npu.allclose, a, { { 1, 2, 3 } })
  lu.assertErrorMsgContains("ragged", npu.allclose, a, { 1, { 2 } })
end

-- ---------------------------------------------------------------------------------------
TestTensorMemory = {}

local function settle()
  collectgarbage()
  collectgarbage()
end

function TestTensorMemory:test_gc_stress_returns_every_byte()
  settle()
  local base = core.live_bytes()
  for i = 1, 20000 do
    local t = npu.zeros({ i % 7 + 1, 3 })
    if i % 3 == 0 then local _ = t:reshape({ -1 }) end
    if i % 5 == 0 then local _ = t:astype("float64") end
    if i % 7 == 0 then local _ = t[1] end
  end
  local keep = {}
  for i = 1, 500 do keep[i] = npu.range(i) end
  for i = 500, 1, -3 do keep[i] = nil end    -- drop in another order
  keep = nil
  settle()
  lu.assertEquals(core.live_bytes(), base)
end

function TestTensorMemory:test_close_releases_at_once()
  settle()
  local base = core.live_bytes()
  local escaped
  do
    local t <close> = npu.zeros({ 1000 })
    escaped = t
    lu.assertTrue(core.live_bytes() >= base + 4000)
  end
  lu.assertEquals(core.live_bytes(), base)        -- before any collection
  lu.assertEquals(tostring(escaped), "npu.Tensor(closed)")
  lu.assertErrorMsgContains("npu.Tensor is closed", escaped.shape, escaped)
  lu.assertErrorMsgContains("closed", npu.tensor, escaped)
  lu.assertTrue(npu.is_tensor(escaped))
  -- closing twice, and collecting a closed tensor, are harmless
  getmetatable(escaped).__close(escaped)
  escaped = nil
  settle()
  lu.assertEquals(core.live_bytes(), base)
  -- views keep their base alive after the base handle is closed
  local view
  do
    local t <close> = npu.range(6)
    view = t:reshape({ 2, 3 })
  end
  lu.assertEquals(view:get(2, 3), 5)
  view = nil
  settle()
  lu.assertEquals(core.live_bytes(), base)
end

function TestTensorMemory:test_error_paths_leak_nothing()
  settle()
  local base = core.live_bytes()
  for _ = 1, 200 do
    pcall(npu.tensor, { { 1, 2 }, { 3 } })
    pcall(npu.tensor, { 1, 300 }, "uint8")
    pcall(npu.load, "/nonexistent.npy")
    pcall(npu.random.normal, { 2 }, { seed = 1, dtype = "int8" })
    pcall(function() return npu.range(3)[9] end)
  end
  settle()
  lu.assertEquals(core.live_bytes(), base)
end

function TestTensorMemory:test_out_of_memory_is_a_clean_error()
  if not core._fail_after then return end
  settle()
  local base = core.live_bytes()
  local path = tmpfile()
  npu.range(4):save(path)
  local cases = {
    function() return npu.zeros({ 4 }) end,
    function() return npu.tensor({ { 1, 2 }, { 3, 4 } }) end,
    function() return npu.range(3):astype("float64") end,
    function() return npu.range(4):reshape({ 2, 2 }) end,
    function() return npu.random.normal({ 3 }, { seed = 1 }) end,
    function() return npu.load(path) end,
  }
  for i, f in ipairs(cases) do
    local src = (i == 3 or i == 4) and true
    if src then
      -- the source tensor is made first; fail the allocation after it
      core._fail_after(2)
    else
      core._fail_after(1)
    end
    local ok, err = pcall(f)
    core._fail_after(0)
    lu.assertFalse(ok, "case " .. i)
    lu.assertStrContains(tostring(err), "NPU_ERR_NOMEM")
  end
  os.remove(path)
  settle()
  lu.assertEquals(core.live_bytes(), base)
end

function TestTensorMemory:test_collector_knows_the_c_memory()
  -- a 4 MB tensor sits behind a tiny userdata; without telling the collector about it, 300 of
  -- them would pile up to 1.2 GB before Lua saw any reason to collect
  settle()
  local base, worst = core.live_bytes(), 0
  for _ = 1, 300 do
    local _t = npu.zeros({ 1024, 1024 })
    worst = math.max(worst, core.live_bytes() - base)
  end
  lu.assertTrue(worst < 200 * 2 ^ 20, "live bytes reached " .. worst)
  settle()
  lu.assertEquals(core.live_bytes(), base)
end

-- Shapes print and compare as values; arithmetic on tensors runs at once.
TestTensorFace = {}

function TestTensorFace:test_shape_objects()
  local t = npu.zeros({ 2, 3 })
  local s = t:shape()
  lu.assertEquals(tostring(s), "{2, 3}")
  lu.assertTrue(s == npu.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }):shape())
  lu.assertFalse(s == npu.zeros({ 3, 2 }):shape())
  lu.assertEquals(#s, 2)
  lu.assertEquals(s[2], 3)
  lu.assertEquals(tostring(npu.tensor(1):shape()), "{}")
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 4 }, "x")
  lu.assertEquals(tostring(x:shape()), "{-1, 4}")
  lu.assertNil(g:placeholder("float32", nil, "any"):shape())
end

function TestTensorFace:test_eager_arithmetic()
  local t = npu.tensor({ { 1, 2 }, { 3, 4 } })
  lu.assertEquals((t + t):totable(), { { 2, 4 }, { 6, 8 } })
  lu.assertEquals((t * 2):totable(), { { 2, 4 }, { 6, 8 } })
  lu.assertEquals((10 - t):totable(), { { 9, 8 }, { 7, 6 } })
  lu.assertEquals((t / 2):totable(), { { 0.5, 1 }, { 1.5, 2 } })
  lu.assertEquals((-t):totable(), { { -1, -2 }, { -3, -4 } })
  lu.assertEquals((t + npu.tensor({ 10, 20 })):totable(), { { 11, 22 }, { 13, 24 } }) -- broadcast
  lu.assertEquals((npu.tensor({ 7 }, "int32") + npu.tensor({ 1 }, "int32")):dtype(), "int32")
  -- errors are the graph ops' errors, at the user's line
  local ok, err = pcall(function() return t + npu.tensor({ 1, 2, 3 }) end)
  lu.assertFalse(ok)
  lu.assertEquals(err.code, "NPU_ERR_SHAPE")
  lu.assertStrContains(err.position, "tensor_spec.lua")
  -- with an Output, a node of its graph
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 2 }, "x")
  local y = t + x
  lu.assertTrue(npu.is_output(y))
  lu.assertEquals(npu.Session { g }:run(y, { [x] = t }):totable(), { { 2, 4 }, { 6, 8 } })
end
