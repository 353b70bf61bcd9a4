-- spec/support.lua — helpers shared by the specs (loaded with dofile(SPEC_DIR ..
-- "/support.lua"); not a spec itself: spec/run.lua only runs *_spec.lua): a small LCG for
-- deterministic pseudo-random data, naive shape and index helpers, flat <-> nested tables,
-- the op specs' data, gradients against central differences, elementwise comparisons, error
-- checks, whole-file read/write, protobuf wire format, JSON and CSV readers, TensorFlow.js
-- model.json builders, a graph with a loop and a cond, a dataset-fed counting loop, the
-- largest difference of two tensors, temporary directories, a Lua subprocess on this checkout
-- and the allocation-failure sweep.
local function lcg(seed)
  local s = seed
  return function()
    s = (s * 1103515245 + 12345) & 0x7fffffff
    return s >> 8 -- 23 well-mixed bits
  end
end

local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

-- flat (row-major) <-> nested tables
local function nest(flat, shape)
  local pos = 0
  local function build(d)
    local t = {}
    for i = 1, shape[d] do
      if d == #shape then
        pos = pos + 1
        t[i] = flat[pos]
      else
        t[i] = build(d + 1)
      end
    end
    return t
  end
  if #shape == 0 then return flat[1] end
  return build(1)
end

local function flatten(t, out)
  out = out or {}
  if type(t) ~= "table" then
    out[#out + 1] = t
    return out
  end
  for _, v in ipairs(t) do flatten(v, out) end
  return out
end

local function strides_of(shape)
  local s, acc = {}, 1
  for i = #shape, 1, -1 do
    s[i] = acc
    acc = acc * shape[i]
  end
  return s
end

-- 0-based multi-index of 0-based linear position i
local function unravel(i, shape)
  local idx = {}
  for d = #shape, 1, -1 do
    idx[d] = i % shape[d]
    i = i // shape[d]
  end
  return idx
end

local function offset(idx, strides)
  local o = 0
  for d = 1, #idx do o = o + idx[d] * strides[d] end
  return o
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

local function as_number(v)
  if v == true then return 1 elseif v == false then return 0 end
  return v
end

local function seed_of(name, i)
  local h = 5381
  for k = 1, #name do h = (h * 33 + name:byte(k)) & 0x7fffffff end
  return h + 7919 * i
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- A file's bytes, nil when it cannot be opened (the specs' docs and logs may be absent).
local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

-- Central differences of the scalar fetch L of sess in each element of base, the flat values
-- fed to ph as make(values) (a tensor), with the other feeds of feeds:
-- numeric[k] = (L(base + h e_k) - L(base - h e_k)) / (2 h).
local function central_differences(sess, L, feeds, ph, base, make, h)
  local f, p, numeric = {}, {}, {}
  for key, t in pairs(feeds) do f[key] = t end
  for m = 1, #base do p[m] = base[m] end
  local function L_at(k, v)
    p[k] = v
    f[ph] = make(p)
    return sess:run(L, f):item()
  end
  for k = 1, #base do
    numeric[k] = (L_at(k, base[k] + h) - L_at(k, base[k] - h)) / (2 * h)
    p[k] = base[k]
  end
  return numeric
end

