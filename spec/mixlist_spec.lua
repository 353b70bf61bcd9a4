-- mixlist_spec.lua — the files that adjust the precision modes: modify_mixlist (the black /
-- white / gray lists, 002 §5.1 cases a, b, c) and customize_dtypes (dtypes by node name and by
-- OpType), read when the session is created; what they do to the plan (sess:explain) and to the
-- values; their errors (file and line named); and an allocation-failure sweep over all of it.
local lu = require("luaunit")
local npu = require("npu")
local support = dofile(SPEC_DIR .. "/support.lua")

local function round(t, dtype) return t:astype(dtype or "float16"):astype("float32") end
local function same(a, b) return npu.allclose(a, b, 0, 0) end

local tmpfiles = {}
local function file(text)
  local path = os.tmpname()
  support.write(path, text)
  tmpfiles[#tmpfiles + 1] = path
  return path
end

-- The dtype each graph value is written in, by node name ("mm" for "mm:0").
local function dtypes(sess, fetches, feeds)
  local e = sess:explain(fetches, feeds)
  local by_node = {}
  for _, s in ipairs(e.steps) do
    if s.pass ~= "precision" then
      for _, o in ipairs(s.outputs) do by_node[o.name:match("^(.*):0$") or o.name] = o.dtype end
    end
  end
  return by_node
end

-- bmm (BatchMatMulV2, trust) -> reshape (gray) -> mm (MatMul, trust by default) -> relu (gray);
-- lone = MatMul fed by placeholders only; sm = Softmax (block by default) after mm.
local function graph()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 1, 4, 8 }, "x")
  local w0 = g:placeholder("float32", { 1, 8, 8 }, "w0")
  local w = g:placeholder("float32", { 8, 4 }, "w")
  local a = g:placeholder("float32", { 4, 8 }, "a")
  local bmm = g:op("batch_matmul", { x, w0 }, {}, "bmm")
  local rs = g:op("reshape", { bmm }, { shape = { 4, 8 } }, "rs")
  local mm = g:op("matmul", { rs, w }, {}, "mm")
  local relu = g:op("relu", { mm }, {}, "relu")
  local lone = g:op("matmul", { a, w }, {}, "lone")
  local sm = g:op("softmax", { a }, {}, "sm")
  local feeds = {
    [x] = npu.random.normal({ 1, 4, 8 }, { seed = 1 }), [w0] = npu.random.normal({ 1, 8, 8 }, { seed = 2 }),
    [w] = npu.random.normal({ 8, 4 }, { seed = 3 }), [a] = npu.random.normal({ 4, 8 }, { seed = 4 }),
  }
  return g, { relu, lone, sm }, feeds, { x = x, w0 = w0, w = w, bmm = bmm }
end

local function plan(options)
  local g, fetches, feeds = graph()
  return dtypes(npu.Session { graph = g, options = options }, fetches, feeds)
end

local function mixed(list_json)
  return { precision_mode = "allow_mix_precision", modify_mixlist = file(list_json) }
end

TestMixlist = {}

function TestMixlist:teardown()
  for _, p in ipairs(tmpfiles) do os.remove(p) end
  tmpfiles = {}
end

function TestMixlist:test_builtin_lists()
  local p = plan({ precision_mode = "allow_mix_precision" })
  lu.assertEquals({ p.bmm, p.rs, p.mm, p.relu, p.lone, p.sm },
    { "float16", "float16", "float16", "float16", "float16", "float32" })
end

function TestMixlist:test_case_a_add_to_black_list()
  local p = plan(mixed('{"black-list": {"to-add": ["MatMul"]}}'))
  lu.assertEquals({ p.bmm, p.rs, p.mm, p.relu, p.lone }, { "float16", "float16", "float32", "float32", "float32" })
end

function TestMixlist:test_case_b_remove_from_white_and_add_to_black()
  local p = plan(mixed('{"black-list": {"to-add": ["MatMul"]}, "white-list": {"to-remove": ["MatMul"]}}'))
  lu.assertEquals({ p.mm, p.relu, p.lone }, { "float32", "float32", "float32" })
end

function TestMixlist:test_case_c_remove_from_white_only_makes_it_gray()
  local p = plan(mixed('{\n  "white-list": {\n    "to-remove": ["MatMul"]\n  }\n}'))
  -- gray, not black: after a float16 step it follows (float16), fed by placeholders it stays
  lu.assertEquals({ p.mm, p.relu, p.lone }, { "float16", "float16", "float32" })
end

