/* test_progress.c — npu_run_options.progress through the public API: an iterations_per_loop
 * loop of 1000 iterations fed by a dataset reports exactly iterations 100, 200, ..., 1000 of
 * 1000 with progress_every = 100, and about a hundred times with the default (0); a nonzero
 * answer cancels the run (NPU_ERR_CANCELLED, the iterations done kept, the session usable); a
 * run without a loop reports once (1 of 1); a negative progress_every is refused.  Also
 * npu_context_set_memory_limit (a run needing more fails naming the limit; a limit below the
 * bytes in use is refused) and npu_context_errnode (an integer division by zero names its
 * node).  A callback, or another thread, closing the session mid-run: the freeing waits for
 * the run's end.  A callback adding nodes, a control edge, a variable or a dataset to the
 * running graph: NPU_ERR_STATE, the graph unchanged.
 * Nothing leaks.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "include/npu.h"

#define TRY(call)                                                                              \
  do {                                                                                         \
    npu_status st_ = (call);                                                                   \
    if (st_) return st_;                                                                       \
  } while (0)

enum { N_LOOP = 1000, MAX_SEEN = 2000 };

typedef struct seen {
  int n;
  int64_t step[MAX_SEEN], total[MAX_SEEN];
  int64_t cancel_at; /* answer nonzero at this step (0: never) */
} seen;

static int record(void *ud, int64_t step, int64_t total) {
  seen *s = ud;
  if (s->n < MAX_SEEN) s->step[s->n] = step, s->total[s->n] = total;
  s->n++;
  return s->cancel_at && step == s->cancel_at;
}

/* total += sum(batch of 2 from 0..9, repeated): each iteration adds 1, 5, 9, 13 or 17 */
typedef struct loop_graph {
  npu_graph *g;
  int total, init, loop;
} loop_graph;

static npu_status build(npu_context *ctx, loop_graph *lg) {
  TRY(npu_graph_new(ctx, &lg->g));
  npu_graph *g = lg->g;
  float xs[10];
  for (int i = 0; i < 10; i++) xs[i] = (float)i;
  npu_tensor *x;
  TRY(npu_tensor_from_data(ctx, NPU_DTYPE_F32, 1, (int64_t[]){10}, xs, sizeof xs, &x));
  npu_dataset *d0 = NULL, *d1 = NULL, *d2 = NULL;
  npu_status st = npu_dataset_from_tensors(ctx, 1, &x, &d0);
  npu_tensor_release(x);
  if (!st) st = npu_dataset_batch(d0, 2, 1, &d1);
  if (!st) st = npu_dataset_repeat(d1, -1, &d2);
  int id = -1;
  if (!st) st = npu_graph_add_dataset(g, d2, &id);
  npu_dataset_release(d0);
  npu_dataset_release(d1);
  npu_dataset_release(d2);
  TRY(st);
  int node, nv, zero_node;
  npu_attr it = {.name = "dataset", .type = NPU_ATTR_INT, .u.i = id};
  TRY(npu_graph_add_op(g, "iterator_get_next", NULL, 0, NULL, 1, &it, &node));
  int batch = npu_graph_output(g, node, 0);
  TRY(npu_graph_add_op(g, "reduce_sum", "batch_sum", 1, &batch, 0, NULL, &node));
  int sum = npu_graph_output(g, node, 0);
  npu_attr va[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {NULL, 0}}};
  TRY(npu_graph_add_op(g, "variable", "total", 0, NULL, 2, va, &nv));
  lg->total = npu_graph_output(g, nv, 0);
  npu_tensor *zero;
  TRY(npu_tensor_new(ctx, NPU_DTYPE_F32, 0, NULL, &zero));
  npu_attr zv = {.name = "value", .type = NPU_ATTR_TENSOR, .u.tensor = zero};
  st = npu_graph_add_op(g, "const", "zero", 0, NULL, 1, &zv, &zero_node);
  npu_tensor_release(zero);
  TRY(st);
  TRY(npu_graph_add_op(g, "assign", "init", 2,
                       (int[]){lg->total, npu_graph_output(g, zero_node, 0)}, 0, NULL,
                       &lg->init));
  TRY(npu_graph_add_op(g, "add", "next", 2, (int[]){lg->total, sum}, 0, NULL, &node));
  int next = npu_graph_output(g, node, 0);
  int step;
  TRY(npu_graph_add_op(g, "assign", "step", 2, (int[]){lg->total, next}, 0, NULL, &step));
  npu_attr la = {.name = "iterations", .type = NPU_ATTR_INT, .u.i = N_LOOP};
  TRY(npu_graph_add_op(g, "loop", "loop", 0, NULL, 1, &la, &lg->loop));
  TRY(npu_graph_add_control(g, lg->loop, step));
  return NPU_OK;
}

