/* conv_bwd_bf16.c: conv2d's filter gradient on bfloat16 operands as stored, by AVX512_BF16's
 * VDPBF16PS (mixed bf16 training: allow_mix_precision_bf16, mixed_bfloat16), instead of
 * widening x and dy into float32 copies and running conv_bwd.c's float32 tiles.
 *
 * df[kh, kw, ci, co] = the sum over the pixels p = (n, oh, ow) of x[n, ih, iw, ci] * dy[p, co]
 * (ih = oh s_h - pad_top + kh d_h, likewise iw; x outside is zero).  df is a GEMM, (k_h k_w c
 * rows) x (out_c columns), reduced over pixels, and VDPBF16PS reduces PAIRS: each float32
 * lane adds a[2i+1] b[2i+1], then a[2i] b[2i].  So pixels go in pairs (2q, 2q+1), in the
 * order (n, oh, ow); an odd last pixel is paired with a zero (x and dy both zero):
 *   dy once per call, interleaved: dyp[q][co][2] (co up to a multiple of 16, zeros after
 *     out_c), so one zmm holds 16 output channels x the pair;
 *   x per block of FB_PAIRS pairs and per work item's rows (kh, kw, ci): xp[q][row] the 32
 *     bits (x[2q][row], x[2q+1][row]), zero where the tap reads padding, broadcast to every
 *     lane (vpbroadcastd).
 * A tile of up to 8 rows x 32 channels stays in 16 zmm accumulators over a block's pairs;
 * each block's float32 sums go into float64 accumulators (scratch), rounded to float32 once
 * at the end (then, for a bfloat16 df, to bfloat16: the bits the executor's narrowing of a
 * float32 df would give).  Blocks are fixed by the shape, items (row ranges x channel ranges)
 * own their elements, so the bits do not depend on the thread count.
 *
 * Accuracy.  A bfloat16 product is exact in float32 (8 + 8 significand bits), so each block
 * is a float32 sum of at most m = 2 FB_PAIRS terms in a fixed order, then float64 across
 * the b blocks, then one rounding: |df - exact| <= (m + 1) 2^-24 sum|x dy| (+ b 2^-53 sum,
 * folded in) — the float32 kernels' "k 2^-24 sum|a b|" form with k = m + 1, whatever the
 * pixel count.  VDPBF16PS ignores MXCSR: it treats subnormal inputs as zero (bfloat16 values
 * below 2^-126 in magnitude) and flushes subnormal results to zero, which adds at most
 * 2 n_terms 2^-126 to the bound (n_terms = n out_h out_w).  A NaN or infinity in x or dy
 * propagates to every element it takes part in; as padding is a zero operand here rather
 * than a skipped term, an infinite dy also makes NaN (0 x inf) the elements of taps that
 * read padding at that pixel, which the float32 kernel leaves finite.
 * The portable path (no AVX512_BF16 or not x86-64: level 0) does the same pairs and blocks
 * in scalar float32 with the same order within a pair; it is only run where npuK_bf16dot()
 * is 0 through the _level entry point (tests), as the op reads bfloat16 as stored only where
 * it is 1.
 */
#include <string.h>

#include "core/half.h"
#include "kernels/kgrad.h"
#include "kernels/kutil.h"

#define FB_PAIRS 64  /* pixel pairs per float32 partial sum (128 products) */
#define FB_ROWS 16   /* df rows (kh, kw, ci) per work item, at most */
#define FB_TR 8      /* rows per register tile */

typedef struct fb_job {
  const npuK_window2d *w;
  int64_t out_c, co16, n_pix, n_pairs, n_rows;
  int64_t n_row_items, co_item; /* items: row ranges x channel ranges of co_item channels */
  const uint16_t *x, *dy;
  uint32_t *dyp;    /* [pair][co16]: (dy[2q][co], dy[2q+1][co]) */
  double *acc;      /* (n_rows, out_c) */
  void *df;
  npuK_dtype df_dtype;
  int level;
} fb_job;

size_t npuK_conv2d_backprop_filter_bf16_scratch_size(const npuK_window2d *w, int64_t out_c) {
  int64_t rows = w->k_h * w->k_w * w->c, co16 = (out_c + 15) / 16 * 16;
  int64_t pairs = (w->n * w->out_h * w->out_w + 1) / 2;
  return (size_t)(rows * out_c) * sizeof(double) + (size_t)(pairs * co16) * sizeof(uint32_t);
}

/* dy's pairs [q0, q1): the lower half is pixel 2q's, the upper 2q + 1's (VDPBF16PS pairs
   elements 2i and 2i + 1 of a lane) */
