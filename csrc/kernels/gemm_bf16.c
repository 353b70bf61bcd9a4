/* gemm_bf16.c: C = op(A) op(B) on bfloat16 operands as stored, by VDPBF16PS (AVX512_BF16).
 *
 * A stored (m, k) or (k, m) if trans_a, B stored (k, n) or (n, k) if trans_b, both bfloat16,
 * row-major, contiguous; C (m, n) float32, bfloat16 or float16.
 *
 * The sum: every output is one float32 chain over k in pairs, ascending: for pair p (elements
 * 2p and 2p + 1 of the row of op(A) and the column of op(B)) acc += a[2p+1] b[2p+1], then
 * acc += a[2p] b[2p] (VDPBF16PS, Intel SDM): each product is exact (16 significant bits; one
 * beyond float32's range is added as it is, not first rounded to Inf or flushed), each sum
 * rounds to nearest even, subnormal inputs (|x| < 2^-126) count as zero and subnormal results
 * are flushed to zero (kutil.h's k_dpbf16_step); an odd k's last pair has a zero partner.  So |c - exact| <= k 2^-24 sum|a b|
 * (first order) for the operands with their subnormals taken as zero, plus k 2^-126 for the
 * flushes; NaN and Inf propagate as in float32 arithmetic.  The epilogue (bias, then the
 * activation: npuK_epilogue_f32) runs on the float32 sums, and a reduced C is narrowed from
 * them by npuK_half_narrow (the Cast op's bits).  The bias is added once, after the sum: one
 * more rounding, (k + 1) 2^-24 (|bias| + sum|a b|) with it.
 *
 * The chain is held in a register from the first pair to the last (no blocking over k), so
 * nothing but (a, b, k) decides an output's bits: not the tiles, not the thread count, not
 * whether B was packed.  The portable twin (level 0) runs the same chains a step at a time
 * with k_dpbf16_step (tests compare the two bit for bit, at the range's ends too).
 *
 * Layout (level 1): op(B) in panels of NR = 32 columns, k in pairs: a panel is (kp, 32) uint32,
 * element (p, j) the two bfloat16 b[2p][j], b[2p+1][j] (two zmm per pair); op(A) by pairs as
 * uint32 broadcast to every lane (vpbroadcastd), read in place from a row-major A, packed
 * (kp, m) from a transposed one.  A tile is MR = 8 rows x 32 columns: 16 accumulators, per
 * pair two loads of B, MR broadcasts and 2 MR VDPBF16PS.  Few rows (m <= MR) and B stored
 * (k, n): B's rows are interleaved in registers as the tile reads them (no pack: each panel is
 * read once).  Columns past n are zero in the panel and masked on store.
 *
 * Threads: units are (panel, block of MB rows), by shape only; slot s takes units
 * [s U / S, (s + 1) U / S) and packs the panels it meets into its part of scratch.
 *
 * Packed once (npuK_gemm_bf16_pack_b, the _packed entries): a constant B (a frozen graph's
 * weights) is laid out as all its panels one after the other, once per plan
 * (compile/plan.c), and every call reads them in place: no per-call packing, no raw path.
 * The panels are as wide as the units for the plan's m (packed_width: 32 columns, up to TW
 * for few rows), so a few-row tile reads each pair's columns from one contiguous run as the
 * raw path reads B's rows (with 32-column panels a batch-1 product ran ~15 % slower than
 * raw).  Same chains, so the same bits as packing per call.
 */
#include <string.h>

#include "core/half.h"
#include "kernels/kutil.h"

enum { MR = 8, NR = 32, MB = 256, TW = 128 };

static int64_t pairs(int64_t k) { return (k + 1) / 2; }

/* uint32 of scratch: a transposed A packed (kp, m), then each slot's panel (kp, NR). */
static int64_t apack_words(int trans_a, int64_t m, int64_t k) {
  return trans_a ? pairs(k) * m : 0;
}
static int64_t panel_words(int64_t k) { return pairs(k) * NR; }