static double fetch_total(npu_session *s, const loop_graph *lg) {
  npu_tensor *out = NULL;
  double v = -1;
  if (npu_session_run(s, 0, NULL, NULL, 1, &lg->total, &out, 0, NULL) == NPU_OK)
    v = npu_tensor_get(out, 0);
  npu_tensor_release(out);
  return v;
}

/* The loop graph in a session of N_LOOP iterations per loop, its total initialised; NULL
   (checks failed) when it could not be made. */
static npu_session *loop_session(npu_context *ctx, loop_graph *lg) {
  CHECK(build(ctx, lg) == NPU_OK);
  npu_options *o = NULL;
  CHECK(npu_options_new(ctx, &o) == NPU_OK);
  CHECK(npu_options_set_int(o, "iterations_per_loop", N_LOOP) == NPU_OK);
  npu_session *s = NULL;
  CHECK(npu_session_new(ctx, lg->g, o, &s) == NPU_OK);
  npu_options_release(o);
  if (s) CHECK(npu_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &lg->init) == NPU_OK);
  return s;
}

static void test_loop(npu_context *ctx) {
  loop_graph lg = {0};
  npu_session *s = loop_session(ctx, &lg);
  if (!s) return;

  /* every 100: exactly 100, 200, ..., 1000 of 1000 */
  seen sn = {0};
  npu_run_options ro = {.progress = record, .progress_ud = &sn, .progress_every = 100};
  npu_tensor *out = NULL;
  CHECK(npu_session_run_with_options(s, &ro, 0, NULL, NULL, 1, &lg.total, &out, 1, &lg.loop) ==
        NPU_OK);
  CHECK(sn.n == 10);
  for (int i = 0; i < 10 && i < sn.n; i++) {
    CHECK_EQ_I64(sn.step[i], 100 * (i + 1));
    CHECK_EQ_I64(sn.total[i], N_LOOP);
  }
  /* 1000 batches of 5 cycling (1, 5, 9, 13, 17): 200 cycles of 45 */
  if (out) CHECK_NEAR(npu_tensor_get(out, 0), 9000, 0);
  npu_tensor_release(out);
  out = NULL;

  /* every 0: about a hundred calls (every 10), the last at 1000; every 300: 300, 600, 900
     and the last */
  sn = (seen){0};
  ro.progress_every = 0;
  CHECK(npu_session_run_with_options(s, &ro, 0, NULL, NULL, 0, NULL, NULL, 1, &lg.loop) == NPU_OK);
  CHECK(sn.n == 100 && sn.step[0] == 10 && sn.step[99] == 1000);
  sn = (seen){0};
  ro.progress_every = 300;
  CHECK(npu_session_run_with_options(s, &ro, 0, NULL, NULL, 0, NULL, NULL, 1, &lg.loop) == NPU_OK);
  CHECK(sn.n == 4 && sn.step[0] == 300 && sn.step[2] == 900 && sn.step[3] == 1000);
  CHECK_NEAR(fetch_total(s, &lg), 27000, 0);

  /* cancel from the callback at 300: the run fails, 300 iterations stay done, no fetches */
  sn = (seen){.cancel_at = 300};
  ro.progress_every = 100;
  out = (npu_tensor *)&sn; /* must come back NULL */
  CHECK(npu_session_run_with_options(s, &ro, 0, NULL, NULL, 1, &lg.total, &out, 1, &lg.loop) ==
        NPU_ERR_CANCELLED);
  CHECK(out == NULL);
  CHECK(sn.n == 3);
  CHECK(strstr(npu_context_errmsg(ctx), "cancelled by its progress callback after iteration "
                                        "300 of 1000") != NULL);
  CHECK_NEAR(fetch_total(s, &lg), 27000 + 60 * 45, 0);
  /* the session goes on: a whole loop again, without a callback */
  CHECK(npu_session_run(s, 0, NULL, NULL, 0, NULL, NULL, 1, &lg.loop) == NPU_OK);
  CHECK_NEAR(fetch_total(s, &lg), 27000 + 60 * 45 + 9000, 0);

  /* no loop: one call, 1 of 1 */
  sn = (seen){0};
  CHECK(npu_session_run_with_options(s, &ro, 0, NULL, NULL, 1, &lg.total, &out, 0, NULL) ==
        NPU_OK);
  CHECK(sn.n == 1 && sn.step[0] == 1 && sn.total[0] == 1);
  npu_tensor_release(out);
  out = NULL;

  /* a negative progress_every is refused before anything runs */
  sn = (seen){0};
  ro.progress_every = -1;
  CHECK(npu_session_run_with_options(s, &ro, 0, NULL, NULL, 0, NULL, NULL, 1, &lg.loop) ==
        NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "progress_every must be >= 0") != NULL);
  CHECK(sn.n == 0);
  npu_session_release(s);
  npu_graph_release(lg.g);
}

