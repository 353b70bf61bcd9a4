/*
 * fuzz_seeds.h — the seed inputs of the fuzz targets (tests/fuzz/fuzz.h): small valid files
 * of every format, made here (inline text, or written by the library's own writers), plus a
 * real model when a directory of them is given (spec/fixtures/age in the tests; the shared
 * models for `make fuzz`).  Every seed is a valid input: its target returns NPU_OK on it,
 * which tests/test_fuzz_corpus.c checks, so the mutations start from inputs that reach deep.
 *
 * fuzz_seeds(ctx, env, target, add, ud) calls add(ud, label, bytes, size) for each seed of
 * target; fuzz_model_seeds(ctx, env, target, dir, name, add, ud) the seeds taken from the
 * TensorFlow.js model dir/name.json + dir/name.bin (+ dir/input_0.npy), or from the
 * SavedModel directory dir (the bundle and savedmodel targets).  Both return
 * NPU_OK, or the status of a step that failed (the message in ctx).
 */
#ifndef NPU_TESTS_FUZZ_SEEDS_H
#define NPU_TESTS_FUZZ_SEEDS_H

#include "fuzz.h"

typedef void (*fuzz_seed_fn)(void *ud, const char *label, const uint8_t *data, size_t size);

/* A TensorFlow.js model: two inputs, weights of every stored kind (float32, int32, bool,
   float16- and uint8-quantized), inline constants (intVal, tensorContent), list, string and
   bool attributes, a control input, a converter alias (AddV2) and a signature. */
