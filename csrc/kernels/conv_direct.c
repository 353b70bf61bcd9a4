/* conv_direct.c: conv2d by a register-blocked direct kernel, the NPUK_CONV_DIRECT algorithm of
 * npuK_conv_algo (kernels.h), with its epilogue and an optional fused max pool.
 *
 * Layouts as conv.c: x NHWC, filter HWIO (k_h, k_w, c, out_c), y NHWC.  Dilation 1, any
 * stride and padding, out_c a multiple of 8.  Why: im2col copies every input value k_h * k_w
 * times into a column block before OpenBLAS packs it again; here a tile of up to DIRECT_NW
 * output pixels of one row times 16 output channels lives in 12 AVX2 registers while the taps
 * stream by, read straight from x (for one filter row kh, the taps (kw, ci) of a pixel are
 * k_w * c consecutive floats of x, and the filter's rows for them are consecutive too).
 *
 * Arithmetic: each output is one float32 fused multiply-add chain over its valid taps in
 * (kh, kw, ci) order, starting from +0 — the taps im2col would fill with zeros are skipped
 * (fma(0, f, s) = s for finite f, so that is the same value as the zero taps).  That is the
 * ref kernel's order with single rounding per term, and what OpenBLAS's FMA sgemm kernels do
 * for one element of a K below their block depth; test_kernels holds it to the fmaf chain bit
 * for bit and to the float64 sum within k 2^-24 sum|x f| (docs/numerics.md, "Direct
 * convolution"), and reports whether OpenBLAS's im2col gave the same bits.  The portable
 * twin (no AVX2 + FMA) runs the same chains with fmaf: the same bits.  Each output depends
 * only on its own taps, so neither the thread count nor the split changes anything.
 *
 * Work: items are output rows (image, oh), or with a fused pool the pool's rows (each
 * computes the convolution rows its windows read into its slot's scratch, then pools them in
 * max_pool's order with its NaN rule: the bits of conv2d, the epilogue and max_pool); slots
 * take contiguous runs of items and poll npuK_stopped between items.
 */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

#define DIRECT_NW 6 /* output pixels per register tile */

typedef struct direct_job {
  const npuK_window2d *w, *pw; /* pw: the fused pool, or NULL */
  int64_t oc;
  const float *x, *f;
  const npuK_epilogue *ep;
  int ep_inline;        /* bias (+ relu) applied to the tile in registers */
  float *y, *scratch;
  int64_t slot_floats, n_items, n_slots;
  int64_t ow_lo, ow_hi; /* interior columns: every kw of theirs is inside x */
  const npuK_pool *pool;
  void (*row)(const struct direct_job *, int64_t nb, int64_t oh, float *yrow);
} direct_job;

int npuK_conv2d_direct_fits(const npuK_window2d *w, int64_t out_c, const npuK_window2d *pool) {
  if (w->dilation_h != 1 || w->dilation_w != 1 || out_c < 8 || out_c % 8 || w->c < 1 ||
      w->k_h < 1 || w->k_w < 1)
    return 0;
  return !pool || npuK_conv2d_pool_fits(w, pool);
}

/* Valid kw of output column ow: [*kw0, *kw1). */
static void direct_kw_range(const npuK_window2d *w, int64_t ow, int64_t *kw0, int64_t *kw1) {
  int64_t iw0 = ow * w->stride_w - w->pad_left, a = 0, b = w->k_w;
  if (iw0 < 0) a = -iw0 < b ? -iw0 : b;
  if (iw0 + b > w->in_w) b = w->in_w - iw0 > a ? w->in_w - iw0 : a;
  *kw0 = a;
  *kw1 = b;
}

/* The row's valid kh [*kh0, *kh1). */
static void direct_kh_range(const npuK_window2d *w, int64_t oh, int64_t *kh0, int64_t *kh1) {
  int64_t ih0 = oh * w->stride_h - w->pad_top, a = 0, b = w->k_h;
  if (ih0 < 0) a = -ih0 < b ? -ih0 : b;
  if (ih0 + b > w->in_h) b = w->in_h - ih0 > a ? w->in_h - ih0 : a;
  *kh0 = a;
  *kh1 = b;
}

static int direct_ep_inline(const npuK_epilogue *ep) {
  return ep && ep->bias && (ep->act == NPUK_ACT_NONE || ep->act == NPUK_ACT_RELU);
}

/* ---- the portable twin: the same chains by fmaf ------------------------------------------- */

