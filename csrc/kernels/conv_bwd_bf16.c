/* conv_bwd_bf16.c: conv2d's gradients on bfloat16 operands as stored, by AVX512_BF16's
 * VDPBF16PS (mixed bf16 training: allow_mix_precision_bf16, mixed_bfloat16), instead of
 * widening them into float32 copies for conv_bwd.c's float32 kernels.  The filter gradient
 * first; the input gradient below has its own header.
 *
 * df[kh, kw, ci, co] = the sum over the pixels p = (n, oh, ow) of x[n, ih, iw, ci] * dy[p, co]
 * (ih = oh s_h - pad_top + kh d_h, likewise iw; x outside is zero).  df is a GEMM, (k_h k_w c
 * rows) x (out_c columns), reduced over pixels, and VDPBF16PS reduces PAIRS: each float32
 * lane adds a[2i+1] b[2i+1], then a[2i] b[2i].  So pixels go in pairs (2q, 2q+1), in the
 * order (n, oh, ow); an odd last pixel is paired with a zero (x and dy both zero):
 *   dy once per call, interleaved: dyp[q][co][2] (co up to a multiple of 16, zeros after
 *     out_c), so one zmm holds 16 output channels x the pair;
 *   x per block of FB_PAIRS pairs and per work item's rows (kh, kw, ci): the 32 bits
 *     (x[2q][row], x[2q+1][row]), zero where the tap reads padding, broadcast to every lane
 *     (vpbroadcastd); laid out [pair][16 rows] when the item's rows are 16 channels of one tap
 *     (one vector load a pixel), else [row][pair] (runs of an output row copied a row at a
 *     time: c = 1 first layers).
 * A tile of up to 8 rows x 32 channels stays in 16 zmm accumulators over a block's pairs;
 * each block's float32 sums go into float64 accumulators (scratch), rounded to float32 once
 * at the end (then, for a bfloat16 df, to bfloat16: the bits the executor's narrowing of a
 * float32 df would give).  Blocks are fixed by the shape, work items (ranges of rows, every
 * channel) own their elements, so the bits do not depend on the thread count.
 *
 * Accuracy.  A bfloat16 product is exact (8 + 8 significand bits), so each block
 * is a float32 sum of at most m = 2 FB_PAIRS terms in a fixed order, then float64 across
 * the b blocks, then one rounding: |df - exact| <= (m + 1) 2^-24 sum|x dy| (+ b 2^-53 sum,
 * folded in) — the float32 kernels' "k 2^-24 sum|a b|" form with k = m + 1, whatever the
 * pixel count.  VDPBF16PS ignores MXCSR: it treats subnormal inputs as zero (bfloat16 values
 * below 2^-126 in magnitude) and flushes subnormal results to zero, which adds at most
 * 2 n_terms 2^-126 to the bound (n_terms = n out_h out_w).  A NaN or infinity in x or dy
 * propagates to every element it takes part in; as padding is a zero operand here rather
 * than a skipped term, an infinite dy also makes NaN (0 x inf) the elements of taps that
 * read padding at that pixel, which the float32 kernel leaves finite.
 * The portable path (level 0: no AVX512_BF16, not x86-64, or the _level entry point's
 * choice) does the same pairs and blocks a step at a time as the instruction adds
 * (kutil.h's k_dpbf16_step), in the same order within a pair; the ops never reach it, as they read bfloat16 as stored only where
 * npuK_bf16dot() is 1 (the tests run it beside the native path).
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
  int64_t n_items, item_rows; /* items: ranges of item_rows df rows, every channel */
  const uint16_t *x, *dy;
  uint32_t *dyp;    /* [pair][co16]: (dy[2q][co], dy[2q+1][co]) */
  double *acc;      /* (n_rows, out_c) */
  void *df;
  npuK_dtype df_dtype;
  int level;
} fb_job;

/* A block's x pairs: the 32 bits (x[2q][row], x[2q+1][row]) of pair q and the item's row r
   at xp[q qs + r rs]: [pair][16 rows] (qs 16, rs 1) when 16 channels of one tap are packed
   a pixel at a time, else [row][pair] (qs 1, rs FB_PAIRS), a row at a time. */
typedef struct fb_xp {
  uint32_t v[FB_PAIRS * FB_ROWS];
  int64_t qs, rs;
} fb_xp;

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
    if (b)
      for (; co < oc; co++) o[co] = (uint32_t)a[co] | (uint32_t)b[co] << 16;
    else
      for (; co < oc; co++) o[co] = a[co];
    for (; co < co16; co++) o[co] = 0;
  }
}

