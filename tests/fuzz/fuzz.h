/*
 * fuzz.h — what the fuzzers of the readers of untrusted files share: the targets (one per
 * reader), the seed inputs they start from, and a small deterministic mutator.
 *
 * Used by tests/fuzz/fuzz_main.c (a libFuzzer harness per target, `make fuzz`),
 * tests/fuzz/fuzz_seeds.c (writes the seed corpora for it) and tests/test_fuzz_corpus.c (the
 * bounded, seeded regression run inside `make test`).
 *
 * A target takes bytes and hands them to one reader, through a file under env->dir where the
 * reader reads files.  Its contract, checked by fuzz_check: the reader returns NPU_OK or an
 * error status below NPU_ERR_INTERNAL with a non-empty message, and the context holds the
 * bytes it held before (nothing leaked).  Crashes, hangs, out-of-bounds reads and undefined
 * behaviour are the sanitizers' to catch.
 *
 * Input layouts:
 *   graphdef          a binary GraphDef (npu_graph_import_graphdef, in memory)
 *   tfjs              model.json text, then optionally a NUL byte and the bytes of the weight
 *                     file "weights.bin" (npu_graph_import_tfjs; the seeds' manifests name it)
 *   import_file       a file "model" without extension (npu_graph_import_file: sniffed)
 *   npy               a .npy file (npu_tensor_load_npy)
 *   safetensors       a .safetensors file (npu_safetensors_load)
 *   fusion_switch     fusion_switch_file JSON    \
 *   modify_mixlist    modify_mixlist JSON         | parsed where a session's config is made
 *   customize_dtypes  customize_dtypes .cfg       | (npuP_config_init, as npu_session_new does)
 *   op_precision      op_precision_mode .ini     /
 *   bundle            a tensor bundle: [u8 compression][u32 LE n][n bytes: the data block's
 *                     contents][the rest: the data shard].  The harness seals the block (its
 *                     trailer's CRC-32C), adds an empty metaindex, an index block and the
 *                     footer, so mutations reach the block, entry and Snappy parsers past the
 *                     checksum that would stop them; every key is then read, as a tensor and
 *                     as a string (npuI_bundle_read, npuI_bundle_read_string)
 *   savedmodel        [u32 LE n][n bytes: saved_model.pb][the rest: a bundle, as above] as
 *                     the directory sm/ (npu_graph_import_savedmodel, frozen and with
 *                     npu_savedmodel_options.variables)
 * A graph that imports is also walked (names, signature) and exported again
 * (npu_graph_serialize_graphdef), a tensor that loads has every byte read.
 *
 * Header-only: every function is static inline, so each executable takes what it uses.
 */
#ifndef NPU_TESTS_FUZZ_H
#define NPU_TESTS_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>
#include "exec/exec.h"
#include "include/npu.h"
#include "io/bundle.h"
#include "kernels/ksummary.h"

/* Bytes a fuzzed reader may hold at once: a 100-byte file may ask for a constant of 2^40
   elements, which must fail with NPU_ERR_NOMEM (the limit) rather than take the machine. */
#define FUZZ_MEMORY_LIMIT ((size_t)256 << 20)

typedef struct fuzz_env {
  char dir[1024]; /* where targets write the files readers read; ends without '/' */
} fuzz_env;

typedef npu_status (*fuzz_fn)(npu_context *ctx, const fuzz_env *env, const uint8_t *data,
                              size_t size);

static inline int fuzz_write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t put = size ? fwrite(data, 1, size, f) : 0;
  int rc = fclose(f);
  return put == size && rc == 0 ? 0 : -1;
}

static inline void fuzz_path(char *buf, size_t size, const fuzz_env *env, const char *name) {
  snprintf(buf, size, "%s/%s", env->dir, name);
}

/* Writes data to env->dir/name and reports a harness failure as NPU_ERR_INTERNAL. */
static inline npu_status fuzz_stage(npu_context *ctx, const fuzz_env *env, const char *name,
                                   const uint8_t *data, size_t size, char *path, size_t path_size) {
  (void)ctx;
  fuzz_path(path, path_size, env, name);
  if (fuzz_write_file(path, data, size) != 0) {
    fprintf(stderr, "fuzz: cannot write %s\n", path);
    return NPU_ERR_INTERNAL;
  }
  return NPU_OK;
}

/* ---- after a success: use what the reader made, so a bad result shows ---------------- */

static inline volatile uint8_t *fuzz_sink(void) {
  static volatile uint8_t sink;
  return &sink;
}

