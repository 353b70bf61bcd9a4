/* kacc512.h: what the AVX-512 tiles share: the float64 accumulation of the filter-gradient
 * tiles (conv_bwd.c's float32 tiles, conv_bwd_bf16.c's VDPBF16PS ones: a register of 16
 * float32 block sums added into 16 float64 accumulators, the lanes outside mask k neither read
 * nor written), and the 16 x 16 transpose of 32-bit lanes the GEMMs pack with.  Private to
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

/* r[i] (16 lanes of 32 bits each) := the transpose: r[e][i] = old r[i][e] (gemm_bf16.c packs
   pairs of bfloat16 with it, gemm_f32.c float32 columns of a transposed B). */
static inline __attribute__((always_inline, target("avx512f"))) void
k_transpose16x32(__m512i *r) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) { /* pairs of rows, 32-bit interleaved */
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) { /* u[i + q]: element 4L + q of rows i..i+3, lane L */
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int q = 0; q < 4; q++) { /* lanes L of the four row groups make element 4L + q */
    __m512i ab_lo = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x44);
    __m512i ab_hi = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xee);
    __m512i cd_lo = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x44);
    __m512i cd_hi = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xee);
    r[q] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0x88);
    r[4 + q] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0xdd);
    r[8 + q] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0x88);
    r[12 + q] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0xdd);
  }
}

#endif
