/*
 * test_data.c — datasets and their iterators (tf.data semantics: slices, shuffle with its
 * specified generator, batch, repeat, prefetch; the producer thread's shutdown while it waits
 * on a full queue; buffer reuse), the graph's dataset list and iterator_get_next's inference,
 * and safetensors files (round trip of every dtype, files written by hand, corrupt files).
 * Ends with an allocation-failure sweep over all of it: NPU_ERR_NOMEM and zero live bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "npu_test.h"
#include "core/npu_int.h"
#include "exec/dataset.h"

static npu_context *ctx;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* A 1-D int64 tensor 0..n-1 (as rows of shape [n]) and a float32 [n, 2] with rows (i, -i). */
static npu_tensor *iota(int64_t n) {
  npu_tensor *t = NULL;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_I64, 1, &n, &t) == NPU_OK);
  for (int64_t i = 0; i < n; i++) ((int64_t *)t->data)[i] = i;
  return t;
}

static npu_tensor *pairs(int64_t n) {
  npu_tensor *t = NULL;
  int64_t shape[2] = {n, 2};
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 2, shape, &t) == NPU_OK);
  for (int64_t i = 0; i < n; i++) {
    ((float *)t->data)[2 * i] = (float)i;
    ((float *)t->data)[2 * i + 1] = (float)-i;
  }
  return t;
}

static npu_dataset *source(int64_t n) {
  npu_tensor *t = iota(n);
  npu_dataset *ds = NULL;
  CHECK(npu_dataset_from_tensors(ctx, 1, &t, &ds) == NPU_OK);
  npu_tensor_release(t);
  return ds;
}

/* Takes ownership of in (one reference): the next stage replaces it. */
static npu_dataset *then_shuffle(npu_dataset *in, int64_t buffer, uint64_t seed, int re) {
  npu_dataset *out = NULL;
  CHECK(npu_dataset_shuffle(in, buffer, seed, re, &out) == NPU_OK);
  npu_dataset_release(in);
  return out;
}
static npu_dataset *then_batch(npu_dataset *in, int64_t n, int drop) {
  npu_dataset *out = NULL;
  CHECK(npu_dataset_batch(in, n, drop, &out) == NPU_OK);
  npu_dataset_release(in);
  return out;
}
static npu_dataset *then_repeat(npu_dataset *in, int64_t n) {
  npu_dataset *out = NULL;
  CHECK(npu_dataset_repeat(in, n, &out) == NPU_OK);
  npu_dataset_release(in);
  return out;
}
static npu_dataset *then_prefetch(npu_dataset *in, int64_t n) {
  npu_dataset *out = NULL;
  CHECK(npu_dataset_prefetch(in, n, &out) == NPU_OK);
  npu_dataset_release(in);
  return out;
}

/* Runs a one-component int64 dataset to its end (at most max values): the values in vals,
   each element's dim 0 (or 0 for unbatched) in sizes; returns the element count. */
static int drain(const npu_dataset *ds, int64_t *vals, int max, int *sizes, int max_el,
                 int *n_vals) {
  npu_iterator *it = NULL;
  CHECK(npu_iterator_new(ctx, ds, &it) == NPU_OK);
  if (!it) return -1;
  int n_el = 0;
  *n_vals = 0;
  for (;;) {
    npu_tensor *t = NULL;
    npu_status st = npu_iterator_next(it, &t);
    if (st == NPU_ERR_OUT_OF_RANGE) {
      CHECK(strcmp(npu_context_errmsg(ctx), "end of data") == 0);
      CHECK(t == NULL);
      break;
    }
    CHECK(st == NPU_OK);
    if (st) break;
    if (n_el < max_el) sizes[n_el] = t->ndim ? (int)t->shape[0] : 0;
    n_el++;
    for (int64_t i = 0; i < t->numel && *n_vals < max; i++) vals[(*n_vals)++] = ((int64_t *)t->data)[i];
    npu_tensor_release(t);
  }
  npu_tensor *t = NULL;
  CHECK(npu_iterator_next(it, &t) == NPU_ERR_OUT_OF_RANGE); /* and again */
  npu_iterator_release(it);
  return n_el;
}