/* Pixel p0 as (image, oh, ow): the walks below go on from there without dividing. */
typedef struct fb_at {
  int64_t b, oh, ow;
} fb_at;

static fb_at pixel_at(const npuK_window2d *w, int64_t p) {
  int64_t hw = w->out_h * w->out_w, r = p % hw;
  return (fb_at){p / hw, r / w->out_w, r % w->out_w};
}

/* [row][pair]: row by row, each a run of the block's pixels by output rows: zero where the
   tap's input row is padding, else x's row read at stride s_w c between the columns inside.
   An odd last pixel's half is zero. */
static void pack_rows(const fb_job *j, int64_t q0, int np, int64_t r0, int nr, fb_xp *xp) {
  const npuK_window2d *w = j->w;
  int64_t p0 = 2 * q0, npix = j->n_pix - p0 < 2 * np ? j->n_pix - p0 : 2 * np;
  const fb_at first = pixel_at(w, p0);
  const int64_t step = w->stride_w * w->c;
  xp->qs = 1, xp->rs = FB_PAIRS;
  for (int r = 0; r < nr; r++) {
    int64_t row = r0 + r, tap = row / w->c, ci = row % w->c;
    int64_t kh = tap / w->k_w, kw = tap % w->k_w;
    uint16_t *o = (uint16_t *)(xp->v + r * FB_PAIRS);
    /* the output columns [lo, hi) whose input column ow s_w - pad_left + kw d_w is inside */
    int64_t off = kw * w->dilation_w - w->pad_left, lo = 0, hi = w->out_w;
    if (off < 0) lo = (-off + w->stride_w - 1) / w->stride_w;
    if (hi > 0 && (hi - 1) * w->stride_w + off >= w->in_w)
      hi = w->in_w - off > 0 ? (w->in_w - off - 1) / w->stride_w + 1 : 0;
    if (hi < lo) hi = lo;
    fb_at at = first;
    for (int64_t i = 0; i < npix;) {
      int64_t seg = w->out_w - at.ow < npix - i ? w->out_w - at.ow : npix - i;
      int64_t ih = at.oh * w->stride_h - w->pad_top + kh * w->dilation_h;
      uint16_t *d = o + i; /* d[ow - at.ow] is column ow's */
      if (ih < 0 || ih >= w->in_h) {
        memset(d, 0, (size_t)seg * sizeof *d);
      } else {
        /* x's row ih from the tap's first column (off; which may be left of x: only the
           columns [lo, hi) inside are read) */
        const uint16_t *xr = j->x + ((at.b * w->in_h + ih) * w->in_w) * w->c + ci;
        int64_t a = at.ow, e = at.ow + seg;
        int64_t l = lo > a ? (lo < e ? lo : e) : a, h = hi < e ? (hi > l ? hi : l) : e;
        for (int64_t ow = a; ow < l; ow++) d[ow - a] = 0;
        if (step == 1) memcpy(d + (l - a), xr + (l + off) * w->c, (size_t)(h - l) * sizeof *d);
        else for (int64_t ow = l; ow < h; ow++) d[ow - a] = xr[ow * step + off * w->c];
        for (int64_t ow = h; ow < e; ow++) d[ow - a] = 0;
      }
      i += seg;
      at.ow = 0;
      if (++at.oh == w->out_h) at.oh = 0, at.b++;
    }
    if (npix & 1) o[npix] = 0;
  }
}

/* float64 acc[row][co] += the float32 tile sums t (lanes past out_c not added) */
static inline void add_row(double *acc, const float *t, int64_t n) {
  for (int64_t l = 0; l < n; l++) acc[l] += (double)t[l];
}

/* The portable block: rows [r0, r0 + nr) x every channel over np pairs, VDPBF16PS's order
   (pixel 2q + 1's product, then 2q's) a step at a time as it adds (k_dpbf16_step). */

