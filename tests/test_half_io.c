/*
 * test_half_io.c — the kernels that read and write float16 / bfloat16 operands themselves
 * (NPUX_F_HALF_IO: unary, binary, the fused elementwise program; NPUX_F_HALF_XY: the
 * convolutions', pools' x and y, matmul's A and C), widening a block at a time.
 * Each is checked against what the executor did before: widen every operand in full, run the
 * float32 kernel, narrow the output — bit for bit, on sizes that end off a block boundary,
 * with broadcasts (scalar, row, strided), mixed operand dtypes, and ragged pools.
 * First the conversions themselves (npuK_half_widen / npuK_half_narrow, F16C or AVX2 where the
 * CPU has them): the bits of half.h's scalar ones over all 65536 float16 and bfloat16 patterns
 * and a float32 sweep (every rounding boundary, ties, subnormals, overflow, NaN payloads).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/half.h"
#include "kernels/kernels.h"
#include "kernels/kfast.h"
#include "kernels/kgrad.h"

/* A serial pool handing out ranges of 3 items: blocks of a range meet its ragged ends. */
static void ragged_for(void *self, int64_t n, int64_t grain, npuK_range_fn fn, void *arg) {
  (void)self, (void)grain;
  for (int64_t b = 0; b < n; b += 3) fn(arg, b, b + 3 < n ? b + 3 : n);
}
static const npuK_pool ragged = {ragged_for, NULL, NULL};
static const npuK_pool *const pools[] = {NULL, &ragged};

static uint32_t rng = 12345;
static float urand(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)(rng >> 8) / (float)(1u << 24);
}

/* n random values in [-4, 4) (with NaNs, infinities and signed zeros sprinkled in), stored
   as dt; *wide gets them widened to float32 (npuK_cast, as the executor widens). */
static void *rand_stored(int64_t n, npuK_dtype dt, float **wide) {
  float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
  for (int64_t i = 0; i < n; i++) f[i] = (urand() - 0.5f) * 8;
  if (n > 7) f[3] = NAN, f[5] = INFINITY, f[6] = -0.0f, f[7] = 0.0f;
  void *s = malloc((size_t)(n ? n : 1) * npuK_dtype_size(dt));
  npuK_cast(NULL, n, NPUK_F32, f, dt, s);
  /* a signalling NaN with a payload: kept as it is by every widening (half.h) */
  if (n > 9 && dt == NPUK_F16) ((uint16_t *)s)[9] = 0xfd01;
  if (n > 9 && dt == NPUK_BF16) ((uint16_t *)s)[9] = 0xff81;
  npuK_cast(NULL, n, dt, s, NPUK_F32, f);
  *wide = f;
  return s;
}

static void *alloc_out(int64_t n, npuK_dtype dt) {
  void *p = malloc((size_t)(n ? n : 1) * npuK_dtype_size(dt));
  memset(p, 0xa5, (size_t)(n ? n : 1) * npuK_dtype_size(dt)); /* stale bits must be overwritten */
  return p;
}

/* y (float32, computed in full) narrowed to dt equals got (dt), byte for byte. */
static int narrowed_equal(const float *y, int64_t n, npuK_dtype dt, const void *got) {
  void *want = alloc_out(n, dt);
  npuK_cast(NULL, n, NPUK_F32, y, dt, want);
  int ok = memcmp(want, got, (size_t)n * npuK_dtype_size(dt)) == 0;
  free(want);
  return ok;
}

static const npuK_dtype dts[] = {NPUK_F16, NPUK_BF16, NPUK_F32};

/* Converts v (n patterns) at every start offset 0..40 within a group of 32, so the 32-, 16-
   and 8-lane loops and the scalar tails each meet every pattern, NaN groups included. */
static int widen_matches(npuK_dtype dt, const uint16_t *v, int64_t n, float *got) {
  int ok = 1;
  for (int64_t off = 0; off <= 40 && off < n; off += off < 8 ? 1 : 11) {
    npuK_half_widen(dt, v + off, got, n - off);
    for (int64_t i = 0; i < n - off; i++) {
      float want = dt == NPUK_F16 ? npu_f16_to_f32(v[off + i]) : npu_bf16_to_f32(v[off + i]);
      ok &= npu_f32_bits(want) == npu_f32_bits(got[i]);
    }
  }
  return ok;
}

static int narrow_matches(npuK_dtype dt, const float *v, int64_t n, uint16_t *got) {
  int ok = 1;
  for (int64_t off = 0; off <= 40 && off < n; off += off < 8 ? 1 : 11) {
    npuK_half_narrow(v + off, dt, got, n - off);
    for (int64_t i = 0; i < n - off; i++) {
      uint16_t want = dt == NPUK_F16 ? npu_f32_to_f16(v[off + i]) : npu_f32_to_bf16(v[off + i]);
      ok &= want == got[i];
    }
  }
  return ok;
}

/* Floats that exercise rounding to a 16-bit format whose value k is widen(k): each value, its
   float32 neighbours, the midpoint to the next value (a tie) and the midpoint's neighbours. */
static int64_t boundary_floats(npuK_dtype dt, float *out) {
  int64_t n = 0;
  for (uint32_t k = 0; k < 0x10000; k++) {
    float a = dt == NPUK_F16 ? npu_f16_to_f32((uint16_t)k) : npu_bf16_to_f32((uint16_t)k);
    float b = dt == NPUK_F16 ? npu_f16_to_f32((uint16_t)(k + 1)) : npu_bf16_to_f32((uint16_t)(k + 1));
    uint32_t ua = npu_f32_bits(a);
    out[n++] = a;
    out[n++] = npu_bits_f32(ua + 1);
    out[n++] = npu_bits_f32(ua - 1);
    if ((k & 0x7fff) < (dt == NPUK_F16 ? 0x7c00u : 0x7f80u)) { /* b finite, same sign */
      float mid = a + (b - a) * 0.5f;                          /* exact: 16-bit steps */
      uint32_t um = npu_f32_bits(mid);
      out[n++] = mid;
      out[n++] = npu_bits_f32(um + 1);
      out[n++] = npu_bits_f32(um - 1);
    }
  }
  return n;
}

static void test_conversions(void) {
  const npuK_dtype halves[] = {NPUK_F16, NPUK_BF16};
  uint16_t *pat = malloc(0x10000 * sizeof *pat);
  float *wide = malloc(0x10000 * sizeof *wide);
  for (uint32_t k = 0; k < 0x10000; k++) pat[k] = (uint16_t)k;
  /* float32 inputs: the boundaries of both formats, float32 subnormals and specials, NaNs with
     every kind of payload (quiet, signalling, low bits only), and a stride over all patterns */
  int64_t cap = 6 * 0x10000 + 4096 + (1 << 20), n = 0;
  float *f = malloc((size_t)cap * sizeof *f);
  uint16_t *got = malloc((size_t)cap * sizeof *got);
  float *gotf = malloc(0x10000 * sizeof *gotf);
  const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u,
                              0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0xffc00001u,
                              0x7f802000u, 0x7fa00000u, 0x7f801fffu, 0xff8fe000u, 0x477fefffu,
                              0x477ff000u, 0x477fe000u, 0x33000000u, 0x33000001u, 0xb3000001u,
                              0x387fe000u, 0x387fdfffu, 0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu};
  for (int pass = 0; pass < 2; pass++) {
    npuK_dtype dt = halves[pass];
    CHECK(widen_matches(dt, pat, 0x10000, gotf));
    n = boundary_floats(dt, f);
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
      for (int r = 0; r < 40; r++) f[n++] = npu_bits_f32(special[i] ^ (r & 1 ? 0x80000000u : 0));
    for (uint32_t u = 0, i = 0; i < (1u << 20); i++, u += 4099u) f[n++] = npu_bits_f32(u);
    CHECK(n <= cap);
    CHECK(narrow_matches(dt, f, n, got));
  }
  free(pat), free(wide), free(f), free(got), free(gotf);
}

