/*
 * test_session.c — graphs, sessions and the executor through the C API alone: results against
 * values computed here, error statuses and messages, out-params NULL on failure, and the
 * allocation-failure sweep (fail the N-th allocation for every N: a clean NPU_ERR_NOMEM and
 * zero live bytes once everything is released).
 */
#include <math.h>
#include <string.h>

#include "npu_test.h"

typedef struct handles {
  npu_graph *g;
  npu_options *o;
  npu_session *s;
  npu_tensor *w, *x, *out[3];
} handles;

static void release_all(void *ud) {
  handles *h = ud;
  for (int i = 0; i < 3; i++) npu_tensor_release(h->out[i]);
  npu_tensor_release(h->x);
  npu_tensor_release(h->w);
  npu_session_release(h->s);
  npu_options_release(h->o);
  npu_graph_release(h->g);
  memset(h, 0, sizeof *h);
}

/* Builds y = softmax(relu(x W + 1)), a variable v initialised to W and a sum over a conv; runs
   the initializer, then y and the conv for two batch sizes. */
static npu_status scenario(npu_context *ctx, void *ud, int check_values) {
  handles *h = ud;
  TRY(npu_graph_new(ctx, &h->g));
  npu_graph *g = h->g;
  int64_t xs[] = {-1, 3}, ws[] = {3, 2};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 2}}};
  int nx, nw, nm, nadd, nrelu, nsm, none, nv, nassign, ninit, nimg, nfilt, nconv, nsum;
  TRY(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx));
  const float wd[] = {1, -1, 0.5f, 2, -2, 0.25f};
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, ws, wd, sizeof wd, &h->w));
  npu_attr wv = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = h->w};
  TRY(npu_graph_add_op(g, "const", "W", 0, NULL, 1, &wv, &nw));
  npu_attr vattrs[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                       {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {ws, 2}}};
  TRY(npu_graph_add_op(g, "variable", "v", 0, NULL, 2, vattrs, &nv));
  int as_in[] = {out0(g, nv), out0(g, nw)};
  TRY(npu_graph_add_op(g, "assign", "v/Assign", 2, as_in, 0, NULL, &nassign));
  TRY(npu_graph_add_op(g, "no_op", "init", 0, NULL, 0, NULL, &ninit));
  TRY(npu_graph_add_control(g, ninit, nassign));
  int mm_in[] = {out0(g, nx), out0(g, nv)};
  TRY(npu_graph_add_op(g, "matmul", NULL, 2, mm_in, 0, NULL, &nm));
  float one_f = 1;
  npu_tensor *one;
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 0, NULL, &one_f, sizeof one_f, &one));
  npu_attr ov = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = one};
  npu_status st = npu_graph_add_op(g, "const", NULL, 0, NULL, 1, &ov, &none);
  npu_tensor_release(one);
  TRY(st);
  int add_in[] = {out0(g, nm), out0(g, none)};
  TRY(npu_graph_add_op(g, "add", NULL, 2, add_in, 0, NULL, &nadd));
  int r_in[] = {out0(g, nadd)};
  TRY(npu_graph_add_op(g, "relu", NULL, 1, r_in, 0, NULL, &nrelu));
  int s_in[] = {out0(g, nrelu)};
  TRY(npu_graph_add_op(g, "softmax", "y", 1, s_in, 0, NULL, &nsm));
  int64_t is[] = {-1, 5, 5, 2};
  npu_attr iph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                    {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {is, 4}}};
  TRY(npu_graph_add_op(g, "placeholder", "img", 0, NULL, 2, iph, &nimg));
  npu_tensor *f;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 4, (int64_t[]){3, 3, 2, 4}, &f));
  for (int i = 0; i < 72; i++) ((float *)npu_tensor_data(f))[i] = 1;
  npu_attr fv = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = f};
  st = npu_graph_add_op(g, "const", "filter", 0, NULL, 1, &fv, &nfilt);
  npu_tensor_release(f);
  TRY(st);
  int64_t strides[] = {1, 1, 1, 1};
  npu_attr cattrs[] = {{.name = "strides", .type = NPU_ATTR_INTS, .u.ints = {strides, 4}},
                       {.name = "padding", .type = NPU_ATTR_STRING, .u.s = "SAME"}};
  int c_in[] = {out0(g, nimg), out0(g, nfilt)};
  TRY(npu_graph_add_op(g, "conv2d", NULL, 2, c_in, 2, cattrs, &nconv));
  int sum_in[] = {out0(g, nconv)};
  TRY(npu_graph_add_op(g, "reduce_sum", NULL, 1, sum_in, 0, NULL, &nsum));

  TRY(npu_options_new(ctx, &h->o));
  TRY(npu_options_set_int(h->o, "graph_run_mode", 0));
  /* online inference defaults to force_fp16; the values below are checked in float32 */
  TRY(npu_options_set_string(h->o, "precision_mode", "must_keep_origin_dtype"));
  TRY(npu_session_new(ctx, g, h->o, &h->s));
  TRY(npu_session_run(h->s, 0, NULL, NULL, 0, NULL, NULL, 1, &ninit));

  for (int batch = 1; batch <= 2; batch++) {
    for (int k = 0; k < 3; k++) {
      npu_tensor_release(h->out[k]);
      h->out[k] = NULL;
    }
    npu_tensor_release(h->x);
    h->x = NULL;
    TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, (int64_t[]){batch, 3}, &h->x));
    float *xd = npu_tensor_data(h->x);
    for (int i = 0; i < batch * 3; i++) xd[i] = (float)(i + 1) * 0.5f;
    npu_tensor *img;
    TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 4, (int64_t[]){batch, 5, 5, 2}, &img));
    for (int i = 0; i < batch * 50; i++) ((float *)npu_tensor_data(img))[i] = 1;
    int feeds[] = {out0(g, nx), out0(g, nimg)};
    npu_tensor *ft[] = {h->x, img};
    int fetches[] = {out0(g, nsm), out0(g, nsum), out0(g, nv)};
    st = npu_session_run(h->s, 2, feeds, ft, 3, fetches, h->out, 0, NULL);
    npu_tensor_release(img);
    if (st) {
      for (int k = 0; k < 3; k++) CHECK(h->out[k] == NULL);
      return st;
    }
    if (check_values) {
      const float *y = npu_tensor_data(h->out[0]);
      for (int r = 0; r < batch; r++) {
        float z[2];
        for (int j = 0; j < 2; j++) {
          float acc = 1;
          for (int k = 0; k < 3; k++) acc += xd[r * 3 + k] * wd[k * 2 + j];
          z[j] = acc > 0 ? acc : 0;
        }
        float m = z[0] > z[1] ? z[0] : z[1];
        float e0 = expf(z[0] - m), e1 = expf(z[1] - m);
        CHECK_NEAR(y[r * 2], e0 / (e0 + e1), 1e-6);
        CHECK_NEAR(y[r * 2 + 1], e1 / (e0 + e1), 1e-6);
      }
      /* all-ones 3x3x2->4 conv, SAME, on all-ones 5x5x2: interior 18, edges 12, corners 8 */
      double want = batch * 4 * (9 * 18.0 + 12 * 12.0 + 4 * 8.0);
      CHECK_NEAR(((const float *)npu_tensor_data(h->out[1]))[0], want, 1e-6);
      CHECK(npu_tensor_ndim(h->out[2]) == 2);
    }
  }
  CHECK_EQ_I64(npu_session_n_plans(h->s), 3);
  return NPU_OK;
}

