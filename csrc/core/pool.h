/* pool.h — the device thread pool (one per context). */
#ifndef NPU_POOL_H
#define NPU_POOL_H
#include "core/npu_int.h"

typedef void (*npuC_range_fn)(void *arg, int64_t begin, int64_t end);

/* n_threads counts the calling thread: a pool of 1 runs everything inline. */
npu_status npuC_pool_new(npu_context *ctx, int n_threads, npuC_pool **out);
void npuC_pool_free(npuC_pool *pool);
int npuC_pool_size(const npuC_pool *pool);
/* Runs fn over [0, n) in chunks of at least `grain` items, the caller taking part; returns when
   all chunks are done.  Calls must not nest and come from one thread at a time. */
void npuC_pool_parallel_for(npuC_pool *pool, int64_t n, int64_t grain, npuC_range_fn fn,
                            void *arg);
/* Limits the threads used from now on to n (1..size), e.g. a session option. */
void npuC_pool_set_active(npuC_pool *pool, int n);
int npuC_pool_active(const npuC_pool *pool);
/* The watch of the run using the pool (NULL between runs), for kernels that poll npuK_stopped;
   set by the thread that runs, between parallel_for calls.  Returns the previous one. */
npuC_watch *npuC_pool_set_watch(npuC_pool *pool, npuC_watch *w);
#endif
