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
} wg_job;

static inline int64_t in_row(const npuK_window2d *w, int64_t oh, int64_t kh) {
  return oh * w->stride_h - w->pad_top + kh * w->dilation_h;
}
static inline int64_t in_col(const npuK_window2d *w, int64_t ow, int64_t kw) {
  return ow * w->stride_w - w->pad_left + kw * w->dilation_w;
}

/* ---- pools: items are (n, channel) pairs ---- */

static void max_pool_grad_range(void *arg, int64_t begin, int64_t end) {
  const wg_job *j = arg;
  const npuK_window2d *w = j->w;
  const int64_t c = w->c;
  for (int64_t item = begin; item < end; item++) {
    int64_t n = item / c, ci = item % c;
    const float *x = j->a + n * w->in_h * w->in_w * c + ci;
    const float *dy = j->b + n * w->out_h * w->out_w * c + ci;
    float *dx = j->out + n * w->in_h * w->in_w * c + ci;
    for (int64_t p = 0; p < w->in_h * w->in_w; p++) dx[p * c] = 0;
    for (int64_t oh = 0; oh < w->out_h; oh++)
      for (int64_t ow = 0; ow < w->out_w; ow++) {
        int64_t best = -1;
        float m = 0;
        for (int64_t kh = 0; kh < w->k_h; kh++) {
          int64_t ih = in_row(w, oh, kh);
          if (ih < 0 || ih >= w->in_h) continue;
          for (int64_t kw = 0; kw < w->k_w; kw++) {
            int64_t iw = in_col(w, ow, kw);
            if (iw < 0 || iw >= w->in_w) continue;
            float v = x[(ih * w->in_w + iw) * c];
            if (best < 0 || v > m || (v != v && m == m)) best = ih * w->in_w + iw, m = v;
          }
        }
        if (best >= 0) dx[best * c] += dy[(oh * w->out_w + ow) * c];
      }
  }
}

void npuK_max_pool_grad_f32(const npuK_pool *pool, const npuK_window2d *w, const float *x,
                            const float *dy, float *dx) {
  wg_job j = {.w = w, .a = x, .b = dy, .out = dx};
  npuK_parallel_for(pool, w->n * w->c, 1, max_pool_grad_range, &j);
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
   (n, oh, ow).  The updates go into df in float32 (the fast inner loop); every FG_BLOCK
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
            for (int64_t co = 0; co < oc; co++) row[co] += xv * dyc[co];
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

void npuK_conv2d_backprop_filter_f32(const npuK_pool *pool, const npuK_window2d *w,
                                     int64_t out_c, const float *x, const float *dy, float *df,
                                     double *scratch) {
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
