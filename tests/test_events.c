/*
 * test_events.c — TensorBoard event files through the C API (io/events.c): a writer's records
 * read back by the reader (the file version first, a graph, summaries with their steps), a
 * second close, the reader's errors, and the allocation-failure sweep over the whole round trip
 * (the writer's buffers come from the context on the caller's thread: every failure is a clean
 * NPU_ERR_NOMEM with zero live bytes after, and the writer thread never allocates).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/ksummary.h"
#include "npu_test.h"

static char tmp_root[] = "/tmp/npu_test_events_XXXXXX";

/* A Summary {value {tag "t", simple_value 1.5}}: 0x0a len {0x0a 1 't', 0x15 float}. */
static const uint8_t summary[] = {0x0a, 0x08, 0x0a, 0x01, 't', 0x15, 0x00, 0x00, 0xc0, 0x3f};

typedef struct round_trip {
  char dir[512];
  int n_items, n_scalars;
  int64_t last_step;
} round_trip;

static npu_status run_round_trip(npu_context *ctx, void *ud) {
  round_trip *rt = ud;
  npu_event_writer *w = NULL;
  npu_event_reader *r = NULL;
  npu_graph *g = NULL;
  char path[600] = "";
  rt->n_items = rt->n_scalars = 0;
  npu_event_writer_config cfg = {.max_queue = 2};
  npu_status st = npu_event_writer_new(ctx, rt->dir, &cfg, &w);
  if (!st) st = npu_graph_new(ctx, &g);
  int node;
  npu_attr dt = {.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32};
  if (!st) st = npu_graph_add_op(g, "placeholder", "x", 0, NULL, 1, &dt, &node);
  if (!st) st = npu_event_writer_add_graph(w, g, 0, -1);
  for (int step = 1; step <= 5 && !st; step++)
    st = npu_event_writer_add_summary(w, summary, sizeof summary, step * 10, 1000.0 + step);
  if (!st) st = npu_event_writer_flush(w);
  if (!st) snprintf(path, sizeof path, "%s", npu_event_writer_path(w));
  if (!st) st = npu_event_writer_close(w);
  if (!st) CHECK(npu_event_writer_close(w) == NPU_OK);
  npu_event_writer_release(w);
  npu_graph_release(g);
  if (!st) st = npu_event_reader_open(ctx, path, &r);
  npu_event_value v;
  while (!st && (st = npu_event_reader_next(r, &v)) == NPU_OK) {
    if (rt->n_items == 0) {
      CHECK(v.kind == NPU_EVENT_FILE_VERSION);
      CHECK(v.n_data == 13 && memcmp(v.data, "brain.Event:2", 13) == 0);
    }
    if (rt->n_items == 1) CHECK(v.kind == NPU_EVENT_GRAPH);
    if (v.kind == NPU_EVENT_SCALAR) {
      rt->n_scalars++;
      CHECK(v.tag_len == 1 && v.tag[0] == 't');
      CHECK(v.simple_value == 1.5);
      CHECK(v.wall_time == 1000.0 + (double)v.step / 10);
      rt->last_step = v.step;
    }
    rt->n_items++;
  }
  if (st == NPU_ERR_OUT_OF_RANGE) st = NPU_OK;
  if (!st) CHECK_EQ_I64((int64_t)npu_event_reader_truncated(r), 0);
  npu_event_reader_release(r);
  if (path[0]) unlink(path);
  return st;
}

static void test_round_trip(npu_context *ctx) {
  round_trip rt;
  snprintf(rt.dir, sizeof rt.dir, "%s/logs", tmp_root);
  CHECK(run_round_trip(ctx, &rt) == NPU_OK);
  CHECK_EQ_I64(rt.n_items, 7);
  CHECK_EQ_I64(rt.n_scalars, 5);
  CHECK_EQ_I64(rt.last_step, 50);
}

static void test_errors(npu_context *ctx) {
  npu_event_writer *w = (npu_event_writer *)1;
  CHECK(npu_event_writer_new(ctx, NULL, NULL, &w) == NPU_ERR_ARG);
  CHECK(w == NULL);
  char file[600];
  snprintf(file, sizeof file, "%s/a_file", tmp_root);
  write_text(file, "x");
  char below[700];
  snprintf(below, sizeof below, "%s/sub", file);
  CHECK(npu_event_writer_new(ctx, below, NULL, &w) == NPU_ERR_IO);
  CHECK(w == NULL);
  npu_event_reader *r = (npu_event_reader *)1;
  snprintf(below, sizeof below, "%s/missing", tmp_root);
  CHECK(npu_event_reader_open(ctx, below, &r) == NPU_ERR_IO);
  CHECK(r == NULL);
  /* "x" is a truncated record: the reader skips it */
  CHECK(npu_event_reader_open(ctx, file, &r) == NPU_OK);
  npu_event_value v;
  CHECK(npu_event_reader_next(r, &v) == NPU_ERR_OUT_OF_RANGE);
  CHECK_EQ_I64((int64_t)npu_event_reader_truncated(r), 1);
  npu_event_reader_release(r);
  npu_event_writer_release(NULL);
  npu_event_reader_release(NULL);
}

