--- npu.util.ProgressBar — a terminal progress bar for long runs (docs/lua.md, "Progress").
--
--     local bar = npu.util.ProgressBar{total = 1000}
--     sess:run(loop, nil, {progress = bar, every = 10})   -- the bar is callable: bar(step, total)
--     bar:finish()
--
-- On a terminal it redraws one line, `\r[=====>    ]  45% 450/1000 12.3 it/s`; on anything
-- else (a file, a pipe, a stream that is no terminal, or when NPU_PROGRESS=plain is set, or
-- `plain = true` given) it writes a plain line at every tenth of the way and at the end, so
-- logs stay short.  Writing is the only thing it does: it never calls into the device.
-- @module npu.util.ProgressBar
local core = require("npu.core")
local errors = require("npu.errors")

local M = {}

local KEYS = { "total", "width", "stream", "plain", "label", "clock" }

local Bar = {}
Bar.__index = Bar
Bar.__name = "npu.util.ProgressBar"

-- Whether stream is a terminal: only the process's stdout and stderr can be asked (test -t).
local function is_terminal(stream)
  local fd = rawequal(stream, io.stdout) and 1 or rawequal(stream, io.stderr) and 2 or nil
  return fd ~= nil and os.execute("test -t " .. fd) == true
end

-- bar.update(5) for bar:update(5) would index the number 5: name the colon instead.
local function check_self(where, self)
  if getmetatable(self) ~= Bar then
    errors.raise(where, "NPU_ERR_ARG", ("call it as a method, with a colon (bar:%s(...)); argument 1 is %s,"
      .. " not an npu.util.ProgressBar"):format(where:match("[^:]*$"), errors.typename(self)))
  end
end

local function check_count(where, name, v, min)
  if math.type(v) ~= "integer" or v < min then
    errors.raise(where, "NPU_ERR_ARG", ("%s must be an integer >= %d, got %s"):format(name, min,
      math.type(v) and tostring(v) or errors.typename(v)))
  end
end