function TestMixlist:test_black_to_gray_and_white_additions()
  -- Softmax leaves the black list: gray, fed by a placeholder: float32; Relu joins the white list
  local p = plan(mixed('{"black-list": {"to-remove": ["Softmax"]}}'))
  lu.assertEquals(p.sm, "float32")
  p = plan(mixed('{"white-list": {"to-add": ["softmax"]}}')) -- our op names work too
  lu.assertEquals(p.sm, "float16")
  -- removing an op from a list it is not in changes nothing
  p = plan(mixed('{"black-list": {"to-remove": ["MatMul"]}}'))
  lu.assertEquals({ p.mm, p.lone }, { "float16", "float16" })
end

function TestMixlist:test_lists_change_nothing_outside_the_mixed_modes()
  local black = '{"black-list": {"to-add": ["MatMul", "BatchMatMulV2"]}}'
  local p = plan({ precision_mode = "force_fp16", modify_mixlist = file(black) })
  lu.assertEquals({ p.mm, p.lone, p.sm }, { "float16", "float16", "float16" })
  p = plan({ precision_mode = "allow_fp32_to_fp16", modify_mixlist = file(black) })
  lu.assertEquals({ p.bmm, p.mm, p.relu }, { "float16", "float16", "float32" })
  p = plan({ precision_mode_v2 = "mixed_bfloat16", modify_mixlist = file(black) })
  lu.assertEquals({ p.bmm, p.mm }, { "float32", "float32" })
end

function TestMixlist:test_values_follow_the_lists()
  local g, fetches, feeds, v = graph()
  local relu = fetches[1]
  local got = npu.Session { graph = g, options = mixed('{"black-list": {"to-add": ["MatMul"]}}') }:run(relu, feeds)
  -- oracle: bmm on rounded inputs, rounded; the rest float32
  local ref = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
  local bmm16 = round(ref:run(v.bmm, { [v.x] = round(feeds[v.x]), [v.w0] = round(feeds[v.w0]) }))
  local want = ref:run(relu, { [v.bmm] = bmm16, [v.w] = feeds[v.w] })
  lu.assertTrue(same(got, want))
  lu.assertFalse(same(got, ref:run(relu, feeds)))
end

local function creation_error(options)
  local g = graph()
  local ok, err = pcall(npu.Session, { graph = g, options = options })
  lu.assertFalse(ok)
  return tostring(err)
end

function TestMixlist:test_errors_name_file_and_line()
  local err = creation_error({ modify_mixlist = "/no/such/ops_info.json" })
  lu.assertStrContains(tostring(err), "NPU_ERR_IO")
  lu.assertStrContains(tostring(err), "/no/such/ops_info.json")
  local bad = file('{\n  "black-list": {\n    "to-add": ["MatMul",]\n  }\n}')
  err = creation_error({ modify_mixlist = bad })
  lu.assertStrContains(tostring(err), "NPU_ERR_FORMAT")
  lu.assertStrContains(tostring(err), "modify_mixlist '" .. bad .. "' line 3: malformed JSON")
  err = creation_error({ modify_mixlist = file('{\n"grey-list": {}\n}') })
  lu.assertStrContains(tostring(err), "line 2: unknown section \"grey-list\"")
  err = creation_error({ modify_mixlist = file('{"white-list": {"to_add": ["MatMul"]}}') })
  lu.assertStrContains(tostring(err), "unknown key \"to_add\" in \"white-list\"")
  err = creation_error({ modify_mixlist = file('{"white-list": {"to-add": "MatMul"}}') })
  lu.assertStrContains(tostring(err), "must be an array of op types")
  err = creation_error({ modify_mixlist = file('{"white-list": {"to-add": [3]}}') })
  lu.assertStrContains(tostring(err), "must hold op type names")
  err = creation_error({ modify_mixlist = file('{\n"black-list": {\n"to-add": ["Matmul"]}}') })
  lu.assertStrContains(tostring(err), "NPU_ERR_NOT_FOUND")
  lu.assertStrContains(tostring(err), "line 3: unknown op type 'Matmul' (did you mean 'MatMul'?)")
  err = creation_error({ modify_mixlist = file('{"black-list": {"to-add": ["Relu"]},\n "white-list": {"to-add": ["Relu"]}}') })
  lu.assertStrContains(tostring(err), "NPU_ERR_CONFLICT")
  lu.assertStrContains(tostring(err), "'Relu' is added to both the black-list and the white-list")
  err = creation_error({ modify_mixlist = file('["MatMul"]') })
  lu.assertStrContains(tostring(err), "expected a JSON object")
end

-- ---- customize_dtypes ----

