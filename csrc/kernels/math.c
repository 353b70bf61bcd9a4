/* math.c: elementwise math (rsqrt, sin, cos, reciprocal, sign, floor), logical not, leaky_relu,
 * atan2 and prelu with broadcasting, select over three broadcast operands, and reduce_any
 * (kmath.h).
 *
 * The broadcast kernels walk the dense output in row-major order over a simplified index
 * space (k_geom, kutil.h: size-1 dims dropped, contiguous dims merged), so the inner loop gets
 * long runs with fixed operand strides; work is split over output elements only.  Each
 * element is computed by one expression whatever the split: results never depend on threads.
 */
#include <math.h>
#include <string.h>

#include "kernels/kmath.h"
#include "kernels/kutil.h"

/* ---- a strided walk over up to K_MAX_OPS operands, output dense ------------------------ */

/* fn processes output elements [at, at + run): operand o's element i of the run is at
   off[o] + i * step[o]. */
typedef void (*walk_fn)(void *ctx, const int64_t *off, const int64_t *step, int64_t at,
                        int64_t run);

typedef struct walk_job {
  k_geom g;
  walk_fn fn;
  void *ctx;
} walk_job;

static void walk_range(void *arg, int64_t begin, int64_t end) {
  walk_job *j = arg;
  int64_t coord[K_GEOM_MAX_DIMS], off[K_MAX_OPS], step[K_MAX_OPS];
  k_geom_seek(&j->g, begin, coord, off);
  for (int o = 0; o < j->g.n_ops; o++) step[o] = j->g.s[o][j->g.ndim - 1];
  for (int64_t i = begin; i < end;) {
    int64_t run = k_geom_run(&j->g, coord, end - i);
    j->fn(j->ctx, off, step, i, run);
    i += run;
    k_geom_advance(&j->g, coord, off, run);
  }
}

static void walk(const npuK_pool *pool, int ndim, const int64_t *dims, int n_ops,
                 const int64_t *const *strides, walk_fn fn, void *ctx) {
  walk_job j = {.fn = fn, .ctx = ctx};
  int64_t total = k_geom_init(&j.g, ndim, dims, n_ops, strides);
  npuK_parallel_for(pool, total, K_GRAIN_ELEMS, walk_range, &j);
}

/* ---- elementwise unary ----------------------------------------------------------------- */

typedef struct unary_job {
  int op;
  const void *x;
  void *y;
} unary_job;

#define FLOAT_MATH(T, dt, SQRT, SIN, COS, FLOOR, CEIL)                                         \
  static void math_range_##dt(void *arg, int64_t begin, int64_t end) {                        \
    const unary_job *j = arg;                                                                 \
    const T *x = j->x;                                                                        \
    T *y = j->y;                                                                              \
    switch ((npuK_mathop)j->op) {                                                             \
    case NPUK_MATH_RSQRT:                                                                     \
      for (int64_t i = begin; i < end; i++) y[i] = (T)1 / SQRT(x[i]);                         \
      break;                                                                                  \
    case NPUK_MATH_SIN:                                                                       \
      for (int64_t i = begin; i < end; i++) y[i] = SIN(x[i]);                                 \
      break;                                                                                  \
    case NPUK_MATH_COS:                                                                       \
      for (int64_t i = begin; i < end; i++) y[i] = COS(x[i]);                                 \
      break;                                                                                  \
    case NPUK_MATH_RECIPROCAL:                                                                \
      for (int64_t i = begin; i < end; i++) y[i] = (T)1 / x[i];                               \
      break;                                                                                  \
    case NPUK_MATH_SIGN:                                                                      \
      for (int64_t i = begin; i < end; i++)                                                   \
        y[i] = (T)((x[i] > 0) - (x[i] < 0)); /* NaN -> 0, as TF documents */                 \
      break;                                                                                  \
    case NPUK_MATH_FLOOR:                                                                     \
      for (int64_t i = begin; i < end; i++) y[i] = FLOOR(x[i]);                               \
      break;                                                                                  \
    case NPUK_MATH_CEIL:                                                                      \
      for (int64_t i = begin; i < end; i++) y[i] = CEIL(x[i]);                                \
      break;                                                                                  \
    default: break;                                                                           \
    }                                                                                         \
  }                                                                                           \
  int npuK_math_##dt(const npuK_pool *pool, npuK_mathop op, int64_t n, const T *x, T *y) {    \
    if ((unsigned)op >= NPUK_MATH_COUNT) return -1;                                           \
    unary_job j = {.op = op, .x = x, .y = y};                                                 \
    npuK_parallel_for(pool, n, K_GRAIN_ELEMS, math_range_##dt, &j);                           \
    return 0;                                                                                 \
  }

