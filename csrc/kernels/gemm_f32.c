/* gemm_f32.c: C = op(A) op(B) in float32 by AVX-512F register tiles (algorithm F32TILE).
 *
 * A stored (m, k) or (k, m) if trans_a, B stored (k, n) or (n, k) if trans_b, C (m, n), all
 * float32, row-major, contiguous.
 *
 * The sum: every output is one float32 chain over k, ascending: acc = 0, then for i = 0 ..
 * k - 1 acc = fma(a[i], b[i], acc) (one rounding a step, to nearest even).  So |c - exact| <=
 * k 2^-24 sum|a b| (first order, docs/numerics.md's form for float32 sums), NaN and Inf
 * propagate as in float32 arithmetic.  The epilogue (bias, then the activation:
 * npuK_epilogue_f32's bits; bias and relu applied in the tile's registers, the others on the
 * stored sums): the bias is one more rounding, (k + 1) 2^-24
 * (|bias| + sum|a b|) with it.  The chain lives in a register from the first step to the
 * last (no blocking over k), so nothing but (a, b, k) decides an output's bits: not the tiles,
 * not the thread count, not the packing.  The portable twin (level 0) runs the same chains
 * with fmaf (correctly rounded, C99), and the tests compare the two bit for bit.
 *
 * Why not OpenBLAS: on the training step's shapes (64 x 256 x 784 and its gradients, ~77
 * MFLOP in all) OpenBLAS's sgemm runs 88-100 GFLOP/s on this CPU (Zen 4, one thread), these
 * tiles 111-115 where B is stored (k, n), ~97 where a transposed B is packed per call
 * (docs/training.md, "The floor"; bench/bench_gemm_f32.c); a transposed B larger than A is
 * avoided by computing C^T = B A^T (swaps_to_ct).  Both operands stay in L2 at these
 * shapes, so neither packing A nor blocking over k buys anything; beyond them
 * (npuK_gemm_f32_wins) OpenBLAS keeps the product.
 *
 * Layout: op(B) in panels of NR = 32 columns, (k, 32), packed per call into the slot's
 * scratch (zeros past n), or read in place from a B stored (k, n) that fits the L2 cache
 * (reads_b_in_place); op(A) broadcast from A as stored: 8 rows of a row-major A are 8
 * rows k apart, of a transposed A 8 consecutive floats of row i.  A tile is MR = 8 rows x 32
 * columns: 16 accumulators, per step two loads of B, MR broadcasts and 2 MR FMAs; the last
 * rows (m % 8) and a panel of 16 or fewer columns take smaller instances; columns past n are
 * masked on store, and on B's loads only where B is read in place (a masked load a step cost
 * ~10 %: 102 against 115 GFLOP/s).  The instances are unrolled by pragmas on constant bounds (as gemm_bf16.c),
 * so the accumulators stay in registers at -O2.
 *
 * Threads: units are (panel, block of MB rows), by shape only; slot s takes units
 * [s U / S, (s + 1) U / S) and packs the panels it meets into its part of scratch.
 *
 * Packed once (npuK_gemm_f32_pack_b, npuK_gemm_f32_packed_level_ep): a constant B (a frozen
 * graph's weights) is laid out as all its panels one after the other once per plan
 * (compile/plan.c, "f32_weights" in explain) and every call reads them in place: no per-call
 * packing of a transposed B, no scratch.  Same chains, so the same bits.
 *
 * Gradient descent (npuK_gemm_f32_sgd_level): the tile's sums, as a float32 C would store
 * them, update w in place, w - lr d as a multiply then a subtract (npuK_sgd_update_f32's
 * bits), with no C, no scratch for it and no second pass.
 */
#include <math.h>
#include <string.h>

#include "kernels/kfast.h"
#include "kernels/kutil.h"

enum { MR = 8, NR = 32, MB = 256 };

/* B (k, n) is read in place, row p of the panel at B + p n + j0, rather than packed, when the
   tiles of a panel are few (m <= MR: each panel is read once) or all of B fits the L2 cache
   (RAW_MAX_B floats: 1 MiB here); measured on Zen 4, one thread, B's loads masked in both:
   64 x 256 x 784 103 GFLOP/s in place against 95 packed per call, 8 x 256 x 784 98 against
   57, but 256 x 1024 x 1024 30 against 39 (B's rows 4 KiB apart and beyond L2).  A
   transposed B is always packed (or, the larger operand, swapped: swaps_to_ct). */
