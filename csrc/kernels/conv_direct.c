/* conv_direct.c: conv2d by a register-blocked direct kernel, the NPUK_CONV_DIRECT algorithm of
 * npuK_conv_algo (kernels.h), with its epilogue and an optional fused max pool.
 *
 * Layouts as conv.c: x NHWC, filter HWIO (k_h, k_w, c, out_c), y NHWC.  Dilation 1, any
 * stride and padding, out_c a multiple of 8.  Why: im2col copies every input value k_h * k_w
 * times into a column block before OpenBLAS packs it again; here a tile of output pixels of
 * one row times output channels lives in registers while the taps stream by, read straight
 * from x: for one filter row kh, the taps (kw, ci) of a pixel are k_w * c consecutive floats
 * of x, and the filter's rows for them are consecutive too (HWIO needs no packing).  Tiles:
 * up to 12 pixels x 32 channels in 24 zmm registers (AVX-512F), else 6 x 16 in 12 ymm
 * (AVX2 + FMA), else the portable twin; an image whose windows leave it sideways is first
 * copied with zero columns around it (whole, or by bands of rows when large), so border
 * columns run in full tiles.
 *
 * Arithmetic: each output is one float32 fused multiply-add chain over its taps in
 * (kh, kw, ci) order, starting from +0.  Rows of taps above or below x are skipped; the zero
 * columns of the padded copy are multiplied in, fma(0, f, s) = s for finite f, so the value is
 * that of the chain over the valid taps (an infinite or NaN filter entry meets a padded zero
 * as in im2col's sgemm, which multiplies its zeros too).  That is the ref kernel's order with
 * one rounding per term, and what OpenBLAS's FMA sgemm kernels do for one element of a K
 * below their block depth; test_kernels holds every tile width and instruction set to the
 * fmaf chain bit for bit and to the float64 sum within gamma(k) sum|x f| (docs/numerics.md,
 * "Direct convolutions"), and reports whether OpenBLAS's im2col gave the same bits.  Each
 * output depends only on its own taps, so neither the thread count nor the split changes
 * anything.
 *
 * Work: items are output rows (image, oh), up to DIRECT_ROWS at a time with channel blocks
 * outermost (a block's filter columns stay in L1 across them), or with a fused pool the
 * pool's rows (each computes the convolution rows its windows read into its slot's scratch,
 * then pools them in max_pool's order with its NaN rule: the bits of conv2d, the epilogue and
 * max_pool); slots take contiguous runs of items and poll npuK_stopped between items.
 *
 * float16 / bfloat16 x and y (npuK_conv2d_direct_half_ep, the precision modes): the row
 * kernels stay float32.  Every image goes through the copy (direct_image), which widens it as
 * it copies — once per image, or once per band of rows — and each call's output rows (a pool
 * row's output) are computed, epilogue and pool included, into the slot's float32 rows and
 * narrowed from there while in cache: the bits of widening x in full, this kernel and
 * narrowing y (before, float16 convolutions ran im2col + sgemm on widened rows).  A float16 y
 * without a pool, its epilogue in registers, is narrowed by the AVX-512 tiles themselves
 * (tile_narrow); a pointwise convolution's reduced x is widened by bands (direct_band_rows).
 */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

#define DIRECT_NW 6   /* output pixels per register tile, at most */
#define DIRECT_ROWS 4 /* output rows per call (the cancel check's grain without a pool) */

/* Image nb of x as the row kernels read it: every output column's taps inside the view.
   Where some column's window leaves x sideways (padding), the image is copied into the slot's
   scratch with pad_left zero columns in front and zeros after, so that border columns run in
   full tiles instead of one pixel at a time; rows above and below x stay out (their taps are
   skipped).  The whole image is copied once while it fits DIRECT_PAD_FLOATS, else the band of
   rows each call reads (scratch stays bounded for large images).  at: input row ih0, column
   -pad_left; rstride: floats from row to row. */
#define DIRECT_PAD_FLOATS (1 << 16) /* 256 KiB */

typedef struct direct_view {
  const float *at;
  int64_t rstride, ih0;
} direct_view;

typedef struct direct_job {
  const npuK_window2d *w, *pw; /* pw: the fused pool, or NULL */
  int64_t oc;
  const float *x, *f;
  const npuK_epilogue *ep;
  int ep_inline;        /* bias (+ relu) applied to the tile in registers */
  int padded;           /* images go through a padded copy (direct_view) */
  int64_t pad_w;        /* a padded row's columns */
  int64_t band_rows;    /* input rows a padded copy holds (in_h: the whole image) */
  float *y, *scratch;
  int64_t slot_floats, pad_floats, n_items, n_slots;
  const npuK_pool *pool;
  /* output rows [oh0, oh0 + nr) of the view's image into yrows (consecutive rows of y), or,
     where hrows is not NULL (tile_narrow), narrowed to float16 into hrows */
  void (*rows)(const struct direct_job *, const direct_view *v, int64_t oh0, int64_t nr,
               float *yrows, uint16_t *hrows);
  /* dst = max_pool of the rows at src[0, n), pooling.c's order and NaN rule (k_max_rows);
     max4: the same for n = 4 */
  void (*max_rows)(float *dst, const float *const *src, int n, int64_t c);
  void (*max4)(float *dst, const float *const *src, int n, int64_t c);
  /* a 2x2 stride-2 pool whose windows all lie inside, pooled in registers, or NULL; hdst
     (pool_narrow) instead of dst: the pool row narrowed to float16 from the registers */
  void (*pool22)(const struct direct_job *, const direct_view *v, int64_t q, float *dst,
                 uint16_t *hdst);
  /* float16 / bfloat16 operands (npuK_conv2d_direct_half_ep; NPUK_F32 otherwise): a reduced
     x (xh) is read only through the copies direct_image makes, widened on the way; a reduced
     y (yh) is computed a call's rows at a time into the slot's float32 rows (yrows_floats of
     them), epilogue and pool included, and narrowed from there while they are in cache. */
  const void *xh;
  void *yh;
  npuK_dtype x_dtype, y_dtype;
  int64_t yrows_floats;
  /* a float16 y without a pool, the epilogue (if any) in registers, on the AVX-512 rows: each
     tile is narrowed from its registers as it is stored (F16C's rounding; a tile's NaNs are
     results of arithmetic, hence quiet, which vcvtps2ph narrows as half.h does), instead of
     stored in float32, reloaded and narrowed by npuK_half_narrow: the same bits */
  int tile_narrow;
  int pool_narrow; /* the same for a float16 y pooled by pool22 (its NaNs are quiet too) */
} direct_job;