static const char fuzz_tiny_tfjs[] =
    "{\"format\":\"graph-model\",\"generatedBy\":\"fuzz\",\"convertedBy\":\"fuzz\",\n"
    "\"signature\":{\"inputs\":{\"x:0\":{\"name\":\"x:0\",\"dtype\":\"DT_FLOAT\",\"tensorShape\":"
    "{\"dim\":[{\"size\":\"-1\"},{\"size\":\"4\"}]}}},\n"
    "\"outputs\":{\"out:0\":{\"name\":\"out:0\",\"dtype\":\"DT_FLOAT\",\"tensorShape\":{\"dim\":"
    "[{\"size\":\"-1\"},{\"size\":\"2\"},{\"size\":\"3\"}]}},\"pool:0\":{\"name\":\"pool:0\"}}},\n"
    "\"modelTopology\":{\"node\":[\n"
    "{\"name\":\"x\",\"op\":\"Placeholder\",\"attr\":{\"dtype\":{\"type\":\"DT_FLOAT\"},\"shape\":"
    "{\"shape\":{\"dim\":[{\"size\":\"-1\"},{\"size\":\"4\"}]}}}},\n"
    "{\"name\":\"img\",\"op\":\"Placeholder\",\"attr\":{\"dtype\":{\"type\":\"DT_FLOAT\"},\"shape\":"
    "{\"shape\":{\"dim\":[{\"size\":\"1\"},{\"size\":\"4\"},{\"size\":\"4\"},{\"size\":\"2\"}]}}}},\n"
    "{\"name\":\"w\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_FLOAT\"},\"value\":{\"tensor\":"
    "{\"dtype\":\"DT_FLOAT\",\"tensorShape\":{\"dim\":[{\"size\":\"4\"},{\"size\":\"6\"}]}}}}},\n"
    "{\"name\":\"b\",\"op\":\"Const\",\"attr\":{\"value\":{\"tensor\":{\"dtype\":\"DT_FLOAT\","
    "\"tensorShape\":{\"dim\":[{\"size\":\"6\"}]}}},\"dtype\":{\"type\":\"DT_FLOAT\"}}},\n"
    "{\"name\":\"h\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_FLOAT\"},\"value\":{\"tensor\":"
    "{\"dtype\":\"DT_FLOAT\",\"tensorShape\":{\"dim\":[{\"size\":\"6\"}]}}}}},\n"
    "{\"name\":\"q\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_FLOAT\"},\"value\":{\"tensor\":"
    "{\"dtype\":\"DT_FLOAT\",\"tensorShape\":{\"dim\":[{\"size\":\"6\"}]}}}}},\n"
    "{\"name\":\"shape\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_INT32\"},\"value\":"
    "{\"tensor\":{\"dtype\":\"DT_INT32\",\"tensorShape\":{\"dim\":[{\"size\":\"3\"}]}}}}},\n"
    "{\"name\":\"axis\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_INT32\"},\"value\":"
    "{\"tensor\":{\"dtype\":\"DT_INT32\",\"tensorShape\":{},\"intVal\":[1]}}}},\n"
    "{\"name\":\"filter\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_FLOAT\"},\"value\":"
    "{\"tensor\":{\"dtype\":\"DT_FLOAT\",\"tensorShape\":{\"dim\":[{\"size\":\"2\"},{\"size\":\"2\"},"
    "{\"size\":\"2\"},{\"size\":\"1\"}]},\"tensorContent\":\"AAAAPwAAgL8AAIA+AAAAQAAAgD8AAAAAAAAAvwAAwD8=\"}}}},\n"
    "{\"name\":\"mm\",\"op\":\"MatMul\",\"input\":[\"x\",\"w\"],\"attr\":{\"transpose_a\":{\"b\":false},"
    "\"transpose_b\":{\"b\":false},\"T\":{\"type\":\"DT_FLOAT\"}}},\n"
    "{\"name\":\"ba\",\"op\":\"BiasAdd\",\"input\":[\"mm\",\"b\"],\"attr\":{\"T\":{\"type\":\"DT_FLOAT\"},"
    "\"data_format\":{\"s\":\"TkhXQw==\"}}},\n"
    "{\"name\":\"mul\",\"op\":\"Mul\",\"input\":[\"ba\",\"h\"],\"attr\":{\"T\":{\"type\":\"DT_FLOAT\"}}},\n"
    "{\"name\":\"add\",\"op\":\"AddV2\",\"input\":[\"mul\",\"q\"],\"attr\":{\"T\":{\"type\":\"DT_FLOAT\"}}},\n"
    "{\"name\":\"relu\",\"op\":\"Relu\",\"input\":[\"add\"],\"attr\":{\"T\":{\"type\":\"DT_FLOAT\"}}},\n"
    "{\"name\":\"out\",\"op\":\"Reshape\",\"input\":[\"relu\",\"shape\",\"^mean\"],\"attr\":{\"T\":"
    "{\"type\":\"DT_FLOAT\"},\"Tshape\":{\"type\":\"DT_INT32\"}}},\n"
    "{\"name\":\"mean\",\"op\":\"Mean\",\"input\":[\"relu\",\"axis\"],\"attr\":{\"keep_dims\":{\"b\":true},"
    "\"T\":{\"type\":\"DT_FLOAT\"},\"Tidx\":{\"type\":\"DT_INT32\"}}},\n"
    "{\"name\":\"conv\",\"op\":\"Conv2D\",\"input\":[\"img\",\"filter\"],\"attr\":{\"T\":{\"type\":"
    "\"DT_FLOAT\"},\"strides\":{\"list\":{\"i\":[\"1\",\"1\",\"1\",\"1\"]}},\"padding\":{\"s\":\"U0FNRQ==\"},"
    "\"data_format\":{\"s\":\"TkhXQw==\"},\"dilations\":{\"list\":{\"i\":[\"1\",\"1\",\"1\",\"1\"]}},"
    "\"use_cudnn_on_gpu\":{\"b\":true}}},\n"
    "{\"name\":\"pool\",\"op\":\"MaxPool\",\"input\":[\"conv\"],\"attr\":{\"T\":{\"type\":\"DT_FLOAT\"},"
    "\"ksize\":{\"list\":{\"i\":[\"1\",\"2\",\"2\",\"1\"]}},\"strides\":{\"list\":{\"i\":[\"1\",\"2\",\"2\","
    "\"1\"]}},\"padding\":{\"s\":\"VkFMSUQ=\"},\"data_format\":{\"s\":\"TkhXQw==\"}}}\n"
    "],\"versions\":{\"producer\":1}},\n"
    "\"weightsManifest\":[{\"paths\":[\"weights.bin\"],\"weights\":[\n"
    "{\"name\":\"w\",\"shape\":[4,6],\"dtype\":\"float32\"},\n"
    "{\"name\":\"b\",\"shape\":[6],\"dtype\":\"float32\"},\n"
    "{\"name\":\"h\",\"shape\":[6],\"dtype\":\"float32\",\"quantization\":{\"dtype\":\"float16\"}},\n"
    "{\"name\":\"q\",\"shape\":[6],\"dtype\":\"float32\",\"quantization\":{\"dtype\":\"uint8\","
    "\"scale\":0.5,\"min\":-1}},\n"
    "{\"name\":\"shape\",\"shape\":[3],\"dtype\":\"int32\"},\n"
    "{\"name\":\"unused\",\"shape\":[2],\"dtype\":\"bool\"}]}]}\n";

