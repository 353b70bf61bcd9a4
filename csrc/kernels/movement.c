/* movement.c: dtype-agnostic data movement: transpose, concat, slice, pad, tile, broadcast_to.
 *
 * Everything is expressed in elements of elem_size bytes (1, 2, 4, 8 get typed loops, other
 * sizes go through memcpy). Most ops reduce to copy_nd: a strided gather/scatter over a k_geom
 * index space (up to 16 dims, so tile can view each dim as (multiple, dim)). Work is split over
 * output elements or output rows; nothing is reduced, so threads never change results.
 */
#include <string.h>

#include "kernels/kutil.h"

/* ---- typed helpers ------------------------------------------------------------------------ */

/* dst[i*so] = src[i*si] for i < n (kutil.h). */
void k_copy_run(char *dst, int64_t so, const char *src, int64_t si, int64_t n, size_t es) {
  if (si == 1 && so == 1) {
    memcpy(dst, src, (size_t)n * es);
    return;
  }
#define COPY_T(T)                                                                              \
  {                                                                                            \
    T *d = (T *)(void *)dst;                                                                   \
    const T *s = (const T *)(const void *)src;                                                 \
    if (si == 0) {                                                                             \
      T v = s[0];                                                                              \
      for (int64_t i = 0; i < n; i++) d[i * so] = v;                                           \
    } else {                                                                                   \
      for (int64_t i = 0; i < n; i++) d[i * so] = s[i * si];                                   \
    }                                                                                          \
    return;                                                                                    \
  }
  switch (es) {
  case 1: COPY_T(uint8_t)
  case 2: COPY_T(uint16_t)
  case 4: COPY_T(uint32_t)
  case 8: COPY_T(uint64_t)
  default:
    for (int64_t i = 0; i < n; i++)
      memcpy(dst + i * so * (int64_t)es, src + i * si * (int64_t)es, es);
  }
#undef COPY_T
}

/* n copies of the element at val (NULL: zero bytes) into dense dst. */
static void fill_elems(char *dst, const void *val, int64_t n, size_t es) {
  if (val == NULL) memset(dst, 0, (size_t)n * es);
  else k_copy_run(dst, 1, val, 0, n, es);
}

/* ---- copy_nd: y[out_off(c)] = x[in_off(c)] over dims -------------------------------------- */

typedef struct copy_job {
  k_geom g; /* op 0: input strides, op 1: output strides */
  const char *x;
  char *y;
  size_t es;
} copy_job;

static void copy_range(void *arg, int64_t begin, int64_t end) {
  const copy_job *j = arg;
  int64_t coord[K_GEOM_MAX_DIMS], off[K_MAX_OPS];
  int last = j->g.ndim - 1;
  int64_t es = (int64_t)j->es;
  k_geom_seek(&j->g, begin, coord, off);
  for (int64_t i = begin; i < end;) {
    int64_t run = k_geom_run(&j->g, coord, end - i);
    k_copy_run(j->y + off[1] * es, j->g.s[1][last], j->x + off[0] * es, j->g.s[0][last], run,
             j->es);
    i += run;
    k_geom_advance(&j->g, coord, off, run);
  }
}

/* out_strides NULL = dense (kutil.h). */
void k_copy_nd(const npuK_pool *pool, size_t es, int ndim, const int64_t *dims,
                    const int64_t *in_strides, const void *x, const int64_t *out_strides,
                    void *y) {
  int64_t dense[K_GEOM_MAX_DIMS];
  if (out_strides == NULL) {
    k_dense_strides(ndim, dims, dense);
    out_strides = dense;
  }
  copy_job j;
  const int64_t *strides[2] = {in_strides, out_strides};
  int64_t total = k_geom_init(&j.g, ndim, dims, 2, strides);
  j.x = x;
  j.y = y;
  j.es = es;
  npuK_parallel_for(pool, total, K_GRAIN_ELEMS, copy_range, &j);
}

/* ---- transpose ---------------------------------------------------------------------------- */

#define TILE 32