int npuK_conv2d_direct_fits(const npuK_window2d *w, int64_t out_c, const npuK_window2d *pool) {
  if (w->dilation_h != 1 || w->dilation_w != 1 || out_c < 8 || out_c % 8 || w->c < 1 ||
      w->k_h < 1 || w->k_w < 1)
    return 0;
  return !pool || npuK_conv2d_pool_fits(w, pool);
}

/* ---- the portable twin: the same chains by fmaf ------------------------------------------- */

static void direct_row_scalar(const direct_job *j, const direct_view *v, int64_t oh,
                              float *yrow) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->oc, c = w->c, len = w->k_w * c;
  int64_t kh0, kh1;
  k_conv_kh_range(w, oh, &kh0, &kh1);
  for (int64_t ow = 0; ow < w->out_w; ow++) {
    float *yo = yrow + ow * oc;
    for (int64_t o = 0; o < oc; o++) yo[o] = 0;
    for (int64_t kh = kh0; kh < kh1; kh++) {
      const float *xp = v->at + (oh * w->stride_h - w->pad_top + kh - v->ih0) * v->rstride +
                        ow * w->stride_w * c;
      const float *fp = j->f + kh * len * oc;
      for (int64_t t = 0; t < len; t++)
        for (int64_t o = 0; o < oc; o++) yo[o] = fmaf(xp[t], fp[t * oc + o], yo[o]);
    }
  }
  if (j->ep) npuK_conv_epilogue_f32(j->ep, w->out_w, oc, yrow);
}

static void direct_rows_scalar(const direct_job *j, const direct_view *v, int64_t oh0,
                               int64_t nr, float *yrows, uint16_t *hrows) {
  (void)hrows; /* never set here (tile_narrow is the AVX-512 rows') */
  for (int64_t r = 0; r < nr; r++)
    direct_row_scalar(j, v, oh0 + r, yrows + r * j->w->out_w * j->oc);
}

static void direct_max_rows(float *dst, const float *const *src, int n, int64_t c) {
  k_max_rows(dst, src, n, c);
}

/* ---- AVX2 + FMA register tiles ------------------------------------------------------------ */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DIRECT_AVX2 1

#pragma GCC push_options
#pragma GCC target("avx2,fma")

/* Output pixels [ow, ow + nw) of a row (stride_w apart in x) times channels [c0, c0 + 8 nv):
   the taps of filter rows [kh0, kh0 + nkh); xr: the pixel ow's first tap in row kh0.  nw and
   nv are constants after inlining, so acc stays in registers. */
static inline __attribute__((always_inline)) void
direct_tile(const direct_job *j, const float *xr, int64_t xstep, int64_t nkh, int64_t kh0,
            const int nw, const int nv, int64_t c0, float *yo) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->oc, c = w->c, px = w->stride_w * c, len = w->k_w * c;
  const int64_t fstep = len * oc;
  __m256 acc[DIRECT_NW][2];
#pragma GCC unroll 6
  for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) acc[o][v] = _mm256_setzero_ps();
  const float *fr = j->f + kh0 * fstep + c0;
  for (int64_t kh = 0; kh < nkh; kh++, xr += xstep, fr += fstep) {
    const float *xp = xr, *fp = fr;
    for (int64_t t = 0; t < len; t++, xp++, fp += oc) {
      __m256 f0 = _mm256_loadu_ps(fp), f1 = f0;
      if (nv > 1) f1 = _mm256_loadu_ps(fp + 8);
#pragma GCC unroll 6
      for (int o = 0; o < nw; o++) {
        __m256 xb = _mm256_broadcast_ss(xp + o * px);
        acc[o][0] = _mm256_fmadd_ps(xb, f0, acc[o][0]);
        if (nv > 1) acc[o][1] = _mm256_fmadd_ps(xb, f1, acc[o][1]);
      }
    }
  }
  if (j->ep_inline) { /* conv.c's bias_relu_block, lane by lane: v + b, then v <= 0 ? 0 : v */
    const int relu = j->ep->act == NPUK_ACT_RELU;
    const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) {
      __m256 b = _mm256_loadu_ps(j->ep->bias + c0 + 8 * v);
#pragma GCC unroll 6
      for (int o = 0; o < nw; o++) {
        __m256 s = _mm256_add_ps(acc[o][v], b);
        if (relu) s = _mm256_andnot_ps(_mm256_cmp_ps(s, zero, _CMP_LE_OQ), s);
        acc[o][v] = s;
      }
    }
  }