static void test_unary(void) {
  const int64_t sizes[] = {0, 1, 1023, 1024, 1025, 3001};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int op = 0; op < NPUK_UN_COUNT; op++)
      for (int d = 0; d < 3; d++)
        for (int fast = 0; fast < 2; fast++) {
          int64_t n = sizes[s];
          npuK_dtype xd = dts[d], yd = dts[(d + 1) % 3]; /* in and out may differ */
          if (fast && !npuK_unary_has_fast((npuK_unop)op)) continue;
          npuK_unary_f32_fn f = fast ? npuK_unary_f32_fast : npuK_unary_f32;
          float *xw;
          void *x = rand_stored(n, xd, &xw);
          float *yw = malloc((size_t)(n ? n : 1) * sizeof *yw);
          f(NULL, (npuK_unop)op, n, xw, yw);
          for (int p = 0; p < 2; p++) {
            void *y = alloc_out(n, yd);
            CHECK(npuK_unary_mixed(pools[p], f, (npuK_unop)op, n, x, xd, y, yd) == 0);
            CHECK(narrowed_equal(yw, n, yd, y));
            free(y);
          }
          free(x), free(xw), free(yw);
        }
  /* relu from float16 to float16 (done on the stored bits): every one of the 65536 patterns,
     signalling and quiet NaNs of both signs, -0, infinities, subnormals, against widening,
     the float32 relu and narrowing */
  {
    int64_t n = 65536;
    uint16_t *h = malloc((size_t)n * sizeof *h);
    float *hw = malloc((size_t)n * sizeof *hw), *yw = malloc((size_t)n * sizeof *yw);
    for (int64_t i = 0; i < n; i++) h[i] = (uint16_t)i;
    npuK_cast(NULL, n, NPUK_F16, h, NPUK_F32, hw);
    npuK_unary_f32(NULL, NPUK_UN_RELU, n, hw, yw);
    for (int p = 0; p < 2; p++) {
      void *y = alloc_out(n, NPUK_F16);
      CHECK(npuK_unary_mixed(pools[p], npuK_unary_f32, NPUK_UN_RELU, n, h, NPUK_F16, y,
                             NPUK_F16) == 0);
      CHECK(narrowed_equal(yw, n, NPUK_F16, y));
      CHECK(((uint16_t *)y)[0xfd01] == 0xfd01 && ((uint16_t *)y)[0x8000] == 0 &&
            ((uint16_t *)y)[0x7c00] == 0x7c00 && ((uint16_t *)y)[0xbc00] == 0);
      free(y);
    }
    free(h), free(hw), free(yw);
  }
  /* dtypes it cannot read: refused, nothing written */
  double xd[4] = {1, 2, 3, 4}, yd[4] = {0};
  CHECK(npuK_unary_mixed(NULL, npuK_unary_f32, NPUK_UN_NEG, 4, xd, NPUK_F64, yd, NPUK_F16) == -1);
  CHECK(yd[0] == 0);
  CHECK(npuK_unary_mixed(NULL, npuK_unary_f32, NPUK_UN_COUNT, 4, xd, NPUK_F16, yd, NPUK_F16) == -1);
}

/* out dims, and a's and b's element strides per out dim (0: broadcast) */
typedef struct bcase {
  int ndim;
  int64_t dims[3], sa[3], sb[3], na, nb;
} bcase;

/* The mixed-dtype kernel on both pools against npuK_binary_f32 on the widened operands aw, bw,
   narrowed to od, bit for bit.  Frees the operands. */
static void check_binary(const bcase *c, int op, void *a, npuK_dtype ad, float *aw, void *b,
                         npuK_dtype bd, float *bw, npuK_dtype od) {
  int64_t n = 1;
  for (int i = 0; i < c->ndim; i++) n *= c->dims[i];
  float *yw = malloc((size_t)n * sizeof *yw);
  npuK_binary_f32(NULL, (npuK_binop)op, c->ndim, c->dims, aw, c->sa, bw, c->sb, yw);
  for (int p = 0; p < 2; p++) {
    void *y = alloc_out(n, od);
    CHECK(npuK_binary_mixed(pools[p], (npuK_binop)op, c->ndim, c->dims, a, ad, c->sa, b, bd,
                            c->sb, y, od) == 0);
    CHECK(narrowed_equal(yw, n, od, y));
    free(y);
  }
  free(a), free(b), free(aw), free(bw), free(yw);
}

