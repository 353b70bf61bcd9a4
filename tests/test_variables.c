/*
 * test_variables.c — variables are the C graph's (npu.h, "variables"): a host that never loads
 * Lua builds a graph with variables, lists them, runs their initializer and a training step;
 * a graph whose variable and "<name>/Assign" nodes come one by one (as an importer adds them)
 * lists the same; bad ids fail cleanly leaving the graph as it was; the op table read through
 * npu_op_get_info; the allocation-failure sweep over npu_graph_add_variable and
 * npu_graph_add_variables_initializer; a variable's bfloat16 copy made once per write, with
 * its sweeps.
 */
#include <math.h>
#include <string.h>

#include "npu_test.h"

static npu_status const_f32(npu_context *ctx, npu_graph *g, const char *name, int ndim,
                            const int64_t *shape, const float *v, int *value) {
  npu_tensor *t;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, ndim, shape, v, (size_t)n * sizeof *v, &t));
  return graph_const(g, name, t, value);
}

static npu_status binary(npu_graph *g, const char *op, int a, int b, int *value) {
  int in[2] = {a, b};
  return graph_op(g, op, NULL, 2, in, value);
}

/* w = [1, 2, 3] (trainable), b = 0.5 (trainable), step = 0 (int64: not trainable);
   loss = sum(w * w) + b; train = assign(w, w - 0.1 * dloss/dw). */
typedef struct model {
  npu_graph *g;
  int w, b, step, loss, train, init;
} model;

static npu_status build(npu_context *ctx, model *m) {
  TRY(npu_graph_new(ctx, &m->g));
  npu_graph *g = m->g;
  static const float w0[] = {1, 2, 3}, b0[] = {0.5f}, lr[] = {0.1f};
  static const int64_t three[] = {3};
  int init_w, init_b, init_step, lr_v, sq, sum, dw, scaled, next;
  TRY(const_f32(ctx, g, "w_init", 1, three, w0, &init_w));
  TRY(const_f32(ctx, g, "b_init", 0, NULL, b0, &init_b));
  npu_tensor *zero;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_I64, 0, NULL, &zero));
  TRY(graph_const(g, "step_init", zero, &init_step));
  TRY(npu_graph_add_variable(g, "w", init_w, &m->w));
  TRY(npu_graph_add_variable(g, "b", init_b, &m->b));
  TRY(npu_graph_add_variable(g, NULL, init_step, &m->step));
  TRY(binary(g, "mul", m->w, m->w, &sq));
  TRY(graph_op(g, "reduce_sum", NULL, 1, &sq, &sum)); /* no axis: every axis */
  TRY(binary(g, "add", sum, m->b, &m->loss));
  TRY(npu_graph_gradients(g, 1, &m->loss, NULL, 1, &m->w, &dw));
  TRY(const_f32(ctx, g, "lr", 0, NULL, lr, &lr_v));
  TRY(binary(g, "mul", lr_v, dw, &scaled));
  TRY(binary(g, "sub", m->w, scaled, &next));
  TRY(binary(g, "assign", m->w, next, &m->train));
  return npu_graph_add_variables_initializer(g, NULL, &m->init);
}

