/* 2-D convolution for ggml's CPU backend, as one ggml custom op: im2col a block of output pixels
 * into a per-thread buffer that stays in cache, one cblas_sgemm, then bias, residual and ReLU.
 *
 * ggml's im2col writes the whole patch matrix to memory a pixel at a time (every kernel tap of
 * every channel, bounds-checked), and the product reads it back. Here each row of a block's patch
 * matrix (one channel c and tap kh, kw) is a shifted, strided copy of one input row range, written
 * with its zero padding as runs; the block (B pixels x C*KH*KW) is sized to stay in L2, and the
 * product consumes it at once. A 1x1 convolution with stride 1 and no padding needs no copy at all:
 * the input plane is the patch matrix.
 *
 * Layout (ggml ne): x [W, H, C, N] and dst [OW, OH, M, N] contiguous (ONNX's NCHW); w [C/G*KH*KW, M]
 * contiguous (ONNX's (M, C/G, KH, KW)); optional bias [M] and residual [OW, OH, M, N] contiguous.
 * In column-major terms, for image n and group g: out (P x M/G) = col (P x CKK) w (CKK x M/G), P =
 * OH*OW, so the product lands in NCHW directly.
 *
 * userdata: int32_t[13] = KH, KW, stride h, w, pad top, left, dilation h, w, groups, flags
 * (1 ReLU, 2 bias, 4 residual: the bias and residual are the op's third and third-or-fourth
 * arguments), block pixels (0: chosen here).
 *
 * Threads: the work items are (image, group, pixel block), cut into pieces (pieces.h): the items,
 * or, with fewer items than pieces_count() (a deep layer of one image), each item's output channels
 * in parts, each part's thread building the item's patch block. ggml's threads take the pieces in
 * turn. Each cblas_sgemm runs on its thread alone (blas_threads.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blas_threads.h"
#include "fields.h"
#include "kept_buffer.h"
#include "pieces.h"
#include "vmath.h"

enum { ColMajor = 102, NoTrans = 111 };
extern void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                        int lda, const float *b, int ldb, float beta, float *c, int ldc);

enum { P_KH, P_KW, P_SH, P_SW, P_PH, P_PW, P_DH, P_DW, P_GROUPS, P_FLAGS, P_BLOCK, P_COUNT };
enum { F_RELU = 1, F_BIAS = 2, F_RESIDUAL = 4 };

#define BLOCK_BYTES (1024 * 1024)  /* the patch block: about L2; larger products run faster, to a point */
#define MIN_BLOCK 128             /* fewer pixels make the product inefficient */

int ggmlpy_conv_params_count(void) { return P_COUNT; }

static int imin(int a, int b) { return a < b ? a : b; }
static int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t imax64(int64_t a, int64_t b) { return a > b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }
static int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* first q >= 0 with q * s + off >= 0, and first q with q * s + off >= W (so [lo, hi) is in range) */
static int first_in(int off, int s) { return off >= 0 ? 0 : (-off + s - 1) / s; }
static int first_past(int off, int s, int W) { return W - off <= 0 ? 0 : (W - off + s - 1) / s; }

typedef struct {
    int C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
} geom;

#ifdef VW
/* lanes [lo, hi) of VW set (none when hi <= lo) */
static inline vmask lanes(int lo, int hi) {
    lo = lo < 0 ? 0 : lo;
    hi = hi > VW ? VW : hi;
#if VW == 16
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
#else
    const __m256i i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), i),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), i));  /* lo <= i < hi */
#endif
}

/* VW floats from row[i0 .. i0 + VW) with the lanes outside row[0 .. W) zero: a masked load never
 * touches (nor faults on) the lanes it leaves out */
static inline vf load_in_row(const float *row, int i0, int W) {
    if (i0 >= 0 && i0 + VW <= W)  /* the usual case: a plain load (masked ones are slower) */
        return vloadu(row + i0);
    return vloadu_mask(lanes(-i0, W - i0), (const float *)((uintptr_t)row + (intptr_t)i0 * 4));
}

/* the even lanes of a, then those of b: every other value of 2 VW consecutive ones (stride 2) */
static inline vf even_lanes(vf a, vf b) {
#if VW == 16
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_permutex2var_ps(a, even, b);
#else
    /* a0 a2 b0 b2 | a4 a6 b4 b6, then the middle 64-bit pairs swapped */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
#endif
}

/* o[q] = row[q SW + off] for ow <= q < end, zero where that column is outside row[0 .. W): a vector
 * of VW output columns a step (stride 2: two loads, the even lanes); other strides one at a time.
 * Whole vectors are stored (masked stores are slow here): up to VW - 1 floats past o[end] are written
 * too, which the caller overwrites later or has room for (im2col_block's SLACK). */
static inline void patch_row(float *o, int ow, int end, const float *row, int off, int SW, int W) {
    if (SW == 1) {
        for (int q = ow; q < end; q += VW)
            vstoreu(o + q, load_in_row(row, q + off, W));
    } else if (SW == 2) {
        for (int q = ow; q < end; q += VW) {
            const int i0 = 2 * q + off;
            vstoreu(o + q, even_lanes(load_in_row(row, i0, W), load_in_row(row, i0 + VW, W)));
        }
    } else {
        for (int q = ow; q < end; q++) {
            const int64_t i = (int64_t)q * SW + off;
            o[q] = i >= 0 && i < W ? row[i] : 0.0f;
        }
    }
}

static inline void zero_row(float *o, int ow, int end) {  /* whole vectors, as patch_row */
    for (int q = ow; q < end; q += VW)
        vstoreu(o + q, vzero());
}
#else
static void patch_row(float *o, int ow, int end, const float *row, int off, int SW, int W) {
    const int a = clampi(imin(first_in(off, SW), end), ow, end), b = clampi(imin(first_past(off, SW, W), end), a, end);
    if (a > ow)
        memset(o + ow, 0, (size_t)(a - ow) * sizeof(float));
    if (SW == 1)
        memcpy(o + a, row + off + a, (size_t)(b - a) * sizeof(float));
    else
        for (int q = a; q < b; q++)
            o[q] = row[(int64_t)q * SW + off];
    if (end > b)
        memset(o + b, 0, (size_t)(end - b) * sizeof(float));
}

static void zero_row(float *o, int ow, int end) { memset(o + ow, 0, (size_t)(end - ow) * sizeof(float)); }
#endif

/* col[r * ld + (p - p0)] for the pixels p0 <= p < p0 + m and rows r = (c KH + kh) KW + kw of one image
 * (and group) whose channels start at x (ld >= m), with SLACK floats of room after the last row. The
 * block is a run of pieces of output rows; each row of col is a few vector copies (patch_row), one
 * per piece. Invariant: col's rows are written in order, each whole before the next, so what
 * patch_row stores past a piece's end lands on columns written after it (or in SLACK), however
 * many output rows the block spans. */
enum { SLACK = 16 };

static void im2col_block(const float *x, float *col, int64_t p0, int64_t m, int64_t ld, const geom *g) {
    const int64_t plane = (int64_t)g->H * g->W;
    const int h0 = (int)(p0 / g->OW), w0 = (int)(p0 % g->OW);
    float *out = col;
    for (int c = 0; c < g->C; c++)
        for (int kh = 0; kh < g->KH; kh++)
            for (int kw = 0; kw < g->KW; kw++, out += ld) {
                const int off_w = kw * g->DW - g->PW;  /* iw = ow SW + off_w */
                int64_t at = 0;                        /* the piece's first column in this row of col */
                for (int h = h0, w = w0; at < m; h++, w = 0) {
                    const int end = (int)imin64(g->OW, w + (m - at));
                    const int ih = h * g->SH - g->PH + kh * g->DH;
                    float *o = out + at - w;           /* o[ow] is output column ow of this row */
                    if (ih < 0 || ih >= g->H)
                        zero_row(o, w, end);
                    else
                        patch_row(o, w, end, x + c * plane + (int64_t)ih * g->W, off_w, g->SW, g->W);
                    at += end - w;
                }
            }
}

/* this thread's patch buffer */
static float *scratch(size_t n) {
    static __thread kept_buffer b;
    return grown(&b, n);
}

/* bias, residual and ReLU over out[p0 .. p0+m) of channels [o0, o1) of one image; the ReLU keeps NaN
 * (v < 0 is false for it) and maps -inf to 0, as ggmlpy's every ReLU (kernels.relu) */
static void epilogue(float *out, const float *res, const float *bias, int64_t P, int64_t p0, int64_t m, int o0,
                     int o1, int flags) {
    for (int o = o0; o < o1; o++) {
        float *y = out + o * P + p0;
        const float bv = bias ? bias[o] : 0.0f;
        if (res) {
            const float *r = res + o * P + p0;
            if (flags & F_RELU)
                for (int64_t i = 0; i < m; i++) { float v = y[i] + bv + r[i]; y[i] = v < 0.0f ? 0.0f : v; }
            else
                for (int64_t i = 0; i < m; i++) y[i] = y[i] + bv + r[i];
        } else if (flags & F_RELU) {
            for (int64_t i = 0; i < m; i++) { float v = y[i] + bv; y[i] = v < 0.0f ? 0.0f : v; }
        } else if (bias) {
            for (int64_t i = 0; i < m; i++) y[i] += bv;
        }
    }
}

/* What both convolution kernels read from their op: geometry, sizes and the arguments' data. */
typedef struct {
    geom g;
    int N, G, Mg, flags;
    int64_t P, in_plane, wne[4];
    const float *x, *w, *bias, *res;
    float *y;
} conv_args;

static conv_args conv_args_of(void *dst, const int32_t *pr) {
    conv_args a;
    const void *xt = src_of(dst, 0), *wt = src_of(dst, 1);
    int64_t xne[4], dne[4];
    ne_of(xt, xne);
    ne_of(wt, a.wne);
    ne_of(dst, dne);
    a.G = pr[P_GROUPS];
    a.flags = pr[P_FLAGS];
    a.g = (geom){(int)xne[2] / a.G, (int)xne[1], (int)xne[0], (int)dne[1], (int)dne[0], pr[P_KH], pr[P_KW],
                 pr[P_SH], pr[P_SW], pr[P_PH], pr[P_PW], pr[P_DH], pr[P_DW]};
    a.N = (int)dne[3];
    a.Mg = (int)dne[2] / a.G;
    a.P = (int64_t)a.g.OH * a.g.OW;
    a.in_plane = (int64_t)a.g.H * a.g.W;
    a.x = data_of(xt);
    a.w = data_of(wt);
    a.bias = (a.flags & F_BIAS) ? data_of(src_of(dst, 2)) : NULL;
    a.res = (a.flags & F_RESIDUAL) ? data_of(src_of(dst, (a.flags & F_BIAS) ? 3 : 2)) : NULL;
    a.y = data_of(dst);
    return a;
}

void ggmlpy_conv2d_f32(void *dst, int ith, int nth, void *userdata) {
    const int32_t *pr = (const int32_t *)userdata;
    const conv_args op = conv_args_of(dst, pr);
    const geom g = op.g;
    const int N = op.N, G = op.G, Mg = op.Mg, flags = op.flags, CKK = g.C * g.KH * g.KW;
    const int64_t P = op.P, in_plane = op.in_plane;
    const float *x = op.x, *w = op.w, *bias = op.bias, *res = op.res;
    float *y = op.y;
    const int direct = g.KH == 1 && g.KW == 1 && g.SH == 1 && g.SW == 1 && g.PH == 0 && g.PW == 0 &&
                       g.OH == g.H && g.OW == g.W;  /* the input plane is the patch matrix */
    BLAS_ON_THIS_THREAD_ONLY();

    int64_t block = pr[P_BLOCK];
    if (block <= 0) {
        block = BLOCK_BYTES / ((int64_t)CKK * (int64_t)sizeof(float));
        block = block < MIN_BLOCK ? MIN_BLOCK : (block + 15) & ~(int64_t)15;
    }
    if (block > P)
        block = P;
    const int64_t cut = pieces_count();
    if (pr[P_BLOCK] <= 0 && cut > 1 && (int64_t)N * G < 4 * cut) {
        /* few images: as many blocks an image as make the items a multiple of the pieces (an even share) */
        int64_t nb = (P + block - 1) / block, per = (int64_t)N * G;
        int64_t want = ((nb * per + cut - 1) / cut) * cut;
        nb = (want + per - 1) / per;
        block = ((P + nb - 1) / nb + 15) & ~(int64_t)15;
        block = block > P ? P : block;
    }
    const int64_t nblocks = (P + block - 1) / block, items = (int64_t)N * G * nblocks;
    /* the pieces (pieces.h): the items, or, with fewer items than pieces_count(), each item's output
     * channels in pieces_count() parts */
    const int64_t parts = items >= cut ? 1 : cut;
    for (int64_t piece = ith; piece < items * parts; piece += nth) {
        const int64_t it = piece / parts;
        int64_t lo = 0, hi = Mg;
        if (parts > 1)
            piece_range(Mg, parts, 1, piece % parts, &lo, &hi);
        const int o0 = (int)lo, o1 = (int)hi;
        if (o0 >= o1)
            continue;
        const int64_t bi = it % nblocks, ng = it / nblocks;
        const int gi = (int)(ng % G), n = (int)(ng / G);
        const int64_t p0 = bi * block, m = p0 + block < P ? block : P - p0;
        const float *xg = x + ((int64_t)n * G + gi) * g.C * in_plane;
        const float *a;
        int64_t lda;
        if (direct) {
            a = xg + p0;
            lda = in_plane;
        } else {
            float *col = scratch((size_t)m * CKK + SLACK);
            if (col == NULL) {  /* out of memory (a few MB): never a silently wrong value */
                float *out = y + ((int64_t)n * G + gi) * Mg * P;
                for (int o = o0; o < o1; o++)
                    for (int64_t i = 0; i < m; i++)
                        out[o * P + p0 + i] = __builtin_nanf("");
                continue;
            }
            im2col_block(xg, col, p0, m, m, &g);
            a = col;
            lda = m;
        }
        float *out = y + ((int64_t)n * G + gi) * Mg * P;
        cblas_sgemm(ColMajor, NoTrans, NoTrans, (int)m, o1 - o0, CKK, 1.0f, a, (int)lda,
                    w + ((int64_t)gi * Mg + o0) * CKK, CKK, 0.0f, out + (int64_t)o0 * P + p0, (int)P);
        epilogue(out, res ? res + ((int64_t)n * G + gi) * Mg * P : NULL, bias ? bias + gi * Mg : NULL, P, p0, m, o0, o1,
                 flags);
    }
}

