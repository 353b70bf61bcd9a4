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
   precision modes make around every reduced step (exec.c) and inside the kernels that widen
   and narrow a block at a time, so they must be cheap.  The same single rounding (half.h), so
   the same bits as the general path.
   On x86-64 CPUs with F16C (every CPU with AVX2) the float16 ones go through the hardware
   conversion, which rounds to nearest even exactly as npu_f32_to_f16 does and widens exactly:
   32 elements an iteration (four 8-lane conversions), one test for NaN per 32; a group holding
   a NaN takes the scalar path, which keeps NaN payloads as half.h documents (the hardware would
   quiet them).  The bfloat16 ones are integer arithmetic, 8 lanes of AVX2 at a time, the same
   rounding (x + 0x7fff + lsb) >> 16 with the same NaN test.  Which path runs changes no bit
   (tests/test_kernels.c compares them over all 65536 halves and a float32 sweep).
   Environment NPU_NO_F16C=1 forces the scalar path (bench/half.lua compares the two). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdatomic.h>
#include <stdlib.h>
#define CAST_F16C 1

__attribute__((target("avx2,f16c"))) static void f32_to_f16_hw(const float *x, uint16_t *y,
                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
    __m256 nan = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(c, d, _CMP_UNORD_Q));
    if (_mm256_movemask_ps(nan)) {
      for (int k = 0; k < 32; k++) y[i + k] = npu_f32_to_f16(x[i + k]);
      continue;
    }
    __m128i ha = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT);
    __m128i hb = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT);
    __m128i hc = _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT);
    __m128i hd = _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256((__m256i *)(y + i), _mm256_set_m128i(hb, ha));
    _mm256_storeu_si256((__m256i *)(y + i + 16), _mm256_set_m128i(hd, hc));
  }
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

/* Lanes of h (16-bit) holding a float16 NaN: |h| > inf, as signed compares (|h| <= 0x7fff). */
__attribute__((target("avx2,f16c"))) static inline __m256i f16_nan_lanes(__m256i h) {
  return _mm256_cmpgt_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)),
                            _mm256_set1_epi16(0x7c00));
}

__attribute__((target("avx2,f16c"))) static void f16_to_f32_hw(const uint16_t *x, float *y,
                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(x + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(x + i + 16));
    __m256i nan = _mm256_or_si256(f16_nan_lanes(a), f16_nan_lanes(b));
    if (!_mm256_testz_si256(nan, nan)) {
      for (int k = 0; k < 32; k++) y[i + k] = npu_f16_to_f32(x[i + k]);
      continue;
    }
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_castsi256_si128(a)));
    _mm256_storeu_ps(y + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1)));
    _mm256_storeu_ps(y + i + 16, _mm256_cvtph_ps(_mm256_castsi256_si128(b)));
    _mm256_storeu_ps(y + i + 24, _mm256_cvtph_ps(_mm256_extracti128_si256(b, 1)));
  }
  const __m128i magnitude = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(x + i));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), inf))) {
      for (int k = 0; k < 8; k++) y[i + k] = npu_f16_to_f32(x[i + k]);
      continue;
    }
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; i++) y[i] = npu_f16_to_f32(x[i]);
}

/* bfloat16: x + 0x7fff + ((x >> 16) & 1), the high half, for 8 non-NaN lanes at a time. */
__attribute__((target("avx2,f16c"))) static void f32_to_bf16_hw(const float *x, uint16_t *y,
                                                                  int64_t n) {
  int64_t i = 0;
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  for (; i + 16 <= n; i += 16) {
    __m256 fa = _mm256_loadu_ps(x + i), fb = _mm256_loadu_ps(x + i + 8);
    if (_mm256_movemask_ps(_mm256_cmp_ps(fa, fb, _CMP_UNORD_Q))) {
      for (int k = 0; k < 16; k++) y[i + k] = npu_f32_to_bf16(x[i + k]);
      continue;
    }
    __m256i a = _mm256_castps_si256(fa), b = _mm256_castps_si256(fb);
    a = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, bias),
                                           _mm256_and_si256(_mm256_srli_epi32(a, 16), one)), 16);
    b = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, bias),
                                           _mm256_and_si256(_mm256_srli_epi32(b, 16), one)), 16);
    /* packus works within 128-bit lanes: a0 b0 a1 b1 -> reorder the quadwords to a0 a1 b0 b1 */
    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256((__m256i *)(y + i), p);
  }
  for (; i < n; i++) y[i] = npu_f32_to_bf16(x[i]);
}

__attribute__((target("avx2,f16c"))) static void bf16_to_f32_hw(const uint16_t *x, float *y,
                                                                  int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(x + i));
    __m256i lo = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16);
    __m256i hi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16);
    _mm256_storeu_si256((__m256i *)(y + i), lo);
    _mm256_storeu_si256((__m256i *)(y + i + 8), hi);
  }
  for (; i < n; i++) y[i] = npu_bf16_to_f32(x[i]);
}

