/*
 * test_loop_choices.c — implementation selection and tuning of steps nested in a while loop
 * and a cond branch, through the C API alone (compile/implmode.c, compile/tuning.c): with
 * Conv2D given super_performance in an op_precision_mode file (these 6x6 8-channel layers are
 * far below high_performance's Winograd rule: there the direct kernel is faster, and runs),
 * the convolution in the loop's body and the one in the then branch run Winograd, as explain's nested steps say, with the bits of the same
 * convolution at the top level; aoe_mode 2 times the nested steps and a later session reads
 * their records back, timing nothing, with the tuned session's algorithms and bits; and the allocation-failure sweep over building,
 * compiling (tuning included, and without: the constant filter's Winograd transform computed once
 * per step, plan.c) and running it: a clean NPU_ERR_NOMEM and no byte left behind
 * for every failing allocation.  The Lua side (spec/implmode_spec.lua, spec/tuning_spec.lua)
 * checks the values against float64 and the records' keys.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npu_test.h"

enum { HW = 6, C = 8 };

typedef struct handles {
  npu_graph *g;
  npu_options *o;
  npu_session *s;
  npu_tensor *x, *p, *out[3];
  char *explain;
  npu_context *ctx;
  int xv, pv, fetch[3];
} handles;

static void release_all(handles *h) {
  for (int i = 0; i < 3; i++) npu_tensor_release(h->out[i]);
  npu_tensor_release(h->x);
  npu_tensor_release(h->p);
  npu_session_release(h->s);
  npu_options_release(h->o);
  npu_graph_release(h->g);
  if (h->explain) npu_free(h->ctx, h->explain);
  npu_context *ctx = h->ctx;
  *h = (handles){.ctx = ctx};
}

static npu_status conv(npu_graph *g, const char *name, int x, int f, int *out) {
  int64_t strides[] = {1, 1, 1, 1};
  npu_attr ca[] = {{.name = "strides", .type = NPU_ATTR_INTS, .u.ints = {strides, 4}},
                   {.name = "padding", .type = NPU_ATTR_STRING, .u.s = "SAME"}};
  int node;
  TRY(npu_graph_add_op(g, "conv2d", name, 2, (int[]){x, f}, 2, ca, &node));
  *out = out0(g, node);
  return NPU_OK;
}

/* top = conv(x, f); (i, v) = (0, x), while i < 1: (i + 1, conv(v, f)) ("loop_conv");
   p ? conv(x, f) ("then_conv") : x.  Fetches: top, the loop's v, the cond's result. */
static npu_status build(handles *h) {
  npu_context *ctx = h->ctx;
  TRY(npu_graph_new(ctx, &h->g));
  npu_graph *g = h->g;
  int64_t xs[] = {1, HW, HW, C}, fs[] = {3, 3, C, C};
  int node, f, zero, one, n;
  TRY(graph_placeholder(g, "x", NPU_DTYPE_F32, 4, xs, &h->xv));
  TRY(graph_placeholder(g, "p", NPU_DTYPE_BOOL, 0, NULL, &h->pv));
  npu_tensor *t;
  TRY(npu_tensor_random_normal(ctx, NPU_DTYPE_F32, 4, fs, 0, 0.3, 5, &t));
  TRY(graph_const(g, "f", t, &f));
  TRY(scalar_i32(ctx, g, "zero", 0, &zero));
  TRY(scalar_i32(ctx, g, "n", 1, &n));
  TRY(conv(g, "top_conv", h->xv, f, &h->fetch[0]));

  int loop, i, v, pred, i1, c;
  TRY(npu_graph_region_begin(g, &loop));
  TRY(graph_loop_var(g, "i", NPU_DTYPE_I32, 0, 0, NULL, &i));
  TRY(graph_loop_var(g, "v", NPU_DTYPE_F32, 1, 4, xs, &v));
  TRY(graph_op(g, "less", NULL, 2, (int[]){i, n}, &pred));
  TRY(scalar_i32(ctx, g, "one", 1, &one));
  TRY(graph_op(g, "add", NULL, 2, (int[]){i, one}, &i1));
  TRY(conv(g, "loop_conv", v, f, &c));
  TRY(npu_graph_region_end(g, loop));
  npu_attr wa[] = {{.name = "region", .type = NPU_ATTR_INT, .u.i = loop}};
  TRY(npu_graph_add_op(g, "while", "loop", 5, (int[]){zero, h->xv, pred, i1, c}, 1, wa, &node));
  h->fetch[1] = npu_graph_output(g, node, 1);

  int then_r, else_r, y;
  TRY(npu_graph_region_begin(g, &then_r));
  TRY(conv(g, "then_conv", h->xv, f, &y));
  TRY(npu_graph_region_end(g, then_r));
  TRY(npu_graph_region_begin(g, &else_r));
  TRY(npu_graph_region_end(g, else_r));
  npu_attr ca[] = {{.name = "then_region", .type = NPU_ATTR_INT, .u.i = then_r},
                   {.name = "else_region", .type = NPU_ATTR_INT, .u.i = else_r}};
  TRY(npu_graph_add_op(g, "cond", "pick", 3, (int[]){h->pv, y, h->xv}, 2, ca, &node));
  h->fetch[2] = out0(g, node);
  return NPU_OK;
}

