/* conv_bf16.c: conv2d on bfloat16 operands as stored, by VDPBF16PS (AVX512_BF16): the
 * NPUK_CONV_DIRECT_BF16 algorithm of npuK_conv_algo (kernels.h).
 *
 * Why: under the bfloat16 precision modes x is stored bfloat16 and the filter's values are
 * bfloat16 (a Cast put them there), yet the direct kernel (conv_direct.c) widens both to
 * float32 and runs float32 FMAs.  One VDPBF16PS does 32 bfloat16 products into 16 float32
 * lanes, twice the multiply-adds of a float32 FMA per instruction, and reads half the bytes.
 *
 * Layouts: x NHWC stored bfloat16, filter HWIO float32 whose values are bfloat16 (low 16 bits
 * zero; npuK_conv2d_bf16_filter_pack checks), y NHWC float32 or narrowed to its dtype.  For
 * one filter row kh, an output pixel's taps (kw, ci) are len = k_w c consecutive values of x
 * (NHWC, dilation 1), so the taps are taken in PAIRS of that flattened index t: (0, 1),
 * (2, 3), ...; a pair of x is one 32-bit broadcast, and the packed filter holds, per (kh,
 * pair), out_c (rounded up to 16, zeros after) pairs of bfloat16: [k_h][pairs][ocp][2].  An
 * odd len (c = 1 with k_w = 3: the first layer of a CNN) leaves its last pair half empty: its
 * second filter entry is zero and its second x entry is loaded as zero too (not the next
 * pixel's value: an Inf or NaN there would make 0 x Inf = NaN).  Pairing over t rather than
 * over channels keeps c = 1 at 2 taps per instruction.
 *
 * Arithmetic (Intel SDM, VDPBF16PS): per float32 lane, acc += x[t+1] f[t+1], then acc +=
 * x[t] f[t], each product exact (also beyond float32's range: kutil.h's k_dpbf16_step), each
 * sum rounded to nearest even; bfloat16 subnormal inputs
 * are read as zero, subnormal results flushed to zero, MXCSR ignored.  Each output is one
 * float32 sum over its valid taps in (kh, pair) order from +0: |y - exact| <= k 2^-23
 * sum|x f| (k = k_h k_w c) plus, for the flushes, the terms with a subnormal factor and k
 * 2^-126 (docs/numerics.md, "Direct convolution").  The epilogue (bias, activation) and the
 * fused max pool follow as conv_direct.c does them on its rows: the bits of these sums, then
 * npuK_conv_epilogue_f32, then max_pool (valid positions in (kh, kw) order, NaN kept).  Each
 * output depends only on its taps, so neither the split nor the thread count changes a bit.
 *
 * Work as conv_direct.c's (the structure around the tiles is kutil.h's, shared with it: slots,
 * even tile widths, channel blocks, the epilogue in registers, pool rows): items are output
 * rows, up to BF_ROWS per call, or the pool's rows; each slot takes a contiguous run.  Where a window leaves x sideways, the rows a call reads
 * are copied (bfloat16) into the slot's scratch with zero columns around them; rows above or
 * below x are skipped (their taps left out).  Without the CPU's instructions (or with
 * NPU_NO_AVX512BF16=1) the portable twin computes the same sums in C (k_dpbf16_step).
 */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

#define BF_ROWS 4 /* output rows per call */
#define BF_NW 12  /* output pixels per register tile, at most (24 accumulators) */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define BF_NATIVE 1
#else
#define BF_NATIVE 0
#endif

typedef struct bf_view {
  const uint16_t *at; /* row ih0 of the image, column -pad_left (padded) or 0 */
  int64_t rstride, ih0;
} bf_view;

typedef struct bf_job {
  const npuK_window2d *w, *pw;
  int64_t oc, ocp, len, pairs;
  const uint16_t *x, *fp;
  const npuK_epilogue *ep;
  int ep_inline, padded, native;
  int pool22; /* the fused pool is 2x2 stride 2 inside the rows: pooled in registers */
  int64_t pad_w;
  void *y;
  npuK_dtype y_dtype;
  float *scratch;
  int64_t slot_floats, copy_floats, rows_floats, n_items, n_slots;
  const npuK_pool *pool;
} bf_job;

