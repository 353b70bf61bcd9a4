/*
 * test_host_op.c — host ops through the C API: a host_func node calls the run's host_op
 * callback with its key and inputs (values, several outputs, inside a while loop), a failing
 * callback fails the run with NPU_ERR_CALLBACK naming the node, a wrong output dtype is
 * NPU_ERR_DTYPE, a run without a callback is NPU_ERR_STATE, and nothing stays live.
 * Mixed computing: an imported model's op type the device lacks becomes a host_func node once
 * the host registers it (npu_context_register_host_op), and runs under mix_compile_mode.
 */
#include <stdio.h>
#include <string.h>

#include "npu_test.h"
#include "cancel_graphs.h"

typedef struct host {
  npu_context *ctx;
  int calls;
  int fail;        /* 1: return an error; 2: wrong dtype */
} host;

/* key 1: y = x * 3 (float32, any shape); key 2: (sum of x, element count as int32) */
static npu_status host_op(void *ud, int64_t key, int n_in, npu_tensor *const *in, int n_out,
                          const npu_dtype *dtypes, npu_tensor **out, char *why, size_t why_size) {
  host *h = ud;
  h->calls++;
  if (h->fail == 1) {
    snprintf(why, why_size, "the host says no (key %lld)", (long long)key);
    return NPU_ERR_CALLBACK;
  }
  const npu_tensor *x = in[0];
  const float *xd = npu_tensor_data(x);
  int64_t n = npu_tensor_numel(x);
  if (n_in != 1 || npu_tensor_dtype(x) != NPU_DTYPE_F32) return NPU_ERR_ARG;
  if (key == 1 && n_out == 1 && dtypes[0] == NPU_DTYPE_F32) {
    npu_dtype dt = h->fail == 2 ? NPU_DTYPE_I32 : NPU_DTYPE_F32;
    TRY(npu_tensor_new(h->ctx, dt, npu_tensor_ndim(x), npu_tensor_shape(x), &out[0]));
    float *y = npu_tensor_data(out[0]);
    for (int64_t i = 0; i < n && dt == NPU_DTYPE_F32; i++) y[i] = xd[i] * 3;
    return NPU_OK;
  }
  if (key == 2 && n_out == 2) {
    TRY(npu_tensor_new(h->ctx, dtypes[0], 0, NULL, &out[0]));
    TRY(npu_tensor_new(h->ctx, dtypes[1], 0, NULL, &out[1]));
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += xd[i];
    *(float *)npu_tensor_data(out[0]) = s;
    *(int32_t *)npu_tensor_data(out[1]) = (int32_t)n;
    return NPU_OK;
  }
  return NPU_ERR_ARG;
}

static npu_status add_host(npu_graph *g, const char *name, int64_t key, int x, int n_out,
                           const int64_t *tout, int *node) {
  npu_attr a[] = {{.name = "key", .type = NPU_ATTR_INT, .u.i = key},
                  {.name = "Tout", .type = NPU_ATTR_INTS, .u.ints = {tout, n_out}}};
  return npu_graph_add_op(g, "host_func", name, 1, &x, 2, a, node);
}

/* A TensorFlow.js model: y = Relu(Triple(x)), Triple a type the device lacks. */
static const char triple_model[] =
    "{\"format\": \"graph-model\", \"modelTopology\": {\"node\": ["
    "{\"name\": \"x\", \"op\": \"Placeholder\", \"attr\": {\"dtype\": {\"type\": \"DT_FLOAT\"}}},"
    "{\"name\": \"t\", \"op\": \"Triple\", \"input\": [\"x\"], \"attr\": {\"T\": {\"type\": \"DT_FLOAT\"}}},"
    "{\"name\": \"y\", \"op\": \"Relu\", \"input\": [\"t\"], \"attr\": {\"T\": {\"type\": \"DT_FLOAT\"}}}]}}";

