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
 * Threads: the work items are (image, group, pixel block); ggml's threads take contiguous ranges of
 * them. With fewer items than threads (a deep layer of one image), every thread builds the item's
 * patch block and computes its own range of output channels. Each thread's cblas_sgemm runs on
 * that thread alone (blas_threads.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blas_threads.h"
#include "fields.h"

enum { ColMajor = 102, NoTrans = 111 };
extern void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                        int lda, const float *b, int ldb, float beta, float *c, int ldc);

enum { P_KH, P_KW, P_SH, P_SW, P_PH, P_PW, P_DH, P_DW, P_GROUPS, P_FLAGS, P_BLOCK, P_COUNT };
enum { F_RELU = 1, F_BIAS = 2, F_RESIDUAL = 4 };

#define BLOCK_BYTES (1024 * 1024)  /* the patch block: about L2; larger products run faster, to a point */
#define MIN_BLOCK 128             /* fewer pixels make the product inefficient */

int ggmlpy_conv_params_count(void) { return P_COUNT; }

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }
static int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* first q >= 0 with q * s + off >= 0, and first q with q * s + off >= W (so [lo, hi) is in range) */
static int first_in(int off, int s) { return off >= 0 ? 0 : (-off + s - 1) / s; }
static int first_past(int off, int s, int W) { return W - off <= 0 ? 0 : (W - off + s - 1) / s; }

typedef struct {
    int C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
} geom;

/* col[r * ld + (p - p0)] for the pixels p0 <= p < p0 + m and rows r = (c KH + kh) KW + kw of one image
 * (and group) whose channels start at x (ld >= m) */
static void im2col_block(const float *x, float *col, int64_t p0, int64_t m, int64_t ld, const geom *g) {
    const int64_t plane = (int64_t)g->H * g->W;
    float *out = col;
    for (int c = 0; c < g->C; c++)
        for (int kh = 0; kh < g->KH; kh++)
            for (int kw = 0; kw < g->KW; kw++, out += ld) {
                const int off_w = kw * g->DW - g->PW;  /* iw = ow SW + off_w */
                const int ow_lo = imin(first_in(off_w, g->SW), g->OW);
                const int ow_hi = imin(first_past(off_w, g->SW, g->W), g->OW);
                int oh = (int)(p0 / g->OW), ow = (int)(p0 % g->OW);
                for (int64_t done = 0; done < m; oh++, ow = 0) {
                    const int end = (int)(ow + (m - done) < g->OW ? ow + (m - done) : g->OW);
                    float *o = out + done - ow;  /* o[ow'] is output column ow' of this row */
                    const int ih = oh * g->SH - g->PH + kh * g->DH;
                    if (ih < 0 || ih >= g->H) {
                        memset(o + ow, 0, (size_t)(end - ow) * sizeof(float));
                    } else {
                        const int a = clampi(ow_lo, ow, end), b = clampi(ow_hi, a, end);
                        const float *row = x + c * plane + (int64_t)ih * g->W + off_w;
                        if (a > ow)
                            memset(o + ow, 0, (size_t)(a - ow) * sizeof(float));
                        if (g->SW == 1) {
                            memcpy(o + a, row + a, (size_t)(b - a) * sizeof(float));
                        } else {
                            const int s = g->SW;
                            for (int q = a; q < b; q++)
                                o[q] = row[(int64_t)q * s];
                        }
                        if (end > b)
                            memset(o + b, 0, (size_t)(end - b) * sizeof(float));
                    }
                    done += end - ow;
                }
            }
}

/* A buffer of at least n floats (64-byte aligned), grown as needed and kept: each thread has its
 * own (ggml's threads live as long as the backend). NULL when out of memory. */
typedef struct { float *buf; size_t cap; } kept_buffer;