static int64_t bf_ocp(int64_t out_c) { return (out_c + 15) / 16 * 16; }
static int64_t bf_pairs(const npuK_window2d *w) { return (w->k_w * w->c + 1) / 2; }

int npuK_conv2d_bf16_direct_fits(const npuK_window2d *w, int64_t out_c,
                                 const npuK_window2d *pool) {
  return npuK_conv2d_direct_fits(w, out_c, pool);
}

size_t npuK_conv2d_bf16_filter_size(const npuK_window2d *w, int64_t out_c) {
  return (size_t)(w->k_h * bf_pairs(w) * bf_ocp(out_c) * 2) * sizeof(uint16_t);
}

/* The packing of both filter forms: float32 words whose values are bfloat16 (the executor's
   widening of a stored bfloat16 filter, or a constant's values) or the bfloat16 itself
   (stored16: a variable's Cast read as stored).  The packed words are the same for the same
   values: a bfloat16 b widens to the float32 word b << 16.  Returns the low halves of every
   float32 value, OR-ed (0 when all are bfloat16; always 0 for stored16). */
static uint32_t bf_pack(const npuK_window2d *w, int64_t out_c, const void *filter, int stored16,
                        uint16_t *packed) {
  const int64_t len = w->k_w * w->c, pairs = bf_pairs(w), ocp = bf_ocp(out_c);
  uint32_t low = 0; /* the low halves of every value, OR-ed: 0 when all are bfloat16 */
  for (int64_t kh = 0; kh < w->k_h; kh++)
    for (int64_t p = 0; p < pairs; p++) {
      /* one 32-bit word per output channel: tap 2p in its low half, 2p + 1 (or zero) high;
         as words (memcpy: no aliasing), so the loop runs in vector lanes */
      uint16_t *d = packed + (kh * pairs + p) * ocp * 2;
      const int64_t at = (kh * len + 2 * p) * out_c;
      const int has1 = 2 * p + 1 < len;
      if (stored16) {
        const uint16_t *s0 = (const uint16_t *)filter + at, *s1 = has1 ? s0 + out_c : s0;
        for (int64_t o = 0; o < out_c; o++) {
          uint32_t word = (has1 ? (uint32_t)s1[o] << 16 : 0) | s0[o];
          memcpy(d + 2 * o, &word, sizeof word);
        }
      } else {
        const float *s0 = (const float *)filter + at, *s1 = has1 ? s0 + out_c : s0;
        for (int64_t o = 0; o < out_c; o++) {
          uint32_t a, b = 0, word;
          memcpy(&a, s0 + o, sizeof a);
          if (has1) memcpy(&b, s1 + o, sizeof b);
          low |= (a | b) & 0xffffu;
          word = (b & 0xffff0000u) | (a >> 16);
          memcpy(d + 2 * o, &word, sizeof word);
        }
      }
      memset(d + 2 * out_c, 0, (size_t)(ocp - out_c) * 2 * sizeof *d);
    }
  return low;
}

int npuK_conv2d_bf16_filter_pack(const npuK_window2d *w, int64_t out_c, const float *filter,
                                 uint16_t *packed) {
  return bf_pack(w, out_c, filter, 0, packed) ? -1 : 0;
}

/* ---- the portable twin: VDPBF16PS's arithmetic in C --------------------------------------- */

static void bf_row_scalar(const bf_job *j, const bf_view *v, int64_t oh, float *yrow) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->oc, len = j->len, px = w->stride_w * w->c;
  int64_t ih0 = oh * w->stride_h - w->pad_top;
  for (int64_t ow = 0; ow < w->out_w; ow++) {
    float *yo = yrow + ow * oc;
    for (int64_t o = 0; o < oc; o++) {
      float acc = 0;
      for (int64_t kh = 0; kh < w->k_h; kh++) {
        if (ih0 + kh < 0 || ih0 + kh >= w->in_h) continue;
        const uint16_t *xp = v->at + (ih0 + kh - v->ih0) * v->rstride + ow * px;
        const uint16_t *fp = j->fp + kh * j->pairs * j->ocp * 2 + o * 2;
        for (int64_t p = 0; p < j->pairs; p++, fp += j->ocp * 2) {
          float x0 = k_bf16_daz(xp[2 * p]), x1 = 2 * p + 1 < len ? k_bf16_daz(xp[2 * p + 1]) : 0;
          acc = k_dpbf16_step(acc, x1, k_bf16_daz(fp[1]));
          acc = k_dpbf16_step(acc, x0, k_bf16_daz(fp[0]));
        }
      }
      yo[o] = acc;
    }
  }
  if (j->ep) npuK_conv_epilogue_f32(j->ep, w->out_w, oc, yrow);
}

