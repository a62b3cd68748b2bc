/* conv.c's im2col_block against a tap-by-tap reference, built by tests/test_kernels_memory.py
 * with AddressSanitizer for each x86-64 level this CPU runs: a write past the patch buffer
 * (allocated to exactly the size conv.c's callers give it) fails the run even where the values
 * read back happen to be right.
 *
 * Usage: im2col_check; prints one line per wrong block and exits 1 if any.
 */
#include <math.h>
#include <stdio.h>

#include "conv.c"
#include "blas_stub.h"

static float tap(const float *x, const geom *g, int c, int kh, int kw, int64_t p) {
    const int64_t oh = p / g->OW, ow = p % g->OW;
    const int64_t ih = oh * g->SH - g->PH + kh * g->DH, iw = ow * g->SW - g->PW + kw * g->DW;
    return ih < 0 || ih >= g->H || iw < 0 || iw >= g->W ? 0.0f : x[((int64_t)c * g->H + ih) * g->W + iw];
}

/* the block [p0, p0 + m) of one geometry, patches ld apart: the number of wrong values */
static long check_block(geom g, int64_t p0, int64_t m, int64_t ld) {
    const int64_t n_in = (int64_t)g.C * g.H * g.W, rows = (int64_t)g.C * g.KH * g.KW;
    float *x = malloc((size_t)n_in * sizeof(float));
    float *col = malloc((size_t)(rows * ld + SLACK) * sizeof(float));  /* exactly what callers give */
    for (int64_t i = 0; i < n_in; i++)
        x[i] = (float)(i + 1);
    for (int64_t i = 0; i < rows * ld + SLACK; i++)
        col[i] = NAN;
    im2col_block(x, col, p0, m, ld, &g);
    long wrong = 0;
    int64_t r = 0;
    for (int c = 0; c < g.C; c++)
        for (int kh = 0; kh < g.KH; kh++)
            for (int kw = 0; kw < g.KW; kw++, r++)
                for (int64_t j = 0; j < m; j++) {
                    const float want = tap(x, &g, c, kh, kw, p0 + j), got = col[r * ld + j];
                    if (!(got == want) && wrong++ < 3)
                        printf("C%d H%d W%d K%dx%d S%d,%d P%d,%d D%d,%d block %lld+%lld ld %lld: row %lld "
                               "pixel %lld is %g, not %g\n", g.C, g.H, g.W, g.KH, g.KW, g.SH, g.SW, g.PH, g.PW,
                               g.DH, g.DW, (long long)p0, (long long)m, (long long)ld, (long long)r,
                               (long long)(p0 + j), got, want);
                }
    free(x);
    free(col);
    return wrong;
}

static geom make(int C, int H, int W, int K, int S, int P, int D) {
    geom g = {C, H, W, 0, 0, K, K, S, S, P, P, D, D};
    g.OH = (H + 2 * P - D * (K - 1) - 1) / S + 1;
    g.OW = (W + 2 * P - D * (K - 1) - 1) / S + 1;
    return g;
}

int main(void) {
    /* C, H, W, K, S, P, D: Inception v3's stem (149 columns a row), narrow planes whose blocks span
     * hundreds of output rows, strides 1-3 (each patch_row path), padding and dilation */
    const int cases[][7] = {
        {3, 299, 299, 3, 2, 0, 1}, {3, 224, 224, 3, 2, 1, 1}, {1, 200, 5, 3, 1, 1, 1}, {2, 150, 3, 3, 1, 1, 1},
        {2, 300, 7, 3, 3, 1, 1},   {1, 90, 20, 5, 1, 4, 2},   {1, 400, 1, 1, 1, 0, 1}, {3, 70, 70, 7, 2, 3, 1},
    };
    long wrong = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        const geom g = make(c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
        const int64_t P = (int64_t)g.OH * g.OW;
        /* blocks across the 64-row mark and around it, starting on and off row starts, ld = m (the
         * plain conv's layout) and wider (the strip layout's) */
        const int64_t rows_a_block[] = {1, 63, 64, 65, 66, 129, 200};
        for (size_t b = 0; b < sizeof rows_a_block / sizeof rows_a_block[0]; b++)
            for (int64_t start = 0; start < 3; start++) {
                const int64_t p0 = start == 0 ? 0 : start == 1 ? g.OW / 2 : P / 3 + 1;
                const int64_t m = imin64(rows_a_block[b] * g.OW + (start == 2 ? 5 : 0), P - p0);
                if (m <= 0)
                    continue;
                wrong += check_block(g, p0, m, m);
                wrong += check_block(g, p0, m, m + 24);
            }
        wrong += check_block(g, 0, P, P);  /* the whole image as one block */
    }
    printf("%ld wrong values\n", wrong);
    return wrong != 0;
}
