/* conv.c: conv2d (im2col + sgemm, and a naive ref), depthwise_conv2d, and TF's SAME/VALID rule.
 *
 * Layouts: x is NHWC (n, in_h, in_w, c); conv2d filter is HWIO (k_h, k_w, c, out_c), viewed by
 * the GEMM as (k_h*k_w*c, out_c); depthwise filter is (k_h, k_w, c, multiplier); outputs are
 * (n, out_h, out_w, channels). An im2col row for output pixel m holds (kh, kw, ci) in that
 * order, zeros at padded positions, so row m of y = row m of col times the filter.
 * Determinism: the GEMM's M (output pixels) is cut into blocks whose size depends only on the
 * shapes; blocks are distributed over scratch slots, so neither the pool nor n_slots changes
 * the arithmetic.
 */
#include <string.h>

#include "kernels/kutil.h"

int npuK_conv_output_dim(int64_t in, int64_t k, int64_t stride, int64_t dilation,
                         int same_padding, int64_t *out, int64_t *pad_before) {
  *out = 0;
  *pad_before = 0;
  if (in < 0 || k < 1 || stride < 1 || dilation < 1) return -1;
  int64_t eff = (k - 1) * dilation + 1, o, pb = 0;
  if (same_padding) {
    o = (in + stride - 1) / stride;
    int64_t total = (o - 1) * stride + eff - in;
    pb = total > 0 ? total / 2 : 0;
  } else {
    o = in >= eff ? (in - eff) / stride + 1 : 0;
  }
  if (o < 1) return -1;
  *out = o;
  *pad_before = pb;
  return 0;
}

/* ---- conv2d ------------------------------------------------------------------------------- */

#define CONV_BLOCK_TARGET_FLOATS (1 << 18) /* ~1 MiB of im2col per block */

static int conv_is_pointwise(const npuK_window2d *w) {
  return w->k_h == 1 && w->k_w == 1 && w->stride_h == 1 && w->stride_w == 1 && w->pad_top == 0 &&
         w->pad_left == 0 && w->out_h == w->in_h && w->out_w == w->in_w;
}

typedef struct conv_plan {
  int64_t m, k, bm, n_blocks, n_slots;
} conv_plan;

static void conv_plan_init(conv_plan *p, const npuK_window2d *w, int n_slots) {
  p->m = w->n * w->out_h * w->out_w;
  p->k = w->k_h * w->k_w * w->c;
  int64_t bm = CONV_BLOCK_TARGET_FLOATS / (p->k > 0 ? p->k : 1);
  if (bm < 32) bm = 32;
  if (bm > 4096) bm = 4096;
  if (bm > p->m) bm = p->m;
  p->bm = bm > 0 ? bm : 1;
  p->n_blocks = (p->m + p->bm - 1) / p->bm;
  p->n_slots = n_slots < 1 ? 1 : n_slots;
  if (p->n_slots > p->n_blocks) p->n_slots = p->n_blocks;
}

size_t npuK_conv2d_f32_scratch_size(const npuK_window2d *w, int64_t out_c, int n_slots) {
  conv_plan p;
  conv_plan_init(&p, w, n_slots);
  if (p.m == 0 || out_c == 0 || p.k == 0 || conv_is_pointwise(w)) return 0;
  return (size_t)(p.n_slots * p.bm * p.k) * sizeof(float);
}

/* col is (rows, k_h*k_w*c): im2col of output pixels [m0, m0 + rows). */
static void im2col(const npuK_window2d *w, const float *x, int64_t m0, int64_t rows, float *col) {
  int64_t c = w->c, kwc = w->k_w * c, k = w->k_h * kwc;
  for (int64_t r = 0; r < rows; r++) {
    int64_t m = m0 + r, ow = m % w->out_w, t = m / w->out_w, oh = t % w->out_h, nb = t / w->out_h;
    float *dst = col + r * k;
    int64_t iw0 = ow * w->stride_w - w->pad_left;
    int64_t iw_last = iw0 + (w->k_w - 1) * w->dilation_w;
    int cols_inside = iw0 >= 0 && iw_last < w->in_w;
    for (int64_t kh = 0; kh < w->k_h; kh++, dst += kwc) {
      int64_t ih = oh * w->stride_h - w->pad_top + kh * w->dilation_h;
      if (ih < 0 || ih >= w->in_h) {
        memset(dst, 0, (size_t)kwc * sizeof *dst);
        continue;
      }
      const float *src = x + ((nb * w->in_h + ih) * w->in_w) * c;
      if (cols_inside && w->dilation_w == 1) {
        memcpy(dst, src + iw0 * c, (size_t)kwc * sizeof *dst);
        continue;
      }
      for (int64_t kw = 0; kw < w->k_w; kw++) {
        int64_t iw = iw0 + kw * w->dilation_w;
        if (iw < 0 || iw >= w->in_w) memset(dst + kw * c, 0, (size_t)c * sizeof *dst);
        else memcpy(dst + kw * c, src + iw * c, (size_t)c * sizeof *dst);
      }
    }
  }
}

