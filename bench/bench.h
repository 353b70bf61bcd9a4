/* bench/bench.h — what the C benchmarks share: a monotonic clock in seconds (or CPU time: see
 * bench_clock), and the median of a list of times (sorts it in place; the mean of the middle
 * two for an even count).  Static inline, so a benchmark that uses one of them only compiles
 * without an unused warning. */
#ifndef NPU_BENCH_H
#define NPU_BENCH_H

#include <stdlib.h>
#include <time.h>

static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The process's CPU time in seconds: every thread the process runs is counted, so a two-thread
   run reads about twice its wall time. */
static inline double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The calling thread's CPU time in seconds. */
static inline double thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The clock a benchmark times with: wall time (now), or CPU time when the environment sets
   BENCH_CPU_TIME (bench/versus_torch.lua does at one thread).  CPU time leaves out the waits for
   a core on a shared machine with more runnable threads than cores, where wall times swing
   2-3x between runs.
   threads is the device thread count every timing of the run uses (0: several counts).  At
   exactly one, CPU time is the calling thread's: the session's pool then runs every range
   inline and OpenBLAS (at one thread) runs in its caller, so the caller's CPU time is all of
   the timed work, and it leaves out threads that burn CPU beside it without working for it.
   The process clock did not: OpenBLAS's pthread build starts its server threads when the
   library loads, and each spins on sched_yield (OpenBLAS's thread timeout, 2^28 TSC cycles by
   default: about 0.1 s of CPU here, measured) before it sleeps, after loading and after every
   multi-threaded call, whatever openblas_set_num_threads says.  On an idle second core that
   about doubles the process's CPU time for the process's first 0.1 s: `BENCH_CPU_TIME=1
   bench_cnn 21 1` read its forward at about 2.35 ms against 1.2 ms in wall time, and with 201
   reps (whose median lies past the spin) both read 1.19 ms; with OPENBLAS_THREAD_TIMEOUT=30
   (a longer spin) one process read 2.82 ms process CPU, 1.47 ms wall and 1.45 ms this
   thread's CPU, medians of the same 21 runs.  PyTorch's side does not pay it (torch_twin.py runs with OPENBLAS_NUM_THREADS=1,
   which keeps the threads from starting).  At other counts CPU time is the process's (the
   threads added up). */
static inline double (*bench_clock(int threads))(void) {
  if (!getenv("BENCH_CPU_TIME")) return now;
  return threads == 1 ? thread_cpu_now : cpu_now;
}

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