static void block_scalar(const fb_job *j, const fb_xp *xp, int64_t q0, int np, int64_t r0,
                         int nr) {
  float t[64];
  for (int r = 0; r < nr; r++)
    for (int64_t cb = 0; cb < j->out_c; cb += 64) {
      int64_t ce = cb + 64 < j->out_c ? cb + 64 : j->out_c;
      for (int64_t co = cb; co < ce; co++) {
        float s = 0;
        for (int q = 0; q < np; q++) {
          uint32_t a = xp->v[q * xp->qs + r * xp->rs], d = j->dyp[(q0 + q) * j->co16 + co];
          s = k_dpbf16_step(s, k_bf16_daz((uint16_t)(a >> 16)), k_bf16_daz((uint16_t)(d >> 16)));
          s = k_dpbf16_step(s, k_bf16_daz((uint16_t)a), k_bf16_daz((uint16_t)d));
        }
        t[co - cb] = s;
      }
      add_row(j->acc + (r0 + r) * j->out_c + cb, t, ce - cb);
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FB_NATIVE 1
#include <immintrin.h>

#include "kernels/kacc512.h"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

/* the block's rows [r, r + nr) of xp, df's rows [row, row + nr), x channels [co, co + 16 nv),
   into acc */
static inline __attribute__((always_inline)) void
fb_tile(const fb_job *j, const fb_xp *xp, int64_t q0, int np, int r, int64_t row,
        const int nr, int64_t co, const int nv) {
  __m512 t[FB_TR][2];
#pragma GCC unroll 8
  for (int i = 0; i < nr; i++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) t[i][v] = _mm512_setzero_ps();
  const uint32_t *d = j->dyp + q0 * j->co16 + co, *xr = xp->v + r * xp->rs;
  const int64_t qs = xp->qs, rs = xp->rs;
  for (int q = 0; q < np; q++, d += j->co16, xr += qs) {
    __m512bh d0 = (__m512bh)_mm512_loadu_si512(d), d1 = d0;
    if (nv > 1) d1 = (__m512bh)_mm512_loadu_si512(d + 16);
#pragma GCC unroll 8
    for (int i = 0; i < nr; i++) {
      __m512bh b = (__m512bh)_mm512_set1_epi32((int)xr[i * rs]);
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
      k_acc_f32x16_f64(j->acc + (row + i) * oc + c, t[i][v], k);
    }
}

static inline __attribute__((always_inline)) void
fb_rows(const fb_job *j, const fb_xp *xp, int64_t q0, int np, int r, int64_t row,
        const int nr) {
  int64_t co = 0, oc = j->out_c;
  for (; co + 32 <= oc; co += 32) fb_tile(j, xp, q0, np, r, row, nr, co, 2);
  if (co + 16 < oc) fb_tile(j, xp, q0, np, r, row, nr, co, 2);
  else if (co < oc) fb_tile(j, xp, q0, np, r, row, nr, co, 1);
}

static void block_native(const fb_job *j, const fb_xp *xp, int64_t q0, int np, int64_t r0,
                         int nr) {
  /* tiles of 8 rows, then the rest in one (a first layer's 5 + 4 rows: one pass over dy
     each); xp's row r is df's row r0 + r */
  int r = 0;
  for (; r + 8 <= nr; r += 8) fb_rows(j, xp, q0, np, r, r0 + r, 8);
  switch (nr - r) {
  case 7: fb_rows(j, xp, q0, np, r, r0 + r, 7); break;
  case 6: fb_rows(j, xp, q0, np, r, r0 + r, 6); break;
  case 5: fb_rows(j, xp, q0, np, r, r0 + r, 5); break;
  case 4: fb_rows(j, xp, q0, np, r, r0 + r, 4); break;
  case 3: fb_rows(j, xp, q0, np, r, r0 + r, 3); break;
  case 2: fb_rows(j, xp, q0, np, r, r0 + r, 2); break;
  case 1: fb_rows(j, xp, q0, np, r, r0 + r, 1); break;
  default: break;
  }
}

/* pack_dy with AVX-512: 16 channels of both pixels a step, widened to 32 bits and merged */
static void pack_dy_native(void *arg, int64_t q0, int64_t q1) {
  const fb_job *j = arg;
  const int64_t oc = j->out_c, co16 = j->co16;
  for (int64_t q = q0; q < q1; q++) {
    const uint16_t *a = j->dy + 2 * q * oc;
    int has_b = 2 * q + 1 < j->n_pix;
    uint32_t *o = j->dyp + q * co16;
    for (int64_t co = 0; co < co16; co += 16) {
      __mmask16 k = oc - co >= 16 ? 0xffff : (__mmask16)((1u << (oc - co)) - 1);
      __m512i va = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, a + co));
      __m512i vb = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(has_b ? k : 0, a + oc + co));
      _mm512_storeu_si512(o + co, _mm512_or_si512(va, _mm512_slli_epi32(vb, 16)));
    }
  }
}

