-- dump_spec.lua — the data dump (enable_dump, dump_mode, dump_step, dump_data, dump_layer) and
-- overflow detection (enable_dump_debug, dump_debug_mode), csrc/exec/dump.c: the directory
-- layout {dump_path}/{time}/{deviceid}/{model_name}/{model_id}/{data_index}/ and the file
-- names of docs/debugging.md, .npy contents against values computed here, the selections,
-- stats.csv against a tensor of known values, overflow in float32 and float16, and the errors
-- (a dump_layer name that is no node, a dump_path that cannot be made).  Every file is written
-- under a temporary directory, removed at the end of each test.
local lu = require("luaunit")
local npu = require("npu")

local support = dofile(SPEC_DIR .. "/support.lua")
local tmpdir, rmdir, sh_quote = support.tmpdir, support.rm_rf, support.sh_quote
local write_file, read_csv = support.write, support.read_csv

local ALL_OFF = '{"Switch":{"GraphFusion":{"ALL":"off"},"UBFusion":{"ALL":"off"}}}'

-- Every file under dir, parsed: {time, device, model, id, index, file, path} and, for .npy
-- files, {type, name, task, us, io, i}; sorted by path.
local function dumped(dir)
  local out = {}
  local p = io.popen("cd " .. sh_quote(dir) .. " 2>/dev/null && find . -type f | sort")
  for line in p:lines() do
    local rel = line:sub(3)
    local time, dev, model, id, idx, file = rel:match("^([^/]+)/([^/]+)/([^/]+)/([^/]+)/([^/]+)/([^/]+)$")
    assert(time, "unexpected path " .. rel)
    local r = { time = time, device = dev, model = model, id = tonumber(id), index = tonumber(idx),
      file = file, path = dir .. "/" .. rel }
    local ty, name, task, us, io_, i = file:match("^([^.]+)%.([^.]+)%.(%d+)%.(%d+)%.(%a+)%.(%d+)%.npy$")
    if ty then
      r.type, r.name, r.task, r.us, r.io, r.i = ty, name, tonumber(task), tonumber(us), io_, tonumber(i)
    end
    out[#out + 1] = r
  end
  p:close()
  return out
end

-- "type.name.io.i" of each .npy record, sorted
local function keys(recs)
  local k = {}
  for _, r in ipairs(recs) do
    if r.type then k[#k + 1] = ("%s.%s.%s.%d"):format(r.type, r.name, r.io, r.i) end
  end
  table.sort(k)
  return k
end

local function find(recs, ty, name, io_, i)
  for _, r in ipairs(recs) do
    if r.type == ty and r.name == name and r.io == io_ and r.i == i then return r end
  end
  lu.fail(("no dump of %s %s %s %d"):format(ty, name, io_, i))
end

-- A session over g with the dump options opts (float32 unless asked; fusion off when
-- fusion == false).
local function session(g, opts, fusion)
  local o = { precision_mode = "must_keep_origin_dtype" }
  for k, v in pairs(opts) do o[k] = v end
  local switch
  if fusion == false then
    switch = os.tmpname()
    write_file(switch, ALL_OFF)
    o.fusion_switch_file = switch
  end
  local ok, sess = pcall(npu.Session, { graph = g, options = o })
  if switch then os.remove(switch) end
  if not ok then error(sess, 0) end
  return sess
end

-- relu(x @ w + b): x (2, 3) fed, w and b constants.
local X = { { 1, 2, 3 }, { 4, 5, 6 } }
local W = { { 1, 2 }, { 3, 4 }, { 5, 6 } }
local B = { 1, -30 }
local MM = { { 22, 28 }, { 49, 64 } }
local ADD = { { 23, -2 }, { 50, 34 } }
local RELU = { { 23, 0 }, { 50, 34 } }

local function mlp()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 3 }, "x")
  local w = g:const(npu.tensor(W, "float32"), "w")
  local b = g:const(npu.tensor(B, "float32"), "b")
  local y = npu.nn.relu(npu.matmul(x, w) + b) -- nodes MatMul, Add, Relu
  return g, x, y
end

local function load(r) return npu.load(r.path) end

TestDump = {}

function TestDump:setUp() self.dir = tmpdir() end
function TestDump:tearDown() rmdir(self.dir) end

