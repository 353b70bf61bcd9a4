#!/bin/sh
# summary_instructions.sh — what a merged summary every 100 steps costs the digits training, in
# instructions: bench/summary.lua's loop counted by valgrind's callgrind on the thread that
# runs the session (the summary ops, the fetch, add_summary's encoding and CRCs).  Each
# variant runs 0 and LOOPS loops after the same warm-up; the difference is its cost per loop,
# so compiling, loading and the warm-up cancel out.  It repeats to about 0.05 % on a busy
# machine, where the CPU time of bench/summary.lua moves by 1 % from run to run.  Left out:
# the dataset's producer thread (the same work in both, but ahead by a varying amount) and the
# writer's thread (its write calls).  Under valgrind OpenBLAS runs its Haswell (AVX2) kernels,
# not the AVX-512 ones it picks natively, so the training's count is not its native one and the
# ratio is lower than the time's: compare builds by it, and confirm by time
# (lua5.4 bench/summary.lua).
# Usage: sh bench/summary_instructions.sh [LOOPS]   (default 20; a few minutes)
set -e
LOOPS=${1:-20}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
count() { # variant loops -> instructions of the main thread
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$dir/cg" \
    lua5.4 bench/summary.lua count "$1" "$2" >/dev/null 2>&1
  sed -n 's/^totals: //p' "$dir/cg-01"
  rm -f "$dir"/cg*
}
p0=$(count plain 0); p1=$(count plain "$LOOPS"); w0=$(count with 0); w1=$(count with "$LOOPS")
awk -v p0="$p0" -v p1="$p1" -v w0="$w0" -v w1="$w1" -v n="$LOOPS" 'BEGIN {
  p = (p1 - p0) / n; w = (w1 - w0) / n
  printf "instructions per loop of 100 steps (session thread): %.0f without summaries, %.0f with: +%.0f, ratio %.4f\n", p, w, w - p, w / p }'