static void test_binary(void) {
  const bcase cases[] = {
      {1, {2500}, {1}, {1}, 2500, 2500},                /* dense, one long run */
      {1, {1031}, {1}, {0}, 1031, 1},                   /* scalar b */
      {2, {37, 129}, {0, 1}, {129, 1}, 129, 37 * 129},  /* row a */
      {2, {1300, 3}, {3, 1}, {1, 0}, 3900, 1300},       /* column b: a run per element */
      {3, {5, 7, 300}, {300, 0, 1}, {0, 300, 1}, 1500, 2100}, /* both broadcast inside */
      {2, {600, 5}, {1, 600}, {5, 1}, 3000, 3000},      /* a transposed: strided runs */
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
    for (int op = 0; op < NPUK_BIN_COUNT; op++)
      for (int d = 0; d < 3; d++) {
        const bcase *c = &cases[k];
        npuK_dtype ad = dts[d], bd = dts[(d + 1) % 3], od = dts[(d + 2) % 3];
        float *aw, *bw;
        void *a = rand_stored(c->na, ad, &aw), *b = rand_stored(c->nb, bd, &bw);
        check_binary(c, op, a, ad, aw, b, bd, bw, od);
      }
  /* a float16 output of add / sub / mul / div from float16 or float32 operands, dense or
     broadcast: the lanes computed in registers (F16C), up to the first group of 8 whose
     operands hold a NaN, the rest of the block by the buffered path — NaNs and infinities
     late in the data (rand_stored's are at the start, where the whole run goes buffered),
     infinities meeting to make NaNs in the lanes, a signalling NaN after them, ragged ends */
  static const npuK_dtype f16in[3][2] = {{NPUK_F16, NPUK_F16}, {NPUK_F32, NPUK_F16},
                                         {NPUK_F16, NPUK_F32}};
  for (size_t k = 0; k < 4; k++)
    for (int op = NPUK_BIN_ADD; op <= NPUK_BIN_DIV; op++)
      for (int d = 0; d < 3; d++) {
        const bcase *c = &cases[k];
        npuK_dtype ad = f16in[d][0], bd = f16in[d][1];
        float *aw = malloc((size_t)c->na * sizeof *aw), *bw = malloc((size_t)c->nb * sizeof *bw);
        for (int64_t i = 0; i < c->na; i++) aw[i] = (urand() - 0.5f) * 8;
        for (int64_t i = 0; i < c->nb; i++) bw[i] = (urand() - 0.5f) * 8;
        for (int64_t i = c->na / 2; i < c->na && i < c->na / 2 + 40; i += 5)
          aw[i] = i % 2 ? INFINITY : -INFINITY; /* inf - inf, inf * 0 ... in the lanes */
        if (c->nb > 1) bw[c->nb / 2 + 5] = INFINITY, bw[c->nb / 2 + 10] = 0.0f;
        void *a = malloc((size_t)c->na * npuK_dtype_size(ad));
        void *b = malloc((size_t)c->nb * npuK_dtype_size(bd));
        npuK_cast(NULL, c->na, NPUK_F32, aw, ad, a);
        npuK_cast(NULL, c->nb, NPUK_F32, bw, bd, b);
        if (c->na > 1000 && ad == NPUK_F16) ((uint16_t *)a)[c->na - 200] = 0xfd01; /* signalling */
        else if (c->na > 1000) aw[c->na - 200] = NAN, npuK_cast(NULL, c->na, NPUK_F32, aw, ad, a);
        npuK_cast(NULL, c->na, ad, a, NPUK_F32, aw);
        npuK_cast(NULL, c->nb, bd, b, NPUK_F32, bw);
        check_binary(c, op, a, ad, aw, b, bd, bw, NPUK_F16);
      }
  int64_t dims[1] = {4}, st[1] = {1};
  int32_t i4[4] = {1, 2, 3, 4};
  uint16_t h4[4] = {0};
  CHECK(npuK_binary_mixed(NULL, NPUK_BIN_ADD, 1, dims, i4, NPUK_I32, st, h4, NPUK_F16, st, h4,
                          NPUK_F16) == -1);
}

/* Runs the program on the stored operands (ops[i] of dtype od[i], wide[i] their float32
   values) into yd on the first n_pools pools: bit for bit the float32 program on the widened
   values, narrowed.  Frees the operands. */
static void check_program(int n_pools, int n_instr, const npuK_ew_instr *prog, int64_t rows,
                          int64_t cols, int n_ops, void **ops, float **wide,
                          const npuK_dtype *od, npuK_dtype yd) {
  int64_t n = rows * cols;
  float *yw = malloc((size_t)n * sizeof *yw);
  npuK_eltwise_f32(NULL, n_instr, prog, rows, cols, (const float *const *)wide, yw);
  for (int p = 0; p < n_pools; p++) {
    void *y = alloc_out(n, yd);
    CHECK(npuK_eltwise_mixed(pools[p], n_instr, prog, rows, cols, (const void *const *)ops, od, y,
                             yd) == 0);
    CHECK(narrowed_equal(yw, n, yd, y));
    free(y);
  }
  free(yw);
  for (int i = 0; i < n_ops; i++) free(ops[i]), free(wide[i]);
}

/* A program touching every instruction kind and broadcast: ((x * s) + row) -> relu ->
   max(., full) -> prelu(row slope) -> leaky -> full - . (swapped) -> exp -> add scalar. */
static void test_eltwise(void) {
  const npuK_ew_instr prog[] = {
      {.kind = NPUK_EW_LOAD, .operand = 0},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_MUL, .bcast = NPUK_EW_SCALAR, .operand = 1},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_ADD, .bcast = NPUK_EW_ROW, .operand = 2},
      {.kind = NPUK_EW_UNARY, .op = NPUK_UN_RELU, .operand = -1},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_MAXIMUM, .bcast = NPUK_EW_FULL, .operand = 3},
      {.kind = NPUK_EW_PRELU, .bcast = NPUK_EW_ROW, .operand = 2},
      {.kind = NPUK_EW_LEAKY_RELU, .operand = -1, .alpha = 0.2f},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_SUB, .bcast = NPUK_EW_FULL, .swap = 1, .operand = 3},
      {.kind = NPUK_EW_UNARY, .op = NPUK_UN_EXP, .operand = -1},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_POW, .bcast = NPUK_EW_SCALAR, .operand = 1},
  };
  const int n_instr = (int)(sizeof prog / sizeof *prog);
  /* rows x cols: short rows packed into a block, a row of exactly one block, long rows cut
     into blocks with a short last one, a single element */
  const int64_t shapes[][2] = {{77, 5}, {3, 1024}, {4, 2500}, {1, 1}, {1000, 3}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int d = 0; d < 3; d++)
      for (int prefix = 1; prefix <= n_instr; prefix += n_instr - 1) { /* LOAD alone, all */
        int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        npuK_dtype od[4] = {dts[d], dts[(d + 1) % 3], dts[(d + 2) % 3], dts[d]},
                   yd = dts[(d + 1) % 3];
        int64_t sizes[4] = {n, 1, cols, n};
        void *ops[4];
        float *wide[4];
        for (int i = 0; i < 4; i++) ops[i] = rand_stored(sizes[i], od[i], &wide[i]);
        check_program(2, prefix, prog, rows, cols, 4, ops, wide, od, yd);
      }
  const npuK_dtype bad[1] = {NPUK_I32};
  int32_t x[2] = {1, 2};
  const void *xs[1] = {x};
  uint16_t y[2] = {0};
  CHECK(npuK_eltwise_mixed(NULL, 1, prog, 1, 2, xs, bad, y, NPUK_F16) == -1);
  CHECK(y[0] == 0);
}

/* Every binary op of a program against a dense float16 operand (read as stored, with F16C), the
   operand on either side, NaNs (one signalling) in both, lengths off the 8-lane groups. */
static void test_eltwise_f16_operand(void) {
  const int64_t lens[] = {1, 7, 8, 13, 1000, 1030};
  for (int op = 0; op < NPUK_BIN_COUNT; op++)
    for (int swap = 0; swap < 2; swap++)
      for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
        for (int d = 0; d < 3; d++) {
          const npuK_ew_instr prog[] = {
              {.kind = NPUK_EW_LOAD, .operand = 0},
              {.kind = NPUK_EW_BINARY, .op = (uint8_t)op, .bcast = NPUK_EW_FULL,
               .swap = (uint8_t)swap, .operand = 1}};
          int64_t n = lens[l];
          npuK_dtype od[2] = {dts[d], NPUK_F16}, yd = dts[(d + 1) % 3];
          float *wide[2];
          void *ops[2] = {rand_stored(n, od[0], &wide[0]), rand_stored(n, od[1], &wide[1])};
          check_program(1, 2, prog, 1, n, 2, ops, wide, od, yd);
        }
}

/* A program of only the ops the register path has (fused.c's ewr_*: every one of them, each
   broadcast, the operand on either side), float16 and float32 operands and outputs, NaNs
   (one signalling) and infinities in the operands so that NaN groups fall back and the
   program makes NaNs of its own (inf - inf, 0 * inf), lengths off the 8- and 32-lane groups,
   rows that do not fill a group (ROW operands): bit for bit the float32 program, narrowed. */
