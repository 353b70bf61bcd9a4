/* reduce.c: sum / mean / max / min / prod over a set of axes, and argmax / argmin.
 *
 * x is dense (dims); axes in axes_mask are reduced; out holds the kept elements in row-major
 * order. The fast path groups dims into alternating kept/reduced blocks; when the innermost
 * block is reduced each output is a fold over contiguous runs (scalar mode), when it is kept
 * the outputs of a row are reduced together as vectors (vector mode).
 *
 * Accuracy: float32 sum, mean and prod accumulate in float64 and round once (docs/numerics.md):
 * runs are summed in 16 float64 lanes added pairwise, vector mode adds rows four at a time
 * into float64 accumulators, and a few long outputs are cut into pieces whose partial sums are
 * added in ascending order. Other types (and max, min) combine in the element type, ascending.
 * Determinism: every order above is fixed by the shape alone; threads only pick up whole
 * outputs, output row chunks or pieces, so results are the same bits at any thread count.
 * The reference twin folds each output's inputs one at a time in ascending index order (f32
 * sum/mean/prod in float64): bitwise equal to the fast path except for those, which agree to
 * within the float32 rounding of two float64 sums (one ulp).
 */
#include <math.h>
#include <string.h>

#include "kernels/kutil.h"

/* ---- plan: dtype-independent geometry ----------------------------------------------------- */

typedef struct red_plan {
  int64_t n_out;    /* number of outputs */
  int64_t count;    /* inputs per output */
  int inner_kept;   /* innermost group is kept: vector mode */
  int64_t inner;    /* vector mode: size of the innermost kept group */
  k_geom gk;        /* kept groups (minus the innermost one in vector mode), input strides */
  k_geom gr;        /* reduced groups, input strides */
} red_plan;

static void red_plan_init(red_plan *p, int ndim, const int64_t *dims, uint32_t mask) {
  int64_t gsize[NPUK_MAX_DIMS], gstride[NPUK_MAX_DIMS];
  int gred[NPUK_MAX_DIMS], ng = 0;
  p->n_out = 1;
  p->count = 1;
  for (int d = 0; d < ndim; d++) {
    int red = (mask >> d) & 1u;
    if (red) p->count *= dims[d];
    else p->n_out *= dims[d];
    if (dims[d] == 1) continue;
    if (ng > 0 && gred[ng - 1] == red) {
      gsize[ng - 1] *= dims[d];
    } else {
      gsize[ng] = dims[d];
      gred[ng] = red;
      ng++;
    }
  }
  k_dense_strides(ng, gsize, gstride);
  int64_t kd[NPUK_MAX_DIMS], ks[NPUK_MAX_DIMS], rd[NPUK_MAX_DIMS], rs[NPUK_MAX_DIMS];
  int nk = 0, nr = 0;
  p->inner_kept = ng > 0 && !gred[ng - 1];
  p->inner = p->inner_kept ? gsize[ng - 1] : 1;
  for (int g = 0; g < ng - (p->inner_kept ? 1 : 0); g++) {
    if (gred[g]) {
      rd[nr] = gsize[g];
      rs[nr++] = gstride[g];
    } else {
      kd[nk] = gsize[g];
      ks[nk++] = gstride[g];
    }
  }
  const int64_t *kss[1] = {ks}, *rss[1] = {rs};
  k_geom_init(&p->gk, nk, kd, 1, kss);
  k_geom_init(&p->gr, nr, rd, 1, rss);
}

/* ---- typed kernels ------------------------------------------------------------------------
 * A is the accumulator of sum, mean and prod: double for float32 (so a long float32 sum is as
 * good as its float64 sum rounded once), the element type otherwise (float64 sums stay
 * ascending in float64; integer sums wrap). max and min combine in the element type. */

#define F_ADD(a, v) ((a) + (v))
#define F_MUL(a, v) ((a) * (v))
#define F_MAX(a, v) (((v) > (a) || (v) != (v)) ? (v) : (a))
#define F_MIN(a, v) (((v) < (a) || (v) != (v)) ? (v) : (a))
#define I32_ADD(a, v) ((int32_t)((uint32_t)(a) + (uint32_t)(v)))
#define I32_MUL(a, v) ((int32_t)((uint32_t)(a) * (uint32_t)(v)))
#define I64_ADD(a, v) ((int64_t)((uint64_t)(a) + (uint64_t)(v)))
#define I64_MUL(a, v) ((int64_t)((uint64_t)(a) * (uint64_t)(v)))
#define I_MAX(a, v) ((v) > (a) ? (v) : (a))
#define I_MIN(a, v) ((v) < (a) ? (v) : (a))