/* A progress callback closing the session it reports on (a Lua ProgressBar's function may
   call sess:close()): the run's plans, variables and arena stay until the run has unwound, the
   loop finishes, the fetch comes back, and later runs find the session closed. */
typedef struct closer {
  npu_session *s;
  int n, closed_at;
} closer;

static int close_it(void *ud, int64_t step, int64_t total) {
  (void)total;
  closer *c = ud;
  c->n++;
  if (step == 200) {
    npu_session_close(c->s);
    npu_session_close(c->s); /* twice: harmless */
    c->closed_at = npu_session_is_closed(c->s) ? (int)step : -1;
  }
  return 0;
}

static void test_close_from_callback(npu_context *ctx) {
  loop_graph lg = {0};
  npu_session *s = loop_session(ctx, &lg);
  if (!s) return;
  closer c = {.s = s};
  npu_run_options ro = {.progress = close_it, .progress_ud = &c, .progress_every = 100};
  npu_tensor *out = NULL;
  CHECK(npu_session_run_with_options(s, &ro, 0, NULL, NULL, 1, &lg.total, &out, 1, &lg.loop) ==
        NPU_OK);
  CHECK(c.n == 10 && c.closed_at == 200);
  if (out) CHECK_NEAR(npu_tensor_get(out, 0), 9000, 0);
  npu_tensor_release(out);
  out = NULL;
  CHECK(npu_session_is_closed(s));
  CHECK(npu_session_run(s, 0, NULL, NULL, 1, &lg.total, &out, 0, NULL) == NPU_ERR_STATE);
  CHECK(strstr(npu_context_errmsg(ctx), "the session is closed") != NULL);
  CHECK(out == NULL);
  npu_session_release(s);
  npu_graph_release(lg.g);
}

/* A progress callback growing the graph its run executes (nodes, a control edge, a
   variable, a dataset): each is refused with NPU_ERR_STATE naming what it adds, the graph is
   unchanged and the run goes on; after the run the same additions work. */
typedef struct grower {
  npu_context *ctx;
  npu_graph *g;
  int total, init; /* an existing value and node */
  int n_refused, n_wrong;
  int n_nodes, n_variables;
} grower;

static int expect_refused(grower *gr, npu_status st, const char *what) {
  const char *msg = npu_context_errmsg(gr->ctx);
  bool ok = st == NPU_ERR_STATE && strstr(msg, what) && strstr(msg, "a session is running this graph");
  if (!ok) fprintf(stderr, "test_grow_from_callback: %s: %s (%s)\n", what,
                   npu_status_name(st), msg);
  gr->n_refused += ok;
  gr->n_wrong += !ok;
  return ok;
}

static int grow_it(void *ud, int64_t step, int64_t total) {
  (void)total;
  grower *gr = ud;
  if (step != 500) return 0;
  npu_graph *g = gr->g;
  int node = 7, value = 7, id = 7;
  expect_refused(gr, npu_graph_add_op(g, "identity", "late", 1, &gr->total, 0, NULL, &node),
                 "cannot add node 'late'");
  expect_refused(gr, npu_graph_add_control(g, gr->init, 0), "cannot add a control edge");
  expect_refused(gr, npu_graph_add_variable(g, "late_var", gr->total, &value),
                 "cannot add node 'late_var'");
  float one = 1;
  npu_tensor *t = NULL;
  npu_dataset *ds = NULL;
  if (npu_tensor_from_data(gr->ctx, NPU_DTYPE_F32, 1, (int64_t[]){1}, &one,
                           sizeof one, &t) == NPU_OK &&
      npu_dataset_from_tensors(gr->ctx, 1, &t, &ds) == NPU_OK)
    expect_refused(gr, npu_graph_add_dataset(g, ds, &id), "cannot add a dataset");
  npu_dataset_release(ds);
  npu_tensor_release(t);
  gr->n_wrong += node != -1 || value != -1 || id != -1;
  gr->n_nodes = npu_graph_n_nodes(g);
  gr->n_variables = npu_graph_n_variables(g);
  return 0;
}