static void test_build_list_init_train(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  model m = {0};
  npu_status st = build(ctx, &m);
  CHECK(st == NPU_OK);
  if (st) {
    fprintf(stderr, "build: %s\n", npu_context_errmsg(ctx));
    npu_graph_release(m.g);
    npu_context_release(ctx);
    return;
  }
  npu_graph *g = m.g;
  /* the list, in creation order, with names, dtypes, shapes, initializers, trainable flags */
  CHECK(npu_graph_n_variables(g) == 3);
  static const char *const names[] = {"w", "b", "Variable"};
  static const int trainable[] = {1, 1, 0};
  int values[] = {m.w, m.b, m.step};
  for (int i = 0; i < 3; i++) {
    npu_variable_info vi;
    CHECK(npu_graph_variable_info(g, i, &vi) == NPU_OK);
    CHECK(strcmp(vi.name, names[i]) == 0);
    CHECK(vi.value == values[i]);
    CHECK(vi.node == npu_graph_value_node(g, values[i]));
    CHECK(npu_graph_find_variable(g, vi.node) == i);
    CHECK(vi.trainable == trainable[i]);
    CHECK(vi.initializer >= 0);
    char want[32];
    snprintf(want, sizeof want, "%s/Assign", names[i]);
    CHECK(strcmp(npu_graph_node_name(g, vi.initializer), want) == 0);
    CHECK(strcmp(npu_graph_node_op(g, vi.initializer), "assign") == 0);
  }
  npu_variable_info wi;
  CHECK(npu_graph_variable_info(g, 0, &wi) == NPU_OK);
  CHECK(wi.dtype == NPU_DTYPE_F32 && wi.ndim == 1 && wi.shape[0] == 3);
  CHECK(npu_graph_find_variable(g, npu_graph_value_node(g, m.loss)) == -1);
  /* the training step's assign is no initializer: the one of w stays "w/Assign" */
  CHECK(npu_graph_n_inputs(g, m.init) == 0);
  /* a session: initialize, read, one step, read again */
  npu_session *s = NULL;
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  npu_tensor *out[2] = {NULL, NULL};
  CHECK(npu_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &m.init) == NPU_OK);
  int fetch[2] = {m.w, m.loss};
  CHECK(npu_session_run(s, 0, NULL, NULL, 2, fetch, out, 0, NULL) == NPU_OK);
  if (out[0] && out[1]) {
    const float *w = npu_tensor_data(out[0]);
    CHECK(w[0] == 1.0f && w[1] == 2.0f && w[2] == 3.0f);
    CHECK_NEAR(npu_tensor_get(out[1], 0), 14.5, 1e-6);
  }
  npu_tensor_release(out[0]);
  npu_tensor_release(out[1]);
  out[0] = out[1] = NULL;
  CHECK(npu_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1,
                        (int[]){npu_graph_value_node(g, m.train)}) == NPU_OK);
  CHECK(npu_session_run(s, 0, NULL, NULL, 1, &m.w, out, 0, NULL) == NPU_OK);
  if (out[0]) { /* w - 0.1 * 2w = 0.8 w */
    CHECK_NEAR(npu_tensor_get(out[0], 0), 0.8, 1e-6);
    CHECK_NEAR(npu_tensor_get(out[0], 2), 2.4, 1e-6);
  }
  npu_tensor_release(out[0]);
  /* trainable is the graph's to change */
  CHECK(npu_graph_set_variable_trainable(g, 1, 0) == NPU_OK);
  npu_variable_info bi;
  CHECK(npu_graph_variable_info(g, 1, &bi) == NPU_OK && bi.trainable == 0);
  npu_session_release(s);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* Nodes added one by one, as the importers add a GraphDef's VariableV2 and Assign nodes: the
   variable is registered, "<name>/Assign" is its initializer, another assign is not. */
static void test_nodes_one_by_one(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t two[] = {2};
  npu_attr attrs[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                      {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {two, 1}}};
  int var, v, init, other, first;
  CHECK(npu_graph_add_op(g, "variable", "v", 0, NULL, 2, attrs, &var) == NPU_OK);
  v = npu_graph_output(g, var, 0);
  CHECK(npu_graph_n_variables(g) == 1);
  npu_variable_info vi;
  CHECK(npu_graph_variable_info(g, 0, &vi) == NPU_OK && vi.initializer == -1 && vi.trainable);
  CHECK(const_f32(ctx, g, "init", 1, two, (const float[]){1, 2}, &init) == NPU_OK);
  CHECK(npu_graph_add_op(g, "assign", "update", 2, (int[]){v, init}, 0, NULL, &other) == NPU_OK);
  CHECK(npu_graph_variable_info(g, 0, &vi) == NPU_OK && vi.initializer == -1);
  CHECK(npu_graph_add_op(g, "assign", "v/Assign", 2, (int[]){v, init}, 0, NULL, &first) == NPU_OK);
  CHECK(npu_graph_variable_info(g, 0, &vi) == NPU_OK && vi.initializer == first);
  /* errors: nothing changes, outs are -1 or zeroed, the message names the culprit */
  int n_nodes = npu_graph_n_nodes(g), out = 7;
  int ph_node, ph;
  npu_attr ph_attrs[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                         {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {(int64_t[]){-1}, 1}}};
  CHECK(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph_attrs, &ph_node) == NPU_OK);
  ph = npu_graph_output(g, ph_node, 0);
  n_nodes = npu_graph_n_nodes(g);
  CHECK(npu_graph_add_variable(g, "bad", ph, &out) == NPU_ERR_ARG);
  CHECK(out == -1);
  CHECK(strstr(npu_context_errmsg(ctx), "'x:0'") != NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "[-1]") != NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "npu_graph_add_variable 'bad':") != NULL);
  CHECK(npu_graph_add_variable(g, "bad", 9999, &out) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "'bad': initial value 9999 is not a value") != NULL);
  CHECK(npu_graph_add_variable(g, "bad:0", init, &out) == NPU_ERR_ARG); /* invalid name */
  CHECK(npu_graph_add_variable(NULL, "bad", init, &out) == NPU_ERR_ARG);
  CHECK(npu_graph_n_nodes(g) == n_nodes && npu_graph_n_variables(g) == 1);
  CHECK(npu_graph_find_node(g, "bad") < 0);
  CHECK(npu_graph_variable_info(g, 1, &vi) == NPU_ERR_ARG);
  CHECK(vi.node == -1 && vi.value == -1 && vi.initializer == -1 && vi.name == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "no variable 1") != NULL);
  CHECK(npu_graph_variable_info(g, -1, &vi) == NPU_ERR_ARG);
  CHECK(npu_graph_variable_info(NULL, 0, &vi) == NPU_ERR_ARG);
  CHECK(npu_graph_set_variable_trainable(g, 5, 1) == NPU_ERR_ARG);
  CHECK(npu_graph_n_variables(NULL) == 0 && npu_graph_find_variable(NULL, 0) == -1);
  /* NULL handles and out-params: NPU_ERR_ARG, the out-param named, nothing added */
  CHECK(npu_graph_add_variable(g, "bad", init, NULL) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "value_out is NULL") != NULL);
  CHECK(npu_graph_variable_info(g, 0, NULL) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "out is NULL") != NULL);
  CHECK(npu_graph_set_variable_trainable(NULL, 0, 1) == NPU_ERR_ARG);
  CHECK(npu_graph_set_variable_trainable(g, -1, 1) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "no variable -1") != NULL);
  out = 7;
  CHECK(npu_graph_add_variables_initializer(NULL, "i", &out) == NPU_ERR_ARG);
  CHECK(npu_graph_add_variables_initializer(g, "i", NULL) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "node_out is NULL") != NULL);
  CHECK(npu_graph_add_variables_initializer(g, "bad:0", &out) == NPU_ERR_ARG);
  CHECK(out == -1);
  CHECK(npu_graph_n_nodes(g) == n_nodes && npu_graph_n_variables(g) == 1);
  CHECK(npu_graph_find_variable(g, ph_node) == -1);
  /* the initializer runs "v/Assign" alone: "update" is not an initializer */
  int init_node;
  CHECK(npu_graph_add_variables_initializer(g, "my_init", &init_node) == NPU_OK);
  CHECK(strcmp(npu_graph_node_name(g, init_node), "my_init") == 0);
  npu_session *s;
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  CHECK(npu_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &init_node) == NPU_OK);
  npu_tensor *t = NULL;
  CHECK(npu_session_run(s, 0, NULL, NULL, 1, &v, &t, 0, NULL) == NPU_OK);
  if (t) CHECK(npu_tensor_get(t, 1) == 2.0);
  npu_tensor_release(t);
  npu_session_release(s);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

