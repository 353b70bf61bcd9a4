#!/bin/sh
# progress_instructions.sh — what sess:run's progress function costs an iterations_per_loop
# loop, in instructions: bench/progress.lua's loop (1000 iterations a run) counted by valgrind's
# callgrind on the thread that runs the session.  Each variant runs 0 and RUNS runs after the
# same warm-up; the difference is its cost per run, so compiling, loading and the warm-up
# cancel out.  "none" is the loop with no progress function: compare it across builds
# (NPU_MODULE_ROOT=<other checkout> sh bench/progress_instructions.sh) to see what the unset
# hook costs — one NULL test per iteration.
# Usage: sh bench/progress_instructions.sh [RUNS]   (default 20; a minute or two)
set -e
RUNS=${1:-20}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
count() { # variant runs -> instructions of the main thread
  valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$dir/cg" \
    lua5.4 bench/progress.lua count "$1" "$2" >/dev/null 2>&1
  sed -n 's/^totals: //p' "$dir/cg-01"
  rm -f "$dir"/cg*
}
for v in none every100 every1; do
  c0=$(count "$v" 0); c1=$(count "$v" "$RUNS")
  awk -v v="$v" -v a="$c0" -v b="$c1" -v n="$RUNS" 'BEGIN {
    printf "%-9s %12.0f instructions per run of 1000 iterations, %8.1f per iteration\n", v, (b - a) / n, (b - a) / n / 1000 }'
done