typedef struct conv_job {
  const npuK_window2d *w;
  conv_plan p;
  int pointwise;
  int64_t out_c;
  const float *x, *filter;
  float *y, *scratch;
  const npuK_epilogue *ep; /* fused steps: applied to each block as soon as it is computed */
} conv_job;

static void conv_slot_range(void *arg, int64_t begin, int64_t end) {
  const conv_job *j = arg;
  const conv_plan *p = &j->p;
  for (int64_t s = begin; s < end; s++) {
    int64_t b0 = s * p->n_blocks / p->n_slots, b1 = (s + 1) * p->n_blocks / p->n_slots;
    float *col = j->pointwise ? NULL : j->scratch + s * p->bm * p->k;
    for (int64_t b = b0; b < b1; b++) {
      int64_t m0 = b * p->bm, rows = p->m - m0 < p->bm ? p->m - m0 : p->bm;
      const float *a = j->x + m0 * p->k;
      if (!j->pointwise) {
        im2col(j->w, j->x, m0, rows, col);
        a = col;
      }
      npuK_matmul_f32_blas(NULL, 0, 0, rows, j->out_c, p->k, a, j->filter, j->y + m0 * j->out_c);
      if (j->ep) npuK_epilogue_f32(j->ep, rows, j->out_c, j->out_c, j->y + m0 * j->out_c);
    }
  }
}

void npuK_conv2d_f32(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                     const float *x, const float *filter, float *y, float *scratch, int n_slots) {
  npuK_conv2d_f32_ep(pool, w, out_c, x, filter, NULL, y, scratch, n_slots);
}

void npuK_conv2d_f32_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                        const float *x, const float *filter, const npuK_epilogue *ep, float *y,
                        float *scratch, int n_slots) {
  conv_job j;
  conv_plan_init(&j.p, w, n_slots);
  if (j.p.m == 0 || out_c == 0) return;
  if (j.p.k == 0) {
    memset(y, 0, (size_t)(j.p.m * out_c) * sizeof *y);
    if (ep) npuK_epilogue_f32(ep, j.p.m, out_c, out_c, y);
    return;
  }
  j.ep = ep;
  j.w = w;
  j.pointwise = conv_is_pointwise(w);
  j.out_c = out_c;
  j.x = x;
  j.filter = filter;
  j.y = y;
  j.scratch = scratch;
  npuK_parallel_for(pool, j.p.n_slots, 1, conv_slot_range, &j);
}

void npuK_conv2d_f32_ref(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                         const float *x, const float *filter, float *y, float *scratch,
                         int n_slots) {
  (void)pool;
  (void)scratch;
  (void)n_slots;
  for (int64_t nb = 0; nb < w->n; nb++)
    for (int64_t oh = 0; oh < w->out_h; oh++)
      for (int64_t ow = 0; ow < w->out_w; ow++)
        for (int64_t oc = 0; oc < out_c; oc++) {
          float acc = 0;
          for (int64_t kh = 0; kh < w->k_h; kh++) {
            int64_t ih = oh * w->stride_h - w->pad_top + kh * w->dilation_h;
            if (ih < 0 || ih >= w->in_h) continue;
            for (int64_t kw = 0; kw < w->k_w; kw++) {
              int64_t iw = ow * w->stride_w - w->pad_left + kw * w->dilation_w;
              if (iw < 0 || iw >= w->in_w) continue;
              for (int64_t ci = 0; ci < w->c; ci++)
                acc += x[((nb * w->in_h + ih) * w->in_w + iw) * w->c + ci] *
                       filter[((kh * w->k_w + kw) * w->c + ci) * out_c + oc];
            }
          }
          y[((nb * w->out_h + oh) * w->out_w + ow) * out_c + oc] = acc;
        }
}