static int raw_b(int trans_b, int64_t m) { return !trans_b && m <= MR; }

/* Columns a unit covers: a panel; raw rows (few of them) up to TW, so that one or two rows
   still have 8 or more chains in flight. */
static int64_t unit_width(int raw, int64_t m) {
  return !raw || m > 4 ? NR : m > 2 ? 2 * NR : TW;
}

typedef struct bf_job {
  int trans_a, trans_b, level, raw;
  int64_t uw; /* a unit's columns: unit_width */
  int64_t m, n, k, kp, n_panels, n_mblocks, n_units, n_slots;
  const uint16_t *a, *b;
  const npuK_epilogue *ep;
  void *c;
  npuK_dtype c_dtype;
  float *w;  /* npuK_gemm_bf16_sgd: the variable updated instead of storing C */
  float lr;
  uint32_t *apack, *panels;
  const uint32_t *prepacked; /* B's panels packed once (npuK_gemm_bf16_pack_b), or NULL */
  int64_t pw; /* the panels' width in columns: NR, or packed_width(m) for prepacked ones */
  const npuK_pool *pool;
} bf_job;

size_t npuK_gemm_bf16_scratch_size(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                   int n_slots) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  int64_t n_units = ((n + NR - 1) / NR) * ((m + MB - 1) / MB);
  int64_t slots = n_slots < 1 ? 1 : n_slots > n_units ? n_units : n_slots;
  int64_t words = apack_words(trans_a, m, k) + (raw_b(trans_b, m) ? 0 : slots * panel_words(k));
  return (size_t)words * sizeof(uint32_t);
}

/* The width of B's panels packed once for m rows: the units' (unit_width, as if raw). */
static int64_t packed_width(int64_t m) { return unit_width(m <= MR, m); }

size_t npuK_gemm_bf16_packed_size(int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  int64_t w = packed_width(m);
  return (size_t)(((n + w - 1) / w) * pairs(k) * w) * sizeof(uint32_t);
}

/* Portable on purpose: it runs once per plan (~0.3 ms for 784 x 256 here), not per call. */
void npuK_gemm_bf16_pack_b(int trans_b, int64_t m, int64_t n, int64_t k, const uint16_t *b,
                           uint32_t *dst) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  const int64_t kp = pairs(k), w = packed_width(m), n_panels = (n + w - 1) / w;
  for (int64_t pn = 0; pn < n_panels; pn++)
    for (int64_t p = 0; p < kp; p++)
      for (int64_t c = 0; c < w; c++) {
        int64_t col = pn * w + c;
        uint32_t lo = 0, hi = 0;
        if (col < n) {
          lo = trans_b ? b[col * k + 2 * p] : b[2 * p * n + col];
          if (2 * p + 1 < k) hi = trans_b ? b[col * k + 2 * p + 1] : b[(2 * p + 1) * n + col];
        }
        dst[(pn * kp + p) * w + c] = lo | hi << 16;
      }
}

size_t npuK_gemm_bf16_packed_scratch_size(int trans_a, int64_t m, int64_t k) {
  if (m <= 0 || k <= 0) return 0;
  return (size_t)apack_words(trans_a, m, k) * sizeof(uint32_t);
}

/* ---- the tile's end: epilogue on the float32 sums, then C as stored ---- */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
static void sgd_row_avx512(const float *d, int round, float lr, float *w, int64_t n);
#endif

/* w[c] -= lr * d[c] for a row of sums d rounded to dt first (the bits of npuK_half_narrow then
   widening: npu_f32_to_bf16 / _f16 are its reference), a multiply then a subtract as
   npuK_sgd_update_f32.  Level 1 runs the bfloat16 (or float32) rows 16 lanes at a time. */