/* Max pooling's rule for a window's cells, in the order given: `v > m ? v : m` from the first (a
 * column of rows) or from -FLT_MAX (a row of columns), so that of +0 and -0 the first is kept, and
 * NaN if any cell is NaN (PyTorch's max pooling; a NaN never wins the select, so it is tracked apart
 * and put back at the end). _mm512_max_ps(v, m) is that select, lane by lane. */
static inline float pool_pick(float v, float m, int *nan) {
    *nan |= v != v;
    return v > m ? v : m;
}

/* tmp[w] = the rule's value for column w < W of n >= 1 rows (W apart from `rows`), a vector of VW
 * columns through every row at once */
static void column_max(float *tmp, const float *rows, int W, int n) {
    int w = 0;
#ifdef VW
    for (; w + VW <= W; w += VW) {
        vf m = vloadu(rows + w);
        vbool nan = visnan(m);
        for (int h = 1; h < n; h++) {
            const vf v = vloadu(rows + (int64_t)h * W + w);
            nan = vbor(nan, visnan(v));
            m = vmax(v, m);
        }
        vstoreu(tmp + w, vblend(nan, m, vset1(__builtin_nanf(""))));
    }
#endif
    for (; w < W; w++) {
        float m = rows[w];
        int nan = m != m;
        for (int h = 1; h < n; h++)
            m = pool_pick(rows[(int64_t)h * W + w], m, &nan);
        tmp[w] = nan ? __builtin_nanf("") : m;
    }
}

/* A max pooling's windows along a row: what pool_row needs besides the rows. */
typedef struct {
    int W, OW, KW, SW, PW;
} pool_cols;

/* this thread's row of column maxima for pool_row: PW cells of -FLT_MAX, W cells that pool_row
 * writes, and as many -FLT_MAX cells after as its last vector of 16 windows reads (cells outside the
 * input never win a max); NULL when out of memory. `kept`: the thread's buffer to take it from. */
static float *pool_tmp(const pool_cols *pc, float *(*kept)(size_t)) {
    const int64_t after = ((int64_t)pc->OW + 16) * pc->SW + pc->KW + 32, n = pc->PW + pc->W + after;
    float *buf = kept((size_t)n);
    if (buf == NULL)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        buf[i] = -3.40282347e+38f;
    return buf + pc->PW;
}

/* out[0 .. OW) = the windows of one output row: the horizontal window max (KW cells at stride SW from
 * PW before the row) of the column maxima of its n input rows (W apart from `rows`; n = 0: a window
 * wholly outside the input, -FLT_MAX); tmp from pool_tmp */
static void pool_row(float *out, float *tmp, const float *rows, int n, const pool_cols *pc) {
    const int W = pc->W, OW = pc->OW, KW = pc->KW, SW = pc->SW, PW = pc->PW;
    if (n <= 0) {
        for (int ow = 0; ow < OW; ow++)
            out[ow] = -3.40282347e+38f;
        return;
    }
    column_max(tmp, rows, W, n);
    int ow = 0;
#ifdef VW
    if (SW <= 2) {  /* VW windows a step, their cells in the scalar loop's order (the same NaN, -0) */
        for (; ow < OW; ow += VW) {
            vf m = vset1(-3.40282347e+38f);
            vbool nan = visnan(vzero());
            for (int kw = 0; kw < KW; kw++) {
                const float *c = tmp + (int64_t)ow * SW - PW + kw;
                const vf v = SW == 1 ? vloadu(c) : even_lanes(vloadu(c), vloadu(c + VW));
                nan = vbor(nan, visnan(v));
                m = vmax(v, m);  /* pool_pick */
            }
            vstoreu_n(out + ow, OW - ow, vblend(nan, m, vset1(__builtin_nanf(""))));
        }
    }
#endif
    for (; ow < OW; ow++) {
        const int w0 = ow * SW - PW, wlo = imax(w0, 0), whi = imin(w0 + KW, W);
        float m = -3.40282347e+38f;
        int nan = 0;
        for (int w = wlo; w < whi; w++)
            m = pool_pick(tmp[w], m, &nan);
        out[ow] = nan ? __builtin_nanf("") : m;
    }
}

/* 2-D max pooling of x [W, H, C, N] into dst [OW, OH, C, N] (contiguous): windows of KH x KW cells at
 * strides SH, SW, starting PH, PW cells before the input; cells outside the input never enter a max
 * (ONNX's padding), a window wholly outside gives -FLT_MAX, one with a NaN cell NaN (pool_pick).
 * userdata: int32_t[6] = KH, KW, SH, SW, PH, PW. Each output row is the horizontal window max of the
 * vertical max of its input rows (pool_row); ggml's threads split the planes. */
void ggmlpy_maxpool2d_f32(void *dst, int ith, int nth, void *userdata) {
    const int32_t *pr = (const int32_t *)userdata;
    const int KH = pr[0], SH = pr[2], PH = pr[4];
    const void *xt = src_of(dst, 0);
    int64_t xne[4], dne[4];
    ne_of(xt, xne);
    ne_of(dst, dne);
    const int W = (int)xne[0], H = (int)xne[1], OW = (int)dne[0], OH = (int)dne[1];
    const pool_cols pc = {W, OW, pr[1], pr[3], pr[5]};
    const int64_t planes = dne[2] * dne[3];
    const float *x = data_of(xt);
    float *y = data_of(dst);
    float *tmp = pool_tmp(&pc, scratch);
    const int64_t p0 = planes * ith / nth, p1 = planes * (ith + 1) / nth;
    for (int64_t p = p0; p < p1; p++) {
        const float *xp = x + p * (int64_t)H * W;
        float *yp = y + p * (int64_t)OH * OW;
        for (int oh = 0; oh < OH; oh++) {
            float *out = yp + (int64_t)oh * OW;
            const int h0 = oh * SH - PH, hlo = imax(h0, 0), hhi = imin(h0 + KH, H);
            if (tmp == NULL) {  /* out of memory: never a silently wrong value */
                for (int ow = 0; ow < OW; ow++)
                    out[ow] = __builtin_nanf("");
                continue;
            }
#ifdef VW
            /* the rows that output row oh + 2 adds, fetched now: the input comes from L3 or memory
             * (a layer's output written just before), faster fetched ahead than as it is read */
            for (int h = imax(h0 + KH + SH, 0); h < h0 + KH + 2 * SH && h < H; h++)
                for (int w = 0; w < W; w += 16)
                    _mm_prefetch((const char *)(xp + (int64_t)h * W + w), _MM_HINT_T0);
#endif
            pool_row(out, tmp, xp + (int64_t)hlo * W, hhi - hlo, &pc);
        }
    }
}

/* The input gradient of a 2-D im2col (ggml's IM2COL_BACK) as one node: dst [IW, IH, IC, N] from the
 * patch gradients g [IC*KH*KW, OW, OH, N] (both contiguous; g in im2col's layout: each output pixel's
 * patch, by channel, then kernel row, then column). Each input cell is the sum of the patch entries
 * that read it, added in ggml's order (kernel row, then column, from +0.0) so that the result is
 * ggml's to the bit; but where ggml works out for every cell and tap whether and which pixel read it
 * (two 64-bit divisions each), this walks each tap's pixels along an input row at the stride.
 * userdata: int32_t[8] = KW, KH, s0, s1, p0, p1, d0, d1 (ggml's op parameters; 0 along W, 1 along H).
 * Threads split the (image, channel) planes. */
void ggmlpy_im2col_back_f32(void *dst, int ith, int nth, void *userdata) {
    const int32_t *pr = (const int32_t *)userdata;
    const int KW = pr[0], KH = pr[1], S0 = pr[2], S1 = pr[3], P0 = pr[4], P1 = pr[5], D0 = pr[6], D1 = pr[7];
    const void *gt = src_of(dst, 0);
    int64_t gne[4], dne[4];
    ne_of(gt, gne);
    ne_of(dst, dne);
    const int IW = (int)dne[0], IH = (int)dne[1], IC = (int)dne[2], OW = (int)gne[1], OH = (int)gne[2];
    const int64_t CKK = gne[0], planes = dne[2] * dne[3];
    const float *g = data_of(gt);
    float *x = data_of(dst);
    const int64_t q0 = planes * ith / nth, q1 = planes * (ith + 1) / nth;
    for (int64_t q = q0; q < q1; q++) {
        const int64_t n = q / IC, c = q % IC;
        const float *gc = g + n * OH * OW * CKK + c * KH * KW;  /* this channel's taps, pixel (0, 0) */
        float *plane = x + q * IH * IW;
        for (int ih = 0; ih < IH; ih++) {
            float *row = plane + (int64_t)ih * IW;
            memset(row, 0, (size_t)IW * sizeof(float));
            for (int kh = 0; kh < KH; kh++) {
                const int th = ih + P1 - kh * D1;  /* = oh S1 for the output row oh that reads ih at kh */
                if (th < 0 || th % S1 != 0 || th / S1 >= OH)
                    continue;
                const float *gr = gc + (int64_t)(th / S1) * OW * CKK + kh * KW;
                for (int kw = 0; kw < KW; kw++) {
                    const int off = kw * D0 - P0;  /* pixel ow reads input column ow S0 + off */
                    const int lo = imin(first_in(off, S0), OW), hi = imin(first_past(off, S0, IW), OW);
                    for (int ow = lo; ow < hi; ow++)
                        row[ow * S0 + off] += gr[(int64_t)ow * CKK + kw];
                }
            }
        }
    }
}

/* A linear layer's product and bias as one node: dst [N, T] = w [N, K] x [K, T] + bias [N] in
 * column-major terms (ONNX's X (T, K) @ W (K, N) + b, with W in its own row-major layout), each
 * piece of dst set to the bias and the product added onto it (beta = 1) by OpenBLAS. The pieces
 * (pieces.h): the columns (tokens), or the rows when there are more rows, in pieces_count() blocks
 * of 16. */
void ggmlpy_linear_f32(void *dst, int ith, int nth, void *userdata) {
    (void)userdata;
    const void *wt = src_of(dst, 0), *xt = src_of(dst, 1);
    int64_t wne[4], xne[4];
    ne_of(wt, wne);
    ne_of(xt, xne);
    const int m = (int)wne[0], k = (int)wne[1], n = (int)(xne[1] * xne[2] * xne[3]);
    const float *w = data_of(wt), *x = data_of(xt), *bias = data_of(src_of(dst, 2));
    float *y = data_of(dst);
    BLAS_ON_THIS_THREAD_ONLY();
    for (int64_t p = ith; p < pieces_count(); p += nth) {
        int64_t i0 = 0, i1 = m, j0 = 0, j1 = n;
        if (n >= m)
            piece_range(n, pieces_count(), 16, p, &j0, &j1);
        else
            piece_range(m, pieces_count(), 16, p, &i0, &i1);
        if (i0 >= i1 || j0 >= j1)
            continue;
        for (int64_t j = j0; j < j1; j++)
            memcpy(y + j * m + i0, bias + i0, (size_t)(i1 - i0) * sizeof(float));
        cblas_sgemm(ColMajor, NoTrans, NoTrans, (int)(i1 - i0), (int)(j1 - j0), k, 1.0f, w + i0, m, x + j0 * k, k, 1.0f,
                    y + j0 * m + i0, m);
    }
}

/* A linear layer with weights packed at load time, with AVX2 or AVX-512: dst [N, T] = w x (+ bias), as
 * ggmlpy_linear_f32, with the product computed here instead of by OpenBLAS. The weights (the
 * product's first operand, N x K column-major) are packed once into panels of LMR rows, [K][LMR]
 * each (pack_linear in kernels/__init__.py); x is packed per call into panels of LNR columns,
 * [k][LNR], LKC rows of K at a time. The micro-kernel keeps an LMR x LNR block of dst in 24 vector
 * registers (two 16-float vectors a column; with AVX2 four tiles of 16 x 6 in turn, 12 registers
 * each), starting from the bias, and adds one rank-1 update per k: two loads from the weight panel,
 * a broadcast from x's a column. OpenBLAS repacks the weights on every
 * call; measured on a transformer's projections (128 tokens, cold caches) 97-104 GFLOP/s against
 * OpenBLAS's 88-94 on one core. Threads split the (column panel, weight panel) pairs evenly.
 * With LIN_GELU, each finished block goes through GELU (vmath.h's vgelu) while it is in L1: a
 * transformer's first feed-forward layer and its activation as one node; with LIN_RESIDUAL, a
 * tensor of dst's shape is added to each finished block (a residual connection; it must not share
 * dst's memory: the blocks hold partial sums before their last block of K).
 * With LIN_SPLIT, dst is written as N / D matrices [D, T] one after another (rows i of part i / D:
 * an attention's stacked q, k, v projection, each part then read in place); D a multiple of LMR, so
 * that no weight panel straddles two parts; never with LIN_RESIDUAL (whose r is read in [N, T] order).
 * An argument after those (Kernels.chain_linears sets it) is the packed weights of the graph's next
 * linear layer: their first block, which that node would otherwise wait for from L3 or memory, is
 * fetched into L2 during this node's last block.
 * userdata: int32_t[2] = flags (LIN_BIAS: a bias, the third argument; LIN_RESIDUAL: the residual
 * [N, T] contiguous, the argument after it; LIN_GELU, applied after the residual; LIN_SPLIT), D. */
