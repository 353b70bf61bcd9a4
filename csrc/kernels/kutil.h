/* kutil.h: private helpers shared by the kernel .c files (not part of the kernel API).
 *
 * k_geom is a simplified strided index space: up to K_MAX_OPS operands, each with its own
 * element strides over the same dims. Simplification drops size-1 dims and merges a dim into
 * the next one when every operand is contiguous across the pair, so inner loops get long runs.
 * Walking is row-major over dims; everything is stack-only (no allocation).
 */
#ifndef NPU_KERNELS_KUTIL_H
#define NPU_KERNELS_KUTIL_H

#include <math.h>
#include <string.h>

#include "core/half.h"
#include "kernels/kernels.h"

#define K_MAX_OPS 3
#define K_GEOM_MAX_DIMS (2 * NPUK_MAX_DIMS) /* tile views each dim as (multiple, dim) */

typedef struct k_geom {
  int ndim;                           /* >= 1 after init */
  int n_ops;
  int64_t dims[K_GEOM_MAX_DIMS];
  int64_t s[K_MAX_OPS][K_GEOM_MAX_DIMS];
} k_geom;

/* Builds g from dims and n_ops stride arrays (NULL array = all zero). Returns the total number
   of elements (0 if any dim is 0). */
static inline int64_t k_geom_init(k_geom *g, int ndim, const int64_t *dims, int n_ops,
                                  const int64_t *const *strides) {
  int64_t total = 1;
  g->ndim = 0;
  g->n_ops = n_ops;
  for (int d = 0; d < ndim; d++) {
    total *= dims[d];
    if (dims[d] == 1) continue;
    int p = g->ndim - 1;
    int merge = p >= 0;
    for (int o = 0; o < n_ops && merge; o++) {
      int64_t sd = strides[o] ? strides[o][d] : 0;
      if (g->s[o][p] != sd * dims[d]) merge = 0;
    }
    if (merge) {
      g->dims[p] *= dims[d];
      for (int o = 0; o < n_ops; o++) g->s[o][p] = strides[o] ? strides[o][d] : 0;
    } else {
      g->dims[g->ndim] = dims[d];
      for (int o = 0; o < n_ops; o++) g->s[o][g->ndim] = strides[o] ? strides[o][d] : 0;
      g->ndim++;
    }
  }
  if (g->ndim == 0) {
    g->ndim = 1;
    g->dims[0] = 1;
    for (int o = 0; o < n_ops; o++) g->s[o][0] = 0;
  }
  return total;
}

/* Sets coord and off[o] for linear (row-major) index `at`. */
static inline void k_geom_seek(const k_geom *g, int64_t at, int64_t *coord, int64_t *off) {
  for (int o = 0; o < g->n_ops; o++) off[o] = 0;
  for (int d = g->ndim - 1; d >= 0; d--) {
    int64_t c = at % g->dims[d];
    at /= g->dims[d];
    coord[d] = c;
    for (int o = 0; o < g->n_ops; o++) off[o] += c * g->s[o][d];
  }
}

/* Length of the inner run starting at coord, capped by `left`. */
static inline int64_t k_geom_run(const k_geom *g, const int64_t *coord, int64_t left) {
  int64_t run = g->dims[g->ndim - 1] - coord[g->ndim - 1];
  return run < left ? run : left;
}

/* Advances coord/off by `run` elements along the innermost dim, carrying outward. */
static inline void k_geom_advance(const k_geom *g, int64_t *coord, int64_t *off, int64_t run) {
  int d = g->ndim - 1;
  coord[d] += run;
  for (int o = 0; o < g->n_ops; o++) off[o] += run * g->s[o][d];
  while (d > 0 && coord[d] == g->dims[d]) {
    for (int o = 0; o < g->n_ops; o++) off[o] += g->s[o][d - 1] - g->dims[d] * g->s[o][d];
    coord[d] = 0;
    coord[d - 1]++;
    d--;
  }
}

/* Row-major dense strides for dims. */
static inline void k_dense_strides(int ndim, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    strides[d] = s;
    s *= dims[d];
  }
}

static inline int64_t k_prod(int ndim, const int64_t *dims) {
  int64_t p = 1;
  for (int d = 0; d < ndim; d++) p *= dims[d];
  return p;
}