static void test_eltwise_registers(void) {
  const npuK_ew_instr prog[] = {
      {.kind = NPUK_EW_LOAD, .operand = 0},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_MUL, .bcast = NPUK_EW_SCALAR, .operand = 1},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_ADD, .bcast = NPUK_EW_ROW, .operand = 2},
      {.kind = NPUK_EW_UNARY, .op = NPUK_UN_RELU, .operand = -1},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_MAXIMUM, .bcast = NPUK_EW_FULL, .operand = 3},
      {.kind = NPUK_EW_LEAKY_RELU, .operand = -1, .alpha = 0.2f},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_SUB, .bcast = NPUK_EW_FULL, .swap = 1, .operand = 3},
      {.kind = NPUK_EW_UNARY, .op = NPUK_UN_RELU6, .operand = -1},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_MINIMUM, .bcast = NPUK_EW_ROW, .swap = 1,
       .operand = 2},
      {.kind = NPUK_EW_UNARY, .op = NPUK_UN_NEG, .operand = -1},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_DIV, .bcast = NPUK_EW_FULL, .operand = 0},
      {.kind = NPUK_EW_UNARY, .op = NPUK_UN_ABS, .operand = -1},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_SQUARED_DIFFERENCE, .bcast = NPUK_EW_FULL,
       .operand = 3},
      {.kind = NPUK_EW_UNARY, .op = NPUK_UN_SQUARE, .operand = -1},
      {.kind = NPUK_EW_BINARY, .op = NPUK_BIN_SUB, .bcast = NPUK_EW_SCALAR, .swap = 1,
       .operand = 1},
      {.kind = NPUK_EW_PRELU, .bcast = NPUK_EW_ROW, .operand = 2},
      {.kind = NPUK_EW_PRELU, .bcast = NPUK_EW_FULL, .operand = 3},
      {.kind = NPUK_EW_PRELU, .bcast = NPUK_EW_SCALAR, .operand = 1},
  };
  const int n_instr = (int)(sizeof prog / sizeof *prog);
  const int64_t shapes[][2] = {{77, 5}, {3, 1024}, {2, 2500}, {1, 1}, {5, 41}, {9, 64}, {1, 39},
                               {50, 16}, {13, 24}, {7, 8}, {3, 1032}};
  const npuK_dtype two[2] = {NPUK_F16, NPUK_F32};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
    for (int d = 0; d < 8; d++)
      for (int prefix = 2; prefix <= n_instr; prefix++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        npuK_dtype od[4] = {two[d & 1], two[(d >> 1) & 1], two[(d >> 2) & 1], NPUK_F16},
                   yd = two[(d + prefix) & 1];
        int64_t sizes[4] = {n, 1, cols, n};
        void *ops[4];
        float *wide[4];
        for (int i = 0; i < 4; i++) ops[i] = rand_stored(sizes[i], od[i], &wide[i]);
        if (n > 20) { /* inf - inf and 0 * inf inside the program */
          wide[0][17] = INFINITY, wide[3][17] = INFINITY, wide[0][19] = 0.0f;
          /* signed zeros and infinities in groups without a NaN (the register path's) */
          for (int64_t i = 40; i + 8 < n; i += 45) {
            wide[0][i] = -0.0f, wide[0][i + 1] = 0.0f, wide[3][i + 2] = -0.0f;
            wide[0][i + 3] = -INFINITY, wide[3][i + 4] = INFINITY, wide[0][i + 5] = 7.0f;
            wide[3][i + 6] = -0.0f, wide[0][i + 6] = 0.0f;
          }
          npuK_cast(NULL, n, NPUK_F32, wide[0], od[0], ops[0]);
          npuK_cast(NULL, n, NPUK_F32, wide[3], od[3], ops[3]);
          npuK_cast(NULL, n, od[0], ops[0], NPUK_F32, wide[0]);
          npuK_cast(NULL, n, od[3], ops[3], NPUK_F32, wide[3]);
        }
        check_program(2, prefix, prog, rows, cols, 4, ops, wide, od, yd);
      }
}

/* Each op of the register path alone after the LOAD (signed zeros, infinities, NaNs), so that
   no earlier op hides a -0 or a NaN from it. */
static void test_eltwise_registers_one_op(void) {
  npuK_ew_instr ops[16];
  int n_ops = 0;
  const uint8_t un[] = {NPUK_UN_NEG, NPUK_UN_RELU, NPUK_UN_RELU6, NPUK_UN_SQUARE, NPUK_UN_ABS};
  for (size_t u = 0; u < sizeof un; u++)
    ops[n_ops++] = (npuK_ew_instr){.kind = NPUK_EW_UNARY, .op = un[u], .operand = -1};
  ops[n_ops++] = (npuK_ew_instr){.kind = NPUK_EW_LEAKY_RELU, .operand = -1, .alpha = -0.5f};
  ops[n_ops++] = (npuK_ew_instr){.kind = NPUK_EW_PRELU, .bcast = NPUK_EW_FULL, .operand = 1};
  const uint8_t bin[] = {NPUK_BIN_ADD, NPUK_BIN_SUB, NPUK_BIN_MUL, NPUK_BIN_DIV,
                         NPUK_BIN_MAXIMUM, NPUK_BIN_MINIMUM, NPUK_BIN_SQUARED_DIFFERENCE};
  for (size_t b = 0; b < sizeof bin; b++)
    ops[n_ops++] = (npuK_ew_instr){.kind = NPUK_EW_BINARY, .op = bin[b], .bcast = NPUK_EW_FULL,
                                   .swap = (uint8_t)(b & 1), .operand = 1};
  const float special[] = {-0.0f, 0.0f, INFINITY, -INFINITY, 6.0f, 7.0f, -1.0f, 65504.0f};
  for (int i = 0; i < n_ops; i++)
    for (int d = 0; d < 4; d++) {
      const npuK_ew_instr prog[2] = {{.kind = NPUK_EW_LOAD, .operand = 0}, ops[i]};
      const int64_t n = 300;
      npuK_dtype od[2] = {d & 1 ? NPUK_F32 : NPUK_F16, NPUK_F16}, yd = d & 2 ? NPUK_F32 : NPUK_F16;
      float *wide[2];
      void *st[2] = {rand_stored(n, od[0], &wide[0]), rand_stored(n, od[1], &wide[1])};
      for (int64_t k = 40; k < n; k++) { /* every pair of specials, away from the NaNs */
        wide[0][k] = special[k % 8];
        wide[1][k] = special[(k / 8) % 8];
      }
      for (int o = 0; o < 2; o++) {
        npuK_cast(NULL, n, NPUK_F32, wide[o], od[o], st[o]);
        npuK_cast(NULL, n, od[o], st[o], NPUK_F32, wide[o]);
      }
      check_program(1, 2, prog, 1, n, 2, st, wide, od, yd);
    }
}

/* conv2d with x and y stored reduced (NPUX_F_HALF_XY): against widening x in full,
   npuK_conv2d_f32_ep and narrowing y, for pointwise, im2col (strides, dilation, padding,
   batches whose blocks cross images, several blocks per slot), an empty filter (k = 0), with
   and without an epilogue, 1 to 3 slots and ragged pools. */