#ifdef VW
enum { LMR = 32, LNR = 12, LKC = 256, LPB = 4 };  /* LPB x LKC x LMR floats of weights: 128 KB */
enum { LIN_BIAS = 1, LIN_GELU = 2, LIN_RESIDUAL = 4, LIN_SPLIT = 8 };

int ggmlpy_linear_packed_mr(void) { return LMR; }

/* Rows [0, 2 VW) of an LMR x NR block (NR <= LNR columns computed, nr <= NR of them loaded and
 * stored; a: the panel's rows from the tile's first, LMR floats a k), prefetching a's row PF rows
 * ahead: 2 NR accumulators, the two rows' vectors and a broadcast in registers (AVX-512: the whole
 * 32 x 12 block, 27 of 32 registers; AVX2: 16 x 6, 15 of 16). Each value is the same chain of fmas
 * from the bias (or the partial sum) in k's order in either build. */
static inline __attribute__((always_inline)) void linear_tile(const int NR, const int PF, int kc, const float *restrict a,
                                                              const float *restrict b, int ldb, float *c,
                                                              int64_t ldc, int first, const float *bias,
                                                              vmask m0, vmask m1, int nr,
                                                              const char *pf, int64_t pf_step) {
    vf c0[LNR], c1[LNR];
    if (first) {
        const vf b0 = bias ? vloadu_mask(m0, bias) : vzero();
        const vf b1 = bias ? vloadu_mask(m1, bias + VW) : vzero();
#pragma GCC unroll 12
        for (int j = 0; j < NR; j++) {
            c0[j] = b0;
            c1[j] = b1;
        }
    } else {
#pragma GCC unroll 12
        for (int j = 0; j < NR; j++) {
            c0[j] = j < nr ? vloadu_mask(m0, c + j * ldc) : vzero();
            c1[j] = j < nr ? vloadu_mask(m1, c + j * ldc + VW) : vzero();
        }
    }
    for (int k = 0; k < kc; k++) {
        /* unaligned loads: ggml aligns tensors to 32 bytes only */
        const vf a0 = vloadu(a + LMR * k), a1 = vloadu(a + LMR * k + VW);
        _mm_prefetch((const char *)(a + LMR * (k + PF)), _MM_HINT_T0);
        if (pf != NULL)
            _mm_prefetch(pf + k * pf_step, _MM_HINT_T1);
#pragma GCC unroll 12
        for (int j = 0; j < NR; j++) {
            const vf bj = vset1(b[ldb * k + j]);
            c0[j] = vfmadd(a0, bj, c0[j]);
            c1[j] = vfmadd(a1, bj, c1[j]);
        }
    }
#pragma GCC unroll 12
    for (int j = 0; j < NR; j++)
        if (j < nr) {
            vstoreu_mask(c + j * ldc, m0, c0[j]);
            vstoreu_mask(c + j * ldc + VW, m1, c1[j]);
        }
}

/* The LMR x NR block: its first mr rows stored (mr <= LMR), as linear_tile's one tile (AVX-512) or
 * its two row halves by two column halves (AVX2: column halves of at most LNR / 2). The weights'
 * layer prefetch (pf) goes with the first tile alone. */
static inline __attribute__((always_inline)) void linear_block(const int NR, const int PF, int kc, const float *restrict a,
                                                               const float *restrict b, int ldb, float *c,
                                                               int64_t ldc, int first, const float *bias, int mr,
                                                               int nr, const char *pf, int64_t pf_step) {
#if VW == 16
    linear_tile(NR, PF, kc, a, b, ldb, c, ldc, first, bias, vfirst(mr), vfirst(mr - VW), nr, pf, pf_step);
#else
    enum { HALF = LNR / 2 };
    for (int h = 0; h < LMR && h < mr; h += 2 * VW) {
        const vmask m0 = vfirst(mr - h), m1 = vfirst(mr - h - VW);
        const float *bh = bias ? bias + h : NULL;
        linear_tile(NR < HALF ? NR : HALF, PF, kc, a + h, b, ldb, c + h, ldc, first, bh, m0, m1, nr, pf, pf_step);
        pf = NULL;
        if (NR > HALF && nr > HALF)
            linear_tile(NR > HALF ? NR - HALF : 1, PF, kc, a + h, b + HALF, ldb, c + h + HALF * ldc, ldc, first, bh, m0,
                        m1, nr - HALF, NULL, 0);
    }
#endif
}

/* how far ahead (rows) linear_kernel_cols prefetches its weights: a convolution's first strip of a
 * block reads them from L3 or memory */
#ifndef CONV_PF
#define CONV_PF 32
#endif

/* linear_block over the first nr columns only (b's rows LNR apart): a last, partial panel of columns
 * (a plane's last strip, a batch of fewer than LNR rows) computes no padding columns; the first mr
 * rows stored; prefetching (into L2) the bytes pf + k pf_step as it goes, k < kc (pf NULL: none) */
static void linear_kernel_cols(int kc, const float *restrict a, const float *restrict b, float *c, int64_t ldc,
                               int first, const float *bias, int mr, int nr, const char *pf, int64_t pf_step) {
    switch (nr) {
#define COLS(n) case n: linear_block(n, CONV_PF, kc, a, b, LNR, c, ldc, first, bias, mr, n, pf, pf_step); break;
    COLS(1) COLS(2) COLS(3) COLS(4) COLS(5) COLS(6) COLS(7) COLS(8) COLS(9) COLS(10) COLS(11)
#undef COLS
    default: linear_block(LNR, CONV_PF, kc, a, b, LNR, c, ldc, first, bias, mr, LNR, pf, pf_step); break;
    }
}

/* a panel of columns, prefetching kc cache lines from pf into L2 as it goes (pf NULL: none); a last,
 * partial panel (nr < LNR) computes only its columns */
static inline void linear_kernel(int kc, const float *restrict a, const float *restrict b, float *c, int64_t ldc,
                                 int first, const float *bias, int mr, int nr, const char *pf) {
    if (nr < LNR)
        linear_kernel_cols(kc, a, b, c, ldc, first, bias, mr, nr, pf, 64);
    else
        linear_block(LNR, 8, kc, a, b, LNR, c, ldc, first, bias, mr, nr, pf, 64);
}

/* a finished block of dst (nr columns ldc apart, their first mr rows) plus the same block of r */
static void residual_block(float *c, const float *r, int64_t ldc, int nr, int mr) {
    for (int j = 0; j < nr; j++, c += ldc, r += ldc)
        for (int i = 0; i < LMR && i < mr; i += VW)
            vstoreu_n(c + i, mr - i, vadd(vloadu_n(c + i, mr - i), vloadu_n(r + i, mr - i)));
}

/* GELU in place over a finished block of dst: nr columns ldc apart, their first mr rows */
static void gelu_block(float *c, int64_t ldc, int nr, int mr) {
    for (int j = 0; j < nr; j++, c += ldc)
        for (int i = 0; i < LMR && i < mr; i += VW)
            vstoreu_n(c + i, mr - i, vgelu(vloadu_n(c + i, mr - i)));
}

/* this thread's buffer for x's packed panels (apart from the convolution's patch buffer) */
static float *panel_scratch(size_t n) {
    static __thread kept_buffer b;
    return grown(&b, n);
}

/* x[pc:pc+kc, jr:jr+nr] (its columns ldx apart) as the [k][LNR] panel linear_kernel reads, zero past
 * column nr: VW k of VW columns a step (all LNR of them with AVX-512, 8 and 4 with AVX2), loaded as
 * rows and transposed in registers (vmath.h); each result is one k's values, stored masked. */
static void pack_panel(float *restrict bp, const float *x, int64_t ldx, int nr, int kc) {
    for (int k0 = 0; k0 < kc; k0 += VW) {
        const int nk = imin(VW, kc - k0);
        const vmask mk = vfirst(nk);
        for (int j0 = 0; j0 < LNR; j0 += VW) {
            const vmask mj = vfirst(LNR - j0);
            vf r[VW], o[VW];
            for (int j = 0; j < VW; j++)
                r[j] = j0 + j < nr && j0 + j < LNR ? vloadu_mask(mk, x + (j0 + j) * ldx + k0) : vzero();
            vtranspose(r, o);
            for (int k = 0; k < nk; k++)
                vstoreu_mask(bp + (int64_t)(k0 + k) * LNR + j0, mj, o[k]);
        }
    }
}

/* NaN over this thread's blocks of dst (its scratch could not be had): never a silently wrong value */
/* where dst's element (row ir, column jr) is, and *ldc its columns' distance: [N, T], or with
 * split rows D (LIN_SPLIT, ir a multiple of LMR) part ir / D of [D, T] matrices */
static float *dst_at(float *y, int N, int T, int D, int ir, int jr, int64_t *ldc) {
    if (D == 0) {
        *ldc = N;
        return y + (int64_t)jr * N + ir;
    }
    *ldc = D;
    return y + (int64_t)(ir / D) * T * D + (int64_t)jr * D + ir % D;
}

static void linear_nan(float *y, int N, int T, int D, int npan, int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; u++) {
        const int jr = (int)(u / npan) * LNR, ir = (int)(u % npan) * LMR;
        int64_t ldc;
        float *c = dst_at(y, N, T, D, ir, jr, &ldc);
        for (int j = 0; j < LNR && jr + j < T; j++)
            for (int i = 0; i < LMR && ir + i < N; i++)
                c[j * ldc + i] = __builtin_nanf("");
    }
}

void ggmlpy_linear_packed_f32(void *dst, int ith, int nth, void *userdata) {
    const int flags = ((const int32_t *)userdata)[0], D = flags & LIN_SPLIT ? ((const int32_t *)userdata)[1] : 0;
    const void *wt = src_of(dst, 0), *xt = src_of(dst, 1);
    int64_t wne[4], xne[4], dne[4];
    ne_of(wt, wne);
    ne_of(xt, xne);
    ne_of(dst, dne);
    const int K = (int)wne[1], npan = (int)wne[2], N = (int)(D ? dne[0] * dne[2] : dne[0]);  /* split: [D, T, N / D] */
    const int T = (int)(xne[1] * xne[2] * xne[3]);
    const float *wp = data_of(wt), *x = data_of(xt);
    const float *bias = flags & LIN_BIAS ? data_of(src_of(dst, 2)) : NULL;
    const float *res = flags & LIN_RESIDUAL ? data_of(src_of(dst, flags & LIN_BIAS ? 3 : 2)) : NULL;
    const void *next = src_of(dst, 2 + !!(flags & LIN_BIAS) + !!(flags & LIN_RESIDUAL));  /* NULL: none */
    float *y = data_of(dst);
    const int ncp = (T + LNR - 1) / LNR;  /* x's column panels */
    /* this thread's share of the (column panel, weight panel) pairs, column-panel-major: column panels
     * [cp0, cp1), the first from weight panel q_first, the last to q_last */
    const int64_t units = (int64_t)ncp * npan, u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1)
        return;
    const int cp0 = (int)(u0 / npan), cp1 = (int)((u1 - 1) / npan) + 1;
    const int q_first = (int)(u0 % npan), q_last = (int)((u1 - 1) % npan) + 1;
    float *bp = panel_scratch((size_t)(cp1 - cp0) * imin(K, LKC) * LNR);
    if (bp == NULL) {
        linear_nan(y, N, T, D, npan, u0, u1);
        return;
    }
    /* the next layer's first block for this thread (were its columns as many as these): rows
     * [0, min(LKC, K')) of up to LPB panels from the one its share starts at */
    const float *next_w = NULL;
    int next_k = 0, next_kc = 0, next_q = 0, next_np = 0;
    if (next != NULL) {
        int64_t ne[4];
        ne_of(next, ne);
        next_w = data_of(next);
        next_k = (int)ne[1];
        next_kc = imin(LKC, next_k);
        next_q = (int)((int64_t)ncp * ne[2] * ith / nth % ne[2]);
        next_np = imin(LPB, (int)ne[2] - next_q);
    }
    for (int pc = 0; pc < K; pc += LKC) {
        const int kc = imin(LKC, K - pc);
        for (int cp = cp0; cp < cp1; cp++)
            pack_panel(bp + (size_t)(cp - cp0) * kc * LNR, x + (int64_t)cp * LNR * K + pc, K, imin(LNR, T - cp * LNR),
                       kc);
        /* LPB weight panels at a time pass every column panel: they stay in L2 (a whole layer's weights
         * and its output would not, and were read from L3 again for each column panel). Meanwhile the
         * next block's panels (after the last, the next layer's first) are fetched into L2, kc lines a
         * micro-kernel call, `parts` calls a panel: the first pass over a block otherwise waits on L3
         * or memory. */
        for (int pb = 0; pb < npan; pb += LPB) {
            const int next_pc = pb + LPB < npan ? pc : pc + LKC, next_pb = pb + LPB < npan ? pb + LPB : 0;
            const float *fw = wp;  /* the panels fetched: fw's from fq on, rows from fr, fk rows apart */
            int fq = next_pb, fk = K, fr = next_pc, parts = 2, count = 2 * imin(LPB, npan - next_pb);
            if (next_pc >= K) {
                fw = next_w, fq = next_q, fk = next_k, fr = 0;
                parts = (2 * next_kc + kc - 1) / kc;
                count = next_w != NULL ? parts * next_np : 0;
            }
            int fetched = 0;
            for (int cp = cp0; cp < cp1; cp++) {
                const int jr = cp * LNR, nr = imin(LNR, T - jr);
                const float *b = bp + (size_t)(cp - cp0) * kc * LNR;
                const int q1 = imin(pb + LPB, cp == cp1 - 1 ? q_last : npan);
                for (int p = imax(pb, cp == cp0 ? q_first : 0); p < q1; p++) {
                    const int ir = p * LMR, mr = imin(LMR, N - ir);
                    int64_t ldc;
                    float *c = dst_at(y, N, T, D, ir, jr, &ldc);
                    const char *pf = NULL;
                    if (fetched < count) {
                        const int q = fq + fetched / parts;
                        pf = (const char *)(fw + ((int64_t)q * fk + fr) * LMR) + (int64_t)(fetched % parts) * kc * 64;
                        fetched++;
                    }
                    linear_kernel(kc, wp + ((int64_t)p * K + pc) * LMR, b, c, ldc, pc == 0, bias ? bias + ir : NULL, mr,
                                  nr, pf);
                    if (res != NULL && pc + kc == K)
                        residual_block(c, res + (c - y), ldc, nr, mr);
                    if ((flags & LIN_GELU) && pc + kc == K)
                        gelu_block(c, ldc, nr, mr);
                }
            }
        }
    }
}

