/*
 * test_fuzz_corpus.c — the bounded, seeded regression run of the fuzz targets (tests/fuzz/):
 * every reader of untrusted bytes (binary GraphDef, TensorFlow.js model.json + weights, model
 * files, .npy, safetensors, tensor bundles, SavedModel directories, and the files the options fusion_switch_file, modify_mixlist,
 * customize_dtypes and op_precision_mode name) gets
 *   1. each seed as is: it must read (NPU_OK), so the mutations start from valid files;
 *   2. deterministic mutations of each seed (tests/fuzz/fuzz.h: bit flips, interesting bytes
 *      and words, truncation, deleted and duplicated ranges, varint tampering, tokens), up to
 *      FUZZ_MUTATIONS per small seed (fewer for the large model seeds);
 *   3. the minimized inputs that once broke a reader (spec/fixtures/fuzz/<target>/).
 * Each run must end in NPU_OK or an error status with a message, with the context's live
 * bytes back where they were; the sanitizers (`make sanitize`) catch the rest.
 * Environment: NPU_FUZZ_MUTATIONS (default 300), NPU_FUZZ_FIXTURES (default spec/fixtures),
 * NPU_FUZZ_SAVE (a path: each input is written there before it runs, so the one that crashed
 * the run is there afterwards), NPU_FUZZ_ONLY (one target's name).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "fuzz/fuzz_seeds.h"

typedef struct seed {
  char label[128];
  uint8_t *data;
  size_t size;
} seed;

typedef struct seed_list {
  seed *v;
  int n, cap;
} seed_list;

static void add_seed(void *ud, const char *label, const uint8_t *data, size_t size) {
  seed_list *l = ud;
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    seed *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return;
    l->v = v, l->cap = cap;
  }
  seed *s = &l->v[l->n];
  snprintf(s->label, sizeof s->label, "%s", label);
  s->data = malloc(size ? size : 1);
  if (!s->data) return;
  if (size) memcpy(s->data, data, size);
  s->size = size;
  l->n++;
}

static void free_seeds(seed_list *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i].data);
  free(l->v);
  *l = (seed_list){0};
}

static long n_runs, n_ok, n_failed;

static const char *save_path; /* NPU_FUZZ_SAVE: each input is written there before it runs */

static void run_one(npu_context *ctx, const fuzz_env *env, const fuzz_target *t, const char *what,
                    const uint8_t *data, size_t size, long mutation) {
  npu_status st;
  if (save_path) fuzz_write_file(save_path, data, size);
  const char *broke = fuzz_check(ctx, env, t, data, size, &st);
  n_runs++;
  n_ok += st == NPU_OK;
  CHECK(broke == NULL);
  if (broke && ++n_failed <= 10) {
    fprintf(stderr, "  %s: %s, mutation %ld (%zu bytes): %s [%s: %s]\n", t->name, what, mutation,
            size, broke, npu_status_name(st), npu_context_errmsg(ctx));
  }
}

/* spec/fixtures/fuzz/<target>/: inputs that once broke the reader. */
static int run_regressions(npu_context *ctx, const fuzz_env *env, const fuzz_target *t,
                           const char *fixtures) {
  char dir_path[1200];
  snprintf(dir_path, sizeof dir_path, "%s/fuzz/%s", fixtures, t->name);
  DIR *d = opendir(dir_path);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[1600];
    snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
    size_t size;
    uint8_t *b = fuzz_read(path, &size);
    CHECK(b != NULL);
    if (!b) continue;
    run_one(ctx, env, t, e->d_name, b, size, -1);
    free(b);
    n++;
  }
  closedir(d);
  return n;
}

/* A file of many entries must read in about linear time: 50000 node lines took minutes when
   each line was checked against every earlier one (and the rules grew one at a time). */
static void many_entries(npu_context *ctx, const fuzz_env *env, const char *target,
                         const char *head, const char *fmt) {
  enum { N = 50000 };
  size_t cap = strlen(head) + (size_t)N * 64, n = 0;
  char *text = malloc(cap);
  if (!text) return;
  n += (size_t)snprintf(text, cap, "%s", head);
  for (int i = 0; i < N; i++) n += (size_t)snprintf(text + n, cap - n, fmt, i);
  clock_t t0 = clock();
  npu_status st;
  CHECK(fuzz_check(ctx, env, fuzz_find_target(target), (const uint8_t *)text, n, &st) == NULL);
  CHECK(st == NPU_OK);
  double cpu = (double)(clock() - t0) / CLOCKS_PER_SEC;
  CHECK(cpu < 1.5);
  printf("  %-16s %d entries in %.3f s\n", target, N, cpu);
  free(text);
}

