/* The kernels that a build without vmath.h's vector layer (aarch64, x86-64-v2) runs in place of the
 * vector ones, against references: conv.c's convolution over patches and a product (ggmlpy_conv2d_f32,
 * its bias, residual and ReLU; the product here is a plain column-major sgemm standing in for
 * OpenBLAS's), its max pooling (NaN and windows past the input) and rows.c's layer norm, at tail sizes
 * on one to three threads. Built and run by tests/test_kernels_aarch64.py under qemu-aarch64; it runs
 * (and passes) natively at any level too.
 *
 * Usage: scalar_check; prints one line per wrong case and "N wrong values"; exits 1 if any.
 */
#include <math.h>
#include <stdio.h>

#include "conv.c"
#include "rows.c"
#include "tensor_stub.h"

/* C (m x n) = A (m x k) B (k x n), column-major, no transposes: what conv.c asks of OpenBLAS */
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    if (order != ColMajor || ta != NoTrans || tb != NoTrans || alpha != 1.0f || beta != 0.0f)
        abort();
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0.0;
            for (int p = 0; p < k; p++)
                s += (double)a[i + (int64_t)p * lda] * b[p + (int64_t)j * ldb];
            c[i + (int64_t)j * ldc] = (float)s;
        }
}
void openblas_set_num_threads(int n) { (void)n; }
int openblas_get_num_threads(void) { return 1; }

/* one convolution: N images of C x H x W, M channels of K x K at stride S, pad P, groups G */
static long check_conv(int N, int C, int H, int W, int M, int K, int S, int P, int G, int flags, int nth) {
    const int OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1, Cg = C / G, Mg = M / G;
    float *x = floats((int64_t)N * C * H * W, 1u + C + H), *w = floats((int64_t)M * Cg * K * K, 2u + M);
    float *bias = floats(M, 3u), *res = floats((int64_t)N * M * OH * OW, 4u);
    float *y = malloc((size_t)N * M * OH * OW * sizeof(float));
    const int64_t xne[4] = {W, H, C, N}, wne[4] = {(int64_t)Cg * K * K, M, 1, 1}, bne[4] = {M, 1, 1, 1};
    const int64_t yne[4] = {OW, OH, M, N};
    tensor *tx = stub(xne, NULL, x), *tw = stub(wne, NULL, w), *tb = stub(bne, NULL, bias);
    tensor *tr = stub(yne, NULL, res), *ty = stub(yne, NULL, y);
    set_src(ty, 0, tx), set_src(ty, 1, tw);
    int at = 2;
    if (flags & F_BIAS)
        set_src(ty, at++, tb);
    if (flags & F_RESIDUAL)
        set_src(ty, at, tr);
    int32_t pr[P_COUNT] = {K, K, S, S, P, P, 1, 1, G, flags, 0};
    for (int ith = 0; ith < nth; ith++)
        ggmlpy_conv2d_f32(ty, ith, nth, pr);
    long wrong = 0;
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    const int g = m / Mg;
                    double s = 0.0;
                    for (int c = 0; c < Cg; c++)
                        for (int kh = 0; kh < K; kh++)
                            for (int kw = 0; kw < K; kw++) {
                                const int ih = oh * S - P + kh, iw = ow * S - P + kw;
                                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                    s += (double)x[(((int64_t)n * C + g * Cg + c) * H + ih) * W + iw] *
                                         w[(((int64_t)m * Cg + c) * K + kh) * K + kw];
                            }
                    const int64_t o = (((int64_t)n * M + m) * OH + oh) * OW + ow;
                    s += (flags & F_BIAS ? bias[m] : 0.0) + (flags & F_RESIDUAL ? res[o] : 0.0);
                    if (flags & F_RELU && s < 0.0)
                        s = 0.0;
                    if (!(fabs(y[o] - s) <= 1e-5 * (1.0 + fabs(s))) && wrong++ < 2)
                        printf("conv N%d C%d %dx%d M%d K%d S%d P%d G%d flags %d threads %d: y[%lld] is %g, not %g\n",
                               N, C, H, W, M, K, S, P, G, flags, nth, (long long)o, y[o], s);
                }
    free(x), free(w), free(bias), free(res), free(y), free(tx), free(tw), free(tb), free(tr), free(ty);
    return wrong;
}