static void sgd_row(const bf_job *j, const float *d, float *w, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (j->level > 0 && (j->c_dtype == NPUK_BF16 || j->c_dtype == NPUK_F32)) {
    sgd_row_avx512(d, j->c_dtype == NPUK_BF16, j->lr, w, n);
    return;
  }
#endif
  const float lr = j->lr;
  for (int64_t c = 0; c < n; c++) {
    float x = d[c];
    if (j->c_dtype == NPUK_BF16) x = npu_bf16_to_f32(npu_f32_to_bf16(x));
    else if (j->c_dtype == NPUK_F16) x = npu_f16_to_f32(npu_f32_to_f16(x));
    float step = lr * x;
    w[c] = w[c] - step;
  }
}

/* t (mr, nr; row stride ld) holds the sums of C's rows r0.., columns j0.. */
static void store_tile(const bf_job *j, int64_t r0, int64_t j0, int64_t mr, int64_t nr,
                       float *t, int64_t ld) {
  if (j->w) { /* gradient descent: each row as C would store it, widened, then w - lr d */
    for (int64_t i = 0; i < mr; i++) sgd_row(j, t + i * ld, j->w + (r0 + i) * j->n + j0, nr);
    return;
  }
  const npuK_epilogue *ep = j->ep;
  if (ep && (ep->bias || ep->act != NPUK_ACT_NONE)) {
    npuK_epilogue e = {.bias = ep->bias ? ep->bias + j0 : NULL, .act = ep->act,
                       .alpha = ep->alpha, .slope = ep->slope ? ep->slope + j0 : NULL,
                       .fast = ep->fast};
    npuK_epilogue_f32(&e, mr, nr, ld, t);
  }
  for (int64_t i = 0; i < mr; i++) {
    int64_t off = (r0 + i) * j->n + j0;
    if (j->c_dtype == NPUK_F32) memcpy((float *)j->c + off, t + i * ld, (size_t)nr * sizeof *t);
    else npuK_half_narrow(t + i * ld, j->c_dtype, (uint16_t *)j->c + off, nr);
  }
}

/* ---- level 0: the portable twin, VDPBF16PS emulated a lane at a time ---- */

/* element (r, i) of op(A) and (i, c) of op(B), 0 past k */
static uint16_t at_a(const bf_job *j, int64_t r, int64_t i) {
  if (i >= j->k) return 0;
  return j->trans_a ? j->a[i * j->m + r] : j->a[r * j->k + i];
}
static uint16_t at_b(const bf_job *j, int64_t i, int64_t c) {
  if (i >= j->k) return 0;
  if (j->prepacked) {
    uint32_t w = j->prepacked[(c / j->pw) * j->kp * j->pw + (i / 2) * j->pw + c % j->pw];
    return (uint16_t)(i & 1 ? w >> 16 : w & 0xffff);
  }
  return j->trans_b ? j->b[c * j->k + i] : j->b[i * j->n + c];
}

static void tile_level0(const bf_job *j, int64_t r0, int64_t j0, int64_t mr, int64_t nr) {
  float t[MR * NR];
  for (int64_t i = 0; i < mr; i++)
    for (int64_t c = 0; c < nr; c++) {
      float acc = 0.0f;
      for (int64_t p = 0; p < j->kp; p++) {
        acc = k_dpbf16_step(acc, k_bf16_daz(at_a(j, r0 + i, 2 * p + 1)),
                            k_bf16_daz(at_b(j, 2 * p + 1, j0 + c)));
        acc = k_dpbf16_step(acc, k_bf16_daz(at_a(j, r0 + i, 2 * p)),
                            k_bf16_daz(at_b(j, 2 * p, j0 + c)));
      }
      t[i * NR + c] = acc;
    }
  store_tile(j, r0, j0, mr, nr, t, NR);
}

/* ---- level 1: AVX512_BF16 ---- */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define HAVE_BF16_TILES 1

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#include "kernels/kacc512.h"

static inline uint32_t load_u32(const uint16_t *p) {
  uint32_t u;
  memcpy(&u, p, sizeof u);
  return u;
}

/* Lanes (p, 0..31) of a panel from two rows of a (k, x) matrix: r0 = row 2p, r1 = row 2p + 1
   (NULL past k: zeros), len <= 32 elements from each, zeros past len. */