/* The convolution of ggmlpy_conv2d_f32 (AVX2 or AVX-512) with its weights packed at load (pack_linear of
 * W^T: panels of LMR output channels, [C*KH*KW][LMR]): out^T (M x P) = W (M x CKK) col^T (CKK x P),
 * the orientation of the linear layers above, whose x panels ([k][LNR pixels]) are exactly what
 * im2col_block writes for a strip of LNR pixels. A run of strips (up to CONV_STRIP_BYTES of patches
 * and RUN_L2_BYTES of tiles and a block of patch rows: a deep layer's whole small plane, or several
 * images') is consumed CKB rows of CKK at a time: those
 * rows of each channel panel (in L1) pass over every strip of the run, the LMR x LNR blocks summed
 * into tiles (from the bias), so that the layer's weights are read from memory once a run rather
 * than once a strip; the tiles are then written to the NCHW output a channel row at a time with the
 * residual and ReLU. A plane's last, partial strip computes only its pixels (linear_kernel_cols).
 * Work items are (group, a run of strips) times channel panels, split evenly over the threads.
 * userdata as ggmlpy_conv2d_f32's. */
#define CONV_STRIP_BYTES (4 * 1024 * 1024)
#define RUN_L2_BYTES (512 * 1024)
enum { CKB = 256 };  /* rows of a channel panel (32 KB) that stay in L1 while a run of strips passes */

/* this thread's aligned copy of a block of a channel panel's rows */
static float *weight_scratch(size_t n) {
    static __thread kept_buffer b;
    return grown(&b, n);
}

/* this thread's buffer of a run's output tiles */
static float *tile_scratch(size_t n) {
    static __thread kept_buffer b;
    return grown(&b, n);
}

void ggmlpy_conv2d_packed_f32(void *dst, int ith, int nth, void *userdata) {
    const conv_args op = conv_args_of(dst, (const int32_t *)userdata);
    const geom g = op.g;
    const int N = op.N, G = op.G, Mg = op.Mg, flags = op.flags;
    const int CKK = (int)op.wne[1], npan = (int)op.wne[2] / G;  /* each group's channels: npan panels */
    const int64_t P = op.P, in_plane = op.in_plane;
    const float *x = op.x, *wp = op.w, *bias = op.bias, *res = op.res;
    float *y = op.y;
    /* a group's strips, the images' one after another (strip t: image t / strips, its strip t % strips):
     * a run may take strips of several images, so that a deep layer of small planes reads its
     * weights once a run of images rather than once an image */
    const int64_t strips = (P + LNR - 1) / LNR, all = (int64_t)N * strips;
    int64_t run = CONV_STRIP_BYTES / ((int64_t)LNR * CKK * (int64_t)sizeof(float));
    /* and what a pass over a run's strips keeps in L2 (every panel's tiles and a block of patch rows) */
    const int64_t per_strip = ((int64_t)npan * LMR + imin(CKB, CKK)) * LNR * (int64_t)sizeof(float);
    run = imin64(run, RUN_L2_BYTES / per_strip);
    run = run < 1 ? 1 : run > all ? all : run;
    const int64_t runs = (all + run - 1) / run, items = (int64_t)G * runs;
    /* this thread's share of the (item, channel panel) pairs: whole items, and at most one item at
     * each end shared with the next thread (whose patches both then build) */
    const int64_t units = items * npan, u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1)
        return;
    float *col = scratch((size_t)run * LNR * CKK);
    /* ggml aligns tensors to 32 bytes: a weight row (two vectors) that straddles cache lines makes
     * every load of the product two (measured: 210 -> 148 GF/s in L1), so misaligned weights are
     * copied a block of CKB rows at a time into an aligned buffer (32 KB) that the run's strips read */
    float *wcopy = ((uintptr_t)wp & 63) != 0 ? weight_scratch((size_t)CKB * LMR) : NULL;
    if (((uintptr_t)wp & 63) != 0 && wcopy == NULL)
        col = NULL;  /* out of memory: the NaN below */
    for (int64_t it = u0 / npan; it <= (u1 - 1) / npan; it++) {
        const int q0 = it == u0 / npan ? (int)(u0 % npan) : 0;
        const int q1 = it == (u1 - 1) / npan ? (int)((u1 - 1) % npan) + 1 : npan;
        const int gi = (int)(it / runs);
        const int64_t t0 = it % runs * run, t1 = t0 + run < all ? t0 + run : all, ns = t1 - t0;
        float *tiles = col == NULL ? NULL : tile_scratch((size_t)(q1 - q0) * ns * LNR * LMR);
        float *blk = tiles == NULL ? NULL : panel_scratch((size_t)(ns * LNR + SLACK) * CKK + SLACK);
        if (blk == NULL) {  /* out of memory (a few MB): never a silently wrong value */
            for (int64_t t = t0; t < t1; t++) {
                float *out = y + ((t / strips) * G + gi) * Mg * P;
                for (int64_t o = (int64_t)q0 * LMR; o < Mg && o < (int64_t)q1 * LMR; o++)
                    for (int64_t p = t % strips * LNR; p < P && p < (t % strips + 1) * LNR; p++)
                        out[o * P + p] = __builtin_nanf("");
            }
            continue;
        }
        {  /* the run's patches as one block (long contiguous runs), an image's piece at a time, then
            * cut into [k][LNR] strips; the columns past a plane's last pixel are never read. A piece
            * writes up to SLACK floats past its end: into the next piece's columns (written later)
            * or the row's SLACK columns */
            const int64_t ld = ns * LNR + SLACK;
            for (int64_t t = t0; t < t1;) {
                const int64_t n = t / strips, te = (n + 1) * strips < t1 ? (n + 1) * strips : t1;
                const int64_t p0 = t % strips * LNR, pe = (te - n * strips) * LNR;
                im2col_block(x + (n * G + gi) * g.C * in_plane, blk + (t - t0) * LNR, p0, (pe < P ? pe : P) - p0, ld,
                             &g);
                t = te;
            }
            for (int64_t t = t0; t < t1; t++) {
                float *c = col + (t - t0) * LNR * CKK;
                const float *b = blk + (t - t0) * LNR;
                for (int r = 0; r < CKK; r++)
                    memcpy(c + (int64_t)r * LNR, b + (int64_t)r * ld, LNR * sizeof(float));
            }
        }
        /* CKB rows of the patches at a time: each panel's rows (in L1) pass over every strip of the
         * run, the tiles (32 channels by 12 pixels each, from the bias) summed in place; the weights
         * are read once a run (small planes: once a layer or a few images), the patches' rows from
         * L2. A plane's partial last strip computes only its pixels. */
        for (int kb = 0; kb < CKK; kb += CKB) {
            const int kc = imin(CKB, CKK - kb);
            for (int q = q0; q < q1; q++) {
                const float *wq = wp + (((int64_t)gi * npan + q) * CKK + kb) * LMR;
                if (wcopy != NULL) {  /* the rows the strips read, 64-byte aligned */
                    memcpy(wcopy, wq, (size_t)kc * LMR * sizeof(float));
                    wq = wcopy;
                }
                const float *bq = bias ? bias + gi * Mg + q * LMR : NULL;
                float *tq = tiles + (int64_t)(q - q0) * ns * LNR * LMR;
                /* the next block of weights (the next panel's, or the first panel's next rows) is
                 * fetched while the strips use this one, each strip a share: the first strip would
                 * otherwise wait on memory for every row */
                const int kn = q + 1 < q1 ? kb : kb + CKB, qn = q + 1 < q1 ? q + 1 : q0;
                const char *pf = ns <= 32 && kn < CKK
                                     ? (const char *)(wp + (((int64_t)gi * npan + qn) * CKK + kn) * LMR) : NULL;
                const int64_t step = (LMR * (int64_t)sizeof(float) + ns - 1) / ns;  /* bytes a row, a strip */
                for (int64_t t = t0; t < t1; t++) {
                    const int64_t ls = t % strips;
                    const int nr = (int)(P - ls * LNR < LNR ? P - ls * LNR : LNR);
                    const float *cs = col + (t - t0) * LNR * CKK + (int64_t)kb * LNR;
                    float *ts = tq + (t - t0) * LNR * LMR;
                    linear_kernel_cols(kc, wq, cs, ts, LMR, kb == 0, bq, LMR, nr,
                                       pf ? pf + (t - t0) * kc * step : NULL, step);
                }
            }
        }
        for (int q = q0; q < q1; q++) {
            const int o0 = q * LMR, mr = imin(LMR, Mg - o0);
            for (int64_t t = t0; t < t1; t++) {
                const int64_t n = t / strips, p0 = t % strips * LNR;
                const int m = (int)(P - p0 < LNR ? P - p0 : LNR);
                float *out = y + (n * G + gi) * Mg * P;
                const float *rg = res ? res + (n * G + gi) * Mg * P : NULL;
                const float *tile = tiles + ((int64_t)(q - q0) * ns + (t - t0)) * LNR * LMR;
                for (int o = 0; o < mr; o++) {
                    float *yo = out + (int64_t)(o0 + o) * P + p0;
                    const float *ro = rg ? rg + (int64_t)(o0 + o) * P + p0 : NULL;
                    for (int j = 0; j < m; j++) {
                        float v = tile[j * LMR + o] + (ro ? ro[j] : 0.0f);
                        yo[j] = (flags & F_RELU) && v < 0.0f ? 0.0f : v;
                    }
                }
            }
        }
    }
}

#else
int ggmlpy_linear_packed_mr(void) { return 0; }  /* no AVX2 or AVX-512: linear layers use ggmlpy_linear_f32 */

void ggmlpy_conv2d_packed_f32(void *dst, int ith, int nth, void *userdata) {
    (void)dst; (void)ith; (void)nth; (void)userdata;
}

void ggmlpy_linear_packed_f32(void *dst, int ith, int nth, void *userdata) {
    (void)dst; (void)ith; (void)nth; (void)userdata;
}
#endif

#ifdef VW
/* The pixel-major kernels' blocks are made of 16-pixel segments in both builds (the same blocks, panels
 * and packing, so the same sums in the same order: the same bits): a segment is one vector with
 * AVX-512, SV = 2 with AVX2, where a block's accumulators (24 vectors with AVX-512) are twice the 16
 * registers and each block is computed in parts of 12 accumulators. */
enum { SV = 16 / VW };
typedef uint16_t seg_bits;  /* a segment's pixels, one bit each (a __mmask16 with AVX-512) */

/* The convolution with pixels in the vector lanes, for layers whose output planes are
 * wide: out (P x M) = col (P x CKK) W^T (CKK x M) in blocks of PV*16 pixels by PR output channels
 * (PV * PR = 24), so that each block's channel rows land in the NCHW output as whole
 * vectors (bias, residual and ReLU applied in registers, masked at the plane's end). A strip of
 * PV*16 pixels' patches is exactly what im2col_block writes with ld = PV*16 ([k][pixels]); the
 * weights are packed at load in panels of PR channels, [CKK][PR] each (pack_conv_pixels in
 * kernels/__init__.py, zero past the group's channels), read as broadcasts. The strip is consumed
 * PKC rows of CKK at a time (PKC * PV*16 floats stay in L1 while every channel panel passes over
 * them); partial sums wait in the output. Work items are (image, group, strip) times channel panels,
 * split evenly over the threads. userdata as ggmlpy_conv2d_f32's, with block = PV (1, 2 or 3). */
enum { PKC = 192 };

/* NV vectors of a strip (LD floats a row, from a) by NC channels of a panel (PR a row, from b): the
 * part of a block that pixel_tile computes at once, its sums from the bias (first) or the output,
 * with the residual and ReLU (last); m: the pixels from a's first that are in the plane (the lanes
 * past them are never loaded nor stored), nr: the panel's channels from b's first that are real */