/* Its weights.bin: w (24 float32), b (6 float32), h (6 float16), q (6 uint8), shape (3 int32:
   -1, 2, 3), unused (2 bool).  152 bytes. */
static inline size_t fuzz_tiny_weights(uint8_t *b) {
  size_t n = 0;
  for (int i = 0; i < 30; i++) {
    float v = (float)((i % 7) - 3) * 0.25f;
    memcpy(b + n, &v, 4);
    n += 4;
  }
  static const uint16_t halves[6] = {0x3c00, 0xbc00, 0x3800, 0x4000, 0x0000, 0x3e00};
  for (int i = 0; i < 6; i++) b[n++] = (uint8_t)halves[i], b[n++] = (uint8_t)(halves[i] >> 8);
  for (int i = 0; i < 6; i++) b[n++] = (uint8_t)(i * 40);
  static const int32_t shape[3] = {-1, 2, 3};
  memcpy(b + n, shape, sizeof shape);
  n += sizeof shape;
  b[n++] = 1, b[n++] = 0;
  return n;
}

/* A bare GraphDef in JSON with every constant inline (it imports without weight files):
   floatVal repeated to the shape, int64Val, boolVal, halfVal, doubleVal, a Cast. */
static const char fuzz_inline_tfjs[] =
    "{\"node\":[\n"
    "{\"name\":\"x\",\"op\":\"Placeholder\",\"attr\":{\"dtype\":{\"type\":\"DT_FLOAT\"},\"shape\":"
    "{\"shape\":{\"dim\":[{\"size\":\"2\"},{\"size\":\"3\"}]}}}},\n"
    "{\"name\":\"c\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_FLOAT\"},\"value\":{\"tensor\":"
    "{\"dtype\":\"DT_FLOAT\",\"tensorShape\":{\"dim\":[{\"size\":\"3\"}]},\"floatVal\":[0.5]}}}},\n"
    "{\"name\":\"d\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_DOUBLE\"},\"value\":{\"tensor\":"
    "{\"dtype\":\"DT_DOUBLE\",\"tensorShape\":{\"dim\":[{\"size\":\"2\"}]},\"doubleVal\":[1.5,\"NaN\"]}}}},\n"
    "{\"name\":\"i\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_INT64\"},\"value\":{\"tensor\":"
    "{\"dtype\":\"DT_INT64\",\"tensorShape\":{\"dim\":[{\"size\":\"2\"}]},\"int64Val\":[\"7\",\"-9\"]}}}},\n"
    "{\"name\":\"f\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_BOOL\"},\"value\":{\"tensor\":"
    "{\"dtype\":\"DT_BOOL\",\"tensorShape\":{\"dim\":[{\"size\":\"2\"}]},\"boolVal\":[true,false]}}}},\n"
    "{\"name\":\"hv\",\"op\":\"Const\",\"attr\":{\"dtype\":{\"type\":\"DT_HALF\"},\"value\":{\"tensor\":"
    "{\"dtype\":\"DT_HALF\",\"tensorShape\":{\"dim\":[{\"size\":\"3\"}]},\"halfVal\":[15360]}}}},\n"
    "{\"name\":\"m\",\"op\":\"Mul\",\"input\":[\"x\",\"c\"],\"attr\":{\"T\":{\"type\":\"DT_FLOAT\"}}},\n"
    "{\"name\":\"y\",\"op\":\"Cast\",\"input\":[\"m\"],\"attr\":{\"SrcT\":{\"type\":\"DT_FLOAT\"},"
    "\"DstT\":{\"type\":\"DT_INT32\"},\"Truncate\":{\"b\":false}}},\n"
    "{\"name\":\"z\",\"op\":\"Identity\",\"input\":[\"y\",\"^d\",\"^i\",\"^f\",\"^hv\"],\"attr\":{\"T\":{\"type\":\"DT_INT32\"}}}\n"
    "]}\n";