static inline __attribute__((always_inline)) void interleave32(const uint16_t *r0,
                                                               const uint16_t *r1, int64_t len,
                                                               __m512i *lo, __m512i *hi) {
  const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                          40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                          1, 32, 0);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  __mmask32 mk = len >= 32 ? 0xffffffffu : (__mmask32)((1u << len) - 1);
  __m512i x0 = _mm512_maskz_loadu_epi16(mk, r0);
  __m512i x1 = r1 ? _mm512_maskz_loadu_epi16(mk, r1) : _mm512_setzero_si512();
  *lo = _mm512_permutex2var_epi16(x0, idx_lo, x1);
  *hi = _mm512_permutex2var_epi16(x0, idx_hi, x1);
}

/* dst (len, padded to a multiple of 32 with zeros when pad) = pairs of r0 and r1 */
static void interleave_rows(const uint16_t *r0, const uint16_t *r1, int64_t len, uint32_t *dst) {
  for (int64_t c = 0; c < len; c += 32) {
    __m512i lo, hi;
    int64_t l = len - c < 32 ? len - c : 32;
    interleave32(r0 + c, r1 ? r1 + c : NULL, l, &lo, &hi);
    __mmask16 m0 = l >= 16 ? 0xffff : (__mmask16)((1u << l) - 1);
    __mmask16 m1 = l >= 32 ? 0xffff : l > 16 ? (__mmask16)((1u << (l - 16)) - 1) : 0;
    _mm512_mask_storeu_epi32(dst + c, m0, lo);
    _mm512_mask_storeu_epi32(dst + c + 16, m1, hi);
  }
}

/* Panel pn of op(B) into dst (kp, NR). */
static void pack_panel(const bf_job *j, int64_t pn, uint32_t *dst) {
  int64_t j0 = pn * NR, nr = j->n - j0 < NR ? j->n - j0 : NR;
  if (!j->trans_b) { /* rows 2p, 2p + 1 of B (k, n) */
    for (int64_t p = 0; p < j->kp; p++) {
      const uint16_t *r0 = j->b + 2 * p * j->n + j0;
      __m512i lo, hi;
      interleave32(r0, 2 * p + 1 < j->k ? r0 + j->n : NULL, nr, &lo, &hi);
      _mm512_storeu_si512(dst + p * NR, lo);
      _mm512_storeu_si512(dst + p * NR + 16, hi);
    }
    return;
  }
  /* B (n, k): column c of op(B) is row j0 + c of B, its pairs adjacent: blocks of 16 rows x
     16 pairs transposed in registers (rows past n zero, an odd k's last pair zero-padded) */
  for (int64_t c0 = 0; c0 < NR; c0 += 16)
    for (int64_t p0 = 0; p0 < j->kp; p0 += 16) {
      int64_t len = j->k - 2 * p0 < 32 ? j->k - 2 * p0 : 32;
      __mmask32 mk = len >= 32 ? 0xffffffffu : (__mmask32)((1u << len) - 1);
      __m512i r[16];
      for (int i = 0; i < 16; i++)
        r[i] = c0 + i < nr ? _mm512_maskz_loadu_epi16(mk, j->b + (j0 + c0 + i) * j->k + 2 * p0)
                           : _mm512_setzero_si512();
      k_transpose16x32(r);
      int64_t np = j->kp - p0 < 16 ? j->kp - p0 : 16;
      for (int64_t e = 0; e < np; e++) _mm512_storeu_si512(dst + (p0 + e) * NR + c0, r[e]);
    }
}

/* The tile's chains: mr rows x nv vectors of 16 columns (both constants); A's pair (i, p) at
   a + i a_rs + p a_ps (uint16 units; a_tail: the last pair, index kp - 1, is one element, read
   alone); B from the packed panel bp (j->pw columns wide: NR, or up to TW where B was packed
   once), or (raw) from B's rows at column j0 as it goes,
   32 columns a group (the masks: the columns below nr).  Sums to t (mr, 16 nv; row stride TW). */
