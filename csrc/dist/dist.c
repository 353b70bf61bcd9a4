/*
 * dist.c — collectives over MPI (dist.h).
 *
 * One communication thread per process initialises MPI (MPI_THREAD_FUNNELED: it makes every
 * MPI call), runs the collectives queued by the hcom_* steps one after another in the order
 * they were started (the same order on every rank, as the ranks run the same plans), and
 * finalises MPI at exit.  A collective is a job: its inputs are copied into a wire buffer when
 * it starts (float16 widened to float32, so reductions round once), the step that finishes it
 * copies the result out.  Each job first exchanges a header (sequence number, kind, dtype,
 * element count, root, reduction) with every other rank, point to point, so a rank giving
 * another shape or another collective fails on every rank with a message naming both, instead
 * of MPI reading garbage; then the collective itself (MPI_Iallreduce, MPI_Ibcast,
 * MPI_Iallgather, MPI_Ireduce_scatter_block on a duplicate of MPI_COMM_WORLD).  Both phases
 * are nonblocking requests polled against the session's hccl_timeout: a rank that never
 * arrives makes the others fail with NPU_ERR_TIMEOUT naming the missing ranks.  After a
 * timeout the abandoned requests may still complete into their buffers, so those are never
 * freed, and every later collective fails at once (NPU_ERR_STATE): the ranks are out of step.
 *
 * The process-wide state below is the library's one mutable global: MPI_Init is once per
 * process.  It is guarded by its mutex; its memory is plain malloc (it outlives contexts).
 *
 * Steady state allocates nothing: a finished job goes to a short list of spares with its wire
 * buffers (up to SPARE_JOBS; a step of the same sizes takes one back), the headers' arrays
 * are the thread's own for the life of the process (their size is the rank count), and the
 * environment's RANK_SIZE / RANK_ID are checked once, when the ranks are first known.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include "core/half.h"
#include "dist/dist.h"

#ifdef NPU_HAVE_MPI
#include <dlfcn.h>
#include <mpi.h>
#endif

#define JOB_MAGIC 0x6863636c6a6f6221ull

typedef struct job {
  uint64_t magic;
  struct job *next_queued, *next_live;
  npuX_coll_kind kind;
  npuX_reduction reduction;
  int root, rank_size, n_tensors;
  npu_dtype dtype;   /* as given; float16 travels as float32 */
  int64_t count;     /* elements this rank sends */
  int64_t out_count; /* elements it receives */
  void *send, *recv; /* wire buffers: float32 or int32 */
  size_t send_cap, recv_cap; /* their sizes in bytes (kept by a spare job) */
  int64_t timeout_ms;
  int64_t shape0[NPU_MAX_DIMS + 1]; /* the first tensor: ndim, dims (for messages) */
  /* set by the communication thread under the mutex */
  bool done, abandoned;
  npu_status status;
  char msg[NPU_ERRMSG_SIZE - 64];
  char op[32], node[128];
} job;

typedef struct dist_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started;  /* 0: not yet, 1: ranks known, -1: failed (err) */
  npu_status err_status;
  char err[256];
  npuD_ranks ranks;
  bool thread_running, quit;
  pthread_t thread;
  job *queue_head, *queue_tail; /* started, not yet run */
  job *live;                    /* started, not yet finished (tickets) */
  uint64_t seq;                 /* jobs run by the thread */
  bool broken;                  /* a collective timed out: the ranks are out of step */
  char broken_msg[300];
  bool env_checked;
  npu_status env_status; /* check_env_locked's verdict, made once with the ranks */
  char env_msg[256];
  job *spare;            /* finished jobs kept for reuse (next_queued links them) */
  int n_spare;
#ifdef NPU_HAVE_MPI
  MPI_Comm comm;
  /* the headers' arrays (run_mpi), the thread's alone; dropped, never freed, when abandoned
     requests may still use them */
  int64_t *hdr;
  MPI_Request *hdr_req;
  int *hdr_missing, *hdr_peer;