-- r1 = relu(x), r2 = relu(x), mm = matmul(x, w), eq = equal(x, x), ga = gather(x, idx)
local function cgraph()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 4 }, "x")
  local w = g:placeholder("float32", { 4, 4 }, "w")
  local idx = g:const(npu.tensor({ 0, 2 }, "int32"), "idx")
  local r1 = g:op("relu", { x }, {}, "r1")
  local r2 = g:op("relu", { x }, {}, "r2")
  local mm = g:op("matmul", { x, w }, {}, "mm")
  local feeds = { [x] = npu.random.normal({ 4, 4 }, { seed = 8 }), [w] = npu.random.normal({ 4, 4 }, { seed = 9 }) }
  return g, { r1 = r1, r2 = r2, mm = mm, x = x, w = w, idx = idx }, feeds
end

local function cplan(mode, text)
  local g, v, feeds = cgraph()
  local opts = { precision_mode = mode, customize_dtypes = file(text) }
  local s = npu.Session { graph = g, options = opts }
  return dtypes(s, { v.r1, v.r2, v.mm }, feeds), s, v, feeds
end

TestCustomizeDtypes = {}

function TestCustomizeDtypes:teardown() TestMixlist.teardown() end

function TestCustomizeDtypes:test_node_name_beats_op_type()
  local text = "# by type\nOpType::Relu:InputDtype:float16,OutputDtype:float16\n\n" ..
      "# by name\nr2::InputDtype:float32,OutputDtype:float32\nno_such_node::InputDtype:float16\n"
  local p, s, v, feeds = cplan("allow_fp32_to_fp16", text)
  lu.assertEquals({ p.r1, p.r2, p.mm }, { "float16", "float32", "float16" })
  local r = s:run({ v.r1, v.r2 }, feeds)
  local ref = npu.Session { graph = (cgraph()), options = { precision_mode = "must_keep_origin_dtype" } }
  lu.assertTrue(same(r[1], round(ref:run("r1:0", { ["x:0"] = round(feeds[v.x]) }))))
  lu.assertTrue(same(r[2], ref:run("r2:0", { ["x:0"] = feeds[v.x] })))
  lu.assertFalse(same(r[1], r[2]))
end

function TestCustomizeDtypes:test_inputs_only_and_bfloat16()
  -- allow_fp32_to_bf16 changes nothing by itself, but customize_dtypes applies (000)
  local p, s, v, feeds = cplan("allow_fp32_to_bf16", "mm::InputDtype:bfloat16,bfloat16\nOpType::relu:OutputDtype:bfloat16")
  lu.assertEquals({ p.r1, p.mm }, { "bfloat16", "float32" })
  local ref = npu.Session { graph = (cgraph()), options = { precision_mode = "must_keep_origin_dtype" } }
  local got = s:run(v.mm, feeds)
  local xb, wb = round(feeds[v.x], "bfloat16"), round(feeds[v.w], "bfloat16")
  local want = ref:run("mm:0", { ["x:0"] = xb, ["w:0"] = wb })
  local algo
  for _, st in ipairs(s:explain(v.mm, feeds).steps) do
    if st.op == "matmul" then algo = st.algo end
  end
  if algo == "bf16dot" then
    -- both operands bfloat16 where the CPU has AVX512_BF16: the native GEMM's own sum order,
    -- held to its bound, k 2^-24 sum|x w| (docs/numerics.md), instead of sgemm's bits
    local g_t, x_t, w_t = got:totable(), xb:totable(), wb:totable()
    for i = 1, 4 do
      for j = 1, 4 do
        local exact, mag = 0, 0
        for q = 1, 4 do
          exact, mag = exact + x_t[i][q] * w_t[q][j], mag + math.abs(x_t[i][q] * w_t[q][j])
        end
        lu.assertTrue(math.abs(g_t[i][j] - exact) <= 4 * 2 ^ -24 * mag)
      end
    end
    lu.assertTrue(npu.allclose(got, want, 0, 1e-5))
  else -- widened for sgemm: the bits of float32 on the rounded operands
    lu.assertNil(algo)
    lu.assertTrue(same(got, want))
  end
  lu.assertFalse(same(got, round(got, "bfloat16"))) -- the output stays float32
end

function TestCustomizeDtypes:test_no_effect_when_keeping_the_origin_dtype()
  local text = "OpType::Relu:InputDtype:float16,OutputDtype:float16"
  local p = cplan("must_keep_origin_dtype", text)
  lu.assertEquals({ p.r1, p.r2 }, { "float32", "float32" })
  local g, v, feeds = cgraph()
  p = dtypes(npu.Session { graph = g, options = { precision_mode_v2 = "origin", customize_dtypes = file(text) } },
    { v.r1 }, feeds)
  lu.assertEquals(p.r1, "float32")
end

