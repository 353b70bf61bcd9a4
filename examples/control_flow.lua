-- control_flow.lua — a graph that loops and branches on the device (docs/dynamic.md):
-- square roots by Newton's method, iterating until every estimate has converged (the
-- number of iterations depends on the data; a root of 0 is approached by halving, so it ends
-- within the tolerance, about 1e-6), and each row of the input scaled to unit length only
-- when it is not all zeros (a cond per row, inside map_fn).
--
--   lua5.4 examples/control_flow.lua
local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
dofile(here .. "/checkout.lua") -- runs from any directory, on this checkout's build or the rock
local npu = require("npu")

local g = npu.Graph()
local _ <close> = g:as_default()
local a = g:placeholder("float32", { -1, 3 }, "a")

-- x <- (x + a / x) / 2 until no estimate moves by more than 1e-6 (at most 100 iterations)
local roots = npu.while_loop(
  function(x, step, k) return npu.greater(npu.reduce_max(step), 1e-6) end,
  function(x, step, k)
    local nx = (x + a / x) * 0.5
    return nx, npu.abs(nx - x), k + 1
  end,
  { a + 1.0, npu.ones_like(a), 0 }, { maximum_iterations = 100 })

-- each row of a scaled to length 1, rows of zeros left as they are
local unit = npu.map_fn(function(row)
  local len = npu.sqrt(npu.reduce_sum(row * row))
  return npu.cond(npu.greater(len, 0.0), function() return row / len end, function() return row end)
end, a)

local sess <close> = npu.Session { graph = g }
local data = npu.tensor({ { 4, 9, 16 }, { 0, 0, 0 }, { 2, 1e6, 0.25 } }, "float32")
local out = sess:run({ roots[1], roots[3], unit }, { [a] = data })
print("square roots:", out[1])
print(("Newton iterations until converged: %d"):format(out[2]:item()))
print("rows of a scaled to unit length:", out[3])
