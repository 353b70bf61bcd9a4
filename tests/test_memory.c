/*
 * test_memory.c — npu_session_explain and memory planning through the C API: the description
 * of a plan against what the test knows of its graph (steps after folding, names, dtypes,
 * shapes, bytes, where each value lives), planned results bit-equal to unplanned ones and to
 * values computed here, a value read late after many others were produced, fetched
 * intermediates and identities, two plans in one session, the arena below the sum of what it
 * holds, the context's peak accounted bytes lower with planning, OP_NO_REUSE_MEM, errors, and
 * the allocation-failure sweep.
 *
 * Planning is switched with NPU_MEMORY_PLAN (read when a session is created), so each test
 * sets or clears it before npu_session_new.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "npu_test.h"

static void planning(bool on) {
  if (on) unsetenv("NPU_MEMORY_PLAN");
  else setenv("NPU_MEMORY_PLAN", "0", 1);
}

static npu_status placeholder(npu_graph *g, const char *name, int64_t rows, int64_t cols,
                              int *value) {
  int64_t shape[] = {rows, cols};
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 2}}};
  int node;
  TRY(npu_graph_add_op(g, "placeholder", name, 0, NULL, 2, a, &node));
  *value = out0(g, node);
  return NPU_OK;
}

/* The deterministic data of a constant or feed: element i of tensor `seed`. */
static float datum(int seed, int64_t i) {
  return (float)((i * 7 + seed * 13) % 17 - 8) * 0.125f;
}

static npu_status constant(npu_context *ctx, npu_graph *g, const char *name, int ndim,
                           const int64_t *shape, int seed, int *value) {
  npu_tensor *t;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, ndim, shape, &t));
  float *d = npu_tensor_data(t);
  for (int64_t i = 0; i < npu_tensor_numel(t); i++) d[i] = datum(seed, i);
  return graph_const(g, name, t, value);
}


/* ---- the chain graph ----
   x (rows, cols) fed; a = x + x is read only at the very end;
   h0 = x, h(i+1) = relu(h(i) * c(i) + b(i)) for i < depth (c, b constants of shape (cols));
   y = h(depth) + a;  mid = h(depth/2) may be fetched;  seen = identity(h(2)) may be fetched. */

#define DEPTH 12

typedef struct chain {
  npu_graph *g;
  int x, a, y, mid, seen;
  int h[DEPTH + 1];
  int64_t rows, cols;
} chain;

static npu_status build_chain(npu_context *ctx, chain *c, int64_t rows, int64_t cols) {
  c->rows = rows;
  c->cols = cols;
  TRY(npu_graph_new(ctx, &c->g));
  npu_graph *g = c->g;
  TRY(placeholder(g, "x", -1, cols, &c->x));
  TRY(graph_op(g, "add", "a", 2, (int[]){c->x, c->x}, &c->a));
  c->h[0] = c->x;
  for (int i = 0; i < DEPTH; i++) {
    char name[32];
    int cv, bv, m, s;
    snprintf(name, sizeof name, "c%d", i);
    TRY(constant(ctx, g, name, 1, (int64_t[]){cols}, 2 * i + 1, &cv));
    snprintf(name, sizeof name, "b%d", i);
    TRY(constant(ctx, g, name, 1, (int64_t[]){cols}, 2 * i + 2, &bv));
    snprintf(name, sizeof name, "m%d", i);
    TRY(graph_op(g, "mul", name, 2, (int[]){c->h[i], cv}, &m));
    snprintf(name, sizeof name, "s%d", i);
    TRY(graph_op(g, "add", name, 2, (int[]){m, bv}, &s));
    snprintf(name, sizeof name, "h%d", i + 1);
    TRY(graph_op(g, "relu", name, 1, &s, &c->h[i + 1]));
  }
  TRY(graph_op(g, "add", "y", 2, (int[]){c->h[DEPTH], c->a}, &c->y));
  c->mid = c->h[DEPTH / 2];
  TRY(graph_op(g, "identity", "seen", 1, &c->h[2], &c->seen));
  return NPU_OK;
}

static npu_status chain_input(npu_context *ctx, const chain *c, int64_t rows, int seed,
                              npu_tensor **x) {
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, (int64_t[]){rows, c->cols}, x));
  float *d = npu_tensor_data(*x);
  for (int64_t i = 0; i < rows * c->cols; i++) d[i] = datum(seed, i) * 3;
  return NPU_OK;
}

/* What the chain computes, in the same float operations the kernels do: h(k) and y. */
static void chain_expect(const chain *c, const float *x, int64_t rows, int k, float *hk, float *y) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < c->cols; j++) {
      float h = x[r * c->cols + j];
      for (int i = 0; i < DEPTH; i++) {
        float m = h * datum(2 * i + 1, j);
        float s = m + datum(2 * i + 2, j);
        h = s > 0 ? s : 0;
        if (i + 1 == k && hk) hk[r * c->cols + j] = h;
      }
      float a = x[r * c->cols + j] + x[r * c->cols + j];
      if (y) y[r * c->cols + j] = h + a;
    }
}

/* A fusion switch file turning every pass off, so each node keeps a step of its own and the
   tests can name the values between them (fusion is tested with fusion, spec/). */