static void test_source_and_batch(void) {
  int64_t vals[64];
  int sizes[16], nv;
  npu_dataset *ds = source(10);
  CHECK(npu_dataset_n_components(ds) == 1);
  CHECK(npu_dataset_ndim(ds, 0) == 0);
  CHECK(npu_dataset_dtype(ds, 0) == NPU_DTYPE_I64);
  CHECK(npu_dataset_cardinality(ds) == 10);
  CHECK(npu_dataset_shape(ds, 1) == NULL && npu_dataset_ndim(ds, 1) == -1);
  CHECK(drain(ds, vals, 64, sizes, 16, &nv) == 10 && nv == 10);
  for (int i = 0; i < 10; i++) CHECK_EQ_I64(vals[i], i);

  npu_dataset *b = NULL;
  CHECK(npu_dataset_batch(ds, 3, 0, &b) == NPU_OK);
  CHECK(npu_dataset_ndim(b, 0) == 1 && npu_dataset_shape(b, 0)[0] == -1);
  CHECK_EQ_I64(npu_dataset_cardinality(b), 4);
  CHECK(drain(b, vals, 64, sizes, 16, &nv) == 4 && nv == 10);
  CHECK(sizes[0] == 3 && sizes[1] == 3 && sizes[2] == 3 && sizes[3] == 1);
  for (int i = 0; i < 10; i++) CHECK_EQ_I64(vals[i], i);
  npu_dataset_release(b);

  CHECK(npu_dataset_batch(ds, 3, 1, &b) == NPU_OK);
  CHECK(npu_dataset_shape(b, 0)[0] == 3);
  CHECK_EQ_I64(npu_dataset_cardinality(b), 3);
  CHECK(drain(b, vals, 64, sizes, 16, &nv) == 3 && nv == 9);
  npu_dataset_release(b);

  /* errors */
  npu_dataset *bad = (npu_dataset *)1;
  CHECK(npu_dataset_batch(ds, 0, 0, &bad) == NPU_ERR_ARG && bad == NULL);
  CHECK(npu_dataset_shuffle(ds, 0, 1, 1, &bad) == NPU_ERR_ARG);
  CHECK(npu_dataset_repeat(ds, -2, &bad) == NPU_ERR_ARG);
  CHECK(npu_dataset_prefetch(ds, 0, &bad) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "buffer_size") != NULL);
  npu_dataset_release(ds);

  npu_tensor *x = pairs(4), *y = iota(5), *s = NULL;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 0, NULL, &s) == NPU_OK);
  npu_tensor *xy[2] = {x, y};
  CHECK(npu_dataset_from_tensors(ctx, 2, xy, &bad) == NPU_ERR_SHAPE && bad == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "[4,2]") && strstr(npu_context_errmsg(ctx), "[5]"));
  CHECK(npu_dataset_from_tensors(ctx, 1, &s, &bad) == NPU_ERR_SHAPE);
  CHECK(npu_dataset_from_tensors(ctx, 0, xy, &bad) == NPU_ERR_ARG);
  CHECK(npu_dataset_from_tensors(ctx, 17, xy, &bad) == NPU_ERR_ARG);
  npu_tensor_release(x);
  npu_tensor_release(y);
  npu_tensor_release(s);
}

static void test_components(void) {
  /* two components, batched: rows gathered in order, partial last batch copied */
  npu_tensor *x = pairs(5), *y = iota(5);
  npu_tensor *xy[2] = {x, y};
  npu_dataset *ds = NULL;
  CHECK(npu_dataset_from_tensors(ctx, 2, xy, &ds) == NPU_OK);
  ds = then_batch(ds, 2, 0);
  CHECK(npu_dataset_ndim(ds, 0) == 2 && npu_dataset_shape(ds, 0)[1] == 2);
  npu_iterator *it = NULL;
  CHECK(npu_iterator_new(ctx, ds, &it) == NPU_OK);
  CHECK(npu_iterator_n_components(it) == 2);
  int64_t row = 0;
  for (int e = 0; e < 3; e++) {
    npu_tensor *out[2] = {NULL, NULL};
    CHECK(npu_iterator_next(it, out) == NPU_OK);
    if (!out[0]) break;
    int64_t n = e < 2 ? 2 : 1;
    CHECK(out[0]->shape[0] == n && out[0]->shape[1] == 2 && out[1]->shape[0] == n);
    for (int64_t k = 0; k < n; k++, row++) {
      CHECK(((float *)out[0]->data)[2 * k] == (float)row);
      CHECK(((float *)out[0]->data)[2 * k + 1] == (float)-row);
      CHECK(((int64_t *)out[1]->data)[k] == row);
    }
    npu_tensor_release(out[0]);
    npu_tensor_release(out[1]);
  }
  npu_tensor *out[2] = {(npu_tensor *)1, (npu_tensor *)1};
  CHECK(npu_iterator_next(it, out) == NPU_ERR_OUT_OF_RANGE && !out[0] && !out[1]);
  npu_iterator_release(it);
  npu_dataset_release(ds);
  npu_tensor_release(x);
  npu_tensor_release(y);
}

