#!/bin/sh
# Installs the Debian packages lua-npu needs when any is missing (`make example` and
# `make test` run this first).  Needs root or sudo only when something is missing.
set -e
PKGS="lua5.4 liblua5.4-dev libcjson-dev libopenblas-dev lua-unit luarocks gcc make"
# npu-serve's HTTP library and the serving spec's client: optional at build time (the
# Makefile builds without them and the spec skips), installed here so `make test` has them.
PKGS="$PKGS libmicrohttpd-dev curl"
# Pictures (docs/debugging.md, docs/profiling.md): Graphviz's dot for npu.util.render_graph,
# headless Chromium for the spec that opens the profiler's HTML report.  Optional: without
# them render_graph raises NPU_ERR_NOT_FOUND and those specs skip, saying so.
PKGS="$PKGS graphviz chromium"
# protoc decodes our GraphDef exports against TensorFlow's schema (spec/export_tf_spec.lua,
# which skips without it).
PKGS="$PKGS protobuf-compiler"
# Open MPI (docs/distributed.md): collectives across processes, `mpirun -np 2` in the suite.
# Optional: without it the library builds, collectives fail saying so, the MPI specs skip.
PKGS="$PKGS libopenmpi-dev openmpi-bin"
# LDoc and Discount build the HTML API reference (`make docs`; spec/apidoc_spec.lua builds it
# and checks the pages). Optional: without them that part of the spec skips, saying so.
PKGS="$PKGS lua-ldoc lua-discount"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing:$missing"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
  echo "install-deps: need root to install:$missing" >&2; exit 1; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing
