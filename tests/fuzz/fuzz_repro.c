/*
 * fuzz_repro.c — runs files through one fuzz target without libFuzzer (for a debugger, or a
 * build without -fsanitize=fuzzer): fuzz_repro <target> <file>...  Prints each file's status
 * and message; exits 1 when the contract of fuzz_check breaks.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"

int main(int argc, char **argv) {
  if (argc < 3 || !fuzz_find_target(argv[1])) {
    fprintf(stderr, "usage: fuzz_repro <target> <file>...; targets:");
    for (int i = 0; i < FUZZ_N_TARGETS; i++) fprintf(stderr, " %s", fuzz_targets[i].name);
    fprintf(stderr, "\n");
    return 2;
  }
  const fuzz_target *t = fuzz_find_target(argv[1]);
  fuzz_env env;
  snprintf(env.dir, sizeof env.dir, "/tmp/npu-fuzz-repro-XXXXXX");
  if (!mkdtemp(env.dir)) return 2;
  npu_context *ctx;
  npu_context_config cfg = {.n_threads = 1, .memory_limit = FUZZ_MEMORY_LIMIT};
  if (npu_context_new(&cfg, &ctx)) return 2;
  int rc = 0;
  for (int i = 2; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      perror(argv[i]);
      return 2;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    uint8_t *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) return 2;
    fclose(f);
    npu_status st;
    const char *broke = fuzz_check(ctx, &env, t, b, (size_t)n, &st);
    printf("%s: %s %s%s%s\n", argv[i], npu_status_name(st), st ? npu_context_errmsg(ctx) : "",
           broke ? " BROKE: " : "", broke ? broke : "");
    if (broke) rc = 1;
    free(b);
  }
  npu_context_release(ctx);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", env.dir);
  if (system(cmd)) rc = rc ? rc : 0;
  return rc;
}