/* The op table as a host reads it (what the Lua binding's core.op_list is made of). */
static void test_op_info(void) {
  npu_op_info info;
  int mm = npu_op_find("matmul");
  CHECK(mm >= 0 && npu_op_find("MatMul") == mm);
  CHECK(npu_op_get_info(mm, &info) == NPU_OK);
  CHECK(strcmp(info.name, "matmul") == 0 && strcmp(info.tf_type, "MatMul") == 0);
  CHECK(info.min_inputs == 2 && info.max_inputs == 2 && info.n_outputs == 1);
  CHECK(info.kind == NPU_OP_KIND_KERNEL && strcmp(info.kind_name, "kernel") == 0);
  CHECK(info.differentiable == 1);
  CHECK(npu_op_get_info(npu_op_find("variable"), &info) == NPU_OK);
  CHECK(info.kind == NPU_OP_KIND_VARIABLE && strcmp(info.kind_name, "variable") == 0);
  CHECK(info.differentiable == 0);
  CHECK(npu_op_get_info(npu_op_find("reshape"), &info) == NPU_OK);
  CHECK(info.args && strcmp(info.args, "shape") == 0);
  CHECK(npu_op_get_info(npu_op_find("random_uniform"), &info) == NPU_OK && info.stateful);
  CHECK(npu_op_get_info(npu_op_count(), &info) == NPU_ERR_ARG && info.name == NULL);
  CHECK(npu_op_get_info(-1, &info) == NPU_ERR_ARG);
  CHECK(npu_op_get_info(0, NULL) == NPU_ERR_ARG);
  CHECK(npu_op_find("no_such_op") == -1 && npu_op_find(NULL) == -1);
  for (int i = 0; i < npu_op_count(); i++) {
    CHECK(npu_op_get_info(i, &info) == NPU_OK);
    CHECK(info.name && strcmp(info.name, npu_op_name(i)) == 0 && info.kind_name &&
          info.precision_name);
  }
  /* the small public helpers the binding uses */
  char buf[32];
  CHECK(strcmp(npu_shape_format(buf, sizeof buf, 3, (int64_t[]){2, -1, 4}), "[2,-1,4]") == 0);
  CHECK(strcmp(npu_shape_format(buf, sizeof buf, -1, NULL), "<unknown rank>") == 0);
  CHECK(strcmp(npu_shape_format(buf, 4, 2, (int64_t[]){100, 200}), "[10") == 0);
  npu_nearest near;
  npu_nearest_init(&near, "matmull");
  npu_nearest_try(&near, "matmul");
  npu_nearest_try(&near, "add");
  CHECK(near.best && strcmp(npu_nearest_result(&near), "matmul") == 0);
  npu_nearest_init(&near, "zzz");
  npu_nearest_try(&near, "matmul");
  CHECK(npu_nearest_result(&near) == NULL);
  int64_t i64 = -3;
  float f;
  uint8_t b;
  CHECK(npu_dtype_convert(NPU_DTYPE_I64, &i64, NPU_DTYPE_F32, &f, 1) == NPU_OK && f == -3.0f);
  CHECK(npu_dtype_convert(NPU_DTYPE_F32, &f, NPU_DTYPE_BOOL, &b, 1) == NPU_OK && b == 1);
  CHECK(npu_dtype_convert(NPU_DTYPE_COUNT, &f, NPU_DTYPE_BOOL, &b, 1) == NPU_ERR_DTYPE);
  CHECK(npu_dtype_convert(NPU_DTYPE_F32, NULL, NPU_DTYPE_BOOL, &b, 1) == NPU_ERR_ARG);
  CHECK(npu_dtype_convert(NPU_DTYPE_F32, &f, NPU_DTYPE_BOOL, &b, -1) == NPU_ERR_ARG);
  CHECK(npu_dtype_convert(NPU_DTYPE_F32, NULL, NPU_DTYPE_BOOL, NULL, 0) == NPU_OK);
}

