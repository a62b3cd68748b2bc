/* Vector math for the AVX-512 kernels. vexp (rnn.c's gates, attention.c's softmax, GELU below): range reduction by
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

/* The 16 x 16 transpose of r (r[i] lane k = row i, column k) into o (o[k] lane i): unpacks within
 * 128-bit lanes, then lane shuffles. Used to pack panels (conv.c's linear layers, attention.c). */
static inline void transpose16(const __m512 r[16], __m512 o[16]) {
    __m512 a[16], b[16];
    for (int j = 0; j < 16; j += 2) {  /* a[j], a[j+1]: rows j, j+1 interleaved (k 4L+0,1 and 4L+2,3 of lane L) */
        a[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
        a[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  /* b[i+e], lane L: rows i..i+3 at k = 4L+e */
#define PD(v) _mm512_castps_pd(v)
        b[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(PD(a[i]), PD(a[i + 2])));
        b[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(PD(a[i]), PD(a[i + 2])));
        b[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(PD(a[i + 1]), PD(a[i + 3])));
        b[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(PD(a[i + 1]), PD(a[i + 3])));
#undef PD
    }
    for (int e = 0; e < 4; e++) {  /* k = 4L+e: lane L of b[e], b[4+e], b[8+e], b[12+e] */
        const __m512 c0 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0x88), c1 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0xDD);
        const __m512 d0 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0x88);
        const __m512 d1 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0xDD);
        o[e] = _mm512_shuffle_f32x4(c0, d0, 0x88);
        o[4 + e] = _mm512_shuffle_f32x4(c1, d1, 0x88);
        o[8 + e] = _mm512_shuffle_f32x4(c0, d0, 0xDD);
        o[12 + e] = _mm512_shuffle_f32x4(c1, d1, 0xDD);
    }
}

/* Exact GELU, x Phi(x), within a few ulp of float64 over the whole range (kernels.c's ggmlpy_gelu_erf_f32
 * and the linear layers' fused GELU, conv.c). With a = |x| and Q(a) = 1 - Phi(a):
 *   x >= 0: x - a Q(a),   x < 0: -a Q(a),   Q(a) = phi(a) m(a),
 * phi the normal density and m Mills' ratio, written m(a) = 1 / (a + g(a)): g falls from sqrt(2/pi)
 * at 0 to about 1/a, and is one rational P4(a) / Q5(a) on [0, 15], fitted for this file (relative
 * error 1e-8 in float64). So a Q(a) = exp(-a^2/2) a Q5 / (sqrt(2 pi) a Q5 + P4'), P4' = sqrt(2 pi) P4
 * (P4'(0) = 2 exactly: Q(0) = 1/2). Where a is large, P4' is small beside a Q5 and the rounding of
 * both polynomials mostly cancels in the ratio; where it is small, Horner's rule is accurate. Both
 * sides are products, never 1 - Phi(x) for x < 0, so the lower tail keeps its relative accuracy down
 * to the subnormals; a^2's rounding error is carried (fma) into the exponential, and the ratio is
 * formed before the exponential multiplies it (a normal result never comes from a subnormal Q).
 * Past |x| = 15, Q underflows: x itself above, -0 below (-inf -> -0, +inf -> +inf); NaN stays NaN
 * (min returns its second operand for a NaN one, and a NaN x fails both comparisons). */
static inline __m512 vgelu(__m512 x) {
    const __m512 a = _mm512_min_ps(_mm512_set1_ps(15.0f), _mm512_abs_ps(x));
    const __m512 h = _mm512_mul_ps(a, a);
    const __m512 l = _mm512_fmsub_ps(a, a, h);  /* a^2 = h + l exactly */
    const __m512 e = _mm512_mul_ps(vexp(_mm512_mul_ps(h, _mm512_set1_ps(-0.5f))),
                                   _mm512_fmadd_ps(l, _mm512_set1_ps(-0.5f), _mm512_set1_ps(1.0f)));
    __m512 p = _mm512_set1_ps(0.00773651432f);
    p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(0.0865574777f));
    p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(0.45926708f));
    p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(1.33826387f));
    p = _mm512_fmadd_ps(p, a, _mm512_set1_ps(2.0f));
    __m512 q = _mm512_set1_ps(0.00308632292f);
    q = _mm512_fmadd_ps(q, a, _mm512_set1_ps(0.0345373116f));
    q = _mm512_fmadd_ps(q, a, _mm512_set1_ps(0.189243972f));
    q = _mm512_fmadd_ps(q, a, _mm512_set1_ps(0.605167627f));
    q = _mm512_fmadd_ps(q, a, _mm512_set1_ps(1.12456203f));
    q = _mm512_fmadd_ps(q, a, _mm512_set1_ps(1.0f));
    const __m512 t = _mm512_mul_ps(a, q);
    const __m512 ar = _mm512_div_ps(t, _mm512_fmadd_ps(t, _mm512_set1_ps(2.50662827f), p));  /* a phi(a) m(a) e^{a^2/2} */
    const __m512 aq = _mm512_mul_ps(e, ar);                                                 /* a Q(a) */
    const __mmask16 up = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);  /* -0 too: -0 - 0 = -0 */
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-15.0f), _CMP_LT_OQ);
    /* -aq by its sign bit: -0 where it underflowed to 0 */
    const __m512 low = _mm512_mask_mov_ps(_mm512_xor_ps(aq, _mm512_set1_ps(-0.0f)), under, _mm512_set1_ps(-0.0f));
    return _mm512_mask_sub_ps(low, up, x, aq);
}
#endif

#endif