static inline __attribute__((always_inline)) void
tile_chains(const int mr, const int nv, const int raw, const bf_job *j, const uint16_t *a,
            int64_t a_rs, int64_t a_ps, int a_tail, const uint32_t *bp, int64_t j0, int64_t nr,
            float *t) {
  __m512 acc[MR][8];
#pragma GCC unroll 8
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
    for (int v = 0; v < nv; v++) acc[i][v] = _mm512_setzero_ps();
  const int64_t kp = j->kp, full = a_tail ? kp - 1 : kp;
  const uint16_t *ar[MR];
#pragma GCC unroll 8
  for (int i = 0; i < mr; i++) ar[i] = a + i * a_rs;
  __mmask32 gm[4];
#pragma GCC unroll 4
  for (int g = 0; g < (nv + 1) / 2; g++) {
    int64_t len = nr - 32 * g;
    gm[g] = len >= 32 ? 0xffffffffu : len <= 0 ? 0 : (__mmask32)((1u << len) - 1);
  }
  const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                          40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                          1, 32, 0);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  /* one pair: B's vectors, then each row's broadcast pair (LOAD_A(i)) into its chains */
#define PAIR(p, LOAD_A)                                                                      \
  do {                                                                                       \
    __m512i bv[8];                                                                           \
    if (raw) {                                                                               \
      const uint16_t *r0 = j->b + 2 * (p) * j->n + j0;                                       \
      const int odd = 2 * (p) + 1 < j->k;                                                    \
      _Pragma("GCC unroll 4") for (int g = 0; g < (nv + 1) / 2; g++) {                       \
        __m512i x0 = _mm512_maskz_loadu_epi16(gm[g], r0 + 32 * g);                           \
        __m512i x1 = odd ? _mm512_maskz_loadu_epi16(gm[g], r0 + j->n + 32 * g)               \
                         : _mm512_setzero_si512();                                           \
        bv[2 * g] = _mm512_permutex2var_epi16(x0, idx_lo, x1);                               \
        if (2 * g + 1 < nv) bv[2 * g + 1] = _mm512_permutex2var_epi16(x0, idx_hi, x1);       \
      }                                                                                      \
    } else {                                                                                 \
      _Pragma("GCC unroll 2") for (int v = 0; v < nv; v++)                                   \
        bv[v] = _mm512_loadu_si512(bp + (p) * j->pw + 16 * v);                               \
    }                                                                                        \
    _Pragma("GCC unroll 8") for (int i = 0; i < mr; i++) {                                   \
      __m512bh av = (__m512bh)_mm512_set1_epi32((int)(LOAD_A(i)));                           \
      _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++)                                   \
        acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, (__m512bh)bv[v]);                        \
    }                                                                                        \
  } while (0)
  int64_t p = 0;
#define A_PAIR(i) load_u32(ar[i] + p * a_ps)
#define A_ONE(i) ar[i][p * a_ps]
  for (; p < full; p++) PAIR(p, A_PAIR);
  if (full < kp) PAIR(p, A_ONE); /* an odd k's last element, its partner zero */
#undef PAIR
#undef A_PAIR
#undef A_ONE
#pragma GCC unroll 8
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
    for (int v = 0; v < nv; v++) _mm512_storeu_ps(t + i * TW + 16 * v, acc[i][v]);
}

/* The instances: packed panels take 1 or 2 vectors; raw rows (m <= MR, one tile of rows) up
   to TW / 16, as few rows leave registers for (at most 16 chains, at least 8 in flight for
   one row: VDPBF16PS's latency). */
#define TILE_FN(r, v, w)                                                                     \
  static void tile_##r##_##v##_##w(const bf_job *j, const uint16_t *a, int64_t a_rs,         \
                                   int64_t a_ps, int a_tail, const uint32_t *bp, int64_t j0, \
                                   int64_t nr, float *t) {                                   \
    tile_chains(r, v, w, j, a, a_rs, a_ps, a_tail, bp, j0, nr, t);                           \
  }
