/*
 * fuzz_main.c — the libFuzzer harness: one executable per target of tests/fuzz/fuzz.h, built
 * by `make fuzz` with -DFUZZ_TARGET=<name> under AddressSanitizer + UndefinedBehaviorSanitizer.
 * Each input goes through fuzz_check; a broken contract (a leak of context bytes, an error
 * without a message, NPU_ERR_INTERNAL) aborts with the reason, so libFuzzer saves the input as
 * a crash like any sanitizer report.  Files the readers read go to a directory made here
 * ($TMPDIR/npu-fuzz-<target>-XXXXXX), removed at exit.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"

#ifndef FUZZ_TARGET
#error "build with -DFUZZ_TARGET=<target name>"
#endif
#define FUZZ_STR2(x) #x
#define FUZZ_STR(x) FUZZ_STR2(x)

static npu_context *fuzz_ctx;
static fuzz_env fuzz_environment;
static const fuzz_target *fuzz_current;

static void fuzz_cleanup(void) {
  const char *names[] = {"weights.bin", "model", "t.npy", "t2.npy", "t.safetensors",
                         "fusion_switch.cfg", "ops_info.json", "customize_dtypes.cfg",
                         "op_precision.ini"};
  char path[1200];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    fuzz_path(path, sizeof path, &fuzz_environment, names[i]);
    remove(path);
  }
  remove(fuzz_environment.dir);
  npu_context_release(fuzz_ctx);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_current = fuzz_find_target(FUZZ_STR(FUZZ_TARGET));
  if (!fuzz_current) {
    fprintf(stderr, "fuzz: unknown target '%s'\n", FUZZ_STR(FUZZ_TARGET));
    exit(2);
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(fuzz_environment.dir, sizeof fuzz_environment.dir, "%s/npu-fuzz-%s-XXXXXX",
           tmp && *tmp ? tmp : "/tmp", fuzz_current->name);
  if (!mkdtemp(fuzz_environment.dir)) {
    perror("fuzz: mkdtemp");
    exit(2);
  }
  npu_context_config cfg = {.n_threads = 1, .memory_limit = FUZZ_MEMORY_LIMIT};
  if (npu_context_new(&cfg, &fuzz_ctx) != NPU_OK) exit(2);
  atexit(fuzz_cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  npu_status st;
  const char *broke = fuzz_check(fuzz_ctx, &fuzz_environment, fuzz_current, data, size, &st);
  if (broke) {
    fprintf(stderr, "fuzz: %s: %s [%s: %s]\n", fuzz_current->name, broke, npu_status_name(st),
            npu_context_errmsg(fuzz_ctx));
    abort();
  }
  return 0;
}