static inline npu_status fuzz_import_tiny(npu_context *ctx, const fuzz_env *env, npu_graph **g) {
  uint8_t w[256];
  size_t n = fuzz_tiny_weights(w);
  char path[1200];
  fuzz_path(path, sizeof path, env, "weights.bin");
  if (fuzz_write_file(path, w, n) != 0) return NPU_ERR_INTERNAL;
  return npu_graph_import_tfjs(ctx, fuzz_tiny_tfjs, sizeof fuzz_tiny_tfjs - 1, env->dir, g, NULL);
}

static inline npu_status fuzz_add_serialized(npu_context *ctx, npu_graph *g, const char *label,
                                             fuzz_seed_fn add, void *ud) {
  npu_tensor *pb = NULL;
  npu_status st = npu_graph_serialize_graphdef(g, &pb);
  if (!st) add(ud, label, npu_tensor_data(pb), npu_tensor_nbytes(pb));
  npu_tensor_release(pb);
  (void)ctx;
  return st;
}

/* Reads env->dir/name and adds it as a seed. */
static inline npu_status fuzz_add_file(npu_context *ctx, const fuzz_env *env, const char *name,
                                       const char *label, fuzz_seed_fn add, void *ud) {
  (void)ctx;
  char path[1200];
  fuzz_path(path, sizeof path, env, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NPU_ERR_IO;
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap = cap ? 2 * cap : 4096);
      if (!nb) break;
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    if (!got) break;
    n += got;
  }
  fclose(f);
  if (buf) add(ud, label, buf, n);
  free(buf);
  return buf ? NPU_OK : NPU_ERR_NOMEM;
}

static inline npu_status fuzz_add_npy(npu_context *ctx, const fuzz_env *env, npu_dtype dt,
                                      int ndim, const int64_t *shape, const char *label,
                                      fuzz_seed_fn add, void *ud) {
  npu_tensor *t;
  npu_status st = npu_tensor_random_uniform(ctx, NPU_DTYPE_F64, ndim, shape, -3, 3, 7, &t);
  if (st) return st;
  npu_tensor *c = NULL;
  st = npu_tensor_cast(ctx, t, dt, &c);
  npu_tensor_release(t);
  char path[1200];
  fuzz_path(path, sizeof path, env, "seed.npy");
  if (!st) st = npu_tensor_save_npy(ctx, c, path);
  npu_tensor_release(c);
  return st ? st : fuzz_add_file(ctx, env, "seed.npy", label, add, ud);
}

static inline uint8_t *fuzz_read(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  *n = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  rewind(f);
  uint8_t *b = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) *n = (size_t)len;
  return b;
}

static inline int fuzz_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t c = *(*p)++;
    *v |= (uint64_t)(c & 0x7f) << shift;
    if (c < 0x80) return 0;
  }
  return -1;
}

/* SavedModel directory dir (or only its bundle: pb NULL) in the "savedmodel" / "bundle"
   layout of fuzz.h: the index's first data block is taken out of its table (the harness seals
   it again), as stored and, when stored uncompressed, also Snappy-compressed as literals. */