static void pack_dy(void *arg, int64_t q0, int64_t q1) {
  const fb_job *j = arg;
  const int64_t oc = j->out_c, co16 = j->co16;
  for (int64_t q = q0; q < q1; q++) {
    const uint16_t *a = j->dy + 2 * q * oc;
    const uint16_t *b = 2 * q + 1 < j->n_pix ? a + oc : NULL;
    uint32_t *o = j->dyp + q * co16;
    int64_t co = 0;
    for (; co < oc; co++) o[co] = (uint32_t)a[co] | (b ? (uint32_t)b[co] << 16 : 0);
    for (; co < co16; co++) o[co] = 0;
  }
}

/* Where pixel p's tap (0, 0) reads x: its image's first row and its (ih, iw). */
typedef struct fb_pix {
  int64_t img;     /* n in_h */
  int64_t ih, iw;  /* oh s - pad_top, ow s - pad_left */
} fb_pix;

static void locate(const npuK_window2d *w, int64_t p0, int64_t n, fb_pix *pix) {
  int64_t hw = w->out_h * w->out_w;
  for (int64_t i = 0; i < n; i++) {
    int64_t p = p0 + i, b = p / hw, r = p % hw;
    pix[i] = (fb_pix){b * w->in_h, (r / w->out_w) * w->stride_h - w->pad_top,
                      (r % w->out_w) * w->stride_w - w->pad_left};
  }
}

/* x's element for pixel pix at row (kh, kw, ci), 0 in the padding */
static inline uint16_t x_at(const fb_job *j, const fb_pix *pix, int64_t kh, int64_t kw,
                            int64_t ci) {
  const npuK_window2d *w = j->w;
  int64_t ih = pix->ih + kh * w->dilation_h, iw = pix->iw + kw * w->dilation_w;
  if (ih < 0 || ih >= w->in_h || iw < 0 || iw >= w->in_w) return 0;
  return j->x[((pix->img + ih) * w->in_w + iw) * w->c + ci];
}

/* xp[q][r] for the block's np pairs (pixels from 2 q0) and the rows [r0, r0 + nr) */
static void pack_x(const fb_job *j, int64_t q0, int np, int64_t r0, int nr, uint32_t *xp) {
  const npuK_window2d *w = j->w;
  fb_pix pix[2 * FB_PAIRS];
  int64_t p0 = 2 * q0, npix = j->n_pix - p0 < 2 * np ? j->n_pix - p0 : 2 * np;
  locate(w, p0, npix, pix);
  int64_t kk[FB_ROWS][3];
  for (int r = 0; r < nr; r++) {
    int64_t row = r0 + r, tap = row / w->c;
    kk[r][0] = tap / w->k_w, kk[r][1] = tap % w->k_w, kk[r][2] = row % w->c;
  }
  for (int q = 0; q < np; q++) {
    const fb_pix *a = &pix[2 * q], *b = 2 * q + 1 < npix ? &pix[2 * q + 1] : NULL;
    uint32_t *o = xp + q * FB_ROWS;
    for (int r = 0; r < nr; r++)
      o[r] = (uint32_t)x_at(j, a, kk[r][0], kk[r][1], kk[r][2]) |
             (b ? (uint32_t)x_at(j, b, kk[r][0], kk[r][1], kk[r][2]) << 16 : 0);
  }
}

/* float64 acc[row][co] += the float32 tile sums t (lanes past out_c not added) */
static inline void add_row(double *acc, const float *t, int64_t n) {
  for (int64_t l = 0; l < n; l++) acc[l] += (double)t[l];
}

/* The portable block: rows [r0, r0 + nr) x channels [c0, c1) over np pairs, VDPBF16PS's
   order (pixel 2q + 1's product, then 2q's) in float32, subnormals flushed as it does. */
static float ftz(float v) { return v > -0x1p-126f && v < 0x1p-126f ? 0.0f * v : v; }
static float bf(uint32_t v) { return ftz(npu_bf16_to_f32((uint16_t)v)); }