/* The sweep: a graph with one const; add two variables and the initializer. */
typedef struct sweep_case {
  npu_graph *g;
  int init;
} sweep_case;

static npu_status sweep_setup(npu_context *ctx, void *ud) {
  sweep_case *c = ud;
  TRY(npu_graph_new(ctx, &c->g));
  return const_f32(ctx, c->g, "c", 1, (int64_t[]){2}, (const float[]){1, 2}, &c->init);
}

static npu_status sweep_run(npu_context *ctx, void *ud) {
  (void)ctx;
  sweep_case *c = ud;
  int n_nodes = npu_graph_n_nodes(c->g), a, b, init;
  npu_status st = npu_graph_add_variable(c->g, "a", c->init, &a);
  if (!st) st = npu_graph_add_variable(c->g, "b", c->init, &b);
  if (!st) st = npu_graph_add_variables_initializer(c->g, NULL, &init);
  if (st == NPU_ERR_NOMEM) { /* a failed call leaves no half-built variable */
    for (int i = 0; i < npu_graph_n_variables(c->g); i++) {
      npu_variable_info vi;
      CHECK(npu_graph_variable_info(c->g, i, &vi) == NPU_OK);
      CHECK(vi.node < npu_graph_n_nodes(c->g) && vi.initializer >= 0);
    }
    CHECK(npu_graph_n_nodes(c->g) >= n_nodes);
  } else if (!st) {
    CHECK(npu_graph_n_variables(c->g) == 2);
  }
  return st;
}

static void sweep_after(npu_context *ctx, npu_status st, void *ud) {
  (void)ctx, (void)st;
  sweep_case *c = ud;
  npu_graph_release(c->g);
  c->g = NULL;
}

static void test_allocation_failure_sweep(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  sweep_case c = {0};
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.setup = sweep_setup, .run = sweep_run, .after = sweep_after,
                           .ud = &c, .what = "variables"});
  CHECK(n_failures >= 8); /* node and value arrays, names, attributes, the variable list */
  npu_context_release(ctx);
}

/* npu_session_freeze / npu_graph_freeze: the loss frozen after one training step keeps w and
   b as consts of their names holding the trained values (step, which the loss does not read,
   is left out with every initializer and the update); the frozen loss equals the session's;
   keeping b a variable keeps its initializer; a wrong graph, an output id out of range and
   the training assign are refused naming the culprit; the sweep over npu_session_freeze. */
typedef struct freeze_case {
  model m;
  npu_session *s;
  npu_graph *frozen;
} freeze_case;

static npu_status freeze_setup(npu_context *ctx, void *ud) {
  freeze_case *c = ud;
  TRY(build(ctx, &c->m));
  TRY(npu_session_new(ctx, c->m.g, NULL, &c->s));
  TRY(npu_session_run(c->s, 0, NULL, NULL, 0, NULL, NULL, 1, &c->m.init));
  return npu_session_run(c->s, 0, NULL, NULL, 0, NULL, NULL, 1,
                         (int[]){npu_graph_value_node(c->m.g, c->m.train)});
}

static npu_status freeze_run(npu_context *ctx, void *ud) {
  (void)ctx;
  freeze_case *c = ud;
  int loss_node = npu_graph_value_node(c->m.g, c->m.loss);
  return npu_session_freeze(c->s, c->m.g, 1, &loss_node, NULL, &c->frozen);
}

static void freeze_after(npu_context *ctx, npu_status st, void *ud) {
  (void)ctx, (void)st;
  freeze_case *c = ud;
  npu_graph_release(c->frozen);
  npu_session_release(c->s);
  npu_graph_release(c->m.g);
  *c = (freeze_case){0};
}

