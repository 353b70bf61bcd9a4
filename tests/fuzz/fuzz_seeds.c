/*
 * fuzz_seeds.c — writes the seed corpus of each fuzz target: fuzz_seeds <out dir> [<models
 * dir>...] makes <out dir>/<target>/ holding the seeds of tests/fuzz/fuzz_seeds.h, plus, for
 * each <models dir>/<name>/<name>.json (+ .bin, input_0.npy), that model's seeds.  `make fuzz`
 * runs it before the fuzzers (models: spec/fixtures and $(FUZZ_MODELS)).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fuzz_seeds.h"

typedef struct out_dir {
  char path[1200];
  int n;
} out_dir;

static void write_seed(void *ud, const char *label, const uint8_t *data, size_t size) {
  out_dir *o = ud;
  char path[1600];
  snprintf(path, sizeof path, "%s/seed-%s", o->path, label);
  if (fuzz_write_file(path, data, size) == 0) o->n++;
  else fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: fuzz_seeds <out dir> [<models dir>...]\n");
    return 2;
  }
  fuzz_env env;
  snprintf(env.dir, sizeof env.dir, "/tmp/npu-fuzz-seeds-XXXXXX");
  if (!mkdtemp(env.dir)) return 2;
  npu_context *ctx;
  if (npu_context_new(NULL, &ctx)) return 2;
  int rc = 0;
  mkdir(argv[1], 0777);
  for (int ti = 0; ti < FUZZ_N_TARGETS; ti++) {
    const fuzz_target *t = &fuzz_targets[ti];
    out_dir o = {.n = 0};
    snprintf(o.path, sizeof o.path, "%s/%s", argv[1], t->name);
    mkdir(o.path, 0777);
    if (fuzz_seeds(ctx, &env, t, write_seed, &o)) {
      fprintf(stderr, "fuzz_seeds: %s: %s\n", t->name, npu_context_errmsg(ctx));
      rc = 1;
    }
    for (int a = 2; a < argc; a++) {
      DIR *d = opendir(argv[a]);
      struct dirent *e;
      while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[1200], json[2600];
        snprintf(dir, sizeof dir, "%s/%s", argv[a], e->d_name);
        snprintf(json, sizeof json, "%s/%s.json", dir, e->d_name);
        struct stat sb;
        if (stat(json, &sb) != 0) {
          snprintf(json, sizeof json, "%s/saved_model.pb", dir); /* a SavedModel directory */
          if (stat(json, &sb) != 0) continue;
        }
        if (fuzz_model_seeds(ctx, &env, t, dir, e->d_name, write_seed, &o))
          fprintf(stderr, "fuzz_seeds: %s: model %s: %s\n", t->name, dir, npu_context_errmsg(ctx));
      }
      if (d) closedir(d);
    }
    printf("  %-16s %d seeds in %s\n", t->name, o.n, o.path);
  }
  npu_context_release(ctx);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", env.dir);
  if (system(cmd) != 0) rc = 1;
  return rc;
}