static void bf_rows_scalar(const bf_job *j, const bf_view *v, int64_t oh0, int64_t nr,
                           float *yrows) {
  for (int64_t r = 0; r < nr; r++) bf_row_scalar(j, v, oh0 + r, yrows + r * j->w->out_w * j->oc);
}

/* ---- AVX512_BF16 register tiles ----------------------------------------------------------- */

#if BF_NATIVE
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

static inline __attribute__((always_inline)) __m512i bf_pair(const uint16_t *p) {
  int32_t v;
  memcpy(&v, p, sizeof v); /* unaligned: a pair may start at any element */
  return _mm512_set1_epi32(v);
}

/* Output pixels [ow, ow + nw) of a row times channels [c0, c0 + 16 nv): the taps of filter
   rows [kh0, kh0 + nkh); xr: pixel ow's first tap in row kh0.  nw, nv constants after
   inlining, so acc stays in registers. */
static inline __attribute__((always_inline)) void
bf_tile(const bf_job *j, const uint16_t *xr, int64_t xstep, int64_t nkh, int64_t kh0,
        const int nw, const int nv, __mmask16 last, int64_t c0, float *yo) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->oc, px = w->stride_w * w->c, full = j->len / 2;
  const int64_t pstep = j->ocp * 2, fstep = j->pairs * pstep;
  __m512 acc[BF_NW][2];
#pragma GCC unroll 12
  for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
    for (int q = 0; q < nv; q++) acc[o][q] = _mm512_setzero_ps();
  const uint16_t *fr = j->fp + kh0 * fstep + c0 * 2;
  for (int64_t kh = 0; kh < nkh; kh++, xr += xstep, fr += fstep) {
    const uint16_t *xp = xr, *fp = fr;
    for (int64_t p = 0; p < full; p++, xp += 2, fp += pstep) {
      __m512i f0 = _mm512_loadu_si512(fp), f1 = f0;
      if (nv > 1) f1 = _mm512_loadu_si512(fp + 32);
#pragma GCC unroll 12
      for (int o = 0; o < nw; o++) {
        __m512i xb = bf_pair(xp + o * px);
        acc[o][0] = _mm512_dpbf16_ps(acc[o][0], (__m512bh)xb, (__m512bh)f0);
        if (nv > 1) acc[o][1] = _mm512_dpbf16_ps(acc[o][1], (__m512bh)xb, (__m512bh)f1);
      }
    }
    if (j->len & 1) { /* the half pair: x's second element read as zero */
      __m512i f0 = _mm512_loadu_si512(fp), f1 = f0;
      if (nv > 1) f1 = _mm512_loadu_si512(fp + 32);
#pragma GCC unroll 12
      for (int o = 0; o < nw; o++) {
        __m512i xb = _mm512_set1_epi32((int32_t)xp[o * px]);
        acc[o][0] = _mm512_dpbf16_ps(acc[o][0], (__m512bh)xb, (__m512bh)f0);
        if (nv > 1) acc[o][1] = _mm512_dpbf16_ps(acc[o][1], (__m512bh)xb, (__m512bh)f1);
      }
    }
  }
  if (j->ep_inline)
    k_tile_bias_relu_512(acc, nw, nv, last, j->ep->bias + c0, j->ep->act == NPUK_ACT_RELU);
#pragma GCC unroll 12
  for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
    for (int q = 0; q < nv; q++)
      _mm512_mask_storeu_ps(yo + o * oc + c0 + 16 * q, q + 1 < nv ? 0xffff : last, acc[o][q]);
}