void npuK_conv2d_f32_ref_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                            const float *x, const float *filter, const npuK_epilogue *ep,
                            float *y, float *scratch, int n_slots) {
  npuK_conv2d_f32_ref(pool, w, out_c, x, filter, y, scratch, n_slots);
  if (ep) npuK_epilogue_f32(ep, w->n * w->out_h * w->out_w, out_c, out_c, y);
}

/* ---- depthwise_conv2d --------------------------------------------------------------------- */

/* The fast kernel keeps a tile of up to DW_TW output columns x DW_TV vectors of DW_VL channels
 * in registers while it walks the taps and stores it once; the naive loop it replaced (still
 * the _ref kernel) re-read and re-wrote every accumulator in memory for each tap. Each output
 * element is still 0 + x*f over the valid taps, kh outer and kw inner, a separate multiply and
 * add (ISO C mode does not contract them, and the AVX2 clone does not enable FMA), so it is
 * bit-identical to _ref whatever the tile, the vector width or the thread split.
 * A row's valid taps in kh are the same for all its columns, so they are found once per row;
 * the columns whose whole window lies inside the input (the interior, found once per call)
 * need no bounds test at all, the few border columns get their kw range per column. */

#define DW_VL 8 /* floats per vector: one AVX register, or two SSE ones */
#define DW_TV 2 /* vectors per channel block */
#define DW_TW 4 /* output columns per tile */
#define DW_MULT_CHUNK 64 /* output channels per accumulator chunk when multiplier > 1 */

typedef float dw_vec __attribute__((vector_size(DW_VL * sizeof(float))));
typedef int32_t dw_ivec __attribute__((vector_size(DW_VL * sizeof(float))));
/* m ? a : b lane by lane, m a comparison's result (all ones or zero) */
#define DW_SEL(m, a, b) ((dw_vec)(((m) & (dw_ivec)(a)) | (~(m) & (dw_ivec)(b))))

typedef struct dw_job {
  const npuK_window2d *w;
  int64_t mult;
  const float *x, *filter;
  float *y;
  const npuK_epilogue *ep; /* fused steps: applied to each output row once it is computed */
  int64_t ow_lo, ow_hi;    /* interior columns [ow_lo, ow_hi): every kw's column is inside */
  int ep_inline;           /* ep applied to each tile in registers, before it is stored */
} dw_job;

/* The epilogues simple enough to apply in registers: bias and activations without libm. They
   compute fused.c's expressions (npuK_epilogue_f32) lane by lane, so the bits do not change;
   sigmoid and tanh (and multiplier > 1) keep the per-row call. */
static int dw_ep_inline(const npuK_epilogue *ep, int64_t mult) {
  static const char simple[NPUK_ACT_COUNT] = {[NPUK_ACT_NONE] = 1, [NPUK_ACT_RELU] = 1,
                                              [NPUK_ACT_RELU6] = 1, [NPUK_ACT_LEAKY_RELU] = 1,
                                              [NPUK_ACT_PRELU] = 1};
  return ep && mult == 1 && ep->act >= 0 && ep->act < NPUK_ACT_COUNT && simple[ep->act];
}

/* The scalar twin of the tile epilogue, for the channels left over by the vectors. */
static inline float dw_ep1(const npuK_epilogue *ep, int64_t ci, float v) {
  if (ep->bias) v = v + ep->bias[ci];
  switch (ep->act) {
  case NPUK_ACT_RELU: return v <= 0 ? 0.0f : v;
  case NPUK_ACT_RELU6: v = v < 0 ? 0.0f : v; return v > 6 ? 6.0f : v;
  case NPUK_ACT_LEAKY_RELU: return v > 0 ? v : ep->alpha * v;
  case NPUK_ACT_PRELU: return v > 0 ? v : ep->slope[ci] * v;
  default: return v;
  }
}

/* One output row's view of the input: the valid kh are [kh0, kh0 + kh_n), xr is the input row
   of kh0 (at column 0), the next valid kh's row starts xstep floats further. */
typedef struct dw_row {
  const float *xr;
  int64_t kh0, kh_n, xstep;
} dw_row;

static void dw_kw_range(const npuK_window2d *w, int64_t ow, int64_t *kw0, int64_t *kw1) {
  int64_t iw0 = ow * w->stride_w - w->pad_left, a = 0, b = w->k_w;
  while (a < b && iw0 + a * w->dilation_w < 0) a++;
  while (b > a && iw0 + (b - 1) * w->dilation_w >= w->in_w) b--;
  *kw0 = a;
  *kw1 = b;
}

