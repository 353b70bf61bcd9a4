/*
 * test_exec.c — the executor from the inside: a plan compiled by npuP_compile and run by
 * npuE_run, with a step's op definition swapped for a hand-built, broken one.  Dynamic steps
 * (exec/exec.c: run_dynamic) refuse two things no op of the table does and so no API call can
 * reach: an output whose shape neither inference nor the kernel gives, and a data-shaped
 * op's kernel that never sizes an output.  Both must fail with a message naming the step,
 * leak nothing, and leave the plan runnable once the op is sound again.  And a while loop's
 * shape-invariant check, decided at compile time (npuE_control.shapes_fixed): skipped only
 * where the body's results are sure to fit (a fixed result that does not fit is refused when
 * the while node is added; a dynamic body's failing check: spec/control_flow_spec.lua).
 * And op_wait_timeout: a get_next that waits longer for its element fails with NPU_ERR_TIMEOUT
 * naming the node (exec/iterators.c), the iterator staying usable.
 */
#include <string.h>

#include "check.h"
#include "exec/exec.h"

static int out0(npu_graph *g, int node) { return npu_graph_output(g, node, 0); }

/* A const int32 scalar node (the graph holds its tensor: one tensor a const). */
static int int_const(npu_context *ctx, npu_graph *g, const char *name, int32_t v) {
  npu_tensor *t = NULL;
  int node = -1;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &t) == NPU_OK);
  if (!t) return -1;
  *(int32_t *)npu_tensor_data(t) = v;
  npu_attr ca = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = t};
  CHECK(npu_graph_add_op(g, "const", name, 0, NULL, 1, &ca, &node) == NPU_OK);
  npu_tensor_release(t);
  return node < 0 ? -1 : out0(g, node);
}

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

/* (i, v) = (0, x), x of shape [3]; while i < 2: (i + 1, body(v)), v's invariant `inv` (ndim
   1).  Compiles the plan fetching v; *p NULL on failure. */
static void compile_loop(npu_context *ctx, npuP_config *cfg, npu_graph **gp, npu_tensor **xt,
                         int64_t inv, const char *body, npuE_plan **p, int *fetch) {
  npu_graph *g;
  *p = NULL;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  *gp = g;
  int64_t s3[] = {3};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {s3, 1}}};
  int node = -1, loop = 0, wnode = -1;
  CHECK(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &node) == NPU_OK);
  int x = out0(g, node);
  int zero = int_const(ctx, g, "zero", 0);
  CHECK(npu_graph_region_begin(g, &loop) == NPU_OK);
  npu_attr vi[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I32},
                   {.name = "index", .type = NPU_ATTR_INT, .u.i = 0},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {NULL, 0}}};
  npu_attr vv[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "index", .type = NPU_ATTR_INT, .u.i = 1},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {&inv, 1}}};
  CHECK(npu_graph_add_op(g, "loop_var", "i", 0, NULL, 3, vi, &node) == NPU_OK);
  int i = out0(g, node);
  CHECK(npu_graph_add_op(g, "loop_var", "v", 0, NULL, 3, vv, &node) == NPU_OK);
  int v = out0(g, node);
  int i2[] = {i, int_const(ctx, g, "two", 2)}, i1_in[] = {i, int_const(ctx, g, "one", 1)};
  int vs[] = {v, v};
  npu_attr axis = {.name = "axis", .type = NPU_ATTR_INT, .u.i = 0};
  CHECK(npu_graph_add_op(g, "less", NULL, 2, i2, 0, NULL, &node) == NPU_OK);
  int pred = out0(g, node);
  CHECK(npu_graph_add_op(g, "add", NULL, 2, i1_in, 0, NULL, &node) == NPU_OK);
  int i1 = out0(g, node);
  CHECK(npu_graph_add_op(g, body, NULL, 2, vs, !strcmp(body, "concat"), &axis, &node) == NPU_OK);
  int v2 = out0(g, node);
  CHECK(npu_graph_region_end(g, loop) == NPU_OK);
  npu_attr wa = {.name = "region", .type = NPU_ATTR_INT, .u.i = loop};
  int win[] = {zero, x, pred, i1, v2};
  CHECK(npu_graph_add_op(g, "while", "loop", 5, win, 1, &wa, &wnode) == NPU_OK);
  *fetch = npu_graph_output(g, wnode, 1);
  const float xd[] = {1, 2, 3};
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 1, s3, xd, sizeof xd, xt) == NPU_OK);
  npuE_state st = {.ctx = ctx, .graph = g};
  CHECK(npuP_compile(&st, 1, &x, xt, 1, fetch, 0, NULL, cfg, p) == NPU_OK);
}

