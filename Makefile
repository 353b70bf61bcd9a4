# lua-npu — build, test, examples, benchmarks.
#
#   make            the Lua module (npu/core.so, with npu/*.lua linked in so that
#                   `require "npu"` works from the checkout) and the C library (build/libnpu.a,
#                   build/libnpu.so.MAJOR.MINOR.PATCH with its SONAME link libnpu.so.MAJOR and
#                   libnpu.so, header csrc/include/npu.h)
#   make install    PREFIX=/usr/local DESTDIR=: the C library, npu.h, npu.pc (pkg-config:
#                   `pkg-config --cflags --libs npu`, --static for libnpu.a's needs), the
#                   Lua module (INST_LIBDIR, INST_LUADIR: LuaRocks passes them) and npu-run
#   make example    install what is missing, build, run examples/quickstart.lua
#   make test       install what is missing, build, run the C tests and the whole LuaUnit suite
#   make sanitize   the same suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make tsan       the threaded C tests and examples/embed.c under ThreadSanitizer
#   make bench      benchmarks (ratios against raw OpenBLAS)
#   make docs       regenerate docs/options.md and docs/ops.md from the option and op tables,
#                   and the HTML API reference (build/docs/api/index.html) with LDoc (config.ld;
#                   Debian lua-ldoc, optional: without it the reference is skipped, saying so;
#                   lua-discount, optional: renders the comments' markdown, else plain text)
#   make dist       build/lua-npu-VERSION.tar.gz (VERSION: npu.h's), what the rockspec builds
#   make rock-check the rock built from that tarball with luarocks, packed, and its whole suite
#                   run against the installed rock, twice (make test runs a quick form)
#
# Honours the variables LuaRocks passes: CC CFLAGS LIBFLAG LUA_INCDIR INST_LIBDIR INST_LUADIR,
# plus OPENBLAS_INCDIR / OPENBLAS_LIBDIR.

CC        ?= gcc
LUA       ?= lua5.4
LUA_INCDIR ?= /usr/include/lua5.4
OPENBLAS_INCDIR ?= $(firstword $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/aarch64-linux-gnu/openblas-pthread /usr/include/openblas) /usr/include)
OPENBLAS_LIBDIR ?=
CJSON_INCDIR ?= /usr/include
WERROR    ?= -Werror
OPT       ?= -O2
CFLAGS    ?= $(OPT) -g
LIBFLAG   ?= -shared
BUILD     ?= build
PREFIX    ?= /usr/local
LIBDIR    ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
INST_LIBDIR ?= $(LIBDIR)/lua/5.4
INST_LUADIR ?= $(PREFIX)/share/lua/5.4
INST_BINDIR ?= $(PREFIX)/bin

WARN      = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes $(WERROR)
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -DNPU_BUILD -fPIC -fvisibility=hidden $(WARN) $(CFLAGS) \
             -Icsrc -I$(LUA_INCDIR) -I$(OPENBLAS_INCDIR) -I$(CJSON_INCDIR) $(EXTRA_CFLAGS)
# What a host compiling against npu.h uses (no internal headers, no NPU_BUILD).
HOST_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(EXTRA_CFLAGS)
BLAS_LIBS = $(if $(OPENBLAS_LIBDIR),-L$(OPENBLAS_LIBDIR)) -lopenblas
# Collectives over MPI (csrc/dist/, docs/distributed.md): optional at build time.  Built with
# Open MPI when its compiler wrapper is there (Debian libopenmpi-dev, which
# tools/install-deps.sh installs); NPU_MPI=0 builds without it, and then every collective
# fails saying so while everything else works.
NPU_MPI   ?= $(if $(shell command -v mpicc 2>/dev/null),1,0)
ifeq ($(NPU_MPI),1)
MPI_CFLAGS ?= -DNPU_HAVE_MPI $(shell mpicc --showme:compile)
MPI_LIBS   ?= $(shell mpicc --showme:link) -ldl
endif
LIBS      = $(BLAS_LIBS) -lcjson -lm -lpthread $(MPI_LIBS)