static inline void fuzz_touch_tensor(const npu_tensor *t) {
  const uint8_t *p = npu_tensor_data(t);
  size_t n = npu_tensor_nbytes(t);
  uint8_t x = 0;
  for (size_t i = 0; i < n; i++) x ^= p[i];
  int64_t numel = npu_tensor_numel(t);
  if (numel > 0) (void)npu_tensor_get(t, numel - 1);
  *fuzz_sink() ^= x;
}

static inline npu_status fuzz_use_graph(npu_context *ctx, npu_graph *g, npu_model_info *info) {
  size_t x = 0;
  for (int i = 0; i < npu_graph_n_nodes(g); i++) {
    x += strlen(npu_graph_node_name(g, i)) + strlen(npu_graph_node_op(g, i));
    for (int k = 0; k < npu_graph_n_outputs(g, i); k++) {
      int v = npu_graph_output(g, i, k);
      int nd = npu_graph_value_ndim(g, v);
      const int64_t *shape = npu_graph_value_shape(g, v);
      for (int d = 0; d < nd; d++) x += (size_t)shape[d];
    }
  }
  if (info) {
    for (int i = 0; i < npu_model_info_n_inputs(info); i++) {
      const npu_model_io *io = npu_model_info_input(info, i);
      x += strlen(io->key) + strlen(io->name);
    }
    for (int i = 0; i < npu_model_info_n_outputs(info); i++) {
      const npu_model_io *io = npu_model_info_output(info, i);
      int v;
      x += strlen(io->key);
      if (npu_graph_find_value(g, io->name, &v) == NPU_OK) x += (size_t)v;
    }
  }
  *fuzz_sink() ^= (uint8_t)x;
  /* the exporter must take whatever the importer made (or refuse it with a status) */
  npu_tensor *pb = NULL;
  npu_status st = npu_graph_serialize_graphdef(g, &pb);
  npu_tensor_release(pb);
  (void)ctx;
  return st == NPU_ERR_UNSUPPORTED ? NPU_OK : st;
}

static inline npu_status fuzz_finish_import(npu_context *ctx, npu_status st, npu_graph *g,
                                            npu_model_info *info) {
  if (!st) st = fuzz_use_graph(ctx, g, info);
  npu_model_info_release(info);
  npu_graph_release(g);
  return st;
}

/* ---- the targets ------------------------------------------------------------------------ */

static inline npu_status fuzz_graphdef(npu_context *ctx, const fuzz_env *env, const uint8_t *data,
                                       size_t size) {
  (void)env;
  npu_graph *g = NULL;
  npu_model_info *info = NULL;
  npu_status st = npu_graph_import_graphdef(ctx, size ? data : NULL, size, &g, &info);
  return fuzz_finish_import(ctx, st, g, info);
}

static inline npu_status fuzz_tfjs(npu_context *ctx, const fuzz_env *env, const uint8_t *data,
                                   size_t size) {
  const uint8_t *nul = size ? memchr(data, 0, size) : NULL;
  size_t json_len = nul ? (size_t)(nul - data) : size;
  char path[1200];
  fuzz_path(path, sizeof path, env, "weights.bin");
  if (nul) {
    npu_status st = fuzz_stage(ctx, env, "weights.bin", nul + 1, size - json_len - 1, path,
                               sizeof path);
    if (st) return st;
  } else {
    unlink(path);
  }
  /* the text as the caller would hold it: exactly json_len bytes, no terminator after them */
  char *json = malloc(json_len ? json_len : 1);
  if (!json) return NPU_ERR_INTERNAL;
  if (json_len) memcpy(json, data, json_len);
  npu_graph *g = NULL;
  npu_model_info *info = NULL;
  npu_status st = npu_graph_import_tfjs(ctx, json, json_len, env->dir, &g, &info);
  free(json);
  return fuzz_finish_import(ctx, st, g, info);
}

static inline npu_status fuzz_import_file(npu_context *ctx, const fuzz_env *env,
                                          const uint8_t *data, size_t size) {
  char path[1200];
  npu_status st = fuzz_stage(ctx, env, "model", data, size, path, sizeof path);
  if (st) return st;
  npu_graph *g = NULL;
  npu_model_info *info = NULL;
  st = npu_graph_import_file(ctx, path, &g, &info);
  return fuzz_finish_import(ctx, st, g, info);
}