function TestDump:test_layout_names_and_values()
  local g, x, y = mlp()
  local sess = session(g, { enable_dump = true, dump_path = self.dir, dump_mode = "all" }, false)
  lu.assertEquals(sess:run(y, { [x] = X }):totable(), RELU)
  local recs = dumped(self.dir)
  lu.assertEquals(keys(recs), {
    "add.Add.input.0", "add.Add.input.1", "add.Add.output.0",
    "matmul.MatMul.input.0", "matmul.MatMul.input.1", "matmul.MatMul.output.0",
    "placeholder.x.output.0",
    "relu.Relu.input.0", "relu.Relu.output.0" })
  for _, r in ipairs(recs) do
    lu.assertStrMatches(r.time, "%d%d%d%d%d%d%d%d%d%d%d%d%d%d") -- YYYYMMDDhhmmss
    lu.assertEquals(r.device, "0")
    lu.assertEquals(r.model, "Relu") -- the plan's fetch
    lu.assertEquals(r.id, 0)
    lu.assertEquals(r.index, 0)
  end
  -- the time directory is the session's creation time, give or take the test's own seconds
  local t = recs[1].time
  local made = os.time { year = tonumber(t:sub(1, 4)), month = tonumber(t:sub(5, 6)), day = tonumber(t:sub(7, 8)),
    hour = tonumber(t:sub(9, 10)), min = tonumber(t:sub(11, 12)), sec = tonumber(t:sub(13, 14)) }
  lu.assertTrue(math.abs(os.time() - made) <= 5)
  -- task ids are the steps' places in the plan; a step's files share one timestamp
  local mm_in, mm_out = find(recs, "matmul", "MatMul", "input", 0), find(recs, "matmul", "MatMul", "output", 0)
  lu.assertEquals(mm_in.task, 0)
  lu.assertEquals(mm_in.us, mm_out.us)
  lu.assertEquals(find(recs, "add", "Add", "output", 0).task, 1)
  lu.assertEquals(find(recs, "relu", "Relu", "output", 0).task, 2)
  lu.assertTrue(find(recs, "relu", "Relu", "input", 0).us >= mm_out.us)
  lu.assertTrue(math.abs(mm_in.us / 1e6 - os.time()) < 60) -- microseconds since the epoch
  -- the data operator takes the task of its first reader
  lu.assertEquals(find(recs, "placeholder", "x", "output", 0).task, 0)
  -- contents: the values as computed
  lu.assertEquals(load(find(recs, "placeholder", "x", "output", 0)):totable(), X)
  lu.assertEquals(load(mm_in):totable(), X)
  lu.assertEquals(load(find(recs, "matmul", "MatMul", "input", 1)):totable(), W)
  lu.assertEquals(load(mm_out):totable(), MM)
  lu.assertEquals(load(find(recs, "add", "Add", "input", 1)):totable(), B)
  lu.assertEquals(load(find(recs, "add", "Add", "output", 0)):totable(), ADD)
  lu.assertEquals(load(find(recs, "relu", "Relu", "input", 0)):totable(), ADD)
  lu.assertEquals(load(find(recs, "relu", "Relu", "output", 0)):dtype(), "float32")
  lu.assertEquals(load(find(recs, "relu", "Relu", "output", 0)):totable(), RELU)
  -- session_device_id names the device directory
  local other = session(g, { enable_dump = true, dump_path = self.dir, session_device_id = 3 }, false)
  other:run(y, { [x] = X })
  local devices = {}
  for _, r in ipairs(dumped(self.dir)) do devices[r.time .. "/" .. r.device] = true end
  local n3 = 0
  for k in pairs(devices) do n3 = n3 + (k:match("/3$") and 1 or 0) end
  lu.assertEquals(n3, 1)
end

function TestDump:test_fused_steps_are_dumped_under_the_node_they_output()
  local g, x, y = mlp()
  local sess = session(g, { enable_dump = true, dump_path = self.dir, dump_mode = "all" })
  sess:run(y, { [x] = X })
  local recs = dumped(self.dir)
  -- MatMul + Add + Relu is one step: its inputs and its output, nothing in between
  lu.assertEquals(keys(recs), { "fused_matmul.Relu.input.0", "fused_matmul.Relu.input.1",
    "fused_matmul.Relu.input.2", "fused_matmul.Relu.output.0", "placeholder.x.output.0" })
  lu.assertEquals(load(find(recs, "fused_matmul", "Relu", "output", 0)):totable(), RELU)
  lu.assertEquals(load(find(recs, "fused_matmul", "Relu", "input", 2)):totable(), B)
