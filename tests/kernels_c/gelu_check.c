/* kernels.c's GELU (ggmlpy_gelu_erf_f32, a vector a step with the tail masked) against erf in
 * float64 for every length up to 70 split over one to three threads; built by
 * tests/test_kernels_memory.py with AddressSanitizer for each x86-64 level this CPU runs, the input
 * and output each an allocation of exactly their length (tensor_stub.h).
 *
 * Usage: gelu_check; prints one line per wrong case and "N wrong values"; exits 1 if any.
 */
#include <math.h>
#include <stdio.h>

#include "kernels.c"
#include "tensor_stub.h"

int main(void) {
    long wrong = 0;
    for (int64_t n = 1; n <= 70; n++)
        for (int nth = 1; nth <= 3; nth++) {
            float *x = floats(n, (uint32_t)n), *y = malloc((size_t)n * sizeof(float));
            for (int64_t i = 0; i < n; i++)
                x[i] *= 6.0f;
            const int64_t ne[4] = {n, 1, 1, 1};
            tensor *tx = stub(ne, NULL, x), *ty = stub(ne, NULL, y);
            for (int ith = 0; ith < nth; ith++)
                ggmlpy_gelu_erf_f32(ty, tx, ith, nth, NULL);
            for (int64_t i = 0; i < n; i++) {
                const double want = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
                if (!(fabs(y[i] - want) <= 1e-6 * fabs(want) + 1e-30) && wrong++ < 3)
                    printf("n %lld threads %d: gelu(%g) is %g, not %g\n", (long long)n, nth, x[i], y[i], want);
            }
            free(x), free(y), free(tx), free(ty);
        }
    printf("%ld wrong values\n", wrong);
    return wrong != 0;
}
