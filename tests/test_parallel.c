/*
 * test_parallel.c — graph_max_parallel_model_num: runs of one session from several threads at
 * once (session.c: lanes).  8 threads hammer one session (a convolution, a product, a softmax,
 * a host-free pure graph reading a variable) with their own feeds; every result must equal,
 * bit for bit, the result of the same feed run serially before.  Then a run that writes the
 * variable takes the session alone while pure runs go on, and the readers see the old or the
 * new value, never a mix; a host op calling back into the same session is refused; nothing
 * stays live.  `make tsan` runs this under ThreadSanitizer.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "npu_test.h"

enum { N_THREADS = 8, N_FEEDS = 16, RUNS_PER_THREAD = 40, HW = 32, C = 16 };

typedef struct model {
  npu_context *ctx;
  npu_graph *g;
  npu_session *s;
  int x, y, init, w_var, bump;
  npu_tensor *feeds[N_FEEDS];
  npu_tensor *want[N_FEEDS];
  npu_tensor *want2[N_FEEDS]; /* with the weights doubled (bump) */
  bool either;                /* during a bump: want or want2 are both right */
} model;

static npu_status const_random(npu_context *ctx, npu_graph *g, const char *name, int ndim,
                               const int64_t *shape, uint64_t seed, int *v) {
  npu_tensor *t;
  TRY(npu_tensor_random_normal(ctx, NPU_DTYPE_F32, ndim, shape, 0, 0.3, seed, &t));
  return graph_const(g, name, t, v);
}

/* y = softmax(reshape(relu(conv2d(x, f)), (-1, HW*HW*C)) @ w), w a variable */
static npu_status build(model *m) {
  npu_graph *g = m->g;
  int64_t xs[] = {-1, HW, HW, C};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {xs, 4}}};
  int node, f, conv, relu, flat, w0, w, mm, wv;
  TRY(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &node));
  m->x = npu_graph_output(g, node, 0);
  TRY(const_random(m->ctx, g, "f", 4, (int64_t[]){3, 3, C, C}, 7, &f));
  int64_t strides[] = {1, 1, 1, 1};
  npu_attr ca[] = {{.name = "strides", .type = NPU_ATTR_INTS, .u.ints = {strides, 4}},
                   {.name = "padding", .type = NPU_ATTR_STRING, .u.s = "SAME"}};
  TRY(npu_graph_add_op(g, "conv2d", "conv", 2, (int[]){m->x, f}, 2, ca, &node));
  conv = npu_graph_output(g, node, 0);
  TRY(graph_op(g, "relu", "relu", 1, &conv, &relu));
  int64_t fs[] = {-1, HW * HW * C};
  npu_attr ra = {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {fs, 2}};
  TRY(npu_graph_add_op(g, "reshape", "flat", 1, &relu, 1, &ra, &node));
  flat = npu_graph_output(g, node, 0);
  int64_t wshape[] = {HW * HW * C, 10};
  npu_attr va[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {wshape, 2}}};
  TRY(npu_graph_add_op(g, "variable", "w", 0, NULL, 2, va, &node));
  m->w_var = node;
  wv = npu_graph_output(g, node, 0);
  TRY(const_random(m->ctx, g, "w0", 2, wshape, 11, &w0));
  TRY(npu_graph_add_op(g, "assign", "init", 2, (int[]){wv, w0}, 0, NULL, &m->init));
  TRY(npu_graph_add_op(g, "matmul", "mm", 2, (int[]){flat, wv}, 0, NULL, &node));
  mm = npu_graph_output(g, node, 0);
  TRY(graph_op(g, "softmax", "y", 1, &mm, &m->y));
  /* w <- w * 2: a run that writes what the others read */
  npu_tensor *two;
  TRY(npu_tensor_from_data(m->ctx, NPU_DTYPE_F32, 0, NULL, (float[]){2}, 4, &two));
  int vtwo, dbl;
  TRY(graph_const(g, "two", two, &vtwo));
  TRY(graph_op(g, "mul", "double", 2, (int[]){wv, vtwo}, &dbl));
  TRY(npu_graph_add_op(g, "assign", "bump", 2, (int[]){wv, dbl}, 0, NULL, &m->bump));
  (void)w;
  return NPU_OK;
}

