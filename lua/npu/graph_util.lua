--- npu.graph_util — a trained graph frozen for deployment (`tf.compat.v1.graph_util`), over
-- npu.core.session_freeze (npu_session_freeze, csrc/io/freeze.c).
--
--   local frozen = npu.graph_util.convert_variables_to_constants(sess, g, { "probs" })
--   local serve <close> = npu.Session{graph = frozen, options = {precision_mode = ...}}
--
-- Why: a variable can change between runs, so every run reads it, and under a reduced
-- precision mode casts it to bfloat16 / float16 again; a const is rounded once when the plan
-- compiles, and constant filters are packed once per plan (docs/import.md, "Freezing a
-- trained graph for deployment").
-- Also reachable as npu.compat.v1.graph_util and npu.graph_util (TensorFlow 1.15's tf.graph_util).
-- @module npu.graph_util
local core = require("npu.core")
local errors = require("npu.errors")

local M = {}

local WHERE = "npu.graph_util.convert_variables_to_constants"

-- A node name from what a script names an output by: "probs", "probs:0", an Output or an
-- Operation (TensorFlow takes node names; the binding takes "probs:0" as its node too).
local function node_name(v, i, graph)
  if type(v) == "string" then return v end
  local ok, name = pcall(function() return v:name() end)
  if ok and type(name) == "string" then
    -- by name alone, another graph's "probs" would freeze this graph's node of that name
    local gok, owner = pcall(function() return v:graph() end)
    if gok and owner ~= nil and not rawequal(owner, graph) then
      errors.raise(WHERE, "NPU_ERR_ARG", ("output_node_names[%d] ('%s') is a node of another graph "
        .. "than argument 2"):format(i, name))
    end
    return name
  end
  errors.raise(WHERE, "NPU_ERR_ARG", ("output_node_names[%d] is a %s, expected a node name")
    :format(i, errors.typename(v)))
end

-- A list of names (nil: none), checked to name variables of the graph.
local function variable_names(list, what, known)
  if list == nil then return nil end
  if type(list) ~= "table" then
    errors.raise(WHERE, "NPU_ERR_ARG", ("%s must be a list of variable names, got %s")
      :format(what, errors.typename(list)))
  end
  errors.check_list(WHERE, what, list)
  local set = {}
  for i, name in ipairs(list) do
    if type(name) ~= "string" then
      errors.raise(WHERE, "NPU_ERR_ARG", ("%s[%d] is a %s, expected a variable name")
        :format(what, i, errors.typename(name)))
    end
    name = name:gsub(":0$", "")
    if not known[name] then
      local names = {}
      for k in pairs(known) do names[#names + 1] = k end
      table.sort(names)
      local best = errors.suggest(name, names)
      errors.raise(WHERE, "NPU_ERR_NOT_FOUND", ("%s names '%s', which is no variable of the graph%s")
        :format(what, name, best and (" (did you mean '" .. best .. "'?)")
          or (#names > 0 and " (its variables: " .. table.concat(names, ", ") .. ")" or " (it has none)")))
    end
    set[name] = true
  end
  return set
end

local OPTS = { "variable_names_whitelist", "variable_names_blacklist",
               "variable_names_allowlist", "variable_names_denylist" }

--- Replaces the variables a graph's outputs read by constants holding the session's current
-- values (`tf.compat.v1.graph_util.convert_variables_to_constants`), in a new graph that keeps
-- only what those outputs need: their ancestors through inputs and control dependencies,
-- under the same node names.  Each variable becomes a const of its name (its reads, e.g. an
-- Identity "w/read", stay as they are); placeholders stay; initializers, assigns, gradients
-- and optimizer nodes the outputs do not need are left out.  A variable kept a variable (by
-- the lists below) keeps its initializer, so `frozen:global_variables_initializer()` works.
-- The values are read by one run of sess, as `sess:run(variables)` would.  Conds and while
-- loops (TensorArray loops, imported If / While) are kept, and a variable read inside a
-- branch or loop body becomes a const the branch or body reads.
-- @tparam Session sess the session holding the trained values
-- @tparam Graph graph the session's graph (TensorFlow passes `sess.graph_def`)
-- @tparam {string,...}|string output_node_names node names ("probs"; "probs:0", an Output or
--   an Operation are taken as their node)
-- @tparam[opt] table|{string,...} opts `variable_names_whitelist` (only these are frozen),
--   `variable_names_blacklist` (these stay variables); `variable_names_allowlist` and
--   `variable_names_denylist` are TensorFlow 2's names for the same.  TensorFlow's positional
--   form works too: a list here is the whitelist, and a 5th argument the blacklist.  An empty
--   table `{}` is no options (every variable frozen), not an empty whitelist, which in
--   TensorFlow freezes none: write `{variable_names_whitelist = {}}` for that ({} with a 5th
--   argument is an error, as it reads two ways).
-- @param[opt] blacklist with a list as 4th argument, the blacklist
-- @treturn Graph the frozen graph
-- @raise NPU_ERR_NOT_FOUND (an output node or a listed variable not in the graph, named);
--   NPU_ERR_STATE (a variable the outputs need is not initialised in sess, named; a graph
--   that is not the session's); NPU_ERR_ARG (the outputs need an assign writing a frozen
--   variable, at the top level or in a loop body; an output inside a cond branch or loop
--   body), and for malformed arguments
-- @usage local frozen = npu.graph_util.convert_variables_to_constants(sess, g, {"probs"})
-- npu.export_graph_def(frozen, "model.pb")
function M.convert_variables_to_constants(sess, graph, output_node_names, opts, blacklist, ...)
  errors.check_no_more(WHERE, 5, ...)
  if getmetatable(sess) ~= core.Session_mt then
    errors.raise(WHERE, "NPU_ERR_ARG", "argument 1 must be an npu.Session, got " .. errors.typename(sess))
  end
  if getmetatable(graph) ~= core.Graph_mt then
    errors.raise(WHERE, "NPU_ERR_ARG", "argument 2 must be an npu.Graph (the session's), got "
      .. errors.typename(graph))
  end
  if type(output_node_names) ~= "table" or getmetatable(output_node_names) ~= nil then
    output_node_names = { output_node_names }
  end
  errors.check_list(WHERE, "output_node_names", output_node_names)
  local outputs = {}
  for i, v in ipairs(output_node_names) do outputs[i] = node_name(v, i, graph) end
  if #outputs == 0 then
    errors.raise(WHERE, "NPU_ERR_ARG", "output_node_names is empty: name the model's outputs")
  end

  local white, black
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(WHERE, "NPU_ERR_ARG", "argument 4 must be a table of options or the whitelist, got "
      .. errors.typename(opts))
  end
  if opts ~= nil and next(opts) == nil and blacklist ~= nil then
    -- TensorFlow's positional [] with a blacklist freezes nothing; {} here is no options
    errors.raise(WHERE, "NPU_ERR_ARG", "argument 4 is {} with a blacklist as argument 5: pass nil "
      .. "for no whitelist, or {variable_names_whitelist = {}} to freeze nothing")
  end
  if opts ~= nil and next(opts) == nil then opts = nil end -- {}: no options
  if opts ~= nil and #opts > 0 then -- TensorFlow's positional lists
    white, black = opts, blacklist
  elseif opts ~= nil then
    if blacklist ~= nil then
      errors.raise(WHERE, "NPU_ERR_ARG", "argument 5 (the blacklist) goes with a whitelist list, "
        .. "not with an options table: give variable_names_blacklist in it")
    end
    errors.check_keys(WHERE, opts, OPTS, "option")
    -- false would read as absent below (`a or b`), freezing every variable without a word
    for _, k in ipairs(OPTS) do
      if opts[k] ~= nil and type(opts[k]) ~= "table" then
        errors.raise(WHERE, "NPU_ERR_ARG", ("%s must be a list of variable names, got %s")
          :format(k, errors.typename(opts[k])))
      end
    end
    if opts.variable_names_whitelist ~= nil and opts.variable_names_allowlist ~= nil then
      errors.raise(WHERE, "NPU_ERR_ARG", "give variable_names_whitelist or variable_names_allowlist, not both")
    end
    if opts.variable_names_blacklist ~= nil and opts.variable_names_denylist ~= nil then
      errors.raise(WHERE, "NPU_ERR_ARG", "give variable_names_blacklist or variable_names_denylist, not both")
    end
    white = opts.variable_names_whitelist or opts.variable_names_allowlist
    black = opts.variable_names_blacklist or opts.variable_names_denylist
  else
    black = blacklist
  end

  local known, order = {}, {}
  for i, v in ipairs(graph:variables()) do
    order[i] = v:name():gsub(":0$", "")
    known[order[i]] = true
  end
  local white_set = variable_names(white, "variable_names_whitelist", known)
  local black_set = variable_names(black, "variable_names_blacklist", known)
  local keep = {}
  for _, name in ipairs(order) do
    if (white_set and not white_set[name]) or (black_set and black_set[name]) then
      keep[#keep + 1] = name
    end
  end
  return core.session_freeze(sess, graph, outputs, keep)
end

return M