enum { RAW_MAX_B = 1 << 18 };
static int reads_b_in_place(int trans_b, int64_t m, int64_t n, int64_t k) {
  return !trans_b && (m <= MR || n * k <= RAW_MAX_B);
}

/* C = A B^T with B (n, k) the larger operand (dx = dy W^T in training, W changing every step,
   so never packed once): packing B^T per call transposes n k floats (the 256 x 256 W: ~2 % of
   the MLP's SGD step in perf, ~18 us).  Computed instead as C^T = B A^T, the same tiles with
   B as the row-major A (broadcast in place) and A as the transposed B (packing m k floats),
   into scratch, then C^T transposed into C: m (k + n) floats moved instead of n k.  The same
   chains (fma(a, b, acc) = fma(b, a, acc) exactly), so the same bits.  Only where A' = B stays
   in L2 (npuK_gemm_f32_wins's bound on A), without an epilogue, a packed B or w. */
enum { SWAP_MAX_B = 1 << 17 };
static int swaps_to_ct(int trans_b, int64_t m, int64_t n, int64_t k) {
  return trans_b && n * k <= SWAP_MAX_B && m * (k + n) < n * k;
}

typedef struct f32_job {
  int trans_a, trans_b, level, raw;
  int64_t m, n, k, n_panels, n_mblocks, n_units, n_slots;
  const float *a, *b;
  const npuK_epilogue *ep;
  float *c;
  float *w; /* npuK_gemm_f32_sgd_level: the variable updated instead of storing C */
  float lr;
  int ep_regs; /* the epilogue (a bias, relu) applied in registers before the store */
  float *panels; /* scratch: each slot's panel (k, NR) */
  const float *prepacked; /* B's panels packed once (npuK_gemm_f32_pack_b), or NULL */
  const npuK_pool *pool;
} f32_job;

static int64_t panel_floats(int64_t k) { return k * NR; }

static int64_t n_units_of(int64_t m, int64_t n) {
  return ((n + NR - 1) / NR) * ((m + MB - 1) / MB);
}

static size_t panels_size(int trans_b, int64_t m, int64_t n, int64_t k, int n_slots) {
  if (m <= 0 || n <= 0 || k <= 0 || reads_b_in_place(trans_b, m, n, k)) return 0;
  int64_t units = n_units_of(m, n);
  int64_t slots = n_slots < 1 ? 1 : n_slots > units ? units : n_slots;
  return (size_t)(slots * panel_floats(k)) * sizeof(float);
}

/* The swapped product's C^T, then its panels. */
static size_t swap_size(int64_t m, int64_t n, int64_t k, int n_slots) {
  return (size_t)(m * n) * sizeof(float) + panels_size(1, n, m, k, n_slots);
}

/* The most either way needs (the swap is decided with what this does not see: A's layout,
   the epilogue, w). */
size_t npuK_gemm_f32_scratch_size(int trans_b, int64_t m, int64_t n, int64_t k, int n_slots) {
  size_t plain = panels_size(trans_b, m, n, k, n_slots);
  if (m <= 0 || n <= 0 || k <= 0 || !swaps_to_ct(trans_b, m, n, k)) return plain;
  size_t swap = swap_size(m, n, k, n_slots);
  return swap > plain ? swap : plain;
}

size_t npuK_gemm_f32_packed_size(int64_t n, int64_t k) {
  if (n <= 0 || k <= 0) return 0;
  return (size_t)(((n + NR - 1) / NR) * panel_floats(k)) * sizeof(float);
}

/* Portable on purpose: it runs once per plan, not per call. */
void npuK_gemm_f32_pack_b(int trans_b, int64_t n, int64_t k, const float *b, float *dst) {
  for (int64_t pn = 0; pn < (n + NR - 1) / NR; pn++)
    for (int64_t p = 0; p < k; p++)
      for (int64_t c = 0; c < NR; c++) {
        int64_t col = pn * NR + c;
        dst[(pn * k + p) * NR + c] = col >= n ? 0.0f : trans_b ? b[col * k + p] : b[p * n + col];
      }
}