static void test_freeze(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  freeze_case c = {0};
  npu_status st = freeze_setup(ctx, &c);
  if (!st) st = freeze_run(ctx, &c);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "freeze: %s\n", npu_context_errmsg(ctx));
  if (!st) {
    npu_graph *f = c.frozen;
    CHECK(npu_graph_n_variables(f) == 0);
    int w = npu_graph_find_node(f, "w"), loss_v = -1;
    CHECK(w >= 0 && strcmp(npu_graph_node_op(f, w), "const") == 0);
    CHECK(npu_graph_find_node(f, "Variable") < 0); /* step: not needed */
    CHECK(npu_graph_find_node(f, "w/Assign") < 0);
    CHECK(npu_graph_find_value(f, npu_graph_node_name(c.m.g, npu_graph_value_node(c.m.g, c.m.loss)),
                               &loss_v) == NPU_OK);
    npu_session *fs = NULL;
    npu_tensor *a = NULL, *b = NULL;
    CHECK(npu_session_new(ctx, f, NULL, &fs) == NPU_OK);
    CHECK(npu_session_run(fs, 0, NULL, NULL, 1, &loss_v, &a, 0, NULL) == NPU_OK);
    CHECK(npu_session_run(c.s, 0, NULL, NULL, 1, &c.m.loss, &b, 0, NULL) == NPU_OK);
    /* w = [0.8, 1.6, 2.4] after one step: loss = 0.64 + 2.56 + 5.76 + 0.5 */
    CHECK(a && b && *(const float *)npu_tensor_data(a) == *(const float *)npu_tensor_data(b));
    CHECK(a && fabsf(*(const float *)npu_tensor_data(a) - 9.46f) < 1e-5f);
    npu_tensor_release(a);
    npu_tensor_release(b);
    npu_session_release(fs);
    /* b kept a variable: it comes with its initializer */
    int loss_node = npu_graph_value_node(c.m.g, c.m.loss);
    unsigned char keep[3] = {0, 1, 0};
    npu_graph *f2 = NULL;
    CHECK(npu_session_freeze(c.s, c.m.g, 1, &loss_node, keep, &f2) == NPU_OK);
    CHECK(npu_graph_n_variables(f2) == 1);
    npu_variable_info vi;
    CHECK(npu_graph_variable_info(f2, 0, &vi) == NPU_OK && strcmp(vi.name, "b") == 0 &&
          vi.initializer >= 0 && vi.trainable == 1);
    npu_graph_release(f2);
    /* errors */
    npu_graph *other = NULL, *bad = (npu_graph *)1;
    CHECK(npu_graph_new(ctx, &other) == NPU_OK);
    CHECK(npu_session_freeze(c.s, other, 1, &loss_node, NULL, &bad) == NPU_ERR_STATE && !bad);
    CHECK(strstr(npu_context_errmsg(ctx), "not the session's") != NULL);
    npu_graph_release(other);
    int out_of_range = 1 << 20;
    CHECK(npu_session_freeze(c.s, c.m.g, 1, &out_of_range, NULL, &bad) == NPU_ERR_ARG);
    int train_node = npu_graph_value_node(c.m.g, c.m.train);
    CHECK(npu_session_freeze(c.s, c.m.g, 1, &train_node, NULL, &bad) == NPU_ERR_ARG);
    CHECK(strstr(npu_context_errmsg(ctx), "variable 'w'") != NULL);
    int vidx = 0;
    CHECK(npu_graph_freeze(c.m.g, 1, &loss_node, 1, &vidx, (npu_tensor *const[]){NULL}, &bad) ==
          NPU_ERR_ARG);
    CHECK(strstr(npu_context_errmsg(ctx), "'w'") != NULL && !bad);
    /* a value of another shape, an index out of range, no outputs, a closed session */
    npu_tensor *short_w = NULL;
    CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, (int64_t[]){2}, &short_w) == NPU_OK);
    CHECK(npu_graph_freeze(c.m.g, 1, &loss_node, 1, &vidx, &short_w, &bad) == NPU_ERR_ARG);
    CHECK(strstr(npu_context_errmsg(ctx), "another dtype or shape") != NULL && !bad);
    npu_tensor_release(short_w);
    int vbad = npu_graph_n_variables(c.m.g);
    CHECK(npu_graph_freeze(c.m.g, 1, &loss_node, 1, &vbad, (npu_tensor *const[]){NULL}, &bad) ==
          NPU_ERR_ARG);
    CHECK(strstr(npu_context_errmsg(ctx), "is not a variable index") != NULL && !bad);
    CHECK(npu_session_freeze(c.s, c.m.g, 0, &loss_node, NULL, &bad) == NPU_ERR_ARG && !bad);
    CHECK(strstr(npu_context_errmsg(ctx), "no output nodes") != NULL);
    npu_session_close(c.s);
    CHECK(npu_session_freeze(c.s, c.m.g, 1, &loss_node, NULL, &bad) == NPU_ERR_STATE && !bad);
    CHECK(strstr(npu_context_errmsg(ctx), "closed") != NULL);
  }
  freeze_after(ctx, st, &c);
  CHECK(npu_context_live_bytes(ctx) == 0);
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.setup = freeze_setup, .run = freeze_run, .after = freeze_after,
                           .ud = &c, .what = "freeze"});
  CHECK(n_failures >= 10); /* work arrays, the fetch run, the new graph's nodes and names */
  npu_context_release(ctx);
}