static inline npu_status fuzz_npy(npu_context *ctx, const fuzz_env *env, const uint8_t *data,
                                  size_t size) {
  char path[1200];
  npu_status st = fuzz_stage(ctx, env, "t.npy", data, size, path, sizeof path);
  if (st) return st;
  npu_tensor *t = NULL;
  st = npu_tensor_load_npy(ctx, path, &t);
  if (!st) {
    fuzz_touch_tensor(t);
    /* what loads must save again (bfloat16 never loads from .npy) */
    char out[1200];
    fuzz_path(out, sizeof out, env, "t2.npy");
    st = npu_tensor_save_npy(ctx, t, out);
  }
  npu_tensor_release(t);
  return st;
}

static inline npu_status fuzz_safetensors(npu_context *ctx, const fuzz_env *env,
                                          const uint8_t *data, size_t size) {
  char path[1200];
  npu_status st = fuzz_stage(ctx, env, "t.safetensors", data, size, path, sizeof path);
  if (st) return st;
  npu_safetensors *s = NULL;
  st = npu_safetensors_load(ctx, path, &s);
  if (!st) {
    size_t x = 0;
    for (int i = 0; i < npu_safetensors_count(s); i++) {
      const char *name = npu_safetensors_name(s, i);
      fuzz_touch_tensor(npu_safetensors_tensor(s, i));
      if (npu_safetensors_find(s, name) < 0) st = NPU_ERR_INTERNAL; /* a name must find itself */
      x += strlen(name);
    }
    const char *meta = npu_safetensors_metadata(s);
    if (meta) x += strlen(meta);
    *fuzz_sink() ^= (uint8_t)x;
  }
  npu_safetensors_release(s);
  return st;
}

/* An option naming a file: the file written, the option set, the session config made. */
static inline npu_status fuzz_option_file(npu_context *ctx, const fuzz_env *env, const char *option,
                                          const char *file, const char *precision_mode,
                                          const uint8_t *data, size_t size) {
  char path[1200];
  npu_status st = fuzz_stage(ctx, env, file, data, size, path, sizeof path);
  if (st) return st;
  npu_options *o = NULL;
  st = npu_options_new(ctx, &o);
  if (!st) st = npu_options_set_int(o, "export_compile_stat", 0); /* writes nothing */
  if (!st && precision_mode) st = npu_options_set_string(o, "precision_mode", precision_mode);
  if (!st) st = npu_options_set_string(o, option, path);
  if (st) {
    npu_options_release(o);
    return st == NPU_ERR_NOMEM ? st : NPU_ERR_INTERNAL;
  }
  npuP_config cfg;
  st = npuP_config_init(ctx, o, &cfg);
  if (!st) npuP_config_free(ctx, &cfg);
  npu_options_release(o);
  return st;
}

static inline npu_status fuzz_fusion_switch(npu_context *ctx, const fuzz_env *env,
                                            const uint8_t *data, size_t size) {
  return fuzz_option_file(ctx, env, "fusion_switch_file", "fusion_switch.cfg", NULL, data, size);
}

static inline npu_status fuzz_modify_mixlist(npu_context *ctx, const fuzz_env *env,
                                             const uint8_t *data, size_t size) {
  return fuzz_option_file(ctx, env, "modify_mixlist", "ops_info.json", "allow_mix_precision",
                          data, size);
}

static inline npu_status fuzz_customize_dtypes(npu_context *ctx, const fuzz_env *env,
                                               const uint8_t *data, size_t size) {
  return fuzz_option_file(ctx, env, "customize_dtypes", "customize_dtypes.cfg", NULL, data, size);
}

static inline npu_status fuzz_op_precision(npu_context *ctx, const fuzz_env *env,
                                           const uint8_t *data, size_t size) {
  return fuzz_option_file(ctx, env, "op_precision_mode", "op_precision.ini", NULL, data, size);
}

/* ---- tensor bundles and SavedModels ------------------------------------------------------ */

static inline uint32_t fuzz_load32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline size_t fuzz_put_varint(uint8_t *b, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) b[n++] = (uint8_t)(v | 0x80), v >>= 7;
  b[n++] = (uint8_t)v;
  return n;
}
/* Appends block b (n bytes) and its trailer (compression byte kind, masked CRC-32C). */
static inline size_t fuzz_put_block(uint8_t *out, const uint8_t *b, size_t n, uint8_t kind) {
  if (n) memcpy(out, b, n);
  out[n] = kind;
  uint32_t crc = npuI_crc32c_mask(npuK_crc32c(0, out, n + 1));
  for (int i = 0; i < 4; i++) out[n + 1 + i] = (uint8_t)(crc >> (8 * i));
  return n + 5;
}
/* Writes prefix.index (the block sealed as the bundle layout says) and prefix.data-00000-of-
   00001 from a bundle input; NPU_ERR_INTERNAL when the harness cannot write. */
