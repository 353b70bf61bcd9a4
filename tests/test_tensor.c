/* test_tensor.c: the tensor API through the public C header only.
 *
 * Covers new/from_data/cast/reshape (views outliving their base), argument errors with NULL
 * outs, .npy save/load round trips in /tmp and malformed files, the seeded generator (the first
 * xoshiro256** outputs for seed 42 are fixed numbers, also derived independently in
 * spec/tensor_spec.lua), and an allocation-failure sweep: for N = 1, 2, ... the N-th allocation
 * of a scenario fails, and the scenario must stop with NPU_ERR_NOMEM, NULL outs and zero live
 * bytes once what succeeded is released.  Test-only code may use stdio.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npu_test.h"
#include "core/npu_int.h" /* npuT_same_shape */

static char tmp_dir_path[256];

static const char *tmp_path(const char *name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", tmp_dir_path, name);
  return buf;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(data, 1, n, f);
  fclose(f);
}

/* ---- construction, cast, reshape ----------------------------------------------------------- */

static void test_basics(npu_context *ctx) {
  int64_t shape[2] = {2, 3};
  npu_tensor *t = NULL;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, shape, &t) == NPU_OK);
  CHECK(t && npu_tensor_ndim(t) == 2 && npu_tensor_numel(t) == 6);
  CHECK(npu_tensor_nbytes(t) == 24 && npu_tensor_dtype(t) == NPU_DTYPE_F32);
  CHECK(npu_tensor_shape(t)[0] == 2 && npu_tensor_shape(t)[1] == 3);
  for (int i = 0; i < 6; i++) CHECK(npu_tensor_get(t, i) == 0.0);

  const int32_t vals[6] = {1, -2, 3, 400, 5, -6};
  npu_tensor *a = NULL;
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_I32, 2, shape, vals, sizeof vals, &a) == NPU_OK);
  CHECK(npu_tensor_get(a, 3) == 400.0);
  npu_tensor *c = NULL;
  CHECK(npu_tensor_cast(ctx, a, NPU_DTYPE_I8, &c) == NPU_OK);
  CHECK(((int8_t *)npu_tensor_data(c))[3] == (int8_t)400); /* wraps like NumPy astype */
  npu_tensor_release(c);
  CHECK(npu_tensor_cast(ctx, a, NPU_DTYPE_F16, &c) == NPU_OK);
  CHECK(npu_tensor_get(c, 1) == -2.0 && npu_tensor_nbytes(c) == 12);
  npu_tensor_release(c);

  /* a view shares the data and outlives its source handle */
  int64_t flat = 6;
  npu_tensor *v = NULL;
  CHECK(npu_tensor_reshape(ctx, a, 1, &flat, &v) == NPU_OK);
  CHECK(npu_tensor_data(v) == npu_tensor_data(a));
  npu_tensor *v2 = NULL;
  int64_t s3[3] = {3, 1, 2};
  CHECK(npu_tensor_reshape(ctx, v, 3, s3, &v2) == NPU_OK);
  npu_tensor_release(a);
  npu_tensor_release(v);
  CHECK(npu_tensor_get(v2, 5) == -6.0);
  CHECK(npu_tensor_retain(v2) == v2);
  npu_tensor_release(v2);
  npu_tensor_release(v2);
  npu_tensor_release(NULL);

  /* errors: status, message, NULL out */
  npu_tensor *bad = t;
  int64_t wrong[2] = {4, 2};
  CHECK(npu_tensor_reshape(ctx, t, 2, wrong, &bad) == NPU_ERR_SHAPE && bad == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "[2,3]") && strstr(npu_context_errmsg(ctx), "[4,2]"));
  int64_t neg[1] = {-1};
  bad = t;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, neg, &bad) == NPU_ERR_SHAPE && bad == NULL);
  bad = t;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, NPU_MAX_DIMS + 1, shape, &bad) == NPU_ERR_SHAPE &&
        bad == NULL);
  bad = t;
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_I32, 2, shape, vals, 20, &bad) == NPU_ERR_SHAPE &&
        bad == NULL);
  bad = t;
  CHECK(npu_tensor_new(ctx, (npu_dtype)99, 2, shape, &bad) == NPU_ERR_DTYPE && bad == NULL);
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, shape, NULL) == NPU_ERR_ARG);
  npu_tensor_release(t);

  /* rank 0 and empty tensors */
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F64, 0, NULL, &t) == NPU_OK);
  CHECK(npu_tensor_numel(t) == 1 && npu_tensor_nbytes(t) == 8);
  npu_tensor_release(t);
  int64_t empty[2] = {0, 5};
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_I64, 2, empty, &t) == NPU_OK);
  CHECK(npu_tensor_numel(t) == 0 && npu_tensor_nbytes(t) == 0);
  npu_tensor_release(t);
}