/* The tile's end, on sums already in C's place (rows r0.., columns j0..): the epilogue. */
static void epilogue_tile(const f32_job *j, int64_t r0, int64_t j0, int64_t mr, int64_t nr) {
  const npuK_epilogue *ep = j->ep;
  if (!ep || (!ep->bias && ep->act == NPUK_ACT_NONE)) return;
  npuK_epilogue e = {.bias = ep->bias ? ep->bias + j0 : NULL, .act = ep->act,
                     .alpha = ep->alpha, .slope = ep->slope ? ep->slope + j0 : NULL,
                     .fast = ep->fast};
  npuK_epilogue_f32(&e, mr, nr, j->n, j->c + r0 * j->n + j0);
}

/* ---- level 0: the portable twin ---- */

static float at_a(const f32_job *j, int64_t r, int64_t i) {
  return j->trans_a ? j->a[i * j->m + r] : j->a[r * j->k + i];
}
static float at_b(const f32_job *j, int64_t i, int64_t c) {
  if (j->prepacked) return j->prepacked[((c / NR) * j->k + i) * NR + c % NR];
  return j->trans_b ? j->b[c * j->k + i] : j->b[i * j->n + c];
}

static void tile_level0(const f32_job *j, int64_t r0, int64_t j0, int64_t mr, int64_t nr) {
  for (int64_t i = 0; i < mr; i++)
    for (int64_t c = 0; c < nr; c++) {
      float acc = 0.0f;
      for (int64_t p = 0; p < j->k; p++) acc = fmaf(at_a(j, r0 + i, p), at_b(j, p, j0 + c), acc);
      if (j->w) { /* two statements: the product rounded before the subtraction */
        float step = j->lr * acc, *w = j->w + (r0 + i) * j->n + j0 + c;
        *w = *w - step;
      } else {
        j->c[(r0 + i) * j->n + j0 + c] = acc;
      }
    }
  if (!j->w) epilogue_tile(j, r0, j0, mr, nr);
}

/* ---- level 1: AVX-512F ---- */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_F32_TILES 1

#pragma GCC push_options
#pragma GCC target("avx512f")
#include "kernels/kacc512.h"

/* Panel pn of op(B) into dst (k, NR), zeros past n. */
static void pack_panel(const f32_job *j, int64_t pn, float *dst) {
  const int64_t j0 = pn * NR, nr = j->n - j0 < NR ? j->n - j0 : NR;
  if (!j->trans_b) { /* row p of B (k, n), columns j0.. */
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    for (int64_t p = 0; p < j->k; p++) {
      const float *r = j->b + p * j->n + j0;
      _mm512_storeu_ps(dst + p * NR, nr == NR ? _mm512_loadu_ps(r) : _mm512_maskz_loadu_ps(m0, r));
      _mm512_storeu_ps(dst + p * NR + 16,
                       nr == NR ? _mm512_loadu_ps(r + 16) : _mm512_maskz_loadu_ps(m1, r + 16));
    }
    return;
  }
  /* B (n, k): column c of op(B) is row j0 + c of B: blocks of 16 rows x 16 k transposed in
     registers (rows past n zero) */
  for (int64_t c0 = 0; c0 < NR; c0 += 16)
    for (int64_t p0 = 0; p0 < j->k; p0 += 16) {
      int64_t len = j->k - p0 < 16 ? j->k - p0 : 16;
      __mmask16 mk = (__mmask16)(len >= 16 ? 0xffff : (1u << len) - 1);
      __m512i r[16];
      for (int i = 0; i < 16; i++) { /* (unmasked where whole: a masked load costs more) */
        const float *row = j->b + (j0 + c0 + i) * j->k + p0;
        r[i] = c0 + i >= nr ? _mm512_setzero_si512()
               : len == 16  ? _mm512_castps_si512(_mm512_loadu_ps(row))
                            : _mm512_castps_si512(_mm512_maskz_loadu_ps(mk, row));
      }
      k_transpose16x32(r);
      for (int64_t e = 0; e < len; e++)
        _mm512_storeu_ps(dst + (p0 + e) * NR + c0, _mm512_castsi512_ps(r[e]));
    }
}

/* The tile's chains: mr rows x nv vectors of 16 columns (constants), ta: A transposed (the
   rows' elements for one k are consecutive, at a + p m), else row-major (row i at a + i k).
   B from the panel bp (rows NR apart), or in place (j->raw: rows n apart, masked past nr).
   Then C's rows (masked past nr), or w's update. */