/* [pair][16 rows], the item's rows 16 channels of one tap (c % 16 == 0): one 256-bit load a
   pixel, the two pixels of a pair interleaved by widening each to 32 bits; the pixels by runs
   along output rows (the bounds checked a run at a time). */
static void pack_x16(const fb_job *j, int64_t q0, int np, int64_t r0, fb_xp *xp) {
  const npuK_window2d *w = j->w;
  int64_t p0 = 2 * q0, npix = j->n_pix - p0 < 2 * np ? j->n_pix - p0 : 2 * np;
  int64_t tap = r0 / w->c, kh = tap / w->k_w, kw = tap % w->k_w, ci = r0 % w->c;
  int64_t off = kw * w->dilation_w - w->pad_left, lo = 0, hi = w->out_w;
  if (off < 0) lo = (-off + w->stride_w - 1) / w->stride_w;
  if (hi > 0 && (hi - 1) * w->stride_w + off >= w->in_w)
    hi = w->in_w - off > 0 ? (w->in_w - off - 1) / w->stride_w + 1 : 0;
  if (hi < lo) hi = lo;
  const int64_t step = w->stride_w * w->c;
  fb_at at = pixel_at(w, p0);
  __m512i even = _mm512_setzero_si512();
  uint32_t *o = xp->v;
  xp->qs = FB_ROWS, xp->rs = 1;
#define FB_PUT(h)                                                                            \
  do {                                                                                       \
    __m512i v_ = _mm512_cvtepu16_epi32(h);                                                   \
    if (i & 1) _mm512_storeu_si512(o + (i >> 1) * FB_ROWS,                                   \
                                   _mm512_or_si512(even, _mm512_slli_epi32(v_, 16)));        \
    else even = v_;                                                                          \
    i++;                                                                                     \
  } while (0)
  for (int64_t i = 0; i < npix;) {
    int64_t seg = w->out_w - at.ow < npix - i ? w->out_w - at.ow : npix - i;
    int64_t ih = at.oh * w->stride_h - w->pad_top + kh * w->dilation_h;
    int64_t a = at.ow, e = at.ow + seg, l = a, h = a;
    if (ih >= 0 && ih < w->in_h) {
      l = lo > a ? (lo < e ? lo : e) : a;
      h = hi < e ? (hi > l ? hi : l) : e;
    }
    /* row ih (only when inside: l < h) from column off, which may be left of x */
    const uint16_t *xr = l < h ? j->x + ((at.b * w->in_h + ih) * w->in_w) * w->c + ci : NULL;
    for (int64_t ow = a; ow < l; ow++) FB_PUT(_mm256_setzero_si256());
    for (int64_t ow = l; ow < h; ow++)
      FB_PUT(_mm256_loadu_si256((const void *)(xr + ow * step + off * w->c)));
    for (int64_t ow = h; ow < e; ow++) FB_PUT(_mm256_setzero_si256());
    at.ow = 0;
    if (++at.oh == w->out_h) at.oh = 0, at.b++;
  }
#undef FB_PUT
  if (npix & 1) _mm512_storeu_si512(o + (npix >> 1) * FB_ROWS, even);
}
#pragma GCC pop_options
#else
#define FB_NATIVE 0
#endif