static char no_fusion[64];

static void write_no_fusion(void) {
  strcpy(no_fusion, "/tmp/npu_test_memory_XXXXXX");
  int fd = mkstemp(no_fusion);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  CHECK(f != NULL);
  if (f) {
    fputs("{\"Switch\":{\"GraphFusion\":{\"ALL\":\"off\"},\"UBFusion\":{\"ALL\":\"off\"}}}\n", f);
    fclose(f);
  }
}

static npu_status new_session_mode(npu_context *ctx, npu_graph *g, int policy, const char *mode,
                                   npu_session **s) {
  npu_options *o;
  TRY(npu_options_new(ctx, &o));
  npu_status st = npu_options_set_string(o, "precision_mode", mode);
  if (!st) st = npu_options_set_string(o, "fusion_switch_file", no_fusion);
  if (!st && policy) st = npu_options_set_int(o, "static_memory_policy", policy);
  if (!st) st = npu_session_new(ctx, g, o, s);
  npu_options_release(o);
  return st;
}

static npu_status new_session_policy(npu_context *ctx, npu_graph *g, int policy,
                                     npu_session **s) {
  return new_session_mode(ctx, g, policy, "must_keep_origin_dtype", s);
}

static npu_status new_session(npu_context *ctx, npu_graph *g, npu_session **s) {
  npu_options *o;
  TRY(npu_options_new(ctx, &o));
  npu_status st = npu_options_set_string(o, "precision_mode", "must_keep_origin_dtype");
  if (!st) st = npu_options_set_string(o, "fusion_switch_file", no_fusion);
  if (!st) st = npu_session_new(ctx, g, o, s);
  npu_options_release(o);
  return st;
}

static bool equal_data(const npu_tensor *t, const float *want, int64_t n) {
  return npu_tensor_numel(t) == n && memcmp(npu_tensor_data(t), want, (size_t)n * sizeof(float)) == 0;
}

/* ---- explain helpers ---- */

