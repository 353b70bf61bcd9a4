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
 *
 * Groups (npu_dist_create_group): a named list of world ranks with communicators of their own
 * (MPI_Comm_create_group: only the members take part), made on the communication thread after
 * the members have exchanged a header naming the group, so members that disagree or never come
 * fail with a message instead of blocking in MPI.  A process outside a group records it too
 * (its ranks answer the rank translations) but cannot use it.  Every job runs on its group's
 * communicators; collective headers carry a sequence number per group.
 *
 * Send and receive are jobs too, on a second communicator of the group (so their tags never
 * meet the collectives' headers), each sr_tag giving two MPI tags: 2 t for the headers, 2 t + 1
 * for the data.  The sender sends a header (dtype, shape) and waits for the receiver's (what
 * it declared); only when they agree does the data move, so a mismatch fails on both ranks
 * naming both shapes.  A receive that times out cancels its posted header receive: nothing is
 * left pending and the ranks stay in step.
 *
 * The process-wide state below is the library's one mutable global: MPI_Init is once per
 * process.  It is guarded by its mutex; its own memory (headers, groups) is plain malloc (it
 * outlives contexts).  The jobs and their wire buffers are the staging memory of a session's
 * steps: they come from the session's context (npuC_alloc), so memory_limit bounds them and
 * the context's live and peak bytes count them; each job holds a reference to its context.
 *
 * Steady state allocates nothing: a finished job goes to a short list of spares with its wire
 * buffers (up to SPARE_JOBS; a step of the same context and sizes takes one back, and
 * npuD_comm_close frees a context's when its session goes), the headers' arrays are the
 * thread's own for the life of the process (their size is the rank count), and the
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
#include "ops/hcom.h"

#ifdef NPU_HAVE_MPI
#include <dlfcn.h>
#include <mpi.h>
#endif

#define JOB_MAGIC 0x6863636c6a6f6221ull
#define WORLD "hccl_world_group"

enum { MAX_GROUPS = 64 };
/* Jobs other than the collectives: making and dropping a group's communicators. */
enum { JOB_CREATE = NPUX_COLL_RECV + 1, JOB_DESTROY };

typedef struct group group;

typedef struct job {
  uint64_t magic;
  struct job *next_queued, *next_live;
  npu_context *ctx;  /* its memory's (retained) */
  group *grp;
  int peer, tag;     /* send, receive */
  int kind;          /* npuX_coll_kind, JOB_CREATE, JOB_DESTROY */
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
  /* the group's name when the job started ("" for the world): what the step's error names, as
     the group may be destroyed between a start step and its wait (hcom_allreduce_start/_wait) */
  char group_name[NPUX_HCOM_GROUP_MAX];
} job;

struct group {
  char name[NPUX_HCOM_GROUP_MAX];
  int n;      /* ranks */
  int *world; /* world rank of each group rank (plain malloc); NULL for the world group */
  int rank;   /* this process's rank in it, -1: not a member */
  int local_rank, local_size; /* members: among the group's ranks on this machine */
  uint64_t seq; /* collectives run on it: the headers' sequence number */
#ifdef NPU_HAVE_MPI
  MPI_Comm comm, p2p; /* members under MPI: collectives, send/receive */
#endif
  job destroy; /* drops the communicators: destroy_group allocates nothing */
};


typedef struct dist_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started;  /* 0: not yet, 1: ranks known, -1: failed (err) */
  npu_status err_status;
  char err[256];
  npuD_ranks ranks;
  group world;                 /* hccl_world_group, once the ranks are known */
  group *groups[MAX_GROUPS];   /* by name; [0] is &world */
  int n_groups;
  bool thread_running, quit;
  pthread_t thread;
  job *queue_head, *queue_tail; /* started, not yet run */
  job *live;                    /* started, not yet finished (tickets) */
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
  int64_t *p2p_hdr; /* send/receive: this rank's header, then the peer's */
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

/* The world group from the ranks (D.mu held, or on the thread before it says started). */
static void set_world(void) {
  group *w = &D.world;
  strcpy(w->name, WORLD);
  w->n = D.ranks.size;
  w->rank = D.ranks.rank;
  w->local_rank = D.ranks.local_rank;
  w->local_size = D.ranks.local_size;
  D.groups[0] = w;
  D.n_groups = 1;
}

static void start_locked(void) {
  if (D.started) return;
  npuD_ranks r = {.rank = 0, .size = 1, .local_rank = 0, .local_size = 1};
  if (!launcher_ranks(&r)) {
    D.ranks = r;
    set_world();
    D.started = 1;
    return;
  }
#ifdef NPU_HAVE_MPI
  start_mpi();
  if (D.started > 0) atexit(stop_mpi);
#else
  D.ranks = r; /* ranks as the launcher says; collectives say MPI is missing */
  set_world();
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
  npu_context *ctx = j->ctx;
  j->magic = 0;
  npuC_free(ctx, j->send);
  npuC_free(ctx, j->recv);
  npuC_free(ctx, j);
  npu_context_release(ctx);
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

/* A job for comm_start on ctx's memory: a spare of ctx, cleared but for its buffers, else a
   new one.  NULL: out of memory (ctx's message says so). */
static job *job_take(npu_context *ctx) {
  pthread_mutex_lock(&D.mu);
  job **p = &D.spare;
  while (*p && (*p)->ctx != ctx) p = &(*p)->next_queued;
  job *j = *p;
  if (j) {
    *p = j->next_queued;
    D.n_spare--;
  }
  pthread_mutex_unlock(&D.mu);
  if (!j) {
    if (!(j = npuC_calloc(ctx, 1, sizeof *j))) return NULL;
    j->ctx = npu_context_retain(ctx);
    return j;
  }
  void *send = j->send, *recv = j->recv;
  size_t send_cap = j->send_cap, recv_cap = j->recv_cap;
  memset(j, 0, offsetof(job, msg)); /* msg, op and node are written before they are read */
  j->send = send, j->recv = recv, j->send_cap = send_cap, j->recv_cap = recv_cap;
  j->ctx = ctx;
  return j;
}

void npuD_comm_close(npu_context *ctx) {
  job *mine = NULL;
  pthread_mutex_lock(&D.mu);
  for (job **p = &D.spare; *p;) {
    job *j = *p;
    if (j->ctx != ctx) {
      p = &j->next_queued;
      continue;
    }
    *p = j->next_queued;
    D.n_spare--;
    j->next_queued = mine;
    mine = j;
  }
  pthread_mutex_unlock(&D.mu);
  while (mine) {
    job *next = mine->next_queued;
    job_free(mine);
    mine = next;
  }
}

/* src cut to fit dst's n bytes (no snprintf: this is every collective's path). */
static void copy_name(char *dst, size_t n, const char *src) {
  size_t len = strnlen(src, n - 1);
  memcpy(dst, src, len);
  dst[len] = 0;
}

/* Makes *buf hold at least n bytes of ctx's memory (its contents need not survive). */
static bool reserve(npu_context *ctx, void **buf, size_t *cap, size_t n) {
  if (*buf && *cap >= n) return true;
  npuC_free(ctx, *buf);
  *buf = NULL;
  *cap = 0;
  if (!(*buf = npuC_alloc(ctx, n))) return false;
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

/* Runs j with size 1 (no other rank): every collective is a copy; making or dropping a group
   of one needs no MPI. */
static void run_local(job *j) {
  const char *where = j->grp && j->grp != &D.world ? " in the group" : " (not under mpirun)";
  if (j->kind == JOB_CREATE || j->kind == JOB_DESTROY)
    return;
  if (j->kind == NPUX_COLL_BROADCAST && j->root != 0)
    job_fail(j, NPU_ERR_ARG, "root_rank %d but there is 1 rank", j->root);
  else if (j->rank_size && j->rank_size != 1)
    job_fail(j, NPU_ERR_ARG, "rank_size %d but there is 1 rank%s", j->rank_size, where);
  else
    memcpy(j->recv, j->send, (size_t)j->count * 4);
}

#ifdef NPU_HAVE_MPI
enum { HDR_SEQ, HDR_KIND, HDR_DTYPE, HDR_COUNT, HDR_ROOT, HDR_RED, HDR_RANK_SIZE, HDR_N,
       HDR_NDIM, HDR_DIMS, HDR_LEN = HDR_DIMS + NPU_MAX_DIMS };
enum { TAG_HEADER = 71, TAG_GROUP = 72, TAG_CREATE = 73 };

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *kind_name(int k) {
  static const char *const names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter",
                                      "send", "receive", "create_group", "destroy_group"};
  return k >= 0 && k <= JOB_DESTROY ? names[k] : "?";
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

/* "float32 [2,3]" from a header (dtype, ndim, dims). */
static int shape_text(char *buf, size_t n, const int64_t *h) {
  int len = snprintf(buf, n, "%s [", npu_dtype_name((npu_dtype)h[HDR_DTYPE]));
  for (int i = 0; i < h[HDR_NDIM] && len < (int)n; i++)
    len += snprintf(buf + len, n - (size_t)len, "%s%lld", i ? "," : "", (long long)h[HDR_DIMS + i]);
  if (len < (int)n) len += snprintf(buf + len, n - (size_t)len, "]");
  return len;
}

static void describe(char *buf, size_t n, const int64_t *h) {
  int len = snprintf(buf, n, "%s of ", kind_name((int)h[HDR_KIND]));
  if (len < (int)n) len += shape_text(buf + len, n - (size_t)len, h);
  if (len < (int)n)
    snprintf(buf + len, n - (size_t)len, "%s (%lld elements, collective #%lld)",
             h[HDR_N] > 1 ? " and more" : "", (long long)h[HDR_COUNT], (long long)h[HDR_SEQ]);
}

/* The process is out of step with the others: later jobs fail at once. */
static void set_broken(const job *j) {
  D.broken = true;
  snprintf(D.broken_msg, sizeof D.broken_msg, "%s '%s'", j->op, j->node);
}

/* The timeout's message: names the ranks that did not arrive. */
static void fail_timeout(job *j, const char *phase, const int *missing, const int *peer, int n,
                         bool broken) {
  char who[160] = "";
  int len = 0;
  for (int i = 0; i < n && len < (int)sizeof who - 16; i++)
    if (missing[i] && (!i || peer[i] != peer[i - 1] || !missing[i - 1]))
      len += snprintf(who + len, sizeof who - (size_t)len, "%s%d", len ? ", " : "", peer[i]);
  job_fail(j, NPU_ERR_TIMEOUT, "rank %d waited %lld ms (hccl_timeout) for the %s%s%s",
           j->grp->rank, (long long)j->timeout_ms, phase, *who ? " of rank " : "", who);
  if (broken) set_broken(j);
}

static MPI_Op mpi_op(npuX_reduction r) {
  switch (r) {
  case NPUX_RED_PROD: return MPI_PROD;
  case NPUX_RED_MAX: return MPI_MAX;
  case NPUX_RED_MIN: return MPI_MIN;
  default: return MPI_SUM;
  }
}

/* The header arrays, made at the first job that needs them; false: out of memory (j fails). */
static bool headers_ready(job *j) {
  size_t size = (size_t)D.ranks.size;
  if (!D.hdr) D.hdr = calloc(size * HDR_LEN, sizeof *D.hdr);
  if (!D.hdr_req) D.hdr_req = calloc(size * 2, sizeof *D.hdr_req);
  if (!D.hdr_missing) D.hdr_missing = calloc(size * 2, sizeof *D.hdr_missing);
  if (!D.hdr_peer) D.hdr_peer = calloc(size * 2, sizeof *D.hdr_peer);
  if (!D.p2p_hdr) D.p2p_hdr = calloc(2 * HDR_LEN, sizeof *D.p2p_hdr);
  if (D.hdr && D.hdr_req && D.hdr_missing && D.hdr_peer && D.p2p_hdr) return true;
  job_fail(j, NPU_ERR_NOMEM, "out of memory for the headers");
  return false;
}

/* Sends `mine` (row me of D.hdr) to every other member of comm (n ranks, world ranks of the
   peers in ids or NULL for 0..n-1) and receives theirs into D.hdr's rows; false: j failed (a
   timeout: the arrays are dropped, abandoned requests may still use them). */
static bool exchange_headers(job *j, MPI_Comm comm, int n_ranks, int me, int tag,
                             int64_t deadline, const char *phase) {
  int64_t *theirs = D.hdr, *mine = D.hdr + (size_t)me * HDR_LEN;
  MPI_Request *req = D.hdr_req;
  int *missing = D.hdr_missing, *peer = D.hdr_peer;
  int n = 0;
  for (int r = 0; r < n_ranks; r++) {
    if (r == me) continue;
    peer[n] = r;
    MPI_Irecv(theirs + (size_t)r * HDR_LEN, HDR_LEN, MPI_INT64_T, r, tag, comm, &req[n++]);
    peer[n] = r;
    MPI_Isend(mine, HDR_LEN, MPI_INT64_T, r, tag, comm, &req[n++]);
  }
  if (poll_all(n, req, deadline, missing)) return true;
  fail_timeout(j, phase, missing, peer, n, true);
  D.hdr = NULL; /* abandoned requests may still use them: never freed */
  D.hdr_req = NULL;
  return false;
}

static void run_collective(job *j) {
  group *g = j->grp;
  int size = g->n, me = g->rank;
  if (size == 1) return run_local(j);
  int64_t deadline = j->timeout_ms ? now_ms() + j->timeout_ms : 0;
  /* phase 1: headers to and from every other rank of the group */
  int64_t *mine = D.hdr + (size_t)me * HDR_LEN; /* on the heap: an abandoned send reads it */
  memset(mine, 0, HDR_LEN * sizeof *mine); /* dims past ndim compare equal on every rank */
  mine[HDR_SEQ] = (int64_t)g->seq++;
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
  if (!exchange_headers(j, g->comm, size, me, TAG_HEADER, deadline,
                        "headers of the same collective"))
    return;
  for (int r = 0; r < size; r++) {
    const int64_t *h = D.hdr + (size_t)r * HDR_LEN;
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
    job_fail(j, NPU_ERR_ARG, "rank_size %d but %s has %d ranks", j->rank_size,
             g == &D.world ? "MPI" : "the group", size);
    return;
  }
  /* phase 2: the collective */
  MPI_Datatype t = j->dtype == NPU_DTYPE_I32 ? MPI_INT : MPI_FLOAT;
  MPI_Request cr = MPI_REQUEST_NULL;
  int cnt = (int)j->count;
  switch (j->kind) {
  case NPUX_COLL_ALLREDUCE:
    MPI_Iallreduce(j->send, j->recv, cnt, t, mpi_op(j->reduction), g->comm, &cr);
    break;
  case NPUX_COLL_BROADCAST:
    memcpy(j->recv, j->send, (size_t)j->count * 4);
    MPI_Ibcast(j->recv, cnt, t, j->root, g->comm, &cr);
    break;
  case NPUX_COLL_ALLGATHER:
    MPI_Iallgather(j->send, cnt, t, j->recv, cnt, t, g->comm, &cr);
    break;
  case NPUX_COLL_REDUCE_SCATTER:
    MPI_Ireduce_scatter_block(j->send, j->recv, (int)j->out_count, t, mpi_op(j->reduction),
                              g->comm, &cr);
    break;
  }
  int miss = 0, nobody = -1;
  if (!poll_all(1, &cr, deadline, &miss)) {
    fail_timeout(j, "other ranks to join the collective", &miss, &nobody, 0, true);
    j->send = j->recv = NULL; /* abandoned: MPI may still touch them (they stay accounted) */
    j->send_cap = j->recv_cap = 0;
  }
}

/* Waits for one request; a receive that times out is cancelled (*cancelled: nothing left
   pending), else the request is abandoned.  Returns whether it completed. */
static bool wait_one(MPI_Request *req, int64_t deadline, bool cancel, bool *cancelled) {
  int miss = 0;
  *cancelled = false;
  if (poll_all(1, req, deadline, &miss)) return true;
  if (!cancel) return false;
  MPI_Status status;
  MPI_Cancel(req);
  MPI_Wait(req, &status);
  int flag = 0;
  MPI_Test_cancelled(&status, &flag);
  *cancelled = flag != 0;
  return !flag; /* it completed after all: the message came as it was cancelled */
}

/* A p2p mismatch: NPU_ERR_DTYPE when only the dtypes differ, else NPU_ERR_SHAPE. */
static void fail_mismatch(job *j, const int64_t *sent, const int64_t *declared, int sender,
                          int receiver) {
  char a[160], b[160];
  shape_text(a, sizeof a, sent);
  shape_text(b, sizeof b, declared);
  bool same_shape = sent[HDR_NDIM] == declared[HDR_NDIM] &&
                    !memcmp(sent + HDR_DIMS, declared + HDR_DIMS, NPU_MAX_DIMS * sizeof *sent);
  job_fail(j, same_shape ? NPU_ERR_DTYPE : NPU_ERR_SHAPE, "rank %d sends %s but rank %d "
           "receives %s (sr_tag %d): the receive must declare the sent tensor's shape and dtype",
           sender, a, receiver, b, j->tag);
}

static bool same_tensor(const int64_t *a, const int64_t *b) {
  return a[HDR_DTYPE] == b[HDR_DTYPE] && a[HDR_NDIM] == b[HDR_NDIM] &&
         !memcmp(a + HDR_DIMS, b + HDR_DIMS, NPU_MAX_DIMS * sizeof *a);
}

/* The data of a send (from j->send) or a receive (into j->recv), on tag 2 sr_tag + 1.  A
   timeout abandons the buffer to MPI (it stays allocated and accounted). */
static void move_data(job *j, bool sending, int64_t deadline) {
  MPI_Datatype t = j->dtype == NPU_DTYPE_I32 ? MPI_INT : MPI_FLOAT;
  MPI_Request dr;
  bool cancelled;
  int peer = j->peer;
  if (sending) MPI_Isend(j->send, (int)j->count, t, peer, 2 * j->tag + 1, j->grp->p2p, &dr);
  else MPI_Irecv(j->recv, (int)j->count, t, peer, 2 * j->tag + 1, j->grp->p2p, &dr);
  if (wait_one(&dr, deadline, false, &cancelled)) return;
  fail_timeout(j, sending ? "receive of the data" : "data of the send", (int[]){1}, &peer, 1, true);
  if (sending) j->send = NULL, j->send_cap = 0;
  else j->recv = NULL, j->recv_cap = 0;
}

/* Send or receive: header, the peer's header, then (when they agree) the data. */
static void run_p2p(job *j) {
  group *g = j->grp;
  int64_t deadline = j->timeout_ms ? now_ms() + j->timeout_ms : 0;
  int64_t *mine = D.p2p_hdr, *theirs = D.p2p_hdr + HDR_LEN;
  memset(mine, 0, 2 * HDR_LEN * sizeof *mine);
  mine[HDR_SEQ] = j->tag;
  mine[HDR_KIND] = j->kind;
  mine[HDR_DTYPE] = j->dtype;
  mine[HDR_COUNT] = j->count;
  mine[HDR_NDIM] = j->shape0[0];
  for (int i = 0; i < j->shape0[0]; i++) mine[HDR_DIMS + i] = j->shape0[1 + i];
  int htag = 2 * j->tag, peer = j->peer;
  bool cancelled;
  if (j->kind == NPUX_COLL_SEND) {
    MPI_Request req[2];
    int missing[2], peers[2] = {peer, peer};
    MPI_Irecv(theirs, HDR_LEN, MPI_INT64_T, peer, htag, g->p2p, &req[0]);
    MPI_Isend(mine, HDR_LEN, MPI_INT64_T, peer, htag, g->p2p, &req[1]);
    if (!poll_all(2, req, deadline, missing)) {
      fail_timeout(j, "receive", missing, peers, 2, true);
      D.p2p_hdr = NULL; /* abandoned requests may still use it */
      return;
    }
    if (theirs[HDR_KIND] != NPUX_COLL_RECV) { /* its header, not a receiver's answer */
      job_fail(j, NPU_ERR_ARG, "rank %d sends to rank %d with sr_tag %d at the same time as "
               "rank %d sends to it: sends are synchronous, so one of them must receive first",
               g->rank, peer, j->tag, peer);
      return;
    }
    if (!same_tensor(mine, theirs)) return fail_mismatch(j, mine, theirs, g->rank, peer);
    return move_data(j, true, deadline);
  }
  MPI_Request hr;
  MPI_Irecv(theirs, HDR_LEN, MPI_INT64_T, peer, htag, g->p2p, &hr);
  if (!wait_one(&hr, deadline, true, &cancelled)) {
    /* cancelled: nothing pending, the ranks stay in step */
    fail_timeout(j, "send", (int[]){1}, &peer, 1, !cancelled);
    return;
  }
  /* the verdict: what this rank declared, so the sender can name both */
  MPI_Request vr;
  MPI_Isend(mine, HDR_LEN, MPI_INT64_T, peer, htag, g->p2p, &vr);
  if (!wait_one(&vr, deadline, false, &cancelled)) {
    fail_timeout(j, "send", (int[]){1}, &peer, 1, true);
    D.p2p_hdr = NULL;
    return;
  }
  if (!same_tensor(mine, theirs)) return fail_mismatch(j, theirs, mine, peer, g->rank);
  move_data(j, false, deadline);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Makes group j->grp's communicators: its members first agree (a header naming the group and
   its ranks, over the world), then MPI_Comm_create_group, which then cannot block. */
static void run_create(job *j) {
  group *g = j->grp;
  int64_t deadline = j->timeout_ms ? now_ms() + j->timeout_ms : 0;
  int me = D.ranks.rank;
  int64_t *mine = D.hdr + (size_t)me * HDR_LEN;
  memset(mine, 0, HDR_LEN * sizeof *mine);
  mine[HDR_KIND] = JOB_CREATE;
  mine[HDR_COUNT] = g->n;
  mine[HDR_ROOT] = (int64_t)fnv1a(0xcbf29ce484222325ull, g->name, strlen(g->name));
  mine[HDR_RED] = (int64_t)fnv1a(0xcbf29ce484222325ull, g->world, (size_t)g->n * sizeof *g->world);
  /* exchange with the members only: their world ranks index D.hdr */
  MPI_Request *req = D.hdr_req;
  int *missing = D.hdr_missing, *peer = D.hdr_peer, n = 0;
  for (int i = 0; i < g->n; i++) {
    int r = g->world[i];
    if (r == me) continue;
    peer[n] = r;
    MPI_Irecv(D.hdr + (size_t)r * HDR_LEN, HDR_LEN, MPI_INT64_T, r, TAG_GROUP, D.comm, &req[n++]);
    peer[n] = r;
    MPI_Isend(mine, HDR_LEN, MPI_INT64_T, r, TAG_GROUP, D.comm, &req[n++]);
  }
  if (!poll_all(n, req, deadline, missing)) {
    char who[160] = "";
    int len = 0;
    for (int i = 0; i < n && len < (int)sizeof who - 16; i += 2)
      if (missing[i] || missing[i + 1])
        len += snprintf(who + len, sizeof who - (size_t)len, "%s%d", len ? ", " : "", peer[i]);
    job_fail(j, NPU_ERR_TIMEOUT, "rank %d waited %lld ms for world rank%s %s to create the "
             "group too", me, (long long)j->timeout_ms, strchr(who, ',') ? "s" : "", who);
    set_broken(j);
    D.hdr = NULL;
    D.hdr_req = NULL;
    return;
  }
  for (int i = 0; i < g->n; i++) {
    const int64_t *h = D.hdr + (size_t)g->world[i] * HDR_LEN;
    if (!memcmp(h, mine, HDR_LEN * sizeof *mine)) continue;
    job_fail(j, NPU_ERR_ARG, "world rank %d creates another group at the same time (another "
             "name or other ranks): the members must create the same groups in the same "
             "order", g->world[i]);
    return;
  }
  MPI_Group world, sub;
  MPI_Comm_group(D.comm, &world);
  MPI_Group_incl(world, g->n, g->world, &sub);
  MPI_Comm_create_group(D.comm, sub, TAG_CREATE, &g->comm);
  MPI_Group_free(&sub);
  MPI_Group_free(&world);
  MPI_Comm_dup(g->comm, &g->p2p);
  MPI_Comm local;
  MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &g->local_rank);
  MPI_Comm_size(local, &g->local_size);
  MPI_Comm_free(&local);
}

static void run_job(job *j) {
  if (j->kind == JOB_DESTROY) {
    if (j->grp->comm != MPI_COMM_NULL) MPI_Comm_free(&j->grp->comm);
    if (j->grp->p2p != MPI_COMM_NULL) MPI_Comm_free(&j->grp->p2p);
    return;
  }
  if (D.ranks.size == 1) return run_local(j);
  if (!headers_ready(j)) return;
  if (j->kind == JOB_CREATE) run_create(j);
  else if (j->kind == NPUX_COLL_SEND || j->kind == NPUX_COLL_RECV) run_p2p(j);
  else run_collective(j);
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
  set_world();
  D.world.comm = D.comm;
  MPI_Comm_dup(D.comm, &D.world.p2p);
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
    if (broken && j->kind != JOB_DESTROY)
      job_fail(j, NPU_ERR_STATE, "an earlier collective (%s) timed out: the ranks are out of "
               "step; start the job again", D.broken_msg);
    else
      run_job(j);
    pthread_mutex_lock(&D.mu);
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

/* ---- groups -------------------------------------------------------------------------------- */

/* The group called name (NULL or "hccl_world_group": the world), D.mu held; NULL: none. */
static group *find_group(const char *name) {
  if (!name || !strcmp(name, WORLD)) return D.n_groups ? &D.world : NULL;
  for (int i = 1; i < D.n_groups; i++)
    if (!strcmp(D.groups[i]->name, name)) return D.groups[i];
  return NULL;
}

/* Takes g off the table (D.mu held). */
static void unlink_group(group *g) {
  for (int i = 1; i < D.n_groups; i++)
    if (D.groups[i] == g) {
      D.groups[i] = D.groups[--D.n_groups];
      return;
    }
}

static void group_free(group *g) {
  if (g && g != &D.world) {
    free(g->world);
    free(g);
  }
}

/* Queues j and waits until the thread has run it (no MPI: runs it here). */
static void run_waiting(job *j) {
  pthread_mutex_lock(&D.mu);
#ifdef NPU_HAVE_MPI
  if (D.ranks.mpi && D.thread_running) {
    if (D.queue_tail) D.queue_tail->next_queued = j;
    else D.queue_head = j;
    D.queue_tail = j;
    pthread_cond_broadcast(&D.cv);
    while (!j->done) pthread_cond_wait(&D.cv, &D.mu);
    pthread_mutex_unlock(&D.mu);
    return;
  }
#endif
  run_local(j);
  j->done = true;
  pthread_mutex_unlock(&D.mu);
}

/* A group's own job (creating its communicator, or freeing it) on g, named for messages,
   run to its end. */
static void run_group_job(job *j, int kind, group *g, const char *op, const char *name,
                          int64_t timeout_ms) {
  j->magic = JOB_MAGIC;
  j->kind = kind;
  j->grp = g;
  j->timeout_ms = timeout_ms;
  copy_name(j->op, sizeof j->op, op);
  copy_name(j->node, sizeof j->node, name);
  run_waiting(j);
}

/* The world's name for group rank r (rank of group g). */
static int world_rank(const group *g, int r) { return g->world ? g->world[r] : r; }

/* "0, 1, 3" for messages. */
static void ranks_text(char *buf, size_t n, const group *g) {
  int len = 0;
  buf[0] = 0;
  for (int i = 0; i < g->n && len < (int)n - 16; i++)
    len += snprintf(buf + len, n - (size_t)len, "%s%d", i ? ", " : "", world_rank(g, i));
  if (len >= (int)n - 16 && g->n > 0) snprintf(buf + len, n - (size_t)len, ", ...");
}

npu_status npu_dist_create_group(npu_context *ctx, const char *name, int n_ranks,
                                 const int *ranks, int64_t timeout_ms) {
  npuD_ranks r;
  npu_status st = npuD_get_ranks(ctx, &r);
  if (st) return st;
  if (!name || !*name || !ranks || n_ranks < 1 || timeout_ms < 0)
    return npuC_error(ctx, NPU_ERR_ARG, "create_group: %s", !name || !*name ? "no name"
                      : !ranks || n_ranks < 1 ? "no ranks" : "negative timeout");
  if (strlen(name) >= NPUX_HCOM_GROUP_MAX)
    return npuC_error(ctx, NPU_ERR_ARG, "create_group: a name of %zu characters (at most %d)",
                      strlen(name), NPUX_HCOM_GROUP_MAX - 1);
  if (!strcmp(name, WORLD))
    return npuC_error(ctx, NPU_ERR_ARG, "create_group '%s': that group is every rank's, made "
                      "by the library", name);
  if (n_ranks > r.size)
    return npuC_error(ctx, NPU_ERR_ARG, "create_group '%s': %d ranks but there %s %d", name,
                      n_ranks, r.size == 1 ? "is" : "are", r.size);
  int me = -1;
  for (int i = 0; i < n_ranks; i++) {
    if (ranks[i] < 0 || ranks[i] >= r.size)
      return npuC_error(ctx, NPU_ERR_ARG, "create_group '%s': rank %d is out of range: there "
                        "%s %d rank%s (0 to %d)", name, ranks[i], r.size == 1 ? "is" : "are",
                        r.size, r.size == 1 ? "" : "s", r.size - 1);
    for (int k = 0; k < i; k++)
      if (ranks[k] == ranks[i])
        return npuC_error(ctx, NPU_ERR_ARG, "create_group '%s': rank %d is listed twice", name,
                          ranks[i]);
    if (ranks[i] == r.rank) me = i;
  }
#ifndef NPU_HAVE_MPI
  if (r.size > 1 && me >= 0)
    return npuC_error(ctx, NPU_ERR_UNSUPPORTED, "create_group '%s': lua-npu was built without "
                      "MPI: install Open MPI (libopenmpi-dev, openmpi-bin) and rebuild", name);
#endif
  group *g = calloc(1, sizeof *g);
  int *world = g ? malloc((size_t)n_ranks * sizeof *world) : NULL;
  job *j = world && me >= 0 ? job_take(ctx) : NULL;
  if (!g || !world || (me >= 0 && !j)) {
    free(g);
    free(world);
    if (j) job_free(j);
    return npuC_error(ctx, NPU_ERR_NOMEM, "create_group '%s': out of memory", name);
  }
  strcpy(g->name, name);
  g->n = n_ranks;
  memcpy(world, ranks, (size_t)n_ranks * sizeof *world);
  g->world = world;
  g->rank = me;
  g->local_rank = me >= 0 ? 0 : -1;
  g->local_size = me >= 0 ? 1 : 0;
#ifdef NPU_HAVE_MPI
  g->comm = g->p2p = MPI_COMM_NULL;
#endif
  /* registered first (another create of the name fails at once), usable once made */
  pthread_mutex_lock(&D.mu);
  st = find_group(name) ? NPU_ERR_ARG : D.n_groups == MAX_GROUPS ? NPU_ERR_UNSUPPORTED : NPU_OK;
  if (!st) D.groups[D.n_groups++] = g;
  pthread_mutex_unlock(&D.mu);
  if (st) {
    if (j) job_free(j);
    group_free(g);
    return st == NPU_ERR_ARG
               ? npuC_error(ctx, st, "create_group '%s': a group of that name exists (destroy "
                            "it first)", name)
               : npuC_error(ctx, st, "create_group '%s': %d groups exist already (the most "
                            "there can be)", name, MAX_GROUPS);
  }
  if (!j) return NPU_OK; /* not a member: the group is known here, never used */
  run_group_job(j, JOB_CREATE, g, "create_group", name, timeout_ms);
  st = j->status;
  if (st) {
    st = npuC_error(ctx, st, "create_group '%s': %s", name, j->msg);
    pthread_mutex_lock(&D.mu);
    unlink_group(g);
    pthread_mutex_unlock(&D.mu);
    group_free(g);
  }
  job_free(j);
  return st;
}

npu_status npu_dist_destroy_group(npu_context *ctx, const char *name) {
  npuD_ranks r;
  npu_status st = npuD_get_ranks(ctx, &r);
  if (st) return st;
  if (name && !strcmp(name, WORLD))
    return npuC_error(ctx, NPU_ERR_ARG, "destroy_group '%s': that group is every rank's and "
                      "stays", name);
  pthread_mutex_lock(&D.mu);
  group *g = name ? find_group(name) : NULL;
  if (g) unlink_group(g); /* steps started later fail; those queued before run first */
  pthread_mutex_unlock(&D.mu);
  if (!g)
    return npuC_error(ctx, NPU_ERR_ARG, "destroy_group: unknown group '%s'", name ? name : "(null)");
#ifdef NPU_HAVE_MPI
  if (g->comm != MPI_COMM_NULL) {
    job *j = &g->destroy;
    memset(j, 0, sizeof *j);
    run_group_job(j, JOB_DESTROY, g, "destroy_group", name, 0);
  }
#endif
  group_free(g);
  return NPU_OK;
}

/* Looks group up and copies what a query needs (D.mu taken here). */
static npu_status group_info(npu_context *ctx, const char *name, group *out) {
  npuD_ranks r;
  npu_status st = npuD_get_ranks(ctx, &r);
  if (st) return st;
  pthread_mutex_lock(&D.mu);
  group *g = find_group(name);
  if (g) {
    *out = *g;
    out->world = NULL;
  }
  pthread_mutex_unlock(&D.mu);
  if (!g)
    return npuC_error(ctx, NPU_ERR_ARG, "unknown group '%s' (npu.hccl.create_group makes "
                      "one)", name);
  return NPU_OK;
}

npu_status npu_dist_group_ranks(npu_context *ctx, const char *name, int *rank_id,
                                int *rank_size, int *local_rank_id, int *local_rank_size) {
  if (rank_id) *rank_id = 0;
  if (rank_size) *rank_size = 0;
  if (local_rank_id) *local_rank_id = 0;
  if (local_rank_size) *local_rank_size = 0;
  group g;
  npu_status st = group_info(ctx, name, &g);
  if (st) return st;
  if (rank_size) *rank_size = g.n;
  if (g.rank < 0 && (rank_id || local_rank_id || local_rank_size))
    return npuC_error(ctx, NPU_ERR_ARG, "this process (world rank %d) is not in group '%s'",
                      D.ranks.rank, g.name);
  if (rank_id) *rank_id = g.rank;
  if (local_rank_id) *local_rank_id = g.local_rank;
  if (local_rank_size) *local_rank_size = g.local_size;
  return NPU_OK;
}

npu_status npu_dist_world_rank(npu_context *ctx, const char *name, int group_rank,
                               int *world_rank_out) {
  if (!world_rank_out)
    return npuC_error(ctx, NPU_ERR_ARG, "get_world_rank_from_group_rank: world_rank is NULL");
  *world_rank_out = -1;
  npuD_ranks r;
  npu_status st = npuD_get_ranks(ctx, &r);
  if (st) return st;
  pthread_mutex_lock(&D.mu);
  group *g = find_group(name);
  int n = g ? g->n : 0, w = g && group_rank >= 0 && group_rank < n ? world_rank(g, group_rank) : -1;
  pthread_mutex_unlock(&D.mu);
  if (!g)
    return npuC_error(ctx, NPU_ERR_ARG, "get_world_rank_from_group_rank: unknown group '%s'", name);
  if (w < 0)
    return npuC_error(ctx, NPU_ERR_ARG, "get_world_rank_from_group_rank: rank %d is out of "
                      "range: group '%s' has %d rank%s", group_rank, name, n, n == 1 ? "" : "s");
  *world_rank_out = w;
  return NPU_OK;
}

npu_status npu_dist_group_rank(npu_context *ctx, int world_r, const char *name, int *group_rank) {
  if (!group_rank)
    return npuC_error(ctx, NPU_ERR_ARG, "get_group_rank_from_world_rank: group_rank is NULL");
  *group_rank = -1;
  npuD_ranks r;
  npu_status st = npuD_get_ranks(ctx, &r);
  if (st) return st;
  pthread_mutex_lock(&D.mu);
  group *g = find_group(name);
  int found = -1;
  for (int i = 0; g && i < g->n; i++)
    if (world_rank(g, i) == world_r) found = i;
  char list[160] = "";
  if (g && found < 0) ranks_text(list, sizeof list, g);
  pthread_mutex_unlock(&D.mu);
  if (!g)
    return npuC_error(ctx, NPU_ERR_ARG, "get_group_rank_from_world_rank: unknown group '%s'", name);
  if (found < 0)
    return npuC_error(ctx, NPU_ERR_ARG, "get_group_rank_from_world_rank: world rank %d is not "
                      "in group '%s' (world ranks %s)", world_r, name, list);
  *group_rank = found;
  return NPU_OK;
}

/* ---- the communicator (npuX_comm) ---------------------------------------------------------- */

/* Resolves c's group and checks this rank may use it, and send / receive's peer (D.mu held).
   NULL: the message is in ctx. */
static group *usable_group(npu_context *ctx, const npuX_coll *c, npu_status *st) {
  group *g = find_group(c->group);
  const char *name = c->group ? c->group : WORLD;
  char list[160];
  if (!g) {
    *st = npuC_error(ctx, NPU_ERR_ARG, "%s '%s': unknown group '%s' (npu.hccl.create_group "
                     "makes one)", c->op, c->node, name);
    return NULL;
  }
  if (g->rank < 0) {
    ranks_text(list, sizeof list, g);
    *st = npuC_error(ctx, NPU_ERR_ARG, "%s '%s': this process (world rank %d) is not in group "
                     "'%s' (world ranks %s)", c->op, c->node, D.ranks.rank, name, list);
    return NULL;
  }
  if (c->kind == NPUX_COLL_SEND || c->kind == NPUX_COLL_RECV) {
    const char *what = c->kind == NPUX_COLL_SEND ? "dest_rank" : "src_rank";
    if (c->peer >= g->n) {
      *st = npuC_error(ctx, NPU_ERR_ARG, "%s '%s': %s %d is out of range: group '%s' has %d "
                       "rank%s", c->op, c->node, what, c->peer, name, g->n, g->n == 1 ? "" : "s");
      return NULL;
    }
    if (c->peer == g->rank) {
      *st = npuC_error(ctx, NPU_ERR_ARG, "%s '%s': %s %d is this rank: a rank cannot %s "
                       "itself", c->op, c->node, what, c->peer,
                       c->kind == NPUX_COLL_SEND ? "send to" : "receive from");
      return NULL;
    }
  }
  return g;
}

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
  pthread_mutex_lock(&D.mu);
  group *g = usable_group(ctx, c, &st);
  int size = g ? g->n : 1;
  pthread_mutex_unlock(&D.mu);
  if (!g) return st;
  job *j = job_take(ctx);
  if (!j) return npuC_error_prefix(ctx, NPU_ERR_NOMEM, "%s '%s': staging buffer", c->op, c->node);
  j->magic = JOB_MAGIC;
  j->kind = c->kind;
  j->grp = g;
  copy_name(j->group_name, sizeof j->group_name, g != &D.world ? g->name : "");
  j->peer = c->peer;
  j->tag = c->tag;
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
  j->out_count = c->kind == NPUX_COLL_ALLGATHER ? j->count * size
                 : c->kind == NPUX_COLL_REDUCE_SCATTER && j->count % size == 0 ? j->count / size
                 : c->kind == NPUX_COLL_SEND                                 ? 0
                                                                               : j->count;
  bool sends = c->kind != NPUX_COLL_RECV, receives = c->kind != NPUX_COLL_SEND;
  if ((sends && !reserve(ctx, &j->send, &j->send_cap, (size_t)(j->count ? j->count : 1) * 4)) ||
      (receives &&
       !reserve(ctx, &j->recv, &j->recv_cap, (size_t)(j->out_count ? j->out_count : 1) * 4))) {
    job_free(j);
    return npuC_error_prefix(ctx, NPU_ERR_NOMEM, "%s '%s': staging buffer", c->op, c->node);
  }
  char *w = j->send;
  for (int i = 0; sends && i < c->n; i++) { /* one buffer, float16 widened */
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
    if (j->group_name[0])
      st = npuC_error(ctx, st, "%s '%s' (group '%s'): %s", j->op, j->node, j->group_name, j->msg);
    else
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

/* ---- local_rank_id, local_device_list ------------------------------------------------------ */

npu_status npuD_check_local(npu_context *ctx, bool has_local_rank, int64_t local_rank,
                            const char *device_list, int64_t device_id) {
  if (!has_local_rank && (!device_list || !*device_list)) return NPU_OK;
  npuD_ranks r;
  npu_status st = npuD_get_ranks(ctx, &r);
  if (st) return st;
  if (has_local_rank && local_rank != r.local_rank)
    return npuC_error(ctx, NPU_ERR_OPTION, "local_rank_id %lld but this process is local rank "
                      "%d of %d on its machine (%s)", (long long)local_rank, r.local_rank,
                      r.local_size, r.mpi ? "MPI" : "not under mpirun");
  if (!device_list || !*device_list) return NPU_OK;
  int n = 0;
  int64_t mine = -1;
  for (const char *p = device_list; *p;) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (n == r.local_rank) mine = v;
    n++;
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p) break; /* the option's own check refused anything else */
  }
  if (n != r.local_size)
    return npuC_error(ctx, NPU_ERR_OPTION, "local_device_list '%s' names %d device%s but %d "
                      "rank%s run%s on this machine (one device each)", device_list, n,
                      n == 1 ? "" : "s", r.local_size, r.local_size == 1 ? "" : "s",
                      r.local_size == 1 ? "s" : "");
  if (mine != device_id)
    return npuC_error(ctx, NPU_ERR_OPTION, "local_device_list '%s': entry %d (this local rank's) "
                      "is %lld but the session's device_id is %lld", device_list, r.local_rank,
                      (long long)mine, (long long)device_id);
  return NPU_OK;
}
