/* Matrix products in any orientation for ggml's CPU backend, as one ggml custom op over OpenBLAS.
 *
 * ggml's mul_mat contracts the first axis of both operands, so a product in another orientation
 * costs a transposed copy of an operand first (attention's V P and most of a backward pass), and
 * ggml's BLAS backend takes 2-D products only. cblas_sgemm takes any orientation and any leading
 * dimension; this op calls it per batch matrix, with batch broadcasting as ggml_mul_mat's.
 *
 * A ggml tensor [ne0, ne1, ...] (nb0 = 4) is read as R does: column-major ne0 x ne1 matrices,
 * leading dimension nb1 / 4. dst = op(a) op(b), dst[m, n, B2, B3] contiguous; userdata's bit 0
 * says op(a) = t(a), bit 1 op(b) = t(b).
 *
 * Threads: the work is cut into pieces (pieces.h): the batch matrices, or, with fewer matrices than
 * pieces_count(), the columns (or rows) of each product in blocks of 16; ggml's threads take the
 * pieces in turn. Each piece's cblas_sgemm runs on its thread alone (blas_threads.h; the loader checks that OpenBLAS is the OpenMP or the sequential build).
 */
#include <stdint.h>
#include <string.h>

#include "blas_threads.h"
#include "fields.h"
#include "pieces.h"

enum { ColMajor = 102, NoTrans = 111, Trans = 112 };
extern void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                        int lda, const float *b, int ldb, float beta, float *c, int ldc);
extern int openblas_get_parallel(void);

/* 0: sequential OpenBLAS, 1: pthreads, 2: OpenMP (the loader uses the op for 0 and 2 only) */
int ggmlpy_blas_parallel(void) { return openblas_get_parallel(); }

typedef struct { int64_t ne[4], nb[4]; char *data; } view;

static view view_of(const void *t) {
    view v;
    ne_of(t, v.ne);
    nb_of(t, v.nb);
    v.data = (char *)data_of(t);
    return v;
}

static const float *matrix(const view *v, int64_t i2, int64_t i3, int64_t d2, int64_t d3) {
    /* batch (i2, i3) of the result reads v's (i2 / (d2 / ne2), i3 / (d3 / ne3)), as ggml_mul_mat */
    return (const float *)(v->data + (i2 / (d2 / v->ne[2])) * v->nb[2] + (i3 / (d3 / v->ne[3])) * v->nb[3]);
}

/* rows [i0, i1) and columns [j0, j1) of batch matrix bi of c = op(a) op(b) */
static void product(const view *a, const view *b, const view *c, int64_t bi, int ta, int tb, int k, int i0, int i1,
                    int j0, int j1) {
    const int lda = (int)(a->nb[1] / 4), ldb = (int)(b->nb[1] / 4), ldc = (int)(c->nb[1] / 4);
    int64_t i2 = bi % c->ne[2], i3 = bi / c->ne[2];
    float *pc = (float *)(c->data + i2 * c->nb[2] + i3 * c->nb[3]) + (int64_t)j0 * ldc + i0;
    if (k == 0) {  /* an empty sum (BLAS would refuse the leading dimension 0 of an empty t(a)) */
        for (int j = j0; j < j1; j++)
            memset(pc + (int64_t)(j - j0) * ldc, 0, (size_t)(i1 - i0) * 4);
        return;
    }
    const float *pa = matrix(a, i2, i3, c->ne[2], c->ne[3]);
    const float *pb = matrix(b, i2, i3, c->ne[2], c->ne[3]);
    /* rows i0.. of op(a): a's rows, or its columns when transposed; columns j0.. of op(b) likewise */
    pa += ta ? (int64_t)i0 * lda : i0;
    pb += tb ? j0 : (int64_t)j0 * ldb;
    cblas_sgemm(ColMajor, ta ? Trans : NoTrans, tb ? Trans : NoTrans, i1 - i0, j1 - j0, k, 1.0f, pa, lda, pb, ldb,
                0.0f, pc, ldc);
}

void ggmlpy_gemm_f32(void *dst, int ith, int nth, void *userdata) {
    const int ta = (int)((intptr_t)userdata & 1), tb = (int)(((intptr_t)userdata >> 1) & 1);
    view a = view_of(src_of(dst, 0)), b = view_of(src_of(dst, 1)), c = view_of(dst);
    const int m = (int)c.ne[0], n = (int)c.ne[1], k = (int)(ta ? a.ne[0] : a.ne[1]);
    const int64_t batches = c.ne[2] * c.ne[3];
    BLAS_ON_THIS_THREAD_ONLY();
    /* the pieces (pieces.h): whole batch matrices, or, with fewer matrices than pieces_count(), each
     * matrix's columns (or rows) in pieces_count() blocks of 16 */
    const int64_t per_matrix = batches >= pieces_count() ? 1 : pieces_count(), pieces = batches * per_matrix;
    for (int64_t p = ith; p < pieces; p += nth) {
        int64_t bi = p / per_matrix, i0 = 0, i1 = m, j0 = 0, j1 = n;
        if (per_matrix > 1 && n >= m)
            piece_range(n, per_matrix, 16, p % per_matrix, &j0, &j1);
        else if (per_matrix > 1)
            piece_range(m, per_matrix, 16, p % per_matrix, &i0, &i1);
        if (j0 < j1 && i0 < i1)
            product(&a, &b, &c, bi, ta, tb, k, (int)i0, (int)i1, (int)j0, (int)j1);
    }
}