/* Freezing control flow through the C API: (i, h) = (0, x); while i < 3: (i + 1, h * w);
   y = cond(p, h * w, h), the else region empty (it returns h as is).  w = [1, 2, 3] is
   doubled once in the session before freezing (w = [2, 4, 6]), so y = x * w^4 = [16, 256,
   1296] with x = 1.  The frozen graph keeps the loop and the cond (two regions each renumbered,
   the empty one copied empty), holds w as a const, and computes the session's bits; the sweep
   fails every allocation of npu_session_freeze on it. */
typedef struct control_case {
  npu_graph *g;
  npu_session *s;
  npu_graph *frozen;
  int y, init, dbl;
} control_case;

static npu_status control_setup(npu_context *ctx, void *ud) {
  control_case *c = ud;
  TRY(npu_graph_new(ctx, &c->g));
  npu_graph *g = c->g;
  static const float w0[] = {1, 2, 3}, ones[] = {1, 1, 1}, two[] = {2};
  static const int64_t three[] = {3};
  int init_w, w, x, two_v, doubled, zero, n, one, p;
  TRY(const_f32(ctx, g, "w_init", 1, three, w0, &init_w));
  TRY(npu_graph_add_variable(g, "w", init_w, &w));
  TRY(const_f32(ctx, g, "x", 1, three, ones, &x));
  TRY(const_f32(ctx, g, "two", 0, NULL, two, &two_v));
  TRY(binary(g, "mul", w, two_v, &doubled));
  TRY(binary(g, "assign", w, doubled, &c->dbl));
  npu_tensor *t;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &t));
  *(int32_t *)npu_tensor_data(t) = 0;
  TRY(graph_const(g, "zero", t, &zero));
  TRY(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &t));
  *(int32_t *)npu_tensor_data(t) = 3;
  TRY(graph_const(g, "n", t, &n));
  TRY(npu_tensor_new(ctx, NPU_DTYPE_BOOL, 0, NULL, &t));
  *(uint8_t *)npu_tensor_data(t) = 1;
  TRY(graph_const(g, "p", t, &p));
  int loop, i, h, pred, i1, h1, node;
  TRY(npu_graph_region_begin(g, &loop));
  TRY(graph_loop_var(g, "i", NPU_DTYPE_I32, 0, 0, NULL, &i));
  TRY(graph_loop_var(g, "h", NPU_DTYPE_F32, 1, 1, three, &h));
  TRY(binary(g, "less", i, n, &pred));
  TRY(npu_tensor_new(ctx, NPU_DTYPE_I32, 0, NULL, &t));
  *(int32_t *)npu_tensor_data(t) = 1;
  TRY(graph_const(g, "one", t, &one));
  TRY(binary(g, "add", i, one, &i1));
  TRY(binary(g, "mul", h, w, &h1));
  TRY(npu_graph_region_end(g, loop));
  npu_attr wa[] = {{.name = "region", .type = NPU_ATTR_INT, .u.i = loop}};
  TRY(npu_graph_add_op(g, "while", "loop", 5, (int[]){zero, x, pred, i1, h1}, 1, wa, &node));
  int hn = npu_graph_output(g, node, 1), then_r, else_r, yt;
  TRY(npu_graph_region_begin(g, &then_r));
  TRY(binary(g, "mul", hn, w, &yt));
  TRY(npu_graph_region_end(g, then_r));
  TRY(npu_graph_region_begin(g, &else_r));
  TRY(npu_graph_region_end(g, else_r));
  npu_attr ca[] = {{.name = "then_region", .type = NPU_ATTR_INT, .u.i = then_r},
                   {.name = "else_region", .type = NPU_ATTR_INT, .u.i = else_r}};
  TRY(npu_graph_add_op(g, "cond", "y", 3, (int[]){p, yt, hn}, 2, ca, &node));
  c->y = out0(g, node);
  TRY(npu_graph_add_variables_initializer(g, NULL, &c->init));
  TRY(npu_session_new(ctx, g, NULL, &c->s));
  TRY(npu_session_run(c->s, 0, NULL, NULL, 0, NULL, NULL, 1, &c->init));
  return npu_session_run(c->s, 0, NULL, NULL, 0, NULL, NULL, 1,
                         (int[]){npu_graph_value_node(g, c->dbl)});
}

static npu_status control_run(npu_context *ctx, void *ud) {
  (void)ctx;
  control_case *c = ud;
  int y_node = npu_graph_value_node(c->g, c->y);
  return npu_session_freeze(c->s, c->g, 1, &y_node, NULL, &c->frozen);
}

