-- serving.lua — npu-serve under load (make bench-serve; needs build/npu-serve and
-- build/bench/serve_load): 16 clients x 1000 requests each on keep-alive connections, a
-- 784-in MLP (784 -> 256 -> 10, batch 1 per request), with batching off and on; p50/p99
-- latency and throughput; in each run a new model version is written half way through, and
-- the run must lose no request while the server loads it and unloads the old one.
--   lua5.4 bench/serving.lua [CLIENTS] [REQUESTS]
local here = arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
package.cpath = here .. "/?.so;" .. package.cpath
local npu = require("npu")

local CLIENTS, REQUESTS = tonumber(arg[1]) or 16, tonumber(arg[2]) or 1000
local SERVE, LOAD = here .. "/build/npu-serve", here .. "/build/bench/serve_load"
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function write_version(base, v)
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 784 }, "x")
  local w1 = g:const(npu.random.normal({ 784, 256 }, { stddev = 0.05, seed = v }), "w1")
  local w2 = g:const(npu.random.normal({ 256, 10 }, { stddev = 0.05, seed = v + 100 }), "w2")
  local p = npu.nn.softmax(npu.nn.relu(x:matmul(w1)):matmul(w2), { name = "probs" })
  npu.export_saved_model(g, base .. "/" .. v, { inputs = { x = x }, outputs = { probs = p },
                                                variables = { "w1", "w2" } })
end

local function start(dir, flags)
  local log = dir .. "/server.log"
  os.remove(log)
  local pid = io.popen(("%s --rest_api_address=127.0.0.1 --rest_api_port=0 --model_name=mlp " ..
    "--model_base_path=%s --file_system_poll_wait_seconds=1 %s > %s 2>&1 & echo $!")
    :format(q(SERVE), q(dir .. "/mlp"), flags, q(log))):read("l")
  for _ = 1, 400 do
    local f = io.open(log)
    local port = f and f:read("a"):match("REST API at http://127%.0%.0%.1:(%d+)")
    if f then f:close() end
    if port then return pid, port, log end
    os.execute("sleep 0.05")
  end
  error("npu-serve did not start; see " .. log)
end

local row = {}
for i = 1, 784 do row[i] = ((i * 37) % 101) / 100 end
local body = '{"instances": [[' .. table.concat(row, ",") .. ']]}'

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. q(dir .. "/mlp"))
print(("npu-serve load: %d clients x %d requests, MLP 784-256-10, one row per request"):format(CLIENTS, REQUESTS))
for _, mode in ipairs({
  { "batching off", "--num_batch_threads=1" },
  { "batching on ", "--enable_batching --max_batch_size=16 --batch_timeout_micros=2000 --num_batch_threads=1" },
}) do
  os.execute("rm -rf " .. q(dir .. "/mlp") .. " && mkdir -p " .. q(dir .. "/mlp"))
  write_version(dir .. "/mlp", 1)
  local pid, port = start(dir, mode[2])
  -- the load in the background; a new version half way through (by time, from a dry run's rate)
  local out = dir .. "/load.out"
  os.remove(out)
  os.execute(("%s %s /v1/models/mlp:predict %s %d %d --expect predictions > %s 2>&1 &")
    :format(q(LOAD), port, q(body), CLIENTS, REQUESTS, q(out)))
  os.execute("sleep 1.5")
  write_version(dir .. "/mlp", 2)
  local swapped = false
  for _ = 1, 600 do
    local f = io.open(out)
    local text = f and f:read("a") or ""
    if f then f:close() end
    if not swapped then
      local st = io.popen("curl -s http://127.0.0.1:" .. port .. "/v1/models/mlp"):read("a")
      swapped = st:match('"version": "2", "state": "AVAILABLE"') and not st:match('"version": "1"')
    end
    if text:match("ok=") then
      print(("%s  %s  version 1 -> 2 during the run: %s"):format(mode[1], text:gsub("\n", ""),
        swapped and "swapped" or "not seen"))
      break
    end
    os.execute("sleep 0.1")
  end
  os.execute("kill -TERM " .. pid)
  os.execute("sleep 0.5")
end
os.execute("rm -rf " .. q(dir))