#pragma GCC unroll 6
  for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) _mm256_storeu_ps(yo + o * oc + c0 + 8 * v, acc[o][v]);
}

/* Columns [ow, ow + nw) of the row, channels [c0, c0 + 16) or the last 8. */
static inline __attribute__((always_inline)) void
direct_cols(const direct_job *j, const float *xrow, int64_t xstep, int64_t nkh, int64_t kh0,
            int64_t ow, const int nw, int64_t c0, float *yrow) {
  const float *xr = xrow + ow * j->w->stride_w * j->w->c;
  float *yo = yrow + ow * j->oc;
  if (c0 + 16 <= j->oc) direct_tile(j, xr, xstep, nkh, kh0, nw, 2, c0, yo);
  else direct_tile(j, xr, xstep, nkh, kh0, nw, 1, c0, yo);
}

/* Rows [oh0, oh0 + nr): channel blocks outermost, so that a block's filter columns (k_h k_w c
   x 16 floats: 18 KiB for 3x3x32) stay in L1 over all the rows' tiles. */
static void direct_rows_avx2(const direct_job *j, const direct_view *v, int64_t oh0, int64_t nr,
                             float *yrows, uint16_t *hrows) {
  (void)hrows; /* never set here (tile_narrow is the AVX-512 rows') */
  const npuK_window2d *w = j->w;
  const int64_t ow_n = w->out_w, row_floats = ow_n * j->oc;
  /* each row in tiles as even as DIRECT_NW allows (14 columns: 5, 5, 4 rather than 6, 6, 2:
     a narrow tile waits on its few accumulators' latency) */
  int64_t base, extra;
  const int64_t n_tiles = k_even_tiles(ow_n, DIRECT_NW, &base, &extra);
  for (int64_t c0 = 0; c0 < j->oc; c0 += 16)
    for (int64_t r = 0; r < nr; r++) {
      int64_t oh = oh0 + r, kh0, kh1;
      k_conv_kh_range(w, oh, &kh0, &kh1);
      const int64_t nkh = kh1 - kh0;
      float *yrow = yrows + r * row_floats;
      /* the view's row of the first valid kh (a row whose taps all lie above or below x has
         nkh 0 and never reads it) */
      const float *xrow = v->at + (oh * w->stride_h - w->pad_top + kh0 - v->ih0) * v->rstride;
      int64_t ow = 0;
      for (int64_t t = 0; t < n_tiles; t++) {
        int64_t nw = base + (t < extra);
        switch (nw) {
        case 6: direct_cols(j, xrow, v->rstride, nkh, kh0, ow, 6, c0, yrow); break;
        case 5: direct_cols(j, xrow, v->rstride, nkh, kh0, ow, 5, c0, yrow); break;
        case 4: direct_cols(j, xrow, v->rstride, nkh, kh0, ow, 4, c0, yrow); break;
        case 3: direct_cols(j, xrow, v->rstride, nkh, kh0, ow, 3, c0, yrow); break;
        case 2: direct_cols(j, xrow, v->rstride, nkh, kh0, ow, 2, c0, yrow); break;
        default: direct_cols(j, xrow, v->rstride, nkh, kh0, ow, 1, c0, yrow); break;
        }
        ow += nw;
      }
    }
  if (j->ep && !j->ep_inline) npuK_conv_epilogue_f32(j->ep, nr * ow_n, j->oc, yrows);
}

/* k_max_rows with 8 lanes: the same comparisons in the same order, so its bits. */
static void direct_max_rows_avx2(float *dst, const float *const *src, int n, int64_t c) {
  int64_t i = 0;
  for (; i + 8 <= c; i += 8) {
    __m256 m = _mm256_set1_ps(-__builtin_inff());
    for (int k = 0; k < n; k++) {
      __m256 v = _mm256_loadu_ps(src[k] + i);
      __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m = _mm256_blendv_ps(m, v, take);
    }
    _mm256_storeu_ps(dst + i, m);
  }
  if (i < c) {
    const float *rest[64];
    for (int k = 0; k < n; k++) rest[k] = src[k] + i;
    k_max_rows(dst + i, rest, n, c - i);
  }
}

/* The commonest window, 2x2 inside the rows: without NaNs, max_pool's rule (v > m || v is NaN
   ? v : m from -inf) is vmaxps(v, m) (which returns m when they compare equal or unordered),
   so four loads and three maxes per vector; a vector holding a NaN takes the rule itself. */
static void direct_max4_avx2(float *dst, const float *const *src, int n, int64_t c) {
  (void)n;
  int64_t i = 0;
  for (; i + 8 <= c; i += 8) {
    __m256 a = _mm256_loadu_ps(src[0] + i), b = _mm256_loadu_ps(src[1] + i);
    __m256 d = _mm256_loadu_ps(src[2] + i), e = _mm256_loadu_ps(src[3] + i);
    __m256 nan = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(d, e, _CMP_UNORD_Q));
    if (_mm256_movemask_ps(nan)) {
      const float *part[4] = {src[0] + i, src[1] + i, src[2] + i, src[3] + i};
      direct_max_rows_avx2(dst + i, part, 4, 8);
      continue;
    }
    __m256 m = _mm256_max_ps(b, a);
    m = _mm256_max_ps(d, m);
    _mm256_storeu_ps(dst + i, _mm256_max_ps(e, m));
  }
  if (i < c) {
    const float *rest[4] = {src[0] + i, src[1] + i, src[2] + i, src[3] + i};
    k_max_rows(dst + i, rest, 4, c - i);
  }
}