static void test_mixed_import(npu_context *ctx, host *h, const npu_run_options *ro) {
  npu_graph *g = NULL;
  npu_session *s = NULL;
  npu_options *o = NULL;
  npu_tensor *xt = NULL, *out = NULL;
  /* unregistered: the import lists the type */
  CHECK(npu_graph_import_tfjs(ctx, triple_model, sizeof triple_model - 1, NULL, &g, NULL) ==
        NPU_ERR_UNSUPPORTED);
  CHECK(strstr(npu_context_errmsg(ctx), "Triple") != NULL);
  CHECK(npu_context_register_host_op(ctx, "Relu", 7) == NPU_ERR_ARG); /* the device has it */
  CHECK(npu_context_register_host_op(ctx, "", 7) == NPU_ERR_ARG);
  CHECK(npu_context_register_host_op(ctx, "Triple", 1) == NPU_OK);
  CHECK(npu_graph_import_tfjs(ctx, triple_model, sizeof triple_model - 1, NULL, &g, NULL) ==
        NPU_OK);
  int x = -1, y = -1, t = npu_graph_find_node(g, "t");
  CHECK(npu_graph_find_value(g, "x:0", &x) == NPU_OK);
  CHECK(npu_graph_find_value(g, "y:0", &y) == NPU_OK);
  CHECK(t >= 0 && strcmp(npu_graph_node_op(g, t), "host_func") == 0);
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 1, (int64_t[]){3}, (float[]){1, -2, 4}, 12,
                             &xt) == NPU_OK);
  /* full offload refuses it, naming the node */
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  CHECK(npu_session_run_with_options(s, ro, 1, &x, &xt, 1, &y, &out, 0, NULL) ==
        NPU_ERR_UNSUPPORTED);
  CHECK(strstr(npu_context_errmsg(ctx), "mix_compile_mode") != NULL);
  npu_session_release(s);
  s = NULL;
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  CHECK(npu_options_set_bool(o, "mix_compile_mode", 1) == NPU_OK);
  CHECK(npu_session_new(ctx, g, o, &s) == NPU_OK);
  h->calls = 0;
  CHECK(npu_session_run_with_options(s, ro, 1, &x, &xt, 1, &y, &out, 0, NULL) == NPU_OK);
  CHECK(h->calls == 1);
  if (out) {
    const float *v = npu_tensor_data(out);
    CHECK(v[0] == 3 && v[1] == 0 && v[2] == 12);
  }
  npu_tensor_release(out);
  npu_tensor_release(xt);
  npu_session_release(s);
  npu_options_release(o);
  npu_graph_release(g);
}

/* v = x * 3 by the host, 4 times in a while loop */
static npu_status host_body(npu_context *ctx, npu_graph *g, int v, int *v_next) {
  (void)ctx;
  int node;
  int64_t f32[] = {NPU_DTYPE_F32};
  TRY(add_host(g, "triple", 1, v, 1, f32, &node));
  *v_next = npu_graph_output(g, node, 0);
  return NPU_OK;
}