# Layers, as DESIGN.md lists them; the binding is the only code that includes lua.h.
CORE_SRC = $(wildcard csrc/core/*.c csrc/options/*.c csrc/ops/*.c csrc/kernels/*.c \
                      csrc/compile/*.c csrc/exec/*.c csrc/dist/*.c csrc/io/*.c csrc/*.c)
BIND_SRC = $(wildcard csrc/bind/*.c)
CORE_OBJ = $(CORE_SRC:%.c=$(BUILD)/%.o)
BIND_OBJ = $(BIND_SRC:%.c=$(BUILD)/%.o)
HEADERS  = $(wildcard csrc/*/*.h csrc/*/*.def)
LUA_SRC  = $(wildcard lua/npu/*.lua)

MODULE_DIR ?= .
MODULE   = $(MODULE_DIR)/npu/core.so

# The version lives in npu.h alone (NPU_VERSION_MAJOR/MINOR/PATCH); the SONAME is the major.
version_part = $(shell sed -n 's/^\#define NPU_VERSION_$(1) \([0-9]*\)$$/\1/p' csrc/include/npu.h)
NPU_VERSION := $(call version_part,MAJOR).$(call version_part,MINOR).$(call version_part,PATCH)
NPU_SOMAJOR := $(call version_part,MAJOR)

# The public library exports npu_* and nothing else.  The shared one does so by visibility
# (-fvisibility=hidden, NPU_API on the public functions); the static one is one relocatable
# object prelinked from every core object (ld -r) whose hidden symbols are then made local
# (objcopy --localize-hidden), so a host linking it statically sees no k_copy_nd or npuC_*.
# LIB_INT keeps the internals visible, for the tests and tools that call them.
LIB_A    = $(BUILD)/libnpu.a
LIB_INT  = $(BUILD)/libnpu_int.a
LIB_SO_REAL = $(BUILD)/libnpu.so.$(NPU_VERSION)
LIB_SO   = $(BUILD)/libnpu.so

.PHONY: all boundary deps example test check sanitize tsan bench bench-serve docs clean install install-clib lua-links fuzz serve serve-flags histogram-table dist rock-check

all: $(MODULE) $(LIB_A) $(LIB_INT) $(LIB_SO) lua-links serve

# npu-serve (tools/serve/): TF Serving's REST API over the C API.  Optional: it needs
# libmicrohttpd (Debian libmicrohttpd-dev, which tools/install-deps.sh installs); without it
# everything else builds and the serving spec skips, saying why.
MHD_INCDIR ?= /usr/include
SERVE     = $(BUILD)/npu-serve
SERVE_SRC = $(wildcard tools/serve/*.c)
ifneq ($(wildcard $(MHD_INCDIR)/microhttpd.h),)
serve: $(SERVE)
$(SERVE): $(SERVE_SRC) $(wildcard tools/serve/*.h tools/serve/*.def) $(LIB_A)  # the public API alone
	$(CC) $(ALL_CFLAGS) -I$(MHD_INCDIR) -Itools/serve -o $@ $(SERVE_SRC) $(LIB_A) -lmicrohttpd $(LIBS)
# npu.serve's list of flags (lua/npu/serve_flags.lua) is npu-serve's own (tools/serve/flags.def),
# as `npu-serve --list_flags` prints it; spec/serving_spec.lua fails while they disagree.
serve-flags: $(SERVE)
	@{ echo '-- serve_flags.lua — GENERATED by `make serve-flags` from `npu-serve --list_flags`'; \
	   echo '-- (tools/serve/flags.def): the flags npu.serve passes on (lua/npu/serve.lua).  Do not edit.'; \
	   echo 'return {'; $(SERVE) --list_flags | sed 's/.*/  "&",/'; echo '}'; } > lua/npu/serve_flags.lua
else
serve-flags:
	@echo "serve-flags: npu-serve is not built (libmicrohttpd-dev is missing)"; exit 1
serve:
	@echo "npu-serve: not built: libmicrohttpd-dev is missing ($(MHD_INCDIR)/microhttpd.h); tools/install-deps.sh installs it"
endif

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# One boundary: the binding sees npu.h alone (no -Icsrc, so no internal header resolves), so a
# C host can do whatever Lua can; `make boundary` (part of `make test`) also refuses any quoted
# include in csrc/bind/ but npu.h and bind.h.
BIND_CFLAGS = -std=c11 -D_GNU_SOURCE -DNPU_BUILD -fPIC -fvisibility=hidden $(WARN) $(CFLAGS) \
              -Icsrc/include -I$(LUA_INCDIR) -I$(CJSON_INCDIR) $(EXTRA_CFLAGS)
$(BUILD)/csrc/bind/%.o: csrc/bind/%.c csrc/bind/bind.h csrc/include/npu.h
	@mkdir -p $(dir $@)
	$(CC) $(BIND_CFLAGS) -c $< -o $@