typedef struct red_job {
  const red_plan *p;
  npuK_redop op;
  const void *x;
  void *out;
  int64_t n_chunks; /* vector mode: chunks per output row */
} red_job;

#define RED_CHUNK 1024 /* vector mode: outputs per item, accumulated in a stack array */
#define RED_LANES 16   /* float32 runs: double lanes; fixed trip counts, so -O2 vectorises */

/* acc + the sum of a contiguous float32 run, in RED_LANES double lanes (element i goes to lane
   i % RED_LANES) added pairwise at the end, or one by one when the run is short.  Lanes start
   at -0.0, the identity that keeps a sum of negative zeros negative.  The order depends only
   on n, never on threads. */
static double sum_run_f32(double acc, const float *x, int64_t n) {
  if (n < 2 * RED_LANES) { /* short runs (a small reduced axis): lanes would cost more */
    for (int64_t i = 0; i < n; i++) acc += (double)x[i];
    return acc;
  }
  double lane[RED_LANES];
  for (int k = 0; k < RED_LANES; k++) lane[k] = -0.0;
  int64_t i = 0;
  for (; i + RED_LANES <= n; i += RED_LANES)
    for (int k = 0; k < RED_LANES; k++) lane[k] += (double)x[i + k];
  for (int k = 0; i < n; i++, k++) lane[k] += (double)x[i];
  for (int w = RED_LANES / 2; w >= 1; w /= 2)
    for (int k = 0; k < w; k++) lane[k] += lane[k + w];
  return acc + lane[0];
}

/* Emits, for one dtype and one combine: a run fold (acc over x[0], x[stride], ...), the
   scalar-mode range (innermost group reduced: each output folds contiguous runs) and the
   vector-mode range (innermost group kept: a chunk of an output row is accumulated as a
   vector, reduced rows ascending).  FINISH(op, acc, count) gives the stored value. */
