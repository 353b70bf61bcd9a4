#!/bin/sh
# tests/fuzz/run.sh — what `make fuzz` runs: builds the library under libFuzzer's coverage with
# AddressSanitizer + UndefinedBehaviorSanitizer (build-fuzz/), one harness per target of
# tests/fuzz/fuzz.h, writes the seed corpora, and runs each target for FUZZ_SECONDS.
#
# Environment: FUZZ_SECONDS (per target, default 10), FUZZ_TARGETS (default all), FUZZ_FLAGS
# (more libFuzzer flags, e.g. -max_len=16384 to stay on the small seeds), FUZZ_MODELS
# (directories of TensorFlow.js models to seed from, besides spec/fixtures; default
# ../shared/models when present), FUZZ_CC (default clang), MAKE.
# Layout: build-fuzz/fuzz/fuzz_<target> (run one by hand: it takes libFuzzer's flags, or files
# to replay), build-fuzz/seeds/<target>/ (rewritten each time), build-fuzz/corpus/<target>/
# (what the fuzzer found, kept between runs), build-fuzz/crashes/<target>/ (inputs that broke a
# reader: minimize with -minimize_crash=1, then add them to spec/fixtures/fuzz/<target>/).
# Exit status 1 when any target crashed.
set -e
FUZZ_SECONDS=${FUZZ_SECONDS:-10}
FUZZ_CC=${FUZZ_CC:-clang}
MAKE=${MAKE:-make}
TARGETS=${FUZZ_TARGETS:-"graphdef tfjs import_file npy safetensors bundle savedmodel fusion_switch modify_mixlist customize_dtypes op_precision"}
if [ -z "${FUZZ_MODELS+x}" ] && [ -d ../shared/models ]; then FUZZ_MODELS=../shared/models; fi
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
OUT=build-fuzz

$MAKE --no-print-directory CC="$FUZZ_CC" BUILD=$OUT MODULE_DIR=$OUT OPT=-O1 \
  EXTRA_CFLAGS="$SAN -fsanitize=fuzzer-no-link" EXTRA_LDFLAGS="$SAN" $OUT/libnpu_int.a
CFLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -Icsrc -Itests -Wall -Wextra -Werror $SAN"
LIBS="$OUT/libnpu_int.a -lopenblas -lcjson -lm -lpthread"
mkdir -p $OUT/fuzz
$FUZZ_CC $CFLAGS -o $OUT/fuzz/fuzz_seeds tests/fuzz/fuzz_seeds.c $LIBS
$FUZZ_CC $CFLAGS -o $OUT/fuzz/fuzz_repro tests/fuzz/fuzz_repro.c $LIBS
for t in $TARGETS; do
  $FUZZ_CC $CFLAGS -fsanitize=fuzzer -DFUZZ_TARGET="$t" -o $OUT/fuzz/fuzz_"$t" tests/fuzz/fuzz_main.c $LIBS
done
rm -rf $OUT/seeds
ASAN_OPTIONS=detect_leaks=0 $OUT/fuzz/fuzz_seeds $OUT/seeds spec/fixtures $FUZZ_MODELS

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:abort_on_error=1"
export LSAN_OPTIONS="suppressions=$(pwd)/tools/lsan.supp"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=""
for t in $TARGETS; do
  mkdir -p $OUT/corpus/"$t" $OUT/crashes/"$t"
  # regression inputs join the corpus, so a fixed bug that comes back shows at once
  extra=""
  [ -d spec/fixtures/fuzz/"$t" ] && extra="spec/fixtures/fuzz/$t"
  echo "== fuzz $t for ${FUZZ_SECONDS}s"
  if ! $OUT/fuzz/fuzz_"$t" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix=$OUT/crashes/"$t"/ $FUZZ_FLAGS \
      $OUT/corpus/"$t" $OUT/seeds/"$t" $extra > $OUT/fuzz/"$t".log 2>&1; then
    failed="$failed $t"
    grep -E "ERROR|SUMMARY|fuzz: |runtime error|Test unit written" $OUT/fuzz/"$t".log | head -8
  fi
  grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)" $OUT/fuzz/"$t".log | tr '\n' ' '
  echo
done
if [ -n "$failed" ]; then
  echo "fuzz: crashes in:$failed (inputs under $OUT/crashes/, logs under $OUT/fuzz/)"
  exit 1
fi
echo "fuzz: no crash in $FUZZ_SECONDS s per target"