/* ---- random ---------------------------------------------------------------------------------- */

static void test_random(npu_context *ctx) {
  int64_t n = 1001;
  npu_tensor *a = NULL, *b = NULL, *c = NULL;
  CHECK(npu_tensor_random_uniform(ctx, NPU_DTYPE_F64, 1, &n, 0, 1, 42, &a) == NPU_OK);
  /* the first xoshiro256** outputs after SplitMix64(42) seeding */
  const double *u = npu_tensor_data(a);
  CHECK(u[0] == (double)(0x15780b2e0c2ec716ull >> 11) * 0x1p-53);
  CHECK(u[1] == (double)(0x6104d9866d113a7eull >> 11) * 0x1p-53);
  CHECK(u[2] == (double)(0xae17533239e499a1ull >> 11) * 0x1p-53);
  CHECK(npu_tensor_random_uniform(ctx, NPU_DTYPE_F64, 1, &n, 0, 1, 42, &b) == NPU_OK);
  CHECK(memcmp(npu_tensor_data(a), npu_tensor_data(b), npu_tensor_nbytes(a)) == 0);
  CHECK(npu_tensor_random_uniform(ctx, NPU_DTYPE_F64, 1, &n, 0, 1, 43, &c) == NPU_OK);
  CHECK(memcmp(npu_tensor_data(a), npu_tensor_data(c), npu_tensor_nbytes(a)) != 0);
  npu_tensor_release(a);
  npu_tensor_release(b);
  npu_tensor_release(c);

  /* normals: the first pair by Box-Muller from the first two uniforms */
  CHECK(npu_tensor_random_normal(ctx, NPU_DTYPE_F64, 1, &n, 1.0, 2.0, 42, &a) == NPU_OK);
  double u1 = 1.0 - (double)(0x15780b2e0c2ec716ull >> 11) * 0x1p-53;
  double u2 = (double)(0x6104d9866d113a7eull >> 11) * 0x1p-53;
  double rho = sqrt(-2.0 * log(u1)), theta = 2.0 * M_PI * u2;
  CHECK(npu_tensor_get(a, 0) == 1.0 + 2.0 * (rho * cos(theta)));
  CHECK(npu_tensor_get(a, 1) == 1.0 + 2.0 * (rho * sin(theta)));
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += npu_tensor_get(a, i);
  CHECK_NEAR(sum / (double)n, 1.0, 0.25);
  /* every float dtype: float32 is the float64 stream rounded once */
  const npu_dtype fl[3] = {NPU_DTYPE_F32, NPU_DTYPE_F16, NPU_DTYPE_BF16};
  for (int k = 0; k < 3; k++) {
    CHECK(npu_tensor_random_normal(ctx, fl[k], 1, &n, 1.0, 2.0, 42, &b) == NPU_OK);
    CHECK(npu_tensor_dtype(b) == fl[k]);
    if (fl[k] == NPU_DTYPE_F32)
      for (int64_t i = 0; i < n; i++) CHECK(npu_tensor_get(b, i) == (float)npu_tensor_get(a, i));
    npu_tensor_release(b);
  }
  npu_tensor_release(a);

  b = (npu_tensor *)1;
  CHECK(npu_tensor_random_normal(ctx, NPU_DTYPE_I32, 1, &n, 0, 1, 1, &b) == NPU_ERR_DTYPE &&
        b == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "int32") != NULL);
  b = (npu_tensor *)1;
  CHECK(npu_tensor_random_normal(ctx, NPU_DTYPE_F32, 1, &n, 0, -1, 1, &b) == NPU_ERR_ARG &&
        b == NULL);
  b = (npu_tensor *)1;
  CHECK(npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 1, &n, 2, 1, 1, &b) == NPU_ERR_ARG &&
        b == NULL);
  b = (npu_tensor *)1;
  CHECK(npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 1, &n, 0, INFINITY, 1, &b) ==
            NPU_ERR_ARG && b == NULL);
}

