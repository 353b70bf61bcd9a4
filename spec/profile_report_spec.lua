-- profile_report_spec.lua — the profiler's report.html (exec/profile_html.c,
-- docs/profiling.md): checked twice.  In Lua, always: the page is well formed (every element
-- closed, in order), loads nothing from outside, and holds the run's numbers — every row of
-- op_summary.csv and op_statistic.csv with the same strings, a timeline rectangle per step
-- execution of the last iteration, the slowest executions longest first.  In headless Chromium
-- (Debian: chromium; optional, the specs skip saying so when it is absent): the DOM the browser
-- built shows the same numbers, the sorting script ran (the address asks for a sort), and a
-- screenshot is written to build/profile_report.png and is a PNG.
local lu = require("luaunit")
local npu = require("npu")

local S = dofile(SPEC_DIR .. "/support.lua")
local q = S.sh_quote
local ROOT = ROOT_DIR or "."

local function have(cmd) return os.execute("command -v " .. cmd .. " >/dev/null 2>&1") == true end
local function chromium()
  for _, c in ipairs({ "chromium", "chromium-browser", "google-chrome" }) do
    if have(c) then return c end
  end
  lu.skip("headless Chromium is not installed (Debian: chromium): report.html not opened in a browser")
end

if not (have("chromium") or have("chromium-browser") or have("google-chrome")) then
  io.stderr:write("profile_report_spec: headless Chromium is not installed (Debian: chromium): " ..
    "the browser specs skip\n")
end

-- A loop of iterations_per_loop 4 over a dataset, with a while loop inside each iteration
-- (nested steps, several executions of a step per iteration), run 3 times.
local IPL, RUNS = 4, 3
local function profile(base)
  local g = npu.Graph()
  local _ <close> = g:as_default()
  local xs = npu.range(0, 16, 1, "float32")
  local b = npu.data.Dataset.from_tensor_slices(xs):batch(2, { drop_remainder = true }):repeat_()
      :make_one_shot_iterator(g):get_next()
  local total = g:variable(npu.zeros({}), "total")
  local r = npu.while_loop(function(i, v) return npu.less(i, 3) end,
    function(i, v) return i + 1, npu.mul(v, 2, { name = "double<&>" }) end, { 0, b },
    { maximum_iterations = 5, name = "loop" })
  local step = npu.assign(total, total + npu.reduce_sum(r[2], nil, { name = "batch_sum" }))
  local sess = npu.Session { graph = g, options = { iterations_per_loop = IPL, profiling_mode = true,
    profiling_options = '{"output":"' .. base .. '"}' } }
  sess:run(g:global_variables_initializer())
  local loop = npu.util.set_iteration_per_loop(sess, step, IPL)
  for _ = 1, RUNS do sess:run({ total, loop }) end
  sess:close()
  local dir
  for _, name in ipairs(S.ls(base)) do if name:match("^PROF_") then dir = base .. "/" .. name end end
  return dir
end

local function unescape(s)
  return (s:gsub("&lt;", "<"):gsub("&gt;", ">"):gsub("&quot;", '"'):gsub("&#39;", "'"):gsub("&amp;", "&"))
end