static void test_scenario_values_and_sweep(void) {
  handles h = {0};
  scenario_values_and_sweep(&(checked_scenario){
      .play = scenario, .release = release_all, .ud = &h, .min_failures = 20});
}

static void test_errors(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t s23[] = {2, 3}, s45[] = {4, 5};
  npu_attr a[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {s23, 2}}};
  npu_attr b[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                  {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {s45, 2}}};
  int na, nb, nm = 123;
  CHECK(npu_graph_add_op(g, "placeholder", "a", 0, NULL, 2, a, &na) == NPU_OK);
  CHECK(npu_graph_add_op(g, "placeholder", "b", 0, NULL, 2, b, &nb) == NPU_OK);
  int in[] = {out0(g, na), out0(g, nb)};
  CHECK(npu_graph_add_op(g, "matmul", NULL, 2, in, 0, NULL, &nm) == NPU_ERR_SHAPE);
  CHECK(nm == -1);
  CHECK(strstr(npu_context_errmsg(ctx), "[2,3]") && strstr(npu_context_errmsg(ctx), "[4,5]"));
  CHECK(npu_graph_n_nodes(g) == 2);
  CHECK(npu_graph_add_op(g, "no_such_op", NULL, 0, NULL, 0, NULL, &nm) == NPU_ERR_NOT_FOUND);
  int bad[] = {99};
  CHECK(npu_graph_add_op(g, "relu", NULL, 1, bad, 0, NULL, &nm) == NPU_ERR_ARG);
  int v;
  CHECK(npu_graph_find_value(g, "a:0", &v) == NPU_OK && v == out0(g, na));
  CHECK(npu_graph_find_value(g, "a:1", &v) == NPU_ERR_NOT_FOUND && v == -1);

  int nr;
  int rin[] = {out0(g, na)};
  CHECK(npu_graph_add_op(g, "relu", NULL, 1, rin, 0, NULL, &nr) == NPU_OK);
  npu_session *s;
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  npu_tensor *out = (npu_tensor *)1;
  int fetch = out0(g, nr);
  CHECK(npu_session_run(s, 0, NULL, NULL, 1, &fetch, &out, 0, NULL) == NPU_ERR_ARG);
  CHECK(out == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "placeholder 'a'") != NULL);
  npu_session_close(s);
  CHECK(npu_session_run(s, 0, NULL, NULL, 1, &fetch, &out, 0, NULL) == NPU_ERR_STATE);
  npu_session_release(s);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

int main(void) {
  test_scenario_values_and_sweep();
  test_errors();
  return check_summary("test_session");
}
