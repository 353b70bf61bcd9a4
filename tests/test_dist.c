/*
 * test_dist.c — csrc/dist/ through the C API: collectives, send / receive and groups.
 *
 * One process (rank 0 of 1): every collective is the identity in float32, float16 and int32;
 * a group of one works like the world; the errors (unknown group, duplicate name, ranks out of
 * range or twice, send to itself or past the group, a receive's undeclared shape, local_rank_id
 * and local_device_list against the ranks, memory_limit reached by a staging buffer) carry their
 * status and name the culprit; and an allocation-failure sweep over all of it leaves nothing
 * live.  Then, when mpirun is there, the same executable under `mpirun -np 2` (--ranks):
 * allreduce, send / receive in each dtype, a group in reverse order, a mismatched receive, a
 * receive that times out and leaves the ranks in step.
 *
 * Built without MPI (make builds test_dist_nompi with dist.c compiled so): every collective and
 * a multi-rank group fail with NPU_ERR_UNSUPPORTED saying the library was built without MPI.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "npu_test.h"

#define MSG_HAS(ctx, s) CHECK(strstr(npu_context_errmsg(ctx), (s)) != NULL)

/* A graph: x (placeholder of dtype dt and shape), then op over it with attrs; *xv, *yv the
   values of x and of the op's first output (-1 when it has none), *node the op's node. */
typedef struct one_op {
  npu_graph *g;
  int x, y, node;
} one_op;

static npu_status build(npu_context *ctx, one_op *o, npu_dtype dt, int ndim, const int64_t *shape,
                        const char *op, int n_attrs, const npu_attr *attrs) {
  *o = (one_op){0};
  TRY(npu_graph_new(ctx, &o->g));
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = dt},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, ndim}}};
  int nx;
  TRY(npu_graph_add_op(o->g, "placeholder", "x", 0, NULL, 2, ph, &nx));
  o->x = npu_graph_output(o->g, nx, 0);
  bool no_input = !strcmp(op, "hcom_receive");
  TRY(npu_graph_add_op(o->g, op, NULL, no_input ? 0 : 1, &o->x, n_attrs, attrs, &o->node));
  o->y = npu_graph_n_outputs(o->g, o->node) ? npu_graph_output(o->g, o->node, 0) : -1;
  return NPU_OK;
}

/* x's values: element i is i + 1 + 10 rank (exact in every dtype). */
static npu_status make_x(npu_context *ctx, npu_dtype dt, int n, int rank, npu_tensor **out) {
  TRY(npu_tensor_new(ctx, dt, 1, (int64_t[]){n}, out));
  for (int i = 0; i < n; i++) {
    double v = i + 1 + 10 * rank;
    void *d = npu_tensor_data(*out);
    if (dt == NPU_DTYPE_F32) ((float *)d)[i] = (float)v;
    else if (dt == NPU_DTYPE_I32) ((int32_t *)d)[i] = (int32_t)v;
    else ((uint16_t *)d)[i] = npu_f32_to_f16((float)v);
  }
  return NPU_OK;
}

/* Runs o: feeds x (when the op takes it), fetches y or runs the node as a target. */
static npu_status run_op(npu_context *ctx, one_op *o, const npu_options *opts, npu_tensor *x,
                         npu_tensor **y) {
  npu_session *s = NULL;
  TRY(npu_session_new(ctx, o->g, opts, &s));
  npu_status st = o->y >= 0 ? npu_session_run(s, x ? 1 : 0, &o->x, &x, 1, &o->y, y, 0, NULL)
                            : npu_session_run(s, 1, &o->x, &x, 0, NULL, NULL, 1, &o->node);
  npu_session_release(s);
  return st;
}

static const npu_dtype DTYPES[] = {NPU_DTYPE_F32, NPU_DTYPE_F16, NPU_DTYPE_I32};

/* ---- one process ---------------------------------------------------------------------------- */