#define DEFINE_DRIVERS(T, AT, dt, name, COMBINE, RUN1, FINISH, GROUP4)                        \
  static AT fold_##dt##_##name(AT acc, const T *x, int64_t stride, int64_t n) {                \
    if (stride == 1) return RUN1(acc, x, n);                                                   \
    for (int64_t i = 0; i < n; i++) acc = COMBINE(acc, (AT)x[i * stride]);                     \
    return acc;                                                                                \
  }                                                                                            \
  static void red_scalar_##dt##_##name(void *arg, int64_t begin, int64_t end) {                \
    const red_job *j = arg;                                                                    \
    const red_plan *p = j->p;                                                                  \
    const T *x = j->x;                                                                         \
    T *out = j->out;                                                                           \
    int64_t kc[K_GEOM_MAX_DIMS], ko[1], rc[K_GEOM_MAX_DIMS], ro[1];                            \
    int rl = p->gr.ndim - 1;                                                                   \
    k_geom_seek(&p->gk, begin, kc, ko);                                                        \
    for (int64_t o = begin; o < end; o++) {                                                    \
      const T *base = x + ko[0];                                                               \
      AT acc = (AT)base[0];                                                                    \
      k_geom_seek(&p->gr, 1, rc, ro);                                                          \
      for (int64_t i = 1; i < p->count;) {                                                     \
        int64_t run = k_geom_run(&p->gr, rc, p->count - i);                                    \
        acc = fold_##dt##_##name(acc, base + ro[0], p->gr.s[0][rl], run);                      \
        i += run;                                                                              \
        k_geom_advance(&p->gr, rc, ro, run);                                                   \
      }                                                                                        \
      out[o] = FINISH(j->op, acc, p->count);                                                   \
      if (o + 1 < end) k_geom_advance(&p->gk, kc, ko, 1);                                      \
    }                                                                                          \
  }                                                                                            \
  static void red_vector_##dt##_##name(void *arg, int64_t begin, int64_t end) {                \
    const red_job *j = arg;                                                                    \
    const red_plan *p = j->p;                                                                  \
    const T *x = j->x;                                                                         \
    T *out = j->out;                                                                           \
    AT acc[RED_CHUNK];                                                                         \
    int64_t kc[K_GEOM_MAX_DIMS], ko[1], rc[K_GEOM_MAX_DIMS], ro[1];                            \
    for (int64_t it = begin; it < end; it++) {                                                 \
      int64_t row = it / j->n_chunks, c0 = (it % j->n_chunks) * RED_CHUNK;                     \
      int64_t n = p->inner - c0 < RED_CHUNK ? p->inner - c0 : RED_CHUNK;                       \
      k_geom_seek(&p->gk, row, kc, ko);                                                        \
      const T *base = x + ko[0] + c0;                                                          \
      T *o = out + row * p->inner + c0;                                                        \
      for (int64_t i = 0; i < n; i++) acc[i] = (AT)base[i];                                    \
      k_geom_seek(&p->gr, 1, rc, ro);                                                          \
      int64_t r = 1;                                                                           \
      if (GROUP4) /* four rows added together, then to acc: a quarter of acc's traffic */      \
        for (; r + 4 <= p->count; r += 4) {                                                    \
          const T *x0 = base + ro[0], *x1, *x2, *x3;                                           \
          k_geom_advance(&p->gr, rc, ro, 1);                                                   \
          x1 = base + ro[0];                                                                   \
          k_geom_advance(&p->gr, rc, ro, 1);                                                   \
          x2 = base + ro[0];                                                                   \
          k_geom_advance(&p->gr, rc, ro, 1);                                                   \
          x3 = base + ro[0];                                                                   \
          k_geom_advance(&p->gr, rc, ro, 1);                                                   \
          int64_t i = 0;                                                                       \
          for (; i + RED_LANES <= n; i += RED_LANES)                                           \
            for (int k = 0; k < RED_LANES; k++)                                                \
              acc[i + k] = COMBINE(acc[i + k], COMBINE(COMBINE((AT)x0[i + k], (AT)x1[i + k]),  \
                                                       COMBINE((AT)x2[i + k], (AT)x3[i + k]))); \
          for (; i < n; i++)                                                                   \
            acc[i] = COMBINE(acc[i], COMBINE(COMBINE((AT)x0[i], (AT)x1[i]),                    \
                                             COMBINE((AT)x2[i], (AT)x3[i])));                  \
        }                                                                                      \
      for (; r < p->count; r++) {                                                              \
        const T *xr = base + ro[0];                                                            \
        int64_t i = 0;                                                                         \
        for (; i + RED_LANES <= n; i += RED_LANES)                                             \
          for (int k = 0; k < RED_LANES; k++)                                                  \
            acc[i + k] = COMBINE(acc[i + k], (AT)xr[i + k]);                                   \
        for (; i < n; i++) acc[i] = COMBINE(acc[i], (AT)xr[i]);                                \
        k_geom_advance(&p->gr, rc, ro, 1);                                                     \
      }                                                                                        \
      for (int64_t i = 0; i < n; i++) o[i] = FINISH(j->op, acc[i], p->count);                  \
    }                                                                                          \
  }

/* Scalar mode with few outputs and long sums (a loss, a global mean): each output's inputs
   are cut into pieces whose number depends only on the shape (count / RED_PIECE, at most
   RED_PARTIALS over all outputs); the pieces are spread over the pool, each summed from -0.0
   (the exact identity), and each output adds its pieces' partial sums in ascending order.  So
   the order is still fixed by the shape; threads only change who computes a piece.  Returns
   0 (nothing done) when the shape does not call for it. */
#define RED_PIECE ((int64_t)1 << 16)
#define RED_PARTIALS 256

typedef struct split_job {
  const red_plan *p;
  const void *x;
  int64_t pieces, piece_len;
  double *partial; /* [n_out * pieces] */
} split_job;

