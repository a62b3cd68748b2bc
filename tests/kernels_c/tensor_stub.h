/* Stand-ins for the ggml tensors the kernels read through fields.h (ne, nb, src, data at the
 * offsets the build passes), for the harnesses in this folder: each tensor's data is its own
 * allocation of exactly the size its shape needs, so AddressSanitizer catches a read or write past
 * it. */
#ifndef TENSOR_STUB_H
#define TENSOR_STUB_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { STUB_BYTES = (OFF_SRC > OFF_DATA ? OFF_SRC + 10 * 8 : OFF_DATA + 8) + 64 };

typedef struct { unsigned char bytes[STUB_BYTES]; } tensor;

/* a tensor of shape ne over `data` (not owned), its strides nb (bytes; NULL: contiguous f32) */
static tensor *stub(const int64_t ne[4], const int64_t *nb, const void *data) {
    tensor *t = calloc(1, sizeof *t);
    int64_t b[4] = {4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]};
    memcpy(t->bytes + OFF_NE, ne, 4 * sizeof(int64_t));
    memcpy(t->bytes + OFF_NB, nb ? nb : b, 4 * sizeof(int64_t));
    memcpy(t->bytes + OFF_DATA, &data, sizeof data);
    return t;
}

static void set_src(tensor *t, int i, const tensor *s) { memcpy(t->bytes + OFF_SRC + i * sizeof s, &s, sizeof s); }

/* n floats, exactly: a pseudo-random fill in [-1, 1) from seed */
static float *floats(int64_t n, uint32_t seed) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
    return p;
}

#endif
