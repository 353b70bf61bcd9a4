#!/bin/sh
# tests/test_rock.sh — the rock as someone publishing it makes it, and as a user installs and
# tests it:
#  1. `make dist` writes lua-npu-<version>.tar.gz (version: npu.h's NPU_VERSION_*);
#  2. `luarocks build` of rockspec/lua-npu-<version>-1.rockspec, its source.url pointed at that
#     tarball (file://), into a rock tree of its own; `luarocks pack` of the installed rock;
#  3. `luarocks test` in the unpacked tarball: spec/run.lua --installed, the suite against the
#     installed rock, twice in a row (FULL=1), or once with a subset of the specs (the quick
#     form `make test` runs: SPECS, LuaUnit -p patterns).
# Everything happens in a temporary directory, removed at the end: HOME is set there, so
# luarocks' cache and configuration are the temporary ones.  No network: the configuration
# lists no rocks server, and declares luaunit provided (Debian's lua-unit, on Lua's default
# path) so that the test dependency is met without a download.
# Environment: MAKE, FULL (1: the whole suite twice), SPECS (the quick form's patterns).
set -e
MAKE=${MAKE:-make}
ROOT=$(pwd)
fail() { echo "test_rock: $*" >&2; exit 1; }
command -v luarocks >/dev/null 2>&1 || { echo "test_rock: skipped: luarocks is not installed (Debian: luarocks)"; exit 0; }
LUAUNIT=$(lua5.4 -e 'print((require("luaunit")._VERSION))' 2>/dev/null) ||
  { echo "test_rock: skipped: luaunit is not installed for Lua 5.4 (Debian: lua-unit)"; exit 0; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
export HOME="$TMP/home" LUAROCKS_CONFIG="$TMP/config.lua"
mkdir -p "$HOME"
# The quick form builds without optimisation (a third of the compile time; what it tests is the
# packaging and the install, not the speed); FULL=1 builds with luarocks' own CFLAGS.
[ "${FULL:-0}" = 1 ] && CFLAGS_LINE= || CFLAGS_LINE='variables = { CFLAGS = "-O0 -fPIC" }'
cat > "$LUAROCKS_CONFIG" <<EOF
rocks_trees = { "$TMP/tree" }
rocks_servers = {}
rocks_provided = { luaunit = "$LUAUNIT-1" }
$CFLAGS_LINE
EOF
LR="luarocks --lua-version 5.4"

# 1. the tarball
$MAKE --no-print-directory -s dist BUILD="$TMP" >/dev/null
V=$(sed -n 's/^#define NPU_VERSION_MAJOR \([0-9]*\)$/\1/p' csrc/include/npu.h).$(
    sed -n 's/^#define NPU_VERSION_MINOR \([0-9]*\)$/\1/p' csrc/include/npu.h).$(
    sed -n 's/^#define NPU_VERSION_PATCH \([0-9]*\)$/\1/p' csrc/include/npu.h)
TARBALL="$TMP/lua-npu-$V.tar.gz"
[ -f "$TARBALL" ] || fail "make dist wrote no $TARBALL"
tar -tzf "$TARBALL" | grep -qv "^lua-npu-$V/" && fail "$TARBALL holds files outside lua-npu-$V/"
for f in Makefile csrc/include/npu.h lua/npu/init.lua spec/run.lua "rockspec/lua-npu-$V-1.rockspec"; do
  tar -tzf "$TARBALL" "lua-npu-$V/$f" >/dev/null 2>&1 || fail "$TARBALL lacks $f"
done

# 2. build from the tarball, as from its published URL; pack the installed rock
sed "s|^  url = .*|  url = \"file://$TARBALL\",|" "rockspec/lua-npu-$V-1.rockspec" > "$TMP/lua-npu-$V-1.rockspec"
(cd "$TMP" && MAKEFLAGS=${MAKEFLAGS:--j2} $LR build "lua-npu-$V-1.rockspec" > build.log 2>&1) ||
  { tail -30 "$TMP/build.log"; fail "luarocks build failed"; }
for f in lib/lua/5.4/npu/core.so share/lua/5.4/npu/init.lua bin/npu-run; do
  [ -e "$TMP/tree/$f" ] || fail "the rock did not install $f"
done
[ -e "$TMP/tree/lib/lua/5.4/libnpu.so" ] && fail "the rock installed libnpu.so as a Lua module"
(cd "$TMP" && $LR pack lua-npu "$V-1" > pack.log 2>&1) || { cat "$TMP/pack.log"; fail "luarocks pack failed"; }
ROCK="$TMP/lua-npu-$V-1.$($LR config arch 2>/dev/null || echo linux-x86_64).rock"
[ -f "$ROCK" ] || ROCK=$(ls "$TMP"/lua-npu-"$V"-1.*.rock 2>/dev/null | head -1)
[ -f "$ROCK" ] || fail "luarocks pack wrote no .rock"
if command -v unzip >/dev/null 2>&1; then # (a .rock is a zip)
  unzip -l "$ROCK" | grep -q " lib/npu/core.so$" || fail "$ROCK lacks lib/npu/core.so"
fi

# 3. the suite against the installed rock, from the unpacked tarball (which holds no build)
mkdir -p "$TMP/src"
tar -xzf "$TARBALL" -C "$TMP/src"
SRC="$TMP/src/lua-npu-$V"
run_tests() { # $1: a label; the rest: LuaUnit options
  label=$1
  shift
  (cd "$SRC" && env -u ASCEND_WORK_PATH -u ASCEND_CACHE_PATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 \
      $LR test "rockspec/lua-npu-$V-1.rockspec" -- "$@" > "$TMP/test.log" 2>&1) ||
    { tail -60 "$TMP/test.log"; fail "luarocks test ($label) failed"; }
  grep -q "^testing the installed npu: $TMP/tree/" "$TMP/test.log" ||
    { head -5 "$TMP/test.log"; fail "luarocks test ($label) did not test the installed rock"; }
  echo "test_rock: luarocks test ($label): $(grep '^Ran ' "$TMP/test.log")"
}
if [ "${FULL:-0}" = 1 ]; then
  # the model specs too, with the checkout's ../shared/models when it has them
  [ -z "$NPU_MODELS_DIR" ] && [ -d "$ROOT/../shared/models" ] && export NPU_MODELS_DIR="$ROOT/../shared/models"
  run_tests "the whole suite"
  run_tests "the whole suite, again"
else
  # shellcheck disable=SC2086
  run_tests "a subset" $(for p in ${SPECS:-TestExamples TestOutputDir TestTensor TestSession TestRockspec}; do printf -- '-p %s ' "$p"; done)
fi
[ -z "$(ls -A "$SRC/npu" 2>/dev/null)" ] || fail "the source tree was built in: $SRC/npu"
echo "test_rock: lua-npu-$V.tar.gz built with luarocks build, packed ($(basename "$ROCK")), tested installed"