--- A progress bar to pass as sess:run's `progress` function (it is callable as bar(step, total)).
-- @tparam[opt] table spec `{total =, width = 30, stream = io.stderr, plain =, label =, clock =}`:
--   total (integer >= 1; may be left to the first update), width (the bar's characters),
--   stream (anything with :write and :flush), plain (true: plain lines; false: redraw;
--   default: redraw on a terminal unless NPU_PROGRESS=plain), label (a prefix), clock (a
--   function giving seconds; default npu.core.monotonic_time)
-- @treturn ProgressBar
-- @raise NPU_ERR_ARG for an unknown key (naming the nearest) or a value of the wrong kind
-- @usage local bar = npu.util.ProgressBar{total = 1000}
-- sess:run(loop, nil, {progress = bar, every = 10})
-- bar:finish()
function M.ProgressBar(spec, ...)
  local where = "npu.util.ProgressBar"
  errors.check_no_more(where, 1, ...)
  spec = spec or {}
  if type(spec) ~= "table" then
    errors.raise(where, "NPU_ERR_ARG", "give a table {total =, width =, stream =}, got " .. errors.typename(spec))
  end
  errors.check_keys(where, spec, KEYS)
  if spec.total ~= nil then check_count(where, "total", spec.total, 1) end
  if spec.width ~= nil then check_count(where, "width", spec.width, 1) end
  local stream = spec.stream or io.stderr
  if type(stream) ~= "table" and type(stream) ~= "userdata" or not stream.write then
    errors.raise(where, "NPU_ERR_ARG", "stream must have a write method (a file, or a table), got " ..
      errors.typename(stream))
  end
  if spec.plain ~= nil and type(spec.plain) ~= "boolean" then
    errors.raise(where, "NPU_ERR_ARG", "plain must be a boolean, got " .. errors.typename(spec.plain))
  end
  if spec.label ~= nil and type(spec.label) ~= "string" then
    errors.raise(where, "NPU_ERR_ARG", "label must be a string, got " .. errors.typename(spec.label))
  end
  if spec.clock ~= nil and type(spec.clock) ~= "function" then
    errors.raise(where, "NPU_ERR_ARG", "clock must be a function, got " .. errors.typename(spec.clock))
  end
  local plain = spec.plain
  if plain == nil then plain = os.getenv("NPU_PROGRESS") == "plain" or not is_terminal(stream) end
  local clock = spec.clock or core.monotonic_time
  return setmetatable({ total = spec.total, width = spec.width or 30, stream = stream, plain = plain,
    label = spec.label and spec.label .. " " or "", clock = clock, start = clock(), step = 0,
    shown_tenth = 0, drawn = false, finished = false }, Bar)
end

-- "<label>[====>   ]  45% 450/1000 12.3 it/s" (the bar left out in plain lines).
local function line(self, with_bar)
  local total, step = self.total, self.step
  local frac = total > 0 and math.min(step / total, 1) or 1
  local elapsed = self.clock() - self.start
  local rate = elapsed > 0 and step / elapsed or 0
  local text = ("%3d%% %d/%d %.1f it/s"):format(math.floor(frac * 100), step, total, rate)
  if not with_bar then return self.label .. text end
  local full = math.floor(frac * self.width)
  local bar = full >= self.width and ("="):rep(self.width)
    or ("="):rep(full) .. ">" .. (" "):rep(self.width - full - 1)
  return self.label .. "[" .. bar .. "] " .. text
end

local function flush(stream)
  if stream.flush then stream:flush() end
end

--- Moves the bar: step iterations of total done.  Returns nothing, so it can be a progress
-- function.  After finish, or given a step below the last one, the bar starts again (its
-- rate too): one bar passed to the run of every epoch draws each epoch.
-- @tparam integer step iterations done (>= 0)
-- @tparam[opt] integer total defaults to the bar's, and sets it when the bar has none
-- @raise NPU_ERR_ARG for a negative step, or when neither the bar nor the call gives a total
function Bar:update(step, total, ...)
  local where = "npu.util.ProgressBar:update"
  check_self(where, self)
  errors.check_no_more(where, 3, ...)
  check_count(where, "step", step, 0)
  if total ~= nil then check_count(where, "total", total, 1) end
  self.total = self.total or total
  if not self.total then errors.raise(where, "NPU_ERR_ARG", "the bar has no total: give one") end
  -- a finished bar, or a step below the last one: another run (the next epoch) starts it again
  if self.finished or step < self.step then
    self.start, self.shown_tenth, self.drawn, self.finished = self.clock(), 0, false, false
  end
  self.step = step
  if self.plain then
    local tenth = math.floor(10 * math.min(step, self.total) / self.total)
    if tenth > self.shown_tenth then
      self.shown_tenth = tenth
      self.stream:write(line(self, false), "\n")
      flush(self.stream)
    end
  else
    self.stream:write("\r", line(self, true))
    self.drawn = true
    flush(self.stream)
  end
end

--- On a terminal, blanks the bar's line so other output can be printed there (the next update
-- draws it again); nothing in plain mode.
function Bar:clear(...)
  check_self("npu.util.ProgressBar:clear", self)
  errors.check_no_more("npu.util.ProgressBar:clear", 1, ...)
  if not self.plain and self.drawn then
    self.stream:write("\r", (" "):rep(#line(self, true)), "\r")
    self.drawn = false
    flush(self.stream)
  end
end

--- Ends the bar: on a terminal, the line is drawn a last time and ended; in plain mode the
-- final line is written if the last update did not write it.  Idempotent.
function Bar:finish(...)
  check_self("npu.util.ProgressBar:finish", self)
  errors.check_no_more("npu.util.ProgressBar:finish", 1, ...)
  if self.finished or not self.total then return end
  self.finished = true
  if self.plain then
    if self.shown_tenth < 10 then self.stream:write(line(self, false), "\n") end
  else
    self.stream:write("\r", line(self, true), "\n")
  end
  flush(self.stream)
end

--- A function(step, total) for sess:run's progress that moves the bar to offset + step, for a
-- bar over several runs.  The bar itself is callable as bar(step, total) too.
-- @tparam[opt=0] integer offset the steps of the runs before
-- @treturn function
function Bar:callback(offset, ...)
  check_self("npu.util.ProgressBar:callback", self)
  errors.check_no_more("npu.util.ProgressBar:callback", 2, ...)
  if offset ~= nil then check_count("npu.util.ProgressBar:callback", "offset", offset, 0) end
  offset = offset or 0
  return function(step, total)
    if offset == 0 then self:update(step, total) else self:update(offset + step) end
  end
end

Bar.__call = function(self, step, total) self:update(step, total) end
Bar.__tostring = function(self)
  return ("npu.util.ProgressBar(%d/%s)"):format(self.step, self.total and tostring(self.total) or "?")
end

return M