FLOAT_MATH(float, f32, sqrtf, sinf, cosf, floorf, ceilf)
FLOAT_MATH(double, f64, sqrt, sin, cos, floor, ceil)

#define INT_MATH(T, dt)                                                                        \
  static void math_range_##dt(void *arg, int64_t begin, int64_t end) {                        \
    const unary_job *j = arg;                                                                 \
    const T *x = j->x;                                                                        \
    T *y = j->y;                                                                              \
    for (int64_t i = begin; i < end; i++) y[i] = (T)((x[i] > 0) - (x[i] < 0));                 \
  }                                                                                           \
  int npuK_math_##dt(const npuK_pool *pool, npuK_mathop op, int64_t n, const T *x, T *y) {    \
    if (op != NPUK_MATH_SIGN) return -1;                                                      \
    unary_job j = {.op = op, .x = x, .y = y};                                                 \
    npuK_parallel_for(pool, n, K_GRAIN_ELEMS, math_range_##dt, &j);                           \
    return 0;                                                                                 \
  }

INT_MATH(int32_t, i32)
INT_MATH(int64_t, i64)

static void not_range(void *arg, int64_t begin, int64_t end) {
  const unary_job *j = arg;
  const uint8_t *x = j->x;
  uint8_t *y = j->y;
  for (int64_t i = begin; i < end; i++) y[i] = x[i] == 0;
}

void npuK_logical_not_bool(const npuK_pool *pool, int64_t n, const uint8_t *x, uint8_t *y) {
  unary_job j = {.x = x, .y = y};
  npuK_parallel_for(pool, n, K_GRAIN_ELEMS, not_range, &j);
}

typedef struct leaky_job {
  double alpha;
  const void *x;
  void *y;
} leaky_job;

#define LEAKY(T, dt)                                                                           \
  static void leaky_range_##dt(void *arg, int64_t begin, int64_t end) {                       \
    const leaky_job *j = arg;                                                                 \
    const T *x = j->x;                                                                        \
    T *y = j->y, alpha = (T)j->alpha;                                                         \
    for (int64_t i = begin; i < end; i++) y[i] = x[i] > 0 ? x[i] : alpha * x[i];              \
  }                                                                                           \
  void npuK_leaky_relu_##dt(const npuK_pool *pool, int64_t n, T alpha, const T *x, T *y) {    \
    leaky_job j = {.alpha = alpha, .x = x, .y = y};                                           \
    npuK_parallel_for(pool, n, K_GRAIN_ELEMS, leaky_range_##dt, &j);                          \
  }

LEAKY(float, f32)
LEAKY(double, f64)

/* ---- broadcast: atan2, prelu, select ----------------------------------------------------- */

typedef struct bcast_ctx {
  size_t elem_size;
  const void *in[K_MAX_OPS];
  void *out;
} bcast_ctx;