static inline npu_status fuzz_stage_bundle(const char *prefix, const uint8_t *data, size_t size) {
  uint8_t kind = size ? data[0] : 0;
  size_t n = size >= 5 ? fuzz_load32(data + 1) : 0, at = size >= 5 ? 5 : size;
  if (n > size - at) n = size - at;
  uint8_t *idx = malloc(n + 128);
  if (!idx) return NPU_ERR_INTERNAL;
  size_t len = fuzz_put_block(idx, data + at, n, kind);
  uint8_t meta[4] = {0, 0, 0, 0}, ib[64];
  size_t moff = len;
  len += fuzz_put_block(idx + len, meta, 4, 0); /* empty: no restarts but the count 0 */
  size_t ioff = len, in = 0;
  ib[in++] = 0, ib[in++] = 1, ib[in++] = 0; /* shared 0, key length 1, value length (below) */
  ib[in++] = 0xff;                          /* a key past any of the block's */
  size_t vlen = fuzz_put_varint(ib + in, 0);
  vlen += fuzz_put_varint(ib + in + vlen, n);
  ib[2] = (uint8_t)vlen;
  in += vlen;
  memset(ib + in, 0, 4), ib[in] = 0, in += 4; /* restart at 0 */
  ib[in] = 1, ib[in + 1] = ib[in + 2] = ib[in + 3] = 0, in += 4; /* one restart */
  len += fuzz_put_block(idx + len, ib, in, 0);
  size_t f = len;
  memset(idx + f, 0, 48);
  size_t fp = f;
  fp += fuzz_put_varint(idx + fp, moff);
  fp += fuzz_put_varint(idx + fp, 4);
  fp += fuzz_put_varint(idx + fp, ioff);
  fuzz_put_varint(idx + fp, in);
  static const uint8_t magic[8] = {0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb};
  memcpy(idx + f + 40, magic, 8);
  len = f + 48;
  char path[1200];
  snprintf(path, sizeof path, "%s.index", prefix);
  int bad = fuzz_write_file(path, idx, len);
  free(idx);
  snprintf(path, sizeof path, "%s.data-00000-of-00001", prefix);
  bad |= fuzz_write_file(path, data + at + n, size - at - n);
  if (bad) fprintf(stderr, "fuzz: cannot write %s\n", path);
  return bad ? NPU_ERR_INTERNAL : NPU_OK;
}

static inline npu_status fuzz_bundle(npu_context *ctx, const fuzz_env *env, const uint8_t *data,
                                     size_t size) {
  char prefix[1200];
  fuzz_path(prefix, sizeof prefix, env, "bundle");
  npu_status st = fuzz_stage_bundle(prefix, data, size);
  npuI_bundle *b = NULL;
  if (!st) st = npuI_bundle_open(ctx, prefix, &b);
  for (int i = 0; !st && i < npuI_bundle_count(b); i++) {
    const char *key = npuI_bundle_key(b, i);
    if (!npuI_bundle_has(b, key)) st = NPU_ERR_INTERNAL; /* a key must find itself */
    npu_tensor *t = NULL;
    npu_status rs = npuI_bundle_read(b, key, &t);
    if (!rs) fuzz_touch_tensor(t);
    npu_tensor_release(t);
    char *str = NULL;
    size_t n = 0;
    npu_status ss = npuI_bundle_read_string(b, key, &str, &n);
    for (size_t k = 0; !ss && k < n; k++) *fuzz_sink() ^= (uint8_t)str[k];
    npuC_free(ctx, str);
    if ((unsigned)rs >= (unsigned)NPU_ERR_INTERNAL || (unsigned)ss >= (unsigned)NPU_ERR_INTERNAL)
      st = NPU_ERR_INTERNAL;
  }
  npuI_bundle_close(b);
  return st;
}

