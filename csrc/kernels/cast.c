/* cast.c: dtype conversion between every pair of the 9 dtypes.
 *
 * Elements go through a canonical value in chunks of CAST_CHUNK on the stack: integer and bool
 * sources load exactly into int64_t, float sources exactly into double. Stores then do ONE
 * correct rounding: narrow float targets (f16, bf16) are reached through round-to-odd
 * intermediates (int64 -> double -> float, each odd-rounded), which makes the final
 * round-to-nearest-even exact (no double rounding). float -> int truncates, NaN -> 0, out of
 * range saturates; int -> int wraps. Split over elements. float32 <-> float16 / bfloat16, the
 * conversions of the precision modes, skip the canonical value (half_range): same bits, faster.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/half.h"
#include "kernels/kutil.h"

#define CAST_CHUNK 256

static int is_float_dtype(npuK_dtype t) {
  return t == NPUK_F32 || t == NPUK_F64 || t == NPUK_F16 || t == NPUK_BF16;
}

/* double -> float rounded to odd: exact when representable, otherwise the neighbour with an
   odd last bit. Later RNE to <= 22 bits is then correctly rounded. */
static float f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d || isinf(f)) return f;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 1u) == 0) {
    /* f is RNE-rounded and even: step to the neighbour on d's side, which is odd */
    if (((double)f < d) == !signbit(f)) u++;
    else u--;
    memcpy(&f, &u, sizeof f);
  }
  return f;
}

/* int64 -> double rounded to odd (exact below 2^53). */
static double i64_to_f64_odd(int64_t v) {
  uint64_t a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  if (a < (1ull << 53)) return (double)v;
  int shift = 0;
  while ((a >> shift) >= (1ull << 53)) shift++;
  uint64_t t = a >> shift;
  if (a & ((1ull << shift) - 1)) t |= 1;
  double d = ldexp((double)t, shift);
  return v < 0 ? -d : d;
}

/* ---- loads into canonical buffers ---------------------------------------------------------- */

static void load_int(npuK_dtype t, const void *x, int64_t n, int64_t *v) {
  switch (t) {
  case NPUK_I8: for (int64_t i = 0; i < n; i++) v[i] = ((const int8_t *)x)[i]; break;
  case NPUK_U8: for (int64_t i = 0; i < n; i++) v[i] = ((const uint8_t *)x)[i]; break;
  case NPUK_I32: for (int64_t i = 0; i < n; i++) v[i] = ((const int32_t *)x)[i]; break;
  case NPUK_I64: memcpy(v, x, (size_t)n * sizeof *v); break;
  default: /* bool */
    for (int64_t i = 0; i < n; i++) v[i] = ((const uint8_t *)x)[i] != 0;
    break;
  }
}

static void load_float(npuK_dtype t, const void *x, int64_t n, double *v) {
  switch (t) {
  case NPUK_F32: for (int64_t i = 0; i < n; i++) v[i] = ((const float *)x)[i]; break;
  case NPUK_F64: memcpy(v, x, (size_t)n * sizeof *v); break;
  case NPUK_F16:
    for (int64_t i = 0; i < n; i++) v[i] = npu_f16_to_f32(((const uint16_t *)x)[i]);
    break;
  default: /* bf16 */
    for (int64_t i = 0; i < n; i++) v[i] = npu_bf16_to_f32(((const uint16_t *)x)[i]);
    break;
  }
}

/* ---- stores ------------------------------------------------------------------------------- */

#define SAT(T, LO, HI, d) ((d) != (d) ? (T)0 : (d) <= (double)(LO) ? (T)(LO) \
                           : (d) >= (double)(HI) ? (T)(HI) : (T)(d))

/* int64 and i32 maxima are not representable in double: compare against 2^63 / 2^31. */
static int64_t sat_i64(double d) {
  if (d != d) return 0;
  if (d >= 9223372036854775808.0) return INT64_MAX;
  if (d < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)d;
}