static inline __attribute__((always_inline)) void
bf_cols(const bf_job *j, const uint16_t *xrow, int64_t xstep, int64_t nkh, int64_t kh0,
        int64_t ow, const int nw, int64_t c0, float *yrow) {
  const uint16_t *xr = xrow + ow * j->w->stride_w * j->w->c;
  float *yo = yrow + ow * j->oc;
  const int64_t left = j->oc - c0;
#define BF_TILE(nv, last) bf_tile(j, xr, xstep, nkh, kh0, nw, nv, last, c0, yo)
  K_CHANNEL_TILES(left, BF_TILE);
#undef BF_TILE
}

/* Rows [oh0, oh0 + nr): channel blocks outermost (a block's packed filter stays in L1), each
   row in tiles as even as BF_NW allows. */
static void bf_rows_native(const bf_job *j, const bf_view *v, int64_t oh0, int64_t nr,
                           float *yrows) {
  const npuK_window2d *w = j->w;
  const int64_t ow_n = w->out_w, row_floats = ow_n * j->oc;
  int64_t base, extra;
  const int64_t n_tiles = k_even_tiles(ow_n, BF_NW, &base, &extra);
  for (int64_t c0 = 0; c0 < j->oc; c0 += 32)
    for (int64_t r = 0; r < nr; r++) {
      int64_t oh = oh0 + r, kh0, kh1;
      k_conv_kh_range(w, oh, &kh0, &kh1);
      const int64_t nkh = kh1 - kh0;
      float *yrow = yrows + r * row_floats;
      const uint16_t *xrow = v->at + (oh * w->stride_h - w->pad_top + kh0 - v->ih0) * v->rstride;
      int64_t ow = 0;
      for (int64_t t = 0; t < n_tiles; t++) {
        int64_t nw = base + (t < extra);
        switch (nw) {
#define BF_CASE(k) \
  case k: bf_cols(j, xrow, v->rstride, nkh, kh0, ow, k, c0, yrow); break;
          BF_CASE(12) BF_CASE(11) BF_CASE(10) BF_CASE(9) BF_CASE(8) BF_CASE(7) BF_CASE(6)
          BF_CASE(5) BF_CASE(4) BF_CASE(3) BF_CASE(2)
#undef BF_CASE
        default: bf_cols(j, xrow, v->rstride, nkh, kh0, ow, 1, c0, yrow); break;
        }
        ow += nw;
      }
    }
  if (j->ep && !j->ep_inline) npuK_conv_epilogue_f32(j->ep, nr * ow_n, j->oc, yrows);
}

/* A 2x2 stride-2 max pool whose windows all lie inside the convolution's output, pooled in
   registers (conv_direct.c's pool_tile512 on pairs of taps): a tile is the two convolution
   rows 2q, 2q + 1 of pool row q times 2 np columns times 16 nv channels, 8 np nv
   accumulators, sharing each pair's filter loads between the rows; a row whose window leaves
   x vertically leaves out the taps there, as the row kernel does, so every sum is the row
   kernel's.  Then as pool_tile512: without a NaN among the sums nor an infinite or NaN bias,
   the four sums pooled first and the bias and relu applied once (rounding and relu are
   monotone and vmaxps keeps the first of equals: the value and zero's sign of relu(s + b)
   pooled); lanes where a NaN can appear take max_pool's rule on each relu(s + b). */
#define BF_NP 3

