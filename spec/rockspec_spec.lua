-- rockspec_spec.lua — the rockspecs agree with the one place the version lives (npu.h's
-- NPU_VERSION_*) and say what a published rock must: homepage, description (MPI optional),
-- license, Lua bounds, external dependencies, a make build honouring LuaRocks' variables, and
-- a test command that runs this suite against the installed rock.  The scm rockspec (used by
-- `luarocks make` in a checkout) builds and tests the same way.  tests/test_rock.sh builds,
-- packs and tests the rock itself.
local lu = require("luaunit")
local S = dofile(SPEC_DIR .. "/support.lua")
local ROOT = ROOT_DIR or "."
local read = S.read

local function version_h()
  local h = read(ROOT .. "/csrc/include/npu.h")
  local function part(name) return assert(h:match("\n#define NPU_VERSION_" .. name .. " (%d+)\n"), name) end
  return part("MAJOR") .. "." .. part("MINOR") .. "." .. part("PATCH")
end

-- A rockspec is Lua assignments: run in an empty environment, the globals it set.
local function load_rockspec(path)
  lu.assertTrue(S.exists(path), "missing: " .. path)
  local text = read(path)
  local env = {}
  assert(load(text, "@" .. path, "t", env))()
  return env
end

TestRockspec = {}

function TestRockspec:test_release_rockspec_has_npu_h_version()
  local v = version_h()
  local r = load_rockspec(ROOT .. "/rockspec/lua-npu-" .. v .. "-1.rockspec")
  lu.assertEquals(r.rockspec_format, "3.0")
  lu.assertEquals(r.package, "lua-npu")
  lu.assertEquals(r.version, v .. "-1")
  lu.assertEquals(r.source.dir, "lua-npu-" .. v) -- make dist's top directory
  lu.assertStrMatches(r.source.url, "https://.*/lua%-npu%-" .. v:gsub("%.", "%%.") .. "%.tar%.gz")
  -- the module says the same version
  lu.assertEquals(require("npu")._VERSION, v)
end

function TestRockspec:test_release_rockspec_describes_a_publishable_rock()
  local r = load_rockspec(ROOT .. "/rockspec/lua-npu-" .. version_h() .. "-1.rockspec")
  local d = r.description
  lu.assertStrMatches(d.homepage, "https://.+")
  lu.assertTrue(#d.summary > 20 and #d.summary <= 100, d.summary)
  lu.assertStrContains(d.detailed, "OpenBLAS")
  lu.assertStrContains(d.detailed, "MPI is optional")
  lu.assertStrContains(d.detailed, "ASCEND_WORK_PATH")
  lu.assertEquals(d.license, "MIT")
  lu.assertEquals(r.dependencies, { "lua >= 5.4, < 5.5" })
  lu.assertEquals(r.external_dependencies.OPENBLAS, { library = "openblas" })
  lu.assertEquals(r.external_dependencies.CJSON, { header = "cjson/cJSON.h", library = "cjson" })
  lu.assertEquals(r.build.type, "make")
  for _, var in ipairs({ "CC", "CFLAGS", "LIBFLAG", "LUA_INCDIR" }) do
    lu.assertEquals(r.build.build_variables[var], "$(" .. var .. ")", var)
  end
  lu.assertEquals(r.build.install_variables.INST_LIBDIR, "$(LIBDIR)")
  lu.assertEquals(r.build.install_variables.INST_LUADIR, "$(LUADIR)")
  lu.assertEquals(r.build.install_variables.INSTALL_CLIB, "no")
  lu.assertEquals(r.test_dependencies, { "luaunit >= 3.3" })
  lu.assertEquals(r.test, { type = "command", script = "spec/run.lua", flags = { "--installed" } })
end

-- Every variable the Makefile is handed is one it reads (a misspelt one would be ignored).
function TestRockspec:test_makefile_reads_the_variables_the_rockspec_passes()
  local r = load_rockspec(ROOT .. "/rockspec/lua-npu-" .. version_h() .. "-1.rockspec")
  local mk = read(ROOT .. "/Makefile")
  for _, t in ipairs({ r.build.build_variables, r.build.install_variables }) do
    for var in pairs(t) do
      lu.assertStrContains(mk, "$(" .. var .. ")", false, "the Makefile does not read " .. var)
    end
  end
end

function TestRockspec:test_scm_rockspec_builds_and_tests_the_same_way()
  local v = version_h()
  local release = load_rockspec(ROOT .. "/rockspec/lua-npu-" .. v .. "-1.rockspec")
  local scm = load_rockspec(ROOT .. "/rockspec/lua-npu-scm-1.rockspec")
  lu.assertEquals(scm.version, "scm-1")
  for _, k in ipairs({ "rockspec_format", "package", "dependencies", "external_dependencies",
                       "build", "test_dependencies", "test" }) do
    lu.assertEquals(scm[k], release[k], k)
  end
  lu.assertEquals(scm.description, release.description)
end

-- make dist tars the tracked files as they are in the working tree: from a tree with
-- uncommitted changes it says so (the tarball is then not the commit it is dated by).
function TestRockspec:test_make_dist_warns_about_uncommitted_changes()
  -- git and make run without the sanitizers' preloaded runtime (make sanitize), which would
  -- report their own exit-time allocations as leaks and fail them
  if not os.execute("env -u LD_PRELOAD git -C " .. S.sh_quote(ROOT) .. " rev-parse --git-dir >/dev/null 2>&1") then
    return lu.skip("not a git checkout")
  end
  local p = io.popen("cd " .. S.sh_quote(ROOT) .. " && pwd") -- make -C reads -f from there
  local root = p:read("l")
  p:close()
  local tmp, _ <close> = S.tmpdir()
  local clone = tmp .. "/clone"
  lu.assertTrue(os.execute(("env -u LD_PRELOAD git clone -q %s %s"):format(S.sh_quote(root), S.sh_quote(clone))))
  local function dist()
    local err = tmp .. "/err"
    local ok = os.execute(("env -u LD_PRELOAD make -s -C %s -f %s dist BUILD=%s >/dev/null 2>%s"):format(
      S.sh_quote(clone), S.sh_quote(root .. "/Makefile"), S.sh_quote(tmp .. "/b"), S.sh_quote(err)))
    return ok, read(err) or ""
  end
  local ok, err = dist()
  lu.assertTrue(ok, err)
  lu.assertEquals(err, "") -- a clean tree: quiet
  local f = assert(io.open(clone .. "/README.md", "a"))
  f:write("\nnot committed\n")
  f:close()
  ok, err = dist()
  lu.assertTrue(ok, err) -- still written (make test's rock check runs in working trees)
  lu.assertStrContains(err, "make dist: warning: tracked files differ from the last commit")
  lu.assertStrContains(err, "README.md")
end