static void block_scalar(const fb_job *j, const uint32_t *xp, int64_t q0, int np, int64_t r0,
                         int nr, int64_t c0, int64_t c1) {
  float t[64];
  for (int r = 0; r < nr; r++)
    for (int64_t cb = c0; cb < c1; cb += 64) {
      int64_t ce = cb + 64 < c1 ? cb + 64 : c1;
      for (int64_t co = cb; co < ce; co++) {
        float s = 0;
        for (int q = 0; q < np; q++) {
          uint32_t a = xp[q * FB_ROWS + r], d = j->dyp[(q0 + q) * j->co16 + co];
          s = ftz(s + ftz(bf(a >> 16) * bf(d >> 16)));
          s = ftz(s + ftz(bf(a & 0xffff) * bf(d & 0xffff)));
        }
        t[co - cb] = s;
      }
      add_row(j->acc + (r0 + r) * j->out_c + cb, t, ce - cb);
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FB_NATIVE 1
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

/* the block's rows [r, r + nr) of xp, df's rows [row, row + nr), x channels [co, co + 16 nv),
   into acc */
static inline __attribute__((always_inline)) void
fb_tile(const fb_job *j, const uint32_t *xp, int64_t q0, int np, int r, int64_t row,
        const int nr, int64_t co, const int nv) {
  __m512 t[FB_TR][2];
#pragma GCC unroll 8
  for (int i = 0; i < nr; i++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) t[i][v] = _mm512_setzero_ps();
  const uint32_t *d = j->dyp + q0 * j->co16 + co;
  for (int q = 0; q < np; q++, d += j->co16) {
    __m512bh d0 = (__m512bh)_mm512_loadu_si512(d), d1 = d0;
    if (nv > 1) d1 = (__m512bh)_mm512_loadu_si512(d + 16);
    const uint32_t *xr = xp + q * FB_ROWS + r;
#pragma GCC unroll 8
    for (int i = 0; i < nr; i++) {
      __m512bh b = (__m512bh)_mm512_set1_epi32((int)xr[i]);
      t[i][0] = _mm512_dpbf16_ps(t[i][0], b, d0);
      if (nv > 1) t[i][1] = _mm512_dpbf16_ps(t[i][1], b, d1);
    }
  }
  const int64_t oc = j->out_c;
#pragma GCC unroll 8
  for (int i = 0; i < nr; i++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) {
      int64_t c = co + 16 * v, left = oc - c;
      if (left <= 0) continue;
      __mmask16 k = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
      double *a = j->acc + (row + i) * oc + c;
      __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(t[i][v]));
      __m512d hi = _mm512_cvtps_pd(
          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t[i][v]), 1)));
      __mmask8 klo = (__mmask8)(k & 0xff), khi = (__mmask8)(k >> 8);
      _mm512_mask_storeu_pd(a, klo, _mm512_add_pd(_mm512_maskz_loadu_pd(klo, a), lo));
      _mm512_mask_storeu_pd(a + 8, khi, _mm512_add_pd(_mm512_maskz_loadu_pd(khi, a + 8), hi));
    }
}

static inline __attribute__((always_inline)) void
fb_rows(const fb_job *j, const uint32_t *xp, int64_t q0, int np, int r, int64_t row,
        const int nr, int64_t c0, int64_t c1) {
  int64_t co = c0;
  for (; co + 32 <= c1; co += 32) fb_tile(j, xp, q0, np, r, row, nr, co, 2);
  if (co + 16 < c1) fb_tile(j, xp, q0, np, r, row, nr, co, 2);
  else if (co < c1) fb_tile(j, xp, q0, np, r, row, nr, co, 1);
}

static void block_native(const fb_job *j, const uint32_t *xp, int64_t q0, int np, int64_t r0,
                         int nr, int64_t c0, int64_t c1) {
  int r = 0; /* xp's row r is df's row r0 + r */
  for (; r + 8 <= nr; r += 8) fb_rows(j, xp, q0, np, r, r0 + r, 8, c0, c1);
  for (; r + 4 <= nr; r += 4) fb_rows(j, xp, q0, np, r, r0 + r, 4, c0, c1);
  for (; r < nr; r++) fb_rows(j, xp, q0, np, r, r0 + r, 1, c0, c1);
}

/* The packing of x when the item's 16 rows are 16 channels of one tap (c % 16 == 0): one
   256-bit load per pixel, the two pixels' channels interleaved by widening to 32 bits. */
static void pack_x16(const fb_job *j, int64_t q0, int np, int64_t r0, uint32_t *xp) {
  const npuK_window2d *w = j->w;
  fb_pix pix[2 * FB_PAIRS];
  int64_t p0 = 2 * q0, npix = j->n_pix - p0 < 2 * np ? j->n_pix - p0 : 2 * np;
  locate(w, p0, npix, pix);
  int64_t tap = r0 / w->c, kh = tap / w->k_w, kw = tap % w->k_w, ci = r0 % w->c;
  for (int q = 0; q < np; q++) {
    __m256i h[2];
    for (int k = 0; k < 2; k++) {
      h[k] = _mm256_setzero_si256();
      if (2 * q + k >= npix) continue;
      const fb_pix *p = &pix[2 * q + k];
      int64_t ih = p->ih + kh * w->dilation_h, iw = p->iw + kw * w->dilation_w;
      if (ih >= 0 && ih < w->in_h && iw >= 0 && iw < w->in_w)
        h[k] = _mm256_loadu_si256(
            (const void *)(j->x + ((p->img + ih) * w->in_w + iw) * w->c + ci));
    }
    __m512i v = _mm512_or_si512(_mm512_cvtepu16_epi32(h[0]),
                                _mm512_slli_epi32(_mm512_cvtepu16_epi32(h[1]), 16));
    _mm512_storeu_si512(xp + q * FB_ROWS, v);
  }
}
#pragma GCC pop_options
#else
#define FB_NATIVE 0
#endif

