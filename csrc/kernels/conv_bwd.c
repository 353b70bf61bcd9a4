/* conv_bwd.c: conv2d's gradients.  The input gradient as a forward convolution or by sgemm
 * (kmath.h, npuK_conv2d_backprop_input_f32_gemm; the direct loops of window_grad.c,
 * npuK_conv2d_backprop_input_f32 (kgrad.h), are its reference twin), and the filter gradient
 * with register tiles (npuK_conv2d_backprop_filter_f32, bit for bit its twin
 * npuK_conv2d_backprop_filter_f32_ref; see below).
 *
 * Input gradient, stride 1 and dilation 1 (a CNN's 3x3 SAME layers): dx is the forward
 * convolution of dy with the filter turned half a turn and its channels swapped,
 * f'[kh, kw, co, ci] = f[k_h-1-kh, k_w-1-kw, ci, co], padded by k-1-pad before (each input
 * pixel ih reads the dy rows oh = ih + pad_top - kh), written straight into dx: no zeroing,
 * no scatter.  That convolution runs by the direct kernel (conv_direct.c) where it takes it
 * (dx's channels a multiple of 8), else conv.c's im2col + sgemm (blocks fixed by the shape):
 * either way the same bits at any thread count.  The CNN's second layer (32 x 14 x 14, 64 ->
 * 32 channels, one thread, CPU time, AMD EPYC Zen 4, one process interleaved): 3.5 ms by
 * im2col, 2.06 by the direct kernel (its FMA peak, ~112 GFLOP/s), 1.9 by Winograd (the
 * opt-in below); the scatter below took 4.6 ms on the earlier CPU where im2col took 3.8.
 * Each element is a float32 sum of its k_h k_w out_c terms (one FMA chain by the direct
 * kernel), the scatter's bound (kmath.h).
 * Other strides and dilations scatter: per image, output rows are taken in blocks of R (sized
 * so the block's columns stay near 4 MiB): col (R * out_w, k_h * k_w * c) = dy_block
 * (R * out_w, out_c) x filter^T, the filter being (k_h * k_w * c, out_c) row-major (HWIO);
 * then each column entry is added to the input pixel it came from (col2im), parallel over
 * input rows.  Each dx element accumulates in a fixed order (block, kh, ow, kw ascending)
 * whatever the thread count.
 */
#include <string.h>

#include "kernels/kgrad.h"
#include "kernels/kmath.h"
#include "kernels/kutil.h"

#define COL_TARGET_FLOATS ((int64_t)1 << 20)

static int64_t block_rows(const npuK_window2d *w) {
  int64_t per_row = w->out_w * w->k_h * w->k_w * w->c;
  if (per_row <= 0) return 0;
  int64_t r = COL_TARGET_FLOATS / per_row;
  if (r < 1) r = 1;
  return r < w->out_h ? r : w->out_h;
}

/* The forward convolution computing dx (stride 1, dilation 1, padding before of at most
   k - 1), as a window over dy; 0 when the geometry is another. */
static int as_forward(const npuK_window2d *w, int64_t out_c, npuK_window2d *fw) {
  if (w->stride_h != 1 || w->stride_w != 1 || w->dilation_h != 1 || w->dilation_w != 1 ||
      w->pad_top < 0 || w->pad_left < 0 || w->pad_top > w->k_h - 1 || w->pad_left > w->k_w - 1 ||
      w->k_h < 1 || w->k_w < 1 || out_c < 1)
    return 0;
  *fw = (npuK_window2d){.n = w->n, .in_h = w->out_h, .in_w = w->out_w, .c = out_c,
                        .k_h = w->k_h, .k_w = w->k_w, .out_h = w->in_h, .out_w = w->in_w,
                        .stride_h = 1, .stride_w = 1, .dilation_h = 1, .dilation_w = 1,
                        .pad_top = w->k_h - 1 - w->pad_top, .pad_left = w->k_w - 1 - w->pad_left};
  return 1;
}