-- got against want (numbers or flat lists of them), element by element:
-- |got - want| <= tol * (1 + |want|), what naming the failure.  A NaN on either side fails
-- (written as `not (d <= bound)`: a `d > bound` test is false for a NaN); equal infinities pass.
local function assert_close(got, want, tol, what)
  local lu = require("luaunit")
  got = type(got) == "table" and got or { got }
  want = type(want) == "table" and want or { want }
  lu.assertEquals(#got, #want, what)
  for i = 1, #want do
    if got[i] ~= want[i] and not (math.abs(got[i] - want[i]) <= tol * (1 + math.abs(want[i]))) then
      lu.fail(("%s [%d]: got %.12g, want %.12g"):format(what, i, got[i], want[i]))
    end
  end
end

-- Data for the op specs: numel(shape) values from lcg(seed), of a kind: "grid" (the default:
-- k/32 in [-4, 4], exact in float32), "pos" (k/32 in (0, 8]), "int" (integers in [-20, 20]),
-- "nz" (integers in [-9, 9] without 0), "few" (integers in [-2, 2]: many ties), "small"
-- (k/32 in [-1, 1]), "wide" (k/4 in [-300, 300], for saturating casts), "bool" (true/false).
local function rand_data(seed, shape, kind)
  local r = lcg(seed)
  local out = {}
  for i = 1, numel(shape) do
    local u = r()
    if kind == "bool" then out[i] = u % 2 == 1
    elseif kind == "int" then out[i] = u % 41 - 20
    elseif kind == "nz" then local v = u % 19 - 9; out[i] = v == 0 and 5 or v
    elseif kind == "few" then out[i] = u % 5 - 2
    elseif kind == "pos" then out[i] = (u % 256 + 1) / 32
    elseif kind == "wide" then out[i] = (u % 2401 - 1200) / 4
    elseif kind == "small" then out[i] = (u % 65 - 32) / 32
    else out[i] = (u % 257 - 128) / 32 end
  end
  return out
end

-- Two flat lists element by element (booleans as 0 / 1): |got - want| <= atol + rtol |want|,
-- NaN where want is NaN, and exactly equal where want is an integer and got integral (integer
-- results have no rounding to forgive).  what names the failure.
local function assert_allclose(got, want, rtol, atol, what)
  local lu = require("luaunit")
  lu.assertEquals(#got, #want, what .. ": element count")
  for i = 1, #want do
    local g, w = as_number(got[i]), as_number(want[i])
    if math.type(w) == "integer" and (math.type(g) == "integer" or g == math.floor(g)) then
      if g ~= w then
        lu.fail(("%s: element %d is %s, expected %s"):format(what, i, tostring(g), tostring(w)))
      end
    elseif w ~= w then
      if g == g then lu.fail(("%s: element %d is %s, expected NaN"):format(what, i, tostring(g))) end
    elseif math.abs(g - w) > atol + rtol * math.abs(w) then
      lu.fail(("%s: element %d is %.9g, expected %.9g (rtol %g, atol %g)"):format(what, i, g, w,
        rtol, atol))
    end
  end
end

-- An op spec's forward case c: op c.op with attributes c.attrs on placeholders fed inputs (each
-- { shape =, dtype =, data = flat values }), run by the device kernels and by the reference
-- ones (use_off_line = false).  The inferred and the computed shapes and dtypes must be
-- want_shape and want_dtype, each path's values within (c.rtol, c.atol) (default 1e-6, at most
-- 1e-12 for float64) of want (assert_allclose), and the two paths as close to each other.
local function check_forward(c, inputs, want, want_shape, want_dtype)
  local npu, lu = require("npu"), require("luaunit")
  local rtol, atol = c.rtol or 1e-6, c.atol or 1e-6
  if want_dtype == "float64" then rtol, atol = math.min(rtol, 1e-12), math.min(atol, 1e-12) end
  local g = npu.Graph()
  local phs, feeds = {}, {}
  for i, inp in ipairs(inputs) do
    phs[i] = g:placeholder(inp.dtype, inp.shape, "in" .. i)
    feeds[phs[i]] = numel(inp.shape) == 0 and npu.zeros(inp.shape, inp.dtype) or
        npu.tensor(nest(inp.data, inp.shape), inp.dtype)
  end
  local y = g:op(c.op, phs, c.attrs)
  lu.assertEquals(y:shape(), want_shape, c.name .. ": inferred shape")
  lu.assertEquals(y:dtype(), want_dtype, c.name .. ": inferred dtype")
  local results = {}
  for _, path in ipairs({ "device", "reference" }) do
    local sess <close> = npu.Session { graph = g,
      options = path == "reference" and { use_off_line = false } or nil }
    local out = sess:run(y, feeds)
    lu.assertEquals(out:shape(), want_shape, c.name .. " (" .. path .. "): shape")
    lu.assertEquals(out:dtype(), want_dtype, c.name .. " (" .. path .. "): dtype")
    local v = out:totable()
    results[path] = type(v) == "table" and flatten(v) or { v }
    assert_allclose(results[path], want, rtol, atol, c.name .. " (" .. path .. ")")
  end
  -- device against reference, tighter than against the double-precision oracle
  assert_allclose(results.device, results.reference, rtol, atol, c.name .. ": device vs reference")
end