static void test_grow_from_callback(npu_context *ctx) {
  loop_graph lg = {0};
  npu_session *s = loop_session(ctx, &lg);
  if (!s) return;
  int n_nodes = npu_graph_n_nodes(lg.g), n_variables = npu_graph_n_variables(lg.g);
  grower gr = {.ctx = ctx, .g = lg.g, .total = lg.total, .init = lg.init};
  npu_run_options ro = {.progress = grow_it, .progress_ud = &gr, .progress_every = 100};
  npu_tensor *out = NULL;
  CHECK(npu_session_run_with_options(s, &ro, 0, NULL, NULL, 1, &lg.total, &out, 1, &lg.loop) ==
        NPU_OK);
  if (out) CHECK_NEAR(npu_tensor_get(out, 0), 9000, 0);
  npu_tensor_release(out);
  CHECK(gr.n_refused == 4 && gr.n_wrong == 0);
  CHECK(gr.n_nodes == n_nodes && gr.n_variables == n_variables);
  /* after the run: allowed again */
  int node = -1;
  CHECK(npu_graph_add_op(lg.g, "identity", "late", 1, &lg.total, 0, NULL, &node) == NPU_OK);
  CHECK(node == n_nodes);
  CHECK(npu_graph_add_control(lg.g, node, lg.init) == NPU_OK);
  npu_session_release(s);
  npu_graph_release(lg.g);
}

/* Another thread closing the session while a run is in the middle of its loop: its close
   waits for the run's end (it freed the plans under the running loop). */
typedef struct racer {
  npu_session *s;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool go;
} racer;

static void *close_when_told(void *ud) {
  racer *r = ud;
  pthread_mutex_lock(&r->mu);
  while (!r->go) pthread_cond_wait(&r->cv, &r->mu);
  pthread_mutex_unlock(&r->mu);
  npu_session_close(r->s);
  return NULL;
}

static int tell_then_dawdle(void *ud, int64_t step, int64_t total) {
  (void)total;
  racer *r = ud;
  if (step == 100) {
    pthread_mutex_lock(&r->mu);
    r->go = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
  }
  nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL); /* the closer gets in */
  return 0;
}

static void test_close_from_another_thread(npu_context *ctx) {
  loop_graph lg = {0};
  npu_session *s = loop_session(ctx, &lg);
  if (!s) return;
  racer r = {.s = s, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, close_when_told, &r) == 0);
  npu_run_options ro = {.progress = tell_then_dawdle, .progress_ud = &r, .progress_every = 100};
  npu_tensor *out = NULL;
  CHECK(npu_session_run_with_options(s, &ro, 0, NULL, NULL, 1, &lg.total, &out, 1, &lg.loop) ==
        NPU_OK);
  if (out) CHECK_NEAR(npu_tensor_get(out, 0), 9000, 0);
  npu_tensor_release(out);
  pthread_join(th, NULL);
  CHECK(npu_session_is_closed(s));
  npu_session_release(s);
  npu_graph_release(lg.g);
}