static cJSON *explain(npu_context *ctx, npu_session *s, int n_feeds, const int *feeds,
                      npu_tensor *const *ft, int n_fetches, const int *fetches) {
  char *json = NULL;
  npu_status st = npu_session_explain(s, n_feeds, feeds, ft, n_fetches, fetches, 0, NULL, &json);
  CHECK(st == NPU_OK);
  if (st) {
    fprintf(stderr, "explain: %s\n", npu_context_errmsg(ctx));
    return NULL;
  }
  cJSON *root = cJSON_Parse(json);
  CHECK(root != NULL);
  npu_free(ctx, json);
  return root;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const char *text(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

/* The step whose node is named `node`, or NULL. */
static const cJSON *step_named(const cJSON *root, const char *node) {
  const cJSON *step;
  cJSON_ArrayForEach(step, cJSON_GetObjectItemCaseSensitive(root, "steps"))
    if (strcmp(text(step, "node"), node) == 0) return step;
  return NULL;
}

static const cJSON *output0(const cJSON *step) {
  return step ? cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(step, "outputs"), 0) : NULL;
}

/* ---- tests ---- */

/* An MLP: x (4, 8) -> matmul w1 (8, 16) + b1 -> relu -> matmul w2 (16, 3) + b2 -> softmax,
   with w2 scaled by a constant factor computed in the graph (folded at compile time). */
static void test_explain_describes_the_plan(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  planning(true);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int x, w1, b1, w2, b2, two, half, w2s, mm1, z1, r1, mm2, z2, y;
  CHECK(placeholder(g, "x", -1, 8, &x) == NPU_OK);
  CHECK(constant(ctx, g, "w1", 2, (int64_t[]){8, 16}, 1, &w1) == NPU_OK);
  CHECK(constant(ctx, g, "b1", 1, (int64_t[]){16}, 2, &b1) == NPU_OK);
  CHECK(constant(ctx, g, "w2", 2, (int64_t[]){16, 3}, 3, &w2) == NPU_OK);
  CHECK(constant(ctx, g, "b2", 1, (int64_t[]){3}, 4, &b2) == NPU_OK);
  CHECK(constant(ctx, g, "two", 0, NULL, 5, &two) == NPU_OK);
  CHECK(graph_op(g, "mul", "half", 2, (int[]){two, two}, &half) == NPU_OK);     /* folded */
  CHECK(graph_op(g, "mul", "w2s", 2, (int[]){w2, half}, &w2s) == NPU_OK);      /* folded */
  CHECK(graph_op(g, "matmul", "mm1", 2, (int[]){x, w1}, &mm1) == NPU_OK);
  CHECK(graph_op(g, "add", "z1", 2, (int[]){mm1, b1}, &z1) == NPU_OK);
  CHECK(graph_op(g, "relu", "r1", 1, &z1, &r1) == NPU_OK);
  CHECK(graph_op(g, "matmul", "mm2", 2, (int[]){r1, w2s}, &mm2) == NPU_OK);
  CHECK(graph_op(g, "add", "z2", 2, (int[]){mm2, b2}, &z2) == NPU_OK);
  CHECK(graph_op(g, "softmax", "y", 1, &z2, &y) == NPU_OK);
  npu_session *s = NULL;
  CHECK(new_session(ctx, g, &s) == NPU_OK);
  npu_tensor *xt;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, (int64_t[]){4, 8}, &xt) == NPU_OK);
  cJSON *root = explain(ctx, s, 1, &x, &xt, 1, &y);
  CHECK(npu_session_n_plans(s) == 1); /* compiled and cached, as a run would */
  if (root) {
    CHECK(num(root, "n_steps") == 6);
    CHECK(num(root, "folded") == 2);
    CHECK(num(root, "iterations") == 1);
    CHECK(strcmp(text(root, "precision_mode"), "must_keep_origin_dtype") == 0);
    const char *order[] = {"mm1", "z1", "r1", "mm2", "z2", "y"};
    const char *ops[] = {"matmul", "add", "relu", "matmul", "add", "softmax"};
    const int64_t cols[] = {16, 16, 16, 3, 3, 3};
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
    CHECK(cJSON_GetArraySize(steps) == 6);
    for (int i = 0; i < 6 && i < cJSON_GetArraySize(steps); i++) {
      const cJSON *st = cJSON_GetArrayItem(steps, i);
      CHECK(strcmp(text(st, "node"), order[i]) == 0);
      CHECK(strcmp(text(st, "op"), ops[i]) == 0);
      const cJSON *out = output0(st);
      char name[16];
      snprintf(name, sizeof name, "%s:0", order[i]);
      CHECK(strcmp(text(out, "name"), name) == 0);
      CHECK(strcmp(text(out, "dtype"), "float32") == 0);
      const cJSON *shape = cJSON_GetObjectItemCaseSensitive(out, "shape");
      CHECK(cJSON_GetArraySize(shape) == 2 && cJSON_GetArrayItem(shape, 0)->valuedouble == 4 &&
            cJSON_GetArrayItem(shape, 1)->valuedouble == (double)cols[i]);
      CHECK(num(out, "bytes") == (double)(4 * cols[i] * 4));
      /* every output but the fetched one lives in the arena */
      CHECK(strcmp(text(out, "memory"), i == 5 ? "own" : "arena") == 0);
      CHECK(i == 5 || ((int64_t)num(out, "offset") % 64 == 0 && num(out, "offset") >= 0));
    }
    /* mm2's inputs: r1 from the arena, the folded w2 * (two * two) as a constant */
    const cJSON *mm2_in = cJSON_GetObjectItemCaseSensitive(step_named(root, "mm2"), "inputs");
    CHECK(strcmp(text(cJSON_GetArrayItem(mm2_in, 1), "name"), "w2s:0") == 0);
    CHECK(strcmp(text(cJSON_GetArrayItem(mm2_in, 1), "memory"), "constant") == 0);
    CHECK(strcmp(text(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "feeds"), 0),
                      "memory"), "feed") == 0);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "memory");
    /* planned: mm1, z1, r1 (256 B each), mm2, z2 (48 B each) */
    CHECK(num(m, "planned_values") == 5);
    CHECK(num(m, "planned_bytes") == 3 * 256 + 2 * 48);
    /* r1 and z1 live together, as do mm2 and r1: the peak is two 256-byte values */
    CHECK(num(m, "live_peak_bytes") == 512);
    CHECK(num(m, "arena_bytes") >= num(m, "live_peak_bytes"));
    CHECK(num(m, "arena_bytes") < num(m, "planned_bytes"));
    CHECK(num(m, "fetched_bytes") == 48);
    CHECK(num(m, "own_bytes") == 48);
    /* w1 (512), b1 (64), w2s (192), b2 (12): two, half and w2 are folded away */
    CHECK(num(m, "constant_bytes") == 512 + 64 + 192 + 12);
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "planning")));
    cJSON_Delete(root);
  }
  npu_tensor *yt = NULL;
  CHECK(npu_session_run(s, 1, &x, &xt, 1, &y, &yt, 0, NULL) == NPU_OK);
  CHECK(npu_session_n_plans(s) == 1); /* the run reused the explained plan */
  npu_tensor_release(yt);
  npu_tensor_release(xt);
  npu_session_release(s);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* Runs the chain twice (different inputs) fetching y, mid and seen; returns the fetches of the
   second run in out[3] and checks the first run's results were left untouched by it. */
static npu_status run_chain(npu_context *ctx, chain *c, npu_session *s, int64_t rows,
                            npu_tensor **out) {
  int fetches[] = {c->y, c->mid, c->seen};
  npu_tensor *first[3] = {0}, *x1 = NULL, *x2 = NULL;
  npu_status st = chain_input(ctx, c, rows, 1, &x1);
  if (!st) st = chain_input(ctx, c, rows, 2, &x2);
  if (!st) st = npu_session_run(s, 1, &c->x, &x1, 3, fetches, first, 0, NULL);
  if (!st) st = npu_session_run(s, 1, &c->x, &x2, 3, fetches, out, 0, NULL);
  if (!st) {
    int64_t n = rows * c->cols;
    float *y = malloc((size_t)n * sizeof *y), *mid = malloc((size_t)n * sizeof *mid),
          *seen = malloc((size_t)n * sizeof *seen);
    if (y && mid && seen) {
      for (int run = 0; run < 2; run++) {
        npu_tensor *const *r = run ? out : first;
        const float *xd = npu_tensor_data(run ? x2 : x1);
        chain_expect(c, xd, rows, DEPTH / 2, mid, y);
        chain_expect(c, xd, rows, 2, seen, NULL);
        CHECK(equal_data(r[0], y, n));
        CHECK(equal_data(r[1], mid, n));
        CHECK(equal_data(r[2], seen, n));
      }
    }
    free(y);
    free(mid);
    free(seen);
  }
  for (int i = 0; i < 3; i++) npu_tensor_release(first[i]);
  npu_tensor_release(x1);
  npu_tensor_release(x2);
  return st;
}