static inline npu_status fuzz_savedmodel(npu_context *ctx, const fuzz_env *env,
                                         const uint8_t *data, size_t size) {
  size_t n = size >= 4 ? fuzz_load32(data) : 0, at = size >= 4 ? 4 : size;
  if (n > size - at) n = size - at;
  char dir[1200], path[1300];
  fuzz_path(dir, sizeof dir, env, "sm");
  snprintf(path, sizeof path, "%s/variables", dir);
  mkdir(dir, 0777);
  mkdir(path, 0777);
  snprintf(path, sizeof path, "%s/saved_model.pb", dir);
  if (fuzz_write_file(path, data + at, n) != 0) return NPU_ERR_INTERNAL;
  snprintf(path, sizeof path, "%s/variables/variables", dir);
  npu_status st = fuzz_stage_bundle(path, data + at + n, size - at - n);
  if (st) return st;
  npu_graph *g = NULL;
  npu_model_info *info = NULL;
  st = npu_graph_import_savedmodel(ctx, dir, NULL, NULL, &g, &info);
  st = fuzz_finish_import(ctx, st, g, info);
  /* and with the variables kept variables (another writer of the GraphDef) */
  npu_savedmodel_options o = {.variables = 1};
  g = NULL, info = NULL;
  npu_status vst = npu_graph_import_savedmodel_with_options(ctx, dir, &o, &g, &info);
  vst = fuzz_finish_import(ctx, vst, g, info);
  return st ? st : vst;
}

/* Removes what the targets wrote under env->dir (the caller removes env->dir's files). */
static inline void fuzz_remove_staged(const fuzz_env *env) {
  static const char *const paths[] = {"sm/variables/variables.index",
                                      "sm/variables/variables.data-00000-of-00001",
                                      "sm/variables", "sm/saved_model.pb", "sm"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    char p[1200];
    fuzz_path(p, sizeof p, env, paths[i]);
    remove(p);
  }
}

typedef struct fuzz_target {
  const char *name;
  fuzz_fn run;
} fuzz_target;

static const fuzz_target fuzz_targets[] = {
    {"graphdef", fuzz_graphdef},
    {"tfjs", fuzz_tfjs},
    {"import_file", fuzz_import_file},
    {"npy", fuzz_npy},
    {"safetensors", fuzz_safetensors},
    {"fusion_switch", fuzz_fusion_switch},
    {"modify_mixlist", fuzz_modify_mixlist},
    {"customize_dtypes", fuzz_customize_dtypes},
    {"op_precision", fuzz_op_precision},
    {"bundle", fuzz_bundle},
    {"savedmodel", fuzz_savedmodel},
};
#define FUZZ_N_TARGETS ((int)(sizeof fuzz_targets / sizeof fuzz_targets[0]))

static inline const fuzz_target *fuzz_find_target(const char *name) {
  for (int i = 0; i < FUZZ_N_TARGETS; i++)
    if (strcmp(fuzz_targets[i].name, name) == 0) return &fuzz_targets[i];
  return NULL;
}

/* Runs one input through a target and checks the contract.  Returns NULL when it holds, else
   what broke (static text); *status_out (may be NULL) receives the reader's status. */
static inline const char *fuzz_check(npu_context *ctx, const fuzz_env *env, const fuzz_target *t,
                                     const uint8_t *data, size_t size, npu_status *status_out) {
  size_t live = npu_context_live_bytes(ctx);
  npu_status st = t->run(ctx, env, data, size);
  if (status_out) *status_out = st;
  if (npu_context_live_bytes(ctx) != live) return "live bytes did not return to their level";
  if ((unsigned)st >= (unsigned)NPU_ERR_INTERNAL) return "status NPU_ERR_INTERNAL or invalid";
  if (st) {
    const char *m = npu_context_errmsg(ctx);
    if (!m || !*m) return "an error without a message";
  }
  return NULL;
}

/* ---- a deterministic mutator (for the regression run; libFuzzer has its own) -------------- */

typedef struct fuzz_rng {
  uint64_t s;
} fuzz_rng;