/* The forward's filter: f turned half a turn, its channels swapped, (k_h, k_w, out_c, c). */
static void turn_filter(const npuK_window2d *w, int64_t out_c, const float *filter,
                        float *turned) {
  for (int64_t kh = 0; kh < w->k_h; kh++)
    for (int64_t kw = 0; kw < w->k_w; kw++) {
      const float *src = filter + ((w->k_h - 1 - kh) * w->k_w + (w->k_w - 1 - kw)) * w->c * out_c;
      float *dst = turned + (kh * w->k_w + kw) * out_c * w->c;
      for (int64_t ci = 0; ci < w->c; ci++)
        for (int64_t co = 0; co < out_c; co++) dst[co * w->c + ci] = src[ci * out_c + co];
    }
}

size_t npuK_conv2d_backprop_input_f32_scratch_size(const npuK_window2d *w, int64_t out_c,
                                                   int n_slots) {
  npuK_window2d fw;
  if (as_forward(w, out_c, &fw)) /* the turned filter, then the convolution's scratch */
    return (size_t)(w->k_h * w->k_w * w->c * out_c) * sizeof(float) +
           (npuK_conv2d_direct_fits(&fw, w->c, NULL)
                ? npuK_conv2d_direct_scratch_size(&fw, w->c, NULL, n_slots)
                : npuK_conv2d_f32_scratch_size(&fw, w->c, n_slots));
  return (size_t)(block_rows(w) * w->out_w * w->k_h * w->k_w * w->c) * sizeof(float);
}

typedef struct col2im_job {
  const npuK_window2d *w;
  int64_t r0, rows; /* the block's output rows */
  const float *col;
  float *dx;        /* this image's */
} col2im_job;

static void col2im_rows(void *arg, int64_t begin, int64_t end) {
  const col2im_job *j = arg;
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, kkc = w->k_h * w->k_w * c;
  for (int64_t ih = begin; ih < end; ih++) {
    float *dxr = j->dx + ih * w->in_w * c;
    for (int64_t kh = 0; kh < w->k_h; kh++) {
      int64_t t = ih + w->pad_top - kh * w->dilation_h; /* = oh * stride_h */
      if (t < 0 || t % w->stride_h) continue;
      int64_t oh = t / w->stride_h;
      if (oh < j->r0 || oh >= j->r0 + j->rows) continue;
      const float *colr = j->col + (oh - j->r0) * w->out_w * kkc + kh * w->k_w * c;
      for (int64_t ow = 0; ow < w->out_w; ow++)
        for (int64_t kw = 0; kw < w->k_w; kw++) {
          int64_t iw = ow * w->stride_w - w->pad_left + kw * w->dilation_w;
          if (iw < 0 || iw >= w->in_w) continue;
          const float *src = colr + ow * kkc + kw * c;
          float *dst = dxr + iw * c;
          for (int64_t ci = 0; ci < c; ci++) dst[ci] += src[ci];
        }
    }
  }
}

void npuK_conv2d_backprop_input_f32_gemm(const npuK_pool *pool, const npuK_window2d *w,
                                         int64_t out_c, const float *dy, const float *filter,
                                         float *dx, float *scratch, int n_slots) {
  const int64_t image = w->in_h * w->in_w * w->c, kkc = w->k_h * w->k_w * w->c;
  if (image == 0 || w->n == 0) return;
  npuK_window2d fw;
  if (w->out_h > 0 && w->out_w > 0 && w->c > 0 && as_forward(w, out_c, &fw)) {
    turn_filter(w, out_c, filter, scratch);
    float *rest = scratch + w->k_h * w->k_w * w->c * out_c;
    if (npuK_conv2d_direct_fits(&fw, w->c, NULL)) /* dx's channels a multiple of 8 */
      npuK_conv2d_f32_direct_ep(pool, &fw, w->c, dy, scratch, NULL, NULL, dx, rest, n_slots);
    else
      npuK_conv2d_f32(pool, &fw, w->c, dy, scratch, dx, rest, n_slots);
    return;
  }
  memset(dx, 0, (size_t)(w->n * image) * sizeof *dx);
  const int64_t r = block_rows(w);
  if (r == 0) return; /* no output pixels or an empty filter: dx is zero */
  for (int64_t b = 0; b < w->n; b++)
    for (int64_t r0 = 0; r0 < w->out_h; r0 += r) {
      int64_t rows = r < w->out_h - r0 ? r : w->out_h - r0;
      const float *dyb = dy + (b * w->out_h + r0) * w->out_w * out_c;
      npuK_matmul_f32_blas(pool, 0, 1, rows * w->out_w, kkc, out_c, dyb, filter, scratch);
      col2im_job j = {.w = w, .r0 = r0, .rows = rows, .col = scratch, .dx = dx + b * image};
      int64_t grain = K_GRAIN_ELEMS / (w->in_w * w->c * w->k_h + 1) + 1;
      npuK_parallel_for(pool, w->in_h, grain, col2im_rows, &j);
    }
}

