/*
 * test_loop_fusion.c — the fusion passes on steps nested in a while loop and a cond branch,
 * through the C API alone (compile/fusion.c, npuP_fuse's walk over blocks): the loop's body
 * tanh(bias_add(matmul(v, w), b)) and the then branch's relu(bias_add(conv2d(x, f), c)) are one
 * fused step each, as explain's nested steps say, with the bits of the same plan with every
 * pass off; and the allocation-failure sweep over building, compiling (fusion of the nested
 * blocks included) and running it: a clean NPU_ERR_NOMEM and no byte left behind for every
 * failing allocation.  spec/fusion_nested_spec.lua checks each pass in Lua.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npu_test.h"

enum { HW = 5, C = 4, N = 3, K = 8 };

typedef struct handles {
  npu_graph *g;
  npu_options *o;
  npu_session *s;
  npu_tensor *x, *h, *p, *out[2];
  char *explain;
  npu_context *ctx;
  int xv, hv, pv, fetch[2];
} handles;

static void release_all(handles *h) {
  for (int i = 0; i < 2; i++) npu_tensor_release(h->out[i]);
  npu_tensor_release(h->x);
  npu_tensor_release(h->h);
  npu_tensor_release(h->p);
  npu_session_release(h->s);
  npu_options_release(h->o);
  npu_graph_release(h->g);
  if (h->explain) npu_free(h->ctx, h->explain);
  npu_context *ctx = h->ctx;
  *h = (handles){.ctx = ctx};
}

static npu_status normal_const(handles *h, const char *name, int ndim, const int64_t *shape,
                               uint64_t seed, int *out) {
  npu_tensor *t;
  TRY(npu_tensor_random_normal(h->ctx, NPU_DTYPE_F32, ndim, shape, 0, 0.5, seed, &t));
  return graph_const(h->g, name, t, out);
}

/* (i, v) = (0, h), while i < 3: (i + 1, tanh(bias_add(matmul(v, w), b))) ("cell");
   p ? relu(bias_add(conv2d(x, f), c)) ("then_conv") : x.  Fetches: the loop's v, the cond's. */
static npu_status build(handles *h) {
  TRY(npu_graph_new(h->ctx, &h->g));
  npu_graph *g = h->g;
  int64_t xs[] = {1, HW, HW, C}, fs[] = {3, 3, C, C}, hs[] = {2, K}, ws[] = {K, K};
  int node, w, b, f, c, zero, n, one;
  TRY(graph_placeholder(g, "x", NPU_DTYPE_F32, 4, xs, &h->xv));
  TRY(graph_placeholder(g, "h", NPU_DTYPE_F32, 2, hs, &h->hv));
  TRY(graph_placeholder(g, "p", NPU_DTYPE_BOOL, 0, NULL, &h->pv));
  TRY(normal_const(h, "w", 2, ws, 3, &w));
  TRY(normal_const(h, "b", 1, ws, 4, &b));
  TRY(normal_const(h, "f", 4, fs, 5, &f));
  TRY(normal_const(h, "c", 1, xs + 3, 6, &c));
  TRY(scalar_i32(h->ctx, g, "zero", 0, &zero));
  TRY(scalar_i32(h->ctx, g, "n", N, &n));
  int loop, i, v, pred, i1, mm, ba, th;
  TRY(npu_graph_region_begin(g, &loop));
  TRY(graph_loop_var(g, "i", NPU_DTYPE_I32, 0, 0, NULL, &i));
  TRY(graph_loop_var(g, "v", NPU_DTYPE_F32, 1, 2, hs, &v));
  TRY(graph_op(g, "less", NULL, 2, (int[]){i, n}, &pred));
  TRY(scalar_i32(h->ctx, g, "one", 1, &one));
  TRY(graph_op(g, "add", NULL, 2, (int[]){i, one}, &i1));
  TRY(graph_op(g, "matmul", "cell", 2, (int[]){v, w}, &mm));
  TRY(graph_op(g, "bias_add", NULL, 2, (int[]){mm, b}, &ba));
  TRY(graph_op(g, "tanh", NULL, 1, (int[]){ba}, &th));
  TRY(npu_graph_region_end(g, loop));
  npu_attr wa[] = {{.name = "region", .type = NPU_ATTR_INT, .u.i = loop}};
  TRY(npu_graph_add_op(g, "while", "loop", 5, (int[]){zero, h->hv, pred, i1, th}, 1, wa, &node));
  h->fetch[0] = npu_graph_output(g, node, 1);
  int then_r, else_r, cv, cb, y;
  TRY(npu_graph_region_begin(g, &then_r));
  int64_t strides[] = {1, 1, 1, 1};
  npu_attr ca[] = {{.name = "strides", .type = NPU_ATTR_INTS, .u.ints = {strides, 4}},
                   {.name = "padding", .type = NPU_ATTR_STRING, .u.s = "SAME"}};
  TRY(npu_graph_add_op(g, "conv2d", "then_conv", 2, (int[]){h->xv, f}, 2, ca, &node));
  cv = out0(g, node);
  TRY(graph_op(g, "bias_add", NULL, 2, (int[]){cv, c}, &cb));
  TRY(graph_op(g, "relu", NULL, 1, (int[]){cb}, &y));
  TRY(npu_graph_region_end(g, then_r));
  TRY(npu_graph_region_begin(g, &else_r));
  TRY(npu_graph_region_end(g, else_r));
  npu_attr cr[] = {{.name = "then_region", .type = NPU_ATTR_INT, .u.i = then_r},
                   {.name = "else_region", .type = NPU_ATTR_INT, .u.i = else_r}};
  TRY(npu_graph_add_op(g, "cond", "pick", 3, (int[]){h->pv, y, h->xv}, 2, cr, &node));
  h->fetch[1] = out0(g, node);
  return NPU_OK;
}

