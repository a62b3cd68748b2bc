/* Host kernels of the single-cell engines (ggmlpy/extras/sc_kernels.py), called from Python
 * through cffi on numpy's buffers, not ggml ops. Each call handles a range of rows and shares
 * nothing writable with another, so Python runs one call per thread on disjoint ranges (cffi
 * releases the GIL for the call).
 *
 * LogNormalize of a compressed sparse matrix in place: each row's (cell's) sum in double, with
 * a check that its indices ascend strictly (no duplicate to sum first), then each stored value
 * times its row's factor (the log1p is numpy's, vectorised).
 *
 * The exact kNN: BLAS gives, for a block of rows i and a set of columns j, the float32
 * approximation v_ij of |x_i - x_j|^2 - |x_i|^2, within err_i of it. ggmlpy_knn_kth reads one
 * such part for each row's approximate k-th; ggmlpy_knn_select takes every part that can hold a
 * true neighbour, keeps the columns that can rank among the k nearest by the bound, recomputes
 * their squared distances exactly in double from the float64 coordinates and returns the k
 * nearest, ties by the columns' original indices.
 *
 * The shared-nearest-neighbour graph: for each row, the Jaccard overlap |N(i) & N(j)| /
 * |N(i) | N(j)| with every j that shares a neighbour, N(i) being i and its k nearest; overlaps
 * below `prune` are left out, columns ascending.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- LogNormalize's passes over a compressed matrix (data, indices, indptr), rows lo .. hi - 1 ---- */
#define ROW_KERNELS(T, I, SUFFIX)                                                                          \
    /* sums[r - lo]: row r's sum in double; returns 1 when every row's indices ascend strictly */      \
    int ggmlpy_row_sums_##SUFFIX(const T *data, const I *indices, const I *indptr, int64_t lo, int64_t hi, \
                                 double *sums) {                                                       \
        int canonical = 1;                                                                             \
        for (int64_t r = lo; r < hi; r++) {                                                            \
            const int64_t a = indptr[r], b = indptr[r + 1];                                            \
            double s = 0.0;                                                                            \
            for (int64_t t = a; t < b; t++)                                                            \
                s += data[t];                                                                          \
            for (int64_t t = a + 1; t < b; t++)                                                        \
                canonical &= indices[t - 1] < indices[t];                                              \
            sums[r - lo] = s;                                                                          \
        }                                                                                              \
        return canonical;                                                                              \
    }                                                                                                  \
    /* row r's stored values times factor[r] */                                                        \
    void ggmlpy_row_scale_##SUFFIX(T *data, const I *indptr, int64_t lo, int64_t hi, const T *factor) { \
        for (int64_t r = lo; r < hi; r++) {                                                            \
            const T f = factor[r];                                                                     \
            for (int64_t t = indptr[r]; t < indptr[r + 1]; t++)                                        \
                data[t] *= f;                                                                          \
        }                                                                                              \
    }

ROW_KERNELS(float, int32_t, f32_i32)
ROW_KERNELS(float, int64_t, f32_i64)
ROW_KERNELS(double, int32_t, f64_i32)
ROW_KERNELS(double, int64_t, f64_i64)

/* ---- a max-heap of the k smallest values seen (h[0] the largest of them) ---- */
static void heap_sift(float *h, int k, int i) {
    const float v = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= k)
            break;
        if (c + 1 < k && h[c + 1] > h[c])
            c++;
        if (h[c] <= v)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

/* Whether one of v[0 .. CHUNK) is below `limit` (at or below with any_at_most): a test the
 * compiler vectorises, so that the scans skip the chunks with nothing to keep at SIMD speed. */
#define CHUNK 32
static inline int any_below(const float *v, float limit) {
    int any = 0;
    for (int j = 0; j < CHUNK; j++)
        any |= v[j] < limit;
    return any;
}

static inline int any_at_most(const float *v, float limit) {
    int any = 0;
    for (int j = 0; j < CHUNK; j++)
        any |= v[j] <= limit;
    return any;
}

/* The k-th smallest of row r of part (m x ncols, row-major), the column self0 + r left out, for
 * each of the m rows, in kth[r]. Returns 0, or -1 when a row has fewer than k columns to rank
 * (kth is then undefined). */
