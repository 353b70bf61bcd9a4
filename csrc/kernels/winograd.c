/* winograd.c: conv2d by Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray, 2015), the
 * NPUK_CONV_WINOGRAD_2X3 algorithm of npuK_conv_algo; an opt-in: other bits than im2col's.
 *
 * Layouts as conv.c: x (n, in_h, in_w, c) NHWC, filter HWIO (3, 3, c, out_c), y (n, out_h,
 * out_w, out_c).  3x3 filters, stride 1, dilation 1, any padding (SAME, VALID, explicit).
 * Output tile (ti, tj) is output rows 2ti, 2ti + 1 and columns 2tj, 2tj + 1; it reads the 4x4
 * input patch from row 2ti - pad_top, column 2tj - pad_left (zeros outside x).  With
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
 *   A^T = [1 1 1 0; 0 1 -1 -1],
 * the tile is A^T [sum over c of (G g_c G^T) . (B^T d_c B)] A, "." elementwise: each of the 16
 * points p of the 4x4 transform domain is one GEMM over channels,
 *   M_p (tiles, out_c) = V_p (tiles, c) U_p (c, out_c),
 * 2.25x fewer multiplies than im2col's (tiles * 4, 9c) x (9c, out_c) product.
 *
 * Rounding (docs/numerics.md, "Winograd"): U = G g G^T in double, rounded once; V in float32,
 * two additions deep; the GEMM a float32 sum over c; the output transform four additions deep.
 * Every output obeys |y - exact| <= gamma(c + 7) * W, W the same algorithm run on |g|, |d| and
 * |A^T|, |G|, |B^T| (tests/test_kernels.c holds it against float64, with W computed there).
 *
 * Work: tiles are numbered (image, ti, tj) and cut into blocks of WINO_BLOCK_FLOATS-sized
 * transforms whose size depends only on the shapes; blocks go to scratch slots as in conv.c,
 * so the same sgemm calls run at any thread count (the same bits).  Each block: input
 * transform into V (16, bt, c), 16 sgemms into M (16, bt, out_c), output transform into rows
 * (bt * 4, out_c) (tile t's output (r, s) is row 4t + 2r + s), the epilogue on those rows,
 * then each output pixel copied to y — or, with a fused 2x2 stride-2 max pool whose windows
 * are the tiles, the tile's valid outputs pooled (pooling.c's order and NaN rule) into y.
 */
#include <string.h>

#include "kernels/kutil.h"

#define WINO_BLOCK_FLOATS (1 << 17) /* V and M of one block: ~512 KiB */

typedef float wv __attribute__((vector_size(8 * sizeof(float))));

int npuK_conv2d_winograd_fits(const npuK_window2d *w, const npuK_window2d *pool) {
  if (w->k_h != 3 || w->k_w != 3 || w->stride_h != 1 || w->stride_w != 1 || w->dilation_h != 1 ||
      w->dilation_w != 1)
    return 0;
  if (!pool) return 1;
  /* the pool's windows must be the tiles: 2x2, stride 2, from the first row and column */
  return pool->k_h == 2 && pool->k_w == 2 && pool->stride_h == 2 && pool->stride_w == 2 &&
         pool->dilation_h == 1 && pool->dilation_w == 1 && pool->pad_top == 0 &&
         pool->pad_left == 0 && pool->in_h == w->out_h && pool->in_w == w->out_w;
}

typedef struct wino_plan {
  int64_t th, tw, tiles, bt, n_blocks, n_slots;
} wino_plan;

static void wino_plan_init(wino_plan *p, const npuK_window2d *w, int64_t out_c,
                           const npuK_window2d *pool, int n_slots) {
  (void)pool; /* pooled or not, the same tiles and blocks: the same sgemm calls, so the bits */
  p->th = (w->out_h + 1) / 2;
  p->tw = (w->out_w + 1) / 2;
  p->tiles = w->n * p->th * p->tw;
  k_blocks(p->tiles, WINO_BLOCK_FLOATS / (16 * (w->c + out_c) + 4 * out_c), 16, 1024, n_slots,
           &p->bt, &p->n_blocks, &p->n_slots);
}

/* scratch: U (16, c, out_c), a row of c zeros (the padding), then per slot V (16, bt, c),
   M (16, bt, out_c) and the output rows (bt * 4, out_c) */
static int64_t slot_floats(const wino_plan *p, const npuK_window2d *w, int64_t out_c) {
  return p->bt * (16 * (w->c + out_c) + 4 * out_c);
}