typedef struct tr_job {
  k_geom outer;          /* all dims but p and last; op 0 in strides, op 1 out strides */
  int64_t np, nl;        /* sizes of dim p (in stride 1) and of the last dim (out stride 1) */
  int64_t in_sl, out_sp; /* in stride of the last dim, out stride of dim p */
  int64_t tiles_p, tiles_l;
  const char *x;
  char *y;
  size_t es;
} tr_job;

#define TILE_T(T)                                                                              \
  {                                                                                            \
    const T *s = (const T *)(const void *)src;                                                 \
    T *d = (T *)(void *)dst;                                                                   \
    for (int64_t i = 0; i < ni; i++)                                                           \
      for (int64_t k = 0; k < nl; k++) d[i * j->out_sp + k] = s[i + k * j->in_sl];             \
    break;                                                                                     \
  }

static void tr_range(void *arg, int64_t begin, int64_t end) {
  const tr_job *j = arg;
  int64_t es = (int64_t)j->es, per = j->tiles_p * j->tiles_l;
  for (int64_t it = begin; it < end; it++) {
    int64_t o = it / per, t = it % per;
    int64_t p0 = (t / j->tiles_l) * TILE, l0 = (t % j->tiles_l) * TILE;
    int64_t ni = j->np - p0 < TILE ? j->np - p0 : TILE;
    int64_t nl = j->nl - l0 < TILE ? j->nl - l0 : TILE;
    int64_t coord[K_GEOM_MAX_DIMS], off[K_MAX_OPS];
    k_geom_seek(&j->outer, o, coord, off);
    const char *src = j->x + (off[0] + p0 + l0 * j->in_sl) * es;
    char *dst = j->y + (off[1] + p0 * j->out_sp + l0) * es;
    switch (j->es) {
    case 1: TILE_T(uint8_t)
    case 2: TILE_T(uint16_t)
    case 4: TILE_T(uint32_t)
    case 8: TILE_T(uint64_t)
    default:
      for (int64_t i = 0; i < ni; i++)
        for (int64_t k = 0; k < nl; k++)
          memcpy(dst + (i * j->out_sp + k) * es, src + (i + k * j->in_sl) * es, j->es);
    }
  }
}

static void transpose_geom(int ndim, const int64_t *in_dims, const int *perm, int64_t *out_dims,
                           int64_t *in_strides_perm) {
  int64_t in_strides[NPUK_MAX_DIMS];
  k_dense_strides(ndim, in_dims, in_strides);
  for (int i = 0; i < ndim; i++) {
    out_dims[i] = in_dims[perm[i]];
    in_strides_perm[i] = in_strides[perm[i]];
  }
}

void npuK_transpose(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
                    const int *perm, const void *x, void *y) {
  int64_t out_dims[NPUK_MAX_DIMS], sp[NPUK_MAX_DIMS], so[NPUK_MAX_DIMS];
  transpose_geom(ndim, in_dims, perm, out_dims, sp);
  k_dense_strides(ndim, out_dims, so);
  k_geom g;
  const int64_t *strides[2] = {sp, so};
  int64_t total = k_geom_init(&g, ndim, out_dims, 2, strides);
  if (total == 0) return;
  int last = g.ndim - 1, p = -1;
  for (int d = 0; d < last; d++)
    if (g.s[0][d] == 1) p = d;
  if (g.s[0][last] == 1 || p < 0 || g.dims[last] < 4) {
    k_copy_nd(pool, elem_size, g.ndim, g.dims, g.s[0], x, g.s[1], y);
    return;
  }
  tr_job j;
  int64_t od[K_GEOM_MAX_DIMS], ois[K_GEOM_MAX_DIMS], oos[K_GEOM_MAX_DIMS];
  int no = 0;
  for (int d = 0; d < last; d++) {
    if (d == p) continue;
    od[no] = g.dims[d];
    ois[no] = g.s[0][d];
    oos[no++] = g.s[1][d];
  }
  const int64_t *os[2] = {ois, oos};
  int64_t n_outer = k_geom_init(&j.outer, no, od, 2, os);
  j.np = g.dims[p];
  j.nl = g.dims[last];
  j.in_sl = g.s[0][last];
  j.out_sp = g.s[1][p];
  j.tiles_p = (j.np + TILE - 1) / TILE;
  j.tiles_l = (j.nl + TILE - 1) / TILE;
  j.x = x;
  j.y = y;
  j.es = elem_size;
  npuK_parallel_for(pool, n_outer * j.tiles_p * j.tiles_l, 1 + K_GRAIN_ELEMS / (TILE * TILE),
                    tr_range, &j);
}