#define BCAST(T, dt, ATAN2)                                                                    \
  static void atan2_run_##dt(void *ctx, const int64_t *off, const int64_t *step, int64_t at,  \
                             int64_t run) {                                                   \
    const bcast_ctx *c = ctx;                                                                 \
    const T *a = (const T *)c->in[0] + off[0], *b = (const T *)c->in[1] + off[1];             \
    T *o = (T *)c->out + at;                                                                  \
    for (int64_t i = 0; i < run; i++) o[i] = ATAN2(a[i * step[0]], b[i * step[1]]);           \
  }                                                                                           \
  void npuK_atan2_##dt(const npuK_pool *pool, int ndim, const int64_t *dims, const T *a,      \
                       const int64_t *a_strides, const T *b, const int64_t *b_strides,        \
                       T *out) {                                                              \
    bcast_ctx c = {.in = {a, b}, .out = out};                                                 \
    const int64_t *s[2] = {a_strides, b_strides};                                             \
    walk(pool, ndim, dims, 2, s, atan2_run_##dt, &c);                                         \
  }                                                                                           \
  static void prelu_run_##dt(void *ctx, const int64_t *off, const int64_t *step, int64_t at,  \
                             int64_t run) {                                                   \
    const bcast_ctx *c = ctx;                                                                 \
    const T *x = (const T *)c->in[0] + at, *al = (const T *)c->in[1] + off[0];                \
    T *o = (T *)c->out + at;                                                                  \
    if (step[0] == 1) {                                                                       \
      for (int64_t i = 0; i < run; i++) o[i] = x[i] > 0 ? x[i] : al[i] * x[i];                \
    } else {                                                                                  \
      for (int64_t i = 0; i < run; i++) o[i] = x[i] > 0 ? x[i] : al[i * step[0]] * x[i];      \
    }                                                                                         \
  }                                                                                           \
  void npuK_prelu_##dt(const npuK_pool *pool, int ndim, const int64_t *dims, const T *x,      \
                       const T *alpha, const int64_t *alpha_strides, T *y) {                  \
    bcast_ctx c = {.in = {x, alpha}, .out = y};                                               \
    const int64_t *s[1] = {alpha_strides};                                                    \
    walk(pool, ndim, dims, 1, s, prelu_run_##dt, &c);                                         \
  }

BCAST(float, f32, atan2f)
BCAST(double, f64, atan2)

#define SELECT_RUN(T)                                                                          \
  {                                                                                           \
    const T *x = (const T *)c->in[1] + off[1], *y = (const T *)c->in[2] + off[2];             \
    T *o = (T *)c->out + at;                                                                  \
    for (int64_t i = 0; i < run; i++) o[i] = cond[i * step[0]] ? x[i * step[1]] : y[i * step[2]]; \
    return;                                                                                   \
  }

static void select_run(void *ctx, const int64_t *off, const int64_t *step, int64_t at,
                       int64_t run) {
  const bcast_ctx *c = ctx;
  const uint8_t *cond = (const uint8_t *)c->in[0] + off[0];
  switch (c->elem_size) {
  case 1: SELECT_RUN(uint8_t)
  case 2: SELECT_RUN(uint16_t)
  case 4: SELECT_RUN(uint32_t)
  case 8: SELECT_RUN(uint64_t)
  default: break;
  }
  const size_t es = c->elem_size;
  for (int64_t i = 0; i < run; i++) {
    const char *src = cond[i * step[0]] ? (const char *)c->in[1] + (off[1] + i * step[1]) * es
                                        : (const char *)c->in[2] + (off[2] + i * step[2]) * es;
    memcpy((char *)c->out + (at + i) * es, src, es);
  }
}

void npuK_select(const npuK_pool *pool, size_t elem_size, int ndim, const int64_t *dims,
                 const uint8_t *cond, const int64_t *cond_strides, const void *x,
                 const int64_t *x_strides, const void *y, const int64_t *y_strides, void *out) {
  bcast_ctx c = {.elem_size = elem_size, .in = {cond, x, y}, .out = out};
  const int64_t *s[3] = {cond_strides, x_strides, y_strides};
  walk(pool, ndim, dims, 3, s, select_run, &c);
}

/* ---- reduce_any: serial (a cheap pass over bytes) ---------------------------------------- */

void npuK_reduce_any_bool(const npuK_pool *pool, int ndim, const int64_t *dims,
                          uint32_t axes_mask, const uint8_t *x, uint8_t *out) {
  (void)pool;
  int64_t n_out = 1, n = k_prod(ndim, dims);
  for (int d = 0; d < ndim; d++)
    if (!(axes_mask & (1u << d))) n_out *= dims[d];
  memset(out, 0, (size_t)n_out);
  int64_t coord[NPUK_MAX_DIMS] = {0};
  for (int64_t i = 0; i < n; i++) {
    if (x[i]) {
      int64_t o = 0;
      for (int d = 0; d < ndim; d++)
        if (!(axes_mask & (1u << d))) o = o * dims[d] + coord[d];
      out[o] = 1;
    }
    for (int d = ndim - 1; d >= 0; d--) { /* advance the row-major coordinate */
      if (++coord[d] < dims[d]) break;
      coord[d] = 0;
    }
  }
}
