-- spec/mpi/common.lua — what the scripts run under `mpirun -np 2` (spec/distributed_spec.lua)
-- share: the checkout's npu on the paths, and check(name, ok, why) printing one line per
-- check ("ok <rank> <name>" or "FAIL <rank> <name>: <why>") for the spec to read.
local root = arg[0]:match("^(.*)/spec/mpi/[^/]+$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = (os.getenv("NPU_MODULE_ROOT") or root) .. "/?.so;" .. package.cpath
local npu = require("npu")
local rank = npu.hccl.get_rank_id()

local M = { npu = npu, rank = rank, size = npu.hccl.get_rank_size() }

function M.check(name, ok, why)
  io.write(ok and ("ok %d %s\n"):format(rank, name) or ("FAIL %d %s: %s\n"):format(rank, name, tostring(why)))
  io.flush()
end

-- Seconds on a monotonic clock (os.clock is CPU time).
function M.now()
  local p = io.popen("cat /proc/uptime")
  local v = tonumber(p:read("l"):match("^(%S+)"))
  p:close()
  return v
end

-- Whether a and b (nested tables of numbers) are equal elementwise within tolerance tol
-- (0: bitwise, as Lua numbers), with the first difference.
function M.close(a, b, tol)
  local fa, fb = {}, {}
  local function flat(t, out)
    if type(t) ~= "table" then out[#out + 1] = t return end
    for _, v in ipairs(t) do flat(v, out) end
  end
  flat(a, fa)
  flat(b, fb)
  if #fa ~= #fb then return false, ("%d vs %d elements"):format(#fa, #fb) end
  for i = 1, #fa do
    local d = math.abs(fa[i] - fb[i])
    if (tol == 0 and fa[i] ~= fb[i]) or d > tol * math.max(1, math.abs(fb[i])) then
      return false, ("element %d: %.9g vs %.9g"):format(i, fa[i], fb[i])
    end
  end
  return true
end

return M
