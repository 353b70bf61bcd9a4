-- serving_spec.lua — npu-serve as a client sees it: the server started on a free loopback
-- port over a model base path (SavedModel versions written by npu.export_saved_model), driven
-- with curl; every prediction compared with a direct sess:run of the same model.  Row and
-- columnar forms, signature_name, status and metadata, a new version picked up and the old one
-- unloaded, version labels, the errors (malformed JSON, wrong names / shapes / dtypes, unknown
-- model / version, oversize bodies) with TF Serving's {"error": ...} body while the server
-- keeps serving, batching of concurrent requests, Prometheus metrics, health, SIGTERM.
-- Skips (saying why) when npu-serve was not built (no libmicrohttpd) or curl is absent.
local lu = require("luaunit")
local npu = require("npu")

local S = dofile(SPEC_DIR .. "/support.lua")
local q = S.sh_quote

local ROOT = ROOT_DIR or "."
local SERVE = (os.getenv("NPU_MODULE_ROOT") or ROOT) .. "/build/npu-serve"
if os.getenv("NPU_MODULE_ROOT") then SERVE = os.getenv("NPU_MODULE_ROOT") .. "/npu-serve" end
if INSTALLED then -- the rock's (spec/run.lua --installed put its bin directory first on PATH)
  local p = io.popen("command -v npu-serve")
  SERVE = p:read("l") or "npu-serve"
  p:close()
end

local function have(cmd) return os.execute("command -v " .. cmd .. " >/dev/null 2>&1") == true end
-- curl runs without the sanitizers `make sanitize` preloads into this process (curl under a
-- preloaded ASan runtime can hang before it connects).
local CURL = "env -u LD_PRELOAD curl"

local function need_server()
  if not S.exists(SERVE) then
    lu.skip(INSTALLED and "the rock has no npu-serve: libmicrohttpd-dev was missing when it was built"
      or "npu-serve is not built (" .. SERVE .. "): libmicrohttpd-dev is missing")
  end
  if not have("curl") then lu.skip("curl is not installed") end
end

-- ---- the model: y = x @ w + b, scores = softmax(y), version v scales w by v ----------------

local function model_graph(v)
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 3 }, "x")
  local w = g:const(npu.tensor({ { 1 * v, -2 }, { 0.5, 3 * v }, { -1, 1 } }, "float32"), "w")
  local b = g:const(npu.tensor({ 0.25, -0.75 }, "float32"), "b")
  local y = npu.add(x:matmul(w), b, { name = "y" })
  local p = npu.nn.softmax(y, { name = "scores" })
  return g, x, y, p
end

local function write_version(base, v)
  local g, x, y, p = model_graph(v)
  npu.export_saved_model(g, base .. "/" .. v, { inputs = { x = x }, outputs = { y = y, scores = p },
                                                variables = { "w", "b" } })
end

local function direct(v, rows)
  local g, x, y, p = model_graph(v)
  local sess <close> = npu.Session{ graph = g }
  local r = sess:run({ y, p }, { [x] = npu.tensor(rows, "float32") })
  return r[1]:totable(), r[2]:totable()
end

