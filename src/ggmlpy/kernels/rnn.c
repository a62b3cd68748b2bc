/* An ONNX LSTM direction over its whole sequence as one ggml custom op (one task: each step needs
 * the one before).
 *
 * Unrolled into ggml nodes, a step is about sixteen small nodes (the recurrent product, gate
 * views, sigmoids, tanhs, products and sums) and each node costs more to dispatch than its
 * arithmetic; here a step is one pass: g = xw_t + R h_{t-1} (R's transpose packed at load, [H][4H],
 * so that the product is a sum of scaled rows over vectors of gates), then the gates (ONNX's
 * order i, o, f, c; optional peepholes), c_t = f c_{t-1} + i tanh(g_c), h_t = o tanh(c_t).
 *
 * Layout (ggml ne): xw [4H, N*T] (the input projections of every step with both biases, column
 * t*N + n for step t and batch entry n), rt [4H, H], h0 and c0 [H, N], peepholes [3H] (i, o, f);
 * dst [H, N, T + 1]: slice t is h_t, slice T the last cell state. userdata: int32_t[2] = reverse,
 * has peepholes.
 *
 * exp, sigmoid and tanh: with AVX-512 or AVX2 vmath.h's vector exp (about 1 ulp), and tanh as an
 * odd polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel); otherwise libm's expf and tanhf.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fields.h"
#include "vmath.h"

#ifdef VW
static inline vf vsigmoid(vf x) { return vdiv(vset1(1.0f), vadd(vset1(1.0f), vexp(vsub(vzero(), x)))); }

static inline vf vtanh(vf x) {
    /* |x| >= 0.125: 1 - 2 / (e^{2|x|} + 1) with x's sign; below, x + x^3 q(x^2) (Taylor to x^11) */
    const vf ax = vabs(x);
    const vf big = vsub(vset1(1.0f), vdiv(vset1(2.0f), vadd(vexp(vadd(ax, ax)), vset1(1.0f))));
    const vf x2 = vmul(x, x);
    vf q = vset1(-1382.0f / 155925);
    q = vfmadd(q, x2, vset1(62.0f / 2835));
    q = vfmadd(q, x2, vset1(-17.0f / 315));
    q = vfmadd(q, x2, vset1(2.0f / 15));
    q = vfmadd(q, x2, vset1(-1.0f / 3));
    const vf small = vfmadd(vmul(q, x2), x, x);
    const vbool is_small = vlt(ax, vset1(0.125f));
    /* x's sign onto the large branch; NaN stays NaN (neither branch's compare holds, big is NaN) */
    const vf signed_big = vor(big, vand(x, vset1(-0.0f)));
    return vblend(is_small, signed_big, small);
}

/* g[0 .. G) += sum_k h[k] rt[k G ..]: chunks of 8 vectors, then single vectors, then one at a time */
static void recurrent_product(float *g, const float *rt, const float *h, int H, int G) {
    int j = 0;
    for (; j + 8 * VW <= G; j += 8 * VW) {
        vf acc[8];
        for (int v = 0; v < 8; v++)
            acc[v] = vloadu(g + j + VW * v);
        for (int k = 0; k < H; k++) {
            const vf hk = vset1(h[k]);
            const float *row = rt + (int64_t)k * G + j;
            for (int v = 0; v < 8; v++)
                acc[v] = vfmadd(vloadu(row + VW * v), hk, acc[v]);
        }
        for (int v = 0; v < 8; v++)
            vstoreu(g + j + VW * v, acc[v]);
    }
    for (; j + VW <= G; j += VW) {
        vf acc = vloadu(g + j);
        for (int k = 0; k < H; k++)
            acc = vfmadd(vloadu(rt + (int64_t)k * G + j), vset1(h[k]), acc);
        vstoreu(g + j, acc);
    }
    for (; j < G; j++)
        for (int k = 0; k < H; k++)
            g[j] += h[k] * rt[(int64_t)k * G + j];
}

