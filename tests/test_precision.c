/*
 * test_precision.c — the C side of the precision modes: the float32 <-> float16 / bfloat16
 * conversions every reduced step makes (npuK_cast's direct paths, hardware ones included, must
 * give the bits of half.h's scalar conversions on every input, NaN payloads too), and
 * npu_graph_keep_dtype's contract.  What the pass does to plans is in spec/precision_spec.lua
 * and spec/mixlist_spec.lua.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/half.h"
#include "include/npu.h"
#include "kernels/kernels.h"

/* A serial pool handing out ranges of 13 items: the 8-wide paths meet ragged ends. */
static void ragged_for(void *self, int64_t n, int64_t grain, npuK_range_fn fn, void *arg) {
  (void)self, (void)grain;
  for (int64_t b = 0; b < n; b += 13) fn(arg, b, b + 13 < n ? b + 13 : n);
}
static const npuK_pool ragged = {ragged_for, NULL, NULL};

static void test_half_to_float_every_pattern(void) {
  enum { N = 65536 };
  uint16_t *h = malloc(N * sizeof *h);
  float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
  long bad16 = 0, badbf = 0;
  const npuK_pool *pools[] = {NULL, &ragged};
  for (int p = 0; p < 2; p++) {
    CHECK(npuK_cast(pools[p], N, NPUK_F16, h, NPUK_F32, a) == 0);
    CHECK(npuK_cast(pools[p], N, NPUK_BF16, h, NPUK_F32, b) == 0);
    for (int i = 0; i < N; i++) {
      bad16 += npu_f32_bits(a[i]) != npu_f32_bits(npu_f16_to_f32(h[i]));
      badbf += npu_f32_bits(b[i]) != npu_f32_bits(npu_bf16_to_f32(h[i]));
    }
  }
  CHECK_EQ_I64(bad16, 0);
  CHECK_EQ_I64(badbf, 0);
  free(h);
  free(a);
  free(b);
}

static void test_float_to_half_sampled_and_edges(void) {
  /* every 251st bit pattern (all exponents, signs and NaN payload classes), then the edges:
     ties, the overflow threshold, subnormal boundaries, signalling and quiet NaNs */
  static const uint32_t edges[] = {
      0x00000000u, 0x80000000u, 0x00000001u, 0x33000000u, 0x33000001u, 0x337fffffu,
      0x38800000u, 0x387fffffu, 0x38801000u, 0x3f801000u, 0x3f803000u, 0x477fefffu,
      0x477ff000u, 0x477fe000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u,
      0x7f802000u, 0xffbfffffu, 0x7fffffffu, 0x3c7fe000u, 0x33800000u, 0x337ffffeu};
  const int64_t n_sample = (int64_t)((1ull << 32) / 251) + 1;
  const int64_t n = n_sample + (int64_t)(sizeof edges / sizeof *edges);
  float *x = malloc((size_t)n * sizeof *x);
  uint16_t *h = malloc((size_t)n * sizeof *h), *b = malloc((size_t)n * sizeof *b);
  for (int64_t i = 0; i < n_sample; i++) x[i] = npu_bits_f32((uint32_t)((uint64_t)i * 251u));
  for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
    x[n_sample + (int64_t)i] = npu_bits_f32(edges[i]);
  const npuK_pool *pools[] = {NULL, &ragged};
  long bad16 = 0, badbf = 0;
  for (int p = 0; p < 2; p++) {
    CHECK(npuK_cast(pools[p], n, NPUK_F32, x, NPUK_F16, h) == 0);
    CHECK(npuK_cast(pools[p], n, NPUK_F32, x, NPUK_BF16, b) == 0);
    for (int64_t i = 0; i < n; i++) {
      bad16 += h[i] != npu_f32_to_f16(x[i]);
      badbf += b[i] != npu_f32_to_bf16(x[i]);
    }
  }
  CHECK_EQ_I64(bad16, 0);
  CHECK_EQ_I64(badbf, 0);
  /* a NaN inside a block of ordinary values keeps its payload, the others convert */
  float blk[16];
  for (int i = 0; i < 16; i++) blk[i] = (float)i * 0.3f;
  blk[5] = npu_bits_f32(0x7f802000u); /* signalling, payload bit 13 */
  uint16_t out[16];
  CHECK(npuK_cast(NULL, 16, NPUK_F32, blk, NPUK_F16, out) == 0);
  CHECK(out[5] == npu_f32_to_f16(blk[5]) && out[5] == 0x7c01u);
  CHECK(out[6] == npu_f32_to_f16(blk[6]) && out[15] == npu_f32_to_f16(blk[15]));
  free(x);
  free(h);
  free(b);
}

static void test_keep_dtype_api(void) {
  npu_context *ctx;
  CHECK(npu_context_new(NULL, &ctx) == NPU_OK);
  npu_graph *g;
  CHECK(npu_graph_new(ctx, &g) == NPU_OK);
  int64_t shape[] = {2};
  npu_attr ph[] = {{.name = "dtype", .type = NPU_ATTR_DTYPE, .u.i = NPU_DTYPE_F32},
                   {.name = "shape", .type = NPU_ATTR_INTS, .u.ints = {shape, 1}}};
  int nx = -1, nr = -1;
  CHECK(npu_graph_add_op(g, "placeholder", "x", 0, NULL, 2, ph, &nx) == NPU_OK);
  int x = npu_graph_output(g, nx, 0);
  CHECK(npu_graph_add_op(g, "relu", "r", 1, &x, 0, NULL, &nr) == NPU_OK);
  CHECK(npu_graph_keeps_dtype(g, nr) == 0);
  CHECK(npu_graph_keep_dtype(g, npu_graph_output(g, nr, 0)) == NPU_OK);
  CHECK(npu_graph_keeps_dtype(g, nr) == 1);
  CHECK(npu_graph_keeps_dtype(g, nx) == 0);
  CHECK(npu_graph_keep_dtype(g, npu_graph_output(g, nr, 0)) == NPU_OK); /* twice: harmless */
  CHECK(npu_graph_keep_dtype(g, 99) == NPU_ERR_ARG);
  CHECK(strstr(npu_context_errmsg(ctx), "99 is not a value of this graph") != NULL);
  CHECK(npu_graph_keep_dtype(g, -1) == NPU_ERR_ARG);
  CHECK(npu_graph_keep_dtype(NULL, 0) == NPU_ERR_ARG);
  CHECK(npu_graph_keeps_dtype(g, 42) == 0);
  npu_graph_release(g);
  CHECK_EQ_I64(npu_context_live_bytes(ctx), 0);
  npu_context_release(ctx);
}

int main(void) {
  test_half_to_float_every_pattern();
  test_float_to_half_sampled_and_edges();
  test_keep_dtype_api();
  return check_summary("test_precision");
}
