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
-- before failing with NPU_ERR_TIMEOUT.  Only the world group ("hccl_world_group") exists.
-- @module npu.hccl
local core = require("npu.core")
local errors = require("npu.errors")

local M = {}

local function ranks()
  local rank, size, local_rank, local_size = core.hccl_ranks()
  return { rank = rank, size = size, local_rank = local_rank, local_size = local_size }
end

local function check_group(where, group)
  if group ~= nil and group ~= "hccl_world_group" then
    errors.raise("npu.hccl." .. where, "NPU_ERR_UNSUPPORTED", ("group '%s': only hccl_world_group "
      .. "(every rank) is supported"):format(tostring(group)))
  end
end

--- This process' rank (`hccl_ops`' get_rank_id); 0 when not started by mpirun.
-- @tparam[opt] string group "hccl_world_group" or nil (the only group)
-- @treturn integer
-- @raise NPU_ERR_ARG for another group
function M.get_rank_id(group) check_group("get_rank_id", group); return ranks().rank end
--- The number of ranks (get_rank_size); 1 when not started by mpirun.
-- @tparam[opt] string group "hccl_world_group" or nil
-- @treturn integer
function M.get_rank_size(group) check_group("get_rank_size", group); return ranks().size end
--- This process' rank among those on its machine (get_local_rank_id).
-- @tparam[opt] string group "hccl_world_group" or nil
-- @treturn integer
function M.get_local_rank_id(group) check_group("get_local_rank_id", group); return ranks().local_rank end
--- The number of ranks on this machine (get_local_rank_size).
-- @tparam[opt] string group "hccl_world_group" or nil
-- @treturn integer
function M.get_local_rank_size(group) check_group("get_local_rank_size", group); return ranks().local_size end
--- Whether the library was built with MPI (else every collective fails, saying so).
-- @treturn boolean
function M.available() return core.hccl_available() end

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

local function check_rank_size(where, rank_size)
  if math.type(rank_size) ~= "integer" then
    errors.raise("npu.hccl." .. where, "NPU_ERR_ARG", "rank_size must be an integer, got " .. errors.typename(rank_size))
  end
  local size = ranks().size
  if rank_size ~= size then
    errors.raise("npu.hccl." .. where, "NPU_ERR_ARG", ("rank_size %d but there %s %d rank%s"):format(
      rank_size, size == 1 and "is" or "are", size, size == 1 and "" or "s"))
  end
end

--- Reduces a tensor over every rank; every rank gets the result (`hccl_ops.allreduce`).
-- @tparam Output tensor float32, float16 or int32
-- @tparam string reduction "sum", "prod", "max" or "min"
-- @tparam[opt] integer fusion TF Adapter's fusion attribute (checked, no effect here)
-- @tparam[opt] integer fusion_id
-- @tparam[opt] string group "hccl_world_group" (the only group)
-- @treturn Output
-- @raise NPU_ERR_ARG when tensor is not an Output; at run time NPU_ERR_TIMEOUT when the
--   other ranks do not come within hccl_timeout
function M.allreduce(tensor, reduction, fusion, fusion_id, group)
  local g = graph_of("allreduce", tensor)
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
  check_rank_size("allgather", rank_size)
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
  check_rank_size("reduce_scatter", rank_size)
  return g:op("hcom_reduce_scatter", { tensor },
    attrs({ reduction = reduction, rank_size = rank_size }, nil, nil, group))
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
