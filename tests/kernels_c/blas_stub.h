/* OpenBLAS's symbols for a harness that includes conv.c but runs none of its products: the
 * harness links no BLAS, and a product reached by mistake aborts the run. */
#ifndef GGMLPY_TESTS_BLAS_STUB_H
#define GGMLPY_TESTS_BLAS_STUB_H

#include <stdlib.h>

void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    (void)order, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
    (void)ldb, (void)beta, (void)c, (void)ldc;
    abort();
}
void openblas_set_num_threads(int n) { (void)n; }
int openblas_get_num_threads(void) { return 1; }

#endif
