/* Scaled dot-product attention as one ggml custom op: softmax(scale Q K^T + mask) V for every
 * (batch, head), as exporters write it in ONNX (MatMul, an optional scale and mask, Softmax over
 * the keys, MatMul). Node by node that is two batched products with the score matrix written out,
 * read back by the softmax and again by the second product; here each block of queries keeps its
 * scores in a buffer of its own (one row per query, S keys), from the first product to the second.
 *
 * Operands are read through their strides (ggml ne / nb), so views (a head slice of a projection,
 * a transposed copy's source) need no copy: q ne [D, L, H, B] (q(c, i) the c-th feature of query
 * i), kt ne [S, D, H, B] (ONNX's K^T [B, H, D, S]: kt(j, c)), v ne [E, S, H, B], mask ne
 * [S | 1, L | 1, H | 1, B | 1] (ONNX broadcasting: a dimension of 1 is repeated); the operands' H
 * and B may also be 1. dst ne [E, L, H, B] contiguous (ONNX's [B, H, L, E]), or with heads inner
 * [E, H, L, B] (a query's heads side by side: ONNX's [B, L, H, E], what the output projection reads
 * once the heads are transposed back). userdata: int32_t[3] = the bits of the float scale, has mask
 * (the mask is the fourth argument), heads inner.
 *
 * Per (batch, head), K^T is packed into [D][Sp] (Sp: S rounded up to 16, zeros past S) and V into
 * [S][Ep]; per block of QR queries, the scores are QR rows of Sp, the softmax is taken in place
 * (max subtracted, exp, the sum kept) and the second product is normalised by 1 / sum as it is
 * stored. A row with a NaN score is NaN throughout; one whose every key is masked with -inf is NaN
 * too (-inf - (-inf)), as onnxruntime's Softmax gives. Threads split the (batch, head, block of
 * QC queries) units evenly; a thread packs a head's K and V once for the units it takes of it.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fields.h"
#include "kept_buffer.h"
#include "vmath.h"

enum { QR = 6, QC = 48 };  /* queries a register block, queries a unit (a multiple of QR) */
#ifdef VW
/* vectors of keys (or values) a register block: QR x NV accumulators, with the NV loads and a
 * broadcast, within the 32 registers of AVX-512 or the 16 of AVX2 */
#define NV (VW == 16 ? 4 : 2)
#endif

typedef struct { int64_t ne[4], nb[4]; const char *data; } view;

static view view_of(const void *t) {
    view v;
    ne_of(t, v.ne);
    nb_of(t, v.nb);
    v.data = (const char *)data_of(t);
    return v;
}

/* element (i0, i1) of batch matrix (h, b), a dimension of 1 broadcast */
static inline const float *ptr(const view *v, int64_t i0, int64_t i1, int64_t h, int64_t b) {
    return (const float *)(v->data + (v->ne[0] == 1 ? 0 : i0 * v->nb[0]) + (v->ne[1] == 1 ? 0 : i1 * v->nb[1]) +
                            (v->ne[2] == 1 ? 0 : h * v->nb[2]) + (v->ne[3] == 1 ? 0 : b * v->nb[3]));
}

static inline float at(const view *v, int64_t i0, int64_t i1, int64_t h, int64_t b) { return *ptr(v, i0, i1, h, b); }

/* this thread's scratch (kept_buffer.h) */
static float *scratch(size_t n) {
    static __thread kept_buffer b;
    return grown(&b, n);
}

