/*
 * test_exec.c — the executor from the inside: a plan compiled by npuP_compile and run by
 * npuE_run, with a step's op definition swapped for a hand-built, broken one.  Dynamic steps
 * (exec/exec.c: run_dynamic) refuse two things no op of the table does and so no API call can
 * reach: an output whose shape neither inference nor the kernel gives, and a data-shaped
 * op's kernel that never sizes an output.  Both must fail with a message naming the step,
 * leak nothing, and leave the plan runnable once the op is sound again.
 */
#include <string.h>

#include "check.h"
#include "exec/exec.h"

static int out0(npu_graph *g, int node) { return npu_graph_output(g, node, 0); }

/* A kernel that returns success without sizing its output (npuX_output). */
static npu_status unsized_run(const npuX_call *c) {
  (void)c;
  return NPU_OK;
}

static void test_dynamic_step_internal_checks(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t shape[] = {4};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 1}}};
  int nx = -1, nw = -1;
  CHECK(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx) == NPU_OK);
  int x = out0(g, nx);
  CHECK(npu_graph_add_op(g, "where", "w", 1, &x, 0, NULL, &nw) == NPU_OK);
  int w = out0(g, nw);
  npu_options *o;
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  npuP_config cfg;
  CHECK(npuP_config_init(ctx, o, &cfg) == NPU_OK);
  const float xd[] = {0, 1, 0, 2};
  npu_tensor *xt;
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 1, shape, xd, sizeof xd, &xt) == NPU_OK);
  npuE_state st = {.ctx = ctx, .graph = g};
  npuE_plan *p = NULL;
  CHECK(npuP_compile(&st, 1, &x, &xt, 1, &w, 0, NULL, &cfg, &p) == NPU_OK);
  npuE_step *step = NULL;
  for (int i = 0; p && i < p->n_steps; i++)
    if (p->steps[i].def == &npuX_op_where) step = &p->steps[i];
  CHECK(step && step->dynamic);
  if (step && step->dynamic) {
    npu_tensor *got = NULL;
    /* inference leaves the row count -1 and the op does not say its kernel sizes it */
    npu_op_def unsized_infer = npuX_op_where;
    unsized_infer.flags &= ~(unsigned)NPUX_F_DATA_SHAPE;
    step->def = &unsized_infer;
    CHECK(npuE_run(&st, p, &xt, &got) == NPU_ERR_SHAPE);
    CHECK(got == NULL);
    CHECK(strstr(npu_context_errmsg(ctx),
                 "where 'w': cannot determine the shape of output 0 ([-1,1]) from its "
                 "inputs") != NULL);
    /* the op says its kernel sizes the output, and the kernel does not */
    npu_op_def unsized_kernel = npuX_op_where;
    unsized_kernel.run = unsized_run;
    step->def = &unsized_kernel;
    CHECK(npuE_run(&st, p, &xt, &got) == NPU_ERR_INTERNAL);
    CHECK(got == NULL);
    CHECK(strstr(npu_context_errmsg(ctx), "where 'w': output 0 was never sized") != NULL);
    /* sound again: the same plan runs, [[1], [3]] */
    step->def = &npuX_op_where;
    CHECK(npuE_run(&st, p, &xt, &got) == NPU_OK);
    CHECK(got && got->ndim == 2 && got->shape[0] == 2 && got->shape[1] == 1);
    if (got && got->numel == 2) {
      const int64_t *v = got->data;
      CHECK(v[0] == 1 && v[1] == 3);
    }
    npu_tensor_release(got);
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
  test_dynamic_step_internal_checks();
  return check_summary("test_exec");
}