end

function TestDump:test_dump_mode()
  local g, x, y = mlp()
  local function run(mode)
    local dir = tmpdir()
    local sess = session(g, { enable_dump = true, dump_path = dir, dump_mode = mode }, false)
    sess:run(y, { [x] = X })
    local k = keys(dumped(dir))
    rmdir(dir)
    return k
  end
  lu.assertEquals(run("input"), { "add.Add.input.0", "add.Add.input.1", "matmul.MatMul.input.0",
    "matmul.MatMul.input.1", "placeholder.x.output.0", "relu.Relu.input.0" })
  lu.assertEquals(run("output"), { "add.Add.output.0", "matmul.MatMul.output.0", "placeholder.x.output.0",
    "relu.Relu.output.0" })
  lu.assertEquals(#run("all"), 9)
  lu.assertEquals(run(nil), run("output")) -- the default
end

-- data_index of each .npy file of operator `name`, sorted; and the values dumped per index
local function by_index(recs, name, io_)
  local idx, val = {}, {}
  for _, r in ipairs(recs) do
    if r.name == name and r.io == (io_ or "output") and r.i == 0 then
      idx[#idx + 1] = r.index
      val[r.index] = load(r):totable()
    end
  end
  table.sort(idx)
  return idx, val
end

function TestDump:test_dump_step_selects_iterations_counted_per_plan()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local v = g:variable(npu.tensor({ 10, 20 }, "float32"), "v")
  local y = npu.nn.relu(x * v) -- Mul, Relu
  local sess = session(g, { enable_dump = true, dump_path = self.dir, dump_step = "0|2-3" }, false)
  sess:run(g:global_variables_initializer()) -- a plan of its own: it does not shift the count
  for i = 0, 4 do sess:run(y, { [x] = { i, -i } }) end
  local recs = dumped(self.dir)
  local idx, val = by_index(recs, "Relu")
  lu.assertEquals(idx, { 0, 2, 3 }) -- data_index = the iteration
  lu.assertEquals(val[2], { 20, 0 })
  lu.assertEquals(val[3], { 30, 0 })
  for _, r in ipairs(recs) do
    if r.name == "Relu" then
      lu.assertEquals(r.model, "Relu")
      lu.assertEquals(r.id, 1) -- the initializer's plan is model 0
    end
  end
  -- unset: every iteration, data_index counting the dumped ones
  rmdir(self.dir)
  sess = session(g, { enable_dump = true, dump_path = self.dir }, false)
  sess:run(g:global_variables_initializer())
  for i = 1, 3 do sess:run(y, { [x] = { i, i } }) end
  idx, val = by_index(dumped(self.dir), "Relu")
  lu.assertEquals(idx, { 0, 1, 2 })
  lu.assertEquals(val[2], { 30, 60 })
  -- another fetch is another model, counting from 0 again
  local z = y + x -- Add
  sess:run(z, { [x] = { 1, 1 } })
  idx = by_index(dumped(self.dir), "Add")
  lu.assertEquals(idx, { 0 })
end

function TestDump:test_dump_step_reads_blanks_as_the_option_check_does()
  -- tabs and spaces around the numbers pass the option check; the dump reads them the same way
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local y = npu.nn.relu(x)
  local sess = session(g, { enable_dump = true, dump_path = self.dir, dump_step = "0\t|3\t-\t4 | 6" },
    false)
  for i = 0, 7 do sess:run(y, { [x] = { i, -i } }) end
  local idx, val = by_index(dumped(self.dir), "Relu")
  lu.assertEquals(idx, { 0, 3, 4, 6 })
  lu.assertEquals(val[4], { 4, 0 })
  lu.assertEquals(val[6], { 6, 0 })
end

function TestDump:test_dump_step_counts_iterations_per_loop()
  local g = npu.Graph()
  local step, total = support.counting_loop(g)
  local sess = session(g, { enable_dump = true, dump_path = self.dir, dump_step = "1|3|5",
    iterations_per_loop = 4 }, false)
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, 4)
  sess:run({ total, loop })
  sess:run({ total, loop })
  local recs = dumped(self.dir)
  -- the iterator element is a data operator: dumped as its output
  local idx, val = by_index(recs, "IteratorGetNext")
  lu.assertEquals(idx, { 1, 3, 5 }) -- iterations 4..7 are the second run's
  lu.assertEquals(val[1], { 2, 3 })
  lu.assertEquals(val[3], { 6, 7 })
  lu.assertEquals(val[5], { 0, 1 }) -- {8,9} was iteration 4, then the repeat
  local sums
  idx, sums = by_index(recs, "Sum")
  lu.assertEquals(idx, { 1, 3, 5 })
  lu.assertEquals(sums[3], 13)
end

function TestDump:test_dump_layer_selects_nodes_and_their_data_inputs()
  local g, x, y = mlp()
  local function run(layer, fusion)
    local dir = tmpdir()
    local sess = session(g, { enable_dump = true, dump_path = dir, dump_mode = "all", dump_layer = layer }, fusion)
    sess:run(y, { [x] = X })
    local recs = dumped(dir)
    for _, r in ipairs(recs) do r.value = load(r):totable() end
    rmdir(dir)
    return keys(recs), recs
  end
  -- MatMul reads the placeholder x: x is dumped too
  local k, recs = run("MatMul", false)
  lu.assertEquals(k, { "matmul.MatMul.input.0", "matmul.MatMul.input.1", "matmul.MatMul.output.0",
    "placeholder.x.output.0" })
  lu.assertEquals(find(recs, "placeholder", "x", "output", 0).value, X)
  -- Relu reads no data operator
  lu.assertEquals(run("Relu", false), { "relu.Relu.input.0", "relu.Relu.output.0" })
  lu.assertEquals(run("  Relu   Add ", false), { "add.Add.input.0", "add.Add.input.1", "add.Add.output.0",
    "relu.Relu.input.0", "relu.Relu.output.0" })
  -- naming a data operator dumps it alone
  lu.assertEquals(run("x", false), { "placeholder.x.output.0" })
  -- a fused step is selected by any node it absorbed
  k, recs = run("Add")
  lu.assertEquals(#k, 5)
  lu.assertEquals(find(recs, "fused_matmul", "Relu", "output", 0).value, RELU)
end

function TestDump:test_stats_csv()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 4 }, "x")
  local y = -x -- Neg
  local sess = session(g, { enable_dump = true, dump_path = self.dir, dump_mode = "all", dump_data = "stats" })
  local inf, nan = math.huge, 0 / 0
  sess:run(y, { [x] = { { 1, -2, 0, inf }, { -inf, nan, 3, 0 } } })
  local recs = dumped(self.dir)
  lu.assertEquals(#recs, 1) -- no .npy files: one stats.csv per iteration directory
  lu.assertEquals(recs[1].file, "stats.csv")
  local rows, header = read_csv(recs[1].path)
  lu.assertEquals(header, { "op_type", "op_name", "task_id", "timestamp_us", "io", "index", "dtype", "shape",
    "count", "min", "max", "mean", "nan", "pos_inf", "neg_inf", "zero" })
  lu.assertEquals(#rows, 3)
  local function row(name, io_)
    for _, r in ipairs(rows) do if r.op_name == name and r.io == io_ then return r end end
    lu.fail("no row " .. name .. " " .. io_)
  end
  for _, r in ipairs({ row("x", "output"), row("Neg", "input") }) do
    lu.assertEquals(r.dtype, "float32")
    lu.assertEquals(r.shape, "2x4")
    lu.assertEquals(r.index, "0")
    lu.assertEquals(r.task_id, "0")
    lu.assertEquals(tonumber(r.count), 8)
    lu.assertEquals(tonumber(r.min), -2) -- over the finite values
    lu.assertEquals(tonumber(r.max), 3)
    lu.assertAlmostEquals(tonumber(r.mean), 0.4, 1e-12) -- (1 - 2 + 0 + 3 + 0) / 5
    lu.assertEquals({ r.nan, r.pos_inf, r.neg_inf, r.zero }, { "1", "1", "1", "2" })
  end
  local out = row("Neg", "output")
  lu.assertEquals(out.op_type, "neg")
  lu.assertEquals({ tonumber(out.min), tonumber(out.max) }, { -3, 2 })
  lu.assertAlmostEquals(tonumber(out.mean), -0.4, 1e-12)
  lu.assertEquals({ out.nan, out.pos_inf, out.neg_inf, out.zero }, { "1", "1", "1", "2" })
  lu.assertEquals(out.timestamp_us, row("Neg", "input").timestamp_us)
  -- no finite value: min, max and mean are empty; integers are counted too
  local gi = npu.Graph()
  local xi = gi:placeholder("int32", { 3 }, "xi")
  local yi = npu.abs(xi)
  local dir2 = tmpdir()
  session(gi, { enable_dump = true, dump_path = dir2, dump_data = "stats" }):run(yi, { [xi] = { -5, 0, 7 } })
  rows = read_csv(dumped(dir2)[1].path)
  rmdir(dir2)
  local r = rows[2].op_name == "Abs" and rows[2] or rows[1]
  lu.assertEquals(r.dtype, "int32")
  lu.assertEquals({ r.min, r.max, r.mean, r.zero }, { "0", "7", "4", "1" })
  local e = npu.Graph()
  local xe = e:placeholder("float32", { 2 }, "xe")
  local dir3 = tmpdir()
  session(e, { enable_dump = true, dump_path = dir3, dump_data = "stats" }):run(-xe, { [xe] = { nan, inf } })
  rows = read_csv(dumped(dir3)[1].path)
  rmdir(dir3)
  lu.assertEquals({ rows[2].min, rows[2].max, rows[2].mean, rows[2].nan, rows[2].neg_inf }, { "", "", "", "1", "1" })
  -- a name holding a comma or a quote is quoted (RFC 4180: quotes doubled) and reads back whole
  local q = npu.Graph()
  local xq = q:placeholder("float32", { 1 }, 'x,"q"')
  local dir4 = tmpdir()
  session(q, { enable_dump = true, dump_path = dir4, dump_data = "stats" }):run(npu.abs(xq, { name = "a,b" }),
    { [xq] = { -1 } })
  local xs = q:placeholder("float32", { 1 }, "scope/x.1 b") -- kept as named, not sanitised
  local dir5 = tmpdir()
  session(q, { enable_dump = true, dump_path = dir5, dump_data = "stats" }):run(-xs, { [xs] = { 2 } })
  lu.assertStrContains(support.read(dumped(dir5)[1].path), "\nplaceholder,scope/x.1 b,0,")
  rmdir(dir5)
  local path = dumped(dir4)[1].path
  local text = support.read(path)
  rows = read_csv(path)
  rmdir(dir4)
  lu.assertStrContains(text, '\nplaceholder,"x,""q""",0,')
  lu.assertStrContains(text, '\nabs,"a,b",0,')
  lu.assertEquals(#rows, 2) -- dump_mode output: the placeholder's and abs's outputs
  for _, rq in ipairs(rows) do
    lu.assertEquals(rq.op_name, rq.op_type == "abs" and "a,b" or 'x,"q"')
    lu.assertEquals(rq.count, "1")
  end
end

function TestDump:test_overflow_with_finite_inputs_is_dumped()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local y = npu.exp(x) -- Exp
  local sess = session(g, { enable_dump_debug = true, dump_path = self.dir })
  sess:run(y, { [x] = { 1, 2 } })          -- iteration 0: finite
  lu.assertEquals(#dumped(self.dir), 0)
  sess:run(y, { [x] = { 1, 100 } })        -- iteration 1: exp(100) overflows float32
  sess:run(y, { [x] = { math.huge, 1 } })  -- iteration 2: Inf in, Inf out: not this op's doing
  local recs = dumped(self.dir)
  lu.assertEquals(keys(recs), { "exp.Exp.input.0", "exp.Exp.output.0" })
  local out = load(find(recs, "exp", "Exp", "output", 0)):totable()
  lu.assertEquals(out[2], math.huge)
  lu.assertAlmostEquals(out[1], math.exp(1), 1e-6)
  lu.assertEquals(load(find(recs, "exp", "Exp", "input", 0)):totable(), { 1, 100 })
  lu.assertEquals(recs[1].index, 1) -- data_index: the iteration
  lu.assertEquals(recs[1].model, "Exp")
  -- dump_step limits the iterations checked
  local dir2 = tmpdir()
  sess = session(g, { enable_dump_debug = true, dump_path = dir2, dump_step = "1" })
  sess:run(y, { [x] = { 1, 100 } })
  lu.assertEquals(#dumped(dir2), 0)
  sess:run(y, { [x] = { 1, 100 } })
  lu.assertEquals(#dumped(dir2), 2)
  rmdir(dir2)
  -- atomic_overflow: nothing to detect on the CPU device
  local dir3 = tmpdir()
  sess = session(g, { enable_dump_debug = true, dump_path = dir3, dump_debug_mode = "atomic_overflow" })
  sess:run(y, { [x] = { 1, 100 } })
  lu.assertEquals(#dumped(dir3), 0)
  rmdir(dir3)
end

function TestDump:test_float16_overflow_and_saturation()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local w = g:placeholder("float32", { 2 }, "w")
  local y = x * w -- Mul, computed in float16 under force_fp16
  local sess = session(g, { enable_dump_debug = true, dump_path = self.dir, precision_mode = "force_fp16" })
  sess:run(y, { [x] = { 1, 2 }, [w] = { 3, 4 } })
  lu.assertEquals(#dumped(self.dir), 0)
  -- 300 * 300 = 90000 > 65504: Inf in float16, from finite float16 inputs
  local r = sess:run(y, { [x] = { 300, 2 }, [w] = { 300, 4 } }):totable()
  lu.assertEquals(r[1], math.huge)
  local recs = dumped(self.dir)
  lu.assertEquals(keys(recs), { "mul.Mul.input.0", "mul.Mul.input.1", "mul.Mul.output.0" })
  local out = load(find(recs, "mul", "Mul", "output", 0))
  lu.assertEquals(out:dtype(), "float16") -- as stored
  lu.assertEquals(out:totable(), { math.huge, 8 })
  -- the file is NumPy's '<f2'
  local f = assert(io.open(find(recs, "mul", "Mul", "output", 0).path, "rb"))
  lu.assertStrContains(f:read(128), "'descr': '<f2'")
  f:close()
  lu.assertEquals(load(find(recs, "mul", "Mul", "input", 0)):totable(), { 300, 2 })
  -- 256 * 255.875 = 65504 exactly: float16 saturation counts as overflow
  rmdir(self.dir)
  sess:run(y, { [x] = { 256, 1 }, [w] = { 255.875, 1 } })
  recs = dumped(self.dir)
  lu.assertEquals(#recs, 3)
  lu.assertEquals(load(find(recs, "mul", "Mul", "output", 0)):totable(), { 65504, 1 })
  lu.assertEquals(recs[1].index, 2)
end

function TestDump:test_enable_dump_keeps_float16_as_stored()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 3 }, "x")
  local y = npu.exp(x * x) -- fused in float16
  local sess = session(g, { enable_dump = true, dump_path = self.dir, precision_mode = "force_fp16" }, false)
  sess:run(y, { [x] = { 0.5, 1, 1.5 } })
  local recs = dumped(self.dir)
  local out = load(find(recs, "exp", "Exp", "output", 0))
  lu.assertEquals(out:dtype(), "float16")
  lu.assertTrue(npu.allclose(out:astype("float32"), npu.tensor({ math.exp(0.25), math.exp(1), math.exp(2.25) }), 1e-3))
  -- the precision pass's casts are steps too, named after the node whose value they convert
  lu.assertEquals(find(recs, "cast", "x", "output", 0) ~= nil, true)
  lu.assertEquals(load(find(recs, "cast", "x", "output", 0)):dtype(), "float16")
end

function TestDump:test_bfloat16_is_written_as_float32_exactly()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2, 2 }, "x")
  local w = g:placeholder("float32", { 2, 2 }, "w")
  local y = npu.matmul(x, w) -- stored in bfloat16 under allow_mix_precision_bf16
  local sess = session(g, { enable_dump = true, dump_path = self.dir, precision_mode = "allow_mix_precision_bf16" })
  local r = sess:run(y, { [x] = { { 1, 2 }, { 3, 4 } }, [w] = { { 1.01, 0 }, { 0, 1 } } })
  local out = load(find(dumped(self.dir), "matmul", "MatMul", "output", 0))
  lu.assertEquals(out:dtype(), "float32")
  lu.assertEquals(out:totable(), { { 1.0078125, 2 }, { 3.03125, 4 } }) -- bfloat16 values
  lu.assertEquals(out:totable(), r:totable())
end

function TestDump:test_a_dump_layer_name_must_be_a_node()
  local g, x, y = mlp()
  local sess = session(g, { enable_dump = true, dump_path = self.dir, dump_layer = "MatMul Relu_" })
  local ok, err = pcall(sess.run, sess, y, { [x] = X })
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_NOT_FOUND")
  lu.assertStrContains(tostring(err), "dump_layer: the graph has no node 'Relu_' (did you mean 'Relu'?)")
  lu.assertEquals(#dumped(self.dir), 0)
  -- the graph may grow: a node added later makes the name good
  g:placeholder("float32", { 1 }, "Relu_")
  lu.assertEquals(sess:run(y, { [x] = X }):totable(), RELU)
end

function TestDump:test_a_dump_path_that_cannot_be_made_fails_the_run()
  local file = os.tmpname() -- a regular file: nothing can be made under it
  local g, x, y = mlp()
  local sess = session(g, { enable_dump = true, dump_path = file .. "/dumps" })
  local ok, err = pcall(sess.run, sess, y, { [x] = X })
  os.remove(file)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), "enable_dump: cannot create directory '" .. file .. "/dumps'")
  -- stats too
  file = os.tmpname()
  sess = session(g, { enable_dump = true, dump_path = file, dump_data = "stats" })
  ok, err = pcall(sess.run, sess, y, { [x] = X })
  os.remove(file)
  lu.assertFalse(ok)
  lu.assertEquals(npu.error_code(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), file)
end

function TestDump:test_sessions_never_share_a_time_directory()
  local g, x, y = mlp()
  local a = session(g, { enable_dump = true, dump_path = self.dir })
  local b = session(g, { enable_dump = true, dump_path = self.dir })
  a:run(y, { [x] = X })
  b:run(y, { [x] = X })
  a:run(y, { [x] = X })
  local times = {}
  for _, r in ipairs(dumped(self.dir)) do times[r.time] = (times[r.time] or 0) + 1 end
  local n, counts = 0, {}
  for t, c in pairs(times) do
    n = n + 1
    counts[#counts + 1] = c
    lu.assertStrMatches(t, "%d+_?%d*")
  end
  table.sort(counts)
  lu.assertEquals(n, 2)
  lu.assertEquals(counts, { 2, 4 }) -- b: one run, a: two (x and the fused step's output each)
end

function TestDump:test_off_by_default()
  local g, x, y = mlp()
  local sess = session(g, { dump_path = self.dir })
  sess:run(y, { [x] = X })
  lu.assertEquals(#dumped(self.dir), 0)
end

-- v <- v * two while i < 3 (maximum_iterations 5), then neg(v) if sum(v) > 0 else v.
local control_graph = support.control_graph

-- Steps in a loop body dump once per iteration, the iteration in the file name; a taken
-- branch's steps dump as any step does.
function TestDump:test_steps_inside_loops_and_branches_are_dumped()
  local dir = tmpdir()
  local g, x, y = control_graph()
  local sess = session(g, { enable_dump = true, dump_path = dir, dump_mode = "output" })
  lu.assertEquals(sess:run(y, { [x] = npu.tensor({ 1, 2 }) }):totable(), { -8, -16 })
  local iters, negate = {}, 0
  for _, r in ipairs(dumped(dir)) do
    local it = r.file:match("^mul%.double%.iter(%d+)%.%d+%.%d+%.output%.0%.npy$")
    if it then
      iters[#iters + 1] = tonumber(it)
      local t = npu.load(r.path):totable()
      lu.assertEquals(t, { 2 ^ (it + 1), 2 ^ (it + 2) }) -- v after iteration it
    end
    if r.type == "neg" and r.name == "negate" then negate = negate + 1 end
  end
  table.sort(iters)
  lu.assertEquals(iters, { 0, 1, 2 })
  lu.assertEquals(negate, 1)
  rmdir(dir)
end

-- Overflow inside a loop body is found in the iteration that made it, named in the files.
function TestDump:test_overflow_inside_a_loop_names_the_iteration()
  local dir = tmpdir()
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local x = g:placeholder("float32", { 1 }, "x")
  local big = g:const(npu.tensor({ 1e30 }), "big")
  local r = npu.while_loop(function(i, v) return npu.less(i, 3) end,
    function(i, v) return i + 1, npu.mul(v, big, { name = "grow" }) end, { 0, x })
  local sess = session(g, { enable_dump_debug = true, dump_path = dir })
  lu.assertEquals(sess:run(r[2], { [x] = npu.tensor({ 1 }) }):totable()[1], math.huge)
  -- 1 * 1e30 is finite, 1e30 * 1e30 overflows float32 in iteration 1; iteration 2 only
  -- propagates it
  local files = {}
  for _, rec in ipairs(dumped(dir)) do files[#files + 1] = rec.file end
  lu.assertTrue(#files > 0)
  for _, f in ipairs(files) do lu.assertStrContains(f, "grow.iter1.") end
  rmdir(dir)
end
