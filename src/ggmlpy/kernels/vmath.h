/* The vector layer of ggmlpy's kernels: one type vf of the build's width (VW floats: 16 with
 * AVX-512, 8 with AVX2 and FMA; VW undefined below that, where the kernels take their scalar
 * paths), with loads, stores, arithmetic, tail masks, reductions and the math below (vexp, vgelu).
 * A kernel written with these is one source for both widths; each operation is one intrinsic (or
 * its AVX2 equivalent), so the AVX-512 build computes the bits it computed with the intrinsics
 * written out. Comparisons give a vbool (a __mmask16, or a lane mask in a __m256); tail masks are
 * vmask (the first n lanes: vfirst), for masked loads that read nothing past the tail and masked
 * stores that write nothing past it.
 *
 * vexp (rnn.c's gates, attention.c's softmax, vgelu): range reduction by ln 2 in two parts, a
 * degree-6 polynomial and p 2^n (scalef; with AVX2, two exact power-of-two factors, so that the one
 * rounding happens where scalef's does), about 1 ulp. Inputs are clamped to [-104, 88.7] (max and
 * min return their second operand when one is NaN: a NaN stays NaN); the result is 0 below the
 * smallest float, and exp(-inf) = 0. */
#ifndef GGMLPY_VMATH_H
#define GGMLPY_VMATH_H

#include <stdint.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define VW 16
typedef __m512 vf;
typedef __mmask16 vbool;
typedef __mmask16 vmask;
static inline vf vzero(void) { return _mm512_setzero_ps(); }
static inline vf vset1(float a) { return _mm512_set1_ps(a); }
static inline vf vload(const float *p) { return _mm512_load_ps(p); }  /* 64-byte aligned */
static inline vf vloadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm512_store_ps(p, v); }
static inline void vstoreu(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }  /* b where either is NaN */
static inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vfmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }    /* a b + c */
static inline vf vfnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }  /* c - a b */
static inline vf vfmsub(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }    /* a b - c */
static inline vf vabs(vf a) { return _mm512_abs_ps(a); }
/* the bitwise operations through integer vectors: AVX512F's own (the _ps forms need AVX512DQ) */
#define VBITS(name, op) \
    static inline vf name(vf a, vf b) { \
        return _mm512_castsi512_ps(op(_mm512_castps_si512(a), _mm512_castps_si512(b))); \
    }
