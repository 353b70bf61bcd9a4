-- The release rockspec of the version in csrc/include/npu.h (NPU_VERSION_*, the one place the
-- version lives): `make dist` refuses to make a tarball when this file's version disagrees, and
-- spec/rockspec_spec.lua checks it.  A new version: `luarocks new_version` on this file, with
-- the tarball `make dist` wrote published at source.url.
rockspec_format = "3.0"
package = "lua-npu"
version = "0.1.0-1"
source = {
  url = "https://github.com/lua-npu/lua-npu/releases/download/v0.1.0/lua-npu-0.1.0.tar.gz",
  dir = "lua-npu-0.1.0",
}
description = {
  summary = "NPU sessions (options, graph compilation, execution) for Lua 5.4 on a CPU device",
  detailed = [[
lua-npu runs TensorFlow-on-Ascend style sessions from Lua: build a graph (or import a frozen
.pb, a TensorFlow.js model or a SavedModel), configure the session with the same
parameter_map options a TF Adapter script uses (each option validated, and documented with
what it does here), and run it, with training loops of iterations_per_loop steps, datasets,
dumps and profiles.  The device is the library's own execution engine on the CPU: OpenBLAS
for the linear algebra, a thread pool and an accounted memory pool; no Ascend hardware is
needed or used.

Needs OpenBLAS and cJSON (Debian: libopenblas-dev, libcjson-dev).  MPI is optional: with
Open MPI's mpicc present at build time (libopenmpi-dev) the collectives (npu.hccl) run over
MPI; without it everything else works and the collectives fail saying so.  Files a session
writes without a path of its own go under $ASCEND_WORK_PATH, else ./npu_out.

Also installs npu-run (run a model from the command line) and, when libmicrohttpd is there
at build time, npu-serve (TensorFlow Serving's REST API).  `luarocks test` runs the LuaUnit
suite against the installed rock.]],
  homepage = "https://github.com/lua-npu/lua-npu",
  license = "MIT",
  labels = { "machine-learning", "tensorflow", "neural-networks", "ascend" },
}
dependencies = { "lua >= 5.4, < 5.5" }
external_dependencies = {
  -- Debian keeps cblas.h under a multiarch directory luarocks does not search: the library is
  -- checked here, the Makefile finds the header (OPENBLAS_INCDIR overrides).
  OPENBLAS = { library = "openblas" },
  CJSON = { header = "cjson/cJSON.h", library = "cjson" },
}
build = {
  type = "make",
  build_variables = {
    CC = "$(CC)", CFLAGS = "$(CFLAGS)", LIBFLAG = "$(LIBFLAG)", LUA_INCDIR = "$(LUA_INCDIR)",
    OPENBLAS_LIBDIR = "$(OPENBLAS_LIBDIR)",
    CJSON_INCDIR = "$(CJSON_INCDIR)", WERROR = "",
  },
  install_variables = {
    INST_LIBDIR = "$(LIBDIR)", INST_LUADIR = "$(LUADIR)", INST_BINDIR = "$(BINDIR)",
    -- the module, its facade and npu-run only: LuaRocks deploys whatever lands in a rock's
    -- lib/ as a Lua C module (`make install PREFIX=...` installs libnpu, npu.h and npu.pc)
    INSTALL_CLIB = "no",
  },
  -- kept in the rock's doc directory (`luarocks doc lua-npu`): the manual and the examples,
  -- which run from there against the installed module
  copy_directories = { "docs", "examples" },
}
test_dependencies = { "luaunit >= 3.3" }
-- The suite against the installed rock: spec/run.lua --installed finds npu through
-- package.path/cpath (or luarocks' own paths), never this source tree's build; specs that need
-- the source tree's build (C test programs, generators) or ../shared/models skip, saying why.
test = { type = "command", script = "spec/run.lua", flags = { "--installed" } }