-- An op spec covers its ops: each of own_ops is in the op table and is the op of one of cases
-- (its forward cases) at least.
local function assert_ops_covered(cases, own_ops)
  local npu, lu = require("npu"), require("luaunit")
  local covered = {}
  for _, c in ipairs(cases) do covered[c.op] = true end
  local missing = {}
  for _, name in ipairs(own_ops) do
    if not npu.ops[name] then missing[#missing + 1] = name .. " (not in the op table)"
    elseif not covered[name] then missing[#missing + 1] = name end
  end
  lu.assertEquals(missing, {}, "ops without a forward case")
end

-- The analytic gradient grad of scalar L in float64 placeholder ph (fed in feeds) against
-- central differences: h = 1e-6, |analytic - numeric| <= 1e-6 * (1 + |numeric|).
local function check_gradient(sess, L, grad, ph, feeds, what)
  local npu, lu = require("npu"), require("luaunit")
  local h, tol = 1e-6, 1e-6
  local shape = feeds[ph]:shape()
  local base = flatten(feeds[ph]:totable())
  local analytic = flatten(sess:run(grad, feeds):totable())
  lu.assertEquals(#analytic, #base, what .. ": gradient size")
  local numeric = central_differences(sess, L, feeds, ph, base, function(p)
    return #shape == 0 and npu.tensor(p[1], "float64") or npu.tensor(p, "float64"):reshape(shape)
  end, h)
  assert_close(analytic, numeric, tol, what .. " (analytic against numeric)")
end

-- Protobuf wire format, for specs that write or read protobuf bytes by hand (no schema):
-- pb_varint(n); pb_field(number, wire, payload) with wire 0 (payload an integer), 2 (bytes)
-- or 5 (4 raw bytes); pb_fields(bytes) -> the message's fields in order, each
-- {number =, wire =, value =} (an integer for wire 0, the raw bytes otherwise; a truncated
-- field or a group's wire type is an error).
local function pb_varint(n)
  local b = {}
  repeat
    local byte = n & 0x7f
    n = n >> 7
    b[#b + 1] = string.char(n ~= 0 and (byte | 0x80) or byte)
  until n == 0
  return table.concat(b)
end

local function pb_field(num, wire, payload)
  if wire == 0 then return pb_varint(num << 3) .. pb_varint(payload) end
  if wire == 5 then return pb_varint(num << 3 | 5) .. payload end
  return pb_varint(num << 3 | 2) .. pb_varint(#payload) .. payload
end

local function pb_fields(bytes)
  local pos, out = 1, {}
  local function varint()
    local v, shift = 0, 0
    repeat
      local b = assert(bytes:byte(pos), "truncated varint")
      pos = pos + 1
      v = v | ((b & 0x7f) << shift)
      shift = shift + 7
    until b < 0x80
    return v
  end
  while pos <= #bytes do
    local tag = varint()
    local f = { number = tag >> 3, wire = tag & 7 }
    if f.wire == 0 then
      f.value = varint()
    elseif f.wire == 2 then
      local len = varint()
      f.value = bytes:sub(pos, pos + len - 1)
      assert(#f.value == len, "truncated field")
      pos = pos + len
    elseif f.wire == 1 or f.wire == 5 then
      local n = f.wire == 1 and 8 or 4
      f.value = bytes:sub(pos, pos + n - 1)
      pos = pos + n
    else
      error("wire type " .. f.wire)
    end
    out[#out + 1] = f
  end
  return out
end

-- A small JSON reader (objects, arrays, strings, numbers, literals; null reads as nil), for
-- the files the library writes (fusion_result.json, graph dumps).
local function json_decode(s)
  local pos = 1
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local value
  local function str()
    local out, i = {}, pos + 1
    while true do
      local ch = s:sub(i, i)
      assert(ch ~= "", "unterminated string")
      if ch == '"' then
        pos = i + 1
        return table.concat(out)
      elseif ch == "\\" then
        local e = s:sub(i + 1, i + 1)
        out[#out + 1] = ({ n = "\n", t = "\t", r = "\r", b = "\b", f = "\f" })[e] or e
        i = i + 2
      else
        out[#out + 1] = ch
        i = i + 1
      end
    end
  end
  function value()
    ws()
    local ch = s:sub(pos, pos)
    if ch == "{" or ch == "[" then
      local t, close = {}, ch == "{" and "}" or "]"
      pos = pos + 1
      ws()
      if s:sub(pos, pos) == close then
        pos = pos + 1
        return t
      end
      repeat
        if close == "}" then
          ws()
          local k = str()
          ws()
          assert(s:sub(pos, pos) == ":", "':' expected")
          pos = pos + 1
          t[k] = value()
        else
          t[#t + 1] = value()
        end
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        assert(d == "," or d == close, "',' or '" .. close .. "' expected")
      until d == close
      return t
    elseif ch == '"' then
      return str()
    end
    local lit = s:match("^[%w%.%+%-]+", pos)
    pos = pos + #lit
    if lit == "true" then return true elseif lit == "false" then return false elseif lit == "null" then return nil end
    return assert(tonumber(lit))
  end
  local v = value()
  ws()
  assert(pos > #s, "trailing text")
  return v
end

-- TensorFlow.js model.json text for import specs: tfjson.graph(nodes[, extra]) wraps node
-- texts (extra: more top-level fields, e.g. a library); placeholder(name, dims[, dtype]),
-- node(name, op, inputs[, attrs]) (attrs: the attr object's inside; default T float) and
-- const(name, dtype, dims, values) (DT_FLOAT values as floatVal, others as intVal) make them.
local TF_FLOAT, TF_INT32 = '{"type": "DT_FLOAT"}', '{"type": "DT_INT32"}'
local function tf_dims(dims)
  local d = {}
  for i, v in ipairs(dims) do d[i] = ('{"size": "%d"}'):format(v) end
  return table.concat(d, ",")
end
local tfjson = { FLOAT = TF_FLOAT, INT32 = TF_INT32 }
function tfjson.graph(nodes, extra)
  return '{"format": "graph-model", "modelTopology": {"node": [' .. table.concat(nodes, ",") .. "]}" .. (extra or "") .. "}"
end
function tfjson.placeholder(name, dims, dtype)
  return ('{"name": "%s", "op": "Placeholder", "attr": {"dtype": {"type": "%s"}, "shape": {"shape": {"dim": [%s]}}}}')
      :format(name, dtype or "DT_FLOAT", tf_dims(dims))
end
function tfjson.node(name, op, inputs, attrs)
  local q = {}
  for i, v in ipairs(inputs) do q[i] = '"' .. v .. '"' end
  return ('{"name": "%s", "op": "%s", "input": [%s], "attr": {%s}}'):format(name, op, table.concat(q, ","), attrs or '"T": ' .. TF_FLOAT)
end
function tfjson.const(name, dtype, dims, values)
  local key = dtype == "DT_FLOAT" and "floatVal" or "intVal"
  local vs = {}
  for i, v in ipairs(values) do vs[i] = dtype == "DT_FLOAT" and tostring(v) or ('"%d"'):format(v) end
  return ('{"name": "%s", "op": "Const", "attr": {"dtype": {"type": "%s"}, "value": {"tensor": {"dtype": "%s", "tensorShape": {"dim": [%s]}, "%s": [%s]}}}}')
      :format(name, dtype, dtype, tf_dims(dims), key, table.concat(vs, ","))
end

-- A while loop and a cond, for the specs that look at steps inside control flow (dump,
-- profile, explain, graph dumps, rendering): v <- v * two while i < 3 (maximum_iterations 5),
-- then neg(v) if sum(v) > 0 else v; x = {1, 2} gives {-8, -16}.  CONTROL_GRAPH is its source
-- (locals npu, g, x, y; the chunk's argument is the loop's shape_invariants), to run in a
-- subprocess or to extend; control_graph([shape_invariants]) builds it here: g, x, y.
local CONTROL_GRAPH = [==[
local shape_invariants = ...
local npu = require("npu")
local g = npu.Graph()
local _ <close> = g:as_default()
local x = g:placeholder("float32", { 2 }, "x")
local two = g:const(npu.tensor({ 2, 2 }), "two")
local r = npu.while_loop(function(i, v) return npu.less(i, 3) end,
  function(i, v) return i + 1, npu.mul(v, two, { name = "double" }) end, { 0, x },
  { maximum_iterations = 5, name = "loop", shape_invariants = shape_invariants })
local p = npu.greater(npu.reduce_sum(r[2]), 0)
local y = npu.cond(p, function() return npu.neg(r[2], { name = "negate" }) end,
  function() return r[2] end, "pick")
]==]
local function control_graph(shape_invariants)
  return assert(load(CONTROL_GRAPH .. "return g, x, y\n", "=control_graph"))(shape_invariants)
end

-- max |a - b| and max |b| over two tensors of the same number of elements.  A NaN on either
-- side counts as math.huge (math.max would drop a NaN), equal infinities 0.
local function max_diff(a, b)
  local x, y = a:reshape({ a:numel() }):totable(), b:reshape({ b:numel() }):totable()
  require("luaunit").assertEquals(#x, #y, "max_diff: element counts")
  local d, peak = 0, 0
  for i = 1, #x do
    local e = x[i] == y[i] and 0 or math.abs(x[i] - y[i])
    d = math.max(d, e == e and e or math.huge)
    peak = math.max(peak, math.abs(y[i]))
  end
  return d, peak
end

-- In graph g, total += reduce_sum(batch), the batches of 2 drawn from 0..9 repeated without
-- end: iteration i adds 1, 5, 9, 13, 17 in turn (1000 iterations add 9000), a loop whose
-- iterations are a few short steps.  The sum is named sum_name when given.  Returns the step
-- (the assign) and the variable total; run g:global_variables_initializer() first.
local function counting_loop(g, sum_name)
  local npu = require("npu")
  local xs = npu.range(0, 10, 1, "float32")
  local ds = npu.data.Dataset.from_tensor_slices(xs):batch(2, { drop_remainder = true }):repeat_()
  local b = ds:make_one_shot_iterator(g):get_next()
  local total = g:variable(npu.zeros({}), "total")
  local s = npu.reduce_sum(b, nil, sum_name and { name = sum_name } or nil)
  return npu.assign(total, total + s), total
end

-- The steps of an explained plan (session:explain) at every depth, a cond's branches and a
-- while's condition and body included, in plan order: each a copy of its explained step with
-- `depth` added (0 at the top level, 1 in a top-level loop's body, ...).  steps_by_node: the
-- same, by node name.
local function all_steps(e)
  local out = {}
  local function walk(steps, depth)
    for _, s in ipairs(steps or {}) do
      local c = {}
      for k, v in pairs(s) do c[k] = v end
      c.depth = depth
      out[#out + 1] = c
      for _, blk in ipairs(s.blocks or {}) do walk(blk.steps, depth + 1) end
    end
  end
  walk(e.steps, 0)
  return out
end

local function steps_by_node(e)
  local out = {}
  for _, s in ipairs(all_steps(e)) do out[s.node] = s end
  return out
end

-- Fusion's switch text that turns every pass off (fusion_switch_file).
local FUSION_ALL_OFF = '{"Switch":{"GraphFusion":{"ALL":"off"},"UBFusion":{"ALL":"off"}}}'

-- A session over g computing in float32 (must_keep_origin_dtype), no statistics file unless
-- opts asks, opts added; with switches, the fusion passes as that switch file text says (the
-- file is written to a temporary path and removed once the session has read it).
local function fusion_session(g, opts, switches)
  local npu = require("npu")
  -- high_precision: the fusion specs compare fused steps with the reference path's kernels bit
  -- for bit in places, expect the direct convolution, and use this session as the libm one;
  -- the default mode (high_performance: fast kernels inside fused steps, Winograd) is checked
  -- where a spec names it; opts may set it
  local o = { precision_mode = "must_keep_origin_dtype", export_compile_stat = 0,
    op_select_implmode = "high_precision" }
  for k, v in pairs(opts or {}) do o[k] = v end
  local path
  if switches then
    path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(switches)
    f:close()
    o.fusion_switch_file = path
  end
  local ok, sess = pcall(npu.Session, { graph = g, options = o })
  if path then os.remove(path) end
  if not ok then error(sess, 0) end
  return sess
end

-- The same float32 bits in tensors a and b (-0 and infinities included; a NaN matches any NaN:
-- IEEE leaves the sign and payload of a NaN result open, and compilers may swap the operands
-- of a + b); what names a failure.
local function assert_same_bits(a, b, what)
  local lu = require("luaunit")
  local x, y = a:reshape({ a:numel() }):totable(), b:reshape({ b:numel() }):totable()
  lu.assertEquals(#x, #y, what)
  for i = 1, #x do
    if string.pack("<f", x[i]) ~= string.pack("<f", y[i]) and not (x[i] ~= x[i] and y[i] ~= y[i]) then
      lu.fail(("%s: element %d differs: %s vs %s"):format(what or "", i, tostring(x[i]), tostring(y[i])))
    end
  end
end

-- A string quoted for sh; the sorted names in directory d (none when it does not exist).
local function sh_quote(str) return "'" .. str:gsub("'", "'\\''") .. "'" end

local function ls(d)
  local p = io.popen("ls -A " .. sh_quote(d) .. " 2>/dev/null")
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  table.sort(out)
  return out
end

-- The message of the error f(...) raises (a LuaUnit failure when it raises none), and the
-- error value itself (an npu.errors value: its code, class, node).
local function fails(f, ...)
  local ok, err = pcall(f, ...)
  require("luaunit").assertFalse(ok, "expected an error")
  return tostring(err), err
end

-- The allocation-failure sweep: f run with its first allocation failing, then its second, ...
-- until it runs through (npu.core._fail_after).  Each failed run must raise an npu.Error (whose
-- code is opts.code, when given) and leave the live bytes what they were before the sweep
-- (after a full garbage collection, the error or result dropped); the sweep must end within
-- opts.max attempts (default 5000) after failing at least opts.min_failed allocations (default
-- 1: there was one to fail).  opts.check, when given, is called with the successful run's result.  what
-- names the case in messages.  Returns the number of attempts.
local function sweep_allocations(what, f, opts)
  opts = opts or {}
  local lu, npu = require("luaunit"), require("npu")
  local core = npu.core
  collectgarbage()
  collectgarbage()
  local base = core.live_bytes()
  local n, ok, res = 0, false, nil
  repeat
    n = n + 1
    core._fail_after(n)
    ok, res = pcall(f)
    core._fail_after(0)
    local err = not ok and tostring(res) or "none"
    if ok then
      if opts.check then opts.check(res) end
    elseif opts.code then
      lu.assertEquals(npu.error_code(res), opts.code, what .. ": allocation " .. n .. ": " .. err)
    else
      lu.assertTrue(npu.errors.is_error(res), what .. ": allocation " .. n .. ": " .. err)
    end
    res = nil
    collectgarbage()
    collectgarbage()
    lu.assertEquals(core.live_bytes(), base,
      what .. ": bytes left after failing allocation " .. n .. " (error: " .. err .. ")")
    lu.assertTrue(ok or n < (opts.max or 5000), what .. ": still failing after " .. n .. " allocations")
  until ok
  lu.assertTrue(n - 1 >= (opts.min_failed or 1), what .. ": " .. (n - 1) .. " allocations to fail")
  return n
end

-- fn() must raise an error whose message holds code and each of parts; returns the message.
local function assert_error(fn, code, parts)
  local lu = require("luaunit")
  local msg = fails(fn)
  lu.assertStrContains(msg, code)
  for _, p in ipairs(parts or {}) do lu.assertStrContains(msg, p) end
  return msg
end

-- fn(...) must raise an npu error of code `code` (nil: any error) whose message holds each of
-- parts (a list, or nil); returns the message.
local function expect_error(code, parts, fn, ...)
  local lu, npu = require("luaunit"), require("npu")
  local ok, err = pcall(fn, ...)
  lu.assertFalse(ok, "expected " .. (code or "an error"))
  if code then lu.assertEquals(npu.error_code(err), code, tostring(err)) end
  err = tostring(err)
  for _, p in ipairs(parts or {}) do lu.assertStrContains(err, p) end
  return err
end

-- A fresh empty directory under the system's temporary directory, and a value whose __close
-- removes it, so that a test's directory goes even when an assertion fails halfway:
-- `local dir, _ <close> = S.tmpdir()`.  rm_rf removes a tree; exists says whether a path is
-- there.
local function rm_rf(path) os.execute("rm -rf " .. sh_quote(path)) end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir " .. sh_quote(d)))
  return d, setmetatable({}, { __close = function() rm_rf(d) end })
end

local function exists(path) return os.execute("test -e " .. sh_quote(path)) == true end

-- One CSV line (RFC 4180 quoting) into its fields; a CSV file with a header line as a list of
-- rows keyed by the header's names, and the header.
local function csv_fields(line)
  local out, pos = {}, 1
  while true do
    if line:sub(pos, pos) == '"' then
      local buf, i = {}, pos + 1
      while true do
        local q = assert(line:find('"', i, true), "unterminated quoted field")
        buf[#buf + 1] = line:sub(i, q - 1)
        if line:sub(q + 1, q + 1) == '"' then
          buf[#buf + 1] = '"'
          i = q + 2
        else
          pos = q + 1
          break
        end
      end
      out[#out + 1] = table.concat(buf)
    else
      local c = line:find(",", pos, true) or #line + 1
      out[#out + 1] = line:sub(pos, c - 1)
      pos = c
    end
    if line:sub(pos, pos) ~= "," then break end
    pos = pos + 1
  end
  return out
end

local function read_csv(path)
  local header, rows = nil, {}
  for line in io.lines(path) do
    local f = csv_fields(line)
    if not header then
      header = f
    else
      local r = {}
      for i, name in ipairs(header) do r[name] = f[i] end
      rows[#rows + 1] = r
    end
  end
  return rows, header
end

-- Runs a Lua script in a lua5.4 subprocess, in directory dir with env ("VAR=value ...", or
-- env's own "-u VAR") added to the environment, requiring this checkout's npu (the build that
-- NPU_MODULE_ROOT names under make sanitize), or under spec/run.lua --installed the installed
-- rock this process tests; returns its output, stderr included.
local function run_lua(dir, env, script)
  local root = ROOT_DIR or "."
  local function abs(d) return io.popen("cd " .. sh_quote(d) .. " && pwd"):read("l") end
  local lua_dir, mod = abs(root), abs(os.getenv("NPU_MODULE_ROOT") or root)
  local prelude = ("package.path=%q..package.path; package.cpath=%q..package.cpath; "):format(
    lua_dir .. "/lua/?.lua;" .. lua_dir .. "/lua/?/init.lua;", mod .. "/?.so;")
  if INSTALLED then -- (spec/run.lua left only absolute entries)
    prelude = ("package.path=%q; package.cpath=%q; "):format(package.path, package.cpath)
  end
  local p = io.popen("cd " .. sh_quote(dir) .. " && env " .. env .. " lua5.4 -e " ..
    sh_quote(prelude .. script) .. " 2>&1")
  local out = p:read("a")
  p:close()
  return out
end

-- Whether /proc/cpuinfo's flags line has every word of needs.
local function cpu_has(needs)
  local f = io.open("/proc/cpuinfo")
  if not f then return false end
  local info = f:read("a")
  f:close()
  local flags = " " .. (info:match("\nflags%s*:([^\n]*)") or info:match("^flags%s*:([^\n]*)") or "") .. " "
  for _, need in ipairs(needs) do
    if not flags:find(" " .. need .. " ", 1, true) then return false end
  end
  return true
end
-- Whether the CPU has native bfloat16 dot products: AVX512_BF16 and the AVX-512 F/BW/VL it
-- needs (what npuK_bf16dot() asks the CPU).  For a child process run with NPU_NO_AVX512BF16
-- unset (`env -u`).
local function cpu_has_bf16dot()
  return cpu_has { "avx512_bf16", "avx512f", "avx512bw", "avx512vl" }
end

-- Whether this process may use native bfloat16 dot products (the compiler's bf16dot, direct_bf16
-- and the convolution gradients' bf16dot): the CPU has them and NPU_NO_AVX512BF16 is unset or 0,
-- as npuK_bf16dot() decides.  The one copy the bf16 specs share.
local function bf16dot_here()
  local off = os.getenv("NPU_NO_AVX512BF16")
  if off and off ~= "" and off ~= "0" then return false end
  return cpu_has_bf16dot()
end

-- Whether this process runs float32 GEMMs on our AVX-512F tiles (the compiler's f32tile,
-- kernels/gemm_f32.c): the CPU has AVX-512F and NPU_NO_AVX512 is unset or 0, as npuK_avx512f()
-- decides.
local function f32tile_here()
  local off = os.getenv("NPU_NO_AVX512")
  if off and off ~= "" and off ~= "0" then return false end
  return cpu_has { "avx512f" }
end

-- Tunes fetch y of graph g once (aoe_mode 2 under allow_mix_precision_bf16, its records in
-- dir/sub) and returns what the AOE specs of prepared operands look at: the record of node
-- `node`, the plan's step of op `op` (explained before the run), the run's result, and for the
-- record's candidates of algorithm `algo` whether every one was timed with the constant operand
-- prepared once (true), none or some were not (false), or there were none (nil), with a
-- listing of all candidates for messages.
local function aoe_tune_bf16(dir, sub, g, y, feeds, node, op, algo)
  local npu, lu = require("npu"), require("luaunit")
  local wd = dir .. "/" .. sub
  os.execute("mkdir -p " .. sh_quote(wd))
  local sess = npu.Session { graph = g, options = { export_compile_stat = 0, aoe_mode = "2",
    work_path = wd, op_compiler_cache_mode = "disable",
    precision_mode = "allow_mix_precision_bf16" } }
  local e = sess:explain(y, feeds)
  local got = sess:run(y, feeds)
  sess:close()
  local rec
  for l in io.lines(wd .. "/npu_aoe_tuning.jsonl") do
    local r = json_decode(l)
    if r.node == node then rec = r end
  end
  lu.assertNotNil(rec, "a record for " .. node)
  local prepared, seen = nil, {}
  for _, c in ipairs(rec.candidates) do
    if c.algo == algo then prepared = (prepared ~= false) and c.prepared == true end
    seen[#seen + 1] = ("%s/%d %.1f%s"):format(c.algo, c.threads, c.median_us, c.prepared and " prepared" or "")
  end
  local step
  for _, st in ipairs(e.steps) do if st.op == op then step = st end end
  lu.assertNotNil(step, "the " .. op .. " step")
  lu.assertEquals(step.algo, rec.algo, "the record applied")
  return rec, step, got, prepared, table.concat(seen, ", ")
end

-- The AOE spec of an operand a plan prepares once (a GEMM's B, a convolution's filter):
-- tune(dir, constant) builds the graph with that operand constant, or fed, and returns
-- aoe_tune_bf16's values.  The candidates of algorithm algo must be timed as the plan runs them:
-- with the constant operand prepared once (the step says `prepared`, as the record does),
-- a fed one packed per call (which is faster is a benchmark's question, not a spec's); where
-- both records chose algo, prepared once or per call gives the same bits.
local function aoe_check_prepared(tune, algo, prepared)
  local npu, lu = require("npu"), require("luaunit")
  local dir, _ <close> = tmpdir()
  local _, sc, yc, pc, seen_c = tune(dir, true)
  local _, sf, yf, pf, seen_f = tune(dir, false)
  lu.assertEquals(sc.tuned, "timed")
  lu.assertNotNil(pc, algo .. " timed (constant): " .. seen_c)
  lu.assertNotNil(pf, algo .. " timed (fed): " .. seen_f)
  lu.assertTrue(pc, "the constant operand's " .. algo .. " candidates timed prepared: " .. seen_c)
  lu.assertFalse(pf, "a fed operand is never prepared: " .. seen_f)
  lu.assertEquals(sc.prepared, sc.algo == algo and prepared or nil, seen_c)
  if sc.algo == algo and sf.algo == algo then
    lu.assertTrue(npu.allclose(yc, yf, 0, 0), "prepared once or per call: the same bits")
  end
end

-- y of graph g run once by a new session with options (export_compile_stat 0 added), then
-- closed; each step of op must say `prepared = want` (the operand a plan prepares once).  The
-- body of the allocation sweeps of prepared operands; returns the run's result.
local function run_prepared(g, y, feeds, options, op, want)
  local npu, lu = require("npu"), require("luaunit")
  options.export_compile_stat = 0
  local sess = npu.Session { graph = g, options = options }
  local steps = sess:explain(y, feeds).steps
  local got = sess:run(y, feeds)
  sess:close()
  local n = 0
  for _, s in ipairs(steps) do
    if s.op == op then
      lu.assertEquals(s.prepared, want)
      n = n + 1
    end
  end
  lu.assertTrue(n > 0, "a " .. op .. " step")
  return got
end

-- The start of the GEMM specs' case sources (gemm_f32_spec, bf16_gemm_spec), which run in this
-- process and in a child with another CPU switch: npu, flat (a table's values in order) and
-- algos (the algorithm of each GEMM step of a fetch, "none" for AUTO).
local GEMM_CASES_PRELUDE = [==[
local npu = require("npu")
local function flat(t, out)
  out = out or {}
  if type(t) ~= "table" then out[#out + 1] = t return out end
  for _, v in ipairs(t) do flat(v, out) end
  return out
end
local function algos(sess, fetch, feeds)
  local list = {}
  for _, s in ipairs(sess:explain(fetch, feeds).steps) do
    if s.op == "matmul" or s.op == "fused_matmul" or s.op == "fused_apply_gradient_descent" then
      list[#list + 1] = s.algo or "none"
    end
  end
  return list
end
]==]

-- Float64 sums of op(A) op(B) for one case of GEMM_CASES_PRELUDE (A, B flat row-major lists,
-- c.ta / c.tb the transposes), row-major, and each output's sum|a b| (the bounds' magnitude).
local function gemm_float64(c)
  local exact, mag = {}, {}
  for r = 0, c.m - 1 do
    for j = 0, c.n - 1 do
      local s, a_s = 0, 0
      for i = 0, c.k - 1 do
        local a = c.ta and c.A[i * c.m + r + 1] or c.A[r * c.k + i + 1]
        local b = c.tb and c.B[j * c.k + i + 1] or c.B[i * c.n + j + 1]
        s, a_s = s + a * b, a_s + math.abs(a * b)
      end
      exact[#exact + 1], mag[#mag + 1] = s, a_s
    end
  end
  return exact, mag
end

return {
  GEMM_CASES_PRELUDE = GEMM_CASES_PRELUDE,
  gemm_float64 = gemm_float64,
  json_decode = json_decode,
  tfjson = tfjson,
  CONTROL_GRAPH = CONTROL_GRAPH,
  control_graph = control_graph,
  counting_loop = counting_loop,
  max_diff = max_diff,
  all_steps = all_steps,
  steps_by_node = steps_by_node,
  FUSION_ALL_OFF = FUSION_ALL_OFF,
  fusion_session = fusion_session,
  bf16dot_here = bf16dot_here,
  f32tile_here = f32tile_here,
  aoe_tune_bf16 = aoe_tune_bf16,
  aoe_check_prepared = aoe_check_prepared,
  run_prepared = run_prepared,
  cpu_has_bf16dot = cpu_has_bf16dot,
  assert_same_bits = assert_same_bits,
  sh_quote = sh_quote,
  ls = ls,
  tmpdir = tmpdir,
  rm_rf = rm_rf,
  exists = exists,
  csv_fields = csv_fields,
  read_csv = read_csv,
  run_lua = run_lua,
  fails = fails,
  assert_error = assert_error,
  expect_error = expect_error,
  sweep_allocations = sweep_allocations,
  pb_varint = pb_varint,
  pb_field = pb_field,
  pb_fields = pb_fields,
  lcg = lcg,
  central_differences = central_differences,
  check_gradient = check_gradient,
  assert_close = assert_close,
  assert_allclose = assert_allclose,
  rand_data = rand_data,
  check_forward = check_forward,
  assert_ops_covered = assert_ops_covered,
  numel = numel,
  nest = nest,
  flatten = flatten,
  strides_of = strides_of,
  unravel = unravel,
  offset = offset,
  copy = copy,
  as_number = as_number,
  seed_of = seed_of,
  read = read,
  read_all = read_all,
  write = write,
}
