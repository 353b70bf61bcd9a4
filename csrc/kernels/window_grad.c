/* window_grad.c: gradients of the sliding-window ops (max_pool, avg_pool, conv2d,
 * depthwise_conv2d), float32, NHWC.  Layouts and the split of work: kgrad.h.
 *
 * Input row ih of output row oh and window row kh: ih = oh * stride_h - pad_top +
 * kh * dilation_h (likewise for columns); rows outside [0, in_h) are padding.  Direct loops,
 * vectorised over the innermost (channel) dimension where the layout allows.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/kgrad.h"
#include "kernels/kutil.h"

typedef struct wg_job {
  const npuK_window2d *w;
  int64_t out_c;  /* conv2d: output channels; depthwise: the multiplier */
  bool depthwise; /* dy rows hold c * multiplier values, channel ci's from ci * multiplier */
  const float *a, *b;
  float *out;
  double *acc;    /* filter gradients: float64 accumulators, one per filter element (or NULL) */
  const float *relu; /* max_pool_grad: relu_grad's features (x's shape), or NULL */
  double *bias;      /* max_pool_grad: dx's column sums per image (n, c), or NULL */
} wg_job;

static inline int64_t in_row(const npuK_window2d *w, int64_t oh, int64_t kh) {
  return oh * w->stride_h - w->pad_top + kh * w->dilation_h;
}
static inline int64_t in_col(const npuK_window2d *w, int64_t ow, int64_t kw) {
  return ow * w->stride_w - w->pad_left + kw * w->dilation_w;
}

/* ---- pools ---- */

/* max_pool_grad, items (n, a block of MPG_CB channels): each owns its dx elements.  Per
   output pixel the valid window (a rectangle) is found once; MPG_VL channels at a time keep
   the running maximum and its position in registers, in the window's row-major order with
   the scalar rule (the first valid tap starts it; a later one wins if greater, or if NaN
   over a number), then each dy goes to its position.  The windows of a channel are visited
   in (oh, ow) order, as (n, channel) items did: the same dx at any thread count.
   Windows that cannot overlap (k <= stride, dilation 1: the 2x2 stride-2 pool of a CNN) own
   their taps, so each tap is stored once, dy + 0 at the winner and 0 elsewhere, a vector at
   a time — the value 0 + dy the scattered add gives, without the memset of dx (skipped when
   the windows tile the input exactly) and the lane-by-lane read-modify-writes.
   With relu features (max_pool_grad then relu_grad, fused: fused_ops.c) dx keeps a value
   only where the feature is > 0, +0 elsewhere: relu_grad's select of bits, so the bits of
   the two ops.  Disjoint windows select as they store; otherwise the item's dx is masked
   once its windows are done, while it is still in cache. */
#define MPG_VL 8
#define MPG_CB 64
typedef float mpg_vec __attribute__((vector_size(MPG_VL * sizeof(float))));
typedef int32_t mpg_ivec __attribute__((vector_size(MPG_VL * sizeof(float))));

static void window_range_1d(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t dil,
                            int64_t in, int64_t *k0, int64_t *k1) {
  int64_t i0 = o * stride - pad, a = 0, b = k;
  while (a < b && i0 + a * dil < 0) a++;
  while (b > a && i0 + (b - 1) * dil >= in) b--;
  *k0 = a;
  *k1 = b;
}