static void direct_row_scalar(const direct_job *j, int64_t nb, int64_t oh, float *yrow) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->oc, c = w->c;
  int64_t kh0, kh1;
  direct_kh_range(w, oh, &kh0, &kh1);
  for (int64_t ow = 0; ow < w->out_w; ow++) {
    int64_t kw0, kw1;
    direct_kw_range(w, ow, &kw0, &kw1);
    int64_t ih0 = oh * w->stride_h - w->pad_top, iw0 = ow * w->stride_w - w->pad_left;
    float *yo = yrow + ow * oc;
    for (int64_t o = 0; o < oc; o++) yo[o] = 0;
    for (int64_t kh = kh0; kh < kh1; kh++) {
      const float *xp = j->x + ((nb * w->in_h + ih0 + kh) * w->in_w + iw0 + kw0) * c;
      const float *fp = j->f + ((kh * w->k_w + kw0) * c) * oc;
      for (int64_t t = 0; t < (kw1 - kw0) * c; t++)
        for (int64_t o = 0; o < oc; o++) yo[o] = fmaf(xp[t], fp[t * oc + o], yo[o]);
    }
  }
  if (j->ep) npuK_conv_epilogue_f32(j->ep, w->out_w, oc, yrow);
}

/* ---- AVX2 + FMA register tiles ------------------------------------------------------------ */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DIRECT_AVX2 1

#pragma GCC push_options
#pragma GCC target("avx2,fma")

/* Output pixels [ow, ow + nw) (stride_w apart in x) times channels [c0, c0 + 8 nv) of row oh:
   the taps of filter rows [kh0, kh1), columns [kw0, kw1).  nw and nv are constants after
   inlining, so acc stays in registers. */
static inline __attribute__((always_inline)) void
direct_tile(const direct_job *j, const float *xr, int64_t nkh, int64_t kh0, int64_t kw0,
            int64_t kw1, const int nw, const int nv, int64_t c0, float *yo) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->oc, c = w->c, px = w->stride_w * c, len = (kw1 - kw0) * c;
  const int64_t xstep = w->in_w * c, fstep = w->k_w * c * oc;
  __m256 acc[DIRECT_NW][2];
#pragma GCC unroll 6
  for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) acc[o][v] = _mm256_setzero_ps();
  const float *fr = j->f + ((kh0 * w->k_w + kw0) * c) * oc + c0;
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

/* Columns [ow, ow + nw) of the row, all channels. */
static inline __attribute__((always_inline)) void
direct_cols(const direct_job *j, const float *xrow, int64_t nkh, int64_t kh0, int64_t ow,
            const int nw, int64_t kw0, int64_t kw1, float *yrow) {
  const npuK_window2d *w = j->w;
  const float *xr = xrow + ((ow * w->stride_w - w->pad_left) + kw0) * w->c;
  float *yo = yrow + ow * j->oc;
  int64_t c0 = 0;
  for (; c0 + 16 <= j->oc; c0 += 16) direct_tile(j, xr, nkh, kh0, kw0, kw1, nw, 2, c0, yo);
  if (c0 < j->oc) direct_tile(j, xr, nkh, kh0, kw0, kw1, nw, 1, c0, yo);
}

static void direct_row_avx2(const direct_job *j, int64_t nb, int64_t oh, float *yrow) {
  const npuK_window2d *w = j->w;
  int64_t kh0, kh1, kw0, kw1, ow = 0;
  direct_kh_range(w, oh, &kh0, &kh1);
  const int64_t nkh = kh1 - kh0;
  /* x's row of the first valid kh, at column 0 (a row whose taps are all padding has nkh 0
     and never reads it) */
  const float *xrow =
      j->x + (nb * w->in_h + (oh * w->stride_h - w->pad_top + kh0)) * w->in_w * w->c;
  for (; ow < j->ow_lo; ow++) {
    direct_kw_range(w, ow, &kw0, &kw1);
    direct_cols(j, xrow, nkh, kh0, ow, 1, kw0, kw1, yrow);
  }
  for (; ow + DIRECT_NW <= j->ow_hi; ow += DIRECT_NW)
    direct_cols(j, xrow, nkh, kh0, ow, DIRECT_NW, 0, w->k_w, yrow);
  switch (j->ow_hi - ow > 0 ? j->ow_hi - ow : 0) {
  case 5: direct_cols(j, xrow, nkh, kh0, ow, 5, 0, w->k_w, yrow); ow += 5; break;
  case 4: direct_cols(j, xrow, nkh, kh0, ow, 4, 0, w->k_w, yrow); ow += 4; break;
  case 3: direct_cols(j, xrow, nkh, kh0, ow, 3, 0, w->k_w, yrow); ow += 3; break;
  case 2: direct_cols(j, xrow, nkh, kh0, ow, 2, 0, w->k_w, yrow); ow += 2; break;
  case 1: direct_cols(j, xrow, nkh, kh0, ow, 1, 0, w->k_w, yrow); ow += 1; break;
  default: break;
  }
  for (; ow < w->out_w; ow++) {
    direct_kw_range(w, ow, &kw0, &kw1);
    direct_cols(j, xrow, nkh, kh0, ow, 1, kw0, kw1, yrow);
  }
  if (j->ep && !j->ep_inline) npuK_conv_epilogue_f32(j->ep, w->out_w, j->oc, yrow);
}

#pragma GCC pop_options

static int direct_have_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
#define DIRECT_AVX2 0
#endif

