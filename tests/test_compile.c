/*
 * test_compile.c — the compiler from the inside: plans built by npuP_compile directly, then
 * broken on purpose to show that the plan verifier (compile/verify.c) names what is wrong and
 * after which pass.  Uses the internal headers: what is under test is internal.
 */
#include <string.h>

#include "check.h"
#include "compile/passes.h"
#include "exec/exec.h" /* npuE_state: the session state npuP_compile reads */
#include "options/options_int.h"

static int out0(npu_graph *g, int node) { return npu_graph_output(g, node, 0); }

/* y = neg(relu(x)) with x a fed [2] placeholder. */
static npu_status build(npu_context *ctx, npu_graph **out, int *x, int *y) {
  npu_graph *g;
  npu_status s = npu_graph_new(ctx, &g);
  if (s) return s;
  int64_t shape[] = {2};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 1}}};
  int nx, nr, nn;
  if (!s) s = npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx);
  int rin = out0(g, nx);
  if (!s) s = npu_graph_add_op(g, "relu", "r", 1, &rin, 0, NULL, &nr);
  int nin = out0(g, nr);
  if (!s) s = npu_graph_add_op(g, "neg", "n", 1, &nin, 0, NULL, &nn);
  if (s) {
    npu_graph_release(g);
    return s;
  }
  *out = g;
  *x = out0(g, nx);
  *y = out0(g, nn);
  return NPU_OK;
}

static void test_verifier_names_the_break(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g = NULL;
  int x, y;
  CHECK(build(ctx, &g, &x, &y) == NPU_OK);
  npu_options *o;
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  npuP_config cfg;
  CHECK(npuP_config_init(ctx, o, &cfg) == NPU_OK);
  cfg.verify = true;
  npuP_fusion_config_free(ctx, cfg.fusion); /* fusion off: the breaks below need both steps */
  cfg.fusion = NULL;
  int64_t shape[] = {2};
  const float xd[] = {-1, 2};
  npu_tensor *xt;
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 1, shape, xd, sizeof xd, &xt) == NPU_OK);
  npuE_state st = {.ctx = ctx, .graph = g};
  npuE_plan *p = NULL;
  CHECK(npuP_compile(&st, 1, &x, &xt, 1, &y, 0, NULL, &cfg, &p) == NPU_OK);
  CHECK(p && p->n_steps == 2);
  if (p && p->n_steps == 2) {
    npuP_build b = {.ctx = ctx, .graph = g, .plan = p, .cfg = &cfg};
    CHECK(npuP_verify(&b, "test") == NPU_OK);
    /* steps swapped: neg reads relu's output before relu runs */
    npuE_step tmp = p->steps[0];
    p->steps[0] = p->steps[1];
    p->steps[1] = tmp;
    CHECK(npuP_verify(&b, "a pass") == NPU_ERR_INTERNAL);
    const char *m = npu_context_errmsg(ctx);
    CHECK(strstr(m, "invalid plan after a pass") != NULL);
    CHECK(strstr(m, "step 0 (neg 'n')") != NULL);
    CHECK(strstr(m, "'r:0'") != NULL && strstr(m, "read before anything writes it") != NULL);
    p->steps[1] = p->steps[0];
    p->steps[0] = tmp;
    /* both steps write the same value */
    int saved = p->steps[1].out[0];
    p->steps[1].out[0] = p->steps[0].out[0];
    CHECK(npuP_verify(&b, "x") == NPU_ERR_INTERNAL);
    CHECK(strstr(npu_context_errmsg(ctx), "written by two steps") != NULL);
    p->steps[1].out[0] = saved;
    /* nothing writes the fetch */
    p->n_steps = 1;
    CHECK(npuP_verify(&b, "x") == NPU_ERR_INTERNAL);
    CHECK(strstr(npu_context_errmsg(ctx), "fetched but never written") != NULL);
    p->n_steps = 2;
    CHECK(npuP_verify(&b, "x") == NPU_OK);
  }
  npuP_free(ctx, p);
  npu_tensor_release(xt);
  npuP_config_free(ctx, &cfg);
  npu_options_release(o);
  npu_graph_release(g);
  CHECK(npu_context_live_bytes(ctx) == 0);
  npu_context_release(ctx);
}

int main(void) {
  test_verifier_names_the_break();
  return check_summary("test_compile");
}