int main(void) {
  npu_context *ctx = NULL;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  host h = {.ctx = ctx};
  npu_run_options ro = {.host_op = host_op, .host_ud = &h};

  /* values: y = triple(x) + 1, and (sum, count) */
  npu_graph *g = NULL;
  npu_session *s = NULL;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t xs[] = {-1};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 1}}};
  int nx, node, one, y, tr;
  CHECK(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx) == NPU_OK);
  int x = npu_graph_output(g, nx, 0);
  int64_t f32[] = {NPU_DTYPE_F32}, pair[] = {NPU_DTYPE_F32, NPU_DTYPE_I32};
  CHECK(add_host(g, "triple", 1, x, 1, f32, &node) == NPU_OK);
  tr = npu_graph_output(g, node, 0);
  CHECK(cg_const(ctx, g, "one", NPU_DTYPE_F32, 0, NULL, 1, &one) == NPU_OK);
  CHECK(npu_graph_add_op(g, "add", "y", 2, (int[]){tr, one}, 0, NULL, &node) == NPU_OK);
  y = npu_graph_output(g, node, 0);
  CHECK(add_host(g, "stats", 2, x, 2, pair, &node) == NPU_OK);
  int fetches[] = {y, npu_graph_output(g, node, 0), npu_graph_output(g, node, 1)};
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  npu_tensor *xt = NULL, *out[3] = {0};
  const float xv[] = {1, 2, 3, 4};
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 1, (int64_t[]){4}, xv, sizeof xv, &xt) == NPU_OK);
  CHECK(npu_session_run_with_options(s, &ro, 1, &x, &xt, 3, fetches, out, 0, NULL) == NPU_OK);
  if (out[0] && out[1] && out[2]) {
    const float *yd = npu_tensor_data(out[0]);
    for (int i = 0; i < 4; i++) CHECK_NEAR(yd[i], xv[i] * 3 + 1, 0);
    CHECK_NEAR(*(const float *)npu_tensor_data(out[1]), 10, 0);
    CHECK(*(const int32_t *)npu_tensor_data(out[2]) == 4);
  }
  CHECK(h.calls == 2);
  for (int i = 0; i < 3; i++) npu_tensor_release(out[i]), out[i] = NULL;

  /* errors: the host's, a wrong dtype, no callback */
  h.fail = 1;
  CHECK(npu_session_run_with_options(s, &ro, 1, &x, &xt, 1, fetches, out, 0, NULL) ==
        NPU_ERR_CALLBACK);
  CHECK(strstr(npu_context_errmsg(ctx), "host_func 'triple': the host says no (key 1)") != NULL);
  CHECK(out[0] == NULL);
  h.fail = 2;
  CHECK(npu_session_run_with_options(s, &ro, 1, &x, &xt, 1, fetches, out, 0, NULL) ==
        NPU_ERR_DTYPE);
  CHECK(strstr(npu_context_errmsg(ctx), "output 1 is int32, Tout says float32") != NULL);
  h.fail = 0;
  CHECK(npu_session_run(s, 1, &x, &xt, 1, fetches, out, 0, NULL) == NPU_ERR_STATE);
  CHECK(strstr(npu_context_errmsg(ctx), "no host callback") != NULL);
  /* a bad node: no key, no Tout */
  npu_attr only_tout = {.name = "Tout", .type = NPU_ATTR_INTS, .u.ints = {f32, 1}};
  CHECK(npu_graph_add_op(g, "host_func", NULL, 1, &x, 1, &only_tout, &node) == NPU_ERR_ARG);
  npu_attr only_key = {.name = "key", .type = NPU_ATTR_INT, .u.i = 1};
  CHECK(npu_graph_add_op(g, "host_func", NULL, 1, &x, 1, &only_key, &node) == NPU_ERR_ARG);
  npu_session_release(s);
  npu_graph_release(g);

  /* inside a while loop: v = 1, tripled 4 times */
  cg_graph cg = {0};
  CHECK(npu_graph_new(ctx, &cg.g) == NPU_OK);
  int v0;
  CHECK(cg_const(ctx, cg.g, "v0", NPU_DTYPE_F32, 1, (int64_t[]){2}, 1, &v0) == NPU_OK);
  CHECK(cg_loop(ctx, cg.g, v0, 1, (int64_t[]){-1}, host_body, &cg.n, &cg.i, &cg.v) == NPU_OK);
  CHECK(npu_session_new(ctx, cg.g, NULL, &s) == NPU_OK);
  npu_tensor *nt = NULL;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &nt) == NPU_OK);
  *(int32_t *)npu_tensor_data(nt) = 4;
  h.calls = 0;
  CHECK(npu_session_run_with_options(s, &ro, 1, &cg.n, &nt, 1, &cg.v, out, 0, NULL) == NPU_OK);
  CHECK(h.calls == 4);
  if (out[0]) CHECK_NEAR(((const float *)npu_tensor_data(out[0]))[1], 81, 0);
  npu_tensor_release(out[0]);
  npu_tensor_release(nt);
  npu_tensor_release(xt);
  npu_session_release(s);
  npu_graph_release(cg.g);
  CHECK(npu_context_live_bytes(ctx) == 0);
  test_mixed_import(ctx, &h, &ro);
  CHECK(npu_context_live_bytes(ctx) == 0);
  npu_context_release(ctx);
  return check_summary("test_host_op");
}