static inline __attribute__((always_inline)) void
bf_pool_taps(__m512 (*acc)[2][2][2], const uint16_t *x0, const uint16_t *x1, const uint16_t *fp,
             const bf_job *j, int64_t px, const int np, const int nv, const int use0,
             const int use1) {
  const int64_t full = j->len / 2, pstep = j->ocp * 2;
  for (int64_t t = 0; t <= full; t++, x0 += 2, x1 += 2, fp += pstep) {
    const int half = t == full; /* the half pair of an odd len, or past the end */
    if (half && !(j->len & 1)) break;
    __m512i f0 = _mm512_loadu_si512(fp), f1 = f0;
    if (nv > 1) f1 = _mm512_loadu_si512(fp + 32);
#pragma GCC unroll 3
    for (int p = 0; p < np; p++)
#pragma GCC unroll 2
      for (int cc = 0; cc < 2; cc++) {
        if (use0) {
          const uint16_t *a = x0 + (2 * p + cc) * px;
          __m512i xb = half ? _mm512_set1_epi32((int32_t)a[0]) : bf_pair(a);
          acc[p][0][cc][0] = _mm512_dpbf16_ps(acc[p][0][cc][0], (__m512bh)xb, (__m512bh)f0);
          if (nv > 1)
            acc[p][0][cc][1] = _mm512_dpbf16_ps(acc[p][0][cc][1], (__m512bh)xb, (__m512bh)f1);
        }
        if (use1) {
          const uint16_t *a = x1 + (2 * p + cc) * px;
          __m512i xb = half ? _mm512_set1_epi32((int32_t)a[0]) : bf_pair(a);
          acc[p][1][cc][0] = _mm512_dpbf16_ps(acc[p][1][cc][0], (__m512bh)xb, (__m512bh)f0);
          if (nv > 1)
            acc[p][1][cc][1] = _mm512_dpbf16_ps(acc[p][1][cc][1], (__m512bh)xb, (__m512bh)f1);
        }
      }
  }
}

static inline __attribute__((always_inline)) void
bf_pool_tile(const bf_job *j, const bf_view *v, int64_t r0, int64_t pc, const int np,
             const int nv, __mmask16 last, int64_t c0, float *dst) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->oc, px = w->stride_w * w->c, fstep = j->pairs * j->ocp * 2;
  int64_t a0, b0, a1, b1;
  k_conv_kh_range(w, r0, &a0, &b0);
  k_conv_kh_range(w, r0 + 1, &a1, &b1);
  __m512 acc[BF_NP][2][2][2]; /* [pool column][row][column in the window][vector] */
  k_pool22_zero_512(acc, np, nv);
  const int64_t col = 2 * pc * px;
  const int64_t ih0 = r0 * w->stride_h - w->pad_top, ih1 = ih0 + w->stride_h;
  const int64_t lo = a0 < a1 ? a0 : a1, hi = b0 > b1 ? b0 : b1;
  for (int64_t kh = lo; kh < hi; kh++) {
    const int use0 = kh >= a0 && kh < b0, use1 = kh >= a1 && kh < b1;
    const uint16_t *x0 = v->at + (ih0 + kh - v->ih0) * v->rstride + col;
    const uint16_t *x1 = v->at + (ih1 + kh - v->ih0) * v->rstride + col;
    const uint16_t *fp = j->fp + kh * fstep + c0 * 2;
    if (use0 && use1) bf_pool_taps(acc, x0, x1, fp, j, px, np, nv, 1, 1);
    else if (use0) bf_pool_taps(acc, x0, x1, fp, j, px, np, nv, 1, 0);
    else if (use1) bf_pool_taps(acc, x0, x1, fp, j, px, np, nv, 0, 1);
  }
  const int relu = j->ep_inline && j->ep->act == NPUK_ACT_RELU;
#pragma GCC unroll 2
  for (int q = 0; q < nv; q++) {
    __mmask16 k = q + 1 < nv ? 0xffff : last, bad_b;
    __m512 b = k_pool22_bias_512(j->ep_inline, j->ep_inline ? j->ep->bias + c0 + 16 * q : NULL,
                                 k, &bad_b);
#pragma GCC unroll 3
    for (int p = 0; p < np; p++) {
      __m512 m = k_pool22_512(acc[p][0][0][q], acc[p][0][1][q], acc[p][1][0][q],
                              acc[p][1][1][q], b, bad_b, k, j->ep_inline, relu);
      _mm512_mask_storeu_ps(dst + (pc + p) * oc + c0 + 16 * q, k, m);
    }
  }
}