static int64_t round16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* Batch matrix (h, b) of x (ne0 = n0, ne1 = n1) into out as n1 rows of ld floats, out[i1][i0] =
 * x(i0, i1), zeros past n0. The loops run along whichever axis is contiguous in memory (a
 * transposed copy's source: along i1). */
static void pack_rows(const view *x, int64_t h, int64_t b, int64_t n0, int64_t n1, int64_t ld, float *out) {
    const char *base = (const char *)ptr(x, 0, 0, h, b);
    const int64_t s0 = x->ne[0] == 1 ? 0 : x->nb[0], s1 = x->ne[1] == 1 ? 0 : x->nb[1];
    for (int64_t i1 = 0; i1 < n1; i1++)
        memset(out + i1 * ld + n0, 0, (size_t)(ld - n0) * sizeof(float));
#ifdef VW
    if (s0 == (int64_t)sizeof(float)) {  /* rows of x are rows of out */
        for (int64_t i1 = 0; i1 < n1; i1++)
            memcpy(out + i1 * ld, base + i1 * s1, (size_t)n0 * sizeof(float));
        return;
    }
    if (s1 == (int64_t)sizeof(float)) {  /* a transposed copy's source: VW x VW blocks transposed in registers */
        for (int64_t a0 = 0; a0 < n0; a0 += VW)
            for (int64_t a1 = 0; a1 < n1; a1 += VW) {
                const int m0 = (int)(n0 - a0 < VW ? n0 - a0 : VW), m1 = (int)(n1 - a1 < VW ? n1 - a1 : VW);
                const vmask k0 = vfirst(m0), k1 = vfirst(m1);
                vf r[VW], o[VW];
                for (int i = 0; i < VW; i++)
                    r[i] = i < m0 ? vloadu_mask(k1, (const float *)(base + (a0 + i) * s0 + a1 * s1)) : vzero();
                vtranspose(r, o);
                for (int j = 0; j < m1; j++)
                    vstoreu_mask(out + (a1 + j) * ld + a0, k0, o[j]);
            }
        return;
    }
#endif
    if (s0 != (int64_t)sizeof(float) && s1 == (int64_t)sizeof(float))
        for (int64_t i0 = 0; i0 < n0; i0++) {
            const float *row = (const float *)(base + i0 * s0);
            for (int64_t i1 = 0; i1 < n1; i1++)
                out[i1 * ld + i0] = row[i1];
        }
    else
        for (int64_t i1 = 0; i1 < n1; i1++)
            for (int64_t i0 = 0; i0 < n0; i0++)
                out[i1 * ld + i0] = *(const float *)(base + i0 * s0 + i1 * s1);
}

#ifdef VW
/* sc[r][j0 .. j0 + VW nv) = sum_c qr[r][c] kp[c][j0 ..] for the QR query rows of a block */
static inline __attribute__((always_inline)) void scores(const float *const *qr, const float *kp, int64_t D, int64_t Sp,
                                                         int64_t j0, int nv, float *sc) {
    vf acc[QR][NV];
    for (int r = 0; r < QR; r++)
        for (int u = 0; u < NV; u++)
            acc[r][u] = vzero();
    for (int64_t c = 0; c < D; c++) {
        vf k[NV];
        for (int u = 0; u < nv; u++)
            k[u] = vload(kp + c * Sp + j0 + VW * u);
        for (int r = 0; r < QR; r++) {
            const vf q = vset1(qr[r][c]);
            for (int u = 0; u < nv; u++)
                acc[r][u] = vfmadd(k[u], q, acc[r][u]);
        }
    }
    for (int r = 0; r < QR; r++)
        for (int u = 0; u < nv; u++)
            vstore(sc + r * Sp + j0 + VW * u, acc[r][u]);
}

/* o[r][e0 .. e0 + VW nv) = inv[r] sum_j sc[r][j] vp[j][e0 ..] (o's rows ldo apart), stored for rows < rows
 * and e < E */
static inline __attribute__((always_inline)) void values(const float *sc, const float *vp, int64_t S, int64_t Sp,
                                                         int64_t Ep, int64_t e0, int nv, const float *inv, float *o,
                                                         int64_t ldo, int64_t E, int rows) {
    vf acc[QR][NV];
    for (int r = 0; r < QR; r++)
        for (int u = 0; u < NV; u++)
            acc[r][u] = vzero();
    for (int64_t j = 0; j < S; j++) {
        vf x[NV];
        for (int u = 0; u < nv; u++)
            x[u] = vload(vp + j * Ep + e0 + VW * u);
        for (int r = 0; r < QR; r++) {
            const vf p = vset1(sc[r * Sp + j]);
            for (int u = 0; u < nv; u++)
                acc[r][u] = vfmadd(x[u], p, acc[r][u]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int u = 0; u < nv; u++) {
            const int64_t e = e0 + VW * u;
            vstoreu_n(o + r * ldo + e, E - e, vmul(acc[r][u], vset1(inv[r])));
        }
}

/* softmax of row scale x[0 .. S) + mask[0 .. S) (mask NULL: none) in place (the exps; the scaling
 * and the mask applied in the pass that finds the maximum), returning 1 / their sum */
static float softmax_row(float *x, int64_t S, float scale, const float *mask) {
    const vf vs = vset1(scale);
    vf mx = vset1(-INFINITY);
    int64_t j = 0;
    for (; j + VW <= S; j += VW) {
        const vf y = mask ? vfmadd(vload(x + j), vs, vloadu(mask + j)) : vmul(vload(x + j), vs);
        vstore(x + j, y);
        mx = vmax(mx, y);
    }
    float m = vhmax(mx);
    for (; j < S; j++) {
        x[j] = mask ? fmaf(x[j], scale, mask[j]) : x[j] * scale;
        m = x[j] > m ? x[j] : m;
    }
    const vf vm = vset1(m);
    vf sum = vzero();
    for (j = 0; j + VW <= S; j += VW) {
        const vf e = vexp(vsub(vload(x + j), vm));
        vstore(x + j, e);
        sum = vadd(sum, e);
    }
    if (j < S) {
        const vmask k = vfirst(S - j);
        const vf e = vkeep(k, vexp(vsub(vloadu_mask(k, x + j), vm)));
        vstoreu_mask(x + j, k, e);
        sum = vadd(sum, e);
    }
    return 1.0f / vsum(sum);
}

int ggmlpy_attention_vector_math(void) { return 1; }
#else
static void scores_any(const float *const *qr, const float *kp, int64_t D, int64_t Sp, int64_t j0, int64_t j1,
                       float *sc) {
    for (int r = 0; r < QR; r++)
        for (int64_t j = j0; j < j1; j++) {
            float s = 0.0f;
            for (int64_t c = 0; c < D; c++)
                s += qr[r][c] * kp[c * Sp + j];
            sc[r * Sp + j] = s;
        }
}

static float softmax_row(float *x, int64_t S, float scale, const float *mask) {
    float m = -INFINITY;
    for (int64_t j = 0; j < S; j++) {
        x[j] = mask ? fmaf(x[j], scale, mask[j]) : x[j] * scale;
        m = x[j] > m ? x[j] : m;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < S; j++) {
        x[j] = expf(x[j] - m);
        sum += x[j];
    }
    return 1.0f / sum;
}

int ggmlpy_attention_vector_math(void) { return 0; }
#endif

void ggmlpy_attention_f32(void *dst, int ith, int nth, void *userdata) {
    const int32_t *pr = (const int32_t *)userdata;
    float scale;
    memcpy(&scale, pr, sizeof scale);
    const int has_mask = pr[1], inner = pr[2];
    view q = view_of(src_of(dst, 0)), kt = view_of(src_of(dst, 1)), v = view_of(src_of(dst, 2)), mk;
    if (has_mask)
        mk = view_of(src_of(dst, 3));
    int64_t dne[4];
    ne_of(dst, dne);
    const int64_t E = dne[0], L = dne[inner ? 2 : 1], H = dne[inner ? 1 : 2], B = dne[3], D = q.ne[0], S = kt.ne[0];
    const int64_t ldo = inner ? H * E : E;  /* dst's rows: query i of (b, h) at out + row(b, h, i) * E */
#define ROW(b, h, i) (inner ? ((b) * L + (i)) * H + (h) : ((b) * H + (h)) * L + (i))
    const int64_t Sp = round16(S), Ep = round16(E);
    float *out = data_of(dst);
    const int64_t blocks = (L + QC - 1) / QC, units = B * H * blocks;
    const int64_t u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 >= u1)
        return;
    /* K^T [D][Sp], V [S][Ep], scores [QR][Sp], the block's strided queries copied [QR][D], 1 / sums
     * [QR], D zeros: the first four 64-byte aligned (the first three are read with aligned loads) */
    float *kp = scratch((size_t)(D * Sp + S * Ep + QR * Sp + round16(D * QR) + 16 + D));
    if (kp == NULL) {  /* out of memory: never a silently wrong value */
        for (int64_t u = u0; u < u1; u++) {
            const int64_t bh = u / blocks, i0 = (u % blocks) * QC, i1 = i0 + QC < L ? i0 + QC : L;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t e = 0; e < E; e++)
                    out[ROW(bh / H, bh % H, i) * E + e] = __builtin_nanf("");
        }
        return;
    }
    float *vp = kp + D * Sp, *sc = vp + S * Ep, *qb = sc + QR * Sp, *inv = qb + round16(D * QR);
    const float *zero = inv + 16;  /* D zeros: the query rows past L */
    memset(inv + 16, 0, (size_t)D * sizeof(float));
    int64_t packed = -1;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t bh = u / blocks, h = bh % H, b = bh / H;
        if (bh != packed) {
            pack_rows(&kt, h, b, S, D, Sp, kp);
            pack_rows(&v, h, b, E, S, Ep, vp);
            packed = bh;
        }
        const int64_t i0 = (u % blocks) * QC, i1 = i0 + QC < L ? i0 + QC : L;
        for (int64_t ib = i0; ib < i1; ib += QR) {
            const int rows = (int)(i1 - ib < QR ? i1 - ib : QR);
            const float *qr[QR];  /* the block's query rows, read in place when contiguous */
            for (int r = 0; r < QR; r++) {
                const float *row = r < rows ? ptr(&q, 0, ib + r, h, b) : zero;
                if (r < rows && D > 1 && q.nb[0] != (int64_t)sizeof(float)) {
                    for (int64_t c = 0; c < D; c++)
                        qb[r * D + c] = *(const float *)((const char *)row + c * q.nb[0]);
                    row = qb + r * D;
                }
                qr[r] = row;
            }
#ifdef VW
            int64_t j0 = 0;
            for (; j0 + NV * VW <= Sp; j0 += NV * VW)
                scores(qr, kp, D, Sp, j0, NV, sc);
            switch ((Sp - j0) / VW) {
#if VW == 16
            case 3: scores(qr, kp, D, Sp, j0, 3, sc); break;
            case 2: scores(qr, kp, D, Sp, j0, 2, sc); break;
#endif
            case 1: scores(qr, kp, D, Sp, j0, 1, sc); break;
            default: break;
            }
#else
            scores_any(qr, kp, D, Sp, 0, S, sc);
#endif
            for (int r = 0; r < rows; r++) {
                float *x = sc + r * Sp;
                const int64_t i = ib + r;
                const float *m = NULL;  /* a mask row contiguous along the keys: softmax_row adds it */
                float s = scale;
                if (has_mask && mk.ne[0] == S && mk.nb[0] == sizeof(float))
                    m = ptr(&mk, 0, i, h, b);
                else if (has_mask) {  /* read through its strides (a key dimension of 1): added here */
                    for (int64_t j = 0; j < S; j++)
                        x[j] = x[j] * scale + at(&mk, j, i, h, b);
                    s = 1.0f;
                }
                inv[r] = softmax_row(x, S, s, m);
            }
            for (int r = rows; r < QR; r++)  /* rows past L (their scores are 0): never stored */
                inv[r] = 0.0f;
            float *o = out + ROW(b, h, ib) * E;
#ifdef VW
            int64_t e0 = 0;
            for (; e0 + NV * VW <= Ep; e0 += NV * VW)
                values(sc, vp, S, Sp, Ep, e0, NV, inv, o, ldo, E, rows);
            switch ((Ep - e0) / VW) {
#if VW == 16
            case 3: values(sc, vp, S, Sp, Ep, e0, 3, inv, o, ldo, E, rows); break;
            case 2: values(sc, vp, S, Sp, Ep, e0, 2, inv, o, ldo, E, rows); break;
#endif
            case 1: values(sc, vp, S, Sp, Ep, e0, 1, inv, o, ldo, E, rows); break;
            default: break;
            }
#else
            for (int r = 0; r < rows; r++)
                for (int64_t e = 0; e < E; e++) {
                    float s = 0.0f;
                    for (int64_t j = 0; j < S; j++)
                        s += sc[r * Sp + j] * vp[j * Ep + e];
                    o[r * ldo + e] = s * inv[r];
                }
#endif
        }
    }
#undef ROW
}
