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
  k_blocks(p->m, CONV_BLOCK_TARGET_FLOATS / (p->k > 0 ? p->k : 1), 32, 4096, n_slots, &p->bm,
           &p->n_blocks, &p->n_slots);
}

/* Copies n elements of x (dtype xdt, from element i) into float32 dst: a reduced x is widened
   on the way (npuK_cast's conversions: the bits of widening x in full first). */
static inline void copy_in(float *dst, const void *x, npuK_dtype xdt, int64_t i, int64_t n) {
  if (xdt == NPUK_F32) memcpy(dst, (const float *)x + i, (size_t)n * sizeof *dst);
  else npuK_cast(NULL, n, xdt, (const uint16_t *)x + i, NPUK_F32, dst);
}

/* A reduced x reaches im2col through a ring of widened input rows (in_w * c floats each),
   slot ih % n_rows tagged with the row it holds: an output row's window spans
   (k_h - 1) * dilation_h + 1 input rows, all in distinct slots, and stride_h more let the next
   output row find its shared rows still there.  Rows are widened whole, in one conversion,
   instead of each window's few elements at a time (every input element would be converted
   k_h * k_w times over). */
typedef struct row_ring {
  int64_t n_rows;
  float *tag; /* image * in_h + ih held by each slot (int64, -1: none), 2 floats each: the
                 scratch is only float-aligned, so they are read and written by memcpy */
  float *rows;
} row_ring;

static int64_t ring_tag(const row_ring *r, int64_t slot) {
  int64_t t;
  memcpy(&t, r->tag + 2 * slot, sizeof t);
  return t;
}

static void ring_set_tag(row_ring *r, int64_t slot, int64_t t) {
  memcpy(r->tag + 2 * slot, &t, sizeof t);
}

static int64_t ring_rows(const npuK_window2d *w) {
  return (w->k_h - 1) * w->dilation_h + 1 + w->stride_h;
}

/* floats of one ring: its rows, and its tags (int64, counted as two floats each) */
static int64_t ring_floats(const npuK_window2d *w) {
  return ring_rows(w) * (w->in_w * w->c + 2);
}

static void ring_init(row_ring *r, const npuK_window2d *w, float *at) {
  r->n_rows = ring_rows(w);
  r->tag = at;
  r->rows = at + 2 * r->n_rows;
  for (int64_t i = 0; i < r->n_rows; i++) ring_set_tag(r, i, -1);
}

/* Input row ih of image nb as float32: x itself, or its ring slot, widened on first use. */
static const float *in_row(const npuK_window2d *w, const void *x, npuK_dtype xdt, row_ring *r,
                           int64_t nb, int64_t ih) {
  int64_t len = w->in_w * w->c, id = nb * w->in_h + ih;
  if (xdt == NPUK_F32) return (const float *)x + id * len;
  int64_t slot = ih % r->n_rows;
  float *row = r->rows + slot * len;
  if (ring_tag(r, slot) != id) {
    copy_in(row, x, xdt, id * len, len);
    ring_set_tag(r, slot, id);
  }
  return row;
}

/* dst[0, n) = src[0, n): a few floats (a 3x3 window's row of a 1-channel image is 3) by a
   fixed-size copy the compiler inlines, rather than a library call per row */
static inline void copy_floats(float *dst, const float *src, int64_t n) {
  switch (n) {
#define COPY_N(k) case k: memcpy(dst, src, k * sizeof *dst); return;
    COPY_N(1) COPY_N(2) COPY_N(3) COPY_N(4) COPY_N(5) COPY_N(6) COPY_N(7) COPY_N(8)
#undef COPY_N
  default: memcpy(dst, src, (size_t)n * sizeof *dst);
  }
}

/* col is (rows, k_h*k_w*c): im2col of output pixels [m0, m0 + rows) of x (dtype xdt; a reduced
   one read through ring). */