static inline __attribute__((always_inline)) void pixel_part(const int NV, const int NC, const int LD, const int PR,
                                                             int kc, const float *restrict a, const float *restrict b,
                                                             float *out, int64_t P, int nr, int m, int first, int last,
                                                             const float *bias, const float *res, int relu) {
    vf c[24];
#pragma GCC unroll 24
    for (int j = 0; j < NC; j++)
#pragma GCC unroll 6
        for (int v = 0; v < NV; v++) {
            if (j >= nr)
                c[j * NV + v] = vzero();
            else if (first)
                c[j * NV + v] = bias ? vset1(bias[j]) : vzero();
            else if (m >= VW * (v + 1))  /* masked loads and stores are slow here: only at the plane's end */
                c[j * NV + v] = vloadu(out + j * P + VW * v);
            else
                c[j * NV + v] = vloadu_mask(vfirst(m - VW * v), out + j * P + VW * v);
        }
    for (int k = 0; k < kc; k++) {
        vf av[6];
#pragma GCC unroll 6
        for (int v = 0; v < NV; v++)
            av[v] = vload(a + (int64_t)k * LD + VW * v);  /* the strip buffer is 64-byte aligned */
#pragma GCC unroll 24
        for (int j = 0; j < NC; j++) {
            const vf bj = vset1(b[k * PR + j]);
#pragma GCC unroll 6
            for (int v = 0; v < NV; v++)
                c[j * NV + v] = vfmadd(av[v], bj, c[j * NV + v]);
        }
    }
    const vf zero = vzero();
#pragma GCC unroll 24
    for (int j = 0; j < NC; j++)
        if (j < nr)
#pragma GCC unroll 6
            for (int v = 0; v < NV; v++) {
                vf y = c[j * NV + v];
                const int full = m >= VW * (v + 1);
                if (last && res)
                    y = vadd(y, full ? vloadu(res + j * P + VW * v) : vloadu_mask(vfirst(m - VW * v), res + j * P + VW * v));
                if (last && relu)
                    y = vmax(zero, y);  /* max(0, NaN) is the NaN: the second operand wins */
                if (full)
                    vstoreu(out + j * P + VW * v, y);
                else if (m > VW * v)
                    vstoreu_mask(out + j * P + VW * v, vfirst(m - VW * v), y);
            }
}

/* A block of PV*16 pixels by PR channels: one part with AVX-512; with AVX2 parts of 12 accumulators
 * (PV 3: 3 vectors by 4 channels; 1 and 2: 2 vectors by 6), none for channels past nr */
static inline __attribute__((always_inline)) void pixel_tile(const int PV, const int PR, int kc,
                                                             const float *restrict a, const float *restrict b,
                                                             float *out, int64_t P, int nr, int m, int first, int last,
                                                             const float *bias, const float *res, int relu) {
    const int NV = VW == 16 ? PV : PV == 3 ? 3 : 2, NC = VW == 16 ? PR : 12 / NV;
#pragma GCC unroll 6
    for (int v = 0; v < PV * SV; v += NV)
#pragma GCC unroll 12
        for (int j = 0; j < PR; j += NC)
            if (j < nr && m > VW * v)  /* parts wholly past the panel's channels or the plane's end: none */
                pixel_part(NV, NC, PV * 16, PR, kc, a + VW * v, b + j, out + j * P + VW * v, P, nr - j, m - VW * v,
                           first, last, bias ? bias + j : NULL, res ? res + j * P + VW * v : NULL, relu);
}

static inline __attribute__((always_inline)) void conv_pixels(const int PV, const int PR, void *dst, int ith, int nth,
                                                              const int32_t *pr) {
    const conv_args op = conv_args_of(dst, pr);
    const geom g = op.g;
    const int N = op.N, G = op.G, Mg = op.Mg, flags = op.flags;
    const int CKK = (int)op.wne[1], npan = (int)op.wne[2] / G;  /* each group's channels: npan panels */
    const int64_t P = op.P, in_plane = op.in_plane, LD = PV * 16;
    const float *x = op.x, *wp = op.w, *bias = op.bias, *res = op.res;
    float *y = op.y;
    const int64_t strips = (P + LD - 1) / LD, items = (int64_t)N * G * strips;
    const int64_t units = items * npan, u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1)
        return;
    float *col = scratch((size_t)LD * CKK + SLACK);
    for (int64_t it = u0 / npan; it <= (u1 - 1) / npan; it++) {
        const int q0 = it == u0 / npan ? (int)(u0 % npan) : 0;
        const int q1 = it == (u1 - 1) / npan ? (int)((u1 - 1) % npan) + 1 : npan;
        const int64_t si = it % strips, ng = it / strips;
        const int gi = (int)(ng % G), n = (int)(ng / G);
        const int64_t p0 = si * LD, m = P - p0 < LD ? P - p0 : LD;
        float *out = y + ((int64_t)n * G + gi) * Mg * P + p0;
        const float *rg = res ? res + ((int64_t)n * G + gi) * Mg * P + p0 : NULL;
        if (col == NULL) {  /* out of memory (a few hundred KB): never a silently wrong value */
            for (int64_t o = (int64_t)q0 * PR; o < Mg && o < (int64_t)q1 * PR; o++)
                for (int64_t i = 0; i < m; i++)
                    out[o * P + i] = __builtin_nanf("");
            continue;
        }
        if (m < LD)  /* the lanes past the plane's end: computed, never stored (zeros, not stale bits) */
            for (int r = 0; r < CKK; r++)
                memset(col + (int64_t)r * LD + m, 0, (size_t)(LD - m) * sizeof(float));
        im2col_block(x + ((int64_t)n * G + gi) * g.C * in_plane, col, p0, m, LD, &g);
        for (int kb = 0; kb < CKK; kb += PKC) {
            const int kc = imin(PKC, CKK - kb), last = kb + kc >= CKK;
            for (int q = q0; q < q1; q++) {
                const int o0 = q * PR;
                pixel_tile(PV, PR, kc, col + (int64_t)kb * LD, wp + (((int64_t)gi * npan + q) * CKK + kb) * PR,
                           out + (int64_t)o0 * P, P, imin(PR, Mg - o0), (int)m, kb == 0, last,
                           bias ? bias + gi * Mg + o0 : NULL, rg ? rg + (int64_t)o0 * P : NULL, flags & F_RELU);
            }
        }
    }
}

/* The pixel-major convolution without patches, for layers of equal strides s along both axes. The
 * input, zero-padded, is copied per thread into s x s phase planes a channel (xp: plane (c, a, b)
 * holds padded rows a, a + s, ... and columns b, b + s, ..., Hs x Ws of them, Hs = ceil(Hp / s) and
 * Ws = ceil(Wp / s) for the padded height and width Hp, Wp the output needs). Output pixel (oh, ow)
 * at "virtual" index p' = oh Ws + ow then reads tap (c, kh, kw) at plane (c, kh DH mod s, kw DW mod s),
 * offset (kh DH / s) Ws + kw DW / s + p': for a block of 48 consecutive virtual pixels each patch row
 * is a contiguous run of xp at a fixed offset (koff), so the product reads xp directly. The Ws - OW
 * virtual pixels at the end of each row are computed and dropped: the valid lanes of each vector are
 * compressed into the NCHW output, whose pixels they are in order. Where OW is a multiple of 16 a block
 * is instead 3 of the rows' 16-pixel segments (vector_start), each at its own offset of xp, so that no
 * lane is dropped and every store is a whole vector (fewer lanes computed, and faster on ResNet-18's
 * 112 x 112 stem: docs/benchmarks.md). Blocks and weights as conv_pixels
 * (pack_conv_pixels, 8 channels a panel); the work units (image and group, block, panel) are split
 * evenly over the threads. A layer whose copy would pass
 * DIRECT_MAX_FLOATS takes patches. Returns 0 (and does nothing) where it does not apply: the same
 * answer on every thread. */
enum { DIRECT_MAX_FLOATS = 4 << 20, DIRECT_SLACK = 64 };

static float *padded_scratch(size_t n) {
    static __thread kept_buffer b;
    return grown(&b, n);
}

/* this thread's buffer of a block's partial sums (conv_channels_direct) or a band's rows (conv_pool_direct) */
static float *rows_scratch(size_t n) {
    static __thread kept_buffer b;
    return grown(&b, n);
}

/* n zeros at r: a masked store where they fit in one vector */
static inline void zero_run(float *r, int n) {
    if (n <= VW)
        vstoreu_mask(r, vfirst(n), vzero());
    else
        memset(r, 0, (size_t)n * sizeof(float));
}

/* rows [i0, i1) of the phase planes of x (one image and group) that some tap reads, `used` (a S + b)
 * the ones to make; the others are left as they are (only the dropped lanes read into them) */
static void phase_planes(const float *x, float *xp, const geom *g, int S, int Hs, int Ws, const char *used, int i0,
                         int i1) {
    float *o = xp;
    for (int c = 0; c < g->C; c++)
        for (int a = 0; a < S; a++)
            for (int b = 0; b < S; b++, o += (int64_t)Hs * Ws) {
                if (!used[a * S + b])
                    continue;
                /* columns j with 0 <= j S + b - PW < W, the same in every row: [lo, hi) */
                const int off = b - g->PW;
                const int lo = imin(first_in(off, S), Ws), hi = imax(lo, imin(first_past(off, S, g->W), Ws));
                for (int i = i0; i < i1; i++) {
                    float *r = o + (int64_t)i * Ws;  /* row i of plane (c, a, b) */
                    const int ih = i * S + a - g->PH;
                    if (ih < 0 || ih >= g->H) {
                        memset(r, 0, (size_t)Ws * sizeof(float));
                        continue;
                    }
                    const float *row = x + ((int64_t)c * g->H + ih) * g->W;
                    zero_run(r, lo);  /* the padding's few columns: no call a row */
                    int j = lo;
                    if (S == 1) {
                        memcpy(r + lo, row + lo + off, (size_t)(hi - lo) * sizeof(float));
                        j = hi;
                    } else if (S == 2) {  /* VW columns a step: the even lanes of two loads, as patch_row */
                        for (; j < hi; j += VW) {  /* the last step's lanes past hi are not stored */
                            const int i0 = 2 * j + off;
                            vstoreu_n(r + j, hi - j, even_lanes(load_in_row(row, i0, g->W), load_in_row(row, i0 + VW, g->W)));
                        }
                        j = hi;
                    }
                    for (; j < hi; j++)
                        r[j] = row[(int64_t)j * S + off];
                    zero_run(r + hi, Ws - hi);
                }
            }
    memset(o, 0, DIRECT_SLACK * sizeof(float));
}

/* the virtual pixel where vector v (0..2) of block si starts. segs == 0: a block is 48 consecutive
 * virtual pixels. segs > 0 (OW = 16 segs: a row is whole vectors): the plane's vectors are its rows'
 * OH * segs 16-pixel segments, nvec of them, 3 a block, so that no lane is a row's dropped end; a
 * vector past the last (in the last block) reads the last one's pixels and is never stored */
static inline int64_t vector_start(int64_t si, int v, int segs, int64_t nvec, int Ws) {
    if (segs == 0)
        return si * 48 + 16 * v;
    const int64_t t = imin64(si * 3 + v, nvec - 1);
    return t / segs * Ws + t % segs * 16;
}

/* the rows [*i0, *i1) of every phase plane that this thread's units of one image and group, [ua, ub)
 * of its strips x npan, read for their valid pixels: a thread of several takes part of the plane (its
 * blocks' rows of virtual pixels and (KH-1) DH / S rows more for the taps; a valid pixel's taps stay
 * in its row, as Ws covers the padded width); the other rows are left as they are (only lanes that
 * are dropped read them) */
static void rows_read(int64_t ua, int64_t ub, int npan, const geom *g, int S, int Hs, int Ws, int segs, int64_t nvec,
                      int *i0, int *i1) {
    const int64_t sa = ua / npan, sb = (ub - 1) / npan;
    *i0 = (int)(vector_start(sa, 0, segs, nvec, Ws) / Ws);
    *i1 = (int)imin64(Hs, (vector_start(sb, 2, segs, nvec, Ws) + 15) / Ws + (int64_t)(g->KH - 1) * g->DH / S + 1);
}

/* 3 vectors of a block (from a0, a1, a2 at each tap's koff) by NC channels of its panel (from b, 8 a
 * row): acc[j 3 SV + i] for channel j and the block's vector i, these being i0 .. i0 + 2 */