/* Pool row q (pool->out_w pixels) into dst from the view of its two convolution rows. */
static void bf_pool22(const bf_job *j, const bf_view *v, int64_t q, float *dst) {
  const int64_t r0 = q % j->pw->out_h * 2;
  int64_t base, extra;
  const int64_t n_tiles = k_even_tiles(j->pw->out_w, BF_NP, &base, &extra);
  for (int64_t c0 = 0; c0 < j->oc; c0 += 32) {
    const int64_t left = j->oc - c0;
    int64_t pc = 0;
    for (int64_t t = 0; t < n_tiles; t++) {
      int64_t np = base + (t < extra);
#define BF_POOL3(nv, last) bf_pool_tile(j, v, r0, pc, 3, nv, last, c0, dst)
#define BF_POOL2(nv, last) bf_pool_tile(j, v, r0, pc, 2, nv, last, c0, dst)
#define BF_POOL1(nv, last) bf_pool_tile(j, v, r0, pc, 1, nv, last, c0, dst)
      if (np == 3) K_CHANNEL_TILES(left, BF_POOL3);
      else if (np == 2) K_CHANNEL_TILES(left, BF_POOL2);
      else K_CHANNEL_TILES(left, BF_POOL1);
#undef BF_POOL3
#undef BF_POOL2
#undef BF_POOL1
      pc += np;
    }
  }
}

#pragma GCC pop_options
#endif

/* ---- views, pool rows, slots -------------------------------------------------------------- */

/* Floats of a slot's padded copy: the input rows one call reads (BF_ROWS output rows, or one
   pool row's convolution rows), bfloat16, two to a float. */
static int64_t bf_copy_floats(const npuK_window2d *w, const npuK_window2d *pool) {
  if (!k_conv_needs_pad(w)) return 0;
  int64_t r = pool ? pool->k_h : BF_ROWS, n = (r - 1) * w->stride_h + w->k_h;
  if (n > w->in_h) n = w->in_h;
  return (n * k_conv_pad_w(w) * w->c + 1) / 2;
}

/* Floats of a slot's float32 rows: a pool row's convolution rows, then (a reduced y) the
   rows narrowed from: one call's output rows, or one pool row. */
static int64_t bf_rows_floats(const npuK_window2d *w, int64_t out_c, const npuK_window2d *pool,
                              npuK_dtype y_dtype) {
  int64_t n = pool ? pool->k_h * w->out_w * out_c : 0;
  if (y_dtype != NPUK_F32) n += (pool ? pool->out_w : BF_ROWS * w->out_w) * out_c;
  return n;
}

size_t npuK_conv2d_bf16_direct_packed_scratch_size(const npuK_window2d *w, int64_t out_c,
                                                   const npuK_window2d *pool, int n_slots,
                                                   npuK_dtype y_dtype) {
  int64_t per = bf_copy_floats(w, pool) + bf_rows_floats(w, out_c, pool, y_dtype);
  return (size_t)(k_conv_slots(w, pool, n_slots) * per) * sizeof(float);
}

/* The view of image nb for output rows [oh0, oh0 + nr): x itself, or the rows they read
   copied into buf with zero columns around them. */
static bf_view bf_image(const bf_job *j, int64_t nb, int64_t oh0, int64_t nr, uint16_t *buf) {
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, len = w->in_w * c;
  const uint16_t *img = j->x + nb * w->in_h * len;
  if (!j->padded) return (bf_view){img, len, 0};
  int64_t lo = oh0 * w->stride_h - w->pad_top, hi = (oh0 + nr - 1) * w->stride_h - w->pad_top + w->k_h;
  lo = lo < 0 ? 0 : lo;
  hi = hi > w->in_h ? w->in_h : hi;
  bf_view v = {buf, j->pad_w * c, lo};
  const int64_t left = w->pad_left * c, right = v.rstride - left - len;
  for (int64_t ih = lo; ih < hi; ih++) {
    uint16_t *d = buf + (ih - lo) * v.rstride;
    memset(d, 0, (size_t)left * sizeof *d);
    memcpy(d + left, img + ih * len, (size_t)len * sizeof *d);
    memset(d + left + len, 0, (size_t)right * sizeof *d);
  }
  return v;
}

static void bf_rows(const bf_job *j, const bf_view *v, int64_t oh0, int64_t nr, float *yrows) {
#if BF_NATIVE
  if (j->native) {
    bf_rows_native(j, v, oh0, nr, yrows);
    return;
  }
#endif
  bf_rows_scalar(j, v, oh0, nr, yrows);
}