int ggmlpy_knn_kth(const float *part, int64_t m, int64_t ncols, int64_t self0, int k, double *kth) {
    if (k < 1)
        return -1;
    float *h = malloc(sizeof(float) * (size_t)k);
    if (!h)
        return -1;
    int status = 0;
    for (int64_t r = 0; r < m; r++) {
        const float *row = part + r * ncols;
        const int64_t self = self0 + r;
        int fill = 0;
        int64_t c = 0;
        for (; c < ncols && fill < k; c++)
            if (c != self)
                h[fill++] = row[c];
        if (fill < k) {
            status = -1;
            break;
        }
        for (int i = k / 2 - 1; i >= 0; i--)
            heap_sift(h, k, i);
        float top = h[0];
        for (; c < ncols; c++) {
            if (c % CHUNK == 0 && c + CHUNK <= ncols) {   /* whole chunks: most hold nothing below top */
                if (!any_below(row + c, top)) {
                    c += CHUNK - 1;
                    continue;
                }
            }
            const float v = row[c];
            if (v < top && c != self) {
                h[0] = v;
                heap_sift(h, k, 0);
                top = h[0];
            }
        }
        kth[r] = top;
    }
    free(h);
    return status;
}

typedef struct {
    double key;   /* the approximate value, then the exact squared distance */
    int64_t col;  /* the column (an index into x) */
    int64_t rank; /* its original index: ties go to the smaller */
} candidate;

static int by_key(const void *a, const void *b) {
    const candidate *p = a, *q = b;
    if (p->key != q->key)
        return p->key < q->key ? -1 : 1;
    return (p->rank > q->rank) - (p->rank < q->rank);
}

/* The exact k nearest of rows row0 .. row0 + m - 1 of x (n x dims, row-major, double).
 * parts[p] (m x ncols[p]) holds the approximate values of the columns colmap[p][0 ..), every
 * true neighbour of a row in one of them; kth[r]: an approximate k-th of row r within err[r] of
 * an upper bound of its true k-th (ggmlpy_knn_kth's on a part of its own); err[r] bounds each
 * |v - (d^2 - |x_i|^2)| of the row. rank (n entries, or NULL for the identity) breaks ties.
 * Writes k indices (into x) and distances per row, nearest first. Returns 0, -1 out of memory,
 * -2 when a row has fewer than k candidates (the bound did not hold). */
int ggmlpy_knn_select(int nparts, const float *const *parts, const int64_t *ncols, const int64_t *const *colmap,
                      int64_t m, int64_t row0, const double *kth, const double *err, const double *x, int64_t dims,
                      const int64_t *rank, int k, int64_t *out_idx, double *out_dist) {
    size_t cap = 1024;
    candidate *cand = malloc(sizeof(candidate) * cap);
    if (!cand)
        return -1;
    int status = 0;
    for (int64_t r = 0; r < m && status == 0; r++) {
        const int64_t self = row0 + r;
        const double e2 = 2.0 * err[r];
        const float limit = (float)(kth[r] + e2);  /* v <= limit holds every true k nearest */
        size_t nc = 0;
        for (int p = 0; p < nparts; p++) {
            const float *row = parts[p] + r * ncols[p];
            const int64_t *map = colmap[p];
            for (int64_t c = 0; c < ncols[p]; c++) {
                if (c % CHUNK == 0 && c + CHUNK <= ncols[p] && !any_at_most(row + c, limit)) {
                    c += CHUNK - 1;
                    continue;
                }
                if (row[c] > limit || map[c] == self)
                    continue;
                if (nc == cap) {
                    candidate *grown = realloc(cand, sizeof(candidate) * cap * 2);
                    if (!grown) {
                        status = -1;
                        break;
                    }
                    cand = grown;
                    cap *= 2;
                }
                cand[nc].key = row[c];
                cand[nc].col = map[c];
                cand[nc].rank = rank ? rank[map[c]] : map[c];
                nc++;
            }
        }
        if (status)
            break;
        if (nc < (size_t)k) {
            status = -2;
            break;
        }
        /* only the ones within 2 err of the candidates' approximate k-th can rank */
        qsort(cand, nc, sizeof(candidate), by_key);
        const double near = cand[k - 1].key + e2;
        size_t keep = (size_t)k;
        while (keep < nc && cand[keep].key <= near)
            keep++;
        const double *xi = x + self * dims;
        for (size_t t = 0; t < keep; t++) {
            const double *xj = x + cand[t].col * dims;
            double s = 0.0;
            for (int64_t d = 0; d < dims; d++) {
                const double diff = xi[d] - xj[d];
                s += diff * diff;
            }
            cand[t].key = s;
        }
        qsort(cand, keep, sizeof(candidate), by_key);
        for (int t = 0; t < k; t++) {
            out_idx[r * k + t] = cand[t].col;
            out_dist[r * k + t] = sqrt(cand[t].key);
        }
    }
    free(cand);
    return status;
}