/* Strided copies of elements of es bytes (movement.c): dst[i*so] = src[i*si] for i < n
   (strides in elements, si may be negative or 0); and the same over an nd index space,
   y[out_off(c)] = x[in_off(c)] for every coordinate c of dims, split over the pool
   (out_strides NULL = dense). */
void k_copy_run(char *dst, int64_t so, const char *src, int64_t si, int64_t n, size_t es);
void k_copy_nd(const npuK_pool *pool, size_t es, int ndim, const int64_t *dims,
               const int64_t *in_strides, const void *x, const int64_t *out_strides, void *y);

/* Work cut into blocks of a size fixed by the shapes (so the same bits at any thread count):
   want items per block clamped to [lo, hi] and to total (at least 1), the block count, and
   n_slots (at least 1) cut to it.  conv.c's im2col blocks and winograd.c's tile blocks. */
static inline void k_blocks(int64_t total, int64_t want, int64_t lo, int64_t hi, int n_slots,
                            int64_t *size, int64_t *n_blocks, int64_t *slots) {
  if (want < lo) want = lo;
  if (want > hi) want = hi;
  if (want > total) want = total;
  *size = want > 0 ? want : 1;
  *n_blocks = (total + *size - 1) / *size;
  *slots = n_slots < 1 ? 1 : n_slots;
  if (*slots > *n_blocks) *slots = *n_blocks;
}

/* Grain for element-wise work: enough items that a chunk is worth a thread hand-off. */
#define K_GRAIN_ELEMS 16384

/* ---- row bands of 2-D windows over float16 / bfloat16 (depthwise_conv2d, the pools) ----
   Output rows are taken K_BAND at a time within one image; the input rows a band reads are
   contiguous in x, so they are widened into scratch in one conversion. */
#define K_BAND 8

/* The most input rows one band reads: what a scratch slot must hold. */
static inline int64_t k_band_in_rows(const npuK_window2d *w) {
  int64_t rows = (K_BAND - 1) * w->stride_h + (w->k_h - 1) * w->dilation_h + 1;
  return rows < w->in_h ? rows : w->in_h;
}

typedef struct k_band {
  int64_t r_end;  /* the band is output rows [r0, r_end) of the n * out_h */
  int64_t image;  /* its image (batch index) */
  int64_t lo, hi; /* the input rows of that image it reads, clamped to it (none if hi <= lo) */
} k_band;

/* The band starting at output row r0 and ending by r1. */
static inline k_band k_band_at(const npuK_window2d *w, int64_t r0, int64_t r1) {
  k_band b = {.image = r0 / w->out_h};
  int64_t oh0 = r0 % w->out_h;
  b.r_end = r0 + K_BAND;
  if (b.r_end > r1) b.r_end = r1;
  if (b.r_end > (b.image + 1) * w->out_h) b.r_end = (b.image + 1) * w->out_h;
  b.lo = oh0 * w->stride_h - w->pad_top;
  b.hi = (oh0 + (b.r_end - r0) - 1) * w->stride_h - w->pad_top + (w->k_h - 1) * w->dilation_h + 1;
  if (b.lo < 0) b.lo = 0;
  if (b.hi > w->in_h) b.hi = w->in_h;
  return b;
}

/* dst[0, c) = max_pool's maximum of src[0][.], ..., src[n - 1][.] taken in that order from
   -inf, (v > m || v is NaN) ? v : m (pooling.c's rule, so its bits): the pools fused into a
   convolution (conv.c, winograd.c). */
typedef float k_pvec __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t k_pivec __attribute__((vector_size(4 * sizeof(float))));
static inline void k_max_rows(float *dst, const float *const *src, int n, int64_t c) {
  int64_t i = 0;
  for (; i + 4 <= c; i += 4) {
    k_pvec m = (k_pvec){0} - __builtin_inff();
    for (int k = 0; k < n; k++) {
      k_pvec v;
      memcpy(&v, src[k] + i, sizeof v);
      k_pivec take = (v > m) | (v != v);
      m = (k_pvec)((take & (k_pivec)v) | (~take & (k_pivec)m));
    }
    memcpy(dst + i, &m, sizeof m);
  }
  for (; i < c; i++) {
    float m = -__builtin_inff();
    for (int k = 0; k < n; k++) {
      float v = src[k][i];
      m = (v > m || v != v) ? v : m;
    }
    dst[i] = m;
  }
}