/* Output columns [ow, ow + nw) x channels [c0, c0 + nv * DW_VL) of one row (multiplier 1),
   taps kw in [kw0, kw1); yo points at column ow of the output row. nw and nv are constants
   after inlining, so the loops over them unroll and acc lives in registers. */
static inline __attribute__((always_inline)) void
dw_block(const dw_job *j, const dw_row *r, int64_t ow, const int nw, const int nv, int64_t c0,
         int64_t kw0, int64_t kw1, float *restrict yo) {
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, sx = w->stride_w * c, dx = w->dilation_w * c;
  const int64_t xi0 = (ow * w->stride_w - w->pad_left) * c + c0;
  dw_vec acc[DW_TW][DW_TV];
#pragma GCC unroll 4
  for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) acc[o][v] = (dw_vec){0};
  for (int64_t kh = 0; kh < r->kh_n; kh++) {
    const float *restrict xrow = r->xr + kh * r->xstep;
    const float *restrict frow = j->filter + (r->kh0 + kh) * w->k_w * c + c0;
    for (int64_t kw = kw0; kw < kw1; kw++) {
      dw_vec f[DW_TV];
#pragma GCC unroll 2
      for (int v = 0; v < nv; v++) memcpy(&f[v], frow + kw * c + v * DW_VL, sizeof f[v]);
      const float *restrict xp = xrow + xi0 + kw * dx;
#pragma GCC unroll 4
      for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
          dw_vec xv;
          memcpy(&xv, xp + o * sx + v * DW_VL, sizeof xv);
          acc[o][v] += xv * f[v];
        }
    }
  }
  if (j->ep_inline) {
    const npuK_epilogue *ep = j->ep;
    dw_vec p[DW_TV];
    if (ep->bias) {
#pragma GCC unroll 2
      for (int v = 0; v < nv; v++) memcpy(&p[v], ep->bias + c0 + v * DW_VL, sizeof p[v]);
#pragma GCC unroll 4
      for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) acc[o][v] = acc[o][v] + p[v];
    }
    const dw_vec zero = {0}, six = zero + 6, alpha = zero + ep->alpha;
    if (ep->act == NPUK_ACT_PRELU)
#pragma GCC unroll 2
      for (int v = 0; v < nv; v++) memcpy(&p[v], ep->slope + c0 + v * DW_VL, sizeof p[v]);
#pragma GCC unroll 4
    for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
      for (int v = 0; v < nv; v++) {
        dw_vec a = acc[o][v], t;
        switch (ep->act) {
        case NPUK_ACT_RELU: t = DW_SEL(a <= 0, zero, a); break;
        case NPUK_ACT_RELU6: t = DW_SEL(a < 0, zero, a); t = DW_SEL(t > 6, six, t); break;
        case NPUK_ACT_LEAKY_RELU: t = DW_SEL(a > 0, a, alpha * a); break;
        case NPUK_ACT_PRELU: t = DW_SEL(a > 0, a, p[v] * a); break;
        default: t = a; break;
        }
        acc[o][v] = t;
      }
  }
#pragma GCC unroll 4
  for (int o = 0; o < nw; o++)
#pragma GCC unroll 2
    for (int v = 0; v < nv; v++) memcpy(yo + o * c + c0 + v * DW_VL, &acc[o][v], sizeof acc[o][v]);
}

/* The last c % DW_VL channels of columns [ow, ow + nw), one at a time. */
static inline __attribute__((always_inline)) void
dw_block_tail(const dw_job *j, const dw_row *r, int64_t ow, const int nw, int64_t c0,
              int64_t kw0, int64_t kw1, float *restrict yo) {
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, sx = w->stride_w * c, dx = w->dilation_w * c;
  const int64_t xi0 = (ow * w->stride_w - w->pad_left) * c;
  for (int64_t ci = c0; ci < c; ci++) {
    float acc[DW_TW] = {0};
    for (int64_t kh = 0; kh < r->kh_n; kh++) {
      const float *xrow = r->xr + kh * r->xstep + xi0 + ci;
      const float *frow = j->filter + (r->kh0 + kh) * w->k_w * c + ci;
      for (int64_t kw = kw0; kw < kw1; kw++)
        for (int o = 0; o < nw; o++) acc[o] += xrow[kw * dx + o * sx] * frow[kw * c];
    }
    for (int o = 0; o < nw; o++) yo[o * c + ci] = j->ep_inline ? dw_ep1(j->ep, ci, acc[o]) : acc[o];
  }
}