static inline npu_status fuzz_add_packed(const char *dir, bool with_pb, const char *label,
                                         fuzz_seed_fn add, void *ud) {
  char path[1300];
  size_t n_pb = 0, n_idx, n_data;
  snprintf(path, sizeof path, "%s/saved_model.pb", dir);
  uint8_t *pb = with_pb ? fuzz_read(path, &n_pb) : NULL;
  snprintf(path, sizeof path, "%s/variables/variables.index", dir);
  uint8_t *idx = fuzz_read(path, &n_idx);
  snprintf(path, sizeof path, "%s/variables/variables.data-00000-of-00001", dir);
  uint8_t *data = fuzz_read(path, &n_data);
  npu_status st = idx && data && (pb || !with_pb) && n_idx >= 48 ? NPU_OK : NPU_ERR_IO;
  uint64_t moff, msize, ioff, isize, shared, klen, vlen, boff = 0, bsize = 0;
  const uint8_t *p = st ? NULL : idx + n_idx - 48, *end = st ? NULL : idx + n_idx - 8;
  if (!st && (fuzz_get_varint(&p, end, &moff) || fuzz_get_varint(&p, end, &msize) ||
              fuzz_get_varint(&p, end, &ioff) || fuzz_get_varint(&p, end, &isize) || ioff + isize > n_idx))
    st = NPU_ERR_IO;
  if (!st) {
    p = idx + ioff, end = idx + ioff + isize;
    if (fuzz_get_varint(&p, end, &shared) || fuzz_get_varint(&p, end, &klen) ||
        fuzz_get_varint(&p, end, &vlen) || (p += klen) > end || fuzz_get_varint(&p, end, &boff) ||
        fuzz_get_varint(&p, end, &bsize) || boff + bsize + 5 > n_idx)
      st = NPU_ERR_IO;
  }
  uint8_t *out = st ? NULL : malloc(n_pb + n_data + 2 * bsize + 64);
  if (!st && !out) st = NPU_ERR_NOMEM;
  for (int snappy = 0; !st && snappy < 2; snappy++) {
    uint8_t kind = idx[boff + bsize];
    if (snappy && kind != 0) break;
    size_t n = 0;
    if (with_pb) {
      for (int i = 0; i < 4; i++) out[n++] = (uint8_t)(n_pb >> (8 * i));
      memcpy(out + n, pb, n_pb), n += n_pb;
    }
    out[n++] = snappy ? 1 : kind;
    size_t len_at = n;
    n += 4;
    size_t blk = n;
    if (!snappy) {
      memcpy(out + n, idx + boff, bsize), n += bsize;
    } else { /* Snappy: the length, then literals of up to 60 bytes (tag (len-1) << 2) */
      n += fuzz_put_varint(out + n, bsize);
      for (uint64_t at = 0; at < bsize; at += 60) {
        size_t k = bsize - at < 60 ? (size_t)(bsize - at) : 60;
        out[n++] = (uint8_t)((k - 1) << 2);
        memcpy(out + n, idx + boff + at, k), n += k;
      }
    }
    size_t bl = n - blk;
    for (int i = 0; i < 4; i++) out[len_at + i] = (uint8_t)(bl >> (8 * i));
    memcpy(out + n, data, n_data), n += n_data;
    char l[300];
    snprintf(l, sizeof l, "%s%s", label, snappy ? "+snappy" : "");
    add(ud, l, out, n);
  }
  free(out);
  free(pb);
  free(idx);
  free(data);
  return st;
}

/* Our own SavedModel export of the tiny model (w and b as variables) under env->dir/seed_sm. */
static inline npu_status fuzz_export_savedmodel(npu_context *ctx, const fuzz_env *env, char *dir,
                                                size_t size) {
  npu_graph *g = NULL;
  npu_status st = fuzz_import_tiny(ctx, env, &g);
  fuzz_path(dir, size, env, "seed_sm");
  if (!st)
    st = npu_graph_export_savedmodel(g, dir, NULL, 1, (const char *[]){"x"},
                                     (const char *[]){"x:0"}, 1, (const char *[]){"y"},
                                     (const char *[]){"relu:0"}, 2, (const char *[]){"w", "b"});
  npu_graph_release(g);
  return st;
}

#define FUZZ_TEXT(label, s) add(ud, label, (const uint8_t *)(s), sizeof(s) - 1)