static inline __attribute__((always_inline)) void direct_part(const int NC, int CKK, const float *restrict a0,
                                                              const float *restrict a1, const float *restrict a2,
                                                              const int32_t *restrict koff, const float *restrict b,
                                                              vf *acc, int i0, const float *bias, int nr) {
    vf c[24];
#pragma GCC unroll 8
    for (int j = 0; j < NC; j++)
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++)  /* a group's last panel may have fewer than 8 channels: read only theirs */
            c[j * 3 + v] = bias && j < nr ? vset1(bias[j]) : vzero();
    for (int k = 0; k < CKK; k++) {
        const vf v0 = vloadu(a0 + koff[k]), v1 = vloadu(a1 + koff[k]), v2 = vloadu(a2 + koff[k]);
#pragma GCC unroll 8
        for (int j = 0; j < NC; j++) {
            const vf bj = vset1(b[k * 8 + j]);
            c[j * 3] = vfmadd(v0, bj, c[j * 3]);
            c[j * 3 + 1] = vfmadd(v1, bj, c[j * 3 + 1]);
            c[j * 3 + 2] = vfmadd(v2, bj, c[j * 3 + 2]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NC; j++)
#pragma GCC unroll 3
        for (int v = 0; v < 3; v++)
            acc[j * 3 * SV + i0 + v] = c[j * 3 + v];
}

/* a block's sums: 3 segments of 16 pixels (from a0, a1, a2) by a panel's 8 channels, from the bias, into
 * acc[j 3 SV + v SV + h] (channel j, segment v, its vector h); with AVX-512 one part, with AVX2 four
 * (3 vectors by 4 channels), none for channels past nr */
static inline __attribute__((always_inline)) void direct_tile(int CKK, const float *restrict a0,
                                                              const float *restrict a1, const float *restrict a2,
                                                              const int32_t *restrict koff, const float *restrict b,
                                                              vf *acc, const float *bias, int nr) {
    const float *at[3 * SV];
    for (int i = 0; i < 3 * SV; i++)
        at[i] = (i / SV == 0 ? a0 : i / SV == 1 ? a1 : a2) + VW * (i % SV);
    enum { NC = 24 / SV / 3 };
#pragma GCC unroll 2
    for (int i0 = 0; i0 < 3 * SV; i0 += 3)
#pragma GCC unroll 2
        for (int j = 0; j < 8; j += NC)
            if (j < nr)
                direct_part(NC, CKK, at[i0], at[i0 + 1], at[i0 + 2], koff, b + j, acc + j * 3 * SV, i0,
                            bias ? bias + j : NULL, nr - j);
}

/* each of block si's 3 vectors' valid lanes (virtual pixels inside a row, pv % Ws < OW, and before
 * the end Pv), as many low lanes set in count, and where the first valid one goes in the output
 * plane; one division a block, the row and column then counted along. Row segments (segs > 0): a
 * vector is whole or past the plane's nvec */
static void block_lanes(int64_t si, int64_t Pv, int Ws, int OW, int segs, int64_t nvec, seg_bits *valid,
                        seg_bits *count, int64_t *first) {
    if (segs > 0) {
        for (int v = 0; v < 3; v++) {
            const int64_t t = si * 3 + v;
            valid[v] = count[v] = t < nvec ? 0xFFFF : 0;
            first[v] = t < nvec ? 16 * t : -1;  /* rows of whole vectors: output pixel 16 t on */
        }
        return;
    }
    int64_t pv = si * 48, row = pv / Ws;
    int col = (int)(pv - row * Ws);
    for (int v = 0; v < 3; v++) {
        unsigned bits = 0;
        first[v] = -1;
        for (int l = 0; l < 16; l++, pv++) {
            if (pv < Pv && col < OW) {
                bits |= 1u << l;
                if (first[v] < 0)
                    first[v] = row * OW + col;
            }
            if (++col == Ws)
                col = 0, row++;
        }
        valid[v] = (seg_bits)bits;
        const int n = __builtin_popcount(bits);
        count[v] = (seg_bits)(n >= 16 ? 0xFFFF : (1u << n) - 1);
    }
}

/* Fetch (into L2) the cache lines of pixels [p0, p1) of nr channel rows of the NCHW output (P apart)
 * and of the residual (NULL: none) that a block is about to store or read: a layer's output is
 * larger than L2, so each line a store or the residual meets would otherwise come from L3 or memory
 * while the product waits. */
static void prefetch_rows(const float *out, const float *res, int64_t P, int nr, int64_t p0, int64_t p1) {
    if (p1 <= p0)
        return;
    for (int o = 0; o < nr; o++) {
        for (int64_t p = p0; p < p1; p += 16) {  /* one address in each line the range touches */
            __builtin_prefetch(out + o * P + p, 0, 2);  /* prefetcht1: into L2 */
            if (res != NULL)
                __builtin_prefetch(res + o * P + p, 0, 2);
        }
        __builtin_prefetch(out + o * P + p1 - 1, 0, 2);
        if (res != NULL)
            __builtin_prefetch(res + o * P + p1 - 1, 0, 2);
    }
}

/* koff[k]: where tap k = (c KH + kh) KW + kw reads in the phase planes (Hs x Ws = plane_p floats each)
 * from a pixel's virtual index; used[a S + b]: whether some tap reads phase (a, b) */
static void direct_offsets(const geom *g, int S, int64_t plane_p, int Ws, int32_t *koff, char *used) {
    for (int c = 0, k = 0; c < g->C; c++)
        for (int kh = 0; kh < g->KH; kh++)
            for (int kw = 0; kw < g->KW; kw++) {
                const int dh = kh * g->DH, dw = kw * g->DW;
                koff[k++] = (int32_t)((((int64_t)c * S + dh % S) * S + dw % S) * plane_p + (int64_t)(dh / S) * Ws +
                                      dw / S);
                used[(dh % S) * S + dw % S] = 1;
            }
}

/* a direct_tile's sums of nr channels (the block's lanes from block_lanes) into their planes, P apart
 * from out (channel o0's), each vector's valid lanes compressed to consecutive pixels from first[v],
 * plus the residual (NULL: none) at the same places, ReLU'd */
static inline __attribute__((always_inline)) void direct_store(const vf *acc, int nr, const seg_bits *valid,
                                                               const seg_bits *count, const int64_t *first,
                                                               float *out, const float *res, int64_t P, int relu) {
    for (int j = 0; j < nr; j++)
        for (int v = 0; v < 3; v++) {
            if (!valid[v])
                continue;
            const int64_t at = (int64_t)j * P + first[v];
            const vf *a = acc + j * 3 * SV + v * SV;
            if (valid[v] == 0xFFFF) {  /* plain loads and stores: masked ones are slower */
#pragma GCC unroll 2
                for (int h = 0; h < SV; h++) {
                    vf y = a[h];
                    if (res)
                        y = vadd(y, vloadu(res + at + VW * h));
                    if (relu)
                        y = vmax(vzero(), y);  /* NaN kept, as pixel_tile */
                    vstoreu(out + at + VW * h, y);
                }
                continue;
            }
#if VW == 16
            __m512 y = _mm512_maskz_compress_ps(valid[v], a[0]);
            if (res)
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(count[v], res + at));
            if (relu)
                y = _mm512_max_ps(_mm512_setzero_ps(), y);
            _mm512_mask_storeu_ps(out + at, count[v], y);
#else
            /* a row's end (AVX2 has no compress): the valid lanes one at a time, the same operations */
            (void)count;
            float t[16];
            for (int h = 0; h < SV; h++)
                vstoreu(t + VW * h, a[h]);
            for (int l = 0, i = 0; l < 16; l++)
                if (valid[v] >> l & 1) {
                    float y = t[l];
                    if (res)
                        y = y + res[at + i];
                    if (relu)
                        y = 0.0f > y ? 0.0f : y;  /* vmax(0, y): y where it is NaN */
                    out[at + i++] = y;
                }
#endif
        }
}

static int conv_pixels_direct(void *dst, int ith, int nth, const int32_t *pr) {
    const conv_args op = conv_args_of(dst, pr);
    const geom g = op.g;
    const int S = g.SH, Hp = (g.OH - 1) * S + g.DH * (g.KH - 1) + 1, Wp = (g.OW - 1) * S + g.DW * (g.KW - 1) + 1;
    const int Hs = (Hp + S - 1) / S, Ws = (Wp + S - 1) / S;
    const int64_t plane_p = (int64_t)Hs * Ws, need = (int64_t)g.C * S * S * plane_p + DIRECT_SLACK;
    const int CKK = (int)op.wne[1];
    if (g.SW != S || need > DIRECT_MAX_FLOATS || (int64_t)op.wne[0] != 8 || CKK != g.C * g.KH * g.KW)
        return 0;
    const int N = op.N, G = op.G, Mg = op.Mg, flags = op.flags, npan = (int)op.wne[2] / G;
    const int64_t P = op.P, in_plane = op.in_plane, Pv = (int64_t)(g.OH - 1) * Ws + g.OW;
    /* rows of whole vectors (ResNet's 112-pixel stem): blocks of row segments, every lane a pixel */
    const int segs = g.OW % 16 == 0 ? g.OW / 16 : 0;
    const int64_t nvec = (int64_t)g.OH * segs;
    const int64_t strips = segs ? (nvec + 2) / 3 : (Pv + 47) / 48, items = (int64_t)N * G * strips;
    const int64_t units = items * npan, u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1)
        return 1;
    float *xp = padded_scratch((size_t)need);
    int32_t *koff = malloc((size_t)CKK * sizeof(int32_t));
    char *used = calloc((size_t)S * S, 1);
    if (xp == NULL || koff == NULL || used == NULL) {  /* out of memory: never a silently wrong value */
        free(koff);
        free(used);
        for (int64_t u = u0; u < u1; u++) {
            const int64_t it = u / npan, si = it % strips, ng = it / strips;
            const int q = (int)(u % npan);
            float *out = op.y + ng * Mg * P;
            seg_bits valid[3], count[3];
            int64_t first[3];
            block_lanes(si, Pv, Ws, g.OW, segs, nvec, valid, count, first);
            for (int o = q * 8; o < Mg && o < q * 8 + 8; o++)
                for (int v = 0; v < 3; v++)  /* a vector's valid lanes: consecutive output pixels from first */
                    for (int i = 0; i < __builtin_popcount(valid[v]); i++)
                        out[o * P + first[v] + i] = __builtin_nanf("");
        }
        return 1;
    }
    direct_offsets(&g, S, plane_p, Ws, koff, used);
    int64_t padded = -1;  /* the (image, group) xp holds */
    int64_t lanes_of = -1;  /* the block whose lanes valid, count and first hold */
    seg_bits valid[3], count[3];
    int64_t first[3], start[3], next0 = 0, next1 = 0;
    for (int64_t u = u0; u < u1; u++) {
        /* unit u = (image and group, block, panel), panels innermost: a block's padded input stays
         * in L1 or L2 while every panel passes over it (faster than panels outermost even where the
         * weights are the larger, a block's taps being 6 times the bytes of a panel's: docs/benchmarks.md) */
        const int64_t si = u / npan % strips, ng = u / npan / strips;
        const int q = (int)(u % npan), gi = (int)(ng % G);
        if (ng != padded) {
            const int64_t per = strips * npan;
            int i0, i1;
            rows_read(imax64(u0, ng * per) - ng * per, imin64(u1, (ng + 1) * per) - ng * per, npan, &g, S, Hs, Ws,
                      segs, nvec, &i0, &i1);
            phase_planes(op.x + ng * g.C * in_plane, xp, &g, S, Hs, Ws, used, i0, i1);
            padded = ng;
        }
        if (si != lanes_of) {  /* the block's lanes, worked out once for all its panels */
            block_lanes(si, Pv, Ws, g.OW, segs, nvec, valid, count, first);
            for (int v = 0; v < 3; v++)
                start[v] = vector_start(si, v, segs, nvec, Ws);
            /* the output pixels of the image's next block: consecutive ones, from its first valid
             * vector's first to its last valid vector's end */
            next0 = next1 = 0;
            if (si + 1 < strips) {
                seg_bits nvalid[3], ncount[3];
                int64_t nfirst[3];
                block_lanes(si + 1, Pv, Ws, g.OW, segs, nvec, nvalid, ncount, nfirst);
                for (int v = 2; v >= 0; v--)
                    if (nvalid[v]) {
                        next0 = nfirst[v];
                        next1 = next1 > 0 ? next1 : nfirst[v] + __builtin_popcount(nvalid[v]);
                    }
            }
            lanes_of = si;
        }
        float *out = op.y + ng * Mg * P;
        const float *rg = op.res ? op.res + ng * Mg * P : NULL;
        const int o0 = q * 8, nr = imin(8, Mg - o0);
        prefetch_rows(out + (int64_t)o0 * P, rg ? rg + (int64_t)o0 * P : NULL, P, nr, next0, next1);
        vf acc[24 * SV];
        direct_tile(CKK, xp + start[0], xp + start[1], xp + start[2], koff, op.w + ((int64_t)gi * npan + q) * CKK * 8, acc,
                    op.bias ? op.bias + gi * Mg + o0 : NULL, nr);
        direct_store(acc, nr, valid, count, first, out + (int64_t)o0 * P, rg ? rg + (int64_t)o0 * P : NULL, P,
                     flags & F_RELU);
    }
    free(koff);
    free(used);
    return 1;
}

/* The pixel kernel without patches with a max pooling of its output in the same node (block 5 of
 * ggmlpy_conv2d_pixels_f32; bias and ReLU, no residual): dst is the pooled output [OWp, OHp, M, N], and
 * the convolution's OH x OW planes never go to memory. They are computed a band at a time, the rows that
 * R pooled rows read, into a per-thread buffer of the group's channels ([channel][row][OW], about
 * BAND_BYTES: it stays in L2), and pooled from there by pool_row, the unfused pooling's own code (the
 * same cells in the same order: the same bits, NaN and signed zeros included). A band's rows that the
 * previous band of the thread computed (windows taller than their stride) are kept, not computed again.
 * The tiles are conv_pixels_direct's (direct_tile and direct_store): a band is a plane of fewer rows
 * whose phase-plane rows start r0 Ws floats further on, so every value is the unfused kernel's to the
 * bit (each pixel's sum over the taps in the same order from the bias). Rows between two windows (a
 * pooling stride past its kernel) are computed too. Work items (image and group, band), bands
 * innermost, split evenly over the threads. userdata: the convolution's P_COUNT values (block 5), its
 * OH and OW, the pooling's KH, KW, SH, SW, PH, PW (ggmlpy_maxpool2d_f32's), then R, the pooled rows a
 * band (0: chosen here, band_rows). Returns 0 (and does nothing) where it does not apply, as
 * conv_pixels_direct. */