#endif
} dist_state;

enum { SPARE_JOBS = 16 };

static dist_state D = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

bool npuD_built_with_mpi(void) {
#ifdef NPU_HAVE_MPI
  return true;
#else
  return false;
#endif
}

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end;
  long x = strtol(v, &end, 10);
  return *end ? fallback : (int)x;
}

/* The launcher's view without MPI: Open MPI's, PMIx's or a PMI launcher's environment. */
static bool launcher_ranks(npuD_ranks *r) {
  static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
  static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
  for (int i = 0; i < 3; i++) {
    int size = env_int(size_vars[i], -1);
    if (size < 1) continue;
    r->size = size;
    r->rank = env_int(rank_vars[i], 0);
    r->local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    r->local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    return true;
  }
  return env_int("PMIX_RANK", -1) >= 0;
}

#ifdef NPU_HAVE_MPI
static void *comm_thread(void *arg);

/* Called with D.mu held: starts the thread and waits for it to know the ranks. */
static void start_mpi(void) {
  /* The module is loaded with RTLD_LOCAL (Lua's require); Open MPI's plugins resolve symbols
     of libmpi, so it is made global first. */
  Dl_info info;
  if (dladdr((void *)MPI_Init_thread, &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  /* The thread finalises MPI at exit, which unloads plugins: this library must not be
     unloaded first (lua_close unloads C modules), or the exit handler would run inside
     dlclose, holding the loader's lock that finalising needs. */
  if (dladdr((void *)start_mpi, &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE | RTLD_NOLOAD);
  D.thread_running = true;
  if (pthread_create(&D.thread, NULL, comm_thread, NULL)) {
    D.thread_running = false;
    D.started = -1;
    D.err_status = NPU_ERR_INTERNAL;
    snprintf(D.err, sizeof D.err, "cannot start the communication thread");
    return;
  }
  while (!D.started) pthread_cond_wait(&D.cv, &D.mu);
}

/* At exit (or when the library is unloaded): the thread finalises MPI and ends. */
static void stop_mpi(void) {
  pthread_mutex_lock(&D.mu);
  bool running = D.thread_running;
  D.quit = true;
  pthread_cond_broadcast(&D.cv);
  pthread_mutex_unlock(&D.mu);
  if (running) pthread_join(D.thread, NULL);
}
#endif

static void start_locked(void) {
  if (D.started) return;
  npuD_ranks r = {.rank = 0, .size = 1, .local_rank = 0, .local_size = 1};
  if (!launcher_ranks(&r)) {
    D.ranks = r;
    D.started = 1;
    return;
  }
#ifdef NPU_HAVE_MPI
  start_mpi();
  if (D.started > 0) atexit(stop_mpi);
#else
  D.ranks = r; /* ranks as the launcher says; collectives say MPI is missing */
  D.started = 1;
#endif
}

/* RANK_SIZE and RANK_ID against the ranks, once (D.mu held, the ranks known): the verdict
   goes to D.env_status and D.env_msg. */
static void check_env_locked(void) {
  if (D.env_checked || D.started <= 0) return;
  D.env_checked = true;
  const npuD_ranks *r = &D.ranks;
  int size = env_int("RANK_SIZE", -1), id = env_int("RANK_ID", -1);
  const char *how = r->mpi ? "MPI" : "the launcher";
  if (getenv("RANK_SIZE") && *getenv("RANK_SIZE") && size != r->size) {
    D.env_status = NPU_ERR_CONFLICT;
    snprintf(D.env_msg, sizeof D.env_msg, "RANK_SIZE=%.32s (environment) but %s started %d "
             "process%s%s", getenv("RANK_SIZE"), how, r->size, r->size == 1 ? "" : "es",
             r->size == 1 ? " (not under mpirun)" : "");
  } else if (getenv("RANK_ID") && *getenv("RANK_ID") && id != r->rank) {
    D.env_status = NPU_ERR_CONFLICT;
    snprintf(D.env_msg, sizeof D.env_msg, "RANK_ID=%.32s (environment) but this process is "
             "rank %d of %d for %s", getenv("RANK_ID"), r->rank, r->size, how);
  }
}

npu_status npuD_get_ranks(npu_context *ctx, npuD_ranks *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&D.mu);
  start_locked();
  check_env_locked();
  npuD_ranks r = D.ranks;
  int started = D.started;
  npu_status err = started < 0 ? D.err_status : D.env_status;
  char msg[256];
  if (err) memcpy(msg, started < 0 ? D.err : D.env_msg, sizeof msg);
  pthread_mutex_unlock(&D.mu);
  if (started < 0) return npuC_error(ctx, err, "MPI: %s", msg);
  if (err) return npuC_error(ctx, err, "%s", msg);
  *out = r;
  return NPU_OK;
}

/* ---- jobs ---------------------------------------------------------------------------------- */

static void job_free(job *j) {
  if (!j) return;
  j->magic = 0;
  free(j->send);
  free(j->recv);
  free(j);
}

/* A finished job, off the live list: kept as a spare (its buffers with it), else freed. */
static void job_recycle(job *j) {
  pthread_mutex_lock(&D.mu);
  if (D.n_spare < SPARE_JOBS) {
    j->magic = 0;
    j->next_queued = D.spare;
    D.spare = j;
    D.n_spare++;
    j = NULL;
  }
  pthread_mutex_unlock(&D.mu);
  job_free(j);
}

/* A job for comm_start: a spare, cleared but for its buffers, else a new one.  NULL: out of
   memory. */
static job *job_take(void) {
  pthread_mutex_lock(&D.mu);
  job *j = D.spare;
  if (j) {
    D.spare = j->next_queued;
    D.n_spare--;
  }
  pthread_mutex_unlock(&D.mu);
  if (!j) return calloc(1, sizeof *j);
  void *send = j->send, *recv = j->recv;
  size_t send_cap = j->send_cap, recv_cap = j->recv_cap;
  memset(j, 0, offsetof(job, msg)); /* msg, op and node are written before they are read */
  j->send = send, j->recv = recv, j->send_cap = send_cap, j->recv_cap = recv_cap;
  return j;
}

/* src cut to fit dst's n bytes (no snprintf: this is every collective's path). */
static void copy_name(char *dst, size_t n, const char *src) {
  size_t len = strnlen(src, n - 1);
  memcpy(dst, src, len);
  dst[len] = 0;
}

/* Makes *buf hold at least n bytes (its contents need not survive). */
static bool reserve(void **buf, size_t *cap, size_t n) {
  if (*buf && *cap >= n) return true;
  free(*buf);
  *cap = 0;
  if (!(*buf = malloc(n))) return false;
  *cap = n;
  return true;
}

static void job_fail(job *j, npu_status st, const char *fmt, ...) NPU_PRINTF(3, 4);
static void job_fail(job *j, npu_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->msg, sizeof j->msg, fmt, ap);
  va_end(ap);
  j->status = st;
}

/* Runs j with size 1 (no other rank): every collective is a copy. */
static void run_local(job *j) {
  if (j->kind == NPUX_COLL_BROADCAST && j->root != 0)
    job_fail(j, NPU_ERR_ARG, "root_rank %d but there is 1 rank", j->root);
  else if (j->rank_size && j->rank_size != 1)
    job_fail(j, NPU_ERR_ARG, "rank_size %d but there is 1 rank (not under mpirun)",
             j->rank_size);
  else
    memcpy(j->recv, j->send, (size_t)j->count * 4);
}

#ifdef NPU_HAVE_MPI
enum { HDR_SEQ, HDR_KIND, HDR_DTYPE, HDR_COUNT, HDR_ROOT, HDR_RED, HDR_RANK_SIZE, HDR_N,
       HDR_NDIM, HDR_DIMS, HDR_LEN = HDR_DIMS + NPU_MAX_DIMS };
enum { TAG_HEADER = 71 };

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *kind_name(npuX_coll_kind k) {
  static const char *const names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter"};
  return names[k];
}


/* Polls requests until all complete or the deadline passes; *missing gets, per request, 1 when
   it never completed.  Returns whether all completed. */
static bool poll_all(int n, MPI_Request *req, int64_t deadline, int *missing) {
  int spins = 0;
  for (;;) {
    int flag = 0;
    MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE);
    if (flag) return true;
    if (deadline && now_ms() >= deadline) break;
    if (++spins > 200) { /* past the first microseconds, give the core back between polls */
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
  for (int i = 0; i < n; i++) {
    int flag = 0;
    if (req[i] != MPI_REQUEST_NULL) MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
    missing[i] = req[i] != MPI_REQUEST_NULL && !flag;
  }
  return false;
}

static void describe(char *buf, size_t n, const int64_t *h) {
  int len = snprintf(buf, n, "%s of %s [", kind_name((npuX_coll_kind)h[HDR_KIND]),
                     npu_dtype_name((npu_dtype)h[HDR_DTYPE]));
  for (int i = 0; i < h[HDR_NDIM] && len < (int)n; i++)
    len += snprintf(buf + len, n - (size_t)len, "%s%lld", i ? "," : "", (long long)h[HDR_DIMS + i]);
  if (len < (int)n)
    snprintf(buf + len, n - (size_t)len, "]%s (%lld elements, collective #%lld)",
             h[HDR_N] > 1 ? " and more" : "", (long long)h[HDR_COUNT], (long long)h[HDR_SEQ]);
}

/* The timeout's message: names the ranks that did not arrive. */
static void fail_timeout(job *j, const char *phase, const int *missing, const int *peer, int n) {
  char who[160] = "";
  int len = 0;
  for (int i = 0; i < n && len < (int)sizeof who - 16; i++)
    if (missing[i]) len += snprintf(who + len, sizeof who - (size_t)len, "%s%d", len ? ", " : "", peer[i]);
  job_fail(j, NPU_ERR_TIMEOUT, "rank %d waited %lld ms (hccl_timeout) for the %s%s%s",
           D.ranks.rank, (long long)j->timeout_ms, phase, *who ? " of rank " : "", who);
  D.broken = true;
  snprintf(D.broken_msg, sizeof D.broken_msg, "%s '%s'", j->op, j->node);
}

static MPI_Op mpi_op(npuX_reduction r) {
  switch (r) {
  case NPUX_RED_PROD: return MPI_PROD;
  case NPUX_RED_MAX: return MPI_MAX;
  case NPUX_RED_MIN: return MPI_MIN;
  default: return MPI_SUM;
  }
}

static void run_mpi(job *j) {
  int size = D.ranks.size, me = D.ranks.rank;
  if (size == 1) return run_local(j);
  int64_t deadline = j->timeout_ms ? now_ms() + j->timeout_ms : 0;
  /* phase 1: headers to and from every other rank (arrays made at the first collective) */
  if (!D.hdr) D.hdr = calloc((size_t)size * HDR_LEN, sizeof *D.hdr);
  if (!D.hdr_req) D.hdr_req = calloc((size_t)size * 2, sizeof *D.hdr_req);
  if (!D.hdr_missing) D.hdr_missing = calloc((size_t)size * 2, sizeof *D.hdr_missing);
  if (!D.hdr_peer) D.hdr_peer = calloc((size_t)size * 2, sizeof *D.hdr_peer);
  int64_t *theirs = D.hdr;
  MPI_Request *req = D.hdr_req;
  int *missing = D.hdr_missing, *peer = D.hdr_peer;
  if (!theirs || !req || !missing || !peer) {
    job_fail(j, NPU_ERR_NOMEM, "out of memory for the headers");
    return;
  }
  int64_t *mine = theirs + (size_t)me * HDR_LEN; /* on the heap: an abandoned send reads it */
  memset(mine, 0, HDR_LEN * sizeof *mine); /* dims past ndim compare equal on every rank */
  mine[HDR_SEQ] = (int64_t)D.seq;
  mine[HDR_KIND] = j->kind;
  mine[HDR_DTYPE] = j->dtype;
  mine[HDR_COUNT] = j->count;
  mine[HDR_ROOT] = j->kind == NPUX_COLL_BROADCAST ? j->root : 0;
  mine[HDR_RED] = j->kind == NPUX_COLL_ALLREDUCE || j->kind == NPUX_COLL_REDUCE_SCATTER
                      ? j->reduction : 0;
  mine[HDR_RANK_SIZE] = j->rank_size;
  mine[HDR_N] = j->n_tensors;
  mine[HDR_NDIM] = j->shape0[0];
  for (int i = 0; i < j->shape0[0]; i++) mine[HDR_DIMS + i] = j->shape0[1 + i];
  int n = 0;
  for (int r = 0; r < size; r++) {
    if (r == me) continue;
    peer[n] = r;
    MPI_Irecv(theirs + (size_t)r * HDR_LEN, HDR_LEN, MPI_INT64_T, r, TAG_HEADER, D.comm, &req[n++]);
    peer[n] = r;
    MPI_Isend(mine, HDR_LEN, MPI_INT64_T, r, TAG_HEADER, D.comm, &req[n++]);
  }
  if (!poll_all(n, req, deadline, missing)) {
    fail_timeout(j, "headers of the same collective", missing, peer, n);
    D.hdr = NULL; /* abandoned requests may still use them: never freed */
    D.hdr_req = NULL;
    return;
  }
  for (int r = 0; r < size; r++) {
    const int64_t *h = theirs + (size_t)r * HDR_LEN;
    if (!memcmp(h, mine, HDR_LEN * sizeof *mine)) continue;
    char a[200], b[200];
    describe(a, sizeof a, mine);
    describe(b, sizeof b, h);
    job_fail(j, h[HDR_COUNT] != mine[HDR_COUNT] || h[HDR_NDIM] != mine[HDR_NDIM] ? NPU_ERR_SHAPE
                                                                            : NPU_ERR_ARG,
             "the ranks disagree: rank %d gives %s, rank %d gives %s", me, a, r, b);
    return;
  }
  if (j->kind == NPUX_COLL_BROADCAST && j->root >= size) {
    job_fail(j, NPU_ERR_ARG, "root_rank %d but there are %d ranks", j->root, size);
    return;
  }
  if (j->rank_size && j->rank_size != size) {
    job_fail(j, NPU_ERR_ARG, "rank_size %d but MPI has %d ranks", j->rank_size, size);
    return;
  }
  /* phase 2: the collective */
  MPI_Datatype t = j->dtype == NPU_DTYPE_I32 ? MPI_INT : MPI_FLOAT;
  MPI_Request cr = MPI_REQUEST_NULL;
  int cnt = (int)j->count;
  switch (j->kind) {
  case NPUX_COLL_ALLREDUCE:
    MPI_Iallreduce(j->send, j->recv, cnt, t, mpi_op(j->reduction), D.comm, &cr);
    break;
  case NPUX_COLL_BROADCAST:
    memcpy(j->recv, j->send, (size_t)j->count * 4);
    MPI_Ibcast(j->recv, cnt, t, j->root, D.comm, &cr);
    break;
  case NPUX_COLL_ALLGATHER:
    MPI_Iallgather(j->send, cnt, t, j->recv, cnt, t, D.comm, &cr);
    break;
  case NPUX_COLL_REDUCE_SCATTER:
    MPI_Ireduce_scatter_block(j->send, j->recv, (int)j->out_count, t, mpi_op(j->reduction),
                              D.comm, &cr);
    break;
  }
  int miss = 0, nobody = -1;
  if (!poll_all(1, &cr, deadline, &miss)) {
    fail_timeout(j, "other ranks to join the collective", &miss, &nobody, 0);
    j->send = j->recv = NULL; /* abandoned: MPI may still touch them */
    j->send_cap = j->recv_cap = 0;
  }
}

static void *comm_thread(void *arg) {
  (void)arg;
  int provided = 0;
  int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  pthread_mutex_lock(&D.mu);
  if (rc != MPI_SUCCESS) {
    D.started = -1;
    D.err_status = NPU_ERR_INTERNAL;
    snprintf(D.err, sizeof D.err, "MPI_Init_thread failed (%d)", rc);
    D.thread_running = false;
    pthread_cond_broadcast(&D.cv);
    pthread_mutex_unlock(&D.mu);
    return NULL;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &D.comm);
  MPI_Comm_rank(D.comm, &D.ranks.rank);
  MPI_Comm_size(D.comm, &D.ranks.size);
  MPI_Comm local;
  MPI_Comm_split_type(D.comm, MPI_COMM_TYPE_SHARED, D.ranks.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &D.ranks.local_rank);
  MPI_Comm_size(local, &D.ranks.local_size);
  MPI_Comm_free(&local);
  D.ranks.mpi = true;
  D.started = 1;
  pthread_cond_broadcast(&D.cv);
  for (;;) {
    while (!D.queue_head && !D.quit) pthread_cond_wait(&D.cv, &D.mu);
    if (!D.queue_head) break; /* quit, nothing left */
    job *j = D.queue_head;
    D.queue_head = j->next_queued;
    if (!D.queue_head) D.queue_tail = NULL;
    bool broken = D.broken;
    pthread_mutex_unlock(&D.mu);
    if (broken)
      job_fail(j, NPU_ERR_STATE, "an earlier collective (%s) timed out: the ranks are out of "
               "step; start the job again", D.broken_msg);
    else
      run_mpi(j);
    pthread_mutex_lock(&D.mu);
    D.seq++;
    j->done = true;
    if (j->abandoned) job_free(j);
    pthread_cond_broadcast(&D.cv);
  }
  D.thread_running = false;
  pthread_mutex_unlock(&D.mu);
  MPI_Finalize();
  return NULL;
}
#endif

/* ---- the communicator (npuX_comm) ---------------------------------------------------------- */

static npu_status comm_start(const npuX_comm *comm, npu_context *ctx, const npuX_coll *c,
                             int64_t *ticket) {
  npuD_ranks r;
  npu_status st = npuD_get_ranks(ctx, &r);
  if (st) return st;
#ifndef NPU_HAVE_MPI
  return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "%s '%s': lua-npu was built without MPI: install "
                    "Open MPI (libopenmpi-dev, openmpi-bin; tools/install-deps.sh) and rebuild",
                    c->op, c->node);
#endif
  job *j = job_take();
  if (!j) return NPU_ERR_NOMEM;
  j->magic = JOB_MAGIC;
  j->kind = c->kind;
  j->reduction = c->reduction;
  j->root = c->root;
  j->rank_size = c->rank_size;
  j->n_tensors = c->n;
  j->dtype = c->in[0]->dtype;
  j->timeout_ms = comm->timeout_ms;
  copy_name(j->op, sizeof j->op, c->op); /* the job may outlive the graph (abandoned) */
  copy_name(j->node, sizeof j->node, c->node);
  j->shape0[0] = c->in[0]->ndim;
  for (int i = 0; i < c->in[0]->ndim; i++) j->shape0[1 + i] = c->in[0]->shape[i];
  for (int i = 0; i < c->n; i++) j->count += c->in[i]->numel;
  int size = r.mpi ? r.size : 1;
  j->out_count = c->kind == NPUX_COLL_ALLGATHER ? j->count * size
                 : c->kind == NPUX_COLL_REDUCE_SCATTER && j->count % size == 0 ? j->count / size
                                                                               : j->count;
  if (!reserve(&j->send, &j->send_cap, (size_t)(j->count ? j->count : 1) * 4) ||
      !reserve(&j->recv, &j->recv_cap, (size_t)(j->out_count ? j->out_count : 1) * 4)) {
    job_free(j);
    return NPU_ERR_NOMEM;
  }
  char *w = j->send;
  for (int i = 0; i < c->n; i++) { /* one buffer, float16 widened */
    const npu_tensor *t = c->in[i];
    if (t->dtype == NPU_DTYPE_F16) {
      const uint16_t *h = t->data;
      float *f = (float *)w;
      for (int64_t k = 0; k < t->numel; k++) f[k] = npu_f16_to_f32(h[k]);
    } else {
      memcpy(w, t->data, (size_t)t->numel * 4);
    }
    w += (size_t)t->numel * 4;
  }
  pthread_mutex_lock(&D.mu);
  j->next_live = D.live;
  D.live = j;
  if (!r.mpi || !D.thread_running) { /* rank 0 of 1: done here */
    run_local(j);
    j->done = true;
  } else {
    if (D.queue_tail) D.queue_tail->next_queued = j;
    else D.queue_head = j;
    D.queue_tail = j;
    pthread_cond_broadcast(&D.cv);
  }
  pthread_mutex_unlock(&D.mu);
  *ticket = (int64_t)(intptr_t)j;
  return NPU_OK;
}

/* Takes j off the live list (D.mu held); false when the ticket names no live job. */
static bool unlink_live(job *j) {
  for (job **p = &D.live; *p; p = &(*p)->next_live)
    if (*p == j) {
      *p = j->next_live;
      return true;
    }
  return false;
}

static npu_status comm_finish(const npuX_comm *comm, npu_context *ctx, int64_t ticket,
                              const npuK_pool *pool, int n, npu_tensor *const *out) {
  (void)comm;
  job *j = (job *)(intptr_t)ticket;
  pthread_mutex_lock(&D.mu);
  if (!unlink_live(j)) {
    pthread_mutex_unlock(&D.mu);
    return npuC_error(ctx, NPU_ERR_ARG, "collective ticket %lld names no collective in flight",
                      (long long)ticket);
  }
  while (!j->done) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 1000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&D.cv, &D.mu, &ts);
    if (!j->done && npuK_stopped(pool)) { /* cancelled: the thread frees it when done */
      j->abandoned = true;
      pthread_mutex_unlock(&D.mu);
      return NPU_ERR_CANCELLED;
    }
  }
  pthread_mutex_unlock(&D.mu);
  npu_status st = j->status;
  if (st) {
    st = npuC_error(ctx, st, "%s '%s': %s", j->op, j->node, j->msg);
    job_recycle(j);
    return st;
  }
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += out[i]->numel;
  if (total != j->out_count) {
    st = npuC_error(ctx, NPU_ERR_SHAPE, "%s '%s': the collective made %lld elements, the step "
                    "expects %lld", j->op, j->node, (long long)j->out_count, (long long)total);
    job_recycle(j);
    return st;
  }
  const char *r = j->recv;
  for (int i = 0; i < n; i++) {
    npu_tensor *t = out[i];
    if (t->dtype == NPU_DTYPE_F16) {
      const float *f = (const float *)r;
      uint16_t *h = t->data;
      for (int64_t k = 0; k < t->numel; k++) h[k] = npu_f32_to_f16(f[k]);
    } else {
      memcpy(t->data, r, (size_t)t->numel * 4);
    }
    r += (size_t)t->numel * 4;
  }
  job_recycle(j);
  return NPU_OK;
}

void npuD_comm_init(npuX_comm *comm, int64_t timeout_ms) {
  *comm = (npuX_comm){.start = comm_start, .finish = comm_finish, .timeout_ms = timeout_ms};
}