void npuK_transpose_ref(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
                        const int *perm, const void *x, void *y) {
  (void)pool;
  int64_t out_dims[NPUK_MAX_DIMS], sp[NPUK_MAX_DIMS];
  transpose_geom(ndim, in_dims, perm, out_dims, sp);
  int64_t total = k_prod(ndim, out_dims);
  for (int64_t i = 0; i < total; i++) {
    int64_t rest = i, off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
      off += (rest % out_dims[d]) * sp[d];
      rest /= out_dims[d];
    }
    memcpy((char *)y + i * (int64_t)elem_size, (const char *)x + off * (int64_t)elem_size,
           elem_size);
  }
}

/* ---- concat ------------------------------------------------------------------------------- */

typedef struct concat_job {
  int n_inputs;
  int64_t inner, total_axis;
  const int64_t *axis_dims;
  const void *const *xs;
  char *y;
  size_t es;
} concat_job;

static void concat_range(void *arg, int64_t begin, int64_t end) {
  const concat_job *j = arg;
  for (int64_t it = begin; it < end; it++) {
    int64_t o = it / j->n_inputs, prefix = 0;
    int k = (int)(it % j->n_inputs);
    for (int q = 0; q < k; q++) prefix += j->axis_dims[q];
    int64_t n = j->axis_dims[k] * j->inner;
    memcpy(j->y + (o * j->total_axis + prefix) * j->inner * (int64_t)j->es,
           (const char *)j->xs[k] + o * n * (int64_t)j->es, (size_t)n * j->es);
  }
}

void npuK_concat(const npuK_pool *pool, size_t elem_size, int n_inputs, int64_t outer,
                 const int64_t *axis_dims, int64_t inner, const void *const *xs, void *y) {
  concat_job j = {n_inputs, inner, 0, axis_dims, xs, y, elem_size};
  if (n_inputs <= 0) return;
  for (int k = 0; k < n_inputs; k++) j.total_axis += axis_dims[k];
  int64_t per = j.total_axis * inner / n_inputs;
  npuK_parallel_for(pool, outer * n_inputs, 1 + K_GRAIN_ELEMS / (per > 0 ? per : 1),
                    concat_range, &j);
}

/* ---- slice, tile, broadcast_to ------------------------------------------------------------ */

void npuK_slice(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
                const int64_t *begin, const int64_t *size, const void *x, void *y) {
  int64_t s[NPUK_MAX_DIMS], off = 0;
  k_dense_strides(ndim, in_dims, s);
  for (int d = 0; d < ndim; d++) off += begin[d] * s[d];
  if (k_prod(ndim, size) == 0) return;
  k_copy_nd(pool, elem_size, ndim, size, s, (const char *)x + off * (int64_t)elem_size, NULL, y);
}

void npuK_tile(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
               const int64_t *multiples, const void *x, void *y) {
  /* output dim d (multiples[d] * in_dims[d]) viewed as (multiples[d], in_dims[d]) */
  int64_t s[NPUK_MAX_DIMS], dims[K_GEOM_MAX_DIMS], is[K_GEOM_MAX_DIMS];
  k_dense_strides(ndim, in_dims, s);
  for (int d = 0; d < ndim; d++) {
    dims[2 * d] = multiples[d];
    is[2 * d] = 0;
    dims[2 * d + 1] = in_dims[d];
    is[2 * d + 1] = s[d];
  }
  k_copy_nd(pool, elem_size, 2 * ndim, dims, is, x, NULL, y);
}

void npuK_broadcast_to(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *out_dims,
                       const int64_t *in_strides, const void *x, void *y) {
  k_copy_nd(pool, elem_size, ndim, out_dims, in_strides, x, NULL, y);
}