static inline __attribute__((always_inline)) void max_pool_grad_items(const wg_job *j,
                                                                       int64_t begin,
                                                                       int64_t end) {
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, n_cb = (c + MPG_CB - 1) / MPG_CB, pixels = w->in_h * w->in_w;
  /* disjoint: no two windows share a tap; tiled: besides, every pixel is some window's tap */
  const int disjoint = w->k_h <= w->stride_h && w->k_w <= w->stride_w && w->dilation_h == 1 &&
                       w->dilation_w == 1;
  const int tiled = disjoint && w->k_h == w->stride_h && w->k_w == w->stride_w &&
                    w->pad_top == 0 && w->pad_left == 0 && w->out_h * w->stride_h == w->in_h &&
                    w->out_w * w->stride_w == w->in_w;
  for (int64_t item = begin; item < end; item++) {
    int64_t n = item / n_cb, c0 = item % n_cb * MPG_CB, c1 = c0 + MPG_CB < c ? c0 + MPG_CB : c;
    const float *x = j->a + n * pixels * c;
    const float *dy = j->b + n * w->out_h * w->out_w * c;
    const float *relu = j->relu ? j->relu + n * pixels * c : NULL;
    float *dx = j->out + n * pixels * c;
    if (!tiled)
      for (int64_t p = 0; p < pixels; p++) memset(dx + p * c + c0, 0, (size_t)(c1 - c0) * sizeof *dx);
    for (int64_t oh = 0; oh < w->out_h; oh++)
      for (int64_t ow = 0; ow < w->out_w; ow++) {
        int64_t kh0, kh1, kw0, kw1;
        window_range_1d(oh, w->stride_h, w->pad_top, w->k_h, w->dilation_h, w->in_h, &kh0, &kh1);
        window_range_1d(ow, w->stride_w, w->pad_left, w->k_w, w->dilation_w, w->in_w, &kw0, &kw1);
        if (kh0 >= kh1 || kw0 >= kw1) continue;
        const int64_t ih0 = oh * w->stride_h - w->pad_top, iw0 = ow * w->stride_w - w->pad_left;
        const float *dyp = dy + (oh * w->out_w + ow) * c;
        int64_t ci = c0;
        for (; ci + MPG_VL <= c1; ci += MPG_VL) {
          int32_t first = (int32_t)((ih0 + kh0 * w->dilation_h) * w->in_w + iw0 + kw0 * w->dilation_w);
          mpg_vec m;
          memcpy(&m, x + first * c + ci, sizeof m);
          mpg_ivec best = (mpg_ivec){0} + first;
          for (int64_t kh = kh0; kh < kh1; kh++)
            for (int64_t kw = kh == kh0 ? kw0 + 1 : kw0; kw < kw1; kw++) {
              int32_t at = (int32_t)((ih0 + kh * w->dilation_h) * w->in_w + iw0 + kw * w->dilation_w);
              mpg_vec v;
              memcpy(&v, x + at * c + ci, sizeof v);
              mpg_ivec take = (v > m) | ((v != v) & (m == m));
              m = (mpg_vec)((take & (mpg_ivec)v) | (~take & (mpg_ivec)m));
              best = (take & ((mpg_ivec){0} + at)) | (~take & best);
            }
          if (disjoint) {
            mpg_vec g;
            memcpy(&g, dyp + ci, sizeof g);
            g = g + 0.0f; /* 0 + dy, as the add onto the zeroed dx: -0 stores +0 */
            for (int64_t kh = kh0; kh < kh1; kh++)
              for (int64_t kw = kw0; kw < kw1; kw++) {
                int32_t at = (int32_t)((ih0 + kh) * w->in_w + iw0 + kw);
                mpg_ivec hit = best == at;
                if (relu) {
                  mpg_vec f;
                  memcpy(&f, relu + at * c + ci, sizeof f);
                  hit &= f > 0;
                }
                mpg_vec v = (mpg_vec)(hit & (mpg_ivec)g);
                memcpy(dx + at * c + ci, &v, sizeof v);
              }
            continue;
          }
          for (int l = 0; l < MPG_VL; l++) dx[best[l] * c + ci + l] += dyp[ci + l];
        }
        for (; ci < c1; ci++) {
          int64_t best = -1;
          float m = 0;
          for (int64_t kh = kh0; kh < kh1; kh++)
            for (int64_t kw = kw0; kw < kw1; kw++) {
              int64_t at = (ih0 + kh * w->dilation_h) * w->in_w + iw0 + kw * w->dilation_w;
              float v = x[at * c + ci];
              if (best < 0 || v > m || (v != v && m == m)) best = at, m = v;
              if (tiled) dx[at * c + ci] = 0; /* not zeroed above: this window owns it */
            }
          dx[best * c + ci] += dyp[ci];
        }
      }
    /* the lanes added by scatter: all of them unless disjoint, else the channel tail */
    if (relu)
      for (int64_t p = 0; p < pixels; p++)
        for (int64_t ci = disjoint ? c0 + (c1 - c0) / MPG_VL * MPG_VL : c0; ci < c1; ci++) {
          float *o = dx + p * c + ci;
          *o = relu[p * c + ci] > 0 ? *o : 0.0f;
        }
    if (j->bias) { /* the item's channels summed over its image while dx is in cache */
      double *part = j->bias + n * c;
      for (int64_t ci = c0; ci < c1; ci++) part[ci] = 0;
      for (int64_t p = 0; p < pixels; p++)
        for (int64_t ci = c0; ci < c1; ci++) part[ci] += (double)dx[p * c + ci];
    }
  }
}