#pragma GCC pop_options

/* ---- AVX-512 register tiles: the same chains, 32 registers --------------------------------
   Where the CPU has AVX-512F: up to DIRECT_NW512 pixels x 32 channels (two zmm) in 24
   accumulators, so each tap's two filter loads and one broadcast per pixel feed twice the
   multiply-adds of the AVX2 tile, and the loop's own instructions matter less; the same fused
   multiply-adds in the same order, so the same bits.  8 channels left over go in a masked zmm. */
#define DIRECT_NW512 12

#pragma GCC push_options
#pragma GCC target("avx512f,fma")

static inline __attribute__((always_inline)) void
direct_tile512(const direct_job *j, const float *xr, int64_t xstep, int64_t nkh, int64_t kh0,
               const int nw, const int nv, __mmask16 last, int64_t c0, float *yo,
               uint16_t *ho) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->oc, c = w->c, px = w->stride_w * c, len = w->k_w * c;
  const int64_t fstep = len * oc;
  __m512 acc[DIRECT_NW512][2];
#pragma GCC unroll 12
  for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) acc[o][v] = _mm512_setzero_ps();
  const float *fr = j->f + kh0 * fstep + c0;
  for (int64_t kh = 0; kh < nkh; kh++, xr += xstep, fr += fstep) {
    const float *xp = xr, *fp = fr;
    for (int64_t t = 0; t < len; t++, xp++, fp += oc) {
      __m512 f0, f1 = _mm512_setzero_ps();
      if (nv > 1) {
        f0 = _mm512_loadu_ps(fp);
        f1 = _mm512_maskz_loadu_ps(last, fp + 16);
      } else {
        f0 = _mm512_maskz_loadu_ps(last, fp);
      }
#pragma GCC unroll 12
      for (int o = 0; o < nw; o++) {
        __m512 xb = _mm512_set1_ps(xp[o * px]);
        acc[o][0] = _mm512_fmadd_ps(xb, f0, acc[o][0]);
        if (nv > 1) acc[o][1] = _mm512_fmadd_ps(xb, f1, acc[o][1]);
      }
    }
  }
  if (j->ep_inline)
    k_tile_bias_relu_512(acc, nw, nv, last, j->ep->bias + c0, j->ep->act == NPUK_ACT_RELU);
  if (ho) { /* tile_narrow: out_c is a multiple of 8, so a last mask is 0xffff or 0xff */
#pragma GCC unroll 12
    for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
      for (int v = 0; v < nv; v++) {
        __m256i h = _mm512_cvtps_ph(acc[o][v], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        uint16_t *d = ho + o * oc + c0 + 16 * v;
        if (v + 1 < nv || last == 0xffff) _mm256_storeu_si256((__m256i *)d, h);
        else _mm_storeu_si128((__m128i *)d, _mm256_castsi256_si128(h));
      }
    return;
  }
#pragma GCC unroll 12
  for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) {
      if (v + 1 < nv) _mm512_storeu_ps(yo + o * oc + c0 + 16 * v, acc[o][v]);
      else _mm512_mask_storeu_ps(yo + o * oc + c0 + 16 * v, last, acc[o][v]);
    }
}

/* Columns [ow, ow + nw) of the row, channels from c0: 32 (nv 2) or the last 8 to 24. */
static inline __attribute__((always_inline)) void
direct_cols512(const direct_job *j, const float *xrow, int64_t xstep, int64_t nkh, int64_t kh0,
               int64_t ow, const int nw, int64_t c0, float *yrow, uint16_t *hrow) {
  const float *xr = xrow + ow * j->w->stride_w * j->w->c;
  float *yo = hrow ? NULL : yrow + ow * j->oc;
  uint16_t *ho = hrow ? hrow + ow * j->oc : NULL;
  const int64_t left = j->oc - c0;
#define DIRECT_TILE(nv, last) direct_tile512(j, xr, xstep, nkh, kh0, nw, nv, last, c0, yo, ho)
  K_CHANNEL_TILES(left, DIRECT_TILE);
#undef DIRECT_TILE
}

static void direct_rows_avx512(const direct_job *j, const direct_view *v, int64_t oh0,
                               int64_t nr, float *yrows, uint16_t *hrows) {
  const npuK_window2d *w = j->w;
  const int64_t ow_n = w->out_w, row_floats = ow_n * j->oc;
  int64_t base, extra;
  const int64_t n_tiles = k_even_tiles(ow_n, DIRECT_NW512, &base, &extra);
  for (int64_t c0 = 0; c0 < j->oc; c0 += 32)
    for (int64_t r = 0; r < nr; r++) {
      int64_t oh = oh0 + r, kh0, kh1;
      k_conv_kh_range(w, oh, &kh0, &kh1);
      const int64_t nkh = kh1 - kh0;
      float *yrow = hrows ? NULL : yrows + r * row_floats;
      uint16_t *hrow = hrows ? hrows + r * row_floats : NULL;
      const float *xrow = v->at + (oh * w->stride_h - w->pad_top + kh0 - v->ih0) * v->rstride;
      int64_t ow = 0;
      for (int64_t t = 0; t < n_tiles; t++) {
        int64_t nw = base + (t < extra);
        switch (nw) {
#define DIRECT_CASE(k)                                                                           \
  case k: direct_cols512(j, xrow, v->rstride, nkh, kh0, ow, k, c0, yrow, hrow); break;
          DIRECT_CASE(12) DIRECT_CASE(11) DIRECT_CASE(10) DIRECT_CASE(9) DIRECT_CASE(8)
          DIRECT_CASE(7) DIRECT_CASE(6) DIRECT_CASE(5) DIRECT_CASE(4) DIRECT_CASE(3)
          DIRECT_CASE(2)
#undef DIRECT_CASE
        default: direct_cols512(j, xrow, v->rstride, nkh, kh0, ow, 1, c0, yrow, hrow); break;
        }
        ow += nw;
      }
    }
  if (j->ep && !j->ep_inline) npuK_conv_epilogue_f32(j->ep, nr * ow_n, j->oc, yrows);
}

