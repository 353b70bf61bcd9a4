/*
 * pool.c — the device thread pool: a fixed set of pthreads that run parallel_for chunks.
 *
 * One job at a time.  The caller publishes (fn, arg, n, chunk), bumps `generation` and wakes the
 * workers; everyone, the caller included, takes chunks from an atomic counter; the caller waits
 * until every chunk is finished.  How items are split never changes results: kernels split only
 * over independent outputs (see kernels.h), which is what makes `deterministic` hold across
 * thread counts.
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/pool.h"
#include "kernels/kernels.h"

typedef struct worker_arg {
  struct npuC_pool *pool;
  int index; /* 1.. (the caller is 0) */
} worker_arg;

struct npuC_pool {
  int n_threads; /* including the caller */
  int n_active;
  pthread_t *threads;
  worker_arg *args;
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  unsigned long generation;
  int stop;
  /* the current job */
  npuC_range_fn fn;
  void *arg;
  int64_t n, chunk, n_chunks;
  atomic_llong next_chunk;
  int64_t finished; /* chunks done, under mu */
  int n_workers_in_job;
  npuK_pool kernel_view;
  npuC_watch *watch; /* the run in progress: read by workers only inside a job (published
                        under mu with the job), written between jobs */
};

typedef struct job {
  npuC_range_fn fn;
  void *arg;
  int64_t n, chunk, n_chunks;
} job;

/* Takes chunks until none is left; returns how many this thread ran. */
static int64_t run_chunks(npuC_pool *p, const job *j) {
  int64_t done = 0;
  for (;;) {
    int64_t c = atomic_fetch_add(&p->next_chunk, 1);
    if (c >= j->n_chunks) break;
    int64_t b = c * j->chunk, e = b + j->chunk;
    if (e > j->n) e = j->n;
    j->fn(j->arg, b, e);
    done++;
  }
  return done;
}

static void *worker_main(void *varg) {
  worker_arg *wa = varg;
  npuC_pool *p = wa->pool;
  int index = wa->index;
  unsigned long seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (p->stop) break;
    if (index >= p->n_active) { /* parked by npuC_pool_set_active */
      seen = p->generation;
      continue;
    }
    /* Snapshot the job under the lock and check in, so the caller cannot publish the next
       job while this thread still works from this one. */
    seen = p->generation;
    job j = {p->fn, p->arg, p->n, p->chunk, p->n_chunks};
    p->n_workers_in_job++;
    pthread_mutex_unlock(&p->mu);
    int64_t done = run_chunks(p, &j);
    pthread_mutex_lock(&p->mu);
    p->finished += done;
    p->n_workers_in_job--;
    if (p->finished == p->n_chunks && p->n_workers_in_job == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static int kernel_stopped(void *self) {
  npuC_pool *p = self;
  npuC_watch *w = p->watch;
  return w && !w->hold && npuC_watch_stopped(w) != NPUC_GO;
}

npuC_watch *npuC_pool_set_watch(npuC_pool *p, npuC_watch *w) {
  npuC_watch *old = p->watch;
  p->watch = w;
  return old;
}

static void kernel_parallel_for(void *self, int64_t n, int64_t grain, npuK_range_fn fn,
                                void *arg) {
  npuC_pool_parallel_for(self, n, grain, fn, arg);
}

npu_status npuC_pool_new(npu_context *ctx, int n_threads, npuC_pool **out) {
  *out = NULL;
  /* The pool is allocated with plain malloc: it lives exactly as long as the context, and
     accounting it would make every context start with "live" bytes. */
  npuC_pool *p = calloc(1, sizeof *p);
  if (!p) return npuC_error(ctx, NPU_ERR_NOMEM, "out of memory creating the thread pool");
  p->n_threads = n_threads < 1 ? 1 : n_threads;
  p->n_active = p->n_threads;
  p->kernel_view.parallel_for = kernel_parallel_for;
  p->kernel_view.self = p;
  p->kernel_view.stopped = kernel_stopped;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  if (p->n_threads > 1) {
    p->threads = calloc((size_t)p->n_threads - 1, sizeof *p->threads);
    p->args = calloc((size_t)p->n_threads - 1, sizeof *p->args);
    if (!p->threads || !p->args) {
      npuC_pool_free(p);
      return npuC_error(ctx, NPU_ERR_NOMEM, "out of memory creating the thread pool");
    }
    for (int i = 0; i < p->n_threads - 1; i++) {
      p->args[i] = (worker_arg){p, i + 1};
      if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) {
        p->n_threads = i + 1; /* the ones started, plus the caller */
        p->n_active = p->n_threads;
        break;
      }
    }
  }
  *out = p;
  return NPU_OK;
}

void npuC_pool_free(npuC_pool *p) {
  if (!p) return;
  if (p->threads) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->threads[i], NULL);
  }
  free(p->threads);
  free(p->args);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  free(p);
}

int npuC_pool_size(const npuC_pool *p) { return p->n_threads; }

void npuC_pool_set_active(npuC_pool *p, int n) {
  pthread_mutex_lock(&p->mu);
  p->n_active = n < 1 ? 1 : n > p->n_threads ? p->n_threads : n;
  pthread_mutex_unlock(&p->mu);
}

int npuC_pool_active(const npuC_pool *p) { return p->n_active; }

void npuC_pool_parallel_for(npuC_pool *p, int64_t n, int64_t grain, npuC_range_fn fn,
                            void *arg) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t max_chunks = (n + grain - 1) / grain;
  if (p->n_active <= 1 || max_chunks <= 1) {
    fn(arg, 0, n);
    return;
  }
  /* A few chunks per thread balances uneven work without much overhead. */
  int64_t want = (int64_t)p->n_active * 4;
  int64_t n_chunks = max_chunks < want ? max_chunks : want;
  int64_t chunk = (n + n_chunks - 1) / n_chunks;
  pthread_mutex_lock(&p->mu);
  /* A worker that woke late for the previous job may have checked in after it finished and
     still hold its snapshot: publishing now would let it run the old function on the new
     job's chunk counter.  Wait until it has checked out. */
  while (p->n_workers_in_job > 0) pthread_cond_wait(&p->done, &p->mu);
  p->fn = fn;
  p->arg = arg;
  p->n = n;
  p->chunk = chunk;
  p->n_chunks = (n + chunk - 1) / chunk;
  p->finished = 0;
  atomic_store(&p->next_chunk, 0);
  p->generation++;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  job j = {fn, arg, n, chunk, (n + chunk - 1) / chunk};
  int64_t done = run_chunks(p, &j);
  pthread_mutex_lock(&p->mu);
  p->finished += done;
  while (p->finished < p->n_chunks || p->n_workers_in_job > 0)
    pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

/* With one thread the pool runs every range inline; kernels still get it during a run, so
   that they can poll npuK_stopped. */
const struct npuK_pool *npuC_kernel_pool(npu_context *ctx) {
  return ctx->pool->n_active > 1 || ctx->pool->watch ? &ctx->pool->kernel_view : NULL;
}