/* A CPU feature the kernels choose by is a fact of the process: probed once and kept in *known
   (0: not yet looked up, 1: no, 2: yes), as an ifunc keeps its choice; threads racing to fill it
   store the same value.  The environment variable env_off, set to anything but "" or "0", turns
   the feature off, so that tests and benchmarks can run the portable path on the same CPU. */
static int probe_once(atomic_int *known, const char *env_off, int (*probe)(void)) {
  int k = atomic_load_explicit(known, memory_order_relaxed);
  if (k == 0) {
    const char *off = getenv(env_off);
    __builtin_cpu_init();
    k = probe() && !(off && *off && strcmp(off, "0") != 0) ? 2 : 1;
    atomic_store_explicit(known, k, memory_order_relaxed);
  }
  return k == 2;
}

/* Every x86-64 CPU with AVX2 has F16C (Intel since Haswell, AMD since Excavator); asking for
   AVX2 also works with clang, whose __builtin_cpu_supports does not know "f16c".  NPU_NO_F16C
   turns it off. */
static int cpu_has_f16c(void) { return __builtin_cpu_supports("avx2") != 0; }

static int have_f16c(void) {
  static atomic_int known;
  return probe_once(&known, "NPU_NO_F16C", cpu_has_f16c);
}
#else
#define CAST_F16C 0
#endif

int npuK_f16c(void) {
#if CAST_F16C
  return have_f16c();
#else
  return 0;
#endif
}

/* Native bfloat16 dot products (AVX512_BF16's VDPBF16PS, with the AVX-512 F/BW/VL it needs):
   probed once as F16C is, and off when the environment sets NPU_NO_AVX512BF16 (not "0").  gcc
   12's __builtin_cpu_supports knows "avx512bf16"; a compiler that does not gets 0 (widening). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
static int cpu_has_bf16dot(void) {
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}
#endif

int npuK_bf16dot(void) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static atomic_int known;
  return probe_once(&known, "NPU_NO_AVX512BF16", cpu_has_bf16dot);
#else
  return 0;
#endif
}

/* AVX-512F for the float32 GEMM's tiles (gemm_f32.c): looked up once as npuK_bf16dot, off
   when the environment sets NPU_NO_AVX512 (not "0"). */
int npuK_avx512f(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  static atomic_int known; /* 0: not yet looked up, 1: no, 2: yes */
  int k = atomic_load_explicit(&known, memory_order_relaxed);
  if (k == 0) {
    const char *off = getenv("NPU_NO_AVX512");
    __builtin_cpu_init();
    k = __builtin_cpu_supports("avx512f") && !(off && *off && strcmp(off, "0") != 0) ? 2 : 1;
    atomic_store_explicit(&known, k, memory_order_relaxed);
  }
  return k == 2;
#else
  return 0;
#endif
}

void npuK_half_widen(npuK_dtype dt, const void *x, float *y, int64_t n) {
  const uint16_t *h = x;
  if (n <= 0) return;
#if CAST_F16C
  if (dt != NPUK_F32 && have_f16c()) {
    if (dt == NPUK_F16) f16_to_f32_hw(h, y, n);
    else bf16_to_f32_hw(h, y, n);
    return;
  }
#endif
  if (dt == NPUK_F32) memcpy(y, x, (size_t)n * sizeof *y);
  else if (dt == NPUK_F16) for (int64_t i = 0; i < n; i++) y[i] = npu_f16_to_f32(h[i]);
  else for (int64_t i = 0; i < n; i++) y[i] = npu_bf16_to_f32(h[i]);
}

void npuK_half_narrow(const float *x, npuK_dtype dt, void *y, int64_t n) {
  uint16_t *h = y;
  if (n <= 0) return;
#if CAST_F16C
  if (dt != NPUK_F32 && have_f16c()) {
    if (dt == NPUK_F16) f32_to_f16_hw(x, h, n);
    else f32_to_bf16_hw(x, h, n);
    return;
  }
#endif
  if (dt == NPUK_F32) memcpy(y, x, (size_t)n * sizeof *x);
  else if (dt == NPUK_F16) for (int64_t i = 0; i < n; i++) h[i] = npu_f32_to_f16(x[i]);
  else for (int64_t i = 0; i < n; i++) h[i] = npu_f32_to_bf16(x[i]);
}

static void half_range(void *arg, int64_t b, int64_t e) {
  const cast_job *j = arg;
  if (j->from == NPUK_F32)
    npuK_half_narrow((const float *)j->x + b, j->to, (uint16_t *)j->y + b, e - b);
  else
    npuK_half_widen(j->from, (const uint16_t *)j->x + b, (float *)j->y + b, e - b);
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
    /* the kernels' block conversions (pool NULL) go straight to the loop */
    if (pool == NULL || n <= K_GRAIN_ELEMS) half_range(&j, 0, n);
    else npuK_parallel_for(pool, n, K_GRAIN_ELEMS, half_range, &j);
    return 0;
  }
  npuK_parallel_for(pool, n, K_GRAIN_ELEMS, cast_range, &j);
  return 0;
}
