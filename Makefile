# lua-npu — build, test, examples, benchmarks.
#
#   make            the Lua module (npu/core.so, with npu/*.lua linked in so that
#                   `require "npu"` works from the checkout) and the C library (build/libnpu.a,
#                   build/libnpu.so, header csrc/include/npu.h)
#   make example    install what is missing, build, run examples/quickstart.lua
#   make test       install what is missing, build, run the C tests and the whole LuaUnit suite
#   make sanitize   the same suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench      benchmarks (ratios against raw OpenBLAS)
#   make docs       regenerate docs/options.md and docs/ops.md from the option and op tables
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

WARN      = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes $(WERROR)
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -DNPU_BUILD -fPIC -fvisibility=hidden $(WARN) $(CFLAGS) \
             -Icsrc -I$(LUA_INCDIR) -I$(OPENBLAS_INCDIR) -I$(CJSON_INCDIR) $(EXTRA_CFLAGS)
BLAS_LIBS = $(if $(OPENBLAS_LIBDIR),-L$(OPENBLAS_LIBDIR)) -lopenblas
LIBS      = $(BLAS_LIBS) -lcjson -lm -lpthread

# Layers, as DESIGN.md lists them; the binding is the only code that includes lua.h.
CORE_SRC = $(wildcard csrc/core/*.c csrc/options/*.c csrc/ops/*.c csrc/kernels/*.c \
                      csrc/compile/*.c csrc/exec/*.c csrc/io/*.c csrc/*.c)
BIND_SRC = $(wildcard csrc/bind/*.c)
CORE_OBJ = $(CORE_SRC:%.c=$(BUILD)/%.o)
BIND_OBJ = $(BIND_SRC:%.c=$(BUILD)/%.o)
HEADERS  = $(wildcard csrc/*/*.h csrc/*/*.def)
LUA_SRC  = $(wildcard lua/npu/*.lua)

MODULE_DIR ?= .
MODULE   = $(MODULE_DIR)/npu/core.so
LIB_A    = $(BUILD)/libnpu.a
LIB_SO   = $(BUILD)/libnpu.so

.PHONY: all deps example test check sanitize bench bench-serve docs clean install lua-links fuzz serve histogram-table

all: $(MODULE) $(LIB_A) $(LIB_SO) lua-links serve

# npu-serve (tools/serve/): TF Serving's REST API over the C API.  Optional: it needs
# libmicrohttpd (Debian libmicrohttpd-dev, which tools/install-deps.sh installs); without it
# everything else builds and the serving spec skips, saying why.
MHD_INCDIR ?= /usr/include
SERVE     = $(BUILD)/npu-serve
SERVE_SRC = $(wildcard tools/serve/*.c)
ifneq ($(wildcard $(MHD_INCDIR)/microhttpd.h),)
serve: $(SERVE)
$(SERVE): $(SERVE_SRC) $(wildcard tools/serve/*.h) $(LIB_A)
	$(CC) $(ALL_CFLAGS) -I$(MHD_INCDIR) -Itools/serve -o $@ $(SERVE_SRC) $(LIB_A) -lmicrohttpd $(LIBS)
else
serve:
	@echo "npu-serve: not built: libmicrohttpd-dev is missing ($(MHD_INCDIR)/microhttpd.h); tools/install-deps.sh installs it"
endif

$(BUILD)/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIB_A): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(CORE_OBJ)
	$(CC) $(LIBFLAG) $(CFLAGS) $(EXTRA_LDFLAGS) -o $@ $^ $(LIBS)

# The module links the library statically: one file to install, no rpath.  Never liblua.
$(MODULE): $(BIND_OBJ) $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAG) $(CFLAGS) $(EXTRA_LDFLAGS) -o $@ $^ $(LIBS)

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
$(BUILD)/tests/%: tests/%.c $(LIB_A) $(wildcard tests/*.h tests/fuzz/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LIBS)

EMBED = $(BUILD)/examples/embed
$(EMBED): examples/embed.c $(LIB_A) $(BIND_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BIND_OBJ) $(LIB_A) $(LIBS) -llua5.4 -ldl

$(BUILD)/gen_options_doc: tools/gen_options_doc.c $(LIB_A)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LIBS)

$(BUILD)/gen_ops_doc: tools/gen_ops_doc.c $(LIB_A)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LIBS)

# The histogram summary's constant tables (csrc/kernels/histogram_table.h, committed): made
# again only when their rule changes; tests/test_events.c checks them against it.
$(BUILD)/gen_histogram_table: tools/gen_histogram_table.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $<
histogram-table: $(BUILD)/gen_histogram_table
	$(BUILD)/gen_histogram_table > csrc/kernels/histogram_table.h

# The plan verifier (compile/verify.c) checks every pass's output while testing.
test sanitize: export NPU_VERIFY_PLANS = 1

# export_compile_stat (default 1) writes fusion_result.json when a session closes: under
# $ASCEND_WORK_PATH/FE/<pid>/ when that is set, else in the working directory.  The suite's
# sessions put theirs in the build tree.
test sanitize: export ASCEND_WORK_PATH ?= $(abspath $(BUILD))/ascend_work
test: deps
	$(MAKE) all $(C_TESTS) $(EMBED) $(BUILD)/gen_options_doc $(BUILD)/gen_ops_doc
	@for t in $(C_TESTS); do echo "== $$t"; $$t || exit 1; done
	@echo "== $(EMBED)"; $(EMBED)
	$(LUA) spec/run.lua

check: test

# Sanitizers: a separate build tree; the interpreter is not instrumented, so the runtime is
# preloaded.  LeakSanitizer runs with suppressions for the interpreter and OpenBLAS.
SAN_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
sanitize: deps
	$(MAKE) BUILD=build-san MODULE_DIR=build-san EXTRA_CFLAGS="$(SAN_FLAGS)" EXTRA_LDFLAGS="$(SAN_FLAGS)" OPT=-O1 \
	    all build-san/gen_options_doc build-san/gen_ops_doc $(patsubst $(BUILD)/%,build-san/%,$(C_TESTS)) build-san/examples/embed
	@for t in $(patsubst $(BUILD)/%,build-san/%,$(C_TESTS)) build-san/examples/embed; do \
	    echo "== $$t"; ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=tools/lsan.supp $$t || exit 1; done
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	    ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=tools/lsan.supp \
	    NPU_GEN_OPTIONS_DOC=build-san/gen_options_doc NPU_GEN_OPS_DOC=build-san/gen_ops_doc NPU_MODULE_ROOT=build-san $(LUA) spec/run.lua

# Fuzzing the readers of untrusted files (tests/fuzz/run.sh: libFuzzer + ASan + UBSan, with
# clang, in build-fuzz/): each target FUZZ_SECONDS.  The regression run of the same targets,
# tests/test_fuzz_corpus.c, is part of `make test`; it includes the headers of tests/fuzz/.
FUZZ_SECONDS ?= 10
$(BUILD)/tests/test_fuzz_corpus: $(wildcard tests/fuzz/*.h)
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) MAKE="$(MAKE)" sh tests/fuzz/run.sh

BENCH_BIN = $(BUILD)/bench/bench_matmul
$(BENCH_BIN): bench/bench_matmul.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_A) $(LIBS)

BENCH_REDUCE = $(BUILD)/bench/bench_reduce
$(BENCH_REDUCE): bench/bench_reduce.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIB_A) $(LIBS)

BENCH_CNN = $(BUILD)/bench/bench_cnn
$(BENCH_CNN): bench/bench_cnn.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_A) $(LIBS)

BENCH_MLP = $(BUILD)/bench/bench_mlp
$(BENCH_MLP): bench/bench_mlp.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O3 -o $@ $< $(LIB_A) $(LIBS)

BENCH_CANCEL = $(BUILD)/bench/bench_cancel
$(BENCH_CANCEL): bench/bench_cancel.c tests/cancel_graphs.h $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O2 -o $@ $< $(LIB_A) $(LIBS)

bench: all $(BENCH_BIN) $(BENCH_REDUCE) $(BENCH_CNN) $(BENCH_MLP) $(BENCH_CANCEL)
	$(BENCH_BIN)
	$(BENCH_REDUCE)
	$(BENCH_CNN)
	$(BENCH_MLP)
	$(BENCH_CANCEL)
	$(LUA) bench/mlp.lua
	$(LUA) bench/reduce.lua
	$(LUA) bench/run_overhead.lua
	$(LUA) bench/fusion.lua
	$(LUA) bench/implmode.lua
	$(LUA) bench/profile.lua
	$(LUA) bench/control.lua
	$(LUA) bench/summary.lua

# npu-serve under load: 16 clients x 1000 requests, batching off and on, a version swap mid-run.
SERVE_LOAD = $(BUILD)/bench/serve_load
$(SERVE_LOAD): bench/serve_load.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -o $@ $< -lpthread
bench-serve: all $(SERVE_LOAD)
	$(LUA) bench/serving.lua

docs: $(BUILD)/gen_options_doc $(BUILD)/gen_ops_doc
	$(BUILD)/gen_options_doc > docs/options.md
	$(BUILD)/gen_ops_doc csrc/ops/ops.def > docs/ops.md

install: all
	@test -n "$(INST_LIBDIR)" -a -n "$(INST_LUADIR)" || { echo "install: set INST_LIBDIR and INST_LUADIR (luarocks does)"; exit 1; }
	mkdir -p $(INST_LIBDIR)/npu $(INST_LUADIR)/npu
	cp $(MODULE) $(INST_LIBDIR)/npu/core.so
	cp $(LUA_SRC) $(INST_LUADIR)/npu/
	if [ -n "$(INST_BINDIR)" ]; then mkdir -p $(INST_BINDIR) && cp tools/npu-run $(INST_BINDIR)/npu-run && chmod 755 $(INST_BINDIR)/npu-run; fi
	if [ -n "$(INST_BINDIR)" ] && [ -f $(SERVE) ]; then cp $(SERVE) $(INST_BINDIR)/npu-serve && chmod 755 $(INST_BINDIR)/npu-serve; fi

clean:
	rm -rf build build-san npu