size_t npuK_conv2d_winograd_scratch_size(const npuK_window2d *w, int64_t out_c,
                                         const npuK_window2d *pool, int n_slots) {
  wino_plan p;
  wino_plan_init(&p, w, out_c, pool, n_slots);
  if (p.tiles == 0 || out_c == 0) return 0;
  return (size_t)(16 * w->c * out_c + w->c + p.n_slots * slot_floats(&p, w, out_c)) *
         sizeof(float);
}

/* The _u_ep form's scratch: no room for U, which the caller holds. */
size_t npuK_conv2d_winograd_u_scratch_size(const npuK_window2d *w, int64_t out_c,
                                           const npuK_window2d *pool, int n_slots) {
  size_t all = npuK_conv2d_winograd_scratch_size(w, out_c, pool, n_slots);
  return all ? all - (size_t)(16 * w->c * out_c) * sizeof(float) : 0;
}

typedef struct wino_job {
  const npuK_window2d *w, *pool;
  wino_plan p;
  int64_t out_c;
  const float *x, *filter;
  const npuK_epilogue *ep;
  const float *u; /* U (16, c, out_c): the scratch's, or the caller's (computed once) */
  float *u_out;   /* where filter_range writes U */
  float *y, *zeros, *slots;
  int64_t slot_floats;
  /* polled between blocks (npuK_stopped): a cancelled run stops within one block's 16 GEMMs
     instead of the whole convolution (each block writes its own tiles of y, never read back) */
  const npuK_pool *stop;
} wino_job;

/* ---- the filter transform: U_p (c, out_c) = (G g G^T)_p, in double, rounded once ---- */

static void filter_range(void *arg, int64_t c0, int64_t c1) {
  const wino_job *j = arg;
  const int64_t c = j->w->c, oc = j->out_c;
  static const double G[4][3] = {{1, 0, 0}, {.5, .5, .5}, {.5, -.5, .5}, {0, 0, 1}};
  for (int64_t ci = c0; ci < c1; ci++)
    for (int64_t o = 0; o < oc; o++) {
      double g[3][3], t[4][3];
      for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++) g[kh][kw] = j->filter[((kh * 3 + kw) * c + ci) * oc + o];
      for (int a = 0; a < 4; a++)
        for (int kw = 0; kw < 3; kw++)
          t[a][kw] = G[a][0] * g[0][kw] + G[a][1] * g[1][kw] + G[a][2] * g[2][kw];
      for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
          j->u_out[((a * 4 + b) * c + ci) * oc + o] =
              (float)(t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2]);
    }
}

/* ---- the input transform: V_p[t] = (B^T d B)_p of tile t's patch, c channels at a time ---- */

/* d[16] -> v[16] in place, T a float or a vector of floats: rows first, then columns */
#define WINO_IN(T, d)                                                                      \
  do {                                                                                     \
    T s_[16];                                                                              \
    for (int q = 0; q < 4; q++) {                                                          \
      s_[0 + q] = d[0 + q] - d[8 + q];                                                     \
      s_[4 + q] = d[4 + q] + d[8 + q];                                                     \
      s_[8 + q] = d[8 + q] - d[4 + q];                                                     \
      s_[12 + q] = d[4 + q] - d[12 + q];                                                   \
    }                                                                                      \
    for (int r = 0; r < 4; r++) {                                                          \
      d[4 * r + 0] = s_[4 * r + 0] - s_[4 * r + 2];                                        \
      d[4 * r + 1] = s_[4 * r + 1] + s_[4 * r + 2];                                        \
      d[4 * r + 2] = s_[4 * r + 2] - s_[4 * r + 1];                                        \
      d[4 * r + 3] = s_[4 * r + 1] - s_[4 * r + 3];                                        \
    }                                                                                      \
  } while (0)

/* m[16] -> y[4] (y[2r + s] the output (r, s)): ((a + b) + c) and ((a - b) - c) */
#define WINO_OUT(T, m, y)                                                                  \
  do {                                                                                     \
    T t_[8];                                                                               \
    for (int q = 0; q < 4; q++) {                                                          \
      t_[q] = m[q] + m[4 + q] + m[8 + q];                                                  \
      t_[4 + q] = m[4 + q] - m[8 + q] - m[12 + q];                                         \
    }                                                                                      \
    for (int r = 0; r < 2; r++) {                                                          \
      y[2 * r + 0] = t_[4 * r + 0] + t_[4 * r + 1] + t_[4 * r + 2];                        \
      y[2 * r + 1] = t_[4 * r + 1] - t_[4 * r + 2] - t_[4 * r + 3];                        \
    }                                                                                      \
  } while (0)