static inline __attribute__((always_inline)) void tile_chains(const int mr, const int nv,
                                                              const int ta, const int masked,
                                                              const f32_job *j,
                                                              const float *a, const float *bp,
                                                              int64_t r0, int64_t j0,
                                                              int64_t nr) {
  __m512 acc[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) acc[i][v] = _mm512_setzero_ps();
  const int64_t k = j->k, a_step = ta ? j->m : 1, a_row = ta ? 1 : j->k;
  const int64_t b_step = j->raw ? j->n : NR;
  __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
  __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
  const float *ap = a;
  for (int64_t p = 0; p < k; p++, ap += a_step, bp += b_step) {
    __m512 b0 = masked ? _mm512_maskz_loadu_ps(m0, bp) : _mm512_loadu_ps(bp);
    __m512 b1 = nv == 1 ? b0 : masked ? _mm512_maskz_loadu_ps(m1, bp + 16) : _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
      __m512 av = _mm512_set1_ps(ap[i * a_row]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      if (nv > 1) acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  if (j->w) { /* w - lr d: a multiply, then a subtract (ISO C mode: never contracted) */
    const __m512 vlr = _mm512_set1_ps(j->lr);
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
      float *w = j->w + (r0 + i) * j->n + j0;
      _mm512_mask_storeu_ps(w, m0, _mm512_sub_ps(_mm512_maskz_loadu_ps(m0, w),
                                                 _mm512_mul_ps(vlr, acc[i][0])));
      if (nv > 1)
        _mm512_mask_storeu_ps(w + 16, m1, _mm512_sub_ps(_mm512_maskz_loadu_ps(m1, w + 16),
                                                        _mm512_mul_ps(vlr, acc[i][1])));
    }
    return;
  }
  if (j->ep_regs) { /* sum + bias (one float32 add), then relu's x <= 0 ? +0 : x (NaN kept):
                      bin_fast's and un_fast's bits, without storing C twice */
    const float *bias = j->ep->bias;
    const int relu = j->ep->act == NPUK_ACT_RELU;
    const __m512 zero = _mm512_setzero_ps();
    __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias + j0) : zero;
    __m512 bias1 = bias && nv > 1 ? _mm512_maskz_loadu_ps(m1, bias + j0 + 16) : zero;
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
      for (int v = 0; v < nv; v++) {
        __m512 x = acc[i][v];
        if (bias) x = _mm512_add_ps(x, v ? bias1 : bias0);
        if (relu) x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, zero, _CMP_LE_OQ), zero);
        acc[i][v] = x;
      }
  }
#pragma GCC unroll 8
  for (int i = 0; i < mr; i++) {
    float *c = j->c + (r0 + i) * j->n + j0;
    _mm512_mask_storeu_ps(c, m0, acc[i][0]);
    if (nv > 1) _mm512_mask_storeu_ps(c + 16, m1, acc[i][1]);
  }
}

#define TILE_FN(r, v, t, k)                                                                  \
  static void tile_##r##_##v##_##t##_##k(const f32_job *j, const float *a, const float *bp,  \
                                         int64_t r0, int64_t j0, int64_t nr) {               \
    tile_chains(r, v, t, k, j, a, bp, r0, j0, nr);                                           \
  }
#define TILE_MASK(r, v, t) TILE_FN(r, v, t, 0) TILE_FN(r, v, t, 1)
#define TILE_ROWS(r) TILE_MASK(r, 1, 0) TILE_MASK(r, 2, 0) TILE_MASK(r, 1, 1) TILE_MASK(r, 2, 1)
TILE_ROWS(1) TILE_ROWS(2) TILE_ROWS(3) TILE_ROWS(4)
TILE_ROWS(5) TILE_ROWS(6) TILE_ROWS(7) TILE_ROWS(8)
#undef TILE_ROWS
#undef TILE_MASK
#undef TILE_FN

typedef void (*tile_fn)(const f32_job *, const float *, const float *, int64_t, int64_t,
                        int64_t);
/* [rows - 1][A transposed][two vectors][B's loads masked] */
#define TILE_V(r, v, t) {tile_##r##_##v##_##t##_0, tile_##r##_##v##_##t##_1}
#define TILE_ENTRY(r) {{TILE_V(r, 1, 0), TILE_V(r, 2, 0)}, {TILE_V(r, 1, 1), TILE_V(r, 2, 1)}}
static const tile_fn tiles[MR][2][2][2] = {TILE_ENTRY(1), TILE_ENTRY(2), TILE_ENTRY(3),
                                           TILE_ENTRY(4), TILE_ENTRY(5), TILE_ENTRY(6),
                                           TILE_ENTRY(7), TILE_ENTRY(8)};
