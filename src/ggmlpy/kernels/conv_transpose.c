/* ONNX's 2-D ConvTranspose for ggml's CPU backend as a ggml custom op, summed as onnxruntime's CPU
 * provider sums it, so that a value lands on onnxruntime's float bit for bit and a QuantizeLinear
 * after it (a float ConvTranspose between quantized ops) on onnxruntime's integer.
 *
 * onnxruntime computes, per image and group, a product of the weights (rows: output channel x kernel
 * position) and the input (columns: input pixels) over the group's input channels into a column
 * buffer (MLAS's SGEMM), then col2im: each output value starts at 0 and gets its kernel positions'
 * columns added in order (kernel row, then column), then the bias. MLAS's SGEMM makes each product
 * value a chain of fused multiply-adds over the input channels in blocks of its K stride (`kblock`:
 * the caller computes it from the shape as MLAS does), each block's chain starting from zero and the
 * blocks' sums added in order. Builds without FMA multiply, then add, as MLAS's SSE and AVX kernels.
 *
 * Arguments (ggml_custom_4d): x ne [W, H, C, N]; w ne [Mg*KH*KW, C/group, group] (ONNX's weights
 * (C, M/group, KH, KW) as they are: row c holds output channel m's kernel positions at m*KH*KW);
 * bias [M] (optional); dst ne [OW, OH, M, N]; all contiguous f32.
 * userdata: int32_t[11] = KH, KW, stride h, w, dilation h, w, pad top, pad left, group, kblock, has bias.
 * Work: blocks of whole output planes (about BLOCK_ROWS product rows), each computed alone from its
 * inputs, every value in the order above whatever the tiling: a result does not depend on the threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fields.h"
#include "kept_buffer.h"
#include "vmath.h"

/* product rows a tile (accumulators: ROWS x PIXELS vectors, of AVX-512's 32 registers or AVX2's 16) */
#if defined(VW) && VW == 16
#define ROWS 8
#else
#define ROWS 4
#endif
#define PIXELS 3 /* vectors of pixels a tile */
#ifdef VW
#define VECTOR_FLOATS VW
#else
#define VECTOR_FLOATS 0 /* the scalar path copies nothing */
#endif
#define BLOCK_ROWS 32 /* product rows a unit of work computes over each tile of pixels (whole output planes) */

static inline float mul_add(float a, float b, float c) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

struct product {
    const float *a;  /* the group's weights: a[k * lda + r] */
    const float *x;  /* the image's group input: x[k * hw + p] */
    int64_t lda, hw, k, kblock;
    int64_t ldc;     /* col's row stride */
    float *pack;     /* the vector path's copy of a unit's rows, a tile's ROWS weights of each k side by side */
    const float *xt; /* and of the input, a tile of pixels after another, each k's PIXELS vectors side by side
                        (zeros past the end): pack_input's */
};

#ifdef VW
/* col[i][p0 .. p0 + np) for the rows whose weights ap packs, i < rows (rows and full constant after inlining) */
static inline __attribute__((always_inline)) void tile(const struct product *pr, float *col, const float *ap,
                                                        const float *xs, int rows, int64_t p0, int64_t np, int full) {
    for (int64_t k0 = 0; k0 < pr->k; k0 += pr->kblock) {
        const int64_t k1 = k0 + pr->kblock < pr->k ? k0 + pr->kblock : pr->k;
        vf acc[ROWS][PIXELS];
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < PIXELS; j++)
                acc[i][j] = vzero();
        for (int64_t k = k0; k < k1; k++) {
            const float *xk = xs + k * PIXELS * VW;
            vf xv[PIXELS];
            for (int j = 0; j < PIXELS; j++)
                xv[j] = vloadu(xk + j * VW);
            const float *ak = ap + k * ROWS;
            for (int i = 0; i < rows; i++) {
                const vf av = vset1(ak[i]);
                for (int j = 0; j < PIXELS; j++)
                    acc[i][j] = vfmadd(av, xv[j], acc[i][j]);
            }
        }
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < PIXELS; j++) {
                float *c = col + i * pr->ldc + p0 + j * VW;
                const int64_t n = np - j * VW;
                if (n <= 0)
                    break;
                const vf v = k0 == 0 ? acc[i][j] : vadd(vloadu_n(c, n), acc[i][j]);
                if (full)
                    vstoreu(c, v);
                else
                    vstoreu_n(c, n, v);
            }
    }
}

