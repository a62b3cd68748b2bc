/* conv_transpose.c (ggmlpy_conv_transpose_f32) against its definition written out one output value at
 * a time: the same chains of multiply-adds over the input channels in blocks of kblock, the kernel
 * positions added in order, then the bias; equal to the bit. Input planes of 1 to 70 pixels (every tail
 * of a tile's vectors), kernels of 1 to 9 positions (every remainder of a tile's 4 or 8 rows), 11 output channels
 * a group (blocks of whole planes, the last cut short), channels across a block's end, groups, pads,
 * dilations, one to three threads. Built by tests/test_kernels_memory.py with AddressSanitizer for each
 * x86-64 level this CPU runs, every tensor an allocation of exactly its size (tensor_stub.h).
 *
 * Usage: conv_transpose_check; prints one line per wrong case and "N wrong values"; exits 1 if any.
 */
#include <stdio.h>

#include "conv_transpose.c"
#include "tensor_stub.h"

struct geometry {
    int kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, group, kblock, bias;
};

/* one output value as conv_transpose.c's header defines it */
static float reference(const struct geometry *g, const float *x, const float *w, const float *b, int64_t H,
                       int64_t W, int64_t C, int64_t M, int64_t n, int64_t co, int64_t oy, int64_t ox) {
    const int64_t Cg = C / g->group, Mg = M / g->group, kk = (int64_t)g->kh * g->kw, gi = co / Mg, m = co % Mg;
    float y = 0.0f;
    for (int a = 0; a < g->kh; a++)
        for (int c = 0; c < g->kw; c++) {
            const int64_t ty = oy + g->pt - (int64_t)a * g->dh, tx = ox + g->pl - (int64_t)c * g->dw;
            if (ty < 0 || tx < 0 || ty % g->sh || tx % g->sw || ty / g->sh >= H || tx / g->sw >= W)
                continue;
            const int64_t p = ty / g->sh * W + tx / g->sw, r = m * kk + a * g->kw + c;
            float sum = 0.0f;
            for (int64_t k0 = 0; k0 < Cg; k0 += g->kblock) {
                float acc = 0.0f;
                for (int64_t k = k0; k < k0 + g->kblock && k < Cg; k++)
                    acc = mul_add(w[((gi * Cg + k) * Mg * kk) + r], x[((n * C + gi * Cg + k) * H * W) + p], acc);
                sum = k0 == 0 ? acc : sum + acc;
            }
            y += sum;
        }
    return g->bias ? y + b[co] : y;
}

static long check(const struct geometry *g, int64_t N, int64_t C, int64_t M, int64_t H, int64_t W, int nth) {
    const int64_t OH = (H - 1) * g->sh + (int64_t)(g->kh - 1) * g->dh + 1 - g->pt - g->pb;
    const int64_t OW = (W - 1) * g->sw + (int64_t)(g->kw - 1) * g->dw + 1 - g->pl - g->pr;
    const int64_t kk = (int64_t)g->kh * g->kw;
    if (OH < 1 || OW < 1)
        return 0;
    float *x = floats(N * C * H * W, (uint32_t)(H * 31 + W)), *w = floats(C * (M / g->group) * kk, (uint32_t)C);
    float *b = floats(M, 7u), *y = malloc((size_t)(N * M * OH * OW) * sizeof(float));
    const int64_t xne[4] = {W, H, C, N}, wne[4] = {M / g->group * kk, C / g->group, g->group, 1};
    const int64_t bne[4] = {M, 1, 1, 1}, yne[4] = {OW, OH, M, N};
    tensor *tx = stub(xne, NULL, x), *tw = stub(wne, NULL, w), *tb = stub(bne, NULL, b), *ty = stub(yne, NULL, y);
    set_src(ty, 0, tx);
    set_src(ty, 1, tw);
    set_src(ty, 2, tb);
    const int32_t params[11] = {g->kh, g->kw, g->sh, g->sw, g->dh, g->dw, g->pt, g->pl, g->group, g->kblock, g->bias};
    for (int ith = 0; ith < nth; ith++)
        ggmlpy_conv_transpose_f32(ty, ith, nth, (void *)params);
    long wrong = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t co = 0; co < M; co++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    const float want = reference(g, x, w, b, H, W, C, M, n, co, oy, ox);
                    const float got = y[((n * M + co) * OH + oy) * OW + ox];
                    if (memcmp(&got, &want, sizeof got) != 0 && wrong++ < 2)
                        printf("k %dx%d s %d,%d C %lld M %lld H %lld W %lld: y[%lld,%lld,%lld,%lld] %.9g, not %.9g\n",
                               g->kh, g->kw, g->sh, g->sw, (long long)C, (long long)M, (long long)H, (long long)W,
                               (long long)n, (long long)co, (long long)oy, (long long)ox, got, want);
                }
    free(x), free(w), free(b), free(y), free(tx), free(tw), free(tb), free(ty);
    return wrong;
}

int main(void) {
    long wrong = 0;
    const struct geometry shapes[] = {
        {2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 1, 4, 1},  /* the mask head's, channels in blocks of 4 */
        {3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 2, 3, 1},  /* overlapping positions, groups */
        {1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 128, 0}, /* one position, no bias */
        {3, 2, 1, 2, 2, 1, 0, 1, 2, 0, 1, 5, 1},  /* dilation, uneven pads */
        {2, 3, 3, 1, 1, 1, 1, 0, 0, 1, 1, 2, 0},  /* six positions: a tile of four and one of two */
        {3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1},  /* stride 1: a convolution's geometry, blocks of 3 planes */
        {1, 5, 1, 2, 1, 1, 0, 2, 0, 0, 1, 4, 1},  /* five positions: tiles of the rows' every remainder */
        {7, 1, 2, 1, 1, 1, 3, 0, 2, 0, 1, 4, 0},  /* seven positions */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int64_t hw = 1; hw <= 70; hw += (hw < 20 ? 1 : 7))
            for (int nth = 1; nth <= 3; nth += 2)
                wrong += check(&shapes[s], 2, 6 * shapes[s].group, 11 * shapes[s].group, hw % 7 + 1,
                               (hw + 6) / 7 + (hw % 3), nth);
    printf("%ld wrong values\n", wrong);
    return wrong != 0;
}