#define DEFINE_SPLIT_SUM(T, AT, dt, RUN1, FINISH)                                              \
  static void split_range_##dt(void *arg, int64_t begin, int64_t end) {                        \
    const split_job *j = arg;                                                                  \
    const red_plan *p = j->p;                                                                  \
    int64_t kc[K_GEOM_MAX_DIMS], ko[1], rc[K_GEOM_MAX_DIMS], ro[1];                            \
    int rl = p->gr.ndim - 1;                                                                   \
    for (int64_t it = begin; it < end; it++) {                                                 \
      int64_t o = it / j->pieces, i = it % j->pieces * j->piece_len;                           \
      int64_t stop = i + j->piece_len < p->count ? i + j->piece_len : p->count;                \
      k_geom_seek(&p->gk, o, kc, ko);                                                          \
      k_geom_seek(&p->gr, i, rc, ro);                                                          \
      const T *base = (const T *)j->x + ko[0];                                                 \
      AT acc = (AT)-0.0;                                                                       \
      while (i < stop) {                                                                       \
        int64_t run = k_geom_run(&p->gr, rc, stop - i);                                        \
        if (p->gr.s[0][rl] == 1) acc = RUN1(acc, base + ro[0], run);                           \
        else                                                                                   \
          for (int64_t k = 0; k < run; k++) acc += (AT)base[ro[0] + k * p->gr.s[0][rl]];       \
        i += run;                                                                              \
        k_geom_advance(&p->gr, rc, ro, run);                                                   \
      }                                                                                        \
      j->partial[it] = acc;                                                                    \
    }                                                                                          \
  }                                                                                            \
  static int split_sum_##dt(const npuK_pool *pool, const red_plan *p, npuK_redop op,           \
                            const T *x, T *out) {                                              \
    int64_t pieces = p->count / RED_PIECE, most = RED_PARTIALS / p->n_out;                     \
    if (pieces > most) pieces = most;                                                          \
    if (pieces < 2) return 0;                                                                  \
    double partial[RED_PARTIALS];                                                              \
    split_job j = {p, x, pieces, (p->count + pieces - 1) / pieces, partial};                   \
    npuK_parallel_for(pool, p->n_out * pieces, 1, split_range_##dt, &j);                       \
    for (int64_t o = 0; o < p->n_out; o++) {                                                   \
      AT acc = partial[o * pieces];                                                            \
      for (int64_t k = 1; k < pieces; k++) acc += partial[o * pieces + k];                     \
      out[o] = FINISH(op, acc, p->count);                                                      \
    }                                                                                          \
    return 1;                                                                                  \
  }

/* Sequential runs for the types that keep the element type (and for every prod). */
#define DEFINE_SEQ_RUN(T, AT, dt, name, COMBINE)                                               \
  static AT run_##dt##_##name(AT acc, const T *x, int64_t n) {                                 \
    for (int64_t i = 0; i < n; i++) acc = COMBINE(acc, (AT)x[i]);                              \
    return acc;                                                                                \
  }

#define KEEP(op, acc, count) (acc)