/* A 2x2 stride-2 max pool whose windows all lie inside the convolution's output, pooled in
   registers: a tile is the two convolution rows 2q, 2q + 1 of pool row q times 2 np columns
   (np pool columns) times 16 nv channels, 8 np nv accumulators (at most 24), sharing each
   tap's filter loads between the two rows.  A row whose window leaves x vertically skips the
   taps there as the row kernel does (kh outside its range: that row's multiply-adds are left
   out), so every output is the same chain; then the epilogue as direct_tile512's and the
   pool in max_pool's order ((0, 0), (0, 1), (1, 0), (1, 1)) with its rule, (v > m || v is NaN)
   ? v : m from -inf: the bits of the rows path. */
#define DIRECT_NP 3

static inline __attribute__((always_inline)) void
pool_taps512(__m512 (*acc)[2][2][2], const float *x0, const float *x1, const float *fp,
             int64_t len, int64_t oc, int64_t px, const int np, const int nv, __mmask16 last,
             const int use0, const int use1) {
  for (int64_t t = 0; t < len; t++, x0++, x1++, fp += oc) {
    __m512 f0, f1 = _mm512_setzero_ps();
    if (nv > 1) {
      f0 = _mm512_loadu_ps(fp);
      f1 = _mm512_maskz_loadu_ps(last, fp + 16);
    } else {
      f0 = _mm512_maskz_loadu_ps(last, fp);
    }
#pragma GCC unroll 3
    for (int p = 0; p < np; p++)
#pragma GCC unroll 2
      for (int cc = 0; cc < 2; cc++) {
        if (use0) {
          __m512 xb = _mm512_set1_ps(x0[(2 * p + cc) * px]);
          acc[p][0][cc][0] = _mm512_fmadd_ps(xb, f0, acc[p][0][cc][0]);
          if (nv > 1) acc[p][0][cc][1] = _mm512_fmadd_ps(xb, f1, acc[p][0][cc][1]);
        }
        if (use1) {
          __m512 xb = _mm512_set1_ps(x1[(2 * p + cc) * px]);
          acc[p][1][cc][0] = _mm512_fmadd_ps(xb, f0, acc[p][1][cc][0]);
          if (nv > 1) acc[p][1][cc][1] = _mm512_fmadd_ps(xb, f1, acc[p][1][cc][1]);
        }
      }
  }
}

static inline __attribute__((always_inline)) void
pool_tile512(const direct_job *j, const direct_view *v, int64_t r0, int64_t pc, const int np,
             const int nv, __mmask16 last, int64_t c0, float *dst, uint16_t *hdst) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->oc, c = w->c, px = w->stride_w * c, len = w->k_w * c,
                fstep = len * oc;
  int64_t a0, b0, a1, b1;
  k_conv_kh_range(w, r0, &a0, &b0);
  k_conv_kh_range(w, r0 + 1, &a1, &b1);
  __m512 acc[DIRECT_NP][2][2][2]; /* [pool column][row][column in the window][vector] */
  k_pool22_zero_512(acc, np, nv);
  const int64_t col = 2 * pc * px; /* the first window column's first tap, in a view row */
  const int64_t ih0 = r0 * w->stride_h - w->pad_top, ih1 = ih0 + w->stride_h;
  const int64_t lo = a0 < a1 ? a0 : a1, hi = b0 > b1 ? b0 : b1;
  for (int64_t kh = lo; kh < hi; kh++) {
    const int use0 = kh >= a0 && kh < b0, use1 = kh >= a1 && kh < b1;
    const float *x0 = v->at + (ih0 + kh - v->ih0) * v->rstride + col;
    const float *x1 = v->at + (ih1 + kh - v->ih0) * v->rstride + col;
    const float *fp = j->f + kh * fstep + c0;
    if (use0 && use1) pool_taps512(acc, x0, x1, fp, len, oc, px, np, nv, last, 1, 1);
    else if (use0) pool_taps512(acc, x0, x1, fp, len, oc, px, np, nv, last, 1, 0);
    else if (use1) pool_taps512(acc, x0, x1, fp, len, oc, px, np, nv, last, 0, 1);
  }
  const int relu = j->ep_inline && j->ep->act == NPUK_ACT_RELU;