static inline npu_status fuzz_seeds(npu_context *ctx, const fuzz_env *env, const fuzz_target *t,
                                    fuzz_seed_fn add, void *ud) {
  npu_status st = NPU_OK;
  const char *name = t->name;
  if (strcmp(name, "graphdef") == 0 || strcmp(name, "import_file") == 0) {
    npu_graph *g = NULL;
    st = fuzz_import_tiny(ctx, env, &g);
    if (!st) st = fuzz_add_serialized(ctx, g, "tiny.pb", add, ud);
    npu_graph_release(g);
    g = NULL;
    if (!st) st = npu_graph_import_tfjs(ctx, fuzz_inline_tfjs, sizeof fuzz_inline_tfjs - 1, NULL,
                                        &g, NULL);
    if (!st) st = fuzz_add_serialized(ctx, g, "inline.pb", add, ud);
    npu_graph_release(g);
    if (!st && strcmp(name, "import_file") == 0) FUZZ_TEXT("inline.json", fuzz_inline_tfjs);
  } else if (strcmp(name, "tfjs") == 0) {
    uint8_t buf[sizeof fuzz_tiny_tfjs + 256];
    memcpy(buf, fuzz_tiny_tfjs, sizeof fuzz_tiny_tfjs); /* the NUL separates the weights */
    size_t n = sizeof fuzz_tiny_tfjs + fuzz_tiny_weights(buf + sizeof fuzz_tiny_tfjs);
    add(ud, "tiny.json+bin", buf, n);
    FUZZ_TEXT("inline.json", fuzz_inline_tfjs);
  } else if (strcmp(name, "npy") == 0) {
    static const struct {
      npu_dtype dt;
      int ndim;
      int64_t shape[3];
    } arrays[] = {{NPU_DTYPE_F32, 2, {2, 3}}, {NPU_DTYPE_F16, 1, {4}},     {NPU_DTYPE_F64, 0, {0}},
                  {NPU_DTYPE_I8, 3, {2, 1, 2}}, {NPU_DTYPE_U8, 1, {0}},     {NPU_DTYPE_I32, 2, {1, 3}},
                  {NPU_DTYPE_I64, 1, {2}},    {NPU_DTYPE_BOOL, 2, {2, 2}}};
    for (size_t i = 0; !st && i < sizeof arrays / sizeof arrays[0]; i++) {
      char label[64];
      snprintf(label, sizeof label, "%s.npy", npu_dtype_name(arrays[i].dt));
      st = fuzz_add_npy(ctx, env, arrays[i].dt, arrays[i].ndim, arrays[i].shape, label, add, ud);
    }
    /* what numpy writes that we do not: version 2.0, big-endian, Fortran order of a vector */
    static const char v2[] = "\x93NUMPY\x02\x00\x44\x00\x00\x00"
                             "{'descr': '>i4', 'fortran_order': True, 'shape': (2,), }           \n"
                             "\x00\x00\x00\x01\x00\x00\x00\x02";
    if (!st) FUZZ_TEXT("v2-big-endian.npy", v2);
  } else if (strcmp(name, "safetensors") == 0) {
    npu_tensor *ts[3] = {NULL, NULL, NULL};
    st = npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 2, (int64_t[]){2, 3}, -1, 1, 1, &ts[0]);
    if (!st) st = npu_tensor_random_uniform(ctx, NPU_DTYPE_F16, 1, (int64_t[]){3}, -1, 1, 2, &ts[1]);
    if (!st) st = npu_tensor_new(ctx, NPU_DTYPE_I64, 0, NULL, &ts[2]);
    const char *names[3] = {"layer.weight", "layer.bias", "step"};
    char path[1200];
    fuzz_path(path, sizeof path, env, "seed.safetensors");
    if (!st) st = npu_safetensors_save(ctx, path, 3, names, ts, "{\"format\":\"pt\",\"epoch\":\"3\"}");
    if (!st) st = fuzz_add_file(ctx, env, "seed.safetensors", "three.safetensors", add, ud);
    if (!st) st = npu_safetensors_save(ctx, path, 1, names + 2, ts + 2, NULL);
    if (!st) st = fuzz_add_file(ctx, env, "seed.safetensors", "one.safetensors", add, ud);
    for (int i = 0; i < 3; i++) npu_tensor_release(ts[i]);
  } else if (strcmp(name, "bundle") == 0 || strcmp(name, "savedmodel") == 0) {
    char dir[1200];
    st = fuzz_export_savedmodel(ctx, env, dir, sizeof dir);
    if (!st) st = fuzz_add_packed(dir, strcmp(name, "savedmodel") == 0, "exported", add, ud);
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0 && !st) st = NPU_ERR_IO;
  } else if (strcmp(name, "fusion_switch") == 0) {
    FUZZ_TEXT("switch.json", "{\"Switch\":{\"GraphFusion\":{\"ALL\":\"off\",\"MatMulBiasAddFusionPass\":"
                             "\"on\",\"ConvBatchnormFusionPass\":\"off\"},\"UBFusion\":{\"ALL\":\"on\","
                             "\"TbeEltwiseFusionPass\":\"off\"}}}\n");
    FUZZ_TEXT("switch-min.json", "{\"Switch\":{\"GraphFusion\":{\"MatMulBiasAddFusionPass\":\"off\"}}}");
  } else if (strcmp(name, "modify_mixlist") == 0) {
    FUZZ_TEXT("mixlist.json", "{\"black-list\": {\"to-add\": [\"MatMul\", \"exp\"], \"to-remove\": "
                              "[\"Softmax\"]},\n \"white-list\": {\"to-add\": [\"Relu\"], "
                              "\"to-remove\": [\"Conv2D\"]}}\n");
  } else if (strcmp(name, "customize_dtypes") == 0) {
    FUZZ_TEXT("dtypes.cfg", "# by type\nOpType::Relu:InputDtype:float16,OutputDtype:float16\n\n"
                            "# by name\nr2::InputDtype:float32,OutputDtype:float32\n"
                            "mm::InputDtype:bfloat16,bfloat16\nOpType::matmul:OutputDtype:float32\n");
  } else if (strcmp(name, "op_precision") == 0) {
    FUZZ_TEXT("op_precision.ini", "[ByOpType]\nSigmoid=high_performance\nExp=high_precision\n"
                                  "SoftmaxV2=high_performance\n\n[ByNodeName]\nmy_exp = "
                                  "high_performance\n; a comment\n");
  }
  return st;
}