boundary:
	@bad=$$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' csrc/bind/*.c csrc/bind/*.h | grep -v '"npu.h"\|"bind.h"'); \
	if [ -n "$$bad" ]; then echo "csrc/bind/ may include npu.h alone of the library's headers:"; echo "$$bad"; exit 1; fi

# Only the MPI layer sees mpi.h; the stamp rebuilds it when NPU_MPI changes.
$(BUILD)/csrc/dist/%.o: csrc/dist/%.c $(HEADERS) $(BUILD)/mpi-$(NPU_MPI).stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(MPI_CFLAGS) -c $< -o $@
$(BUILD)/mpi-$(NPU_MPI).stamp:
	@mkdir -p $(BUILD) && rm -f $(BUILD)/mpi-*.stamp && touch $@

$(LIB_INT): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libnpu.o: $(CORE_OBJ)
	$(LD) -r -o $@.tmp $^
	objcopy --localize-hidden $@.tmp $@ && rm -f $@.tmp

$(LIB_A): $(BUILD)/libnpu.o
	rm -f $@ && ar rcs $@ $^

$(LIB_SO_REAL): $(CORE_OBJ)
	$(CC) $(LIBFLAG) $(CFLAGS) $(EXTRA_LDFLAGS) -Wl,-soname,libnpu.so.$(NPU_SOMAJOR) -o $@ $^ $(LIBS)

$(LIB_SO): $(LIB_SO_REAL)
	ln -sf libnpu.so.$(NPU_VERSION) $(BUILD)/libnpu.so.$(NPU_SOMAJOR)
	ln -sf libnpu.so.$(NPU_VERSION) $@

# The module links the library statically: one file to install, no rpath.  Never liblua.
# It exports luaopen_npu_core alone (tools/module.map): the npu_* inside it bind to its own
# copy, even in a host that also links libnpu.so.
$(MODULE): $(BIND_OBJ) $(CORE_OBJ) tools/module.map
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAG) $(CFLAGS) $(EXTRA_LDFLAGS) -Wl,--version-script=tools/module.map -o $@ \
	    $(BIND_OBJ) $(CORE_OBJ) $(LIBS)

# npu/<x>.lua -> lua/npu/<x>.lua, so the checkout itself is a valid package path root.
lua-links:
	@mkdir -p npu
	@for f in $(LUA_SRC); do ln -sf ../$$f npu/$$(basename $$f); done

deps:
	@sh tools/install-deps.sh

example: deps
	$(MAKE) all
	$(LUA) examples/quickstart.lua

