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

typedef struct dw_job {
  const npuK_window2d *w;
  int64_t mult;
  const float *x, *filter;
  float *y;
  const npuK_epilogue *ep; /* fused steps: applied to each output row once it is computed */
} dw_job;

/* One item = one output row (nb, oh). */
static void dw_range(void *arg, int64_t begin, int64_t end) {
  const dw_job *j = arg;
  const npuK_window2d *w = j->w;
  int64_t c = w->c, mult = j->mult, cm = c * mult;
  for (int64_t row = begin; row < end; row++) {
    int64_t nb = row / w->out_h, oh = row % w->out_h;
    for (int64_t ow = 0; ow < w->out_w; ow++) {
      float *o = j->y + (row * w->out_w + ow) * cm;
      for (int64_t i = 0; i < cm; i++) o[i] = 0;
      for (int64_t kh = 0; kh < w->k_h; kh++) {
        int64_t ih = oh * w->stride_h - w->pad_top + kh * w->dilation_h;
        if (ih < 0 || ih >= w->in_h) continue;
        for (int64_t kw = 0; kw < w->k_w; kw++) {
          int64_t iw = ow * w->stride_w - w->pad_left + kw * w->dilation_w;
          if (iw < 0 || iw >= w->in_w) continue;
          const float *xp = j->x + ((nb * w->in_h + ih) * w->in_w + iw) * c;
          const float *fp = j->filter + (kh * w->k_w + kw) * cm;
          if (mult == 1) {
            for (int64_t ci = 0; ci < c; ci++) o[ci] += xp[ci] * fp[ci];
          } else {
            for (int64_t ci = 0; ci < c; ci++) {
              float xv = xp[ci];
              for (int64_t m = 0; m < mult; m++) o[ci * mult + m] += xv * fp[ci * mult + m];
            }
          }
        }
      }
    }
    if (j->ep) npuK_epilogue_f32(j->ep, w->out_w, cm, cm, j->y + row * w->out_w * cm);
  }
}

void npuK_depthwise_conv2d_f32(const npuK_pool *pool, const npuK_window2d *w, int64_t multiplier,
                               const float *x, const float *filter, float *y) {
  npuK_depthwise_conv2d_f32_ep(pool, w, multiplier, x, filter, NULL, y);
}

void npuK_depthwise_conv2d_f32_ep(const npuK_pool *pool, const npuK_window2d *w,
                                  int64_t multiplier, const float *x, const float *filter,
                                  const npuK_epilogue *ep, float *y) {
  dw_job j = {w, multiplier, x, filter, y, ep};
  int64_t per_row = w->out_w * w->c * multiplier * w->k_h * w->k_w;
  npuK_parallel_for(pool, w->n * w->out_h, 1 + K_GRAIN_ELEMS / (per_row > 0 ? per_row : 1),
                    dw_range, &j);
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