#undef TILE_ENTRY
#undef TILE_V

/* Rows r0..r0+15 of c (m, n) from ct (n, m): c[i][j] = ct[j][i], by 16 x 16 blocks
   transposed in registers, masked past m and n.  Not npuK_transpose: measured in its place
   (bench_gemm_f32 step, interleaved), dy W^T ran ~1.5 us slower (81.3-81.6 against 79.8 us). */
typedef struct ct_job {
  int64_t m, n;
  const float *ct;
  float *c;
} ct_job;
static void transpose_out_range(void *arg, int64_t b0, int64_t b1) {
  const ct_job *t = arg;
  for (int64_t bi = b0; bi < b1; bi++) {
    const int64_t i0 = bi * 16, mi = t->m - i0 < 16 ? t->m - i0 : 16;
    const __mmask16 ki = (__mmask16)(mi >= 16 ? 0xffff : (1u << mi) - 1);
    for (int64_t j0 = 0; j0 < t->n; j0 += 16) {
      const int64_t nj = t->n - j0 < 16 ? t->n - j0 : 16;
      const __mmask16 kj = (__mmask16)(nj >= 16 ? 0xffff : (1u << nj) - 1);
      __m512i r[16];
      for (int e = 0; e < 16; e++) /* row j0 + e of ct, columns i0.. */
        r[e] = e < nj ? _mm512_castps_si512(_mm512_maskz_loadu_ps(ki, t->ct + (j0 + e) * t->m + i0))
                      : _mm512_setzero_si512();
      k_transpose16x32(r);
      for (int64_t e = 0; e < mi; e++)
        _mm512_mask_storeu_ps(t->c + (i0 + e) * t->n + j0, kj, _mm512_castsi512_ps(r[e]));
    }
  }
}

static void tile_level1(const f32_job *j, int64_t r0, int64_t j0, int64_t mr, int64_t nr,
                        const float *bp) {
  const float *a = j->trans_a ? j->a + r0 : j->a + r0 * j->k;
  /* B read in place past n needs masked loads; a packed panel is zero there */
  const int nv = nr > 16 ? 2 : 1, masked = j->raw && nr < 16 * nv;
  tiles[mr - 1][j->trans_a][nv - 1][masked](j, a, bp, r0, j0, nr);
  if (!j->w && !j->ep_regs) epilogue_tile(j, r0, j0, mr, nr);
}

#pragma GCC pop_options
#else
#define HAVE_F32_TILES 0
#endif

/* The CPU's answer alone (the _level entries' tests run it whatever NPU_NO_AVX512 says). */
static int cpu_has_avx512f(void) {
#if HAVE_F32_TILES
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  return 0;
#endif
}

static void units_range(void *arg, int64_t s0, int64_t s1) {
  const f32_job *j = arg;
  for (int64_t s = s0; s < s1; s++) {
    float *panel = j->panels ? j->panels + s * panel_floats(j->k) : NULL;
    int64_t u0 = s * j->n_units / j->n_slots, u1 = (s + 1) * j->n_units / j->n_slots;
    int64_t packed = -1;
    for (int64_t u = u0; u < u1 && !npuK_stopped(j->pool); u++) {
      int64_t pn = u / j->n_mblocks, mb = u % j->n_mblocks;
      int64_t j0 = pn * NR, nr = j->n - j0 < NR ? j->n - j0 : NR;
      int64_t r_end = (mb + 1) * MB < j->m ? (mb + 1) * MB : j->m;
#if HAVE_F32_TILES
      if (j->level > 0 && !j->raw && !j->prepacked && packed != pn) {
        pack_panel(j, pn, panel);
        packed = pn;
      }
#endif
      for (int64_t r0 = mb * MB; r0 < r_end; r0 += MR) {
        int64_t mr = r_end - r0 < MR ? r_end - r0 : MR;
#if HAVE_F32_TILES
        if (j->level > 0) {
          tile_level1(j, r0, j0, mr, nr,
                      j->prepacked ? j->prepacked + pn * panel_floats(j->k)
                      : j->raw     ? j->b + j0
                                   : panel);
          continue;
        }
#endif
        tile_level0(j, r0, j0, mr, nr);
      }
    }
    (void)packed, (void)panel;
  }
}