static void max_pool_grad_range(void *arg, int64_t begin, int64_t end) {
  max_pool_grad_items(arg, begin, end);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same code with 256-bit vectors: compares and selects only, so the same bits. */
__attribute__((target("avx2"))) static void max_pool_grad_range_avx2(void *arg, int64_t begin,
                                                                     int64_t end) {
  max_pool_grad_items(arg, begin, end);
}
#endif

void npuK_max_pool_grad_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x,
                            const float *dy, float *dx) {
  npuK_max_pool_grad_relu_f32(pool, w, x, dy, NULL, dx);
}

void npuK_max_pool_grad_relu_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x,
                                 const float *dy, const float *relu, float *dx) {
  npuK_max_pool_grad_relu_bias_f32(pool, w, x, dy, relu, dx, NULL, NULL);
}

void npuK_max_pool_grad_relu_bias_f32(const npuK_pool *pool, const npuK_window2d *w,
                                      const float *x, const float *dy, const float *relu,
                                      float *dx, float *db, double *scratch) {
  wg_job j = {.w = w, .a = x, .b = dy, .out = dx, .relu = relu, .bias = db ? scratch : NULL};
  void (*range)(void *, int64_t, int64_t) = max_pool_grad_range;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) range = max_pool_grad_range_avx2;
#endif
  npuK_parallel_for(pool, w->n * ((w->c + MPG_CB - 1) / MPG_CB), 1, range, &j);
  for (int64_t ci = 0; db && ci < w->c; ci++) { /* the images' sums in order, then rounded */
    double sum = 0;
    for (int64_t n = 0; n < w->n; n++) sum += scratch[n * w->c + ci];
    db[ci] = (float)sum;
  }
}

static void avg_pool_grad_range(void *arg, int64_t begin, int64_t end) {
  const wg_job *j = arg;
  const npuK_window2d *w = j->w;
  const int64_t c = w->c;
  for (int64_t item = begin; item < end; item++) {
    int64_t n = item / c, ci = item % c;
    const float *dy = j->b + n * w->out_h * w->out_w * c + ci;
    float *dx = j->out + n * w->in_h * w->in_w * c + ci;
    for (int64_t p = 0; p < w->in_h * w->in_w; p++) dx[p * c] = 0;
    for (int64_t oh = 0; oh < w->out_h; oh++)
      for (int64_t ow = 0; ow < w->out_w; ow++) {
        int64_t count = 0;
        for (int64_t kh = 0; kh < w->k_h; kh++) {
          int64_t ih = in_row(w, oh, kh);
          if (ih < 0 || ih >= w->in_h) continue;
          for (int64_t kw = 0; kw < w->k_w; kw++) {
            int64_t iw = in_col(w, ow, kw);
            count += iw >= 0 && iw < w->in_w;
          }
        }
        if (!count) continue;
        float g = dy[(oh * w->out_w + ow) * c] / (float)count;
        for (int64_t kh = 0; kh < w->k_h; kh++) {
          int64_t ih = in_row(w, oh, kh);
          if (ih < 0 || ih >= w->in_h) continue;
          for (int64_t kw = 0; kw < w->k_w; kw++) {
            int64_t iw = in_col(w, ow, kw);
            if (iw >= 0 && iw < w->in_w) dx[(ih * w->in_w + iw) * c] += g;
          }
        }
      }
  }
}