static void items(void *arg, int64_t begin, int64_t end) {
  const fb_job *j = arg;
  fb_xp xp;
  float row[64];
  for (int64_t it = begin; it < end; it++) {
    int64_t r0 = it * j->item_rows;
    int nr = (int)(j->n_rows - r0 < j->item_rows ? j->n_rows - r0 : j->item_rows);
    for (int64_t i = r0 * j->out_c; i < (r0 + nr) * j->out_c; i++) j->acc[i] = 0;
#if FB_NATIVE
    int fast = j->level > 0 && nr == FB_ROWS && j->w->c % FB_ROWS == 0;
#endif
    for (int64_t q0 = 0; q0 < j->n_pairs; q0 += FB_PAIRS) {
      int np = (int)(j->n_pairs - q0 < FB_PAIRS ? j->n_pairs - q0 : FB_PAIRS);
#if FB_NATIVE
      if (j->level > 0) {
        if (fast) pack_x16(j, q0, np, r0, &xp);
        else pack_rows(j, q0, np, r0, nr, &xp);
        block_native(j, &xp, q0, np, r0, nr);
        continue;
      }
#endif
      pack_rows(j, q0, np, r0, nr, &xp);
      block_scalar(j, &xp, q0, np, r0, nr);
    }
    for (int r = 0; r < nr; r++) /* rounded to float32, then to the stored dtype */
      for (int64_t cb = 0; cb < j->out_c; cb += 64) {
        int64_t n = j->out_c - cb < 64 ? j->out_c - cb : 64, at = (r0 + r) * j->out_c + cb;
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
  /* items of 16 rows; at least two where there are two rows (a first layer: c = 1, 9 rows
     as 5 + 4), so that two threads both work; the split never changes a sum's order */
  j.n_items = (rows + FB_ROWS - 1) / FB_ROWS;
  if (j.n_items < 2 && rows >= 2) j.n_items = 2;
  j.item_rows = (rows + j.n_items - 1) / j.n_items;
  j.n_items = (rows + j.item_rows - 1) / j.item_rows;
  npuK_range_fn pack = pack_dy;
#if FB_NATIVE
  if (level > 0) pack = pack_dy_native;
#endif
  npuK_parallel_for(pool, j.n_pairs, K_GRAIN_ELEMS / (j.co16 + 1) + 1, pack, &j);
  npuK_parallel_for(pool, j.n_items, 1, items, &j);
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

/* ---- the input gradient on bfloat16 as stored ------------------------------------------
 * dx[n, ih, iw, ci] = the sum over the taps (kh, kw) whose output pixel (oh, ow) — oh s_h =
 * ih + pad_top - kh d_h, likewise ow — lies in dy, and over co, of dy[n, oh, ow, co] *
 * f[kh, kw, ci, co].  The reduction runs over (kh, kw, co), and co is contiguous in both dy
 * (NHWC) and the HWIO filter's rows, so VDPBF16PS pairs channels (2j, 2j+1): dy's pair is
 * read straight from memory as 32 bits and broadcast (no packing; an odd out_c's last pair
 * is its one channel and a zero), the filter is interleaved once per call as
 * fp[kh][kw][j][ci] = (f[.., ci, 2j], f[.., ci, 2j+1]), ci up to a multiple of 16 with zeros.
 * A tile of up to 8 pixels of one dx row x 32 channels stays in 16 registers over every tap
 * and pair; a tap whose dy row is outside is skipped for the whole tile, a pixel whose dy
 * column is outside (or between strides) reads a zero pair.  Each element is one float32
 * chain over (kh, kw, j) ascending — the pixel's place in a tile or the thread does not
 * change it — so |dx - exact| <= k_h k_w out_c 2^-24 sum|dy f| + 2 k_h k_w out_c 2^-126
 * (the direct kernel's one-chain form; subnormal inputs and results flushed as above).  A
 * zero pair stands for a term the sum skips: the same value, but for an infinite or NaN
 * filter element, which then makes NaN where the float32 kernel skips it. */

#define BI_TP 8 /* dx pixels per tile */

typedef struct bi_job {
  const npuK_window2d *w;
  int64_t out_c, n_pairs, c16;
  const uint16_t *dy;
  const uint32_t *fp; /* [k_h k_w][n_pairs][c16] */
  void *dx;
  npuK_dtype dx_dtype;
  int level;
} bi_job;

size_t npuK_conv2d_backprop_input_bf16_scratch_size(const npuK_window2d *w, int64_t out_c) {
  int64_t c16 = (w->c + 15) / 16 * 16;
  return (size_t)(w->k_h * w->k_w * ((out_c + 1) / 2) * c16) * sizeof(uint32_t);
}

static void pack_filter(const bi_job *j, const uint16_t *f, uint32_t *fp) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->out_c, c = w->c;
  for (int64_t tap = 0; tap < w->k_h * w->k_w; tap++)
    for (int64_t p = 0; p < j->n_pairs; p++) {
      uint32_t *o = fp + (tap * j->n_pairs + p) * j->c16;
      for (int64_t ci = 0; ci < c; ci++) {
        const uint16_t *r = f + (tap * c + ci) * oc + 2 * p;
        o[ci] = (uint32_t)r[0] | (2 * p + 1 < oc ? (uint32_t)r[1] << 16 : 0);
      }
      for (int64_t ci = c; ci < j->c16; ci++) o[ci] = 0;
    }
}

/* dy's pair p of pixel d (NULL: a zero pair), as VDPBF16PS reads it */
static inline uint32_t dy_pair(const bi_job *j, const uint16_t *d, int64_t p) {
  if (!d) return 0;
  if (2 * p + 1 < j->out_c) {
    uint32_t v;
    memcpy(&v, d + 2 * p, sizeof v);
    return v;
  }
  return d[2 * p];
}

/* The dy pixels of a tile's np dx pixels (from column iw0 of row ih of image b) for tap
   (kh, kw): NULL where that tap reads none; 0 when the tap's dy row is outside for all. */
static int tile_taps(const bi_job *j, int64_t b, int64_t ih, int64_t iw0, int np, int64_t kh,
                     int64_t kw, const uint16_t **d) {
  const npuK_window2d *w = j->w;
  int64_t th = ih + w->pad_top - kh * w->dilation_h;
  if (th < 0 || th % w->stride_h) return 0;
  int64_t oh = th / w->stride_h;
  if (oh >= w->out_h) return 0;
  const uint16_t *row = j->dy + (b * w->out_h + oh) * w->out_w * j->out_c;
  int any = 0;
  for (int i = 0; i < np; i++) {
    int64_t tw = iw0 + i + w->pad_left - kw * w->dilation_w, ow = tw / w->stride_w;
    d[i] = tw >= 0 && tw % w->stride_w == 0 && ow < w->out_w ? row + ow * j->out_c : NULL;
    any |= d[i] != NULL;
  }
  return any;
}

/* The portable tile: the same chains by k_dpbf16_step, VDPBF16PS's order within a pair. */
static void bi_tile_scalar(const bi_job *j, int64_t b, int64_t ih, int64_t iw0, int np,
                           int64_t c0, int nc, float *t /* [np][32] */) {
  const npuK_window2d *w = j->w;
  const uint16_t *d[BI_TP];
  for (int i = 0; i < np * 32; i++) t[i] = 0;
  for (int64_t kh = 0; kh < w->k_h; kh++)
    for (int64_t kw = 0; kw < w->k_w; kw++) {
      if (!tile_taps(j, b, ih, iw0, np, kh, kw, d)) continue;
      const uint32_t *f = j->fp + (kh * w->k_w + kw) * j->n_pairs * j->c16 + c0;
      for (int64_t p = 0; p < j->n_pairs; p++, f += j->c16)
        for (int i = 0; i < np; i++) {
          uint32_t a = dy_pair(j, d[i], p);
          for (int l = 0; l < nc; l++) {
            float s = t[i * 32 + l];
            s = k_dpbf16_step(s, k_bf16_daz((uint16_t)(a >> 16)),
                              k_bf16_daz((uint16_t)(f[l] >> 16)));
            t[i * 32 + l] =
                k_dpbf16_step(s, k_bf16_daz((uint16_t)a), k_bf16_daz((uint16_t)f[l]));
          }
        }
    }
}

#if FB_NATIVE
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
static inline __attribute__((always_inline)) void
bi_tile_n(const bi_job *j, int64_t b, int64_t ih, int64_t iw0, const int np, int64_t c0,
          const int nv, float *out /* [np][32] */) {
  const npuK_window2d *w = j->w;
  __m512 t[BI_TP][2];
  const uint16_t *d[BI_TP];
  const int odd = j->out_c & 1;
#pragma GCC unroll 8
  for (int i = 0; i < np; i++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) t[i][v] = _mm512_setzero_ps();
  for (int64_t kh = 0; kh < w->k_h; kh++)
    for (int64_t kw = 0; kw < w->k_w; kw++) {
      if (!tile_taps(j, b, ih, iw0, np, kh, kw, d)) continue;
      const uint32_t *f = j->fp + (kh * w->k_w + kw) * j->n_pairs * j->c16 + c0;
      int64_t whole = j->n_pairs - odd; /* pairs read as 32 bits */
      for (int64_t p = 0; p < j->n_pairs; p++, f += j->c16) {
        __m512bh f0 = (__m512bh)_mm512_loadu_si512(f), f1 = f0;
        if (nv > 1) f1 = (__m512bh)_mm512_loadu_si512(f + 16);
#pragma GCC unroll 8
        for (int i = 0; i < np; i++) {
          uint32_t a = 0;
          if (d[i]) {
            if (p < whole) memcpy(&a, d[i] + 2 * p, sizeof a);
            else a = d[i][2 * p];
          }
          __m512bh x = (__m512bh)_mm512_set1_epi32((int)a);
          t[i][0] = _mm512_dpbf16_ps(t[i][0], x, f0);
          if (nv > 1) t[i][1] = _mm512_dpbf16_ps(t[i][1], x, f1);
        }
      }
    }
#pragma GCC unroll 8
  for (int i = 0; i < np; i++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) _mm512_storeu_ps(out + i * 32 + 16 * v, t[i][v]);
}

static void bi_tile_native(const bi_job *j, int64_t b, int64_t ih, int64_t iw0, int np,
                           int64_t c0, int nc, float *out) {
  int nv = nc > 16 ? 2 : 1;
#define BI_CASE(k)                                                                           \
  case k:                                                                                    \
    if (nv == 2) bi_tile_n(j, b, ih, iw0, k, c0, 2, out);                                    \
    else bi_tile_n(j, b, ih, iw0, k, c0, 1, out);                                            \
    break;
  switch (np) {
    BI_CASE(8) BI_CASE(7) BI_CASE(6) BI_CASE(5) BI_CASE(4) BI_CASE(3) BI_CASE(2) BI_CASE(1)
  default: break;
  }
#undef BI_CASE
}
#pragma GCC pop_options
#endif

/* items: dx rows (b, ih); each row's pixels by tiles of 8, its channels by 32 */
static void bi_rows(void *arg, int64_t begin, int64_t end) {
  const bi_job *j = arg;
  const npuK_window2d *w = j->w;
  float t[BI_TP * 32];
  for (int64_t item = begin; item < end; item++) {
    int64_t b = item / w->in_h, ih = item % w->in_h;
    for (int64_t iw0 = 0; iw0 < w->in_w; iw0 += BI_TP) {
      int np = (int)(w->in_w - iw0 < BI_TP ? w->in_w - iw0 : BI_TP);
      for (int64_t c0 = 0; c0 < w->c; c0 += 32) {
        int nc = (int)(w->c - c0 < 32 ? w->c - c0 : 32);
#if FB_NATIVE
        if (j->level > 0) bi_tile_native(j, b, ih, iw0, np, c0, nc, t);
        else bi_tile_scalar(j, b, ih, iw0, np, c0, nc, t);
#else
        bi_tile_scalar(j, b, ih, iw0, np, c0, nc, t);
#endif
        for (int i = 0; i < np; i++) {
          int64_t at = ((b * w->in_h + ih) * w->in_w + iw0 + i) * w->c + c0;
          if (j->dx_dtype == NPUK_F32) memcpy((float *)j->dx + at, t + i * 32, (size_t)nc * sizeof *t);
          else npuK_half_narrow(t + i * 32, j->dx_dtype, (uint16_t *)j->dx + at, nc);
        }
      }
    }
  }
}

static void input_grad_bf16(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                            const uint16_t *dy, const uint16_t *filter, void *dx,
                            npuK_dtype dx_dtype, void *scratch, int level) {
  if (w->n <= 0 || w->in_h <= 0 || w->in_w <= 0 || w->c <= 0) return;
  bi_job j = {.w = w, .out_c = out_c, .n_pairs = (out_c + 1) / 2, .c16 = (w->c + 15) / 16 * 16,
              .dy = dy, .fp = scratch, .dx = dx, .dx_dtype = dx_dtype, .level = level};
  pack_filter(&j, filter, scratch);
  npuK_parallel_for(pool, w->n * w->in_h, 1, bi_rows, &j);
}

void npuK_conv2d_backprop_input_bf16(const npuK_pool *pool, const npuK_window2d *w,
                                     int64_t out_c, const uint16_t *dy, const uint16_t *filter,
                                     void *dx, npuK_dtype dx_dtype, void *scratch) {
  input_grad_bf16(pool, w, out_c, dy, filter, dx, dx_dtype, scratch, npuK_bf16dot());
}

void npuK_conv2d_backprop_input_bf16_level(const npuK_pool *pool, const npuK_window2d *w,
                                           int64_t out_c, const uint16_t *dy,
                                           const uint16_t *filter, void *dx,
                                           npuK_dtype dx_dtype, void *scratch, int level) {
  input_grad_bf16(pool, w, out_c, dy, filter, dx, dx_dtype, scratch,
                  level > 0 && npuK_bf16dot() ? 1 : 0);
}