static void im2col(const npuK_window2d *w, const void *x, npuK_dtype xdt, row_ring *ring,
                   int64_t m0, int64_t rows, float *col) {
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
      const float *src = in_row(w, x, xdt, ring, nb, ih);
      if (cols_inside && w->dilation_w == 1) {
        copy_floats(dst, src + iw0 * c, kwc);
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

/* A block's product when the taps are few (a first layer: k = 3x3x1 = 9): y (rows, oc) = col
   (rows, k) times the filter (k, oc), each output a float32 fused multiply-add chain over the
   taps in ascending order starting from +0 (so never -0).  That is the arithmetic of
   OpenBLAS's FMA sgemm kernels for one output (one accumulator per element along k; alpha = 1
   added onto the zeroed C, exact), so the bits are the sgemm's where OpenBLAS runs
   those kernels (test_kernels holds both to a scalar fmaf chain; bench_cnn compares with the
   hand twin's sgemm); what it saves is the sgemm's packing and its k = 9 inner loop, which
   cost more than the 9 multiply-adds.  x86-64 with AVX2 and FMA only; elsewhere the sgemm. */
#define SMALLK_MAX 16

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static void smallk_avx2(int64_t rows, int64_t oc, int64_t k,
                                                           const float *restrict col,
                                                           const float *restrict f,
                                                           float *restrict y) {
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t r = 0; r < rows; r++) {
    const float *a = col + r * k;
    float *yr = y + r * oc;
    int64_t c0 = 0;
    for (; c0 + 32 <= oc; c0 += 32) {
      __m256 s0 = zero, s1 = zero, s2 = zero, s3 = zero;
      for (int64_t t = 0; t < k; t++) {
        const __m256 x = _mm256_set1_ps(a[t]);
        const float *ft = f + t * oc + c0;
        s0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(ft), s0);
        s1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(ft + 8), s1);
        s2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(ft + 16), s2);
        s3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(ft + 24), s3);
      }
      _mm256_storeu_ps(yr + c0, s0);
      _mm256_storeu_ps(yr + c0 + 8, s1);
      _mm256_storeu_ps(yr + c0 + 16, s2);
      _mm256_storeu_ps(yr + c0 + 24, s3);
    }
    for (; c0 + 8 <= oc; c0 += 8) {
      __m256 s0 = zero;
      for (int64_t t = 0; t < k; t++)
        s0 = _mm256_fmadd_ps(_mm256_set1_ps(a[t]), _mm256_loadu_ps(f + t * oc + c0), s0);
      _mm256_storeu_ps(yr + c0, s0);
    }
    for (; c0 < oc; c0++) {
      float s = 0;
      for (int64_t t = 0; t < k; t++) s = __builtin_fmaf(a[t], f[t * oc + c0], s);
      yr[c0] = s;
    }
  }
}

static int smallk_available(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

/* 1 when conv2d's blocks of this geometry take the small-k product (npuK_conv_small_k). */
int npuK_conv_uses_small_k(const npuK_window2d *w, int64_t out_c) {
#if defined(__x86_64__) && defined(__GNUC__)
  int64_t k = w->k_h * w->k_w * w->c;
  return k > 0 && k <= SMALLK_MAX && out_c >= 8 && smallk_available();
#else
  (void)w, (void)out_c;
  return 0;
#endif
}

void npuK_conv_small_k(int64_t rows, int64_t oc, int64_t k, const float *col,
                       const float *filter, float *y) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (smallk_available()) {
    smallk_avx2(rows, oc, k, col, filter, y);
    return;
  }
#endif
  npuK_matmul_f32_blas(NULL, 0, 0, rows, oc, k, col, filter, y);
}

/* a block's product: the small-k chains or the sgemm (both float32 sums over k) */
static void block_product(int small_k, int64_t rows, int64_t oc, int64_t k, const float *col,
                          const float *filter, float *y) {
  if (small_k) npuK_conv_small_k(rows, oc, k, col, filter, y);
  else npuK_matmul_f32_blas(NULL, 0, 0, rows, oc, k, col, filter, y);
}

size_t npuK_conv2d_f32_scratch_size(const npuK_window2d *w, int64_t out_c, int n_slots) {
  return npuK_conv2d_half_scratch_size(w, out_c, n_slots, NPUK_F32, NPUK_F32);
}