#define TILE_ROWS(r) TILE_FN(r, 1, 0) TILE_FN(r, 2, 0) TILE_FN(r, 1, 1) TILE_FN(r, 2, 1)
TILE_ROWS(1) TILE_ROWS(2) TILE_ROWS(3) TILE_ROWS(4)
TILE_ROWS(5) TILE_ROWS(6) TILE_ROWS(7) TILE_ROWS(8)
TILE_FN(1, 4, 1) TILE_FN(1, 8, 1) TILE_FN(2, 4, 1) TILE_FN(2, 8, 1)
TILE_FN(3, 4, 1) TILE_FN(4, 4, 1)
TILE_FN(1, 4, 0) TILE_FN(1, 8, 0) TILE_FN(2, 4, 0) TILE_FN(2, 8, 0)
TILE_FN(3, 4, 0) TILE_FN(4, 4, 0)
#undef TILE_ROWS
#undef TILE_FN

typedef void (*tile_fn)(const bf_job *, const uint16_t *, int64_t, int64_t, int, const uint32_t *,
                        int64_t, int64_t, float *);
#define TILE_ENTRY(r) {{tile_##r##_1_0, tile_##r##_2_0}, {tile_##r##_1_1, tile_##r##_2_1}}
static const tile_fn tiles12[MR][2][2] = {TILE_ENTRY(1), TILE_ENTRY(2), TILE_ENTRY(3),
                                          TILE_ENTRY(4), TILE_ENTRY(5), TILE_ENTRY(6),
                                          TILE_ENTRY(7), TILE_ENTRY(8)};
#undef TILE_ENTRY

/* the tile for mr rows, nr columns: the fewest vectors covering them that an instance has */
static tile_fn pick_tile(int64_t mr, int64_t nr, int raw) {
  int nv = (int)((nr + 15) / 16);
  if (nv <= 2) return tiles12[mr - 1][raw][nv - 1];
  if (mr == 1) return nv <= 4 ? (raw ? tile_1_4_1 : tile_1_4_0) : raw ? tile_1_8_1 : tile_1_8_0;
  if (mr == 2) return nv <= 4 ? (raw ? tile_2_4_1 : tile_2_4_0) : raw ? tile_2_8_1 : tile_2_8_0;
  return mr == 3 ? (raw ? tile_3_4_1 : tile_3_4_0) : raw ? tile_4_4_1 : tile_4_4_0;
}

static void tile_level1(const bf_job *j, int64_t r0, int64_t j0, int64_t mr, int64_t nr,
                        const uint32_t *bp) {
  float t[MR * TW];
  const uint16_t *a;
  int64_t a_rs, a_ps;
  int a_tail;
  if (j->trans_a) { /* packed (kp, m): pair p of row r at word p m + r */
    a = (const uint16_t *)(j->apack + r0);
    a_rs = 2, a_ps = 2 * j->m, a_tail = 0;
  } else { /* in place: pair p of row r at element r k + 2p; an odd k's last is one element */
    a = j->a + r0 * j->k;
    a_rs = j->k, a_ps = 2, a_tail = j->k & 1;
  }
  pick_tile(mr, nr, j->raw)(j, a, a_rs, a_ps, a_tail, bp, j0, nr, t);
  store_tile(j, r0, j0, mr, nr, t, TW);
}

/* sgd_row's level 1: a float32 rounded to bfloat16 and widened again is its bits with the
   low half cleared after adding 0x7fff + the kept half's lowest bit (round to nearest even);
   a NaN keeps its high half with the quiet bit set (npu_f32_to_bf16). */