static const npuE_control *while_of(const npuE_plan *p) {
  for (int k = 0; p && k < p->n_steps; k++)
    if (p->steps[k].def->kind == NPUX_KIND_WHILE) return p->steps[k].control;
  return NULL;
}

static void test_while_shape_check_decided_at_compile_time(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_options *o;
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  npuP_config cfg;
  CHECK(npuP_config_init(ctx, o, &cfg) == NPU_OK);
  static const struct {
    int64_t inv;
    const char *body;
    bool fixed;
  } cases[] = {
      {3, "add", true},      /* [3] + [3] is [3] every iteration: no check */
      {-1, "add", false},    /* v of unknown length: the body is dynamic, checked */
      {-1, "concat", false}, /* v grows: dynamic, checked (and fits) */
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    npu_graph *g = NULL;
    npu_tensor *xt = NULL, *got = NULL;
    npuE_plan *p = NULL;
    int fetch;
    compile_loop(ctx, &cfg, &g, &xt, cases[k].inv, cases[k].body, &p, &fetch);
    const npuE_control *c = while_of(p);
    CHECK(c && c->shapes_fixed == cases[k].fixed);
    if (c) {
      npuE_state st = {.ctx = ctx, .graph = g};
      npu_status s = npuE_run(&st, p, &xt, &got);
      if (k == 0) { /* doubled twice */
        CHECK(s == NPU_OK && got && got->numel == 3);
        if (!s && got) CHECK(((const float *)got->data)[2] == 12);
      } else {
        CHECK(s == NPU_OK && got && got->numel == (k == 1 ? 3 : 12));
      }
    }
    npu_tensor_release(got);
    npuP_free(ctx, p);
    npu_tensor_release(xt);
    npu_graph_release(g);
  }
  npuP_config_free(ctx, &cfg);
  npu_options_release(o);
  CHECK(npu_context_live_bytes(ctx) == 0);
  npu_context_release(ctx);
}

/* A shuffle over 2^20 rows fills its buffer (2^20 rows copied) before the first element: more
   than a millisecond on any machine, so a 1 ms wait (op_wait_timeout, in ms here) times out. */
static void test_get_next_wait_timeout(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t n = 1 << 20;
  npu_tensor *rows = NULL;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_I64, 1, &n, &rows) == NPU_OK);
  int64_t *r = rows ? npu_tensor_data(rows) : NULL;
  for (int64_t i = 0; r && i < n; i++) r[i] = i;
  npu_dataset *src = NULL, *ds = NULL;
  CHECK(npu_dataset_from_tensors(ctx, 1, &rows, &src) == NPU_OK);
  CHECK(npu_dataset_shuffle(src, n, 7, 0, &ds) == NPU_OK);
  int id = -1, node = -1;
  CHECK(npu_graph_add_dataset(g, ds, &id) == NPU_OK);
  npu_attr a = {.name = "dataset", .type = NPU_ATTR_INT, .u.i = id};
  CHECK(npu_graph_add_op(g, "iterator_get_next", "batches", 0, NULL, 1, &a, &node) == NPU_OK);
  npuE_iterators its = {.wait_ms = 1};
  npu_tensor *out = (npu_tensor *)1;
  CHECK(npuE_iterators_next(ctx, &its, g, node, &out) == NPU_ERR_TIMEOUT);
  CHECK(out == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "no element within op_wait_timeout") != NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "(iterator_get_next 'batches')") != NULL);
  its.wait_ms = 0; /* no limit: the element comes, nothing was lost */
  CHECK(npuE_iterators_next(ctx, &its, g, node, &out) == NPU_OK);
  CHECK(out && out->ndim == 0 && *(const int64_t *)out->data >= 0 &&
        *(const int64_t *)out->data < n);
  npu_tensor_release(out);
  npuE_iterators_free(ctx, &its);
  npu_dataset_release(ds);
  npu_dataset_release(src);
  npu_tensor_release(rows);
  npu_graph_release(g);
  CHECK(npu_context_live_bytes(ctx) == 0);
  npu_context_release(ctx);
}

int main(void) {
  test_dynamic_step_internal_checks();
  test_while_shape_check_decided_at_compile_time();
  test_get_next_wait_timeout();
  return check_summary("test_exec");
}