VBITS(vxor, _mm512_xor_si512)
VBITS(vor, _mm512_or_si512)
VBITS(vand, _mm512_and_si512)
#undef VBITS
static inline vf vround(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT); }
static inline vf vscale2(vf p, vf n) { return _mm512_scalef_ps(p, n); }  /* p 2^n, n integral */
static inline vbool vlt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline vbool vge(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
static inline vbool vgt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline vbool visnan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
static inline vf vblend(vbool m, vf a, vf b) { return _mm512_mask_blend_ps(m, a, b); }  /* m ? b : a */
static inline vbool vbor(vbool a, vbool b) { return a | b; }
static inline vmask vfirst(int64_t n) {  /* lanes [0, n): none for n <= 0, all of them from VW on */
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}
static inline vf vloadu_mask(vmask m, const float *p) { return _mm512_maskz_loadu_ps(m, p); }  /* 0 past m */
static inline void vstoreu_mask(float *p, vmask m, vf v) { _mm512_mask_storeu_ps(p, m, v); }
static inline vf vkeep(vmask m, vf v) { return _mm512_maskz_mov_ps(m, v); }  /* 0 past m */
static inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float vhmax(vf v) { return _mm512_reduce_max_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__)
#define VW 8
typedef __m256 vf;
typedef __m256 vbool;   /* all ones or all zeros a lane */
typedef __m256i vmask;  /* the same, for maskload and maskstore */
static inline vf vzero(void) { return _mm256_setzero_ps(); }
static inline vf vset1(float a) { return _mm256_set1_ps(a); }
static inline vf vload(const float *p) { return _mm256_load_ps(p); }  /* 32-byte aligned */
static inline vf vloadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstore(float *p, vf v) { _mm256_store_ps(p, v); }
static inline void vstoreu(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }  /* b where either is NaN */
static inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vfmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vfnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
static inline vf vfmsub(vf a, vf b, vf c) { return _mm256_fmsub_ps(a, b, c); }
static inline vf vabs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline vf vxor(vf a, vf b) { return _mm256_xor_ps(a, b); }
static inline vf vor(vf a, vf b) { return _mm256_or_ps(a, b); }
static inline vf vand(vf a, vf b) { return _mm256_and_ps(a, b); }
static inline vf vround(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* p 2^n for integral n in [-150, 128] (vexp's range) and p in [0.5, 2): 2^(n/2) and 2^(n - n/2)
 * are normal floats, the first product is exact, the second rounds once (to a subnormal or 0
 * where p 2^n is one), as scalef does; a NaN p stays NaN */
static inline vf vscale2(vf p, vf n) {
    const __m256i k = _mm256_cvtps_epi32(n), k1 = _mm256_srai_epi32(k, 1), k2 = _mm256_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    const vf f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const vf f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
}
static inline vbool vlt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline vbool vge(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
static inline vbool vgt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline vbool visnan(vf a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
static inline vf vblend(vbool m, vf a, vf b) { return _mm256_blendv_ps(a, b, m); }  /* m ? b : a */
static inline vbool vbor(vbool a, vbool b) { return _mm256_or_ps(a, b); }
static inline vmask vfirst(int64_t n) {
    const int32_t k = n >= 8 ? 8 : n <= 0 ? 0 : (int32_t)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf vloadu_mask(vmask m, const float *p) { return _mm256_maskload_ps(p, m); }
static inline void vstoreu_mask(float *p, vmask m, vf v) { _mm256_maskstore_ps(p, m, v); }
static inline vf vkeep(vmask m, vf v) { return _mm256_and_ps(_mm256_castsi256_ps(m), v); }
static inline float vsum(vf v) {
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}
static inline float vhmax(vf v) {  /* the lanes' maximum, NaN lanes taken as the other operand */
    const __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 q = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(q, _mm_movehdup_ps(q)));
}
#endif

#ifdef VW
/* p[0 .. n) as a vector, zero past n (n >= VW: a plain load); the store of its first n lanes. Masked
 * stores are slow on AMD's AVX2 cores (microcoded): these take the plain ones where a vector is whole. */
static inline vf vloadu_n(const float *p, int64_t n) { return n >= VW ? vloadu(p) : vloadu_mask(vfirst(n), p); }
static inline void vstoreu_n(float *p, int64_t n, vf v) {
    if (n >= VW)
        vstoreu(p, v);
    else
        vstoreu_mask(p, vfirst(n), v);
}

static inline vf vexp(vf x) {
    x = vmax(vset1(-104.0f), vmin(vset1(88.7f), x));
    const vf n = vround(vmul(x, vset1(1.44269504f)));
    vf r = vfnmadd(n, vset1(0.693145752f), x);  /* ln 2's high part: n of it is exact */
    r = vfnmadd(n, vset1(1.42860677e-6f), r);
    vf p = vset1(1.0f / 720);
    p = vfmadd(p, r, vset1(1.0f / 120));
    p = vfmadd(p, r, vset1(1.0f / 24));
    p = vfmadd(p, r, vset1(1.0f / 6));
    p = vfmadd(p, r, vset1(0.5f));
    p = vfmadd(p, r, vset1(1.0f));
    p = vfmadd(p, r, vset1(1.0f));
    return vscale2(p, n);  /* p 2^n, to 0 below the smallest float */
}
#endif

#ifdef __AVX512F__
/* The VW x VW transpose of r (r[i] lane k = row i, column k) into o (o[k] lane i): unpacks within
 * 128-bit lanes, then lane shuffles. Used to pack panels (conv.c's linear layers, attention.c). */
static inline void vtranspose(const vf r[VW], vf o[VW]) {
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

#elif defined(VW)
static inline void vtranspose(const vf r[VW], vf o[VW]) {
    __m256 a[8], b[8];
    for (int j = 0; j < 8; j += 2) {
        a[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
        a[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int i = 0; i < 8; i += 4) {  /* b[i+e], 128-bit lane L: rows i..i+3 at k = 4L+e */
        b[i] = _mm256_shuffle_ps(a[i], a[i + 2], 0x44);
        b[i + 1] = _mm256_shuffle_ps(a[i], a[i + 2], 0xEE);
        b[i + 2] = _mm256_shuffle_ps(a[i + 1], a[i + 3], 0x44);
        b[i + 3] = _mm256_shuffle_ps(a[i + 1], a[i + 3], 0xEE);
    }
    for (int e = 0; e < 4; e++) {
        o[e] = _mm256_permute2f128_ps(b[e], b[4 + e], 0x20);
        o[4 + e] = _mm256_permute2f128_ps(b[e], b[4 + e], 0x31);
    }
}
#endif

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
#ifdef VW
static inline vf vgelu(vf x) {
    const vf a = vmin(vset1(15.0f), vabs(x));
    const vf h = vmul(a, a);
    const vf l = vfmsub(a, a, h);  /* a^2 = h + l exactly */
    const vf e = vmul(vexp(vmul(h, vset1(-0.5f))), vfmadd(l, vset1(-0.5f), vset1(1.0f)));
    vf p = vset1(0.00773651432f);
    p = vfmadd(p, a, vset1(0.0865574777f));
    p = vfmadd(p, a, vset1(0.45926708f));
    p = vfmadd(p, a, vset1(1.33826387f));
    p = vfmadd(p, a, vset1(2.0f));
    vf q = vset1(0.00308632292f);
    q = vfmadd(q, a, vset1(0.0345373116f));
    q = vfmadd(q, a, vset1(0.189243972f));
    q = vfmadd(q, a, vset1(0.605167627f));
    q = vfmadd(q, a, vset1(1.12456203f));
    q = vfmadd(q, a, vset1(1.0f));
    const vf t = vmul(a, q);
    const vf ar = vdiv(t, vfmadd(t, vset1(2.50662827f), p));  /* a phi(a) m(a) e^{a^2/2} */
    const vf aq = vmul(e, ar);                                  /* a Q(a) */
    const vbool up = vge(x, vzero());  /* -0 too: -0 - 0 = -0 */
    const vbool under = vlt(x, vset1(-15.0f));
    /* -aq by its sign bit: -0 where it underflowed to 0 */
    const vf low = vblend(under, vxor(aq, vset1(-0.0f)), vset1(-0.0f));
    return vblend(up, low, vsub(x, aq));
}
#endif

#endif