/* ---- filter gradient ----------------------------------------------------------------------
 * df[kh, kw, ci, co] = the sum over the positions p = (n, oh, ow) whose input pixel (ih, iw)
 * lies inside x of x[n, ih, iw, ci] * dy[p, co] — a GEMM, col^T x dy, whose every element is
 * summed in float32 over blocks of FG_BLOCK valid positions (counted within the (kh, kw)
 * item, in (n, oh, ow) order) and in float64 across blocks.  The twin (window_grad.c) does
 * that with one rank-1 update of the whole (c, out_c) block per position, re-reading and
 * re-writing it in memory each time.  Here a block of positions is gathered once (pointers
 * to its x and dy rows), and tiles of FG_TC input channels x FG_TV vectors of FG_VL output
 * channels stay in registers over the block's positions, then go into the float64
 * accumulators.  Each element is still fma(x, dy, fma(x, dy, ... 0)) in position order, one
 * fused multiply-add per term (one rounding instead of two: the twin does the same with
 * fmaf), so the result is the twin's bit for bit, at any thread count: items are (kh, kw, a
 * range of FG_CI_ITEM input channels), each owning its filter elements.  The tiles need AVX2
 * and FMA (x86-64); elsewhere the twin runs (the same bits). */

#define FG_BLOCK 64    /* positions per float32 partial sum: the twin's */
#define FG_VL 8        /* floats per vector */
#define FG_TV 2        /* vectors per tile row */
#define FG_TC 4        /* input channels per tile */
#define FG_CI_ITEM 16  /* input channels per work item */

#if defined(__x86_64__) && defined(__GNUC__)
#define FG_FMA 1
#include <immintrin.h>

#include "kernels/kacc512.h"
/* everything down to fg_range is compiled for AVX2 + FMA, and only run where the CPU has them */
#pragma GCC push_options
#pragma GCC target("avx2,fma")

typedef float fg_vec __attribute__((vector_size(FG_VL * sizeof(float))));

/* The block's tiles: input channels [c0, c1) x every output channel over its np positions,
   added into acc (out_c per row); AVX2 or AVX-512 (fg_block_avx512), the same bits. */
typedef void (*fg_block_fn)(const float *const *xs, const float *const *dys, int np,
                            int64_t c0, int64_t c1, double *acc, int64_t oc);

typedef struct fg_job {
  const npuK_window2d *w;
  int64_t out_c, n_ci_items;
  const float *x, *dy;
  float *df;
  double *acc;
  fg_block_fn block;
} fg_job;

/* tile rows [ci0, ci0 + nc) x output channels [co0, co0 + nv * FG_VL) over the block's np
   positions, added into acc (out_c per row) */