static void sigmoid_n(float *x, int n) {
    int i = 0;
    for (; i + VW <= n; i += VW)
        vstoreu(x + i, vsigmoid(vloadu(x + i)));
    for (; i < n; i++)
        x[i] = 1.0f / (1.0f + expf(-x[i]));
}

static void tanh_n(float *x, int n) {
    int i = 0;
    for (; i + VW <= n; i += VW)
        vstoreu(x + i, vtanh(vloadu(x + i)));
    for (; i < n; i++)
        x[i] = tanhf(x[i]);
}

int ggmlpy_rnn_vector_math(void) { return 1; }
#else
static void recurrent_product(float *g, const float *rt, const float *h, int H, int G) {
    for (int k = 0; k < H; k++)
        for (int j = 0; j < G; j++)
            g[j] += h[k] * rt[(int64_t)k * G + j];
}

static void sigmoid_n(float *x, int n) {
    for (int i = 0; i < n; i++)
        x[i] = 1.0f / (1.0f + expf(-x[i]));
}

static void tanh_n(float *x, int n) {
    for (int i = 0; i < n; i++)
        x[i] = tanhf(x[i]);
}

int ggmlpy_rnn_vector_math(void) { return 0; }
#endif

void ggmlpy_lstm_f32(void *dst, int ith, int nth, void *userdata) {
    (void)nth;
    if (ith != 0)  /* one task (the op is made with n_tasks = 1); never split a sequence */
        return;
    const int32_t *pr = (const int32_t *)userdata;
    const int reverse = pr[0], has_peep = pr[1];
    int64_t dne[4];
    ne_of(dst, dne);
    const int H = (int)dne[0], N = (int)dne[1], T = (int)dne[2] - 1, G = 4 * H;
    const float *xw = data_of(src_of(dst, 0)), *rt = data_of(src_of(dst, 1));
    const float *h0 = data_of(src_of(dst, 2)), *c0 = data_of(src_of(dst, 3));
    const float *peep = has_peep ? data_of(src_of(dst, 4)) : NULL;
    float *y = data_of(dst);
    float *cell = y + (int64_t)T * N * H;  /* slice T: the cell state, carried there step to step */
    float *g = malloc((size_t)G * sizeof(float));
    if (g == NULL) {  /* out of memory (a few KB): never a silently wrong value */
        for (int64_t i = 0; i < (int64_t)(T + 1) * N * H; i++)
            y[i] = __builtin_nanf("");
        return;
    }
    memcpy(cell, c0, (size_t)N * H * sizeof(float));
    for (int s = 0; s < T; s++) {
        const int t = reverse ? T - 1 - s : s, prev = reverse ? t + 1 : t - 1;
        for (int n = 0; n < N; n++) {
            const float *h = s == 0 ? h0 + (int64_t)n * H : y + ((int64_t)prev * N + n) * H;
            float *c = cell + (int64_t)n * H, *ho = y + ((int64_t)t * N + n) * H;
            memcpy(g, xw + ((int64_t)t * N + n) * G, (size_t)G * sizeof(float));
            recurrent_product(g, rt, h, H, G);
            float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
            if (peep)
                for (int k = 0; k < H; k++) {
                    gi[k] += peep[k] * c[k];
                    gf[k] += peep[2 * H + k] * c[k];
                }
            sigmoid_n(gi, H);
            sigmoid_n(gf, H);
            tanh_n(gc, H);
            for (int k = 0; k < H; k++)
                c[k] = gf[k] * c[k] + gi[k] * gc[k];
            if (peep)
                for (int k = 0; k < H; k++)
                    go[k] += peep[H + k] * c[k];
            sigmoid_n(go, H);
            memcpy(ho, c, (size_t)H * sizeof(float));
            tanh_n(ho, H);
            for (int k = 0; k < H; k++)
                ho[k] *= go[k];
        }
    }
    free(g);
}
