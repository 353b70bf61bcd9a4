-- summary_spec.lua — npu.summary (lua/npu/summary.lua, ops/op_*_summary.c, io/events.c,
-- docs/summaries.md): the summary ops' Summary protos, the event files FileWriter writes and
-- read_events reads back, summaries inside iterations_per_loop loops, write errors (a full
-- disk, a removed logdir), damaged files (a CRC mismatch, a truncated last record).
-- Every file and proto is also decoded by the independent decoder below, written from the
-- formats' definitions (TFRecord framing with masked CRC-32C; event.proto, summary.proto; PNG
-- chunks with CRC-32 and a zlib stream of stored blocks), sharing no code with the library.
local lu = require("luaunit")
local npu = require("npu")

local support = dofile(SPEC_DIR .. "/support.lua")
local tmpdir, rm, read, write, ls = support.tmpdir, support.rm_rf, support.read, support.write, support.ls
local fails = support.fails

-- ---- the independent decoder ------------------------------------------------------------

local function crc_table(poly)
  local t = {}
  for i = 0, 255 do
    local c = i
    for _ = 1, 8 do c = (c & 1) ~= 0 and ((c >> 1) ~ poly) or (c >> 1) end
    t[i] = c
  end
  return t
end
local CRC32C, CRC32 = crc_table(0x82F63B78), crc_table(0xEDB88320)
local function crc(t, s)
  local c = 0xffffffff
  for i = 1, #s do c = t[(c ~ s:byte(i)) & 0xff] ~ (c >> 8) end
  return c ~ 0xffffffff
end
local function masked_crc32c(s)
  local c = crc(CRC32C, s)
  return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
end