/* ---- npy --------------------------------------------------------------------------------------- */

static void test_npy(npu_context *ctx) {
  const npu_dtype dts[] = {NPU_DTYPE_F32, NPU_DTYPE_F16, NPU_DTYPE_F64, NPU_DTYPE_I8,
                           NPU_DTYPE_U8,  NPU_DTYPE_I32, NPU_DTYPE_I64, NPU_DTYPE_BOOL};
  const double src[6] = {0, 1, 2, 3, 100, 1};
  int64_t shape[2] = {2, 3}, six = 6;
  npu_tensor *f = NULL;
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F64, 1, &six, src, sizeof src, &f) == NPU_OK);
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
    npu_tensor *c = NULL, *r = NULL, *l = NULL;
    CHECK(npu_tensor_cast(ctx, f, dts[k], &c) == NPU_OK);
    CHECK(npu_tensor_reshape(ctx, c, 2, shape, &r) == NPU_OK);
    const char *p = tmp_path("rt.npy");
    CHECK(npu_tensor_save_npy(ctx, r, p) == NPU_OK);
    CHECK(npu_tensor_load_npy(ctx, p, &l) == NPU_OK);
    if (l) {
      CHECK(npu_tensor_dtype(l) == dts[k] && npu_tensor_ndim(l) == 2);
      CHECK(npu_tensor_shape(l)[0] == 2 && npu_tensor_shape(l)[1] == 3);
      CHECK(memcmp(npu_tensor_data(l), npu_tensor_data(r), npu_tensor_nbytes(r)) == 0);
    }
    /* data starts at a multiple of 64 */
    FILE *fp = fopen(p, "rb");
    long size = -1;
    if (fp) {
      fseek(fp, 0, SEEK_END);
      size = ftell(fp);
      fclose(fp);
    }
    CHECK(size > 0 && (size - (long)npu_tensor_nbytes(r)) % 64 == 0);
    npu_tensor_release(c);
    npu_tensor_release(r);
    npu_tensor_release(l);
  }
  npu_tensor *bf = NULL;
  CHECK(npu_tensor_cast(ctx, f, NPU_DTYPE_BF16, &bf) == NPU_OK);
  CHECK(npu_tensor_save_npy(ctx, bf, tmp_path("bf.npy")) == NPU_ERR_UNSUPPORTED);
  CHECK(strstr(npu_context_errmsg(ctx), "bfloat16") != NULL);
  CHECK(access(tmp_path("bf.npy"), F_OK) != 0);
  npu_tensor_release(bf);
  CHECK(npu_tensor_save_npy(ctx, f, "/nonexistent-dir/x.npy") == NPU_ERR_IO);
  npu_tensor_release(f);

  npu_tensor *l = (npu_tensor *)1;
  CHECK(npu_tensor_load_npy(ctx, tmp_path("missing.npy"), &l) == NPU_ERR_IO && l == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "missing.npy") != NULL);
  write_bytes(tmp_path("bad.npy"), "not numpy at all", 16);
  l = (npu_tensor *)1;
  CHECK(npu_tensor_load_npy(ctx, tmp_path("bad.npy"), &l) == NPU_ERR_FORMAT && l == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "bad magic") != NULL);
  /* a header promising more data than the file holds */
  static const char hdr[] = "\x93NUMPY\x01\x00\x3a\x00{'descr': '<f8', 'fortran_order': False, "
                            "'shape': (4,), }\n";
  char buf[128];
  memcpy(buf, hdr, sizeof hdr - 1);
  memset(buf + sizeof hdr - 1, 0, 8);
  write_bytes(tmp_path("short.npy"), buf, sizeof hdr - 1 + 8);
  l = (npu_tensor *)1;
  CHECK(npu_tensor_load_npy(ctx, tmp_path("short.npy"), &l) == NPU_ERR_FORMAT && l == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "truncated") != NULL);
  CHECK(npu_tensor_load_npy(ctx, NULL, &l) == NPU_ERR_ARG && l == NULL);
  unlink(tmp_path("bad.npy"));
  unlink(tmp_path("short.npy"));
  unlink(tmp_path("rt.npy"));
}

