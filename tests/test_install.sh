#!/bin/sh
# tests/test_install.sh — `make test` runs it: the C library installs like one.
#  1. `make install PREFIX=/opt/npu DESTDIR=<tmp>` lays out libnpu.so.X.Y.Z (SONAME
#     libnpu.so.X, libnpu.so link), libnpu.a, npu.h, npu.pc, the Lua module, its facade and
#     npu-run.
#  2. examples/embed.c is built against that tree through pkg-config, twice (shared, and static
#     with --static), as a host would, and run with the installed Lua module.
#  3. Nothing internal leaks: libnpu.so and libnpu.a define npu_* alone as global symbols, the
#     module luaopen_npu_core alone.
# Environment: MAKE, BUILD (the build tree, default build), CC.
set -e
MAKE=${MAKE:-make}
BUILD=${BUILD:-build}
CC=${CC:-cc}
ROOT=$(pwd)
DEST=$ROOT/$BUILD/install-test
PREFIX=/opt/npu
rm -rf "$DEST"
$MAKE --no-print-directory -s install PREFIX=$PREFIX DESTDIR="$DEST" BUILD="$BUILD" >/dev/null
TREE=$DEST$PREFIX
fail() { echo "test_install: $*" >&2; exit 1; }

# 1. layout
MAJOR=$(sed -n 's/^#define NPU_VERSION_MAJOR \([0-9]*\)$/\1/p' csrc/include/npu.h)
for f in lib/libnpu.so lib/libnpu.so.$MAJOR lib/libnpu.a include/npu.h lib/pkgconfig/npu.pc \
         lib/lua/5.4/npu/core.so share/lua/5.4/npu/init.lua bin/npu-run; do
  [ -e "$TREE/$f" ] || fail "not installed: $PREFIX/$f"
done
[ -L "$TREE/lib/libnpu.so" ] || fail "libnpu.so is not a link"
soname=$(objdump -p "$TREE/lib/libnpu.so" | sed -n 's/^ *SONAME *//p')
[ "$soname" = "libnpu.so.$MAJOR" ] || fail "SONAME is '$soname', expected libnpu.so.$MAJOR"

# 2. a host's build through pkg-config
export PKG_CONFIG_PATH="$TREE/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$DEST"
pkg-config --exists npu || fail "pkg-config does not find npu"
[ "$(pkg-config --modversion npu)" = "$(sed -n 's/^Version: //p' "$TREE/lib/pkgconfig/npu.pc")" ] ||
  fail "pkg-config --modversion"
LUA_FLAGS=$(PKG_CONFIG_SYSROOT_DIR= PKG_CONFIG_PATH= pkg-config --cflags --libs lua5.4)
OUT=$ROOT/$BUILD/install-test/bin
mkdir -p "$OUT"
# shellcheck disable=SC2046
$CC -std=c11 -Wall -Wextra -Werror -o "$OUT/embed" examples/embed.c \
  $(pkg-config --cflags --libs npu) $LUA_FLAGS -lpthread
# shellcheck disable=SC2046
$CC -std=c11 -Wall -Wextra -Werror -o "$OUT/embed-static" examples/embed.c \
  $(pkg-config --cflags npu) "$TREE/lib/libnpu.a" $(pkg-config --static --libs-only-other --libs-only-l npu | sed 's/-lnpu//') \
  $LUA_FLAGS -lpthread
objdump -p "$OUT/embed" | grep -q "NEEDED *libnpu.so.$MAJOR" || fail "embed does not need libnpu.so.$MAJOR"
# Run where the checkout's npu/ is not on the default paths, with the installed module.
export LUA_PATH_5_4="$TREE/share/lua/5.4/?.lua;$TREE/share/lua/5.4/?/init.lua"
export LUA_CPATH_5_4="$TREE/lib/lua/5.4/?.so"
(cd "$OUT" && LD_LIBRARY_PATH="$TREE/lib" ./embed) || fail "embed (shared) failed"
(cd "$OUT" && ./embed-static >/dev/null) || fail "embed (static) failed"

# 3. exported symbols
bad=$(nm -D --defined-only "$TREE/lib/libnpu.so" | awk '{print $3}' | grep -v '^npu_' || true)
[ -z "$bad" ] || fail "libnpu.so exports internals: $(echo $bad | head -c 300)"
bad=$(nm -g --defined-only "$TREE/lib/libnpu.a" | awk 'NF == 3 {print $3}' | grep -v '^npu_' || true)
[ -z "$bad" ] || fail "libnpu.a exports internals: $(echo $bad | head -c 300)"
bad=$(nm -D --defined-only "$TREE/lib/lua/5.4/npu/core.so" | awk '{print $3}' | grep -v '^luaopen_npu_core$' || true)
[ -z "$bad" ] || fail "npu/core.so exports more than luaopen_npu_core: $(echo $bad | head -c 300)"
n=$(nm -D --defined-only "$TREE/lib/libnpu.so" | grep -c ' T npu_')
echo "test_install: installed under DESTDIR $PREFIX, embed built through pkg-config (shared and static) and ran; $n npu_* functions exported, nothing else"