-- protobuf: {number -> list of values}; varints as integers, fixed64/fixed32 as raw bytes
-- (support.lua's wire-format reader).
local function pb(bytes)
  local out = {}
  for _, f in ipairs(support.pb_fields(bytes)) do
    out[f.number] = out[f.number] or {}
    table.insert(out[f.number], f.value)
  end
  return out
end
local function f64(raw) return raw and string.unpack("<d", raw) or 0 end
local function f32(raw) return (string.unpack("<f", raw)) end
local function doubles(raw)
  local t = {}
  for i = 1, #raw, 8 do t[#t + 1] = string.unpack("<d", raw, i) end
  return t
end

-- A Summary's values as tables {tag, simple_value | histo | image | tensor, metadata}.
local function decode_summary(bytes)
  local values = {}
  for _, vb in ipairs(pb(bytes)[1] or {}) do
    local v = pb(vb)
    local d = { tag = v[1] and v[1][1] }
    if v[2] then d.simple_value = f32(v[2][1]) end
    if v[5] then
      local h = pb(v[5][1])
      d.histo = { min = f64(h[1] and h[1][1]), max = f64(h[2] and h[2][1]), num = f64(h[3] and h[3][1]),
        sum = f64(h[4] and h[4][1]), sum_squares = f64(h[5] and h[5][1]),
        bucket_limit = doubles(h[6][1]), bucket = doubles(h[7][1]) }
    end
    if v[4] then
      local im = pb(v[4][1])
      d.image = { height = im[1] and im[1][1], width = im[2] and im[2][1],
        colorspace = im[3] and im[3][1], png = im[4][1] }
    end
    if v[8] then
      local t = pb(v[8][1])
      d.tensor = { dtype = t[1][1], shape = t[2] and t[2][1], string_val = t[8] and t[8][1] }
    end
    if v[9] then
      local md = pb(v[9][1])
      d.plugin_name = pb(md[1][1])[1][1]
    end
    values[#values + 1] = d
  end
  return values
end

-- Every record of an event file, checked: {offset, event = {wall_time, step, file_version,
-- graph_def, summary = {values}}}.  Errors name the offset.
local function decode_file(bytes)
  local records, pos = {}, 1
  while pos <= #bytes do
    assert(#bytes - pos + 1 >= 12, "short header at " .. pos - 1)
    local len_bytes = bytes:sub(pos, pos + 7)
    local len = string.unpack("<I8", len_bytes)
    assert(string.unpack("<I4", bytes, pos + 8) == masked_crc32c(len_bytes), "length CRC at " .. pos - 1)
    local data = bytes:sub(pos + 12, pos + 12 + len - 1)
    assert(#data == len, "short data at " .. pos - 1)
    assert(string.unpack("<I4", bytes, pos + 12 + len) == masked_crc32c(data), "data CRC at " .. pos - 1)
    local e = pb(data)
    records[#records + 1] = { offset = pos - 1, event = {
      wall_time = f64(e[1] and e[1][1]), step = e[2] and e[2][1] or 0,
      file_version = e[3] and e[3][1], graph_def = e[4] and e[4][1],
      summary = e[5] and decode_summary(e[5][1]) } }
    pos = pos + 16 + len
  end
  return records
end

-- A PNG with stored deflate blocks: {width, height, color_type, pixels (a string)}; every
-- chunk's CRC-32 and the zlib stream's Adler-32 checked.
local function decode_png(s)
  assert(s:sub(1, 8) == "\137PNG\r\n\26\n", "PNG signature")
  local pos, ihdr, idat = 9, nil, {}
  while pos <= #s do
    local len = string.unpack(">I4", s, pos)
    local typ, data = s:sub(pos + 4, pos + 7), s:sub(pos + 8, pos + 7 + len)
    assert(string.unpack(">I4", s, pos + 8 + len) == crc(CRC32, typ .. data), typ .. " CRC")
    if typ == "IHDR" then ihdr = data elseif typ == "IDAT" then idat[#idat + 1] = data end
    pos = pos + 12 + len
  end
  local w, h, depth, color = string.unpack(">I4I4BB", ihdr)
  assert(depth == 8)
  local z = table.concat(idat)
  local cmf, flg = z:byte(1, 2)
  assert(cmf & 0x0f == 8 and (cmf * 256 + flg) % 31 == 0, "zlib header")
  local raw, p, final = {}, 3, false
  repeat
    local hdr = z:byte(p)
    assert(hdr & 6 == 0, "a stored block expected")
    final = hdr & 1 == 1
    local len, nlen = string.unpack("<I2I2", z, p + 1)
    assert(len ~ 0xffff == nlen)
    raw[#raw + 1] = z:sub(p + 5, p + 4 + len)
    p = p + 5 + len
  until final
  raw = table.concat(raw)
  local a, b = 1, 0
  for i = 1, #raw do a = (a + raw:byte(i)) % 65521; b = (b + a) % 65521 end
  assert(string.unpack(">I4", z, p) == (b << 16 | a), "Adler-32")
  local channels = ({ [0] = 1, [2] = 3, [6] = 4 })[color]
  local rows, stride = {}, w * channels + 1
  for r = 0, h - 1 do
    assert(raw:byte(r * stride + 1) == 0, "filter 0")
    rows[#rows + 1] = raw:sub(r * stride + 2, (r + 1) * stride)
  end
  return { width = w, height = h, color_type = color, pixels = table.concat(rows) }
end

-- TensorFlow's default histogram, computed here in Lua from histogram.cc's definition.
local function lua_histogram(values)
  local pos = {}
  local v = 1.0e-12
  while v < 1.0e20 do pos[#pos + 1] = v; v = v * 1.1 end
  local limits = {}
  limits[1] = -math.huge -- stands for -DBL_MAX below
  for i = #pos, 1, -1 do limits[#limits + 1] = -pos[i] end
  limits[#limits + 1] = 0.0
  for i = 1, #pos do limits[#limits + 1] = pos[i] end
  limits[#limits + 1] = math.huge
  local DBL_MAX = 1.7976931348623157e308
  limits[1], limits[#limits] = -DBL_MAX, DBL_MAX
  local counts = {}
  for i = 1, #limits do counts[i] = 0 end
  local h = { min = DBL_MAX, max = -DBL_MAX, num = 0, sum = 0, sum_squares = 0 }
  for _, x in ipairs(values) do
    local lo, hi = 1, #limits -- std::upper_bound: the first limit > x (the last is DBL_MAX)
    while lo < hi do
      local mid = (lo + hi) // 2
      if limits[mid] <= x then lo = mid + 1 else hi = mid end
    end
    local b = lo
    counts[b] = counts[b] + 1
    h.min, h.max = math.min(h.min, x), math.max(h.max, x)
    h.num, h.sum, h.sum_squares = h.num + 1, h.sum + x, h.sum_squares + x * x
  end
  h.bucket_limit, h.bucket = {}, {}
  local i = 1
  while i <= #limits do
    local last, count = limits[i], counts[i]
    i = i + 1
    if count <= 0 then
      while i <= #limits and counts[i] <= 0 do last, count = limits[i], counts[i]; i = i + 1 end
    end
    h.bucket_limit[#h.bucket_limit + 1], h.bucket[#h.bucket + 1] = last, count
  end
  return h, #limits
end

local function bytes(t) return npu.summary.bytes(t) end

-- ---- the ops ----------------------------------------------------------------------------

TestSummaryOps = {}

function TestSummaryOps:test_scalar_is_a_summary_with_one_simple_value()
  local g = npu.Graph()
  local x = g:placeholder("float32", {}, "x")
  local s = npu.summary.scalar("loss", x)
  lu.assertEquals(s:dtype(), "uint8")
  lu.assertEquals(s:shape(), { -1 })
  local sess <close> = npu.Session { graph = g }
  local v = decode_summary(bytes(sess:run(s, { [x] = npu.tensor(2.5) })))
  lu.assertEquals(v, { { tag = "loss", simple_value = 2.5 } })
  -- an int64 input, a second summary of the same name gets the next node name and tag
  local s2 = npu.summary.scalar("loss", g:const(npu.tensor(7, "int64")))
  lu.assertEquals(decode_summary(bytes(sess:run(s2)))[1], { tag = "loss_1", simple_value = 7 })
  -- TensorFlow's tag cleaning and families
  local s3 = npu.summary.scalar("a b:c", x, nil, "fam")
  lu.assertEquals(decode_summary(bytes(sess:run(s3, { [x] = npu.tensor(1) })))[1].tag, "fam/a_b_c")
end

function TestSummaryOps:test_histogram_matches_tensorflows_buckets_computed_in_lua()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1 }, "x")
  local s = npu.summary.histogram("weights", x)
  local sess <close> = npu.Session { graph = g }
  local cases = {
    { 0.5, -0.25, 3, 3, 1e-13, 0, -7.5, 1e6, 0.5 },
    {},
    { 0 },
  }
  local r = npu.random.normal({ 1000 }, { seed = 4 }):totable()
  cases[#cases + 1] = r
  for _, values in ipairs(cases) do
    local t = #values > 0 and npu.tensor(values, "float32") or npu.zeros({ 0 })
    local got = decode_summary(bytes(sess:run(s, { [x] = t })))[1]
    local f32 = t:totable() -- the values as the device had them (float32)
    local want = lua_histogram(#values > 0 and f32 or {})
    lu.assertEquals(got.tag, "weights")
    for _, k in ipairs({ "min", "max", "num", "sum", "sum_squares" }) do
      if want.num == 0 and (k == "sum" or k == "sum_squares" or k == "num") then
        lu.assertEquals(got.histo[k], 0, k)
      else
        lu.assertAlmostEquals(got.histo[k], want[k], math.abs(want[k]) * 1e-12, k)
      end
    end
    lu.assertEquals(got.histo.bucket_limit, want.bucket_limit)
    lu.assertEquals(got.histo.bucket, want.bucket)
  end
  local limits = select(2, lua_histogram({}))
  lu.assertEquals(limits, 1551) -- 774 positive limits below 1e20, their negatives, 0, +-DBL_MAX
  local err = fails(sess.run, sess, s, { [x] = npu.tensor({ 1, 0 / 0 }) })
  lu.assertStrContains(tostring(err), "NPU_ERR_ARG")
  lu.assertStrContains(tostring(err), "Nan in summary histogram for: weights")
end

-- 10^5 float32 values over 40 decades (many buckets, their limits' float32 neighbours, float32
-- subnormals and extremes, zeros of both signs) against TensorFlow's rule in Lua: the same
-- buckets and counts; sum and sum_squares to float64 rounding of 10^5 terms.
function TestSummaryOps:test_histogram_of_a_hundred_thousand_values_over_many_decades()
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1 }, "x")
  local s = npu.summary.histogram("h", x)
  local sess <close> = npu.Session { graph = g }
  local r, values = support.lcg(77), {}
  local pos = {}
  local v = 1.0e-12
  while v < 1.0e20 do pos[#pos + 1] = v; v = v * 1.1 end
  for i = 1, 100000 do
    local kind, y = i % 10, nil
    if kind == 0 then -- a limit's float32 neighbourhood
      y = pos[1 + r() % #pos] * (1 + ((r() % 5) - 2) * 2.0 ^ -24)
    elseif kind == 1 then
      y = ({ 0.0, -0.0, 2.0 ^ -149, 1.17549435e-38, 3.4028234e38, 1e-45, 1e-13 })[1 + r() % 7]
    else
      y = 10.0 ^ ((r() % 4000000) / 100000 - 15) * (1 + (r() % 1000) / 1000)
    end
    if r() % 2 == 0 then y = -y end
    values[i] = y
  end
  local t = npu.tensor(values, "float32")
  local f32 = t:totable()
  local got = decode_summary(bytes(sess:run(s, { [x] = t })))[1].histo
  local want = lua_histogram(f32)
  lu.assertEquals(got.num, 100000)
  lu.assertEquals(got.min, want.min)
  lu.assertEquals(got.max, want.max)
  local abs, sq = 0, 0
  for _, y in ipairs(f32) do abs, sq = abs + math.abs(y), sq + y * y end
  lu.assertTrue(math.abs(got.sum - want.sum) <= 1e5 * 2.0 ^ -52 * abs)
  lu.assertTrue(math.abs(got.sum_squares - want.sum_squares) <= 1e5 * 2.0 ^ -52 * sq)
  lu.assertTrue(#want.bucket > 1000) -- most of the 1551 buckets are used
  lu.assertEquals(got.bucket_limit, want.bucket_limit)
  lu.assertEquals(got.bucket, want.bucket)
end

function TestSummaryOps:test_image_values_are_pngs_normalised_as_tensorflow_does()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 2, 3, 1 }, "x")
  local u = g:placeholder("uint8", { 1, 2, 2, 3 }, "u")
  local s = npu.summary.image("pic", x)
  local s1 = npu.summary.image("one", u, 1)
  local sess <close> = npu.Session { graph = g }
  local imgs = { { { { 0 }, { 1 }, { 2 } }, { { 3 }, { 4 }, { 5 } } },      -- all >= 0: 255 / 5
                 { { { -1 }, { 0 }, { 0.5 } }, { { 1 }, { 0 / 0 }, { -0.5 } } } } -- a negative
  local v = decode_summary(bytes(sess:run(s, { [x] = npu.tensor(imgs) })))
  lu.assertEquals(#v, 2)
  lu.assertEquals({ v[1].tag, v[2].tag }, { "pic/image/0", "pic/image/1" })
  local png = decode_png(v[1].image.png)
  lu.assertEquals({ v[1].image.height, v[1].image.width, v[1].image.colorspace }, { 2, 3, 1 })
  lu.assertEquals({ png.height, png.width, png.color_type }, { 2, 3, 0 })
  lu.assertEquals({ png.pixels:byte(1, -1) }, { 0, 51, 102, 153, 204, 255 })
  -- negative: 127 / max|x| and 128; the NaN pixel takes bad_color's first channel (255)
  lu.assertEquals({ decode_png(v[2].image.png).pixels:byte(1, -1) }, { 1, 128, 191, 255, 255, 64 })
  local rgb = { { { { 1, 2, 3 }, { 4, 5, 6 } }, { { 7, 8, 9 }, { 250, 251, 252 } } } }
  local one = decode_summary(bytes(sess:run(s1, { [u] = npu.tensor(rgb, "uint8") })))
  lu.assertEquals(one[1].tag, "one/image")
  local p = decode_png(one[1].image.png)
  lu.assertEquals({ p.color_type, p.width, p.height }, { 2, 2, 2 })
  lu.assertEquals({ p.pixels:byte(1, -1) }, { 1, 2, 3, 4, 5, 6, 7, 8, 9, 250, 251, 252 })
  -- a big image: several stored blocks
  local big = g:placeholder("uint8", { 1, 300, 300, 1 }, "big")
  local sb = npu.summary.image("big", big, 1)
  local pixels = {}
  for i = 1, 300 do
    local row = {}
    for j = 1, 300 do row[j] = { (i * 7 + j) % 256 } end
    pixels[i] = row
  end
  local pb_ = decode_png(decode_summary(bytes(sess:run(sb, { [big] = npu.tensor({ pixels }, "uint8") })))[1].image.png)
  lu.assertEquals(#pb_.pixels, 90000)
  lu.assertEquals(pb_.pixels:byte(301), (2 * 7 + 1) % 256)
  -- shapes and dtypes
  lu.assertStrContains(fails(npu.summary.image, "bad", g:placeholder("float32", { 1, 2, 2, 2 })), "NPU_ERR_SHAPE")
  lu.assertStrContains(fails(npu.summary.image, "bad", g:placeholder("int32", { 1, 2, 2, 1 })), "NPU_ERR_DTYPE")
end

function TestSummaryOps:test_text_carries_the_text_plugins_metadata()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local s = npu.summary.text("notes", "**bold** é")
  local sess <close> = npu.Session { graph = g }
  local v = decode_summary(bytes(sess:run(s)))[1]
  lu.assertEquals(v.tag, "notes")
  lu.assertEquals(v.plugin_name, "text")
  lu.assertEquals(v.tensor.dtype, 7) -- DT_STRING
  lu.assertEquals(v.tensor.shape, "") -- a scalar: a TensorShapeProto without dims
  lu.assertEquals(v.tensor.string_val, "**bold** é")
  lu.assertStrContains(fails(npu.summary.text, "bad", g:placeholder("float32", { 2 })), "NPU_ERR_DTYPE")
end

function TestSummaryOps:test_merge_concatenates_and_refuses_duplicate_tags()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder("float32", { 3 }, "x")
  local a = npu.summary.scalar("a", npu.reduce_sum(x))
  local h = npu.summary.histogram("h", x)
  local m = npu.summary.merge({ a, h })
  local all = npu.summary.merge_all()
  local sess <close> = npu.Session { graph = g }
  local r = sess:run({ a, h, m, all }, { [x] = npu.tensor({ 1, 2, 3 }) })
  lu.assertEquals(bytes(r[3]), bytes(r[1]) .. bytes(r[2]))
  lu.assertEquals(bytes(r[4]), bytes(r[3]))
  local tags = {}
  for i, v in ipairs(decode_summary(bytes(r[3]))) do tags[i] = v.tag end
  lu.assertEquals(tags, { "a", "h" })
  local dup = npu.summary.merge({ a, a })
  local err = fails(sess.run, sess, dup, { [x] = npu.tensor({ 1, 2, 3 }) })
  lu.assertStrContains(tostring(err), "NPU_ERR_ARG")
  lu.assertStrContains(tostring(err), "Duplicate tag a found in summary inputs")
  lu.assertNil(npu.summary.merge_all(npu.Graph()))
  lu.assertStrContains(fails(g.op, g, "scalar_summary", { x }, {}), "tag")
end

-- ---- loops --------------------------------------------------------------------------------

function TestSummaryOps:test_a_summary_in_a_loop_is_the_last_steps()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local values = {}
  for i = 1, 40 do values[i] = { i } end
  local batch = npu.data.Dataset.from_tensor_slices({ npu.tensor(values, "float32") }):batch(1)
      :repeat_():make_one_shot_iterator(g):get_next()
  local x = npu.reduce_sum(batch[1])
  local w = g:variable(npu.tensor(1.0), "w")
  local loss = w * x
  local gs = npu.train.get_or_create_global_step(g)
  local train_op = npu.train.GradientDescentOptimizer(0.0):minimize(loss, { global_step = gs })
  npu.summary.scalar("x", x)
  npu.summary.histogram("batch", batch[1])
  local merged = npu.summary.merge_all()
  local sess <close> = npu.Session { graph = g, options = { iterations_per_loop = 10 } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, train_op, 10)
  local dir = tmpdir()
  local writer = npu.summary.FileWriter(dir)
  local doubled = x * 2 -- fetched only: skipped on the iterations whose fetches are dropped
  for k = 1, 3 do
    local r = sess:run({ merged, gs, loop, doubled })
    lu.assertEquals(r[2]:item(), 10 * k) -- the step after the loop's last iteration
    lu.assertEquals(r[4]:item(), 20 * k)
    writer:add_summary(r[1], r[2])
    local v = decode_summary(bytes(r[1]))
    lu.assertEquals(v[1], { tag = "x", simple_value = 10 * k }) -- the last element fed
    lu.assertEquals({ v[2].histo.min, v[2].histo.num }, { 10 * k, 1 })
  end
  writer:close()
  local seen = {}
  for step, tag, value in npu.summary.read_events(writer:path()) do
    if tag == "x" then seen[#seen + 1] = { step, value } end
  end
  lu.assertEquals(seen, { { 10, 10 }, { 20, 20 }, { 30, 30 } })
  rm(dir)
end

-- ---- event files ----------------------------------------------------------------------------

TestEventFiles = {}

function TestEventFiles:setUp() self.dir = tmpdir() end
function TestEventFiles:tearDown() rm(self.dir) end

local function small_graph()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4 }, "x")
  local loss = npu.reduce_mean(npu.square(x))
  return g, x, npu.summary.merge({ npu.summary.scalar("loss", loss), npu.summary.histogram("xs", x) })
end

function TestEventFiles:test_written_files_decode_with_both_readers()
  local g, x, merged = small_graph()
  local sess <close> = npu.Session { graph = g }
  local logdir = self.dir .. "/run1"
  local t0 = os.time()
  local w = npu.summary.FileWriter(logdir, g, { filename_suffix = ".v2" })
  local want = {}
  for step = 1, 5 do
    local xs = { step, -step, 0.5, 2 }
    local s = sess:run(merged, { [x] = npu.tensor(xs) })
    w:add_summary(s, step * 100)
    local mean = 0
    for _, v in ipairs(xs) do mean = mean + v * v / 4 end
    want[step] = { xs = xs, loss = mean }
  end
  w:flush()
  w:close()
  local names = ls(logdir)
  lu.assertEquals(#names, 1)
  local stamp, host = names[1]:match("^events%.out%.tfevents%.(%d%d%d%d%d%d%d%d%d%d)%.(.+)%.v2$")
  lu.assertNotNil(stamp, names[1])
  lu.assertTrue(math.abs(tonumber(stamp) - t0) <= 2)
  lu.assertEquals(logdir .. "/" .. names[1], w:path())
  -- the independent decoder
  local recs = decode_file(read(w:path()))
  lu.assertEquals(#recs, 2 + 5)
  lu.assertEquals(recs[1].event.file_version, "brain.Event:2")
  lu.assertTrue(math.abs(recs[1].event.wall_time - t0) < 5)
  lu.assertEquals(recs[2].event.graph_def, npu.core.graph_serialize_graphdef(g))
  for step = 1, 5 do
    local e = recs[2 + step].event
    lu.assertEquals(e.step, step * 100)
    lu.assertTrue(e.wall_time >= recs[1].event.wall_time)
    lu.assertEquals(e.summary[1].tag, "loss")
    lu.assertAlmostEquals(e.summary[1].simple_value, want[step].loss, 1e-5)
    local h = lua_histogram(want[step].xs)
    lu.assertEquals(e.summary[2].histo.bucket, h.bucket)
    lu.assertEquals(e.summary[2].histo.bucket_limit, h.bucket_limit)
  end
  -- the project's reader, item by item
  local items = {}
  for step, tag, value, item in npu.summary.read_events(w:path()) do
    items[#items + 1] = { step = step, tag = tag, kind = item.kind, value = value, offset = item.offset }
  end
  lu.assertEquals(#items, 2 + 10)
  lu.assertEquals({ items[1].kind, items[1].value }, { "file_version", "brain.Event:2" })
  lu.assertEquals(items[2].kind, "graph")
  lu.assertEquals(items[2].value, recs[2].event.graph_def)
  for step = 1, 5 do
    local s, h = items[1 + 2 * step], items[2 + 2 * step]
    lu.assertEquals({ s.step, s.tag, s.kind, s.offset }, { step * 100, "loss", "scalar", recs[2 + step].offset })
    lu.assertAlmostEquals(s.value, want[step].loss, 1e-5)
    lu.assertEquals({ h.tag, h.kind }, { "xs", "histogram" })
    lu.assertEquals(h.value.bucket, lua_histogram(want[step].xs).bucket)
    lu.assertEquals(h.value.num, 4)
  end
end

function TestEventFiles:test_images_and_text_read_back()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local img = g:placeholder("uint8", { 1, 2, 2, 4 }, "img")
  local merged = npu.summary.merge({ npu.summary.image("im", img, 1), npu.summary.text("md", "# title") })
  local sess <close> = npu.Session { graph = g }
  local w <close> = npu.summary.FileWriter(self.dir)
  local rgba = { { { { 1, 2, 3, 4 }, { 5, 6, 7, 8 } }, { { 9, 10, 11, 12 }, { 13, 14, 15, 16 } } } }
  w:add_summary(sess:run(merged, { [img] = npu.tensor(rgba, "uint8") }), 3)
  w:close()
  local got = {}
  for step, tag, value, item in npu.summary.read_events(w:path()) do got[#got + 1] = { step, tag, value, item } end
  lu.assertEquals(#got, 3)
  lu.assertEquals(got[2][2], "im/image")
  lu.assertEquals({ got[2][3].height, got[2][3].width, got[2][3].colorspace }, { 2, 2, 4 })
  local png = decode_png(got[2][3].encoded_image_string)
  lu.assertEquals({ png.pixels:byte(1, -1) }, { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 })
  lu.assertEquals({ got[3][1], got[3][2], got[3][3], got[3][4].kind, got[3][4].plugin_name, got[3][4].dtype },
    { 3, "md", "# title", "tensor", "text", 7 })
end

function TestEventFiles:test_damaged_files()
  local g, x, merged = small_graph()
  local sess <close> = npu.Session { graph = g }
  local w = npu.summary.FileWriter(self.dir)
  for step = 1, 3 do w:add_summary(sess:run(merged, { [x] = npu.tensor({ 1, 2, 3, step }) }), step) end
  w:close()
  local good = read(w:path())
  local recs = decode_file(good)
  lu.assertEquals(#recs, 4)
  -- a flipped byte in the last record's data: a CRC mismatch naming the record's offset
  local last = recs[4].offset
  local bad = good:sub(1, last + 20) .. string.char(good:byte(last + 21) ~ 0x40) .. good:sub(last + 22)
  local path = self.dir .. "/bad"
  write(path, bad)
  local n = 0
  local err = fails(function()
    for _ in npu.summary.read_events(path) do n = n + 1 end
  end)
  lu.assertStrContains(tostring(err), "NPU_ERR_FORMAT")
  lu.assertStrContains(tostring(err), ("record at offset %d: the CRC of its data does not match"):format(last))
  lu.assertEquals(n, 1 + 2 * 2) -- what came before was read
  lu.assertFalse(pcall(decode_file, bad))
  -- a flipped length byte
  write(path, good:sub(1, last) .. string.char(good:byte(last + 1) ~ 1) .. good:sub(last + 2))
  lu.assertStrContains(fails(function() for _ in npu.summary.read_events(path) do end end),
    "the CRC of its length does not match")
  -- a truncated last record (a killed writer): skipped, and said
  for _, cut in ipairs({ 1, 5, 13, #good - last - 1 }) do
    write(path, good:sub(1, #good - cut))
    local it, reader = npu.summary.read_events(path)
    local steps = {}
    for step, tag in it, reader do if tag == "loss" then steps[#steps + 1] = step end end
    lu.assertEquals(steps, { 1, 2 }, "cut " .. cut)
    lu.assertEquals(reader:truncated(), #good - cut - last, "cut " .. cut)
  end
  local it, reader = npu.summary.read_events(w:path())
  for _ in it, reader do end
  lu.assertEquals(reader:truncated(), 0)
  lu.assertStrContains(fails(npu.summary.read_events, self.dir .. "/missing"), "NPU_ERR_IO")
end

function TestEventFiles:test_a_full_disk_is_an_error_on_flush_not_a_crash()
  local g, x, merged = small_graph()
  local sess <close> = npu.Session { graph = g }
  local w = npu.summary.FileWriter(self.dir, nil, { path = "/dev/full", max_queue = 1 })
  for step = 1, 5 do w:add_summary(sess:run(merged, { [x] = npu.tensor({ 1, 2, 3, 4 }) }), step) end
  local err = fails(w.flush, w)
  lu.assertStrContains(tostring(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), "No space left on device")
  lu.assertStrContains(tostring(err), "lost")
  -- reported once; training and writing go on
  w:add_summary(sess:run(merged, { [x] = npu.tensor({ 1, 2, 3, 4 }) }), 6)
  lu.assertStrContains(fails(w.close, w), "NPU_ERR_IO")
  w:close() -- a second close does nothing
  lu.assertStrContains(fails(w.add_summary, w, "", 1), "closed")
end

function TestEventFiles:test_a_removed_logdir_is_an_error_on_flush()
  local g, x, merged = small_graph()
  local sess <close> = npu.Session { graph = g }
  local logdir = self.dir .. "/gone"
  local w = npu.summary.FileWriter(logdir)
  w:add_summary(sess:run(merged, { [x] = npu.tensor({ 1, 2, 3, 4 }) }), 1)
  w:flush()
  rm(logdir)
  w:add_summary(sess:run(merged, { [x] = npu.tensor({ 1, 2, 3, 4 }) }), 2)
  local err = fails(w.flush, w)
  lu.assertStrContains(tostring(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), "has disappeared")
  lu.assertStrContains(fails(w.close, w), "has disappeared")
end

function TestEventFiles:test_writes_happen_on_the_writer_thread()
  -- nothing but the file version reaches the file before max_queue events or a flush
  local w = npu.summary.FileWriter(self.dir, nil, { max_queue = 100, flush_secs = 60 })
  local s = npu.summary.bytes(npu.core.bytes_tensor("")) -- an empty Summary
  for step = 1, 10 do w:add_summary(s, step) end
  local before = #read(w:path())
  w:flush()
  local after = #decode_file(read(w:path()))
  lu.assertTrue(before < 200)
  lu.assertEquals(after, 11)
  w:close()
  -- a FileWriter closed by <close> and by garbage collection
  do local w2 <close> = npu.summary.FileWriter(self.dir .. "/b"); w2:add_summary(s, 1) end
  lu.assertEquals(#decode_file(read(self.dir .. "/b/" .. ls(self.dir .. "/b")[1])), 2)
  npu.summary.FileWriter(self.dir .. "/c"):add_summary(s, 1)
  collectgarbage(); collectgarbage()
  lu.assertEquals(#decode_file(read(self.dir .. "/c/" .. ls(self.dir .. "/c")[1])), 2)
end

-- ---- the example ----------------------------------------------------------------------------

function TestEventFiles:test_train_digits_writes_summaries_given_a_logdir()
  local root = ROOT_DIR or "."
  local logdir = self.dir .. "/digits"
  local p = io.popen("cd " .. support.sh_quote(root) .. " && lua5.4 examples/train_digits.lua 2 " ..
    support.sh_quote(logdir) .. " 2>&1")
  local out = p:read("a")
  lu.assertTrue(p:close(), out)
  local path = out:match("summaries: (%S+)")
  lu.assertNotNil(path, out)
  local losses, tags, graph = {}, {}, false
  for step, tag, value, item in npu.summary.read_events(path) do
    if item.kind == "graph" then graph = #value > 1000 end
    if tag then tags[tag] = (tags[tag] or 0) + 1 end
    if tag == "loss" then losses[#losses + 1] = { step, value } end
  end
  lu.assertTrue(graph)
  lu.assertEquals(tags, { loss = 2, accuracy = 2, ["weights/hidden/kernel"] = 2,
    ["weights/logits/kernel"] = 2, ["weights/logits/bias"] = 2 })
  lu.assertEquals({ losses[1][1], losses[2][1] }, { 100, 200 })
  -- the printed loss is the loss the summary holds (the same, last, step)
  local printed = tonumber(out:match("step   200  loss ([%d.]+)"))
  lu.assertAlmostEquals(losses[2][2], printed, 1e-4)
end
