-- versus.lua — this checkout against another build of lua-npu, in one run: the shared models
-- at batch 1 (float32, one thread), an MLP 784-256-256-10 at batch 1 and 64, a small CNN at
-- batch 32 and one SGD step of the MLP.  The two builds cannot share a lua_State (their
-- metatables share names), so each round starts one worker process per build, alternating
-- which goes first; a worker times every case (median of REPS) and the driver prints, per case,
-- the median over the rounds and the ratio other / this (> 1: this checkout is faster).
--   git worktree add --detach /tmp/base <commit> && make -C /tmp/base all
--   lua5.4 bench/versus.lua /tmp/base [ROUNDS] [REPS]
--   lua5.4 bench/versus.lua /tmp/base --instructions [N]   (instructions per run, callgrind)
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."

local util = dofile(here .. "/bench/util.lua")
local median = util.median

if arg[1] ~= "--worker" then -- the driver
  local other_root = arg[1]
  if not other_root then
    print("usage: lua5.4 bench/versus.lua OTHER_CHECKOUT [ROUNDS] [REPS]  (the other built with make all)")
    return
  end
  if arg[2] == "--instructions" then
    -- Instructions per run of each case (valgrind's callgrind: repeatable whatever else the
    -- machine does), from the difference of two counts (n1 and n2 runs after the set-up).
    local n1, n2 = 2, tonumber(arg[3]) or 12
    local function count(root, case, n)
      local cmd = ("VERSUS_ONLY='%s' VERSUS_N=%d valgrind --tool=callgrind --callgrind-out-file=/dev/null " ..
        "lua5.4 '%s/bench/versus.lua' --worker '%s' '%s' 1 2>&1"):format(case, n, here, root, here)
      local p = io.popen(cmd)
      local out = p:read("a")
      p:close()
      local c = out:match("Collected%s*:%s*(%d+)")
      if not c then error("valgrind failed (is it installed?): " .. out:sub(1, 300)) end
      return tonumber(c)
    end
    local p = io.popen(("VERSUS_LIST=1 lua5.4 '%s/bench/versus.lua' --worker '%s' '%s' 1"):format(here, here, here))
    local cases = {}
    for line in p:lines() do cases[#cases + 1] = line:match("^name\t(.*)$") end
    p:close()
    print(("this checkout vs %s: instructions per run (callgrind, (count(%d runs) - count(%d runs)) / %d)"):format(
      other_root, n2, n1, n2 - n1))
    print(("%-40s %14s %14s   %6s"):format("case", "this", "other", "other/this"))
    for _, case in ipairs(cases) do
      local a = (count(here, case, n2) - count(here, case, n1)) / (n2 - n1)
      local b = (count(other_root, case, n2) - count(other_root, case, n1)) / (n2 - n1)
      print(("%-40s %14.0f %14.0f   %6.3f"):format(case, a, b, b / a))
    end
    return
  end
  local rounds, reps = tonumber(arg[2]) or 5, tonumber(arg[3]) or 9
  local times, order = { this = {}, other = {} }, {}
  for r = 1, rounds do
    local sides = r % 2 == 1 and { "this", "other" } or { "other", "this" }
    for _, side in ipairs(sides) do
      local root = side == "this" and here or other_root
      local cmd = ("lua5.4 '%s/bench/versus.lua' --worker '%s' '%s' %d 2>&1"):format(here, root, here, reps)
      local pipe = io.popen(cmd)
      for line in pipe:lines() do
        local case, ms = line:match("^case\t(.-)\t([%d.eE+-]+)$")
        if case then
          if not times[side][case] then
            times[side][case] = {}
            if side == "this" and r == 1 or not order[case] then
              if not order[case] then order[#order + 1] = case; order[case] = true end
            end
          end
          table.insert(times[side][case], tonumber(ms))
        elseif line ~= "" then
          io.stderr:write(side .. ": " .. line .. "\n")
        end
      end
      pipe:close()
    end
  end
  print(("this checkout vs %s: %d rounds, a worker process per build and round, each case the median of %d runs; ms"):format(
    other_root, rounds, reps))
  print(("%-40s %10s %10s   %6s"):format("case", "this", "other", "other/this"))
  for _, case in ipairs(order) do
    local a, b = times.this[case], times.other[case]
    if a and b then
      local ma, mb = median(a), median(b)
      print(("%-40s %10.3f %10.3f   %6.3f"):format(case, ma, mb, mb / ma))
    end
  end
  return
end

-- a worker: lua5.4 bench/versus.lua --worker ROOT DATA_ROOT REPS
local root, data_root, REPS = arg[2], arg[3], tonumber(arg[4])
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/?.so;" .. package.cpath
local npu = require("npu")
local model = require("npu.model")
local clock = npu.core.monotonic_time

-- VERSUS_ONLY=<case> VERSUS_N=<n>: build only that case and run it n times after one warm-up,
-- printing nothing (the driver's --instructions mode counts the instructions of such runs);
-- VERSUS_LIST=1: print the case names only.
local only, only_n, list = os.getenv("VERSUS_ONLY"), tonumber(os.getenv("VERSUS_N")), os.getenv("VERSUS_LIST")
local function compare(name, make, reps)
  if list then print("name\t" .. name) return end
  if only then
    if name ~= only then return end
    local run = make(npu, model)
    run()
    for _ = 1, only_n do run() end
    return
  end
  local run = make(npu, model)
  for _ = 1, 3 do run() end
  local t = {}
  for r = 1, reps or REPS do
    local t0 = clock()
    run()
    t[r] = clock() - t0
  end
  print(("case\t%s\t%.6f"):format(name, median(t) * 1e3))
end

npu.core.set_n_threads(1)
local here = data_root
-- the shared models
local DIR = os.getenv("NPU_MODELS_DIR") or here .. "/../shared/models"
local p = io.popen('ls "' .. DIR .. '" 2>/dev/null')
for name in p:lines() do
  local file = DIR .. "/" .. name .. "/" .. name .. ".json"
  local f = io.open(file)
  if f then
    f:close()
    compare(name .. " (f32, 1 thread)", function(npu, model)
      local g, info = model.load_model(file)
      local feeds = {}
      for i, e in ipairs(info.inputs) do feeds[e.name] = npu.load(("%s/%s/input_%d.npy"):format(DIR, name, i - 1)) end
      local sess = npu.Session { graph = g, options = { precision_mode = "must_keep_origin_dtype" } }
      return function() sess:run(info.output_names, feeds) end
    end)
  end
end
p:close()

local function mlp(npu, batch)
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 784 }, "x")
  local h = x
  for i, n in ipairs({ 256, 256, 10 }) do
    local w = g:const(npu.random.normal({ h:shape()[2], n }, { stddev = 0.05, seed = i }))
    local b = g:const(npu.random.normal({ n }, { stddev = 0.05, seed = 10 + i }))
    h = npu.matmul(h, w) + b
    if n ~= 10 then h = npu.nn.relu(h) end
  end
  local y = npu.nn.softmax(h)
  local sess = npu.Session { graph = g }
  local feeds = { [x] = npu.random.uniform({ batch, 784 }, { seed = 5 }) }
  return function() sess:run(y, feeds) end
end
compare("MLP 784-256-256-10, batch 1", function(npu) return mlp(npu, 1) end, REPS * 20)
compare("MLP 784-256-256-10, batch 64", function(npu) return mlp(npu, 64) end, REPS * 4)

compare("CNN 28x28 conv32-pool-conv64-pool-10, b32", function(npu)
  local g = npu.Graph()
  local x = g:placeholder("float32", { -1, 28, 28, 1 }, "x")
  local function conv(h, cin, cout, seed)
    local w = g:const(npu.random.normal({ 3, 3, cin, cout }, { stddev = 0.1, seed = seed }))
    local y = npu.nn.relu(npu.nn.conv2d(h, w, { strides = { 1, 1, 1, 1 }, padding = "SAME" }))
    return npu.nn.max_pool(y, { ksize = 2, strides = 2, padding = "VALID" })
  end
  local h = conv(conv(x, 1, 32, 1), 32, 64, 2)
  h = npu.reshape(h, { -1, 7 * 7 * 64 })
  local y = npu.matmul(h, g:const(npu.random.normal({ 7 * 7 * 64, 10 }, { stddev = 0.02, seed = 3 })))
  local sess = npu.Session { graph = g }
  local feeds = { [x] = npu.random.uniform({ 32, 28, 28, 1 }, { seed = 4 }) }
  return function() sess:run(y, feeds) end
end)

compare("MLP SGD step, batch 64", function(npu)
  local g, x, labels, train = util.mlp_sgd(npu, 64)
  local sess = npu.Session { graph = g, options = { graph_run_mode = 1 } }
  sess:run(g:global_variables_initializer())
  local ys = {}
  for i = 1, 64 do ys[i] = i % 10 end
  local feeds = { [x] = npu.random.uniform({ 64, 784 }, { seed = 7 }), [labels] = npu.tensor(ys, "int32") }
  return function() sess:run(train, feeds) end
end, REPS * 4)