enum { Q_OH = P_COUNT, Q_OW, Q_KH, Q_KW, Q_SH, Q_SW, Q_PH, Q_PW, Q_BAND };
/* the band buffer: the stem of ResNet-18 (64 channels of 112 columns) takes 7 rows, 3 pooled rows */
#define BAND_BYTES (256 * 1024)

/* the convolution's rows [*lo, *hi) that pooled row r reads (none: *hi == *lo) */
static void pooled_rows(int r, int KH, int SH, int PH, int OH, int *lo, int *hi) {
    *lo = clampi(r * SH - PH, 0, OH);
    *hi = clampi(r * SH - PH + KH, *lo, OH);
}

/* pooled rows a band: as many as fit in BAND_BYTES (at least 1); on rows of whole vectors, the most
 * of those down to half as many whose R SH new rows a band are a multiple of 3 vectors (no block of
 * direct_tile half empty at a band's end) */
static int band_rows(int64_t row_bytes, int KH, int SH, int segs, int OHp) {
    const int64_t over = KH > SH ? KH - SH : 0;
    int R = (int)imin64(imax64(1, (BAND_BYTES / row_bytes - over) / SH), OHp);
    for (int r = R; segs > 0 && 2 * r >= R; r--)
        if ((int64_t)r * SH * segs % 3 == 0)
            return r;
    return R;
}

static int conv_pool_direct(void *dst, int ith, int nth, const int32_t *pr) {
    conv_args op = conv_args_of(dst, pr);
    op.g.OH = pr[Q_OH];  /* dst is the pooled output: the convolution's planes are the userdata's */
    op.g.OW = pr[Q_OW];
    const geom g = op.g;
    const int S = g.SH, Hp = (g.OH - 1) * S + g.DH * (g.KH - 1) + 1, Wp = (g.OW - 1) * S + g.DW * (g.KW - 1) + 1;
    const int Hs = (Hp + S - 1) / S, Ws = (Wp + S - 1) / S;
    const int64_t plane_p = (int64_t)Hs * Ws, need = (int64_t)g.C * S * S * plane_p + DIRECT_SLACK;
    const int CKK = (int)op.wne[1];
    if (g.SW != S || need > DIRECT_MAX_FLOATS || (int64_t)op.wne[0] != 8 || CKK != g.C * g.KH * g.KW ||
        (op.flags & F_RESIDUAL))
        return 0;
    int64_t dne[4];
    ne_of(dst, dne);
    const int N = op.N, G = op.G, Mg = op.Mg, npan = (int)op.wne[2] / G, OHp = (int)dne[1];
    const int PKH = pr[Q_KH], PSH = pr[Q_SH], PPH = pr[Q_PH];
    const pool_cols pc = {g.OW, (int)dne[0], pr[Q_KW], pr[Q_SW], pr[Q_PW]};
    const int segs = g.OW % 16 == 0 ? g.OW / 16 : 0;
    const int R = pr[Q_BAND] > 0 ? imin(pr[Q_BAND], OHp)
                                 : band_rows((int64_t)Mg * g.OW * (int64_t)sizeof(float), PKH, PSH, segs, OHp);
    const int nband = (OHp + R - 1) / R, rows_max = imin((R - 1) * PSH + PKH, g.OH);
    const int64_t BP = (int64_t)rows_max * g.OW;  /* a channel's rows in the band buffer */
    const int64_t units = (int64_t)N * G * nband, u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1)
        return 1;
    float *xp = padded_scratch((size_t)need), *band = rows_scratch((size_t)(Mg * BP)), *tmp = pool_tmp(&pc, scratch);
    int32_t *koff = malloc((size_t)CKK * sizeof(int32_t));
    char *used = calloc((size_t)S * S, 1);
    if (xp == NULL || band == NULL || tmp == NULL || koff == NULL || used == NULL) {
        free(koff);  /* out of memory: never a silently wrong value */
        free(used);
        for (int64_t u = u0; u < u1; u++) {
            const int a = (int)(u % nband) * R, b = imin(a + R, OHp);
            for (int o = 0; o < Mg; o++)
                for (int64_t i = (int64_t)a * pc.OW; i < (int64_t)b * pc.OW; i++)
                    op.y[((u / nband) * Mg + o) * OHp * pc.OW + i] = __builtin_nanf("");
        }
        return 1;
    }
    direct_offsets(&g, S, plane_p, Ws, koff, used);
    int64_t padded = -1;  /* the (image, group) xp holds */
    int plo = 0, phi = 0;  /* the convolution's rows the band buffer holds (from its row 0) */
    for (int64_t u = u0; u < u1; u++) {
        const int64_t ng = u / nband;
        const int bi = (int)(u % nband), gi = (int)(ng % G), a = bi * R, b = imin(a + R, OHp);
        int lo, hi, l1, h1;
        pooled_rows(a, PKH, PSH, PPH, g.OH, &lo, &hi);
        pooled_rows(b - 1, PKH, PSH, PPH, g.OH, &l1, &h1);
        hi = imax(hi, h1);
        if (ng != padded) {  /* the phase-plane rows this thread's bands of the image read */
            const int last = (int)(imin64(u1, (ng + 1) * nband) - 1 - ng * nband);
            pooled_rows(imin(last * R + R, OHp) - 1, PKH, PSH, PPH, g.OH, &l1, &h1);
            const int i1 = h1 > lo ? imin(Hs, h1 + (g.KH - 1) * g.DH / S) : lo;
            phase_planes(op.x + ng * g.C * op.in_plane, xp, &g, S, Hs, Ws, used, lo, i1);
            padded = ng;
        }
        /* rows [lo, lo + keep) are the previous band's (this thread's item u - 1, the same image): moved up */
        const int keep = u > u0 && bi > 0 ? imax(0, imin(phi, hi) - lo) : 0;
        if (keep > 0 && lo > plo)
            for (int o = 0; o < Mg; o++)
                memmove(band + o * BP, band + o * BP + (int64_t)(lo - plo) * g.OW, (size_t)keep * g.OW * sizeof(float));
        const int r0 = lo + keep, rows = hi - r0;  /* the new rows [r0, hi): a plane of `rows` rows */
        if (rows > 0) {
            const int64_t Pv = (int64_t)(rows - 1) * Ws + g.OW, nvec = (int64_t)rows * segs;
            const int64_t blocks = segs ? (nvec + 2) / 3 : (Pv + 47) / 48;
            const float *xb = xp + (int64_t)r0 * Ws;
            float *ob = band + (int64_t)(r0 - lo) * g.OW;
            for (int64_t si = 0; si < blocks; si++) {
                seg_bits valid[3], count[3];
                int64_t first[3];
                block_lanes(si, Pv, Ws, g.OW, segs, nvec, valid, count, first);
                const float *x0 = xb + vector_start(si, 0, segs, nvec, Ws);
                const float *x1 = xb + vector_start(si, 1, segs, nvec, Ws);
                const float *x2 = xb + vector_start(si, 2, segs, nvec, Ws);
                for (int q = 0; q < npan; q++) {  /* panels innermost: the block's input stays in L1 */
                    const int o0 = q * 8, nr = imin(8, Mg - o0);
                    vf acc[24 * SV];
                    direct_tile(CKK, x0, x1, x2, koff, op.w + ((int64_t)gi * npan + q) * CKK * 8, acc,
                                op.bias ? op.bias + gi * Mg + o0 : NULL, nr);
                    direct_store(acc, nr, valid, count, first, ob + o0 * BP, NULL, BP, op.flags & F_RELU);
                }
            }
        }
        for (int o = 0; o < Mg; o++) {
            float *yo = op.y + (ng * Mg + o) * OHp * pc.OW;
            for (int r = a; r < b; r++) {
                int rl, rh;
                pooled_rows(r, PKH, PSH, PPH, g.OH, &rl, &rh);
                pool_row(yo + (int64_t)r * pc.OW, tmp, band + o * BP + (int64_t)(rl - lo) * g.OW, rh - rl, &pc);
            }
        }
        plo = lo;
        phi = hi;
    }
    free(koff);
    free(used);
    return 1;
}

/* The convolution with output channels in the vector lanes and without patches (block 4 of
 * ggmlpy_conv2d_pixels_f32). No lane is padding where a group's channels are a multiple of RC, whatever
 * the plane's width (the pixel kernels compute a row's Ws - OW virtual pixels and a plane's last partial
 * block: 18 % of the lanes on a 14 x 14 plane). A tile is NP <= RP consecutive pixels of one output row
 * by RC channels (AVX-512: 4 vectors, 28 accumulators; AVX2: 8 vectors, taken 2 at a time, 14
 * accumulators): each tap loads the panel's weight vectors and broadcasts the tile's input values, read from the zero-padded phase planes of conv_pixels_direct (tap
 * k at koff[k] from the tile's virtual pixel oh Ws + ow, the pixels consecutive in a phase plane's row
 * whatever the stride). The weights are packed at load in panels of RC channels, [CKK][RC] each
 * (pack_conv_pixels with 4 vectors, zero past the group's channels). Each tile of a block of up to RTB
 * tiles of one image reads a panel's weights whole, a sequential stream from L2 or L3, up to
 * LANE_WHOLE_BYTES of them; a larger panel is taken RKC taps at a time by every tile of the block in
 * turn. The tiles' sums wait in a per-thread buffer, [tile][pixel][channel], and the last chunk writes
 * them, transposed, into the NCHW output with the residual and ReLU (rows_store_block where the rows are
 * whole tiles, rows_store a tile at a time otherwise). Work units (image and group, block, panel),
 * panels innermost, are split evenly over the threads, each thread copying the rows of the phase planes
 * its units read. Returns 0 (and does nothing) where it does not apply: the same
 * answer on every thread. */
enum { RP = 7, RC = 64, RTB = 16, RKC = 128 };
/* whole panels streamed by each tile, not chunks of 128 taps (32 KB, kept in L1 for a block's tiles):
 * faster on ResNet-18's 3x3 layers, panels of 147 KB to 1.2 MB (docs/benchmarks.md); whether chunks pay
 * beyond 4 MB is unknown, hence the bound */
#ifndef LANE_WHOLE_BYTES
#define LANE_WHOLE_BYTES (4096 * 1024)
#endif

/* the channel vectors a part of a tile takes: all of RC with AVX-512, 2 of its 8 with AVX2 (16 registers) */
enum { RCV = VW == 16 ? 4 : 2 };

/* NP pixels by RCV vectors of channels (w, acc and init at the part's first channel, RC apart) */
static inline __attribute__((always_inline)) void rows_part(const int NP, int kc, const float *restrict a, int step,
                                                            const int32_t *restrict koff, const float *restrict w,
                                                            float *restrict acc, const float *restrict init) {
    vf c[RP * RCV];
#pragma GCC unroll 7
    for (int j = 0; j < NP; j++)
#pragma GCC unroll 4
        for (int v = 0; v < RCV; v++)  /* the first chunk starts from the bias (init), the others from acc */
            c[j * RCV + v] = vload(init != NULL ? init + VW * v : acc + j * RC + VW * v);
    for (int k = 0; k < kc; k++) {
        const float *ak = a + koff[k];
        /* unaligned loads: ggml aligns tensors to 32 bytes only (measured as fast as aligned here) */
        vf wv[RCV];
#pragma GCC unroll 4
        for (int v = 0; v < RCV; v++)
            wv[v] = vloadu(w + k * RC + VW * v);
#pragma GCC unroll 7
        for (int j = 0; j < NP; j++) {
            const vf bj = vset1(ak[j * step]);
#pragma GCC unroll 4
            for (int v = 0; v < RCV; v++)
                c[j * RCV + v] = vfmadd(wv[v], bj, c[j * RCV + v]);
        }
    }
#pragma GCC unroll 7
    for (int j = 0; j < NP; j++)
#pragma GCC unroll 4
        for (int v = 0; v < RCV; v++)
            vstore(acc + j * RC + VW * v, c[j * RCV + v]);
}

/* a tile's sums: NP pixels by the panel's RC channels, a part of RCV channel vectors at a time */
static inline __attribute__((always_inline)) void rows_tile(const int NP, int kc, const float *restrict a, int step,
                                                            const int32_t *restrict koff, const float *restrict w,
                                                            float *restrict acc, const float *restrict init) {
#pragma GCC unroll 4
    for (int c0 = 0; c0 < RC; c0 += VW * RCV)
        rows_part(NP, kc, a, step, koff, w + c0, acc + c0, init != NULL ? init + c0 : NULL);
}

/* not inlined into its caller: there the step's multiples are spilled, five stack loads a tap */
static __attribute__((noinline)) void rows_tile_n(int np, int kc, const float *a, int step, const int32_t *koff, const float *w, float *acc,
                        const float *init) {
    switch (np) {
#define NPIX(n) case n: rows_tile(n, kc, a, step, koff, w, acc, init); break;
    NPIX(1) NPIX(2) NPIX(3) NPIX(4) NPIX(5) NPIX(6)
#undef NPIX
    default: rows_tile(RP, kc, a, step, koff, w, acc, init); break;
    }
}