#pragma GCC unroll 2
  for (int q = 0; q < nv; q++) {
    __mmask16 k = q + 1 < nv ? 0xffff : last, bad_b;
    __m512 b = k_pool22_bias_512(j->ep_inline, j->ep_inline ? j->ep->bias + c0 + 16 * q : NULL,
                                 k, &bad_b);
#pragma GCC unroll 3
    for (int p = 0; p < np; p++) {
      /* the pool of the four sums, then the bias and relu (kutil.h: NaN lanes by max_pool's
         rule on each value) */
      __m512 m = k_pool22_512(acc[p][0][0][q], acc[p][0][1][q], acc[p][1][0][q],
                              acc[p][1][1][q], b, bad_b, k, j->ep_inline, relu);
      if (hdst) { /* out_c is a multiple of 8: k is 0xffff or 0xff */
        __m256i h = _mm512_cvtps_ph(m, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        uint16_t *d = hdst + (pc + p) * oc + c0 + 16 * q;
        if (k == 0xffff) _mm256_storeu_si256((__m256i *)d, h);
        else _mm_storeu_si128((__m128i *)d, _mm256_castsi256_si128(h));
      } else {
        _mm512_mask_storeu_ps(dst + (pc + p) * oc + c0 + 16 * q, k, m);
      }
    }
  }
}

/* Pool row q into dst (its pool->out_w pixels). */
static void direct_pool22_avx512(const direct_job *j, const direct_view *v, int64_t q,
                                 float *dst, uint16_t *hdst) {
  const npuK_window2d *pw = j->pw;
  const int64_t r0 = q % pw->out_h * 2;
  int64_t base, extra;
  const int64_t n_tiles = k_even_tiles(pw->out_w, DIRECT_NP, &base, &extra);
  for (int64_t c0 = 0; c0 < j->oc; c0 += 32) {
    const int64_t left = j->oc - c0;
    int64_t pc = 0;
    for (int64_t t = 0; t < n_tiles; t++) {
      int64_t np = base + (t < extra);
#define POOL_TILE3(nv, last) pool_tile512(j, v, r0, pc, 3, nv, last, c0, dst, hdst)
#define POOL_TILE2(nv, last) pool_tile512(j, v, r0, pc, 2, nv, last, c0, dst, hdst)
#define POOL_TILE1(nv, last) pool_tile512(j, v, r0, pc, 1, nv, last, c0, dst, hdst)
      if (np == 3) K_CHANNEL_TILES(left, POOL_TILE3);
      else if (np == 2) K_CHANNEL_TILES(left, POOL_TILE2);
      else K_CHANNEL_TILES(left, POOL_TILE1);
#undef POOL_TILE3
#undef POOL_TILE2
#undef POOL_TILE1
      pc += np;
    }
  }
}

#pragma GCC pop_options