static void control_after(npu_context *ctx, npu_status st, void *ud) {
  (void)ctx, (void)st;
  control_case *c = ud;
  npu_graph_release(c->frozen);
  npu_session_release(c->s);
  npu_graph_release(c->g);
  *c = (control_case){0};
}

static void test_freeze_control_flow(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  control_case c = {0};
  npu_status st = control_setup(ctx, &c);
  if (!st) st = control_run(ctx, &c);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "freeze control: %s\n", npu_context_errmsg(ctx));
  if (!st) {
    npu_graph *f = c.frozen;
    CHECK(npu_graph_n_variables(f) == 0);
    int w = npu_graph_find_node(f, "w"), loop = npu_graph_find_node(f, "loop"),
        y = npu_graph_find_node(f, "y");
    CHECK(w >= 0 && strcmp(npu_graph_node_op(f, w), "const") == 0);
    CHECK(loop >= 0 && strcmp(npu_graph_node_op(f, loop), "while") == 0);
    CHECK(y >= 0 && strcmp(npu_graph_node_op(f, y), "cond") == 0);
    CHECK(npu_graph_find_node(f, "w/Assign") < 0 && npu_graph_find_node(f, "two") < 0);
    /* i, h, less, one, add, mul in the loop's region; mul in then's; else's empty */
    int n_in_regions = 0;
    for (int id = 0; id < npu_graph_n_nodes(f); id++) n_in_regions += npu_graph_node_region(f, id) > 0;
    CHECK(n_in_regions == 7);
    npu_session *fs = NULL;
    npu_tensor *a = NULL, *b = NULL;
    int fy = out0(f, y);
    CHECK(npu_session_new(ctx, f, NULL, &fs) == NPU_OK);
    CHECK(npu_session_run(fs, 0, NULL, NULL, 1, &fy, &a, 0, NULL) == NPU_OK);
    CHECK(npu_session_run(c.s, 0, NULL, NULL, 1, &c.y, &b, 0, NULL) == NPU_OK);
    static const float want[] = {16, 256, 1296};
    for (int k = 0; a && b && k < 3; k++) {
      CHECK(((const float *)npu_tensor_data(a))[k] == ((const float *)npu_tensor_data(b))[k]);
      CHECK_NEAR(((const float *)npu_tensor_data(a))[k], want[k], 0);
    }
    npu_tensor_release(a);
    npu_tensor_release(b);
    npu_session_release(fs);
  }
  control_after(ctx, st, &c);
  CHECK(npu_context_live_bytes(ctx) == 0);
  int n_failures = sweep_alloc_failures(
      ctx, &(scenario_def){.setup = control_setup, .run = control_run, .after = control_after,
                           .ud = &c, .what = "freeze control flow"});
  CHECK(n_failures >= 12); /* as test_freeze's, and the regions of the copy */
  npu_context_release(ctx);
}

/* A variable's reduced-precision copy (compile/precision.c: mark_variable_copies): under
   allow_mix_precision_bf16, y = x w with w a variable [4, 3] reads w through a Cast to
   bfloat16 that the plan keeps and makes again only after w is written.  All values are small
   integers, exact in bfloat16 and in the float32 sums, so y is known exactly: a stale copy
   shows.  The copy's case: made on the first run, reused on the second (stat COPY_REUSES),
   made again after an assign from a feed (the API's way to set it); then the sweep, and a
   recovery sweep: a run failing at its n-th allocation (the Cast's output among them) leaves
   no half-made copy taken for current by the next run. */
typedef struct copy_case {
  npu_graph *g;
  npu_session *s;
  int x, wv, w_in, set, y, init;
} copy_case;

static const float copy_x[4] = {1, 2, 3, 4};
static const float copy_w0[12] = {1, 0, 2, 1, 1, 0, 0, 3, 1, 2, 0, 1};
static const float copy_w1[12] = {3, 1, 0, 0, 2, 1, 1, 1, 4, 1, 0, 2};

static npu_status copy_build(npu_context *ctx, copy_case *c) {
  static const int64_t xs[] = {1, 4}, ws[] = {4, 3};
  TRY(npu_graph_new(ctx, &c->g));
  int w0;
  TRY(const_f32(ctx, c->g, "w0", 2, ws, copy_w0, &w0));
  TRY(npu_graph_add_variable(c->g, "w", w0, &c->wv));
  TRY(graph_placeholder(c->g, "x", NPU_DTYPE_F32, 2, xs, &c->x));
  TRY(graph_placeholder(c->g, "w_in", NPU_DTYPE_F32, 2, ws, &c->w_in));
  TRY(binary(c->g, "matmul", c->x, c->wv, &c->y));
  TRY(binary(c->g, "assign", c->wv, c->w_in, &c->set));
  TRY(npu_graph_add_variables_initializer(c->g, NULL, &c->init));
  npu_options *o;
  TRY(npu_options_new(ctx, &o));
  npu_status st = npu_options_set_string(o, "precision_mode", "allow_mix_precision_bf16");
  if (!st) st = npu_session_new(ctx, c->g, o, &c->s);
  npu_options_release(o);
  return st ? st : npu_session_run(c->s, 0, NULL, NULL, 0, NULL, NULL, 1, &c->init);
}

