/* pool_two.h: a pool of two real threads for the kernels' C tests (npuK_pool): the first half
 * of a range on a new thread, the rest on the caller's; where the thread cannot be made, all
 * of it on the caller's.  Tests compare its results with a NULL pool's bit for bit. */
#ifndef NPU_TESTS_POOL_TWO_H
#define NPU_TESTS_POOL_TWO_H

#include <pthread.h>

#include "kernels/kernels.h"

typedef struct half_arg {
  npuK_range_fn fn;
  void *arg;
  int64_t b, e;
} half_arg;
static void *run_half(void *p) {
  half_arg *h = p;
  h->fn(h->arg, h->b, h->e);
  return NULL;
}
static void two_for(void *self, int64_t n, int64_t grain, npuK_range_fn fn, void *arg) {
  (void)self, (void)grain;
  half_arg h = {fn, arg, 0, n / 2};
  pthread_t t;
  if (n < 2 || pthread_create(&t, NULL, run_half, &h)) {
    fn(arg, 0, n);
    return;
  }
  fn(arg, n / 2, n);
  pthread_join(t, NULL);
}
static const npuK_pool two = {two_for, NULL, NULL};

#endif
