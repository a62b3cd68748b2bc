/* Fused element-wise kernels for ggml's CPU backend, as ggml custom ops (ggml_map_custom1/2).
 *
 * ggml's own gelu_erf calls erff one element at a time, and GELU's backward is a graph of a
 * dozen element-wise ops; each function here is one pass written so that gcc -O3 vectorises it:
 * no branches in the loop (both sides are computed and one is selected), no libm calls.
 *
 * Phi(x), the standard normal CDF, comes from two approximations fitted for this file (weighted
 * least squares in float64, checked in float32):
 *   |x| < sqrt 2:   Phi(x) = 1/2 + x C(x^2)                      (C: degree 6)
 *   |x| >= sqrt 2:  Q(|x|) = 1 - Phi(|x|) = e(x) u S(u), u = 1/|x| (S: Chebyshev, degree 11)
 * where e(x) = exp(-x^2/2), computed with x^2's rounding error carried (fma) so that the far
 * tails keep their relative accuracy; Phi(x) = Q(|x|) for x < 0 is never 1 - something.
 * The exponential is range-reduced (x = n ln2 + r, |r| <= ln2/2) with 2^n applied in two
 * halves, so that results down to the denormals are right.
 *
 * Tensors are contiguous f32, their fields read through fields.h.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fields.h"
#include "vmath.h"

/* This thread's share [*lo, *hi) of n elements, in blocks of 16 (no two threads on a cache line). */
static inline void share(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = ((n + nth - 1) / nth + 15) & ~(int64_t)15;
    *lo = per * ith < n ? per * ith : n;
    *hi = *lo + per < n ? *lo + per : n;
}

