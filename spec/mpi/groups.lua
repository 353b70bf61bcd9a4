-- spec/mpi/groups.lua — hccl's groups under mpirun -np 4: create_group on every rank (members
-- and not), rank queries and translations, every collective in each dtype inside a group
-- against hand-computed values (a group listed out of order gathers in its order), send /
-- receive inside a group, and the errors: a rank outside the group using it, unknown groups,
-- duplicate names, ranks out of range or twice; destroy_group, and a name made again.
local C = dofile((arg[0]:match("^(.*)/[^/]+$") or ".") .. "/common.lua")
local npu, rank, size, check = C.npu, C.rank, C.size, C.check
local hccl = npu.hccl
assert(size == 4, "groups.lua runs with 4 ranks")

local function x_of(r) return { 1 + r, 2 + r, 3 + 2 * r, 4 } end
local function try(f, ...) local ok, err = pcall(f, ...) return not ok and tostring(err) or nil end
local function has(err, s) return err ~= nil and err:find(s, 1, true) ~= nil end

hccl.create_group("even", 2, { 0, 2 }, { timeout = 20 })
hccl.create_group("rev", 3, { 3, 2, 1 }, { timeout = 20 }) -- group rank 0 is world rank 3
local in_even, in_rev = rank % 2 == 0, rank ~= 0

check("get_rank_size", hccl.get_rank_size("even") == 2 and hccl.get_rank_size("rev") == 3
  and hccl.get_rank_size() == 4)