/* VDPBF16PS's arithmetic a step at a time, for the portable twins of the bfloat16 kernels
   (gemm_bf16.c, conv_bf16.c, conv_bwd_bf16.c), measured against the instruction here: an
   input as it reads it (a bfloat16 subnormal is a zero of its sign), and acc + a b as it adds:
   the exact product (not first rounded to float32, so it neither overflows to Inf nor is
   flushed on its own), one rounding to nearest even, a subnormal result (after rounding)
   flushed to a zero of its sign.  A bfloat16 product has 16 significant bits, so inside
   float32's range this is the float32 product then the float32 sum. */
static inline float k_bf16_daz(uint16_t h) {
  return npu_bits_f32((uint32_t)h << 16 & ((h & 0x7f80u) ? 0xffffffffu : 0x80000000u));
}

static inline float k_dpbf16_step(float acc, float a, float b) {
  float r = fmaf(a, b, acc);
  return fabsf(r) < 0x1p-126f ? copysignf(0.0f, r) : r;
}

/* The direct convolutions (conv_direct.c on float32, conv_bf16.c on bfloat16) share their
   geometry: output row oh's valid filter rows [*kh0, *kh1) (those inside x), whether some
   output column's window leaves x sideways (then images are copied with zero columns), and
   the columns of such a padded row. */
static inline void k_conv_kh_range(const npuK_window2d *w, int64_t oh, int64_t *kh0,
                                   int64_t *kh1) {
  int64_t ih0 = oh * w->stride_h - w->pad_top, a = 0, b = w->k_h;
  if (ih0 < 0) a = -ih0 < b ? -ih0 : b;
  if (ih0 + b > w->in_h) b = w->in_h - ih0 > a ? w->in_h - ih0 : a;
  *kh0 = a;
  *kh1 = b;
}

static inline int k_conv_needs_pad(const npuK_window2d *w) {
  return w->pad_left > 0 || (w->out_w - 1) * w->stride_w + w->k_w - w->pad_left > w->in_w;
}

static inline int64_t k_conv_pad_w(const npuK_window2d *w) {
  int64_t need = (w->out_w - 1) * w->stride_w + w->k_w, have = w->pad_left + w->in_w;
  return need > have ? need : have;
}

/* ... and the structure of their work around the register tiles (one copy, so the two kernels
   cannot drift apart; all of it outside the tiles' loops).  Items are output rows, or with a
   fused pool the pool's rows, and each of at most n_slots slots takes a contiguous run. */
static inline int64_t k_conv_slots(const npuK_window2d *w, const npuK_window2d *pool,
                                   int n_slots) {
  int64_t items = pool ? pool->n * pool->out_h : w->n * w->out_h, s = n_slots < 1 ? 1 : n_slots;
  return s < items ? s : items;
}

/* Whether the tiles apply the epilogue in their registers: a bias, then relu or nothing (the
   lane by lane bias_relu_block of conv.c); any other runs on the rows afterwards. */
static inline int k_conv_ep_inline(const npuK_epilogue *ep) {
  return ep && ep->bias && (ep->act == NPUK_ACT_NONE || ep->act == NPUK_ACT_RELU);
}

/* Whether fused pool pw is 2x2 stride 2 with every window inside the convolution's output:
   then its rows are pooled in registers (k_pool22_512) instead of stored and pooled. */
static inline int k_conv_pool22_inside(const npuK_window2d *w, const npuK_window2d *pw) {
  return pw && pw->k_h == 2 && pw->k_w == 2 && pw->stride_h == 2 && pw->stride_w == 2 &&
         pw->pad_top == 0 && pw->pad_left == 0 && 2 * pw->out_h <= w->out_h &&
         2 * pw->out_w <= w->out_w;
}

/* n columns in tiles of at most `most`, as even as that allows: *base each, the first *extra
   one more; returns the number of tiles. */
static inline int64_t k_even_tiles(int64_t n, int64_t most, int64_t *base, int64_t *extra) {
  int64_t tiles = (n + most - 1) / most;
  *base = n / tiles;
  *extra = n % tiles;
  return tiles;
}

/* The convolution rows [*a, *b) that row q of a pool's output (its row in the image) reads. */
static inline void k_conv_pool_rows(const npuK_window2d *w, const npuK_window2d *pw, int64_t q,
                                    int64_t *a, int64_t *b) {
  *a = q * pw->stride_h - pw->pad_top;
  *b = *a + pw->k_h;
  if (*a < 0) *a = 0;
  if (*b > w->out_h) *b = w->out_h;
}