static void store_from_float(npuK_dtype t, const double *v, int64_t n, void *y) {
  switch (t) {
  case NPUK_F32: for (int64_t i = 0; i < n; i++) ((float *)y)[i] = (float)v[i]; break;
  case NPUK_F64: memcpy(y, v, (size_t)n * sizeof *v); break;
  case NPUK_F16:
    for (int64_t i = 0; i < n; i++) ((uint16_t *)y)[i] = npu_f32_to_f16(f64_to_f32_odd(v[i]));
    break;
  case NPUK_BF16:
    for (int64_t i = 0; i < n; i++) ((uint16_t *)y)[i] = npu_f32_to_bf16(f64_to_f32_odd(v[i]));
    break;
  case NPUK_I8: for (int64_t i = 0; i < n; i++) ((int8_t *)y)[i] = SAT(int8_t, -128, 127, v[i]); break;
  case NPUK_U8: for (int64_t i = 0; i < n; i++) ((uint8_t *)y)[i] = SAT(uint8_t, 0, 255, v[i]); break;
  case NPUK_I32:
    for (int64_t i = 0; i < n; i++) ((int32_t *)y)[i] = SAT(int32_t, INT32_MIN, INT32_MAX, v[i]);
    break;
  case NPUK_I64: for (int64_t i = 0; i < n; i++) ((int64_t *)y)[i] = sat_i64(v[i]); break;
  default: /* bool */
    for (int64_t i = 0; i < n; i++) ((uint8_t *)y)[i] = v[i] != 0;
    break;
  }
}

static void store_from_int(npuK_dtype t, const int64_t *v, int64_t n, void *y) {
  switch (t) {
  case NPUK_F32: for (int64_t i = 0; i < n; i++) ((float *)y)[i] = (float)v[i]; break;
  case NPUK_F64: for (int64_t i = 0; i < n; i++) ((double *)y)[i] = (double)v[i]; break;
  case NPUK_F16:
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)y)[i] = npu_f32_to_f16(f64_to_f32_odd(i64_to_f64_odd(v[i])));
    break;
  case NPUK_BF16:
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)y)[i] = npu_f32_to_bf16(f64_to_f32_odd(i64_to_f64_odd(v[i])));
    break;
  case NPUK_I8: for (int64_t i = 0; i < n; i++) ((int8_t *)y)[i] = (int8_t)(uint8_t)v[i]; break;
  case NPUK_U8: for (int64_t i = 0; i < n; i++) ((uint8_t *)y)[i] = (uint8_t)v[i]; break;
  case NPUK_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)y)[i] = (int32_t)(uint32_t)v[i]; break;
  case NPUK_I64: memcpy(y, v, (size_t)n * sizeof *v); break;
  default: /* bool */
    for (int64_t i = 0; i < n; i++) ((uint8_t *)y)[i] = v[i] != 0;
    break;
  }
}

/* ---- driver ------------------------------------------------------------------------------- */

typedef struct cast_job {
  npuK_dtype from, to;
  const char *x;
  char *y;
} cast_job;

static void cast_range(void *arg, int64_t begin, int64_t end) {
  const cast_job *j = arg;
  int64_t fs = (int64_t)npuK_dtype_size(j->from), ts = (int64_t)npuK_dtype_size(j->to);
  int from_float = is_float_dtype(j->from);
  union { int64_t i[CAST_CHUNK]; double d[CAST_CHUNK]; } buf;
  for (int64_t i = begin; i < end; i += CAST_CHUNK) {
    int64_t n = end - i < CAST_CHUNK ? end - i : CAST_CHUNK;
    if (from_float) {
      load_float(j->from, j->x + i * fs, n, buf.d);
      store_from_float(j->to, buf.d, n, j->y + i * ts);
    } else {
      load_int(j->from, j->x + i * fs, n, buf.i);
      store_from_int(j->to, buf.i, n, j->y + i * ts);
    }
  }
}