static inline void tile_of(const wino_job *j, int64_t t, int64_t *nb, int64_t *ti, int64_t *tj) {
  *tj = t % j->p.tw;
  int64_t r = t / j->p.tw;
  *ti = r % j->p.th;
  *nb = r / j->p.th;
}

/* V (16, bt, c) of tiles [t0, t0 + n) */
static inline __attribute__((always_inline)) void input_transform(const wino_job *j, int64_t t0,
                                                                  int64_t n, float *v) {
  const npuK_window2d *w = j->w;
  const int64_t c = w->c, plane = j->p.bt * c;
  for (int64_t t = 0; t < n; t++) {
    int64_t nb, ti, tj;
    tile_of(j, t0 + t, &nb, &ti, &tj);
    const float *src[16];
    for (int r = 0; r < 4; r++) {
      int64_t ih = 2 * ti - w->pad_top + r;
      for (int s = 0; s < 4; s++) {
        int64_t iw = 2 * tj - w->pad_left + s;
        src[4 * r + s] = ih < 0 || ih >= w->in_h || iw < 0 || iw >= w->in_w
                             ? j->zeros
                             : j->x + ((nb * w->in_h + ih) * w->in_w + iw) * c;
      }
    }
    float *dst = v + t * c;
    int64_t ci = 0;
    for (; ci + 8 <= c; ci += 8) {
      wv d[16];
      for (int q = 0; q < 16; q++) memcpy(&d[q], src[q] + ci, sizeof d[q]);
      WINO_IN(wv, d);
      for (int q = 0; q < 16; q++) memcpy(dst + q * plane + ci, &d[q], sizeof d[q]);
    }
    for (; ci < c; ci++) {
      float d[16];
      for (int q = 0; q < 16; q++) d[q] = src[q][ci];
      WINO_IN(float, d);
      for (int q = 0; q < 16; q++) dst[q * plane + ci] = d[q];
    }
  }
}

/* rows (n * 4, out_c) of tiles [0, n) from M (16, bt, out_c) */
static inline __attribute__((always_inline)) void output_transform(const wino_job *j, int64_t n,
                                                                   const float *m, float *rows) {
  const int64_t oc = j->out_c, plane = j->p.bt * oc;
  for (int64_t t = 0; t < n; t++) {
    const float *src = m + t * oc;
    float *dst = rows + t * 4 * oc;
    int64_t o = 0;
    for (; o + 8 <= oc; o += 8) {
      wv a[16], y[4];
      for (int q = 0; q < 16; q++) memcpy(&a[q], src + q * plane + o, sizeof a[q]);
      WINO_OUT(wv, a, y);
      for (int q = 0; q < 4; q++) memcpy(dst + q * oc + o, &y[q], sizeof y[q]);
    }
    for (; o < oc; o++) {
      float a[16], y[4];
      for (int q = 0; q < 16; q++) a[q] = src[q * plane + o];
      WINO_OUT(float, a, y);
      for (int q = 0; q < 4; q++) dst[q * oc + o] = y[q];
    }
  }
}

/* The block's output rows into y: each valid output pixel, or each tile's pool */
static void store_tiles(const wino_job *j, int64_t t0, int64_t n, const float *rows) {
  const npuK_window2d *w = j->w;
  const int64_t oc = j->out_c;
  for (int64_t t = 0; t < n; t++) {
    int64_t nb, ti, tj;
    tile_of(j, t0 + t, &nb, &ti, &tj);
    const float *src = rows + t * 4 * oc;
    int64_t nr = 2 * ti + 1 < w->out_h ? 2 : 1, ns = 2 * tj + 1 < w->out_w ? 2 : 1;
    if (!j->pool) {
      for (int64_t r = 0; r < nr; r++)
        memcpy(j->y + ((nb * w->out_h + 2 * ti + r) * w->out_w + 2 * tj) * oc, src + 2 * r * oc,
               (size_t)(ns * oc) * sizeof *src);
      continue;
    }
    /* max_pool's valid positions in (kh, kw) order from -inf: the unfused bits (a VALID
       pool drops the last tile of an odd row or column) */
    if (ti >= j->pool->out_h || tj >= j->pool->out_w) continue;
    const float *src4[4] = {src, src + oc, src + 2 * oc, src + 3 * oc};
    if (ns == 1) src4[1] = src4[2];
    k_max_rows(j->y + ((nb * j->pool->out_h + ti) * j->pool->out_w + tj) * oc, src4,
               (int)(nr * ns), oc);
  }
}