static void test_repeat(void) {
  int64_t vals[256];
  int sizes[64], nv;
  npu_dataset *ds = then_repeat(source(4), 3);
  CHECK_EQ_I64(npu_dataset_cardinality(ds), 12);
  CHECK(drain(ds, vals, 256, sizes, 64, &nv) == 12);
  for (int i = 0; i < 12; i++) CHECK_EQ_I64(vals[i], i % 4);
  npu_dataset_release(ds);

  ds = then_repeat(source(4), 0);
  CHECK(drain(ds, vals, 256, sizes, 64, &nv) == 0);
  npu_dataset_release(ds);

  ds = then_repeat(source(0), -1); /* an empty pass ends a repeat forever */
  CHECK_EQ_I64(npu_dataset_cardinality(ds), 0);
  CHECK(drain(ds, vals, 256, sizes, 64, &nv) == 0);
  npu_dataset_release(ds);

  /* batch after repeat: batches straddle passes; repeat after batch: partial per pass */
  ds = then_batch(then_repeat(source(3), 2), 4, 0);
  CHECK(drain(ds, vals, 256, sizes, 64, &nv) == 2 && sizes[0] == 4 && sizes[1] == 2);
  npu_dataset_release(ds);
  ds = then_repeat(then_batch(source(3), 2, 0), 2);
  CHECK(drain(ds, vals, 256, sizes, 64, &nv) == 4 && sizes[0] == 2 && sizes[1] == 1 &&
        sizes[2] == 2 && sizes[3] == 1);
  npu_dataset_release(ds);

  /* forever: take 50 */
  ds = then_prefetch(then_repeat(source(3), -1), 4);
  CHECK_EQ_I64(npu_dataset_cardinality(ds), -1);
  npu_iterator *it = NULL;
  CHECK(npu_iterator_new(ctx, ds, &it) == NPU_OK);
  for (int i = 0; i < 50; i++) {
    npu_tensor *t = NULL;
    CHECK(npu_iterator_next(it, &t) == NPU_OK);
    CHECK(t && *(int64_t *)t->data == i % 3);
    npu_tensor_release(t);
  }
  npu_iterator_release(it);
  npu_dataset_release(ds);
}

/* The order the header of npu.h specifies, computed here independently. */
static void expected_shuffle(int64_t n, int64_t buffer, uint64_t seed, int64_t *out) {
  int64_t buf[256], count = 0, next = 0;
  npuC_rng r;
  npuC_rng_seed(&r, seed);
  while (count < buffer && next < n) buf[count++] = next++;
  for (int64_t k = 0; count > 0; k++) {
    int64_t j = (int64_t)(npuC_rng_next(&r) % (uint64_t)count);
    out[k] = buf[j];
    if (next < n) buf[j] = next++;
    else buf[j] = buf[--count];
  }
}

static void test_shuffle(void) {
  int64_t a[256], b[256], want[256];
  int sizes[64], na, nb;
  npu_dataset *ds = then_shuffle(source(20), 5, 42, 1);
  CHECK(drain(ds, a, 256, sizes, 64, &na) == 20);
  expected_shuffle(20, 5, 42, want);
  for (int i = 0; i < 20; i++) CHECK_EQ_I64(a[i], want[i]);
  CHECK(drain(ds, b, 256, sizes, 64, &nb) == 20); /* a new iterator: the same order */
  CHECK(memcmp(a, b, 20 * sizeof a[0]) == 0);
  npu_dataset_release(ds);

  ds = then_shuffle(source(20), 5, 43, 1);
  CHECK(drain(ds, b, 256, sizes, 64, &nb) == 20);
  CHECK(memcmp(a, b, 20 * sizeof a[0]) != 0);
  npu_dataset_release(ds);

  /* every element once per epoch; reshuffled epochs differ, seed ^ splitmix64(1) for 1 */
  ds = then_repeat(then_shuffle(source(30), 100, 7, 1), 2);
  CHECK(drain(ds, a, 256, sizes, 64, &na) == 60);
  for (int ep = 0; ep < 2; ep++) {
    int seen[30] = {0};
    for (int i = 0; i < 30; i++) seen[a[30 * ep + i]]++;
    for (int i = 0; i < 30; i++) CHECK(seen[i] == 1);
  }
  CHECK(memcmp(a, a + 30, 30 * sizeof a[0]) != 0);
  expected_shuffle(30, 30, npuC_random_stream_seed(7, 1), want);
  for (int i = 0; i < 30; i++) CHECK_EQ_I64(a[30 + i], want[i]);
  npu_dataset_release(ds);

  ds = then_repeat(then_shuffle(source(30), 100, 7, 0), 2);
  CHECK(drain(ds, a, 256, sizes, 64, &na) == 60);
  CHECK(memcmp(a, a + 30, 30 * sizeof a[0]) == 0);
  npu_dataset_release(ds);

  ds = then_shuffle(source(10), 1, 9, 1); /* a buffer of one keeps the order */
  CHECK(drain(ds, a, 256, sizes, 64, &na) == 10);
  for (int i = 0; i < 10; i++) CHECK_EQ_I64(a[i], i);
  npu_dataset_release(ds);

  /* shuffling batches keeps them whole */
  ds = then_shuffle(then_batch(source(9), 3, 0), 3, 5, 1);
  CHECK(drain(ds, a, 256, sizes, 64, &na) == 3 && na == 9);
  for (int e = 0; e < 3; e++) CHECK(a[3 * e] % 3 == 0 && a[3 * e + 1] == a[3 * e] + 1);
  npu_dataset_release(ds);
}