static void identities(npu_context *ctx) {
  npu_attr sum = {.name = "reduction", .type = NPU_ATTR_STRING, .u.s = "sum"};
  npu_attr root = {.name = "root_rank", .type = NPU_ATTR_INT, .u.i = 0};
  npu_attr one = {.name = "rank_size", .type = NPU_ATTR_INT, .u.i = 1};
  npu_attr solo = {.name = "group", .type = NPU_ATTR_STRING, .u.s = "solo"};
  CHECK(npu_dist_create_group(ctx, "solo", 1, (int[]){0}, 1000) == NPU_OK);
  struct {
    const char *op;
    npu_attr a[3];
    int n;
  } cases[] = {{"hcom_allreduce", {sum}, 1},          {"hcom_broadcast", {root}, 1},
               {"hcom_all_gather", {one}, 1},         {"hcom_reduce_scatter", {sum, one}, 2},
               {"hcom_allreduce", {sum, solo}, 2},    {"hcom_all_gather", {one, solo}, 2}};
  for (size_t d = 0; d < sizeof DTYPES / sizeof *DTYPES; d++)
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
      one_op o;
      npu_tensor *x = NULL, *y = NULL;
      npu_status st = build(ctx, &o, DTYPES[d], 1, (int64_t[]){4}, cases[k].op, cases[k].n,
                            cases[k].a);
      if (!st) st = make_x(ctx, DTYPES[d], 4, 0, &x);
      if (!st) st = run_op(ctx, &o, NULL, x, &y);
      CHECK(st == NPU_OK);
      if (st) fprintf(stderr, "%s: %s\n", cases[k].op, npu_context_errmsg(ctx));
      for (int i = 0; y && i < 4; i++) CHECK_NEAR(npu_tensor_get(y, i), i + 1, 0);
      CHECK(!y || npu_tensor_dtype(y) == DTYPES[d]);
      npu_tensor_release(y);
      npu_tensor_release(x);
      npu_graph_release(o.g);
    }
  int r[4];
  CHECK(npu_dist_group_ranks(ctx, "solo", &r[0], &r[1], &r[2], &r[3]) == NPU_OK);
  CHECK(r[0] == 0 && r[1] == 1 && r[2] == 0 && r[3] == 1);
  CHECK(npu_dist_world_rank(ctx, "solo", 0, &r[0]) == NPU_OK && r[0] == 0);
  CHECK(npu_dist_group_rank(ctx, 0, "solo", &r[0]) == NPU_OK && r[0] == 0);
  CHECK(npu_dist_destroy_group(ctx, "solo") == NPU_OK);
}

/* Runs op (attrs) over a float32 [4] on one rank and checks it fails with st naming what. */
static void fails(npu_context *ctx, const char *op, int n, const npu_attr *a, npu_status want,
                  const char *what) {
  one_op o;
  npu_tensor *x = NULL, *y = NULL;
  npu_status st = build(ctx, &o, NPU_DTYPE_F32, 1, (int64_t[]){4}, op, n, a);
  if (!st) st = make_x(ctx, NPU_DTYPE_F32, 4, 0, &x);
  if (!st) st = run_op(ctx, &o, NULL, x, &y);
  CHECK(st == want);
  if (st != want || !strstr(npu_context_errmsg(ctx), what))
    fprintf(stderr, "%s: %s (%s wanted)\n", op, npu_context_errmsg(ctx), what);
  MSG_HAS(ctx, what);
  CHECK(y == NULL);
  npu_tensor_release(x);
  npu_graph_release(o.g);
}