static void test_planned_results_equal_unplanned(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_tensor *out[2][3] = {{0}};
  for (int on = 0; on < 2; on++) {
    chain c = {0};
    CHECK(build_chain(ctx, &c, 5, 48) == NPU_OK);
    planning(on);
    npu_session *s = NULL;
    CHECK(new_session(ctx, c.g, &s) == NPU_OK);
    npu_status st = run_chain(ctx, &c, s, 5, out[on]);
    CHECK(st == NPU_OK);
    if (st) fprintf(stderr, "chain: %s\n", npu_context_errmsg(ctx));
    /* where the values live: the late-read a, h's and the products in the arena (on) */
    int fetches[] = {c.y, c.mid, c.seen};
    npu_tensor *x;
    CHECK(chain_input(ctx, &c, 5, 3, &x) == NPU_OK);
    cJSON *root = explain(ctx, s, 1, &c.x, &x, 3, fetches);
    if (root) {
      const char *want = on ? "arena" : "own";
      CHECK(strcmp(text(output0(step_named(root, "a")), "memory"), want) == 0);
      CHECK(strcmp(text(output0(step_named(root, "m0")), "memory"), want) == 0);
      CHECK(strcmp(text(output0(step_named(root, "h1")), "memory"), want) == 0);
      /* fetched (mid = h6), or seen through a fetched identity (h2): buffers of their own */
      CHECK(strcmp(text(output0(step_named(root, "h6")), "memory"), "own") == 0);
      CHECK(strcmp(text(output0(step_named(root, "h2")), "memory"), "own") == 0);
      CHECK(strcmp(text(output0(step_named(root, "seen")), "memory"), "alias") == 0);
      const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "memory");
      CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "planning")) == (on == 1));
      /* a: 1, m, s, h: 3 per layer less h2 and h6, 5 x 48 floats (960 bytes) each */
      CHECK(num(m, "planned_values") == 1 + 3 * DEPTH - 2);
      CHECK(num(m, "planned_bytes") == (1 + 3 * DEPTH - 2) * 960.0);
      /* a lives throughout, with at most two of the chain's values at once */
      CHECK(num(m, "live_peak_bytes") == 3 * 960.0);
      CHECK(num(m, "arena_bytes") == (on ? 3 * 960.0 : 0));
      cJSON_Delete(root);
    }
    npu_tensor_release(x);
    npu_session_release(s);
    npu_graph_release(c.g);
  }
  for (int i = 0; i < 3; i++) {
    CHECK(out[0][i] && out[1][i] && npu_tensor_nbytes(out[0][i]) == npu_tensor_nbytes(out[1][i]) &&
          memcmp(npu_tensor_data(out[0][i]), npu_tensor_data(out[1][i]),
                 npu_tensor_nbytes(out[0][i])) == 0);
    npu_tensor_release(out[0][i]);
    npu_tensor_release(out[1][i]);
  }
  planning(true);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* A reshape and a squeeze of planned values share their input's arena block: x (rows, cols)
   fed, a = x + x, r = reshape (1, cols, rows), q = squeeze 0, y = q * q fetched.  Copying,
   the reshape step holds a and r, so the arena is 2 N; aliased, a/r/q is one block of N.
   Results bit-equal with planning off (NPU_MEMORY_PLAN=0: every value its own buffer). */
static npu_status build_flatten(npu_context *ctx, npu_graph **out, int64_t rows, int64_t cols, int *x, int *y) {
  npu_graph *g;
  TRY(npu_graph_new(ctx, &g));
  *out = g;
  int a, r, q, node;
  TRY(placeholder(g, "x", rows, cols, x));
  TRY(graph_op(g, "add", "a", 2, (int[]){*x, *x}, &a));
  int64_t shape[] = {1, cols, rows}, axis[] = {0};
  npu_attr sa = {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 3}};
  TRY(npu_graph_add_op(g, "reshape", "r", 1, &a, 1, &sa, &node));
  r = npu_graph_output(g, node, 0);
  npu_attr qa = {.name = "axis", .type = NPU_ATTR_INTS, .u.ints = {axis, 1}};
  TRY(npu_graph_add_op(g, "squeeze", "q", 1, &r, 1, &qa, &node));
  q = npu_graph_output(g, node, 0);
  return graph_op(g, "mul", "y", 2, (int[]){q, q}, y);
}

