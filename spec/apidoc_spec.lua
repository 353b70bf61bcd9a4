-- apidoc_spec.lua — every public function and method of `npu` carries an LDoc comment, and
-- `make docs` (LDoc, config.ld) turns them into the HTML API reference.
--
-- The public API is found at run time, not listed by hand: the functions reachable from
-- `require "npu"` and its sub-tables (npu.nn, npu.train, npu.data, ...), and the methods of the
-- objects it makes (a small graph, session, tensor, dataset, iterator, saver, file writer,
-- optimizers, ...).  A function written in Lua is documented when a doc comment (a comment
-- run holding a `---` line) ends on the line just above its definition (debug.getinfo's
-- linedefined) — or when some doc comment names it with `@function Name`.  A function
-- written in C is documented when a `/*** ... */` comment in csrc/bind/*.c names one of its
-- public names (`@function npu.tensor`, `@function Tensor:dtype`).  The parser is this
-- spec's own: it needs no LDoc.
--
-- Not required here: names starting with "_" (internal, or metamethods); the functions
-- generated from the op table (npu.matmul, npu.nn.relu, x:matmul(w) and their aliases), which
-- docs/ops.md documents row by row (spec/docs_spec.lua checks it) and npu.signature(op) spells.
local lu = require("luaunit")
local npu = require("npu")
local core = npu.core

local ROOT = ROOT_DIR or "."

local read_all = dofile(SPEC_DIR .. "/support.lua").read_all

local function lines_of(path)
  local lines = {}
  for l in ((read_all(path) or "") .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  return lines
end

local function list_dir(dir, pattern)
  local files = {}
  local p = io.popen('ls "' .. dir .. '" 2>/dev/null')
  for f in p:lines() do
    if f:match(pattern) then files[#files + 1] = dir .. "/" .. f end
  end
  p:close()
  table.sort(files)
  return files
end

-- Doc comments ------------------------------------------------------------------------------

-- The tags of a doc comment's text: names given with @function, and parameter names.
local function parse_tags(text)
  local tags = { functions = {}, params = {} }
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local fname = line:match("@function%s+([%w_.:]+)")
    if fname then tags.functions[#tags.functions + 1] = fname end
    local p = line:match("@param%s+([%w_.%[%]]+)") or line:match("@tparam%[[^%]]*%]%s+%S+%s+([%w_.]+)")
      or line:match("@tparam%s+%S+%s+([%w_.]+)") or line:match("@param%[[^%]]*%]%s+([%w_.]+)")
    if p then tags.params[#tags.params + 1] = p end
  end
  tags.summary = text:match("^%s*%-*%s*([^@%s][^\n]*)")
  return tags
end

-- Lua sources: file -> {lines =, block_above = {[line] = doc text}}; and every explicit name.
local lua_files = {}
local explicit = {} -- name -> "file:line" of the comment that names it
local function lua_source(path)
  if lua_files[path] then return lua_files[path] end
  local lines = lines_of(path)
  local blocks = {}
  local i = 1
  while i <= #lines do
    if lines[i]:match("^%s*%-%-") then
      local first = i
      while i + 1 <= #lines and lines[i + 1]:match("^%s*%-%-") do i = i + 1 end
      -- the doc comment is the run from its last `---` line on (LDoc's rule: `---` opens it)
      local open
      for k = i, first, -1 do
        if lines[k]:match("^%s*%-%-%-[^%-]") or lines[k]:match("^%s*%-%-%-$") then open = k; break end
      end
      if open then
        local text = table.concat(lines, "\n", open, i)
        local tags = parse_tags(text)
        blocks[i + 1] = { text = text, tags = tags, line = open }
        for _, n in ipairs(tags.functions) do explicit[n] = explicit[n] or (path .. ":" .. open) end
      end
    end
    i = i + 1
  end
  lua_files[path] = { lines = lines, blocks = blocks }
  return lua_files[path]
end

-- C sources: the names their /*** */ comments give with @function.
local c_names = {}
local function scan_c(path)
  local src = read_all(path) or ""
  local pos = 1
  while true do
    local s, e, body = src:find("/%*%*%*(.-)%*/", pos)
    if not s then break end
    local line = select(2, src:sub(1, s):gsub("\n", "")) + 1
    for _, n in ipairs(parse_tags(body).functions) do c_names[n] = c_names[n] or (path .. ":" .. line) end
    pos = e + 1
  end
end