static void test_conv_half(void) {
  /* n, in_h, in_w, c, k_h, k_w, stride, dilation, pad, out_c */
  static const int64_t geo[][10] = {
      {1, 7, 5, 3, 1, 1, 1, 1, 0, 5},   {2, 9, 7, 4, 3, 3, 1, 1, 1, 6},
      {1, 11, 10, 3, 5, 5, 2, 1, 2, 7}, {2, 8, 9, 2, 3, 2, 1, 2, 1, 3},
      {2, 20, 20, 64, 3, 3, 1, 1, 1, 9}, {1, 24, 24, 40, 1, 1, 1, 1, 0, 11},
      {1, 4, 4, 0, 3, 3, 1, 1, 1, 4}};
  for (size_t g = 0; g < sizeof geo / sizeof *geo; g++) {
    const int64_t *q = geo[g];
    npuK_window2d w = {.n = q[0], .in_h = q[1], .in_w = q[2], .c = q[3], .k_h = q[4], .k_w = q[5],
                       .stride_h = q[6], .stride_w = q[6], .dilation_h = q[7], .dilation_w = q[7],
                       .pad_top = q[8], .pad_left = q[8]};
    w.out_h = (w.in_h + 2 * w.pad_top - (w.k_h - 1) * w.dilation_h - 1) / w.stride_h + 1;
    w.out_w = (w.in_w + 2 * w.pad_left - (w.k_w - 1) * w.dilation_w - 1) / w.stride_w + 1;
    int64_t out_c = q[9], nx = w.n * w.in_h * w.in_w * w.c, ny = w.n * w.out_h * w.out_w * out_c;
    int64_t nf = w.k_h * w.k_w * w.c * out_c;
    float *fw, *bias = malloc((size_t)out_c * sizeof *bias);
    void *fs = rand_stored(nf, NPUK_F32, &fw);
    for (int64_t i = 0; i < nf; i++) /* finite weights: NaN anywhere would hide the rest */
      if (!isfinite(fw[i])) fw[i] = 0.5f;
    for (int64_t i = 0; i < out_c; i++) bias[i] = (urand() - 0.5f) * 2;
    for (int e = 0; e < 2; e++)
      for (int d = 0; d < 3; d++) {
        npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU6};
        const npuK_epilogue *epp = e ? &ep : NULL;
        npuK_dtype xd = dts[d], yd = dts[(d + 1) % 3];
        float *xw;
        void *x = rand_stored(nx, xd, &xw);
        float *yw = malloc((size_t)(ny ? ny : 1) * sizeof *yw);
        float *s32 = malloc(npuK_conv2d_f32_scratch_size(&w, out_c, 1) + 16);
        npuK_conv2d_f32_ep(NULL, &w, out_c, xw, fw, epp, yw, s32, 1);
        for (int slots = 1; slots <= 3; slots++)
          for (int p = 0; p < 2; p++) {
            size_t bytes = npuK_conv2d_half_scratch_size(&w, out_c, slots, xd, yd);
            CHECK(bytes >= npuK_conv2d_f32_scratch_size(&w, out_c, slots) || xd == NPUK_F32);
            float *scratch = malloc(bytes + 16);
            void *y = alloc_out(ny, yd);
            npuK_conv2d_half_ep(pools[p], &w, out_c, x, xd, fw, epp, y, yd, scratch, slots);
            CHECK(narrowed_equal(yw, ny, yd, y));
            free(y), free(scratch);
          }
        free(x), free(xw), free(yw), free(s32);
      }
    free(fs), free(fw), free(bias);
  }
}

/* A k x k window at stride s over an n x h x wd x c input (SAME or VALID, TF's rule), or over
   y's rows as a pool (c the channels). */
static npuK_window2d square_window(int64_t n, int64_t h, int64_t wd, int64_t c, int64_t k,
                                   int64_t s, int same) {
  npuK_window2d w = {.n = n, .in_h = h, .in_w = wd, .c = c, .k_h = k, .k_w = k, .stride_h = s,
                     .stride_w = s, .dilation_h = 1, .dilation_w = 1};
  if (npuK_conv_output_dim(h, k, s, 1, same, &w.out_h, &w.pad_top) ||
      npuK_conv_output_dim(wd, k, s, 1, same, &w.out_w, &w.pad_left))
    w.n = 0;
  return w;
}

/* The direct convolution with x and y stored reduced (npuK_conv2d_direct_half_ep): against
   widening x in full, the float32 direct kernel at the same instruction level and narrowing y,
   bit for bit — every register-tile width of the AVX-512 (1..12) and AVX2 (1..6) rows, padded
   and unpadded images (the widened copy with and without zero columns), whole images and bands
   of rows (pointwise convolutions, stride 1 and 2, widened by bands at any size), a float16 y
   narrowed from the tiles' registers (no pool, no epilogue or bias + relu) or from float32 rows,
   8 / 16 + 8 / 32 + 8 channels, epilogues in registers (bias + relu) and after
   (relu6), fused max pools (2x2 in registers, 3x3 SAME by rows), NaN and infinite inputs, 1 to
   3 slots and ragged pools. */
static void test_conv_direct_half(void) {
  /* n, in_h, in_w, c, k, stride, same, out_c; in_w 0: every width 1..13 */
  static const int64_t geo[][8] = {
      {1, 5, 0, 3, 3, 1, 1, 16},    {2, 9, 14, 3, 3, 1, 1, 16},  {1, 7, 13, 5, 3, 1, 0, 8},
      {1, 12, 25, 4, 3, 2, 1, 40},  {2, 6, 12, 6, 1, 1, 0, 24},  {1, 70, 66, 16, 3, 1, 1, 8},
      {1, 67, 70, 15, 3, 1, 0, 16}, {1, 8, 9, 2, 2, 1, 1, 48},  {1, 9, 10, 8, 1, 2, 0, 16},
      {1, 70, 60, 16, 1, 1, 0, 32}};
  /* x's and y's dtypes: force_fp16's first */
  static const npuK_dtype xy[8][2] = {
      {NPUK_F16, NPUK_F16}, {NPUK_BF16, NPUK_F32}, {NPUK_F32, NPUK_F16},  {NPUK_F16, NPUK_F32},
      {NPUK_BF16, NPUK_BF16}, {NPUK_F16, NPUK_BF16}, {NPUK_F32, NPUK_BF16}, {NPUK_BF16, NPUK_F16}};
  int combo = 0;
  for (size_t g = 0; g < sizeof geo / sizeof *geo; g++)
    for (int64_t iw = geo[g][2] ? geo[g][2] : 1; iw <= (geo[g][2] ? geo[g][2] : 13); iw++) {
      const int64_t *q = geo[g], oc = q[7];
      npuK_window2d w = square_window(q[0], q[1], iw, q[3], q[4], q[5], (int)q[6]);
      CHECK(w.n > 0 && npuK_conv2d_direct_fits(&w, oc, NULL));
      int64_t nx = w.n * w.in_h * w.in_w * w.c, nf = w.k_h * w.k_w * w.c * oc;
      int big = nx > 20000; /* the banded images: fewer combinations */
      float *fw, *bias = malloc((size_t)oc * sizeof *bias);
      void *fs = rand_stored(nf, NPUK_F32, &fw);
      for (int64_t i = 0; i < nf; i++) /* finite weights: NaN anywhere would hide the rest */
        if (!isfinite(fw[i])) fw[i] = 0.5f;
      for (int64_t i = 0; i < oc; i++) bias[i] = (urand() - 0.5f) * 2;
      for (int d = 0; d < 8; d++) {
        npuK_dtype xd = xy[d][0], yd = xy[d][1];
        if (big && d > 1) break;
        float *xw;
        void *x = rand_stored(nx, xd, &xw);
        if (nx > 40) { /* infinities and a NaN away from the start too */
          xw[nx / 3] = INFINITY, xw[nx / 2] = NAN, xw[2 * nx / 3] = -INFINITY;
          npuK_cast(NULL, nx, NPUK_F32, xw, xd, x);
        }
        for (int pk = 0; pk < 3; pk++) { /* no pool, 2x2 VALID, 3x3 stride 3 SAME */
          npuK_window2d pw = square_window(w.n, w.out_h, w.out_w, oc, pk + 1, pk + 1, pk == 2);
          const npuK_window2d *pwp = pk ? &pw : NULL;
          if (pk && (pw.n == 0 || !npuK_conv2d_direct_fits(&w, oc, &pw))) continue;
          int64_t ny = pk ? pw.n * pw.out_h * pw.out_w * oc : w.n * w.out_h * w.out_w * oc;
          for (int e = 0; e < 3; e++)
            for (int level = 0; level <= 2; level++) {
              if (big && (e + level + pk) % 3) continue;
              npuK_epilogue ep = {.bias = bias, .act = e == 1 ? NPUK_ACT_RELU : NPUK_ACT_RELU6};
              const npuK_epilogue *epp = e ? &ep : NULL;
              int slots = 1 + combo % 3;
              const npuK_pool *pool = pools[combo++ % 2];
              float *yw = malloc((size_t)ny * sizeof *yw);
              /* scratch of exactly the sizes asked for (no slack): under make sanitize a
                 kernel touching more than its _scratch_size says is an error */
              size_t b32 = npuK_conv2d_direct_scratch_size(&w, oc, pwp, 1);
              float *s32 = malloc(b32 ? b32 : 1);
              npuK_conv2d_f32_direct_level_ep(NULL, &w, oc, xw, fw, epp, pwp, yw, s32, 1, level);
              size_t bytes = npuK_conv2d_direct_half_scratch_size(&w, oc, pwp, slots, xd, yd);
              CHECK(bytes >= npuK_conv2d_direct_scratch_size(&w, oc, pwp, slots));
              float *scratch = malloc(bytes ? bytes : 1);
              void *y = alloc_out(ny, yd);
              npuK_conv2d_direct_half_level_ep(pool, &w, oc, x, xd, fw, epp, pwp, y, yd, scratch,
                                               slots, level);
              CHECK(narrowed_equal(yw, ny, yd, y));
              if (level == 2) { /* the plain entry is the highest level */
                memset(y, 0xa5, (size_t)ny * npuK_dtype_size(yd));
                npuK_conv2d_direct_half_ep(pool, &w, oc, x, xd, fw, epp, pwp, y, yd, scratch,
                                           slots);
                CHECK(narrowed_equal(yw, ny, yd, y));
              }
              free(y), free(scratch), free(yw), free(s32);
            }
        }
        free(x), free(xw);
      }
      free(fs), free(fw), free(bias);
    }
  /* float32 x and y: no more scratch than the float32 kernel's; a reduced y adds its rows */
  npuK_window2d w = square_window(1, 8, 8, 4, 3, 1, 0);
  CHECK(npuK_conv2d_direct_half_scratch_size(&w, 8, NULL, 2, NPUK_F32, NPUK_F32) == 0);
  CHECK(npuK_conv2d_direct_half_scratch_size(&w, 8, NULL, 2, NPUK_F32, NPUK_F16) > 0);
  CHECK(npuK_conv2d_direct_half_scratch_size(&w, 8, NULL, 2, NPUK_BF16, NPUK_F32) > 0);
}