/* All channels of output columns [ow, ow + nw) (multiplier 1). */
static inline __attribute__((always_inline)) void
dw_cols(const dw_job *j, const dw_row *r, int64_t ow, const int nw, int64_t kw0, int64_t kw1,
        float *restrict yo) {
  int64_t c = j->w->c, c0 = 0;
  for (; c0 + DW_TV * DW_VL <= c; c0 += DW_TV * DW_VL) dw_block(j, r, ow, nw, DW_TV, c0, kw0, kw1, yo);
  for (; c0 + DW_VL <= c; c0 += DW_VL) dw_block(j, r, ow, nw, 1, c0, kw0, kw1, yo);
  if (c0 < c) dw_block_tail(j, r, ow, nw, c0, kw0, kw1, yo);
}

/* One output column, multiplier > 1: output channel o reads input channel o / mult. */
static inline __attribute__((always_inline)) void
dw_col_mult(const dw_job *j, const dw_row *r, int64_t ow, float *restrict yo) {
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, mult = j->mult, cm = c * mult;
  int64_t kw0, kw1;
  dw_kw_range(w, ow, &kw0, &kw1);
  for (int64_t o0 = 0; o0 < cm; o0 += DW_MULT_CHUNK) {
    int64_t n = cm - o0 < DW_MULT_CHUNK ? cm - o0 : DW_MULT_CHUNK;
    float acc[DW_MULT_CHUNK] = {0};
    for (int64_t kh = 0; kh < r->kh_n; kh++)
      for (int64_t kw = kw0; kw < kw1; kw++) {
        const float *xp = r->xr + kh * r->xstep + (ow * w->stride_w - w->pad_left +
                                                   kw * w->dilation_w) * c;
        const float *fp = j->filter + ((r->kh0 + kh) * w->k_w + kw) * cm + o0;
        int64_t ci = o0 / mult, m = o0 % mult;
        for (int64_t i = 0; i < n; i++) {
          acc[i] += xp[ci] * fp[i];
          if (++m == mult) m = 0, ci++;
        }
      }
    memcpy(yo + o0, acc, (size_t)n * sizeof *acc);
  }
}

/* One item = one output row (nb, oh). Inlined into a plain and an AVX2 clone below. */
static inline __attribute__((always_inline)) void dw_rows(const dw_job *j, int64_t begin,
                                                          int64_t end) {
  const npuK_window2d *w = j->w;
  const int64_t cm = w->c * j->mult;
  for (int64_t row = begin; row < end; row++) {
    int64_t nb = row / w->out_h, oh = row % w->out_h, ih0 = oh * w->stride_h - w->pad_top;
    int64_t a = 0, b = w->k_h;
    while (a < b && ih0 + a * w->dilation_h < 0) a++;
    while (b > a && ih0 + (b - 1) * w->dilation_h >= w->in_h) b--;
    dw_row r = {j->x, a, b - a, w->dilation_h * w->in_w * w->c};
    if (b > a) r.xr = j->x + (nb * w->in_h + ih0 + a * w->dilation_h) * w->in_w * w->c;
    float *yrow = j->y + row * w->out_w * cm;
    if (j->mult != 1) {
      for (int64_t ow = 0; ow < w->out_w; ow++) dw_col_mult(j, &r, ow, yrow + ow * cm);
    } else {
      int64_t ow = 0, kw0, kw1;
      for (; ow < j->ow_lo; ow++) {
        dw_kw_range(w, ow, &kw0, &kw1);
        dw_cols(j, &r, ow, 1, kw0, kw1, yrow + ow * cm);
      }
      for (; ow + DW_TW <= j->ow_hi; ow += DW_TW) dw_cols(j, &r, ow, DW_TW, 0, w->k_w, yrow + ow * cm);
      for (; ow < j->ow_hi; ow++) dw_cols(j, &r, ow, 1, 0, w->k_w, yrow + ow * cm);
      for (; ow < w->out_w; ow++) {
        dw_kw_range(w, ow, &kw0, &kw1);
        dw_cols(j, &r, ow, 1, kw0, kw1, yrow + ow * cm);
      }
    }
    if (j->ep && !j->ep_inline) npuK_epilogue_f32(j->ep, w->out_w, cm, cm, yrow);
  }
}

static void dw_range(void *arg, int64_t begin, int64_t end) { dw_rows(arg, begin, end); }

