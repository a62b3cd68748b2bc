/* Row-wise kernels for ggml's CPU backend, as ggml custom ops: layer normalisation with its scale
 * and shift in one pass over each row (ggml's norm, mul and add are three passes and three nodes).
 *
 * x [R, rows...] contiguous f32; gamma and beta [R] contiguous f32 (either may be absent);
 * userdata: int32_t[2] = the bits of the float epsilon, flags (1 gamma, 2 beta; beta is the second
 * argument after x when gamma is absent). Sums run in 16 float lanes (as ggml's SIMD sums), added
 * up in double at the end of each row.
 */
#include <math.h>

#include "fields.h"

#define LANES 16

/* sum of v[0..n) */
static double lane_sum(const float *v, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += v[i + j];
    double s = 0.0;
    for (int j = 0; j < LANES; j++)
        s += acc[j];
    for (; i < n; i++)
        s += v[i];
    return s;
}

/* sum of (v - mean)^2, with d[i] = v[i] - mean (d may be v's own output row) */
static double centred_squares(const float *v, float mean, float *d, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            const float e = v[i + j] - mean;
            d[i + j] = e;
            acc[j] += e * e;
        }
    double s = 0.0;
    for (int j = 0; j < LANES; j++)
        s += acc[j];
    for (; i < n; i++) {
        const float e = v[i] - mean;
        d[i] = e;
        s += (double)e * e;
    }
    return s;
}

void ggmlpy_layernorm_f32(void *dst, int ith, int nth, void *userdata) {
    const int32_t *pr = (const int32_t *)userdata;
    float eps;
    memcpy(&eps, &pr[0], sizeof eps);
    const int flags = pr[1];
    const void *xt = src_of(dst, 0);
    int64_t ne[4];
    ne_of(xt, ne);
    const int64_t R = ne[0], rows = ne[1] * ne[2] * ne[3];
    const float *x = data_of(xt);
    const float *gamma = (flags & 1) ? data_of(src_of(dst, 1)) : NULL;
    const float *beta = (flags & 2) ? data_of(src_of(dst, (flags & 1) ? 2 : 1)) : NULL;
    float *y = data_of(dst);
    const int64_t r0 = rows * ith / nth, r1 = rows * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * R;
        float *yr = y + r * R;
        const float mean = (float)(lane_sum(xr, R) / (double)R);
        const double sq = centred_squares(xr, mean, yr, R);
        const float inv = 1.0f / sqrtf((float)(sq / (double)R) + eps);
        if (gamma && beta)
            for (int64_t i = 0; i < R; i++) yr[i] = yr[i] * inv * gamma[i] + beta[i];
        else if (gamma)
            for (int64_t i = 0; i < R; i++) yr[i] = yr[i] * inv * gamma[i];
        else if (beta)
            for (int64_t i = 0; i < R; i++) yr[i] = yr[i] * inv + beta[i];
        else
            for (int64_t i = 0; i < R; i++) yr[i] *= inv;
    }
}