static void test_reshapes_alias_their_input(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  const int64_t rows = 6, cols = 32, n_bytes = rows * cols * 4; /* 768: a multiple of 64 */
  npu_tensor *out[2] = {0};
  for (int on = 0; on < 2; on++) {
    npu_graph *g = NULL;
    int x, y;
    CHECK(build_flatten(ctx, &g, rows, cols, &x, &y) == NPU_OK);
    planning(on);
    npu_session *s = NULL;
    npu_tensor *xt = NULL;
    CHECK(new_session(ctx, g, &s) == NPU_OK);
    CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, (int64_t[]){rows, cols}, &xt) == NPU_OK);
    if (!s || !xt) break;
    float *xd = npu_tensor_data(xt);
    for (int64_t i = 0; i < rows * cols; i++) xd[i] = datum(5, i) * 3;
    /* twice: the second run finds the arena as the first left it */
    for (int run = 0; run < 2; run++) {
      npu_tensor_release(out[on]);
      out[on] = NULL;
      CHECK(npu_session_run(s, 1, &x, &xt, 1, &y, &out[on], 0, NULL) == NPU_OK);
    }
    if (out[on]) { /* y = (x + x)^2, element for element (a reshape keeps the order) */
      const float *yd = npu_tensor_data(out[on]);
      for (int64_t i = 0; i < rows * cols; i++) CHECK(yd[i] == (xd[i] + xd[i]) * (xd[i] + xd[i]));
    }
    cJSON *root = explain(ctx, s, 1, &x, &xt, 1, &y);
    if (root) {
      const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "memory");
      const cJSON *r = output0(step_named(root, "r")), *q = output0(step_named(root, "q"));
      CHECK(num(m, "planned_values") == 3);
      CHECK(num(m, "aliased_values") == 2);
      CHECK(num(m, "planned_bytes") == 3.0 * n_bytes);
      CHECK(num(m, "live_peak_bytes") == n_bytes); /* a, r and q count once */
      CHECK(num(m, "arena_bytes") == (on ? n_bytes : 0));
      CHECK(strcmp(text(r, "alias_of"), on ? "a:0" : "") == 0);
      CHECK(strcmp(text(q, "alias_of"), on ? "r:0" : "") == 0);
      CHECK(num(r, "offset") == (on ? num(output0(step_named(root, "a")), "offset") : -1));
      cJSON_Delete(root);
    }
    npu_tensor_release(xt);
    npu_session_release(s);
    npu_graph_release(g);
  }
  CHECK(out[0] && out[1] && npu_tensor_nbytes(out[0]) == npu_tensor_nbytes(out[1]) &&
        memcmp(npu_tensor_data(out[0]), npu_tensor_data(out[1]), npu_tensor_nbytes(out[0])) == 0);
  npu_tensor_release(out[0]);
  npu_tensor_release(out[1]);
  planning(true);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* Two signatures (batch 3 and 7) in one session, run alternately: each plan has its own
   arena and neither disturbs the other. */
static void test_two_plans_in_one_session(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  planning(true);
  chain c = {0};
  CHECK(build_chain(ctx, &c, 3, 32) == NPU_OK);
  npu_session *s = NULL;
  CHECK(new_session(ctx, c.g, &s) == NPU_OK);
  for (int round = 0; round < 2; round++)
    for (int64_t rows = 3; rows <= 7; rows += 4) {
      npu_tensor *out[3] = {0};
      CHECK(run_chain(ctx, &c, s, rows, out) == NPU_OK);
      for (int i = 0; i < 3; i++) npu_tensor_release(out[i]);
    }
  CHECK(npu_session_n_plans(s) == 2);
  npu_session_release(s);
  npu_graph_release(c.g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* Two 3x3 convolutions with relu on (1, 12, 12, 8): the kernels' scratch, and under
   force_fp16 the float32 copies of float16 operands, are planned into the arena beside the
   values; results are bit-equal to the unplanned ones in both modes. */
static npu_status conv_graph(npu_context *ctx, npu_graph **gp, int *x, int *y) {
  TRY(npu_graph_new(ctx, gp));
  npu_graph *g = *gp;
  int64_t xs[] = {-1, 12, 12, 8};
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 4}}};
  int node, f1, f2, c1, r1, c2;
  TRY(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, a, &node));
  *x = out0(g, node);
  TRY(constant(ctx, g, "f1", 4, (int64_t[]){3, 3, 8, 8}, 1, &f1));
  TRY(constant(ctx, g, "f2", 4, (int64_t[]){3, 3, 8, 8}, 2, &f2));
  int64_t strides[] = {1, 1, 1, 1};
  npu_attr ca[] = {{.name = "strides", .type = NPU_ATTR_INTS, .u.ints = {strides, 4}},
                   {.name = "padding", .type = NPU_ATTR_STRING, .u.s = "SAME"}};
  TRY(npu_graph_add_op(g, "conv2d", "c1", 2, (int[]){*x, f1}, 2, ca, &node));
  c1 = out0(g, node);
  TRY(graph_op(g, "relu", "r1", 1, &c1, &r1));
  TRY(npu_graph_add_op(g, "conv2d", "c2", 2, (int[]){r1, f2}, 2, ca, &node));
  c2 = out0(g, node);
  TRY(graph_op(g, "relu", "y", 1, &c2, y));
  return NPU_OK;
}