/* ---- pad ---------------------------------------------------------------------------------- */

typedef struct pad_job {
  int ndim;
  int64_t in_dims[NPUK_MAX_DIMS], out_dims[NPUK_MAX_DIMS], before[NPUK_MAX_DIMS];
  int64_t in_strides[NPUK_MAX_DIMS];
  npuK_pad_mode mode;
  const void *value;
  const char *x;
  char *y;
  size_t es;
} pad_job;

/* Input index for padded coordinate i (already shifted by -before), or -1 for "constant". */
static int64_t pad_map(int64_t i, int64_t d, npuK_pad_mode mode) {
  if (i >= 0 && i < d) return i;
  switch (mode) {
  case NPUK_PAD_REFLECT: return i < 0 ? -i : 2 * (d - 1) - i;
  case NPUK_PAD_SYMMETRIC: return i < 0 ? -i - 1 : 2 * d - 1 - i;
  default: return -1;
  }
}

/* One item = one output row along the last dim. */
static void pad_range(void *arg, int64_t begin, int64_t end) {
  const pad_job *j = arg;
  int last = j->ndim - 1;
  int64_t es = (int64_t)j->es, w = j->out_dims[last], d = j->in_dims[last];
  int64_t b = j->before[last];
  for (int64_t r = begin; r < end; r++) {
    char *row = j->y + r * w * es;
    int64_t rest = r, off = 0;
    int outside = 0;
    for (int k = last - 1; k >= 0; k--) {
      int64_t c = rest % j->out_dims[k];
      rest /= j->out_dims[k];
      int64_t src = pad_map(c - j->before[k], j->in_dims[k], j->mode);
      if (src < 0) outside = 1;
      else off += src * j->in_strides[k];
    }
    if (outside) {
      fill_elems(row, j->value, w, j->es);
      continue;
    }
    const char *in = j->x + off * es;
    for (int64_t c = 0; c < w; c++) {
      if (c == b) { /* the interior run */
        memcpy(row + c * es, in, (size_t)d * j->es);
        c += d - 1;
        continue;
      }
      int64_t src = pad_map(c - b, d, j->mode);
      if (src < 0) fill_elems(row + c * es, j->value, 1, j->es);
      else memcpy(row + c * es, in + src * es, j->es);
    }
  }
}

int npuK_pad(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *in_dims,
             const int64_t *paddings, npuK_pad_mode mode, const void *value, const void *x,
             void *y) {
  if (ndim < 0 || ndim > NPUK_MAX_DIMS || (unsigned)mode > NPUK_PAD_SYMMETRIC) return -1;
  pad_job j;
  int any_empty = 0;
  for (int k = 0; k < ndim; k++) {
    int64_t lo = paddings[2 * k], hi = paddings[2 * k + 1], d = in_dims[k];
    int64_t lim = mode == NPUK_PAD_REFLECT ? d - 1 : mode == NPUK_PAD_SYMMETRIC ? d : INT64_MAX;
    if (lo < 0 || hi < 0 || (lo > 0 && lo > lim) || (hi > 0 && hi > lim)) return -1;
    j.in_dims[k] = d;
    j.before[k] = lo;
    j.out_dims[k] = d + lo + hi;
    if (d == 0) any_empty = 1;
  }
  if (ndim == 0) {
    memcpy(y, x, elem_size);
    return 0;
  }
  int64_t total = k_prod(ndim, j.out_dims);
  if (total == 0) return 0;
  if (any_empty) { /* only reachable in CONSTANT mode: nothing to copy */
    fill_elems(y, value, total, elem_size);
    return 0;
  }
  k_dense_strides(ndim, in_dims, j.in_strides);
  j.ndim = ndim;
  j.mode = mode;
  j.value = value;
  j.x = x;
  j.y = y;
  j.es = elem_size;
  int64_t w = j.out_dims[ndim - 1];
  npuK_parallel_for(pool, total / w, 1 + K_GRAIN_ELEMS / w, pad_range, &j);
  return 0;
}