/* Pool row q's pixels from its convolution rows [a, b) (rows: their out_w oc floats each,
   epilogue applied), in max_pool's order with its NaN rule: max4 for a window of four valid
   positions, max_rows for the others (both k_max_rows' bits). */
typedef void (*k_max_fn)(float *dst, const float *const *src, int n, int64_t c);
static inline void k_conv_pool_cols(const npuK_window2d *w, const npuK_window2d *pw, int64_t a,
                                    int64_t b, const float *rows, int64_t oc, float *dst,
                                    k_max_fn max4, k_max_fn max_rows) {
  for (int64_t pc = 0; pc < pw->out_w; pc++, dst += oc) {
    int64_t c0 = pc * pw->stride_w - pw->pad_left, c1 = c0 + pw->k_w;
    if (c0 < 0) c0 = 0;
    if (c1 > w->out_w) c1 = w->out_w;
    const float *src[64]; /* valid positions in (kh, kw) order (windows fit: pool_fits) */
    int n_src = 0;
    for (int64_t r = a; r < b; r++)
      for (int64_t cc = c0; cc < c1; cc++) src[n_src++] = rows + ((r - a) * w->out_w + cc) * oc;
    (n_src == 4 ? max4 : max_rows)(dst, src, n_src, oc);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* The direct convolutions' fused 2x2 pool in registers, one vector of channels (k: its lanes):
   the four sums s00, s01 (first row), s10, s11 of each window to max_pool(relu(s + b)) —
   without a NaN among the sums or the sums plus the bias, the four pooled first and the bias
   and relu applied once (rounding and relu are monotone, so the max of the (s + b, relu)
   values is fl(max s + b) then relu, and vmaxps(v, m) keeps m on ties as max_pool's rule
   keeps the first: the same value and zero's sign; fl(s + b) is -0 only for -0 + -0, relu
   gives +0 either way).  A NaN needs a NaN sum or a bias that is infinite or NaN (bad_b):
   those lanes take max_pool's rule, (v > m || v is NaN) ? v : m from -inf in (kh, kw) order,
   on each (s + b, relu).  ep: the bias b applied; relu: then relu. */
static inline __attribute__((always_inline, target("avx512f"))) __m512
k_pool22_512(__m512 s00, __m512 s01, __m512 s10, __m512 s11, __m512 b, __mmask16 bad_b,
             __mmask16 k, int ep, int relu) {
  const __m512 zero = _mm512_setzero_ps();
  __mmask16 slow = bad_b | _mm512_cmp_ps_mask(s00, s01, _CMP_UNORD_Q) |
                   _mm512_cmp_ps_mask(s10, s11, _CMP_UNORD_Q);
  __m512 m = _mm512_max_ps(s01, s00);
  m = _mm512_max_ps(s10, m);
  m = _mm512_max_ps(s11, m);
  if (ep) m = _mm512_add_ps(m, b);
  if (relu) m = _mm512_max_ps(m, zero); /* m not NaN: m <= 0 ? +0 : m */
  if (__builtin_expect(slow & k, 0)) {
    const __m512 s[4] = {s00, s01, s10, s11};
    m = _mm512_set1_ps(-__builtin_inff());
    for (int i = 0; i < 4; i++) {
      __m512 v = s[i];
      if (ep) {
        v = _mm512_add_ps(v, b);
        if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LE_OQ), zero);
      }
      __mmask16 take = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      m = _mm512_mask_mov_ps(m, take, v);
    }
  }
  return m;
}

/* The AVX-512 tiles take 32 output channels from c0 (two vectors, nv 2) or the 1 to 31 left
   (the last vector's lanes: mask last).  TILE(nv, last) is the tile call; nv and last are
   constants in each branch, so each inlined tile keeps its accumulators in registers. */
#define K_CHANNEL_TILES(left, TILE)                                                              \
  do {                                                                                           \
    if ((left) >= 32) TILE(2, (__mmask16)0xffff);                                                \
    else if ((left) > 16) TILE(2, (__mmask16)((1u << ((left) - 16)) - 1));                       \
    else TILE(1, (left) == 16 ? (__mmask16)0xffff : (__mmask16)((1u << (left)) - 1));           \
  } while (0)