/* Rows lo .. hi - 1 of the shared-nearest-neighbour graph. nbr (n x kk): each row's neighbourhood
 * N(i), i itself among them, kk = k + 1 distinct members; rev_ptr / rev_idx: the rows whose
 * neighbourhood holds m are rev_idx[rev_ptr[m] .. rev_ptr[m + 1]) (ggmlpy_reverse_lists). Counting
 * pass (vals == NULL): row_nnz[i - lo] = how many j have a Jaccard overlap of at least prune.
 * Filling pass: writes them from out_ptr[i] on, columns ascending (into cols32, or cols64 where
 * cols32 is NULL), the overlaps in vals. Returns 0, or -1 out of memory. */
int ggmlpy_snn_rows(const int64_t *nbr, int64_t n, int kk, const int64_t *rev_ptr, const int64_t *rev_idx,
                    int64_t lo, int64_t hi, double prune, int64_t *row_nnz, const int64_t *out_ptr, int32_t *cols32,
                    int64_t *cols64, double *vals) {
    int32_t *count = calloc((size_t)n, sizeof(int32_t));
    /* the kept columns as bits: read back word by word, they come out ascending without a sort */
    uint64_t *kept = calloc((size_t)(n + 63) / 64, sizeof(uint64_t));
    size_t cap = 1024;
    int64_t *touched = malloc(sizeof(int64_t) * cap);
    int status = 0;
    if (!count || !kept || !touched) {
        status = -1;
        goto done;
    }
    const double both = 2.0 * kk;   /* |N(i)| + |N(j)| */
    for (int64_t i = lo; i < hi; i++) {
        size_t nt = 0;
        if (i + 1 < hi)   /* the next row's reverse lists are scattered: ask for them while this one counts */
            for (int a = 0; a < kk; a++)
                __builtin_prefetch(rev_idx + rev_ptr[nbr[(i + 1) * kk + a]]);
        for (int a = 0; a < kk; a++) {
            const int64_t mid = nbr[i * kk + a];
            for (int64_t t = rev_ptr[mid]; t < rev_ptr[mid + 1]; t++) {
                const int64_t j = rev_idx[t];
                if (count[j]++ == 0) {
                    if (nt == cap) {
                        int64_t *grown = realloc(touched, sizeof(int64_t) * cap * 2);
                        if (!grown) {
                            status = -1;
                            goto done;
                        }
                        touched = grown;
                        cap *= 2;
                    }
                    touched[nt++] = j;
                }
            }
        }
        int64_t nk = 0, wlo = INT64_MAX, whi = -1;
        for (size_t t = 0; t < nt; t++) {   /* the overlaps at or above prune; the others' counts back to 0 */
            const int64_t j = touched[t];
            const double c = count[j];
            if (c / (both - c) < prune || vals == NULL) {
                count[j] = 0;
                nk += !(c / (both - c) < prune);
                continue;
            }
            kept[j >> 6] |= (uint64_t)1 << (j & 63);
            wlo = (j >> 6) < wlo ? (j >> 6) : wlo;
            whi = (j >> 6) > whi ? (j >> 6) : whi;
            nk++;
        }
        if (vals == NULL) {
            row_nnz[i - lo] = nk;
            continue;
        }
        int64_t at = out_ptr[i];
        for (int64_t w = wlo; w <= whi; w++) {
            uint64_t bits = kept[w];
            kept[w] = 0;
            while (bits) {
                const int64_t j = w * 64 + __builtin_ctzll(bits);
                bits &= bits - 1;
                const double c = count[j];
                count[j] = 0;
                if (cols32)
                    cols32[at] = (int32_t)j;
                else
                    cols64[at] = j;
                vals[at++] = c / (both - c);
            }
        }
    }
done:
    free(count);
    free(kept);
    free(touched);
    return status;
}

/* The reverse of the neighbourhoods nbr (n x kk, entries in 0 .. n - 1): rev_idx[rev_ptr[m] ..
 * rev_ptr[m + 1]) lists the rows whose neighbourhood holds m, ascending (a counting sort).
 * rev_ptr has n + 1 entries, rev_idx n * kk. */
void ggmlpy_reverse_lists(const int64_t *nbr, int64_t n, int kk, int64_t *rev_ptr, int64_t *rev_idx) {
    memset(rev_ptr, 0, sizeof(int64_t) * (size_t)(n + 1));
    for (int64_t t = 0; t < n * kk; t++)
        rev_ptr[nbr[t] + 1]++;
    for (int64_t m = 0; m < n; m++)
        rev_ptr[m + 1] += rev_ptr[m];
    for (int64_t i = 0; i < n; i++)      /* rows in order: each list comes out ascending */
        for (int a = 0; a < kk; a++) {
            const int64_t m = nbr[i * kk + a];
            rev_idx[rev_ptr[m]++] = i;
        }
    for (int64_t m = n; m > 0; m--)     /* each rev_ptr[m] now holds the end of list m: shift back */
        rev_ptr[m] = rev_ptr[m - 1];
    rev_ptr[0] = 0;
}