#if defined(__x86_64__) && defined(__GNUC__)
#define DW_AVX2 1
/* The same code with 256-bit vectors; AVX2 rather than plain AVX only so that one CPU test
   (the one cast.c makes) picks it. No FMA: that would change the rounding. */
__attribute__((target("avx2"))) static void dw_range_avx2(void *arg, int64_t begin, int64_t end) {
  dw_rows(arg, begin, end);
}

static int dw_have_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}
#else
#define DW_AVX2 0
#endif

void npuK_depthwise_conv2d_f32(const npuK_pool *pool, const npuK_window2d *w, int64_t multiplier,
                               const float *x, const float *filter, float *y) {
  npuK_depthwise_conv2d_f32_ep(pool, w, multiplier, x, filter, NULL, y);
}

static void dw_run(const npuK_pool *pool, const npuK_window2d *w, int64_t multiplier,
                   const float *x, const float *filter, const npuK_epilogue *ep, float *y,
                   int allow_avx2) {
  dw_job j = {w, multiplier, x, filter, y, ep, w->out_w, w->out_w, dw_ep_inline(ep, multiplier)};
  /* the interior is contiguous: both bounds tests are monotone in ow */
  for (int64_t ow = 0; ow < w->out_w; ow++) {
    int64_t iw0 = ow * w->stride_w - w->pad_left;
    if (iw0 >= 0 && iw0 + (w->k_w - 1) * w->dilation_w < w->in_w) {
      if (j.ow_lo == w->out_w) j.ow_lo = ow;
      j.ow_hi = ow + 1;
    }
  }
  void (*range)(void *, int64_t, int64_t) = dw_range;
#if DW_AVX2
  if (allow_avx2 && dw_have_avx2()) range = dw_range_avx2;
#else
  (void)allow_avx2;
#endif
  int64_t per_row = w->out_w * w->c * multiplier * w->k_h * w->k_w;
  npuK_parallel_for(pool, w->n * w->out_h, 1 + K_GRAIN_ELEMS / (per_row > 0 ? per_row : 1),
                    range, &j);
}

void npuK_depthwise_conv2d_f32_ep(const npuK_pool *pool, const npuK_window2d *w,
                                  int64_t multiplier, const float *x, const float *filter,
                                  const npuK_epilogue *ep, float *y) {
  dw_run(pool, w, multiplier, x, filter, ep, y, 1);
}

void npuK_depthwise_conv2d_f32_portable_ep(const npuK_pool *pool, const npuK_window2d *w,
                                           int64_t multiplier, const float *x,
                                           const float *filter, const npuK_epilogue *ep,
                                           float *y) {
  dw_run(pool, w, multiplier, x, filter, ep, y, 0);
}

void npuK_depthwise_conv2d_f32_ref(const npuK_pool *pool, const npuK_window2d *w,
                                   int64_t multiplier, const float *x, const float *filter,
                                   float *y) {
  (void)pool;
  int64_t c = w->c, mult = multiplier;
  for (int64_t nb = 0; nb < w->n; nb++)
    for (int64_t oh = 0; oh < w->out_h; oh++)
      for (int64_t ow = 0; ow < w->out_w; ow++)
        for (int64_t ci = 0; ci < c; ci++)
          for (int64_t m = 0; m < mult; m++) {
            float acc = 0;
            for (int64_t kh = 0; kh < w->k_h; kh++) {
              int64_t ih = oh * w->stride_h - w->pad_top + kh * w->dilation_h;
              if (ih < 0 || ih >= w->in_h) continue;
              for (int64_t kw = 0; kw < w->k_w; kw++) {
                int64_t iw = ow * w->stride_w - w->pad_left + kw * w->dilation_w;
                if (iw < 0 || iw >= w->in_w) continue;
                acc += x[((nb * w->in_h + ih) * w->in_w + iw) * c + ci] *
                       filter[((kh * w->k_w + kw) * c + ci) * mult + m];
              }
            }
            y[((nb * w->out_h + oh) * w->out_w + ow) * c * mult + ci * mult + m] = acc;
          }
}

void npuK_depthwise_conv2d_f32_ref_ep(const npuK_pool *pool, const npuK_window2d *w,
                                      int64_t multiplier, const float *x, const float *filter,
                                      const npuK_epilogue *ep, float *y) {
  npuK_depthwise_conv2d_f32_ref(pool, w, multiplier, x, filter, y);
  if (ep) npuK_epilogue_f32(ep, w->n * w->out_h * w->out_w, w->c * multiplier, w->c * multiplier, y);
}