static void test_step_buffers_share_the_arena(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g = NULL;
  int x, y;
  CHECK(conv_graph(ctx, &g, &x, &y) == NPU_OK);
  npu_tensor *xt;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 4, (int64_t[]){1, 12, 12, 8}, &xt) == NPU_OK);
  for (int64_t i = 0; i < 12 * 12 * 8; i++) ((float *)npu_tensor_data(xt))[i] = datum(7, i);
  const char *modes[] = {"must_keep_origin_dtype", "force_fp16"};
  double scratch32 = 0;
  for (int mi = 0; mi < 2; mi++) {
    npu_tensor *out[2] = {0};
    for (int on = 0; on < 2; on++) {
      planning(on);
      npu_session *s = NULL;
      CHECK(new_session_mode(ctx, g, 0, modes[mi], &s) == NPU_OK);
      npu_tensor *first = NULL;
      CHECK(npu_session_run(s, 1, &x, &xt, 1, &y, &first, 0, NULL) == NPU_OK);
      CHECK(npu_session_run(s, 1, &x, &xt, 1, &y, &out[on], 0, NULL) == NPU_OK);
      CHECK(first && out[on] && memcmp(npu_tensor_data(first), npu_tensor_data(out[on]),
                                       npu_tensor_nbytes(first)) == 0);
      npu_tensor_release(first);
      cJSON *root = explain(ctx, s, 1, &x, &xt, 1, &y);
      if (root) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "memory");
        double scratch = num(m, "scratch_bytes"), rounds = num(m, "round_bytes");
        CHECK(scratch > 0);
        /* under force_fp16 the convolutions take x and y as float16 (NPUX_F_HALF_XY): no
           full-size widening for them, their blocks' float32 copies are in their scratch */
        if (mi == 0) scratch32 = scratch;
        else CHECK(scratch > scratch32);
        CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "buffers_in_arena")) == (on == 1));
        /* the buffers live during their step only: the arena is below values + buffers */
        if (on) CHECK(num(m, "arena_bytes") < num(m, "planned_bytes") + scratch + rounds);
        CHECK(num(m, "total_bytes") == num(m, "arena_bytes") + num(m, "own_bytes") +
                                           num(m, "constant_bytes") + (on ? 0 : scratch + rounds));
        cJSON_Delete(root);
      }
      npu_session_release(s);
    }
    CHECK(out[0] && out[1] && npu_tensor_nbytes(out[0]) == npu_tensor_nbytes(out[1]) &&
          memcmp(npu_tensor_data(out[0]), npu_tensor_data(out[1]), npu_tensor_nbytes(out[0])) == 0);
    npu_tensor_release(out[0]);
    npu_tensor_release(out[1]);
  }
  planning(true);
  npu_tensor_release(xt);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* static_memory_policy 2: the plans of a session share one arena, sized for the largest.
   Plans for 8, 32 and 16 rows (in that order: the arena grows once, then is reused) hold one
   32-row arena instead of three; each plan still computes its own values, run in any order. */
static size_t shared_live(int policy) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  planning(true);
  chain c = {0};
  npu_session *s = NULL;
  CHECK(build_chain(ctx, &c, 8, 256) == NPU_OK);
  CHECK(new_session_policy(ctx, c.g, policy, &s) == NPU_OK);
  size_t before = npu_context_live_bytes(ctx);
  const int64_t rows[] = {8, 32, 16, 8, 32};
  for (int i = 0; i < 5; i++) {
    npu_tensor *out[3] = {0};
    CHECK(run_chain(ctx, &c, s, rows[i], out) == NPU_OK);
    for (int k = 0; k < 3; k++) npu_tensor_release(out[k]);
  }
  CHECK(npu_session_n_plans(s) == 3);
  size_t held = npu_context_live_bytes(ctx) - before;
  int fetches[] = {c.y, c.mid, c.seen};
  npu_tensor *x;
  CHECK(chain_input(ctx, &c, 16, 1, &x) == NPU_OK);
  cJSON *root = explain(ctx, s, 1, &c.x, &x, 3, fetches);
  if (root) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "memory");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "arena_shared")) == (policy == 2));
    CHECK(num(m, "arena_bytes") == 3 * 16 * 256 * 4); /* this plan's need */
    cJSON_Delete(root);
  }
  npu_tensor_release(x);
  npu_session_release(s);
  npu_graph_release(c.g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
  return held;
}

static void test_static_memory_policy_shares_one_arena(void) {
  size_t own = shared_live(0), shared = shared_live(2);
  /* arenas of 3 values of 8, 32 and 16 rows against one of 32 rows: 24 rows' worth less */
  const size_t row = 3 * 256 * 4;
  CHECK(own - shared >= 24 * row - 4096 && own - shared <= 24 * row + 4096);
}

/* The context's peak accounted bytes, for one session running the chain on 64 x 1024 floats
   (256 KiB per value) — each in a fresh context. */