static const char *off_file; /* a switch file turning every pass off */

static npu_status open_session(handles *h, bool fused) {
  TRY(npu_options_new(h->ctx, &h->o));
  TRY(npu_options_set_string(h->o, "precision_mode", "must_keep_origin_dtype"));
  TRY(npu_options_set_int(h->o, "export_compile_stat", 0));
  if (!fused) TRY(npu_options_set_string(h->o, "fusion_switch_file", off_file));
  return npu_session_new(h->ctx, h->g, h->o, &h->s);
}

static npu_status run_and_explain(handles *h) {
  int64_t xs[] = {1, HW, HW, C}, hs[] = {2, K};
  TRY(npu_tensor_random_normal(h->ctx, NPU_DTYPE_F32, 4, xs, 0, 1, 9, &h->x));
  TRY(npu_tensor_random_normal(h->ctx, NPU_DTYPE_F32, 2, hs, 0, 1, 10, &h->h));
  uint8_t yes = 1;
  TRY(npu_tensor_from_data(h->ctx, NPU_DTYPE_BOOL, 0, NULL, &yes, 1, &h->p));
  int feeds[] = {h->xv, h->hv, h->pv};
  npu_tensor *ft[] = {h->x, h->h, h->p};
  TRY(npu_session_run(h->s, 3, feeds, ft, 2, h->fetch, h->out, 0, NULL));
  return npu_session_explain(h->s, 3, feeds, ft, 2, h->fetch, 0, NULL, &h->explain);
}

static npu_status scenario(npu_context *ctx, void *ud) {
  handles *h = ud;
  (void)ctx;
  TRY(build(h));
  TRY(open_session(h, true));
  return run_and_explain(h);
}

/* How many times `needle` occurs in text. */
static int count(const char *text, const char *needle) {
  int n = 0;
  for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) n++;
  return n;
}

static void test_fused_in_loop_and_branch(npu_context *ctx) {
  handles on = {.ctx = ctx}, off = {.ctx = ctx};
  CHECK(build(&on) == NPU_OK && open_session(&on, true) == NPU_OK &&
        run_and_explain(&on) == NPU_OK);
  CHECK(build(&off) == NPU_OK && open_session(&off, false) == NPU_OK &&
        run_and_explain(&off) == NPU_OK);
  if (on.explain && off.explain) {
    CHECK(count(on.explain, "\"op\":\"fused_matmul\"") == 1);
    CHECK(count(on.explain, "\"op\":\"fused_conv2d\"") == 1);
    CHECK(count(on.explain, "\"pass\":\"MatMulBiasAddFusionPass\"") == 1);
    CHECK(count(on.explain, "\"pass\":\"ConvBiasAddFusionPass\"") == 1);
    CHECK(count(off.explain, "\"op\":\"fused_") == 0);
    CHECK(count(off.explain, "\"op\":\"tanh\"") == 1);
  }
  for (int i = 0; i < 2; i++) {
    const npu_tensor *a = on.out[i], *b = off.out[i];
    bool same = a && b && npu_tensor_numel(a) == npu_tensor_numel(b) &&
                memcmp(npu_tensor_data(a), npu_tensor_data(b),
                       (size_t)npu_tensor_numel(a) * sizeof(float)) == 0;
    CHECK(same);
    if (!same) fprintf(stderr, "test_loop_fusion: fetch %d differs from the unfused plan's\n", i);
  }
  release_all(&on);
  release_all(&off);
}

static void after(npu_context *ctx, npu_status st, void *ud) {
  (void)ctx, (void)st;
  release_all(ud);
}

static void test_allocation_failure_sweep(npu_context *ctx) {
  handles h = {.ctx = ctx};
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.run = scenario, .after = after, .ud = &h, .what = "loop fusion"});
  CHECK(n_failures > 100);
}

int main(void) {
  char path[] = "/tmp/npu_loop_fusion_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    perror("mkstemp");
    return 1;
  }
  FILE *fp = fdopen(fd, "w");
  if (!fp) {
    perror("fdopen");
    return 1;
  }
  fputs("{\"Switch\":{\"GraphFusion\":{\"ALL\":\"off\"},\"UBFusion\":{\"ALL\":\"off\"}}}\n", fp);
  fclose(fp);
  off_file = path;
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  test_fused_in_loop_and_branch(ctx);
  test_allocation_failure_sweep(ctx);
  npu_context_release(ctx);
  remove(path);
  return check_summary("test_loop_fusion");
}