/* ---- rows, pool rows, slots --------------------------------------------------------------- */

size_t npuK_conv2d_direct_scratch_size(const npuK_window2d *w, int64_t out_c,
                                       const npuK_window2d *pool, int n_slots) {
  if (!pool) return 0;
  int64_t items = pool->n * pool->out_h, s = n_slots < 1 ? 1 : n_slots;
  if (s > items) s = items;
  return (size_t)(s * pool->k_h * w->out_w * out_c) * sizeof(float);
}

/* Pool row q: its convolution rows [a, b) computed into the slot's rows, then pooled into y. */
static void direct_pool_row(const direct_job *j, int64_t q, float *rows) {
  const npuK_window2d *w = j->w, *pw = j->pw;
  const int64_t oc = j->oc, nb = q / pw->out_h;
  int64_t a = q % pw->out_h * pw->stride_h - pw->pad_top, b = a + pw->k_h;
  if (a < 0) a = 0;
  if (b > w->out_h) b = w->out_h;
  for (int64_t r = a; r < b; r++) j->row(j, nb, r, rows + (r - a) * w->out_w * oc);
  float *dst = j->y + q * pw->out_w * oc;
  for (int64_t pc = 0; pc < pw->out_w; pc++, dst += oc) {
    int64_t c0 = pc * pw->stride_w - pw->pad_left, c1 = c0 + pw->k_w;
    if (c0 < 0) c0 = 0;
    if (c1 > w->out_w) c1 = w->out_w;
    const float *src[64]; /* valid positions in (kh, kw) order, as max_pool visits them */
    int n_src = 0;
    for (int64_t r = a; r < b; r++)
      for (int64_t cc = c0; cc < c1; cc++) src[n_src++] = rows + ((r - a) * w->out_w + cc) * oc;
    k_max_rows(dst, src, n_src, oc);
  }
}

static void direct_range(void *arg, int64_t begin, int64_t end) {
  const direct_job *j = arg;
  const npuK_window2d *w = j->w;
  for (int64_t s = begin; s < end; s++) {
    int64_t i0 = s * j->n_items / j->n_slots, i1 = (s + 1) * j->n_items / j->n_slots;
    float *rows = j->scratch ? j->scratch + s * j->slot_floats : NULL;
    for (int64_t i = i0; i < i1 && !npuK_stopped(j->pool); i++) {
      if (j->pw) direct_pool_row(j, i, rows);
      else j->row(j, i / w->out_h, i % w->out_h, j->y + i * w->out_w * j->oc);
    }
  }
}

static void direct_run(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                       const float *x, const float *filter, const npuK_epilogue *ep,
                       const npuK_window2d *pool_window, float *y, float *scratch, int n_slots,
                       int allow_avx2) {
  direct_job j = {.w = w, .pw = pool_window, .oc = out_c, .x = x, .f = filter, .ep = ep,
                  .y = y, .scratch = scratch, .pool = pool, .row = direct_row_scalar};
#if DIRECT_AVX2
  if (allow_avx2 && direct_have_avx2()) j.row = direct_row_avx2;
#else
  (void)allow_avx2;
#endif
  j.ep_inline = j.row != direct_row_scalar && direct_ep_inline(ep);
  j.n_items = pool_window ? pool_window->n * pool_window->out_h : w->n * w->out_h;
  if (j.n_items <= 0 || out_c <= 0 || w->out_w <= 0) return;
  j.n_slots = n_slots < 1 ? 1 : n_slots;
  if (j.n_slots > j.n_items) j.n_slots = j.n_items;
  j.slot_floats = pool_window ? pool_window->k_h * w->out_w * out_c : 0;
  /* the interior is contiguous: both bounds tests are monotone in ow */
  j.ow_lo = j.ow_hi = w->out_w;
  for (int64_t ow = 0; ow < w->out_w; ow++) {
    int64_t iw0 = ow * w->stride_w - w->pad_left;
    if (iw0 >= 0 && iw0 + w->k_w <= w->in_w) {
      if (j.ow_lo == w->out_w) j.ow_lo = ow;
      j.ow_hi = ow + 1;
    }
  }
  npuK_parallel_for(pool, j.n_slots, 1, direct_range, &j);
}

void npuK_conv2d_f32_direct_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                               const float *x, const float *filter, const npuK_epilogue *ep,
                               const npuK_window2d *pool_window, float *y, float *scratch,
                               int n_slots) {
  direct_run(pool, w, out_c, x, filter, ep, pool_window, y, scratch, n_slots, 1);
}

void npuK_conv2d_f32_direct_portable_ep(const npuK_pool *pool, const npuK_window2d *w,
                                        int64_t out_c, const float *x, const float *filter,
                                        const npuK_epilogue *ep,
                                        const npuK_window2d *pool_window, float *y,
                                        float *scratch, int n_slots) {
  direct_run(pool, w, out_c, x, filter, ep, pool_window, y, scratch, n_slots, 0);
}