static void errors(npu_context *ctx) {
  size_t base = npu_context_live_bytes(ctx);
  npu_attr tag = {.name = "sr_tag", .type = NPU_ATTR_INT, .u.i = 3};
  npu_attr to0 = {.name = "dest_rank", .type = NPU_ATTR_INT, .u.i = 0};
  npu_attr to1 = {.name = "dest_rank", .type = NPU_ATTR_INT, .u.i = 1};
  npu_attr sum = {.name = "reduction", .type = NPU_ATTR_STRING, .u.s = "sum"};
  npu_attr nope = {.name = "group", .type = NPU_ATTR_STRING, .u.s = "nope"};
  fails(ctx, "hcom_send", 2, (npu_attr[]){tag, to0}, NPU_ERR_ARG,
        "hcom_send 'HcomSend': dest_rank 0 is this rank: a rank cannot send to itself");
  fails(ctx, "hcom_send", 2, (npu_attr[]){tag, to1}, NPU_ERR_ARG,
        "dest_rank 1 is out of range: group 'hccl_world_group' has 1 rank");
  fails(ctx, "hcom_allreduce", 2, (npu_attr[]){sum, nope}, NPU_ERR_ARG,
        "hcom_allreduce 'HcomAllReduce': unknown group 'nope'");
  /* a receive: src_rank past the group; a shape it does not declare whole */
  npu_attr rx[] = {{.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {(int64_t[]){2, 3}, 2}},
                   {.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   tag, {.name = "src_rank", .type = NPU_ATTR_INT, .u.i = 4}};
  fails(ctx, "hcom_receive", 4, rx, NPU_ERR_ARG, "src_rank 4 is out of range");
  rx[0].u.ints.v = (int64_t[]){-1, 3};
  one_op o;
  CHECK(build(ctx, &o, NPU_DTYPE_F32, 1, (int64_t[]){4}, "hcom_receive", 4, rx) == NPU_ERR_SHAPE);
  MSG_HAS(ctx, "a receive declares its whole shape");
  npu_graph_release(o.g);
  rx[0].u.ints.v = (int64_t[]){2, 3};
  rx[1].u.i = NPU_DTYPE_BOOL;
  CHECK(build(ctx, &o, NPU_DTYPE_F32, 1, (int64_t[]){4}, "hcom_receive", 4, rx) == NPU_ERR_DTYPE);
  MSG_HAS(ctx, "float32, float16 or int32");
  npu_graph_release(o.g);
  npu_attr big_tag = {.name = "sr_tag", .type = NPU_ATTR_INT, .u.i = 16384};
  CHECK(build(ctx, &o, NPU_DTYPE_F32, 1, (int64_t[]){4}, "hcom_send", 2,
              (npu_attr[]){big_tag, to1}) == NPU_ERR_ARG);
  MSG_HAS(ctx, "sr_tag 16384 is outside [0, 16383]");
  npu_graph_release(o.g);

  /* groups */
  CHECK(npu_dist_create_group(ctx, "g", 1, (int[]){1}, 0) == NPU_ERR_ARG);
  MSG_HAS(ctx, "create_group 'g': rank 1 is out of range: there is 1 rank (0 to 0)");
  CHECK(npu_dist_create_group(ctx, "g", 2, (int[]){0, 0}, 0) == NPU_ERR_ARG);
  MSG_HAS(ctx, "2 ranks but there is 1");
  CHECK(npu_dist_create_group(ctx, "hccl_world_group", 1, (int[]){0}, 0) == NPU_ERR_ARG);
  CHECK(npu_dist_create_group(ctx, "", 1, (int[]){0}, 0) == NPU_ERR_ARG);
  char long_name[200];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = 0;
  CHECK(npu_dist_create_group(ctx, long_name, 1, (int[]){0}, 0) == NPU_ERR_ARG);
  MSG_HAS(ctx, "a name of 199 characters (at most 127)");
  CHECK(npu_dist_create_group(ctx, "g", 1, (int[]){0}, 0) == NPU_OK);
  CHECK(npu_dist_create_group(ctx, "g", 1, (int[]){0}, 0) == NPU_ERR_ARG);
  MSG_HAS(ctx, "create_group 'g': a group of that name exists");
  int r = 7;
  CHECK(npu_dist_world_rank(ctx, "g", 1, &r) == NPU_ERR_ARG && r == -1);
  MSG_HAS(ctx, "rank 1 is out of range: group 'g' has 1 rank");
  CHECK(npu_dist_group_rank(ctx, 3, "g", &r) == NPU_ERR_ARG && r == -1);
  MSG_HAS(ctx, "world rank 3 is not in group 'g' (world ranks 0)");
  CHECK(npu_dist_group_ranks(ctx, "h", &r, NULL, NULL, NULL) == NPU_ERR_ARG);
  MSG_HAS(ctx, "unknown group 'h'");
  /* a NULL out-param: NPU_ERR_ARG naming it (it used to be written through) */
  CHECK(npu_dist_world_rank(ctx, "g", 0, NULL) == NPU_ERR_ARG);
  MSG_HAS(ctx, "get_world_rank_from_group_rank: world_rank is NULL");
  CHECK(npu_dist_group_rank(ctx, 0, "g", NULL) == NPU_ERR_ARG);
  MSG_HAS(ctx, "get_group_rank_from_world_rank: group_rank is NULL");
  CHECK(npu_dist_destroy_group(ctx, "g") == NPU_OK);
  CHECK(npu_dist_destroy_group(ctx, "g") == NPU_ERR_ARG);
  MSG_HAS(ctx, "destroy_group: unknown group 'g'");
  CHECK(npu_dist_destroy_group(ctx, "hccl_world_group") == NPU_ERR_ARG);

  /* local_rank_id / local_device_list against the ranks (this process: local rank 0 of 1) */
  npu_options *opts = NULL;
  CHECK(npu_options_new(ctx, &opts) == NPU_OK);
  npu_graph *g = NULL;
  npu_session *s = NULL;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  CHECK(npu_options_set_int(opts, "local_rank_id", 1) == NPU_OK);
  CHECK(npu_session_new(ctx, g, opts, &s) == NPU_ERR_OPTION && s == NULL);
  MSG_HAS(ctx, "local_rank_id 1 but this process is local rank 0 of 1");
  CHECK(npu_options_set_int(opts, "local_rank_id", 0) == NPU_OK);
  CHECK(npu_options_set_string(opts, "local_device_list", "0,1") == NPU_OK);
  CHECK(npu_session_new(ctx, g, opts, &s) == NPU_ERR_OPTION && s == NULL);
  MSG_HAS(ctx, "local_device_list '0,1' names 2 devices but 1 rank runs on this machine");
  CHECK(npu_options_set_string(opts, "local_device_list", "3") == NPU_OK);
  CHECK(npu_session_new(ctx, g, opts, &s) == NPU_ERR_OPTION && s == NULL);
  MSG_HAS(ctx, "entry 0 (this local rank's) is 3 but the session's device_id is 0");
  CHECK(npu_options_set_string(opts, "local_device_list", "0") == NPU_OK);
  CHECK(npu_session_new(ctx, g, opts, &s) == NPU_OK);
  npu_session_release(s);
  npu_graph_release(g);
  npu_options_release(opts);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
}

/* The staging buffers are the context's: a limit leaving room for the input and output but not
   for them fails the step, naming it; nothing stays live. */
static void memory_limit(void) {
  enum { N = 1 << 20 }; /* 4 MiB a float32 tensor; the staging buffers take 8 MiB */
  npu_context *ctx = NULL;
  CHECK(npu_context_new(&(npu_context_config){.memory_limit = 14u << 20}, &ctx) == NPU_OK);
  if (!ctx) return;
  size_t base = npu_context_live_bytes(ctx);
  one_op o;
  npu_tensor *x = NULL, *y = NULL;
  npu_attr sum = {.name = "reduction", .type = NPU_ATTR_STRING, .u.s = "sum"};
  npu_status st = build(ctx, &o, NPU_DTYPE_F32, 1, (int64_t[]){N}, "hcom_allreduce", 1, &sum);
  if (!st) st = make_x(ctx, NPU_DTYPE_F32, N, 0, &x);
  if (!st) st = run_op(ctx, &o, NULL, x, &y);
  CHECK(st == NPU_ERR_NOMEM);
  MSG_HAS(ctx, "hcom_allreduce 'HcomAllReduce': staging buffer");
  if (st != NPU_ERR_NOMEM) fprintf(stderr, "memory_limit: %s\n", npu_context_errmsg(ctx));
  npu_tensor_release(y);
  npu_tensor_release(x);
  npu_graph_release(o.g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
  npu_context_release(ctx);
}

/* The sweep's scenario: a group of one made and dropped, collectives in it and the world, a
   send refused; every allocation in turn fails. */
static npu_status sweep_run(npu_context *ctx, void *ud) {
  (void)ud;
  npu_status st = npu_dist_create_group(ctx, "sweep", 1, (int[]){0}, 1000);
  if (st) return st;
  npu_attr a[] = {{.name = "reduction", .type = NPU_ATTR_STRING, .u.s = "max"},
                  {.name = "group", .type = NPU_ATTR_STRING, .u.s = "sweep"}};
  for (int k = 0; k < 2 && !st; k++) {
    one_op o;
    npu_tensor *x = NULL, *y = NULL;
    st = build(ctx, &o, k ? NPU_DTYPE_F16 : NPU_DTYPE_F32, 1, (int64_t[]){8}, "hcom_allreduce",
               k ? 2 : 1, a);
    if (!st) st = make_x(ctx, k ? NPU_DTYPE_F16 : NPU_DTYPE_F32, 8, 0, &x);
    if (!st) st = run_op(ctx, &o, NULL, x, &y);
    if (!st && npu_tensor_get(y, 7) != 8) st = NPU_ERR_INTERNAL;
    npu_tensor_release(y);
    npu_tensor_release(x);
    npu_graph_release(o.g);
  }
  npu_status st2 = npu_dist_destroy_group(ctx, "sweep");
  return st ? st : st2;
}

/* ---- under mpirun -np 2 --------------------------------------------------------------------- */

static int ranks_main(void) {
  npu_context *ctx = NULL;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  size_t base = npu_context_live_bytes(ctx);
  int rank = -1, size = 0;
  CHECK(npu_dist_ranks(ctx, &rank, &size, NULL, NULL) == NPU_OK);
  CHECK(size == 2);
  if (size != 2) return check_summary("test_dist --ranks");
  int peer = 1 - rank;
  npu_options *opts = NULL;
  CHECK(npu_options_new(ctx, &opts) == NPU_OK);
  CHECK(npu_options_set_int(opts, "hccl_timeout", 20) == NPU_OK);
  npu_attr sum = {.name = "reduction", .type = NPU_ATTR_STRING, .u.s = "sum"};
  npu_attr tag = {.name = "sr_tag", .type = NPU_ATTR_INT, .u.i = 3};
  /* allreduce and send / receive (0 -> 1) in each dtype */
  for (size_t d = 0; d < sizeof DTYPES / sizeof *DTYPES; d++) {
    one_op o;
    npu_tensor *x = NULL, *y = NULL;
    CHECK(build(ctx, &o, DTYPES[d], 1, (int64_t[]){3}, "hcom_allreduce", 1, &sum) == NPU_OK);
    CHECK(make_x(ctx, DTYPES[d], 3, rank, &x) == NPU_OK);
    CHECK(run_op(ctx, &o, opts, x, &y) == NPU_OK);
    for (int i = 0; y && i < 3; i++) CHECK_NEAR(npu_tensor_get(y, i), 2 * (i + 1) + 10, 0);
    npu_tensor_release(y), y = NULL;
    npu_graph_release(o.g);
    npu_attr p2p[] = {{.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {(int64_t[]){3}, 1}},
                      {.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = DTYPES[d]},
                      tag, {.name = "src_rank", .type = NPU_ATTR_INT, .u.i = 0}};
    npu_attr to1[] = {tag, {.name = "dest_rank", .type = NPU_ATTR_INT, .u.i = 1}};
    CHECK((rank == 0 ? build(ctx, &o, DTYPES[d], 1, (int64_t[]){3}, "hcom_send", 2, to1)
                     : build(ctx, &o, DTYPES[d], 1, (int64_t[]){3}, "hcom_receive", 4, p2p)) ==
          NPU_OK);
    npu_status st = run_op(ctx, &o, opts, x, &y);
    CHECK(st == NPU_OK);
    if (st) fprintf(stderr, "rank %d: %s\n", rank, npu_context_errmsg(ctx));
    CHECK(rank == 0 ? y == NULL : y != NULL);
    for (int i = 0; y && i < 3; i++) CHECK_NEAR(npu_tensor_get(y, i), i + 1, 0); /* rank 0's */
    npu_tensor_release(y);
    npu_tensor_release(x);
    npu_graph_release(o.g);
  }
  /* a group in reverse order: group rank 0 is world rank 1; allgather in group order */
  CHECK(npu_dist_create_group(ctx, "rev", 2, (int[]){1, 0}, 20000) == NPU_OK);
  int gr = -1;
  CHECK(npu_dist_group_rank(ctx, rank, "rev", &gr) == NPU_OK && gr == peer);
  {
    npu_attr a[] = {{.name = "rank_size", .type = NPU_ATTR_INT, .u.i = 2},
                    {.name = "group", .type = NPU_ATTR_STRING, .u.s = "rev"}};
    one_op o;
    npu_tensor *x = NULL, *y = NULL;
    CHECK(build(ctx, &o, NPU_DTYPE_I32, 1, (int64_t[]){2}, "hcom_all_gather", 2, a) == NPU_OK);
    CHECK(make_x(ctx, NPU_DTYPE_I32, 2, rank, &x) == NPU_OK);
    CHECK(run_op(ctx, &o, opts, x, &y) == NPU_OK);
    const double want[] = {11, 12, 1, 2}; /* world rank 1's, then 0's */
    for (int i = 0; y && i < 4; i++) CHECK_NEAR(npu_tensor_get(y, i), want[i], 0);
    npu_tensor_release(y);
    npu_tensor_release(x);
    npu_graph_release(o.g);
  }
  CHECK(npu_dist_destroy_group(ctx, "rev") == NPU_OK);
  /* a receive declaring [2,2] of a sent [4]: both fail, naming both; then a receive whose
     sender never sends times out (hccl_timeout 1) and the ranks stay in step */
  {
    npu_attr p2p[] = {{.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {(int64_t[]){2, 2}, 2}},
                      {.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                      tag, {.name = "src_rank", .type = NPU_ATTR_INT, .u.i = 0}};
    npu_attr to1[] = {tag, {.name = "dest_rank", .type = NPU_ATTR_INT, .u.i = 1}};
    one_op o;
    npu_tensor *x = NULL, *y = NULL;
    CHECK((rank == 0 ? build(ctx, &o, NPU_DTYPE_F32, 1, (int64_t[]){4}, "hcom_send", 2, to1)
                     : build(ctx, &o, NPU_DTYPE_F32, 1, (int64_t[]){4}, "hcom_receive", 4, p2p)) ==
          NPU_OK);
    CHECK(make_x(ctx, NPU_DTYPE_F32, 4, rank, &x) == NPU_OK);
    CHECK(run_op(ctx, &o, opts, x, &y) == NPU_ERR_SHAPE);
    MSG_HAS(ctx, "rank 0 sends float32 [4] but rank 1 receives float32 [2,2] (sr_tag 3)");
    npu_tensor_release(y), y = NULL;
    npu_graph_release(o.g);
    if (rank == 1) {
      npu_options *quick = NULL;
      CHECK(npu_options_new(ctx, &quick) == NPU_OK);
      CHECK(npu_options_set_int(quick, "hccl_timeout", 1) == NPU_OK);
      p2p[0].u.ints.v = (int64_t[]){4};
      p2p[0].u.ints.n = 1;
      p2p[2].u.i = 9;
      CHECK(build(ctx, &o, NPU_DTYPE_F32, 1, (int64_t[]){4}, "hcom_receive", 4, p2p) == NPU_OK);
      CHECK(run_op(ctx, &o, quick, NULL, &y) == NPU_ERR_TIMEOUT);
      MSG_HAS(ctx, "rank 1 waited 1000 ms (hccl_timeout) for the send of rank 0");
      npu_graph_release(o.g);
      npu_options_release(quick);
    }
    CHECK(build(ctx, &o, NPU_DTYPE_F32, 1, (int64_t[]){4}, "hcom_allreduce", 1, &sum) == NPU_OK);
    CHECK(run_op(ctx, &o, opts, x, &y) == NPU_OK);
    for (int i = 0; y && i < 4; i++) CHECK_NEAR(npu_tensor_get(y, i), 2 * (i + 1) + 10, 0);
    npu_tensor_release(y);
    npu_tensor_release(x);
    npu_graph_release(o.g);
  }
  npu_options_release(opts);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
  npu_context_release(ctx);
  char name[64];
  snprintf(name, sizeof name, "test_dist --ranks (rank %d)", rank);
  return check_summary(name);
}

/* ---- built without MPI ---------------------------------------------------------------------- */

static void without_mpi(npu_context *ctx) {
  /* launched as rank 0 of 2: ranks as the launcher says, every collective unsupported */
  int rank = -1, size = 0;
  CHECK(npu_dist_ranks(ctx, &rank, &size, NULL, NULL) == NPU_OK);
  CHECK(rank == 0 && size == 2);
  npu_attr sum = {.name = "reduction", .type = NPU_ATTR_STRING, .u.s = "sum"};
  npu_attr to1[] = {{.name = "sr_tag", .type = NPU_ATTR_INT, .u.i = 1},
                    {.name = "dest_rank", .type = NPU_ATTR_INT, .u.i = 1}};
  fails(ctx, "hcom_allreduce", 1, &sum, NPU_ERR_UNSUPPORTED,
        "hcom_allreduce 'HcomAllReduce': lua-npu was built without MPI: install Open MPI");
  fails(ctx, "hcom_send", 2, to1, NPU_ERR_UNSUPPORTED, "hcom_send 'HcomSend': lua-npu was built "
        "without MPI");
  CHECK(npu_dist_create_group(ctx, "pair", 2, (int[]){0, 1}, 0) == NPU_ERR_UNSUPPORTED);
  MSG_HAS(ctx, "create_group 'pair': lua-npu was built without MPI");
  CHECK(npu_dist_create_group(ctx, "other", 1, (int[]){1}, 0) == NPU_OK); /* not a member */
  int n = 0;
  CHECK(npu_dist_group_ranks(ctx, "other", NULL, &n, NULL, NULL) == NPU_OK && n == 1);
  CHECK(npu_dist_group_ranks(ctx, "other", &n, NULL, NULL, NULL) == NPU_ERR_ARG);
  MSG_HAS(ctx, "this process (world rank 0) is not in group 'other'");
  CHECK(npu_dist_destroy_group(ctx, "other") == NPU_OK);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--ranks")) return ranks_main();
  if (!npu_dist_available()) { /* as if started by a launcher, before the ranks are read */
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  }
  npu_context *ctx = NULL;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  size_t base = npu_context_live_bytes(ctx);
  if (!npu_dist_available()) {
    without_mpi(ctx);
    CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
    npu_context_release(ctx);
    printf("test_dist: built without MPI: checked that collectives, send and groups say so\n");
    return check_summary("test_dist (without MPI)");
  }
  identities(ctx);
  errors(ctx);
  memory_limit();
  int n_nomem = sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_run, .what = "dist"});
  CHECK(n_nomem >= 10); /* the graphs, the sessions, the jobs and their buffers */
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
  npu_context_release(ctx);

  /* two ranks: this executable under mpirun */
  if (system("command -v mpirun >/dev/null 2>&1") != 0) {
    printf("test_dist: two ranks skipped: mpirun is not installed (openmpi-bin)\n");
  } else if (getenv("OMPI_COMM_WORLD_SIZE")) {
    printf("test_dist: two ranks skipped: already under mpirun\n");
  } else {
    char cmd[4200];
    /* under make sanitize, Open MPI's own allocations at exit would read as leaks */
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe "
             "--allow-run-as-root -x ASAN_OPTIONS -np 2 '%s' --ranks", argv[0]);
    int rc = system(cmd);
    CHECK(rc == 0);
  }
  return check_summary("test_dist");
}
