-- spec/mpi/train_equal.lua — data-parallel SGD: each of N ranks trains on its 32 rows of a
-- 32 N-row batch through npu.train.npu_distributed_optimizer_wrapper; every step, the
-- variables equal those of one process training on all 32 N rows (mean loss) within float32
-- rounding, and the ranks' variables are bitwise equal.  HCOM_PARALLEL=0 turns hcom_parallel
-- off; the variables start from rank 0's through broadcast_global_variables.
local C = dofile((arg[0]:match("^(.*)/[^/]+$") or ".") .. "/common.lua")
local npu, rank, size, check = C.npu, C.rank, C.size, C.check
local parallel = os.getenv("HCOM_PARALLEL") ~= "0"
local rows, n_in, n_hidden, n_out, steps = 32, 6, 8, 3, 6

local seed = 12345
local function rnd() seed = (seed * 1103515245 + 12345) % 2147483648 return seed / 2147483648 - 0.5 end
local function matrix(r, c) local m = {} for i = 1, r do m[i] = {} for j = 1, c do m[i][j] = rnd() end end return m end
local w1, w2 = matrix(n_in, n_hidden), matrix(n_hidden, n_out)
local data = {}
for s = 1, steps do data[s] = { x = matrix(rows * size, n_in), y = matrix(rows * size, n_out) } end

local function model(batch, distributed)
  local g = npu.Graph()
  local x = g:placeholder("float32", { batch, n_in }, "x")
  local y = g:placeholder("float32", { batch, n_out }, "y")
  -- the ranks start from different values: broadcast_global_variables makes them equal
  local scaled = {}
  for i, row in ipairs(w1) do scaled[i] = {} for j, v in ipairs(row) do scaled[i][j] = distributed and v * (rank + 1) or v end end
  local init1 = npu.tensor(scaled)
  local v1 = g:variable(init1, "w1")
  local v2 = g:variable(npu.tensor(w2), "w2")
  local h = npu.nn.relu(x:matmul(v1))
  local d = h:matmul(v2) - y
  local loss = npu.reduce_mean(d * d)
  local opt = npu.train.GradientDescentOptimizer(0.1)
  if distributed then opt = npu.train.npu_distributed_optimizer_wrapper(opt) end
  return g, x, y, { v1, v2 }, opt:minimize(loss)
end

local function slice(m, first, n) local out = {} for i = 1, n do out[i] = m[first + i - 1] end return out end

local g1, x1, y1, vars1, train1 = model(rows * size, false)
local one <close> = npu.Session { graph = g1 }
one:run(g1:global_variables_initializer())
local g2, x2, y2, vars2, train2 = model(rows, true)
local bc = npu.hccl.broadcast(vars2, 0) -- rank 0's values, to compare bitwise
local dist <close> = npu.Session { graph = g2, options = { hcom_parallel = parallel } }
dist:run(g2:global_variables_initializer())
dist:run(npu.train.broadcast_global_variables(g2, 0))
local ok_close, ok_equal, why = true, true, nil
for s = 1, steps do
  one:run(train1, { [x1] = npu.tensor(data[s].x), [y1] = npu.tensor(data[s].y) })
  local first = rank * rows + 1
  dist:run(train2, { [x2] = npu.tensor(slice(data[s].x, first, rows)), [y2] = npu.tensor(slice(data[s].y, first, rows)) })
  local a, b = one:run(vars1), dist:run(vars2)
  local root = dist:run(bc)
  for k = 1, 2 do
    local ok, w = C.close(b[k]:totable(), a[k]:totable(), 2e-6)
    if not ok then ok_close, why = false, ("step %d var %d: %s"):format(s, k, w) end
    ok, w = C.close(b[k]:totable(), root[k]:totable(), 0)
    if not ok then ok_equal, why = false, ("step %d var %d: %s"):format(s, k, w) end
  end
end
local tag = parallel and " (hcom_parallel)" or " (no hcom_parallel)"
check("N ranks x 32 = 1 process x 32 N" .. tag, ok_close, why)
check("ranks bitwise equal after every step" .. tag, ok_equal, why)