/* depthwise_conv2d with x and y stored reduced: against widening x in full,
   npuK_depthwise_conv2d_f32_ep and narrowing y — bands that cross images and slot ends,
   strides, dilation, padding wider than the window, multipliers, in-register and per-row
   epilogues, 1 to 3 slots (more than rows too) and ragged pools. */
static void test_depthwise_half(void) {
  /* n, in_h, in_w, c, k_h, k_w, stride, dilation, pad, mult */
  static const int64_t geo[][10] = {
      {1, 7, 5, 3, 3, 3, 1, 1, 1, 1},    {2, 19, 9, 17, 5, 5, 1, 1, 2, 1},
      {2, 12, 11, 24, 3, 3, 2, 1, 1, 1}, {1, 9, 8, 5, 3, 3, 1, 2, 2, 2},
      {3, 3, 4, 16, 5, 5, 1, 1, 4, 1},   {1, 1, 6, 8, 1, 3, 1, 1, 1, 3}};
  static const npuK_act acts[] = {NPUK_ACT_RELU6, NPUK_ACT_SIGMOID};
  for (size_t g = 0; g < sizeof geo / sizeof *geo; g++) {
    const int64_t *q = geo[g];
    npuK_window2d w = {.n = q[0], .in_h = q[1], .in_w = q[2], .c = q[3], .k_h = q[4], .k_w = q[5],
                       .stride_h = q[6], .stride_w = q[6], .dilation_h = q[7], .dilation_w = q[7],
                       .pad_top = q[8], .pad_left = q[8]};
    w.out_h = (w.in_h + 2 * w.pad_top - (w.k_h - 1) * w.dilation_h - 1) / w.stride_h + 1;
    w.out_w = (w.in_w + 2 * w.pad_left - (w.k_w - 1) * w.dilation_w - 1) / w.stride_w + 1;
    int64_t mult = q[9], cm = w.c * mult, nx = w.n * w.in_h * w.in_w * w.c;
    int64_t ny = w.n * w.out_h * w.out_w * cm, nf = w.k_h * w.k_w * cm;
    float *fw, *bias = malloc((size_t)cm * sizeof *bias);
    void *fs = rand_stored(nf, NPUK_F32, &fw);
    for (int64_t i = 0; i < nf; i++)
      if (!isfinite(fw[i])) fw[i] = 0.5f;
    for (int64_t i = 0; i < cm; i++) bias[i] = (urand() - 0.5f) * 2;
    for (int e = 0; e < 3; e++)
      for (int d = 0; d < 3; d++) {
        npuK_epilogue ep = {.bias = bias, .act = acts[e % 2]};
        const npuK_epilogue *epp = e ? &ep : NULL;
        npuK_dtype xd = dts[d], yd = dts[(d + 1) % 3];
        float *xw;
        void *x = rand_stored(nx, xd, &xw);
        float *yw = malloc((size_t)ny * sizeof *yw);
        npuK_depthwise_conv2d_f32_ep(NULL, &w, mult, xw, fw, epp, yw);
        for (int slots = 1; slots <= 4; slots++)
          for (int p = 0; p < 2; p++) {
            size_t bytes = npuK_depthwise_conv2d_half_scratch_size(&w, mult, slots, xd, yd);
            float *scratch = malloc(bytes + 16);
            void *y = alloc_out(ny, yd);
            npuK_depthwise_conv2d_half_ep(pools[p], &w, mult, x, xd, fw, epp, y, yd, scratch,
                                          slots);
            CHECK(narrowed_equal(yw, ny, yd, y));
            free(y), free(scratch);
          }
        free(x), free(xw), free(yw);
      }
    free(fs), free(fw), free(bias);
  }
}

/* matmul with A and C stored reduced: against widening A in full, the _blas kernel (with and
   without an epilogue) and narrowing C — one block, blocks of rows, blocks of columns (A read
   whole by every block), k = 0, every transpose, 1 to 3 slots and ragged pools. */
static void test_matmul_half(void) {
  static const int64_t shapes[][3] = {{3, 5, 7}, {600, 8, 500}, {5, 1100, 400}, {4, 6, 0}};
  for (size_t q = 0; q < sizeof shapes / sizeof *shapes; q++)
    for (int t = 0; t < 4; t++) {
      int ta = t & 1, tb = t >> 1;
      int64_t m = shapes[q][0], n = shapes[q][1], k = shapes[q][2];
      float *bw, *bias = malloc((size_t)n * sizeof *bias);
      void *bs = rand_stored(k * n, NPUK_F32, &bw);
      for (int64_t i = 0; i < k * n; i++)
        if (!isfinite(bw[i])) bw[i] = 0.25f;
      for (int64_t i = 0; i < n; i++) bias[i] = (urand() - 0.5f) * 2;
      for (int e = 0; e < 2; e++)
        for (int d = 0; d < 3; d++) {
          npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
          const npuK_epilogue *epp = e ? &ep : NULL;
          npuK_dtype ad = dts[d], cd = dts[(d + 1) % 3];
          float *aw;
          void *a = rand_stored(m * k, ad, &aw);
          float *cw = malloc((size_t)(m * n) * sizeof *cw);
          if (epp) npuK_matmul_f32_blas_ep(NULL, ta, tb, m, n, k, aw, bw, epp, cw);
          else npuK_matmul_f32_blas(NULL, ta, tb, m, n, k, aw, bw, cw);
          for (int slots = 1; slots <= 3; slots++)
            for (int p = 0; p < 2; p++) {
              float *scratch = malloc(npuK_matmul_half_scratch_size(m, n, k, slots, ad, cd) + 16);
              void *c = alloc_out(m * n, cd);
              npuK_matmul_half_ep(pools[p], ta, tb, m, n, k, a, ad, bw, epp, c, cd, scratch,
                                  slots);
              CHECK(narrowed_equal(cw, m * n, cd, c));
              free(c), free(scratch);
            }
          free(a), free(aw), free(cw);
        }
      free(bs), free(bw), free(bias);
    }
}