-- The rows of table id: lists of the cells' text (tags removed, entities decoded).
local function table_rows(html, id)
  local body = html:match('<table id="' .. id .. '"[^>]*>.-<tbody>(.-)</tbody>')
  lu.assertNotNil(body, "table " .. id)
  local rows = {}
  for tr in body:gmatch("<tr>(.-)</tr>") do
    local cells = {}
    for td in tr:gmatch("<td[^>]*>(.-)</td>") do cells[#cells + 1] = unescape(td:gsub("<[^>]*>", "")) end
    rows[#rows + 1] = cells
  end
  return rows
end

-- Every element closed in order (void elements aside), script and style bodies skipped,
-- attributes quoted; returns the count of each element.
local VOID = { meta = true, br = true, hr = true, img = true, input = true, link = true }
local function check_well_formed(html)
  lu.assertEquals(html:sub(1, 16), "<!DOCTYPE html>\n")
  html = html:gsub("<script>.-</script>", "<script></script>"):gsub("<style>.-</style>", "<style></style>")
  local stack, count = {}, {}
  for slash, name, attrs in html:gmatch("<(/?)([%a][%w]*)([^>]*)>") do
    name = name:lower()
    local self_close = attrs:sub(-1)
    if self_close == "/" then attrs = attrs:sub(1, -2) end
    if slash == "/" then
      lu.assertEquals(stack[#stack], name, "closing </" .. name .. "> out of order")
      stack[#stack] = nil
    else
      count[name] = (count[name] or 0) + 1
      -- every attribute value quoted
      local stripped = attrs:gsub('%s[%w:-]+="[^"]*"', "")
      lu.assertTrue(stripped:match("^%s*$") ~= nil, "attributes of <" .. name .. ">: " .. attrs)
      if not VOID[name] and self_close ~= "/" then stack[#stack + 1] = name end
    end
  end
  lu.assertEquals(#stack, 0, "unclosed: " .. table.concat(stack, " "))
  return count
end

TestProfileReport = {}

function TestProfileReport:setUp()
  self.base = S.tmpdir()
  self.dir = profile(self.base)
  self.html = S.read(self.dir .. "/report.html")
end
function TestProfileReport:tearDown() S.rm_rf(self.base) end

function TestProfileReport:test_the_page_is_well_formed_and_self_contained()
  local count = check_well_formed(self.html)
  lu.assertEquals(count.html, 1)
  lu.assertEquals(count.svg, 1)
  lu.assertEquals(count.script, 1)
  -- nothing fetched: no src/href, no stylesheet link, no url(...), no import; the only URL is
  -- the SVG namespace, a name and not a fetch
  lu.assertNil(self.html:find("src=", 1, true))
  lu.assertNil(self.html:find("href=", 1, true))
  lu.assertNil(self.html:find("url(", 1, true))
  lu.assertNil(self.html:find("@import", 1, true))
  local without_ns = self.html:gsub('xmlns="http://www.w3.org/2000/svg"', "")
  lu.assertNil(without_ns:find("https?://"))
end

function TestProfileReport:test_the_tables_hold_the_csv_numbers()
  local summary = S.read_csv(self.dir .. "/op_summary.csv")
  local rows = table_rows(self.html, "steps")
  lu.assertEquals(#rows, #summary)
  local by_step = {}
  for _, r in ipairs(rows) do by_step[r[1] .. ":" .. r[2]] = r end
  local last_total = math.huge
  for i, r in ipairs(rows) do -- largest total first
    lu.assertTrue(tonumber(r[7]) <= last_total, "row " .. i)
    last_total = tonumber(r[7])
  end
  for _, c in ipairs(summary) do
    local r = by_step[c.plan_id .. ":" .. c.step]
    lu.assertNotNil(r, "plan " .. c.plan_id .. " step " .. c.step)
    lu.assertEquals({ r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10] },
      { c.op_name, c.op_type, c.pass, c.count, c.total_us, c.avg_us, c.min_us, c.max_us })
  end
  lu.assertNotNil(by_step["1:0"]) -- the escaped node name came through
  local names = {}
  for _, r in ipairs(rows) do names[r[3]] = true end
  lu.assertTrue(names["double<&>"])
  local stats = S.read_csv(self.dir .. "/op_statistic.csv")
  local ops = table_rows(self.html, "ops")
  lu.assertEquals(#ops, #stats)
  for i, c in ipairs(stats) do
    lu.assertEquals(ops[i], { c.op_type, c.count, c.total_us, c.avg_us, c.min_us, c.max_us, c.ratio_percent })
  end
end

function TestProfileReport:test_the_timeline_draws_the_last_iteration()
  local trace = S.read(self.dir .. "/trace.json")
  -- the last iteration's step events in trace.json
  local last = RUNS * IPL -- the initializer's run is iteration 0
  local n = 0
  for line in trace:gmatch("[^\n]+") do
    if line:find('"cat":"op"', 1, true) and line:find('"iteration":' .. last .. "[,}]") then n = n + 1 end
  end
  lu.assertTrue(n > 6, "events of iteration " .. last .. ": " .. n) -- the loop ran its body 3 times
  local svg = self.html:match("<svg id=\"timeline\".-</svg>")
  lu.assertNotNil(svg)
  local _, rects = svg:gsub("<rect ", "")
  lu.assertEquals(rects, n)
  lu.assertStrContains(self.html, ("iteration %d: %d step executions in "):format(last, n))
  lu.assertStrContains(svg, "loop iteration 2</title>") -- a body step, third time round
  lu.assertStrContains(svg, "double&lt;&amp;&gt; (mul)")
end

function TestProfileReport:test_the_slowest_executions_come_first()
  local rows = table_rows(self.html, "slowest")
  lu.assertEquals(#rows, 10)
  local max = 0
  for _, c in ipairs(S.read_csv(self.dir .. "/op_summary.csv")) do
    if tonumber(c.max_us) > max then max, self.max_us = tonumber(c.max_us), c.max_us end
  end
  lu.assertEquals(rows[1][2], self.max_us) -- the slowest of all is every step's largest max_us
  for i = 2, #rows do
    lu.assertEquals(rows[i][1], tostring(i))
    lu.assertTrue(tonumber(rows[i][2]) <= tonumber(rows[i - 1][2]))
  end
end

-- The browser's DOM (after the script ran) and a screenshot.
local function run_chromium(self, args, url)
  local exe = chromium()
  local profile = self.base .. "/chromium-profile"
  -- without the sanitizers `make sanitize` preloads into this process
  local cmd = ("env -u LD_PRELOAD timeout 120 %s --headless --no-sandbox --disable-gpu --no-first-run " ..
    "--user-data-dir=%s %s %s 2>%s"):format(exe, q(profile), args, q(url), q(self.base .. "/chromium.log"))
  local p = io.popen(cmd)
  local out = p:read("a")
  local ok = p:close()
  return out, ok, S.read(self.base .. "/chromium.log") or ""
end

function TestProfileReport:test_chromium_shows_the_numbers_and_sorts()
  local url = "file://" .. self.dir .. "/report.html#sort=count-asc"
  local dom, ok, log = run_chromium(self, "--dump-dom", url)
  lu.assertTrue(ok and dom:find("</html>") ~= nil, "chromium --dump-dom failed: " .. log)
  -- the numbers of op_summary.csv, as the browser parsed them
  local summary = S.read_csv(self.dir .. "/op_summary.csv")
  local rows = table_rows(dom, "steps")
  lu.assertEquals(#rows, #summary)
  local seen = {}
  for _, r in ipairs(rows) do seen[r[3] .. "|" .. r[7]] = r end
  for _, c in ipairs(summary) do lu.assertNotNil(seen[c.op_name .. "|" .. c.total_us], c.op_name) end
  -- the script sorted the tables by count, ascending, and marked the column
  for i = 2, #rows do lu.assertTrue(tonumber(rows[i][6]) >= tonumber(rows[i - 1][6]), "row " .. i) end
  lu.assertStrContains(dom, 'data-key="count" data-type="num" aria-sort="ascending"')
  lu.assertNotNil(dom:find('<svg id="timeline"', 1, true))
end

function TestProfileReport:test_chromium_screenshot()
  local png_path = ROOT .. "/build/profile_report.png"
  os.remove(png_path)
  os.execute("mkdir -p " .. q(ROOT .. "/build"))
  local _, ok, log = run_chromium(self, "--window-size=1200,1400 --screenshot=" .. q(png_path),
    "file://" .. self.dir .. "/report.html")
  local png = S.read(png_path)
  lu.assertTrue(ok and png ~= nil, "no screenshot: " .. log)
  lu.assertEquals(png:sub(1, 8), "\137PNG\r\n\26\n")
  lu.assertEquals(png:sub(13, 16), "IHDR")
  local w = string.unpack(">I4", png, 17)
  local h = string.unpack(">I4", png, 21)
  lu.assertEquals({ w, h }, { 1200, 1400 })
  lu.assertTrue(#png > 10000, "a blank page compresses to less: " .. #png .. " bytes")
end