for _, f in ipairs(list_dir(ROOT .. "/lua/npu", "%.lua$")) do lua_source(f) end
for _, f in ipairs(list_dir(ROOT .. "/csrc/bind", "%.c$")) do scan_c(f) end

-- The public API ----------------------------------------------------------------------------

-- The op functions share one definition (init.lua's make_op closure): the place most of
-- npu.<op> are defined at.
local function where_defined(fn)
  local info = debug.getinfo(fn, "S")
  return info.what == "C" and "C" or (info.source .. ":" .. info.linedefined)
end
local op_closure
do
  local count = {}
  for name in pairs(npu.ops) do
    if type(npu[name]) == "function" then
      local w = where_defined(npu[name])
      count[w] = (count[w] or 0) + 1
    end
  end
  local best = 0
  for w, n in pairs(count) do if n > best then op_closure, best = w, n end end
end
local function is_op_function(fn) return type(fn) == "function" and where_defined(fn) == op_closure end

-- fn -> { names = {public names}, first = the first found }
local api, order = {}, {}
local function add(fn, name)
  if type(fn) ~= "function" or is_op_function(fn) then return end
  local e = api[fn]
  if not e then
    e = { names = {}, first = name }
    api[fn] = e
    order[#order + 1] = fn
  end
  e.names[#e.names + 1] = name
end

-- Module tables: npu and what hangs from it (not npu.core: the C layer under the facade).
local seen = { [core] = true, [npu.ops] = true }
local function walk(t, path, depth)
  if seen[t] or depth > 4 then return end
  seen[t] = true
  local parent = path:match("([%w_]+)$")
  for k, v in pairs(t) do
    if type(k) == "string" and not k:match("^_") then
      if type(v) == "function" then
        add(v, path .. "." .. k)
        add(v, parent .. ":" .. k) -- a class table's method (npu.data.Dataset.batch: Dataset:batch)
        add(v, parent .. "." .. k)
      elseif type(v) == "table" then
        walk(v, path .. "." .. k, depth + 1)
      end
    end
  end
end

-- An object's methods: its own function fields and those of its __index chain.
local function methods(class, obj)
  local function take(t)
    for k, v in pairs(t) do
      if type(k) == "string" and not k:match("^_") and type(v) == "function" then add(v, class .. ":" .. k) end
    end
  end
  if type(obj) == "table" then take(obj) end
  local mt, hops = getmetatable(obj), 0
  while type(mt) == "table" and hops < 8 do
    hops = hops + 1
    local idx = rawget(mt, "__index")
    if type(idx) == "table" then
      take(idx)
      mt = getmetatable(idx)
    else
      take(mt) -- __index is a function: the methods are the metatable's own fields
      break
    end
  end
end

-- A new empty directory; each test removes the one it made.
local function temp_dir()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute('mkdir -p "' .. dir .. '"')
  return dir
end
local function remove_dir(dir) os.execute('rm -rf "' .. dir .. '"') end

local enumerated = false
local function enumerate()
  if enumerated then return end
  enumerated = true
  walk(npu, "npu", 0)
  local tmpdir = temp_dir()
  local g = npu.Graph()
  local x = g:placeholder("float32", { 2 }, "x")
  local v = g:variable(npu.zeros({ 2 }), "v")
  local y = x + v
  local sess <close> = npu.Session { graph = g }
  local t = npu.zeros({ 2 })
  local ds = npu.data.Dataset.from_tensor_slices({ npu.zeros({ 4, 2 }) })
  local it <close> = ds:iterator()
  local gi = ds:make_one_shot_iterator(npu.Graph())
  local saver = npu.train.Saver({ v })
  local fw <close> = npu.summary.FileWriter(tmpdir)
  local opt = npu.train.GradientDescentOptimizer(0.1)
  local objects = {
    Tensor = core.Tensor, -- Tensor_mt.__index is a C function (t[i] indexes too) over this table
    Graph = g, Output = y, Operation = y:op(), Session = sess,
    Explain = sess:explain(y, { [x] = t }),
    Dataset = ds, HostIterator = it, Iterator = gi, Saver = saver, FileWriter = fw,
    GradientDescentOptimizer = opt,
    MomentumOptimizer = npu.train.MomentumOptimizer(0.1, 0.9),
    AdamOptimizer = npu.train.AdamOptimizer(0.1),
    RMSPropOptimizer = npu.train.RMSPropOptimizer(0.1),
    FixedLossScaleManager = npu.train.FixedLossScaleManager(2),
    ExponentialUpdateLossScaleManager = npu.train.ExponentialUpdateLossScaleManager(2, 10),
    LossScaleOptimizer = npu.train.LossScaleOptimizer(opt, npu.train.FixedLossScaleManager(2)),
    NPUDistributedOptimizer = npu.train.npu_distributed_optimizer_wrapper(opt),
    TellMeStepOrLossHook = npu.util.TellMeStepOrLossHook { step = v, total_step = 10 },
  }
  do
    local _ <close> = g:as_default()
    objects.TensorArray = npu.TensorArray("float32", 2)
  end
  local names = {}
  for k in pairs(objects) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do methods(k, objects[k]) end
  table.sort(order, function(a, b) return api[a].first < api[b].first end)
  fw:close()
  remove_dir(tmpdir)
end

-- How fn is documented: the doc comment above its definition (Lua), or a comment naming it.
local function documentation(fn)
  local e = api[fn]
  for _, n in ipairs(e.names) do
    if c_names[n] then return { where = c_names[n] } end
    if explicit[n] then return { where = explicit[n] } end
  end
  local info = debug.getinfo(fn, "S")
  if info.what == "C" then return nil end
  local path = info.source:match("^@(.*)$")
  local src = path and lua_source(path)
  local block = src and src.blocks[info.linedefined]
  if block then return { where = path .. ":" .. block.line, block = block } end
end

local function defined_at(fn)
  local info = debug.getinfo(fn, "S")
  if info.what == "C" then return "C" end
  return (info.source:gsub("^@", ""):gsub("^%./", "")) .. ":" .. info.linedefined
end

TestApiDoc = {}

function TestApiDoc:test_every_public_function_has_a_doc_comment()
  enumerate()
  local missing, n = {}, 0
  for _, fn in ipairs(order) do
    n = n + 1
    if not documentation(fn) then
      local e = api[fn]
      missing[#missing + 1] = ("%s (%s)"):format(e.first, defined_at(fn))
    end
  end
  -- the enumeration found the API (a regression here would make the check vacuous)
  lu.assertTrue(n >= 240, "public functions found: " .. n)
  lu.assertEquals(#missing, 0, #missing .. " public functions without a doc comment (--- above a Lua "
    .. "definition, or /*** @function Name */ in csrc/bind for C ones):\n  " .. table.concat(missing, "\n  "))
end

function TestApiDoc:test_doc_comments_name_real_parameters_and_say_what_they_do()
  enumerate()
  local bad = {}
  for _, fn in ipairs(order) do
    local doc = documentation(fn)
    local info = debug.getinfo(fn, "Su")
    if doc and doc.block and info.what == "Lua" then
      local params = {}
      for i = 1, info.nparams do params[debug.getlocal(fn, i)] = true end
      for _, p in ipairs(doc.block.tags.params) do
        local root = p:match("^[%w_]+") or p
        -- a function taking ... may document what it takes there under any name
        if not params[root] and not info.isvararg then
          bad[#bad + 1] = ("%s: @param %s is not a parameter of %s"):format(doc.where, p, api[fn].first)
        end
      end
      if not doc.block.tags.summary then
        bad[#bad + 1] = ("%s: no summary line for %s"):format(doc.where, api[fn].first)
      end
    end
  end
  lu.assertEquals(#bad, 0, table.concat(bad, "\n"))
end

-- Every parameter of a documented Lua function is described (@param or @tparam), and so is
-- what it returns when the comment says nothing of it in prose.
function TestApiDoc:test_doc_comments_describe_every_parameter()
  enumerate()
  local bad = {}
  for _, fn in ipairs(order) do
    local doc = documentation(fn)
    local info = debug.getinfo(fn, "Su")
    if doc and doc.block and info.what == "Lua" then
      local described = {}
      for _, p in ipairs(doc.block.tags.params) do described[p:match("^[%w_]+") or p] = true end
      for i = 1, info.nparams do
        local name = debug.getlocal(fn, i)
        if name ~= "self" and not described[name] then
          bad[#bad + 1] = ("%s: %s: parameter '%s' is not described"):format(doc.where, api[fn].first, name)
        end
      end
    end
  end
  table.sort(bad)
  lu.assertEquals(#bad, 0, #bad .. " undescribed parameters:\n" .. table.concat(bad, "\n"))
end

-- A name that a C comment documents is a public function: comments do not outlive the code.
function TestApiDoc:test_names_in_c_doc_comments_exist()
  enumerate()
  local public = {}
  for _, fn in ipairs(order) do
    for _, n in ipairs(api[fn].names) do public[n] = true end
  end
  local stale = {}
  for name, where in pairs(c_names) do
    if not public[name] then stale[#stale + 1] = where .. ": " .. name end
  end
  table.sort(stale)
  lu.assertTrue(next(c_names) ~= nil, "no /*** @function */ comments found in csrc/bind")
  lu.assertEquals(#stale, 0, "documented but not public:\n  " .. table.concat(stale, "\n  "))
end

-- LDoc drops the continuation lines of an untyped @return (an @treturn keeps them): such a
-- @return must fit one line.
function TestApiDoc:test_untyped_returns_fit_one_line()
  local bad = {}
  local files = list_dir(ROOT .. "/lua/npu", "%.lua$")
  for _, f in ipairs(list_dir(ROOT .. "/csrc/bind", "%.c$")) do files[#files + 1] = f end
  for _, f in ipairs(files) do
    local lines = lines_of(f)
    for i, l in ipairs(lines) do
      local text = l:gsub("^%s*%-%-+", ""):gsub("^%s*", "")
      local raw = lines[i + 1] or ""
      local is_comment = f:match("%.c$") and not raw:find("*/", 1, true) or raw:match("^%s*%-%-")
      local nxt = raw:gsub("^%s*%-%-+", "")
      if text:match("^@return%s") and is_comment and nxt:match("^%s%s+%S") and not nxt:match("^%s*@") then
        bad[#bad + 1] = ("%s:%d: %s"):format(f, i, text)
      end
    end
  end
  lu.assertEquals(#bad, 0, "use @treturn TYPE for a return described on several lines:\n" .. table.concat(bad, "\n"))
end

-- The checker itself: it sees a missing comment and a misnamed parameter.
function TestApiDoc:test_the_parser_finds_what_is_missing()
  local tmpdir = temp_dir()
  local path = tmpdir .. "/probe.lua"
  local f = assert(io.open(path, "w"))
  f:write("local M = {}\n",
    "--- Adds.\n-- @tparam number a first\n-- @param c not there\nfunction M.add(a, b) return a + b end\n",
    "function M.bare() end\n",
    "-- a plain comment\nfunction M.plain() end\n",
    "return M\n")
  f:close()
  local M = dofile(path)
  local src = lua_source(path)
  local add_block = src.blocks[debug.getinfo(M.add, "S").linedefined]
  lu.assertNotNil(add_block)
  lu.assertEquals(add_block.tags.params, { "a", "c" })
  lu.assertEquals(add_block.tags.summary, "Adds.")
  lu.assertNil(src.blocks[debug.getinfo(M.bare, "S").linedefined])
  lu.assertNil(src.blocks[debug.getinfo(M.plain, "S").linedefined])
  remove_dir(tmpdir)
end

-- LDoc (Debian lua-ldoc) builds the reference from config.ld without errors.  Optional: the
-- suite does not need LDoc, and says so when it is not installed.
function TestApiDoc:test_ldoc_builds_the_reference()
  local ldoc = os.getenv("LDOC") or "ldoc"
  if not os.execute("command -v " .. ldoc .. " >/dev/null 2>&1") then
    local why = "'" .. ldoc .. "' is not installed (Debian: lua-ldoc): the HTML reference is not built"
    print("\n  apidoc_spec: skipped the LDoc build: " .. why)
    lu.skip(why)
  end
  local tmpdir = temp_dir()
  local out = tmpdir .. "/api"
  local log = tmpdir .. "/ldoc.log"
  -- (without the sanitizers `make sanitize` preloads: LDoc is not under test)
  local ok = os.execute(('cd "%s" && env -u LD_PRELOAD %s -c config.ld -d "%s" . >"%s" 2>&1')
    :format(ROOT, ldoc, out, log))
  local msg = read_all(log) or ""
  lu.assertTrue(ok, "ldoc failed:\n" .. msg)
  -- LDoc reports what it could not place (a tag it does not know, a reference it cannot
  -- resolve) as "file:line: ..." and carries on: none of those either.
  local complaints = {}
  for l in msg:gmatch("[^\n]+") do
    if l:match("^[^:]+:%d+: ") then complaints[#complaints + 1] = l end
  end
  lu.assertEquals(#complaints, 0, table.concat(complaints, "\n"))
  local index = read_all(out .. "/index.html")
  lu.assertNotNil(index, "no index.html in " .. out)
  local page = read_all(out .. "/modules/npu.html") or ""
  for _, class in ipairs({ "Tensor", "Graph", "Output", "Operation", "Session" }) do
    lu.assertStrContains(page, "Class " .. class)
  end
  lu.assertStrContains(page, "Session:run")
  lu.assertStrContains(page, "Tensor:totable")
  for _, m in ipairs({ "npu.train", "npu.data", "npu.errors", "npu.summary", "npu.hccl" }) do
    lu.assertNotNil(read_all(out .. "/modules/" .. m .. ".html"), m .. " has no page")
  end
  -- the Saver's page of its own (its file merged into npu.train gave that module its summary)
  lu.assertStrContains(read_all(out .. "/modules/npu.train.Saver.html") or "", "restore(sess, path)")
  -- the index lists every module under its npu.* name, summarised by its own opening line
  -- ("npu.x — ..."): not a file name, nor the first line of another file merged into it
  local listed = 0
  for name, summary in index:gmatch('<td class="name"[^>]*><a href="[^"]*">([^<]+)</a></td>%s*<td class="summary">([^<]*)') do
    listed = listed + 1
    lu.assertStrMatches(name, "npu[%w_.]*")
    lu.assertEquals(summary:sub(1, #name + 1), name .. " ", name .. "'s summary: " .. summary)
  end
  lu.assertTrue(listed >= 15, "modules listed in index.html: " .. listed)
  -- The comments' markdown is rendered (config.ld: format = "discount"): `code` becomes
  -- <code>, no backquote is left, and names with underscores (set_graph_exec_config) are not
  -- cut into emphasis — LDoc's own <em> marks only "optional" and "default".  Without Discount
  -- LDoc says "format: ..." and writes plain text: that part is skipped, saying why.
  if msg:match("format: ") then
    print("\n  apidoc_spec: the reference is plain text (no Discount for LDoc: Debian lua-discount);" ..
      " its markdown rendering is not checked")
  else
    for _, m in ipairs({ "npu", "npu.config", "npu.train", "npu.hccl", "npu.data" }) do
      local html = read_all(out .. "/modules/" .. m .. ".html") or ""
      lu.assertStrContains(html, "<code>", m .. ": no rendered code")
      lu.assertNil(html:find("`", 1, true), m .. ": a backquote left unrendered")
      for em in html:gmatch("<em>(.-)</em>") do
        lu.assertTrue(em == "optional" or em == "default", m .. ": emphasis <em>" .. em .. "</em>")
      end
    end
  end
  remove_dir(tmpdir)
end

-- The README points to the reference and shows initialize_system and Saver; its snippets run.
local function readme_block(readme, heading)
  local section = readme:match("\n## " .. heading .. "\n(.-)\n## ") or readme:match("\n## " .. heading .. "\n(.*)$")
  return section and section:match("```lua\n(.-)```")
end

function TestApiDoc:test_readme_links_the_reference_and_its_snippets_run()
  local readme = read_all(ROOT .. "/README.md") or ""
  lu.assertStrContains(readme, "make docs")
  lu.assertStrContains(readme, "build/docs/api/index.html")
  for _, heading in ipairs({ "Initialising the system", "Checkpoints: Saver" }) do
    local code = readme_block(readme, heading)
    lu.assertNotNil(code, "README has no ```lua block under ## " .. heading)
    -- run in a directory of its own: the Saver snippet writes a checkpoint
    local dir = temp_dir()
    local chunk = assert(load("local npu = ...\n" .. code:gsub('"model%.safetensors"', '"' .. dir .. '/model.safetensors"'),
      "README " .. heading))
    npu.reset_default_graph()
    local printed = {}
    local real_print = print
    print = function(...)
      local parts = table.pack(...)
      for i = 1, parts.n do parts[i] = tostring(parts[i]) end
      printed[#printed + 1] = table.concat(parts, "\t", 1, parts.n)
    end
    local ok, err = pcall(chunk, npu)
    print = real_print
    npu.shutdown_system()
    npu.reset_default_graph()
    remove_dir(dir)
    lu.assertTrue(ok, heading .. ": " .. tostring(err))
    -- the values the snippets print in their comments
    for want in code:gmatch("%-%- prints ([^\n]+)") do
      lu.assertStrContains(table.concat(printed, "\n"), want, false, heading)
    end
  end
end

if SPEC_DIR == nil then os.exit(lu.LuaUnit.run()) end