/* Pool row q (of the n * pool out_h): its convolution rows computed (epilogue included) into
   rows, then pooled into dst as max_pool visits its windows. */
static void bf_pool_row(const bf_job *j, int64_t q, uint16_t *copy, float *rows, float *dst) {
  const npuK_window2d *w = j->w, *pw = j->pw;
  const int64_t nb = q / pw->out_h;
  int64_t a, b;
  k_conv_pool_rows(w, pw, q % pw->out_h, &a, &b);
  if (b > a) {
    bf_view v = bf_image(j, nb, a, b - a, copy);
#if BF_NATIVE
    if (j->pool22) {
      bf_pool22(j, &v, q, dst);
      return;
    }
#endif
    bf_rows(j, &v, a, b - a, rows);
  }
  k_max_fn max4 = k_max_rows;
#if BF_NATIVE
  if (j->native) max4 = k_max4_512_fn;
#endif
  k_conv_pool_cols(w, pw, a, b, rows, j->oc, dst, max4, k_max_rows);
}

static void bf_range(void *arg, int64_t begin, int64_t end) {
  const bf_job *j = arg;
  const npuK_window2d *w = j->w;
  for (int64_t s = begin; s < end; s++) {
    int64_t i0 = s * j->n_items / j->n_slots, i1 = (s + 1) * j->n_items / j->n_slots;
    float *slot = j->scratch ? j->scratch + s * j->slot_floats : NULL;
    uint16_t *copy = (uint16_t *)slot;
    float *rows = slot ? slot + j->copy_floats : NULL;
    /* a reduced y's float32 rows, after a pool's convolution rows */
    float *ybuf = j->y_dtype != NPUK_F32
                      ? rows + (j->pw ? j->pw->k_h * w->out_w * j->oc : 0)
                      : NULL;
    for (int64_t i = i0; i < i1 && !npuK_stopped(j->pool);) {
      if (j->pw) {
        const int64_t n = j->pw->out_w * j->oc;
        bf_pool_row(j, i, copy, rows, ybuf ? ybuf : (float *)j->y + i * n);
        if (ybuf) npuK_half_narrow(ybuf, j->y_dtype, (uint16_t *)j->y + i * n, n);
        i++;
        continue;
      }
      int64_t nb = i / w->out_h, oh = i % w->out_h, nr = w->out_h - oh;
      if (nr > i1 - i) nr = i1 - i;
      if (nr > BF_ROWS) nr = BF_ROWS;
      bf_view v = bf_image(j, nb, oh, nr, copy);
      const int64_t at = i * w->out_w * j->oc, n = nr * w->out_w * j->oc;
      bf_rows(j, &v, oh, nr, ybuf ? ybuf : (float *)j->y + at);
      if (ybuf) npuK_half_narrow(ybuf, j->y_dtype, (uint16_t *)j->y + at, n);
      i += nr;
    }
  }
}

static void bf_run(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                   const uint16_t *x, const uint16_t *packed, const npuK_epilogue *ep,
                   const npuK_window2d *pool_window, void *y, npuK_dtype y_dtype,
                   float *scratch, int n_slots, int native) {
  bf_job j = {.w = w, .pw = pool_window, .oc = out_c, .ocp = bf_ocp(out_c),
              .len = w->k_w * w->c, .pairs = bf_pairs(w), .x = x, .fp = packed, .ep = ep,
              .y = y, .y_dtype = y_dtype, .scratch = scratch, .pool = pool};
  j.native = BF_NATIVE && native && npuK_bf16dot();
  j.ep_inline = j.native && k_conv_ep_inline(ep);
  j.pool22 = j.native && k_conv_pool22_inside(w, pool_window) && (!ep || j.ep_inline);
  j.n_items = pool_window ? pool_window->n * pool_window->out_h : w->n * w->out_h;
  if (j.n_items <= 0 || out_c <= 0 || w->out_w <= 0) return;
  j.n_slots = k_conv_slots(w, pool_window, n_slots);
  j.padded = k_conv_needs_pad(w);
  j.pad_w = k_conv_pad_w(w);
  j.copy_floats = bf_copy_floats(w, pool_window);
  j.rows_floats = bf_rows_floats(w, out_c, pool_window, y_dtype);
  j.slot_floats = j.copy_floats + j.rows_floats;
  npuK_parallel_for(pool, j.n_slots, 1, bf_range, &j);
}