/* Per slot: the columns of one block (a pointwise convolution of float32 x reads x itself;
   of reduced x, the widened rows), im2col's ring of widened input rows for a reduced x, and
   with a reduced y the block's float32 output, narrowed into y once computed. */
size_t npuK_conv2d_half_scratch_size(const npuK_window2d *w, int64_t out_c, int n_slots,
                                     npuK_dtype x_dtype, npuK_dtype y_dtype) {
  conv_plan p;
  conv_plan_init(&p, w, n_slots);
  if (p.m == 0 || out_c == 0 || p.k == 0) return 0;
  int pointwise = conv_is_pointwise(w);
  int64_t per = pointwise && x_dtype == NPUK_F32 ? 0 : p.bm * p.k;
  if (!pointwise && x_dtype != NPUK_F32) per += ring_floats(w);
  if (y_dtype != NPUK_F32) per += p.bm * out_c;
  return (size_t)(p.n_slots * per) * sizeof(float);
}

typedef struct conv_job {
  const npuK_window2d *w;
  conv_plan p;
  int pointwise, small_k;
  int64_t out_c;
  const void *x;
  const float *filter;
  void *y;
  float *scratch;
  npuK_dtype x_dtype, y_dtype;
  int64_t slot_floats;     /* scratch per slot (npuK_conv2d_half_scratch_size's layout) */
  const npuK_epilogue *ep; /* fused steps: applied to each block as soon as it is computed */
  const npuK_pool *pool;   /* polled between blocks (npuK_stopped): a cancelled run stops */
} conv_job;

/* bias + relu (or bias alone), the commonest epilogue, in one pass over a block of rows
   (out_c each) instead of npuK_epilogue_f32's two: the same float32 operations, so the same
   bits (relu as unary.c's: x <= 0 ? 0 : x, NaN kept). */
typedef float ep_vec __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t ep_ivec __attribute__((vector_size(8 * sizeof(float))));

static int ep_is_bias_relu(const npuK_epilogue *ep) {
  return ep && ep->bias && (ep->act == NPUK_ACT_NONE || ep->act == NPUK_ACT_RELU);
}

static inline __attribute__((always_inline)) void bias_relu_block(const npuK_epilogue *ep,
                                                                  int64_t rows, int64_t oc,
                                                                  float *y) {
  const int relu = ep->act == NPUK_ACT_RELU;
  for (int64_t r = 0; r < rows; r++) {
    float *row = y + r * oc;
    int64_t c = 0;
    for (; c + 8 <= oc; c += 8) {
      ep_vec v, b;
      memcpy(&v, row + c, sizeof v);
      memcpy(&b, ep->bias + c, sizeof b);
      v = v + b;
      if (relu) v = (ep_vec)(~(v <= 0) & (ep_ivec)v);
      memcpy(row + c, &v, sizeof v);
    }
    for (; c < oc; c++) {
      float v = row[c] + ep->bias[c];
      row[c] = relu && v <= 0 ? 0 : v;
    }
  }
}

