/*
 * dist.h — layer 7: collective communication across processes over MPI (npuD_).
 *
 * MPI is optional at build time: built with NPU_HAVE_MPI (the Makefile defines it when Open
 * MPI's headers are there) a process started by mpirun is one rank of the job; built without
 * it, ranks still come from the launcher's environment but every collective fails with
 * NPU_ERR_UNSUPPORTED, saying so.  A process not started by mpirun is rank 0 of 1 and never
 * touches MPI.
 *
 * MPI is once per process, so this layer keeps the library's one process-wide state (dist.c):
 * MPI is initialised on first use by a communication thread that then makes every MPI call
 * (MPI_THREAD_FUNNELED) and finalises it when the process exits (or the library is unloaded).
 */
#ifndef NPU_DIST_H
#define NPU_DIST_H

#include "ops/ops.h"

typedef struct npuD_ranks {
  int rank, size;             /* in the job (MPI_COMM_WORLD) */
  int local_rank, local_size; /* on this machine */
  bool mpi;                   /* collectives go over MPI (else rank size 1, or no MPI) */
} npuD_ranks;

/* This process's ranks, initialising MPI on the first call under mpirun.  RANK_SIZE and
   RANK_ID, where the environment sets them (as the reference's launch scripts do), must agree
   with the launcher's: NPU_ERR_CONFLICT naming both (the environment is read once, with the
   ranks: every later call gives the same answer).  NPU_ERR_INTERNAL when MPI fails to start. */
npu_status npuD_get_ranks(npu_context *ctx, npuD_ranks *out);
/* Whether the library was built with MPI. */
bool npuD_built_with_mpi(void);
/* A session's communicator: collectives wait at most timeout_ms (0: for ever) for the other
   ranks, then fail with NPU_ERR_TIMEOUT.  Their staging buffers come from the session's
   context (accounted: memory_limit applies, the profiler's memory figures include them) and
   are kept for the next step of the same sizes; npuD_comm_close gives back those kept for
   ctx (a session calls it when it is released). */
void npuD_comm_init(npuX_comm *comm, int64_t timeout_ms);
void npuD_comm_close(npu_context *ctx);

/* Checks local_rank_id and local_device_list (options of a session) against this process's
   ranks: local_rank_id (when set) must be MPI's local rank, local_device_list (when set)
   must name one device per rank of this machine with local_rank_id's entry this session's
   device_id.  NPU_ERR_OPTION naming the option and both values. */
npu_status npuD_check_local(npu_context *ctx, bool has_local_rank, int64_t local_rank,
                            const char *device_list, int64_t device_id);

#endif
