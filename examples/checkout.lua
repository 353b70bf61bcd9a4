-- checkout.lua — lets the examples run from any directory: when they sit in a checkout whose
-- module is built (`make`; NPU_MODULE_ROOT names another build, as make sanitize's), that build
-- is the one `require "npu"` finds; otherwise nothing changes and the installed module is used
-- (`luarocks make`, `make install`).  Each example runs it first:
--   local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
--   dofile(here .. "/checkout.lua")
-- Not an example itself.
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local build = os.getenv("NPU_MODULE_ROOT") or here .. "/.."
if package.searchpath("npu.core", build .. "/?.so") then
  package.path = here .. "/../lua/?.lua;" .. here .. "/../lua/?/init.lua;" .. package.path
  package.cpath = build .. "/?.so;" .. package.cpath
end
