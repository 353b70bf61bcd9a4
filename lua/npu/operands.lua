--- npu.operands — what the modules installed into `npu` (nn_extra, tf_extra, summary) share for
-- reading their operands, so that each asks the same question the same way.
-- @module npu.operands
local M = {}

--- The graph an op built from these operands belongs to: that of the first npu.Output among
-- them (in argument order), else the default graph (every operand is Lua data or a tensor,
-- which become constants of it).
function M.graph_of(npu, ...)
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if npu.is_output(v) then return v:graph() end
  end
  return npu.get_default_graph()
end

return M
