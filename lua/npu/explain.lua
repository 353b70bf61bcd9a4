-- explain.lua — the listing that print(sess:explain(fetches)) shows: a header with the plan's
-- totals and memory, then one line per step: index, op, node, the pass that made the step
-- with the nodes it absorbed, and each output's dtype, shape, size and where it lives.  A cond's
-- branches and a while loop's condition and body follow their step, indented, their steps
-- numbered as the plan numbers them (the step's index, from 1 here; dumps and profiles name a
-- step by its index from 0).
-- The table itself comes from the binding (npu_session_explain's JSON, decoded); this file
-- only formats it.
local M = {}

local function shape_str(shape)
  local parts = {}
  for i, d in ipairs(shape or {}) do parts[i] = tostring(d) end
  return "[" .. table.concat(parts, ",") .. "]"
end

local function value_str(v)
  local where = v.memory or "?"
  if v.alias_of then
    where = "alias of " .. v.alias_of -- shares its input's arena block: the step copies nothing
  elseif v.offset then
    where = where .. "@" .. v.offset
  end
  return ("%s %s %s %d B %s"):format(v.name, v.dtype, shape_str(v.shape), v.bytes, where)
end

local function pass_str(step)
  if not step.pass and #(step.absorbed or {}) == 0 then return "" end
  local s = step.pass or "?"
  if #(step.absorbed or {}) > 0 then s = s .. "(" .. table.concat(step.absorbed, ",") .. ")" end
  return s
end

--- The listing of explain result e.
function M.tostring(e)
  local m = e.memory or {}
  local lines = {
    ("plan: %d steps, %d folded, %d iteration%s, precision %s%s%s"):format(e.n_steps, e.folded,
      e.iterations, e.iterations == 1 and "" or "s", tostring(e.precision_mode),
      e.reference and " (reference path)" or "",
      e.generic and ", dynamic shape (any size at the feeds' -1 dims)" or ""),
    ("memory: arena %d B%s for %d values%s%s (%d B unplanned, live peak %d B%s), own %d B%s, constants %d B%s, scratch %d B, widening %d B, total %d B"):format(
      m.arena_bytes or 0, m.arena_shared and " (the session's, shared)" or "", m.planned_values or 0,
      m.buffers_in_arena and " and the step buffers" or "",
      (m.aliased_values or 0) > 0 and (", %d of them aliases"):format(m.aliased_values) or "",
      m.planned_bytes or 0, m.live_peak_bytes or 0,
      m.planning and "" or ", planning off", m.own_bytes or 0,
      (m.variable_copy_bytes or 0) > 0 and (" (%d B variables' kept copies)"):format(m.variable_copy_bytes) or "",
      m.constant_bytes or 0,
      (m.prepared_bytes or 0) > 0 and (" (%d B filters pre-transformed)"):format(m.prepared_bytes) or "",
      m.scratch_bytes or 0, m.round_bytes or 0, m.total_bytes or 0),
  }
  local folded = e.folded_nodes or {}
  if #folded > 0 then
    local shown = {}
    for i = 1, math.min(#folded, 8) do shown[i] = folded[i] end
    lines[#lines + 1] = "folded: " .. table.concat(shown, ", ") ..
      (#folded > 8 and (", ... (%d more)"):format(#folded - 8) or "")
  end
  -- one line per step; a cond's or while's blocks below it, indented, each under its name
  local function list(steps, indent)
    for i, s in ipairs(steps or {}) do
      local outs = {}
      for j, v in ipairs(s.outputs or {}) do outs[j] = value_str(v) end
      local notes = ""
      if s.round_in or s.round_out then
        notes = (" round %s/%s"):format(s.round_in or "-", s.round_out or "-")
      end
      if s.impl == "high_performance" then notes = notes .. " high_performance" end
      if s.algo and s.algo ~= "im2col" then notes = notes .. " " .. s.algo end
      if s.prepared then notes = notes .. " (filter pre-transformed)" end
      if s.copy_of then notes = notes .. " (kept: made again only when the variable is written)" end
      if s.dynamic then notes = notes .. " (shaped when it runs)" end
      if s.blocks and s.op == "while" then
        notes = notes .. (" maximum_iterations %s"):format(s.max_iterations or "none")
      end
      lines[#lines + 1] = ("%s%4d  %-18s %-28s %-24s -> %s%s"):format(indent, s.index and s.index + 1 or i,
        s.op, s.node, pass_str(s), table.concat(outs, "; "), notes)
      for _, b in ipairs(s.blocks or {}) do
        lines[#lines + 1] = ("%s      %s:%s"):format(indent, b.name, #b.steps == 0 and " (no steps)" or "")
        list(b.steps, indent .. "        ")
      end
    end
  end
  list(e.steps, "")
  return table.concat(lines, "\n")
end

return M