static void test_nested_batch(void) {
  int64_t vals[64];
  int sizes[16], nv;
  npu_dataset *ds = then_batch(then_batch(source(5), 2, 0), 2, 0);
  CHECK(npu_dataset_ndim(ds, 0) == 2);
  CHECK(drain(ds, vals, 64, sizes, 16, &nv) == 2 && sizes[0] == 2 && sizes[1] == 1 && nv == 5);
  npu_dataset_release(ds);

  /* inner partial batch in the middle of an outer batch: NPU_ERR_SHAPE, sticky */
  ds = then_batch(then_repeat(then_batch(source(3), 2, 0), 2), 2, 0);
  npu_iterator *it = NULL;
  CHECK(npu_iterator_new(ctx, ds, &it) == NPU_OK);
  npu_tensor *t = NULL;
  CHECK(npu_iterator_next(it, &t) == NPU_ERR_SHAPE && t == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "different shapes") != NULL);
  CHECK(npu_iterator_next(it, &t) == NPU_ERR_SHAPE);
  npu_iterator_release(it);
  npu_dataset_release(ds);
}

static npu_dataset *then_shard(npu_dataset *in, int64_t n, int64_t index) {
  npu_dataset *out = NULL;
  CHECK(npu_dataset_shard(in, n, index, &out) == NPU_OK);
  npu_dataset_release(in);
  return out;
}

static void test_shard(void) {
  size_t base = npu_context_live_bytes(ctx);
  int64_t vals[32];
  int sizes[16], n_vals;
  npu_dataset *ds = then_shard(source(10), 3, 1);
  CHECK_EQ_I64(npu_dataset_cardinality(ds), 3);
  CHECK(drain(ds, vals, 32, sizes, 16, &n_vals) == 3);
  CHECK(n_vals == 3 && vals[0] == 1 && vals[1] == 4 && vals[2] == 7);
  npu_dataset_release(ds);
  /* counted per pass under a repeat, across passes above one; after a batch: whole batches */
  ds = then_repeat(then_shard(source(5), 2, 0), 2);
  CHECK(drain(ds, vals, 32, sizes, 16, &n_vals) == 6);
  CHECK(vals[0] == 0 && vals[2] == 4 && vals[3] == 0 && vals[5] == 4);
  npu_dataset_release(ds);
  ds = then_shard(then_repeat(source(5), 2), 2, 1);
  CHECK_EQ_I64(npu_dataset_cardinality(ds), 5);
  CHECK(drain(ds, vals, 32, sizes, 16, &n_vals) == 5);
  CHECK(vals[0] == 1 && vals[1] == 3 && vals[2] == 0 && vals[3] == 2 && vals[4] == 4);
  npu_dataset_release(ds);
  ds = then_shard(then_batch(source(7), 2, 0), 2, 1);
  CHECK(drain(ds, vals, 32, sizes, 16, &n_vals) == 2);
  CHECK(sizes[0] == 2 && sizes[1] == 1 && vals[0] == 2 && vals[2] == 6);
  npu_dataset_release(ds);
  CHECK_EQ_I64(npu_dataset_cardinality(ds = then_shard(then_repeat(source(3), -1), 4, 3)), -1);
  npu_dataset_release(ds);
  /* errors name the arguments */
  npu_dataset *src = source(4), *out = (npu_dataset *)1;
  CHECK(npu_dataset_shard(src, 0, 0, &out) == NPU_ERR_ARG && out == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "num_shards must be >= 1, got 0"));
  CHECK(npu_dataset_shard(src, 2, 2, &out) == NPU_ERR_ARG && out == NULL);
  CHECK(strstr(npu_context_errmsg(ctx), "index must be in [0, num_shards): index 2, num_shards 2"));
  CHECK(npu_dataset_shard(src, 2, -1, &out) == NPU_ERR_ARG);
  npu_dataset_release(src);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
}