static int direct_have_avx512(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

static int direct_have_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
#define DIRECT_AVX2 0
#endif

/* ---- rows, pool rows, slots --------------------------------------------------------------- */

/* Whether images are read through copies (direct_image): padding, or a reduced x, which the
   copy widens (the row kernels read float32 only). */
static int direct_copies(const npuK_window2d *w, npuK_dtype x_dtype) {
  return k_conv_needs_pad(w) || x_dtype != NPUK_F32;
}

/* Input rows a padded copy holds: the whole image, or the most one call reads (rows of up to
   DIRECT_ROWS output rows, or of one pool row).  A reduced x that needs no padding and whose
   calls read disjoint rows (k_h <= stride_h: a pointwise convolution's) is widened by bands
   whatever its size: a whole copy would widen each row once too, but hold up to 256 KiB of
   float32 in the step's scratch (gender's float16 plan was larger than its float32 plan by
   such copies, which float32 does not make) where a band is a few KiB, still in L1 when read. */
static int64_t direct_band_rows(const npuK_window2d *w, const npuK_window2d *pool,
                                npuK_dtype x_dtype) {
  int banded = x_dtype != NPUK_F32 && !pool && !k_conv_needs_pad(w) && w->k_h <= w->stride_h;
  if (!banded && w->in_h * k_conv_pad_w(w) * w->c <= DIRECT_PAD_FLOATS) return w->in_h;
  int64_t r = pool ? pool->k_h : DIRECT_ROWS, n = (r - 1) * w->stride_h + w->k_h;
  return n < w->in_h ? n : w->in_h;
}

static int64_t direct_pad_floats(const npuK_window2d *w, const npuK_window2d *pool,
                                 npuK_dtype x_dtype) {
  /* + the tag of the image a whole copy holds */
  return direct_copies(w, x_dtype)
             ? direct_band_rows(w, pool, x_dtype) * k_conv_pad_w(w) * w->c + 2
             : 0;
}

/* A reduced y's float32 rows per slot: one call's output rows, or one pool row. */
static int64_t direct_yrows_floats(const npuK_window2d *w, int64_t out_c,
                                   const npuK_window2d *pool, npuK_dtype y_dtype) {
  if (y_dtype == NPUK_F32) return 0;
  return (pool ? pool->out_w : DIRECT_ROWS * w->out_w) * out_c;
}

size_t npuK_conv2d_direct_half_scratch_size(const npuK_window2d *w, int64_t out_c,
                                            const npuK_window2d *pool, int n_slots,
                                            npuK_dtype x_dtype, npuK_dtype y_dtype) {
  int64_t per = direct_pad_floats(w, pool, x_dtype) + (pool ? pool->k_h * w->out_w * out_c : 0) +
                direct_yrows_floats(w, out_c, pool, y_dtype);
  return (size_t)(k_conv_slots(w, pool, n_slots) * per) * sizeof(float);
}

size_t npuK_conv2d_direct_scratch_size(const npuK_window2d *w, int64_t out_c,
                                       const npuK_window2d *pool, int n_slots) {
  return npuK_conv2d_direct_half_scratch_size(w, out_c, pool, n_slots, NPUK_F32, NPUK_F32);
}

/* n elements of x from element at into float32 d: copied, or widened from a reduced x (F16C
   where the CPU has it: the bits of widening x in full). */
static void direct_copy_in(const direct_job *j, float *d, int64_t at, int64_t n) {
  if (j->x_dtype == NPUK_F32) memcpy(d, j->x + at, (size_t)n * sizeof *d);
  else npuK_half_widen(j->x_dtype, (const uint16_t *)j->xh + at, d, n);
}

/* The view of image nb for output rows [oh0, oh0 + nr): x itself, or a copy in buf (padded
   and/or widened) — of the whole image (tagged with the image it holds: int64 in two floats,
   the scratch being only float-aligned; kept while the next call reads the same image), or of
   the rows these output rows read.  A whole copy is filled only with the rows that output rows
   [oh0, oh_end) read, oh_end being where the slot's items in this image end (a slot's calls
   go down the image): with several slots each copies (widens) its part, not the whole image.
   So each input row is copied once per image and slot, or once per band where the image is
   too large to copy whole. */
static direct_view direct_image(const direct_job *j, int64_t nb, int64_t oh0, int64_t nr,
                                int64_t oh_end, float *buf) {
  const npuK_window2d *w = j->w;
  const int64_t c = w->c;
  if (!j->padded)
    return (direct_view){j->x + nb * w->in_h * w->in_w * c, w->in_w * c, 0};
  int64_t whole = j->band_rows == w->in_h, last = whole ? oh_end : oh0 + nr;
  int64_t lo = oh0 * w->stride_h - w->pad_top, hi = (last - 1) * w->stride_h - w->pad_top + w->k_h;
  lo = lo < 0 ? 0 : lo;
  hi = hi > w->in_h ? w->in_h : hi;
  direct_view v = {buf + 2, j->pad_w * c, whole ? 0 : lo};
  int64_t tag;
  memcpy(&tag, buf, sizeof tag);
  if (whole && tag == nb) return v;
  const int64_t left = w->pad_left * c, len = w->in_w * c, right = v.rstride - left - len;
  float *at = buf + 2 + (lo - v.ih0) * v.rstride; /* row lo of the copy */
  if (!left && !right && hi > lo) /* unpadded (a reduced x): the rows are contiguous */
    direct_copy_in(j, at, (nb * w->in_h + lo) * len, (hi - lo) * len);
  else
    for (int64_t ih = lo; ih < hi; ih++) {
      float *d = at + (ih - lo) * v.rstride;
      memset(d, 0, (size_t)left * sizeof *d);
      direct_copy_in(j, d + left, (nb * w->in_h + ih) * len, len);
      memset(d + left + len, 0, (size_t)right * sizeof *d);
    }
  if (whole) memcpy(buf, &nb, sizeof nb);
  return v;
}

/* Pool row q (of the n * out_h): its convolution rows [a, b) computed into rows, then pooled
   into dst; q_end: where the slot's pool rows end. */
static void direct_pool_row(const direct_job *j, int64_t q, int64_t q_end, float *padbuf,
                            float *rows, float *dst, uint16_t *hdst) {
  const npuK_window2d *w = j->w, *pw = j->pw;
  const int64_t oc = j->oc, nb = q / pw->out_h;
  int64_t a, b, a_end, b_end, q_last = q_end < (nb + 1) * pw->out_h ? q_end : (nb + 1) * pw->out_h;
  k_conv_pool_rows(w, pw, q % pw->out_h, &a, &b);
  k_conv_pool_rows(w, pw, (q_last - 1) % pw->out_h, &a_end, &b_end);
  direct_view v = direct_image(j, nb, a, b - a, b_end > b ? b_end : b, padbuf);
  if (j->pool22) {
    j->pool22(j, &v, q, dst, hdst);
    return;
  }
  if (b > a) j->rows(j, &v, a, b - a, rows, NULL);
  k_conv_pool_cols(w, pw, a, b, rows, oc, dst, j->max4, j->max_rows);
}

static void direct_range(void *arg, int64_t begin, int64_t end) {
  const direct_job *j = arg;
  const npuK_window2d *w = j->w;
  for (int64_t s = begin; s < end; s++) {
    int64_t i0 = s * j->n_items / j->n_slots, i1 = (s + 1) * j->n_items / j->n_slots;
    float *padbuf = j->scratch ? j->scratch + s * j->slot_floats : NULL;
    float *rows = padbuf ? padbuf + j->pad_floats : NULL;
    /* a reduced y's float32 rows, after the pooled rows */
    float *ybuf = j->yh ? padbuf + j->slot_floats - j->yrows_floats : NULL;
    if (j->padded) {
      int64_t none = -1;
      memcpy(padbuf, &none, sizeof none);
    }
    for (int64_t i = i0; i < i1 && !npuK_stopped(j->pool);) {
      if (j->pw) {
        const int64_t n = j->pw->out_w * j->oc;
        if (j->pool_narrow) {
          direct_pool_row(j, i, i1, padbuf, rows, NULL, (uint16_t *)j->yh + i * n);
        } else {
          direct_pool_row(j, i, i1, padbuf, rows, ybuf ? ybuf : j->y + i * n, NULL);
          if (ybuf) npuK_half_narrow(ybuf, j->y_dtype, (uint16_t *)j->yh + i * n, n);
        }
        i++;
        continue;
      }
      /* up to DIRECT_ROWS rows of one image at a time */
      int64_t nb = i / w->out_h, oh = i % w->out_h, nr = w->out_h - oh;
      if (nr > i1 - i) nr = i1 - i;
      if (nr > DIRECT_ROWS) nr = DIRECT_ROWS;
      int64_t oh_end = i1 - nb * w->out_h < w->out_h ? i1 - nb * w->out_h : w->out_h;
      direct_view v = direct_image(j, nb, oh, nr, oh_end, padbuf);
      const int64_t at = i * w->out_w * j->oc, n = nr * w->out_w * j->oc;
      if (j->tile_narrow) j->rows(j, &v, oh, nr, NULL, (uint16_t *)j->yh + at);
      else {
        j->rows(j, &v, oh, nr, ybuf ? ybuf : j->y + at, NULL);
        if (ybuf) npuK_half_narrow(ybuf, j->y_dtype, (uint16_t *)j->yh + at, n);
      }
      i += nr;
    }
  }
}

static void direct_run(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                       const void *x, npuK_dtype x_dtype, const float *filter,
                       const npuK_epilogue *ep, const npuK_window2d *pool_window, void *y,
                       npuK_dtype y_dtype, float *scratch, int n_slots, int level) {
  direct_job j = {.w = w, .pw = pool_window, .oc = out_c, .f = filter, .ep = ep,
                  .scratch = scratch, .pool = pool, .rows = direct_rows_scalar,
                  .max_rows = direct_max_rows, .max4 = direct_max_rows, .x_dtype = x_dtype,
                  .y_dtype = y_dtype};
  if (x_dtype == NPUK_F32) j.x = x;
  else j.xh = x;
  if (y_dtype == NPUK_F32) j.y = y;
  else j.yh = y;
#if DIRECT_AVX2
  if (level >= 1 && direct_have_avx2()) {
    j.rows = direct_rows_avx2;
    j.max_rows = direct_max_rows_avx2;
    j.max4 = direct_max4_avx2;
    if (level >= 2 && direct_have_avx512()) {
      j.rows = direct_rows_avx512;
      j.max4 = k_max4_512_fn; /* zmm loads of rows the zmm tiles stored */
      if (k_conv_pool22_inside(w, pool_window) && (!ep || k_conv_ep_inline(ep)))
        j.pool22 = direct_pool22_avx512;
    }
  }
#else
  (void)level;
#endif
  j.ep_inline = j.rows != direct_rows_scalar && k_conv_ep_inline(ep);
#if DIRECT_AVX2
  j.tile_narrow = j.rows == direct_rows_avx512 && y_dtype == NPUK_F16 && !pool_window &&
                  (!ep || j.ep_inline);
  j.pool_narrow = j.pool22 != NULL && y_dtype == NPUK_F16;
#endif
  j.n_items = pool_window ? pool_window->n * pool_window->out_h : w->n * w->out_h;
  if (j.n_items <= 0 || out_c <= 0 || w->out_w <= 0) return;
  j.n_slots = k_conv_slots(w, pool_window, n_slots);
  j.padded = direct_copies(w, x_dtype);
  j.pad_w = k_conv_pad_w(w);
  j.band_rows = direct_band_rows(w, pool_window, x_dtype);
  j.pad_floats = direct_pad_floats(w, pool_window, x_dtype);
  j.yrows_floats = direct_yrows_floats(w, out_c, pool_window, y_dtype);
  j.slot_floats = j.pad_floats + (pool_window ? pool_window->k_h * w->out_w * out_c : 0) +
                  j.yrows_floats;
  npuK_parallel_for(pool, j.n_slots, 1, direct_range, &j);
}

void npuK_conv2d_f32_direct_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                               const float *x, const float *filter, const npuK_epilogue *ep,
                               const npuK_window2d *pool_window, float *y, float *scratch,
                               int n_slots) {
  direct_run(pool, w, out_c, x, NPUK_F32, filter, ep, pool_window, y, NPUK_F32, scratch,
             n_slots, 2);
}