/* The image's group input x (k rows of hw pixels) as the tiles read it: its rows of channels lie a plane
 * apart, which the cache's sets alias (a 32 x 32 plane's are 4 KB apart); copied once per image and group,
 * each row read in order. */
static void pack_input(const float *x, int64_t hw, int64_t k, float *xt) {
    const int64_t step = PIXELS * VW, tiles = (hw + step - 1) / step;
    for (int64_t c = 0; c < k; c++)
        for (int64_t t = 0; t < tiles; t++)
            for (int j = 0; j < PIXELS; j++)
                vstoreu(xt + (t * k + c) * step + j * VW,
                        vloadu_n(x + c * hw + t * step + j * VW, hw - t * step - j * VW));
}

/* col rows [0, nrows) (product rows r0 + i): a tile of pixels at a time, all rows' tiles over it, so that
 * the tile's input columns are read from cache by every row */
static void product(const struct product *pr, float *col, int64_t r0, int64_t nrows) {
    const int64_t step = PIXELS * VW;
    for (int64_t r = 0; r < nrows; r += ROWS)
        for (int64_t k = 0; k < pr->k; k++)
            for (int i = 0; i < ROWS; i++)
                pr->pack[(r * pr->k + k * ROWS) + i] = r + i < nrows ? pr->a[k * pr->lda + r0 + r + i] : 0.0f;
#define ROW_TILES(NP, FULL)                                                    \
    for (int64_t r = 0; r < nrows; r += ROWS) {                                \
        switch (nrows - r < ROWS ? nrows - r : ROWS) {                         \
        case 8: tile(pr, col + r * pr->ldc, pr->pack + r * pr->k, xs, 8, p, NP, FULL); break;     \
        case 7: tile(pr, col + r * pr->ldc, pr->pack + r * pr->k, xs, 7, p, NP, FULL); break;     \
        case 6: tile(pr, col + r * pr->ldc, pr->pack + r * pr->k, xs, 6, p, NP, FULL); break;     \
        case 5: tile(pr, col + r * pr->ldc, pr->pack + r * pr->k, xs, 5, p, NP, FULL); break;     \
        case 4: tile(pr, col + r * pr->ldc, pr->pack + r * pr->k, xs, 4, p, NP, FULL); break;     \
        case 3: tile(pr, col + r * pr->ldc, pr->pack + r * pr->k, xs, 3, p, NP, FULL); break;     \
        case 2: tile(pr, col + r * pr->ldc, pr->pack + r * pr->k, xs, 2, p, NP, FULL); break;     \
        default: tile(pr, col + r * pr->ldc, pr->pack + r * pr->k, xs, 1, p, NP, FULL); break;    \
        }                                                                      \
    }
    int64_t p = 0;
    const float *xs = pr->xt;
    for (; p + step <= pr->hw; p += step, xs += pr->k * step)
        ROW_TILES(step, 1)
    if (p < pr->hw)
        ROW_TILES(pr->hw - p, 0)
#undef ROW_TILES
}
#else
static void product(const struct product *pr, float *col, int64_t r0, int64_t nrows) {
    for (int64_t i = 0; i < nrows; i++)
        for (int64_t p = 0; p < pr->hw; p++) {
            float c = 0.0f;
            for (int64_t k0 = 0; k0 < pr->k; k0 += pr->kblock) {
                const int64_t k1 = k0 + pr->kblock < pr->k ? k0 + pr->kblock : pr->k;
                float acc = 0.0f;
                for (int64_t k = k0; k < k1; k++)
                    acc = mul_add(pr->a[k * pr->lda + r0 + i], pr->x[k * pr->hw + p], acc);
                c = k0 == 0 ? acc : c + acc;
            }
            col[i * pr->ldc + p] = c;
        }
}
#endif

/* the first input index i in [0, n) whose output i * s + off lies in [0, on) (n where none does) */
static inline int64_t first_in(int64_t off, int64_t s, int64_t n, int64_t on) {
    const int64_t i = off >= 0 ? 0 : (-off + s - 1) / s;
    return i < n && i * s + off < on ? i : n;
}

/* one past the last such input index (at least first_in's) */
static inline int64_t end_in(int64_t off, int64_t s, int64_t n, int64_t on) {
    const int64_t lo = first_in(off, s, n, on);
    if (lo == n)
        return n;
    const int64_t hi = (on - 1 - off) / s + 1;  /* on - 1 - off >= lo * s >= 0 here */
    return hi < n ? hi : n;
}

