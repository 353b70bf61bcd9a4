-- bench/util.lua — what the Lua benchmarks share (loaded with dofile(ROOT .. "/bench/util.lua");
-- not a benchmark itself): the median of a list of times, and the shared models that are there.
local util = {}

-- The median of the numbers in t (sorts t in place; the upper one of an even count's two).
function util.median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

-- The names of the shared models in dir (NPU_MODELS_DIR: dir/NAME/NAME.json), in ls order;
-- none when dir is not there.
function util.model_names(dir)
  local names = {}
  local p = io.popen('ls "' .. dir .. '" 2>/dev/null')
  for n in p:lines() do
    local f = io.open(dir .. "/" .. n .. "/" .. n .. ".json", "rb")
    if f then
      f:close()
      names[#names + 1] = n
    end
  end
  p:close()
  return names
end

return util