static void sgd_row_avx512(const float *d, int round, float lr, float *w, int64_t n) {
  const __m512 vlr = _mm512_set1_ps(lr);
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i high = _mm512_set1_epi32((int)0xffff0000u), quiet = _mm512_set1_epi32(0x400000);
  for (int64_t c = 0; c < n; c += 16) {
    __mmask16 m = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
    __m512 x = _mm512_maskz_loadu_ps(m, d + c);
    if (round) {
      __m512i u = _mm512_castps_si512(x);
      __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, bias),
                                   _mm512_and_si512(_mm512_srli_epi32(u, 16), one));
      __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      r = _mm512_mask_or_epi32(r, nan, u, quiet);
      x = _mm512_castsi512_ps(_mm512_and_si512(r, high));
    }
    __m512 step = _mm512_mul_ps(vlr, x);
    __m512 wv = _mm512_maskz_loadu_ps(m, w + c);
    _mm512_mask_storeu_ps(w + c, m, _mm512_sub_ps(wv, step));
  }
}

/* rows 2p, 2p + 1 of A (k, m) into the pack, pairs [p0, p1) */
static void pack_a_range(void *arg, int64_t p0, int64_t p1) {
  const bf_job *j = arg;
  for (int64_t p = p0; p < p1; p++) {
    const uint16_t *r0 = j->a + 2 * p * j->m;
    interleave_rows(r0, 2 * p + 1 < j->k ? r0 + j->m : NULL, j->m, j->apack + p * j->m);
  }
}

#pragma GCC pop_options
#else
#define HAVE_BF16_TILES 0
#endif

/* The CPU's answer alone (the _level entry's tests run it whatever NPU_NO_AVX512BF16 says). */
static int cpu_has_bf16(void) {
#if HAVE_BF16_TILES
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  return 0;
#endif
}

static void units_range(void *arg, int64_t s0, int64_t s1) {
  const bf_job *j = arg;
  for (int64_t s = s0; s < s1; s++) {
    uint32_t *slot_panel = j->panels ? j->panels + s * panel_words(j->k) : NULL;
    int64_t u0 = s * j->n_units / j->n_slots, u1 = (s + 1) * j->n_units / j->n_slots;
    int64_t packed = -1;
    for (int64_t u = u0; u < u1 && !npuK_stopped(j->pool); u++) {
      int64_t pn = u / j->n_mblocks, mb = u % j->n_mblocks;
      int64_t j0 = pn * j->uw, nr = j->n - j0 < j->uw ? j->n - j0 : j->uw;
      int64_t r_end = (mb + 1) * MB < j->m ? (mb + 1) * MB : j->m;
      const uint32_t *panel =
          j->prepacked ? j->prepacked + pn * j->kp * j->pw : slot_panel; /* pw == uw */
#if HAVE_BF16_TILES
      if (j->level > 0 && slot_panel && packed != pn) {
        pack_panel(j, pn, slot_panel);
        packed = pn;
      }
#endif
      for (int64_t r0 = mb * MB; r0 < r_end; r0 += MR) {
        int64_t mr = r_end - r0 < MR ? r_end - r0 : MR;
#if HAVE_BF16_TILES
        if (j->level > 0) {
          tile_level1(j, r0, j0, mr, nr, panel);
          continue;
        }
#endif
        for (int64_t c0 = 0; c0 < nr; c0 += NR) /* the twin: tiles of NR columns */
          tile_level0(j, r0, j0 + c0, mr, nr - c0 < NR ? nr - c0 : NR);
      }
    }
    (void)packed;
  }
}