static size_t chain_peak(bool on, size_t *arena, size_t *planned) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  planning(on);
  chain c = {0};
  npu_session *s = NULL;
  npu_tensor *x = NULL, *y = NULL;
  CHECK(build_chain(ctx, &c, 64, 1024) == NPU_OK);
  CHECK(new_session(ctx, c.g, &s) == NPU_OK);
  CHECK(chain_input(ctx, &c, 64, 1, &x) == NPU_OK);
  CHECK(npu_session_run(s, 1, &c.x, &x, 1, &c.y, &y, 0, NULL) == NPU_OK);
  size_t peak = npu_context_peak_bytes(ctx);
  cJSON *root = explain(ctx, s, 1, &c.x, &x, 1, &c.y);
  if (root) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "memory");
    *arena = (size_t)num(m, "arena_bytes");
    *planned = (size_t)num(m, "planned_bytes");
    cJSON_Delete(root);
  }
  npu_tensor_release(x);
  npu_tensor_release(y);
  npu_session_release(s);
  npu_graph_release(c.g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
  planning(true);
  return peak;
}

static void test_peak_bytes_drop(void) {
  size_t arena_on = 0, planned_on = 0, arena_off = 0, planned_off = 0;
  size_t on = chain_peak(true, &arena_on, &planned_on);
  size_t off = chain_peak(false, &arena_off, &planned_off);
  const size_t value = 64 * 1024 * 4;
  /* 3 * DEPTH + 1 intermediates (none fetched but y) without planning, 3 with */
  CHECK(planned_on == (3 * DEPTH + 1) * value && planned_off == planned_on);
  CHECK(arena_on == 3 * value && arena_off == 0);
  CHECK(on < off);
  /* the difference is what planning saved, less the arena (per-tensor headers aside) */
  CHECK(off - on >= planned_on - arena_on - value);
}

