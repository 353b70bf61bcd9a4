--- npu.serve — npu.serve{...}: TensorFlow Serving's REST API for a model base path, as an
-- npu-serve child process that a handle owns (docs/serving.md, "From Lua").
--
-- Not in-process, on purpose: npu-serve runs HTTP and worker threads, blocks SIGTERM and SIGINT
-- to wait for them, and ignores SIGPIPE; a host that embeds Lua (an editor, a game, a web
-- server) wants none of that in its own process, nor a server that dies with a script error.
-- The child is started through /bin/sh (io.popen: no C code, no fork in the module), detached
-- (its parent shell exits at once, so nothing is left to reap), logs to a file, and is asked
-- for port 0 unless told otherwise: the port it bound is read from its log.  The handle's
-- :stop() — also run by `<close>` and by the garbage collector — sends SIGTERM, which makes the
-- server finish the requests in flight, unload and exit, and waits for that.
--
-- Invariants: every flag is given as `--name=value`, each word quoted for the shell; a server
-- that does not come up within opts.timeout seconds is killed and its log is in the error.
-- @module npu.serve
local errors = require("npu.errors")

local M = {}

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function sleep(seconds) os.execute("sleep " .. seconds) end

local function alive(pid) return os.execute("kill -0 " .. pid .. " 2>/dev/null") == true end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- npu-serve: $NPU_SERVE, else build/npu-serve of the checkout this module was loaded from, else
-- the one on PATH (where `make install` / luarocks put it).
local function find_binary()
  local env = os.getenv("NPU_SERVE")
  if env and env ~= "" then return env end
  local core = package.searchpath("npu.core", package.cpath)
  local root = core and core:match("^(.*)/npu/core%.[^/]*$")
  if root and exists(root .. "/build/npu-serve") then return root .. "/build/npu-serve" end
  return "npu-serve"
end

-- Keys of opts that are not npu-serve flags.
local OWN = { binary = true, log = true, timeout = true, port = true, address = true }
-- npu-serve's flags (tools/serve/flags.def, through the generated npu.serve_flags): a key that
-- is neither one nor OWN is a mistake named here, with the nearest valid key, rather than a
-- child that exits on "unknown flag" (or, for a misspelt key of our own, a flag npu-serve never
-- heard of).  npu-serve's `port` (gRPC) is never passed on: here port is the REST port.
local FLAGS = require("npu.serve_flags")
local KNOWN = { "binary", "log", "timeout", "port", "address" }
for _, f in ipairs(FLAGS) do
  if not OWN[f] then KNOWN[#KNOWN + 1] = f end
end

local Server = {}
Server.__index = Server

--- Stops the server: SIGTERM, letting requests in flight finish, then waits for it to exit
-- (also done by `<close>` and the garbage collector).
-- @function Server:stop
function Server:stop()
  if not self.pid then return end
  local pid = self.pid
  self.pid = nil
  os.execute("kill -TERM " .. pid .. " 2>/dev/null")
  for _ = 1, 700 do -- the server gives requests in flight 30 s to finish
    if not alive(pid) then return end
    sleep(0.05)
  end
  os.execute("kill -KILL " .. pid .. " 2>/dev/null")
end

Server.__close = Server.stop
Server.__gc = Server.stop

function Server:__tostring()
  return ("npu.Server(%s, pid %s)"):format(self.url, self.pid or "stopped")
end

--- Starts TensorFlow Serving's REST API over a model base path, as an npu-serve child
-- process owned by the returned handle (docs/serving.md).
-- @tparam table opts npu-serve's flags by name (`model_base_path` or `model_config_file`
--   required, `model_name`, `rest_api_port`, ...), plus `binary`, `log` (the log file),
--   `timeout` (seconds to wait for it to come up, 30), `port` and `address` (127.0.0.1)
-- @treturn table a Server: `url`, `port`, `pid`, `log`, and stop()
-- @raise NPU_ERR_ARG for an unknown flag (naming the nearest); NPU_ERR_IO when it does not
--   start (its log in the message)
-- @usage local server <close> = npu.serve{model_base_path = "/models/m", model_name = "m"}
-- print(server.url)
function M.serve(opts)
  if type(opts) ~= "table" then
    errors.raise("npu.serve", "NPU_ERR_ARG", ("expected a table of flags, got %s"):format(type(opts)))
  end
  for k in pairs(opts) do
    if type(k) ~= "string" then
      errors.raise("npu.serve", "NPU_ERR_ARG", ("flags are named (string keys), got key %s"):format(tostring(k)))
    end
  end
  errors.check_keys("npu.serve", opts, KNOWN, "flag")
  if opts.timeout ~= nil and (type(opts.timeout) ~= "number" or opts.timeout <= 0) then
    errors.raise("npu.serve", "NPU_ERR_ARG", "timeout must be a number of seconds > 0, got " .. tostring(opts.timeout))
  end
  if opts.model_base_path == nil and opts.model_config_file == nil then
    errors.raise("npu.serve", "NPU_ERR_ARG", "model_base_path or model_config_file is required")
  end
  local address = opts.address or opts.rest_api_address or "127.0.0.1"
  local port = opts.port or opts.rest_api_port or 0
  local args = { quote(opts.binary or find_binary()), quote("--rest_api_address=" .. address),
                 quote("--rest_api_port=" .. port) }
  local keys = {}
  for k in pairs(opts) do
    if type(k) ~= "string" then errors.raise("npu.serve", "NPU_ERR_ARG", "flags are named (string keys)") end
    if not OWN[k] and k ~= "rest_api_address" and k ~= "rest_api_port" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = opts[k]
    if type(v) == "table" then
      errors.raise("npu.serve", "NPU_ERR_ARG", ("flag '%s' takes a string, number or boolean"):format(k))
    end
    args[#args + 1] = quote(("--%s=%s"):format(k, tostring(v)))
  end
  local log = opts.log or os.tmpname()
  local cmd = ("%s > %s 2>&1 & echo $!"):format(table.concat(args, " "), quote(log))
  local p = io.popen(cmd)
  local pid = p and tonumber(p:read("l"))
  if p then p:close() end
  if not pid then errors.raise("npu.serve", "NPU_ERR_IO", "cannot start npu-serve through /bin/sh") end
  local timeout = opts.timeout or 30
  local bound
  for _ = 1, math.max(1, math.floor(timeout / 0.05)) do
    bound = (read_file(log) or ""):match("REST API at (http://[^%s]+)")
    if bound or not alive(pid) then break end
    sleep(0.05)
  end
  if not bound then
    os.execute("kill -KILL " .. pid .. " 2>/dev/null")
    errors.raise("npu.serve", "NPU_ERR_IO", ("npu-serve did not start (log %s):\n%s"):format(
      log, read_file(log) or "(no log)"))
  end
  return setmetatable({ pid = pid, log = log, url = bound, port = tonumber(bound:match(":(%d+)$")) },
                      Server)
end

function M.install(npu) npu.serve = M.serve end

return M