static void test_shutdown_and_reuse(void) {
  size_t base = npu_context_live_bytes(ctx);
  npu_dataset *ds = then_prefetch(then_repeat(then_batch(source(100), 10, 1), -1), 1);
  /* released without a next: the producer is blocked on the full queue */
  for (int k = 0; k < 20; k++) {
    npu_iterator *it = NULL;
    CHECK(npu_iterator_new(ctx, ds, &it) == NPU_OK);
    if (k % 2) sleep_ms(2);
    npu_iterator_release(it);
  }
  /* after some nexts, holding the last element past the release */
  npu_iterator *it = NULL;
  CHECK(npu_iterator_new(ctx, ds, &it) == NPU_OK);
  npu_tensor *t = NULL;
  CHECK(npu_iterator_next(it, &t) == NPU_OK);
  void *first = t ? t->data : NULL;
  npu_tensor_release(t);
  size_t steady = 0;
  for (int i = 1; i < 200; i++) {
    CHECK(npu_iterator_next(it, &t) == NPU_OK);
    if (!t) break;
    CHECK(((int64_t *)t->data)[0] == (i % 10) * 10);
    if (i == 10) steady = npu_context_live_bytes(ctx);
    npu_tensor_release(t);
  }
  CHECK(npu_context_live_bytes(ctx) == steady); /* buffers reused: no growth */
  CHECK(npu_iterator_next(it, &t) == NPU_OK);
  npu_tensor *held = t; /* kept: the slot gets a fresh buffer, held stays intact */
  int64_t v0 = ((int64_t *)held->data)[0];
  for (int i = 0; i < 5; i++) {
    CHECK(npu_iterator_next(it, &t) == NPU_OK);
    npu_tensor_release(t);
  }
  CHECK(((int64_t *)held->data)[0] == v0);
  sleep_ms(2);
  npu_iterator_release(it);
  CHECK(((int64_t *)held->data)[0] == v0);
  npu_tensor_release(held);
  (void)first;
  npu_dataset_release(ds);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
}

static void test_graph(void) {
  size_t base = npu_context_live_bytes(ctx);
  npu_graph *g = NULL;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  npu_tensor *x = pairs(6), *y = iota(6);
  npu_tensor *xy[2] = {x, y};
  npu_dataset *ds = NULL;
  CHECK(npu_dataset_from_tensors(ctx, 2, xy, &ds) == NPU_OK);
  ds = then_batch(ds, 4, 1);
  int id = -2;
  CHECK(npu_graph_add_dataset(g, ds, &id) == NPU_OK && id == 0);
  CHECK(npu_graph_dataset(g, 0) == ds && npu_graph_dataset(g, 1) == NULL);
  npu_attr a = {.name = "dataset", .type = NPU_ATTR_INT, .u.i = id};
  int node = -1;
  CHECK(npu_graph_add_op(g, "iterator_get_next", NULL, 0, NULL, 1, &a, &node) == NPU_OK);
  CHECK(npu_graph_n_outputs(g, node) == 2);
  CHECK(strcmp(npu_graph_node_name(g, node), "IteratorGetNext") == 0);
  int v0 = npu_graph_output(g, node, 0), v1 = npu_graph_output(g, node, 1);
  CHECK(npu_graph_value_dtype(g, v0) == NPU_DTYPE_F32 && npu_graph_value_ndim(g, v0) == 2);
  CHECK(npu_graph_value_shape(g, v0)[0] == 4 && npu_graph_value_shape(g, v0)[1] == 2);
  CHECK(npu_graph_value_dtype(g, v1) == NPU_DTYPE_I64 && npu_graph_value_shape(g, v1)[0] == 4);
  a.u.i = 3;
  CHECK(npu_graph_add_op(g, "iterator_get_next", NULL, 0, NULL, 1, &a, &node) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "dataset") != NULL);
  CHECK(npu_graph_add_op(g, "iterator_get_next", NULL, 0, NULL, 0, NULL, &node) == NPU_ERR_ARG);
  /* a session's iterators: one per node, created on first use */
  npuE_iterators its = {0};
  for (int e = 0; e < 3; e++) {
    npu_tensor *out[2] = {NULL, NULL};
    npu_status s = npuE_iterators_next(ctx, &its, g, 0, out);
    if (e == 0) {
      CHECK(s == NPU_OK && out[0] && out[0]->shape[0] == 4);
      CHECK(out[1] && ((int64_t *)out[1]->data)[3] == 3);
    } else {
      CHECK(s == NPU_ERR_OUT_OF_RANGE && !out[0]);
      CHECK(strstr(npu_context_errmsg(ctx), "end of data (iterator_get_next 'IteratorGetNext')"));
    }
    npu_tensor_release(out[0]);
    npu_tensor_release(out[1]);
  }
  npu_tensor *none[2];
  CHECK(npuE_iterators_next(ctx, &its, g, 5, none) == NPU_ERR_ARG);
  /* peeking takes nothing: a partial last batch is seen, then delivered */
  npu_dataset *part = then_batch(source(5), 2, 0);
  int pid = -1, pnode = -1;
  CHECK(npu_graph_add_dataset(g, part, &pid) == NPU_OK);
  npu_attr pa = {.name = "dataset", .type = NPU_ATTR_INT, .u.i = pid};
  CHECK(npu_graph_add_op(g, "iterator_get_next", NULL, 0, NULL, 1, &pa, &pnode) == NPU_OK);
  CHECK(npu_graph_value_shape(g, npu_graph_output(g, pnode, 0))[0] == -1);
  for (int e = 0; e < 4; e++) {
    int nd[1] = {-1};
    int64_t sh[1][NPU_MAX_DIMS] = {{0}};
    bool has = true;
    CHECK(npuE_iterators_peek(ctx, &its, g, pnode, nd, sh, &has) == NPU_OK);
    CHECK(npuE_iterators_peek(ctx, &its, g, pnode, nd, sh, &has) == NPU_OK); /* twice: same */
    CHECK(has == (e < 3));
    if (!has) break;
    CHECK(nd[0] == 1 && sh[0][0] == (e < 2 ? 2 : 1));
    npu_tensor *t = NULL;
    CHECK(npuE_iterators_next(ctx, &its, g, pnode, &t) == NPU_OK && t);
    CHECK(t && t->shape[0] == sh[0][0] && ((int64_t *)t->data)[0] == 2 * e);
    npu_tensor_release(t);
  }
  npu_dataset_release(part);
  npuE_iterators_free(ctx, &its);
  CHECK(its.by_node == NULL && its.n == 0);
  npu_dataset_release(ds); /* the graph holds it */
  npu_tensor_release(x);
  npu_tensor_release(y);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
}