/* out[o P + j] = acc[j RC + o] (+ res[o P + j]), ReLU'd, for o < nr, j < np: 16 channels at a time, their
 * 8 x 16 block (the tile's pixels and zero rows) transposed in registers into 16 rows of 8 pixels,
 * each stored with a mask, which writes nothing past the tile (another unit's pixels, or past the
 * plane; plain stores where the block's next tile rewrites those pixels measured no faster) */
#if VW == 16
static void rows_store(const float *acc, int np, int nr, float *out, const float *res, int64_t P, int relu) {
    const __mmask8 m = (__mmask8)((1u << np) - 1);
    const __m256 zero = _mm256_setzero_ps();
    for (int v = 0; v * 16 < nr; v++) {
        __m512 r[8], t[8], u[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            r[j] = j < np ? _mm512_load_ps(acc + j * RC + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {  /* t[2i] lane L: r[2i][4L], r[2i+1][4L], r[2i][4L+1], r[2i+1][4L+1] */
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {  /* u[4h + e] lane L: rows 4h .. 4h+3 of channel 4L + e */
            u[4 * h] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
            u[4 * h + 1] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
            u[4 * h + 2] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
            u[4 * h + 3] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
        }
#pragma GCC unroll 4
        for (int e = 0; e < 4; e++) {
            /* [channel e | channel 4 + e] and [channel 8 + e | channel 12 + e], 8 pixels each */
            const __m512 lo = _mm512_shuffle_f32x4(_mm512_shuffle_f32x4(u[e], u[4 + e], 0x44),
                                                   _mm512_shuffle_f32x4(u[e], u[4 + e], 0x44), 0xD8);
            const __m512 hi = _mm512_shuffle_f32x4(_mm512_shuffle_f32x4(u[e], u[4 + e], 0xEE),
                                                   _mm512_shuffle_f32x4(u[e], u[4 + e], 0xEE), 0xD8);
            const __m256 rows[4] = {_mm512_castps512_ps256(lo), _mm512_extractf32x8_ps(lo, 1),
                                    _mm512_castps512_ps256(hi), _mm512_extractf32x8_ps(hi, 1)};
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const int o = 16 * v + 4 * i + e;
                if (o >= nr)
                    continue;
                __m256 y = rows[i];
                if (res != NULL)
                    y = _mm256_add_ps(y, _mm256_maskz_loadu_ps(m, res + o * P));
                if (relu)
                    y = _mm256_max_ps(zero, y);  /* NaN kept, as pixel_tile */
                _mm256_mask_storeu_ps(out + o * P, m, y);
            }
        }
    }
}

#endif

/* out[o P + i] = acc[i RC + o] (+ res[o P + i]), ReLU'd, for o < nr, i < np: rows_store over a block of
 * np consecutive pixels whose sums are consecutive in acc (rows of whole tiles), VW pixels by VW
 * channels transposed in registers at a time, so that each channel's VW pixels are one store (masked
 * only at the block's end) rather than rows_store's two or three masked ones of 8 (AVX-512: faster on
 * ResNet-18's 56 x 56 layers: docs/benchmarks.md); the same operations on each value, so the same bits */
static void rows_store_block(const float *acc, int np, int nr, float *out, const float *res, int64_t P, int relu) {
    const vf zero = vzero();
    for (int i0 = 0; i0 < np; i0 += VW) {
        const int n = imin(VW, np - i0);
        const vmask m = vfirst(n);
        for (int v = 0; v * VW < nr; v++) {
            vf r[VW], o[VW];
#pragma GCC unroll 16
            for (int j = 0; j < VW; j++)
                r[j] = j < n ? vload(acc + (int64_t)(i0 + j) * RC + VW * v) : zero;
            vtranspose(r, o);
            for (int e = 0; e < VW && VW * v + e < nr; e++) {
                float *y = out + (int64_t)(VW * v + e) * P + i0;
                vf z = o[e];
                if (res != NULL) {
                    const float *rr = res + (int64_t)(VW * v + e) * P + i0;
                    z = vadd(z, n == VW ? vloadu(rr) : vloadu_mask(m, rr));
                }
                if (relu)
                    z = vmax(zero, z);  /* NaN kept, as pixel_tile */
                if (n == VW)
                    vstoreu(y, z);
                else
                    vstoreu_mask(y, m, z);
            }
        }
    }
}

#if VW == 8
/* a tile's RP pixels fit one AVX2 vector: rows_store_block's transposes of 8 pixels by 8 channels are
 * a tile's own */
static void rows_store(const float *acc, int np, int nr, float *out, const float *res, int64_t P, int relu) {
    rows_store_block(acc, np, nr, out, res, P, relu);
}
#endif

static int conv_channels_direct(void *dst, int ith, int nth, const int32_t *pr) {
    const conv_args op = conv_args_of(dst, pr);
    const geom g = op.g;
    const int S = g.SH, Hp = (g.OH - 1) * S + g.DH * (g.KH - 1) + 1, Wp = (g.OW - 1) * S + g.DW * (g.KW - 1) + 1;
    /* the zero-padded input, Hp x Wp a channel (phase_planes with one phase): broadcasts need no
     * consecutive pixels, so a stride S reads every S-th value of a row (no phase planes to make),
     * and the copy is no larger than conv_pixels_direct's phase planes (the budget direct_planes checks) */
    const int64_t plane_p = (int64_t)Hp * Wp, need = (int64_t)g.C * plane_p + DIRECT_SLACK;
    const int CKK = (int)op.wne[1];
    if (g.SW != S || need > DIRECT_MAX_FLOATS || (int64_t)op.wne[0] != RC || CKK != g.C * g.KH * g.KW)
        return 0;
    const int N = op.N, G = op.G, Mg = op.Mg, flags = op.flags, npan = (int)op.wne[2] / G;
    const int64_t P = op.P, in_plane = op.in_plane;
    /* without padding (ResNet's 1x1 downsampling) the taps read the input itself, its rows W apart:
     * the copy would cost as much as the product where a value has few taps */
    const int in_place = g.PH == 0 && g.PW == 0 && Hp <= g.H && Wp <= g.W, ld = in_place ? g.W : Wp;
    const int64_t plane_r = in_place ? in_plane : plane_p;  /* a channel of what the taps read */
    const int per_row = (g.OW + RP - 1) / RP;  /* tiles a row */
    const int64_t tiles = (int64_t)g.OH * per_row;
    const int64_t nblk = (tiles + RTB - 1) / RTB, tb = (tiles + nblk - 1) / nblk;  /* blocks of even size */
    const int64_t units = (int64_t)N * G * nblk * npan, u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1)
        return 1;
    float *xp = in_place ? NULL : padded_scratch((size_t)need);
    float *acc = rows_scratch((size_t)tb * RP * RC + RC);
    int32_t *koff = malloc((size_t)CKK * sizeof(int32_t));
    const char one_phase[1] = {1};
    if ((xp == NULL && !in_place) || acc == NULL || koff == NULL) {  /* out of memory: never a silently wrong value */
        free(koff);
        for (int64_t u = u0; u < u1; u++) {
            const int64_t ng = u / npan / nblk, b = u / npan % nblk;
            const int q = (int)(u % npan);
            float *out = op.y + ng * Mg * P;
            for (int64_t t = b * tb; t < tiles && t < (b + 1) * tb; t++)
                for (int o = q * RC; o < Mg && o < (q + 1) * RC; o++)
                    for (int ow = (int)(t % per_row) * RP; ow < g.OW && ow < (int)(t % per_row) * RP + RP; ow++)
                        out[o * P + t / per_row * g.OW + ow] = __builtin_nanf("");
        }
        return 1;
    }
    for (int c = 0, k = 0; c < g.C; c++)
        for (int kh = 0; kh < g.KH; kh++)
            for (int kw = 0; kw < g.KW; kw++)
                koff[k++] = (int32_t)(c * plane_r + (int64_t)kh * g.DH * ld + kw * g.DW);
    float *init = acc + tb * RP * RC;  /* a panel's bias, RC floats (zero past the group's channels) */
    const int chunk = (int64_t)CKK * RC * (int64_t)sizeof(float) <= LANE_WHOLE_BYTES ? CKK : RKC;
    int64_t padded = -1;  /* the (image, group) xp holds */
    const float *src = xp;  /* what the taps read: xp, or the image's input in place */
    for (int64_t u = u0; u < u1; u++) {
        const int64_t ng = u / npan / nblk, b = u / npan % nblk;
        const int q = (int)(u % npan), gi = (int)(ng % G), o0 = q * RC, nr = imin(RC, Mg - o0);
        const int64_t t0 = b * tb, t1 = imin64(t0 + tb, tiles);
        if (in_place)
            src = op.x + ng * g.C * in_plane;
        else if (ng != padded) {  /* the padded rows this thread's units of the image read */
            const int64_t per = nblk * npan;
            const int64_t ua = imax64(u0, ng * per) - ng * per, ub = imin64(u1, (ng + 1) * per) - ng * per;
            const int i0 = (int)(ua / npan * tb / per_row) * S;
            const int i1 = (int)imin64(Hp, (imin64(((ub - 1) / npan + 1) * tb, tiles) - 1) / per_row * S +
                                               (int64_t)(g.KH - 1) * g.DH + 1);
            phase_planes(op.x + ng * g.C * in_plane, xp, &g, 1, Hp, Wp, one_phase, i0, i1);
            padded = ng;
        }
        for (int o = 0; o < RC; o++)
            init[o] = op.bias != NULL && o < nr ? op.bias[gi * Mg + o0 + o] : 0.0f;
        /* the block's pixels, consecutive in the plane: stored (and the residual read) at its end */
        prefetch_rows(op.y + ng * Mg * P + (int64_t)o0 * P, op.res != NULL ? op.res + ng * Mg * P + (int64_t)o0 * P : NULL,
                      P, nr, t0 / per_row * g.OW + t0 % per_row * RP,
                      (t1 - 1) / per_row * g.OW + imin((int)((t1 - 1) % per_row) * RP + RP, g.OW));
        const float *wq = op.w + ((int64_t)gi * npan + q) * CKK * RC;
        for (int kb = 0; kb < CKK; kb += chunk) {
            const int kc = imin(chunk, CKK - kb);
            for (int64_t t = t0; t < t1; t++) {
                const int oh = (int)(t / per_row), ow = (int)(t % per_row) * RP;
                rows_tile_n(imin(RP, g.OW - ow), kc, src + ((int64_t)oh * ld + ow) * S, S, koff + kb,
                            wq + (int64_t)kb * RC, acc + (t - t0) * RP * RC, kb == 0 ? init : NULL);
            }
        }
        float *out = op.y + ng * Mg * P + (int64_t)o0 * P;
        const float *rg = op.res != NULL ? op.res + ng * Mg * P + (int64_t)o0 * P : NULL;
        if (g.OW % RP == 0) {  /* whole tiles a row: the block's pixels are consecutive, as are its sums */
            const int64_t p = t0 * RP;
            rows_store_block(acc, (int)((t1 - t0) * RP), nr, out + p, rg != NULL ? rg + p : NULL, P, flags & F_RELU);
        } else
            for (int64_t t = t0; t < t1; t++) {
                const int oh = (int)(t / per_row), ow = (int)(t % per_row) * RP;
                const int64_t p = (int64_t)oh * g.OW + ow;
                rows_store(acc + (t - t0) * RP * RC, imin(RP, g.OW - ow), nr, out + p, rg != NULL ? rg + p : NULL, P,
                           flags & F_RELU);
            }
    }
    free(koff);
    return 1;
}

/* the floats of this build's vectors: 16 (AVX-512), 8 (AVX2), 0 (none: no packed or pixel-major kernels) */
int ggmlpy_conv_vector_floats(void) { return VW; }

/* channels a panel of the pixel kernels with pv vectors (1, 2, 3: blocks of 16 pv pixels), or of the
 * lanes kernel (4) */
int ggmlpy_conv_pixels_rows(int pv) { return pv >= 1 && pv <= 3 ? 24 / pv : pv == 4 ? RC : 0; }

void ggmlpy_conv2d_pixels_f32(void *dst, int ith, int nth, void *userdata) {
    const int32_t *pr = (const int32_t *)userdata;
    if (pr[P_BLOCK] == 3 && conv_pixels_direct(dst, ith, nth, pr))
        return;
    if (pr[P_BLOCK] == 4 || pr[P_BLOCK] == 5) {
        /* the lanes' panels of RC channels are no other kernel's, and the pooled output no convolution's:
         * where they do not apply (the caller checks direct_planes' budget and equal strides first) the
         * output is NaN, never a wrong value */
        if (!(pr[P_BLOCK] == 4 ? conv_channels_direct(dst, ith, nth, pr) : conv_pool_direct(dst, ith, nth, pr))) {
            int64_t ne[4];
            ne_of(dst, ne);
            const int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
            float *y = data_of(dst);
            for (int64_t i = n * ith / nth; i < n * (ith + 1) / nth; i++)
                y[i] = __builtin_nanf("");
        }
        return;
    }
    switch (pr[P_BLOCK]) {
    case 1: conv_pixels(1, 24, dst, ith, nth, pr); break;
    case 2: conv_pixels(2, 12, dst, ith, nth, pr); break;
    default: conv_pixels(3, 8, dst, ith, nth, pr); break;
    }
}
#else
int ggmlpy_conv_pixels_rows(int pv) { (void)pv; return 0; }  /* no AVX2 or AVX-512: no pixel-major convolution */

int ggmlpy_conv_vector_floats(void) { return 0; }

void ggmlpy_conv2d_pixels_f32(void *dst, int ith, int nth, void *userdata) {
    (void)dst; (void)ith; (void)nth; (void)userdata;
}
#endif
