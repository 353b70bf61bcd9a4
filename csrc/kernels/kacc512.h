/* kacc512.h: the float64 accumulation the AVX-512 filter-gradient tiles share (conv_bwd.c's
 * float32 tiles, conv_bwd_bf16.c's VDPBF16PS ones): a register of 16 float32 block sums added
 * into 16 float64 accumulators, the lanes outside mask k neither read nor written.  Private to
 * the kernels; x86-64 with GCC-style target attributes only (the includers guard it).
 */
#ifndef NPU_KERNELS_KACC512_H
#define NPU_KERNELS_KACC512_H

#include <immintrin.h>

/* a[l] += (double)t[l] for the lanes l of k; inlined into callers compiled for AVX-512F */
static inline __attribute__((always_inline, target("avx512f"))) void
k_acc_f32x16_f64(double *a, __m512 t, __mmask16 k) {
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(t));
  __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1)));
  __mmask8 klo = (__mmask8)(k & 0xff), khi = (__mmask8)(k >> 8);
  _mm512_mask_storeu_pd(a, klo, _mm512_add_pd(_mm512_maskz_loadu_pd(klo, a), lo));
  _mm512_mask_storeu_pd(a + 8, khi, _mm512_add_pd(_mm512_maskz_loadu_pd(khi, a + 8), hi));
}

#endif
