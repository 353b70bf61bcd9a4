/*
 * watch.c — cancellation and deadlines of a run (npuC_watch, npu_int.h).
 *
 * A cancel is a counter bumped from any thread; the run compares it with the value it saw when
 * it began, so no flag has to be reset (and no reset can race with a cancel aimed at the run in
 * progress).  The reason a run stops is latched in `stopped` with a compare-and-swap, so every
 * thread that looks afterwards (the pool's workers, the executor after a kernel returns) agrees
 * on it.  Checks cost two atomic loads, plus a clock read only when a deadline is set.
 */
#include <time.h>

#include "core/npu_int.h"

int64_t npuC_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static npuC_stop latch(npuC_watch *w, npuC_stop why) {
  int expected = NPUC_GO;
  if (atomic_compare_exchange_strong(&w->stopped, &expected, (int)why)) return why;
  return (npuC_stop)expected;
}

npuC_stop npuC_watch_stopped(npuC_watch *w) {
  if (!w) return NPUC_GO;
  int already = atomic_load_explicit(&w->stopped, memory_order_relaxed);
  if (already) return (npuC_stop)already;
  if (w->session_epoch &&
      atomic_load_explicit(w->session_epoch, memory_order_relaxed) != w->session_start)
    return latch(w, NPUC_STOP_SESSION);
  if (w->context_epoch &&
      atomic_load_explicit(w->context_epoch, memory_order_relaxed) != w->context_start)
    return latch(w, NPUC_STOP_CONTEXT);
  if (w->deadline_ns || w->op_deadline_ns) {
    int64_t now = npuC_now_ns();
    if (w->deadline_ns && now >= w->deadline_ns) return latch(w, NPUC_STOP_DEADLINE);
    if (w->op_deadline_ns && now >= w->op_deadline_ns) return latch(w, NPUC_STOP_OP);
  }
  return NPUC_GO;
}

npuC_stop npuC_watch_check(npuC_watch *w) {
  npuC_stop why = npuC_watch_stopped(w);
  if (why || !w || !w->interrupt) return why;
  return w->interrupt(w->interrupt_ud) ? latch(w, NPUC_STOP_HOST) : NPUC_GO;
}

void npu_context_cancel(npu_context *ctx) {
  if (ctx) atomic_fetch_add(&ctx->cancel_epoch, 1);
}