/* dir/name.bin and dir/name.json as one "tfjs" seed (the manifest's paths renamed to
   weights.bin); the other targets take the model as .pb, as a file, and its input_0.npy. */
static inline npu_status fuzz_model_seeds(npu_context *ctx, const fuzz_env *env,
                                          const fuzz_target *t, const char *dir, const char *name,
                                          fuzz_seed_fn add, void *ud) {
  char json_path[1200], bin_path[1200], label[300];
  if (snprintf(json_path, sizeof json_path, "%s/%s.json", dir, name) >= (int)sizeof json_path ||
      snprintf(bin_path, sizeof bin_path, "%s/%s.bin", dir, name) >= (int)sizeof bin_path)
    return NPU_ERR_IO;
  struct stat sb; /* a SavedModel directory: seeds of the bundle and savedmodel targets only */
  bool sm_target = strcmp(t->name, "bundle") == 0 || strcmp(t->name, "savedmodel") == 0;
  snprintf(label, sizeof label, "%s/saved_model.pb", dir);
  bool is_sm = stat(label, &sb) == 0;
  snprintf(label, sizeof label, "%s", name);
  if (is_sm || sm_target)
    return is_sm && sm_target ? fuzz_add_packed(dir, strcmp(t->name, "savedmodel") == 0, label, add, ud)
                              : NPU_OK;
  if (strcmp(t->name, "npy") == 0) {
    fuzz_env in = *env;
    if (snprintf(in.dir, sizeof in.dir, "%s", dir) >= (int)sizeof in.dir) return NPU_ERR_IO;
    snprintf(label, sizeof label, "%s-input_0.npy", name);
    return fuzz_add_file(ctx, &in, "input_0.npy", label, add, ud);
  }
  if (strcmp(t->name, "graphdef") == 0 || strcmp(t->name, "import_file") == 0) {
    npu_graph *g = NULL;
    npu_status st = npu_graph_import_file(ctx, json_path, &g, NULL);
    snprintf(label, sizeof label, "%s.pb", name);
    if (!st) st = fuzz_add_serialized(ctx, g, label, add, ud);
    npu_graph_release(g);
    return st;
  }
  if (strcmp(t->name, "tfjs") != 0) return NPU_OK;
  FILE *fj = fopen(json_path, "rb"), *fb = fopen(bin_path, "rb");
  npu_status st = fj && fb ? NPU_OK : NPU_ERR_IO;
  uint8_t *buf = NULL;
  if (!st) {
    fseek(fj, 0, SEEK_END);
    fseek(fb, 0, SEEK_END);
    long nj = ftell(fj), nb = ftell(fb);
    rewind(fj);
    rewind(fb);
    char old[300];
    snprintf(old, sizeof old, "\"%s.bin\"", name);
    buf = malloc((size_t)nj + (size_t)nb + 64);
    if (!buf || fread(buf, 1, (size_t)nj, fj) != (size_t)nj) st = NPU_ERR_IO;
    size_t n = (size_t)nj;
    if (!st) {
      buf[n] = 0;
      char *at = strstr((char *)buf, old);
      if (!at) st = NPU_ERR_IO;
      else { /* "name.bin" -> "weights.bin" */
        const char *repl = "\"weights.bin\"";
        size_t olen = strlen(old), rlen = strlen(repl), off = (size_t)(at - (char *)buf);
        memmove(at + rlen, at + olen, n - off - olen);
        memcpy(at, repl, rlen);
        n = n - olen + rlen;
      }
    }
    if (!st) {
      buf[n++] = 0;
      if (fread(buf + n, 1, (size_t)nb, fb) != (size_t)nb) st = NPU_ERR_IO;
      n += (size_t)nb;
    }
    snprintf(label, sizeof label, "%s.json+bin", name);
    if (!st) add(ud, label, buf, n);
  }
  free(buf);
  if (fj) fclose(fj);
  if (fb) fclose(fb);
  return st;
}

#endif