/* ---- safetensors ---- */

/* A path under $TMPDIR (or /tmp) in a static buffer, which the next call overwrites: copy it
   to keep it. */
static const char *tmp_path(const char *name) {
  static char buf[256];
  const char *dir = getenv("TMPDIR");
  snprintf(buf, sizeof buf, "%s/npu_test_data_%d_%s", dir && *dir ? dir : "/tmp", (int)getpid(),
           name);
  return buf;
}

static void write_raw(const char *path, const char *json, const void *data, size_t n,
                      long long header_len_override) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  size_t len = strlen(json);
  uint64_t h = header_len_override >= 0 ? (uint64_t)header_len_override : len;
  unsigned char p[8];
  for (int b = 0; b < 8; b++) p[b] = (unsigned char)(h >> (8 * b));
  fwrite(p, 1, 8, f);
  fwrite(json, 1, len, f);
  if (n) fwrite(data, 1, n, f);
  fclose(f);
}

static npu_status load_status(const char *path) {
  npu_safetensors *st = (npu_safetensors *)1;
  npu_status s = npu_safetensors_load(ctx, path, &st);
  if (s) CHECK(st == NULL);
  npu_safetensors_release(st);
  return s;
}

static void test_safetensors(void) {
  size_t base = npu_context_live_bytes(ctx);
  const char *path = tmp_path("round.safetensors");
  char saved_path[256];
  snprintf(saved_path, sizeof saved_path, "%s", path);
  /* every dtype, a scalar and an empty tensor */
  npu_tensor *ts[NPU_DTYPE_COUNT + 2];
  const char *names[NPU_DTYPE_COUNT + 2];
  char name_buf[NPU_DTYPE_COUNT + 2][16];
  for (int d = 0; d < NPU_DTYPE_COUNT; d++) {
    int64_t shape[2] = {2, 3};
    CHECK(npu_tensor_new(ctx, (npu_dtype)d, 2, shape, &ts[d]) == NPU_OK);
    for (size_t b = 0; b < ts[d]->nbytes; b++) ((unsigned char *)ts[d]->data)[b] = (unsigned char)(b * 7 + d);
    if (d == NPU_DTYPE_BOOL)
      for (size_t b = 0; b < ts[d]->nbytes; b++) ((unsigned char *)ts[d]->data)[b] = b & 1;
    snprintf(name_buf[d], sizeof name_buf[d], "t_%s", npu_dtype_name((npu_dtype)d));
    names[d] = name_buf[d];
  }
  int64_t zero = 0;
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 0, NULL, &ts[NPU_DTYPE_COUNT]) == NPU_OK);
  CHECK(npu_tensor_new(ctx, NPU_DTYPE_F32, 1, &zero, &ts[NPU_DTYPE_COUNT + 1]) == NPU_OK);
  names[NPU_DTYPE_COUNT] = "scalar";
  names[NPU_DTYPE_COUNT + 1] = "layer/empty";
  int n = NPU_DTYPE_COUNT + 2;
  CHECK(npu_safetensors_save(ctx, saved_path, n, names, ts, "{\"format\":\"pt\"}") == NPU_OK);
  /* the header is padded to a multiple of 8 */
  FILE *f = fopen(saved_path, "rb");
  unsigned char p[8] = {0};
  if (f) {
    CHECK(fread(p, 1, 8, f) == 8);
    fclose(f);
  }
  CHECK(p[0] % 8 == 0);
  npu_safetensors *st = NULL;
  CHECK(npu_safetensors_load(ctx, saved_path, &st) == NPU_OK);
  CHECK(npu_safetensors_count(st) == n);
  CHECK(npu_safetensors_metadata(st) && strstr(npu_safetensors_metadata(st), "\"format\":\"pt\""));
  for (int i = 0; i < n; i++) {
    int k = npu_safetensors_find(st, names[i]);
    CHECK(k >= 0);
    if (k < 0) continue;
    const npu_tensor *t = npu_safetensors_tensor(st, k);
    CHECK(strcmp(npu_safetensors_name(st, k), names[i]) == 0);
    CHECK(t->dtype == ts[i]->dtype && npuT_same_shape(t->ndim, t->shape, ts[i]->ndim, ts[i]->shape));
    CHECK(t->nbytes == ts[i]->nbytes && memcmp(t->data, ts[i]->data, t->nbytes) == 0);
  }
  CHECK(npu_safetensors_find(st, "nope") == -1 && npu_safetensors_tensor(st, n) == NULL);
  npu_safetensors_release(st);

  /* argument errors */
  const char *dup[2] = {"a", "a"};
  npu_tensor *two[2] = {ts[0], ts[1]};
  CHECK(npu_safetensors_save(ctx, saved_path, 2, dup, two, NULL) == NPU_ERR_ARG);
  const char *meta_name[1] = {"__metadata__"};
  CHECK(npu_safetensors_save(ctx, saved_path, 1, meta_name, two, NULL) == NPU_ERR_ARG);
  const char *ok_name[1] = {"a"};
  CHECK(npu_safetensors_save(ctx, saved_path, 1, ok_name, two, "{\"a\": 1}") == NPU_ERR_ARG);
  CHECK(npu_safetensors_save(ctx, "/nonexistent-dir/x.safetensors", 1, ok_name, two, NULL) == NPU_ERR_IO);
  CHECK(strstr(npu_context_errmsg(ctx), "/nonexistent-dir/x.safetensors") != NULL);
  for (int i = 0; i < n; i++) npu_tensor_release(ts[i]);

  /* written by hand, as Python's safetensors writes it: metadata, padding, offsets */
  char hand[256];
  snprintf(hand, sizeof hand, "%s", tmp_path("hand.safetensors"));
  float w[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  int32_t lbl[2] = {7, -9};
  unsigned char blob[24];
  memcpy(blob, lbl, 8); /* data order need not follow the JSON order */
  memcpy(blob + 8, w, 16);
  write_raw(hand,
            "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],"
            "\"data_offsets\":[8,24]},\"lbl\":{\"dtype\":\"I32\",\"shape\":[2],"
            "\"data_offsets\":[0,8]}}      ",
            blob, 24, -1);
  CHECK(npu_safetensors_load(ctx, hand, &st) == NPU_OK);
  CHECK(npu_safetensors_count(st) == 2);
  int iw = npu_safetensors_find(st, "w"), il = npu_safetensors_find(st, "lbl");
  CHECK(iw >= 0 && il >= 0);
  if (iw >= 0 && il >= 0) {
    CHECK(memcmp(npu_safetensors_tensor(st, iw)->data, w, 16) == 0);
    CHECK(memcmp(npu_safetensors_tensor(st, il)->data, lbl, 8) == 0);
  }
  npu_safetensors_release(st);

  /* corrupt files */
  struct {
    const char *json;
    size_t n_data;
    long long header_len;
    npu_status want;
    const char *says;
  } bad[] = {
      {"{}", 0, 1000, NPU_ERR_FORMAT, "header length"},
      {"{\"w\": [", 0, -1, NPU_ERR_FORMAT, "not a JSON object"},
      {"[1, 2]", 0, -1, NPU_ERR_FORMAT, "not a JSON object"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, -1, NPU_ERR_FORMAT, "out of range"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
       8, -1, NPU_ERR_FORMAT, "overlap"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, -1, NPU_ERR_FORMAT, "gap"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, -1, NPU_ERR_FORMAT, "cover"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, -1, NPU_ERR_FORMAT, "needs 12 bytes"},
      {"{\"w\":{\"dtype\":\"Q8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, -1, NPU_ERR_FORMAT, "unknown dtype \"Q8\""},
      {"{\"w\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2, -1, NPU_ERR_UNSUPPORTED, "U16"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, -1, NPU_ERR_FORMAT, "shape entry 0"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, -1, NPU_ERR_FORMAT, "data_offsets"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, -1, NPU_ERR_FORMAT, "begin <= end"},
      {"{\"__metadata__\":{\"a\":1}}", 0, -1, NPU_ERR_FORMAT, "__metadata__"},
  };
  unsigned char zeros[16] = {0};
  char corrupt[256];
  snprintf(corrupt, sizeof corrupt, "%s", tmp_path("bad.safetensors"));
  for (size_t i = 0; i < npu_countof(bad); i++) {
    write_raw(corrupt, bad[i].json, zeros, bad[i].n_data, bad[i].header_len);
    npu_status s = load_status(corrupt);
    CHECK_EQ_I64(s, bad[i].want);
    if (!strstr(npu_context_errmsg(ctx), bad[i].says)) {
      fprintf(stderr, "case %zu: message '%s' lacks '%s'\n", i, npu_context_errmsg(ctx), bad[i].says);
      CHECK(0);
    }
  }
  FILE *tiny = fopen(corrupt, "wb");
  if (tiny) {
    fwrite("abc", 1, 3, tiny);
    fclose(tiny);
  }
  CHECK(load_status(corrupt) == NPU_ERR_FORMAT);
  CHECK(load_status(tmp_path("missing.safetensors")) == NPU_ERR_IO);
  remove(corrupt);
  remove(hand);
  remove(saved_path);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
}

/* ---- allocation failures ---- */

/* Everything above in one go; returns the first failing status. */
static npu_status workload(npu_tensor *x, npu_tensor *y, const char *path) {
  npu_tensor *xy[2] = {x, y};
  npu_dataset *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  npu_iterator *it = NULL;
  npu_graph *g = NULL;
  npu_safetensors *st = NULL;
  npu_status s = npu_dataset_from_tensors(ctx, 2, xy, &a);
  if (!s) s = npu_dataset_shuffle(a, 4, 1, 1, &b);
  if (!s) s = npu_dataset_batch(b, 3, 0, &c);
  npu_dataset *sh = NULL;
  if (!s) s = npu_dataset_shard(c, 2, 1, &sh);
  npu_dataset_release(sh);
  if (!s) s = npu_dataset_repeat(c, 2, &d);
  if (!s) s = npu_iterator_new(ctx, d, &it);
  while (!s) {
    npu_tensor *out[2] = {NULL, NULL};
    s = npu_iterator_next(it, out);
    npu_tensor_release(out[0]);
    npu_tensor_release(out[1]);
  }
  if (s == NPU_ERR_OUT_OF_RANGE) s = NPU_OK;
  if (!s) s = npu_graph_new(ctx, &g);
  int id;
  if (!s) s = npu_graph_add_dataset(g, d, &id);
  if (!s) {
    npu_attr at = {.name = "dataset", .type = NPU_ATTR_INT, .u.i = id};
    int node;
    s = npu_graph_add_op(g, "iterator_get_next", NULL, 0, NULL, 1, &at, &node);
  }
  npuE_iterators its = {0};
  if (!s) {
    npu_tensor *out[2] = {NULL, NULL};
    s = npuE_iterators_next(ctx, &its, g, 0, out);
    npu_tensor_release(out[0]);
    npu_tensor_release(out[1]);
  }
  npuE_iterators_free(ctx, &its);
  /* a session over the partial batches: a plan per element shape (3 and 1) */
  npu_session *sess = NULL;
  if (!s) s = npu_session_new(ctx, g, NULL, &sess);
  for (int k = 0; !s; k++) {
    npu_tensor *out = NULL;
    int v = npu_graph_output(g, 0, 0);
    s = npu_session_run(sess, 0, NULL, NULL, 1, &v, &out, 0, NULL);
    if (!s && out->shape[0] != (k % 3 == 2 ? 1 : 3)) s = NPU_ERR_INTERNAL;
    npu_tensor_release(out);
  }
  if (s == NPU_ERR_OUT_OF_RANGE) s = sess && npu_session_n_plans(sess) == 2 ? NPU_OK : NPU_ERR_INTERNAL;
  npu_session_release(sess);
  const char *names[2] = {"x", "y"};
  if (!s) s = npu_safetensors_save(ctx, path, 2, names, xy, "{\"k\":\"v\"}");
  if (!s) s = npu_safetensors_load(ctx, path, &st);
  npu_safetensors_release(st);
  npu_graph_release(g);
  npu_iterator_release(it);
  npu_dataset_release(a);
  npu_dataset_release(b);
  npu_dataset_release(c);
  npu_dataset_release(d);
  return s;
}

typedef struct workload_args {
  npu_tensor *x, *y;
  const char *path;
} workload_args;

static npu_status sweep_run(npu_context *c, void *ud) {
  workload_args *w = ud;
  (void)c; /* the file's context */
  return workload(w->x, w->y, w->path);
}

static void test_alloc_failures(void) {
  npu_tensor *x = pairs(7), *y = iota(7);
  const char *path = tmp_path("sweep.safetensors");
  size_t base = npu_context_live_bytes(ctx);
  workload_args w = {.x = x, .y = y, .path = path};
  int n_fail = sweep_alloc_failures(ctx, &(scenario_def){.run = sweep_run, .ud = &w});
  CHECK(n_fail > 20);
  CHECK(workload(x, y, path) == NPU_OK);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), base);
  remove(path);
  npu_tensor_release(x);
  npu_tensor_release(y);
}

int main(void) {
  npu_context_config cfg = {.n_threads = 2};
  if (npu_context_new(&cfg, &ctx) != NPU_OK) return 1;
  test_source_and_batch();
  test_components();
  test_repeat();
  test_shuffle();
  test_nested_batch();
  test_shard();
  test_shutdown_and_reuse();
  test_graph();
  test_safetensors();
  test_alloc_failures();
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
  return check_summary("test_data");
}
