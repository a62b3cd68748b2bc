/* Row-wise kernels for ggml's CPU backend, as ggml custom ops: layer normalisation with its scale
 * and shift in one pass over each row (ggml's norm, mul and add are three passes and three nodes),
 * and ONNX TopK's indices (ggmlpy_topk_f32, below).
 *
 * x [R, rows...] contiguous f32; gamma and beta [R] contiguous f32 (either may be absent);
 * userdata: int32_t[2] = the bits of the float epsilon, flags (1 gamma, 2 beta; beta is the second
 * argument after x when gamma is absent). Sums run in 16 float lanes (as ggml's SIMD sums), added
 * up in double at the end of each row.
 */
#include <math.h>
#include <stdlib.h>

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

/* ONNX TopK's order: the value (descending when largest, else ascending), equal values by index,
 * lower first; NaN above every number. A total order, so qsort's result is that order whatever its
 * algorithm (ggml's argsort is std::sort's, which leaves equal values in any order). */
typedef struct {
    float v;
    int32_t i;
} keyed;

static int value_rank(float a, float b) { /* -1: a before b in ascending order */
    const int na = a != a, nb = b != b;
    if (na || nb)
        return na - nb;
    return (a > b) - (a < b);
}

static int ascending(const void *p, const void *q) {
    const keyed *a = (const keyed *)p, *b = (const keyed *)q;
    const int c = value_rank(a->v, b->v);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

static int descending(const void *p, const void *q) {
    const keyed *a = (const keyed *)p, *b = (const keyed *)q;
    const int c = value_rank(b->v, a->v);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

/* x [L, rows...] contiguous f32 -> dst [k, rows] int32: each row's first k indices in TopK's order.
 * userdata: int32_t[2] = k, largest. */
void ggmlpy_topk_f32(void *dst, int ith, int nth, void *userdata) {
    const int32_t *pr = (const int32_t *)userdata;
    const int64_t k = pr[0];
    const int largest = pr[1];
    const void *xt = src_of(dst, 0);
    int64_t ne[4];
    ne_of(xt, ne);
    const int64_t L = ne[0], rows = ne[1] * ne[2] * ne[3];
    const float *x = data_of(xt);
    int32_t *out = (int32_t *)data_of(dst);
    const int64_t r0 = rows * ith / nth, r1 = rows * (ith + 1) / nth;
    if (r0 >= r1)
        return;
    keyed *buf = (keyed *)malloc((size_t)L * sizeof *buf);
    if (!buf) { /* no memory to sort in: each next index is the first after the previous in the order */
        int (*cmp)(const void *, const void *) = largest ? descending : ascending;
        for (int64_t r = r0; r < r1; r++) {
            const float *xr = x + r * L;
            keyed prev = {0.0f, -1};
            for (int64_t j = 0; j < k; j++) {
                keyed best = {0.0f, -1};
                for (int64_t m = 0; m < L; m++) {
                    const keyed c = {xr[m], (int32_t)m};
                    if ((prev.i < 0 || cmp(&c, &prev) > 0) && (best.i < 0 || cmp(&c, &best) < 0))
                        best = c;
                }
                out[r * k + j] = best.i;
                prev = best;
            }
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * L;
        for (int64_t j = 0; j < L; j++) {
            buf[j].v = xr[j];
            buf[j].i = (int32_t)j;
        }
        qsort(buf, (size_t)L, sizeof *buf, largest ? descending : ascending);
        for (int64_t j = 0; j < k; j++)
            out[r * k + j] = buf[j].i;
    }
    free(buf);
}