static const char *work_dir; /* the test's work_path */
static char ini_path[600];   /* its op_precision_mode file: Conv2D=super_performance */

/* The session: Winograd forced (super_performance), aoe_mode 2 when `tune`, records in
   work_dir. */
static npu_status open_session(handles *h, bool tune) {
  TRY(npu_options_new(h->ctx, &h->o));
  TRY(npu_options_set_string(h->o, "op_precision_mode", ini_path));
  TRY(npu_options_set_string(h->o, "work_path", work_dir));
  TRY(npu_options_set_string(h->o, "op_compiler_cache_mode", "disable"));
  TRY(npu_options_set_int(h->o, "export_compile_stat", 0));
  if (tune) TRY(npu_options_set_string(h->o, "aoe_mode", "2"));
  return npu_session_new(h->ctx, h->g, h->o, &h->s);
}

static npu_status run_and_explain(handles *h) {
  int64_t xs[] = {1, HW, HW, C};
  TRY(npu_tensor_random_normal(h->ctx, NPU_DTYPE_F32, 4, xs, 0, 1, 9, &h->x));
  uint8_t yes = 1;
  TRY(npu_tensor_from_data(h->ctx, NPU_DTYPE_BOOL, 0, NULL, &yes, 1, &h->p));
  int feeds[] = {h->xv, h->pv};
  npu_tensor *ft[] = {h->x, h->p};
  TRY(npu_session_run(h->s, 2, feeds, ft, 3, h->fetch, h->out, 0, NULL));
  return npu_session_explain(h->s, 2, feeds, ft, 3, h->fetch, 0, NULL, &h->explain);
}

static npu_status scenario(npu_context *ctx, void *ud) {
  handles *h = ud;
  (void)ctx;
  TRY(build(h));
  TRY(open_session(h, true));
  return run_and_explain(h);
}

/* The value of `field` in the explained step of node `node` (its fields come in a fixed
   order: node before algo and tuned, no other step between), "" when not found. */
static void step_field(const char *json, const char *node, const char *field, char *out,
                       size_t n) {
  char key[96];
  out[0] = 0;
  snprintf(key, sizeof key, "\"node\":\"%s\"", node);
  const char *at = strstr(json, key);
  snprintf(key, sizeof key, "\"%s\":", field);
  at = at ? strstr(at, key) : NULL;
  if (!at) return;
  at += strlen(key);
  size_t len = strcspn(at, ",}");
  snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), at);
}

static void check_str(const char *got, const char *want, const char *node) {
  CHECK(strcmp(got, want) == 0);
  if (strcmp(got, want) != 0)
    fprintf(stderr, "test_loop_choices: step '%s': %s, want %s\n", node, got, want);
}

static void check_same_bits(const npu_tensor *a, const npu_tensor *b, const char *what) {
  bool same = npu_tensor_numel(a) == npu_tensor_numel(b) &&
              memcmp(npu_tensor_data(a), npu_tensor_data(b),
                     (size_t)npu_tensor_numel(a) * sizeof(float)) == 0;
  CHECK(same);
  if (!same) fprintf(stderr, "test_loop_choices: %s differs from the top level's bits\n", what);
}

static const char *const NODES[3] = {"top_conv", "loop_conv", "then_conv"};

/* super_performance alone: Winograd at the top level, in the loop and in the branch, one bits */
static void test_winograd_nested(npu_context *ctx) {
  handles h = {.ctx = ctx};
  size_t base = npu_context_live_bytes(ctx);
  npu_status st = build(&h);
  if (!st) st = open_session(&h, false);
  if (!st) st = run_and_explain(&h);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "test_loop_choices: %s\n", npu_context_errmsg(ctx));
  char v[64];
  for (int k = 0; !st && k < 3; k++) {
    step_field(h.explain, NODES[k], "algo", v, sizeof v);
    check_str(v, "\"winograd_2x3\"", NODES[k]);
    step_field(h.explain, NODES[k], "impl", v, sizeof v);
    check_str(v, "\"high_performance\"", NODES[k]);
    /* f is a constant: each step's U computed once, when compiling (plan.c: prepare_steps) */
    step_field(h.explain, NODES[k], "prepared", v, sizeof v);
    check_str(v, "\"winograd_filter\"", NODES[k]);
  }
  /* three U (16, C, C): 4096 bytes each, counted with the constants */
  CHECK(!st && strstr(h.explain, "\"prepared_bytes\":12288,") != NULL);
  if (!st) {
    check_same_bits(h.out[1], h.out[0], "the loop's convolution");
    check_same_bits(h.out[2], h.out[0], "the branch's convolution");
  }
  release_all(&h);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
}