/* OP_NO_REUSE_MEM: named nodes and op types keep buffers of their own; results unchanged. */
static void test_op_no_reuse_mem(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  planning(true);
  setenv("OP_NO_REUSE_MEM", "Mul, a", 1);
  chain c = {0};
  CHECK(build_chain(ctx, &c, 2, 16) == NPU_OK);
  npu_session *s = NULL;
  CHECK(new_session(ctx, c.g, &s) == NPU_OK);
  unsetenv("OP_NO_REUSE_MEM");
  npu_tensor *x;
  CHECK(chain_input(ctx, &c, 2, 1, &x) == NPU_OK);
  cJSON *root = explain(ctx, s, 1, &c.x, &x, 1, &c.y);
  if (root) {
    CHECK(strcmp(text(output0(step_named(root, "a")), "memory"), "own") == 0);
    CHECK(strcmp(text(output0(step_named(root, "m3")), "memory"), "own") == 0);
    CHECK(strcmp(text(output0(step_named(root, "s3")), "memory"), "arena") == 0);
    CHECK(num(cJSON_GetObjectItemCaseSensitive(root, "memory"), "planned_values") == 2 * DEPTH);
    cJSON_Delete(root);
  }
  npu_tensor *out[3] = {0};
  CHECK(run_chain(ctx, &c, s, 2, out) == NPU_OK);
  for (int i = 0; i < 3; i++) npu_tensor_release(out[i]);
  npu_tensor_release(x);
  npu_session_release(s);
  npu_graph_release(c.g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

static void test_explain_errors(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  planning(true);
  chain c = {0};
  CHECK(build_chain(ctx, &c, 2, 4) == NPU_OK);
  npu_session *s = NULL;
  CHECK(new_session(ctx, c.g, &s) == NPU_OK);
  char *json = (char *)"untouched";
  /* a placeholder left unfed: the compile error a run would give */
  CHECK(npu_session_explain(s, 0, NULL, NULL, 1, &c.y, 0, NULL, &json) == NPU_ERR_ARG);
  CHECK(json == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "placeholder 'x'") != NULL);
  int bad = 100000;
  json = (char *)"untouched";
  CHECK(npu_session_explain(s, 0, NULL, NULL, 1, &bad, 0, NULL, &json) == NPU_ERR_ARG);
  CHECK(json == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "fetch 1") != NULL);
  CHECK(npu_session_explain(s, 0, NULL, NULL, 1, &c.y, 0, NULL, NULL) == NPU_ERR_ARG);
  CHECK(npu_session_n_plans(s) == 0);
  npu_session_close(s);
  json = (char *)"untouched";
  CHECK(npu_session_explain(s, 0, NULL, NULL, 1, &c.y, 0, NULL, &json) == NPU_ERR_STATE);
  CHECK(json == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "closed") != NULL);
  npu_free(ctx, NULL);
  npu_session_release(s);
  npu_graph_release(c.g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* The DOT drawings through the C API: the plan (npu_session_explain_dot) and the graph as
   given (npu_graph_to_dot), and their argument errors. */
static void test_dot(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  chain c = {0};
  CHECK(build_chain(ctx, &c, 2, 4) == NPU_OK);
  npu_session *s = NULL;
  CHECK(new_session(ctx, c.g, &s) == NPU_OK);
  npu_tensor *x = NULL;
  CHECK(chain_input(ctx, &c, 2, 1, &x) == NPU_OK);
  char *dot = NULL;
  CHECK(npu_session_explain_dot(s, 1, &c.x, &x, 1, &c.y, 0, NULL, &dot) == NPU_OK);
  if (dot) {
    CHECK(strncmp(dot, "digraph \"plan_0\" {\n  label=\"plan 0: ", 35) == 0);
    CHECK(strstr(dot, "shape=ellipse") != NULL); /* the feed */
    CHECK(strstr(dot, "[peripheries=2]") != NULL); /* the fetch */
    CHECK(strcmp(dot + strlen(dot) - 2, "}\n") == 0);
  }
  npu_free(ctx, dot);
  dot = NULL;
  CHECK(npu_graph_to_dot(c.g, &dot) == NPU_OK);
  if (dot) {
    CHECK(strncmp(dot, "digraph \"graph\" {\n  label=\"graph as given: ", 42) == 0);
    CHECK(strstr(dot, "label=\"placeholder\\nx") != NULL);
  }
  npu_free(ctx, dot);
  CHECK(npu_graph_to_dot(NULL, &dot) == NPU_ERR_ARG);
  CHECK(npu_graph_to_dot(c.g, NULL) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "dot_out is NULL") != NULL);
  CHECK(npu_session_explain_dot(s, 1, &c.x, &x, 1, &c.y, 0, NULL, NULL) == NPU_ERR_ARG);
  dot = (char *)"untouched";
  CHECK(npu_session_explain_dot(s, 0, NULL, NULL, 1, &c.y, 0, NULL, &dot) == NPU_ERR_ARG);
  CHECK(dot == NULL);
  npu_session_close(s);
  dot = (char *)"untouched";
  CHECK(npu_session_explain_dot(s, 1, &c.x, &x, 1, &c.y, 0, NULL, &dot) == NPU_ERR_STATE);
  CHECK(dot == NULL);
  npu_tensor_release(x);
  npu_session_release(s);
  npu_graph_release(c.g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* Build, compile (with planning), explain (also as DOT) and run with the n-th allocation
   failing. */
static npu_status sweep_once(npu_context *ctx, int policy, char **json, npu_tensor **y) {
  chain c = {0};
  npu_session *s = NULL;
  npu_tensor *x = NULL;
  npu_status st = build_chain(ctx, &c, 2, 16);
  if (!st) st = new_session_policy(ctx, c.g, policy, &s);
  if (!st) st = chain_input(ctx, &c, 2, 1, &x);
  if (!st) {
    st = npu_session_explain(s, 1, &c.x, &x, 1, &c.y, 0, NULL, json);
    if (st) CHECK(*json == NULL);
  }
  char *dot = (char *)"untouched"; /* the DOT drawings: NULL on failure, freed here */
  if (!st) {
    st = npu_session_explain_dot(s, 1, &c.x, &x, 1, &c.y, 0, NULL, &dot);
    CHECK(st ? dot == NULL : dot != NULL);
    npu_free(ctx, st ? NULL : dot);
  }
  if (!st) {
    dot = (char *)"untouched";
    st = npu_graph_to_dot(c.g, &dot);
    CHECK(st ? dot == NULL : dot != NULL);
    npu_free(ctx, st ? NULL : dot);
  }
  if (!st) st = npu_session_run(s, 1, &c.x, &x, 1, &c.y, y, 0, NULL);
  if (!st && policy) { /* a second, larger plan: the shared arena grows */
    npu_tensor *x4 = NULL, *y4 = NULL;
    st = chain_input(ctx, &c, 4, 1, &x4);
    if (!st) st = npu_session_run(s, 1, &c.x, &x4, 1, &c.y, &y4, 0, NULL);
    npu_tensor_release(x4);
    npu_tensor_release(y4);
  }
  npu_tensor_release(x);
  npu_session_release(s);
  npu_graph_release(c.g);
  return st;
}

typedef struct sweep_case {
  int policy;
  char *json;
  npu_tensor *y;
} sweep_case;

static npu_status sweep_run(npu_context *ctx, void *ud) {
  sweep_case *c = ud;
  return sweep_once(ctx, c->policy, &c->json, &c->y);
}

static void sweep_after(npu_context *ctx, npu_status st, void *ud) {
  sweep_case *c = ud;
  (void)st;
  npu_free(ctx, c->json);
  npu_tensor_release(c->y);
  c->json = NULL;
  c->y = NULL;
}

static void test_allocation_failure_sweep(int policy) {
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  planning(true);
  sweep_case c = {.policy = policy};
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.run = sweep_run, .after = sweep_after, .ud = &c});
  CHECK(n_failures > 50);
  npu_context_release(ctx);
}

int main(void) {
  write_no_fusion();
  test_explain_describes_the_plan();
  test_planned_results_equal_unplanned();
  test_reshapes_alias_their_input();
  test_two_plans_in_one_session();
  test_peak_bytes_drop();
  test_step_buffers_share_the_arena();
  test_static_memory_policy_shares_one_arena();
  test_op_no_reuse_mem();
  test_explain_errors();
  test_dot();
  test_allocation_failure_sweep(0);
  test_allocation_failure_sweep(2);
  remove(no_fusion);
  return check_summary("test_memory");
}