# C tests: one executable per module, each run; then the Lua suite.
C_TESTS = $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*.c))
$(BUILD)/tests/%: tests/%.c $(LIB_INT) $(wildcard tests/*.h tests/fuzz/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_INT) $(LIBS)
# test_dist once more with csrc/dist/dist.c compiled without MPI (the only file MPI changes;
# its object comes before the library, so the library's MPI one is not linked): the library
# built without MPI, checked in every build.
C_TESTS += $(BUILD)/tests/test_dist_nompi
$(BUILD)/tests/test_dist_nompi: tests/test_dist.c csrc/dist/dist.c $(LIB_INT) $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c csrc/dist/dist.c -o $(BUILD)/tests/dist_nompi.o
	$(CC) $(ALL_CFLAGS) -o $@ tests/test_dist.c $(BUILD)/tests/dist_nompi.o $(LIB_INT) $(LIBS)

# The embedding example, as a host builds it: npu.h and the public libnpu.a, plus liblua; it
# loads the npu module as any Lua program does (require, from package.cpath: here ./npu/core.so).
EMBED = $(BUILD)/examples/embed
$(EMBED): examples/embed.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) -Icsrc/include -I$(LUA_INCDIR) -o $@ $< $(LIB_A) $(LIBS) -llua5.4 -ldl

$(BUILD)/gen_options_doc: tools/gen_options_doc.c $(LIB_INT)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_INT) $(LIBS)

$(BUILD)/gen_ops_doc: tools/gen_ops_doc.c $(LIB_INT)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_INT) $(LIBS)

# The histogram summary's constant tables (csrc/kernels/histogram_table.h, committed): made
# again only when their rule changes; tests/test_events.c checks them against it.
$(BUILD)/gen_histogram_table: tools/gen_histogram_table.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $<
histogram-table: $(BUILD)/gen_histogram_table
	$(BUILD)/gen_histogram_table > csrc/kernels/histogram_table.h

# The plan verifier (compile/verify.c) checks every pass's output while testing.
test sanitize: export NPU_VERIFY_PLANS = 1

# Files sessions write without a path of their own (export_compile_stat's fusion_result.json,
# profiles, exception dumps, ...) go under $ASCEND_WORK_PATH, else ./npu_out.  The suite's
# sessions put theirs in the build tree.
test sanitize: export ASCEND_WORK_PATH ?= $(abspath $(BUILD))/ascend_work
# The operator cache (op_compiler_cache_mode, default enable) is read by every session: the
# suite's is the build tree's, never $HOME/atc_data, so tuning records a developer made cannot
# change what the suite computes; the specs that write records name directories of their own.
test sanitize: export ASCEND_CACHE_PATH ?= $(abspath $(BUILD))/ascend_cache
test: deps boundary
	$(MAKE) all $(C_TESTS) $(EMBED) $(BUILD)/gen_options_doc $(BUILD)/gen_ops_doc
	@for t in $(C_TESTS); do echo "== $$t"; $$t || exit 1; done
	@echo "== $(EMBED)"; $(EMBED)
	@echo "== tests/test_install.sh"; MAKE="$(MAKE)" BUILD=$(BUILD) CC="$(CC)" sh tests/test_install.sh
	@echo "== tests/test_rock.sh (quick: make rock-check runs the whole suite on the rock, twice)"; MAKE="$(MAKE)" sh tests/test_rock.sh
	$(LUA) spec/run.lua

# The rock, in full: make dist, luarocks build from the tarball, luarocks pack, and luarocks
# test (the whole suite against the installed rock) twice in a row; all in a temporary
# directory (tests/test_rock.sh).  .ci/run runs it.
rock-check:
	MAKE="$(MAKE)" FULL=1 sh tests/test_rock.sh

check: test

# Sanitizers: a separate build tree; the interpreter is not instrumented, so the runtime is
# preloaded.  LeakSanitizer runs with suppressions for the interpreter and OpenBLAS.
SAN_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
sanitize: deps
	$(MAKE) BUILD=build-san MODULE_DIR=build-san EXTRA_CFLAGS="$(SAN_FLAGS)" EXTRA_LDFLAGS="$(SAN_FLAGS)" OPT=-O1 \
	    all build-san/gen_options_doc build-san/gen_ops_doc $(patsubst $(BUILD)/%,build-san/%,$(C_TESTS)) build-san/examples/embed
	@for t in $(patsubst $(BUILD)/%,build-san/%,$(C_TESTS)) build-san/examples/embed; do \
	    echo "== $$t"; LUA_CPATH_5_4='build-san/?.so;;' ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=tools/lsan.supp $$t || exit 1; done
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	    ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=tools/lsan.supp \
	    NPU_GEN_OPTIONS_DOC=build-san/gen_options_doc NPU_GEN_OPS_DOC=build-san/gen_ops_doc NPU_MODULE_ROOT=build-san $(LUA) spec/run.lua

# ThreadSanitizer: the tests that run threads against one context (8 threads hammering one
# session under graph_max_parallel_model_num, cancellation from other threads, host ops) and the
# embedding example (two lua_States on two threads), in build-tsan/.  OpenBLAS runs one thread
# (context.c), so its uninstrumented code races with nothing of ours.
TSAN_FLAGS = -fsanitize=thread -fno-omit-frame-pointer
TSAN_TESTS = test_parallel test_cancel test_host_op test_context test_progress
tsan: deps
	$(MAKE) BUILD=build-tsan MODULE_DIR=build-tsan EXTRA_CFLAGS="$(TSAN_FLAGS)" EXTRA_LDFLAGS="$(TSAN_FLAGS)" OPT=-O1 \
	    build-tsan/npu/core.so lua-links $(patsubst %,build-tsan/tests/%,$(TSAN_TESTS)) build-tsan/examples/embed
	@for t in $(patsubst %,build-tsan/tests/%,$(TSAN_TESTS)) build-tsan/examples/embed; do \
	    echo "== $$t"; LUA_CPATH_5_4='build-tsan/?.so;;' TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tools/tsan.supp" $$t || exit 1; done

# Fuzzing the readers of untrusted files (tests/fuzz/run.sh: libFuzzer + ASan + UBSan, with
# clang, in build-fuzz/): each target FUZZ_SECONDS.  The regression run of the same targets,
# tests/test_fuzz_corpus.c, is part of `make test`; it includes the headers of tests/fuzz/.
FUZZ_SECONDS ?= 10
$(BUILD)/tests/test_fuzz_corpus: $(wildcard tests/fuzz/*.h)
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) MAKE="$(MAKE)" sh tests/fuzz/run.sh

BENCH_BIN = $(BUILD)/bench/bench_matmul
$(BENCH_BIN): bench/bench_matmul.c bench/bench.h $(LIB_INT)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_INT) $(LIBS)

BENCH_REDUCE = $(BUILD)/bench/bench_reduce
$(BENCH_REDUCE): bench/bench_reduce.c bench/bench.h $(LIB_INT)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_INT) $(LIBS)

BENCH_CNN = $(BUILD)/bench/bench_cnn
$(BENCH_CNN): bench/bench_cnn.c bench/bench.h $(LIB_INT)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_INT) $(LIBS)

BENCH_MLP = $(BUILD)/bench/bench_mlp
$(BENCH_MLP): bench/bench_mlp.c bench/bench.h $(LIB_INT)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_INT) $(LIBS)

BENCH_GEMM_F32 = $(BUILD)/bench/bench_gemm_f32
$(BENCH_GEMM_F32): bench/bench_gemm_f32.c bench/bench.h $(LIB_INT)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_INT) $(LIBS)

BENCH_WINOGRAD = $(BUILD)/bench/bench_winograd
$(BENCH_WINOGRAD): bench/bench_winograd.c bench/bench.h $(LIB_INT)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_INT) $(LIBS)

BENCH_CONV_GRAD_BF16 = $(BUILD)/bench/bench_conv_grad_bf16
$(BENCH_CONV_GRAD_BF16): bench/bench_conv_grad_bf16.c bench/bench.h $(LIB_INT)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_INT) $(LIBS)

BENCH_CONV_BF16 = $(BUILD)/bench/bench_conv_bf16
$(BENCH_CONV_BF16): bench/bench_conv_bf16.c bench/bench.h $(LIB_INT)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_INT) $(LIBS)

BENCH_CANCEL = $(BUILD)/bench/bench_cancel
$(BENCH_CANCEL): bench/bench_cancel.c tests/cancel_graphs.h $(LIB_INT)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O2 -o $@ $< $(LIB_INT) $(LIBS)

bench: all $(BENCH_BIN) $(BENCH_REDUCE) $(BENCH_CNN) $(BENCH_MLP) $(BENCH_CANCEL) $(BENCH_WINOGRAD) $(BENCH_GEMM_F32) \
       $(BENCH_CONV_GRAD_BF16) $(BENCH_CONV_BF16)
	$(BENCH_BIN)
	$(BENCH_REDUCE)
	$(BENCH_CNN)
	$(BENCH_CONV_GRAD_BF16)
	$(BENCH_CONV_BF16)
	$(BENCH_MLP)
	$(BENCH_CANCEL)
	$(BENCH_WINOGRAD) 5
	$(LUA) bench/versus_torch.lua
	$(LUA) bench/mlp.lua
	$(LUA) bench/cnn_mixed_bf16.lua
	$(LUA) bench/bf16_models.lua
	$(LUA) bench/reduce.lua
	$(LUA) bench/run_overhead.lua
	$(LUA) bench/fusion.lua
	$(LUA) bench/tuning.lua
	$(LUA) bench/implmode.lua
	$(LUA) bench/profile.lua
	$(LUA) bench/control.lua
	$(LUA) bench/progress.lua
	$(LUA) bench/summary.lua
	$(LUA) bench/distributed.lua

# npu-serve under load: 16 clients x 1000 requests, batching off and on, a version swap mid-run.
SERVE_LOAD = $(BUILD)/bench/serve_load
$(SERVE_LOAD): bench/serve_load.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -o $@ $< -lpthread
bench-serve: all $(SERVE_LOAD)
	$(LUA) bench/serving.lua

LDOC ?= ldoc
docs: $(BUILD)/gen_options_doc $(BUILD)/gen_ops_doc
	$(BUILD)/gen_options_doc > docs/options.md
	$(BUILD)/gen_ops_doc csrc/ops/ops.def > docs/ops.md
	@if command -v $(LDOC) >/dev/null 2>&1; then \
	  $(LDOC) -c config.ld -d $(BUILD)/docs/api . > $(BUILD)/ldoc.log 2>&1; rc=$$?; \
	  grep -v -e '^found master module' -e '^\*\*\*closing section' -e '^reading configuration' \
	          -e '^format: ' $(BUILD)/ldoc.log; \
	  if grep -q '^format: ' $(BUILD)/ldoc.log; then \
	    echo "make docs: LDoc found no Discount, so the reference shows \`code\` and lists as plain" \
	         "text (or mangles names with underscores); install it (Debian: apt-get install lua-discount)."; \
	  fi; \
	  test $$rc = 0 && echo "API reference: $(BUILD)/docs/api/index.html"; \
	else \
	  echo "make docs: '$(LDOC)' not found, so the HTML API reference ($(BUILD)/docs/api) was not built;" \
	       "install LDoc (Debian: apt-get install lua-ldoc) for it. docs/options.md and docs/ops.md are done."; \
	fi

# make install PREFIX=/usr/local DESTDIR=: everything under $(DESTDIR)$(PREFIX) unless the
# directories are given one by one.  LuaRocks passes INST_LIBDIR (the module), INST_LUADIR (the
# facade), INST_BINDIR, and INSTALL_CLIB=no: it would deploy libnpu.so as a Lua module.
install-clib: all
	mkdir -p $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)
	cp $(LIB_SO_REAL) $(LIB_A) $(DESTDIR)$(LIBDIR)/
	ln -sf libnpu.so.$(NPU_VERSION) $(DESTDIR)$(LIBDIR)/libnpu.so.$(NPU_SOMAJOR)
	ln -sf libnpu.so.$(NPU_VERSION) $(DESTDIR)$(LIBDIR)/libnpu.so
	cp csrc/include/npu.h $(DESTDIR)$(INCLUDEDIR)/npu.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(NPU_VERSION)|' -e 's|@LIBS_PRIVATE@|$(strip $(LIBS))|' \
	    tools/npu.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/npu.pc

install: all $(if $(filter no,$(INSTALL_CLIB)),,install-clib)
	mkdir -p $(DESTDIR)$(INST_LIBDIR)/npu $(DESTDIR)$(INST_LUADIR)/npu $(DESTDIR)$(INST_BINDIR)
	cp $(MODULE) $(DESTDIR)$(INST_LIBDIR)/npu/core.so
	cp $(LUA_SRC) $(DESTDIR)$(INST_LUADIR)/npu/
	cp tools/npu-run $(DESTDIR)$(INST_BINDIR)/npu-run && chmod 755 $(DESTDIR)$(INST_BINDIR)/npu-run
	if [ -f $(SERVE) ]; then cp $(SERVE) $(DESTDIR)$(INST_BINDIR)/npu-serve && chmod 755 $(DESTDIR)$(INST_BINDIR)/npu-serve; fi

# make dist: $(DIST), the tracked files as they are in the working tree, under
# lua-npu-$(NPU_VERSION)/, made reproducible (sorted, owner 0, the last commit's time).  The
# version is npu.h's; the release rockspec of that version must exist and say so.
DIST     = $(BUILD)/lua-npu-$(NPU_VERSION).tar.gz
ROCKSPEC = rockspec/lua-npu-$(NPU_VERSION)-1.rockspec
dist:
	@git rev-parse --git-dir >/dev/null 2>&1 || { echo "make dist: needs a git checkout (the tarball holds the tracked files)" >&2; exit 1; }
	@grep -q '^version = "$(NPU_VERSION)-1"$$' $(ROCKSPEC) 2>/dev/null || { echo "make dist: $(ROCKSPEC) is missing or its version is not $(NPU_VERSION)-1 (npu.h's NPU_VERSION_*)" >&2; exit 1; }
	@mkdir -p $(BUILD)
	git ls-files -z | tar --null -T - --sort=name --owner=0 --group=0 --numeric-owner \
	    --mtime=@$$(git log -1 --format=%ct) --transform 's,^,lua-npu-$(NPU_VERSION)/,' \
	    --use-compress-program='gzip -n' -cf $(DIST).tmp
	mv $(DIST).tmp $(DIST)
	@git diff --quiet HEAD -- 2>/dev/null || { echo "make dist: warning: tracked files differ from the last commit, and $(DIST) holds them as they are in the working tree (commit first for a release): $$(git diff --name-only HEAD -- | head -5 | tr '\n' ' ')" >&2; }
	@echo "$(DIST): $$(tar -tzf $(DIST) | grep -vc '/$$') files"

clean:
	rm -rf build build-san build-tsan npu