static inline __attribute__((always_inline)) void
fg_tile(const float *const *xs, const float *const *dys, int np, int64_t ci0, const int nc,
        int64_t co0, const int nv, double *acc, int64_t oc) {
  fg_vec t[FG_TC][FG_TV];
#pragma GCC unroll 4
  for (int r = 0; r < nc; r++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) t[r][v] = (fg_vec){0};
  for (int p = 0; p < np; p++) {
    fg_vec d[FG_TV];
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) memcpy(&d[v], dys[p] + co0 + v * FG_VL, sizeof d[v]);
    const float *xr = xs[p] + ci0;
#pragma GCC unroll 4
    for (int r = 0; r < nc; r++) {
      fg_vec b = (fg_vec){0} + xr[r];
#pragma GCC unroll 2
      for (int v = 0; v < nv; v++) t[r][v] = _mm256_fmadd_ps(b, d[v], t[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < nc; r++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) {
      double *a = acc + (ci0 + r) * oc + co0 + v * FG_VL;
      for (int l = 0; l < FG_VL; l++) a[l] += (double)t[r][v][l];
    }
}

/* rows [ci0, ci0 + nc) (nc <= FG_TC): every output channel */
static inline __attribute__((always_inline)) void
fg_rows(const float *const *xs, const float *const *dys, int np, int64_t ci0, const int nc,
        double *acc, int64_t oc) {
  int64_t co = 0;
  for (; co + FG_TV * FG_VL <= oc; co += FG_TV * FG_VL) fg_tile(xs, dys, np, ci0, nc, co, FG_TV, acc, oc);
  for (; co + FG_VL <= oc; co += FG_VL) fg_tile(xs, dys, np, ci0, nc, co, 1, acc, oc);
  for (; co < oc; co++) /* the last oc % FG_VL channels, one at a time */
    for (int r = 0; r < nc; r++) {
      float t = 0;
      for (int p = 0; p < np; p++) t = __builtin_fmaf(xs[p][ci0 + r], dys[p][co], t);
      acc[(ci0 + r) * oc + co] += (double)t;
    }
}

static void fg_block_avx2(const float *const *xs, const float *const *dys, int np, int64_t c0,
                          int64_t c1, double *acc, int64_t oc) {
  int64_t ci = c0;
  for (; ci + FG_TC <= c1; ci += FG_TC) fg_rows(xs, dys, np, ci, FG_TC, acc, oc);
  for (; ci < c1; ci++) fg_rows(xs, dys, np, ci, 1, acc, oc);
}

static inline __attribute__((always_inline)) void fg_items(const fg_job *j, int64_t begin,
                                                           int64_t end) {
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, oc = j->out_c;
  const float *xs[FG_BLOCK], *dys[FG_BLOCK];
  for (int64_t item = begin; item < end; item++) {
    int64_t khw = item / j->n_ci_items, kh = khw / w->k_w, kw = khw % w->k_w;
    int64_t c0 = item % j->n_ci_items * FG_CI_ITEM, c1 = c0 + FG_CI_ITEM < c ? c0 + FG_CI_ITEM : c;
    double *acc = j->acc + khw * c * oc;
    for (int64_t i = c0 * oc; i < c1 * oc; i++) acc[i] = 0;
    int np = 0;
    for (int64_t n = 0; n < w->n; n++)
      for (int64_t oh = 0; oh < w->out_h; oh++) {
        int64_t ih = oh * w->stride_h - w->pad_top + kh * w->dilation_h;
        if (ih < 0 || ih >= w->in_h) continue;
        const float *xrow = j->x + (n * w->in_h + ih) * w->in_w * c;
        const float *dyrow = j->dy + (n * w->out_h + oh) * w->out_w * oc;
        for (int64_t ow = 0; ow < w->out_w; ow++) {
          int64_t iw = ow * w->stride_w - w->pad_left + kw * w->dilation_w;
          if (iw < 0 || iw >= w->in_w) continue;
          xs[np] = xrow + iw * c;
          dys[np] = dyrow + ow * oc;
          if (++np < FG_BLOCK) continue;
          j->block(xs, dys, np, c0, c1, acc, oc);
          np = 0;
        }
      }
    if (np) j->block(xs, dys, np, c0, c1, acc, oc);
    float *df = j->df + khw * c * oc;
    for (int64_t i = c0 * oc; i < c1 * oc; i++) df[i] = (float)acc[i];
  }
}

static void fg_range(void *arg, int64_t begin, int64_t end) { fg_items(arg, begin, end); }

/* One input channel (a first layer on a grey image): each tap's work is a row of NV vectors
   over the positions, and the tap items above read all of dy once per tap (3.2 MiB nine
   times for the CNN's first layer: out of L2 each time).  Here one image is taken at a time,
   and every tap of the range passes over it while its dy is in cache; a tap's float32 block
   sums and its count of positions in the block wait in memory between images.  Each element
   is still fma(x, dy, ...) from 0 over the tap's blocks of FG_BLOCK valid positions in (n, oh,
   ow) order, then into float64: the bits of fg_items (and so of the twin). */
#define FG1_MAX_TAPS 49
static inline __attribute__((always_inline)) void fg1_taps(const fg_job *j, int64_t begin,
                                                           int64_t end, const int nv) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->out_c;
  float part[FG1_MAX_TAPS][8 * FG_VL];
  int count[FG1_MAX_TAPS];
  for (int64_t tap = begin; tap < end; tap++) {
    count[tap - begin] = 0;
    memset(part[tap - begin], 0, sizeof part[0]);
    for (int64_t i = 0; i < oc; i++) j->acc[tap * oc + i] = 0;
  }
  for (int64_t n = 0; n < w->n; n++)
    for (int64_t tap = begin; tap < end; tap++) {
      const int64_t kh = tap / w->k_w, kw = tap % w->k_w;
      double *acc = j->acc + tap * oc;
      fg_vec t[8];
      for (int v = 0; v < nv; v++) memcpy(&t[v], part[tap - begin] + v * FG_VL, sizeof t[v]);
      int np = count[tap - begin];
      /* the output columns whose input column is inside x */
      int64_t ow0 = 0, ow1 = w->out_w;
      while (ow0 < ow1 && ow0 * w->stride_w - w->pad_left + kw * w->dilation_w < 0) ow0++;
      while (ow1 > ow0 && (ow1 - 1) * w->stride_w - w->pad_left + kw * w->dilation_w >= w->in_w) ow1--;
      for (int64_t oh = 0; oh < w->out_h; oh++) {
        int64_t ih = oh * w->stride_h - w->pad_top + kh * w->dilation_h;
        if (ih < 0 || ih >= w->in_h) continue;
        const float *xrow = j->x + (n * w->in_h + ih) * w->in_w;
        const float *dyrow = j->dy + (n * w->out_h + oh) * w->out_w * oc;
        for (int64_t ow = ow0; ow < ow1; ow++) {
          fg_vec b = (fg_vec){0} + xrow[ow * w->stride_w - w->pad_left + kw * w->dilation_w];
          const float *d = dyrow + ow * oc;
#pragma GCC unroll 8
          for (int v = 0; v < nv; v++) {
            fg_vec dv;
            memcpy(&dv, d + v * FG_VL, sizeof dv);
            t[v] = _mm256_fmadd_ps(b, dv, t[v]);
          }
          if (++np < FG_BLOCK) continue;
#pragma GCC unroll 8
          for (int v = 0; v < nv; v++) {
            for (int l = 0; l < FG_VL; l++) acc[v * FG_VL + l] += (double)t[v][l];
            t[v] = (fg_vec){0};
          }
          np = 0;
        }
      }
      for (int v = 0; v < nv; v++) memcpy(part[tap - begin] + v * FG_VL, &t[v], sizeof t[v]);
      count[tap - begin] = np;
    }
  for (int64_t tap = begin; tap < end; tap++) {
    double *acc = j->acc + tap * oc;
    if (count[tap - begin])
      for (int64_t i = 0; i < oc; i++) acc[i] += (double)part[tap - begin][i];
    for (int64_t i = 0; i < oc; i++) j->df[tap * oc + i] = (float)acc[i];
  }
}

static void fg1_range(void *arg, int64_t begin, int64_t end) {
  const fg_job *j = arg;
  switch (j->out_c / FG_VL) { /* the vectors as constants: the tile stays in registers */
  case 1: fg1_taps(j, begin, end, 1); break;
  case 2: fg1_taps(j, begin, end, 2); break;
  case 3: fg1_taps(j, begin, end, 3); break;
  case 4: fg1_taps(j, begin, end, 4); break;
  case 5: fg1_taps(j, begin, end, 5); break;
  case 6: fg1_taps(j, begin, end, 6); break;
  case 7: fg1_taps(j, begin, end, 7); break;
  default: fg1_taps(j, begin, end, 8); break;
  }
}

#pragma GCC pop_options

/* The block's tiles with AVX-512 where the CPU has it: FG512_TC input channels x two zmm (32
   output channels), 16 accumulators, so each position's two dy loads and pointer loads feed
   16 multiply-adds of 16 lanes (AMD EPYC Zen 4, one thread, CPU time, the CNN's second layer,
   32 x 14 x 14, 32 -> 64 channels, one process interleaved: 3.48 ms by the AVX2 tiles, 2.54
   with 4 input channels a tile, 2.30 with 8); channels past the last whole vector go in a
   masked one (its other lanes not stored).  The same fma chains in the same order, then into
   float64 the same way: the same bits. */
#pragma GCC push_options
#pragma GCC target("avx512f,fma")

#define FG512_TC 8 /* input channels per AVX-512 tile: 16 accumulators */

static inline __attribute__((always_inline)) void
fg512_tile(const float *const *xs, const float *const *dys, int np, int64_t ci0, const int nc,
           int64_t co0, const int nv, __mmask16 last, double *acc, int64_t oc) {
  __m512 t[FG512_TC][2];
#pragma GCC unroll 8
  for (int r = 0; r < nc; r++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) t[r][v] = _mm512_setzero_ps();
  for (int p = 0; p < np; p++) {
    __m512 d0, d1 = _mm512_setzero_ps();
    if (nv > 1) {
      d0 = _mm512_loadu_ps(dys[p] + co0);
      d1 = _mm512_maskz_loadu_ps(last, dys[p] + co0 + 16);
    } else {
      d0 = _mm512_maskz_loadu_ps(last, dys[p] + co0);
    }
    const float *xr = xs[p] + ci0;
#pragma GCC unroll 8
    for (int r = 0; r < nc; r++) {
      __m512 b = _mm512_set1_ps(xr[r]);
      t[r][0] = _mm512_fmadd_ps(b, d0, t[r][0]);
      if (nv > 1) t[r][1] = _mm512_fmadd_ps(b, d1, t[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < nc; r++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) {
      __mmask16 k = v + 1 < nv ? 0xffff : last;
      k_acc_f32x16_f64(acc + (ci0 + r) * oc + co0 + 16 * v, t[r][v], k);
    }
}

static inline __attribute__((always_inline)) void
fg512_rows(const float *const *xs, const float *const *dys, int np, int64_t ci0, const int nc,
           double *acc, int64_t oc) {
  int64_t co = 0;
  for (; co + 32 <= oc; co += 32) fg512_tile(xs, dys, np, ci0, nc, co, 2, 0xffff, acc, oc);
  int64_t left = oc - co;
  if (left > 16)
    fg512_tile(xs, dys, np, ci0, nc, co, 2, (__mmask16)((1u << (left - 16)) - 1), acc, oc);
  else if (left > 0)
    fg512_tile(xs, dys, np, ci0, nc, co, 1,
               left == 16 ? 0xffff : (__mmask16)((1u << left) - 1), acc, oc);
}

static void fg_block_avx512(const float *const *xs, const float *const *dys, int np,
                            int64_t c0, int64_t c1, double *acc, int64_t oc) {
  int64_t ci = c0;
  for (; ci + FG512_TC <= c1; ci += FG512_TC) fg512_rows(xs, dys, np, ci, FG512_TC, acc, oc);
  for (; ci + FG_TC <= c1; ci += FG_TC) fg512_rows(xs, dys, np, ci, FG_TC, acc, oc);
  for (; ci < c1; ci++) fg512_rows(xs, dys, np, ci, 1, acc, oc);
}

#pragma GCC pop_options

static int fg_have_fma(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* The tiles a CPU runs: AVX-512 where it has it, AVX2 else (level 1 forces AVX2: tests). */
static fg_block_fn fg_block_for(int level) {
  __builtin_cpu_init();
  return level >= 2 && __builtin_cpu_supports("avx512f") ? fg_block_avx512 : fg_block_avx2;
}
#else
#define FG_FMA 0
#endif

static void filter_grad(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                        const float *x, const float *dy, float *df, double *scratch, int level) {
#if FG_FMA
  if (scratch && w->c == 1 && out_c % FG_VL == 0 && out_c <= 8 * FG_VL &&
      w->k_h * w->k_w <= FG1_MAX_TAPS && fg_have_fma()) {
    fg_job j = {w, out_c, 1, x, dy, df, scratch, NULL};
    npuK_parallel_for(pool, w->k_h * w->k_w, 1, fg1_range, &j);
    return;
  }
  if (scratch && w->c > 0 && out_c > 0 && fg_have_fma()) {
    fg_job j = {w, out_c, (w->c + FG_CI_ITEM - 1) / FG_CI_ITEM, x, dy, df, scratch,
                fg_block_for(level)};
    npuK_parallel_for(pool, w->k_h * w->k_w * j.n_ci_items, 1, fg_range, &j);
    return;
  }
#endif
  (void)level;
  /* float32 throughout (no scratch), or no AVX2 + FMA: the twin's loops, the same bits */
  npuK_conv2d_backprop_filter_f32_ref(pool, w, out_c, x, dy, df, scratch);
}

void npuK_conv2d_backprop_filter_f32(const npuK_pool *pool, const npuK_window2d *w,
                                     int64_t out_c, const float *x, const float *dy, float *df,
                                     double *scratch) {
  filter_grad(pool, w, out_c, x, dy, df, scratch, 2);
}

void npuK_conv2d_backprop_filter_f32_level(const npuK_pool *pool, const npuK_window2d *w,
                                           int64_t out_c, const float *x, const float *dy,
                                           float *df, double *scratch, int level) {
  filter_grad(pool, w, out_c, x, dy, df, scratch, level);
}

/* ---- the input gradient by Winograd F(2x2, 3x3) (op_select_implmode high_performance) ----
   The same forward convolution of dy with the turned filter, run by winograd.c: its tiles,
   blocks and rounding, so its bound with the forward's c being out_c here, |dx - exact| <=
   gamma(out_c + 7) W (docs/numerics.md, "Winograd"), and the same bits at any thread count. */
int npuK_conv2d_backprop_input_winograd_fits(const npuK_window2d *w, int64_t out_c) {
  npuK_window2d fw;
  return w->n > 0 && w->c > 0 && w->out_h > 0 && w->out_w > 0 && as_forward(w, out_c, &fw) &&
         npuK_conv2d_winograd_fits(&fw, NULL);
}

size_t npuK_conv2d_backprop_input_f32_winograd_scratch_size(const npuK_window2d *w,
                                                            int64_t out_c, int n_slots) {
  npuK_window2d fw;
  if (!npuK_conv2d_backprop_input_winograd_fits(w, out_c) || !as_forward(w, out_c, &fw))
    return 0;
  return (size_t)(w->k_h * w->k_w * w->c * out_c) * sizeof(float) +
         npuK_conv2d_winograd_scratch_size(&fw, w->c, NULL, n_slots);
}

void npuK_conv2d_backprop_input_f32_winograd(const npuK_pool *pool, const npuK_window2d *w,
                                             int64_t out_c, const float *dy, const float *filter,
                                             float *dx, float *scratch, int n_slots) {
  npuK_window2d fw;
  if (!npuK_conv2d_backprop_input_winograd_fits(w, out_c) || !as_forward(w, out_c, &fw)) return;
  turn_filter(w, out_c, filter, scratch);
  npuK_conv2d_f32_winograd_ep(pool, &fw, w->c, dy, scratch, NULL, NULL, dx,
                              scratch + w->k_h * w->k_w * w->c * out_c, n_slots);
}