/* float32 <-> float16 / bfloat16 directly, without the canonical double: the conversions the
   precision modes make around every reduced step (exec.c), so they must be cheap.  The same
   single rounding (half.h), so the same bits as the general path.  On x86-64 CPUs with F16C
   the float16 ones go 8 at a time through the hardware conversion, which rounds to nearest
   even exactly as npu_f32_to_f16 does; a block holding a NaN takes the scalar path, which
   keeps NaN payloads as half.h documents (the hardware would quiet them). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CAST_F16C 1

__attribute__((target("avx,f16c"))) static void f32_to_f16_hw(const float *x, uint16_t *y,
                                                                int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
      for (int k = 0; k < 8; k++) y[i + k] = npu_f32_to_f16(x[i + k]);
      continue;
    }
    _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; i++) y[i] = npu_f32_to_f16(x[i]);
}

__attribute__((target("avx,f16c"))) static void f16_to_f32_hw(const uint16_t *x, float *y,
                                                                int64_t n) {
  int64_t i = 0;
  const __m128i magnitude = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(x + i));
    /* |h| > inf as signed 16-bit compares: |h| <= 0x7fff */
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), inf))) {
      for (int k = 0; k < 8; k++) y[i + k] = npu_f16_to_f32(x[i + k]);
      continue;
    }
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; i++) y[i] = npu_f16_to_f32(x[i]);
}

/* Every x86-64 CPU with AVX2 has F16C (Intel since Haswell, AMD since Excavator); asking for
   AVX2 also works with clang, whose __builtin_cpu_supports does not know "f16c". */
static int have_f16c(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}
#else
#define CAST_F16C 0
#endif

typedef struct half_job {
  cast_job c;
  int hw; /* F16C available */
} half_job;

static void half_range(void *arg, int64_t b, int64_t e) {
  const half_job *h = arg;
  const cast_job *j = &h->c;
  const float *xf = (const float *)j->x;
  const uint16_t *xh = (const uint16_t *)j->x;
  float *yf = (float *)j->y;
  uint16_t *yh = (uint16_t *)j->y;
#if CAST_F16C
  if (h->hw && j->from == NPUK_F32 && j->to == NPUK_F16) {
    f32_to_f16_hw(xf + b, yh + b, e - b);
    return;
  }
  if (h->hw && j->from == NPUK_F16) {
    f16_to_f32_hw(xh + b, yf + b, e - b);
    return;
  }
#endif
  if (j->from == NPUK_F32 && j->to == NPUK_F16)
    for (int64_t i = b; i < e; i++) yh[i] = npu_f32_to_f16(xf[i]);
  else if (j->from == NPUK_F32)
    for (int64_t i = b; i < e; i++) yh[i] = npu_f32_to_bf16(xf[i]);
  else if (j->from == NPUK_F16)
    for (int64_t i = b; i < e; i++) yf[i] = npu_f16_to_f32(xh[i]);
  else
    for (int64_t i = b; i < e; i++) yf[i] = npu_bf16_to_f32(xh[i]);
}

static int is_half(npuK_dtype t) { return t == NPUK_F16 || t == NPUK_BF16; }

int npuK_cast(const npuK_pool *pool, int64_t n, npuK_dtype from, const void *x, npuK_dtype to,
              void *y) {
  if ((unsigned)from >= NPUK_DTYPE_COUNT || (unsigned)to >= NPUK_DTYPE_COUNT) return -1;
  if (from == to && from != NPUK_BOOL) {
    if (n > 0) memcpy(y, x, (size_t)n * npuK_dtype_size(from));
    return 0;
  }
  cast_job j = {from, to, x, y};
  if ((from == NPUK_F32 && is_half(to)) || (is_half(from) && to == NPUK_F32)) {
    half_job h = {j, 0};
#if CAST_F16C
    h.hw = have_f16c();
#endif
    npuK_parallel_for(pool, n, K_GRAIN_ELEMS, half_range, &h);
    return 0;
  }
  npuK_parallel_for(pool, n, K_GRAIN_ELEMS, cast_range, &j);
  return 0;
}