if in_even then
  check("get_rank_id in even", hccl.get_rank_id("even") == rank // 2, hccl.get_rank_id("even"))
  check("get_local_rank_size / id in even (one machine)", hccl.get_local_rank_size("even") == 2
    and hccl.get_local_rank_id("even") == rank // 2)
else
  local err = try(hccl.get_rank_id, "even")
  check("get_rank_id outside the group", has(err, ("this process (world rank %d) is not in group 'even'"):format(rank)), err)
end
if in_rev then check("get_rank_id in rev", hccl.get_rank_id("rev") == 3 - rank, hccl.get_rank_id("rev")) end
check("get_world_rank_from_group_rank", hccl.get_world_rank_from_group_rank("rev", 0) == 3
  and hccl.get_world_rank_from_group_rank("even", 1) == 2)
check("get_group_rank_from_world_rank", hccl.get_group_rank_from_world_rank(1, "rev") == 2
  and hccl.get_group_rank_from_world_rank(2, "even") == 1)
local err = try(hccl.get_group_rank_from_world_rank, 0, "rev")
check("a world rank outside the group", has(err, "world rank 0 is not in group 'rev' (world ranks 3, 2, 1)"), err)
err = try(hccl.get_world_rank_from_group_rank, "rev", 3)
check("a group rank out of range", has(err, "rank 3 is out of range: group 'rev' has 3 ranks"), err)

-- collectives in each group, each dtype
local function expect_reduce(members, red)
  local out = {}
  for i = 1, 4 do
    local acc
    for _, r in ipairs(members) do
      local v = x_of(r)[i]
      if not acc then acc = v
      elseif red == "sum" then acc = acc + v
      elseif red == "prod" then acc = acc * v
      elseif red == "max" then acc = math.max(acc, v)
      else acc = math.min(acc, v) end
    end
    out[i] = acc
  end
  return out
end
for _, dt in ipairs({ "float32", "float16", "int32" }) do
  for _, grp in ipairs({ { "even", { 0, 2 }, in_even }, { "rev", { 3, 2, 1 }, in_rev } }) do
    local name, members, member = grp[1], grp[2], grp[3]
    if member then
      local n = #members
      local g = npu.Graph()
      local x = g:placeholder(dt, { 4 }, "x")
      local fetch, want, what = {}, {}, {}
      for _, red in ipairs({ "sum", "prod", "max", "min" }) do
        fetch[#fetch + 1] = hccl.allreduce(x, red, nil, nil, name)
        want[#want + 1] = expect_reduce(members, red)
        what[#what + 1] = "allreduce " .. red
      end
      fetch[#fetch + 1] = hccl.broadcast({ x }, 1, nil, nil, name)[1]
      want[#want + 1] = x_of(members[2])
      what[#what + 1] = "broadcast from group rank 1"
      fetch[#fetch + 1] = hccl.allgather(x, n, name)
      local gathered = {}
      for _, r in ipairs(members) do for _, v in ipairs(x_of(r)) do gathered[#gathered + 1] = v end end
      want[#want + 1] = gathered
      what[#what + 1] = "allgather in the group's order"
      local xs = g:placeholder(dt, { 2 * n }, "xs")
      fetch[#fetch + 1] = hccl.reduce_scatter(xs, "sum", n, name)
      local me = hccl.get_rank_id(name)
      local tri = 0
      for _, r in ipairs(members) do tri = tri + r + 1 end
      want[#want + 1] = { (2 * me + 1) * tri, (2 * me + 2) * tri }
      what[#what + 1] = "reduce_scatter"
      local xs_val = {}
      for i = 1, 2 * n do xs_val[i] = i * (rank + 1) end
      local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
      local r = sess:run(fetch, { [x] = npu.tensor(x_of(rank), dt), [xs] = npu.tensor(xs_val, dt) })
      for k = 1, #fetch do
        local ok, why = C.close(r[k]:totable(), want[k], 0)
        check(("%s %s in %s"):format(dt, what[k], name), ok and r[k]:dtype() == dt, why or r[k]:dtype())
      end
    end
  end
end

-- send / receive inside rev: group rank 0 (world 3) to group rank 2 (world 1)
if rank == 3 or rank == 1 then
  local g = npu.Graph()
  local x = g:placeholder("int32", { 2, 2 }, "x")
  local op = rank == 3 and hccl.send(x, 4, 2, "rev") or hccl.receive({ 2, 2 }, "int32", 4, 0, "rev", g)
  local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
  local r = sess:run(op, rank == 3 and { [x] = npu.tensor({ { 1, 2 }, { 3, 4 } }, "int32") } or nil)
  local ok, why = true, nil
  if rank == 1 then ok, why = C.close(r:totable(), { { 1, 2 }, { 3, 4 } }, 0) end
  check("send / receive in a group (group ranks)", ok, why)
end

-- errors
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4 }, "x")
  if rank == 0 then -- not in rev: building is fine (its size is known), running is refused
    local s = hccl.allreduce(x, "sum", nil, nil, "rev")
    local sess <close> = npu.Session { graph = g }
    err = try(sess.run, sess, s, { [x] = npu.tensor(x_of(0)) })
    check("a rank outside the group runs its collective", has(err, "hcom_allreduce 'HcomAllReduce': this process (world rank 0) is not in group 'rev' (world ranks 3, 2, 1)"), err)
  end
  err = try(hccl.allreduce, x, "sum", nil, nil, "nope")
  check("an unknown group", has(err, "unknown group 'nope'"), err)
  err = try(hccl.create_group, "even", 2, { 0, 2 })
  check("a duplicate name", has(err, "create_group 'even': a group of that name exists"), err)
  err = try(hccl.create_group, "bad", 2, { 0, 4 })
  check("a rank out of range", has(err, "rank 4 is out of range: there are 4 ranks (0 to 3)"), err)
  err = try(hccl.create_group, "bad", 2, { 1, 1 })
  check("a rank twice", has(err, "rank 1 is listed twice"), err)
  err = try(hccl.create_group, "bad", 3, { 1, 2 })
  check("rank_num against rank_ids", has(err, "rank_num 3 but rank_ids lists 2 ranks"), err)
  err = try(hccl.allgather, x, 4, "even")
  check("rank_size against the group's", has(err, "rank_size 4 but there are 2 ranks in group 'even'"), err)
end

-- destroy, then the name again (another order); the world is in step afterwards
hccl.destroy_group("even")
err = try(hccl.get_rank_size, "even")
check("a destroyed group is unknown", has(err, "unknown group 'even'"), err)
hccl.create_group("even", 2, { 2, 0 }, { timeout = 20 })
if in_even then
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4 }, "x")
  local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
  local r = sess:run(hccl.allgather(x, 2, "even"), { [x] = npu.tensor(x_of(rank)) }):totable()
  local want = {}
  for _, q in ipairs({ 2, 0 }) do for _, v in ipairs(x_of(q)) do want[#want + 1] = v end end
  local ok, why = C.close(r, want, 0)
  check("the name made again, in another order", ok, why)
end
hccl.destroy_group("even")
hccl.destroy_group("rev")
do
  local g = npu.Graph()
  local x = g:placeholder("float32", { 4 }, "x")
  local sess <close> = npu.Session { graph = g, options = { hccl_timeout = 20 } }
  local r = sess:run(hccl.allreduce(x, "sum"), { [x] = npu.tensor(x_of(rank)) }):totable()
  local ok, why = C.close(r, expect_reduce({ 0, 1, 2, 3 }, "sum"), 0)
  check("the world after the groups", ok, why)
end
