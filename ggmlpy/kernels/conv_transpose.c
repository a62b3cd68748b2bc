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
 * Work: the N*M output planes, one at a time, each computed alone from its inputs: a result does not
 * depend on the threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fields.h"
#include "vmath.h"

#define ROWS 4   /* kernel positions a tile (a 2x2 kernel's all) */
#define PIXELS 3 /* vectors of pixels a tile */

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
};

#ifdef VW
/* col[i][p0 .. p0 + np) for rows r0 + i, i < rows (rows and full constant after inlining) */
static inline __attribute__((always_inline)) void tile(const struct product *pr, float *col, int64_t r0, int rows,
                                                        int64_t p0, int64_t np, int full) {
    for (int64_t k0 = 0; k0 < pr->k; k0 += pr->kblock) {
        const int64_t k1 = k0 + pr->kblock < pr->k ? k0 + pr->kblock : pr->k;
        vf acc[ROWS][PIXELS];
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < PIXELS; j++)
                acc[i][j] = vzero();
        for (int64_t k = k0; k < k1; k++) {
            const float *xk = pr->x + k * pr->hw + p0;
            vf xv[PIXELS];
            for (int j = 0; j < PIXELS; j++)
                xv[j] = full ? vloadu(xk + j * VW) : vloadu_n(xk + j * VW, np - j * VW);
            const float *ak = pr->a + k * pr->lda + r0;
            for (int i = 0; i < rows; i++) {
                const vf av = vset1(ak[i]);
                for (int j = 0; j < PIXELS; j++)
                    acc[i][j] = vfmadd(av, xv[j], acc[i][j]);
            }
        }
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < PIXELS; j++) {
                float *c = col + i * pr->hw + p0 + j * VW;
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

static void rows_product(const struct product *pr, float *col, int64_t r0, int rows) {
    const int64_t step = PIXELS * VW;
    int64_t p = 0;
#define TILES(R)                                                     \
    for (; p + step <= pr->hw; p += step)                            \
        tile(pr, col, r0, R, p, step, 1);                            \
    if (p < pr->hw)                                                  \
        tile(pr, col, r0, R, p, pr->hw - p, 0);
    switch (rows) {
    case 4: TILES(4) break;
    case 3: TILES(3) break;
    case 2: TILES(2) break;
    default: TILES(1) break;
    }
#undef TILES
}
#else
static void rows_product(const struct product *pr, float *col, int64_t r0, int rows) {
    for (int i = 0; i < rows; i++)
        for (int64_t p = 0; p < pr->hw; p++) {
            float c = 0.0f;
            for (int64_t k0 = 0; k0 < pr->k; k0 += pr->kblock) {
                const int64_t k1 = k0 + pr->kblock < pr->k ? k0 + pr->kblock : pr->k;
                float acc = 0.0f;
                for (int64_t k = k0; k < k1; k++)
                    acc = mul_add(pr->a[k * pr->lda + r0 + i], pr->x[k * pr->hw + p], acc);
                c = k0 == 0 ? acc : c + acc;
            }
            col[i * pr->hw + p] = c;
        }
}
#endif

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
    float *col = malloc((size_t)(kk * hw) * sizeof(float));
    for (int64_t plane = ith; plane < N * M; plane += nth) {
        if (col == NULL) {  /* out of memory: never a silently wrong value */
            for (int64_t i = 0; i < ohw; i++)
                y[plane * ohw + i] = __builtin_nanf("");
            continue;
        }
        const int64_t n = plane / M, co = plane % M, g = co / Mg, m = co % Mg;
        const struct product pr = {w + g * Cg * Mg * kk, x + (n * C + g * Cg) * hw, Mg * kk, hw, Cg, q[9]};
        for (int64_t r = 0; r < kk; r += ROWS)
            rows_product(&pr, col + r * hw, m * kk + r, (int)(kk - r < ROWS ? kk - r : ROWS));
        float *yp = y + plane * ohw;
        for (int64_t i = 0; i < ohw; i++)
            yp[i] = 0.0f;
        for (int a = 0; a < kh; a++)
            for (int b = 0; b < kw; b++) {
                const float *c = col + (a * kw + b) * hw;
                for (int64_t ih = 0; ih < H; ih++) {
                    const int64_t oy = ih * sh - pt + (int64_t)a * dh;
                    if (oy < 0 || oy >= OH)
                        continue;
                    for (int64_t iw = 0; iw < W; iw++) {
                        const int64_t ox = iw * sw - pl + (int64_t)b * dw;
                        if (ox >= 0 && ox < OW)
                            yp[oy * OW + ox] += c[ih * W + iw];
                    }
                }
            }
        if (bias != NULL)
            for (int64_t i = 0; i < ohw; i++)
                yp[i] += bias[co];
    }
    free(col);
}