/* matmul with B (the weights) stored reduced too, read as stored (NPUX_F_HALF_B): against
   widening A and B in full, the _blas kernel, narrowing C — rows as sgemv (m = 1, 2), blocks of
   rows (B widened whole per slot), blocks of columns (B by panels), k = 0, every transpose,
   every algorithm, 1 to 3 slots and ragged pools. */
/* c (m, n; dtype cd) against float64 op(A) op(B) + bias, relu when ep: within the float32
   sum's bound (k + 1) 2^-23 (|bias| + sum |a b|), plus the narrowing's half ulp (2^-8 relative,
   bfloat16's, covers float16's) when cd is reduced; NaN where the exact value is NaN, the same
   infinity where it is infinite. */
static int gemv_within_bound(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *aw,
                             const float *bw, const npuK_epilogue *ep, const void *c,
                             npuK_dtype cd) {
  float *cf = malloc((size_t)(m * n) * sizeof *cf);
  npuK_cast(NULL, m * n, cd, c, NPUK_F32, cf);
  int ok = 1;
  for (int64_t r = 0; r < m && ok; r++)
    for (int64_t j = 0; j < n && ok; j++) {
      double sum = ep ? ep->bias[j] : 0, mag = ep ? fabs(ep->bias[j]) : 0;
      for (int64_t i = 0; i < k; i++) {
        double a = ta ? aw[i * m + r] : aw[r * k + i], b = tb ? bw[j * k + i] : bw[i * n + j];
        sum += a * b;
        mag += fabs(a * b);
      }
      if (ep && sum <= 0) sum = 0;
      double got = cf[r * n + j];
      if (isnan(sum)) ok = isnan(got);
      else if (isinf(sum)) ok = got == sum;
      else
        ok = fabs(got - sum) <= (double)(k + 1) * 0x1p-23 * mag +
                                    (cd == NPUK_F32 ? 0 : 0x1p-8 * fabs(sum) + 0x1p-24);
    }
  free(cf);
  return ok;
}

static void test_matmul_half_b(void) {
  static const int64_t shapes[][3] = {{1, 700, 300}, {2, 64, 2000}, {3, 5, 7},
                                      {600, 8, 500}, {5, 1100, 400}, {4, 6, 0}};
  for (size_t q = 0; q < sizeof shapes / sizeof *shapes; q++)
    for (int t = 0; t < 4; t++)
      for (int bdi = 0; bdi < 2; bdi++) {
        int ta = t & 1, tb = t >> 1;
        int64_t m = shapes[q][0], n = shapes[q][1], k = shapes[q][2];
        npuK_dtype bd = dts[bdi]; /* float16, bfloat16 */
        float *bw, *bias = malloc((size_t)n * sizeof *bias);
        void *bs = rand_stored(k * n, bd, &bw);
        for (int64_t i = 0; i < k * n; i++)
          if (!isfinite(bw[i])) bw[i] = 0.25f;
        npuK_cast(NULL, k * n, NPUK_F32, bw, bd, bs);
        for (int64_t i = 0; i < n; i++) bias[i] = (urand() - 0.5f) * 2;
        for (int e = 0; e < 2; e++)
          for (int d = 0; d < 3; d++)
            for (int algo = 0; algo < NPUK_GEMM_ALGO_COUNT; algo++) {
              npuK_epilogue ep = {.bias = bias, .act = NPUK_ACT_RELU};
              const npuK_epilogue *epp = e ? &ep : NULL;
              npuK_dtype ad = dts[d], cd = dts[(d + 1 + algo) % 3];
              float *aw;
              void *a = rand_stored(m * k, ad, &aw);
              float *cw = malloc((size_t)(m * n) * sizeof *cw);
              npuK_matmul_half_algo_ep(NULL, ta, tb, m, n, k, aw, NPUK_F32, bw, epp, cw, NPUK_F32,
                                       NULL, 1, algo);
              for (int slots = 1; slots <= 3; slots++)
                for (int p = 0; p < 2; p++) {
                  size_t sz = npuK_matmul_half_b_scratch_size(m, n, k, slots, ad, bd, cd, algo);
                  float *scratch = malloc(sz + 16);
                  void *c = alloc_out(m * n, cd);
                  npuK_matmul_half_b_algo_ep(pools[p], ta, tb, m, n, k, a, ad, bs, bd, epp, c, cd,
                                             scratch, slots, algo);
                  /* float16 B under sgemv rows with F16C: the kernel's own order, its bound;
                     everything else: OpenBLAS's calls on the same values, the same bits */
                  if (bd == NPUK_F16 && k > 0 && npuK_f16c() && __builtin_cpu_supports("fma") &&
                      npuK_gemm_uses_gemv(algo, m, n, k))
                    CHECK(gemv_within_bound(ta, tb, m, n, k, aw, bw, epp, c, cd));
                  /* both bfloat16 under BF16DOT where the CPU has it: the native GEMM's own
                     chains (tests/test_gemm_bf16.c), its bound (no subnormals here) */
                  else if (npuK_gemm_bf16_takes(algo, ad, bd) && k > 0)
                    CHECK(gemv_within_bound(ta, tb, m, n, k, aw, bw, epp, c, cd));
                  else
                    CHECK(narrowed_equal(cw, m * n, cd, c));
                  /* and every path (the float16-B panels and blocks included) against the
                     float64 sums, not only its float32 twin: once per shape and algorithm */
                  if (slots == 1 && p == 0 && k > 0)
                    CHECK(gemv_within_bound(ta, tb, m, n, k, aw, bw, epp, c, cd));
                  free(c), free(scratch);
                }
              free(a), free(aw), free(cw);
            }
        free(bs), free(bw), free(bias);
      }
}

/* max_pool / avg_pool with x and y stored reduced: against widening x in full, the _f32
   kernel and narrowing y — bands crossing images and slot ends, strides, padding, windows
   partly outside, 1 to 4 slots and ragged pools. */