static void items(void *arg, int64_t begin, int64_t end) {
  const fb_job *j = arg;
  const npuK_window2d *w = j->w;
  uint32_t xp[FB_PAIRS * FB_ROWS];
  float row[64];
  for (int64_t it = begin; it < end; it++) {
    int64_t r0 = it % j->n_row_items * FB_ROWS, c0 = it / j->n_row_items * j->co_item;
    int nr = (int)(j->n_rows - r0 < FB_ROWS ? j->n_rows - r0 : FB_ROWS);
    int64_t c1 = c0 + j->co_item < j->out_c ? c0 + j->co_item : j->out_c;
    for (int r = 0; r < nr; r++)
      for (int64_t co = c0; co < c1; co++) j->acc[(r0 + r) * j->out_c + co] = 0;
#if FB_NATIVE
    int fast = j->level > 0 && nr == FB_ROWS && w->c % FB_ROWS == 0;
#else
    (void)w;
#endif
    for (int64_t q0 = 0; q0 < j->n_pairs; q0 += FB_PAIRS) {
      int np = (int)(j->n_pairs - q0 < FB_PAIRS ? j->n_pairs - q0 : FB_PAIRS);
#if FB_NATIVE
      if (j->level > 0) {
        if (fast) pack_x16(j, q0, np, r0, xp);
        else pack_x(j, q0, np, r0, nr, xp);
        block_native(j, xp, q0, np, r0, nr, c0, c1);
        continue;
      }
#endif
      pack_x(j, q0, np, r0, nr, xp);
      block_scalar(j, xp, q0, np, r0, nr, c0, c1);
    }
    for (int r = 0; r < nr; r++) /* rounded to float32, then to the stored dtype */
      for (int64_t cb = c0; cb < c1; cb += 64) {
        int64_t n = c1 - cb < 64 ? c1 - cb : 64, at = (r0 + r) * j->out_c + cb;
        for (int64_t l = 0; l < n; l++) row[l] = (float)j->acc[at + l];
        if (j->df_dtype == NPUK_F32) memcpy((float *)j->df + at, row, (size_t)n * sizeof *row);
        else npuK_half_narrow(row, j->df_dtype, (uint16_t *)j->df + at, n);
      }
  }
}

static void filter_grad_bf16(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                             const uint16_t *x, const uint16_t *dy, void *df,
                             npuK_dtype df_dtype, void *scratch, int level) {
  int64_t rows = w->k_h * w->k_w * w->c;
  if (rows <= 0 || out_c <= 0) return;
  fb_job j = {.w = w, .out_c = out_c, .co16 = (out_c + 15) / 16 * 16,
              .n_pix = w->n * w->out_h * w->out_w, .n_rows = rows, .x = x, .dy = dy,
              .acc = scratch, .df = df, .df_dtype = df_dtype, .level = level};
  j.n_pairs = (j.n_pix + 1) / 2;
  j.dyp = (uint32_t *)(j.acc + rows * out_c);
  j.n_row_items = (rows + FB_ROWS - 1) / FB_ROWS;
  /* few row ranges (a first layer: c = 1, 9 rows): split the channels too, in whole tiles,
     so that both threads work (the split never changes a sum's order) */
  j.co_item = j.n_row_items >= 4 || j.co16 <= 32 ? j.co16 : 32;
  if (j.n_row_items < 4 && j.co16 == 32) j.co_item = 16;
  int64_t n_co_items = (out_c + j.co_item - 1) / j.co_item;
  npuK_parallel_for(pool, j.n_pairs, K_GRAIN_ELEMS / (j.co16 + 1) + 1, pack_dy, &j);
  npuK_parallel_for(pool, j.n_row_items * n_co_items, 1, items, &j);
}

void npuK_conv2d_backprop_filter_bf16(const npuK_pool *pool, const npuK_window2d *w,
                                      int64_t out_c, const uint16_t *x, const uint16_t *dy,
                                      void *df, npuK_dtype df_dtype, void *scratch) {
  filter_grad_bf16(pool, w, out_c, x, dy, df, df_dtype, scratch, npuK_bf16dot());
}

void npuK_conv2d_backprop_filter_bf16_level(const npuK_pool *pool, const npuK_window2d *w,
                                            int64_t out_c, const uint16_t *x,
                                            const uint16_t *dy, void *df, npuK_dtype df_dtype,
                                            void *scratch, int level) {
  filter_grad_bf16(pool, w, out_c, x, dy, df, df_dtype, scratch,
                   level > 0 && npuK_bf16dot() ? 1 : 0);
}