static inline __attribute__((always_inline)) void wino_slots(const wino_job *j, int64_t begin,
                                                             int64_t end) {
  const wino_plan *p = &j->p;
  const int64_t c = j->w->c, oc = j->out_c;
  for (int64_t s = begin; s < end; s++) {
    float *v = j->slots + s * j->slot_floats, *m = v + 16 * p->bt * c, *rows = m + 16 * p->bt * oc;
    int64_t b0 = s * p->n_blocks / p->n_slots, b1 = (s + 1) * p->n_blocks / p->n_slots;
    for (int64_t b = b0; b < b1 && !npuK_stopped(j->stop); b++) {
      int64_t t0 = b * p->bt, n = p->tiles - t0 < p->bt ? p->tiles - t0 : p->bt;
      input_transform(j, t0, n, v);
      for (int q = 0; q < 16; q++)
        npuK_matmul_f32_blas(NULL, 0, 0, n, oc, c, v + q * p->bt * c, j->u + q * c * oc,
                             m + q * p->bt * oc);
      output_transform(j, n, m, rows);
      if (j->ep) npuK_conv_epilogue_f32(j->ep, 4 * n, oc, rows);
      store_tiles(j, t0, n, rows);
    }
  }
}

static void wino_range(void *arg, int64_t begin, int64_t end) { wino_slots(arg, begin, end); }

#if defined(__x86_64__) && defined(__GNUC__)
/* The transforms with 256-bit vectors (additions only: the same bits as the plain build). */
__attribute__((target("avx2"))) static void wino_range_avx2(void *arg, int64_t begin,
                                                            int64_t end) {
  wino_slots(arg, begin, end);
}
#endif

/* U (16, c, out_c) from filter (3, 3, c, out_c) into u, split over channels */
static void filter_transform(const npuK_pool *pool, wino_job *j, float *u) {
  j->u_out = u;
  npuK_parallel_for(pool, j->w->c, 1 + 4096 / (j->out_c > 0 ? j->out_c : 1), filter_range, j);
}

size_t npuK_conv2d_winograd_filter_size(int64_t c, int64_t out_c) {
  return (size_t)(16 * c * out_c) * sizeof(float);
}

void npuK_conv2d_winograd_filter(const npuK_pool *pool, int64_t c, int64_t out_c,
                                 const float *filter, float *u) {
  npuK_window2d w = {.c = c};
  wino_job j = {.w = &w, .out_c = out_c, .filter = filter};
  filter_transform(pool, &j, u);
}

/* filter or u (U given: the transform is skipped and the scratch has no U region: it starts
   with the zeros, npuK_conv2d_winograd_u_scratch_size) */
static void winograd(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                     const float *x, const float *filter, const float *u,
                     const npuK_epilogue *ep, const npuK_window2d *pool_window, float *y,
                     float *scratch, int n_slots) {
  wino_job j = {.w = w, .pool = pool_window, .out_c = out_c, .x = x, .filter = filter, .ep = ep,
                .y = y, .stop = pool};
  wino_plan_init(&j.p, w, out_c, pool_window, n_slots);
  if (j.p.tiles == 0 || out_c == 0) return;
  j.zeros = u ? scratch : scratch + 16 * w->c * out_c;
  j.slots = j.zeros + w->c;
  j.slot_floats = slot_floats(&j.p, w, out_c);
  memset(j.zeros, 0, (size_t)w->c * sizeof *j.zeros);
  if (u) {
    j.u = u;
  } else {
    filter_transform(pool, &j, scratch);
    j.u = scratch;
  }
  npuK_range_fn range = wino_range;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) range = wino_range_avx2;
#endif
  npuK_parallel_for(pool, j.p.n_slots, 1, range, &j);
}

void npuK_conv2d_f32_winograd_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                                 const float *x, const float *filter, const npuK_epilogue *ep,
                                 const npuK_window2d *pool_window, float *y, float *scratch,
                                 int n_slots) {
  winograd(pool, w, out_c, x, filter, NULL, ep, pool_window, y, scratch, n_slots);
}

void npuK_conv2d_f32_winograd_u_ep(const npuK_pool *pool, const npuK_window2d *w, int64_t out_c,
                                   const float *x, const float *u, const npuK_epilogue *ep,
                                   const npuK_window2d *pool_window, float *y, float *scratch,
                                   int n_slots) {
  winograd(pool, w, out_c, x, NULL, u, ep, pool_window, y, scratch, n_slots);
}