static void bias_relu_plain(const npuK_epilogue *ep, int64_t rows, int64_t oc, float *y) {
  bias_relu_block(ep, rows, oc, y);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void bias_relu_avx2(const npuK_epilogue *ep, int64_t rows,
                                                           int64_t oc, float *y) {
  bias_relu_block(ep, rows, oc, y);
}
#endif

void npuK_conv_epilogue_f32(const npuK_epilogue *ep, int64_t rows, int64_t oc, float *y) {
  if (!ep_is_bias_relu(ep)) {
    npuK_epilogue_f32(ep, rows, oc, oc, y);
    return;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    bias_relu_avx2(ep, rows, oc, y);
    return;
  }
#endif
  bias_relu_plain(ep, rows, oc, y);
}

/* Each block: its columns (im2col, or the rows of a pointwise x, widened when x is reduced)
   times the filter into y's rows, or into the slot's float32 block narrowed into a reduced y
   after the epilogue — the same sgemm calls as float32 x and y, so the bits of widening x in
   full, the float32 kernel and narrowing y. */
static void conv_slot_range(void *arg, int64_t begin, int64_t end) {
  const conv_job *j = arg;
  const conv_plan *p = &j->p;
  int direct = j->pointwise && j->x_dtype == NPUK_F32;
  for (int64_t s = begin; s < end; s++) {
    int64_t b0 = s * p->n_blocks / p->n_slots, b1 = (s + 1) * p->n_blocks / p->n_slots;
    float *col = j->scratch ? j->scratch + s * j->slot_floats : NULL, *next = col;
    if (!direct) next += p->bm * p->k;
    row_ring ring = {0};
    if (!j->pointwise && j->x_dtype != NPUK_F32) {
      ring_init(&ring, j->w, next);
      next += ring_floats(j->w);
    }
    float *yblock = j->y_dtype == NPUK_F32 ? NULL : next;
    for (int64_t b = b0; b < b1 && !npuK_stopped(j->pool); b++) {
      int64_t m0 = b * p->bm, rows = p->m - m0 < p->bm ? p->m - m0 : p->bm;
      const float *a = direct ? (const float *)j->x + m0 * p->k : col;
      if (j->pointwise && !direct) copy_in(col, j->x, j->x_dtype, m0 * p->k, rows * p->k);
      else if (!j->pointwise) im2col(j->w, j->x, j->x_dtype, &ring, m0, rows, col);
      float *y = yblock ? yblock : (float *)j->y + m0 * j->out_c;
      block_product(j->small_k, rows, j->out_c, p->k, a, j->filter, y);
      if (j->ep) npuK_conv_epilogue_f32(j->ep, rows, j->out_c, y);
      if (yblock)
        npuK_cast(NULL, rows * j->out_c, NPUK_F32, yblock, j->y_dtype,
                  (uint16_t *)j->y + m0 * j->out_c);
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
  npuK_conv2d_half_ep(pool, w, out_c, x, NPUK_F32, filter, ep, y, NPUK_F32, scratch, n_slots);
}

void npuK_conv2d_half_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                         const void *x, npuK_dtype x_dtype, const float *filter,
                         const npuK_epilogue *ep, void *y, npuK_dtype y_dtype, float *scratch,
                         int n_slots) {
  conv_job j;
  conv_plan_init(&j.p, w, n_slots);
  if (j.p.m == 0 || out_c == 0) return;
  if (j.p.k == 0) { /* no taps: every row is the epilogue of zeros */
    if (y_dtype == NPUK_F32) {
      memset(y, 0, (size_t)(j.p.m * out_c) * sizeof(float));
      if (ep) npuK_epilogue_f32(ep, j.p.m, out_c, out_c, y);
      return;
    }
    /* reduced y: one row computed a chunk of columns at a time on the stack, narrowed, then
       copied to the other rows (every row is the same) */
    float blk[256];
    uint16_t *yh = y;
    for (int64_t c0 = 0; c0 < out_c; c0 += 256) {
      int64_t len = out_c - c0 < 256 ? out_c - c0 : 256;
      memset(blk, 0, sizeof blk);
      if (ep) {
        npuK_epilogue part = {.bias = ep->bias ? ep->bias + c0 : NULL, .act = ep->act,
                              .alpha = ep->alpha, .slope = ep->slope ? ep->slope + c0 : NULL,
                              .fast = ep->fast};
        npuK_epilogue_f32(&part, 1, len, len, blk);
      }
      npuK_cast(NULL, len, NPUK_F32, blk, y_dtype, yh + c0);
    }
    for (int64_t r = 1; r < j.p.m; r++) memcpy(yh + r * out_c, yh, (size_t)out_c * sizeof *yh);
    return;
  }
  j.ep = ep;
  j.pool = pool;
  j.w = w;
  j.pointwise = conv_is_pointwise(w);
  /* float32 x only: the reduced-precision paths keep their sgemm */
  j.small_k = x_dtype == NPUK_F32 && y_dtype == NPUK_F32 && npuK_conv_uses_small_k(w, out_c);
  j.out_c = out_c;
  j.x = x;
  j.x_dtype = x_dtype;
  j.filter = filter;
  j.y = y;
  j.y_dtype = y_dtype;
  j.scratch = scratch;
  j.slot_floats = (j.pointwise && x_dtype == NPUK_F32 ? 0 : j.p.bm * j.p.k) +
                  (!j.pointwise && x_dtype != NPUK_F32 ? ring_floats(w) : 0) +
                  (y_dtype == NPUK_F32 ? 0 : j.p.bm * out_c);
  npuK_parallel_for(pool, j.p.n_slots, 1, conv_slot_range, &j);
}

/* ---- conv2d + max pool (inference graphs: the convolution's output has no other reader) --- */

/* The convolution is computed in the plain kernel's blocks (conv_plan: the same im2col and
   sgemm calls, so the same bits: OpenBLAS's rounding of a row can depend on where it sits in
   a call) into a ring of the last n_ring blocks' outputs, and each pool row is pooled once
   the blocks holding its convolution rows are there.  A slot takes the pool rows whose first
   convolution row lies in its blocks, so a pool row across a slot boundary makes the next
   slot's first block be computed by both (the same call, the same bits).  Windows do not
   overlap, so a convolution row is read by one pool row at most. */
int npuK_conv2d_pool_fits(const npuK_window2d *w, const npuK_window2d *pool) {
  return pool->n == w->n && pool->in_h == w->out_h && pool->in_w == w->out_w &&
         pool->k_h <= pool->stride_h && pool->k_w <= pool->stride_w &&
         pool->k_h * pool->k_w <= 64 && pool->dilation_h == 1 && pool->dilation_w == 1 &&
         pool->out_h > 0 && pool->out_w > 0;
}

typedef struct pool_plan {
  conv_plan cp;    /* the plain kernel's blocks (cp.n_slots unused) */
  int64_t n_ring;  /* blocks one pool row can span */
  int64_t n_slots;
} pool_plan;

static void pool_plan_init(pool_plan *p, const npuK_window2d *w, const npuK_window2d *pw,
                           int n_slots) {
  conv_plan_init(&p->cp, w, 1);
  p->n_ring = (pw->k_h * w->out_w + p->cp.bm - 1) / p->cp.bm + 1;
  p->n_slots = n_slots < 1 ? 1 : n_slots;
  if (p->n_slots > p->cp.n_blocks) p->n_slots = p->cp.n_blocks;
}

/* per slot: one block's columns, then the ring of block outputs (out_c per row) */
static int64_t pool_slot_floats(const pool_plan *p, int64_t out_c) {
  return p->cp.bm * (p->cp.k + p->n_ring * out_c);
}

size_t npuK_conv2d_pool_scratch_size(const npuK_window2d *w, int64_t out_c,
                                     const npuK_window2d *pool, int n_slots) {
  pool_plan p;
  pool_plan_init(&p, w, pool, n_slots);
  if (p.cp.m == 0 || out_c == 0 || p.cp.k == 0) return 0;
  return (size_t)(p.n_slots * pool_slot_floats(&p, out_c)) * sizeof(float);
}

typedef struct pool_conv_job {
  const npuK_window2d *w, *pw;
  pool_plan p;
  int64_t out_c;
  const float *x, *filter;
  const npuK_epilogue *ep;
  float *y, *scratch;
  int small_k;
} pool_conv_job;

/* Pool row q's convolution pixels [*m0, *m1) (row-major over (image, row, column)). */
static void pool_row_pixels(const npuK_window2d *w, const npuK_window2d *pw, int64_t q,
                            int64_t *m0, int64_t *m1) {
  int64_t nb = q / pw->out_h, a = q % pw->out_h * pw->stride_h - pw->pad_top, b = a + pw->k_h;
  if (a < 0) a = 0;
  if (b > w->out_h) b = w->out_h;
  if (b < a) b = a;
  *m0 = (nb * w->out_h + a) * w->out_w;
  *m1 = (nb * w->out_h + b) * w->out_w;
}

/* the slot that pools pool row q: the one whose blocks hold its first pixel */
static int64_t pool_row_block(const pool_conv_job *j, int64_t q) {
  int64_t m0, m1, b;
  pool_row_pixels(j->w, j->pw, q, &m0, &m1);
  b = m0 / j->p.cp.bm;
  return b < j->p.cp.n_blocks ? b : j->p.cp.n_blocks - 1;
}

static void pool_conv_range(void *arg, int64_t begin, int64_t end) {
  const pool_conv_job *j = arg;
  const npuK_window2d *w = j->w, *pw = j->pw;
  const pool_plan *p = &j->p;
  const conv_plan *cp = &p->cp;
  const int64_t oc = j->out_c, ow = w->out_w, n_rows = pw->n * pw->out_h;
  for (int64_t s = begin; s < end; s++) {
    float *col = j->scratch + s * pool_slot_floats(p, oc), *ring = col + cp->bm * cp->k;
    int64_t b0 = s * cp->n_blocks / p->n_slots, b1 = (s + 1) * cp->n_blocks / p->n_slots;
    int64_t done = -1; /* the last block computed (the ring holds the n_ring up to it) */
    for (int64_t q = 0; q < n_rows; q++) {
      int64_t bq = pool_row_block(j, q);
      if (bq < b0) continue;
      if (bq >= b1) break;
      int64_t m0, m1;
      pool_row_pixels(w, pw, q, &m0, &m1);
      int64_t last = m1 > m0 ? (m1 - 1) / cp->bm : bq;
      if (done < bq - 1) done = bq - 1; /* start at the pool row's first block */
      for (; done < last; ) { /* the plain kernel's block: im2col, sgemm, epilogue */
        int64_t b = ++done, r0 = b * cp->bm, rows = cp->m - r0 < cp->bm ? cp->m - r0 : cp->bm;
        float *yb = ring + b % p->n_ring * cp->bm * oc;
        im2col(w, j->x, NPUK_F32, NULL, r0, rows, col);
        block_product(j->small_k, rows, oc, cp->k, col, j->filter, yb);
        if (j->ep) npuK_conv_epilogue_f32(j->ep, rows, oc, yb);
      }
      float *dst = j->y + q * pw->out_w * oc;
      for (int64_t pc = 0; pc < pw->out_w; pc++, dst += oc) {
        int64_t c0 = pc * pw->stride_w - pw->pad_left, c1 = c0 + pw->k_w;
        if (c0 < 0) c0 = 0;
        if (c1 > ow) c1 = ow;
        const float *src[64]; /* valid positions in (kh, kw) order, as max_pool visits them */
        int n_src = 0;
        for (int64_t m = m0; m < m1; m += ow)
          for (int64_t cc = c0; cc < c1; cc++) {
            int64_t at = m + cc;
            src[n_src++] = ring + (at / cp->bm % p->n_ring * cp->bm + at % cp->bm) * oc;
          }
        k_max_rows(dst, src, n_src, oc);
      }
    }
  }
}

void npuK_conv2d_f32_pool_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                             const float *x, const float *filter, const npuK_epilogue *ep,
                             const npuK_window2d *pool_window, float *y, float *scratch,
                             int n_slots) {
  pool_conv_job j = {.w = w, .pw = pool_window, .out_c = out_c, .x = x, .filter = filter,
                     .ep = ep, .y = y, .scratch = scratch,
                     .small_k = npuK_conv_uses_small_k(w, out_c)};
  pool_plan_init(&j.p, w, pool_window, n_slots);
  int64_t np = pool_window->n * pool_window->out_h * pool_window->out_w * out_c;
  if (np == 0) return;
  if (j.p.cp.m == 0 || j.p.cp.k == 0) { /* no taps: max_pool of the plain kernel's rows */
    for (int64_t i = 0; i < np; i += out_c) {
      memset(y + i, 0, (size_t)out_c * sizeof *y);
      if (ep) npuK_epilogue_f32(ep, 1, out_c, out_c, y + i);
    }
    return;
  }
  npuK_parallel_for(pool, j.p.n_slots, 1, pool_conv_range, &j);
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

/* Output row `row` (image nb, row oh) into yrow.  Input row ih of image nb is at
   img + (ih - ih_base) * in_w * c: x itself (ih_base 0), or a band of widened rows starting at
   input row ih_base (which the row's valid taps never precede). */
static inline __attribute__((always_inline)) void dw_one_row(const dw_job *j, int64_t row,
                                                             const float *img, int64_t ih_base,
                                                             float *yrow) {
  const npuK_window2d *w = j->w;
  const int64_t cm = w->c * j->mult;
  int64_t oh = row % w->out_h, ih0 = oh * w->stride_h - w->pad_top;
  int64_t a = 0, b = w->k_h;
  while (a < b && ih0 + a * w->dilation_h < 0) a++;
  while (b > a && ih0 + (b - 1) * w->dilation_h >= w->in_h) b--;
  dw_row r = {img, a, b - a, w->dilation_h * w->in_w * w->c};
  if (b > a) r.xr = img + (ih0 + a * w->dilation_h - ih_base) * w->in_w * w->c;
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

/* One item = one output row (nb, oh). Inlined into a plain and an AVX2 clone below. */
static inline __attribute__((always_inline)) void dw_rows(const dw_job *j, int64_t begin,
                                                          int64_t end) {
  const npuK_window2d *w = j->w;
  const int64_t cm = w->c * j->mult, img = w->in_h * w->in_w * w->c;
  for (int64_t row = begin; row < end; row++)
    dw_one_row(j, row, j->x + row / w->out_h * img, 0, j->y + row * w->out_w * cm);
}

/* Reduced x or y (float16 / bfloat16): one item = one slot of scratch, which takes rows
   [slot * R / n_slots, (slot + 1) * R / n_slots) of the R = n * out_h output rows in bands of
   K_BAND rows of one image (kutil.h).  A band's input rows (contiguous in x) are widened
   into the slot in one conversion; each output row is computed into the slot's float32 row (reduced y),
   epilogue included, and narrowed.  The same dw_one_row on the same float32 values: the bits
   of widening x in full, the float32 kernel and narrowing y. */
static int64_t dw_slot_floats(const npuK_window2d *w, int64_t mult, npuK_dtype x_dtype,
                              npuK_dtype y_dtype) {
  return (x_dtype != NPUK_F32 ? k_band_in_rows(w) * w->in_w * w->c : 0) +
         (y_dtype != NPUK_F32 ? w->out_w * w->c * mult : 0);
}

typedef struct dw_half_job {
  dw_job j;
  const void *x;
  void *y;
  npuK_dtype x_dtype, y_dtype;
  float *scratch;
  int64_t slot_floats, n_slots;
} dw_half_job;

static inline __attribute__((always_inline)) void dw_half_slots(const dw_half_job *h,
                                                                int64_t begin, int64_t end) {
  const dw_job *j = &h->j;
  const npuK_window2d *w = j->w;
  const int64_t cm = w->c * j->mult, len = w->in_w * w->c, n_rows = w->n * w->out_h;
  for (int64_t s = begin; s < end; s++) {
    float *band = h->scratch + s * h->slot_floats;
    float *ybuf = band + (h->x_dtype != NPUK_F32 ? k_band_in_rows(w) * len : 0);
    int64_t r0 = s * n_rows / h->n_slots, r1 = (s + 1) * n_rows / h->n_slots;
    while (r0 < r1) {
      k_band b = k_band_at(w, r0, r1);
      const float *img = (const float *)h->x + b.image * w->in_h * len;
      int64_t ih_base = 0;
      if (h->x_dtype != NPUK_F32) { /* the band's input rows */
        if (b.hi > b.lo)
          copy_in(band, h->x, h->x_dtype, (b.image * w->in_h + b.lo) * len, (b.hi - b.lo) * len);
        img = band;
        ih_base = b.lo;
      }
      for (int64_t row = r0; row < b.r_end; row++) {
        float *yrow = h->y_dtype != NPUK_F32 ? ybuf : (float *)h->y + row * w->out_w * cm;
        dw_one_row(j, row, img, ih_base, yrow);
        if (h->y_dtype != NPUK_F32)
          npuK_cast(NULL, w->out_w * cm, NPUK_F32, ybuf, h->y_dtype,
                    (uint16_t *)h->y + row * w->out_w * cm);
      }
      r0 = b.r_end;
    }
  }
}

static void dw_half_range(void *arg, int64_t begin, int64_t end) {
  dw_half_slots(arg, begin, end);
}

static void dw_range(void *arg, int64_t begin, int64_t end) { dw_rows(arg, begin, end); }

#if defined(__x86_64__) && defined(__GNUC__)
#define DW_AVX2 1
/* The same code with 256-bit vectors; AVX2 rather than plain AVX only so that one CPU test
   (the one cast.c makes) picks it. No FMA: that would change the rounding. */
__attribute__((target("avx2"))) static void dw_range_avx2(void *arg, int64_t begin, int64_t end) {
  dw_rows(arg, begin, end);
}

__attribute__((target("avx2"))) static void dw_half_range_avx2(void *arg, int64_t begin,
                                                               int64_t end) {
  dw_half_slots(arg, begin, end);
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

static dw_job dw_job_init(const npuK_window2d *w, int64_t multiplier, const float *x,
                          const float *filter, const npuK_epilogue *ep, float *y) {
  dw_job j = {w, multiplier, x, filter, y, ep, w->out_w, w->out_w, dw_ep_inline(ep, multiplier)};
  /* the interior is contiguous: both bounds tests are monotone in ow */
  for (int64_t ow = 0; ow < w->out_w; ow++) {
    int64_t iw0 = ow * w->stride_w - w->pad_left;
    if (iw0 >= 0 && iw0 + (w->k_w - 1) * w->dilation_w < w->in_w) {
      if (j.ow_lo == w->out_w) j.ow_lo = ow;
      j.ow_hi = ow + 1;
    }
  }
  return j;
}

static int64_t dw_n_slots(const npuK_window2d *w, int n_slots) {
  int64_t rows = w->n * w->out_h, n = n_slots < 1 ? 1 : n_slots;
  return n < rows ? n : rows;
}

size_t npuK_depthwise_conv2d_half_scratch_size(const npuK_window2d *w, int64_t multiplier,
                                               int n_slots, npuK_dtype x_dtype,
                                               npuK_dtype y_dtype) {
  if (x_dtype == NPUK_F32 && y_dtype == NPUK_F32) return 0;
  return (size_t)(dw_n_slots(w, n_slots) * dw_slot_floats(w, multiplier, x_dtype, y_dtype)) *
         sizeof(float);
}

void npuK_depthwise_conv2d_half_ep(const npuK_pool *pool, const npuK_window2d *w,
                                   int64_t multiplier, const void *x, npuK_dtype x_dtype,
                                   const float *filter, const npuK_epilogue *ep, void *y,
                                   npuK_dtype y_dtype, float *scratch, int n_slots) {
  if (x_dtype == NPUK_F32 && y_dtype == NPUK_F32) {
    npuK_depthwise_conv2d_f32_ep(pool, w, multiplier, x, filter, ep, y);
    return;
  }
  int64_t slots = dw_n_slots(w, n_slots);
  if (slots <= 0 || w->out_w * w->c * multiplier == 0) return;
  dw_half_job h = {dw_job_init(w, multiplier, NULL, filter, ep, NULL), x, y, x_dtype, y_dtype,
                   scratch, dw_slot_floats(w, multiplier, x_dtype, y_dtype), slots};
  void (*range)(void *, int64_t, int64_t) = dw_half_range;
#if DW_AVX2
  if (dw_have_avx2()) range = dw_half_range_avx2;
#endif
  npuK_parallel_for(pool, slots, 1, range, &h);
}

static void dw_run(const npuK_pool *pool, const npuK_window2d *w, int64_t multiplier,
                   const float *x, const float *filter, const npuK_epilogue *ep, float *y,
                   int allow_avx2) {
  dw_job j = dw_job_init(w, multiplier, x, filter, ep, y);
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