int main(void) {
  const char *m = getenv("NPU_FUZZ_MUTATIONS");
  long mutations = m && *m ? atol(m) : 300;
  const char *only = getenv("NPU_FUZZ_ONLY");
  save_path = getenv("NPU_FUZZ_SAVE");
  const char *fixtures = getenv("NPU_FUZZ_FIXTURES");
  if (!fixtures || !*fixtures) fixtures = "spec/fixtures";
  const char *tmp = getenv("TMPDIR");
  fuzz_env env;
  snprintf(env.dir, sizeof env.dir, "%s/npu-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(env.dir)) {
    perror("mkdtemp");
    return 1;
  }
  npu_context *ctx;
  npu_context_config cfg = {.n_threads = 1, .memory_limit = FUZZ_MEMORY_LIMIT};
  if (npu_context_new(&cfg, &ctx) != NPU_OK) return 1;
  clock_t start = clock();
  uint8_t *buf = NULL;
  for (int ti = 0; ti < FUZZ_N_TARGETS; ti++) {
    const fuzz_target *t = &fuzz_targets[ti];
    if (only && *only && strcmp(only, t->name) != 0) continue;
    clock_t t0 = clock();
    long runs0 = n_runs, ok0 = n_ok;
    seed_list seeds = {0};
    npu_status st = fuzz_seeds(ctx, &env, t, add_seed, &seeds);
    if (st) fprintf(stderr, "%s seeds: %s\n", t->name, npu_context_errmsg(ctx));
    CHECK(st == NPU_OK);
    char age[1200];
    snprintf(age, sizeof age, "%s/age", fixtures);
    st = fuzz_model_seeds(ctx, &env, t, age, "age", add_seed, &seeds);
    if (st) fprintf(stderr, "%s seeds of %s: %s\n", t->name, age, npu_context_errmsg(ctx));
    CHECK(st == NPU_OK);
    snprintf(age, sizeof age, "%s/tf2_dense", fixtures); /* a TF2 SavedModel (savedmodel_spec) */
    st = fuzz_model_seeds(ctx, &env, t, age, "tf2_dense", add_seed, &seeds);
    if (st) fprintf(stderr, "%s seeds of %s: %s\n", t->name, age, npu_context_errmsg(ctx));
    CHECK(st == NPU_OK);
    CHECK(seeds.n > 0);
    for (int si = 0; si < seeds.n; si++) {
      seed *s = &seeds.v[si];
      npu_status seed_st;
      CHECK(fuzz_check(ctx, &env, t, s->data, s->size, &seed_st) == NULL);
      CHECK(seed_st == NPU_OK);
      if (seed_st)
        fprintf(stderr, "  %s: seed %s does not read: %s\n", t->name, s->label,
                npu_context_errmsg(ctx));
      /* large seeds (real models) take longer per run: fewer mutations */
      long n_mut = s->size > 16384 ? mutations / 8 : mutations;
      size_t cap = s->size + 4096;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) break;
      buf = nb;
      fuzz_rng rng = {0x5eed0000u + (uint64_t)ti * 1000 + (uint64_t)si};
      for (long k = 0; k < n_mut; k++) {
        memcpy(buf, s->data, s->size);
        size_t len = fuzz_mutate(buf, s->size, cap, &rng);
        run_one(ctx, &env, t, s->label, buf, len, k);
      }
    }
    int n_reg = run_regressions(ctx, &env, t, fixtures);
    printf("  %-16s %2d seeds, %3d regression inputs, %5ld runs (%4ld read), %.2f s\n", t->name,
           seeds.n, n_reg, n_runs - runs0, n_ok - ok0, (double)(clock() - t0) / CLOCKS_PER_SEC);
    free_seeds(&seeds);
  }
  free(buf);
  printf("  %ld runs in %.2f s CPU\n", n_runs, (double)(clock() - start) / CLOCKS_PER_SEC);
  if (!only || !*only) {
    many_entries(ctx, &env, "op_precision", "[ByNodeName]\n", "node_%d = high_performance\n");
    many_entries(ctx, &env, "customize_dtypes", "", "node_%d::InputDtype:float16\n");
  }
  npu_context_release(ctx);
  /* the files the targets wrote */
  fuzz_remove_staged(&env);
  DIR *d = opendir(env.dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[1600];
    snprintf(path, sizeof path, "%s/%s", env.dir, e->d_name);
    remove(path);
  }
  if (d) closedir(d);
  remove(env.dir);
  return check_summary("test_fuzz_corpus");
}