/* A tile's nw x nv accumulators (channels c0.., the last vector's lanes: last) plus the bias,
   then relu when asked: conv.c's bias_relu_block lane by lane, v + b then v <= 0 ? 0 : v. */
static inline __attribute__((always_inline, target("avx512f"))) void
k_tile_bias_relu_512(__m512 (*acc)[2], const int nw, const int nv, __mmask16 last,
                     const float *bias, int relu) {
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int v = 0; v < nv; v++) {
    __m512 b = v + 1 < nv ? _mm512_loadu_ps(bias + 16 * v) : _mm512_maskz_loadu_ps(last, bias + 16 * v);
#pragma GCC unroll 12
    for (int o = 0; o < nw; o++) {
      __m512 s = _mm512_add_ps(acc[o][v], b);
      if (relu) s = _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(s, zero, _CMP_LE_OQ), zero);
      acc[o][v] = s;
    }
  }
}

/* A 2x2 pool tile's accumulators, [pool column][row][column in the window][vector], np pool
   columns of nv vectors: zeroed. */
static inline __attribute__((always_inline, target("avx512f"))) void
k_pool22_zero_512(__m512 (*acc)[2][2][2], const int np, const int nv) {
#pragma GCC unroll 3
  for (int p = 0; p < np; p++)
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++)
#pragma GCC unroll 2
      for (int cc = 0; cc < 2; cc++)
#pragma GCC unroll 2
        for (int q = 0; q < nv; q++) acc[p][r][cc][q] = _mm512_setzero_ps();
}

/* k_pool22_512's bias for the lanes k of channels from bias (zero without an inline
   epilogue: ep 0) and the lanes where it is infinite or NaN (*bad_b). */
static inline __attribute__((always_inline, target("avx512f"))) __m512
k_pool22_bias_512(int ep, const float *bias, __mmask16 k, __mmask16 *bad_b) {
  *bad_b = 0;
  if (!ep) return _mm512_setzero_ps();
  __m512 b = _mm512_maskz_loadu_ps(k, bias);
  *bad_b = _mm512_cmp_ps_mask(_mm512_abs_ps(b), _mm512_set1_ps(__builtin_inff()), _CMP_NLT_UQ);
  return b;
}

/* max_pool of four rows of c floats (a 2x2 window inside) into dst, 16 lanes at a time:
   without NaNs max_pool's rule is vmaxps(v, m) (which keeps m when equal or unordered), so
   three maxes a vector; a vector holding a NaN takes the rule itself (k_max_rows). */
static inline __attribute__((target("avx512f"))) void
k_max4_512(float *dst, const float *const *src, int64_t c) {
  for (int64_t i = 0; i < c; i += 16) {
    __mmask16 k = c - i >= 16 ? 0xffff : (__mmask16)((1u << (c - i)) - 1);
    __m512 a = _mm512_maskz_loadu_ps(k, src[0] + i), b = _mm512_maskz_loadu_ps(k, src[1] + i);
    __m512 d = _mm512_maskz_loadu_ps(k, src[2] + i), e = _mm512_maskz_loadu_ps(k, src[3] + i);
    if (_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(d, e, _CMP_UNORD_Q)) {
      const float *part[4] = {src[0] + i, src[1] + i, src[2] + i, src[3] + i};
      k_max_rows(dst + i, part, 4, c - i >= 16 ? 16 : c - i);
      continue;
    }
    __m512 m = _mm512_max_ps(b, a);
    m = _mm512_max_ps(d, m);
    _mm512_mask_storeu_ps(dst + i, k, _mm512_max_ps(e, m));
  }
}

/* k_max4_512 as a k_max_fn (the direct convolutions' max4, k_conv_pool_cols), n being 4.  The
   rows were stored by zmm, and a narrower load than the store it reads (a ymm from the upper
   half of a zmm store still in flight) is not forwarded from the store but waits for it. */
static inline __attribute__((target("avx512f"))) void
k_max4_512_fn(float *dst, const float *const *src, int n, int64_t c) {
  (void)n;
  k_max4_512(dst, src, c);
}
#endif

/* conv.c: the epilogue of dense (rows, oc) output rows: bias + relu (or bias alone) in one
   vector pass, anything else npuK_epilogue_f32; the bits of npuK_epilogue_f32 either way. */
void npuK_conv_epilogue_f32(const npuK_epilogue *ep, int64_t rows, int64_t oc, float *y);

#endif