static float *grown(kept_buffer *b, size_t n) {
    if (n > b->cap) {
        free(b->buf);
        b->cap = (n + 1023) & ~(size_t)1023;
        b->buf = aligned_alloc(64, b->cap * sizeof(float));
        if (b->buf == NULL)
            b->cap = 0;
    }
    return b->buf;
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
    blas_on_this_thread_only();

    int64_t block = pr[P_BLOCK];
    if (block <= 0) {
        block = BLOCK_BYTES / ((int64_t)CKK * (int64_t)sizeof(float));
        block = block < MIN_BLOCK ? MIN_BLOCK : (block + 15) & ~(int64_t)15;
    }
    if (block > P)
        block = P;
    if (pr[P_BLOCK] <= 0 && nth > 1 && (int64_t)N * G < 4 * nth) {
        /* few images: as many blocks an image as make the items a multiple of the threads (an even share) */
        int64_t nb = (P + block - 1) / block, per = (int64_t)N * G;
        int64_t want = ((nb * per + nth - 1) / nth) * nth;
        nb = (want + per - 1) / per;
        block = ((P + nb - 1) / nb + 15) & ~(int64_t)15;
        block = block > P ? P : block;
    }
    const int64_t nblocks = (P + block - 1) / block, items = (int64_t)N * G * nblocks;
    /* items this thread takes, and the output channels it computes of each */
    int64_t i0 = 0, i1 = items;
    int o0 = 0, o1 = Mg;
    if (items >= nth) {
        i0 = items * ith / nth;
        i1 = items * (ith + 1) / nth;
    } else {
        int per = (Mg + nth - 1) / nth;
        o0 = imin(per * ith, Mg);
        o1 = imin(o0 + per, Mg);
        if (o0 >= o1)
            return;
    }
    for (int64_t it = i0; it < i1; it++) {
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
            float *col = scratch((size_t)m * CKK);
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

/* 2-D max pooling of x [W, H, C, N] into dst [OW, OH, C, N] (contiguous): windows of KH x KW cells at
 * strides SH, SW, starting PH, PW cells before the input; cells outside the input never enter a max
 * (ONNX's padding), a window wholly outside gives -FLT_MAX. userdata: int32_t[6] = KH, KW, SH, SW,
 * PH, PW. Each output row is the horizontal window max of the vertical max of its input rows (one
 * contiguous, vectorised pass); ggml's threads split the planes. */
void ggmlpy_maxpool2d_f32(void *dst, int ith, int nth, void *userdata) {
    const int32_t *pr = (const int32_t *)userdata;
    const int KH = pr[0], KW = pr[1], SH = pr[2], SW = pr[3], PH = pr[4], PW = pr[5];
    const void *xt = src_of(dst, 0);
    int64_t xne[4], dne[4];
    ne_of(xt, xne);
    ne_of(dst, dne);
    const int W = (int)xne[0], H = (int)xne[1], OW = (int)dne[0], OH = (int)dne[1];
    const int64_t planes = dne[2] * dne[3];
    const float *x = data_of(xt);
    float *y = data_of(dst);
    float *tmp = scratch((size_t)W);
    const int64_t p0 = planes * ith / nth, p1 = planes * (ith + 1) / nth;
    for (int64_t p = p0; p < p1; p++) {
        const float *xp = x + p * (int64_t)H * W;
        float *yp = y + p * (int64_t)OH * OW;
        for (int oh = 0; oh < OH; oh++) {
            float *out = yp + (int64_t)oh * OW;
            const int h0 = oh * SH - PH, hlo = imax(h0, 0), hhi = imin(h0 + KH, H);
            if (hhi <= hlo || tmp == NULL) {
                for (int ow = 0; ow < OW; ow++)
                    out[ow] = tmp == NULL ? __builtin_nanf("") : -3.40282347e+38f;
                continue;
            }
            memcpy(tmp, xp + (int64_t)hlo * W, (size_t)W * sizeof(float));
            for (int h = hlo + 1; h < hhi; h++) {
                const float *row = xp + (int64_t)h * W;
                for (int w = 0; w < W; w++)
                    tmp[w] = row[w] > tmp[w] ? row[w] : tmp[w];
            }
            for (int ow = 0; ow < OW; ow++) {
                const int w0 = ow * SW - PW, wlo = imax(w0, 0), whi = imin(w0 + KW, W);
                float m = -3.40282347e+38f;
                for (int w = wlo; w < whi; w++)
                    m = tmp[w] > m ? tmp[w] : m;
                out[ow] = m;
            }
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
 * thread's block of dst set to the bias and the product added onto it (beta = 1) by OpenBLAS.
 * Threads split the columns (tokens), or the rows when there are more rows, in blocks of 16. */
void ggmlpy_linear_f32(void *dst, int ith, int nth, void *userdata) {
    (void)userdata;
    const void *wt = src_of(dst, 0), *xt = src_of(dst, 1);
    int64_t wne[4], xne[4];
    ne_of(wt, wne);
    ne_of(xt, xne);
    const int m = (int)wne[0], k = (int)wne[1], n = (int)(xne[1] * xne[2] * xne[3]);
    const float *w = data_of(wt), *x = data_of(xt), *bias = data_of(src_of(dst, 2));
    float *y = data_of(dst);
    blas_on_this_thread_only();
    int i0 = 0, i1 = m, j0 = 0, j1 = n;
    if (n >= m) {
        int per = ((n + nth - 1) / nth + 15) & ~15;
        j0 = imin(per * ith, n);
        j1 = imin(j0 + per, n);
    } else {
        int per = ((m + nth - 1) / nth + 15) & ~15;
        i0 = imin(per * ith, m);
        i1 = imin(i0 + per, m);
    }
    if (i0 >= i1 || j0 >= j1)
        return;
    for (int j = j0; j < j1; j++)
        memcpy(y + (int64_t)j * m + i0, bias + i0, (size_t)(i1 - i0) * sizeof(float));
    cblas_sgemm(ColMajor, NoTrans, NoTrans, i1 - i0, j1 - j0, k, 1.0f, w + i0, m, x + (int64_t)j0 * k, k, 1.0f,
                y + (int64_t)j0 * m + i0, m);
}

/* A linear layer with weights packed at load time, on AVX-512: dst [N, T] = w x (+ bias), as
 * ggmlpy_linear_f32, with the product computed here instead of by OpenBLAS. The weights (the
 * product's first operand, N x K column-major) are packed once into panels of LMR rows, [K][LMR]
 * each (pack_linear in kernels/__init__.py); x is packed per call into panels of LNR columns,
 * [k][LNR], LKC rows of K at a time. The micro-kernel keeps an LMR x LNR block of dst in 24 vector
 * registers (two 16-float vectors a column), starting from the bias, and adds one rank-1 update per
 * k: two loads from the weight panel, LNR broadcasts from x's. OpenBLAS repacks the weights on every
 * call; measured on a transformer's projections (128 tokens, cold caches) 97-104 GFLOP/s against
 * OpenBLAS's 88-94 on one core. Threads split the (column panel, weight panel) pairs evenly.
 * userdata: int32_t[1] = has bias. */
#ifdef __AVX512F__
#include <immintrin.h>

enum { LMR = 32, LNR = 12, LKC = 512 };

int ggmlpy_linear_packed_mr(void) { return LMR; }

static inline void linear_kernel(int kc, const float *restrict a, const float *restrict b, float *c, int64_t ldc,
                                 int first, const float *bias, __mmask16 m0, __mmask16 m1, int nr) {
    __m512 c0[LNR], c1[LNR];
    if (first) {
        const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
        const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
        for (int j = 0; j < LNR; j++) {
            c0[j] = b0;
            c1[j] = b1;
        }
    } else {
#pragma GCC unroll 12
        for (int j = 0; j < LNR; j++) {
            c0[j] = j < nr ? _mm512_maskz_loadu_ps(m0, c + j * ldc) : _mm512_setzero_ps();
            c1[j] = j < nr ? _mm512_maskz_loadu_ps(m1, c + j * ldc + 16) : _mm512_setzero_ps();
        }
    }
    for (int k = 0; k < kc; k++) {
        /* unaligned loads: ggml aligns tensors to 32 bytes only */
        const __m512 a0 = _mm512_loadu_ps(a + LMR * k), a1 = _mm512_loadu_ps(a + LMR * k + 16);
        _mm_prefetch((const char *)(a + LMR * (k + 8)), _MM_HINT_T0);
#pragma GCC unroll 12
        for (int j = 0; j < LNR; j++) {
            const __m512 bj = _mm512_set1_ps(b[LNR * k + j]);
            c0[j] = _mm512_fmadd_ps(a0, bj, c0[j]);
            c1[j] = _mm512_fmadd_ps(a1, bj, c1[j]);
        }
    }
#pragma GCC unroll 12
    for (int j = 0; j < LNR; j++)
        if (j < nr) {
            _mm512_mask_storeu_ps(c + j * ldc, m0, c0[j]);
            _mm512_mask_storeu_ps(c + j * ldc + 16, m1, c1[j]);
        }
}

/* this thread's buffer for x's packed panels (apart from the convolution's patch buffer) */
static float *panel_scratch(size_t n) {
    static __thread kept_buffer b;
    return grown(&b, n);
}

void ggmlpy_linear_packed_f32(void *dst, int ith, int nth, void *userdata) {
    const int has_bias = ((const int32_t *)userdata)[0];
    const void *wt = src_of(dst, 0), *xt = src_of(dst, 1);
    int64_t wne[4], xne[4], dne[4];
    ne_of(wt, wne);
    ne_of(xt, xne);
    ne_of(dst, dne);
    const int K = (int)wne[1], npan = (int)wne[2], N = (int)dne[0];
    const int T = (int)(xne[1] * xne[2] * xne[3]);
    const float *wp = data_of(wt), *x = data_of(xt);
    const float *bias = has_bias ? data_of(src_of(dst, 2)) : NULL;
    float *y = data_of(dst);
    const int ncp = (T + LNR - 1) / LNR;  /* x's column panels */
    /* this thread's share of the (column panel, weight panel) pairs, column-panel-major */
    const int64_t units = (int64_t)ncp * npan, u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1)
        return;
    float *bp = panel_scratch((size_t)LKC * LNR);
    for (int64_t cp = u0 / npan; cp <= (u1 - 1) / npan; cp++) {
        const int q0 = cp == u0 / npan ? (int)(u0 % npan) : 0;
        const int q1 = cp == (u1 - 1) / npan ? (int)((u1 - 1) % npan) + 1 : npan;
        const int jr = (int)cp * LNR, nr = imin(LNR, T - jr);
        if (bp == NULL) {  /* out of memory (24 KB): never a silently wrong value */
            for (int j = jr; j < jr + nr; j++)
                for (int i = q0 * LMR; i < N && i < q1 * LMR; i++)
                    y[(int64_t)j * N + i] = __builtin_nanf("");
            continue;
        }
        for (int pc = 0; pc < K; pc += LKC) {
            const int kc = imin(LKC, K - pc);
            for (int j = 0; j < nr; j++) {  /* x[pc:pc+kc, jr:jr+nr] as [k][LNR], zero past T */
                const float *col = x + (int64_t)(jr + j) * K + pc;
                for (int k = 0; k < kc; k++)
                    bp[k * LNR + j] = col[k];
            }
            for (int j = nr; j < LNR; j++)
                for (int k = 0; k < kc; k++)
                    bp[k * LNR + j] = 0.0f;
            for (int p = q0; p < q1; p++) {
                const int ir = p * LMR, mr = imin(LMR, N - ir);
                const __mmask16 m0 = mr >= 16 ? 0xFFFF : (__mmask16)((1u << mr) - 1);
                const __mmask16 m1 = mr >= 32 ? 0xFFFF : mr > 16 ? (__mmask16)((1u << (mr - 16)) - 1) : 0;
                linear_kernel(kc, wp + ((int64_t)p * K + pc) * LMR, bp, y + (int64_t)jr * N + ir, N, pc == 0,
                              bias ? bias + ir : NULL, m0, m1, nr);
            }
        }
    }
}

/* The convolution of ggmlpy_conv2d_f32 on AVX-512 with its weights packed at load (pack_linear of
 * W^T: panels of LMR output channels, [C*KH*KW][LMR]): out^T (M x P) = W (M x CKK) col^T (CKK x P),
 * the orientation of the linear layers above, whose x panels ([k][LNR pixels]) are exactly what
 * im2col_block writes for a strip of LNR pixels. Each LMR x LNR block is computed over the whole of
 * CKK into registers (starting from the bias), then written to the NCHW output a channel row at a
 * time with the residual and ReLU. Work items are (image, group, a run of strips) times channel
 * panels, split evenly over the threads. userdata as ggmlpy_conv2d_f32's. */
#define CONV_STRIP_BYTES (256 * 1024)

void ggmlpy_conv2d_packed_f32(void *dst, int ith, int nth, void *userdata) {
    const conv_args op = conv_args_of(dst, (const int32_t *)userdata);
    const geom g = op.g;
    const int N = op.N, G = op.G, Mg = op.Mg, flags = op.flags;
    const int CKK = (int)op.wne[1], npan = (int)op.wne[2] / G;  /* each group's channels: npan panels */
    const int64_t P = op.P, in_plane = op.in_plane;
    const float *x = op.x, *wp = op.w, *bias = op.bias, *res = op.res;
    float *y = op.y;
    const int64_t strips = (P + LNR - 1) / LNR;
    int64_t run = CONV_STRIP_BYTES / ((int64_t)LNR * CKK * (int64_t)sizeof(float));
    run = run < 1 ? 1 : run > strips ? strips : run;
    const int64_t runs = (strips + run - 1) / run, items = (int64_t)N * G * runs;
    /* this thread's share of the (item, channel panel) pairs: whole items, and at most one item at
     * each end shared with the next thread (whose patches both then build) */
    const int64_t units = items * npan, u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1)
        return;
    float *col = scratch((size_t)run * LNR * CKK);
    float tile[LNR * LMR] __attribute__((aligned(64)));
    for (int64_t it = u0 / npan; it <= (u1 - 1) / npan; it++) {
        const int q0 = it == u0 / npan ? (int)(u0 % npan) : 0;
        const int q1 = it == (u1 - 1) / npan ? (int)((u1 - 1) % npan) + 1 : npan;
        const int64_t ri = it % runs, ng = it / runs;
        const int gi = (int)(ng % G), n = (int)(ng / G);
        const int64_t s0 = ri * run, s1 = s0 + run < strips ? s0 + run : strips;
        const float *xg = x + ((int64_t)n * G + gi) * g.C * in_plane;
        float *out = y + ((int64_t)n * G + gi) * Mg * P;
        const float *rg = res ? res + ((int64_t)n * G + gi) * Mg * P : NULL;
        if (col == NULL) {  /* out of memory (a few hundred KB): never a silently wrong value */
            for (int64_t o = (int64_t)q0 * LMR; o < Mg && o < (int64_t)q1 * LMR; o++)
                for (int64_t p = s0 * LNR; p < P && p < s1 * LNR; p++)
                    out[o * P + p] = __builtin_nanf("");
            continue;
        }
        {  /* the run's patches as one block (long contiguous runs), then cut into [k][LNR] strips */
            const int64_t p0 = s0 * LNR, m = (P < s1 * LNR ? P : s1 * LNR) - p0, ld = (s1 - s0) * LNR;
            float *blk = panel_scratch((size_t)ld * CKK);
            if (blk == NULL) {
                col = NULL;
                it--;
                continue;
            }
            if (m < ld)
                for (int r = 0; r < CKK; r++)
                    memset(blk + (int64_t)r * ld + m, 0, (size_t)(ld - m) * sizeof(float));
            im2col_block(xg, blk, p0, m, ld, &g);
            for (int64_t s = s0; s < s1; s++) {
                float *c = col + (s - s0) * LNR * CKK;
                const float *b = blk + (s - s0) * LNR;
                for (int r = 0; r < CKK; r++)
                    memcpy(c + (int64_t)r * LNR, b + (int64_t)r * ld, LNR * sizeof(float));
            }
        }
        for (int64_t s = s0; s < s1; s++) {
            const int64_t p0 = s * LNR;
            const int m = (int)(P - p0 < LNR ? P - p0 : LNR);
            const float *c = col + (s - s0) * LNR * CKK;
            for (int q = q0; q < q1; q++) {
                const int o0 = q * LMR, mr = imin(LMR, Mg - o0);
                linear_kernel(CKK, wp + ((int64_t)gi * npan + q) * CKK * LMR, c, tile, LMR, 1,
                              bias ? bias + gi * Mg + o0 : NULL, 0xFFFF, 0xFFFF, LNR);
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
int ggmlpy_linear_packed_mr(void) { return 0; }  /* no AVX-512: linear layers use ggmlpy_linear_f32 */

void ggmlpy_conv2d_packed_f32(void *dst, int ith, int nth, void *userdata) {
    (void)dst; (void)ith; (void)nth; (void)userdata;
}

void ggmlpy_linear_packed_f32(void *dst, int ith, int nth, void *userdata) {
    (void)dst; (void)ith; (void)nth; (void)userdata;
}
#endif
