/* attention.c (ggmlpy_attention_f32) against a float64 reference at the tail sizes of both builds'
 * blocks (keys and values past 8, 16 and the register block's 32 or 64; queries past the 6-query
 * block and the 48-query unit), K^T read in place and transposed (its source's 8 x 8 or 16 x 16
 * blocks), with and without a mask, one to three threads; built by tests/test_kernels_memory.py
 * with AddressSanitizer for each x86-64 level this CPU runs, every operand its own allocation of
 * exactly its size (tensor_stub.h).
 *
 * Usage: attention_check; prints one line per wrong case and "N wrong values"; exits 1 if any.
 */
#include <math.h>
#include <stdio.h>

#include "attention.c"
#include "tensor_stub.h"

enum { H = 2 };

static long check(int D, int S, int E, int L, int transposed, int masked, int nth) {
    const float scale = 0.37f;
    float *q = floats((int64_t)D * L * H, 5u + D), *k = floats((int64_t)S * D * H, 6u + S);
    float *v = floats((int64_t)E * S * H, 7u + E), *m = masked ? floats((int64_t)S * L, 8u) : NULL;
    float *y = malloc((size_t)E * L * H * sizeof(float));
    if (m)
        for (int64_t i = 0; i < (int64_t)S * L; i++)
            m[i] = m[i] < -0.6f && i % S != 0 ? -INFINITY : m[i];  /* some keys masked, never a whole row */
    /* kt(j, c) of head h: k[(h S + j) D + c] transposed (K's rows read across), else k[(h D + c) S + j] */
    const int64_t qne[4] = {D, L, H, 1}, kne[4] = {S, D, H, 1}, vne[4] = {E, S, H, 1}, mne[4] = {S, L, 1, 1};
    const int64_t yne[4] = {E, L, H, 1}, knb[4] = {4 * (int64_t)D, 4, 4 * (int64_t)S * D, 4 * (int64_t)S * D * H};
    tensor *tq = stub(qne, NULL, q), *tk = stub(kne, transposed ? knb : NULL, k), *tv = stub(vne, NULL, v);
    tensor *tm = m ? stub(mne, NULL, m) : NULL, *ty = stub(yne, NULL, y);
    set_src(ty, 0, tq), set_src(ty, 1, tk), set_src(ty, 2, tv);
    if (tm)
        set_src(ty, 3, tm);
    int32_t ud[3] = {0, masked, 0};
    memcpy(&ud[0], &scale, sizeof scale);
    for (int ith = 0; ith < nth; ith++)
        ggmlpy_attention_f32(ty, ith, nth, ud);
    long wrong = 0;
    double *p = malloc((size_t)S * sizeof(double));
    for (int h = 0; h < H; h++)
        for (int i = 0; i < L; i++) {
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j < S; j++) {
                double s = 0.0;
                for (int c = 0; c < D; c++)
                    s += (double)q[((int64_t)h * L + i) * D + c] *
                         k[transposed ? ((int64_t)h * S + j) * D + c : ((int64_t)h * D + c) * S + j];
                p[j] = s * scale + (m ? m[(int64_t)i * S + j] : 0.0);
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int j = 0; j < S; j++)
                sum += p[j] = exp(p[j] - mx);
            for (int e = 0; e < E; e++) {
                double o = 0.0, mag = 0.0;
                for (int j = 0; j < S; j++) {
                    o += p[j] / sum * v[((int64_t)h * S + j) * E + e];
                    mag += fabs(p[j] / sum * v[((int64_t)h * S + j) * E + e]);
                }
                const float got = y[((int64_t)h * L + i) * E + e];
                if (!(fabs(got - o) <= 1e-5 * mag + 1e-6) && wrong++ < 2)
                    printf("D %d S %d E %d L %d transposed %d mask %d threads %d: y[%d, %d, %d] is %g, not %g\n", D, S,
                           E, L, transposed, masked, nth, e, i, h, got, o);
            }
        }
    free(p), free(q), free(k), free(v), free(m), free(y);
    free(tq), free(tk), free(tv), free(tm), free(ty);
    return wrong;
}

int main(void) {
    const int Ds[] = {1, 5, 8, 17, 64}, Ss[] = {1, 7, 8, 9, 16, 17, 33, 64, 65}, Es[] = {1, 7, 8, 9, 17, 33, 64, 70};
    const int Ls[] = {1, 5, 6, 7, 48, 49};
    long wrong = 0, n = 0;
    for (size_t a = 0; a < sizeof Ds / sizeof *Ds; a++)
        for (size_t b = 0; b < sizeof Ss / sizeof *Ss; b++)
            for (size_t c = 0; c < sizeof Es / sizeof *Es; c++)
                for (size_t d = 0; d < sizeof Ls / sizeof *Ls; d++, n++)
                    wrong += check(Ds[a], Ss[b], Es[c], Ls[d], (int)(n % 2), (int)(n / 2 % 2), 1 + (int)(n % 3));
    printf("%ld wrong values\n", wrong);
    return wrong != 0;
}