/* The GEMM of the entries below: C stored, or (w non-NULL) w updated from each tile. */
static void gemm_f32(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                     int64_t k, const float *a, const float *b, const npuK_epilogue *ep, float *c,
                     float *w, float lr, void *scratch, int n_slots, int level,
                     const float *prepacked) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) { /* empty sums: +0, then the epilogue (or w - lr 0) */
    f32_job j = {.m = m, .n = n, .k = 0, .ep = ep, .c = c, .w = w, .lr = lr};
    for (int64_t r0 = 0; r0 < m; r0 += MR)
      for (int64_t j0 = 0; j0 < n; j0 += NR)
        tile_level0(&j, r0, j0, m - r0 < MR ? m - r0 : MR, n - j0 < NR ? n - j0 : NR);
    return;
  }
  if (!HAVE_F32_TILES || !cpu_has_avx512f()) level = 0;
#if HAVE_F32_TILES
  if (level > 0 && !trans_a && !w && !prepacked && (!ep || (!ep->bias && ep->act == NPUK_ACT_NONE)) &&
      swaps_to_ct(trans_b, m, n, k)) {
    float *ct = scratch;
    gemm_f32(pool, 0, 1, n, m, k, b, a, NULL, ct, NULL, 0, ct + m * n, n_slots, level, NULL);
    ct_job t = {.m = m, .n = n, .ct = ct, .c = c};
    npuK_parallel_for(pool, (m + 15) / 16, 1, transpose_out_range, &t);
    return;
  }
#endif
  f32_job j = {.trans_a = trans_a, .trans_b = trans_b, .level = level, .m = m, .n = n, .k = k,
               .a = a, .b = b, .ep = ep, .c = c, .w = w, .lr = lr, .pool = pool,
               .prepacked = prepacked};
  j.n_panels = (n + NR - 1) / NR;
  j.n_mblocks = (m + MB - 1) / MB;
  j.n_units = j.n_panels * j.n_mblocks;
  j.n_slots = n_slots < 1 ? 1 : n_slots > j.n_units ? j.n_units : n_slots;
  j.raw = level > 0 && !prepacked && reads_b_in_place(trans_b, m, n, k);
  j.panels = level > 0 && !prepacked ? scratch : NULL;
  /* bias and relu in the tile's registers (perf: per-tile epilogue calls, 16 per 8 x 32 tile,
     were ~1 % of the MLP's SGD step); the other activations keep npuK_epilogue_f32 */
  j.ep_regs = level > 0 && !w && ep && (ep->bias || ep->act != NPUK_ACT_NONE) &&
              (ep->act == NPUK_ACT_NONE ||
               (ep->act == NPUK_ACT_RELU && (!ep->fast || !npuK_unary_has_fast(NPUK_UN_RELU))));
  npuK_parallel_for(pool, j.n_slots, 1, units_range, &j);
}

void npuK_gemm_f32_level_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                            int64_t n, int64_t k, const float *a, const float *b,
                            const npuK_epilogue *ep, float *c, void *scratch, int n_slots,
                            int level) {
  gemm_f32(pool, trans_a, trans_b, m, n, k, a, b, ep, c, NULL, 0, scratch, n_slots, level,
           NULL);
}

void npuK_gemm_f32_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                      int64_t k, const float *a, const float *b, const npuK_epilogue *ep,
                      float *c, void *scratch, int n_slots) {
  gemm_f32(pool, trans_a, trans_b, m, n, k, a, b, ep, c, NULL, 0, scratch, n_slots, 1, NULL);
}

void npuK_gemm_f32_sgd_level(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                             int64_t n, int64_t k, const float *a, const float *b, float lr,
                             float *w, void *scratch, int n_slots, int level) {
  gemm_f32(pool, trans_a, trans_b, m, n, k, a, b, NULL, NULL, w, lr, scratch, n_slots, level,
           NULL);
}

void npuK_gemm_f32_packed_level_ep(const npuK_pool *pool, int trans_a, int64_t m, int64_t n,
                                   int64_t k, const float *a, const float *packed_b,
                                   const npuK_epilogue *ep, float *c, int n_slots, int level) {
  gemm_f32(pool, trans_a, 0, m, n, k, a, NULL, ep, c, NULL, 0, NULL, n_slots, level, packed_b);
}
