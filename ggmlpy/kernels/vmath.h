/* Vector exp for the AVX-512 kernels (rnn.c's gates, attention.c's softmax): range reduction by
 * ln 2 in two parts, a degree-6 polynomial and scalef, about 1 ulp. Inputs are clamped to
 * [-104, 88.7] (min and max return their second operand when one is NaN: a NaN stays NaN); the
 * result is 0 below the smallest float, and exp(-inf) = 0. */
#ifndef GGMLPY_VMATH_H
#define GGMLPY_VMATH_H

#ifdef __AVX512F__
#include <immintrin.h>

static inline __m512 vexp(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(88.7f), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);  /* ln 2's high part: n of it is exact */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);  /* p 2^n, to 0 below the smallest float */
}
#endif

#endif