/* aoe_mode 2 times the three convolutions (which candidate wins is not asserted: the
   machine is shared); a later session without aoe_mode applies the records, timing nothing:
   the same algorithms, the same bits. */
static void test_records_read_back(npu_context *ctx) {
  handles h = {.ctx = ctx};
  size_t base = npu_context_live_bytes(ctx);
  npu_status st = scenario(ctx, &h);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "test_loop_choices: %s\n", npu_context_errmsg(ctx));
  char v[64], algo[3][64] = {"", "", ""};
  for (int k = 0; !st && k < 3; k++) {
    step_field(h.explain, NODES[k], "tuned", v, sizeof v);
    check_str(v, "\"timed\"", NODES[k]);
    step_field(h.explain, NODES[k], "algo", algo[k], sizeof algo[k]);
  }
  CHECK(!st && strstr(h.explain, "\"timed\":3,\"reused\":0") != NULL);
  npu_tensor *want[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; k++) want[k] = h.out[k] ? npu_tensor_retain(h.out[k]) : NULL;
  release_all(&h);
  st = build(&h);
  if (!st) st = open_session(&h, false);
  if (!st) st = run_and_explain(&h);
  CHECK(st == NPU_OK);
  for (int k = 0; !st && k < 3; k++) {
    step_field(h.explain, NODES[k], "tuned", v, sizeof v);
    check_str(v, "\"record\"", NODES[k]);
    step_field(h.explain, NODES[k], "algo", v, sizeof v);
    check_str(v, algo[k], NODES[k]);
    if (want[k]) check_same_bits(h.out[k], want[k], NODES[k]);
  }
  CHECK(!st && strstr(h.explain, "\"timed\":0,\"reused\":3") != NULL);
  for (int k = 0; k < 3; k++) npu_tensor_release(want[k]);
  release_all(&h);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
}

/* Each attempt tunes afresh: the records of an earlier one are removed first. */
static npu_status fresh_records(npu_context *ctx, void *ud) {
  (void)ctx, (void)ud;
  char path[600];
  snprintf(path, sizeof path, "%s/npu_aoe_tuning.jsonl", work_dir);
  remove(path);
  return NPU_OK;
}

static void after(npu_context *ctx, npu_status st, void *ud) {
  (void)ctx, (void)st;
  release_all(ud);
}

/* Winograd forced, no tuning: every attempt reaches the three steps' pre-transformed filters
   (prepare_steps' allocations) */
static npu_status scenario_untuned(npu_context *ctx, void *ud) {
  handles *h = ud;
  (void)ctx;
  TRY(build(h));
  TRY(open_session(h, false));
  return run_and_explain(h);
}

static void test_allocation_failure_sweep(npu_context *ctx) {
  handles h = {.ctx = ctx};
  int n_untuned = sweep_alloc_failures(ctx, &(scenario_def){.run = scenario_untuned,
                                                            .after = after, .ud = &h,
                                                            .what = "loop choices, untuned"});
  CHECK(n_untuned > 50);
  int n_failures = sweep_alloc_failures(ctx, &(scenario_def){.setup = fresh_records,
                                                             .run = scenario, .after = after,
                                                             .ud = &h, .what = "loop choices"});
  CHECK(n_failures > 100);
}

int main(void) {
  char dir[] = "/tmp/npu_loop_choices_XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  work_dir = dir;
  snprintf(ini_path, sizeof ini_path, "%s/super.ini", dir);
  FILE *ini = fopen(ini_path, "w");
  if (!ini || fputs("[ByOpType]\nConv2D=super_performance\n", ini) < 0 || fclose(ini)) {
    perror(ini_path);
    return 1;
  }
  npu_context *ctx;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  test_winograd_nested(ctx);
  test_records_read_back(ctx);
  fresh_records(ctx, NULL);
  test_allocation_failure_sweep(ctx);
  npu_context_release(ctx);
  remove_tree(dir);
  return check_summary("test_loop_choices");
}