static void copy_release(copy_case *c) {
  npu_session_release(c->s);
  npu_graph_release(c->g);
  c->s = NULL;
  c->g = NULL;
}

/* y = x w for the given w, checked exactly when check is set */
static npu_status copy_run_y(npu_context *ctx, copy_case *c, const float *w, int check) {
  npu_tensor *xt, *y = NULL;
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, (int64_t[]){1, 4}, copy_x, sizeof copy_x, &xt));
  npu_status st = npu_session_run(c->s, 1, &c->x, &xt, 1, &c->y, &y, 0, NULL);
  npu_tensor_release(xt);
  if (st) return st;
  for (int j = 0; check && j < 3; j++) {
    float want = 0;
    for (int k = 0; k < 4; k++) want += copy_x[k] * w[k * 3 + j];
    CHECK_EQ_I64((int64_t)((const float *)npu_tensor_data(y))[j], (int64_t)want);
    CHECK(((const float *)npu_tensor_data(y))[j] == want);
  }
  npu_tensor_release(y);
  return NPU_OK;
}

static npu_status copy_set_w(npu_context *ctx, copy_case *c, const float *w) {
  npu_tensor *wt;
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 2, (int64_t[]){4, 3}, w, 12 * sizeof *w, &wt));
  int set_node = npu_graph_value_node(c->g, c->set);
  npu_status st = npu_session_run(c->s, 1, &c->w_in, &wt, 0, NULL, NULL, 1, &set_node);
  npu_tensor_release(wt);
  return st;
}

static npu_status copy_play(npu_context *ctx, void *ud, int check) {
  copy_case *c = ud;
  TRY(copy_build(ctx, c));
  TRY(copy_run_y(ctx, c, copy_w0, check));
  if (check) CHECK_EQ_I64(npu_session_stat(c->s, NPU_SESSION_STAT_COPY_REUSES), 0);
  TRY(copy_run_y(ctx, c, copy_w0, check));
  if (check) CHECK_EQ_I64(npu_session_stat(c->s, NPU_SESSION_STAT_COPY_REUSES), 1);
  TRY(copy_set_w(ctx, c, copy_w1));
  TRY(copy_run_y(ctx, c, copy_w1, check)); /* made again: the assign wrote w */
  if (check) CHECK_EQ_I64(npu_session_stat(c->s, NPU_SESSION_STAT_COPY_REUSES), 1);
  TRY(copy_run_y(ctx, c, copy_w1, check));
  if (check) CHECK_EQ_I64(npu_session_stat(c->s, NPU_SESSION_STAT_COPY_REUSES), 2);
  return NPU_OK;
}

static void copy_play_release(void *ud) { copy_release(ud); }

static void test_variable_copy(void) {
  copy_case c = {0};
  scenario_values_and_sweep(&(checked_scenario){.play = copy_play, .release = copy_play_release,
                                                .ud = &c, .what = "variable copy",
                                                .min_failures = 10});
  /* recovery: the n-th allocation of a run fails; the next run, allocations working, must
     see the variable's current value (before and after an assign) */
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  int failed = 0;
  for (long n = 1; n < 200; n++) {
    npu_status st = copy_build(ctx, &c);
    CHECK(st == NPU_OK);
    npu_context_fail_after(ctx, n);
    npu_status first = copy_run_y(ctx, &c, copy_w0, 0);
    npu_context_fail_after(ctx, 0);
    CHECK(first == NPU_OK || first == NPU_ERR_NOMEM);
    if (!st) st = copy_run_y(ctx, &c, copy_w0, 1);
    if (!st) st = copy_set_w(ctx, &c, copy_w1);
    npu_status second = NPU_OK;
    if (!st) {
      npu_context_fail_after(ctx, n);
      second = copy_run_y(ctx, &c, copy_w1, 0);
      npu_context_fail_after(ctx, 0);
      CHECK(second == NPU_OK || second == NPU_ERR_NOMEM);
    }
    if (!st) st = copy_run_y(ctx, &c, copy_w1, 1);
    CHECK(st == NPU_OK);
    copy_release(&c);
    CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
    if (st || (first == NPU_OK && second == NPU_OK)) break;
    failed++;
  }
  CHECK(failed >= 3); /* the runs' allocations were reached (compiling, the copy, the result) */
  npu_context_release(ctx);
}

int main(void) {
  test_build_list_init_train();
  test_nodes_one_by_one();
  test_op_info();
  test_allocation_failure_sweep();
  test_freeze();
  test_freeze_control_flow();
  test_variable_copy();
  return check_summary("test_variables");
}