function TestCustomizeDtypes:test_errors_at_creation_name_file_and_line()
  local function err_of(text)
    local path = file(text)
    local ok, err = pcall(npu.Session, { graph = (cgraph()), options = { customize_dtypes = path } })
    lu.assertFalse(ok)
    return tostring(err), path
  end
  local err, path = err_of("# ok\nr1:InputDtype:float16")
  lu.assertStrContains(tostring(err), "NPU_ERR_FORMAT")
  lu.assertStrContains(tostring(err), "customize_dtypes '" .. path .. "' line 2: expected 'name::InputDtype:...'")
  err = err_of("r1::InputDtype:float8")
  lu.assertStrContains(tostring(err), "line 1: unknown dtype 'float8'")
  err = err_of("r1::float16")
  lu.assertStrContains(tostring(err), "expected InputDtype:... and/or OutputDtype:...")
  err = err_of("\nOpType::Rleu:InputDtype:float16")
  lu.assertStrContains(tostring(err), "NPU_ERR_NOT_FOUND")
  lu.assertStrContains(tostring(err), "line 2: unknown op type 'Rleu' (did you mean 'Relu'?)")
  err = err_of("OpType::Relu:InputDtype:float16,float16")
  lu.assertStrContains(tostring(err), "2 input dtypes, but Relu takes at most 1 input(s)")
  err = err_of("OpType::Relu:OutputDtype:float16\nOpType::relu:OutputDtype:float32")
  lu.assertStrContains(tostring(err), "line 2: op type 'relu' already given on line 1")
  err = err_of("r1::OutputDtype:float16\nr1::OutputDtype:float32")
  lu.assertStrContains(tostring(err), "line 2: node 'r1' already given on line 1")
  err = err_of("OpType::Placeholder:OutputDtype:float16")
  lu.assertStrContains(tostring(err), "computes nothing")
  err = err_of("r1::InputDtype:float16,InputDtype:float16")
  lu.assertStrContains(tostring(err), "InputDtype: given twice")
  err = err_of("r1::InputDtype:float16,")
  lu.assertStrContains(tostring(err), "an empty dtype")
end

function TestCustomizeDtypes:test_errors_at_compile_name_file_line_and_node()
  local g, v, feeds = cgraph()
  local eq = g:op("equal", { v.x, v.x }, {}, "eq")
  local ga = g:op("gather", { v.x, v.idx }, {}, "ga")
  local function run_err(text, fetch)
    local s = npu.Session { graph = g, options = { precision_mode = "force_fp16", customize_dtypes = file(text) } }
    local ok, err = pcall(s.run, s, fetch, feeds)
    lu.assertFalse(ok)
    return tostring(err)
  end
  local err = run_err("\n\nr1::InputDtype:float16,float16", v.r1)
  lu.assertStrContains(tostring(err), "NPU_ERR_FORMAT")
  lu.assertStrContains(tostring(err), "line 3: node 'r1' (relu): the line gives 2 input dtype(s), the node has 1")
  err = run_err("eq::OutputDtype:float16", eq)
  lu.assertStrContains(tostring(err), "NPU_ERR_DTYPE")
  lu.assertStrContains(tostring(err), "node 'eq' (equal): output 0 is bool and cannot be computed as float16")
  err = run_err("ga::InputDtype:float16,float16", ga)
  lu.assertStrContains(tostring(err), "input 1 is int32 and cannot be computed as float16")
  -- an int32 operand may be named with its own dtype
  local s = npu.Session { graph = g, options = { precision_mode = "force_fp16",
    customize_dtypes = file("ga::InputDtype:float32,int32,OutputDtype:float32") } }
  lu.assertTrue(same(s:run(ga, feeds), npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }:run(ga, feeds)))
end

-- ---- allocation failures ----

function TestMixlist:test_allocation_failure_sweep()
  local lists = file('{"black-list": {"to-add": ["Softmax"], "to-remove": ["Exp"]}, "white-list": {"to-add": ["Relu"]}}')
  local cfg = file("OpType::Relu:InputDtype:float16,OutputDtype:float16\nr::OutputDtype:float32\n")
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4, 8 }, "x")
  local c = g:const(npu.random.normal({ 8, 8 }, { seed = 3 }), "c")
  local y = npu.nn.softmax(g:op("relu", { x:matmul(c) }, {}, "r") + x)
  npu.util.keep_tensors_dtypes(g, { x })
  local feed = { [x] = npu.random.normal({ 4, 8 }, { seed = 2 }) }
  local function scenario(mode)
    local s <close> = npu.Session { graph = g, options = { precision_mode = mode, modify_mixlist = lists, customize_dtypes = cfg } }
    return s:run(y, feed)
  end
  for _, mode in ipairs { "allow_mix_precision", "force_fp16" } do
    local want = scenario(mode)
    support.sweep_allocations(mode, function() return scenario(mode) end, { code = "NPU_ERR_NOMEM",
      max = 10000, min_failed = 20, check = function(got) lu.assertTrue(same(got, want)) end })
  end
end
