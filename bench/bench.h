/* bench/bench.h — what the C benchmarks share: a monotonic clock in seconds (or the process's
 * CPU time), and the median of
 * a list of times (sorts it in place; the mean of the middle two for an even count).  Static
 * inline, so a benchmark that uses one of them only compiles without an unused warning. */
#ifndef NPU_BENCH_H
#define NPU_BENCH_H

#include <stdlib.h>
#include <time.h>

static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The process's CPU time in seconds: for a one-thread measurement on a machine with more
   runnable threads than cores, where wall time also counts the waits for a core (every
   thread the process runs is counted, so a two-thread run reads about twice its wall time). */
static inline double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* now, or cpu_now when the environment sets BENCH_CPU_TIME (bench/versus_torch.lua does at
   one thread) */
static inline double (*bench_clock(void))(void) { return getenv("BENCH_CPU_TIME") ? cpu_now : now; }

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