#define DEFINE_REDUCE(T, AT, dt, ADD, MUL, MAX, MIN, LOWEST, HIGHEST, NAN_MEAN, SUM_RUN, ACCURATE) \
  static T finish_##dt(npuK_redop op, AT acc, int64_t count) {                                 \
    return op == NPUK_RED_MEAN ? MEAN_DIV_##dt(acc, count) : (T)acc;                           \
  }                                                                                            \
  DEFINE_SEQ_RUN(T, AT, dt, prod, MUL)                                                         \
  DEFINE_SEQ_RUN(T, T, dt, max, MAX)                                                           \
  DEFINE_SEQ_RUN(T, T, dt, min, MIN)                                                           \
  DEFINE_DRIVERS(T, AT, dt, sum, ADD, SUM_RUN, finish_##dt, ACCURATE)                          \
  DEFINE_SPLIT_SUM(T, AT, dt, SUM_RUN, finish_##dt)                                            \
  DEFINE_DRIVERS(T, AT, dt, prod, MUL, run_##dt##_prod, finish_##dt, 0)                        \
  DEFINE_DRIVERS(T, T, dt, max, MAX, run_##dt##_max, KEEP, 0)                                  \
  DEFINE_DRIVERS(T, T, dt, min, MIN, run_##dt##_min, KEEP, 0)                                  \
  static const npuK_range_fn scalar_##dt[NPUK_RED_COUNT] = {                                   \
    [NPUK_RED_SUM] = red_scalar_##dt##_sum, [NPUK_RED_MEAN] = red_scalar_##dt##_sum,           \
    [NPUK_RED_MAX] = red_scalar_##dt##_max, [NPUK_RED_MIN] = red_scalar_##dt##_min,            \
    [NPUK_RED_PROD] = red_scalar_##dt##_prod,                                                  \
  };                                                                                           \
  static const npuK_range_fn vector_##dt[NPUK_RED_COUNT] = {                                   \
    [NPUK_RED_SUM] = red_vector_##dt##_sum, [NPUK_RED_MEAN] = red_vector_##dt##_sum,           \
    [NPUK_RED_MAX] = red_vector_##dt##_max, [NPUK_RED_MIN] = red_vector_##dt##_min,            \
    [NPUK_RED_PROD] = red_vector_##dt##_prod,                                                  \
  };                                                                                           \
  static T identity_##dt(npuK_redop op) {                                                      \
    switch (op) {                                                                              \
    case NPUK_RED_PROD: return 1;                                                              \
    case NPUK_RED_MAX: return LOWEST;                                                          \
    case NPUK_RED_MIN: return HIGHEST;                                                         \
    case NPUK_RED_MEAN: return NAN_MEAN;                                                       \
    default: return 0;                                                                         \
    }                                                                                          \
  }                                                                                            \
  void npuK_reduce_##dt(const npuK_pool *pool, npuK_redop op, int ndim, const int64_t *dims,   \
                        uint32_t axes_mask, const T *x, T *out) {                              \
    if ((unsigned)op >= NPUK_RED_COUNT) return;                                                \
    red_plan p;                                                                                \
    red_plan_init(&p, ndim, dims, axes_mask);                                                  \
    if (p.n_out == 0) return;                                                                  \
    if (p.count == 0) {                                                                        \
      for (int64_t o = 0; o < p.n_out; o++) out[o] = identity_##dt(op);                        \
      return;                                                                                  \
    }                                                                                          \
    red_job j = {&p, op, x, out, 1};                                                           \
    if (p.inner_kept) {                                                                        \
      j.n_chunks = (p.inner + RED_CHUNK - 1) / RED_CHUNK;                                      \
      int64_t items = p.n_out / p.inner * j.n_chunks;                                          \
      int64_t work = p.count * (p.inner < RED_CHUNK ? p.inner : RED_CHUNK);                    \
      npuK_parallel_for(pool, items, 1 + K_GRAIN_ELEMS / work, vector_##dt[op], &j);           \
    } else if (!(ACCURATE && (op == NPUK_RED_SUM || op == NPUK_RED_MEAN) &&                    \
                 split_sum_##dt(pool, &p, op, x, out))) {                                      \
      npuK_parallel_for(pool, p.n_out, 1 + K_GRAIN_ELEMS / p.count, scalar_##dt[op], &j);      \
    }                                                                                          \
  }                                                                                            \
  /* ref: output by output, its inputs in ascending index order, folded one at a time (sum,   \
     mean and prod in AT: float64 for float32) */                                              \
  void npuK_reduce_##dt##_ref(const npuK_pool *pool, npuK_redop op, int ndim,                  \
                              const int64_t *dims, uint32_t axes_mask, const T *x, T *out) {   \
    (void)pool;                                                                                \
    if ((unsigned)op >= NPUK_RED_COUNT) return;                                                \
    int64_t st[NPUK_MAX_DIMS], kd[NPUK_MAX_DIMS], ks[NPUK_MAX_DIMS];                           \
    int64_t rd[NPUK_MAX_DIMS], rs[NPUK_MAX_DIMS], n_out = 1, count = 1;                        \
    int nk = 0, nr = 0;                                                                        \
    k_dense_strides(ndim, dims, st);                                                           \
    for (int d = 0; d < ndim; d++) {                                                           \
      if ((axes_mask >> d) & 1u) {                                                             \
        count *= dims[d];                                                                      \
        rd[nr] = dims[d];                                                                      \
        rs[nr++] = st[d];                                                                      \
      } else {                                                                                 \
        n_out *= dims[d];                                                                      \
        kd[nk] = dims[d];                                                                      \
        ks[nk++] = st[d];                                                                      \
      }                                                                                        \
    }                                                                                          \
    for (int64_t o = 0; o < n_out; o++) {                                                      \
      int64_t base = 0, rest = o;                                                              \
      for (int d = nk - 1; d >= 0; d--) {                                                      \
        base += rest % kd[d] * ks[d];                                                          \
        rest /= kd[d];                                                                         \
      }                                                                                        \
      if (count == 0) {                                                                        \
        out[o] = identity_##dt(op);                                                            \
        continue;                                                                              \
      }                                                                                        \
      AT acc = 0;                                                                              \
      T m = 0;                                                                                 \
      for (int64_t r = 0; r < count; r++) {                                                    \
        int64_t off = base;                                                                    \
        rest = r;                                                                              \
        for (int d = nr - 1; d >= 0; d--) {                                                    \
          off += rest % rd[d] * rs[d];                                                         \
          rest /= rd[d];                                                                       \
        }                                                                                      \
        T v = x[off];                                                                          \
        if (r == 0) {                                                                          \
          acc = (AT)v;                                                                         \
          m = v;                                                                               \
          continue;                                                                            \
        }                                                                                      \
        switch (op) {                                                                          \
        case NPUK_RED_SUM: case NPUK_RED_MEAN: acc = ADD(acc, (AT)v); break;                   \
        case NPUK_RED_PROD: acc = MUL(acc, (AT)v); break;                                      \
        case NPUK_RED_MAX: m = MAX(m, v); break;                                               \
        default: m = MIN(m, v); break;                                                         \
        }                                                                                      \
      }                                                                                        \
      out[o] = op == NPUK_RED_MAX || op == NPUK_RED_MIN ? m : finish_##dt(op, acc, count);     \
    }                                                                                          \
  }

#define MEAN_DIV_f32(acc, count) ((float)((acc) / (double)(count)))
#define MEAN_DIV_f64(acc, count) ((acc) / (double)(count))
#define MEAN_DIV_i32(acc, count) ((int32_t)((int64_t)(acc) / (count)))
#define MEAN_DIV_i64(acc, count) ((acc) / (count))

DEFINE_SEQ_RUN(double, double, f64, sum, F_ADD)
DEFINE_SEQ_RUN(int32_t, int32_t, i32, sum, I32_ADD)
DEFINE_SEQ_RUN(int64_t, int64_t, i64, sum, I64_ADD)

DEFINE_REDUCE(float, double, f32, F_ADD, F_MUL, F_MAX, F_MIN, -INFINITY, INFINITY, NAN, sum_run_f32, 1)
DEFINE_REDUCE(double, double, f64, F_ADD, F_MUL, F_MAX, F_MIN, -INFINITY, INFINITY, NAN, run_f64_sum, 0)
DEFINE_REDUCE(int32_t, int32_t, i32, I32_ADD, I32_MUL, I_MAX, I_MIN, INT32_MIN, INT32_MAX, 0, run_i32_sum, 0)
DEFINE_REDUCE(int64_t, int64_t, i64, I64_ADD, I64_MUL, I_MAX, I_MIN, INT64_MIN, INT64_MAX, 0, run_i64_sum, 0)

/* ---- argmax / argmin ------------------------------------------------------------------------
 * x is (outer, axis_len, inner); out is (outer, inner). Ties keep the first index; a NaN beats
 * everything and the first NaN is kept (NumPy). Split over outputs. */

typedef struct arg_job {
  int64_t axis_len, inner;
  const void *x;
  void *out;
} arg_job;

#define BETTER_MAX(v, b) ((v) > (b) || ((v) != (v) && (b) == (b)))
#define BETTER_MIN(v, b) ((v) < (b) || ((v) != (v) && (b) == (b)))

#define DEFINE_ARG(T, dt, name, BETTER, OT, osuf)                                              \
  static void name##_range_##dt##osuf(void *arg, int64_t begin, int64_t end) {                 \
    const arg_job *j = arg;                                                                    \
    const T *x = j->x;                                                                         \
    OT *out = j->out;                                                                          \
    for (int64_t o = begin; o < end; o++) {                                                    \
      int64_t r = o / j->inner, c = o % j->inner, best_i = 0;                                  \
      const T *p = x + r * j->axis_len * j->inner + c;                                         \
      if (j->axis_len > 0) {                                                                   \
        T best = p[0];                                                                         \
        for (int64_t i = 1; i < j->axis_len; i++) {                                            \
          T v = p[i * j->inner];                                                               \
          if (BETTER(v, best)) {                                                               \
            best = v;                                                                          \
            best_i = i;                                                                        \
          }                                                                                    \
        }                                                                                      \
      }                                                                                        \
      out[o] = (OT)best_i;                                                                     \
    }                                                                                          \
  }                                                                                            \
  void npuK_##name##_##dt##osuf(const npuK_pool *pool, int64_t outer, int64_t axis_len,        \
                                int64_t inner, const T *x, OT *out) {                          \
    arg_job j = {axis_len, inner, x, out};                                                     \
    int64_t grain = 1 + K_GRAIN_ELEMS / (axis_len > 0 ? axis_len : 1);                         \
    npuK_parallel_for(pool, outer * inner, grain, name##_range_##dt##osuf, &j);                \
  }

#define DEFINE_ARGS(T, dt)                                                                     \
  DEFINE_ARG(T, dt, argmax, BETTER_MAX, int64_t, )                                             \
  DEFINE_ARG(T, dt, argmin, BETTER_MIN, int64_t, )                                             \
  DEFINE_ARG(T, dt, argmax, BETTER_MAX, int32_t, _i32)                                         \
  DEFINE_ARG(T, dt, argmin, BETTER_MIN, int32_t, _i32)

DEFINE_ARGS(float, f32)
DEFINE_ARGS(double, f64)
DEFINE_ARGS(int32_t, i32)
DEFINE_ARGS(int64_t, i64)