/* CRC-32C one bit at a time (the reflected polynomial 0x82F63B78): the definition, sharing
   neither the table nor the instruction with the kernels. */
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

/* CRC-32C (the instruction where there is one) against its table twin: the check value, every
   length up to 100 at every alignment, continued from a previous CRC; both against RFC 3720's
   test vectors (B.4) and the bitwise definition over 1 MiB. */
static void test_crc32c_twins(void) {
  CHECK(npuK_crc32c(0, "123456789", 9) == 0xe3069283u);
  CHECK(npuK_crc32c_ref(0, "123456789", 9) == 0xe3069283u);
  uint8_t v[32];
  static const uint32_t rfc3720[4] = {0x8a9136aau, 0x62a8ab43u, 0x46dd794eu, 0x113fdb5cu};
  for (int t = 0; t < 4; t++) { /* zeros, ones, ascending, descending */
    for (int i = 0; i < 32; i++) v[i] = (uint8_t)(t == 0 ? 0 : t == 1 ? 0xff : t == 2 ? i : 31 - i);
    CHECK(npuK_crc32c(0, v, 32) == rfc3720[t]);
    CHECK(npuK_crc32c_ref(0, v, 32) == rfc3720[t]);
    CHECK(crc32c_bitwise(0, v, 32) == rfc3720[t]);
  }
  enum { BIG = 1 << 20 };
  uint8_t *big = malloc(BIG + 8);
  uint64_t q = 0x243f6a8885a308d3ull;
  for (size_t i = 0; i < BIG + 8; i++) {
    q ^= q << 13, q ^= q >> 7, q ^= q << 17;
    big[i] = (uint8_t)(q >> 24);
  }
  for (size_t at = 0; at < 8; at += 3) {
    uint32_t want = crc32c_bitwise(0, big + at, BIG - at);
    CHECK(npuK_crc32c(0, big + at, BIG - at) == want);
    CHECK(npuK_crc32c_ref(0, big + at, BIG - at) == want);
    /* in two pieces, the second continuing the first */
    uint32_t half = npuK_crc32c(0, big + at, 777777);
    CHECK(npuK_crc32c(half, big + at + 777777, BIG - at - 777777) == want);
  }
  free(big);
  uint8_t buf[128];
  uint64_t r = 88172645463325252ull;
  for (size_t i = 0; i < sizeof buf; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    buf[i] = (uint8_t)r;
  }
  for (size_t at = 0; at < 8; at++)
    for (size_t n = 0; n <= 100; n++) {
      CHECK(npuK_crc32c(0, buf + at, n) == npuK_crc32c_ref(0, buf + at, n));
      CHECK(npuK_crc32c(0x12345678u, buf + at, n) == npuK_crc32c_ref(0x12345678u, buf + at, n));
    }
}

/* Same statistics, bit for bit, and the same buckets (not memcmp: the struct has padding). */
static int same_histo(const npuK_histo *a, const npuK_histo *b) {
  double x[5] = {a->min, a->max, a->num, a->sum, a->sum_squares};
  double y[5] = {b->min, b->max, b->num, b->sum, b->sum_squares};
  return memcmp(x, y, sizeof x) == 0 && a->first == b->first && a->last == b->last &&
         a->n_entries == b->n_entries;
}

/* The histogram kernel's constant tables against their rule, and the kernel against its
   bisecting twin: the limits themselves and their neighbours, zeros, the smallest and largest
   doubles, random values over 40 decades; then the encodings of both. */