static inline uint64_t fuzz_next(fuzz_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline size_t fuzz_below(fuzz_rng *r, size_t n) { return n ? (size_t)(fuzz_next(r) % n) : 0; }

/* A position biased to the front, where headers and lengths live, half of the time. */
static inline size_t fuzz_pos(fuzz_rng *r, size_t len) {
  if (!len) return 0;
  if (fuzz_next(r) & 1) return fuzz_below(r, len < 64 ? len : 64);
  return fuzz_below(r, len);
}

/* Inserts n bytes at pos (room permitting); returns the new length. */
static inline size_t fuzz_insert(uint8_t *b, size_t len, size_t cap, size_t pos, const void *src,
                                 size_t n) {
  if (len + n > cap) n = cap - len;
  memmove(b + pos + n, b + pos, len - pos);
  memcpy(b + pos, src, n);
  return len + n;
}

/* One to four edits of b (len bytes in a buffer of cap): bit flips, interesting bytes and
   little-endian words, truncation, deletion and duplication of ranges, runs of varint
   continuation bytes (a protobuf length or tag grown past its field), and for text the
   number and token swaps that reach a parser's range checks. */
static inline size_t fuzz_mutate(uint8_t *b, size_t len, size_t cap, fuzz_rng *r) {
  static const uint8_t bytes[] = {0, 0xff, 0x80, 0x7f, 0x01, 0x02, 0x08, 0x0a, 0x12, 0x1a,
                                  '"', '{', '}', '[', ']', ',', ':', '=', '\n', '9', '-', ' '};
  static const uint32_t words[] = {0, 0xffffffffu, 0x7fffffffu, 0x80000000u, 0x10000u, 0xffffu,
                                   1, 8, 64, 0x100};
  static const char *const tokens[] = {"-1", "0", "99999999999999999999", "1e308", "-1e308",
                                       "4294967296", "9223372036854775807", "NaN", "null",
                                       "true", "[]", "{}", "\"\"", "::", ":", ",", "[[", "\\u0000",
                                       "'", "(", ")", "False", "True", "<f4", ">i8", "|b1",
                                       "0x", "="};
  int n = 1 + (int)fuzz_below(r, 4);
  for (int m = 0; m < n; m++) {
    size_t pos = fuzz_pos(r, len);
    switch (fuzz_below(r, 11)) {
    case 0: /* bit flip */
      if (len) b[pos] ^= (uint8_t)(1u << fuzz_below(r, 8));
      break;
    case 1: /* interesting byte */
      if (len) b[pos] = bytes[fuzz_below(r, sizeof bytes)];
      break;
    case 2: /* interesting little-endian word */
      if (len >= 4) {
        uint32_t w = words[fuzz_below(r, sizeof words / sizeof words[0])];
        if (pos > len - 4) pos = len - 4;
        for (int k = 0; k < 4; k++) b[pos + (size_t)k] = (uint8_t)(w >> (8 * k));
      }
      break;
    case 3: /* truncate */
      len = pos;
      break;
    case 4: { /* delete a range */
      size_t n_del = 1 + fuzz_below(r, 16);
      if (pos + n_del > len) n_del = len - pos;
      memmove(b + pos, b + pos + n_del, len - pos - n_del);
      len -= n_del;
      break;
    }
    case 5: { /* duplicate a range */
      size_t n_dup = 1 + fuzz_below(r, 32);
      if (pos + n_dup > len) n_dup = len - pos;
      uint8_t tmp[32];
      memcpy(tmp, b + pos, n_dup);
      len = fuzz_insert(b, len, cap, pos, tmp, n_dup);
      break;
    }
    case 6: { /* varint tampering: continuation bytes, or a 10-byte varint */
      static const uint8_t run[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
      if (fuzz_next(r) & 1) len = fuzz_insert(b, len, cap, pos, run, 1 + fuzz_below(r, 10));
      else if (len) b[pos] |= 0x80;
      break;
    }
    case 7: /* a byte by a small delta (lengths off by one) */
      if (len) b[pos] = (uint8_t)(b[pos] + (fuzz_next(r) & 1 ? 1 : 0xff));
      break;
    case 8: { /* a token inserted, or a digit run replaced by one */
      const char *t = tokens[fuzz_below(r, sizeof tokens / sizeof tokens[0])];
      size_t p = pos;
      while (p < len && !(b[p] >= '0' && b[p] <= '9')) p++;
      if (p < len && (fuzz_next(r) & 1)) {
        size_t e = p;
        while (e < len && b[e] >= '0' && b[e] <= '9') e++;
        memmove(b + p, b + e, len - e);
        len -= e - p;
        pos = p;
      }
      len = fuzz_insert(b, len, cap, pos, t, strlen(t));
      break;
    }
    case 9: { /* copy a range over another place (swaps fields around) */
      if (len < 2) break;
      size_t from = fuzz_below(r, len), n_copy = 1 + fuzz_below(r, 24);
      if (from + n_copy > len) n_copy = len - from;
      if (pos + n_copy > len) n_copy = len - pos;
      memmove(b + pos, b + from, n_copy);
      break;
    }
    default: /* random byte */
      if (len) b[pos] = (uint8_t)fuzz_next(r);
      break;
    }
  }
  return len;
}

#endif