/* this thread's column buffer (kept_buffer.h) */
static float *scratch(size_t n) {
    static __thread kept_buffer b;
    return grown(&b, n);
}

void ggmlpy_conv_transpose_f32(void *dst, int ith, int nth, void *userdata) {
    const int32_t *q = (const int32_t *)userdata;
    const int kh = q[0], kw = q[1], sh = q[2], sw = q[3], dh = q[4], dw = q[5], pt = q[6], pl = q[7];
    const int group = q[8], has_bias = q[10];
    const void *tx = src_of(dst, 0), *tw = src_of(dst, 1);
    int64_t xne[4], yne[4];
    ne_of(tx, xne);
    ne_of(dst, yne);
    const int64_t W = xne[0], H = xne[1], C = xne[2], N = xne[3];
    const int64_t OW = yne[0], OH = yne[1], M = yne[2];
    const int64_t kk = (int64_t)kh * kw, Cg = C / group, Mg = M / group, hw = W * H, ohw = OW * OH;
    const float *x = data_of(tx), *w = data_of(tw);
    const float *bias = has_bias ? data_of(src_of(dst, 2)) : NULL;
    float *y = data_of(dst);
    /* a unit of work: PB output planes of one image and group (their product rows are consecutive) */
    const int64_t PB = kk >= BLOCK_ROWS ? 1 : (BLOCK_ROWS / kk < Mg ? BLOCK_ROWS / kk : Mg);
    const int64_t blocks = (Mg + PB - 1) / PB;
    const int64_t step = PIXELS * VECTOR_FLOATS, xpacked = step ? (hw + step - 1) / step * step * Cg : 0;
    const int64_t packed = (PB * kk + ROWS - 1) / ROWS * ROWS * Cg + xpacked;
    /* col's rows 64 bytes more than a plane apart: rows a multiple of 4 KB apart alias in the cache's sets
     * and in the store-to-load checks (a 32 x 32 plane's stride-1 ConvTranspose ran at half speed) */
    const int64_t ldc = hw + 16;
    float *col = scratch((size_t)(PB * kk * ldc + packed));
#ifdef VW
    int64_t packed_for = -1;  /* the image and group whose input the buffer holds */
#endif
    for (int64_t u = ith; u < N * group * blocks; u += nth) {
        const int64_t n = u / (group * blocks), g = u / blocks % group, m0 = u % blocks * PB;
        const int64_t planes = Mg - m0 < PB ? Mg - m0 : PB;
        float *yb = y + (n * M + g * Mg + m0) * ohw;
        if (col == NULL) {  /* out of memory: never a silently wrong value */
            for (int64_t i = 0; i < planes * ohw; i++)
                yb[i] = __builtin_nanf("");
            continue;
        }
        float *xt = col + PB * kk * ldc + packed - xpacked;
        const struct product pr = {w + g * Cg * Mg * kk, x + (n * C + g * Cg) * hw, Mg * kk, hw, Cg, q[9], ldc,
                                   col + PB * kk * ldc, xt};
#ifdef VW
        if (packed_for != n * group + g)
            pack_input(pr.x, hw, Cg, xt);
        packed_for = n * group + g;
#endif
        product(&pr, col, m0 * kk, planes * kk);
        for (int64_t m = 0; m < planes; m++) {
            float *yp = yb + m * ohw;
            for (int64_t i = 0; i < ohw; i++)
                yp[i] = 0.0f;
            for (int a = 0; a < kh; a++)
                for (int b = 0; b < kw; b++) {
                    const float *c = col + (m * kk + a * kw + b) * ldc;
                    const int64_t offy = (int64_t)a * dh - pt, offx = (int64_t)b * dw - pl;
                    const int64_t ih0 = first_in(offy, sh, H, OH), ih1 = end_in(offy, sh, H, OH);
                    const int64_t iw0 = first_in(offx, sw, W, OW), iw1 = end_in(offx, sw, W, OW);
                    for (int64_t ih = ih0; ih < ih1; ih++) {
                        float *yr = yp + (ih * sh + offy) * OW + offx;
                        const float *cr = c + ih * W;
                        if (sw == 1)
                            for (int64_t iw = iw0; iw < iw1; iw++)
                                yr[iw] += cr[iw];
                        else
                            for (int64_t iw = iw0; iw < iw1; iw++)
                                yr[iw * sw] += cr[iw];
                    }
                }
            if (bias != NULL)
                for (int64_t i = 0; i < ohw; i++)
                    yp[i] += bias[g * Mg + m0 + m];
        }
    }
}