/* q = x floor_div d with d holding a zero: NPU_ERR_ARG naming q, and npu_context_errnode. */
static void test_division_by_zero(npu_context *ctx) {
  npu_graph *g = NULL;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t shape[] = {3};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_I32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 1}}};
  int nx, nd, nq;
  CHECK(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx) == NPU_OK);
  CHECK(npu_graph_add_op(g, "placeholder", "d", 0, NULL, 2, ph, &nd) == NPU_OK);
  int feeds[] = {npu_graph_output(g, nx, 0), npu_graph_output(g, nd, 0)};
  CHECK(npu_graph_add_op(g, "floor_div", "q", 2, feeds, 0, NULL, &nq) == NPU_OK);
  int q = npu_graph_output(g, nq, 0);
  npu_session *s = NULL;
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  const int32_t xv[] = {7, -7, 9}, dv[] = {2, 0, 3}, ok[] = {2, 2, 3};
  npu_tensor *ft[2] = {NULL, NULL}, *out = NULL;
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_I32, 1, shape, xv, sizeof xv, &ft[0]) == NPU_OK);
  CHECK(npu_tensor_from_data(ctx, NPU_DTYPE_I32, 1, shape, dv, sizeof dv, &ft[1]) == NPU_OK);
  CHECK(npu_session_run(s, 2, feeds, ft, 1, &q, &out, 0, NULL) == NPU_ERR_ARG);
  CHECK(out == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "floor_div 'q': Integer division by zero") != NULL);
  const char *op = NULL, *node = npu_context_errnode(ctx, &op);
  CHECK(node && strcmp(node, "q") == 0);
  CHECK(op && strcmp(op, "floor_div") == 0);
  /* a divisor without zeros runs; an error about no node clears it */
  memcpy(npu_tensor_data(ft[1]), ok, sizeof ok);
  CHECK(npu_session_run(s, 2, feeds, ft, 1, &q, &out, 0, NULL) == NPU_OK);
  if (out) CHECK(npu_tensor_get(out, 0) == 3 && npu_tensor_get(out, 1) == -4); /* floor */
  npu_tensor_release(out);
  CHECK(npu_session_run(s, 2, feeds, ft, 1, (int[]){999}, &out, 0, NULL) != NPU_OK);
  CHECK(npu_context_errnode(ctx, &op) == NULL && op == NULL);
  npu_tensor_release(ft[0]);
  npu_tensor_release(ft[1]);
  npu_session_release(s);
  npu_graph_release(g);
}

/* memory_limit set after creation: a run needing more fails with NPU_ERR_NOMEM naming the
   limit and the session stays usable; a limit below the bytes in use is refused. */
static void test_memory_limit(npu_context *ctx) {
  CHECK(npu_context_memory_limit(ctx) == 0);
  npu_graph *g = NULL;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t shape[] = {-1};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 1}}};
  int nx, ny;
  CHECK(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx) == NPU_OK);
  int x = npu_graph_output(g, nx, 0);
  CHECK(npu_graph_add_op(g, "add", "y", 2, (int[]){x, x}, 0, NULL, &ny) == NPU_OK);
  int y = npu_graph_output(g, ny, 0);
  npu_session *s = NULL;
  CHECK(npu_session_new(ctx, g, NULL, &s) == NPU_OK);
  npu_tensor *small = NULL, *big = NULL, *out = NULL;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, (int64_t[]){4}, &small) == NPU_OK);
  CHECK(npu_session_run(s, 1, &x, &small, 1, &y, &out, 0, NULL) == NPU_OK);
  npu_tensor_release(out);
  out = NULL;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, (int64_t[]){1 << 20}, &big) == NPU_OK);
  size_t live = npu_context_live_bytes(ctx);
  /* below what is held: refused, the limit unchanged */
  CHECK(npu_context_set_memory_limit(ctx, live / 2) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "is below the") != NULL);
  CHECK(npu_context_memory_limit(ctx) == 0);
  /* room for the small run, not for a 4 MiB result */
  size_t limit = live + (1 << 20);
  CHECK(npu_context_set_memory_limit(ctx, limit) == NPU_OK);
  CHECK(npu_context_memory_limit(ctx) == limit);
  CHECK(npu_session_run(s, 1, &x, &big, 1, &y, &out, 0, NULL) == NPU_ERR_NOMEM);
  CHECK(out == NULL);
  char want[64];
  snprintf(want, sizeof want, "of the %zu-byte memory limit", limit);
  CHECK(strstr(npu_context_errmsg(ctx), want) != NULL);
  CHECK(npu_session_run(s, 1, &x, &small, 1, &y, &out, 0, NULL) == NPU_OK);
  npu_tensor_release(out);
  out = NULL;
  CHECK(npu_context_set_memory_limit(ctx, 0) == NPU_OK);
  CHECK(npu_session_run(s, 1, &x, &big, 1, &y, &out, 0, NULL) == NPU_OK);
  npu_tensor_release(out);
  CHECK(npu_context_set_memory_limit(NULL, 1) == NPU_ERR_ARG);
  npu_tensor_release(small);
  npu_tensor_release(big);
  npu_session_release(s);
  npu_graph_release(g);
}

int main(void) {
  npu_context *ctx = NULL;
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &ctx) == NPU_OK);
  if (!ctx) return check_summary("test_progress");
  test_loop(ctx);
  test_close_from_callback(ctx);
  test_grow_from_callback(ctx);
  test_close_from_another_thread(ctx);
  test_division_by_zero(ctx);
  test_memory_limit(ctx);
  CHECK(npu_context_live_bytes(ctx) == 0);
  npu_context_release(ctx);
  return check_summary("test_progress");
}
