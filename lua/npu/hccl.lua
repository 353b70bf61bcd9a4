--- npu.hccl (also npu.hccl_ops) — data-parallel training across processes over MPI, with
-- the names of TF Adapter's hccl_ops and its rank queries (csrc/dist/, docs/distributed.md).
--
--   mpirun -np 2 lua5.4 train.lua
--   local rank, size = npu.hccl.get_rank_id(), npu.hccl.get_rank_size()
--   local sum = npu.hccl.allreduce(x, "sum")                 -- an Output, on every rank
--   local vars = npu.hccl.broadcast({w, b}, 0)                 -- rank 0's values
--
-- A process not started by mpirun is rank 0 of 1.  The collectives are ops of the graph: they
-- run where the plan reaches them (inside iterations_per_loop loops too), float32, float16 or
-- int32, and wait at most the session's hccl_timeout (HCCL_EXEC_TIMEOUT) for the other ranks
-- before failing with NPU_ERR_TIMEOUT.  send / receive move one tensor between two ranks;
-- create_group makes a named subset of the ranks that every collective, send and receive can
-- name with its `group` argument (default "hccl_world_group": every rank).
--
--   npu.hccl.create_group("pair", 2, { 0, 1 })               -- on ranks 0 and 1
--   if rank == 0 then npu.hccl.send(x, 7, 1, "pair")           -- sr_tag 7 to group rank 1
--   else y = npu.hccl.receive({ 4 }, "float32", 7, 0, "pair") end
-- @module npu.hccl
local core = require("npu.core")
local errors = require("npu.errors")

local M = {}
local WORLD = "hccl_world_group"

local function ranks()
  local rank, size, local_rank, local_size = core.hccl_ranks()
  return { rank = rank, size = size, local_rank = local_rank, local_size = local_size }
end

local function check_group(where, group)
  if group ~= nil and type(group) ~= "string" then
    errors.raise("npu.hccl." .. where, "NPU_ERR_ARG", "group must be a string (a group's name), got "
      .. errors.typename(group))
  end
  return group or WORLD
end

-- The size of group (members or not: an unknown group is an error naming it).
local function group_size(where, group)
  group = check_group(where, group)
  if group == WORLD then return ranks().size end
  return core.hccl_group_size(group, "npu.hccl." .. where)
end

-- Rank queries (group: a group's name, default "hccl_world_group").  get_rank_id and the
-- local ones fail for a group this process is not in; get_local_rank_id / size count the
-- group's ranks on this machine (MPI_COMM_TYPE_SHARED).
local function group_ranks(where, group)
  group = check_group(where, group)
  if group == WORLD then return ranks() end
  local rank, size, local_rank, local_size = core.hccl_group_ranks(group, "npu.hccl." .. where)
  return { rank = rank, size = size, local_rank = local_rank, local_size = local_size }
end

--- This process' rank in group (`hccl_ops`' get_rank_id); 0 when not started by mpirun.
-- @tparam[opt="hccl_world_group"] string group a group's name
-- @treturn integer
-- @raise NPU_ERR_ARG for an unknown group or one this process is not in
function M.get_rank_id(group, ...)
  errors.check_no_more("npu.hccl.get_rank_id", 1, ...)
  return group_ranks("get_rank_id", group).rank
end
--- The number of ranks in group (get_rank_size); 1 when not started by mpirun.
-- @tparam[opt="hccl_world_group"] string group a group's name
-- @treturn integer
-- @raise NPU_ERR_ARG for an unknown group
function M.get_rank_size(group, ...)
  errors.check_no_more("npu.hccl.get_rank_size", 1, ...)
  return group_size("get_rank_size", group)
end
--- This process' rank among the group's ranks on its machine (get_local_rank_id).
-- @tparam[opt="hccl_world_group"] string group a group's name
-- @treturn integer
-- @raise NPU_ERR_ARG for an unknown group or one this process is not in
function M.get_local_rank_id(group, ...)
  errors.check_no_more("npu.hccl.get_local_rank_id", 1, ...)
  return group_ranks("get_local_rank_id", group).local_rank
end
--- The number of the group's ranks on this machine (get_local_rank_size).
-- @tparam[opt="hccl_world_group"] string group a group's name
-- @treturn integer
-- @raise NPU_ERR_ARG for an unknown group or one this process is not in
function M.get_local_rank_size(group, ...)
  errors.check_no_more("npu.hccl.get_local_rank_size", 1, ...)
  return group_ranks("get_local_rank_size", group).local_size
