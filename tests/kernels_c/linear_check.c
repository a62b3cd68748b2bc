/* conv.c's packed linear layers (ggmlpy_linear_packed_f32) against a float64 reference at the tail
 * sizes of both builds' blocks (rows past 8, 16, 32; columns past 6 and 12; k past 8, 16 and the
 * 256-row block), with bias, residual, GELU and split parts, one to three threads; built by
 * tests/test_kernels_memory.py with AddressSanitizer for each x86-64 level this CPU runs. Every
 * operand is its own allocation of exactly its size (tensor_stub.h).
 *
 * Usage: linear_check; prints one line per wrong case and "N wrong values"; exits 1 if any.
 */
#include <math.h>
#include <stdio.h>

#include "conv.c"
#include "tensor_stub.h"
#include "blas_stub.h"

#ifdef VW
/* one layer: N outputs, K inputs, T columns, flags as ggmlpy_linear_packed_f32's (D: split parts) */
static long check(int N, int K, int T, int flags, int D, int nth) {
    const int mr = ggmlpy_linear_packed_mr(), npan = (N + mr - 1) / mr;
    float *w = floats((int64_t)N * K, 1u + N * 7u + K), *x = floats((int64_t)K * T, 2u + T);
    float *wp = calloc((size_t)npan * K * mr, sizeof(float));  /* pack_linear: [panel][k][row], zero past N */
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            wp[((int64_t)(n / mr) * K + k) * mr + n % mr] = w[(int64_t)k * N + n];
    float *bias = flags & LIN_BIAS ? floats(N, 3u) : NULL;
    float *res = flags & LIN_RESIDUAL ? floats((int64_t)N * T, 4u) : NULL;
    float *y = malloc((size_t)N * T * sizeof(float));
    const int64_t wne[4] = {mr, K, npan, 1}, xne[4] = {K, T, 1, 1}, bne[4] = {N, 1, 1, 1}, rne[4] = {N, T, 1, 1};
    const int64_t yne[4] = {D ? D : N, T, D ? N / D : 1, 1};
    tensor *tw = stub(wne, NULL, wp), *tx = stub(xne, NULL, x), *ty = stub(yne, NULL, y);
    tensor *tb = bias ? stub(bne, NULL, bias) : NULL, *tr = res ? stub(rne, NULL, res) : NULL;
    int a = 0;
    set_src(ty, a++, tw);
    set_src(ty, a++, tx);
    if (tb)
        set_src(ty, a++, tb);
    if (tr)
        set_src(ty, a++, tr);
    int32_t ud[2] = {flags, D};
    for (int ith = 0; ith < nth; ith++)
        ggmlpy_linear_packed_f32(ty, ith, nth, ud);
    long wrong = 0;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0.0, mag = fabs(s);
            for (int k = 0; k < K; k++) {
                s += (double)w[(int64_t)k * N + n] * x[(int64_t)t * K + k];
                mag += fabs((double)w[(int64_t)k * N + n] * x[(int64_t)t * K + k]);
            }
            if (res) {
                s += res[(int64_t)t * N + n];
                mag += fabs(res[(int64_t)t * N + n]);
            }
            if (flags & LIN_GELU)
                s = 0.5 * s * (1.0 + erf(s / sqrt(2.0)));
            const float got = D ? y[(int64_t)(n / D) * T * D + (int64_t)t * D + n % D] : y[(int64_t)t * N + n];
            if (!(fabs(got - s) <= 1e-5 * mag + 1e-6) && wrong++ < 2)
                printf("N %d K %d T %d flags %d D %d threads %d: y[%d, %d] is %g, not %g\n", N, K, T, flags, D, nth,
                       n, t, got, s);
        }
    free(w), free(x), free(wp), free(bias), free(res), free(y);
    free(tw), free(tx), free(ty), free(tb), free(tr);
    return wrong;
}
#endif

int main(void) {
    long wrong = 0;
#ifdef VW
    const int Ns[] = {1, 5, 8, 9, 16, 17, 31, 32, 33, 47, 70}, Ks[] = {1, 3, 8, 9, 17, 255, 256, 257, 300};
    const int Ts[] = {1, 5, 6, 7, 11, 12, 13, 25};
    const int flag_sets[] = {0, LIN_BIAS, LIN_BIAS | LIN_RESIDUAL, LIN_BIAS | LIN_GELU, LIN_GELU | LIN_RESIDUAL};
    for (size_t a = 0; a < sizeof Ns / sizeof *Ns; a++)
        for (size_t b = 0; b < sizeof Ks / sizeof *Ks; b++)
            for (size_t c = 0; c < sizeof Ts / sizeof *Ts; c++)
                for (size_t f = 0; f < sizeof flag_sets / sizeof *flag_sets; f++)
                    wrong += check(Ns[a], Ks[b], Ts[c], flag_sets[f], 0, 1 + (int)((a + b + c) % 3));
    for (int T = 1; T <= 13; T += 6)  /* split: three parts of 32 rows, and of 64 */
        wrong += check(96, 40, T, LIN_BIAS | LIN_SPLIT, 32, 2) + check(192, 33, T, LIN_SPLIT, 64, 3);
#else
    puts("no vector path at this level: nothing to check");
#endif
    printf("%ld wrong values\n", wrong);
    return wrong != 0;
}
