rockspec_format = "3.0"
package = "lua-npu"
version = "scm-1"
source = { url = "git+file://." }
description = {
  summary = "NPU sessions (options, graph compilation, execution) for Lua 5.4 on a CPU device",
  license = "MIT",
}
dependencies = { "lua >= 5.4" }
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
}
test = { type = "command", command = "lua5.4 spec/run.lua" }