typedef struct worker {
  model *m;
  int id;
  int mismatches, failures;
  char why[256];
} worker;

static bool same_bits(const npu_tensor *a, const npu_tensor *b) {
  return a && b && npu_tensor_nbytes(a) == npu_tensor_nbytes(b) &&
         memcmp(npu_tensor_data(a), npu_tensor_data(b), npu_tensor_nbytes(a)) == 0;
}

static void *hammer(void *arg) {
  worker *wk = arg;
  model *m = wk->m;
  for (int r = 0; r < RUNS_PER_THREAD; r++) {
    int k = (wk->id * 7 + r * 3) % N_FEEDS;
    npu_tensor *out = NULL;
    npu_status st = npu_session_run(m->s, 1, &m->x, &m->feeds[k], 1, &m->y, &out, 0, NULL);
    if (st) {
      if (!wk->failures++)
        snprintf(wk->why, sizeof wk->why, "%s", npu_status_name(st)); /* errmsg is shared */
    } else if (!same_bits(out, m->want[k]) && !(m->either && same_bits(out, m->want2[k]))) {
      wk->mismatches++;
    }
    npu_tensor_release(out);
  }
  return NULL;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* n threads x RUNS_PER_THREAD runs; returns the wall time (ms). */
static double hammer_all(model *m, int n) {
  pthread_t th[N_THREADS];
  worker wk[N_THREADS];
  double t0 = now_ms();
  for (int i = 0; i < n; i++) {
    wk[i] = (worker){.m = m, .id = i};
    CHECK(pthread_create(&th[i], NULL, hammer, &wk[i]) == 0);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  double ms = now_ms() - t0;
  for (int i = 0; i < n; i++) {
    CHECK_EQ_I64(wk[i].failures, 0);
    CHECK_EQ_I64(wk[i].mismatches, 0);
    if (wk[i].failures) fprintf(stderr, "thread %d: %d failures (%s)\n", i, wk[i].failures, wk[i].why);
  }
  return ms;
}

/* A host op that runs its own session again: refused, not a deadlock. */
typedef struct reentry {
  model *m;
  npu_status inner;
} reentry;

static npu_status host_reenter(void *ud, int64_t key, int n_in, npu_tensor *const *in, int n_out,
                               const npu_dtype *dt, npu_tensor **out, char *why, size_t n) {
  reentry *r = ud;
  (void)key, (void)n_in, (void)dt, (void)why, (void)n, (void)n_out;
  npu_tensor *y = NULL;
  r->inner = npu_session_run(r->m->s, 1, &r->m->x, &r->m->feeds[0], 1, &r->m->y, &y, 0, NULL);
  npu_tensor_release(y);
  (void)in;
  return npu_tensor_new(r->m->ctx, NPU_DTYPE_F32, 0, NULL, &out[0]);
}

int main(void) {
  model m = {0};
  CHECK(npu_context_new(&(npu_context_config){.n_threads = 2}, &m.ctx) == NPU_OK);
  CHECK(npu_graph_new(m.ctx, &m.g) == NPU_OK);
  npu_status st = build(&m);
  CHECK(st == NPU_OK);
  if (st) fprintf(stderr, "build: %s\n", npu_context_errmsg(m.ctx));
  npu_options *o = NULL;
  CHECK(npu_options_new(m.ctx, &o) == NPU_OK);
  CHECK(npu_options_set_int(o, "graph_run_mode", 0) == NPU_OK);
  /* (inference's default force_fp16 puts a cast after a host_func output whose rank is known
     only when it runs, which fails: a separate bug, so this test keeps float32) */
  CHECK(npu_options_set_string(o, "precision_mode", "must_keep_origin_dtype") == NPU_OK);
  CHECK(npu_options_set_int(o, "graph_max_parallel_model_num", getenv("PAR") ? atoi(getenv("PAR")) : N_THREADS) == NPU_OK);
  CHECK(npu_session_new(m.ctx, m.g, o, &m.s) == NPU_OK);
  CHECK(npu_session_run(m.s, 0, NULL, NULL, 0, NULL, NULL, 1, &m.init) == NPU_OK);
  for (int k = 0; k < N_FEEDS; k++) {
    CHECK(npu_tensor_random_uniform(m.ctx, NPU_DTYPE_F32, 4, (int64_t[]){2, HW, HW, C}, -1, 1,
                                    100 + (uint64_t)k, &m.feeds[k]) == NPU_OK);
    /* the serial answers */
    CHECK(npu_session_run(m.s, 1, &m.x, &m.feeds[k], 1, &m.y, &m.want[k], 0, NULL) == NPU_OK);
  }

  double t1 = hammer_all(&m, 1);
  double t8 = hammer_all(&m, N_THREADS);
  printf("test_parallel: %d runs on 1 thread %.1f ms, %d runs on %d threads %.1f ms\n",
         RUNS_PER_THREAD, t1, RUNS_PER_THREAD * N_THREADS, N_THREADS, t8);

  /* a writer among readers: it takes the session alone (waiting for the runs in progress,
     holding new ones back); each reader sees the old weights or the doubled ones, whole */
  CHECK(npu_session_run(m.s, 0, NULL, NULL, 0, NULL, NULL, 1, &m.bump) == NPU_OK);
  for (int k = 0; k < N_FEEDS; k++)
    CHECK(npu_session_run(m.s, 1, &m.x, &m.feeds[k], 1, &m.y, &m.want2[k], 0, NULL) == NPU_OK);
  CHECK(!same_bits(m.want[0], m.want2[0]));
  CHECK(npu_session_run(m.s, 0, NULL, NULL, 0, NULL, NULL, 1, &m.init) == NPU_OK);
  m.either = true;
  pthread_t th[N_THREADS];
  worker wk[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    wk[i] = (worker){.m = &m, .id = i};
    CHECK(pthread_create(&th[i], NULL, hammer, &wk[i]) == 0);
  }
  CHECK(npu_session_run(m.s, 0, NULL, NULL, 0, NULL, NULL, 1, &m.bump) == NPU_OK);
  for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N_THREADS; i++) CHECK(wk[i].failures == 0 && wk[i].mismatches == 0);
  npu_tensor *after = NULL;
  CHECK(npu_session_run(m.s, 1, &m.x, &m.feeds[0], 1, &m.y, &after, 0, NULL) == NPU_OK);
  CHECK(same_bits(after, m.want2[0]));
  npu_tensor_release(after);

  /* re-entry from a host op: NPU_ERR_STATE, no deadlock */
  {
    int64_t f32[] = {NPU_DTYPE_F32};
    npu_attr a[] = {{.name = "key", .type = NPU_ATTR_INT, .u.i = 1},
                    {.name = "Tout", .type = NPU_ATTR_INTS, .u.ints = {f32, 1}}};
    int node, hv;
    CHECK(npu_graph_add_op(m.g, "host_func", "again", 1, &m.x, 2, a, &node) == NPU_OK);
    hv = npu_graph_output(m.g, node, 0);
    reentry r = {.m = &m};
    npu_run_options ro = {.host_op = host_reenter, .host_ud = &r};
    npu_tensor *out = NULL;
    npu_status rst = npu_session_run_with_options(m.s, &ro, 1, &m.x, &m.feeds[0], 1, &hv, &out, 0, NULL);
    CHECK(rst == NPU_OK);
    if (rst) fprintf(stderr, "outer: %s %s\n", npu_status_name(rst), npu_context_errmsg(m.ctx));
    CHECK(r.inner == NPU_ERR_STATE);
    if (r.inner != NPU_ERR_STATE || !out) fprintf(stderr, "reentry: inner %s, %s\n", npu_status_name(r.inner), npu_context_errmsg(m.ctx));
    npu_tensor_release(out);
  }

  for (int k = 0; k < N_FEEDS; k++) {
    npu_tensor_release(m.feeds[k]);
    npu_tensor_release(m.want[k]);
    npu_tensor_release(m.want2[k]);
  }
  npu_session_release(m.s);
  npu_options_release(o);
  npu_graph_release(m.g);
  CHECK_EQ_I64(npu_context_live_bytes(m.ctx), 0);
  npu_context_release(m.ctx);
  return check_summary("test_parallel");
}
