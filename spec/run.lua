-- spec/run.lua — runs the whole LuaUnit suite: every spec/*_spec.lua, in name order.
--   lua5.4 spec/run.lua [LuaUnit options, e.g. -p TestOps -v]
-- Paths are set so that the checkout's module is used: lua/?.lua and ./npu/core.so.
--   lua5.4 spec/run.lua --installed [LuaUnit options]     (the rockspec's test command)
-- tests the installed rock instead: npu is found through package.path/cpath as they are (the
-- entries relative to the working directory dropped, so a build in the source tree cannot
-- stand in for it), else through the rock trees luarocks knows; INSTALLED is then true, and
-- specs that need this source tree's build or ../shared/models skip, saying why.
local here = arg[0]:match("^(.*)/spec/run%.lua$") or "."
for i = #arg, 1, -1 do -- (LuaUnit reads arg itself when given no options)
  if arg[i] == "--installed" then
    INSTALLED = true
    table.remove(arg, i)
  end
end

local function without_relative(path)
  local kept = {}
  for entry in path:gmatch("[^;]+") do
    if entry:sub(1, 1) == "/" then kept[#kept + 1] = entry end
  end
  return table.concat(kept, ";")
end

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

if INSTALLED and not os.getenv("NPU_SPEC_INSTALLED") then
  -- Find the rock, then run the suite again in an environment that says where it is, so that
  -- the specs' subprocesses (examples, tools, mpirun ranks) load it too; with make test's
  -- settings: plans verified, outputs and the operator cache in a directory of its own.
  package.path, package.cpath = without_relative(package.path), without_relative(package.cpath)
  local function ask(what)
    local p = io.popen("luarocks --lua-version 5.4 path " .. what .. " 2>/dev/null")
    local out = p and p:read("l") or ""
    if p then p:close() end
    return out
  end
  if not package.searchpath("npu.core", package.cpath) then
    package.path = without_relative(ask("--lr-path")) .. ";" .. package.path
    package.cpath = without_relative(ask("--lr-cpath")) .. ";" .. package.cpath
  end
  -- the rock's programs (npu-run, npu-serve) first on PATH
  local bin = ask("--lr-bin")
  local tmp = os.tmpname()
  os.remove(tmp)
  assert(os.execute("mkdir " .. q(tmp)))
  local i = -1 -- the interpreter: arg's lowest index
  while arg[i - 1] do i = i - 1 end
  local interpreter = arg[i]
  local env = ("NPU_SPEC_INSTALLED=1 NPU_VERIFY_PLANS=1 LUA_PATH_5_4=%s LUA_CPATH_5_4=%s PATH=%s"):format(
    q(package.path), q(package.cpath), q((bin ~= "" and bin .. ":" or "") .. os.getenv("PATH")))
  for _, v in ipairs({ "ASCEND_WORK_PATH", "ASCEND_CACHE_PATH" }) do
    if not os.getenv(v) then env = env .. (" %s=%s"):format(v, q(tmp .. "/" .. v:lower())) end
  end
  local cmd = { "env", env, q(interpreter), q(arg[0]), "--installed" }
  for _, a in ipairs(arg) do cmd[#cmd + 1] = q(a) end
  local _, _, code = os.execute(table.concat(cmd, " "))
  os.execute("rm -rf " .. q(tmp))
  os.exit(code or 1)
end

if INSTALLED then
  package.path, package.cpath = without_relative(package.path), without_relative(package.cpath)
  local init = package.searchpath("npu", package.path)
  local core = package.searchpath("npu.core", package.cpath)
  if not (init and core) then
    io.stderr:write("spec/run.lua --installed: npu is not installed where package.path and " ..
      "package.cpath look, nor in luarocks' trees (luarocks make, or eval \"$(luarocks path)\")\n")
    os.exit(1)
  end
  local p = io.popen("cd " .. q(here) .. " && pwd -P")
  local source = p:read("l")
  p:close()
  for _, f in ipairs({ init, core }) do
    local d = io.popen("cd \"$(dirname " .. q(f) .. ")\" && pwd -P")
    local dir = d:read("l")
    d:close()
    if dir and source and (dir .. "/"):sub(1, #source + 1) == source .. "/" then
      io.stderr:write("spec/run.lua --installed: " .. f .. " is in the source tree, not an installed rock\n")
      os.exit(1)
    end
  end
  print("testing the installed npu: " .. init .. ", " .. core)
else
  package.path = here .. "/lua/?.lua;" .. here .. "/lua/?/init.lua;" .. package.path
  -- NPU_MODULE_ROOT picks another build of npu/core.so (make sanitize uses build-san).
  package.cpath = (os.getenv("NPU_MODULE_ROOT") or here) .. "/?.so;" .. package.cpath
end

local lu = require("luaunit")
local files = {}
local p = io.popen('ls "' .. here .. '/spec"')
for f in p:lines() do
  if f:match("_spec%.lua$") then files[#files + 1] = f end
end
p:close()
table.sort(files)
SPEC_DIR = here .. "/spec"
ROOT_DIR = here
for _, f in ipairs(files) do dofile(here .. "/spec/" .. f) end
local runner = lu.LuaUnit.new()
local n_bad = runner:runSuite(table.unpack(arg))
-- LuaUnit's text output counts the skipped tests ("S", "n skipped") but never says why: list
-- them with their reasons (on stderr, which the TAP and JUnit outputs leave alone).
for _, node in ipairs(runner.result and runner.result.skippedTests or {}) do
  io.stderr:write(("skipped %s: %s\n"):format(node.testName, tostring(node.msg)))
end
os.exit(n_bad)