/* The GEMM of the two entries below: C stored, or (w non-NULL) w updated from each tile. */
static void gemm_bf16(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                      int64_t k, const uint16_t *a, const uint16_t *b, const npuK_epilogue *ep,
                      void *c, npuK_dtype c_dtype, float *w, float lr, void *scratch,
                      int n_slots, int level, const uint32_t *prepacked) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) { /* empty sums: +0, then the epilogue */
    float t[MR * NR] = {0};
    bf_job j = {.m = m, .n = n, .ep = ep, .c = c, .c_dtype = c_dtype, .w = w, .lr = lr};
    for (int64_t r0 = 0; r0 < m; r0 += MR)
      for (int64_t j0 = 0; j0 < n; j0 += NR) {
        memset(t, 0, sizeof t);
        store_tile(&j, r0, j0, m - r0 < MR ? m - r0 : MR, n - j0 < NR ? n - j0 : NR, t, NR);
      }
    return;
  }
  if (!HAVE_BF16_TILES || !cpu_has_bf16()) level = 0;
  bf_job j = {.trans_a = trans_a, .trans_b = trans_b, .level = level, .m = m, .n = n, .k = k,
              .kp = pairs(k), .a = a, .b = b, .ep = ep, .c = c, .c_dtype = c_dtype,
              .w = w, .lr = lr, .pool = pool, .prepacked = prepacked};
  j.raw = !prepacked && raw_b(trans_b, m);
  j.uw = prepacked ? packed_width(m) : unit_width(j.raw, m);
  j.pw = prepacked ? j.uw : NR;
  j.n_panels = (n + j.uw - 1) / j.uw;
  j.n_mblocks = (m + MB - 1) / MB;
  j.n_units = j.n_panels * j.n_mblocks;
  j.n_slots = n_slots < 1 ? 1 : n_slots > j.n_units ? j.n_units : n_slots;
  uint32_t *words = scratch;
  if (level > 0) {
    j.apack = trans_a ? words : NULL;
    j.panels = j.raw || prepacked ? NULL : words + apack_words(trans_a, m, k);
  }
#if HAVE_BF16_TILES
  if (j.apack) npuK_parallel_for(pool, j.kp, 16, pack_a_range, &j);
#endif
  npuK_parallel_for(pool, j.n_slots, 1, units_range, &j);
}

void npuK_gemm_bf16_level_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                             int64_t n, int64_t k, const uint16_t *a, const uint16_t *b,
                             const npuK_epilogue *ep, void *c, npuK_dtype c_dtype,
                             void *scratch, int n_slots, int level) {
  gemm_bf16(pool, trans_a, trans_b, m, n, k, a, b, ep, c, c_dtype, NULL, 0, scratch, n_slots,
            level, NULL);
}

void npuK_gemm_bf16_sgd_level(const npuK_pool *pool, int trans_a, int trans_b, int64_t m,
                              int64_t n, int64_t k, const uint16_t *a, const uint16_t *b,
                              npuK_dtype d_dtype, float lr, float *w, void *scratch,
                              int n_slots, int level) {
  gemm_bf16(pool, trans_a, trans_b, m, n, k, a, b, NULL, NULL, d_dtype, w, lr, scratch,
            n_slots, level, NULL);
}

void npuK_gemm_bf16_ep(const npuK_pool *pool, int trans_a, int trans_b, int64_t m, int64_t n,
                       int64_t k, const uint16_t *a, const uint16_t *b, const npuK_epilogue *ep,
                       void *c, npuK_dtype c_dtype, void *scratch, int n_slots) {
  npuK_gemm_bf16_level_ep(pool, trans_a, trans_b, m, n, k, a, b, ep, c, c_dtype, scratch,
                          n_slots, 1);
}

void npuK_gemm_bf16_packed_level_ep(const npuK_pool *pool, int trans_a, int64_t m, int64_t n,
                                    int64_t k, const uint16_t *a, const uint32_t *packed_b,
                                    const npuK_epilogue *ep, void *c, npuK_dtype c_dtype,
                                    void *scratch, int n_slots, int level) {
  gemm_bf16(pool, trans_a, 0, m, n, k, a, NULL, ep, c, c_dtype, NULL, 0, scratch, n_slots,
            level, packed_b);
}

void npuK_gemm_bf16_packed_ep(const npuK_pool *pool, int trans_a, int64_t m, int64_t n,
                              int64_t k, const uint16_t *a, const uint32_t *packed_b,
                              const npuK_epilogue *ep, void *c, npuK_dtype c_dtype,
                              void *scratch, int n_slots) {
  npuK_gemm_bf16_packed_level_ep(pool, trans_a, m, n, k, a, packed_b, ep, c, c_dtype, scratch,
                                 n_slots, 1);
}