static void test_histogram_kernel_twins(void) {
  CHECK(npuK_histogram_check_tables() == 1);
  enum { L = NPUK_HISTOGRAM_N_LIMITS };
  double *limits = malloc(sizeof(double) * L);
  uint64_t *a = malloc(sizeof(uint64_t) * L), *b = malloc(sizeof(uint64_t) * L);
  enum { N = 20000 };
  double *x = malloc(sizeof(double) * N);
  npuK_histogram_limits(limits);
  int n = 0;
  for (int i = 0; i < L && n + 3 <= N; i++) {
    x[n++] = limits[i];
    x[n++] = nextafter(limits[i], 0);
    x[n++] = nextafter(limits[i], limits[i] > 0 ? 1e308 : -1e308);
  }
  double specials[] = {0.0, -0.0, 5e-324, -5e-324, 1e-300, 1.7976931348623157e308,
                       -1.7976931348623157e308, 1e20, -1e20, 1e25};
  for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) x[n++] = specials[i];
  uint64_t r = 88172645463325252ull;
  while (n < N) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    double mag = pow(10.0, (double)(r % 4000) / 100.0 - 15.0);
    x[n++] = (r & (1ull << 40)) ? mag : -mag;
  }
  npuK_histo ha, hb;
  CHECK(npuK_histogram(N, NPUK_F64, x, &ha, a) == -1);
  CHECK(npuK_histogram_ref(N, x, limits, &hb, b) == -1);
  CHECK(memcmp(a, b, sizeof(uint64_t) * L) == 0);
  CHECK(same_histo(&ha, &hb));
  /* each value alone (its bucket is then first and last), the encodings of both */
  static uint8_t pa[64 << 10], pb[64 << 10];
  for (int i = 0; i < N; i += 7) {
    CHECK(npuK_histogram(1, NPUK_F64, x + i, &ha, a) == -1);
    CHECK(npuK_histogram_ref(1, x + i, limits, &hb, b) == -1);
    if (!same_histo(&ha, &hb)) {
      CHECK(!"one value's bucket");
      fprintf(stderr, "  value %a: bucket %d, reference %d\n", x[i], ha.first, hb.first);
      break;
    }
  }
  for (int m = 0; m <= 2; m++) { /* nothing, one value, everything */
    int64_t count = m == 0 ? 0 : m == 1 ? 1 : N;
    const double *from = m == 1 ? &x[N / 2] : x;
    CHECK(npuK_histogram(count, NPUK_F64, from, &ha, a) == -1);
    CHECK(npuK_histogram_ref(count, from, limits, &hb, b) == -1);
    size_t sa = npuK_summary_histogram(NULL, "h", &ha, a), sb = npuK_summary_histogram(NULL, "h", &hb, b);
    CHECK(sa == sb && sa <= sizeof pa);
    if (sa == sb && sa <= sizeof pa) {
      CHECK(npuK_summary_histogram(pa, "h", &ha, a) == sa);
      CHECK(npuK_summary_histogram(pb, "h", &hb, b) == sb);
      CHECK(memcmp(pa, pb, sa) == 0);
    }
  }
  /* other dtypes are read where they lie (float32) or widened a block at a time (the rest,
     N not a multiple of the block): the same as widening them all first */
  float *xf = malloc(sizeof(float) * N);
  int32_t *xi = malloc(sizeof(int32_t) * N);
  double *w = malloc(sizeof(double) * N);
  for (int i = 0; i < N; i++) {
    xf[i] = (float)x[i];
    if (isinf(xf[i])) xf[i] = x[i] > 0 ? FLT_MAX : -FLT_MAX;
    xi[i] = (int32_t)fmax(fmin(x[i], 2e9), -2e9);
  }
  const void *srcs[] = {xf, xi};
  npuK_dtype dts[] = {NPUK_F32, NPUK_I32};
  for (int t = 0; t < 2; t++) {
    npuK_cast(NULL, N, dts[t], srcs[t], NPUK_F64, w);
    CHECK(npuK_histogram(N - 3, dts[t], srcs[t], &ha, a) == -1);
    CHECK(npuK_histogram_ref(N - 3, w, limits, &hb, b) == -1);
    CHECK(memcmp(a, b, sizeof(uint64_t) * L) == 0);
    CHECK(same_histo(&ha, &hb));
  }
  /* a sum past DBL_MAX of finite values is no error */
  double big[3] = {1.5e308, 1.5e308, -1.0};
  CHECK(npuK_histogram(3, NPUK_F64, big, &ha, a) == -1);
  CHECK(npuK_histogram_ref(3, big, limits, &hb, b) == -1);
  CHECK(memcmp(a, b, sizeof(uint64_t) * L) == 0);
  CHECK(same_histo(&ha, &hb));
  /* the first value that is not finite, in every path */
  x[7] = NAN;
  CHECK(npuK_histogram(N, NPUK_F64, x, &ha, a) == 7);
  CHECK(npuK_histogram_ref(N, x, limits, &hb, b) == 7);
  x[7] = -INFINITY, x[9] = INFINITY;
  CHECK(npuK_histogram(N, NPUK_F64, x, &ha, a) == 7);
  xf[9000] = INFINITY, xf[9001] = NAN;
  CHECK(npuK_histogram(N, NPUK_F32, xf, &ha, a) == 9000);
  uint16_t hx[600] = {0};
  hx[513] = 0x7c00; /* float16 infinity, in the third block */
  CHECK(npuK_histogram(600, NPUK_F16, hx, &ha, a) == 513);
  hx[513] = 0x7e00, hx[514] = 0xfc00; /* a NaN, then minus infinity */
  CHECK(npuK_histogram(600, NPUK_F16, hx, &ha, a) == 513);
  free(limits), free(a), free(b), free(x), free(xf), free(xi), free(w);
}

static void test_allocation_failure_sweep(npu_context *ctx) {
  round_trip rt;
  snprintf(rt.dir, sizeof rt.dir, "%s/sweep", tmp_root);
  int failures = sweep_alloc_failures(ctx, &(scenario_def){.run = run_round_trip, .ud = &rt,
                                                          .what = "event file round trip"});
  CHECK(failures >= 8);
}

int main(void) {
  if (!mkdtemp(tmp_root)) {
    perror("mkdtemp");
    return 1;
  }
  npu_context *ctx = NULL;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  test_round_trip(ctx);
  test_errors(ctx);
  test_crc32c_twins();
  test_histogram_kernel_twins();
  test_allocation_failure_sweep(ctx);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
  remove_tree(tmp_root);
  return check_summary("test_events");
}