static void test_pool_half(void) {
  /* n, in_h, in_w, c, k_h, k_w, stride, pad */
  static const int64_t geo[][8] = {{1, 7, 5, 3, 2, 2, 2, 0},   {2, 19, 9, 9, 3, 3, 1, 1},
                                   {3, 12, 11, 5, 3, 3, 2, 1}, {1, 1, 6, 4, 1, 3, 1, 0},
                                   {2, 5, 5, 6, 5, 5, 1, 2}};
  void (*const f32[2])(const npuK_pool *, const npuK_window2d *, const float *, float *) = {
      npuK_max_pool_f32, npuK_avg_pool_f32};
  void (*const half[2])(const npuK_pool *, const npuK_window2d *, const void *, npuK_dtype,
                        void *, npuK_dtype, float *, int) = {npuK_max_pool_half,
                                                              npuK_avg_pool_half};
  for (size_t g = 0; g < sizeof geo / sizeof *geo; g++) {
    const int64_t *q = geo[g];
    npuK_window2d w = {.n = q[0], .in_h = q[1], .in_w = q[2], .c = q[3], .k_h = q[4], .k_w = q[5],
                       .stride_h = q[6], .stride_w = q[6], .dilation_h = 1, .dilation_w = 1,
                       .pad_top = q[7], .pad_left = q[7]};
    w.out_h = (w.in_h + 2 * w.pad_top - w.k_h) / w.stride_h + 1;
    w.out_w = (w.in_w + 2 * w.pad_left - w.k_w) / w.stride_w + 1;
    int64_t nx = w.n * w.in_h * w.in_w * w.c, ny = w.n * w.out_h * w.out_w * w.c;
    for (int k = 0; k < 2; k++)
      for (int d = 0; d < 3; d++) {
        npuK_dtype xd = dts[d], yd = dts[(d + 1) % 3];
        float *xw;
        void *x = rand_stored(nx, xd, &xw);
        float *yw = malloc((size_t)ny * sizeof *yw);
        f32[k](NULL, &w, xw, yw);
        for (int slots = 1; slots <= 4; slots++)
          for (int p = 0; p < 2; p++) {
            float *scratch = malloc(npuK_pool_half_scratch_size(&w, slots, xd, yd) + 16);
            void *y = alloc_out(ny, yd);
            half[k](pools[p], &w, x, xd, y, yd, scratch, slots);
            CHECK(narrowed_equal(yw, ny, yd, y));
            free(y), free(scratch);
          }
        free(x), free(xw), free(yw);
      }
  }
}

/* max_pool_grad with relu_grad (and the bias gradient) on stored operands (the fused step
   under a reduced precision mode, NPUX_F_HALF_IO): dx equals the float32 kernel's on the
   widened operands, narrowed, bit for bit (NaN, infinities and signed zeros among the data);
   db equals the float64 sums of that narrowed dx, per image in pixel order, then the images
   in order (bit for bit; NaN where they are NaN).  Windows that tile, leave gaps, pad, and overlap (dx reduced: the float32 copy in
   scratch); channels off the 8 lanes and over one 64-channel block; each dtype alone and
   mixed; with and without features. */
static void test_max_pool_grad_relu_half(void) {
  /* n, in_h, in_w, c, k, stride, pad */
  static const int64_t geo[][7] = {{2, 8, 8, 16, 2, 2, 0}, {3, 9, 7, 13, 2, 2, 1},
                                   {2, 11, 10, 70, 3, 2, 1}, {1, 13, 13, 3, 3, 3, 0},
                                   {2, 6, 6, 8, 3, 1, 1}};
  static const npuK_dtype mix[][4] = {{NPUK_BF16, NPUK_BF16, NPUK_BF16, NPUK_BF16},
                                      {NPUK_F16, NPUK_F16, NPUK_F16, NPUK_F16},
                                      {NPUK_F32, NPUK_F32, NPUK_F32, NPUK_F32},
                                      {NPUK_BF16, NPUK_F16, NPUK_F32, NPUK_BF16},
                                      {NPUK_F32, NPUK_BF16, NPUK_BF16, NPUK_F16}};
  for (size_t g = 0; g < sizeof geo / sizeof *geo; g++) {
    const int64_t *q = geo[g];
    npuK_window2d w = {.n = q[0], .in_h = q[1], .in_w = q[2], .c = q[3], .k_h = q[4], .k_w = q[4],
                       .stride_h = q[5], .stride_w = q[5], .dilation_h = 1, .dilation_w = 1,
                       .pad_top = q[6], .pad_left = q[6]};
    w.out_h = (w.in_h + 2 * w.pad_top - w.k_h) / w.stride_h + 1;
    w.out_w = (w.in_w + 2 * w.pad_left - w.k_w) / w.stride_w + 1;
    const int64_t nx = w.n * w.in_h * w.in_w * w.c, ny = w.n * w.out_h * w.out_w * w.c;
    for (size_t m = 0; m < sizeof mix / sizeof *mix; m++)
      for (int with_relu = 0; with_relu < 2; with_relu++) {
        const npuK_dtype *t = mix[m];
        float *xw, *dyw, *rw;
        void *x = rand_stored(nx, t[0], &xw), *dy = rand_stored(ny, t[1], &dyw);
        void *relu = rand_stored(nx, t[2], &rw);
        float *dxw = malloc((size_t)nx * sizeof *dxw), *dbw = malloc((size_t)w.c * sizeof *dbw);
        double *s64 = malloc((size_t)(w.n * w.c) * sizeof *s64);
        npuK_max_pool_grad_relu_bias_f32(NULL, &w, xw, dyw, with_relu ? rw : NULL, dxw, dbw, s64);
        /* db of dx as stored: narrowed, widened, summed as the kernel documents */
        void *dxs = alloc_out(nx, t[3]);
        float *dxn = malloc((size_t)nx * sizeof *dxn);
        npuK_cast(NULL, nx, NPUK_F32, dxw, t[3], dxs);
        npuK_cast(NULL, nx, t[3], dxs, NPUK_F32, dxn);
        const int64_t pixels = w.in_h * w.in_w;
        for (int64_t ci = 0; ci < w.c; ci++) {
          double sum = 0;
          for (int64_t n = 0; n < w.n; n++) {
            double part = 0;
            for (int64_t p = 0; p < pixels; p++) part += (double)dxn[(n * pixels + p) * w.c + ci];
            sum += part;
          }
          dbw[ci] = (float)sum;
        }
        for (int with_db = 0; with_db < 2; with_db++)
          for (int p = 0; p < 2; p++) {
            size_t bytes = npuK_max_pool_grad_relu_bias_scratch(&w, t[3], with_db);
            CHECK((bytes > (size_t)(w.n * w.c) * sizeof(double)) ==
                  (t[3] != NPUK_F32 && w.k_h > w.stride_h)); /* the float32 copy: overlap only */
            void *scratch = malloc(bytes + 16);
            void *dx = alloc_out(nx, t[3]);
            float db[80];
            npuK_max_pool_grad_relu_bias(pools[p], &w, t[0], x, t[1], dy, t[2],
                                         with_relu ? relu : NULL, t[3], dx, with_db ? db : NULL,
                                         scratch);
            CHECK(narrowed_equal(dxw, nx, t[3], dx));
            /* a NaN sum's sign and payload follow which operand the compiler put first */
            for (int64_t k = 0; with_db && k < w.c; k++)
              CHECK(isnan(db[k]) ? isnan(dbw[k]) : memcmp(&db[k], &dbw[k], sizeof *db) == 0);
            free(dx), free(scratch);
          }
        free(x), free(dy), free(relu), free(xw), free(dyw), free(rw), free(dxw), free(dbw);
        free(s64), free(dxs), free(dxn);
      }
  }
}

int main(void) {
  test_conversions();
  test_unary();
  test_binary();
  test_eltwise();
  test_eltwise_f16_operand();
  test_eltwise_registers();
  test_eltwise_registers_one_op();
  test_conv_half();
  test_conv_direct_half();
  test_depthwise_half();
  test_matmul_half();
  test_matmul_half_b();
  test_pool_half();
  test_max_pool_grad_relu_half();
  return check_summary("test_half_io");
}