static inline float pow2i(int32_t n) {  /* 2^n for -126 <= n <= 127 */
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* exp(a) for -113 <= a <= 0 (the callers clamp), NaN propagating. */
static inline float exp_neg(float a) {
    const float shift = 12582912.0f;  /* 1.5 * 2^23: adding it rounds to an integer */
    float k = fmaf(a, 1.44269504088896341f, shift) - shift;
    float r = fmaf(k, -0.693145751953125f, a);        /* ln 2, high part (exact product) */
    r = fmaf(k, -1.42860682030941723e-06f, r);        /* ln 2, low part */
    float p = 0.0013830913230776787f;
    p = fmaf(p, r, 0.008374780416488647f);
    p = fmaf(p, r, 0.04166833311319351f);
    p = fmaf(p, r, 0.1666642129421234f);
    p = fmaf(p, r, 0.49999991059303284f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    int32_t n = (int32_t)k;  /* k is integral; NaN gives garbage here but p is NaN already */
    int32_t n1 = n / 2;
    return p * pow2i(n1) * pow2i(n - n1);
}

/* Chebyshev series of S(u) = Q(1/u) e^{1/(2u^2)} / u on u in [1/15, 1/sqrt 2]. */
static const float S_A = 3.1228526f, S_B = -1.2081902f;  /* t = A u + B maps it onto [-1, 1] */
static const float S_C[12] = {
    0.35298871994018555f, -0.04920824617147446f, -0.002905038418248296f, 0.0017720740288496017f,
    -0.00032400674535892904f, 1.752349635353312e-05f, 9.358101124234963e-06f, -3.850886969303247e-06f,
    7.960395578265889e-07f, -5.9750078662546e-08f, -2.6863652635711333e-08f, 1.3727509795558035e-08f};

#define X_MAX 15.0f  /* past it, Q underflows float32 (Q(15) ~ 4e-51): x is clamped there */

/* Phi(x) into *cdf, exp(-x^2/2) into *e, and for |x| >= sqrt 2, |x| Q(|x|) = e S(u) into *xq
 * (GELU's tail without the rounding of u = 1/|x| and without a subnormal Q times a large x). */
static inline void normal(float x, float *cdf, float *e, float *xq) {
    float a = fabsf(x);
    a = a > X_MAX ? X_MAX : a;                          /* keeps NaN */
    float h = a * a;
    float l = fmaf(a, a, -h);                           /* a^2 = h + l exactly */
    float ex = exp_neg(-0.5f * h) * fmaf(-0.5f, l, 1.0f);
    /* centre */
    float c = 4.335774690389371e-07f;
    c = fmaf(c, h, -8.848329343891237e-06f);
    c = fmaf(c, h, 0.00011464289127616212f);
    c = fmaf(c, h, -0.0011867777211591601f);
    c = fmaf(c, h, 0.009973372332751751f);
    c = fmaf(c, h, -0.06649035960435867f);
    c = fmaf(c, h, 0.3989422917366028f);
    float centre = fmaf(x, c, 0.5f);
    /* tail (Clenshaw) */
    float u = 1.0f / a;
    float t = fmaf(u, S_A, S_B), t2 = t + t;
    /* the steps written out: a loop here stops gcc from vectorising the loop over elements */
    float b1 = S_C[11], b2 = 0.0f, b0;
#define STEP(k) b0 = fmaf(t2, b1, S_C[k] - b2); b2 = b1; b1 = b0;
    STEP(10) STEP(9) STEP(8) STEP(7) STEP(6) STEP(5) STEP(4) STEP(3) STEP(2) STEP(1)
#undef STEP
    float s = fmaf(t, b1, S_C[0] - b2);
    float es = ex * s;
    float q = es * u;
    float tail = x > 0.0f ? 1.0f - q : q;
    *cdf = a < 1.41421356f ? centre : tail;             /* NaN takes the tail: NaN */
    *e = ex;
    *xq = es;
}

/* y = x Phi(x) = x/2 (1 + erf(x / sqrt 2)); with AVX-512 or AVX2 vmath.h's vgelu (about half the
 * work of normal()'s two branches), a vector a step with the tail masked */
void ggmlpy_gelu_erf_f32(void *dst, const void *src, int ith, int nth, void *userdata) {
    (void)userdata;
    const float *restrict x = data_of(src);
    float *restrict y = data_of(dst);
    int64_t lo, hi;
    share(nelements(dst), ith, nth, &lo, &hi);
#ifdef VW
    for (int64_t i = lo; i < hi; i += VW)
        vstoreu_n(y + i, hi - i, vgelu(vloadu_n(x + i, hi - i)));
#else
    for (int64_t i = lo; i < hi; i++) {
        float cdf, e, xq;
        normal(x[i], &cdf, &e, &xq);
        /* in the tails x Phi(x) is x - |x| Q(|x|) or -|x| Q(|x|); below -X_MAX it underflows to -0
         * (and -inf * 0 would be NaN) */
        float tail = x[i] > 0.0f ? x[i] - xq : (x[i] < -X_MAX ? -0.0f : -xq);
        y[i] = fabsf(x[i]) < 1.41421356f ? x[i] * cdf : tail;  /* NaN takes the tail: NaN */
    }
#endif
}

/* gelu'(x) = Phi(x) + x phi(x) or gelu''(x) = phi(x) (2 - x^2): GELU's derivatives as values,
 * for the forward-over-reverse products (hvp) that differentiate GELU's backward once more.
 * x is clamped at X_MAX where a factor of it meets phi's underflow (inf * 0 would be NaN). */
void ggmlpy_gelu_deriv_f32(void *dst, const void *src, int ith, int nth, void *userdata) {
    const float *restrict x = data_of(src);
    float *restrict y = data_of(dst);
    const int second = userdata != NULL;  /* NULL: gelu', otherwise gelu'' */
    int64_t lo, hi;
    share(nelements(dst), ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        float cdf, e, xq;
        normal(x[i], &cdf, &e, &xq);
        float xc = x[i] > X_MAX ? X_MAX : (x[i] < -X_MAX ? -X_MAX : x[i]);
        float phi = e * 0.398942280401432678f;
        y[i] = second ? phi * fmaf(-xc, xc, 2.0f) : fmaf(xc, phi, cdf);
    }
}

/* f(x) with x's NaN put back: ggml's clamp and leaky_relu compare, a comparison with NaN is false,
 * and they map NaN to a number. fx and x have one shape. */
void ggmlpy_keep_nan_f32(void *dst, const void *fx, const void *src, int ith, int nth, void *userdata) {
    (void)userdata;
    const float *restrict f = data_of(fx);
    const float *restrict x = data_of(src);
    float *restrict y = data_of(dst);
    int64_t lo, hi;
    share(nelements(dst), ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        y[i] = x[i] != x[i] ? x[i] : f[i];
}

/* The larger (userdata NULL) or smaller of two tensors of one shape, NaN where either is NaN
 * (numpy's maximum and minimum, onnxruntime's Max and Min), exact for every number and infinity. */
void ggmlpy_extremum_f32(void *dst, const void *pa, const void *pb, int ith, int nth, void *userdata) {
    const float *restrict a = data_of(pa);
    const float *restrict b = data_of(pb);
    float *restrict y = data_of(dst);
    int64_t lo, hi;
    share(nelements(dst), ith, nth, &lo, &hi);
    if (userdata == NULL) {
        for (int64_t i = lo; i < hi; i++)
            y[i] = a[i] != a[i] || b[i] != b[i] ? a[i] + b[i] : (a[i] > b[i] ? a[i] : b[i]);
    } else {
        for (int64_t i = lo; i < hi; i++)
            y[i] = a[i] != a[i] || b[i] != b[i] ? a[i] + b[i] : (a[i] < b[i] ? a[i] : b[i]);
    }
}

/* The sum of each row (ne0 elements) of a contiguous f32 tensor, accumulated in double as ggml's
 * sum_rows does, with the rows shared among the threads (ggml computes sum_rows on thread 0
 * alone) and eight accumulators a row, so that the additions are not one chain of dependent
 * double adds. A ggml_custom_4d node: its source is argument 0, its shape [1, ne1, ne2, ne3]. */
void ggmlpy_sum_rows_f32(void *dst, int ith, int nth, void *userdata) {
    (void)userdata;
    const void *src = src_of(dst, 0);
    int64_t ne[4];
    ne_of(src, ne);
    const float *x = data_of(src);
    float *y = data_of(dst);
    const int64_t n = ne[0], rows = ne[1] * ne[2] * ne[3];
    int64_t lo, hi;
    share(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *row = x + r * n;
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++)
                acc[j] += (double)row[i + j];
        double sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; i < n; i++)
            sum += (double)row[i];
        y[r] = (float)sum;
    }
}

/* ggml's CROSS_ENTROPY_LOSS, -sum(labels * log_softmax(logits)) / rows, computed by thread 0 alone:
 * ggml's own kernel adds up its threads' partial sums, so its last bits follow the thread count, and
 * a custom op has no barrier to add fixed pieces' sums after them (pieces.h). Each row as ggml's
 * (its max, the log of the sum of exp in double, the row's products summed in double), the rows'
 * sums added in float in order: ggml's result on one thread. Sources: logits, labels, of one shape,
 * rows contiguous; dst a scalar. A ggml_custom_4d node of one task. */
void ggmlpy_cross_entropy_f32(void *dst, int ith, int nth, void *userdata) {
    (void)nth;
    (void)userdata;
    if (ith != 0)
        return;
    const void *lt = src_of(dst, 0), *yt = src_of(dst, 1);
    int64_t ne[4], nbl[4], nby[4];
    ne_of(lt, ne);
    nb_of(lt, nbl);
    nb_of(yt, nby);
    const char *logits = (const char *)data_of(lt), *labels = (const char *)data_of(yt);
    const int64_t nc = ne[0];
    float total = 0.0f;
    for (int64_t i3 = 0; i3 < ne[3]; i3++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++)
            for (int64_t i1 = 0; i1 < ne[1]; i1++) {
                const float *x = (const float *)(logits + i1 * nbl[1] + i2 * nbl[2] + i3 * nbl[3]);
                const float *y = (const float *)(labels + i1 * nby[1] + i2 * nby[2] + i3 * nby[3]);
                float max = -INFINITY;
                for (int64_t i = 0; i < nc; i++)
                    max = max > x[i] ? max : x[i];
                double sum = 0.0;
                for (int64_t i = 0; i < nc; i++)
                    sum += (double)expf(x[i] - max);
                const float lse = logf((float)sum);
                double row = 0.0;
                for (int64_t i = 0; i < nc; i++)
                    row += (double)(((x[i] - max) + -lse) * y[i]);
                total += (float)row;
            }
    *(float *)data_of(dst) = total * (-1.0f / (float)(ne[1] * ne[2] * ne[3]));
}

/* max(x, 0) keeping NaN (ggml's relu maps it to 0) and with relu(-inf) = 0, PyTorch's and
 * onnxruntime's values; a select that gcc vectorises. dst may be src itself (a graph computes it
 * in place where src has no other reader): element i is read before it is written, and no other,
 * which `ivdep` tells gcc so that the aliasing case is vectorised too. */
void ggmlpy_relu_f32(void *dst, const void *src, int ith, int nth, void *userdata) {
    (void)userdata;
    const float *x = data_of(src);
    float *y = data_of(dst);
    int64_t lo, hi;
    share(nelements(dst), ith, nth, &lo, &hi);
#pragma GCC ivdep
    for (int64_t i = lo; i < hi; i++)
        y[i] = x[i] > 0.0f ? x[i] : (x[i] != x[i] ? x[i] : 0.0f);
}

/* dx = g (Phi(x) + x phi(x)), phi(x) = exp(-x^2/2) / sqrt(2 pi) */
void ggmlpy_gelu_back_f32(void *dst, const void *grad, const void *src, int ith, int nth, void *userdata) {
    (void)userdata;
    const float *restrict g = data_of(grad);
    const float *restrict x = data_of(src);
    float *restrict dx = data_of(dst);
    int64_t lo, hi;
    share(nelements(dst), ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        float cdf, e, xq;
        normal(x[i], &cdf, &e, &xq);
        float xc = x[i] > X_MAX ? X_MAX : (x[i] < -X_MAX ? -X_MAX : x[i]);  /* inf * 0 would be NaN */
        dx[i] = g[i] * fmaf(xc, e * 0.398942280401432678f, cdf);
    }
}

/* Sum of n floats in 16 independent lanes: gcc vectorises it without reassociating anything
 * itself (-O3, no -ffast-math); each lane sums n/16 terms, so the rounding stays float32's. */
#define LANES 16
static inline float lane_sum(const float *acc) {
    float s = 0.0f;
    for (int k = 0; k < LANES; k++)
        s += acc[k];
    return s;
}

/* Layer norm's input gradient, column by column (d = ne0 rows):
 *   y = (x - mean x) r,  r = 1 / sqrt(var x + eps)  (biased variance, as ggml_norm),
 *   dx = r (g - mean g - y mean(g y)).
 * The mean first, then the centred sums (two passes, as ggml_norm: no cancellation in the
 * variance). eps is the float whose bits userdata carries. */
void ggmlpy_layer_norm_back_f32(void *dst, const void *grad, const void *src, int ith, int nth, void *userdata) {
    uint32_t bits = (uint32_t)(uintptr_t)userdata;
    float eps;
    memcpy(&eps, &bits, sizeof eps);
    int64_t ne[4];
    ne_of(src, ne);
    const int64_t d = ne[0], cols = ne[1] * ne[2] * ne[3];
    const float *restrict g = data_of(grad);
    const float *restrict x = data_of(src);
    float *restrict dx = data_of(dst);
    int64_t lo = cols * ith / nth, hi = cols * (ith + 1) / nth;
    for (int64_t j = lo; j < hi; j++) {
        const float *restrict xj = x + j * d, *restrict gj = g + j * d;
        float *restrict oj = dx + j * d;
        float sx[LANES] = {0}, sg[LANES] = {0}, sxx[LANES] = {0}, sgx[LANES] = {0};
        int64_t i, body = d - d % LANES;
        for (i = 0; i < body; i += LANES)
            for (int k = 0; k < LANES; k++) {
                sx[k] += xj[i + k];
                sg[k] += gj[i + k];
            }
        for (; i < d; i++) {
            sx[0] += xj[i];
            sg[0] += gj[i];
        }
        const float mean = lane_sum(sx) / (float)d, mg = lane_sum(sg) / (float)d;
        for (i = 0; i < body; i += LANES)
            for (int k = 0; k < LANES; k++) {
                float c = xj[i + k] - mean;
                sxx[k] = fmaf(c, c, sxx[k]);
                sgx[k] = fmaf(gj[i + k], c, sgx[k]);
            }
        for (; i < d; i++) {
            float c = xj[i] - mean;
            sxx[0] = fmaf(c, c, sxx[0]);
            sgx[0] = fmaf(gj[i], c, sgx[0]);
        }
        const float r = 1.0f / sqrtf(lane_sum(sxx) / (float)d + eps);
        /* y mean(g y) = (x - mean) r^2 mean(g (x - mean)) */
        const float k2 = r * r * lane_sum(sgx) / (float)d;
        for (i = 0; i < d; i++)
            oj[i] = r * (gj[i] - mg - (xj[i] - mean) * k2);
    }
}

/* onnxruntime's QLinearAdd of two tensors of one shape holding integer values (MLAS on CPUs with a
 * fused multiply-add): c = round_half_even(fma(a - za, r_ac, (b - zb) * r_bc)) + zc, saturated to
 * [lo, hi], with r_ac = scale_a / scale_c and r_bc = scale_b / scale_c in float32. The fused
 * multiply-add is computed in double, where (a - za) r_ac is exact (a 9-bit integer times a 24-bit
 * float): one rounding to float32, as the fused instruction's. A value whose product rounded first
 * lies on the other side of a half-integer (x + 0.5 w, a box's centre) rounds as onnxruntime's.
 * userdata: int32_t[7] = za, zb, zc, the bits of r_ac and r_bc, lo, hi. */
void ggmlpy_qlinear_add_f32(void *dst, const void *pa, const void *pb, int ith, int nth, void *userdata) {
    const int32_t *p = (const int32_t *)userdata;
    const float za = (float)p[0], zb = (float)p[1], zc = (float)p[2], lo = (float)p[5], hi = (float)p[6];
    float rac, rbc;
    memcpy(&rac, &p[3], sizeof rac);
    memcpy(&rbc, &p[4], sizeof rbc);
    const float *restrict a = data_of(pa);
    const float *restrict b = data_of(pb);
    float *restrict y = data_of(dst);
    int64_t i0, i1;
    share(nelements(dst), ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const float q = (b[i] - zb) * rbc;
        const float v = (float)((double)(a[i] - za) * (double)rac + (double)q);
        /* half to even: adding and removing 1.5 * 2^23 lets float32 addition round (|v| < 2^22) */
        float r = fabsf(v) < 4194304.0f ? (v + 12582912.0f) - 12582912.0f : v;
        r += zc;
        y[i] = r < lo ? lo : (r > hi ? hi : r);
    }
}