void npuK_conv2d_f32_direct_level_ep(const npuK_pool *pool, const npuK_window2d *w,
                                     int64_t out_c, const float *x, const float *filter,
                                     const npuK_epilogue *ep, const npuK_window2d *pool_window,
                                     float *y, float *scratch, int n_slots, int level) {
  direct_run(pool, w, out_c, x, NPUK_F32, filter, ep, pool_window, y, NPUK_F32, scratch,
             n_slots, level);
}

void npuK_conv2d_direct_half_level_ep(const npuK_pool *pool, const npuK_window2d *w,
                                      int64_t out_c, const void *x, npuK_dtype x_dtype,
                                      const float *filter, const npuK_epilogue *ep,
                                      const npuK_window2d *pool_window, void *y,
                                      npuK_dtype y_dtype, float *scratch, int n_slots,
                                      int level) {
  direct_run(pool, w, out_c, x, x_dtype, filter, ep, pool_window, y, y_dtype, scratch, n_slots,
             level);
}

void npuK_conv2d_direct_half_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                                const void *x, npuK_dtype x_dtype, const float *filter,
                                const npuK_epilogue *ep, const npuK_window2d *pool_window,
                                void *y, npuK_dtype y_dtype, float *scratch, int n_slots) {
  direct_run(pool, w, out_c, x, x_dtype, filter, ep, pool_window, y, y_dtype, scratch, n_slots,
             2);
}