local function near(a, b, what)
  if type(a) == "table" then
    lu.assertEquals(#a, #b, what)
    for i = 1, #a do near(a[i], b[i], what) end
  else
    lu.assertTrue(math.abs(a - b) <= 1e-6 * math.max(1, math.abs(b)), ("%s: %s vs %s"):format(what, a, b))
  end
end

-- ---- the server ----------------------------------------------------------------------------

local function start(dir, flags)
  local log = dir .. "/server.log"
  local pid = io.popen(("%s --rest_api_address=127.0.0.1 --rest_api_port=0 %s > %s 2>&1 & echo $!")
    :format(q(SERVE), flags, q(log))):read("l")
  local port
  for _ = 1, 200 do
    local f = io.open(log)
    local text = f and f:read("a") or ""
    if f then f:close() end
    port = text:match("REST API at http://127%.0%.0%.1:(%d+)")
    if port or text:match("cannot") then break end
    os.execute("sleep 0.05")
  end
  lu.assertNotNil(port, "the server did not start: " .. (S.read(log) or ""))
  return { pid = pid, port = port, log = log, url = "http://127.0.0.1:" .. port }
end

local function stop(srv)
  os.execute("kill -TERM " .. srv.pid .. " 2>/dev/null")
  for _ = 1, 200 do
    if not os.execute("kill -0 " .. srv.pid .. " 2>/dev/null") then return end
    os.execute("sleep 0.05")
  end
  os.execute("kill -KILL " .. srv.pid .. " 2>/dev/null")
end

-- HTTP status and body of a request (body: a string, sent as given).
local function http(srv, method, path, body)
  local cmd = (CURL .. " -s -o - -w '\\n%%{http_code}' -X %s %s"):format(method, q(srv.url .. path))
  if body then cmd = cmd .. " --data-binary " .. q(body) end
  local out = io.popen(cmd):read("a")
  local text, code = out:match("^(.*)\n(%d+)$")
  return tonumber(code), text
end

local function json(srv, method, path, body)
  local code, text = http(srv, method, path, body)
  local ok, v = pcall(S.json_decode, text)
  lu.assertTrue(ok, "not JSON: " .. tostring(text))
  return code, v
end

local function wait_for(pred, what)
  for _ = 1, 200 do
    if pred() then return end
    os.execute("sleep 0.05")
  end
  lu.fail("timed out waiting for " .. what)
end

local X = { { 1, 2, 3 }, { -1, 0, 0.5 } }

TestServing = {}

function TestServing:setUp()
  need_server()
  self.dir = S.tmpdir()
  os.execute("mkdir -p " .. q(self.dir .. "/m"))
  write_version(self.dir .. "/m", 1)
end

function TestServing:tearDown()
  if self.srv then stop(self.srv) end
  self.srv = nil
  if self.dir then S.rm_rf(self.dir) end
end

function TestServing:test_predict_status_metadata_errors()
  local srv = start(self.dir, "--model_name=m --model_base_path=" .. q(self.dir .. "/m") ..
    " --file_system_poll_wait_seconds=0 --max_body_bytes=4000")
  self.srv = srv
  local want_y, want_p = direct(1, X)
  -- row form: a prediction per instance, outputs by key
  local code, r = json(srv, "POST", "/v1/models/m:predict", '{"instances": [[1, 2, 3], [-1, 0, 0.5]]}')
  lu.assertEquals(code, 200)
  lu.assertEquals(#r.predictions, 2)
  near({ r.predictions[1].y, r.predictions[2].y }, want_y, "y")
  near({ r.predictions[1].scores, r.predictions[2].scores }, want_p, "scores")
  -- row form with objects, columnar form, explicit version and signature name
  code, r = json(srv, "POST", "/v1/models/m/versions/1:predict",
    '{"signature_name": "serving_default", "instances": [{"x": [1, 2, 3]}, {"x": [-1, 0, 0.5]}]}')
  lu.assertEquals(code, 200)
  near({ r.predictions[1].y, r.predictions[2].y }, want_y, "y (objects)")
  code, r = json(srv, "POST", "/v1/models/m:predict", '{"inputs": {"x": [[1, 2, 3], [-1, 0, 0.5]]}}')
  lu.assertEquals(code, 200)
  near(r.outputs.y, want_y, "columnar y")
  near(r.outputs.scores, want_p, "columnar scores")
  code, r = json(srv, "POST", "/v1/models/m:predict", '{"inputs": [[1, 2, 3]]}')
  lu.assertEquals(code, 200)
  near(r.outputs.y, { want_y[1] }, "columnar, the single input bare")

  -- status and metadata
  code, r = json(srv, "GET", "/v1/models/m")
  lu.assertEquals(code, 200)
  lu.assertEquals(r.model_version_status, { { version = "1", state = "AVAILABLE",
                                              status = { error_code = "OK", error_message = "" } } })
  code, r = json(srv, "GET", "/v1/models/m/metadata")
  lu.assertEquals(code, 200)
  lu.assertEquals(r.model_spec.version, "1")
  local sig = r.metadata.signature_def.signature_def.serving_default
  lu.assertEquals(sig.method_name, "tensorflow/serving/predict")
  lu.assertEquals(sig.inputs.x.dtype, "DT_FLOAT")
  lu.assertEquals(sig.inputs.x.name, "x:0")
  lu.assertEquals(sig.inputs.x.tensor_shape.dim[1].size, "-1")
  lu.assertEquals(sig.outputs.scores.tensor_shape.dim[2].size, "2")

  -- errors: status, TF Serving's body, and the server goes on
  local cases = {
    { "POST", "/v1/models/m:predict", '{"instances": [1, 2', 400, "JSON Parse error" },
    { "POST", "/v1/models/m:predict", '{"instances": [[1, 2]]}', 400, "input 'x' expects shape [-1,3], got [1,2]" },
    { "POST", "/v1/models/m:predict", '{"instances": [[1, 2, 3], [1, 2]]}', 400, "the shape of each instance must be the same" },
    { "POST", "/v1/models/m:predict", '{"inputs": [[1, 2, 3], [1, 2]]}', 400, "ragged value" },
    { "POST", "/v1/models/m:predict", '{"instances": [["a", 2, 3]]}', 400, "expected a number" },
    { "POST", "/v1/models/m:predict", '{"inputs": {"z": [[1, 2, 3]]}}', 400, "input 'z' is not in the signature" },
    { "POST", "/v1/models/m:predict", '{"instances": [{"z": [1, 2, 3]}]}', 400, "instance 0: expected the inputs x" },
    { "POST", "/v1/models/m:predict", '{"nothing": 1}', 400, "Missing 'inputs' or 'instances' key" },
    { "POST", "/v1/models/m:predict", '{"signature_name": "nope", "inputs": [[1, 2, 3]]}', 400,
      'Serving signature name: "nope" not found in signature def' },
    { "POST", "/v1/models/other:predict", '{"inputs": [[1, 2, 3]]}', 404, "Servable not found for request: Latest(other)" },
    { "POST", "/v1/models/m/versions/7:predict", '{"inputs": [[1, 2, 3]]}', 404, "Specific(m, 7)" },
    { "POST", "/v1/models/m/labels/stable:predict", '{"inputs": [[1, 2, 3]]}', 404, "Unrecognized servable version label: stable" },
    { "GET", "/v1/models/m/versions/7", nil, 404, "Could not find version 7 of model m" },
    { "GET", "/v2/whatever", nil, 404, "Malformed request" },
    { "POST", "/v1/models/m:predict", '{"inputs": [' .. string.rep("1.0, ", 1000) .. '1]}', 413, "larger than the limit of 4000 bytes" },
  }
  for _, c in ipairs(cases) do
    code, r = json(srv, c[1], c[2], c[3])
    lu.assertEquals(code, c[4], c[2] .. " " .. tostring(c[3]):sub(1, 40))
    lu.assertStrContains(r.error, c[5])
  end
  code = json(srv, "POST", "/v1/models/m:predict", '{"instances": [[1, 2, 3]]}')
  lu.assertEquals(code, 200, "still serving after the errors")

  -- health and metrics
  code, r = json(srv, "GET", "/healthz")
  lu.assertEquals(code, 200)
  lu.assertEquals(r.status, "SERVING")
  local _, text = http(srv, "GET", "/monitoring/prometheus/metrics")
  lu.assertStrContains(text, ':tensorflow:serving:request_count{model_name="m",API="Predict",entrypoint="REST",status="OK"} 5')
  lu.assertStrContains(text, 'status="INVALID_ARGUMENT"} 9')
  lu.assertStrContains(text, ':tensorflow:serving:request_latency_count{model_name="m",entrypoint="REST"}')
  lu.assertStrContains(text, ':tensorflow:serving:model_version_state{model_name="m",version="1",state="AVAILABLE"} 1')

  -- SIGTERM: a clean stop
  stop(srv)
  self.srv = nil
  lu.assertStrContains(S.read(srv.log), "npu-serve: stopped")
end

-- TF Serving's own test models name their versions "00000123": the version is 123.
function TestServing:test_zero_padded_version_directory()
  S.rm_rf(self.dir .. "/m/1")
  local g, x, y, p = model_graph(3)
  npu.export_saved_model(g, self.dir .. "/m/00000003", { inputs = { x = x }, outputs = { y = y, scores = p },
                                                         variables = { "w", "b" } })
  local srv = start(self.dir, "--model_name=m --model_base_path=" .. q(self.dir .. "/m") ..
    " --file_system_poll_wait_seconds=0")
  self.srv = srv
  local code, r = json(srv, "GET", "/v1/models/m")
  lu.assertEquals(code, 200)
  lu.assertEquals(r.model_version_status[1].version, "3")
  lu.assertEquals(r.model_version_status[1].state, "AVAILABLE")
  code, r = json(srv, "POST", "/v1/models/m/versions/3:predict", '{"inputs": {"x": [[1, 2, 3], [-1, 0, 0.5]]}}')
  lu.assertEquals(code, 200)
  near(r.outputs.y, (direct(3, X)), "y")
end

-- npu.serve{...}: the same server as a child process the handle owns; <close> stops it.
function TestServing:test_npu_serve_from_lua()
  local pid
  do
    local srv <close> = npu.serve{ binary = SERVE, model_name = "m", model_base_path = self.dir .. "/m",
                                   file_system_poll_wait_seconds = 0, log = self.dir .. "/lua.log" }
    pid = srv.pid
    lu.assertTrue(srv.port > 0)
    lu.assertEquals(srv.url, "http://127.0.0.1:" .. srv.port)
    local code, r = json(srv, "POST", "/v1/models/m:predict", '{"inputs": {"x": [[1, 2, 3], [-1, 0, 0.5]]}}')
    lu.assertEquals(code, 200)
    near(r.outputs.y, (direct(1, X)), "y")
  end
  lu.assertFalse(os.execute("kill -0 " .. pid .. " 2>/dev/null") == true, "stopped on close")
  lu.assertStrContains(S.read(self.dir .. "/lua.log"), "stopped")
  -- a server that cannot start: its log is in the error
  local msg = S.fails(npu.serve, { binary = SERVE, model_name = "m", model_base_path = self.dir .. "/m",
                                   platform_config_file = self.dir .. "/none.cfg" })
  lu.assertStrContains(msg, "NPU_ERR_IO: npu-serve did not start")
  lu.assertStrContains(msg, "none.cfg")
  lu.assertStrContains(S.fails(npu.serve, { model_name = "m" }), "model_base_path or model_config_file is required")
end

-- npu.serve's flags are npu-serve's (tools/serve/flags.def): the generated Lua list must be what
-- the binary prints, and a key off it is refused before any child starts.
TestServeFlags = {}

function TestServeFlags:test_lua_list_is_the_binarys()
  if not S.exists(SERVE) then lu.skip("npu-serve is not built (" .. SERVE .. "): libmicrohttpd-dev is missing") end
  local p = io.popen(q(SERVE) .. " --list_flags")
  local printed = {}
  for l in p:lines() do printed[#printed + 1] = l end
  lu.assertTrue(p:close())
  lu.assertTrue(#printed > 10)
  lu.assertEquals(require("npu.serve_flags"), printed,
    "lua/npu/serve_flags.lua disagrees with npu-serve --list_flags: run make serve-flags")
  -- each printed flag is one the parser takes (not 'unknown'), each other name is refused
  local out = io.popen(q(SERVE) .. " --max_batch_sizes=2 2>&1"):read("a")
  lu.assertStrContains(out, "unknown flag '--max_batch_sizes=2'")
  out = io.popen(q(SERVE) .. " --model_name 2>&1"):read("a")
  lu.assertStrContains(out, "flag '--model_name' needs a value")
end

function TestServeFlags:test_unknown_key_refused_with_the_nearest()
  local msg = S.fails(npu.serve, { model_base_path = "/nonexistent", max_batch_sizes = 4 })
  lu.assertStrContains(msg, "NPU_ERR_ARG")
  lu.assertStrContains(msg, "max_batch_sizes")
  lu.assertStrContains(msg, "max_batch_size")
end

function TestServing:test_new_versions_and_labels()
  S.write(self.dir .. "/models.config", ([[
model_config_list {
  config {
    name: "m"  # the model
    base_path: "%s"
    model_platform: "tensorflow"
    version_labels { key: "stable" value: 1 }
  }
}]]):format(self.dir .. "/m"))
  local srv = start(self.dir, "--model_config_file=" .. q(self.dir .. "/models.config") ..
    " --file_system_poll_wait_seconds=1")
  self.srv = srv
  local code, r = json(srv, "POST", "/v1/models/m/labels/stable:predict", '{"inputs": [[1, 2, 3]]}')
  lu.assertEquals(code, 200)
  near(r.outputs.y, { (direct(1, { X[1] })) [1] }, "label stable -> version 1")
  write_version(self.dir .. "/m", 2)
  wait_for(function()
    local _, st = json(srv, "GET", "/v1/models/m")
    return #st.model_version_status == 1 and st.model_version_status[1].version == "2" and
      st.model_version_status[1].state == "AVAILABLE"
  end, "version 2 to replace version 1")
  code, r = json(srv, "POST", "/v1/models/m:predict", '{"inputs": [[1, 2, 3]]}')
  lu.assertEquals(code, 200)
  near(r.outputs.y, { (direct(2, { X[1] }))[1] }, "latest is version 2")
  code = json(srv, "POST", "/v1/models/m/versions/1:predict", '{"inputs": [[1, 2, 3]]}')
  lu.assertEquals(code, 404, "version 1 unloaded")
  lu.assertStrContains(S.read(srv.log), "model m: version 1 unloaded")
end

function TestServing:test_batching_merges_concurrent_requests()
  local srv = start(self.dir, "--model_name=m --model_base_path=" .. q(self.dir .. "/m") ..
    " --file_system_poll_wait_seconds=0 --enable_batching --max_batch_size=16" ..
    " --batch_timeout_micros=200000 --num_batch_threads=1 --allowed_batch_sizes=4,8,16")
  self.srv = srv
  -- 8 clients at once, each its own row; they should be merged into few runs
  local cmds = {}
  for i = 1, 8 do
    cmds[#cmds + 1] = (CURL .. " -s -X POST %s --data-binary %s > %s &"):format(
      q(srv.url .. "/v1/models/m:predict"), q(('{"instances": [[%d, 1, 0]]}'):format(i)),
      q(self.dir .. "/out" .. i))
  end
  os.execute(table.concat(cmds, " ") .. " wait")
  for i = 1, 8 do
    local r = S.json_decode(S.read(self.dir .. "/out" .. i))
    local y = direct(1, { { i, 1, 0 } })
    near(r.predictions[1].y, y[1], "row " .. i)
  end
  local _, text = http(srv, "GET", "/monitoring/prometheus/metrics")
  local batches = tonumber(text:match('processed_batch_size_count{model_name="m"} (%d+)'))
  lu.assertNotNil(batches, text)
  lu.assertTrue(batches < 8, "8 concurrent requests ran as " .. batches .. " batches")
  lu.assertNil(text:match('processed_batch_size_bucket{model_name="m",le="1"} [1-9]'),
               "padded to an allowed batch size (4, 8 or 16), never run as 1")
end

-- The reference's config.cfg (TF Serving's platform_configs, the session's NpuOptimizer
-- parameter_map), as docs/serving.md shows it.
local PLATFORM_CONFIG = [[
platform_configs {
  key: "tensorflow"
  value {
    source_adapter_config {
      [type.googleapis.com/tensorflow.serving.SavedModelBundleSourceAdapterConfig] {
        legacy_config {
          session_config {
            graph_options {
              rewrite_options {
                custom_optimizers {
                  name: "NpuOptimizer"
                  parameter_map: { key: "use_off_line" value: { b: true } }
                  parameter_map: { key: "mix_compile_mode" value: { b: true } }
                  parameter_map: { key: "graph_run_mode" value: { i: 0 } }
                  parameter_map: { key: "precision_mode" value: { s: "%s" } }
                }
                remapping: OFF
              }
            }
          }
        }
      }
    }
  }
}
]]

function TestServing:test_platform_config()
  S.write(self.dir .. "/config.cfg", PLATFORM_CONFIG:format("force_fp32"))
  local srv = start(self.dir, "--model_name=m --model_base_path=" .. q(self.dir .. "/m") ..
    " --file_system_poll_wait_seconds=0 --platform_config_file=" .. q(self.dir .. "/config.cfg"))
  self.srv = srv
  lu.assertStrContains(S.read(srv.log), "4 NpuOptimizer parameter(s)")
  local code, r = json(srv, "POST", "/v1/models/m:predict", '{"inputs": [[1, 2, 3]]}')
  lu.assertEquals(code, 200)
  near(r.outputs.y, { (direct(1, { X[1] }))[1] }, "y under the platform config")
  -- a value the option table refuses stops the server before it serves
  S.write(self.dir .. "/bad.cfg", PLATFORM_CONFIG:format("fp64_please"))
  local out = io.popen(("%s --model_base_path=%s --platform_config_file=%s 2>&1; echo rc=$?"):format(
    q(SERVE), q(self.dir .. "/m"), q(self.dir .. "/bad.cfg"))):read("a")
  lu.assertStrContains(tostring(out), "parameter_map 'precision_mode'")
  lu.assertStrContains(tostring(out), "rc=1")
end