/* one max pooling of C planes of H x W: windows K x K at stride S from pad P, a NaN in the first plane */
static long check_pool(int C, int H, int W, int K, int S, int P, int nth) {
    const int OH = (H + 2 * P - K) / S + 1, OW = (W + 2 * P - K) / S + 1;
    float *x = floats((int64_t)C * H * W, 5u + H * 3u + W), *y = malloc((size_t)C * OH * OW * sizeof(float));
    x[H * W / 2] = NAN;
    const int64_t xne[4] = {W, H, C, 1}, yne[4] = {OW, OH, C, 1};
    tensor *tx = stub(xne, NULL, x), *ty = stub(yne, NULL, y);
    set_src(ty, 0, tx);
    int32_t pr[6] = {K, K, S, S, P, P};
    for (int ith = 0; ith < nth; ith++)
        ggmlpy_maxpool2d_f32(ty, ith, nth, pr);
    long wrong = 0;
    for (int c = 0; c < C; c++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                float m = -3.40282347e+38f;
                int nan = 0;
                for (int kh = 0; kh < K; kh++)
                    for (int kw = 0; kw < K; kw++) {
                        const int ih = oh * S - P + kh, iw = ow * S - P + kw;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                            continue;
                        const float v = x[((int64_t)c * H + ih) * W + iw];
                        nan |= v != v;
                        m = v > m ? v : m;
                    }
                const float got = y[((int64_t)c * OH + oh) * OW + ow];
                if (!(nan ? got != got : got == m) && wrong++ < 2)
                    printf("pool C%d %dx%d K%d S%d P%d threads %d: y[%d, %d, %d] is %g, not %g\n", C, H, W, K, S, P,
                           nth, c, oh, ow, got, nan ? NAN : m);
            }
    free(x), free(y), free(tx), free(ty);
    return wrong;
}

/* layer norm of `rows` rows of R values, with scale and shift */
static long check_layernorm(int R, int rows, int nth) {
    float *x = floats((int64_t)R * rows, 6u + R), *gm = floats(R, 7u), *bt = floats(R, 8u);
    float *y = malloc((size_t)R * rows * sizeof(float));
    const int64_t xne[4] = {R, rows, 1, 1}, pne[4] = {R, 1, 1, 1};
    tensor *tx = stub(xne, NULL, x), *tg = stub(pne, NULL, gm), *tb = stub(pne, NULL, bt), *ty = stub(xne, NULL, y);
    set_src(ty, 0, tx), set_src(ty, 1, tg), set_src(ty, 2, tb);
    const float eps = 1e-5f;
    int32_t pr[2] = {0, 3};
    memcpy(&pr[0], &eps, sizeof eps);
    for (int ith = 0; ith < nth; ith++)
        ggmlpy_layernorm_f32(ty, ith, nth, pr);
    long wrong = 0;
    for (int r = 0; r < rows; r++) {
        double mean = 0.0, var = 0.0;
        for (int i = 0; i < R; i++)
            mean += x[(int64_t)r * R + i];
        mean /= R;
        for (int i = 0; i < R; i++)
            var += (x[(int64_t)r * R + i] - mean) * (x[(int64_t)r * R + i] - mean);
        const double inv = 1.0 / sqrt(var / R + eps);
        for (int i = 0; i < R; i++) {
            const double want = (x[(int64_t)r * R + i] - mean) * inv * gm[i] + bt[i];
            const float got = y[(int64_t)r * R + i];
            if (!(fabs(got - want) <= 1e-5 * (1.0 + fabs(want))) && wrong++ < 2)
                printf("layer norm R%d threads %d: y[%d, %d] is %g, not %g\n", R, nth, r, i, got, want);
        }
    }
    free(x), free(gm), free(bt), free(y), free(tx), free(tg), free(tb), free(ty);
    return wrong;
}

int main(void) {
    long wrong = 0;
    for (int nth = 1; nth <= 3; nth++) {
        wrong += check_conv(1, 3, 13, 11, 5, 3, 1, 1, 1, F_BIAS | F_RELU, nth);
        wrong += check_conv(2, 4, 9, 17, 6, 3, 2, 1, 2, F_BIAS | F_RESIDUAL | F_RELU, nth);
        wrong += check_conv(1, 8, 7, 7, 9, 1, 1, 0, 1, F_RESIDUAL, nth);
        wrong += check_conv(1, 3, 23, 21, 4, 7, 2, 3, 1, 0, nth);
        for (int W = 1; W <= 37; W += 6)
            wrong += check_pool(2, 9, W, 3, W % 2 + 1, 1, nth);
        for (int R = 1; R <= 70; R += 23)
            wrong += check_layernorm(R, 5, nth);
    }
    printf("%ld wrong values\n", wrong);
    return wrong != 0;
}