/* ---- allocation-failure sweep ---------------------------------------------------------------- */

/* Creates, reshapes, casts, draws and loads; stops at the first failure after checking that
   the failing call nulled its out.  Releases everything it made. */
static npu_status scenario(npu_context *ctx, const char *npy) {
  npu_tensor *t[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
  int64_t shape[2] = {3, 4}, flat = 12;
  static const float data[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  npu_status st = NPU_OK;
  /* Each step poisons its out first: a failing call must set it back to NULL. */
#define STEP(i, call)                                                                          \
  do {                                                                                         \
    t[i] = (npu_tensor *)&st;                                                                  \
    if ((st = (call)) != NPU_OK) {                                                             \
      CHECK(t[i] == NULL);                                                                     \
      t[i] = NULL;                                                                             \
      goto out;                                                                                \
    }                                                                                          \
  } while (0)
  STEP(0, npu_tensor_new(ctx, NPU_DTYPE_F32, 2, shape, &t[0]));
  STEP(1, npu_tensor_from_data(ctx, NPU_DTYPE_F32, 1, &flat, data, sizeof data, &t[1]));
  STEP(2, npu_tensor_reshape(ctx, t[1], 2, shape, &t[2]));
  STEP(3, npu_tensor_cast(ctx, t[2], NPU_DTYPE_F16, &t[3]));
  STEP(4, npu_tensor_random_normal(ctx, NPU_DTYPE_BF16, 2, shape, 0, 1, 5, &t[4]));
  STEP(5, npu_tensor_load_npy(ctx, npy, &t[5]));
#undef STEP
  CHECK(npu_tensor_get(t[5], 7) == npu_tensor_get(t[5], 7)); /* loaded data readable */
out:
  for (int i = 0; i < 6; i++) npu_tensor_release(t[i]);
  return st;
}

static npu_status sweep_run(npu_context *ctx, void *npy) { return scenario(ctx, npy); }

static void sweep_after(npu_context *ctx, npu_status st, void *ud) {
  (void)ud;
  if (st == NPU_ERR_NOMEM) CHECK(strstr(npu_context_errmsg(ctx), "out of memory") != NULL);
}

/* npuT_same_shape: an unknown rank (-1, a value shaped at run time) equals nothing, itself
   included (it read -8 bytes with memcmp when fusion compared two such values). */
static void test_same_shape(void) {
  const int64_t a[] = {2, 3}, b[] = {2, 4};
  CHECK(npuT_same_shape(2, a, 2, a));
  CHECK(!npuT_same_shape(2, a, 2, b));
  CHECK(!npuT_same_shape(1, a, 2, a));
  CHECK(npuT_same_shape(0, NULL, 0, NULL));
  CHECK(!npuT_same_shape(-1, a, -1, a));
  CHECK(!npuT_same_shape(-1, a, 2, a));
}

static void test_alloc_failure_sweep(void) {
  npu_context *ctx = NULL;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  if (!ctx) return;
  /* the npy file the scenario loads (saving does not allocate) */
  npu_tensor *src = NULL;
  int64_t shape[3] = {2, 2, 2};
  CHECK(npu_tensor_random_uniform(ctx, NPU_DTYPE_F32, 3, shape, 0, 1, 3, &src) == NPU_OK);
  const char *npy = tmp_path("sweep.npy");
  char path[512];
  snprintf(path, sizeof path, "%s", npy);
  CHECK(npu_tensor_save_npy(ctx, src, path) == NPU_OK);
  npu_tensor_release(src);
  CHECK(npu_context_live_bytes(ctx) == 0);

  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.run = sweep_run, .after = sweep_after, .ud = path});
  CHECK(n_failures >= 5); /* every step allocates at least once */
  unlink(path);
  npu_context_release(ctx);
}

int main(void) {
  snprintf(tmp_dir_path, sizeof tmp_dir_path, "/tmp/npu_test_tensor_XXXXXX");
  if (!mkdtemp(tmp_dir_path)) {
    perror("mkdtemp");
    return 1;
  }
  npu_context *ctx = NULL;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  if (!ctx) return check_summary("test_tensor");
  test_basics(ctx);
  test_random(ctx);
  test_npy(ctx);
  test_same_shape();
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
  test_alloc_failure_sweep();
  rmdir(tmp_dir_path);
  return check_summary("test_tensor");
}