end

--- Whether the library was built with MPI (else every collective fails, saying so).
-- @treturn boolean
function M.available() return core.hccl_available() end

local function check_int(where, name, v)
  if math.type(v) ~= "integer" then
    errors.raise("npu.hccl." .. where, "NPU_ERR_ARG", ("%s must be an integer, got %s"):format(name,
      math.type(v) == "float" and tostring(v) or errors.typename(v)))
  end
  return v
end

--- Makes a named group of ranks (`hccl_ops`' create_group).  Every member calls it with the
-- same arguments (in the same order as its other create_group calls) and it returns when all
-- have.  A rank outside the group may call it too: it then knows the group's size and ranks,
-- and cannot use it.
-- @tparam string group the new group's name
-- @tparam integer rank_num the number of ranks in it
-- @tparam {integer,...} rank_ids the world ranks, group rank i being rank_ids[i + 1]
-- @tparam[opt] table opts {timeout = seconds}: how long to wait for the other members
--   (default HCCL_EXEC_TIMEOUT, else 1836; 0: for ever)
-- @raise NPU_ERR_ARG for a duplicate name, a rank out of range or listed twice, rank_num not
--   #rank_ids; NPU_ERR_TIMEOUT when members do not come in time
function M.create_group(group, rank_num, rank_ids, opts, ...)
  local where = "npu.hccl.create_group"
  errors.check_no_more(where, 4, ...)
  if type(group) ~= "string" then
    errors.raise(where, "NPU_ERR_ARG", "group must be a string, got " .. errors.typename(group))
  end
  check_int("create_group", "rank_num", rank_num)
  if type(rank_ids) ~= "table" then
    errors.raise(where, "NPU_ERR_ARG", "rank_ids must be a list of ranks, got " .. errors.typename(rank_ids))
  end
  if #rank_ids ~= rank_num then
    errors.raise(where, "NPU_ERR_ARG", ("rank_num %d but rank_ids lists %d ranks"):format(rank_num, #rank_ids))
  end
  if opts ~= nil and type(opts) ~= "table" then -- a bare timeout number would be dropped
    errors.raise(where, "NPU_ERR_ARG", "opts must be a table {timeout = seconds}, got " .. errors.typename(opts))
  end
  errors.check_keys(where, opts, { "timeout" })
  local timeout = opts and opts.timeout or tonumber(os.getenv("HCCL_EXEC_TIMEOUT") or "") or 1836
  if type(timeout) ~= "number" or timeout < 0 then
    errors.raise(where, "NPU_ERR_ARG", "timeout must be a number of seconds >= 0, got " .. tostring(timeout))
  end
  core.hccl_create_group(group, rank_ids, math.floor(timeout * 1000))
end

--- Forgets a group made by create_group (collectives started on it complete first).
-- @tparam string group the group's name
-- @raise NPU_ERR_ARG for an unknown group
function M.destroy_group(group, ...)
  errors.check_no_more("npu.hccl.destroy_group", 1, ...)
  if type(group) ~= "string" then
    errors.raise("npu.hccl.destroy_group", "NPU_ERR_ARG", "group must be a string, got " .. errors.typename(group))
  end
  core.hccl_destroy_group(group)
end

--- The world rank of a group's rank (`hccl_ops`' get_world_rank_from_group_rank).
-- @tparam string group the group's name
-- @tparam integer group_rank_id a rank of the group
-- @treturn integer
-- @raise NPU_ERR_ARG for an unknown group or a rank out of range
function M.get_world_rank_from_group_rank(group, group_rank_id, ...)
  errors.check_no_more("npu.hccl.get_world_rank_from_group_rank", 2, ...)
  check_int("get_world_rank_from_group_rank", "group_rank_id", group_rank_id)
  return core.hccl_world_rank(check_group("get_world_rank_from_group_rank", group), group_rank_id)
end
--- A world rank's rank in a group (`hccl_ops`' get_group_rank_from_world_rank).
-- @tparam integer world_rank_id a world rank that is in the group
-- @tparam string group the group's name
-- @treturn integer
-- @raise NPU_ERR_ARG for an unknown group or a rank not in it
function M.get_group_rank_from_world_rank(world_rank_id, group, ...)
  errors.check_no_more("npu.hccl.get_group_rank_from_world_rank", 2, ...)
  check_int("get_group_rank_from_world_rank", "world_rank_id", world_rank_id)
  return core.hccl_group_rank(world_rank_id, check_group("get_group_rank_from_world_rank", group))
end

local npu_module
local function N()
  npu_module = npu_module or require("npu")
  return npu_module
end

local function graph_of(where, t)
  local npu = N()
  if not npu.is_output(t) then
    errors.raise("npu.hccl." .. where, "NPU_ERR_ARG", "tensor must be an npu.Output, got " .. errors.typename(t))
  end
  return t:graph()
end

local function attrs(base, fusion, fusion_id, group)
  if fusion ~= nil then base.fusion = fusion end
  if fusion_id ~= nil then base.fusion_id = fusion_id end
  if group ~= nil then base.group = group end
  return base
end

local function check_rank_size(where, rank_size, group)
  if math.type(rank_size) ~= "integer" then
    errors.raise("npu.hccl." .. where, "NPU_ERR_ARG", "rank_size must be an integer, got " .. errors.typename(rank_size))
  end
  local size = group_size(where, group)
  if rank_size ~= size then
    errors.raise("npu.hccl." .. where, "NPU_ERR_ARG", ("rank_size %d but there %s %d rank%s%s"):format(
      rank_size, size == 1 and "is" or "are", size, size == 1 and "" or "s",
      (group or WORLD) == WORLD and "" or (" in group '%s'"):format(group)))
  end
end

--- Reduces a tensor over every rank; every rank gets the result (`hccl_ops.allreduce`).
-- @tparam Output tensor float32, float16 or int32
-- @tparam string reduction "sum", "prod", "max" or "min"
-- @tparam[opt] integer fusion TF Adapter's fusion attribute (checked, no effect here)
-- @tparam[opt] integer fusion_id
-- @tparam[opt="hccl_world_group"] string group
-- @treturn Output
-- @raise NPU_ERR_ARG when tensor is not an Output; at run time NPU_ERR_TIMEOUT when the
--   other ranks do not come within hccl_timeout
function M.allreduce(tensor, reduction, fusion, fusion_id, group)
  local g = graph_of("allreduce", tensor)
  group_size("allreduce", group)
  return g:op("hcom_allreduce", { tensor }, attrs({ reduction = reduction }, fusion, fusion_id, group))
end

--- root_rank's values of tensors on every rank (`hccl_ops.broadcast`).
-- @tparam Output|{Output,...} tensors
-- @tparam integer root_rank
-- @tparam[opt] integer fusion
-- @tparam[opt] integer fusion_id
-- @tparam[opt] string group
-- @treturn Output|{Output,...} one Output for one tensor, else a list
-- @raise NPU_ERR_ARG for an empty list or a list with holes
function M.broadcast(tensors, root_rank, fusion, fusion_id, group)
  local npu = N()
  local single = npu.is_output(tensors)
  local list = single and { tensors } or tensors
  if type(list) ~= "table" or #list == 0 then
    errors.raise("npu.hccl.broadcast", "NPU_ERR_ARG", "give a tensor or a list of them, got " .. errors.typename(tensors))
  end
  errors.check_list("npu.hccl.broadcast", "tensors", list)
  local g = graph_of("broadcast", list[1])
  group_size("broadcast", group)
  local out = {}
  for first = 1, #list, 16 do -- at most 16 tensors per op
    local chunk = table.move(list, first, math.min(first + 15, #list), 1, {})
    local r = g:op("hcom_broadcast", chunk, attrs({ root_rank = root_rank }, fusion, fusion_id, group))
    if npu.is_output(r) then r = { r } end
    for _, o in ipairs(r) do out[#out + 1] = o end
  end
  return single and out[1] or out
end

--- The ranks' tensors concatenated along dim 0, on every rank (`hccl_ops.allgather`).
-- @tparam Output tensor
-- @tparam integer rank_size must be the number of ranks
-- @tparam[opt] string group
-- @treturn Output
-- @raise NPU_ERR_ARG when rank_size is not the number of ranks
function M.allgather(tensor, rank_size, group)
  local g = graph_of("allgather", tensor)
  check_rank_size("allgather", rank_size, group)
  return g:op("hcom_all_gather", { tensor }, attrs({ rank_size = rank_size }, nil, nil, group))
end

--- The tensor reduced over every rank, rank r keeping part r of rank_size along dim 0
-- (`hccl_ops.reduce_scatter`).
-- @tparam Output tensor
-- @tparam string reduction "sum", "prod", "max" or "min"
-- @tparam integer rank_size must be the number of ranks
-- @tparam[opt] string group
-- @treturn Output
function M.reduce_scatter(tensor, reduction, rank_size, group)
  local g = graph_of("reduce_scatter", tensor)
  check_rank_size("reduce_scatter", rank_size, group)
  return g:op("hcom_reduce_scatter", { tensor },
    attrs({ reduction = reduction, rank_size = rank_size }, nil, nil, group))
end

-- A send's or receive's peer: a rank of group other than this one.
local function check_peer(where, what, rank, group)
  check_int(where, what, rank)
  local size = group_size(where, group)
  if rank < 0 or rank >= size then
    errors.raise("npu.hccl." .. where, "NPU_ERR_ARG", ("%s %d is out of range: group '%s' has %d rank%s")
      :format(what, rank, group or WORLD, size, size == 1 and "" or "s"))
  end
  local me = group_ranks(where, group).rank
  if rank == me then
    errors.raise("npu.hccl." .. where, "NPU_ERR_ARG", ("%s %d is this rank: a rank cannot %s itself")
      :format(what, rank, where == "send" and "send to" or "receive from"))
  end
end

--- Sends a tensor to another rank (`hccl_ops.send`): the receive on dest_rank with the same
-- sr_tag and this rank as src_rank takes it.  Run the returned operation (as a target, or
-- through npu.group / control dependencies); it completes when the receiver has the tensor.
-- @tparam Output tensor float32, float16 or int32, its shape known
-- @tparam integer sr_tag the tag (0 to 16383) the receive names
-- @tparam integer dest_rank the receiving rank of group
-- @tparam[opt="hccl_world_group"] string group
-- @treturn Operation
-- @raise NPU_ERR_ARG for this rank or a rank out of range; at run time NPU_ERR_TIMEOUT past
--   hccl_timeout, and a shape or dtype mismatch with the receive fails on both ranks
function M.send(tensor, sr_tag, dest_rank, group, ...)
  errors.check_no_more("npu.hccl.send", 4, ...)
  local g = graph_of("send", tensor)
  check_int("send", "sr_tag", sr_tag)
  check_peer("send", "dest_rank", dest_rank, group)
  return g:op("hcom_send", { tensor }, attrs({ sr_tag = sr_tag, dest_rank = dest_rank }, nil, nil, group))
end

--- Receives the tensor another rank sends with sr_tag (`hccl_ops.receive`).
-- @tparam {integer,...} shape the sent tensor's shape (every dimension known)
-- @tparam string data_type the sent tensor's dtype: "float32", "float16" or "int32"
-- @tparam integer sr_tag the send's tag
-- @tparam integer src_rank the sending rank of group
-- @tparam[opt="hccl_world_group"] string group
-- @tparam[opt] Graph graph the graph the op goes into (default: the default graph)
-- @treturn Output
-- @raise NPU_ERR_ARG for this rank or a rank out of range; at run time NPU_ERR_TIMEOUT past
--   hccl_timeout, and a shape or dtype mismatch fails on both ranks, naming both
function M.receive(shape, data_type, sr_tag, src_rank, group, graph, ...)
  local npu = N()
  errors.check_no_more("npu.hccl.receive", 6, ...)
  if graph ~= nil and errors.typename(graph) ~= "npu.Graph" then
    errors.raise("npu.hccl.receive", "NPU_ERR_ARG", "graph must be an npu.Graph, got " .. errors.typename(graph))
  end
  if type(shape) ~= "table" then
    errors.raise("npu.hccl.receive", "NPU_ERR_ARG", "shape must be a list of dimensions, got " .. errors.typename(shape))
  end
  check_int("receive", "sr_tag", sr_tag)
  check_peer("receive", "src_rank", src_rank, group)
  local g = graph or npu.get_default_graph()
  return g:op("hcom_receive", {}, attrs({ shape = shape, dtype = data_type, sr_tag = sr_tag,
    src_rank = src_rank }, nil, nil, group))
end

--- One operation assigning root_rank's value to every global variable of g, so every rank
-- starts from the same values (TF Adapter's `broadcast_global_variables`).  Run it after
-- the initializer; with one rank it does nothing.
-- @tparam Graph g
-- @tparam[opt=0] integer root_rank
-- @treturn Operation
-- @raise NPU_ERR_ARG when g is not a graph
function M.broadcast_global_variables(g, root_rank)
  local npu = N()
  local where = "npu.hccl.broadcast_global_variables"
  if getmetatable(g) ~= core.Graph_mt then
    errors.raise(where, "NPU_ERR_ARG", "argument 1 must be an npu.Graph, got " .. errors.typename(g))
  end
  root_rank = root_rank == nil and 0 or root_rank
  local size = ranks().size
  if math.type(root_rank) ~= "integer" or root_rank < 0 or root_rank >= size then
    errors.raise(where, "NPU_ERR_ARG", ("root_rank must be an integer rank in [0, %d), got %s")
      :format(size, tostring(root_rank) .. (type(root_rank) == "string" and " (a string)" or "")))
  end
  local vars, assigns = {}, {}
  for _, v in ipairs(g:global_variables()) do
    local dt = v:dtype()
    if dt == "float32" or dt == "float16" or dt == "int32" then vars[#vars + 1] = v end
  end
  -- one rank: nothing to broadcast (and no MPI needed), as the wrapper is the plain optimizer
  if #vars == 0 or size <= 1 then return g:group({}, "broadcast_global_variables") end
  -- one op per dtype run of at most 16
  local i = 1
  while i <= #vars do
    local chunk, dt = {}, vars[i]:dtype()
    while i <= #vars and #chunk < 16 and vars[i]:dtype() == dt do chunk[#chunk + 1] = vars[i]; i = i + 1 end
    local outs = M.broadcast(chunk, root_rank)
    for k, v in ipairs(chunk) do assigns[#assigns + 1] = npu.assign(v, outs[k]) end
  end
  return g:group(assigns, "broadcast_global_variables")
end

--- The gradient buckets of the distributed optimizer: grads (a list of Outputs) in the order
-- the backward pass makes them (the last layers' first), cut into runs of one dtype of at most
-- bucket_bytes (a gradient bigger than that alone), at most 16 per bucket.
local DTYPE_BYTES = { float32 = 4, float16 = 2, int32 = 4 }
function M._buckets(grads, bucket_bytes)
  local buckets, cur, bytes = {}, nil, 0
  for i = #grads, 1, -1 do
    local gr = grads[i]
    local n = 1
    for _, d in ipairs(gr:shape() or {}) do n = n * math.max(d, 1) end
    local b = n * (DTYPE_BYTES[gr:dtype()] or 4)
    if not cur or cur.dtype ~= gr:dtype() or #cur >= 16 or (bytes + b > bucket_bytes and #cur > 0) then
      cur = { dtype = gr:dtype() }
      buckets[#buckets + 1] = cur
      bytes = 0
    end
    cur[#cur + 1] = i
    bytes = bytes + b
  end
  return buckets
end

--- Averages grads (a list, nil entries kept) over the ranks: each bucket one allreduce
-- started as soon as its gradients exist (hcom_allreduce_start; hcom_parallel lets the plan
-- start it early) and waited for where the update needs it; then * 1/rank_size.  With one
-- rank the gradients come back unchanged.
function M._average_gradients(grads, opts)
  local npu = N()
  local size = ranks().size
  if size <= 1 then return grads end
  local present, where = {}, {}
  for i = 1, grads.n or #grads do
    if grads[i] ~= nil then present[#present + 1] = grads[i]; where[#present] = i end
  end
  local out = { n = grads.n }
  for i = 1, grads.n or #grads do out[i] = grads[i] end
  for _, bucket in ipairs(M._buckets(present, opts and opts.bucket_bytes or 4 * 1024 * 1024)) do
    local ins = {}
    for k, i in ipairs(bucket) do ins[k] = present[i] end
    local g = ins[1]:graph()
    local ticket = g:op("hcom_allreduce_start", ins, { reduction = "sum" }, "hcom_allreduce_start")
    local waited = g:op("hcom_allreduce_wait", { ticket, table.unpack(ins) }, nil, "hcom_allreduce_wait")
    if npu.is_output(waited) then waited = { waited } end
    for k, i in ipairs(bucket) do
      local dt = waited[k]:dtype()
      out[where[i]] = waited[k] * g:const(npu.tensor(1 / size, dt))
    end
  end
  return out
end

return M