void npuK_avg_pool_grad_f32(const npuK_pool *pool, const npuK_window2d *w, const float *dy,
                            float *dx) {
  wg_job j = {.w = w, .b = dy, .out = dx};
  npuK_parallel_for(pool, w->n * w->c, 1, avg_pool_grad_range, &j);
}

/* ---- convolutions ----
   conv2d and depthwise_conv2d share the loops: a filter row (kh, kw, ci) holds out_c values
   in both layouts ([k_h, k_w, c, out_c] and [k_h, k_w, c, multiplier]); what differs is the
   slice of a dy row it meets: the whole row (out_c values) for conv2d, the channel's
   `multiplier` values starting at ci * multiplier for depthwise.  dy_ci_step says which. */

static inline int64_t dy_row_size(const wg_job *j) {
  return j->depthwise ? j->w->c * j->out_c : j->out_c;
}

/* acc += df, df = 0: the float32 partial sums of FG_BLOCK positions go into float64. */
#define FG_BLOCK 64
static void flush(float *df, double *acc, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    acc[i] += (double)df[i];
    df[i] = 0;
  }
}

/* Filter gradient, items (kh, kw): a (c, out_c) block of rank-1 updates, one per position
   (n, oh, ow), each term one fused multiply-add for conv2d (fmaf: correctly rounded whatever
   the CPU, so the bits of conv_bwd.c's FMA tiles), a multiply then an add for depthwise.  The updates go into df in float32 (the fast inner loop); every FG_BLOCK
   positions df is added into the item's float64 accumulators and cleared, so a sum over many
   positions is float32-rounded over 64 terms at most and float64 beyond; df = acc at the end.
   The blocks are counted within the item: fixed by the shape, not the threads. */
static void filter_grad_range(void *arg, int64_t begin, int64_t end) {
  const wg_job *j = arg;
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, oc = j->out_c, dy_row = dy_row_size(j);
  const int64_t dy_ci_step = j->depthwise ? oc : 0;
  for (int64_t item = begin; item < end; item++) {
    int64_t kh = item / w->k_w, kw = item % w->k_w, since = 0;
    float *df = j->out + item * c * oc;
    double *acc = j->acc ? j->acc + item * c * oc : NULL;
    memset(df, 0, (size_t)(c * oc) * sizeof *df);
    if (acc) memset(acc, 0, (size_t)(c * oc) * sizeof *acc);
    for (int64_t n = 0; n < w->n; n++)
      for (int64_t oh = 0; oh < w->out_h; oh++) {
        int64_t ih = in_row(w, oh, kh);
        if (ih < 0 || ih >= w->in_h) continue;
        for (int64_t ow = 0; ow < w->out_w; ow++) {
          int64_t iw = in_col(w, ow, kw);
          if (iw < 0 || iw >= w->in_w) continue;
          const float *xr = j->a + ((n * w->in_h + ih) * w->in_w + iw) * c;
          const float *dyr = j->b + ((n * w->out_h + oh) * w->out_w + ow) * dy_row;
          for (int64_t ci = 0; ci < c; ci++) {
            const float xv = xr[ci];
            const float *dyc = dyr + ci * dy_ci_step;
            float *row = df + ci * oc;
            if (j->depthwise) /* its only kernel: the vectorised multiply and add */
              for (int64_t co = 0; co < oc; co++) row[co] += xv * dyc[co];
            else /* conv2d's twin: fused, as the register tiles of conv_bwd.c */
              for (int64_t co = 0; co < oc; co++) row[co] = fmaf(xv, dyc[co], row[co]);
          }
          if (acc && ++since == FG_BLOCK) {
            flush(df, acc, c * oc);
            since = 0;
          }
        }
      }
    if (acc) {
      flush(df, acc, c * oc);
      for (int64_t i = 0; i < c * oc; i++) df[i] = (float)acc[i];
    }
  }
}