void npuK_conv2d_bf16_direct_packed_ep(const npuK_pool *pool, const npuK_window2d *w,
                                       int64_t out_c, const uint16_t *x, const uint16_t *packed,
                                       const npuK_epilogue *ep,
                                       const npuK_window2d *pool_window, void *y,
                                       npuK_dtype y_dtype, float *scratch, int n_slots) {
  bf_run(pool, w, out_c, x, packed, ep, pool_window, y, y_dtype, scratch, n_slots, 1);
}

void npuK_conv2d_bf16_direct_twin_ep(const npuK_pool *pool, const npuK_window2d *w,
                                     int64_t out_c, const uint16_t *x, const uint16_t *packed,
                                     const npuK_epilogue *ep, const npuK_window2d *pool_window,
                                     void *y, npuK_dtype y_dtype, float *scratch, int n_slots) {
  bf_run(pool, w, out_c, x, packed, ep, pool_window, y, y_dtype, scratch, n_slots, 0);
}

/* The per-call form's scratch: the packed filter (rounded to whole floats) first, then the
   packed form's slots, or, for a filter that is not bfloat16 (packing fails), the widening
   kernel's scratch. */
static size_t bf_filter_floats(const npuK_window2d *w, int64_t out_c) {
  return (npuK_conv2d_bf16_filter_size(w, out_c) + 63) / 64 * 16; /* 64-byte steps */
}

size_t npuK_conv2d_bf16_direct_scratch_size(const npuK_window2d *w, int64_t out_c,
                                            const npuK_window2d *pool, int n_slots,
                                            npuK_dtype y_dtype) {
  size_t own = bf_filter_floats(w, out_c) * sizeof(float) +
               npuK_conv2d_bf16_direct_packed_scratch_size(w, out_c, pool, n_slots, y_dtype);
  size_t wide =
      npuK_conv2d_direct_half_scratch_size(w, out_c, pool, n_slots, NPUK_BF16, y_dtype);
  return own > wide ? own : wide;
}

void npuK_conv2d_bf16_direct_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                                const uint16_t *x, const float *filter, const npuK_epilogue *ep,
                                const npuK_window2d *pool_window, void *y, npuK_dtype y_dtype,
                                float *scratch, int n_slots) {
  uint16_t *packed = (uint16_t *)scratch;
  if (!npuK_bf16dot() || npuK_conv2d_bf16_filter_pack(w, out_c, filter, packed)) {
    npuK_conv2d_direct_half_ep(pool, w, out_c, x, NPUK_BF16, filter, ep, pool_window, y,
                               y_dtype, scratch, n_slots);
    return;
  }
  bf_run(pool, w, out_c, x, packed, ep, pool_window, y, y_dtype,
         scratch + bf_filter_floats(w, out_c), n_slots, 1);
}

size_t npuK_conv2d_bf16_direct_stored_scratch_size(const npuK_window2d *w, int64_t out_c,
                                                   const npuK_window2d *pool, int n_slots,
                                                   npuK_dtype y_dtype) {
  return bf_filter_floats(w, out_c) * sizeof(float) +
         npuK_conv2d_bf16_direct_packed_scratch_size(w, out_c, pool, n_slots, y_dtype);
}

void npuK_conv2d_bf16_direct_stored_ep(const npuK_pool *pool, const npuK_window2d *w,
                                       int64_t out_c, const uint16_t *x, const uint16_t *filter,
                                       const npuK_epilogue *ep,
                                       const npuK_window2d *pool_window, void *y,
                                       npuK_dtype y_dtype, float *scratch, int n_slots) {
  /* every value is bfloat16 by its storage: nothing to check, no widening fallback (without
     the CPU's instructions bf_run takes the portable twin, the same sums) */
  uint16_t *packed = (uint16_t *)scratch;
  bf_pack(w, out_c, filter, 1, packed);
  bf_run(pool, w, out_c, x, packed, ep, pool_window, y, y_dtype,
         scratch + bf_filter_floats(w, out_c), n_slots, 1);
}