/* Input gradient, items: the batch. */
static void input_grad_range(void *arg, int64_t begin, int64_t end) {
  const wg_job *j = arg;
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, oc = j->out_c, dy_row = dy_row_size(j);
  const int64_t dy_ci_step = j->depthwise ? oc : 0;
  for (int64_t n = begin; n < end; n++) {
    float *dx = j->out + n * w->in_h * w->in_w * c;
    memset(dx, 0, (size_t)(w->in_h * w->in_w * c) * sizeof *dx);
    for (int64_t oh = 0; oh < w->out_h; oh++)
      for (int64_t ow = 0; ow < w->out_w; ow++) {
        const float *dyr = j->a + ((n * w->out_h + oh) * w->out_w + ow) * dy_row;
        for (int64_t kh = 0; kh < w->k_h; kh++) {
          int64_t ih = in_row(w, oh, kh);
          if (ih < 0 || ih >= w->in_h) continue;
          for (int64_t kw = 0; kw < w->k_w; kw++) {
            int64_t iw = in_col(w, ow, kw);
            if (iw < 0 || iw >= w->in_w) continue;
            float *dxr = dx + (ih * w->in_w + iw) * c;
            const float *f = j->b + (kh * w->k_w + kw) * c * oc;
            for (int64_t ci = 0; ci < c; ci++) {
              const float *fr = f + ci * oc, *dyc = dyr + ci * dy_ci_step;
              float s = 0;
              for (int64_t co = 0; co < oc; co++) s += dyc[co] * fr[co];
              dxr[ci] += s;
            }
          }
        }
      }
  }
}

size_t npuK_filter_grad_f32_scratch_size(const npuK_window2d *w, int64_t out_c) {
  return (size_t)(w->k_h * w->k_w * w->c * out_c) * sizeof(double);
}

void npuK_conv2d_backprop_filter_f32_ref(const npuK_pool *pool, const npuK_window2d *w,
                                         int64_t out_c, const float *x, const float *dy,
                                         float *df, double *scratch) {
  wg_job j = {.w = w, .out_c = out_c, .a = x, .b = dy, .out = df, .acc = scratch};
  npuK_parallel_for(pool, w->k_h * w->k_w, 1, filter_grad_range, &j);
}

void npuK_conv2d_backprop_input_f32(const npuK_pool *pool, const npuK_window2d *w,
                                    int64_t out_c, const float *dy, const float *filter,
                                    float *dx) {
  wg_job j = {.w = w, .out_c = out_c, .a = dy, .b = filter, .out = dx};
  npuK_parallel_for(pool, w->n, 1, input_grad_range, &j);
}

void npuK_depthwise_conv2d_backprop_input_f32(const npuK_pool *pool, const npuK_window2d *w,
                                              int64_t multiplier, const float *dy,
                                              const float *filter, float *dx) {
  wg_job j = {.w = w, .out_c = multiplier, .depthwise = true, .a = dy, .b = filter, .out = dx};
  npuK_parallel_for(pool, w->n, 1, input_grad_range, &j);
}

void npuK_depthwise_conv2d_backprop_filter_f32(const npuK_pool *pool, const npuK_window2d *w,
                                               int64_t multiplier, const float *x,
                                               const float *dy, float *df, double *scratch) {
  wg_job j = {.w = w, .out_c = multiplier, .depthwise = true, .a = x, .b = dy, .out = df,
              .acc = scratch};
  npuK_parallel_for(pool, w->k_h * w->k_w, 1, filter_grad_range, &j);
}
